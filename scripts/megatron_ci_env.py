"""Add each Megatron-LM CI corpus row's CUBLAS_WORKSPACE_CONFIG and NCCL environment to
tests/data/megatron_ci/corpus.json.

The functional tests export their model_config.yaml's ENV_VARS before training
(NVIDIA/Megatron-LM tests/functional_tests/shell_test_utils/_run_training.sh l. 74-85, "Pull env
vars to export"); CUBLAS_WORKSPACE_CONFIG sizes PyTorch's cuBLAS workspaces (planner/memory.py
[ws]). This reads the row's `source.model_config_path` at its `source.golden_recording_commit`
(the code that recorded the golden values) from a git directory of NVIDIA/Megatron-LM and writes

    "env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8" | null, "source": "<commit>:<path>"}

null where the config at that commit sets no such variable. A row whose config path does not
exist at its recording commit (the case was renamed or moved since) is found by its golden file's
content: the corpus commit's golden file blob (`git rev-parse <corpus commit>:<golden_path>`) is the
blob the recording commit wrote, so the test-case folders holding that same blob at the recording
commit are the case under its name then (`git ls-tree -r`), and their model_config.yaml is read there
(`env.source` names it; `env.found_by` says so). Where no folder holds the blob, or the folders that do
disagree on the variable, the row gets no `env` (unknown).

The same config's ENV_VARS give the case's NCCL_ALGO, NCCL_PROTO and NCCL_NVLS_ENABLE (null where unset), and
`env.launcher` what the CI's training script exported before them at the recording commit: from ef1888bc5c
(2026-04-20, "move NCCL env vars from docker launcher to shell training script")
tests/functional_tests/shell_test_utils/_run_training.sh sets `export NCCL_PROTO="${NCCL_PROTO:-simple}"`,
NCCL_ALGO Ring, NCCL_COLLNET_ENABLE 0, NCCL_NVLS_ENABLE 0 (l. 58-61 at d98e8a64), defaults the case's ENV_VARS,
exported after them, override. They are read from the script at the recording commit (`export NCCL_X="${NCCL_X:-v}"`
lines; `env.launcher.source` names the lines) and are null before ef1888bc5c; from 4e85d74ae9 (2026-04-14) to
ef1888bc5c only tests/test_utils/python_scripts/launch_nemo_run_workload.py (the GitHub Actions launcher) set them,
not launch_jet_workload.py (GitLab), and a golden file does not say which CI recorded it: `env.launcher.unknown`
says so there (planner/megatron_ci.py prices NCCL's default for it).

    PYTHONPATH=. python scripts/megatron_ci_env.py /path/to/Megatron-LM.git

Run by hand when the corpus copy is refreshed; never at test time.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from planner.trainers.megatron import NCCL_ENV_FIELDS

CORPUS = Path(__file__).resolve().parent.parent / "tests/data/megatron_ci/corpus.json"


def row_env(git_dir: str, commit: str, path: str, cache: dict) -> dict | None:
    key = (commit, path)
    if key not in cache:
        p = subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True)
        if p.returncode:
            cache[key] = None
        else:
            env = (yaml.safe_load(p.stdout) or {}).get("ENV_VARS") or {}
            cache[key] = {**{k: None if env.get(k) is None else str(env[k]) for k in ("CUBLAS_WORKSPACE_CONFIG", *NCCL_VARS)},
                          "source": f"{commit}:{path}"}
    return cache[key]


NCCL_VARS = tuple(var for _, var, _ in NCCL_ENV_FIELDS)  # the variables the planner prices (planner/megatron_ci.py)
RUN_TRAINING = "tests/functional_tests/shell_test_utils/_run_training.sh"
NEMO_RUN_LAUNCHER = "tests/test_utils/python_scripts/launch_nemo_run_workload.py"
_EXPORT = re.compile(r'^export (NCCL_[A-Z_]+)="\$\{\1:-([^}]*)\}"')


def launcher_env(git_dir: str, commit: str, cache: dict) -> dict:
    """What the CI's training script exported at `commit` before the case's ENV_VARS (module docstring)."""
    key = ("launcher", commit)
    if key not in cache:
        text = _git(git_dir, "show", f"{commit}:{RUN_TRAINING}") or ""
        found = {}
        for n, line in enumerate(text.splitlines(), 1):
            m = _EXPORT.match(line.strip())
            if m and m.group(1) in NCCL_VARS:
                found[m.group(1)] = (m.group(2), n)
        out = {k: found[k][0] if k in found else None for k in NCCL_VARS}
        if found:
            lines = sorted(n for _, n in found.values())
            out["source"] = f"{commit}:{RUN_TRAINING} l. {lines[0]}-{lines[-1]}"
        else:
            nemo = _git(git_dir, "show", f"{commit}:{NEMO_RUN_LAUNCHER}") or ""
            if '"NCCL_PROTO"' in nemo:
                out["unknown"] = (f"{commit[:10]}: {NEMO_RUN_LAUNCHER} (GitHub Actions) sets NCCL_PROTO simple, "
                                  f"NCCL_ALGO Ring, NCCL_NVLS_ENABLE 0, {RUN_TRAINING} and the GitLab launcher do not; "
                                  "which CI recorded the golden file is not recorded")
        cache[key] = out
    return cache[key]


def _git(git_dir: str, *args: str) -> str | None:
    p = subprocess.run(["git", "-C", git_dir, *args], capture_output=True, text=True)
    return None if p.returncode else p.stdout


def renamed_env(git_dir: str, corpus_commit: str, commit: str, golden_path: str, cache: dict) -> dict | None:
    """The env of a row whose model_config_path is not at its recording commit: the model_config.yaml beside each
    file holding, at `commit`, the golden file's blob at `corpus_commit` (module docstring); None where none does or
    their configs disagree."""
    blob = (_git(git_dir, "rev-parse", f"{corpus_commit}:{golden_path}") or "").strip()
    if not blob:
        return None
    key = ("tree", commit)
    if key not in cache:
        by_blob: dict = {}
        for line in (_git(git_dir, "ls-tree", "-r", commit, "--", "tests/functional_tests/test_cases") or "").splitlines():
            meta, path = line.split("\t", 1)
            by_blob.setdefault(meta.split()[2], []).append(path)
        cache[key] = by_blob
    envs = [row_env(git_dir, commit, path.rsplit("/", 1)[0] + "/model_config.yaml", cache)
            for path in sorted(cache[key].get(blob, ()))]
    envs = [e for e in envs if e is not None]
    if not envs or len({tuple(e[k] for k in ("CUBLAS_WORKSPACE_CONFIG", *NCCL_VARS)) for e in envs}) != 1:
        return None
    return {**envs[0], "found_by": f"golden file blob {blob[:12]} at {commit[:10]} ({len(envs)} folder(s))"}


def main(git_dir: str) -> None:
    data = json.loads(CORPUS.read_text())
    corpus_commit = data["source"]["commit"]
    cache: dict = {}
    for r in data["rows"]:
        s = r.get("source") or {}
        env = (row_env(git_dir, s["golden_recording_commit"], s["model_config_path"], cache)
               if s.get("golden_recording_commit") and s.get("model_config_path") else None)
        if env is None and s.get("golden_recording_commit") and s.get("golden_path"):
            env = renamed_env(git_dir, corpus_commit, s["golden_recording_commit"], s["golden_path"], cache)
        r.pop("env", None)
        if env is not None:
            r["env"] = {**env, "launcher": launcher_env(git_dir, s["golden_recording_commit"], cache)}
    CORPUS.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
