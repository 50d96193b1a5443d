#!/bin/bash
# Megatron-Bridge launch written by `planner export --format megatron-bridge`
# NVIDIA-NeMo/Megatron-Bridge @dc805f5cf: scripts/training/run_recipe.py --recipe (the recipe's ConfigContainer) with Hydra overrides of its dot paths (training/config.py, models/gpt_provider.py, training/mixed_precision.py, training/comm_overlap.py)
# hardware h100-sxm: 8 GPUs = 1 node(s) x 8
# CUDA_DEVICE_MAX_CONNECTIONS: Bridge's own rule for its launches (recipes/run_plugins.py PerfEnvPlugin._set_num_cuda_device_max_connections l. 570-595)
export CUDA_DEVICE_MAX_CONNECTIONS=1
    train.global_batch_size=2048 \
torchrun --nproc_per_node 8 --nnodes 1 scripts/training/run_recipe.py \
    --recipe llama3_8b_pretrain_config \
    model.tensor_model_parallel_size=4 \
    model.pipeline_model_parallel_size=1 \
    model.virtual_pipeline_model_parallel_size=null \
    model.context_parallel_size=1 \
    model.sequence_parallel=true \
    model.expert_model_parallel_size=1 \
    model.expert_tensor_parallel_size=4 \
    model.seq_length=8192 \
    dataset.sequence_length=8192 \
    train.micro_batch_size=1 \

    model.vocab_size=128256 \
    model.account_for_embedding_in_pipeline_split=false \
    model.account_for_loss_in_pipeline_split=false \
    model.recompute_granularity=null \
    model.recompute_method=null \
    model.recompute_num_layers=null \
    model.recompute_modules=null \
    ddp.use_distributed_optimizer=false \
    optimizer.use_distributed_optimizer=false \
    ddp.use_megatron_fsdp=false \
    dist.use_megatron_fsdp=false \
    dist.use_torch_fsdp2=false \
    ddp.data_parallel_sharding_strategy=no_shard \
    ddp.num_distributed_optimizer_instances=1 \
    optimizer.optimizer=adam \
    ddp.overlap_grad_reduce=true \
    ddp.overlap_param_gather=false \
    dist.use_tp_pp_dp_mapping=false \
    model.cross_entropy_loss_fusion=false \
    model.cross_entropy_fusion_impl=native \
    model.apply_rope_fusion=true \
    model.bias_activation_fusion=true \
    model.bias_dropout_fusion=true \
    model.gradient_accumulation_fusion=true \
    model.transformer_impl=transformer_engine \
    model.cuda_graph_impl=none \
    model.attention_backend=null \
    optimizer.use_precision_aware_optimizer=false \
    mixed_precision=bf16_mixed
