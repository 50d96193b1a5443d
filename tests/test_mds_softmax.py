"""The eager core attention's softmax dtype on the Megatron-DeepSpeed forks (issue 22, fuzz job-fields seed 84 chunk 1
input 1: `attention_softmax_in_fp32: false` priced, None read back from the `--format megatron-deepspeed` export).

Every fork's CoreAttention / ParallelAttention builds FusedScaleMaskSoftmax with softmax_in_fp32 =
--attention-softmax-in-fp32 (store_true, default false) or apply_query_key_layer_scaling, which is on unless
--no-query-key-layer-scaling (store_false): microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py l. 1129-1135,
megatron/model/transformer.py l. 245-248; b56b50bb arguments.py l. 554-560, transformer.py l. 123-126; BigScience
497aa1bf arguments.py l. 688-694, transformer.py l. 133-136. So the forks' default is true (the planner's default too),
and false is --no-query-key-layer-scaling alone. Where the torch softmax runs (keys beyond the fused kernel's,
stack kernels.score_softmax_max_keys: 4,096 on megatron-deepspeed, @f4157bea fused_softmax.py is_kernel_available
l. 152-172; 2,048 on megatron-deepspeed-2021, b56b50bb fused_softmax.py l. 132-133) forward_torch_softmax (@f4157bea
fused_softmax.py l. 192-207) casts the scores to fp32 and torch.nn.Softmax saves its fp32 output: 4 - 2 = 2 B a score
element more than the 16-bit scores (planner/memory.py [sm])."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import explain_job

DATA = Path(__file__).parent / "data" / "trainer_configs"
MDS = DATA / "run_deepspeed_example.sh"
GPT = dict(model="megatron-gpt-1.7b", gpus=8, stack="megatron-deepspeed", sharding="zero1", tp=1, pp=1, micro_batch=1,
           global_batch=8, recompute="none", attention="eager")


def _act(**fields):
    return explain_job(**dict(GPT, **fields))[3]["memory"]["stages"]["first"]["activations_bytes"]


@pytest.mark.parametrize("stack,seq,extra", [
    # 4,096 keys on the 2021 fork (> 2,048): the torch softmax; Megatron's GPT 1.7B has 24 layers of 24 heads (tp 1),
    # one micro-batch: 24 x 24 x 4,096^2 x (4 - 2) B = 19,327,352,832 B more in fp32
    ("megatron-deepspeed-2021", 4096, 24 * 24 * 4096 * 4096 * 2),
    # microsoft's fork @f4157bea fuses up to 4,096 keys: its 16-bit output whatever the flag; at 8,192 the torch
    # softmax: 24 x 24 x 8,192^2 x 2 B = 77,309,411,328 B
    ("megatron-deepspeed", 4096, 0),
    ("megatron-deepspeed", 8192, 24 * 24 * 8192 * 8192 * 2),
    ("megatron-deepspeed", 2048, 0),  # the fused kernel (16 < 2,048 <= 4,096) saves its 16-bit output whatever the flag
])
def test_fp32_softmax_bytes_by_hand(stack, seq, extra):
    fp32, default, half = (_act(stack=stack, seq_len=seq, **f)
                           for f in (dict(attention_softmax_in_fp32=True), {}, dict(attention_softmax_in_fp32=False)))
    assert fp32 == default  # the forks' default and the planner's: true
    assert fp32 - half == extra


def _script(tmp_path, flags: str) -> Path:
    text = MDS.read_text()
    old = "    --fp16 \\\n"
    assert old in text
    p = tmp_path / "run.sh"
    p.write_text(text.replace(old, old + "".join(f"    {f} \\\n" for f in flags.split())))
    return p


@pytest.mark.parametrize("flags,value,line", [
    ("", True, "attention_softmax_in_fp32=true: no --no-query-key-layer-scaling"),
    ("--no-query-key-layer-scaling", False, "attention_softmax_in_fp32=false: --no-query-key-layer-scaling without"),
    ("--no-query-key-layer-scaling --attention-softmax-in-fp32", True, None),
    ("--attention-softmax-in-fp32", True, None),
])
def test_reader_reads_the_flags(tmp_path, flags, value, line):
    from planner.trainers import load_trainer_config

    cfg = load_trainer_config(_script(tmp_path, flags), gpus=8)
    assert cfg.job["attention"] == "eager" and cfg.job["attention_softmax_in_fp32"] is value
    said = [a for a in cfg.assumed if a.startswith("attention_softmax_in_fp32=")]
    assert said == ([] if line is None else [next(a for a in said if a.startswith(line))])
    assert all("@f4157bea megatron/arguments.py l. 1129-1135" in a for a in said)
    # read, so neither listed as ignored (the Megatron reader listed --attention-softmax-in-fp32 as Transformer
    # Engine's, and --no-query-key-layer-scaling was 'numerics only')
    assert not any("query-key" in str(x) or "softmax-in-fp32" in str(x) for x in cfg.ignored)
    # the fp32 softmax without query-key layer scaling skips the scale multiply (input * scale, 4 + 4 B each way), which
    # no job field says: priced at the stack's 37 / 41 B a score element, listed as not modelled (29 / 33 run)
    said = [str(x) for x in cfg.not_modelled if "query-key" in str(x) or "softmax-in-fp32" in str(x)]
    both = "--no-query-key-layer-scaling" in flags and "--attention-softmax-in-fp32" in flags
    assert len(said) == int(both)
    assert all(x.startswith("--no-query-key-layer-scaling (") and "37 / 41 against 29 / 33" in x for x in said)


def test_reader_under_flash_attention_ignores_them(tmp_path):
    from planner.trainers import load_trainer_config

    cfg = load_trainer_config(_script(tmp_path, "--use-flash-attn-v2 --no-query-key-layer-scaling "
                                                "--attention-softmax-in-fp32"), gpus=8)
    assert cfg.job["attention"] == "flash" and "attention_softmax_in_fp32" not in cfg.job
    ig = [str(x) for x in cfg.ignored]
    for f in ("--no-query-key-layer-scaling", "--attention-softmax-in-fp32"):
        assert any(x.startswith(f) and "eager core attention's softmax only" in x for x in ig), f


def test_published_scripts():
    # Megatron-DeepSpeed's Llama 2 example passes --no-query-key-layer-scaling alone: false; BLOOM's tr11 passes
    # neither flag: BigScience's fork's default, true
    from planner.trainers import load_trainer_config

    llama = load_trainer_config(DATA / "pretrain_llama2_distributed.sh", gpus=8, model="llama2-7b")
    assert llama.job["attention_softmax_in_fp32"] is False
    bloom = load_trainer_config(DATA / "tr11-176B-ml.slurm", gpus=384, hardware="a100-sxm-80gb")
    assert bloom.job["stack"] == "megatron-deepspeed-bigscience" and bloom.job["attention_softmax_in_fp32"] is True
    assert any(a.startswith("attention_softmax_in_fp32=true") and "497aa1bf" in a for a in bloom.assumed)


@pytest.mark.parametrize("stack", ["megatron-deepspeed", "megatron-deepspeed-2021", "megatron-deepspeed-bigscience"])
@pytest.mark.parametrize("value", [False, True, None])
def test_export_round_trip(stack, value):
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    row = explain_job(**dict(GPT, stack=stack, seq_len=2048,
                             **({} if value is None else {"attention_softmax_in_fp32": value})))[3]
    text, notes = export_plan(row["plan"], "megatron-deepspeed")
    assert ("--no-query-key-layer-scaling" in text) == (value is False)
    assert "--attention-softmax-in-fp32" not in text  # true is the forks' default: nothing written
    assert any("written as --no-query-key-layer-scaling" in n for n in notes) == (value is False)
    check_readback(row, "megatron-deepspeed", text)  # raises where the plan or its memory reads back otherwise


def test_fuzz_job_fields_reproducer(cli, tmp_path):
    """The fuzz finding's job (job-fields seed 84 chunk 1 input 1, the kind's jf-mds.yaml seed with the field set):
    explain's plan and each row of `fit` exported in every format that writes it read back as the same plan and memory
    (tests/fuzzing.py plans_check / config_fit_check); on main the megatron-deepspeed export read back 'attention_
    softmax_in_fp32: False priced, None read back'. The DeepSpeed JSON still refuses it (no key for the model code)."""
    from fuzzing import plans_check

    job = tmp_path / "job.yaml"
    job.write_text("model: megatron-gpt-1.7b\ngpus: 8\nstack: megatron-deepspeed\nsharding: zero1\nglobal_batch: 16\n"
                   "seq_len: 2048\nattention: eager\nattention_softmax_in_fp32: false\n")
    for args in (["explain", str(job), "--format", "json"], ["fit", str(job), "--top", "3", "--format", "json"]):
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        assert plans_check(args, r) is None
    r = cli("export", str(job), "--format", "deepspeed")
    assert r.exit_code == 2 and "attention_softmax_in_fp32 False: set in the model code" in r.stderr, r.stderr
