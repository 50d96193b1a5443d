"""--deterministic-mode's cuBLAS workspaces (issue 21; planner/trainers/megatron.py _deterministic, memory.py [ws]).
NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 1708-1711 calls training/determinism.py
apply_determinism_to_args, whose apply_determinism_env setdefaults CUBLAS_WORKSPACE_CONFIG=:4096:8 (l. 27-31,
114-116) where the launcher has not set it: PyTorch's cuBLAS workspaces are then 4,096 KiB x 8 = 32 MiB each, not
the A100's 8.125 MiB default (hardware_db a100-sxm-80gb torch_cublas_workspace_MiB); H100's default is 32 MiB."""

from __future__ import annotations

import pytest

from planner.trainers import load_trainer_config

UNINSTALL_TE = "tests/data/megatron_ci/args/gpt__gpt3_mcore_tp2_pp2_uninstall_te__lts_dgx_a100.args"


def test_reader_sets_the_workspace(tmp_path):
    cfg = load_trainer_config(UNINSTALL_TE, fmt="megatron", gpus=8, hardware="a100-sxm-80gb")
    assert cfg.job["cublas_workspace_config"] == ":4096:8"
    assert any(a.startswith("cublas_workspace_config=:4096:8: --deterministic-mode sets") for a in cfg.assumed)
    # the slower deterministic kernels stay listed as not modelled
    assert any(n.startswith("--deterministic-mode") and "slower" in n for n in cfg.not_modelled)
    p = tmp_path / "run.args"
    p.write_text("\n".join(x for x in open(UNINSTALL_TE).read().splitlines() if x != "--deterministic-mode"))
    assert "cublas_workspace_config" not in load_trainer_config(p, fmt="megatron", gpus=8, hardware="a100-sxm-80gb").job


def test_a100_row_by_hand():
    # the uninstall_te A100 row (no CUBLAS_WORKSPACE_CONFIG in its case's ENV_VARS): the stack's two cuBLAS
    # workspaces (stack_db megatron memory.blas_handles, one per thread that runs GEMMs, memory.py [ws]) at 32 MiB
    # instead of 8.125: +47.75 MiB; and (issue 21, layers/common.py [rb]) the row-parallel biases whole on each TP rank:
    # h = 512, 6 layers a stage, 2 h x (1 - 1/2) = 512 parameters a layer more, at 2 + 2 + 4 + 8 = 16 B: +49,152 B
    from planner.megatron_ci import report_corpus

    row = report_corpus("tests/data/megatron_ci/corpus.json", ids=["gpt__gpt3_mcore_tp2_pp2_uninstall_te__lts_dgx_a100"])["rows"][0]
    assert row["predicted_bytes"] == 2019205120.0 + 2 * (32 - 8.125) * 2**20 + 6 * 512 * 16  # 2,069,323,776 B
    assert row["error"] == pytest.approx(-0.008842, abs=1e-6)
