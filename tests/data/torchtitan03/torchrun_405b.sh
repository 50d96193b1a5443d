#!/usr/bin/bash
torchrun --nnodes=16 --nproc_per_node=8 --rdzv_backend c10d -m torchtitan.train --module llama3 --config llama3_405b \
  --parallelism.data_parallel_shard_degree 16
