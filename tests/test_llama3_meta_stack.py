"""Meta's own Llama 3 stack (stack_db/llama3-meta.yaml, arXiv:2407.21783 sec. 3.3.2) and the
405B on 16,384 H100 (issue 22): the entry says what the paper describes, Meta's layout is
feasible on it with its memory derived by hand, and `fit` ranks only what the stack runs.

Meta's layout (Table 4): TP 8, CP 1, PP 16, DP 128, 8,192 tokens, 16 sequences per DP rank
(micro-batch 1: m = 16), vpp 8, the embedding and the loss each a layer of the split (126 + 2
units in 16 x 8 chunks), no activation checkpointing, optimizer states and gradients sharded.
These tests pin the planner's figures to hand derivations; they are not targets (the MFU is
reported in docs/llama3_405b_16k.md, not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.errors import PlannerError
from planner.explain import evaluate
from planner.memory import STAGE_MIDDLE
from planner.plan import plan_dict, resolve
from planner.schema import Job, Stack
from planner.search import fit

ROOT = Path(__file__).parent.parent
GIB, MIB = 2**30, 2**20
H, F, KV, T, DP = 16_384, 53_248, 8 * 128, 8, 128  # hidden, MLP, K/V width (8 heads x 128), TP, DP
# 520,704 B a token over T ranks, the fused attention core's fp32 log-sum-exp (4 B x 128 heads, planner/layers/
# attention.py [ls]) among them (tests/test_llama3_405b_layout.py)
PER_TOKEN = 12 * H + 4 * KV + 6 * F + 4 * 128
META = dict(model="llama3-405b", gpus=16384, tp=8, cp=1, pp=16, vpp=8, micro_batch=1, global_batch=2048, seq_len=8192,
            sharding="zero2", stack="llama3-meta")


def _stack() -> Stack:
    return Stack(**yaml.safe_load((ROOT / "stack_db" / "llama3-meta.yaml").read_text()))


def test_the_entry_runs_only_what_the_paper_describes():
    """sec. 3.3.2: one FSDP mode (optimizer states and gradients sharded, reduced in fp32),
    the interleaved schedule, the order [TP, CP, PP, DP] (DP outermost), one layer fewer on the
    first and the last stage, stage inputs/outputs freed; no TP overlap is described."""
    st = _stack()
    runs = st.runs
    assert [(m.name, m.level, m.grad_reduce) for m in runs.sharding] == [("fsdp_no_reshard", "zero2", "microbatch")]
    assert [s.schedule for s in runs.schedules] == ["interleaved"]
    assert [o.order for o in runs.rank_orders] == ["tp-cp-pp-dp"]
    assert st.fsdp.grad_reduce_bytes == 4 and not st.fsdp.reshard_after_forward_with_pp
    assert not st.overlap.tp_comm_overlap_supported and not st.defaults.tp_comm_overlap
    assert st.pipeline_ends_as_layers and st.pipeline_split == "trim_ends"
    assert not st.memory.pipeline_keeps_stage_outputs
    assert (st.context_parallel.kernel, st.context_parallel.fwd_kv, st.context_parallel.dkv) == ("one", "allgather", "reduce_scatter")
    assert st.expert_parallel is None and st.fp8_recipes == {}
    # every assumption is listed as one
    assert any("shards optimizer states and gradients" in u for u in st.uncertain)
    assert all("2407.21783" in s for s in runs.sharding[0].sources + runs.rank_orders[0].sources)


def test_meta_layout_memory_by_hand_over_the_headroom():
    """A middle stage holds 8 layers (128 units in 128 chunks: the first and the last stage 7,
    the embedding and the loss counted without the job saying so). Every rank r <= 7 runs all
    m v = 128 chunk-forwards before its first backward: 16 x 8 layer-micro-batches of 8,192 / 8
    tokens x 520,704 B = 63.56 GiB of activations. Model states: P = 8 x (layer / 8 + 2 h) =
    3,187,933,184 stage parameters (the two norms whole on every TP rank), bf16 weights whole
    (2 P), the fp32 gradients, master and Adam moments sharded over DP 128 ((4 + 4 + 8) P / 128);
    two cuBLAS workspaces of 32 MiB (hardware_db h100-sxm torch_cublas_workspace_MiB; no TE), the
    1 GiB reserve: 70.93 GiB; NCCL's NVLS buffers of the TP group (8 ranks in the node: 16 x 2 x 1 MiB x 8 +
    2 MiB = 258 MiB, memory.py [nv]), 71.19 GiB. Beyond that peak, the reduce-scatter of a layer unit (memory.py [rs],
    stack fsdp.zero2_unit_reduce, FSDP2's foreach_reduce): right after the stage's first backward
    (one layer, u = 398,491,648 parameters a GPU) its bf16 gradients (2 u) and their fp32 copy, the
    reduce-scatter input (4 u), are live, that layer-micro-batch's activations (1,024 x 520,704 B)
    freed: 6 u - a = 1.73 GiB, 72.92 GiB in all. Over the 90% of the 79.09 GiB an H100 reports
    (71.18 GiB): refused at the planner's 10% headroom, admitted at 7% (at 8% before the NVLS buffers)."""
    settings, plan, warnings = resolve(Job(**META))
    assert (int(plan.split_emb), int(plan.split_loss)) == (1, 1)
    assert ("account_for_embedding_in_pipeline_split", True) in settings.inherited
    assert any("the middle stages hold 8 layers, the first 7 and the last 7" in w for w in warnings)
    e = evaluate(settings, plan)
    assert int(e.stage) == STAGE_MIDDLE
    layer = 2 * H * H + 2 * H * KV + 3 * H * F
    unit = layer // T + 2 * H
    assert unit == 398_491_648
    p_stage = 8 * unit
    assert p_stage == 3_187_933_184
    per_layer_mb = (8192 // T) * PER_TOKEN
    mem = e.memory
    want = {"weights": 2 * p_stage, "gradients": 4 * p_stage / DP, "master_weights": 4 * p_stage / DP,
            "adam": 8 * p_stage / DP, "layer_activations": 16 * 8 * per_layer_mb,
            "workspaces": 2 * 32 * MIB, "reserve": GIB, "zero2_reduce_input": (2 + 4) * unit - per_layer_mb,
            "nvls_buffers": 258 * MIB}  # NCCL's NVLS buffers of the TP group, 8 ranks in the node (memory.py [nv])
    for k, v in want.items():
        assert float(mem[k]) == pytest.approx(v, rel=1e-12), k
    assert float(mem.total) == pytest.approx(sum(want.values()), rel=1e-12)  # nothing else on this stage
    assert float(mem["zero2_reduce_input"]) / GIB == pytest.approx(1.73, abs=0.005)
    # the peak: 70.93 GiB + the NVLS buffers' 0.25 (memory.py [nv])
    assert (float(mem.total) - float(mem["zero2_reduce_input"])) / GIB == pytest.approx(71.19, abs=0.005)
    assert float(mem.total) / GIB == pytest.approx(72.92, abs=0.005)  # 72.66 before the NVLS buffers
    assert float(e.usable) / GIB == pytest.approx(0.9 * 79.09, rel=1e-12)
    assert not e.fits
    # the headroom that admits it: 1 - 72.92 / 79.09 = 7.8% (8.1% before the NVLS buffers)
    s8, p8, _ = resolve(Job(**META, headroom=0.08))
    assert not evaluate(s8, p8).fits
    s7, p7, _ = resolve(Job(**META, headroom=0.07))
    assert evaluate(s7, p7).fits


def test_zero2_reduce_input_moments_by_hand():
    """memory.py [rs]: the larger of the copy-in, (2 + 4) u less one layer-micro-batch's activations a and the
    layer's backward buffer B, and the next backward's start, 4 u beside the peak, less a where every forward of the
    step runs before the stage's first backward. Meta's layout under full recompute (a: the layer's input kept,
    1,024 tokens x 2 h B; B: the re-run layer): every forward first, max(6 u - a - B, 4 u - a). Its 8,192-GPU
    row (m = 32: the middle stage holds 141 of its 256 chunk-forwards, so forwards follow backwards) without
    recompute: max(6 u - a, 4 u). DeepSpeed's zero2 holds none of this term (its stack leaves fsdp.zero2_unit_reduce
    false); Megatron's (megatron_fsdp_optim_grads) holds its reduce-scatter queue's rule instead
    (tests/test_megatron_fsdp_queue.py)."""
    unit = (2 * H * H + 2 * H * KV + 3 * H * F) // T + 2 * H
    s, p, _ = resolve(Job(**META, recompute="full"))
    mem = evaluate(s, p).memory
    a, buf = (8192 // T) * 2 * H, float(mem["recompute_buffer"])
    assert buf > 0
    assert float(mem["zero2_reduce_input"]) == pytest.approx(max(6 * unit - a - buf, 4 * unit - a), rel=1e-12)
    s, p, _ = resolve(Job(**{**META, "gpus": 8192}))
    mem = evaluate(s, p).memory
    a = (8192 // T) * PER_TOKEN
    assert float(mem["zero2_reduce_input"]) == pytest.approx(max(6 * unit - a, 4 * unit), rel=1e-12)
    for stack, mode in (("megatron-deepspeed", "zero2"),):
        s, p, _ = resolve(Job(model="llama3-8b", gpus=8, sharding="zero2", sharding_mode=mode, stack=stack,
                              global_batch=16, micro_batch=1, seq_len=4096))
        assert float(evaluate(s, p).memory["zero2_reduce_input"]) == 0.0


def test_meta_layout_reduces_its_gradients_every_micro_batch():
    """The mode's grad_reduce microbatch (sharded gradients: each micro-batch's reduce-scattered
    into the fp32 shard): 16 reduce-scatters of the fp32 gradients a step and one all-gather of
    the updated bf16 weights, over the 128 DP ranks at stride 128 (DP outermost: tp-cp-pp-dp),
    in buckets of max(40M, 1M x 128) parameters (the entry's assumed buckets), for the stage with
    the most parameters, whose exposed DP time is the largest: a middle stage's 8 layers (3.19e9 a
    GPU), not the last stage's 7 layers, output layer (128,256 x h / 8) and final norm (3.05e9,
    what dp_comm priced before: 24 buckets, 4.771 s). Each collective priced by comm.py alone (not
    step.dp_comm's code path)."""
    import math

    from planner import comm
    from planner.catalog import load_hardware
    from planner.explain import to_json

    s, p, _ = resolve(Job(**META))
    dp_s = to_json(s, p, evaluate(s, p))["time"]["dp_comm_s"]
    layer = 2 * H * H + 2 * H * KV + 3 * H * F
    p_end = 7 * (layer // T + 2 * H) + 128_256 * H // T + H
    p_mid = 8 * (layer // T + 2 * H)
    assert p_mid > p_end
    n_b = math.ceil(p_mid / max(40e6, 1e6 * DP))
    assert n_b == 25
    cpar = comm.comm_params(load_hardware("h100-sxm"))
    rs = n_b * comm.auto_collective_times(comm.REDUCE_SCATTER, p_mid * 4 / n_b, DP, 128, cpar, 16384)[0]
    ag = n_b * comm.auto_collective_times(comm.ALL_GATHER, p_mid * 2 / n_b, DP, 128, cpar, 16384)[0]
    assert dp_s == pytest.approx(16 * rs + ag, rel=1e-9)
    assert dp_s == pytest.approx(4.981, abs=0.001)  # of a 7.7 s step: the term Meta's 41% has no room for


def test_fit_ranks_only_what_the_stack_runs():
    """fit's rows on llama3-meta: the stack's one sharding mode, its rank order, the
    interleaved schedule under PP, no TP overlap, the ends counted in the split; asking for TP
    overlap or another rank order is refused."""
    res = fit(Job(model="llama3-405b", gpus=16384, stack="llama3-meta"), top=10)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        assert (p["sharding"], p["sharding_mode"], p["rank_order"]) == ("zero2", "fsdp_no_reshard", "tp-cp-pp-dp")
        assert p["tp_comm_overlap"] is False and p["torch_compile"] is False
        assert p["pp"] == 1 or p["schedule"] == "interleaved"
        assert p["account_for_embedding_in_pipeline_split"] and p["account_for_loss_in_pipeline_split"]
    with pytest.raises(PlannerError, match="does not overlap TP communication"):
        resolve(Job(**META, tp_comm_overlap=True))
    with pytest.raises(PlannerError, match="does not build rank order"):
        resolve(Job(**META, rank_order="tp-cp-dp-pp"))
    with pytest.raises(PlannerError, match="no zero1 sharding mode"):
        resolve(Job(**{**META, "sharding": "zero1"}))


def test_all_gather_cp_by_hand(explain):
    """Meta's CP (sec. 3.3.2, ContextParallelSpec kernel one): per layer and micro-batch the
    forward all-gathers every rank's K/V and runs one kernel of the local queries against it,
    nothing beside the all-gather; the backward all-gathers again and reduce-scatters the
    gathered K/V's fp32 gradients. Llama 3 8B, TP 4 x CP 2 in one node (CP stride 4), 8,192
    tokens: T = 4,096 tokens a rank, 2 KV heads of 128 a TP rank, K and V. All of it exposed;
    no merges and no per-step kernels (cp_compute 0)."""
    from planner import comm
    from planner.catalog import load_hardware

    hw = load_hardware("h100-sxm")
    _, _, _, js = explain(model="llama3-8b", gpus=8, tp=4, cp=2, global_batch=2, micro_batch=1, seq_len=8192,
                          sharding="zero2", stack="llama3-meta")
    kv_el = 4096 * 2 * 2 * 128
    cpar = comm.comm_params(hw)
    ag = float(comm.group_collective(comm.ALL_GATHER, 2 * kv_el * 2, 2, 4, cpar, comm.AUTO, job_gpus=8)[0].time_s)
    rs = float(comm.group_collective(comm.REDUCE_SCATTER, 2 * kv_el * 4, 2, 4, cpar, comm.AUTO, job_gpus=8)[0].time_s)
    m, layers = 2, 32
    assert js["time"]["cp_comm_total_s"] == pytest.approx(m * layers * (2 * ag + rs), rel=1e-9)
    assert js["time"]["cp_comm_s"] == pytest.approx(m * layers * (2 * ag + rs), rel=1e-9)
    assert js["time"]["cp_compute_s"] == 0.0


def test_one_kernel_cp_goes_with_the_all_gather_only():
    data = yaml.safe_load((ROOT / "stack_db" / "llama3-meta.yaml").read_text())
    Stack(**data)
    for field, value in (("dkv", "after_step"), ("fwd_kv", "ring"), ("kernel", "per_step")):
        bad = {**data, "context_parallel": {**data["context_parallel"], field: value}}
        with pytest.raises(ValueError, match="kernel one goes with"):
            Stack(**bad)


def test_job_without_sharding_runs_the_stacks_first_mode():
    """A job that names no sharding on a stack with no unsharded mode runs the stack's first
    mode (stack_db runs.sharding, in order), listed as inherited from the stack; naming a
    level the stack lacks is still refused (above). Megatron, which runs DDP, keeps none."""
    job = {k: v for k, v in META.items() if k not in ("sharding", "sharding_mode")}
    settings, plan, _ = resolve(Job(**job))
    assert ("sharding", "zero2") in settings.inherited
    assert plan_dict(plan, settings)["sharding_mode"] == "fsdp_no_reshard"
    settings, _, _ = resolve(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", stack="deepseek", pp=16, ep=64,
                                 global_batch=15360, seq_len=4096))
    assert ("sharding", "zero1") in settings.inherited
    settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8))
    assert plan_dict(plan, settings)["sharding"] == "none" and not any(k == "sharding" for k, _ in settings.inherited)


def test_meta_8k_layout_is_accepted_and_priced_by_hand():
    """Table 4's 8,192-GPU row (TP 8, CP 1, PP 16, DP 64, 16M tokens: 32 sequences a DP rank,
    m = 32): the stack's rules accept it; its middle stage 1 holds Megatron's warm-up 2(p - s - 1)
    + (v - 1) N + 1 = 28 + 7 x 16 + 1 = 141 chunk-forwards (N = 16: pp divides m) of 8 layers
    / 8 chunks... each a layer of 8,192 / 8 tokens x 520,704 B: 70.02 GiB of activations, so the
    layout does not fit 90% of an H100 (77.8 GiB before a layer unit's reduce-scatter was priced,
    memory.py [rs]: 79.5 GiB with its 1.73 GiB; docs/llama3_405b_16k.md)."""
    s, p, _ = resolve(Job(**{**META, "gpus": 8192}))
    assert (int(p.dp), int(p.microbatches)) == (64, 32)
    e = evaluate(s, p)
    assert int(e.stage) == STAGE_MIDDLE
    assert float(e.memory["layer_activations"]) == pytest.approx(141 * (8192 // T) * PER_TOKEN, rel=1e-12)
    # + the TP group's 258 MiB of NVLS buffers (memory.py [nv]; 77.76 and 79.49 before them)
    assert float(e.memory.total - e.memory["zero2_reduce_input"]) / GIB == pytest.approx(78.01, abs=0.005)
    assert float(e.memory.total) / GIB == pytest.approx(79.74, abs=0.005)
    assert not e.fits


def test_microbatches_pp_does_not_divide_on_meta_and_megatron():
    """sec. 3.3.2 'Batch size constraint': Meta's schedule runs any number of micro-batches
    (runs.schedules microbatches any), Megatron-LM's only multiples of pp (schedules.py
    @d98e8a64: N defaults to pp and m % N must be 0 or >= pp). Meta's 16,384-GPU layout at the
    8M-token batch of sec. 3.4.1 (1,024 sequences: m = 8 < pp = 16) and at 2,560 sequences (m =
    20, one group of N = 20) runs on llama3-meta; m = 8 has the bubble (p - 1 + (v-1)(p - m))/(v m)
    = (15 + 56)/64 of a step's compute and the m v = 64 chunk-micro-batches all in flight
    (8 x 8 layers x 1,024 tokens x 520,704 B); m = 20 the paper's 15/160 with N = 20: the warm-up
    2(p - 1 - s) + 7 x 20 + 1 on stage s = 1 (169) exceeds its m v = 160 chunk-forwards, so it holds
    all 160. On megatron both are refused with the rule's source; the bubble's time is 71/15 of
    m = 16's at m = 8 and equal to it at m = 20."""
    from planner.explain import to_json
    from planner.pipeline import INTERLEAVED, bubble_fraction

    bubbles, fills = {}, {}
    for gbs, m in ((2048, 16), (1024, 8), (2560, 20)):
        s, p, _ = resolve(Job(**{**META, "global_batch": gbs}))
        assert int(p.microbatches) == m and int(p.schedule) == INTERLEAVED
        e = evaluate(s, p)
        held = min(2 * 14 + 7 * (16 if m % 16 == 0 else m) + 1, m * 8)
        assert float(e.memory["layer_activations"]) == pytest.approx(held * (8192 // T) * PER_TOKEN, rel=1e-12)
        assert float(bubble_fraction(16, m, 8, INTERLEAVED)) == (15 + 7 * max(16 - m, 0)) / (8 * m)
        tm = to_json(s, p, e)["time"]
        fills[m] = tm["pp_fill_drain_s"]
        bubbles[m] = tm["bubble_s"] - fills[m]  # the bubble's micro-batches, without the fill's and drain's hops
        if m % 16:
            with pytest.raises(PlannerError, match=r"divisible by pp=16 on stack megatron \(NVIDIA/Megatron-LM @d98e8a64 "
                                                   r"megatron/core/pipeline_parallel/schedules.py"):
                resolve(Job(**{**META, "global_batch": gbs, "stack": "megatron", "sharding_mode": None}))
    # the bubble's time, fraction x m micro-batches of the same length: (15 + 7 x 8) / 15 times Table 4's at
    # m = 8, the same as Table 4's at m = 20 ((p - 1)/(v m) x m does not depend on m >= p)
    assert bubbles[8] / bubbles[16] == pytest.approx(71 / 15, rel=1e-12)
    assert bubbles[20] == pytest.approx(bubbles[16], rel=1e-12)
    # the fill's and drain's hops (step.py [31]), S one whole send, w the middle (critical) stage's waited share of
    # it: the bubble's frac_m x 2 v sends at w against 2 (p - 1) whole (30 (S - w) at m >= p; (15 + 56) / 8 x 16 =
    # 142 (S - w) at m = 8), and Meta's asynchronous p2p overlaps the warm-up too, so each of the v - 1 = 7 later
    # rounds each way waits min(N, p) whole hops: 16 at m = 16 (N = 16), 8 at m = 8 (N = 8); at m = 20 (N = 20) the
    # round's 4 further chunks (a layer's forward of milliseconds each) outlast the 16 hops: none.
    #   m = 16: 30 (S - w) + 14 x 16 S;  m = 8: 142 (S - w) + 14 x 8 S;  m = 20: 30 (S - w)
    S = (fills[16] - fills[20]) / 224
    w = (fills[16] - fills[8]) / 112
    assert fills[16] == pytest.approx(30 * (S - w) + 224 * S, rel=1e-9)
    assert w == pytest.approx(0.189 * S, rel=1e-9)  # the stack's overlapped_exposed_fraction (a chunk outlasts S)


def test_split_need_not_divide_on_meta_only():
    """Stack.pipeline_split_divides: megatron refuses a split whose layers + counted ends do not
    divide into pp x vpp chunks (Megatron-Core TransformerConfig); llama3-meta (false: the paper
    states no such rule) takes 128 units on pp 13 x vpp 2 = 26 chunks of 5 (130 slots, the first
    and the last chunk one fewer: 3 layers and the embedding, 3 layers and the loss), refuses pp 9
    x vpp 2 (18 chunks of 8: 144 slots, 16 left over, more than the end chunks hold: overdrawn),
    and a plan on pp 13 with vpp 1 names the schedule it asks for (1f1b), which the stack lacks."""
    job = dict(META, gpus=13 * 8 * 8, pp=13, vpp=2, global_batch=104)
    s, p, warnings = resolve(Job(**job))
    assert (int(p.pp), int(p.vpp), int(p.microbatches)) == (13, 2, 13)
    assert any("the middle stages hold 10 layers, the first 8 and the last 8" in w for w in warnings)
    with pytest.raises(PlannerError, match=r"do not divide into pp\*vpp=26 chunks"):
        resolve(Job(**{**job, "stack": "megatron", "sharding": "zero1", "account_for_embedding_in_pipeline_split": True,
                       "account_for_loss_in_pipeline_split": True}))
    with pytest.raises(PlannerError, match="would place layers the model does not have"):
        resolve(Job(**{**META, "gpus": 9 * 8 * 8, "pp": 9, "vpp": 2, "global_batch": 72}))
    with pytest.raises(PlannerError, match="does not run the 1f1b pipeline schedule"):
        resolve(Job(**{**job, "vpp": 1}))


def test_all_gathered_kv_of_one_layer_by_hand():
    """Table 4's long-context row (TP 8, CP 16, PP 16, DP 4 at 131,072 tokens; 8,192 GPUs, the
    product of its degrees: the table lists 16,384, a mesh of DP 8), 16M tokens a step (128
    sequences, m = 32): each rank holds
    131,072 / 16 = 8,192 tokens of one sequence; its local K (and V) is 8,192 x 1 KV head (8 / TP
    8) x 128 = 1,048,576 elements. Meta's CP all-gathers K and V (sec. 3.3.2), cp = 16 times that
    in bf16 (2 x 2 B x 16), and the backward, all-gathering them again, writes the gathered dK and
    dV in fp32 before their reduce-scatter (2 x 4 B x 16): 12 x 16 x 1,048,576 B = 192 MiB for
    the layer being run, the stage's whole recompute buffer without recompute (memory.py [cp2]);
    at CP 1 nothing is gathered."""
    job = {**META, "gpus": 8192, "seq_len": 131072, "cp": 16, "dp": 4, "global_batch": 128}
    s, p, _ = resolve(Job(**job))
    mem = evaluate(s, p).memory
    assert float(mem["recompute_buffer"]) == 12 * 16 * 8192 * 128 == 192 * MIB
    s1, p1, _ = resolve(Job(**META))
    assert float(evaluate(s1, p1).memory["recompute_buffer"]) == 0.0


def test_meta_layout_reduce_scatters_queue_behind_the_schedule():
    """overlap.grad_reduce_queued (step.py [26], pipeline.py [12]): each chunk's fp32 reduce-scatter
    (rs / 8, rs a micro-batch's of a middle stage, as test_meta_layout_reduces_its_gradients_every_micro_batch
    prices it) is issued as the chunk's backward ends and runs on one stream behind the schedule's
    later passes. The pipeline's compute T = compute + TP + PP + bubble = (v m + p - 1)(f + b) =
    143 (f + b), f : b the critical (middle) stage's forward : backward (step.stage_passes: its own layers, no
    share of the output layer). Stage 0 (warm-up 2 x 15 + 7 x 16 = 142
    >= m v = 128: every forward first) ends its first backward at 128 f + 16 b; its backwards then end
    f + b apart while the later stages are in their steady state, b apart from the 16th on (the
    flush's 112, ending at T); b < rs / 8 < f + b, so the queue keeps up until then and lags after:
    it drains 113 rs / 8 - 112 b past T. The rest of the 16 rs overlaps (x the stack's 0.189), and
    the weights' all-gather hides behind a forward but its first bucket, as before. The simulator's
    queue on that schedule agrees. 2.107 s exposed before (each micro-batch's behind its own
    backward): 1.819 s, step 7.805 -> 7.516 s; with the middle stage's 3.19e9 parameters in place of
    the last stage's 3.05e9 (dp_comm, issue 22 metamem): 2.010 s, step 7.708 s; with the middle stage's own passes
    as f : b and the all-gather's window (critstage: before, a third of the output layer was added to a middle
    stage's forward, so f was larger and hid more of the all-gather): 2.0145 s, step 7.712 s; with each GEMM's
    output write after its K loop (compute [5a]: longer passes hide more of the queue): 2.0007 s, step 7.729 s; with
    the pipeline's fill and drain hops whole and the warm-up's wrap-around hops (step.py [31], branch filldrain: in the
    bubble, not among the passes T counts, so taken out of it here): 2.0007 s, step 7.909 s; with the backward's
    re-gathers of the QKV and fc1 inputs for their wgrad GEMMs (step.py [35]: tp_saves_gathered_input false, the
    entry's assumption; 0.032 s a step in tp_comm, the passes longer, so more of the queue hides): 1.9855 s, step
    7.930 s."""
    import math
    from fractions import Fraction

    from planner import comm, step
    from planner.catalog import load_hardware
    from planner.explain import to_json
    from planner.pipeline import simulate

    s, p, _ = resolve(Job(**META))
    t = to_json(s, p, evaluate(s, p))["time"]
    layer = 2 * H * H + 2 * H * KV + 3 * H * F
    p_mid = 8 * (layer // T + 2 * H)
    n_b = math.ceil(p_mid / max(40e6, 1e6 * DP))
    cpar = comm.comm_params(load_hardware("h100-sxm"))
    rs = n_b * comm.auto_collective_times(comm.REDUCE_SCATTER, p_mid * 4 / n_b, DP, 128, cpar, 16384)[0]
    ag = n_b * comm.auto_collective_times(comm.ALL_GATHER, p_mid * 2 / n_b, DP, 128, cpar, 16384)[0]
    comp = step._compute_pass(s, p)[2]
    fwd, bwd = float(comp.fwd_mb), float(comp.bwd_mb)
    span = t["compute_s"] + t["tp_comm_s"] + t["pp_comm_s"] + t["bubble_s"] - t["pp_fill_drain_s"]  # the passes
    f, b = span / 143 * fwd / (fwd + bwd), span / 143 * bwd / (fwd + bwd)
    item = rs / 8
    assert b < item < f + b
    over = 113 * item - 112 * b
    x = 0.189
    want = over + (16 * rs - over) * x + (ag - ag / n_b) - min(ag - ag / n_b, fwd) * (1 - x) + ag / n_b
    assert t["dp_comm_exposed_s"] == pytest.approx(want, rel=1e-9)
    assert t["dp_comm_exposed_s"] == pytest.approx(1.9855, abs=0.0005)
    assert t["step_s"] == pytest.approx(7.930, abs=0.0005)
    # the simulator's stage-0 queue on the same schedule (chunk times in exact fractions of the floats)
    sim = simulate(16, 16, "interleaved", vpp=8, t_f=Fraction(8 * f), t_b=Fraction(8 * b))
    q = Fraction(0)
    for end in sorted(ps.end for ps in sim.passes if ps.stage == 0 and ps.kind == "B"):
        q = max(q, end) + Fraction(item)
    assert float(q - sim.step) == pytest.approx(over, rel=1e-9)
