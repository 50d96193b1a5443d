"""The stack megatron-deepspeed-bigscience (issues 21, 22): BigScience's Megatron-DeepSpeed fork as BLOOM-176B ran it,
bigscience-workshop/Megatron-DeepSpeed @497aa1bf (main at the launch, 2022-03-11) with microsoft/DeepSpeed
olruwase/bf16-updates @77b649d16 (bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md l. 1394).
What prices differently from microsoft's megatron-deepspeed entry, each derived by hand here: the optimizer's three
parameter groups (memory.py [bo], memory.optimizer_groups decay_halves_by_count), the fused softmax's 4,096-key limit,
and what the fork runs (ZeRO stages 0 and 1 under the PipelineEngine, bf16 only with the BF16_Optimizer, the eager
core, full recompute, no sequence parallelism, no MoE); ALiBi and the embedding LayerNorm are its, not microsoft's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from planner import memory
from planner.catalog import load_model, load_stack
from planner.check import evaluate_job
from planner.errors import PlannerError
from planner.params import count_params
from planner.plan import resolve
from planner.schema import Job

STACK = "megatron-deepspeed-bigscience"


def _job(**kw):
    base = dict(model="megatron-gpt-1.7b", gpus=8, stack=STACK, hardware="a100-sxm-80gb", global_batch=64)
    return Job.model_validate({**base, **kw})


def test_the_entry_is_pinned_to_blooms_commits():
    s = load_stack(STACK)
    assert "bigscience-workshop/Megatron-DeepSpeed @497aa1bf" in s.version
    assert "microsoft/DeepSpeed @77b649d16" in s.version
    assert s.memory.optimizer_groups == "decay_halves_by_count"
    assert load_stack("megatron-deepspeed").memory.optimizer_groups == "decay_then_no_decay"
    # both forks' is_kernel_available: 16 < sk <= 4096 (microsoft's @f4157bea l. 152-172 since 7a77abd9); the 2021 fork's 2048
    assert s.kernels.score_softmax_max_keys == 4096 and load_stack("megatron-deepspeed").kernels.score_softmax_max_keys == 4096
    assert load_stack("megatron-deepspeed-2021").kernels.score_softmax_max_keys == 2048
    r = s.runs
    assert [m.name for m in r.sharding] == ["zero0", "zero1", "bf16_optimizer"]
    assert r.attention.cores == ["eager"] and r.recompute.granularities == ["none", "full"]
    assert not r.sequence_parallel.supported and {k.kind for k in r.layer_kinds} == {"global"}
    assert s.expert_parallel is None and s.cpu_offload is None
    # the PipelineEngine always (GPTModelPipe under --deepspeed), which turns overlap_comm off (engine.py l. 1301-1318)
    assert not s.overlap.dp_comm_overlap_supported
    # the TP sync of BLOOM's script is the fork's option, not microsoft's
    assert r.sync_tp_duplicated_parameters == "--sync-tp-duplicated-parameters"
    assert load_stack("megatron-deepspeed").runs.sync_tp_duplicated_parameters is None


def test_what_the_fork_does_not_run_is_refused():
    """DeepSpeed 77b649d16's PipelineEngine (which the fork builds under --deepspeed at any pp) asserts ZeRO stage < 2
    and raises NotImplementedError for bf16 at stage 1 (pipe/engine.py l. 72, 252-263); the fork has no FlashAttention,
    no selective recompute, no sequence parallelism and no MoE layer."""
    resolve(_job())  # bf16, the BF16_Optimizer at stage 0
    with pytest.raises(PlannerError, match="bf16_optimizer"):
        resolve(_job(sharding="zero1", sharding_mode="zero1"))
    resolve(_job(sharding="zero1", sharding_mode="zero1", fp16=True))
    with pytest.raises(PlannerError, match="zero2"):
        resolve(_job(sharding="zero2"))
    with pytest.raises(PlannerError, match="runs.attention"):
        resolve(_job(attention="flash"))
    with pytest.raises(PlannerError, match="STACK_RECOMPUTE|runs.recompute"):
        resolve(_job(recompute="selective"))
    with pytest.raises(PlannerError, match="STACK_SEQUENCE_PARALLEL|runs.sequence_parallel"):
        resolve(_job(tp=2, sequence_parallel=True))
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND"):
        resolve(_job(model="mixtral-8x7b", gpus=64, tp=8))
    with pytest.raises(PlannerError, match="does not overlap DP communication"):
        resolve(_job(dp_comm_overlap=True))


def test_three_optimizer_groups_by_count_at_pp_1():
    """memory._decay_halves on megatron-gpt-1.7b (h 2,304, 24 layers, vocab 51,200, 2,048 learned positions, tied) at
    TP 1, PP 1: the weight-decay tensors in module order are the word embedding (v h = 117,964,800), the position table
    (s h = 4,718,592), then 24 x [query_key_value 3 h^2, dense h^2, dense_h_to_4h 4 h^2, dense_4h_to_h 4 h^2]:
    2 + 96 = 98 tensors, the first half 49 of them, both embeddings, 11 whole layers (12 h^2 each) and the 12th's first
    three (8 h^2): 122,683,392 + 140 h^2 = 865,861,632; the second half the 12th's dense_4h_to_h and 12 layers,
    148 h^2 = 785,645,568; the no-decay group 24 x 13 h of biases and norms + the final norm's 2 h = 723,456."""
    h, v, s, L = 2304, 51200, 2048, 24
    settings, plan, _ = resolve(_job())
    pc = count_params(load_model("megatron-gpt-1.7b"))
    per = SimpleNamespace(pc=pc, plan=plan, settings=settings)
    g1, g2, g3 = memory._decay_halves(per, np.array([float(pc.total)]), "first", np.array([[float(L)]]))
    assert (v * h + s * h + 140 * h * h, 148 * h * h, L * 13 * h + 2 * h) == (865_861_632, 785_645_568, 723_456)
    assert (float(g1[0]), float(g2[0]), float(g3[0])) == (865_861_632, 785_645_568, 723_456)
    assert pc.total == 865_861_632 + 785_645_568 + 723_456
    # a middle stage of 6 layers at TP 4 (no embedding): 24 tensors, 12 a half, three layers each (3 h^2 a layer at /4)
    settings4, plan4, _ = resolve(_job(gpus=48, tp=4, pp=12, global_batch=96))
    per4 = SimpleNamespace(pc=pc, plan=plan4, settings=settings4)
    n6 = 6 * (12 * h * h + 13 * h) // 4
    m1, m2, m3 = memory._decay_halves(per4, np.array([float(n6)]), "middle", np.array([[6.0]]))
    assert float(m1[0]) == float(m2[0]) == 9 * h * h and float(m3[0]) == n6 - 18 * h * h


@pytest.mark.parametrize("groups, copy", [
    # the first two gathered (3e8 + 3e8 > 5e8): a torch.cat in fp32 and its bf16 cast, 6 B x 6e8; the third alone at
    # the end, its own view cast, 2 B x 1e6
    ((3e8, 3e8, 1e6), 6.0 * 6e8),
    # each half above the bucket: alone, its own view cast to bf16, 2 B x 6e8; the third alone
    ((6e8, 7e8, 1e6), 2.0 * 7e8),
    # nothing passes the bucket: one bucket at the end, the three flattened and cast, 6 B x 3.01e8
    ((1e8, 2e8, 1e6), 6.0 * 3.01e8),
])
def test_bucket_walk_by_hand(groups, copy):
    """DeepSpeed 77b649d16 engine.py allreduce_no_retain l. 2081-2092 (gather whole buffers until their elements pass
    5e8, flush; the rest at the end) and allreduce_bucket l. 2049-2074 (flatten: a view for one tensor, a torch.cat for
    several; .to(bf16)): the fp32 buffers 4 B, the cast 2 B."""
    got = memory._bucket_copies([np.array([g]) for g in groups], 5e8, 4.0, 2.0)
    assert float(got[0]) == pytest.approx(copy, rel=1e-12)


def test_fused_softmax_to_4096_keys():
    """The fork's FusedScaleMaskSoftmax fuses 16 < sk <= 4096 (@497aa1bf fused_softmax.py l. 165-184), as microsoft's
    @f4157bea (l. 152-172); the 2021 fork (b56b50bb l. 132-133) to 2048: megatron-gpt-1.7b at seq 4,096 with the eager
    core runs the fused kernel here and on megatron-deepspeed, 3 + 4 bytes a score element, the seq 2,048 time x 4 (the
    scores quadruple); on megatron-deepspeed-2021 the unfused path, 37 + 41 bytes: x 4 x 78 / 7."""
    def sm(stack, seq):
        j = _job(stack=stack, seq_len=seq, attention="eager", recompute="none")
        return evaluate_job(j)["time"]["eager_core_softmax_s"]

    assert sm(STACK, 4096) == pytest.approx(4 * sm(STACK, 2048), rel=1e-9)
    assert sm("megatron-deepspeed", 4096) == pytest.approx(4 * sm("megatron-deepspeed", 2048), rel=1e-9)
    assert sm("megatron-deepspeed-2021", 4096) == pytest.approx(4 * 78 / 7 * sm("megatron-deepspeed-2021", 2048), rel=1e-9)
    assert sm(STACK, 2048) == pytest.approx(sm("megatron-deepspeed", 2048), rel=1e-9)


def test_alibi_and_the_embedding_norm_are_the_forks():
    """ALiBi and the embedding LayerNorm: built by the fork (@497aa1bf transformer.py l. 490-497, mpu/layers.py
    l. 194-195), not by microsoft's @f4157bea (no --position-embedding-type, no --embed-layernorm): rule 73 there."""
    from planner.startup import unbuilt_layer_forms

    m = load_model("megatron-gpt-1.7b").model_copy(update={"position_embedding": "alibi", "embedding_norm": True})
    assert set(unbuilt_layer_forms(m, load_stack(STACK))) == set()
    assert {"alibi_positions", "embedding_norm"} <= set(unbuilt_layer_forms(m, load_stack("megatron-deepspeed")))


def test_an_untied_output_layer_comes_last(tmp_path):
    """llama3-8b (untied, GQA 32 / 8 heads of 128, gated MLP 14,336) at TP 1, PP 2: the last stage's weight-decay
    tensors are its 16 layers' [query_key_value (32 + 2 x 8) 128 h = 25,165,824, dense 32 x 128 h = 16,777,216,
    dense_h_to_4h 2 f h = 117,440,512, dense_4h_to_h f h = 58,720,256] = 218,103,808 a layer, then the output layer
    v h = 525,336,576 (read as params_of reads it: the fork itself ties always, so this is the planner's reading of
    a model the fork would not build untied): 65 tensors, 32 in the first half, 8 whole layers = 1,744,830,464, the
    other 8 layers and the output layer 2,270,167,040.

    The shipped stack refuses the model (runs.layer_kinds global not_built untied_embeddings, grouped_query, rmsnorm,
    no_linear_bias: start-up rule STACK_LAYER_KIND, mdsfork2), so memory's untied branch is reached through a stack file
    of the user's, the shipped one without those four forms (tmp_path)."""
    import yaml

    h, f, v = 4096, 14336, 128256
    layer = (32 + 16) * 128 * h + 32 * 128 * h + 2 * f * h + f * h
    assert layer == 218_103_808
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND") as e:
        resolve(_job(model="llama3-8b", gpus=16, pp=2, global_batch=64))
    assert "(untied_embeddings), which stack megatron-deepspeed-bigscience's code does not build" in str(e.value)
    spec = yaml.safe_load((Path(__file__).parent.parent / "stack_db" / f"{STACK}.yaml").read_text())
    glob = spec["runs"]["layer_kinds"][0]
    glob["not_built"] = [x for x in glob["not_built"]
                         if x["form"] not in ("untied_embeddings", "grouped_query", "rmsnorm", "no_linear_bias")]
    path = tmp_path / f"{STACK}.yaml"
    path.write_text(yaml.safe_dump(spec))
    settings, plan, _ = resolve(_job(model="llama3-8b", gpus=16, pp=2, global_batch=64, stack=str(path)))
    pc = count_params(load_model("llama3-8b"))
    per = SimpleNamespace(pc=pc, plan=plan, settings=settings)
    g1, g2, _ = memory._decay_halves(per, np.array([16.0 * layer + v * h]), "last", np.array([[16.0]]))
    assert (float(g1[0]), float(g2[0])) == (8 * layer, 8 * layer + v * h) == (1_744_830_464, 2_270_167_040)


def test_pipe_partitioned_false_is_refused_on_the_fork(tmp_path):
    """DeepSpeed 77b649d16's pipe engine partitions the activations and the gradient wherever the grid has TP and
    reads no JSON key for it (engine.py l. 131-132; the keys came with c2074b341): stack
    pipeline_send_partitioned_switch false, so a job's pipe_partitioned false exits 2 naming what the engine sends."""
    from typer.testing import CliRunner

    from planner.cli import app

    p = tmp_path / "job.yaml"
    p.write_text("stack: megatron-deepspeed-bigscience\nmodel: megatron-gpt-1.7b\ngpus: 16\ntp: 2\npp: 2\nglobal_batch: 32\n"
                 "micro_batch: 1\nseq_len: 2048\npipe_partitioned: false\n")
    r = CliRunner().invoke(app, ["explain", str(p)])
    assert r.exit_code == 2
    assert "pipeline_send_partitioned_switch false" in r.output
    assert "1 / tp of the activations and of the gradient" in r.output
