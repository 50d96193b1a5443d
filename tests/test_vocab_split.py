"""torchtitan's uneven vocabulary split under TP (planner/memory.py [vs], stack memory.vocab_split_uneven; issue 21).

torchtitan shards the embedding and output layer along the vocabulary as DTensor Shard(0) placements (pytorch/torchtitan
@e347b1e5e models/llama3/infra/parallelize.py l. 173-188; release/0.3 @4f9e9a47d models/common/decoder_sharding.py
l. 301-345), and torch's Shard._split_tensor splits by torch.chunk: the first ranks hold ceil(V / tp) rows. The largest
rank's are priced.

A Llama 3 8B with V = 128,259 (tests write it: every catalog model's vocabulary divides by the tp a torchtitan run takes)
at TP 4, FSDP over dp 4, seq 8,192, one sequence a micro-batch: ceil(128,259 / 4) = 32,065 rows against 32,064.75, 0.25
row more of the embedding and 0.25 of the output layer, (0.25 + 0.25) x 4,096 = 2,048 parameters a TP rank, / 4 FSDP
shards = 512 a GPU: fp32 master 2,048 B, Adam's m and v 4,096 B; the loss's 16 B a logit (torchtitan's loss_parallel at
TP > 1, stack kernels loss_parallel_saved_per_logit) x 8,192 tokens x 0.25 logit = 32,768 B; FSDP2's unsharded output
layer (the end unit held, bf16) 2 B x 0.25 x 4,096 = 2,048 B.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner.memory as mem
from planner.catalog import load_stack
from planner.plan import resolve
from planner.schema import Job


@pytest.fixture
def odd_model(tmp_path):
    text = open("model_zoo/llama3-8b.yaml").read()
    assert "vocab_size: 128256" in text
    p = tmp_path / "llama3-8b-odd.yaml"
    p.write_text(text.replace("vocab_size: 128256", "vocab_size: 128259").replace("name: llama3-8b", "name: llama3-8b-odd"))
    return str(p)


def _terms(explain, monkeypatch, even: bool, **job):
    if even:
        monkeypatch.setattr(mem, "vocab_tp_divisor", lambda settings, tp: np.asarray(tp, dtype=np.float64))
    out = explain(**job)[3]["memory"]["terms"]
    monkeypatch.undo()
    return out


def test_hand_figures():
    assert -(-128_259 // 4) == 32_065 and 128_259 / 4 == 32_064.75
    assert 0.5 * 4096 / 4 == 512 and 512 * 4 == 2_048 and 512 * 8 == 4_096
    assert 16 * 8192 * 0.25 == 32_768 and 2 * 0.25 * 4096 == 2_048


def test_divisor(odd_model):
    s, _, _ = resolve(Job(model=odd_model, stack="torchtitan", gpus=16, tp=4, global_batch=4, seq_len=8192, sharding="fsdp"))
    assert float(mem.vocab_tp_divisor(s, 4.0)) == 128_259 / 32_065
    assert float(mem.vocab_tp_divisor(s, 1.0)) == 1.0
    s8, _, _ = resolve(Job(model="llama3-8b", stack="torchtitan", gpus=16, tp=4, global_batch=4, seq_len=8192, sharding="fsdp"))
    assert mem.vocab_tp_divisor(s8, np.array([1.0, 2.0, 4.0, 8.0])).tolist() == [1.0, 2.0, 4.0, 8.0]  # bit for bit
    assert load_stack("torchtitan").memory.vocab_split_uneven and load_stack("torchtitan-0.3").memory.vocab_split_uneven
    for name in ("megatron", "megatron-bridge", "llm-foundry", "litgpt-benchmark", "megatron-deepspeed"):
        assert not load_stack(name).memory.vocab_split_uneven


def test_largest_rank_priced(explain, monkeypatch, odd_model):
    job = dict(model=odd_model, stack="torchtitan", gpus=16, tp=4, micro_batch=1, global_batch=4, seq_len=8192,
               sharding="fsdp", recompute="full")
    on, off = _terms(explain, monkeypatch, False, **job), _terms(explain, monkeypatch, True, **job)
    assert on["master_weights"] - off["master_weights"] == 2_048
    assert on["adam"] - off["adam"] == 4_096
    assert on["output_activations"] - off["output_activations"] == 32_768
    assert on["fsdp_unsharded_ends"] - off["fsdp_unsharded_ends"] == 2_048


def test_fit_and_explain_agree(cli, odd_model):
    """fit over tp 1, 2, 4 on the odd vocabulary: each row's reproduce line prices the same memory terms (the largest
    rank's rows in both paths)."""
    import json

    from conftest import explain_each_row

    r = cli("fit", "--model", odd_model, "--gpus", "16", "--stack", "torchtitan", "--tp", "1,2,4", "--pp", "1",
            "--seq-len", "8192", "--global-batch", "16", "--hardware", "h100-sxm", "--top", "4", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert any(row["plan"]["tp"] in (2, 4) for row in rows)
    job = Job(model=odd_model, gpus=16, stack="torchtitan", seq_len=8192, global_batch=16, hardware="h100-sxm")
    for row, one in explain_each_row(cli, job, rows):
        assert one["memory"]["terms"] == row["memory"]["terms"], row["plan"]
