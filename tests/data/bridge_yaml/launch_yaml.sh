#!/bin/bash
torchrun --nproc_per_node=8 examples/quantization/pretrain_quantized_llama3_8b.py \
    --config-file override.yaml \
    train.micro_batch_size=1
