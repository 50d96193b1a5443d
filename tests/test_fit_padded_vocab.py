"""fit prices each candidate's vocabulary as its stack pads it at the candidate's tp (issues 21/22 fitvocab): stack_db
vocab_padding (Megatron-LM's vocab_size_with_padding, NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/
build_tokenizer.py l. 133-146: ceil(V / (128 x tp)) x 128 x tp; the Megatron-DeepSpeed forks' _vocab_size_with_padding
the same), plan.padded_rows over the candidates, search.vocab_spaces one space per distinct row count. torchtitan pads
nothing (nn.Embedding(vocab_size, dim), pytorch/torchtitan @e347b1e5e torchtitan/models/llama3/model/model.py).
Figures derived by hand below."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_one_error
from planner.catalog import load_stack
from planner.plan import VOCAB_TP, padded_rows, resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions


def test_padded_rows_by_hand():
    # GPT-3's 50,257 tokens: tp 1 -> 128 x 393 = 50,304; tp 2 -> 256 x 197 = 50,432; tp 4 -> 512 x 99 = 50,688;
    # tp 8 -> 1,024 x 50 = 51,200
    got = padded_rows(50257, np.array([1, 2, 4, 8]), 128)
    assert got.dtype == np.int64 and got.tolist() == [50304, 50432, 50688, 51200]
    # Llama 3's 128,256 = 128 x 1,002 = 256 x 501: tp 1, 2 none; tp 4 -> 512 x 251 = 128,512; tp 8 -> 1,024 x 126
    assert padded_rows(128256, np.array([1, 2, 4, 8]), 128).tolist() == [128256, 128256, 128512, 129024]


@pytest.mark.parametrize("stack, divisor", [("megatron", 128), ("megatron-deepspeed", 128), ("megatron-deepspeed-2021", 128),
                                            ("megatron-deepspeed-bigscience", 128), ("megatron-bridge", None),
                                            ("torchtitan", None), ("llm-foundry", None)])
def test_which_stacks_pad(stack, divisor):
    pad = load_stack(stack).vocab_padding
    assert (pad.divisor if pad is not None else None) == divisor


def _resolved(**kw):
    settings, _, _ = resolve(Job(**kw))
    return settings


@pytest.mark.parametrize("tp, rows", [(1, 50304), (2, 50432), (4, 50688), (8, 51200)])
def test_gpt3_rows_per_tp_in_fit(tp, rows):
    """GPT-3 175B (50,257 tokens) on megatron, fit pinned to one tp: each row builds Megatron's rows at its tp, the
    figures explain gives with --padded-vocab-size rows (the pinned job: the same model, the same memory)."""
    job = Job(model="gpt3-175b", gpus=1024, seq_len=2048, global_batch=1536)
    res = fit(job, opts=SpaceOptions(tp=(tp,), pp=(16,), cp=(1,)), top=2)
    for row in res.rows:
        assert row["plan"]["tp"] == tp and row["plan"]["vocab_rows"] == rows
        assert row["params"]["embedding"] == rows * 12288
        from planner.explain import evaluate, to_json
        from planner.search import row_job
        pinned = row_job(job, row).model_copy(update={"padded_vocab_size": rows})
        settings, plan, _ = resolve(pinned)
        one = to_json(settings, plan, evaluate(settings, plan))
        assert one["memory"] == row["memory"] and one["time"] == row["time"]


def test_llama3_70b_tp8_fit_row_by_hand():
    """Llama 3 70B at tp 8 on megatron: 129,024 rows, 768 more than its 128,256, each of 8,192: the embedding and the
    (untied) output layer 768 x 8,192 x 2 more parameters, weights / gradients / optimizer states 768 x 8,192 x 2 x
    bytes-per-param more in all (over tp 8, pp 1: 1/8 a GPU; optimizer states over dp under ZeRO-1). The fit row's
    memory is explain's with --padded-vocab-size 129024."""
    job = Job(model="llama3-70b", gpus=64, seq_len=8192, global_batch=64)
    res = fit(job, opts=SpaceOptions(tp=(8,), pp=(1,), cp=(1,), sharding=("zero1",), recompute=("full",)), top=1)
    (row,) = res.rows
    assert row["plan"]["vocab_rows"] == 129024 and row["plan"]["dp"] == 8
    from planner.explain import evaluate, to_json
    from planner.search import row_job
    base = row_job(job, row)
    out = {}
    for rows in (129024, 128256):
        settings, plan, _ = resolve(base.model_copy(update={"padded_vocab_size": rows}))
        out[rows] = to_json(settings, plan, evaluate(settings, plan))
    assert out[129024]["memory"] == row["memory"] and out[129024]["time"] == row["time"]
    a, b = out[129024], out[128256]
    elems = 768 * 8192 * 2  # embedding + output, untied
    assert a["params"]["total"] - b["params"]["total"] == elems == 12582912
    # megatron's default states: bf16 weights (2 B), fp32 gradients (4 B), fp32 master + 2 moments (12 B) over dp 8
    assert a["memory"]["weights_bytes"] - b["memory"]["weights_bytes"] == elems * 2 / 8
    assert a["memory"]["gradients_bytes"] - b["memory"]["gradients_bytes"] == elems * 4 / 8
    assert a["memory"]["optimizer_bytes"] - b["memory"]["optimizer_bytes"] == pytest.approx(elems * 12 / 8 / 8, rel=1e-12)
    # 6N a token: 6 x the 768 x 8,192 x 2 more parameters (the embedding's and the output layer's, as 6N counts them)
    assert a["flops"]["flops_per_token_6n"] - b["flops"]["flops_per_token_6n"] == 6 * elems


def test_torchtitan_figures_unchanged():
    """torchtitan pads nothing: the fit rows price Llama 3's own 128,256 rows at tp 8 (no vocab_rows), and explain with
    --padded-vocab-size 128256 gives the same figures."""
    job = Job(model="llama3-8b", gpus=16, stack="torchtitan", seq_len=4096, global_batch=32)
    res = fit(job, opts=SpaceOptions(tp=(8,), cp=(1,), pp=(1,)), top=2)
    assert res.rows
    for row in res.rows:
        assert "vocab_rows" not in row["plan"] and row["params"]["embedding"] == 128256 * 4096


def test_pinned_rows_refuse_the_tp_that_do_not_divide_them():
    """padded_vocab_size 50,260 = 4 x 12,565 (12,565 odd) pins every candidate's rows: tp 1, 2 and 4 divide it, tp 8
    does not: fit counts the tp 8 candidates under VOCAB_TP (the reason its count lines and the closest-plan report
    name) and ranks none at tp 8."""
    assert 50260 % 4 == 0 and 50260 % 8
    job = Job(model="gpt3-175b", gpus=1024, seq_len=2048, global_batch=1536, padded_vocab_size=50260)
    res = fit(job, opts=SpaceOptions(pp=(16,), cp=(1,)), top=5)
    assert all(row["plan"]["tp"] in (1, 2, 4) for row in res.rows)
    assert all(row["plan"]["padded_vocab_size"] == 50260 for row in res.rows)
    assert any(k.startswith("tp does not divide the job's padded_vocab_size") and v > 0 for k, v in res.counts.reasons.items())
    assert VOCAB_TP == 998


def test_divisor_is_refused_where_the_stack_pads_none(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--tp", 8, "--stack", "torchtitan",
            "--make-vocab-size-divisible-by", 64)
    assert_one_error(r, "pads no vocabulary")
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--tp", 8, "--make-vocab-size-divisible-by", 64,
            "--padded-vocab-size", 129024)
    assert_one_error(r, "which pins the rows")


def test_job_divisor_in_fit():
    """--make-vocab-size-divisible-by 64 at tp 8: a multiple of 512, 128,256 -> 128,512 (251 x 512)."""
    job = Job(model="llama3-8b", gpus=16, seq_len=4096, global_batch=32, make_vocab_size_divisible_by=64)
    res = fit(job, opts=SpaceOptions(tp=(8,), cp=(1,), pp=(1,)), top=1)
    (row,) = res.rows
    assert row["plan"]["vocab_rows"] == 128512 and row["plan"]["make_vocab_size_divisible_by"] == 64
