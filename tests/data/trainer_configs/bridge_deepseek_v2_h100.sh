#!/bin/bash
# Megatron-Bridge's DeepSeek-V2 pre-training recipe as it ships (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# src/megatron/bridge/recipes/deepseek/deepseek_v2.py deepseek_v2_pretrain_config l. 142-257: TP 1, PP 4, EP 32,
# its docstring's "Recommended parallelism: TP=1, PP=4, EP=32"), no overrides, on 16 nodes of 8 GPUs (DP 32)
torchrun --nproc_per_node 8 --nnodes 16 scripts/training/run_recipe.py --recipe deepseek_v2_pretrain_config
