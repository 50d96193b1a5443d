"""Pydantic models for every file a user or the catalogs provide.

Every model forbids unknown keys (`extra="forbid"`), so a typo in a YAML file is an
error that names the field, never a silently ignored setting. Human units appear only in
key names that say so (`hbm_GB`, `nvlink_GBps`); the properties convert to SI.
"""

# No `from __future__ import annotations` here: pydantic would then eval() every field's
# annotation string when each model class is made (~370 of them at import); as objects they
# cost nothing more. `planner fit` on llama3-405b, the module's import: 53 -> 41 ms (median of
# 12, CPU, .pyc cached; issue 24). Forward references are quoted ("Job").

import math
import re
from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .precisions import Precision

# Non-finite numbers (.inf, .nan, 1e400) are an error in every file and option, not a value.
Strict = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
Dispatcher = Literal["alltoall", "allgather", "deepep", "deepep_ll", "hybridep"]  # planner/dispatch.py NAMES

# The largest count (GPUs, layers, heads, sequences, tokens per sequence, ...) any field may
# hold: 2**31 - 1. No training run comes near it (the largest published runs use 1e4..1e5
# GPUs, 1e2 layers, 1e6-token sequences), and it keeps the search exact: it works in int64
# arrays, where a product of two counts (global batch x sequence length) must stay below
# 2**63. A larger integer is refused with the field's name instead of overflowing numpy.
MAX_COUNT = 2**31 - 1


def _not_bool(v):
    """A number given as true / false is an error, not 1 / 0: pydantic's lax mode turns a bool into an int or a
    float (`num_layers: true` read as one layer, `hidden_size: true` as a width of 1, `reserve_gib: true` as
    1 GiB), silently (audit 2026-12-07)."""
    if isinstance(v, bool):
        raise PydanticCustomError("int_type", "Input should be a number, not the boolean {value}",
                                  {"value": str(v).lower()})
    return v


def _not_number(v):
    """A switch given as a number is an error, not true / false: pydantic's lax mode reads 0 and 1 (and 0.0, 1.0)
    as booleans (`gated_mlp: 0`, a hardware's `nvls: 1`), silently (audit2 2026-12-07). Text and numpy booleans
    go on to pydantic's own check."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise PydanticCustomError("bool_type", "Input should be true or false, not the number {value}", {"value": v})
    return v


Count = Annotated[int, Field(le=MAX_COUNT), BeforeValidator(_not_bool)]
Real = Annotated[float, BeforeValidator(_not_bool)]  # every float field of a file: `reserve_gib: true` is not 1.0
Int = Annotated[int, BeforeValidator(_not_bool)]  # an integer field without Count's bound
Bool = Annotated[bool, BeforeValidator(_not_number)]  # every boolean field of a file: `nvls: 0` is not false
# the longest period of MoE layers (moe.layer_freq, bounded by num_layers) the layer list builds one
# object a layer of (layers._build); no published model repeats over more than a few layers
MAX_LAYER_PERIOD = 65_536


class MoESpec(BaseModel):
    """A mixture-of-experts MLP (planner/moe.py): routed experts, the top-k router, shared
    experts, and which layers are dense. Layer i (0-based) is an MoE layer when
    i >= first_k_dense and i % layer_freq == 0 (DeepSeek-V3's first_k_dense_replace and
    moe_layer_freq, transformers DeepseekV3DecoderLayer); the others keep the dense MLP of
    width ffn_hidden_size."""

    model_config = Strict
    num_experts: Count = Field(gt=0, description="routed experts per MoE layer")
    top_k: Count = Field(gt=0, description="routed experts each token is sent to")
    expert_ffn_hidden_size: Optional[Count] = Field(default=None, gt=0, description="one routed expert's MLP width; default: ffn_hidden_size")
    num_shared_experts: Count = Field(default=0, ge=0, description="experts every token passes through (DeepSeek, Qwen2-MoE)")
    shared_expert_ffn_hidden_size: Optional[Count] = Field(
        default=None, gt=0, description="width of ONE shared expert; default: expert_ffn_hidden_size")
    shared_expert_gate: Bool = Field(default=False, description="a sigmoid gate (h weights) scales the shared expert's output (Qwen2-MoE)")
    first_k_dense: Count = Field(default=0, ge=0, description="the first k layers keep a dense MLP (DeepSeek first_k_dense_replace)")
    layer_freq: Count = Field(default=1, gt=0, description="every layer_freq-th layer from first_k_dense is MoE (DeepSeek moe_layer_freq)")
    router: Literal["softmax", "sigmoid"] = Field(default="softmax", description="router score function (Megatron --moe-router-score-function; what the router saves for its backward: planner/layers/moe.py router_saved_terms)")
    expert_score_bias: Bool = Field(
        default=False, description="a per-expert bias added to the router's scores for the top-k choice only, updated to "
                                   "balance the load (aux-loss-free balancing: DeepSeek-V3 e_score_correction_bias, "
                                   "Megatron --moe-router-enable-expert-bias, which needs a sigmoid router); E elements "
                                   "a layer, a fp32 buffer with its fp32 token counter, not a trained parameter (no "
                                   "gradient or optimizer state; counted in the model's total as its checkpoint lists "
                                   "it: planner/layers/common.py [sb]); the default balancing rule keys on it "
                                   "(planner/imbalance.py)")
    router_linear_bias: Bool = Field(
        default=False, description="the router's linear has a bias of its own, E parameters a layer added to the logits "
                                   "(gpt-oss GptOssTopKRouter; Megatron-Core gives the router one exactly under "
                                   "--add-bias-linear, moe/router.py); no load balancing")
    expert_groups: Optional[Count] = Field(
        default=None, gt=0, description="group-limited routing: the routed experts form this many equal groups "
                                        "(DeepSeek-V3 config.json n_group); null: no group limit")
    groups_per_token: Optional[Count] = Field(
        default=None, gt=0, description="a token's top_k experts come from at most this many groups (DeepSeek-V3 "
                                        "topk_group 4: node-limited routing, at most 4 nodes per token)")
    route_norm: Bool = Field(
        default=False, description="a token's top_k routing weights are divided by their sum (config.json "
                                   "norm_topk_prob: DeepSeek-V3, Kimi K2, the Qwen3 MoE models; torchtitan MoEArgs "
                                   "route_norm; Mixtral's and gpt-oss's routers renormalise over the top k always); "
                                   "what the division saves for its backward is priced on the stacks whose router "
                                   "runs it as an op (stack memory.router_topk_saves, planner/layers/moe.py [21])")

    @model_validator(mode="before")
    @classmethod
    def _split_router_bias(cls, data):
        if isinstance(data, dict) and "router_bias" in data:  # the one field of before the split (issue 22)
            raise ValueError("router_bias is two fields now: expert_score_bias (a per-expert score bias for "
                             "aux-loss-free balancing, DeepSeek-V3 e_score_correction_bias) or router_linear_bias "
                             "(the router linear's own bias, gpt-oss)")
        return data

    @model_validator(mode="after")
    def _check(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")
        if (self.expert_groups is None) != (self.groups_per_token is None):
            raise ValueError("expert_groups and groups_per_token go together (group-limited routing)")
        if self.expert_groups is not None:
            if self.num_experts % self.expert_groups:
                raise ValueError(f"expert_groups ({self.expert_groups}) does not divide num_experts ({self.num_experts})")
            if self.groups_per_token > self.expert_groups:
                raise ValueError(f"groups_per_token ({self.groups_per_token}) exceeds expert_groups ({self.expert_groups})")
        return self


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 sec. 2.1): queries and keys/
    values go through low-rank latents; each head's query and key have a no-position part
    (qk_nope_head_dim) and a rotary part (qk_rope_head_dim, one rotary key shared by all heads),
    its value v_head_dim. The attention kind of a model is MHA/GQA unless `mla:` is given."""

    model_config = Strict
    q_lora_rank: Optional[Count] = Field(default=None, gt=0, description="query latent width; null: queries projected directly (DeepSeek-V2-Lite)")
    kv_lora_rank: Count = Field(gt=0, description="compressed key/value latent width")
    qk_rope_head_dim: Count = Field(gt=0)
    qk_nope_head_dim: Count = Field(gt=0)
    v_head_dim: Count = Field(gt=0)
    # not a model file's setting: the job's mla_down_proj_fusion (Megatron's FusedMLASelfAttention), set on a copy by
    # plan.with_fused_mla (a job setting), read by layers.layer_list (layers/attention.py MLA.down_fused)
    _down_fused: Bool = PrivateAttr(default=False)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class RopeScalingParams(BaseModel):
    """The numbers of a `llama3` rope_scaling (Llama 3.1's frequency-dependent RoPE scaling), as the
    model's HF config.json states them (transformers modeling_rope_utils _compute_llama3_parameters
    reads all four): the wavelengths above original_max_position_embeddings / low_freq_factor are
    divided by factor, those below original / high_freq_factor kept, the band between interpolated.
    Priced at nothing (the rotary tables are computed once, the same kernel and bytes): read where a
    trainer's option must spell the same model (Megatron-LM's --use-rope-scaling applies factor 8,
    1, 4, 8192 only; torchtitan's llama3 flavors always apply its RoPEScalingArgs, the same four:
    planner/trainers/export.py)."""

    model_config = Strict
    factor: Real = Field(gt=0, description="rope_scaling.factor (Llama 3.1: 8.0)")
    low_freq_factor: Real = Field(gt=0, description="rope_scaling.low_freq_factor (Llama 3.1: 1.0)")
    high_freq_factor: Real = Field(gt=0, description="rope_scaling.high_freq_factor (Llama 3.1: 4.0)")
    original_max_position_embeddings: Count = Field(
        gt=0, description="rope_scaling.original_max_position_embeddings (Llama 3.1: 8192)")

    def key(self) -> tuple:
        """(factor, low_freq_factor, high_freq_factor, original_max_position_embeddings) as floats and an int."""
        return (float(self.factor), float(self.low_freq_factor), float(self.high_freq_factor),
                int(self.original_max_position_embeddings))



class YarnScalingParams(BaseModel):
    """The numbers of a `yarn` rope_scaling (YaRN: Peng et al., arXiv:2309.00071) as the model's HF
    config.json states them: transformers modeling_rope_utils _compute_yarn_parameters reads factor,
    original_max_position_embeddings, beta_fast (absent: 32), beta_slow (absent: 1) and truncate
    (absent: true, the correction range rounded to whole dimensions); its attention factor is the
    model's rope_attention_factor. Priced at nothing (the rotary tables are computed once): read where
    a trainer's option must spell the same model (Megatron-LM's --position-embedding-type yarn and
    its --rotary-scaling-factor / --yarn-* flags: planner/trainers/export.py)."""

    model_config = Strict
    factor: Real = Field(gt=0, description="rope_scaling.factor (gpt-oss: 32.0)")
    original_max_position_embeddings: Count = Field(
        gt=0, description="rope_scaling.original_max_position_embeddings (gpt-oss: 4096)")
    beta_fast: Real = Field(default=32.0, gt=0, description="rope_scaling.beta_fast (transformers' default 32)")
    beta_slow: Real = Field(default=1.0, gt=0, description="rope_scaling.beta_slow (transformers' default 1)")
    truncate: Bool = Field(default=True, description="rope_scaling.truncate: the correction range rounded to whole "
                                                     "dimensions (transformers' default true; gpt-oss: false)")
    mscale: Optional[Real] = Field(
        default=None, ge=0, description="rope_scaling.mscale (DeepSeek-V3, Kimi K2: 1.0); null: not stated. With "
                                        "mscale_all_dim it sets the attention factor (transformers _compute_yarn_parameters); "
                                        "Megatron-LM's --mscale (for MLA; without MLA where the pair gives the "
                                        "attention factor)")
    mscale_all_dim: Optional[Real] = Field(
        default=None, ge=0, description="rope_scaling.mscale_all_dim (DeepSeek-V3, Kimi K2: 1.0; MLA's softmax scale "
                                        "times get_mscale(factor, mscale_all_dim)^2); null: not stated. Megatron-LM's "
                                        "--mscale-all-dim (for MLA; without MLA where the pair gives the attention "
                                        "factor)")

    def key(self) -> tuple:
        """(factor, original_max_position_embeddings, beta_fast, beta_slow, truncate)."""
        return (float(self.factor), int(self.original_max_position_embeddings), float(self.beta_fast),
                float(self.beta_slow), bool(self.truncate))


# ----------------------------------------------------------------------------- layer kinds
# A model is an ordered list of layers (planner/layers/), each a mixer sub-block (attention of
# some kind, or a state-space / linear-attention mixer, or none) and an MLP sub-block (dense,
# mixture-of-experts, or none). The specs below are what a model YAML's `layer_kinds` say;
# head counts, widths and norms not given come from the model's top-level fields.

Position = Literal["rope", "nope"]


class GlobalAttention(BaseModel):
    """Causal softmax attention over the whole sequence (MHA / GQA / MQA from the model's head
    counts). position: rope, or nope (no positional encoding: Llama 4's every-4th layer,
    Nemotron-H and Jamba attention); default: the model's position_embedding. output_gate: the
    query projection also emits a sigmoid gate per head dim (Qwen3-Next gated attention,
    q_proj h x 2 a d)."""

    model_config = Strict
    kind: Literal["global"] = "global"
    position: Optional[Position] = None
    output_gate: Bool = False


class SlidingAttention(BaseModel):
    """Causal attention to the last `window` keys (Mistral 7B, Gemma 3 local layers, gpt-oss
    even layers): a query at position i attends to keys max(0, i - window + 1) .. i."""

    model_config = Strict
    kind: Literal["sliding"]
    window: Count = Field(gt=0, description="keys a query attends to, itself included")
    position: Optional[Position] = None
    output_gate: Bool = False


class ChunkedAttention(BaseModel):
    """Causal attention inside fixed chunks of the sequence (Llama 4 `attention_chunk_size`): a
    query at position i attends to keys from chunk * floor(i / chunk) to i."""

    model_config = Strict
    kind: Literal["chunked"]
    chunk: Count = Field(gt=0, description="tokens per attention chunk")
    position: Optional[Position] = None
    output_gate: Bool = False
    # not a model file's key: set by plan._stack_chunks from the stack's chunked_attention.pads_last_chunk where the
    # sequence is longer than the chunk (the stack's code pads the sequence to whole chunks, runs every chunk whole
    # and copies the output back: layers/attention.py [13])
    _padded: Bool = PrivateAttr(default=False)
    # likewise, from the stack's chunked_attention.cp_local_sequence: the code compares the CP rank's s / cp with the
    # chunk and chunks nothing at s / cp <= chunk under cp > 1 (layers/attention.py [14])
    _local: Bool = PrivateAttr(default=False)


class MLAAttention(BaseModel):
    """Multi-head latent attention with the model's `mla:` shape (DeepSeek-V2/V3, Kimi K2)."""

    model_config = Strict
    kind: Literal["mla"]


class GatedDeltaNet(BaseModel):
    """Gated DeltaNet linear attention (Yang, Kautz, Hatamizadeh 2024, arXiv:2412.06464; Qwen3-Next
    `linear_attention` layers): per head a d_k x d_v recurrent state updated by the gated delta
    rule, computed chunk-wise (planner/layers/linear_attention.py)."""

    model_config = Strict
    kind: Literal["gated_deltanet"]
    num_key_heads: Count = Field(gt=0, description="query/key heads (linear_num_key_heads)")
    num_value_heads: Count = Field(gt=0, description="value heads (linear_num_value_heads)")
    key_head_dim: Count = Field(gt=0, description="linear_key_head_dim")
    value_head_dim: Count = Field(gt=0, description="linear_value_head_dim")
    conv_kernel: Count = Field(default=4, gt=0, description="short depthwise causal conv (linear_conv_kernel_dim)")
    chunk_size: Count = Field(default=64, gt=0, description="chunk length of the chunked kernel (fla chunk_gated_delta_rule: 64)")


class Mamba2(BaseModel):
    """Mamba-2 state-space mixer (Dao & Gu 2024, arXiv:2405.21060; Nemotron-H `M` blocks),
    trained with the chunked SSD algorithm (planner/layers/mamba.py)."""

    model_config = Strict
    kind: Literal["mamba2"]
    num_heads: Count = Field(gt=0, description="mamba_num_heads")
    head_dim: Count = Field(gt=0, description="mamba_head_dim; d_inner = num_heads x head_dim")
    state_size: Count = Field(gt=0, description="ssm_state_size (N)")
    n_groups: Count = Field(default=1, gt=0, description="B/C groups (n_groups)")
    conv_kernel: Count = Field(default=4, gt=0, description="conv_kernel")
    chunk_size: Count = Field(default=256, gt=0, description="SSD chunk length (mamba_ssm / Megatron-Core default 256; HF chunk_size)")
    conv_bias: Bool = True
    proj_bias: Bool = False


class Mamba1(BaseModel):
    """Mamba (selective scan, Gu & Dao 2023, arXiv:2312.00752; Jamba's mixers)."""

    model_config = Strict
    kind: Literal["mamba1"]
    d_inner: Count = Field(gt=0, description="expand x hidden_size")
    state_size: Count = Field(gt=0, description="mamba_d_state (N)")
    conv_kernel: Count = Field(default=4, gt=0, description="mamba_d_conv")
    dt_rank: Count = Field(gt=0, description="mamba_dt_rank")
    conv_bias: Bool = True
    proj_bias: Bool = False
    inner_norms: Bool = Field(default=False, description="RMSNorms on dt, B and C (Jamba)")


class NoMixer(BaseModel):
    """No mixer: an MLP-only block (Nemotron-H `-` and `E` blocks)."""

    model_config = Strict
    kind: Literal["none"]


Mixer = Annotated[Union[GlobalAttention, SlidingAttention, ChunkedAttention, MLAAttention, GatedDeltaNet, Mamba2,
                        Mamba1, NoMixer], Field(discriminator="kind")]


class DenseMLP(BaseModel):
    """A dense MLP; width and gating default to the model's ffn_hidden_size and gated_mlp
    (Llama 4 Maverick's dense layers are 16,384 wide beside 8,192-wide experts)."""

    model_config = Strict
    kind: Literal["dense"] = "dense"
    ffn_hidden_size: Optional[Count] = Field(default=None, gt=0)
    gated: Optional[Bool] = None


class MoEMLP(BaseModel):
    """The model's mixture-of-experts MLP (`moe:`)."""

    model_config = Strict
    kind: Literal["moe"]


class NoMLP(BaseModel):
    """No MLP: a mixer-only block (Nemotron-H `M` and `*` blocks)."""

    model_config = Strict
    kind: Literal["none"]


MLP = Annotated[Union[DenseMLP, MoEMLP, NoMLP], Field(discriminator="kind")]


class LayerKindSpec(BaseModel):
    """One kind of layer: its mixer and its MLP. Left out: the model's default mixer (MLA with
    `mla:`, else global attention) and MLP (the MoE MLP with `moe:`, else dense)."""

    model_config = Strict
    mixer: Optional[Mixer] = None
    mlp: Optional[MLP] = None


def _kind_text(k: "LayerKindSpec") -> str:
    def part(x) -> str:
        if x is None:
            return "default"
        d = x.model_dump()
        return d.pop("kind") + "(" + ", ".join(f"{f}={v}" for f, v in d.items()) + ")"
    return f"{part(k.mixer)} + {part(k.mlp)}"


def layer_mixers_text(kinds: list) -> str:
    """A canonical text of a model's layers (LayerKindSpec each, in order): each layer's mixer and MLP with their
    fields ('default' where the kind leaves the model's default), the shortest period p of the layers that repeats to
    the whole list, its runs of equal layers as 'x n', and 'repeated to N layers' where p < N. Two lists of the same
    layers give the same text whatever their layer_pattern's length (ModelSpec.layer_mixers)."""
    descs = [_kind_text(k) for k in kinds]
    n = len(descs)
    p = next(q for q in range(1, n + 1) if all(descs[i] == descs[i % q] for i in range(n)))
    runs: list = []
    for d in descs[:p]:
        if runs and runs[-1][0] == d:
            runs[-1][1] += 1
        else:
            runs.append([d, 1])
    text = "; ".join(d if c == 1 else f"{d} x {c}" for d, c in runs)
    return text + (f"; repeated to {n} layers" if p < n else "")


# the model-state presets (BYTES_PER_PARAM_PRESETS below): bytes_per_param by name
BppPreset = Literal["mixed16", "megatron", "pure-bf16", "bf16-moments"]


AttentionKernel = Literal["flash2", "cudnn", "flex"]  # compute.ATTENTION_KERNELS; flex: FlashAttention-2's rate x compute.flex_over_flash2 [7d]
# the attention module a trainer's model code builds (torchtitan main's flavor attn_type, torchtitan 0.3.0's model_registry
# attn_backend): what its start-up checks read (startup.TORCHTITAN_VARLEN_CP), priced by the kernel it runs (AttentionKernel)
AttentionBackend = Literal["sdpa", "flex", "varlen"]
# torch's named CP load balancers torchtitan's context_parallel_load_balancer builds (job field cp_load_balancer, which
# also carries a name torch does not build, as a trainer config states it: startup.TORCHTITAN_CP_LOAD_BALANCER_NAME)
CPLoadBalancer = Literal["headtail", "ptrr"]
# the job settings a trainer's deterministic mode refuses at start-up (stack_db runs.deterministic_refuses; start-up
# rules MEGATRON_DETERMINISTIC_TP_OVERLAP / _CE_FUSION / _FLASH, planner/startup.py codes 91-93; _USE_FLASH_ATTN /
# _MOE, codes 98-99: checks an older trainer commit ran, dated since / until; _NCCL_ALGO / _NCCL_CHOICE, codes 103-104:
# the job's nccl_algo)
DeterministicSetting = Literal["tp_comm_overlap", "cross_entropy_fusion", "flash_attention", "use_flash_attn", "moe",
                               "nccl_algo_tokens", "nccl_algo_choice"]


class TrainingRecipe(BaseModel):
    """How the model's developers pre-trained it, as they published it (model_zoo `training:`):
    the settings a planned job (`fit`, `explain`, `check` from options or a job YAML) takes
    where it gives none, each applied only where the job's stack and hardware run it and
    listed as assumed with its source (planner/recipe.py). Flags and job fields replace them;
    trainer configs and run records never take them (they say what ran)."""

    model_config = Strict
    precision: Optional[Precision] = Field(default=None, description="the training precision (planner/precisions.py)")
    fp8_recipe: Optional[str] = Field(default=None, description="the fp8 scaling recipe (precisions.FP8_RECIPES), with precision fp8")
    moe_dispatcher: Optional[Dispatcher] = Field(
        default=None, description="the MoE token dispatcher whose kernels the run used (planner/dispatch.py)")
    bytes_per_param: Optional[BppPreset] = Field(
        default=None, description="the model-state preset (the optimizer state dtypes: bf16-moments keeps Adam's m and v "
                                  "in bf16)")
    mtp_layers: Optional[Count] = Field(
        default=None, ge=0, description="multi-token prediction modules trained beside the model (job field mtp_layers)")
    moe_aux_loss_coeff: Optional[Real] = Field(
        default=None, ge=0.0, description="the auxiliary load-balancing loss coefficient of an MoE model's training (job "
                                          "field moe_aux_loss_coeff; a sequence-wise loss is Megatron's seq_aux_loss)")
    attention_kernel: Optional[AttentionKernel] = Field(
        default=None, description="the attention kernel the model's code runs (a torchtitan flavor's attn_type: flex "
                                  "for FlexAttention; job field attention_kernel), taken only where the job's stack "
                                  "lists it (stack_db runs.attention_kernels)")
    attention_backend: Optional[AttentionBackend] = Field(
        default=None, description="the attention module the model's code builds (a torchtitan flavor's attn_type: flex, "
                                  "varlen; job field attention_backend, read by the start-up rules), taken only where "
                                  "the job's stack lists it (stack_db runs.attention_backends)")
    seq_len: Optional[Count] = Field(
        default=None, gt=0,
        description="the sequence length of the main phase of pre-training, as the developers published it (a "
                    "context extended afterwards is max_seq_len, the context the model serves); the planned job's "
                    "default training length (plan._seq_len)")
    not_priced: list[str] = Field(default_factory=list, description="parts of the recipe the planner does not price, "
                                                                    "printed with the assumed settings")
    sources: dict[str, str] = Field(min_length=1, description="a source for each setting given, by field name")

    @model_validator(mode="after")
    def _cited(self) -> "TrainingRecipe":
        from .precisions import FP8_RECIPES

        given = [f for f in ("precision", "fp8_recipe", "moe_dispatcher", "bytes_per_param", "mtp_layers", "seq_len",
                             "moe_aux_loss_coeff", "attention_kernel", "attention_backend")
                 if getattr(self, f) is not None]
        missing = [f for f in given if f not in self.sources]
        if missing:
            raise ValueError(f"training: no source for {', '.join(missing)} (sources: {{field: citation}})")
        if self.fp8_recipe is not None and self.fp8_recipe not in FP8_RECIPES:
            raise ValueError(f"training.fp8_recipe {self.fp8_recipe!r}: valid: {', '.join(FP8_RECIPES)}")
        return self


class ModelSpec(BaseModel):
    """A decoder-only transformer's shape: dense, or with mixture-of-experts layers (`moe:`) and
    multi-head latent attention (`mla:`)."""

    model_config = Strict
    name: str
    description: str = ""
    num_layers: Count = Field(gt=0)
    hidden_size: Count = Field(gt=0)
    ffn_hidden_size: Count = Field(gt=0)
    num_attention_heads: Count = Field(gt=0)
    num_kv_heads: Optional[Count] = Field(default=None, gt=0, description="default: num_attention_heads (MHA)")
    head_dim: Optional[Count] = Field(default=None, gt=0, description="default: hidden_size / num_attention_heads")
    vocab_size: Count = Field(gt=0)
    tokenizer_vocab_size: Optional[Count] = Field(
        default=None, gt=0,
        description="the tokens of the model's own tokenizer where vocab_size (the checkpoint's embedding rows) pads "
                    "beyond them (Qwen3: 151,669 tokens in 151,936 rows): a trainer may build fewer rows than "
                    "vocab_size, down to these, and a job's padded_vocab_size may too (plan.with_padded_vocab); at "
                    "most vocab_size; default: vocab_size (every row a token)")
    gated_mlp: Bool = Field(description="SwiGLU/GeGLU (3 matrices) instead of a plain 2-matrix MLP")
    norm: Literal["rmsnorm", "layernorm"]
    tied_embeddings: Bool = False
    max_seq_len: Count = Field(
        gt=0, description="the model's context length (positions; learned position tables have this many rows): often "
                          "the context it serves after long-context extension, not the length it pre-trained at. A job "
                          "without seq_len trains training.seq_len where the entry publishes one, else the smaller of "
                          "this and plan.HF_DEFAULT_SEQ (plan._seq_len)")
    max_seq_len_by_stack: dict[str, Count] = Field(
        default_factory=dict,
        description="the context a software stack builds the model with where it differs from max_seq_len (stack name "
                    "-> positions): torchtitan 0.3.0 builds the qwen3 flavors' RoPE table at 40960 positions, main's "
                    "flavor of the same numbers at 4096 (262144 for 30B-A3B) (planner/torchtitan_registry.py "
                    "ROPE_MAX_SEQ_LEN_03). A job on that stack is checked against it, not max_seq_len (plan._seq_len's "
                    "beyond-context warning); priced at nothing")
    position_embedding: Literal["rope", "learned", "alibi", "none"] = "rope"
    linear_bias: Bool = Field(default=False, description="biases on the QKV, output and MLP linears (GPT-2/3)")
    dropout: Bool = Field(default=False, description="dropout after attention and MLP (GPT-3 style); Llama has none")
    hidden_dropout: Optional[Real] = Field(
        default=None, ge=0, lt=1,
        description="the hidden dropout's probability, after each sub-block (Megatron-LM --hidden-dropout, "
                    "TransformerConfig.hidden_dropout: the bias-dropout-add's, transformer_layer.py @d98e8a64 l. 363); "
                    "null: Megatron's 0.1 where dropout, else 0. 0 with dropout keeps no hidden mask (the attention's "
                    "dropout alone): priced, the 1 B a hidden element of each sub-block's mask (dropout_masks) only "
                    "where it is above 0")
    attention_dropout: Optional[Real] = Field(
        default=None, ge=0, lt=1,
        description="the attention dropout's probability on the softmax output (Megatron-LM --attention-dropout, "
                    "TransformerConfig.attention_dropout); null: Megatron's 0.1 where dropout, else 0. Priced, the "
                    "eager core's dropout pass and its saved mask and output (scores) only where it is above 0")
    mlp_activation: Optional[Literal["squared_relu", "quick_gelu"]] = Field(
        default=None,
        description="the MLP's activation where it is not its form's usual one (null: GeLU for a plain MLP, SiLU "
                    "(SwiGLU) for a gated one): squared_relu, a plain MLP's relu(x)^2 (Nemotron-4 / Nemotron-H; "
                    "Megatron-LM --squared-relu; config.json hidden_act relu2); quick_gelu, a gated MLP's x "
                    "sigmoid(1.702 x) (Megatron-LM --quick-geglu). Megatron-LM @d98e8a64 argument_utils.py "
                    "core_transformer_config_from_args l. 314-326 sets activation_func from them. Priced as the "
                    "form's usual activation (one elementwise kernel reading and writing the same elements, its input "
                    "saved): the field keeps the model an export writes")
    post_norms: Bool = Field(
        default=False,
        description="a norm on each sub-block's output before its residual add, beside the pre-norm (Gemma 2 and 3's "
                    "'sandwich' norms: transformers Gemma3DecoderLayer post_attention_layernorm and "
                    "post_feedforward_layernorm). Priced: h parameters each, the stack's norm bytes, and each one's "
                    "input saved for the backward (planner/layers/__init__.py LayerKind)")
    qk_norm: Bool = Field(
        default=False,
        description="an RMSNorm over each head's query and key after the QKV projection, before RoPE (Qwen3, Gemma 3, "
                    "Qwen3-Next: transformers' q_norm / k_norm of head_dim; Megatron --qk-layernorm), in every "
                    "softmax-attention layer. Priced: 2 d parameters a layer, the norm kernels' bytes on Q and K, and "
                    "their inputs saved for the backward (planner/layers/attention.py)")
    embedding_norm: Bool = Field(
        default=False,
        description="a norm of the model's kind on the word embedding's output, before the first layer (BLOOM's "
                    "word_embeddings_layernorm; BigScience's Megatron-DeepSpeed --embed-layernorm, "
                    "bigscience-workshop/Megatron-DeepSpeed @8387ae17 megatron/mpu/layers.py l. 194-195, 250-251: built "
                    "on the first pipeline stage only). Priced: its parameters on the first stage (replicated over TP) "
                    "and its saved input, kept outside the checkpointed layers for every micro-batch the first chunk "
                    "holds (planner/memory.py [en])")
    activation_clamp: Optional[Real] = Field(
        default=None, gt=0,
        description="gated MLP: the gate input clamped to at most this and the linear input to +-this before the "
                    "activation (gpt-oss config.json swiglu_limit 7.0); null: no clamp. Priced on the routed experts "
                    "(the stack's activation_clamp kernel bytes, planner/layers/moe.py)")
    rope_attention_factor: Real = Field(
        default=1.0, gt=0,
        description="factor on RoPE's cos and sin (YaRN's attention factor, 0.1 ln(scaling factor) + 1 unless "
                    "rope_scaling states one); 1: none")
    rope_scaling: Optional[Literal["yarn", "llama3", "linear", "dynamic", "longrope"]] = Field(
        default=None,
        description="the rotary embedding's frequency scaling, as the model's HF config.json names it (rope_scaling.type "
                    "or rope_type; transformers modeling_rope_utils ROPE_INIT_FUNCTIONS); null: none stated (plain "
                    "RoPE). Read where a trainer's option depends on it: Megatron-Core fuses MLA's RoPE only for yarn "
                    "(plan._mla_rope_fusion; the export writes --rope-type rope --no-rope-fusion otherwise), and "
                    "where it must spell the same model (llama3: Megatron --use-rope-scaling, torchtitan's llama3 "
                    "flavors; yarn without MLA: Megatron --position-embedding-type yarn, rope_yarn_params; yarn with MLA: "
                    "--rotary-scaling-factor, --mscale, --mscale-all-dim, rope_yarn_params; linear: "
                    "--rotary-seq-len-interpolation-factor, rope_linear_factor; dynamic, longrope: refused); priced at nothing either way (the rotary tables are computed once: the same kernel "
                    "and bytes)")
    rope_theta: Optional[Real] = Field(
        default=None, gt=0,
        description="the rotary base (config.json rope_theta: Llama 3 500,000, gpt-oss 150,000, DeepSeek-V3 10,000); "
                    "null: not stated. Priced at nothing (the rotary tables are computed once): read where a trainer's "
                    "option must spell the same model (Megatron-LM's --rotary-base, default 10,000)")
    rope_scaling_params: Optional[RopeScalingParams] = Field(
        default=None,
        description="a llama3 rope_scaling's numbers (config.json rope_scaling factor, low_freq_factor, "
                    "high_freq_factor, original_max_position_embeddings); null: not stated (an export that must "
                    "spell them refuses). Only with rope_scaling llama3")
    rope_yarn_params: Optional[YarnScalingParams] = Field(
        default=None,
        description="a yarn rope_scaling's numbers (config.json rope_scaling factor, original_max_position_embeddings, "
                    "beta_fast, beta_slow, truncate; its attention factor is rope_attention_factor); null: not stated "
                    "(an export that must spell them refuses). Only with rope_scaling yarn")
    rope_linear_factor: Optional[Real] = Field(
        default=None, gt=0,
        description="a linear rope_scaling's factor (config.json rope_scaling.factor: every rotary layer's positions "
                    "divided by it, transformers _compute_linear_scaling_rope_parameters); null: not stated (an export "
                    "that must spell it refuses). Only with rope_scaling linear, and only where it applies to every "
                    "rotary layer (Gemma 3 scales its global layers only: its entry leaves it out)")
    moe: Optional[MoESpec] = Field(default=None, description="mixture-of-experts layers (planner/moe.py); null: dense")
    mla: Optional[MLASpec] = Field(default=None, description="multi-head latent attention; null: MHA/GQA from the head counts")
    layer_kinds: dict[str, LayerKindSpec] = Field(
        default_factory=dict,
        description="named kinds of layer (mixer + MLP) that layer_pattern lists (planner/layers/)")
    layer_pattern: Optional[list[str]] = Field(
        default=None, min_length=1,
        description="the kind of each layer, by name from layer_kinds, repeated from the start until num_layers are "
                    "listed (Gemma 3: five sliding, one global); null: every layer the default kind (with moe.first_k_dense "
                    "and moe.layer_freq choosing the MoE layers)")
    mtp_layers: Count = Field(
        default=0, ge=0,
        description="multi-token prediction modules after the last layer (DeepSeek-V3 num_nextn_predict_layers): each a "
                    "projection 2h x h, two RMSNorms and one layer of the last layer's kind, sharing the embedding and "
                    "output head, on the last pipeline stage")
    mtp_layer_pattern: Optional[list[str]] = Field(
        default=None, min_length=1,
        description="the layers each multi-token prediction module runs, in order, by name from layer_kinds (each a "
                    "kind the main layer_pattern uses): a hybrid stack's MTP pattern (Megatron-LM --hybrid-layer-pattern "
                    "'main/*E/*E': one attention and one MoE layer a module; planner/layers/__init__.py); null: one "
                    "layer of the last layer's kind")
    mtp_repeated_layer: Bool = Field(
        default=False,
        description="the multi-token prediction modules are one module run mtp_layers times (Megatron-LM "
                    "--mtp-use-repeated-layer, TransformerConfig.mtp_use_repeated_layer): its weights, gradients and "
                    "optimizer state once, its compute and activations per run")
    training: Optional[TrainingRecipe] = Field(
        default=None, description="the published pre-training recipe: defaults for a planned job (planner/recipe.py)")
    hf_model_type: Optional[str] = Field(
        default=None, pattern=r"^[a-z0-9_]+$",
        description="the implementation family: the model's Hugging Face config.json `model_type` at its top level "
                    "(llama, qwen3_moe, deepseek_v3, gpt_oss, llama4, mixtral, ...; a catalog entry cites its "
                    "config.json). A trainer's start-up rules read it to find the trainer's model code and what that "
                    "code runs (stack_db runs.model_codes: torchtitan's torchtitan/models/<name>/); null: no config.json "
                    "(Megatron-LM's GPT, GPT-3): the model code's capabilities are not checked, listed as assumed "
                    "(startup.model_code_assumed)")
    sources: list[str] = Field(min_length=1)

    @property
    def hidden_dropout_on(self) -> bool:
        """The hidden dropout keeps masks: dropout, at a probability not 0 (hidden_dropout)."""
        return self.dropout and self.hidden_dropout != 0.0

    @property
    def attention_dropout_on(self) -> bool:
        """The attention dropout runs: dropout, at a probability not 0 (attention_dropout)."""
        return self.dropout and self.attention_dropout != 0.0

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        probs = [p for p in (self.hidden_dropout, self.attention_dropout) if p is not None]
        if not self.dropout and any(p > 0 for p in probs):
            raise ValueError("hidden_dropout / attention_dropout above 0 with dropout false: set dropout true")
        if self.dropout and self.hidden_dropout == 0.0 and self.attention_dropout == 0.0:
            raise ValueError("dropout true with hidden_dropout and attention_dropout 0: set dropout false")
        if self.mlp_activation == "squared_relu" and self.gated_mlp:
            raise ValueError("mlp_activation squared_relu is a plain MLP's (Megatron-LM --squared-relu): gated_mlp false")
        if self.mlp_activation == "quick_gelu" and not self.gated_mlp:
            raise ValueError("mlp_activation quick_gelu is a gated MLP's (Megatron-LM --quick-geglu): gated_mlp true")
        if self.tokenizer_vocab_size is not None and self.tokenizer_vocab_size > self.vocab_size:
            raise ValueError(f"tokenizer_vocab_size ({self.tokenizer_vocab_size}) is above vocab_size ({self.vocab_size}): "
                             "tokens without an embedding row")
        kv = self.kv_heads
        if self.num_attention_heads % kv:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({kv})")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); give head_dim explicitly"
            )
        if self.rope_theta is not None and self.position_embedding != "rope":
            raise ValueError(f"rope_theta is a rotary embedding's base (position_embedding is {self.position_embedding})")
        if self.rope_scaling_params is not None and self.rope_scaling != "llama3":
            raise ValueError(f"rope_scaling_params are a llama3 rope_scaling's numbers (rope_scaling is "
                             f"{self.rope_scaling or 'null'})")
        if self.rope_yarn_params is not None and self.rope_scaling != "yarn":
            raise ValueError(f"rope_yarn_params are a yarn rope_scaling's numbers (rope_scaling is "
                             f"{self.rope_scaling or 'null'})")
        if self.rope_linear_factor is not None and self.rope_scaling != "linear":
            raise ValueError(f"rope_linear_factor is a linear rope_scaling's factor (rope_scaling is "
                             f"{self.rope_scaling or 'null'})")
        if self.training is not None and self.training.seq_len is not None and self.training.seq_len > self.max_seq_len:
            raise ValueError(f"training.seq_len ({self.training.seq_len:,}) exceeds max_seq_len ({self.max_seq_len:,}), the "
                             "model's context")
        if self.moe is not None and self.moe.first_k_dense > self.num_layers:
            raise ValueError(f"moe.first_k_dense ({self.moe.first_k_dense}) exceeds num_layers ({self.num_layers})")
        if self.moe is not None and min(self.moe.layer_freq, self.num_layers) > MAX_LAYER_PERIOD:
            # the layers are built as one period of the pattern (layers._build): its length is
            # min(layer_freq, num_layers), each layer of the period an object
            raise ValueError(f"moe.layer_freq ({self.moe.layer_freq:,}) with num_layers ({self.num_layers:,}): the MoE "
                             f"layers repeat every {min(self.moe.layer_freq, self.num_layers):,} layers, more than the "
                             f"{MAX_LAYER_PERIOD:,} the planner builds (a layer_freq of 1 to {MAX_LAYER_PERIOD:,}, or a "
                             "model of fewer layers)")
        if self.mla is not None and self.num_kv_heads not in (None, self.num_attention_heads):
            raise ValueError("mla: keys and values have one head per query head; leave num_kv_heads out")
        if self.layer_pattern is not None:
            unknown = sorted({n for n in self.layer_pattern if n not in self.layer_kinds})
            if unknown:
                raise ValueError(f"layer_pattern names {', '.join(map(repr, unknown))}, not in layer_kinds "
                                 f"({', '.join(sorted(self.layer_kinds)) or 'none given'})")
            if len(self.layer_pattern) > self.num_layers:
                raise ValueError(f"layer_pattern lists {len(self.layer_pattern)} layers, more than num_layers ({self.num_layers})")
            if self.moe is not None and (self.moe.first_k_dense or self.moe.layer_freq != 1):
                raise ValueError("with layer_pattern the pattern says which layers are MoE: leave moe.first_k_dense and "
                                 "moe.layer_freq out")
        elif self.layer_kinds:
            raise ValueError("layer_kinds given without layer_pattern: say which layer is which kind")
        if self.mtp_layer_pattern is not None:
            used = set(self.layer_pattern or ())
            unused = sorted({n for n in self.mtp_layer_pattern if n not in used})
            if unused:
                raise ValueError(f"mtp_layer_pattern names {', '.join(map(repr, unused))}, not a kind layer_pattern uses "
                                 f"({', '.join(sorted(used)) or 'no layer_pattern'}): an MTP module runs layers of the "
                                 "model's own kinds")
        for name, kind in self.layer_kinds.items():
            if isinstance(kind.mixer, MLAAttention) and self.mla is None:
                raise ValueError(f"layer_kinds.{name}: mixer kind mla needs the model's `mla:` shape")
            if isinstance(kind.mlp, MoEMLP) and self.moe is None:
                raise ValueError(f"layer_kinds.{name}: mlp kind moe needs the model's `moe:` block")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def llama3_rope_scaling(self):
        """A llama3 rope_scaling's (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
        (RopeScalingParams.key), "llama3, numbers not stated" without rope_scaling_params; None for any
        other rotary (plain, yarn, linear, ...): what the trainer readers compare with Megatron's
        --use-rope-scaling and torchtitan's llama3 flavors (planner/trainers)."""
        if self.rope_scaling != "llama3":
            return None
        return self.rope_scaling_params.key() if self.rope_scaling_params is not None else "llama3, numbers not stated"

    @property
    def yarn_rope_scaling(self):
        """A yarn rope_scaling's YarnScalingParams.key() plus the attention factor (rope_attention_factor, rounded to
        12 decimals), "yarn, numbers not stated" without rope_yarn_params; None for any other rotary: what the
        Megatron reader compares with --position-embedding-type yarn's flags (planner/trainers/megatron.py)."""
        if self.rope_scaling != "yarn":
            return None
        if self.rope_yarn_params is None:
            return "yarn, numbers not stated"
        return self.rope_yarn_params.key() + (round(float(self.rope_attention_factor), 12),)

    @property
    def mla_yarn_rope_scaling(self):
        """An MLA yarn rope_scaling as Megatron-LM's MLATransformerConfig holds it: YarnScalingParams.key() plus the
        mscale and mscale_all_dim Megatron must be given (not stated: 1 and 0, whose factor on cos and sin is
        transformers' get_mscale(factor)) and the attention factor (rope_attention_factor, rounded to 12 decimals);
        "yarn, numbers not stated" without rope_yarn_params; None without MLA or yarn: what the Megatron reader
        compares with --rotary-scaling-factor, --mscale, --mscale-all-dim (megatron_model.megatron_mla_yarn)."""
        if self.rope_scaling != "yarn" or self.mla is None:
            return None
        p = self.rope_yarn_params
        if p is None:
            return "yarn, numbers not stated"
        m = 1.0 if p.mscale is None else float(p.mscale)
        a = 0.0 if p.mscale_all_dim is None else float(p.mscale_all_dim)
        return p.key() + (m, a, round(float(self.rope_attention_factor), 12))

    @property
    def linear_rope_scaling(self):
        """A linear rope_scaling's factor (a float), "linear, factor not stated" without rope_linear_factor; None
        for any other rotary: what the Megatron reader compares with --rotary-seq-len-interpolation-factor."""
        if self.rope_scaling != "linear":
            return None
        return float(self.rope_linear_factor) if self.rope_linear_factor is not None else "linear, factor not stated"

    @property
    def layer_windows(self) -> Optional[tuple[int, ...]]:
        """Each layer's attention window (keys a query attends to, itself included), 0 for
        full attention: what Megatron's --window-size / --window-attn-skip-freq say (the
        trainer readers compare it). None when a layer's mixer is neither (MLA, chunked,
        state-space, linear attention)."""
        if self.layer_pattern is None:
            return None if self.mla is not None else (0,) * self.num_layers
        out = []
        for i in range(self.num_layers):
            x = self.layer_kinds[self.layer_pattern[i % len(self.layer_pattern)]].mixer
            if x is None and self.mla is None or isinstance(x, GlobalAttention):
                out.append(0)
            elif isinstance(x, SlidingAttention):
                out.append(x.window)
            else:
                return None
        return tuple(out)

    @property
    def layer_mixers(self) -> Optional[str]:
        """Each layer's mixer and MLP kind in order, as one text (layer_mixers_text): what a trainer reader compares
        with the per-layer layers a model provider builds (Megatron-Bridge's Qwen3-Next provider: Megatron-Core's
        linear_attention_freq, planner/trainers/bridge_moe.py). None without layer_pattern (every layer the default
        kind)."""
        if self.layer_pattern is None:
            return None
        return layer_mixers_text([self.layer_kinds[self.layer_pattern[i % len(self.layer_pattern)]]
                                  for i in range(self.num_layers)])

    def tp_split_counts(self) -> list[tuple[str, int]]:
        """What tensor parallelism splits whole in the model's state-space and linear-attention
        mixers, (name, count), each of which tp must divide: Megatron-Core's MambaMixer asserts
        nheads % tp == 0 and ngroups % tp == 0 (megatron/core/ssm/mamba_mixer.py, commit
        d98e8a64); Gated DeltaNet and Mamba split their heads and inner channels the same way."""
        out: dict[tuple[str, int], None] = {}
        for kind in self.layer_kinds.values():
            x = kind.mixer
            if isinstance(x, Mamba2):
                out[("Mamba-2 heads", x.num_heads)] = None
                out[("Mamba-2 groups", x.n_groups)] = None
            elif isinstance(x, GatedDeltaNet):
                out[("Gated DeltaNet key heads", x.num_key_heads)] = None
                out[("Gated DeltaNet value heads", x.num_value_heads)] = None
            elif isinstance(x, Mamba1):
                out[("Mamba inner channels", x.d_inner)] = None
        return list(out)

    @property
    def dhead(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def core_head_dim(self) -> float:
        """The head dimension the attention core runs at: dhead, or for MLA the mean of the
        query/key (nope + rope) and value head dims (QK^T at one, AV at the other)."""
        if self.mla is None:
            return self.dhead
        return (self.mla.qk_head_dim + self.mla.v_head_dim) / 2.0


class Fabric(BaseModel):
    """The cluster network above the node: a full-bisection pod, oversubscribed above it;
    how many NICs (rails) a node has and whether the switches reduce (SHARP)."""

    model_config = Strict
    pod_gpus: Count = Field(gt=0, description="GPUs joined with full bisection bandwidth")
    oversubscription: Real = Field(ge=1.0, description="N in 1:N above the pod")
    rails: Optional[Count] = Field(
        default=None, gt=0,
        description="scale-out NICs per node, one rail each (default: gpus_per_node, one NIC per GPU); network_Gbps "
                    "stays the per-GPU share of the node's NIC rate")
    sharp: Bool = Field(
        default=False,
        description="the switches reduce (InfiniBand SHARP; NCCL's CollNet and NVLS+SHARP algorithms across nodes)")
    sources: list[str] = Field(min_length=1)




class AttentionRate(BaseModel):
    """One attention kernel's measured bf16 rates on this GPU (head dim 128, 2k-16k keys)."""

    model_config = Strict
    fwd_TFLOPS: Real = Field(gt=0, description="forward")
    bwd_TFLOPS: Real = Field(gt=0, description="backward")


class ComputeMeasured(BaseModel):
    """What the GPU's tensor cores reach in practice, for the GEMM time model."""

    model_config = Strict
    sm_count: Count = Field(gt=0, description="streaming multiprocessors (CUs on AMD): the GEMM wave size")
    gemm_bf16_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="best measured dense bf16 GEMM")
    gemm_fp8_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="best measured dense fp8 GEMM")
    gemm_fp4_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="best measured dense NVFP4 GEMM")
    gemm_bf16_K: Optional[Count] = Field(
        default=None, gt=0,
        description="K (the reduction dim) of the shape gemm_bf16_TFLOPS was measured at: on a GPU whose GEMMs write "
                    "their output after the K loop (compute.gemm_epilogue_serialized) the write's share at that K is "
                    "taken out of the figure to give the K loop's rate (compute.gemm_mainloop); null: the figure is "
                    "taken as the K loop's rate")
    gemm_fp8_K: Optional[Count] = Field(default=None, gt=0, description="as gemm_bf16_K, for gemm_fp8_TFLOPS")
    gemm_fp4_K: Optional[Count] = Field(default=None, gt=0, description="as gemm_bf16_K, for gemm_fp4_TFLOPS")
    gemm_measured_hbm_TBps: Optional[Real] = Field(
        default=None, gt=0,
        description="HBM rate (TB/s) of the GPU the gemm_*_TFLOPS figures were measured on, where that is not this "
                    "entry's hbm_TBps (a figure taken from a sibling part); null: this entry's")
    attention_fwd_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="FlashAttention forward, bf16, head dim 128")
    attention_bwd_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="FlashAttention backward, bf16, head dim 128")
    attention_kernels: dict[Literal["cudnn"], AttentionRate] = Field(
        default_factory=dict,
        description="measured rates of the attention kernels other than FlashAttention-2 (whose figures are "
                    "attention_fwd/bwd_TFLOPS), by kernel (compute.ATTENTION_KERNELS); a kernel not listed: "
                    "compute.attention_rates' default ratio to the GEMM plateau")
    sources: list[str] = Field(min_length=1)


class Hardware(BaseModel):
    """One accelerator and its node, with a default cluster fabric."""

    model_config = Strict
    name: str
    description: str = ""
    hbm_GB: Real = Field(gt=0, description="HBM capacity, vendor GB (1e9 bytes): the datasheet figure")
    hbm_visible_GiB: Optional[Real] = Field(
        default=None, gt=0,
        description="HBM capacity the device reports to CUDA (torch.cuda.get_device_properties().total_memory = "
                    "cudaDeviceProp.totalGlobalMem; torchtitan logs it as 'CUDA capacity: ... with X GiB memory' and "
                    "its memory percentages against it), GiB (2^30 bytes), as measured on this GPU: what the caching "
                    "allocator and everything outside it share, so the memory gate uses it (hbm_bytes). The datasheet's "
                    "'80 GB' HBM3 is 80 GiB of DRAM of which CUDA reports ~79.1 GiB, 6% more than 80e9 bytes. "
                    "null: not measured (the gate uses hbm_GB)")
    hbm_visible_measured_on: Optional[str] = Field(
        default=None,
        description="where hbm_visible_GiB was measured on another catalog GPU with the same memory (the same "
                    "package and HBM stacks, e.g. h800-sxm takes h100-sxm's): that entry's name, so a verdict says "
                    "whose measurement it used; null: measured on this GPU")
    hbm_TBps: Real = Field(gt=0, description="HBM bandwidth, TB/s (1e12 B/s)")
    bf16_TFLOPS: Real = Field(gt=0, description="dense BF16 tensor peak")
    fp8_TFLOPS: Optional[Real] = Field(default=None, gt=0, description="dense FP8 tensor peak; null if unsupported")
    mxfp8_TFLOPS: Optional[Real] = Field(
        default=None, gt=0, description="dense MXFP8 (1x32 blocks, e8m0 scales applied by the tensor cores) peak; "
                                        "null if the tensor cores take no block scales (Hopper and older)")
    fp4_TFLOPS: Optional[Real] = Field(
        default=None, gt=0, description="dense NVFP4 (e2m1, 1x16 blocks of e4m3 scales) tensor peak; null if the "
                                        "GPU has no FP4 tensor cores (Hopper and older)")
    fp32_TFLOPS: Optional[Real] = Field(
        default=None, gt=0,
        description="dense FP32 peak of the non-tensor ALUs (NVIDIA's CUDA cores, AMD's vector units), the datasheet's "
                    "'FP32' line: the rate of kernels that run no matrix instructions (Mamba's selective scan: "
                    "layers/mamba.py SCAN_ROOFLINE); null: the datasheet does not give it (the scan then falls back "
                    "to the attention kernel's rate, optimistic)")
    compute_capability: Optional[str] = Field(
        default=None, pattern=r"^[0-9]+\.[0-9]+$",
        description="CUDA compute capability, major.minor (NVIDIA's CUDA GPUs table): the recipes whose kernels need one "
                    "(precisions.RECIPE_COMPUTE_CAPABILITY: blockwise fp8 is Hopper's); null: not known (not checked)")
    tdp_W: Real = Field(gt=0, description="rated (maximum) board power, W: the catalog's compute figures hold at it")
    power_limit_W: Optional[Real] = Field(
        default=None, gt=0,
        description="board power limit the fleet runs at when below tdp_W (e.g. 500 W on Meta's Grand Teton H100s); "
                    "default: tdp_W. Lowers the sustained tensor-core rate (power.power_rate_fraction)")
    gpus_per_node: Count = Field(gt=0)
    nvlink_domain: Count = Field(gt=0, description="GPUs that share the scale-up (NVLink/xGMI) fabric")
    nvlink_domain_allocation: Literal["in_order", "segments"] = Field(
        default="in_order",
        description="how a job larger than one NVLink domain is laid on the domains (comm.domain_in_use): "
                    "in_order: ranks fill whole domains in order; segments: the scheduler gives the job equal "
                    "segments of whole nodes, each inside one domain, of the most nodes <= nvlink_domain / "
                    "gpus_per_node that divides the job's node count (SLURM --segment, as NVIDIA's Megatron-Bridge "
                    "launcher requests on GB200: scripts/performance/utils/executors.py slurm_executor)")
    nvlink_GBps: Real = Field(gt=0, description="scale-up bandwidth per GPU per direction, GB/s")
    network_Gbps: Real = Field(gt=0, description="scale-out NIC line rate per GPU, Gb/s")
    nvls: Bool = Field(default=False, description="NVLink SHARP (in-switch reduction) for all-reduce inside the NVLink domain")
    pcie_GBps: Optional[Real] = Field(
        default=None, gt=0,
        description="the GPU's host link, GB/s per direction (PCIe Gen5 x16: 64): what CPU offload's copies between "
                    "the GPU and the host move over (planner/offload.py); null: not given (a job that offloads is refused)")
    host_memory_GBps: Optional[Real] = Field(
        default=None, gt=0,
        description="host (CPU) DRAM bandwidth of one node, GB/s, the datasheet peak (channels x MT/s x 8 B x sockets; "
                    "DGX H100: 2 x 8 DDR5 channels at 4,400 MT/s with 2 DIMMs a channel, 563.2): what CPU offload's "
                    "host Adam streams its partition at (planner/offload.py [cpu-adam]); null: not given (a job that "
                    "offloads is refused)")
    host_memory_GB: Optional[Real] = Field(
        default=None, gt=0,
        description="host (CPU) memory of one node, vendor GB (1e9 bytes), from the system's datasheet (DGX H100: 2 TB): "
                    "the gate of CPU offload's host bytes (planner/offload.py); null: not given (the host bytes are "
                    "reported without a gate)")
    nvls_algbw_GBps: Optional[Real] = Field(
        default=None, gt=0,
        description="measured NVLS all-reduce algbw (size / time, GB/s) inside one NVLink domain at large sizes; "
                    "default: comm.py NVLS_ALGBW_PER_RING_BUSBW x the achievable NVLink ring bandwidth (H100 measurement)")
    fabric: Fabric
    compute: Optional[ComputeMeasured] = Field(default=None, description="measured GEMM throughput; default: see compute.py")
    torch_cublas_workspace_MiB: Optional[Real] = Field(
        default=None, ge=0,
        description="PyTorch's default cuBLAS workspace per (handle, stream) on this GPU (aten/src/ATen/cuda/"
                    "CublasHandlePool.cpp parseChosenWorkspaceSize), allocated through the caching allocator; null: "
                    "not known (counted 0)")
    te_workspace_MiB: Optional[Real] = Field(
        default=None, ge=0,
        description="Transformer Engine's cuBLAS workspace on this GPU (cpp_extensions/gemm.py "
                    "get_cublas_workspace_size_bytes), one per device; null: not known (counted 0)")
    fp8_gemm_tn_only: Optional[Bool] = Field(
        default=None,
        description="the GPU's fp8 GEMMs take only the TN layout (sm 8.9, 9.0, 12.x), so Transformer Engine keeps a "
                    "transposed copy of an fp8 tensor for the backward's GEMMs (transformer_engine/pytorch/utils.py "
                    "is_non_tn_fp8_gemm_supported: sm 10.x and >= 13 run the other layouts); null: no fp8 (counted false)")
    uncertain: list[str] = Field(default_factory=list)
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _measured_below_peak(self) -> "Hardware":
        """A measured rate above the file's own peak would give an MFU above 100% (issue 12):
        the peaks and the measurements must agree."""
        c = self.compute
        if c is None:
            return self
        checks = [("compute.gemm_bf16_TFLOPS", c.gemm_bf16_TFLOPS, "bf16_TFLOPS", self.bf16_TFLOPS),
                  ("compute.attention_fwd_TFLOPS", c.attention_fwd_TFLOPS, "bf16_TFLOPS", self.bf16_TFLOPS),
                  ("compute.attention_bwd_TFLOPS", c.attention_bwd_TFLOPS, "bf16_TFLOPS", self.bf16_TFLOPS),
                  *((f"compute.attention_kernels.{k}.{d}", getattr(r, d), "bf16_TFLOPS", self.bf16_TFLOPS)
                    for k, r in c.attention_kernels.items() for d in ("fwd_TFLOPS", "bwd_TFLOPS")),
                  ("compute.gemm_fp8_TFLOPS", c.gemm_fp8_TFLOPS, "fp8_TFLOPS", self.fp8_TFLOPS),
                  ("compute.gemm_fp4_TFLOPS", c.gemm_fp4_TFLOPS, "fp4_TFLOPS", self.fp4_TFLOPS)]
        for field, measured, peak_field, peak in checks:
            if measured is None:
                continue
            if peak is None:
                raise ValueError(f"{field} ({measured:g}) is given but {peak_field} is not; give the dense peak too")
            if measured > peak:
                raise ValueError(f"{field} ({measured:g}) is above the dense peak {peak_field} ({peak:g}): a measured "
                                 f"rate cannot exceed the peak (check for a sparsity figure, or the units)")
        # the K loop's rate backed out of a figure at its K (compute.gemm_mainloop [5a]: less the bf16 output's
        # write, 2 B an element at HBM x HBM_EFFICIENCY) must be a rate at or below the peak too
        from .efficiencies import HBM_EFFICIENCY

        hbm = (c.gemm_measured_hbm_TBps or self.hbm_TBps) * HBM_EFFICIENCY  # TB/s
        for name, measured, k, peak in (("bf16", c.gemm_bf16_TFLOPS, c.gemm_bf16_K, self.bf16_TFLOPS),
                                        ("fp8", c.gemm_fp8_TFLOPS, c.gemm_fp8_K, self.fp8_TFLOPS),
                                        ("fp4", c.gemm_fp4_TFLOPS, c.gemm_fp4_K, self.fp4_TFLOPS)):
            if k is None:
                continue
            if measured is None:
                raise ValueError(f"compute.gemm_{name}_K ({k}) is given without compute.gemm_{name}_TFLOPS: it is the K "
                                 f"of that figure's shape")
            inv = 1.0 / measured - 1.0 / (k * hbm)  # 1 / TFLOP/s: 2 B / (2 K x HBM)
            if inv <= 0.0 or 1.0 / inv > peak:
                raise ValueError(f"compute.gemm_{name}_TFLOPS ({measured:g}) at K {k} leaves a K-loop rate above the "
                                 f"dense peak ({peak:g}) once its output write at {hbm:g} TB/s is taken out "
                                 f"(compute.gemm_mainloop): check gemm_{name}_K, the figure or hbm_TBps")
        return self

    # --- SI views -------------------------------------------------------------------
    @property
    def hbm_bytes(self) -> float:
        """The capacity the memory gate fills (memory.capacity): the device-reported bytes where the
        entry gives a measurement (hbm_visible_GiB), else the datasheet's hbm_GB x 1e9."""
        if self.hbm_visible_GiB is not None:
            return self.hbm_visible_GiB * 2.0**30
        return self.hbm_datasheet_bytes

    @property
    def hbm_datasheet_bytes(self) -> float:
        return self.hbm_GB * 1e9

    @property
    def hbm_capacity_source(self) -> str:
        """Which capacity hbm_bytes is: 'measured' (hbm_visible_GiB, as CUDA reports it), 'measured on X'
        (hbm_visible_GiB taken from catalog GPU X with the same memory: hbm_visible_measured_on) or
        'datasheet' (hbm_GB)."""
        if self.hbm_visible_GiB is None:
            return "datasheet"
        return "measured" if self.hbm_visible_measured_on is None else f"measured on {self.hbm_visible_measured_on}"

    @property
    def hbm_bandwidth(self) -> float:
        return self.hbm_TBps * 1e12

    @property
    def nvlink_bandwidth(self) -> float:
        return self.nvlink_GBps * 1e9

    @property
    def network_bandwidth(self) -> float:
        return self.network_Gbps * 1e9 / 8

    @property
    def capability(self) -> Optional[tuple[int, int]]:
        """compute_capability as (major, minor); None where the entry does not give it."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    def precisions(self) -> list[str]:
        """The tensor-core rates this GPU has: bf16 always, fp8, mxfp8 and nvfp4 where the entry gives a peak."""
        return ["bf16"] + [p for p, f in (("fp8", "fp8_TFLOPS"), ("mxfp8", "mxfp8_TFLOPS"), ("nvfp4", "fp4_TFLOPS"))
                           if getattr(self, f) is not None]

    def peak_flops(self, precision: str, where: str = "") -> float:
        """Dense tensor-core FLOP/s of `precision` (bf16 | fp8 | mxfp8 | nvfp4); an error naming
        this GPU's precisions when it has no such tensor cores (Hopper: no MXFP8, no FP4)."""
        field = {"bf16": "bf16_TFLOPS", "fp8": "fp8_TFLOPS", "mxfp8": "mxfp8_TFLOPS", "nvfp4": "fp4_TFLOPS"}.get(precision)
        value = getattr(self, field) if field else None
        if value is None:
            from .errors import PlannerError

            raise PlannerError(f"{where}hardware {self.name!r} has no {precision} tensor-core peak",
                               f"valid on {self.name}: {', '.join(self.precisions())}; or another --hardware")
        return value * 1e12



# ------------------------------------------------------------------------------ stacks
# The software stack a job runs on (stack_db/*.yaml): what it fuses, saves, overlaps and
# reports, as data the cost models read (step.py, memory.py). Bytes per element count a
# read and a write of every tensor a kernel touches (16-bit activations: 2 B an element).
ACTIVATION_TENSORS = (
    "input",  # the layer input = first norm input, 2h (replicated across TP unless SP)
    "norm1_out",  # attention input (first norm output), 2h (replicated unless SP)
    "q", "k", "v",  # projections, 2ad / 2kd / 2kd (split across TP)
    "attn_out",  # attention core output = input of the output projection, 2ad (split)
    "norm2_in",  # residual after attention = second norm input, 2h (replicated unless SP)
    "norm2_out",  # MLP input, 2h (replicated unless SP)
    "gate", "up",  # MLP first-linear outputs, 2f each (gated); plain MLP: "up" only (split)
    "act_out",  # activation output = input of the down projection, 2f (split)
    "mlp_out",  # down-projection output, 2h (replicated unless SP); Megatron does not keep it
    "dropout_masks",  # 1 B per hidden element, after attention and after the MLP (models with dropout)
    "scores",  # eager attention only: softmax output (and its dropout), per token per key
)
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")
ActivationTensor = Literal[
    "input", "norm1_out", "q", "k", "v", "attn_out", "norm2_in", "norm2_out", "gate", "up", "act_out",
    "mlp_out", "dropout_masks", "scores"]
Projection = Literal["q", "k", "v", "o", "gate", "up", "down"]
# tensors of a layer kind's own table (planner/layers/) that a selective policy may re-run
# (every other kind tensor is kept by every policy but full recompute): the MLA latents' norm
# outputs (the up-projections' inputs), the routed and shared experts' activation outputs (the
# down projections' inputs) and the routed experts' outputs before the combine
KindTensor = Literal["mla_latent_norm_out", "moe_expert_act_out", "moe_shared_act_out", "moe_expert_out"]
# tensors a stack may save at another width than bf16 when it trains in fp8 (memory.fp8_saved_bytes)
Fp8SavedTensor = Literal[
    "norm1_out", "attn_out", "norm2_out", "gate", "up", "act_out",
    "moe_expert_in", "moe_expert_gate_up", "moe_shared_gate_up", "moe_expert_act_out", "moe_shared_act_out"]


class KernelBytes(BaseModel):
    """Bytes moved (read + write, HBM) per element by the memory-bound kernels of one layer,
    forward and backward, and by the loss; plus what the kernels save beyond the standard
    activation set (memory.STANDARD_TENSORS)."""

    model_config = Strict
    norm: Real = Field(ge=0, description="forward, per element of the norm's [tokens, h] input, each of the 2 norms")
    norm_bwd: Real = Field(ge=0, description="backward, likewise")
    residual: Real = Field(ge=0, description="forward, per hidden element, each of the 2 residual adds")
    residual_bwd: Real = Field(ge=0, description="backward, likewise (where two gradients meet)")
    rope: Real = Field(ge=0, description="forward, per element of Q and of K (rotary models)")
    rope_bwd: Real = Field(ge=0, description="backward, likewise")
    mlp_activation_gated: Real = Field(ge=0, description="forward, gated MLP (SwiGLU), per element of the activation output (width f)")
    mlp_activation_gated_bwd: Real = Field(ge=0, description="backward, likewise")
    mlp_activation_plain: Real = Field(ge=0, description="forward, plain MLP (GeLU), per element of the activation output (width f)")
    mlp_activation_plain_bwd: Real = Field(ge=0, description="backward, likewise")
    dropout: Real = Field(ge=0, description="forward, per hidden element, each of the 2 dropouts (models with dropout)")
    dropout_bwd: Real = Field(ge=0, description="backward, likewise")
    bias: Real = Field(ge=0, description="per output element of a biased linear when the bias add is a separate kernel (0 = in the GEMM epilogue), forward and backward")
    rope_scaled: Optional[Real] = Field(
        default=None, ge=0,
        description="forward, per element of Q and of K, for a model whose rotary cos/sin carry a factor "
                    "(rope_attention_factor != 1); null: rope")
    rope_scaled_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise; null: rope_bwd")
    activation_clamp: Real = Field(
        default=0.0, ge=0,
        description="forward, per element of a routed expert's gate+up output (width 2f) of a model with "
                    "activation_clamp, where the clamp runs as kernels of its own (0: inside the activation kernel)")
    activation_clamp_bwd: Real = Field(default=0.0, ge=0, description="backward, likewise")
    activation_clamp_saved: Real = Field(
        default=0.0, ge=0,
        description="bytes per element of a routed expert's gate+up output (width 2f) of a model with activation_clamp "
                    "that the clamp, run as ops of its own, keeps for the backward beyond the activation's saved input "
                    "(the activation tensors' gate/up), where the activation is not re-run (recompute_modules moe_act): "
                    "Megatron-Core's clamps save their inputs, views of the fc1 output, while the fused activation saves "
                    "the clamped copy (0: the clamp inside the activation kernel)")
    activation_clamp_unfused_saved: Real = Field(
        default=0.0, ge=0,
        description="likewise where the job turns the bias-activation fusion off: the clamps keep the fc1 output (the "
                    "table's gate/up) and the unfused activation saves the clamped gate half, a new tensor, where "
                    "without a clamp it saves a view of the fc1 output")
    expert_bias: Real = Field(
        default=0.0, ge=0,
        description="forward, per element of a routed expert's output row (width h) of a model with linear biases, "
                    "where the output bias is applied outside the grouped GEMM (0: in its epilogue)")
    expert_bias_bwd: Real = Field(default=0.0, ge=0, description="backward, likewise")
    score_softmax: Optional[Real] = Field(
        default=None, ge=0,
        description="eager core attention (attention: eager), forward: the scale-mask-softmax kernel's bytes per element "
                    "of the [micro-batch x heads / tp, s, s] score matrix, averaged over the whole matrix (a causal kernel "
                    "that reads only the unmasked triangle counts half its reads); null: the stack describes no eager core "
                    "attention (a job with attention eager is refused on it)")
    score_softmax_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise")
    score_softmax_max_keys: Optional[Int] = Field(
        default=None, ge=1,
        description="the longest key length (sequence) the fused softmax kernel takes; beyond it the stack runs its "
                    "unfused softmax (score_softmax_unfused); null: the fused kernel at every length")
    score_softmax_causal_max_keys: Optional[Int] = Field(
        default=None, ge=1,
        description="the longest key length the causal fused kernel itself takes where it is below score_softmax_max_keys "
                    "(the gate that hands it the scores): between the two a causal eager job with the fusion on stops at "
                    "its first forward (the kernel's assert; plan.fused_softmax_assert warns, the planner prices the fused "
                    "kernel); null: the gate's limit")
    score_softmax_unfused: Optional[Real] = Field(
        default=None, ge=0,
        description="forward, bytes per score element of the unfused softmax the stack runs beyond score_softmax_max_keys")
    score_softmax_unfused_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise")
    score_softmax_unfused_16bit: Optional[Real] = Field(
        default=None, ge=0,
        description="forward, bytes per score element of that unfused softmax where the job's attention_softmax_in_fp32 "
                    "is false (no fp32 casts, no query-key layer scaling multiply: the mask and the softmax in the "
                    "16-bit input dtype); null: score_softmax_unfused (the stack prices the fp32 path either way)")
    score_softmax_unfused_16bit_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise")
    score_dropout: Optional[Real] = Field(
        default=None, ge=0,
        description="eager core attention, forward: the attention dropout's bytes per score element (models with dropout)")
    score_dropout_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise")
    mlp_activation_gated_unfused: Optional[Real] = Field(
        default=None, ge=0,
        description="forward, gated MLP (SwiGLU), per element of the activation output (width f), where the job turns the "
                    "stack's fused bias-activation kernel off (Job bias_activation_fusion false: Megatron "
                    "--no-bias-swiglu-fusion): the activation and the product as kernels of their own; null: the stack "
                    "has no such switch")
    mlp_activation_gated_unfused_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise")
    mlp_activation_gated_unfused_saved: Optional[Real] = Field(
        default=None, ge=0,
        description="bytes per element of the activation output (width f) the unfused gated activation saves for the "
                    "backward beyond the fused kernel's (its input): the product's two factors, new f-wide tensors")
    expert_probs_unfused: Optional[Real] = Field(
        default=None, ge=0,
        description="forward, per element of a routed expert row's activation output (width f_e / etp), where the job "
                    "turns the fused bias-activation kernel off: the routing probability multiplied in as a kernel of "
                    "its own (the fused kernel takes it); null: no such switch")
    expert_probs_unfused_bwd: Optional[Real] = Field(default=None, ge=0, description="backward, likewise")
    expert_probs_unfused_saved: Optional[Real] = Field(
        default=None, ge=0, description="bytes per element of that activation output the probability multiply keeps for "
                                        "the probability's gradient (the activation output itself)")
    bias_unfused: Optional[Real] = Field(
        default=None, ge=0,
        description="forward, per output element of a biased linear whose bias add the job moves out of the stack's fused "
                    "kernel (Job bias_activation_fusion / bias_dropout_fusion false): the add as a kernel of its own (its "
                    "backward, the bias gradient's reduction over the tokens, runs either way); null: no such switch")
    wgrad_unfused: Optional[Real] = Field(
        default=None, ge=0,
        description="bytes per parameter of the weight gradient a linear's weight-gradient GEMM writes as a tensor of its "
                    "own where the job turns the stack's fused gradient accumulation off (Job gradient_accumulation_fusion "
                    "false); a separate kernel then adds it into the main gradient (read it, read and write the main "
                    "gradient: bytes_per_param.gradients each); null: no such switch")
    loss_per_logit: Real = Field(ge=0, description="cross-entropy forward + backward, bytes per logit (token x vocab / tp)")
    loss_saved_per_logit: Real = Field(ge=0, description="bytes per logit the loss holds at its peak, the start of its backward (bf16 logits, fp32 softmax or log-softmax, their gradients)")
    loss_transient_per_logit: Real = Field(
        ge=0, description="the part of loss_saved_per_logit that is a transient of the loss's backward (its gradients, a "
                          "cast), live for one micro-batch's loss at a time; the rest is what the loss saves until its "
                          "backward, held once per micro-batch whose loss is in flight (memory.py [lt])")
    loss_pool_per_logit: Real = Field(
        default=0.0, ge=0,
        description="bytes per logit freed before the loss's backward peak that the caching allocator cannot hand to it "
                    "(a freed block smaller than the new request): reserved, not allocated; the training loop's logits "
                    "(each of its 1 + D multi-token-prediction blocks), freed by the loop: none with PP where the "
                    "pipeline runtime keeps them (memory.pipeline_keeps_logits, memory.py [lp])")
    loss_saved_input_per_logit: Real = Field(
        default=0.0, ge=0,
        description="the part of what the loss saves to its backward (loss_saved_per_logit less loss_transient_per_logit) "
                    "that is its input itself, the bf16 logits tensor, saved by reference: with PP, where the runtime "
                    "keeps that same tensor (memory.pipeline_keeps_logits), counted once (memory.py [lp])")
    norm_saved_extra: Real = Field(ge=0, description="bytes per hidden element each norm saves beyond its bf16 input (eager RMSNorm: an fp32 copy and the normalised output)")
    loss_parallel_saved_per_logit: Optional[Real] = Field(
        default=None, ge=0,
        description="with TP, bytes per logit (token x vocab / tp) the stack's vocab-parallel loss holds at the start of "
                    "its backward (torchtitan: DTensor loss_parallel); null: loss_saved_per_logit at every TP degree")
    loss_parallel_transient_per_logit: Optional[Real] = Field(
        default=None, ge=0,
        description="with TP, the part of loss_parallel_saved_per_logit that is a transient of one micro-batch's loss "
                    "backward (memory.py [lt]); null: loss_transient_per_logit at every TP degree")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _eager_core_complete(self) -> "KernelBytes":
        """The eager core's figures come together: the softmax's and the dropout's each way, and the
        unfused softmax's wherever the fused kernel has a key limit (compute.eager_core_terms reads them all)."""
        core = [self.score_softmax, self.score_softmax_bwd, self.score_dropout, self.score_dropout_bwd]
        if any(v is not None for v in core) and any(v is None for v in core):
            raise ValueError("score_softmax, score_softmax_bwd, score_dropout and score_dropout_bwd go together")
        unfused = [self.score_softmax_unfused, self.score_softmax_unfused_bwd]
        if self.score_softmax_max_keys is not None and (core[0] is None or any(v is None for v in unfused)):
            raise ValueError("score_softmax_max_keys needs score_softmax and score_softmax_unfused(_bwd): what runs beyond it")
        half = [self.score_softmax_unfused_16bit, self.score_softmax_unfused_16bit_bwd]
        if any(v is not None for v in half) and (any(v is None for v in half) or any(v is None for v in unfused)):
            raise ValueError("score_softmax_unfused_16bit(_bwd) go together, beside score_softmax_unfused(_bwd)")
        if self.score_softmax_causal_max_keys is not None and not (
                self.score_softmax_max_keys is not None and self.score_softmax_causal_max_keys < self.score_softmax_max_keys):
            raise ValueError("score_softmax_causal_max_keys is the causal kernel's limit below score_softmax_max_keys: "
                             "set both, the first the smaller (else leave it out)")
        # the loss's transient is a part of what it holds at its backward's peak (memory.py [lt])
        if self.loss_transient_per_logit > self.loss_saved_per_logit:
            raise ValueError("loss_transient_per_logit is a part of loss_saved_per_logit: it cannot exceed it")
        lp = self.loss_saved_per_logit if self.loss_parallel_saved_per_logit is None else self.loss_parallel_saved_per_logit
        lt = (self.loss_transient_per_logit if self.loss_parallel_transient_per_logit is None
              else self.loss_parallel_transient_per_logit)
        if lt > lp:
            raise ValueError("loss_parallel_transient_per_logit (or loss_transient_per_logit where it is null) is a part of "
                             "loss_parallel_saved_per_logit (or loss_saved_per_logit): it cannot exceed it")
        if self.loss_saved_input_per_logit > min(self.loss_saved_per_logit - self.loss_transient_per_logit, lp - lt):
            raise ValueError("loss_saved_input_per_logit is a part of what the loss saves (loss_saved_per_logit less "
                             "loss_transient_per_logit, and their loss_parallel figures): it cannot exceed it")
        return self


class SelectiveRecompute(BaseModel):
    """What the stack's selective activation recomputation keeps and re-runs."""

    model_config = Strict
    description: str
    keeps: list[ActivationTensor] = Field(description="activation tensors kept per layer; the rest are recomputed")
    recompute_attention_core: Bool = Field(description="re-runs the attention core (QK^T, softmax, AV) forward")
    recompute_projections: list[Projection] = Field(default_factory=list, description="linears whose forward is re-run")
    recompute_elementwise: Bool = Field(description="re-runs the norms, rotary, activation and residual adds")
    recompute_tp_collectives: Real = Field(ge=0, description="TP collectives (forward all-gathers / all-reduces) re-run per layer")
    ungrouped_moe_act: Bool = Field(
        default=False, description="set from a job only (planner/recompute_modules.py apply_modules, never in stack_db): "
                                   "its recompute_modules name moe_act while its experts run without moe_grouped_gemm, "
                                   "which Megatron-Core refuses under selective recompute (transformer_config.py @d98e8a64 "
                                   "l. 1964-1967; start-up rule MEGATRON_MOE_ACT_GROUPED_GEMM)")
    recomputes: list[KindTensor] = Field(
        default_factory=list,
        description="tensors of the layer kinds' own tables (MLA, MoE) the policy re-runs instead of keeping; the others "
                    "are kept (planner/layers/ tensors())")
    recompute_norm_outputs: list[Literal["mla_input", "moe_pre_mlp"]] = Field(
        default_factory=list,
        description="norms run as modules of their own whose outputs the policy discards and re-runs (the other norms "
                    "are fused into the next linear, which keeps its input): the input norm of an MLA layer, the pre-MLP "
                    "norm of an MoE layer (Megatron-Core --recompute-modules layernorm, planner/recompute_modules.py)")
    recompute_blocks: list[Literal["mlp", "moe", "shared_experts"]] = Field(
        default_factory=list,
        description="whole blocks the policy checkpoints (tensor_parallel.checkpoint / te_checkpoint): it keeps the "
                    "block's input, none of the tensors inside, and re-runs the block's forward (its GEMMs, kernels and "
                    "the collectives inside) before the block's backward: a dense layer's MLP (mlp), an MoE layer's "
                    "whole MoE block with its router, permutation, dispatch and combine (moe), its shared experts "
                    "(shared_experts) (Megatron-Core --recompute-modules, planner/recompute_modules.py block_drops)")
    saves_tp_partials: Bool = Field(
        default=False,
        description="under TP the policy also keeps each reduce-scatter's output (2h/t per token for each TP-split block) "
                    "and the row-parallel MLP output it keeps is the full-length partial sum (2h, not /t): torchtitan's "
                    "save list holds _c10d_functional.reduce_scatter_tensor")
    expert_gemms_kept: Literal["always", "compiled", "never"] = Field(
        default="always",
        description="when the policy keeps the routed experts' grouped-GEMM outputs (moe_expert_gate_up, "
                    "moe_expert_act_out) and does not re-run those GEMMs: always (their keeps and recomputes as the "
                    "other fields say), only under torch.compile (plan.compile): torchtitan's save lists hold "
                    "inductor_compiled_code, which keeps the compiled _run_experts_grouped_mm's outputs, but not "
                    "aten._grouped_mm, so without compile the selective policy keeps neither tensor (one layer's "
                    "worth joins the recompute buffer) and the backward's recompute re-runs the experts' forward "
                    "grouped GEMMs (memory.py [gmm], step.py layer_times), or never: torchtitan 0.3, whose save "
                    "list (torch 2.14.0's compute-intensive ops and its own) has no aten._grouped_mm and whose "
                    "compile traces the whole checkpointed block, the policy tagging the traced op alike "
                    "(memory.py [gmm3]): neither tensor kept and the GEMMs re-run, compiled or not")
    exchange_kept: Literal["always", "compiled"] = Field(
        default="always",
        description="when the policy keeps the standard all-to-all dispatcher's token exchange outputs (moe_expert_in, "
                    "moe_expert_out) and does not re-run the exchange, on the moe_dispatcher alltoall plans of a model "
                    "code whose save list holds the all-to-all (ModelCode.sac_saves_all_to_all): always, or only where "
                    "the block is compiled (plan.compile, ModelCode.compiles_blocks): torchtitan 0.3's save list holds "
                    "_c10d_functional.all_to_all_single, which its dispatcher runs only when compiling, while eager it "
                    "exchanges through spmd_types' autograd function (c10d all_to_all and a cat, on no save list), so "
                    "eager the policy keeps neither output (one layer's worth joins the recompute buffer) and the "
                    "backward's recompute re-runs the forward exchange (memory.py [xk], exchange_reruns; step.py "
                    "ep_comm)")
    tp_collectives_kept: Literal["always", "compiled"] = Field(
        default="always",
        description="when a policy that saves TP partials (saves_tp_partials) keeps the reduce-scatter outputs and "
                    "re-runs only recompute_tp_collectives TP collectives a layer: always, or only where the block is "
                    "compiled (plan.compile, ModelCode.compiles_blocks): torchtitan 0.3's save list holds "
                    "_c10d_functional.reduce_scatter_tensor, but eager on the default spmd_types backend the TP "
                    "reduce-scatters / all-gathers are spmd_types autograd functions over c10d collectives, on no save "
                    "list, so eager the policy keeps neither reduce-scatter output (memory.tp_partials) and the "
                    "backward's recompute re-runs each re-run all-gather's reduce-scatter too: 2 x "
                    "recompute_tp_collectives (memory.py [tk], tp_collectives_rerun; step.py tp_comm)")
    sources: list[str] = Field(min_length=1)


class OverlapSpec(BaseModel):
    """Which communication the stack overlaps with compute, and how much of it stays exposed."""

    model_config = Strict
    dp_comm_overlap_supported: Bool = Field(description="gradient reduction during the backward pass and parameter all-gather "
                                                        "during the forward (DDP/ZeRO; FSDP always prefetches)")
    dp_comm_overlap_with_pp: Bool = Field(
        default=True, description="the DP overlap (a job's dp_comm_overlap) runs with pp > 1 too; false: the stack's "
                                  "pipeline runtime turns it off (DeepSpeed's engine sets overlap_comm False for a "
                                  "PipelineModule), so at pp > 1 the plan's dp_comm_overlap is priced and shown off "
                                  "(plan.dp_overlap: memory's IPG buffers, step's exposed DP time) and a job that asks "
                                  "for it gets a warning")
    dp_param_gather_overlap_supported: Bool = Field(
        default=True,
        description="the ZeRO-1 / ZeRO-2 modes' once-a-step all-gather of the updated 16-bit weights can hide behind "
                    "the next forward under the DP overlap (Megatron's --overlap-param-gather, a job's "
                    "dp_param_gather_overlap); false: the stack gathers synchronously at the end of the optimizer "
                    "step whatever its DP overlap moves (DeepSpeed's overlap_comm overlaps only the gradient "
                    "reduction: stage_1_and_2.py step's all_gather_dp_groups, step.py [40]), so the gather is priced "
                    "exposed whole and a job's dp_param_gather_overlap true is refused")
    tp_comm_overlap_supported: Bool = Field(description="TP collectives decomposed and overlapped with their GEMMs "
                                                        "(Megatron --tp-comm-overlap, torchtitan async TP)")
    tp_comm_overlap_needs_compile: Bool = Field(default=False, description="TP overlap only with torch.compile (torchtitan async TP)")
    tp_comm_overlap_off_with_mla: Optional[str] = Field(
        default=None, pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="the date (YYYY-MM-DD) since which the stack turns the TP overlap off for a model with multi-head "
                    "latent attention (`mla:`): Megatron-LM's TELinear sets the model's shared TransformerConfig "
                    "tp_comm_overlap False on an MLA projection's userbuffer name, so a job's tp_comm_overlap is priced "
                    "off (plan.tp_overlap; its userbuffers still allocated) unless its trainer_date is older; fit "
                    "searches no overlapped twin (space.variant_choices); null: the overlap runs with MLA")
    ep_comm_overlap_supported: Bool = Field(
        default=False, description="MoE all-to-alls of one micro-batch hidden behind another's compute (Megatron-Core "
                                   "--overlap-moe-expert-parallel-comm, the combined 1F1B schedule; planner/moe.py)")
    pp_p2p_overlapped: Literal["never", "interleaved", "always"] = Field(
        description="pipeline send/recv overlapped with compute: never (blocking), with the interleaved schedule only "
                    "(Megatron overlap_p2p_comm), or always")
    pp_p2p_overlap_switch: Optional[str] = Field(
        default=None, description="the stack's option that turns the pipeline p2p overlap off (Megatron-LM "
                                  "--no-overlap-p2p-communication): a job's pp_p2p_overlap false prices the p2p blocking "
                                  "(pp_p2p_overlapped never); null: the stack has none, and a job's pp_p2p_overlap is refused")
    pp_p2p_warmup_flush_blocking: Bool = Field(
        default=False,
        description="with the interleaved schedule's p2p overlapped, its warm-up forwards' and flush backwards' send/recv "
                    "are still waited on (Megatron-LM without --overlap-p2p-communication-warmup-flush: step.pp_warmup_flush); "
                    "false: every chunk's p2p as the steady state's")
    pp_p2p_warmup_flush_switch: Optional[str] = Field(
        default=None, description="the stack's option that overlaps the warm-up and flush p2p too (Megatron-LM "
                                  "--overlap-p2p-communication-warmup-flush): a job's pp_p2p_overlap_warmup_flush true turns "
                                  "pp_p2p_warmup_flush_blocking off; null: the stack has none, and the job field is refused")
    fsdp_backward_prefetch: Bool = Field(description="FSDP issues the next unit's backward all-gather before the current unit's "
                                                     "gradient computation (FSDP2, FSDP1 BACKWARD_PRE); else after it (BACKWARD_POST), "
                                                     "so the backward all-gathers wait on compute and compute on them")
    fsdp_gathers_overlap_always: Bool = Field(
        default=False, description="the FSDP / ZeRO-3 weight all-gathers are prefetched and run beside compute whatever "
                                   "the job's dp_comm_overlap, which moves only the gradient reduction: off, its "
                                   "reduce-scatter (and a replica all-reduce) is waited on by the compute stream "
                                   "(DeepSpeed ZeRO-3's overlap_comm: step.py [19]); false: dp_comm_overlap off exposes "
                                   "every DP transfer")
    fsdp_prefetch_depth: Optional[Int] = Field(
        default=None, ge=1, le=1,
        description="ZeRO-3's submodule fetches: 1 where each fetch of gathered (or in-flight) parameters ends in a "
                    "device synchronize and the next all-gather is issued only when none is in flight, so a "
                    "submodule's all-gather hides behind the compute queued since the previous synchronize only "
                    "(DeepSpeed a12aaedc, step.py [22]); null: the gathers are prefetched asynchronously and hide "
                    "behind the whole pass (fsdp_traffic)")
    grad_reduce_queued: Bool = Field(
        default=False,
        description="a zero2 mode that reduces every micro-batch's gradients issues each chunk's reduction when its "
                    "backward ends and the compute stream goes on with the schedule's next passes (forwards and "
                    "backwards of other micro-batches) until the step's end: the reductions queue on one stream "
                    "behind the whole schedule (step.py [26], pipeline.py [12], 1F1B, interleaved or one stage); "
                    "false: the runtime waits for a micro-batch's reductions at the end of its backward (DeepSpeed "
                    "ZeRO-2's epilogue, Megatron-FSDP's root post-backward), so they hide behind that backward only. "
                    "FSDP-level modes are priced by step.fsdp_traffic whatever this says")
    overlapped_exposed_fraction: Real = Field(
        ge=0, le=1, description="share of overlapped communication time that still lands on the critical path "
                                "(NCCL kernels take SMs and HBM bandwidth from the compute they hide behind)")
    sources: list[str] = Field(min_length=1)


class PassBytes(BaseModel):
    """HBM bytes per element of one tensor that a context-parallel attention pass moves in its
    own memory-bound kernels (merges, accumulations, copies): `fixed` once per layer and
    micro-batch, `per_step` for each ring step after the first (cp - 1 of them; fewer for a
    windowed layer), on the rank whose steps are all full-size (the ring waits for it)."""

    model_config = Strict
    fixed: Real = Field(ge=0)
    per_step: Real = Field(ge=0)


class HeldBytes(BaseModel):
    """Bytes per element of one tensor that the layer being run holds beyond its saved tensors
    (memory.py [cp2]): `fixed` plus `per_rank` times the cp ranks."""

    model_config = Strict
    fixed: Real = Field(default=0.0, ge=0)
    per_rank: Real = Field(default=0.0, ge=0)


class CPBackwardMoment(BaseModel):
    """One moment of Transformer Engine's P2P context-parallel ring backward (AttnFuncWithCPAndKVP2P.backward,
    memory.py [cp4]): what the attention's backward holds then beyond the layer's saved tensors, per element of
    the local query (T a d / t) and of the local K and V (T 2 k' d / t), each `fixed` plus `per_rank` times the
    ring's ranks."""

    model_config = Strict
    q: HeldBytes = Field(description="per element of the local query")
    kv: HeldBytes = Field(description="per element of the local K and V")


class CPHeld(BaseModel):
    """What one attention layer holds while it runs under context parallelism, beyond the tensors
    it saves (memory.py [cp2]), per element of the local K and V (T 2 k d / t), of the query
    (T a d / t) and of the output; each pass's moment is the sum of its terms (an upper bound
    where they are not live at once), the larger pass is what one layer adds."""

    model_config = Strict
    kv_fwd: HeldBytes = Field(default_factory=HeldBytes, description="forward, per element of the local K and V")
    kv_bwd: HeldBytes = Field(default_factory=HeldBytes, description="backward, per element of the local K and V")
    q_fwd: Real = Field(default=0.0, ge=0, description="forward, bytes per element of the query")
    q_bwd: Real = Field(default=0.0, ge=0, description="backward, bytes per element of the query")
    o_bwd: Real = Field(default=0.0, ge=0, description="backward, bytes per element of the output")


class ContextParallelSpec(BaseModel):
    """How the stack runs attention under context parallelism (planner/step.py cp_comm and
    cp_pass_times): the K/V exchange of each pass, what it runs beside, and the memory-bound
    work the split adds (the output / LSE merges of the forward, the dQ and dK/dV
    accumulations of the backward, the K/V copies into the send buffers). Every rank runs its
    queries against each rank's keys as one attention kernel per ring step, the causal mask
    load-balanced over 2 cp sequence chunks: a step is 1/cp of the core's FLOPs; or (kernel
    one) against the all-gathered K/V as a single kernel; or (kernel one with a2a, Ulysses)
    the whole sequence of a / cp of the heads after all-to-alls of Q, K and V, and of the
    output after it."""

    model_config = Strict
    implementation: str = Field(description="the code that runs it (informational)")
    kernel: Literal["per_step", "one"] = Field(
        default="per_step",
        description="per_step: one attention kernel per ring step, each transfer beside a step's kernel; one: the "
                    "local queries run as a single kernel against the all-gathered K/V (Llama 3, arXiv:2407.21783 "
                    "sec. 3.3.2), at the unsplit kernel's rate, so nothing runs beside the exchange: the all-gathers "
                    "before it and the dK/dV reduce-scatter after it are exposed (needs fwd_kv and bwd_kv allgather, "
                    "dkv reduce_scatter); or the whole sequence of a / cp heads after all-to-alls (fwd_kv, bwd_kv "
                    "and dkv a2a: every all-to-all exposed)")
    fwd_kv: Literal["ring", "allgather", "a2a"] = Field(
        description="forward K/V exchange: ring (one send of the local K/V per step after the first, each beside "
                    "the kernel of the step before), allgather (one all-gather, beside the first step's kernel) or "
                    "a2a (all-to-alls of Q, K and V before the kernel and of its output after it, kernel one)")
    bwd_kv: Literal["ring", "allgather", "a2a"] = Field(description="the backward's K/V exchange, as fwd_kv (a2a: the "
                                                                     "output gradient's all-to-all before the kernel)")
    dkv: Literal["with_kv", "after_step", "reduce_scatter", "a2a"] = Field(
        description="how the dK/dV partial sums travel: with_kv (in the same send as the step's K/V, one buffer, "
                    "beside the step's kernel; the last step sends dK/dV alone), after_step (a send of its own "
                    "after each step's kernel, beside the next step's kernel; the last one exposed), "
                    "reduce_scatter (kernel one: the gathered K/V's gradients reduce-scattered to their ranks, the "
                    "all-gather's backward) or a2a (kernel one: all-to-alls of dQ, dK and dV back to the sequence "
                    "split)")
    dkv_bytes: Real = Field(gt=0, description="bytes per dK/dV element in transit (bf16 2, fp32 4)")
    separate_kv: Bool = Field(
        default=False, description="K and V travel as two collectives of half the size each (Transformer Engine's "
                                   "all-gather variant gathers k, then v); false: one collective of both")
    out: PassBytes = Field(description="forward, per element of the attention output (T a d / t)")
    kv_fwd: PassBytes = Field(description="forward, per element of the local K and V (T 2 k d / t)")
    q_fwd: PassBytes = Field(default_factory=lambda: PassBytes(fixed=0.0, per_step=0.0),
                             description="forward, per element of the query (the a2a variant's layout copies)")
    dq: PassBytes = Field(description="backward, per element of the query gradient (T a d / t)")
    dkv_acc: PassBytes = Field(description="backward, per element of the local dK and dV (T 2 k d / t)")
    kv_bwd: PassBytes = Field(description="backward, per element of the local K and V")
    dout_bwd: PassBytes = Field(default_factory=lambda: PassBytes(fixed=0.0, per_step=0.0),
                                description="backward, per element of the output gradient (the a2a variant's copies)")
    held: Optional[CPHeld] = Field(
        default=None, description="what the layer being run holds beyond its saved tensors (memory.py [cp2]); null: "
                                  "nothing priced here (the P2P ring's forward merge is memory.cp_forward_merge [cp3], "
                                  "torch's ring backward memory.cp_ring_backward [cp1])")
    hierarchical: Bool = Field(
        default=False,
        description="the a2a+p2p variant: all-to-alls of Q, K, V (and the output) inside the first hierarchical group "
                    "(contiguous ranks), then this spec's ring across the second (Transformer Engine's "
                    "AttnFuncWithCPAndKVP2P with cp_group = [a2a group, p2p group]); the sizes are the job's "
                    "(hierarchical_sizes, set at resolve)")
    hierarchical_sizes: Optional[tuple[Int, Int]] = Field(
        default=None, description="the job's (a2a ranks, p2p ranks) of a hierarchical spec (Megatron "
                                  "--hierarchical-context-parallel-sizes), set at resolve (planner/cp_comm_type.py)")
    saved_out_bytes: Real = Field(
        default=0.0, ge=0,
        description="bytes per element of the attention output a layer saves beyond its table where the attention "
                    "core is not recomputed (the a2a variant: the kernel's own output in the head-split layout, kept "
                    "for its backward beside the all-to-all's result the output projection saves)")
    sources: list[str] = Field(min_length=1)

    @field_validator("hierarchical_sizes")
    @classmethod
    def _sizes_from_the_job(cls, v):
        """The sizes are the job's (cp_comm_type.apply_cp_comm_type sets them with model_copy, which does not
        validate): a stack file that states them would be read as the job's, and its errors blamed on the job's
        --hierarchical-context-parallel-sizes."""
        if v is not None:
            raise ValueError("hierarchical_sizes is the job's (--hierarchical-context-parallel-sizes, job field "
                             "hierarchical_cp_sizes), set when a plan is resolved; a stack file does not give it")
        return v

    @model_validator(mode="after")
    def _one_kernel(self) -> "ContextParallelSpec":
        exchange = (self.fwd_kv, self.bwd_kv, self.dkv)
        one = exchange in (("allgather", "allgather", "reduce_scatter"), ("a2a", "a2a", "a2a"))
        if (self.kernel == "one") != one:
            raise ValueError("kernel one goes with fwd_kv allgather, bwd_kv allgather and dkv reduce_scatter (the "
                             "single kernel against the gathered K/V and its reduce-scatter) or with a2a for all three "
                             "(Ulysses), and only with them")
        return self


class CPCommTypes(BaseModel):
    """The context-parallel variants a stack runs by name (Megatron-LM --cp-comm-type; job field
    cp_comm_type, planner/cp_comm_type.py): the stack's context_parallel is `default`'s; each other
    variant's spec replaces it when a job names it; `refused` names the variants the planner does not
    price, with the reason."""

    model_config = Strict
    option: str = Field(description="the stack's option (informational), e.g. Megatron --cp-comm-type")
    default: str = Field(description="the variant the stack's context_parallel describes")
    variants: dict[str, ContextParallelSpec] = Field(default_factory=dict)
    refused: dict[str, str] = Field(default_factory=dict, description="variant -> why the planner does not price it")
    forward_merge: list[str] = Field(
        default_factory=list, description="variants whose forward is the P2P ring's merge (memory.cp_forward_merge, "
                                          "memory.py [cp3]); off for the others")
    fp8_kernel_saves_qkv: list[str] = Field(
        default_factory=list, description="variants whose fp8 attention saves the fused kernel's quantized q, k, v "
                                          "(fp8_recipes fp8_attention qkv_saved_bytes) under CP > 1, as without CP "
                                          "(Transformer Engine's a2a); the others save their own (cp_qkv_saved_bytes, "
                                          "memory.py [fa8])")
    heads_divisible: list[str] = Field(
        default_factory=list, description="variants that split the attention heads over the cp ranks (a hierarchical "
                                          "one over its all-to-all group's): the query heads and the KV heads per TP "
                                          "rank must divide by them (startup rule MEGATRON_CP_A2A_HEADS)")
    no_sliding_window: list[str] = Field(
        default_factory=list, description="variants that refuse a sliding-window attention layer (Transformer Engine's "
                                          "P2P ring: startup rule MEGATRON_CP_SLIDING_WINDOW)")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _names(self) -> "CPCommTypes":
        clash = ({self.default} & (set(self.variants) | set(self.refused))) | (set(self.variants) & set(self.refused))
        if clash:
            raise ValueError(f"cp_comm_types names {', '.join(sorted(clash))} twice")
        unknown = (set(self.heads_divisible) | set(self.forward_merge) | set(self.no_sliding_window)
                   | set(self.fp8_kernel_saves_qkv)) \
            - set(self.variants) - {self.default}
        if unknown:
            raise ValueError(f"heads_divisible / forward_merge / no_sliding_window / fp8_kernel_saves_qkv name no variant: "
                             f"{', '.join(sorted(unknown))}")
        return self


# DeepSpeed ZeRO-3's gathering and bucket settings, in the DeepSpeed JSON's spelling (zero_optimization keys;
# planner/memory.py [z3]); a job's Job.deepspeed_zero3 replaces the stack's fsdp.zero3_modules value of each it sets
ZERO3_KEYS = ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
              "stage3_param_persistence_threshold", "reduce_bucket_size", "sub_group_size", "contiguous_gradients")
Zero3Key = Literal["stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                   "stage3_param_persistence_threshold", "reduce_bucket_size", "sub_group_size", "contiguous_gradients"]


class Zero3Modules(BaseModel):
    """DeepSpeed ZeRO-3 gathers per submodule (memory.py [z3]): its defaults at the stack's DeepSpeed commit, in
    parameters (elements), named as the DeepSpeed JSON's zero_optimization keys."""

    model_config = Strict
    stage3_prefetch_bucket_size: Int = Field(ge=0, description="parameters fetched ahead of use (0: no prefetch)")
    stage3_max_live_parameters: Int = Field(ge=0, description="gathered parameters beyond which nothing is prefetched")
    stage3_max_reuse_distance: Int = Field(ge=0, description="a module's parameters stay gathered where the trace "
                                                             "reuses them within this many parameters")
    stage3_param_persistence_threshold: Int = Field(ge=0, description="parameters of at most this many elements "
                                                                      "are never partitioned (always gathered)")
    reduce_bucket_size: Int = Field(ge=0, description="elements of the contiguous gradient (IPG) bucket, in the model "
                                                      "dtype (ZeRO-3's, and ZeRO-1/2's where their mode states "
                                                      "step_grads.ipg_buffer: memory.py [zb])")
    sub_group_size: Int = Field(ge=0, description="local partition elements of an optimizer sub-group, stepped one at a "
                                                  "time with its fp32 gradient copy (memory.py [z3s])")
    contiguous_gradients: Int = Field(default=1, ge=0, le=1, description="1: ZeRO-3's small gradients are copied into "
                                      "the contiguous IPG buffer, allocated once and kept all step (DeepSpeed's default "
                                      "true); 0: each stays its own tensor until its bucket is reduced (memory.py [z3g])")
    sources: list[str] = Field(min_length=1)


class FSDPSpec(BaseModel):
    """How the stack's data-parallel sharding moves bytes."""

    model_config = Strict
    grad_reduce_bytes: Real = Field(gt=0, description="bytes per gradient element reduced across DP (4 = fp32)")
    param_gather_bytes: Real = Field(gt=0, description="bytes per parameter all-gathered (bf16 = 2)")
    reshard_after_forward_with_pp: Bool = Field(description="FSDP frees the gathered weights after forward when pp > 1 "
                                                            "(else they stay unsharded across a step's micro-batches)")
    reduce_per_microbatch: Bool = Field(description="FSDP reduce-scatters gradients every micro-batch (else once per step, "
                                                    "accumulating unsharded gradients without sync)")
    ddp_reduces_grad_buffer: Bool = Field(
        default=False, description="DDP / ZeRO-1/2 reduce the gradient buffer itself, in the job's gradient dtype "
                                   "(bytes_per_param.gradients), not in grad_reduce_bytes (Megatron-LM's "
                                   "param_and_grad_buffer: fp32 only with grad_reduce_in_fp32)")
    ddp_bucket_params: Real = Field(gt=0, description="DDP / ZeRO-1/2: parameters per gradient-reduction bucket (one collective each)")
    ddp_bucket_params_per_dp_rank: Real = Field(default=0.0, ge=0, description="the bucket grows to at least this many "
                                                                               "parameters per DP rank (Megatron: 1M x dp)")
    fsdp_bucket_params: Optional[Real] = Field(default=None, gt=0, description="FSDP / ZeRO-3: parameters per all-gather / "
                                                                              "reduce-scatter; null: one FSDP unit (a layer) each")
    allgather_copy_bytes: Real = Field(ge=0, description="HBM bytes per unsharded parameter each all-gather copies in and out of its buffer")
    reduce_copy_bytes: Real = Field(ge=0, description="HBM bytes per unsharded parameter each gradient reduce-scatter copies into its buffer")
    # what a sharded (FSDP / HSDP) rank holds at its allocated peak, the start of the backward
    # (planner/memory.py "FSDP"); the defaults are FSDP1 / ZeRO-3: a low-precision shard beside
    # the fp32 master, the sharded gradients live, two gathered units and one unsharded gradient
    sharded_weights_copy: Bool = Field(
        default=True, description="a low-precision shard of the weights beside the fp32 master (False: FSDP2 mixed "
                                  "precision keeps only the fp32 shard, cast on each all-gather)")
    grads_at_peak: Bool = Field(
        default=True, description="the sharded gradients are allocated at the peak (False: FSDP2 frees them with "
                                  "zero_grad(set_to_none) and allocates them during the backward)")
    unsharded_ends: list[Literal["embedding", "output"]] = Field(
        default_factory=list, description="end units kept unsharded from their forward to their backward (FSDP2's root)")
    gathered_units_at_peak: Real = Field(default=2.0, ge=0, description="layer units all-gathered at the peak (current + prefetched)")
    gather_prefetch_share: Optional[Real] = Field(
        default=None, gt=0,
        description="the all-gather prefetch's capacity, in parameters, as a share of the reduce-scatter queue's "
                    "(zero2_reduce_queue_params, max'd with the mode's reduce_queue_units x the average layer unit: "
                    "memory.py [rs]); for the fsdp modes stating runs.sharding reduce_queue_units, each layer unit's "
                    "pre-forward / pre-backward all-gather prefetches the next units until the prefetched parameters "
                    "reach floor(share x that capacity) P: at the peak the current unit (the largest unit) and "
                    "min(ceil(P / the largest layer unit), the chunk's layers) prefetched layer units are gathered, "
                    "in place of gathered_units_at_peak (Megatron-FSDP: suggested_AG_prefetch_size = "
                    "suggested_communication_unit_size // 2, 0.5; memory.py [pf]). null: gathered_units_at_peak")
    gathered_grad_units_at_peak: Real = Field(default=1.0, ge=0, description="unsharded layer gradients at the peak (in the reduce dtype)")
    allgather_pool_units: Real = Field(
        default=0.0, ge=0, description="flat all-gather buffers (units, param_gather_bytes each) in the all-gather "
                                       "streams' pools: reserved, not reusable by the default stream")
    reduce_output_pool: Bool = Field(
        default=False, description="the sharded gradients (grad_reduce_bytes each) are views of buffers allocated on the "
                                   "reduce-scatter stream: held in its pool, reserved through the next forward")
    pp_unsharded_grad_bytes: Real = Field(
        default=0.0, ge=0, description="with pp > 1 and the weights kept unsharded (reshard_after_forward_with_pp false): "
                                       "bytes per stage parameter of the unsharded gradients accumulated over the "
                                       "micro-batches (FSDP2 to_accumulated_grad_if_needed: fp32, 4)")
    pp_runtime_no_sync: Bool = Field(
        default=False,
        description="under PP the pipeline runtime runs every micro-batch's backward with gradient sync and resharding "
                    "after backward off and reduces once, at the last (torch.distributed.pipelining stage.py "
                    "backward_maybe_with_nosync): a mode that reshards after forward there (torchtitan "
                    "fsdp_reshard_after_forward 'always') re-gathers each unit for the backward that follows a "
                    "forward and for the forward that follows a forward: m + 1 gathers of the stage's weights a step "
                    "(planner/stacks.py sharding_traits regather_pp), its gradients accumulated unsharded and reduced "
                    "once. false: such a mode gathers in every forward and backward and reduces as its grad_reduce says")
    zero2_unit_reduce: Bool = Field(
        default=False, description="a zero2 mode that reduces every micro-batch (runs.sharding grad_reduce microbatch) "
                                   "reduce-scatters each layer unit's gradients as FSDP2's foreach_reduce does: the "
                                   "unit's bf16 autograd gradients copied into an unsharded reduce-scatter input "
                                   "(grad_reduce_bytes a parameter) at the unit's post-backward, the input held until "
                                   "the next unit's post-backward (memory.py [rs], term zero2_reduce_input). false: no "
                                   "such transient (DeepSpeed ZeRO-2's IPG bucket is its own term, [zb])")
    zero2_reduce_queue_params: Optional[Real] = Field(
        default=None, gt=0,
        description="the capacity of the reduce-scatter queue of the modes stating runs.sharding reduce_queue_units "
                    "(Megatron-FSDP's GradReducePipeline; at least that many average layer units): each layer's bucket (zero2_reduce_queue_grad_bytes a "
                    "parameter) allocated at its backward's first weight gradient, reduce-scattered at its "
                    "post-backward after the queue has been drained to at most this many parameters, all freed at the "
                    "end of the micro-batch's backward (memory.py [rs], term zero2_reduce_input). null: FSDP2's "
                    "foreach_reduce, one unit's input at a time")
    zero2_reduce_queue_grad_bytes: Real = Field(
        default=2.0, gt=0, description="with zero2_reduce_queue_params: bytes a parameter of a queued unsharded "
                                       "gradient bucket (Megatron-FSDP's main-gradient dtype, 'auto': the bf16 "
                                       "parameters'), where the plan's mode does not keep its own main gradients in "
                                       "the job's dtype (runs.sharding grads_in_job_dtype: the job's gradient bytes)")
    end_of_backward_peak: Bool = Field(
        default=False, description="without PP, the allocated peak may come at the last units' reduce-scatter, where "
                                   "every sharded gradient (reduce_output_pool: views of reduce-scatter outputs) is "
                                   "allocated: memory._end_of_backward")
    backward_gathered_units: Real = Field(
        default=0.0, ge=0, description="layer units all-gathered (param_gather_bytes) while a layer's backward runs, "
                                       "beyond those at the loss's peak (FSDP1 BACKWARD_PRE: the current unit and the "
                                       "prefetched one); counted at that moment (memory.py [lg1])")
    backward_grad_units: Real = Field(
        default=0.0, ge=0, description="unsharded layer-unit gradients (grad_reduce_bytes) while a layer's backward runs "
                                       "(FSDP1: the unit's flat gradient before its reduce-scatter); that moment only")
    output_grad_held: Bool = Field(
        default=False, description="the output layer's unsharded weight gradient (param_gather_bytes a parameter) waits "
                                   "through the layers' backward for its unit's reduce-scatter, which follows the "
                                   "embedding's gradient (FSDP1's root unit holds both)")
    zero3_modules: Optional[Zero3Modules] = Field(
        default=None, description="DeepSpeed ZeRO-3: the gathered working set is per submodule (a linear), bounded by "
                                  "DeepSpeed's prefetch, live-parameter and reuse-distance settings, not whole layer "
                                  "units (memory.py [z3]); null: FSDP's layer units (gathered_units_at_peak)")
    zero3_rerun_regathers: Bool = Field(
        default=False, description="DeepSpeed ZeRO-3 (needs zero3_modules): under full recompute the re-run forward "
                                   "fires every submodule's forward hook and all-gathers its parameters again, and the "
                                   "backward gathers once more those the reuse distance released after the re-run "
                                   "(stage3_max_reuse_distance): a recomputed layer's weights are gathered 2 + (1 - the "
                                   "kept share) times a micro-batch, not twice (step.py [23]); false: the backward's "
                                   "gather serves the re-run (FSDP's unit-level hooks)")
    zero3_bias_hook_gemms: list[str] = Field(
        default_factory=list, description="DeepSpeed ZeRO-3: GEMM rows (the layers' gemms() names: qkv, attn_out, "
                                          "mlp_up, mlp_down, ...) whose bias the model code adds outside the GEMM's "
                                          "autograd node (Megatron's skip_bias_add): in a model with linear biases the "
                                          "bias gradient's hook fires before the row's weight-gradient GEMM and "
                                          "flushes the bucket then (memory.py [z3h])")
    zero3_norm_hook_gemms: list[str] = Field(
        default_factory=list, description="DeepSpeed ZeRO-3: GEMM rows followed in the forward by a norm module with "
                                          "parameters of its own (not fused into the next linear): the norm's gradient "
                                          "hooks fire between the next row's weight hook and this row's "
                                          "weight-gradient GEMM (memory.py [z3h])")
    sources: list[str] = Field(min_length=1)


class TPCollectiveBytes(BaseModel):
    """Bytes per element each tensor-parallel collective of a layer's linear pair moves under a low-precision recipe
    with sequence parallelism (step.py [33], step.tp_bytes): the column-parallel linear's (QKV, FC1, an up projection)
    input all-gathered before its GEMM, the row-parallel linear's (the output projection, FC2) output reduce-scattered
    after it, and backward the row-parallel linear's output gradient all-gathered and the column-parallel linear's
    input gradient reduce-scattered. Scales included (a block-scaled recipe's per-block scales, gathered beside the
    data). Without sequence parallelism the pair is two all-reduces, at bf16 whatever the recipe."""

    model_config = Strict
    input_all_gather: Real = Field(gt=0, description="forward: the column-parallel linear's input, all-gathered "
                                                      "(quantized before the gather where the recipe does)")
    output_reduce_scatter: Real = Field(gt=0, description="forward: the row-parallel linear's output, reduce-scattered")
    grad_output_all_gather: Real = Field(gt=0, description="backward: the row-parallel linear's output gradient, "
                                                            "all-gathered (quantized before the gather where the recipe "
                                                            "does)")
    grad_input_reduce_scatter: Real = Field(gt=0, description="backward: the column-parallel linear's input gradient, "
                                                               "reduce-scattered")
    amax_all_reduce_bytes: Real = Field(ge=0, description="bytes of the all-reduce over the TP group before each "
                                                           "quantized all-gather (the local amax, so that every rank "
                                                           "casts with one scale: current scaling, NVFP4's per-tensor "
                                                           "scale); 0: none")
    sources: list[str] = Field(min_length=1)


class AmaxReduction(BaseModel):
    """Transformer Engine's delayed-scaling amax reduction (step.py [34], step.fp8_amax_comm): at each fp8_autocast
    region's exit every fp8 module's current forward amaxes, concatenated into one buffer, are all-reduced (max) over
    the region's amax reduction group, and at the backward's end of the region (the first module's backward) the
    backward ones; synchronous on the compute stream. The buffer holds every module of the rank registered with the
    region's recipe and group (all its layers, every model chunk), per fp8 GEMM of the module the bytes below."""

    model_config = Strict
    forward_bytes_per_gemm: Real = Field(gt=0, description="bytes of the forward buffer per fp8 GEMM (TE: 3 fp32 "
                                                            "amaxes a GEMM, the input, weight and output quantizers)")
    backward_bytes_per_gemm: Real = Field(gt=0, description="bytes of the backward buffer per fp8 GEMM (TE: 2 fp32 "
                                                             "amaxes a GEMM, the output and input gradients)")
    regions_per_chunk: Real = Field(gt=0, description="fp8_autocast regions a micro-batch's forward of one model "
                                                       "chunk opens (Megatron-Core under delayed scaling: one, the "
                                                       "whole TransformerBlock); each one reduction each way")
    sources: list[str] = Field(min_length=1)


class FP8Attention(BaseModel):
    """What a recipe's fp8 fused attention (Transformer Engine FusedAttnFunc, FP8 backend) saves for its
    backward and where it runs (memory.py [fa8], step.py fp8_core)."""

    model_config = Strict
    qkv_saved_bytes: Real = Field(gt=0, description="bytes per element of the quantized q, k, v the kernel saves "
                                                     "(scales included) in place of the bf16 ones")
    out_saved_bytes: Real = Field(gt=0, description="bytes per element of the core output the kernel saves beside "
                                                     "the output projection's own quantized input")
    cp_qkv_saved_bytes: Real = Field(gt=0, description="bytes per element of the q, k, v Transformer Engine's context-"
                                                        "parallel attentions that save their own inputs (P2P ring, "
                                                        "all-gather) save under CP > 1 in place of qkv_saved_bytes "
                                                        "(memory.py [fa8]; MXFP8: the bf16 ones); the variants in "
                                                        "cp_comm_types.fp8_kernel_saves_qkv save the kernel's")
    cp_ring_kv_bytes: Real = Field(gt=0, description="bytes per element of the K/V buffers of Transformer Engine's "
                                                      "P2P context-parallel ring under this recipe (memory.py [cp3]: "
                                                      "the fp8 data where TE quantizes q, k, v before the ring, bf16 "
                                                      "where it quantizes each step's slices); the forward ring's "
                                                      "sends and the backward's K/V sends (step.py cp_ring_comm)")
    cp_ring_dkv_bytes: Real = Field(gt=0, description="bytes per element of the (ring ranks x local K/V) dK/dV "
                                                       "buffer Transformer Engine's P2P ring backward all-to-alls at "
                                                       "its last step under fp8 attention in place of the bf16 "
                                                       "ring's per-step dK/dV sends (step.py cp_ring_comm)")
    cp_merge_out_bytes: Real = Field(ge=0, description="bytes per local output element the P2P ring's forward holds "
                                                        "at its end beyond the layer's saved output (memory.py [cp3]: "
                                                        "the fp32 merged output and its bf16 copies not saved)")
    cp_inputs_bf16_bytes: Real = Field(ge=0, description="bytes per q, k, v element of the caller's bf16 q, k, v live "
                                                          "through the P2P ring's forward beside the saved quantized "
                                                          "ones (memory.py [cp3]; 0 where the bf16 ones are saved)")
    cp_backward: list[CPBackwardMoment] = Field(
        min_length=1, description="the moments of the P2P ring's backward under this recipe (memory.py [cp4]): the "
                                  "largest is what one attention layer's backward holds beyond its saved tensors")
    min_compute_capability: str = Field(pattern=r"^[0-9]+\.[0-9]+$",
                                        description="the lowest GPU compute capability the stack's fused attention "
                                                    "runs this recipe's fp8 path on (below it no backend trains)")
    sources: list[str] = Field(min_length=1)


class FP8Recipe(BaseModel):
    """One low-precision training recipe (fp8 or nvfp4): GEMM speed, cast traffic, what stays bf16."""

    model_config = Strict
    description: str
    gemms: list[Literal["fprop", "dgrad", "wgrad"]] = Field(
        default=["fprop", "dgrad", "wgrad"],
        description="the GEMMs of a linear layer that run at the low-precision rate (the rest in bf16)")
    gemm_speed: Real = Field(gt=0, le=1, description="GEMM rate relative to the hardware's fp8 GEMM plateau")
    cast_bytes_per_element: Real = Field(ge=0, description="amax + scale + cast bytes per GEMM input element, per GEMM, forward "
                                                             "(backward casts the output gradient: the same again x2)")
    allgather_fp8: Bool = Field(description="the recipe can all-gather FSDP's weights in fp8 and does unless the job's "
                                            "fp8_allgather is false: the converted Linears' weights at 1 B, the rest at "
                                            "param_gather_bytes (step.py [15])")
    output_layer_bf16: Bool = Field(description="the output layer (logits) stays in bf16")
    output_layer_convertible: Bool = Field(
        default=False, description="the stack can run the output layer in this recipe too, a job's fp8_output_layer "
                                   "(torchtitan: a filter_fqns list without 'output'); false: a job setting it is refused")
    fp8_dispatch: Bool = Field(
        default=False, description="MoE: the recipe quantizes the tokens before the dispatch and sends them in fp8 with "
                                   "their scales (the combine in bf16): planner/dispatch.py prices the bytes")
    fp8_attention: Optional[FP8Attention] = Field(
        default=None, description="the stack can run the fused attention in this recipe (a job's fp8_attention: "
                                  "Transformer Engine's fp8_dpa); null: a job setting it is refused")
    tp_collective_bytes: Optional[TPCollectiveBytes] = Field(
        default=None, description="bytes per element of each TP collective of a layer's linear pair under sequence "
                                  "parallelism (step.py [33]): Transformer Engine quantizes a column-parallel linear's "
                                  "input and a row-parallel linear's output gradient before their all-gathers; null: "
                                  "every TP collective at bf16 (2 B), as the stack's TP runs under this recipe")
    amax_reduction: Optional[AmaxReduction] = Field(
        default=None, description="delayed scaling's per-region amax all-reduce over the amax reduction group (TP x DP "
                                  "x CP in Megatron-Core: step.py [34]); null: none (current scaling's per-gather TP "
                                  "amax is tp_collective_bytes.amax_all_reduce_bytes)")
    dtensor_amax_bytes: Real = Field(
        default=0.0, ge=0, description="bytes of the all-reduce (MAX) over the TP group of one dynamic per-tensor cast's "
                                       "amax where the cast tensor is a TP-sharded DTensor (torchao float8 tensorwise "
                                       "under torchtitan's TP: the weights, the row-parallel linears' inputs, and under "
                                       "float8_tp_styles the block inputs and the output gradients; step.py [39]); 0: none")
    fsdp_amax_bytes: Real = Field(
        default=0.0, ge=0, description="bytes of one converted weight's amax that FSDP's fp8 all-gather all-reduces "
                                       "(MAX) over the FSDP shard group before each gather (torchao "
                                       "fsdp_pre_all_gather), or, with the job's fp8_precompute_scale, once a step for "
                                       "every weight in one buffer (precompute_float8_dynamic_scale_for_fsdp; step.py "
                                       "[39]); 0: none")
    float8_tp_styles: Bool = Field(
        default=False, description="torchtitan applies torchao's Float8ColwiseParallel / Float8RowwiseParallel / "
                                   "PrepareFloat8ModuleInput under this recipe (tensorwise: the block inputs cast to "
                                   "float8 before the TP all-gather, the output gradients cast on their DTensor; "
                                   "step.py [39])")
    grouped_experts_recipe: Optional[str] = Field(
        default=None, description="MoE: the recipe (a key of fp8_recipes) whose figures (gemm_speed, "
                                  "cast_bytes_per_element, gemms) price the routed experts' grouped GEMMs where they run "
                                  "converted under this recipe (fp8_grouped_experts true; step.py [16]): torchtitan's "
                                  "float8 grouped converter scales row-wise whatever the linear recipe; null: this recipe")
    grouped_experts_align: Optional[Int] = Field(
        default=None, ge=1, description="MoE: the rows each local expert's token group is padded to a multiple of where "
                                        "the experts run converted under this recipe (layers/moe.py [12]); null: the "
                                        "stack's memory.moe_token_group_align")
    sources: list[str] = Field(min_length=1)


OptimizerImpl = Literal["fused", "foreach", "for-loop"]
# the update rule a job's optimizer runs (Job.optimizer; stack runs.optimizers): adam (two moments a parameter,
# BytesPerParam.optimizer) or muon (one momentum a 2-D hidden matrix, Adam on the rest: memory.py [mu])
OptimizerName = Literal["adam", "muon"]


# what a fused-accumulation linear returns as its weight gradient (memory.py [dw])
DummyWgrads = Literal["none", "per_call", "cached"]


class CPUOffloadSpec(BaseModel):
    """How the stack offloads model states to the host (planner/offload.py): the job fields offload_optimizer and
    offload_param."""

    model_config = Strict
    optimizer_step: Literal["deepspeed_cpu_adam", "torch_cpu_adam"] = Field(
        description="what steps the offloaded optimizer partition on the CPU: DeepSpeed's vectorised DeepSpeedCPUAdam "
                    "(ZeRO-Offload) or torch.optim's Adam on CPU tensors (FSDP2's CPUOffloadPolicy); its rate: "
                    "memory-bound on the host's DRAM, offload.host_adam_bytes)")
    params_with_optimizer: Bool = Field(
        description="true: one switch moves the sharded parameters, gradients and optimizer states together (FSDP2's "
                    "CPUOffloadPolicy: offload_param and offload_optimizer both cpu, or both none); false: separate "
                    "switches (DeepSpeed zero_optimization.offload_optimizer, and offload_param at stage 3 only)")
    transfers: Literal["zero_offload", "fsdp2", "hybrid_device"] = Field(
        description="what crosses the host link a step (offload.transfer_bytes): zero_offload, DeepSpeed's gradient "
                    "partition down once a step in fp32 (and the 16-bit accumulation copies with gradient "
                    "accumulation) and the updated 16-bit partition up; fsdp2, each all-gather's fp32 shard up and "
                    "each reduce-scatter's fp32 gradient shard down; hybrid_device, Megatron-LM's HybridDeviceOptimizer: "
                    "at the step the offloaded fraction's main gradients down and, after the CPU step, its updated "
                    "parameters up in the model dtype, the rest stepped on the GPU at the same time (job fields "
                    "offload_fraction, offload_overlap)")
    sources: list[str] = Field(min_length=1)


class CheckpointSpec(BaseModel):
    """What the stack's periodic checkpoint writes beside the optimizer's master weights and moments (planner/budget.py
    [8]): whether the model's own state dict adds the working (16-bit) weights, and which rank writes them. A stack
    without this section is priced at the seed's convention (sec. 9.2: "the FP32 master weights and Adam's two
    averages", the working weights left out), an assumption `budget` lists."""

    model_config = Strict
    format: str = Field(min_length=1, description="what writes the checkpoint (informational), e.g. Megatron-LM "
                                                  "dist-ckpt --ckpt-format torch_dist")
    model_weights_modes: list[str] = Field(
        description="the sharding modes (runs.sharding names) under which the model's state dict holds the working "
                    "weights beside the optimizer's master copy, written at the job's weights dtype (bytes_per_param "
                    "weights; Megatron dequantizes fp8 parameters to it); under the others the model's state dict is "
                    "the master itself (torchtitan's fp32 FSDP2 shards, Megatron-FSDP's main weights) or placeholders "
                    "(DeepSpeed ZeRO-3). Empty: none")
    model_weights_writer: Literal["replicas_share", "dp_rank0"] = Field(
        description="who writes working weights replicated across data-parallel ranks: replicas_share (Megatron "
                    "dist-ckpt's fully parallel save: the replicas of the dp x cp group share the write, each about its "
                    "optimizer partition's elements) or dp_rank0 (DeepSpeed's save_non_zero_checkpoint: data-parallel "
                    "rank 0 writes its whole model-parallel part, the heaviest shard)")
    state_dict: Literal["sharded", "full_rank0"] = Field(
        default="sharded",
        description="how the state is gathered for the write: sharded (each rank writes its own shard: DCP, Megatron "
                    "dist-ckpt, DeepSpeed's per-rank files) or full_rank0 (the full, unsharded model and optimizer state "
                    "dicts gathered to global rank 0's CPU memory and written there alone: torch FSDP's "
                    "FULL_STATE_DICT with rank0_only, Composer's and Lightning Fabric's state_dict_type 'full'); "
                    "planner/budget.py [10]")
    enabled_by: Optional[str] = Field(
        default=None, min_length=1,
        description="where the stack writes no periodic checkpoint unless told to: the setting that turns it on (e.g. "
                    "torchtitan's [checkpoint] enable, default false); `budget` prices the checkpoint as if it were on "
                    "and lists that as assumed (planner/budget.py [10]). null: written by default")
    sources: list[str] = Field(min_length=1)


class MemoryReporting(BaseModel):
    """What the stack calls "memory", and the allocator around the tensors."""

    model_config = Strict
    reports: Literal["max_reserved", "max_allocated"] = Field(description="the figure the stack logs as peak memory")
    allocator_slack: Real = Field(ge=0, description="caching allocator reserved / allocated - 1 at peak (fragmentation)")
    allocator: Literal["default", "expandable_segments"] = Field(
        default="default",
        description="the caching allocator's setting the stack launches with: PYTORCH_CUDA_ALLOC_CONF "
                    "expandable_segments:True (one growing segment per stream) or PyTorch's default; it labels the "
                    "fragmentation band (memory.py [13])")
    blas_handles: Int = Field(
        default=0, ge=0,
        description="threads that run PyTorch GEMMs, each with its own cuBLAS handle and workspace (the forward on the "
                    "main thread, the backward on the autograd engine's device thread: 2)")
    te_workspace: Bool = Field(default=False, description="Transformer Engine's GEMMs run (its own cuBLAS workspace)")
    fp8_saves_gemm_inputs: Bool = Field(
        default=False,
        description="with fp8, the linears save their quantized input for the backward (1 B per element) instead of the "
                    "bf16 one: Transformer Engine's Linear / LayerNormLinear (columnwise data only)")
    attention_keeps_output: Bool = Field(
        default=False,
        description="the fused attention kernel saves its own bf16 output for its backward (TE FusedAttnFunc: q, k, v, "
                    "out); with fp8 GEMM inputs that is a tensor beside the output projection's quantized input")
    moe_token_group_align: Int = Field(
        default=0, ge=0,
        description="MoE: the rows each local expert's token group is padded to a multiple of before the bf16 grouped "
                    "GEMMs (torchtitan's TOKEN_GROUP_ALIGN_SIZE_M), held in the permuted buffer and its GEMMs' outputs "
                    "and computed by them (layers/moe.py [12]); 0: no padding (the rows as routed)")
    mtp_embedding_copy: Bool = Field(
        default=False,
        description="under pipeline parallelism the stage holding the multi-token-prediction modules builds its own "
                    "word embedding (and learned position table), a trainable copy of the first stage's kept in sync "
                    "by an all-reduce, beside its output layer (Megatron-Core's GPTModel: mtp_process builds a "
                    "LanguageModelEmbedding): its parameters, gradients and optimizer states on the last stage "
                    "(memory.params_of [me]); false: the MTP modules use the first stage's embedding (one stage, or "
                    "DualPipe's end rank holding both)")
    moe_token_counter: Bool = Field(
        default=False,
        description="every MoE layer keeps a fp32 tokens-per-expert counter of E elements as a buffer, with or "
                    "without the expert score bias (torchtitan's MoE.tokens_per_expert): 4 B x E a MoE layer in "
                    "model_buffers (memory.py _router_buffer_bytes, layers/common.py [sb]); false: the counter "
                    "exists only beside the score bias (Megatron-Core's local_tokens_per_expert)")
    moe_keeps_expert_out: Bool = Field(
        default=True,
        description="the routed experts' outputs before the combine (moe_expert_out, 2 B x top_k x h per token) are "
                    "saved for the backward, as where the routing weights multiply them at the combine; false where "
                    "the weights multiply inside the expert activation and the combine's unpermute keeps only its "
                    "row map (Megatron-Core with Transformer Engine: memory.py [14])")
    te_grouped_gemm_streams: Int = Field(
        default=0, ge=0,
        description="Transformer Engine's grouped GEMM (MoE experts, job field moe_grouped_gemm) keeps one cuBLAS "
                    "workspace per compute stream beside the single one (cpp_extensions/gemm.py get_cublas_workspace "
                    "grouped_gemm=True; common/util/multi_stream.cpp num_compute_streams 4)")
    global_memory_buffer: Bool = Field(
        default=False,
        description="Megatron-Core's GlobalMemoryBuffer ('mpu'): one persistent tensor per dtype, grown to the largest "
                    "request, for the sequence-parallel all-gather of its own linears' input (the output layer; every "
                    "linear with transformer_impl local) and the local core attention's baddbmm input (memory.py [12])")
    tp_overlap_buffers: Optional[Literal["userbuffers", "symmetric_memory"]] = Field(
        default=None,
        description="where TP communication overlap (plan tpo) keeps its communication buffers, outside the caching "
                    "allocator (memory.py [ub]): Transformer Engine's userbuffers (one [seq x micro-batch / cp, hidden] "
                    "buffer per overlapped GEMM name, registered with register_user_buffer_collective) or torch's "
                    "symmetric-memory workspace of the TP group (async TP); null: none priced")
    tp_overlap_workspaces: Int = Field(
        default=0, ge=0,
        description="cuBLAS workspaces (hardware te_workspace_MiB each) the GEMMs overlapped with TP communication use "
                    "beside the plain one, through the caching allocator: Transformer Engine's get_cublas_workspace(ub=True), "
                    "_NUM_MAX_UB_STREAMS = 3")
    te_version: Optional[str] = Field(
        default=None, pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$",
        description="the Transformer Engine release the stack's TE figures are read at (MAJOR.MINOR[.PATCH]); a job's "
                    "te_version replaces it where the run used another: it keys TP overlap's userbuffers and their cuBLAS "
                    "workspaces (memory.py [ub], TE_USERBUFFERS); null: the stack runs no Transformer Engine")
    dummy_wgrads: DummyWgrads = Field(
        default="none",
        description="with gradient-accumulation fusion (job gradient_accumulation_fusion), what each linear returns to "
                    "autograd as its weight gradient (memory.py [dw]): cached, a dummy Transformer Engine keeps one per "
                    "(shape, dtype) for the run (module/base.py get_dummy_wgrad: 2 B x the elements of each distinct "
                    "weight shape on the rank, the output layer's included); per_call, a fresh torch.empty of the "
                    "weight's shape each backward, freed by the DDP hook (one linear's at a time, as the unfused "
                    "weight gradient); none, no tensor (the GEMM accumulates and returns None)")
    fp8_weight_cache: Bool = Field(
        default=False,
        description="with fp8 or nvfp4, each linear keeps its quantized weight (and the copy its backward reads) "
                    "across micro-batches and steps: Transformer Engine's _fp8_workspaces, which Megatron turns on "
                    "through is_first_microbatch (memory.py [11]); with the job's fp8_param_gather the weights are "
                    "themselves quantized and only the backward's copy is kept beside them")
    te_loss_per_logit: Optional[list[Annotated[Real, Field(ge=0)]]] = Field(
        default=None, min_length=2, max_length=2,
        description="Transformer Engine's fused cross-entropy (Megatron-Core cross_entropy_fusion_impl te; job field "
                    "cross_entropy_fusion_impl): [bytes per logit it holds for the backward, bytes per logit its kernels "
                    "move in a step]; null: the stack has none")
    fused_loss_extra_per_logit: Optional[Real] = Field(
        default=None, ge=0,
        description="the stack's fused cross-entropy (job field cross_entropy_fusion): bytes per logit it holds at the "
                    "loss's backward peak beyond the unfused loss (kernels.loss_saved_per_logit); null: no fused loss")
    mtp_loss_kept_per_logit: Optional[Real] = Field(
        default=None, ge=0,
        description="bytes per logit (token x vocab / tp) each multi-token-prediction module's loss keeps from its "
                    "forward to the main loss's backward, the peak's moment (the tensors its cross-entropy saves for "
                    "its own backward: Megatron's fp32 softmax); its logits are dropped after its loss and its own "
                    "backward's transients come after the main loss's (memory.py [ml]); null: each module holds the "
                    "main loss's bytes (the loss's backward peak)")
    chunked_loss_chunks: Optional[Int] = Field(
        default=None, gt=0,
        description="the stack's chunked cross-entropy (job field chunked_loss): the sequence chunks it runs the output "
                    "layer and the loss on, one at a time (memory._chunked_loss); null: no chunked loss")
    mtp_checkpointed: Optional[Bool] = Field(
        default=None,
        description="whether the stack's activation checkpointing covers its multi-token prediction modules (job field "
                    "mtp_layers); false: the MTP layer keeps every activation and re-runs nothing under any recompute "
                    "(torchtitan 0.3 wraps model.layers only); null: as Megatron, full recompute re-runs the module "
                    "(memory.mtp_recomputed) and selective recompute applies to its layer")
    fp8_saved_bytes: dict[Fp8SavedTensor, Real] = Field(
        default_factory=dict,
        description="with fp8, bytes per element of the named saved tensors (1 = fp8, 1.5 = a 12-bit format), overriding "
                    "fp8_saves_gemm_inputs' 1 B for the GEMM inputs it names")
    moe_routing_saved: Bool = Field(
        default=False,
        description="an MoE layer saves its router's tensors on the job's path (in place of the generic fp32 logits) and "
                    "its permutations' row maps for the backward beside its tensors, per in-flight micro-batch, as "
                    "Megatron-Core's router and its alltoall and flex (DeepEP) dispatchers do (planner/layers/moe.py "
                    "routing_saved_bytes)")
    vocab_split_uneven: Bool = Field(
        default=False,
        description="the stack shards the embedding and output layer over TP as DTensor Shard placements, which split a "
                    "vocabulary tp does not divide unevenly (torch.chunk: the first ranks ceil(V / tp) rows): the largest "
                    "rank's rows are priced (memory.vocab_tp_divisor [vs]); false: V / tp (an even split, or a stack "
                    "that pads V to a multiple of tp)")
    attention_lse_align: Optional[Int] = Field(
        default=None, gt=0,
        description="the stack's fused attention core rounds each sequence's saved fp32 log-sum-exp rows up to a "
                    "multiple of this many queries (llm-foundry's Triton FlashAttention: 128; layers/attention.py "
                    "[ls2]), in the layers without a window; null: the queries as they are (the flash kernels)")
    hybridep_dispatch_saves: Bool = Field(
        default=False,
        description="on the moe_dispatcher hybridep plans, the MoE layer saves what torchtitan 0.3's HybridEP custom ops "
                    "keep for the backward beside its tensors, per in-flight micro-batch (planner/layers/moe.py [20], "
                    "hybridep_torch_saved_bytes): the router's int64 top-k indices (8 k B a local token) and the "
                    "combine's bf16 permuted scores (2 B a permuted row) without recompute; under op-level selective "
                    "recompute the cached outputs of topk and hybridep::dispatch on the save list instead (fp32 values "
                    "and int64 indices, 12 k B a local token, and the fp32 permuted scores, 4 B a row); and DeepEP's "
                    "dispatch handle (hybridep_saved_bytes), a ctx attribute kept under every recompute mode; false: not "
                    "priced (Megatron's flex dispatcher prices its own under moe_routing_saved). The router's top-k "
                    "index and its cached topk outputs are router_topk_saves' (every dispatcher)")
    router_topk_saves: Optional[Literal["recompute_topk", "cache_topk"]] = Field(
        default=None,
        description="the MoE layer's router is torchtitan's TokenChoiceTopKRouter (planner/layers/moe.py [21], "
                    "torch_router_saved_bytes), which keeps beside the layer's fp32 scores, on every dispatcher and per "
                    "in-flight micro-batch, the gather's int64 top-k index (8 k B a local token) and, where the model's "
                    "router divides the top-k weights by their sum (MoESpec.route_norm), the division's fp32 operands "
                    "(4 k + 4 B); under op-level selective recompute 'recompute_topk' keeps none of them (topk is not on "
                    "the save list: torchtitan main) and 'cache_topk' keeps topk's cached fp32 values and int64 indices "
                    "(12 k B: aten.topk on the save list, torchtitan 0.3); null: the generic fp32 scores alone")
    reorder_combine_saves: Bool = Field(
        default=False,
        description="the MoE layer's standard all-to-all path is torchtitan's reorder and combine (planner/layers/moe.py "
                    "[22], torch_reorder_saved_bytes), which keeps, per in-flight micro-batch, the argsort's int64 index "
                    "and its `// top_k` copy (16 k B a local token) and an fp32 copy of the expert rows the routing "
                    "scores multiply with the fp32 scores (4 h + 4 B a row, n k rows, of which the generic "
                    "moe_expert_out prices 2 h); none under op-level selective or full recompute (re-made in the re-run "
                    "layer); false: the generic bf16 moe_expert_out alone")
    ep_permute_index: Optional[Literal["int64", "padded_int32"]] = Field(
        default=None,
        description="the MoE layer's standard all-to-all path reorders the received rows to expert-major order by an "
                    "index gather and back by an index_put (torchtitan's _permute / _unpermute; planner/layers/moe.py "
                    "[23], torch_permute_index_bytes), whose backward nodes keep the index, one per in-flight "
                    "micro-batch: 'int64' one int64 a received row, with EP > 1 only (torchtitan 0.3: "
                    "AllToAllTokenDispatcher._permute); 'padded_int32' one int32 a padded row, (R + E_l A) entries for "
                    "R received rows, E_l local experts and the token-group alignment A, on every all-to-all plan, EP 1 "
                    "too (torchtitan main: moe/utils.py _permute with generate_permute_indices); none under op-level "
                    "selective or full recompute (re-made in the re-run layer); null: not priced")
    embedding_wgrad_transient: Bool = Field(
        default=False,
        description="the word embedding's dense weight gradient (vocab / tp x h, in the gradient's dtype) and its "
                    "backward kernel's fp32 partial sums are a moment of their own at the end of a micro-batch's backward "
                    "on the first stage, added into the main gradient and freed by the stack's gradient hook (memory.py "
                    "[eg]; not under FSDP)")
    output_saves_norm_out: Bool = Field(
        default=False,
        description="the output layer's saved input (the final norm's output, all-gathered under SP where "
                    "tp_saves_gathered_input) is counted beside the final norm's saved input")
    pipeline_keeps_logits: Bool = Field(
        default=False,
        description="with PP, the pipeline runtime keeps the last stage's forward output, the bf16 logits (2 B/logit), "
                    "until that micro-batch's stage backward ends (torch.distributed.pipelining fwd_cache)")
    pipeline_keeps_stage_outputs: Bool = Field(
        default=False,
        description="with PP, the pipeline runtime keeps every other stage's forward output, the activation sent to "
                    "the next stage (2 B x T x h, /t under SP), until that micro-batch's stage backward "
                    "(torch.distributed.pipelining fwd_cache); false: freed after the send (Megatron's "
                    "deallocate_output_tensor)")
    loop_holds_logits: Bool = Field(
        default=False,
        description="the training loop keeps its reference to the bf16 logits (2 B a logit) through the whole backward, "
                    "so they are live while the layers' backward runs (memory.py [lg1])")
    block_backward_transients: Bool = Field(
        default=False,
        description="the recompute buffer adds what one block's backward holds at its MLP's backward (gradients of the "
                    "activation product, the output gradient, the down projection's weight gradient, re-run attention "
                    "copies: memory.block_backward_extra)")
    loss_peak_apart: Bool = Field(
        default=False,
        description="the recompute buffer counts only what one layer's backward needs beyond the loss's peak (the loss's "
                    "backward frees its tensors before the first layer's backward re-materialises it); false: the two add")
    optimizer_step_temporaries: dict[OptimizerImpl, Real] = Field(
        default_factory=dict,
        description="the optimizer implementations the stack runs (job field optimizer_implementation) -> temporaries "
                    "the size of the GPU's optimizer parameters, in the optimizer state's dtype, its step holds at once "
                    "(torch foreach Adam(W): 1, exp_avg_sq_sqrt; fused: 0); empty: the stack's one fused optimizer, none. "
                    "The step is a moment of its own, after the backward (memory.py [opt])")
    optimizer_default: Optional[OptimizerImpl] = Field(
        default=None, description="the implementation a job runs when it does not say (one of optimizer_step_temporaries)")
    optimizer_groups: Literal["decay_then_no_decay", "decay_halves_by_count"] = Field(
        default="decay_then_no_decay",
        description="the optimizer parameter groups the model code hands the optimizer, in order (what DeepSpeed's "
                    "BF16_Optimizer flattens one buffer a group and all-reduces bucket by bucket, memory.py [bo]): "
                    "decay_then_no_decay, the weight-decay matrices then the biases and norms (Megatron-DeepSpeed's "
                    "get_param_groups; the first group read as the stage's whole parameters); decay_halves_by_count, "
                    "the weight-decay matrices cut into two halves by tensor count in module order, then the biases "
                    "and norms (BigScience's fork, _get_params_for_weight_decay_optimization: three groups, each half "
                    "priced exactly)")
    expands_kv_heads: Bool = Field(
        default=False,
        description="the model code expands K and V from the KV heads to the query heads before the attention kernel "
                    "(litgpt CausalSelfAttention: expand + reshape copies under GQA), so the kernel saves them at the "
                    "query heads' width for the backward (memory.py [lg2])")
    cp_forward_merge: Bool = Field(
        default=False,
        description="under context parallelism the attention's forward is Transformer Engine's P2P ring "
                    "(AttnFuncWithCPAndKVP2P), which keeps every ring step's output, softmax statistics and received "
                    "K/V until the merge after the loop: a moment of the forward of its own (memory.py [cp3])")
    optimizer_in_backward: Bool = Field(
        default=False,
        description="the stack can step the optimizer inside the backward, per parameter, as each sharded gradient "
                    "arrives (job field early_step_in_backward: torchtitan [optimizer] early_step_in_backward, "
                    "OptimizersInBackwardContainer; memory.py [es])")
    cp_p2p_backward: list[CPBackwardMoment] = Field(
        default_factory=list,
        description="under context parallelism the attention's backward is Transformer Engine's P2P ring "
                    "(AttnFuncWithCPAndKVP2P.backward) in bf16: its moments (the largest is one attention layer's "
                    "backward beyond its saved tensors, in the recompute buffer; memory.py [cp4]); under fp8 "
                    "attention the recipe's fp8_attention cp_backward replaces them; empty: not priced")
    cp_ring_backward: Optional[Literal["allgather", "alltoall"]] = Field(
        default=None,
        description="under context parallelism the attention's backward is torch's ring attention with this K/V "
                    "rotate method: its fp32 accumulators, the all-gathered (or permuted) K/V and the dK/dV "
                    "all-to-all buffers are a moment of one block's backward (memory.py [cp1]); null: not priced")
    rope_cache: Literal["none", "model", "layer", "model_cp"] = Field(
        default="none",
        description="the rotary embedding's precomputed complex64 table (seq x head_dim / 2 x 8 B), a non-trainable "
                    "buffer: one per model part (each pipeline stage's) or one per attention layer (memory.py [tt9]); "
                    "model_cp: Megatron's lru_cache'd RotaryEmbedding.forward, one fp32 table of the CP rank's share "
                    "of the sequence per model chunk (per MLA layer, at most 32, with multi-latent attention: "
                    "memory.py [mr]); none: not kept (or not priced)")
    tp_saves_gathered_input: Bool = Field(description="with SP, the linears after a norm save their all-gathered input "
                                                      "(DTensor) instead of re-gathering it in backward (Megatron); "
                                                      "false: the backward's re-gathers for the wgrad GEMMs are priced "
                                                      "in tp_comm (step.py [35], tp_wgrad_regather_s); true also: "
                                                      "the output layer's input-gradient collective runs synchronously "
                                                      "(DTensor's redistribute), false: async beside its wgrad GEMM "
                                                      "(Megatron's, step.py [36])")
    sources: list[str] = Field(min_length=1)

    @field_validator("te_version")
    @classmethod
    def _te_version_read(cls, v):
        """A release planner/te_version.py reads (1.6 on; a job's te_version is checked so in plan)."""
        from .te_version import TE_OLDEST, te_release, te_too_old

        if v is not None and te_release(v) < TE_OLDEST:
            raise ValueError(te_too_old(v))
        return v

    @model_validator(mode="after")
    def _fp8_bytes(self) -> "MemoryReporting":
        bad = {k: v for k, v in self.fp8_saved_bytes.items() if not 0.0 < v <= 2.0}
        if bad:
            raise ValueError(f"fp8_saved_bytes must lie in (0, 2] bytes per element (bf16 is 2): {bad}")
        bad_t = {k: v for k, v in self.optimizer_step_temporaries.items() if v < 0}
        if bad_t:
            raise ValueError(f"optimizer_step_temporaries must be >= 0: {bad_t}")
        if (self.optimizer_default is None) != (not self.optimizer_step_temporaries) or (
                self.optimizer_default is not None and self.optimizer_default not in self.optimizer_step_temporaries):
            raise ValueError("optimizer_default must name one of optimizer_step_temporaries (both set, or neither)")
        if self.tp_overlap_buffers == "userbuffers" and self.te_version is None:
            raise ValueError("tp_overlap_buffers userbuffers needs te_version: Transformer Engine's userbuffers are "
                             "counted by release (planner/te_version.py)")
        return self


class StackDefaults(BaseModel):
    """Settings a job inherits from its stack when it does not say."""

    model_config = Strict
    torch_compile: Bool
    tp_comm_overlap: Bool
    dp_comm_overlap: Bool
    fp8_recipe: Optional[str] = None
    microbatches_per_step: Literal["from_micro_batch", "pp"] = Field(
        description="from_micro_batch: micro-batch size given (1 when not); pp: the local batch splits into pp micro-batches "
                    "(torchtitan's default)")
    bytes_per_param: BppPreset
    moe_dispatcher: Literal["alltoall", "allgather", "deepep", "deepep_ll", "hybridep"] = Field(
        default="alltoall", description="the MoE token dispatcher a job runs when it does not say (planner/dispatch.py)")
    moe_permute_fusion: Optional[Bool] = Field(
        default=None, description="the MoE token permutation a job runs when it does not say: true Transformer Engine's "
                                  "fused kernels, false the unfused torch ops (planner/layers/moe.py unfused_dispatch_bytes); "
                                  "null: the stack has no such switch (priced fused; the job field is refused)")
    moe_router_fusion: Optional[Bool] = Field(
        default=None, description="the MoE router top-k a job runs when it does not say (as moe_permute_fusion)")
    moe_grouped_gemm: Optional[Bool] = Field(
        default=None, description="the routed experts as one grouped GEMM (job moe_grouped_gemm) where a job does not say: "
                                  "true Transformer Engine's GroupedLinear, its workspaces memory.te_grouped_gemm_streams; "
                                  "null: the stack has no such switch (off: no grouped-GEMM workspaces priced)")
    moe_experts_kernel: Optional[str] = Field(
        default=None, description="what the stack's routed experts run where it has no moe_grouped_gemm switch (null "
                                  "above), with its source: a job's moe_grouped_gemm (--moe-grouped-gemm / "
                                  "--no-moe-grouped-gemm) is refused naming it (plan.moe_dispatch_settings)")
    moe_hybridep_capacity_factor: Optional[Real] = Field(
        default=None, ge=0.0, le=1.0,
        description="HybridEP's non-blocking capacity factor a job on moe_dispatcher hybridep runs when it does not say "
                    "(job moe_hybridep_capacity_factor; 0: the blocking dispatch): the factor the trainer's shipped "
                    "configs build it with (torchtitan 0.3: config_registry.py's deepseek_v3_*_hybridep, 1.0); null: "
                    "the blocking dispatch. Only where runs.hybridep_non_blocking; cite it in sources")
    moe_capacity_factor: Optional[Real] = Field(
        default=None, ge=1.0, description="the MoE capacity factor a job runs when it does not say (job "
                                          "moe_capacity_factor: tokens beyond it dropped); null: dropless")
    moe_pad_to_capacity: Optional[Bool] = Field(
        default=None, description="with a capacity factor, whether every expert's input is padded to it when the job "
                                  "does not say (job moe_pad_to_capacity); null: false")
    account_for_embedding_in_pipeline_split: Bool = Field(
        default=False, description="the pipeline split a job that leaves account_for_embedding_in_pipeline_split out "
                                   "runs: true where the trainer's own default counts the embedding as a layer of the "
                                   "split (torchtitan's pipeline_parallel_first_stage_less_layers = 1), false where it "
                                   "counts it only on a flag (Megatron-Core's --account-for-embedding-in-pipeline-split). "
                                   "A job's value, false included, wins (plan._job_defaults); unlike "
                                   "Stack.pipeline_ends_as_layers the trainer has a setting that turns it off; cite it "
                                   "in sources")
    account_for_loss_in_pipeline_split: Bool = Field(
        default=False, description="as account_for_embedding_in_pipeline_split, for the output layer and the loss "
                                   "(torchtitan's pipeline_parallel_last_stage_less_layers = 1); a job that gives "
                                   "loss_layers_in_pipeline_split keeps its own")
    chunked_loss: Bool = Field(
        default=False, description="the loss a job that leaves chunked_loss out runs: true, the stack's chunked "
                                   "cross-entropy (memory.chunked_loss_chunks must be set; torchtitan 0.3.0's config "
                                   "functions wrap the loss in ChunkedLossWrapper); false, the plain loss")
    fsdp_symm_mem: Bool = Field(
        default=False, description="FSDP's all-gather staging buffers in symmetric memory (the job's fsdp_symm_mem, laid "
                                   "here by plan.resolve for the start-up rules: TORCHTITAN_FSDP_SYMM_MEM_SM90)")
    spmd_typechecking: Bool = Field(
        default=False, description="the training step runs under SPMD type checking (the job's spmd_typechecking where its "
                                   "spmd_backend is spmd_types, laid here by plan.resolve for the start-up rules: "
                                   "TORCHTITAN_SPMD_TYPECHECK_PP / _SAC_FLEX)")
    deterministic_mode: Bool = Field(
        default=False, description="the job's deterministic_mode, laid here by plan.resolve for the start-up rules "
                                   "(MEGATRON_DETERMINISTIC_*: runs.deterministic_refuses)")
    deterministic_refused: list[DeterministicSetting] = Field(
        default_factory=list,
        description="the job settings a deterministic job sets among those its trainer refuses with it (the job's "
                    "cross_entropy_fusion, attention_kernel flash2, use_flash_attn), laid here by plan.resolve for the "
                    "start-up rules MEGATRON_DETERMINISTIC_CE_FUSION / _FLASH / _USE_FLASH_ATTN; the TP overlap is the "
                    "plan's (PlanArrays.tpo), the experts the model's (_MOE)")
    cp_load_balancer: Optional[str] = Field(
        default=None, description="the CP load balancer the job names (the job's cp_load_balancer, laid here by "
                                  "plan.resolve for the start-up rules: TORCHTITAN_CP_PTRR_MASK, and "
                                  "TORCHTITAN_CP_LOAD_BALANCER_NAME for a name torch's cp_shard does not build); null: "
                                  "the stack's own")
    bf16_layers_max: Int = Field(
        default=0, ge=0, description="the larger of the job's bf16_layers_at_start and bf16_layers_at_end (laid here by "
                                     "plan.resolve for the start-up rules: MEGATRON_BF16_LAYERS_STAGE); 0: none")
    recompute_layers_set: Optional[Int] = Field(
        default=None, gt=0, description="the job's recompute_layers (a GPU's fully recomputed layers, laid here by "
                                        "plan.resolve for the start-up rule MEGATRON_RECOMPUTE_LAYERS_VPP); null: none")
    dp_param_gather_overlap_set: Optional[Bool] = Field(
        default=None, description="true where the job's dp_param_gather_overlap is true (Megatron --overlap-param-gather "
                                  "as stated; laid here by plan.resolve for the start-up rule MEGATRON_PARAM_GATHER); "
                                  "null: the job leaves it out or sets it false")
    attention_backend: Optional[AttentionBackend] = Field(
        default=None, description="the attention module the stack's model code builds when the job does not say (job field "
                                  "attention_backend; one of runs.attention_backends); null: the stack names none (the "
                                  "job field is refused); cite it in sources")
    attention: Literal["flash", "eager"] = Field(
        default="flash", description="the core attention a job runs when it does not say (job field attention; one of "
                                     "runs.attention cores where the entry lists them), listed among the settings "
                                     "taken from the stack where it is not the planner's flash")
    fp16: Bool = Field(
        default=False, description="the 16-bit dtype a job runs when it does not say (job field fp16): true fp16, "
                                   "false bf16 (one of runs.half_dtypes where the entry lists them), listed among "
                                   "the settings taken from the stack where true")
    fp8_grouped_experts: Bool = Field(
        default=True, description="with fp8 / nvfp4, the routed experts' grouped GEMMs run in the plan's low precision "
                                  "when the job does not say (job field fp8_grouped_experts): true where the stack's "
                                  "low-precision context converts the experts with the rest (Megatron-Core: TE "
                                  "GroupedLinear under the layer's fp8 autocast), false where the experts stay bf16 unless "
                                  "the job names a converter for them (torchtitan: [quantize.grouped_mm.*]); cite it in "
                                  "sources")
    precision_aware_fused_adam: Optional[Bool] = Field(
        default=None, description="not a stack file's setting (null there): the job's precision-aware optimizer as TE's "
                                  "FusedAdam on the GPU (plan.precision_aware with offload_optimizer none; under the CPU "
                                  "offload Megatron's HybridDeviceOptimizer runs in its place), laid on the stack by "
                                  "plan.stack_for_states where start-up rule PRECISION_AWARE_MFSDP reads it")
    mla_down_proj_fusion: Optional[Bool] = Field(
        default=None, description="not a stack file's setting (null there): the job's mla_down_proj_fusion, laid on the "
                                  "stack by plan.resolve where start-up rule MEGATRON_MLA_FUSION_TP reads it")
    mfsdp_v2: Optional[Bool] = Field(
        default=None, description="not a stack file's setting (null there): the job's mfsdp_v2, laid on the stack by "
                                  "plan.resolve where start-up rule MEGATRON_FSDP_V2_LAYOUT reads it")
    te_version: Optional[str] = Field(
        default=None, description="not a stack file's setting (null there): the job's te_version (the Transformer "
                                  "Engine release the run used), laid on the stack by plan.resolve where start-up rules "
                                  "MEGATRON_TP_OVERLAP_QUANTIZER and MEGATRON_TE_RECIPE_RELEASE read it "
                                  "(te_version.run_te_version; null: the stack's memory.te_version)")
    muon_qkv_split: Optional[Bool] = Field(
        default=None, description="not a stack file's setting (null there): the job's Muon with its q / k / v split "
                                  "(optimizer muon and muon_split_qkv), laid on the stack by plan.stack_for_states "
                                  "where start-up rule MUON_QKV_SPLIT_TP reads it")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _job_laid(self):
        if self.precision_aware_fused_adam is not None:  # model_copy (stack_for_states) does not validate
            raise ValueError("defaults.precision_aware_fused_adam is the job's (laid by plan.stack_for_states from "
                             "precision_aware_optimizer and offload_optimizer), not a stack file's setting: leave it out")
        if self.mla_down_proj_fusion is not None:
            raise ValueError("defaults.mla_down_proj_fusion is the job's (laid by plan.resolve), not a stack file's "
                             "setting: leave it out")
        if self.mfsdp_v2 is not None:
            raise ValueError("defaults.mfsdp_v2 is the job's (laid by plan.resolve), not a stack file's setting: leave it "
                             "out")
        if self.te_version is not None:
            raise ValueError("defaults.te_version is the job's (laid by plan.resolve), not a stack file's setting: give "
                             "the stack's release as memory.te_version")
        if self.muon_qkv_split is not None:
            raise ValueError("defaults.muon_qkv_split is the job's (laid by plan.stack_for_states from optimizer and "
                             "muon_split_qkv), not a stack file's setting: leave it out")
        return self


Sharding = Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
Schedule = Literal["1f1b", "interleaved", "gpipe", "zb-h1", "dualpipe"]


class ModeSetting(BaseModel):
    """A job setting the trainer runs at one value only under a sharding mode (issue 22): a job
    that leaves the setting out runs the mode at `value` (priced and exported so; `unset: switch`)
    or counts as the job's default (`unset: default`: the mode is the job's only where the job
    gives `value` itself); one that sets the other value is refused under the mode (`other:
    refused`: the trainer's start-up check fails, so `fit` plans such a job without the mode) or
    runs `value` in its place (`other: overridden`: the trainer turns it off with a warning,
    priced as it runs, with a note)."""

    model_config = Strict
    setting: Literal["gradient_accumulation_fusion", "fp8_param_gather", "fp16"] = Field(
        description="the Job field (Megatron --no-gradient-accumulation-fusion, --fp8-param-gather, --fp16)")
    value: Bool = Field(description="the value the trainer runs the mode with")
    other: Literal["refused", "overridden"] = Field(description="what the trainer does with the other value")
    instead: Optional[str] = Field(
        default=None, pattern=r"^[a-z0-9_]+$",
        description="other: refused: the stack's sharding mode the trainer runs in this one's place for a job with the "
                    "other value (the same settings build another optimizer: DeepSpeed's bf16 at ZeRO stage 0 is its "
                    "BF16_Optimizer, mode bf16_optimizer), named in the refusal's hint; null: the trainer's check fails")
    unset: Literal["switch", "default"] = Field(
        default="switch",
        description="a job that leaves the setting out: switch, the mode runs it at value (Megatron's --use-torch-fsdp2 "
                    "without the gradient-accumulation fusion, whatever the job leaves out); default, it counts as the "
                    "job's default (MODE_SETTING_DEFAULTS: fp16 false, the planner's bf16), so a mode whose value is not "
                    "the default is the job's only where the job gives value itself: with other refused, `fit` plans a "
                    "job leaving it out without the mode, `check` does not suggest it, and a job naming it is refused "
                    "(DeepSpeed's zero0, fp16's FP16_Optimizer: a job that says nothing is bf16, not fp16). default: "
                    "only with other refused and a value other than the job's default (else it changes nothing)")
    source: str = Field(min_length=1, description="the trainer's check at a commit, file, lines and its message")

    @model_validator(mode="after")
    def _instead_refused(self):
        if self.instead is not None and self.other != "refused":
            raise ValueError(f"job setting {self.setting}: instead names the mode run in place of a refused one "
                             "(other: refused)")
        if self.unset == "default" and (self.other != "refused" or self.value == MODE_SETTING_DEFAULTS[self.setting]):
            d = MODE_SETTING_DEFAULTS[self.setting]
            raise ValueError(f"job setting {self.setting}: unset default (a job leaving it out counts as "
                             f"{str(d).lower()}, the job's default) is for a mode that refuses that default (other: "
                             f"refused, value {str(not d).lower()}): an overridden setting runs the mode's value "
                             "whatever the job says, and at the default value a job leaving it out runs the mode already")
        return self


class StepGrads(BaseModel):
    """What a sharding mode's optimizer step does with the gradients before the update (memory.py [sg], term
    step_grad_copies): the copies it makes of the rank's optimizer partition of them, and which of them it still
    holds. A moment of the step; below FSDP, and under FSDP an fp32 copy only (Megatron-FSDP's update_main_grads;
    DeepSpeed ZeRO-3's is [z3s], FSDP2's [opt])."""

    model_config = Strict
    flat: Bool = Field(description="the partition's gradients flattened into one new tensor in their own dtype "
                                   "(DeepSpeed stage_1_and_2.py step: self.flatten(averaged_gradients[i]), a torch.cat)")
    fp32: Bool = Field(description="an fp32 copy of the partition's gradients where they are not fp32 (bytes_per_param."
                                   "gradients < 4): DeepSpeed's .to(fp32 dtype), Megatron's main_grad.float(); a no-op on "
                                   "fp32 gradients")
    flat_fp32: Bool = Field(default=False, description="flat and fp32: each gradient converted to fp32 first and the "
                                                       "fp32 copies flattened (DeepSpeed's FP16_Optimizer step: "
                                                       "_flatten_dense_tensors([p.grad.to(fp32) ...])), so the flat "
                                                       "tensor is fp32 too, 4 B beside the copies' 4 B; false: the flat "
                                                       "copy in the gradients' dtype, then its fp32 copy")
    partition_only: Bool = Field(description="only the rank's partition of the gradients is still allocated at the "
                                             "step (DeepSpeed's epilogue frees the rest before it: ZeRO-1's full "
                                             "gradients); false: every gradient the states hold (Megatron's buffer)")
    norm_fp64: Bool = Field(default=False, description="before the copies, the gradient norm takes each parameter's "
                                                       "piece of the partition in fp64, one at a time (DeepSpeed "
                                                       "get_grad_norm_direct: g.data.double()): 8 B x at most "
                                                       "min(the stage's largest parameter, the partition)")
    ipg_buffer: Bool = Field(default=False, description="the optimizer's backward allocates the contiguous-gradient "
                                                        "(IPG) buffer, reduce_bucket_size elements in the model dtype, "
                                                        "two with overlap_comm, on the stage whose engine runs it (the "
                                                        "loss's) (DeepSpeed stage_1_and_2.py backward; memory.py [zb])")
    reduction: Optional[Literal["backward", "after_backward"]] = Field(
        default=None, description="where the gradients are reduced into the rank's partition buffer (memory.py [zb]): "
                                  "in every backward, a new partition buffer beside the one accumulated over the "
                                  "earlier micro-batches (DeepSpeed ZeRO-2, partition_gradients); or once after the "
                                  "last backward, beside the full gradients (DeepSpeed ZeRO-1); null: not priced")
    fp32_decoupled: Optional[Literal["precision_aware", "te_master"]] = Field(
        default=None, description="no fp32 copy (fp32) where the job runs the stack's precision-aware optimizer (the job's "
                                  "precision_aware_optimizer, plan.Settings.precision_aware), whose optimizer reads the "
                                  "gradient shard in its own dtype as decoupled_grad: precision_aware, whenever it runs "
                                  "(Megatron-FSDP's use_decoupled_grad: update_main_grads skips the .to(fp32)); te_master, "
                                  "only where TE's FusedAdam also holds the master weights (Megatron's distributed "
                                  "optimizer: use_precision_aware_optimizer_no_fp8_or_ds_fp8, runs.low_precision_moments."
                                  "te_master, plan.Settings.te_master); null: the copy whatever the optimizer")
    moe_group_params: Optional[Real] = Field(
        default=None, gt=0, description="the routed experts' parameters sit in optimizer groups of their own of at "
                                        "most this many elements a rank (one parameter above it alone), each "
                                        "partitioned over the expert-data-parallel group and stepped apart, its "
                                        "copies freed before the next group's (DeepSpeed moe/utils.py "
                                        "split_params_into_different_moe_groups_for_optimizer max_group_size; "
                                        "memory.py [sg]); null: one step over every partition at once")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _flat_fp32(self):
        if self.flat_fp32 and not (self.flat and self.fp32):
            raise ValueError("step_grads flat_fp32: the fp32 copies flattened, so flat and fp32 both")
        return self


class EmbeddingGradShard(BaseModel):
    """What the pipeline's word-embedding gradient all-reduce (Stack.pipeline_tied_grad_allreduce, step.py [20]) moves
    under a sharding mode whose optimizer parameter holds the gradient as a DTensor shard (Megatron-FSDP): the rank's
    shard of the embedding's own bucket, not the whole V/tp x h main gradient. Megatron-LM @d98e8a64 (and Megatron-Core
    905c0e386) finalize_model_grads.py l. 250-258: under use_megatron_fsdp the tensor all-reduced is param.grad's
    _local_tensor; update_main_grads installs as param.grad the rank's (virtual) shard of the main gradient buffer
    (get_item only_shard, at every sharded level), converted to the fp32 main weight's dtype; the shared embedding
    copies are each a bucket of their own (_get_parameter_groups _does_param_require_new_bucket), padded to a
    multiple of the shard group x hidden: ceil(V/tp / n) x h elements a rank."""

    model_config = Strict
    skipped_decoupled: Bool = Field(description="the job's precision-aware optimizer (plan.Settings.precision_aware) "
                                                "installs the shard as decoupled_grad and leaves param.grad None, so "
                                                "the all-reduce returns without running (Megatron-LM @d98e8a64: "
                                                "megatron_fsdp_use_decoupled_grad); false: it runs whatever the "
                                                "optimizer (Megatron-Core 905c0e386: nothing sets the buffer's "
                                                "use_precision_aware_optimizer)")
    sources: list[str] = Field(min_length=1)


class ShardingMode(BaseModel):
    """One data-parallel sharding mode a stack runs (issue 22): the stack's own name for it,
    its ZeRO level (`level`: which states it shards at rest, over which group), when it moves
    them (grad_reduce, reshard_after_forward, replica_reduce: each left out takes the level's
    and the stack's FSDPSpec default; planner/stacks.py sharding_traits), and how the trainer
    spells it."""

    model_config = Strict
    name: str = Field(pattern=r"^[a-z0-9_]+$", description="the mode's name (a job's sharding_mode)")
    level: Sharding = Field(description="what it shards at rest: none | zero1 (optimizer states) | zero2 (+ gradients) | "
                                        "fsdp (+ weights) | hsdp (fsdp within a shard group, replicated across)")
    grad_reduce: Optional[Literal["microbatch", "step"]] = Field(
        default=None, description="the gradients' reduction (reduce-scatter over the shard group, or DDP's all-reduce) "
                                  "after every micro-batch's backward, or once per step after the last (null: zero2 "
                                  "microbatch, none/zero1 step, fsdp/hsdp the stack's fsdp.reduce_per_microbatch)")
    reshard_after_forward: Optional[Bool] = Field(
        default=None, description="fsdp/hsdp: each unit's weights are freed after its forward and all-gathered again "
                                  "for its backward (false: kept unsharded from the forward to the backward, gathered "
                                  "once per micro-batch; null: true, under PP the stack's fsdp.reshard_after_forward_with_pp)")
    replica_reduce: Optional[Literal["microbatch", "step"]] = Field(
        default=None, description="hsdp: the all-reduce of the sharded gradients across the replicas, with every "
                                  "reduce-scatter or once per step at the last micro-batch (null: with every reduce-scatter)")
    optimizer_instances: Bool = Field(
        default=False, description="zero1: the optimizer can shard over groups of shard_group of the dp ranks, replicated "
                                   "across the dp / shard_group groups (Megatron-LM --num-distributed-optimizer-instances "
                                   "N = dp / shard_group: the gradients reduce-scattered within the group, the shard "
                                   "all-reduced across the groups, the weights all-gathered within it); false: the job's "
                                   "shard_group is refused under the mode (plan rule SHARD_NOT_HSDP)")
    outer_optim: Bool = Field(
        default=False, description="hsdp: the mode can also shard the fp32 main weights and Adam's moments over the "
                                   "replicas (the whole dp x cp group), the 16-bit weights and the main gradients staying "
                                   "sharded over the shard group, where the job sets mfsdp_outer_optim (Megatron-FSDP "
                                   "--outer-dp-sharding-strategy optim: the hybrid-FSDP helper buffers, memory.py [oo]); "
                                   "false: the job's mfsdp_outer_optim is refused under the stack")
    label: Optional[str] = Field(
        default=None, min_length=1,
        description="the mode in the stack's own words where its level's name would read as another mode: fit's "
                    "sharding column, explain's plan line and the JSON plan's sharding_label beside sharding (the "
                    "level, kept) and sharding_mode (Megatron's megatron_fsdp_optim_grads, 'Megatron-FSDP "
                    "optim_grads': it shards the gradients, the zero2 level, but it is not DeepSpeed's ZeRO-2); null: "
                    "the level's name, or the mode's where it is not its level's first")
    mfsdp_v2: Bool = Field(
        default=False, description="fsdp: the mode runs as Megatron-FSDP v2 where the job sets mfsdp_v2 (Megatron "
                                   "--megatron-fsdp-version 2, FullyShardedDataParallelV2: its experimental buffers, "
                                   "memory.py [v2]); false: the job's mfsdp_v2 refuses the mode (start-up rule "
                                   "MEGATRON_FSDP_V2_LAYOUT) and a stack with no such mode refuses the job's mfsdp_v2")
    grad_accum_bytes: Real = Field(
        default=0.0, ge=0, description="zero1: bytes a parameter of a gradient accumulation buffer over the whole stage, "
                                       "never sharded, beside the model-dtype gradients (memory.py [bo]: DeepSpeed's "
                                       "BF16_Optimizer fp32_groups_gradients_flat, 4); 0: none")
    grad_allreduce: Bool = Field(
        default=False, description="zero1: the gradients are all-reduced whole over the data-parallel ranks (not "
                                   "reduce-scattered to the optimizer's partitions) before the step, and the updated "
                                   "weights all-gathered after it (step.py dp traffic: DeepSpeed's BF16_Optimizer, "
                                   "engine.py allreduce_bucket then all_gather_dp_groups); fsdp: each gradient bucket "
                                   "is all-reduced whole over the shard group in place of its reduce-scatter, every "
                                   "rank keeping its partition (step.py [21]: DeepSpeed ZeRO-3 of April 2021 at its "
                                   "defaults, stage3.py @a12aaedc reduce_ipg_grads -> buffered_reduce_fallback)")
    allreduce_bucket_params: Real = Field(
        default=0.0, ge=0, description="zero1 with grad_accum_bytes and grad_allreduce: the engine's all-reduce bucket "
                                       "of the accumulation buffers after the backward, elements (memory.py [bo]: "
                                       "DeepSpeed's allreduce_no_retain gathers whole flat groups until past it, and "
                                       "allreduce_bucket flattens a bucket of several, a copy in the buffer's dtype, "
                                       "then casts it to the communication dtype, the stack's fsdp.grad_reduce_bytes, "
                                       "a moment after the backward: term bf16_reduce_copy); 0: not priced")
    step_grads: Optional[StepGrads] = Field(
        default=None, description="none / zero1 / zero2 (fsdp / hsdp: an fp32 copy only): the optimizer step's copies of "
                                  "the gradients (memory.py [sg]); null: none made (FSDP / ZeRO-3 modes: memory.py "
                                  "[opt], [z3s])")
    grads_in_job_dtype: Bool = Field(
        default=False, description="the mode keeps its own main gradients in the job's gradient dtype (bytes_per_param."
                                   "gradients) at every level and reduces them in it: its data-parallel reduction, "
                                   "the gathered unit's unsharded gradient and a reduce-scatter queue's buckets move "
                                   "and hold the job's gradient bytes, not fsdp.grad_reduce_bytes / "
                                   "zero2_reduce_queue_grad_bytes (Megatron-FSDP: --megatron-fsdp-main-grads-dtype "
                                   "and --megatron-fsdp-grad-comm-dtype, memory.py [mg]); false: the stack's fsdp spec")
    embedding_grad_shard: Optional[EmbeddingGradShard] = Field(
        default=None, description="the pipeline's word-embedding gradient all-reduce (step.py [20]) moves the rank's "
                                  "shard of the optimizer's gradient, ceil(V/tp / shard group) x h elements in fp32 (the "
                                  "main weight's dtype), not the whole V/tp x h main gradient (Megatron-FSDP: "
                                  "finalize_model_grads all-reduces weight.grad._local_tensor); null: the whole gradient")
    tp_pp_dp_mapping: Bool = Field(
        default=True, description="the trainer runs the mode with Megatron's tp-pp-dp mapping (rank order tp-cp-pp-dp, "
                                  "--use-tp-pp-dp-mapping); false: it asserts the mapping off under the mode "
                                  "(Megatron-Bridge's Megatron-FSDP), start-up rule STACK_MODE_TP_PP_DP")
    main_grads_bytes: Optional[Real] = Field(
        default=None, gt=0, description="the trainer builds the mode's main gradients in this many bytes a parameter "
                                        "whatever the job's gradient dtype says (Megatron-Core 905c0e386's Megatron-FSDP "
                                        "under Megatron-Bridge: fp32, 4); a job whose bytes_per_param.gradients differ "
                                        "is planned without the mode, and one naming it is refused (plan.stack_for_states); "
                                        "null: the job's gradient bytes")
    reduce_queue_units: Optional[Real] = Field(
        default=None, ge=0, description="the mode's layer units' unsharded gradients wait in the stack's reduce-scatter "
                                        "queue (Megatron-FSDP's GradReducePipeline; the stack's fsdp."
                                        "zero2_reduce_queue_params, needed): its capacity in parameters is max(that, "
                                        "this x the average layer unit a GPU) (0: optim_grads, the bucket size or 1e9; "
                                        "2: optim_grads_params, twice the average FSDP unit; megatron_fsdp.py l. "
                                        "420-443), priced at the zero2, fsdp and hsdp levels alike (memory.py [rs], "
                                        "term zero2_reduce_input). null: no queue (FSDP2's one reduce-scatter input at "
                                        "a time where fsdp.zero2_unit_reduce says so, the fsdp levels' fsdp_unit_grads)")
    dp_comm_overlap: Optional[Bool] = Field(
        default=None, description="the DP overlap a job that leaves dp_comm_overlap out runs under this mode, where the "
                                  "trainer's default under it differs from the stack's defaults.dp_comm_overlap "
                                  "(DeepSpeed's overlap_comm: true at ZeRO stage 3, false below; plan.mode_dp_overlap); "
                                  "null: the stack's default")
    dp_comm_overlap_runs: Bool = Field(
        default=True, description="the DP overlap (a job's dp_comm_overlap) acts under this mode; false: the mode's "
                                  "optimizer has no overlapped reduction whatever the job says (DeepSpeed reads "
                                  "overlap_comm only to build its ZeRO optimizer: stage 0's FP16_Optimizer and the "
                                  "BF16_Optimizer reduce after the backward), so its plans are priced and shown without "
                                  "it (plan.dp_overlap)")
    job_settings: list[ModeSetting] = Field(
        default_factory=list, description="job settings the trainer runs at one value only under this mode "
                                          "(planner/stacks.py mode_setting, plan.stack_for_settings)")
    spelling: str = Field(description="the trainer's own flags or keys for it")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _settings_priced(self):
        """A mode that runs a job setting other than the job's default (a job leaving it out runs
        the mode's value) must be an fsdp or hsdp one: below FSDP the cost models read
        gradient_accumulation_fusion and fp8_param_gather per job only (step.py [11] in the layer
        times grouped without the mode, [12]; memory.py [uf], [ow], [11]), under FSDP they price
        neither but TE's cached dummy weight gradients of the fused accumulation, which read the
        plan's mode (memory.py [dw], stacks.mode_value). A refused setting with unset default never
        runs a job away from its own value (a job leaving it out counts as the default and is planned
        without the mode), so it may be fixed at any level. fp16 is priced as bf16 at every level
        (precisions.SAME_PEAK: the same 2-byte width and tensor-core peak; no cost model reads it), so
        any mode may run it at either value (DeepSpeed's zero0 runs fp16 only: stack_db megatron-deepspeed).
        step_grads: below FSDP, and under FSDP an fp32 copy only."""
        if self.grad_accum_bytes > 0 and self.level != "zero1":
            raise ValueError(f"sharding mode {self.name} ({self.level}): grad_accum_bytes is priced "
                             "for zero1 modes only (the BF16_Optimizer's: states partitioned, gradients whole)")
        if self.grad_allreduce and self.level not in ("zero1", "fsdp"):
            raise ValueError(f"sharding mode {self.name} ({self.level}): grad_allreduce is priced for zero1 modes (the "
                             "BF16_Optimizer's) and fsdp ones (ZeRO-3's all-reduced buckets, step.py [21]) only")
        if self.allreduce_bucket_params > 0 and not (self.grad_accum_bytes > 0 and self.grad_allreduce):
            raise ValueError(f"sharding mode {self.name} ({self.level}): allreduce_bucket_params is priced for a zero1 "
                             "mode with grad_accum_bytes and grad_allreduce only (the BF16_Optimizer's buffers "
                             "all-reduced after the backward, memory.py [bo])")
        if self.embedding_grad_shard is not None and self.level == "none":
            raise ValueError(f"sharding mode {self.name} (none): embedding_grad_shard is a shard of the optimizer's "
                             "partition, which a mode sharding nothing has not (Megatron-FSDP no_shard: the whole "
                             "gradient, get_item without only_shard)")
        sg = self.step_grads
        if sg is not None and self.level in ("fsdp", "hsdp") and (
                sg.flat or sg.flat_fp32 or sg.partition_only or sg.norm_fp64 or sg.ipg_buffer or sg.reduction is not None
                or sg.moe_group_params is not None):
            raise ValueError(f"sharding mode {self.name} ({self.level}): step_grads under FSDP is an fp32 copy of the "
                             "rank's gradient shard only (Megatron-FSDP's update_main_grads, memory.py [mg]); an FSDP "
                             "step's other copies: memory.py [opt], DeepSpeed ZeRO-3's [z3s]")
        names = [s.setting for s in self.job_settings]
        if len(set(names)) != len(names):
            raise ValueError(f"sharding mode {self.name}: a job setting listed twice in job_settings")
        for s in self.job_settings:
            if s.setting in UNPRICED_MODE_SETTINGS:
                continue
            # (unset default: the mode runs only a job that gives its value itself, priced per job as it gives it)
            runs_other = s.other == "overridden" or (s.value != MODE_SETTING_DEFAULTS[s.setting] and s.unset == "switch")
            if runs_other and self.level not in ("fsdp", "hsdp"):
                raise ValueError(f"sharding mode {self.name} ({self.level}) runs {s.setting} {str(s.value).lower()} for a "
                                 "job that says otherwise or nothing: priced per job below FSDP, so only an fsdp or hsdp "
                                 "mode may (refuse the other value, with unset default: a job leaving it out counts as "
                                 "the default and is planned without the mode)")
        return self


# a job's value of a ModeSetting's field where it leaves the field out (plan.Settings)
MODE_SETTING_DEFAULTS = {"gradient_accumulation_fusion": True, "fp8_param_gather": False, "fp16": False}
# ModeSetting fields no cost model reads (fp16: priced as bf16, precisions.SAME_PEAK): a mode below FSDP may run them
# at a value other than the job's default (ShardingMode._settings_priced)
UNPRICED_MODE_SETTINGS = frozenset({"fp16"})


class ScheduleSpelling(BaseModel):
    """A pipeline schedule the stack runs, in the trainer's spelling."""

    model_config = Strict
    schedule: Schedule
    microbatches: Literal["multiple_of_pp", "multiple_of_rounds", "any"] = Field(
        default="multiple_of_pp",
        description="interleaved: the micro-batches per step the schedule runs. multiple_of_pp: a multiple of pp "
                    "(Megatron-LM's default of pp contiguous micro-batches per virtual stage, plan rule INTERLEAVED_M); "
                    "multiple_of_rounds: m divisible by its rounds max(1, m // pp), in groups of N = m / rounds "
                    "(torch.distributed.pipelining's flexible ScheduleInterleaved1F1B: pp = 4 runs m = 3 or 10, not 9); "
                    "any: any count, fewer than pp included (Llama 3's schedule with N contiguous micro-batches set "
                    "freely, arXiv:2407.21783 sec. 3.3.2); priced with pipeline.bubble_fraction either way")
    spelling: str
    sources: list[str] = Field(min_length=1)


class RankOrderSpelling(BaseModel):
    """A rank order (mesh axes innermost first, the planner's names) the stack builds. An
    order that differs only where a size-1 axis sits is the same order."""

    model_config = Strict
    order: str = Field(description="planner rank order, innermost first, e.g. tp-cp-dp-pp")
    spelling: str
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _axes(self) -> "RankOrderSpelling":
        if sorted(self.order.split("-")) != ["cp", "dp", "pp", "tp"]:
            raise ValueError(f"order {self.order!r} must name tp, cp, pp and dp once each")
        return self


class AttentionKernelRule(BaseModel):
    """Which attention kernel the stack runs on a GPU: the first rule whose compute-capability
    range holds the hardware entry's compute_capability (both ends inclusive; null: open)."""

    model_config = Strict
    kernel: AttentionKernel
    min_compute_capability: Optional[str] = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")
    max_compute_capability: Optional[str] = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")

    def holds(self, capability: Optional[tuple[int, int]]) -> bool:
        if capability is None:
            return False

        def cc(text):
            major, minor = text.split(".")
            return int(major), int(minor)
        lo, hi = self.min_compute_capability, self.max_compute_capability
        return (lo is None or capability >= cc(lo)) and (hi is None or capability <= cc(hi))


class LowPrecisionMoments(BaseModel):
    """The stack's precision-aware optimizer (Megatron-LM's, TE's FusedAdam), the only way it keeps Adam moments
    below fp32 (a bytes_per_param with optimizer < 8 B, e.g. bf16-moments) and what a job's
    precision_aware_optimizer runs: the sharding modes it runs under, where TE's FusedAdam holds the master weights
    (and reads decoupled_grad) and where it keeps fp32 ones as 16-bit remainders."""

    model_config = Strict
    sharding_modes: list[str] = Field(min_length=1, description="the sharding modes (names in runs.sharding) it runs under; "
                                                                "a job with such moments plans only these (plan.stack_for_states)")
    master_remainders: list[str] = Field(
        default_factory=list,
        description="the precisions and fp8 recipes (bf16, delayed, ...) under which it keeps fp32 master weights as 16-bit "
                    "remainders beside bf16 weights (TE FusedAdam store_param_remainders): 2 B of master a parameter")
    te_master: list[str] = Field(
        default_factory=list,
        description="the precisions and fp8 recipes (bf16, delayed, ...) under which TE's FusedAdam holds the master "
                    "weights and the optimizer reads the gradient shard in its own dtype (Megatron's "
                    "use_precision_aware_optimizer_no_fp8_or_ds_fp8; with main weights below fp32 under any recipe): "
                    "where step_grads.fp32_decoupled te_master makes no fp32 copy; master_remainders a subset")
    own_master_modes: list[str] = Field(
        default_factory=list,
        description="the sharding modes (among sharding_modes) under which the optimizer steps the mode's own main weights "
                    "and TE's FusedAdam holds none (Megatron-LM @d98e8a64, Megatron-FSDP v1: optimizer/__init__.py "
                    "l. 1147-1161 sets FusedAdam's master_weights False; its parameters are Megatron-FSDP's fp32 main "
                    "weight shards): no 16-bit remainders there (master_remainders does not apply), the master the job's "
                    "bytes_per_param.master (plan.Settings.remainders, memory.master_bytes)")
    no_decoupled_grad_modes: list[str] = Field(
        default_factory=list,
        description="the sharding modes (among sharding_modes) that never install the optimizer's gradient as "
                    "decoupled_grad, which TE's FusedAdam reads alone where the trainer builds it with use_decoupled_grad "
                    "(the plan's precision or fp8 recipe among te_master, or a master below 4 B, with no CPU offload): "
                    "FusedAdam then skips every parameter and the job does not train (Megatron-LM 905c0e386's "
                    "Megatron-FSDP); start-up rule PRECISION_AWARE_MFSDP refuses such a plan")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _subsets(self):
        for f in ("own_master_modes", "no_decoupled_grad_modes"):
            bad = [m for m in getattr(self, f) if m not in self.sharding_modes]
            if bad:
                raise ValueError(f"low_precision_moments.{f} {bad}: not among its sharding_modes "
                                 f"({', '.join(self.sharding_modes)})")
        return self


class AbsentRule(BaseModel):
    """A start-up rule (planner/startup.py, by key) that a release of the trainer does not run."""

    model_config = Strict
    rule: str = Field(pattern=r"^[A-Z0-9_]+$", description="the rule's key (planner/startup.py RULES)")
    source: str = Field(min_length=1, description="where the release's code shows the check absent (commit, file, lines)")


class DeterministicRefusal(BaseModel):
    """One setting the stack's trainer refuses beside its deterministic mode (job field deterministic_mode), and the
    date of the trainer commit that added the check: a job whose trainer_date is older runs without it."""

    model_config = Strict
    setting: DeterministicSetting = Field(
        description="tp_comm_overlap (the plan's TP overlap), cross_entropy_fusion (the job's fused cross-entropy), "
                    "flash_attention (the job's attention_kernel flash2: --attention-backend flash), use_flash_attn "
                    "(the job's use_flash_attn: Megatron-LM's --use-flash-attn flag), moe (an MoE model: "
                    "--num-experts), nccl_algo_tokens (the job's nccl_algo with a comma-separated token outside Ring, "
                    "CollnetDirect, CollnetChain, ^NVLS), nccl_algo_choice (the job's nccl_algo not exactly one of "
                    "Tree, Ring, CollnetDirect, CollnetChain, ^NVLS)")
    since: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                       description="the date (YYYY-MM-DD) of the trainer commit that added the check (git log -S)")
    until: Optional[str] = Field(
        default=None, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
        description="the date (YYYY-MM-DD) of the trainer commit that removed the check: a job whose trainer_date is "
                    "that day or later, or that gives none (the stack's own commit, later still), runs without it; "
                    "default: the check is the stack commit's own")
    source: str = Field(min_length=1, description="the check: repository, commit, file and lines, and the commit that "
                                                  "added it (and the one that removed it, with until)")

    @model_validator(mode="after")
    def _dated_in_order(self):
        if self.until is not None and self.until <= self.since:
            raise ValueError(f"deterministic_refuses {self.setting}: until {self.until} is not after since {self.since}")
        return self


class DeterministicDefault(BaseModel):
    """An environment variable the stack's trainer sets under its deterministic mode where the launcher has not (job
    field deterministic_mode), and the date of the trainer commit that began to set it: a job whose trainer_date is
    older runs without it."""

    model_config = Strict
    value: str = Field(min_length=1, description="the value the trainer sets (os.environ.setdefault)")
    since: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                       description="the date (YYYY-MM-DD) of the trainer commit that began to set it (git log -S)")
    source: str = Field(min_length=1, description="the code: repository, commit, file and lines, and the commit that "
                                                  "added it")


class ModelCode(BaseModel):
    """One of the trainer's model implementations (torchtitan: torchtitan/models/<code>/) and what it
    runs beyond the stack's own `runs` (issue 22): the start-up rules TORCHTITAN_MODEL_* read it
    (planner/startup.py) for a model whose hf_model_type it lists."""

    model_config = Strict
    code: str = Field(description="the trainer's name of the model code (torchtitan [model] name)")
    model_types: list[str] = Field(min_length=1, description="the Hugging Face config.json model_type values this code "
                                                            "trains (ModelSpec.hf_model_type)")
    moe_dispatchers: Optional[list[Dispatcher]] = Field(
        default=None, min_length=1,
        description="the MoE token dispatchers this code builds, among the stack's runs.moe_dispatchers (null: all of "
                    "them; a dense code says none)")
    context_parallel: Bool = Field(description="whether the code's attention runs context parallelism (cp > 1)")
    pipeline_parallel: Bool = Field(description="whether the code has a pipelining function (pp > 1)")
    async_tp: Bool = Field(description="whether the code applies async TP where the job asks for it (tp_comm_overlap)")
    compiles_blocks: Bool = Field(
        description="whether the code's parallelize function applies torch.compile to its transformer blocks where the "
                    "job compiles the model (torchtitan apply_compile; compile.components 'model'): false, the blocks "
                    "run eager with compile on and are priced so (the stack's eager kernels, what eager ops save, the "
                    "routed experts' grouped GEMMs re-run under selective recompute: plan.code_compiles_blocks), the "
                    "loss compiled as the job says (compile.components 'loss' is the trainer's, not the code's); "
                    "listed as assumed (startup.model_code_compile_note)")
    sac_saves_all_to_all: Bool = Field(
        description="whether the code's selective (per-op) activation-checkpoint save list keeps the EP token "
                    "exchange's outputs (torchtitan _op_sac_save_list holding _c10d_functional.all_to_all_single): "
                    "false, selective recompute re-runs each MoE layer's forward dispatch and combine all-to-alls in "
                    "the backward (step.ep_comm, time term ep_comm) and keeps neither exchange's output "
                    "(memory.selective_drops)")
    sources: list[str] = Field(min_length=1)


# the layer features a stack's code builds (StackRuns.layer_kinds, start-up rule STACK_LAYER_KIND): the mixer kinds
# (Mixer's `kind` values but none), the attention output gate (GlobalAttention/SlidingAttention/ChunkedAttention
# output_gate) and the mixture-of-experts MLP (MoEMLP); planner/startup.py model_layer_features reads a model's
LayerFeature = Literal["global", "sliding", "chunked", "mla", "gated_deltanet", "mamba2", "mamba1", "output_gate", "moe"]


# the forms of a built layer feature a stack's code may still not build (LayerKindBuilt.not_built; planner/startup.py
# layer_forms reads a model's): for the MoE MLP, shared experts, dense-MLP layers beside the MoE ones (first_k_dense,
# layer_freq, a layer pattern's dense or MLP-less layer), a sigmoid router, an expert score bias (aux-loss-free
# balancing), a router linear bias, group-limited routing, plain (ungated) experts, a clamped gated activation; for
# sliding attention, windows on every layer (windows_every_layer), on exactly the even-indexed layers beside global
# ones (windows_alternate), on any other layers (window_placement), or more than one window size (window_sizes); for softmax attention (listed under global, read
# on every softmax-attention layer), query/key norms (ModelSpec.qk_norm); and the model-wide forms of the transformer
# block, listed under global too and read on any model (MODEL_WIDE_FORMS): learned absolute or ALiBi positions
# (ModelSpec.position_embedding), dropout (dropout), biases on the linears (linear_bias), LayerNorm (norm), a plain
# (ungated) MLP (gated_mlp false), norms after the attention and the MLP (post_norms), a norm on the word embedding's
# output (embedding_norm); and their Llama-era counterparts, which the older Megatron-DeepSpeed forks lack (issue 22,
# mdsfork2): RMSNorm (norm rmsnorm), a gated MLP (gated_mlp), grouped-query or multi-query attention (num_kv_heads below
# num_attention_heads, without MLA), rotary positions (position_embedding rope), no position embedding
# (position_embedding none), an output layer of its own (tied_embeddings false), linears without biases (linear_bias
# false)
LayerForm = Literal["shared_experts", "dense_layers", "sigmoid_router", "expert_score_bias", "router_linear_bias",
                    "group_limited_routing", "plain_experts", "activation_clamp", "window_placement", "window_sizes",
                    "windows_every_layer", "windows_alternate", "qk_norm", "learned_positions", "alibi_positions", "dropout", "linear_bias", "layernorm",
                    "plain_mlp", "post_norms", "embedding_norm", "rmsnorm", "gated_mlp", "grouped_query",
                    "rotary_positions", "no_positions", "untied_embeddings", "no_linear_bias"]
# the forms of the whole transformer block rather than of one layer kind (listed under global)
MODEL_WIDE_FORMS = ("learned_positions", "alibi_positions", "dropout", "linear_bias", "layernorm", "plain_mlp",
                    "post_norms", "embedding_norm", "rmsnorm", "gated_mlp", "grouped_query", "rotary_positions",
                    "no_positions", "untied_embeddings", "no_linear_bias")
# the kind each form belongs to
LAYER_FORM_KIND = {"shared_experts": "moe", "dense_layers": "moe", "sigmoid_router": "moe", "expert_score_bias": "moe",
                   "router_linear_bias": "moe", "group_limited_routing": "moe", "plain_experts": "moe",
                   "activation_clamp": "moe", "window_placement": "sliding", "window_sizes": "sliding",
                   "windows_every_layer": "sliding", "windows_alternate": "sliding",
                   "qk_norm": "global", **{f: "global" for f in MODEL_WIDE_FORMS}}


class LayerFormMissing(BaseModel):
    """A form of the layer feature the stack's code does not build, with the code that shows it."""

    model_config = Strict
    form: LayerForm
    sources: list[str] = Field(min_length=1, description="the trainer's file (commit, lines) that shows the form absent")


class LayerKindBuilt(BaseModel):
    """One layer feature the stack's code builds (issue 22), with where its code builds it, and the forms of
    it that code does not build (not_built: start-up rule STACK_LAYER_KIND refuses a model using one)."""

    model_config = Strict
    kind: LayerFeature
    sources: list[str] = Field(min_length=1, description="the trainer's file (commit, lines) that builds it")
    not_built: list[LayerFormMissing] = Field(
        default_factory=list,
        description="forms of this feature the code does not build (schema.LayerForm: shared experts, dense layers "
                    "beside MoE ones, a sigmoid router, ...; a window placement or several window sizes; under global "
                    "also the model-wide forms: learned or ALiBi positions, dropout, linear biases, LayerNorm, a plain "
                    "MLP, post-norms, a norm on the embedding, RMSNorm, a gated MLP, grouped-query attention, rotary or "
                    "no positions, an untied output layer, bias-free linears), each cited; empty: every form the planner prices")

    @model_validator(mode="after")
    def _forms(self) -> "LayerKindBuilt":
        wrong = [f.form for f in self.not_built if LAYER_FORM_KIND[f.form] != self.kind]
        forms = [f.form for f in self.not_built]
        if wrong:
            raise ValueError(f"layer_kinds {self.kind}: not_built {wrong} are forms of another kind "
                             f"({', '.join(f'{w}: {LAYER_FORM_KIND[w]}' for w in wrong)})")
        if len(set(forms)) != len(forms):
            raise ValueError(f"layer_kinds {self.kind}: not_built lists a form twice")
        return self


# the recompute granularities a job may ask for (Job.recompute; a stack's runs.recompute lists those its code has)
Recompute = Literal["none", "selective", "full"]


class ListedRuns(BaseModel):
    """A `runs` entry that lists the choices the stack's code has, each once, in one list field (the class's `listed`,
    named `what` in an error), with the code that shows them (sources): made by listed_runs, the base of RecomputeRuns,
    AttentionRuns, HalfDtypeRuns, OptimizerRuns and SpmdBackendRuns."""

    model_config = Strict
    listed: ClassVar[str]
    what: ClassVar[str]

    @model_validator(mode="after")
    def _once(self):
        values = getattr(self, self.listed)
        if len(set(values)) != len(values):
            raise ValueError(f"{self.what} repeat: {values}")
        return self


def listed_runs(field: str, choice, what: str, description: Optional[str] = None, **more) -> type[ListedRuns]:
    """The ListedRuns base whose list `field` (at least one value, each once) takes `choice` (a Literal of the
    choices), named `what` in its errors, `more` the entry's other fields (create_model's (type, Field) pairs) before
    its `sources`; the entry's class subclasses it with its docstring."""
    model = create_model(f"ListedRuns_{field}", __base__=ListedRuns, __module__=__name__,
                         **{field: (list[choice], Field(min_length=1, description=description))}, **more,
                         sources=(list[str], Field(min_length=1)))
    model.listed, model.what = field, what
    return model


class SequenceParallelRuns(BaseModel):
    """Whether the stack's code has Megatron's sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198
    sec. 4.2.2: the norms' and dropouts' activations split over the TP ranks; Megatron-LM --sequence-parallel,
    torchtitan's SequenceParallel on the norms). false: start-up rule STACK_SEQUENCE_PARALLEL refuses a plan with
    it (fit counts them, explain / check exit 2) and a job that leaves sequence_parallel out runs it off."""

    model_config = Strict
    supported: Bool = Field(description="the stack's code runs sequence parallelism under TP")
    norm_grads_reduced: Bool = Field(
        default=True, description="the trainer sums over the TP group the gradients SP leaves partial on each TP rank: "
                                  "the norms' weights and biases and the row-parallel linears' biases, each rank's "
                                  "from its own 1 / tp of the sequence (Megatron-LM optimizer allreduce_layernorm_grads, "
                                  "Megatron-Core finalize_model_grads); false: the code path never sums them, each TP "
                                  "rank's copy steps on its shard's partial gradient and the copies diverge, and start-up "
                                  "rule STACK_SP_NORM_GRADS refuses SP at tp > 1 (a job that leaves sequence_parallel "
                                  "out runs it off); cite the code path in sources")
    norm_grads_step_allreduce: Bool = Field(
        default=False, description="the trainer sums them as Megatron-Core does: one all-reduce over the TP group of all "
                                   "of a rank's SP-partial gradients flattened into one buffer, in the main gradients' "
                                   "dtype, once a step after the data-parallel gradient sync (finalize_model_grads "
                                   "_allreduce_non_tensor_model_parallel_grads), with or without SP also the query/key "
                                   "norms' (partial over each TP rank's heads): priced in tp_comm (step.py [27], "
                                   "tp_sp_norm_grads_s); false: the sum is not priced (torchtitan's DTensor grads, "
                                   "reduced where they are read); needs norm_grads_reduced")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _step_allreduce_reduces(self):
        if self.norm_grads_step_allreduce and not self.norm_grads_reduced:
            raise ValueError("norm_grads_step_allreduce true needs norm_grads_reduced true (the all-reduce is the sum)")
        return self


class RecomputeRuns(listed_runs("granularities", Recompute, "recompute granularities")):
    """The activation-recompute granularities the stack's code has (Job.recompute): none (every activation kept),
    selective (the attention core re-run: Korthikanti et al. 2022 sec. 5, Megatron-LM --recompute-granularity
    selective, torchtitan's selective AC) and full (each layer re-run from its input: Megatron-LM 2021
    --checkpoint-activations). A granularity not listed: start-up rule STACK_RECOMPUTE refuses it (fit drops it,
    counted; explain / check exit 2)."""


class AttentionRuns(listed_runs(
        "cores", Literal["flash", "eager"], "attention cores",
        eager_softmax_fusion_switch=(Bool, Field(
            default=False, description="the eager core's FusedScaleMaskSoftmax reads the job's masked_softmax_fusion "
                                       "whatever else the job sets (Megatron-DeepSpeed's CoreAttention: "
                                       "--no-masked-softmax-fusion); false: only Megatron-Core's own local core attention "
                                       "reads it (transformer_impl local / local_core_attention), cite the code path in "
                                       "sources")))):
    """The core attentions the stack's code runs (Job.attention): flash (a fused kernel that keeps no s x s
    scores: FlashAttention, cuDNN, FlexAttention, by runs.attention_kernels and the stack's attention_kernels
    rules) and eager (batched GEMMs around a softmax and a dropout, the scores kept: Megatron-LM 2021's
    baddbmm / FusedScaleMaskSoftmax / bmm). A job asking for a core not listed is refused naming the stack;
    one that leaves it out runs defaults.attention under explain / check, while fit plans the first core listed
    (an entry lists its cores fastest first: plan.fit_attention), which an exported config selects."""


class HalfDtypeRuns(listed_runs("dtypes", Literal["bf16", "fp16"], "16-bit dtypes")):
    """The 16-bit dtypes the stack's code trains in (Job.fp16: fp16 with loss scaling, else bf16; both priced
    alike, precisions.SAME_PEAK): a job asking for one not listed is refused naming the stack; one that leaves
    fp16 out runs defaults.fp16."""


SpmdBackend = Literal["spmd_types", "partial_dtensor", "full_dtensor"]


class OptimizerRuns(listed_runs("optimizers", OptimizerName, "optimizers", muon_param_layout=(Bool, Field(
        default=True, description="Muon's layer-wise distributed optimizer (muon at zero1) has its precomputed "
                                  "parameter layout (Megatron-LM @d98e8a64's default, --use-layer-wise-param-layout); "
                                  "false: the stack's Megatron-Core hands each parameter whole to one rank, so muon at "
                                  "zero1 runs only as the job's optimizer_whole_tensors (fit searches no other zero1 "
                                  "Muon row, plan._optimizer refuses one); cite the code in sources")),
        muon_tp_mode=(Literal["blockwise", "duplicated"], Field(
            default="duplicated", description="Muon's default TP mode (Megatron-Core OptimizerConfig.muon_tp_mode, "
                                              "the job's muon_tp_mode where left out): duplicated all-gathers each "
                                              "TP-split momentum and runs Newton-Schulz on the whole matrix on every TP "
                                              "rank (Megatron-LM @d98e8a64's default); blockwise runs it on each rank's "
                                              "own shard, no gather (905c0e386's); step.py [28], memory.py [mu]; cite "
                                              "the code in sources")),
        muon_qkv_split_raises=(Bool, Field(
            default=False, description="Muon's q / k / v split raises where a TP rank's linear_qkv shard holds no whole "
                                       "query group (tp not dividing the KV heads): Megatron-Core 905c0e386 tags every "
                                       "linear_qkv and views the shard as rows // group rows = 0 groups, which raises "
                                       "(start-up rule MUON_QKV_SPLIT_TP); false: the split is skipped there and the "
                                       "shard orthogonalized whole (Megatron-LM @d98e8a64, layers/attention.py "
                                       "Attention.muon_matrices); cite the code in sources")),
        muon_ns_steps_multiple=(Optional[int], Field(
            default=None, ge=1, description="Muon's Newton-Schulz steps must be a multiple of this (the job's "
                                            "muon_ns_steps, refused otherwise by plan._optimizer): the number of "
                                            "coefficient sets of the stack's coefficient type where its Emerging-"
                                            "Optimizers release raises on a partial cycle (v0.1.0 muon_utils.py "
                                            "l. 135-136; quintic's 5 sets); null: any count (v0.2.0 on cycles "
                                            "the sets); cite the code in sources")))):
    """The update rules the stack's code builds (Job.optimizer): a job asking for one not listed is refused naming
    the stack; adam is every stack's (the entry leaves runs.optimizers out: adam only)."""

    @model_validator(mode="after")
    def _adam(self) -> "OptimizerRuns":
        if "adam" not in self.optimizers:
            raise ValueError("runs.optimizers lacks adam: a job that leaves optimizer out runs adam")
        return self


class SpmdBackendRuns(listed_runs(
        "backends", SpmdBackend, "spmd_backends backends", "the backends the option takes",
        default=(SpmdBackend, Field(description="the backend a run that does not set the option gets")))):
    """The SPMD backends a stack's trainer selects between (job field spmd_backend): torchtitan 0.3's
    parallelism.spmd_backend. The backend decides which op the TP / SP redistributes and the EP token exchange
    run eager, and so what the op-SAC save list keeps (memory.py [xk], [tk], functional_collectives_eager)."""

    @model_validator(mode="after")
    def _default_listed(self):
        if self.default not in self.backends:
            raise ValueError(f"spmd_backends default {self.default} must be one of backends {self.backends}")
        return self


class StackRuns(BaseModel):
    """What the stack can run (issue 22): `fit` searches only this space, `check` suggests
    only these modes, and a job asking for anything else is refused naming the entry's
    sources. The trainer's start-up checks (rule set `startup_rules`, planner/startup.py)
    come on top."""

    model_config = Strict
    sharding: list[ShardingMode] = Field(min_length=1, description="the data-parallel modes, in the order a level's default is chosen")
    schedules: list[ScheduleSpelling] = Field(min_length=1)
    rank_orders: list[RankOrderSpelling] = Field(min_length=1, description="the first is the stack's default")
    max_tp: Optional[Count] = Field(default=None, gt=0, description="largest tensor-parallel degree (null: no limit of the stack's own)")
    max_cp: Optional[Count] = Field(default=None, gt=0)
    max_pp: Optional[Count] = Field(default=None, gt=0)
    max_ep: Optional[Count] = Field(default=None, gt=0)
    expert_tensor_parallel: Optional[str] = Field(
        default=None, description="the option that sets an expert tensor-parallel degree other than tp (null: expert TP is tp)")
    defer_embedding_wgrad: Optional[str] = Field(
        default=None, description="the option that defers the output layer's weight gradients to the pipeline flush "
                                  "(job field defer_embedding_wgrad; null: the stack has none)")
    empty_unused_memory_level: Optional[str] = Field(
        default=None, description="the option that empties the caching allocator's cache between a step's phases "
                                  "(job field empty_unused_memory_level; null: the stack has none)")
    mla_down_proj_fusion: Optional[str] = Field(
        default=None, description="the option that fuses MLA's q and kv down projections into one TP-split linear "
                                  "(job field mla_down_proj_fusion; null: the stack has none)")
    partition_activations: Optional[str] = Field(
        default=None, description="the option that splits the layer inputs full recompute keeps over the TP ranks "
                                  "(job field partition_activations; null: the stack has none)")
    sync_tp_duplicated_parameters: Optional[str] = Field(
        default=None, description="the option that all-reduces the parameters duplicated over the TP ranks (norms, "
                                  "row-parallel biases) in every forward (job field sync_tp_duplicated_parameters; null: "
                                  "the stack has none)")
    spmd_backends: Optional[SpmdBackendRuns] = Field(
        default=None, description="the SPMD backends the trainer selects between and its default (job field "
                                  "spmd_backend; null: the stack has no such option, a job setting it is refused)")
    startup_rules: Optional[Literal["megatron", "torchtitan", "deepspeed", "deepseek"]] = Field(
        default=None, description="the trainer whose start-up checks apply (planner/startup.py)")
    moe_dispatchers: Optional[list[Dispatcher]] = Field(
        default=None, min_length=1,
        description="the MoE token dispatchers the stack runs (planner/dispatch.py); a job asking for another is refused; "
                    "null: the stack does not say (a job's dispatcher is taken as runnable, a model recipe's is not taken)")
    deterministic_cublas_workspace: Optional[DeterministicDefault] = Field(
        default=None,
        description="the CUBLAS_WORKSPACE_CONFIG the trainer sets under its deterministic mode where the launcher has "
                    "not (job field deterministic_mode: Megatron-LM's --deterministic-mode sets :4096:8 from 3ab71eeb3e, "
                    "2026-07-08, training/determinism.py), dated as deterministic_nccl_algo (plan._trainer_env_default): "
                    "the job's cublas_workspace_config where it gives one, else this value where the job's trainer_date "
                    "is not older than since, listed as assumed; null: the trainer sets none (the job's "
                    "cublas_workspace_config, else the GPU's default, is priced)")
    deterministic_nccl_algo: Optional[DeterministicDefault] = Field(
        default=None,
        description="the NCCL_ALGO the trainer sets under its deterministic mode where the launcher has not (job field "
                    "deterministic_mode: Megatron-LM's --deterministic-mode sets Ring from 3ab71eeb3e, 2026-07-08, "
                    "training/determinism.py), dated: the job's nccl_algo where it gives one, else this value where the "
                    "job's trainer_date is not older than since, priced as the job's nccl_algo (comm.nccl_algo_candidates) "
                    "and listed as assumed; null: the trainer sets none (NCCL's own choice is priced)")
    deterministic_refuses: Optional[list[DeterministicRefusal]] = Field(
        default=None, min_length=1,
        description="the job settings the trainer refuses beside its deterministic mode (job field deterministic_mode), "
                    "each with the date of the commit that added the check: start-up rules "
                    "MEGATRON_DETERMINISTIC_TP_OVERLAP / _CE_FUSION / _FLASH (planner/startup.py), run where the stack "
                    "lists the setting and the job's trainer_date is not older; null: none refused; cite each")
    hybridep_non_blocking: Bool = Field(
        default=False,
        description="the stack's HybridEP dispatcher has a non-blocking dispatch sized by a capacity factor (job field "
                    "moe_hybridep_capacity_factor: torchtitan 0.3 distributed/deepep/hybridep.py); false: a job setting "
                    "it is refused")
    hybridep_buffer_tokens: Literal["dispatch", "local_batch"] = Field(
        default="dispatch",
        description="the tokens per rank the stack sizes HybridEPBuffer for (planner/ep_buffers.py hybridep): dispatch, "
                    "the first dispatch's rows (Megatron-Core: the micro-batch's tokens on the rank, T / rep_div); "
                    "local_batch, local_batch_size x seq_len / (cp x tp) (torchtitan 0.3: models/common/"
                    "token_dispatcher.py l. 1232-1234); either floored at DeepEP's Configurer's 512 (memory.py [ep])")
    bytes_per_param: Optional[list[BppPreset]] = Field(
        default=None, min_length=1,
        description="the model-state presets (optimizer state dtypes) the stack's optimizer keeps; a model recipe's is "
                    "taken only where listed (planner/recipe.py); null: the stack does not say (not taken)")
    mtp: Optional[Bool] = Field(
        default=None, description="whether the stack trains multi-token prediction modules (job field mtp_layers); a "
                                  "model recipe's mtp_layers is taken only where true; null: the stack does not say")
    mtp_chunked_loss: Optional[Bool] = Field(
        default=None, description="whether the stack's chunked cross-entropy (job field chunked_loss) runs beside its "
                                  "multi-token prediction modules; false: a job with mtp_layers takes the plain loss "
                                  "(the stack's default chunked_loss is not inherited) and a job asking both is refused; "
                                  "null: the stack does not say (no check)")
    router_losses: Optional[Bool] = Field(
        default=None, description="whether the stack's code computes the MoE router's auxiliary load-balancing loss and "
                                  "z-loss (job fields moe_aux_loss_coeff, moe_z_loss_coeff); false: a model recipe's "
                                  "moe_aux_loss_coeff is not taken (planner/recipe.py) and the torchtitan export refuses a "
                                  "plan priced with one; null: the stack does not say (taken, as every stack before)")
    fp8_grouped_experts: Optional[list[Bool]] = Field(
        default=None, min_length=1,
        description="MoE under fp8 / nvfp4: the settings of the routed experts' grouped GEMMs the stack runs (job field "
                    "fp8_grouped_experts; true: in the plan's low precision, false: bf16); fit searches each where it "
                    "lists two (space.variant_choices); null: only defaults.fp8_grouped_experts (a job setting the "
                    "other is priced as given)")
    low_precision_moments: Optional[LowPrecisionMoments] = Field(
        default=None, description="how the stack keeps Adam moments below fp32 (bytes_per_param optimizer < 8 B: "
                                  "Megatron's precision-aware optimizer); null: under every mode, as priced")
    attention_backends: Optional[list[AttentionBackend]] = Field(
        default=None, min_length=1,
        description="the attention modules the stack's model code builds (job field attention_backend, read by the "
                    "start-up rules: torchtitan's attn_type / attn_backend); null: the stack names none (the job field "
                    "is refused); cite it in sources")
    backend_kernels: Optional[dict[AttentionBackend, list[AttentionKernel]]] = Field(
        default=None,
        description="the attention kernels each attention module runs (job fields attention_backend, attention_kernel): "
                    "a job that names the module but no kernel is priced with the module's first kernel where the "
                    "stack's default kernel for the GPU is not one of them (torchtitan main's attn_type flex builds "
                    "FlexAttention), and a job naming a kernel the module does not run is refused; a module not "
                    "listed takes any kernel (varlen: no rate of its own, priced as a listed kernel); null: not checked; "
                    "cite it in sources")
    fsdp_symm_mem: Optional[str] = Field(
        default=None, description="the option that allocates FSDP's all-gather staging buffers in symmetric memory (job "
                                  "field fsdp_symm_mem: torchtitan 0.3's parallelism.enable_fsdp_symm_mem, start-up rule "
                                  "TORCHTITAN_FSDP_SYMM_MEM_SM90); null: the stack has none, a job setting it is refused")
    cp_no_load_balance: Optional[str] = Field(
        default=None, description="the option that runs context parallelism on contiguous sequence chunks, without "
                                  "load balancing the causal mask (job field cp_load_balance false: torchtitan's "
                                  "parallelism.context_parallel_load_balancer None); null: the stack always "
                                  "load-balances, a job setting cp_load_balance false is refused; cite it in sources")
    cp_load_balancers: Optional[list[CPLoadBalancer]] = Field(
        default=None, min_length=1,
        description="the CP load balancers the stack's option builds by name (job field cp_load_balancer: torchtitan's "
                    "parallelism.context_parallel_load_balancer headtail | ptrr, start-up rule TORCHTITAN_CP_PTRR_MASK); "
                    "null: the stack has no such option, a job naming one is refused; cite it in sources")
    pipeline_stages_by_count_only: Bool = Field(
        default=False,
        description="the stack's launch spells the pipeline split only by a layer count per stage (torchtitan 0.3's "
                    "--parallelism.pipeline_parallel_layers_per_stage on the run_train.sh command line: its "
                    "module_fqns_per_model_part, a list of lists, is no one word a launch line can carry, "
                    "trainers/torchtitan03.py NOT_ONE_WORD): a split into pp x vpp stages that no layers_per_stage "
                    "gives, at a vpp other than the schedule's default, is refused (start-up rule "
                    "TORCHTITAN03_STAGE_LISTS). false: per-stage module lists are written (torchtitan main's TOML)")
    spmd_typechecking: Optional[str] = Field(
        default=None, description="the option that runs the training step under SPMD type checking (job field "
                                  "spmd_typechecking: torchtitan 0.3's debug.spmd_typechecking, start-up rules "
                                  "TORCHTITAN_SPMD_TYPECHECK_PP / _SAC_FLEX); null: the stack has none, a job setting "
                                  "it is refused")
    attention_kernels: Optional[list[AttentionKernel]] = Field(
        default=None, min_length=1,
        description="the attention kernels the stack's model code can run (job field attention_kernel): a model "
                    "recipe's attention_kernel is taken only where listed (planner/recipe.py); null: the stack does "
                    "not say (not taken). Which one runs by default is attention_kernels' rules (the stack's field)")
    cp_rotate_method_trains: Bool = Field(
        default=True,
        description="the job's cp_rotate_method reaches the training step's ring attention (the trainer calls torch's "
                    "set_rotate_method before training); false: training runs the stack's memory.cp_ring_backward "
                    "(torch's default) whatever the job says, the job's method listed as ignored (planner/cp_rotate.py; "
                    "torchtitan @e347b1e5e: only components/validate.py calls it); cite it in sources")
    fsdp_one_rank: Bool = Field(
        default=False,
        description="the trainer applies FSDP (fully_shard with its MixedPrecisionPolicy) at every shard degree, one "
                    "rank included (torchtitan 0.3.0: apply_fsdp_to_decoder always): a sharded mode over dp_shard x cp "
                    "= 1 ranks runs FSDP over one rank (the fp32 states whole, bf16 all-gather copies, fp32 reduce "
                    "buffers; memory.py prices it as FSDP with a group of one), an hsdp mode searches shard group 1 "
                    "(replicas of FSDP over one rank: the trainer's replicate-only mesh), and the start-up rules that "
                    "read whether FSDP runs (TORCHTITAN_FSDP_MESH, TORCHTITAN_FP32, TORCHTITAN_EP_FSDP) see it on. "
                    "false: FSDP only over more than one rank (torchtitan @e347b1e5e); cite it in sources")
    etp_one_under_ep: Bool = Field(
        default=False,
        description="the routed experts are sharded over the EP mesh only where ep > 1 (expert TP 1) and over TP "
                    "without EP (expert TP = tp), with no option to set another (torchtitan 0.3.0: the sparse mesh "
                    "pp, dp_replicate, efsdp, ep): a job that leaves etp out runs 1 under EP (plan.resolve), the "
                    "search tries expert TP 1 under EP and tp without (space._etp_ok), stack rule STACK_ETP lets "
                    "expert TP 1 differ from tp under EP and start-up rule TORCHTITAN_ETP refuses any other; cite it "
                    "in sources")
    expert_tensor_parallel_moe_only: Bool = Field(
        default=False,
        description="the expert-TP option is read by the MoE layers alone and the trainer builds no expert grid "
                    "without them (Megatron-DeepSpeed's --enable-expert-tensor-parallelism, read where DeepSpeed-MoE "
                    "creates its process groups): a model without experts runs no expert TP other than tp, and a job "
                    "that sets etp other than tp for one is refused (plan.resolve; its file cannot say it); cite it in "
                    "sources")
    startup_rules_absent: list[AbsentRule] = Field(
        default_factory=list,
        description="start-up rules of the set `startup_rules` this release of the trainer does not run (the check "
                    "is not in its code), each with the source that shows it absent; planner/startup.py rules_for "
                    "leaves them out for this stack")
    model_codes: Optional[list[ModelCode]] = Field(
        default=None,
        description="the trainer's model implementations by Hugging Face model_type and what each runs (start-up rules "
                    "TORCHTITAN_MODEL_*); a model whose hf_model_type none lists, or that has none, is priced on the "
                    "stack's runs alone, listed as assumed (startup.model_code_assumed); null: the entry maps none (no "
                    "model-code rule applies, nothing listed: the stacks other than torchtitan and torchtitan-0.3)")
    flavor_registry: Optional[Literal["torchtitan"]] = Field(
        default=None,
        description="the registry of model flavors the stack's model codes (model_codes) build, which `fit` compares a "
                    "model against, noting where the code's own flavor of the model prices otherwise "
                    "(trainers/torchtitan_flavors.py fit_note): torchtitan, pytorch/torchtitan @e347b1e5e's "
                    "models/<code>/__init__.py flavor tables (planner/torchtitan_registry.py). A stack file that "
                    "`extends:` an entry with it inherits it; null: none compared (torchtitan-0.3, whose 0.3.0 builds "
                    "its models in config functions, and every stack that is not torchtitan's)")
    layer_kinds: Optional[list[LayerKindBuilt]] = Field(
        default=None, min_length=1,
        description="the layer features the stack's code builds (mixer kinds, the attention output gate, the MoE MLP), "
                    "each cited: start-up rule STACK_LAYER_KIND refuses a model with a layer of another (explain / "
                    "check exit 2, fit: no feasible plan); null: the entry does not say (no such check: a user's stack "
                    "file may leave it out; every shipped entry gives it, tests/test_stack_layer_kinds.py)")
    sequence_parallel: Optional[SequenceParallelRuns] = Field(
        default=None, description="whether the stack's code has sequence parallelism (start-up rule "
                                  "STACK_SEQUENCE_PARALLEL); null: the entry does not say (taken as runnable)")
    recompute: Optional[RecomputeRuns] = Field(
        default=None, description="the recompute granularities the stack's code has (start-up rule STACK_RECOMPUTE); "
                                  "null: the entry does not say (none, selective and full taken as runnable)")
    attention: Optional[AttentionRuns] = Field(
        default=None, description="the core attentions the stack's code runs (job field attention); null: the entry "
                                  "does not say (flash, and eager where kernels describe it)")
    half_dtypes: Optional[HalfDtypeRuns] = Field(
        default=None, description="the 16-bit dtypes the stack's code trains in (job field fp16); null: the entry "
                                  "does not say (bf16 and fp16 taken as runnable)")
    optimizers: Optional[OptimizerRuns] = Field(
        default=None, description="the update rules the stack's code builds (job field optimizer); null: adam only")
    sources: list[str] = Field(min_length=1)

    @field_validator("deterministic_cublas_workspace")
    @classmethod
    def _cublas_value(cls, d):
        """The value is a CUBLAS_WORKSPACE_CONFIG (the job field cublas_workspace_config's pattern, :SIZE:COUNT pairs),
        which memory.cublas_workspace_bytes sizes."""
        if d is not None and not re.fullmatch(r"(:[0-9]+:[0-9]+)+", d.value):
            raise ValueError(f"deterministic_cublas_workspace value {d.value!r}: not :SIZE:COUNT pairs (e.g. :4096:8)")
        return d

    @model_validator(mode="after")
    def _unique(self) -> "StackRuns":
        names = [m.name for m in self.sharding]
        if len(set(names)) != len(names):
            raise ValueError(f"sharding mode names repeat: {names}")
        lpm = self.low_precision_moments
        bad = [m for m in (lpm.sharding_modes if lpm is not None else []) if m not in names]
        if bad:
            raise ValueError(f"low_precision_moments.sharding_modes {bad}: not sharding modes ({', '.join(names)})")
        for m in self.sharding:
            for x in m.job_settings:
                if x.instead is None:
                    continue
                if x.instead not in names or x.instead == m.name:
                    raise ValueError(f"sharding mode {m.name}: job setting {x.setting} instead {x.instead!r} is not "
                                     f"another sharding mode of the stack ({', '.join(names)})")
                other = self.sharding[names.index(x.instead)]
                if any(y.setting == x.setting and y.value == x.value and y.other == "refused" for y in other.job_settings):
                    raise ValueError(f"sharding mode {m.name}: job setting {x.setting} instead {x.instead}, which "
                                     f"refuses {x.setting} {str(not x.value).lower()} too")
        absent = [a.rule for a in self.startup_rules_absent]
        if len(set(absent)) != len(absent):
            raise ValueError(f"startup_rules_absent names a rule twice: {absent}")
        if absent and self.startup_rules is None:
            raise ValueError("startup_rules_absent without startup_rules: no rule set to leave rules out of")
        kinds = [k.kind for k in self.layer_kinds or ()]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"layer_kinds: a kind listed twice ({sorted(k for k in set(kinds) if kinds.count(k) > 1)})")
        if self.flavor_registry is not None and not self.model_codes:  # the flavor is looked up by the model's code
            raise ValueError(f"flavor_registry {self.flavor_registry} without model_codes: its flavors are found by the "
                             "model code that trains the model (model_codes), which the stack does not list")
        types = [t for c in self.model_codes or () for t in c.model_types]
        if len(set(types)) != len(types):
            raise ValueError(f"model_codes: a model_type listed twice ({sorted(t for t in set(types) if types.count(t) > 1)})")
        for c in self.model_codes or ():
            extra = [d for d in c.moe_dispatchers or () if d not in (self.moe_dispatchers or [d])]
            if extra:
                raise ValueError(f"model_codes {c.code}: moe_dispatchers {extra} not among runs.moe_dispatchers")
        return self


class MoEHostIssue(BaseModel):
    """The host (CPU) time a stack takes to issue one MoE layer's forward, exposed where the
    dropless dispatcher's device-to-host synchronisation leaves the GPU waiting for it
    (planner/step.py moe_host). Fitted constants: `fit` names the records and the
    leave-one-out error (scripts/fit_moe_host.py reproduces them)."""

    model_config = Strict
    per_layer_s: Real = Field(ge=0, description="seconds to issue one MoE layer's forward apart from its experts")
    per_local_expert_s: Real = Field(ge=0, description="seconds more per expert held on the GPU (per-expert kernels)")
    fit: str = Field(description="how the constants were fitted: records file, n, method, in-sample and "
                                 "leave-one-out median and signed median error")
    sources: list[str] = Field(min_length=1)


class MoEAlltoAllExchanges(BaseModel):
    """What the stack's alltoall token dispatcher exchanges beside the tokens' all-to-alls, each a collective of
    its own on the step's path (planner/dispatch.py [12]): Megatron-Core's MoEAlltoAllTokenDispatcher all-gathers
    each rank's int64 token counts per expert over the tp_ep group before the dispatch (forward), and moves the
    routing probabilities in an all-to-all of their own beside the tokens' (forward, and its gradient backward)."""

    model_config = Strict
    counts: Optional[Literal["tp_ep_all_gather", "ep_all_to_all"]] = Field(
        description="how the token counts per expert reach the ranks before the tokens' all-to-all: tp_ep_all_gather "
                    "(an all-gather of E int64 a rank over the expert-TP x EP ranks, forward only: Megatron-Core), "
                    "ep_all_to_all (an all-to-all of E counts a rank over the EP group, E / ep to each, forward only, "
                    "waited on: torchtitan's ExpertParallel._token_dispatch, 0.3's AllToAllTokenDispatcher); null: no exchange the planner prices")
    counts_dtype: Optional[Literal["int64", "float32"]] = Field(
        default=None, description="the dtype of a token count in that exchange (planner/dispatch.py COUNT_DTYPE_BYTES): "
                                  "int64 where the code sums a bool routing map (Megatron-Core routing_map.sum(dim=0)"
                                  ".long(); torchtitan 0.3 routing_map_BLE.sum), float32 where it counts with "
                                  "torch.histc (torchtitan main); set exactly where counts is")
    probs_all_to_all: Bool = Field(description="the routing probabilities move in an all-to-all of their own (one "
                                               "value a routed row, in the router's dtype), forward and backward")
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _counts_dtype_with_counts(self):
        if (self.counts is None) != (self.counts_dtype is None):
            raise ValueError("moe_alltoall_exchanges.counts_dtype is set exactly where counts is (the bytes of a "
                             "count in that exchange)")
        return self


class MoEAllGatherExchanges(BaseModel):
    """What the stack's allgather token dispatcher exchanges beside the tokens' all-gather and reduce-scatter, each a
    collective of its own on the step's path (planner/dispatch.py [13]): Megatron-Core's MoEAllGatherTokenDispatcher
    all-gathers the bool routing map and the routing probabilities over the tp_ep group beside the tokens, and
    reduce-scatters the experts' outputs cast to the probabilities' dtype."""

    model_config = Strict
    routing_map_gather: Bool = Field(description="the bool [tokens, E] routing map all-gathered over the expert-TP x "
                                                 "EP ranks (forward only, no gradient)")
    probs_gather: Bool = Field(description="the [tokens, E] routing probabilities all-gathered over the expert-TP x EP "
                                           "ranks in the router's dtype (forward; their gradient reduce-scattered "
                                           "backward)")
    combine_in_probs_dtype: Bool = Field(description="the combine's reduce-scatter (and its gradient's all-gather) "
                                                     "moves the experts' outputs cast to the probabilities' dtype")
    sources: list[str] = Field(min_length=1)


class WindowedAttention(BaseModel):
    """A sliding-window layer run through a dense additive mask (issue 22; layers/attention.py [11]): the code
    builds a [s, s] mask in the activations' dtype for each windowed layer (causal and window in one) and hands it
    to the attention kernel with the causal flag off, so the kernel runs every (query, key) pair of the sequence
    (4 T a d s forward FLOPs, no causal or window skip) and keeps the mask for its backward (mask_bytes x s^2 a
    windowed layer and micro-batch, whatever the micro-batch size: the mask broadcasts over the batch and heads)."""

    model_config = Strict
    dense_mask: Literal[True] = Field(description="the window is a dense [s, s] additive mask (no kernel skip)")
    mask_bytes: Real = Field(gt=0, description="bytes of one mask element (the activations' dtype: 2 for bf16)")
    lse_align: Optional[Int] = Field(
        default=None, gt=0,
        description="the kernel the dense mask runs rounds each sequence's saved log-sum-exp rows up to a multiple of "
                    "this many queries (PyTorch's memory-efficient SDPA kernel: 32, layers/attention.py [ls2]); null: "
                    "the queries as they are")
    sources: list[str] = Field(min_length=1)


class ChunkedAttentionRun(BaseModel):
    """How the stack's code runs a model that has chunked attention layers (Llama 4; layers/attention.py): with
    chunks_every_layer, the code builds every softmax-attention layer of such a model with the model's chunk, its
    global (NoPE) layers too (Megatron-Bridge's get_llama4_layer_spec puts Llama4SelfAttention, with
    config.attention_chunk_size, on every decoder layer), so where the sequence is longer than the chunk those layers
    attend within chunks, where the model's own code attends globally: priced as the stack runs them, with a
    warning (plan.resolve, _stack_chunks)."""

    model_config = Strict
    chunks_every_layer: Literal[True] = Field(description="every attention layer of a chunked model runs chunked")
    pads_last_chunk: Bool = Field(
        default=False, description="where the sequence is longer than the chunk, the code pads it to whole chunks and "
                                   "folds them into the batch (Megatron-Bridge's chunkify): the last, partial chunk runs "
                                   "whole, c^2/2 keys, and the attention saves the padded q, k, v and output, beside a "
                                   "copy of the output folded back (layers/attention.py [13]); false: the partial "
                                   "chunk runs its real part only")
    cp_local_sequence: Bool = Field(
        default=False, description="under context parallelism the code tests the CP rank's sequence, s / cp, against "
                                   "the chunk (Megatron-Bridge's Llama4SelfAttention: query.shape[0]): at cp > 1 and "
                                   "s / cp <= chunk it chunks nothing, every attention layer global attention through "
                                   "the CP kernel (priced so, per plan: layers/attention.py [14]); at s / cp > chunk it "
                                   "asserts s / cp a multiple of 2 cp and s / (2 cp^2) a multiple of the chunk "
                                   "(start-up rule BRIDGE_CHUNK_CP); false: the layers chunk by the whole sequence")
    sources: list[str] = Field(min_length=1)


class MoEExpertLoop(BaseModel):
    """Routed experts run as a Python loop over every expert (issue 22; layers/moe.py [16]): per expert the
    indices of its tokens (torch.where on a bool routing mask), its tokens gathered (x[idx]), a dense MLP of its
    own GEMMs, the routing weight multiplied in and the output added into a zeroed [n, h] tensor by indexing
    (y[idx] += ...); no token permutation kernels, no grouped GEMM, no expert parallelism. Priced by
    layers/moe.py loop_bytes in place of dispatch_bytes."""

    model_config = Strict
    implementation: Literal["per_expert_loop"]
    sources: list[str] = Field(min_length=1)


class MoEDenseGating(BaseModel):
    """The MoE layer as DeepSpeed-MoE runs it (issues 21, 23; layers/moe.py [18]): a gate that builds dense one-hot
    [tokens, experts, capacity] combine weights and dispatch mask in fp32, every expert padded to the capacity, the
    dispatch and the combine as einsums (two GEMMs forward, three backward), the experts a loop of per-expert GEMMs.
    Priced by layers/moe.py gating_bytes and gating_einsum_rows in place of dispatch_bytes (step.py moe_dispatch_bytes)
    and gating_saved_bytes / gating_transient_bytes (memory.py [dg])."""

    model_config = Strict
    implementation: Literal["dense_einsum"]
    min_capacity: Int = Field(ge=0, description="the capacity's floor, slots per expert (DeepSpeed _capacity's "
                                                "min_capacity; Megatron-DeepSpeed --moe-min-capacity's default)")
    sources: list[str] = Field(min_length=1)


class VocabPadding(BaseModel):
    """How the stack pads the tokenizer's vocabulary into the embedding's and output layer's rows (stack_db
    vocab_padding): rows = ceil(V / (divisor x tp)) x divisor x tp, Megatron's vocab_size_with_padding
    (NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py l. 133-146; the Megatron-DeepSpeed
    forks' _vocab_size_with_padding, the same rule). A job's padded_vocab_size pins the rows instead; its
    make_vocab_size_divisible_by replaces the divisor."""

    model_config = Strict
    divisor: Count = Field(default=128, gt=0, description="--make-vocab-size-divisible-by's default: the rows are a "
                                                          "multiple of divisor x tp")
    option: str = Field(description="the trainer's option that sets the divisor (informational)")
    source: str = Field(description="the code that pads, file and lines at the stack's commit")


class Stack(BaseModel):
    """One training software stack (stack_db/*.yaml)."""

    model_config = Strict
    name: str
    description: str = ""
    version: str = Field(description="the release or commit these figures describe")
    kernels: KernelBytes = Field(description="memory-bound kernels as the stack runs them by default (eager or fused)")
    compiled_kernels: Optional[KernelBytes] = Field(default=None, description="with torch.compile; null: the stack has no compile mode")
    attention_kernel: str = Field(description="the attention kernel (informational)")
    attention_speed: Real = Field(gt=0, description="attention rate relative to the hardware's figure for the kernel "
                                                    "the stack runs there (attention_kernels)")
    attention_kernels: list[AttentionKernelRule] = Field(
        default_factory=list,
        description="the attention kernel by GPU (first rule that holds the hardware's compute capability); none "
                    "holds, or the GPU's capability is not known: flash2 (FlashAttention-2). A job's attention_kernel "
                    "(e.g. Megatron --attention-backend flash) overrides it")
    selective: SelectiveRecompute
    overlap: OverlapSpec
    fsdp: FSDPSpec
    fp8_recipes: dict[str, FP8Recipe] = Field(default_factory=dict)
    memory: MemoryReporting
    defaults: StackDefaults
    expert_parallel: Optional[str] = Field(
        default=None,
        description="the stack's option for expert parallelism of MoE models (e.g. Megatron-Core "
                    "--expert-model-parallel-size); null: the stack has none, and ep must be 1")
    recompute_modules: Optional[str] = Field(
        default=None, description="the stack's option naming the modules selective recompute re-runs (Megatron-Core "
                                  "--recompute-modules; job field recompute_modules, planner/recompute_modules.py); null: "
                                  "the stack has none")
    cuda_graphs: Optional[str] = Field(
        default=None, description="the stack's CUDA graph option (Megatron-Core --cuda-graph-impl, --cuda-graph-modules; "
                                  "job fields cuda_graph_impl, cuda_graph_scope, planner/cuda_graphs.py); null: the stack "
                                  "has none, and a job's are refused")
    moe_host: Optional[MoEHostIssue] = Field(
        default=None, description="the host time to issue an MoE layer's forward after the dispatcher's "
                                  "synchronisation; null: not modelled (the host never holds the GPU up)")
    moe_alltoall_exchanges: Optional[MoEAlltoAllExchanges] = Field(
        default=None, description="what the stack's alltoall token dispatcher exchanges beside the tokens (the token "
                                  "counts, the routing probabilities: planner/dispatch.py [12]); null: the tokens' "
                                  "all-to-alls alone")
    moe_allgather_exchanges: Optional[MoEAllGatherExchanges] = Field(
        default=None, description="what the stack's allgather token dispatcher exchanges beside the tokens (the routing "
                                  "map, the routing probabilities, the combine's dtype: planner/dispatch.py [13]); "
                                  "null: the tokens' all-gather and reduce-scatter alone, in the activations' dtype")
    windowed_attention: Optional[WindowedAttention] = Field(
        default=None, description="how the stack's code runs a sliding-window layer where it does not hand the window "
                                  "to a kernel that skips the blocks outside it; null: the kernel skips them (the "
                                  "causal mean keys, layers/attention.py)")
    chunked_attention: Optional[ChunkedAttentionRun] = Field(
        default=None, description="how the stack's code runs a model with chunked attention layers (Llama 4): "
                                  "chunks_every_layer, its global layers chunked too at seq > chunk; null: the "
                                  "model's layers as the model says")
    moe_experts: Optional[MoEExpertLoop] = Field(
        default=None, description="how the stack's code runs the routed experts where it is not a token dispatcher with "
                                  "permutation kernels; null: the dispatcher's (layers/moe.py dispatch_bytes)")
    moe_gating: Optional[MoEDenseGating] = Field(
        default=None, description="where the stack's MoE layer gates, dispatches and combines with dense one-hot "
                                  "[tokens, experts, capacity] tensors and einsums (DeepSpeed-MoE, layers/moe.py [18]); "
                                  "null: a token dispatcher's permutations (layers/moe.py dispatch_bytes)")
    vocab_padding: Optional[VocabPadding] = Field(
        default=None, description="how the stack pads the vocabulary to its embedding's and output layer's rows, per "
                                  "tensor-parallel size (Megatron's vocab_size_with_padding: a multiple of 128 x tp); "
                                  "null: the model's vocab_size rows at every tp (torchtitan, llm-foundry, Megatron-Bridge's "
                                  "default should_pad_vocab false)")
    pipeline_split: Literal["trim_ends", "front", "bisection"] = Field(
        default="trim_ends",
        description="how the pipeline split places the layers L' = L + counted ends do not divide evenly: trim_ends "
                    "(ceil(L'/S) per chunk, the left-over slots off the first and the last chunk: Megatron-Core, Llama 3), "
                    "front (floor(L'/S) per chunk, one more on each of the first L' mod S chunks: torchtitan's "
                    "generate_llm_fqn_per_model_part, DeepSpeed's partition_balanced since its dynamic program) or "
                    "bisection (DeepSpeed a12aaedc's partition_balanced: a binary search for the least bottleneck, "
                    "then k units a chunk from the first, the last the rest, chunks past the units empty: 10 on 4 "
                    "3, 3, 3, 1; pipeline.py [11])")
    pipeline_ends_as_layers: Bool = Field(
        default=False,
        description="the stack always counts the embedding and the output layer with the loss as one layer each of the "
                    "pipeline split (the first and the last stage hold one transformer layer fewer: Llama 3's pipeline, "
                    "arXiv:2407.21783 sec. 3.3.2); a job on it runs account_for_embedding_in_pipeline_split and "
                    "account_for_loss_in_pipeline_split whether it sets them or not. false: the job's flags")
    pipeline_stage_layers: Bool = Field(
        default=False,
        description="the stack's trainer takes the first and the last pipeline stage's transformer layers as settings "
                    "of their own, the other layers equal on the middle stages (Megatron-LM @d98e8a64 "
                    "--decoder-first/last-pipeline-num-layers, megatron/training/arguments.py l. 3095-3102; "
                    "transformer_block.py get_num_layers_to_build l. 103-146; Job first_stage_layers / "
                    "last_stage_layers): fit searches where the layers the split leaves over go "
                    "(space.stage_placements). false: the stack's own split only")
    pipeline_tied_grad_allreduce: Bool = Field(
        default=False,
        description="at pp > 1 with tied embeddings the stack's pipeline runtime all-reduces the shared weight's gradient "
                    "between the first and the last stage once a step, after the last backward, waited on (DeepSpeed's "
                    "PipelineEngine._exec_reduce_tied_grads: step.py [20], in pp_comm). false: not priced")
    pipeline_p2p_batched: Bool = Field(
        default=False,
        description="the pipeline runtime runs each send with the receive from the same neighbour as one exchange "
                    "(Megatron-Core's send_forward_recv_backward / send_backward_recv_forward, "
                    "megatron/core/pipeline_parallel/p2p_communication.py @d98e8a64 l. 536-600, one _communicate each, "
                    "l. 371-383 batched or concurrent isend / irecv), and skips the side an end stage lacks (l. 549, "
                    "582: the first stage receives no activation and sends no gradient, the last the reverse): a middle "
                    "stage makes 2 exchanges a micro-batch and model chunk, stage 0 and stage p - 1 one fewer a "
                    "micro-batch (the first / last virtual stage's chunk), 2 v - 1 (step.pp_comm). false: every stage "
                    "priced at 2 v sends a micro-batch (a runtime whose ends are not known to differ)")
    pipeline_p2p_sequential: Bool = Field(
        default=False,
        description="the pipeline runtime runs a stage's sends and receives one after another, each blocking (DeepSpeed's "
                    "PipelineEngine: deepspeed/runtime/pipe/p2p.py @38327e07 send / recv l. 46-84, async_op refused, "
                    "dist.send / dist.recv or a broadcast; pipe/schedule.py TrainSchedule.steps l. 214-223: a forward "
                    "step's SendGrad then RecvActivation, a backward step's RecvGrad then SendActivation): a middle stage "
                    "makes 4 one-way transfers a micro-batch, each end stage 2 (the first sends no gradient and receives "
                    "no activation, the last the reverse: _valid_stage), so the middle's count is twice the 2 v of "
                    "step.pp_comm. false: a stage's send and receive of a direction run together")
    pipeline_send_partitioned_default: Bool = Field(
        default=False,
        description="the stack's pipeline runtime, unless the job says otherwise (job pipe_partitioned), sends each TP "
                    "rank's 1 / tp part of a stage's output and its gradient and all-gathers the parts over the TP "
                    "group on arrival (DeepSpeed's PipelineEngine pipe_partitioned / grad_partitioned: step.py [25], "
                    "in pp_comm; dense plans at pp > 1 x tp > 1 without SP). false: whole sends, no all-gather")
    pipeline_send_partitioned_grads: Bool = Field(
        default=True,
        description="where the partitioned pipe tensors run (pipeline_send_partitioned_default, job pipe_partitioned), "
                    "the gradient sent back is partitioned too (DeepSpeed's grad_partitioned, on since microsoft/"
                    "DeepSpeed e2fdd254e, 2021-09). false: activations only, the gradient sent whole and the sender's "
                    "output rebuilt by an all-gather before it arrives (DeepSpeed a12aaedc pipe/engine.py l. 112-113, "
                    "914-924: step.py [25])")
    pipeline_send_partitioned_switch: Bool = Field(
        default=True,
        description="the pipeline runtime reads a setting that turns the partitioned pipe tensors off (DeepSpeed's JSON "
                    "pipeline.pipe_partitioned / grad_partitioned, since microsoft/DeepSpeed c2074b341, 2023-11): a job's "
                    "pipe_partitioned false is priced and exported. false: they run wherever the grid has TP (DeepSpeed "
                    "a12aaedc pipe/engine.py l. 112: is_pipe_partitioned = is_model_parallel), and a job's "
                    "pipe_partitioned false is refused")
    pipeline_split_divides: Bool = Field(
        default=True,
        description="with the embedding or the loss counted as a layer of the split, the layers plus the counted ends "
                    "must divide into pp x vpp chunks (Megatron-Core's TransformerConfig rule, plan rule SPLIT_UNITS). "
                    "false: any split that places the model's layers, ceil(L'/(pp vpp)) a chunk with the left-over "
                    "slots off the first and the last chunk (pipeline.stage_layers), is accepted; a split that would "
                    "place layers the model does not have is refused (startup.split_overdrawn)")
    mla_tp_gathers: Literal["latents", "input"] = Field(
        default="input",
        description="what the stack's MLA layer all-gathers over the TP group (step.py [32], step.mla_tp_collectives): "
                    "latents (Megatron-Core: the down projections duplicated on the rank's tokens, the q and kv latents "
                    "gathered into the column-parallel up projections and, unfused, the rotary key along the sequence), "
                    "or input (torchtitan: the normed input gathered to every TP rank before the replicated down "
                    "projections, one all-gather / reduce-scatter pair of T h each way, as a standard attention block's); "
                    "a stack_db entry that builds MLA (runs.layer_kinds) with TP says which")
    moe_shared_experts_tp_pair: Bool = Field(
        default=False,
        description="whether an MoE layer's shared experts run a TP collective pair of their own (step.py [37]): true "
                    "(Megatron-Core: SharedExpertMLP, an MLP on the attention's TP group, its column-parallel fc1 "
                    "all-gathering the T h input under SP and its row-parallel fc2 reduce-scattering the output, one "
                    "pair each way as a dense layer's MLP, and fc1's wgrad re-gather, step.py [35]); false (the default, "
                    "a documented rule): none of their own, the shared experts computing on the MoE block's gathered "
                    "input inside the block's own TP layout (torchtitan: moe.shared_experts colwise / rowwise with "
                    "Partial output under the moe module's one input all-gather and output reduce-scatter), or a stack "
                    "without TP or without shared experts")
    moe_shared_expert_overlap_dispatchers: Optional[list[Literal["alltoall", "allgather", "deepep", "deepep_ll",
                                                                  "hybridep"]]] = Field(
        default=None,
        description="the MoE dispatchers with which the stack runs its shared experts on a side stream beside the "
                    "all-to-alls (Megatron-Core --moe-shared-expert-overlap, the job's moe_shared_expert_overlap, step.py "
                    "[38]): megatron's alltoall and flex (deepep, hybridep), megatron-bridge's pinned Megatron-Core "
                    "alltoall only; null (the default): the stack has no such overlap, a job that sets it is refused")
    context_parallel: Optional[ContextParallelSpec] = Field(
        default=None, description="how the stack runs attention under context parallelism; null: the default "
                                  "stack's (megatron: Transformer Engine's P2P ring), a named assumption")
    cp_comm_types: Optional[CPCommTypes] = Field(
        default=None, description="the context-parallel variants the stack runs by name (job field cp_comm_type); "
                                  "null: only context_parallel, and a job's cp_comm_type is refused")
    cpu_offload: Optional[CPUOffloadSpec] = Field(
        default=None, description="how the stack offloads model states to the host (job fields offload_optimizer, "
                                  "offload_param; planner/offload.py); null: it does not, and a job that offloads is "
                                  "refused")
    checkpoint: Optional[CheckpointSpec] = Field(
        default=None, description="what the stack's checkpoint writes beside the master and the moments (planner/budget.py "
                                  "[8]); null: the seed's convention (sec. 9.2: master weights and Adam's moments, no "
                                  "working weights), listed as assumed by `budget`")
    runs: Optional[StackRuns] = Field(
        default=None, description="what the stack can run (sharding modes, schedules, rank orders, degrees); "
                                  "null: a user stack file that does not say (every plan is taken as runnable)")
    export_format: Optional[Literal["torchtitan", "megatron", "deepspeed", "megatron-deepspeed"]] = Field(
        default=None,
        description="the trainer format (planner export --format) whose files run this stack's plans where the plan's "
                    "layers are ones the format's own stack builds: a stack that extends the format's stack and adds "
                    "only layers (megatron-bridge: Megatron-LM flags drive the same Megatron-Core); a plan with a "
                    "layer the format's stack does not build is refused, naming it (planner/trainers/export.py). "
                    "null: only the format's own stack exports in it")
    uncertain: list[str] = Field(default_factory=list)
    sources: list[str] = Field(min_length=1)
    # the file the stack was read from where it is not a stack_db entry, and the catalog stack it extends (set by
    # catalog.load_stack; None: a catalog entry): what messages name as the stack's fields' place (origin)
    _file: Optional[str] = PrivateAttr(default=None)
    _extends: Optional[str] = PrivateAttr(default=None)

    @property
    def file(self) -> Optional[str]:
        """The user's file the stack was read from; None for a stack_db entry."""
        return self._file

    @property
    def origin(self) -> str:
        """Where a message says the stack's fields are written: `stack_db NAME` for a catalog entry, else `stack
        file PATH` (with `(extends BASE)` where the file extends a catalog stack, whose fields it inherits): a
        user's file named like an entry, or extending one, is not that entry."""
        if self._file is None:
            return f"stack_db {self.name}"
        return f"stack file {self._file}" + (f" (extends {self._extends})" if self._extends is not None else "")

    @property
    def base(self) -> Optional[str]:
        """The stack_db entry whose trainer code the stack runs: its own name for an entry, the entry a user's file
        `extends:` (catalog.stack_data allows a catalog stack only), None for a user's file that extends none. What
        tables keyed by a catalog trainer (trainers/torchtitan.py TORCHTITAN_NAME_CODES) are looked up by, so a
        user's file extending torchtitan reads a TOML as torchtitan does and one merely named like an entry does not."""
        return self.name if self._file is None else self._extends

    @model_validator(mode="after")
    def _check(self) -> "Stack":
        r = self.defaults.fp8_recipe
        if r is not None and r not in self.fp8_recipes:
            raise ValueError(f"defaults.fp8_recipe {r!r} is not one of fp8_recipes ({', '.join(self.fp8_recipes) or 'none'})")
        for n, rec in self.fp8_recipes.items():
            g = rec.grouped_experts_recipe
            if g is not None and (g not in self.fp8_recipes or self.fp8_recipes[g].grouped_experts_recipe not in (None, g)):
                raise ValueError(f"fp8_recipes.{n}.grouped_experts_recipe {g!r}: not a recipe of fp8_recipes that prices "
                                 f"its own grouped GEMMs ({', '.join(self.fp8_recipes)})")
        if self.defaults.torch_compile and self.compiled_kernels is None:
            raise ValueError("defaults.torch_compile is true but the stack has no compiled_kernels")
        if self.defaults.attention == "eager" and self.kernels.score_softmax is None:
            raise ValueError("defaults.attention eager but kernels.score_softmax is null: the stack describes no eager "
                             "core attention")
        runs = self.runs
        if (runs is not None and runs.max_tp != 1 and any(k.kind == "mla" for k in runs.layer_kinds or ())
                and "mla_tp_gathers" not in self.model_fields_set):
            raise ValueError("runs.layer_kinds lists mla with TP but mla_tp_gathers is not set: say what the stack's MLA "
                             "layer gathers over TP (latents or input, step.py [32])")
        if self.defaults.moe_hybridep_capacity_factor and not (runs is not None and runs.hybridep_non_blocking):
            raise ValueError("defaults.moe_hybridep_capacity_factor is set but runs.hybridep_non_blocking is false: the "
                             "stack's HybridEP has no non-blocking dispatch to size")
        backends = runs.attention_backends if runs is not None else None
        if (self.defaults.attention_backend is None) != (backends is None) or (
                backends is not None and self.defaults.attention_backend not in backends):
            raise ValueError(f"defaults.attention_backend {self.defaults.attention_backend} must be one of "
                             f"runs.attention_backends ({backends}), both set or both null")
        if runs is not None and runs.attention is not None and self.defaults.attention not in runs.attention.cores:
            raise ValueError(f"defaults.attention {self.defaults.attention} is not among runs.attention cores "
                             f"({', '.join(runs.attention.cores)})")
        if runs is not None and runs.attention is not None and "eager" in runs.attention.cores \
                and self.kernels.score_softmax is None:
            raise ValueError("runs.attention lists eager but kernels.score_softmax is null: the stack describes no "
                             "eager core attention")
        ck = self.checkpoint
        bad = [m for m in (ck.model_weights_modes if ck is not None and runs is not None else [])
               if m not in [x.name for x in runs.sharding]]
        if bad:
            raise ValueError(f"checkpoint.model_weights_modes {bad}: not sharding modes of runs.sharding "
                             f"({', '.join(x.name for x in runs.sharding)}); a file that extends a stack and narrows "
                             f"runs.sharding restates checkpoint with the modes it keeps")
        half = "fp16" if self.defaults.fp16 else "bf16"
        if runs is not None and runs.half_dtypes is not None and half not in runs.half_dtypes.dtypes:
            raise ValueError(f"defaults.fp16 {str(self.defaults.fp16).lower()} ({half}) is not among runs.half_dtypes "
                             f"({', '.join(runs.half_dtypes.dtypes)})")
        if runs is not None and runs.recompute is not None and "none" not in runs.recompute.granularities:
            raise ValueError("runs.recompute lacks none: a job that leaves recompute out runs none")
        chunked = [x.schedule for x in (runs.schedules if runs else []) if x.schedule in ("interleaved", "dualpipe")]
        if self.pipeline_split == "bisection" and chunked:  # DeepSpeed's PipelineModule split: one chunk a stage
            raise ValueError(f"pipeline_split bisection with runs.schedules {', '.join(chunked)}: the bisection split is "
                             "DeepSpeed's PipelineModule partition (one model chunk a stage, 1F1B TrainSchedule), which "
                             "can leave virtual-stage chunks empty; list 1f1b / gpipe only, or pipeline_split front")
        on = [m.name for m in (self.runs.sharding if self.runs else []) if m.dp_comm_overlap]
        if on and not self.overlap.dp_comm_overlap_supported:  # a mode's default the stack cannot run (plan.resolve)
            raise ValueError(f"runs.sharding {', '.join(on)}: dp_comm_overlap true needs overlap.dp_comm_overlap_supported")
        queued = [m.name for m in (self.runs.sharding if self.runs else []) if m.reduce_queue_units is not None]
        if queued and self.fsdp.zero2_reduce_queue_params is None:  # the queue's capacity (memory.py [rs])
            raise ValueError(f"runs.sharding {', '.join(queued)}: reduce_queue_units needs fsdp.zero2_reduce_queue_params "
                             "(the reduce-scatter queue's capacity, memory.py [rs])")
        if self.fsdp.gather_prefetch_share is not None and self.fsdp.zero2_reduce_queue_params is None:
            raise ValueError("fsdp.gather_prefetch_share needs fsdp.zero2_reduce_queue_params (the prefetch's capacity is a "
                             "share of the reduce-scatter queue's, memory.py [pf])")
        ipg = [m.name for m in (self.runs.sharding if self.runs else []) if m.step_grads and m.step_grads.ipg_buffer]
        if ipg and self.fsdp.zero3_modules is None:  # the buffer's size is fsdp.zero3_modules.reduce_bucket_size
            raise ValueError(f"runs.sharding {', '.join(ipg)}: step_grads.ipg_buffer needs fsdp.zero3_modules "
                             "(its reduce_bucket_size sizes the buffer, memory.py [zb])")
        if self.fsdp.zero3_rerun_regathers and self.fsdp.zero3_modules is None:  # the reuse distance is its setting
            raise ValueError("fsdp.zero3_rerun_regathers needs fsdp.zero3_modules (stage3_max_reuse_distance decides "
                             "which re-run modules stay gathered to their backward, step.py [23])")
        if self.compiled_kernels is not None:
            # fit takes compile on without searching it (space.variant_choices; off only where a start-up rule
            # refuses the options compiled, space.uncompiled_choices): it must never cost more
            def eff(k, f):  # a null loss_parallel figure is the loss's own (stacks.kernel_bytes)
                v = getattr(k, f)
                if v is None and f == "loss_parallel_transient_per_logit":
                    return k.loss_transient_per_logit
                return k.loss_saved_per_logit if v is None else v
            # (loss_saved_input_per_logit: bytes counted once, not moved: a larger figure prices less, memory.py [lp])
            worse = [f for f in type(self.kernels).model_fields if f not in ("sources", "loss_saved_input_per_logit")
                     and eff(self.compiled_kernels, f) > eff(self.kernels, f)]
            if worse:
                raise ValueError(f"compiled_kernels move more bytes than kernels for {', '.join(worse)}: torch.compile fuses, it never adds traffic")
        return self

    def attention_kernel_for(self, capability: Optional[tuple[int, int]], job_kernel: Optional[str] = None) -> str:
        """The attention kernel a job runs on a GPU of this compute capability (compute.py [7a]):
        the job's own, else the first attention_kernels rule that holds it, else flash2."""
        if job_kernel is not None:
            return job_kernel
        return next((r.kernel for r in self.attention_kernels if r.holds(capability)), "flash2")


class BytesPerParam(BaseModel):
    """Bytes of model state per parameter (ZeRO, Rajbhandari et al. 2019, sec. 3.1).

    Default (mixed16): bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m, v 8 = 16 B.
    """

    model_config = Strict
    weights: Real = Field(default=2.0, ge=0)
    gradients: Real = Field(default=2.0, ge=0)
    master: Real = Field(default=4.0, ge=0, description="fp32 master copy; 0 = none (pure bf16 training)")
    optimizer: Real = Field(default=8.0, ge=0, description="Adam m and v")

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.master + self.optimizer


BYTES_PER_PARAM_PRESETS: dict[str, BytesPerParam] = {
    # Seed sec. 1.2 / ZeRO paper: 2 + 2 + 4 + 4 + 4 = 16 B.
    "mixed16": BytesPerParam(),
    # Megatron-LM: fp32 main grads (accumulated in fp32), bf16 params, fp32 master + Adam:
    # 2 + 4 + 4 + 8 = 18 B; with the distributed optimizer 6 + 12/d (Megatron-LM
    # docs/source/api-guide/dist_optimizer.md table) -> use sharding zero1.
    "megatron": BytesPerParam(weights=2, gradients=4, master=4, optimizer=8),
    # bf16 everything, no fp32 master: 2 + 2 + 2 + 2 (bf16 Adam m, v). Seed sec. 7.1 warns.
    "pure-bf16": BytesPerParam(weights=2, gradients=2, master=0, optimizer=4),
    # DeepSeek-V3 (arXiv:2412.19437 sec. 3.3.3 "Low-Precision Optimizer States"): AdamW's first
    # and second moments in bf16 (2 + 2), the master weights and the gradients "used for batch
    # size accumulation" in fp32 (4 + 4); bf16 working weights 2 (assumed: sec. 3.3.1 casts
    # them to fp8 per GEMM, Figure 6): 2 + 4 + 4 + 4 = 14 B; with ZeRO-1 6 + 8/d
    "bf16-moments": BytesPerParam(weights=2, gradients=4, master=4, optimizer=4),
}

# Megatron-Core --recompute-modules the planner prices (planner/recompute_modules.py); Megatron's
# other choices (the linear-attention ones gdn_norm_out, gdp_in_proj, gdp_qkv and the hyper-connections' mhc) are refused
RecomputeModule = Literal["core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe", "shared_experts"]


# A Job field that names an option of one stack's code (Megatron's fused loss, torchtitan's rotate
# method, ...): a command-line --stack that replaces a trainer file's stack chooses anew, so
# cli/core.load_job drops the file's value of every field marked so (stack_only_fields)
STACK_ONLY = {"stack_only": True}
CPCommType = Literal["p2p", "all_gather", "a2a", "a2a+p2p"]


def fusion_switch(what: str):
    """A Job field that turns one of the stack's fused kernels off (planner/plan.py FUSION_SWITCHES):
    None runs the stack's fused kernel; a stack without the unfused figures refuses false."""
    return Field(json_schema_extra=STACK_ONLY, default=None, description=what + "; default: the stack's (fused)")


def split_loss_units(fields) -> int:
    """Layers of the pipeline split the last chunk's end (output layer, loss, MTP) counts as
    (pipeline.stage_layers' split_loss), from a job's or a plan dict's fields:
    loss_layers_in_pipeline_split, else account_for_loss_in_pipeline_split's 0 / 1."""
    n = fields.get("loss_layers_in_pipeline_split")
    return int(bool(fields.get("account_for_loss_in_pipeline_split", False))) if n is None else int(n)


def split_fields(e: int, l_: int) -> dict:
    """The job fields of a split's (embedding, loss units): a loss end of more than one layer (a
    Megatron layout's 'm...L' end) is loss_layers_in_pipeline_split, 0 / 1 the --account-for-* flag
    (the inverse of split_loss_units)."""
    return {"account_for_embedding_in_pipeline_split": bool(e), "account_for_loss_in_pipeline_split": l_ == 1,
            **({"loss_layers_in_pipeline_split": l_} if l_ > 1 else {})}


class BatchPhase(BaseModel):
    """One phase of a batch-size ramp (Job.batch_size_schedule; planner/batch_ramp.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    from_tokens: Real = Field(ge=0, description="the phase starts when the run has consumed this many tokens "
                                                 "(Megatron's THRESHOLD; the first phase's is 0)")
    global_batch: Count = Field(gt=0, description="sequences per step in this phase")


class Job(BaseModel):
    """A training job: what `planner explain job.yaml` and `planner check` read.

    Every field has the same name as the matching CLI option (with dashes as underscores).

    A job file may also spell a key with dashes, as the option (`micro-batch`), in any case (`reserve-gib`).
    """

    # built on the first validation, as the catalog's models (Strict): a command that makes no
    # Job (`planner models`, `collective`, `pipeline`, ...) does not pay for its schema (issue 24)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

    @field_validator("reserve_GiB")
    @classmethod
    def _reserve_finite(cls, v: float) -> float:
        if not math.isfinite(v * 2**30):
            raise ValueError(f"{v!r} GiB overflows to an infinite number of bytes; give GiB per GPU (e.g. 1.0)")
        return v

    @model_validator(mode="after")
    def _loss_layers(self) -> "Job":
        n = self.loss_layers_in_pipeline_split
        if n is not None and n != 1 and self.account_for_loss_in_pipeline_split:
            raise ValueError(f"loss_layers_in_pipeline_split {n} contradicts account_for_loss_in_pipeline_split (1 layer): "
                             "give one of the two")
        return self

    @field_validator("batch_size_schedule")
    @classmethod
    def _batch_phases(cls, sch):
        from .batch_ramp import schedule_error

        why = None if sch is None else schedule_error([(p.from_tokens, p.global_batch) for p in sch])
        if why is not None:
            raise ValueError(f"Megatron-LM refuses the schedule: {why}")
        return sch

    @model_validator(mode="after")
    def _batch_schedule(self) -> "Job":
        sch = self.batch_size_schedule
        if sch is None:
            return self
        if self.global_batch_tokens is not None:
            raise ValueError("batch_size_schedule with global_batch_tokens: give the batches in the schedule only")
        if self.global_batch is not None and self.global_batch != sch[-1].global_batch:
            raise ValueError(f"global_batch {self.global_batch} is not the schedule's last batch {sch[-1].global_batch}: "
                             "the plan runs the last phase's batch (leave global_batch out)")
        return self

    @property
    def loss_units(self) -> int:
        """Layers of the pipeline split the last chunk's end counts as (split_loss_units)."""
        return split_loss_units({"loss_layers_in_pipeline_split": self.loss_layers_in_pipeline_split,
                                 "account_for_loss_in_pipeline_split": self.account_for_loss_in_pipeline_split})

    @model_validator(mode="after")
    def _order(self) -> "Job":
        if self.rank_order is None:
            return self
        parts = sorted(p.strip() for p in self.rank_order.replace(",", "-").split("-") if p.strip())
        if parts != ["cp", "dp", "pp", "tp"]:
            raise ValueError(f"rank_order {self.rank_order!r} must name tp, cp, pp and dp once each, innermost first (e.g. tp-cp-pp-dp)")
        return self

    model: str = Field(description="catalog name, or a path to a model YAML or a Hugging Face config.json")
    hardware: str = Field(default="h100-sxm", description="catalog name or path to a hardware YAML")
    gpus: Count = Field(gt=0)
    tp: Count = Field(default=1, gt=0)
    cp: Count = Field(default=1, gt=0)
    pp: Count = Field(default=1, gt=0)
    vpp: Count = Field(default=1, gt=0, description="virtual pipeline stages (model chunks) per GPU")
    dp: Optional[Count] = Field(default=None, gt=0, description="derived from gpus / (tp*cp*pp); if given it must match")
    micro_batch: Optional[Count] = Field(default=None, gt=0, description="sequences per micro-batch (default: the stack's: 1, or the local batch / pp for torchtitan)")
    global_batch: Optional[Count] = Field(default=None, gt=0, description="sequences per step")
    global_batch_tokens: Optional[Real] = Field(default=None, gt=0, description="tokens per step")
    batch_size_schedule: Optional[list[BatchPhase]] = Field(
        default=None, min_length=1,
        description="a batch-size ramp (Megatron-LM --step-batch-size-schedule): from each phase's from_tokens the run "
                    "steps at its global_batch; the first at 0 tokens, thresholds increasing, batches never decreasing, "
                    "each a multiple of micro_batch x dp; the plan is the last batch's, the run's time the phases' "
                    "steps at their own batch (planner/batch_ramp.py); default: one batch")
    seq_len: Optional[Count] = Field(
        default=None, gt=0, description="default: the model's published pre-training length (model_zoo training.seq_len, "
                                        "plan._seq_len), else the smaller of its max_seq_len and plan.HF_DEFAULT_SEQ")
    sharding: Sharding = "none"
    sharding_mode: Optional[str] = Field(
        default=None, description="the stack's sharding mode (stack_db runs.sharding, e.g. megatron_fsdp_optim_grads); "
                                  "default: the stack's first mode of the sharding level that the trainer accepts for the plan")
    shard_group: Optional[Count] = Field(default=None, gt=0, description="hsdp: GPUs in one shard group; zero1 on a mode "
                                                                        "with optimizer_instances (Megatron's distributed "
                                                                        "optimizer): dp / --num-distributed-optimizer-instances")
    recompute: Recompute = "none"
    recompute_layers: Optional[Count] = Field(
        default=None, gt=0,
        description="with recompute full: re-run at most this many layers per pipeline stage, the rest keep their "
                    "activations (Megatron-LM --recompute-method block --recompute-num-layers); default all")
    recompute_modules: Optional[list[RecomputeModule]] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, min_length=1,
        description="with recompute selective on a stack that names them (stack recompute_modules): the modules the "
                    "selective policy re-runs (Megatron-Core --recompute-granularity selective --recompute-modules: "
                    "core_attn, layernorm, moe_act, mla_up_proj; planner/recompute_modules.py); default: the stack's "
                    "selective policy (Megatron's default modules: core_attn)")
    sequence_parallel: Optional[Bool] = Field(
        default=None, description="default: on when tp > 1, off on a stack whose code has none (stack_db runs.sequence_parallel)")
    precision: Precision = Field(default="bf16", description="bf16 | fp8 | nvfp4 (planner/precisions.py)")
    fp16: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="the 16-bit dtype is fp16 with loss scaling, not bf16 (Megatron --fp16 in place of "
                                   "--bf16; with fp8 / nvfp4 the parameters' dtype): priced as bf16 (the same 2-byte width "
                                   "and tensor-core peak, precisions.SAME_PEAK); Megatron refuses it under "
                                   "--use-torch-fsdp2 and DeepSpeed runs ZeRO stage 0 (megatron-deepspeed zero0) with it "
                                   "only (stack_db runs.sharding job_settings, unset default: a job leaving it out is bf16, "
                                   "planned without zero0); "
                                   "exported by the megatron (--fp16) and deepspeed (fp16.enabled) formats; default off")
    schedule: Optional[Schedule] = Field(default=None, description="default: interleaved if vpp > 1 else 1f1b; zb-h1 = zero-bubble H1 (Qi et al. 2023)")
    microbatch_group: Optional[Count] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, gt=0,
        description="interleaved schedule: N, the contiguous micro-batches each virtual stage runs before the next "
                    "(Megatron-LM --microbatch-group-size-per-virtual-pipeline-stage): N in [pp, m] with m % N 0 or >= pp "
                    "(plan rule INTERLEAVED_M); the warm-up holds (vpp - 1)(N - pp) more chunk-micro-batches than "
                    "with N = pp (planner/pipeline.py [10]); a Megatron setting, refused on stacks whose schedule has "
                    "none; default: the stack's rule (Megatron: pp)")
    rank_order: Optional[str] = Field(
        default=None, description="mesh axes innermost first (TP innermost = on NVLink); default: the stack's own order "
                                  "(the first of stack_db runs.rank_orders, e.g. Megatron's tp-cp-dp-pp), else tp-cp-pp-dp")
    bytes_per_param: Optional[Union[BppPreset, BytesPerParam]] = Field(
        default=None, description="model-state bytes per parameter (default: the stack's)")
    mtp_layers: Optional[Count] = Field(
        default=None, ge=0,
        description="multi-token prediction modules trained on the last pipeline stage (DeepSeek-V3 sec. 2.2; Megatron "
                    "--mtp-num-layers): each a 2h x h projection, two RMSNorms, one layer of the last layer's kind and "
                    "a second pass of the shared output head and loss; default: the model's mtp_layers")
    make_vocab_size_divisible_by: Optional[Count] = Field(
        default=None, gt=0,
        description="the divisor of the stack's vocabulary padding (Megatron --make-vocab-size-divisible-by: the rows "
                    "a multiple of it x tp, stack_db vocab_padding); default: the stack's (128); refused on a stack "
                    "that does not pad (vocab_padding null) and beside padded_vocab_size (which pins the rows)")
    padded_vocab_size: Optional[Count] = Field(
        default=None, gt=0,
        description="the embedding's and output layer's rows as the trainer builds them (Megatron --padded-vocab-size: "
                    "the tokenizer's vocabulary rounded up to a multiple of --make-vocab-size-divisible-by [128] x tp, "
                    "NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py "
                    "vocab_size_with_padding; the Megatron readers set it from the script's tp): the model priced "
                    "with this many rows (weights, gradients, optimizer states, logits, the output GEMM, the model "
                    "FLOPs as Megatron's own count, training.py l. 1302 args.padded_vocab_size); at least the model's "
                    "tokens (its tokenizer_vocab_size where given, else its vocab_size) and a multiple of tp (fit refuses the tp that do not divide it); default: the stack's padding of the "
                    "model's vocab_size at the plan's tp (stack_db vocab_padding: Megatron's 128 x tp), none where the "
                    "stack pads none (torchtitan)")
    activation_model: Literal["arch", "korthikanti"] = "arch"
    attention: Literal["flash", "eager"] = Field(
        default="flash", description="the core attention: flash (a fused kernel, attention_kernel) or eager (batched GEMMs, "
                                     "softmax, dropout; the scores kept); a job that leaves it out runs the stack's "
                                     "defaults.attention under explain / check (eager on megatron-deepspeed and "
                                     "megatron-deepspeed-2021: their code's default core) and fit plans the first of "
                                     "runs.attention's cores (plan.fit_attention); one the stack's code lacks "
                                     "(runs.attention) is refused")
    attention_kernel: Optional[AttentionKernel] = Field(
        default=None, description="the fused attention kernel the job runs (flash2 | cudnn | flex; e.g. Megatron "
                                  "--attention-backend flash | fused); default: the stack's attention_kernels for the GPU")
    attention_backend: Optional[AttentionBackend] = Field(
        default=None, description="the attention module the trainer's model code builds (torchtitan: sdpa | flex | varlen, "
                                  "main's flavor attn_type, 0.3.0's model_registry attn_backend; the torchtitan readers "
                                  "set it from the flavor / config function): read by the start-up rules (varlen refuses "
                                  "context parallelism: startup.TORCHTITAN_VARLEN_CP), priced by its kernel "
                                  "(attention_kernel); only on a stack that lists it (runs.attention_backends); default: "
                                  "the stack's defaults.attention_backend")
    causal_attention_flops: Bool = Field(default=False, description="count causal (halved) attention FLOPs")
    headroom: Real = Field(default=0.10, ge=0.0, lt=1.0)
    reserve_GiB: Real = Field(default=1.0, ge=0.0, description="CUDA context + NCCL buffers per GPU")
    tokens: Optional[Real] = Field(default=None, gt=0, description="training tokens, for total FLOPs and days")
    calibration: Optional[str] = Field(default=None, description="calibration profile YAML (planner calibrate ...)")
    stack: str = Field(default="megatron", description="software stack: catalog name (planner stacks) or a stack YAML")
    tp_comm_overlap: Optional[Bool] = Field(default=None, description="overlap TP collectives with the GEMMs they feed (Megatron --tp-comm-overlap, torchtitan async TP); needs SP; default: the stack's")
    dp_comm_overlap: Optional[Bool] = Field(default=None, description="overlap gradient reduction with the backward pass and the parameter all-gather with the forward (Megatron --overlap-grad-reduce/--overlap-param-gather); default: the stack's")
    dp_param_gather_overlap: Optional[Bool] = Field(
        default=None, description="the sharded optimizer's parameter all-gather after the step overlapped with the next "
                                  "forward (Megatron --overlap-param-gather, Megatron-Bridge ddp.overlap_param_gather): "
                                  "false exposes the whole all-gather of the updated 16-bit weights (Megatron without "
                                  "--overlap-param-gather: DistributedOptimizer.step_with_ready_grads' synchronous "
                                  "start_param_sync, planner/step.py [5]); read at the zero1 / zero2 levels only (the "
                                  "FSDP levels' per-unit gathers follow dp_comm_overlap); true needs dp_comm_overlap on "
                                  "(Megatron asserts it) and is refused on a stack whose overlap."
                                  "dp_param_gather_overlap_supported is false (DeepSpeed: always exposed); default: "
                                  "dp_comm_overlap's value as the plan runs it, exposed on such a stack")
    torch_compile: Optional[Bool] = Field(default=None, description="torch.compile (fuses the memory-bound kernels); default: the stack's")
    fp8_recipe: Optional[str] = Field(default=None, description="with precision fp8 or nvfp4: the scaling recipe (tensorwise, rowwise, delayed, mxfp8, blockwise; nvfp4); default: the stack's")
    power_limit_w: Optional[Real] = Field(default=None, gt=0, description="GPU board power limit, W (default: the hardware's)")
    # the node's host as the job's servers have it (plan._apply_host): each replaces the hardware entry's figure of the
    # same name (hardware pcie_GBps, host_memory_GBps, host_memory_GB), as power_limit_w replaces its power_limit_W;
    # read by CPU offload only (planner/offload.py)
    pcie_gbps: Optional[Real] = Field(
        default=None, gt=0,
        description="the GPU's host link, GB/s per direction (PCIe Gen5 x16: 64), in place of the hardware's pcie_GBps: "
                    "what CPU offload's copies move over (planner/offload.py); default: the hardware's")
    host_memory_gbps: Optional[Real] = Field(
        default=None, gt=0,
        description="the node's host DRAM bandwidth, GB/s, the datasheet peak (channels x MT/s x 8 B x sockets), in "
                    "place of the hardware's host_memory_GBps: what CPU offload's host Adam streams at "
                    "(planner/offload.py [cpu-adam]); default: the hardware's")
    host_memory_gb: Optional[Real] = Field(
        default=None, gt=0,
        description="the node's host memory, GB (1e9 bytes), in place of the hardware's host_memory_GB: the gate of CPU "
                    "offload's host bytes (planner/offload.py); default: the hardware's")
    bf16_layers_at_start: Int = Field(
        default=0, ge=0, description="with fp8 / nvfp4: the first transformer layers that stay bf16 (Megatron "
                                     "--first-last-layers-bf16 --num-layers-at-start-in-bf16)")
    bf16_layers_at_end: Int = Field(
        default=0, ge=0, description="with fp8 / nvfp4: the last transformer layers that stay bf16 "
                                     "(--num-layers-at-end-in-bf16)")
    fp8_output_layer: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="with fp8: the output layer (logits GEMM) runs in fp8 too, where the stack's recipe "
                                   "keeps it bf16 (torchtitan's float8 converter with filter_fqns not naming 'output': "
                                   "job_config.py Float8Linear.filter_fqns default []); skipped, as torchtitan's "
                                   "module_filter_fn does, where vocab_size or hidden_size is not a multiple of 16; "
                                   "needs a recipe with output_layer_convertible; default off")
    filter_fqns: Optional[list[str]] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="with fp8 on a stack whose recipes convert Linear modules (torchtitan): its "
                                  "[float8] / [quantize.linear.float8] filter_fqns, the module names (substrings of "
                                  "the fully qualified names: attention.wq, feed_forward.w1, moe.router.gate, ...) kept "
                                  "bf16, with 'auto_filter_small_kn' for torchao's per-recipe size thresholds "
                                  "(planner/fp8_linears.py, step.py [18]); the output layer's entry is fp8_output_layer's "
                                  "(an 'output' entry must agree with it); null: ['output', 'router.gate'], the shipped "
                                  "MoE configs' (the router bf16)")
    fp8_attention: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="with fp8: the fused attention (softmax(QK^T) V and its backward) in fp8 too "
                                   "(Megatron-Core TransformerConfig.fp8_dot_product_attention, Transformer Engine's "
                                   "recipe fp8_dpa): q, k, v (and with delayed scaling the output) saved quantized, the "
                                   "forward at the fp8 attention rate (planner/step.py fp8_core, memory.py [fa8]); "
                                   "needs a recipe with fp8_attention (stack_db fp8_recipes) on a GPU it runs on; "
                                   "default off")
    fp8_allgather: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="with fp8 under FSDP: whether the weight all-gather moves the converted Linears' "
                                  "weights in fp8 (torchtitan [float8] enable_fsdp_float8_all_gather, torchao "
                                  "Float8LinearConfig; torchtitan's default false, job_config.py @e347b1e5e l. 732): "
                                  "true 1 B per converted-Linear parameter, the rest (embedding, norms, routers, "
                                  "routed experts, the output layer unless fp8_output_layer) 2 B; false 2 B for all; "
                                  "null: the stack's recipe rule (stack_db fp8_recipes allgather_fp8). Needs a recipe "
                                  "with allgather_fp8 (torchtitan tensorwise); not Megatron's fp8_param_gather")
    fp8_precompute_scale: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="with FSDP's fp8 all-gather (fp8_allgather): torchtitan [float8] "
                                  "precompute_float8_dynamic_scale_for_fsdp, torchao's one all-reduce of every "
                                  "converted weight's amax after the optimizer step in place of one all-reduce per "
                                  "weight in each all-gather (step.py [39]); null: false, torchtitan's default "
                                  "(job_config.py @e347b1e5e l. 735); true needs a recipe with the fp8 all-gather")
    fp8_grouped_experts: Optional[Bool] = Field(
        default=None, description="with fp8 / nvfp4 on an MoE model: whether the routed experts' grouped GEMMs run in the "
                                  "plan's low precision (true: the recipe's rate, with its casts, step.py [16]) or bf16 "
                                  "(false). torchtitan @e347b1e5e runs GroupedExperts in bf16 (models/moe/moe.py l. "
                                  "113-130) unless [quantize.grouped_mm.float8] (rowwise scaled grouped GEMMs, "
                                  "components/quantization/float8.py l. 176-236; needs pp = cp = 1, start-up rule "
                                  "TORCHTITAN_FP8_GROUPED_MM_PP_CP) or [quantize.grouped_mm.mx] (mxfp8, SM100, mx.py "
                                  "l. 99-168) converts them; Megatron-Core runs TE's GroupedLinear under the layer's fp8 "
                                  "autocast. null: the stack's rule (stack_db defaults.fp8_grouped_experts: torchtitan "
                                  "false, Megatron true), listed as assumed where it applies; docs/torchtitan_grouped_mm.md")
    account_for_embedding_in_pipeline_split: Bool = Field(
        default=False,
        description="count the embedding as a layer of the pipeline split: the first chunk holds one transformer layer "
                    "fewer (Megatron-Core --account-for-embedding-in-pipeline-split; Megatron-Bridge recipes)")
    account_for_loss_in_pipeline_split: Bool = Field(
        default=False,
        description="count the output layer and loss as a layer of the pipeline split: the last chunk holds one "
                    "transformer layer fewer (Megatron-Core --account-for-loss-in-pipeline-split)")
    loss_layers_in_pipeline_split: Optional[Int] = Field(
        default=None, ge=0,
        description="the end of the last model chunk (the output layer, the loss and any multi-token prediction "
                    "modules) counts as this many layers of the pipeline split: the last chunk holds that many "
                    "transformer layers fewer (Megatron-Core --pipeline-model-parallel-layout with 'm' and 'L' at the "
                    "end, e.g. Megatron-Bridge's DeepSeek-V3 'Et*4|(t*4|)*14tmL': 3, pipeline.stage_layers); 1 is "
                    "account_for_loss_in_pipeline_split; null: that flag's 0 or 1")
    first_stage_layers: Optional[Count] = Field(
        default=None, gt=0,
        description="transformer layers on the first pipeline stage; the layers the first and last stage leave divide "
                    "equally over the other stages (Megatron-LM --decoder-first-pipeline-num-layers, TransformerConfig "
                    "num_layers_in_first_pipeline_stage; NVIDIA/Megatron-LM @d98e8a64 transformer_block.py "
                    "get_num_layers_to_build l. 103-146, pipeline.py [14]). Megatron's rules apply (plan.uneven_split_error): "
                    "> 0 and a multiple of vpp, the middle stages' layers equal and each a multiple of vpp, not with "
                    "account_for_*_in_pipeline_split or a layout; a stack that splits by its own rule refuses it. "
                    "Given, a constant of every plan fit ranks; left out, fit tries where the layers a split leaves "
                    "over go on a stack with pipeline_stage_layers (space.stage_placements). null: the planner's split")
    last_stage_layers: Optional[Count] = Field(
        default=None, gt=0,
        description="transformer layers on the last pipeline stage (Megatron-LM --decoder-last-pipeline-num-layers, "
                    "TransformerConfig num_layers_in_last_pipeline_stage), under first_stage_layers' rules. null: the "
                    "planner's split")
    etp: Optional[Count] = Field(
        default=None, gt=0, description="expert tensor-parallel degree: each routed expert split over etp ranks, an "
                                        "axis of its own (MoE parallel folding: etp x ep divides tp x dp x cp; Megatron "
                                        "--expert-tensor-parallel-size, torchtitan expert_tensor_parallel_degree); default "
                                        "tp (Megatron's)")
    ep: Count = Field(default=1, gt=0, description="expert parallel degree: routed experts split over ep ranks of the folded "
                                                 "tp x dp x cp grid (etp x ep divides it; Megatron "
                                                 "--expert-model-parallel-size); MoE models only")
    pipe_partitioned: Optional[Bool] = Field(
        default=None, description="DeepSpeed's pipeline engine: send each TP rank's 1 / tp part of the stage output "
                                  "and gradient and all-gather them over the TP group on arrival (the JSON's "
                                  "pipeline.pipe_partitioned and grad_partitioned); default the stack's "
                                  "pipeline_send_partitioned_default; applies to dense plans at pp > 1 x tp > 1 "
                                  "without sequence parallelism (MoE and SP plans run it off)")
    ep_comm_overlap: Optional[Bool] = Field(
        default=None, description="MoE: hide the EP all-to-alls of one micro-batch behind another's forward/backward compute "
                                  "(Megatron-Core --overlap-moe-expert-parallel-comm; needs ep > 1, vpp > 1 when pp > 1, "
                                  "no full recompute); default off")
    moe_shared_expert_overlap: Optional[Bool] = Field(
        default=None, description="MoE with shared experts: run the shared experts on a side stream beside the token "
                                  "dispatcher's all-to-alls, their TP gather / reduce-scatter Megatron's own bf16 ones "
                                  "(Megatron-Core --moe-shared-expert-overlap, Bridge model.moe_shared_expert_overlap; "
                                  "step.py [38]); needs shared experts, the alltoall or flex dispatcher, no "
                                  "ep_comm_overlap; default off")
    apply_rope_fusion: Optional[Bool] = fusion_switch(
        "the stack's fused rotary kernel (Megatron-Core TransformerConfig.apply_rope_fusion; --no-rope-fusion sets "
        "false): false runs the unfused rotary (stack kernels rope_scaled)")
    bias_activation_fusion: Optional[Bool] = fusion_switch(
        "the stack's fused bias + activation kernel (TransformerConfig.bias_activation_fusion; --no-bias-swiglu-fusion / "
        "--no-bias-gelu-fusion set false): false runs the activation and the bias add as kernels of their own (stack "
        "kernels mlp_activation_gated_unfused, expert_probs_unfused, bias_unfused), and the unfused SwiGLU keeps its two "
        "factors, the routed experts' activation its output for the probabilities' gradient; a plain (GeLU) MoE "
        "resolves it false, as Megatron-Core must run it (plan._fusion_settings)")
    bias_dropout_fusion: Optional[Bool] = fusion_switch(
        "the stack's fused bias-dropout-add (TransformerConfig.bias_dropout_fusion; --no-bias-dropout-fusion sets false): "
        "false adds the linear's bias as a kernel of its own (stack kernels bias_unfused)")
    masked_softmax_fusion: Optional[Bool] = fusion_switch(
        "Megatron-Core's fused scale-mask-softmax in its own core attention (TransformerConfig.masked_softmax_fusion; "
        "--no-masked-softmax-fusion sets false; local_core_attention only, dot_product_attention.py @d98e8a64 l. 100-109; "
        "on a stack whose eager core reads it whatever else the job sets, runs.attention eager_softmax_fusion_switch: "
        "Megatron-DeepSpeed's CoreAttention): "
        "false runs fused_softmax.py forward_torch_softmax at every key length (stack kernels score_softmax_unfused), "
        "whose softmax output is saved in fp32 under attention_softmax_in_fp32")
    attention_softmax_in_fp32: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="Megatron's attention_softmax_in_fp32 (--attention-softmax-in-fp32, or "
                                  "--apply-query-key-layer-scaling, which sets it: arguments.py @d98e8a64 l. 1713-1715): the "
                                  "eager core attention's torch softmax (fused_softmax.py forward_torch_softmax l. 299-345: "
                                  "beyond the fused kernel's keys, or masked_softmax_fusion false) casts the scores to fp32 "
                                  "and saves its fp32 output, 2 B a score element more than the 16-bit output the fused kernel "
                                  "saves (memory.py [sm]); false: the softmax in the 16-bit input dtype (its time at the "
                                  "stack's kernels score_softmax_unfused_16bit where it has them, else at its fp32 figures, "
                                  "score_softmax_unfused); default: true "
                                  "(TransformerConfig's default, transformer_config.py l. 485; Megatron-LM's argument "
                                  "default is false: the Megatron reader reads the flags)")
    gradient_accumulation_fusion: Optional[Bool] = fusion_switch(
        "the weight-gradient GEMM accumulates into the main gradient (TransformerConfig.gradient_accumulation_fusion; "
        "--no-gradient-accumulation-fusion sets false): false writes each weight gradient as a bf16 tensor added into "
        "the main gradient by a kernel of its own (stack kernels wgrad_unfused), one linear's at a time; priced without "
        "FSDP (FSDP's gradient path is its own)")
    moe_grouped_gemm: Optional[Bool] = Field(
        default=None, description="MoE experts run as one grouped GEMM (Megatron --moe-grouped-gemm: TE's GroupedLinear "
                                  "with TE layers, its multi-stream cuBLAS workspaces); default (null, not given): the "
                                  "stack's (stack_db defaults.moe_grouped_gemm, listed as inherited; Megatron-LM's is off), "
                                  "off on a stack without the switch; either value on a dense model is refused")
    transformer_impl: Optional[Literal["transformer_engine", "local"]] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="Megatron --transformer-impl: local runs Megatron-Core's own layers (no Transformer "
                                  "Engine GEMMs or workspace; its core attention local, eager); default: the stack's (TE)")
    local_core_attention: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron-Core's own DotProductAttention runs the core attention (--attention-backend "
                                   "local, or --transformer-impl local): eager, its scores in the global memory buffer")
    fp8_param_gather: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="fp8 weights (Megatron --fp8-param-gather: TE's fp8_model_init, the fp32 main "
                                   "weights in the distributed optimizer, the weight all-gather in fp8); needs precision "
                                   "fp8 and a stack with memory.fp8_weight_cache; default off")
    fp4_param_gather: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="NVFP4 weights (Megatron --fp4-param-gather: the linears' weights kept and "
                                   "all-gathered in NVFP4, two values a byte); needs precision nvfp4 and a stack with "
                                   "memory.fp8_weight_cache; default off")
    cross_entropy_fusion: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="the stack's fused cross-entropy (Megatron --cross-entropy-loss-fusion, native impl: "
                                   "stack_db memory.fused_loss_extra_per_logit); default off")
    moe_permute_fusion: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="MoE: Transformer Engine's fused token permutation (Megatron-Core moe_permute_fusion, "
                                  "--moe-permute-fusion); false runs the unfused torch ops (more HBM bytes: "
                                  "planner/layers/moe.py unfused_dispatch_bytes); default: the stack's (stack_db "
                                  "defaults.moe_permute_fusion; Megatron-LM's is off)")
    moe_router_fusion: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="MoE: Transformer Engine's fused router top-k and score function (Megatron-Core "
                                  "moe_router_fusion, --moe-router-fusion); false runs the unfused torch ops; default: "
                                  "the stack's (stack_db defaults.moe_router_fusion; Megatron-LM's is off)")
    moe_router_padding: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="MoE: Megatron-Core's moe_router_padding_for_quantization: the router pads the "
                                   "routing map so each expert's token count is a multiple of the fp8 / fp4 GEMMs' alignment (--moe-router-padding-for-quantization, "
                                   "older --moe-router-padding-for-fp8; transformer_config.py @d98e8a64 l. 771-778). Needs "
                                   "an fp8 or nvfp4 precision and a dispatcher other than allgather (Megatron refuses both, "
                                   "l. 2649-2659); with enable_experimental and moe_permute_fusion the padded map is a new "
                                   "int32 [tokens, experts] tensor each MoE layer's dispatcher keeps (planner/layers/moe.py "
                                   "padded_routing_map_bytes); default off")
    enable_experimental: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron --enable-experimental (arguments.py @d98e8a64 l. 3643; global_vars.py l. "
                                   "168-169 set_experimental_flag): priced where it changes a kernel the plan runs: with "
                                   "moe_router_padding and moe_permute_fusion the fused (Triton) routing-map "
                                   "padding, whose int32 map the dispatcher keeps; default off")
    cross_entropy_fusion_impl: Literal["native", "te"] = Field(
        json_schema_extra=STACK_ONLY,
        default="native", description="with cross_entropy_fusion, its implementation (Megatron-Core TransformerConfig."
                                      "cross_entropy_fusion_impl): native (Megatron's fused_vocab_parallel_cross_entropy) or "
                                      "te (Transformer Engine's parallel_cross_entropy: stack_db memory.te_loss_per_logit)")
    empty_unused_memory_level: Optional[Literal[0, 1, 2]] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="Megatron --empty-unused-memory-level (training_config.py @d98e8a64 l. 48-51): "
                                  "torch.cuda.empty_cache() after the forward-backward (1), after the optimizer step too "
                                  "(2) (training.py l. 3149-3150, 3229-3230). It frees only wholly free segments between "
                                  "phases, so no priced figure moves (memory.py [13]); carried to explain's fragmentation "
                                  "band and to the exported arguments; null: 0 (stack_db runs.empty_unused_memory_level)")
    mfsdp_double_buffer: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron-FSDP's fixed double-buffer pools (Megatron --fsdp-double-buffer, set too by "
                                   "--use-nccl-ub and --megatron-fsdp-max-pool-double-buffer: arguments.py @d98e8a64 "
                                   "l. 1172-1181): two persistent buffers of a layer unit's gathered weights and two of its "
                                   "unsharded gradients, in place of the prefetch and the reduce-scatter queue "
                                   "(memory.py [db]); only the modes running Megatron-FSDP's queue (stack_db runs.sharding "
                                   "reduce_queue_units) hold them; default off")
    mfsdp_v2: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron-FSDP v2 (Megatron --megatron-fsdp-version 2, FullyShardedDataParallelV2, "
                                   "mcore_fsdp_adapter.py @d98e8a64 l. 489-703; megatron_fsdp/experimental/): one layer "
                                   "unit prefetched, no reduce-scatter queue (each unit's gradients copied into one "
                                   "reduce-scatter input), the root unit (embedding, output layer, final norm) gathered "
                                   "through the forward and the backward and released after them, the output layer's "
                                   "gradient held to the end of the backward (memory.py [v2]); only the stacks with a "
                                   "runs.sharding mode stating mfsdp_v2 (Megatron's optim_grads_params), at tp, pp and cp 1 "
                                   "(start-up rule MEGATRON_FSDP_V2_LAYOUT); default off")
    mla_down_proj_fusion: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron --mla-down-proj-fusion (arguments.py @d98e8a64 l. 3566-3572; "
                                   "gpt_layer_specs.py l. 257-290): MLA's q and kv down projections as one "
                                   "TELayerNormColumnParallelLinear of h -> r_q + r_kv + d_rope with gather_output False "
                                   "(FusedMLASelfAttention, multi_latent_attention.py l. 1241-1310): its weight TP-split "
                                   "(rows / tp a rank) where the unfused ones are replicated, and one matrix for Muon, "
                                   "TP-split (layers/attention.py MLA); needs an MLA model with a q_lora_rank; only the "
                                   "stacks with runs.mla_down_proj_fusion; default off")
    mfsdp_outer_optim: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron-FSDP's HSDP with the optimizer sharded over the replicas too (Megatron "
                                   "--outer-dp-sharding-strategy optim, Megatron-Core DistributedDataParallelConfig."
                                   "outer_dp_sharding_strategy): under sharding hsdp the fp32 main weights and Adam's "
                                   "moments over dp x cp, the 16-bit weights and main gradients over the shard group, the "
                                   "replicas' gradient all-reduce a reduce-scatter and the weights all-gathered across "
                                   "them once a step (memory.py [oo], step.py [oo]); read only where the plan's sharding "
                                   "is hsdp; only the stacks whose HSDP mode states runs.sharding outer_optim; default off")
    dummy_wgrads: Optional[DummyWgrads] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="with gradient-accumulation fusion, the dummy weight gradients the run's code version "
                                  "returns, where it is not the stack entry's: per_call (Transformer Engine before #1651, "
                                  "2025-04-08, and Megatron-LM's own linears before e7c55de99e, 2025-08-01: a fresh "
                                  "tensor each backward), none (Megatron-LM before 28766b55fb, 2023-09-05: no tensor), "
                                  "cached (memory.py [dw]); default: the stack's memory.dummy_wgrads")
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] = Field(
        json_schema_extra=STACK_ONLY,
        default="none", description="CUDA graphs (Megatron-Core --cuda-graph-impl; --enable-cuda-graph is local, "
                                    "--external-cuda-graph transformer_engine): none, per-layer graphs (local, "
                                    "transformer_engine) or the whole forward-backward (full_iteration); refused on stacks "
                                    "without them (stack cuda_graphs) and where Megatron refuses the combination "
                                    "(planner/cuda_graphs.py); time: the fitted moe_host, which covers runs with and without; "
                                    "memory: the static outputs a graph keeps until the backward")
    cuda_graph_scope: list[Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]] = Field(
        json_schema_extra=STACK_ONLY,
        default_factory=list, description="with per-layer graphs, the parts of each layer captured (Megatron-Core "
                                          "--cuda-graph-modules, formerly --cuda-graph-scope): attn, mlp, moe, moe_router, "
                                          "moe_preprocess, mamba; empty: the whole layer (planner/cuda_graphs.py)")
    rope_cache: Optional[Literal["none", "model", "layer", "model_cp"]] = Field(
        default=None, description="the rotary embedding's precomputed tables the run keeps, where its code version is "
                                  "not the stack entry's: one per model part (torchtitan before 02d24f017, 2026-06-05) "
                                  "or one per attention layer (memory.py [tt9]); default: the stack's memory.rope_cache")
    loss_logit_chunks: Optional[Count] = Field(
        default=None, ge=2, le=MAX_COUNT,
        description="the loss as torchtitan PR #996 ran it (pytorch/torchtitan @f99bfc03 components/loss.py "
                    "chunked_cross_entropy_loss, adapted from torchtune's CEWithChunkedOutputLoss): the materialised bf16 "
                    "logits split into this many sequence chunks, each upcast to fp32 and cross-entropied eagerly in turn "
                    "(8 in the PR); the loss's figures a logit are its own (memory.py [ck]), not the stack's kernels'; "
                    "default: none, the stack's loss")
    fsdp_root_unit: Bool = Field(
        default=False, description="FSDP2's root unit as torchtitan wrapped it before 83e69410 (#1094, 2025-07-28) with "
                                   "torch before #154704 (2025-06): the embedding, final norm and output layer in the "
                                   "root unit, kept unsharded from the forward to the end of the backward, and the last "
                                   "block not resharded after its forward (memory.py [tt10]); default: the stack's "
                                   "fsdp.unsharded_ends")
    te_version: Optional[str] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$",
        description="the Transformer Engine release the run used (MAJOR.MINOR[.PATCH]), where it is not the stack "
                    "entry's (stack memory.te_version): TP overlap's userbuffers and their cuBLAS workspaces by release "
                    "(memory.py [ub]: 10 buffers before 2.7, 12 from it; the overlapped GEMMs' workspaces replace the "
                    "plain one before 2.10, beside it from it); 1.6 at the oldest; default: the stack's")
    trainer_date: Optional[str] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
        description="the date (YYYY-MM-DD) of the trainer commit the run used, where it is older than the stack entry's "
                    "reading: the start-up checks the stack dates later (stack_db runs.deterministic_refuses since: "
                    "Megatron-LM's --deterministic-mode refuses --tp-comm-overlap from 3ab71eeb3e, 2026-07-08) are not "
                    "run; nothing else is read at that date (a Megatron CI corpus row's recording commit, "
                    "planner/megatron_ci.py); default: the stack's own commit")
    cublas_workspace_config: Optional[str] = Field(
        default=None, pattern=r"^(:[0-9]+:[0-9]+)+$",
        description="the run's CUBLAS_WORKSPACE_CONFIG environment variable (:SIZE_KiB:COUNT pairs, e.g. :4096:8): "
                    "each PyTorch cuBLAS workspace is the pairs' sum of SIZE x COUNT KiB instead of the GPU's default "
                    "(hardware torch_cublas_workspace_MiB; memory.py [ws]); default: unset")
    deterministic_mode: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron --deterministic-mode (model_parallel_config.py @d98e8a64 l. 229; "
                                   "arguments.py l. 1708-1711 -> training/determinism.py): deterministic kernels, "
                                   "slower ones not priced; from 3ab71eeb3e (2026-07-08) it sets CUBLAS_WORKSPACE_CONFIG "
                                   ":4096:8 where the launcher has not (determinism.py l. 27-31, 114-116 setdefault: "
                                   "stack runs.deterministic_cublas_workspace), the workspace priced where "
                                   "cublas_workspace_config is unset (memory.py [ws]), and NCCL_ALGO Ring likewise "
                                   "(stack runs.deterministic_nccl_algo), priced where nccl_algo is unset, on a job whose "
                                   "trainer_date is not older; a stack whose trainer is not Megatron-LM refuses it; "
                                   "default off")
    nccl_algo: Optional[str] = Field(
        default=None, pattern=r"^[A-Za-z^,;:]+$",
        description="the run's NCCL_ALGO environment variable (a launch script's `export NCCL_ALGO=...` or "
                    "`NCCL_ALGO=... torchrun`), as NCCL parses it (NVIDIA/nccl @5067397c src/graph/tuning.cc parseList: "
                    "Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT, comma-separated, ^ to exclude, "
                    "`allreduce:` / `reducescatter:` / `allgather:` prefixes per function): the all-reduces, "
                    "reduce-scatters and all-gathers are priced with the fastest algorithm it leaves them "
                    "(comm.nccl_algo_candidates), not NCCL's free choice; a value that leaves a collective no algorithm "
                    "NCCL runs, or only ones the model prices where the hardware offers them (NVLS, NVLSTree, CollNet, "
                    "PAT), is refused; default: unset, NCCL's own choice (under deterministic_mode, what the stack's "
                    "trainer sets: runs.deterministic_nccl_algo)")
    nccl_proto: Optional[str] = Field(
        default=None, pattern=r"^[A-Za-z0-9^,;:]+$",
        description="the run's NCCL_PROTO environment variable (a launch script's `export NCCL_PROTO=...` or "
                    "`NCCL_PROTO=... torchrun`; Megatron-LM's CI exports Simple: "
                    "tests/functional_tests/shell_test_utils/_run_training.sh @d98e8a64 l. 58), as NCCL parses it "
                    "(NVIDIA/nccl @5067397c src/graph/tuning.cc parseList, NCCL_ALGO's grammar: LL, LL128, Simple, "
                    "comma-separated, ^ to exclude, `allreduce:` / `reducescatter:` / `allgather:` prefixes per "
                    "function): the all-reduces, reduce-scatters and all-gathers are priced under the fastest protocol "
                    "it leaves them (comm.nccl_proto_protocols; LL and LL128 only inside one NVLink domain, Simple "
                    "across domains whatever it leaves: comm.py [19]); a value NCCL refuses, or one that leaves a "
                    "collective no protocol, is refused; default: unset, NCCL's default set (LL128 where the GPU "
                    "enables it)")
    nccl_nvls_enable: Optional[Literal[0, 1, 2]] = Field(
        default=None,
        description="the run's NCCL_NVLS_ENABLE environment variable (a launch script's `export NCCL_NVLS_ENABLE=0`; "
                    "Megatron-LM's CI exports 0: tests/functional_tests/shell_test_utils/_run_training.sh @d98e8a64 "
                    "l. 58-61), as NCCL reads it (NVIDIA/nccl v2.20.3-1 src/transport/nvls.cc l. 230-258, the same "
                    "to v2.29.7-1: 0 no NVLink SHARP, 2 (NCCL's default) NVLS where the GPU reports multicast "
                    "support, 1 forced on): 0 takes NVLS and NVLS-tree out of every all-reduce's candidates "
                    "(src/enqueue.cc l. 1466) and CollNet inside the domain runs direct, not over NVLS (comm.py "
                    "[22]) and allocates no NVLS buffers (1 and 2: NCCL's cuMem buffers of each NVLS communicator, outside "
                    "the caching allocator, memory.py [nv]); 1 on hardware without NVLS (hardware nvls false) is "
                    "refused; 1 and 2 price as unset; default: unset, NCCL's default (the hardware's nvls flag)")
    attention_kernel_named: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="the trainer config names attention_kernel as its attention backend (Megatron-Bridge "
                                   "model.attention_backend flash / fused, as the Bridge reader reads it) where "
                                   "Transformer Engine's own choice (auto) would run the same kernel: priced alike, "
                                   "but Bridge's deterministic check compares the config's field, not the kernel "
                                   "(training/config.py @dc805f5cf l. 1454-1456: start-up rule "
                                   "MEGATRON_DETERMINISTIC_FLASH refuses a named flash2 on every GPU), and the export "
                                   "writes the backend; needs attention_kernel; a stack whose deterministic mode has no "
                                   "check of the backend (runs.deterministic_refuses flash_attention) refuses it; "
                                   "default off (auto where the kernel is TE's choice)")
    use_flash_attn: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="Megatron-LM's --use-flash-attn flag (arguments.py @d98e8a64 l. 2910): the legacy "
                                   "model's FlashAttention switch, read by no model code at @d98e8a64 (Transformer "
                                   "Engine's attention is priced as without it: stack attention_kernels), only by "
                                   "--deterministic-mode's check from ac08742c96 (2024-05-04) to 3ab71eeb3e (2026-07-08), "
                                   "which refused it (start-up rule MEGATRON_DETERMINISTIC_USE_FLASH_ATTN, a job's "
                                   "trainer_date in that range); a stack whose trainer is not Megatron-LM refuses it; "
                                   "default off")
    deepspeed_zero3: dict[Zero3Key, Annotated[Int, Field(ge=0)]] = Field(
        json_schema_extra=STACK_ONLY,
        default_factory=dict, description="on a stack whose ZeRO-3 gathers per submodule (stack_db fsdp.zero3_modules: "
                                          "DeepSpeed), the run's zero_optimization settings by their DeepSpeed JSON keys "
                                          "(stage3_prefetch_bucket_size, stage3_max_live_parameters, "
                                          "stage3_max_reuse_distance, stage3_param_persistence_threshold, "
                                          "reduce_bucket_size, sub_group_size, contiguous_gradients 0 or 1; memory.py "
                                          "[z3], [z3g]; reduce_bucket_size also "
                                          "sizes ZeRO-1/2's IPG buffer, memory.py [zb]); each left out: the stack's "
                                          "(DeepSpeed's default)")
    optimizer: OptimizerName = Field(
        default="adam",
        description="the update rule: adam (m and v a parameter, bytes_per_param.optimizer) or muon (Megatron-LM "
                    "--optimizer muon: one fp32 momentum a 2-D hidden weight matrix, orthogonalized by Newton-Schulz; "
                    "the word embedding, output layer, norms and biases keep Adam: memory.py [mu]); a stack that builds "
                    "no muon refuses it (stack_db runs.optimizers); default adam")
    optimizer_whole_tensors: Bool = Field(
        default=False,
        description="with optimizer muon at zero1: Megatron's layer-wise distributed optimizer on its legacy path "
                    "(--no-use-layer-wise-param-layout) hands each parameter whole to one rank, by size in ping-pong "
                    "order, so one rank holds the word embedding's (or output layer's) master and Adam states whole; "
                    "priced for that rank (memory.py [mu]); default off: the precomputed layout, the embedding byte-"
                    "sharded by a distributed optimizer of its own")
    muon_ns_steps: Int = Field(
        default=5, ge=1,
        description="with optimizer muon: Newton-Schulz steps a momentum is orthogonalized with (Megatron-LM "
                    "--muon-num-ns-steps, default 5, arguments.py @d98e8a64 l. 2648-2649): each step's three GEMMs "
                    "in the step time (step.py [28]); the temporaries are one step's (memory.py [mu]); default 5")
    muon_tp_mode: Optional[Literal["blockwise", "duplicated", "distributed"]] = Field(
        default=None,
        description="with optimizer muon: how Newton-Schulz treats a TP-split matrix (Megatron-LM --muon-tp-mode, "
                    "Megatron-Core OptimizerConfig.muon_tp_mode): duplicated all-gathers the fp32 momentum's shards over "
                    "the TP group (the expert-TP group for the routed experts) and orthogonalizes the whole matrix on "
                    "every TP rank; blockwise orthogonalizes each rank's own shard, no gather (muon.py @905c0e386 "
                    "l. 133, emerging_optimizers.py @d98e8a64 l. 403: partition_dim None); distributed runs the "
                    "iteration on each rank's shard along the unpartitioned side, the Gram matrix all-reduced over the "
                    "TP group every step (Emerging-Optimizers v0.3.0 muon_utils.py newton_schulz_tp l. 279-286, "
                    "newton_schulz_step l. 315-317); step.py [28], memory.py [mu]; default: the stack's "
                    "runs.optimizers muon_tp_mode (megatron duplicated, megatron-bridge blockwise)")
    muon_fp32_matmul_prec: Literal["low", "medium", "high"] = Field(
        default="medium",
        description="with optimizer muon: torch's float32 matmul precision around Newton-Schulz (Megatron-LM "
                    "--muon-fp32-matmul-prec, OptimizerConfig.muon_fp32_matmul_prec, default medium: "
                    "optimizer_config.py @d98e8a64 l. 272): medium casts X to bf16 (bf16 GEMMs), high runs fp32 data "
                    "on TF32 tensor cores, low is no precision torch knows and keeps its default highest (fp32 GEMMs "
                    "off the tensor cores); step.py [28], memory.py [mu]; default medium")
    muon_split_qkv: Bool = Field(
        default=True,
        description="with optimizer muon: orthogonalize linear_qkv's q, k and v apart, split per query group (Megatron-LM "
                    "--muon-split-qkv, the default; false: --muon-no-split-qkv, arguments.py @d98e8a64 l. 2630-2632, "
                    "the one (g a + 2 k) d x h matrix whole: emerging_optimizers.py l. 407); step.py [28], memory.py "
                    "[mu]; default on")
    optimizer_implementation: Optional[OptimizerImpl] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="the optimizer's implementation, on a stack that runs several (stack_db memory."
                                  "optimizer_step_temporaries: torchtitan [optimizer] implementation fused | foreach | "
                                  "for-loop); its step's temporaries are a moment of their own (memory.py [opt]); "
                                  "default: the stack's (memory.optimizer_default)")
    precision_aware_optimizer: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None,
        description="the stack's precision-aware optimizer (Megatron-LM --use-precision-aware-optimizer, TE's FusedAdam; "
                    "stack runs.low_precision_moments): where TE's FusedAdam holds the master weights it keeps them as "
                    "16-bit remainders beside bf16 weights and reads the gradient shard in its own dtype, no fp32 copy "
                    "(memory.py [sg]); default: on where bytes_per_param keeps Adam's moments below fp32 (the only way "
                    "such a stack holds them), else off")
    offload_optimizer: Literal["none", "cpu"] = Field(
        json_schema_extra=STACK_ONLY,
        default="none",
        description="cpu: the optimizer partition (fp32 master, Adam's moments, the fp32 gradient partition) lives in "
                    "host memory and the CPU steps it (DeepSpeed zero_optimization.offload_optimizer device cpu, "
                    "ZeRO-Offload; torchtitan [training] enable_cpu_offload with offload_param); needs a stack with "
                    "cpu_offload and ZeRO / FSDP sharding; the host link and the CPU step priced (planner/offload.py); "
                    "nvme is not modelled; default none")
    offload_param: Literal["none", "cpu"] = Field(
        json_schema_extra=STACK_ONLY,
        default="none",
        description="cpu: the sharded parameters live in host memory too (DeepSpeed ZeRO-3 zero_optimization."
                    "offload_param device cpu; torchtitan's CPUOffloadPolicy with offload_optimizer); needs FSDP / "
                    "ZeRO-3 sharding and offload_optimizer cpu; default none")
    offload_fraction: Real = Field(
        json_schema_extra=STACK_ONLY,
        default=1.0, gt=0, le=1,
        description="with offload_optimizer cpu, the fraction of the rank's optimizer partition kept and stepped on "
                    "the host, the rest on the GPU (Megatron-LM --optimizer-offload-fraction, HybridDeviceOptimizer; "
                    "stack cpu_offload transfers hybrid_device only: the other stacks offload the whole partition); "
                    "default 1")
    offload_overlap: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False,
        description="with offload_optimizer cpu, the host link's copies and the CPU step pipelined per parameter on "
                    "their own streams (Megatron-LM --overlap-cpu-optimizer-d2h-h2d; stack cpu_offload transfers "
                    "hybrid_device only); default off")
    early_step_in_backward: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False, description="the optimizer steps each parameter inside the backward, as its sharded gradient "
                                   "arrives, and frees that gradient there (torchtitan [optimizer] early_step_in_backward, "
                                   "on a stack with memory.optimizer_in_backward; memory.py [es]); refused with pipeline "
                                   "or expert parallelism, as torchtitan refuses it; default off")
    cp_load_balance: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=True,
        description="context parallelism load-balances the causal mask: each CP rank holds two of 2 cp sequence "
                    "chunks (i and 2 cp - 1 - i), so every rank runs 1/cp of the attention core (the default, and "
                    "the only way Megatron-LM runs: NVIDIA/Megatron-LM @d98e8a64 megatron/core/utils.py "
                    "_get_batch_on_this_cp_rank_per_sequence_balancing l. 2504-2557); false: contiguous chunks, the "
                    "last CP rank's queries attend to the most keys and every global causal layer's attention core "
                    "runs at that rank's (2 cp - 1) / cp of the balanced share (step.cp_balance_factor; torchtitan "
                    "parallelism.context_parallel_load_balancer None, valid only on a stack with the option: stack_db "
                    "runs.cp_no_load_balance); fit never searches it (it is never faster)")
    cp_load_balancer: Optional[str] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, min_length=1,
        description="the load balancer that splits the sequence over the CP ranks, by name, where CP runs balanced "
                    "(torchtitan parallelism.context_parallel_load_balancer: headtail, torch's _HeadTailLoadBalancer, "
                    "or ptrr, _PTRRLoadBalancer over the FlexAttention BlockMask; both priced as the balanced split): "
                    "ptrr under CP only where the model builds FlexAttention (torchtitan cp_shard raises otherwise: "
                    "start-up rule TORCHTITAN_CP_PTRR_MASK); any other name is one torch's cp_shard does not build: "
                    "kept as the trainer config states it, ignored at cp 1 (cp_shard runs only where CP does) and "
                    "refused at cp > 1 (ValueError 'Invalid load_balancer_type' in the first step: start-up rule "
                    "TORCHTITAN_CP_LOAD_BALANCER_NAME); valid only on a stack with the option (stack_db "
                    "runs.cp_load_balancers) and not with cp_load_balance false; default: the stack's (headtail)")
    cp_rotate_method: Optional[Literal["allgather", "alltoall"]] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="on a stack whose context parallelism is torch's ring attention (stack_db memory."
                                  "cp_ring_backward): how the K/V pass between the cp ranks, torchtitan [parallelism] "
                                  "context_parallel_rotate_method: allgather (one all-gather a pass, the whole K/V held) "
                                  "or alltoall (one permute a ring step, beside the step before's kernel); priced "
                                  "only where the stack's training sets it (runs.cp_rotate_method_trains; the catalog "
                                  "torchtitan's does not: listed as ignored, its allgather priced); default: the stack's")
    pp_p2p_overlap_warmup_flush: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="on a stack with a switch for it (stack_db overlap.pp_p2p_warmup_flush_switch: Megatron-LM "
                                  "--overlap-p2p-communication-warmup-flush): true overlaps the interleaved schedule's warm-up "
                                  "and flush p2p too (Megatron needs the p2p overlap on); false or null: the stack's "
                                  "(overlap.pp_p2p_warmup_flush_blocking)")
    pp_p2p_overlap: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="on a stack with a switch for it (stack_db overlap.pp_p2p_overlap_switch: Megatron-LM "
                                  "--no-overlap-p2p-communication): false sends and receives the pipeline's activations "
                                  "blocking (batched, waited on) instead of behind the next model chunk's compute; "
                                  "Megatron then needs pp > 2 with the interleaved schedule (start-up rule "
                                  "MEGATRON_P2P_OVERLAP_PP); true or null: the stack's rule (overlap.pp_p2p_overlapped: "
                                  "Megatron overlaps with the interleaved schedule only)")
    cp_comm_type: Optional[CPCommType] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="on a stack that runs several context-parallel variants by name (stack_db "
                                  "cp_comm_types: Megatron-LM --cp-comm-type): p2p (Transformer Engine's ring), "
                                  "all_gather (K/V all-gathered, exposed), a2a (Ulysses: all-to-alls of Q, K, V and the "
                                  "output, exposed; heads divisible by cp) or a2a+p2p (hierarchical: a2a inside the "
                                  "first of hierarchical_cp_sizes, the ring across the second); default: the stack's "
                                  "(p2p)")
    hierarchical_cp_sizes: Optional[list[Count]] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, min_length=2, max_length=2,
        description="with cp_comm_type a2a+p2p: the all-to-all group's and the P2P ring's ranks, their product cp "
                    "(Megatron --hierarchical-context-parallel-sizes; the first level is contiguous ranks, "
                    "parallel_state.py create_hierarchical_groups)")
    chunked_loss: Optional[Bool] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, description="the stack's chunked cross-entropy (torchtitan 0.3.0 ChunkedLossWrapper: the output "
                                  "layer and the loss per sequence chunk, stack_db memory.chunked_loss_chunks); left out: "
                                  "the stack's defaults.chunked_loss (on for torchtitan-0.3, whose configs build it; off "
                                  "elsewhere)")
    sync_tp_duplicated_parameters: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False,
        description="every forward of a LayerNorm all-reduces its weight and bias, and of a row-parallel linear its "
                    "bias, over the TP group (averaged), before using them (BigScience's Megatron-DeepSpeed "
                    "--sync-tp-duplicated-parameters; stack_db runs.sync_tp_duplicated_parameters): small all-reduces "
                    "in step.tp_comm; default off")
    partition_activations: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False,
        description="with recompute full at TP > 1: each TP rank keeps 1/tp of every checkpointed layer input and the "
                    "ranks all-gather it before the layer's re-run (DeepSpeed activation checkpointing's "
                    "partition_activations, Megatron-DeepSpeed --deepspeed-activation-checkpointing "
                    "--partition-activations; stack_db runs.partition_activations); default off")
    fsdp_symm_mem: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False,
        description="torchtitan 0.3's parallelism.enable_fsdp_symm_mem (pytorch/torchtitan release/0.3 @4f9e9a47d "
                    "config/configs.py l. 151, distributed/fsdp.py l. 44-51, 312-313: set_symm_mem_for_comm on every "
                    "FSDP module, FSDP's all-gather staging buffers allocated from torch's symmetric-memory pool): "
                    "refused below compute capability 9.0 (configs.py l. 267-277, start-up rule "
                    "TORCHTITAN_FSDP_SYMM_MEM_SM90); its memory and all-gather time are not priced (listed); valid only "
                    "on a stack with the option (stack_db runs.fsdp_symm_mem); default off")
    spmd_typechecking: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False,
        description="torchtitan 0.3's debug.spmd_typechecking (pytorch/torchtitan release/0.3 @4f9e9a47d config/"
                    "configs.py l. 356-357, trainer.py l. 605-610: the step under spmd_typecheck where spmd_backend is "
                    "spmd_types): refused with pipeline parallelism and with selective recompute over FlexAttention "
                    "(trainer.py l. 143-167, start-up rules TORCHTITAN_SPMD_TYPECHECK_PP / _SAC_FLEX); the checks' host "
                    "time is not priced (listed); valid only on a stack with the option (stack_db "
                    "runs.spmd_typechecking); default off")
    spmd_backend: Optional[SpmdBackend] = Field(
        json_schema_extra=STACK_ONLY,
        default=None,
        description="torchtitan 0.3's parallelism.spmd_backend (pytorch/torchtitan release/0.3 @4f9e9a47d "
                    "config/configs.py l. 163-165): spmd_types (the default), partial_dtensor or full_dtensor. On a "
                    "DTensor backend the TP / SP redistributes and the EP token exchange run torch's functional "
                    "collectives eager too, which the op-SAC save list holds, so selective recompute keeps their "
                    "outputs as compiled (stack selective.tp_collectives_kept / exchange_kept priced as always; "
                    "memory.py [sb]); valid only on a stack with the option (stack_db runs.spmd_backends); null: "
                    "the stack's default")
    selective_recomputes_attention: Bool = Field(
        json_schema_extra=STACK_ONLY,
        default=False,
        description="with recompute selective on a stack whose policy saves the attention kernel's output (stack_db "
                    "selective: attn_out kept, recompute_attention_core false): the run's policy does not save it and "
                    "re-runs the attention core in the backward. torchtitan from 2025-05-20 (#1209: cuDNN SDPA first on "
                    "compute capability >= 10.0) to 2025-12-01 (#2095: every SDPA backend on the op-SAC save list) "
                    "on Blackwell; default off")
    defer_embedding_wgrad: Optional[Int] = Field(
        json_schema_extra=STACK_ONLY,
        default=None, ge=0,
        description="Megatron --defer-embedding-wgrad-compute with --wgrad-deferral-limit N: the last pipeline stage keeps "
                    "the output layer's input and output gradient of the first N micro-batches (0: all of them) until the "
                    "pipeline flush computes their weight gradients (megatron/core/tensor_parallel/layers.py, "
                    "pipeline_parallel/schedules.py finish_embedding_wgrad_compute); null: off")
    moe_dispatcher: Optional[Literal["alltoall", "allgather", "deepep", "deepep_ll", "hybridep"]] = Field(
        default=None,
        description="MoE token dispatcher (planner/dispatch.py): alltoall (NCCL), allgather, deepep (DeepEP normal "
                    "kernels), deepep_ll (DeepEP low-latency kernels), hybridep (Megatron --moe-token-dispatcher-type, "
                    "--moe-enable-deepep, --moe-flex-dispatcher-backend); default: the stack's")
    moe_fp8_dispatch: Optional[Bool] = Field(
        default=None, description="MoE: the forward dispatch moves fp8 tokens with their scales (DeepSeek-V3 sec. 3.3.3; "
                                  "DeepEP, Hybrid-EP); the combine stays bf16; an fp8 job's only (true under bf16 is "
                                  "refused: planner/dispatch.py [11]); default: the stack's fp8 recipe's "
                                  "fp8_dispatch under fp8 (planner/dispatch.py fp8_dispatch)")
    moe_route_nodes: Optional[Count] = Field(
        default=None, gt=0, description="MoE node-limited routing: each token goes to at most this many nodes "
                                        "(DeepSeek-V3 M = 4, sec. 2.1.2); default: no limit")
    moe_capacity_factor: Optional[Real] = Field(
        default=None, ge=1.0,
        description="MoE capacity factor: an expert's tokens beyond this x the mean are dropped (Megatron "
                    "--moe-expert-capacity-factor); caps the busiest rank's load (planner/imbalance.py); default: dropless")
    moe_min_capacity: Optional[Count] = Field(
        default=None, ge=0,
        description="MoE on a stack that gates densely (stack moe_gating, DeepSpeed-MoE): the capacity's floor, slots "
                    "per expert, C = max(ceil(S k cf / E), this) (Megatron-DeepSpeed --moe-min-capacity, DeepSpeed "
                    "_capacity's min_capacity; layers/moe.py [18]); refused on other stacks; default: the stack's "
                    "moe_gating.min_capacity")
    moe_hybridep_capacity_factor: Optional[Real] = Field(
        default=None, ge=0.0, le=1.0,
        description="MoE with moe_dispatcher hybridep on a stack whose HybridEP has a non-blocking dispatch (stack "
                    "runs.hybridep_non_blocking: torchtitan 0.3's model_registry(non_blocking_capacity_factor=...)): the "
                    "dispatch allocates the permuted expert input, and the grouped GEMMs their outputs, at n x ep x "
                    "min(E / ep, top_k) x this rows for n local tokens, not the rows routed, and never synchronises with "
                    "the host (layers/moe.py [19]); 0: the blocking dispatch (the rows routed, a host synchronisation); "
                    "default: the stack's defaults.moe_hybridep_capacity_factor (torchtitan-0.3: 1.0, what its "
                    "deepseek_v3_*_hybridep config functions build), else the blocking dispatch")
    moe_pad_to_capacity: Optional[Bool] = Field(
        default=None,
        description="MoE: every expert's input padded to the capacity factor (Megatron --moe-pad-expert-input-to-capacity; "
                    "needs moe_capacity_factor): the busiest rank's load is the capacity factor exactly, and the alltoall and "
                    "hybridep dispatchers skip the host synchronisation (planner/dispatch.py); default false")
    moe_rank_imbalance: Optional[Real] = Field(
        default=None, ge=1.0,
        description="MoE routing imbalance: the busiest expert-parallel rank's routed tokens / the mean, as measured "
                    "(1.0: balanced, Megatron --moe-router-force-load-balancing); default: the rule of "
                    "moe_load_balancing (planner/imbalance.py)")
    moe_load_balancing: Optional[Literal["force", "aux_loss", "aux_loss_free", "sinkhorn"]] = Field(
        default=None,
        description="MoE router balancing, for the default routing-imbalance rule (planner/imbalance.py): force, "
                    "aux_loss (Megatron aux_loss / seq_aux_loss / global_aux_loss / none), aux_loss_free (expert bias), "
                    "sinkhorn; default: aux_loss_free for a model with a router score bias, else aux_loss")
    moe_aux_loss_coeff: Optional[Real] = Field(
        default=None, ge=0.0,
        description="MoE: the coefficient of the auxiliary load-balancing loss the run computes (Megatron --moe-aux-loss-coeff "
                    "for --moe-router-load-balancing-type aux_loss, seq_aux_loss or global_aux_loss; 0: none computed). "
                    "> 0: the router keeps its aux-loss scores for the backward (planner/layers/moe.py router_saved_terms); "
                    "default: the model's training recipe's (model_zoo training.moe_aux_loss_coeff), else Megatron's 0.0")
    moe_z_loss_coeff: Optional[Real] = Field(
        default=None, ge=0.0,
        description="MoE: the router z-loss coefficient (Megatron --moe-z-loss-coeff); > 0: the router keeps its logits for "
                    "the z-loss's backward (planner/layers/moe.py router_saved_terms); default: none (Megatron's)")
    moe_router_pre_softmax: Optional[Bool] = Field(
        default=None,
        description="MoE: a softmax router's softmax over all experts before the top-k (Megatron --moe-router-pre-softmax), "
                    "else over the top-k logits after it; what the unfused router keeps differs (planner/layers/moe.py "
                    "router_saved_terms); default: false (Megatron's)")
    moe_router_dtype: Optional[Literal["fp32", "fp64"]] = Field(
        default=None,
        description="MoE: the router's logits and probabilities in fp32 or fp64 (Megatron --moe-router-dtype; "
                    "moe/router.py @d98e8a64 l. 105-111); of what the router keeps for its backward only the z-loss's "
                    "logits take that dtype (planner/layers/moe.py router_saved_terms); default: the input's dtype, bf16 "
                    "(Megatron's); a Megatron-Core setting; fp64 refused with the fused router (Transformer Engine "
                    "takes no fp64 logits)")
