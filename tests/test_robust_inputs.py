"""Issue 24: the second audit's reproducers on the inputs added since issue 12 (trainer
configs, MoE configs, validate's records, several files to `check`), one test each.

The contract is the README's ("Robustness"): bad input exits 2 with `error: ...` naming the
file (or option) and the field, `hint: ...`, and no traceback; nothing is guessed silently
(what the planner infers is listed as assumed); no input makes it hang (the work is bounded).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import assert_one_error, edited_json

DATA = Path(__file__).parent / "data"
TRAINERS = DATA / "trainer_configs"
TOML = TRAINERS / "llama3_8b.toml"
SH = TRAINERS / "train_llama3_8b.sh"
DS = TRAINERS / "ds_config_zero2.json"
INT64_OVER = "9223372036854775808"  # 2**63


def _variant(tmp_path, src: Path, old: str, new: str, name: str | None = None) -> Path:
    text = src.read_text()
    assert old in text, old
    p = tmp_path / (name or src.name)
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def assert_error(r, *needles):
    """Exit 2, an `error:` line (after any note:/warning: lines a trainer config prints) that
    names each needle, a hint, and no traceback."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert errors, r.stderr
    for n in needles:
        assert n in errors[0], (n, errors[0])
    assert "hint: " in r.stderr


# ------------------------------------------------------------ integers beyond int64
@pytest.mark.parametrize("option", ["--ranks", "--stride", "--job-gpus"])
def test_collective_counts_beyond_int64_exit_2(cli, option):
    args = ["collective", "--op", "all-reduce", "--size", "8MiB", "--ranks", "8"]
    args += [option, INT64_OVER]
    assert_one_error(cli(*args), option, "64-bit")


@pytest.mark.parametrize("option", ["--ranks", "--stride", "--job-gpus"])
def test_collective_counts_are_counts(cli, option):
    """Within int64 but beyond a count (2**31 - 1), or zero: refused like every other count."""
    for v in ("4611686018427387904", "0"):
        r = cli("collective", "--op", "all-reduce", "--size", "8MiB", "--ranks", "8", option, v)
        assert_one_error(r, option)


def test_explain_ep_beyond_int64_exits_2(cli):
    r = cli("explain", "--model", "mixtral-8x7b", "--gpus", "24", "--ep", "99999999999999999999")
    assert_one_error(r, "--ep", "64-bit")
    assert_one_error(cli("explain", "--model", "mixtral-8x7b", "--gpus", "24", "--ep", "9999999999"), "ep", "2147483647")


def test_fit_max_ep_0_exits_2_like_the_other_max_options(cli):
    """It exited 1 ("tp*cp*pp does not divide the GPU count"), a wrong reason."""
    for opt in ("--max-ep", "--max-tp"):
        assert_one_error(cli("fit", "--model", "mixtral-8x7b", "--gpus", "8", opt, "0"), opt)
    assert_one_error(cli("fit", "--model", "mixtral-8x7b", "--gpus", "8", "--max-ep", INT64_OVER), "--max-ep")


# ------------------------------------------------------------ torchtitan TOML
def _toml_sub(tmp_path, old, new):
    return _variant(tmp_path, TOML, old, new)


TOML_CASES = [  # (id, old, new, what the error names)
    ("training-5", "[job]", "training = 5\n[job]", "[training] must be a table"),
    ("flavor-list", 'flavor = "8B"', 'flavor = ["8B"]', "[model] flavor"),
    ("schedule-list", "pipeline_parallel_degree = 1",
     'pipeline_parallel_degree = 2\npipeline_parallel_schedule = ["1F1B"]', "pipeline_parallel_schedule"),
    ("converters-5", 'flavor = "8B"', 'flavor = "8B"\nconverters = 5', "[model] converters"),
    ("parallelism-scalar", "[job]", "parallelism = 3\n[job]", "[parallelism] must be a table"),
    ("layers-per-stage-0", "pipeline_parallel_degree = 1",
     "pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 0", "pipeline_parallel_layers_per_stage = 0"),
    ("microbatch-0", "pipeline_parallel_degree = 1",
     "pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 0", "pipeline_parallel_microbatch_size = 0"),
    ("local-batch-0", "local_batch_size = 1", "local_batch_size = 0", "local_batch_size = 0"),
    ("global-batch-0", "local_batch_size = 1", "local_batch_size = 1\nglobal_batch_size = 0", "global_batch_size = 0"),
    ("sac-superscript", 'selective_ac_option = "op"', 'selective_ac_option = "²"', "selective_ac_option '²'"),
    ("sac-5000-digits", 'selective_ac_option = "op"', 'selective_ac_option = "' + "9" * 5000 + '"', "selective_ac_option"),
    ("sac-5000-digit-int", 'selective_ac_option = "op"', "selective_ac_option = " + "9" * 5000, "invalid TOML"),
    ("components-5", "[job]", "[compile]\nenable = true\ncomponents = 5\n[job]", "[compile] components"),
    ("float8-scalar", "[float8]\n", "[float8_x]\n", "[float8] must be a table"),
    ("tp-int64", "tensor_parallel_degree = 1", "tensor_parallel_degree = 9223372036854775807", "tensor_parallel_degree"),
    ("ac-scalar", "[job]", "activation_checkpoint = 'full'\n[job]", "[activation_checkpoint] must be a table"),
]


@pytest.mark.parametrize("old,new,needle", [c[1:] for c in TOML_CASES], ids=[c[0] for c in TOML_CASES])
def test_torchtitan_wrong_types_sections_and_zeros_exit_2(cli, tmp_path, old, new, needle):
    if new == "[float8_x]\n":  # a scalar float8 in place of the table (its keys dropped: an unknown section is refused
        # before the scalar is looked at, readers2)
        p = _toml_sub(tmp_path, old, new)
        text = p.read_text()
        head, _, rest = text.partition("[float8_x]\n")
        rest = rest[rest.index("\n[") + 1:] if "\n[" in rest else ""
        p.write_text("float8 = 3\n" + head + rest)
    elif new.startswith(("training = 5", "parallelism = 3", "activation_checkpoint =")):
        section = new.split(" ")[0]
        p = _variant(tmp_path, TOML, f"[{section}]\n", f"[{section}_x]\n")  # the key replaces the section
        p.write_text(new.replace("[job]", "") + p.read_text())
    else:
        p = _toml_sub(tmp_path, old, new)
    r = cli("check", p, "--gpus", "8")
    assert_error(r, str(p), needle)
    assert len(r.stderr) < 2000  # a 5,000-digit value is not echoed


# ------------------------------------------------------------ Megatron scripts and argument files
ARGS_70B = ("--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
            "--group-query-attention --num-query-groups 8 --vocab-size 128256 --seq-length 8192 "
            "--micro-batch-size 1 --global-batch-size 512 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4")

SH_CASES = [  # (id, old, new, what the error names)
    ("octal-08", "TP_SIZE=2", "TP_SIZE=$(( 08 ))", "08: value too great for base"),
    ("fullwidth-arith", "TP_SIZE=2", "TP_SIZE=$(( ２ ))", "not bash arithmetic"),
    ("fullwidth-value", "TP_SIZE=2", "TP_SIZE=２", "--tensor-model-parallel-size '２' is not a whole number"),
    ("superscript-nproc", "GPUS_PER_NODE=8", "GPUS_PER_NODE=²", "torchrun --nproc_per_node '²'"),
    ("nproc-0", "GPUS_PER_NODE=8", "GPUS_PER_NODE=0", "torchrun --nproc_per_node '0'"),
    ("pow-9-9-9", "TP_SIZE=2", "TP_SIZE=$(( 9**9**9 ))", "beyond a 64-bit integer"),
    ("div-0", "TP_SIZE=2", "TP_SIZE=$(( 2 / (1 - 1) ))", "division by 0"),
    ("neg-exponent", "TP_SIZE=2", "TP_SIZE=$(( 2 ** -1 ))", "exponent less than 0"),
    ("tp-0", "TP_SIZE=2", "TP_SIZE=0", "--tensor-model-parallel-size '0' is not a whole number from 1"),
    ("train-iters-401-digits", "--train-iters 1000", "--train-iters 1" + "0" * 400, "--train-iters a 401-digit number"),
]


@pytest.mark.parametrize("old,new,needle", [c[1:] for c in SH_CASES], ids=[c[0] for c in SH_CASES])
def test_megatron_script_bad_numbers_exit_2(cli, tmp_path, old, new, needle):
    r = cli("check", _variant(tmp_path, SH, old, new), "--gpus", "8")
    assert_error(r, needle)
    assert len(r.stderr) < 4000  # a 401-digit value is not echoed


def test_megatron_script_arithmetic_is_bash_arithmetic(tmp_path):
    """$(( )) is read by planner/trainers/shell_arith.py, never eval: bash's precedence (unary
    minus above **: -2**2 is 4), octal 010 = 8, hex, C division; an expression it does not read
    (a shift) stays unexpanded, so a modelled flag set from it is an error naming the line, the flag and the whole
    expression."""
    from planner.errors import PlannerError
    from planner.trainers import load_trainer_config
    from planner.trainers.shell_arith import ShellArithError, evaluate

    assert [evaluate(e) for e in ("-2**2", "2**3**2", "010", "0x10", "7/-2", "-7%3", "(1+1)*4")] == [4, 512, 8, 16, -3, -1, 8]
    assert evaluate("1<<2") is None and evaluate("A*2") is None
    for e in ("08", "9**9**9", "1/0", "2**-1", "２", "9223372036854775807+1", "(" * 100 + "1" + ")" * 100):
        with pytest.raises(ShellArithError):
            evaluate(e)
    cfg = load_trainer_config(_variant(tmp_path, SH, "TP_SIZE=2", "TWO=1\nTP_SIZE=$(( (TWO + 1) * 4 / 3 ))"))
    assert cfg.job["tp"] == 2
    # the whole expression, its line (TP_SIZE= is line 17 of train_llama3_8b.sh) and the flag (issue 22 (d))
    with pytest.raises(PlannerError, match=r"shift\.sh: line 17: --tensor-model-parallel-size '\$\(\( 1 << 1 \)\)': bash "
                                           "arithmetic the reader does not run"):
        load_trainer_config(_variant(tmp_path, SH, "TP_SIZE=2", "TP_SIZE=$(( 1 << 1 ))", "shift.sh"))


@pytest.mark.parametrize("kind", ["array", "array-append", "string"])
def test_megatron_script_doubling_24_levels_is_bounded(cli, tmp_path, kind):
    """An array (or a variable) that doubles 24 times would be 16M words: refused at the bound
    (megatron.MAX_ARRAY / MAX_EXPANSION), not expanded for minutes."""
    step = {"array": "A=(${A[@]} ${A[@]})", "array-append": 'A+=("${A[@]}")', "string": 'A="$A$A"'}[kind]
    start = "A=(xy)" if kind != "string" else "A=xy"
    p = tmp_path / "double.sh"
    p.write_text("\n".join([start] + [step] * 24) + "\n" + SH.read_text(), encoding="utf-8")
    assert_error(cli("check", p, "--gpus", "8"), str(p), "A" if kind != "string" else "expand to over")


ARGS_CASES = [  # (id, extra flags, what the error names)
    ("lpv-0", "--num-layers-per-virtual-pipeline-stage 0", "--num-layers-per-virtual-pipeline-stage '0'"),
    ("vps-0", "--num-virtual-stages-per-pipeline-rank 0", "--num-virtual-stages-per-pipeline-rank '0'"),
    ("vps-neg", "--num-virtual-stages-per-pipeline-rank -2", "--num-virtual-stages-per-pipeline-rank '-2'"),
    ("tp-0", "--tensor-model-parallel-size 0", "--tensor-model-parallel-size '0'"),
    ("train-iters-401", "--train-iters 1" + "0" * 400, "--train-iters a 401-digit number"),
    ("dropout-nan", "--attention-dropout nan", "--attention-dropout 'nan' is not a finite number"),
]


@pytest.mark.parametrize("extra,needle", [c[1:] for c in ARGS_CASES], ids=[c[0] for c in ARGS_CASES])
def test_megatron_argument_file_bad_counts_exit_2(cli, tmp_path, extra, needle):
    """`--num-virtual-stages-per-pipeline-rank 0` (or -2) was read as vpp 1; 0 layers per
    virtual stage and tp 0 divided by zero; 401 digits of --train-iters overflowed a float."""
    p = tmp_path / "run.args"
    p.write_text(ARGS_70B.replace("--tensor-model-parallel-size 8 ", "") + " " + extra + "\n", encoding="utf-8")
    assert_error(cli("check", p, "--gpus", "256"), str(p), needle)


# ------------------------------------------------------------ DeepSpeed JSON
def _ds(tmp_path, edit) -> Path:
    return edited_json(DS, tmp_path / "ds.json", edit)


def test_deepspeed_stage_list_exits_2(cli, tmp_path):
    p = _ds(tmp_path, lambda d: d["zero_optimization"].update(stage=[2]))
    assert_error(cli("check", p, "--model", "llama3-8b", "--gpus", "8"), str(p), "zero_optimization.stage = [2]")


@pytest.mark.parametrize("config", [DS, TOML, SH])
def test_gpus_0_with_a_trainer_config_exits_2(cli, config):
    """train_batch_size / --gpus 0 divided by zero (DeepSpeed); every format refuses it first."""
    assert_error(cli("check", config, "--model", "llama3-8b", "--gpus", "0"), "--gpus 0 is not a GPU count")


def test_deepspeed_enabled_auto_means_unset(tmp_path):
    """Hugging Face's template sets "enabled": "auto" in both bf16 and fp16 (filled from the
    TrainingArguments at launch): unset, not "both set"; priced as bf16 and listed as assumed."""
    from planner.trainers import load_trainer_config

    def edit(d):
        d["bf16"] = {"enabled": "auto"}
        d["fp16"] = {"enabled": "auto", "loss_scale": 0}
        d["zero_optimization"]["overlap_comm"] = "auto"

    cfg = load_trainer_config(_ds(tmp_path, edit), model="llama3-8b", gpus=8)
    assert cfg.job["precision"] == "bf16" and cfg.job["dp_comm_overlap"] is False
    assert any(a.startswith('precision=bf16: bf16.enabled and fp16.enabled "auto"') for a in cfg.assumed), cfg.assumed
    assert any(a.startswith('dp_comm_overlap=false: zero_optimization.overlap_comm "auto"') for a in cfg.assumed)


@pytest.mark.parametrize("sec,key,value,needle", [
    # (bf16.enabled "yes" / "false" is on, as DeepSpeed's untyped `if` reads a non-empty string; overlap_comm "false"
    # off, as its pydantic model reads it: tests/test_reader_types.py)
    (None, "train_batch_size", "64", 'train_batch_size = "64" is not a whole number from 1'),
    ("zero_optimization", "overlap_comm", "maybe", "zero_optimization.overlap_comm = 'maybe'"),
    (None, "train_batch_size", 10**400, "train_batch_size = a 401-digit number"),
    (None, "bf16", 5, "bf16 = 5 must be an object"),
])
def test_deepspeed_wrong_types_exit_2(cli, tmp_path, sec, key, value, needle):
    """What DeepSpeed refuses at start-up: overlap_comm "maybe" (pydantic), a string batch size (TypeError in
    _batch_assertion), bf16 not an object; a 401-digit batch passed to the model."""
    p = _ds(tmp_path, lambda d: (d[sec] if sec else d).update({key: value}))
    r = cli("check", p, "--model", "llama3-8b", "--gpus", "8")
    assert_error(r, str(p), needle)
    assert len(r.stderr) < 2000


# ------------------------------------------------------------ file names over 255 bytes
LONG = "a" * 300  # over NAME_MAX (255 bytes): os.stat raises ENAMETOOLONG, not FileNotFoundError


@pytest.mark.parametrize("args", [
    ("explain", f"{LONG}.toml"),
    ("explain", "--model", f"{LONG}.yaml", "--gpus", "8"),
    ("check", f"{LONG}.toml", "--gpus", "8"),
    ("check", f"{LONG}.yaml"),
], ids=["explain-config", "explain-model", "check-toml", "check-yaml"])
def test_file_name_over_255_bytes_exits_2(cli, tmp_path, args):
    r = cli(*[str(tmp_path / a) if a.startswith("aaa") else a for a in args])
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr and r.exception is None or isinstance(r.exception, SystemExit)
    assert "error: " in r.stderr and "hint: " in r.stderr
    assert "over the 255" in r.stderr or "does not exist" in r.stderr or "no such" in r.stderr, r.stderr


def test_calibrate_run_output_name_over_255_bytes_exits_2_before_the_fit(cli, tmp_path):
    logs = DATA / "training_logs"
    out = tmp_path / f"{LONG}.yaml"
    r = cli("calibrate", "run", logs / "torchtitan_llama3_8b_8xh100.log", "--job",
            logs / "torchtitan_llama3_8b_8xh100.job.yaml", "-o", out)
    assert_error(r, "a file name of 305 bytes", "over the 255 a file system takes")
    r = cli("calibrate", "run", tmp_path / f"{LONG}.log", "--job", logs / "torchtitan_llama3_8b_8xh100.job.yaml",
            "-o", tmp_path / "p.yaml")
    assert_error(r, "a file name of 304 bytes")


# ------------------------------------------------------------ check: one bad file in a batch
def test_check_batch_one_bad_file_keeps_the_others_verdicts(cli, tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("model: llama3-8b\ngpus: 8\ntp: 2\n", encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text("training = 5\n", encoding="utf-8")
    long = tmp_path / f"{LONG}.yaml"
    r = cli("check", ok, bad, long, "--format", "json")
    assert r.exit_code == 2, r.stderr
    rows = {Path(x["file"]).name[:10]: x for x in json.loads(r.stdout)}
    assert rows["ok.yaml"]["verdict"] in ("pass", "fail") and rows["ok.yaml"]["memory"]
    assert rows["bad.toml"]["verdict"] == "error" and "[training] must be a table" in rows["bad.toml"]["error"]
    assert rows["aaaaaaaaaa"]["verdict"] == "error" and "over the 255" in rows["aaaaaaaaaa"]["error"]
    assert "Traceback" not in r.stderr


def test_check_batch_a_planner_bug_on_one_file_still_prints_the_others(cli, tmp_path, monkeypatch):
    """A bug (not bad input) on one file: the other files' verdicts are on stdout first; the
    bug is raised after (reported, not hidden). The command imports check_job from planner.check when it runs
    (planner.cli.check defers its imports so that `check --help` loads no cost model), so the bug goes there."""
    import planner.check as cc

    real = cc.check_job

    def buggy(job, where, gates, trainer, *args, **kwargs):
        if "boom" in str(where):
            raise TypeError("a bug")
        return real(job, where, gates, trainer, *args, **kwargs)

    monkeypatch.setattr(cc, "check_job", buggy)
    from typer.testing import CliRunner

    from planner.cli import app

    ok, boom = tmp_path / "ok.yaml", tmp_path / "boom.yaml"
    for p in (ok, boom):
        p.write_text("model: llama3-8b\ngpus: 8\ntp: 2\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["check", str(boom), str(ok), "--format", "json"])
    assert isinstance(r.exception, TypeError)
    rows = json.loads(r.stdout)
    assert [x["verdict"] in ("pass", "fail") for x in rows] == [False, True] and "internal error: TypeError" in rows[0]["error"]


# ------------------------------------------------------------ calibrate run: logs and records
LOGS = DATA / "training_logs"
TT_LOG, TT_JOB = LOGS / "torchtitan_llama3_8b_8xh100.log", LOGS / "torchtitan_llama3_8b_8xh100.job.yaml"
MG_LOG, MG_JOB = LOGS / "megatron_llama3_8b_16xh100.log", LOGS / "megatron_llama3_8b_16xh100.job.yaml"


def _log(tmp_path, src: Path, edit) -> Path:
    p = tmp_path / src.name
    p.write_text(edit(src.read_text()), encoding="utf-8")
    return p


LOG_CASES = [  # (id, log, job, edit, what the error names)
    ("tt-memory-all-0", TT_LOG, TT_JOB, lambda t: __import__("re").sub(r"memory: [0-9.]+GiB", "memory: 0.00GiB", t),
     ":11: field `memory`: 0 GiB is not a peak reserved memory"),
    ("mg-memory-all-0", MG_LOG, MG_JOB,
     lambda t: __import__("re").sub(r"max (allocated|reserved): [0-9.]+", r"max \1: 0", t), ":16: field `max allocated`: 0 MB"),
    ("tps-1e999", TT_LOG, TT_JOB, lambda t: t.replace("tps: 6,512", "tps: 1e999"), ":13: field `tps`: '1e999' is not a finite"),
    ("tps-nan", TT_LOG, TT_JOB, lambda t: t.replace("tps: 6,512", "tps: nan"), "field `tps`"),
    ("all-tps-1e30", TT_LOG, TT_JOB, lambda t: __import__("re").sub(r"tps: [0-9,]+", "tps: 1e30", t),
     "would run the GPUs at"),
    ("mesh-nan", TT_LOG, TT_JOB, lambda t: t.replace("['dp_shard'], [8]", "['dp_shard'], [nan]"),
     ":2: field `device mesh`: 'nan' is not a count"),
    ("world-400-digits", MG_LOG, MG_JOB, lambda t: t.replace("using world size: 16", "using world size: 1" + "0" * 400),
     ":1: field `world size`: a 401-character value is not a count"),
    ("tt-cut-mid-number", TT_LOG, TT_JOB, lambda t: t[:t.index("tps: 6,451") + len("tps: 6")],
     ":16: field `mfu` missing: the metrics line is cut off"),
    ("mg-cut-mid-number", MG_LOG, MG_JOB, lambda t: t[:t.rindex("(ms): ") + len("(ms): 81")],
     "field `elapsed time per iteration (ms)`"),
    ("mg-memory-cut-at-eof", MG_LOG, MG_JOB,
     lambda t: "\n".join(ln for ln in t.splitlines() if "memory (MB)" not in ln) + "\n" +
     next(ln for ln in t.splitlines() if "memory (MB)" in ln)[:-3], "the log ends mid-line"),
]


@pytest.mark.parametrize("src,job,edit,needle", [c[1:] for c in LOG_CASES], ids=[c[0] for c in LOG_CASES])
def test_calibrate_run_bad_logs_exit_2(cli, tmp_path, src, job, edit, needle):
    p = _log(tmp_path, src, edit)
    out = tmp_path / "p.yaml"
    r = cli("calibrate", "run", p, "--job", job, "-o", out)
    assert_error(r, str(p), needle)
    assert len(r.stderr) < 4000 and not out.exists()


def _record(tmp_path, **fields) -> Path:
    recs = yaml.safe_load((DATA / "published_runs.yaml").read_text())
    rec = next(r for r in recs if r["id"] == "narayanan2021-t1-1.7B")
    rec.update(fields)
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([rec]), encoding="utf-8")
    return p


@pytest.mark.parametrize("fields,needle", [
    ({"tokens_per_sec_per_gpu": 1e308}, "field `tokens_per_sec_per_gpu`: 1e+308 tokens/s per GPU"),
    ({"tokens_per_sec_per_gpu": 1e9}, "would run the GPUs at"),
    ({"memory_per_gpu_gib": 1e300}, "field `memory_per_gpu_gib`: 1e+300 GiB is not possible on a100-sxm-80gb (79.25 GiB"),
    ({"memory_per_gpu_gib": 81.0}, "field `memory_per_gpu_gib`: 81 GiB is not possible"),
], ids=["tps-1e308", "tps-1e9", "memory-1e300", "memory-over-hbm"])
def test_calibrate_run_impossible_records_exit_2(cli, tmp_path, fields, needle):
    """Figures the hardware cannot produce (HFU above 1 at the published tokens/s; a peak memory
    above the GPU's HBM) are errors naming the record and field, not points to fit (the fit
    began outside its bounds: "Initial guess is outside of provided bounds")."""
    p = _record(tmp_path, **fields)
    r = cli("calibrate", "run", p, "-o", tmp_path / "p.yaml")
    assert_error(r, "record 'narayanan2021-t1-1.7B'", needle)


# ------------------------------------------------------------ calibrate gemm: rows above the peak
@pytest.mark.parametrize("hardware,needle", [
    (("--hardware", "h100-sxm"), "bf16_TFLOPS 989 of hardware h100-sxm (506% of peak)"),
    ((), "no --hardware: the fastest catalog GPU's peak"),
])
def test_calibrate_gemm_refuses_a_row_above_the_peak(cli, tmp_path, hardware, needle):
    """5000 TFLOP/s bf16 is 5.06x the H100 SXM's dense 989 (hardware_db): refused when the
    profile is written, not first by `explain --calibration`; no file is written."""
    g = tmp_path / "g.csv"
    g.write_text("gpu,dtype,M,N,K,batch,tflops\nH100 SXM,bf16,8192,8192,8192,1,5000\n", encoding="utf-8")
    out = tmp_path / "p.yaml"
    r = cli("calibrate", "gemm", "--from", g, *hardware, "-o", out)
    assert_error(r, str(g), "(8192x8192x8192 bf16): tflops 5000 is above the dense peak", needle)
    assert not out.exists()
    g.write_text("gpu,dtype,M,N,K,batch,tflops\nH100 SXM,bf16,8192,8192,8192,1,750\n", encoding="utf-8")
    assert cli("calibrate", "gemm", "--from", g, *hardware, "-o", out).exit_code == 0


# ------------------------------------------------------------ Hugging Face configs
def test_qwen3_moe_config_without_moe_intermediate_size_is_listed_as_assumed(cli, tmp_path):
    """Never intermediate_size silently (233B parameters instead of 30.5B): the class default
    768 (Qwen3MoeConfig), listed as assumed; a model type without a class table says that the
    experts take intermediate_size (tests/test_layer_zoo.py)."""
    from test_moe import QWEN3_MOE_HF

    p = tmp_path / "config.json"
    p.write_text(json.dumps({k: v for k, v in QWEN3_MOE_HF.items() if k != "moe_intermediate_size"}), encoding="utf-8")
    r = cli("explain", "--model", p, "--gpus", "64", "--ep", "8", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    d = json.loads(r.stdout)
    assert "moe_intermediate_size absent: transformers' Qwen3MoeConfig default 768" in d["assumed"]
    assert 30e9 < d["params"]["total"] < 31e9


def test_hf_max_position_embeddings_is_not_the_training_length(cli, tmp_path):
    """DeepSeek-V3's config says 163,840 positions; it pre-trained at 4K (plan.HF_DEFAULT_SEQ).
    The default batch of 16M tokens was refused as not a whole number of 163,840-token
    sequences; now the plan trains 4,096-token sequences, listed as assumed; --seq-len wins."""
    from test_moe import DEEPSEEK_V3_HF

    p = tmp_path / "config.json"
    p.write_text(json.dumps(DEEPSEEK_V3_HF), encoding="utf-8")
    args = ("explain", "--model", p, "--gpus", "1024", "--pp", "16", "--ep", "64", "--format", "json")
    r = cli(*args)
    assert r.exit_code in (0, 1), r.stderr
    d = json.loads(r.stdout)
    assert d["plan"]["seq_len"] == 4096
    assert any(a.startswith("seq_len=4,096: a Hugging Face config's default training length") and "163,840" in a
               for a in d["assumed"])
    d2 = json.loads(cli(*args, "--seq-len", "8192").stdout)
    assert d2["plan"]["seq_len"] == 8192 and not any(a.startswith("seq_len=") for a in d2["assumed"])


# ------------------------------------------------------------ validate: free text, incomplete records, splits
def _runs(tmp_path, *edits, name="runs.yaml") -> Path:
    recs = yaml.safe_load((DATA / "published_runs.yaml").read_text())
    base = next(r for r in recs if r["id"] == "narayanan2021-t1-39.1B")
    out = []
    for i, e in enumerate(edits):
        r = dict(base, id=f"r{i}")
        r.update(e)
        out.append({k: v for k, v in r.items() if v is not _DROP})
    p = tmp_path / name
    p.write_text(yaml.safe_dump(out, sort_keys=False), encoding="utf-8")
    return p


_DROP = object()


def test_validate_prices_the_explicit_fields_not_the_text(cli, tmp_path):
    """Rules 4, 6, 7 (2026-12-07 audit4): recompute, sharding and precision are the record's explicit
    fields; the source's words (*_text) are not read, whatever they say. Narayanan's 39.1B record
    (A100, PTD-P without ZeRO, full recompute, 16-bit) with texts that name FSDP, no recompute and
    fp8 MXFP8: priced as its fields say, and with other fields as those say."""
    texts = {"zero_fsdp_mode_text": "FSDP FULL_SHARD (ZeRO-3-like)", "activation_recompute_text": "none",
             "precision_text": "fp8 MXFP8 (FP8-MX)"}
    p = _runs(tmp_path, dict(texts), dict(texts, sharding="zero1", recompute="selective"))
    r = cli("validate", p, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    plans = {i: (x["plan"]["sharding"], x["plan"]["recompute"], x["plan"]["precision"]) for i, x in rows.items()}
    assert plans == {"r0": ("none", "full", "bf16"), "r1": ("zero1", "selective", "bf16")}
    assert rows["r0"]["predicted_memory_gib"] != rows["r1"]["predicted_memory_gib"]


def test_validate_not_stated_sharding_is_not_fsdp(cli, tmp_path):
    """"not stated (... no FSDP column ...)" was priced as FSDP (a word inside the comment); a record
    without `sharding:` is plain data parallel, listed as assumed with the source's words."""
    p = _runs(tmp_path, {"sharding": _DROP,
                         "zero_fsdp_mode_text": "not stated (Megatron-Bridge table: no FSDP column; recipes default to DDP "
                                                "+ distributed optimizer)"})
    r = cli("validate", p, "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["runs"][0]
    assert row["plan"]["sharding"] == "none"
    assert any(a.startswith("sharding=none ('not stated") for a in row["assumed"]), row["assumed"]


@pytest.mark.parametrize("field,value,valid", [
    ("precision", "int8", "'bf16', 'fp8' or 'nvfp4'"),
    ("precision", "fp8 (Transformer Engine)", "'bf16', 'fp8' or 'nvfp4'"),
    ("sharding", "zero3", "'none', 'zero1', 'zero2', 'fsdp' or 'hsdp'"),
    ("recompute", "sometimes", "'none', 'selective' or 'full'"),
])
def test_validate_unknown_value_is_an_error_or_skipped_with_lenient(cli, tmp_path, field, value, valid):
    """A value outside the field's list (precision int8: not a precision the planner models; fp8 with
    its words: the words go in precision_text) is an error naming the file, the record, the field and
    the valid values, exit 2; --lenient skips the record with that reason, the others are priced."""
    p = _runs(tmp_path, {}, {field: value})
    assert_error(cli("validate", p), str(p), "record 1 (id 'r1')", f"field `{field}`", valid)
    r = cli("validate", p, "--lenient", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    assert rows["r0"]["skipped"] is None and rows["r0"]["error"] is not None
    assert rows["r1"]["skipped"].startswith(f"field `{field}`: Input should be {valid}")


@pytest.mark.parametrize("old,new", [("activation_recompute", "recompute"), ("zero_fsdp_mode", "sharding")])
def test_validate_retired_text_key_names_the_explicit_field(cli, tmp_path, old, new):
    """A record in the pre-audit4 spelling (`activation_recompute: full`) is refused, not read as
    unstated: the hint names the explicit field, its values and the *_text key for the words."""
    p = _runs(tmp_path, {old: "full"})
    r = cli("validate", p)
    assert_error(r, "record 0 (id 'r0')", f"field `{old}`")
    assert f"give `{new}:`" in r.stderr and f"{old}_text" in r.stderr


def test_validate_incomplete_records_are_skipped_with_a_reason(cli, tmp_path):
    """A record without num_layers (or gpu_type) is a skipped row with the reason, not the end of
    the file; a wrong type is still an error (or, with --lenient, skipped too)."""
    p = _runs(tmp_path, {"num_layers": _DROP}, {}, {"gpu_type": _DROP, "id": "no-gpu"})
    r = cli("validate", p, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    assert rows["r0"]["skipped"] == "incomplete record: field `num_layers`: Field required"
    assert rows["no-gpu"]["skipped"].startswith("incomplete record: field `gpu_type`")
    assert rows["r1"]["skipped"] is None and rows["r1"]["error"] is not None
    bad = _runs(tmp_path, {"tp": "eight"}, {}, name="bad.yaml")
    assert_error(cli("validate", bad), "record 0", "field `tp`")
    r = cli("validate", bad, "--lenient", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["runs"][0]["skipped"].startswith("field `tp`")


def test_validate_infers_megatrons_embedding_and_loss_split(tmp_path):
    """94 layers on pp 8 x vpp 2 = 16 chunks: Megatron-Core refuses it unless the embedding and
    the loss count as layers of the split (96 = 16 x 6); inferred and listed as assumed."""
    from planner.validate import load_runs, validate_runs

    recs = yaml.safe_load((DATA / "published_runs_moe.yaml").read_text())
    rec = next(r for r in recs if r["id"] == "megatron-bridge-25.11-dgx-b200-qwen3-235b-a22b")
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([rec]), encoding="utf-8")
    row = validate_runs(load_runs(p), DATA)[0]
    assert row.plan["account_for_embedding_in_pipeline_split"] and row.plan["account_for_loss_in_pipeline_split"]
    assert any(a.startswith("account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split=true (94 layers do not divide into pp 8 x vpp 2")
               for a in row.assumed), row.assumed
    assert not any("do not split evenly" in w for w in row.warnings), row.warnings


@pytest.mark.parametrize("extra,needle", [
    ('--pipeline-model-parallel-layout "Et*99999999999|tL"', "repeats past 200,000 entries"),
    # the schedule is read whole since it is priced (planner/batch_ramp.py): each entry a number with an optional
    # K/M/B/T suffix, as Megatron parses it; a 401-digit or fullwidth batch is refused naming the entry
    ('--step-batch-size-schedule "0:16 2B:1' + "0" * 400 + '"', "--step-batch-size-schedule entry '2B:1000"),
    ('--step-batch-size-schedule "0:16 2B:３２"', "--step-batch-size-schedule entry '2B:３２': not a number"),
], ids=["layout-repeat", "schedule-401-digits", "schedule-fullwidth"])
def test_megatron_layout_and_schedule_are_bounded(cli, tmp_path, extra, needle):
    """A layout repeat of 10**11 layers was expanded in memory; a schedule's batch was int()ed."""
    p = tmp_path / "run.args"
    p.write_text(ARGS_70B.replace("--global-batch-size 512 ", "") + " " + extra + "\n", encoding="utf-8")
    assert_error(cli("check", p, "--gpus", "256"), str(p), needle)


@pytest.mark.parametrize("fields,needle", [
    ({"tokens_per_sec_per_gpu": 1e308}, "field `tokens_per_sec_per_gpu`: 1e+308 tokens/s per GPU would run the GPUs at"),
    ({"memory_per_gpu_gib": 1e300}, "field `memory_per_gpu_gib`: 1e+300 GiB is more than the 79.25 GiB of HBM"),
], ids=["tps-1e308", "memory-1e300"])
def test_validate_impossible_published_figures(cli, tmp_path, fields, needle):
    """A published figure the hardware cannot produce was compared (-100% error); now an error
    naming the record and field, or with --lenient a skipped row."""
    p = _runs(tmp_path, {}, fields)
    assert_error(cli("validate", p), "record 'r1'", needle)
    r = cli("validate", p, "--lenient", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["runs"][1]["skipped"].startswith(needle)


# ------------------------------------------------------------------ the 10,000-run fuzz pass's reproducers
FUZZ = DATA / "fuzz_issue24"


@pytest.mark.parametrize("name, args", [
    ("torchtitan-0-2.toml", ("explain", "--gpus", "8")),
    ("torchtitan-1-8.toml", ("explain", "--gpus", "8")),
    ("torchtitan-2-90.toml", ("explain", "--gpus", "8")),
    ("torchtitan-2-16.toml", ("explain", "--gpus", "8")),
    ("torchtitan-1-5.toml", ("check", "--gpus", "64", "--format", "json")),
    ("torchtitan-0-17.toml", ("check", "--gpus", "64", "--format", "json")),
    ("torchtitan-0-23.toml", ("check", "--gpus", "64", "--format", "json")),
    ("torchtitan-0-13.toml", ("check", "--gpus", "64", "--format", "json")),
])
def test_fuzz_pass_torchtitan_reproducers_exit_2(cli, name, args):
    """Each input the fuzz pass found raising a traceback (tests/data/fuzz_issue24/README.md):
    a section that is not a table, an empty flavor list, an array nested 1,200 deep."""
    r = cli(args[0], str(FUZZ / name), *args[1:])
    assert_error(r, str(FUZZ / name))


def test_fuzz_pass_bloom_without_num_layers_exits_2(cli):
    """BLOOM's tr11 script without --num-layers (the seed-49 pass over the megatron-deepspeed kind): the pipeline
    split check of --pp-partition-method 'type:transformer|embedding' added 2 to None; now the model reader's error."""
    f = FUZZ / "megatron-deepspeed-1-13.sh"
    r = cli("check", str(f), "--format", "json", "--gpus", "8", "--hardware", "h100-sxm")
    assert_error(r, "--num-layers needed")


def test_fuzz_pass_run_record_reproducer_exits_2(cli, tmp_path):
    """The mutated run record (1e308 tokens/s) that reached scipy's bounds check."""
    r = cli("calibrate", "run", str(FUZZ / "run-records-3-83.yaml"), "-o", str(tmp_path / "p.yaml"), "--format", "json")
    assert_error(r, "tokens_per_sec_per_gpu")


@pytest.mark.parametrize("args", [
    ("explain", "--model", str(FUZZ / "hf-config-9-48.json"), "--gpus", "8"),  # num_hidden_layers 96,000,000
    ("explain", "--model", str(FUZZ / "model-7-18.yaml"), "--gpus", "8"),  # num_layers 2^31 - 1
    ("explain", "--model", str(FUZZ / "model-5-4.yaml"), "--gpus", "8"),  # GPT-3's shape, num_layers 2^31 - 1
])
def test_fuzz_pass_huge_layer_counts_are_priced(cli, args):
    """The second 10,000-run pass (seed 26) found only these two, each a hang (> 120 s): a model
    of 96 million / 2^31 - 1 layers priced one layer at a time. LayerList is a head and a
    period now: the plan is priced (exit 0, no traceback), per-GPU memory in the petabytes, as
    the arithmetic says (a stage of 2^31 - 1 layers of a 7B-class shape)."""
    r = cli(*args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["memory"]["fits"] is False and d["memory"]["total_bytes"] > 1e15


@pytest.mark.parametrize("name", ["moe-config-5-0.json", "moe-config-0-3.json", "moe-config-0-4.json"])
def test_fuzz_pass_moe_config_without_moe_layers(cli, tmp_path, name):
    """The third pass (seed 27, main after this session's merges) found one traceback kind: a
    Hugging Face MoE config whose layer pattern places no MoE layer (DeepSeek-V3's
    moe_layer_freq 1000 past 61 layers; Qwen3-MoE's decoder_sparse_step 2^31 - 1) made explain's
    MoE block look for an expert layer (StopIteration). The model is the dense model it is:
    priced, no `moe` block."""
    (tmp_path / "config.json").write_text((FUZZ / name).read_text())
    r = cli("explain", "--model", str(tmp_path), "--gpus", "64", "--seq-len", "4096", "--format", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert "moe" not in d and all("moe(" not in k["kind"] for k in d["layers"])


def test_moe_layer_freq_past_the_depth_builds_a_period_of_the_model():
    """The twenty-sixth pass (seed 52) found moe-config-0-4.json (DeepSeek-V3 with moe_layer_freq 2^31 - 1 and
    first_k_dense_replace 3) hanging: the layer list built one object a layer of a 2^31 - 1 layer period. Layer i
    is MoE iff i >= first_k_dense and i % layer_freq == 0; below num_layers that is i % min(layer_freq, num_layers):
    the same layers. By hand, 61 layers, first 3 dense: freq 2^31 - 1 places none (only i = 0 divides, and it is
    dense), freq 1,000 none, freq 30 layers 30 and 60; with first_k_dense 0 and freq 2^31 - 1 layer 0 alone."""
    from planner.catalog import load_model
    from planner.layers import layer_list
    from planner.params import moe_layer_count

    base = load_model("deepseek-v3")
    for k, f, moe_layers in ((3, 2**31 - 1, []), (3, 1000, []), (3, 30, [30, 60]), (0, 2**31 - 1, [0])):
        m = base.model_copy(update={"moe": base.moe.model_copy(update={"first_k_dense": k, "layer_freq": f})})
        ll = layer_list(m)
        assert len(ll.period) <= m.num_layers
        got = [i for i in range(m.num_layers) if ll.kinds[ll.kind_at(i)].has_experts]
        assert got == moe_layers and int(moe_layer_count(m.moe, 0, m.num_layers)) == len(moe_layers)


def test_moe_layer_period_beyond_the_bound_exits_2(cli, tmp_path):
    """A period of MoE layers longer than the 65,536 the layer list builds (num_layers and moe.layer_freq both
    2^30) is refused naming the field, not built for minutes."""
    import yaml

    d = yaml.safe_load((FUZZ / "model-7-18.yaml").read_text())
    d.update(num_layers=2**30, moe={"num_experts": 8, "top_k": 2, "layer_freq": 2**30 - 1})
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(d))
    r = cli("explain", "--model", str(f), "--gpus", "8")
    assert_error(r, "moe.layer_freq")
    assert "65,536" in r.stderr


def test_fuzz_pass_run_record_with_denormal_memory_exits_2(cli, tmp_path):
    """The fourth pass (seed 28, main after the session's merges) found one failure: a record
    with memory_per_gpu_gib 1e-308 made calibrate run's residuals infinite (a pydantic error).
    A peak below the caching allocator's smallest block (512 B allocated, a 2 MiB segment
    reserved) is not a measurement: exit 2 naming the field."""
    r = cli("calibrate", "run", str(FUZZ / "run-records-10-6.yaml"), "-o", str(tmp_path / "p.yaml"), "--format", "json")
    assert_error(r, "memory_per_gpu_gib")
    assert "512 B" in r.stderr


def test_fuzz_seed_171_torchtitan_log_with_denormal_tps_exits_2(cli, tmp_path):
    """Seed 171 (all kinds, branch fuzz from 0a3bb8c) found one failure: torchtitan's llama3 8B log with one
    steady line's `tps: 1e-308` (run-log-171-0-9.log, line 12; the median 6463.5 is unmoved) raised
    ZeroDivisionError in log_run's step-time spread (min / median - 1 rounds to -1). Exit 2 naming the line
    and field."""
    job = Path(__file__).parent / "data" / "training_logs" / "torchtitan_llama3_8b_8xh100.job.yaml"
    r = cli("calibrate", "run", str(FUZZ / "run-log-171-0-9.log"), "-o", str(tmp_path / "p.yaml"), "--job", str(job))
    assert_error(r, "tps")
    assert "run-log-171-0-9.log:12: field `tps`: 1e-308 tokens/s per GPU against the log's median 6463.5" in r.stderr


def test_width_rule_reads_the_pattern_not_each_layer(monkeypatch):
    """The start-up width rule (MEGATRON_FP8_WIDTHS) asked every model for ModelSpec.layer_windows, a
    tuple of num_layers entries: at num_layers 2^31 - 1 (the twenty-first fuzz pass, seed 45,
    model-5-4.yaml) 17 GB and two minutes before the plan was priced. It reads the layer pattern's
    mixer kinds (startup._used_mixers): the per-layer tuple is never built."""
    from planner import startup
    from planner.catalog import load_model
    from planner.schema import ModelSpec
    huge = load_model(str(FUZZ / "model-5-4.yaml"))

    def expanded(self):
        raise AssertionError("the per-layer tuple was built")
    monkeypatch.setattr(ModelSpec, "layer_windows", property(expanded))
    names = [w[0] for w in startup._quantized_widths(huge)]
    assert huge.num_layers == 2**31 - 1
    assert names[:3] == ["hidden_size", "attention proj input heads x head_dim", "QKV out (heads + 2 kv_heads) x head_dim"]


def test_layer_kind_rule_reads_the_pattern_not_each_layer(cli, tmp_path):
    """Rule 73 (STACK_LAYER_KIND, megkinds) listed each feature's layers one by one: at 2^31 - 1 layers the
    CI run after its merge grew past 3.5 GB in test_fuzz_pass_huge_layer_counts_are_priced. Its layers are
    LayerIndices (the pattern's period): the GPT-3-shaped reproducer is priced, and a Jamba of 2^31 - 1
    layers is refused on megatron at once, its Mamba-1 runs cut after twelve."""
    from planner.catalog import load_model
    from planner.startup import model_layer_features

    f = model_layer_features(load_model(str(FUZZ / "model-5-4.yaml")))
    assert list(f) == ["global"] and len(f["global"]) == 2**31 - 1 and f["global"][-1] == 2**31 - 2
    src = Path(__file__).parent.parent / "model_zoo" / "jamba-v0.1.yaml"
    text = src.read_text().replace("num_layers: 32", "num_layers: 2147483647", 1)
    assert "num_layers: 2147483647" in text
    (tmp_path / "jamba.yaml").write_text(text)
    j = model_layer_features(load_model(str(tmp_path / "jamba.yaml")))
    # 2^31 - 1 = 8 x 268,435,455 + 7: seven Mamba-1 layers a period (offset 4 is attention), six in the last 7
    assert len(j["mamba1"]) == 7 * ((2**31 - 1) // 8) + 6 and j["mamba1"][:8] == [0, 1, 2, 3, 5, 6, 7, 8]
    r = cli("explain", "--model", str(tmp_path / "jamba.yaml"), "--gpus", "8")
    assert r.exit_code == 2 and "STACK_LAYER_KIND" in r.stderr
    assert "0-3, 5-11, 13-19, 21-27, 29-35, 37-43, 45-51, 53-59, 61-67, 69-75, 77-83, 85-91, ... (more runs)" in r.stderr


@pytest.mark.parametrize("name", ["job-fields-3-12.yaml", "job-fields-16-3.yaml", "job-fields-16-21.yaml",
                                  "job-fields-20-36.yaml", "job-fields-18-18.yaml"])
def test_fuzz_pass_job_fields_reproducers(cli, name):
    """The first pass of the job-fields kind (scripts/fuzz.py --runs 1500 --seed 64 --kinds job-fields; job files
    with random Job fields, fit's rows priced again by explain, tests/data/fuzz_issue24/README.md): a traceback
    without gradient-accumulation fusion (the compute floor's grouping), one with korthikanti activations in fp8,
    and two reproduce lines without the job's power limit; and of the seed-66 pass (--runs 1000), the line `fit F`
    prints keeping the file's hsdp shard group under a zero1 row. Each fit now runs, and explain prices its rows
    alike (both printed lines: fuzzing.fit_rows_agree)."""
    from fuzzing import fit_rows_agree

    args = ["fit", str(FUZZ / name), "--top", "3", "--format", "json"]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert fit_rows_agree(args, r) is None


def test_fuzz_pass_job_fields_export_reproducer(cli):
    """The job-fields pass with the export read-back check (scripts/fuzz.py --runs 300 --seed 68 --kinds job-fields,
    branch fuzzcfg; its only failure): Megatron-DeepSpeed with `attention_softmax_in_fp32: false`; the row (flash
    attention, where the torch softmax does not run) exported as a DeepSpeed JSON read back without it, 'another
    plan'. Now plan_signature holds the setting only where it runs (the eager core), and the DeepSpeed JSON refuses
    the model-code settings it has no key for where they run (mtp_layers, the eager fp32 softmax, grouped expert
    GEMMs) and a bytes_per_param other than mixed16."""
    from fuzzing import config_fit_check

    args = ["fit", str(FUZZ / "job-fields-3-33.yaml"), "--top", "3", "--format", "json"]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert config_fit_check(args, r) is None
    for extra, want in ((["--mtp-layers", "1"], "mtp_layers 1: set in the model code (Megatron-DeepSpeed's --mtp-num-layers"),
                        (["--bytes-per-param", "megatron"], "bytes_per_param megatron: a DeepSpeed JSON's bf16 / fp16 "
                                                            "section runs mixed16")):
        r = cli("export", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--stack", "megatron-deepspeed", "--sharding",
                "zero1", "--format", "deepspeed", *extra)
        assert r.exit_code == 2 and want in r.stderr, r.stderr


def test_fuzz_pass_config_fit_reproducer(cli):
    """The config-fit kind's first run (branch fuzzcfg, 2026-12-05; tests/data/fuzz_issue24/README.md): its own
    Megatron-Bridge seed, the launch `export --format megatron-bridge` writes for Llama 3 8B at TP 4; each row of `fit
    F` exported as Megatron-LM flags (stack_db megatron-bridge export_format: megatron) read back as stack megatron,
    'another plan' (cli/export.check_readback), so every `fit --stack megatron-bridge --export megatron` exited 2.
    Now the read-back prices the file on the plan's stack, and each row's reproduce lines and exports agree
    (fuzzing.config_fit_check)."""
    from fuzzing import config_fit_check

    args = ["fit", str(FUZZ / "config-fit-bridge-8b.sh"), "--top", "2", "--format", "json"]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert config_fit_check(args, r) is None
    r = cli(*args[:-2], "--export", "megatron")
    assert r.exit_code == 0 and "--tensor-model-parallel-size" in r.stdout, r.stderr


def test_fuzz_seed_124_torchtitan_pp1_file_microbatch_0_under_a_pp_row(cli):
    """Seed 124 (the four heavy kinds, branch fuzz3 from dd658e0; its only failure): torchtitan's llama3 8B CP TOML
    (cp 2, pp 1) with `pipeline_parallel_microbatch_size = 0` (newest-fields-124-3-2.toml). At pp 1 torchtitan reads
    no pipeline key, so `fit F --gpus 8` listed it as ignored and ranked row 1 at pp 2 (TP2xCP1xPP2xDP2, vpp 17,
    0.141 s); explain of the row's line, which gives `--pp 2 --micro-batch 1`, refused the file's 0 before the command
    line replaced it. The command line's micro-batch now replaces the file's unread, named, as a command-line
    --schedule replaces the file's pipeline_parallel_schedule; without --micro-batch the 0 is still refused."""
    from fuzzing import recent_check

    f = str(FUZZ / "newest-fields-124-3-2.toml")
    args = ["fit", f, "--top", "2", "--format", "json", "--gpus", "8"]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert recent_check(args, r) is None
    row = json.loads(r.stdout)["rows"][0]["plan"]
    assert (row["tp"], row["cp"], row["pp"], row["vpp"], row["dp"], row["micro_batch"]) == (2, 1, 2, 17, 2, 1)
    r = cli("explain", f, "--gpus", "8", "--tp", "2", "--cp", "1", "--pp", "2", "--vpp", "17", "--dp", "2",
            "--micro-batch", "1", "--sharding", "fsdp2", "--recompute", "none", "--sequence-parallel", "--schedule",
            "interleaved", "--global-batch", "4", "--no-compile", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert ("micro_batch=1: the command line replaces the file's 0 ([parallelism] pipeline_parallel_microbatch_size)"
            in r.stderr)
    r = cli("explain", f, "--gpus", "8", "--pp", "2")
    assert_error(r, "pipeline_parallel_microbatch_size")
    assert "pipeline_parallel_microbatch_size = 0 is not a whole number from 1" in r.stderr
