"""Context parallelism without load balancing (issue 22, every axis priced): the job field cp_load_balance false.

Sources:
  pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/config/configs.py l. 235 (context_parallel_load_balancer,
      default "headtail"); torchtitan/distributed/context_parallel/api.py cp_shard l. 217-264: None builds no load
      balancer, so torch's _context_parallel_shard splits the sequence into cp contiguous pieces.
  NVIDIA/Megatron-LM @d98e8a64 megatron/core/utils.py _get_batch_on_this_cp_rank_per_sequence_balancing
      l. 2504-2557: 2 cp chunks, rank r keeps r and 2 cp - 1 - r, always (no option): the field is refused there.

Hand derivation (step.cp_balance_factor). Rank r of cp holds queries [r n, (r + 1) n), n = s / cp. Under the causal
mask a query at position p attends to p keys (continuous), so rank r's work is the integral of p over its range,
n^2 (r + 1/2); the last rank's n^2 (cp - 1/2) over the balanced share (s^2 / 2) / cp = n^2 cp / 2 is
(2 cp - 1) / cp: 1.5 at cp 2, 1.75 at cp 4. A window w caps the keys at w: s = 8192, w = 4096, cp 2: the last rank's
4096 queries each attend to 4096 keys (16,777,216), the whole sequence to 4096^2 / 2 + 4096 x 4096 = 25,165,824, the
balanced share 12,582,912: 4/3.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_error
from planner import step as S
from planner.errors import PlannerError
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

BASE = dict(model="llama3-8b", gpus=8, global_batch=8, micro_batch=1, seq_len=8192, sharding="fsdp",
            stack="torchtitan-0.3", hardware="h100-sxm", recompute="none")


def test_factor_by_hand():
    assert float(S.cp_balance_factor(2, 8192)) == pytest.approx(1.5, rel=1e-12)
    assert float(S.cp_balance_factor(4, 8192)) == pytest.approx(1.75, rel=1e-12)
    assert float(S.cp_balance_factor(1, 8192)) == 1.0
    assert float(S.cp_balance_factor(2, 8192, 4096)) == pytest.approx(4.0 / 3.0, rel=1e-12)
    # vectorized over plans: one call for cp 1, 2, 4, 8
    np.testing.assert_allclose(S.cp_balance_factor(np.array([1, 2, 4, 8]), 8192), [1.0, 1.5, 1.75, 1.875], rtol=1e-12)


def _core(cp: int, balanced: bool):
    settings, plan, _ = resolve(Job(**BASE, cp=cp, dp=8 // cp, cp_load_balance=balanced))
    sc = S._context(settings, plan)
    lt = S.layer_times(sc)
    assert len(lt.core_fwd) == 1  # llama3-8b: one (global, causal) layer kind
    return (float(np.ravel(lt.core_fwd[0])[0]), float(np.ravel(lt.core_bwd[0])[0]),
            float(np.ravel(lt.cp_fwd[0])[0]), settings, plan)


@pytest.mark.parametrize("cp, factor", [(2, 1.5), (4, 1.75)])
def test_attention_core_seconds_at_the_last_rank(cp, factor):
    """torchtitan 0.3's FlexAttention CP runs one kernel of the local queries (stack kernel one: cp_kernel_factor 1),
    so the balanced core is the unsplit kernel's rate on 1/cp of the FLOPs; without load balancing a global causal
    layer's core forward and backward seconds are (2 cp - 1) / cp of that, and the extra is what CP adds (cp_fwd)."""
    f1, b1, c1, *_ = _core(cp, True)
    f0, b0, c0, *_ = _core(cp, False)
    assert f0 / f1 == pytest.approx(factor, rel=1e-12) and b0 / b1 == pytest.approx(factor, rel=1e-12)
    assert c0 - c1 == pytest.approx(f1 * (factor - 1.0), rel=1e-9)


def test_step_slower_and_plan_field():
    _, _, _, s1, p1 = _core(2, True)
    _, _, _, s0, p0 = _core(2, False)
    assert float(evaluate(s0, p0).step_s) > float(evaluate(s1, p1).step_s)
    assert s0.cp_load_balance is False and s1.cp_load_balance is True


def test_megatron_refuses_it():
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**BASE, "stack": "megatron", "sharding": "zero1"}, cp=2, dp=4, cp_load_balance=False))
    assert "_get_batch_on_this_cp_rank_per_sequence_balancing l. 2504-2557" in e.value.message
    assert "runs.cp_no_load_balance" in e.value.message


def test_cp1_ignored():
    _, _, w = resolve(Job(**BASE, cp=1, cp_load_balance=False))
    assert any(x.startswith("cp_load_balance false ignored at cp 1") for x in w)


def _line(tmp_path, extra: str, name: str = "run.sh"):
    p = tmp_path / name
    p.write_text("#!/usr/bin/bash\nMODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --training.local_batch_size 1 "
                 f"--training.seq_len 4096 {extra}\n")
    return p


@pytest.mark.parametrize("cp, factor", [(2, "1.5x"), (4, "1.75x")])
def test_reader_sets_the_field(tmp_path, cp, factor):
    """torchtitan 0.3's None at cp > 1 reads as cp_load_balance false (assumed line with the factor); the default
    (headtail) leaves the field at its default."""
    p = _line(tmp_path, f"--parallelism.context_parallel_degree {cp} --parallelism.context_parallel_load_balancer None")
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["cp_load_balance"] is False
    line = next(a for a in cfg.assumed if a.startswith("cp_load_balance=false"))
    assert f"(2 cp - 1) / cp = {factor}" in line and "cp_shard l. 217-264" in line
    assert not any("load_balancer" in x for x in cfg.not_modelled)
    d = load_trainer_config(_line(tmp_path, f"--parallelism.context_parallel_degree {cp}", name="d.sh"),
                            hardware="h100-sxm")
    assert "cp_load_balance" not in d.job


def test_export_writes_it_back(cli, tmp_path):
    """`planner export` of a plan with cp_load_balance false on torchtitan-0.3 writes the load balancer None (and
    reads back as the same plan: export's own read-back check); a balanced plan writes no such option."""
    args = ["export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
            "--stack", "torchtitan-0.3", "--cp", "2", "--hardware", "h100-sxm", "--seq-len", "8192"]
    r = cli(*args, "--no-cp-load-balance")
    assert r.exit_code == 0, r.stderr
    assert "--parallelism.context-parallel-load-balancer None" in r.stdout
    out = tmp_path / "exported.sh"
    out.write_text(r.stdout)
    assert load_trainer_config(out, hardware="h100-sxm").job["cp_load_balance"] is False
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert "context-parallel-load-balancer" not in r.stdout


def test_megatron_cli_refusal(cli):
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--stack",
                         "megatron", "--cp", "2", "--no-cp-load-balance"),
                     "always load-balances context parallelism", "choose --stack torchtitan or torchtitan-0.3")


# ---- torchtitan main (stack torchtitan, pytorch/torchtitan @e347b1e5e): the same key, config/job_config.py
# Parallelism.context_parallel_load_balancer l. 431-437 (str | None, default "headtail"; "" refused by __post_init__
# l. 439-444), read by train.py l. 469-477 into distributed/context_parallel.py cp_shard l. 138-246 (headtail / ptrr
# build a balancer, another name raises ValueError l. 207-211, None builds none: contiguous chunks). TOML has no null
# and config/manager.py _dict_to_dataclass l. 160-181 passes the file's string as it is, so None is a command-line
# value only: the TOML reader never sets cp_load_balance false and the TOML export refuses it.


def _core_at(stack: str, cp: int, balanced: bool):
    settings, plan, _ = resolve(Job(**{**BASE, "stack": stack}, cp=cp, dp=8 // cp, cp_load_balance=balanced))
    lt = S.layer_times(S._context(settings, plan))
    assert len(lt.core_fwd) == 1
    return float(np.ravel(lt.core_fwd[0])[0]), float(np.ravel(lt.core_bwd[0])[0]), float(np.ravel(lt.cp_fwd[0])[0])


@pytest.mark.parametrize("cp, factor", [(2, 1.5), (4, 1.75)])
def test_main_stack_prices_it(cp, factor):
    """Stack torchtitan now has runs.cp_no_load_balance, so the job field is accepted there (it was refused) and priced
    as on 0.3 (step.cp_balance_factor): rank r of cp holds queries [r n, (r + 1) n), n = s / cp, and under the causal
    mask does n^2 (r + 1/2) of the work; the last rank's n^2 (cp - 1/2) over the balanced n^2 cp / 2 is (2 cp - 1) / cp:
    1.5 at cp 2, 1.75 at cp 4, on the core forward and backward; the extra seconds are what CP adds (cp_fwd)."""
    f1, b1, c1 = _core_at("torchtitan", cp, True)
    f0, b0, c0 = _core_at("torchtitan", cp, False)
    assert f0 / f1 == pytest.approx(factor, rel=1e-12) and b0 / b1 == pytest.approx(factor, rel=1e-12)
    assert c0 - c1 == pytest.approx(f1 * (factor - 1.0), rel=1e-9)


def _toml(tmp_path, cp: int, balancer: str | None):
    p = tmp_path / f"tt-{cp}.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
                 f"[parallelism]\ncontext_parallel_degree = {cp}\n"
                 + (f"context_parallel_load_balancer = {balancer}\n" if balancer is not None else ""))
    return p


@pytest.mark.parametrize("value", ['"headtail"', '"ptrr"'])
def test_main_toml_balanced_names(tmp_path, value):
    """headtail and ptrr (cp_shard l. 186-206) are the balanced split: the field stays at its default, the name is
    listed as assumed at cp 2; at cp 1 (cp_shard runs only where cp is enabled: train.py l. 469) headtail, the default,
    is listed as ignored, and ptrr is kept as the job's cp_load_balancer for the plans at cp > 1 that fit searches
    (cp_balancer.load_balancer; tests/test_cp_ptrr.py)."""
    cfg = load_trainer_config(_toml(tmp_path, 2, value), gpus=8, hardware="h100-sxm")
    assert "cp_load_balance" not in cfg.job
    assert any(f"load balancer shares the causal mask's work evenly" in a for a in cfg.assumed)
    cfg = load_trainer_config(_toml(tmp_path, 1, value), gpus=8, hardware="h100-sxm")
    assert "cp_load_balance" not in cfg.job
    ignored = any("context_parallel_load_balancer" in x and "context_parallel_degree 1" in x for x in cfg.ignored)
    assert ignored == (value == '"headtail"')
    assert cfg.job.get("cp_load_balancer") == (None if value == '"headtail"' else "ptrr")


def test_main_toml_none_string_refused(cli, tmp_path):
    """A TOML "None" is the string 'None', which cp_shard refuses at cp > 1 (ValueError 'Invalid load_balancer_type',
    l. 207-211): kept as the job's cp_load_balancer and refused by start-up rule TORCHTITAN_CP_LOAD_BALANCER_NAME (code
    105) naming it, the hint giving the command-line None; at cp 1 never read (ignored; tests/test_cp_balancer_name.py:
    fit's CP rows refused alike)."""
    assert_one_error(cli("explain", str(_toml(tmp_path, 2, '"None"')), "--gpus", "8", "--hardware", "h100-sxm"),
                     "context_parallel_load_balancer 'None'", "breaks start-up rule TORCHTITAN_CP_LOAD_BALANCER_NAME",
                     "cp_shard l. 184-211", "Invalid load_balancer_type",
                     "torchtitan's command line --parallelism.context_parallel_load_balancer None")
    cfg = load_trainer_config(_toml(tmp_path, 1, '"None"'), gpus=8, hardware="h100-sxm")
    assert "cp_load_balance" not in cfg.job and cfg.job["cp_load_balancer"] == "None"
    assert any("context_parallel_load_balancer" in x and "never read" in x for x in cfg.ignored)


@pytest.mark.parametrize("cp", [1, 2])
def test_main_toml_empty_and_non_string_refused(cli, tmp_path, cp):
    """"" stops main at start-up whatever the degree (Parallelism.__post_init__ l. 439-444); a non-string is no value
    of the `str | None` field."""
    assert_one_error(cli("explain", str(_toml(tmp_path, cp, '""')), "--gpus", "8", "--hardware", "h100-sxm"),
                     "context_parallel_load_balancer = ''", "Parallelism.__post_init__ l. 439-444",
                     "cannot be an empty string")
    assert_one_error(cli("explain", str(_toml(tmp_path, cp, "false")), "--gpus", "8", "--hardware", "h100-sxm"),
                     "context_parallel_load_balancer = False is not a string")


def test_main_toml_priced_with_the_flag(cli, tmp_path):
    """The TOML (no balancer key) priced with --no-cp-load-balance runs slower than without it (the 1.5x core at cp 2,
    test_main_stack_prices_it), as torchtitan launched with --parallelism.context_parallel_load_balancer None."""
    p = str(_toml(tmp_path, 2, None))
    args = ["explain", p, "--gpus", "8", "--hardware", "h100-sxm", "-f", "json"]
    import json

    r1, r0 = cli(*args), cli(*args, "--no-cp-load-balance")
    assert r1.exit_code == 0 and r0.exit_code == 0, (r1.stderr, r0.stderr)
    s1, s0 = json.loads(r1.stdout), json.loads(r0.stdout)
    assert s0["plan"]["cp_load_balance"] is False and "cp_load_balance" not in s1["plan"]
    assert s0["time"]["step_s"] > s1["time"]["step_s"]


def test_main_export_refuses_it(cli):
    """A TOML cannot say None: `export --format torchtitan` of a main-stack plan with cp_load_balance false is refused
    naming why and how to launch it; the balanced plan exports without the key (its default)."""
    args = ["export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
            "--stack", "torchtitan", "--cp", "2", "--hardware", "h100-sxm", "--seq-len", "8192", "--sharding", "fsdp"]
    assert_one_error(cli(*args, "--no-cp-load-balance"), "cp_load_balance false", "a TOML cannot say",
                     "--parallelism.context_parallel_load_balancer None on torchtitan's command line")
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert "load_balancer" not in r.stdout


REPLACED = "cp_load_balance=False: the command line replaces the file's load-balanced context parallelism"


@pytest.mark.parametrize("cp_file, cli_cp, noted", [(2, None, "cp 2"), (1, "2", "cp 2"), (1, None, None), (2, "1", None)])
def test_flag_over_the_file_is_noted(cli, tmp_path, cp_file, cli_cp, noted):
    """Flags beat file values with a note (issue 22, ttchecks): a main TOML that leaves context_parallel_load_balancer
    out runs torchtitan's default 'headtail' (config/job_config.py @e347b1e5e l. 431-437), balanced; the reader leaves
    cp_load_balance out there (test_main_toml_balanced_names), so `--no-cp-load-balance` replaces the file's balanced CP
    wherever CP runs: the file's cp 2, or the command line's cp 2 over the file's 1. Where the plan runs at cp 1 nothing
    is balanced either way: no such note (resolve's 'ignored at cp 1' warning says it). Without the flag: no note."""
    args = ["explain", str(_toml(tmp_path, cp_file, None)), "--gpus", "8", "--hardware", "h100-sxm", "-f", "json"]
    args += ["--cp", cli_cp] if cli_cp else []
    r, r1 = cli(*args, "--no-cp-load-balance"), cli(*args)
    assert r.exit_code == 0 and r1.exit_code == 0, (r.stderr, r1.stderr)
    assert REPLACED not in r1.stderr
    if noted is None:
        assert REPLACED not in r.stderr
    else:
        assert f"{REPLACED} (its default at {noted}:" in r.stderr


def test_flag_equal_to_the_file_not_noted(cli, tmp_path):
    """A 0.3 launch line that says None (cp_load_balance false, read) with --no-cp-load-balance: the same value, no note;
    with --cp-load-balance the file's False is replaced, named by the general rule (core.replaced)."""
    p = tmp_path / "run.sh"
    p.write_text("#!/usr/bin/bash\nMODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh --training.local_batch_size 1 "
                 "--training.seq_len 8192 --parallelism.context_parallel_degree 2 "
                 "--parallelism.context_parallel_load_balancer None\n")
    args = ["explain", str(p), "--gpus", "8", "--hardware", "h100-sxm", "-f", "json"]
    r = cli(*args, "--no-cp-load-balance")
    assert r.exit_code == 0, r.stderr
    assert "cp_load_balance=False: the command line replaces" not in r.stderr
    r = cli(*args, "--cp-load-balance")
    assert r.exit_code == 0, r.stderr
    assert "cp_load_balance=True: the command line replaces the file's False" in r.stderr


def test_fit_cp_rows_run_the_files_none_balancer(tmp_path):
    """A 0.3 launch at context_parallel_degree 1 that says `--parallelism.context_parallel_load_balancer None`: nothing
    split there, but it is the run's setting wherever CP runs, so the reader sets cp_load_balance false (resolve says
    it is ignored at cp 1) and fit's CP rows are priced unbalanced, as explain prices each row's reproduce line, which
    reads the file again at the row's --cp (cp_balancer.load_balancer run_cp). Before, fit priced its cp 2 row
    balanced (compute 0.9882 s) and explain of its line unbalanced (1.0919 s): fuzz13 seed 101, newest-fields
    run_train_8b.sh chunk 1 input 20 (llama3-8b, tp 2, local batch 2, seq 8192: fit --top 2). Here seq 4096, fit
    pinned at cp 2: the row holds cp_load_balance false and its reproduce lines agree (fuzzing.config_fit_check)."""
    from typer.testing import CliRunner

    from fuzzing import config_fit_check
    from planner.cli import app

    p = _line(tmp_path, "--parallelism.context_parallel_load_balancer None")
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["cp"] == 1 and cfg.job["cp_load_balance"] is False
    assert any(a.startswith("cp_load_balance=false") and "where CP runs" in a for a in cfg.assumed)
    assert not any("load_balancer" in x for x in cfg.ignored)
    args = ["fit", str(p), "--cp", "2", "--top", "1", "--format", "json", "--hardware", "h100-sxm"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["rows"][0]
    assert row["plan"]["cp"] == 2 and row["plan"]["cp_load_balance"] is False
    assert config_fit_check(args, r) is None
