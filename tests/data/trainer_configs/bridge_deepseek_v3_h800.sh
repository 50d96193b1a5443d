#!/bin/bash
# Megatron-Bridge's DeepSeek-V3 pre-training recipe as it ships (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# src/megatron/bridge/recipes/deepseek/deepseek_v3.py deepseek_v3_pretrain_config l. 52-198: TP 2, PP 16, EP 64,
# its docstring's "Recommended parallelism: TP=2, PP=16, EP=64"), no overrides, on 128 nodes of 8 GPUs (DP 32)
torchrun --nproc_per_node 8 --nnodes 128 scripts/training/run_recipe.py --recipe deepseek_v3_pretrain_config
