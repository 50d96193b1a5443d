"""Megatron-Bridge's MoE recipes (issue 22, beyond the Llama recipes): their ConfigContainer values, the reader's
MoE part (moe_job: the overrides' MoE settings into the job) and the writer's (moe_overrides: the plan's MoE settings
as overrides). megatron_bridge.py holds the recipe table (RECIPES, which takes MOE_RECIPES) and the launch parsing;
export.py _megatron_bridge the rest of the writer.

Transcribed at NVIDIA-NeMo/Megatron-Bridge @dc805f5cf over Megatron-Core 905c0e386:

- recipes/deepseek/deepseek_v3.py deepseek_v3_pretrain_config l. 52-198 (TP 2, PP 16, EP 64, ETP 1, SP, 4,096
  tokens, MTP 1, the (16, 1) pipeline layout of set_deepseek_v3_pipeline_model_parallel_layout l. 29-49, the alltoall
  dispatcher with the hybridep flex backend l. 105-107 applied by apply_flex_dispatcher_backend l. 196, global batch
  4,096, micro-batch 1, 1,000,000 iterations, selective recompute l. 138-141, bf16 MixedPrecisionConfig without fp32
  gradient reduction l. 146-152, the precision-aware optimizer with bf16 main gradients and Adam moments l. 161-165,
  CommOverlapConfig(tp_comm_overlap=False) without the EP overlap l. 168-172, ddp l. 182-188) and
  deepseek_v3_pretrain_config_32nodes l. 201-340 (PP 8, EP 32, full uniform recompute of 1 layer l. 288-290, the
  (8, 1) layout), both building the model of AutoBridge.from_hf_pretrained("deepseek-ai/DeepSeek-V3") (l. 60, 210).
- The model provider: models/deepseek/deepseek_v3_bridge.py provider_bridge l. 48-95 over the Hugging Face config
  (models/conversion/model_bridge.py CONFIG_MAPPING l. 251-292: num_hidden_layers 61, hidden_size 7168,
  intermediate_size 18432, 128 heads, vocab 129280, n_routed_experts 256, num_experts_per_tok 8,
  moe_intermediate_size 2048, n_group 8, topk_group 4, scoring_func sigmoid, the MLA ranks q 1536 / kv 512, qk nope
  128 / rope 64, v 128), with moe_layer_freq [0]*3 + [1]*58 (l. 87-89), one shared expert of 2048
  (moe_shared_expert_intermediate_size = moe_intermediate_size x n_shared_experts, l. 90), RMSNorm, SwiGLU, untied,
  qk_layernorm (the MLA latents' norms), expert bias, router pre-softmax, router dtype fp32, seq_aux_loss with
  coefficient 1e-4, grouped GEMM and the permute fusion, no RoPE fusion (l. 53-79): the shape of model_zoo
  deepseek-v3.yaml field for field (its rope_scaling yarn factor 40 as the recipe's rotary_scaling_factor 40,
  l. 88-92). The provider leaves mtp_num_layers None (l. 93); the recipe sets 1 (l. 84): the job's mtp_layers.

- recipes/qwen/qwen3_moe.py qwen3_30b_a3b_pretrain_config l. 26-130 and qwen3_235b_a22b_pretrain_config l. 133-243
  (_qwen3 below), their models AutoBridge.from_hf_pretrained("Qwen/Qwen3-30B-A3B" / "Qwen/Qwen3-235B-A22B") through
  models/qwen/qwen3_moe_bridge.py provider_bridge l. 43-63: the shapes of model_zoo qwen3-30b-a3b.yaml and
  qwen3-235b-a22b.yaml field for field (_qwen3_shape).

- recipes/gpt_oss/gpt_oss.py gpt_oss_20b_pretrain_config l. 33-151 and gpt_oss_120b_pretrain_config l. 154-262
  (_gpt_oss below: TP 2, PP 4, EP 4 / 16, ETP 1, SP, 4,096 tokens, cp_comm_type a2a l. 66 / 187, no account_for_*,
  calculate_per_token_loss l. 73 / 193, alltoall with deepep named but not applied (the recipes never call
  apply_flex_dispatcher_backend: Recipe.applies_flex False), global batch 512, micro-batch 1, 1,000,000 iterations,
  no recompute, cross_entropy_fusion_impl native l. 105 / 225, fp32 optimizer states, no CommOverlapConfig,
  ddp no_shard with the distributed optimizer and average_in_collective False l. 139-146 / 250-257), their models
  AutoBridge.from_hf_pretrained("openai/gpt-oss-20b" / "openai/gpt-oss-120b") through models/gpt_oss/gpt_oss_bridge.py
  provider_bridge l. 65-119 (GPTOSSProvider, gpt_oss_provider.py l. 38-90) over the Hugging Face config, compared
  with model_zoo gpt-oss-20b.yaml / gpt-oss-120b.yaml field by field (_gpt_oss_shape): 24 / 36 layers, hidden 2,880,
  the experts' width moe_ffn_hidden_size = intermediate_size 2,880 (l. 100), 64 heads of kv_channels 64 with 8 query
  groups, vocab 201,088, untied (l. 73), RMSNorm (l. 69), gated (l. 70), add_bias_linear True (l. 71: the QKV, output,
  expert and router linears biased, Megatron-Core 905c0e386 attention.py l. 1287 `add_bias_linear or add_qkv_bias`,
  moe/router.py l. 61-66), 32 / 128 experts top-4 (provider l. 69, 97-98, 105-106) with a softmax router after the
  top-k (moe_router_pre_softmax False l. 76), no shared expert, every layer MoE, no expert bias, no balancing loss
  (moe_router_load_balancing_type "none" l. 80); YaRN factor 32 over 4,096 with beta_fast 32, beta_slow 1, no
  rounding of the correction range (= the config's truncate false), mscale None (l. 102-109): the catalog's
  rope_yarn_params and its attention factor 0.1 ln 32 + 1 (Megatron-Core _yarn_get_concentration_factor), rotary base
  150,000 (gpt_oss_provider.py l. 60); the window: window_size (sliding_window - 1, 0) = (127, 0), 128 keys with the
  query's own, on the layers with layer_number % window_attn_skip_freq 2 != 0 (l. 96-97; Megatron-Core
  transformer/utils.py @905c0e386 is_layer_window_attention l. 453-464, 1-based): layers 0, 2, ... windowed, 1, 3, ...
  full, the catalog's layer_pattern [sliding, full] (ModelSpec.layer_windows, compared as the Megatron reader
  compares --window-size / --window-attn-skip-freq); the SwiGLU clamp activation_func_clamp_value 7.0 (l. 92: the
  catalog's activation_clamp 7.0, whose kernels the stack prices) with quick_gelu and glu_linear_offset 1.0 (l. 91-93:
  x sigmoid(1.702 x) (up + 1), the Hugging Face GptOssExperts' alpha 1.702 and +1: elementwise inside the activation
  kernel, no FLOPs or bytes of its own priced). Not priced, listed on every read (cp_job): the learnable
  softmax (softmax_type "learnable" l. 95: one sink logit a head a layer, 64 x 24 = 1,536 / 2,304 parameters, and
  Transformer Engine's sink attention kernel's speed) and the per-token loss (below).

- recipes/qwen/qwen3_next.py qwen3_next_80b_a3b_pretrain_config l. 27-142 (_qwen3_next, _qwen3_next_shape below:
  TP 1, PP 4, EP 8, MTP 1, deepep, selective recompute of layernorm, moe and moe_act), its model
  AutoBridge.from_hf_pretrained("Qwen/Qwen3-Next-80B-A3B-Instruct") through models/qwen/qwen3_next_bridge.py
  provider_bridge l. 50-92: the shape of model_zoo qwen3-next-80b-a3b.yaml field for field, its per-layer Gated
  DeltaNet and gated attention layers among the fields (ModelSpec.layer_mixers). It reads as it ships, its
  recompute module "moe" (the whole MoE block checkpointed) priced by planner/recompute_modules.py; context
  parallelism on its Gated DeltaNet layers is refused (gdn_job).

- recipes/deepseek/deepseek_v2.py deepseek_v2_lite_pretrain_config l. 24-139 and deepseek_v2_pretrain_config
  l. 142-257 (_dsv2, _dsv2_shape below: TP 1, PP 1 / 4, EP 8 / 32, full recompute, alltoall: no
  apply_flex_dispatcher_backend call), their models AutoBridge.from_hf_pretrained("deepseek-ai/DeepSeek-V2-Lite" /
  "deepseek-ai/DeepSeek-V2") through models/deepseek/deepseek_v2_bridge.py provider_bridge l. 44-85: the shapes of
  model_zoo deepseek-v2-lite.yaml and deepseek-v2.yaml (added for this, with their sources) field for field.

Not transcribed (refused by --recipe by name, NOT_TRANSCRIBED; the writer refuses their models): qwen3_next.py's SFT
and PEFT recipes; Llama 4 (no recipe at the pin or HEAD: NO_LLAMA4); gpt_oss.py's SFT and PEFT recipes (the planner
prices pre-training; its fp8 current-scaling and MXFP8 pre-training variants, l. 265-268 and 824-827, are read); llama3.py's SFT and PEFT recipes (_sft_common, _peft_common's LoRA:
refused by name with why, NOT_TRANSCRIBED).
"""

from __future__ import annotations

import math
from typing import Optional

from ..errors import PlannerError
from .spelling import hydra_value as _v
from .report import listed

DSV3 = "src/megatron/bridge/recipes/deepseek/deepseek_v3.py"
DSV3_HF = "deepseek-ai/DeepSeek-V3"
FLEX = "src/megatron/bridge/training/flex_dispatcher_backend.py"

# the model_zoo fields a DeepSeek-V3 recipe's provider fixes (above): recipe_for and the reader match the model by them
DSV3_SHAPE = {
    "num_layers": 61, "hidden_size": 7168, "ffn_hidden_size": 18432, "num_attention_heads": 128, "vocab_size": 129280,
    "tied_embeddings": False, "gated_mlp": True, "norm": "rmsnorm",
    "mla.q_lora_rank": 1536, "mla.kv_lora_rank": 512, "mla.qk_rope_head_dim": 64, "mla.qk_nope_head_dim": 128,
    "mla.v_head_dim": 128,
    "moe.num_experts": 256, "moe.top_k": 8, "moe.expert_ffn_hidden_size": 2048, "moe.num_shared_experts": 1,
    "moe.first_k_dense": 3, "moe.router": "sigmoid", "moe.expert_score_bias": True, "moe.expert_groups": 8,
    "moe.groups_per_token": 4,
}


def layout_text(chunks: list[int], mtp: int) -> str:
    """A layout's Megatron-Core string (pipeline_parallel_layer_layout.py @905c0e386 from_str: 'E' embedding, 't' a
    decoder layer, 'm' an MTP layer, 'L' the loss, '|' between chunks), which TransformerConfig takes as a str or as
    the recipes' list of lists (transformer_config.py l. 1449-1461)."""
    def part(n):
        return "" if n == 0 else ("t" if n == 1 else f"t*{n}")

    out = [part(n) for n in chunks]
    out[0] = "E" + out[0]
    out[-1] += ("m" if mtp == 1 else f"m*{mtp}" if mtp else "") + "L"
    return "|".join(out)


# the MoE keys of a MoE recipe's ConfigContainer (Megatron-Core 905c0e386 TransformerConfig / OptimizerConfig fields,
# Bridge's GPTModelProvider and DistributedInitConfig), with the DeepSeek-V3 provider's and recipe's values (above);
# each override of one is read by moe_job
def _dsv3(pp: int, ep: int, chunks: list[int], recompute: dict) -> dict:
    return {
        "model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1,
        "model.expert_model_parallel_size": ep, "model.expert_tensor_parallel_size": 1, "model.sequence_parallel": True,
        "model.seq_length": 4096, "dataset.sequence_length": 4096,
        "model.mtp_num_layers": 1, "model.mtp_loss_scaling_factor": 0.1,
        "model.pipeline_model_parallel_layout": layout_text(chunks, 1),
        "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
        # l. 105-107; apply_flex_dispatcher_backend (l. 196) turns alltoall into flex where the GPU takes hybridep
        "model.moe_token_dispatcher_type": "alltoall", "model.moe_flex_dispatcher_backend": "hybridep",
        "model.moe_hybridep_num_sms": 16, "model.moe_shared_expert_overlap": True,
        "train.global_batch_size": 4096, "train.micro_batch_size": 1, "train.train_iters": 1_000_000,
        "model.moe_router_fusion": False, "model.moe_permute_fusion": True, "model.moe_grouped_gemm": True,
        "model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": "te",
        **recompute,
        "model.moe_router_padding_for_fp8": False, "model.moe_router_force_load_balancing": False,
        # the provider's (deepseek_v3_bridge.py l. 62-72)
        "model.moe_router_pre_softmax": True, "model.moe_router_load_balancing_type": "seq_aux_loss",
        "model.moe_router_enable_expert_bias": True, "model.moe_router_dtype": "fp32", "model.moe_aux_loss_coeff": 0.0001,
        "model.apply_rope_fusion": False,
        # Megatron-Core 905c0e386 transformer_config.py defaults the recipe leaves: no z-loss, dropless
        "model.moe_z_loss_coeff": None, "model.moe_expert_capacity_factor": None,
        "model.moe_pad_expert_input_to_capacity": False, "model.overlap_moe_expert_parallel_comm": False,
        "dist.enable_megatron_core_experimental": False,
        "optimizer.use_precision_aware_optimizer": True, "optimizer.main_params_dtype": "float32",
        "optimizer.main_grads_dtype": "bfloat16", "optimizer.exp_avg_dtype": "bfloat16",
        "optimizer.exp_avg_sq_dtype": "bfloat16",
    }


_SELECTIVE = {"model.recompute_granularity": "selective", "model.recompute_modules": None,
              "model.recompute_method": None, "model.recompute_num_layers": None}
_FULL1 = {"model.recompute_granularity": "full", "model.recompute_method": "uniform", "model.recompute_num_layers": 1,
          "model.recompute_modules": None}
_NONE = {"model.recompute_granularity": None, "model.recompute_modules": None,
         "model.recompute_method": None, "model.recompute_num_layers": None}

QWEN3_MOE = "src/megatron/bridge/recipes/qwen/qwen3_moe.py"


def _qwen3(tp, pp, cp, ep, micro, recompute, account_for: bool) -> dict:
    """qwen3_moe.py's pre-training recipes over recipes/common.py _pretrain_common l. 60-93 (train_iters 300,000, global
    batch 32, micro-batch 2, ddp.data_parallel_sharding_strategy optim_grads_params, comm_overlap None, mixed_precision
    'bf16_mixed'), the provider models/qwen/qwen3_moe_bridge.py provider_bridge l. 43-63 (grouped GEMM, aux_loss with
    coefficient 1e-3, no pre-softmax, alltoall, the permute fusion) over GPTModelProvider (models/gpt_provider.py
    l. 184-186: masked softmax, cross-entropy and gradient-accumulation fusions) and Megatron-Core 905c0e386's
    TransformerConfig defaults (transformer_config.py l. 423, 437, 440: no bias-activation, bias-dropout or RoPE
    fusion; l. 701 router dtype None; l. 706 no expert bias)."""
    return {
        "model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": cp,
        "model.expert_model_parallel_size": ep, "model.expert_tensor_parallel_size": 1, "model.sequence_parallel": True,
        "model.seq_length": 4096, "dataset.sequence_length": 4096,
        "model.mtp_num_layers": None, "model.mtp_loss_scaling_factor": 0.1,
        "model.pipeline_model_parallel_layout": None,
        "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
        "model.account_for_embedding_in_pipeline_split": account_for, "model.account_for_loss_in_pipeline_split": account_for,
        "model.moe_token_dispatcher_type": "alltoall", "model.moe_flex_dispatcher_backend": "deepep",
        "model.moe_hybridep_num_sms": 16, "model.moe_shared_expert_overlap": False,
        "train.global_batch_size": 32, "train.micro_batch_size": micro, "train.train_iters": 300000,
        "model.moe_router_fusion": False, "model.moe_permute_fusion": True, "model.moe_grouped_gemm": True,
        "model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": "te",
        **recompute,
        "model.moe_router_padding_for_fp8": False, "model.moe_router_force_load_balancing": False,
        "model.moe_router_pre_softmax": False, "model.moe_router_load_balancing_type": "aux_loss",
        "model.moe_router_enable_expert_bias": False, "model.moe_router_dtype": None, "model.moe_aux_loss_coeff": 0.001,
        "model.apply_rope_fusion": False, "model.bias_activation_fusion": False, "model.bias_dropout_fusion": False,
        "model.moe_z_loss_coeff": None, "model.moe_expert_capacity_factor": None,
        "model.moe_pad_expert_input_to_capacity": False, "model.overlap_moe_expert_parallel_comm": False,
        "dist.enable_megatron_core_experimental": False,
        "ddp.data_parallel_sharding_strategy": "optim_grads_params",
        "optimizer.use_precision_aware_optimizer": False, "optimizer.main_params_dtype": "float32",
        "optimizer.main_grads_dtype": "float32", "optimizer.exp_avg_dtype": "float32", "optimizer.exp_avg_sq_dtype": "float32",
    }


def _qwen3_shape(layers, hidden, ffn, heads, expert_ffn) -> dict:
    # Qwen/Qwen3-*-A*B config.json (model_zoo qwen3-30b-a3b.yaml, qwen3-235b-a22b.yaml, their sources): 4 KV heads of
    # 128, vocab 151936, untied, rope_theta 1e6, q/k norms (qwen3_moe_bridge.py l. 53 qk_layernorm), 128 experts top-8
    # with a softmax router, no shared expert, every layer MoE (decoder_sparse_step 1)
    return {"num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": ffn, "num_attention_heads": heads,
            "kv_heads": 4, "dhead": 128, "vocab_size": 151936, "tied_embeddings": False, "gated_mlp": True,
            "norm": "rmsnorm", "qk_norm": True, "rope_theta": 1000000.0, "mla": None,
            "moe.num_experts": 128, "moe.top_k": 8, "moe.expert_ffn_hidden_size": expert_ffn, "moe.num_shared_experts": 0,
            "moe.first_k_dense": 0, "moe.router": "softmax", "moe.expert_score_bias": False}


QWEN3_NEXT = "src/megatron/bridge/recipes/qwen/qwen3_next.py"
QWEN3_NEXT_HF = "Qwen/Qwen3-Next-80B-A3B-Instruct"
# the recipe's selective recompute modules (qwen3_next.py l. 95-96): Megatron-Core's "moe" module (the whole MoE
# block checkpointed from its input and re-run in the backward, dispatch and combine included: moe_layer.py @905c0e386
# l. 494-553) priced with the others (planner/recompute_modules.py), so the recipe reads as it ships
QWEN3_NEXT_RECOMPUTE = ["layernorm", "moe", "moe_act"]


def _qwen3_next() -> dict:
    """qwen3_next.py qwen3_next_80b_a3b_pretrain_config l. 27-142 over recipes/common.py _pretrain_common l. 60-130
    (train_iters 300,000, global batch 32, micro-batch 2 l. 64-67; ddp.data_parallel_sharding_strategy
    optim_grads_params l. 86; dataset seq_length 4,096 l. 95; the HuggingFaceTokenizer l. 111-114; comm_overlap None
    l. 127; mixed_precision 'bf16_mixed' l. 129): TP 1, PP 4, no layout, no VP, CP 1, EP 8, ETP 1, no SP, 4,096
    tokens (l. 49-58), MTP 1 (l. 62-63), alltoall with the deepep flex backend (l. 67-69) applied by
    apply_flex_dispatcher_backend (l. 140), TE, no CUDA graph (l. 79-84), no router fusion, the permute fusion,
    grouped GEMM, native cross-entropy fusion (l. 87-92), selective recompute of layernorm, moe, moe_act (l. 95-98),
    no fp8 router padding (l. 109), fp32 optimizer states without the precision-aware optimizer (l. 112-116), no
    shared-expert overlap (l. 123), both DDP overlaps with the distributed optimizer, no Megatron-FSDP (l. 131-135), no
    forced balancing (l. 138). The provider (models/qwen/qwen_provider.py Qwen3NextModelProvider l. 434-466 over
    Qwen3MoEModelProvider l. 364-397): router dtype fp32 (l. 453), global_aux_loss balancing (l. 454) with coefficient
    1e-3 (l. 392), no pre-softmax (l. 394), alltoall, the permute fusion (l. 396-397); GPTModelProvider's and
    Megatron-Core 905c0e386's TransformerConfig defaults as for Qwen3 MoE (_qwen3: no bias-activation, bias-dropout or
    RoPE fusion, no expert bias, no z-loss, dropless)."""
    return dict(_qwen3(1, 4, 1, 8, 2, {"model.recompute_granularity": "selective",
                                       "model.recompute_modules": list(QWEN3_NEXT_RECOMPUTE),
                                       "model.recompute_method": None, "model.recompute_num_layers": None}, False),
                **{"model.sequence_parallel": False, "model.mtp_num_layers": 1, "model.cross_entropy_fusion_impl": "native",
                   "model.moe_router_load_balancing_type": "global_aux_loss", "model.moe_router_dtype": "fp32"})


def _qwen3_next_shape() -> dict:
    """The model Qwen3NextBridge.provider_bridge builds (models/qwen/qwen3_next_bridge.py @dc805f5cf l. 50-92) from
    the Hugging Face config of Qwen/Qwen3-Next-80B-A3B-Instruct (the values of Qwen3NextModelProvider80B_A3B,
    qwen_provider.py l. 470-482, and of model_zoo qwen3-next-80b-a3b.yaml's config.json): 48 layers, hidden 2,048,
    the dense width 5,120 (intermediate_size; no dense layer), 16 heads of kv_channels = head_dim 256 in 2 query groups,
    vocab 151,936, untied (tie_word_embeddings false), RMSNorm (zero-centred, layernorm_zero_centered_gamma l. 77: the
    same parameters and kernels), gated (l. 64), qk_layernorm (l. 73), rotary base 1e7 (l. 66; rotary_percent 0.25,
    l. 81: RoPE on a quarter of each head, priced as a rotary layer, as the catalog entry says); 512 experts top-10 of
    moe_ffn_hidden_size 512 (l. 57-61), one shared expert of 512 with its sigmoid gate (l. 82-83), every layer MoE
    (no moe_layer_freq: Megatron-Core's default 1); the layers: experimental_attention_variant gated_delta_net with
    linear_attention_freq = full_attention_interval 4 (l. 78-80), which Megatron-Core 905c0e386 builds as Gated
    DeltaNet on layer i unless (i + 1) % 4 == 0 (models/gpt/experimental_attention_variant_module_specs.py
    get_linear_attention_pattern l. 316-327, the block spec l. 190-234), its heads 16 key / 32 value of 128 and
    128, conv kernel 4 (l. 84-88), run by fla's chunk_gated_delta_rule (ssm/gated_delta_net.py l. 40-41, 386: the
    catalog's chunk 64), and softmax attention with attention_output_gate (l. 78) on the others: the catalog's
    layer_pattern [linear x 3, attention] (ModelSpec.layer_mixers). The router: softmax after the top-k (no
    pre-softmax), which normalises the k scores (the config's norm_topk_prob true), no expert bias."""
    from ..schema import GatedDeltaNet, GlobalAttention, LayerKindSpec, layer_mixers_text

    gdn = LayerKindSpec(mixer=GatedDeltaNet(kind="gated_deltanet", num_key_heads=16, num_value_heads=32,
                                            key_head_dim=128, value_head_dim=128, conv_kernel=4))
    gated = LayerKindSpec(mixer=GlobalAttention(output_gate=True))
    return {"num_layers": 48, "hidden_size": 2048, "ffn_hidden_size": 5120, "num_attention_heads": 16, "kv_heads": 2,
            "dhead": 256, "vocab_size": 151936, "tied_embeddings": False, "gated_mlp": True, "norm": "rmsnorm",
            "qk_norm": True, "rope_theta": 10000000.0, "mla": None,
            "moe.num_experts": 512, "moe.top_k": 10, "moe.expert_ffn_hidden_size": 512, "moe.num_shared_experts": 1,
            "moe.shared_expert_ffn_hidden_size": 512, "moe.shared_expert_gate": True, "moe.first_k_dense": 0,
            "moe.layer_freq": 1, "moe.router": "softmax", "moe.route_norm": True, "moe.expert_score_bias": False,
            # Megatron-Core's rule, layer by layer (0-based i: softmax attention iff (i + 1) % 4 == 0)
            "layer_mixers": layer_mixers_text([gated if (i + 1) % 4 == 0 else gdn for i in range(48)])}


def gdn_job(spec, job: dict, where: str) -> None:
    """What Megatron-Core 905c0e386 runs of a model with Gated DeltaNet layers (the Qwen3-Next recipe's) that the
    planner's job cannot take: context
    parallelism, which its GatedDeltaNet does not implement (ssm/gated_delta_net.py: the context-parallel module's
    import commented out, l. 37, and forward runs the rank's tokens as the whole sequence, l. 288-289), refused."""
    from ..schema import GatedDeltaNet

    if job["cp"] > 1 and any(isinstance(k.mixer, GatedDeltaNet) for k in spec.layer_kinds.values()):
        raise PlannerError(f"{where}model.context_parallel_size={job['cp']} on {spec.name}'s Gated DeltaNet layers: Megatron-Core "
                           "905c0e386 (Bridge's pin) has no context parallelism in GatedDeltaNet (ssm/gated_delta_net.py "
                           "l. 37: its context-parallel module not imported; l. 288-289 the rank's tokens taken as the "
                           "sequence), so each rank's recurrence would start from zero mid-sequence: not a run the "
                           "planner prices", "use model.context_parallel_size=1")


DSV2 = "src/megatron/bridge/recipes/deepseek/deepseek_v2.py"


def _dsv2(pp: int, ep: int) -> dict:
    """deepseek_v2.py's two pre-training recipes (deepseek_v2_lite_pretrain_config l. 24-139, deepseek_v2_pretrain_config
    l. 142-257: the same lines but PP 1 / 4, EP 8 / 32) over recipes/common.py _pretrain_common (dataset seq_length
    4,096 l. 95, mixed_precision 'bf16_mixed' l. 129): TP 1, no layout, no VP, CP 1, no SP, 4,096 tokens (l. 44-52 /
    162-170; expert_tensor_parallel_size not set: Megatron-Core's None, TP's), alltoall with the deepep backend named
    (l. 56-58 / 174-176) but no apply_flex_dispatcher_backend call (Recipe.applies_flex False: alltoall runs), global
    batch 512, micro-batch 1, 1,000,000 iterations (l. 61-63 / 179-181), TE, no CUDA graph (l. 72-77 / 190-195), no
    router fusion, the permute fusion, grouped GEMM, TE cross-entropy (l. 80-87 / 198-205), full uniform recompute of 1
    layer (l. 90-93 / 208-211), no fp8 router padding (l. 104 / 222), fp32 optimizer states without the precision-aware
    optimizer (l. 107-111 / 225-229), CommOverlapConfig(tp_comm_overlap=False) without the EP overlap or delayed
    weight gradients (l. 114-116 / 232-234), the shared-expert overlap on (l. 117-119 / 235-237: listed as not
    priced), both DDP overlaps with the distributed optimizer, no Megatron-FSDP, no_shard (l. 129-134 / 247-252), no
    forced balancing (l. 137 / 255). The provider (models/deepseek/deepseek_v2_bridge.py provider_bridge l. 44-85 over
    models/conversion/model_bridge.py CONFIG_MAPPING l. 251-293): pre-softmax, alltoall, seq_aux_loss, the shared-
    expert overlap, router dtype fp32, the permute fusion (l. 57-63), no RoPE fusion, the bias-activation and
    bias-dropout fusions, TE cross-entropy, the gradient-accumulation fusion (l. 65-72), make_vocab_size_divisible_by
    3,200 (l. 77); moe_aux_loss_coeff the config's aux_loss_alpha 0.001 (CONFIG_MAPPING l. 278; Bridge's unit test
    asserts it, tests/unit_tests/models/deepseek/test_deepseek_bridges.py l. 120); no expert bias, z-loss or capacity
    factor (Megatron-Core 905c0e386 defaults)."""
    return {
        "model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1,
        "model.expert_model_parallel_size": ep, "model.sequence_parallel": False,
        "model.seq_length": 4096, "dataset.sequence_length": 4096,
        "model.mtp_num_layers": None, "model.mtp_loss_scaling_factor": 0.1,
        "model.pipeline_model_parallel_layout": None,
        "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
        "model.moe_token_dispatcher_type": "alltoall", "model.moe_flex_dispatcher_backend": "deepep",
        "model.moe_hybridep_num_sms": 16, "model.moe_shared_expert_overlap": True,
        "train.global_batch_size": 512, "train.micro_batch_size": 1, "train.train_iters": 1_000_000,
        "model.moe_router_fusion": False, "model.moe_permute_fusion": True, "model.moe_grouped_gemm": True,
        "model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": "te",
        **_FULL1,
        "model.moe_router_padding_for_fp8": False, "model.moe_router_force_load_balancing": False,
        "model.moe_router_pre_softmax": True, "model.moe_router_load_balancing_type": "seq_aux_loss",
        "model.moe_router_enable_expert_bias": False, "model.moe_router_dtype": "fp32", "model.moe_aux_loss_coeff": 0.001,
        "model.apply_rope_fusion": False, "model.bias_activation_fusion": True, "model.bias_dropout_fusion": True,
        "model.make_vocab_size_divisible_by": 3200,
        "model.moe_z_loss_coeff": None, "model.moe_expert_capacity_factor": None,
        "model.moe_pad_expert_input_to_capacity": False, "model.overlap_moe_expert_parallel_comm": False,
        "dist.enable_megatron_core_experimental": False,
        "ddp.data_parallel_sharding_strategy": "no_shard",
        "optimizer.use_precision_aware_optimizer": False, "optimizer.main_params_dtype": "float32",
        "optimizer.main_grads_dtype": "float32", "optimizer.exp_avg_dtype": "float32", "optimizer.exp_avg_sq_dtype": "float32",
    }


def _dsv2_shape(lite: bool) -> dict:
    """The model DeepSeekV2Bridge.provider_bridge builds (deepseek_v2_bridge.py @dc805f5cf l. 44-85: MLA,
    qk_layernorm (the latents' norms), RMSNorm, SwiGLU, untied, no linear bias, moe_layer_freq [0] x
    first_k_dense_replace + [1] x the rest l. 80-82, one shared MLP of moe_intermediate_size x n_shared_experts l. 83)
    from the Hugging Face config through CONFIG_MAPPING (model_bridge.py l. 251-293), as model_zoo deepseek-v2.yaml /
    deepseek-v2-lite.yaml state it field by field: DeepSeek-V2 (deepseek-ai/DeepSeek-V2 config.json, which Bridge's
    test_deepseek_bridges.py l. 36-93 copies: 60 layers, hidden 5,120, intermediate 12,288, 128 heads, q / kv latents
    1,536 / 512, qk nope / rope 128 / 64, v 128, 160 experts top-6 of 1,536, 2 shared, first layer dense, softmax
    scores, n_group 8, topk_group 3, vocab 102,400) or DeepSeek-V2-Lite (27 layers, hidden 2,048, intermediate 10,944,
    16 heads, no query latent, kv latent 512, 64 experts top-6 of 1,408, 2 shared, first layer dense, one expert
    group: DeepSeekV2LiteModelProvider, deepseek_provider.py l. 92-115, and Megatron-LM's DeepSeek-V2-Lite.sh give the
    same). The router: pre-softmax over all experts, top-k without renormalisation (moe_router_topk_scaling_factor, the
    config's routed_scaling_factor, scales the k scores: no cost), no expert bias."""
    common = {"vocab_size": 102400, "tied_embeddings": False, "gated_mlp": True, "norm": "rmsnorm",
              "mla.kv_lora_rank": 512, "mla.qk_rope_head_dim": 64, "mla.qk_nope_head_dim": 128, "mla.v_head_dim": 128,
              "moe.top_k": 6, "moe.num_shared_experts": 2, "moe.first_k_dense": 1, "moe.layer_freq": 1,
              "moe.router": "softmax", "moe.route_norm": False, "moe.expert_score_bias": False}
    if lite:
        return {"num_layers": 27, "hidden_size": 2048, "ffn_hidden_size": 10944, "num_attention_heads": 16, **common,
                "mla.q_lora_rank": None, "moe.num_experts": 64, "moe.expert_ffn_hidden_size": 1408,
                "moe.expert_groups": None, "moe.groups_per_token": None}
    return {"num_layers": 60, "hidden_size": 5120, "ffn_hidden_size": 12288, "num_attention_heads": 128, **common,
            "mla.q_lora_rank": 1536, "moe.num_experts": 160, "moe.expert_ffn_hidden_size": 1536,
            "moe.expert_groups": 8, "moe.groups_per_token": 3}


GPT_OSS = "src/megatron/bridge/recipes/gpt_oss/gpt_oss.py"


def _gpt_oss(ep: int) -> dict:
    """gpt_oss.py's pre-training recipes (l. 33-151, 154-262: the same lines but EP 4 / 16) over recipes/common.py
    _pretrain_common (mixed_precision "bf16_mixed", comm_overlap None), the provider models/gpt_oss/gpt_oss_bridge.py
    provider_bridge l. 65-119 (grouped GEMM, alltoall, the permute fusion, no pre-softmax, balancing "none",
    bias_activation_fusion True, bias_dropout_fusion False) and Megatron-Core 905c0e386's TransformerConfig defaults
    the recipe leaves (transformer_config.py l. 440 no RoPE fusion, l. 701 router dtype None, l. 727
    moe_aux_loss_coeff 0.0; no expert bias, no z-loss, dropless)."""
    return {
        "model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": 4,
        "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1,
        "model.expert_model_parallel_size": ep, "model.expert_tensor_parallel_size": 1, "model.sequence_parallel": True,
        "model.seq_length": 4096, "dataset.sequence_length": 4096,
        "model.cp_comm_type": "a2a", "model.calculate_per_token_loss": True,
        "model.mtp_num_layers": None, "model.mtp_loss_scaling_factor": 0.1,
        "model.pipeline_model_parallel_layout": None,
        "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
        "model.account_for_embedding_in_pipeline_split": False, "model.account_for_loss_in_pipeline_split": False,
        "model.moe_token_dispatcher_type": "alltoall", "model.moe_flex_dispatcher_backend": "deepep",
        "model.moe_hybridep_num_sms": 16, "model.moe_shared_expert_overlap": False,
        "train.global_batch_size": 512, "train.micro_batch_size": 1, "train.train_iters": 1_000_000,
        "model.moe_router_fusion": False, "model.moe_permute_fusion": True, "model.moe_grouped_gemm": True,
        "model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": "native",
        **_NONE,
        "model.moe_router_padding_for_fp8": False, "model.moe_router_force_load_balancing": False,
        "model.moe_router_pre_softmax": False, "model.moe_router_load_balancing_type": "none",
        "model.moe_router_enable_expert_bias": False, "model.moe_router_dtype": None, "model.moe_aux_loss_coeff": 0.0,
        "model.apply_rope_fusion": False, "model.bias_activation_fusion": True, "model.bias_dropout_fusion": False,
        "model.moe_z_loss_coeff": None, "model.moe_expert_capacity_factor": None,
        "model.moe_pad_expert_input_to_capacity": False, "model.overlap_moe_expert_parallel_comm": False,
        "dist.enable_megatron_core_experimental": False,
        "ddp.data_parallel_sharding_strategy": "no_shard", "model.softmax_type": "learnable",
        "optimizer.use_precision_aware_optimizer": False, "optimizer.main_params_dtype": "float32",
        "optimizer.main_grads_dtype": "float32", "optimizer.exp_avg_dtype": "float32", "optimizer.exp_avg_sq_dtype": "float32",
    }


def _gpt_oss_shape(layers: int, experts: int) -> dict:
    # the provider's model (module docstring) as model_zoo gpt-oss-20b.yaml / gpt-oss-120b.yaml's fields; num_layers
    # first so that a model of other depth fails before its per-layer windows are built, which come last
    return {"num_layers": layers, "hidden_size": 2880, "ffn_hidden_size": 2880, "num_attention_heads": 64,
            "kv_heads": 8, "dhead": 64, "vocab_size": 201088, "tied_embeddings": False, "gated_mlp": True,
            "norm": "rmsnorm", "linear_bias": True, "activation_clamp": 7.0, "rope_theta": 150000.0, "mla": None,
            "yarn_rope_scaling": (32.0, 4096, 32.0, 1.0, False, round(0.1 * math.log(32.0) + 1.0, 12)),
            "moe.num_experts": experts, "moe.top_k": 4, "moe.expert_ffn_hidden_size": None,
            "moe.num_shared_experts": 0, "moe.first_k_dense": 0, "moe.router": "softmax", "moe.router_linear_bias": True,
            "moe.expert_score_bias": False,
            "layer_windows": (128, 0) * (layers // 2)}


# the softmax types (TransformerConfig @905c0e386 l. 134): vanilla is what the planner prices; the other two add one
# learned (learnable) or fixed (off-by-one) logit a head to the softmax's denominator, the attention sinks
SINK_SOFTMAX = ("learnable", "off-by-one")
PER_TOKEN_LOSS = ("the per-token loss: finalize_model_grads (Megatron-Core 905c0e386 distributed/finalize_model_grads.py "
                  "l. 485-501) broadcasts the token count over the pipeline, all-reduces it over DP x CP (one element "
                  "each) and scales the gradient buffers by 1 / tokens (one elementwise pass a step): not priced; no "
                  "memory beyond the one-element count")


def gpt_oss_job(cfg: dict, where: str, not_modelled: list) -> None:
    """The gpt-oss recipes' per-token loss and the softmax's sinks, listed as not priced (the recipes whose values
    hold these keys); their model.cp_comm_type a2a (gpt_oss.py l. 66, 187) is every recipe's key (megatron_bridge.py
    COMMON, _cp_job)."""
    if _bool(cfg, "model.calculate_per_token_loss", where):
        not_modelled.append(listed("not_modelled", "model.calculate_per_token_loss", True, PER_TOKEN_LOSS))
    sm = cfg.get("model.softmax_type", "vanilla")
    if sm in SINK_SOFTMAX:
        not_modelled.append(listed("not_modelled", "model.softmax_type", sm, "the attention sinks, gpt_oss_bridge.py "
                                   f"l. 95: one {'learned ' if sm == 'learnable' else ''}logit a head a layer in the "
                                   "softmax's denominator, 64 parameters a layer, and Transformer Engine's sink "
                                   "attention kernel's speed: not priced", str))
    elif sm != "vanilla":
        raise PlannerError(f"{where}model.softmax_type={_v(sm)}", "valid: vanilla, off-by-one, learnable")


# name -> the Recipe fields (megatron_bridge.Recipe, moe=True): the recipe's Hugging Face model, where in its file,
# the model's shape, its ConfigContainer values, its mixed_precision (an object, or the name "bf16_mixed"), its
# CommOverlapConfig
_DSV3_KW = dict(hf_id=DSV3_HF, shape=DSV3_SHAPE, mp_object=True, comm_overlap=True, co_tp=False, file=DSV3,
                mp={"grad_reduce_in_fp32": False})
MOE_RECIPES = {
    "deepseek_v3_pretrain_config": dict(
        _DSV3_KW, lines="l. 52-198 (layout (16, 1) l. 42, dispatcher l. 105-107, mixed_precision l. 146-152, optimizer "
                        "l. 161-165)", values=_dsv3(16, 64, [4] * 15 + [1], _SELECTIVE)),
    "deepseek_v3_pretrain_config_32nodes": dict(
        _DSV3_KW, lines="l. 201-340 (layout (8, 1) l. 40, full recompute l. 288-290)",
        values=_dsv3(8, 32, [8] * 7 + [5], _FULL1)),
    "qwen3_30b_a3b_pretrain_config": dict(
        hf_id="Qwen/Qwen3-30B-A3B", shape=_qwen3_shape(48, 2048, 6144, 32, 768), mp_object=False, comm_overlap=False,
        hf_tokenizer=True, file=QWEN3_MOE, lines="l. 26-130 (TP 4, PP 2, EP 4 l. 44-51, deepep l. 58-59, full recompute l. 83-86)",
        values=_qwen3(4, 2, 1, 4, 2, _FULL1, False)),
    "qwen3_235b_a22b_pretrain_config": dict(
        hf_id="Qwen/Qwen3-235B-A22B", shape=_qwen3_shape(94, 4096, 12288, 64, 1536), mp_object=False,
        comm_overlap=False, file=QWEN3_MOE, hf_tokenizer=True,
        lines="l. 133-243 (TP 4, PP 16, CP 2, EP 8 l. 153-160, account_for_* l. 166-167, micro-batch 1 l. 176)",
        values=_qwen3(4, 16, 2, 8, 1, _NONE, True)),
    "qwen3_next_80b_a3b_pretrain_config": dict(
        hf_id=QWEN3_NEXT_HF, shape=_qwen3_next_shape(), mp_object=False, comm_overlap=False, hf_tokenizer=True,
        file=QWEN3_NEXT, lines="l. 27-142 (TP 1, PP 4, EP 8 l. 49-57, MTP 1 l. 62, deepep l. 67-68, selective recompute "
                               "l. 95-96, flex l. 140)", values=_qwen3_next()),
    "deepseek_v2_lite_pretrain_config": dict(
        hf_id="deepseek-ai/DeepSeek-V2-Lite", shape=_dsv2_shape(True), mp_object=False, comm_overlap=True, co_tp=False,
        file=DSV2, lines="l. 24-139 (TP 1, PP 1, EP 8 l. 44-51, full recompute l. 90-92, comm_overlap l. 114-116)",
        values=_dsv2(1, 8), applies_flex=False),
    "deepseek_v2_pretrain_config": dict(
        hf_id="deepseek-ai/DeepSeek-V2", shape=_dsv2_shape(False), mp_object=False, comm_overlap=True, co_tp=False,
        file=DSV2, lines="l. 142-257 (TP 1, PP 4, EP 32 l. 162-169, full recompute l. 208-210, comm_overlap l. 232-234)",
        values=_dsv2(4, 32), applies_flex=False),
    "gpt_oss_20b_pretrain_config": dict(
        hf_id="openai/gpt-oss-20b", shape=_gpt_oss_shape(24, 32), mp_object=False, comm_overlap=False, file=GPT_OSS,
        lines="l. 33-151 (TP 2, PP 4, EP 4 l. 54-62, cp_comm_type a2a l. 66, per-token loss l. 73)",
        values=_gpt_oss(4), applies_flex=False),
    "gpt_oss_120b_pretrain_config": dict(
        hf_id="openai/gpt-oss-120b", shape=_gpt_oss_shape(36, 128), mp_object=False, comm_overlap=False, file=GPT_OSS,
        lines="l. 154-262 (TP 2, PP 4, EP 16 l. 175-183, cp_comm_type a2a l. 187, per-token loss l. 193)",
        values=_gpt_oss(16), applies_flex=False),
    # the 20B recipe's low-precision variants: gpt_oss_20b_pretrain_config, then _enable_gpt_oss_hopper_fp8_current_
    # scaling (l. 26-30: mixed_precision the name bf16_with_fp8_current_scaling_mixed, model.moe_router_padding_for_fp8
    # True) or _enable_gpt_oss_blackwell_mxfp8 (l. 817-821: mixed_precision get_mixed_precision_config(
    # "bf16_with_mxfp8_mixed"), a MixedPrecisionConfig: e4m3, mxfp8, fp8_param_gather and reuse_grad_buf_for_mxfp8_
    # param_ag True, training/mixed_precision.py l. 241-253; the router padding True)
    "gpt_oss_20b_pretrain_fp8_current_scaling_config": dict(
        hf_id="openai/gpt-oss-20b", shape=_gpt_oss_shape(24, 32), mp_object=False, comm_overlap=False, file=GPT_OSS,
        lines="l. 265-268 (gpt_oss_20b_pretrain_config l. 33-151, then l. 26-30: bf16_with_fp8_current_scaling_mixed, "
              "moe_router_padding_for_fp8)",
        values=dict(_gpt_oss(4), **{"model.moe_router_padding_for_fp8": True}), applies_flex=False,
        mp_name="bf16_with_fp8_current_scaling_mixed"),
    "gpt_oss_20b_pretrain_mxfp8_config": dict(
        hf_id="openai/gpt-oss-20b", shape=_gpt_oss_shape(24, 32), mp_object=True, comm_overlap=False, file=GPT_OSS,
        lines="l. 824-827 (gpt_oss_20b_pretrain_config l. 33-151, then l. 817-821: bf16_with_mxfp8_mixed(), "
              "moe_router_padding_for_fp8)",
        values=dict(_gpt_oss(4), **{"model.moe_router_padding_for_fp8": True}), applies_flex=False,
        mp=dict(fp8="e4m3", fp8_recipe="mxfp8", fp8_param_gather=True, reuse_grad_buf_for_mxfp8_param_ag=True)),
}
# Recipes of Bridge's that the planner does not read, each refused by name with why (megatron_bridge.read): the
# Qwen3-Next SFT / PEFT ones are not pre-training. Checked at NVIDIA-NeMo/Megatron-Bridge @dc805f5cf (and HEAD
# 067f987df: the same recipe functions in recipes/qwen/qwen3_next.py).
NOT_TRANSCRIBED = {
    "qwen3_next_80b_a3b_sft_config": (
        f"{QWEN3_NEXT} l. 145-285: a fine-tuning recipe (_sft_common, SQuAD at 2,048 tokens); the planner reads "
        "the pre-training recipes", "use --recipe qwen3_next_80b_a3b_pretrain_config"),
    "qwen3_next_80b_a3b_peft_config": (
        f"{QWEN3_NEXT} l. 288-305: raises NotImplementedError ('PEFT is not currently supported for Qwen3-Next "
        "models')", "use --recipe qwen3_next_80b_a3b_pretrain_config"),
}
# the Llama fine-tuning recipes (llama3.py @dc805f5cf; recipes/common.py): the SFT ones build _sft_common (l. 135-232:
# full fine-tuning of a pretrained checkpoint on SQuAD's packed sequences), the PEFT ones _peft_common (l. 235-339: a
# LoRA adapter, l. 326, over frozen base weights, which hold no gradients nor optimizer states): the planner prices
# pre-training, every weight trained, so it transcribes neither
_SFT = ("l. {}: a full fine-tuning recipe (recipes/common.py _sft_common l. 135-232: a pretrained checkpoint, SQuAD's "
        "packed sequences); the planner reads the pre-training recipes")
_PEFT = ("l. {}: a PEFT recipe (recipes/common.py _peft_common l. 235-339: a LoRA adapter, l. 326, over frozen base "
         "weights, which hold no gradients or optimizer states); the planner prices every weight trained")
for _name, _line, _why, _base in (
        ("llama32_1b_sft_config", 1203, _SFT, "llama32_1b"), ("llama32_3b_sft_config", 1314, _SFT, "llama32_3b"),
        ("llama3_8b_sft_config", 1423, _SFT, "llama3_8b"), ("llama31_8b_sft_config", 1526, _SFT, "llama31_8b"),
        ("llama3_70b_sft_config", 1629, _SFT, "llama3_70b"), ("llama31_70b_sft_config", 1732, _SFT, "llama31_70b"),
        ("llama31_405b_sft_config", 1835, _SFT, "llama31_405b"),
        ("llama32_1b_peft_config", 1957, _PEFT, "llama32_1b"), ("llama32_3b_peft_config", 2070, _PEFT, "llama32_3b"),
        ("llama3_8b_peft_config", 2183, _PEFT, "llama3_8b"), ("llama31_8b_peft_config", 2299, _PEFT, "llama31_8b"),
        ("llama3_70b_peft_config", 2415, _PEFT, "llama3_70b"), ("llama31_70b_peft_config", 2531, _PEFT, "llama31_70b"),
        ("llama31_405b_peft_config", 2647, _PEFT, "llama31_405b")):
    NOT_TRANSCRIBED[_name] = ("src/megatron/bridge/recipes/llama/llama3.py " + _why.format(_line),
                              f"use --recipe {_base}_pretrain_config")
# gpt_oss.py's fine-tuning recipes, likewise (l. 276-862: _sft_common / _peft_common)
for _name, _line, _why, _base in (
        ("gpt_oss_20b_sft_config", 276, _SFT, "gpt_oss_20b"), ("gpt_oss_120b_sft_config", 402, _SFT, "gpt_oss_120b"),
        ("gpt_oss_20b_sft_fp8_current_scaling_config", 528, _SFT, "gpt_oss_20b"),
        ("gpt_oss_20b_sft_mxfp8_config", 830, _SFT, "gpt_oss_20b"),
        ("gpt_oss_20b_peft_config", 539, _PEFT, "gpt_oss_20b"), ("gpt_oss_120b_peft_config", 674, _PEFT, "gpt_oss_120b"),
        ("gpt_oss_20b_peft_fp8_current_scaling_config", 809, _PEFT, "gpt_oss_20b"),
        ("gpt_oss_20b_peft_mxfp8_config", 839, _PEFT, "gpt_oss_20b")):
    NOT_TRANSCRIBED[_name] = (f"{GPT_OSS} " + _why.format(_line), f"use --recipe {_base}_pretrain_config")
# Llama 4: Bridge has no recipe at the pin or at HEAD (recipes/llama/ holds llama2.py and llama3.py at dc805f5cf and
# 067f987df; llama4_e16.py and llama4_e128.py, whose module-level pretrain_config built Scout (TP 4, EP 16, ETP 4) and
# Maverick (EP 128), were removed by 5d194b9c1 (#607, 2025-10-03), an ancestor of dc805f5cf): run_recipe.py
# (getattr(megatron.bridge.recipes, name), l. 147-211) finds none. The catalog's llama4-scout / llama4-maverick are priced on --stack megatron-bridge from
# explain's options (its chunked attention: stack_db/megatron-bridge.yaml), not from a launch.
NO_LLAMA4 = ("Llama 4: Megatron-Bridge @dc805f5cf (and HEAD 067f987df) has no Llama 4 recipe (recipes/llama/llama4_e16.py, "
             "llama4_e128.py removed by 5d194b9c1, #607): price llama4-scout / llama4-maverick with `planner explain "
             "--model NAME --stack megatron-bridge`")

# CommOverlapConfig fields the MoE recipes set (deepseek_v3.py l. 168-170): read by moe_job
MOE_CO_FIELDS = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
# no effect on a step's memory or time: read, listed as ignored
MOE_NO_EFFECT = {"model.mtp_loss_scaling_factor": "the MTP loss's weight",
                 "model.moe_hybridep_num_sms": "the SMs HybridEP's kernels take (its speed, not priced)"}

# OptimizerConfig's dtype fields, as a Hydra override names them (omegaconf_utils.py @dc805f5cf l. 481-486:
# getattr(torch, value.split('.')[-1])): bytes per element
DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
DISPATCHERS = {("alltoall", None): "alltoall", ("allgather", None): "allgather", ("flex", "deepep"): "deepep",
               ("flex", "hybridep"): "hybridep"}


# apply_flex_dispatcher_backend's answer where it reads the device's name (deepep on compute capability 10: the B200
# and B300 take it, a GB200 not), which no hardware field gives: the launch must name its dispatcher
BY_NAME = "<decided by the device name>"


def flex_applies(backend: Optional[str], hw) -> Optional[bool]:
    """Whether apply_flex_dispatcher_backend (flex_dispatcher_backend.py @dc805f5cf l. 46-65) and
    validate_flex_dispatcher_backend (l. 72-84) take the backend on the launch's GPU: hybridep on compute capability
    major 8, 9, 10; deepep on 8, 9, and on 10 only on a B200 / B300 by device name (None: not decided here, as where
    the hardware gives no capability)."""
    cc = hw.capability
    if cc is None or (backend == "deepep" and cc[0] == 10):
        return None
    return cc[0] in ((8, 9, 10) if backend == "hybridep" else (8, 9))


def apply_recipe_flex(cfg: dict, recipe: str, hw, where: str, assumed: list) -> None:
    """The recipe function's own apply_flex_dispatcher_backend (deepseek_v3.py l. 196), which runs before the
    overrides: on a GPU that takes the backend, dispatcher flex and no shared-expert overlap."""
    backend = cfg["model.moe_flex_dispatcher_backend"]
    on = flex_applies(backend, hw)
    if on is None and hw.capability is not None:  # the device's name decides: the launch's override must say
        cfg["model.moe_token_dispatcher_type"] = BY_NAME
        return
    if on is None:
        raise PlannerError(f"{where}recipe {recipe} picks its MoE dispatcher by the GPU's compute capability "
                           f"({FLEX} l. 46-65), which hardware {hw.name} does not give", "give the hardware's compute_capability")
    if on:
        cfg["model.moe_token_dispatcher_type"] = "flex"
        cfg["model.moe_shared_expert_overlap"] = False
        assumed.append(listed("assumed", "recipe", recipe,
                              f"model.moe_token_dispatcher_type=flex with {backend}, no shared-expert overlap "
                              f"(apply_flex_dispatcher_backend on compute capability {hw.compute_capability}: {FLEX} l. 54-69)", spaced=True))
    else:
        assumed.append(listed("assumed", "recipe", recipe,
                              "model.moe_token_dispatcher_type=alltoall (apply_flex_dispatcher_backend skips "
                              f"{backend} on compute capability {hw.compute_capability}: {FLEX} l. 54-61)", spaced=True))


def _bool(cfg, k, where):
    v = cfg[k]
    if not isinstance(v, bool):
        raise PlannerError(f"{where}{k}={v!r}: not true or false", f"give {k}=true or {k}=false")
    return v


def moe_job(cfg: dict, co, job: dict, spec, hw, where: str, assumed: list, ignored: list, not_modelled: list) -> None:
    """The MoE recipe's MoE settings (after the overrides) into the job: the dispatcher, MTP, the pipeline layout,
    the router's path and balancing, the capacity factor, the fused kernels, the EP overlap, the shared-expert overlap
    (model.moe_shared_expert_overlap: the job's moe_shared_expert_overlap, step.py [38]), the precision-aware
    optimizer's state bytes. What the planner does not price is refused or listed, naming the key."""
    from ..plan import with_mtp
    from ..schema import BYTES_PER_PARAM_PRESETS, split_fields
    from .megatron import BRIDGE_BALANCING, NO_DISTRIBUTED_OPTIMIZER, ROUTER_DTYPES, parse_layout, router_balancing, split_of

    # the dispatcher (the run's, checked as validate_flex_dispatcher_backend does at start-up, l. 72-84)
    kind, backend = cfg["model.moe_token_dispatcher_type"], cfg["model.moe_flex_dispatcher_backend"]
    if kind == BY_NAME:
        raise PlannerError(f"{where}the recipe's dispatcher on {hw.name}: apply_flex_dispatcher_backend turns it into flex "
                           f"with {backend} on compute capability {hw.compute_capability} only on a B200 or B300, by the "
                           f"device's name ({FLEX} l. 46-53), which the planner does not read",
                           "name it: model.moe_token_dispatcher_type=alltoall, or =flex")
    key = (kind, backend if kind == "flex" else None)
    if not all(isinstance(x, (str, type(None))) for x in key) or key not in DISPATCHERS:
        raise PlannerError(f"{where}model.moe_token_dispatcher_type={_v(kind)} model.moe_flex_dispatcher_backend="
                           f"{_v(backend)}: not a dispatcher the planner prices",
                           "valid: alltoall, allgather, flex with deepep or hybridep")
    if kind == "flex" and flex_applies(backend, hw) is None:
        assumed.append(listed("assumed", "model.moe_token_dispatcher_type", "flex", f"Bridge takes it on compute "
                              f"capability {hw.compute_capability} on a B200 or B300 only, by the device's name "
                              f"({FLEX} l. 76-78): assumed one", show=f"flex with {backend} on {hw.name}"))
    elif kind == "flex" and not flex_applies(backend, hw):
        raise PlannerError(f"{where}model.moe_token_dispatcher_type=flex with {backend} on {hw.name} (compute capability "
                           f"{hw.compute_capability}): Bridge refuses it at start-up ({FLEX} validate_flex_dispatcher_backend "
                           "l. 72-84)", "use model.moe_token_dispatcher_type=alltoall")
    job["moe_dispatcher"] = DISPATCHERS[key]
    shared_overlap = _bool(cfg, "model.moe_shared_expert_overlap", where)
    if shared_overlap:
        mods = cfg["model.recompute_modules"]
        if (cfg["model.recompute_granularity"] == "selective" and isinstance(mods, list) and "shared_experts" in mods
                and spec.moe is not None and spec.moe.num_shared_experts):
            raise PlannerError(f"{where}model.recompute_modules with shared_experts and model.moe_shared_expert_overlap=true: "
                               "Megatron-Core refuses it ('shared_experts recompute cannot work with "
                               "--moe-shared-expert-overlap.', transformer_config.py @905c0e386 l. 1355-1362)",
                               "set model.moe_shared_expert_overlap=false, or leave shared_experts out")
        if spec.moe is None or not spec.moe.num_shared_experts:  # "only effective" with them (transformer_config.py)
            ignored.append(listed("ignored", "model.moe_shared_expert_overlap", True, "no shared experts: Megatron-Core "
                                  "reads it only with moe_shared_expert_intermediate_size (transformer_config.py "
                                  "@905c0e386 l. 612-626)"))
        elif kind != "alltoall":
            raise PlannerError(f"{where}model.moe_shared_expert_overlap=true with model.moe_token_dispatcher_type={kind}: "
                               "Megatron-Core refuses it ('moe_shared_expert_overlap only works with alltoall token "
                               "dispatcher.', transformer_config.py @905c0e386 l. 1213-1218)",
                               "set model.moe_token_dispatcher_type=alltoall, or model.moe_shared_expert_overlap=false")
        else:  # the shared experts on a side stream beside the all-to-alls (step.py [38], memory.py [se])
            job["moe_shared_expert_overlap"] = True
    # fused kernels and grouped GEMM (written where on: the job's defaults are off)
    for k, f in (("model.moe_permute_fusion", "moe_permute_fusion"), ("model.moe_router_fusion", "moe_router_fusion")):
        job[f] = _bool(cfg, k, where)
    if _bool(cfg, "model.moe_grouped_gemm", where):
        job["moe_grouped_gemm"] = True
    if _bool(cfg, "model.moe_router_padding_for_fp8", where):
        job["moe_router_padding"] = True
    if _bool(cfg, "dist.enable_megatron_core_experimental", where):
        job["enable_experimental"] = True
    # MTP (the recipe's model.mtp_num_layers; None or 0: none)
    mtp = cfg["model.mtp_num_layers"]
    if mtp is not None and (not isinstance(mtp, int) or isinstance(mtp, bool) or mtp < 0):
        raise PlannerError(f"{where}model.mtp_num_layers={_v(mtp)}: not a count", "give a whole number >= 0, or null")
    job["mtp_layers"] = int(mtp or 0)
    # the router: balancing (transformer_config.py @905c0e386: force, then the expert bias, then the loss type), the
    # auxiliary loss's coefficient where its type is one, z-loss, pre-softmax, dtype
    # (router_balancing: the rule the Megatron-LM reader shares, 905c0e386's types as data)
    force = _bool(cfg, "model.moe_router_force_load_balancing", where)
    bias = not force and _bool(cfg, "model.moe_router_enable_expert_bias", where)
    job.update(router_balancing(cfg["model.moe_router_load_balancing_type"], cfg["model.moe_aux_loss_coeff"], force,
                                bias, BRIDGE_BALANCING, where, assumed))
    z = cfg["model.moe_z_loss_coeff"]
    if z is not None:
        if not isinstance(z, (int, float)) or isinstance(z, bool) or z < 0:
            raise PlannerError(f"{where}model.moe_z_loss_coeff={_v(z)}: not a coefficient >= 0", "give a number >= 0, or null")
        job["moe_z_loss_coeff"] = float(z)
    job["moe_router_pre_softmax"] = _bool(cfg, "model.moe_router_pre_softmax", where)
    dt = cfg["model.moe_router_dtype"]
    if dt is not None:
        if dt not in ROUTER_DTYPES:
            raise PlannerError(f"{where}model.moe_router_dtype={_v(dt)}", f"valid: {', '.join(ROUTER_DTYPES)}, null")
        job["moe_router_dtype"] = dt
    # the capacity factor (None: dropless)
    cf = cfg["model.moe_expert_capacity_factor"]
    if cf is not None:
        if not isinstance(cf, (int, float)) or isinstance(cf, bool) or cf <= 0:
            raise PlannerError(f"{where}model.moe_expert_capacity_factor={_v(cf)}: not a factor > 0", "give a number, or null")
        job["moe_capacity_factor"] = float(cf)
        job["moe_pad_to_capacity"] = _bool(cfg, "model.moe_pad_expert_input_to_capacity", where)
    elif _bool(cfg, "model.moe_pad_expert_input_to_capacity", where):
        ignored.append(listed("ignored", "model.moe_pad_expert_input_to_capacity", True, "no capacity factor: "
                              "dropless, nothing to pad to"))
    # the pipeline layout (a string, or the recipe's own): Megatron-Core refuses it beside the other split settings
    # (transformer_config.py @905c0e386 l. 1430-1447) and a vpp other than its chunks' (l. 1463-1474)
    layout = cfg["model.pipeline_model_parallel_layout"]
    if layout is not None:
        if job.get("first_stage_layers") is not None or job.get("last_stage_layers") is not None:
            # (the counts themselves: megatron_bridge._job reads them into the job, uneven_split checks them)
            raise PlannerError(f"{where}model.pipeline_model_parallel_layout with model.num_layers_in_first/last_pipeline_"
                               "stage: Megatron-Core refuses them together (transformer_config.py @905c0e386 l. 1430-1447)",
                               "give the layout or the end stages' layers (null the other)")
        if not isinstance(layout, str):
            raise PlannerError(f"{where}model.pipeline_model_parallel_layout={_v(layout)}: not read as a list by the "
                               "planner's megatron-bridge reader", "give Megatron-Core's string form, e.g. 'Et*4|t*4|tmL'")
        if job.get("account_for_embedding_in_pipeline_split") or job.get("account_for_loss_in_pipeline_split"):
            raise PlannerError(f"{where}model.pipeline_model_parallel_layout with model.account_for_*_in_pipeline_split: "
                               "Megatron-Core refuses them together (transformer_config.py @905c0e386 l. 1430-1447)",
                               "drop one")
        spec = with_mtp(spec, job["mtp_layers"])
        chunks = parse_layout(layout, job["pp"], spec, where, not_modelled)
        vpp = len(chunks) // job["pp"]
        stated = cfg["model.virtual_pipeline_model_parallel_size"]
        if stated is not None and stated != vpp:
            raise PlannerError(f"{where}model.virtual_pipeline_model_parallel_size={stated} but the layout has {vpp} chunks a "
                               "pipeline rank: Megatron-Core asserts they agree (transformer_config.py l. 1463-1474)",
                               "give one of them")
        job["vpp"], job["schedule"] = vpp, "interleaved" if vpp > 1 else "1f1b"
        if job["pp"] > 1:
            e_l = split_of(spec.num_layers, job["pp"], vpp, chunks=chunks)
            if e_l is None:
                not_modelled.append(listed("not_modelled", "model.pipeline_model_parallel_layout", layout,
                                           f"{chunks} layers on the model chunks, not a split the planner models; "
                                           "priced as the planner's split of pp x vpp", str, spaced=True, ruled=True))
            else:
                job.update(split_fields(*e_l))
        elif vpp == 1:
            ignored.append(listed("ignored", "model.pipeline_model_parallel_layout", layout, "one stage: every layer "
                                  "on it", str))
    # the EP overlap: the CommOverlapConfig's stated field over the model's (comm_overlap.py _override_user_cfgs
    # l. 590-598), with the asserts Bridge makes (l. 468-502)
    ov = co.get("overlap_moe_expert_parallel_comm") if co else None
    ep_ov = _bool(cfg, "model.overlap_moe_expert_parallel_comm", where) if ov is None else ov
    if not isinstance(ep_ov, bool):
        raise PlannerError(f"{where}comm_overlap.overlap_moe_expert_parallel_comm={_v(ep_ov)}: not true or false",
                           "give true or false")
    if ep_ov:
        bad = [why for cond, why in (
            (job["ep"] <= 1, "expert_model_parallel_size > 1"), (job["moe_dispatcher"] == "allgather",
                                                                   "moe_token_dispatcher_type alltoall or flex"),
            (job["pp"] > 1 and job["vpp"] == 1, "virtual_pipeline_model_parallel_size (a layout's chunks) where pp > 1"),
            (job["recompute"] == "full" or cfg["model.recompute_method"] is not None or
             cfg["model.recompute_num_layers"] is not None, "no full recompute, recompute_method or recompute_num_layers"),
            (shared_overlap, "moe_shared_expert_overlap false"), (job["mtp_layers"] > 1, "mtp_num_layers None or 1")) if cond]
        if bad:
            raise PlannerError(f"{where}the EP overlap (overlap_moe_expert_parallel_comm) needs {'; '.join(bad)}: Bridge "
                               "asserts them (training/comm_overlap.py l. 468-502)", "turn the EP overlap off, or meet them")
        job["ep_comm_overlap"] = True
    if co and co.get("delay_wgrad_compute"):
        not_modelled.append(listed("not_modelled", "comm_overlap.delay_wgrad_compute", True, "the weight gradients "
                                   "deferred under the EP overlap: not priced"))
    # the precision-aware optimizer's state dtypes (OptimizerConfig @905c0e386; Bridge's ConfigContainer keeps the
    # distributed optimizer on, which it needs: megatron/core/optimizer/__init__.py)
    if _bool(cfg, "optimizer.use_precision_aware_optimizer", where):
        dts = {}
        for f in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            v = cfg[f"optimizer.{f}"]
            name = v.split(".")[-1] if isinstance(v, str) else None
            if name not in DTYPE_BYTES:
                raise PlannerError(f"{where}optimizer.{f}={_v(v)}: not a dtype the planner prices",
                                   f"valid: {', '.join(DTYPE_BYTES)}")
            dts[f] = name
        if job.get("sharding_mode") in NO_DISTRIBUTED_OPTIMIZER:
            raise PlannerError(f"{where}optimizer.use_precision_aware_optimizer=true under sharding mode "
                               f"{job.get('sharding_mode')}: Megatron-Core runs it with the distributed optimizer only "
                               "(megatron/core/optimizer/__init__.py: 'only supported with distributed optimizer')",
                               "keep ddp.use_distributed_optimizer=true, or turn it off")
        grads = 2.0 if (job.get("bytes_per_param") or {}).get("gradients") == 2.0 else 4.0
        if dts["main_grads_dtype"] == "bfloat16" and grads == 4.0:
            raise PlannerError(f"{where}optimizer.main_grads_dtype=bfloat16 with mixed_precision.grad_reduce_in_fp32=true: "
                               "not read by the planner's megatron-bridge reader (Megatron-LM asserts fp32 main gradients "
                               "under fp32 reduction, arguments.py @d98e8a64 l. 1209-1211)",
                               "give mixed_precision.grad_reduce_in_fp32=false, or optimizer.main_grads_dtype=float32")
        if dts["main_params_dtype"] != "float32" or dts["exp_avg_dtype"] != dts["exp_avg_sq_dtype"]:
            raise PlannerError(f"{where}optimizer.main_params_dtype={dts['main_params_dtype']}, exp_avg_dtype="
                               f"{dts['exp_avg_dtype']}, exp_avg_sq_dtype={dts['exp_avg_sq_dtype']}: the planner prices "
                               "fp32 main weights and two moments of one dtype", "use float32 main weights, one moment dtype")
        bpp = {"weights": 2.0, "gradients": grads, "master": 4.0, "optimizer": 2 * DTYPE_BYTES[dts["exp_avg_dtype"]]}
        name = next((n for n, b in BYTES_PER_PARAM_PRESETS.items() if b.model_dump() == bpp), None)
        job["bytes_per_param"] = name or bpp
        if bpp["optimizer"] == 8.0:
            job["precision_aware_optimizer"] = True
        assumed.append(listed("assumed", "bytes_per_param", name or bpp, "optimizer.use_precision_aware_optimizer "
                              "with " + ", ".join(f"{f} {v}" for f, v in dts.items()), show=f"{name or 'custom'} "
                              f"({bpp['weights']:g}+{bpp['gradients']:g}+{bpp['master']:g}+{bpp['optimizer']:g} B)",
                              spaced=True))
    else:
        low = [f for f in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype")
               if str(cfg[f"optimizer.{f}"]).split(".")[-1] != "float32"]
        if low:
            raise PlannerError(f"{where}optimizer.{low[0]}={_v(cfg['optimizer.' + low[0]])} without the precision-aware "
                               "optimizer: Megatron-Core asserts fp32 states without it (optimizer_config.py)",
                               "add optimizer.use_precision_aware_optimizer=true, or give float32")


# ------------------------------------------------------------------ writing
def _bridge_refuse(what: str, hint: str) -> PlannerError:
    return PlannerError(f"export megatron-bridge: {what}", hint)  # as export._bridge_refuse words it


def moe_overrides(plan: dict, model, rec_values: dict, notes: list, mtp: int, grouped_fp8) -> list[tuple[str, object]]:
    """The plan's MoE settings as a MoE recipe's overrides (the reader's inverse, moe_job): every one written, so the
    recipe's own (its flex dispatcher, its layout, its recompute) never stands in for the plan's. `mtp` is the plan's
    MTP modules, `grouped_fp8` its fp8_grouped_experts as export.plan_signature resolves them."""
    out: list[tuple[str, object]] = []
    disp = plan.get("moe_dispatcher") or "alltoall"
    kind = next((k for k, d in DISPATCHERS.items() if d == disp), None)
    if kind is None:
        raise _bridge_refuse(f"moe_dispatcher {disp}: Megatron-Core's moe_token_dispatcher_type / moe_flex_dispatcher_backend "
                             "have no such dispatcher", f"price it with one of {', '.join(DISPATCHERS.values())}")
    if plan.get("moe_shared_expert_overlap") and disp != "alltoall":
        raise _bridge_refuse(f"moe_shared_expert_overlap with moe_dispatcher {disp}: Megatron-Core @905c0e386 runs it with "
                             "the alltoall dispatcher only (transformer_config.py l. 1213-1218)",
                             "price it with moe_dispatcher alltoall, or without moe_shared_expert_overlap")
    for k in ("moe_fp8_dispatch", "moe_min_capacity", "moe_hybridep_capacity_factor"):
        if plan.get(k):
            raise _bridge_refuse(f"{k} {plan[k]}: no ConfigContainer key of Megatron-Bridge @dc805f5cf runs it", f"price it without {k}")
    if grouped_fp8 is False:
        raise _bridge_refuse("fp8_grouped_experts false: Megatron-Core runs the routed experts' grouped GEMMs under the "
                             "layer's fp8 autocast, no key keeps them bf16", "price it without fp8_grouped_experts")
    out += [("model.moe_token_dispatcher_type", kind[0]),
            ("model.moe_flex_dispatcher_backend", kind[1] or rec_values["model.moe_flex_dispatcher_backend"]),
            # the plan's (step.py [38]; Bridge asserts it off under the EP overlap)
            ("model.moe_shared_expert_overlap", bool(plan.get("moe_shared_expert_overlap"))),
            ("model.moe_permute_fusion", bool(plan.get("moe_permute_fusion"))),
            ("model.moe_router_fusion", bool(plan.get("moe_router_fusion"))),
            ("model.moe_grouped_gemm", bool(plan.get("moe_grouped_gemm"))),
            ("model.moe_router_padding_for_fp8", bool(plan.get("moe_router_padding"))),
            ("dist.enable_megatron_core_experimental", bool(plan.get("enable_experimental"))),
            ("model.mtp_num_layers", mtp or None)]
    # balancing: force; else the model's expert bias (aux_loss_free) and the recipe's loss type, or sinkhorn
    bal = plan.get("moe_load_balancing")
    force = bal == "force" or plan.get("moe_rank_imbalance") == 1.0
    if plan.get("moe_rank_imbalance") not in (None, 1.0):  # 1.0: balanced, Bridge's forced balancing; else no key
        raise _bridge_refuse(f"moe_rank_imbalance {plan['moe_rank_imbalance']}: a stated imbalance no ConfigContainer key "
                             "runs (model.moe_router_force_load_balancing is 1.0)", "price it without moe_rank_imbalance")
    bias = bool(model.moe.expert_score_bias)
    if not force and bal is not None and (bal == "aux_loss_free") != bias:
        raise _bridge_refuse(f"moe_load_balancing {bal} on {plan['model']} (expert_score_bias {str(bias).lower()}): the "
                             "provider builds the model's router, its expert bias with it", "price the model's balancing")
    ltype = "sinkhorn" if bal == "sinkhorn" else rec_values["model.moe_router_load_balancing_type"]
    out += [("model.moe_router_force_load_balancing", force), ("model.moe_router_enable_expert_bias", bias),
            ("model.moe_router_load_balancing_type", ltype),
            ("model.moe_aux_loss_coeff", float(plan.get("moe_aux_loss_coeff") or 0.0)),
            ("model.moe_z_loss_coeff", plan.get("moe_z_loss_coeff")),
            ("model.moe_router_pre_softmax", bool(plan.get("moe_router_pre_softmax"))),
            ("model.moe_router_dtype", plan.get("moe_router_dtype")),
            ("model.moe_expert_capacity_factor", plan.get("moe_capacity_factor")),
            ("model.moe_pad_expert_input_to_capacity", bool(plan.get("moe_pad_to_capacity"))),
            # the EP overlap on the model too (a CommOverlapConfig's stated field, written beside it, wins: the same)
            ("model.overlap_moe_expert_parallel_comm", bool(plan.get("ep_comm_overlap")))]
    if disp in ("deepep", "hybridep"):
        notes.append(f"model.moe_token_dispatcher_type=flex with {disp}: Bridge checks the GPU takes it at start-up "
                     f"({FLEX} validate_flex_dispatcher_backend l. 72-84)")
    return out


def optimizer_overrides(plan: dict, b: dict) -> list[tuple[str, object]]:
    """The plan's optimizer state bytes as a MoE recipe's OptimizerConfig overrides: the precision-aware optimizer
    where the moments are below fp32 (or the plan runs it), fp32 main weights; the main gradients in the gradient
    buffer's dtype (mixed_precision.grad_reduce_in_fp32 writes the buffer)."""
    moment = {8.0: "float32", 4.0: "bfloat16"}.get(b["optimizer"])
    if moment is None or b["master"] != 4.0 or b["weights"] != 2.0:
        raise _bridge_refuse(f"bytes_per_param {plan.get('bytes_per_param')}: the planner's writer spells bf16 weights, "
                             "fp32 master weights and two fp32 or bf16 Adam moments only",
                             "price it with --bytes-per-param megatron, mixed16 or bf16-moments")
    pa = moment != "float32" or bool(plan.get("precision_aware_optimizer"))
    return [("optimizer.use_precision_aware_optimizer", pa), ("optimizer.main_params_dtype", "float32"),
            ("optimizer.main_grads_dtype", "bfloat16" if pa and b["gradients"] == 2.0 else "float32"),
            ("optimizer.exp_avg_dtype", moment), ("optimizer.exp_avg_sq_dtype", moment)]
