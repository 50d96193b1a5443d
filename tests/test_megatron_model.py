"""planner/trainers/megatron_model.py's flag readers: which counts a Megatron flag may set to 0."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config
from planner.cli.export import resolved_plan
from planner.schema import Job
from planner.trainers.export import export_plan, plan_signature

# Llama 3 8B's shape as Megatron flags, fp8 tensorwise with the first and last layers kept in bf16
ARGS = """--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention
--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 64
--bf16 --use-distributed-optimizer --swiglu --normalization RMSNorm --position-embedding-type rope
--untie-embeddings-and-output-weights --disable-bias-linear --tokenizer-type HuggingFaceTokenizer --vocab-size 128256
--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2
--fp8-format e4m3 --fp8-recipe tensorwise --first-last-layers-bf16 {bf16}
"""


def _read(tmp_path, bf16: str):
    p = tmp_path / "run.args"
    p.write_text(ARGS.format(bf16=bf16).replace("\n", " \n"))
    return load_trainer_config(p, fmt="megatron", gpus=8, hardware="h100-sxm")


def test_bf16_layer_counts_may_be_zero(tmp_path):
    """TransformerConfig @d98e8a64 l. 1538-1555 refuses num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16
    only below 0 or above num_layers // pp ("must be between 0 and number of layers per pipeline stage"): 0 keeps
    that end in fp8. The reader refused 0 ("is not a whole number from 1"), so `planner export --format megatron`
    of a plan with bf16 layers at one end only (it writes --num-layers-at-end-in-bf16 0) did not read back: the
    megatron-recent fuzz probe's `fit ... --format json` rows, exported, failed check_readback."""
    cfg = _read(tmp_path, "--num-layers-at-start-in-bf16 2 --num-layers-at-end-in-bf16 0")
    assert (cfg.job["bf16_layers_at_start"], cfg.job["bf16_layers_at_end"]) == (2, 0)
    # the round trip: a plan with bf16 layers at the start only exports the end's 0 and reads back as the same plan
    plan = resolved_plan(Job(model="llama3-8b", gpus=8, pp=2, global_batch=64, seq_len=8192, precision="fp8",
                             fp8_recipe="tensorwise", bf16_layers_at_start=2, stack="megatron"))
    text, _ = export_plan(plan, "megatron")
    assert "--num-layers-at-start-in-bf16 2" in text and "--num-layers-at-end-in-bf16 0" in text
    f = tmp_path / "exported.sh"
    f.write_text(text)
    back = Job.model_validate(load_trainer_config(f).job)
    assert (back.bf16_layers_at_start, back.bf16_layers_at_end) == (2, 0)
    assert plan_signature(resolved_plan(back)) == plan_signature(plan)
    with pytest.raises(PlannerError) as e:
        _read(tmp_path, "--num-layers-at-start-in-bf16 -1")
    assert "--num-layers-at-start-in-bf16 '-1' is not a whole number from 0" in e.value.message
