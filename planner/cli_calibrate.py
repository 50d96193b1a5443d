"""`planner calibrate ...`: fit cost figures to measurements (nccl-tests logs; GEMM later).

Commands only parse options, call planner.calibrate and print; the fit lives in
planner/calibrate/nccl.py and the profile format in planner/calibrate/profile.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .cli_common import cli_errors, out, warn
from .units import parse_bytes

calibrate_app = typer.Typer(
    name="calibrate",
    help="Fit communication (and later GEMM) figures to your own measurements; writes a profile YAML.",
    no_args_is_help=True,
)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"


def _size(b: float) -> str:
    for unit, f in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if b >= f:
            v = b / f
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{b:.0f} B"


def _nccl_tables(prof) -> list[Table]:
    """One table per fitted group: its regimes, and the busbw error from 1 MiB up."""
    tables = []
    for g in prof.nccl.groups:
        nodes = ",".join(map(str, g.nodes))
        t = Table(title=f"{g.collective}, {g.scope}, {g.ranks} ranks on {nodes} node(s)", title_justify="left")
        t.add_column("sizes (regime)")
        t.add_column("alpha us", justify="right")
        t.add_column("busbw GB/s", justify="right")
        for r in g.regimes:
            t.add_row(f"{_size(r.from_bytes)} - {_size(r.to_bytes)}", f"{r.latency_us:,.1f}", f"{r.busbw_GBps:,.1f}")
        res = g.residuals
        t.caption = (
            f"busbw error >= {_size(res.min_size_bytes)}: median {_pct(res.busbw_median_abs_rel_err)}, "
            f"max {_pct(res.busbw_max_abs_rel_err)} ({res.points} points)"
        )
        tables.append(t)
    return tables


@calibrate_app.command("nccl")
@cli_errors
def nccl(
    logs: list[Path] = typer.Argument(..., help="nccl-tests output files (all_reduce_perf, all_gather_perf, ...)", exists=False),
    output: Path = typer.Option(..., "--output", "-o", help="profile YAML to write"),
    collective: Optional[str] = typer.Option(None, "--collective", help="all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|... when the log does not name it"),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="rank count when neither Rank lines nor busbw/algbw tell it"),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="node count when the log lacks a complete set of Rank lines"),
    scope: Optional[str] = typer.Option(None, "--scope", help="intra-node|inter-node (default: intra-node if 1 node); intra-node also for one NVLink domain spanning trays (GB200 NVL72)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog name or YAML path of the GPUs measured (recorded in the profile)"),
    min_size: str = typer.Option("1MiB", "--min-size", help="smallest message size fitted, e.g. 1MiB, 256KiB, 8MB"),
) -> None:
    """Fit latency and bus bandwidth per (collective, scope, ranks) to nccl-tests logs."""
    from .calibrate.nccl import calibrate_logs, scope_warnings
    from .calibrate.profile import profile_from_calibration, write_profile

    hw = None
    if hardware is not None:
        from .catalog import load_hardware

        hw = load_hardware(hardware)
    min_bytes = int(parse_bytes(min_size, "--min-size"))
    cal = calibrate_logs(logs, collective=collective, ranks=ranks, nodes=nodes, scope=scope, min_bytes=min_bytes, warn=warn)
    if hw is not None and scope is None:
        for w in scope_warnings(cal, hw.nvlink_domain, hw.gpus_per_node):
            warn(w)
    prof = profile_from_calibration(cal, hardware=hw.name if hw else None)
    write_profile(prof, output)
    out.print("t(S) = min_k(alpha_k + S*factor(n)/busbw_k), S = nccl-tests size; the last regime is the bulk one")
    for table in _nccl_tables(prof):
        out.print(table)
    out.print(f"wrote {output} ({len(prof.nccl.groups)} group(s) from {len(cal.logs)} file(s))")


# --- gemm ---------------------------------------------------------------------------
# `planner calibrate gemm ...` is added here by the GEMM calibration task (issue 5):
# define it as `@calibrate_app.command("gemm")` + `@cli_errors`, next to `nccl` above.
# Not implemented in this module.


def register(app: typer.Typer) -> None:
    app.add_typer(calibrate_app, name="calibrate")
