"""`planner collective` for people: the link the group lands on and what one collective
costs (bytes per rank, rounds, latency and bandwidth terms, time, algbw and busbw)."""

from __future__ import annotations

from rich.table import Table

from .common import Format, duration, emit, gbps, out, si_bytes


def emit_collective(report: dict, fmt: Format) -> None:
    emit(report, fmt, lambda: collective_table(report))


def link_lines(r: dict) -> list[str]:
    L = r["link"]
    given = [k for k in ("bandwidth", "latency") if L[f"{k}_given"]]
    if L["name"] == "given":
        return [f"link: as given, {gbps(L['bandwidth_Bps'])} per rank per direction, {duration(L['latency_s'])} a round"]
    lines = [
        f"link: {L['name']} on {L['hardware']} ({r['ranks']:,} ranks, stride {r['stride']:,}: "
        f"{L['members_per_nvlink_domain']:,} per NVLink domain, {L['nvlink_domains']:,} domain(s), {L['pods']:,} pod(s))",
        f"  NVLink {gbps(L['nvlink_line_rate_Bps'])} line rate x {L['nvlink_efficiency']:.3f} achievable "
        f"= {gbps(L['nvlink_Bps'])}, {duration(L['nvlink_latency_s'])} a round",
        f"  network {gbps(L['network_line_rate_Bps'])} per GPU x {L['network_efficiency']:.3f} achievable "
        f"= {gbps(L['network_Bps'])}, {duration(L['network_latency_s'])} a round",
    ]
    fabric = [f"NVLS {gbps(L['nvls_algbw_Bps'])} algbw inside a domain" if L["nvls"] else "no NVLS",
              "SHARP in the switches" if L["sharp"] else "no SHARP",
              f"{L['gpus_per_nic']:g} GPU(s) per NIC", f"tree hop {duration(L['tree_hop_latency_s'])}"]
    lines.append("  " + ", ".join(fabric))
    if L["crosses_pod"]:
        model = "worst case: all traffic crosses" if L["worst_case_pods"] else "ring-crossing contention model"
        lines.append(f"  crosses {L['pod_gpus']:,}-GPU pods at 1:{L['oversubscription']:g} ({model})")
    used = f"  used: {gbps(L['bandwidth_Bps'])} per rank per direction, {duration(L['latency_s'])} a round"
    if "inter_bandwidth_Bps" in L:
        used += f"; across domains {gbps(L['inter_bandwidth_Bps'])}, {duration(L['inter_latency_s'])} a round"
    if given:
        used += f" ({' and '.join(given)} as given)"
    lines.append(used)
    return lines


def collective_table(r: dict) -> None:
    algo = r["algorithm"] + {"default": " (default)", "auto": " (fastest, auto)", "given": ""}[r["algorithm_from"]]
    out.print(f"[bold]{r['op']}[/bold] of {si_bytes(r['size_bytes'])} over {r['ranks']:,} ranks, algorithm {algo}, "
              f"protocol {r['protocol']}")
    for line in link_lines(r):
        out.print(line, highlight=False)
    busiest = " (busiest rank: the server)" if r["algorithm"] == "parameter-server" else ""
    tab = Table(show_header=True, title_justify="left")
    tab.add_column("quantity")
    tab.add_column("value", justify="right")
    tab.add_row(f"bytes sent per rank{busiest}", f"{si_bytes(r['bytes_sent_per_rank'])} = {r['sent_over_size']:.5g} x size")
    tab.add_row(f"bytes received per rank{busiest}", si_bytes(r["bytes_received_per_rank"]))
    tab.add_row("rounds", f"{r['rounds']:,.0f}")
    tab.add_row("latency term", duration(r["latency_s"]))
    tab.add_row("bandwidth term", duration(r["bandwidth_s"]))
    tab.add_row("[bold]time[/bold]", f"[bold]{duration(r['time_s'])}[/bold]")
    tab.add_row("algbw (size / time)", gbps(r["algbw_Bps"]))
    tab.add_row(f"busbw (nccl-tests, x {r['busbw_factor']:.5g})", gbps(r["busbw_Bps"]))
    out.print(tab)
    alts = r.get("alternatives_s") or {}
    if len(alts) > 1:
        ranked = sorted(alts.items(), key=lambda kv: kv[1])
        out.print("algorithms that exist here (time): " + ", ".join(f"{k} {duration(v)}" for k, v in ranked), highlight=False)
