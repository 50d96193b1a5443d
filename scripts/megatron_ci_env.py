"""Add each Megatron-LM CI corpus row's CUBLAS_WORKSPACE_CONFIG to tests/data/megatron_ci/corpus.json.

The functional tests export their model_config.yaml's ENV_VARS before training
(NVIDIA/Megatron-LM tests/functional_tests/shell_test_utils/_run_training.sh l. 74-85, "Pull env
vars to export"); CUBLAS_WORKSPACE_CONFIG sizes PyTorch's cuBLAS workspaces (planner/memory.py
[ws]). This reads the row's `source.model_config_path` at its `source.golden_recording_commit`
(the code that recorded the golden values) from a git directory of NVIDIA/Megatron-LM and writes

    "env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8" | null, "source": "<commit>:<path>"}

null where the config at that commit sets no such variable. A row whose config path does not
exist at its recording commit (the case was renamed since) gets no `env` (unknown).

    python scripts/megatron_ci_env.py /path/to/Megatron-LM.git

Run by hand when the corpus copy is refreshed; never at test time.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

CORPUS = Path(__file__).resolve().parent.parent / "tests/data/megatron_ci/corpus.json"


def row_env(git_dir: str, commit: str, path: str, cache: dict) -> dict | None:
    key = (commit, path)
    if key not in cache:
        p = subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True)
        if p.returncode:
            cache[key] = None
        else:
            env = (yaml.safe_load(p.stdout) or {}).get("ENV_VARS") or {}
            value = env.get("CUBLAS_WORKSPACE_CONFIG")
            cache[key] = {"CUBLAS_WORKSPACE_CONFIG": None if value is None else str(value),
                          "source": f"{commit}:{path}"}
    return cache[key]


def main(git_dir: str) -> None:
    data = json.loads(CORPUS.read_text())
    cache: dict = {}
    for r in data["rows"]:
        s = r.get("source") or {}
        env = (row_env(git_dir, s["golden_recording_commit"], s["model_config_path"], cache)
               if s.get("golden_recording_commit") and s.get("model_config_path") else None)
        r.pop("env", None)
        if env is not None:
            r["env"] = env
    CORPUS.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
