"""`planner validate`: the planner's predictions against published training runs.

A runs file is a YAML list of records in the schema of tests/data/published_runs.yaml (a copy
of the project's reference data): model shape, parallel config, GPU type and count, and what
the source published (tokens/s per GPU and/or iteration time, optionally memory per GPU).
Each record becomes a planner Job with an in-memory ModelSpec, goes through the same
`plan.resolve` checks and `explain.evaluate` cost models as `planner explain`, and the
prediction is compared with the published figure:

    error = predicted / published - 1                  (tokens/s per GPU; memory likewise)
    published tokens/s per GPU, when only the iteration time is given:
        global_batch_size * seq_length / (iteration_time_s * num_gpus)

Units: tokens/s per GPU; seconds; memory in bytes inside, GiB (2**30 B) only in the record
key `memory_per_gpu_gib` and in output keys that say so (`*_memory_gib`).

Inference rules. A record may set `hardware:`, `gated_mlp:` and the other architecture
fields itself; whatever it leaves out is inferred by the rules below, and every value the
command had to assume is listed, with its reason, in the row's `assumed` list. A record
that cannot be evaluated is kept in the output with `skipped: <reason>`; none is dropped.

 1. hardware from the record's `hardware:` field (a catalog name or a hardware YAML path; never
    from what its gpu_type text looks like: before the 2026-12-07 audit2 the entry was matched
    in gpu_type's text, and the 185 records of tests/data that rule named carry it as the field
    now); `hardware_assumed:` (text) says why a record's entry is an assumption about the part
    its source names (the three lower-TDP H100 records of torchtitan [9]: the 94-96 GB HBM2e
    Grand Teton part, 2.4 TB/s, 500 W), and lists the entry as assumed with that reason. A
    record without `hardware:` is skipped, "no hardware entry for <gpu_type>" (TPU v4, ...). A
    record's `power_limit_w` overrides the entry's power limit.
 2. Architecture (gated_mlp, norm, tied_embeddings, position_embedding, linear_bias, dropout):
    (a) from the catalog model (model_zoo/) with the identical shape (layers, hidden, ffn,
    heads, KV heads, vocab) -- each zoo file cites its sources; else (b) from the record's
    `family` field (never from what its model_name looks like; before the 2026-12-07 audit the
    family was matched in model_name's text, and the 24 records of tests/data it named carry it
    as the field now): llama (Llama/Mistral/Qwen/Gemma) [1]: SwiGLU, RMSNorm, RoPE, no biases, untied;
    palm [2]: SwiGLU, RoPE, no biases, tied; nemotron [3]: squared-ReLU (not gated), LayerNorm,
    RoPE, no biases, untied; mpt (llm-foundry benchmark config, model_zoo/mpt-7b.yaml): GELU,
    LayerNorm, learned positions, biases, tied; neox (GPT-NeoX) [4]: GELU, LayerNorm, rotary, biases,
    untied; gpt (GPT-3, Megatron GPT) [5]: GELU, LayerNorm, learned positions, biases, dropout,
    tied; else (c) gated iff ffn_hidden_size != 4 * hidden_size (the GPT MLP is 4h [6]; gated
    MLPs use ~8/3 h to keep the parameter count [1]), RMSNorm if gated else LayerNorm, RoPE,
    no biases, no dropout, untied.
 3. micro_batch_size null -> global_batch / (dp * grad_accum_steps) when grad_accum_steps is
    given, else 1. vpp null -> 1 (plain 1F1B; vpp > 1 -> interleaved). cp null -> 1.
 4. recompute from the record's `recompute:` field (the Job's none | selective | full); null -> none,
    listed as assumed (Megatron-LM's default when --recompute-granularity is unset [5]). Rules 4, 6
    and 7 read the explicit fields only: the source's own words are kept, unread, in
    activation_recompute_text / zero_fsdp_mode_text / precision_text (before the 2026-12-07 audit4
    the free-text activation_recompute, zero_fsdp_mode and precision were read by the term each
    started with -- "none (Megatron DDP; ...)" none, "FSDP FULL_SHARD (ZeRO-3-like)" fsdp,
    "fp8 MXFP8" fp8 mxfp8, "mixed 16-bit" bf16 assumed -- and the 192 records of tests/data carry
    what that rule gave as the fields: scripts/migrate_record_fields.py, validate's CSV of every
    file unchanged but for the assumed names: activation_recompute= is recompute=, zero_fsdp_mode=
    sharding=). A value outside a field's list is an error naming the file, the record, the
    field and the valid values (schema; `--lenient`: the record is skipped with that reason); the
    old keys are errors whose hint names the new field.
 4b. torchtitan's "selective" activation checkpointing [11] is not Megatron's (which re-runs
    only the attention core): its 'layer' policy checkpoints every 2nd layer
    (selective_ac_option '2') and its 'op' policy saves every other matmul and recomputes the
    rest of the layer; both re-run about half of the forward pass. Modelled as full
    recompute of half of each stage's layers (recompute_layers = ceil(layers / pp / 2)).
 5. sequence_parallel null -> on iff tp > 1 (Korthikanti et al. 2022 [7]; Megatron recipes
    enable it with TP).
 6. sharding from the record's `sharding:` (the Job's none | zero1 | zero2 | fsdp | hsdp; DeepSpeed
    ZeRO-1 / Megatron's distributed optimizer are zero1, ZeRO-3 / FSDP FULL_SHARD fsdp, HSDP /
    HYBRID_SHARD hsdp, which needs `shard_group:`) and `sharding_mode:` (the record's stack's mode,
    stack_db runs.sharding: FSDP SHARD_GRAD_OP is the stack's fsdp mode that does not reshard after
    forward, llm-foundry shard_grad_op, torchtitan fsdp2_no_reshard; null: the stack's default for
    the level); null -> none, listed as assumed (plain data parallel).
 7. precision from the record's `precision:` (bf16 | fp8 | nvfp4, precisions.PRECISIONS) and
    `fp8_recipe:` (precisions.FP8_RECIPES, RunRecord._known_recipe; a recipe of another precision
    than the record's is an error, _recipe_of_precision; null: the stack's default recipe); fp16,
    or a 16-bit type the source does not name, is precision bf16 with `precision_assumed:` saying
    so in the record's own words, listed as assumed with that reason followed by the planner's
    (fp16 and bf16 have the same dense tensor-core peak on A100 and H100, hardware_db datasheet
    figures: precisions.SAME_PEAK, added here once; a record that repeats it, or gives the reason
    beside another precision, is an error); null -> bf16 (assumed).
 7b. pp x vpp: a megatron record whose layers do not divide into pp x vpp chunks gets
    Megatron-Core's --account-for-embedding/loss-in-pipeline-split where they make a legal
    layout (_megatron_split), listed as assumed. A record's pipeline_layout (Megatron
    --pipeline-model-parallel-layout) places the split itself (_layout_split): its layers per
    model chunk, the last chunk's MTP and loss counted as the layers it lacks (the Job's
    loss_layers_in_pipeline_split).
 7c. A record that lacks a required field (num_layers, gpu_type, ...) is a skipped row with
    the reason; the rest of the file is read.
 8. bytes_per_param: the record's own, else the stack's default (megatron: 18 B, fp32 main
    grads; mixed16 16 B elsewhere) -- see schema.BYTES_PER_PARAM_PRESETS. Affects memory only.
 9. attention (issue 22), the first that applies, listed as assumed with the rule's letter:
    (a) the record's own `attention`; (b) the stack's `defaults.attention` where its stack file
    sets one (`attention` among the keys of its `defaults:`): what the stack's code runs without
    an option, e.g. megatron-deepspeed's eager CoreAttention, as Megatron-DeepSpeed runs flash
    only with --use-flash-attn* (stack_db/megatron-deepspeed.yaml defaults.sources:
    microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py l. 927-935, model/transformer.py
    l. 528-531, 606-611); (c) else the date rule: eager (stores the s x s scores) for a record
    whose `source_year` is 2021 or earlier, which predates FlashAttention (Dao et al., arXiv
    2205.14135, May 2022 [8]); flash otherwise, an undated record included. The year is the
    record's own field, not read out of its `source` text (before the 2026-12-07 audit it was
    the latest 19xx/20xx in that text; the catalog's records carry the same years as fields). A stack file that leaves defaults.attention out (megatron,
    torchtitan, llm-foundry, ...) has the schema's flash, which says nothing about the code a
    2021 record ran, hence (c) there.
12. Mixture-of-experts records name a catalog entry (`model:`, e.g. deepseek-v3) for what the
    shape fields cannot carry (experts, router, MLA); the record's layers, hidden size, heads
    and vocabulary must match it. ep null -> 1; etp null -> tp (Megatron's default
    expert_tensor_parallel_size, listed as assumed); moe_capacity_factor null -> dropless; the
    routing imbalance (moe_rank_imbalance) null -> the rule of moe_load_balancing (planner/
    imbalance.py), listed as assumed; ep_comm_overlap null -> off (Megatron-Core's
    default), only an explicit `ep_comm_overlap: true` turns it on; the router's path
    (planner/layers/moe.py router_saved_terms): moe_aux_loss_coeff null -> Megatron's default
    0.0 (no auxiliary loss computed; listed as assumed where the stack prices the router's
    saves, stack memory.moe_routing_saved: a record never takes a model's training recipe),
    moe_z_loss_coeff null -> none, moe_router_pre_softmax null -> false.
12b. A record with an inline shape (no `model:`) may give `hf_model_type`, the config.json
    `model_type` of the model it trained (cited in provenance): the stack's model code that ran
    it (stack_db runs.model_codes, startup.model_code) is then checked as for a catalog entry;
    null -> none, listed as assumed on a stack with model codes. With `model:` it is an error
    (the entry carries its own).
13. Megatron settings a record may state: etp (--expert-tensor-parallel-size, priced as its
    own axis: MoE parallel folding, planner/moe.py) and account_for_embedding/loss_in_pipeline_split
    go to the job (null: tp, off). The token dispatcher in Megatron's words
    (moe_token_dispatcher_type alltoall | allgather | flex with moe_flex_dispatcher_backend
    deepep | hybridep) sets the job's moe_dispatcher as the Megatron reader does, unless the
    record gives moe_dispatcher itself. CUDA graphs (cuda_graph_impl, cuda_graph_scope) go to
    the job's fields of those names (null: none), checked as Megatron checks them
    (planner/cuda_graphs.py): the memory their static outputs hold is priced; the time is
    the fitted moe_host's, which covers the records with and without them (docs/moe_accuracy.md).
13b. recompute_modules (Megatron --recompute-modules) go to the job's field of that name: the
    selective policy they make (planner/recompute_modules.py); moe_grouped_gemm likewise (null:
    the stack's default, Megatron-Core's off, listed as assumed), which moe_act needs (start-up rule MEGATRON_MOE_ACT_GROUPED_GEMM). Megatron reads them under
    --recompute-granularity selective only, so a record with them and another
    recompute is skipped with the reason, as is one naming a module the planner
    does not price (gdn_norm_out, gdp_in_proj, gdp_qkv, mhc).
13c. bias_activation_fusion (Megatron-Core's fused bias + activation kernel) goes to the job's
    field of that name; null -> the stack's default, listed as assumed.
13d. nccl_nvls_enable (the run's NCCL_NVLS_ENABLE) goes to the job's field of that name; null -> unset (NCCL's
    default 2: NVLS where the hardware has it). Megatron-Bridge's performance launcher exports
    NCCL_NVLS_ENABLE=0 for every Slurm run (scripts/performance/utils/executors.py PERF_ENV_VARS, 'Disable NVLink
    SHARP to save memory': l. 42 at v0.2.0, l. 43 at v0.3.0, v0.4.0, v0.5.0), set back to 1 only with nccl_ub
    (Megatron FSDP's NCCL user buffers), so the Bridge release-table records state 0 with that line.
11. tp_comm_overlap: the record's `tp_comm_overlap` field; null -> the stack's default
    (never read from names or notes); fp8_param_gather, fsdp_root_unit and cross_entropy_fusion likewise (null -> off;
    cross_entropy_fusion_impl null -> native); fp8_allgather null -> the stack's recipe rule
    (allgather_fp8), listed as assumed where the recipe has an fp8 FSDP all-gather; fp8_precompute_scale null ->
    false (torchtitan's default), listed as assumed where the run gathers fp8 (step.py [39]).
10. Skipped: moe true without `model:` (the record's shape fields describe dense models only),
    ep > 1 without moe; tp, pp or num_gpus null; a global batch
    that does not divide into dp x micro_batch (and every other `plan.resolve` check); no
    published tokens/s, iteration time or memory; with --lenient, a record the schema refuses (an
    unknown value of recompute, sharding, precision, ...) or a figure the hardware cannot produce.

Summary statistics over the records with a tokens/s error: n, the median and the 90th
percentile of |error| (numpy.percentile's linear interpolation, Hyndman & Fan type 7 [10]).

The "complete records" of published_runs.yaml (`--complete`) are those of the source groups
in COMPLETE_GROUPS (Megatron-LM 2021 Table 1, the Megatron-LM README H100 tables, MosaicML
llm-foundry FSDP benchmarks, torchtitan's 2024 performance page) that publish tokens/s per
GPU or an iteration time and give tp, pp and num_gpus.

References
 [1] Touvron et al. 2023, "LLaMA", arXiv:2302.13971, sec. 2.2 (SwiGLU with 2/3 4d, RMSNorm, RoPE).
 [2] Chowdhery et al. 2022, "PaLM", arXiv:2204.02311, sec. 2 (SwiGLU, RoPE, shared input-output
     embeddings, no biases).
 [3] Parmar et al. 2024, "Nemotron-4 15B", arXiv:2402.16819, sec. 2 (squared ReLU, RoPE, no
     bias terms, untied embeddings).
 [4] Black et al. 2022, "GPT-NeoX-20B", arXiv:2204.06745, sec. 2.1 (rotary, untied embeddings).
 [5] NVIDIA/Megatron-LM megatron/training/arguments.py defaults (see model_zoo/megatron-gpt-*.yaml).
 [6] Brown et al. 2020, "GPT-3", arXiv:2005.14165, sec. 2.1 / Table 2.1 (d_ff = 4 d_model).
 [7] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
     arXiv:2205.05198, sec. 4.2.2 (sequence parallelism alongside tensor parallelism).
 [8] Dao et al. 2022, "FlashAttention", arXiv:2205.14135.
 [9] torchtitan docs/performance.md (2024-08-23): "HBM2e based lower TDP SXM H100(95GB)".
[11] pytorch/torchtitan torchtitan/models/llama/parallelize_llama.py (2024): _apply_ac with
     mode 'selective', selective_ac_option 'op' (_save_list of ops, every other mm recomputed)
     or an integer layer frequency.
[10] Hyndman & Fan 1996, "Sample Quantiles in Statistical Packages", Am. Stat. 50(4) (type 7).
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .catalog import format_validation_error, list_models, load_hardware, load_model, load_stack, model_dir, read_yaml
from .errors import PlannerError
from .precisions import FP8_RECIPES, PRECISIONS, SAME_PEAK, recipe_precision
from . import files
from .explain import evaluate, to_json
from .plan import default_micro_batch, param_gather_assumed, resolve
from .stacks import DEFAULT_STACK
from .schema import (Bool, BppPreset, BytesPerParam, Count, Int, Job, ModelSpec, Precision, Real, Recompute, RecomputeModule,
                     Schedule, Sharding, split_fields)

GiB = 2.0**30

#: Source groups of published_runs.yaml whose records form the "complete" accuracy set.
COMPLETE_GROUPS = (
    "narayanan2021_table1",  # Narayanan et al. 2021 (SC21) Table 1, A100
    "megatron_lm_readme_h100_weak_scaling",  # Megatron-LM README H100 weak-scaling table
    "megatron_lm_readme_h100_strong_scaling",  # (its two records lack tp/pp: never complete)
    "mosaicml_llmfoundry_benchmarks",  # llm-foundry benchmark tables, pure FSDP, H100/A100
    "torchtitan_docs_performance_2024",  # torchtitan docs/performance.md (2024)
)

TIME_MODEL_UNAVAILABLE = (
    "time model unavailable: explain.to_json gives no throughput.tokens_per_s_per_gpu"
)

ARCH_FIELDS = ("gated_mlp", "norm", "tied_embeddings", "position_embedding", "linear_bias", "dropout")


# ----------------------------------------------------------------------------- schema
class RunRecord(BaseModel):
    """One published run (every key of published_runs.yaml) plus optional overrides.

    Unknown keys are errors (extra="forbid"), so a typo names the record and the field.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str
    source_group: Optional[str] = None
    source: Optional[str] = None
    source_location: Optional[str] = None
    family: Optional[Literal["llama", "palm", "nemotron", "mpt", "neox", "gpt"]] = Field(
        default=None, description="the architecture family whose defaults give the architecture fields the record "
                                  "leaves out where no catalog model has its shape (rule 2b); null: rule 2c")
    source_year: Optional[Int] = Field(default=None, ge=1900, le=2100,
                                       description="the year the record's source was published (rule 9c: the attention "
                                                   "of a record that leaves it out); null: undated")
    model_name: Optional[str] = None
    moe: Bool = False
    model: Optional[str] = Field(
        default=None, description="catalog model (model_zoo name) whose shape the record uses: mixture-of-experts and MLA "
                                  "models, whose experts the shape fields cannot carry (rule 12)")
    hf_model_type: Optional[str] = Field(
        default=None, pattern=r"^[a-z0-9_]+$",
        description="the inline shape's implementation family, its Hugging Face config.json `model_type` (ModelSpec."
                    "hf_model_type: which trainer model code ran it, stack_db runs.model_codes); only without `model:` "
                    "(a catalog entry carries its own); cite it in provenance; null: none (listed as assumed on a "
                    "stack with model codes)")
    # model shape
    num_layers: Count = Field(gt=0)
    hidden_size: Count = Field(gt=0)
    ffn_hidden_size: Count = Field(gt=0)
    num_attention_heads: Count = Field(gt=0)
    num_kv_heads: Optional[Count] = Field(default=None, gt=0, description="null: multi-head attention")
    vocab_size: Count = Field(gt=0)
    seq_length: Count = Field(gt=0, description="tokens per sequence")
    # batch and parallel config
    global_batch_size: Count = Field(gt=0, description="sequences per step")
    micro_batch_size: Optional[Count] = Field(default=None, gt=0)
    grad_accum_steps: Optional[Count] = Field(default=None, gt=0)
    gpu_type: str
    num_gpus: Optional[Count] = Field(default=None, gt=0)
    tp: Optional[Count] = Field(default=None, gt=0)
    pp: Optional[Count] = Field(default=None, gt=0)
    vpp: Optional[Count] = Field(default=None, gt=0)
    cp: Optional[Count] = Field(default=None, gt=0)
    dp: Optional[Count] = Field(default=None, gt=0)
    ep: Optional[Count] = Field(default=None, gt=0)
    etp: Optional[Count] = Field(default=None, gt=0, description="expert tensor parallelism; null: tp (Megatron's default)")
    # the run's settings in the Job's spelling (rules 4, 6, 7); the *_text fields keep the source's own words,
    # which the planner never reads (before the 2026-12-07 audit4 rules 4, 6, 7 read them by their leading term)
    sharding: Optional[Sharding] = Field(
        default=None, description="the run's data-parallel sharding level (the Job field: none, zero1, zero2, fsdp, hsdp; "
                                  "rule 6); null: none, listed as assumed")
    sharding_mode: Optional[str] = Field(
        default=None, description="the record's stack's sharding mode (the Job field, stack_db runs.sharding, e.g. "
                                  "llm-foundry shard_grad_op for FSDP SHARD_GRAD_OP); null: the stack's default for the level")
    zero_fsdp_mode_text: Optional[str] = Field(default=None, description="the source's words for the sharding (not read)")
    recompute: Optional[Recompute] = Field(
        default=None, description="the run's activation recompute (the Job field: none, selective, full; rule 4); null: "
                                  "none (Megatron-LM's default), listed as assumed")
    activation_recompute_text: Optional[str] = Field(default=None, description="the source's words for the recompute "
                                                                              "(not read)")
    sequence_parallel: Optional[Bool] = None
    precision: Optional[Precision] = Field(
        default=None, description="the run's training precision (the Job field: bf16, fp8, nvfp4; fp16 runs as bf16, "
                                  "precisions.SAME_PEAK; rule 7); null: bf16, listed as assumed")
    precision_assumed: Optional[str] = Field(
        default=None, description="with precision bf16: why it is an assumption about what the source states, in the "
                                  "record's own words (fp16, or a 16-bit type the source does not name, e.g. 'mixed "
                                  "16-bit (fp16/bf16 not stated)'); listed as assumed with this reason, followed by "
                                  "the planner's own why that prices as bf16 (precisions.SAME_PEAK, added once, rule "
                                  "7), which the record does not repeat")
    precision_text: Optional[str] = Field(default=None, description="the source's words for the precision (not read)")
    # what the source published
    tflops_per_gpu: Optional[Real] = None
    tflops_kind: Optional[str] = None
    mfu: Optional[Real] = None
    hfu: Optional[Real] = None
    tokens_per_sec_per_gpu: Optional[Real] = Field(default=None, gt=0)
    iteration_time_s: Optional[Real] = Field(default=None, gt=0)
    memory_per_gpu_gib: Optional[Real] = Field(default=None, gt=0)
    peak_tflops_used_by_source: Optional[Real] = None
    implied_flops_per_token: Optional[Real] = None
    flops_counting: Optional[str] = None
    provenance: dict[str, str] = Field(default_factory=dict)
    notes: Optional[str] = None
    # overrides a user may give (otherwise inferred; see the module docstring)
    hardware: Optional[str] = Field(default=None, description="catalog name or hardware YAML path (rule 1); null: "
                                                           "skipped (no hardware entry)")
    hardware_assumed: Optional[str] = Field(
        default=None, description="why `hardware` is an assumption about the part the source names (listed as assumed "
                                  "with this reason: rule 1)")
    gated_mlp: Optional[Bool] = None
    norm: Optional[Literal["rmsnorm", "layernorm"]] = None
    tied_embeddings: Optional[Bool] = None
    position_embedding: Optional[Literal["rope", "learned", "alibi", "none"]] = None
    linear_bias: Optional[Bool] = None
    dropout: Optional[Bool] = None
    bytes_per_param: Optional[Union[BppPreset, BytesPerParam]] = None
    attention: Optional[Literal["flash", "eager"]] = None
    attention_kernel: Optional[Literal["flash2", "cudnn"]] = Field(
        default=None, description="the fused attention kernel the run used (e.g. Megatron --attention-backend flash | "
                                  "fused); null: the stack's for the GPU (compute.attention_kernel)")
    shard_group: Optional[Count] = Field(default=None, gt=0, description="hsdp: DP ranks per shard group")
    schedule: Optional[Schedule] = None
    rank_order: Optional[str] = Field(default=None, description="mesh axes innermost first (the Job field); null: the planner's default")
    nccl_nvls_enable: Optional[Literal[0, 1, 2]] = Field(
        default=None, description="the run's NCCL_NVLS_ENABLE (the Job field: 0 no NVLink SHARP collectives and no NVLS "
                                  "buffers, comm.py [22], memory.py [nv]), cited in provenance (e.g. Megatron-Bridge's "
                                  "performance executor PERF_ENV_VARS, rule 13d); null: unset, NCCL's default 2")
    # the software stack and its options (the Job fields of the same names); null: the stack's default
    stack: Optional[str] = Field(default=None, description="stack_db name or a stack YAML (megatron, torchtitan, llm-foundry, ...)")
    torch_compile: Optional[Bool] = None
    tp_comm_overlap: Optional[Bool] = None
    dp_comm_overlap: Optional[Bool] = None
    dp_param_gather_overlap: Optional[Bool] = Field(
        default=None, description="the run's distributed-optimizer parameter all-gather overlapped with the forward "
                                  "(Megatron --overlap-param-gather, ddp.overlap_param_gather; the Job field, "
                                  "step.py [40]), set where the record's script or preset states it apart from the "
                                  "gradient reduction's; null: tied to dp_comm_overlap")
    ep_comm_overlap: Optional[Bool] = Field(
        default=None, description="MoE: the run hid the EP all-to-alls (Megatron-Core --overlap-moe-expert-parallel-comm); "
                                  "null: off (Megatron-Core's default), never inferred from names or notes")
    moe_dispatcher: Optional[Literal["alltoall", "allgather", "deepep", "deepep_ll", "hybridep"]] = Field(
        default=None, description="MoE: the run's token dispatcher (the Job field; planner/dispatch.py); null: the stack's "
                                  "default, listed as assumed")
    moe_fp8_dispatch: Optional[Bool] = Field(default=None, description="MoE: the run dispatched fp8 tokens (the Job field; "
                                                                        "default: the stack's fp8 recipe's)")
    moe_permute_fusion: Optional[Bool] = Field(
        default=None, description="MoE: the run's Megatron-Core moe_permute_fusion (TE's fused permutation; the Job field); "
                                  "null: the stack's default (Megatron-LM's off), listed as assumed")
    moe_grouped_gemm: Optional[Bool] = Field(
        default=None, description="MoE: the run's experts as one grouped GEMM (Megatron-Core moe_grouped_gemm; the Job "
                                  "field); null: the stack's default (Megatron-LM's off), listed as assumed, never inferred")
    moe_router_fusion: Optional[Bool] = Field(
        default=None, description="MoE: the run's Megatron-Core moe_router_fusion (TE's fused router top-k; the Job "
                                  "field); null: the stack's default (Megatron-LM's off), listed as assumed")
    bias_activation_fusion: Optional[Bool] = Field(
        default=None, description="the run's Megatron-Core bias_activation_fusion (the fused bias + activation kernel; "
                                  "the Job field); null: the stack's default, listed as assumed")
    fp8_precompute_scale: Optional[Bool] = Field(
        default=None, description="with FSDP's fp8 all-gather: the run's torchtitan [float8] "
                                  "precompute_float8_dynamic_scale_for_fsdp (the Job field, step.py [39]); null: "
                                  "false, torchtitan's default, listed as assumed where the run gathers fp8")
    fp8_allgather: Optional[Bool] = Field(
        default=None, description="fp8 under FSDP: the run gathered the converted Linears' weights in fp8 (torchtitan "
                                  "[float8] enable_fsdp_float8_all_gather; the Job field); null: the stack's recipe "
                                  "rule (stack_db fp8_recipes allgather_fp8), listed as assumed where it applies")
    fp8_param_gather: Optional[Bool] = Field(
        default=None, description="the run kept fp8 weights (Megatron --fp8-param-gather, Megatron-Bridge "
                                  "MixedPrecisionConfig.fp8_param_gather; the Job field); null: off, never inferred")
    fsdp_root_unit: Optional[Bool] = Field(
        default=None, description="the run's torchtitan wrapped the embedding, final norm and output layer in FSDP2's "
                                  "root unit and kept the last block gathered after its forward (before torchtitan "
                                  "83e69410, #1094, with torch before pytorch #154704: memory.py [tt10]; the Job field); "
                                  "null: off (the stack entry's layout), never inferred")
    cross_entropy_fusion: Optional[Bool] = Field(
        default=None, description="the run fused its cross-entropy (Megatron --cross-entropy-loss-fusion, Megatron-Bridge "
                                  "cross_entropy_loss_fusion; the Job field); null: off, never inferred")
    cross_entropy_fusion_impl: Optional[Literal["native", "te"]] = Field(
        default=None, description="with cross_entropy_fusion, Megatron-Core's cross_entropy_fusion_impl (the Job field); "
                                  "null: native")
    dummy_wgrads: Optional[Literal["none", "per_call", "cached"]] = Field(
        default=None, description="with gradient-accumulation fusion, the dummy weight gradients of the run's code version "
                                  "(the Job field, memory.py [dw]); null: the stack's")
    te_version: Optional[str] = Field(
        default=None, pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$",
        description="the Transformer Engine release the run used (the Job field: TP overlap's userbuffers and their cuBLAS "
                    "workspaces by release, memory.py [ub]); null: the stack's")
    moe_route_nodes: Optional[Count] = Field(default=None, gt=0, description="MoE: node-limited routing, nodes per token at most")
    moe_rank_imbalance: Optional[Real] = Field(
        default=None, ge=1.0, description="MoE: the busiest EP rank's routed tokens / the mean the run had (1.0: forced "
                                          "balancing, Megatron --moe-router-force-load-balancing; the Job field); null: "
                                          "the rule of moe_load_balancing (planner/imbalance.py), listed as assumed")
    moe_load_balancing: Optional[Literal["force", "aux_loss", "aux_loss_free", "sinkhorn"]] = Field(
        default=None, description="MoE: the run's router balancing (the Job field); null: the model's default "
                                  "(imbalance.default_balancing), listed as assumed")
    moe_aux_loss_coeff: Optional[Real] = Field(
        default=None, ge=0.0, description="MoE: the run's auxiliary load-balancing loss coefficient, 0 where none was "
                                          "computed (the Job field; Megatron --moe-aux-loss-coeff of an aux_loss / "
                                          "seq_aux_loss / global_aux_loss type); null: Megatron's default 0.0, listed as "
                                          "assumed (a record never takes a model's training recipe)")
    moe_z_loss_coeff: Optional[Real] = Field(
        default=None, ge=0.0, description="MoE: the run's router z-loss coefficient (the Job field; Megatron "
                                          "--moe-z-loss-coeff); null: none")
    moe_router_pre_softmax: Optional[Bool] = Field(
        default=None, description="MoE: the run's softmax before the top-k (the Job field; Megatron "
                                  "--moe-router-pre-softmax); null: false")
    mtp_layers: Optional[Count] = Field(
        default=None, ge=0, description="multi-token prediction modules the run trained (Megatron --mtp-num-layers, the "
                                        "Job field); null: the model's mtp_layers")
    fp8_recipe: Optional[str] = Field(
        default=None, description="with precision fp8 or nvfp4, the run's scaling recipe, a name of "
                                  "precisions.FP8_RECIPES (the Job field); null: the stack's default")
    power_limit_w: Optional[Real] = Field(default=None, gt=0)
    selective_ac_option: Optional[str] = Field(
        default=None, description="torchtitan activation_checkpoint.selective_ac_option: 'op' (per-op policy) or an integer N "
                                  "(full recompute of every N-th layer)")
    # Megatron settings a published run states (the Job fields of the same names, passed on)
    account_for_embedding_in_pipeline_split: Optional[Bool] = Field(
        default=None, description="Megatron --account-for-embedding-in-pipeline-split; null: off (Megatron's default)")
    account_for_loss_in_pipeline_split: Optional[Bool] = Field(
        default=None, description="Megatron --account-for-loss-in-pipeline-split; null: off (Megatron's default)")
    pipeline_layout: Optional[str] = Field(
        default=None, description="Megatron --pipeline-model-parallel-layout the run used (E embedding, t transformer "
                                  "layer, m MTP layer, L loss, '|' between model chunks, '(..)*n' repeats; e.g. "
                                  "Megatron-Bridge's DeepSeek-V3 'Et*4|(t*4|)*14tmL'): the split it places (rule 7b); "
                                  "null: Megatron's even split")
    # Megatron settings a published run states in Megatron's words (rule 13): the dispatcher's two
    # set the job's moe_dispatcher as the Megatron reader does (_record_dispatcher), the rest go to
    # the Job fields of those names
    moe_token_dispatcher_type: Optional[str] = Field(
        default=None, description="Megatron --moe-token-dispatcher-type (alltoall, allgather, flex): with "
                                  "moe_flex_dispatcher_backend, the job's moe_dispatcher unless the record gives it "
                                  "(rule 13; planner/dispatch.py)")
    moe_flex_dispatcher_backend: Optional[str] = Field(
        default=None, description="Megatron-Core moe_flex_dispatcher_backend (deepep, hybridep): the flex dispatcher's "
                                  "backend, the job's moe_dispatcher deepep or hybridep (rule 13)")
    cuda_graph_impl: Optional[str] = Field(
        default=None, description="Megatron --cuda-graph-impl (local, transformer_engine, full_iteration): the Job field "
                                  "(planner/cuda_graphs.py; rule 13); null: none")
    cuda_graph_scope: Optional[list[str]] = Field(
        default=None, description="Megatron --cuda-graph-scope / --cuda-graph-modules (attn, moe_router, moe_preprocess, "
                                  "...): the Job field; null: none (with an impl: the whole layer)")
    recompute_modules: Optional[list[str]] = Field(
        default=None, description="Megatron --recompute-modules with recompute selective (the Job field, "
                                  "planner/recompute_modules.py: core_attn, layernorm, moe_act, mla_up_proj, mlp, moe, "
                                  "shared_experts; rule 13b)")

    @field_validator("fp8_recipe")
    @classmethod
    def _known_recipe(cls, v: Optional[str]) -> Optional[str]:
        """A recipe the planner does not know is an error naming the ones it does (issue 23: never a
        fall-back; a known recipe the record's stack does not run is a skipped row, plan.resolve)."""
        if v is not None and v not in FP8_RECIPES:
            raise ValueError(f"{v!r} is not a recipe the planner knows; valid: {', '.join(FP8_RECIPES)}")
        return v

    @model_validator(mode="after")
    def _recipe_of_precision(self) -> "RunRecord":
        """An fp8_recipe belongs to precision fp8 (or nvfp4, its own recipe): a recipe beside another
        precision, or beside none, contradicts it (rule 7); so does a precision_assumed beside any precision
        but bf16, or one that repeats precisions.SAME_PEAK (the planner adds it); a sharding_mode is a mode of
        a level the record gives (rule 6)."""
        if self.sharding_mode is not None and self.sharding is None:
            raise ValueError(f"sharding_mode {self.sharding_mode!r} without sharding: give its level (none, zero1, "
                             "zero2, fsdp, hsdp)")
        if self.precision_assumed is not None and self.precision != "bf16":
            # rule 7: the reason says why a 16-bit run is priced as bf16 (SAME_PEAK follows it); beside another
            # precision, or none (bf16 by default, listed with its own line), nothing would read it
            raise ValueError(f"precision_assumed beside precision {self.precision or 'null'}: it says why a 16-bit "
                             "run is priced as bf16; give precision: bf16, or leave precision_assumed out")
        if self.precision_assumed is not None and SAME_PEAK in self.precision_assumed:
            # the planner adds it (validate._precision): a record written before the 2026-12-07 data hygiene pass
            raise ValueError(f"precision_assumed repeats the planner's own reason ({SAME_PEAK!r}), which it adds "
                             "after the record's: give only what the source says, e.g. 'mixed 16-bit (fp16/bf16 not "
                             "stated)'")
        r = self.fp8_recipe
        if r is not None and r in FP8_RECIPES and recipe_precision(r) != self.precision:
            raise ValueError(f"fp8_recipe {r} is a recipe of precision {recipe_precision(r)}, the record's precision is "
                             f"{self.precision or 'null (bf16)'}: give precision {recipe_precision(r)} or leave fp8_recipe out")
        return self

    @property
    def published_tokens(self) -> tuple[Optional[float], Optional[str]]:
        """(published tokens/s per GPU, the key it came from)."""
        if self.tokens_per_sec_per_gpu is not None:
            return float(self.tokens_per_sec_per_gpu), "tokens_per_sec_per_gpu"
        if self.iteration_time_s is not None and self.num_gpus:
            tok = self.global_batch_size * self.seq_length / (self.iteration_time_s * self.num_gpus)
            return tok, "iteration_time_s"
        return None, None


def _only_missing(e: ValidationError) -> bool:
    return all(err.get("type") == "missing" for err in e.errors())


# the free-text keys rules 4, 6 and 7 read by their leading term until the 2026-12-07 audit4: the setting now
# has its own field in the Job's spelling, the source's words the *_text field
RETIRED_KEYS = {"activation_recompute": ("recompute", "none, selective, full", "activation_recompute_text"),
                "zero_fsdp_mode": ("sharding", "none, zero1, zero2, fsdp, hsdp (and sharding_mode: a stack's mode)",
                                   "zero_fsdp_mode_text")}


def _retired_key_hint(err: PlannerError, raw: dict) -> PlannerError:
    """A record still giving a retired free-text key: the hint names the explicit field and its values."""
    old = [k for k in RETIRED_KEYS if k in raw]
    if not old and "field `precision`:" in err.message:
        return PlannerError(err.message, f"precision is one of {', '.join(PRECISIONS)} (the Job's spelling; fp8's recipe "
                                         f"in fp8_recipe: {', '.join(FP8_RECIPES)}); keep the source's words in "
                                         "`precision_text:`")
    if not old:
        return err
    k = old[0]
    new, values, text = RETIRED_KEYS[k]
    return PlannerError(err.message, f"`{k}` is no longer read: give `{new}:` ({values}) and keep the source's words "
                                     f"in `{text}:`")


def load_runs(path: Path, incomplete: Optional[list] = None, lenient: bool = False,
              parsed: Optional[list] = None) -> list[RunRecord]:
    """Read and validate a runs file; any problem is a PlannerError naming the file, the
    record (index and id) and the field. With `incomplete` (a list): a record that only lacks
    required fields (`lenient`: that the schema refuses for any reason) is appended there as
    {where, id, group, reason} and left out, so the rest of the file is still read. parsed:
    [the file's YAML data], already parsed by the caller (report's), else the file is read here."""
    data = read_yaml(path) if parsed is None else parsed[0]
    if not isinstance(data, list):
        raise PlannerError(
            f"{path}: expected a YAML list of run records, got {type(data).__name__}",
            "write one `- id: ...` mapping per run, in the schema of tests/data/published_runs.yaml",
        )
    if not data:
        raise PlannerError(f"{path}: no run records", "add at least one `- id: ...` record")
    records: list[RunRecord] = []
    seen: dict[str, Int] = {}
    for i, raw in enumerate(data):
        rid = raw.get("id") if isinstance(raw, dict) else None
        where = f"{path}: record {i}" + (f" (id {rid!r})" if rid is not None else "")
        if not isinstance(raw, dict):
            raise PlannerError(f"{where}: expected a mapping of fields, got {type(raw).__name__}", "each list item is `- id: ...` with the record's fields")
        try:
            rec = RunRecord.model_validate(raw)
        except ValidationError as e:
            err = _retired_key_hint(format_validation_error(e, where, RunRecord), raw)
            if incomplete is None or not (lenient or _only_missing(e)):
                raise err from None
            incomplete.append({"where": where, "id": rid if rid is not None else f"record {i}",
                               "group": raw.get("source_group"),
                               "reason": ("incomplete record: " if _only_missing(e) else "") + err.message.removeprefix(f"{where}: ")})
            continue
        if rec.id in seen:
            raise PlannerError(f"{where}: duplicate id {rec.id!r} (also record {seen[rec.id]})", "give every record a unique id")
        seen[rec.id] = i
        records.append(rec)
    return records


def is_complete(rec: RunRecord) -> bool:
    """In the documented accuracy subset: a COMPLETE_GROUPS record with a published tokens/s
    (or iteration time) and non-null tp, pp and num_gpus."""
    return (
        rec.source_group in COMPLETE_GROUPS
        and rec.published_tokens[0] is not None
        and None not in (rec.tp, rec.pp, rec.num_gpus)
    )


def select(records: list[RunRecord], groups=None, ids=None, complete: bool = False) -> list[RunRecord]:
    """Filter by source group(s), id(s) and/or the complete subset; unknown names are errors."""
    if groups:
        known = sorted({r.source_group for r in records if r.source_group})
        bad = [g for g in groups if g not in known]
        if bad:
            raise PlannerError(f"unknown source group(s) {', '.join(bad)}", f"groups in this file: {', '.join(known)}")
        records = [r for r in records if r.source_group in groups]
    if ids:
        by_id = {r.id for r in records}
        bad = [i for i in ids if i not in by_id]
        if bad:
            raise PlannerError(f"unknown record id(s) {', '.join(bad)}", "ids are the `id:` fields of the runs file (after any --group filter)")
        records = [r for r in records if r.id in set(ids)]
    if complete:
        records = [r for r in records if is_complete(r)]
    if not records:
        raise PlannerError("no records selected", "loosen --group / --ids / --complete")
    return records


# ----------------------------------------------------------------------- inference
class Skip(Exception):
    """A record that cannot be evaluated; the message is the reason."""


@dataclass
class _Assumed:
    items: list[str] = field(default_factory=list)

    def add(self, name: str, value: Any, reason: str) -> None:
        v = str(value).lower() if isinstance(value, bool) else value
        self.items.append(f"{name}={v} ({reason})")


# Family rules (rule 2b): a record's `family` field names one.
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("Llama-style (Touvron et al. 2023 sec. 2.2)",
              dict(gated_mlp=True, norm="rmsnorm", tied_embeddings=False, position_embedding="rope", linear_bias=False,
                   dropout=False)),
    "palm": ("PaLM (Chowdhery et al. 2022 sec. 2)",
             dict(gated_mlp=True, norm="layernorm", tied_embeddings=True, position_embedding="rope", linear_bias=False,
                  dropout=False)),
    "nemotron": ("Nemotron-4 (Parmar et al. 2024 sec. 2: squared ReLU, not gated)",
                 dict(gated_mlp=False, norm="layernorm", tied_embeddings=False, position_embedding="rope",
                      linear_bias=False, dropout=False)),
    "mpt": ("MPT llm-foundry benchmark config (model_zoo/mpt-7b.yaml)",
            dict(gated_mlp=False, norm="layernorm", tied_embeddings=True, position_embedding="learned", linear_bias=True,
                 dropout=False)),
    "neox": ("GPT-NeoX (Black et al. 2022 sec. 2.1)",
             dict(gated_mlp=False, norm="layernorm", tied_embeddings=False, position_embedding="rope", linear_bias=True,
                  dropout=False)),
    "gpt": ("GPT-3 / Megatron-LM GPT defaults (Brown et al. 2020; Megatron-LM arguments.py)",
            dict(gated_mlp=False, norm="layernorm", tied_embeddings=True, position_embedding="learned", linear_bias=True,
                 dropout=True)),
}


def _shape(num_layers, hidden, ffn, heads, kv, vocab) -> tuple:
    return (num_layers, hidden, ffn, heads, kv or heads, vocab)


_ZOO_SHAPES: dict[tuple, dict[tuple, ModelSpec]] = {}  # per catalog folder and listing: read once a process


def _zoo_by_shape() -> dict[tuple, ModelSpec]:
    """The first catalog model (alphabetical) of each shape (read once per catalog listing:
    per record it cost 2,000 records a minute of path look-ups, issue 24)."""
    names = tuple(list_models())
    memo = (str(model_dir()), names)
    if memo not in _ZOO_SHAPES:
        out: dict[tuple, ModelSpec] = {}
        for name in names:
            m = load_model(name)
            key = _shape(m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.kv_heads, m.vocab_size)
            out.setdefault(key, m)
        _ZOO_SHAPES[memo] = out
    return _ZOO_SHAPES[memo]


def infer_architecture(rec: RunRecord, assumed: _Assumed) -> dict:
    """The six architecture fields (rule 2); record overrides win. A record naming a catalog
    `model:` takes them from it (rule 12)."""
    if rec.model is not None:
        return {k: getattr(_record_model(rec), k) for k in ARCH_FIELDS}
    given = {k: getattr(rec, k) for k in ARCH_FIELDS if getattr(rec, k) is not None}
    if len(given) == len(ARCH_FIELDS):
        return given
    key = _shape(rec.num_layers, rec.hidden_size, rec.ffn_hidden_size, rec.num_attention_heads, rec.num_kv_heads, rec.vocab_size)
    zoo = _zoo_by_shape().get(key)
    if zoo is not None:
        arch = {k: getattr(zoo, k) for k in ARCH_FIELDS}
        reason = f"catalog model {zoo.name} has this shape"
    else:
        fam = FAMILIES.get(rec.family) if rec.family is not None else None
        if fam is not None:
            reason, arch = f"family {rec.family}: {fam[0]}", dict(fam[1])
        else:
            ratio = rec.ffn_hidden_size / rec.hidden_size
            gated = rec.ffn_hidden_size != 4 * rec.hidden_size
            reason = f"unknown family; ffn/hidden = {ratio:.3g} -> {'gated' if gated else 'plain 4h'} MLP"
            arch = dict(gated_mlp=gated, norm="rmsnorm" if gated else "layernorm", tied_embeddings=False,
                        position_embedding="rope", linear_bias=False, dropout=False)
    for k in ARCH_FIELDS:
        if k in given:
            arch[k] = given[k]
        else:
            assumed.add(k, arch[k], reason)
    return arch


class Impossible(Skip):
    """A published figure the hardware cannot produce (an error unless --lenient)."""


def _check_possible(rec: RunRecord, settings, pred: dict, pub_tok: Optional[float]) -> None:
    """The published tokens/s at most the GPUs' peak FLOP rate (HFU, which scales with
    tokens/s, at most 1: step.throughput's hfu, the FLOPs the kernels run over the datasheet
    peak of the plan's precision), the published memory at most the GPU's HBM."""
    hfu, tok = pred.get("hfu"), pred.get("tokens_per_s_per_gpu")
    if pub_tok is not None and hfu is not None and tok and math.isfinite(hfu) and hfu * pub_tok / tok > 1.0:
        field_ = "tokens_per_sec_per_gpu" if rec.tokens_per_sec_per_gpu is not None else "iteration_time_s"
        raise Impossible(f"field `{field_}`: {pub_tok:.6g} tokens/s per GPU would run the GPUs at "
                         f"{hfu * pub_tok / tok:.3g}x {settings.hardware.name}'s peak FLOP rate (HFU above 1)")
    hbm = settings.hardware.hbm_bytes / GiB
    if rec.memory_per_gpu_gib is not None and rec.memory_per_gpu_gib > hbm:
        raise Impossible(f"field `memory_per_gpu_gib`: {rec.memory_per_gpu_gib:g} GiB is more than the "
                         f"{hbm:.4g} GiB of HBM of {settings.hardware.name}")


def _not_published(rec: RunRecord, text_field: str) -> str:
    """Why a setting is assumed: the source's words where the record keeps them, else "not published"."""
    text = getattr(rec, text_field)
    return "not published" if text is None else repr(text)


def _recompute(rec: RunRecord, assumed: _Assumed) -> str:
    """Rule 4: the record's recompute (never read from activation_recompute_text); null -> none, assumed."""
    if rec.recompute is None:
        assumed.add("recompute", "none", f"{_not_published(rec, 'activation_recompute_text')}; "
                    "Megatron-LM default without --recompute-granularity")
        return "none"
    return rec.recompute


def _fp8_allgather(rec: RunRecord, stack, stack_name: str, precision: str, recipe, assumed: _Assumed) -> dict:
    """The record's fp8_allgather (step.py [15]); null where the stack's recipe gathers fp8 (torchtitan
    tensorwise): the recipe's rule, listed as assumed."""
    spec = stack.fp8_recipes.get(recipe or stack.defaults.fp8_recipe) if precision == "fp8" else None
    gathers = spec is not None and spec.allgather_fp8 and rec.fp8_allgather is not False
    pre = {}
    if rec.fp8_precompute_scale is not None:
        pre = {"fp8_precompute_scale": rec.fp8_precompute_scale}
    elif gathers and spec.fsdp_amax_bytes > 0:
        assumed.add("fp8_precompute_scale", False, "not published; torchtitan's default (precompute_float8_dynamic_"
                    "scale_for_fsdp false, job_config.py @e347b1e5e l. 735): one amax all-reduce a weight a gather")
    if rec.fp8_allgather is not None:
        return {"fp8_allgather": rec.fp8_allgather, **pre}
    if gathers:
        assumed.add("fp8_allgather", True, f"not published; the {stack_name} stack's {recipe} recipe rule "
                    "(stack_db fp8_recipes allgather_fp8: the converted Linears' weights gathered in fp8)")
    return pre


def _sharding(rec: RunRecord, assumed: _Assumed) -> dict:
    """Rule 6: the Job's sharding (a level) and sharding_mode, the record's fields (never read from
    zero_fsdp_mode_text); null -> none, assumed."""
    if rec.sharding is None:
        assumed.add("sharding", "none", f"{_not_published(rec, 'zero_fsdp_mode_text')}; plain data parallel assumed")
        return {"sharding": "none"}
    if rec.sharding == "hsdp" and rec.shard_group is None:
        raise Skip("sharding hsdp (hybrid sharding): give shard_group (DP ranks per shard group)")
    out = {"sharding": rec.sharding}
    if rec.sharding_mode is not None:
        out["sharding_mode"] = rec.sharding_mode
    return out


def _precision(rec: RunRecord, assumed: _Assumed) -> tuple[str, Optional[str]]:
    """Rule 7: (precision, recipe), the record's precision and fp8_recipe (never read from
    precision_text); null -> bf16, assumed; precision_assumed lists it as assumed with that reason, then
    precisions.SAME_PEAK (the record holds only its own reason: RunRecord._recipe_of_precision)."""
    if rec.precision is None:
        assumed.add("precision", "bf16", f"{_not_published(rec, 'precision_text')}: {SAME_PEAK}")
        return "bf16", rec.fp8_recipe
    if rec.precision_assumed is not None:  # the record's reason, then the planner's (added here, once)
        assumed.add("precision", rec.precision, f"{rec.precision_assumed}: {SAME_PEAK}")
    return rec.precision, rec.fp8_recipe


def _source_year(rec: RunRecord) -> Optional[int]:
    """The record's explicit source_year (rule 9c); never a year read out of the source's text."""
    return rec.source_year


def _moe_assumptions(rec: RunRecord, assumed: _Assumed) -> None:
    """The MoE settings a record leaves to the planner (rule 12) or states without a cost model
    that reads them (rule 13), listed as assumed."""
    if rec.moe:
        if rec.moe_rank_imbalance is None:
            assumed.add("moe_rank_imbalance", rec.moe_load_balancing or "default rule",
                        "not published; the busiest EP rank's load from the routing-imbalance rule of "
                        + (f"{rec.moe_load_balancing} balancing" if rec.moe_load_balancing else
                           "the model's default balancing") + " (planner/imbalance.py)")
        if rec.etp is None and rec.tp is not None:
            assumed.add("etp", rec.tp, "not published; Megatron's default expert_tensor_parallel_size = "
                        "tensor_model_parallel_size (Megatron-LM @d98e8a64 megatron/training/arguments.py)")


def _record_dispatcher(rec: RunRecord, assumed: _Assumed):
    """The record's moe_dispatcher, else the one its Megatron dispatcher fields name (rule 13,
    trainers/megatron.py _dispatcher's mapping); None: the stack's default."""
    if rec.moe_dispatcher is not None or rec.moe_token_dispatcher_type is None:
        return rec.moe_dispatcher
    from .trainers.megatron import _dispatcher

    flags = {"--moe-token-dispatcher-type": rec.moe_token_dispatcher_type}
    if rec.moe_flex_dispatcher_backend is not None:
        flags["--moe-flex-dispatcher-backend"] = rec.moe_flex_dispatcher_backend
    job: dict = {}
    try:
        _dispatcher(f"record {rec.id}: ", flags, job, [])
    except PlannerError as e:
        raise Skip(e.message) from None
    assumed.add("moe_dispatcher", job["moe_dispatcher"], "from the record's moe_token_dispatcher_type"
                + (" and moe_flex_dispatcher_backend" if rec.moe_flex_dispatcher_backend else "") + " (Megatron's names)")
    return job["moe_dispatcher"]


def build_job(rec: RunRecord, model_path: str, hardware: str, assumed: _Assumed) -> dict:
    """Job fields for a record (rules 3-9); raises Skip."""
    if rec.moe and rec.model is None:
        raise Skip("mixture-of-experts record without `model:` (a catalog entry with the experts' shape): "
                   "the record's shape fields describe dense models only")
    if (rec.ep or 1) > 1 and not rec.moe:
        raise Skip(f"ep {rec.ep} on a record without moe: true")
    _moe_assumptions(rec, assumed)
    missing = [k for k in ("tp", "pp", "num_gpus") if getattr(rec, k) is None]
    if missing:
        raise Skip(f"{', '.join(missing)} not published (null): the plan cannot be built")
    cp = rec.cp
    if cp is None:
        cp = 1
        assumed.add("cp", 1, "not published; no context parallelism")
    stack_name, stack = _stack(rec, assumed)
    if rec.moe and rec.moe_aux_loss_coeff is None and stack.memory.moe_routing_saved:  # where the router's saves are priced
        assumed.add("moe_aux_loss_coeff", 0.0, "not published; Megatron-LM's default --moe-aux-loss-coeff 0.0 "
                    "(@d98e8a64 arguments.py: no auxiliary loss computed, none of its scores kept: "
                    "planner/layers/moe.py router_saved_terms)")
    mbs = _micro_batch(rec, cp, stack_name, stack, assumed)
    vpp = rec.vpp
    if vpp is None:
        vpp = 1
        assumed.add("vpp", 1, "not published; plain 1F1B")
    split = _layout_split(rec, vpp, model_path) if rec.pipeline_layout is not None else \
        _megatron_split(rec, vpp, stack_name, assumed)
    sp = rec.sequence_parallel
    if sp is None:
        sp = rec.tp > 1
        assumed.add("sequence_parallel", sp, "not published; on iff tp > 1 (Korthikanti et al. 2022)")
    bpp = rec.bytes_per_param  # null: the stack's default (resolve lists it as inherited)
    attention = _attention(rec, stack_name, stack, assumed)
    recompute, recompute_layers, mods = _recompute_policy(rec, stack_name, stack, assumed)
    precision, recipe = _precision(rec, assumed)
    return dict(
        model=model_path,
        hardware=hardware,
        gpus=rec.num_gpus,
        tp=rec.tp,
        cp=cp,
        pp=rec.pp,
        vpp=vpp,
        dp=rec.dp,
        micro_batch=mbs,
        global_batch=rec.global_batch_size,
        seq_len=rec.seq_length,
        **_sharding(rec, assumed),
        shard_group=rec.shard_group,
        recompute=recompute,
        recompute_layers=recompute_layers,
        sequence_parallel=sp,
        precision=precision,
        schedule=rec.schedule,
        bytes_per_param=bpp,
        attention=attention,
        attention_kernel=rec.attention_kernel,
        stack=stack_name,
        tp_comm_overlap=rec.tp_comm_overlap,
        dp_comm_overlap=rec.dp_comm_overlap,
        dp_param_gather_overlap=rec.dp_param_gather_overlap,
        torch_compile=rec.torch_compile,
        fp8_recipe=recipe,
        power_limit_w=rec.power_limit_w,
        ep=rec.ep or 1,
        etp=rec.etp,
        ep_comm_overlap=rec.ep_comm_overlap,
        moe_dispatcher=_record_dispatcher(rec, assumed),
        moe_fp8_dispatch=rec.moe_fp8_dispatch,
        fp8_param_gather=bool(rec.fp8_param_gather),
        fsdp_root_unit=bool(rec.fsdp_root_unit),
        **_fp8_allgather(rec, stack, stack_name, precision, recipe, assumed),
        cross_entropy_fusion=bool(rec.cross_entropy_fusion),
        cross_entropy_fusion_impl=rec.cross_entropy_fusion_impl or "native",
        cuda_graph_impl=rec.cuda_graph_impl or "none",
        cuda_graph_scope=list(rec.cuda_graph_scope or []),
        moe_route_nodes=rec.moe_route_nodes,
        moe_rank_imbalance=rec.moe_rank_imbalance,
        moe_load_balancing=rec.moe_load_balancing,
        moe_aux_loss_coeff=rec.moe_aux_loss_coeff,
        moe_z_loss_coeff=rec.moe_z_loss_coeff,
        moe_router_pre_softmax=rec.moe_router_pre_softmax,
        mtp_layers=rec.mtp_layers,
        **_stated_fields(rec, mods, split),
    )


def _micro_batch(rec: RunRecord, cp: int, stack_name: str, stack, assumed: _Assumed) -> int:
    """The record's micro-batch, else global batch / (dp x grad_accum_steps) where that divides,
    else the stack's default (rule 5); raises Skip where no default applies."""
    if rec.micro_batch_size is not None:
        return rec.micro_batch_size
    dp = rec.dp or rec.num_gpus // (rec.tp * cp * rec.pp)
    if rec.grad_accum_steps and dp and rec.global_batch_size % (dp * rec.grad_accum_steps) == 0:
        mbs = rec.global_batch_size // (dp * rec.grad_accum_steps)
        assumed.add("micro_batch_size", mbs, "derived: global batch / (dp x grad_accum_steps)")
        return mbs
    try:
        mbs = default_micro_batch(stack, rec.global_batch_size, dp, rec.pp)
    except PlannerError as e:
        raise Skip(e.message) from None
    assumed.add("micro_batch_size", mbs, f"not published; the {stack_name} stack's default "
                f"({stack.defaults.microbatches_per_step})")
    return mbs


def _attention(rec: RunRecord, stack_name: str, stack, assumed: _Assumed) -> str:
    """Rule 9: the record's attention (a), else the stack's defaults.attention where its file sets
    it (b), else eager for a source dated 2021 or before (before FlashAttention, 2022), flash
    otherwise (c)."""
    if rec.attention is not None:
        return rec.attention
    if "attention" in stack.defaults.model_fields_set:  # an explicit key of the stack file, not the schema's default
        attention = stack.defaults.attention
        assumed.add("attention", attention, f"not published; rule 9b: the {stack_name} stack's defaults.attention, "
                    "what its code runs without an attention option")
        return attention
    year = _source_year(rec)
    attention = "eager" if (year is not None and year <= 2021) else "flash"
    assumed.add("attention", attention, "not published; rule 9c: " + (
        f"source dated {year}, before FlashAttention (2022)" if attention == "eager" else
        (f"source dated {year}: FlashAttention" if year is not None else "source undated: FlashAttention")))
    return attention


def _recompute_policy(rec: RunRecord, stack_name: str, stack, assumed: _Assumed):
    """(recompute, recompute_layers, recompute_modules) of a record (rules 4, 4b, 13b): its
    recompute, Megatron's --recompute-modules (selective granularity only, the priced
    modules only), torchtitan's selective_ac_option ('op', or N: every N-th block fully); raises Skip."""
    recompute, recompute_layers = _recompute(rec, assumed), None
    opt = rec.selective_ac_option
    mods = rec.recompute_modules
    if mods is not None:  # rule 13b: Megatron reads them under selective granularity only
        if recompute != "selective":
            raise Skip(f"recompute_modules {mods} need recompute selective (Megatron-Core reads them under "
                       f"--recompute-granularity selective only; got {recompute})")
        unknown = [m for m in mods if m not in typing.get_args(RecomputeModule)]
        if unknown:
            raise Skip(f"recompute_modules {unknown}: not priced (the planner prices "
                       + ", ".join(typing.get_args(RecomputeModule)) + ")")
    if opt is None and mods is None and recompute == "selective":
        assumed.add("selective_policy", stack.selective.description.split(":")[0].strip(),
                    f"not published; the {stack_name} stack's selective recompute")
    if opt is not None:
        if recompute != "selective":
            raise Skip(f"selective_ac_option {opt!r} needs recompute selective (got {recompute})")
        if opt.strip().isdigit() and int(opt) > 0:
            # rule 4b: torchtitan's layer policy checkpoints (fully) every N-th block
            recompute, recompute_layers = "full", max(1, math.ceil(rec.num_layers / rec.pp / int(opt)))
        elif opt.strip() != "op":
            raise Skip(f"selective_ac_option {opt!r} not recognised (expected 'op' or a positive integer)")
    return recompute, recompute_layers, mods


def _stated_fields(rec: RunRecord, mods, split: dict) -> dict:
    """Job fields a record passes only where it states them (else the job's defaults, which resolve
    lists as inherited), and the pipeline split: the record's stated one (its flags, or its layout's),
    else the one a legal Megatron layout needs (rule 7b)."""
    out = {f: getattr(rec, f) for f in ("moe_permute_fusion", "moe_router_fusion", "moe_grouped_gemm", "dummy_wgrads", "te_version",
                                   "rank_order", "bias_activation_fusion", "nccl_nvls_enable")
           if getattr(rec, f) is not None}
    if mods:
        out["recompute_modules"] = list(mods)
    stated = rec.pipeline_layout is None and (rec.account_for_embedding_in_pipeline_split is not None
                                              or rec.account_for_loss_in_pipeline_split is not None)
    out.update({"account_for_embedding_in_pipeline_split": bool(rec.account_for_embedding_in_pipeline_split),
                "account_for_loss_in_pipeline_split": bool(rec.account_for_loss_in_pipeline_split)} if stated else split)
    return out


def _layout_split(rec: RunRecord, vpp: int, model_path: str) -> dict:
    """The split a record's pipeline_layout places (rule 7b): its transformer layers per model
    chunk read by the Megatron reader's parser (trainers/megatron.py parse_layout, Megatron-Core
    pipeline_parallel_layer_layout.py) and matched to the planner's split (split_of: the
    embedding counted or not, the last chunk's 'm...L' end as the layers it lacks). Skipped: a
    layout Megatron refuses, one beside --account-for-* (Megatron refuses them together), one
    of another pp x vpp than the record's, or a placement the planner's split does not make."""
    from .plan import with_mtp
    from .trainers.megatron import parse_layout, split_of

    if rec.account_for_embedding_in_pipeline_split or rec.account_for_loss_in_pipeline_split:
        raise Skip("pipeline_layout with account_for_*_in_pipeline_split: Megatron refuses them together "
                   "(transformer_config.py __post_init__)")
    spec = with_mtp(load_model(model_path), rec.mtp_layers)
    notes: list[str] = []
    try:
        chunks = parse_layout(rec.pipeline_layout, rec.pp, spec, "", notes)
    except PlannerError as e:
        raise Skip(f"pipeline_layout: {e.message}") from None
    if notes:
        raise Skip(notes[0])
    if len(chunks) != rec.pp * vpp:
        raise Skip(f"pipeline_layout has {len(chunks)} model chunks; pp {rec.pp} x vpp {vpp} = {rec.pp * vpp}")
    e_l = split_of(spec.num_layers, rec.pp, vpp, chunks=chunks)
    if e_l is None:
        raise Skip(f"pipeline_layout {rec.pipeline_layout}: {chunks} layers on the model chunks, not a split the planner "
                   "models (pipeline.chunk_layers)")
    return split_fields(*e_l)


def _megatron_split(rec: RunRecord, vpp: int, stack_name: str, assumed: _Assumed) -> dict:
    """Megatron-Core refuses layers that do not divide into pp x vpp model chunks unless the
    embedding and/or the loss count as layers of the split (--account-for-embedding-in-
    pipeline-split / --account-for-loss-in-pipeline-split: (layers + counted ends) % (pp x vpp)
    == 0, transformer_config.py @d98e8a64 __post_init__; plan.SPLIT_UNITS). A megatron record
    whose layers need them for a legal layout gets the first of (both, embedding, loss) that
    makes one, listed as assumed; else none (the planner's uneven split, with its warning)."""
    chunks, L = (rec.pp or 1) * vpp, rec.num_layers
    if stack_name != "megatron" or (rec.pp or 1) < 2 or L % chunks == 0:
        return {}
    for e, l_ in ((1, 1), (1, 0), (0, 1)):
        if (L + e + l_) % chunks == 0:
            ends = " and ".join(n for n, on in (("embedding", e), ("loss", l_)) if on)
            assumed.add(" and ".join(f"account_for_{n}_in_pipeline_split" for n, on in (("embedding", e), ("loss", l_)) if on),
                        True, f"{L} layers do not divide into pp {rec.pp} x vpp {vpp} = {chunks} chunks; Megatron-Core needs "
                        f"the {ends} counted as layers of the split for a legal layout ({L + e + l_} = {(L + e + l_) // chunks} "
                        "x chunks)")
            return {"account_for_embedding_in_pipeline_split": bool(e), "account_for_loss_in_pipeline_split": bool(l_)}
    return {}


def _stack(rec: RunRecord, assumed: _Assumed):
    """(name, Stack) of a record: its `stack:` field, or the default stack (assumed)."""
    name = rec.stack
    if name is None:
        name = DEFAULT_STACK
        assumed.add("stack", name, "not given; the planner's default stack")
    try:
        return name, load_stack(name)
    except PlannerError as e:
        raise Skip(f"field `stack`: {e.message}") from None


def _record_model(rec: RunRecord) -> ModelSpec:
    """The catalog model a record names (rule 12); its shape must be the record's, and its hf_model_type the
    entry's own (a record's `hf_model_type` is for an inline shape)."""
    if rec.hf_model_type is not None:
        raise PlannerError(
            f"record {rec.id!r}: field `hf_model_type` with `model: {rec.model}`: the catalog entry carries its own "
            "hf_model_type", "leave hf_model_type out of a record that names a catalog model")
    try:
        m = load_model(rec.model)
    except PlannerError as e:
        raise PlannerError(f"record {rec.id!r}: field `model`: {e.message}", e.hint) from None
    got = (rec.num_layers, rec.hidden_size, rec.num_attention_heads, rec.vocab_size)
    want = (m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size)
    if got != want:
        raise PlannerError(
            f"record {rec.id!r}: field `model`: {rec.model} has layers/hidden/heads/vocab {want}, the record {got}",
            "name the catalog model of the record's shape, or correct the shape fields")
    return m


def model_spec(rec: RunRecord, arch: dict, where: str) -> dict:
    """ModelSpec fields for the record's shape (a record naming `model:`: that entry's)."""
    if rec.model is not None:
        return _record_model(rec).model_dump()
    return dict(
        name=rec.model_name or rec.id,
        description=f"shape of run record {rec.id}",
        num_layers=rec.num_layers,
        hidden_size=rec.hidden_size,
        ffn_hidden_size=rec.ffn_hidden_size,
        num_attention_heads=rec.num_attention_heads,
        num_kv_heads=rec.num_kv_heads,
        vocab_size=rec.vocab_size,
        max_seq_len=rec.seq_length,
        sources=[rec.source or where],
        **({"hf_model_type": rec.hf_model_type} if rec.hf_model_type is not None else {}),
        **arch,
    )


def resolve_fields(fields: dict):
    """(settings, plan, warnings) of a row's job fields (plan.resolve); Skip with the reason
    where the job is not a valid one."""
    try:
        job = Job.model_validate(fields)
    except ValidationError as e:
        raise Skip(format_validation_error(e, "plan").message) from None
    try:
        return resolve(job)
    except PlannerError as e:
        raise Skip(e.message) from None


def _write_model(spec: dict, tmpdir: Path) -> str:
    """Write the spec to a YAML file named by its content hash (catalog.load_model caches by
    path, so equal paths always mean equal specs) and return the path."""
    text = yaml.dump(spec, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True)  # libyaml: the same text, faster
    p = tmpdir / f"model-{hashlib.sha1(text.encode()).hexdigest()[:16]}.yaml"
    if not files.exists(p):  # a private temporary folder: atomic (renamed into place), not synced to disk
        files.write_atomic(p, text, what="model file", durable=False)
    return str(p)


# ----------------------------------------------------------------------- prediction
def predict(settings, plan) -> dict:
    """The planner's figures for one resolved plan: tokens/s per GPU (None until the time
    model adds throughput.tokens_per_s_per_gpu to explain.to_json), step time, per-GPU
    memory bytes and the resolved plan."""
    res = to_json(settings, plan, evaluate(settings, plan))
    thr = res.get("throughput") or {}
    tim = res.get("time") or {}
    return {
        "tokens_per_s_per_gpu": thr.get("tokens_per_s_per_gpu"),
        "step_s": tim.get("step_s"),
        "mfu": thr.get("mfu"),
        "hfu": thr.get("hfu"),
        "capacity_bytes": res["memory"].get("capacity_bytes"),
        "memory_bytes": res["memory"]["total_bytes"],
        "reported_memory_bytes": res["memory"].get("reported_bytes", res["memory"]["total_bytes"]),
        "allocated_bytes": res["memory"]["allocated_bytes"],
        "reserved_bytes": res["memory"]["reserved_bytes"],
        "reserved_high_bytes": res["memory"]["reserved_high_bytes"],
        "plan": res["plan"],
    }


@dataclass
class Row:
    id: str
    source_group: Optional[str] = None
    stack: Optional[str] = None
    hardware: Optional[str] = None
    mesh: Optional[str] = None
    predicted_tokens_per_s_per_gpu: Optional[Real] = None
    published_tokens_per_s_per_gpu: Optional[Real] = None
    published_from: Optional[str] = None
    error: Optional[Real] = None
    predicted_memory_gib: Optional[Real] = None  # the peak the stack logs (allocated or reserved: memory.reported_bytes)
    predicted_allocated_gib: Optional[Real] = None  # the heaviest stage's allocated and reserved peaks
    predicted_reserved_gib: Optional[Real] = None
    predicted_reserved_high_gib: Optional[Real] = None  # the fragmentation band's top (memory.py [13])
    published_memory_gib: Optional[Real] = None
    memory_error: Optional[Real] = None
    predicted_step_s: Optional[Real] = None
    predicted_mfu: Optional[Real] = None
    assumed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: Optional[str] = None
    plan: Optional[dict] = None

    def as_dict(self) -> dict:
        return asdict(self)


def _mesh(p: dict) -> str:
    s = f"TP{p['tp']} PP{p['pp']} DP{p['dp']}"
    if p["cp"] > 1:
        s += f" CP{p['cp']}"
    if p["vpp"] > 1:
        s += f" v{p['vpp']}"
    if p.get("ep", 1) > 1:
        s += f" EP{p['ep']}"
    if (p.get("etp") or p["tp"]) != p["tp"]:
        s += f" ETP{p['etp']}"
    return s


def new_row(rec: RunRecord) -> Row:
    pub_tok, pub_from = rec.published_tokens
    return Row(id=rec.id, source_group=rec.source_group, published_tokens_per_s_per_gpu=pub_tok,
               published_from=pub_from, published_memory_gib=rec.memory_per_gpu_gib)


def prepare_record(rec: RunRecord, row: Row, tmpdir: Path, base_dir: Path, path_label: str = "runs file",
                   calibration: Optional[str] = None):
    """(settings, plan) of a record, filling in `row` (new_row) as it goes: hardware,
    assumptions, stack, warnings. Raises Skip with the reason (a record that cannot be
    evaluated; `row` keeps what was inferred until then); a bad `hardware:` field is a
    PlannerError. calibration: a profile path every prediction uses."""
    pub_tok = row.published_tokens_per_s_per_gpu
    assumed = _Assumed(row.assumed)
    where = f"{path_label}: record {rec.id!r}"
    if rec.hardware is not None:
        hw = rec.hardware
        local = base_dir / hw
        if files.is_file(local):
            hw = str(local)
        try:
            load_hardware(hw)
        except PlannerError as e:
            raise PlannerError(f"{where}: field `hardware`: {e.message}", e.hint) from None
        row.hardware = Path(hw).stem if Path(hw).suffix else hw
        if rec.hardware_assumed is not None:
            assumed.add("hardware", row.hardware, f"gpu_type {rec.gpu_type!r}; {rec.hardware_assumed}")
    else:
        # rule 1: no entry is read from the gpu_type text
        raise Skip(f"no hardware entry for {rec.gpu_type} (give `hardware:` with a catalog name or a hardware YAML)")
    if pub_tok is None and rec.memory_per_gpu_gib is None:
        raise Skip(
            "nothing to compare: no tokens_per_sec_per_gpu, iteration_time_s or memory_per_gpu_gib published "
            "(tflops_per_gpu and mfu depend on the source's FLOP convention)"
        )
    arch = infer_architecture(rec, assumed)
    spec = model_spec(rec, arch, where)
    try:
        ModelSpec.model_validate(spec)
    except ValidationError as e:
        raise Skip(format_validation_error(e, "model shape").message) from None
    fields = build_job(rec, _write_model(spec, tmpdir), hw, assumed)
    if calibration is not None:
        fields["calibration"] = calibration
    settings, plan, warnings = resolve_fields(fields)
    row.warnings = list(warnings)
    row.stack = settings.stack_name
    for k, v in settings.inherited:
        if not (k == "micro_batch" and rec.micro_batch_size is None):  # listed above with its rule
            assumed.add(k, v, f"not published; the {settings.stack_name} stack's default")
    if param_gather_assumed(settings, plan):  # the record's dp_param_gather_overlap left out, where its tie acts
        assumed.add("dp_param_gather_overlap", True, "not published; follows dp_comm_overlap as the plan runs, the "
                    "ZeRO-1/2 parameter all-gather priced behind the next forward (step.py [40]); Megatron's "
                    "--overlap-param-gather is a flag of its own, off by default (arguments.py @d98e8a64 l. 3148-3149)")
    # the trainer model code not checked (rule 12b: startup.model_code_assumed, and model_code_compile_note),
    # the lines explain lists (explain.to_json: settings.code_assumed)
    row.assumed.extend(settings.code_assumed)
    return settings, plan


def evaluate_record(rec: RunRecord, tmpdir: Path, base_dir: Path, path_label: str = "runs file",
                    calibration: Optional[str] = None, lenient: bool = False) -> Row:
    """One row: predicted vs published, or skipped with the reason. A published figure the
    hardware cannot produce (Impossible) is an error naming the record and field; `lenient`
    skips the record with that reason instead."""
    row = new_row(rec)
    try:
        settings, plan = prepare_record(rec, row, tmpdir, base_dir, path_label, calibration)
        pred = predict(settings, plan)
        _check_possible(rec, settings, pred, row.published_tokens_per_s_per_gpu)
    except Impossible as u:
        if not lenient:
            raise PlannerError(f"{path_label}: record {rec.id!r}: {u}", "check the figure's units, the model, the GPU "
                               "count and `hardware:`, or pass --lenient to skip such records") from None
        row.skipped = str(u)
        return row
    except Skip as s:
        row.skipped = str(s)
        return row
    pub_tok = row.published_tokens_per_s_per_gpu
    row.plan = pred["plan"]
    row.mesh = _mesh(pred["plan"])
    # the memory the stack logs (torchtitan: max reserved, without the CUDA context and NCCL's
    # buffers; see memory.reported_bytes), compared with what the source published
    row.predicted_memory_gib = float(pred.get("reported_memory_bytes", pred["memory_bytes"])) / GiB
    if "allocated_bytes" in pred:  # the heaviest stage's two peaks, beside the one the stack logs
        row.predicted_allocated_gib = float(pred["allocated_bytes"]) / GiB
        row.predicted_reserved_gib = float(pred["reserved_bytes"]) / GiB
        row.predicted_reserved_high_gib = float(pred["reserved_high_bytes"]) / GiB
    if rec.memory_per_gpu_gib is not None:
        row.memory_error = row.predicted_memory_gib / rec.memory_per_gpu_gib - 1.0
    row.predicted_step_s = pred.get("step_s")
    row.predicted_mfu = pred.get("mfu")
    tok = pred.get("tokens_per_s_per_gpu")
    if tok is None:
        row.skipped = TIME_MODEL_UNAVAILABLE
        return row
    row.predicted_tokens_per_s_per_gpu = float(tok)
    if pub_tok is not None:
        row.error = float(tok) / pub_tok - 1.0
    return row


def _stats(err: np.ndarray) -> dict:
    return {
        "n": int(err.size),
        "median_abs_error": float(np.median(np.abs(err))) if err.size else None,
        "p90_abs_error": float(np.percentile(np.abs(err), 90)) if err.size else None,
        "median_error": float(np.median(err)) if err.size else None,
    }


def summarize(rows: list[Row]) -> dict:
    """n, median and 90th-percentile |error| over rows with a tokens/s error (numpy's linear
    percentile, Hyndman & Fan type 7), the signed median (a bias in one direction is a missing
    mechanism, not noise), the same per stack, and the memory statistics."""
    err = np.array([r.error for r in rows if r.error is not None], dtype=np.float64)
    merr = np.array([r.memory_error for r in rows if r.memory_error is not None], dtype=np.float64)
    by_stack = {}
    for name in sorted({r.stack for r in rows if r.error is not None and r.stack}):
        e = np.array([r.error for r in rows if r.error is not None and r.stack == name], dtype=np.float64)
        by_stack[name] = _stats(e)
    return {
        **_stats(err),
        "n_skipped": sum(r.skipped is not None for r in rows),
        "n_memory": int(merr.size),
        "median_abs_memory_error": float(np.median(np.abs(merr))) if merr.size else None,
        "median_memory_error": float(np.median(merr)) if merr.size else None,
        "max_abs_memory_error": float(np.max(np.abs(merr))) if merr.size else None,
        "by_stack": by_stack,
    }


def validate_runs(records: list[RunRecord], base_dir: Path = Path("."), path_label: str = "runs file",
                  calibration: Optional[str] = None, lenient: bool = False) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="planner-validate-") as d:
        return [evaluate_record(r, Path(d), base_dir, path_label, calibration, lenient) for r in records]


def report(path: Path, groups=None, ids=None, complete: bool = False, calibration: Optional[str] = None,
           lenient: bool = False, parsed: Optional[list] = None) -> dict:
    """The `validate` result: {"runs": [row dicts], "summary": {...}}. A calibration profile
    (planner calibrate) replaces the default figures it covers in every prediction. A record
    that lacks a required field is a skipped row with the reason (`lenient`: any record the
    schema refuses), not the end of the file. parsed: [the file's YAML data] where the caller
    has parsed `path` already (cli/validate.py), read instead of parsing it again."""
    path = Path(path)
    if calibration is not None:
        from .profile import load_profile

        load_profile(calibration)  # a bad profile is bad input, once
    incomplete: list[dict] = []
    loaded = load_runs(path, incomplete=incomplete, lenient=lenient, parsed=parsed)
    if not loaded and incomplete:
        raise PlannerError(f"{path}: no record can be read ({incomplete[0]['where']}: {incomplete[0]['reason']})",
                           "give each record the fields of tests/data/published_runs.yaml")
    records = select(loaded, groups, ids, complete) if loaded else []
    pre = [Row(id=str(x["id"]), source_group=x["group"], skipped=x["reason"]) for x in incomplete
           if not complete and (not groups or x["group"] in groups) and (not ids or str(x["id"]) in ids)]
    rows = pre + validate_runs(records, path.resolve().parent, str(path), calibration, lenient)
    out = {"runs": [r.as_dict() for r in rows], "summary": summarize(rows)}
    if calibration is not None:
        out["calibration"] = calibration
    return out
