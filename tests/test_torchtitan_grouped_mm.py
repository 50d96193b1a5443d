"""The routed experts' grouped GEMMs in fp8 or bf16 (job field fp8_grouped_experts; planner/step.py
[16]; docs/torchtitan_grouped_mm.md). torchtitan @e347b1e5e runs GroupedExperts in bf16
(torchtitan/models/moe/moe.py _run_experts_grouped_mm l. 113-130: x.bfloat16(), w.bfloat16()) unless
[quantize.grouped_mm.float8] / [quantize.grouped_mm.mx] converts them (components/quantization/
float8.py l. 176-236, mx.py l. 99-168); Megatron-Core's TEGroupedLinear runs under the layer's fp8
autocast. Stack rule: stack_db defaults.fp8_grouped_experts (torchtitan false, Megatron true)."""

from __future__ import annotations

import tomllib

import numpy as np
from pathlib import Path

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


def test_expert_gemm_rows_padded_by_hand():
    """The expert GEMMs' M (layers/moe.py [14]): t_e = T top_k ep / E x L = 4,096 x 8 x 8 / 128 = 2,048 L
    tokens a local expert (L: the busiest EP rank's load, imbalance.rank_load), plus the mean padding
    (A - 1) / 2 of a group padded to a multiple of A rows: bf16 experts A = 8 (torchtitan models/moe/utils.py
    TOKEN_GROUP_ALIGN_SIZE_M) -> + 3.5; the float8 converter A = 16 (components/quantization/__init__.py
    FP8_GROUP_ALIGNMENT_SIZE) -> + 7.5. Megatron pads nothing."""
    for kw, pad in ((dict(), 3.5), (dict(fp8_grouped_experts=True), 7.5),
                    (dict(stack="megatron", sharding="zero1"), 0.0)):
        sc, k, _ = _moe_kind_times(**kw)
        mlp = sc.ll.kinds[k].mlp
        t_e = float(np.ravel(mlp.expert_tokens(sc.ctx))[0])
        assert t_e == pytest.approx(2048 * float(np.ravel(sc.ctx.cf)[0]), rel=1e-12)
        rows = {r[0].name: r[0] for r in mlp.gemms(sc.ctx)}
        for name in EXPERT_GEMMS:
            assert float(np.ravel(rows[name].M)[0]) - t_e == pytest.approx(pad, abs=1e-9)


def test_expert_gemms_rates_by_hand():
    """Forward GEMM seconds of the MoE layer (step.py [16]): bf16 experts at the bf16 plateau; converted,
    at the fp8 plateau over rowwise's gemm_speed 0.88 (torchao's float8 grouped GEMMs scale row-wise
    whatever the linear recipe: stack_db torchtitan fp8_recipes tensorwise grouped_experts_recipe
    rowwise), each at its own padded rows. The other rows (attention; the router bf16, step.py [18]) the same
    in both; backward twice the forward (fprop, dgrad, wgrad all low-precision)."""
    sc_on, k, on = _moe_kind_times(fp8_grouped_experts=True)
    sc_off, _, off = _moe_kind_times()
    hw = sc_on.settings.hardware

    def experts(sc, precision):
        rows = [r for r in sc.ll.kinds[k].mlp.gemms(sc.ctx) if r[0].name in EXPERT_GEMMS]
        assert sorted({r[0].name for r in rows}) == sorted(EXPERT_GEMMS)
        return float(np.sum(list(price_gemms(rows, hw, precision).values())))

    e_on = experts(sc_on, sc_on.plan.precision) / 0.88
    e_off = experts(sc_off, np.zeros_like(sc_off.plan.precision))
    rest_on = float(np.ravel(on.gemm_fwd[k])[0]) - e_on
    rest_off = float(np.ravel(off.gemm_fwd[k])[0]) - e_off
    assert rest_on == pytest.approx(rest_off, rel=1e-12) and rest_on > 0
    # The ratio by hand (compute [5a]): a GEMM's time is (2K / P + 2 B / W) x waves x SMs x tile area, and both
    # precisions' rows (M 2,239.8 and 2,243.8) cut into the same tiles: up [M, 1,536, 2,048] 18 x 6 = 108 tiles, one
    # wave; down [M, 2,048, 768] 18 x 8 = 144 tiles, two waves. K-loop rates x 0.85: bf16 810.545 -> 688.96e12,
    # fp8 1,449.641 -> 1,232.19e12 FLOP/s; W = 3.015e12 B/s, 2 / W = 6.6335e-13. bf16: (4096 / 688.96e12 + 6.6335e-13)
    # + 2 x (1536 / 688.96e12 + 6.6335e-13) = 6.6085e-12 + 5.7857e-12 = 1.23942e-11; fp8: 3.9875e-12 + 3.8198e-12 =
    # 7.8073e-12; ratio 0.88 x 1.23942 / 0.78073 = 1.3970 (1.5535 = 1402.6 x 0.88 / 794.5, the plateaus' ratio, before
    # the write was priced: the write does not speed up in fp8)
    assert e_off / e_on == pytest.approx(1.3970, rel=2e-3)
    assert float(np.ravel(off.gemm_fwd[k])[0]) > float(np.ravel(on.gemm_fwd[k])[0])


def test_rowwise_plan_prices_its_experts_at_its_own_recipe():
    """Under the rowwise linear recipe the converted experts run the plan's own figures: the expert rows'
    share of the forward is the whole layer's rate (no grouped_experts_recipe of its own); the router gate,
    which the job's default filter_fqns keeps bf16 (step.py [18]), at the bf16 plateau."""
    sc, k, lt = _moe_kind_times(fp8_recipe="rowwise", fp8_grouped_experts=True)
    rows = sc.ll.kinds[k].mixer.gemms(sc.ctx) + sc.ll.kinds[k].mlp.gemms(sc.ctx)
    low = [r for r in rows if r[0].name != "router"]
    router = [r for r in rows if r[0].name == "router"]
    t = float(np.sum(list(price_gemms(low, sc.settings.hardware, sc.plan.precision).values()))) / 0.88
    t += float(np.sum(list(price_gemms(router, sc.settings.hardware, np.zeros_like(sc.plan.precision)).values())))
    assert float(np.ravel(lt.gemm_fwd[k])[0]) == pytest.approx(t, rel=1e-12)


def test_padding_held_by_hand_one_layer():
    """What the converted grouped GEMMs hold (layers/moe.py [14]): torchao's _Float8GroupedMM saves its
    high-precision inputs (pytorch/ao @9cd41075 torchao/prototype/moe_training/scaled_grouped_mm.py l. 181
    ctx.save_for_backward(A, B_t, offs)), as torch._grouped_mm does, so no saved byte changes width; the
    padded buffer does: torchtitan's _permute holds R + E_l A rows (models/moe/utils.py l. 44-45). One
    Qwen3-30B-A3B MoE layer, E_l = 128 / 8 = 16 local experts: 8 more rows an expert under float8 (16 - 8),
    128 rows of the permuted input 2 h = 4,096 B, the gate / up outputs 2 x 2 f_e = 3,072 B and the
    activation output 2 f_e = 1,536 B: 128 x 8,704 = 1,114,112 B; bf16 (A = 8) holds as
    many more than no padding."""
    from planner.memory import kind_activation_bytes

    got = {}
    for name, kw in (("on", dict(fp8_grouped_experts=True)), ("off", dict())):
        sc, k, _ = _moe_kind_times(**kw)
        got[name] = float(np.ravel(kind_activation_bytes(sc.ll.kinds[k], sc.ctx))[0])
        if name == "off":
            from dataclasses import replace
            got["none"] = float(np.ravel(kind_activation_bytes(sc.ll.kinds[k], replace(sc.ctx, group_align=np.float64(0.0))))[0])
    assert got["on"] - got["off"] == pytest.approx(16 * 8 * (4096 + 3072 + 1536), rel=1e-12)
    assert got["off"] - got["none"] == pytest.approx(16 * 8 * (4096 + 3072 + 1536), rel=1e-12)


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


def test_deepseek_v3_step_and_memory():
    """docs/torchtitan_grouped_mm.md's plan: converted 9.152 s (9.125 s before issue ttamax priced torchao's amax
    all-reduce of each converted weight in each of FSDP's fp8 all-gathers, step.py [39]: dp_comm 2.2166 -> 2.3562 s,
    0.0273 s more exposed, both plans; 8.996 s before a GEMM's output write was priced after
    its K loop, compute [5a]; 8.962 s before torchtitan's all-to-all of the token
    counts was priced, 58 MoE layers a micro-batch, 0.0339 s a step: stack moe_alltoall_exchanges, dispatch.py [12];
    8.947 s before GEMM tile quantization,
    compute.wave_efficiency; 8.946 s before branch smallfix priced one expert FSDP
    collective a MoE layer, 58 here, step.py _expert_stage, where ceil(e_local / (p_dp / n_mid)) had counted fewer;
    8.947 s before the routers' score biases left the
    parameters, layers/common.py [sb]: the FSDP bucket count ceil(p / (p / 61)) of step.dp_comm then rounded to 62
    collectives, now 61, one a layer; 8.824 s before its experts ran at rowwise's
    0.88 and 16-row token groups, 8.942 s before the router gate ran bf16 and the MLA down projections were
    gathered in fp8, step.py [18]); torchtitan's default (bf16 experts) 9.545 s (9.518 s before [39], 9.399 s before the write, 9.366 s
    before the counts' all-to-all, 9.344 s before tile quantization, 9.3435 s before smallfix, 9.345 s before the score biases
    left, 9.338 s before the 8-row padding,
    9.339 s before issue 22's converted set). Memory: converted holds 58 MoE layers x 4 local experts x 8 more padded rows x (2 h + 3 x
    2 f_e + 4) = 58 x 32 x (14,336 + 12,288 + 4) = 49,421,568 B more (torchao saves no fp8 copy; the 4 B a padded row
    is the permutation index's int32 entry, memory.ep_permute_index padded_int32, layers/moe.py [23]: 49,414,144 B
    before it was priced)."""
    _, _, _, on = explain_job(**DSV3, fp8_grouped_experts=True)
    _, _, _, off = explain_job(**DSV3)
    assert on["time"]["step_s"] == pytest.approx(9.1520, abs=5e-4)
    assert off["time"]["step_s"] == pytest.approx(9.5450, abs=5e-4)
    assert off["time"]["compute_s"] - on["time"]["compute_s"] == pytest.approx(0.3930, abs=5e-4)
    assert 58 * 32 * (14_336 + 12_288 + 4) == 49_421_568
    assert on["memory"]["activations_bytes"] - off["memory"]["activations_bytes"] == pytest.approx(49_421_568, abs=1)
    assert on["plan"]["fp8_grouped_experts"] is True and off["plan"]["fp8_grouped_experts"] is False


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
    # appended after 62, keeping every code; MEGATRON_NVFP4_TOKENS (issue 22) was appended after it, then the
    # torchtitan model-code rules (65-68, tests/test_startup_torchtitan_model_code.py), then MEGATRON_FP8_ROWS and
    # MEGATRON_MXFP8_ROWS (69-70, issue 22/23), then MEGATRON_FP8_WIDTHS (71, tests/test_export_rope_fp4.py), then
    # MEGATRON_CP_SLIDING_WINDOW (72, tests/test_cp_sliding_window.py), then STACK_LAYER_KIND (73,
    # tests/test_stack_layer_kinds.py)
    assert CODES["TORCHTITAN_FP8_GROUPED_MM_PP_CP"] == 63 and CODES["MEGATRON_NVFP4_TOKENS"] == 64
    assert CODES["TORCHTITAN_MODEL_ASYNC_TP"] == 68 and CODES["MEGATRON_MXFP8_ROWS"] == 70
    assert CODES["MEGATRON_FP8_WIDTHS"] == 71
    assert CODES["MEGATRON_CP_SLIDING_WINDOW"] == 72
    assert CODES["STACK_LAYER_KIND"] == 73 and CODES["STACK_RECOMPUTE"] == 75  # then STACK_SEQUENCE_PARALLEL 74
    assert CODES["DEEPSPEED_PP_SPLIT_ENDS"] == 76 and CODES["DEEPSPEED_MOE"] == 77 and CODES["DEEPSPEED_MOE_SP"] == 78
    assert CODES["TORCHTITAN_MTP_PP_CP"] == 79 and CODES["STACK_SP_NORM_GRADS"] == 80
    assert CODES["BRIDGE_CHUNK_CP"] == 81 and CODES["TORCHTITAN_HYBRIDEP"] == 82  # bridgecp, tt03ep
    assert CODES["STACK_MODE_TP_PP_DP"] == 83  # bridgefsdp
    assert CODES["PRECISION_AWARE_MFSDP"] == 84 and CODES["TORCHTITAN_SEQ_SP_CP"] == 85 and CODES["TORCHTITAN_VARLEN_CP"] == 86  # the newest code: tests/test_startup_codes.py; detmode: 91-93, fuzz99: 96, 97: TORCHTITAN03_STAGE_LISTS (FIXED_CODE_RULES)  # rule87: 87-89 follow, ttchecks: 90  # pamfsdp, rule85


# qwen3's torchtitan code has no pipelining function (TORCHTITAN_MODEL_PP): pp 2 on Mixtral (no torchtitan code,
# priced on the stack's lists)
@pytest.mark.parametrize("kw", [dict(pp=2, model="mixtral-8x7b"), dict(cp=2)])
def test_float8_grouped_mm_refuses_pp_and_cp(kw):
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**QWEN, "gpus": 16, "global_batch": 16, **kw}, fp8_grouped_experts=True))
    assert "TORCHTITAN_FP8_GROUPED_MM_PP_CP" in e.value.message and "float8.py" in e.value.message
    resolve(Job(**{**QWEN, "gpus": 16, "global_batch": 16, **kw}))  # the experts bf16 (torchtitan's default): runs


# ------------------------------------------------------------------ export and reader
# qwen3-30b-a3b with torchtitan's expert bias: the 30B-A3B flavor's shape, which the export names (the catalog entry has
# no torchtitan flavor: tests/test_torchtitan_flavors.py)
QWEN_TT = str(Path(__file__).parent / "data" / "torchtitan_flavors" / "qwen3-30b-a3b-torchtitan.yaml")


def test_export_writes_the_grouped_converter_and_reads_back(tmp_path):
    plan = resolved_plan(Job(**{**QWEN, "model": QWEN_TT}, fp8_grouped_experts=True))
    text, _ = export_plan(plan, "torchtitan")
    d = tomllib.loads(text)
    assert d["model"]["converters"] == ["quantize.linear.float8", "quantize.grouped_mm.float8"]
    assert d["quantize"]["grouped_mm"] == {"float8": {"fqns": ["experts"]}}  # job_config.py Float8GroupedMM l. 756-764
    p = tmp_path / "e.toml"
    p.write_text(text)
    assert load_trainer_config(p, model=QWEN_TT).job["fp8_grouped_experts"] is True
    # torchtitan's default: no grouped converter written, none read
    text, _ = export_plan(resolved_plan(Job(**{**QWEN, "model": QWEN_TT})), "torchtitan")
    d = tomllib.loads(text)
    assert d["model"]["converters"] == ["quantize.linear.float8"] and "grouped_mm" not in d.get("quantize", {})
    p.write_text(text)
    assert "fp8_grouped_experts" not in load_trainer_config(p, model=QWEN_TT).job


def test_export_mx_writes_the_mx_grouped_converter():
    plan = resolved_plan(Job(**{**QWEN, "model": QWEN_TT, "hardware": "b200", "fp8_recipe": "mxfp8", "tp": 1},
                             fp8_grouped_experts=True))
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


def test_fit_searches_both_and_ranks_them_by_time(cli):
    """fit tries the routed experts bf16 and converted on torchtitan (stack_db runs.fp8_grouped_experts),
    the faster per plan where it starts: the converted experts are faster, so the pp 1 rows take them;
    rule 63 (float8 grouped converter: pp = cp = 1) leaves the cp > 1 rows bf16 (qwen3's torchtitan code runs no
    pp > 1: TORCHTITAN_MODEL_PP; the top 70 hold cp 2 rows: the first at index 60 (0-based) since a GEMM's output
    write was priced after its K loop (compute [5a]; the top 60 then held none), at row 56 since GEMM tile quantization
    (compute.wave_efficiency), at row 40 since the compiled selective rows
    no longer re-run half the experts' gate+up GEMM, memory.py [gmm], at 39 before). Each JSON row names its
    setting, its explain line carries it, and explain prices the row as fit did."""
    import json

    from planner.search import explain_args

    args = ("fit", "--model", "qwen3-30b-a3b", "--gpus", "64", "--hardware", "h100-sxm", "--stack", "torchtitan",
            "--precision", "fp8", "--global-batch", "512", "--seq-len", "4096", "--top", "70")
    r = cli(*args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    steps = [x["time"]["step_s"] for x in rows]
    assert steps == sorted(steps)
    fge = [x["plan"]["fp8_grouped_experts"] for x in rows]
    assert True in fge and False in fge
    assert all(x["plan"]["fp8_grouped_experts"] is False for x in rows if x["plan"]["pp"] > 1 or x["plan"]["cp"] > 1)
    assert all(x["plan"]["fp8_grouped_experts"] is True for x in rows if x["plan"]["pp"] == 1 and x["plan"]["cp"] == 1)
    job = Job(model="qwen3-30b-a3b", gpus=64, hardware="h100-sxm", stack="torchtitan", precision="fp8",
              global_batch=512, seq_len=4096)
    for want in (True, False):
        row = next(x for x in rows if x["plan"]["fp8_grouped_experts"] is want)
        a = explain_args(job, row)
        assert ("--fp8-grouped-experts" in a) is want and "--no-fp8-grouped-experts" not in a
        e = json.loads(cli("explain", *a, "--format", "json").stdout)
        assert e["time"]["step_s"] == row["time"]["step_s"] and e["memory"]["total_bytes"] == row["memory"]["total_bytes"]
        assert e["plan"]["fp8_grouped_experts"] is want
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert "grouped GEMMs searched, bf16 and fp8" in r.stderr
    assert "fp8 experts" in r.stdout and "bf16 experts" in r.stdout


def test_fit_pinned_is_the_only_choice(cli):
    """A job that sets fp8_grouped_experts pins it: every row runs it, and rule 63 drops the pp > 1 / cp > 1
    plans (counted as broken); on a stack that runs one setting (Megatron) nothing is searched."""
    from planner.space import variant_choices
    from planner.catalog import load_model

    args = ("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "h100-sxm", "--stack", "torchtitan",
            "--precision", "fp8", "--global-batch", "64", "--top", "3")
    r = cli(*args, "--fp8-grouped-experts")
    assert r.exit_code == 0, r.stderr
    assert "grouped GEMMs" not in r.stderr and "TORCHTITAN_FP8_GROUPED_MM_PP_CP" in r.stdout + r.stderr
    assert "--fp8-grouped-experts" in r.stdout and "bf16 experts" not in r.stdout
    qwen = load_model("qwen3-30b-a3b")
    tt, mg = load_stack("torchtitan"), load_stack("megatron")
    j = Job(model="qwen3-30b-a3b", gpus=16, stack="torchtitan", precision="fp8", fp8_recipe="tensorwise")
    assert set(variant_choices(tt, j, model=qwen)[:, 4].tolist()) == {0, 1}  # crossed with TP overlap off / on
    assert variant_choices(tt, j, model=qwen)[0, 4] == 0  # the stack's rule first
    assert set(variant_choices(tt, j.model_copy(update=dict(fp8_grouped_experts=True)), model=qwen)[:, 4].tolist()) == {1}
    assert set(variant_choices(tt, j.model_copy(update=dict(precision="bf16", fp8_recipe=None)), model=qwen)[:, 4].tolist()) == {0}
    assert set(variant_choices(mg, j.model_copy(update=dict(stack="megatron")), model=qwen)[:, 4].tolist()) == {1}
