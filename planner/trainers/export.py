"""Write a resolved plan (explain's / fit's JSON `plan`) in a trainer's own format: a
torchtitan TOML job file, a Megatron-LM launch script, a DeepSpeed JSON config.

Each file holds every setting of the plan the format can spell, and nothing the plan does
not fix (where the trainer needs a value the plan leaves open, such as Megatron's
--fp8-format, the choice is reported). What the format cannot express (CP or TP in a
DeepSpeed JSON, ZeRO-1/2 in torchtitan, a schedule the trainer does not run, a rank order it
does not build) is returned in `notes`, which the CLI prints on stderr; nothing is dropped
silently. Reading the file back (planner/trainers, the same option names, cited in
torchtitan.py, megatron.py and deepspeed.py) gives the same plan; tests/test_trainers.py
checks the round trip per format.

`export_plan(plan, fmt)` -> (text, notes). Units: the plan's (sequences, tokens, counts).
"""

from __future__ import annotations

import json
import math

from ..catalog import load_hardware, load_model
from ..errors import PlannerError
from . import FORMATS, FORMAT_STACKS

_TT_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}


def export_plan(plan: dict, fmt: str) -> tuple[str, list[str]]:
    """The file text for `plan` in `fmt` ('torchtitan' | 'megatron' | 'deepspeed') and the
    notes: what the format cannot express, and choices the plan did not fix."""
    if fmt not in FORMATS:
        raise PlannerError(f"--format {fmt!r} is not a trainer format", f"valid: {', '.join(FORMATS)}")
    notes: list[str] = []
    if plan.get("stack") != FORMAT_STACKS[fmt]:
        notes.append(f"stack {plan.get('stack')} -> {FORMAT_STACKS[fmt]}: the file runs on {fmt}; "
                     f"`planner explain` prices it with the {FORMAT_STACKS[fmt]} stack")
    text = {"torchtitan": _torchtitan, "megatron": _megatron, "deepspeed": _deepspeed}[fmt](plan, notes)
    return text, notes


def _plan_model(plan: dict):
    """The plan's model: the file it was read from (`model_file`: a model YAML, a config.json,
    the model a Megatron argument file defines) when the plan names one, else its catalog name
    (`model` is the ModelSpec's name, a catalog entry's only for catalog models)."""
    return load_model(plan.get("model_file") or plan["model"])


def _steps(plan: dict) -> int | None:
    t = plan.get("tokens")
    if t is None:
        return None
    per = plan["global_batch"] * plan["seq_len"]
    return int(t // per) if t % per == 0 else None


# ------------------------------------------------------------------------ torchtitan
def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string is a JSON string


def _torchtitan(plan: dict, notes: list[str]) -> str:
    from .torchtitan import TORCHTITAN_MODELS

    model = _plan_model(plan)
    L = model.num_layers
    tp, cp, pp, vpp, dp = plan["tp"], plan["cp"], plan["pp"], plan["vpp"], plan["dp"]
    sec: dict[str, dict] = {"job": {"description": f"planner export: {plan['model']} on {plan['gpus']} x {plan['hardware']}"}}
    flavor = [k for k, (zoo, _) in TORCHTITAN_MODELS.items() if zoo == plan["model"]]
    m: dict = {}
    if flavor:
        m["name"], m["flavor"] = flavor[0]
    else:
        notes.append(f"model {plan['model']}: no torchtitan flavor in the planner's table; [model] name/flavor left out "
                     f"(read it back with --model {plan['model']})")
    if plan["precision"] == "fp8":
        m["converters"] = ["float8"]
    if m:
        sec["model"] = m
    tr: dict = {}
    par: dict = {}
    gbs, mbs = plan["global_batch"], plan["micro_batch"]
    if pp > 1:
        tr["local_batch_size"] = gbs // dp
        par["pipeline_parallel_microbatch_size"] = mbs
    else:
        tr["local_batch_size"] = mbs
    tr["global_batch_size"] = gbs
    tr["seq_len"] = plan["seq_len"]
    steps = _steps(plan)
    if steps is not None:
        tr["steps"] = steps
    elif plan.get("tokens") is not None:
        notes.append(f"tokens {plan['tokens']:.6g}: not a whole number of steps of {gbs} x {plan['seq_len']} tokens; steps left out")
    tr["compile"] = bool(plan.get("torch_compile"))
    bpp = plan.get("bytes_per_param")
    if bpp == "pure-bf16":
        tr["dtype"] = "bfloat16"
    elif bpp not in (None, "mixed16"):
        notes.append(f"bytes_per_param {bpp}: torchtitan keeps bf16 weights and gradients with fp32 master and Adam "
                     "states (mixed16) or pure bf16 (training.dtype); the file runs mixed16")
    sec["training"] = tr
    # data parallelism
    sharding, shard = plan["sharding"], plan.get("shard_group")
    if sharding == "hsdp":
        rep, sh = dp // shard, shard
    elif sharding == "none":
        rep, sh = dp, 1
    else:
        rep, sh = 1, dp
        if sharding in ("zero1", "zero2"):
            notes.append(f"sharding {sharding}: torchtitan has no ZeRO-{sharding[-1]} (FSDP2 shards weights, gradients and "
                         f"optimizer states); written as FSDP over dp {dp} (data_parallel_shard_degree)")
    par = {"data_parallel_replicate_degree": rep, "data_parallel_shard_degree": sh, "tensor_parallel_degree": tp,
           "pipeline_parallel_degree": pp, "context_parallel_degree": cp, **par}
    if plan.get("ep", 1) > 1:  # torchtitan [parallelism] expert_parallel_degree (MoE models, 2025 releases)
        par["expert_parallel_degree"] = plan["ep"]
    if pp > 1:
        sched = plan["schedule"]
        if sched in _TT_SCHEDULES:
            par["pipeline_parallel_schedule"] = _TT_SCHEDULES[sched]
        else:
            notes.append(f"schedule {sched}: torchtitan's pipeline schedules (torch.distributed.pipelining) have no ZB-H1 "
                         "under that name; pipeline_parallel_schedule left at its default 1F1B")
        if vpp > 1:
            if L % (pp * vpp) == 0:
                par["pipeline_parallel_layers_per_stage"] = L // (pp * vpp)
            else:
                notes.append(f"vpp {vpp}: {L} layers do not split into pp {pp} x vpp {vpp} equal stages; "
                             "pipeline_parallel_layers_per_stage left out (torchtitan then puts 2 stages on each rank)")
    if tp > 1:
        par["enable_async_tensor_parallel"] = bool(plan.get("tp_comm_overlap"))
        if not plan.get("sequence_parallel"):
            notes.append("sequence_parallel off: torchtitan's TP always shards the norms' sequence dimension")
    elif plan.get("tp_comm_overlap"):
        notes.append("tp_comm_overlap with tp 1: nothing to overlap")
    if not plan.get("dp_comm_overlap") and dp > 1:
        notes.append("dp_comm_overlap off: torchtitan's FSDP2 / DDP always overlap the DP collectives")
    if plan["rank_order"] != "tp-cp-dp-pp":
        notes.append(f"rank_order {plan['rank_order']}: torchtitan builds its mesh as pp, dp, cp, tp (tp-cp-dp-pp)")
    sec["parallelism"] = par
    ac: dict = {"mode": plan["recompute"]}
    if plan["recompute"] == "selective":
        ac["selective_ac_option"] = "op"
    rl = plan.get("recompute_layers")
    if plan["recompute"] == "full" and rl is not None:
        per = math.ceil(L / pp)
        ns = [n for n in range(1, per + 1) if max(1, math.ceil(L / pp / n)) == rl]
        if ns:
            ac = {"mode": "selective", "selective_ac_option": str(ns[0])}
        else:
            notes.append(f"recompute_layers {rl}: torchtitan recomputes every n-th layer of a stage (ceil({per} / n) layers); "
                         f"no n gives {rl}: written as full recompute of every layer")
    sec["activation_checkpoint"] = ac
    if plan["precision"] == "fp8":
        r = plan.get("fp8_recipe") or "tensorwise"
        if r in ("tensorwise", "rowwise"):
            sec["float8"] = {"recipe_name": r}
        else:
            notes.append(f"fp8_recipe {r}: torchtitan's float8 recipes are tensorwise, rowwise, rowwise_with_gw_hp; left out "
                         "(torchao's default tensorwise)")
    head = ["# torchtitan job file written by `planner export --format torchtitan`",
            "# option names: pytorch/torchtitan torchtitan/config/job_config.py @6404b932",
            f"# hardware {plan['hardware']}, {plan['gpus']} GPUs (torchtitan takes NGPU from the launcher)"]
    lines = head
    for name, body in sec.items():
        lines += ["", f"[{name}]"] + [f"{k} = {_toml(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ Megatron
def _run_lengths(pat: list[int]) -> str:
    """A 0/1 layer list as Megatron's list expression: runs joined, "([0]*3+[1]*58)"."""
    runs: list[list[int]] = []
    for x in pat:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"


def _megatron(plan: dict, notes: list[str]) -> str:
    model = _plan_model(plan)
    hw = load_hardware(plan["hardware"])
    tp, cp, pp, vpp, dp = plan["tp"], plan["cp"], plan["pp"], plan["vpp"], plan["dp"]
    g = plan["gpus"]
    per_node = hw.gpus_per_node if g % hw.gpus_per_node == 0 else g
    args: list[tuple[str, object]] = [
        ("--num-layers", model.num_layers), ("--hidden-size", model.hidden_size), ("--ffn-hidden-size", model.ffn_hidden_size),
        ("--num-attention-heads", model.num_attention_heads)]
    if model.kv_heads != model.num_attention_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", model.kv_heads)]
    args += [("--kv-channels", model.dhead), ("--vocab-size", model.vocab_size),
             ("--max-position-embeddings", model.max_seq_len)]
    if model.moe is not None:  # Megatron-Core MoE shape (arguments.py _add_moe_args; megatron_model.py reads them back)
        moe = model.moe
        args += [("--num-experts", moe.num_experts), ("--moe-router-topk", moe.top_k)]
        if moe.expert_ffn_hidden_size:
            args.append(("--moe-ffn-hidden-size", moe.expert_ffn_hidden_size))
        if moe.num_shared_experts:  # Megatron has one shared MLP of the shared experts' total width
            fs = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size or model.ffn_hidden_size
            args.append(("--moe-shared-expert-intermediate-size", moe.num_shared_experts * fs))
            if moe.shared_expert_gate:
                args.append(("--moe-shared-expert-gate", None))
        if model.layer_pattern is None and (moe.first_k_dense or moe.layer_freq != 1):
            if moe.first_k_dense:
                pat = [1 if (i >= moe.first_k_dense and i % moe.layer_freq == 0) else 0 for i in range(model.num_layers)]
                args.append(("--moe-layer-freq", f'"{_run_lengths(pat)}"'))
            else:
                args.append(("--moe-layer-freq", moe.layer_freq))
        elif model.layer_pattern is not None:
            notes.append("layer_pattern: Megatron's flags cannot list per-layer kinds; written as the model's --model file only")
        if moe.router == "sigmoid":
            args.append(("--moe-router-score-function", "sigmoid"))
        if moe.router_bias:
            args.append(("--moe-router-enable-expert-bias", None))
    if model.mla is not None:  # Megatron-Core MLA (arguments.py _add_mla_args)
        args.append(("--multi-latent-attention", None))
        if model.mla.q_lora_rank is not None:
            args.append(("--q-lora-rank", model.mla.q_lora_rank))
        args += [("--kv-lora-rank", model.mla.kv_lora_rank), ("--qk-head-dim", model.mla.qk_nope_head_dim),
                 ("--qk-pos-emb-head-dim", model.mla.qk_rope_head_dim), ("--v-head-dim", model.mla.v_head_dim)]
    if model.mtp_layers:
        args.append(("--mtp-num-layers", model.mtp_layers))
    pos = {"rope": "rope", "learned": "learned_absolute", "none": "none"}.get(model.position_embedding)
    if pos is None:
        notes.append(f"position_embedding {model.position_embedding}: Megatron's --position-embedding-type has no such choice; left out")
    else:
        args.append(("--position-embedding-type", pos))
    if model.gated_mlp:
        args.append(("--swiglu", None))
    args.append(("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"))
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    args.append(("--disable-bias-linear", None) if not model.linear_bias else ("--add-bias-linear", None))
    d = "0.1" if model.dropout else "0.0"
    args += [("--attention-dropout", d), ("--hidden-dropout", d)]
    # parallelism
    args += [("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp), ("--context-parallel-size", cp)]
    if plan.get("ep", 1) > 1:  # Megatron-Core MoE: experts over ep ranks carved out of dp x cp
        args.append(("--expert-model-parallel-size", plan["ep"]))
    if plan.get("ep_comm_overlap"):  # the EP all-to-all overlap (combined 1F1B; planner/moe.py [8])
        args.append(("--overlap-moe-expert-parallel-comm", None))
    if vpp > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", vpp))
    if plan["schedule"] in ("gpipe", "zb-h1"):
        notes.append(f"schedule {plan['schedule']}: Megatron-LM runs 1F1B (interleaved with virtual stages); not expressible")
    if plan.get("sequence_parallel"):
        args.append(("--sequence-parallel", None))
    sharding = plan["sharding"]
    if sharding == "zero1":
        args.append(("--use-distributed-optimizer", None))
    elif sharding == "fsdp":
        args.append(("--use-torch-fsdp2", None))
    elif sharding in ("zero2", "hsdp"):
        notes.append(f"sharding {sharding}: no Megatron-LM flag shards exactly this (the distributed optimizer is ZeRO-1, "
                     "--use-torch-fsdp2 is FSDP); written as --use-distributed-optimizer")
        args.append(("--use-distributed-optimizer", None))
    rec = plan["recompute"]
    if rec == "full":
        rl = plan.get("recompute_layers")
        if rl is None:
            args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
        elif rl % vpp == 0:
            args += [("--recompute-granularity", "full"), ("--recompute-method", "block"), ("--recompute-num-layers", rl // vpp)]
        else:
            notes.append(f"recompute_layers {rl}: Megatron's block method counts layers per model chunk; {rl} is not a "
                         f"multiple of vpp {vpp}: written as {rl // vpp or 1} per chunk")
            args += [("--recompute-granularity", "full"), ("--recompute-method", "block"), ("--recompute-num-layers", rl // vpp or 1)]
    elif rec == "selective":
        args.append(("--recompute-granularity", "selective"))
    args += [("--micro-batch-size", plan["micro_batch"]), ("--global-batch-size", plan["global_batch"]),
             ("--seq-length", plan["seq_len"])]
    steps = _steps(plan)
    if steps is not None:
        args.append(("--train-iters", steps))
    elif plan.get("tokens") is not None:
        if plan["tokens"] % plan["seq_len"] == 0:
            args.append(("--train-samples", int(plan["tokens"] // plan["seq_len"])))
        else:
            notes.append(f"tokens {plan['tokens']:.6g}: not a whole number of {plan['seq_len']}-token samples; left out")
    args.append(("--bf16", None))
    if plan["precision"] == "fp8":
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", plan.get("fp8_recipe") or "delayed")]
        notes.append("--fp8-format hybrid: the plan does not fix e4m3 vs hybrid (Megatron's example recipes use hybrid)")
    if plan.get("tp_comm_overlap"):
        args.append(("--tp-comm-overlap", None))
    if plan.get("dp_comm_overlap"):
        args.append(("--overlap-grad-reduce", None))
        if sharding in ("zero1", "zero2", "hsdp"):
            args.append(("--overlap-param-gather", None))
    if plan["rank_order"] == "tp-cp-pp-dp":
        args.append(("--use-tp-pp-dp-mapping", None))
    elif plan["rank_order"] != "tp-cp-dp-pp":
        notes.append(f"rank_order {plan['rank_order']}: Megatron builds tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp with "
                     "--use-tp-pp-dp-mapping); not expressible")
    if plan.get("torch_compile"):
        notes.append("torch_compile on: Megatron-LM has no flag that compiles the model; not expressible")
    if plan.get("attention") == "eager":  # unfused core attention (megatron.py [4])
        args.append(("--attention-backend", "unfused"))
    if plan.get("account_for_embedding_in_pipeline_split"):
        args.append(("--account-for-embedding-in-pipeline-split", None))
    if plan.get("account_for_loss_in_pipeline_split"):
        args.append(("--account-for-loss-in-pipeline-split", None))
    bpp = plan.get("bytes_per_param")
    if bpp == {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}:
        args.append(("--grad-reduce-in-bf16", None))  # bf16 gradient buffer (megatron.py [5])
    elif bpp not in (None, "megatron"):
        notes.append(f"bytes_per_param {bpp}: Megatron with --bf16 keeps fp32 main gradients (18 B/param, the "
                     "megatron preset); not expressible")
    lines = ["#!/bin/bash", "# Megatron-LM launch written by `planner export --format megatron`",
             "# flag names: NVIDIA/Megatron-LM megatron/training/arguments.py",
             f"# hardware {plan['hardware']}: {plan['gpus']} GPUs = {g // per_node} node(s) x {per_node}",
             "export CUDA_DEVICE_MAX_CONNECTIONS=1", "",
             f"torchrun --nproc_per_node {per_node} --nnodes {g // per_node} pretrain_gpt.py \\"]
    body = [f"    {k}" + ("" if v is None else f" {v}") for k, v in args]
    lines += [ln + " \\" for ln in body[:-1]] + body[-1:]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ DeepSpeed
def _deepspeed(plan: dict, notes: list[str]) -> str:
    tp, cp, pp, dp = plan["tp"], plan["cp"], plan["pp"], plan["dp"]
    for name, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", plan.get("ep", 1))):
        if v > 1:
            notes.append(f"{name} {v}: a DeepSpeed JSON has no {name.upper()} (Megatron-DeepSpeed takes it as an argument); not expressible")
    if tp > 1 and plan.get("sequence_parallel"):
        notes.append("sequence_parallel: not a DeepSpeed JSON setting; not expressible")
    stage = {"none": 0, "zero1": 1, "zero2": 2, "fsdp": 3}.get(plan["sharding"])
    if stage is None:
        notes.append(f"sharding {plan['sharding']} (shard group {plan.get('shard_group')}): DeepSpeed's ZeRO stages shard "
                     "over every DP rank; written as stage 3")
        stage = 3
    gbs, mbs = plan["global_batch"], plan["micro_batch"]
    cfg = {
        "train_batch_size": gbs,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gbs // (dp * mbs),
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": stage, "overlap_comm": bool(plan.get("dp_comm_overlap"))},
    }
    if dp * mbs * cfg["gradient_accumulation_steps"] != gbs:
        notes.append(f"global batch {gbs} is not micro {mbs} x dp {dp} x a whole accumulation; DeepSpeed will refuse it")
    if plan["recompute"] != "none":
        notes.append(f"recompute {plan['recompute']}: set in the model code (Hugging Face gradient_checkpointing), "
                     "not in a DeepSpeed JSON; pass --recompute when reading it back")
    if plan["precision"] == "fp8":
        notes.append("precision fp8: not a DeepSpeed JSON setting (Transformer Engine in the model code); written as bf16")
    if plan.get("torch_compile"):
        notes.append("torch_compile on: not written (DeepSpeed's `compile` section differs between releases)")
    notes.append(f"the JSON does not name the model or the GPU count: read it back with --model {plan['model']} "
                 f"--gpus {plan['gpus']} --hardware {plan['hardware']}")
    return json.dumps(cfg, indent=2) + "\n"
