"""The routed experts' grouped GEMMs in fp8 or bf16 (job field fp8_grouped_experts; planner/step.py
[16]; docs/torchtitan_grouped_mm.md). torchtitan @e347b1e5e runs GroupedExperts in bf16
(torchtitan/models/moe/moe.py _run_experts_grouped_mm l. 113-130: x.bfloat16(), w.bfloat16()) unless
[quantize.grouped_mm.float8] / [quantize.grouped_mm.mx] converts them (components/quantization/
float8.py l. 176-236, mx.py l. 99-168); Megatron-Core's TEGroupedLinear runs under the layer's fp8
autocast. Stack rule: stack_db defaults.fp8_grouped_experts (torchtitan false, Megatron true)."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from conftest import assert_one_error, explain_job
from planner.catalog import load_stack
from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.layers import layer_list
from planner.plan import resolve
from planner.schema import Job
from planner.startup import CODES
from planner.step import EXPERT_GEMMS, _context, layer_times
from planner.compute import price_gemms
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

# Qwen3-30B-A3B (model_zoo: h 2048, 128 experts of 768, top 8, no shared expert, 48 layers) on 8 H100
QWEN = dict(model="qwen3-30b-a3b", gpus=8, hardware="h100-sxm", stack="torchtitan", precision="fp8",
            fp8_recipe="tensorwise", ep=8, sharding="fsdp", seq_len=4096, global_batch=8)
# hardware_db/h100-sxm.yaml compute: the measured GEMM plateaus, TFLOP/s
H100_FP8, H100_BF16 = 1402.6, 794.5


def test_stack_rules():
    assert load_stack("torchtitan").defaults.fp8_grouped_experts is False
    assert load_stack("megatron").defaults.fp8_grouped_experts is True


def test_default_is_the_stack_rule_listed_as_assumed():
    s, _, _ = resolve(Job(**QWEN))
    assert s.fp8_grouped_experts is False and ("fp8_grouped_experts", False) in s.inherited
    s, _, _ = resolve(Job(**{**QWEN, "stack": "megatron", "sharding": "zero1"}))
    assert s.fp8_grouped_experts is True and ("fp8_grouped_experts", True) in s.inherited
    s, _, _ = resolve(Job(**{**QWEN, "precision": "bf16", "fp8_recipe": None}))  # nothing to convert: not listed
    assert not any(k == "fp8_grouped_experts" for k, _ in s.inherited)
    s, _, _ = resolve(Job(**QWEN, fp8_grouped_experts=True))
    assert s.fp8_grouped_experts is True and not any(k == "fp8_grouped_experts" for k, _ in s.inherited)


@pytest.mark.parametrize("fields, needle", [
    (dict(model="llama3-8b", gpus=8, precision="fp8", fp8_grouped_experts=True), "no routed experts"),
    (dict(QWEN, precision="bf16", fp8_recipe=None, fp8_grouped_experts=True), "needs precision fp8 or nvfp4"),
])
def test_refused_where_it_means_nothing(fields, needle):
    with pytest.raises(PlannerError, match=needle):
        resolve(Job(**fields))


def _moe_kind_times(**kw):
    s, plan, _ = resolve(Job(**{**QWEN, **kw}))
    sc = _context(s, plan, placed=False)
    lt = layer_times(sc)
    k = next(i for i, kind in enumerate(sc.ll.kinds) if kind.has_experts)
    return sc, k, lt


def test_expert_gemms_at_the_bf16_rate_by_hand():
    """Forward GEMM seconds of the MoE layer: the expert_up / expert_down rows at the bf16 plateau
    instead of the fp8 one (tensorwise gemm_speed 1.0, stack_db/torchtitan.yaml): the same FLOPs and
    wave efficiency, so off - on = t8 x (1402.6 / 794.5 - 1) = t8 x 0.76538; the backward twice that."""
    sc, k, on = _moe_kind_times(fp8_grouped_experts=True)
    _, _, off = _moe_kind_times()
    kind = sc.ll.kinds[k]
    rows = [r for r in kind.mixer.gemms(sc.ctx) + kind.mlp.gemms(sc.ctx) if r[0].name in EXPERT_GEMMS]
    assert sorted({r[0].name for r in rows}) == sorted(EXPERT_GEMMS)
    t8 = float(np.sum(list(price_gemms(rows, sc.settings.hardware, sc.plan.precision).values())))
    ratio = H100_FP8 / H100_BF16  # 1.76538
    assert float(np.ravel(off.gemm_fwd[k] - on.gemm_fwd[k])[0]) == pytest.approx(t8 * (ratio - 1.0), rel=1e-9)
    assert float(np.ravel(off.gemm_fwd[k])[0]) > float(np.ravel(on.gemm_fwd[k])[0])


def test_bf16_experts_cast_elements_by_hand():
    """The fp8 casts left where the routed experts run bf16: the shared experts' only
    (layers/mlp.py mlp_cast_elements at their width). Qwen3-30B-A3B has none: 0. DeepSeek-V3's one
    shared expert of 2,048 (h 7,168, gated), T = 8,192 tokens (2 sequences of 4,096 a rank, one
    micro-batch at pp 1): T (h + f) + (h 2f + f h) = 8,192 x 9,216 + 3 x 7,168 x 2,048 =
    75,497,472 + 44,040,192 = 119,537,664."""
    sc, k, _ = _moe_kind_times()
    assert sc.ll.kinds[k].mlp.cast_elements_bf16_experts(sc.ctx) == 0.0
    s, plan, _ = resolve(Job(model="deepseek-v3", gpus=512, hardware="h100-sxm", stack="torchtitan", precision="fp8",
                             fp8_recipe="tensorwise", ep=64, sharding="fsdp", seq_len=4096, global_batch=1024,
                             moe_dispatcher="alltoall"))
    sc = _context(s, plan, placed=False)
    mlp = next(kind.mlp for kind in sc.ll.kinds if kind.has_experts)
    assert float(np.ravel(sc.ctx.T)[0]) == 8192
    assert mlp.cast_elements_bf16_experts(sc.ctx) == pytest.approx(119_537_664)


DSV3 = dict(model="deepseek-v3", gpus=512, hardware="h100-sxm", stack="torchtitan", precision="fp8",
            fp8_recipe="tensorwise", tp=1, pp=1, ep=64, sharding="fsdp", seq_len=4096, global_batch=1024,
            moe_dispatcher="alltoall")


def test_deepseek_v3_step_moves_and_memory_does_not():
    """docs/torchtitan_grouped_mm.md's plan: converted, the step as priced before the field (8.824 s);
    torchtitan's default (bf16 experts) 9.338 s (+5.8%: compute 3.879 -> 4.394 s); memory the same
    (no TE weight cache on torchtitan; torchao's saved tensors not priced)."""
    _, _, _, on = explain_job(**DSV3, fp8_grouped_experts=True)
    _, _, _, off = explain_job(**DSV3)
    assert on["time"]["step_s"] == pytest.approx(8.8239, abs=5e-4)
    assert off["time"]["step_s"] == pytest.approx(9.3384, abs=5e-4)
    assert off["time"]["compute_s"] - on["time"]["compute_s"] == pytest.approx(0.5145, abs=5e-4)
    assert off["memory"]["total_bytes"] == on["memory"]["total_bytes"]
    assert on["plan"]["fp8_grouped_experts"] is True and "fp8_grouped_experts" not in off["plan"]


def test_megatron_experts_drop_their_weight_cache_when_bf16():
    """Megatron's TE keeps a quantized copy of each fp8 linear's weight (memory.py [11]); bf16 experts
    keep none: less memory, a slower step."""
    base = dict(model="qwen3-30b-a3b", gpus=8, hardware="h100-sxm", precision="fp8", ep=8, sharding="zero1",
                seq_len=4096, global_batch=8)
    _, _, _, on = explain_job(**base)
    _, _, _, off = explain_job(**base, fp8_grouped_experts=False)
    assert off["memory"]["total_bytes"] < on["memory"]["total_bytes"]
    assert off["time"]["step_s"] > on["time"]["step_s"]


# ------------------------------------------------------------------ TORCHTITAN_FP8_GROUPED_MM_PP_CP
def test_rule_code_follows_the_last():
    # appended after 62, keeping every code; MEGATRON_NVFP4_TOKENS (issue 22) was appended after it
    assert CODES["TORCHTITAN_FP8_GROUPED_MM_PP_CP"] == 63
    assert CODES["MEGATRON_NVFP4_TOKENS"] == max(CODES.values()) == 64


@pytest.mark.parametrize("kw", [dict(pp=2), dict(cp=2)])
def test_float8_grouped_mm_refuses_pp_and_cp(kw):
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**QWEN, "gpus": 16, "global_batch": 16, **kw}, fp8_grouped_experts=True))
    assert "TORCHTITAN_FP8_GROUPED_MM_PP_CP" in e.value.message and "float8.py" in e.value.message
    resolve(Job(**{**QWEN, "gpus": 16, "global_batch": 16, **kw}))  # the experts bf16 (torchtitan's default): runs


# ------------------------------------------------------------------ export and reader
def test_export_writes_the_grouped_converter_and_reads_back(tmp_path):
    plan = resolved_plan(Job(**QWEN, fp8_grouped_experts=True))
    text, _ = export_plan(plan, "torchtitan")
    d = tomllib.loads(text)
    assert d["model"]["converters"] == ["quantize.linear.float8", "quantize.grouped_mm.float8"]
    assert d["quantize"]["grouped_mm"] == {"float8": {"fqns": ["experts"]}}  # job_config.py Float8GroupedMM l. 756-764
    p = tmp_path / "e.toml"
    p.write_text(text)
    assert load_trainer_config(p, model="qwen3-30b-a3b").job["fp8_grouped_experts"] is True
    # torchtitan's default: no grouped converter written, none read
    text, _ = export_plan(resolved_plan(Job(**QWEN)), "torchtitan")
    d = tomllib.loads(text)
    assert d["model"]["converters"] == ["quantize.linear.float8"] and "grouped_mm" not in d.get("quantize", {})
    p.write_text(text)
    assert "fp8_grouped_experts" not in load_trainer_config(p, model="qwen3-30b-a3b").job


def test_export_mx_writes_the_mx_grouped_converter():
    plan = resolved_plan(Job(**{**QWEN, "hardware": "b200", "fp8_recipe": "mxfp8", "tp": 1}, fp8_grouped_experts=True))
    d = tomllib.loads(export_plan(plan, "torchtitan")[0])
    assert d["model"]["converters"] == ["quantize.linear.mx", "quantize.grouped_mm.mx"]
    assert d["quantize"]["grouped_mm"] == {"mx": {"recipe_name": "mxfp8", "fqns": ["experts"]}}


# torchtitan @e347b1e5e torchtitan/models/deepseek_v3/train_configs/deepseek_v3_671b.toml l. 69-77 (its quantize tables)
DSV3_TOML = """[model]
name = "deepseek_v3"
flavor = "671B"
converters = {conv}
[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output", "router.gate"]
[quantize.grouped_mm.float8]
fqns = {fqns}
[parallelism]
data_parallel_shard_degree = 64
expert_parallel_degree = 8
"""


@pytest.mark.parametrize("conv, fqns, want", [
    ('["quantize.linear.float8", "quantize.grouped_mm.float8"]', '["experts"]', True),
    ('["quantize.linear.float8", "quantize.grouped_mm.float8"]', "[]", False),
    ('["quantize.linear.float8", "quantize.grouped_mm.float8"]', '"experts,shared_experts"', True),
])
def test_reader_on_torchtitans_own_deepseek_v3_tables(tmp_path, conv, fqns, want):
    p = tmp_path / "ds.toml"
    p.write_text(DSV3_TOML.format(conv=conv, fqns=fqns))
    cfg = load_trainer_config(p, model="deepseek-v3", gpus=64)
    assert cfg.job["fp8_grouped_experts"] is want


def test_reader_without_the_converter_ignores_the_table(tmp_path):
    p = tmp_path / "ds.toml"
    p.write_text(DSV3_TOML.format(conv='["quantize.linear.float8"]', fqns='["experts"]'))
    cfg = load_trainer_config(p, model="deepseek-v3", gpus=64)
    assert "fp8_grouped_experts" not in cfg.job
    assert any("quantize.grouped_mm.float8" in i for i in cfg.ignored)


def test_reader_refuses_a_type_mix(cli, tmp_path):
    """QuantizationConverter._validate (components/quantization/__init__.py @e347b1e5e l. 37-55): one type."""
    p = tmp_path / "ds.toml"
    p.write_text(DSV3_TOML.format(conv='["quantize.linear.float8", "quantize.grouped_mm.mx"]', fqns='["experts"]')
                 .replace("[quantize.grouped_mm.float8]", "[quantize.grouped_mm.mx]"))
    r = cli("explain", str(p), "--model", "deepseek-v3", "--hardware", "h100-sxm", "--gpus", "64")
    assert_one_error(r, "quantize.grouped_mm.mx", "one quantization type")


def test_fit_states_the_rule_and_the_pinned_value(cli):
    """fit does not search fp8_grouped_experts: it states the stack's rule; given, the rows run it and
    rule 63 drops the pp > 1 / cp > 1 plans."""
    args = ("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "h100-sxm", "--stack", "torchtitan",
            "--precision", "fp8", "--global-batch", "64", "--top", "3")
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert "grouped GEMMs run bf16 in every row" in r.stderr and "--fp8-grouped-experts plans the other" in r.stderr
    r = cli(*args, "--fp8-grouped-experts")
    assert r.exit_code == 0, r.stderr
    assert "grouped GEMMs run" not in r.stderr and "TORCHTITAN_FP8_GROUPED_MM_PP_CP" in r.stdout + r.stderr
    assert "--fp8-grouped-experts" in r.stdout  # the rows' explain line carries it
