"""The trainers' own start-up checks that touch a plan, cited at a commit, vectorized like
plan.rule_codes (this module sits beside plan.py, below the cost models' callers: pricing a
plan reads no trainer file, so it imports nothing of planner/trainers/; the argument-level
transcription of the same checks, run on exported files, is planner/trainers/rules.py): each rule says where a candidate breaks it (a boolean array over 0-d or 1-d
PlanArrays), so `fit` masks them (a plan the trainer would refuse is never ranked), `resolve`
refuses a job that breaks one (exit 2, naming the rule and its source) and `export` refuses
to write one.

A stack names its rule set (stack_db `runs.startup_rules`); the rules of the other sets do
not apply to it. Rules that every stack shares (divisibility, the interleaved schedule's
micro-batches, TP overlap needing SP, async TP needing compile) are plan.rule_codes' own.
What a stack can run at all (its sharding modes, schedules, rank orders, largest degrees) is
its `runs` entry, checked in plan.rule_codes before these.

Megatron-LM @d98e8a64 (NVIDIA/Megatron-LM, 2026-08-22) [M]:
  MEGATRON_TORCH_FSDP2      megatron/training/arguments.py validate_args: --use-torch-fsdp2
                            asserts pipeline_model_parallel_size == 1 and
                            expert_model_parallel_size == 1
  MEGATRON_TP_PP_DP_MAPPING megatron/core/parallel_state.py initialize_model_parallel: with
                            --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp, not pp-last) and pp > 1
                            the expert data-parallel size world/(etp ep pp) must equal the
                            data-parallel size world/(tp cp pp), i.e. etp x ep == tp x cp
                            (a dense model: ep = 1, etp = tp, so CP must be 1)
  MEGATRON_MOE_SP           megatron/core/transformer/moe/moe_layer.py MoELayer.forward raises in
                            training where the attention's TP group has more than one rank and
                            sequence parallelism is off (an MoE model; appended last to RULES so
                            the other rules keep their codes)
  MEGATRON_CP_SEQ           arguments.py validate_args: seq_length % (2 x context_parallel_size)
                            == 0 when cp > 1 (load-balanced causal chunks)
  MEGATRON_PP_SPLIT         Megatron places every split of pipeline.stage_layers that is a
                            placement of the model's layers (split_overdrawn: not one where more
                            layers are left over than the end stages hold, which the planner would
                            price with layers the model does not have; Megatron's layout and uneven
                            PP checks count exactly num_layers). The planner's split
                            lightens the first and the last model chunk (pipeline.chunk_layers),
                            which Megatron spells as --account-for-embedding/loss-in-pipeline-split
                            when each end is at most one layer lighter (transformer_config.py
                            __post_init__: (layers + counted) % (pp vpp) == 0), as
                            --decoder-first/last-pipeline-num-layers with one chunk per rank (middle
                            stages equal, each end > 0 layers), and otherwise as
                            --pipeline-model-parallel-layout, one '|'-separated entry per model
                            chunk in layer order, chunk j on pipeline rank j mod pp
                            (megatron/core/transformer/pipeline_parallel_layer_layout.py
                            PipelineParallelLayerLayout: any number of layers a chunk, the
                            embedding first, the loss last; arguments.py: vpp = entries / pp).
                            NVIDIA's DeepSeek-V3 on GB200 (61 layers, pp 4 x vpp 4) is such a
                            split; planner/trainers/export.py writes the spelling, rules.py checks it
torchtitan @e347b1e5e (pytorch/torchtitan, 2026-02-15, the last TOML-configured commit) [T]:
  TORCHTITAN_SEQ_DIVISOR    models/llama3/infra/parallelize.py parallelize_llama asserts
                            seq_len % parallel_dims.seq_len_divisor == 0, seq_len_divisor =
                            tp x 2 cp (distributed/parallel_dims.py)
  TORCHTITAN_DDP_1D         models/llama3 and llama4 infra/parallelize.py: 'DDP has not supported > 1D
                            parallelism' where world_size != the dp_replicate mesh's size (pure DDP only
                            without TP or PP; with CP FSDP is applied instead, TORCHTITAN_FSDP_MESH).
                            qwen3's, deepseek_v3's and gpt_oss's parallelize test dp_mesh.ndim > 1
                            instead, never true of the 1-D dp_replicate mesh: they apply DDP beside TP
                            or PP unchecked (whether torch's replicate then runs on TP's DTensor
                            parameters is not checked here), and (training.dtype float32) train it in
                            fp32, TORCHTITAN_FP32. The rule holds for every model code (runs.model_codes
                            could narrow it to llama3 / llama4; not done, since whether torch's replicate runs
                            on TP's DTensor parameters is not checked): for those three it may refuse a
                            pure-bf16 DDP x TP / PP plan that torchtitan would start
  TORCHTITAN_MODEL_*        what the model's own code (torchtitan/models/<code>/, by ModelSpec.hf_model_type
                            through stack_db runs.model_codes) runs: its MoE dispatchers, PP, CP, async TP
                            (codes 65-68, commented above their definitions)
  TORCHTITAN_SP             parallelize.py apply_tp: TP always shards the norms' sequence
                            dimension (SequenceParallel): a TP plan without SP is not what runs
  TORCHTITAN_ETP            distributed/parallel_dims.py: with ep > 1, 'Currently we only support
                            ETP=TP or ETP=1'; models/llama4/infra/parallelize.py apply_moe_ep_tp:
                            with ep = 1 the experts are split over the TP mesh (etp = tp)
  (torchtitan 0.3.0, release/0.3 @4f9e9a47d, is the stack torchtitan-0.3 with the same set: its
  runs.fsdp_one_rank (FSDP applied at every shard degree) turns TORCHTITAN_FSDP_MESH, _FP32 and
  _EP_FSDP off, its runs.etp_one_under_ep makes TORCHTITAN_ETP ask expert TP 1 under EP, and its
  runs.startup_rules_absent leaves out the checks its code lacks, and its own runs.model_codes
  (release/0.3's codes) feeds TORCHTITAN_MODEL_*: rules_for reads those fields, never the stack's name)
  TORCHTITAN_PP_SPLIT       distributed/pipeline_parallel.py: stages = ceil((layers + first +
                            last stage weights) / pipeline_parallel_layers_per_stage), and
                            generate_llm_fqn_per_model_part gives the remainder layers to the
                            first stages; the planner's split is torchtitan's when the end
                            weights (pipeline_parallel_first/last_stage_less_layers, default 1
                            each) make it even; the planner writes and reads weights 0 and 1
                            (account_for_* off / on), so an end lighter by more is refused
  MEGATRON_CP_A2A_HEADS     a context parallelism that splits the heads over the cp ranks (the
                            stack's cp_comm_types.heads_divisible: --cp-comm-type a2a, the job's
                            cp_comm_type) needs the query heads and the KV heads per TP rank
                            divisible by cp: NVIDIA/TransformerEngine @4329ff84 transformer_engine/
                            pytorch/attention/dot_product_attention/context_parallel.py
                            AttnFuncWithCPAndQKVOA2A.forward l. 3951-3954 asserts num_heads %
                            cp_size == 0 for Q and for K/V (Megatron runs it unchecked; appended
                            last to RULES so the other rules keep their codes); with a2a+p2p the
                            all-to-all group's ranks (the first hierarchical size) must divide them
  MEGATRON_CP_SLIDING_WINDOW  a model with a sliding-window layer and cp > 1 only with a context
                            parallelism that runs one (the stack's cp_comm_types.no_sliding_window:
                            p2p and a2a+p2p refused): TE @4329ff84 context_parallel.py
                            attn_forward_func_with_cp l. 4763-4769 (code 72, in LATER_RULES)
  STACK_LAYER_KIND          every stack (trainer ANY_STACK): a model with a layer kind the stack's code
                            does not build (stack_db runs.layer_kinds, each cited; Megatron-LM @d98e8a64:
                            no Mamba-1, no chunked attention) (code 73, in LATER_RULES)
  MEGATRON_HCP_SIZES        a2a+p2p: arguments.py validate_args l. 580-582 asserts cp ==
                            prod(--hierarchical-context-parallel-sizes)
  MEGATRON_P2P_OVERLAP_PP   arguments.py validate_args l. 1000-1009: with virtual stages and
                            --no-overlap-p2p-communication (the job's pp_p2p_overlap false) pp must
                            be > 2 (two sends and receives between the same two ranks in one batch)
  MEGATRON_MTP_POSITION     arguments.py validate_args l. 882-886: --mtp-num-layers only with
                            --position-embedding-type rope or none (a model setting: it masks every
                            candidate of such a model)
  MEGATRON_MOE_BIAS_ETP     megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__
                            l. 2612-2615: an MoE model with linear biases (no --disable-bias-linear) asserts
                            expert_tensor_parallel_size
                            == 1 ('Bias in Moe is only supported when ETP==1'; a model setting and the
                            searched etp; appended last to RULES so the other rules keep their codes)
  MEGATRON_GDN_HEADS        transformer_config.py __post_init__ l. 1500-1508: Gated DeltaNet's
                            linear_num_key_heads and linear_num_value_heads % (tp x cp) == 0 (and
                            l. 1494-1497: value heads % key heads == 0, a model setting)
  MEGATRON_DEEPEP_GROUP     with moe_dispatcher deepep (--moe-token-dispatcher-type flex
                            --moe-flex-dispatcher-backend deepep) the flex dispatcher builds one
                            DeepEP Buffer over the expert-TP x EP group (token_dispatcher.py
                            MoEFlexTokenDispatcher l. 1835-1842: group=self.tp_ep_group) and sizes it
                            from DeepEP's config tables at group.size() (moe/fused_a2a.py get_buffer
                            l. 47-50); deepseek-ai/DeepEP @94a9f8f (hybrid-ep branch) deep_ep/buffer.py
                            get_dispatch_config / get_combine_config l. 228-280 list 2, 4, 8, 16, 24,
                            32, 64, 128, 144, 160 ranks and assert any other ('Unsupported number of
                            EP ranks'); csrc/deep_ep.cpp Buffer::Buffer l. 152-153 asserts num_ranks
                            <= NUM_MAX_NVL_PEERS x NUM_MAX_RDMA_PEERS = 8 x 20 = 160 in normal mode
                            and num_ranks < 8 or a multiple of 8 (csrc/kernels/configs.cuh), which
                            the table's sizes meet (DeepEP main @dd758ca adds 48 and 96 to the
                            table, deep_ep/buffers/legacy.py; the 160 limit is its
                            LEGACY_NUM_MAX_RDMA_PEERS 20). A group of one rank (tp = ep = 1) Megatron
                            refuses too ('DeepEP dispatcher requires TPxEP > 1'); the planner
                            prices no dispatch there and does not refuse it
  MEGATRON_MOE_ACT_GROUPED_GEMM transformer_config.py __post_init__ l. 1964-1967: under
                            --recompute-granularity selective, moe_act in --recompute-modules
                            raises unless --moe-grouped-gemm (its checkpoint wraps the grouped
                            experts' activation only, moe/experts.py); job settings (recompute_modules,
                            moe_grouped_gemm: the resolved stack's selective.ungrouped_moe_act) and
                            the plan's recompute (searched: fit drops selective, space.build_space)
  (the job settings a sharding mode runs at one value, --use-torch-fsdp2 without the gradient-
  accumulation fusion, DDP without --fp8-param-gather, are the stack's data, stack_db runs.sharding
  job_settings, applied by plan.stack_for_settings before these rules)
DeepSpeed @38327e07 (microsoft/DeepSpeed, 2025-02-21) [D]:
  DEEPSPEED_PP_ZERO         deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: 'ZeRO-2 and
                            ZeRO-3 are incompatible with pipeline parallelism'
  DEEPSPEED_PP_SPLIT_ENDS   Megatron-DeepSpeed's GPTModelPipe counts the embedding and the output
                            layer in the pipeline split both or neither (microsoft's fork: gpt_model.py
                            l. 463 partition_method 'type:transformer'; BigScience's --pp-partition-method
                            'type:transformer|embedding'): one end alone refused, and both where the
                            last stage would keep no transformer layer (BigScience's gpt_model.py l. 308-309:
                            its PP fails then); on a stack whose split is DeepSpeed a12aaedc's bisection
                            (pipeline_split bisection, pipeline.py [11]) also an end stage it leaves none
                            (9 layers on 4 stages: 3, 3, 3, 0) (code 76, in LATER_RULES)
  DEEPSPEED_MOE             deepspeed/runtime/engine.py l. 1675: 'MoE not supported with Stage 3' (an
                            MoE model at sharding fsdp / hsdp, modes zero3 and zero3_mics), and expert TP
                            other than 1 or tp (moe/layer.py l. 89-103) (code 77)
  DEEPSPEED_MOE_SP          an MoE model with tp > 1 under Megatron's sequence parallelism: MOELayer's
                            drop_tokens / gather_tokens over TP (sharded_moe.py l. 626-664) assume
                            the TP ranks hold the same tokens; Megatron-DeepSpeed @f4157bea hands the
                            MoE the rank's sequence shard (transformer.py l. 1429-1432) (code 78)
  TORCHTITAN_MTP_PP_CP      (the torchtitan set, on a stack whose code trains MTP: runs.mtp true, release/0.3)
                            multi-token prediction with pp > 1 or cp > 1: torchtitan @4f9e9a47d
                            models/deepseek_v3/mtp.py l. 199-209 raises NotImplementedError (code 79)
  STACK_SP_NORM_GRADS       (every stack, from runs.sequence_parallel norm_grads_reduced: Megatron-
                            DeepSpeed's) Megatron's SP at tp > 1 where nothing sums the SP-partial norm
                            and row-bias gradients over TP: Megatron-DeepSpeed @f4157bea training.py
                            l. 730-732 reduces them only 'if not args.deepspeed'; DeepSpeed reduces over
                            DP alone (engine.py l. 2048-2063, 2567-2574) (code 80)
  BRIDGE_CHUNK_CP           (every stack, from chunked_attention.cp_local_sequence: megatron-bridge) a chunked
                            model at cp > 1 where s / cp exceeds the chunk c and s is not a multiple of
                            2 cp^2 c: Megatron-Bridge @dc805f5cf llama4_utils.py Llama4SelfAttention.forward
                            l. 304-307 asserts s / cp % (2 cp) == 0 and (s / cp // 2 cp) % c == 0 (code 81)
  TORCHTITAN_HYBRIDEP       (torchtitan, stack torchtitan-0.3 with moe_dispatcher hybridep) ep 1, or seq_len
                            not a multiple of cp x tp: release/0.3 @4f9e9a47d models/common/token_dispatcher.py
                            update_ep_token_dispatcher_config l. 1216-1242 raises (code 82)
  STACK_MODE_TP_PP_DP       (every stack, from runs.sharding tp_pp_dp_mapping false: megatron-bridge's
                            Megatron-FSDP modes) the tp-pp-dp rank order under such a mode: Megatron-Bridge
                            @dc805f5cf training/config.py l. 1542 asserts it off under Megatron-FSDP (code 83)
  PRECISION_AWARE_MFSDP     (every stack, from runs.low_precision_moments no_decoupled_grad_modes: megatron-bridge's
                            Megatron-FSDP modes) the precision-aware optimizer where TE's FusedAdam reads
                            decoupled_grad alone (bf16, delayed fp8, a master below 4 B; no CPU offload) under a mode
                            that never sets it: Megatron-LM 905c0e386's update_main_grads sets param.grad, FusedAdam
                            skips every parameter (TE @28777046 fused_adam.py l. 571-577): the job does not train;
                            nothing refuses it at start-up (code 84)
  TORCHTITAN_SEQ_SP_CP      (the torchtitan set, on torchtitan-0.3; main lists it absent, its TORCHTITAN_SEQ_DIVISOR
                            is stricter) seq_len % ((tp under SP, else 1) x (2 cp where cp > 1, else 1)):
                            release/0.3 @4f9e9a47d trainer.py l. 306-315 raises; torchtitan-0.3 lists
                            TORCHTITAN_SEQ_DIVISOR absent (code 85)
  TORCHTITAN_VARLEN_CP      (the torchtitan set, both stacks) cp > 1 where the model code builds varlen attention (the
                            job's attention_backend, set by the readers from the flavor / config function): main
                            @e347b1e5e models/llama3/model/args.py l. 57-65, distributed/context_parallel.py l. 69-72;
                            0.3.0 models/llama3/model.py l. 75-82, models/qwen3/model.py l. 91-97,
                            distributed/context_parallel/api.py l. 103-104 raise (code 86)
  TORCHTITAN_FSDP_SYMM_MEM_SM90  (the torchtitan set, on a stack with runs.fsdp_symm_mem: torchtitan-0.3) the job's
                            fsdp_symm_mem on a GPU below compute capability 9.0: release/0.3 @4f9e9a47d
                            config/configs.py l. 267-277 raises (code 87)
  TORCHTITAN_SPMD_TYPECHECK_PP (the torchtitan set, runs.spmd_typechecking) the job's spmd_typechecking under
                            spmd_backend spmd_types with pp > 1: trainer.py l. 143-153 raises (code 88)
  TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX the same with recompute selective over FlexAttention (attention_backend
                            flex): trainer.py l. 155-167 raises (code 89)
  TORCHTITAN_CP_PTRR_MASK   (the torchtitan set, on a stack with runs.cp_load_balancers: both) the job's
                            cp_load_balancer ptrr with cp > 1 where the model builds no FlexAttention (attention_backend
                            not flex): main @e347b1e5e distributed/context_parallel.py cp_shard l. 191-206, 0.3.0
                            distributed/context_parallel/api.py l. 225-259 raise (code 90)
  TORCHTITAN_CP_LOAD_BALANCER_NAME (the torchtitan set, runs.cp_load_balancers) the job's cp_load_balancer a name
                            torch's cp_shard does not build (not headtail, ptrr or None) with cp > 1: main @e347b1e5e
                            distributed/context_parallel.py l. 207-211, 0.3.0 api.py l. 260-264 raise in the first step
                            (code 105, FIXED_CODE_RULES)
  MEGATRON_TP_OVERLAP_QUANTIZER (the megatron set) the plan's TP overlap (tp > 1) with the blockwise fp8 recipe or
                            nvfp4: TE @4329ff84 module/base.py fill_userbuffers_buffer_for_all_gather l. 720 raises
                            'Unsupported quantizer for Userbuffers' (nvfp4: get_ub l. 550-560 first); or with mxfp8 where
                            the run's TE (te_version, else the stack's) is before 2.4: v2.3 module/linear.py l. 149-155
                            raises, the MXFP8 branch since ce0b46c4d (v2.4) (code 106, FIXED_CODE_RULES)
  MEGATRON_TE_RECIPE_RELEASE (the megatron set) the plan's fp8 recipe or nvfp4 on a run's TE (te_version, else the
                            stack's) that does not build it: tensorwise before 2.2, mxfp8 before 2.1 (Megatron-LM
                            @d98e8a64 fp8_utils.py l. 770, 798-804), blockwise before 2.3, nvfp4 before 2.8 (TE
                            common/recipe/__init__.py by tag) (code 107, FIXED_CODE_RULES)
  MEGATRON_PARAM_GATHER     (the megatron set) the job's dp_param_gather_overlap true (--overlap-param-gather) where
                            the plan's DP overlap is off or its sharding mode is ddp or torch_fsdp2: arguments.py
                            @d98e8a64 validate_args l. 1024-1029 asserts (code 108, FIXED_CODE_RULES)
  MEGATRON_DETERMINISTIC_TP_OVERLAP, _CE_FUSION, _FLASH (codes 91-93, the megatron set, each where the stack's
                            runs.deterministic_refuses lists the setting): the job's deterministic_mode with the plan's TP
                            overlap (Megatron-LM @d98e8a64 training/determinism.py l. 24, 141-148, since 3ab71eeb3e), the
                            job's cross_entropy_fusion (the same; Megatron-Bridge @dc805f5cf training/config.py
                            l. 1458-1461) or its attention_kernel flash2 (Bridge l. 1454-1456); a job's trainer_date older
                            than a check's date drops it (commented above their definitions)
  MUON_QKV_SPLIT_TP         (every stack, keyed on runs.optimizers muon_qkv_split_raises: megatron-bridge) the
                            job's Muon with its q / k / v split where tp does not divide the KV heads: Megatron-Core
                            905c0e386 muon.py l. 136-147 views the TP shard as 0 query groups and raises (code 94,
                            FIXED_CODE_RULES: handed out ahead of 91-93)
  MEGATRON_MLA_FUSION_TP    (every stack with runs.mla_down_proj_fusion) the job's mla_down_proj_fusion where tp
                            does not divide q_lora_rank or kv_lora_rank + qk_rope_head_dim: multi_latent_attention.py
                            @d98e8a64 l. 1353-1372 asserts (code 95, FIXED_CODE_RULES)
  MEGATRON_BF16_LAYERS_STAGE (the megatron set) an fp8 job's bf16_layers_at_start or _end (Megatron
                            --num-layers-at-start/end-in-bf16) above num_layers // pp: Megatron-LM @d98e8a64
                            transformer_config.py l. 1532-1555 raises (code 96,
                            FIXED_CODE_RULES)
  MEGATRON_DETERMINISTIC_NCCL_ALGO, _NCCL_CHOICE (codes 103-104, FIXED_CODE_RULES; the megatron set, where the
                            stack's runs.deterministic_refuses lists nccl_algo_tokens / nccl_algo_choice) the job's
                            deterministic_mode with an nccl_algo determinism.py @d98e8a64 l. 87-93 refuses (a token
                            outside Ring, CollnetDirect, CollnetChain, ^NVLS; since 3ab71eeb3e), or that is not one of
                            Tree, Ring, CollnetDirect, CollnetChain, ^NVLS (validate_args from ac08742c96 to 3ab71eeb3e;
                            Megatron-Bridge @dc805f5cf training/config.py l. 1463-1466)
  (the batch identity train_batch_size == micro x accumulation x dp, runtime/config.py
  _batch_assertion, is plan.rule_codes' BATCH rule)
DualPipe @bb214e82 (deepseek-ai/DualPipe, the stack `deepseek`):
  DUALPIPE_SHAPE            dualpipe/dualpipe.py DualPipe.step: num_ranks % 2 == 0, num_chunks % 2
                            == 0 and num_chunks >= 2 num_ranks (one model chunk per direction)
The rules that read the hardware (StartupRule.reads_cluster; a Cluster: the GPU entry's compute
capability, its NVLink domains as the job fills them): DeepEP's GPU generation (MEGATRON_ /
TORCHTITAN_ / DEEPSEEK_DEEPEP_GPU) and Hybrid-EP's (MEGATRON_HYBRIDEP_GPU, _DOMAIN, _EXPERTS,
_TOKENS), cited in the comment above them (codes from 55, after LATER_RULES' first seven). The four
Hybrid-EP rules are DeepEP's own checks: keyed on the dispatcher (StartupRule.dispatcher), not on a
start-up set, they apply on every stack that runs hybridep (megatron, torchtitan-0.3), each with the
stack's group, token rule (runs.hybridep_buffer_tokens) and trainer named; their keys and codes stay.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .ep_buffers import DEEPEP_RECV_TOKENS
from .pipeline import DUALPIPE, INTERLEAVED, layers_per_stage
from .terms import isin

DEEPEP_GROUP_SIZES = DEEPEP_RECV_TOKENS[0]  # the group sizes DeepEP's config tables list (MEGATRON_DEEPEP_GROUP)

MEGATRON_COMMIT = "NVIDIA/Megatron-LM @d98e8a64"
TORCHTITAN_COMMIT = "pytorch/torchtitan @e347b1e5e"
DEEPSPEED_COMMIT = "microsoft/DeepSpeed @38327e07"
DUALPIPE_COMMIT = "deepseek-ai/DualPipe @bb214e82"

def _dualpipe_shape(model, stack, plan) -> np.ndarray:
    """DualPipe's own asserts (DUALPIPE_SHAPE), where the plan runs it."""
    pp, m = np.asarray(plan.pp), np.asarray(plan.microbatches)
    return (np.asarray(plan.schedule) == DUALPIPE) & (pp > 1) & ((pp % 2 != 0) | (m % 2 != 0) | (m < 2 * pp) | (np.asarray(plan.vpp) > 1))


# plan.rule_codes numbers these rules from FIRST_CODE on, in RULES order
FIRST_CODE = 24


@dataclass(frozen=True)
class StartupRule:
    key: str
    trainer: str  # stack_db runs.startup_rules
    text: str  # what breaks it (fit's table of reasons)
    source: str  # file and commit
    hint: str | Callable  # or (model, stack) -> str (a hint naming the job's model and stack)
    broken: Callable  # (model, stack, plan) -> bool array
    # it reads the plan's micro-batches per step (PlanArrays.microbatches): space.choose_modes keys on them
    reads_microbatches: bool = False
    # it reads the hardware the job runs on (a Cluster): broken is (model, stack, plan, cluster) -> bool array
    reads_cluster: bool = False
    # it reads the micro-batch size (PlanArrays.mbs): space.choose_modes keys on it where the rule applies
    # to the stack (reads_micro_batch)
    reads_mbs: bool = False
    # it reads the model and the stack alone (every plan breaks it alike): its refusal names no plan's degrees
    model_level: bool = False
    # what the refusal depends on where that is not the plan's degrees (a job or variant setting on the run's release:
    # MEGATRON_TE_RECIPE_RELEASE's recipe on the Transformer Engine release): its message names this, with detail's
    # figures, in place of the degrees, which it does not read
    subject: str | None = None

    # the figures of a refused plan (0-d PlanArrays) for its message: (model, stack, plan, cluster) -> str
    detail: Callable | None = None
    # a check of the dispatcher's own library (DeepEP's Hybrid-EP): the rule applies on every stack that runs this
    # dispatcher (runs.moe_dispatchers; rules_for), whatever its start-up set, and names the stack's trainer as the
    # one whose start-up refuses (text_for: stack -> its text on that stack)
    dispatcher: str | None = None
    text_for: Callable | None = None
    # a check of one of the trainer's own options: the stack_db runs field naming that option's spelling (runs.fsdp_symm_mem,
    # runs.spmd_typechecking; runs.mtp, the code that trains MTP); the rule is the stack's only where that field is set and
    # not false (rules_for): on a release without the option the job field is refused (plan.apply_startup_switches) and the rule can never fire, so it is not listed there;
    # "field:item": the runs list field's entries name the item (runs.deterministic_refuses setting: _has_option)
    option: str | None = None

    def text_on(self, stack) -> str:
        """The rule's text as the stack's users meet it (text_for where the rule has one)."""
        return self.text_for(stack) if self.text_for is not None and stack is not None else self.text

    def trainer_on(self, stack) -> str:
        """The trainer whose start-up refuses: a dispatcher rule's the stack's start-up set's."""
        if self.dispatcher is not None and stack is not None and stack.runs is not None and stack.runs.startup_rules:
            return stack.runs.startup_rules
        return self.trainer

    def check(self, model, stack, plan, cluster: "Cluster | None") -> np.ndarray:
        """Where the plan breaks the rule: `broken` with the cluster where the rule reads one (a rule
        that reads the hardware is never skipped for want of it: the caller passes the job's)."""
        if not self.reads_cluster:
            return self.broken(model, stack, plan)
        if cluster is None:
            raise ValueError(f"start-up rule {self.key} reads the hardware: pass the job's Cluster (startup.cluster_of)")
        return self.broken(model, stack, plan, cluster)


@dataclass(frozen=True)
class Cluster:
    """What the start-up rules that read the hardware see (StartupRule.reads_cluster): the GPU entry
    (schema.Hardware: its compute_capability), its placement view (comm.CommParams: GPUs per NVLink
    domain and per node, the domains' allocation) and the job's GPU count, which places the groups
    (comm.domain_in_use, comm.group_link) as the cost models place them."""
    hardware: object
    params: object
    gpus: int

    @property
    def capability(self):
        """(major, minor) compute capability; None where the hardware entry gives none."""
        return self.hardware.capability


def cluster_of(hardware, gpus: int) -> Cluster:
    """The Cluster of a job of `gpus` GPUs on `hardware` (a schema.Hardware)."""
    from .comm import comm_params

    return Cluster(hardware, comm_params(hardware), int(gpus))


def mode_is(stack, plan, *names) -> np.ndarray:
    """Where the plan's sharding mode (PlanArrays.smode, an index into stack.runs.sharding) is
    one of `names`."""
    idx = [i for i, m in enumerate(stack.runs.sharding) if m.name in names] if stack.runs is not None else []
    return isin(plan.smode, np.asarray(idx, dtype=np.int64))


def level_of(plan) -> np.ndarray:
    return np.asarray(plan.sharding)


def etp_of(plan) -> np.ndarray:
    """The expert tensor-parallel degree (PlanArrays.etp; 0 = tp)."""
    etp = np.asarray(plan.etp)
    return np.where(etp > 0, etp, np.asarray(plan.tp))


def uses_tp_pp_dp_mapping(plan) -> np.ndarray:
    """Where the plan's rank order needs Megatron's --use-tp-pp-dp-mapping: it places pp inside
    dp (tp-cp-pp-dp) and is not the default order tp-cp-dp-pp up to size-1 axes."""
    from .comm import order_code, strides_by_code

    default = order_code("tp-cp-dp-pp")
    if _uniform_order(plan.order) == default:  # the same strides, every axis: no candidate needs the mapping
        return np.zeros(np.shape(plan.tp), dtype=bool)
    st = strides_by_code(np.asarray(plan.order), tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    sd = strides_by_code(np.full(np.shape(plan.tp), default), tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    same = np.ones(np.shape(plan.tp), dtype=bool)
    for ax in ("tp", "cp", "pp", "dp"):
        size = np.asarray(getattr(plan, ax))
        same &= (size <= 1) | (st[ax] == sd[ax])
    return ~same


def _uniform_order(order) -> int | None:
    """The one rank-order code of `order` (an int64 code or an array of them) where every
    element has it, else None (also for an empty array)."""
    order = np.asarray(order)
    if not order.size:
        return None
    first = order.flat[0]
    return int(first) if order.ndim == 0 or bool((order == first).all()) else None


def end_weights(num_layers: int, plan):
    """(first, last) end weights that make the planner's pipeline split an even one: the
    embedding (loss) counted as a layer where the plan counts it (account_for_*), plus the
    layers the split leaves over, taken off the first stage first (pipeline.stage_layers:
    first = mid - e - ceil(slack/2), last = mid - l - floor(slack/2)). Megatron's
    --account-for-*-in-pipeline-split and torchtitan's pipeline_parallel_first/last_stage_less_layers
    are such weights of 1 (0 or 1 for Megatron, whole numbers for torchtitan)."""
    from .pipeline import layers_on_heaviest_stage

    pp, vpp = np.asarray(plan.pp), np.asarray(plan.vpp)
    e, l_ = np.asarray(plan.split_emb), np.asarray(plan.split_loss)
    units = num_layers + e + l_
    slack = np.maximum(pp * layers_on_heaviest_stage(num_layers, pp, vpp, e, l_) - units, 0)
    return e + (slack + 1) // 2, l_ + slack // 2


def split_overdrawn(num_layers: int, plan) -> np.ndarray:
    """Where the planner's pipeline split is no placement of the model's layers: more layers are
    left over than the end chunks hold (pipeline.chunk_layers gives an end chunk fewer than no
    layers, or pipeline.stage_layers' floor of one layer per end stage binds), so the priced
    stages would hold layers the model does not have (llama2-13b's 40 layers on pp 16: 1 + 14 x 3
    + 1 = 44).

    It reads only pp, vpp and the counted ends, in integers: on the search's many candidates
    (plan.rule_codes over space.build_space's base rows) with one pair of ends it is computed
    once per (pp, vpp) of a small table and looked up (_per_split; the same booleans)."""
    grid = _per_split(plan)
    if grid is not None:
        table, index = grid
        return _split_overdrawn(num_layers, table).take(index)
    return _split_overdrawn(num_layers, plan)


class _Split:
    """The fields of a pipeline split that split_overdrawn reads (_per_split's table)."""

    def __init__(self, pp, vpp, split_emb, split_loss):
        self.pp, self.vpp, self.split_emb, self.split_loss = pp, vpp, split_emb, split_loss


def _per_split(plan):
    """(a _Split of every (pp, vpp) from 1 to the largest, each candidate's place in it), where
    the plan's pp and vpp are (n,) integer arrays of positive values, its ends one integer for
    every candidate, and the table is at most n / 8 entries; else None."""
    pp, vpp = np.asarray(plan.pp), np.asarray(plan.vpp)
    ends = [np.asarray(plan.split_emb), np.asarray(plan.split_loss)]
    n = pp.size
    if pp.ndim != 1 or vpp.shape != pp.shape or n < 4096 or any(e.ndim not in (0, 1) or e.size not in (1, n) for e in ends):
        return None
    if pp.dtype.kind not in "iu" or vpp.dtype.kind not in "iu" or any(e.dtype.kind not in "iu" for e in ends):
        return None  # (PlanArrays holds int64: counts, never fractions)
    if any(e.ndim == 1 and not bool((e == e[0]).all()) for e in ends):
        return None
    if int(pp.min()) < 1 or int(vpp.min()) < 1:
        return None
    top_p, top_v = int(pp.max()), int(vpp.max())
    if top_p * top_v > n // 8:
        return None
    P, V = (x.ravel() for x in np.meshgrid(np.arange(1, top_p + 1, dtype=np.int64), np.arange(1, top_v + 1, dtype=np.int64),
                                            indexing="ij"))
    e, l_ = (np.int64(x.flat[0]) for x in ends)
    return _Split(P, V, e, l_), (pp.astype(np.int64) - 1) * top_v + (vpp.astype(np.int64) - 1)


def _split_overdrawn(num_layers: int, plan) -> np.ndarray:
    pp, vpp = np.asarray(plan.pp), np.asarray(plan.vpp)
    e, l_ = np.asarray(plan.split_emb), np.asarray(plan.split_loss)
    units = num_layers + e + l_
    chunks = np.maximum(pp * vpp, 1)
    c = -(-units // chunks)
    wf, wl = end_weights(num_layers, plan)
    first, last = c - wf, c - wl  # the end chunks
    gpu_first, gpu_last = (vpp - 1) * c + first, (vpp - 1) * c + last
    return (pp > 1) & ((first < 0) | (last < 0) | (gpu_first < 1 - e) | (gpu_last < 1 - l_))


def _torchtitan_split(model, stack, plan):
    """A trim-ends split (pipeline.stage_layers) torchtitan cannot spell; a front-loaded one is
    torchtitan's own placement, checked by plan.SPLIT_UNITS."""
    pp = np.asarray(plan.pp)
    wf, wl = end_weights(model.num_layers, plan)
    return (pp > 1) & ((wf > 1) | (wl > 1)) & (np.asarray(getattr(plan, "split_front", 0)) == 0)


def _tt_etp(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_ETP: expert TP other than tp or 1, or 1 without EP (@e347b1e5e); on a stack whose experts
    are sharded over EP alone (stack_db runs.etp_one_under_ep: torchtitan 0.3.0, no option) anything but 1 with
    ep > 1 and tp without."""
    etp, tp, ep = etp_of(plan), np.asarray(plan.tp), np.asarray(plan.ep)
    if stack is not None and stack.runs is not None and stack.runs.etp_one_under_ep:
        return etp != np.where(ep > 1, 1, tp)
    return (etp != tp) & ((ep == 1) | (etp != 1))


TORCH_FSDP2 = "torch_fsdp2"  # the mode MEGATRON_TORCH_FSDP2 reads (stack_db runs.sharding: --use-torch-fsdp2)


def _torch_fsdp2_hint(model, stack) -> str:
    """MEGATRON_TORCH_FSDP2's hint: the stack's other modes of torch_fsdp2's level, as the stack runs them for the
    job (resolve hands the rules the stack plan.stack_for_states left: a mode whose job_settings or main_grads_bytes
    refuse the job is not there, so megatron-bridge's Megatron-FSDP modes are not offered to a job of 2-byte
    gradients), none of which validate_args ties to pp 1, ep 1 and untied embeddings; pp 1 and ep 1 only where the
    model's embeddings are untied (tied ones break the rule at any degrees); the stack's other levels."""
    modes = stack.runs.sharding if stack is not None and stack.runs is not None else []
    level = next((m.level for m in modes if m.name == TORCH_FSDP2), "fsdp")
    other = [m.name for m in modes if m.level == level and m.name != TORCH_FSDP2]
    fixes = [f"sharding_mode {' or '.join(other)} (no such assert in validate_args)"] if other else []
    if not (model is not None and model.tied_embeddings):
        fixes.append("pp 1 and ep 1")
    levels = [lv for lv in dict.fromkeys(m.level for m in modes) if lv != level]
    if levels:
        fixes.append(f"sharding {' or '.join(levels)}")
    name = stack.name if stack is not None else "megatron"
    none = "" if other else f" (stack {name} runs no other {level} mode for this job's settings)"
    return "use " + ", or ".join(fixes) + none if fixes else f"choose another stack{none}"


RULES: tuple[StartupRule, ...] = (
    StartupRule(
        "MEGATRON_TORCH_FSDP2", "megatron",
        "Megatron's --use-torch-fsdp2 with pipeline or expert parallelism, or tied embeddings",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args ('--use-torch-fsdp2 is not supported with "
        "pipeline parallelism' / 'with expert parallelism' / 'requires --untie-embeddings-and-output-weights')",
        _torch_fsdp2_hint,
        lambda m, s, p: mode_is(s, p, TORCH_FSDP2) & ((np.asarray(p.pp) > 1) | (np.asarray(p.ep) > 1)
                                                         | bool(m is not None and m.tied_embeddings))),
    StartupRule(
        "MEGATRON_TP_PP_DP_MAPPING", "megatron",
        "Megatron's --use-tp-pp-dp-mapping (rank order tp-cp-pp-dp) with pp > 1 needs expert-TP x EP = TP x CP (no CP on a dense model)",
        f"{MEGATRON_COMMIT} megatron/core/parallel_state.py initialize_model_parallel ('When not using pp-last rank "
        "ordering, the data parallel size of the attention and moe layers must be the same')",
        "use Megatron's default rank order tp-cp-dp-pp (--rank-order tp-cp-dp-pp)",
        lambda m, s, p: uses_tp_pp_dp_mapping(p) & (np.asarray(p.pp) > 1)
        & (etp_of(p) * np.asarray(p.ep) != np.asarray(p.tp) * np.asarray(p.cp))),
    StartupRule(
        "MEGATRON_CP_SEQ", "megatron",
        "Megatron needs the sequence length divisible by 2 x cp",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args ('seq-length should be a multiple of 2 * "
        "context-parallel-size if context-parallel-size > 1')",
        "choose cp so that 2 x cp divides the sequence length",
        lambda m, s, p: (np.asarray(p.cp) > 1) & (np.asarray(p.seq) % (2 * np.asarray(p.cp)) != 0)),
    StartupRule(
        "MEGATRON_PP_SPLIT", "megatron",
        "more layers left over by pp x vpp than the end stages can give up: the split would price layers the model does not have",
        f"{MEGATRON_COMMIT} megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout ('Number of "
        "decoder layers ... must match num_layers') and transformer_config.py __post_init__ (uneven PP: the ranks' "
        "layers add up to num_layers)",
        "choose pp x vpp with at most one chunk's worth of layers left over (pp x vpp close to a divisor of the layers)",
        # (a job's first / last stage layers are Megatron's own uneven split, checked by plan.uneven_split_broken)
        lambda m, s, p: split_overdrawn(m.num_layers, p) & (np.asarray(getattr(p, "split_first", 0)) == 0)
        & (np.asarray(getattr(p, "split_last", 0)) == 0)),
    StartupRule(
        "TORCHTITAN_SEQ_DIVISOR", "torchtitan",
        "torchtitan needs the sequence length divisible by tp x 2 cp",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/infra/parallelize.py parallelize_llama (seq_len % "
        "parallel_dims.seq_len_divisor, = tp * (cp * 2), distributed/parallel_dims.py)",
        "choose tp and cp so that tp x 2 cp divides the sequence length",
        lambda m, s, p: np.asarray(p.seq) % (np.asarray(p.tp) * 2 * np.asarray(p.cp)) != 0),
    StartupRule(
        "TORCHTITAN_DDP_1D", "torchtitan",
        "torchtitan's DDP (no sharding) runs only without TP or PP",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/infra/parallelize.py l. 148-151 and models/llama4/infra/"
        "parallelize.py l. 216-219 (world_size != the dp_replicate mesh's size: 'DDP has not supported > 1D "
        "parallelism'); qwen3 l. 177-180, deepseek_v3 l. 197-200 and gpt_oss l. 162-165 test dp_mesh.ndim > 1, never "
        "true of the 1-D dp_replicate mesh, and with training.dtype float32 train it in fp32 (TORCHTITAN_FP32)",
        "shard over the data-parallel ranks (fsdp or hsdp), or use DDP with tp = cp = pp = 1",
        lambda m, s, p: (level_of(p) == 0) & (np.asarray(p.dp) > 1) & (np.asarray(p.cp) == 1)
        & (np.asarray(p.tp) * np.asarray(p.pp) > 1)),  # (cp > 1 applies FSDP first: TORCHTITAN_FSDP_MESH)
    StartupRule(
        "TORCHTITAN_SP", "torchtitan",
        "torchtitan's TP always runs sequence parallelism",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/infra/parallelize.py apply_tp (SequenceParallel on the norms)",
        "set sequence_parallel on (--sequence-parallel) with tp > 1",
        lambda m, s, p: (np.asarray(p.tp) > 1) & (np.asarray(p.sp) == 0)),
    StartupRule(
        "TORCHTITAN_ETP", "torchtitan",
        "torchtitan supports expert TP equal to TP or 1 only, and only TP without expert parallelism (0.3.0, "
        "runs.etp_one_under_ep: 1 under expert parallelism, no option)",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/parallel_dims.py ('Currently we only support ETP=TP or ETP=1'); "
        "models/llama4/infra/parallelize.py apply_moe_ep_tp (without an EP mesh the experts go on the TP mesh); "
        "torchtitan 0.3.0: pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/distributed/parallel_dims.py l. 277-279, "
        "336-340 (efsdp = dp_shard x cp x tp // ep, the sparse mesh pp, dp_replicate, efsdp, ep: no expert-TP axis)",
        "set etp to tp or 1 (tp where ep is 1; on torchtitan 0.3.0 leave etp out: 1 where ep > 1, tp where ep is 1)",
        _tt_etp),
    StartupRule(
        "TORCHTITAN_PP_SPLIT", "torchtitan",
        "torchtitan cannot place this pipeline split with end-stage weights of 0 or 1",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/pipeline_parallel.py (stages = ceil((layers + first/last stage "
        "weights) / layers_per_stage), l. 75-77; generate_llm_fqn_per_model_part gives the remainder to the first "
        "stages, l. 236-344: l. 275-276, 306); torchtitan 0.3.0 (release/0.3 @4f9e9a47d): the same, "
        "torchtitan/distributed/pipeline_parallel.py l. 223-225 and _generate_llm_fqn_per_model_part l. 366-476 "
        "(l. 407-408, 438)",
        "choose pp x vpp dividing the layers, or count the embedding and loss as layers of the split "
        "(--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split: torchtitan's default weights 1 and 1)",
        _torchtitan_split),
    StartupRule(
        "DEEPSPEED_PP_ZERO", "deepspeed",
        "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3",
        f"{DEEPSPEED_COMMIT} deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ ('ZeRO-2 and ZeRO-3 are "
        "incompatible with pipeline parallelism')",
        "use ZeRO stage 0 or 1 with pp > 1, or pp 1",
        lambda m, s, p: (np.asarray(p.pp) > 1) & (level_of(p) >= 2)),
    StartupRule(
        "DUALPIPE_SHAPE", "deepseek",
        "DualPipe needs an even pp and an even number of micro-batches, at least 2 pp, one chunk per rank",
        f"{DUALPIPE_COMMIT} dualpipe/dualpipe.py DualPipe.step (assert num_ranks % 2 == 0; assert num_chunks > 0 and "
        "num_chunks % 2 == 0 and num_chunks >= num_ranks * 2)",
        "use an even pp, and a micro-batch size that leaves an even number >= 2 pp of micro-batches per step",
        _dualpipe_shape, reads_microbatches=True),
    StartupRule(
        "MEGATRON_MOE_SP", "megatron",
        "Megatron trains an MoE model with tensor parallelism only under sequence parallelism",
        f"{MEGATRON_COMMIT} megatron/core/transformer/moe/moe_layer.py MoELayer.forward ('During training, performance "
        "may degrade if MoE and tensor parallelism are enabled without also enabling sequence parallelism': a ValueError)",
        "set sequence_parallel on (--sequence-parallel) with tp > 1",
        lambda m, s, p: bool(m is not None and m.moe is not None) & (np.asarray(p.tp) > 1) & (np.asarray(p.sp) == 0)),
)


def _a2a_heads(model, stack, plan) -> np.ndarray:
    """MEGATRON_CP_A2A_HEADS: where the stack's CP splits the heads (a stack setting) and the ranks
    they are split over (cp for a2a, the all-to-all group's for a2a+p2p) do not divide the query
    heads or the KV heads of a TP rank (MLA: K and V have the query heads)."""
    from .cp_comm_type import a2a_ranks

    cp, tp = np.asarray(plan.cp), np.asarray(plan.tp)
    ranks = a2a_ranks(stack)
    if model is None or ranks == 0:
        return np.zeros(np.broadcast(cp, tp).shape, dtype=bool)
    split = cp if ranks < 0 else np.full(np.shape(cp), ranks)
    a = model.num_attention_heads
    k = a if model.mla is not None else (model.num_kv_heads or a)
    a_loc, k_loc = a // np.maximum(tp, 1), np.maximum(k // np.maximum(tp, 1), 1)
    return (cp > 1) & ((a_loc % split != 0) | (k_loc % split != 0))


def _hcp_sizes(model, stack, plan) -> np.ndarray:
    """MEGATRON_HCP_SIZES: a2a+p2p's hierarchical sizes (a stack setting, from the job) whose
    product is not the plan's cp."""
    from .cp_comm_type import hierarchical_sizes

    cp = np.asarray(plan.cp)
    sizes = hierarchical_sizes(stack)
    if sizes is None:
        return np.zeros(np.shape(cp), dtype=bool)
    return cp != sizes[0] * sizes[1]


RULES = RULES + (
    StartupRule(
        "MEGATRON_CP_A2A_HEADS", "megatron",
        "Megatron's --cp-comm-type a2a splits the attention heads over the cp ranks: the query heads and the KV heads "
        "per TP rank must divide by cp",
        "NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
        "AttnFuncWithCPAndQKVOA2A.forward l. 3951-3954 ('cp_comm_type=\'a2a\' requires num_heads % cp_size == 0 for Q, K, "
        "V')",
        "choose cp (a2a+p2p: the all-to-all group's ranks) dividing the query and KV heads per TP rank, or "
        "--cp-comm-type p2p / all_gather",
        _a2a_heads),
    StartupRule(
        "MEGATRON_HCP_SIZES", "megatron",
        "Megatron's --hierarchical-context-parallel-sizes (a2a+p2p) must multiply to cp",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args l. 580-582 (assert args.context_parallel_size "
        "== prod(args.hierarchical_context_parallel_sizes)); megatron/core/parallel_state.py l. 1127-1128",
        "give --hierarchical-context-parallel-sizes whose product is cp, or choose cp = their product",
        _hcp_sizes),
)


def _p2p_overlap_pp(model, stack, plan) -> np.ndarray:
    """MEGATRON_P2P_OVERLAP_PP: the interleaved schedule on pp <= 2 where the job turned the
    stack's p2p overlap off (a stack setting: plan.apply_pp_p2p_overlap lays pp_p2p_overlapped
    never on a stack with the switch)."""
    pp = np.asarray(plan.pp)
    off = stack is not None and stack.overlap.pp_p2p_overlap_switch is not None and \
        stack.overlap.pp_p2p_overlapped == "never"
    return bool(off) & (np.asarray(plan.schedule) == INTERLEAVED) & (pp <= 2)


RULES = RULES + (
    StartupRule(
        "MEGATRON_P2P_OVERLAP_PP", "megatron",
        "Megatron's interleaved schedule with --no-overlap-p2p-communication needs pp > 2",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args l. 1000-1009 ('When interleaved schedule is used "
        "and p2p communication overlap is disabled, pipeline-model-parallel size should be greater than 2 to avoid having "
        "multiple p2p sends and recvs between same 2 ranks per communication batch')",
        "use pp > 2, or vpp 1, or leave the p2p overlap on (pp_p2p_overlap: drop --no-overlap-p2p-communication)",
        _p2p_overlap_pp),
)
def _mtp_position(model, stack, plan) -> np.ndarray:
    """MEGATRON_MTP_POSITION: multi-token prediction modules (the model's mtp_layers, the job's
    with with_mtp) on a model whose position embedding is neither rotary nor none (a model
    setting: every candidate alike)."""
    bad = model is not None and bool(model.mtp_layers) and model.position_embedding not in ("rope", "none")
    return np.full(np.shape(plan.tp), bad, dtype=bool)


RULES = RULES + (
    StartupRule(
        "MEGATRON_MTP_POSITION", "megatron",
        "Megatron runs multi-token prediction only with rotary or no position embeddings",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args l. 882-886 ('Multi-Token Prediction (MTP) is "
        "not supported with {position_embedding_type} position embedding type. The supported position embedding types "
        "are rope and none.')",
        "leave mtp_layers out (--mtp-layers 0), or use a model with rotary position embeddings",
        _mtp_position),
)


def _moe_bias_etp(model, stack, plan) -> np.ndarray:
    """MEGATRON_MOE_BIAS_ETP: an MoE model with linear biases (Megatron's default add_bias_linear, which
    the export keeps for model.linear_bias, writing no --disable-bias-linear: the routed experts' linears carry
    biases too) with
    the experts split over more than one expert-TP rank."""
    bad = model is not None and model.moe is not None and bool(model.linear_bias)
    return bool(bad) & (etp_of(plan) > 1)


def _gdn_heads(model, stack, plan) -> np.ndarray:
    """MEGATRON_GDN_HEADS: Gated DeltaNet mixers (Megatron-Core's gdn variant) whose key or value
    heads tp x cp does not divide (its context parallelism moves whole heads between the cp
    ranks: planner/layers/linear_attention.py)."""
    from .schema import GatedDeltaNet

    tc = np.asarray(plan.tp) * np.asarray(plan.cp)
    bad = np.zeros(np.shape(tc), dtype=bool)
    for kind in (model.layer_kinds.values() if model is not None else ()):
        x = kind.mixer
        if isinstance(x, GatedDeltaNet):  # (l. 1494-1497: the value heads a multiple of the key heads, every plan)
            bad = bad | (x.num_key_heads % tc != 0) | (x.num_value_heads % tc != 0) | (x.num_value_heads % x.num_key_heads != 0)
    return bad


def _deepep_group(model, stack, plan) -> np.ndarray:
    """MEGATRON_DEEPEP_GROUP: an MoE model on DeepEP's normal kernels (the job's moe_dispatcher,
    laid on the stack's defaults by plan.apply_moe_dispatcher: a setting, every candidate alike)
    whose expert-TP x EP group is not a size DeepEP's config tables list (ep_buffers.DEEPEP_RECV_TOKENS,
    from the same tables), a group of one rank left alone (no dispatch priced)."""
    group = etp_of(plan) * np.asarray(plan.ep)
    on = model is not None and model.moe is not None and stack is not None and stack.defaults.moe_dispatcher == "deepep"
    return bool(on) & (group > 1) & ~isin(group, DEEPEP_GROUP_SIZES)


RULES = RULES + (
    StartupRule(
        "MEGATRON_MOE_BIAS_ETP", "megatron",
        "Megatron-Core runs an MoE model with linear biases (add_bias_linear, no --disable-bias-linear) only with "
        "expert TP 1",
        f"{MEGATRON_COMMIT} megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ l. 2612-2615 "
        "(num_moe_experts and add_bias_linear: assert expert_tensor_parallel_size == 1, 'Bias in Moe is only supported "
        "when ETP==1')",
        "set etp 1 (--expert-tensor-parallel-size 1): the experts then split over ep only",
        _moe_bias_etp),
    StartupRule(
        "MEGATRON_GDN_HEADS", "megatron",
        "Megatron-Core's Gated DeltaNet needs its key and value heads divisible by tp x cp (and the value heads a multiple of the key heads)",
        f"{MEGATRON_COMMIT} megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ l. 1500-1508 "
        "(gated delta net: assert linear_num_key_heads % (tp * cp) == 0 and linear_num_value_heads % (tp * cp) == 0; "
        "l. 1494-1497: linear_num_value_heads % linear_num_key_heads == 0)",
        "choose tp x cp dividing the Gated DeltaNet key heads (and value heads)",
        _gdn_heads),
    StartupRule(
        "MEGATRON_DEEPEP_GROUP", "megatron",
        "Megatron's DeepEP dispatcher runs over the expert-TP x EP group, which DeepEP's config tables take at "
        "2, 4, 8, 16, 24, 32, 64, 128, 144 or 160 ranks only (at most 8 NVLink x 20 RDMA peers)",
        f"{MEGATRON_COMMIT} megatron/core/transformer/moe/fused_a2a.py get_buffer l. 47-50 (Buffer.get_dispatch_config"
        "(group.size())) over token_dispatcher.py MoEFlexTokenDispatcher's tp_ep group; deepseek-ai/DeepEP @94a9f8f "
        "deep_ep/buffer.py get_dispatch_config / get_combine_config l. 252, 280 (assert num_ranks in config_map, "
        "'Unsupported number of EP ranks'), csrc/deep_ep.cpp Buffer::Buffer l. 152 (num_ranks <= NUM_MAX_NVL_PEERS * "
        "NUM_MAX_RDMA_PEERS = 160 or low_latency_mode)",
        "lower ep (etp x ep one of 2, 4, 8, 16, 24, 32, 64, 128, 144, 160), or use moe_dispatcher hybridep or alltoall",
        _deepep_group),
)


def moe_act_ungrouped(stack) -> bool:
    """MEGATRON_MOE_ACT_GROUPED_GEMM's job settings: the resolved stack's selective policy re-runs
    moe_act with the experts not a grouped GEMM (recompute_modules.apply_modules)."""
    return bool(stack is not None and stack.selective.ungrouped_moe_act)


def _moe_act_grouped_gemm(model, stack, plan) -> np.ndarray:
    """MEGATRON_MOE_ACT_GROUPED_GEMM: the plans with recompute selective where moe_act_ungrouped."""
    from .recompute_modules import RC_SELECTIVE

    return moe_act_ungrouped(stack) & (np.asarray(plan.recompute) == RC_SELECTIVE)


RULES = RULES + (
    StartupRule(
        "MEGATRON_MOE_ACT_GROUPED_GEMM", "megatron",
        "Megatron-Core re-runs moe_act (--recompute-modules) only with --moe-grouped-gemm",
        f"{MEGATRON_COMMIT} megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ l. 1964-1967 "
        "(recompute_granularity selective: 'moe_act in recompute_modules is only supported with moe_grouped_gemm.')",
        "set moe_grouped_gemm (--moe-grouped-gemm), or leave moe_act out of recompute_modules, or recompute none / full",
        _moe_act_grouped_gemm),
)
# torchtitan @e347b1e5e [T], its DeepEP dispatcher (issue 22; stack_db torchtitan runs.moe_dispatchers: [parallelism]
# expert_parallel_comm_backend "standard" | "deepep"), coded from LATER_FIRST_CODE = the last contiguous code (43) + 5,
# so that rules appended to RULES meanwhile keep theirs:
#   TORCHTITAN_DEEPEP_EP     parallelize.py: DeepEP without expert parallelism raises (ValueError, ep_degree > 1)
#   TORCHTITAN_DEEPEP_ETP    parallelize.py: DeepEP with expert TP > 1 raises (NotImplementedError); etp 1 only
#   TORCHTITAN_DEEPEP_GROUP  distributed/deepep/deepep.py get_buffer sizes one DeepEP Buffer over the EP mesh's group
#                            (etp 1: ep ranks) from DeepEP's config tables, which assert on a size they do not list
#   TORCHTITAN_DEEPEP_TP     models/llama4/infra/parallelize.py apply_moe_ep_tp (which deepseek_v3 runs): with tp > 1 the
#                            MoE input is all-gathered over TP and its output marked Partial; the tokens are split
#                            over TP again only by ReordererSequenceParallel on moe.reorderer, which DeepEPMoE sets to
#                            None (models/moe/moe_deepep.py): each TP rank dispatches every token (tp x the dispatch
#                            and expert work) and the reduce-scatter sums tp copies of the routed output. Refused, not
#                            priced: the run is not the model's (rules2's reading, confirmed; issue 22)
#   TORCHTITAN_FSDP_MESH     models/llama3/infra/parallelize.py l. 125-152 (and the other models' parallelize): FSDP is
#                            applied where parallel_dims.fsdp_enabled = dp_shard > 1 or cp > 1 (distributed/parallel_dims.py
#                            l. 334-335), over the dp_shard x cp ranks; so a sharded mode with dp_shard x cp = 1 runs
#                            no FSDP (the plan torchtitan runs is the unsharded one), and an unsharded plan with
#                            cp > 1 runs FSDP over the cp ranks (issue 22's export sweep: fit ranked fsdp2 at dp 1,
#                            which reads back from the TOML as ddp)
#   TORCHTITAN_MX_TP_COMPILE components/quantization/mx.py MXLinearConverter asserts no TP under torch.compile of the
#                            model (fit ranked mxfp8 with compile and async TP at tp 2 on B200; issue 22). Its float8
#                            sibling, models/deepseek_v3/infra/parallelize.py l. 76-87 (NotImplementedError 'float8
#                            tensorwise TP is not tested for deepseekv3'), is no rule: it tests "float8" in
#                            model.converters, a name @e347b1e5e does not register (the converter is
#                            "quantize.linear.float8", float8.py l. 238; "float8" is a KeyError in
#                            protocols/model_converter.py l. 62 before parallelize runs), so it never fires on a file
#                            torchtitan starts, and no model applies float8 tensorwise TP there (the TP collectives
#                            stay bf16, as step.py tp_comm prices them)
#   TORCHTITAN_EP_FSDP       expert parallelism needs FSDP over dp_shard x cp > 1 ranks (issue 22: an MoE plan with
#                            ep > 1 under ddp was priced as unsharded replication). distributed/parallel_dims.py
#                            l. 136-138 carves the EP mesh from dp_shard x cp x tp (efsdp = dp_shard cp tp // (etp ep),
#                            the sparse mesh pp, dp_replicate, efsdp, ep, etp of l. 154-158), never from dp_replicate;
#                            models/llama4 l. 181-186, deepseek_v3 l. 162-167 and gpt_oss l. 125-130 infra/parallelize.py
#                            apply FSDP where fsdp_enabled or ep_enabled, over parallel_dims.get_mesh(["fsdp"]) (with
#                            dp_replicate: ["dp_replicate", "fsdp"]), and get_mesh raises a ValueError where that
#                            mesh has one rank (_mesh_exist l. 61-66: "fsdp" exists where its degree > 1;
#                            get_optional_mesh l. 241-242, get_mesh l. 269-277): no FSDP over one rank, nor HSDP with
#                            a shard group of one, at this commit. qwen3's parallelize (l. 142-186) applies FSDP
#                            only where fsdp_enabled: with ep > 1 and dp_shard x cp = 1 its EP mesh exists only where
#                            etp ep divides tp (etp 1, ep | tp: efsdp = tp / ep), so tp > 1, and there torchtitan
#                            trains without mixed precision (distributed/utils.py maybe_enable_amp l. 246-256: no
#                            FSDP with TP or PP -> 'Mixed precision training is disabled', fp32 everywhere; with
#                            dp > 1 also DDP over TP, TORCHTITAN_DDP_1D): not the bf16 plan the planner prices. So
#                            one rule for every model code (no model field needed): ep > 1 with dp_shard x cp = 1
#                            is refused. With dp_shard x cp > 1 the planner's fsdp / hsdp plans are what runs: the
#                            dense states over dp_shard x cp (memory.model_state_terms), the routed experts' over
#                            efsdp = tp x shard x cp / (etp ep) (moe.expert_shard; FSDP over one rank where that
#                            is 1: the fp32 states whole, no bf16 copy at rest), replicated over dp_replicate
#   TORCHTITAN_FP32          distributed/utils.py maybe_enable_amp l. 243-263: where fsdp_enabled is false
#                            (dp_shard x cp = 1, distributed/parallel_dims.py l. 334-335) and TP or PP is on, no
#                            autocast ('Mixed precision training is disabled'); bf16 compute otherwise comes only
#                            from FSDP's MixedPrecisionPolicy(param_dtype=mixed_precision_param) (apply_fsdp) or,
#                            for DDP / one device without TP and PP, torch.autocast(mixed_precision_param). The
#                            model is built in training.dtype (train.py l. 147-151; float32 by default,
#                            config/job_config.py l. 275), so such a plan trains in fp32: weights, gradients,
#                            activations, matmuls and the TP / PP traffic (issue 22: llama3-8b TP 8 on 8 GPUs,
#                            sharding none, was priced as bf16). The cost models have no fp32 precision
#                            (precisions.PRECISIONS: bf16, fp8, nvfp4; the layers' activation bytes are
#                            16-bit), so the plan is refused, not priced; with training.dtype bfloat16
#                            (bytes_per_param pure-bf16: no fp32 master, 2 B weights, laid on
#                            stack.defaults.bytes_per_param by plan.stack_for_states) the model is bf16
#                            and trains so: not refused. mixed_precision_param does not enter (no autocast
#                            and no FSDP to read it); CP counts (cp > 1 applies FSDP over the cp ranks)
LATER_FIRST_CODE = 48
# deepseek-ai/DeepEP main @567632d (2026-02-03, what torchtitan @e347b1e5e installs: its README points at main,
# no pinned commit) deep_ep/buffer.py get_dispatch_config / get_combine_config l. 245-259, 275-289: the EP sizes
# listed (48 and 96 beside @94a9f8f's; ep_buffers prices those at the next listed size's chunks)
TORCHTITAN_DEEPEP_SIZES = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)
_TT_DEEPEP = (f"{TORCHTITAN_COMMIT} torchtitan/models/deepseek_v3/infra/parallelize.py parallelize_deepseekv3 l. 99-113 "
              "(and models/llama4/infra/parallelize.py l. 113-127), with [parallelism] expert_parallel_comm_backend = "
              "\"deepep\"")


def tt_deepep(model, stack) -> bool:
    """An MoE model on torchtitan's DeepEP backend (the job's moe_dispatcher, laid on the stack's
    defaults by plan.apply_moe_dispatcher: a setting, every candidate alike)."""
    return bool(model is not None and model.moe is not None and stack is not None
                and stack.defaults.moe_dispatcher == "deepep")


LATER_RULES: tuple[StartupRule, ...] = (
    StartupRule(
        "TORCHTITAN_DEEPEP_EP", "torchtitan",
        "torchtitan's DeepEP backend needs expert parallelism (ep > 1)",
        f"{_TT_DEEPEP} ('DeepEP requires expert parallelism (ep_degree > 1). The DeepEP MoE model code does not support "
        "EP=1.': a ValueError)",
        "set ep > 1, or moe_dispatcher alltoall (expert_parallel_comm_backend \"standard\")",
        lambda m, s, p: tt_deepep(m, s) & (np.asarray(p.ep) <= 1)),
    StartupRule(
        "TORCHTITAN_DEEPEP_ETP", "torchtitan",
        "torchtitan's DeepEP backend runs without expert TP (etp 1)",
        f"{_TT_DEEPEP} ('DeepEP with Expert Tensor Parallelism (ETP) is not supported yet': a NotImplementedError where "
        "distributed/parallel_dims.py etp_enabled, expert_tensor_parallel_degree > 1)",
        "set etp 1 (--etp 1, expert_tensor_parallel_degree = 1), or moe_dispatcher alltoall",
        lambda m, s, p: tt_deepep(m, s) & (np.asarray(p.ep) > 1) & (etp_of(p) > 1)),
    StartupRule(
        "TORCHTITAN_DEEPEP_GROUP", "torchtitan",
        "torchtitan's DeepEP backend builds its Buffer over the EP group, which DeepEP's config tables take at 2, 4, 8, "
        "16, 24, 32, 48, 64, 96, 128, 144 or 160 ranks only",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/deepep/deepep.py get_buffer (Buffer.get_dispatch_config(group.size()), "
        "the EP mesh's group); deepseek-ai/DeepEP @567632d deep_ep/buffer.py get_dispatch_config / get_combine_config "
        "l. 259, 289 (assert num_ranks in config_map, 'Unsupported number of EP ranks')",
        "choose ep among 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160, or moe_dispatcher alltoall",
        lambda m, s, p: tt_deepep(m, s) & (np.asarray(p.ep) > 1)
        & ~np.isin(np.asarray(p.ep), np.asarray(TORCHTITAN_DEEPEP_SIZES))),
    StartupRule(
        "TORCHTITAN_DEEPEP_TP", "torchtitan",
        "torchtitan's DeepEP backend with TP > 1 leaves every token on every TP rank: each rank dispatches all of them "
        "and the routed outputs, marked Partial over TP, are summed tp times",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama4/infra/parallelize.py apply_moe_ep_tp l. 517-556 (the MoE input "
        "all-gathered over TP, PrepareModuleInputOutput Shard(1) -> Replicate, output Partial; the tokens split again "
        "only by ReordererSequenceParallel on moe.reorderer) and torchtitan/models/moe/moe_deepep.py DeepEPMoE.__init__ "
        "l. 36-37 (self.reorderer = None: nothing splits them) with distributed/expert_parallel.py DeepEPExpertParallel "
        "(dispatch over the EP group of all the rank's tokens)",
        "set tp 1 with moe_dispatcher deepep, or moe_dispatcher alltoall (expert_parallel_comm_backend \"standard\")",
        lambda m, s, p: tt_deepep(m, s) & (np.asarray(p.ep) > 1) & (np.asarray(p.tp) > 1)),
    StartupRule(
        "TORCHTITAN_FSDP_MESH", "torchtitan",
        "torchtitan applies FSDP exactly where dp_shard x cp > 1: a sharded mode over one rank runs unsharded, and an "
        "unsharded plan with cp > 1 is sharded over the cp ranks",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/parallel_dims.py l. 334-335 (fsdp_enabled = dp_shard_enabled or "
        "cp_enabled) and torchtitan/models/llama3/infra/parallelize.py parallelize_llama l. 125-152 (apply_fsdp over the "
        "dp_shard x cp mesh where fsdp_enabled, else apply_ddp)",
        "with dp x cp = 1 use sharding none (torchtitan's plan there; with tp or pp > 1 only pure bf16, "
        "TORCHTITAN_FP32); with cp > 1 use fsdp or hsdp",
        lambda m, s, p: _tt_fsdp_mesh(s, p)),
    StartupRule(
        "TORCHTITAN_MX_TP_COMPILE", "torchtitan",
        "torchtitan's MX (mxfp8) linears refuse tensor parallelism under torch.compile",
        f"{TORCHTITAN_COMMIT} torchtitan/components/quantization/mx.py MXLinearConverter.__init__ l. 46-52 (assert not "
        "(compile.enable and 'model' in compile.components and tensor_parallel_degree > 1): 'TP not yet supported with "
        "torch.compile for mxfp8')",
        "with fp8_recipe mxfp8 use tp 1, or --no-compile (async TP needs compile: no TP overlap then)",
        lambda m, s, p: _tt_mx_tp_compile(p)),
    StartupRule(
        "TORCHTITAN_EP_FSDP", "torchtitan",
        "torchtitan runs expert parallelism only beside FSDP over dp_shard x cp > 1 ranks: its EP mesh is carved from "
        "dp_shard x cp x tp, never from the replicas, and the MoE models' FSDP mesh of one rank raises",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/parallel_dims.py l. 136-158 (efsdp = dp_shard * cp * tp // (etp * "
        "ep), the sparse mesh pp, dp_replicate, efsdp, ep, etp), l. 61-66 and 241-277 (get_mesh raises a ValueError "
        "for the 'fsdp' mesh of one rank); torchtitan/models/llama4/infra/parallelize.py l. 181-186 (deepseek_v3 "
        "l. 162-167, gpt_oss l. 125-130: apply_fsdp where fsdp_enabled or ep_enabled, over get_mesh(['fsdp'])); qwen3 "
        "l. 142-186 applies FSDP only where fsdp_enabled and then trains without mixed precision "
        "(torchtitan/distributed/utils.py maybe_enable_amp l. 246-256: no FSDP with TP -> fp32)",
        "with ep > 1 shard over the data-parallel ranks (sharding fsdp, or hsdp with a shard group > 1: dp_shard x cp > 1), "
        "or use ep 1",
        lambda m, s, p: _tt_ep_fsdp(s, p)),
)


def _tt_fp32(stack, plan) -> np.ndarray:
    """TORCHTITAN_FP32: tp x pp > 1 where torchtitan's fsdp mesh (dp_shard x cp, as _tt_ep_fsdp counts it) is one
    rank, unless the job's model states are pure bf16 (no fp32 master, 2 B weights: training.dtype bfloat16, whose
    model torchtitan builds in bf16, so it trains in bf16 without autocast). The states are the job's
    (plan.stack_for_states lays them on stack.defaults.bytes_per_param: a preset name or a BytesPerParam)."""
    from .schema import BYTES_PER_PARAM_PRESETS

    bpp = stack.defaults.bytes_per_param
    bpp = BYTES_PER_PARAM_PRESETS[bpp] if isinstance(bpp, str) else bpp
    if (bpp.master == 0 and bpp.weights <= 2) or fsdp_one_rank(stack):  # FSDP's MixedPrecisionPolicy on every plan
        return np.zeros(np.shape(plan.tp), dtype=bool)
    return (_tt_fsdp_ranks(stack, plan) <= 1) & (np.asarray(plan.tp) * np.asarray(plan.pp) > 1)


def _tt_ep_fsdp(stack, plan) -> np.ndarray:
    """TORCHTITAN_EP_FSDP: ep > 1 where torchtitan's fsdp mesh (dp_shard x cp: ddp 1 x cp, hsdp the
    shard group x cp, the fsdp modes dp x cp) is one rank; never on a stack whose trainer applies FSDP over
    one rank too (stack_db runs.fsdp_one_rank: torchtitan 0.3.0 keeps the efsdp mesh wherever ep > 1)."""
    if fsdp_one_rank(stack):
        return np.zeros(np.shape(plan.tp), dtype=bool)
    return (np.asarray(plan.ep) > 1) & (_tt_fsdp_ranks(stack, plan) <= 1)


def fsdp_one_rank(stack) -> bool:
    """Whether the stack's trainer applies FSDP at every shard degree, one rank included (stack_db
    runs.fsdp_one_rank: torchtitan 0.3.0's apply_fsdp_to_decoder always)."""
    return bool(stack is not None and stack.runs is not None and stack.runs.fsdp_one_rank)


def _tt_fsdp_ranks(stack, plan) -> np.ndarray:
    """torchtitan's fsdp mesh, dp_shard x cp ranks, of the plan's sharding mode: ddp 1 x cp, hsdp the shard
    group x cp, the fsdp modes dp x cp (parallel_dims.py l. 334-335: FSDP is applied where it exceeds 1)."""
    dp_shard = np.where(mode_is(stack, plan, "ddp"), 1,
                        np.where(mode_is(stack, plan, "hsdp"), np.asarray(plan.shard), np.asarray(plan.dp)))
    return dp_shard * np.asarray(plan.cp)


def _tt_mx_tp_compile(plan) -> np.ndarray:
    """TORCHTITAN_MX_TP_COMPILE: fp8 with the mxfp8 recipe (torchtitan's "quantize.linear.mx" converter),
    compiled (the export compiles components ["model", "loss"]), at tp > 1."""
    from .precisions import FP8, FP8_RECIPE_CODES

    mx = (np.asarray(plan.precision) == FP8) & (np.asarray(plan.f8r) == FP8_RECIPE_CODES["mxfp8"])
    return mx & (np.asarray(plan.compile) > 0) & (np.asarray(plan.tp) > 1)


def _tt_fsdp_mesh(stack, plan) -> np.ndarray:
    """TORCHTITAN_FSDP_MESH: where the plan's sharding mode is not what torchtitan applies for its
    degrees: a sharded mode (any but ddp) whose dp_shard x cp ranks (hsdp: shard_group x cp) are
    one, or ddp with cp > 1. On a stack whose trainer applies FSDP over one rank too (stack_db
    runs.fsdp_one_rank: torchtitan 0.3.0) a sharded mode over one rank is what runs."""
    ranks, ddp = _tt_fsdp_ranks(stack, plan), mode_is(stack, plan, "ddp")
    return np.where(ddp, ranks > 1, (ranks <= 1) & (not fsdp_one_rank(stack)))


# The rules that read the hardware (issues 22, 23; StartupRule.reads_cluster: a Cluster, the GPU entry and the placement the
# cost models use), appended to LATER_RULES so every other rule keeps its code. deepseek-ai/DeepEP [E]: main @567632d
# (torchtitan's; the README's requirements) and the hybrid-ep branch @94a9f8f (2026-07-10; Megatron @d98e8a64 installs
# DeepEP de0dd118, docker/Dockerfile.ci.dev l. 100, which the stored snapshot lacks: the branch's head is read):
#   *_DEEPEP_GPU             DeepEP's kernels by GPU generation. README.md l. 43-49 (Requirements: 'Ampere (SM80), Hopper
#                            (SM90) GPUs, or other architectures with SM90 PTX ISA support'); setup.py l. 57-66: an SM80
#                            build takes DISABLE_SM90_FEATURES=1 ('Disable some SM90 features: FP8, launch methods, and
#                            TMA'), which asserts NVSHMEM off ('Disable internode and low-latency kernels'), and
#                            csrc/deep_ep.cpp Buffer::Buffer l. 166-168 asserts num_rdma_ranks = max(1, num_ranks / 8) == 1
#                            without NVSHMEM ('NVSHMEM is disabled during compilation'): below SM90 a group of 16 or more
#                            ranks (the internode kernels) cannot start; below SM80 (or a GPU with no CUDA compute
#                            capability: hardware_db compute_capability) DeepEP runs at no group size. Megatron's group is
#                            expert-TP x EP (MEGATRON_DEEPEP_GROUP), torchtitan's the EP group, the deepseek stack's the
#                            expert-TP x EP group as ep_buffers sizes it (its kernels are released as DeepEP's)
#   MEGATRON_HYBRIDEP_GPU    Hybrid-EP's kernels move tokens with TMA bulk copies (csrc/hybrid_ep/backend/hybrid_ep_backend.cuh
#                            cuda::ptx::cp_async_bulk, l. 1332 on; PTX cp.async.bulk needs sm_90) and build for
#                            TORCH_CUDA_ARCH_LIST "9.0 10.0" (docs/README_Hybrid-EP.md l. 179; setup.py l. 52 defaults to
#                            10.0): compute capability 9.0 or above
#   MEGATRON_HYBRIDEP_DOMAIN deep_ep/hybrid_ep_buffer.py HybridEPBuffer.__init__ l. 61-76: the ranks per NVLink domain are
#                            the group's members this rank reaches over NVLink (allocator.cu detect_accessible_ranks
#                            l. 178-211), and the group's size must divide by them (an assert); the group is Megatron's
#                            expert-TP x EP group (token_dispatcher.py MoEFlexTokenDispatcher l. 1845-1850), its pieces
#                            per domain counted rank by rank on the cost models' placement (comm.domain_pieces)
#   MEGATRON_HYBRIDEP_EXPERTS csrc/hybrid_ep/config.cuh BufferConfig::is_valid l. 84-95, checked by the Configurer
#                            l. 393-399 ('The buffer config is not valid.'): the hidden size % 16 == 0 (bf16 tokens, TMA)
#                            and (num_of_experts_per_rank x num_of_ranks_per_node) % 4 == 0, num_of_experts_per_rank
#                            Megatron's num_local_experts = experts / ep (token_dispatcher.py l. 1846-1849); every
#                            rank's piece (comm.domain_pieces) must hold it, i.e. their gcd
#   MEGATRON_HYBRIDEP_TOKENS config.cuh l. 18-50 hybrid_ep_token_capacity_is_valid: across domains (num_of_nodes > 1)
#                            the IB QP's send depth 3 x max_num_of_tokens_per_rank + 1 must stay below 65,536, i.e. at
#                            most (65,536 - 1 - 1) // 3 = 21,844 tokens; the Configurer (l. 385-387) first takes
#                            max(tokens, 512) rounded up to the 64-token combine chunk (so at most 21,824 tokens pass),
#                            tokens = the first dispatch's rows on the rank (Megatron fused_a2a.py HybridEPDispatch.forward
#                            l. 400-402: x.shape[-2], the micro-batch's seq / cp tokens, / tp under SP)
DEEPEP_SM80_MAX_RDMA_RANKS = 1  # csrc/deep_ep.cpp l. 168 [E]: without NVSHMEM (an SM80 build) num_rdma_ranks == 1
DEEPEP_NVL_PEERS = 8  # NUM_MAX_NVL_PEERS [E] (ep_buffers.NVL_PEERS): num_rdma_ranks = max(1, num_ranks / 8)
HYBRIDEP_IB_QP_MAX_TX_DEPTH = 65536  # config.cuh l. 18 [E]
HYBRIDEP_TX_DEPTH_TOKEN_FACTOR, HYBRIDEP_TX_DEPTH_EXTRA = 3, 1  # config.cuh l. 19-20 [E]
HYBRIDEP_MAX_TOKENS = (HYBRIDEP_IB_QP_MAX_TX_DEPTH - 1 - HYBRIDEP_TX_DEPTH_EXTRA) // HYBRIDEP_TX_DEPTH_TOKEN_FACTOR  # 21,844
HYBRIDEP_MIN_TOKENS, HYBRIDEP_CHUNK_TOKENS = 512, 64  # config.cuh Configurer l. 383-387 [E] (the chunk's env default 64)
HYBRIDEP_EXPERT_COLUMNS = 4  # config.cuh l. 91 [E]: (experts per rank x ranks per node) % 4
HYBRIDEP_HIDDEN_MULTIPLE = 16  # config.cuh l. 89 [E]: bf16 hidden_dim % 16 (TMA)
_DEEPEP = "deepseek-ai/DeepEP"
_HYBRIDEP = f"{_DEEPEP} @94a9f8f (hybrid-ep branch)"
_HYBRIDEP_GROUP = (f"{MEGATRON_COMMIT} megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher l. 1845-1850 "
                   "(_HybridEPManager over the tp_ep group, num_local_experts)")


def _dispatcher_on(model, stack, name: str) -> bool:
    """An MoE model on the dispatcher `name` (the job's moe_dispatcher, laid on the stack's defaults by
    plan.apply_moe_dispatcher: a setting, every candidate alike)."""
    return bool(model is not None and model.moe is not None and stack is not None
                and stack.defaults.moe_dispatcher == name)


def _deepep_gpu(group, cluster: Cluster) -> np.ndarray:
    """*_DEEPEP_GPU: where a DeepEP group of `group` ranks (> 1: a dispatch) cannot start on the cluster's
    GPU: none below compute capability 8.0 (or with none), and below 9.0 none that needs the internode
    kernels (num_rdma_ranks = max(1, group // 8) > 1)."""
    group = np.asarray(group)
    cc = cluster.capability
    if cc is None or cc < (8, 0):  # a hardware setting, every candidate alike
        return group > 1
    if cc < (9, 0):
        return np.maximum(group // DEEPEP_NVL_PEERS, 1) > DEEPEP_SM80_MAX_RDMA_RANKS
    return np.zeros(np.shape(group), dtype=bool)


_PIECES_READS = ("order", "tp", "cp", "pp", "dp", "ep", "etp")  # the plan fields _tp_ep_pieces reads
_pieces_last: list = [None, None]  # [(cluster, the fields' objects), result]: the last call's (_tp_ep_pieces)


def _tp_ep_pieces(plan, cluster: Cluster):
    """(group, every piece divides it, the pieces' gcd, it spans domains) of Megatron's flex dispatcher's
    expert-TP x EP group on the cluster (comm.domain_pieces at the folded grid's tp_ep stride, the
    placement dispatch.group_link gives step.ep_comm, and whose pieces memory.dispatcher_buffer_bytes
    sizes each rank's Hybrid-EP buffers by: comm.domain_piece_columns). The rules
    MEGATRON_HYBRIDEP_DOMAIN, _EXPERTS and _TOKENS read it one after the other on the same plan: the
    last call's result is returned again where the cluster and the plan's fields it reads are the same
    objects (held here, so that no id is reused; the search's plan columns are never written in place)."""
    key = (cluster,) + tuple(getattr(plan, f) for f in _PIECES_READS)
    last = _pieces_last[0]
    if last is not None and len(last) == len(key) and all(a is b for a, b in zip(last, key)):
        return _pieces_last[1]
    out = _tp_ep_pieces_of(plan, cluster)
    _pieces_last[0], _pieces_last[1] = key, out
    return out


def _tp_ep_pieces_of(plan, cluster: Cluster):
    """_tp_ep_pieces, computed."""
    from . import comm

    strides = comm.strides_by_code(np.asarray(plan.order), tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    group = etp_of(plan) * np.asarray(plan.ep)
    stride = comm.folded_stride(group, 1, plan, strides)  # moe.expert_strides' tp_ep
    return (group,) + comm.domain_pieces(group, stride, cluster.params, cluster.gpus)


def hybridep_tokens(plan, stack=None) -> np.ndarray:
    """The tokens per rank Hybrid-EP's Configurer sizes for (MEGATRON_HYBRIDEP_TOKENS), by the stack's
    runs.hybridep_buffer_tokens (memory.hybridep_tokens, the same rule): dispatch (Megatron's, and a stack that
    names none), the first dispatch's rows, micro-batch x seq / cp (/ tp under SP); local_batch (torchtitan 0.3's),
    the local batch x seq / (cp x tp), the local batch the micro-batch without PP and gbs / dp with it; at least
    512, rounded up to the 64-token chunk."""
    from .layers.common import mb_tokens, rep_div

    runs = stack.runs if stack is not None else None
    if runs is not None and runs.hybridep_buffer_tokens == "local_batch":  # a stack setting
        pp, dp = np.asarray(plan.pp), np.maximum(np.asarray(plan.dp), 1)
        local = np.where(pp > 1, np.asarray(plan.gbs) // dp, np.asarray(plan.mbs))
        raw = local * np.asarray(plan.seq) / (np.asarray(plan.cp) * np.asarray(plan.tp))
    else:
        raw = mb_tokens(plan) / rep_div(plan)
    t = np.maximum(np.ceil(raw), HYBRIDEP_MIN_TOKENS)
    return (np.ceil(t / HYBRIDEP_CHUNK_TOKENS) * HYBRIDEP_CHUNK_TOKENS).astype(np.int64)


def _hybridep_gpu(model, stack, plan, cluster: Cluster) -> np.ndarray:
    group = etp_of(plan) * np.asarray(plan.ep)
    cc = cluster.capability
    return _dispatcher_on(model, stack, "hybridep") & (group > 1) & bool(cc is None or cc < (9, 0))


def _hybridep_domain(model, stack, plan, cluster: Cluster) -> np.ndarray:
    if not _dispatcher_on(model, stack, "hybridep"):
        return np.zeros(np.shape(plan.tp), dtype=bool)
    group, divides, _, _ = _tp_ep_pieces(plan, cluster)
    return (group > 1) & ~divides


def _hybridep_experts(model, stack, plan, cluster: Cluster) -> np.ndarray:
    if not _dispatcher_on(model, stack, "hybridep"):
        return np.zeros(np.shape(plan.tp), dtype=bool)
    group, _, gcd, _ = _tp_ep_pieces(plan, cluster)
    local = model.moe.num_experts // np.maximum(np.asarray(plan.ep), 1)
    return (group > 1) & (((local * gcd) % HYBRIDEP_EXPERT_COLUMNS != 0)
                          | bool(model.hidden_size % HYBRIDEP_HIDDEN_MULTIPLE != 0))


def _hybridep_tokens(model, stack, plan, cluster: Cluster) -> np.ndarray:
    if not _dispatcher_on(model, stack, "hybridep"):
        return np.zeros(np.shape(plan.tp), dtype=bool)
    over = (HYBRIDEP_TX_DEPTH_TOKEN_FACTOR * hybridep_tokens(plan, stack) + HYBRIDEP_TX_DEPTH_EXTRA
            >= HYBRIDEP_IB_QP_MAX_TX_DEPTH)
    if not np.any(over):
        return over
    group, _, _, spans = _tp_ep_pieces(plan, cluster)
    return (group > 1) & spans & over


def _pieces_text(plan, cluster: Cluster) -> tuple[int, list[int], int]:
    """(group, its distinct pieces, GPUs per domain) of a 0-d plan's expert-TP x EP group."""
    from . import comm

    strides = comm.strides_by_code(np.asarray(plan.order), tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp)
    group = int(etp_of(plan) * np.asarray(plan.ep))
    stride = int(comm.folded_stride(group, 1, plan, strides))
    return group, comm.domain_piece_sizes(group, stride, cluster.params, cluster.gpus), \
        int(comm.domain_in_use(cluster.gpus, cluster.params))


def _domain_detail(model, stack, plan, cluster: Cluster) -> str:
    group, pieces, D = _pieces_text(plan, cluster)
    return (f"its {group} ranks meet {' or '.join(map(str, pieces))} of their group in an NVLink domain of {D} GPUs "
            f"on {cluster.gpus:,}")


def _experts_detail(model, stack, plan, cluster: Cluster) -> str:
    group, pieces, D = _pieces_text(plan, cluster)
    local = model.moe.num_experts // max(int(plan.ep), 1)
    return (f"{local} experts per rank x {' or '.join(map(str, pieces))} ranks per NVLink domain; hidden size "
            f"{model.hidden_size}")


def _tokens_detail(model, stack, plan, cluster: Cluster) -> str:
    t = int(hybridep_tokens(plan, stack))
    return (f"{t:,} tokens per rank as padded: 3 x {t:,} + 1 = "
            f"{HYBRIDEP_TX_DEPTH_TOKEN_FACTOR * t + HYBRIDEP_TX_DEPTH_EXTRA:,}")


def _gpu_detail(group_of):
    def detail(model, stack, plan, cluster: Cluster) -> str:
        cc = cluster.hardware.compute_capability
        return f"{cluster.hardware.name}: compute capability {cc or 'not given'}, a group of {int(group_of(plan))} ranks"
    return detail


_MEGATRON_GROUP = lambda p: etp_of(p) * np.asarray(p.ep)  # noqa: E731
# who runs Hybrid-EP, by the stack's start-up set: the four HYBRIDEP rules below are DeepEP's own checks (rule
# field dispatcher), met at Megatron's start-up (fused_a2a.py init_hybrid_ep_buffer) or torchtitan 0.3's
# (pytorch/torchtitan release/0.3 @4f9e9a47d distributed/deepep/hybridep.py get_buffer l. 394-452: the same
# HybridEPBuffer over the EP group, etp 1, at local_batch_size x seq_len / (cp x tp) tokens)
_HYBRIDEP_WHO = {"megatron": "Megatron's Hybrid-EP dispatcher",
                 "torchtitan": "torchtitan's HybridEP dispatcher (DeepEP's HybridEPBuffer, distributed/deepep/hybridep.py)"}


def _hybridep_text(text: str):
    """text_for of a HYBRIDEP rule: `text` (Megatron's words, its REASONS line) with the stack's trainer named."""
    def on(stack) -> str:
        name = stack.runs.startup_rules if stack.runs is not None else None
        who = _HYBRIDEP_WHO.get(name, f"{stack.name}'s Hybrid-EP dispatcher")
        return text.replace(_HYBRIDEP_WHO["megatron"], who, 1)
    return on
_DEEPEP_GPU_SOURCE = (f"{_DEEPEP} @567632d README.md l. 43-49 (Requirements: Ampere (SM80), Hopper (SM90)), setup.py l. 57-66 "
                      "(DISABLE_SM90_FEATURES for SM80: assert disable_nvshmem, 'Disable internode and low-latency kernels'), "
                      "csrc/deep_ep.cpp Buffer::Buffer l. 166-168 (num_rdma_ranks = max(1, num_ranks / 8); without NVSHMEM "
                      "assert num_rdma_ranks == 1, 'NVSHMEM is disabled during compilation')")
_DEEPEP_GPU_HINT = ("use a Hopper or newer GPU (compute capability 9.0+) for DeepEP over 8 ranks; on Ampere keep the "
                    "group within 8 ranks; or moe_dispatcher alltoall (a hardware file without compute_capability: "
                    "give it)")
LATER_RULES = LATER_RULES + (
    StartupRule(
        "MEGATRON_DEEPEP_GPU", "megatron",
        "DeepEP runs on compute capability 8.0+ and, below 9.0 (an SM80 build: no NVSHMEM), only within 8 ranks: "
        "Megatron's expert-TP x EP group is larger or the GPU older",
        f"{_DEEPEP_GPU_SOURCE}; the group: {MEGATRON_COMMIT} megatron/core/transformer/moe/fused_a2a.py get_buffer l. 47-50",
        _DEEPEP_GPU_HINT,
        lambda m, s, p, c: _dispatcher_on(m, s, "deepep") & _deepep_gpu(etp_of(p) * np.asarray(p.ep), c),
        reads_cluster=True, detail=_gpu_detail(_MEGATRON_GROUP)),
    StartupRule(
        "TORCHTITAN_DEEPEP_GPU", "torchtitan",
        "DeepEP runs on compute capability 8.0+ and, below 9.0 (an SM80 build: no NVSHMEM), only within 8 ranks: "
        "torchtitan's EP group is larger or the GPU older",
        f"{_DEEPEP_GPU_SOURCE}; the group: {TORCHTITAN_COMMIT} torchtitan/distributed/deepep/deepep.py get_buffer (the EP "
        "mesh's group)",
        _DEEPEP_GPU_HINT,
        lambda m, s, p, c: tt_deepep(m, s) & _deepep_gpu(np.asarray(p.ep), c),
        reads_cluster=True, detail=_gpu_detail(lambda p: np.asarray(p.ep))),
    StartupRule(
        "DEEPSEEK_DEEPEP_GPU", "deepseek",
        "DeepSeek's all-to-all kernels, released as DeepEP, run on compute capability 8.0+ and, below 9.0, only within 8 "
        "ranks: the expert-TP x EP group is larger or the GPU older",
        f"{_DEEPEP_GPU_SOURCE}; stack_db deepseek moe_dispatcher deepep (arXiv:2412.19437 sec. 3.2.2, released as DeepEP)",
        _DEEPEP_GPU_HINT.replace("; or moe_dispatcher alltoall", ""),
        lambda m, s, p, c: _dispatcher_on(m, s, "deepep") & _deepep_gpu(etp_of(p) * np.asarray(p.ep), c),
        reads_cluster=True, detail=_gpu_detail(_MEGATRON_GROUP)),
    StartupRule(
        "MEGATRON_HYBRIDEP_GPU", "megatron",
        "Megatron's Hybrid-EP dispatcher runs its TMA kernels on compute capability 9.0+ only",
        f"{_HYBRIDEP} csrc/hybrid_ep/backend/hybrid_ep_backend.cuh (cuda::ptx::cp_async_bulk from l. 1332: PTX "
        "cp.async.bulk needs sm_90), docs/README_Hybrid-EP.md l. 179 (TORCH_CUDA_ARCH_LIST=\"9.0 10.0\")",
        "use a Hopper or newer GPU for hybridep, or moe_dispatcher alltoall (a hardware file without compute_capability: "
        "give it)",
        _hybridep_gpu, reads_cluster=True, detail=_gpu_detail(_MEGATRON_GROUP)),
    StartupRule(
        "MEGATRON_HYBRIDEP_DOMAIN", "megatron",
        "Megatron's Hybrid-EP dispatcher needs the expert-TP x EP group divisible by each rank's group members in its "
        "NVLink domain",
        f"{_HYBRIDEP} deep_ep/hybrid_ep_buffer.py HybridEPBuffer.__init__ l. 61-76 (assert group_size % "
        "num_of_hybrid_ep_ranks_per_nvlink_domain == 0, the ranks detect_accessible_ranks finds, csrc/hybrid_ep/allocator/"
        f"allocator.cu l. 178-211); {_HYBRIDEP_GROUP}",
        "choose etp x ep dividing the NVLink domain's GPUs (or a multiple of them), or moe_dispatcher alltoall",
        _hybridep_domain, reads_cluster=True, detail=_domain_detail),
    StartupRule(
        "MEGATRON_HYBRIDEP_EXPERTS", "megatron",
        "Megatron's Hybrid-EP dispatcher needs experts per rank x the group's ranks per NVLink domain divisible by 4 "
        "(and the hidden size by 16)",
        f"{_HYBRIDEP} csrc/hybrid_ep/config.cuh BufferConfig::is_valid l. 84-95 ((num_of_experts_per_rank * "
        "num_of_ranks_per_node) % 4 == 0, hidden_dim % 16 == 0), Configurer l. 393-399 ('The buffer config is not "
        f"valid.'); {_HYBRIDEP_GROUP}",
        "choose ep with experts per rank x ranks per NVLink domain a multiple of 4, or moe_dispatcher alltoall",
        _hybridep_experts, reads_cluster=True, detail=_experts_detail),
    StartupRule(
        "MEGATRON_HYBRIDEP_TOKENS", "megatron",
        f"Megatron's Hybrid-EP dispatcher across NVLink domains takes at most {HYBRIDEP_MAX_TOKENS:,} tokens per rank "
        "(3 x tokens + 1 below the IB QP depth 65,536; tokens padded to 64)",
        f"{_HYBRIDEP} csrc/hybrid_ep/config.cuh hybrid_ep_token_capacity_is_valid l. 18-50 (3 * max_num_of_tokens_per_rank "
        "+ 1 < HYBRID_EP_IB_QP_MAX_TX_DEPTH 65536 where num_of_nodes > 1), Configurer l. 383-399 (max(tokens, 512) "
        f"rounded up to 64); {MEGATRON_COMMIT} megatron/core/transformer/moe/fused_a2a.py HybridEPDispatch.forward l. "
        "400-402 (max_num_of_tokens_per_rank = x.shape[-2])",
        "lower the tokens per rank (micro_batch x seq_len / cp, / tp under SP) to 21,824 or fewer, keep the expert-TP x "
        "EP group in one NVLink domain, or moe_dispatcher alltoall",
        _hybridep_tokens, reads_cluster=True, reads_mbs=True, detail=_tokens_detail),
)


# DeepEP's own Hybrid-EP checks (codes 58-61, keys kept): keyed on the dispatcher, not the stack's start-up set, so they
# apply on every stack that runs hybridep (megatron, torchtitan-0.3: runs.moe_dispatchers), each group, token count
# and text the stack's (etp_of x ep: torchtitan 0.3 runs etp 1 under EP; hybridep_tokens by runs.hybridep_buffer_tokens)
HYBRIDEP_RULES = ("MEGATRON_HYBRIDEP_GPU", "MEGATRON_HYBRIDEP_DOMAIN", "MEGATRON_HYBRIDEP_EXPERTS", "MEGATRON_HYBRIDEP_TOKENS")
def _hybridep_tokens_hint(model, stack) -> str:
    """MEGATRON_HYBRIDEP_TOKENS's hint in the stack's token rule (runs.hybridep_buffer_tokens)."""
    megatron = ("lower the tokens per rank (micro_batch x seq_len / cp, / tp under SP) to 21,824 or fewer, keep the "
                "expert-TP x EP group in one NVLink domain, or moe_dispatcher alltoall")
    if stack is None or stack.runs is None or stack.runs.hybridep_buffer_tokens != "local_batch":  # a stack setting
        return megatron
    return ("lower the tokens per rank (the local batch x seq_len / (cp x tp): torchtitan sizes the buffer for the "
            "local batch, gbs / dp under PP, not the micro-batch) to 21,824 or fewer, keep the EP group in one NVLink "
            "domain, or moe_dispatcher alltoall")


LATER_RULES = tuple(replace(r, trainer="deepep", dispatcher="hybridep", text_for=_hybridep_text(r.text),
                            **({"hint": _hybridep_tokens_hint} if r.key == "MEGATRON_HYBRIDEP_TOKENS" else {}))
                    if r.key in HYBRIDEP_RULES else r for r in LATER_RULES)


# appended after the cluster rules so that their codes stay (TORCHTITAN_FP32 landed after them)
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_FP32", "torchtitan",
        "torchtitan trains this plan in fp32: without FSDP (dp_shard x cp = 1) and with TP or PP its mixed precision "
        "is off and its parameters are fp32 (training.dtype float32); the planner prices bf16",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/utils.py maybe_enable_amp l. 243-263 (not fsdp_enabled and "
        "tp_enabled or pp_enabled: 'Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is "
        "enabled.', 'Mixed precision training is disabled', no autocast), distributed/parallel_dims.py l. 334-335 "
        "(fsdp_enabled = dp_shard > 1 or cp > 1), train.py l. 147-151 (the model built under "
        "set_default_dtype(training.dtype), float32 by default: config/job_config.py l. 275) and l. 319-323; "
        "MixedPrecisionPolicy(param_dtype=mixed_precision_param) is made only in apply_fsdp "
        "(models/llama3/infra/parallelize.py l. 313, called where fsdp_enabled, l. 125-139; llama4's l. 353)",
        "shard over the data-parallel ranks (sharding fsdp or hsdp: dp_shard x cp > 1), or use tp 1 and pp 1, or train "
        "pure bf16 (--bytes-per-param pure-bf16: torchtitan's training.dtype bfloat16)",
        lambda m, s, p: _tt_fp32(s, p)),
)


# torchtitan @e347b1e5e [T]: the float8 grouped-GEMM converter of the routed experts (job field fp8_grouped_experts on an
# fp8 job whose linear recipe is not mxfp8: the export writes [quantize.grouped_mm.float8] fqns = ["experts"] beside
# [quantize.linear.float8], one quantization type per job, components/quantization/__init__.py l. 37-55):
#   TORCHTITAN_FP8_GROUPED_MM_PP_CP components/quantization/float8.py Float8GroupedMMConverter.__init__ l. 192-198 asserts
#                            pipeline_parallel_degree == 1 and context_parallel_degree == 1 ('Float8 MoE training
#                            prototype does not yet support pipeline / context parallelism'). Its SM89 check (l. 184-185)
#                            is the fp8 peak's (precisions.recipe_unsupported); the MX sibling (mx.py MXGroupedMMConverter
#                            l. 99-168, with mxfp8) asserts SM100 only, which an mxfp8 peak implies, and no pp / cp
def _tt_fp8_grouped_mm(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_FP8_GROUPED_MM_PP_CP: an MoE model whose routed experts run fp8 (the plan's fge: the
    job's fp8_grouped_experts, else the stack's rule, or the variant fit tries, space.variant_choices)
    under an fp8 recipe other than mxfp8 (the float8 converter), at pp > 1 or cp > 1."""
    from .precisions import FP8, FP8_RECIPE_CODES

    if not (model is not None and model.moe is not None):
        return np.zeros(np.shape(plan.tp), dtype=bool)
    f8 = ((np.asarray(plan.precision) == FP8) & (np.asarray(plan.f8r) != FP8_RECIPE_CODES["mxfp8"])
          & (np.asarray(plan.fge) > 0))
    return f8 & ((np.asarray(plan.pp) > 1) | (np.asarray(plan.cp) > 1))


LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_FP8_GROUPED_MM_PP_CP", "torchtitan",
        "torchtitan's float8 grouped-GEMM converter of the routed experts (quantize.grouped_mm.float8) refuses "
        "pipeline and context parallelism",
        f"{TORCHTITAN_COMMIT} torchtitan/components/quantization/float8.py Float8GroupedMMConverter.__init__ l. 192-198 "
        "(assert pipeline_parallel_degree == 1, 'Float8 MoE training prototype does not yet support pipeline "
        "parallelism'; assert context_parallel_degree == 1, '... context parallelism')",
        "with fp8_grouped_experts use pp 1 and cp 1, or leave the experts bf16 (--no-fp8-grouped-experts, torchtitan's "
        "default)",
        _tt_fp8_grouped_mm),
)


# Megatron-LM @d98e8a64's NVFP4 training (--fp4-format e2m1 --fp4-recipe nvfp4: Transformer Engine's NVFP4BlockScaling,
# fp4_utils.py get_fp4_recipe l. 219-243) on the Transformer Engine it pins (TE 2.17.1, NVIDIA/TransformerEngine @4329ff84;
# validate_args l. 1108-1109 needs >= 2.7.0.dev0, met). Its other fp4 checks are the job's, not the plan's: --fp4-format
# beside --fp8-format (arguments.py l. 1100-1101) cannot be a plan (one precision field), --fp4-param-gather without it
# is refused by plan.py (arguments.py l. 1104-1105), a script's by trainers/rules.py FP4; GTP and
# moe_single_grouped_weight (arguments.py l. 1516-1521, transformer_config.py l. 1718-1735) are not priced; Blackwell is
# the hardware's fp4 peak (schema.Hardware.peak_flops). torchtitan @e347b1e5e has no NVFP4 converter (the stack has
# no nvfp4 recipe: such a job is refused before pricing)
#   MEGATRON_NVFP4_TOKENS   TE's NVFP4 quantizer takes tensors whose flattened first dimension divides by 16
#                           (transformer_engine/pytorch/csrc/quantizer.cpp l. 127 NVFP4_BLOCK_SIZE = 16,
#                           NVFP4Quantizer::create_tensor l. 1814-1815 NVTE_CHECK(flat_first_dim % NVFP4_BLOCK_SIZE == 0,
#                           'First dim for NVFP4 must be divisible by 16')). Each quantized linear's input is the
#                           [s, b, h] activation flattened to micro_batch x seq / cp tokens, and under sequence
#                           parallelism the local shard (/ tp) is quantized before the all-gather
#                           (module/layernorm_linear.py l. 207-291: the norm writes its output through the input
#                           quantizer, then gather_along_first_dim(ln_out, tp_group, quantizer=...)); the output
#                           gradients likewise. Weights' dims are the model's (not checked here)
NVFP4_BLOCK = 16  # TE quantizer.cpp @4329ff84 l. 127


def _local_rows_break(plan, block: int) -> np.ndarray:
    """Where micro_batch x seq / cp (/ tp under SP) is not a whole multiple of `block` (integer arithmetic:
    mbs x seq divisible by cp x tp_sp x block)."""
    tp_sp = np.where(np.asarray(plan.sp) > 0, np.asarray(plan.tp), 1)
    return (np.asarray(plan.mbs) * np.asarray(plan.seq)) % (np.asarray(plan.cp) * tp_sp * block) != 0


def _nvfp4_tokens(plan) -> np.ndarray:
    """MEGATRON_NVFP4_TOKENS: an nvfp4 plan whose quantized activations' rows, micro_batch x seq / cp (/ tp under
    SP), are not a whole multiple of 16 (integer arithmetic: mbs x seq divisible by cp x tp_sp x 16)."""
    from .precisions import PRECISION_CODES

    nv = np.asarray(plan.precision) == PRECISION_CODES["nvfp4"]
    if not np.any(nv):  # the job's precision (one for every candidate): the micro-batch is read only under nvfp4
        return np.zeros(np.shape(plan.tp), dtype=bool)  # (space.mode_rule_fields keys on it there: PRECISION_RULES)
    return nv & _local_rows_break(plan, NVFP4_BLOCK)


def _nvfp4_detail(model, stack, plan, cluster) -> str:
    tp_sp = int(plan.tp) if int(plan.sp) else 1
    tokens = int(plan.mbs) * int(plan.seq) / (int(plan.cp) * tp_sp)
    return (f"micro_batch {int(plan.mbs)} x seq {int(plan.seq):,} / cp {int(plan.cp)}"
            + (f" / tp {tp_sp} (SP)" if tp_sp > 1 else "") + f" = {tokens:g} rows")


LATER_RULES = LATER_RULES + (
    StartupRule(
        "MEGATRON_NVFP4_TOKENS", "megatron",
        "Transformer Engine's NVFP4 quantizer needs each linear input's rows (micro_batch x seq / cp, / tp under SP) "
        "divisible by 16",
        "NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, Megatron-LM @d98e8a64's pin) transformer_engine/pytorch/csrc/"
        "quantizer.cpp NVFP4Quantizer::create_tensor l. 1814-1815 (NVTE_CHECK(flat_first_dim % NVFP4_BLOCK_SIZE == 0, "
        "'First dim for NVFP4 must be divisible by 16'), module/layernorm_linear.py l. 207-291 (the local shard "
        f"quantized before the SP all-gather); {MEGATRON_COMMIT} --fp4-format e2m1 --fp4-recipe nvfp4",
        "choose micro_batch, cp and tp so that micro_batch x seq / cp (/ tp with SP) is a multiple of 16, or precision "
        "fp8 / bf16",
        lambda m, s, p: _nvfp4_tokens(p), reads_mbs=True, detail=_nvfp4_detail),
)


# torchtitan @e347b1e5e [T]: what the model code that trains the model runs (issue 22). torchtitan trains each model
# with its own code, torchtitan/models/<code>/ (TrainSpec: model class, parallelize_fn, pipelining_fn), so its
# capabilities differ by code; stack_db torchtitan runs.model_codes maps the model's Hugging Face model_type
# (ModelSpec.hf_model_type, an explicit field: never the model's name) to its code and what that code runs, each cited:
#   TORCHTITAN_MODEL_DISPATCHER  the MoE dispatcher is one the code builds (model_codes moe_dispatchers): only
#                            deepseek_v3's builds DeepEPMoE (build_moe(moe_impl)); llama4's standard MoE passes two
#                            inputs where DeepEPExpertParallel unpacks five (it cannot run), qwen3's and gpt_oss's
#                            never read expert_parallel_comm_backend (they run the standard all-to-all: not the plan
#                            priced). In DISPATCHER_RULES, so fit tries deepep only for the codes that build it
#   TORCHTITAN_MODEL_PP      pp > 1 where the code has no pipelining_fn (qwen3, gpt_oss: train.py l. 218-223
#                            RuntimeError '... does not support pipelining')
#   TORCHTITAN_MODEL_CP      cp > 1 where the code's attention refuses CP (gpt_oss: 'CP support for gpt-oss model is
#                            still in progress'; deepseek_v3's released flavors and llama4's chunked (irope) ones
#                            run FlexAttention, and update_from_config raises with CP on anything but SDPA)
#   TORCHTITAN_MODEL_ASYNC_TP async TP (tp_comm_overlap, tp > 1) where the code never applies it (gpt_oss:
#                            apply_non_moe_tp(enable_async_tp=False)): the overlap priced would not happen. In
#                            VARIANT_RULES, so fit tries TP overlap only where the code applies it
# torchtitan 0.3.0 (stack torchtitan-0.3, release/0.3 @4f9e9a47d) keeps its own map (stack_db torchtitan-0.3
# runs.model_codes): no llama4 code; every code it lists has pipeline_llm and applies async TP through
# apply_compile, builds both the stack's dispatchers (alltoall, hybridep: model_registry's moe_comm_backend), and runs
# CP under FlexAttention; only gpt_oss's released
# configs (varlen attention) refuse CP there. So on 0.3.0 only TORCHTITAN_MODEL_CP can fire (gpt_oss). Varlen attention
# in any other code (llama3_debugmodel_varlen_attn, sft_qwen3_8b_math; main's 8B_varlen) is TORCHTITAN_VARLEN_CP's (code 86).
# A model whose hf_model_type no entry lists (torchtitan has no code for it: mixtral, gemma3, ...) or that has none
# (no config.json: Megatron's GPT) breaks none of these: it is priced on the stack's runs, as a port of the model into
# torchtitan would run them, and model_code_assumed says so (explain's and fit's assumed lines).
def model_code(model, stack):
    """The stack's model code (stack_db runs.model_codes, a schema.ModelCode) that trains the model: the entry
    listing its hf_model_type; None where the stack lists no codes, the model has no hf_model_type, or no entry
    lists it (model_code_assumed)."""
    codes = stack.runs.model_codes if stack is not None and stack.runs is not None else None
    if not codes or model is None or model.hf_model_type is None:
        return None
    return next((c for c in codes if model.hf_model_type in c.model_types), None)


def model_code_assumed(model, stack) -> list[str]:
    """The assumed line of a model the stack's model codes do not cover (the rule above): none where the stack
    keeps no map or a code trains the model."""
    codes = stack.runs.model_codes if stack is not None and stack.runs is not None else None
    if not codes or model is None or model_code(model, stack) is not None:
        return []
    types = ", ".join(t for c in codes for t in c.model_types)
    why = (f"{model.name} gives no hf_model_type (no Hugging Face config.json)" if model.hf_model_type is None
           else f"{stack.name} has no model code for model_type {model.hf_model_type!r}")
    return [f"model code: {why}; {stack.name}'s codes train {types} ({stack.origin} runs.model_codes): priced on "
            f"the stack's runs as a port of the model would run them, the model-code start-up rules "
            f"(TORCHTITAN_MODEL_*) not applied"]


def model_code_compile_note(model, stack) -> list[str]:
    """The assumed line of a model whose code compiles no block (ModelCode.compiles_blocks false: torchtitan
    @e347b1e5e's gpt_oss) on a stack with a compile mode: with torch.compile on the blocks run eager, silently
    (the trainer neither refuses nor warns), and are priced so (plan.code_compiles_blocks); none elsewhere."""
    code = model_code(model, stack)
    if code is None or code.compiles_blocks or stack.compiled_kernels is None:
        return []
    return [f"torch.compile: {stack.name}'s model code {code.code} (model_type {model.hf_model_type}) applies no "
            f"torch.compile to its blocks ({stack.origin} runs.model_codes compiles_blocks false): where the "
            f"plan compiles, its blocks are priced eager (the stack's eager kernels and saves; under selective "
            f"recompute the routed experts' grouped GEMMs re-run) and only the loss compiled"]


def _code_lacks(model, stack, plan, what) -> np.ndarray:
    """Every candidate alike: whether the model's code (model_code) lacks `what` (a predicate on the code)."""
    c = model_code(model, stack)
    return np.full(np.shape(plan.tp), bool(c is not None and what(c)), dtype=bool)


def _model_dispatcher(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_MODEL_DISPATCHER: an MoE model on a dispatcher (the stack's, laid by plan.apply_moe_dispatcher)
    its code does not build."""
    disp = stack.defaults.moe_dispatcher if stack is not None else None
    runs = stack.runs.moe_dispatchers if stack is not None and stack.runs is not None else None
    # (a dispatcher the stack runs at all: one it does not is refused first, naming runs.moe_dispatchers)
    on = model is not None and model.moe is not None and disp is not None and disp in (runs or [disp])
    return bool(on) & _code_lacks(model, stack, plan, lambda c: c.moe_dispatchers is not None and disp not in c.moe_dispatchers)


def _code_detail(model, stack, plan, cluster) -> str:
    c = model_code(model, stack)
    what = f"dispatchers {', '.join(c.moe_dispatchers)}" if c.moe_dispatchers else "every dispatcher of the stack"
    return (f"{model.name}: model_type {model.hf_model_type}, {stack.name} model code {c.code}: {what}; "
            f"cp {'yes' if c.context_parallel else 'no'}, pp {'yes' if c.pipeline_parallel else 'no'}, "
            f"async TP {'yes' if c.async_tp else 'no'}")


_TT_CODES = (f"{TORCHTITAN_COMMIT} (stack_db torchtitan runs.model_codes, each code's sources); torchtitan 0.3.0: "
             "pytorch/torchtitan release/0.3 @4f9e9a47d (stack_db torchtitan-0.3 runs.model_codes)")
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_MODEL_DISPATCHER", "torchtitan",
        "torchtitan's model code for this model does not build the MoE dispatcher asked for (only deepseek_v3's "
        "builds DeepEP's)",
        f"{TORCHTITAN_COMMIT} torchtitan/models/moe/moe.py build_moe l. 577-587 (DeepEPMoE under moe_impl deepep), "
        "called only by models/deepseek_v3/model/model.py l. 358-362; models/llama4/model/model.py l. 404 builds the "
        "standard MoE (two inputs to the experts, DeepEPExpertParallel._token_dispatch unpacks five, "
        "distributed/expert_parallel.py l. 339); models/qwen3 and models/gpt_oss never read "
        f"expert_parallel_comm_backend (the standard all-to-all runs); {_TT_CODES}",
        "use moe_dispatcher alltoall (expert_parallel_comm_backend \"standard\") for this model on torchtitan",
        _model_dispatcher, detail=_code_detail),
    StartupRule(
        "TORCHTITAN_MODEL_PP", "torchtitan",
        "torchtitan's model code for this model has no pipelining function: it refuses pipeline parallelism",
        f"{TORCHTITAN_COMMIT} torchtitan/train.py l. 218-223 (pp enabled and train_spec.pipelining_fn None: "
        "RuntimeError 'Pipeline Parallel is enabled but ... does not support pipelining'); models/qwen3/__init__.py "
        f"l. 199 and models/gpt_oss/__init__.py l. 85 (pipelining_fn=None); {_TT_CODES}",
        "use pp 1 for this model on torchtitan",
        lambda m, s, p: _code_lacks(m, s, p, lambda c: not c.pipeline_parallel) & (np.asarray(p.pp) > 1),
        detail=_code_detail),
    StartupRule(
        "TORCHTITAN_MODEL_CP", "torchtitan",
        "torchtitan's model code for this model refuses context parallelism (main: gpt_oss's attention, deepseek_v3's "
        "and llama4's FlexAttention flavors; 0.3.0: gpt_oss's varlen attention)",
        f"{TORCHTITAN_COMMIT} torchtitan/models/gpt_oss/model/args.py l. 89-92 ('CP support for gpt-oss model is "
        "still in progress'); models/deepseek_v3/model/args.py l. 101-109 and models/llama4/model/args.py l. 79-87 "
        "(NotImplementedError where context_parallel_degree > 1 and attn_type != sdpa; deepseek_v3's 16B / 236B / 671B "
        "and llama4's _irope flavors set attn_type flex); torchtitan 0.3.0 (release/0.3 @4f9e9a47d): "
        "models/gpt_oss/config_registry.py l. 70-71, 101-102 (varlen attention, __init__.py l. 391) and "
        "distributed/context_parallel/api.py l. 103-104 ('Variable-length attention CP is not yet supported'); "
        f"{_TT_CODES}",
        "use cp 1 for this model on torchtitan",
        lambda m, s, p: _code_lacks(m, s, p, lambda c: not c.context_parallel) & (np.asarray(p.cp) > 1),
        detail=_code_detail),
    StartupRule(
        "TORCHTITAN_MODEL_ASYNC_TP", "torchtitan",
        "torchtitan's model code for this model never applies async TP: the TP overlap priced would not happen",
        f"{TORCHTITAN_COMMIT} torchtitan/models/gpt_oss/infra/parallelize.py l. 95-101 (apply_non_moe_tp(..., "
        f"enable_async_tp=False) whatever enable_async_tensor_parallel says); {_TT_CODES}",
        "leave tp_comm_overlap off (--no-tp-comm-overlap) for this model on torchtitan",
        lambda m, s, p: _code_lacks(m, s, p, lambda c: not c.async_tp) & (np.asarray(p.tpo) > 0) & (np.asarray(p.tp) > 1),
        detail=_code_detail),
)


# Megatron-LM @d98e8a64's FP8 training (--fp8-format with --fp8-recipe delayed / tensorwise / mxfp8 / blockwise:
# Transformer Engine's DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling, fp8_utils.py
# get_fp8_recipe) on the Transformer Engine it pins (TE 2.17.1, NVIDIA/TransformerEngine @4329ff84). Every recipe runs
# TE's modules with fp8=True, and their forward checks the GEMM operands' shapes; Megatron pads no GPT sequence for
# it (its fp8 padding is the multimodal models' context_parallel.get_padding and radio.py's, not pretrain_gpt's) but
# pads the routed experts' token groups (moe/experts.py l. 309-312, 739-742: TE's Fp8Padding, or
# --moe-router-padding-for-quantization), whose grouped GEMMs (module/grouped_linear.py) TE does not check this way:
#   MEGATRON_FP8_ROWS   utils.py assert_dim_for_fp8_exec l. 613-623 (ValueError 'FP8 execution requires the product
#                       of all dimensions except the last to be divisible by 8 and the last dimension to be
#                       divisible by 16'), called on each linear's input and weight: module/linear.py l. 322-324,
#                       layernorm_linear.py l. 168-169, layernorm_mlp.py l. 352, before any all-gather, so the
#                       rows are the local [s, b, h] activation's, micro_batch x seq / cp, / tp under sequence
#                       parallelism (the column-parallel inputs hold the local shard: linear.py l. 301-303,
#                       layernorm_linear.py l. 159). Its last-dimension and weight checks read the model's widths
#                       over tp (hidden, heads x head_dim / tp, ffn / tp): MEGATRON_FP8_WIDTHS (rule 71, below)
#   MEGATRON_MXFP8_ROWS csrc/quantizer.cpp l. 128 MXFP8_BLOCK_SIZE = 32, MXFP8Quantizer::create_tensor l. 1395-1397
#                       (NVTE_CHECK(flat_first_dim % 32 == 0 && flat_last_dim % 32 == 0, 'MXFP8 requires tensor
#                       dims that are divisible by 32')): the same rows quantized by the input quantizer (the local
#                       shard under SP, quantized before the all-gather, as NVFP4's)
# The nvfp4 recipe runs under the same fp8=True and so assert_dim_for_fp8_exec too: rule 64's 16 rows imply its 8.
FP8_EXEC_ROWS = 8  # TE utils.py @4329ff84 l. 617 (assert_dim_for_fp8_exec: leading dims' product % 8)
MXFP8_BLOCK = 32  # TE quantizer.cpp @4329ff84 l. 128


def _fp8_rows(plan, mxfp8_only: bool) -> np.ndarray:
    """MEGATRON_FP8_ROWS (every fp8 recipe, rows % 8) or MEGATRON_MXFP8_ROWS (the mxfp8 recipe, rows % 32)."""
    from .precisions import FP8, FP8_RECIPE_CODES

    f8 = np.asarray(plan.precision) == FP8
    if not np.any(f8):  # the job's precision (one for every candidate): the micro-batch is read only under fp8
        return np.zeros(np.shape(plan.tp), dtype=bool)  # (space.mode_rule_fields keys on it there: PRECISION_RULES)
    if mxfp8_only:
        mx = f8 & (np.asarray(plan.f8r) == FP8_RECIPE_CODES["mxfp8"])
        if not np.any(mx):  # (a variant of another recipe: every row passes, the rows not computed)
            return np.zeros(np.shape(plan.tp), dtype=bool)
        return mx & _local_rows_break(plan, MXFP8_BLOCK)
    return f8 & _local_rows_break(plan, FP8_EXEC_ROWS)


LATER_RULES = LATER_RULES + (
    StartupRule(
        "MEGATRON_FP8_ROWS", "megatron",
        "Transformer Engine's FP8 GEMMs need each linear input's rows (micro_batch x seq / cp, / tp under SP) "
        "divisible by 8",
        "NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, Megatron-LM @d98e8a64's pin) transformer_engine/pytorch/"
        "utils.py assert_dim_for_fp8_exec l. 613-623 ('FP8 execution requires the product of all dimensions except "
        "the last to be divisible by 8 ...'), called in module/linear.py l. 322-324, layernorm_linear.py l. 168-169 "
        f"on the local input (before the SP all-gather); {MEGATRON_COMMIT} --fp8-format (no sequence padding in "
        "pretrain_gpt)",
        "choose micro_batch, cp and tp so that micro_batch x seq / cp (/ tp with SP) is a multiple of 8, or precision "
        "bf16",
        lambda m, s, p: _fp8_rows(p, False), reads_mbs=True, detail=_nvfp4_detail),
    StartupRule(
        "MEGATRON_MXFP8_ROWS", "megatron",
        "Transformer Engine's MXFP8 quantizer needs each linear input's rows (micro_batch x seq / cp, / tp under SP) "
        "divisible by 32",
        "NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, Megatron-LM @d98e8a64's pin) transformer_engine/pytorch/csrc/"
        "quantizer.cpp l. 128 (MXFP8_BLOCK_SIZE = 32), MXFP8Quantizer::create_tensor l. 1395-1397 "
        "(NVTE_CHECK(flat_first_dim % MXFP8_BLOCK_SIZE == 0 && ..., 'MXFP8 requires tensor dims that are divisible "
        "by 32')), module/layernorm_linear.py l. 207-291 (the local shard quantized before the SP all-gather); "
        f"{MEGATRON_COMMIT} --fp8-recipe mxfp8",
        "choose micro_batch, cp and tp so that micro_batch x seq / cp (/ tp with SP) is a multiple of 32, or another "
        "fp8 recipe (--fp8-recipe delayed / tensorwise: rows divisible by 8)",
        lambda m, s, p: _fp8_rows(p, True), reads_mbs=True, detail=_nvfp4_detail),
)


# Megatron-LM @d98e8a64 on TE @4329ff84 [M]: the same checks read the quantized GEMM operands' WIDTHS too (issue 22):
#   MEGATRON_FP8_WIDTHS  every quantized linear's local input width (its last dim) and its weight shard's out width
#                        (the weight's leading dim), which tensor parallelism splits: (1) every fp8 recipe and nvfp4
#                        (both run TE's modules with fp8=True): utils.py assert_dim_for_fp8_exec l. 613-623, called on
#                        (inputmat, weight) in module/linear.py l. 322-324, layernorm_linear.py l. 168-169 and on
#                        (inputmat, fc1_weight, fc2_weight) in layernorm_mlp.py l. 352: the input's last dim % 16, the
#                        weight [out / tp, in] (column-parallel) or [out, in / tp] (row-parallel) with out % 8 and
#                        in % 16; (2) mxfp8: csrc/quantizer.cpp MXFP8Quantizer::create_tensor l. 1395-1397, both dims
#                        of every quantized tensor % 32; (3) nvfp4: NVFP4Quantizer::create_tensor l. 1814-1819, both
#                        dims % 16. The routed experts' grouped GEMMs (module/grouped_linear.py, Megatron's
#                        TEGroupedMLP) never call assert_dim_for_fp8_exec, but quantize each expert's weight shard
#                        (_prepare_weights_for_grouped_tensor_gemm l. 208-221: base.py quantize_weight -> tex.quantize
#                        -> Quantizer::create_tensor, csrc/extensions/cast.cpp l. 63) so (2) and (3) hold for
#                        [2 ffn_e / etp (gated), h] and [h, ffn_e / etp]; the delayed / tensorwise / blockwise
#                        quantizers' create_tensor carry no such check (not a break here). The widths: the hidden
#                        size h (not split), attention's proj input heads x head_dim / tp (MLA: heads x v_head_dim /
#                        tp) and its QKV out (heads + 2 kv_heads) x head_dim / tp (MLA: q_up heads x qk_head_dim / tp,
#                        kv_up heads x (qk_nope + v) / tp), the dense MLP's and the shared experts' (Megatron's
#                        SharedExpertMLP: num_shared x their width, one TE MLP) ffn / tp (fc2's input; fc1's out,
#                        1 or 2 x ffn / tp, is then a multiple of 16 / 32 too), the routed experts' ffn_e / etp.
#                        Every TE linear of every mixer kind the model's layers use (issue 22; which modules are TE
#                        linears: Megatron's specs, TESpecProvider linear / column_parallel_linear / row_parallel_
#                        linear / column_parallel_layer_norm_linear = TELinear / TEColumnParallelLinear /
#                        TERowParallelLinear / TELayerNormColumnParallelLinear, extensions/transformer_engine_spec_
#                        provider.py l. 39-57): softmax attention in any layer (a hybrid's too), its QKV out with the
#                        output gate's heads x head_dim (transformer/attention.py l. 1689-1691); MLA's down projections
#                        (gpt_layer_specs.py l. 122-126: linear_q_down_proj / linear_kv_down_proj = backend.linear(),
#                        TELinear with parallel_mode 'duplicated', multi_latent_attention.py l. 526-527, 573-574: whole on every
#                        rank) [q_lora_rank, h] and [kv_lora_rank + qk_rope_head_dim, h] (l. 537-541, 584-588): their
#                        out % 8, the up projections' inputs q_lora_rank and kv_lora_rank % 16; Mamba-2's in_proj
#                        (TELayerNormColumnParallelLinear, models/hybrid/hybrid_layer_specs.py l. 115-117, ssm/
#                        mamba_mixer.py l. 281-295) out 2 d_inner + 2 groups x state + heads over tp, out_proj
#                        (TERowParallelLinear, l. 437-440) input d_inner over tp; Gated DeltaNet's in_proj
#                        (experimental_attention_variant_module_specs.py l. 88-90; ssm/gated_delta_net/common.py
#                        l. 202-214, gdn.py l. 45) out 2 key heads x key dim + 2 value heads x value dim + 2 value
#                        heads over tp and its out_proj input value heads x value dim over tp (common.py l. 274-276),
#                        plus Megatron's own assertion that the whole in_proj width divide by get_fp8_align_size
#                        (common.py l. 205-210, fp8_utils.py l. 356-361: 32 under mxfp8, else 16; only with
#                        config.fp8, not nvfp4). Mamba-1 (Jamba) has no Megatron module: not checked. The MLP widths
#                        read moe.first_k_dense / layer_freq (a layer kind's own dense MLP beside MoE kinds, as
#                        Jamba's, is not read here).
#                        An MoE trained with ungrouped experts (SequentialMLP: TE Linear each) would meet (1) too:
#                        not checked (the planner prices Megatron's grouped GEMM)
FP8_EXEC_WIDTH = 16  # TE utils.py @4329ff84 l. 617 (assert_dim_for_fp8_exec: last dim % 16)


def _used_mixers(model) -> list:
    """The mixer spec of each layer kind the model's layer_pattern uses, in first-use order (None: the model's default
    mixer, MLA with `mla:`, else global attention); [None] for a model without layer_pattern."""
    if model.layer_pattern is None:
        return [None]
    return [model.layer_kinds[n].mixer for n in dict.fromkeys(model.layer_pattern)]


def _quantized_widths(model) -> list[tuple[str, int, str, str]]:
    """(name, full width, split axis 'tp' / 'etp' / '', role 'in' / 'out' / 'grouped' / 'align') of the model's
    quantized GEMM operand widths (MEGATRON_FP8_WIDTHS): 'in' a TE linear's input width (last dim), 'out' its weight's
    out width (leading dim), 'grouped' a routed expert's width (quantizer checks only), 'align' Megatron's own
    assertion on a whole width (GatedDeltaNet's in_proj, get_fp8_align_size). Every TE linear of every mixer kind the
    model's layers use: softmax attention (any layer, with its output gate's a x d), MLA with its down projections,
    Mamba-2's and Gated DeltaNet's in / out projections."""
    from .schema import ChunkedAttention, GatedDeltaNet, GlobalAttention, Mamba2, MLAAttention, SlidingAttention

    if model is None:
        return []
    h, a = model.hidden_size, model.num_attention_heads
    out = [("hidden_size", h, "", "in")]
    mixers = _used_mixers(model)
    softmax = (GlobalAttention, SlidingAttention, ChunkedAttention)
    if model.mla is not None and any(x is None or isinstance(x, MLAAttention) for x in mixers):
        m = model.mla
        out += [("attention proj input heads x v_head_dim", a * m.v_head_dim, "tp", "in"),
                ("MLA q_up out heads x qk_head_dim", a * m.qk_head_dim, "tp", "out"),
                ("MLA kv_up out heads x (qk_nope + v_head_dim)", a * (m.qk_nope_head_dim + m.v_head_dim), "tp", "out")]
        if m.q_lora_rank is not None:  # linear_q_down_proj (TELinear, duplicated: whole on every rank) and q_up's input
            out += [("MLA q_down out q_lora_rank", m.q_lora_rank, "", "out"),
                    ("MLA q_up input q_lora_rank", m.q_lora_rank, "", "in")]
        out += [("MLA kv_down out kv_lora_rank + qk_rope_head_dim", m.kv_lora_rank + m.qk_rope_head_dim, "", "out"),
                ("MLA kv_up input kv_lora_rank", m.kv_lora_rank, "", "in")]
    gates = sorted({bool(x.output_gate) for x in mixers if isinstance(x, softmax)}
                   | ({False} if model.mla is None and None in mixers else set()))
    d = model.dhead
    if gates:
        out.append(("attention proj input heads x head_dim", a * d, "tp", "in"))
    for g in gates:  # attention.py l. 1689-1691: the output gate adds heads x head_dim to linear_qkv's out
        out.append(("QKV out (2 heads + 2 kv_heads) x head_dim (output gate)" if g else
                    "QKV out (heads + 2 kv_heads) x head_dim", (a * (2 if g else 1) + 2 * model.kv_heads) * d, "tp", "out"))
    for x in (x for x in mixers if isinstance(x, (Mamba2, GatedDeltaNet))):
        if isinstance(x, Mamba2):  # mamba_mixer.py l. 281-295 (in_proj d_model -> z x B C dt), l. 437-440 (out_proj)
            di = x.num_heads * x.head_dim
            out += [("Mamba-2 in_proj out 2 d_inner + 2 groups x state + heads",
                     2 * di + 2 * x.n_groups * x.state_size + x.num_heads, "tp", "out"),
                    ("Mamba-2 out_proj input d_inner", di, "tp", "in")]
        else:  # gated_delta_net/common.py l. 202-214 (in_proj q k v z + gdn.py l. 45's alpha, beta), l. 274-276
            qk, v = x.num_key_heads * x.key_head_dim, x.num_value_heads * x.value_head_dim
            w = 2 * qk + 2 * v + 2 * x.num_value_heads
            out += [("Gated DeltaNet in_proj out 2 qk + 2 v + 2 value heads", w, "tp", "out"),
                    ("Gated DeltaNet in_proj out (Megatron's whole-width assertion)", w, "", "align"),
                    ("Gated DeltaNet out_proj input value heads x value_head_dim", v, "tp", "in")]
    moe = model.moe
    if moe is None or moe.first_k_dense > 0 or moe.layer_freq > 1:
        out.append(("ffn_hidden_size", model.ffn_hidden_size, "tp", "in"))
    if moe is not None:
        fe = moe.expert_ffn_hidden_size or model.ffn_hidden_size
        if moe.num_shared_experts:
            out.append(("shared experts' ffn", moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or fe), "tp", "in"))
        out.append(("expert ffn", fe, "etp", "grouped"))
    return list(dict.fromkeys(out))  # two kinds of one mixer shape: its widths once


def _width_blocks(plan):
    """Per candidate, the divisor each role's local width needs (0: unchecked): (in, out, grouped, align)."""
    from .precisions import FP8, FP8_RECIPE_CODES, PRECISION_CODES

    prec = np.asarray(plan.precision)
    f8, nv = prec == FP8, prec == PRECISION_CODES["nvfp4"]
    mx = f8 & (np.asarray(plan.f8r) == FP8_RECIPE_CODES["mxfp8"])
    q = np.where(mx, MXFP8_BLOCK, np.where(nv, NVFP4_BLOCK, 0))  # the block quantizers' own check
    fin = np.where(f8 | nv, FP8_EXEC_WIDTH, 0)
    fout = np.where(f8 | nv, FP8_EXEC_ROWS, 0)
    align = np.where(f8, np.where(mx, MXFP8_BLOCK, FP8_EXEC_WIDTH), 0)  # fp8_utils.py get_fp8_align_size (config.fp8 only)
    return np.maximum(fin, q), np.maximum(fout, q), q, align


def _width_breaks(model, plan) -> list[tuple[str, int, str, np.ndarray, np.ndarray]]:
    """(name, width, axis, divisor array, broken array) of each width (_quantized_widths)."""
    blocks = dict(zip(("in", "out", "grouped", "align"), _width_blocks(plan)))
    tp = np.asarray(plan.tp)
    etp = np.where(np.asarray(plan.etp) > 0, np.asarray(plan.etp), tp)
    res = []
    for name, w, axis, role in _quantized_widths(model):
        split = tp if axis == "tp" else etp if axis == "etp" else np.ones_like(tp)
        blk = blocks[role]
        res.append((name, w, axis, blk, (blk > 0) & _not_multiple(w, np.maximum(split * blk, 1))))
    return res


def _not_multiple(w: int, d: np.ndarray) -> np.ndarray:
    """w % d != 0 for integers d >= 1; on a search's 1-d column of few small divisors (at most 4 per
    candidate) looked up in a table of w % 1 .. max(d) != 0 (the same booleans, no division a candidate:
    in-process 33 -> 16 us at 10,922 candidates, 302 -> 103 us at 100,000; below 2,048 no faster)."""
    d = np.asarray(d)
    if d.ndim == 1 and d.size >= 2048 and d.dtype.kind in "iu":
        hi = int(d.max())
        if hi <= 4 * d.size and int(d.min()) >= 1:
            return (w % np.arange(1, hi + 1, dtype=d.dtype) != 0).take(d - 1)
    return w % d != 0


def _fp8_widths(model, stack, plan) -> np.ndarray:
    """MEGATRON_FP8_WIDTHS: a quantized GEMM operand's local width not a multiple of TE's block (integer arithmetic:
    width divisible by split x block)."""
    bad = np.zeros(np.shape(plan.tp), dtype=bool)
    for *_, b in _width_breaks(model, plan):
        bad = bad | b
    return bad


def _fp8_widths_detail(model, stack, plan, cluster) -> str:
    parts = []
    for name, w, axis, blk, b in _width_breaks(model, plan):
        if not bool(b):
            continue
        k = int(blk)
        split = int(plan.tp) if axis == "tp" else (int(plan.etp) or int(plan.tp)) if axis == "etp" else 1
        ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if w % (t * k) == 0]
        parts.append(f"{name} {w:,}" + (f" / {axis} {split} = {w / split:g}" if axis else "")
                     + f", not a multiple of {k}" + (f" ({axis} {', '.join(map(str, ok))} give one)" if axis and ok
                                                      else f" (no {axis} of 1-64 gives one)" if axis else ""))
    return "; ".join(parts)


LATER_RULES = LATER_RULES + (
    StartupRule(
        "MEGATRON_FP8_WIDTHS", "megatron",
        "Transformer Engine's FP8 / MXFP8 / NVFP4 GEMMs need each quantized operand's width per TP (expert-TP) rank "
        "divisible by its block: an input's last dim by 16 and a weight's out dim by 8 (any fp8 recipe), every dim "
        "by 32 (mxfp8) or 16 (nvfp4, the routed experts' grouped weights included)",
        "NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, Megatron-LM @d98e8a64's pin) transformer_engine/pytorch/"
        "utils.py assert_dim_for_fp8_exec l. 613-623 (on input and weight: module/linear.py l. 322-324, "
        "layernorm_linear.py l. 168-169, layernorm_mlp.py l. 352), csrc/quantizer.cpp MXFP8Quantizer::create_tensor "
        "l. 1395-1397 ('MXFP8 requires tensor dims that are divisible by 32'), NVFP4Quantizer::create_tensor "
        "l. 1814-1819; module/grouped_linear.py l. 208-221 (each expert weight quantized); "
        f"{MEGATRON_COMMIT} --fp8-format / --fp8-recipe / --fp4-recipe",
        "choose a tp (etp for the experts' width) whose shard of each width named is a multiple of the block, or "
        "another recipe (delayed / tensorwise check 16 on inputs, 8 on weights' out dims, not the grouped experts) "
        "or bf16",
        _fp8_widths, detail=_fp8_widths_detail),
)



# MEGATRON_CP_SLIDING_WINDOW (code 72): Transformer Engine's context parallelism runs a sliding-window
# layer only with cp_comm_type a2a or all_gather. Megatron-Core hands each windowed layer's window to
# TE (megatron/core/extensions/transformer_engine.py @d98e8a64 l. 2163-2171: window_size = config.
# window_size where is_layer_window_attention), and TE's attn_forward_func_with_cp asserts (TE @4329ff84,
# the 2.17.1 Megatron-LM @d98e8a64's uv.lock pins, transformer_engine/pytorch/attention/dot_product_attention/
# context_parallel.py l. 4763-4769): sliding_window_attn = window_size not in ((-1, 0), (-1, -1)); assert
# not sliding_window_attn or cp_comm_type in ['a2a', 'all_gather'] ('Context parallelism does not
# support sliding window attention with cp_comm_type=...'). The check reads the window, not its reach: a
# window as long as the sequence (Mistral 7B's 4,096 at seq 4,096) is refused as well. The variants it
# refuses are the stack's data (cp_comm_types.no_sliding_window: p2p, a2a+p2p; a2a+p2p with one a2a rank
# runs p2p, with one p2p rank a2a: cp_comm_type.cp_comm_type_of). Megatron's per-layer --cp-comm-type list
# could give the windowed layers a2a and the others p2p; the planner prices one variant for every layer
# (planner/cp_comm_type.py), so such a job is a2a or all_gather throughout.
def _cp_sliding_window(model, stack, plan) -> np.ndarray:
    """MEGATRON_CP_SLIDING_WINDOW: cp > 1 on a model with a sliding-window attention layer where the
    stack's context-parallel variant (a stack setting, from the job's cp_comm_type) refuses one."""
    from .cp_comm_type import cp_comm_type_of
    from .schema import SlidingAttention

    cp = np.asarray(plan.cp)
    cct = None if stack is None else stack.cp_comm_types
    windowed = model is not None and model.layer_pattern is not None and any(
        isinstance(model.layer_kinds[k].mixer, SlidingAttention) for k in set(model.layer_pattern))
    refused = bool(windowed) and cct is not None and cp_comm_type_of(stack) in cct.no_sliding_window
    return refused & (cp > 1)


LATER_RULES = LATER_RULES + (
    StartupRule(
        "MEGATRON_CP_SLIDING_WINDOW", "megatron",
        "Transformer Engine's context parallelism runs sliding-window attention layers only with --cp-comm-type a2a or "
        "all_gather (not the default p2p ring, nor a2a+p2p)",
        "NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, Megatron-LM @d98e8a64's pin) transformer_engine/pytorch/"
        "attention/dot_product_attention/context_parallel.py attn_forward_func_with_cp l. 4763-4769 ('Context "
        "parallelism does not support sliding window attention with cp_comm_type=...'); "
        f"{MEGATRON_COMMIT} megatron/core/extensions/transformer_engine.py l. 2163-2171 (each windowed layer's "
        "window_size passed to TE)",
        "set --cp-comm-type a2a (the query and KV heads per TP rank divisible by cp) or all_gather, or cp 1",
        _cp_sliding_window),
)

# STACK_LAYER_KIND (code 73, issue 22 audit): a stack builds only the layers its code has (stack_db runs.layer_kinds,
# each kind cited at the stack's commit). Megatron-LM @d98e8a64 has no Mamba-1 mixer (megatron/core/ssm/mamba_mixer.py
# MambaMixer runs mamba_chunk_scan_combined, the Mamba-2 SSD kernel, only) and no chunked attention (Llama 4's iRoPE
# layers: Megatron-Core's attention passes no chunk to any kernel), so Jamba and Llama 4 on it are refused, not priced
# on layers it would not build. The rule applies to every stack (trainer ANY_STACK: rules_for gives it to each), reads
# no searched quantity (every candidate alike), and is skipped where the entry gives no layer_kinds (a user's file).
ANY_STACK = "every stack"


class LayerIndices(Sequence):
    """The 0-based layers i < n with i % period in `offsets` (sorted): one layer feature's layers as the pattern
    gives them, without a per-layer list (a model may have 2^31 - 1 layers: the fuzz passes' reproducers)."""

    def __init__(self, offsets, period: int, n: int):
        self.offsets, self.period, self.n = tuple(sorted(offsets)), int(period), int(n)

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.period)
        return full * len(self.offsets) + sum(1 for o in self.offsets if o < rest)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        size = len(self)
        k = k + size if k < 0 else k
        if not 0 <= k < size:
            raise IndexError(k)
        q, r = divmod(k, len(self.offsets))
        return q * self.period + self.offsets[r]

    def __eq__(self, other) -> bool:
        if not isinstance(other, (list, tuple, LayerIndices)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None


def model_layer_features(model) -> dict[str, LayerIndices]:
    """The layer features (schema.LayerFeature) of the model's layers -> the 0-based layers that use each: the mixer
    kind (the model's default, MLA with `mla:` else global, where a kind leaves it out), `output_gate` where an
    attention mixer gates its output, `moe` where the MLP is the MoE one (a kind's default with `moe:`). Read from
    the layer pattern's period (LayerIndices), never layer by layer."""
    from .schema import GlobalAttention, MoEMLP

    def feats(spec) -> list[str]:
        mixer = spec.mixer if spec is not None else None
        mlp = spec.mlp if spec is not None else None
        out = [mixer.kind if mixer is not None else ("mla" if model.mla is not None else GlobalAttention().kind)]
        if getattr(mixer, "output_gate", False):
            out.append("output_gate")
        if isinstance(mlp, MoEMLP) or (mlp is None and model.moe is not None):
            out.append("moe")
        return [f for f in out if f != "none"]

    pattern = model.layer_pattern
    period = len(pattern) if pattern is not None else 1
    offsets: dict[str, list[int]] = {}
    for i in range(min(period, model.num_layers)):
        spec = model.layer_kinds[pattern[i]] if pattern is not None else None
        for f in feats(spec):
            offsets.setdefault(f, []).append(i)
    return {f: LayerIndices(o, period, model.num_layers) for f, o in offsets.items()}


def missing_layer_features(model, stack) -> dict[str, list[int]]:
    """The model's layer features (model_layer_features) the stack's runs.layer_kinds does not list; none where
    the entry lists none (null: it does not say)."""
    kinds = stack.runs.layer_kinds if stack is not None and stack.runs is not None else None
    if model is None or kinds is None:
        return {}
    built = {k.kind for k in kinds}
    return {f: ls for f, ls in model_layer_features(model).items() if f not in built}


def _even_only(layers: LayerIndices) -> bool:
    """Whether the layers are exactly the even-indexed ones (0, 2, 4, ...) of the model: read over one period of
    the pattern and of 2 (lcm(period, 2) residues), never layer by layer."""
    span = layers.period * (1 if layers.period % 2 == 0 else 2)
    return all((r % 2 == 0) == (r % layers.period in layers.offsets) for r in range(min(span, layers.n)))


def model_layer_forms(model) -> dict[str, str]:
    """The forms (schema.LayerForm) the model's MoE and sliding-window layers take -> what in the model shows each,
    for the rule's message: the MoE's shared experts, dense layers beside the MoE ones, a sigmoid router, an expert
    score bias, a router linear bias, group-limited routing, plain experts, a clamped activation; query/key norms
    on softmax attention; the windows'
    placement (windows_every_layer: every layer windowed; windows_alternate: exactly the even-indexed layers, the
    others global attention; window_placement: any other placement) and sizes (window_sizes: more than one); and the model-wide forms
    (schema.MODEL_WIDE_FORMS: learned or ALiBi positions, dropout, linear biases, LayerNorm, a plain MLP,
    post-norms, a norm on the embedding; RMSNorm, a gated MLP, grouped-query attention, rotary or no positions, an
    untied output layer, bias-free linears). From the model's fields and its layer pattern's period, never layer by layer."""
    from .schema import SlidingAttention

    feats = model_layer_features(model)
    out: dict[str, str] = {}
    moe = model.moe
    if "moe" in feats and moe is not None:
        n_moe = len(feats["moe"])
        if moe.num_shared_experts:
            out["shared_experts"] = f"{moe.num_shared_experts} shared expert(s) beside the routed ones"
        if moe.first_k_dense or moe.layer_freq > 1 or n_moe < model.num_layers:
            what = (f"first_k_dense {moe.first_k_dense}, layer_freq {moe.layer_freq}" if model.layer_pattern is None
                    else f"MoE on {n_moe} of {model.num_layers} layers")
            out["dense_layers"] = f"layers without the MoE MLP beside the MoE ones ({what})"
        if moe.router == "sigmoid":
            out["sigmoid_router"] = "a sigmoid router"
        if moe.expert_score_bias:
            out["expert_score_bias"] = "an expert score bias (aux-loss-free balancing)"
        if moe.router_linear_bias:
            out["router_linear_bias"] = "a bias on the router's linear"
        if moe.expert_groups is not None:
            out["group_limited_routing"] = (f"group-limited routing ({moe.groups_per_token} of {moe.expert_groups} "
                                            "expert groups a token)")
        if not model.gated_mlp:
            out["plain_experts"] = "plain (ungated) experts"
        if model.activation_clamp is not None:
            out["activation_clamp"] = f"a clamped gated activation (at {model.activation_clamp:g})"
    if model.qk_norm and any(f in feats for f in ("global", "sliding", "chunked")):
        out["qk_norm"] = "query/key norms"
    # the model-wide forms (schema.MODEL_WIDE_FORMS), from the model's own fields
    if model.position_embedding == "learned":
        out["learned_positions"] = f"learned absolute position embeddings ({model.max_seq_len:,} positions)"
    if model.position_embedding == "alibi":
        out["alibi_positions"] = "ALiBi position biases"
    if model.dropout:
        out["dropout"] = "dropout after the attention and the MLP"
    if model.linear_bias:
        out["linear_bias"] = "biases on the linears"
    if model.norm == "layernorm":
        out["layernorm"] = "LayerNorm (not RMSNorm)"
    if not model.gated_mlp:
        out["plain_mlp"] = "a plain (ungated) MLP"
    if model.post_norms:
        out["post_norms"] = "norms after the attention and the MLP (post-norms)"
    if model.embedding_norm:
        out["embedding_norm"] = "a norm on the word embedding's output"
    if model.norm == "rmsnorm":
        out["rmsnorm"] = "RMSNorm (not LayerNorm)"
    if model.gated_mlp:
        out["gated_mlp"] = "a gated MLP (SwiGLU/GeGLU: gate, up and down matrices)"
    kv = model.num_kv_heads or model.num_attention_heads
    if model.mla is None and kv < model.num_attention_heads and any(f in feats for f in ("global", "sliding", "chunked")):
        out["grouped_query"] = (f"{'multi-query' if kv == 1 else 'grouped-query'} attention ({kv} key/value heads for "
                                f"{model.num_attention_heads} query heads)")
    if model.position_embedding == "rope":
        out["rotary_positions"] = "rotary position embeddings (RoPE)"
    if model.position_embedding == "none":
        out["no_positions"] = "no position embedding (NoPE)"
    if not model.tied_embeddings:
        out["untied_embeddings"] = "an output layer of its own (untied from the word embedding)"
    if not model.linear_bias:
        out["no_linear_bias"] = "linears without biases"
    if "sliding" in feats:
        sliding = feats["sliding"]
        windows = sorted({k.mixer.window for k in model.layer_kinds.values() if isinstance(k.mixer, SlidingAttention)})
        if len(windows) > 1:
            out["window_sizes"] = f"{len(windows)} window sizes ({', '.join(f'{w:,}' for w in windows)})"
        attn = len(sliding) + len(feats.get("global", ()))
        every = len(sliding) == model.num_layers
        even = (attn == model.num_layers and _even_only(sliding))
        if every:
            out["windows_every_layer"] = f"windows on every layer ({model.num_layers:,})"
        elif even:
            out["windows_alternate"] = (f"windows on the even-indexed layers ({len(sliding):,} of {model.num_layers:,}), "
                                        "global attention on the odd ones")
        else:
            out["window_placement"] = (f"windows on {len(sliding)} of {model.num_layers} layers ({_spans(sliding)}), "
                                       "neither every layer nor the even-indexed ones beside global layers")
    return out


def unbuilt_layer_forms(model, stack) -> dict[str, tuple[str, str, list[str]]]:
    """The model's layer forms (model_layer_forms) that the stack builds the kind of but lists as not built
    (runs.layer_kinds not_built) -> (kind, what in the model shows it, the stack's sources); none where the entry
    lists no kinds."""
    kinds = stack.runs.layer_kinds if stack is not None and stack.runs is not None else None
    if model is None or kinds is None:
        return {}
    absent = {f.form: (k.kind, f.sources) for k in kinds for f in k.not_built}
    if not absent:
        return {}
    return {f: (absent[f][0], what, absent[f][1]) for f, what in model_layer_forms(model).items() if f in absent}


def layer_gaps(model, stack) -> bool:
    """Whether the stack's code lacks a layer feature (missing_layer_features) or a form (unbuilt_layer_forms) of
    the model."""
    return bool(missing_layer_features(model, stack) or unbuilt_layer_forms(model, stack))


def _spans(layers, most: int = 12) -> str:
    """0-based layer indices as runs: 0-2, 4, 6-7; after `most` runs, how many more (a run of a LayerIndices is at
    most its period long unless it holds every layer, so this reads at most `most` periods)."""
    if isinstance(layers, LayerIndices) and len(layers.offsets) == layers.period:
        return f"0-{layers.n - 1}" if layers.n > 1 else "0"
    out, start, prev = [], None, None
    for a in layers:
        if start is None:
            start = a
        elif a != prev + 1:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = a
            if len(out) == most:
                return ", ".join(out) + ", ... (more runs)"
        prev = a
    out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def stacks_building(kind: str) -> list[str]:
    """The shipped stacks whose runs.layer_kinds lists the kind (for the hint)."""
    from .catalog import list_stacks, load_stack

    names = []
    for n in list_stacks():
        st = load_stack(n)
        if st.runs is not None and any(k.kind == kind for k in st.runs.layer_kinds or ()):
            names.append(n)
    return names


def layer_kinds_assumed(model, stack) -> list[str]:
    """The assumed lines of the layer kinds a job takes as built: a stack entry that lists none (runs.layer_kinds
    null: STACK_LAYER_KIND not applied), and Mamba-1 layers on a stack where cp > 1 can run (max_cp not 1: their
    context parallelism is the assumed MAMBA1_CP_STATE_PASSING, planner/layers/mamba.py, which no trainer
    implements); and how a stack that runs windows as a dense mask (windowed_attention) or the experts as a loop
    (moe_experts) runs the model's sliding or MoE layers. None for a shipped stack's other models: each lists its
    kinds, and none builds Mamba-1."""
    if model is None or stack is None:
        return []
    feats = model_layer_features(model)
    out = []
    if stack.runs is not None and stack.runs.layer_kinds is None:
        out.append(f"layer kinds: stack {stack.name} lists none (runs.layer_kinds): {', '.join(feats)} taken as built, "
                   f"start-up rule STACK_LAYER_KIND not applied")
    if "sliding" in feats and getattr(stack, "windowed_attention", None) is not None:
        out.append(f"sliding windows as stack {stack.name}'s code runs them: one dense [s, s] mask a windowed layer "
                   "handed to the attention kernel without its causal flag, so every query-key pair is computed and "
                   "the mask kept for the backward (stack windowed_attention; layers/attention.py [11])")
    if "moe" in feats and getattr(stack, "moe_experts", None) is not None:
        out.append(f"MoE experts as stack {stack.name}'s code runs them: a Python loop over the experts, each "
                   "expert's tokens gathered and its output index-added (stack moe_experts; layers/moe.py [16]); the "
                   "host's wait at each expert's torch.where is not priced")
    max_cp = stack.runs.max_cp if stack.runs is not None else None
    if "mamba1" in feats and max_cp != 1:
        out.append("Mamba-1 under cp > 1: no trainer implements context parallelism for it; priced on the assumed "
                   "state passing between ranks (MAMBA1_CP_STATE_PASSING, planner/layers/mamba.py)")
    return out


def _layer_kind_broken(model, stack, plan) -> np.ndarray:
    """STACK_LAYER_KIND: the model has a layer feature the stack's code does not build (every candidate alike)."""
    return np.full(np.shape(plan.tp), layer_gaps(model, stack), dtype=bool)


def layer_kind_detail(model, stack, plan=None, cluster=None) -> str:
    """The kinds the stack lacks, the layers that use them, what the stack builds (its source) and the shipped
    stacks that build each lacking kind."""
    from .schema import MODEL_WIDE_FORMS

    missing = missing_layer_features(model, stack)
    parts = []
    for f, ls in missing.items():
        others = stacks_building(f)
        parts.append(f"{model.name}'s {f} layers ({len(ls)} of {model.num_layers}: {_spans(ls)}) on stack {stack.name}, "
                     f"whose code builds {', '.join(k.kind for k in stack.runs.layer_kinds)} ({stack.origin} "
                     f"runs.layer_kinds, its sources); shipped stacks that build {f}: "
                     f"{', '.join(others) if others else 'none'}")
    for form, (kind, what, sources) in unbuilt_layer_forms(model, stack).items():
        whose = f"{model.name}'s layers" if form in MODEL_WIDE_FORMS else f"{model.name}'s {kind} layers"
        parts.append(f"{whose} have {what} ({form}), which stack {stack.name}'s code does not "
                     f"build ({stack.origin} runs.layer_kinds {kind} not_built: {'; '.join(sources)})")
    return "; ".join(parts)


def layer_kind_hint(model, stack) -> str:
    """The shipped stacks whose code builds every layer kind of the model, else what is left to do."""
    from .catalog import list_stacks, load_stack

    ok = [n for n in list_stacks() if not layer_gaps(model, load_stack(n))]
    if ok:
        return f"choose a stack that builds every layer of {model.name}: {', '.join(ok)} (--stack), or another model"
    lacking = [*missing_layer_features(model, stack), *unbuilt_layer_forms(model, stack)]
    return (f"no shipped stack builds every layer of {model.name} ({', '.join(lacking)} "
            "on none): a stack file of your own whose code builds it (runs.layer_kinds, cited), or another model")


def _deepspeed_split_ends(model, plan) -> np.ndarray:
    """DEEPSPEED_PP_SPLIT_ENDS: at pp > 1, one end counted without the other, the loss as more than one layer, or
    both counted with the last stage's (L + 2) // pp units (partition_balanced's fewest, stack pipeline_split front)
    leaving it no transformer layer; under DeepSpeed a12aaedc's bisection (split code 2, pipeline.py [11]) an end
    stage it leaves no transformer layer, ends counted or not (the last stages once the units run out: 9 on 4 is
    3, 3, 3, 0; the first with the embedding counted and one unit a chunk)."""
    from .pipeline import SPLIT_BISECTION, stage_layers

    pp, e, l_ = np.asarray(plan.pp), np.asarray(plan.split_emb), np.asarray(plan.split_loss)
    bad = (pp > 1) & ((e != l_) | (l_ > 1) | ((e > 0) & ((model.num_layers + e + l_) // np.maximum(pp, 1) < 2)))
    code = np.asarray(plan.split_front)  # (a PlanArrays: plan.rule_codes, _broken_of; every field is there)
    if np.any(code == SPLIT_BISECTION):  # the stack's split (one value a job), not a searched quantity
        first, _, last = stage_layers(model.num_layers, pp, plan.vpp, e, l_, code)
        bad = bad | ((pp > 1) & (code == SPLIT_BISECTION) & ((first < 1) | (last < 1)))
    return bad


LATER_RULES = LATER_RULES + (
    StartupRule(
        "STACK_LAYER_KIND", ANY_STACK,
        "the stack's code builds no layer of a kind the model uses (a mixer kind, the attention output gate or the "
        "MoE MLP), or not the form the model's layers take (runs.layer_kinds not_built: shared experts, dense "
        "layers beside MoE ones, a window placement, ...): it cannot train this model",
        "stack_db <stack> runs.layer_kinds, each kind cited at the stack's commit (Megatron-LM @d98e8a64 "
        "megatron/core/ssm/mamba_mixer.py: Mamba-2 only; no chunked attention in megatron/core/transformer/)",
        layer_kind_hint, _layer_kind_broken, detail=layer_kind_detail, model_level=True),
)

# STACK_SEQUENCE_PARALLEL (code 74) and STACK_RECOMPUTE (code 75), issue 22: a stack never runs a feature its code
# lacks. Sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198 sec. 4.2.2) and selective recompute (sec. 5)
# landed in Megatron-LM in 2022: the Megatron-LM / Megatron-DeepSpeed of 2021 (stack megatron-deepspeed-2021) has
# neither (stack_db runs.sequence_parallel supported false, runs.recompute none and full, each cited). Every stack
# (trainer ANY_STACK); skipped where the entry does not say (null). SP is crossed into the search's base rows, so
# the rule masks and counts them; recompute is crossed after the base rows (checked at recompute none), so fit drops
# a granularity the stack lacks and counts its candidates under STACK_RECOMPUTE (space._recompute_runnable).


def _rc_codes() -> dict:
    from .recompute_modules import RC_FULL, RC_NONE, RC_SELECTIVE

    return {"none": RC_NONE, "selective": RC_SELECTIVE, "full": RC_FULL}


_RC = _rc_codes()  # plan.RECOMPUTE_CODES (plan imports this module)


def stack_lacks_sp(stack) -> bool:
    """The stack's entry says its code has no sequence parallelism (runs.sequence_parallel supported false)."""
    runs = stack.runs if stack is not None else None
    return runs is not None and runs.sequence_parallel is not None and not runs.sequence_parallel.supported


def recompute_runs(stack) -> tuple | None:
    """The recompute granularities (names) the stack's code has (runs.recompute); None where the entry does not say."""
    runs = stack.runs if stack is not None else None
    return tuple(runs.recompute.granularities) if runs is not None and runs.recompute is not None else None


def _stack_sp_broken(model, stack, plan) -> np.ndarray:
    sp = np.asarray(plan.sp)
    return (sp > 0) if stack_lacks_sp(stack) else np.zeros(np.shape(plan.tp), dtype=bool)


def _stack_sp_detail(model, stack, plan=None, cluster=None) -> str:
    return (f"stack {stack.name} has sequence_parallel supported false ({stack.origin} runs.sequence_parallel: "
            f"{'; '.join(stack.runs.sequence_parallel.sources)})")


def _stack_recompute_broken(model, stack, plan) -> np.ndarray:
    have = recompute_runs(stack)
    if have is None:
        return np.zeros(np.shape(plan.tp), dtype=bool)
    return ~isin(np.asarray(plan.recompute), np.asarray([_RC[g] for g in have], dtype=np.int64))


def _stack_recompute_detail(model, stack, plan=None, cluster=None) -> str:
    names = {v: k for k, v in _RC.items()}
    asked = f"recompute {names[int(plan.recompute)]} " if plan is not None and np.ndim(plan.recompute) == 0 else ""
    return (f"{asked}on stack {stack.name}, whose code has recompute {', '.join(recompute_runs(stack))} ("
            f"{stack.origin} runs.recompute: {'; '.join(stack.runs.recompute.sources)})")


def _stack_recompute_hint(model, stack) -> str:
    return f"use --recompute {' or '.join(recompute_runs(stack))} (what stack {stack.name}'s code has), or another --stack"


LATER_RULES = LATER_RULES + (
    StartupRule(
        "STACK_SEQUENCE_PARALLEL", ANY_STACK,
        "sequence parallelism on a stack whose code has none",
        "stack_db <stack> runs.sequence_parallel (Korthikanti et al. 2022, arXiv:2205.05198, in Megatron-LM from 2022)",
        "leave sequence_parallel out or off (--no-sequence-parallel: the stack's default), or choose a stack that has "
        "it (--stack megatron, torchtitan; megatron-deepspeed's refuses it at tp > 1: STACK_SP_NORM_GRADS)",
        _stack_sp_broken, detail=_stack_sp_detail),
    StartupRule(
        "STACK_RECOMPUTE", ANY_STACK,
        "a recompute granularity the stack's code lacks",
        "stack_db <stack> runs.recompute (selective recompute: Korthikanti et al. 2022, arXiv:2205.05198, in "
        "Megatron-LM from 2022)",
        _stack_recompute_hint, _stack_recompute_broken, detail=_stack_recompute_detail),
)

LATER_RULES = LATER_RULES + (
    # DEEPSPEED_PP_SPLIT_ENDS (code 76, issue 22 mdsexport2): the pipeline split of Megatron-DeepSpeed's GPTModelPipe is
    # DeepSpeed's partition_balanced over the specs its partition_method's regex names (stack_db megatron-deepspeed
    # pipeline_split front): microsoft's fork the transformer layers only, BigScience's 'type:transformer|embedding'
    # the two tied EmbeddingPipe specs too, both or neither: no spelling counts one end alone, or the loss as more
    StartupRule(
        "DEEPSPEED_PP_SPLIT_ENDS", "deepspeed",
        "Megatron-DeepSpeed's pipeline split counts the embedding and the output layer both or neither (one alone, or "
        "the loss as more than one layer, is no partition_method), and with both each end stage keeps a transformer "
        "layer (BigScience's pipeline fails on a stage without one); under DeepSpeed a12aaedc's bisection split "
        "(stack pipeline_split bisection) an end stage keeps one too, which that split can leave without (9 layers on "
        "4 stages: 3, 3, 3, 0)",
        "microsoft/Megatron-DeepSpeed @f4157bea megatron/model/gpt_model.py l. 463 (partition_method='type:transformer', "
        "no argument); bigscience-workshop/Megatron-DeepSpeed @8387ae17 gpt_model.py l. 310-319 (--pp-partition-method "
        "'type:transformer|embedding': both tied EmbeddingPipe; l. 308-309 'the current implementation of PP fails "
        f"unless each stage has at least one transformer layer'); {DEEPSPEED_COMMIT} deepspeed/runtime/pipe/module.py "
        "_partition_layers l. 409-414, runtime/utils.py partition_balanced l. 583-621 (the last stage (L + 2) // pp units); "
        "microsoft/DeepSpeed a12aaedc runtime/utils.py partition_balanced l. 403-418, _lprobe l. 352-384 (a part that "
        "takes every unit left leaves the parts after it empty, l. 376-380: planner/pipeline.py [11]); microsoft/"
        "Megatron-DeepSpeed b56b50bb gpt_model.py l. 168-253 (the 2021 GPTModelPipe: partition_method='type:transformer')",
        "leave account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split out (DeepSpeed's own "
        "placement), or set both (BigScience's --pp-partition-method 'type:transformer|embedding') with pp at most "
        "(layers + 2) / 2; on the bisection split a pp whose ceil(layers / pp) per stage leaves the last stage a "
        "layer (planner/pipeline.py bisection_chunk_units)",
        lambda m, s, p: _deepspeed_split_ends(m, p)),
    # DEEPSPEED_MOE (code 77, issue 22 mdsexport2): DeepSpeed's engine builds no ZeRO-3 optimizer for a model with MoE
    # layers (the zero3 and zero3_mics modes: sharding levels fsdp 3, hsdp 4), and DeepSpeed-MoE keeps the experts whole
    # on every TP rank or splits them over the TP group (--enable-expert-tensor-parallelism): expert TP 1 or tp
    StartupRule(
        "DEEPSPEED_MOE", "deepspeed",
        "DeepSpeed-MoE runs at ZeRO stages 0-2 only ('MoE not supported with Stage 3') and with expert TP 1 or tp",
        f"{DEEPSPEED_COMMIT} deepspeed/runtime/engine.py _configure_zero_optimizer l. 1674-1675 (has_moe_layers, set at "
        "l. 1239-1243 for every deepspeed.moe.layer.MoE module); deepspeed/moe/layer.py _create_process_groups "
        "l. 89-103 (enable_expert_tensor_parallelism: the experts split over the TP group, else whole); "
        "microsoft/Megatron-DeepSpeed @f4157bea megatron/model/transformer.py l. 1066-1082",
        "use ZeRO stage 0, 1 or 2 (sharding none, zero1, zero2, bf16_optimizer) for an MoE model, and etp 1 or tp",
        lambda m, s, p: np.full(np.shape(p.sharding), m is not None and m.moe is not None)
        & ((level_of(p) >= 3) | ((etp_of(p) != 1) & (etp_of(p) != np.asarray(p.tp))))),
    # DEEPSPEED_MOE_SP (code 78, issue 22 mdsmoefit): DeepSpeed-MoE's MOELayer assumes the TP ranks hold the same
    # tokens; Megatron's sequence parallelism gives each its own 1 / tp of the sequence, and the fork hands the MoE
    # layer that shard, gathering nothing (transformer.py l. 1429-1432). MOELayer.forward then keeps 1 / tp of each
    # rank's own capacity slots before the all-to-all (drop_tokens, sharded_moe.py l. 626) and rebuilds [E, C, M] from
    # the TP ranks' blocks after it (gather_tokens l. 638, 664): with etp 1 each expert's RowParallelLinear, still
    # sequence-parallel (layers.py l. 721-726: only ColumnParallelLinear turns it off for an unsliced expert,
    # l. 585-590), reduce-scatters the expert output's first dimension, ep_size, over TP (l. 797-798; mappings.py
    # _reduce_scatter_along_first_dim l. 116-117 asserts ep_size % tp == 0, else the output is [E, C / tp, M] and the
    # combine einsum 'sec,ecm->sm', sharded_moe.py l. 669, raises on C); with etp = tp the shapes hold and each rank
    # combines the other TP ranks' tokens' expert outputs into (tp - 1) / tp of its own slots. No validate_args check
    # (megatron/arguments.py); the fork disables SP only at tp 1 (l. 386-388).
    StartupRule(
        "DEEPSPEED_MOE_SP", "deepspeed",
        "DeepSpeed-MoE under Megatron's sequence parallelism: its MOELayer drops and gathers tokens over TP as if "
        "the TP ranks held the same tokens, which under SP they do not (etp 1 fails at the expert's reduce-scatter "
        "or the combine; etp = tp combines other ranks' tokens)",
        f"microsoft/Megatron-DeepSpeed @f4157bea megatron/model/transformer.py l. 1429-1432 (the MoE gets the rank's "
        "sequence shard), megatron/core/tensor_parallel/layers.py l. 721-726, 797-798, mappings.py l. 116-117; "
        f"{DEEPSPEED_COMMIT} deepspeed/moe/sharded_moe.py MOELayer.forward l. 615-669 (drop_tokens l. 626, 649; "
        "gather_tokens l. 638, 664; the combine einsum l. 669)",
        "turn sequence parallelism off (--no-sequence-parallel) for an MoE model with tp > 1, or use tp 1",
        lambda m, s, p: np.full(np.shape(p.tp), m is not None and m.moe is not None)
        & (np.asarray(p.tp) > 1) & (np.asarray(p.sp) > 0)),
)

# TORCHTITAN_MTP_PP_CP (code 79, issue 22 tt03disp): torchtitan's multi-token prediction (release/0.3 @4f9e9a47d
# torchtitan/models/deepseek_v3/mtp.py, the stack's runs.mtp true) stops at start-up under pipeline or context
# parallelism: MTPDecoder.Config.update_from_config l. 199-209 raises NotImplementedError "MTP does not support pipeline
# parallelism yet" (pipeline_parallel_degree > 1) and "... context parallelism yet" (context_parallel_degree > 1); its
# design note (models/deepseek_v3/MTP.md, TODO 1-2) lists both as not integrated. A stack whose code trains no MTP
# (runs.mtp false or null: main @e347b1e5e) is not judged here.
def _torchtitan_mtp_broken(model, stack, plan) -> np.ndarray:
    runs = stack.runs if stack is not None else None
    on = model is not None and bool(model.mtp_layers) and runs is not None and bool(runs.mtp)  # model / stack settings
    return np.full(np.shape(plan.tp), on, dtype=bool) & ((np.asarray(plan.pp) > 1) | (np.asarray(plan.cp) > 1))


LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_MTP_PP_CP", "torchtitan",
        "torchtitan's multi-token prediction runs without pipeline and context parallelism only",
        "pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/deepseek_v3/mtp.py MTPDecoder.Config."
        "update_from_config l. 199-209 ('MTP does not support pipeline parallelism yet.', '... context parallelism "
        "yet.'); models/deepseek_v3/MTP.md TODO 1-2",
        "use pp 1 and cp 1 with mtp_layers, or leave mtp_layers out (--mtp-layers 0)",
        _torchtitan_mtp_broken, option="mtp"),
)


def stack_sp_norm_grads_unreduced(stack) -> bool:
    """The stack's entry says its trainer never sums the SP-partial gradients over TP (runs.sequence_parallel
    norm_grads_reduced false): Megatron-DeepSpeed under --deepspeed."""
    runs = stack.runs if stack is not None else None
    return runs is not None and runs.sequence_parallel is not None and not runs.sequence_parallel.norm_grads_reduced


def _stack_sp_norm_broken(model, stack, plan) -> np.ndarray:
    tp = np.asarray(plan.tp)
    if not stack_sp_norm_grads_unreduced(stack):
        return np.zeros(np.shape(tp), dtype=bool)
    return (np.asarray(plan.sp) > 0) & (tp > 1)


def _stack_sp_norm_detail(model, stack, plan=None, cluster=None) -> str:
    return f"stack {stack.name} has sequence_parallel norm_grads_reduced false ({stack.origin} runs.sequence_parallel)"


# STACK_SP_NORM_GRADS (code 80, issue 22 mdscheck): under Megatron's sequence parallelism each TP rank computes the
# norms (and adds the row-parallel linears' biases) on its own 1 / tp of the sequence, so those replicated parameters'
# gradients are partial per rank and must be summed over TP before the step (Korthikanti et al. 2022 sec. 4.2.2;
# Megatron-LM's allreduce_layernorm_grads). Megatron-DeepSpeed calls that sum only outside --deepspeed, and DeepSpeed
# reduces over DP alone (stack_db megatron-deepspeed runs.sequence_parallel sources): the TP ranks' copies diverge from
# the first step, so the plan does not train the model it describes: refused, not warned (rule 78 refuses the MoE case
# for its own reason). Data-driven (runs.sequence_parallel norm_grads_reduced), so every stack (ANY_STACK).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "STACK_SP_NORM_GRADS", ANY_STACK,
        "sequence parallelism where the trainer never sums the norms' and row-parallel biases' gradients over TP "
        "(each TP rank steps its own copy on 1 / tp of the sequence: the copies diverge)",
        "stack_db <stack> runs.sequence_parallel norm_grads_reduced (megatron-deepspeed: microsoft/Megatron-DeepSpeed "
        "@f4157bea megatron/training.py l. 730-732, reduce_model_grads and its allreduce_layernorm_grads, "
        f"optimizer/optimizer.py l. 257-286, only 'if not args.deepspeed'; {DEEPSPEED_COMMIT} deepspeed/runtime/engine.py "
        "l. 2048-2063, 2567-2574: DP-group reductions only; microsoft/Megatron-DeepSpeed#170)",
        "turn sequence parallelism off (--no-sequence-parallel: Megatron-DeepSpeed's own default, --sequence-parallel "
        "store_true), or use a stack whose trainer sums them (--stack megatron)",
        _stack_sp_norm_broken, detail=_stack_sp_norm_detail),
)


BRIDGE_COMMIT = "NVIDIA-NeMo/Megatron-Bridge @dc805f5cf"


def _local_chunk(model, stack) -> int | None:
    """The attention chunk of a model whose chunked layers the stack chunks by the CP rank's sequence (stack
    chunked_attention.cp_local_sequence, Bridge's Llama4SelfAttention); None elsewhere. The model's used kinds only
    (its layer pattern: never a per-layer loop)."""
    from .schema import ChunkedAttention

    run = getattr(stack, "chunked_attention", None) if stack is not None else None
    if run is None or not run.cp_local_sequence or model is None or model.layer_pattern is None:
        return None
    chunks = {model.layer_kinds[k].mixer.chunk for k in set(model.layer_pattern)
              if isinstance(model.layer_kinds[k].mixer, ChunkedAttention)}
    return next(iter(chunks)) if len(chunks) == 1 else None  # plan._stack_chunks: one chunk size, or none chunked


def _bridge_chunk_cp(model, stack, plan) -> np.ndarray:
    """BRIDGE_CHUNK_CP: Llama4SelfAttention.forward l. 304-307 at cp > 1 where the CP rank's sequence L = s / cp
    (query.shape[0], l. 295) exceeds the chunk c: assert L % (2 cp) == 0, then (L // (2 cp)) % c == 0."""
    cp = np.asarray(plan.cp, dtype=np.int64)
    c = _local_chunk(model, stack)
    if c is None:
        return np.zeros(np.shape(cp), dtype=bool)
    local = np.asarray(plan.seq, dtype=np.int64) // cp  # the rank's tokens (MEGATRON_CP_SEQ: s % 2 cp == 0)
    return (cp > 1) & (local > c) & ((local % (2 * cp) != 0) | ((local // (2 * cp)) % c != 0))


def _bridge_chunk_cp_detail(model, stack, plan=None, cluster=None) -> str:
    c, cp, s = _local_chunk(model, stack), int(plan.cp), int(plan.seq)
    return (f"seq {s:,} / cp {cp} = {s // cp:,} tokens a CP rank, over the chunk {c:,}: the code asserts them a multiple "
            f"of 2 cp = {2 * cp} and {s // cp:,} // {2 * cp} = {s // cp // (2 * cp):,} a multiple of {c:,}, i.e. seq a "
            f"multiple of 2 cp^2 x chunk = {2 * cp * cp * c:,} ({stack.origin} chunked_attention.cp_local_sequence)")


# BRIDGE_CHUNK_CP (code 81, issue 22 bridgecp): Megatron-Bridge's Llama4SelfAttention compares the CP rank's sequence,
# query.shape[0] = s / cp (hidden_states [s / (cp tp), b, h] under SP, gathered by the QKV projection), with the chunk;
# past it, under cp > 1, it asserts that length a multiple of 2 cp and its 2 cp-th part a multiple of the chunk (l.
# 304-307: cp_chunk_len = original_seq_len // (cp x 2), so s a multiple of 2 cp^2 c) before the core attention: any
# other layout fails at the first forward. At s / cp <= c it runs (no assert) every layer as global attention through
# Transformer Engine's CP kernel, which the cost models price per plan (layers/attention.py [14]). Keyed on the stack's
# chunked_attention.cp_local_sequence and the model's chunked layers, so every stack (ANY_STACK).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "BRIDGE_CHUNK_CP", ANY_STACK,
        "context parallelism on chunked attention where the CP rank's sequence s / cp exceeds the chunk c but is not a "
        "multiple of 2 cp with its 2 cp-th part a multiple of c (seq not a multiple of 2 cp^2 c): the code's asserts "
        "fail at the first forward",
        f"{BRIDGE_COMMIT} src/megatron/bridge/models/llama/llama4_utils.py Llama4SelfAttention.forward l. 294-307 "
        "(original_seq_len = query.shape[0], the CP rank's s / cp; with get_context_parallel_world_size() > 1 and "
        "original_seq_len > attention_chunk_size: assert original_seq_len % (cp x 2) == 0, cp_chunk_len = "
        "original_seq_len // (cp x 2), assert cp_chunk_len % attention_chunk_size == 0); stack_db <stack> "
        "chunked_attention.cp_local_sequence",
        "use cp 1, or a cp with seq / cp at most the chunk (the code then runs every attention layer global), or a seq "
        "that is a multiple of 2 cp^2 x the chunk",
        _bridge_chunk_cp, detail=_bridge_chunk_cp_detail),
)



def _torchtitan_hybridep_broken(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_HYBRIDEP: an MoE model on hybridep with ep 1, or with seq not a multiple of cp x tp."""
    if not _dispatcher_on(model, stack, "hybridep"):  # a job setting
        return np.zeros(np.shape(plan.tp), dtype=bool)
    return (np.asarray(plan.ep) == 1) | (np.asarray(plan.seq) % (np.asarray(plan.cp) * np.asarray(plan.tp)) != 0)


# torchtitan 0.3's HybridEP token dispatcher (job moe_dispatcher hybridep on stack torchtitan-0.3, the config functions
# deepseek_v3_*_hybridep): update_ep_token_dispatcher_config raises at start-up for ep 1 and for a seq_len that
# cp x tp does not divide (its buffer's per-rank tokens, layers/moe.py [19]). Code 82.
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_HYBRIDEP", "torchtitan",
        "torchtitan's HybridEP dispatcher needs expert parallelism (ep > 1) and seq_len a multiple of cp x tp",
        "pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/common/token_dispatcher.py "
        "update_ep_token_dispatcher_config l. 1216-1242 (ValueError 'training.seq_len (...) must be divisible by "
        "context_parallel_degree * tensor_parallel_degree'; ValueError 'HybridEPTokenDispatcher.Config requires expert "
        "parallelism (expert_parallel_degree > 1)')",
        "use ep > 1 and a seq_len that cp x tp divides with moe_dispatcher hybridep, or moe_dispatcher alltoall",
        _torchtitan_hybridep_broken),
)

def _mode_tp_pp_dp(model, stack, plan) -> np.ndarray:
    """STACK_MODE_TP_PP_DP: a sharding mode whose trainer asserts the tp-pp-dp mapping off (stack_db runs.sharding
    tp_pp_dp_mapping false) under a rank order that needs it (uses_tp_pp_dp_mapping)."""
    runs = stack.runs if stack is not None else None
    if runs is None or all(m.tp_pp_dp_mapping for m in runs.sharding):
        return np.zeros(np.shape(plan.tp), dtype=bool)
    return mode_is(stack, plan, *[m.name for m in runs.sharding if not m.tp_pp_dp_mapping]) & uses_tp_pp_dp_mapping(plan)


def mode_order_ok(stack, plan, orders) -> np.ndarray:
    """[plan rows, orders]: false where the row's sharding mode asserts the tp-pp-dp mapping off (stack_db runs.sharding
    tp_pp_dp_mapping false) and the order needs it for the row's mesh (STACK_MODE_TP_PP_DP): the search's rank-order
    axis per sharding mode (order_ok is per mesh, before the modes)."""
    from types import SimpleNamespace

    orders = np.asarray(orders)
    n = len(np.asarray(plan.tp))
    runs = stack.runs if stack is not None else None
    if runs is None or all(m.tp_pp_dp_mapping for m in runs.sharding):
        return np.ones((n, len(orders)), dtype=bool)
    bad = mode_is(stack, plan, *[m.name for m in runs.sharding if not m.tp_pp_dp_mapping])[:, None]
    shape = (n, len(orders))
    b = lambda x: np.broadcast_to(np.asarray(x, dtype=np.int64), shape)  # noqa: E731
    p = SimpleNamespace(order=b(orders[None, :]), **{k: b(np.asarray(getattr(plan, k))[:, None]) for k in ("tp", "cp", "pp", "dp")})
    return ~(bad & uses_tp_pp_dp_mapping(p))


# STACK_MODE_TP_PP_DP (code 83, issue 22 bridgefsdp): Megatron-Bridge's ConfigContainer.validate asserts
# `not self.dist.use_tp_pp_dp_mapping` under Megatron-FSDP (training/config.py @dc805f5cf l. 1542), which Megatron-LM
# @d98e8a64 does not; keyed on the stack's runs.sharding tp_pp_dp_mapping, so every stack (ANY_STACK).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "STACK_MODE_TP_PP_DP", ANY_STACK,
        "a sharding mode whose trainer asserts Megatron's tp-pp-dp mapping off (rank order tp-cp-pp-dp) under that order",
        f"{BRIDGE_COMMIT} src/megatron/bridge/training/config.py ConfigContainer.validate l. 1537-1542 (under "
        "use_megatron_fsdp: assert not self.dist.use_tp_pp_dp_mapping, 'use_tp_pp_dp_mapping is not supported with "
        "Megatron FSDP'); stack_db <stack> runs.sharding tp_pp_dp_mapping",
        "use the default rank order tp-cp-dp-pp (--rank-order tp-cp-dp-pp), or another sharding mode",
        _mode_tp_pp_dp),
)

def te_decoupled(stack, plan) -> np.ndarray:
    """Where the stack builds TE's FusedAdam with use_decoupled_grad for the job (PRECISION_AWARE_MFSDP): the job's
    precision-aware optimizer on the GPU (defaults.precision_aware_fused_adam, laid by plan.stack_for_states) where the
    plan's precision or fp8 recipe is one of runs.low_precision_moments.te_master or the job's master is below 4 B
    (Megatron's use_precision_aware_optimizer_no_fp8_or_ds_fp8, optimizer_config.py @905c0e386 l. 355-362, as
    plan._bytes_per_param's te_master), a boolean array of the plan's shape."""
    from .precisions import FP8, FP8_RECIPE_CODES, PRECISION_CODES
    from .schema import BYTES_PER_PARAM_PRESETS

    shape = np.shape(plan.tp)
    lpm = stack.runs.low_precision_moments if stack is not None and stack.runs is not None else None
    if lpm is None or not stack.defaults.precision_aware_fused_adam:  # job settings, every candidate alike
        return np.zeros(shape, dtype=bool)
    bpp = stack.defaults.bytes_per_param
    bpp = BYTES_PER_PARAM_PRESETS[bpp] if isinstance(bpp, str) else bpp
    if bpp.master < 4.0:
        return np.ones(shape, dtype=bool)
    prec = np.asarray(plan.precision)
    precs = np.array([PRECISION_CODES[k] for k in lpm.te_master if k in PRECISION_CODES and k != "fp8"], dtype=np.int64)
    recipes = np.array([FP8_RECIPE_CODES[k] for k in lpm.te_master if k in FP8_RECIPE_CODES], dtype=np.int64)
    return (isin(prec, precs) | ((prec == FP8) & isin(np.asarray(plan.f8r), recipes))) & np.ones(shape, dtype=bool)


def _precision_aware_mfsdp(model, stack, plan) -> np.ndarray:
    """PRECISION_AWARE_MFSDP: a sharding mode that never installs decoupled_grad (stack_db runs.low_precision_moments
    no_decoupled_grad_modes) where TE's FusedAdam reads only it (te_decoupled)."""
    lpm = stack.runs.low_precision_moments if stack is not None and stack.runs is not None else None
    if lpm is None or not lpm.no_decoupled_grad_modes:  # stack data
        return np.zeros(np.shape(plan.tp), dtype=bool)
    return mode_is(stack, plan, *lpm.no_decoupled_grad_modes) & te_decoupled(stack, plan)


# PRECISION_AWARE_MFSDP (code 84, issue 22 pamfsdp): at Megatron-LM 905c0e386 (Megatron-Bridge @dc805f5cf's pin) with
# --use-precision-aware-optimizer and no fp8 recipe or delayed scaling, get_megatron_optimizer builds TE's FusedAdam
# with use_decoupled_grad True (optimizer/__init__.py l. 522-529), which reads p.decoupled_grad alone and skips a
# parameter without one (TransformerEngine @28777046, v2.13.0, Bridge's uv.lock pin: fused_adam.py l. 571-577); under
# Megatron-FSDP the optimizer's parameters get param.grad, and decoupled_grad only where the buffer's
# use_precision_aware_optimizer attribute is set (param_and_grad_buffer.py l. 2845, 2872-2875), which nothing at
# 905c0e386 sets: no parameter is ever updated, and nothing refuses it at start-up (no validate_args or Bridge check).
# Megatron-LM fixed it after 905c0e386 (fe5291fa40, #4024, 2026-04-01: megatron_fsdp_use_decoupled_grad; ab43d43f0b,
# #4133, 2026-04-10: FusedAdam's master_weights off under Megatron-FSDP); @d98e8a64 trains it (megatron's
# no_decoupled_grad_modes empty). Keyed on the stack's data, so every stack (ANY_STACK).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "PRECISION_AWARE_MFSDP", ANY_STACK,
        "the precision-aware optimizer (TE FusedAdam reading decoupled_grad) under a sharding mode that never sets "
        "decoupled_grad: no parameter is updated",
        "NVIDIA/Megatron-LM @905c0e386 (pinned by NVIDIA-NeMo/Megatron-Bridge @dc805f5cf) megatron/core/optimizer/"
        "__init__.py l. 522-529 (FusedAdam master_weights, use_decoupled_grad True where "
        "use_precision_aware_optimizer_no_fp8_or_ds_fp8), megatron/core/distributed/fsdp/src/megatron_fsdp/"
        "param_and_grad_buffer.py update_main_grads l. 2844-2846, 2870-2875 (decoupled_grad only under the buffer's "
        "use_precision_aware_optimizer attribute, which nothing sets: param.grad); NVIDIA/TransformerEngine @28777046 "
        "(v2.13.0, Bridge's uv.lock) transformer_engine/pytorch/optimizers/fused_adam.py step l. 571-577 (p_grad = "
        "p.decoupled_grad; None: continue); fixed in Megatron-LM fe5291fa40 and ab43d43f0b; stack_db <stack> "
        "runs.low_precision_moments no_decoupled_grad_modes",
        "use sharding_mode distributed_optimizer (--sharding zero1), or fp32 Adam moments without "
        "precision_aware_optimizer (--bytes-per-param megatron), or --stack megatron (Megatron-LM @d98e8a64 sets "
        "decoupled_grad under Megatron-FSDP)",
        _precision_aware_mfsdp),
)


def _tt_seq_sp_cp(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_SEQ_SP_CP: seq_len % ((tp under SP, else 1) x (2 cp where cp > 1, else 1)) != 0."""
    tp, cp = np.asarray(plan.tp, dtype=np.int64), np.asarray(plan.cp, dtype=np.int64)
    div = np.where(np.asarray(plan.sp) > 0, tp, 1) * np.where(cp > 1, 2 * cp, 1)
    return np.asarray(plan.seq, dtype=np.int64) % div != 0


# TORCHTITAN_SEQ_SP_CP (code 85, issue 22 rule85): torchtitan 0.3.0's one sequence-length check. release/0.3 @4f9e9a47d
# torchtitan/trainer.py Trainer.__init__ l. 306-315 computes seq_len_divisor = (tp if parallelism.enable_sequence_parallel
# else 1) x (2 cp if cp > 1 else 1) and raises ValueError ('Training sequence length (...) must be divisible by ... for
# the configured sequence/context parallelism') where training.seq_len is not a multiple; no model's parallelize asserts
# parallel_dims.seq_len_divisor there (only experiments/graph_trainer and transformers_modeling_backend read it). So under
# 0.3.0 TP without SP (enable_sequence_parallel false, the planner's sp 0) puts no TP factor on the sequence, and cp 1 no
# factor 2, where main's TORCHTITAN_SEQ_DIVISOR (tp x 2 cp, always) refuses them. The torchtitan-0.3 stack leaves
# TORCHTITAN_SEQ_DIVISOR out (runs.startup_rules_absent) and main leaves this one out (its stricter check implies it:
# (tp or 1) x (2 cp or 1) divides tp x 2 cp).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_SEQ_SP_CP", "torchtitan",
        "torchtitan 0.3.0 needs the sequence length divisible by tp under sequence parallelism times 2 cp under context "
        "parallelism",
        "pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/trainer.py Trainer.__init__ l. 306-315 (seq_len_divisor = "
        "(parallel_dims.tp if parallelism.enable_sequence_parallel else 1) x (2 x parallel_dims.cp if cp > 1 else 1); "
        "ValueError 'Training sequence length ... must be divisible by ...')",
        "choose a sequence length divisible by tp (under SP) x 2 cp (with cp > 1), or tp and cp that divide it",
        _tt_seq_sp_cp),
)


def _tt_varlen_cp(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_VARLEN_CP: the model code builds varlen attention (the stack's defaults.attention_backend, which carries
    the job's attention_backend: plan.apply_attention_backend) and cp > 1."""
    varlen = stack is not None and stack.defaults.attention_backend == "varlen"  # a job / stack setting: every plan alike
    return np.full(np.shape(plan.tp), varlen, dtype=bool) & (np.asarray(plan.cp) > 1)


# TORCHTITAN_VARLEN_CP (code 86, issue 22 varlencp): torchtitan runs no context parallelism over varlen attention (torch's
# varlen_attn over packed documents), on either version, whatever the model code:
#   main @e347b1e5e   models/llama3/model/args.py update_from_config l. 57-65 raises NotImplementedError ('Context
#                     Parallel only supports SDPA and FlexAttention ... Varlen attention is not supported with CP') for
#                     the 8B_varlen / debugmodel_varlen_attn flavors (attn_type varlen); qwen3 / deepseek_v3 / llama4
#                     refuse every attn_type but sdpa under CP (qwen3 infra/parallelize.py l. 69-75; the others are
#                     TORCHTITAN_MODEL_CP); and distributed/context_parallel.py apply_cp_to_attention_module l. 69-72
#                     raises for attention_type varlen in any code that reaches it
#   0.3.0 @4f9e9a47d  models/llama3/model.py Llama3Model.Config.update_from_config l. 75-82 and models/qwen3/model.py
#                     l. 91-97 raise the same NotImplementedError where the inner attention is VarlenAttention.Config
#                     (model_registry attn_backend "varlen": llama3_debugmodel_varlen_attn, sft_qwen3_8b_math);
#                     distributed/context_parallel/api.py apply_cp_to_forward l. 103-104 ('Variable-length attention CP
#                     is not yet supported') and, under spmd_backend full_dtensor, distributed/full_dtensor.py
#                     validate_config l. 44-53 ('... + CP is not supported with ScaledDotProductAttention or
#                     VarlenAttention')
# FlexAttention and SDPA with CP run (main: llama3 apply_cp_to_attention_module's flex and sdpa cases, l. 54-68; 0.3.0:
# apply_cp_to_forward over FlexAttention), so only varlen is refused here; which codes refuse flex / sdpa is
# TORCHTITAN_MODEL_CP's. The backend is the job's attention_backend (the readers set it from the flavor / config
# function), else the stack's defaults.attention_backend (sdpa on main, flex on 0.3.0: never varlen).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_VARLEN_CP", "torchtitan",
        "torchtitan runs no context parallelism over varlen attention (attn_type / attn_backend varlen)",
        f"{TORCHTITAN_COMMIT} torchtitan/models/llama3/model/args.py update_from_config l. 57-65 (NotImplementedError "
        "'Varlen attention is not supported with CP') and torchtitan/distributed/context_parallel.py "
        "apply_cp_to_attention_module l. 69-72 ('Variable-length attention CP is not yet supported'); torchtitan 0.3.0 "
        "(release/0.3 @4f9e9a47d): torchtitan/models/llama3/model.py l. 75-82, torchtitan/models/qwen3/model.py "
        "l. 91-97 (the same NotImplementedError where the inner attention is VarlenAttention), "
        "torchtitan/distributed/context_parallel/api.py l. 103-104, torchtitan/distributed/full_dtensor.py l. 44-53",
        "use cp 1 with varlen attention, or a flex (or, on main, sdpa) flavor / attn_backend with cp > 1",
        _tt_varlen_cp),
)

def _tt_fsdp_symm_mem(model, stack, plan, cluster: Cluster) -> np.ndarray:
    """TORCHTITAN_FSDP_SYMM_MEM_SM90: the job's fsdp_symm_mem (the stack's defaults.fsdp_symm_mem, laid by
    plan.apply_startup_switches) on a GPU whose compute capability is below 9.0 (every plan alike)."""
    cc = cluster.capability
    bad = bool(stack is not None and stack.defaults.fsdp_symm_mem and cc is not None and cc < SYMM_MEM_MIN_CAPABILITY)
    return np.full(np.shape(plan.tp), bad, dtype=bool)


def _symm_mem_detail(model, stack, plan, cluster: Cluster) -> str:
    return f"{cluster.hardware.name}: compute capability {cluster.hardware.compute_capability}"


def _tt_spmd_typecheck_pp(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_SPMD_TYPECHECK_PP: SPMD type checking in force (the stack's defaults.spmd_typechecking: the job's under
    spmd_backend spmd_types, plan.apply_startup_switches) with pp > 1."""
    on = stack is not None and stack.defaults.spmd_typechecking  # a job setting: every plan alike
    return np.full(np.shape(plan.tp), on, dtype=bool) & (np.asarray(plan.pp) > 1)


def spmd_sac_flex(stack) -> bool:
    """Whether the stack (with the job's settings laid on) runs SPMD type checking over FlexAttention, so refuses selective
    recompute (TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX; a job setting: fit drops selective, space._recompute_runnable)."""
    return bool(stack is not None and stack.defaults.spmd_typechecking and stack.defaults.attention_backend == "flex")


def _tt_spmd_typecheck_sac_flex(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX: SPMD type checking in force with selective recompute (0.3's SelectiveAC) where
    the model code builds FlexAttention (the stack's defaults.attention_backend flex, the job's where it names one)."""
    from .recompute_modules import RC_SELECTIVE

    return np.full(np.shape(plan.tp), spmd_sac_flex(stack), dtype=bool) & (np.asarray(plan.recompute) == RC_SELECTIVE)


# torchtitan 0.3.0's checks of its own options (issue 22, rule87), release/0.3 @4f9e9a47d:
#   TORCHTITAN_FSDP_SYMM_MEM_SM90 (code 87)  config/configs.py ParallelismConfig.__post_init__ l. 267-277 raises ValueError
#       ('For NVIDIA GPUs, parallelism.enable_fsdp_symm_mem is only supported for compute capability 9.0 or newer') where
#       enable_fsdp_symm_mem is set and torch.version.hip is None and torch.cuda.get_device_capability() < (9, 0) (or no
#       CUDA device), whatever the mesh (the option applies set_symm_mem_for_comm to every FSDP module, distributed/fsdp.py
#       l. 44-51, 312-313). Read from the hardware entry's compute_capability (hardware_db, NVIDIA's CUDA GPUs table); an
#       entry without one (an AMD GPU: ROCm's torch.version.hip passes the check) is not refused
#   TORCHTITAN_SPMD_TYPECHECK_PP (code 88)  trainer.py Trainer.Config.__post_init__ l. 143-153 raises ValueError ('SPMD
#       typechecking is not supported with pipeline parallelism') where spmd_backend == "spmd_types" and
#       debug.spmd_typechecking and pipeline_parallel_degree > 1
#   TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX (code 89)  l. 155-167 raises ValueError ('Selective activation checkpointing (SAC)
#       is not supported with FlexAttention while SPMD typechecking is enabled') where spmd_backend == "spmd_types" and
#       debug.spmd_typechecking and the activation checkpointing is SelectiveAC.Config (activation-checkpoint:selective,
#       the planner's recompute selective: torchtitan03.AC_SUBCOMMANDS) and the model holds a FlexAttention.Config (the
#       config function's attn_backend flex, model_registry's default; varlen builds VarlenAttention)
# The switches are job fields (fsdp_symm_mem, spmd_typechecking) laid on the stack's defaults by plan.apply_startup_switches,
# on a stack that has the option (runs.fsdp_symm_mem / runs.spmd_typechecking: torchtitan-0.3 only; main has neither, git
# grep symm_mem / spmd_typechecking @e347b1e5e: only experiments/): each rule names its option (StartupRule.option), so
# rules_for lists them on torchtitan-0.3 alone.
SYMM_MEM_MIN_CAPABILITY = (9, 0)  # configs.py l. 270-271 @4f9e9a47d: torch.cuda.get_device_capability() < (9, 0) refused
_TT03 = "pytorch/torchtitan release/0.3 @4f9e9a47d"
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_FSDP_SYMM_MEM_SM90", "torchtitan",
        "torchtitan 0.3.0 runs FSDP on symmetric memory (parallelism.enable_fsdp_symm_mem) only on compute capability "
        "9.0 or newer",
        f"{_TT03} torchtitan/config/configs.py ParallelismConfig.__post_init__ l. 267-277 (ValueError 'For NVIDIA GPUs, "
        "parallelism.enable_fsdp_symm_mem is only supported for compute capability 9.0 or newer')",
        "leave fsdp_symm_mem out (drop --parallelism.enable_fsdp_symm_mem), or plan a Hopper or newer GPU",
        _tt_fsdp_symm_mem, reads_cluster=True, detail=_symm_mem_detail, option="fsdp_symm_mem"),
    StartupRule(
        "TORCHTITAN_SPMD_TYPECHECK_PP", "torchtitan",
        "torchtitan 0.3.0 runs no SPMD type checking (debug.spmd_typechecking under spmd_backend spmd_types) with "
        "pipeline parallelism",
        f"{_TT03} torchtitan/trainer.py Trainer.Config.__post_init__ l. 143-153 (ValueError 'SPMD typechecking is not "
        "supported with pipeline parallelism')",
        "use pp 1 with spmd_typechecking, or leave spmd_typechecking out (drop --debug.spmd_typechecking)",
        _tt_spmd_typecheck_pp, option="spmd_typechecking"),
    StartupRule(
        "TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX", "torchtitan",
        "torchtitan 0.3.0 runs no SPMD type checking (debug.spmd_typechecking under spmd_backend spmd_types) with "
        "selective activation checkpointing over FlexAttention",
        f"{_TT03} torchtitan/trainer.py Trainer.Config.__post_init__ l. 155-167 (ValueError 'Selective activation "
        "checkpointing (SAC) is not supported with FlexAttention while SPMD typechecking is enabled')",
        "use recompute full or none with spmd_typechecking (activation-checkpoint:full|none), or leave "
        "spmd_typechecking out (drop --debug.spmd_typechecking)",
        _tt_spmd_typecheck_sac_flex, option="spmd_typechecking"),
)



def _tt_cp_ptrr_mask(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_CP_PTRR_MASK: the job's CP load balancer ptrr (the stack's defaults.cp_load_balancer, laid by
    plan.apply_startup_switches) with cp > 1 where the model code builds no FlexAttention (the stack's
    defaults.attention_backend, which carries the job's: plan.apply_attention_backend), so no BlockMask reaches cp_shard."""
    bad = bool(stack is not None and stack.defaults.cp_load_balancer == "ptrr"
               and stack.defaults.attention_backend != "flex")  # job settings: every plan alike
    return np.full(np.shape(plan.tp), bad, dtype=bool) & (np.asarray(plan.cp) > 1)


def _unbuilt_balancer(stack) -> str | None:
    """The job's CP load balancer where it is a name torch's cp_shard does not build (neither headtail nor ptrr: the
    stack's defaults.cp_load_balancer, laid by plan.apply_startup_switches from the job's cp_load_balancer); None
    otherwise."""
    from typing import get_args

    from .schema import CPLoadBalancer
    name = stack.defaults.cp_load_balancer if stack is not None else None
    return name if name is not None and name not in get_args(CPLoadBalancer) else None


def _tt_cp_load_balancer_name(model, stack, plan) -> np.ndarray:
    """TORCHTITAN_CP_LOAD_BALANCER_NAME: the job's CP load balancer a name torch's cp_shard does not build
    (_unbuilt_balancer), with cp > 1 (cp_shard runs only where CP is enabled)."""
    bad = _unbuilt_balancer(stack) is not None  # a job setting: every plan alike
    return np.full(np.shape(plan.tp), bad, dtype=bool) & (np.asarray(plan.cp) > 1)


def _tt_cp_load_balancer_detail(model, stack, plan, cluster) -> str:
    """The name the refused plan's job states (StartupRule.detail)."""
    return f"context_parallel_load_balancer {_unbuilt_balancer(stack)!r}"


# TORCHTITAN_CP_PTRR_MASK (code 90, issue 22 ttchecks): torch's PTRR load balancer is built from the attention's BlockMask.
#   main @e347b1e5e   distributed/context_parallel.py cp_shard l. 191-206: load_balancer_type "ptrr" raises ValueError
#                     ('PTRRLoadBalancer requires attention_masks to be a BlockMask, but got None or dict[str, BlockMask]',
#                     l. 196-200; any other type l. 201-205) before building _PTRRLoadBalancer; train.py
#                     post_dataloading_process l. 457-466 builds attention masks only for attn_type flex or varlen, and
#                     calls cp_shard (prepare_context_parallel_input) where cp is enabled: an SDPA model (attn_type sdpa,
#                     every flavor's default, stack defaults.attention_backend) hands it None, a varlen one VarlenMetadata
#                     (refused under CP before: TORCHTITAN_VARLEN_CP, code 86)
#   0.3.0 @4f9e9a47d  distributed/context_parallel/api.py cp_shard l. 225-259: the same, None refused (l. 232-236) and a mask
#                     that is no BlockMask (l. 254-258); a dict[str, BlockMask] takes its mask from
#                     context_parallel_ptrr_mask_key (l. 237-253); 0.3's language models build FlexAttention or varlen only
#                     (config_utils.get_attention_config), so there the rule adds nothing to code 86 beside a flex model
# The codes whose masks are a dict on main (llama4: {'rope', 'nope'}, gpt_oss: basic and sliding-window masks,
# models/llama4/model/model.py l. 541-570, models/gpt_oss/model/model.py l. 387-433) run no CP with FlexAttention
# (TORCHTITAN_MODEL_CP: stack_db runs.model_codes context_parallel false), nor does 0.3's gpt_oss: so the rule reads the
# attention backend alone. A ptrr job on a stack without the option is refused first (plan.apply_startup_switches); the
# rule is listed where the stack has it (StartupRule.option cp_load_balancers: both torchtitan stacks).
LATER_RULES = LATER_RULES + (
    StartupRule(
        "TORCHTITAN_CP_PTRR_MASK", "torchtitan",
        "torchtitan's PTRR load balancer (context_parallel_load_balancer ptrr) under context parallelism needs the "
        "FlexAttention BlockMask, which only a flex model builds",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/context_parallel.py cp_shard l. 191-206 (ValueError "
        "'PTRRLoadBalancer requires attention_masks to be a BlockMask, but got None or dict[str, BlockMask]'), "
        "torchtitan/train.py post_dataloading_process l. 457-466 (masks only for attn_type flex / varlen); torchtitan "
        "0.3.0 (release/0.3 @4f9e9a47d): torchtitan/distributed/context_parallel/api.py cp_shard l. 225-259",
        "use the default headtail balancer (drop context_parallel_load_balancer ptrr) with SDPA, or a flex flavor "
        "(attention_backend flex) with ptrr, or cp 1",
        _tt_cp_ptrr_mask, option="cp_load_balancers"),
)

# A trainer's deterministic mode (job field deterministic_mode, laid on the stack's defaults by plan.apply_startup_switches
# with the job's settings it refuses: defaults.deterministic_refused) refuses some settings at start-up (issue 22,
# detmode). The stack lists them, each cited and dated (stack_db runs.deterministic_refuses); a job whose trainer_date is
# older than a check's date runs without it (plan.apply_startup_switches drops it from the stack's list):
#   MEGATRON_DETERMINISTIC_TP_OVERLAP (code 91)  NVIDIA/Megatron-LM @d98e8a64 megatron/training/determinism.py l. 24
#       ARG_VALUES_REQUIRED_FOR_DETERMINISM {'cross_entropy_loss_fusion': False, 'tp_comm_overlap': False}, asserted by
#       apply_determinism_to_args l. 141-148, from arguments.py validate_args l. 1708-1711; the check came with
#       determinism.py, 3ab71eeb3e (2026-07-08): Megatron CI rows recorded before it ran --tp-comm-overlap with
#       --deterministic-mode (the gpt3_weekly ..._tp_overlap cases, recorded at 4828d651e7, 2026-07-02). Reads the
#       plan's TP overlap (PlanArrays.tpo): a variant rule (VARIANT_RULES), so fit ranks no overlapped row
#   MEGATRON_DETERMINISTIC_CE_FUSION (code 92)  the same assertion (cross_entropy_loss_fusion), in validate_args from
#       2ea54d6a37 (2024-07-25) to 3ab71eeb3e; Megatron-Bridge @dc805f5cf training/config.py l. 1458-1461 (f003cd8ca,
#       2025-10-27): the job's cross_entropy_fusion, every plan alike (model_level)
#   MEGATRON_DETERMINISTIC_FLASH (code 93)  Megatron-Bridge @dc805f5cf training/config.py l. 1454-1456: model.
#       attention_backend flash refused (the job's attention_kernel flash2, which the Bridge reader reads from it);
#       Megatron-LM refused --use-flash-attn from ac08742c96 (2024-05-04) to 3ab71eeb3e: a flag, not the backend, the
#       job's use_flash_attn (rule MEGATRON_DETERMINISTIC_USE_FLASH_ATTN, code 98, FIXED_CODE_RULES), so the megatron
#       entry does not list this setting. Bridge's check reads the config's model.attention_backend, not the kernel
#       Transformer Engine picks (under auto it picks FlashAttention below Hopper, unrefused): a job whose config names
#       flash (attention_kernel flash2 with attention_kernel_named, as the Bridge reader reads model.attention_backend
#       flash) is refused on every GPU, the one on which TE would pick it anyway too; attention_kernel flash2 alone is
#       refused only where it is not TE's own choice (a plan records the kernel it priced, auto's too, and the export
#       writes TE's own choice as null: plan._deterministic_switches)
#   MEGATRON_DETERMINISTIC_USE_FLASH_ATTN, _MOE (codes 98, 99, FIXED_CODE_RULES): checks of an older Megatron-LM,
#       dated since / until in the stack's list (a job's trainer_date in the range runs them)
# Each rule is the stack's only where its runs.deterministic_refuses lists the setting (StartupRule.option
# "deterministic_refuses:<setting>", rules_for).


def _deterministic_on(stack) -> bool:
    return bool(stack is not None and stack.defaults.deterministic_mode)


def _deterministic_tp_overlap(model, stack, plan) -> np.ndarray:
    """MEGATRON_DETERMINISTIC_TP_OVERLAP: the job's deterministic mode with the plan's TP overlap."""
    return _deterministic_on(stack) & (np.asarray(plan.tpo) > 0) & np.ones(np.shape(plan.tp), dtype=bool)


def _deterministic_setting(setting: str):
    """A rule's broken: the job's deterministic mode with a job setting it refuses (every plan alike)."""
    def broken(model, stack, plan) -> np.ndarray:
        bad = _deterministic_on(stack) and setting in stack.defaults.deterministic_refused
        return np.full(np.shape(plan.tp), bad, dtype=bool)
    return broken


def _deterministic_moe(model, stack, plan) -> np.ndarray:
    """MEGATRON_DETERMINISTIC_MOE: the job's deterministic mode with an MoE model (every plan alike)."""
    bad = _deterministic_on(stack) and model is not None and model.moe is not None
    return np.full(np.shape(plan.tp), bad, dtype=bool)


_DET_MEGATRON = (f"{MEGATRON_COMMIT} megatron/training/determinism.py l. 24 ARG_VALUES_REQUIRED_FOR_DETERMINISM, "
                 "apply_determinism_to_args l. 141-148 (AssertionError '--deterministic-mode requires: ...'), called by "
                 "arguments.py validate_args l. 1708-1711")
_DET_BRIDGE = ("NVIDIA-NeMo/Megatron-Bridge @dc805f5cf src/megatron/bridge/training/config.py "
               "ConfigContainer._validate_and_apply_deterministic_mode l. 1445-1469")
LATER_RULES = LATER_RULES + (
    StartupRule(
        "MEGATRON_DETERMINISTIC_TP_OVERLAP", "megatron",
        "deterministic_mode refuses TP communication overlap (--tp-comm-overlap)",
        f"{_DET_MEGATRON}; added by 3ab71eeb3e (2026-07-08)",
        "turn the TP overlap off (tp_comm_overlap: false, drop --tp-comm-overlap), or leave deterministic_mode out "
        "(a run of a Megatron-LM older than 2026-07-08: trainer_date)",
        _deterministic_tp_overlap, option="deterministic_refuses:tp_comm_overlap"),
    StartupRule(
        "MEGATRON_DETERMINISTIC_CE_FUSION", "megatron",
        "deterministic_mode refuses the fused cross-entropy (--cross-entropy-loss-fusion)",
        f"{_DET_MEGATRON} (in validate_args itself from 2ea54d6a37, 2024-07-25); {_DET_BRIDGE}, l. 1458-1461",
        "leave cross_entropy_fusion out (drop --cross-entropy-loss-fusion; Bridge: model.cross_entropy_loss_fusion "
        "false), or leave deterministic_mode out",
        _deterministic_setting("cross_entropy_fusion"), model_level=True, option="deterministic_refuses:cross_entropy_fusion"),
    StartupRule(
        "MEGATRON_DETERMINISTIC_FLASH", "megatron",
        "deterministic_mode refuses the FlashAttention backend (model.attention_backend flash)",
        f"{_DET_BRIDGE}, l. 1454-1456 ('Flash attention can not be used in deterministic mode.')",
        "leave attention_kernel flash2 out (model.attention_backend fused or auto: auto runs FlashAttention below "
        "Hopper anyway, unrefused; attention_kernel_named false), or leave deterministic_mode out",
        _deterministic_setting("flash_attention"), model_level=True, option="deterministic_refuses:flash_attention"),
)


def _has_option(runs, option: str) -> bool:
    """Whether the stack's runs has the option a rule checks (StartupRule.option): a runs field set and not false
    ("a.b": a field of a runs block, runs.optimizers.muon_qkv_split_raises), or "field:item", a list field of runs
    whose entries' `setting` includes the item (runs.deterministic_refuses), or "field@attr", a list field of runs one of
    whose entries sets `attr` (runs.sharding@mfsdp_v2: a mode that runs Megatron-FSDP v2)."""
    field, _, item = option.partition(":")
    field, _, attr = field.partition("@")
    value = runs
    for part in field.split("."):
        value = getattr(value, part, None)
    if attr:
        return any(getattr(v, attr, False) for v in value or ())
    if not item:
        return value not in (None, False)
    return any(getattr(v, "setting", None) == item for v in value or ())


def _muon_qkv_split_tp(model, stack, plan) -> np.ndarray:
    """MUON_QKV_SPLIT_TP: the job's Muon with its q / k / v split (defaults.muon_qkv_split, laid by
    plan.stack_for_states) on a stack whose split raises on a partial query group (runs.optimizers
    muon_qkv_split_raises), where tp does not divide the KV heads of an attention layer kind with a linear_qkv
    (layers Attention; MLA has none: its projections are never tagged is_qkv)."""
    from .layers import layer_list
    from .layers.attention import Attention

    tp = np.asarray(plan.tp, dtype=np.int64)
    opt = stack.runs.optimizers if stack is not None and stack.runs is not None else None
    if model is None or opt is None or not opt.muon_qkv_split_raises or not stack.defaults.muon_qkv_split:
        return np.zeros(np.shape(tp), dtype=bool)  # stack data and job settings: every candidate alike
    heads = {k.mixer.k for k in layer_list(model).kinds if isinstance(k.mixer, Attention)}
    return functools.reduce(np.logical_or, (np.mod(k, tp) != 0 for k in heads), np.zeros(np.shape(tp), dtype=bool))


def _mla_fusion_tp(model, stack, plan) -> np.ndarray:
    """MEGATRON_MLA_FUSION_TP: the job's mla_down_proj_fusion (defaults.mla_down_proj_fusion, laid by plan.resolve)
    where tp does not divide q_lora_rank or kv_lora_rank + qk_rope_head_dim (an MLA model with a q_lora_rank:
    plan.with_fused_mla refuses the rest)."""
    tp = np.asarray(plan.tp, dtype=np.int64)
    if model is None or model.mla is None or stack is None or not stack.defaults.mla_down_proj_fusion:
        return np.zeros(np.shape(tp), dtype=bool)  # a model and a job setting: every candidate alike
    ml = model.mla
    return (np.mod(ml.q_lora_rank or 0, tp) != 0) | (np.mod(ml.kv_lora_rank + ml.qk_rope_head_dim, tp) != 0)


def _mla_fusion_tp_overlap(model, stack, plan) -> np.ndarray:
    """MEGATRON_MLA_FUSION_TP_OVERLAP: the job's mla_down_proj_fusion (defaults.mla_down_proj_fusion, laid by
    plan.resolve) with the plan's TP overlap at tp > 1 (the overlap needs SP: plan rule)."""
    tpo = (np.asarray(plan.tpo) > 0) & (np.asarray(plan.tp) > 1)
    if model is None or model.mla is None or stack is None or not stack.defaults.mla_down_proj_fusion:
        return np.zeros(np.shape(tpo), dtype=bool)  # a model and a job setting: every candidate alike
    return tpo


def _run_te(stack) -> str | None:
    """The run's Transformer Engine release (te_version.run_te_version: the job's te_version, laid on defaults by
    plan.resolve, else the stack's memory.te_version); None: the stack runs no Transformer Engine."""
    from .te_version import run_te_version

    return run_te_version(stack.defaults.te_version, stack) if stack is not None else None


def _recipe_rows(plan) -> dict[str, np.ndarray]:
    """Where each plan runs each quantized recipe (names of precisions.FP8_RECIPES; nvfp4: the nvfp4 precision)."""
    from .precisions import FP8, FP8_RECIPE_CODES, NVFP4

    prec, f8r = np.asarray(plan.precision), np.asarray(plan.f8r)
    rows = {n: (prec == FP8) & (f8r == c) for n, c in FP8_RECIPE_CODES.items() if n != "nvfp4"}
    rows["nvfp4"] = prec == NVFP4
    return rows


def _recipe_of(plan) -> str:
    """The recipe a 0-d plan runs (_recipe_rows' names), for a refusal's detail."""
    from .precisions import FP8_RECIPES, NVFP4

    return "nvfp4" if int(np.asarray(plan.precision)) == NVFP4 else FP8_RECIPES[int(np.asarray(plan.f8r))]


def _tp_overlap_quantizer(model, stack, plan) -> np.ndarray:
    """MEGATRON_TP_OVERLAP_QUANTIZER: the plan's TP overlap (tpo, tp > 1) with a recipe whose quantizer the run's
    Transformer Engine's userbuffers cannot all-gather (te_version.ub_refuses, TE_UB_RECIPE_FIRST): fp8 blockwise
    (Float8BlockQuantizer) or the nvfp4 precision (NVFP4Quantizer) on every release, mxfp8 (MXFP8Quantizer) before 2.4;
    delayed passes everywhere, tensorwise wherever the release builds it. A recipe the release does not build at all
    is MEGATRON_TE_RECIPE_RELEASE's (te_version.recipe_missing), not this rule's."""
    from .te_version import recipe_missing, ub_refuses

    tpo = (np.asarray(plan.tpo) > 0) & (np.asarray(plan.tp) > 1)
    te = _run_te(stack)
    bad = np.zeros(np.shape(tpo), dtype=bool)
    for recipe, rows in _recipe_rows(plan).items():
        # te is the run's release, one per job (not a searched quantity): which recipes it refuses is a constant
        if ub_refuses(recipe, te) and not recipe_missing(recipe, te):
            bad = bad | rows
    return tpo & bad


def _tp_overlap_quantizer_detail(model, stack, plan, cluster) -> str:
    """The refused plan's recipe, and for mxfp8 the run's Transformer Engine release (StartupRule.detail)."""
    recipe = _recipe_of(plan)
    if recipe == "nvfp4":
        return "nvfp4"
    if recipe != "mxfp8":
        return f"fp8 recipe {recipe}"
    return f"fp8 recipe mxfp8 on Transformer Engine {_run_te(stack)}"


def _te_recipe_release(model, stack, plan) -> np.ndarray:
    """MEGATRON_TE_RECIPE_RELEASE: the plan's fp8 recipe (or nvfp4) where the run's Transformer Engine release
    predates it as Megatron-LM builds it (te_version.recipe_missing, TE_RECIPE_FIRST: tensorwise 2.2, mxfp8 2.1,
    blockwise 2.3, nvfp4 2.8); delayed on every release; a stack without Transformer Engine refuses none."""
    from .te_version import recipe_missing

    te = _run_te(stack)
    bad = np.zeros(np.broadcast(np.asarray(plan.tp), np.asarray(plan.precision), np.asarray(plan.f8r)).shape, dtype=bool)
    for recipe, rows in _recipe_rows(plan).items():
        if recipe_missing(recipe, te):  # te: one per job (not searched)
            bad = bad | rows
    return bad


def _te_recipe_release_detail(model, stack, plan, cluster) -> str:
    """The refused plan's recipe, the run's release and the first one that builds it (StartupRule.detail)."""
    from .te_version import TE_RECIPE_FIRST

    recipe = _recipe_of(plan)
    first = ".".join(map(str, TE_RECIPE_FIRST[recipe]))
    what = "nvfp4" if recipe == "nvfp4" else f"fp8 recipe {recipe}"
    return f"{what} on Transformer Engine {_run_te(stack)} (first built on {first})"


def _megatron_bf16_layers_stage(model, stack, plan) -> np.ndarray:
    """MEGATRON_BF16_LAYERS_STAGE: an fp8 plan whose bf16 layers at either end (the larger of the job's
    bf16_layers_at_start / _end: the stack's defaults.bf16_layers_max, laid by plan.apply_startup_switches) are more
    than num_layers // pp."""
    from .precisions import FP8

    n = stack.defaults.bf16_layers_max if stack is not None else 0
    if not n:  # a job setting (every plan alike): no bf16 layers, nothing to check
        return np.zeros(np.shape(plan.tp), dtype=bool)
    pp = np.maximum(np.asarray(plan.pp), 1)
    return (np.asarray(plan.precision) == FP8) & (n > model.num_layers // pp)


def _param_gather(model, stack, plan) -> np.ndarray:
    """MEGATRON_PARAM_GATHER: the job's dp_param_gather_overlap true (defaults.dp_param_gather_overlap_set, laid by
    plan.apply_startup_switches) where the plan's DP overlap is off or its sharding mode shards no optimizer (ddp,
    torch_fsdp2): Megatron's validate_args asserts both (arguments.py @d98e8a64 l. 1024-1029)."""
    dpo = np.asarray(plan.dpo)
    if stack is None or not stack.defaults.dp_param_gather_overlap_set:  # a job setting: every candidate alike
        return np.zeros(np.shape(dpo), dtype=bool)
    return (dpo == 0) | mode_is(stack, plan, "ddp", "torch_fsdp2")


def _megatron_recompute_layers_vpp(model, stack, plan) -> np.ndarray:
    """MEGATRON_RECOMPUTE_LAYERS_VPP: a full-recompute plan at pp > 1 whose job recompute_layers (a GPU's layers: the
    stack's defaults.recompute_layers_set, laid by plan.apply_startup_switches) is not a multiple of its vpp: Megatron's
    --recompute-num-layers n re-runs the first n layers of each model chunk, n x vpp a GPU, so no n gives it."""
    from .recompute_modules import RC_FULL

    cap = stack.defaults.recompute_layers_set if stack is not None else None
    if not cap:  # a job setting (every plan alike): no block window, nothing to check
        return np.zeros(np.shape(plan.tp), dtype=bool)
    vpp = np.maximum(np.asarray(plan.vpp, dtype=np.int64), 1)
    return (np.asarray(plan.recompute) == RC_FULL) & (np.asarray(plan.pp) > 1) & (int(cap) % vpp != 0)


def _tt03_stage_lists(model, stack, plan) -> np.ndarray:
    """TORCHTITAN03_STAGE_LISTS: at pp > 1 on a stack whose launch spells the split by layers_per_stage only
    (runs.pipeline_stages_by_count_only), a split into pp x vpp stages that no layers_per_stage gives (ceil(units /
    ceil(units / stages)) != stages, units the layers plus the ends the plan counts) at a vpp other than the
    schedule's default (2 interleaved, else 1), which export._torchtitan writes as module_fqns_per_model_part."""
    pp = np.asarray(plan.pp, dtype=np.int64)
    runs = stack.runs if stack is not None else None
    if model is None or runs is None or not runs.pipeline_stages_by_count_only:
        return np.zeros(np.shape(pp), dtype=bool)  # stack data: every candidate alike
    vpp = np.asarray(plan.vpp, dtype=np.int64)
    units = model.num_layers + np.asarray(plan.split_emb, dtype=np.int64) + np.asarray(plan.split_loss, dtype=np.int64)
    spelled = layers_per_stage(units, np.maximum(pp * vpp, 1))[1]
    default = vpp == np.where(np.asarray(plan.schedule) == INTERLEAVED, 2, 1)
    return (pp > 1) & ~spelled & ~default


def _mfsdp_v2_layout(model, stack, plan) -> np.ndarray:
    """MEGATRON_FSDP_V2_LAYOUT: the job's mfsdp_v2 (defaults.mfsdp_v2, laid by plan.resolve) on a plan whose sharding
    mode is not one stating runs.sharding mfsdp_v2 (Megatron's optim_grads_params), or at tp, pp or cp above 1, or with
    virtual pipeline stages, or in fp8 / nvfp4 (l. 676-677)."""
    tp = np.asarray(plan.tp, dtype=np.int64)
    if stack is None or stack.runs is None or not stack.defaults.mfsdp_v2:
        return np.zeros(np.shape(tp), dtype=bool)  # a job setting: every candidate alike
    from .precisions import BF16

    names = [m.name for m in stack.runs.sharding if m.mfsdp_v2]
    if not names:  # stack data: plan.resolve refuses the job's mfsdp_v2 there, naming the stack
        return np.zeros(np.shape(tp), dtype=bool)
    v2 = mode_is(stack, plan, *names)
    return (~v2 | (tp > 1) | (np.asarray(plan.pp) > 1) | (np.asarray(plan.cp) > 1)
            | (np.asarray(plan.vpp) > 1) | (np.asarray(plan.precision) != BF16))


# Rules whose codes were handed out ahead of the LATER_RULES before them (helpers working at once, issue 21 muonleft):
# (code, rule), each above every LATER_RULES code; a LATER_RULES entry reaching one is refused below.
# MUON_QKV_SPLIT_TP (code 94): Megatron-Core 905c0e386 (Megatron-Bridge @dc805f5cf's pin) tags every linear_qkv for
# Muon's q / k / v split (muon.py l. 249-250) and views the rank's momentum as rows // one query group's rows groups
# (l. 144-147): where tp does not divide the KV heads the TP shard holds part of one group (attention.py l. 292-303),
# 0 groups, and the view raises at the first optimizer step, in either TP mode. Megatron-LM @d98e8a64 skips the split
# there (optimizer/__init__.py l. 790-803), priced as such (layers/attention.py Attention.muon_matrices). Keyed on the
# stack's data (runs.optimizers muon_qkv_split_raises), so every stack (ANY_STACK).
FIXED_CODE_RULES: tuple[tuple[int, StartupRule], ...] = (
    (94, StartupRule(
        "MUON_QKV_SPLIT_TP", ANY_STACK,
        "Muon's q / k / v split (muon_split_qkv, the default) where tp does not divide the KV heads: each TP rank's "
        "linear_qkv shard holds part of one query group, which the split cannot view",
        "NVIDIA/Megatron-LM @905c0e386 (pinned by NVIDIA-NeMo/Megatron-Bridge @dc805f5cf) megatron/core/optimizer/muon.py "
        "l. 229-250 (every linear_qkv.weight is_qkv), TensorParallelMuon.orthogonalize l. 136-147 (num_query_groups = "
        "grad_shape[0] // sum(qkv_split_shapes): 0, grad.view(0, ...) raises), megatron/core/transformer/attention.py "
        "l. 292-303 (num_query_groups < tp: one group over tp / k ranks); stack_db <stack> runs.optimizers "
        "muon_qkv_split_raises",
        "use a tp that divides the KV heads, or turn the split off (--no-muon-split-qkv: optimizer.muon_split_qkv=false), "
        "or --stack megatron (Megatron-LM @d98e8a64 skips the split there)",
        _muon_qkv_split_tp, option="optimizers.muon_qkv_split_raises")),
    # MEGATRON_MLA_FUSION_TP (code 95): FusedMLASelfAttention._qkv_down_projection (NVIDIA/Megatron-LM @d98e8a64
    # multi_latent_attention.py l. 1353-1372) asserts, with more than one TP rank, q_lora_rank % tp == 0 and
    # (kv_lora_rank + qk_pos_emb_head_dim) % tp == 0 before splitting the fused output per rank (the first forward).
    # Keyed on the job's mla_down_proj_fusion (defaults, laid by plan.resolve) on a stack with the option (option).
    (95, StartupRule(
        "MEGATRON_MLA_FUSION_TP", ANY_STACK,
        "MLA's fused down projection (mla_down_proj_fusion) needs tp to divide q_lora_rank and kv_lora_rank + "
        "qk_rope_head_dim",
        "NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/multi_latent_attention.py FusedMLASelfAttention."
        "_qkv_down_projection l. 1353-1372 ('q_lora_rank must be divisible by tensor model parallel size when using MLA "
        "down projection fusion'; the same of kv_lora_rank + qk_pos_emb_head_dim)",
        "use a tp that divides both, or leave mla_down_proj_fusion out (drop --mla-down-proj-fusion)",
        _mla_fusion_tp, option="mla_down_proj_fusion")),
    # MEGATRON_BF16_LAYERS_STAGE (code 96, FIXED_CODE_RULES; issue 22's fuzz99 task): Megatron-LM @d98e8a64
    #   megatron/core/transformer/transformer_config.py __post_init__
    #   l. 1527-1555, under `if self.fp8:` (fp8 only: the fp4 block, l. 1578-1590, has no such check):
    #   max_bf16_layers_per_pipeline_stage = self.num_layers // self.pipeline_model_parallel_size (l. 1533-1535), and with
    #   first_last_layers_bf16 a num_layers_at_start_in_bf16 or num_layers_at_end_in_bf16 below 0 or above it raises
    #   ValueError ('... must be between 0 and number of layers per pipeline stage', l. 1538-1555). num_layers is the
    #   decoder's (--num-layers, without the MTP modules), the planner's model.num_layers; pipeline_model_parallel_size is
    #   pp, whatever vpp. Megatron-Bridge builds the same TransformerConfig (its stack runs the megatron set).
    (96, StartupRule(
        "MEGATRON_BF16_LAYERS_STAGE", "megatron",
        "Megatron-Core keeps at most num_layers // pp layers in bf16 at each end of an fp8 model "
        "(--num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16)",
        f"{MEGATRON_COMMIT} megatron/core/transformer/transformer_config.py __post_init__ l. 1532-1555 (ValueError "
        "'num_layers_at_start_in_bf16 (N) must be between 0 and number of layers per pipeline stage (M)', "
        "M = num_layers // pipeline_model_parallel_size)",
        "use a smaller pp, or keep at most num_layers // pp layers in bf16 at each end (bf16_layers_at_start / _end)",
        _megatron_bf16_layers_stage)),
    # TORCHTITAN03_STAGE_LISTS (code 97, issue 22 tiletests' finding): torchtitan 0.3 launches from run_train.sh's command
    # line, where --parallelism.pipeline_parallel_layers_per_stage is one word and module_fqns_per_model_part (configs.py
    # @4f9e9a47d l. 181, list[list[str]]) is none: the planner neither reads nor writes it there
    # (trainers/torchtitan03.py NOT_ONE_WORD, launch_text), so a split only per-stage lists spell would be ranked by
    # fit and refused by its export. Keyed on runs.pipeline_stages_by_count_only (option: listed only there).
    (97, StartupRule(
        "TORCHTITAN03_STAGE_LISTS", ANY_STACK,
        "the launch spells the pipeline split only as layers per stage: pp x vpp stages that no "
        "pipeline_parallel_layers_per_stage gives need module_fqns_per_model_part, which a run_train.sh command line "
        "cannot carry",
        "pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/config/configs.py l. 181 (module_fqns_per_model_part: "
        "list[list[str]]), distributed/pipeline_parallel.py generate_llm_fqn_per_model_part; planner/trainers/"
        "torchtitan03.py NOT_ONE_WORD; stack_db torchtitan-0.3 runs.pipeline_stages_by_count_only",
        "use a vpp whose stages layers_per_stage spells (ceil(units / ceil(units / (pp x vpp))) = pp x vpp), the "
        "schedule's default vpp, or --stack torchtitan (main's TOML writes the stage lists)",
        _tt03_stage_lists, option="pipeline_stages_by_count_only")),
    # MEGATRON_DETERMINISTIC_USE_FLASH_ATTN (code 98, issue 22 detmore): Megatron-LM's validate_args under
    #   --deterministic-mode asserted `not args.use_flash_attn` ('Flash attention can not be used in deterministic
    #   mode.') from the commit that added the mode, ac08742c96 (2024-05-04, arguments.py l. 528-530 there), to
    #   3ab71eeb3e (2026-07-08), which moved the checks to training/determinism.py and dropped it (its parent's
    #   arguments.py l. 1508-1510; @d98e8a64 determinism.py l. 150-152: 'intentionally NOT rejected'). At d98e8a64
    #   --use-flash-attn (arguments.py l. 2910) is read by nothing else. The job's use_flash_attn (the Megatron reader's
    #   --use-flash-attn), dated by the stack's runs.deterministic_refuses since / until: a job is refused only where
    #   its trainer_date falls in that range (plan._deterministic_switches drops the entry elsewhere)
    (98, StartupRule(
        "MEGATRON_DETERMINISTIC_USE_FLASH_ATTN", "megatron",
        "deterministic_mode refuses --use-flash-attn (Megatron-LM from ac08742c96, 2024-05-04, to 3ab71eeb3e, "
        "2026-07-08: the job's trainer_date in that range)",
        "NVIDIA/Megatron-LM megatron/training/arguments.py validate_args: `assert not args.use_flash_attn, 'Flash "
        "attention can not be used in deterministic mode.'` under args.deterministic_mode, added by ac08742c96 "
        "(2024-05-04, l. 528-530 there), removed by 3ab71eeb3e (2026-07-08; its parent's l. 1508-1510)",
        "drop --use-flash-attn (use_flash_attn: false: at Megatron-Core models it picks no kernel), or leave "
        "deterministic_mode out",
        _deterministic_setting("use_flash_attn"), model_level=True, option="deterministic_refuses:use_flash_attn")),
    # MEGATRON_DETERMINISTIC_MOE (code 99, issue 22 detmore): validate_args asserted `args.num_experts is None`
    #   ('MoEs are currently not deterministic.') under --deterministic-mode from 2ea54d6a37 (2024-07-25, ADLR/
    #   megatron-lm!1752, arguments.py l. 566 there) until 8e1adfdc5b (2024-08-02, ADLR/megatron-lm!1864 'MoE related
    #   bug-fixed for release of mcore-0.8', which removed it): an MoE model (model.moe) beside the job's
    #   deterministic_mode, where the job's trainer_date falls in that range (runs.deterministic_refuses since / until)
    (99, StartupRule(
        "MEGATRON_DETERMINISTIC_MOE", "megatron",
        "deterministic_mode refuses an MoE model (--num-experts; Megatron-LM from 2ea54d6a37, 2024-07-25, to "
        "8e1adfdc5b, 2024-08-02: the job's trainer_date in that range)",
        "NVIDIA/Megatron-LM megatron/training/arguments.py validate_args: `assert args.num_experts is None, 'MoEs are "
        "currently not deterministic.'` under args.deterministic_mode, added by 2ea54d6a37 (2024-07-25, "
        "ADLR/megatron-lm!1752; l. 566 there, l. 563 at 8e1adfdc5b's parent), removed by 8e1adfdc5b (2024-08-02, "
        "ADLR/megatron-lm!1864)",
        "leave deterministic_mode out, or run a Megatron-LM from 2024-08-02 on (trainer_date)",
        _deterministic_moe, model_level=True, option="deterministic_refuses:moe")),
    # MEGATRON_DETERMINISTIC_NCCL_ALGO (code 103, issue 22 detmuon): Megatron-LM @d98e8a64's apply_determinism_env
    #   (training/determinism.py l. 87-93, from validate_args l. 1708-1711 under --deterministic-mode) asserts each
    #   comma-separated token of a launcher-set NCCL_ALGO among ACCEPTED_NCCL_ALGO_TOKENS (l. 48: Ring, CollnetDirect,
    #   CollnetChain, ^NVLS; Tree not, l. 45-47), added by 3ab71eeb3e (2026-07-08): the job's nccl_algo (a set one:
    #   unset, it sets Ring, runs.deterministic_nccl_algo), dated by runs.deterministic_refuses nccl_algo_tokens
    (103, StartupRule(
        "MEGATRON_DETERMINISTIC_NCCL_ALGO", "megatron",
        "deterministic_mode refuses an NCCL_ALGO token outside Ring, CollnetDirect, CollnetChain, ^NVLS (Tree among "
        "them; Megatron-LM from 3ab71eeb3e, 2026-07-08)",
        f"{MEGATRON_COMMIT} megatron/training/determinism.py l. 48 ACCEPTED_NCCL_ALGO_TOKENS, apply_determinism_env "
        "l. 87-93 (AssertionError 'NCCL_ALGO=...: each token must be in [...]'), called by apply_determinism_to_args "
        "l. 155, from arguments.py validate_args l. 1708-1711; added by 3ab71eeb3e (2026-07-08)",
        "give nccl_algo (NCCL_ALGO) as tokens among Ring, CollnetDirect, CollnetChain, ^NVLS, or leave it out "
        "(Megatron-LM then sets Ring), or leave deterministic_mode out",
        _deterministic_setting("nccl_algo_tokens"), model_level=True, option="deterministic_refuses:nccl_algo_tokens")),
    # MEGATRON_DETERMINISTIC_NCCL_CHOICE (code 104, issue 22 detmuon): Megatron-LM's validate_args under
    #   --deterministic-mode asserted os.getenv('NCCL_ALGO') one of all_reduce_choices (Tree, Ring, CollnetDirect,
    #   CollnetChain, ^NVLS: the whole value) from ac08742c96 (2024-05-04) to 3ab71eeb3e (2026-07-08; its parent
    #   465264b7dd arguments.py l. 1513-1515); Megatron-Bridge @dc805f5cf training/config.py l. 1463-1466 asserts the
    #   same (from f003cd8ca, 2025-10-27). The job's nccl_algo where set (unset is the launcher's environment, not
    #   read: not refused), dated by runs.deterministic_refuses nccl_algo_choice
    (104, StartupRule(
        "MEGATRON_DETERMINISTIC_NCCL_CHOICE", "megatron",
        "deterministic_mode refuses an NCCL_ALGO that is not exactly one of Tree, Ring, CollnetDirect, CollnetChain, "
        "^NVLS (Megatron-LM from ac08742c96, 2024-05-04, to 3ab71eeb3e, 2026-07-08; Megatron-Bridge)",
        "NVIDIA/Megatron-LM megatron/training/arguments.py validate_args: `assert os.getenv('NCCL_ALGO', -1) != -1 and "
        "os.getenv('NCCL_ALGO') in all_reduce_choices` under args.deterministic_mode, added by ac08742c96 "
        "(2024-05-04), removed by 3ab71eeb3e (2026-07-08; its parent 465264b7dd l. 1513-1515); NVIDIA-NeMo/"
        "Megatron-Bridge @dc805f5cf src/megatron/bridge/training/config.py l. 1463-1466 (f003cd8ca, 2025-10-27)",
        "give nccl_algo (NCCL_ALGO) as one of Tree, Ring, CollnetDirect, CollnetChain, ^NVLS, or leave "
        "deterministic_mode out",
        _deterministic_setting("nccl_algo_choice"), model_level=True, option="deterministic_refuses:nccl_algo_choice")),
    # MEGATRON_FSDP_V2_LAYOUT (code 100, issue 21 memleft): Megatron-FSDP v2 (the job's mfsdp_v2, --megatron-fsdp-version
    # 2) is built by FullyShardedDataParallelV2, whose _validate_config (megatron/core/distributed/fsdp/
    # mcore_fsdp_adapter.py @d98e8a64 l. 603-705) raises ValueError at model build for tensor / pipeline / context
    # parallel sizes above 1 (l. 627-648), any data_parallel_sharding_strategy but optim_grads_params (l. 666-668) and
    # fp8 / fp4 (l. 676-677);
    # arguments.py l. 1124-1126 asserts it without --use-distributed-optimizer, and FullyShardedOptimizer._validate_config
    # (megatron/core/optimizer/fully_sharded_optimizer.py) wants exactly one model chunk: a plan in another sharding mode
    # (DDP, the distributed optimizer, another strategy) or layout does not run v2. Keyed on the job's setting laid on
    # the stack (defaults.mfsdp_v2); listed only where a mode states runs.sharding mfsdp_v2 (option: plan.resolve refuses
    # the job's mfsdp_v2 on any other stack, so it can never fire there).
    (100, StartupRule(
        "MEGATRON_FSDP_V2_LAYOUT", ANY_STACK,
        "Megatron-FSDP v2 (mfsdp_v2) runs only the optim_grads_params strategy at tp, pp and cp 1 with one model chunk, "
        "in bf16",
        f"{MEGATRON_COMMIT} megatron/core/distributed/fsdp/mcore_fsdp_adapter.py FullyShardedDataParallelV2."
        "_validate_config l. 627-648 ('MFSDP v2 does not currently support: tensor_model_parallel_size, "
        "pipeline_model_parallel_size, context_parallel_size'), l. 666-668 ('MFSDP v2 requires "
        "data_parallel_sharding_strategy='optim_grads_params''), l. 676-677 ('MFSDP v2 does not currently support FP8 or "
        "FP4.'); megatron/training/arguments.py l. 1124-1126 (not with "
        "--use-distributed-optimizer); megatron/core/optimizer/fully_sharded_optimizer.py _validate_config (exactly one "
        "model chunk); stack_db <stack> runs.sharding mfsdp_v2",
        "use sharding megatron_fsdp_optim_grads_params at tp, pp and cp 1 in bf16, or leave mfsdp_v2 out (Megatron-FSDP "
        "v1)",
        _mfsdp_v2_layout, option="sharding@mfsdp_v2")),
    # MEGATRON_MLA_FUSION_TP_OVERLAP (code 101, issue 22 mlatpo): FusedMLASelfAttention (--mla-down-proj-fusion, NVIDIA/
    #   Megatron-LM @d98e8a64 multi_latent_attention.py l. 1241-1340, added by 8fd390d1fb, 2026-03-11) builds its fused
    #   down projection as a TELayerNormColumnParallelLinear (gpt_layer_specs.py l. 256-272) with tp_comm_buffer_name
    #   'qkv_down_proj' (l. 1292-1310); unlike TELinear (transformer_engine.py l. 1176-1186, which turns the overlap off
    #   for MLA's other names: plan.tp_overlap) that class passes any name to TE with the overlap on (l. 1456-1487:
    #   ub_overlap_ag, ub_name), and TE registers userbuffers only for qkv / proj / fc1 / fc2's GEMMs
    #   (NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/module/base.py initialize_ub l. 310-336,
    #   539-545: a user --tp-comm-overlap-cfg only configures those names), so the first forward's
    #   get_ub('qkv_down_proj_fprop') (layernorm_linear.py l. 200-205) raises (base.py get_ub l. 550-560). A variant
    #   rule (VARIANT_RULES): fit ranks no overlapped row with the fusion
    (101, StartupRule(
        "MEGATRON_MLA_FUSION_TP_OVERLAP", ANY_STACK,
        "MLA's fused down projection (mla_down_proj_fusion) with TP communication overlap: its userbuffer "
        "'qkv_down_proj' is not one Transformer Engine registers",
        "NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/multi_latent_attention.py FusedMLASelfAttention l. "
        "1292-1310 (linear_qkv_down_proj, tp_comm_buffer_name 'qkv_down_proj', a TELayerNormColumnParallelLinear: "
        "models/gpt/gpt_layer_specs.py l. 256-272), megatron/core/extensions/transformer_engine.py l. 1456-1487 "
        "(ub_overlap_ag, ub_name with tp_comm_overlap); NVIDIA/TransformerEngine @4329ff84 transformer_engine/pytorch/"
        "module/base.py initialize_ub l. 310-336, 539-545 (only qkv, proj, fc1, fc2 registered), get_ub l. 550-560 "
        "(KeyError 'UB for qkv_down_proj_fprop ... is not registered'), module/layernorm_linear.py l. 200-205",
        "drop --tp-comm-overlap (an MLA model runs without it anyway: Megatron-LM turns it off at the first MLA layer), "
        "or leave mla_down_proj_fusion out",
        _mla_fusion_tp_overlap, option="mla_down_proj_fusion")),
    # MEGATRON_RECOMPUTE_LAYERS_VPP (code 102, issue 22 critstage3): the block method's window is a model chunk's.
    #   recompute.py @d98e8a64 l. 167-181 checkpoints layer_idx < recompute_num_layers over the chunk's own
    #   num_layers_per_pipeline_rank = len(self.layers) (transformer_block.py l. 334: each model chunk builds its own
    #   block), so a GPU re-runs n x vpp layers of equal chunks (the Megatron and Bridge readers' recompute_layers
    #   n x vpp), and a job value that vpp does not divide is no --recompute-num-layers: Megatron would run another
    #   count (export refuses it: trainers/export.py). Megatron refuses no positive n (transformer_config.py
    #   l. 1919-1925 only wants one); like TORCHTITAN03_STAGE_LISTS a plan the trainer cannot be told, not ranked
    (102, StartupRule(
        "MEGATRON_RECOMPUTE_LAYERS_VPP", "megatron",
        "recompute_layers (a GPU's layers) not a multiple of vpp: Megatron's --recompute-num-layers n re-runs the first "
        "n layers of each model chunk (n x vpp a GPU)",
        f"{MEGATRON_COMMIT} megatron/core/recompute.py l. 167-181 (block: layer_idx < recompute_num_layers over "
        "num_layers_per_pipeline_rank), megatron/core/transformer/transformer_block.py l. 334 "
        "(num_layers_per_pipeline_rank = len(self.layers), a model chunk's)",
        "use a vpp that divides recompute_layers, or a recompute_layers that is a multiple of vpp",
        _megatron_recompute_layers_vpp)),
    # TORCHTITAN_CP_LOAD_BALANCER_NAME (code 105, issue 22 cpbal; fuzz13 seed 104): torchtitan's
    #   parallelism.context_parallel_load_balancer (`str | None`, default "headtail": main @e347b1e5e config/
    #   job_config.py l. 431, 0.3.0 config/configs.py l. 235) is passed as it is to cp_shard, which builds headtail or ptrr
    #   (None, or any falsy value, builds none) and raises ValueError ("Invalid load_balancer_type '...'. Must be one of:
    #   'headtail', 'ptrr', or None") for any other name: main distributed/context_parallel.py l. 184-211 (the raise
    #   l. 207-211), 0.3.0 distributed/context_parallel/api.py l. 218-264 (l. 260-264). cp_shard runs only where CP is
    #   enabled (main train.py l. 469-477, 0.3.0 trainer.py l. 750-759: prepare_context_parallel_input under
    #   parallel_dims.cp_enabled), so the name is never read at cp 1 and stops the first step at cp > 1. Which
    #   spellings are such a name: on main's TOML any string but headtail / ptrr, the string "None" too (TOML has no null;
    #   config/manager.py _dict_to_dataclass passes the file's string as it is); on 0.3's command line any word but
    #   those and None (tyro parses the word None as None for `str | None`). Both readers keep the name as the job's
    #   cp_load_balancer (trainers/cp_balancer.load_balancer), which plan.apply_startup_switches lays on the stack's
    #   defaults; a job field set by hand reads alike. Listed where the stack has the option (runs.cp_load_balancers:
    #   both torchtitan stacks), as TORCHTITAN_CP_PTRR_MASK
    (105, StartupRule(
        "TORCHTITAN_CP_LOAD_BALANCER_NAME", "torchtitan",
        "context parallelism with a CP load balancer torch's cp_shard does not build (it builds headtail, ptrr or "
        "None)",
        f"{TORCHTITAN_COMMIT} torchtitan/distributed/context_parallel.py cp_shard l. 184-211 (ValueError 'Invalid "
        "load_balancer_type ... Must be one of: 'headtail', 'ptrr', or None', l. 207-211), called from train.py "
        "l. 469-477 where cp is enabled; torchtitan 0.3.0 (release/0.3 @4f9e9a47d): torchtitan/distributed/"
        "context_parallel/api.py cp_shard l. 218-264 (l. 260-264), trainer.py l. 750-759",
        "name headtail (the default) or ptrr (context_parallel_load_balancer), or None for no load balancing "
        "(--no-cp-load-balance; main's TOML has no None: torchtitan's command line "
        "--parallelism.context_parallel_load_balancer None), or use cp 1",
        _tt_cp_load_balancer_name, detail=_tt_cp_load_balancer_detail, option="cp_load_balancers")),
    # MEGATRON_TP_OVERLAP_QUANTIZER (code 106, issue 22 ubfp8): with --tp-comm-overlap each TE linear of qkv / proj /
    #   fc1 / fc2 fills its all-gather userbuffer through fill_userbuffers_buffer_for_all_gather (NVIDIA/
    #   TransformerEngine @4329ff84, TE 2.17.1, the release NVIDIA/Megatron-LM @d98e8a64 pyproject.toml l. 246 pins:
    #   transformer_engine/pytorch/module/base.py l. 573-720; called in module/linear.py l. 364-370, l. 908, l. 1116
    #   for the input, dgrad and wgrad all-gathers), whose only quantized branches are Float8Quantizer /
    #   Float8CurrentScalingQuantizer (delayed, tensorwise: l. 623-644) and MXFP8Quantizer (l. 646-717); any other
    #   quantizer raises ValueError 'Unsupported quantizer for Userbuffers' (l. 720) at the first forward: the
    #   blockwise recipe's Float8BlockQuantizer and nvfp4's NVFP4Quantizer. (nvfp4 under Megatron: args.fp8 is None,
    #   so initialize.py l. 230-233 registers only the NONE set, and the module's get_ub(name, fp8=True) raises
    #   KeyError first: base.py get_ub l. 550-560.) Never supported: TE v2.3, the first release with Float8BlockScaling
    #   (a8f0fe03b, 2025-04-10), raised NotImplementedError 'Comm+GEMM overlap is only supported with FP8 delayed
    #   scaling or per-tensor current scaling' (module/linear.py l. 149-155 there; layernorm_linear.py l. 164-170,
    #   layernorm_mlp.py l. 209-215 alike). MXFP8 by release: that v2.3 check (recipe.float8_per_tensor_scaling(),
    #   DelayedScaling or Float8CurrentScaling only; v2.0-v2.1 DelayedScaling only) refuses MXFP8BlockScaling too, in
    #   every TE 2.x before 2.4; ce0b46c4d (2025-05-07, first tagged v2.4: 'MXFP8 support in Userbuffers' #1711)
    #   replaced it with fill_userbuffers_buffer_for_all_gather and its MXFP8 branch (v2.4 module/base.py l. 424-557,
    #   the branch l. 487, the raise l. 557). So mxfp8 with the overlap is refused where the run's Transformer Engine
    #   (the job's te_version, else the stack's memory.te_version: te_version.run_te_version, as memory.py [ub] reads
    #   it) is older than 2.4 (te_version.TE_UB_MXFP8). Blockwise and nvfp4 have no branch in any release read: v2.18
    #   base.py l. 730 and main d0067d0d (2026-08-22) l. 754 raise the same; no newer release to date them from.
    #   Tensorwise: v2.0-v2.1's check is delayed-only (linear.py l. 120-126 at v2.0, l. 130-136 at v2.1), but those
    #   releases have no Float8CurrentScaling at all: a recipe the release lacks is MEGATRON_TE_RECIPE_RELEASE's
    #   (code 107), so this rule tests only recipes the release builds (te_version.TE_UB_RECIPE_FIRST, ub_refuses). A
    #   variant rule (VARIANT_RULES: tpo and the fp8 recipe are variant fields): fit ranks no overlapped blockwise /
    #   nvfp4 row, nor an mxfp8 one on a te_version before 2.4
    (106, StartupRule(
        "MEGATRON_TP_OVERLAP_QUANTIZER", "megatron",
        "TP communication overlap (--tp-comm-overlap) with the blockwise fp8 recipe or nvfp4, or with mxfp8 on a "
        "Transformer Engine before 2.4: Transformer Engine's userbuffers all-gather only delayed / tensorwise fp8 and "
        "(from 2.4) mxfp8 tensors",
        "NVIDIA/TransformerEngine @4329ff84 (TE 2.17.1, pinned by NVIDIA/Megatron-LM @d98e8a64 pyproject.toml l. 246) "
        "transformer_engine/pytorch/module/base.py fill_userbuffers_buffer_for_all_gather l. 573-720 (ValueError "
        "'Unsupported quantizer for Userbuffers', l. 720: no Float8BlockQuantizer or NVFP4Quantizer branch; the same "
        "at v2.18 l. 730 and main d0067d0d l. 754), called in module/linear.py l. 364-370; nvfp4: get_ub l. 550-560 "
        "(Megatron registers only the NONE set under --fp4-format, args.fp8 None: megatron/training/initialize.py "
        "l. 230-233); TE v2.3 module/linear.py l. 149-155 (NotImplementedError: delayed or per-tensor current scaling "
        "only, mxfp8 included); the MXFP8 branch since ce0b46c4d (v2.4, #1711: base.py l. 487)",
        "turn the TP overlap off (--no-tp-comm-overlap, drop --tp-comm-overlap), or use fp8 recipe tensorwise "
        "(Transformer Engine 2.2 or later) / delayed (mxfp8 on Blackwell with Transformer Engine 2.4 or later: "
        "te_version)",
        _tp_overlap_quantizer, detail=_tp_overlap_quantizer_detail)),
    # MEGATRON_TE_RECIPE_RELEASE (code 107): the job's fp8 recipe (or nvfp4) on a Transformer Engine release that does
    #   not build it (te_version.TE_RECIPE_FIRST; the release as rule 106 and memory.py [ub] read it, run_te_version).
    #   TE's recipe classes by tag (transformer_engine/common/recipe/__init__.py): DelayedScaling in every release read
    #   (v1.13 l. 54), MXFP8BlockScaling from v2.0 (l. 165), Float8CurrentScaling from v2.2 (l. 187, 77fa1e596 #1471),
    #   Float8BlockScaling from v2.3 (l. 298, a8f0fe03b #1559), NVFP4BlockScaling from v2.8 (l. 381, 3f5b47549 #2177).
    #   Megatron-LM @d98e8a64 megatron/core/fp8_utils.py get_fp8_recipe (l. 752-810) builds only delayed below TE
    #   2.1.0 (assert l. 798-804: so mxfp8 from 2.1, though TE 2.0 has the class), tensorwise from 2.2.0.dev0
    #   (l. 777), blockwise from 2.3.0.dev0 (l. 781), else ValueError (l. 792-797); fp4_utils.py get_fp4_recipe
    #   (l. 219-245) raises ValueError below 2.7.0.dev0 and where NVFP4BlockScaling is missing (l. 223-232: 2.7). A
    #   different refusal from 106 (the recipe itself does not exist there, with or without TP overlap). A variant rule
    #   (VARIANT_RULES: the fp8 recipe is a variant field): fit ranks no row of a recipe the release lacks
    (107, StartupRule(
        "MEGATRON_TE_RECIPE_RELEASE", "megatron",
        "the fp8 recipe (or nvfp4) on a Transformer Engine release that does not build it: tensorwise before 2.2, "
        "mxfp8 before 2.1, blockwise before 2.3, nvfp4 before 2.8 (the job's te_version, else the stack's)",
        "NVIDIA/TransformerEngine transformer_engine/common/recipe/__init__.py: MXFP8BlockScaling from v2.0 (l. 165), "
        "Float8CurrentScaling from v2.2 (l. 187), Float8BlockScaling from v2.3 (l. 298), NVFP4BlockScaling from v2.8 "
        "(l. 381; absent at v2.7); NVIDIA/Megatron-LM @d98e8a64 megatron/core/fp8_utils.py get_fp8_recipe l. 770-810 "
        "(below TE 2.1.0 delayed only, assert l. 798-804; tensorwise >= 2.2.0.dev0 l. 777, blockwise >= 2.3.0.dev0 "
        "l. 781, else ValueError l. 792-797), megatron/core/fp4_utils.py get_fp4_recipe l. 219-245 (ValueError below "
        "2.7.0.dev0, AttributeError -> ValueError l. 223-232)",
        "use a recipe the release builds (delayed on every release), or give the Transformer Engine release the run "
        "used (te_version; tensorwise 2.2, mxfp8 2.1, blockwise 2.3, nvfp4 2.8 or later)",
        _te_recipe_release, detail=_te_recipe_release_detail,
        subject="the recipe on that Transformer Engine release")),  # the recipe and release alone, any degrees alike
    # MEGATRON_PARAM_GATHER (code 108, issue dpsplit2): Megatron-LM @d98e8a64 validate_args (arguments.py l. 1024-1029)
    #   asserts, where --overlap-param-gather is given, --use-distributed-optimizer, --use-megatron-fsdp or --optimizer
    #   dist_muon ('--overlap-param-gather only supported with distributed optimizer, megatron fsdp, or dist_muon') and
    #   --overlap-grad-reduce ('Must use --overlap-param-gather with --overlap-grad-reduce'), before the Muon conversion
    #   of l. 1724-1737 (so --optimizer muon --use-distributed-optimizer passes). Keyed on the job's
    #   dp_param_gather_overlap true (the Megatron reader's --overlap-param-gather where it breaks either assert; a job's
    #   field), laid on the stack's defaults.dp_param_gather_overlap_set by plan.apply_startup_switches: refused where the
    #   plan's DP overlap (plan.dpo, --overlap-grad-reduce) is off or its sharding mode is ddp or torch_fsdp2 (neither
    #   the distributed optimizer nor Megatron-FSDP; dist_muon reads as distributed_optimizer). The megatron set
    #   (megatron, megatron-bridge): the Bridge reader never states the flag so, and its job field true with the DP
    #   overlap off was refused on every stack before the rule (plan._dp_param_gather_overlap keeps that check elsewhere)
    (108, StartupRule(
        "MEGATRON_PARAM_GATHER", "megatron",
        "the parameter all-gather overlapped (dp_param_gather_overlap, --overlap-param-gather) without the DP overlap "
        "(--overlap-grad-reduce) or under a sharding mode with no sharded optimizer (ddp, torch_fsdp2)",
        f"{MEGATRON_COMMIT} megatron/training/arguments.py validate_args l. 1024-1029 (AssertionError '--overlap-param-"
        "gather only supported with distributed optimizer, megatron fsdp, or dist_muon', 'Must use --overlap-param-gather "
        "with --overlap-grad-reduce')",
        "add --overlap-grad-reduce (dp_comm_overlap: true) and the distributed optimizer or Megatron-FSDP (sharding zero1, "
        "zero2 or fsdp with a megatron_fsdp mode), or drop --overlap-param-gather (dp_param_gather_overlap)",
        _param_gather)),
)

assert FIRST_CODE + len(RULES) <= LATER_FIRST_CODE, "RULES grew into LATER_FIRST_CODE: move it up"
assert LATER_FIRST_CODE + len(LATER_RULES) <= min(c for c, _ in FIXED_CODE_RULES), \
    "LATER_RULES grew into FIXED_CODE_RULES' codes: move the fixed rules up"
CODES = {**{r.key: FIRST_CODE + i for i, r in enumerate(RULES)},
         **{r.key: LATER_FIRST_CODE + i for i, r in enumerate(LATER_RULES)},
         **{r.key: c for c, r in FIXED_CODE_RULES}}
BY_CODE = {CODES[r.key]: r for r in RULES + LATER_RULES + tuple(r for _, r in FIXED_CODE_RULES)}
# rules_for and the tests read them all here, in code order
RULES = RULES + LATER_RULES + tuple(r for _, r in sorted(FIXED_CODE_RULES, key=lambda cr: cr[0]))


def stack_order_ok(stack, order, tp, cp, pp, dp) -> np.ndarray:
    """Where the rank order (codes) is one the stack builds (stack_db runs.rank_orders), up to
    where its size-1 axes sit (the strides of every axis of size > 1 are the same)."""
    from .comm import order_code, strides_by_code

    order = np.asarray(order)
    if stack is None or stack.runs is None:
        return np.ones(np.broadcast(order, tp).shape, dtype=bool)
    if _uniform_order(order) in {order_code(ro.order) for ro in stack.runs.rank_orders}:
        # one order for every candidate, one the stack lists: its strides are that order's own,
        # on every axis (the loop below finds `same` everywhere; the search's base rows, choose_modes)
        return np.ones(np.broadcast(order, tp, cp, pp, dp).shape, dtype=bool)
    sizes = {"tp": tp, "cp": cp, "pp": pp, "dp": dp}
    st = strides_by_code(order, **sizes)
    ok = np.zeros(np.broadcast(order, tp, cp, pp, dp).shape, dtype=bool)
    for ro in stack.runs.rank_orders:
        sr = strides_by_code(np.full(np.shape(order), order_code(ro.order)), **sizes)
        same = np.ones_like(ok)
        for ax, size in sizes.items():
            same &= (np.asarray(size) <= 1) | (st[ax] == sr[ax])
        ok |= same
    return ok


def built_order(stack, order: str, tp: int, cp: int, pp: int, dp: int):
    """The stack's own name (stack_db runs.rank_orders) of the rank order `order` builds for
    this mesh (orders equal up to where size-1 axes sit are one order); None if it builds none."""
    from .comm import order_code

    if stack is None or stack.runs is None:
        return order
    code = order_code(order)
    for ro in stack.runs.rank_orders:
        one = stack.model_copy(update={"runs": stack.runs.model_copy(update={"rank_orders": [ro]})})
        if bool(stack_order_ok(one, code, tp, cp, pp, dp)):
            return ro.order
    return None


def megatron_checks(stack) -> bool:
    """Whether the stack's trainer runs Megatron-LM's start-up checks (stack_db runs.startup_rules
    megatron: Megatron-LM and the Megatron-Bridge runs priced on it)."""
    return stack is not None and stack.runs is not None and stack.runs.startup_rules == "megatron"


def order_ok(stack, order, tp, cp, pp, dp, ep=1, etp=0) -> np.ndarray:
    """Where the rank order (codes, broadcast against the mesh arrays) is one the stack builds
    (stack_db runs.rank_orders, up to size-1 axes) and its trainer accepts for the mesh (the
    order-dependent start-up rule MEGATRON_TP_PP_DP_MAPPING): the search's rank-order axis."""
    from types import SimpleNamespace

    ok = stack_order_ok(stack, order, tp, cp, pp, dp)
    if megatron_checks(stack):
        shape = ok.shape
        b = lambda x: np.broadcast_to(np.asarray(x, dtype=np.int64), shape)  # noqa: E731
        p = SimpleNamespace(order=b(order), tp=b(tp), cp=b(cp), pp=b(pp), dp=b(dp), ep=b(ep), etp=b(etp))
        rule = next(r for r in RULES if r.key == "MEGATRON_TP_PP_DP_MAPPING")
        ok &= ~rule.broken(None, stack, p)
    return ok


# the start-up rules that read the plan's MoE dispatcher (the stack's defaults.moe_dispatcher, laid by
# plan.apply_moe_dispatcher), and the dispatchers they restrict: fit's dispatcher search (search.py
# dispatcher_settings) tries such a dispatcher only where dispatcher_broken is false, and builds its
# space on one they never restrict
DISPATCHER_RULES = {"MEGATRON_DEEPEP_GROUP": ("deepep",), "TORCHTITAN_DEEPEP_EP": ("deepep",),
                    "TORCHTITAN_DEEPEP_ETP": ("deepep",), "TORCHTITAN_DEEPEP_GROUP": ("deepep",),
                    "TORCHTITAN_DEEPEP_TP": ("deepep",), "MEGATRON_DEEPEP_GPU": ("deepep",),
                    "TORCHTITAN_DEEPEP_GPU": ("deepep",), "DEEPSEEK_DEEPEP_GPU": ("deepep",),
                    "MEGATRON_HYBRIDEP_GPU": ("hybridep",), "MEGATRON_HYBRIDEP_DOMAIN": ("hybridep",),
                    "MEGATRON_HYBRIDEP_EXPERTS": ("hybridep",), "MEGATRON_HYBRIDEP_TOKENS": ("hybridep",),
                    "TORCHTITAN_HYBRIDEP": ("hybridep",),
                    # every dispatcher a code may leave out (each code builds alltoall, the stack's default)
                    "TORCHTITAN_MODEL_DISPATCHER": ("allgather", "deepep", "deepep_ll", "hybridep")}


def dispatcher_broken(model, stack, plan, cluster: Cluster | None) -> np.ndarray:
    """Where one of the stack's start-up rules that read the dispatcher (DISPATCHER_RULES) breaks the
    plan under the stack's dispatcher (stack.defaults.moe_dispatcher) on the cluster."""
    return _broken_of(model, stack, plan, DISPATCHER_RULES, cluster)


def _broken_of(model, stack, plan, keys, cluster: Cluster | None) -> np.ndarray:
    """Where one of the stack's start-up rules named in `keys` breaks the plan."""
    bad = np.zeros(np.shape(plan.tp), dtype=bool)
    for _, r in rules_for(stack):
        if r.key in keys:
            bad = bad | r.check(model, stack, plan, cluster)
    return bad


# the start-up rules that read a stack variant's fields (space.VARIANT_FIELDS: compile, the fp8 recipe, the
# experts' grouped GEMMs): fit tries a variant other than its space's first only where they pass
# (space.Space.variant_ok); the first variant's are the base rows' own, which plan.rule_codes checks.
# COMPILE_RULES: those of them that read compile, where fit tries compile off (space.uncompiled_choices)
COMPILE_RULES = ("TORCHTITAN_MX_TP_COMPILE",)
VARIANT_RULES = COMPILE_RULES + ("TORCHTITAN_FP8_GROUPED_MM_PP_CP", "TORCHTITAN_MODEL_ASYNC_TP", "MEGATRON_MXFP8_ROWS",
                                 "MEGATRON_FP8_WIDTHS", "MEGATRON_DETERMINISTIC_TP_OVERLAP",
                                 "MEGATRON_MLA_FUSION_TP_OVERLAP", "MEGATRON_TP_OVERLAP_QUANTIZER",
                                 "MEGATRON_TE_RECIPE_RELEASE")


# the VARIANT_RULES that refuse the plan's TP overlap (tpo at tp > 1) from the job's and the stack's settings, the
# model's code and the fp8 recipe alone, so every overlapped plan of a recipe alike: fit CONFIG's note names the one
# that leaves the search no overlapped row (cli/fit_config._overlap_fixed)
OVERLAP_RULES = ("TORCHTITAN_MODEL_ASYNC_TP", "MEGATRON_DETERMINISTIC_TP_OVERLAP", "MEGATRON_MLA_FUSION_TP_OVERLAP",
                 "MEGATRON_TP_OVERLAP_QUANTIZER")


def variant_broken(model, stack, plan, cluster: Cluster | None) -> np.ndarray:
    """Where one of the stack's VARIANT_RULES breaks the plan (its variant fields set)."""
    return _broken_of(model, stack, plan, VARIANT_RULES, cluster)


def compile_broken(model, stack, plan, cluster: Cluster | None) -> np.ndarray:
    """Where one of the stack's COMPILE_RULES breaks the plan (its variant fields set)."""
    return _broken_of(model, stack, plan, COMPILE_RULES, cluster)


# the start-up rules that apply at one precision only (the job's, every candidate alike), and it: they read the
# micro-batch size only there (reads_micro_batch)
PRECISION_RULES = {"MEGATRON_NVFP4_TOKENS": "nvfp4", "MEGATRON_FP8_ROWS": "fp8", "MEGATRON_MXFP8_ROWS": "fp8"}


# the rules of the rows form (PRECISION_RULES: micro_batch x seq / cp (/ tp under SP) a multiple of a block): a row
# that passes at micro-batch 1 passes at every micro-batch (a multiple of a multiple), so on the rows that pass at 1
# (rows_rules_free) the rule's verdict does not depend on the micro-batch (space.choose_modes keys them without it)
ROWS_RULES = tuple(PRECISION_RULES)


def reads_micro_batch(stack, precisions=("bf16",), rows_rules=True) -> bool:
    """Whether one of the stack's start-up rules reads the micro-batch size (StartupRule.reads_mbs) under
    the stack's dispatcher (a rule of DISPATCHER_RULES applies only where the stack runs a dispatcher it
    restricts) and the plans' precisions (names; a rule of PRECISION_RULES applies at its precision only):
    MEGATRON_HYBRIDEP_TOKENS with hybridep, MEGATRON_NVFP4_TOKENS with nvfp4, MEGATRON_FP8_ROWS and
    MEGATRON_MXFP8_ROWS with fp8; rows_rules False: whether one other than ROWS_RULES does."""
    disp = stack.defaults.moe_dispatcher if stack is not None else None
    return any(r.reads_mbs and (r.key not in DISPATCHER_RULES or disp in DISPATCHER_RULES[r.key])
               and (r.key not in PRECISION_RULES or PRECISION_RULES[r.key] in precisions)
               and (rows_rules or r.key not in ROWS_RULES)
               for _, r in rules_for(stack))


def rows_rules_free(stack, plan) -> np.ndarray:
    """The rows of `plan` that no rule of ROWS_RULES of the stack breaks at micro-batch 1, so at none (ROWS_RULES)."""
    at_one = _at_micro_batch_one(plan)
    bad = np.zeros(np.shape(plan.tp), dtype=bool)
    for _, r in rules_for(stack):
        if r.key in ROWS_RULES:
            bad = bad | r.check(None, stack, at_one, None)
    return ~bad


def _at_micro_batch_one(plan):
    """The fields the ROWS_RULES read, at micro-batch 1 (a KeyedPlan: reading another field is an error)."""
    from .terms import KeyedPlan

    n = np.shape(plan.tp)
    return KeyedPlan({f: np.broadcast_to(np.asarray(getattr(plan, f)), n) for f in ("precision", "f8r", "sp", "tp", "cp", "seq")}
                     | {"mbs": np.ones(n, dtype=np.int64)})


def rules_for(stack) -> list[tuple[int, StartupRule]]:
    """(code, rule) of the stack's start-up rule set (none for a stack that names none), less the absent ones
    (runs.startup_rules_absent), the checks of an option the stack does not have (StartupRule.option: its runs
    field unset or false) and those of dispatchers it does not build (DISPATCHER_RULES against runs.moe_dispatchers):
    a rule that can never fire on the stack is not listed there."""
    name = stack.runs.startup_rules if stack is not None and stack.runs is not None else None
    absent = {a.rule for a in stack.runs.startup_rules_absent} if name is not None else set()
    unknown = absent - {r.key for r in RULES if r.trainer == name}
    if unknown:
        raise ValueError(f"stack {stack.name}: runs.startup_rules_absent names {', '.join(sorted(unknown))}, not rules of "
                         f"the {name} set (planner/startup.py)")
    runs = stack.runs if stack is not None else None
    disps = runs.moe_dispatchers if runs is not None else None
    return [(CODES[r.key], r) for r in RULES
            if (r.trainer in (name, ANY_STACK)
                or (r.dispatcher is not None and stack is not None and (disps is None or r.dispatcher in disps)))
            and r.key not in absent and (r.option is None or _has_option(runs, r.option))
            and (r.key not in DISPATCHER_RULES or disps is None or bool(set(DISPATCHER_RULES[r.key]) & set(disps)))]


__all__ = ["ANY_STACK", "layer_kinds_assumed", "model_layer_features", "missing_layer_features", "model_layer_forms",
           "unbuilt_layer_forms", "layer_gaps", "stacks_building", "RULES", "CODES", "BY_CODE", "FIRST_CODE", "StartupRule", "Cluster", "cluster_of", "megatron_checks", "rules_for", "mode_is", "uses_tp_pp_dp_mapping",
           "model_code", "model_code_assumed", "model_code_compile_note",
           "end_weights", "stack_order_ok", "built_order", "order_ok", "mode_order_ok"]
