"""`planner collective`: what one collective costs (alpha-beta model of planner/comm.py).

Parses the options, calls comm.collective_report and hands the report to
planner/render/collective.py; no arithmetic beyond converting the options to SI units.
"""

from __future__ import annotations

from typing import Optional

import typer

from .common import Format, FormatOption, cli_errors
from ..render.collective import emit_collective


def register(app: typer.Typer) -> None:
    @app.command("collective")
    @cli_errors
    def collective(
        op: str = typer.Option(..., "--op", help="all-reduce | reduce-scatter | all-gather | all-to-all | send-recv"),
        size: str = typer.Option(
            ...,
            "--size",
            help="bytes, e.g. 141GB or 8GiB: the per-rank buffer for all-reduce; the total (gathered) size for "
            "all-gather, reduce-scatter and all-to-all, as nccl-tests prints it; the message for send-recv",
        ),
        ranks: int = typer.Option(..., "--ranks", "-n", help="ranks in the group"),
        algo: Optional[str] = typer.Option(
            None,
            "--algo",
            help="ring | tree | nvls | nvls-tree | collnet | pat | hierarchical | parameter-server | direct | auto "
            "(default: ring; direct for all-to-all and send-recv; auto: the fastest that exists where the group lands)",
        ),
        hardware: Optional[str] = typer.Option(
            None, "--hardware", "-H", help="catalog name or YAML path (default: h100-sxm); gives the link the group lands on"
        ),
        bandwidth: Optional[float] = typer.Option(
            None, "--bandwidth", help="GB/s per rank per direction, replacing the hardware's achievable figure (e.g. 50 for the seed's raw NIC rate)"
        ),
        latency: Optional[float] = typer.Option(None, "--latency", help="microseconds a round, replacing the hardware's (e.g. 10)"),
        stride: int = typer.Option(1, "--stride", help="distance between the group's ranks in the global rank order (8 = one per 8-GPU node)"),
        job_gpus: Optional[int] = typer.Option(None, "--job-gpus", help="GPUs in the whole job (default: ranks x stride)"),
        line_rate: bool = typer.Option(False, "--line-rate", help="use the hardware's raw line rates instead of achievable bandwidths"),
        worst_case_pods: bool = typer.Option(
            False, "--worst-case-pods", help="across pods, assume all traffic crosses the oversubscribed layer"
        ),
        fmt: Format = FormatOption,
    ) -> None:
        """What one collective costs: bytes each rank sends and receives, rounds, latency and
        bandwidth terms, time, and the bus bandwidth nccl-tests would report."""
        from .. import comm
        from ..units import finite, parse_bytes

        size_bytes = parse_bytes(size, "--size")
        op_c = comm.op_code(op)
        algo_c = comm._algo_code(algo)
        if size_bytes == 0 and op_c in (comm.ALL_REDUCE, comm.REDUCE_SCATTER, comm.ALL_GATHER):
            from ..errors import PlannerError

            # NVIDIA/nccl @b6475625 (2.20.3-1, the release comm.py [5] cites) src/enqueue.cc taskAppend l. 1865: a
            # collective of count 0 returns ncclSuccess before any task is made: no round, no time. Send / recv
            # (and all-to-all, a group of sends and receives) are still enqueued at count 0, so they stay priced.
            raise PlannerError(
                f"--size 0: NCCL returns at once from a zero-count {comm.OP_NAMES[op_c]} (no kernel, no round: "
                "NVIDIA/nccl 2.20.3-1 src/enqueue.cc taskAppend l. 1865), so there is nothing to price",
                "give the buffer's size in bytes, above 0, e.g. --size 1GiB")
        if ranks < 1:
            from ..errors import PlannerError

            raise PlannerError(f"--ranks must be at least 1, got {ranks}", "give the number of ranks in the group, e.g. --ranks 8")
        from ..space import check_count

        # counts, as everywhere else: up to 2**31 - 1 (planner/schema.py MAX_COUNT)
        for option, v in (("--ranks", ranks), ("--stride", stride), ("--job-gpus", job_gpus)):
            check_count((v,), option)
        needs_hw = hardware is not None or bandwidth is None or latency is None or algo_c in comm.NEEDS_PLACEMENT
        params = None
        if needs_hw:
            from ..catalog import load_hardware

            hw = load_hardware(hardware or comm.DEFAULT_HARDWARE)
            eff = dict(nvlink_efficiency=1.0, network_efficiency=1.0) if line_rate else {}
            params = comm.comm_params(hw, **eff)
        report = comm.collective_report(
            op_c,
            size_bytes,
            ranks,
            algo=algo,
            params=params,
            bandwidth=None if bandwidth is None else finite(bandwidth * 1e9, "--bandwidth (GB/s) in B/s", bandwidth),
            latency=None if latency is None else finite(latency * 1e-6, "--latency (us) in s", latency),
            stride=stride,
            job_gpus=job_gpus,
            worst_case_pods=worst_case_pods,
        )
        emit_collective(report, fmt)
