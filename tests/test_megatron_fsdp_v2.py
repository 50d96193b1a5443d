"""Megatron-FSDP v2 (the job's mfsdp_v2, Megatron --megatron-fsdp-version 2; planner/memory.py [v2], start-up rule
MEGATRON_FSDP_V2_LAYOUT, code 100), derived by hand from NVIDIA/Megatron-LM @d98e8a64
megatron/core/distributed/fsdp/mcore_fsdp_adapter.py FullyShardedDataParallelV2 (l. 489-705) and
megatron/core/distributed/fsdp/src/megatron_fsdp/experimental/:

- every TransformerLayer is an FsdpModule (l. 536-537, 589-592), the root (embedding, output layer, final norm) one more
  (l. 595-596); its persistent buffers (parameter_group.py l. 155-214: fp32 main weights, bf16 model weights, main
  gradients in the parameters' dtype) are version 1's at optim_grads_params: the states do not move;
- pre_forward / pre_backward gather the module and prefetch the next one only (module.py l. 318-353, 402-425), each
  released after its forward and its backward (l. 372-400, 427-432): 2 layer units gathered, not 1 + ceil(P / u);
- no gradient-accumulation fusion (l. 672-673): each layer's autograd gradients (bf16) are kept until the unit's last
  parameter has its gradient (module.py l. 278-296), then copied into one reduce-scatter input of the unit's size
  (parameter_group.py l. 328-351) and dropped; no GradReducePipeline queue. The root's output-layer gradient is kept to
  the root's post-backward, after the embedding's, at the end of the backward;
- the root unit is released after the backward: not held at the optimizer step's moment (v1 keeps its non-unit buckets
  for the whole step, [nu]); its copy-in comes after its gathered weights are released (module.py l. 427-432);
- after the optimizer step each parameter group's fp32 main weights are cast into a new bf16 shard before the old one
  is dropped (parameter_group.py l. 269-279): the largest shard in the step's moment;
- under EP each MoE layer's experts are a unit of their own (mcore_fsdp_adapter.py l. 570-583): their gradients and
  the dense part's are held one at a time.

Llama 3 8B, tp 1, 8 GPUs: u = 218,112,000 a layer unit (2 h^2 + 2 h (h / 4) + 3 h f + 2 h), V h = 128,256 x 4,096 =
525,336,576, W = 2 B (bf16 gradients, mixed16).
"""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import PlannerError
from planner.explain import evaluate
from planner.memory import allocated_bytes, reserved_bytes
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

U = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096  # Llama 3 8B layer + its two norms
VH = 128_256 * 4096
FC1 = 2 * 14336 * 4096  # the layer's largest linear (gate and up), elements


def _mem(v2, seq=4096, gpus=8, gb=16, model="llama3-8b", ep=1):
    s, p, _ = resolve(Job(model=model, gpus=gpus, tp=1, ep=ep, sharding="fsdp",
                          sharding_mode="megatron_fsdp_optim_grads_params", stack="megatron", global_batch=gb,
                          micro_batch=1, seq_len=seq, recompute="full", bytes_per_param="mixed16",
                          gradient_accumulation_fusion=False, mfsdp_v2=v2))
    return evaluate(s, p).memory


def test_v2_terms_by_hand():
    """seq 4,096, full recompute. v1: 4 units gathered (current + 3 prefetched, P = 5e8) = 8 u B; the end buckets'
    gradient g V h = 2 V h; the queue's excess 12 u - 5 a - 2 V h (a = 2 h T = 33,554,432) = 1,398,898,688 B; the
    unfused path's fc1 weight gradient 2 x FC1 in the layer's backward buffer ([uf]).
    v2: 2 units gathered = 4 u = 872,448,000 B; unit gradients 2 (u + V h) = 1,486,897,152 B; the reduce-scatter input's
    excess max(2 u - a - buf, 0) = 0 (buf = 537,395,200 B: v1's 772,276,224 less 2 x FC1, which v2 prices in the unit's
    gradients); the root unit through the backward as before, (2 V h + 4,096) x 2 = 2,101,354,496 B.
    The backward's peak moves by the sum: -4 u + 2 u - 1,398,898,688 - 2 x FC1 = -2,070,003,712 B."""
    assert U == 218_112_000 and VH == 525_336_576
    v1, v2 = _mem(False), _mem(True)
    a = 2 * 4096 * 4096
    assert float(v1["fsdp_gathered_units"]) == 8 * U and float(v2["fsdp_gathered_units"]) == 4 * U == 872_448_000
    assert float(v1["fsdp_unit_grads"]) == 2 * VH
    assert float(v2["fsdp_unit_grads"]) == 2 * (U + VH) == 1_486_897_152
    assert float(v1["zero2_reduce_input"]) == pytest.approx(12 * U - 5 * a - 2 * VH, rel=1e-12)
    assert float(v2["zero2_reduce_input"]) == 0.0
    assert float(v1["recompute_buffer"]) - float(v2["recompute_buffer"]) == 2 * FC1 == 234_881_024
    assert float(v1["fsdp_unsharded_ends"]) == float(v2["fsdp_unsharded_ends"]) == (2 * VH + 4096) * 2
    for k in ("weights", "gradients", "master_weights", "adam"):  # the persistent buffers: version 1's
        assert float(v1[k]) == float(v2[k])
    assert float(allocated_bytes(v2)) - float(allocated_bytes(v1)) == pytest.approx(
        -4 * U + 2 * U - (12 * U - 5 * a - 2 * VH) - 2 * FC1, abs=1.0)
    assert float(allocated_bytes(v2)) - float(allocated_bytes(v1)) == pytest.approx(-2_070_003_712, abs=1.0)


def test_v2_reduce_scatter_input_by_hand():
    """seq 512, full recompute: the unit's reduce-scatter input 2 u beside its gradients (already in the peak) at the
    copy-in, once the layer's checkpointed input a = 2 h T = 4,194,304 B and its backward buffer are freed; buf =
    67,174,400 B (v1's 302,055,424 less the fc1 gradient 2 x FC1): 2 u - a - buf = 364,855,296 B."""
    v1, v2 = _mem(False, seq=512), _mem(True, seq=512)
    buf = float(v1["recompute_buffer"]) - 2 * FC1
    assert buf == float(v2["recompute_buffer"]) == 67_174_400
    assert float(v2["zero2_reduce_input"]) == 2 * U - 2 * 4096 * 512 - buf == 364_855_296


R = 2 * VH + 4096  # the root unit: embedding, output layer (untied), final norm
P = 8_030_261_248  # Llama 3 8B's parameters


def test_v2_root_unit_released_before_the_step():
    """2 GPUs, seq 512: the optimizer step's moment (states 16 P / 2 + the fp32 gradient copy 4 P / 2, [sg]) is the
    peak in both. v1 keeps its non-unit buckets there, 2 R = 2,101,354,496 B; v2 releases the root unit after the
    backward but, after the inner step, casts each parameter group's fp32 main weights into a new bf16 shard before
    dropping the old one (parameter_group.py l. 269-279, dbuffer.py l. 287-294, 308-315), the [sg] copies still held
    (fully_sharded_optimizer.py l. 137-146): the largest shard, the root's, 2 R / 2 = 1,050,677,248 B (a layer's
    2 u / 2 = 218,112,000). So the peak is 8 P + 2 P + R + the workspaces and rotary tables, lower than v1's by
    2 R - R = 1,050,677,248 B."""
    v1, v2 = _mem(False, seq=512, gpus=2, gb=2), _mem(True, seq=512, gpus=2, gb=2)
    rest = float(v2["workspaces"]) + float(v2["model_buffers"])
    assert float(allocated_bytes(v2)) == 8 * P + 2 * P + R + rest == 81_454_216_192
    assert float(allocated_bytes(v1)) - float(allocated_bytes(v2)) == 2 * R - R == 1_050_677_248


def test_v2_root_end_of_backward_by_hand():
    """The root's post-backward runs after the embedding's gradient, the backward's last (module.py l. 278-296). Two
    moments, the activations freed: the embedding's weight-gradient kernel, its fp32 partial sums and incoming
    gradient 6 B T h ([eg]) beside the root's gradients 2 R and the gathered root (fsdp_unsharded_ends, 2 R); then the
    root's copy-in, by which the gathered root is released (post_backward reshards before it reduces, module.py
    l. 427-432) and the incoming gradient freed (the autograd engine drops a node's inputs when its call returns,
    before the AccumulateGrad node's post-accumulate-grad hook runs): the gradients 2 R and their reduce-scatter input
    2 R. R = 2 V h + h = 1,050,677,248. The end: kept + max(2 R + 2 R + 6 T h, 2 R + 2 R) = kept + 4 R + 6 T h.
    Llama 3 8B at seq 512 on 8: kept (states, workspaces, rotary tables) 16,161,448,960 + 4 R + 6 x 512 x 4,096 =
    20,376,740,864 B, below the backward's peak (21,590,787,072): fsdp_end_of_backward 0 (874,725,376 when the
    gathered root was counted at the copy-in)."""
    assert R == 1_050_677_248
    m = _mem(True, seq=512)
    kept = sum(float(m[k]) for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "model_buffers"))
    assert kept == 16_161_448_960
    assert float(m["fsdp_unsharded_ends"]) == 2 * R
    assert kept + 4 * R + 6 * 512 * 4096 == 20_376_740_864 < float(allocated_bytes(m)) == 21_590_787_072
    assert float(m["fsdp_end_of_backward"]) == 0.0


def test_v2_root_end_is_the_peak_by_hand():
    """gpt-oss-20b (V 201,088, h 2,880, output layer untied, 24 layers of 32 experts), ep 8 on 32, seq 256: the root
    R = 2 x 201,088 x 2,880 + 2,880 = 1,158,269,760 parameters, 2 R B gathered (fsdp_unsharded_ends); the experts
    (4 a GPU) and the attention are small units beside it, so the root's end is the allocated peak: the kept tensors
    (states, workspaces, rotary tables), the MoE dispatchers' attributes ([dh]: the alltoall dispatcher's bf16
    probabilities and bool routing map, 24 layers x 256 tokens x 32 experts x 3 B = 589,824), the gathered root 2 R,
    its gradients 2 R and the embedding kernel's 6 T h = 6 x 256 x 2,880 = 4,423,680: 15,196,200,224 B (the copy-in's
    2 R + 2 R after the gathered root's release is 4,423,680 B lower; counting the gathered root there gave
    2 R - 6 T h more)."""
    m = _mem(True, seq=256, gpus=32, gb=32, model="gpt-oss-20b", ep=8)
    root = 2 * 201_088 * 2_880 + 2_880
    assert root == 1_158_269_760 and float(m["fsdp_unsharded_ends"]) == 2 * root
    kept = sum(float(m[k]) for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "model_buffers"))
    moe = 24 * 256 * 32 * 3
    assert float(allocated_bytes(m)) == kept + moe + 2 * root + 2 * root + 6 * 256 * 2880 == 15_196_200_224
    assert float(m["fsdp_end_of_backward"]) > 0.0


def test_v2_tied_output_gradient_at_the_root_end_by_hand():
    """Llama 3.2 1B (V 128,256, h 2,048, output layer tied to the embedding), 32 GPUs, seq 32: the root R = V h + h =
    262,670,336 parameters (2 R B gathered). The tied weight is one leaf, one AccumulateGrad node fed twice: the output
    layer's gradient (2 V h B) waits in its input buffer from the start of the backward and the embedding's is added
    to it there (input_buffer.cpp accumulate) after the embedding's kernel, which runs beside it: kept + the gathered
    root 2 R + the root's gradients 2 R + the output layer's 2 V h + 6 T h = kept + 525,340,672 x 2 + 525,336,576 +
    393,216, the allocated peak (2,294,990,848 B; without the waiting gradient 1,769,654,272 B, below the backward's
    peak)."""
    m = _mem(True, seq=32, gpus=32, gb=32, model="llama3.2-1b")
    root = 128_256 * 2048 + 2048
    assert float(m["fsdp_unsharded_ends"]) == 2 * root == 525_340_672
    kept = sum(float(m[k]) for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "model_buffers"))
    end = kept + 2 * root + 2 * root + 2 * 128_256 * 2048 + 6 * 32 * 2048
    assert float(allocated_bytes(m)) == end == 2_294_990_848
    assert float(m["fsdp_end_of_backward"]) > 0.0


def test_v2_reduce_scatter_pool_by_hand():
    """The reduce-scatter stream's pool (reserved, not allocated): each unit's input W u, and from the second
    micro-batch its sharded output W u / dp (zero_grad(set_to_none=True) leaves the sharded gradients unset at the
    first: reduced in place, parameter_group.py l. 417-434), allocated and freed on that stream (FsdpContext l. 78-84),
    cached for it alone. The largest is the root's: 2 R (1 + 1 / 8) = 2,364,023,808 B at 2 micro-batches (global
    batch 16 on 8), 2 R = 2,101,354,496 B at one (the layer's 2 u x 9 / 8 = 490,752,000 below). At seq 4,096 the
    backward's peak holds nothing on that stream: reserved - allocated = the pool. The output never moves the
    allocated peak (it comes once the unit's gradients are dropped, 2 u / 8 beside the input 2 u, below the copy-in's
    gradients and input): allocated is the same at one and two micro-batches. At seq 512 the allocated peak is the
    backward's with the layer's copy-in, its input (364,855,296 B beyond the rest) on that stream, and the reserved
    peak the backward's peak without it (the compute stream's most) + the pool: reserved - allocated =
    2,364,023,808 - 364,855,296 = 1,999,168,512 B."""
    two, one = _mem(True), _mem(True, gb=8)
    assert float(reserved_bytes(two)) - float(allocated_bytes(two)) == 2 * R * 9 / 8 == 2_364_023_808
    assert float(reserved_bytes(one)) - float(allocated_bytes(one)) == 2 * R == 2_101_354_496
    assert float(allocated_bytes(one)) == float(allocated_bytes(two))
    end = _mem(True, seq=512)
    assert float(end["zero2_reduce_input"]) == 364_855_296
    assert float(reserved_bytes(end)) - float(allocated_bytes(end)) == 2 * R * 9 / 8 - 364_855_296
    assert float(end["stream_pools"]) == 1_999_168_512
    assert float(_mem(False)["stream_pools"]) == 0.0  # version 1: no such pool (its buffers are persistent)


# DeepSeek-V2-Lite (h 2,048): MLA without a query latent 2,048 x 3,072 + 2,048 x 576 + 512 + 512 x 4,096 + 2,048 x 2,048
# = 13,763,072, two norms 4,096; the dense first layer's MLP 3 x 2,048 x 10,944 = 67,239,936; an MoE layer's shared
# experts 3 x 2,048 x 2,816 = 17,301,504 and router 64 x 2,048, its 64 routed experts 3 x 2,048 x 1,408 = 8,650,752 each
D_DENSE = 13_763_072 + 4096 + 67_239_936
D_MOE = 13_763_072 + 4096 + 17_301_504 + 64 * 2048
EXPERT = 3 * 2048 * 1408


def _dsv2(ep, seq):
    return _mem(True, seq=seq, gpus=16, gb=32, model="deepseek-v2-lite", ep=ep)


def test_v2_experts_a_unit_of_their_own_under_ep():
    """At ep > 1 each MoE layer's experts are an FsdpModule of their own over the expert-DP mesh
    (mcore_fsdp_adapter.py l. 570-583), a child of the layer's: forward order L_i, E_i, L_i+1, backward order
    L_i, E_i, L_i-1 (module.py l. 97-115, 464-470); during E_1's backward L_1's dense unit, E_1 and the prefetched
    L_0 (the dense first layer) are gathered: D_moe + 8 experts + D_dense = 31,199,744 + 69,206,016 + 81,007,104 =
    181,412,864 parameters, 362,825,728 B (the unit pair priced before: 2 x 100,405,760 x 2 = 401,623,040). At ep 1
    the experts are the layer's: 2 x (31,199,744 + 64 x 8,650,752) x 2 = 2,339,391,488 B. Each unit's reduce-scatter
    input is its own: at seq 512 the copy-in's excess 2 x max(D_dense, 8 experts) - a - buf = 162,014,208 - 2,097,152
    (a = 2 h T) - buf (the layer's backward buffer)."""
    assert (D_DENSE, D_MOE, 8 * EXPERT) == (81_007_104, 31_199_744, 69_206_016)
    ep8, ep1 = _dsv2(8, 4096), _dsv2(1, 4096)
    assert float(ep8["fsdp_gathered_units"]) == (D_MOE + 8 * EXPERT + D_DENSE) * 2 == 362_825_728
    assert float(ep1["fsdp_gathered_units"]) == 2 * (D_MOE + 64 * EXPERT) * 2 == 2_339_391_488
    short = _dsv2(8, 512)
    buf = float(short["recompute_buffer"])
    assert float(short["zero2_reduce_input"]) == pytest.approx(2 * D_DENSE - 2 * 2048 * 512 - buf, rel=1e-12)


VH_LITE = 102_400 * 2048  # DeepSeek-V2-Lite's output layer, untied


def test_v2_unit_gradients_under_ep_by_hand():
    """The MoE block's forward runs the shared experts, the router, the dispatch, the experts, the combine
    (moe_layer.py l. 658-694); autograd runs the latest-created ready node first and each AccumulateGrad at once, so
    the experts' gradients are complete before any of the layer's dense part's (router, shared experts, norms, MLA),
    and E_i's post-backward drops them (parameter_group.py l. 346-351) before D_i's first: one unit's gradients at a
    time beside the output layer's (2 V h, held to the root's post-backward). ep 8 on 16: max(D_dense, D_moe,
    8 experts) = D_dense = 81,007,104: 2 x (81,007,104 + 209,715,200) = 581,444,608 B (2 x (D_moe + 8 experts + V h) =
    620,241,920 before); ep 4: 16 experts 138,412,032 the largest: 2 x (138,412,032 + 209,715,200) = 696,254,464 B;
    ep 1: the experts in their layer's unit, 2 x (31,199,744 + 64 x 8,650,752 + 209,715,200) = 1,589,126,144 B."""
    assert float(_dsv2(8, 4096)["fsdp_unit_grads"]) == 2 * (D_DENSE + VH_LITE) == 581_444_608
    assert float(_dsv2(4, 4096)["fsdp_unit_grads"]) == 2 * (16 * EXPERT + VH_LITE) == 696_254_464
    assert float(_dsv2(1, 4096)["fsdp_unit_grads"]) == 2 * (D_MOE + 64 * EXPERT + VH_LITE) == 1_589_126_144


def test_v2_step_cast_of_the_experts_shard_by_hand():
    """ep 8 on 16, seq 512: the optimizer step's moment is the peak: the states, the fp32 gradient copy [sg] (4 B a
    local parameter: twice the bf16 gradient shards), the dispatchers' attributes ([dh]: 26 MoE layers x 512 tokens
    x 64 experts x 3 B = 2,555,904), the workspaces and rotary tables, and the model-weight cast's largest shard
    (parameter_group.py l. 269-279): the experts' unit over the expert DP group of 16 / 8 = 2, 2 x 69,206,016 / 2 =
    69,206,016 B (the root's 2 x 419,432,448 / 16 = 52,429,056, the dense layer's 2 x 81,007,104 / 16 =
    10,125,888)."""
    m = _dsv2(8, 512)
    states = sum(float(m[k]) for k in ("weights", "gradients", "master_weights", "adam"))
    rest = float(m["workspaces"]) + float(m["model_buffers"])
    root = 2 * VH_LITE + 2048
    assert max(2 * 8 * EXPERT / 2, 2 * root / 16, 2 * D_DENSE / 16) == 2 * 8 * EXPERT / 2 == 69_206_016
    assert float(allocated_bytes(m)) == pytest.approx(
        states + 2 * float(m["gradients"]) + 26 * 512 * 64 * 3 + rest + 69_206_016, rel=1e-15)


def test_v2_job_refusals():
    """The job's mfsdp_v2 is refused on a stack without a v2 mode, with the double buffer (v2 reads none), the outer
    optimizer sharding (l. 670-671) and the gradient-accumulation fusion (l. 672-673)."""
    base = dict(model="llama3-8b", gpus=8, tp=1, sharding="fsdp", mfsdp_v2=True, gradient_accumulation_fusion=False)
    with pytest.raises(PlannerError, match="runs no Megatron-FSDP v2 mode"):
        resolve(Job(**base, stack="torchtitan"))
    for extra, match in ((dict(mfsdp_double_buffer=True), "reads no fsdp_double_buffer"),
                         (dict(gradient_accumulation_fusion=None), "gradient accumulation fusion")):
        with pytest.raises(PlannerError, match=match):
            resolve(Job(**{**base, **extra}, stack="megatron", sharding_mode="megatron_fsdp_optim_grads_params"))


def test_v2_startup_rule_code_105():
    """MEGATRON_FSDP_V2_LAYOUT (code 100): a v2 plan at tp 2 or under the distributed optimizer is refused (exit 2);
    fit ranks only optim_grads_params plans at tp = pp = cp = 1."""
    from planner.startup import CODES

    assert CODES["MEGATRON_FSDP_V2_LAYOUT"] == 100
    job = ["--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--stack", "megatron", "--global-batch",
           "16", "--seq-len", "4096", "--mfsdp-v2", "--no-gradient-accumulation-fusion"]
    r = CliRunner().invoke(app, ["explain", *job, "--tp", "2", "--sharding", "megatron_fsdp_optim_grads_params"])
    assert r.exit_code == 2 and "MEGATRON_FSDP_V2_LAYOUT" in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(app, ["explain", *job, "--tp", "1", "--sharding", "distributed_optimizer"])
    assert r.exit_code == 2 and "MEGATRON_FSDP_V2_LAYOUT" in r.output, r.output
    r = CliRunner().invoke(app, ["fit", *job, "--format", "json", "--top", "3"])
    assert r.exit_code == 0, r.output
    import json

    rows = json.loads(r.stdout)
    assert rows
    for row in rows:
        p = row["plan"]
        assert (p["sharding_mode"], p["tp"], p["pp"], p["cp"], p.get("mfsdp_v2")) == (
            "megatron_fsdp_optim_grads_params", 1, 1, 1, True)


ARGS = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096 --max-position-embeddings 8192 --micro-batch-size 1 "
        "--global-batch-size 16 --bf16 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
        "--ckpt-format fsdp_dtensor --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 "
        "--untie-embeddings-and-output-weights --disable-bias-linear --padded-vocab-size 128256 "
        "--no-gradient-accumulation-fusion --recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1 --megatron-fsdp-version 2")


def test_v2_reader_and_export_round_trip(tmp_path):
    """--megatron-fsdp-version 2 is the job's mfsdp_v2 (no longer listed as not modelled); --fsdp-double-buffer, which
    v2 does not read, is listed as ignored; explain prices v2's 4 u gathered; export --format megatron writes
    --megatron-fsdp-version 2 back and reads back as the same plan."""
    import json

    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    f = tmp_path / "v2.args"
    f.write_text((ARGS + " --fsdp-double-buffer").replace(" --", "\n--") + "\n")
    cfg = load_trainer_config(f, gpus=8)
    assert cfg.job["mfsdp_v2"] is True and "mfsdp_double_buffer" not in cfg.job
    assert not any("megatron-fsdp-version" in str(u) for u in cfg.unmodelled)
    assert any(str(i).startswith("--fsdp-double-buffer") and "v2 reads no" in str(i) for i in cfg.ignored)
    # the assumed lines name what v2 moves (memory.py [v2]) and its own buffers' code, not version 1's
    (v2_line,) = [str(a) for a in cfg.assumed if str(a).startswith("mfsdp_v2=")]
    for item in ("mcore_fsdp_adapter.py l. 570-583", "module.py l. 78-84", "module.py l. 427-432",
                 "parameter_group.py l. 269-279"):
        assert item in v2_line, item
    (mode_line,) = [str(a) for a in cfg.assumed if str(a).startswith("sharding_mode=")]
    assert "experimental/parameter_group.py @d98e8a64" in mode_line and "param_and_grad_buffer.py" not in mode_line
    f.write_text(ARGS.replace(" --", "\n--") + "\n")
    r = CliRunner().invoke(app, ["explain", str(f), "--gpus", "8", "--hardware", "h100-sxm", "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)
    assert row["plan"]["mfsdp_v2"] is True
    text, _ = export_plan(row["plan"], "megatron")
    assert "--megatron-fsdp-version 2" in text and "--use-distributed-optimizer" not in text
    check_readback(row, "megatron", text)


def test_v2_rows_name_it_in_the_stack_options_column():
    """fit's stack options column names the job's mfsdp_v2 ('Megatron-FSDP v2'), not '-'; a v1 row does not."""
    from planner.render.fit import stack_options_text

    job = ["--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--stack", "megatron", "--global-batch",
           "16", "--seq-len", "4096", "--no-gradient-accumulation-fusion", "--top", "2"]
    r = CliRunner().invoke(app, ["fit", *job, "--mfsdp-v2"])
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.output.splitlines() if ln.startswith("│")]
    assert len(rows) == 2 and all("Megatron-FSDP v2" in ln for ln in rows), r.output
    base = {"stack": "megatron", "sharding": "fsdp", "sharding_mode": "megatron_fsdp_optim_grads_params"}
    assert stack_options_text({**base, "mfsdp_v2": True}) == "Megatron-FSDP v2"
    assert stack_options_text(base) == "-"
