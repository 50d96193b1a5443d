"""MoE routing imbalance (planner/imbalance.py): the busiest EP rank's routed tokens over the
mean, by hand from Wang et al. 2024 Table 2 and the rule's conversion, priced in the expert
GEMMs, the all-to-all and the dispatched-token activations; forced balancing gives the balanced
figures exactly; the capacity factor caps it; Megatron's flags map onto it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_one_error, explain_job
from planner.imbalance import rule_imbalance

ROOT = Path(__file__).resolve().parent.parent


def _mixtral(**kw):
    base = dict(model="mixtral-8x7b", gpus=8, tp=1, pp=1, ep=8, sharding="zero1", bytes_per_param="megatron",
                global_batch=8, micro_batch=1, seq_len=4096)
    return explain_job(**{**base, **kw})


# ------------------------------------------------------------------ the rule
def test_rule_by_hand():
    """L = 1 + MaxVio x sqrt(ln ep / (n ln 64)), n = E / ep: auxiliary loss MaxVio 0.52, loss-free
    0.04 ([1] Table 2, 3B); Mixtral's 8 experts on 8 ranks (n = 1): 1 + 0.52 sqrt(ln 8 / ln 64)
    = 1 + 0.52 sqrt(1/2); DeepSeek-V3's 256 on 64 (n = 4): 1 + 0.04 sqrt(1/4) = 1.02; on one
    rank nothing waits: 1; 64 experts on 64 ranks: the per-expert MaxVio itself."""
    assert float(rule_imbalance("aux_loss", 8, 8)) == pytest.approx(1.0 + 0.52 * math.sqrt(0.5), rel=1e-12)
    assert float(rule_imbalance("aux_loss_free", 256, 64)) == pytest.approx(1.02, rel=1e-12)
    assert float(rule_imbalance("aux_loss", 64, 1)) == 1.0
    assert float(rule_imbalance("aux_loss", 64, 64)) == pytest.approx(1.52, rel=1e-12)
    assert float(rule_imbalance("force", 64, 64)) == 1.0 and float(rule_imbalance("sinkhorn", 8, 8)) == 1.0
    # an array of EP sizes (a searched quantity): element by element, never above the per-expert bound
    ep = np.array([1, 2, 4, 8])
    r = rule_imbalance("aux_loss", 8, ep)
    assert np.all(np.diff(r) > 0) and np.all(r <= 1.52)


def test_default_balancing_follows_the_model():
    """Mixtral (no router bias): Megatron's default aux_loss; DeepSeek-V3 (its per-expert score
    bias, aux-loss-free balancing): aux_loss_free."""
    _, _, _, js = _mixtral()
    assert js["plan"]["moe_load_balancing"] == "aux_loss"
    assert js["plan"]["moe_rank_load"] == pytest.approx(1.0 + 0.52 * math.sqrt(0.5), rel=1e-12)
    _, _, _, ds = explain_job(model="deepseek-v3", gpus=1024, pp=16, ep=64, global_batch=1024, seq_len=4096,
                              micro_batch=1)
    assert ds["plan"]["moe_load_balancing"] == "aux_loss_free"
    assert ds["plan"]["moe_rank_load"] == pytest.approx(1.02, rel=1e-12)


# ------------------------------------------------------------------ what it prices
def test_busiest_rank_tokens_by_hand():
    """Mixtral, ep 8 = E (one expert per rank), T = 4096 tokens per micro-batch, top-2: the mean
    rank receives T x 2 = 8192 routed tokens, the busiest L x 8192."""
    for r in (1.0, 1.5):
        _, _, _, js = _mixtral(moe_rank_imbalance=r)
        assert js["moe"]["tokens_per_expert"] == pytest.approx(8192 * r, rel=1e-12)
        assert js["moe"]["rank_load"] == r


def test_alltoall_time_at_the_busiest_rank_by_hand():
    """The same job on 8 H100s (one NVLink domain): each dispatch / combine moves T x top-2 x L x
    h x 2 B on the busiest rank, 4 per layer, 32 layers (tests/test_moe.py's balanced figure x L
    in the bytes): pairwise all-to-all, n - 1 rounds of (n - 1)/n of the buffer. The probabilities' all-to-all
    (planner/dispatch.py [12]) moves one bf16 value a routed row, T x top-2 x L x 2 B, forward and backward; the
    token counts' all-gather (8 x 8 x 8 B) does not depend on L; it runs NCCL's LL ring (comm.py "Protocols", tuning.cc
    @v2.20.3-1 l. 57, 67, 181): 6.6 us + 7 steps of 0.6 us + 7/8 x 512 B at min(370 GB/s / 3, 87.7 GB/s)."""
    from planner import comm
    from planner.catalog import load_hardware

    hw = load_hardware("h100-sxm")
    bw = hw.nvlink_bandwidth * comm.NVLINK_RING_EFFICIENCY
    for r in (1.0, 1.5):
        _, _, _, js = _mixtral(moe_rank_imbalance=r)
        size = 4096 * 2 * r * 4096 * 2
        a2a = 7 * comm.NVLINK_LATENCY_S + 7 / 8 * size / bw
        probs = 7 * comm.NVLINK_LATENCY_S + 7 / 8 * (4096 * 2 * r * 2) / bw
        counts = 6.6e-6 + 7 * 0.6e-6 + 7 / 8 * 512 / 87.7e9
        assert js["time"]["ep_comm_s"] == pytest.approx(32 * (4 * a2a + 2 * probs + counts), rel=1e-9)


def test_expert_activations_at_the_busiest_rank_by_hand():
    """Activations of one Mixtral layer beyond a dense layer of its shape (tests/test_moe.py's
    hand count with the capacity factor c replaced by the rank load L = 1.25, tp 1): expert input
    2 B x top-2 x L x 4096, expert gate/up/act 2 B x 3 x 14336 x 2 x L, less the dense MLP's 2 B x 3 x
    14336, and the routing the unfused router and permutation save (Megatron's defaults: the softmax's
    fp32 output over the top-2 logits 4 x 2 in place of the generic fp32 logits, int64 top-2 indices,
    argsort of the [T, 8] map, sorted indices: 8 x (2 + 8 + 2), layers/moe.py [9] [10]); 32 layers of
    4096 tokens; and the alltoall dispatcher's attributes, once a layer, the bf16 dense [T, 8] probabilities and the
    unfused router's bool map, 2 x 8 + 8, and the bf16 per-row probabilities the weighted SwiGLU saves, 2 x 2 x L
    (layers/moe.py [13])."""
    from dataclasses import replace

    from planner.memory import memory_terms

    settings, plan, _, _ = _mixtral(moe_rank_imbalance=1.25)
    dense_twin = replace(settings, model=settings.model.model_copy(update={"moe": None}))
    moe_act = memory_terms(settings, plan)[0].layer_activations
    dense_act = memory_terms(dense_twin, plan)[0].layer_activations
    L = 1.25
    per_token = (4 * 2 + 2 * 2 * L * 4096 + 2 * 3 * 14336 * 2 * L - 2 * 3 * 14336 + 8 * (2 + 8 + 2)
                 + (2 * 8 + 8) + 2 * 2 * L)
    assert float(moe_act - dense_act) == pytest.approx(32 * 4096 * per_token, rel=1e-12)


def test_explain_names_what_imbalance_adds():
    """explain's MoE block: the imbalance term is the step and memory over the same plan at
    L = 1 (the balanced job's own figures), and 0 where the job is balanced."""
    _, _, _, imb = _mixtral(moe_rank_imbalance=1.5)
    _, _, _, bal = _mixtral(moe_rank_imbalance=1.0)
    assert imb["moe"]["imbalance_s"] == pytest.approx(imb["time"]["step_s"] - bal["time"]["step_s"], rel=1e-9)
    assert imb["moe"]["imbalance_s"] > 0
    assert imb["moe"]["imbalance_bytes"] == pytest.approx(imb["memory"]["total_bytes"] - bal["memory"]["total_bytes"],
                                                          rel=1e-9)
    assert imb["moe"]["imbalance_bytes"] > 0
    assert bal["moe"]["imbalance_s"] == 0.0 and bal["moe"]["imbalance_bytes"] == 0.0


def test_forced_balancing_is_the_balanced_figure_exactly():
    """moe_rank_imbalance 1.0 and moe_load_balancing force price the same plan to the bit, and
    both below the default aux-loss rule's."""
    _, _, _, one = _mixtral(moe_rank_imbalance=1.0)
    _, _, _, force = _mixtral(moe_load_balancing="force")
    _, _, _, aux = _mixtral()
    assert one["time"] == force["time"] and one["memory"]["total_bytes"] == force["memory"]["total_bytes"]
    assert one["plan"]["moe_rank_load"] == force["plan"]["moe_rank_load"] == 1.0
    assert aux["time"]["step_s"] > one["time"]["step_s"]


# ------------------------------------------------------------------ the capacity factor
@pytest.mark.parametrize("r, c, pad, load", [
    (1.5, 1.25, False, 1.25),  # tokens beyond c x the mean are dropped: the cap binds
    (1.1, 1.25, False, 1.1),  # the router stays under the cap
    (1.1, 1.25, True, 1.25),  # padded to the capacity: c exactly
    (1.0, 1.0, False, 1.0),
])
def test_capacity_factor_caps_the_busiest_rank(r, c, pad, load):
    _, _, _, js = _mixtral(moe_rank_imbalance=r, moe_capacity_factor=c, **({"moe_pad_to_capacity": True} if pad else {}))
    assert js["plan"]["moe_rank_load"] == load
    assert js["moe"]["tokens_per_expert"] == pytest.approx(8192 * load, rel=1e-12)


def test_capacity_factor_caps_the_rule():
    """Without a measured imbalance the rule's L (1.368 for Mixtral on 8 ranks) meets the cap."""
    _, _, _, js = _mixtral(moe_capacity_factor=1.25)
    assert js["plan"]["moe_rank_load"] == 1.25
    _, _, _, js = _mixtral(moe_capacity_factor=2.0)
    assert js["plan"]["moe_rank_load"] == pytest.approx(1.0 + 0.52 * math.sqrt(0.5), rel=1e-12)


def test_bad_input_is_an_error(cli):
    base = ["explain", "--model", "mixtral-8x7b", "--gpus", "8", "--ep", "8", "--global-batch", "8"]
    assert_one_error(cli(*base, "--moe-rank-imbalance", "0.9"), "moe_rank_imbalance")
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--moe-rank-imbalance", "1.1"),
                     "moe_rank_imbalance", "no experts")
    assert_one_error(cli(*base, "--moe-load-balancing", "round_robin"), "moe_load_balancing")
    r = cli(*base, "--moe-rank-imbalance", "1.2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    import json

    assert json.loads(r.stdout)["plan"]["moe_rank_load"] == 1.2
    r = cli(*base, "--moe-rank-imbalance", "1.2")
    assert "MoE routing imbalance (measured 1.2" in r.stdout


# ------------------------------------------------------------------ Megatron's flags
ARGS = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768 --micro-batch-size 1 "
        "--global-batch-size 16 --tensor-model-parallel-size 1 --expert-model-parallel-size 8 --num-experts 8 "
        "--moe-router-topk 2 --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights --bf16 "
        "--use-distributed-optimizer --vocab-size 32000 --disable-bias-linear --position-embedding-type rope "
        "--moe-token-dispatcher-type alltoall")


@pytest.mark.parametrize("extra, field, value", [
    ("--moe-router-force-load-balancing", "moe_rank_imbalance", 1.0),
    ("--moe-router-force-load-balancing --moe-router-load-balancing-type aux_loss", "moe_rank_imbalance", 1.0),
    ("--moe-router-enable-expert-bias --moe-router-load-balancing-type seq_aux_loss", "moe_load_balancing", "aux_loss_free"),
    ("--moe-router-load-balancing-type sinkhorn", "moe_load_balancing", "sinkhorn"),
    ("--moe-router-load-balancing-type seq_aux_loss", "moe_load_balancing", "aux_loss"),
    ("--moe-router-load-balancing-type none", "moe_load_balancing", "aux_loss"),
    ("", "moe_load_balancing", "aux_loss"),
])
def test_reader_maps_the_balancing_flags(tmp_path, extra, field, value):
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text(ARGS + " " + extra + "\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=16, model="mixtral-8x7b")  # (its flags' shape, but no router bias)
    assert cfg.job[field] == value
    assert not any("load-balanc" in x or "expert-bias" in x for x in cfg.not_modelled + cfg.ignored)
    assert any("moe_load_balancing: aux_loss (no --moe-router-load-balancing-type" in a for a in cfg.assumed) == (extra == "")


def test_reader_capacity_factor_and_padding(tmp_path):
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text(ARGS + " --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=16)
    assert cfg.job["moe_capacity_factor"] == 1.25 and cfg.job["moe_pad_to_capacity"] is True
    p.write_text(ARGS + " --moe-expert-capacity-factor 1.25\n")
    assert load_trainer_config(p, fmt="megatron", gpus=16).job["moe_pad_to_capacity"] is False


def test_reader_refuses_an_unknown_balancing(tmp_path, cli):
    p = tmp_path / "run.args"
    p.write_text(ARGS + " --moe-router-load-balancing-type lottery\n")
    assert_one_error(cli("explain", str(p), "--gpus", "16"), "--moe-router-load-balancing-type", "lottery")


# ------------------------------------------------------------------ records
def test_records_state_forced_balancing_with_provenance():
    """Every Megatron-Bridge MoE record is force-balanced (its table's note, the presets at
    v0.2.0): moe_rank_imbalance 1.0 with a provenance; the Mixtral README record states none and
    DeepSeek-V3 its aux-loss-free balancing: the rule applies there."""
    import yaml

    for name in ("published_runs_moe.yaml", "published_runs_lowprec.yaml"):
        for rec in yaml.safe_load((ROOT / "tests" / "data" / name).read_text()):
            if not rec.get("moe"):
                continue
            bridge = rec["id"].startswith("megatron-bridge-")
            assert (rec.get("moe_rank_imbalance") == 1.0) == bridge, rec["id"]
            if bridge:
                assert "force-balance" in rec["provenance"]["moe_rank_imbalance"], rec["id"]
            if rec["id"] == "deepseek-v3-pretraining":
                assert rec["moe_load_balancing"] == "aux_loss_free" and "sec. 2.1.2" in rec["provenance"]["moe_load_balancing"]


def test_validate_lists_the_rule_as_assumed(cli):
    import json

    r = cli("validate", str(ROOT / "tests" / "data" / "published_runs_moe.yaml"), "--format", "json")
    assert r.exit_code == 0, r.stderr
    runs = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    mixtral = runs["megatron-core-moe-readme-v0.8-mixtral-8x7b-h100-bf16"]
    assert any(a.startswith("moe_rank_imbalance=default rule") for a in mixtral["assumed"])
    assert mixtral["plan"]["moe_rank_load"] == pytest.approx(1.0 + 0.52 * math.sqrt(0.5), rel=1e-12)
    bridge = runs["megatron-bridge-25.11-dgx-b200-deepseek-v3"]
    assert not any(a.startswith("moe_rank_imbalance") for a in bridge["assumed"])
    assert bridge["plan"]["moe_rank_load"] == 1.0


def test_export_writes_and_reads_back_the_balancing(cli):
    """Megatron export: a balanced job (moe_rank_imbalance 1.0) writes --moe-router-force-load-
    balancing, read back as 1.0; a capacity factor without padding writes no padding flag; a
    measured imbalance, no trainer flag, reads back at the plan's value (the export's read-back
    check passes: the same memory and plan)."""
    base = ["export", "--model", "mixtral-8x7b", "--gpus", "8", "--ep", "8", "--global-batch", "8", "--seq-len", "4096",
            "--format", "megatron"]
    r = cli(*base, "--moe-rank-imbalance", "1.0")
    assert r.exit_code == 0, r.stderr
    assert "--moe-router-force-load-balancing" in r.stdout
    r = cli(*base, "--moe-capacity-factor", "1.25")
    assert r.exit_code == 0, r.stderr
    assert "--moe-expert-capacity-factor 1.25" in r.stdout and "--moe-pad-expert-input-to-capacity" not in r.stdout
    assert "--moe-router-force-load-balancing" not in r.stdout
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    for kw in (dict(moe_rank_imbalance=1.0), dict(moe_rank_imbalance=1.3), dict(moe_capacity_factor=1.25),
               dict(moe_capacity_factor=1.25, moe_pad_to_capacity=True), {}):
        _, _, _, row = _mixtral(**kw)
        check_readback(row, "megatron", export_plan(row["plan"], "megatron")[0])  # exit 2 (PlannerError) on a difference
