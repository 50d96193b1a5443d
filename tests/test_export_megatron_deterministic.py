"""Megatron --deterministic-mode as the job's deterministic_mode (issue 22, export as the trainer's own, complete
config): the Megatron reader read the flag's CUBLAS_WORKSPACE_CONFIG (:4096:8) but not the flag, so an exported
script ran without deterministic kernels. Now the flag is a job field that the export writes and the reader reads
back equal; its workspace is the plan's (plan._cublas_workspace, dated: tests/test_megatron_deterministic.py). NVIDIA/Megatron-LM @d98e8a64: model_parallel_config.py l. 229 (deterministic_mode, a store_true
argument), arguments.py l. 1708-1711 -> training/determinism.py l. 27-31, 114-116 (CUBLAS_WORKSPACE_CONFIG
setdefault ':4096:8'); stack runs.deterministic_cublas_workspace (megatron ':4096:8', megatron-bridge none)."""

from __future__ import annotations

from pathlib import Path

from conftest import assert_one_error
from planner.cli.export import check_readback
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature

ARGS = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 4 --global-batch-size 32 --bf16 --tensor-model-parallel-size 2 --sequence-parallel "
        "--deterministic-mode")
A100 = "a100-sxm-80gb"  # torch_cublas_workspace_MiB 8.125 (sm80: 4096 KiB x 2 + 16 KiB x 8): :4096:8 moves memory


def _row(job: dict):
    s, p, _ = resolve(Job.model_validate(job))
    return to_json(s, p, evaluate(s, p))


def test_launch_reads_exports_and_reads_back_the_flag(tmp_path: Path):
    """read -> export -> read back: the flag is the job's deterministic_mode, the export writes `--deterministic-mode`
    and the `export CUBLAS_WORKSPACE_CONFIG=:4096:8` line, and the script reads back as the same plan and memory
    (check_readback); without the flag the export writes neither."""
    src = tmp_path / "in.args"
    src.write_text(ARGS + "\n")
    cfg = load_trainer_config(src, gpus=8)
    assert cfg.job["deterministic_mode"] is True and "cublas_workspace_config" not in cfg.job  # the plan's (dated)
    row = _row({**cfg.job, "hardware": A100})
    assert row["plan"]["deterministic_mode"] is True and row["plan"]["cublas_workspace_config"] == ":4096:8"
    text, _ = export_plan(row["plan"], "megatron")
    assert "    --deterministic-mode \\" in text.splitlines()
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in text.splitlines()
    check_readback(row, "megatron", text)
    out = tmp_path / "out.sh"
    out.write_text(text)
    back = load_trainer_config(out, gpus=8)
    assert back.job["deterministic_mode"] is True
    again = _row({**back.job, "hardware": A100})
    assert plan_signature(again["plan"]) == plan_signature(row["plan"])
    assert again["memory"]["total_bytes"] == row["memory"]["total_bytes"]
    plain = _row({**{k: v for k, v in cfg.job.items() if k not in ("deterministic_mode", "cublas_workspace_config")},
                  "hardware": A100})
    assert "deterministic_mode" not in plain["plan"]
    text, _ = export_plan(plain["plan"], "megatron")
    assert "--deterministic-mode" not in text and "CUBLAS_WORKSPACE_CONFIG" not in text


def test_job_field_prices_megatrons_workspace_by_hand():
    """A job with deterministic_mode and no cublas_workspace_config is priced with the :4096:8 Megatron-LM sets
    (4096 KiB x 8 = 32 MiB a cuBLAS workspace) where the A100's default is 8.125 MiB, on the megatron stack's two
    BLAS handles (stack memory.blas_handles 2: forward and autograd threads): +2 x (32 - 8.125) MiB = +50,069,504 B;
    the job's own :16:8 wins (setdefault), priced as a job without the flag that sets it."""
    base = dict(model="llama3-8b", gpus=8, hardware=A100, stack="megatron")
    on, off = _row({**base, "deterministic_mode": True}), _row(base)
    assert on["plan"]["cublas_workspace_config"] == ":4096:8" and "cublas_workspace_config" not in off["plan"]
    assert on["memory"]["total_bytes"] - off["memory"]["total_bytes"] == 2 * (32 - 8.125) * 2**20 == 50_069_504
    own = _row({**base, "deterministic_mode": True, "cublas_workspace_config": ":16:8"})
    assert own["memory"]["total_bytes"] == _row({**base, "cublas_workspace_config": ":16:8"})["memory"]["total_bytes"]


def test_bridge_sets_no_workspace_and_its_export_writes_the_field():
    """Megatron-Bridge @dc805f5cf pins Megatron-LM 905c0e386, which has no determinism.py (its ConfigContainer only
    turns torch.use_deterministic_algorithms on, training/config.py l. 1445-1469): no workspace derived (the GPU's
    default priced). The Bridge writer spells it as Megatron-Core's model.deterministic_mode (was: refused; issue 22
    detmode) and reads it back as the same plan; on the A100 the kernel the plan prices is FlashAttention-2, TE's
    own choice there (model.attention_backend left null), which Bridge's flash check does not refuse. Bridge asserts
    NCCL_ALGO set beside it (l. 1463-1466): the plan is priced with Ring (nccl_algo), which the export writes."""
    base = dict(model="llama3-8b", gpus=8, hardware=A100, stack="megatron-bridge")
    on, off = _row({**base, "deterministic_mode": True, "nccl_algo": "Ring"}), _row(base)
    assert "cublas_workspace_config" not in on["plan"] and on["memory"]["total_bytes"] == off["memory"]["total_bytes"]
    text, _ = export_plan(on["plan"], "megatron-bridge")
    assert "    model.deterministic_mode=true \\" in text.splitlines() and "model.attention_backend=null" in text
    assert "export NCCL_ALGO=Ring" in text.splitlines()
    check_readback(on, "megatron-bridge", text)


def test_other_trainers_refuse_it(cli):
    """torchtitan has no --deterministic-mode (its debug.deterministic is another switch): exit 2 naming the field."""
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--deterministic-mode")
    assert_one_error(r, "deterministic_mode", "torchtitan")
