"""`planner validate CORPUS.json`: predicted per-GPU memory against Megatron-LM's functional-test
corpus (the golden values of NVIDIA/Megatron-LM's CI at commit d98e8a64, each with its exact
command line; tests/data/megatron_ci/README.md says where every field comes from).

What is compared. Each training row's `ground_truth.mem_peak_allocated_bytes` is PyTorch's
`allocated_bytes.all.peak` on global rank world_size - 1, the only rank with a TensorBoard
writer [1]; under Megatron's rank order ('tp-cp-ep-dp-pp', or 'tp-cp-ep-pp-dp' with
--use-tp-pp-dp-mapping) that rank is on the LAST pipeline stage [2]. Allocated, not reserved:
no CUDA context, NCCL buffers or allocator fragmentation. The planner's figure is therefore the
last stage's allocated bytes: explain's JSON `memory.stages.last.allocated_bytes` where the
memory model reports it, else that stage's total less the `reserve` (CUDA context + NCCL) and
`allocator_slack` terms (memory.reported_bytes's rule for a stack that logs max allocated);
with one pipeline stage the last stage is the first. error = predicted / measured - 1.

How a row becomes a job (nothing is read from ids, names or notes):
 1. Rows that are not training rows (`is_training`), that have no argument file
    (`args_skip_reason`: the GPU count is unknown, ...) or no measured peak are skipped with
    the reason.
 2. The training script, from the row's `family` (the test-case folder
    tests/functional_tests/test_cases/{family}/ whose recipe sets TRAINING_SCRIPT_PATH [3]):
    gpt and moe run pretrain_gpt.py (a decoder-only GPT), hybrid and nemotron pretrain_hybrid.py
    (Mamba hybrids: the Megatron reader builds their layers from --hybrid-layer-pattern and the
    --mamba-* flags, planner/trainers/megatron_model.py [9]), both modelled; bert runs
    examples/bert/pretrain_bert.py and t5 examples/t5/pretrain_t5.py (encoders, not modelled),
    mimo examples/mimo/train.py (a vision-language model); those rows are skipped with the
    script named.
 3. The argument file (`args_file`, relative to the corpus) is read by the Megatron reader
    (planner/trainers/megatron.py: the model from the flags, every default listed as assumed),
    with the row's `world_size` as the GPU count and its GPU as the hardware: A100 ->
    a100-sxm-80gb, H100 -> h100-sxm, GB200 -> gb200-nvl72 (the corpus README's platform table:
    dgx_a100 and the dgxa100_* clusters are DGX A100, dgx_h100 / dgxh100_* DGX H100, dgx_gb200
    GB200 with 4 GPUs a node; the A100's 80 GB is assumed, the repository does not state it:
    it changes the capacity, not the allocated bytes compared here).
 3b. The row's `env.CUBLAS_WORKSPACE_CONFIG` (the test case's model_config.yaml ENV_VARS at the
    recording commit, which the CI exports before training; scripts/megatron_ci_env.py wrote it)
    becomes the job's cublas_workspace_config (PyTorch's cuBLAS workspace size, memory.py [ws]);
    a row without it keeps the GPU's default workspace, as does a row whose `env` is a name (the
    project's reference corpus: the CI environment, "dev" or "lts", no ENV_VARS). --deterministic-mode
    sets none of its own on a row recorded before 3ab71eeb3e (2026-07-08: plan._cublas_workspace,
    rule 3c's trainer_date), so the case's value is the row's; the plan's environment lines
    (Settings.env_assumed) are the row's assumed lines too.
 3c. The row's recording date (`source.golden_recording_commit_date`) becomes the job's trainer_date:
    the start-up checks Megatron-LM added after it (stack_db megatron runs.deterministic_refuses:
    --deterministic-mode with --tp-comm-overlap, refused from 3ab71eeb3e, 2026-07-08) are not run on
    a row recorded before them.
 4. A row whose flags the reader could not express (TrainerConfig.unmodelled: fp32 parameters,
    a non-Adam optimizer, offloading, Megatron-FSDP, fp8 parameters, a pipeline layout the planner's
    split does not make; --decoder-first/last-pipeline-num-layers are priced as Megatron places them,
    planner/pipeline.py [14])
    or refused (an error: exit-2 input such as a hybrid pattern's MTP parts) is
    skipped with that reason.

Resumed runs (the `_2nd` rows, `run` 2: the second run of a checkpoint-resume test, which loads the first run's
checkpoint; issue 21 memleft). Their argument files are the first run's, byte for byte (44 of 44 row pairs), so
the planner prices both alike: nothing in the row's settings says "resumed", and no job setting is made of it.
The measurements agree: 43 of the 44 second runs measure within -0.6% to +3.6% of their first run's peak
(median +0.03%; mem-max-allocated-bytes is never reset, so the checkpoint load's own peak, below the training
step's, does not show), and their last-step allocated bytes within 50 MB. The one exception is
moe__gpt3_mcore_te_tp2_zp_z3_resume_torch_dist_te_8experts2parallel_top2router__dev_dgx_h100_2nd (Megatron-FSDP
optim_grads_params, --ckpt-format fsdp_dtensor, --dist-ckpt-optim-fully-reshardable; the corpus' worst tier-B row,
-44.6%): 4,559,089,664 B against its first run's 2,587,204,608, and 2,789,600,768 B still allocated at the last
step against 787,469,312: about 2.0e9 B that the fsdp_dtensor load leaves allocated for the rest of the run
(megatron/training/checkpointing.py @d98e8a64 _load_base_checkpoint l. 2129-2186: preprocess_fsdp_dtensor_state_dict
l. 1730-, torch.distributed.checkpoint.load_state_dict into the sharded state dict, the raw dicts put back).
Which tensors stay referenced was not derived from the source (2.0e9 B is no whole number of bytes per parameter
of the rank's 30.1M sharded or ~70M model-parallel parameters), so it is not priced; the first run of the same
row is within 2.4%. The corpus marks the row tier B ("peak includes checkpoint load"). The same load code stands at the
row's recording commit ad2ab2ca12 (checkpointing.py l. 1230-1262).

The LTS container's attention (issue 21 memskip; not priced). The 29 compared A100 rows of `lts` golden files recorded
before 2025-11-06 that run --deterministic-mode with TE's default attention backend are under-predicted by 19-43%;
priced with unfused attention (the job field attention eager) 27 of them are within -1.3..+1.0%, while the 14 `lts`
rows recorded later are -1.3..-4.3% as priced. Megatron-LM's CI built its LTS image on nvcr.io/nvidia/pytorch:24.01-py3
(.gitlab/stages/01.build.yml CI_MCORE_LTS_IMAGE, Dockerfile.ci.lts) until 23a1dcaf74 (2025-11-06: 25.09); the cases
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, under which TransformerEngine v1.2.1 (transformer_engine/pytorch/
attention.py l. 1999-2011, 2366-2383) disables FlashAttention 2 and, off sm90, cuDNN's arbitrary-sequence fused
attention, leaving UnfusedDotProductAttention at seq 1,024. Not priced: the 24.01 container's TE and flash-attn
releases are in no mirror (TE main from f2bd53c4c, 2024-01-06, keeps FlashAttention 2 deterministic with flash-attn
>= 2.4.1), and no corpus field names a row's container (its `env` holds ENV_VARS; the environment is only in the
golden file's name, which no rule here reads). README "Memory against Megatron-LM's CI" lists the figures.

Statistics, per memory trust tier (the corpus' `trust.memory`, A/B/C: README "Trust tiers")
and over all rows: n, the median of |error|, the signed median, the 90th percentile of |error|
(numpy's linear interpolation, Hyndman & Fan type 7) and the worst under-prediction (the most
negative error, with its row). The records are for validation only: nothing in the planner is
fitted to them.

References
[1] NVIDIA/Megatron-LM @d98e8a64 megatron/training/global_vars.py (the TensorBoard writer on
    args.rank == world_size - 1 only) and megatron/training/training.py training_log
    (mem-max-allocated-bytes = torch.cuda.memory_stats()["allocated_bytes.all.peak"]).
[2] megatron/training/initialize.py _initialize_distributed -> parallel_state
    .initialize_model_parallel(order='tp-cp-ep-dp-pp' | 'tp-cp-ep-pp-dp'): pp is the outermost
    axis or next to it, so the last rank is on the last stage.
[3] tests/test_utils/recipes/h100/gpt.yaml:57 and moe.yaml:57 (pretrain_gpt.py), bert.yaml:56
    (examples/bert/pretrain_bert.py), t5.yaml:56 (examples/t5/pretrain_t5.py), mamba.yaml:55 and
    gb200/nemotron.yaml:58 (pretrain_hybrid.py), mimo.yaml:61 (examples/mimo/train.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from . import files
from .errors import PlannerError

#: row `gpu` -> hardware_db entry (module docstring, rule 3)
HARDWARE_BY_GPU = {"A100": "a100-sxm-80gb", "H100": "h100-sxm", "GB200": "gb200-nvl72"}
#: row `family` -> the training script its recipes run [3]
TRAINING_SCRIPTS = {
    "gpt": "pretrain_gpt.py", "moe": "pretrain_gpt.py", "bert": "examples/bert/pretrain_bert.py",
    "t5": "examples/t5/pretrain_t5.py", "hybrid": "pretrain_hybrid.py", "nemotron": "pretrain_hybrid.py",
    "mimo": "examples/mimo/train.py",
}
#: the scripts whose model the planner builds, and why the others are not
MODELLED_SCRIPTS = {"pretrain_gpt.py", "pretrain_hybrid.py"}
SCRIPT_SKIP = {
    "examples/bert/pretrain_bert.py": "a BERT encoder (bidirectional, with a pooler and binary head): the planner models decoder-only GPTs",
    "examples/t5/pretrain_t5.py": "a T5 encoder-decoder: the planner models decoder-only GPTs",
    "examples/mimo/train.py": "a multimodal (vision-language) model: the planner models the language model only",
}
TIERS = ("A", "B", "C")


def is_corpus(data) -> bool:
    """A Megatron CI corpus: a JSON object whose `rows` are mappings with `row_id` and
    `ground_truth` (a runs file is a YAML list)."""
    return (isinstance(data, dict) and isinstance(data.get("rows"), list) and bool(data["rows"])
            and all(isinstance(r, dict) and "row_id" in r and "ground_truth" in r for r in data["rows"]))


def load_corpus(path: Path) -> dict:
    """The corpus at `path` (JSON); a file that is not one is a PlannerError naming it."""
    data = files.read_json(Path(path), "give the corpus.json of tests/data/megatron_ci/")
    if not is_corpus(data):
        raise PlannerError(f"{path}: not a Megatron CI corpus (a JSON object whose `rows` each have row_id and ground_truth)",
                           "give tests/data/megatron_ci/corpus.json, or a runs YAML (schema of tests/data/published_runs.yaml)")
    seen: set = set()
    for i, r in enumerate(data["rows"]):
        rid = r.get("row_id")
        if not isinstance(rid, str) or not rid:
            raise PlannerError(f"{path}: row {i}: `row_id` must be a non-empty string", "one id a row")
        if rid in seen:
            raise PlannerError(f"{path}: row {i}: row_id {rid!r} appears twice", "row ids are unique")
        seen.add(rid)
        if not isinstance(r["ground_truth"], dict):
            raise PlannerError(f"{path}: row {rid!r}: `ground_truth` must be a mapping", "see the corpus README's row fields")
    return data


@dataclass
class CIRow:
    row_id: str
    tier: Optional[str] = None
    family: Optional[str] = None
    gpu: Optional[str] = None
    hardware: Optional[str] = None
    world_size: Optional[int] = None
    mesh: Optional[str] = None
    measured_bytes: Optional[float] = None
    predicted_bytes: Optional[float] = None
    error: Optional[float] = None
    predicted_from: Optional[str] = None  # "allocated_bytes" (the memory model's key) or "total-reserve-slack"
    terms: dict = field(default_factory=dict)  # the last stage's memory terms (bytes)
    assumed: list[str] = field(default_factory=list)
    skipped: Optional[str] = None

    def as_dict(self) -> dict:
        return asdict(self)


class Skip(Exception):
    pass


def _mesh(p: dict) -> str:
    s = f"TP{p['tp']} PP{p['pp']} DP{p['dp']}"
    if p["cp"] > 1:
        s += f" CP{p['cp']}"
    if p["vpp"] > 1:
        s += f" v{p['vpp']}"
    if p.get("ep", 1) > 1:
        s += f" EP{p['ep']}"
    return s + f" mbs{p['micro_batch']} gbs{p['global_batch']}"


def last_stage_allocated(settings, plan) -> tuple[float, str, dict]:
    """(allocated bytes of the last pipeline stage, where the figure came from, that stage's
    terms). The stage's figures are the ones explain's JSON reports as memory.stages.last
    (memory.grouped of memory.stage_memory_terms' last stage; with one stage it is also the
    first), computed here without the step-time model: its `allocated_bytes` when the memory
    model reports one, else the stage's total less its reserve (CUDA context + NCCL) and
    allocator slack (memory.reported_bytes's rule for a stack that logs max allocated)."""
    from . import memory as mem

    t = mem.stage_memory_terms(settings, plan)[mem.STAGE_LAST]
    grouped = mem.grouped(t)
    terms = {k: float(np.asarray(v)) for k, v in t.items()}
    if grouped.get("allocated_bytes") is not None:
        return float(np.asarray(grouped["allocated_bytes"])), "allocated_bytes", terms
    return float(np.asarray(t.total - mem.outside_bytes(t) - t.allocator_slack)), "total-reserve-slack", terms


def nccl_env(r: dict) -> tuple[dict, list[str]]:
    """The job fields of a row's NCCL environment and the lines saying where each came from. A variable the case's
    ENV_VARS sets (the row's `env`, at the recording commit) wins over the CI training script's default
    (`env.launcher`: NVIDIA/Megatron-LM tests/functional_tests/shell_test_utils/_run_training.sh from ef1888bc5c,
    2026-04-20, `export NCCL_PROTO="${NCCL_PROTO:-simple}"`, NCCL_ALGO Ring, NCCL_NVLS_ENABLE 0, exported before the
    ENV_VARS); neither set: NCCL's own choice (no field). An NCCL_ALGO the model refuses (comm.nccl_algo_candidates:
    Tree alone leaves reduce-scatter and all-gather no algorithm, which NCCL from 2.24 fails: v2.24.3-1 src/enqueue.cc
    l. 1656 'no algorithm/protocol available for function'; the 14 A100 `Tree` rows
    ran, on an NCCL that still fell back to ring, NVIDIA/nccl v2.20.3-1 src/graph/tuning.cc l. 325-338, removed by
    v2.24.3-1) is left out, with a note: NCCL's own choice priced. NCCL_NVLS_ENABLE is the job's nccl_nvls_enable
    (0: NVLS and NVLS-tree out, comm.py [22]), read as NCCL reads it and as the launch-script reader reads it
    (megatron.nccl_nvls_enable_value: any text is a value NCCL runs with; one other than 0, 1, 2 with NCCL's reading in
    its note). The variables and fields: megatron.NCCL_ENV_FIELDS, the table the launch-script readers and the
    exports read."""
    from .comm import nccl_algo_candidates, nccl_proto_protocols
    from .trainers.megatron import NCCL_ENV_FIELDS, nccl_nvls_enable_value

    check = {"nccl_algo": nccl_algo_candidates, "nccl_proto": nccl_proto_protocols}

    env = r.get("env") if isinstance(r.get("env"), dict) else {}
    launcher = env.get("launcher") if isinstance(env.get("launcher"), dict) else {}
    fields: dict = {}
    notes: list[str] = []
    for field, var, _ in NCCL_ENV_FIELDS:
        case, default = env.get(var), launcher.get(var)
        value = case if case is not None else default
        if value is None or value == "":  # empty: unset, as the launch-script readers take it (NCCL_NVLS_ENABLE: NCCL
            # too, src/misc/param.cc @5067397c l. 93)
            continue
        where = (f"in the case's ENV_VARS ({env.get('source')})" if case is not None
                 else f"exported by the CI's training script ({launcher.get('source')})")
        if field == "nccl_nvls_enable":  # any text: NCCL's reading of it
            fields[field], how = nccl_nvls_enable_value(str(value))
            notes.append(f"{field}={fields[field]}: {var}={value} {where} ({how})" if how
                         else f"{field}={value}: {var} {where}")
            continue
        try:
            check[field](str(value))
        except PlannerError as e:
            notes.append(f"{var}={value} {where} not priced (NCCL's own choice instead): {e.message}")
            continue
        fields[field] = str(value)
        notes.append(f"{field}={value}: {var} {where}")
    if launcher.get("unknown") and len(fields) < len(NCCL_ENV_FIELDS):
        names = " / ".join(var for _, var, _ in NCCL_ENV_FIELDS)
        notes.append(f"NCCL's default where the case sets no {names}: the CI launcher's are unknown "
                     f"({launcher['unknown']})")
    return fields, notes


def evaluate_row(r: dict, base: Path) -> CIRow:
    """One row: predicted against measured last-stage peak allocated bytes, or skipped."""
    out = CIRow(row_id=r["row_id"], tier=(r.get("trust") or {}).get("memory"), family=r.get("family"), gpu=r.get("gpu"),
                world_size=r.get("world_size"), measured_bytes=(r.get("ground_truth") or {}).get("mem_peak_allocated_bytes"))
    try:
        _predict(r, base, out)
    except Skip as s:
        out.skipped = str(s)
    return out


def _predict(r: dict, base: Path, out: CIRow) -> None:
    from .plan import plan_dict

    if out.measured_bytes is None and r.get("is_training") and r.get("args_file"):
        raise Skip("no measured peak (the golden file has no mem-max-allocated-bytes series)")
    settings, plan = resolve_row(r, base, out)
    out.mesh = _mesh(plan_dict(plan, settings))
    out.predicted_bytes, out.predicted_from, out.terms = last_stage_allocated(settings, plan)
    out.error = out.predicted_bytes / float(out.measured_bytes) - 1.0


def resolve_row(r: dict, base: Path, out: CIRow, nccl: bool = True):
    """(settings, plan) of a training row's job, as `planner validate` prices it (Skip where it is not); nccl False
    leaves the row's NCCL environment out (nccl_env), for scripts/megatron_ci_step_times.py's before / after."""
    from .plan import resolve
    from .schema import Job
    from .catalog import format_validation_error
    from .trainers import load_trainer_config
    from pydantic import ValidationError

    if not r.get("is_training"):
        raise Skip(f"not a training row ({r.get('kind')})")
    if not r.get("args_file"):
        raise Skip(f"no argument file: {r.get('args_skip_reason') or 'none in the corpus'}")
    script = TRAINING_SCRIPTS.get(r.get("family"))
    if script is None:
        raise Skip(f"family {r.get('family')!r}: its training script is not known (module docstring, rule 2)")
    if script not in MODELLED_SCRIPTS:
        raise Skip(f"{script}: {SCRIPT_SKIP[script]}")
    hw = HARDWARE_BY_GPU.get(r.get("gpu"))
    if hw is None:
        raise Skip(f"gpu {r.get('gpu')!r}: no hardware entry")
    out.hardware = hw
    if r.get("gpu") == "A100":
        out.assumed.append("hardware=a100-sxm-80gb: the CI's A100 memory size is not stated (capacity only)")
    ws = r.get("world_size")
    if not isinstance(ws, int) or ws <= 0:
        raise Skip(f"world_size {ws!r}: the GPU count is unknown")
    args = base / r["args_file"]
    try:
        # the row's training script: the flags its extra_args_provider adds are read as its own (megatron_argparse)
        cfg = load_trainer_config(args, fmt="megatron", gpus=ws, hardware=hw, script=script)
    except PlannerError as e:
        raise Skip(f"the Megatron reader refused it: {e.message}") from None
    out.assumed += [str(x) for x in cfg.assumed]  # the lines as text (the reader's report.Note records)
    if cfg.unmodelled:
        raise Skip("not modelled: " + "; ".join(cfg.unmodelled))
    # the test case's ENV_VARS at the recording commit (scripts/megatron_ci_env.py writes them as a mapping):
    # PyTorch's cuBLAS workspace size (memory.py [ws]). The project's reference corpus has `env` as the CI
    # environment's name instead ("dev", "lts": the golden file's golden_values_{env}_{platform}.json),
    # which carries no ENV_VARS: read as none, as for a row without the key.
    env_vars = r.get("env") if isinstance(r.get("env"), dict) else {}
    env = env_vars.get("CUBLAS_WORKSPACE_CONFIG")
    if env:
        cfg.job["cublas_workspace_config"] = env
        out.assumed.append(f"cublas_workspace_config={env}: CUBLAS_WORKSPACE_CONFIG in the case's ENV_VARS "
                           f"({env_vars.get('source')})")
    # the run's NCCL_ALGO / NCCL_PROTO (the case's ENV_VARS, else what the CI's training script exported at the
    # recording commit: scripts/megatron_ci_env.py), priced through the job's nccl_algo / nccl_proto
    if nccl:
        fields, notes = nccl_env(r)
        cfg.job.update(fields)
        out.assumed += notes
    # the trainer's commit: the row's recording commit (source.golden_recording_commit_date, its date), whose
    # Megatron-LM ran without the start-up checks added since (stack_db megatron runs.deterministic_refuses since:
    # --deterministic-mode refuses --tp-comm-overlap from 3ab71eeb3e, 2026-07-08; the gpt3_weekly ..._tp_overlap rows
    # were recorded at 4828d651e7, 2026-07-02, with both)
    src = r.get("source") if isinstance(r.get("source"), dict) else {}
    day = str(src.get("golden_recording_commit_date") or "")[:10]
    if day:
        cfg.job["trainer_date"] = day
        out.assumed.append(f"trainer_date={day}: the recording commit {str(src.get('golden_recording_commit'))[:10]}'s "
                           "date (start-up checks Megatron-LM added later not run: runs.deterministic_refuses)")
    try:
        job = Job.model_validate(cfg.job)
    except ValidationError as e:
        raise Skip("plan refused: " + format_validation_error(e, "plan").message) from None
    try:
        settings, plan, _ = resolve(job)
    except PlannerError as e:
        raise Skip(f"plan refused: {e.message}") from None
    out.assumed += list(settings.env_assumed)  # what the trainer set in the environment, dated (plan._cublas_workspace)
    return settings, plan


def stats(err: list[float], rows: list[CIRow]) -> dict:
    """n, median |error|, signed median, p90 |error|, worst under-prediction (row and error)."""
    e = np.asarray(err, dtype=np.float64)
    if not e.size:
        return {"n": 0, "median_abs_error": None, "median_error": None, "p90_abs_error": None,
                "worst_under": None, "worst_under_error": None}
    i = int(np.argmin(e))
    return {"n": int(e.size), "median_abs_error": float(np.median(np.abs(e))), "median_error": float(np.median(e)),
            "p90_abs_error": float(np.percentile(np.abs(e), 90)),
            "worst_under": rows[i].row_id if e[i] < 0 else None, "worst_under_error": float(e[i]) if e[i] < 0 else None}


def summarize(rows: list[CIRow]) -> dict:
    """Per tier A/B/C and over all: stats(); the skipped count and the count per reason."""
    done = [r for r in rows if r.error is not None]
    by_tier = {t: stats([r.error for r in done if r.tier == t], [r for r in done if r.tier == t]) for t in TIERS}
    reasons: dict[str, int] = {}
    for r in rows:
        if r.skipped is not None:
            key = r.skipped.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
    return {"by_tier": by_tier, "all": stats([r.error for r in done], done),
            "n_rows": len(rows), "n_skipped": sum(r.skipped is not None for r in rows),
            "skipped_by_reason": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
            "rows_by_tier": {t: sum(r.tier == t for r in rows) for t in TIERS}}


def report_corpus(path: Path, tiers=None, ids=None) -> dict:
    """The validate result for a corpus: {"corpus": path, "compared": "...", "rows": [...],
    "summary": {...}}. tiers / ids: only these memory tiers / row ids."""
    path = Path(path)
    data = load_corpus(path)
    rows = data["rows"]
    if tiers:
        rows = [r for r in rows if (r.get("trust") or {}).get("memory") in set(tiers)]
    if ids:
        want = set(ids)
        unknown = sorted(want - {r["row_id"] for r in rows})
        if unknown:
            raise PlannerError(f"{path}: no row {unknown[0]!r}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
                               "give row_id values of the corpus (--ids a,b)")
        rows = [r for r in rows if r["row_id"] in want]
    base = path.resolve().parent
    out = [evaluate_row(r, base) for r in rows]
    return {"corpus": str(path), "source": data.get("source"),
            "compared": "peak allocated bytes of the last pipeline stage (global rank world_size-1): predicted / measured - 1",
            "rows": [r.as_dict() for r in out], "summary": summarize(out)}
