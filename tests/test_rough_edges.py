"""Issue 24, "rough edges a new user hit": every command's --help reads in an 80-column
terminal, and one vocabulary across commands (`planner pipeline --pp`)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import app

from conftest import assert_one_error


def _commands(cmd, path=()):
    """(path, click command) of the root, every group and every command under it."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, path + (name,))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_every_command_is_listed():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "fit", "explain", "check", "budget", "export", "validate", "collective", "pipeline", "calibrate",
            "calibrate nccl", "calibrate gemm", "calibrate run", "models", "hardware", "schema", "stacks"} <= names


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "planner" for p, _ in COMMANDS])
def test_help_at_80_columns_shows_every_option_in_full(path, cmd):
    """COLUMNS=80: no line is wider than 80, every (visible) option name appears whole as a
    word of the help, none is cut with an ellipsis, and no flag shows a `<bool>` placeholder."""
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert "…" not in text and "<bool>" not in text
    words = set(text.replace(",", " ").replace("/", " ").split())
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.param_type_name != "option":
            continue
        for name in [*p.opts, *p.secondary_opts]:
            assert name in words, (path, name)
    for name, sub in getattr(cmd, "commands", {}).items():  # a group lists every command with its description
        if not sub.hidden:
            assert any(ln.split()[:1] == [name] for ln in text.splitlines()), (path, name)


def test_fit_help_names_the_long_options_that_were_cut():
    text = CliRunner().invoke(app, ["fit", "--help"], env={"COLUMNS": "80"}).stdout
    for name in ("--max-micro-batch", "--global-batch-tokens", "--account-for-embedding-in-pipeline-split",
                 "--moe-capacity-factor", "--ep-comm-overlap / --no-ep-comm-overlap"):
        assert name in text


def test_pipeline_takes_pp_as_fit_and_explain_do(cli):
    """`--pp` is the pipeline stages in every command; `--stages` / `-p` still work (hidden),
    and `-m` no longer means micro-batches (it is the model elsewhere)."""
    new = cli("pipeline", "--pp", 4, "--microbatches", 8)
    assert new.exit_code == 0, new.stderr
    assert "stage 3:" in new.stdout
    assert cli("pipeline", "--stages", 4, "--microbatches", 8).stdout == new.stdout
    assert cli("pipeline", "-p", 4, "--microbatches", 8).stdout == new.stdout
    help_text = cli("pipeline", "--help").stdout
    assert "--pp" in help_text and "--stages" not in help_text and "-m," not in help_text
    assert_one_error(cli("pipeline", "-m", 8, "--pp", 4), "no such option")
    assert_one_error(cli("pipeline", "--microbatches", 8), "--pp")
    assert_one_error(cli("pipeline", "--pp", 4, "--stages", 2, "--microbatches", 8), "disagree")


# ------------------------------------------------- trainer configs: a short stderr, --quiet
FP8_SH = "tests/data/trainer_configs/train_llama3_8b_h100_fp8.sh"
DS3 = "tests/data/trainer_configs/ds_config_zero3.json"


def test_settings_with_no_effect_are_counted_not_listed(cli):
    """The fp8 script's 42 settings with no effect on memory or time (optimizer, schedule, data,
    logging: the reader's documented list, cfg.ignored) are a count on one line, none named;
    the one that could matter (not modelled: --manual-gc) is still named, the ones read into the
    job since (--empty-unused-memory-level, --fp8-param-gather) are not, and the stderr is under
    2 kB (it was 3.9 kB)."""
    from planner.trainers import load_trainer_config

    r = cli("explain", FP8_SH)
    assert r.exit_code == 0, r.stderr
    cfg = load_trainer_config(FP8_SH)
    # entries, several settings in some ('--lr=..., --min-lr=... (optimizer ...)'); 11 and 42 before issue 22 read
    # --rotary-base (the model's rope_theta: 1e6 here, not llama3-8b's 5e5, so the flags' own model, which also
    # reads --max-position-embeddings as its max_seq_len)
    # 9 and 40 before 2026-12-07 listed --fp8-format, which turns fp8 on (tests/ignored_keys.py): now assumed
    assert len(cfg.ignored) == 8
    assert "39 setting(s) with no effect on memory or time not listed" in r.stderr
    assert "precision=fp8: --fp8-format hybrid (e4m3 or hybrid: the same fp8 GEMMs)" in r.stderr
    for name in ("--lr=", "--log-interval", "--tensorboard-dir", "--eval-interval"):  # --rotary-base: read (above)
        assert name not in r.stderr
    assert "--manual-gc" in r.stderr
    # the job's empty_unused_memory_level (trainers/megatron.py _read_empty_cache): read, not listed
    assert "--empty-unused-memory-level" not in r.stderr and cfg.job["empty_unused_memory_level"] == 1
    assert "--fp8-param-gather" not in r.stderr  # priced (fp8 weights and their transposes)
    assert len(r.stderr.encode()) < 2048


def test_not_modelled_settings_of_one_reason_share_it(cli, tmp_path):
    """DeepSpeed's ZeRO-3 keys the planner does not price: the reason once, after them (the
    bucket, prefetch, live-parameter, persistence, contiguous-gradient and sub-group keys are read
    into deepspeed_zero3 and priced, memory.py [z3], [z3s]: not listed)."""
    with open(DS3) as fh:
        data = json.load(fh)
    data["zero_optimization"]["round_robin_gradients"] = True  # a second key of the same reason
    f = tmp_path / "ds3.json"
    f.write_text(json.dumps(data))
    r = cli("explain", f, "--model", "llama3-8b", "--gpus", 8)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("(buckets, prefetch and persistence change memory and overlap; not priced)") == 1
    assert ("zero_optimization.stage3_gather_16bit_weights_on_model_save=true, "
            "zero_optimization.round_robin_gradients=true (buckets") in r.stderr
    assert "sub_group_size" not in r.stderr
    assert "reduce_bucket_size" not in r.stderr and "contiguous_gradients" not in r.stderr


def test_group_by_reason_keeps_nested_parentheses():
    """The stderr note's grouping takes each reader's record (report.Note) by its head and message: a reason holding
    parentheses stays whole, a head holding them ('f(x)', no reason) is not read as a reason, records of one reason
    share it in first-seen order, and a ruled record (`head: rule`) is its own group, whole."""
    from planner.cli.core import group_by_reason
    from planner.trainers.report import listed, noted

    x = listed("not_modelled", "--x", 1, "a (b) c")
    assert str(x) == "--x=1 (a (b) c)" and (x.head, x.message) == ("--x=1", "a (b) c")
    assert group_by_reason([x]) == ["--x=1 (a (b) c)"]
    f, y = noted("not_modelled", "f(x)", None), listed("not_modelled", "--y", 2, None)
    assert (str(f), f.head, f.message) == ("f(x)", "f(x)", None) and (str(y), y.message) == ("--y=2", None)
    assert group_by_reason([f, y]) == ["f(x), --y=2"]
    notes = [listed("not_modelled", "a", 1, "r"), listed("not_modelled", "b", 2, "s (t)"),
             listed("not_modelled", "c", 3, "r"), noted("not_modelled", "d", None)]
    assert group_by_reason(notes) == ["a=1, c=3 (r)", "b=2 (s (t))", "d"]
    ruled = listed("not_modelled", "e", 4, "rule (r)", ruled=True)
    assert group_by_reason([notes[0], ruled]) == ["a=1 (r)", "e=4: rule (r)"]


@pytest.mark.parametrize("cmd", [["explain", FP8_SH], ["check", FP8_SH], ["budget", FP8_SH, "--mc-runs", "0"],
                                 ["export", FP8_SH, "--format", "megatron"],
                                 ["fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1", "--format", "json"]])
def test_quiet_drops_the_notes_not_the_warnings(cli, cmd):
    loud, quiet = cli(*cmd), cli(*cmd, "--quiet")
    assert loud.exit_code == quiet.exit_code and loud.exit_code in (0, 1), loud.stderr
    assert "note: " in loud.stderr and "note: " not in quiet.stderr
    assert [ln for ln in loud.stderr.splitlines() if ln.startswith("warning: ")] == \
        [ln for ln in quiet.stderr.splitlines() if ln.startswith("warning: ")]
    assert loud.stdout == quiet.stdout or cmd[0] == "fit"  # fit's JSON holds the search's wall time


def test_quiet_keeps_errors(cli):
    r = cli("explain", FP8_SH, "--tp", 3, "--quiet")
    assert r.exit_code == 2 and "note: " not in r.stderr
    assert [ln.split(":")[0] for ln in r.stderr.splitlines()][-2:] == ["error", "hint"] and "tp=3" in r.stderr


# ------------------------------------------------------------------ cost has a currency
BUDGET = ["budget", "--model", "llama3-70b", "--gpus", "4096", "--tp", "8", "--sharding", "fsdp", "--tokens", "15e12",
          "--mfu", "0.4", "--mc-runs", "0", "--price-per-gpu-hour", "2"]


def _wide(*args):
    """The CLI with 250 columns: a rich table's cells not folded."""
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})


def test_cost_is_labelled_with_its_currency(cli):
    """6N x 15e12 tokens x 70.57e9 params (Llama 3 70B with megatron's 129,024 padded rows at tp 8, stack_db
    vocab_padding: 70,566,289,408) / (4,096 x 989e12 x 0.4) = 4,459,447 GPU-hours (the README's figure) at 2 USD:
    8,918,894 USD; --currency EUR relabels it, nothing else."""
    r = _wide(*BUDGET)
    assert r.exit_code == 0, r.stderr
    assert "8,918,894 USD" in r.stdout and "2 USD per GPU-hour (--price-per-gpu-hour)" in r.stdout
    eur = _wide(*BUDGET, "--currency", "EUR")
    assert "8,918,894 EUR" in eur.stdout and "USD" not in eur.stdout
    js = json.loads(cli(*BUDGET, "--format", "json").stdout)
    assert js["training"]["currency"] == "USD" and js["training"]["cost"] == pytest.approx(2 * 4_459_447, abs=1)
    assert json.loads(cli(*BUDGET[:-2], "--format", "json").stdout)["training"]["currency"] is None  # no price, no currency
    sweep = cli("budget", "--model", "llama3-70b", "--tp", "8", "--sharding", "fsdp", "--tokens", "15e12",
                "--sweep-gpus", "1024,2048", "--price-per-gpu-hour", "2", "--currency", "GBP")
    assert sweep.exit_code == 0 and "GBP" in sweep.stdout.splitlines()[2]  # the cost column's header: cost, GBP
    assert_one_error(cli(*BUDGET, "--currency", "dollars"), "--currency", "ISO 4217")


# ------------------------------------------------------------- MFU says what it counts
MFU_LINE = "MFU = model FLOPs (6N + non-causal attention (PaLM); recompute not counted)"


def test_every_table_with_mfu_names_its_convention(cli, tmp_path):
    fit = _wide("fit", "--model", "llama3-8b", "--gpus", 8, "--top", 2)
    assert fit.exit_code == 0 and MFU_LINE in fit.stdout
    causal = _wide("fit", "--model", "llama3-8b", "--gpus", 8, "--top", 2, "--causal-flops")
    assert "MFU = model FLOPs (6N + causal attention (PaLM); recompute not counted)" in causal.stdout
    job = tmp_path / "j.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 8\n")
    check = _wide("check", job)
    assert check.exit_code == 0 and MFU_LINE in check.stdout
    explain = _wide("explain", job)
    assert "(6N + non-causal attention, PaLM; recompute not counted)" in explain.stdout
    sweep = _wide("budget", "--model", "llama3-70b", "--tp", "8", "--sharding", "fsdp", "--tokens", "15e12",
                  "--sweep-gpus", "1024,2048")
    assert "MFU = model FLOPs (6N (attention not counted); recompute not counted)" in sweep.stdout
    assert MFU_LINE not in cli("check", job, "--format", "json").stdout  # machine formats: the keys say it


def test_a_toml_array_nested_1200_deep_is_invalid_input(cli):
    """Found by the issue-24 fuzz pass: tomllib recurses once per nesting level and raised
    RecursionError through the torchtitan reader; now exit 2 like any invalid TOML."""
    r = cli("check", "tests/data/fuzz_issue24/torchtitan-0-13.toml", "--gpus", 64, "--format", "json")
    assert r.exit_code == 2 and "invalid TOML: maximum recursion depth exceeded" in r.stderr
    assert "Traceback" not in r.stderr and r.exception is None or isinstance(r.exception, SystemExit)
