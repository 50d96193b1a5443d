"""A long mutation-fuzzing pass over every reader (tests/fuzzing.py), outside the test suite.

    PYTHONPATH=. python scripts/fuzz.py --runs 10000 --seed 24 --jobs 2 --out fuzz-report

The runs are spread evenly over the input kinds (the GEMM reader one kind per file format)
and cut into chunks; chunk c of kind k mutates with random.Random(f"{k}:{seed}:{c}"), so a
pass is reproducible from (--runs, --seed, --chunk). Each input runs in-process through
typer's CliRunner, as in tests/test_fuzz.py, with a wall-clock limit (--timeout): an input
that runs past it is a hang. The report (OUT/report.json, and a summary on stdout) counts the
exit codes per kind and lists every failure (a traceback, an exit code other than 0/1/2, an
exit 2 without `error:` first, a hang, or what the kind's own check found: the job-fields kind's fit rows that
explain, given each row's reproduce line, prices otherwise; the config-fit kind's, and its rows' exports that read
back as another plan or memory; the cli-options kind's exit 2 without a hint, `--format json` output that does not
parse, and an option that replaces a job file's value without a note; the job-fields, megatron-recent, newest-fields and precision-flags kinds' check that disagrees
with explain, and their explain's and check's plans' exports that read back as another plan or memory) with its command line; each failing input is saved
under OUT/inputs/ to reproduce it, and each kind's slowest input under OUT/slowest/ (its command
line in the report's `slowest`). Exit 0 when there is no failure, 1 otherwise.

    PYTHONPATH=. python scripts/fuzz.py --ignored-keys --out ignored-report

runs instead the metamorphic check of the trainer readers' ignored lists (tests/ignored_keys.py) over the shipped
trainer configs and the fuzz harness' trainer-config seeds (ignored_keys.fuzz_cases), every listed-ignored key changed
and removed and every other key's value changed: OUT/ignored.json lists each finding (a key listed ignored whose change
moves the price or is refused; a key not listed whose change moves nothing and says nothing), exit 1 if any.
With `--mutate N --seed S` it also checks N mutated inputs of each trainer kind (the fuzz pass's mutations, at most 12
changes each way an input), each one with a finding saved under OUT/inputs/.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


class Hang(BaseException):
    """Raised by the alarm; a BaseException, so CliRunner does not catch it as the command's."""


def _alarm(signum, frame):
    raise Hang()


def _chunk(task: tuple) -> dict:
    kind, seed, chunk, n, timeout, out = task
    from typer.testing import CliRunner

    from fuzzing import _lay_out, check_result, mutate, split_gemm, targets
    from planner.cli import app

    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{kind}-{chunk}-"))
    t = split_gemm(targets(work / "seeds"))[kind]
    rng = random.Random(f"{kind}:{seed}:{chunk}")
    runner, names = CliRunner(), sorted(t.seeds)
    signal.signal(signal.SIGALRM, _alarm)
    res = {"kind": kind, "tried": 0, "codes": {}, "failures": [], "slowest_s": 0.0}
    for i in range(n):
        name = names[i % len(names)]
        data = mutate(rng, t, t.seeds[name])
        args = _lay_out(t, name, data, work / f"{chunk}-{i}", i % len(t.args))
        t0 = time.perf_counter()
        signal.alarm(timeout)
        try:
            r = runner.invoke(app, args)
            why, code = check_result(r), r.exit_code
            if why is None and t.check is not None:  # the kind's own invariant (job-fields: explain agrees with fit)
                why = t.check(args, r)
        except Hang:
            why, code = f"hang: still running after {timeout} s", "hang"
        finally:
            signal.alarm(0)
        took = time.perf_counter() - t0
        if took > res["slowest_s"]:  # the slowest input, to reproduce it (saved below)
            res["slowest_s"], slowest = took, (i, args, data)
        res["tried"] += 1
        res["codes"][str(code)] = res["codes"].get(str(code), 0) + 1
        if why is not None:
            saved = Path(out) / "inputs" / f"{kind}-{chunk}-{i}{Path(args_file(t, name)).suffix}"
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(data)
            res["failures"].append({"kind": kind, "seed": name, "chunk": chunk, "input": i, "why": why,
                                    "args": [str(a) for a in args], "saved": str(saved)})
    if res["tried"]:
        i, args, data = slowest
        name = names[i % len(names)]
        saved = Path(out) / "slowest" / f"{kind}-{chunk}-{i}{Path(args_file(t, name)).suffix}"
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(data)
        res["slowest"] = {"chunk": chunk, "input": i, "s": round(res["slowest_s"], 2),
                          "args": [str(a) for a in args], "saved": str(saved)}
    return res


def args_file(t, name: str) -> str:
    """The input's file name (the kind's, or `input` with the seed's suffix)."""
    return t.filename or f"input{t.seed_suffix.get(name, t.suffix)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000, help="inputs in all (spread evenly over the kinds)")
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--chunk", type=int, default=50, help="inputs per task")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--timeout", type=int, default=120, help="seconds an input may run before it is a hang")
    ap.add_argument("--kinds", default="", help="comma list of kinds (default: all)")
    ap.add_argument("--out", default="fuzz-report", help="folder for report.json and the failing inputs")
    ap.add_argument("--ignored-keys", action="store_true",
                    help="the ignored-lists check (tests/ignored_keys.py) over the shipped configs and fuzz seeds")
    ap.add_argument("--mutate", type=int, default=0,
                    help="with --ignored-keys: also N mutated inputs of each trainer kind (ignored_keys.mutated_cases, "
                         "--seed); the changes per input and direction then at most 12")
    a = ap.parse_args(argv)
    if a.ignored_keys:
        return ignored_keys_pass(a.out, a.seed, a.mutate)
    from fuzzing import split_gemm, targets

    kinds = sorted(split_gemm(targets(Path(tempfile.mkdtemp(prefix="fuzz-kinds-")))))
    if a.kinds:
        kinds = [k for k in kinds if k in a.kinds.split(",")]
    per_kind = -(-a.runs // len(kinds))
    tasks = [(k, a.seed, c, min(a.chunk, per_kind - c * a.chunk), a.timeout, a.out)
             for k in kinds for c in range(-(-per_kind // a.chunk))]
    t0 = time.time()
    results = []
    with ProcessPoolExecutor(a.jobs) as ex:
        for r in ex.map(_chunk, tasks):
            results.append(r)
            print(f"{time.time() - t0:7.0f} s  {r['kind']}: {r['tried']} tried, {len(r['failures'])} failures", flush=True)
    summary = {}
    for r in results:
        s = summary.setdefault(r["kind"], {"tried": 0, "codes": {}, "failures": 0, "slowest_s": 0.0})
        s["tried"] += r["tried"]
        s["failures"] += len(r["failures"])
        if r["slowest_s"] >= s["slowest_s"] and "slowest" in r:
            s["slowest"] = r["slowest"]
        s["slowest_s"] = round(max(s["slowest_s"], r["slowest_s"]), 2)
        for c, n in r["codes"].items():
            s["codes"][c] = s["codes"].get(c, 0) + n
    failures = [f for r in results for f in r["failures"]]
    report = {"runs": sum(s["tried"] for s in summary.values()), "seed": a.seed, "chunk": a.chunk,
              "wall_s": round(time.time() - t0), "kinds": summary, "failures": failures}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    for f in failures:
        print(f"FAIL {f['kind']} ({f['seed']}, chunk {f['chunk']} input {f['input']}): {f['why'][:200]}\n"
              f"     {' '.join(f['args'])}\n     saved: {f['saved']}")
    return 1 if failures else 0


def ignored_keys_pass(out: str, seed: int = 24, mutate: int = 0) -> int:
    """tests/ignored_keys.py over the shipped trainer configs and the fuzz harness' trainer seeds: OUT/ignored.json;
    mutate > 0: also `mutate` mutated inputs of each trainer kind (ignored_keys.mutated_cases at `seed`), at most 12
    changes each way an input (the first pass over them, 2026-12-07, found ignored-bridge-189-0.sh)."""
    import ignored_keys as ik

    cases = ik.shipped_cases()
    names = {c.data for c in cases}
    cases += [c for c in ik.fuzz_cases(Path(tempfile.mkdtemp(prefix="fuzz-ignored-"))) if c.data not in names]
    fixed = len(cases)
    if mutate:
        cases += ik.mutated_cases(Path(tempfile.mkdtemp(prefix="fuzz-ignored-")), seed, mutate)
    t0, report = time.time(), {"cases": [], "findings": []}
    pricer = ik.Pricer()  # the changed files in a temporary folder, removed at the end
    for n, case in enumerate(cases):
        tally = ik.Tally()
        limit = None if n < fixed else 12
        ik.ignored_findings(case, pricer, tally, limit)
        ik.priced_findings(case, pricer, tally, limit)
        if tally.findings and n >= fixed:  # a mutated input with a finding: saved to reproduce it
            saved = Path(out) / "inputs" / (case.name.replace(":", "-").replace("/", "_") + case.suffix)
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(case.data)
        report["cases"].append({"case": case.name, "options": case.options, "tried": tally.tried,
                                "findings": len(tally.findings), "not_mutable": [k for _, k in tally.unmutable]})
        report["findings"] += [vars(f) for f in tally.findings]
        print(f"{time.time() - t0:7.0f} s  {case.name}: {tally.tried} changes, {len(tally.findings)} findings", flush=True)
    pricer.close()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "ignored.json").write_text(json.dumps(report, indent=1))
    for f in report["findings"]:
        print(f"FIND {f['case']} [{f['fmt']}] {f['key']}: {f['change']}: {f['what']}: {f['detail'][:200]}")
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
