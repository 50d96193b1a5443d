"""Read (and write) the configs trainers already run: torchtitan TOML job files, Megatron-LM
argument lists / launch scripts, DeepSpeed JSON configs, Megatron-Bridge run_recipe.py launches.

`load_trainer_config(path)` turns one of them into the planner's job fields (`job`, keys
exactly planner/schema.py `Job` fields, so `Job.model_validate(job)` works), with the
trainer's name (`fmt`), what it read and inferred by which rule (`assumed`), and what it
read but did not price, in three lists: `unmodelled`, what it could not express and priced
otherwise (fp32 training priced as bf16, an optimizer other than Adam, offloading; the CLI
prints each as a warning, `planner validate` skips a corpus row that has one);
`not_modelled`, settings that change memory or time and are left out of the price (each
'name=value (what it changes)'; a setting the reader does not know is one; a warning too);
and `ignored`, settings with no effect on the plan's memory or time (each with the reason,
a note). Contradictions (a TP degree that does not
divide the heads, a GPU count in the file that disagrees with --gpus, a shape flag that
disagrees with --model) raise PlannerError naming both. Which release each reader follows
and where every option name comes from: the module docstrings of torchtitan.py, megatron.py
and deepspeed.py. export.py writes the same formats back.

Units: the job fields are the planner's (sequences, tokens, counts); nothing here prices
anything.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import files
from ..errors import PlannerError

# megatron-deepspeed: a microsoft/Megatron-DeepSpeed launch script (Megatron flags, --deepspeed and the ds_config JSON
# it writes), read by the Megatron reader (megatron_deepspeed.py) and written by export.py _megatron_deepspeed
# megatron-bridge: a Megatron-Bridge launch of scripts/training/run_recipe.py (--recipe and ConfigContainer
# overrides), read by megatron_bridge.py and written by export.py _megatron_bridge
FORMATS = ("torchtitan", "megatron", "deepspeed", "megatron-deepspeed", "megatron-bridge")
# the formats read: FORMATS (each also written) and torchtitan 0.3.0's launch line (torchtitan03.py: --module /
# --config with command-line options; `export --format torchtitan` writes it for a plan on stack torchtitan-0.3)
READ_FORMATS = FORMATS + ("torchtitan-0.3",)
# the software stack each format runs on (stack_db/): the Job's `stack` unless stated
FORMAT_STACKS = {"torchtitan": "torchtitan", "megatron": "megatron", "deepspeed": "megatron-deepspeed",
                 "megatron-deepspeed": "megatron-deepspeed", "torchtitan-0.3": "torchtitan-0.3",
                 "megatron-bridge": "megatron-bridge"}


@dataclass
class TrainerConfig:
    """One trainer config read into planner job fields. Each line of the four lists is a report.Note record (its
    settings, values, reason or rule, and the file it was read from), made with report.listed / listed_all / noted;
    the command line's notes laid over a file (cli/core.py load_job) add text lines to `assumed`."""

    job: dict
    fmt: str
    ignored: list[str] = field(default_factory=list)  # read, with no effect on memory or step time (each with why)
    assumed: list[str] = field(default_factory=list)
    source: str = ""
    # read, and they change memory or step time, but the plan is priced without them (each with what
    # it changes); a setting the reader does not know is listed here, never as ignored (issue 22)
    not_modelled: list[str] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    # the batch and data-parallel keys as the file states them ('section.key' / '--flag' / JSON key ->
    # value; absent: not stated), which a `planner check` suggestion must keep consistent (spelling.py)
    stated: dict = field(default_factory=dict)
    # the sharded optimizer's parameter all-gather overlap as the file states it, for whichever sharding mode the plan
    # runs (the job's dp_param_gather_overlap where it acts, plan.param_gather_acts): True / False as stated (a Megatron
    # script's --overlap-param-gather: True; a Bridge config's ddp.overlap_param_gather, under dist_muon with optimizer.
    # overlap_param_gather, as the file resolves them: either); None where the file does not state it (a Megatron
    # script without the flag; torchtitan, DeepSpeed: no such setting). report.with_config lists the tie as assumed
    # only where this is None; cli/core.command_line_param_gather lays a stated False the reader left out (it acts
    # under a command line's sharding, DP overlap, stack or optimizer, or in fit's rows) and names an option over it
    param_gather: Optional[bool] = None
    param_gather_key: str = ""  # the file's spelling of it (the notes name it)
    # the periodic checkpoint's switch as the file states it (torchtitan's [checkpoint] enable, default false): True /
    # False as stated, None where the file does not state one; `budget` drops its "priced as if enabled" line where the
    # file turns checkpointing on (planner/budget.py [10], config_checkpoint)
    checkpoint_enable: Optional[bool] = None


def words_of(value, strip: str = "", commas: bool = False) -> list[str]:
    """The words of a multi-value setting: a flag of argparse nargs '*' / '+' as the Megatron reader
    keeps it (megatron.parse_flags: a list of the words that follow it; `--flag=a` one string), an
    argument file's quoted "2 2", or a command-line option's "a,b". None, or True (a flag given
    without a value): []. A list keeps its items as words, a string is split on white space;
    strip: the characters taken off each word's ends (an argument file's "['p2p']"), empty words
    dropped; commas: commas separate too, and a list's items are split like a string ("2,2", a
    quoted "2 2"). The one parser of such values (the Megatron reader, rules.py, the CLI's list
    options)."""
    if value is None or value is True:
        return []
    if commas:
        items = " ".join(map(str, value) if isinstance(value, (list, tuple)) else [str(value)]).replace(",", " ").split()
    else:
        items = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split()
    return [w.strip(strip) for w in items if w.strip(strip)]


_MEGATRON_MARKERS = re.compile(r"--tensor-model-parallel-size|pretrain_gpt\.py|--pipeline-model-parallel-size|--num-layers\b"
                               r"|pretrain_hybrid\.py|--hybrid-(layer|override)-pattern\b")  # Megatron-LM's hybrid stacks


def sniff_format(path, fmt: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """(format, text): `fmt` when given (a --config-format; nothing read), else detect_format's
    answer; and the file's text when it was read to tell (None when the suffix alone told, or
    the file could not be read), for the caller to pass on to load_trainer_config / the YAML
    parser instead of reading the file again."""
    if fmt is not None:
        return fmt, None
    p = Path(path)
    if p.suffix.lower() == ".toml":
        return "torchtitan", None
    if p.suffix.lower() in (".yaml", ".yml"):
        return None, None
    from .. import files

    try:
        text = files.read_text(p)  # regular files only, size-capped: a FIFO or /dev/zero is refused
    except PlannerError:
        return None, None
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError):
            return None, text
        if isinstance(data, dict) and ("zero_optimization" in data or "train_micro_batch_size_per_gpu" in data):
            return "deepspeed", text
        return None, text
    from .megatron_bridge import is_launch_line as is_bridge_launch

    if is_bridge_launch(text):  # before Megatron's markers: a Bridge launch names no Megatron-LM flag, but say so first
        return "megatron-bridge", text
    if _MEGATRON_MARKERS.search(text):
        return "megatron", text
    from .torchtitan03 import is_launch_line

    if is_launch_line(text):
        return "torchtitan-0.3", text
    return None, text


def detect_format(path) -> Optional[str]:
    """torchtitan for .toml; deepspeed for a JSON object with zero_optimization or
    train_micro_batch_size_per_gpu; megatron for a text file (.sh, .txt, an args file) that
    holds --tensor-model-parallel-size, --pipeline-model-parallel-size, --num-layers or
    pretrain_gpt.py; megatron-bridge for one that runs Megatron-Bridge's run_recipe.py with --recipe (or a script of
    megatron_bridge.SCRIPTS);
    torchtitan-0.3 for one that launches torchtitan 0.3.0 (torchtitan03.is_launch_line:
    run_train.sh or `-m torchtitan.train` with --module / --config or MODULE= / CONFIG=); None otherwise
    (a planner job YAML, say)."""
    return sniff_format(path)[0]


def not_a_config(p) -> PlannerError:
    """The error for a file that is no trainer config the readers know (sniff_format found none): load_trainer_config's,
    and the job-YAML path's for a shell script that is no YAML either (cli/core.load_job)."""
    return PlannerError(
        f"{p}: not a trainer config this planner reads",
        "a torchtitan .toml, a DeepSpeed .json with zero_optimization / train_micro_batch_size_per_gpu, or a "
        "Megatron script or argument file with --tensor-model-parallel-size or pretrain_gpt.py, a Megatron-Bridge "
        "run_recipe.py --recipe launch, a torchtitan "
        "0.3.0 launch line (--module / --config); or pass --config-format " + "|".join(READ_FORMATS))


def load_trainer_config(path, *, fmt: Optional[str] = None, model: Optional[str] = None, gpus: Optional[int] = None,
                        hardware: Optional[str] = None, text: Optional[str] = None,
                        parallel: Optional[dict] = None, stack: Optional[str] = None,
                        overrides: Optional[dict] = None, script: Optional[str] = None) -> TrainerConfig:
    """Read a trainer config. fmt: 'torchtitan' | 'megatron' | 'deepspeed' (default:
    detect_format). model / gpus / hardware: what the command line gave (--model, --gpus,
    --hardware); the file's own values win where it has them, and a disagreement is an error.
    text (with fmt): the file's text when the caller already read it (sniff_format); the file
    is read once (planner/files.py), by the format's reader when nobody has yet. parallel: the
    command line's tp / pp / cp (and the other options of core.PARALLEL_KEYS), which a DeepSpeed JSON's batch
    keys are read against (the launcher's model parallelism: deepspeed.py), and at which a torchtitan TOML or
    0.3.0 launch line works out its degrees, pipeline keys, batch and tokens (data_parallel_shard_degree, the
    pipeline keys at the command line's pp, local / global batch under --micro-batch / --global-batch, tokens
    from steps: torchtitan.read_sections); the other readers take their files' degrees.
    stack: the command line's --stack, whose model codes a torchtitan [model] name is checked
    against (torchtitan.model_code_line). overrides: the job fields the command line gives (cli/core.py load_job lays
    them over the file), which a Megatron script's flag set from a substitution the reader does not run takes
    (megatron._unread_substitutions)."""
    from ..schema import MAX_COUNT

    p = Path(path)
    if gpus is not None and not 1 <= gpus <= MAX_COUNT:  # `--gpus 0` divided a DeepSpeed batch by zero (issue 24)
        raise PlannerError(f"{p}: --gpus {gpus} is not a GPU count from 1 to {MAX_COUNT}", "e.g. --gpus 8")
    if not files.is_file(p):
        if files.exists(p) or len(os.fsencode(p.name)) > files.NAME_MAX:
            files.read_bytes(p)  # a folder, a device, a name over 255 bytes: read_bytes names what it is
        raise PlannerError(f"{p}: no such file", "give a torchtitan .toml, a Megatron launch script / argument file or a DeepSpeed .json")
    if fmt is None:
        fmt, text = sniff_format(p)
        if fmt is None:
            raise not_a_config(p)
    if fmt not in READ_FORMATS:
        raise PlannerError(f"--config-format {fmt!r} is not a trainer format", f"valid: {', '.join(READ_FORMATS)}")
    if fmt == "torchtitan":
        from .torchtitan import read
    elif fmt == "torchtitan-0.3":
        from .torchtitan03 import read
    elif fmt == "megatron-bridge":
        from .megatron_bridge import read
    elif fmt in ("megatron", "megatron-deepspeed"):  # a Megatron-DeepSpeed script is the Megatron reader's dialect
        from .megatron import read
    else:
        from .deepspeed import read
    extra = ({"parallel": parallel} if fmt in ("deepspeed", "torchtitan-0.3") else {})
    extra.update({"stack": stack} if fmt in ("torchtitan", "megatron", "megatron-deepspeed") else {})
    extra.update({"overrides": overrides, "script": script} if fmt in ("megatron", "megatron-deepspeed") else {})
    extra.update({"job_options": overrides} if fmt == "megatron-bridge" else {})
    if fmt == "torchtitan":  # the mesh the job runs, where the file leaves degrees to torchtitan (torchtitan.read_sections)
        extra["parallel"] = parallel
    cfg = read(p, text, model=model, gpus=gpus, hardware=hardware, **extra)
    cfg.source = str(p)
    if fmt == "megatron-deepspeed" and cfg.fmt != "megatron-deepspeed":
        raise PlannerError(f"{p}: --config-format megatron-deepspeed, but the script has none of Megatron-DeepSpeed's "
                           "flags (--deepspeed, --deepspeed_config, --zero-stage, ...): a Megatron-LM script",
                           "pass --config-format megatron, or add the script's --deepspeed --deepspeed_config FILE")
    if not (fmt == "megatron" and cfg.fmt == "megatron-deepspeed"):  # a Megatron-DeepSpeed script keeps its dialect
        cfg.fmt = fmt
    cfg.job.setdefault("stack", FORMAT_STACKS[fmt])
    if hardware is not None:
        cfg.job.setdefault("hardware", hardware)
    _check_job_keys(cfg.job)
    return cfg


def default_trainer_seq(job: dict, assumed: list) -> None:
    """A trainer config that gives no sequence length (a DeepSpeed JSON never does, a Megatron
    script may leave out --seq-length) trains the default of a job that takes no recipe
    (plan.default_seq_len: the model's context where it is at most plan.HF_DEFAULT_SEQ, else
    HF_DEFAULT_SEQ): trainer configs never take the published training.seq_len (planner/recipe.py).
    Laid into `job` and listed as assumed; a model that does not load is left to resolve."""
    from .report import listed

    if "seq_len" in job or not isinstance(job.get("model"), str):
        return
    from ..catalog import load_model
    from ..plan import default_seq_len

    try:
        spec = load_model(job["model"])
    except PlannerError:
        return
    job["seq_len"] = seq = default_seq_len(spec)
    assumed.append(listed("assumed", "seq_len", seq, "the config gives no sequence length (pass --seq-len); the "
                          "default of a job that takes no recipe, plan.HF_DEFAULT_SEQ or the model's "
                          f"{spec.max_seq_len:,}-token context if shorter", show=f"{seq:,}"))


def _check_job_keys(job: dict) -> None:
    from ..schema import Job

    bad = sorted(set(job) - set(Job.model_fields))
    if bad:  # a reader bug, never user input
        raise AssertionError(f"trainer reader produced non-Job keys: {bad}")


# ------------------------------------------------------------------ shared helpers
def resolve_gpus(where: str, from_file: Optional[int], file_what: str, cli: Optional[int], *, soft: bool = False,
                 assumed: Optional[list] = None) -> Optional[int]:
    """The GPU count: the file's where it has one, --gpus otherwise; both given and
    different is a contradiction (exit 2), unless the file's figure is only a default
    (`soft`: a shell `${VAR:-default}`), which --gpus replaces (listed as assumed)."""
    from .report import listed

    if from_file is None:
        return cli
    if cli is not None and cli != from_file:
        if soft:
            if assumed is not None:
                assumed.append(listed("assumed", "gpus", cli, f"--gpus replaces the file's {file_what} = {from_file}"))
            return cli
        raise PlannerError(f"{where}{file_what} = {from_file} GPUs, but --gpus {cli}",
                           "drop --gpus (the file sets the GPU count) or change the file")
    return from_file


def check_model_shape(where: str, model_name: str, given: dict[str, tuple[str, object]]) -> None:
    """`given` maps a trainer option name to (ModelSpec attribute, value); each must agree
    with the catalog / file model `model_name`, else PlannerError naming both."""
    from ..catalog import load_model

    spec = load_model(model_name)
    for option, (attr, value) in given.items():
        have = _attr(spec, attr)
        if have != value:
            raise PlannerError(
                f"{where}{option} {_show(value)} contradicts --model {model_name} ({attr} = {_show(have)})",
                f"give the model whose {attr} is {_show(value)}, or fix {option}")


def match_catalog_model(where: str, given: dict[str, tuple[str, object]], what: str) -> tuple[str, str]:
    """The one model_zoo entry whose shape equals every given (attribute, value): explicit
    field comparison (no names read), among the entries of identical layers (a layer_pattern
    entry, Mistral 7B's sliding window, is named with --model). Returns (name, the rule as an assumed record)
    or raises."""
    from .report import listed

    need = {"num_layers", "hidden_size", "num_attention_heads"}
    attrs = {a for a, _ in given.values()}
    if not need <= attrs:
        missing = ", ".join(sorted(need - attrs))
        raise PlannerError(f"{where}the {what} does not give the model's shape ({missing} needed) and no --model was given",
                           "pass --model NAME (see `planner models`), a model YAML or a Hugging Face config.json")
    hits = catalog_models_with_shape(given)
    shape = ", ".join(f"{a}={_show(v)}" for a, v in given.values())
    if len(hits) != 1:
        why = "no catalog model has" if not hits else f"{len(hits)} catalog models ({', '.join(hits)}) have"
        raise PlannerError(f"{where}{why} the shape of the {what} ({shape})",
                           "pass --model NAME, a model YAML or a Hugging Face config.json")
    return hits[0], listed("assumed", "model", hits[0], f"the one catalog model with the shape of the {what} ({shape})")


def catalog_models_with_shape(given: dict[str, tuple[str, object]]) -> list[str]:
    """The model_zoo entries whose attributes equal every given (attribute, value) (explicit
    field comparison, no names read), among the entries of identical layers: an MoE entry only
    when the config names experts, no layer_pattern entry (the trainer readers parse no per-layer
    kinds, so a shape they match is one of identical layers)."""
    from ..catalog import list_models, load_model

    attrs = {a for a, _ in given.values()}
    hits = []
    for name in list_models():
        m = load_model(name)
        if m.moe is not None and "moe.num_experts" not in attrs:  # a config that names no experts is a dense model
            continue
        if m.layer_pattern is not None and not {"layer_windows", "layer_mixers"} & attrs:  # the patterns read: per-layer
            continue  # windows, or every layer's mixer and MLP (ModelSpec.layer_mixers: the Bridge Qwen3-Next recipe's)
        if all(_attr(m, a) == v for a, v in given.values()):
            hits.append(name)
    return hits


def one_rank_mesh(data: dict, stack_name: str, assumed: list) -> None:
    """A trainer config's unsharded mesh (sharding none: torchtitan's data_parallel_replicate_degree = dp with
    shard degree 1) read onto a command-line stack that lists no unsharded mode and whose trainer applies FSDP
    over one rank (stack_db runs.fsdp_one_rank: torchtitan 0.3.0): what that release runs on those degrees,
    HSDP with a shard group of one (fsdp at dp 1), listed as assumed."""
    from .report import listed, listed_all

    from ..catalog import load_stack

    if data.get("sharding") != "none":
        return
    try:
        st = load_stack(stack_name)
    except PlannerError:
        return  # resolve names the stack
    runs = st.runs
    if runs is None or not runs.fsdp_one_rank or any(m.level == "none" for m in runs.sharding):
        return
    inner = data.get("tp", 1) * data.get("pp", 1) * data.get("cp", 1)
    dp = data["gpus"] // inner if data.get("gpus") and inner else None
    if dp is None or dp > 1:
        data.update(sharding="hsdp", shard_group=1)
        assumed.append(listed_all("assumed", [("sharding", "hsdp"), ("shard_group", 1)], "the file's unsharded mesh "
                                  f"on stack {st.name}, whose trainer applies FSDP over one rank (stack_db "
                                  "runs.fsdp_one_rank): replicas of FSDP over one rank"))
    else:
        data.update(sharding="fsdp")
        assumed.append(listed("assumed", "sharding", "fsdp",
                              f"the file's unsharded mesh on one data-parallel rank on stack {st.name}, whose "
                              "trainer applies FSDP over one rank (stack_db runs.fsdp_one_rank)"))


# ------------------------------------------------------------------ a model a trainer config defines
# the generated model files (a trainer config's model flags): planner/model_cache.py
from ..model_cache import CACHE_ENV, model_cache_dir, write_model_file  # noqa: E402,F401 -- re-exported


# ------------------------------------------------------------------ Llama 3.x RoPE scaling in the trainers
# Megatron-LM @d98e8a64's Llama 3.x RoPE scaling: --use-rope-scaling (arguments.py l. 2424) is GPTModelConfig.rope_scaling
# (argument_utils.py gpt_config_from_args l. 465; gpt_builders.py l. 100), and RotaryEmbedding applies _apply_scaling
# (models/common/embeddings/rotary_pos_embedding.py l. 83-84, 92-128) with low_freq_factor 1, high_freq_factor 4 and
# original_max_position_embeddings 8192 fixed and factor GPTModelConfig.rope_scaling_factor, default 8.0
# (training/models/gpt.py l. 179): gpt_config_from_args passes no --rope-scaling-factor (arguments.py l. 2426 parses
# it; only the heterogeneous-config check, l. 226, reads it), so pretrain_gpt.py scales by 8 whatever it says.
# Those are Llama 3.1's numbers (config.json rope_scaling), the one llama3 scaling it spells
MEGATRON_LLAMA3_ROPE = (8.0, 1.0, 4.0, 8192)
# Megatron-LM @d98e8a64's rotary base: --rotary-base, argparse type int, default 10000 (arguments.py l. 2418),
# which every rotary of pretrain_gpt.py takes (argument_utils.py l. 301-303 and 463): the export writes and the
# reader reads ModelSpec.rope_theta through it
MEGATRON_ROTARY_BASE = 10000.0

# torchtitan @e347b1e5e: every llama3 flavor's TransformerModelArgs keeps rope_scaling_args = RoPEScalingArgs() (scaling_factor
# 8.0, low_freq_factor 1.0, high_freq_factor 4.0, original_max_position_embeddings 8192: torchtitan/models/llama3/model/
# args.py l. 19-24, 38; models/llama3/__init__.py llama3_args sets none), applied unconditionally by precompute_freqs_cis
# (model/model.py l. 35-86); the model args are no TOML setting ([model] name and flavor choose them)
TORCHTITAN_LLAMA3_ROPE = (8.0, 1.0, 4.0, 8192)


def rope_text(key) -> str:
    """A ModelSpec.llama3_rope_scaling value (or a word) as text, for messages."""
    if isinstance(key, str):
        return key
    f, lo, hi, orig = key
    return f"factor {f:g}, low_freq_factor {lo:g}, high_freq_factor {hi:g}, original_max_position_embeddings {orig}"


def _attr(spec, attr: str):
    """A ModelSpec attribute, dotted for a nested block (`moe.num_experts`; None without it)."""
    obj = spec
    for part in attr.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj


def _show(v) -> str:
    if isinstance(v, tuple) and v and all(isinstance(x, int) for x in v):  # ModelSpec.layer_windows
        w = sorted({x for x in v if x})
        return ("full attention on every layer" if not w else
                f"window {'/'.join(f'{x:,}' for x in w)} on {sum(1 for x in v if x)} of {len(v)} layers")
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def plan_bytes(plan: dict) -> dict:
    """The plan's (explain's `plan`) bytes_per_param as bytes per state (a preset's, the megatron preset where it names
    none, or the plan's own mapping): what the export and check's spelling write (export.py, spelling.py)."""
    from ..schema import BYTES_PER_PARAM_PRESETS

    bpp = plan.get("bytes_per_param")
    return BYTES_PER_PARAM_PRESETS[bpp or "megatron"].model_dump() if isinstance(bpp, (str, type(None))) else \
        {k: float(v) for k, v in dict(bpp).items()}


def fp32_gradients(plan: dict) -> bool:
    """Whether the plan's bytes_per_param keeps fp32 main gradients (4 B: the megatron and bf16-moments presets):
    where a Megatron-FSDP mode needs --megatron-fsdp-main-grads-dtype fp32 --megatron-fsdp-grad-comm-dtype fp32
    (its default auto keeps the parameters' 16-bit dtype, bf16 under --bf16 and fp16 under --fp16: memory.py [mg]). An
    fp16 plan too: Megatron-FSDP reads no --accumulate-allreduce-grads-in-fp32 (the DDP buffer's fp32 flag that
    _megatron_state_flags writes for it), so without these flags an fp16 plan priced with 4 B gradients read back as 2 B
    (the job-fields fuzz kind, seed 78)."""
    return float(plan_bytes(plan)["gradients"]) == 4.0


# Megatron-FSDP's main-gradient and gradient-collective dtype flags at fp32 (NVIDIA/Megatron-LM @d98e8a64
# megatron/training/arguments.py l. 3691-3698; trainers/megatron.py _megatron_fsdp_grads reads them back)
MFSDP_FP32_GRAD_FLAGS = (("--megatron-fsdp-main-grads-dtype", "fp32"), ("--megatron-fsdp-grad-comm-dtype", "fp32"))


def megatron_fsdp_grad_flags(plan: dict) -> tuple:
    """The flags a Megatron script needs for the plan's gradients as priced: MFSDP_FP32_GRAD_FLAGS where the plan's
    sharding mode keeps its own main gradients in the job's dtype (stack_db runs.sharding grads_in_job_dtype:
    Megatron-FSDP, whose default auto is the parameters' bf16, memory.py [mg]) and the plan keeps fp32 gradients
    (fp32_gradients); () elsewhere. The export and check's suggestions write them (export.py, spelling.py)."""
    from ..catalog import load_stack

    runs = load_stack(plan["stack"]).runs
    mode = next((m for m in (runs.sharding if runs else ()) if m.name == plan.get("sharding_mode")), None)
    return MFSDP_FP32_GRAD_FLAGS if mode is not None and mode.grads_in_job_dtype and fp32_gradients(plan) else ()


def fmt_ignored(name: str, value) -> str:
    """`name=value` as a reader's line prints a setting (report.shown_value); a line of the ignored / not_modelled
    lists is written as report.listed, which carries the setting and value as data."""
    from .report import shown_value

    return f"{name}={shown_value(value)}"


__all__ = ["words_of", "FORMATS", "READ_FORMATS", "FORMAT_STACKS", "TrainerConfig", "detect_format", "load_trainer_config", "sniff_format"]
