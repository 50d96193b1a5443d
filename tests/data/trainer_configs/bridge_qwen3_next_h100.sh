#!/bin/bash
# Megatron-Bridge's Qwen3-Next 80B-A3B pre-training recipe (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf
# src/megatron/bridge/recipes/qwen/qwen3_next.py qwen3_next_80b_a3b_pretrain_config l. 27-142: TP 1, PP 4, EP 8, its
# docstring's "Recommended parallelism: TP=1, PP=4, EP=8") on 4 nodes of 8 GPUs (DP 8), as it ships (its selective
# recompute of layernorm, moe and moe_act, l. 95-96: planner/recompute_modules.py)
# It does not fit H100 on these 4 nodes (DP 8 = EP 8: expert DP 1, no expert optimizer state sharded; 78.7 GiB of
# 71.2 usable); on 8 nodes it does (63.3 GiB): tests/test_bridge_qwen3_next.py derives both by hand. Bridge's docs
# (docs/models/llm/qwen.md @dc805f5cf l. 109) pre-train it at TP 2, PP 8, EP 16 on 256 GPUs.
torchrun --nproc_per_node 8 --nnodes 4 scripts/training/run_recipe.py --recipe qwen3_next_80b_a3b_pretrain_config
