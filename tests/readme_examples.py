"""The README's console examples as data (issue 24: figures that cannot drift).

`examples()` reads every `$ planner ...` line of README.md's code blocks, with the lines the
README shows after it (its quoted output, up to the next `$` line or the block's end), and
`figures(text)` the figures a quoted output states: decimals (`170.5`, `3.71`), percentages
(`48.0%`) and counts with thousands separators (`428,866`). tests/test_readme_examples.py
runs each example whose inputs exist and checks that every figure the README quotes is in
what the command prints now.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# the job files the README's `planner check` example names and describes in the paragraph after it
README_JOBS = {
    "jobs/llama3-8b-tp8.yaml": "model: llama3-8b\ngpus: 8\ntp: 8\n",
    "jobs/llama3-70b-64gpu.yaml": "model: llama3-70b\ngpus: 64\ntp: 8\n",
}
# figures that are not the model's: a search's wall time ("in 0.84 s"), a sweep's elapsed time
_WALL = re.compile(r"\bin \d+(\.\d+)? s\b|\d+(\.\d+)? s (wall|elapsed)")
_FIGURE = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+%?|\d+%)(?![\w.])")


@dataclass
class Example:
    line: int  # README line of the `$ planner` command
    argv: list[str]  # the arguments after `planner`
    quoted: list[str]  # the output lines the README shows


def examples(text: str | None = None) -> list[Example]:
    lines = (text if text is not None else README.read_text()).splitlines()
    out: list[Example] = []
    in_block, cur = False, None
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            in_block = not in_block
            if cur is not None:
                out.append(cur)
                cur = None
            i += 1
            continue
        if in_block and ln.startswith("$ "):
            if cur is not None:
                out.append(cur)
                cur = None
            cmd = ln[2:]
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            start = i + 1  # the first line of the quoted output
            cmd = cmd.split(" #")[0].split(" > ")[0]  # a comment, a redirection
            words = shlex.split(cmd) if cmd.count('"') % 2 == 0 else []
            if words[:1] == ["planner"]:
                cur = Example(start, words[1:], [])
        elif in_block and cur is not None:
            cur.quoted.append(ln)
        i += 1
    return out


def figures(lines: list[str]) -> list[str]:
    """The figures quoted lines state, in order (wall times left out)."""
    out = []
    for ln in lines:
        out += [m.group(1) for m in _FIGURE.finditer(_WALL.sub(" ", ln))]
    return out


def runnable(ex: Example, cwd: Path) -> bool:
    """An example the test can run: it quotes output, elides none of its arguments, and every
    argument that looks like a file exists (relative to the repository, or a README job)."""
    if not ex.quoted or any("..." in a or a.startswith("<") for a in ex.argv):
        return False
    if ex.argv[:2] == ["calibrate", "gemm"] and "--run" in ex.argv and "--dry-run" not in ex.argv:
        return False  # needs a GPU
    for a in ex.argv:
        if "/" in a or re.search(r"\.(ya?ml|json|toml|sh|txt|log|args)$", a):
            if not (cwd / a).exists() and a not in README_JOBS:
                return False
    return True


def skeleton(line: str) -> str:
    """A line without its figures and its spacing: what stays when the model's numbers move."""
    return " ".join(_FIGURE.sub("#", _WALL.sub(" ", line)).split())


def refreshed(quoted: list[str], output: str) -> tuple[list[str], list[str]]:
    """The quoted lines with each one's figures replaced by those of the output line of the
    same skeleton (the one such line; else the line is left as it is and returned in the
    second list, for a person to update)."""
    by_skel: dict[str, list[str]] = {}
    for ln in output.splitlines():
        by_skel.setdefault(skeleton(ln), []).append(ln)
    new, stuck = [], []
    for q in quoted:
        want = figures([q])
        got = [f for f in want if f not in output]
        cands = by_skel.get(skeleton(q), [])
        if not got:
            new.append(q)
        elif len(cands) == 1 and len(figures(cands)) == len(want):
            it = iter(figures(cands))
            new.append(_FIGURE.sub(lambda m: next(it) if not _WALL.search(q[max(0, m.start() - 3):m.end() + 3]) else m.group(1), q))
        else:
            new.append(q)
            stuck.append(q)
    return new, stuck


def run_example(ex: Example, jobs_dir: Path):
    """The example's CliRunner result (COLUMNS=250: tables not folded), README jobs under jobs_dir."""
    from typer.testing import CliRunner

    from planner.cli import app

    argv = [str(jobs_dir / a) if a in README_JOBS else a for a in ex.argv]
    return CliRunner().invoke(app, argv, env={"COLUMNS": "250"})


def output(ex: Example, jobs_dir: Path) -> str:
    """stdout + stderr of the example, the README jobs' folder written as the README does."""
    r = run_example(ex, jobs_dir)
    return (r.stdout + r.stderr).replace(f"{jobs_dir}/", "")


def update_readme() -> list[str]:
    """Rewrite README.md's quoted figures from the commands' output now; the lines it could
    not match (a table row whose plan changed) are returned for a person to update."""
    import os
    import tempfile

    jobs_dir = Path(tempfile.mkdtemp())
    for name, text in README_JOBS.items():
        (jobs_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (jobs_dir / name).write_text(text)
    os.chdir(ROOT)
    lines = README.read_text().splitlines()
    stuck_all = []
    for ex in examples():
        if not runnable(ex, ROOT):
            continue
        new, stuck = refreshed(ex.quoted, output(ex, jobs_dir))
        lines[ex.line:ex.line + len(new)] = new
        stuck_all += [f"README.md:{ex.line} planner {' '.join(ex.argv)}: {s}" for s in stuck]
    README.write_text("\n".join(lines) + "\n")
    return stuck_all


if __name__ == "__main__":  # PYTHONPATH=. python tests/readme_examples.py: refresh the README's figures
    import sys

    sys.path.insert(0, str(ROOT))
    for s in update_readme():
        print("not updated:", s)
