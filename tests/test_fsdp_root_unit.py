"""torchtitan's FSDP2 root unit before 83e69410 (#1094, 2025-07-28), the job field fsdp_root_unit
(planner/memory.py [tt10]), by hand from the code.

pytorch/torchtitan @e7c0cae torchtitan/models/llama3/parallelize_llama.py apply_fsdp (l. 313-367):
each block fully_shard(reshard_after_forward = int(layer_id) < len(model.layers) - 1) under
"default" without PP, then fully_shard(model): the embedding, final norm and output layer are the
root unit's; torch before #154704 (2025-06) keeps the root unsharded after its forward
(_fsdp_state.py _lazy_init: post_forward_mesh_info = None). Against the stack entry (0.3.0:
[norm, output] alone kept unsharded, the embedding resharded, every block resharded), at the
loss's backward peak of Llama 3 8B (V = 128,256, h = 4,096, one block 218,103,808 linear weights
+ 2 x 4,096 norm weights) a rank holds:

  fsdp_unsharded_ends  + 2 B x V h (the embedding's bf16 weight);
  fsdp_gathered_units  + the last block gathered: 2 B a parameter in bf16; under the fp8
                all-gather 1 B a linear weight (torchao fsdp_post_all_gather, memory.py [fa])
                and 2 B a norm weight;
  stream_pools  + 2 B x V h: the all-gather stream's largest flat buffer is the root unit's
                (embedding + output, foreach_all_gather: one buffer a unit), not the embedding's.
"""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.memory import FSDP_TERMS

OUT = 128_256 * 4096  # the embedding's and the output layer's parameters, each
LIN = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # one block's linear weights: wq, wo, wk, wv, w1, w2, w3
NORM = 2 * 4096  # one block's two RMSNorm weights


def _tt(explain, **kw):
    job = dict(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", recompute="selective",
               micro_batch=1, global_batch=8, seq_len=8192)
    return explain(**{**job, **kw})[3]["memory"]


def test_block_count_is_the_models():
    assert LIN == 218_103_808


@pytest.mark.parametrize("extra, last_block", [
    ({}, 2 * (LIN + NORM)),  # bf16: the last block at 2 B a parameter
    ({"precision": "fp8", "fp8_recipe": "tensorwise"}, LIN + 2 * NORM),  # fp8 all-gather: its linears at 1 B
])
def test_root_unit_holds_the_embedding_and_the_last_block(explain, extra, last_block):
    base, root = _tt(explain, **extra), _tt(explain, fsdp_root_unit=True, **extra)
    b, r = base["terms"], root["terms"]
    assert r["fsdp_unsharded_ends"] - b["fsdp_unsharded_ends"] == pytest.approx(2 * OUT, rel=1e-12)
    assert r["fsdp_gathered_units"] - b["fsdp_gathered_units"] == pytest.approx(last_block, rel=1e-12)
    assert r["stream_pools"] - b["stream_pools"] == pytest.approx(2 * OUT, rel=1e-12)
    assert root["allocated_bytes"] - base["allocated_bytes"] == pytest.approx(2 * OUT + last_block, rel=1e-12)
    assert root["reserved_bytes"] - base["reserved_bytes"] == pytest.approx(4 * OUT + last_block, rel=1e-12)
    # nothing else moves: the activations, the loss, the states
    for k in ("layer_activations", "output_activations", "master_weights", "adam", "recompute_buffer", "fsdp_unit_grads",
              "fsdp_unsharded_stage", "fsdp_accumulated_grads"):
        assert r[k] == b[k], k


def test_reshard_always_resharded_the_last_block(explain):
    """fsdp_reshard_after_forward "always" (torchtitan @e7c0cae apply_fsdp: reshard_after_forward
    True for every block): the last block is resharded too; the root is clamped all the same."""
    base = _tt(explain, sharding_mode="fsdp2_reshard_always")
    root = _tt(explain, sharding_mode="fsdp2_reshard_always", fsdp_root_unit=True)
    assert root["terms"]["fsdp_unsharded_ends"] - base["terms"]["fsdp_unsharded_ends"] == pytest.approx(2 * OUT, rel=1e-12)
    assert root["terms"]["fsdp_gathered_units"] == base["terms"]["fsdp_gathered_units"] == 0.0


def test_no_reshard_and_pipeline_hold_everything_already(explain):
    """'never' keeps every unit unsharded from the forward to the backward, and under PP
    (reshard_after_forward False for every unit at @e7c0cae) the stage's weights are whole: the
    root's units are counted there already; only the pool's largest flat buffer moves without
    PP (one root unit holds embedding and output)."""
    base, root = _tt(explain, sharding_mode="fsdp2_no_reshard"), _tt(explain, sharding_mode="fsdp2_no_reshard", fsdp_root_unit=True)
    assert all(root["terms"][k] == base["terms"][k] for k in FSDP_TERMS)
    assert root["terms"]["stream_pools"] - base["terms"]["stream_pools"] == pytest.approx(2 * OUT, rel=1e-12)
    pp = dict(gpus=16, pp=2, global_batch=16)
    assert _tt(explain, fsdp_root_unit=True, **pp)["terms"] == _tt(explain, **pp)["terms"]


def test_fsdp_root_unit_is_not_exported():
    """A code version's FSDP wrapping: no trainer file holds it, so the export refuses it."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=8,
                             seq_len=8192, fsdp_root_unit=True))
    assert plan["fsdp_root_unit"] is True
    with pytest.raises(PlannerError, match="export torchtitan: fsdp_root_unit"):
        export_plan(plan, "torchtitan")


def test_root_reduce_scatter_is_the_end_of_the_backward(explain):
    """The root's post-backward runs in the backward's final callback (its forward inputs, the
    token ids, need no gradient), so the root is reduced last, embedding and output together:
    their bf16 unsharded gradients (2 B) and the fp32 reduce-scatter input (4 B), 6 B x 2 V h,
    beside the states and every fp32 sharded gradient (16 P / 8). 8B, FSDP 8, b 1, s 2048, full
    AC (test_memory_step_mechanisms: 16 P / 8 + 6 B x V h at 0.3.0's units, the embedding's
    reduce-scatter): 6 B x V h more, above the loss's peak with the root's weights."""
    P = 8_030_261_248
    base = _tt(explain, recompute="full", seq_len=2048)
    root = _tt(explain, recompute="full", seq_len=2048, fsdp_root_unit=True)
    ws, rope = base["terms"]["workspaces"], 32 * 2048 * 64 * 8
    assert base["allocated_bytes"] == pytest.approx(16 * P / 8 + 6 * OUT + ws + rope, rel=1e-12)
    assert root["allocated_bytes"] == pytest.approx(16 * P / 8 + 12 * OUT + ws + rope, rel=1e-12)


def test_rule_m13_sets_the_field_on_the_rows_before_1094(tmp_path):
    """planner/memory_rows.py rule M13: the rows whose torchtitan predates 83e69410 (Trainy's
    e7c0cae, PR #996's cc2c31229) carry planner.fsdp_root_unit and become jobs with it; the B200
    rows (6fc499f6, after #1094) and the 2026 rows keep the stack's units."""
    from pathlib import Path

    from planner import memory_rows as mr

    rows = {r.id: r for r in mr.load(Path(__file__).parent / "data" / "memory" / "measured_memory.yaml").memory_rows}
    with_root = {"tt_trainy_h200_llama3_8b_32gpu", "tt_trainy_h200_llama3_8b_64gpu", "tt_pr996_llama3_8b_fsdp8_baseline"}
    for rid in sorted(with_root) + ["ao_mx_b200_llama3_8b_float8_tensorwise", "tt_nvfp4doc_llama_bf16_fsdp4"]:
        fields, _ = mr.measured_job(rows[rid], mr.Result(id=rid, group=""), tmp_path)
        assert fields.get("fsdp_root_unit", False) is (rid in with_root), rid
