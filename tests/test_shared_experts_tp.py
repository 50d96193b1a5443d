"""The MoE layers' shared experts' own TP pair (planner/step.py [37], stack moe_shared_experts_tp_pair)."""
from __future__ import annotations

import pytest

from conftest import explain_job

BASE = dict(model="deepseek-v2-lite", gpus=16, tp=2, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096,
            moe_rank_imbalance=1.0, tp_comm_overlap=False)


def test_megatron_shared_experts_pair_by_hand():
    """Megatron-Core's SharedExpertMLP (an MLP on the attention's TP group): under SP at TP 2 each MoE layer's shared
    experts all-gather their T h input (fc1) and reduce-scatter their T h output (fc2) forward, the reverse backward.
    DeepSeek-V2-Lite: h 2,048, 26 MoE layers (first_k_dense 1), T = 1 x 4,096 tokens, bf16 (2 B), one micro-batch
    (dp 8, global batch 8), no recompute, no TP overlap: 26 x 2 ways x (RS + AG of 4,096 x 2,048 x 2 B = 16 MiB over
    2 adjacent ranks)."""
    from planner import comm
    from planner.catalog import load_hardware

    params = comm.comm_params(load_hardware("h100-sxm"))
    size = 4096 * 2048 * 2.0
    pair = sum(float(comm.group_collective(op, size, 2, 1, params)[0].time_s)
               for op in (comm.REDUCE_SCATTER, comm.ALL_GATHER))
    _, _, _, js = explain_job(sharding="zero1", bytes_per_param="megatron", **BASE)
    t = js["time"]
    assert t["tp_shared_experts_s"] == pytest.approx(26 * 2 * pair, rel=1e-12)
    assert t["tp_shared_experts_s"] < t["tp_comm_s"]


def test_shared_experts_pair_recomputed_forward_again():
    """Full recompute re-runs each layer's forward: the shared experts' forward pair once more (3 ways a layer)."""
    from planner import comm
    from planner.catalog import load_hardware

    params = comm.comm_params(load_hardware("h100-sxm"))
    size = 4096 * 2048 * 2.0
    pair = sum(float(comm.group_collective(op, size, 2, 1, params)[0].time_s)
               for op in (comm.REDUCE_SCATTER, comm.ALL_GATHER))
    _, _, _, js = explain_job(sharding="zero1", bytes_per_param="megatron", recompute="full", **BASE)
    assert js["time"]["tp_shared_experts_s"] == pytest.approx(26 * 3 * pair, rel=1e-12)


def test_torchtitan_shared_experts_have_no_pair_of_their_own():
    """torchtitan shards the shared experts colwise / rowwise inside the moe module's one input all-gather and output
    reduce-scatter (apply_moe_ep_tp): no collective of their own, no key."""
    _, _, _, js = explain_job(stack="torchtitan", sharding="fsdp", **BASE)
    assert "tp_shared_experts_s" not in js["time"]


def test_without_the_stack_setting_the_pair_and_the_fc1_regathers_go(tmp_path):
    """The megatron entry with moe_shared_experts_tp_pair false (a user stack file): no tp_shared_experts_s, and
    tp_comm_s less by that key plus the shared experts' fc1 wgrad re-gathers (step.py [35]): each an all-gather of
    T h (16 MiB) over 2 ranks, hidden behind fc1's dgrad GEMM at the stack's exposed share, so more than 0 and at
    most 26 x AG(16 MiB)."""
    import yaml

    from planner import comm
    from planner.catalog import load_hardware, stack_source

    data = yaml.safe_load(stack_source("megatron").read_text(encoding="utf-8"))
    assert data["moe_shared_experts_tp_pair"] is True
    data["moe_shared_experts_tp_pair"] = False
    path = tmp_path / "megatron-no-shared-pair.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    _, _, _, on = explain_job(sharding="zero1", bytes_per_param="megatron", **BASE)
    _, _, _, off = explain_job(sharding="zero1", bytes_per_param="megatron", stack=str(path), **BASE)
    assert "tp_shared_experts_s" not in off["time"]
    rg = on["time"]["tp_wgrad_regather_s"] - off["time"]["tp_wgrad_regather_s"]
    ag = float(comm.group_collective(comm.ALL_GATHER, 4096 * 2048 * 2.0, 2, 1,
                                     comm.comm_params(load_hardware("h100-sxm")))[0].time_s)
    assert 0 < rg <= 26 * ag * (1 + 1e-12)
    assert on["time"]["tp_comm_s"] - off["time"]["tp_comm_s"] == pytest.approx(
        on["time"]["tp_shared_experts_s"] + rg, rel=1e-9)


def test_explain_text_line(cli):
    """explain prints the share as a line of TP communication, the JSON key's value."""
    r = cli("explain", "--model", "deepseek-v2-lite", "--gpus", "16", "--tp", "2", "--ep", "8", "--global-batch", "8",
            "--micro-batch", "1", "--seq-len", "4096", "--no-tp-comm-overlap", "--moe-rank-imbalance", "1.0")
    assert r.exit_code == 0, r.stderr
    _, _, _, js = explain_job(sharding="zero1", bytes_per_param="megatron", **BASE)
    assert f"of TP communication, {js['time']['tp_shared_experts_s']:,.4g} s per step are the MoE layers' shared " \
           "experts' own TP collectives" in r.stdout
