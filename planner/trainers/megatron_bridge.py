"""Megatron-Bridge's own launch: `torchrun ... scripts/training/run_recipe.py --recipe NAME key=value ...`, read here
(`read`) and written by export.py `_megatron_bridge` (`planner export --format megatron-bridge`) from this module's
tables (issue 22); also the launches of the scripts that merge a `--config-file` YAML between their recipe and the
overrides (SCRIPTS), and Hydra's +key, ++key and ~key forms as Hydra 1.3.2 applies them (_hydra_word, _lay).

What run_recipe.py does (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf scripts/training/run_recipe.py): calls the recipe
function named by --recipe (l. 147-211, `getattr(megatron.bridge.recipes, name)()`), then applies the remaining
command-line words as Hydra overrides of the ConfigContainer's dot paths (l. 143, 244-247; src/megatron/bridge/training/
utils/omegaconf_utils.py process_config_with_overrides l. 99-154, parse_hydra_overrides l. 157-181: Hydra's
OverridesParser, `key=value`, `null`, `true` / `false`, lists `[a,b]`), then pretrain(). So the run is the recipe's
ConfigContainer with the overrides laid on it: the reader starts from the recipe's values the planner prices
(RECIPES, COMMON: transcribed from the recipe files, cited) and lays the overrides on; the writer writes every
priced setting as an override (never a recipe default left to stand), so the file says the plan whatever the
recipe holds.

What the format holds: the recipes' models only (run_recipe.py builds the model from the recipe, whose provider is
AutoBridge.from_hf_pretrained(<Hugging Face id>): RECIPES, matched to the priced model by its shape fields, never
by name); of the plan, the settings export.py _BRIDGE_WRITTEN names. A plan setting outside them is refused,
naming it (export), and an override the reader does not know is listed as not modelled (read), never dropped.

Where the run's values go (config.py @dc805f5cf): ConfigContainer.validate syncs ddp.use_distributed_optimizer and
optimizer.use_distributed_optimizer (either True sets both, l. 1944-1966); the mixed-precision config's fields
overwrite the model's, optimizer's and ddp's fields of the same name (mixed_precision.py update_config_with_
precision_overrides l. 125-151): its grad_reduce_in_fp32 is the run's ddp.grad_reduce_in_fp32, its fp8_param_gather
the model's and ddp's; comm_overlap, where the recipe has a CommOverlapConfig, puts its non-None fields over the
model's and ddp's (comm_overlap.py _override_user_cfgs l. 590-598). A recipe whose mixed_precision is a preset's
name (a string, llama3_8b_pretrain_config) takes another name only (`mixed_precision=bf16_with_fp8_...`), one that
holds a MixedPrecisionConfig (the others) takes its fields (`mixed_precision.fp8=hybrid`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple, Optional

import yaml

from ..errors import PlannerError
from ..schema import MAX_COUNT
from . import TrainerConfig, check_model_shape, resolve_gpus
from .launch_files import Naming, launch_file
from .bridge_sharding import HSDP_MODE, HSDP_STRATEGY, MFSDP_MODES
from .spelling import hydra_value as _v
from .report import Note, listed, noted, read_value
from . import bridge_moe

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge @dc805f5cf"
SCRIPT = "scripts/training/run_recipe.py"
FMT = "megatron-bridge"
STACK = "megatron-bridge"
L3 = "src/megatron/bridge/recipes/llama/llama3.py"
# a CommOverlapConfig where the recipe has none (comm_overlap None): the override's dict with `_target_`, which Bridge
# instantiates (training/utils/omegaconf_utils.py _apply_overrides l. 461-471, tested at the dict level by
# tests/unit_tests/training/utils/test_omegaconf_utils.py l. 509-531); Hydra's grammar takes `{key:value,...}`
COMM_OVERLAP_TARGET = "megatron.bridge.training.comm_overlap.CommOverlapConfig"

# the ConfigContainer values every transcribed recipe shares: recipes/common.py _pretrain_common l. 37-132 (train,
# ddp, dist=DistributedInitConfig(), comm_overlap None, mixed_precision "bf16_mixed"), then each recipe's own lines
# (llama3.py, e.g. llama3_8b_pretrain_config l. 225-303: train.global_batch_size 512, micro_batch_size 1,
# train_iters 1168251, transformer_impl transformer_engine, cuda_graph_impl none, attention_backend None,
# cross_entropy_loss_fusion True with cross_entropy_fusion_impl te, recompute_granularity None, the optimizer's fp32
# states without the precision-aware optimizer, ddp overlap_grad_reduce / overlap_param_gather / use_distributed_
# optimizer / grad_reduce_in_fp32 True, use_megatron_fsdp False, data_parallel_sharding_strategy no_shard); the
# model provider's (models/llama/llama_bridge.py provider_bridge l. 66-70: bias_activation_fusion, masked_softmax_
# fusion, bias_dropout_fusion, apply_rope_fusion True; models/gpt_provider.py l. 186 gradient_accumulation_fusion
# fusions.can_enable_gradient_accumulation_fusion(): True where Transformer Engine is installed); Megatron-Core
# 905c0e386's TransformerConfig / ModelParallelConfig defaults the recipes leave (model_parallel_config.py l. 289,
# 294: overlap_p2p_comm False, batch_p2p_comm True; transformer_config.py l. 111, 115: account_for_* False;
# l. 466, 474: recompute_method, recompute_num_layers None); training/config.py DistributedInitConfig l. 125-161
# (use_megatron_fsdp, use_torch_fsdp2, use_tp_pp_dp_mapping False); recipes/utils/optimizer_utils.py l. 135
# (optimizer.use_distributed_optimizer True)
COMMON = {
    "model.expert_model_parallel_size": 1, "model.expert_tensor_parallel_size": None,
    "model.recompute_granularity": None, "model.recompute_method": None, "model.recompute_num_layers": None,
    "model.recompute_modules": None, "model.account_for_embedding_in_pipeline_split": False,
    "model.account_for_loss_in_pipeline_split": False,
    # Megatron-Core 905c0e386 transformer_config.py l. 77-83: None, the layers split equally (read: _job, uneven_split)
    "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
    "model.transformer_impl": "transformer_engine",
    "model.cuda_graph_impl": "none", "model.attention_backend": None, "model.cross_entropy_loss_fusion": True,
    "model.cross_entropy_fusion_impl": "te", "model.apply_rope_fusion": True, "model.bias_activation_fusion": True,
    "model.bias_dropout_fusion": True, "model.gradient_accumulation_fusion": True,
    "model.overlap_p2p_comm": False, "model.batch_p2p_comm": True,
    "train.global_batch_size": 512, "train.micro_batch_size": 1, "train.train_iters": 1168251,
    "optimizer.use_precision_aware_optimizer": False, "optimizer.use_distributed_optimizer": True,
    "ddp.use_distributed_optimizer": True, "ddp.use_megatron_fsdp": False, "ddp.overlap_grad_reduce": True,
    "ddp.overlap_param_gather": True, "ddp.grad_reduce_in_fp32": True, "ddp.data_parallel_sharding_strategy": "no_shard",
    "dist.use_megatron_fsdp": False, "dist.use_torch_fsdp2": False, "dist.use_tp_pp_dp_mapping": False,
    # Megatron-Core 905c0e386 distributed_data_parallel_config.py l. 30 (Bridge's initialize.py l. 125 hands it to the
    # process groups): Megatron-FSDP's HSDP where above 1 (mcore_fsdp_adapter.py l. 228)
    "ddp.num_distributed_optimizer_instances": 1,
    # Megatron-FSDP's double buffer, NCCL's user buffers and HSDP's outer-DP sharding: Megatron-Core 905c0e386
    # distributed_data_parallel_config.py l. 100 (nccl_ub False), l. 117 (fsdp_double_buffer False), l. 142
    # (outer_dp_sharding_strategy 'no_shard'); no recipe sets them (read: _mfsdp_buffers)
    "ddp.fsdp_double_buffer": False, "ddp.nccl_ub": False, "ddp.outer_dp_sharding_strategy": "no_shard",
    # the context-parallel variant: Megatron-Core 905c0e386 transformer_config.py l. 806 (cp_comm_type: None), which
    # transformer_engine.py l. 1445-1446 hands Transformer Engine as p2p where context_parallel_size > 1 (l. 1433-1457:
    # nothing at CP 1); no Llama, DeepSeek or Qwen recipe nor their providers set it (gpt_oss.py l. 66, 187: a2a)
    "model.cp_comm_type": None,
    # a2a+p2p's all-to-all group's and ring's ranks: model_parallel_config.py @905c0e386 l. 48 (None), handed to
    # parallel_state.initialize_model_parallel by Bridge's initialize.py @dc805f5cf l. 624 (which asserts their
    # product is cp, parallel_state.py @905c0e386 l. 987-988)
    "model.hierarchical_context_parallel_sizes": None,
    # the update rule: Megatron-Core 905c0e386 optimizer_config.py l. 209 (optimizer 'adam'), the recipes' own
    # (recipes/utils/optimizer_utils.py @dc805f5cf distributed_fused_adam_with_cosine_annealing l. 126: "adam");
    # read by _optimizer_job (muon, dist_muon: BRIDGE_OPTIMIZERS)
    "optimizer.optimizer": "adam",
    # the optimizer's own parameter-gather overlap: Megatron-Core 905c0e386 optimizer_config.py l. 290 (False), which
    # Bridge's CommOverlapConfig sets beside ddp.overlap_param_gather only under the distributed optimizer
    # (comm_overlap.py @dc805f5cf l. 631-640); Muon's layer-wise optimizer reads it (muon.py l. 347-354:
    # async_allgather): read by _job under dist_muon
    "optimizer.overlap_param_gather": False,
    # Muon's TP mode: Megatron-Core 905c0e386 optimizer_config.py l. 277-278 ('blockwise'; muon.py l. 273 hands it to
    # TensorParallelMuon); read by _optimizer_job (the job's muon_tp_mode where not blockwise)
    "optimizer.muon_tp_mode": "blockwise",
    # Muon's q / k / v split: Megatron-Core 905c0e386 optimizer_config.py l. 263 (True; muon.py l. 268 hands it on);
    # read by _optimizer_job (the job's muon_split_qkv false)
    "optimizer.muon_split_qkv": True,
    # torch's float32 matmul precision around Newton-Schulz: Megatron-Core 905c0e386 optimizer_config.py l. 272 ('medium';
    # muon.py l. 265 hands it to TensorParallelMuon, l. 106 on, Emerging-Optimizers v0.1.0 orthogonalized_optimizer.py l. 173 sets
    # it); read by _optimizer_job (the job's muon_fp32_matmul_prec where not medium)
    "optimizer.muon_fp32_matmul_prec": "medium",
    # Muon's Newton-Schulz steps: Megatron-Core 905c0e386 optimizer_config.py l. 275 (5; muon.py l. 266 hands it to
    # TensorParallelMuon, which raises below 1, l. 64-65); read by _optimizer_job (the job's muon_ns_steps; the stack's
    # Emerging-Optimizers v0.1.0 wants a multiple of 5: plan._optimizer, runs.optimizers muon_ns_steps_multiple)
    "optimizer.muon_num_ns_steps": 5,
    # the dropout probabilities: Megatron-Core 905c0e386 transformer_config.py l. 152, 155 (0.1 each), which every
    # transcribed recipe's provider sets to 0.0 (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf models/llama/llama_bridge.py
    # l. 65 hidden_dropout 0.0, qwen/qwen3_moe_bridge.py l. 52, deepseek/deepseek_v3_bridge.py l. 81,
    # deepseek_v2_bridge.py l. 74, gpt_oss/gpt_oss_bridge.py l. 85, qwen/qwen3_next_bridge.py l. 64; attention_dropout
    # the config.json's, conversion/model_bridge.py l. 264, 0.0 in each recipe model's config: tests/data/arch);
    # read by _dropout_job against the model priced (export._bridge_dropout writes them)
    "model.hidden_dropout": 0.0, "model.attention_dropout": 0.0,
    # deterministic mode: Megatron-Core 905c0e386 model_parallel_config.py l. 142 (False); Bridge's ConfigContainer.
    # validate checks it (training/config.py @dc805f5cf l. 1445-1469: start-up rules MEGATRON_DETERMINISTIC_FLASH,
    # _CE_FUSION); read by _job as the job's deterministic_mode
    "model.deterministic_mode": False,
    # MLA's fused TP-split down projection: Megatron-Core 905c0e386 transformer_config.py l. 2263 (False),
    # gpt_layer_specs.py l. 252 (FusedMLASelfAttention, multi_latent_attention.py l. 1117); read by _job as the job's
    # mla_down_proj_fusion (layers/attention.py MLA.down_fused; rule MEGATRON_MLA_FUSION_TP)
    "model.mla_down_proj_fusion": False,
}

# OptimizerConfig.optimizer values the reader reads (training/optim.py @dc805f5cf setup_optimizer l. 69-84: a name
# without muon or soap builds get_megatron_optimizer, Adam here; muon builds Megatron-Core 905c0e386's
# get_megatron_muon_optimizer, its LayerWiseDistributedOptimizer where the name holds dist, layer_wise_distributed_
# optimizer="dist" in the name, l. 83; recipes/utils/optimizer_utils.py l. 68 writes dist_muon) -> (the job's
# optimizer, the layer-wise distributed optimizer)
BRIDGE_OPTIMIZERS = {"adam": ("adam", False), "muon": ("muon", False), "dist_muon": ("muon", True)}

# the variants the reader takes as the job's cp_comm_type (planner/cp_comm_type.py) and the writer writes: those of
# TransformerConfig's docstring (transformer_config.py @905c0e386 l. 807-822; a2a+p2p with the sizes above), not a
# per-layer list
CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")


class Recipe(NamedTuple):
    hf_id: str           # AutoBridge.from_hf_pretrained(...): the model run_recipe.py builds
    lines: str           # where in llama3.py
    shape: dict          # ModelSpec attribute -> value (the Hugging Face config the provider reads)
    values: dict         # the recipe's own ConfigContainer values (over COMMON)
    mp_object: bool      # mixed_precision a MixedPrecisionConfig (bf16_mixed()) rather than the name "bf16_mixed"
    comm_overlap: bool   # a CommOverlapConfig rather than None
    ub_cfg: str = ""     # its tp_comm_overlap_cfg (training/comm_overlap.py), where it has one
    co_tp: bool = True   # its tp_comm_overlap
    file: str = L3       # the recipe's file
    moe: bool = False    # a MoE recipe (bridge_moe.py): its MoE keys in values, read by bridge_moe.moe_job
    mp: Optional[dict] = None  # its MixedPrecisionConfig's fields where they are not bf16_mixed()'s
    applies_flex: bool = True  # a MoE recipe that calls apply_flex_dispatcher_backend (deepseek_v3.py l. 196,
    # qwen3_moe.py l. 128, 241); gpt_oss.py's name deepep but never call it: alltoall runs
    hf_tokenizer: bool = False  # its tokenizer the Hugging Face one of hf_id (qwen3_moe.py), not the NullTokenizer
    # hf_id a gated Hugging Face repository (its files downloaded only after the user accepts its licence and logs in):
    # the meta-llama repositories (huggingface.co/meta-llama/<repo>: access granted on the Llama 2 / 3 / 3.1 / 3.2
    # community licence's form); the Qwen, DeepSeek and openai gpt-oss repositories are public (Apache 2.0 / MIT /
    # DeepSeek licence, no access form)
    hf_gated: bool = False
    mp_name: str = "bf16_mixed"  # the preset a recipe that holds mixed_precision as a name names (mp_object False)


L2 = "src/megatron/bridge/recipes/llama/llama2.py"


def _llama(layers, hidden, ffn, heads, rope_scaling, factor=8.0, tied=False):
    # meta-llama config.json: num_hidden_layers, hidden_size, intermediate_size, num_attention_heads,
    # num_key_value_heads 8, vocab_size 128256, rope_theta 500000.0, untied; Llama 3.1's rope_scaling llama3
    # (factor 8, low 1, high 4, original 8192), which llama_bridge.py l. 74-78 turns into provider.rope_scaling.
    # Llama 3.2 1B / 3B: factor 32 and tie_word_embeddings true (models/conversion/model_bridge.py l. 266 maps it to the
    # provider's share_embeddings_and_output_weights; Llama32ModelProvider1B / 3B, llama_provider.py l. 231-268, say the same)
    # The head width (ModelSpec.dhead: the model's explicit head_dim, else hidden / heads) is Megatron's kv_channels:
    # the config's head_dim where it gives one (model_bridge.py CONFIG_MAPPING l. 258, ("head_dim", "kv_channels");
    # Llama 3.2 1B / 3B give 64 / 128), else hidden_size // num_attention_heads (Megatron-Core 905c0e386
    # transformer_config.py l. 1031-1032): hidden / heads for every Llama recipe, so a model whose explicit head_dim
    # differs is not the recipe's model
    return {"num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": ffn, "num_attention_heads": heads,
            "dhead": hidden // heads, "kv_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0, "tied_embeddings": tied,
            "llama3_rope_scaling": (factor, 1.0, 4.0, 8192) if rope_scaling else None}


def _par(tp, pp, vp, cp, sp, seq, **extra):
    out = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
           "model.virtual_pipeline_model_parallel_size": vp, "model.context_parallel_size": cp,
           "model.sequence_parallel": sp, "model.seq_length": seq, "dataset.sequence_length": seq}
    out.update({k.replace("__", "."): v for k, v in extra.items()})
    return out


# the recipes' TP-overlap configs (training/comm_overlap.py @dc805f5cf l. 96-107, 149-160): Transformer Engine's own
# default method for each GEMM (ring_exchange qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; pipeline proj_fprop,
# fc2_fprop; bulk qkv/fc1 dgrad and wgrad; proj_wgrad and fc2_wgrad unset, TE's default), so the userbuffers priced
# (memory.py [ub]) are theirs; their SM counts, CGA sizes and splits tune the overlap's speed, which is not priced
NULL_TOKENIZER_VOCAB = 32000
# the recipes' tokenizers (TokenizerConfig, training/tokenizers/config.py @dc805f5cf l. 20-57): the Llama, DeepSeek-V3
# and gpt-oss recipes set tokenizer_type NullTokenizer with vocab_size DEFAULT_NULL_TOKENIZER_VOCAB_SIZE 32,000 (llama3.py
# l. 234-236, llama2.py l. 35-37, deepseek_v3.py l. 63-65, gpt_oss.py l. 44-46: recipes/utils/tokenizer_utils.py
# l. 15), which build_tokenizer hands Megatron-Core's NullTokenizer as vocab_size - 1 (training/tokenizers/
# tokenizer.py l. 77-80), whose vocab_size is that + 1 (Megatron-Core 905c0e386 tokenizers/text/libraries/
# null_tokenizer.py l. 14-16, 50-52): 32,000 tokens. The Qwen3 MoE recipes keep _pretrain_common's
# HuggingFaceTokenizer (recipes/common.py l. 111-114) of the model's own id (qwen3_moe.py l. 36-37, 145-146), read
# whole (tokenizer.py l. 58-66 passes no vocab_size), whose vocab_size is len(tokenizer) (huggingface_tokenizer.py
# l. 105, 291-293): Qwen3's 151,643 byte-level BPE tokens and its 26 added tokens, ids 151,643-151,668 (<|endoftext|>
# to </think>: huggingface.co/Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B tokenizer_config.json added_tokens_decoder),
# 151,669 (fewer than the config's 151,936 embedding rows)
HF_TOKENIZER_VOCAB = {"Qwen/Qwen3-30B-A3B": 151669, "Qwen/Qwen3-235B-A22B": 151669}
SETUP_VOCAB = "training/setup.py l. 175-181, _validate_and_set_vocab_size l. 467-498"
UB_H8192 = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192 (l. 96-107)"
UB_H16384 = "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192 (l. 149-160)"
UB_NOTE = ("keeps Transformer Engine's default method for each GEMM (its userbuffers as priced); its SM counts and "
           "splits, which tune the overlap's speed, are not priced")

# the recipes whose models the planner's catalog holds (llama3-8b, llama3-70b: Llama 3, no RoPE scaling;
# llama3-405b: Llama 3.1's shape and scaling; llama2-7b; llama3.2-1b, llama3.2-3b) and the Llama 3.1 8B / 70B
# recipes for a model file of that shape
RECIPES = {
    # meta-llama/Llama-2-7b-hf config.json: 32 layers, 4096 wide, 11008 FFN, 32 heads, MHA, vocab 32000, rope_theta
    # 10000, untied; the recipe leaves dataset.seq_length at _pretrain_common's 4096 (recipes/common.py l. 95), its
    # mixed_precision the name "bf16_mixed", and holds CommOverlapConfig(tp_comm_overlap=False) (l. 118)
    "llama2_7b_pretrain_config": Recipe(
        "meta-llama/Llama-2-7b-hf", "l. 24-120 (cross_entropy_fusion_impl native l. 78, comm_overlap l. 118)",
        {"num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 11008, "num_attention_heads": 32, "dhead": 128,
         "kv_heads": 32,
         "vocab_size": 32000, "rope_theta": 10000.0, "tied_embeddings": False, "llama3_rope_scaling": None},
        _par(2, 1, None, 1, False, 4096, model__cross_entropy_fusion_impl="native"), mp_object=False,
        comm_overlap=True, co_tp=False, file=L2, hf_gated=True),
    # Llama 3.2 (meta-llama/Llama-3.2-1B, -3B config.json: 16 / 28 layers, 2048 / 3072 wide, 8192 FFN, 32 / 24
    # heads, 8 KV heads, tied, llama3 RoPE scaling factor 32): llama32_1b_pretrain_config l. 42-136 and
    # llama32_3b_pretrain_config l. 139-217, line for line llama3_8b_pretrain_config's values but CP 1 (l. 68, 161):
    # TP 1, PP 1, no VP, no SP, dataset and model seq_length 8192 (l. 60, 70; 154, 163), global batch 512,
    # micro-batch 1, train_iters 1168251 (l. 73-75; 165-167), TE, no CUDA graph, fused TE cross-entropy (l. 87-97;
    # 176-184), no recompute (l. 100-101; 186-187), fp32 optimizer states without the precision-aware optimizer
    # (l. 114-118; 197-201), the distributed optimizer with both DDP overlaps and fp32 gradient reduction, no
    # Megatron-FSDP (l. 127-134; 208-215); no mixed_precision or comm_overlap line: _pretrain_common's "bf16_mixed"
    # name and None (recipes/common.py l. 127, 129)
    "llama32_1b_pretrain_config": Recipe(
        "meta-llama/Llama-3.2-1B", "l. 42-136", _llama(16, 2048, 8192, 32, True, factor=32.0, tied=True),
        _par(1, 1, None, 1, False, 8192), mp_object=False, comm_overlap=False, hf_gated=True),
    "llama32_3b_pretrain_config": Recipe(
        "meta-llama/Llama-3.2-3B", "l. 139-217", _llama(28, 3072, 8192, 24, True, factor=32.0, tied=True),
        _par(1, 1, None, 1, False, 8192), mp_object=False, comm_overlap=False, hf_gated=True),
    "llama3_8b_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-8B", "l. 225-303", _llama(32, 4096, 14336, 32, False),
        _par(1, 1, None, 2, False, 8192), mp_object=False, comm_overlap=False, hf_gated=True),
    # the long-context Llama 3 recipes (context parallel > 1): line for line their base recipe's values (8B:
    # llama3_8b_pretrain_config l. 225-303; 70B: llama3_70b_pretrain_config l. 658-745, its CommOverlapConfig with the
    # same userbuffers config and bf16_mixed()) but the parallel layout and the length (SEQUENCE_LENGTH_16K 16,384,
    # _64K 65,536, _128K 131,072, l. 32-34), each set on both model.seq_length and dataset.seq_length; their
    # pipeline_dtype bfloat16 (the dtype of the stage-to-stage tensors, bf16 as priced). 8B 16K l. 306-384: TP 4, PP 2,
    # CP 2, SP (l. 323-330); 8B 64K l. 387-465: TP 4, PP 2, CP 4, SP (l. 404-411); 8B 128K l. 468-546: TP 4, PP 2,
    # CP 8, SP (l. 485-492); 70B 16K l. 748-834: TP 8, PP 2, no VP, CP 2, SP (l. 765-772), comm_overlap l. 827-830,
    # bf16_mixed() l. 832; 70B 64K l. 837-923: TP 8, PP 4, no VP, CP 8, SP (l. 854-861), comm_overlap l. 916-919,
    # bf16_mixed() l. 921. The models are the base recipes' (Meta-Llama-3-8B / -70B: no RoPE scaling), so recipe_for,
    # matching by shape, writes a plan of those models as the base recipe with its overrides
    "llama3_70b_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-70B", "l. 658-745 (comm_overlap l. 737-740, mixed_precision bf16_mixed() l. 743)",
        _llama(80, 8192, 28672, 64, False), _par(4, 4, 5, 2, True, 8192), mp_object=True, comm_overlap=True,
        ub_cfg=UB_H8192, hf_gated=True),
    "llama3_8b_16k_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-8B", "l. 306-384", _llama(32, 4096, 14336, 32, False),
        _par(4, 2, None, 2, True, 16384), mp_object=False, comm_overlap=False, hf_gated=True),
    "llama3_8b_64k_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-8B", "l. 387-465", _llama(32, 4096, 14336, 32, False),
        _par(4, 2, None, 4, True, 65536), mp_object=False, comm_overlap=False, hf_gated=True),
    "llama3_8b_128k_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-8B", "l. 468-546", _llama(32, 4096, 14336, 32, False),
        _par(4, 2, None, 8, True, 131072), mp_object=False, comm_overlap=False, hf_gated=True),
    "llama3_70b_16k_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-70B", "l. 748-834 (comm_overlap l. 827-830, mixed_precision bf16_mixed() l. 832)",
        _llama(80, 8192, 28672, 64, False), _par(8, 2, None, 2, True, 16384), mp_object=True, comm_overlap=True,
        ub_cfg=UB_H8192, hf_gated=True),
    "llama3_70b_64k_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3-70B", "l. 837-923 (comm_overlap l. 916-919, mixed_precision bf16_mixed() l. 921)",
        _llama(80, 8192, 28672, 64, False), _par(8, 4, None, 8, True, 65536), mp_object=True, comm_overlap=True,
        ub_cfg=UB_H8192, hf_gated=True),
    "llama31_8b_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3.1-8B", "l. 931-1011 (mixed_precision bf16_mixed() l. 1011)",
        _llama(32, 4096, 14336, 32, True), _par(1, 1, None, 2, False, 8192), mp_object=True, comm_overlap=False,
        hf_gated=True),
    "llama31_70b_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3.1-70B", "l. 1014-1100 (seq_length SEQUENCE_LENGTH_128K, comm_overlap l. 1093-1096)",
        _llama(80, 8192, 28672, 64, True), _par(4, 4, 5, 2, True, 131072), mp_object=True, comm_overlap=True,
        ub_cfg=UB_H8192, hf_gated=True),
    "llama31_405b_pretrain_config": Recipe(
        "meta-llama/Meta-Llama-3.1-405B", "l. 1103-1195 (account_for_* True l. 1132-1133, comm_overlap l. 1188-1191)",
        _llama(126, 16384, 53248, 128, True),
        _par(8, 8, 2, 4, True, 131072, model__account_for_embedding_in_pipeline_split=True,
             model__account_for_loss_in_pipeline_split=True), mp_object=True, comm_overlap=True, ub_cfg=UB_H16384,
        hf_gated=True),
}

# the MoE recipes (bridge_moe.py: DeepSeek-V3's two, Qwen3 MoE's two, gpt-oss's two)
RECIPES.update({name: Recipe(moe=True, **kw) for name, kw in bridge_moe.MOE_RECIPES.items()})

# the mixed-precision presets (training/mixed_precision.py @dc805f5cf, each a @register'ed function, its name the
# string mixed_precision takes): the fields the planner prices. bf16_mixed l. 171-184 (bf16, grad_reduce_in_fp32
# True); bf16_with_fp8_delayed_scaling_mixed l. 203-219 (hybrid, delayed, fp8_param_gather True);
# bf16_with_fp8_current_scaling_mixed l. 271-290 (hybrid, tensorwise, first_last_layers_bf16 with 1 and 1 layers,
# fp8_param_gather True); bf16_with_fp8_subchannel_scaling_mixed l. 359-372 (hybrid, blockwise, no param gather);
# MixedPrecisionConfig defaults l. 35-69 (fp8 None, fp8_recipe tensorwise, fp8_param_gather False, first_last_
# layers_bf16 False, 0 and 0 layers, grad_reduce_in_fp32 True)
MP_FIELDS = ("bf16", "fp16", "fp8", "fp8_recipe", "fp8_param_gather", "first_last_layers_bf16",
             "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16", "grad_reduce_in_fp32", "fp4",
             "reuse_grad_buf_for_mxfp8_param_ag")
MP_DEFAULT = {"bf16": False, "fp16": False, "fp8": None, "fp8_recipe": "tensorwise", "fp8_param_gather": False,
              "first_last_layers_bf16": False, "num_layers_at_start_in_bf16": 0, "num_layers_at_end_in_bf16": 0,
              "grad_reduce_in_fp32": True, "fp4": None, "reuse_grad_buf_for_mxfp8_param_ag": False}
_BF16 = dict(MP_DEFAULT, bf16=True)
MP_PRESETS = {
    "bf16_mixed": _BF16,
    "bf16_with_fp8_delayed_scaling_mixed": dict(_BF16, fp8="hybrid", fp8_recipe="delayed", fp8_param_gather=True),
    "bf16_with_fp8_current_scaling_mixed": dict(_BF16, fp8="hybrid", fp8_recipe="tensorwise", fp8_param_gather=True,
                                                first_last_layers_bf16=True, num_layers_at_start_in_bf16=1,
                                                num_layers_at_end_in_bf16=1),
    "bf16_with_fp8_subchannel_scaling_mixed": dict(_BF16, fp8="hybrid", fp8_recipe="blockwise"),
    # bf16_with_mxfp8_mixed l. 241-253 (e4m3, mxfp8, fp8_param_gather, reuse_grad_buf_for_mxfp8_param_ag True)
    "bf16_with_mxfp8_mixed": dict(_BF16, fp8="e4m3", fp8_recipe="mxfp8", fp8_param_gather=True,
                                  reuse_grad_buf_for_mxfp8_param_ag=True),
}

# the override keys the reader prices: COMMON's and RECIPES', comm_overlap.* and mixed_precision[.*] (ConfigContainer
# dot paths; each checked at @dc805f5cf: training/config.py TrainingConfig l. 660-708, GPTDatasetConfig.seq_length
# l. 451, DistributedInitConfig l. 125-161, Bridge's
# DistributedDataParallelConfig / OptimizerConfig over Megatron-Core's, l. 57-105; models/gpt_provider.py
# GPTModelProvider over Megatron-Core 905c0e386's TransformerConfig and ModelParallelConfig; comm_overlap.py
# CommOverlapConfig l. 375-397; mixed_precision.py MixedPrecisionConfig l. 28-69)
# keys with no effect on the plan's memory or time: read, listed as ignored (with why)
# the sharding tables (MFSDP_MODES strategy -> mode, its inverse MFSDP_STRATEGY, SHARDING_MODES) and the overrides of a
# mode: bridge_sharding.py, which check's suggestions (spelling.py) spell by without importing this reader
NO_EFFECT = {"checkpoint.ckpt_format": "the checkpoint files' format",
             # training/config.py @dc805f5cf CheckpointConfig l. 801, 816: directories (the save interval, which costs
             # time between steps, stays not modelled); TrainingConfig l. 753-757: the deprecated copies of
             # ValidationConfig's fields (tutorials/recipes/llama/conf/llama32_1b_pretrain.yaml l. 30-31 sets them)
             "checkpoint.save": "the directory checkpoints are saved to",
             "checkpoint.load": "the directory a checkpoint is loaded from",
             "train.eval_iters": "evaluation between steps, not a training step",
             "train.eval_interval": "evaluation between steps, not a training step"}
# whole sections and optimizer fields with no effect on a step's memory or time: listed as ignored, with why
# (training/config.py @dc805f5cf LoggerConfig l. 978, SchedulerConfig l. 561, RNGConfig l. 107, ValidationConfig
# l. 779: logging, the learning-rate schedule, seeds, the evaluation between steps; Adam's hyper-parameters)
NO_EFFECT_SECTIONS = {"logger.": "logging", "scheduler.": "the learning-rate schedule", "rng.": "seeds",
                      "validation.": "evaluation between steps, not a training step"}
NO_EFFECT_OPTIMIZER = ("optimizer.lr", "optimizer.min_lr", "optimizer.weight_decay", "optimizer.adam_beta1",
                       "optimizer.adam_beta2", "optimizer.adam_eps")
NO_EFFECT.update(bridge_moe.MOE_NO_EFFECT)  # and the MoE recipes' keys without effect (bridge_moe.py)


def recipe_for(model) -> Optional[str]:
    """The recipe whose model is `model` (a ModelSpec): every shape field equal (no name read); None if none."""
    return next(iter(recipes_for(model)), None)


def recipes_for(model) -> list[str]:
    """Every recipe whose model is `model`, in RECIPES' order (the base recipe first, then its variants)."""
    from . import _attr

    out = []
    for name, r in RECIPES.items():
        # a layer_pattern model only for a recipe whose shape names its per-layer windows (gpt-oss's) or layers
        # (Qwen3-Next's layer_mixers); all() stops at the first field that differs (num_layers first), so no model's
        # layers are listed unless the rest agree
        if (model.layer_pattern is None or {"layer_windows", "layer_mixers"} & set(r.shape)) \
                and (model.moe is not None) == r.moe \
                and all(_attr(model, a) == v for a, v in r.shape.items()):
            out.append(name)
    return out


class Script(NamedTuple):
    path: str                # in Bridge's repository
    recipe: Optional[str]    # the recipe it builds; None: --recipe names it
    options: dict            # its argparse options besides --recipe's: name -> takes a value
    yaml: str                # where it merges the --config-file YAML ("": it takes none)
    no_file: str = ""        # why a launch without --config-file is refused ("": it then merges none)


# the launches the reader reads (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf), by the script's file name. run_recipe.py
# lays the command-line overrides on the recipe, with no YAML file (parse_args l. 92-144 has no --config-file;
# scripts/training/README.md l. 63-65: "CLI overrides (highest), Recipe defaults (lowest)"). The scripts that take a
# YAML override file fix their recipe and merge the file between the recipe and the overrides:
# training/utils/omegaconf_utils.py process_config_with_overrides l. 99-154 (OmegaConf.merge of the file l. 136-143,
# then parse_hydra_overrides l. 145-148), which tutorials/recipes/llama/02_pretrain_with_yaml.py calls (l. 74-98,
# "Configuration Priority: 1. Command-line overrides, 2. YAML config file, 3. Base recipe defaults", l. 40-43), and
# examples/quantization/pretrain_quantized_llama3_8b.py does step by step (l. 171-194, the precedence l. 50-53)
SCRIPTS = {
    "run_recipe.py": Script(SCRIPT, None, {"--mode": True, "--step_func": True, "--peft_scheme": True,
                                           "--packed_sequence": False, "--seq_length": True, "--hf_path": True}, ""),
    "02_pretrain_with_yaml.py": Script("tutorials/recipes/llama/02_pretrain_with_yaml.py", "llama32_1b_pretrain_config",
                                       {"--config-file": True, "--debug": False}, "l. 74-79, 94-98"),
    "pretrain_quantized_llama3_8b.py": Script("examples/quantization/pretrain_quantized_llama3_8b.py",
                                              "llama3_8b_pretrain_config",
                                              {"--config-file": True, "--hf-path": True, "--debug": False},
                                              "l. 104-120, 171-194",
                                              # its default file (l. 104-108) sets checkpoint.pretrained_checkpoint to
                                              # a ModelOpt-quantized checkpoint, whose state it restores (l. 196-199)
                                              "it then merges its own conf/quantized_llama3_8b_pretrain_override_"
                                              "example.yaml (l. 104-108), which loads a quantized checkpoint "
                                              "(restore_modelopt_state, l. 196-199) the planner does not price"),
}
_SCRIPT_WORD = re.compile(r"(?:^|[\s/\"'])(" + "|".join(re.escape(n) for n in SCRIPTS) + r")(?=[\s\"';]|$)", re.M)


def _scripts_named(text: str) -> set[str]:
    """The SCRIPTS the text's lines name, its comment lines aside."""
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    return {m.group(1) for m in _SCRIPT_WORD.finditer(body)}


def is_launch_line(text: str) -> bool:
    """Whether the text runs Megatron-Bridge's run_recipe.py with --recipe, or one of the SCRIPTS that fix their
    recipe."""
    names = _scripts_named(text)
    return bool(names - {"run_recipe.py"}) or ("run_recipe.py" in names and "--recipe" in text)


# ------------------------------------------------------------------ reading
_TRUE, _FALSE = {"true", "True"}, {"false", "False"}


def _parse_value(raw: str):
    """A Hydra override value: null, true / false, an int, a float, a list [a,b], a dict {k:v,...} of such scalars,
    else the word (quotes taken off)."""
    s = raw.strip()
    if s.startswith("{") and s.endswith("}"):
        out = {}
        for item in (x for x in s[1:-1].split(",") if x.strip()):
            k, sep, v = item.partition(":")
            if not sep:
                raise ValueError(f"{item!r} is not key:value")
            out[k.strip()] = _parse_value(v)
        return out
    if s in ("null", "None", "~"):
        return None
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    if s.startswith("[") and s.endswith("]"):
        return [_parse_value(x) for x in s[1:-1].split(",") if x.strip()]
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


# Hydra 1.3.2 (Bridge's pin: pyproject.toml hydra-core >1.3,<=1.3.2; uv.lock 1.3.2), which parse_hydra_overrides
# (omegaconf_utils.py l. 157-181) runs: OverridesParser, then ConfigLoaderImpl._apply_overrides_to_config
# (hydra/_internal/config_loader_impl.py @v1.3.2 l. 336-399), on the config in struct mode (l. 174). Its forms:
# key=value changes a key the config holds (else "Could not override", l. 388-395); +key=value adds one, refused where
# the config holds a non-null value there, unless the value is a dict or list (l. 370-385); ++key=value adds or
# changes (l. 386-387); ~key and ~key=value delete (refused where the key is absent or null, or holds another value
# than the one named, l. 348-368). What a deletion leaves: Bridge lays the merged dict back on the recipe's
# ConfigContainer key by key, only the keys it holds (_apply_overrides l. 452-489), so a deleted key keeps the recipe's
# value; a key the ConfigContainer has not is skipped (l. 453-457).
_HYDRA_KEY = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*")
_NO_VALUE = object()


def _hydra_word(w: str, where: str) -> tuple[str, str, object]:
    """(form, key, value) of one override word: form 'set' (key=value), 'add' (+), 'force' (++), 'del' (~; value
    _NO_VALUE where none is named). A word Hydra reads otherwise (a sweep, an interpolation, a function, a config
    group or package) or that it refuses is an error naming it."""
    form, rest = ("del", w[1:]) if w.startswith("~") else ("force", w[2:]) if w.startswith("++") else \
        ("add", w[1:]) if w.startswith("+") else ("set", w)
    key, sep, raw = rest.partition("=")
    if not sep and form != "del":
        raise PlannerError(f"{where}{w!r}: neither a {SCRIPT} option nor a key=value override",
                           "give overrides as ConfigContainer dot paths: key=value, +key=value, ++key=value, ~key")
    if "@" in key or "/" in key:
        raise PlannerError(f"{where}{w}: a Hydra config group or package override, which Bridge's config has none of "
                           "(hydra config_loader_impl.py @v1.3.2 l. 338-343)", "give a ConfigContainer dot path: key=value")
    if not _HYDRA_KEY.fullmatch(key):
        raise PlannerError(f"{where}{w}: {key!r} is not a ConfigContainer dot path", "give key=value, e.g. train.micro_batch_size=2")
    if not sep:
        return form, key, _NO_VALUE
    depth, quote = 0, None
    for c in raw:  # Hydra's grammar: a comma outside brackets and quotes makes a sweep (a multirun choice)
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c == "," and depth == 0:
            raise PlannerError(f"{where}{w}: a Hydra sweep (a choice of values for --multirun), which Bridge's "
                               "parse_hydra_overrides cannot apply (omegaconf_utils.py l. 157-181)",
                               "give one value, or a list in brackets: key=[a,b]")
    if "${" in raw:
        raise PlannerError(f"{where}{w}: an OmegaConf interpolation, which the planner does not resolve",
                           "give the value itself")
    if re.match(r"\s*[A-Za-z_]\w*\(", raw):
        raise PlannerError(f"{where}{w}: a Hydra grammar function (choice, range, int, ...), which the planner does "
                           "not evaluate", "give the value itself")
    try:
        return form, key, _parse_value(raw)
    except ValueError as e:
        raise PlannerError(f"{where}{w}: {e}", "give a dict as {key:value,...}") from None


class _OmegaConfLoader(yaml.SafeLoader):
    """PyYAML's safe loader as OmegaConf.load reads a file (omry/omegaconf v2.3.0, Bridge's pin, omegaconf/_utils.py
    get_yaml_loader l. 136-176): a duplicate key refused, 1e-4 a float (its float resolver, copied), no timestamps."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"found duplicate key {key_node.value}", key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_OmegaConfLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
_OmegaConfLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in _OmegaConfLoader.yaml_implicit_resolvers.items()}


# how the --config-file refusals name the file (launch_files.launch_file: the heredoc, else the file beside the launch)
_CONFIG_FILE = Naming(noun="launch", field="--config-file",
                      in_heredoc="--config-file {name}, written by the launch's heredoc (line {line}),",
                      unset_hint="set them at the launch's top level",
                      missing_hint="put the YAML override file beside the launch",
                      read_hint="give the YAML override file the launch names")


def _yaml_overrides(name: str, launch: Path, heredocs: dict, where: str, ignored: list) -> tuple[str, list]:
    """(the file as shown, its keys as (key, value) in the file's order): the --config-file YAML, the launch's own
    heredoc for it or the file relative to the launch. OmegaConf.merge lays the file on the recipe's config key by key
    (a nested mapping into the section it names; a mapping with _target_ whole, as Bridge instantiates it:
    omegaconf_utils.py _apply_overrides l. 461-471), so each key is read as the command line's key=value."""
    shown, text = launch_file(name, launch, heredocs, where, _CONFIG_FILE)
    try:
        data = yaml.load(text, Loader=_OmegaConfLoader)
    except Exception as e:  # noqa: BLE001 - a YAML or constructor error, named with the file
        mark = getattr(e, "problem_mark", None)
        why = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
        raise PlannerError(f"{shown}: not YAML OmegaConf reads ({why}" + (f", line {mark.line + 1}" if mark else "") + ")",
                           "fix the YAML") from None
    if data is None:
        return shown, []
    if not isinstance(data, dict):
        raise PlannerError(f"{shown}: a YAML {type(data).__name__}, not a mapping of ConfigContainer sections, which "
                           "OmegaConf.merge cannot lay on the config (omegaconf_utils.py l. 141-142)",
                           "give sections: model:, train:, ...")
    out: list = []

    def check(v, key):
        if isinstance(v, str) and ("${" in v or v == "???"):
            raise PlannerError(f"{shown}: {key}: {v}: an OmegaConf interpolation or missing value, which the planner "
                               "does not resolve", "give the value itself")
        for x in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()):
            check(x, key)

    def walk(d: dict, prefix: str):
        for k, v in d.items():
            if not isinstance(k, str) or not _HYDRA_KEY.fullmatch(k) or "." in k:
                if isinstance(k, str) and "." in k and _HYDRA_KEY.fullmatch(k):
                    # OmegaConf keeps a dotted YAML key as one key, which no ConfigContainer field is: skipped
                    ignored.append(noted("ignored", f"{prefix}{k}", "a key with a dot: OmegaConf takes it as one "
                                         "key, no ConfigContainer field, which Bridge skips: omegaconf_utils.py "
                                         "l. 453-457; nest it as sections").labeled(str(shown)))
                    continue
                raise PlannerError(f"{shown}: key {prefix}{k!r} is not a ConfigContainer field name",
                                   "give sections of field names: model: {tensor_model_parallel_size: 2}")
            if isinstance(v, dict) and v and "_target_" not in v:
                walk(v, f"{prefix}{k}.")
            elif not (isinstance(v, dict) and not v):  # an empty mapping merges nothing
                check(v, prefix + k)
                out.append((prefix + k, v))

    walk(data, "")
    return shown, out


# a command whose first word is a Hydra override (`model.vocab_size=128256`): not a bash assignment (a dotted name is not
# an identifier: bash(1), DEFINITIONS "name" and PARAMETERS), so bash runs the word as a command name and the line never
# reaches the script: a continuation broken by a blank line, or an override above the launch line
_STRAY = re.compile(r"\s*([A-Za-z_]\w*(?:\.\w+)+)=\S*")


def _stray_overrides(text: str, where: str) -> None:
    """Refuse a command line that starts with a Hydra override (_STRAY): before 2026-12-07 the override lines after a
    blank line that ended the launch line's continuation, or above the launcher, were passed over silently (their
    keys moved no figure: tests/ignored_keys.py on a fuzz input, tests/data/fuzz_issue24/ignored-bridge-189-0.sh).
    The same class of check as megatron.command_words' refusal of a line that starts with a flag (which this reader
    runs too, through read_script_words), at another depth, so the two stay apart: this one scans the raw text, every
    command line, above the launcher too; command_words reads the expanded words of the lines after the launch line
    (a flag from `${ARGS[@]}`, which no text scan sees). This one in command_words would refuse a dotted word in a
    Megatron-LM script, which that reader passes over (no argument of pretrain_gpt.py is dotted: another command),
    and at command_words' depth an override above the launcher would pass again."""
    from .megatron import _join_continuations

    for no, line in _join_continuations(text):
        m = _STRAY.match(line)
        if m and not line.lstrip().startswith("#"):
            raise PlannerError(f"{where}line {no}: {m.group(0).strip()} starts a command: bash runs a dotted "
                               f"{m.group(1)}=... as a command name, not an assignment, so it never reaches the "
                               "launched script (a line continuation broken by a blank line, or an override above "
                               "the launcher?)",
                               "give the overrides on the launch line after the script's name, each line but "
                               "the last ending with `\\`")


def read(path: Path, text: Optional[str] = None, *, model: Optional[str] = None, gpus: Optional[int] = None,
         hardware: Optional[str] = None, job_options: Optional[dict] = None) -> TrainerConfig:
    """A launch of one of the SCRIPTS read into the planner's job fields: the recipe's values (RECIPES, COMMON), the
    --config-file YAML's keys laid on them, then the command line's overrides (process_config_with_overrides's order),
    each key read by one table (the loop below), then mapped to the job. job_options: the planner command line's job
    fields, which load_job lays over the file after (a refusal of the file's own DDP settings that they re-choose is
    not made: _rechosen)."""
    from .megatron import _launcher_gpus, read_nccl_env, read_script_words
    from . import match_catalog_model

    where = f"{path}: "
    split = read_script_words(path, text, where, "give a launch script of run_recipe.py")
    text, launch, words, _, assumed, heredocs = split[:6]
    names = _scripts_named(text)
    if not is_launch_line(text) or len(names) != 1:
        raise PlannerError(f"{where}no {SCRIPT} --recipe line found" if len(names) < 2 else
                           f"{where}launches of {', '.join(sorted(names))}: one launch a file",
                           f"give a launch of {SCRIPT} --recipe NAME key=value ...")
    script = SCRIPTS[names.pop()]
    _stray_overrides(text, where)
    # command_words splits at the script word: launch holds the launcher's words, words the script's
    ignored: list[str] = []
    not_modelled: list[str] = []
    recipe, ops, config_file = script.recipe, [], None
    i = 0
    while i < len(words):
        w = words[i]
        opt, eq, val = w.partition("=") if w.startswith("--") else (w, "", "")
        if opt == "--recipe" and script.recipe is None:
            if not eq and i + 1 < len(words):
                val, i = words[i + 1], i + 1
            recipe = val
        elif opt == "--config-file" and script.yaml:
            if not eq and i + 1 < len(words):
                val, i = words[i + 1], i + 1
            config_file = val
        elif opt == "--config-file":  # parse_known_args hands it to Hydra's parser, which refuses it
            raise PlannerError(f"{where}--config-file: {script.path} ({BRIDGE}) takes no YAML file ("
                               "parse_args l. 92-144; scripts/training/README.md l. 63-65): the word "
                               "reaches Hydra's override parser, which refuses it",
                               "give the file's keys as key=value overrides, or launch a script that merges the file: "
                               + ", ".join(f"{x.path} ({x.recipe})" for x in SCRIPTS.values() if x.yaml))
        elif opt in script.options and script.recipe is not None:
            if script.options[opt] and not eq:
                val, i = (words[i + 1] if i + 1 < len(words) else None), i + 1
            if opt == "--debug":
                ignored.append(noted("ignored", "--debug", f"{script.path}: debug logging"))
            else:  # --hf-path (pretrain_quantized_llama3_8b.py l. 159-165): the recipe's model replaced
                raise PlannerError(f"{where}{opt} {val}: {script.path} then builds the model provider from that "
                                   "checkpoint's config (AutoBridge.from_hf_pretrained(path).to_megatron_provider(), "
                                   "l. 159-165), not the recipe's model settings the planner transcribes", f"drop {opt}")
        elif opt in script.options:
            if opt == "--packed_sequence":
                val = True
            elif not eq:
                val, i = (words[i + 1] if i + 1 < len(words) else None), i + 1
            if opt in ("--seq_length", "--packed_sequence", "--peft_scheme", "--hf_path"):
                # load_recipe passes each only to a recipe function whose signature takes it (run_recipe.py
                # l. 180-208); the transcribed recipes take none (llama3.py: `def llama3_8b_pretrain_config()`)
                ignored.append(listed("ignored", opt, val, "run_recipe.py hands it only to a recipe that takes it; the "
                                      "transcribed recipes take no argument", str))
            elif opt == "--step_func" and val == "gpt_step" or opt == "--mode" and val == "pretrain":
                ignored.append(listed("ignored", opt, val,
                                      "run_recipe.py's default for a pretrain recipe, l. 222-249", str))
            else:
                raise PlannerError(f"{where}{opt} {val}: the planner prices a GPT pre-training step "
                                   "(--mode pretrain, --step_func gpt_step) only", f"drop {opt}")
        elif w.startswith("--"):
            valid = (["--recipe"] if script.recipe is None else []) + list(script.options) + \
                (["--config-file"] if script.yaml and "--config-file" not in script.options else [])
            raise PlannerError(f"{where}{opt}: not an option of {script.path} ({BRIDGE})",
                               f"valid: {', '.join(valid)}, then key=value overrides")
        else:
            ops.append((*_hydra_word(w, where), w))
        i += 1
    if recipe is None:
        raise PlannerError(f"{where}{SCRIPT} without --recipe", "name the recipe: --recipe llama3_8b_pretrain_config")
    if config_file is None and script.no_file:
        raise PlannerError(f"{where}{script.path} without --config-file: {script.no_file}",
                           "name the YAML override file: --config-file FILE")
    if recipe in bridge_moe.NOT_TRANSCRIBED:
        why, hint = bridge_moe.NOT_TRANSCRIBED[recipe]
        raise PlannerError(f"{where}--recipe {recipe}: not a recipe the planner transcribes ({BRIDGE} {why})", hint)
    if recipe not in RECIPES:
        raise PlannerError(f"{where}--recipe {recipe}: not a recipe the planner transcribes ({BRIDGE} {L3}, {L2})"
                           if script.recipe is None else
                           f"{where}{script.path} builds recipe {recipe}, which the planner does not transcribe "
                           f"({BRIDGE} {L3}, {L2})", f"one of: {', '.join(RECIPES)} ({bridge_moe.NO_LLAMA4})")
    yaml_ops: list = []
    if config_file is not None:
        shown, keys = _yaml_overrides(config_file, Path(path), heredocs, where, ignored)
        yaml_ops = [("merge", k, v, shown) for k, v in keys]
        assumed.append(listed("assumed", "--config-file", shown,
                              "its keys laid on the recipe's config, then the command line's "
                              f"overrides ({script.path} {script.yaml}; training/utils/omegaconf_utils.py "
                              "process_config_with_overrides l. 135-148)", spaced=True))
    rec = RECIPES[recipe]
    cfg = dict(COMMON)
    cfg.update(rec.values)
    cfg.update(_vocab_values(rec))
    cfg["mixed_precision"] = rec.mp_name if not rec.mp_object else None
    # bf16_mixed(), as a string or an object, or the recipe's preset (its name) or fields
    mp = dict(MP_PRESETS[rec.mp_name], **(rec.mp or {}))
    co = {"tp_comm_overlap": rec.co_tp} if rec.comm_overlap else None
    hw = None
    if rec.moe:  # the recipe's own apply_flex_dispatcher_backend, on the launch's GPU (bridge_moe.py)
        from ..catalog import load_hardware
        from ..schema import Job

        hw = load_hardware(hardware or Job.model_fields["hardware"].default)
        if rec.applies_flex:
            bridge_moe.apply_recipe_flex(cfg, recipe, hw, where, assumed)
        if co is not None:  # deepseek_v3.py l. 169-170 (the recipes with a CommOverlapConfig)
            co.update({f: False for f in bridge_moe.MOE_CO_FIELDS})
    assumed.append(listed("assumed", "recipe", recipe,
                          f"its values ({BRIDGE} {rec.file} {rec.lines}; recipes/common.py _pretrain_common), "
                          "then the overrides", spaced=True))
    overrides, source = _lay(yaml_ops + ops, _recipe_values(cfg, mp, co, rec), where, assumed, ignored)
    for k, v in overrides.items():
        # (a key the YAML file gave is named with the file)
        wk = f"{where}{source[k]}: " if source[k] else where
        if k == "mixed_precision":
            if rec.mp_object:
                raise PlannerError(f"{wk}mixed_precision={v}: recipe {recipe} holds a MixedPrecisionConfig "
                                   "(bf16_mixed()), which Hydra cannot replace by a name",
                                   "override its fields: mixed_precision.fp8=hybrid mixed_precision.fp8_recipe=...")
            # register() files each preset under its name and with hyphens (mixed_precision.py l. 154-168)
            name = v.replace("-", "_") if isinstance(v, str) else None
            if name not in MP_PRESETS:
                raise PlannerError(f"{wk}mixed_precision={v}: not a preset the planner prices",
                                   f"one of: {', '.join(MP_PRESETS)} (training/mixed_precision.py)")
            mp = dict(MP_PRESETS[name])
        elif k.startswith("mixed_precision."):
            f = k.split(".", 1)[1]
            if not rec.mp_object:
                raise PlannerError(f"{wk}{k}: recipe {recipe} holds mixed_precision as a name ('bf16_mixed'), "
                                   "which has no fields to override", "name a preset: mixed_precision=NAME")
            if f in MP_FIELDS:
                mp[f] = v
            else:
                not_modelled.append(listed("not_modelled", k, v, "a MixedPrecisionConfig field the planner "
                                           "does not price", _v, source[k]))
        elif k == "comm_overlap":
            if v is None:
                co = None
            elif isinstance(v, dict) and v.get("_target_") == COMM_OVERLAP_TARGET:
                # merged into the recipe's CommOverlapConfig where it has one (+ and ++: Hydra's update with merge=True
                # and force_add, config_loader_impl.py @v1.3.2 l. 374, 387; the YAML: OmegaConf.merge; the plain form is
                # refused there, _lay), and Bridge instantiates the merged dict, the recipe's fields under the given
                # (omegaconf_utils.py _apply_overrides l. 461-471)
                co = {**(co or {}), **{f: x for f, x in v.items() if f != "_target_"}}
                if "tp_comm_overlap" not in co:  # CommOverlapConfig's one field without a default (comm_overlap.py l. 382)
                    raise PlannerError(f"{wk}comm_overlap={_v(v)}: no tp_comm_overlap, which CommOverlapConfig "
                                       "requires (training/comm_overlap.py l. 382)",
                                       "add tp_comm_overlap:true or tp_comm_overlap:false to the dict")
            else:
                raise PlannerError(f"{wk}comm_overlap={_v(v)}: neither null nor a dict with _target_ "
                                   f"{COMM_OVERLAP_TARGET}", "give comm_overlap={_target_:" + COMM_OVERLAP_TARGET +
                                   ",tp_comm_overlap:true} (quoted in the shell), or null")
            unknown = sorted(set(co or ()) - {"tp_comm_overlap", "overlap_p2p_comm", "batch_p2p_comm",
                                               "overlap_grad_reduce", "overlap_param_gather", "bucket_size",
                                               *(bridge_moe.MOE_CO_FIELDS if rec.moe else ())})
            not_modelled += [listed("not_modelled", f"comm_overlap.{f}", co[f], "a CommOverlapConfig field the "
                                    "planner does not read", _v, source[k]) for f in unknown]
        elif k.startswith("comm_overlap."):
            if co is None:
                raise PlannerError(f"{wk}{k}: recipe {recipe} has comm_overlap None ({rec.file} {rec.lines}), "
                                   "which an override cannot fill", "drop it")
            co[k.split(".", 1)[1]] = v
            if k.split(".", 1)[1] not in ("tp_comm_overlap", "overlap_p2p_comm", "batch_p2p_comm",
                                          "overlap_grad_reduce", "overlap_param_gather", "bucket_size",
                                          *(bridge_moe.MOE_CO_FIELDS if rec.moe else ())):
                not_modelled.append(listed("not_modelled", k, v, "a CommOverlapConfig field the planner "
                                           "does not read", _v, source[k]))
        elif k in PROPERTIES:  # below, after the fields
            continue
        elif (k == "peft" and v is not None) or k.startswith("peft."):
            # ConfigContainer.peft (training/config.py @dc805f5cf l. 1412; _peft_common's LoRA, recipes/common.py
            # l. 326): an adapter over frozen base weights, which then hold no gradients nor optimizer states; the
            # planner prices every weight trained, so it refuses rather than price a full fine-tuning
            raise PlannerError(f"{wk}{k}={_v(v)}: a PEFT adapter (ConfigContainer.peft, training/config.py l. 1412) "
                               "trains adapters over frozen base weights (no gradients or optimizer states for them), "
                               f"which the planner's {FMT} reader does not price", f"drop {k}: the planner prices "
                               "pre-training, every weight trained")
        elif k == "peft":
            ignored.append(listed("ignored", k, v, "no adapter: every weight trained, as priced", _v, source[k]))
        elif k in ABSENT_FIELDS:  # added by + / ++ or a YAML file (key=value is refused: _lay)
            ignored.append(listed("ignored", k, v, f"{ABSENT_FIELDS[k][0]}: Bridge's _apply_overrides skips a key its "
                                  "ConfigContainer lacks (omegaconf_utils.py @dc805f5cf l. 453-457), so it has no "
                                  "effect", _v, source[k]))
        elif k in NO_EFFECT:
            ignored.append(listed("ignored", k, v, NO_EFFECT[k], _v, source[k]))
            cfg[k] = v
        elif k in NO_EFFECT_OPTIMIZER or any(k.startswith(p) for p in NO_EFFECT_SECTIONS):
            why = next((w for p, w in NO_EFFECT_SECTIONS.items() if k.startswith(p)), "an Adam hyper-parameter")
            ignored.append(listed("ignored", k, v, f"{why}: no effect on a step's memory or time", _v, source[k]))
        elif k in cfg:
            cfg[k] = v
        else:
            not_modelled.append(listed("not_modelled", k, v, "an override the planner does not read: its "
                                       "effect is not priced", _v, source[k]))
    for k, field in PROPERTIES.items():
        if k in overrides:
            if field in overrides and overrides[field] != overrides[k]:
                assumed.append(listed("assumed", field, overrides[k], f"{k}'s, a property Bridge sets after the "
                                      f"field ({field}={_v(overrides[field])}): it lays the merged dict back key by key, "
                                      "the added key last (omegaconf_utils.py _apply_overrides l. 452-489)", _v))
            cfg[field] = overrides[k]
    # where the run's values go: the mixed-precision config over the model / ddp, comm_overlap over both
    file_gpus = _launcher_gpus(list(launch), where)
    # soft: --gpus replaces the launch's count, as for a Megatron-LM script (its node count comes from the scheduler)
    g = resolve_gpus(where, file_gpus, "torchrun --nproc_per_node x --nnodes", gpus, soft=True, assumed=assumed)
    if g is None:
        raise PlannerError(f"{where}the launch does not give the GPU count", "pass --gpus N")
    if "ddp.grad_reduce_in_fp32" in overrides and overrides["ddp.grad_reduce_in_fp32"] != mp["grad_reduce_in_fp32"]:
        assumed.append(listed("assumed", "ddp.grad_reduce_in_fp32", _v(mp['grad_reduce_in_fp32']),
                              "the mixed-precision config's, which "
                              "Bridge lays over the ddp config (mixed_precision.py update_config_with_precision_overrides "
                              "l. 125-151), not the override's"))
    _check_field_types(mp, co, where)
    cfg["ddp.grad_reduce_in_fp32"] = mp["grad_reduce_in_fp32"]
    if co is not None:
        _comm_overlap(cfg, co, g, assumed, not_modelled)
    job = _job(cfg, mp, co, where, assumed, ignored, not_modelled, g, job_options)
    _mp_unread(overrides, source, mp, where, assumed, ignored)
    _stated_unread(overrides, source, cfg, co, ignored)
    if job["tp_comm_overlap"] and rec.ub_cfg and "comm_overlap" not in overrides:
        assumed.append(noted("assumed", "comm_overlap.tp_comm_overlap_cfg", f"the recipe's {rec.ub_cfg} {UB_NOTE}"))
    # the model: the recipe's (its shape), checked against --model
    shape = {a: (a, v) for a, v in rec.shape.items()}
    if model is not None:
        check_model_shape(where, model, {f"--recipe {recipe} ({a})": (a, v) for a, v in rec.shape.items()})
        job["model"] = model
    else:
        name, rule = match_catalog_model(where, shape, f"recipe {recipe}'s model ({rec.hf_id})")
        job["model"] = name
        assumed.append(rule)
    _dropout_job(cfg, job["model"], model is not None, where)
    # the rows, checked against the recipe's tokenizer and the catalog model's tokens
    _vocab_rows(cfg, rec, "model.vocab_size" in overrides, job, where, assumed, ignored, not_modelled)
    job["gpus"] = g
    if hardware is not None:
        job["hardware"] = hardware
    job["stack"] = STACK
    if rec.moe:  # the MoE settings (bridge_moe.py), on the model priced
        from ..catalog import load_model

        spec = load_model(job["model"])
        bridge_moe.moe_job(cfg, co, job, spec, hw, where, assumed, ignored, not_modelled)
        bridge_moe.gdn_job(spec, job, where)
    from ..catalog import load_model

    uneven_split(job, load_model(job["model"]).num_layers, where)  # after moe_job, which refuses them beside a layout
    _cp_job(cfg, job, where, ignored)
    if "model.softmax_type" in cfg:  # the gpt-oss recipes' per-token loss and sinks (bridge_moe.py)
        bridge_moe.gpt_oss_job(cfg, where, not_modelled)
    read_nccl_env(split.env, job, assumed)  # the launch line's NCCL environment (the export writes it:
    # export._megatron_bridge)
    _deterministic_nccl_algo(job, where, assumed)
    stated = {"train.global_batch_size": cfg["train.global_batch_size"], "train.micro_batch_size": cfg["train.micro_batch_size"]}
    # the gather's overlap as the config resolves it, whatever mode the plan runs (TrainerConfig.param_gather):
    # ddp.overlap_param_gather, under dist_muon with optimizer.overlap_param_gather (the layer-wise optimizer's
    # async_allgather, muon.py @905c0e386 l. 347-354); _job checked both are true / false where it read them
    layer_wise = BRIDGE_OPTIMIZERS[cfg["optimizer.optimizer"]][1]
    gather = cfg["ddp.overlap_param_gather"] is True and (not layer_wise or cfg["optimizer.overlap_param_gather"] is True)
    return TrainerConfig(job=job, fmt=FMT, ignored=ignored, assumed=assumed, not_modelled=not_modelled, stated=stated,
                         param_gather=gather, param_gather_key="ddp. and optimizer.overlap_param_gather" if layer_wise
                         else "ddp.overlap_param_gather")



# Bridge's deterministic mode asserts NCCL_ALGO set, to exactly one of these (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# src/megatron/bridge/training/config.py _validate_and_apply_deterministic_mode l. 1463-1466; added by f003cd8ca,
# 2025-10-27, #968); read by _deterministic_nccl_algo and the export (export._bridge_nccl_algo)
BRIDGE_DETERMINISTIC_NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")
_NCCL_ASSERT = ("ConfigContainer._validate_and_apply_deterministic_mode (training/config.py @dc805f5cf l. 1463-1466) "
                "asserts os.getenv('NCCL_ALGO') set and one of " + ", ".join(BRIDGE_DETERMINISTIC_NCCL_ALGOS)
                + " ('NCCL_ALGO must be one of ...'), compared whole")


def _deterministic_nccl_algo(job: dict, where: str, assumed: list) -> None:
    """Under model.deterministic_mode true, the launch line's NCCL_ALGO (the job's nccl_algo, read_nccl_algo) as
    Bridge's start-up asserts it: one of BRIDGE_DETERMINISTIC_NCCL_ALGOS, the whole value (a list such as Ring,Tree
    or a per-function spec is refused); a launch that sets none is listed as assumed (the launcher's environment
    must set it: the script cannot say), priced with NCCL's own choice (Bridge's pinned Megatron-Core 905c0e386 sets
    none: stack runs.deterministic_nccl_algo null)."""
    if not job.get("deterministic_mode"):
        return
    algo = job.get("nccl_algo")
    if algo is None:
        assumed.append(listed("assumed", "model.deterministic_mode", True,
                              f"the launch line sets no NCCL_ALGO, which Bridge's {_NCCL_ASSERT}: the launcher's "
                              "environment must set it (not read here); the collectives priced with NCCL's own choice"))
    elif algo not in BRIDGE_DETERMINISTIC_NCCL_ALGOS:
        raise PlannerError(f"{where}model.deterministic_mode=true with NCCL_ALGO={algo}: Bridge's {_NCCL_ASSERT}",
                           f"export NCCL_ALGO as one of {', '.join(BRIDGE_DETERMINISTIC_NCCL_ALGOS)} (Ring: "
                           "Megatron-LM's own deterministic default, determinism.py @d98e8a64 l. 27-31), or drop "
                           "model.deterministic_mode")


def _dropout_job(cfg: dict, model_name: str, given: bool, where: str) -> None:
    """model.hidden_dropout / model.attention_dropout (COMMON: the providers' 0.0) against the model priced: its
    probabilities where it has dropout (ModelSpec hidden_dropout / attention_dropout; null: Megatron-Core's 0.1,
    megatron_model.DEFAULT_DROPOUT, as export._dropout writes it), else 0 each. The model carries them (a ModelSpec
    field, no job field): a file whose probabilities differ is refused, naming both (a --model with the file's
    dropout; without --model the recipe's catalog model, which has none)."""
    from ..catalog import load_model
    from .megatron_model import DEFAULT_DROPOUT

    spec = load_model(model_name)
    for key, attr in (("model.hidden_dropout", "hidden_dropout"), ("model.attention_dropout", "attention_dropout")):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise PlannerError(f"{where}{key}={_v(v)}: a dropout probability is a number in [0, 1)",
                               f"give {key} as a probability (the provider's is 0.0)")
        p = getattr(spec, attr)  # as export._dropout writes it: the model's, else Megatron-Core's 0.1 where dropout
        have = float(p if p is not None else DEFAULT_DROPOUT if spec.dropout else 0.0)
        if float(v) != have:
            whose = f"--model {model_name}" if given else f"the recipe's model {model_name} (matched by shape)"
            raise PlannerError(f"{where}{key}={_v(v)} contradicts {whose} ({attr} {have}{'' if spec.dropout else ', dropout false'})",
                               f"give a model (--model, a model YAML) whose {attr} is {float(v)}, or set {key} to {have}")


def _cp_job(cfg: dict, job: dict, where: str, ignored: list) -> None:
    """model.cp_comm_type (TransformerConfig @905c0e386 l. 806-810; None is p2p, transformer_engine.py l. 1445-1446)
    as the job's cp_comm_type (planner/cp_comm_type.py) where cp > 1 and it is not p2p, ignored at cp 1 (Megatron-Core
    hands the attention no variant without CP, l. 1433-1457); a2a+p2p with model.hierarchical_context_parallel_sizes
    as the job's hierarchical_cp_sizes (the sizes beside another variant, or at cp 1, listed as ignored: only a2a+p2p
    reads them, transformer_engine.py l. 1447-1454); a per-layer list is refused, named."""
    v, sizes = cfg["model.cp_comm_type"], cfg["model.hierarchical_context_parallel_sizes"]
    if v is not None and (not isinstance(v, str) or v not in CP_COMM_TYPES):
        raise PlannerError(f"{where}model.cp_comm_type={_v(v)}: not a context-parallel variant the planner's "
                           "megatron-bridge reader reads (a per-layer list is not)", f"valid: {', '.join(CP_COMM_TYPES)}, null")
    if sizes is not None and (not isinstance(sizes, list) or len(sizes) != 2
                              or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in sizes)):
        raise PlannerError(f"{where}model.hierarchical_context_parallel_sizes={_v(sizes)}: not two positive whole numbers "
                           "(the all-to-all group's and the ring's ranks)",
                           "e.g. model.hierarchical_context_parallel_sizes=[2,2]")
    if job["cp"] > 1 and v == "a2a+p2p" and sizes is None:
        raise PlannerError(f"{where}model.cp_comm_type=a2a+p2p without model.hierarchical_context_parallel_sizes: "
                           "Megatron-Core builds the hierarchical groups only from those sizes (parallel_state.py "
                           "@905c0e386 l. 987-1000), so the attention gets none (transformer_engine.py l. 1447-1454)",
                           "give model.hierarchical_context_parallel_sizes=[A,P] with A x P = context_parallel_size")
    if job["cp"] > 1 and v is not None and v != "p2p":
        job["cp_comm_type"] = v
        if v == "a2a+p2p":
            job["hierarchical_cp_sizes"] = list(sizes)
    elif job["cp"] == 1 and v is not None:
        ignored.append(listed("ignored", "model.cp_comm_type", v,
                              "context_parallel_size 1: no context parallelism", str))
    if sizes is not None and "hierarchical_cp_sizes" not in job:
        ignored.append(listed("ignored", "model.hierarchical_context_parallel_sizes", sizes,
                              "read by model.cp_comm_type "
                              "a2a+p2p only, at context_parallel_size > 1", _v))


def _rechosen(job_options: Optional[dict], job: dict) -> bool:
    """Whether the command line's job options (cli/core.py load_job's, flags beating the file) run the file's DDP
    overlap settings off the path _hooks_without_gather refuses: another stack (another trainer), the job's
    dp_param_gather_overlap itself (false replaces the file's ddp.overlap_param_gather, named by cli/core.
    command_line_param_gather; true is the gather hidden, under DDP refused by rule MEGATRON_PARAM_GATHER), or Adam at
    a sharding level or mode other than none / ddp (the distributed optimizer or an FSDP; Muon at zero1 is the
    layer-wise optimizer, which still reads the file's optimizer.overlap_param_gather)."""
    opts = job_options or {}
    if opts.get("stack") not in (None, STACK) or opts.get("dp_param_gather_overlap") is not None:
        return True
    sharding = opts.get("sharding_mode") or opts.get("sharding") or job["sharding"]
    return opts.get("optimizer", job.get("optimizer", "adam")) != "muon" and sharding not in ("none", "ddp")


def _hooks_without_gather(where: str, layer_wise: bool) -> PlannerError:
    """ddp.overlap_param_gather true under Megatron-Core's DDP without the distributed optimizer, and without the
    layer-wise optimizer's async all-gather (dist_muon with optimizer.overlap_param_gather): nothing refuses it at
    start-up (neither Bridge @dc805f5cf's ConfigContainer.validate nor Megatron-Core 905c0e386's configs check the
    pair; Megatron-LM's validate_args does, arguments.py @d98e8a64 l. 1024-1029), but the run fails at its first
    forward: DistributedDataParallel registers the forward pre-hooks for it (distributed_data_parallel.py
    @905c0e386 l. 353-356), whose finish_param_sync (l. 388-418) starts the bucket group's parameter all-gather
    (param_and_grad_buffer.py l. 427-446), which without the distributed optimizer takes the layer-wise optimizer's
    path (l. 318-336) and reads each bucket's layerwise_param_flat_sizes: None unless LayerWiseDistributedOptimizer
    set them, which it does only with async_allgather (layer_wise_optimizer.py l. 67-72, 159-192; muon.py l. 347-354:
    optimizer.overlap_param_gather), so max(None) raises a TypeError. NVIDIA's Kimi-K2 Muon recipe turns the field
    off for this ('Muon requires both off', recipes/kimi/kimi_k2.py @dc805f5cf l. 190-199)."""
    what = ("under dist_muon without optimizer.overlap_param_gather (the layer-wise optimizer's async all-gather)"
            if layer_wise else "without the distributed optimizer (ddp.use_distributed_optimizer false)")
    return PlannerError(
        f"{where}ddp.overlap_param_gather=true {what}: the run fails at its first forward, though nothing checks the "
        "pair at start-up (Megatron-Core 905c0e386 DistributedDataParallel's forward pre-hook starts the parameter "
        "all-gather, which "
        "without the distributed optimizer takes the layer-wise optimizer's path and reads the buckets' "
        "layerwise_param_flat_sizes, set only by its async all-gather: param_and_grad_buffer.py l. 318-336, 427-446, "
        "layer_wise_optimizer.py l. 67-72; a TypeError). NVIDIA's Kimi-K2 Muon recipe turns it off: 'Muon requires "
        "both off' (recipes/kimi/kimi_k2.py @dc805f5cf l. 190-199)",
        "add ddp.overlap_param_gather=false" + (" (or optimizer.overlap_param_gather=true: the gather deferred to the "
                                                 "forward)" if layer_wise else
                                                 " (or use the distributed optimizer: ddp.use_distributed_optimizer="
                                                 "true)"))


def _optimizer_job(cfg: dict, job: dict, dist: bool, fsdp: bool, mp: dict, where: str, assumed: list, flag) -> bool:
    """optimizer.optimizer as the job's optimizer (BRIDGE_OPTIMIZERS); whether it runs the layer-wise distributed
    optimizer. Muon as Megatron-Core 905c0e386 builds it for Bridge (get_megatron_muon_optimizer, muon.py l. 165-355):
    refused beside the distributed optimizer (l. 192-193: 'muon with dist optimizer is not supported.'; Bridge keeps
    ddp. and optimizer.use_distributed_optimizer in step, training/config.py l. 1944-1966, so both must be false),
    fp16 (l. 195-196) and, not priced here, Megatron-FSDP / torch FSDP2 (Megatron-LM asserts them off, arguments.py
    @d98e8a64 l. 1738-1739) and the precision-aware optimizer (muon.py l. 207: not supported). muon: every rank holds
    its momentum (the job's optimizer muon under DDP, memory.py [mu]); dist_muon: LayerWiseDistributedOptimizer
    (l. 343-354), which at 905c0e386 hands each parameter whole to one dp x cp rank, sorted by size in ping-pong order
    (layer_wise_optimizer.py l. 105-150; no precomputed layout, which Megatron-LM @d98e8a64 added): the megatron
    stack's zero1 Muon on its legacy path (optimizer_whole_tensors, --no-use-layer-wise-param-layout)."""
    opt = cfg["optimizer.optimizer"]
    if not isinstance(opt, str) or opt not in BRIDGE_OPTIMIZERS:
        raise PlannerError(f"{where}optimizer.optimizer={_shown(opt)}: not an optimizer the planner's {FMT} reader prices",
                           f"valid: {', '.join(BRIDGE_OPTIMIZERS)} (training/optim.py @dc805f5cf l. 69-84)")
    name, layer_wise = BRIDGE_OPTIMIZERS[opt]
    mode, prec = cfg["optimizer.muon_tp_mode"], cfg["optimizer.muon_fp32_matmul_prec"]
    steps = cfg["optimizer.muon_num_ns_steps"]
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise PlannerError(f"{where}optimizer.muon_num_ns_steps={_shown(steps)}: not a whole number of Newton-Schulz "
                           "steps (OptimizerConfig.muon_num_ns_steps: int, optimizer_config.py @905c0e386 l. 275)",
                           "give a whole number, e.g. optimizer.muon_num_ns_steps=5")
    if name == "adam":
        if steps != 5:
            assumed.append(listed("assumed", "optimizer.muon_num_ns_steps", steps,
                                  "Muon's Newton-Schulz steps, no effect under optimizer.optimizer="
                                  f"{opt} (no Newton-Schulz)"))
        if not flag("optimizer.muon_split_qkv"):
            assumed.append(listed("assumed", "optimizer.muon_split_qkv", False,
                                  "Muon's q / k / v split, no effect under optimizer.optimizer="
                                  f"{opt} (no Newton-Schulz)"))
        if mode != "blockwise":
            assumed.append(listed("assumed", "optimizer.muon_tp_mode", _shown(mode),
                                  "Muon's TP mode, no effect under optimizer.optimizer="
                                  f"{opt} (no Newton-Schulz)"))
        if prec != "medium":
            assumed.append(listed("assumed", "optimizer.muon_fp32_matmul_prec", _shown(prec),
                                  "Muon's Newton-Schulz precision, no effect under optimizer.optimizer="
                                  f"{opt} (no Newton-Schulz)"))
        return False
    # 905c0e386's TensorParallelMuon takes the three (muon.py l. 62, 87: newton_schulz_tp's mode, Emerging-Optimizers
    # v0.1.0 muon_utils.py l. 164-226, which runs distributed as v0.3.0 does: step.py [28])
    if mode not in ("blockwise", "duplicated", "distributed"):
        raise PlannerError(f"{where}optimizer.muon_tp_mode={_shown(mode)}: not a Muon TP mode Megatron-Core 905c0e386 "
                           "runs (Emerging-Optimizers v0.1.0 newton_schulz_tp raises 'Invalid mode', muon_utils.py l. 224)",
                           "valid: blockwise, duplicated, distributed (optimizer_config.py l. 277-278, muon.py l. 62)")
    if steps < 1:
        raise PlannerError(f"{where}optimizer.muon_num_ns_steps={steps}: Megatron-Core 905c0e386's TensorParallelMuon "
                           "raises 'num_ns_steps must be at least 1' (optimizer/muon.py l. 64-65)",
                           "give at least 1 (the default is 5)")
    if prec not in ("low", "medium", "high"):  # Megatron-LM's choices (arguments.py @d98e8a64 l. 2640-2642)
        raise PlannerError(f"{where}optimizer.muon_fp32_matmul_prec={_shown(prec)}: not a precision the planner prices",
                           "valid: low, medium, high (torch.set_float32_matmul_precision: 'highest', 'high', 'medium'; "
                           "low is no setting torch knows, which keeps its default)")
    if dist:
        raise PlannerError(f"{where}optimizer.optimizer={opt} with the distributed optimizer (ddp. / optimizer."
                           "use_distributed_optimizer true, the recipes' value): Megatron-Core 905c0e386 raises 'muon with "
                           "dist optimizer is not supported.' (optimizer/muon.py l. 192-193)",
                           "add ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false"
                           + ("" if layer_wise else " (optimizer.optimizer=dist_muon shards Muon layer-wise)"))
    if fsdp:
        raise PlannerError(f"{where}optimizer.optimizer={opt} under Megatron-FSDP or torch FSDP2: not priced (Megatron-LM "
                           "asserts emerging optimizers off them, arguments.py @d98e8a64 l. 1738-1739)",
                           "use Muon with DDP (muon) or its layer-wise distributed optimizer (dist_muon)")
    if flag("optimizer.use_precision_aware_optimizer"):
        raise PlannerError(f"{where}optimizer.optimizer={opt} with optimizer.use_precision_aware_optimizer=true: Megatron-Core "
                           "905c0e386's Muon does not support the precision-aware optimizer (optimizer/muon.py l. 207)",
                           "add optimizer.use_precision_aware_optimizer=false")
    if mp.get("fp16"):  # (refused below for every optimizer too)
        raise PlannerError(f"{where}optimizer.optimizer={opt} with fp16: muon.py @905c0e386 l. 195-196 raises",
                           "use a bf16 preset")
    job["optimizer"] = "muon"
    if mode != "blockwise":  # the stack's default is blockwise (stack_db megatron-bridge runs.optimizers)
        job["muon_tp_mode"] = mode
    if prec != "medium":  # the job's muon_fp32_matmul_prec (step.py [28])
        job["muon_fp32_matmul_prec"] = prec
    if steps != 5:  # the job's muon_ns_steps (step.py [28]; plan._optimizer refuses what Emerging-Optimizers v0.1.0 does)
        job["muon_ns_steps"] = steps
    if not flag("optimizer.muon_split_qkv"):  # linear_qkv orthogonalized whole (muon.py @905c0e386 l. 136)
        job["muon_split_qkv"] = False
    if layer_wise:
        job["sharding_mode"], job["sharding"], job["optimizer_whole_tensors"] = "distributed_optimizer", "zero1", True
        assumed.append(listed("assumed", "optimizer.optimizer", opt,
                              "Muon's LayerWiseDistributedOptimizer (muon.py @905c0e386 l. 343-354), "
                              "each parameter whole on one dp x cp rank by size in ping-pong order (layer_wise_optimizer.py "
                              "l. 105-150), priced as the megatron stack's zero1 Muon on its legacy path (optimizer_whole_tensors)"))
    return layer_wise


def _recipe_values(cfg: dict, mp: dict, co, rec: Recipe) -> dict:
    """The recipe's values of the keys the reader reads, by dot path (what Hydra's ~ and + check against): its
    ConfigContainer values, mixed_precision (a preset's name, or a MixedPrecisionConfig and its fields) and
    comm_overlap (None, or a CommOverlapConfig and its fields)."""
    base = dict(cfg)
    base["mixed_precision"] = dict(mp) if rec.mp_object else rec.mp_name
    base.update({f"mixed_precision.{f}": x for f, x in mp.items()} if rec.mp_object else {})
    base["comm_overlap"] = dict(co) if co is not None else None
    base.update({f"comm_overlap.{f}": co.get(f) for f in CO_TYPES} if co is not None else {})
    return base


# ConfigContainer properties an override reaches through their setters: no field, so no key of the dict Bridge
# merges until a YAML file or a + override adds one; Bridge lays the dict back key by key in its order, the added key
# after the fields, so the property's value is the field's whatever the field's own override (omegaconf_utils.py
# _apply_overrides l. 452-489). GPTDatasetConfig.seq_length over Megatron-Core's sequence_length (training/config.py
# @dc805f5cf l. 450-457)
PROPERTIES = {"dataset.seq_length": "dataset.sequence_length"}


# Keys of Megatron-Core's configs that Bridge's pinned 905c0e386 does not have (git grep on NVIDIA/Megatron-LM), each
# with the later commit that added it and what that commit does with it: key=value is refused by Hydra ('Could not
# override': config_loader_impl.py @v1.3.2 l. 388-395, the config in struct mode); +key / ++key add it to the merged
# dict, and Bridge's _apply_overrides skips a key its ConfigContainer lacks (omegaconf_utils.py @dc805f5cf l. 453-457:
# "Key '...' in overrides not found in config object ... Skipping."), listed as ignored (_lay, read)
ABSENT_FIELDS = {
    "optimizer.muon_use_syrk": (
        "Megatron-Core 905c0e386's OptimizerConfig has no muon_use_syrk (optimizer_config.py l. 258-282, the Muon "
        "fields); Megatron-LM added it in fa8319589e (2026-08-10, #6381), whose TensorParallelMuon raises 'use_syrk "
        "requires emerging_optimizers >= 0.4.0.dev0' (@d98e8a64 megatron/core/optimizer/emerging_optimizers.py "
        "l. 52-56, 202-207), and the Emerging-Optimizers 905c0e386 pins is v0.1.0 (pyproject.toml l. 210), whose "
        "newton_schulz_tp has no use_syrk (muon_utils.py v0.1.0 l. 164-226)",
        "drop optimizer.muon_use_syrk (the planner prices the pinned v0.1.0's GEMMs)"),
}


def _lay(ops: list, base: dict, where: str, assumed: list, ignored: list) -> tuple[dict, dict]:
    """The overrides the run lays on the recipe, key -> value in their order, and key -> the YAML file that gave it
    ("" for the command line): the --config-file YAML's keys (form 'merge': OmegaConf.merge adds or replaces any key),
    then the command line's Hydra forms as Hydra 1.3.2 applies them (_hydra_word), checked against the values the
    run's config holds at that point (base: the recipe's; the overrides before)."""
    overrides: dict = {}
    source: dict = {}
    deleted: set = set()

    def under(k, roots):
        return any(k == r or k.startswith(r + ".") for r in roots)

    todo = list(reversed(ops))
    while todo:
        form, k, v, src = todo.pop()
        if k in overrides:
            known, cur = True, overrides[k]
        elif any(x.startswith(k + ".") for x in overrides):
            known, cur = True, {}  # a section
        elif under(k, deleted) or k in PROPERTIES:  # (a property: no key of the merged dict until one is added)
            known, cur = True, None
        elif k in base:
            known, cur = True, base[k]
        elif any(x.startswith(k + ".") for x in base):
            known, cur = True, {}
        else:
            known, cur = False, None
        if k in ABSENT_FIELDS and form == "set" and not known:
            why, hint = ABSENT_FIELDS[k]
            raise PlannerError(f"{where}{src}: {why}; Hydra changes no key the config does not hold ('Could not "
                               "override': config_loader_impl.py @v1.3.2 l. 388-395)", hint)
        if form == "del":
            if known and cur is None:
                raise PlannerError(f"{where}{src}: the run's config holds {k} as null or not at all, and Hydra refuses "
                                   "to delete it ('Could not delete from config': hydra config_loader_impl.py @v1.3.2 "
                                   "l. 349-354)", f"drop {src}")
            if known and v is not _NO_VALUE and v != cur:
                raise PlannerError(f"{where}{src}: the run's config holds {k}={_v(cur)}, not {_v(v)}, and Hydra refuses "
                                   "the deletion (l. 355-360)", f"give ~{k}")
            for x in [x for x in overrides if under(x, {k})]:
                del overrides[x]
                source.pop(x, None)
            deleted.add(k)
            if known:
                was = _v(base[k]) if k in base and not isinstance(base[k], dict) else "its section's values"
                assumed.append(noted("assumed", src,
                                     f"{k} deleted from the merged config, so the recipe's value stands ({was}): Bridge "
                                     "lays back only the keys the dict holds (omegaconf_utils.py _apply_overrides l. 452-489)"))
            else:
                ignored.append(noted("ignored", src, "a key the planner does not read: Hydra deletes it where the "
                                     "recipe's config holds it, and the recipe's value stands; it refuses the deletion "
                                     "otherwise"))
            continue
        if form == "set" and k in PROPERTIES and k not in overrides:
            raise PlannerError(f"{where}{src}: {k} is a property of the dataset config, not a field, so the merged "
                               "config holds no such key, and Hydra changes no key the config does not hold ('Could "
                               "not override': config_loader_impl.py @v1.3.2 l. 388-395; Bridge's dict holds the "
                               f"dataclass fields only: omegaconf_utils.py l. 268-287; training/config.py l. 450-457)",
                               f"give {PROPERTIES[k]}={src.split('=', 1)[1]}")
        if form == "set" and under(k, deleted):
            raise PlannerError(f"{where}{src}: {k} was deleted by an earlier ~ override, and Hydra changes no key the "
                               "config does not hold ('Could not override': config_loader_impl.py @v1.3.2 l. 388-395)",
                               f"give +{src}")
        if form != "del" and isinstance(v, dict) and v and "_target_" not in v and isinstance(cur, dict):
            # a dict into a section or config: merged key by key (OmegaConf.update merge=True, omegaconf.py @v2.3.0
            # l. 731-737; + and ++ with force_add), so read as its keys, each as the command line's key=value
            todo += [("force" if form == "add" else form, f"{k}.{f}", x, src) for f, x in reversed(list(v.items()))]
            continue
        if form == "set" and isinstance(v, dict) and "_target_" in v and isinstance(cur, dict):
            # OmegaConf.update merges a dict into the config node it names (omegaconf.py @v2.3.0 l. 731-737), and in
            # struct mode a key the node lacks, _target_ (no dataclass field), is refused (dictconfig.py l. 149-166)
            raise PlannerError(f"{where}{src}: the run's config holds {k} as a config, into which Hydra merges the dict, "
                               "and struct mode refuses its _target_ key (omegaconf.py @v2.3.0 update l. 731-737, "
                               "dictconfig.py _validate_get l. 149-166)",
                               f"give +{src} to merge it into the recipe's (or set its fields: {k}.FIELD=...)")
        if form == "add" and known and cur is not None and not isinstance(v, (dict, list)):
            raise PlannerError(f"{where}{src}: the run's config already holds {k}"
                               f"{'' if isinstance(cur, dict) else '=' + _v(cur)}, and Hydra refuses + on it ('Could "
                               "not append to config': config_loader_impl.py @v1.3.2 l. 370-385)",
                               f"give {src[1:]} (or +{src})")
        deleted.discard(k)
        if k in overrides:
            if source.get(k) and form != "merge":
                assumed.append(noted("assumed", k,
                                     f"{_v(overrides[k])} in {source[k]}, then {_v(v)} on the command line: the command "
                                     "line's stands (process_config_with_overrides merges the file, then applies the "
                                     "overrides: omegaconf_utils.py l. 135-148)"))
            else:
                # Hydra applies the overrides in their order (ConfigLoaderImpl._apply_overrides_to_config, called by
                # omegaconf_utils.py parse_hydra_overrides l. 157-181): the last value stands, in the last one's place
                assumed.append(Note(f"{k} given twice ({_v(overrides[k])}, then {_v(v)})", "assumed",
                                    ((k, read_value(_v(v))),), "the last stands, as Hydra applies the overrides in order"))
            del overrides[k]
        overrides[k] = v
        source[k] = src if form == "merge" else ""
    return overrides, source

# the field types the reader reads (mixed_precision.py @dc805f5cf MixedPrecisionConfig l. 35-69; comm_overlap.py
# CommOverlapConfig l. 382-391): (type, whether None is allowed)
MP_TYPES = {"bf16": (bool, False), "fp16": (bool, False), "fp8": (str, True), "fp8_recipe": (str, False),
            "fp8_param_gather": (bool, False), "first_last_layers_bf16": (bool, False),
            "num_layers_at_start_in_bf16": (int, False), "num_layers_at_end_in_bf16": (int, False),
            "grad_reduce_in_fp32": (bool, False), "fp4": (str, True), "reuse_grad_buf_for_mxfp8_param_ag": (bool, False)}
CO_TYPES = {"tp_comm_overlap": (bool, False), "overlap_p2p_comm": (bool, True), "batch_p2p_comm": (bool, True),
            "overlap_grad_reduce": (bool, True), "overlap_param_gather": (bool, True), "bucket_size": (int, True),
            "overlap_moe_expert_parallel_comm": (bool, True), "delay_wgrad_compute": (bool, True)}


# the MixedPrecisionConfig fields Megatron-Core reads only under fp8 (NVIDIA/Megatron-LM @905c0e386
# transformer_config.py l. 1086-1114: the recipe and the bf16 ends validated under `if self.fp8`; fp8_utils.py l. 513-526
# and 651: the ends kept bf16 inside the fp8 context; Bridge's reuse_grad_buf_for_mxfp8_param_ag acts on fp8 weights
# gathered, mixed_precision.py @dc805f5cf l. 87-93), and those read only with first_last_layers_bf16 (fp8_utils.py
# l. 515-519)
FP8_ONLY_MP = ("fp8_recipe", "first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16",
               "reuse_grad_buf_for_mxfp8_param_ag")
BF16_ENDS_MP = ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")


def _mp_unread(overrides: dict, source: dict, mp: dict, where: str, assumed: list, ignored: list) -> None:
    """The mixed-precision overrides the run does not read, said so (before 2026-12-07 each moved nothing and said
    nothing: tests/ignored_keys.py): without fp8 (mixed_precision.fp8 null) the FP8_ONLY_MP fields are listed as ignored
    and fp8_param_gather true is refused, as Megatron-Core refuses fp8 parameters without fp8 (Bridge keeps fp8_param
    equal to fp8_param_gather, mixed_precision.py @dc805f5cf l. 74-85; transformer_config.py @905c0e386 l. 1125-1126:
    'fp8_param must be used together with fp8 mode'); under fp8 without first_last_layers_bf16 the bf16 layer counts
    are listed as ignored; neither bf16 nor fp16 (fp32 training) is priced as bf16, listed as assumed as the Megatron
    reader lists a script with neither --bf16 nor --fp16."""
    def stated(f):
        return f"mixed_precision.{f}" in overrides

    def src(f):
        return source.get(f"mixed_precision.{f}")
    if not mp.get("fp8"):
        if mp.get("fp8_param_gather") and stated("fp8_param_gather"):
            raise PlannerError(f"{where}mixed_precision.fp8_param_gather=true without mixed_precision.fp8: Megatron-Core "
                               "refuses fp8 parameters without fp8 training (transformer_config.py @905c0e386 l. 1125-1126)",
                               "set mixed_precision.fp8=hybrid (or e4m3), or mixed_precision.fp8_param_gather=false")
        for f in FP8_ONLY_MP:
            if stated(f):
                ignored.append(listed("ignored", f"mixed_precision.{f}", mp[f], "mixed_precision.fp8 null: no fp8 "
                                      "recipe is built, Megatron-Core reads the field only under fp8", _v, src(f)))
    elif not mp.get("first_last_layers_bf16"):
        for f in BF16_ENDS_MP:
            if stated(f):
                ignored.append(listed("ignored", f"mixed_precision.{f}", mp[f], "first_last_layers_bf16 false: "
                                      "every layer in fp8 (fp8_utils.py l. 515-519)", _v, src(f)))
    if not mp.get("bf16") and not mp.get("fp16") and (stated("bf16") or "mixed_precision" in overrides):
        assumed.append(listed("assumed", "precision", "bf16", "mixed_precision bf16 and fp16 false: fp32 training, "
                              "not modelled (priced as bf16)"))


def _stated_unread(overrides: dict, source: dict, cfg: dict, co, ignored: list) -> None:
    """Overrides the run replaces or never reads, listed as ignored (before 2026-12-07 each moved nothing and said
    nothing: tests/ignored_keys.py): with a CommOverlapConfig, the model's overlap_p2p_comm / batch_p2p_comm, which its
    setup replaces (training/comm_overlap.py @dc805f5cf setup l. 613-614, _get_model_comm_overlap_cfgs l. 420-461), and
    under the distributed optimizer the ddp's overlap_grad_reduce / overlap_param_gather (setup l. 630-640,
    _get_optimizer_overlap_cfgs l. 560-580; _comm_overlap lays both); model.cross_entropy_fusion_impl without
    model.cross_entropy_loss_fusion (Megatron-Core reads the kernel's choice only for the fused loss:
    language_module.py @905c0e386 l. 141-165; _job); a false
    ddp. / optimizer.use_distributed_optimizer or ddp. / dist.use_megatron_fsdp beside its pair's true;
    ddp.data_parallel_sharding_strategy without Megatron-FSDP."""
    replaced = []
    if co is not None:
        replaced += ["model.overlap_p2p_comm", "model.batch_p2p_comm"]
        if cfg.get("ddp.use_distributed_optimizer") is True:
            replaced += ["ddp.overlap_grad_reduce", "ddp.overlap_param_gather"]
    for k in replaced:
        if k in overrides:
            ignored.append(listed("ignored", k, overrides[k], f"the CommOverlapConfig replaces it ({cfg[k]} read: "
                                  "training/comm_overlap.py setup)", _v, source.get(k)))
    # the pairs ConfigContainer turns on together, either one true (training/config.py @dc805f5cf l. 1537-1540: Megatron
    # FSDP; l. 1944-1966: the distributed optimizer): a false one beside a true one is not read
    for pair, lines in ((("ddp.use_megatron_fsdp", "dist.use_megatron_fsdp"), "l. 1537-1540"),
                        (("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"), "l. 1944-1966")):
        for k, other in (pair, pair[::-1]):
            if overrides.get(k) is False and cfg.get(other) is True:
                ignored.append(listed("ignored", k, False, f"{other} true turns both on (training/config.py "
                                      f"{lines})", _v, source.get(k)))
    k = "ddp.data_parallel_sharding_strategy"  # Megatron-FSDP's alone (megatron/core/distributed/fsdp/, 905c0e386)
    if k in overrides and not (cfg.get("ddp.use_megatron_fsdp") is True or cfg.get("dist.use_megatron_fsdp") is True):
        ignored.append(listed("ignored", k, overrides[k], "no Megatron-FSDP: only Megatron-FSDP reads the strategy", _v,
                              source.get(k)))
    k = "model.cross_entropy_fusion_impl"
    if k in overrides and cfg.get("model.cross_entropy_loss_fusion") is False:
        ignored.append(listed("ignored", k, overrides[k], "model.cross_entropy_loss_fusion false: the unfused loss",
                              _v, source.get(k)))


def _count(v: int) -> str:
    """A count as an error names it: a long one by its digits."""
    return f"{v:,}" if len(str(v)) <= 24 else f"({len(str(v))} digits)"


def _shown(v) -> str:
    """A value as an error names it: a string quoted (the quoted `'8'` of a launch is the string 8, not the count)."""
    return repr(v) if isinstance(v, str) else _v(v)


def _check_field_types(mp: dict, co, where: str) -> None:
    """The mixed-precision and comm-overlap fields the reader reads, of their dataclass's type (a bool true or
    false, a count a whole number >= 0, a name a string; None where the field is Optional), else an error naming
    the override."""
    for section, fields, types in (("mixed_precision", mp, MP_TYPES), ("comm_overlap", co or {}, CO_TYPES)):
        for f, (typ, nullable) in types.items():
            if f not in fields:
                continue
            v = fields[f]
            if v is None and nullable:
                continue
            ok = isinstance(v, typ) and (typ is bool or not isinstance(v, bool)) and (typ is not int or v >= 0)
            if not ok:
                want = {bool: "true or false", int: "a whole number >= 0", str: "a name"}[typ]
                raise PlannerError(f"{where}{section}.{f}={_shown(v)}: not {want}" + (" or null" if nullable else ""),
                                   f"give {section}.{f} as {want}" + (" (or null)" if nullable else ""))


def _comm_overlap(cfg: dict, co: dict, gpus: int, assumed: list, not_modelled: list) -> None:
    """A recipe's CommOverlapConfig laid on the model's and ddp's values as Bridge's setup does
    (training/comm_overlap.py @dc805f5cf): its own defaults, then the user's non-None fields (_override_user_cfgs
    l. 590-598) replace the model's p2p flags (_get_model_comm_overlap_cfgs l. 453-461: pp > 1 overlaps the p2p
    under vpp > 1, batches it otherwise; off at pp 1) and the ddp overlap (_get_optimizer_overlap_cfgs: both on
    where the data-parallel size exceeds 1, both off otherwise)."""
    ints = [cfg[k] for k in ("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
                              "model.context_parallel_size")]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in ints):
        return  # _job names the bad count
    tp, pp, cp = ints
    vpp = cfg["model.virtual_pipeline_model_parallel_size"]
    if vpp is not None and not (isinstance(vpp, int) and not isinstance(vpp, bool) and vpp > 0):
        return  # _job names the bad count
    vpp = vpp or 1
    dp = gpus // (tp * pp * cp)
    if dp < 1:
        return  # more model-parallel ranks than GPUs: the job's check names it (a 400-digit CP had overflowed below)
    # the data-parallel part only under the ddp config's own use_distributed_optimizer (setup l. 631-640: 'Data
    # parallel overlap is only available with the Megatron DDP and Distributed optimizer'; setup runs before
    # ConfigContainer.validate syncs the optimizer's, config.py l. 1936-1941): else the ddp config's own overlap fields
    dist = cfg["ddp.use_distributed_optimizer"] is True
    own = {"overlap_p2p_comm": pp > 1 and vpp > 1, "batch_p2p_comm": pp > 1 and not vpp > 1,
           **({"overlap_grad_reduce": dp > 1, "overlap_param_gather": dp > 1} if dist else {})}
    for f, v in own.items():
        val = co.get(f) if co.get(f) is not None else v
        cfg[("model." if "p2p" in f else "ddp.") + f] = val
    assumed.append(noted("assumed", "comm_overlap",
                         "the recipe's CommOverlapConfig sets the p2p and data-parallel overlap "
                         "(training/comm_overlap.py), its stated fields over its own defaults" if dist else
                         "the recipe's CommOverlapConfig sets the p2p overlap (training/comm_overlap.py), its stated "
                         "fields over its own defaults; not the data-parallel overlap, which it sets only under "
                         "ddp.use_distributed_optimizer (l. 631-640): the ddp config's own"))
    if not dist:
        return  # nor the DDP bucket (_get_optimizer_overlap_cfgs' bucket_size)
    # and the DDP bucket: 128 Mi parameters where dp > 1 (_get_optimizer_overlap_cfgs l. 560-580), else Megatron-Core's
    # max(40e6, 1e6 x dp x cp) (distributed_data_parallel.py @905c0e386 l. 64-65), which the stack prices
    from ..catalog import load_stack

    fs = load_stack(STACK).fsdp
    priced = max(fs.ddp_bucket_params, fs.ddp_bucket_params_per_dp_rank * dp * cp)
    bucket = co.get("bucket_size") if co.get("bucket_size") is not None else (128 * 1024 * 1024 if dp > 1 else None)
    whose = f"the CommOverlapConfig's{' stated' if co.get('bucket_size') is not None else ''} bucket_size"
    strat = cfg["ddp.data_parallel_sharding_strategy"]
    if bucket is not None and (cfg["ddp.use_megatron_fsdp"] is True or cfg["dist.use_megatron_fsdp"] is True) \
            and isinstance(strat, str) and strat in MFSDP_MODES:
        not_modelled.extend(_mfsdp_bucket(bucket, whose, strat, priced))
    elif bucket is not None and bucket != priced:
        not_modelled.append(listed("not_modelled", "DDP bucket", bucket, f"{whose}; priced at Megatron-Core's "
                                   f"{priced:,.0f}: the data-parallel collectives' count", show=f"{bucket:,} parameters",
                                   spaced=True))


def _mfsdp_buffers(cfg: dict, job: dict, mfsdp: bool, where: str, assumed: list, ignored: list,
                   not_modelled: list) -> None:
    """ddp.fsdp_double_buffer, ddp.nccl_ub and ddp.outer_dp_sharding_strategy (Megatron-Core 905c0e386
    distributed_data_parallel_config.py l. 100, 117, 142), as the Megatron reader reads Megatron-LM's flags
    (megatron._mfsdp_settings):
    - under Megatron-FSDP, ddp.fsdp_double_buffer true, or ddp.nccl_ub true, which sets it (megatron_fsdp/
      param_and_grad_buffer.py @905c0e386 l. 1663-1670: 'the user buffer registration requires (non-dynamic)
      persistent memory, it always uses fsdp double buffer'), is the job's mfsdp_double_buffer: the FixedPoolAllocator
      pools of two units, fsdp_params and fsdp_grads (l. 1969-2003), the prefetch stopped at the second unit
      (need_skip_prefetch l. 3811-3845) and the reduce-scatter queue drained to two (_enforce_double_buffer_limit
      l. 3327, 3404), as d98e8a64's (planner/memory.py [db]); without Megatron-FSDP, fsdp_double_buffer is not read (ignored) and nccl_ub registers Megatron-Core
      DDP's buffers in NCCL's pool (the same bytes: not modelled, as the Megatron reader lists --use-nccl-ub);
    - ddp.outer_dp_sharding_strategy optim under HSDP (ddp.num_distributed_optimizer_instances > 1 at
      optim_grads_params) is the job's mfsdp_outer_optim (param_and_grad_buffer.py @905c0e386 l. 1944-1961,
      2172-2241: the master and Adam's moments over dp x cp, memory.py [oo]); without HSDP it is not read
      (should_create_hfsdp_wbuf_and_gbuf needs use_hybrid_fsdp, l. 1946-1949): ignored; another value than no_shard
      / optim is refused (the field's docstring, l. 142-146: 'Valid values are no_shard, optim')."""
    db, ub, outer = cfg["ddp.fsdp_double_buffer"], cfg["ddp.nccl_ub"], cfg["ddp.outer_dp_sharding_strategy"]
    if outer not in ("no_shard", "optim"):
        raise PlannerError(f"{where}ddp.outer_dp_sharding_strategy={_v(outer)}: not one of Megatron-Core's values",
                           "valid: no_shard, optim (distributed_data_parallel_config.py @905c0e386 l. 142-146)")
    for k, v in (("ddp.fsdp_double_buffer", db), ("ddp.nccl_ub", ub)):
        if not isinstance(v, bool):
            raise PlannerError(f"{where}{k}={_v(v)}: not a boolean", f"give {k}=true or {k}=false")
    if not mfsdp:
        if db:
            ignored.append(listed("ignored", "ddp.fsdp_double_buffer", True, "no Megatron-FSDP: only it reads it", _v))
        if ub:
            not_modelled.append(listed("not_modelled", "ddp.nccl_ub", True, "without Megatron-FSDP: Megatron-Core "
                                       "DDP's buffers allocated from NCCL's memory pool; the same bytes, priced from "
                                       "the default allocator", _v))
        if outer != "no_shard":
            ignored.append(listed("ignored", "ddp.outer_dp_sharding_strategy", outer, "no Megatron-FSDP: only its "
                                  "HSDP reads it", _v))
        return
    if outer == "optim":
        if job.get("sharding") == "hsdp":
            job["mfsdp_outer_optim"] = True
            assumed.append(listed("assumed", "mfsdp_outer_optim", True,
                                  "ddp.outer_dp_sharding_strategy=optim under HSDP: the fp32 main "
                                  "weights and Adam's moments over dp x cp, the 16-bit weights and main gradients in the shard "
                                  "group's buffers (Megatron-Core 905c0e386 megatron_fsdp/param_and_grad_buffer.py "
                                  "l. 1944-1961, 2172-2241; planner/memory.py [oo], step.py [29])"))
        else:
            ignored.append(listed("ignored", "ddp.outer_dp_sharding_strategy", "optim", "no HSDP (ddp.num_distributed_"
                                  "optimizer_instances 1): Megatron-FSDP reads it only under hybrid FSDP, "
                                  "param_and_grad_buffer.py @905c0e386 l. 1946-1949", _v))
    if db or ub:  # (no_shard is not a strategy the reader takes: bridge_sharding.MFSDP_MODES)
        job["mfsdp_double_buffer"] = True
        why = "ddp.fsdp_double_buffer=true" if db else "ddp.nccl_ub=true, which sets it (l. 1663-1670)"
        assumed.append(listed("assumed", "mfsdp_double_buffer", True,
                              f"{why}: Megatron-FSDP's fixed pools, two persistent buffers of a "
                              "layer unit's gathered weights and two of its gradient bucket (Megatron-Core 905c0e386 "
                              "megatron_fsdp/param_and_grad_buffer.py l. 1969-2003; planner/memory.py [db])"
                              + ("; ddp.nccl_ub allocates every Megatron-FSDP buffer from NCCL's memory pool, a private pool "
                              "of the caching allocator: counted in the allocated and reserved peaks" if ub else "")))


def _mfsdp_bucket(bucket: int, whose: str, strat: str, priced: float) -> list[str]:
    """The DDP bucket under Megatron-FSDP, which reads it too (not without effect): Megatron-Core 905c0e386's
    FullyShardedDataParallel takes ddp_config.bucket_size (mcore_fsdp_adapter.py l. 112-114; megatron_fsdp.py
    l. 269-271, 355: BucketingPolicy.suggested_bucket_size) and cuts by it the parameter groups outside its FSDP units
    into buckets of at least that many parameters, one collective each (megatron_fsdp/param_and_grad_buffer.py
    l. 1474-1486: group.fsdp_unit_id is None); under optim / optim_grads it builds no units (mcore_fsdp_adapter.py
    l. 117-123), so every group is cut, and sizes its reduce-scatter queue max(1e9, the bucket) (megatron_fsdp.py
    l. 384-407); under optim_grads_params the units are the TransformerLayers and the queue twice the average unit.
    Priced: optim / optim_grads as the distributed optimizer, in Megatron-Core DDP's buckets (listed only where the
    bucket differs); optim_grads_params one collective per FSDP unit (a layer), whatever the bucket."""
    if MFSDP_MODES[strat][1] == "fsdp":
        return [listed("not_modelled", "DDP bucket", bucket, f"{whose}; Megatron-FSDP {strat} cuts by it only the "
                       "parameters outside its FSDP units, the embedding, final norm and output layer, one collective a "
                       "bucket: megatron_fsdp/param_and_grad_buffer.py @905c0e386 l. 1474-1486, megatron_fsdp.py "
                       "l. 269-271, 355; priced one collective per FSDP unit, a layer, whatever the bucket",
                       show=f"{bucket:,} parameters", spaced=True)]
    if bucket == priced:
        return []
    return [listed("not_modelled", "DDP bucket", bucket, f"{whose}; Megatron-FSDP {strat} builds no FSDP units at "
                   "905c0e386 (mcore_fsdp_adapter.py l. 117-123) and cuts every parameter group by it, one "
                   "reduce-scatter a bucket (megatron_fsdp/param_and_grad_buffer.py l. 1474-1486), its reduce-scatter "
                   f"queue max(1e9, it) (megatron_fsdp.py l. 384-407); priced at Megatron-Core DDP's {priced:,.0f}: the "
                   "data-parallel collectives' count", show=f"{bucket:,} parameters", spaced=True)]


def _divisible_by(vocab: int) -> int:
    """The provider's make_vocab_size_divisible_by: the largest power of 2 up to 128 that divides the Hugging Face
    config's vocab_size (models/conversion/model_bridge.py @dc805f5cf l. 421-425, 1092-1120)."""
    base = 128
    while vocab % base:
        base //= 2
    return base


def _recipe_divisor(rec: Recipe) -> int:
    """The recipe's provider's make_vocab_size_divisible_by: its bridge's own where it sets one (the recipe's values:
    DeepSeek-V2's 3,200, deepseek_v2_bridge.py @dc805f5cf l. 77), else _divisible_by of the config's vocab_size."""
    return rec.values.get("model.make_vocab_size_divisible_by") or _divisible_by(rec.shape["vocab_size"])


def _vocab_values(rec: Recipe) -> dict:
    """The recipe's vocabulary keys: the provider's vocab_size, the Hugging Face config's (model_bridge.py l. 259
    ("vocab_size", "vocab_size"): a held value, not null, so Hydra's +model.vocab_size is refused), its
    make_vocab_size_divisible_by, and the tokenizer the recipe sets (NULL_TOKENIZER_VOCAB, HF_TOKENIZER_VOCAB)."""
    v = rec.shape["vocab_size"]
    return {"model.vocab_size": v, "model.make_vocab_size_divisible_by": _recipe_divisor(rec),
            "tokenizer.tokenizer_type": "HuggingFaceTokenizer" if rec.hf_tokenizer else "NullTokenizer",
            "tokenizer.tokenizer_model": rec.hf_id if rec.hf_tokenizer else None,
            "tokenizer.vocab_size": None if rec.hf_tokenizer else NULL_TOKENIZER_VOCAB}


def _vocab_rows(cfg: dict, rec: Recipe, given: bool, job: dict, where: str, assumed: list, ignored: list,
                not_modelled: list) -> None:
    """The embedding's rows as Bridge sets them at start-up (SETUP_VOCAB): the tokenizer's size T (the NullTokenizer's
    tokenizer.vocab_size; the recipe's Hugging Face tokenizer's length, HF_TOKENIZER_VOCAB); model.vocab_size V of at
    least T builds V rows unpadded (should_pad_vocab False), fewer is refused (ValueError, l. 486-490); V null builds T
    padded to a multiple of make_vocab_size_divisible_by x tp (should_pad_vocab True: models/gpt_provider.py l. 244-250,
    utils/vocab_utils.py l. 57-71). job padded_vocab_size: V where an override gives it, else the padded T where it
    is null; absent where V stands at the provider's (the model's own rows). Rows below the catalog model's vocab_size
    but at least its tokenizer's tokens (Qwen3: 151,669 <= V < 151,936), which Bridge builds, are priced as built
    (plan.with_padded_vocab, ModelSpec.tokenizer_vocab_size)."""
    def count(k, v):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > MAX_COUNT:
            raise PlannerError(f"{where}{k}={_v(v)}: not a count", f"give {k} as a whole number up to {MAX_COUNT:,}")
        return v

    kind, name, nv = cfg["tokenizer.tokenizer_type"], cfg["tokenizer.tokenizer_model"], cfg["tokenizer.vocab_size"]
    tokens, what = None, ""
    if kind == "NullTokenizer":
        if nv is None:  # build_tokenizer then passes no vocab_size (tokenizer.py l. 79-80), which NullTokenizer requires
            raise PlannerError(f"{where}tokenizer.tokenizer_type=NullTokenizer without tokenizer.vocab_size: Megatron-Core's "
                               "NullTokenizer takes its size from it (null_tokenizer.py @905c0e386 l. 14-16)",
                               f"give tokenizer.vocab_size, e.g. {NULL_TOKENIZER_VOCAB}")
        tokens = count("tokenizer.vocab_size", nv)
        what = f"the NullTokenizer's {tokens:,} tokens (tokenizer.vocab_size)"
        if name is not None:
            ignored.append(listed("ignored", "tokenizer.tokenizer_model", name, "the NullTokenizer reads only "
                                  "tokenizer.vocab_size: training/tokenizers/tokenizer.py l. 77-80", _v))
    elif kind == "HuggingFaceTokenizer" and name in HF_TOKENIZER_VOCAB:
        tokens = HF_TOKENIZER_VOCAB[name]
        what = f"the Hugging Face tokenizer {name}'s {tokens:,} tokens (len(tokenizer))"
        if nv is not None:
            ignored.append(listed("ignored", "tokenizer.vocab_size", nv, "a HuggingFaceTokenizer is read whole: "
                                  "training/tokenizers/tokenizer.py l. 58-66 passes no vocab_size", _v))
    # the catalog model's own tokens (its tokenizer_vocab_size where its vocab_size pads beyond its tokenizer:
    # Qwen3's 151,669 in 151,936 rows), the fewest rows plan.with_padded_vocab prices
    from ..catalog import load_model
    model = load_model(job["model"])
    own, own_is_tokens = model.tokenizer_vocab_size or model.vocab_size, model.tokenizer_vocab_size is not None
    rows = cfg["model.vocab_size"]
    if tokens is None:  # another tokenizer: its size, which Bridge checks the rows against, is not known here
        if rows is None:
            raise PlannerError(f"{where}model.vocab_size=null with tokenizer {_v(kind)} {_v(name)}: Bridge builds that "
                               f"tokenizer's size in rows ({SETUP_VOCAB}), which the planner does not know",
                               "give model.vocab_size: the rows the run builds")
        not_modelled.append(noted("not_modelled", f"tokenizer {_v(kind)} {_v(name)}", f"its size, which Bridge "
                                  f"requires model.vocab_size={rows} to reach ({SETUP_VOCAB}), is not known to the "
                                  "planner: not checked", ruled=True))
    elif rows is not None and count("model.vocab_size", rows) < tokens:
        raise PlannerError(f"{where}model.vocab_size={rows}: fewer rows than {what}, which Bridge refuses "
                           f"({SETUP_VOCAB}: 'cannot be smaller than tokenizer's vocab_size')",
                           f"give at least {tokens:,}")
    if rows is None:
        d = count("model.make_vocab_size_divisible_by", cfg["model.make_vocab_size_divisible_by"])
        m = d * job["tp"]
        padded = -(-tokens // m) * m
        if padded < own:
            raise PlannerError(f"{where}model.vocab_size=null: Bridge builds {what} padded to a multiple of "
                               f"{d} x tp {job['tp']}, {padded:,} rows ({SETUP_VOCAB}; models/gpt_provider.py l. 244-250), "
                               f"fewer than the recipe's model's {own:,} {'tokens' if own_is_tokens else 'rows'}: tokens "
                               "of the catalog model without an embedding row, which the planner does not price",
                               f"give model.vocab_size (at least {own:,})")
        job["padded_vocab_size"] = padded
        assumed.append(listed("assumed", "padded_vocab_size", padded, f"model.vocab_size=null, so Bridge pads {what} "
                              f"to a multiple of make_vocab_size_divisible_by {d} x tp {job['tp']} ({SETUP_VOCAB}; "
                              "models/gpt_provider.py l. 244-250; utils/vocab_utils.py l. 57-71)", show=f"{padded:,}",
                              spaced=True))
    elif given:
        job["padded_vocab_size"] = rows
    if cfg["model.make_vocab_size_divisible_by"] != _recipe_divisor(rec) and rows is not None:
        ignored.append(listed("ignored", "model.make_vocab_size_divisible_by", cfg["model.make_vocab_size_divisible_by"],
                              "model.vocab_size set: Bridge pads no vocabulary, models/gpt_provider.py l. 244-250", _v))


SP_TP1_RULE = ("Bridge does not start (ConfigContainer.validate, training/config.py l. 1484-1485, finalizes the model: "
               "Megatron-Core 905c0e386 model_parallel_config.py l. 401-403 raises 'Cannot use sequence parallelism "
               "without tensor parallelism')")


def command_line_tp(cfg: TrainerConfig, data: dict, given: dict, where: str) -> None:
    """A launch's model.sequence_parallel=true at a command-line tp 1 (load_job: `data` the launch's job fields,
    `given` the options laid over them): Bridge refuses the pair, as _job refuses it in the launch (SP_TP1_RULE),
    unless the command line also turns sequence parallelism off (--no-sequence-parallel: it wins)."""
    if cfg.fmt != FMT or given.get("tp") != 1 or not given.get("sequence_parallel", data.get("sequence_parallel")):
        return
    how = "the command line's --sequence-parallel" if given.get("sequence_parallel") else "the launch's model.sequence_parallel=true"
    raise PlannerError(f"{where}{how} at the command line's tp 1: {SP_TP1_RULE}",
                       "pass --no-sequence-parallel with --tp 1 (model.sequence_parallel=false), or a tp above 1")

UNEVEN_FIELDS = {"model.num_layers_in_first_pipeline_stage": "first_stage_layers",
                 "model.num_layers_in_last_pipeline_stage": "last_stage_layers"}
UNEVEN_SOURCE = "transformer_config.py @905c0e386 __post_init__ l. 1482-1556, the same rules as @d98e8a64 l. 2294-2368"


def uneven_split(job: dict, L: int, where: str) -> None:
    """The counts of model.num_layers_in_first/last_pipeline_stage checked as Megatron-Core 905c0e386 checks them on the
    model's L layers (each > 0 and a multiple of vpp, the middle ranks' layers equal, each a multiple of vpp:
    megatron.decoder_first_last, Megatron-LM's rule, in Bridge's names); at pp 1 left to the job's rules
    (plan.uneven_split_error), as the Megatron reader leaves them."""
    from .megatron import decoder_first_last

    first, last = job.get("first_stage_layers"), job.get("last_stage_layers")
    if (first is not None or last is not None) and job["pp"] > 1:
        decoder_first_last(L, job["pp"], job["vpp"], first, last, where, "model.num_layers_in_first/last_pipeline_stage",
                           UNEVEN_SOURCE)


def _job(cfg: dict, mp: dict, co, where: str, assumed: list, ignored: list, not_modelled: list, gpus: int,
         job_options: Optional[dict] = None) -> dict:
    """The job fields of the run's values (job_options: the command line's job fields laid over them, _rechosen)."""
    def num(k):
        v = cfg[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PlannerError(f"{where}{k}={_shown(v)}: not a positive count", f"give {k} as a whole number")
        if v > MAX_COUNT:  # the job's bound (schema.MAX_COUNT), named here: a 400-digit count overflowed a float below
            raise PlannerError(f"{where}{k}={_count(v)}: above the planner's largest count",
                               "counts are whole numbers up to "
                               f"{MAX_COUNT:,} (2**31 - 1)")
        return v

    def flag(k):
        v = cfg[k]
        if not isinstance(v, bool):
            raise PlannerError(f"{where}{k}={_shown(v)}: not true or false", f"give {k}=true or {k}=false")
        return v

    job: dict = {"tp": num("model.tensor_model_parallel_size"), "pp": num("model.pipeline_model_parallel_size"),
                 "cp": num("model.context_parallel_size"), "ep": num("model.expert_model_parallel_size")}
    vpp = cfg["model.virtual_pipeline_model_parallel_size"]
    vpp = 1 if vpp is None else num("model.virtual_pipeline_model_parallel_size")
    job["vpp"] = vpp
    job["schedule"] = "interleaved" if vpp > 1 else "1f1b"
    etp = cfg["model.expert_tensor_parallel_size"]
    if etp is not None and num("model.expert_tensor_parallel_size") != job["tp"]:
        job["etp"] = etp
    job["sequence_parallel"] = flag("model.sequence_parallel")
    if job["sequence_parallel"] and job["tp"] == 1:
        # Bridge refuses it where Megatron-LM's validate_args turns it off (arguments.py @d98e8a64 l. 1433-1439):
        # ConfigContainer.validate finalizes the model (training/config.py l. 1484-1485), whose finalize runs
        # Megatron-Core's TransformerConfig.__post_init__ (models/transformer_config.py l. 83-92), which runs
        # ModelParallelConfig's (905c0e386 transformer_config.py l. 993-998): a ValueError at tp <= 1
        # (model_parallel_config.py l. 401-403)
        raise PlannerError(f"{where}model.sequence_parallel=true with model.tensor_model_parallel_size=1: {SP_TP1_RULE}",
                           "give model.sequence_parallel=false, or model.tensor_model_parallel_size above 1")
    seq, dseq = num("model.seq_length"), num("dataset.sequence_length")
    if seq != dseq:  # ConfigContainer.validate asserts it (training/config.py l. 1662-1677)
        raise PlannerError(f"{where}model.seq_length {seq} but dataset.sequence_length {dseq}: Bridge refuses the pair "
                           "(training/config.py l. 1673-1677)", "give both the same length")
    job["seq_len"] = seq
    job["micro_batch"], job["global_batch"] = num("train.micro_batch_size"), num("train.global_batch_size")
    # recompute
    gran, method, n = cfg["model.recompute_granularity"], cfg["model.recompute_method"], cfg["model.recompute_num_layers"]
    if gran not in (None, "full", "selective"):
        raise PlannerError(f"{where}model.recompute_granularity={gran}", "valid: full, selective, null")
    job["recompute"] = gran or "none"
    if gran == "full":
        if method == "block" and isinstance(n, int):
            job["recompute_layers"] = n * vpp
        elif method == "uniform" and n not in (None, 1):
            not_modelled.append(listed("not_modelled", "model.recompute_num_layers", n,
                                       f"uniform chunks of {n} layers: "
                                       "only each chunk's input is saved, less than priced", str))
        elif method not in (None, "uniform", "block"):
            raise PlannerError(f"{where}model.recompute_method={method}", "valid: uniform, block")
    elif gran == "selective" and cfg["model.recompute_modules"] is not None:
        mods = cfg["model.recompute_modules"]
        if not isinstance(mods, list) or not all(isinstance(m, str) for m in mods):
            raise PlannerError(f"{where}model.recompute_modules={_shown(mods)}: not a list of module names",
                               "give a list, e.g. model.recompute_modules=[core_attn,moe_act]")
        from typing import get_args
        from ..schema import RecomputeModule

        bad = [m for m in mods if m not in get_args(RecomputeModule)]
        if bad:  # Megatron-Core's gdn_*, gdp_*, mhc (planner/recompute_modules.py: not priced)
            raise PlannerError(f"{where}model.recompute_modules={_shown(mods)}: {', '.join(bad)} not a module whose "
                               "selective recompute the planner prices (it prices "
                               f"{', '.join(get_args(RecomputeModule))}: planner/recompute_modules.py)",
                               "give the modules without it, e.g. model.recompute_modules=["
                               + ",".join(m for m in mods if m not in bad) + "]")
        job["recompute_modules"] = list(mods)
    # what Megatron-Core reads only under another granularity (transformer_config.py @905c0e386 l. 455-483)
    unread = [k for k in ("model.recompute_method", "model.recompute_num_layers") if gran != "full" and cfg[k] is not None]
    unread += ["model.recompute_modules"] if gran != "selective" and cfg["model.recompute_modules"] is not None else []
    ignored += [listed("ignored", k, cfg[k], f"model.recompute_granularity={_v(gran)}: not read", _v) for k in unread]
    # sharding
    mfsdp, fsdp2 = flag("ddp.use_megatron_fsdp") or flag("dist.use_megatron_fsdp"), flag("dist.use_torch_fsdp2")
    if mfsdp and fsdp2:  # ConfigContainer.validate raises (training/config.py l. 1533-1534)
        raise PlannerError(f"{where}Megatron-FSDP and torch FSDP2 together: Bridge refuses the pair "
                           "(training/config.py l. 1533-1534)", "keep one")
    if mfsdp:
        # Megatron-Core 905c0e386's Megatron-FSDP (ddp.data_parallel_sharding_strategy, MFSDP_MODES); Bridge asserts
        # no tp-pp-dp mapping with it and turns the gradient-accumulation fusion off (training/config.py @dc805f5cf
        # l. 1537-1557)
        strat = cfg["ddp.data_parallel_sharding_strategy"]
        if not isinstance(strat, str) or strat not in MFSDP_MODES:
            raise PlannerError(f"{where}Megatron-FSDP with ddp.data_parallel_sharding_strategy={_v(strat)}: not read by the "
                               f"planner's {FMT} reader", f"valid: {', '.join(MFSDP_MODES)}")
        if flag("dist.use_tp_pp_dp_mapping"):
            raise PlannerError(f"{where}Megatron-FSDP with dist.use_tp_pp_dp_mapping=true: Bridge refuses the pair "
                               "(training/config.py l. 1542)", "drop dist.use_tp_pp_dp_mapping")
        job["sharding_mode"], job["sharding"] = MFSDP_MODES[strat]
        n = num("ddp.num_distributed_optimizer_instances")
        if n > 1:  # HSDP: FSDP within each of n instances, replicated across them (mcore_fsdp_adapter.py @905c0e386
            # l. 228-300: enable_hsdp, whatever the strategy; the stack's megatron_fsdp_hsdp mode is optim_grads_params's)
            if strat != HSDP_STRATEGY:
                raise PlannerError(f"{where}ddp.num_distributed_optimizer_instances={n} with Megatron-FSDP {strat}: not read "
                                   f"by the planner's {FMT} reader (its HSDP mode shards optim_grads_params)",
                                   "use ddp.data_parallel_sharding_strategy=optim_grads_params, or one instance")
            dp_all = gpus // (job["tp"] * job["pp"] * job["cp"])
            if dp_all % n:
                raise PlannerError(f"{where}ddp.num_distributed_optimizer_instances={n} does not divide dp {dp_all}",
                                   "Megatron-Core asserts (dp x cp) % instances == 0")
            job["sharding_mode"], job["sharding"], job["shard_group"] = HSDP_MODE, "hsdp", dp_all // n
        if flag("model.gradient_accumulation_fusion"):
            assumed.append(listed("assumed", "model.gradient_accumulation_fusion", False,
                                  "Bridge turns it off under Megatron-FSDP "
                                  "(training/config.py l. 1554-1557)"))
        if not mp["grad_reduce_in_fp32"]:
            assumed.append(noted("assumed", "Megatron-FSDP's main gradients fp32 (4 B) with grad_reduce_in_fp32 false",
                                 "Bridge builds Megatron-Core 905c0e386's FullyShardedDataParallel with its "
                                 "main_grads_dtype default float32 (models/common/unimodal.py l. 232-241; "
                                 "mcore_fsdp_adapter.py l. 73-75, 92-97)"))
    _mfsdp_buffers(cfg, job, mfsdp, where, assumed, ignored, not_modelled)
    dist = flag("ddp.use_distributed_optimizer") or flag("optimizer.use_distributed_optimizer")
    if not mfsdp and num("ddp.num_distributed_optimizer_instances") > 1:
        not_modelled.append(listed("not_modelled", "ddp.num_distributed_optimizer_instances",
                                   cfg["ddp.num_distributed_optimizer_instances"], "the optimizer is sharded over dp / "
                                   "instances, priced over dp", ruled=True))
    if mfsdp:
        pass
    elif fsdp2:  # Megatron-Core's TorchFullyShardedDataParallel (models/common/unimodal.py l. 217-222)
        job["sharding_mode"], job["sharding"] = "torch_fsdp2", "fsdp"
        if dist:  # the recipes' distributed optimizer left on: the stack's torch_fsdp2 mode runs without it
            raise PlannerError(f"{where}dist.use_torch_fsdp2=true with the distributed optimizer (the recipe's "
                               "ddp / optimizer.use_distributed_optimizer true): Megatron-LM refuses the pair "
                               "(stack_db megatron runs.sharding torch_fsdp2), and the planner prices FSDP2 without it",
                               "add ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false")
    else:
        job["sharding_mode"] = "distributed_optimizer" if dist else "ddp"
        job["sharding"] = "zero1" if dist else "none"
    layer_wise = _optimizer_job(cfg, job, dist, mfsdp or fsdp2, mp, where, assumed, flag)
    job["dp_comm_overlap"] = flag("ddp.overlap_grad_reduce")
    if not (mfsdp or fsdp2 or dist) and flag("ddp.overlap_param_gather") and not (
            layer_wise and flag("optimizer.overlap_param_gather")) and not _rechosen(job_options, job):
        raise _hooks_without_gather(where, layer_wise)
    if layer_wise:
        # Muon's layer-wise optimizer (dist_muon): its all-gather deferred to the forward's pre-hooks only with both
        # OptimizerConfig.overlap_param_gather (muon.py @905c0e386 l. 347-354: async_allgather) and ddp.overlap_param_
        # gather (distributed_data_parallel.py l. 239-242, 350-353: the hooks), which Bridge's CommOverlapConfig sets
        # only under the distributed optimizer (comm_overlap.py @dc805f5cf l. 631-640); else allgather_params after
        # the step, synchronous (layer_wise_optimizer.py l. 280-288): step.py [40], as Megatron-LM @d98e8a64's
        # step_with_ready_grads (layer_wise_optimizer.py l. 965-987). Hidden, the field left out (tied to the DP
        # overlap); under the DP overlap without both, false (exposed)
        both = flag("ddp.overlap_param_gather") and flag("optimizer.overlap_param_gather")
        if both:
            assumed.append(listed("assumed", "ddp.overlap_param_gather", True,
                                  "with optimizer.overlap_param_gather: the layer-wise optimizer's parameter all-gather "
                                  "deferred to the forward (muon.py @905c0e386 l. 347-354), priced as the megatron "
                                  "stack's whole-tensor path's (step._layerwise_gather: per-bucket gathers where the DP "
                                  "overlap is on)"))
        elif job["dp_comm_overlap"]:
            job["dp_param_gather_overlap"] = False
    elif flag("ddp.overlap_param_gather") and not dist:
        # torch FSDP2 (which does not read it), or a command line that re-chooses the sharding (_rechosen: there the
        # file's true states the gather hidden, TrainerConfig.param_gather)
        ignored.append(listed("ignored", "ddp.overlap_param_gather", True,
                              "no distributed optimizer: nothing to gather"))
    elif (job["dp_comm_overlap"] and job["sharding"] in ("zero1", "zero2") and not flag("ddp.overlap_param_gather")
          and job.get("optimizer", "adam") == "adam"):
        # the distributed optimizer's (Megatron-FSDP optim / optim_grads') all-gather after the step, synchronous
        # without overlap_param_gather (Megatron-LM distrib_optimizer.py @d98e8a64 l. 3168-3198; step.py [40])
        job["dp_param_gather_overlap"] = False
    if job["pp"] > 1 and vpp > 1 and not flag("model.overlap_p2p_comm"):
        job["pp_p2p_overlap"] = False
    job["tp_comm_overlap"] = bool(co and co.get("tp_comm_overlap"))
    if job["tp_comm_overlap"] and not (job["tp"] > 1 and job["sequence_parallel"]):
        job["tp_comm_overlap"] = False  # comm_overlap.py l. 440-450 turns it off
        assumed.append(listed("assumed", "tp_comm_overlap", False,
                              "Bridge turns TP overlap off below TP 2 or without sequence parallelism "
                              "(training/comm_overlap.py _get_model_comm_overlap_cfgs)"))
    if flag("dist.use_tp_pp_dp_mapping"):
        job["rank_order"] = "tp-cp-pp-dp"
    if flag("model.account_for_embedding_in_pipeline_split"):
        job["account_for_embedding_in_pipeline_split"] = True
    if flag("model.account_for_loss_in_pipeline_split"):
        job["account_for_loss_in_pipeline_split"] = True
    # Megatron-Core's uneven split (TransformerConfig num_layers_in_first/last_pipeline_stage, Megatron-LM's
    # --decoder-first/last-pipeline-num-layers): the job's first_stage_layers / last_stage_layers, placed as
    # pipeline.py [14] (get_num_layers_to_build and get_transformer_layer_offset: the same code at 905c0e386,
    # transformer_block.py l. 77-151, transformer_layer.py l. 45-160, as at d98e8a64); refused beside account_for_*
    # as Megatron-Core refuses it (transformer_config.py @905c0e386 l. 1417-1427); the counts checked on the model
    # (uneven_split)
    for k, field in UNEVEN_FIELDS.items():
        if cfg[k] is not None:
            job[field] = num(k)
    if any(f in job for f in UNEVEN_FIELDS.values()) and (
            job.get("account_for_embedding_in_pipeline_split") or job.get("account_for_loss_in_pipeline_split")):
        raise PlannerError(f"{where}model.num_layers_in_first/last_pipeline_stage with "
                           "model.account_for_*_in_pipeline_split: Megatron-Core refuses them together "
                           "(transformer_config.py @905c0e386 __post_init__ l. 1417-1427)", "drop one")
    if flag("model.deterministic_mode"):  # the job's deterministic_mode (Bridge's checks: startup MEGATRON_DETERMINISTIC_*)
        job["deterministic_mode"] = True
    if flag("model.mla_down_proj_fusion"):  # the job's mla_down_proj_fusion (plan.with_fused_mla refuses it off MLA)
        job["mla_down_proj_fusion"] = True
    # fusions: set where they differ from Megatron-LM's defaults (the planner's own, as the Megatron reader reads them)
    if flag("model.cross_entropy_loss_fusion"):
        job["cross_entropy_fusion"] = True
        if cfg["model.cross_entropy_fusion_impl"] == "te":
            job["cross_entropy_fusion_impl"] = "te"
        elif cfg["model.cross_entropy_fusion_impl"] != "native":
            raise PlannerError(f"{where}model.cross_entropy_fusion_impl={cfg['model.cross_entropy_fusion_impl']}",
                               "valid: native, te")
    for f in ("apply_rope_fusion", "bias_activation_fusion", "bias_dropout_fusion", "gradient_accumulation_fusion"):
        if not flag(f"model.{f}") or (mfsdp and f == "gradient_accumulation_fusion"):
            job[f] = False
    if cfg["model.transformer_impl"] != "transformer_engine":
        raise PlannerError(f"{where}model.transformer_impl={cfg['model.transformer_impl']}: the planner's {FMT} reader "
                           "reads Transformer Engine layers only", "drop the override")
    if cfg["model.cuda_graph_impl"] not in ("none", None):
        raise PlannerError(f"{where}model.cuda_graph_impl={cfg['model.cuda_graph_impl']}: not read by the planner's "
                           f"{FMT} reader", "drop the override")
    ab = cfg["model.attention_backend"]
    if ab == "unfused":
        job["attention"] = "eager"
    elif ab in ("flash", "fused"):
        job["attention_kernel"] = "flash2" if ab == "flash" else "cudnn"
        job["attention_kernel_named"] = True  # the backend named, not auto: what Bridge's deterministic check reads
    elif ab not in (None, "auto"):
        raise PlannerError(f"{where}model.attention_backend={ab}", "valid: flash, fused, unfused, auto, null")
    if flag("optimizer.use_precision_aware_optimizer") and "optimizer.exp_avg_dtype" not in cfg:  # a MoE recipe's: moe_job
        raise PlannerError(f"{where}optimizer.use_precision_aware_optimizer=true: not read by the planner's {FMT} "
                           "reader", "drop it")
    # precision
    if mp.get("fp16") or mp.get("fp4"):
        raise PlannerError(f"{where}mixed_precision fp16 / fp4: not read by the planner's {FMT} reader",
                           "use a bf16 or fp8 preset")
    if mp.get("fp8"):
        if mp["fp8"] not in ("hybrid", "e4m3"):
            raise PlannerError(f"{where}mixed_precision.fp8={mp['fp8']}", "valid: hybrid, e4m3")
        job["precision"] = "fp8"
        job["fp8_recipe"] = mp["fp8_recipe"]
        if mp["fp8_param_gather"]:
            job["fp8_param_gather"] = True
            if mp["fp8_recipe"] == "mxfp8" and mp["reuse_grad_buf_for_mxfp8_param_ag"]:
                # Megatron-Core then gathers the MXFP8 weights through the gradient buffer (the preset's own setting,
                # mixed_precision.py @dc805f5cf l. 241-253): the separate parameter buffer priced is not there
                not_modelled.append(listed("not_modelled", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", True,
                                           "the MXFP8 weights gathered through the gradient buffer: priced with a "
                                           "buffer of their own"))
        elif mp["reuse_grad_buf_for_mxfp8_param_ag"]:
            ignored.append(listed("ignored", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", True,
                                  "no fp8_param_gather: nothing gathered through the gradient buffer"))
        if mp["first_last_layers_bf16"]:
            job["bf16_layers_at_start"] = int(mp["num_layers_at_start_in_bf16"])
            job["bf16_layers_at_end"] = int(mp["num_layers_at_end_in_bf16"])
    else:
        job["precision"] = "bf16"
    if not mp["grad_reduce_in_fp32"] and not mfsdp:  # Megatron-FSDP's main gradients: fp32 whatever it says (above)
        job["bytes_per_param"] = {"weights": 2.0, "gradients": 2.0, "master": 4.0, "optimizer": 8.0}
    it = cfg["train.train_iters"]
    if isinstance(it, int) and not isinstance(it, bool) and it > 0:
        if it > MAX_COUNT:
            raise PlannerError(f"{where}train.train_iters={_count(it)}: above the planner's largest count",
                               f"counts are whole numbers up to {MAX_COUNT:,} (2**31 - 1)")
        job["tokens"] = float(it * job["global_batch"] * job["seq_len"])
    return job
