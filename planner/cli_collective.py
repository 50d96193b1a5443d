"""`planner collective`: what one collective costs (alpha-beta model of planner/comm.py).

Parses the options, calls comm.collective_report and renders the numbers; no arithmetic
beyond unit conversion for display.
"""

from __future__ import annotations

from typing import Optional

import typer

from .cli_common import Format, FormatOption, cli_errors


def _bytes(x: float) -> str:
    if x != x:  # NaN
        return "-"
    for unit, f in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= f:
            return f"{x / f:,.2f} {unit}"
    return f"{x:,.0f} B"


def _secs(x: float) -> str:
    if x == 0:
        return "0 s"
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(x) >= f:
            return f"{x / f:,.3f} {unit}" if unit == "s" else f"{x / f:,.2f} {unit}"
    return f"{x / 1e-9:,.1f} ns"


def _gbps(x: float) -> str:
    return f"{x / 1e9:,.1f} GB/s"


def _link_lines(r: dict) -> list[str]:
    L = r["link"]
    given = [k for k in ("bandwidth", "latency") if L[f"{k}_given"]]
    if L["name"] == "given":
        return [f"link: as given, {_gbps(L['bandwidth_Bps'])} per rank per direction, {_secs(L['latency_s'])} a round"]
    lines = [
        f"link: {L['name']} on {L['hardware']} ({r['ranks']:,} ranks, stride {r['stride']:,}: "
        f"{L['members_per_nvlink_domain']:,} per NVLink domain, {L['nvlink_domains']:,} domain(s), {L['pods']:,} pod(s))",
        f"  NVLink {_gbps(L['nvlink_line_rate_Bps'])} line rate x {L['nvlink_efficiency']:.3f} achievable "
        f"= {_gbps(L['nvlink_Bps'])}, {_secs(L['nvlink_latency_s'])} a round",
        f"  network {_gbps(L['network_line_rate_Bps'])} per GPU x {L['network_efficiency']:.3f} achievable "
        f"= {_gbps(L['network_Bps'])}, {_secs(L['network_latency_s'])} a round",
    ]
    if L["crosses_pod"]:
        model = "worst case: all traffic crosses" if L["worst_case_pods"] else "ring-crossing contention model"
        lines.append(f"  crosses {L['pod_gpus']:,}-GPU pods at 1:{L['oversubscription']:g} ({model})")
    used = f"  used: {_gbps(L['bandwidth_Bps'])} per rank per direction, {_secs(L['latency_s'])} a round"
    if "inter_bandwidth_Bps" in L:
        used += f"; across domains {_gbps(L['inter_bandwidth_Bps'])}, {_secs(L['inter_latency_s'])} a round"
    if given:
        used += f" ({' and '.join(given)} as given)"
    lines.append(used)
    return lines


def _table(r: dict) -> None:
    from rich.table import Table

    from .cli_common import out

    algo = r["algorithm"] + {"default": " (default)", "auto": " (fastest, auto)", "given": ""}[r["algorithm_from"]]
    out.print(f"[bold]{r['op']}[/bold] of {_bytes(r['size_bytes'])} over {r['ranks']:,} ranks, algorithm {algo}")
    for line in _link_lines(r):
        out.print(line, highlight=False)
    busiest = " (busiest rank: the server)" if r["algorithm"] == "parameter-server" else ""
    tab = Table(show_header=True, title_justify="left")
    tab.add_column("quantity")
    tab.add_column("value", justify="right")
    tab.add_row(f"bytes sent per rank{busiest}", f"{_bytes(r['bytes_sent_per_rank'])} = {r['sent_over_size']:.5g} x size")
    tab.add_row(f"bytes received per rank{busiest}", _bytes(r["bytes_received_per_rank"]))
    tab.add_row("rounds", f"{r['rounds']:,.0f}")
    tab.add_row("latency term", _secs(r["latency_s"]))
    tab.add_row("bandwidth term", _secs(r["bandwidth_s"]))
    tab.add_row("[bold]time[/bold]", f"[bold]{_secs(r['time_s'])}[/bold]")
    tab.add_row("algbw (size / time)", _gbps(r["algbw_Bps"]))
    tab.add_row(f"busbw (nccl-tests, x {r['busbw_factor']:.5g})", _gbps(r["busbw_Bps"]))
    out.print(tab)


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
            help="ring | tree | parameter-server | hierarchical | nvls | direct | auto "
            "(default: ring; direct for all-to-all and send-recv)",
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
        from . import comm
        from .render import emit
        from .units import parse_bytes

        size_bytes = parse_bytes(size, "--size")
        op_c = comm.op_code(op)
        algo_c = comm._algo_code(algo)
        if ranks < 1:
            from .errors import PlannerError

            raise PlannerError(f"--ranks must be at least 1, got {ranks}", "give the number of ranks in the group, e.g. --ranks 8")
        needs_hw = hardware is not None or bandwidth is None or latency is None or algo_c in (comm.HIERARCHICAL, comm.NVLS, comm.AUTO)
        params = None
        if needs_hw:
            from .catalog import load_hardware

            hw = load_hardware(hardware or comm.DEFAULT_HARDWARE)
            eff = dict(nvlink_efficiency=1.0, network_efficiency=1.0) if line_rate else {}
            params = comm.comm_params(hw, **eff)
        report = comm.collective_report(
            op_c,
            size_bytes,
            ranks,
            algo=algo,
            params=params,
            bandwidth=None if bandwidth is None else bandwidth * 1e9,
            latency=None if latency is None else latency * 1e-6,
            stride=stride,
            job_gpus=job_gpus,
            worst_case_pods=worst_case_pods,
        )
        emit(report, fmt, lambda: _table(report))
