"""torchtitan MoE with ep > 1 and no data-parallel sharding (issue 22), as pytorch/torchtitan @e347b1e5e
(the stack's pinned, TOML-configured commit) runs it:

- the EP mesh is carved from dp_shard x cp x tp, never from dp_replicate (distributed/parallel_dims.py
  l. 136-158: efsdp = dp_shard cp tp // (etp ep), sparse mesh pp, dp_replicate, efsdp, ep, etp);
- llama4 / deepseek_v3 / gpt_oss apply FSDP where fsdp_enabled or ep_enabled, over get_mesh(["fsdp"])
  (["dp_replicate", "fsdp"] with replicas), which raises a ValueError where dp_shard x cp = 1
  (_mesh_exist l. 61-66, get_mesh l. 254-278): no FSDP over one rank, no HSDP with a shard group of one;
- qwen3 applies FSDP only where fsdp_enabled; at dp_shard x cp = 1 its EP mesh needs etp ep | tp,
  hence tp > 1, where torchtitan trains without mixed precision (distributed/utils.py maybe_enable_amp
  l. 246-256): not the bf16 plan priced.
So ep > 1 under ddp is refused (start-up rule TORCHTITAN_EP_FSDP, code 54), for every model code. Before,
the planner priced it as unsharded replication: the tiny MoE below on 8 GPUs at dp 8, ep 8, ddp held
2 B weights + 2 B gradients + 12 B master and Adam for all of its 46,912 dense and 49,152 local expert
parameters (96,064 x 16 B = 1,537,024 B), and fit ranked 78 such rows (of 2,508) on it. With dp_shard x
cp > 1 the planner's fsdp / hsdp plans are what torchtitan runs: the dense states over dp_shard x cp,
the routed experts' over efsdp (FSDP over one rank where efsdp = 1: the fp32 states whole), replicated
over dp_replicate, whose sharded expert gradients HSDP all-reduces across the replicas (step.py
dp_expert_comm; left out before)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner import comm
from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES
from planner.step import Collectives, _context
from planner.trainers.export import export_plan

from conftest import assert_one_error

# a tiny MoE, every parameter by hand: per layer attention 4 x 64 x 64 = 16,384, two RMSNorms 128,
# router 64 x 8 = 512 (dense: 17,024 a layer), 8 routed experts of 3 x 64 x 128 = 24,576 each
TINY = ("name: tiny-moe\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 256\nnum_attention_heads: 4\n"
        "vocab_size: 100\ngated_mlp: true\nnorm: rmsnorm\nmax_seq_len: 128\n"
        "moe: {num_experts: 8, top_k: 2, expert_ffn_hidden_size: 128}\nsources: [test]\n")
DENSE = 2 * (16_384 + 128 + 512) + 100 * 64 + 100 * 64 + 64  # + embedding, output, final norm = 46,912
EXPERT = 3 * 64 * 128  # one routed expert, 24,576


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny-moe.yaml"
    path.write_text(TINY)
    return str(path)


def _job(model, **kw):
    job = dict(model=model, gpus=8, stack="torchtitan", hardware="h100-sxm", tp=1, pp=1, etp=1,
               global_batch=8, seq_len=128, micro_batch=1)
    job.update(kw)
    return Job(**job)


def _row(model, **kw):
    settings, plan, _ = resolve(_job(model, **kw))
    est = evaluate(settings, plan)
    return est, to_json(settings, plan, est)


def test_ep_under_ddp_is_refused_naming_the_rule(tiny):
    assert CODES["TORCHTITAN_EP_FSDP"] == 54  # appended to LATER_RULES (48 + 6)
    with pytest.raises(PlannerError) as e:
        resolve(_job(tiny, sharding="none", ep=8))
    assert "breaks start-up rule TORCHTITAN_EP_FSDP of torchtitan" in e.value.message
    assert "@e347b1e5e" in e.value.message and "parallel_dims.py l. 136-158" in e.value.message
    assert "sharding fsdp" in e.value.hint
    # dp 1, EP borrowed from TP (etp 1, ep | tp): qwen3's code would build the mesh and train without
    # mixed precision (no FSDP with TP), the others raise; with replicas TORCHTITAN_DDP_1D answers first
    with pytest.raises(PlannerError, match="TORCHTITAN_EP_FSDP"):
        resolve(_job("qwen3-30b-a3b", tp=8, sequence_parallel=True, sharding="none", ep=8, global_batch=8, seq_len=4096))


def test_neighbours_run(tiny):
    resolve(_job(tiny, sharding="none", ep=1))  # DDP without EP
    resolve(_job(tiny, sharding="fsdp", ep=8))  # FSDP over 8: the experts over efsdp = 1
    resolve(_job(tiny, sharding="hsdp", shard_group=2, ep=2))  # HSDP, shard group 2: efsdp = 1


def test_explain_and_check_exit_2(cli, tiny, tmp_path):
    args = ["--model", tiny, "--gpus", "8", "--stack", "torchtitan", "--hardware", "h100-sxm", "--tp", "1",
            "--pp", "1", "--ep", "8", "--etp", "1", "--sharding", "none", "--global-batch", "8", "--seq-len", "128"]
    assert_one_error(cli("explain", *args), "TORCHTITAN_EP_FSDP")
    job = tmp_path / "job.yaml"
    job.write_text(f"model: {tiny}\ngpus: 8\nstack: torchtitan\nhardware: h100-sxm\ntp: 1\npp: 1\nep: 8\netp: 1\n"
                   "sharding: none\nglobal_batch: 8\nseq_len: 128\n")
    r = cli("check", str(job))
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert "TORCHTITAN_EP_FSDP" in r.stdout + r.stderr


def test_fit_never_ranks_ep_under_ddp(tiny):
    from planner.search import fit

    res = fit(Job(model=tiny, gpus=8, stack="torchtitan", hardware="h100-sxm", global_batch=64, seq_len=128), top=5000)
    rows = [r["plan"] for r in res.rows]
    assert rows and any(p["ep"] > 1 for p in rows) and any(p["sharding"] == "none" for p in rows)
    assert not [p for p in rows if p["ep"] > 1 and p["sharding"] == "none"]


def test_a_toml_with_ep_and_no_dp_shard_is_refused(cli, tiny, tmp_path):
    toml = tmp_path / "tt.toml"
    toml.write_text("[training]\nlocal_batch_size = 1\nglobal_batch_size = 8\nseq_len = 128\n"
                    "[parallelism]\ndata_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1\n"
                    "expert_parallel_degree = 8\n")
    assert_one_error(cli("explain", str(toml), "--model", tiny, "--hardware", "h100-sxm"), "TORCHTITAN_EP_FSDP")


@pytest.mark.parametrize("kw,dense_shard,local_experts,efsdp", [
    (dict(sharding="fsdp", ep=8), 8, 1, 1),  # FSDP over one rank for the experts: their fp32 states whole
    (dict(sharding="fsdp", ep=4), 8, 2, 2),  # efsdp = 8 / 4
    (dict(sharding="hsdp", shard_group=4, ep=4), 4, 2, 1),  # 2 replicas; efsdp = 4 / 4
    (dict(sharding="hsdp", shard_group=2, ep=2), 2, 4, 1),
])
def test_what_torchtitan_holds_by_hand(tiny, kw, dense_shard, local_experts, efsdp):
    """FSDP2 with bf16 params, fp32 reduce: the sharded parameter is the fp32 master (no bf16 copy at
    rest), Adam m and v fp32, the sharded gradients fp32 in the reduce-scatter stream's pool; the
    dense states over dp_shard (cp 1), the routed experts' (local_experts a layer) over efsdp =
    dp_shard / ep (torchtitan apply_fsdp: fully_shard(experts, mesh=edp_mesh))."""
    est, js = _row(tiny, **kw)
    experts = 2 * local_experts * EXPERT
    assert js["params"]["total"] == DENSE + 8 * 2 * EXPERT
    assert float(est.memory["weights"]) == 0.0 and float(est.memory["gradients"]) == 0.0
    assert float(est.memory["master_weights"]) == pytest.approx(4 * DENSE / dense_shard + 4 * experts / efsdp, rel=1e-12)
    assert float(est.memory["adam"]) == pytest.approx(8 * DENSE / dense_shard + 8 * experts / efsdp, rel=1e-12)


def test_hsdp_all_reduces_the_expert_gradients_across_replicas(tiny):
    """16 GPUs (two 8-GPU nodes), shard groups of 8 (a node each), 2 replicas, ep 8: efsdp = 1, so the
    experts are neither gathered nor reduce-scattered, and each micro-batch's reduce all-reduces the
    49,152 local expert gradients (fp32) between the two replicas over the network (a 2-rank ring),
    beside the dense traffic (as tests/test_sharding_modes.py derives it); m = 2 micro-batches."""
    settings, plan, _ = resolve(_job(tiny, gpus=16, sharding="hsdp", shard_group=8, ep=8, global_batch=32))
    est = evaluate(settings, plan)
    sc = _context(settings, plan)
    coll = Collectives(sc)
    m, g = 2, settings.stack.fsdp.grad_reduce_bytes
    assert g == 4
    net_bw = 400e9 / 8 * comm.NETWORK_EFFICIENCY
    ar_e = 2 * comm.NETWORK_LATENCY_S + 2 * EXPERT * g / net_bw  # 2 ranks: 2(n-1)/n = 1
    assert float(coll(comm.ALL_REDUCE, 2 * EXPERT * g, 2, coll.strides["dp"] * 8)) == pytest.approx(ar_e, rel=1e-9)
    n_b = 2  # one FSDP unit a block (fsdp_bucket_params null)

    def unit(op, per_param, group, stride):
        return float(n_b * coll(op, DENSE * per_param / n_b, group, stride))

    dense = (m * (2 * unit(comm.ALL_GATHER, 2.0, 8, coll.strides["dp"]) + unit(comm.REDUCE_SCATTER, g, 8, coll.strides["dp"]))
             + m * float(coll(comm.ALL_REDUCE, DENSE * g / 8, 2, coll.strides["dp"] * 8)))
    assert float(est.time_extra["dp_comm_s"]) == pytest.approx(dense + m * ar_e, rel=1e-9)


@pytest.mark.parametrize("kw", [dict(sharding="fsdp", ep=8), dict(sharding="hsdp", shard_group=4, ep=4)])
def test_export_writes_and_reads_back_the_plan(kw):
    """On torchtitan's own small MoE (the qwen3 debugmodel_moe flavor: the export names a flavor, issue 22)."""
    moe = str(Path(__file__).parent / "data" / "torchtitan_flavors" / "qwen3-debugmodel-moe.yaml")
    _, js = _row(moe, **kw)
    text, _ = export_plan(js["plan"], "torchtitan")
    assert 'name = "qwen3"\nflavor = "debugmodel_moe"' in text
    check_readback(js, "torchtitan", text)
    assert "expert_parallel_degree = %d\n" % kw["ep"] in text and "expert_tensor_parallel_degree = 1\n" in text
    with pytest.raises(PlannerError, match="TORCHTITAN_EP_FSDP"):
        export_plan({**js["plan"], "sharding": "none", "sharding_mode": "ddp", "shard_group": None}, "torchtitan")


def test_expert_collectives_one_a_moe_layer(tiny):
    """FSDP's expert collectives are one a MoE block: torchtitan @e347b1e5e wraps each block's routed experts as
    their own FSDP2 unit (models/llama4/infra/parallelize.py apply_fsdp l. 381-409; step._expert_stage). 16 GPUs
    (two 8-GPU nodes), fsdp, ep 8: dense over 16 ranks, efsdp = 16 / 8 = 2; each GPU holds 1 of the 8 experts of
    each of the 2 MoE layers, 2 x 24,576 = 49,152 expert parameters, so 2 all-gathers (forward, backward's
    re-gather) and a reduce-scatter (fp32) of 24,576 parameters over the 2 efsdp ranks, twice, each micro-batch
    (m = 2). The count before, ceil(e / (p_dp / n)) = ceil(49,152 / (46,912 / 2)) = ceil(2.0955) = 3, a
    dense-layer-sized bucket count, not the units torchtitan builds."""
    from planner import moe

    settings, plan, _ = resolve(_job(tiny, gpus=16, sharding="fsdp", ep=8, global_batch=32))
    assert int(plan.dp) == 16 and int(moe.expert_shard(plan)) == 2
    est = evaluate(settings, plan)
    sc = _context(settings, plan)
    coll = Collectives(sc)
    m, g = 2, settings.stack.fsdp.grad_reduce_bytes
    assert g == 4 and float(sc.m) == m
    e_st = moe.expert_strides(plan, coll.strides, ("edp",))["edp"]

    def units(n, params, op, per_param, group, stride):
        return float(n * coll(op, params * per_param / n, group, stride))

    dense = m * (2 * units(2, DENSE, comm.ALL_GATHER, 2.0, 16, coll.strides["dp"])
                 + units(2, DENSE, comm.REDUCE_SCATTER, g, 16, coll.strides["dp"]))
    experts = m * (2 * units(2, 2 * EXPERT, comm.ALL_GATHER, 2.0, 2, e_st)
                   + units(2, 2 * EXPERT, comm.REDUCE_SCATTER, g, 2, e_st))
    assert float(est.time_extra["dp_comm_s"]) == pytest.approx(dense + experts, rel=1e-9)
    # the count before (3 collectives of a third each) prices more latency terms: a different figure
    old = m * (2 * units(3, 2 * EXPERT, comm.ALL_GATHER, 2.0, 2, e_st) + units(3, 2 * EXPERT, comm.REDUCE_SCATTER, g, 2, e_st))
    assert old > experts
    assert float(est.time_extra["dp_comm_s"]) != pytest.approx(dense + old, rel=1e-9)


@pytest.mark.parametrize("pp, units", [(1, 58), (2, 30), (4, 16), (8, 8)])
def test_deepseek_v3_expert_units_are_its_moe_layers(monkeypatch, pp, units):
    """DeepSeek-V3 on torchtitan, 256 GPUs, tp 1, ep 32, fsdp: 61 layers, the first 3 dense; torchtitan's split puts
    the remainder first (pp 2: 31 / 30, pp 4: 16 / 15 / 15 / 15, pp 8: 8 x 5 then 7 x 3), so the stage with the most
    experts holds 58 (pp 1), 30 (the last), 15, 8 (a middle) MoE layers: that many expert FSDP units, each 256 / 32 = 8
    experts of 3 x 7,168 x 2,048 = 44,040,192 parameters a GPU. The count before, ceil(e / (p_dp / n)), gave 73, 35,
    14, 6 (dense-layer-sized buckets of experts). Since torchtitan's default split is the stack's (the embedding and
    the output counted as a layer each, job_config.py @e347b1e5e l. 377, 383; branch ttends): 63 units on pp 4 are
    16 / 16 / 16 / 15, the embedding + 15 layers, 16, 16, 14 + the output, so a middle stage holds 16 MoE layers; pp 2
    (32 / 31: 31 layers of which 28 MoE, then 30 + the output) and pp 8 (8 x 7 then 7: a middle stage 8) are as
    before."""
    from planner import step

    seen = []
    real = step.dp_expert_comm

    def spy(sc, coll, e_local, e_units, ddp_bucket, tr=None):
        # dp_comm's slots (middle, first, last), each stage's own: the slot with the most experts
        e, u = np.asarray(e_local), np.asarray(e_units)
        i = int(np.argmax(e))
        seen.append((float(e[i]), float(u[i])))
        return real(sc, coll, e_local, e_units, ddp_bucket, tr=tr)

    monkeypatch.setattr(step, "dp_expert_comm", spy)
    settings, plan, _ = resolve(Job(model="deepseek-v3", gpus=256, stack="torchtitan", hardware="h100-sxm", tp=1,
                                    pp=pp, ep=32, sharding="fsdp", global_batch=256, seq_len=4096, micro_batch=1))
    evaluate(settings, plan)
    assert seen and all(s == (units * 8 * 44_040_192, units) for s in seen)
