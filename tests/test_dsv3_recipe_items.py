"""DeepSeek-V3's recipe items (issue 23): bf16 AdamW moments (arXiv:2412.19437 sec. 3.3.3) and
multi-token prediction (sec. 2.2, depth 1 in sec. 4.2), priced, read from Megatron's flags
(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, --mtp-num-layers;
Megatron-LM @d98e8a64 arguments.py l. 3667-3685, optimizer_config.py l. 407-478) and refused
where Megatron refuses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import recipe
from planner.catalog import load_model
from planner.compute import _dense_params
from planner.errors import PlannerError
from planner.params import count_params
from planner.plan import bytes_per_param, with_mtp
from planner.step import adam_bytes_per_param
from planner.trainers import load_trainer_config

FP8_SH = Path(__file__).parent / "data" / "trainer_configs" / "train_llama3_8b_h100_fp8.sh"


def _variant(tmp_path, old: str, new: str) -> Path:
    text = FP8_SH.read_text()
    assert old in text, old
    p = tmp_path / FP8_SH.name
    p.write_text(text.replace(old, new))
    return p


PA = "--use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"


def test_megatron_bf16_moments_with_blockwise_fp8_is_the_bf16_moments_preset(tmp_path):
    """fp32 main grads (no --grad-reduce-in-bf16) 4 B, Megatron's fp32 main params 4 B (blockwise
    fp8: not TE's master, optimizer_config.py l. 407-413), m and v in bf16 2 + 2: 2+4+4+4 = 14 B."""
    p = _variant(tmp_path, "    --grad-reduce-in-bf16\n", f"    {PA}\n    --fp8-recipe blockwise\n")
    cfg = load_trainer_config(p)
    assert cfg.job["bytes_per_param"] == "bf16-moments"
    assert bytes_per_param("bf16-moments")[0].total == 14.0
    assert not any("optimizer state dtypes" in u for u in cfg.unmodelled)


def test_megatron_bf16_moments_with_delayed_fp8_prices_master_remainders(tmp_path):
    """Delayed fp8 (the default recipe): TE's FusedAdam holds the master weights and keeps their
    16-bit remainders beside the bf16 weights (store_param_remainders). The reader gives the
    dtypes' bytes (2+2+4+4: --grad-reduce-in-bf16), the stack prices the remainders (stack_db
    megatron runs.low_precision_moments): master 2 B, 10 B in all, as for a planned job."""
    from planner.plan import resolve
    from planner.schema import Job

    p = _variant(tmp_path, "    --grad-reduce-in-bf16\n", f"    --grad-reduce-in-bf16\n    {PA}\n")
    cfg = load_trainer_config(p)
    assert cfg.job["bytes_per_param"] == {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 4.0}
    settings, _, warnings = resolve(Job(**cfg.job))
    assert settings.bpp.model_dump() == {"weights": 2.0, "gradients": 2.0, "master": 2.0, "optimizer": 4.0}
    assert any("16-bit remainders" in w for w in warnings)
    # the planner's own bf16-moments job: bf16 and delayed fp8 keep remainders, blockwise does not
    base = dict(model="llama3-8b", gpus=8, tp=1, dp=8, micro_batch=1, global_batch=8, seq_len=4096, sharding="zero1",
                bytes_per_param="bf16-moments")
    for prec, recipe, master in (("bf16", None, 2.0), ("fp8", "delayed", 2.0), ("fp8", "blockwise", 4.0)):
        job = Job(**base, precision=prec, **({"fp8_recipe": recipe} if recipe else {}), hardware="h100-sxm")
        assert resolve(job)[0].bpp.master == master, (prec, recipe)


def test_a_stack_without_bf16_moments_warns_and_its_export_refuses(cli, tmp_path):
    """torchtitan's optimizer states take the parameters' dtype (stack_db torchtitan
    runs.bytes_per_param: mixed16, pure-bf16): a job asking for bf16 moments is priced as asked
    with a warning, and exporting it is refused (exit 2)."""
    args = ["--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--bytes-per-param", "bf16-moments"]
    r = cli("explain", *args)
    assert r.exit_code in (0, 1), r.stderr
    assert "stack torchtitan keeps mixed16, pure-bf16" in r.stderr
    r = cli("export", *args, "--format", "torchtitan", "-o", str(tmp_path / "job.toml"))
    assert r.exit_code == 2 and "torchtitan keeps mixed16" in r.stderr


@pytest.mark.parametrize("flags, match", [
    ("--exp-avg-dtype bf16", "without --use-precision-aware-optimizer"),
    ("--use-precision-aware-optimizer --exp-avg-dtype bf16", "without --use-distributed-optimizer"),
    ("--exp-avg-dtype fp64", "--exp-avg-dtype: invalid choice: 'fp64'"),  # argparse (megatron_argparse.py)
])
def test_megatron_refuses_what_megatron_refuses(tmp_path, flags, match):
    p = _variant(tmp_path, "    --grad-reduce-in-bf16\n", f"    --grad-reduce-in-bf16\n    {flags}\n")
    if "without --use-distributed" in match:  # the script runs the distributed optimizer: take it out
        p.write_text(p.read_text().replace("    --use-distributed-optimizer\n", ""))
    with pytest.raises(PlannerError, match=match) as e:
        load_trainer_config(p)
    if "fp64" in flags:
        assert "fp32, fp16, bf16, fp8" in e.value.hint


def test_adam_step_bytes_per_parameter_by_hand():
    """read master, m, v, grad; write master, m, v, weight (+ read the weight without a full fp32 master)."""
    assert adam_bytes_per_param(bytes_per_param("megatron")[0]) == 2 * (4 + 8) + 2 + 4  # 30
    assert adam_bytes_per_param(bytes_per_param("mixed16")[0]) == 2 * (4 + 8) + 2 + 2  # 28
    assert adam_bytes_per_param(bytes_per_param("bf16-moments")[0]) == 2 * (4 + 4) + 2 + 4  # 22
    assert adam_bytes_per_param(bytes_per_param("pure-bf16")[0]) == 2 * (0 + 4) + 2 + 2 + 2  # 14


def test_mtp_module_params_and_flops_by_hand():
    """DeepSeek-V3's MTP module (sec. 2.2): projection 2h x h, three RMSNorms of h (enorm, hnorm and the norm before
    the shared head: Megatron's final_layernorm, torchtitan's mtp_norm), one MoE layer (the last layer's kind); 6N
    adds its active parameters and the output head again (V x h)."""
    m = load_model("deepseek-v3")
    assert m.mtp_layers == 0
    m1 = with_mtp(m, 1)
    assert m1.mtp_layers == 1 and with_mtp(m, 1) is m1 and with_mtp(m, None) is m
    h, V = 7168, 129280
    pc0, pc1 = count_params(m), count_params(m1)
    layer = pc0.layer_params[-1] if hasattr(pc0, "layer_params") else None  # noqa: F841 (kept for reading)
    one_moe_layer_total = (pc0.total - count_params(m.model_copy(update={"num_layers": 60})).total)
    assert pc1.mtp.total == pytest.approx(2 * h * h + 3 * h + one_moe_layer_total)
    one_moe_layer_active = (pc0.active - count_params(m.model_copy(update={"num_layers": 60})).active)
    assert _dense_params(m1) - _dense_params(m) == pytest.approx(2 * h * h + 3 * h + one_moe_layer_active + V * h)


def test_recipe_takes_bf16_moments_and_mtp_only_where_the_stack_runs_them():
    data, notes = recipe.apply(dict(model="deepseek-v3", gpus=64, hardware="h800-sxm", stack="megatron"))
    assert data["bytes_per_param"] == "bf16-moments" and data["mtp_layers"] == 1
    assert not any(n.startswith("not priced: bf16 AdamW") or n.startswith("not priced: multi-token") for n in notes)
    data, notes = recipe.apply(dict(model="deepseek-v3", gpus=64, hardware="h800-sxm", stack="torchtitan"))
    assert "bytes_per_param" not in data and "mtp_layers" not in data
    assert any(n.startswith("bytes_per_param bf16-moments not taken: stack torchtitan keeps mixed16, pure-bf16") for n in notes)
    assert any(n.startswith("mtp_layers 1 not taken") for n in notes)
    data, _ = recipe.apply(dict(model="deepseek-v3", gpus=64, bytes_per_param="megatron", mtp_layers=0))
    assert data["bytes_per_param"] == "megatron" and data["mtp_layers"] == 0


BARE = ["--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm", "--global-batch", "15360", "--seq-len", "4096"]
LAYOUT = ["--tp", "1", "--cp", "1", "--pp", "16", "--ep", "64", "--sharding", "zero1", "--recompute", "full"]


def test_export_writes_bf16_moments_and_mtp_and_reads_them_back(cli, tmp_path):
    """The recipe's bf16 moments and MTP module go out as Megatron's flags and come back as the
    same plan (fp8 blockwise: Megatron's fp32 main params, 14 B)."""
    out = tmp_path / "run.sh"
    r = cli("export", *BARE, *LAYOUT, "--format", "megatron", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    for flag in ("--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16",
                 "--mtp-num-layers 1", "--use-distributed-optimizer"):
        assert flag in text, flag
    assert "--main-grads-dtype" not in text
    r = cli("explain", str(out), "--hardware", "h800-sxm", "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert (plan["bytes_per_param"], plan["mtp_layers"], plan["fp8_recipe"]) == ("bf16-moments", 1, "blockwise")


def test_export_refuses_bf16_moments_without_the_distributed_optimizer():
    from planner.trainers.export import _megatron_state_flags

    plan = {"bytes_per_param": "bf16-moments", "precision": "fp8", "fp8_recipe": "blockwise"}
    assert _megatron_state_flags(plan, "megatron_fsdp_optim", []) == [
        ("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    for mode in ("ddp", "torch_fsdp2"):
        with pytest.raises(PlannerError, match="only with the distributed optimizer"):
            _megatron_state_flags(plan, mode, [])
    # bf16 training: the same flags (the remainders TE then keeps are the stack's pricing, plan._bytes_per_param)
    assert _megatron_state_flags({**plan, "precision": "bf16", "fp8_recipe": None}, "distributed_optimizer", []) == [
        ("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    with pytest.raises(PlannerError, match="fp32 master weights"):  # an fp16 master: not a preset this exporter writes
        _megatron_state_flags({**plan, "bytes_per_param": {"weights": 2, "gradients": 4, "master": 2, "optimizer": 4}},
                              "distributed_optimizer", [])


def test_mtp_costs_the_last_stage_its_module_state_and_time(cli, tmp_path):
    """DeepSeek's layout on the megatron stack (TP 1, PP 16, EP 64, ZeRO-1 DP 128): the MTP
    module lives on the last stage only. Its model state there, by hand (bf16-moments: 2 B
    weights, 4 B fp32 grads, 4 + 4 B master and moments sharded over DP 128 for the dense part
    and over the expert-data-parallel 2048 / (16 x 64) = 2 for the routed experts): dense
    335,779,072 parameters (2h x h projection 102,760,448 + three norms 21,504 + the MoE layer's
    attention, router, shared expert and norms), routed experts 11,274,289,152 / EP 64. Under PP Megatron's MTP stage
    also builds its own word embedding, a trainable copy of the first stage's (gpt_model.py @d98e8a64 l. 173-181,
    language_module.py l. 253-305; memory.py [me]): V h = 129,280 x 7,168 = 926,679,040 more dense parameters there
    (129,280 is a multiple of Megatron's 128 x tp: no padding). The router's score-correction bias (E = 256) is not
    among them: Megatron registers it as an fp32 buffer, moe/router.py @d98e8a64 TopKRouter.__init__ l. 180-198
    (register_buffer 'expert_bias', beside the 'local_tokens_per_expert' counter), no gradient and no optimizer state
    (layers/common.py [sb]); the two are priced as buffers, 2 x 4 B x 256 = 2,048 B of model_buffers. (This test's
    figure had counted the bias as a parameter: 256 x 2 B = 512 B of weights more than the planner, within its
    approx; the planner was right.)"""
    dense, experts = 335_778_816, 11_274_289_152 / 64
    copy = 129_280 * 7_168
    assert copy == 926_679_040
    out = {}
    for n in (0, 1):
        job = tmp_path / f"job{n}.yaml"
        job.write_text("model: deepseek-v3\ngpus: 2048\nhardware: h800-sxm\nglobal_batch: 15360\nseq_len: 4096\n"
                       "tp: 1\ncp: 1\npp: 16\ndp: 128\nep: 64\nsharding: zero1\nrecompute: full\nmicro_batch: 1\n"
                       f"mtp_layers: {n}\n")
        r = cli("explain", str(job), "--format", "json")
        assert r.exit_code == 0, r.stderr
        out[n] = json.loads(r.stdout)
    assert (out[0]["plan"]["mtp_layers"], out[1]["plan"]["mtp_layers"]) == (0, 1)
    st0, st1 = out[0]["memory"]["stages"], out[1]["memory"]["stages"]
    for stage in ("first", "middle"):
        assert st1[stage] == st0[stage]
    d = {k: st1["last"][k] - st0["last"][k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes")}
    assert d["weights_bytes"] == 2 * (dense + copy + experts) == 2_877_237_248
    assert d["gradients_bytes"] == 4 * (dense + copy + experts)
    assert d["optimizer_bytes"] == pytest.approx((4 + 4) * ((dense + copy) / 128 + experts / 2), rel=1e-12)
    # the projection 2h x h, three norms (enorm, hnorm, final_layernorm), and the MoE layer: MLA (q_a 7168 x 1536,
    # q_b 1536 x 128 x 192, kv_a 7168 x 576, kv_b 512 x 128 x 256, o 16384 x 7168: 187,105,280, and its latent
    # norms 1,536 + 512), the shared expert 3 x 7168 x 2048, the router 256 x 7168 and the layer's two norms
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 16384 * 7168
    assert mla == 187_105_280
    moe_layer = mla + 1536 + 512 + 3 * 7168 * 2048 + 256 * 7168 + 2 * 7168
    assert dense == 2 * 7168 * 7168 + 3 * 7168 + moe_layer
    # the score-correction bias and its token counter: fp32 buffers, not parameters (model_buffers, not weights; the
    # terms are the heaviest stage's, the last here)
    assert out[1]["memory"]["heaviest_stage"] == "last"
    assert out[1]["memory"]["terms"]["model_buffers"] - out[0]["memory"]["terms"]["model_buffers"] == 2 * 4 * 256
    assert st1["last"]["activations_bytes"] > st0["last"]["activations_bytes"]
    assert out[1]["throughput"]["tokens_per_s_per_gpu"] < out[0]["throughput"]["tokens_per_s_per_gpu"]


def test_bf16_moments_on_megatron_plan_only_the_distributed_optimizers_modes(cli):
    """Megatron's precision-aware optimizer raises without the distributed optimizer (optimizer/
    __init__.py @d98e8a64 l. 1057): with the recipe's bf16 moments a DDP job is refused naming
    why (exit 2), and fit ranks only modes that keep it (stack_db runs.low_precision_moments)."""
    r = cli("explain", *BARE, "--tp", "1", "--pp", "16", "--ep", "64", "--sharding", "none", "--recompute", "full")
    assert r.exit_code == 2
    assert "has no none sharding mode" in r.stderr and "bytes_per_param bf16-moments keeps Adam moments below fp32" in r.stderr
    r = cli("explain", *BARE, "--tp", "1", "--pp", "16", "--ep", "64", "--sharding", "none", "--recompute", "full",
            "--bytes-per-param", "megatron", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr  # plain fp32 Adam: DDP runs (fits or not)
    r = cli("fit", *BARE, "--top", "10", "--format", "json")
    assert r.exit_code == 0, r.stderr
    allowed = {"distributed_optimizer", "megatron_fsdp_optim", "megatron_fsdp_optim_grads",
               "megatron_fsdp_optim_grads_params", "megatron_fsdp_hsdp"}
    assert {row["plan"]["sharding_mode"] for row in json.loads(r.stdout)} <= allowed


def test_preset_names_are_one_list():
    """The bytes_per_param names a job, recipe, stack or record may give are the presets' names."""
    import typing

    from planner.schema import BYTES_PER_PARAM_PRESETS, BppPreset

    assert typing.get_args(BppPreset) == tuple(BYTES_PER_PARAM_PRESETS)


def test_mtp_layers_option_beats_the_recipe_and_fits_explain_line_repeats_it(cli):
    """--mtp-layers 0 replaces the recipe's 1 (no 'mtp_layers 1' assumed), and fit's
    'row 1 in full' explain line carries it, so that explain prices the same plan."""
    from conftest import fit_table_and_rows

    # one search: the table and the rows --format json prints, whose notes on stderr are the table run's (conftest)
    r, rows = fit_table_and_rows(cli, *BARE, "--mtp-layers", "0", "--top", "1")
    assert r.exit_code == 0, r.stderr
    assert rows[0]["plan"]["mtp_layers"] == 0 and "mtp_layers 1 (" not in r.stderr
    line = next(x for x in r.stdout.splitlines() if "row 1 in full" in x)
    assert "--mtp-layers 0" in line
    r = cli("fit", *BARE, "--top", "1")
    assert "--mtp-layers 1" in next(x for x in r.stdout.splitlines() if "row 1 in full" in x)
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--mtp-layers", "-1")
    assert r.exit_code == 2
