"""--deterministic-mode's cuBLAS workspaces (issue 21; planner/trainers/megatron.py _deterministic, plan._cublas_workspace,
memory.py [ws]). NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 1708-1711 calls training/determinism.py
apply_determinism_to_args, whose apply_determinism_env setdefaults CUBLAS_WORKSPACE_CONFIG=:4096:8 (l. 27-31,
114-116) where the launcher has not set it: PyTorch's cuBLAS workspaces are then 4,096 KiB x 8 = 32 MiB each, not
the A100's 8.125 MiB default (hardware_db a100-sxm-80gb torch_cublas_workspace_MiB); H100's default is 32 MiB.

Dated (stack_db megatron runs.deterministic_cublas_workspace since 2026-07-08): `git log -S CUBLAS_WORKSPACE_CONFIG
d98e8a64 -- megatron/` on the mirror finds one commit, 3ab71eeb3e (2026-07-08, #5041), which wrote determinism.py; its
parent's validate_args (465264b7dd arguments.py l. 1508-1517) set no environment and asserted nothing about the
variable, only called torch.use_deterministic_algorithms(True) (PyTorch then refuses cuBLAS GEMMs unless the launcher
exported :4096:8 or :16:8). So a job whose trainer_date is 2026-07-07 gets no workspace from its trainer (the GPU's
default, with a line saying the launcher must set one), 2026-07-08 and an undated job (the stack's own commit) get
:4096:8, and a job's own value wins on either side."""

from __future__ import annotations

import pytest

from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config

UNINSTALL_TE = "tests/data/megatron_ci/args/gpt__gpt3_mcore_tp2_pp2_uninstall_te__lts_dgx_a100.args"


def test_reader_reads_the_flag_and_the_plan_sets_the_workspace(tmp_path):
    """The reader makes the flag the job's deterministic_mode and writes no workspace (the plan's, dated); an undated
    job on the megatron stack is priced with :4096:8, listed as assumed with its source."""
    cfg = load_trainer_config(UNINSTALL_TE, fmt="megatron", gpus=8, hardware="a100-sxm-80gb")
    assert cfg.job["deterministic_mode"] is True and "cublas_workspace_config" not in cfg.job
    # the slower deterministic kernels stay listed as not modelled
    assert any(n.startswith("--deterministic-mode") and "slower" in n for n in cfg.not_modelled)
    s, _, _ = resolve(Job.model_validate(cfg.job))
    assert s.cublas_workspace_config == ":4096:8"
    line = [a for a in s.env_assumed if a.startswith("cublas_workspace_config=:4096:8: deterministic_mode")]
    assert len(line) == 1 and "since 2026-07-08" in line[0] and "3ab71eeb3e" in line[0]
    p = tmp_path / "run.args"
    p.write_text("\n".join(x for x in open(UNINSTALL_TE).read().splitlines() if x != "--deterministic-mode"))
    job = load_trainer_config(p, fmt="megatron", gpus=8, hardware="a100-sxm-80gb").job
    assert "cublas_workspace_config" not in job and resolve(Job.model_validate(job))[0].cublas_workspace_config is None


def _a100(**kw):
    s, p, _ = resolve(Job.model_validate(dict(model="llama3-8b", gpus=8, hardware="a100-sxm-80gb", stack="megatron",
                                              deterministic_mode=True, **kw)))
    return s, to_json(s, p, evaluate(s, p))


def test_dated_each_side_of_3ab71eeb3e_by_hand():
    """On the A100 (default workspace 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB) and the megatron stack's two BLAS handles
    (stack memory.blas_handles 2): trainer_date 2026-07-07, before 3ab71eeb3e, gets no workspace from the trainer,
    8.125 MiB each, with the line naming PyTorch's need for a launcher's value; 2026-07-08 gets :4096:8, 32 MiB each:
    +2 x (32 - 8.125) MiB = +50,069,504 B, the same as the undated job; a job's own :16:8 (16 KiB x 8 = 128 KiB) wins
    on both sides, with no line."""
    old, js_old = _a100(trainer_date="2026-07-07")
    new, js_new = _a100(trainer_date="2026-07-08")
    _, js_undated = _a100()
    assert old.cublas_workspace_config is None and "cublas_workspace_config" not in js_old["plan"]
    assert new.cublas_workspace_config == ":4096:8" == js_new["plan"]["cublas_workspace_config"]
    assert js_new["memory"]["total_bytes"] - js_old["memory"]["total_bytes"] == 2 * (32 - 8.125) * 2**20 == 50_069_504
    assert js_new["memory"]["total_bytes"] == js_undated["memory"]["total_bytes"]
    line = [a for a in old.env_assumed if a.startswith("cublas_workspace_config")]
    assert len(line) == 1 and line[0].startswith("cublas_workspace_config unset: deterministic_mode on a trainer dated "
                                                 "2026-07-07") and ":4096:8 or :16:8" in line[0]
    own_old, js_own_old = _a100(trainer_date="2026-07-07", cublas_workspace_config=":16:8")
    own_new, js_own_new = _a100(trainer_date="2026-07-08", cublas_workspace_config=":16:8")
    assert own_old.cublas_workspace_config == own_new.cublas_workspace_config == ":16:8"
    assert js_own_old["memory"]["total_bytes"] == js_own_new["memory"]["total_bytes"] \
        == js_old["memory"]["total_bytes"] - 2 * (8.125 * 2**20 - 16 * 1024 * 8)
    assert not any(a.startswith("cublas_workspace_config") for a in own_old.env_assumed + own_new.env_assumed)


def test_a100_row_by_hand():
    # the uninstall_te A100 row (recorded 2025-02-05 at 10654a44b8, when the case was gpt3_mr_mcore_tp2_pp2_uninstall_te_
    # dgx_a100_1N8G, whose ENV_VARS set CUBLAS_WORKSPACE_CONFIG :4096:8: the row's env, scripts/megatron_ci_env.py by
    # the golden file's blob, 204b13e6e4e8 at both commits; before 3ab71eeb3e Megatron set none): the stack's two cuBLAS
    # workspaces (stack_db megatron memory.blas_handles, one per thread that runs GEMMs, memory.py [ws]) at 32 MiB
    # instead of 8.125: +47.75 MiB; and (issue 21, layers/common.py [rb]) the row-parallel biases whole on each TP rank:
    # h = 512, 6 layers a stage, 2 h x (1 - 1/2) = 512 parameters a layer more, at 2 + 2 + 4 + 8 = 16 B: +49,152 B
    from planner.megatron_ci import report_corpus

    row = report_corpus("tests/data/megatron_ci/corpus.json", ids=["gpt__gpt3_mcore_tp2_pp2_uninstall_te__lts_dgx_a100"])["rows"][0]
    assert row["predicted_bytes"] == 2019205120.0 + 2 * (32 - 8.125) * 2**20 + 6 * 512 * 16  # 2,069,323,776 B
    assert row["error"] == pytest.approx(-0.008842, abs=1e-6)
    assert "cublas_workspace_config=:4096:8: CUBLAS_WORKSPACE_CONFIG in the case's ENV_VARS (10654a44b8d6f1f305bb50d5f7" \
           "65a5e9ea35b67a:tests/functional_tests/test_cases/gpt/gpt3_mr_mcore_tp2_pp2_uninstall_te_dgx_a100_1N8G/" \
           "model_config.yaml)" in row["assumed"]
    assert any(a.startswith("trainer_date=2025-02-05") for a in row["assumed"])
    assert not any(a.startswith("cublas_workspace_config unset") for a in row["assumed"])
