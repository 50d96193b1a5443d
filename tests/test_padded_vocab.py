"""Megatron's padded vocabulary (issue 21 memory, issue 22): the job's padded_vocab_size (plan.with_padded_vocab)
prices the embedding's and output layer's rows as Megatron builds them, and the Megatron readers set it for a
catalog model (or --model) from the script's tp and --make-vocab-size-divisible-by (megatron_model.catalog_vocab_rows:
vocab_size_with_padding, NVIDIA/Megatron-LM @d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py l. 133-146:
ceil(V / (divisor x tp)) x divisor x tp, divisor 128 by default). Figures derived by hand below."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_one_error
from planner.trainers import load_trainer_config
from planner.trainers.megatron_model import catalog_vocab_rows

GPT3_SH = Path(__file__).parent / "data" / "trainer_configs" / "train_gpt3_175b_distributed.sh"  # tp 8, pp 16, no divisor flag


def test_rows_as_megatron_pads_them():
    # GPT-3's 50,257 tokens at tp 8, divisor 128: multiple 1,024; ceil(50,257 / 1,024) = 50 -> 51,200
    assert catalog_vocab_rows({}, "gpt3-175b", 50257, 8, "")[0] == 51200
    # at tp 1: multiple 128, ceil(50,257 / 128) = 393 -> 50,304
    assert catalog_vocab_rows({}, "gpt3-175b", 50257, 1, "")[0] == 50304
    # Llama 3's 128,256 = 128 x 1,002: no padding at tp 1 (None: the model's own rows)
    assert catalog_vocab_rows({}, "llama3-8b", 128256, 1, "")[0] is None
    # at tp 8: a multiple of 1,024; 128,256 / 1,024 = 125.25 -> 126 x 1,024 = 129,024
    assert catalog_vocab_rows({}, "llama3-8b", 128256, 8, "")[0] == 129024
    # --make-vocab-size-divisible-by 1 at tp 8: a multiple of 8, 128,256 = 8 x 16,032: none
    assert catalog_vocab_rows({"--make-vocab-size-divisible-by": "1"}, "llama3-8b", 128256, 8, "")[0] is None
    # --no-pad-vocab-size: none; --padded-vocab-size: as given
    assert catalog_vocab_rows({"--no-pad-vocab-size": True}, "gpt3-175b", 50257, 8, "")[0] is None
    assert catalog_vocab_rows({"--padded-vocab-size": "52224"}, "gpt3-175b", 50257, 8, "")[0] == 52224


def test_the_reader_sets_the_rows_of_a_catalog_model():
    cfg = load_trainer_config(GPT3_SH, gpus=1024)
    assert cfg.job["model"] == "gpt3-175b" and cfg.job["tp"] == 8
    assert cfg.job["padded_vocab_size"] == 51200
    assert any(a.startswith("padded_vocab_size=51,200: gpt3-175b's 50,257 tokens, padded to a multiple of 128 "
                            "(Megatron's default) x tp 8 = 1,024") for a in cfg.assumed)


def test_the_reader_with_model_pads_that_models_vocabulary(tmp_path):
    # --model llama3-8b on the GPT-3 script (tp 8): Llama 3's 128,256 tokens -> 129,024 rows
    cfg = load_trainer_config(GPT3_SH, model="llama3-8b", gpus=1024)
    assert cfg.job["padded_vocab_size"] == 129024
    # the same at tp 1 (128,256 = 128 x 1,002): no padded rows, no field
    one = tmp_path / "tp1.sh"
    one.write_text(GPT3_SH.read_text().replace("--tensor-model-parallel-size 8", "--tensor-model-parallel-size 1"))
    assert "padded_vocab_size" not in load_trainer_config(one, model="llama3-8b", gpus=16).job


def test_gpt3_embedding_bytes_per_gpu(explain):
    """GPT-3 175B at tp 8, pp 16, dp 8 (1,024 GPUs), zero1, bf16 weights + fp32 gradients + 12 B optimizer states, on
    the megatron stack, which pads the vocabulary itself (stack_db vocab_padding): 51,200 rows, the same figures as
    --padded-vocab-size 51200. Against 50,264 rows (the least multiple of tp 8 at or above 50,257, 8 x 6,283: what
    --padded-vocab-size can give below Megatron's padding), 936 more rows of 12,288 on each tp rank's 1/8: 1,437,696
    more elements per GPU on the first stage (the embedding) and on the last (its tied output copy)."""
    job = dict(model="gpt3-175b", gpus=1024, tp=8, pp=16, sharding="zero1", micro_batch=1, global_batch=1536)
    _, _, _, padded = explain(**job)
    _, _, _, pinned = explain(**job, padded_vocab_size=51200)
    _, _, _, before = explain(**job, padded_vocab_size=50264)
    assert padded["memory"] == pinned["memory"] and padded["time"] == pinned["time"]
    assert padded["plan"]["vocab_rows"] == 51200 and "padded_vocab_size" not in padded["plan"]
    elems = 936 * 12288 // 8
    assert elems == 1437696
    # the embedding alone, per GPU: 51,200 x 12,288 / 8 x 2 B = 157,286,400 B; 50,264 rows: 154,411,008 B
    assert padded["params"]["embedding"] * 2 / 8 == 157286400
    assert before["params"]["embedding"] * 2 / 8 == 154411008
    b, a = before["memory"]["stages"]["first"], padded["memory"]["stages"]["first"]
    assert a["weights_bytes"] - b["weights_bytes"] == elems * 2 == 2875392
    assert a["gradients_bytes"] - b["gradients_bytes"] == elems * 4  # fp32 gradient buffer
    assert a["optimizer_bytes"] - b["optimizer_bytes"] == elems * 12 / 8  # fp32 master + 2 moments over dp 8
    last_b, last_a = before["memory"]["stages"]["last"], padded["memory"]["stages"]["last"]
    assert last_a["weights_bytes"] - last_b["weights_bytes"] == elems * 2
    # the output GEMM's FLOPs per token (6 x rows x h), model FLOPs as Megatron counts them (args.padded_vocab_size)
    assert padded["flops"]["flops_per_token_6n"] - before["flops"]["flops_per_token_6n"] == 6 * 936 * 12288
    assert pinned["plan"]["padded_vocab_size"] == 51200 and before["plan"]["padded_vocab_size"] == 50264


def test_llama3_8b_at_tp8_logits(explain):
    """Llama 3 8B at tp 8 on megatron: 129,024 rows; against its own 128,256 (--padded-vocab-size 128256, what
    --no-pad-vocab-size builds), the output layer (untied) and embedding each 768 x 4,096 / 8 more elements a GPU;
    the step's time grows (the output GEMM)."""
    job = dict(model="llama3-8b", gpus=8, tp=8)
    _, _, _, before = explain(**job, padded_vocab_size=128256)
    _, _, _, after = explain(**job)
    assert after["plan"]["vocab_rows"] == 129024 and "vocab_rows" not in before["plan"]
    assert after["params"]["embedding"] - before["params"]["embedding"] == 768 * 4096
    assert after["params"]["output"] - before["params"]["output"] == 768 * 4096
    assert after["memory"]["weights_bytes"] - before["memory"]["weights_bytes"] == 2 * 768 * 4096 / 8 * 2
    assert after["time"]["step_s"] > before["time"]["step_s"]
    assert after["memory"]["activations_bytes"] > before["memory"]["activations_bytes"]  # the logits


@pytest.mark.parametrize("rows, words", [(128000, "below llama3-8b's vocab_size 128,256"),
                                         (128260, "not a multiple of tp 8")])
def test_bad_rows_are_refused(cli, rows, words):
    r = cli("explain", "--model", "llama3-8b", "--gpus", 8, "--tp", 8, "--padded-vocab-size", rows)
    assert_one_error(r, words)


def test_torchtitan_pads_nothing(tmp_path):
    """torchtitan builds nn.Embedding(vocab_size, dim) and the output Linear at the model args' vocab_size
    (pytorch/torchtitan @e347b1e5e torchtitan/models/llama3/model/model.py l. 448, 458): its reader sets no padded rows."""
    toml = tmp_path / "llama3_8b_tp8.toml"
    toml.write_text((Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml").read_text().replace(
        "tensor_parallel_degree = 1", "tensor_parallel_degree = 8"))
    cfg = load_trainer_config(toml, gpus=64)
    assert cfg.job["model"] == "llama3-8b" and cfg.job["tp"] == 8  # Megatron would build 129,024 rows here
    assert "padded_vocab_size" not in cfg.job
    assert not any("padded_vocab_size" in a for a in cfg.assumed)
