"""Memory rows: measured per-GPU memory peaks against the planner's prediction of the SAME peak.

A memory-rows file is a YAML mapping with a `memory_rows:` list (measured runs: the schema of
tests/data/memory/measured_memory.yaml, a copy of the project's reference data) or an
`oracle_rows:` list (the allocated-memory oracle's fake-tensor traces of torchtitan's real step:
tests/data/memory/oracle_torchtitan_0.3.0.yaml). `planner validate FILE` recognises either by
that key (planner/cli/validate.py) and calls `report` here.

Each row becomes a planner Job (the same `plan.resolve` checks and `explain.evaluate` cost models
as `planner explain`) and is compared with the kind of peak its source logs:

    reserved   the caching allocator's peak reserved bytes (torchtitan's `memory:` line:
               memory_stats()["reserved_bytes.all.peak"]), without the CUDA context and NCCL
    allocated  the peak allocated bytes (Megatron-LM's mem-max-allocated-bytes on the last
               global rank; Thunder's torch.cuda.max_memory_allocated; the oracle's tracker)

    predicted reserved  = JSON memory.reserved_bytes when present, else
                          memory.total_bytes - terms.reserve (- terms.tp_overlap_buffers - terms.ep_buffers)
    predicted allocated = JSON memory.allocated_bytes when present, else
                          memory.total_bytes - terms.reserve (- tp_overlap_buffers - ep_buffers) - terms.allocator_slack
    a row measured on one pipeline stage (Megatron's last rank; an oracle PP rank) reads
    memory.stages.<first|middle|last> the same way (stage fallback: the stage's total_bytes less
    the reserve, less the slack in the heaviest stage's proportion: slack = s x allocated).

    error = predicted / measured - 1        (signed: negative is under-prediction)

Statistics per source group and overall: n, median and 90th percentile of |error| (numpy's
linear percentile, Hyndman & Fan type 7), the signed median, and the worst under-prediction
(the most negative error). No constant of the planner is fitted to these rows.

Rules for measured rows (what a row leaves out; each applied value is listed in the row's
`assumed`):
 M1 model: the row's `planner.model` (a model_zoo name) or `planner.model_shape` (ModelSpec
    fields, written to a model YAML); the file writes them out from the row's text, with `why`.
    `padded_from: V` (instead of vocab_size) is Megatron-LM's padded vocabulary: V rounded up to
    a multiple of 128 x tp (megatron/core/tokenizers/utils/build_tokenizer.py
    vocab_size_with_padding, make_vocab_size_divisible_by 128) -- the rows' 131073 -> 131200 at
    tp 1, 131584 at tp 4. No planner block: skipped.
 M1b `planner.args: FILE` (a Megatron-LM row): FILE, relative to the rows file, is the test's own command line (its
    MODEL_ARGS as the Megatron CI corpus writes its args/ files; the `why` cites the commit). The Megatron reader
    (planner/trainers/megatron.py, as planner/megatron_ci.py rule 3) makes the whole job of it -- the model from the
    flags (layers, MLA, MoE, MTP, the padded GPT-2 vocabulary) and every setting the row's text cannot carry (EP,
    expert TP, the dispatcher, the loss fusion, the attention backend), each default listed as assumed -- on the row's
    GPUs (dp x tp x pp x cp) and hardware (rule M3). The row's tp, pp, cp, vpp, micro_batch, global_batch, seq,
    sharding, recompute and precision must be what the flags say (else an error naming the field); flags the reader
    does not model, or refuses, skip the row.
 M0 `planner.excluded` (a reason, with its source) -> skipped with that reason, before any other rule.
 M2 stack: the row's `planner.stack` (a stack_db entry describing the code the row ran), listed as assumed
    with its `planner.stack_why` (required with it: the code / framework the row's source states it ran,
    since the 2026-12-07 audit3; before, one generic line). No stack is read from what the `framework` text looks like:
    before the 2026-12-07 audit2 torchtitan / torchtrain -> torchtitan, Megatron-LM -> megatron,
    llm-foundry -> llm-foundry and Megatron-DeepSpeed -> megatron-deepspeed were matched in it, and the
    rows of tests/data that rule named carry it as the field now. No planner.stack -> skipped.
 M3 hardware: the row's `planner.hardware` (a hardware_db name; listed as assumed with the row's `gpu`,
    and `planner.hardware_why` where the entry is an assumption about the part `gpu` names: "Blackwell"
    without a SKU -> b200, the SM100 part in hardware_db; H100 with 94-96 GB -> the HBM2e part). The GPU
    changes only the capacity, never a predicted peak. Never read from the `gpu` text (before audit2 it
    was, by the run records' former gpu_type rule); no planner.hardware -> skipped.
 M4 GPUs = dp x tp x pp x cp; dp null -> skipped. seq null -> the row's `planner.seq_len` where
    the code the row ran establishes it (its `why` cites it; listed as assumed), else skipped;
    micro_batch null -> skipped (the peak scales with both). global_batch null -> micro_batch x dp
    (no accumulation). vpp null -> 1.
 M5 sharding: the row's `planner.sharding` (none | zero1 | zero2 | fsdp | hsdp, the job field), and
    `planner.sharding_why` where it is an assumption (listed with it: an FSDP1 row is planned with its
    stack's FSDP unit model, stack_db `fsdp`). Never read from the `sharding` text (before audit2: fsdp /
    zero3 -> fsdp, "distributed optimizer" / zero-1 -> zero1, none / ddp -> none were matched in it); no
    planner.sharding -> skipped.
 M6 recompute: the row's `planner.recompute` (none | selective | full, the job field; torchtitan selective is
    its per-op policy: stack_db torchtitan.yaml `selective`), and `planner.recompute_why` where it is an
    assumption (listed with it: the source does not state it). Never read from the `recompute` text (before
    the 2026-12-07 audit3 its leading selective / full / none was, and "not stated" took planner.recompute;
    the rows of tests/data carry what that rule gave); no planner.recompute -> skipped.
 M7 precision: the row's `planner.precision` (bf16 | fp8 | nvfp4, precisions.PRECISIONS) and
    `planner.fp8_recipe` (precisions.FP8_RECIPES; fp8 without one: the stack's default recipe, listed as
    assumed); a recipe the row's stack lacks -> skipped. Never read from the `precision` text (before audit3
    by planner/precisions.py parse_precision_text, removed in audit4; the rows carry what it gave: mxfp8_cublas and
    mxfp8_cublas_rceil -> fp8 mxfp8, float8 rowwise -> fp8 rowwise, ...); no planner.precision -> skipped.
 M8 compile: the row's `compile`. sequence_parallel: `planner.sequence_parallel`, else on iff
    tp > 1 (torchtitan's TP plan always shards the norms' sequence; Korthikanti et al. 2022).
 M9 loss: `planner.loss: chunked` (torchtitan PR #996's 2025 chunked cross-entropy: the already
    materialised logits in 8 chunks, chunked_cross_entropy_loss's num_output_chunks default, which train.py's
    loss_fn(pred, labels) keeps: pytorch/torchtitan @f99bfc03 components/loss.py) -> the job field
    loss_logit_chunks 8 (memory.py [ck]; not torchtitan 0.3.0's ChunkedLossWrapper, chunked_loss); `planner.loss:
    chunked_wrapper` (torchtitan's ChunkedLossWrapper, 0.3.0 and main since #2937, 2026-04-27:
    the row's `why` cites the config that sets it) -> the job field chunked_loss.
 M10 peak kind: the row's `planner.memory_kind` (reserved | allocated), listed as assumed with
    `planner.memory_kind_why` where the source does not label its figure (the torchao table's
    unlabelled column: torchtitan runs, which log max reserved; Megatron-LM PR #482's rank-0
    'Peak_Memory_Actual': the stack's max_allocated); no planner.memory_kind -> skipped;
    memory_gib null -> skipped (no figure). A row measured on the last rank (`planner.stage:
    last`, Megatron-LM's last global rank) compares with the last stage when pp > 1. Never read
    from the `memory_kind` text (before audit3 its leading reserved / allocated, "unknown, most
    likely reserved", other "unknown" -> stack_db memory.reports, and "last rank" / "last PP
    stage" in it were; the rows of tests/data carry what that rule gave).
 M11 `planner.selective_recomputes_attention: true` -> the job field of that name: the run's
    torchtitan version's per-op policy does not save the attention kernel it runs (torchtitan
    2025-05-20 .. 2025-12-01 on Blackwell, cuDNN SDPA: planner/memory.py [tt8]); the row's `why`
    cites the code. Left out: the stack entry's policy.
 M12 `planner.rope_cache: model` -> the job field rope_cache: the row's torchtitan (before 02d24f017,
    2026-06-05) keeps one freqs_cis table per model part, not the stack entry's (0.3.0) one per
    attention layer (planner/memory.py [tt9]); the row's `why` cites its model.py. Left out: the stack's.
 M13 `planner.fsdp_root_unit: true` -> the job field fsdp_root_unit: the row's torchtitan (before 83e69410, #1094,
    2025-07-28) leaves the embedding, final norm and output layer to FSDP2's root unit, which its torch (before
    #154704, 2025-06) keeps unsharded from the forward to the end of the backward, and does not reshard the last
    block after its forward (planner/memory.py [tt10]); the row's `why` cites its parallelize_llama.py. Left out:
    the stack entry's (0.3.0) fsdp.unsharded_ends.

Rules for oracle rows (torchtitan 0.3.0 traced on CPU with fake tensors):
 O1 only `ops: cuda-like(rms,sdpa)` rows are compared: the CPU decompositions save other tensors
    (the oracle's README, pitfalls 1-2); the others are skipped with that reason.
 O2 the loss: ce_fp32 (CrossEntropyLoss on pred.float()) is the stack's default loss; chunked is
    torchtitan 0.3.0's ChunkedLossWrapper, the job field chunked_loss (memory._chunked_loss).
 O3 model: flavor 8B -> llama3-8b, 70B -> llama3-70b (torchtitan's flavors are the released
    shapes); `layers` truncates the zoo model (a model YAML with that num_layers).
 O4 stack torchtitan-0.3 (the release traced: stack_db/torchtitan-0.3.yaml, whose FSDP over one rank,
    runs.fsdp_one_rank, prices the fsdp 1 rows), compile off, bf16, FSDP over `fsdp` ranks x `tp`, SP on iff tp > 1,
    micro_batch = the traced batch, global batch = micro_batch x fsdp x microbatches, hardware
    h100-sxm (assumed: allocated bytes do not depend on the GPU). A pipeline row (pp > 1) counts
    the embedding and the output layer as a layer each in the split (torchtitan 0.3.0's
    pipeline_parallel_first/last_stage_less_layers = 1) and compares its traced stage: 0 ->
    first, pp - 1 -> last, 1 -> the planner's heaviest middle stage (stage 1 holds the most
    micro-batches in flight, pp - 1 under 1F1B); a stage 2 .. pp - 2 is skipped (the planner
    does not report it; it holds fewer). A row repeating another's
    configuration (its `repeat_of:` field names the row it repeats, or the plain tracker) is skipped as a
    duplicate; a row's id is a label only (the harness reads no setting from what an id looks like).
 O5 the SPMD backend traced: the oracle scripts run torchtitan's parallelism.spmd_backend 'partial_dtensor'
    (scripts/memory_oracle/tt_fake_mem.py l. 46 --spmd-backend default, tt_fake_pp.py l. 56 and 67), not the
    release's default 'spmd_types': each row's job sets the job field spmd_backend 'partial_dtensor', whose
    DTensor _c10d_functional collectives the op-SAC save list holds eager too (memory.py [sb], [tk], [xk]).
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog import format_validation_error, load_model, load_stack, read_yaml
from .errors import PlannerError
from .precisions import FP8_RECIPES, PRECISIONS
from .explain import evaluate, to_json
from .schema import Bool, Count, Int, ModelSpec, Real, Sharding, SpmdBackend
from .validate import Skip, _Assumed, _write_model, resolve_fields

GiB = 2.0**30
#: torchtitan PR #996's chunked_cross_entropy_loss num_output_chunks default (pytorch/torchtitan @f99bfc03
#: components/loss.py; train.py l. 373 calls loss_fn(pred, labels) with it): rule M9
PR996_LOSS_CHUNKS = 8
FORMAT_KEYS = ("memory_rows", "oracle_rows")
KINDS = ("reserved", "allocated")


# ----------------------------------------------------------------------------- schema
class PlannerBlock(BaseModel):
    """The model identity (and settings stated only in prose) a row's text names, written out."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: Optional[str] = Field(default=None, description="model_zoo name of the row's shape")
    model_shape: Optional[dict[str, Any]] = Field(default=None, description="ModelSpec fields; vocab_size 'padded': Megatron's rule")
    args: Optional[str] = Field(
        default=None, description="a Megatron-LM argument file (relative to the rows file) holding the test's own "
                                  "command line: the row's model and settings from its flags by the Megatron reader, "
                                  "as the Megatron CI corpus reads its rows (the `why` cites the commit): rule M1b")
    why: str = Field(description="where the shape (and any setting here) comes from")
    sequence_parallel: Optional[Bool] = None
    stack: Optional[str] = Field(
        default=None, description="the stack_db entry of the code the row ran (the `why` cites the code): rule M2")
    hardware: Optional[str] = Field(
        default=None, description="the hardware_db entry of the row's `gpu` (rule M3; the GPU sets only the capacity)")
    hardware_why: Optional[str] = Field(
        default=None, description="why `hardware` is an assumption about the part `gpu` names (listed with it): rule M3")
    sharding: Optional[Sharding] = Field(
        default=None, description="the job's sharding mode for the row's `sharding` text: rule M5")
    sharding_why: Optional[str] = Field(
        default=None, description="why `sharding` is an assumption about the run (listed as assumed with it): rule M5")
    seq_len: Optional[Count] = Field(
        default=None, gt=0, description="the sequence length where the row's `seq` is null and the code it ran "
                                        "establishes it (the `why` cites it): rule M4")
    stack_why: Optional[str] = Field(
        default=None, description="where `stack` comes from: the code / framework the row's source states it ran "
                                  "(listed as assumed with it; required with `stack`): rule M2")
    memory_kind: Optional[Literal["reserved", "allocated"]] = Field(
        default=None, description="the kind of peak the row's figure is (the allocator's reserved or allocated peak): "
                                  "rule M10")
    memory_kind_why: Optional[str] = Field(
        default=None, description="why `memory_kind` is an assumption about the figure (listed as assumed with it): "
                                  "rule M10")
    stage: Optional[Literal["last"]] = Field(
        default=None, description="the pipeline stage of the rank the figure was measured on (last: Megatron-LM's "
                                  "last global rank), compared with that stage when pp > 1: rule M10")
    recompute: Optional[Literal["none", "selective", "full"]] = Field(
        default=None, description="the job's recompute mode for the row's `recompute` text: rule M6")
    recompute_why: Optional[str] = Field(
        default=None, description="why `recompute` is an assumption about the run (listed as assumed with it): rule M6")
    precision: Optional[Literal[PRECISIONS]] = Field(
        default=None, description="the job's precision (precisions.PRECISIONS) for the row's `precision` text: rule M7")
    fp8_recipe: Optional[Literal[FP8_RECIPES]] = Field(
        default=None, description="the scaling recipe the row's `precision` text names (precisions.FP8_RECIPES); "
                                  "left out with fp8: the stack's default, listed as assumed: rule M7")
    loss: Optional[Literal["default", "chunked", "chunked_wrapper"]] = Field(
        default=None, description="the run's loss where it is not the stack's default: chunked (torchtitan PR #996's "
                                  "2025 chunks of the materialised logits: the job field loss_logit_chunks 8) or chunked_wrapper (torchtitan's "
                                  "ChunkedLossWrapper: the job field chunked_loss); rule M9")
    selective_recomputes_attention: Optional[Bool] = Field(
        default=None, description="the run's selective policy re-runs the attention core instead of saving its output "
                                  "(the job field of that name; its `why` cites the code): rule M11")
    rope_cache: Optional[Literal["none", "model", "layer", "model_cp"]] = Field(
        default=None, description="the rotary tables the row's torchtitan version keeps, where it is not the stack "
                                  "entry's (the job field of that name; its `why` cites the code): rule M12")
    fsdp_root_unit: Optional[Bool] = Field(
        default=None, description="the row's torchtitan wraps the embedding, final norm and output layer in FSDP2's root "
                                  "unit and keeps the last block gathered after its forward (before 83e69410, #1094, "
                                  "with torch before #154704; the job field of that name; its `why` cites the code): "
                                  "rule M13")
    @model_validator(mode="after")
    def _stack_why(self):
        if self.stack is not None and not (self.stack_why or "").strip():
            raise ValueError("`stack` needs `stack_why`: the code / framework the row's source states it ran (rule M2)")
        return self

    excluded: Optional[str] = Field(
        default=None, description="why the row is not compared (a row its own source marks unfit as an absolute target, "
                                  "or an implementation no stack_db entry describes), with the source")


class MeasuredRow(BaseModel):
    """One measured row (every key of shared/reference/memory/measured_memory.yaml) + `planner`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str
    source: str
    framework: str
    model: str
    gpu: str
    seq: Optional[Count] = Field(default=None, gt=0)
    micro_batch: Optional[Count] = Field(default=None, gt=0)
    global_batch: Optional[Count] = Field(default=None, gt=0)
    tp: Count = Field(gt=0)
    pp: Count = Field(gt=0)
    vpp: Optional[Count] = Field(default=None, gt=0)
    cp: Count = Field(default=1, gt=0)
    dp: Optional[Count] = Field(default=None, gt=0)
    sharding: str
    recompute: str
    precision: str
    compile: Bool
    memory_gib: Optional[Real] = Field(default=None, gt=0)
    memory_kind: str
    notes: Optional[str] = None
    planner: Optional[PlannerBlock] = None


class OracleRow(BaseModel):
    """One traced configuration of the allocated-memory oracle (oracle_torchtitan_*.yaml)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str
    flavor: Literal["8B", "70B"]
    layers: Optional[Count] = Field(default=None, gt=0, description="truncated to this many layers")
    world: Count = Field(gt=0)
    fsdp: Count = Field(gt=0)
    tp: Count = Field(default=1, gt=0)
    pp: Count = Field(default=1, gt=0)
    stage: Optional[Int] = Field(default=None, ge=0, description="the traced rank's pipeline stage")
    microbatches: Count = Field(default=1, gt=0)
    schedule: Optional[str] = None
    seq: Count = Field(gt=0)
    micro_batch: Count = Field(gt=0)
    ac: Literal["none", "selective", "full"]
    loss: Literal["ce_fp32", "chunked"]
    ops: str
    tracker: Literal["fsdp", "plain"]
    spmd_backend: SpmdBackend = Field(description="torchtitan 0.3's parallelism.spmd_backend the trace ran (rule O5: "
                                                  "the job field spmd_backend)")
    loss_parallel: Bool = False
    repeat_of: Optional[str] = Field(default=None, description="the id of the row whose configuration this row traces "
                                     "again (a second run): skipped as a duplicate (rule O4)")
    peak_allocated_gib: Real = Field(gt=0)
    phase_peaks_gib: Optional[dict[str, Optional[Real]]] = None
    at_peak_gib: Optional[dict[str, Optional[Real]]] = None


class MeasuredFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: Optional[str] = None
    memory_rows: list[MeasuredRow]


class OracleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: Optional[str] = None
    torchtitan_version: Optional[str] = None
    memory_kind: Literal["allocated"] = "allocated"
    oracle_rows: list[OracleRow]


def is_memory_rows(data: Any) -> bool:
    """A parsed YAML document in the memory-rows format (a mapping with one FORMAT_KEYS list)."""
    return isinstance(data, dict) and any(k in data for k in FORMAT_KEYS)


def load(path: Path) -> Union[MeasuredFile, OracleFile]:
    """Read and validate a memory-rows file; a problem is a PlannerError naming the row and field."""
    data = read_yaml(path)
    if not is_memory_rows(data):
        raise PlannerError(f"{path}: not a memory-rows file (no top-level {' or '.join(FORMAT_KEYS)} list)",
                           "see tests/data/memory/measured_memory.yaml")
    cls = MeasuredFile if "memory_rows" in data else OracleFile
    key = "memory_rows" if cls is MeasuredFile else "oracle_rows"
    rows = data.get(key)
    if not isinstance(rows, list) or not rows:
        raise PlannerError(f"{path}: `{key}` must be a non-empty list of rows", f"one `- id: ...` mapping per row")
    try:
        parsed = cls.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = err.get("loc", ())
        where = f"{path}"
        if len(loc) >= 2 and loc[0] == key and isinstance(loc[1], int):
            raw = rows[loc[1]]
            rid = raw.get("id") if isinstance(raw, dict) else None
            where += f": row {loc[1]}" + (f" (id {rid!r})" if rid is not None else "")
        raise format_validation_error(e, where, cls) from None
    seen: set[str] = set()
    for r in getattr(parsed, key):
        if r.id in seen:
            raise PlannerError(f"{path}: duplicate id {r.id!r}", "give every row a unique id")
        seen.add(r.id)
    for r in getattr(parsed, key):
        rep = getattr(r, "repeat_of", None)
        if rep is not None and (rep == r.id or rep not in seen):
            raise PlannerError(f"{path}: row {r.id!r}: repeat_of {rep!r} names no other row of the file",
                               "repeat_of is the `id:` of the row whose configuration this row traces again")
    return parsed


# ----------------------------------------------------------------------------- results
@dataclass
class Result:
    id: str
    group: str
    kind: Optional[str] = None  # "reserved" | "allocated": what the row measures
    stage: Optional[str] = None  # None: the heaviest stage; "first" | "middle" | "last"
    stack: Optional[str] = None
    hardware: Optional[str] = None
    mesh: Optional[str] = None
    measured_gib: Optional[Real] = None
    predicted_gib: Optional[Real] = None
    predicted_from: Optional[str] = None  # the JSON key (or fallback rule) read
    error: Optional[Real] = None
    predicted_allocated_gib: Optional[Real] = None
    predicted_reserved_gib: Optional[Real] = None
    predicted_reserved_high_gib: Optional[Real] = None  # the fragmentation band's top (memory.py [13])
    in_band: Optional[bool] = None  # a reserved row's measured peak in [predicted reserved, band top]
    assumed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: Optional[str] = None

    def as_dict(self) -> dict:
        return asdict(self)


def group_of(source: str) -> str:
    """A row's source group: Megatron-LM's functional tests as one group; a GitHub issue/PR as
    owner/repo#N; else the source's first words (repository and file) before any '@' commit or
    parenthesis."""
    if "tests/functional_tests" in source:
        return source.split()[0] + " functional tests"
    m = re.search(r"github\.com/([^/\s]+/[^/\s]+)/(?:pull|issues)/(\d+)", source)
    if m:
        return f"{m.group(1)}#{m.group(2)}"
    head = re.split(r"\s@|\s\(|\s\+", source, maxsplit=1)[0].strip()
    return head or source


# ----------------------------------------------------------------------------- prediction
def peaks(res: dict, stage: Optional[str] = None) -> dict:
    """(allocated, reserved) bytes from explain's JSON, and the keys read: memory.allocated_bytes
    / reserved_bytes when present (of memory.stages[stage] when a stage is named), else the
    fallback rules of the module docstring."""
    mem = res["memory"]
    terms = mem.get("terms") or {}
    # what lives outside the allocator (memory.OUTSIDE_TERMS: the reserve, TP overlap's, the MoE
    # dispatcher's and NCCL's NVLS buffers)
    reserve = sum(float(terms.get(k, 0.0)) for k in ("reserve", "tp_overlap_buffers", "ep_buffers", "nvls_buffers"))
    slack = float(terms.get("allocator_slack", 0.0))
    src = mem if stage is None else (mem.get("stages") or {}).get(stage)
    prefix = "memory" if stage is None else f"memory.stages.{stage}"
    if src is None:  # one stage only (pp 1): the heaviest stage is it
        src, prefix = mem, "memory"
    out = {}
    if "reserved_bytes" in src:
        out["reserved"], out["reserved_from"] = float(src["reserved_bytes"]), f"{prefix}.reserved_bytes"
    else:
        out["reserved"], out["reserved_from"] = float(src["total_bytes"]) - reserve, f"{prefix}.total_bytes - terms.reserve"
    if "reserved_high_bytes" in src:
        out["reserved_high"] = float(src["reserved_high_bytes"])
    if "allocated_bytes" in src:
        out["allocated"], out["allocated_from"] = float(src["allocated_bytes"]), f"{prefix}.allocated_bytes"
    elif src is mem:
        out["allocated"] = float(mem["total_bytes"]) - reserve - slack
        out["allocated_from"] = "memory.total_bytes - terms.reserve - terms.allocator_slack"
    else:
        heavy_alloc = float(mem["total_bytes"]) - reserve - slack
        frac = slack / heavy_alloc if heavy_alloc > 0 else 0.0
        out["allocated"] = (float(src["total_bytes"]) - reserve) / (1.0 + frac)
        out["allocated_from"] = f"({prefix}.total_bytes - terms.reserve) / (1 + slack fraction)"
    return out


def _mesh(p: dict) -> str:
    s = f"TP{p['tp']} PP{p['pp']} DP{p['dp']}"
    if p.get("cp", 1) > 1:
        s += f" CP{p['cp']}"
    if p.get("vpp", 1) > 1:
        s += f" v{p['vpp']}"
    return s


def _predict(fields: dict, r: Result, stage: Optional[str]) -> None:
    """Resolve and evaluate the job; fill r's predictions (of r.kind)."""
    settings, plan, warnings = resolve_fields(fields)
    r.warnings = list(warnings)
    r.stack = settings.stack_name
    assumed = _Assumed(r.assumed)
    for k, v in settings.inherited:
        assumed.add(k, v, f"not in the row; the {settings.stack_name} stack's default")
    r.assumed.extend(settings.code_assumed)  # the trainer model code not checked, as explain lists it
    res = to_json(settings, plan, evaluate(settings, plan))
    r.mesh = _mesh(res["plan"])
    if stage is not None and stage not in (res["memory"].get("stages") or {}):
        stage = None
    r.stage = stage
    pk = peaks(res, stage)
    r.predicted_allocated_gib = pk["allocated"] / GiB
    r.predicted_reserved_gib = pk["reserved"] / GiB
    if "reserved_high" in pk:
        r.predicted_reserved_high_gib = pk["reserved_high"] / GiB
        if r.kind == "reserved":
            r.in_band = bool(r.predicted_reserved_gib <= r.measured_gib <= r.predicted_reserved_high_gib)
    r.predicted_gib = pk[r.kind] / GiB
    r.predicted_from = pk[f"{r.kind}_from"]
    r.error = r.predicted_gib / r.measured_gib - 1.0


# ----------------------------------------------------------------------------- measured rows
def measured_kind(row: MeasuredRow, assumed: _Assumed) -> str:
    """Rule M10: the kind of peak the row's figure is: its planner.memory_kind (never read from the
    `memory_kind` text)."""
    kind = row.planner.memory_kind if row.planner is not None else None
    if kind is None:
        raise Skip(f"memory_kind {row.memory_kind!r}: the row names no peak kind (planner.memory_kind: "
                   f"{' or '.join(KINDS)})")
    if row.planner.memory_kind_why is not None:
        assumed.add("memory_kind", kind, row.planner.memory_kind_why)
    return kind


def _stack(row: MeasuredRow, assumed: _Assumed) -> str:
    """Rule M2: the row's planner.stack with its stack_why (never read from the `framework` text)."""
    if row.planner is None or row.planner.stack is None:
        raise Skip(f"framework {row.framework!r}: the row names no stack_db entry (planner.stack)")
    assumed.add("stack", row.planner.stack, row.planner.stack_why)
    return row.planner.stack


def _hardware(row: MeasuredRow, assumed: _Assumed) -> str:
    """Rule M3: the row's planner.hardware (never read from the `gpu` text)."""
    name = row.planner.hardware if row.planner is not None else None
    if name is None:
        raise Skip(f"no hardware entry for gpu {row.gpu!r} (planner.hardware)")
    why = row.planner.hardware_why
    assumed.add("hardware", name, f"gpu {row.gpu!r}" + (f"; {why}" if why else "") + "; the GPU sets only the capacity")
    return name


def _planner_mode(row: MeasuredRow, assumed: _Assumed, field: str, noun: str) -> str:
    """The row's planner.<field> (never read from the row's `<field>` text), listed as assumed with planner.<field>_why
    where the row gives one; a row without it is skipped, naming the field."""
    mode = getattr(row.planner, field) if row.planner is not None else None
    if mode is None:
        raise Skip(f"{field} {getattr(row, field)!r}: the row names no {noun} (planner.{field})")
    why = getattr(row.planner, field + "_why")
    if why is not None:
        assumed.add(field, mode, why)
    return mode


def _sharding(row: MeasuredRow, assumed: _Assumed) -> str:
    """Rule M5: the row's planner.sharding (never read from the `sharding` text)."""
    return _planner_mode(row, assumed, "sharding", "sharding mode")


def _recompute(row: MeasuredRow, assumed: _Assumed) -> str:
    """Rule M6: the row's planner.recompute (never read from the `recompute` text)."""
    return _planner_mode(row, assumed, "recompute", "recompute mode")


def _precision(row: MeasuredRow, stack, assumed: _Assumed) -> tuple[str, Optional[str]]:
    """Rule M7: (precision, recipe) from the row's planner.precision / planner.fp8_recipe (never read from the
    `precision` text); a recipe the stack lacks skips the row."""
    prec = row.planner.precision if row.planner is not None else None
    if prec is None:
        raise Skip(f"precision {row.precision!r}: the row names no precision (planner.precision)")
    recipe = row.planner.fp8_recipe
    if recipe is not None and recipe not in stack.fp8_recipes:
        raise Skip(f"precision {row.precision!r}: the {stack.name} stack has no {recipe} recipe")
    if prec == "fp8" and recipe is None:
        assumed.add("fp8_recipe", stack.defaults.fp8_recipe, "recipe not named; the stack's default")
    return prec, recipe


def _model_path(row_id: str, block: PlannerBlock, tp: int, seq: int, tmp: Path) -> str:
    """Rule M1: a catalog name, or a model YAML written from the block's shape."""
    if block.model is not None:
        try:
            load_model(block.model)
        except PlannerError as e:
            raise PlannerError(f"row {row_id!r}: field `planner.model`: {e.message}", e.hint) from None
        return block.model
    if block.model_shape is None:
        raise Skip("the planner block names neither `model` nor `model_shape`")
    spec = dict(block.model_shape)
    if spec.get("vocab_size") == "padded":
        raise PlannerError(f"row {row_id!r}: planner.model_shape vocab_size 'padded' needs `padded_from`",
                           "give padded_from: the args' --vocab-size")
    if "padded_from" in spec:
        v = int(spec.pop("padded_from"))
        multiple = 128 * tp  # Megatron make_vocab_size_divisible_by (128) x tensor-parallel size
        spec["vocab_size"] = int(math.ceil(v / multiple) * multiple)
    spec.setdefault("description", f"shape of memory row {row_id}")
    spec.setdefault("sources", [block.why])
    spec["max_seq_len"] = max(int(spec.get("max_seq_len", seq)), seq)
    try:
        ModelSpec.model_validate(spec)
    except ValidationError as e:
        raise PlannerError(format_validation_error(e, f"row {row_id!r}: planner.model_shape").message) from None
    return _write_model(spec, tmp)


def _args_job(row: MeasuredRow, r: Result, stack_name: str, base: Optional[Path]) -> tuple[dict, Optional[str]]:
    """Rule M1b: the job the Megatron reader makes of the row's argument file (`planner.args`, relative to the
    rows file's folder `base`), on the row's GPUs (dp x tp x pp x cp) and hardware (rule M3) -- the path the
    Megatron CI corpus takes (planner/megatron_ci.py rule 3). The row's own fields must say what the flags say
    (a disagreement is an error in the file); flags the reader does not model skip the row."""
    from .trainers import load_trainer_config

    assumed = _Assumed(r.assumed)
    if stack_name != "megatron":
        raise PlannerError(f"row {row.id!r}: field `planner.args` is a Megatron-LM argument file, but the row's stack is "
                           f"{stack_name}", "give planner.args only on a Megatron-LM row")
    if base is None:
        raise PlannerError(f"row {row.id!r}: field `planner.args`: no folder to read it from", "evaluate the rows through report(path)")
    if row.dp is None:
        raise Skip("dp not stated: the GPU count cannot be built")
    hw = r.hardware = _hardware(row, assumed)
    gpus = row.dp * row.tp * row.pp * row.cp
    path = base / row.planner.args
    try:
        cfg = load_trainer_config(path, fmt="megatron", gpus=gpus, hardware=hw)
    except PlannerError as e:
        if not path.is_file():
            raise PlannerError(f"row {row.id!r}: field `planner.args`: {e.message}", e.hint) from None
        raise Skip(f"the Megatron reader refused {row.planner.args}: {e.message}") from None
    r.assumed.extend(f"{path.name}: {x}" for x in cfg.assumed)
    if cfg.unmodelled:
        raise Skip("not modelled: " + "; ".join(cfg.unmodelled))
    job = dict(cfg.job)
    precision, _ = _precision(row, load_stack(stack_name), assumed)
    want = dict(tp=row.tp, pp=row.pp, cp=row.cp, vpp=row.vpp or 1, micro_batch=row.micro_batch,
                global_batch=row.global_batch, seq_len=row.seq, sharding=_sharding(row, assumed),
                recompute=_recompute(row, assumed), precision=precision)
    if row.planner.sequence_parallel is not None:
        want["sequence_parallel"] = row.planner.sequence_parallel
    for k, v in want.items():
        got = job.get(k, 1 if k in ("cp", "vpp") else None)
        if v is not None and got != v:
            raise PlannerError(f"row {row.id!r}: field `{k}` is {v!r} but its planner.args {row.planner.args} gives {got!r}",
                               "the row's fields and the argument file describe the same run: correct one of them")
    return job, ("last" if (row.planner.stage == "last" and row.pp > 1) else None)


def measured_job(row: MeasuredRow, r: Result, tmp: Path, base: Optional[Path] = None) -> tuple[dict, Optional[str]]:
    """(Job fields, stage to compare) of a measured row; raises Skip. Fills r.kind, r.hardware.
    base: the rows file's folder (rule M1b's planner.args are read from it)."""
    assumed = _Assumed(r.assumed)
    if row.memory_gib is None:
        raise Skip("no absolute figure (memory_gib null)")
    if row.planner is not None and row.planner.excluded:
        raise Skip(f"excluded: {row.planner.excluded}")
    stack_name = _stack(row, assumed)
    stack = load_stack(stack_name)
    r.kind = measured_kind(row, assumed)
    if row.planner is None:
        raise Skip("model not identified: the row has no planner.model / planner.model_shape / planner.args")
    if row.planner.args is not None:
        return _args_job(row, r, stack_name, base)
    if row.dp is None:
        raise Skip("dp not stated: the GPU count cannot be built")
    seq = row.seq
    if seq is None and row.planner.seq_len is not None:
        seq = row.planner.seq_len
        assumed.add("seq_len", seq, "not in the row; its planner.seq_len, established from the code it ran (its why)")
    if seq is None:
        raise Skip("sequence length not stated")
    if row.micro_batch is None:
        raise Skip("micro-batch not stated")
    hw = r.hardware = _hardware(row, assumed)
    sharding = _sharding(row, assumed)
    recompute = _recompute(row, assumed)
    precision, recipe = _precision(row, stack, assumed)
    gbs = row.global_batch
    if gbs is None:
        gbs = row.micro_batch * row.dp
        assumed.add("global_batch", gbs, "not stated; micro_batch x dp (no accumulation)")
    vpp = row.vpp or 1
    if row.vpp is None and row.pp > 1:
        assumed.add("vpp", 1, "not stated; plain 1F1B")
    sp = row.planner.sequence_parallel
    if sp is None:
        sp = row.tp > 1
        if row.tp > 1:
            assumed.add("sequence_parallel", True, "tp > 1 (torchtitan's TP plan shards the norms' sequence; Korthikanti et al. 2022)")
    model = _model_path(row.id, row.planner, row.tp, seq, tmp)
    stage = "last" if (row.planner.stage == "last" and row.pp > 1) else None
    fields = dict(model=model, hardware=hw, gpus=row.dp * row.tp * row.pp * row.cp, tp=row.tp, pp=row.pp, cp=row.cp,
                  vpp=vpp, dp=row.dp, micro_batch=row.micro_batch, global_batch=gbs, seq_len=seq, sharding=sharding,
                  recompute=recompute, sequence_parallel=sp, precision=precision, stack=stack_name,
                  torch_compile=row.compile, **({"fp8_recipe": recipe} if recipe else {}),
                  **({"chunked_loss": True} if row.planner.loss == "chunked_wrapper" else {}),
                  **({"loss_logit_chunks": PR996_LOSS_CHUNKS} if row.planner.loss == "chunked" else {}),
                  **({"selective_recomputes_attention": True} if row.planner.selective_recomputes_attention else {}),
                  **({"rope_cache": row.planner.rope_cache} if row.planner.rope_cache is not None else {}),
                  **({"fsdp_root_unit": True} if row.planner.fsdp_root_unit else {}))
    return fields, stage


# ----------------------------------------------------------------------------- oracle rows
_ORACLE_MODELS = {"8B": "llama3-8b", "70B": "llama3-70b"}
# the stack_db entry of the release the oracle traced (torchtitan 0.3.0, rule O4); its FSDP over one rank (fsdp 1:
# apply_fsdp_to_decoder always, stack_db runs.fsdp_one_rank) is its fsdp2 mode at dp 1
ORACLE_STACK = "torchtitan-0.3"
CUDA_LIKE = "cuda-like(rms,sdpa)"


def oracle_job(row: OracleRow, r: Result, tmp: Path) -> tuple[dict, Optional[str]]:
    """(Job fields, stage) of an oracle row (rules O1-O4); raises Skip."""
    assumed = _Assumed(r.assumed)
    r.kind = "allocated"
    if row.ops != CUDA_LIKE:
        raise Skip(f"ops {row.ops!r}: CPU decompositions save other tensors than CUDA runs (oracle README pitfalls 1-2)")
    if row.repeat_of is not None or row.tracker == "plain":
        raise Skip("duplicate: the same configuration as another row, traced again" +
                   (" with the plain MemTracker" if row.tracker == "plain" else ""))
    model = _ORACLE_MODELS[row.flavor]
    if row.layers is not None:
        spec = load_model(model).model_dump()
        spec.update(num_layers=row.layers, name=f"{model}-{row.layers}-layers",
                    description=f"{model} truncated to {row.layers} layers (oracle --layers)")
        model = _write_model(spec, tmp)
    hw = r.hardware = "h100-sxm"
    assumed.add("hardware", hw, "not a GPU trace; allocated bytes do not depend on the GPU")
    if row.world != row.fsdp * row.tp * row.pp:
        raise PlannerError(f"oracle row {row.id!r}: world {row.world} != fsdp x tp x pp {row.fsdp * row.tp * row.pp}")
    stage = None
    if row.pp > 1 and row.stage is not None:
        if 1 < row.stage < row.pp - 1:
            raise Skip(f"stage {row.stage}: the planner reports the first, the last and its heaviest middle stage "
                       f"(stage 1: the most micro-batches in flight under 1F1B, pp - s); stage {row.stage} holds fewer")
        stage = "first" if row.stage == 0 else ("last" if row.stage == row.pp - 1 else "middle")
    split = {}
    if row.pp > 1:
        # torchtitan 0.3.0 config/configs.py pipeline_parallel_first_stage_less_layers = 1 and
        # ..._last_stage_less_layers = 1: the embedding and the output layer count as a layer each
        split = dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
        assumed.add("pipeline_split", "embedding and output counted as a layer each",
                    "torchtitan 0.3.0 pipeline_parallel_first/last_stage_less_layers = 1")
    fields = dict(model=model, hardware=hw, gpus=row.world, tp=row.tp, pp=row.pp, dp=row.fsdp, **split,
                  micro_batch=row.micro_batch, global_batch=row.micro_batch * row.fsdp * row.microbatches,
                  seq_len=row.seq, sharding="fsdp", recompute=row.ac, sequence_parallel=row.tp > 1,
                  precision="bf16", stack=ORACLE_STACK, torch_compile=False, chunked_loss=row.loss == "chunked",
                  spmd_backend=row.spmd_backend,  # rule O5
                  **({"schedule": row.schedule.lower()} if row.schedule else {}))
    return fields, stage


# ----------------------------------------------------------------------------- driver
def evaluate_rows(parsed: Union[MeasuredFile, OracleFile], base: Optional[Path] = None) -> list[Result]:
    """Each row's Result. base: the rows file's folder (rule M1b)."""
    if isinstance(parsed, MeasuredFile):
        def job_of(row, r, tmp):
            return measured_job(row, r, tmp, base)
        rows = [(row, Result(id=row.id, group=group_of(row.source), measured_gib=row.memory_gib), job_of)
                for row in parsed.memory_rows]
    else:
        rows = [(row, Result(id=row.id, group=f"oracle {row.flavor}", measured_gib=row.peak_allocated_gib), oracle_job)
                for row in parsed.oracle_rows]
    with tempfile.TemporaryDirectory(prefix="planner-memory-rows-") as d:
        for row, r, job_of in rows:
            try:
                fields, stage = job_of(row, r, Path(d))
                _predict(fields, r, stage)
            except Skip as s:
                r.skipped = str(s)
    return [r for _, r, _ in rows]


def stats(errors: list[float]) -> dict:
    """n, median and p90 |error|, signed median, worst under-prediction (the most negative error;
    None when no row is under-predicted)."""
    e = np.array(errors, dtype=np.float64)
    if not e.size:
        return {"n": 0, "median_abs_error": None, "p90_abs_error": None, "median_error": None, "worst_under": None}
    return {"n": int(e.size), "median_abs_error": float(np.median(np.abs(e))),
            "p90_abs_error": float(np.percentile(np.abs(e), 90)), "median_error": float(np.median(e)),
            "worst_under": float(e.min()) if e.min() < 0 else None}


def summarize(results: list[Result]) -> dict:
    """Overall, per kind and per source group."""
    ok = [r for r in results if r.error is not None]
    groups = {}
    for g in dict.fromkeys(r.group for r in results):
        groups[g] = {**stats([r.error for r in ok if r.group == g]),
                     "n_skipped": sum(r.group == g and r.skipped is not None for r in results)}
    return {**stats([r.error for r in ok]), "n_skipped": sum(r.skipped is not None for r in results),
            "by_kind": {k: stats([r.error for r in ok if r.kind == k]) for k in KINDS},
            "by_group": groups}


def report(path: Path) -> dict:
    """The memory-rows validate result: {"format", "rows": [...], "summary": {...}}."""
    parsed = load(Path(path))
    results = evaluate_rows(parsed, Path(path).resolve().parent)
    return {"format": "memory_rows" if isinstance(parsed, MeasuredFile) else "oracle_rows",
            "file": str(path), "rows": [r.as_dict() for r in results], "summary": summarize(results)}


def select(data: dict, groups=None, ids=None) -> dict:
    """Keep the rows of these source groups and/or ids (unknown names are errors) and
    recompute the summary."""
    rows = data["rows"]
    if groups:
        known = list(dict.fromkeys(r["group"] for r in rows))
        bad = [g for g in groups if g not in known]
        if bad:
            raise PlannerError(f"unknown group(s) {', '.join(bad)}", f"groups in this file: {'; '.join(known)}")
        rows = [r for r in rows if r["group"] in groups]
    if ids:
        known_ids = {r["id"] for r in rows}
        bad = [i for i in ids if i not in known_ids]
        if bad:
            raise PlannerError(f"unknown row id(s) {', '.join(bad)}", "ids are the rows' `id:` fields (after any --group)")
        rows = [r for r in rows if r["id"] in set(ids)]
    if not rows:
        raise PlannerError("no rows selected", "loosen --group / --ids")
    results = [Result(**r) for r in rows]
    return {**data, "rows": rows, "summary": summarize(results)}
