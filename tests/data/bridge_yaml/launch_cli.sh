#!/bin/bash
torchrun --nproc_per_node=8 scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config \
    model.tensor_model_parallel_size=2 model.sequence_parallel=true model.recompute_granularity=full \
    model.recompute_method=uniform model.recompute_num_layers=1 model.foo_unknown=3 \
    train.global_batch_size=64 train.micro_batch_size=2 optimizer.lr=3e-4 \
    train.micro_batch_size=1
