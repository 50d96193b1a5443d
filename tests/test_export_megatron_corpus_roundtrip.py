"""The Megatron export audited over the Megatron-LM CI corpus (tests/data/megatron_ci, read as planner/megatron_ci.py
reads it: the row's world size and GPU): each argument file the reader expresses is read, priced, exported with
`planner export --format megatron` and read back from the exported script alone (no --model: the model from the
exported flags). The two must agree on every ModelSpec field, every field of the resolved plan, plan_signature and
the memory total (issue 22). One file per CI case (the first, by name, of its environments and platforms): 107
cases, 104 read (3 skipped: the reader's refusals and not-modelled flags, megatron_ci's skips), 37 s wall on this
box under load, 8.6 s of CPU (every one of the corpus's 358 readable training files: 80-100 s wall under load, all
agreeing as below).

What the audit found and what moved (one commit each): --squared-relu and --quick-geglu (ModelSpec.mlp_activation)
and the two dropout probabilities (ModelSpec.hidden_dropout / attention_dropout); a dense model's
--expert-tensor-parallel-size (dropped: plan etp 4 read back as tp 2); --deterministic-mode's
CUBLAS_WORKSPACE_CONFIG :4096:8 (the export now writes `export CUBLAS_WORKSPACE_CONFIG=...`, which the reader
reads: 265 files; 0.046 GiB of the priced memory on an A100). Fields that differ only in spelling are compared as
the plan's meaning: the rank order as the trainer builds it (plan_signature: tp-cp-pp-dp and tp-cp-dp-pp at dp 1
are one order) and bytes_per_param's preset name and its bytes. (A job's bias_activation_fusion unset where the
model has no linear biases reads back false, --no-bias-gelu-fusion written: the resolved plans agree, arguments.py
@d98e8a64 l. 1605-1606.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.explain import evaluate, to_json
from planner.megatron_ci import HARDWARE_BY_GPU, load_corpus
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan, plan_signature

DATA = Path(__file__).parent / "data" / "megatron_ci"
#: a resolved plan's fields that name the model's file, not a setting (the model is compared field by field)
NAMES = ("model", "model_file", "model_sha256")


def _cases() -> list[tuple[str, int, str]]:
    """(args file, GPUs, hardware) for the first file of each CI case among the corpus's training rows."""
    seen: dict[str, tuple] = {}
    for r in sorted(load_corpus(DATA / "corpus.json")["rows"], key=lambda r: r.get("args_file") or ""):
        a, hw, ws = r.get("args_file"), HARDWARE_BY_GPU.get(r.get("gpu")), r.get("world_size")
        if not (a and r.get("is_training") and hw and isinstance(ws, int) and r.get("family") in ("gpt", "moe", "hybrid")):
            continue
        case = re.sub(r"__(dev|lts).*$", "", Path(a).stem)
        seen.setdefault(case, (a, ws, hw))
    return list(seen.values())


CASES = _cases()


def _priced(path: Path, gpus: int, hw: str):
    cfg = load_trainer_config(path, fmt="megatron", gpus=gpus, hardware=hw)
    settings, plan, _ = resolve(Job.model_validate(cfg.job))
    return cfg, settings, to_json(settings, plan, evaluate(settings, plan))


def _meaning(plan: dict) -> dict:
    """The resolved plan without the model's names, its spellings as plan_signature reads them."""
    out = {k: v for k, v in plan.items() if k not in NAMES}
    sig = plan_signature(plan)
    out["rank_order"], out["bytes_per_param"] = sig["rank_order"], sig["bytes_per_param"]
    return out


def test_the_cases_cover_the_corpus():
    """One file a case; the families the reader prices; enough to audit (the corpus's 358 readable training files
    are 120-odd cases)."""
    assert len(CASES) >= 100
    assert {Path(a).name.split("__")[0] for a, _, _ in CASES} == {"gpt", "moe", "hybrid"}


@pytest.mark.parametrize("args, gpus, hw", CASES, ids=[Path(a).stem for a, _, _ in CASES])
def test_export_reads_back_as_the_same_model_plan_and_memory(tmp_path, args, gpus, hw):
    try:
        cfg, s, row = _priced(DATA / args, gpus, hw)
    except Exception as e:  # the reader's refusals are megatron_ci's skips (test_megatron_ci.py), not the export's
        pytest.skip(f"not read: {type(e).__name__}")
    if cfg.unmodelled:
        pytest.skip("not modelled: " + "; ".join(cfg.unmodelled))
    text, _ = export_plan(row["plan"], "megatron")
    out = tmp_path / "exported.sh"
    out.write_text(text)
    _, s2, row2 = _priced(out, gpus, hw)
    m1, m2 = s.model.model_dump(), s2.model.model_dump()
    assert {k: (m1[k], m2[k]) for k in m1 if k not in ("name", "description", "sources") and m1[k] != m2[k]} == {}
    p1, p2 = _meaning(row["plan"]), _meaning(row2["plan"])
    assert {k: (p1.get(k), p2.get(k)) for k in set(p1) | set(p2) if p1.get(k) != p2.get(k)} == {}
    assert plan_signature(row["plan"]) == plan_signature(row2["plan"])
    assert row2["memory"]["total_bytes"] == row["memory"]["total_bytes"]


def test_deterministic_mode_workspace_is_exported_and_read(tmp_path):
    """--deterministic-mode: Megatron sets CUBLAS_WORKSPACE_CONFIG :4096:8 where the launcher has not
    (training/determinism.py @d98e8a64 l. 27-31, 114-116), the job's cublas_workspace_config. The export writes
    the launch's `export CUBLAS_WORKSPACE_CONFIG=:4096:8` (it wrote a note only, and read back unset: the A100's
    default workspaces, 0.046 GiB less); the reader reads a script's export, which wins over --deterministic-mode's."""
    args, gpus, hw = next(c for c in CASES if "gpt3_7b_tp1_pp4_memory_speed" in c[0])
    assert "--deterministic-mode" in (DATA / args).read_text().split()
    _, _, row = _priced(DATA / args, gpus, hw)
    assert row["plan"]["cublas_workspace_config"] == ":4096:8"
    text, notes = export_plan(row["plan"], "megatron")
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in text.splitlines()
    assert not any("cublas_workspace_config" in n for n in notes)
    out = tmp_path / "exported.sh"
    out.write_text(text.replace("export CUBLAS_WORKSPACE_CONFIG=:4096:8", "export CUBLAS_WORKSPACE_CONFIG=':16:8'"))
    cfg, _, _ = _priced(out, gpus, hw)
    assert cfg.job["cublas_workspace_config"] == ":16:8"  # the launcher's export wins
