"""Megatron --mla-down-proj-fusion (issue 21, muonleft): the job's mla_down_proj_fusion (layers/attention.py
MLA.down_fused; plan.with_fused_mla; start-up rule MEGATRON_MLA_FUSION_TP, code 95), derived by hand from
NVIDIA/Megatron-LM @d98e8a64:

- gpt_layer_specs.py l. 257-290: with the fusion the layer builds FusedMLASelfAttention with linear_qkv_down_proj a
  TELayerNormColumnParallelLinear (the input norm fused into it); without, linear_q_down_proj and linear_kv_down_proj
  are backend.linear() (l. 302-304), TELinear built 'duplicated' (multi_latent_attention.py l. 524-600): whole on every
  TP rank.
- multi_latent_attention.py l. 1279-1310: the fused down projection is h -> r_q + r_kv + d_rope with gather_output
  False: its weight TP-split, (r_q + r_kv + d_rope) / tp rows a rank; l. 1271-1274 asserts q_lora_rank; l. 1353-1372
  asserts tp dividing r_q and r_kv + d_rope.
- Muon (optimizer/__init__.py l. 782-803): only linear_qkv.weight is tagged for a split, so the fused weight is one
  matrix, TP-split on its rows (partition_dim 0 of a column linear): gathered whole under the duplicated mode.

DeepSeek-V3: h 7,168, a 128, r_q 1,536, r_kv 512, d_rope 64, d_nope 128, d_v 128."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from planner import catalog
from planner.errors import PlannerError
from planner.layers import layer_list
from planner.plan import resolve
from planner.schema import Job
from planner.startup import BY_CODE, CODES

V3 = dict(model="deepseek-v3", gpus=256, tp=8, pp=16, ep=2, etp=1, hardware="h800-sxm", optimizer="muon",
          bytes_per_param="megatron")
DOWN = 7168 * (1536 + 512 + 64)  # 15,138,816: q_a 7,168 x 1,536 + kv_a 7,168 x 576


def _mla(fused=False):
    mixer = next(k.mixer for k in layer_list(catalog.load_model("deepseek-v3")).kinds)
    return replace(mixer, down_fused=True) if fused else mixer


def test_params_and_muon_matrices_by_hand():
    """Unfused: split 1,536 x 128 x 192 + 512 x 128 x 256 + 128 x 128 x 7,168 = 37,748,736 + 16,777,216 +
    117,440,512 = 171,966,464; replicated the down projections 7,168 x 2,112 = 15,138,816 (Muon's rep matrices), the
    latent norms 1,536 + 512 and the input norm 7,168: 15,148,032. Fused: the down projection among the split,
    187,105,280, replicated 9,216, no rep matrix. Muon: one split matrix 2,112 x 7,168 in place of the two rep ones
    1,536 x 7,168 and 576 x 7,168; the matrices' elements are the split parameters, 187,105,280."""
    assert DOWN == 15_138_816
    p, f = _mla().params(), _mla(True).params()
    assert (p.split, p.replicated, p.rep_matrix) == (171_966_464, 15_148_032, DOWN)
    assert (f.split, f.replicated, f.rep_matrix) == (171_966_464 + DOWN, 9_216, 0) == (187_105_280, 9_216, 0)
    assert _mla().muon_matrices()[0] == (1536, 7168, 1, "rep") and _mla().muon_matrices()[2] == (576, 7168, 1, "rep")
    m = _mla(True).muon_matrices()
    assert m[0] == (2112, 7168, 1, "split") and all(g == "split" for *_, g in m)
    assert sum(r * c * n for r, c, n, _ in m) == f.muon_per_gpu(1) == 187_105_280


def test_gemm_by_hand():
    """The fused down GEMM per rank [T, 2,112 / tp, 7,168] (one row mla_qkv_down) in place of [T, 1,536, 7,168] and
    [T, 576, 7,168] on every rank: at tp 8, 264 output columns."""
    ctx = SimpleNamespace(T=np.float64(4096.0), tp=np.float64(8.0))
    rows = {g.name: (float(g.M), float(g.N), float(g.K)) for g, _ in _mla(True).gemms(ctx)}
    assert rows["mla_qkv_down"] == (4096.0, 264.0, 7168.0)
    assert "mla_q_down" not in rows and "mla_kv_down" not in rows
    rows = {g.name: (float(g.N), float(g.K)) for g, _ in _mla().gemms(ctx)}
    assert rows["mla_q_down"] == (1536.0, 7168.0) and rows["mla_kv_down"] == (576.0, 7168.0)


def test_weights_on_the_heaviest_stage(cli):
    """DeepSeek-V3 at tp 8 pp 16 (4 layers on the heaviest stage), bf16 weights (2 B): the fusion holds 7/8 of each
    layer's down projection less a rank, 2 x 4 x 7/8 x 15,138,816 = 105,971,712 B; the plan records it."""
    args = ["explain", "--model", "deepseek-v3", "--gpus", "256", "--tp", "8", "--pp", "16", "--ep", "2", "--etp",
            "1", "--hardware", "h800-sxm", "--optimizer", "muon", "--bytes-per-param", "megatron", "--format", "json",
            "-q"]
    a = json.loads(cli(*args).stdout)
    b = json.loads(cli(*args, "--mla-down-proj-fusion").stdout)
    assert b["plan"]["mla_down_proj_fusion"] is True and "mla_down_proj_fusion" not in a["plan"]
    assert a["memory"]["weights_bytes"] - b["memory"]["weights_bytes"] == 2 * 4 * 7 * DOWN // 8 == 105_971_712


def test_refusals_and_rule_95():
    """Refused as Megatron refuses: no MLA (llama3-8b), no q_lora_rank (deepseek-v2-lite), a stack without the option
    (torchtitan). Rule 95 breaks where tp does not divide 1,536 or 576: tp 128 (576 / 128 = 4.5), not tp 1 .. 64."""
    assert CODES["MEGATRON_MLA_FUSION_TP"] == 95
    for model, match in (("llama3-8b", "requires --multi-latent-attention"), ("deepseek-v2-lite", "q_lora_rank")):
        with pytest.raises(PlannerError, match=match):
            resolve(Job(model=model, gpus=8, mla_down_proj_fusion=True))
    with pytest.raises(PlannerError, match="has no such option"):
        resolve(Job(model="deepseek-v3", gpus=256, stack="torchtitan", mla_down_proj_fusion=True))
    s = resolve(Job.model_validate({**V3, "mla_down_proj_fusion": True}))[0]
    rule = BY_CODE[95]
    tp = np.array([1, 2, 8, 64, 128], dtype=np.int64)
    assert list(rule.check(s.model, s.stack, SimpleNamespace(tp=tp), None)) == [False] * 4 + [True]
    off = resolve(Job.model_validate(V3))[0]
    assert not rule.check(off.model, off.stack, SimpleNamespace(tp=tp), None).any()


# each format's round trip: the job (without the fusion), what its export writes, the time term read back the same
ROUND_TRIPS = {
    # Megatron-LM's --mla-down-proj-fusion (arguments.py @d98e8a64), under Muon: the Newton-Schulz time of the one
    # fused matrix read back
    "megatron": (["--model", "deepseek-v3", "--gpus", "256", "--tp", "8", "--pp", "16", "--ep", "2", "--etp", "1",
                  "--hardware", "h800-sxm", "--optimizer", "muon", "--bytes-per-param", "megatron"],
                 "--mla-down-proj-fusion", "muon_ns_s"),
    # Megatron-Bridge's pin has the field too (Megatron-Core 905c0e386 transformer_config.py l. 2263,
    # gpt_layer_specs.py l. 252): the launch's Hydra override, the whole step read back
    "megatron-bridge": (["--model", "deepseek-v3", "--gpus", "1024", "--tp", "2", "--pp", "16", "--ep", "32", "--etp",
                         "1", "--hardware", "h800-sxm", "--stack", "megatron-bridge"],
                        "model.mla_down_proj_fusion=true", "step_s"),
}


@pytest.mark.parametrize("fmt", sorted(ROUND_TRIPS))
def test_read_and_export_round_trip(cli, tmp_path, fmt):
    """export --format FMT writes the fusion (ROUND_TRIPS: Megatron's flag, Bridge's model.mla_down_proj_fusion=true);
    the file reads back as the job's mla_down_proj_fusion with the same weights and time term; without the fusion the
    weights are more (the fused projection TP-split, the two unfused ones whole on every TP rank: module docstring)."""
    base, written, same = ROUND_TRIPS[fmt]
    job = base + ["--mla-down-proj-fusion"]
    out = tmp_path / "v3.sh"
    r = cli("export", *job, "--format", fmt, "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    assert written in out.read_text()
    a = json.loads(cli("explain", *job, "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, "--hardware", "h800-sxm", "--format", "json", "-q").stdout)
    assert a["plan"]["mla_down_proj_fusion"] is True and b["plan"]["mla_down_proj_fusion"] is True
    assert b["memory"]["weights_bytes"] == a["memory"]["weights_bytes"]
    assert b["time"][same] == a["time"][same]
    off = json.loads(cli("explain", *base, "--format", "json", "-q").stdout)
    assert off["memory"]["weights_bytes"] > a["memory"]["weights_bytes"]  # the fused projection is TP-split
