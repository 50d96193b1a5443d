#!/bin/bash
# NVIDIA's Llama 3.1 405B H100 BF16 preset (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# scripts/performance/configs/llama/llama31_workload_base_configs.py l. 192-200: 1,024 GPUs, TP 8, PP 8, CP 2,
# VP 8, global batch 512) as a run_recipe.py launch of the recipe it starts from (src/megatron/bridge/recipes/llama/
# llama3.py llama31_405b_pretrain_config l. 1103-1195: TP 8, PP 8, VP 2, CP 4, SP, account_for_* true, 131,072-token
# sequences, the distributed optimizer, TP overlap, bf16_mixed()), with the preset's settings as overrides and the
# 8,192-token sequences of the performance scripts. Written by hand for tests/test_bridge_launch.py and the README.
export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun --nproc_per_node=8 --nnodes=128 scripts/training/run_recipe.py \
    --recipe llama31_405b_pretrain_config \
    model.context_parallel_size=2 \
    model.virtual_pipeline_model_parallel_size=8 \
    model.seq_length=8192 \
    dataset.sequence_length=8192 \
    train.global_batch_size=512
