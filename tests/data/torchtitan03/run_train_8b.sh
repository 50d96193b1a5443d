#!/usr/bin/bash
# llama3_8b (torchtitan release/0.3 @4f9e9a47d torchtitan/models/llama3/config_registry.py l. 184-216) on one node
set -ex
MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh \
  --parallelism.tensor_parallel_degree 2 \
  --training.local_batch_size 2 \
  --metrics.log_freq 10
