"""Start-up rule 71 (MEGATRON_FP8_WIDTHS) on every layer kind Transformer Engine runs in fp8 (issue 22): MLA's down
projections, Mamba-2's and Gated DeltaNet's in / out projections, a hybrid's attention with its output gate; and the
same rule on a Megatron launch script (planner/trainers/rules.py FP8_WIDTHS, and `planner check` on the script).

Which modules are TE linears: Megatron-LM @d98e8a64 gpt_layer_specs.py l. 122-126 (MLA: linear_q_down_proj /
linear_kv_down_proj = backend.linear() = TELinear, duplicated), models/hybrid/hybrid_layer_specs.py l. 115-117 (Mamba:
TELayerNormColumnParallelLinear in_proj, TERowParallelLinear out_proj), experimental_attention_variant_module_specs.py
l. 88-90 (GDN: the same two). The checks: TE @4329ff84 utils.py assert_dim_for_fp8_exec l. 613-623 (input last dim
% 16, weight [out, in] leading dim % 8), quantizer.cpp l. 1395-1397 (MXFP8: every dim % 32), l. 1814-1819 (NVFP4 % 16).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.catalog import load_model
from planner.errors import PlannerError
from planner.plan import resolve
from planner.precisions import FP8, FP8_RECIPE_CODES, PRECISION_CODES
from planner.schema import Job
from planner.startup import BY_CODE, CODES, _quantized_widths
from planner.trainers.export import export_plan

RULE = BY_CODE[CODES["MEGATRON_FP8_WIDTHS"]]


def _broken(model, tp, precision, recipe):
    n = len(tp)
    p = SimpleNamespace(tp=np.asarray(tp), etp=np.zeros(n, dtype=np.int64), precision=np.full(n, precision),
                        f8r=np.full(n, FP8_RECIPE_CODES[recipe]))
    return RULE.broken(model, None, p).tolist()


def test_codes_stay():
    assert CODES["MEGATRON_FP8_WIDTHS"] == 71 and CODES["MEGATRON_CP_SLIDING_WINDOW"] == 72 and CODES["STACK_LAYER_KIND"] == 73
    assert CODES["STACK_SEQUENCE_PARALLEL"] == 74 and CODES["STACK_RECOMPUTE"] == 75
    assert CODES["DEEPSPEED_PP_SPLIT_ENDS"] == 76 and CODES["DEEPSPEED_MOE"] == 77  # mdsexport2
    assert CODES["DEEPSPEED_MOE_SP"] == 78  # mdsmoefit
    assert CODES["TORCHTITAN_MTP_PP_CP"] == 79  # tt03disp
    assert CODES["STACK_SP_NORM_GRADS"] == 80  # mdscheck
    assert CODES["BRIDGE_CHUNK_CP"] == 81 and CODES["TORCHTITAN_HYBRIDEP"] == 82  # bridgecp, tt03ep
    assert CODES["STACK_MODE_TP_PP_DP"] == 83  # bridgefsdp
    assert CODES["PRECISION_AWARE_MFSDP"] == 84 and CODES["TORCHTITAN_SEQ_SP_CP"] == 85 and CODES["TORCHTITAN_VARLEN_CP"] == 86  # the newest code: tests/test_startup_codes.py; detmode: 91-93, fuzz99: 96, 97: TORCHTITAN03_STAGE_LISTS (FIXED_CODE_RULES)  # rule87: 87-89 follow, ttchecks: 90  # pamfsdp, rule85


def test_mamba2_in_proj_width_over_tp():
    """nemotron-h-56b's Mamba-2 in_proj out 2 x 16,384 + 2 x 8 groups x 256 state + 256 heads = 37,120 = 2^8 x 145:
    / tp 16 = 2,320 (% 32 = 16: mxfp8 breaks), / tp 32 = 1,160 (% 16 = 8: nvfp4 breaks), / tp 64 = 580 (% 8 = 4: every
    fp8 recipe breaks). Its other widths divide (attention 8,192 and QKV (64 + 16) x 128 = 10,240 / 64 = 160; d_inner
    16,384 / 64 = 256; ffn 32,768): before issue 22 no width of this hybrid was read (delayed passed at tp 64)."""
    m = load_model("nemotron-h-56b")
    w = {name: width for name, width, *_ in _quantized_widths(m)}
    assert w["Mamba-2 in_proj out 2 d_inner + 2 groups x state + heads"] == 2 * 16384 + 2 * 8 * 256 + 256 == 37120
    assert w["Mamba-2 out_proj input d_inner"] == 256 * 64 == 16384
    assert w["QKV out (heads + 2 kv_heads) x head_dim"] == (64 + 2 * 8) * 128
    tp = [8, 16, 32, 64]
    assert _broken(m, tp, FP8, "mxfp8") == [False, True, True, True]
    assert _broken(m, tp, PRECISION_CODES["nvfp4"], "delayed") == [False, False, True, True]
    assert _broken(m, tp, FP8, "delayed") == [False, False, False, True]
    assert _broken(m, tp, PRECISION_CODES["bf16"], "mxfp8") == [False] * 4


def test_gated_deltanet_in_proj_width_over_tp():
    """qwen3-next-80b-a3b's Gated DeltaNet in_proj out 2 x 16 x 128 + 2 x 32 x 128 + 2 x 32 = 12,352 = 2^6 x 193:
    / tp 4 = 3,088 (% 32 = 16), / tp 8 = 1,544 (% 16 = 8), / tp 16 = 772 (% 8 = 4); its gated attention's QKV out
    (2 x 16 + 2 x 2) x 256 = 9,216 (the output gate's 16 x 256 counted: attention.py l. 1689-1691) divides at all."""
    m = load_model("qwen3-next-80b-a3b")
    w = {name: width for name, width, *_ in _quantized_widths(m)}
    assert w["Gated DeltaNet in_proj out 2 qk + 2 v + 2 value heads"] == 2 * 2048 + 2 * 4096 + 64 == 12352
    assert w["QKV out (2 heads + 2 kv_heads) x head_dim (output gate)"] == (2 * 16 + 2 * 2) * 256 == 9216
    tp = [2, 4, 8, 16]
    assert _broken(m, tp, FP8, "mxfp8") == [False, True, True, True]
    assert _broken(m, tp, PRECISION_CODES["nvfp4"], "delayed") == [False, False, True, True]
    assert _broken(m, tp, FP8, "delayed") == [False, False, False, True]


def _mla_model(tmp_path, kv_lora_rank: int) -> str:
    import yaml

    m = load_model("deepseek-v3")
    m = m.model_copy(update=dict(name="mla-odd", mla=m.mla.model_copy(update=dict(kv_lora_rank=kv_lora_rank))))
    path = tmp_path / "mla-odd.yaml"
    path.write_text(yaml.safe_dump(m.model_dump(exclude_none=True)))
    return str(path)


def test_mla_down_projections_are_checked(tmp_path):
    """DeepSeek-V3's MLA with kv_lora_rank 504 (hand-made): kv_up's input 504 (% 16 = 8) breaks every fp8 recipe at
    any tp (TELinear duplicated: not split), the kv_down out 504 + 64 = 568 (% 8 = 0, % 32 = 24) mxfp8 only; the
    catalogue's 512 (kv_down out 576 = 32 x 18) passes. q_lora_rank 1,536 = 32 x 48 passes both."""
    m = load_model("deepseek-v3")
    w = {name: width for name, width, *_ in _quantized_widths(m)}
    assert (w["MLA q_down out q_lora_rank"], w["MLA kv_down out kv_lora_rank + qk_rope_head_dim"]) == (1536, 512 + 64)
    odd = load_model(_mla_model(tmp_path, 504))
    assert _broken(odd, [1, 8], FP8, "delayed") == [True, True]
    assert _broken(m, [1, 8], FP8, "delayed") == [False, False]
    assert _broken(m, [1, 8], FP8, "mxfp8") == [False, False]
    job = dict(model=_mla_model(tmp_path, 504), gpus=8, hardware="b200", precision="fp8", global_batch=64,
               seq_len=4096, micro_batch=1, tp=1, pp=1, ep=8, fp8_recipe="mxfp8")
    with pytest.raises(PlannerError, match="MEGATRON_FP8_WIDTHS") as e:
        resolve(Job(**job))
    assert "MLA kv_up input kv_lora_rank 504, not a multiple of 32" in e.value.message
    assert "MLA kv_down out kv_lora_rank + qk_rope_head_dim 568, not a multiple of 32" in e.value.message


# ------------------------------------------------------------------ rule 71 on a script


def _script(tmp_path):
    """llama3-8b fp8 (delayed) at tp 4, exported, then given 40 heads of 72 (8 KV groups) at tp 8: the attention proj
    input 40 x 72 = 2,880 / 8 = 360 (% 16 = 8); QKV out (40 + 16) x 72 = 4,032 / 8 = 504 (= 8 x 63) passes."""
    from planner.explain import evaluate, to_json

    settings, plan, _ = resolve(Job(model="llama3-8b", gpus=8, hardware="b200", precision="fp8", fp8_recipe="delayed",
                                    tp=4, global_batch=64, micro_batch=1, seq_len=8192))
    text, _ = export_plan(to_json(settings, plan, evaluate(settings, plan))["plan"], "megatron")
    assert "--tensor-model-parallel-size 4" in text and "--kv-channels 128" in text
    return text


def test_rule_71_on_a_script(tmp_path, cli):
    from planner.trainers.rules import megatron_script_errors

    text = _script(tmp_path)
    assert not [k for k, _ in megatron_script_errors(text)]
    bad = (text.replace("--num-attention-heads 32", "--num-attention-heads 40").replace("--kv-channels 128", "--kv-channels 72")
           .replace("--tensor-model-parallel-size 4", "--tensor-model-parallel-size 8"))
    errs = megatron_script_errors(bad)
    assert [k for k, _ in errs] == ["FP8_WIDTHS"]
    assert "attention proj input heads x head_dim 2880 / tp 8 not a multiple of 16" in errs[0][1]
    assert "QKV out" not in errs[0][1]
    assert [k for k, _ in megatron_script_errors(bad.replace("--fp8-recipe delayed", "--fp8-recipe mxfp8"))] == \
        ["FP8_WIDTHS"]  # mxfp8: 360 % 32 and 504 % 32 = 24 both
    assert "QKV out (heads + 2 kv_heads) x head_dim 4032 / tp 8 not a multiple of 32" in megatron_script_errors(
        bad.replace("--fp8-recipe delayed", "--fp8-recipe mxfp8"))[0][1]
    # `planner check` on the script resolves the job and applies start-up rule 71 itself: exit 2, the rule named
    path = tmp_path / "wide.sh"
    path.write_text(bad)
    r = cli("check", str(path), "--hardware", "b200")
    assert r.exit_code == 2
    assert "MEGATRON_FP8_WIDTHS" in r.stderr and "2,880 / tp 8 = 360, not a multiple of 16 (tp 1, 2, 4 give one)" in r.stderr
    ok = tmp_path / "ok.sh"
    ok.write_text(bad.replace("--tensor-model-parallel-size 8", "--tensor-model-parallel-size 4"))
    assert not megatron_script_errors(ok.read_text())
    assert cli("check", str(ok), "--hardware", "b200").exit_code in (0, 1)  # starts (fits or not): no rule broken


def test_mla_widths_on_a_script():
    """FP8_WIDTHS reads MLA's flags (defaults arguments.py l. 3548-3556): --kv-lora-rank 504 breaks kv_up's input
    (504 % 16 = 8) under --fp8-format; the default 32 (kv_down out 32 + 64 = 96 = 8 x 12) passes."""
    from planner.trainers.rules import _fp8_width_errors

    flags = {"--hidden-size": "7168", "--multi-latent-attention": True, "--q-lora-rank": "1536", "--fp8-format": "hybrid",
             "--ffn-hidden-size": "18432"}
    assert _fp8_width_errors(flags, 8, 8, 128, 128) == []
    errs = _fp8_width_errors({**flags, "--kv-lora-rank": "504"}, 8, 8, 128, 128)
    assert len(errs) == 1 and "MLA kv_up input kv_lora_rank 504 not a multiple of 16" in errs[0][1]
    assert "kv_down" not in errs[0][1]  # 568 = 8 x 71
