"""The uncalibrated collective model against the small rows (8 B - 64 KiB) of the nccl-tests logs in
tests/data/nccl_logs, under the Simple protocol alone, with NCCL's LL / LL128 at its tuner's figures everywhere
(comm.LL_NETWORK_PRICED set for the run: the evidence of comm.py [19]) and as the planner prices them (LL / LL128
inside one NVLink domain only) (planner/comm.py "Protocols").

Usage: PYTHONPATH=. python scripts/nccl_small_sizes.py [--markdown]

Each log is read by planner.calibrate.nccl.calibrate_logs with the options its test gives
(tests/test_calibrate_nccl.LOG_OPTIONS) and placed as calibrate.nccl.compare_to_model places it (the log's ranks
consecutive, comm.group_collective with AUTO). err = model time / measured time - 1, every row (out-of-place and
in-place). Prints per log the signed and absolute medians and per size the two placements' errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import comm  # noqa: E402
from planner.calibrate.nccl import calibrate_logs  # noqa: E402
from tests.test_calibrate_nccl import options  # noqa: E402
from tests.test_comm import load_hw  # noqa: E402

HARDWARE = {"a100_16gpu_2node_allreduce_aws-p4de-efa.txt": "tests/data/hardware/aws-p4de.yaml",
            "a100_8gpu_allreduce_stas00-mlengineering-TRIMMED.txt": "a100-sxm-80gb",
            "b200_16gpu_2node_allgather_google-dranet.txt": "b200",
            "h100_16gpu_2node_allreduce_dgx06-dgx07.txt": "h100-sxm",
            "h100_8gpu_allreduce_aws-p5-batch.txt": "h100-sxm"}
SMALL = 65536


def main() -> None:
    md = "--markdown" in sys.argv
    for log, hw in HARDWARE.items():
        hardware = load_hw(hw)
        kw = options(log)
        kw.pop("hardware", None)
        cal = calibrate_logs([Path("tests/data/nccl_logs") / log], hardware=hardware, **kw)
        params = comm.comm_params(hardware)
        for (coll, _, n), sws in cal.groups.items():
            pts = [p for sw in sws for p in sw.points if p.size <= SMALL]
            s = np.array([p.size for p in pts], dtype=np.float64)
            t = np.array([p.time for p in pts])
            rows = {}
            for label, protocols, network_ll in (("Simple", "Simple", False), ("NCCL tuner", None, True),
                                                 ("planner", None, False)):
                comm.LL_NETWORK_PRICED = network_ll  # NCCL's network LL / LL128 figures priced (the evidence) or not
                try:
                    cost, _, algo = comm.group_collective(comm.op_code(coll), s, n, 1, params, comm.AUTO,
                                                          job_gpus=n, protocols=protocols)
                finally:
                    comm.LL_NETWORK_PRICED = False
                err = cost.time_s / t - 1.0
                picks = sorted({f"{comm.ALGO_NAMES[int(a)]}/{comm.PROTO_NAMES[int(p)]}"
                                for a, p in zip(np.broadcast_to(algo, s.shape), np.broadcast_to(cost.protocol, s.shape))})
                rows[label] = (err, cost.time_s, picks)
            print(f"\n{'### ' if md else ''}{log}: {coll} over {n} ranks on {hardware.name}, {len(s)} rows of "
                  f"{int(s.min()):,}-{int(s.max()):,} B")
            for label, (err, _, picks) in rows.items():
                print(f"{'- ' if md else '  '}{label}: signed median {np.median(err):+.1%}, median |err| "
                      f"{np.median(np.abs(err)):.1%}, max |err| {np.max(np.abs(err)):.1%} ({', '.join(picks)})")
            if md:
                print("\n| size (B) | measured (us) | Simple model (us) | err | NCCL tuner (us) | err "
                      "| planner (us) | err |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for size in np.unique(s):
                k = s == size
                cells = [f"{int(size):,}", " / ".join(f"{x * 1e6:.1f}" for x in t[k])]
                for r in rows.values():
                    cells += [f"{r[1][k][0] * 1e6:.1f}", " / ".join(f"{x:+.1%}" for x in r[0][k])]
                print("| " + " | ".join(cells) + " |" if md else "    " + "  ".join(cells))


if __name__ == "__main__":
    main()
