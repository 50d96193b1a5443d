"""Issue 21's memory mechanisms that were left unpriced, each by hand from its source
(planner/memory.py [es], [lg2], [cp3], [mr]).

Llama 3 8B: P = 8,030,261,248 parameters; the embedding and the output layer 128,256 x 4,096 =
525,336,576 each; one block 218,103,808."""

from __future__ import annotations

import tomllib

from pathlib import Path

import pytest

from planner.errors import PlannerError
from tests.test_memory_step_mechanisms import OUT, P, _tt  # Llama 3 8B's P, output layer; the torchtitan FSDP 8 job


# ---- [es] torchtitan's optimizer stepped in the backward
def test_early_step_keeps_one_units_sharded_gradients(explain):
    """torchtitan OptimizersInBackwardContainer + FSDP2 foreach_reduce: each unit's fp32 sharded
    gradients are stepped and freed as its reduce-scatter ends, so the reduce-scatter pool holds
    the largest unit's (the embedding's 525,336,576 parameters / 8 x 4 B = 262,668,288 B) instead
    of every one (4 P / 8 = 4,015,130,624 B): reserved 3,752,462,336 B (3.49 GiB) lower. The
    allocated peak (the loss's backward, no sharded gradient live) is unchanged."""
    _, _, _, off = _tt(explain)
    _, _, _, on = _tt(explain, early_step_in_backward=True)
    f, m = off["memory"], on["memory"]
    assert f["terms"]["stream_pools"] - m["terms"]["stream_pools"] == pytest.approx(4 * (P - OUT) / 8, rel=1e-12)
    assert f["reserved_bytes"] - m["reserved_bytes"] == pytest.approx(3_752_462_336, rel=1e-12)
    assert m["allocated_bytes"] == f["allocated_bytes"]


def test_early_step_removes_the_foreach_step_moment(explain):
    """8B, FSDP 8, s 2048, b 1, full AC, foreach AdamW: without it the step holds states, every
    sharded gradient and exp_avg_sq_sqrt, 20 P / 8 (test_memory_step_mechanisms). Stepped in the
    backward the temporary is one parameter's (the embedding's shard, 4 B x 525,336,576 / 8) beside
    one unit's sharded gradients: no moment of its own (optimizer_step 0), and the end of the
    backward's moment [tt7] holds 12 P / 8 (fp32 shards, Adam m, v) + one unit's gradients
    (4 x 525,336,576 / 8) + the embedding's unsharded bf16 gradient and fp32 reduce-scatter input
    (6 x 525,336,576) + the workspaces and the RoPE tables (32 x 2048 x 64 x 8 B).
    That moment, 15.56 GB, is now below the start of the backward's (the loss's), which sets the
    peak: the run allocates what the fused run without it allocates less that run's end-of-backward
    excess (its fsdp_end_of_backward term)."""
    _, _, _, fe = _tt(explain, recompute="full", seq_len=2048, optimizer_implementation="foreach",
                      early_step_in_backward=True)
    _, _, _, off = _tt(explain, recompute="full", seq_len=2048)
    m, f = fe["memory"], off["memory"]
    ws, rope = m["terms"]["workspaces"], 32 * 2048 * 64 * 8
    assert m["terms"]["optimizer_step"] == 0.0
    end = 12 * P / 8 + 4 * OUT / 8 + 6 * OUT + ws + rope
    assert f["allocated_bytes"] == pytest.approx(16 * P / 8 + 6 * OUT + ws + rope, rel=1e-12)  # its end of backward
    assert end < m["allocated_bytes"] < f["allocated_bytes"]
    excess = f["terms"]["fsdp_end_of_backward"]
    assert m["terms"]["fsdp_end_of_backward"] == 0.0 and excess > 0.0
    assert f["terms"]["fsdp_unsharded_ends"] == m["terms"]["fsdp_unsharded_ends"] == 2 * OUT
    assert m["allocated_bytes"] == pytest.approx(f["allocated_bytes"] - excess, rel=1e-12)


def test_early_step_refusals(explain):
    """torchtitan build_optimizers (@e347b1e5e l. 277-290) refuses the optimizer in the backward with
    pipeline parallelism (and expert parallelism); a stack without it refuses the field."""
    with pytest.raises(PlannerError, match="not supported with Pipeline Parallel"):
        _tt(explain, gpus=16, pp=2, early_step_in_backward=True)
    with pytest.raises(PlannerError, match="stack megatron does not step the optimizer in the backward"):
        explain(model="llama3-8b", gpus=8, early_step_in_backward=True)


def test_early_step_warns_per_micro_batch_and_without_fsdp():
    from planner.plan import resolve
    from planner.schema import Job

    _, _, w = resolve(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", micro_batch=1, global_batch=16,
                          seq_len=8192, early_step_in_backward=True))
    assert any("2 micro-batches a step" in x for x in w)


def test_early_step_toml_read_exported_and_searched(tmp_path, cli):
    """[optimizer] early_step_in_backward = true is read into the job field (no longer 'not
    modelled'), written back by the export; with [parallelism] pipeline_parallel_degree 2 the
    CLI exits 2 naming torchtitan's rule; the search holds pp at 1."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    base = ('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
            '[parallelism]\ndata_parallel_shard_degree = 8\n')
    p = tmp_path / "a.toml"
    p.write_text(base + "[optimizer]\nearly_step_in_backward = true\n")
    cfg = load_trainer_config(p)
    assert cfg.job["early_step_in_backward"] is True
    assert not [n for n in cfg.not_modelled + cfg.ignored if "early_step" in n]
    p.write_text(base + "[optimizer]\nearly_step_in_backward = false\n")
    assert "early_step_in_backward" not in load_trainer_config(p).job
    p.write_text(base + "[optimizer]\nearly_step_in_backward = 1\n")
    with pytest.raises(PlannerError, match="is not true or false"):
        load_trainer_config(p)
    plan = resolved_plan(Job(model="llama3-8b", gpus=8, sharding="fsdp", stack="torchtitan", global_batch=8,
                             seq_len=8192, early_step_in_backward=True))
    assert plan["early_step_in_backward"] is True
    text, _ = export_plan(plan, "torchtitan")
    assert tomllib.loads(text)["optimizer"]["early_step_in_backward"] is True
    pp = tmp_path / "pp.toml"
    pp.write_text(base.replace("data_parallel_shard_degree = 8", "data_parallel_shard_degree = 4\n"
                               "pipeline_parallel_degree = 2") + "[optimizer]\nearly_step_in_backward = true\n")
    r = cli("explain", pp, "--hardware", "h100-sxm")
    assert r.exit_code == 2 and "Pipeline Parallel" in r.stderr
    # the search (space.build_space): pp and ep held at 1, a pinned pp above 1 refused
    from planner.space import SpaceOptions, build_space, settings_for

    job = Job(model="llama3-8b", gpus=8, stack="torchtitan", global_batch=8, seq_len=8192, early_step_in_backward=True)
    settings, gbs, seq, _ = settings_for(job)
    space = build_space(settings, gbs, seq, opts=SpaceOptions(tp=(1, 2), micro_batch=(1,)))
    assert len(space.base.pp) and set(space.base.pp.tolist()) == {1}
    free = build_space(settings_for(job.model_copy(update={"early_step_in_backward": False}))[0], gbs, seq,
                       opts=SpaceOptions(tp=(1, 2), micro_batch=(1,)))
    assert free.base.pp.max() > 1
    with pytest.raises(PlannerError, match="--pp 2 with early_step_in_backward"):
        build_space(settings, gbs, seq, opts=SpaceOptions(pp=(2,)))


# ---- [lg2] litgpt's K and V expanded to the query heads
def test_litgpt_kv_expansion_by_hand(tmp_path):
    """litgpt v0.4.11 CausalSelfAttention (GQA): k, v expanded and reshaped to n_head before SDPA,
    which saves them: 2 x 2 B x head_dim x (heads - KV heads) a token more than the KV heads'.
    Mistral 7B v0.2 (32 heads, 8 groups, d 128) at the Thunder row's micro-batch 3 x 32,768 tokens:
    98,304 x 2 x 2 x 128 x 24 = 1,207,959,552 B (1.125 GiB) in the re-run block of its full
    recompute (the recompute buffer); on a stack without the expansion, nothing; MHA, nothing."""
    from dataclasses import replace

    from planner.explain import evaluate, to_json
    from planner.plan import resolve
    from planner.schema import Job

    # Mistral 7B v0.2 as the Thunder row gives it (tests/data/memory/measured_memory.yaml
    # thunder_pr1261_mistral_7b_v02_fsdp8_ac planner.model_shape: litgpt v0.4.11's config, no sliding window; the
    # catalog's mistral-7b is v0.1, whose 4,096-token window litgpt-benchmark prices as litgpt's dense mask: another
    # mechanism, tests/test_litgpt_layers.py)
    import yaml

    rows = yaml.safe_load((Path(__file__).parent / "data" / "memory" / "measured_memory.yaml").read_text())
    rows = rows["memory_rows"]
    shape = next(r for r in rows if r["id"] == "thunder_pr1261_mistral_7b_v02_fsdp8_ac")["planner"]["model_shape"]
    v02 = tmp_path / "mistral-7b-v0.2-litgpt.yaml"
    v02.write_text(yaml.safe_dump({**shape, "sources": ["litgpt v0.4.11 litgpt/config.py Mistral-7B-v0.2 (the row's why)"]}))

    def run(expand: bool, model=str(v02)):
        settings, plan, _ = resolve(Job(model=model, gpus=8, stack="litgpt-benchmark", sharding="fsdp",
                                        recompute="full", micro_batch=3, global_batch=24, seq_len=32768))
        st = settings.stack
        settings = replace(settings, stack=st.model_copy(update={"memory": st.memory.model_copy(
            update={"expands_kv_heads": expand})}))
        return to_json(settings, plan, evaluate(settings, plan))["memory"]["terms"]

    on, off = run(True), run(False)  # 32 heads, 8 KV heads, d 128
    assert on["recompute_buffer"] - off["recompute_buffer"] == pytest.approx(1_207_959_552, rel=1e-12)
    assert on["layer_activations"] == off["layer_activations"]  # full recompute keeps the block inputs only
    mha_on, mha_off = run(True, "llama2-7b"), run(False, "llama2-7b")
    assert mha_on["recompute_buffer"] == mha_off["recompute_buffer"]


# ---- [cp3] Transformer Engine's P2P ring attention: the forward's merge under CP
def test_cp_p2p_forward_merge_by_hand():
    """TE @4329ff84 AttnFuncWithCPAndKVP2P.forward keeps every ring step's output (bf16), fp32 softmax
    statistics and K/V buffer until the merge after its loop. Llama 3 8B (32 heads, 8 KV heads, d 128),
    Megatron, tp 1, cp 2, seq 8192, micro-batch 1: T = 4,096 local tokens; the last CP rank holds
    2 outputs 2 x 4096 x 32 x 128 x 2 = 67,108,864 B, 2 statistics 2 x 4096 x 32 x 4 = 1,048,576 B and
    2 K/V buffers 2 x 4096 x 2 x 8 x 128 x 2 = 33,554,432 B: 101,711,872 B; at cp 4 (T 2,048) the same
    4 x 12,416 x 2,048. Without recompute the first stage of pp 2 (no loss) has no other transient but
    the ring's backward [cp4] (36,864 B a local token) with the second-half softmax-statistics copy beside
    it [cp5] (32 heads x 2 B = 64 B a local token): 36,928 x 4,096 = 151,257,088 B at cp 2, 36,928 x 2,048
    = 75,628,544 B at cp 4: its recompute buffer is the larger moment, the backward's at cp 2 and the
    merge's at cp 4 (its excess over the backward's, exactly); on the last stage the loss (6 B a logit) is
    far larger than the merge, which adds nothing there, and the backward's moment is the one layer's
    buffer as on every stage; cp 1: nothing."""
    from planner import memory as mem
    from planner.plan import resolve
    from planner.schema import Job

    def stages(**kw):
        job = Job(**{"model": "llama3-8b", "gpus": 4, "pp": 2, "micro_batch": 1, "global_batch": 8, "seq_len": 8192,
                     "recompute": "none", **kw})
        return mem.stage_memory_terms(*resolve(job)[:2])

    cp2 = stages(cp=2)
    assert cp2[mem.STAGE_FIRST].recompute_buffer == pytest.approx(151_257_088, rel=1e-12)
    assert cp2[mem.STAGE_LAST].recompute_buffer == pytest.approx(151_257_088, rel=1e-12)
    assert stages(cp=4, gpus=8)[mem.STAGE_FIRST].recompute_buffer == pytest.approx(101_711_872, rel=1e-12)
    assert stages(cp=1, tp=2)[mem.STAGE_FIRST].recompute_buffer == 0.0


def test_cp_p2p_forward_merge_fp8_attention_by_hand():
    """Under fp8 attention (delayed scaling, H100) TE @4329ff84 AttnFuncWithCPAndKVP2P.forward rings the
    fp8 K/V data (1 B), dequantizes each step's output to fp32 (l. 1979-1986) and keeps it to the merge,
    and at its end holds the fp32 merged output, out_part and out_f16 (bf16) beside the saved out_fp8
    (8 B a local output element) while the caller's bf16 q, k, v stay referenced beside the saved fp8
    ones. Llama 3 8B (32 heads, 8 KV heads, d 128), Megatron, tp 1, pp 2, seq 8192, micro-batch 1,
    precision fp8, per local token on the last CP rank:
    cp x (4 x 32 x 128 + 4 x 32 + 1 x 2 x 8 x 128) + 8 x 32 x 128 + 2 x (32 x 128 + 2 x 8 x 128)
    = cp x 18,560 + 32,768 + 12,288.
    cp 2 (T 4,096): 82,176 x 4,096 = 336,592,896 B (bf16 attention: 2 x 12,416 x 4,096 = 101,711,872);
    cp 4 (T 2,048): 119,296 x 2,048 = 244,318,208 B (bf16 attention: 4 x 12,416 x 2,048 = 101,711,872).
    The first stage's recompute buffer is the larger of that moment and the ring's backward [cp4]
    (test_cp_p2p_backward_*: delayed 96,256 B a token at cp 2, 161,792 at cp 4; bf16 36,864) with the
    second-half softmax-statistics copy beside it [cp5] (64 B a token): the backward's 96,320 x 4,096 =
    394,526,720 and 161,856 x 2,048 = 331,481,088 B under fp8 attention, 36,928 x 4,096 = 151,257,088 B
    (cp 2) and the merge's 101,711,872 B (cp 4) in bf16. The merge itself: cp_forward_merge_bytes, by hand."""
    from planner import memory as mem
    from planner.plan import resolve
    from planner.schema import Job

    def first(cp, fa):
        job = Job(model="llama3-8b", gpus=2 * cp, pp=2, cp=cp, micro_batch=1, global_batch=8, seq_len=8192,
                  recompute="none", precision="fp8", fp8_attention=fa)
        return mem.stage_memory_terms(*resolve(job)[:2])[mem.STAGE_FIRST].recompute_buffer

    assert first(2, True) == pytest.approx(394_526_720, rel=1e-12)
    assert first(2, False) == pytest.approx(151_257_088, rel=1e-12)
    assert first(4, True) == pytest.approx(331_481_088, rel=1e-12)
    assert first(4, False) == pytest.approx(101_711_872, rel=1e-12)
    from planner.layers import context, layer_list
    from planner.plan import FP8_RECIPE_CODES, resolve as res
    from planner.stacks import fp8_recipe, stack_of

    for cp, want in ((2, 336_592_896), (4, 244_318_208)):
        settings, plan = res(Job(model="llama3-8b", gpus=2 * cp, pp=2, cp=cp, micro_batch=1, global_batch=8,
                                 seq_len=8192, recompute="none", precision="fp8", fp8_attention=True))[:2]
        f8 = fp8_recipe(stack_of(settings), FP8_RECIPE_CODES["delayed"])
        assert float(mem.cp_forward_merge_bytes(layer_list(settings.model).kinds[0], context(plan), f8)) == want


def test_cp_p2p_forward_merge_fp8_recipes_by_hand():
    """The recipes' ring figures (stack_db megatron fp8_recipes fp8_attention, from TE @4329ff84
    context_parallel.py): current scaling keeps the fp8 ring (1 B) and the caller's bf16 q, k, v but
    saves out_part, 6 B a merged-output element beyond it; MXFP8 rings bf16 K/V (quantized per step),
    saves the bf16 q, kv and out_part: 6 B, no bf16 inputs beyond. Per local token, Llama 3 8B, cp 2:
    current 2 x 18,560 + 6 x 4,096 + 12,288 = 73,984; MXFP8 2 x (16,384 + 128 + 4,096) + 24,576
    = 65,792 (bf16 attention: 24,832)."""
    from planner import memory as mem
    from planner.layers import context, layer_list
    from planner.stacks import fp8_recipe, stack_of
    from planner.plan import FP8_RECIPE_CODES, resolve
    from planner.schema import Job

    settings, plan = resolve(Job(model="llama3-8b", gpus=4, pp=2, cp=2, micro_batch=1, global_batch=8,
                                 seq_len=8192, recompute="none"))[:2]
    ctx = context(plan)
    kind = layer_list(settings.model).kinds[0]
    stack = stack_of(settings)
    per_token = {n: float(mem.cp_forward_merge_bytes(kind, ctx, fp8_recipe(stack, FP8_RECIPE_CODES[n])))
                 / float(ctx.T) for n in ("delayed", "tensorwise", "mxfp8")}
    assert per_token == {"delayed": 82_176.0, "tensorwise": 73_984.0, "mxfp8": 65_792.0}
    assert float(mem.cp_forward_merge_bytes(kind, ctx)) / float(ctx.T) == 24_832.0


# ---- [cp4] Transformer Engine's P2P ring attention: the backward under CP
def _cp_bwd_per_token(cp, recipe=None, **kw):
    """Per local token, Llama 3 8B's attention layer, Megatron, tp 1: the ring backward's largest moment."""
    from planner import memory as mem
    from planner.layers import context, layer_list
    from planner.plan import FP8_RECIPE_CODES, resolve
    from planner.schema import Job
    from planner.stacks import cp_backward_moments, stack_of

    job = {"model": "llama3-8b", "gpus": 2 * cp, "pp": 2, "cp": cp, "micro_batch": 1, "global_batch": 8,
           "seq_len": 8192, "recompute": "none", **kw}
    settings, plan = resolve(Job(**job))[:2]
    ctx = context(plan)
    moments = cp_backward_moments(stack_of(settings), None if recipe is None else FP8_RECIPE_CODES[recipe])
    if moments is None:
        return None
    return float(mem.cp_p2p_backward_bytes(layer_list(settings.model).kinds[0], ctx, moments)) / float(ctx.T)


def test_cp_p2p_backward_bf16_by_hand():
    """TE @4329ff84 AttnFuncWithCPAndKVP2P.backward, bf16: dq_buffer = empty_like(q) (2 B a local query
    element), two (2, kv) send / receive buffers (8 B a local K/V element) and the diagonal step's dq_, dk_,
    dv_ (2 + 2 B): 4 B a query element, 10 B a K/V element, whatever cp. Llama 3 8B (32 heads, 8 KV heads,
    d 128), tp 1: 4 x 4,096 + 10 x 2,048 = 36,864 B a local token, at cp 2 (T 4,096) 150,994,944 B and at
    cp 4 (T 2,048) 75,497,472 B; with the second-half softmax-statistics copy beside it [cp5] (64 B a
    token: 151,257,088 B at cp 2) the first stage's recompute buffer (pp 2, no recompute) at cp 2, where
    the forward merge [cp3] is smaller (101,711,872 B). cp 1: nothing. tp 8: 4 query heads, one KV
    head: 4 x 512 + 10 x 256 = 4,608 B a token."""
    from planner import memory as mem
    from planner.plan import resolve
    from planner.schema import Job

    assert _cp_bwd_per_token(2) == 36_864.0
    assert _cp_bwd_per_token(4) == 36_864.0
    assert _cp_bwd_per_token(2, tp=8, gpus=32) == 4_608.0
    first = mem.stage_memory_terms(*resolve(Job(model="llama3-8b", gpus=4, pp=2, cp=2, micro_batch=1, global_batch=8,
                                                seq_len=8192, recompute="none"))[:2])[mem.STAGE_FIRST]
    assert first.recompute_buffer == pytest.approx(151_257_088, rel=1e-12)


def test_cp_p2p_backward_fp8_recipes_by_hand():
    """Under fp8 attention the recipe's moments (stack_db megatron fp8_recipes fp8_attention cp_backward,
    TE @4329ff84). Llama 3 8B, tp 1: Q = 4,096 query and KV = 2,048 K/V elements a local token.
    delayed: cp uint8 dq partials, 2 cp uint8 dK/dV buffers, dequantized to fp32 together at the end;
    moments (1 + 6 cp) Q + (1 + 7 cp) KV (the dequantization), (7 + 5 cp) Q + (1 + 6 cp) KV (dq's sum),
    (3 + 5 cp) Q + (5 + 6 cp) KV (dv's sum). cp 2: 83,968, 96,256, 88,064 -> 96,256; cp 4: 161,792,
    161,792, 153,600 -> 161,792.
    current scaling: 10 Q + (10 + 2 cp) KV: cp 2 69,632, cp 4 77,824.
    MXFP8: 10.0625 Q + (12.0625 + 2 cp) KV: cp 2 74,112, cp 4 82,304."""
    want = {2: {"delayed": 96_256.0, "tensorwise": 69_632.0, "mxfp8": 74_112.0},
            4: {"delayed": 161_792.0, "tensorwise": 77_824.0, "mxfp8": 82_304.0}}
    for cp, per in want.items():
        assert {n: _cp_bwd_per_token(cp, n) for n in per} == per


def test_cp_p2p_backward_only_on_the_ring():
    """all_gather and a2a run no P2P ring (planner/cp_comm_type.py clears memory.cp_p2p_backward); a2a+p2p
    runs it over its p2p ranks: cp 4 as 2 x 2 is the ring of 2 (the bf16 moment does not depend on cp: the
    same 36,864 B a token of the same local tokens); torchtitan prices torch's ring backward instead [cp1]."""
    assert _cp_bwd_per_token(2, cp_comm_type="a2a") is None
    assert _cp_bwd_per_token(2, cp_comm_type="all_gather") is None
    assert _cp_bwd_per_token(4, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[2, 2]) == 36_864.0
    assert _cp_bwd_per_token(2, stack="torchtitan", sharding="fsdp") is None


# ---- [cp5] the P2P backward's second-half softmax-statistics copy
def test_cp_backward_lse_half_copy_by_hand():
    """TE @4329ff84 AttnFuncWithCPAndKVP2P.backward l. 2327-2346: on every CP rank but the last (causal),
    softmax_lse_ = softmax_lse.view(b, h, 2, -1)[..., 1, :].contiguous(), fp32 over half the local query rows,
    kept to the end of the backward. One layer, per GPU: b x (a / t) x (s / cp / 2) x 4 B.
    Llama 3 8B (32 heads), seq 8192, micro-batch 1: tp 1 cp 2: 1 x 32 x 2,048 x 4 = 262,144 B;
    tp 1 cp 4: 1 x 32 x 1,024 x 4 = 131,072 B; tp 8 cp 2 (4 heads a GPU): 32,768 B; micro-batch 2, tp 2,
    cp 2 (16 heads): 2 x 16 x 2,048 x 4 = 262,144 B; cp 1: none. a2a+p2p over 2 x 2: the ring of 2 over the
    head-split, all-to-all'd query (a / (t 2) heads, s / 2 tokens): 1 x 16 x 2,048 x 4 = 131,072 B = the
    cp 4 figure (the same local tokens x heads)."""
    from planner import memory as mem
    from planner.layers import context, layer_list
    from planner.plan import resolve
    from planner.schema import Job

    def lse(**kw):
        job = {"model": "llama3-8b", "gpus": 2 * kw.get("cp", 1) * kw.get("tp", 1), "pp": 2, "micro_batch": 1,
               "global_batch": 8, "seq_len": 8192, "recompute": "none", **kw}
        settings, plan = resolve(Job(**job))[:2]
        return float(mem.cp_backward_lse_copy_bytes(layer_list(settings.model).kinds[0], context(plan)))

    assert lse(cp=2) == 262_144.0
    assert lse(cp=4) == 131_072.0
    assert lse(cp=2, tp=8) == 32_768.0
    assert lse(cp=2, tp=2, micro_batch=2, global_batch=16) == 262_144.0
    assert lse(cp=1) == 0.0
    # in the ring's backward beside [cp4]'s moment: 36,864 + 64 B a local token at tp 1
    ring = _cp_bwd_per_token(2)
    from planner.stacks import cp_backward_moments, stack_of
    settings, plan = resolve(Job(model="llama3-8b", gpus=4, pp=2, cp=2, micro_batch=1, global_batch=8, seq_len=8192,
                                 recompute="none"))[:2]
    ctx = context(plan)
    both = mem.cp_p2p_backward(settings, plan, stack_of(settings), ctx)(layer_list(settings.model).kinds[0])
    assert float(both) / float(ctx.T) == ring + 64.0 == 36_928.0
    assert cp_backward_moments(stack_of(settings), None) is not None
    # a2a+p2p: the p2p ranks' ring (cp 4 as 2 x 2), 64 B a local token as at cp 4
    s4, p4 = resolve(Job(model="llama3-8b", gpus=8, pp=2, cp=4, micro_batch=1, global_batch=8, seq_len=8192,
                         recompute="none", cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[2, 2]))[:2]
    c4 = context(p4)
    hier = mem.cp_p2p_backward(s4, p4, stack_of(s4), c4)(layer_list(s4.model).kinds[0])
    assert float(hier) / float(c4.T) == 36_928.0


# ---- [mr] Megatron's lru_cache'd rotary tables
def test_megatron_rope_lru_cache_by_hand():
    """Megatron @d98e8a64 RotaryEmbedding.forward is @lru_cache(maxsize=32): the fp32 emb
    [seq / cp, 1, 1, head dim] it returns stays cached, one per GPTModel (each virtual chunk).
    Llama 3 8B (head dim 128), seq 8192: cp 2, pp 2 x vpp 2: 4 x 4096 x 128 x 2 chunks =
    4,194,304 B on each stage; cp 1, pp 1: 4 x 8192 x 128 = 4,194,304 B. With multi-latent
    attention each MLA layer has its own (qk_rope_head_dim 64), at most 32 cached: DeepSeek-V3
    (61 layers) on one stage at seq 4096: 32 x 4 x 4096 x 64 = 33,554,432 B, beside its 58 routers' fp32 score
    biases and token counters, 58 x 2 x 4 x 256 = 118,784 B (layers/common.py [sb]): 33,673,216 B."""
    from planner import memory as mem
    from planner.plan import resolve
    from planner.schema import Job

    def rope(**kw):
        st = mem.stage_memory_terms(*resolve(Job(**kw))[:2])
        return {k: float(t.model_buffers) for k, t in st.items()}

    got = rope(model="llama3-8b", gpus=8, cp=2, pp=2, vpp=2, micro_batch=1, global_batch=8, seq_len=8192)
    assert got[mem.STAGE_FIRST] == got[mem.STAGE_LAST] == 4 * 4096 * 128 * 2
    assert rope(model="llama3-8b", gpus=8, micro_batch=1, global_batch=8, seq_len=8192)[mem.STAGE_FIRST] == 4 * 8192 * 128
    ds = rope(model="deepseek-v3", gpus=64, ep=64, micro_batch=1, global_batch=64, seq_len=4096,
              sharding="zero1", recompute="full")
    assert ds[mem.STAGE_FIRST] == 32 * 4 * 4096 * 64 + 58 * 2 * 4 * 256 == 33_673_216
    # torchtitan's own tables are untouched (memory.py [tt9]: complex64, one per layer)
    tt = rope(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", micro_batch=1, global_batch=8, seq_len=8192)
    assert tt[mem.STAGE_FIRST] == 32 * 8192 * 64 * 8
