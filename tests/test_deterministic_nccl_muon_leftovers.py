"""Deterministic mode's NCCL_ALGO and Muon's leftovers on Megatron-Bridge (issues 21, 22).

NCCL_ALGO under --deterministic-mode. NVIDIA/Megatron-LM @d98e8a64 megatron/training/determinism.py l. 27-31:
DETERMINISM_ENV_VAR_DEFAULTS = {"NCCL_ALGO": "Ring", ...}; apply_determinism_env l. 114-116 `env.setdefault(k, v)` on
os.environ (l. 155), so Ring only where the launcher has not set NCCL_ALGO. `git log -S'"NCCL_ALGO": "Ring"'` on the
mirror: added by 3ab71eeb3e (2026-07-08); its parent's validate_args (465264b7dd arguments.py l. 1513-1515) only
asserted NCCL_ALGO set and set nothing. So (stack_db megatron runs.deterministic_nccl_algo; plan._nccl_algo): the job's
nccl_algo where given; else Ring under deterministic_mode where trainer_date is 2026-07-08 or later or not given (the
stack's own commit); else unset (NCCL's own choice). Bridge's pinned 905c0e386 has no determinism.py: none there.

Bridge's deterministic check (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf training/config.py l. 1463-1466):
`os.getenv("NCCL_ALGO") in ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")`, the whole value compared.

Muon on Bridge: Megatron-Core 905c0e386's OptimizerConfig has no muon_use_syrk (added by fa8319589e, 2026-08-10), so
Hydra refuses `optimizer.muon_use_syrk=true` ('Could not override', config_loader_impl.py @v1.3.2 l. 388-395) and
Bridge's _apply_overrides skips a `+`-added one (omegaconf_utils.py @dc805f5cf l. 453-457). Its muon_num_ns_steps
(optimizer_config.py l. 275, default 5) reaches Emerging-Optimizers v0.1.0 (905c0e386 pyproject.toml l. 210) with the
quintic coefficients (muon.py l. 57; muon_utils.py v0.1.0 l. 29-37: 5 sets), whose newton_schulz raises unless steps
% 5 == 0 (l. 135-136): 10 runs, 3 raises; Megatron-LM @d98e8a64 pins v0.3.0, which cycles the sets (any count)."""

from __future__ import annotations

import json

import pytest

from planner.comm import nccl_algo_candidates
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

from conftest import assert_one_error

# 16 GPUs (two H100 nodes) at TP 2: the DP all-reduce crosses nodes, where NCCL's own choice is not Ring
BASE = dict(model="llama3-8b", gpus=16, tp=2, pp=1, cp=1, sequence_parallel=True, micro_batch=1, global_batch=32,
            seq_len=2048, deterministic_mode=True)


def _run(**fields):
    s, p, _ = resolve(Job.model_validate({**BASE, **fields}))
    return s, float(evaluate(s, p).step_s), to_json(s, p, evaluate(s, p))


def test_megatron_deterministic_mode_prices_its_ring_from_3ab71eeb3e():
    """No nccl_algo: Ring, priced as the job that gives NCCL_ALGO=Ring (the same candidates, the same step time), and
    listed as assumed with its source; the job's own value wins (^NVLS: no assumed line); a trainer_date before
    2026-07-08 sets none (NCCL's own choice, the step time of the job without deterministic mode), 2026-07-08 does.
    Ring is not NCCL's own choice here (the step times differ), so the default is what moves the figure."""
    s, t, js = _run()
    assert (s.nccl_algo, s.nccl_algos) == ("Ring", nccl_algo_candidates("Ring"))
    assert js["plan"]["nccl_algo"] == "Ring"
    line = [a for a in js["assumed"] if a.startswith("nccl_algo=Ring")]
    assert len(line) == 1 and "determinism.py l. 27-31" in line[0] and "3ab71eeb3e" in line[0]
    s_ring, t_ring, js_ring = _run(nccl_algo="Ring")
    assert t == t_ring and not any(a.startswith("nccl_algo=") for a in s_ring.env_assumed)
    _, t_free, js_free = _run(deterministic_mode=False)
    assert "nccl_algo" not in js_free["plan"] and t_free != t
    s_old, t_old, js_old = _run(trainer_date="2026-07-07")
    assert s_old.nccl_algo is None and t_old == t_free and "nccl_algo" not in js_old["plan"]
    s_new, t_new, _ = _run(trainer_date="2026-07-08")
    assert s_new.nccl_algo == "Ring" and t_new == t
    s_own, _, js_own = _run(nccl_algo="^NVLS")
    assert s_own.nccl_algo == "^NVLS" and not any(a.startswith("nccl_algo=") for a in js_own.get("assumed", ()))


def test_bridge_deterministic_mode_sets_no_nccl_algo():
    """Bridge's 905c0e386 has no determinism.py (stack megatron-bridge runs.deterministic_nccl_algo null): unset."""
    s, _, js = _run(stack="megatron-bridge")
    assert s.nccl_algo is None and "nccl_algo" not in js["plan"]


def test_megatron_export_writes_the_ring_it_priced_and_reads_it_back():
    """The deterministic plan's NCCL_ALGO Ring is exported (export NCCL_ALGO=Ring) and read back as the same plan."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    _, _, row = _run()
    text, _ = export_plan(row["plan"], "megatron")
    assert "export NCCL_ALGO=Ring" in text.splitlines()
    check_readback(row, "megatron", text)


RUN = ("torchrun --nproc_per_node 8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config "
       "model.context_parallel_size=1")
DET = "model.deterministic_mode=true model.cross_entropy_loss_fusion=false"


def _bridge(tmp_path, body: str):
    f = tmp_path / "launch.sh"
    f.write_text(body + "\n")
    return f


@pytest.mark.parametrize("algo", ["Ring,Tree", "Ring;allreduce:Ring", "NVLS"])
def test_bridge_reader_refuses_an_nccl_algo_its_deterministic_check_does(cli, tmp_path, algo):
    """l. 1463-1466 compares the whole value with the five names: a list, a per-function spec or NVLS is refused."""
    f = _bridge(tmp_path, f"export NCCL_ALGO='{algo}'\n{RUN} {DET}")
    assert_one_error(cli("explain", f, "--hardware", "h100-sxm"), f"NCCL_ALGO={algo}", "training/config.py @dc805f5cf "
                     "l. 1463-1466", "hint: export NCCL_ALGO as one of Tree, Ring")


def test_bridge_reader_takes_one_of_the_five_and_notes_none(tmp_path):
    """^NVLS is one of the five: the job's nccl_algo. No NCCL_ALGO in the script: listed as assumed (the launcher's
    environment must set it), priced with NCCL's own choice; without deterministic mode nothing is said."""
    cfg = load_trainer_config(_bridge(tmp_path, f"export NCCL_ALGO=^NVLS\n{RUN} {DET}"), hardware="h100-sxm")
    assert cfg.job["nccl_algo"] == "^NVLS" and cfg.job["deterministic_mode"] is True
    cfg = load_trainer_config(_bridge(tmp_path, f"{RUN} {DET}"), hardware="h100-sxm")
    assert "nccl_algo" not in cfg.job
    assert [a.entries for a in cfg.assumed if "sets no NCCL_ALGO" in a] == [(("model.deterministic_mode", True),)]
    cfg = load_trainer_config(_bridge(tmp_path, RUN), hardware="h100-sxm")
    assert not any("NCCL_ALGO" in a for a in cfg.assumed)


MUON = (f"{RUN} optimizer.optimizer=muon ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false "
        "ddp.overlap_param_gather=false")


def test_bridge_muon_use_syrk_refused_as_hydra_does(cli, tmp_path):
    """key=value: refused (no such field at 905c0e386), naming the commit that added it and the version it needs;
    +key=value: Bridge skips it, listed as ignored, the plan priced as without it."""
    f = _bridge(tmp_path, f"{MUON} optimizer.muon_use_syrk=true")
    assert_one_error(cli("explain", f, "--hardware", "h100-sxm"), "optimizer.muon_use_syrk=true",
                     "has no muon_use_syrk", "fa8319589e", "emerging_optimizers >= 0.4.0.dev0", "Could not override",
                     "hint: drop optimizer.muon_use_syrk")
    cfg = load_trainer_config(_bridge(tmp_path, f"{MUON} +optimizer.muon_use_syrk=true"), hardware="h100-sxm")
    assert [n.entries for n in cfg.ignored if "muon_use_syrk" in n] == [(("optimizer.muon_use_syrk", True),)]
    assert cfg.job == load_trainer_config(_bridge(tmp_path, MUON), hardware="h100-sxm").job


def test_bridge_muon_ns_steps_read_checked_and_written(cli, tmp_path):
    """optimizer.muon_num_ns_steps=10: the job's muon_ns_steps (a multiple of 5: v0.1.0 runs it), exported back as
    the same key; 3: refused (v0.1.0 raises 'steps (3) must be multiple of len(coefficient_sets) (5).'), on the job's
    field too, but not on the megatron stack (v0.3.0); 0: TensorParallelMuon raises (muon.py @905c0e386 l. 64-65).
    Under adam the key has no effect (assumed)."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    f = _bridge(tmp_path, f"{MUON} optimizer.muon_num_ns_steps=10")
    assert load_trainer_config(f, hardware="h100-sxm").job["muon_ns_steps"] == 10
    row = json.loads(cli("explain", f, "--hardware", "h100-sxm", "--format", "json", "-q").stdout)
    assert row["plan"]["muon_ns_steps"] == 10
    text, _ = export_plan(row["plan"], "megatron-bridge")
    assert "optimizer.muon_num_ns_steps=10" in [ln.strip(" \\") for ln in text.splitlines()]
    check_readback(row, "megatron-bridge", text)
    f3 = _bridge(tmp_path, f"{MUON} optimizer.muon_num_ns_steps=3")
    assert_one_error(cli("explain", f3, "--hardware", "h100-sxm"), "muon_ns_steps 3 on stack megatron-bridge",
                     "multiple of 5", "muon_utils.py l. 29-37", "l. 135-136", "hint: use a multiple of 5")
    job = dict(model="llama3-8b", gpus=8, global_batch=64, micro_batch=1, seq_len=2048, sharding="none",
               optimizer="muon", muon_ns_steps=3)
    with pytest.raises(PlannerError, match="wants a multiple of 5 steps"):
        resolve(Job.model_validate({**job, "stack": "megatron-bridge"}))
    resolve(Job.model_validate({**job, "stack": "megatron"}))
    assert_one_error(cli("explain", _bridge(tmp_path, f"{MUON} optimizer.muon_num_ns_steps=0"), "--hardware",
                         "h100-sxm"), "num_ns_steps must be at least 1")
    cfg = load_trainer_config(_bridge(tmp_path, f"{RUN} optimizer.muon_num_ns_steps=3"), hardware="h100-sxm")
    assert "muon_ns_steps" not in cfg.job
    assert any(n.entries == (("optimizer.muon_num_ns_steps", 3),) for n in cfg.assumed)


def _refused(**fields) -> str:
    with pytest.raises(PlannerError) as e:
        resolve(Job.model_validate({**BASE, **fields}))
    return e.value.message


def test_the_nccl_algo_each_deterministic_check_takes():
    """Codes 103, 104. @d98e8a64 (no trainer_date, or from 2026-07-08): each comma-separated token among Ring,
    CollnetDirect, CollnetChain, ^NVLS (determinism.py l. 48, 87-93): 'Ring,Tree' refused by its Tree (103),
    'Ring,CollnetDirect' and '^NVLS' taken. From ac08742c96 (2024-05-04) to 3ab71eeb3e: the whole value one of Tree,
    Ring, CollnetDirect, CollnetChain, ^NVLS (104): 'Ring,Tree' and 'Ring,CollnetDirect' refused, '^NVLS' taken; before
    2024-05-04 no check. Megatron-Bridge (config.py l. 1463-1466): 104. Without deterministic mode nothing is checked."""
    from planner.startup import CODES

    assert (CODES["MEGATRON_DETERMINISTIC_NCCL_ALGO"], CODES["MEGATRON_DETERMINISTIC_NCCL_CHOICE"]) == (103, 104)
    for day in (None, "2026-07-08"):
        date = {"trainer_date": day} if day else {}
        msg = _refused(nccl_algo="Ring,Tree", **date)
        assert "MEGATRON_DETERMINISTIC_NCCL_ALGO" in msg and "determinism.py l. 48" in msg
        assert resolve(Job.model_validate({**BASE, **date, "nccl_algo": "Ring,CollnetDirect"}))[0].nccl_algo == \
            "Ring,CollnetDirect"
    for algo in ("Ring,Tree", "Ring,CollnetDirect"):
        msg = _refused(nccl_algo=algo, trainer_date="2025-01-01")
        assert "MEGATRON_DETERMINISTIC_NCCL_CHOICE" in msg and "ac08742c96" in msg
    assert "MEGATRON_DETERMINISTIC_NCCL_CHOICE" in _refused(nccl_algo="Ring,Tree", stack="megatron-bridge")
    for fields in (dict(nccl_algo="^NVLS", trainer_date="2025-01-01"), dict(nccl_algo="^NVLS"),
                   dict(nccl_algo="Ring,Tree", trainer_date="2024-05-03"), dict(nccl_algo="Ring,Tree",
                                                                                deterministic_mode=False),
                   dict(nccl_algo="Ring", stack="megatron-bridge")):
        assert resolve(Job.model_validate({**BASE, **fields}))[0].nccl_algo == fields["nccl_algo"]


def test_dated_deterministic_plan_reads_back_as_priced(cli):
    """A deterministic job dated before 2026-07-08 (--trainer-date 2026-07-02) is priced with NCCL's own choice (no
    NCCL_ALGO default at that commit); the Megatron export is written for the stack's own commit (export's
    trainer_date note) and says nothing of NCCL_ALGO, so read back at that commit it took Ring (the default since
    3ab71eeb3e) and `fit --export` refused its own file ('nccl_algo: None priced, 'Ring' read back': scripts/fuzz.py
    seed 106, precision-flags). The read-back passes the plan's trainer_date, as it passes every field the file cannot
    hold (cli/export.check_readback)."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "1", "--cp", "1", "--seq-len", "2048",
            "--global-batch", "32", "--deterministic-mode", "--trainer-date", "2026-07-02", "--no-tp-comm-overlap", "--top", "1",
            "--export", "megatron")
    assert r.exit_code == 0, r.stderr
    assert "NCCL_ALGO" not in r.stdout  # nothing set: NCCL's own choice, as priced
