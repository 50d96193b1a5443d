"""A Hugging Face transformers config.json as planner model fields (ModelSpec data), layer by
layer. catalog.model_from_hf_config validates the result; this module only reads.

What is read (every rule keyed on an explicit field, or on model_type where transformers
itself keys the architecture on the class, each cited to the transformers class):

  nesting      `text_config` (Gemma3ForConditionalGeneration, Llama4ForConditionalGeneration):
               the text model is planned; the vision tower is left out, with a note.
  shape        num_hidden_layers, hidden_size, intermediate_size, num_attention_heads,
               num_key_value_heads, head_dim (Nemotron-H: attention_head_dim), vocab_size,
               tie_word_embeddings, max_position_embeddings, attention_bias / mlp_bias,
               attention_dropout / hidden_dropout (the probabilities kept: ModelSpec attention_dropout,
               hidden_dropout, 0 where the config gives no hidden_dropout), GPT-2's attn_pdrop /
               resid_pdrop as the same two (GPT2_DROPOUTS) and embd_pdrop listed as not modelled (no
               embedding dropout priced), num_nextn_predict_layers (-> mtp_layers).
  mixers       `layer_types` (full_attention, sliding_attention, chunked_attention, and
               linear_attention = Gated DeltaNet for Qwen3-Next); else `full_attention_interval`
               (Qwen3-Next: layer i full iff (i+1) % n == 0, the others Gated DeltaNet from the
               linear_* keys); `hybrid_override_pattern` / `layers_block_type` (Nemotron-H: one
               block a character, M Mamba-2, * attention, - MLP, E MoE); `attn_layer_period` /
               `attn_layer_offset` (Jamba: attention iff i % period == offset, Mamba-1 elsewhere,
               from the mamba_* keys); Llama 4 `no_rope_layers` / `no_rope_layer_interval` and
               `attention_chunk_size` (RoPE layers chunked, NoPE layers global); `sliding_window`
               by the model type's rule (SLIDING_RULES: every layer for Mistral / Mixtral, every
               `sliding_window_pattern`-th layer global for Gemma 3, even layers for Gemma 2,
               `use_sliding_window` for Qwen); a null sliding_window means none.
  MLPs         MoE experts (num_local_experts / n_routed_experts / num_experts, top-k
               num_experts_per_tok), placed by `first_k_dense_replace` + `moe_layer_freq`
               (DeepSeek / Kimi), `decoder_sparse_step` + `mlp_only_layers` (Qwen MoE: MoE iff
               i not in mlp_only_layers and (i+1) % step == 0), `interleave_moe_layer_step` /
               `moe_layers` (Llama 4; dense layers `intermediate_size_mlp` wide),
               `expert_layer_period` / `expert_layer_offset` (Jamba); shared experts
               (n_shared_experts, shared_expert_intermediate_size with Qwen's sigmoid gate,
               Llama 4's one shared expert).
A key this module neither reads nor lists in HF_NO_COST (keys that do not change what the
planner prices) is an error naming it: an unknown key may change the architecture. Keys in
HF_MUST_BE_OFF are accepted only at their off value.

Keys a config leaves out take the transformers class default of its model_type (FAMILIES,
each class cited), listed as assumed (`planner explain` prints them); a model type without a
table keeps planner's stated rules (HF_ABSENT).

The per-layer rules are periodic sequences (Seq): a rule builds one period (Gemma 3 six layers,
Jamba eight), an explicit list (layer_types, a block pattern, mlp_only_layers) its own length,
so a config of 10**7 layers costs one period. The layer_pattern written is the shortest prefix
that repeats from the start; when every layer has the default mixer and the MLPs follow the moe
block's own rule (first_k_dense, layer_freq), no pattern is written (the model stays uniform).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import PlannerError

_TF = "transformers src/transformers/models"


@dataclass(frozen=True)
class Family:
    """What transformers' config and model classes of one model_type say."""

    cls: str  # the config class
    file: str  # its file in transformers
    defaults: dict  # class defaults of the keys read here
    gated: bool  # the MLP class has a gate projection
    gated_src: str
    norm: str = "rmsnorm"
    position: str = "rope"  # rope | none
    position_src: str = ""
    attn_output_gate: bool = False  # every softmax-attention layer has an output gate
    expert_width_key: str = "moe_intermediate_size"  # or intermediate_size (experts as wide as the dense MLP)
    extra: dict = field(default_factory=dict)
    default_text: dict = field(default_factory=dict)  # key -> what its class default means (a None default)


FAMILIES: dict[str, Family] = {
    # Gemma3TextConfig.__init__ (transformers models/gemma3/configuration_gemma3.py, commit 008f5c8c):
    # vocab_size=262_208, tie_word_embeddings=True, sliding_window=4096, sliding_window_pattern=6, ...
    "gemma3_text": Family(
        cls="Gemma3TextConfig", file=f"{_TF}/gemma3/configuration_gemma3.py",
        defaults=dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                      max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6,
                      attention_bias=False, attention_dropout=0.0, sliding_window=4096, sliding_window_pattern=6),
        gated=True, gated_src="Gemma3MLP: gate_proj, up_proj, down_proj (GeGLU, gelu_pytorch_tanh)",
        position_src="Gemma3RotaryEmbedding (rope_theta global, rope_local_base_freq local)"),
    # GptOssConfig (models/gpt_oss/configuration_gpt_oss.py, commit 02b8f42b); layer_types default:
    # "sliding_attention" if (i + 1) % 2 else "full_attention".
    "gpt_oss": Family(
        cls="GptOssConfig", file=f"{_TF}/gpt_oss/configuration_gpt_oss.py",
        defaults=dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088, hidden_size=2880,
                      intermediate_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8,
                      sliding_window=128, tie_word_embeddings=False, hidden_act="silu", max_position_embeddings=131072,
                      rms_norm_eps=1e-5, attention_dropout=0.0, num_experts_per_tok=4, attention_bias=True,
                      rope_theta=150000.0),
        gated=True, gated_src="GptOssExperts: gate_up_proj (+ bias) and down_proj (+ bias), clamped SwiGLU",
        position_src="GptOssRotaryEmbedding (YaRN)", expert_width_key="intermediate_size",
        extra=dict(layer_types_default="alternate", router_linear_bias=True)),
    # Qwen3NextConfig (models/qwen3_next/configuration_qwen3_next.py, commit 008e5743): layer_types
    # default "linear_attention" if (i + 1) % full_attention_interval (4) else "full_attention".
    "qwen3_next": Family(
        cls="Qwen3NextConfig", file=f"{_TF}/qwen3_next/configuration_qwen3_next.py",
        defaults=dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48,
                      num_attention_heads=16, num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
                      head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                      linear_num_key_heads=16, linear_num_value_heads=32, decoder_sparse_step=1,
                      moe_intermediate_size=512, shared_expert_intermediate_size=512, num_experts_per_tok=10,
                      num_experts=512, mlp_only_layers=[], full_attention_interval=4),
        gated=True, gated_src="Qwen3NextMLP / experts: gate, up, down (SwiGLU)",
        position_src="Qwen3NextRotaryEmbedding (partial_rotary_factor of head_dim)",
        attn_output_gate=True),
    # Qwen3MoeConfig (models/qwen3_moe/configuration_qwen3_moe.py, commit 008e5743): moe_intermediate_size 768.
    "qwen3_moe": Family(
        cls="Qwen3MoeConfig", file=f"{_TF}/qwen3_moe/configuration_qwen3_moe.py",
        defaults=dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, hidden_act="silu", max_position_embeddings=32768,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                      sliding_window=4096, attention_dropout=0.0, decoder_sparse_step=1, moe_intermediate_size=768,
                      num_experts_per_tok=8, num_experts=128, mlp_only_layers=[]),
        gated=True, gated_src="Qwen3MoeMLP / experts: gate, up, down (SwiGLU)", position_src="Qwen3MoeRotaryEmbedding"),
    # NemotronHConfig (models/nemotron_h/configuration_nemotron_h.py, commit 13923c63); the block
    # classes in modular_nemotron_h.py (commit 008d9e95).
    "nemotron_h": Family(
        cls="NemotronHConfig", file=f"{_TF}/nemotron_h/configuration_nemotron_h.py",
        defaults=dict(vocab_size=131072, hidden_size=4096, tie_word_embeddings=False, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, max_position_embeddings=4096, attention_bias=False,
                      attention_dropout=0.0, sliding_window=None, intermediate_size=21504, mlp_hidden_act="relu2",
                      mlp_bias=False, ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64, n_groups=8,
                      conv_kernel=4, use_conv_bias=True, chunk_size=128, mamba_proj_bias=False, use_bias=False,
                      n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=7688,
                      moe_shared_expert_intermediate_size=7688, num_experts_per_tok=2, num_nextn_predict_layers=0,
                      hidden_dropout=0.0),
        gated=False, gated_src="NemotronHMLP: up_proj, down_proj only (relu2)", position="none",
        position_src="NemotronHAttention (= JambaAttention) applies no rotary or learned positions"),
    # JambaConfig (models/jamba/configuration_jamba.py, commit 008f5c8c): attention iff
    # i % attn_layer_period == attn_layer_offset, experts iff i % expert_layer_period == expert_layer_offset.
    "jamba": Family(
        cls="JambaConfig", file=f"{_TF}/jamba/configuration_jamba.py",
        defaults=dict(vocab_size=65536, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
                      rms_norm_eps=1e-6, sliding_window=None, max_position_embeddings=262144, attention_dropout=0.0,
                      num_experts_per_tok=2, num_experts=16, expert_layer_period=2, expert_layer_offset=1,
                      attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                      mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False),
        gated=True, gated_src="JambaMLP: gate_proj, up_proj, down_proj", position="none",
        position_src="JambaAttention applies no rotary or learned positions (Jamba paper, arXiv:2403.19887 sec. 2)",
        expert_width_key="intermediate_size"),
    # Llama4TextConfig (models/llama4/configuration_llama4.py, commit 008e5743): no_rope_layers default
    # int((i + 1) % no_rope_layer_interval != 0) (1 = RoPE); moe_layers default
    # range(interleave_moe_layer_step - 1, L, interleave_moe_layer_step); RoPE layers chunked.
    "llama4_text": Family(
        cls="Llama4TextConfig", file=f"{_TF}/llama4/configuration_llama4.py",
        defaults=dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                      num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                      hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      attention_dropout=0.0, num_experts_per_tok=1, num_local_experts=16, moe_layers=None,
                      interleave_moe_layer_step=1, no_rope_layers=None, no_rope_layer_interval=4,
                      attention_chunk_size=8192, attention_bias=False, rope_theta=500000.0),
        gated=True, gated_src="Llama4TextMLP / Llama4TextExperts: gate, up, down (SwiGLU)",
        position_src="Llama4TextRotaryEmbedding on the no_rope_layers == 1 layers",
        expert_width_key="intermediate_size", extra=dict(shared_expert=True),
        default_text=dict(no_rope_layers="default: NoPE on layer i iff (i + 1) % no_rope_layer_interval == 0",
                          moe_layers="default: MoE on layers interleave_moe_layer_step - 1, 2 x step - 1, ...")),
    # MistralConfig (models/mistral/configuration_mistral.py, commit 001f85b3): sliding_window 4096,
    # applied by MistralAttention on every layer.
    "mistral": Family(
        cls="MistralConfig", file=f"{_TF}/mistral/configuration_mistral.py",
        defaults=dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=131072,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=4096, attention_dropout=0.0),
        gated=True, gated_src="MistralMLP: gate_proj, up_proj, down_proj", position_src="MistralRotaryEmbedding"),
    # DeepseekV3Config (models/deepseek_v3/configuration_deepseek_v3.py, commit 001f85b3); Kimi K2's
    # config.json names DeepseekV3Config too (auto_map configuration_deepseek.DeepseekV3Config).
    "deepseek_v3": Family(
        cls="DeepseekV3Config", file=f"{_TF}/deepseek_v3/configuration_deepseek_v3.py",
        defaults=dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                      num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
                      n_routed_experts=256, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128,
                      qk_nope_head_dim=128, num_experts_per_tok=8, first_k_dense_replace=3, hidden_act="silu",
                      max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      attention_bias=False, attention_dropout=0.0),
        gated=True, gated_src="DeepseekV3MLP: gate_proj, up_proj, down_proj", position_src="DeepseekV3RotaryEmbedding"),
}
FAMILIES["kimi_k2"] = FAMILIES["deepseek_v3"]
# The text model of a multimodal wrapper whose text_config gives no model_type (the wrapper's
# sub_configs: Gemma3Config text_config Gemma3TextConfig, Llama4Config text_config Llama4TextConfig).
TEXT_MODEL_TYPE = {"gemma3": "gemma3_text", "llama4": "llama4_text"}

# Model types whose config classes have no table above but whose MLP has a gate projection
# (transformers LlamaMLP-style gate_proj + up_proj + down_proj); any other type is gated when its
# activation is SiLU / SwiGLU (GPT-2 / NeoX / OPT use a plain 2-matrix MLP).
GATED_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3",
               "gemma", "gemma2", "olmo", "olmo2", "granite", "phi3", "cohere"}
PLAIN_ACTIVATIONS = {"relu2", "gelu", "gelu_new", "relu", "gelu_fast"}
# Model types whose attention class norms each head's query and key after the projection (qk_norm:
# q_norm / k_norm = RMSNorm(head_dim), an architecture of the class, no config key): transformers
# models/qwen3/modeling_qwen3.py Qwen3Attention, qwen3_moe Qwen3MoeAttention, qwen3_next
# Qwen3NextAttention, gemma3 Gemma3Attention; olmo2 Olmo2Attention norms the whole projection (q_norm
# RMSNorm(a d), k_norm RMSNorm(k d)): the same elements, kernels and saved inputs, its (a + k) d weights
# counted as 2 d (under 0.01% of the model). Llama 4's use_qk_norm, a parameter-free L2 norm, is not
# mapped (HF_NO_COST).
QK_NORM_TYPES = {"qwen3", "qwen3_moe", "qwen3_next", "gemma3_text", "olmo2"}
# Model types whose decoder layer norms each sub-block's output before the residual add beside the pre-norm
# (post_norms): transformers models/gemma2/modeling_gemma2.py Gemma2DecoderLayer and models/gemma3
# Gemma3DecoderLayer (post_attention_layernorm, post_feedforward_layernorm).
POST_NORM_TYPES = {"gemma2", "gemma3_text"}

# Which layers `sliding_window` applies to, by model type (the attention classes' rule):
#   every      MistralAttention, MixtralAttention: every layer
#   pattern    Gemma 3: layer i global iff (i + 1) % sliding_window_pattern == 0 (Gemma3TextConfig)
#   alternate  Gemma 2: even layers sliding (Gemma2Config layer_types: sliding iff (i + 1) % 2)
#   qwen       Qwen2/Qwen3 (MoE): only with use_sliding_window (refused here: give layer_types)
#   none       Jamba, Nemotron-H: must be null
SLIDING_RULES = {"mistral": "every", "mixtral": "every", "gemma3_text": "pattern", "gemma2": "alternate",
                 "qwen2": "qwen", "qwen3": "qwen", "qwen2_moe": "qwen", "qwen3_moe": "qwen", "qwen3_next": "qwen",
                 "jamba": "none", "nemotron_h": "none"}

# What a config.json may leave out when its model type has no table, and what planner then takes.
# tie_word_embeddings: the transformers PretrainedConfig default (True; transformers v4.46
# configuration_utils.py, `tie_word_embeddings: bool = True`), so Gemma-2-9B, whose config omits it,
# is tied (9.24B).
HF_DEFAULTS = {"tie_word_embeddings": True}
HF_ABSENT = {  # key -> what its absence means here
    "tie_word_embeddings": "tied input/output embeddings (transformers' PretrainedConfig default: True)",
    "num_key_value_heads": "num_key_value_heads = num_attention_heads (multi-head attention)",
    "head_dim": "head_dim = hidden_size / num_attention_heads",
    "max_position_embeddings": "max_seq_len 4096",
    "rms_norm_eps": "LayerNorm (no rms_norm_eps)",
    "rope_theta": "learned position embeddings (no rope_theta / rope_scaling)",
    "attention_bias": "no linear biases (no attention_bias / mlp_bias)",
    "attention_dropout": "no dropout (no attention_dropout)",
    "hidden_act": "activation from model_type (no hidden_act)",
}
_ALTERNATIVES = {"rope_theta": ("rope_scaling", "rope_parameters"), "attention_bias": ("mlp_bias",),
                 "head_dim": ("attention_head_dim",), "attention_dropout": ("attn_pdrop",),
                 "hidden_act": ("activation_function", "hidden_activation", "mlp_hidden_act")}

# GPT-2's dropout keys (transformers GPT2Config, src/transformers/models/gpt2/configuration_gpt2.py docstring:
# resid_pdrop 'The dropout probability for all fully connected layers in the embeddings, encoder, and pooler',
# attn_pdrop 'The dropout ratio for the attention', embd_pdrop 'The dropout ratio for the embeddings'; default 0.1
# each) as ModelSpec's Megatron-spelled fields, by where modeling_gpt2.py applies them: attn_pdrop on the softmax
# output (GPT2Attention.attn_dropout), Megatron's attention_dropout; resid_pdrop on the attention's and the MLP's
# output projections before the residual add (GPT2Attention.resid_dropout, GPT2MLP.dropout), Megatron's hidden_dropout
# (the bias-dropout-add). embd_pdrop: Reader._embedding_dropout. Phi-3's configs carry resid_pdrop and embd_pdrop the
# same way (Phi3Config: resid_pdrop 'Dropout value for mlp outputs', embd_pdrop 'The dropout ratio for the embeddings')
GPT2_DROPOUTS = {"attn_pdrop": "attention_dropout", "resid_pdrop": "hidden_dropout"}

# Keys that do not change what planner prices (parameters, FLOPs, bytes, collectives), so a
# config may carry them at any value. Grouped by why.
_NO_COST_GROUPS = {
    "token ids and the tokenizer": (
        "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class",
        "prefix", "boi_token_index", "eoi_token_index", "image_token_index", "image_token_id", "boi_token_id",
        "eoi_token_id", "mm_tokens_per_image", "forced_bos_token_id", "forced_eos_token_id"),
    "file bookkeeping": (
        "architectures", "auto_map", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "_commit_hash",
        "name_or_path", "id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "task_specific_params"),
    "initialisation only": (
        "initializer_range", "initializer_factor", "rescale_prenorm_residual", "time_step_min", "time_step_max",
        "time_step_floor"),
    "norm epsilons": ("layer_norm_eps", "layer_norm_epsilon", "norm_eps"),
    "rotary frequencies and scaling (rotary is priced as an elementwise op on Q and K; a YaRN rope_scaling's "
    "attention factor is read: rope_attention_factor; the scaling's type and a llama3 or yarn scaling's numbers are "
    "read for the trainers' spelling, at no cost: rope_scaling, rope_scaling_params, rope_yarn_params)": (
        "rope_scaling", "rope_parameters", "rope_local_base_freq", "rope_interleave", "partial_rotary_factor"),
    "attention score scale, temperature, soft-capping and parameter-free q/k L2 norm (elementwise)": (
        "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "attn_temperature_tuning",
        "floor_scale", "attn_scale", "use_qk_norm"),
    "routing and load balancing (which experts a token picks, not how many nor their size)": (
        "routed_scaling_factor", "router_aux_loss_coef", "aux_loss_alpha",
        "seq_aux", "output_router_logits", "router_jitter_noise", "ep_size"),
    "activation clamps and the SSM activation (elementwise; swiglu_limit is read: activation_clamp)": (
        "swiglu_alpha", "time_step_limit", "mamba_hidden_act"),
    "inference and generation settings": (
        "use_cache", "num_logits_to_keep", "cache_implementation", "use_mamba_kernels", "mamba_ssm_cache_dtype",
        "attn_implementation", "_attn_implementation", "return_dict", "output_hidden_states", "output_attentions",
        "torchscript", "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward", "is_decoder", "max_length",
        "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
        "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
        "return_dict_in_generate", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
        "begin_suppress_tokens"),
    "storage precision of the checkpoint (planner prices weights at the job's precision and bytes_per_param)": (
        "quantization_config", "residual_in_fp32", "for_llm_compressor"),
    "pretraining_tp: how pre-training split the linear layers (the same parameters)": ("pretraining_tp",),
    "OpenAI's original gpt-oss name of the context before YaRN; GptOssConfig does not read it": (
        "initial_context_length",),
    "Mamba-2 keys NemotronHMamba2Mixer does not read (d_inner = mamba_num_heads x mamba_head_dim; no dt projection)": (
        "expand", "time_step_rank"),
}
HF_NO_COST: dict[str, str] = {k: why for why, keys in _NO_COST_GROUPS.items() for k in keys}
# Accepted only at their off value (else the model is not a decoder-only LM of the listed kinds).
HF_MUST_BE_OFF = ("pruned_heads", "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder",
                  "cross_attention_hidden_size")
# Keys of a multimodal wrapper (outside text_config) besides the no-cost ones.
_OUTER_KEYS = {"text_config", "vision_config", "model_type", "tie_word_embeddings", "vision_feature_layer",
               "vision_feature_select_strategy", "projector_hidden_act", "multimodal_projector_bias"}

# transformers' PretrainedConfig value types of the keys read here; null is allowed where transformers allows it.
_TYPES: dict[str, tuple[type, ...]] = {
    "model_type": (str,), "hidden_act": (str,), "activation_function": (str,), "_name_or_path": (str,),
    "hidden_activation": (str,), "mlp_hidden_act": (str,),
    "attention_dropout": (int, float), "hidden_dropout": (int, float), "tie_word_embeddings": (bool,),
    "attn_pdrop": (int, float), "resid_pdrop": (int, float), "embd_pdrop": (int, float),
    "attention_bias": (bool,), "mlp_bias": (bool,), "use_sliding_window": (bool,), "use_bias": (bool,),
    "use_conv_bias": (bool,), "mamba_conv_bias": (bool,), "mamba_proj_bias": (bool,),
}
_ABSENT = object()


def _describe_type(types) -> str:
    return " or ".join(dict.fromkeys({str: "a string", int: "a number", float: "a number", bool: "true or false",
                                      list: "a list"}[t] for t in types))


def check_types(cfg: dict, where: str, prefix: str = "") -> None:
    for key, types in _TYPES.items():
        v = cfg.get(key)
        if v is not None and (not isinstance(v, types) or (bool not in types and isinstance(v, bool))):
            raise PlannerError(f"{where}: field `{prefix}{key}`: expected {_describe_type(types)}, got "
                               f"{type(v).__name__} {str(v)[:40]}", "give the config.json transformers saved for the model")


def generic_assumptions(cfg: dict) -> list[str]:
    """The stated rules (HF_ABSENT) a config of a model type without a FAMILIES table falls under."""
    out = []
    for key, text in HF_ABSENT.items():
        if key not in cfg and not any(a in cfg for a in _ALTERNATIVES.get(key, ())):
            out.append(f"{key} absent: {text}")
    return out


@dataclass(frozen=True)
class Seq:
    """A per-layer sequence: at(i) for layer i (0-based), repeating from the start with `period`
    (= the layer count for an explicit per-layer list), so a rule over 10**7 layers is built
    from one period."""

    at: Any
    period: int
    layers: int


def _period(names: list[str], whole: bool) -> list[str]:
    """The shortest prefix that, repeated from the start, gives the model's layer names: `names`
    are all of them (whole) or one period of them (then only divisors of the period qualify). A
    whole list keeps itself unless a prefix repeats at least twice (Nemotron-H's 118 blocks have no
    shorter period)."""
    n = len(names)
    for p in range(1, n // 2 + 1):
        if (whole or n % p == 0) and all(names[i] == names[i % p] for i in range(n)):
            return names[:p]
    return names


def layer_kinds_of(mixers: "Seq | None", mlps: "Seq | None", L: int) -> tuple[dict, list[str]]:
    """(layer_kinds, layer_pattern) of L layers whose mixers and MLPs the two Seqs give (None: the model's
    default): one kind per distinct (mixer, MLP) pair, named from them (_mixer_name, _mlp_name: "mamba2_nomlp",
    "nomixer_dense", ...), and the shortest repeating prefix of the names. The HF reader (Reader._pattern) and
    the Megatron reader (trainers/megatron_model.hybrid_spec) both build a model's layers with it."""
    # the sequence repeats from the start with the least common multiple of the two periods
    n = min(math.lcm(*(s.period for s in (mixers, mlps) if s is not None)), L)
    kinds: dict = {}
    spec_name: dict = {}
    names = []
    for i in range(n):
        mixer = mixers.at(i) if mixers is not None else None
        mlp = mlps.at(i) if mlps is not None else None
        key = (id(mixer), mlp if isinstance(mlp, str) else id(mlp))
        if key not in spec_name:
            mlp_spec = {"kind": mlp} if isinstance(mlp, str) else mlp
            spec = {k: v for k, v in (("mixer", mixer), ("mlp", mlp_spec)) if v is not None}
            name = base = "_".join(x for x in (_mixer_name(mixer), _mlp_name(mlp_spec)) if x)
            j = 1
            while name in kinds and kinds[name] != spec:
                j += 1
                name = f"{base}_{j}"
            kinds.setdefault(name, spec)
            spec_name[key] = name
        names.append(spec_name[key])
    return kinds, _period(names, whole=n == L)


#: a hybrid block pattern's characters (Nemotron-H's hybrid_override_pattern, Megatron-LM's --hybrid-layer-pattern:
#: megatron/core/models/hybrid/hybrid_layer_allocation.py @d98e8a64 l. 14-26 Symbols MAMBA 'M', ATTENTION '*',
#: MLP '-', MOE 'E') -> what each block holds: one mixer or one MLP behind one pre-norm
HYBRID_BLOCKS = "M*-E"


def hybrid_block_table(mamba2: "dict | None", attn: dict, gdn: "dict | None" = None) -> dict:
    """symbol -> (mixer, mlp) of a hybrid block (HYBRID_BLOCKS): M the Mamba-2 mixer alone, * the attention mixer
    alone, - a dense MLP alone, E an MoE MLP alone, G the Gated DeltaNet mixer alone (NemotronHBlock; Megatron-LM's
    HybridStack, hybrid_block.py @d98e8a64 l. 134-193, 195-215: one MambaLayer, TransformerLayer of attention only,
    MLPLayer, MoETransformerLayer or TransformerLayer of GatedDeltaNet only a symbol; hybrid_layer_specs.py
    l. 122-135: the G layer's self_attention is GatedDeltaNet and it has no MLP)."""
    none = {"kind": "none"}
    return {"M": (mamba2, none), "*": (attn, none), "-": (none, {"kind": "dense"}), "E": (none, {"kind": "moe"}),
            "G": (gdn, none)}


def hybrid_block_seqs(blocks: list[str], table: dict) -> tuple["Seq", "Seq"]:
    """(mixers, mlps) Seqs over the blocks (one a layer) from hybrid_block_table's table."""
    L = len(blocks)
    return Seq(lambda i: table[blocks[i]][0], L, L), Seq(lambda i: table[blocks[i]][1], L, L)


class Reader:
    """One config.json's reading: `data()` the ModelSpec fields, `assumed` what defaults filled in."""

    def __init__(self, cfg: dict, path: str):
        self.path, self.outer, self.prefix = path, cfg, ""
        self.notes: list[str] = []
        self.used: set[str] = set()
        self.defaulted: dict[str, str] = {}  # key -> assumed line (class defaults)
        self.cfg = cfg
        if "text_config" in cfg:
            tc = cfg["text_config"]
            if not isinstance(tc, dict):
                raise PlannerError(f"{path}: field `text_config`: expected a mapping of fields, got {type(tc).__name__}",
                                   "give the config.json transformers saved for the model")
            self.cfg, self.prefix = tc, "text_config."
            self.notes.append("text_config: the text model is planned; vision tower not planned: text model only"
                              + ("" if "vision_config" in cfg else " (no vision_config given: the wrapper's default tower)"))
        check_types(cfg, path)
        if self.prefix:
            check_types(self.cfg, path, self.prefix)
        mt = self.cfg.get("model_type")
        if mt is None and self.prefix:
            mt = TEXT_MODEL_TYPE.get(cfg.get("model_type"))
        self.model_type = mt
        self.fam = FAMILIES.get(mt)
        self.used.add("model_type")
        self.mla = False

    # ------------------------------------------------------------------ reading
    def err(self, key: str, msg: str, hint: str) -> PlannerError:
        return PlannerError(f"{self.path}: field `{self.prefix}{key}`: {msg}", hint)

    def has(self, key: str) -> bool:
        return key in self.cfg or (self.fam is not None and key in self.fam.defaults)

    def get(self, key: str, default: Any = _ABSENT) -> Any:
        """The config's value; else the family's class default (listed as assumed); else `default`."""
        self.used.add(key)
        if key in self.cfg:
            return self.cfg[key]
        if self.fam is not None and key in self.fam.defaults:
            v = self.fam.defaults[key]
            text = self.fam.default_text.get(key, f"default {v!r}")
            self.defaulted.setdefault(key, f"{key} absent: transformers' {self.fam.cls} {text}")
            return v
        return default

    def count(self, key: str, default: Any = _ABSENT, zero: bool = False) -> Any:
        """A whole number (> 0, or >= 0 with zero). Without a default the key is required: absent
        with no class default, or null, is an error naming it."""
        v = self.get(key, default)
        if v is _ABSENT or (v is None and default is _ABSENT):
            why = "null" if key in self.cfg else "missing"
            raise PlannerError(f"{self.path}: field `{self.prefix}{key}` is {why}",
                               f"give {key}, a whole number (model_type {self.model_type!r}: no class default here)")
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero else 1):
            raise self.err(key, f"expected a whole number {'>= 0' if zero else '> 0'}, got {str(v)[:40]}",
                           "give the config.json transformers saved for the model")
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.get(key, default)
        return bool(v)

    def int_list(self, key: str, v: Any, L: int) -> list[int]:
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise self.err(key, f"expected a list of layer indices, got {str(v)[:60]}",
                           "give the config.json transformers saved for the model")
        bad = [x for x in v if not 0 <= x < L]
        if bad:
            raise self.err(key, f"layer index {bad[0]} is outside 0..{L - 1}", f"the model has {L} layers")
        return v

    # ------------------------------------------------------------------ the model
    def data(self) -> dict:
        c, path = self.cfg, self.path
        required = ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"]
        missing = [k for k in required if self.get(k, None) is None and k not in c]
        if self.model_type == "nemotron_h" and "num_hidden_layers" in missing and self._nemotron_pattern_given():
            missing.remove("num_hidden_layers")
        if missing:
            raise PlannerError(
                f"{path}: missing field(s) {', '.join(self.prefix + k for k in missing)}",
                "a Hugging Face config.json needs num_hidden_layers, hidden_size, intermediate_size, "
                "num_attention_heads, num_key_value_heads, vocab_size, hidden_act, tie_word_embeddings")
        outer_name = self.outer.get("_name_or_path")
        name = outer_name or c.get("_name_or_path") or Path(path).parent.name or Path(path).stem
        self.used.add("_name_or_path")
        fam = self.fam
        h = self.count("hidden_size")
        data: dict = dict(
            name=str(name),
            description=f"from Hugging Face config {path}",
            num_layers=self._num_layers(),
            hidden_size=h,
            ffn_hidden_size=self.count("intermediate_size"),
            num_attention_heads=self.count("num_attention_heads"),
            # a null num_key_value_heads is MHA (transformers' configs: None -> num_attention_heads); 0, a negative
            # or a boolean is refused by count (before the 2026-12-07 audit 0 fell through `or` to MHA, silently)
            num_kv_heads=self.count("num_key_value_heads", None) or self.get("num_attention_heads"),
            head_dim=self._head_dim(),
            vocab_size=self.count("vocab_size"),
            gated_mlp=self._gated(),
            norm=self._norm(),
            tied_embeddings=self._tied(),
            max_seq_len=self.count("max_position_embeddings", None) or 4096,  # 0 refused, not read as absent
            position_embedding=self._position(),
            linear_bias=bool(self.get("attention_bias", False) or self.get("mlp_bias", False)),
            dropout=self._dropout(),
            sources=[f"Hugging Face config.json: {path}"],
        )
        if data["dropout"]:
            data.update(self._dropout_probabilities())
        # the implementation family (ModelSpec.hf_model_type): the config's top-level model_type (a multimodal
        # wrapper's, llama4 / gemma3, not its text_config's); a config without one leaves it null (assumed by the
        # trainers' model-code rules, startup.model_code_assumed)
        mt = self.outer.get("model_type")
        if mt is not None:
            if not (isinstance(mt, str) and mt and all(ch in "abcdefghijklmnopqrstuvwxyz0123456789_" for ch in mt)):
                raise PlannerError(f"{path}: field `model_type`: {str(mt)[:40]!r} is not a transformers model type "
                                   "(lower-case letters, digits and _)", "give the config.json transformers saved for the model")
            data["hf_model_type"] = mt
        if self.model_type in QK_NORM_TYPES:
            data["qk_norm"] = True
        if self.model_type in POST_NORM_TYPES:
            data["post_norms"] = True
        if fam is not None and fam.extra.get("router_linear_bias") and not data["linear_bias"]:
            # gpt-oss experts always carry biases (GptOssExperts gate_up_proj_bias, down_proj_bias): planner's one
            # linear_bias flag covers attention and MLP alike, so attention without biases cannot be expressed
            raise self.err("attention_bias", "false, but gpt-oss experts always carry biases: planner's linear_bias "
                           "covers attention and MLP together", "write a model YAML for this variant")
        limit = self.get("swiglu_limit", None)  # gpt-oss: gate clamped to <= limit, up to +-limit before the GLU
        if limit is not None and data["gated_mlp"]:
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
                raise self.err("swiglu_limit", f"expected a number > 0, got {str(limit)[:40]}",
                               "give the config.json transformers saved for the model")
            data["activation_clamp"] = float(limit)
        if not data["gated_mlp"] and self._activation() == "relu2":  # transformers ACT2FN relu2: ReLUSquaredActivation
            data["mlp_activation"] = "squared_relu"  # (Nemotron-H's mlp_hidden_act; Megatron-LM --squared-relu)
        factor = self._rope_attention_factor()
        if factor != 1.0:
            data["rope_attention_factor"] = factor
        scaling = self._rope_scaling_type()
        if scaling is not None:
            data["rope_scaling"] = scaling
        if scaling == "llama3":
            data["rope_scaling_params"] = self._llama3_rope_params()
        if scaling == "yarn":
            yarn = self._yarn_rope_params()
            if yarn is not None:
                data["rope_yarn_params"] = yarn
        theta = self._rope_theta() if data.get("position_embedding") == "rope" else None
        if theta is not None:
            data["rope_theta"] = theta
        mtp = self.count("num_nextn_predict_layers", 0, zero=True)
        if mtp:
            data["mtp_layers"] = mtp
        self.mla = bool(self.get("kv_lora_rank", None))
        if self.mla:
            data["mla"] = {k: self.get(k, None) for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                                                        "qk_nope_head_dim", "v_head_dim")}
            data["num_kv_heads"] = None  # MLA: one up-projected key/value head per query head
            data["head_dim"] = None
        mixers, mlps, moe = self._layers(data)
        if moe is not None:
            data["moe"] = moe
        self._pattern(data, mixers, mlps)
        self._check_unread()
        return data

    @property
    def assumed(self) -> list[str]:
        if self.fam is None:
            out = generic_assumptions(self.cfg)
        else:
            out = []
            for key in HF_ABSENT:  # the rules that still apply to a key the class has no default for
                if key in self.defaulted or key in self.cfg or any(a in self.cfg for a in _ALTERNATIVES.get(key, ())):
                    continue
                if key in ("rms_norm_eps", "rope_theta", "hidden_act", "max_position_embeddings"):
                    continue  # the family table says these (norm, position, MLP class) below
                if key in ("head_dim", "num_key_value_heads") and self.mla:
                    continue  # MLA: the latent shape says the heads
                out.append(f"{key} absent: {HF_ABSENT[key]}")
        out += [line for key, line in self.defaulted.items()
                if not (self.mla and key in ("head_dim", "num_key_value_heads"))]  # MLA: the latent shape says the heads
        return out + self.notes

    # ------------------------------------------------------------------ fields
    def _num_layers(self) -> int:
        if self.model_type == "nemotron_h" and self._nemotron_pattern_given():
            blocks = self._nemotron_blocks()
            n = self.count("num_hidden_layers", None)
            if n is not None and n != len(blocks):
                raise self.err("num_hidden_layers", f"{n}, but the block pattern lists {len(blocks)} blocks "
                               "(Nemotron-H: num_hidden_layers counts blocks)", "make the two agree")
            return len(blocks)
        return self.count("num_hidden_layers")

    def _head_dim(self):
        if self.model_type == "nemotron_h" and "attention_head_dim" in self.cfg:
            self.used.add("attention_head_dim")  # the remote-code name of head_dim (NemotronHConfig of the 2025 checkpoints)
            if "head_dim" in self.cfg and self.cfg["head_dim"] != self.cfg["attention_head_dim"]:
                raise self.err("attention_head_dim", "differs from head_dim", "give one of them")
            return self.count("attention_head_dim")
        return self.count("head_dim", None)

    def _activation(self) -> str:
        for key in ("hidden_act", "hidden_activation", "mlp_hidden_act", "activation_function"):
            v = self.get(key, None) if (key in self.cfg or (self.fam and key in self.fam.defaults)) else None
            if v is not None:
                return str(v).lower()
        return ""

    def _gated(self) -> bool:
        """The family's MLP class decides (FAMILIES gated_src); without a table, GATED_TYPES, else a
        SiLU / SwiGLU activation means gated."""
        act = self._activation()
        if self.fam is not None:
            return self.fam.gated
        if self.model_type in GATED_TYPES:
            return True
        return act in {"silu", "swish", "swiglu"}

    def _norm(self) -> str:
        self.used.add("rms_norm_eps")
        if self.fam is not None:
            if "rms_norm_eps" not in self.cfg:
                self.defaulted.setdefault("rms_norm_eps", f"rms_norm_eps absent: RMSNorm (the {self.fam.cls} model's "
                                                          "norms are RMSNorm)")
            return self.fam.norm
        return "rmsnorm" if "rms_norm_eps" in self.cfg else "layernorm"

    def _tied(self) -> bool:
        inner = self.get("tie_word_embeddings", _ABSENT)
        if self.prefix and "tie_word_embeddings" in self.outer:
            o = self.outer["tie_word_embeddings"]
            if "tie_word_embeddings" in self.cfg and bool(o) != bool(self.cfg["tie_word_embeddings"]):
                raise PlannerError(f"{self.path}: field `tie_word_embeddings`: {o} at the top level but "
                                   f"{self.cfg['tie_word_embeddings']} in text_config", "make the two agree")
            self.defaulted.pop("tie_word_embeddings", None)
            return bool(o)
        if inner is _ABSENT:
            return HF_DEFAULTS["tie_word_embeddings"]
        return bool(inner)

    def _position(self) -> str:
        for k in ("rope_theta", "rope_scaling", "rope_parameters"):
            self.used.add(k)
        if self.fam is not None:
            if self.fam.position == "rope" and not any(k in self.cfg for k in ("rope_theta", "rope_scaling",
                                                                                "rope_parameters")):
                self.get("rope_theta", None)  # lists the class default as assumed
            elif self.fam.position == "none" and "rope_theta" not in self.cfg:
                self.notes.append(f"no position embedding: {self.fam.position_src}")
            return self.fam.position
        return "rope" if any(k in self.cfg for k in ("rope_theta", "rope_scaling", "rope_parameters")) else "learned"

    def _rope_theta(self):
        """The rotary base (ModelSpec.rope_theta): config.json rope_theta, or rope_parameters.rope_theta (the
        newer layout); None where neither states it. It costs nothing; it says which model a trainer's
        --rotary-base spells."""
        v = self.cfg.get("rope_theta")
        if v is None and isinstance(self.cfg.get("rope_parameters"), dict):
            v = self.cfg["rope_parameters"].get("rope_theta")
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise self.err("rope_theta", f"rope_theta must be a number > 0 (got {str(v)[:40]})",
                           "give the config.json transformers saved for the model")
        return float(v)

    def _rope_scaling_type(self):
        """rope_scaling's (rope_parameters') rope_type, else type (transformers modeling_rope_utils: the
        older key `type` is read as rope_type), where it is one ModelSpec.rope_scaling names; None for
        'default', no table, or a type it does not name (read only for MLA's rope fusion: not YaRN)."""
        rs = self.cfg.get("rope_scaling") or self.cfg.get("rope_parameters")
        if not isinstance(rs, dict):
            return None
        kind = rs.get("rope_type") or rs.get("type")
        return kind if kind in ("yarn", "llama3", "linear", "dynamic", "longrope") else None

    def _llama3_rope_params(self) -> dict:
        """A llama3 rope_scaling's four numbers (ModelSpec.rope_scaling_params): transformers
        modeling_rope_utils _compute_llama3_parameters reads factor, low_freq_factor, high_freq_factor
        and original_max_position_embeddings from it, each required (_validate_llama3_parameters). They
        cost nothing; they say which model a trainer's option spells (Llama 3.1: 8, 1, 4, 8192)."""
        rs = self.cfg.get("rope_scaling") or self.cfg.get("rope_parameters")
        out = {}
        for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            v = rs.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise self.err("rope_scaling", f"a llama3 rope_scaling needs {k} > 0 (got {str(v)[:40]})",
                               "give the config.json transformers saved for the model")
            out[k] = v
        if float(out["original_max_position_embeddings"]).is_integer():
            out["original_max_position_embeddings"] = int(out["original_max_position_embeddings"])
        return out

    def _yarn_rope_params(self):
        """A yarn rope_scaling's numbers (ModelSpec.rope_yarn_params) where it states factor and
        original_max_position_embeddings: transformers modeling_rope_utils _compute_yarn_parameters reads
        factor, beta_fast (absent: 32), beta_slow (absent: 1) and truncate (absent: True) from it; None where
        either of the two is absent (not stated: an export that must spell them refuses). They cost nothing;
        they say which model a trainer's option spells (gpt-oss: 32, 4096, 32, 1, false)."""
        rs = self.cfg.get("rope_scaling") or self.cfg.get("rope_parameters")
        if rs.get("factor") is None or rs.get("original_max_position_embeddings") is None:
            return None
        out = {}
        for k in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow"):
            v = rs.get(k)
            if v is None:  # beta_fast / beta_slow: the schema's defaults, transformers' 32 and 1
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise self.err("rope_scaling", f"a yarn rope_scaling needs {k} > 0 (got {str(v)[:40]})",
                               "give the config.json transformers saved for the model")
            out[k] = float(v)
        orig = out["original_max_position_embeddings"]
        if not orig.is_integer():
            raise self.err("rope_scaling", f"a yarn rope_scaling's original_max_position_embeddings must be a whole "
                                           f"number (got {orig:g})", "give the config.json transformers saved for the model")
        out["original_max_position_embeddings"] = int(orig)
        if "truncate" in rs:
            if not isinstance(rs["truncate"], bool):
                raise self.err("rope_scaling", f"a yarn rope_scaling's truncate must be true or false (got "
                                               f"{str(rs['truncate'])[:40]})", "give the config.json transformers saved for the model")
            out["truncate"] = rs["truncate"]
        for k in ("mscale", "mscale_all_dim"):  # DeepSeek's; read by _rope_attention_factor and Megatron MLA's --mscale*
            v = rs.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise self.err("rope_scaling", f"a yarn rope_scaling needs {k} >= 0 (got {str(v)[:40]})",
                               "give the config.json transformers saved for the model")
            out[k] = float(v)
        return out

    def _rope_attention_factor(self) -> float:
        """The factor on RoPE's cos and sin: YaRN's attention factor (transformers
        modeling_rope_utils._compute_yarn_parameters: rope_scaling attention_factor, else
        get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) where both are given,
        else get_mscale(factor) = 0.1 ln(factor) + 1 for factor > 1); 1 for any other rotary."""
        rs = self.cfg.get("rope_scaling") or self.cfg.get("rope_parameters")
        if not isinstance(rs, dict) or (rs.get("rope_type") or rs.get("type")) != "yarn":
            return 1.0

        def mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        try:
            if rs.get("attention_factor") is not None:
                return float(rs["attention_factor"])
            f = float(rs.get("factor", 1.0))
            if rs.get("mscale") and rs.get("mscale_all_dim"):
                return float(mscale(f, float(rs["mscale"])) / mscale(f, float(rs["mscale_all_dim"])))
            return float(mscale(f))
        except (TypeError, ValueError):
            raise self.err("rope_scaling", f"yarn factors must be numbers, got {str(rs)[:60]}",
                           "give the config.json transformers saved for the model") from None

    def _dropout(self) -> bool:
        out = False
        for key in ("attention_dropout", "hidden_dropout", *GPT2_DROPOUTS):
            v = self.get(key, 0.0)
            if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and not 0 <= v < 1:
                # a probability (torch.nn.Dropout refuses p outside [0, 1]); before the 2026-12-07 audit a negative
                # one read as no dropout, silently
                raise self.err(key, f"expected a dropout probability from 0 to below 1, got {v}",
                               "give the config.json transformers saved for the model")
            if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0:
                out = True
        self._embedding_dropout()
        return out

    def _embedding_dropout(self) -> None:
        """GPT-2's embd_pdrop: the dropout on the token + position embeddings' sum (transformers GPT2Model.drop =
        nn.Dropout(config.embd_pdrop), applied to inputs_embeds + position_embeds; GPT2Config docstring 'The dropout
        ratio for the embeddings'). The planner prices no embedding dropout (its mask, one byte an element of the
        first stage's input, Megatron's LanguageModelEmbedding embedding_dropout alike): above 0 it is said among the
        model file's assumed lines as not modelled (an assumed line `HEAD: RULE`, as this reader's other notes: the
        trainer readers' report.Note lives in planner/trainers/, which the model catalog, a cost model's input, does
        not import: tests/test_imports.py); 0 runs none."""
        v = self.get("embd_pdrop", 0.0)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            self.notes.append(f"{self.prefix}embd_pdrop={v}: not modelled: the embedding dropout (transformers "
                              "GPT2Model.drop) keeps a mask the planner does not price")

    def _dropout_probabilities(self) -> dict:
        """The two probabilities as ModelSpec's Megatron-spelled fields (null there would price Megatron's 0.1 each,
        export._dropout): attention_dropout, the attention probabilities' dropout every family's attention applies
        (transformers' LlamaAttention-style classes: self.attention_dropout = config.attention_dropout, passed as the
        eager attention's dropout p in training); hidden_dropout, the residual dropout, where the config gives it
        (nemotron_h: NemotronHConfig.hidden_dropout, a Family default 0.0), else 0: the decoder layers of the types
        read here add their sub-blocks' outputs to the residual stream with no dropout (LlamaDecoderLayer-style
        `hidden_states = residual + hidden_states`), so no hidden masks are priced (ModelSpec.hidden_dropout_on)."""
        def prob(key: str) -> float:
            v = self.get(key, 0.0)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

        out = {"attention_dropout": prob("attention_dropout"), "hidden_dropout": prob("hidden_dropout")}
        for key, field in GPT2_DROPOUTS.items():  # GPT-2's spelling of the same probability
            if key not in self.cfg:
                continue
            if field in self.cfg and prob(field) != prob(key):
                raise self.err(key, f"{prob(key)} where {field} is {prob(field)}: both name the {field.replace('_', ' ')} "
                               "probability (GPT2Config " + key + ")", f"give one of {key} and {field}")
            out[field] = prob(key)
        return out

    # ------------------------------------------------------------------ layers
    def _nemotron_pattern_given(self) -> bool:
        return "hybrid_override_pattern" in self.cfg or "layers_block_type" in self.cfg

    def _nemotron_blocks(self) -> list[str]:
        """Nemotron-H blocks as characters (NemotronHConfig._pattern_to_list): M Mamba-2, * attention,
        - MLP, E MoE; layers_block_type names map back onto them."""
        if "hybrid_override_pattern" in self.cfg:
            pat = self.get("hybrid_override_pattern")
            if not isinstance(pat, str) or not pat or any(ch not in "M*-E" for ch in pat):
                raise self.err("hybrid_override_pattern", f"expected a string of M, *, - and E (one a block), got "
                               f"{str(pat)[:60]}", "M Mamba-2, * attention, - MLP, E MoE")
            return list(pat)
        names = self.get("layers_block_type")
        back = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}
        if not isinstance(names, list) or not names or any(n not in back for n in names):
            raise self.err("layers_block_type", f"expected a list of {', '.join(sorted(back))}, got {str(names)[:60]}",
                           "NemotronHConfig layers_block_type")
        return [back[n] for n in names]

    def _attn(self, position=None, **kw) -> dict:
        d = {"kind": "global"}
        d.update(kw)
        if position is not None:
            d["position"] = position
        if self.fam is not None and self.fam.attn_output_gate:
            d["output_gate"] = True
        return d

    def _window(self) -> int:
        w = self.count("sliding_window", None)
        if w is None:
            raise self.err("sliding_window", "null or missing, but sliding-window layers are listed",
                           "give sliding_window (keys a query attends to)")
        return w

    def _mixers(self, L: int):
        """The mixers as a Seq (None: every layer the model's default mixer)."""
        c = self.cfg
        mt = self.model_type
        if self._nemotron_pattern_given():
            key = "hybrid_override_pattern" if "hybrid_override_pattern" in c else "layers_block_type"
            raise self.err(key, f"a Nemotron-H block pattern in a model_type {mt!r} config",
                           "planner reads it for model_type nemotron_h only")
        if "attn_layer_period" in c or "attn_layer_offset" in c or mt == "jamba":
            period, offset = self.count("attn_layer_period"), self.count("attn_layer_offset", zero=True)
            if offset >= period:
                raise self.err("attn_layer_offset", f"{offset} is not below attn_layer_period {period}",
                               "JambaConfig: the offset must be smaller than the period")
            attn, mamba = self._attn(), self._mamba1()
            self._no_window("jamba")
            return Seq(lambda i: attn if i % period == offset else mamba, period, L)
        if mt == "llama4_text" or any(k in c for k in ("no_rope_layers", "no_rope_layer_interval",
                                                        "attention_chunk_size")):
            return self._llama4_mixers(L)
        types = self.get("layer_types", None)
        if types is None and ("full_attention_interval" in c or mt == "qwen3_next"):
            n = self.count("full_attention_interval")
            self._sliding_switch_off()
            full, gdn = self._attn(), self._gdn()
            return Seq(lambda i: gdn if (i + 1) % n else full, n, L)
        if types is None and self.fam is not None and self.fam.extra.get("layer_types_default") == "alternate":
            self.defaulted["layer_types"] = (f"layer_types absent: transformers' {self.fam.cls} default: sliding "
                                             "on even layers ((i + 1) % 2), full on odd")
            sliding, full = self._attn(kind="sliding", window=self._window()), self._attn()
            return Seq(lambda i: sliding if (i + 1) % 2 else full, 2, L)
        if types is not None:
            self._sliding_switch_off()
            return self._from_layer_types(types, L)
        return self._sliding_rule(L)

    def _sliding_switch_off(self) -> None:
        """Qwen's use_sliding_window / max_window_layers are superseded by layer_types."""
        for k in ("use_sliding_window", "max_window_layers"):
            if k in self.cfg:
                self.used.add(k)

    def _from_layer_types(self, types, L: int):
        if not isinstance(types, list) or len(types) != L or not all(isinstance(t, str) for t in types):
            raise self.err("layer_types", f"expected a list of {L} layer types (one a layer), got "
                           f"{str(types)[:60]}", "e.g. full_attention, sliding_attention")
        kinds: dict = {}
        for t in dict.fromkeys(types):
            if t == "full_attention":
                kinds[t] = self._attn()
            elif t == "sliding_attention":
                kinds[t] = self._attn(kind="sliding", window=self._window())
            elif t == "chunked_attention":
                kinds[t] = self._attn(kind="chunked", chunk=self.count("attention_chunk_size"))
            elif t == "linear_attention" and self.model_type == "qwen3_next":
                kinds[t] = self._gdn()
            else:
                raise self.err("layer_types", f"layer type {t!r} is not modelled for model_type {self.model_type!r}",
                               "planner knows full_attention, sliding_attention, chunked_attention, and "
                               "linear_attention (Gated DeltaNet) for qwen3_next")
        if "sliding_window" in self.cfg and "sliding_attention" not in kinds:
            self.used.add("sliding_window")  # layer_types says no layer slides
        if list(kinds) == ["full_attention"] and kinds["full_attention"] == {"kind": "global"}:
            return None
        return Seq(lambda i: kinds[types[i]], L, L)

    def _no_window(self, what: str) -> None:
        w = self.get("sliding_window", None)
        if w is not None:
            raise self.err("sliding_window", f"{w}: a {what} model has no sliding-window layers here",
                           "set it to null, or give layer_types")

    def _sliding_rule(self, L: int):
        """`sliding_window` without layer_types: the model type's rule (SLIDING_RULES)."""
        rule = SLIDING_RULES.get(self.model_type)
        if rule == "qwen":
            if self.flag("use_sliding_window", False):
                raise self.err("use_sliding_window", "true: Qwen's windowed layers (from max_window_layers) are not "
                               "modelled from these keys", "give layer_types (sliding_attention / full_attention a layer)")
            for k in ("sliding_window", "max_window_layers"):
                self.used.add(k)  # no window without use_sliding_window (Qwen2/3 configs)
            return None
        w = self.get("sliding_window", None)
        if w is None:
            return None
        if rule == "none":
            self._no_window(self.model_type)
        sliding = self._attn(kind="sliding", window=self._window())
        if rule == "every":
            return Seq(lambda i: sliding, 1, L)
        if rule == "alternate":
            return Seq(lambda i: sliding if i % 2 == 0 else None, 2, L)
        if rule == "pattern":
            p = self.count("sliding_window_pattern")
            return Seq(lambda i: None if (i + 1) % p == 0 else sliding, p, L)
        raise self.err("sliding_window", f"{w}: which layers use the window is not known for model_type "
                       f"{self.model_type!r}", "give layer_types (sliding_attention / full_attention for each layer)")

    def _llama4_mixers(self, L: int):
        """Llama 4 (Llama4TextConfig.__post_init__): no_rope_layers[i] 1 = RoPE, 0 = NoPE, default
        int((i + 1) % no_rope_layer_interval != 0); RoPE layers attend within attention_chunk_size
        chunks (layer_types chunked_attention), NoPE layers globally (full_attention)."""
        nr = self.get("no_rope_layers", None)
        interval = self.count("no_rope_layer_interval")
        types = self.get("layer_types", None)
        chunk = self.count("attention_chunk_size", None)
        if "sliding_window" in self.cfg:
            self._no_window("Llama 4")
        if nr:  # Llama4TextConfig: an empty or null list falls back to the interval rule
            if not isinstance(nr, list) or len(nr) < L or any(x not in (0, 1) or isinstance(x, bool) for x in nr):
                raise self.err("no_rope_layers", f"expected a list of {L} zeros and ones (1 = RoPE), got {str(nr)[:60]}",
                               "Llama4TextConfig no_rope_layers")
            rope, period = (lambda i: bool(nr[i])), L
        else:
            rope, period = (lambda i: (i + 1) % interval != 0), interval
        if types is not None:
            if not isinstance(types, list) or len(types) != L or any(t not in ("chunked_attention", "full_attention")
                                                                      for t in types):
                raise self.err("layer_types", f"expected a list of {L} chunked_attention / full_attention, got "
                               f"{str(types)[:60]}", "Llama4TextConfig layer_types")
            chunked, period = (lambda i: types[i] == "chunked_attention"), L
        else:
            chunked = rope
        kinds = {(c, r): self._attn(**({"kind": "chunked", "chunk": chunk} if c and chunk is not None else {}),
                                    position=None if r else "nope")
                 for c in (False, True) for r in (False, True)}
        return Seq(lambda i: kinds[(chunked(i), rope(i))], period, L)

    def _gdn(self) -> dict:
        """Gated DeltaNet (Qwen3NextGatedDeltaNet) from the linear_* keys."""
        return {"kind": "gated_deltanet", "num_key_heads": self.count("linear_num_key_heads"),
                "num_value_heads": self.count("linear_num_value_heads"),
                "key_head_dim": self.count("linear_key_head_dim"),
                "value_head_dim": self.count("linear_value_head_dim"),
                "conv_kernel": self.count("linear_conv_kernel_dim")}

    def _mamba1(self) -> dict:
        """Mamba (JambaMambaMixer): d_inner = mamba_expand x hidden_size, dt_rank "auto" = ceil(h / 16)
        (JambaConfig), RMSNorms on dt, B and C."""
        h = self.count("hidden_size")
        dt = self.get("mamba_dt_rank")
        if dt == "auto":
            dt = math.ceil(h / 16)
        elif isinstance(dt, bool) or not isinstance(dt, int) or dt < 1:
            raise self.err("mamba_dt_rank", f"expected a whole number or \"auto\", got {str(dt)[:40]}", "JambaConfig")
        return {"kind": "mamba1", "d_inner": self.count("mamba_expand") * h, "state_size": self.count("mamba_d_state"),
                "conv_kernel": self.count("mamba_d_conv"), "dt_rank": dt,
                "conv_bias": self.flag("mamba_conv_bias", True), "proj_bias": self.flag("mamba_proj_bias", False),
                "inner_norms": True}

    def _mamba2(self) -> dict:
        """Mamba-2 (NemotronHMamba2Mixer): heads x head_dim, n_groups, ssm_state_size, conv_kernel with
        use_conv_bias, in/out projections with use_bias, SSD chunk_size."""
        use_bias = self.flag("use_bias", False)
        if self.flag("mamba_proj_bias", False) != use_bias:
            raise self.err("mamba_proj_bias", f"differs from use_bias ({use_bias}), which NemotronHMamba2Mixer's "
                           "in_proj and out_proj read", "make the two agree")
        return {"kind": "mamba2", "num_heads": self.count("mamba_num_heads"), "head_dim": self.count("mamba_head_dim"),
                "state_size": self.count("ssm_state_size"), "n_groups": self.count("n_groups"),
                "conv_kernel": self.count("conv_kernel"), "chunk_size": self.count("chunk_size"),
                "conv_bias": self.flag("use_conv_bias", True), "proj_bias": use_bias}

    def _experts(self):
        """(key, count) of the routed experts, or None: the config's key, else the class default."""
        keys = ("num_local_experts", "n_routed_experts", "num_experts")
        for key in keys:
            if key in self.cfg and self.cfg[key]:
                return key, self.count(key)
        for key in keys:
            if key in self.cfg:
                self.used.add(key)  # present as 0 / null: no experts
                return None
        for key in keys:
            if self.fam is not None and key in self.fam.defaults:
                return key, self.count(key)
        return None

    def _moe(self) -> dict | None:
        """The `moe:` block (routed experts, top-k, widths, shared experts, router)."""
        ek = self._experts()
        if ek is None:
            return None
        key, n = ek
        if self.model_type == "jamba" and n <= 1:
            return None  # JambaConfig: layers_num_experts 1 = the dense JambaMLP
        k = self.count("num_experts_per_tok", None)
        if k is None:
            raise PlannerError(f"{self.path}: field `{self.prefix}{key}` is set but `num_experts_per_tok` is missing",
                               "add num_experts_per_tok (the experts each token is routed to)")
        if "experts_per_token" in self.cfg:  # OpenAI's original gpt-oss name; GptOssConfig reads num_experts_per_tok
            self.used.add("experts_per_token")
            if self.cfg["experts_per_token"] != k:
                raise self.err("experts_per_token", f"{self.cfg['experts_per_token']}, but num_experts_per_tok is {k}",
                               "make the two agree")
        moe: dict = dict(num_experts=n, top_k=k)
        fam = self.fam
        width_key = fam.expert_width_key if fam is not None else (
            "intermediate_size" if self.model_type in ("mixtral",) else "moe_intermediate_size")
        if width_key == "moe_intermediate_size":
            fe = self.count("moe_intermediate_size", None)
            if fe is not None:
                moe["expert_ffn_hidden_size"] = fe
            else:
                self.notes.append("moe_intermediate_size absent: routed experts as wide as intermediate_size "
                                  f"(model_type {self.model_type!r} has no class default here)")
        if self.model_type == "nemotron_h":
            moe["num_shared_experts"] = self.count("n_shared_experts", zero=True)
            if moe["num_shared_experts"]:
                moe["shared_expert_ffn_hidden_size"] = self.count("moe_shared_expert_intermediate_size")
            if self.get("moe_latent_size", None) is not None:
                raise self.err("moe_latent_size", "latent expert projections are not modelled", "write a model YAML")
        elif fam is not None and fam.extra.get("shared_expert"):  # Llama4TextMoe.shared_expert: one, intermediate_size wide
            moe["num_shared_experts"] = 1
        elif self.count("n_shared_experts", None, zero=True):  # DeepSeek: shared experts of the routed experts' width
            moe["num_shared_experts"] = self.count("n_shared_experts", zero=True)
        elif self.count("shared_expert_intermediate_size", None):  # Qwen2-MoE / Qwen3-Next: one gated shared expert
            moe.update(num_shared_experts=1, shared_expert_ffn_hidden_size=self.count("shared_expert_intermediate_size"),
                       shared_expert_gate=True)
        fk = self.count("first_k_dense_replace", None, zero=True)
        if fk:
            moe["first_k_dense"] = fk
        freq = self.count("moe_layer_freq", None)
        if freq:
            moe["layer_freq"] = freq
        scoring = self.get("scoring_func", None)
        topk_method = self.get("topk_method", None)
        moe["router"] = "sigmoid" if scoring == "sigmoid" or self.model_type in ("nemotron_h", "llama4_text") else "softmax"
        # two different biases of E parameters each: the aux-loss-free score bias, DeepSeek-V3's e_score_correction_bias
        # (config.json topk_method "noaux_tc": transformers DeepseekV3TopkRouter) and Nemotron-H's (the same
        # DeepseekV3TopkRouter), which balances the load (planner/imbalance.py); and the router linear's own bias,
        # gpt-oss's (GptOssTopKRouter self.bias, no config.json key: every GptOssConfig has it), which does not
        if topk_method == "noaux_tc" or self.model_type == "nemotron_h":
            moe["expert_score_bias"] = True
        if fam is not None and fam.extra.get("router_linear_bias"):
            moe["router_linear_bias"] = True
        # group-limited routing (transformers DeepseekV3TopkRouter: the experts in n_group groups, a token's
        # top-k from the topk_group best; DeepSeek-V3 sec. 2.1.2 node-limited routing): n_group 1 is no limit
        groups, per = self.count("n_group", None), self.count("topk_group", None)
        if groups is not None and per is not None and groups > 1:
            moe.update(expert_groups=groups, groups_per_token=per)
        # the top-k weights divided by their sum (MoESpec.route_norm; what torchtitan's division saves, layers/moe.py
        # [21]): config.json norm_topk_prob where it says; Mixtral's and gpt-oss's routers take the softmax over the
        # top-k logits (MixtralSparseMoeBlock, GptOssTopKRouter), which sums to one, and have no such key
        norm = self.flag("norm_topk_prob") if self.has("norm_topk_prob") else None
        if norm is None and self.model_type in ("mixtral", "gpt_oss"):
            norm = True
        elif norm is None:
            self.notes.append("norm_topk_prob absent: the top-k routing weights taken as not renormalised "
                              "(route_norm false; the class defaults differ by model_type)")
        if norm:
            moe["route_norm"] = True
        return moe

    def _mlps(self, L: int, moe: dict | None):
        """The MLPs as a Seq of "moe" / "dense" (None: the moe block's rule, or dense without experts)."""
        c = self.cfg
        if moe is None:
            for k in ("decoder_sparse_step", "mlp_only_layers", "interleave_moe_layer_step", "moe_layers",
                      "expert_layer_period", "expert_layer_offset", "intermediate_size_mlp"):
                if k in c:
                    self.used.add(k)  # placement keys of a model without experts
            return None
        if "expert_layer_period" in c or "expert_layer_offset" in c or self.model_type == "jamba":
            period, offset = self.count("expert_layer_period"), self.count("expert_layer_offset", zero=True)
            if offset >= period:
                raise self.err("expert_layer_offset", f"{offset} is not below expert_layer_period {period}",
                               "JambaConfig: the offset must be smaller than the period")
            return Seq(lambda i: "moe" if i % period == offset else "dense", period, L)
        if self.model_type == "llama4_text" or "interleave_moe_layer_step" in c or "moe_layers" in c:
            layers = self.get("moe_layers", None)
            if layers is None:
                step = self.count("interleave_moe_layer_step")
                return Seq(lambda i: "moe" if (i + 1) % step == 0 else "dense", step, L)
            at = set(self.int_list("moe_layers", layers, L))
            return Seq(lambda i: "moe" if i in at else "dense", L, L)
        if self.has("decoder_sparse_step") or self.has("mlp_only_layers"):
            step = self.count("decoder_sparse_step", 1) or 1
            only = set(self.int_list("mlp_only_layers", self.get("mlp_only_layers", None) or [], L))
            if step == 1 and not only:
                return None
            return Seq(lambda i: "moe" if i not in only and (i + 1) % step == 0 else "dense", L if only else step, L)
        return None

    def _layers(self, data: dict):
        """(mixers, mlps, moe): Seqs of per-layer specs (None = the model's default) and the moe block."""
        L = data["num_layers"]
        if self.model_type == "nemotron_h":
            return self._nemotron_layers(data, L)
        mixers = self._mixers(L)
        moe = self._moe()
        mlps = self._mlps(L, moe)
        if moe is not None and self.model_type == "llama4_text":
            data["ffn_hidden_size"] = self.count("intermediate_size_mlp")  # dense layers' width (Llama4TextMLP)
            moe["expert_ffn_hidden_size"] = self.count("intermediate_size")  # experts' and the shared expert's
        return mixers, mlps, moe

    def _nemotron_layers(self, data: dict, L: int):
        """Nemotron-H: one block a character, each its one mixer and one pre-norm (NemotronHBlock)."""
        if not self._nemotron_pattern_given():
            raise PlannerError(f"{self.path}: field `{self.prefix}hybrid_override_pattern` is missing",
                               "a Nemotron-H config says its blocks with hybrid_override_pattern (M Mamba-2, "
                               "* attention, - MLP, E MoE)")
        blocks = self._nemotron_blocks()
        self._no_window("Nemotron-H")
        moe = self._moe() if "E" in blocks else None
        if "E" not in blocks:
            for k in ("n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
                      "moe_shared_expert_intermediate_size"):
                if k in self.cfg:
                    self.used.add(k)
        table = hybrid_block_table(self._mamba2() if "M" in blocks else None, self._attn())
        return (*hybrid_block_seqs(blocks, table), moe)

    def _pattern(self, data: dict, mixers, mlps) -> None:
        """layer_kinds + layer_pattern, unless every layer has the default mixer and the MLPs follow
        the moe block's rule (then the model stays uniform, as before layer kinds)."""
        if mixers is None and mlps is None:
            return
        L = data["num_layers"]
        moe = data.get("moe")
        if mlps is None and moe is not None:  # the DeepSeek rule, spelled out per layer
            k, f = moe.get("first_k_dense", 0), moe.get("layer_freq", 1)
            mlps = Seq(lambda i: "moe" if i >= k and i % f == 0 else "dense", L if k else f, L)
        if moe is not None:
            moe.pop("first_k_dense", None)
            moe.pop("layer_freq", None)
        data["layer_kinds"], data["layer_pattern"] = layer_kinds_of(mixers, mlps, L)

    def _check_unread(self) -> None:
        self._check_keys(self.cfg, self.prefix, lambda k: k in self.used or k in HF_NO_COST)
        if self.prefix:
            self._check_keys(self.outer, "", lambda k: k in _OUTER_KEYS or k in HF_NO_COST)

    def _check_keys(self, cfg: dict, prefix: str, known) -> None:
        for key in cfg:
            if known(key):
                continue
            if key in HF_MUST_BE_OFF:
                if not cfg[key]:
                    continue
                raise PlannerError(f"{self.path}: field `{prefix}{key}`: {str(cfg[key])[:40]}: planner plans "
                                   "decoder-only language models", "give a decoder-only model's config.json")
            raise PlannerError(
                f"{self.path}: field `{prefix}{key}`: not understood, and it may change the architecture "
                f"(model_type {self.model_type!r})",
                "planner reads the keys documented in planner/hf_config.py and accepts those of HF_NO_COST; "
                "write a model YAML (see `planner schema model`) for this architecture")


def _mixer_name(m) -> str:
    if m is None:
        return "attention"
    k = m["kind"]
    if k == "global":
        return "global" + ("_nope" if m.get("position") == "nope" else "") + ("_gated" if m.get("output_gate") else "")
    if k == "sliding":
        return f"sliding{m['window']}"
    if k == "chunked":
        return f"chunked{m['chunk']}" + ("_nope" if m.get("position") == "nope" else "")
    return {"gated_deltanet": "gdn", "mamba2": "mamba2", "mamba1": "mamba", "none": "nomixer"}.get(k, k)


def _mlp_name(m) -> str:
    if m is None:
        return ""
    return {"moe": "moe", "dense": "dense", "none": "nomlp"}[m["kind"]]


def read(cfg: Any, path: str) -> tuple[dict, list[str]]:
    """(ModelSpec data, assumed lines) of a transformers config.json."""
    if not isinstance(cfg, dict):
        raise PlannerError(f"{path}: expected a JSON object",
                          "give a Hugging Face config.json: one object of the model's fields ({\"model_type\": ..., ...})")
    r = Reader(cfg, path)
    data = r.data()
    return data, r.assumed
