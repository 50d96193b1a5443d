"""The vocabulary's rows read back from an export with --model (issue 22, job-fields fuzz seed 81): the --vocab-size of
a tokenizer that reads it (Megatron-LM's NullTokenizer and TikTokenizer, build_tokenizer.py @d98e8a64 l. 58-66,
96-102; Megatron-DeepSpeed @f4157bea's NullTokenizer, tokenizer.py l. 38-41, one token more, l. 510-514) is the run's
tokenizer, a job setting: padded to the embedding's rows (vocab_size_with_padding: the least multiple of
--make-vocab-size-divisible-by [128] x tp at or above it, Megatron-LM l. 133-152, the fork l. 58-71), not a model shape
that --model replaces (megatron.py, megatron_model.catalog_vocab_rows).

Found by `scripts/fuzz.py --runs 300 --seed 81 --kinds job-fields` (chunk 0 input 9): megatron-gpt-1.7b (vocab 51,200)
with padded_vocab_size 128,256 on stack megatron-deepspeed, exported as --tokenizer-type NullTokenizer --vocab-size
128255, read back with --model as the model's 51,200 tokens (13.91 GiB priced, 12.45 GiB read back).
"""

from __future__ import annotations

import pytest

from planner.cli.export import _settings_plan, check_readback
from planner.errors import PlannerError
from planner.explain import to_json
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

H = 2304  # megatron-gpt-1.7b's hidden size (model_zoo/megatron-gpt-1.7b.yaml; its vocab_size 51,200, tied embeddings)
GPT = "megatron-gpt-1.7b"


def _row(**kw) -> dict:
    return to_json(*_settings_plan(Job.model_validate(kw)))


def _mds_row(**kw) -> dict:
    return _row(model=GPT, gpus=8, stack="megatron-deepspeed", sharding="zero1", global_batch=16, seq_len=2048, **kw)


def _flags(text: str) -> dict:
    import shlex

    words = shlex.split(text.split("pretrain_gpt.py", 1)[1].replace("\\\n", " "))
    out, last = {}, None
    for w in words:
        if w.startswith("--"):
            out[w], last = None, w
        elif last is not None:
            out[last] = w
    return out


@pytest.mark.parametrize("tp", [1, 2])  # tp 2: the fuzz input's row 1 (ZeRO-3, tp 2)
def test_mds_null_tokenizer_reads_back_as_the_priced_rows(tmp_path, tp):
    """padded_vocab_size 128,256 on megatron-gpt-1.7b (51,200 tokens) at tp 1 and 2: no divisor <= 128 pads 51,200 to
    128,256 (ceil(51,200 / (d tp)) d tp < 51,200 + 256), so the export writes the rows' own tokenizer: NullTokenizer
    --vocab-size 128,255, whose fork builds 128,256 tokens (+ the end-of-document id), 128,256 = 1,002 x 128 = 501 x 256
    already padded (default divisor: no flag). Read back with --model: padded_vocab_size 128,256, the embedding 128,256
    x 2,304 = 295,501,824 parameters (the model's own 51,200 x 2,304 = 117,964,800 before the fix), the memory priced."""
    row = _mds_row(padded_vocab_size=128256, tp=tp)
    assert row["params"]["embedding"] == 128256 * H == 295_501_824
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    fl = _flags(text)
    assert (fl["--tokenizer-type"], fl["--vocab-size"]) == ("NullTokenizer", "128255")
    assert "--make-vocab-size-divisible-by" not in fl
    p = tmp_path / "run.sh"
    p.write_text(text)
    cfg = load_trainer_config(p, fmt="megatron-deepspeed", model=GPT, gpus=8)
    assert cfg.job["padded_vocab_size"] == 128256
    assert any(a.startswith("padded_vocab_size=128,256: the tokenizer's 128,256 tokens (--vocab-size, a setting of the "
                            "run: megatron-gpt-1.7b has 51,200)") for a in cfg.assumed)
    assert not any("--model replaces" in a for a in cfg.assumed)
    back = to_json(*_settings_plan(Job.model_validate(cfg.job)))
    assert back["params"]["embedding"] == 295_501_824
    assert back["memory"]["total_bytes"] == pytest.approx(row["memory"]["total_bytes"], rel=1e-12)
    check_readback(row, "megatron-deepspeed", text)  # fit --export's own check


@pytest.mark.parametrize("tok, tp, rows", [
    # Megatron-LM's NullTokenizer has --vocab-size tokens (null_tokenizer.py @d98e8a64 l. 16-19, 60-62): 128,256 at
    # tp 4 padded to a multiple of 128 x 4 = 512: ceil(128,256 / 512) = 251 -> 128,512 rows
    ("NullTokenizer", 4, 128512),
    ("TikTokenizer", 1, 128256),  # build_tokenizer l. 64-65 hands it --vocab-size: 128,256 = 1,002 x 128, no padding
])
def test_megatron_lm_tokenizer_size_with_model_is_padded(tmp_path, tok, tp, rows):
    """Megatron-LM proper reads --vocab-size as the tokenizer's size for the tokenizers that take it, so with --model the
    rows are that size padded (as the Megatron-DeepSpeed reader, which feeds the same rule): padded_vocab_size, the
    embedding rows x 2,304."""
    p = tmp_path / "args.sh"
    p.write_text(f"torchrun pretrain_gpt.py --num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048 "
                 f"--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 "
                 f"--tensor-model-parallel-size {tp} --tokenizer-type {tok} --vocab-size 128256\n")
    cfg = load_trainer_config(p, fmt="megatron", model=GPT, gpus=8)
    assert cfg.job["padded_vocab_size"] == rows
    assert not any("--model replaces" in a for a in cfg.assumed)
    back = to_json(*_settings_plan(Job.model_validate(cfg.job)))
    assert back["params"]["embedding"] == rows * H


@pytest.mark.parametrize("tok, size", [
    ("HuggingFaceTokenizer", 128256),  # reads its files, not --vocab-size (build_tokenizer l. 68-78): --model's 51,200
    ("NullTokenizer", 32000),  # fewer than the model's 51,200 tokens: tokens without a row, --model's shape instead
])
def test_a_vocab_size_the_run_does_not_build_from_stays_the_models(tmp_path, tok, size):
    """Where --vocab-size is no tokenizer size the run pads (a file tokenizer), or is below --model's tokens
    (plan.with_padded_vocab refuses rows below them), --model replaces it as the shape, with a note: the model's
    51,200 rows (= 400 x 128: no padding at tp 1, no padded_vocab_size)."""
    p = tmp_path / "args.sh"
    p.write_text("torchrun pretrain_gpt.py --num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048 "
                 "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 "
                 f"--tokenizer-type {tok} --vocab-size {size}\n")
    cfg = load_trainer_config(p, fmt="megatron", model=GPT, gpus=8)
    assert "padded_vocab_size" not in cfg.job
    assert any(a.startswith(f"model={GPT}: --model replaces the arguments' shape (--vocab-size {size:,} contradicts")
               for a in cfg.assumed)


def test_deepspeed_json_refuses_rows_it_cannot_hold():
    """A DeepSpeed JSON has no key for the tokenizer or --make-vocab-size-divisible-by: read back with --model it is the
    model's 51,200 tokens padded to 128 (51,200 rows), so a plan of 128,256 rows is refused, naming the format that
    holds them; the plan at the stack's own rows still exports."""
    with pytest.raises(PlannerError) as e:
        export_plan(_mds_row(padded_vocab_size=128256, sharding_mode="zero1")["plan"], "deepspeed")
    assert "padded_vocab_size 128,256" in e.value.message and "51,200" in e.value.message
    assert "--format megatron-deepspeed" in e.value.hint
    row = _mds_row()
    text, _ = export_plan(row["plan"], "deepspeed")
    check_readback(row, "deepspeed", text)


@pytest.mark.parametrize("stack, fmt, model, tp, rows", [
    # 51,200 tokens, divisor 1,000 at tp 1: ceil(51.2) = 52 -> 52,000 rows; the fork's script: NullTokenizer --vocab-size
    # 51,999 (52,000 tokens) with --make-vocab-size-divisible-by 125 (52,000 = 416 x 125, the largest <= 128)
    ("megatron-deepspeed", "megatron-deepspeed", GPT, 1, 52000),
    # Llama 3's 128,256 at 1,000 x tp 2 = 2,000: ceil(64.128) = 65 -> 130,000 rows, written as --padded-vocab-size
    ("megatron", "megatron", "llama3-8b", 2, 130000),
])
def test_a_jobs_divisor_reads_back_as_its_rows(stack, fmt, model, tp, rows):
    """make_vocab_size_divisible_by, which the writers spell as the rows it pads to (the Megatron writer's
    --padded-vocab-size, the fork's tokenizer size and divisor): read back, those rows are kept, not dropped for the
    stack's default 128 x tp (check_readback dropped every read-back padded_vocab_size of a plan without one)."""
    row = _row(model=model, gpus=8, stack=stack, tp=tp, sharding="zero1", global_batch=16, seq_len=2048,
               make_vocab_size_divisible_by=1000)
    assert row["plan"]["vocab_rows"] == rows
    text, _ = export_plan(row["plan"], fmt)
    check_readback(row, fmt, text)


def test_torchtitan_toml_refuses_rows_its_flavor_does_not_build():
    """torchtitan builds the embedding and output layer at the flavor's model args vocab_size (pytorch/torchtitan
    @e347b1e5e models/llama3/model/model.py l. 448, 458; args.py l. 33: 128,256 for llama3 8B) and no TOML key sets the
    rows (stack_db torchtitan vocab_padding null), so a plan priced at a job's padded_vocab_size 151,936 (23,680 rows
    more: 23,680 x 4,096 hidden x 2 (embedding and untied output) = 193,986,560 more parameters) read back as the
    flavor's 128,256 rows, another memory (job-fields fuzz seed 84 chunk 0 input 3: 64.52 GiB priced, 63.16 read back).
    Refused, naming the rows; the same job at the flavor's own rows (padded_vocab_size 128,256) still exports and reads
    back."""
    job = dict(model="llama3-8b", gpus=8, stack="torchtitan", tp=2, sharding="fsdp", precision="fp8", recompute="none",
               global_batch=16, seq_len=4096, micro_batch=4, torch_compile=True)
    row = _row(**job, padded_vocab_size=151936)
    with pytest.raises(PlannerError) as e:
        export_plan(row["plan"], "torchtitan")
    assert "padded_vocab_size 151,936" in e.value.message and "128,256 rows" in e.value.message
    assert "without padded_vocab_size" in e.value.hint
    row = _row(**job, padded_vocab_size=128256)
    text, _ = export_plan(row["plan"], "torchtitan")
    check_readback(row, "torchtitan", text)
