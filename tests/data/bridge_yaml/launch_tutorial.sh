#!/bin/bash
# NVIDIA-NeMo/Megatron-Bridge @dc805f5cf tutorials/recipes/llama/README.md l. 96-100, as written there (run from
# tutorials/recipes/llama/, beside conf/)
torchrun --nproc_per_node=2 02_pretrain_with_yaml.py \
    --config-file conf/llama32_1b_pretrain.yaml \
    train.train_iters=5000 \
    train.global_batch_size=512 \
    optimizer.lr=0.0002
