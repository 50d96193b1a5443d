#!/bin/bash
# Megatron-Bridge's gpt-oss-120b pre-training recipe as it ships (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# src/megatron/bridge/recipes/gpt_oss/gpt_oss.py gpt_oss_120b_pretrain_config l. 154-262: TP 2, PP 4, EP 16, its
# docstring's "Recommended parallelism: TP=2, PP=4, EP=16"), with CP 2 (the recipe's cp_comm_type a2a, l. 187, then
# runs), on 16 nodes of 8 GPUs (DP 8)
torchrun --nproc_per_node 8 --nnodes 16 scripts/training/run_recipe.py --recipe gpt_oss_120b_pretrain_config model.context_parallel_size=2
