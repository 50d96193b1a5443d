"""Issue 24, "flags beat files" and "one vocabulary": the job fields a job YAML or trainer config
sets (schema.Job fp8_attention, fp16, moe_aux_loss_coeff, moe_z_loss_coeff,
moe_router_pre_softmax, fsdp_root_unit) are command-line options too, in explain, check,
budget, export and fit: each reaches the Job (explain's `plan`), prices as the job field does,
replaces a job file's value with a note, refuses a bad value (exit 2), and a fit row's
reproduce line (search.explain_args) carries it."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import assert_one_error
from planner.schema import Job
from planner.search import explain_args

DENSE = dict(model="llama3-8b", gpus=8)
MOE = dict(model="qwen3-30b-a3b", gpus=16, ep=8)
TT_FSDP = dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp")

# (option, field, value, the job it is given with, the file's other value)
CASES = [
    (["--fp8-attention"], "fp8_attention", True, {**DENSE, "precision": "fp8"}, False),
    (["--fp16"], "fp16", True, DENSE, False),
    (["--moe-aux-loss-coeff", "0.01"], "moe_aux_loss_coeff", 0.01, MOE, 0.001),
    (["--moe-z-loss-coeff", "0.001"], "moe_z_loss_coeff", 0.001, MOE, 0.01),
    (["--moe-router-pre-softmax"], "moe_router_pre_softmax", True, MOE, False),
    (["--fsdp-root-unit"], "fsdp_root_unit", True, TT_FSDP, False),
]
IDS = [c[1] for c in CASES]


def _args(job: dict) -> list[str]:
    return [a for k, v in job.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _explain(cli, *args):
    r = cli("explain", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("opt, field, value, job, other", CASES, ids=IDS)
def test_option_reaches_the_job_as_the_file_field_does(cli, tmp_path, opt, field, value, job, other):
    """The option's plan is the plan of a job file that sets the field: the plan field and every
    memory and time figure the same."""
    got, _ = _explain(cli, *_args(job), *opt)
    assert got["plan"][field] == value
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump({**job, field: value}))
    want, _ = _explain(cli, f)
    assert got["plan"] == want["plan"]
    assert got["memory"]["total_bytes"] == want["memory"]["total_bytes"]
    assert got["time"]["step_s"] == want["time"]["step_s"]


@pytest.mark.parametrize("opt, field, value, job, other", CASES, ids=IDS)
def test_option_replaces_the_job_files_value_with_a_note(cli, tmp_path, opt, field, value, job, other):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump({**job, field: other}))
    got, err = _explain(cli, f, *opt)
    assert got["plan"][field] == value
    assert f"note: {f}: {field}={value}: the command line replaces the file's {other}" in err
    same, err = _explain(cli, f)  # without the option: the file's value, no note
    assert same["plan"].get(field, False) == other and "replaces" not in err


@pytest.mark.parametrize("flag, field", [("--no-fp8-attention", "fp8_attention"), ("--no-fp16", "fp16"),
                                         ("--no-moe-router-pre-softmax", "moe_router_pre_softmax"),
                                         ("--no-fsdp-root-unit", "fsdp_root_unit")])
def test_the_no_flag_turns_the_files_field_off(cli, tmp_path, flag, field):
    job = next(c[3] for c in CASES if c[1] == field)
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump({**job, field: True}))
    got, err = _explain(cli, f, flag)
    assert got["plan"].get(field, False) is False  # explain shows fp16, fp8_attention, fsdp_root_unit only when on
    assert f"{field}=False: the command line replaces the file's True" in err


@pytest.mark.parametrize("job, field", [(DENSE, "fp16"), (MOE, "moe_permute_fusion")])
def test_a_trainer_configs_value_is_replaced_with_a_note(cli, tmp_path, job, field):
    """A Megatron script with the field's flag (the export of such a plan, read back with the field
    on) planned with the --no- option: the field off, the replacement named among the assumed
    (--fp16: bf16; --moe-permute-fusion: the unfused permutation)."""
    flag = "--" + field.replace("_", "-")
    e = cli("export", *_args(job), flag, "--format", "megatron")
    assert e.exit_code == 0, e.stderr
    sh = tmp_path / "train.sh"
    sh.write_text(e.stdout)
    assert _explain(cli, sh)[0]["plan"][field] is True
    got, err = _explain(cli, sh, "--no-" + flag[2:])
    assert got["plan"].get(field, False) is False  # explain shows fp16 only when on
    assert f"{field}=False: the command line replaces the file's True" in err


@pytest.mark.parametrize("opt, needle", [
    (["--moe-aux-loss-coeff", "-0.01"], "--moe-aux-loss-coeff"),
    (["--moe-z-loss-coeff", "-1"], "--moe-z-loss-coeff"),
    (["--moe-z-loss-coeff", "nan"], "--moe-z-loss-coeff"),
    (["--moe-aux-loss-coeff", "x"], "--moe-aux-loss-coeff"),
    (["--fp8-attention"], "fp8_attention"),  # bf16: Transformer Engine's fp8_dpa needs fp8 (plan._fp8_recipe_of)
])
def test_bad_values_exit_2(cli, opt, needle):
    assert_one_error(cli("explain", *_args(MOE), *opt), needle)


def test_aux_loss_with_sinkhorn_is_refused(cli):
    """Megatron-Core refuses an auxiliary loss with Sinkhorn balancing (plan.moe_router_settings)."""
    assert_one_error(cli("explain", *_args(MOE), "--moe-load-balancing", "sinkhorn", "--moe-aux-loss-coeff", "0.01"),
                     "sinkhorn")


@pytest.mark.parametrize("cmd", ["explain", "check", "budget", "export", "fit"])
def test_every_job_command_takes_the_options(cli, cmd):
    text = cli(cmd, "--help").stdout
    for name in ("--fp8-attention", "--no-fp8-attention", "--fp16", "--no-fp16", "--moe-aux-loss-coeff",
                 "--moe-z-loss-coeff", "--moe-router-pre-softmax", "--no-moe-router-pre-softmax", "--fsdp-root-unit",
                 "--no-fsdp-root-unit"):
        assert name in text, (cmd, name)


def test_check_and_export_apply_the_options(cli, tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(MOE))
    r = cli("check", f, "--moe-z-loss-coeff", "0.001", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    z, _ = _explain(cli, f, "--moe-z-loss-coeff", "0.001")
    plain, _ = _explain(cli, f)
    # the z-loss keeps the router's bf16 logits and their logsumexp (layers/moe.py [10]): more memory
    assert z["memory"]["total_bytes"] > plain["memory"]["total_bytes"]
    checked = json.loads(r.stdout)[0]
    assert checked["plan"]["moe_z_loss_coeff"] == 0.001
    assert checked["memory"]["total_bytes"] == z["memory"]["total_bytes"]
    e = cli("export", f, "--format", "megatron", "--fp16", "--moe-router-pre-softmax")
    assert e.exit_code == 0, e.stderr
    assert "--fp16" in e.stdout and "--moe-router-pre-softmax" in e.stdout


def test_fit_prices_every_row_with_the_options_and_the_row_reproduces(cli):
    """fit applies the options as the job fields (every candidate takes them) and the row's
    reproduce line carries each, so explain gives the same step time and memory."""
    base = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--tp", "2", "--pp", "1", "--top", "1",
            "--precision", "fp8", "--format", "json"]
    opts = ["--fp8-attention", "--fp16", "--moe-aux-loss-coeff", "0.01", "--moe-z-loss-coeff", "0.001",
            "--moe-router-pre-softmax"]
    r = cli("fit", *base, *opts)
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    p = row["plan"]
    assert (p["fp8_attention"], p["fp16"], p["moe_aux_loss_coeff"], p["moe_z_loss_coeff"],
            p["moe_router_pre_softmax"]) == (True, True, 0.01, 0.001, True)
    args = explain_args(Job(model="qwen3-30b-a3b", gpus=16), row)
    for o in ("--fp8-attention", "--fp16", "--moe-router-pre-softmax"):
        assert o in args
    assert args[args.index("--moe-aux-loss-coeff") + 1] == "0.01"
    assert args[args.index("--moe-z-loss-coeff") + 1] == "0.001"
    again, _ = _explain(cli, *args)
    assert again["time"]["step_s"] == row["time"]["step_s"]
    assert again["memory"]["total_bytes"] == row["memory"]["total_bytes"]


def test_fit_fsdp_root_unit_reproduces(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--sharding", "fsdp", "--tp", "1",
            "--pp", "1", "--top", "1", "--fsdp-root-unit", "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["plan"]["fsdp_root_unit"] is True
    args = explain_args(Job(model="llama3-8b", gpus=8), row)
    assert "--fsdp-root-unit" in args
    again, _ = _explain(cli, *args)
    assert again["memory"]["total_bytes"] == row["memory"]["total_bytes"]
    plain, _ = _explain(cli, *[a for a in args if a != "--fsdp-root-unit"])
    # the same plan without the root unit (its embedding and output layer kept unsharded: memory.py [tt10]) holds less
    assert row["memory"]["total_bytes"] > plain["memory"]["total_bytes"]


def test_fit_fp16_leaves_out_the_mode_that_refuses_it(cli):
    """Megatron's --use-torch-fsdp2 refuses --fp16 (stack_db runs.sharding job_settings): fit
    --fp16 pinned to that mode exits 2 naming the trainer's check."""
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", "--sharding", "torch_fsdp2", "--fp16"),
                     "torch_fsdp2", "fp16")


def test_a_fit_row_without_the_options_reproduces_without_them(cli):
    """A recipe's aux-loss coefficient (the default explain takes again) is not repeated."""
    r = cli("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--tp", "2", "--pp", "1", "--top", "1",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    args = explain_args(Job(model="qwen3-30b-a3b", gpus=16), json.loads(r.stdout)[0])
    for o in ("--fp8-attention", "--fp16", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-pre-softmax",
              "--fsdp-root-unit"):
        assert o not in args


@pytest.mark.parametrize("opt,field", [
    ("--moe-grouped-gemm", "moe_grouped_gemm"), ("--no-moe-grouped-gemm", "moe_grouped_gemm"),
    ("--moe-permute-fusion", "moe_permute_fusion"), ("--no-moe-permute-fusion", "moe_permute_fusion"),
    ("--moe-router-fusion", "moe_router_fusion"), ("--no-moe-router-fusion", "moe_router_fusion"),
])
@pytest.mark.parametrize("cmd", ["explain", "fit"])
def test_moe_kernel_switches_on_a_dense_model_exit_2(cli, cmd, opt, field):
    """The MoE kernel switches on a dense model (Llama 3 8B, no experts) are refused as --moe-dispatcher and
    --moe-router-padding are (plan.moe_dispatch_settings: '... set but llama3-8b has no experts'): before, they
    were taken and dropped (moe_fusion_settings runs for an MoE model only; grouped GEMM is priced only with
    experts, memory.py [12]), exit 0 with nothing said. Either spelling is refused: the user typed it
    (moe_grouped_gemm is Optional: None is not given, so --no-moe-grouped-gemm is no longer the default)."""
    assert_one_error(cli(cmd, "--model", "llama3-8b", "--gpus", "8", opt), f"{field} set but llama3-8b has no experts",
                     "remove them")


def test_moe_kernel_switches_on_an_moe_model_still_run(cli):
    """The same switches on Qwen3-30B-A3B (128 experts) still price: exit 0, the plan carries them."""
    r = cli("explain", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--moe-grouped-gemm",
            "--moe-permute-fusion", "--no-moe-router-fusion", "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert (plan["moe_grouped_gemm"], plan["moe_permute_fusion"], plan["moe_router_fusion"]) == (True, True, False)


def test_moe_grouped_gemm_not_given_is_the_stacks_default(cli, tmp_path):
    """moe_grouped_gemm is Optional (None: not given). Not given, an MoE job runs the stack's
    defaults.moe_grouped_gemm: megatron's false (stack_db/megatron.yaml, Megatron-LM @d98e8a64
    transformer_config.py l. 850 'moe_grouped_gemm: bool = False'), listed with the other defaults
    ('from the stack's defaults: ..., moe_grouped_gemm False'), and priced as --no-moe-grouped-gemm
    is: the same JSON, no grouped-GEMM workspaces (the plan dict carries the key only where true).
    A job file's `moe_grouped_gemm: false` on a dense model is refused as the option is, naming the file."""
    assert Job(**DENSE).moe_grouped_gemm is None
    r = cli("explain", *_args(MOE))
    assert r.exit_code == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "from the stack's defaults:" in x)
    assert "moe_grouped_gemm False" in line, line
    r = cli("explain", *_args(MOE), "--moe-grouped-gemm")
    assert r.exit_code == 0, r.stderr
    assert "moe_grouped_gemm" not in next(x for x in r.stdout.splitlines() if "from the stack's defaults:" in x)
    a, b = (cli("explain", *_args(MOE), *o, "--format", "json") for o in ((), ("--no-moe-grouped-gemm",)))
    assert a.exit_code == b.exit_code == 0, (a.stderr, b.stderr)
    assert json.loads(a.stdout) == json.loads(b.stdout)
    assert "moe_grouped_gemm" not in json.loads(a.stdout)["plan"]
    job = tmp_path / "dense.yaml"
    job.write_text(yaml.safe_dump({**DENSE, "moe_grouped_gemm": False}))
    assert_one_error(cli("explain", str(job)), "moe_grouped_gemm set but llama3-8b has no experts", "remove them")


def test_megatron_reader_lists_moe_kernel_flags_of_a_dense_script_as_ignored(tmp_path):
    """A Megatron launch without --num-experts builds no MoE layer (Megatron-LM @d98e8a64 takes the flags and
    builds dense MLPs): the reader lists --moe-grouped-gemm / --moe-permute-fusion / --moe-router-fusion as
    ignored (as it does --moe-router-padding-for-quantization) instead of setting job fields the plan refuses."""
    from planner.trainers import load_trainer_config
    from tests.test_imbalance import ARGS

    dense = ARGS.replace("--expert-model-parallel-size 8 --num-experts 8 --moe-router-topk 2 ", "").replace(
        " --moe-token-dispatcher-type alltoall", "")
    p = tmp_path / "run.args"
    p.write_text(dense + " --moe-grouped-gemm --moe-permute-fusion --moe-router-fusion\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=8)
    assert not {"moe_grouped_gemm", "moe_permute_fusion", "moe_router_fusion"} & set(cfg.job)
    for flag in ("--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-fusion"):
        assert any(x.startswith(flag) and "no --num-experts" in x for x in cfg.ignored), cfg.ignored
