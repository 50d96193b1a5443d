"""A Megatron-DeepSpeed launch script read as the job it launches (issue 22).

microsoft/Megatron-DeepSpeed (and BigScience's fork, which trained BLOOM) is Megatron-LM's
argument list plus DeepSpeed's: `deepspeed pretrain_gpt.py ... --deepspeed --deepspeed_config
ds_config.json --zero-stage 1 ...`. The Megatron reader (megatron.py) recognizes it from the flags
present, never from a file name: any of `--deepspeed`, `--deepspeed_config` (also spelled
`--deepspeed-config`), `--deepscale` / `--deepscale_config`, `--zero-stage`,
`--deepspeed-activation-checkpointing`, `--partition-activations`, `--no-pipeline-parallel`
(MDS_MARKERS). Then:

- the stack is `megatron-deepspeed` (stack_db/megatron-deepspeed.yaml; `--stack` on the command
  line replaces it, with a note, as for any file value);
- the ds_config JSON the script names is read through the DeepSpeed JSON reader (deepspeed.py:
  ZeRO stage, batch keys, bf16 / fp16, ZeRO-3 knobs) at the script's TP and PP: the file the
  script itself writes with `cat <<EOT > $CONFIG_JSON` (its body expanded with the script's
  constants: megatron.command_words), else the file resolved relative to the script; neither
  found, or a body with a variable the script does not set, is refused naming it (exit 2);
- which side wins where both state a setting, read at microsoft/Megatron-DeepSpeed @f4157bea [1]:
  * the ZeRO stage: the JSON's. training.py l. 504-623 hands DeepSpeed `config=args.deepspeed_config_dict`
    (the JSON); `--zero-stage` (default 1, arguments.py l. 1487) is read by pretrain_gpt.py l. 46-50
    `deepspeed.zero.Init(enabled=args.zero_stage == 3)` (the model built partitioned) and by
    optimizer statistics (training.py l. 1056). A difference between 1 and 2 (or 0) is listed as
    assumed; one side 3 and the other not is refused: with the JSON at 3 the model is built whole on
    every GPU before the engine partitions it, with `--zero-stage 3` alone it is built partitioned for
    an engine that never gathers it;
  * the micro-batch: Megatron's data loader yields `--micro-batch-size` samples (training.py
    l. 715) while DeepSpeed's engine counts `train_micro_batch_size_per_gpu`: both stated and
    different is refused, naming both;
  * the global batch: Megatron's. training.py l. 1253-1258 calls DeepSpeed's
    `set_train_batch_size(dp x --micro-batch-size x num_microbatches)` every step, which keeps the
    micro-batch and sets the accumulation (deepspeed/runtime/engine.py @38327e07 l. 524-540; it
    raises unless the batch is a multiple of micro x dp, refused here likewise); a JSON
    `train_batch_size` that differs is listed as assumed (DeepSpeed still checks the JSON's own
    triple at start-up, deepspeed/runtime/config.py _batch_assertion: the DeepSpeed reader does);
  * bf16 / fp16: the JSON's `bf16.enabled` / `fp16.enabled` run the engine; a script's `--bf16`
    with the JSON's fp16 enabled, or `--fp16` with bf16, is refused;
  * data-parallel overlap: the JSON's `zero_optimization.overlap_comm` (the engine's reduction),
    not `--overlap-grad-reduce` (Megatron's DDP, not built under DeepSpeed).
- activation checkpointing to the job's recompute [1]: `--checkpoint-activations` re-runs every
  layer in chunks of `--checkpoint-num-layers` (default 1) in both models (transformer.py l. 1691,
  2082; gpt_model.py l. 446-447): recompute full (a chunk over 1 layer: the existing reader's
  uniform chunk note). `--recompute-granularity full` with a method other than uniform is not run by
  DeepSpeed's pipeline model (gpt_model.py l. 446-452: interval 0; the model GPTModelPipe unless
  `--no-pipeline-parallel`): recompute none, listed. `--deepspeed-activation-checkpointing` swaps
  Megatron's checkpoint function for deepspeed.checkpointing's (initialize.py l. 175-193, 266): the
  same layers re-run, listed as ignored unless `--partition-activations` (the kept layer inputs split
  over the TP ranks), `--checkpoint-in-cpu` (kept on the host) or `--contigious-checkpointing`
  change what is kept: with recompute on and (for partitioning) TP > 1 these are refused, the
  planner has no field for them; else listed as ignored (no effect).
- Megatron-DeepSpeed's spellings of the shape flags are read as Megatron-LM's: `--num-key-value-heads N`
  as `--group-query-attention --num-query-groups N`, `--rotary-position-embeddings-theta` as `--rotary-base`,
  `--normalization layernorm|rmsnorm` as LayerNorm / RMSNorm ([1] arguments.py l. 442-449, 623, 634-636, 647-648).
- `--no-pipeline-parallel` with `--pipeline-model-parallel-size` > 1 is refused as arguments.py l. 94-96
  asserts; `--ds-sequence-parallel-size` > 1 (DeepSpeed-Ulysses) and `--remote-device` cpu / nvme
  (ZeRO-3 parameters on the host) are refused; `--cpu-optimizer` is listed as not modelled (the
  optimizer states priced on the GPU, an upper bound), as the Megatron reader lists offloading.

`planner check`'s suggestions on such a script are spelled as Megatron-DeepSpeed flags and the JSON's
keys (trainers/spelling.py, fmt `megatron-deepspeed`).

References
[1] microsoft/Megatron-DeepSpeed @f4157bea69f3df8c6cb66f2ebcda66ba03d1288e (2024-12-24):
    megatron/arguments.py (deepspeed.add_config_arguments l. 54; validate_args l. 94-96;
    --checkpoint-activations l. 864, --no-pipeline-parallel l. 954, _add_zero_args l. 1483-1497,
    _add_activation_checkpoint_args), pretrain_gpt.py model_provider l. 36-60, megatron/training.py,
    megatron/initialize.py, megatron/model/gpt_model.py, megatron/model/transformer.py.
[2] microsoft/DeepSpeed @38327e07 deepspeed/__init__.py _add_core_arguments (--deepspeed,
    --deepspeed_config, --deepscale, --deepscale_config), deepspeed/runtime/engine.py
    set_train_batch_size, deepspeed/launcher/runner.py (--num_gpus, --num_nodes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .. import files
from ..errors import PlannerError
from .megatron_model import _int  # the Megatron reader's count check (ASCII digits, bounds, the flag named)

# store_true flags of Megatron-DeepSpeed's arguments.py [1] and DeepSpeed's add_config_arguments [2]
MDS_BOOL_FLAGS = {"--deepspeed", "--deepscale", "--deepspeed_mpi", "--no-pipeline-parallel", "--checkpoint-activations",
                  "--deepspeed-activation-checkpointing", "--partition-activations", "--contigious-checkpointing",
                  "--checkpoint-in-cpu", "--synchronize-each-layer", "--profile-backward", "--cpu-optimizer",
                  "--zero-reduce-scatter", "--zero-contigious-gradients", "--use-pin-memory", "--no-query-key-layer-scaling",
                  *("--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-v2", "--use-flash-attn-triton",
                    "--use-flash-attn-builder")}
FLASH_FLAGS = ("--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-v2", "--use-flash-attn-triton",
               "--use-flash-attn-builder")
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepscale_config")
MDS_MARKERS = ("--deepspeed", "--deepscale", *CONFIG_FLAGS, "--zero-stage", "--deepspeed-activation-checkpointing",
               "--partition-activations", "--no-pipeline-parallel")
MDS_FLAGS = {*MDS_BOOL_FLAGS, *CONFIG_FLAGS, "--zero-stage", "--checkpoint-num-layers", "--ds-sequence-parallel-size",
             "--remote-device", "--zero-reduce-bucket-size", "--zero-allgather-bucket-size", "--num-key-value-heads",
             "--rotary-position-embeddings-theta", "--data-impl"}
MDS_COMMIT = "microsoft/Megatron-DeepSpeed @f4157bea"
# read with no effect on memory or step time, and why
MDS_IGNORED = {
    "--deepspeed": "turns DeepSpeed's engine on: the stack megatron-deepspeed",
    "--deepscale": "DeepSpeed's deprecated --deepspeed: the stack megatron-deepspeed",
    "--deepspeed_mpi": "how the ranks are discovered (MPI): start-up only",
    "--synchronize-each-layer": "a deepspeed.checkpointing debugging switch (synchronize=), off in training scripts",
    "--profile-backward": "deepspeed.checkpointing profiling timers",
    "--zero-reduce-scatter": "not read by the engine: the JSON's zero_optimization configures ZeRO (training.py "
                             "deepspeed.initialize(config=args.deepspeed_config_dict))",
    "--zero-contigious-gradients": "not read by the engine: the JSON's zero_optimization configures ZeRO",
    "--zero-reduce-bucket-size": "not read by the engine: the JSON's zero_optimization configures ZeRO",
    "--zero-allgather-bucket-size": "not read by the engine: the JSON's zero_optimization configures ZeRO",
    "--use-pin-memory": "pinned host memory for ZeRO-3 parameters initialised on the host (--remote-device)",
    "--no-query-key-layer-scaling": "the attention scores' scaling factor: numerics only",
    "--data-impl": "the dataset's on-disk format (mmap, lazy, cached): data loading, between steps",
}


def is_megatron_deepspeed(flags: dict) -> bool:
    return any(f in flags for f in MDS_MARKERS)


def split_flags(flags: dict, where: str) -> tuple[dict, list[str], list[str], list[str], list[str]]:
    """Take Megatron-DeepSpeed's own flags out of `flags` (left for the Megatron reader) and turn the
    checkpointing flags into the Megatron flags that run the same recompute. Returns (the DeepSpeed
    flags, ignored, assumed, not_modelled, unmodelled)."""
    ds = {k: flags.pop(k) for k in list(flags) if k in MDS_FLAGS}
    ignored, assumed, not_modelled, unmodelled = [], [], [], []
    # Megatron-DeepSpeed's spellings of Megatron-LM's model-shape flags ([1] arguments.py l. 623, 442-449, 634-636,
    # 647-648), read as the Megatron reader reads Megatron-LM's
    if "--num-key-value-heads" in ds and "--num-query-groups" not in flags:
        flags["--group-query-attention"] = True
        flags["--num-query-groups"] = ds["--num-key-value-heads"]
    if "--rotary-position-embeddings-theta" in ds and "--rotary-base" not in flags:
        flags["--rotary-base"] = ds["--rotary-position-embeddings-theta"]
    if flags.get("--normalization") in ("layernorm", "rmsnorm"):
        flags["--normalization"] = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[flags["--normalization"]]
    for k in ds:
        if k in MDS_IGNORED:
            ignored.append(f"{k}{'' if ds[k] is True else '=' + str(ds[k])} ({MDS_IGNORED[k]})")
    pp = _int(where, flags, "--pipeline-model-parallel-size", 1)
    tp = _int(where, flags, "--tensor-model-parallel-size", 1)
    pipe = "--no-pipeline-parallel" not in ds
    if not pipe:
        if pp != 1:
            raise PlannerError(f"{where}--no-pipeline-parallel with --pipeline-model-parallel-size {pp}",
                               f"Megatron-DeepSpeed asserts pipeline_model_parallel_size == 1 with it ({MDS_COMMIT} "
                               "megatron/arguments.py l. 94-96)")
        ignored.append("--no-pipeline-parallel (Megatron's GPTModel instead of DeepSpeed's pipeline model at pp 1: "
                       "the same layers)")
    sp = _int(where, ds, "--ds-sequence-parallel-size", 1)
    if sp > 1:
        raise PlannerError(f"{where}--ds-sequence-parallel-size {sp}: DeepSpeed-Ulysses sequence parallelism is not "
                           "modelled (the stack megatron-deepspeed runs no sequence split, stack_db runs.max_cp 1)",
                           "price it at --ds-sequence-parallel-size 1, or as Megatron-LM context parallelism")
    if "--ds-sequence-parallel-size" in ds:
        ignored.append("--ds-sequence-parallel-size=1 (no sequence split)")
    remote = ds.get("--remote-device", "none")
    if remote not in ("none", True):
        raise PlannerError(f"{where}--remote-device {remote}: ZeRO-3 parameters initialised on the host "
                           "(pretrain_gpt.py zero.Init remote_device) are not modelled", "drop --remote-device")
    if "--remote-device" in ds:
        ignored.append("--remote-device=none (parameters initialised on the GPU)")
    if "--cpu-optimizer" in ds:
        unmodelled.append("--cpu-optimizer (the optimizer on the host: its states priced on the GPU, an upper bound)")
    # ---- activation checkpointing -> Megatron's recompute flags (module docstring)
    if "--checkpoint-activations" in ds:
        n = _int(where, ds, "--checkpoint-num-layers", 1)
        given = {f: flags.get(f) for f in ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")
                 if f in flags}
        flags.update({"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": str(n)})
        assumed.append(f"recompute=full: --checkpoint-activations re-runs every layer in chunks of --checkpoint-num-layers "
                       f"{n} ({MDS_COMMIT} megatron/model/transformer.py l. 2082, gpt_model.py l. 446-447)"
                       + (f"; it wins over {', '.join(f'{k} {v}' for k, v in given.items())}" if given else ""))
    elif "--checkpoint-num-layers" in ds:
        ignored.append(f"--checkpoint-num-layers={ds['--checkpoint-num-layers']} (no --checkpoint-activations)")
    elif pipe and flags.get("--recompute-granularity") == "full" and flags.get("--recompute-method") != "uniform":
        dropped = {f: flags.pop(f) for f in ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")
                   if f in flags}
        ignored.append(f"{' '.join(f'{k}={v}' for k, v in dropped.items())} (DeepSpeed's pipeline model re-runs layers "
                       f"only with --checkpoint-activations or the uniform method: {MDS_COMMIT} megatron/model/gpt_model.py "
                       "l. 446-452, interval 0; recompute none)")
    recompute = flags.get("--recompute-granularity") in ("full", "selective") or "--recompute-activations" in flags
    dsac = "--deepspeed-activation-checkpointing" in ds
    if dsac:
        ignored.append("--deepspeed-activation-checkpointing (deepspeed.checkpointing replaces Megatron's checkpoint "
                       f"function: the same layers re-run, the same inputs kept; {MDS_COMMIT} megatron/initialize.py "
                       "l. 175-193, 266)")
    for flag, what, needs_tp in (("--partition-activations", "the kept layer inputs split over the TP ranks", True),
                                 ("--checkpoint-in-cpu", "the kept layer inputs moved to the host", False),
                                 ("--contigious-checkpointing", "the kept layer inputs copied into one preallocated "
                                                                "buffer", False)):
        if flag not in ds:
            continue
        if dsac and recompute and (tp > 1 or not needs_tp):
            raise PlannerError(f"{where}{flag}: {what} (deepspeed.checkpointing.configure, {MDS_COMMIT} "
                               "megatron/initialize.py l. 186-193) is not modelled: the planner prices the layer "
                               "inputs kept whole on the GPU", f"drop {flag} to price the job without it")
        why = ("no --deepspeed-activation-checkpointing" if not dsac else "no activation checkpointing" if not recompute
               else "tensor-parallel size 1: nothing to split")
        ignored.append(f"{flag} ({why}: no effect)")
    return ds, ignored, assumed, not_modelled, unmodelled


def config_text(ds: dict, where: str, script: Path, heredocs: dict) -> tuple[str, str]:
    """(the ds_config's name as shown, its text): the script's own heredoc for that file, else the
    file relative to the script."""
    named = [f for f in CONFIG_FLAGS if f in ds]
    if not named:
        raise PlannerError(f"{where}--deepspeed without --deepspeed_config: the DeepSpeed engine needs its JSON "
                           f"({MDS_COMMIT} megatron/training.py _create_ds_config_dict)",
                           "add --deepspeed_config ds_config.json, the file the job runs with")
    if len(named) > 1 and len({str(ds[f]) for f in named}) > 1:
        raise PlannerError(f"{where}{' and '.join(f'{f} {ds[f]}' for f in named)} name different files",
                           "give the one the job runs with")
    name = str(ds[named[0]]).strip("\"'")
    if name in heredocs:
        text, unknown, line = heredocs[name]
        if unknown:
            raise PlannerError(f"{where}the ds_config {name} written by the script's heredoc (line {line}) uses "
                               f"{', '.join('$' + u for u in sorted(unknown))}, which the script does not set",
                               "set them at the script's top level, or pass the JSON the job runs with")
        return f"{script} (line {line}: {name})", text
    if "$" in name:
        raise PlannerError(f"{where}{named[0]} {name}: the script does not set its variables",
                           "set them at the script's top level, or write the file's name")
    p = Path(name)
    p = p if p.is_absolute() else script.parent / p
    if not files.is_file(p):
        raise PlannerError(f"{where}{named[0]} {name}: no such file ({p}; resolved relative to the script) and no "
                           f"`cat <<EOT > {name}` in the script", "put the ds_config JSON beside the script")
    return str(p), files.read_text(p, "give the DeepSpeed ds_config.json the script names")


def merge(cfg, ds: dict, flags: dict, where: str, script: Path, heredocs: dict, hardware: Optional[str],
          extra: tuple) -> None:
    """Lay the ds_config JSON over the Megatron reader's job (in place): module docstring."""
    from .deepspeed import read as read_json

    ignored, assumed, not_modelled, unmodelled = extra
    job = cfg.job
    label, text = config_text(ds, where, script, heredocs)
    tp, pp = job["tp"], job["pp"]
    try:
        dcfg = read_json(Path(label), text, model=job["model"], gpus=job["gpus"], hardware=hardware,
                         parallel={"tp": tp, "pp": pp, "cp": job.get("cp", 1)})
    except PlannerError as e:
        raise PlannerError(f"{where}the ds_config the script names: {e.message}", e.hint) from None
    dj, stated = dcfg.job, dcfg.stated
    jw = f"{label}: "
    dp = job["gpus"] // (tp * pp * job.get("cp", 1))
    # the micro-batch: both stated must agree
    mbs_json = stated.get("train_micro_batch_size_per_gpu")
    if "--micro-batch-size" in flags and mbs_json is not None and mbs_json != job["micro_batch"]:
        raise PlannerError(f"{where}--micro-batch-size {job['micro_batch']} but {jw}train_micro_batch_size_per_gpu "
                           f"{mbs_json}: Megatron's data loader yields --micro-batch-size samples ({MDS_COMMIT} "
                           "megatron/training.py l. 715) while DeepSpeed's engine counts the JSON's",
                           "make them equal")
    if "--micro-batch-size" not in flags:
        job["micro_batch"] = dj["micro_batch"]
        cfg.assumed[:] = [a for a in cfg.assumed if not a.startswith("micro_batch=1: --micro-batch-size absent")]
        assumed.append(f"micro_batch={dj['micro_batch']}: the JSON's (--micro-batch-size absent)")
    # the global batch: Megatron's, set on the engine every step
    g, m = job["global_batch"], job["micro_batch"]
    if g % (m * dp):
        raise PlannerError(f"{where}global batch {g} is not a multiple of micro-batch {m} x {dp} data-parallel ranks: "
                           "DeepSpeed's set_train_batch_size raises (deepspeed/runtime/engine.py @38327e07 l. 534-536), "
                           f"which Megatron-DeepSpeed calls every step ({MDS_COMMIT} megatron/training.py l. 1253-1258)",
                           "make --global-batch-size a multiple of micro-batch x dp")
    if stated.get("train_batch_size") is not None and stated["train_batch_size"] != g:
        assumed.append(f"global_batch={g}: Megatron's, not the JSON's train_batch_size {stated['train_batch_size']}: "
                       "Megatron-DeepSpeed sets DeepSpeed's batch to dp x --micro-batch-size x micro-batches every step "
                       f"({MDS_COMMIT} megatron/training.py l. 1253-1258; engine.py set_train_batch_size keeps the "
                       "micro-batch and sets the accumulation)")
    # the ZeRO stage: the JSON's
    js = stated.get("zero_optimization.stage", 0)
    zs = _int(where, ds, "--zero-stage", 1)  # arguments.py l. 1487 default 1
    shown = f"--zero-stage {zs}" if "--zero-stage" in ds else "--zero-stage absent (default 1)"
    if (js == 3) != (zs == 3):
        raise PlannerError(f"{where}{shown} but {jw}zero_optimization.stage {js}: Megatron-DeepSpeed builds the model "
                           f"with deepspeed.zero.Init(enabled=args.zero_stage == 3) ({MDS_COMMIT} pretrain_gpt.py l. 46-50) "
                           "and DeepSpeed's engine runs the JSON's stage (training.py deepspeed.initialize(config=...)): "
                           + ("the model is built whole on every GPU before stage 3 partitions it" if js == 3 else
                              "the parameters are built partitioned for an engine that never gathers them"),
                           "give --zero-stage the JSON's stage")
    if zs != js:
        assumed.append(f"sharding: the JSON's zero_optimization.stage {js} runs (DeepSpeed's engine takes the JSON: "
                       f"{MDS_COMMIT} megatron/training.py deepspeed.initialize(config=args.deepspeed_config_dict)); "
                       f"{shown} is read only by zero.Init (stage 3) and optimizer statistics")
    elif "--zero-stage" in ds:
        ignored.append(f"--zero-stage={zs} (the JSON's zero_optimization.stage {js}, which the engine runs)")
    # precision: the engine's
    data = _section(text)
    for flag, sec, other in (("--bf16", "bf16", "fp16"), ("--fp16", "fp16", "bf16")):
        body = data.get(other) if isinstance(data, dict) else None
        if flag in flags and isinstance(body, dict) and body.get("enabled") is True:
            raise PlannerError(f"{where}{flag} but {jw}{other}.enabled true: DeepSpeed's engine casts the model to the "
                               "JSON's dtype, Megatron to the flag's", f"enable {sec} in the JSON, or give --{other}")
    job.pop("fp16", None)
    if "fp16" in dj:  # the engine's dtype: fp16 with loss scaling (true) or bf16 (false), the JSON's (deepspeed.read)
        job["fp16"] = dj["fp16"]
    # the attention kernel: Megatron-DeepSpeed's flags, not Megatron-LM's --attention-backend
    flash = [f for f in FLASH_FLAGS if f in ds]
    job["attention"] = "flash" if flash else "eager"
    cfg.assumed[:] = [a for a in cfg.assumed if not a.startswith(("attention=", "bytes_per_param"))]
    assumed.append(f"attention={job['attention']}: " + (f"{flash[0]} (a FlashAttention kernel)" if flash else
                   "no --use-flash-attn* flag: Megatron-DeepSpeed's CoreAttention (baddbmm, fused scale-mask-softmax, "
                   f"bmm; {MDS_COMMIT} megatron/arguments.py l. 927-935, megatron/model/transformer.py)"))
    if "bytes_per_param" in job:  # Megatron-LM's DDP gradient-buffer rule (megatron._state_bytes): not built under DeepSpeed
        job.pop("bytes_per_param")
        assumed.append("bytes_per_param: the stack's (DeepSpeed's engine keeps the gradients; Megatron-LM's gradient "
                       "buffer flags are not read under DeepSpeed)")
    job["stack"] = "megatron-deepspeed"
    for k in ("sharding", "sharding_mode", "shard_group", "deepspeed_zero3", "dp_comm_overlap", "precision"):
        job.pop(k, None)
        if k in dj:
            job[k] = dj[k]
    cfg.assumed[:] = [a for a in cfg.assumed if not a.startswith(("dp_comm_overlap=false: --overlap-grad-reduce",
                                                                   "precision=bf16:"))]
    if "--overlap-grad-reduce" in flags:
        cfg.ignored.append("--overlap-grad-reduce (Megatron's DDP, not built under DeepSpeed: the JSON's "
                           "zero_optimization.overlap_comm runs)")
    if "--no-pipeline-parallel" not in ds and js == 1 and job.get("dp_comm_overlap"):
        # GPTModelPipe (pretrain_gpt.py model_provider without --no-pipeline-parallel) is a PipelineModule
        job["dp_comm_overlap"] = False
        ignored.append(f"{jw}zero_optimization.overlap_comm true (DeepSpeed's engine turns it off for a PipelineModule, "
                       "Megatron-DeepSpeed's GPTModelPipe without --no-pipeline-parallel: microsoft/DeepSpeed @38327e07 "
                       "deepspeed/runtime/engine.py l. 1639-1642; dp_comm_overlap false)")
    # the JSON's own lists, each named as the JSON's
    cfg.ignored += ignored + [f"{label}: {x}" for x in dcfg.ignored]
    cfg.not_modelled += not_modelled + [f"{label}: {x}" for x in dcfg.not_modelled]
    cfg.unmodelled += unmodelled
    drop = ("micro_batch=", "global_batch=", "recompute=none: a DeepSpeed JSON", "tp=pp=cp=1", "batch keys read at")
    cfg.assumed += assumed + [f"{label}: {x}" for x in dcfg.assumed if not x.startswith(drop)]
    cfg.stated.update({k: v for k, v in stated.items()})
    cfg.stated["--micro-batch-size"] = flags.get("--micro-batch-size")
    cfg.stated["--zero-stage"] = zs  # absent: Megatron-DeepSpeed's default 1
    cfg.stated["--no-pipeline-parallel"] = "--no-pipeline-parallel" in ds  # a PP change must drop it
    cfg.fmt = "megatron-deepspeed"


def _section(text: str):
    import json

    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
