"""Trace a grid of torchtitan 0.3.0 FSDP2 configurations with tt_fake_mem.py (CPU, fake tensors)
and append one JSON line per configuration to results/sweep.jsonl. Resumable: a configuration
already in the file is not traced again. Never run in CI (PyTorch is several GB).

    oracle-venv/bin/python scripts/memory_oracle/sweep.py [--jobs 2] [--only 8B|70B]
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "sweep.jsonl")


def grid():
    """(flavor, world, tp, seq, bs, ac, loss): 8B and 70B, TP 1-8, AC none/selective/full,
    micro-batch 1-4, seq 2k-32k (issue 21's oracle target)."""
    cfgs = []
    # 8B, FSDP 8, no TP: AC x micro-batch x seq
    for ac, bs, seq in itertools.product(("none", "selective", "full"), (1, 2, 4), (2048, 8192)):
        cfgs.append(("8B", 8, 1, seq, bs, ac, "ce"))
    for ac, seq in itertools.product(("selective", "full"), (16384, 32768)):
        cfgs.append(("8B", 8, 1, seq, 1, ac, "ce"))
    # 8B with TP (world 8: fsdp 8/tp)
    for tp, ac in itertools.product((2, 4, 8), ("none", "selective", "full")):
        cfgs.append(("8B", 8, tp, 8192, 2, ac, "ce"))
    # 8B, other FSDP degrees
    for world in (32, 64):
        cfgs.append(("8B", world, 1, 8192, 1, "selective", "ce"))
    # 8B chunked loss (0.3.0's default ChunkedLossWrapper)
    for ac, bs in itertools.product(("selective", "full"), (1, 2)):
        cfgs.append(("8B", 8, 1, 8192, bs, ac, "chunked"))
    # 70B: TP 8 / 4 / 2 on 64-256 ranks
    for ac, bs in itertools.product(("selective", "full"), (1, 2, 4)):
        cfgs.append(("70B", 64, 8, 8192, bs, ac, "ce"))
    for ac, bs in itertools.product(("selective", "full"), (1, 2)):
        cfgs.append(("70B", 64, 4, 8192, bs, ac, "ce"))
    cfgs.append(("70B", 64, 8, 32768, 1, "full", "ce"))
    cfgs.append(("70B", 64, 8, 2048, 4, "selective", "ce"))
    cfgs.append(("70B", 128, 2, 4096, 1, "full", "ce"))
    return cfgs


def key(c):
    return json.dumps(c)


def done():
    out = set()
    if os.path.exists(OUT):
        for line in open(OUT):
            d = json.loads(line)
            a = d["args"]
            out.add(key((a["flavor"], a["world"], a["tp"], a["seq"], a["bs"], a["ac"], a["loss"])))
    return out


def run(c):
    flavor, world, tp, seq, bs, ac, loss = c
    cmd = [sys.executable, os.path.join(HERE, "tt_fake_mem.py"), "--flavor", flavor, "--world", str(world), "--tp", str(tp),
           "--seq", str(seq), "--bs", str(bs), "--ac", ac, "--loss", loss, "--cuda-like", "rms,sdpa", "--json", OUT]
    r = subprocess.run(cmd, capture_output=True, text=True)
    status = "ok" if r.returncode == 0 else f"FAILED rc={r.returncode}: {r.stderr.strip().splitlines()[-1:] }"
    print(c, status, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", default=None)
    a = p.parse_args()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    have = done()
    todo = [c for c in grid() if key(c) not in have and (a.only is None or c[0] == a.only)]
    print(f"{len(todo)} configurations to trace", flush=True)
    with ThreadPoolExecutor(a.jobs) as ex:
        list(ex.map(run, todo))


if __name__ == "__main__":
    main()
