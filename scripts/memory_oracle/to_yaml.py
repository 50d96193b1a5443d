"""Convert results/sweep.jsonl (sweep.py) into tests/data/memory/oracle_sweep_torch2.13_tt0.3.0.yaml,
the memory-rows format planner/memory_rows.py reads (`oracle_rows:`, the OracleRow schema).
Plain Python (no torch needed):

    python3 scripts/memory_oracle/to_yaml.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "results", "sweep.jsonl")
PP_SRC = os.path.join(HERE, "results", "pp.jsonl")  # tt_fake_pp.py --json (one line per traced rank)
DST = os.path.join(HERE, "..", "..", "tests", "data", "memory", "oracle_sweep_torch2.13_tt0.3.0.yaml")

HEAD = """# Allocated-memory oracle sweep: torchtitan 0.3.0's real Llama 3 training step traced on CPU with
# fake tensors by scripts/memory_oracle/tt_fake_mem.py (a copy of shared/tools/memory_oracle),
# driven by scripts/memory_oracle/sweep.py, converted by scripts/memory_oracle/to_yaml.py.
# Versions: torch 2.13.0+cpu, torchtitan 0.3.0, torchao 0.18.0, triton 3.9.0 (PyPI wheels), Python 3.11.
# Every row: rank 0 of a fake process group of `world` ranks (FSDP over world / tp, TP tp with
# loss parallel), --cuda-like rms,sdpa (CUDA's flash SDPA and fused RMSNorm saves), fused AdamW,
# one untracked warm-up iteration then FSDPMemTracker around the second; figures in GiB (2^30 B),
# the peak ALLOCATED bytes and the per-phase peaks. Rows with `pp`: tt_fake_pp.py (torchtitan's
# pipeline_llm, 1F1B, SAC; planner's copy adds --cuda-like and torch 2.13's step() call), one traced
# rank each (`stage`), only the global peak. Not seen: reserved memory, NCCL, the CUDA
# context, torch.compile, float8. Facts only: none of these figures may tune a constant.
"""


def yq(v):
    return json.dumps(v)


def main():
    rows = []
    for line in open(SRC):
        d = json.loads(line)
        a = d["args"]
        fsdp = a["world"] // a["tp"]
        rid = f"sweep_{a['flavor'].lower()}_fsdp{fsdp}" + (f"_tp{a['tp']}" if a["tp"] > 1 else "") + \
            f"_s{a['seq']}_bs{a['bs']}_{a['ac']}_{a['loss']}"
        pp = d["phase_peaks"]
        rows.append((rid, a, fsdp, d, pp))
    rows.sort(key=lambda r: r[0])
    out = [HEAD, "source: scripts/memory_oracle (torch 2.13.0+cpu, torchtitan 0.3.0, torchao 0.18.0)\n",
           "torchtitan_version: 0.3.0\n", "memory_kind: allocated\n", "oracle_rows:\n"]
    seen = set()
    for rid, a, fsdp, d, pp in rows:
        if rid in seen:
            continue
        seen.add(rid)
        loss = {"ce": "ce_fp32", "chunked": "chunked"}[a["loss"]]
        out.append(f"- id: {rid}\n  flavor: {a['flavor']}\n  world: {a['world']}\n  fsdp: {fsdp}\n  tp: {a['tp']}\n"
                   f"  seq: {a['seq']}\n  micro_batch: {a['bs']}\n  ac: {a['ac']}\n  loss: {loss}\n"
                   f"  ops: cuda-like(rms,sdpa)\n  tracker: fsdp\n  spmd_backend: {a['spmd_backend']}\n"
                   f"  loss_parallel: {str(a['tp'] > 1).lower()}\n"
                   f"  peak_allocated_gib: {d['peak']['Total']}\n  phase_peaks_gib:\n")
        for ph in ("forward", "loss", "backward", "optimizer"):
            out.append(f"    {ph}: {pp.get(ph, {}).get('Total')}\n")
        out.append("  at_peak_gib:\n")
        for k in ("Sharded Param", "Unsharded Param", "Buffer", "Sharded Grad", "Unsharded Grad", "Activation",
                  "Temp", "All Gather", "Reduce Scatter", "OptState"):
            out.append(f"    {k.replace(' ', '')}: {d['peak'].get(k)}\n")
    # pipeline ranks (tt_fake_pp.py): torchtitan 0.3.0's split counts the embedding and the output
    # layer as one layer each (pipeline_parallel_first/last_stage_less_layers = 1)
    if os.path.exists(PP_SRC):
        for line in open(PP_SRC):
            d = json.loads(line)
            a = d["args"]
            if not d.get("ok"):
                continue
            fsdp = a["world"] // a["pp"]
            stage = d["stage_indices"][0]
            rid = f"sweep_8b_{a['layers']}layers_pp{a['pp']}_fsdp{fsdp}_s{a['seq']}_mb{a['bs'] // a['mbs']}x{a['mbs']}_stage{stage}"
            if rid in seen:
                continue
            seen.add(rid)
            out.append(f"- id: {rid}\n  flavor: 8B\n  layers: {a['layers']}\n  world: {a['world']}\n  fsdp: {fsdp}\n  tp: 1\n"
                       f"  pp: {a['pp']}\n  stage: {stage}\n  microbatches: {a['bs'] // a['mbs']}\n  schedule: {a['schedule']}\n"
                       f"  seq: {a['seq']}\n  micro_batch: {a['mbs']}\n  ac: selective\n  loss: ce_fp32\n"
                       f"  ops: {'cuda-like(rms,sdpa)' if a.get('cuda_like') == 'rms,sdpa' else 'cpu default'}\n"
                       # tt_fake_pp.py l. 56 and 67 set partial_dtensor (no argument, so none in the args)
                       f"  tracker: {a['tracker']}\n  spmd_backend: partial_dtensor\n  peak_allocated_gib: {d['peak']['Total']}\n  at_peak_gib:\n")
            for k in ("Sharded Param", "Unsharded Param", "Buffer", "Sharded Grad", "Unsharded Grad", "Activation",
                      "Temp", "All Gather", "Reduce Scatter", "OptState"):
                out.append(f"    {k.replace(' ', '')}: {d['peak'].get(k)}\n")
    open(DST, "w").write("".join(out).replace(": None\n", ": null\n"))
    print(f"{len(seen)} rows -> {os.path.normpath(DST)}", file=sys.stderr)


if __name__ == "__main__":
    main()
