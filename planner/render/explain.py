"""`planner explain` for people: the plan, memory per GPU term by term, FLOPs per token,
and the step-time breakdown with throughput and MFU (also `fit --explain N`)."""

from __future__ import annotations

from rich.table import Table

from .common import (Format, TERM_LABELS, capacity_text, emit, gb, gib, human_count, mesh_words, out,
                     param_gather_exposed, pct, print_assumed, warn)

# memory terms in the table's order; the model states' subtotal follows the first four
_STATE_TERMS = ("weights", "gradients", "master_weights", "adam")
# FSDP's and DeepSpeed ZeRO-3's buffers (planner/memory.py FSDP_TERMS)
_FSDP_TERMS = ("fsdp_gathered_units", "fsdp_unit_grads", "mfsdp_double_buffer", "zero3_working_set", "zero3_unreduced_grads", "zero3_bucket_copy",
               "zero3_reuse_kept", "zero3_tied_output", "zero3_ipg_bucket", "zero3_persistent", "zero3_step_grads", "fsdp_unsharded_ends",
               "fsdp_unsharded_stage", "fsdp_accumulated_grads", "fsdp_end_of_backward")
_OTHER_TERMS = ("layer_activations", "output_activations", "recompute_buffer") + _FSDP_TERMS + (
    "model_buffers", "quantized_weights", "workspaces", "mpu_buffer", "dummy_wgrads", "zero2_reduce_input", "zero12_ipg_bucket",
    "zero12_grad_partition", "bf16_reduce_copy", "optimizer_step", "step_grad_copies", "offload_norm_fp64", "offload_copy_back", "stream_pools", "allocator_slack", "tp_overlap_buffers", "ep_buffers", "nvls_buffers", "reserve")
# a row only where the plan has it (TP overlap on; a DeepEP / Hybrid-EP dispatcher; NCCL NVLS communicators; each FSDP / ZeRO-3 buffer the
# plan's sharding holds; the step's gradient copies where they set the peak; DeepSpeed ZeRO-1/2's IPG buffers and
# gradient reduction; ZeRO-Offload's fp64 norm piece and its copy of the updated partition back to the GPU where they
# set the peak)
_SHOWN_IF_ANY = ("tp_overlap_buffers", "ep_buffers", "nvls_buffers", "step_grad_copies", "zero2_reduce_input", "zero12_ipg_bucket",
                 "zero12_grad_partition", "bf16_reduce_copy", "offload_norm_fp64", "offload_copy_back") + _FSDP_TERMS


def emit_explain(res: dict, warnings: list[str], fmt: Format, inherited: tuple = ()) -> None:
    """explain's JSON in `fmt`, or its tables and warnings (and the settings taken from the
    stack's defaults)."""
    emit(res, fmt, lambda: explain_table(res, warnings, inherited))


def explain_table(res: dict, warnings: list[str], inherited: tuple = ()) -> None:
    p, m, fl, prm = res["plan"], res["memory"], res["flops"], res["params"]
    mesh = mesh_words(p) + (f" (vpp {p['vpp']})" if p["vpp"] > 1 else "")
    shard = p["sharding"] + (f" (shard group {p['shard_group']})" if p["shard_group"] else "")
    from ..catalog import load_stack
    from ..plan import named_mode

    if p.get("sharding_label"):  # the mode in the stack's own words (stack_db runs.sharding label)
        shard = f"{p['sharding_label']} (level {shard})"
    elif named_mode(load_stack(p["stack"]) if p.get("stack") else None, p.get("sharding_mode")):
        shard += f" as {p['sharding_mode']}"  # not the level's first mode (stack_db runs.sharding)
    out.print(f"[bold]{p['model']}[/bold] on {p['gpus']:,} x {p['hardware']}: {mesh}")
    out.print(
        f"  {shard}, micro-batch {p['micro_batch']} x {p['microbatches_per_step']} per step, global batch "
        f"{p['global_batch']:,} x {p['seq_len']:,} tokens, recompute {p['recompute']}"
        + (f" ({' '.join(p['recompute_modules'])})" if p.get("recompute_modules") else "") + ", "
        f"SP {'on' if p['sequence_parallel'] else 'off'}, schedule {p['schedule']}"
        + (f" (groups of {p['microbatch_group']} micro-batches per virtual stage)" if p.get("microbatch_group") else "")
        + f", {p['precision']}" + (" (fp16, priced as bf16)" if p.get("fp16") else "")
    )
    opts = [f"TP overlap {'on' if p.get('tp_comm_overlap') else 'off'}"
            + (" (priced off: the trainer turns it off with MLA)" if p.get("tp_comm_overlap_runs") is False else ""),
            f"DP overlap {'on' if p.get('dp_comm_overlap') else 'off'}"
            + (" (parameter all-gather exposed)" if param_gather_exposed(p) else ""),  # the job's or the stack's
            f"torch.compile {'on' if p.get('torch_compile') else 'off'}"]
    if p.get("attention_kernel"):  # the kernel the attention core is timed with (compute.attention_kernel)
        opts.append(f"attention {p['attention_kernel']}" if p.get("attention", "flash") == "flash" else
                    f"attention {p['attention']} (its batched GEMMs, softmax and dropout)")
    if p.get("cp_comm_type"):  # the stack's named context-parallel variant, where not its default (planner/cp_comm_type.py)
        opts.append(f"CP {p['cp_comm_type']}")
    if p.get("pp_p2p_overlap") is False:  # the job turned the stack's p2p overlap off (plan.apply_pp_p2p_overlap)
        opts.append("PP p2p overlap off (blocking)")
    if "ep_comm_overlap" in p:  # MoE models
        dual = p.get("schedule") == "dualpipe" and p.get("pp", 1) > 1  # the schedule itself hides them (step.ep_comm)
        opts.append("EP overlap by DualPipe" if dual else f"EP overlap {'on' if p['ep_comm_overlap'] else 'off'}")
    if p.get("moe_shared_expert_overlap"):  # the shared experts beside the all-to-alls (step.py [38])
        opts.append("shared-expert overlap")
    if p.get("fp8_recipe"):
        opts.append(f"{p['precision']} {p['fp8_recipe']}" if p["fp8_recipe"] != p["precision"] else f"{p['precision']} recipe")
    if p.get("fp8_attention"):  # the fused attention in fp8 too (step.fp8_core, memory.py [fa8])
        opts.append("fp8 attention")
    if p.get("cuda_graph_impl"):  # checked; their static outputs in memory (planner/cuda_graphs.py)
        opts.append(f"CUDA graphs {p['cuda_graph_impl']} ({' '.join(p['cuda_graph_scope']) or 'whole layer'})")
    if p.get("power_limit_w") and p.get("power_limit_source", "tdp") != "tdp":
        src = "the job's" if p["power_limit_source"] == "job" else "the hardware's set point"
        opts.append(f"power limit {p['power_limit_w']:,.0f} W ({src}; tensor cores at "
                    f"{p.get('tensor_rate_fraction', 1.0):.1%} of the rated-power rate)")
    out.print(f"  stack {p.get('stack', 'megatron')}: {', '.join(opts)}")
    if "moe_capacity_factor" in p:  # MoE: the expert grid folded over the TP x CP x DP ranks (planner/moe.py)
        etp = p.get("etp") or p["tp"]
        edp = p["tp"] * p["cp"] * p["dp"] // max(etp * p["ep"], 1)
        out.print(f"  experts: EP {p['ep']} x expert TP {etp} x expert DP {edp} (folded over TP x CP x DP = "
                  f"{p['tp'] * p['cp'] * p['dp']:,} ranks)")
    if inherited:
        out.print("  from the stack's defaults: " + ", ".join(f"{k} {v}" for k, v in inherited))
    print_assumed(res)
    active = f", {human_count(prm['active'])} active per token" if "active" in prm and prm["active"] != prm["total"] else ""
    out.print(f"  parameters: {human_count(prm['total'])} ({prm['total']:,}){active}")
    layers = res.get("layers") or []
    if len(layers) > 1:  # a model of more than one kind of layer: which is which
        n = sum(r["count"] for r in layers if not r["layers"].startswith("multi-token"))
        out.print(f"  {n} layers:")
        for r in layers:
            where = r["layers"] if len(r["layers"]) <= 60 else r["layers"][:57].rsplit(",", 1)[0] + ", ..."
            out.print(f"    {r['count']:>4} x {r['kind']}: {where}")
    t = m["terms"]
    tab = Table(title=f"Memory per GPU (heaviest pipeline stage: {m['heaviest_stage']})", title_justify="left")
    tab.add_column("component")
    tab.add_column("GB", justify="right")
    tab.add_column("GiB", justify="right")
    # under Muon the term holds Adam's moments of the embeddings, norms and biases and Muon's momentum (memory.py [mu])
    labels = TERM_LABELS | ({"adam": "Adam m, v + Muon momentum"} if res["plan"].get("optimizer") == "muon" else {})
    rows = [(labels[k], t[k]) for k in _STATE_TERMS]
    rows.append(("[bold]model states[/bold]", t["weights"] + t["gradients"] + t["master_weights"] + t["adam"]))
    rows += [(TERM_LABELS[k], t[k]) for k in _OTHER_TERMS if k not in _SHOWN_IF_ANY or t.get(k)]
    for name, v in rows:
        tab.add_row(name, gb(v), gib(v))
    tab.add_row("[bold]total[/bold]", f"[bold]{gb(m['total_bytes'])}[/bold]", gib(m["total_bytes"]))
    tab.add_row(f"usable (HBM x {1 - m['headroom']:.2f})", gb(m["usable_bytes"]), gib(m["usable_bytes"]))
    out.print(tab)
    used = 100 * m["total_bytes"] / m["capacity_bytes"]
    verdict = "[green]fits[/green]" if m["fits"] else "[red]does not fit[/red]"
    out.print(f"  {verdict}: {used:.1f}% of {capacity_text(m)}")
    if "allocated_bytes" in m:
        out.print(f"  peaks: allocated {gib(m['allocated_bytes'])} GiB (live tensors), reserved "
                  f"{gib(m['reserved_bytes'])} GiB (the caching allocator's), + {gib(m['total_bytes'] - m['reserved_bytes'])} "
                  f"GiB outside it; the stack logs its {m.get('reported_as', 'max_reserved').replace('_', ' ')}")
    if "reserved_high_bytes" in m:
        fr = m.get("fragmentation", {})
        out.print(f"  fragmentation band: reserved {gib(m['reserved_bytes'])} to {gib(m['reserved_high_bytes'])} GiB "
                  f"(reserved / allocated up to {fr.get('reserved_over_allocated_max', 1.45):.2f}, measured on FSDP1 "
                  f"with the default allocator; this stack runs the {fr.get('allocator', 'default').replace('_', ' ')} "
                  f"allocator); the gate uses the bottom")
        if fr.get("empty_unused_memory_level"):
            out.print(f"  --empty-unused-memory-level {fr['empty_unused_memory_level']}: torch.cuda.empty_cache() between "
                      "the step's phases frees only wholly free segments: neither peak moves; the band's top is "
                      "measured without it")
    if len(m.get("stages", {})) > 1:
        per = ", ".join(f"{name} {gib(st['total_bytes'])}" for name, st in m["stages"].items())
        out.print(f"  per pipeline stage (GiB): {per}; the table is the {m['heaviest_stage']} stage's, the largest")
    out.print(
        f"  FLOPs per token: 6N {fl['flops_per_token_6n']:.3e} + attention ({fl['attention_counted']}) "
        f"{fl['attention_flops_per_token']:.3e} = model {fl['model_flops_per_token']:.3e}; "
        f"hardware (causal attention, with recompute) {fl['hardware_flops_per_token']:.3e}"
    )
    if "total_training_flops" in fl:
        out.print(f"  training compute for {fl['training_tokens']:.3g} tokens: {fl['total_training_flops']:.3e} FLOPs (6N)")
    if "time" in res:
        time_table(res)
    if "placement" in res:
        placement_lines(res)
    if "moe" in res:
        moe_lines(res)
    for w in warnings:
        warn(w)


TIME_ROWS = [
    ("compute (GEMMs, attention, memory-bound ops, recompute)", "compute_s"),
    ("TP communication (exposed)", "tp_comm_s"),
    ("CP communication (exposed)", "cp_comm_s"),
    ("PP send/recv", "pp_comm_s"),
    ("DP / sharding communication (exposed)", "dp_comm_exposed_s"),
    ("pipeline bubble", "bubble_s"),
    ("optimizer step", "optimizer_s"),
]


def _step_end_text(t: dict) -> str:
    """', but for the step's end: ...' naming the stages whose step-end work the terms hold (time.step_end_stages:
    step.step_end_stage, each the largest of the stages' own, not the critical stage's), '' where the JSON has none."""
    ends = t.get("step_end_stages")
    if not ends:
        return ""
    whose = {"end pair": "the end pair's"}
    g, o = (whose.get(ends[k], f"the {ends[k]} stage's") for k in ("gradients", "optimizer"))
    grads = (["the DP / sharding communication"] if t["dp_comm_s"] > 0 else []) + (
        ["the SP-gradient all-reduce (in TP)"] if "tp_sp_norm_grads_s" in t else [])
    if not grads:
        said = f"the optimizer step is {o}"
    elif g == o:
        said = f"{', '.join(grads)} and the optimizer step are {g}"
    else:
        said = f"{' and '.join(grads)} {'are' if len(grads) > 1 else 'is'} {g}, the optimizer step {o}"
    return f", but for the step's end (each stage's own, the largest counted): {said}"


def time_table(res: dict) -> None:
    """The step-time breakdown and throughput of explain's JSON."""
    t, thr = res["time"], res["throughput"]
    step = t["step_s"]
    tab = Table(title="Step time per GPU (critical pipeline stage)", title_justify="left")
    tab.add_column("term")
    tab.add_column("seconds", justify="right")
    tab.add_column("% of step", justify="right")
    rows = list(TIME_ROWS)
    if "ep_comm_s" in t:
        rows = rows[:3] + [("EP dispatch + combine (MoE dispatcher, exposed)", "ep_comm_s")] + rows[3:]
    if "moe_permute_s" in t:
        label = ("MoE dense gating + dispatch/combine einsums" if "moe_gating_einsum_s" in t  # DeepSpeed-MoE (moe_gating)
                 else "MoE router top-k + token permutation (memory-bound)")
        rows = rows[:1] + [(label, "moe_permute_s")] + rows[1:]
    if "moe_host_s" in t:
        rows = rows[:2] + [("MoE host issue after the dispatcher's sync (exposed)", "moe_host_s")] + rows[2:]
    if "muon_ns_s" in t:  # Muon (step.py [28])
        rows = rows + [("Muon Newton-Schulz (optimizer step GEMMs)", "muon_ns_s")]
    for name, key in rows:
        tab.add_row(name, f"{t[key]:,.4g}", f"{100 * t[key] / step:.1f}%")
    tab.add_row("[bold]step[/bold]", f"[bold]{step:,.4g}[/bold]", "100%")
    out.print(tab)
    cs = t.get("critical_stage")
    if cs and cs["stage"] != "only":  # a pipeline: which stage the terms are (step.critical_stage)
        label = "the end pair (stage 0 and the last on the same ranks, DualPipe)" if cs["stage"] == "end pair" else cs["stage"]
        held = "".join(f" + {h}" for h in cs["holds"])
        comm = "TP, CP, PP and EP" if "ep_comm_s" in t else "TP, CP and PP"
        out.print(f"  critical pipeline stage: {label} ({cs['layers']} layers{held}), the slowest micro-batch by its "
                  f"compute plus its own {comm} communication; the compute and communication terms above are that stage's"
                  + _step_end_text(t))
    hidden = t["dp_comm_s"] - t["dp_comm_exposed_s"]
    if t["dp_comm_s"] > 0:
        e = t.get("dp_comm_experts_s", 0.0)  # a MoE model's routed experts' share (step.dp_expert_comm)
        experts = (f"; of it the routed experts' {e:,.4g} s over their expert-DP ranks, "
                   f"{e - t['dp_comm_experts_exposed_s']:,.4g} s of theirs hidden" if e > 0 else "")
        out.print(f"  DP traffic {t['dp_comm_s']:,.4g} s per step, {hidden:,.4g} s of it hidden behind compute{experts}")
    if "tp_wgrad_regather_s" in t:  # step.py [35]
        out.print(f"  of TP communication, {t['tp_wgrad_regather_s']:,.4g} s per step are the backward's re-gathers of the "
                  "column-parallel linears' sequence-parallel inputs for their wgrad GEMMs, exposed past their dgrad GEMMs")
    if "tp_head_s" in t:  # step.py [36]
        out.print(f"  of TP communication, {t['tp_head_s']:,.4g} s per step are the critical stage's embedding, output "
                  "layer and vocab-parallel loss collectives")
    if "tp_shared_experts_s" in t:  # step.py [37]
        out.print(f"  of TP communication, {t['tp_shared_experts_s']:,.4g} s per step are the MoE layers' shared experts' "
                  "own TP collectives (fc1's all-gather, fc2's reduce-scatter under SP, all-reduces without; each way), "
                  "exposed")
    if "ep_shared_experts_tp_s" in t:  # step.py [38]
        out.print(f"  of EP communication, {t['ep_shared_experts_tp_s']:,.4g} s per step are the shared experts' side-stream "
                  "TP collectives (--moe-shared-expert-overlap) left exposed past the all-to-alls beside them")
    if "offload_cpu_adam_s" in t:  # CPU offload (planner/offload.py)
        host = res["memory"].get("host") or {}
        cap = host.get("capacity_bytes_per_node")
        gpu_part = ("" if "offload_gpu_adam_s" not in t else
                    f", beside the GPU's Adam over the partition's rest {t['offload_gpu_adam_s']:,.4g} s (the longer counts)")
        skipped = ((res.get("calibration") or {}).get("host_adam") or {}).get("not_applied")
        eff = (f"at an assumed fraction, offload.HOST_MEMORY_EFFICIENCY{'; ' + skipped if skipped else ''}"
               if not host.get("adam_efficiency_calibrated")
               else f"at the calibrated fraction {host['adam_efficiency']:.4g} of its peak, {host['adam_efficiency_source']}")
        out.print(f"  CPU offload: the optimizer step is the host's Adam {t['offload_cpu_adam_s']:,.4g} s (memory-bound "
                  f"on the node's DRAM {eff}){gpu_part} + the host link's copies {t['offload_link_s']:,.4g} s, "
                  f"{t['offload_link_exposed_s']:,.4g} s of them exposed; host memory {host.get('bytes_per_rank', 0) / 2**30:,.2f} "
                  f"GiB a rank, {host.get('bytes_per_node', 0) / 2**30:,.2f} GiB a node of {host.get('ranks_per_node')} "
                  + ("ranks (no host memory in the hardware entry: not gated)" if cap is None else
                     f"ranks, of the node's {cap / 2**30:,.0f} GiB ({'fits' if host.get('fits') else 'DOES NOT FIT'})"))
    if t.get("unfused_passes_s", 0) > 0:
        out.print(f"  of compute, {t['unfused_passes_s']:,.4g} s per step are the stack's elementwise passes outside its "
                  "fused kernels (scaled rotary, activation clamp, expert output bias: stack kernels)")
    if "tp_fp8_amax_s" in t:  # delayed fp8 scaling (step.py [34])
        out.print(f"  of TP communication, {t['tp_fp8_amax_s']:,.4g} s per step are delayed fp8 scaling's amax all-reduces "
                  "over TP x DP x CP (synchronous: exposed; step.py [34])")
    if "tp_fp8_dynamic_amax_s" in t:  # torchao float8 tensorwise under TP (step.py [39])
        out.print(f"  of TP communication, {t['tp_fp8_dynamic_amax_s']:,.4g} s per step are torchao float8's per-cast amax "
                  "all-reduces over TP (waited before each cast: exposed; step.py [39])")
    if "eager_core_s" in t:
        out.print(f"  of compute, {t['eager_core_s']:,.4g} s per step are the critical stage's eager attention cores: batched "
                  f"GEMMs {t['eager_core_gemms_s']:,.4g} s, softmax {t['eager_core_softmax_s']:,.4g} s, dropout "
                  f"{t['eager_core_dropout_s']:,.4g} s"
                  + (f", ALiBi's bias copied into the score buffer {t['eager_core_alibi_s']:,.4g} s (its read back in "
                     "the GEMMs)" if "eager_core_alibi_s" in t else "") + " (stack kernels score_*)")
    if "mamba_scan_s" in t:
        out.print(f"  of compute, {t['mamba_scan_s']:,.4g} s per step are the critical stage's Mamba selective scans (CUDA "
                  "cores: the slower of the FLOPs at the fp32 peak and the bytes at HBM bandwidth)")
    if t.get("cp_comm_total_s", 0) > 0 or t.get("cp_compute_s", 0) > 0:
        scan = t.get("cp_scan_comm_s", 0.0)  # the state-space / linear-attention layers' exchanges, all exposed
        out.print(f"  CP ring: K/V traffic {max(t['cp_comm_total_s'] - scan, 0.0):,.4g} s per step, "
                  f"{max(t['cp_comm_s'] - scan, 0.0):,.4g} s "
                  f"of it exposed; the split attention's merges and smaller kernels {t.get('cp_compute_s', 0.0):,.4g} s "
                  "(in compute)")
        if scan > 0:
            out.print(f"  CP of the state-space / linear-attention layers: {scan:,.4g} s per step, all exposed (the scans "
                      "wait for their inputs: Megatron-Core's all-to-alls, Mamba's state passing), beside the K/V ring's")
    out.print(
        f"  throughput: {thr['tokens_per_s']:,.0f} tokens/s ({thr['tokens_per_s_per_gpu']:,.0f} per GPU), "
        f"{thr['hardware_tflops_per_gpu']:,.0f} TFLOP/s per GPU executed ({thr['tflops_per_gpu']:,.0f} in model FLOPs); "
        f"MFU {pct(thr['mfu'])} "
        f"(6N + {res['flops']['attention_counted']} attention, PaLM; recompute not counted), {pct(thr['mfu_6n'])} (6N); "
        f"HFU {pct(thr['hfu'])} (what the kernels run: causal attention, recompute) "
        f"of {thr['peak_tflops']:,.0f} TFLOP/s"
    )
    if "training_days" in thr:
        out.print(f"  training: {thr['training_steps']:,.0f} steps, {thr['training_days']:,.1f} days, "
                  f"{thr['gpu_hours']:,.0f} GPU-hours (failure-free; see `planner budget`)")
    if "batch_ramp" in thr:  # the job's batch ramp (explain.batch_ramp): each phase at its own batch
        phases = "; ".join(f"from {p['from_tokens']:,.4g} tokens batch {p['global_batch']:,} "
                           f"({p['microbatches_per_step']} micro-batches): {p['steps']:,.0f} steps of {p['step_s']:,.4g} s"
                           for p in thr["batch_ramp"])
        out.print(f"  with the batch ramp: {thr['training_steps_ramp']:,.0f} steps, {thr['training_days_ramp']:,.1f} days, "
                  f"{thr['gpu_hours_ramp']:,.0f} GPU-hours ({phases})")
    cal = res.get("calibration")
    if cal:
        used = ", ".join(cal["used"]) or "none of its entries (no plan collective matched)"
        if cal["covered"]:  # nccl / gemm sections
            out.print(f"  calibration {cal['profile']}: measured figures used for {used}; defaults elsewhere")
        run = cal.get("run")
        if run and run["applied"]:
            knobs = ", ".join(f"{k} {v:.4g}" for k, v in run["applied"].items())
            out.print(f"  run calibration ({'/'.join(run['stacks'])} on {run['hardware']}): {knobs}, fitted to "
                      f"measured runs; they change {', '.join(run['affects'])}")
        elif run:
            out.print(f"  run calibration not applied: {run.get('not_applied')}")


_AXES = (("tp", "TP"), ("cp", "CP"), ("ep", "EP"), ("expert_dp", "expert DP"), ("dp", "DP"), ("pp", "PP"))


def placement_lines(res: dict) -> None:
    """Which link each parallel group's collectives use (planner/placement.py)."""
    pl = res["placement"]
    parts = []
    for key, label in _AXES:
        g = pl.get(key)
        if g is None or g["ranks"] == 1:
            continue
        span = "" if g["nvlink_domains"] == 1 else f" over {g['nvlink_domains']} domains, {g['members_per_domain']} each"
        if key == "dp" and res["plan"]["cp"] > 1:  # the gradient group is DP x CP (placement.groups): "DP128" beside
            label = "DP x CP "  # the header's DP 64 read as a contradiction before the 2026-12-07 audit5
        parts.append(f"{label}{g['ranks']} {g['tier']}{span}")
    if parts:
        out.print(f"  placement (NVLink domains of {pl['nvlink_domain_in_use']} GPUs in use): " + "; ".join(parts))


def moe_lines(res: dict) -> None:
    """explain's MoE terms: dispatcher, EP tier, grouped-GEMM efficiency, fixed overhead, routing imbalance."""
    m = res["moe"]
    extra = ", fp8 dispatch" if m["fp8_dispatch"] else ""
    extra += f", tokens to at most {m['route_nodes']} nodes" if m["route_nodes"] else ""
    if m.get("route_groups"):
        extra += f", group-limited routing ({m['route_groups'][1]} of {m['route_groups'][0]} expert groups per token)"
    if m.get("capacity_rows"):  # HybridEP's non-blocking dispatch (layers/moe.py [19])
        extra += (f", non-blocking: the expert tensors at {m['capacity_rows']:g} rows a local token, the GEMMs over the "
                  "rows routed")
    loop = m.get("experts") == "per_expert_loop"
    if loop:  # the stack's code loops over the experts: no token dispatcher (stack moe_experts)
        out.print("  MoE experts: a Python loop over the experts on each GPU (each expert's tokens gathered, its own "
                  "GEMMs, its output index-added; stack moe_experts), no token dispatcher, no expert parallelism")
    else:
        out.print(f"  MoE dispatcher {m['dispatcher']} ({m['dispatcher_description']}{extra}) on {m['ep_tier']}: "
                  f"dispatch {m['dispatch_s']:,.4g} s + combine {m['combine_s']:,.4g} s"
                  + ((f" + probabilities' all-gather and reduce-scatter {m['probs_a2a_s']:,.4g} s + routing map's "
                      f"all-gather {m['counts_gather_s']:,.4g} s" if m["dispatcher"] == "allgather" else
                      f" + probabilities' all-to-alls {m['probs_a2a_s']:,.4g} s + token counts' exchange "
                      f"{m['counts_gather_s']:,.4g} s") if m.get("probs_a2a_s") or m.get("counts_gather_s") else "")
                  + " per step before overlap (exposed: the EP row)")
    # DeepSpeed-MoE's Experts.forward is a loop of per-expert calls too (stack moe_gating, layers/moe.py [18])
    out.print(f"  MoE {'per-expert GEMMs' if loop or m.get('dense_gating') else 'grouped GEMM'}: "
              f"{m['local_experts']:g} local experts x "
              f"{m['tokens_per_expert']:,.0f} tokens, "
              f"efficiency {pct(m['grouped_gemm_efficiency'])} of the dense peak; fixed MoE overhead "
              f"{m['fixed_overhead_s']:,.4g} s per step ({m['fixed_overhead']})")
    g = m.get("dense_gating")
    if g:  # DeepSpeed-MoE's one-hot gating and einsums (stack moe_gating, layers/moe.py [18])
        sv = g["saved_bytes"]
        out.print(f"  MoE dense gating (DeepSpeed-MoE): {g['tokens']:,.0f} tokens, capacity {g['capacity']:,.0f} an expert; "
                  f"one layer and micro-batch saves {gib(sum(sv.values()))} GiB ("
                  + ", ".join(f"{k.removeprefix('moe_')} {gib(v)}" for k, v in sv.items())
                  + f") and holds {gib(g['forward_transient_bytes'])} GiB more in its forward, "
                  f"{gib(g['backward_transient_bytes'])} in its backward; dispatch and combine einsums "
                  f"{g['einsum_flops_forward'] / 1e12:,.4g} + {g['einsum_flops_backward'] / 1e12:,.4g} TFLOP forward + "
                  f"backward, {res['time'].get('moe_gating_einsum_s', 0.0):,.4g} s a step (in the gating row)")
    out.print(f"  MoE routing imbalance ({m['load_balancing']}, planner/imbalance.py): the busiest EP rank gets "
              f"{m['rank_load']:.3g} x the mean routed tokens, adding {m['imbalance_s']:,.4g} s per step and "
              f"{gib(m['imbalance_bytes'])} GiB over balanced routing")
