"""The MTP module's re-run under each recompute (issue 23; step.mtp_time): Megatron-LM @d98e8a64
megatron/core/transformer/multi_token_prediction.py l. 1705-1706 runs the MTP layer through
_checkpointed_forward whenever recompute_granularity is 'full' (whatever recompute_num_layers
says), so its forward runs twice; selective recompute re-runs what it re-runs on any layer of
the kind; torchtitan 0.3 checkpoints model.layers only (memory.mtp_checkpointed false): none."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner import step as S

JOB = dict(model="qwen3-30b-a3b", gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096,
           sharding="zero1", mtp_layers=1)


def _mtp(explain, **kw):
    settings, plan, _, _ = explain(**{**JOB, **kw})
    sc = S._context(settings, plan)
    lt = S.layer_times(sc)
    logits = 0.0
    return sc, lt, float(np.ravel(S.mtp_time(sc, lt, logits))[0])


def test_full_recompute_reruns_the_mtp_layer_forward(explain):
    """Uniform (no recompute_layers): l. 1621-1629 checkpoints _proj_and_transformer_layer, so the re-run is the
    layer's forward and the projection's: P = the projection [T = 4,096, h = 2,048] x [2h, h] forward GEMM,
    mtp_time's 3 P its forward and backward (issue 22 critstage2: the projection's re-run was left out before).
    Block (recompute_layers set): l. 1630-1650 runs the module without recompute, the time as without recompute."""
    sc_n, lt_n, none = _mtp(explain, recompute="none")
    sc_f, lt_f, full = _mtp(explain, recompute="full")
    (k,) = sc_f.ll.mtp_kinds  # one layer of the last layer's kind
    fwd = float(np.ravel(lt_f.fwd[k])[0])
    assert fwd > 0
    # the layer's own passes are the same under either recompute; full adds its forward once more
    assert float(np.ravel(lt_n.fwd[k])[0]) == pytest.approx(fwd, rel=1e-12)
    assert float(np.ravel(lt_n.sel[k])[0]) == 0.0 and float(np.ravel(lt_f.sel[k])[0]) == 0.0
    h = sc_f.settings.model.hidden_size
    proj = S.price_gemms(list(S._proj_shape(h, sc_f)), sc_f.settings.hardware, sc_f.plan.precision,
                         sc_f.gemm_cal)["mtp_proj"] / sc_f.speed
    proj = float(np.ravel(proj)[0])
    assert none == pytest.approx(float(np.ravel(lt_n.fwd[k] + lt_n.bwd[k])[0]) + 3 * proj, rel=1e-9)
    assert full - none == pytest.approx(fwd + proj, rel=1e-9)
    _, _, block = _mtp(explain, recompute="full", recompute_layers=1)
    assert block == pytest.approx(none, rel=1e-12)


def test_torchtitan_03_reruns_no_mtp_layer(explain):
    """torchtitan 0.3's activation checkpointing wraps model.layers only (memory.mtp_checkpointed false): the
    MTP layer's time is the same under full recompute as without it."""
    kw = dict(stack="torchtitan-0.3", sharding="fsdp")
    _, _, none = _mtp(explain, recompute="none", **kw)
    _, _, full = _mtp(explain, recompute="full", **kw)
    assert full == pytest.approx(none, rel=1e-12) and none > 0


def test_a_stack_that_trains_no_mtp_refuses_the_field_and_drops_the_models_modules_with_a_note(cli):
    """torchtitan main (stack_db torchtitan runs.mtp false: its models build no MTP module): --mtp-layers 1 exits 2
    naming the field; DeepSeek-V3's config.json (num_nextn_predict_layers 1) is priced without the module, noted."""
    base = ["--gpus", "256", "--stack", "torchtitan", "--ep", "64", "--seq-len", "4096", "--sharding", "fsdp"]
    r = cli("explain", "--model", "deepseek-v3", "--mtp-layers", "1", *base)
    assert r.exit_code == 2 and "mtp_layers 1: stack torchtitan's code trains no multi-token prediction module" in r.stderr
    cfg = Path(__file__).parent / "data" / "arch" / "deepseek-v3" / "config.json"
    r = cli("explain", "--model", str(cfg), *base, "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert any("multi-token prediction module(s) priced as absent: stack torchtitan's code builds none" in w
               for w in out["warnings"])
    assert out["plan"]["mtp_layers"] == 0 and "mtp" not in out["params"]
    # on megatron the same config.json keeps its module
    r = cli("explain", "--model", str(cfg), "--gpus", "256", "--ep", "64", "--seq-len", "4096", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["mtp_layers"] == 1
