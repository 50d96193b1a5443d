#!/bin/bash
# Megatron-LM launch script for Llama 3 8B, written from Megatron-LM's documented example
# examples/llama/train_llama3_8b_h100_fp8.sh @f7ec7ea8 (NVIDIA/Megatron-LM): one node of 8
# H100s, TP 1, CP 1, micro-batch 1, global batch 128, seq 8192, distributed optimizer with
# overlapped grad reduce / param gather. Changes: bf16 (the example's fp8 `if` block left
# out), mock-data arguments inlined, logging trimmed; this copy of train_llama3_8b.sh keeps the
# example's TP_SIZE=1 with --sequence-parallel (as the example states it) and adds
# --tp-comm-overlap: Megatron turns SP off at tp 1 (arguments.py @d98e8a64 l. 1433-1439) and
# then asserts it under --tp-comm-overlap (l. 1441-1442), so this script does not start at
# TP 1; at TP 2 it does. Flag names: megatron/training/arguments.py. Used by
# tests/test_trainers.py.

export CUDA_DEVICE_MAX_CONNECTIONS=1

CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b"}
GPUS_PER_NODE=8
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}

TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32
SEQ_LENGTH=8192

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --rotary-base 500000
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-iters 1000
    --lr 0.00015
    --min-lr 0.00001
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --bf16
    --cross-entropy-loss-fusion
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
    --tp-comm-overlap
)

DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")

DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 128256
    --split '99,1,0'
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    --log-interval 1 \
    --save "$CHECKPOINT_PATH"
