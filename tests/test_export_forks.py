"""Issue 22 (mdsexport): `export --format megatron-deepspeed` of a plan priced on the older Megatron-DeepSpeed forks'
stacks writes that fork's own launch script (planner/trainers/export.py MDS_FORKS, _fork_args, _fork_split), or
refuses naming what the fork cannot say; the file reads back as the same plan with the same memory.

- stack megatron-deepspeed-2021: microsoft/Megatron-DeepSpeed b56b50bb (2021-07-02) megatron/arguments.py, whose GPT-3
  175B example (examples/pretrain_gpt3_175B.sh: tp 8, pp 16, --num-layers 96 --hidden-size 12288
  --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size
  1536, --vocab-file / --merge-file, --fp16, --checkpoint-activations) is the form, with DeepSpeed's --deepspeed
  --deepspeed_config --zero-stage and the JSON. Its flags cannot name the release: read back with the stack declared.
- stack megatron-deepspeed-bigscience: bigscience-workshop/Megatron-DeepSpeed 497aa1bf, BLOOM-176B's
  train/tr11-176B-ml/tr11-176B-ml.slurm the form (tests/data/trainer_configs): tp 4, pp 12, mb 2, gbs 2048, seq 2048,
  bf16 with ZeRO stage 0 (DeepSpeed's BF16_Optimizer, the planner's bf16_optimizer mode, level zero1),
  --checkpoint-activations, ALiBi, --embed-layernorm, --pad-vocab-size-to 250880,
  --pp-partition-method 'type:transformer|embedding'; the reader infers the stack from the fork's flags.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from planner.batch_ramp import rampup_phases
from planner.cli.export import _settings_plan, check_readback
from planner.errors import PlannerError
from planner.explain import to_json
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import (BIGSCIENCE_FLAGS_AT, MDS2021_FLAGS, _gpt2_divisor, export_plan, plan_signature)

S21, BIG = "megatron-deepspeed-2021", "megatron-deepspeed-bigscience"
DATA = Path(__file__).parent / "data"
BLOOM_SLURM = DATA / "trainer_configs" / "tr11-176B-ml.slurm"
BLOOM_MODEL = str(DATA / "export_forks" / "bloom-176b.yaml")
A100 = "a100-sxm-80gb"


def _row(**kw) -> dict:
    return to_json(*_settings_plan(Job.model_validate(kw)))


def _gpt_variant(folder, **fields) -> str:
    """Megatron GPT 1.7B (24 layers, h 2,304, 24 heads, ffn 9,216, vocab 51,200, learned positions, LayerNorm,
    biases, tied) with `fields` changed, as a model YAML in `folder`."""
    import yaml

    spec = yaml.safe_load((Path(__file__).parents[1] / "model_zoo" / "megatron-gpt-1.7b.yaml").read_text())
    spec.update(name="gpt-variant", **fields)
    p = Path(folder) / "gpt-variant.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


def _script(text: str) -> tuple[list[str], dict, dict]:
    """(the launch line's words up to pretrain_gpt.py, its flags as {flag: value or None}, the heredoc's JSON)."""
    body = text.split("cat <<EOT > $DS_CONFIG\n", 1)[1]
    cfg_text, rest = body.split("\nEOT\n", 1)
    words = shlex.split(rest.replace("\\\n", " "))
    i = words.index("pretrain_gpt.py")
    flags: dict = {}
    for w in words[i + 1:]:
        if w.startswith("--"):
            flags[w] = None
            last = w
        else:
            flags[last] = w
    return words[:i], flags, json.loads(cfg_text)


def _read_back(text: str, row: dict, tmp_path, stack=None) -> dict:
    p = tmp_path / "run.sh"
    p.write_text(text, encoding="utf-8")
    plan = row["plan"]
    cfg = load_trainer_config(p, fmt="megatron-deepspeed", model=plan.get("model_file") or plan["model"], gpus=plan["gpus"],
                              hardware=plan["hardware"], stack=stack)
    assert cfg.job["stack"] == plan["stack"]
    job = dict(cfg.job)
    if plan.get("padded_vocab_size") is None:  # the rows the fork builds, which the writers' notes name (as check_readback)
        job.pop("padded_vocab_size", None)
    back = to_json(*_settings_plan(Job.model_validate(job)))
    assert plan_signature(back["plan"]) == plan_signature(plan)
    assert back["memory"]["total_bytes"] == pytest.approx(row["memory"]["total_bytes"], rel=1e-12)
    check_readback(row, "megatron-deepspeed", text)  # fit --export's own check (the 2021 stack declared)
    return back


def test_gpt3_175b_on_1024_a100_in_the_2021_fork_flags(tmp_path):
    """GPT-3 175B on 1,024 A100 as b56b50bb's example trains it: tp 8 x pp 16 x dp 8, micro-batch 1, global batch
    1536 (192 micro-batches of 8 ranks), seq 2048, fp16 (the stack's only half dtype), full recompute, ZeRO-1. The
    flags are the example's, the vocabulary GPT-2's files (no --vocab-size at b56b50bb; 50,257 tokens padded to 128 x 8
    = 1,024: 51,200 rows, the note says, the rows the plan priced: the stack pads as the fork does), and nothing the
    fork lacks: no --normalization, --vocab-size, --no-pipeline-parallel, flash or recompute-granularity flag."""
    row = _row(model="gpt3-175b", gpus=1024, hardware=A100, stack=S21, tp=8, pp=16, micro_batch=1, global_batch=1536,
               seq_len=2048, recompute="full", sharding="zero1")
    plan = row["plan"]
    assert (plan["dp"], plan["fp16"], plan["sharding_mode"], plan["attention"]) == (8, True, "zero1", "eager")
    text, notes = export_plan(plan, "megatron-deepspeed")
    launch, f, ds = _script(text)
    assert launch == ["python", "-m", "torch.distributed.launch", "--nproc_per_node", "8", "--nnodes", "128"]
    for k, v in {"--tensor-model-parallel-size": "8", "--pipeline-model-parallel-size": "16", "--num-layers": "96",
                 "--hidden-size": "12288", "--num-attention-heads": "96", "--seq-length": "2048",
                 "--max-position-embeddings": "2048", "--micro-batch-size": "1", "--global-batch-size": "1536",
                 "--vocab-file": "gpt2-vocab.json", "--merge-file": "gpt2-merges.txt", "--fp16": None,
                 "--checkpoint-activations": None, "--ffn-hidden-size": "49152", "--kv-channels": "128",
                 "--deepspeed": None, "--deepspeed_config": "$DS_CONFIG", "--zero-stage": "1"}.items():
        assert f.get(k, "absent") == v, (k, f.get(k, "absent"))
    assert set(f) <= set(MDS2021_FLAGS), set(f) - set(MDS2021_FLAGS)
    assert "--make-vocab-size-divisible-by" not in f  # the default 128 x tp 8 pads to 51,200; no divisor gives 50,257
    assert ds == {"train_batch_size": 1536, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 192,
                  "fp16": {"enabled": True}, "zero_optimization": {"stage": 1, "overlap_comm": False}}
    # the stack pads as the fork does (stack_db vocab_padding): the plan priced the 51,200 rows the fork builds
    assert plan["vocab_rows"] == 51200
    assert any("128 x tp 8: 51,200 rows" in n and "where the plan priced" not in n for n in notes)
    assert "read it back with --stack megatron-deepspeed-2021" in text
    # the reader prices the rows the fork builds: 51,200 (megatron_model.catalog_vocab_rows)
    (tmp_path / "rows.sh").write_text(text, encoding="utf-8")
    assert load_trainer_config(tmp_path / "rows.sh", fmt="megatron-deepspeed", model="gpt3-175b", gpus=1024, hardware=A100,
                               stack=S21).job["padded_vocab_size"] == 51200
    back = _read_back(text, row, tmp_path, stack=S21)
    assert back["plan"]["recompute"] == "full" and back["plan"]["stack"] == S21


def test_the_2021_fork_at_pp_1_runs_zero3_without_a_flag(tmp_path):
    """At pp 1 b56b50bb builds Megatron's GPTModel, not the pipeline model (pretrain_gpt.py l. 46: GPTModelPipe only
    where pp > 1), so ZeRO-3 needs no --no-pipeline-parallel (the fork has none): the script is stage 3 with
    --zero-stage 3, and the reader on the declared 2021 stack reads it as the plan. On today's stack the same file is
    refused (its GPTModelPipe at pp 1 under the PipelineEngine, which asserts ZeRO < 2). Megatron's 18.4B GPT (51,200
    rows: GPT-2's 50,257 padded to a multiple of 512 x tp 2 = 1,024, --make-vocab-size-divisible-by 512)."""
    row = _row(model="megatron-gpt-18.4b", gpus=64, hardware=A100, stack=S21, tp=2, pp=1, micro_batch=1,
               global_batch=512, seq_len=2048, sharding="fsdp")
    plan = row["plan"]
    assert plan["sharding_mode"] == "zero3"
    text, notes = export_plan(plan, "megatron-deepspeed")
    _, f, ds = _script(text)
    assert ds["zero_optimization"]["stage"] == 3 and f["--zero-stage"] == "3" and "--no-pipeline-parallel" not in f
    assert f["--make-vocab-size-divisible-by"] == "512"
    assert any("512 x tp 2: 51,200 rows" in n and "priced" not in n for n in notes)
    _read_back(text, row, tmp_path, stack=S21)
    p = tmp_path / "run.sh"
    with pytest.raises(PlannerError, match="zero_optimization.stage 3 without --no-pipeline-parallel"):
        load_trainer_config(p, fmt="megatron-deepspeed", model="megatron-gpt-18.4b", gpus=64, hardware=A100)


def test_bloom_176b_on_384_a100_in_bigscience_flags(tmp_path):
    """BLOOM-176B's tr11 layout on 384 A100: tp 4, pp 12, dp 8, micro-batch 2, global batch 2048 (128 micro-batches),
    seq 2048, bf16 with the BF16_Optimizer (ZeRO-1's level, JSON stage 0), full recompute, both tied embeddings in the
    split, the TP sync: read from the published script (its batch ramp left out here: the plan at the full batch; the
    next test keeps it), exported,
    and the flags are the script's own (tr11-176B-ml.slurm GPT_ARGS and DEEPSPEED_ARGS), the JSON its heredoc's keys."""
    cfg = load_trainer_config(BLOOM_SLURM, gpus=384, hardware=A100)
    job = {k: v for k, v in cfg.job.items() if k != "batch_size_schedule"}
    row = to_json(*_settings_plan(Job.model_validate(job)))
    plan = row["plan"]
    assert (plan["tp"], plan["pp"], plan["dp"], plan["micro_batch"], plan["global_batch"], plan["seq_len"]) == (
        4, 12, 8, 2, 2048, 2048)
    assert (plan["sharding"], plan["sharding_mode"], bool(plan.get("fp16")), plan["stack"]) == (
        "zero1", "bf16_optimizer", False, BIG)
    text, notes = export_plan(plan, "megatron-deepspeed")
    launch, f, ds = _script(text)
    assert launch == ["python", "-u", "-m", "torch.distributed.run", "--nproc_per_node", "8", "--nnodes", "48"]
    for k, v in {"--tensor-model-parallel-size": "4", "--pipeline-model-parallel-size": "12",
                 "--pp-partition-method": "type:transformer|embedding", "--num-layers": "70", "--hidden-size": "14336",
                 "--num-attention-heads": "112", "--seq-length": "2048", "--max-position-embeddings": "2048",
                 "--micro-batch-size": "2", "--global-batch-size": "2048", "--train-samples": "220000000",
                 "--tokenizer-type": "PretrainedFromHF", "--embed-layernorm": None,
                 "--sync-tp-duplicated-parameters": None, "--bf16": None, "--position-embedding-type": "alibi",
                 "--checkpoint-activations": None, "--pad-vocab-size-to": "250880",
                 "--deepspeed-activation-checkpointing": None, "--deepspeed": None, "--zero-stage": "0"}.items():
        assert f.get(k, "absent") == v, (k, f.get(k, "absent"))
    assert set(f) <= set(BIGSCIENCE_FLAGS_AT), set(f) - set(BIGSCIENCE_FLAGS_AT)
    assert ds == {"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 128,
                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 0, "overlap_comm": False}}
    # 70 layers + 2 tied embeddings = 72 units on 12 stages: 6 each, so 5 layers on the first and last stage
    assert any("the first 5, the middle 6, the last 5" in n for n in notes)
    back = _read_back(text, row, tmp_path)  # the stack inferred from the fork's flags
    assert back["plan"]["sync_tp_duplicated_parameters"] and back["plan"]["account_for_embedding_in_pipeline_split"]


def test_bloom_batch_ramp_is_the_scripts_rampup(tmp_path):
    """The same script read with its ramp (--rampup-batch-size 192 16 9_765_625: 117 phases, the batch from 192 up by
    16 to 2,048) exports it as the fork's --rampup-batch-size beside --global-batch-size, the numbers the script has,
    and --train-samples 220,000,000 (the ramp's required companion), and reads back as the same 117 phases."""
    cfg = load_trainer_config(BLOOM_SLURM, gpus=384, hardware=A100)
    row = to_json(*_settings_plan(Job.model_validate(cfg.job)))
    assert len(row["plan"]["batch_size_schedule"]) == 117
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    assert "    --global-batch-size 2048 \\\n    --rampup-batch-size 192 16 9765625 \\\n" in text
    assert "--train-samples 220000000 " in text and "--step-batch-size-schedule" not in text
    _read_back(text, row, tmp_path)


def test_gpt3_ramp_on_the_2021_fork_as_its_example(tmp_path):
    """b56b50bb's GPT-3 175B example ramps --rampup-batch-size 16 16 5859375 to 1,536 over --train-samples 146484375:
    the plan of those phases (batch_ramp.rampup_phases, in tokens of 2,048) exports as those flags; a schedule no
    linear ramp runs (16 -> 32 -> 1,536, an uneven step) is refused, named; without tokens (no --train-samples) too."""
    phases = [{"from_tokens": c * 2048, "global_batch": b} for c, b in rampup_phases(16, 16, 5859375, 1536)]
    kw = dict(model="gpt3-175b", gpus=1024, hardware=A100, stack=S21, tp=8, pp=16, micro_batch=1, seq_len=2048,
              recompute="full", sharding="zero1")
    row = _row(**kw, batch_size_schedule=phases, tokens=146484375 * 2048)
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    assert "--rampup-batch-size 16 16 5859375 " in text and "--train-samples 146484375 " in text
    assert "--global-batch-size 1536 " in text
    _read_back(text, row, tmp_path, stack=S21)
    uneven = [{"from_tokens": 0, "global_batch": 16}, {"from_tokens": 2048 * 1000, "global_batch": 32},
              {"from_tokens": 2048 * 2000, "global_batch": 1536}]
    row = _row(**kw, batch_size_schedule=uneven, tokens=146484375 * 2048)
    with pytest.raises(PlannerError, match="batch_size_schedule of 3 phases: not the phases of a --rampup-batch-size"):
        export_plan(row["plan"], "megatron-deepspeed")
    row = _row(**kw, batch_size_schedule=phases)
    with pytest.raises(PlannerError, match="only with --train-samples"):
        export_plan(row["plan"], "megatron-deepspeed")


def test_bigscience_learned_positions_are_written_to_name_the_fork(tmp_path):
    """A model of learned positions (GPT-3 175B's shape, the fork's default 'absolute') on BigScience's stack: the
    flag is written all the same, the one that tells the reader the fork (none of the 2022 fork's arguments.py);
    fp16 at ZeRO-1 (the DeepSpeedZeroOptimizer; bf16 runs stage 0 only on this DeepSpeed); GPT-2's files for the
    vocabulary, since --pad-vocab-size-to 50,257 does not divide over tp 8."""
    row = _row(model="gpt3-175b", gpus=1024, hardware=A100, stack=BIG, tp=8, pp=16, micro_batch=1, global_batch=1536,
               seq_len=2048, recompute="full", sharding="zero1", fp16=True)
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    _, f, ds = _script(text)
    assert f["--position-embedding-type"] == "absolute" and f["--tokenizer-type"] == "GPT2BPETokenizer"
    assert "--pad-vocab-size-to" not in f and "--pp-partition-method" not in f
    assert ds["fp16"] == {"enabled": True} and ds["zero_optimization"]["stage"] == 1
    _read_back(text, row, tmp_path)


# the Llama-era forms each fork's model code lacks (stack_db runs.layer_kinds global not_built, read at b56b50bb and
# 497aa1bf: MixedFusedLayerNorm only, query_key_value 3 x projection_size, the TiedLayerSpec output, bias=True linears;
# 2021 also GeLU only and learned positions only; BigScience builds --glu-activation and --position-embedding-type
# rotary)
LLAMA_LACKS = {S21: ["rmsnorm", "gated_mlp", "grouped_query", "rotary_positions", "untied_embeddings", "no_linear_bias"],
               BIG: ["rmsnorm", "grouped_query", "untied_embeddings", "no_linear_bias"]}


@pytest.mark.parametrize("stack", [S21, BIG])
def test_llama_is_refused_naming_the_rule_and_each_form(stack, cli):
    """Llama 3 8B (RMSNorm, SwiGLU, GQA, RoPE, untied, no biases) is refused on both stacks by start-up rule
    STACK_LAYER_KIND (code 73) in fit, explain and check: exit 2, the message naming each form the fork lacks and
    the fork's code; the hint the stacks that build it (not these two)."""
    job = ["--model", "llama3-8b", "--gpus", "16", "--hardware", A100, "--stack", stack, "--global-batch", "64",
           "--seq-len", "2048"]
    for cmd in ("fit", "explain"):
        r = cli(cmd, *job)
        assert r.exit_code == 2 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert "STACK_LAYER_KIND" in r.stderr or "runs.layer_kinds" in r.stderr, r.stderr
        for form in LLAMA_LACKS[stack]:
            assert f"({form}), which stack {stack}'s code does not build" in r.stderr, (cmd, form)
        for form in {"gated_mlp", "rotary_positions"} - set(LLAMA_LACKS[stack]):
            assert f"({form})" not in r.stderr, (cmd, form)
        assert "megatron-deepspeed, torchtitan" in r.stderr and f"{stack}," not in r.stderr.split("hint:")[1]
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND"):
        _row(model="llama3-8b", gpus=16, hardware=A100, stack=stack, tp=2, pp=2, micro_batch=1, global_batch=64,
             seq_len=2048, sharding="zero1", fp16=True)


def test_what_the_forks_cannot_say_is_refused_by_name(tmp_path):
    """A model the fork builds but a setting its arguments.py cannot say: a GPT shape with a rotary base of 500,000
    on BigScience's fork (its rotary embedding has no theta flag, 497aa1bf arguments.py): the export names the
    setting and the flag."""
    row = _row(model=_gpt_variant(tmp_path, position_embedding="rope", rope_theta=500000.0), gpus=16, hardware=A100, stack=BIG,
               tp=2, pp=2, micro_batch=1, global_batch=64, seq_len=2048, sharding="zero1", fp16=True)
    with pytest.raises(PlannerError) as e:
        export_plan(row["plan"], "megatron-deepspeed")
    msg = e.value.message
    assert "--rotary-position-embeddings-theta (rope_theta other than 10,000)" in msg
    assert f"(stack {BIG}) has no such flag" in msg


def test_2021_refusals_of_what_a12aaedc_and_b56b50bb_lack():
    """MiCS (a searchable mode kept for the entries' symmetry) is not in DeepSpeed a12aaedc; the 2021 GPTModelPipe
    counts no end of the split (partition_method='type:transformer', no argument); b56b50bb has no partial recompute."""
    row = _row(model="megatron-gpt-1.7b", gpus=16, hardware=A100, stack=S21, tp=1, pp=1, micro_batch=1,
               global_batch=64, seq_len=2048, sharding="hsdp", shard_group=8)
    assert row["plan"]["sharding_mode"] == "zero3_mics"
    with pytest.raises(PlannerError, match="zero3_mics: MiCS .* not in DeepSpeed a12aaedc"):
        export_plan(row["plan"], "megatron-deepspeed")
    row = _row(model="megatron-gpt-1.7b", gpus=16, hardware=A100, stack=S21, tp=1, pp=4, micro_batch=1,
               global_batch=64, seq_len=2048, sharding="zero1", account_for_embedding_in_pipeline_split=True,
               account_for_loss_in_pipeline_split=True)
    with pytest.raises(PlannerError, match="partition_method='type:transformer'.*the ends are never counted"):
        export_plan(row["plan"], "megatron-deepspeed")
    # full recompute of some layers: the fork re-runs all or none (--checkpoint-activations, no --recompute-method)
    row = _row(model="megatron-gpt-1.7b", gpus=16, hardware=A100, stack=S21, tp=2, pp=1, micro_batch=1,
               global_batch=64, seq_len=2048, sharding="zero2", recompute="full", recompute_layers=10)
    with pytest.raises(PlannerError, match="recompute_layers 10: microsoft/Megatron-DeepSpeed @b56b50bb re-runs every"):
        export_plan(row["plan"], "megatron-deepspeed")


def test_gpt2_divisor():
    """--make-vocab-size-divisible-by d such that the least multiple of d x tp at or above 50,257 is the model's rows
    (b56b50bb megatron/tokenizer/tokenizer.py _vocab_size_with_padding): 51,200 = 50 x 1,024, so d = 1,024 / tp
    (tp 8: 128, the default); 50,257 at tp 1 is d 1 and at tp 8 none (50,264 at d 1); 50,304 = 1,048 x 48 at tp 1
    (50,256 = 1,047 x 48 < 50,257); a vocabulary below GPT-2's: none; 256,000 at tp 8: 32,000 (256,000 itself, the one
    divisor above 256,000 - 50,257)."""
    assert _gpt2_divisor(51200, 8) == 128 and _gpt2_divisor(51200, 2) == 512 and _gpt2_divisor(51200, 1) == 1024
    assert _gpt2_divisor(50257, 1) == 1 and _gpt2_divisor(50257, 8) is None
    assert _gpt2_divisor(50304, 1) == 48 and _gpt2_divisor(32000, 1) is None
    # beyond 2 x 50,257 only the vocabulary itself pads 50,257 to it (d = v / tp), found without a search: a
    # vocabulary of 2^31 - 1 (the fuzz corpus's sizes) answers at once
    assert _gpt2_divisor(256000, 8) == 32000 and _gpt2_divisor(2**31 - 1, 8) is None
    assert _gpt2_divisor(2**31 - 1, 1) == 2**31 - 1


def test_cli_fit_export_and_check_on_both_forks(cli, tmp_path):
    """The issue's commands: fit --export on each stack (read back inside fit), then `planner check` of the file
    passes (the 2021 stack declared with --stack, as the script's header says; BigScience's inferred)."""
    for stack, args in ((S21, ["--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16",
                               "--global-batch", "1536", "--micro-batch", "1", "--recompute", "full"]),
                        (BIG, ["--model", BLOOM_MODEL, "--gpus", "384", "--tp", "4", "--pp", "12", "--micro-batch", "2",
                               "--global-batch", "2048", "--seq-len", "2048"])):
        r = cli("fit", *args, "--hardware", A100, "--stack", stack, "--top", "1", "--export", "megatron-deepspeed")
        assert r.exit_code == 0, r.stderr
        p = tmp_path / f"{stack}.sh"
        p.write_text(r.stdout, encoding="utf-8")
        model = args[1]
        declared = ["--stack", S21] if stack == S21 else []
        r = cli("check", str(p), "--model", model, "--hardware", A100, *declared)
        assert r.exit_code == 0 and r.stdout.startswith("PASS "), (r.stdout, r.stderr)
        r = cli("explain", str(p), "--model", model, "--hardware", A100, *declared, "--format", "json")
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["plan"]["stack"] == stack


# ------------------------------------------------------------------ mdsfork2: BigScience's GLU, the 2022 fork's ramp
def test_bigscience_glu_exports_and_reads_back(tmp_path):
    """A gated MLP (gated_mlp, SwiGLU) on a GPT shape on BigScience's fork: --glu-activation swiglu (497aa1bf
    arguments.py l. 399-402; transformer.py l. 73-104: dense_h_to_4h of 2 x --ffn-hidden-size, x1 * silu(x2), then
    dense_4h_to_h of --ffn-hidden-size, the planner's gate, up and down matrices) with --no-bias-gelu-fusion, which
    the fork requires with it (l. 285-286); read back as the same plan and memory. The layer's parameters by hand: qkv
    3 h^2 + 3 h, dense h^2 + h, dense_h_to_4h 2 f h + 2 f, dense_4h_to_h f h + h, two LayerNorms 4 h, at h 2,304 and
    f 6,144: 15,932,160 + 5,310,720 + 28,323,840 + 14,158,080 + 9,216 = 63,734,016 a layer."""
    h, f = 2304, 6144
    layer = (3 * h * h + 3 * h) + (h * h + h) + (2 * f * h + 2 * f) + (f * h + h) + 4 * h
    assert layer == 15_932_160 + 5_310_720 + 28_323_840 + 14_158_080 + 9_216 == 63_734_016
    model = _gpt_variant(tmp_path, gated_mlp=True, ffn_hidden_size=f)
    row = _row(model=model, gpus=16, hardware=A100, stack=BIG, tp=2, pp=2, micro_batch=1, global_batch=64,
               seq_len=2048, sharding="zero1", fp16=True)
    from planner.catalog import load_model
    from planner.params import count_params
    pc = count_params(load_model(model))
    assert pc.total == 24 * layer + 51200 * h + 2048 * h + 2 * h
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    _, fl, _ = _script(text)
    assert fl["--glu-activation"] == "swiglu" and "--no-bias-gelu-fusion" in fl and fl["--ffn-hidden-size"] == str(f)
    assert "--swiglu" not in fl and set(fl) <= set(BIGSCIENCE_FLAGS_AT)
    back = _read_back(text, row, tmp_path)
    assert back["params"]["total"] == pc.total


@pytest.mark.parametrize("glu, ok", [("swiglu", True), ("geglu", True), ("reglu", False), ("liglu", False)])
def test_bigscience_glu_activations_read(tmp_path, glu, ok):
    """The fork's four GLU_ACTIVATIONS (497aa1bf megatron/model/glu_activations.py): SwiGLU and GeGLU are the
    planner's gated MLP (gated_mlp; the fork's --ffn-hidden-size default 4 h with it too, arguments.py l. 242-243,
    not Megatron-LM's 8 h / 3 of --swiglu); ReGLU and LiGLU refused, named; without --no-bias-gelu-fusion the fork
    raises at start-up (arguments.py l. 285-286): refused, named."""
    script = (
        "#!/bin/bash\npython -u -m torch.distributed.run --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\\n"
        "    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --num-layers 24 --hidden-size 2304 \\\n"
        "    --num-attention-heads 24 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 \\\n"
        "    --global-batch-size 32 --train-iters 100 --position-embedding-type absolute --fp16 \\\n"
        "    --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --tokenizer-type GPT2BPETokenizer \\\n"
        f"    --glu-activation {glu} NOFUSE--deepspeed --deepspeed_config ds.json --zero-stage 1\n")
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 1,
                                                  "fp16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    p = tmp_path / "run.sh"
    p.write_text(script.replace("NOFUSE", "--no-bias-gelu-fusion "))
    if not ok:
        with pytest.raises(PlannerError, match=f"--glu-activation {glu}: a GLU of .*not priced"):
            load_trainer_config(p, fmt="megatron-deepspeed", gpus=8, hardware=A100)
        return
    cfg = load_trainer_config(p, fmt="megatron-deepspeed", gpus=8, hardware=A100)
    from planner.catalog import load_model
    m = load_model(cfg.job["model"])
    assert cfg.job["stack"] == BIG and m.gated_mlp and m.ffn_hidden_size == 4 * 2304
    assert any(a.startswith(f"gated_mlp=true: --glu-activation {glu}") for a in cfg.assumed)
    p.write_text(script.replace("NOFUSE", ""))
    with pytest.raises(PlannerError, match="without --no-bias-gelu-fusion: the fork raises at start-up"):
        load_trainer_config(p, fmt="megatron-deepspeed", gpus=8, hardware=A100)


def test_ramp_on_the_2022_fork_exports_as_rampup(tmp_path):
    """microsoft/Megatron-DeepSpeed @f4157bea has --rampup-batch-size (arguments.py l. 815; microbatches.py
    RampupBatchsizeNumMicroBatches l. 78-140, the older forks' class) and the reader reads it: b56b50bb's GPT-3 175B
    example ramp (16 16 5859375 to 1,536) priced on stack megatron-deepspeed exports as those flags beside
    --global-batch-size and --train-samples (the same function as the older forks', export._fork_rampup), and reads
    back as the same phases and memory; no Megatron-LM --step-batch-size-schedule."""
    phases = [{"from_tokens": c * 2048, "global_batch": b} for c, b in rampup_phases(16, 16, 5859375, 1536)]
    row = _row(model="gpt3-175b", gpus=1024, hardware=A100, stack="megatron-deepspeed", tp=8, pp=16, micro_batch=1,
               seq_len=2048, recompute="full", sharding="zero1", batch_size_schedule=phases, tokens=146484375 * 2048)
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    assert "--rampup-batch-size 16 16 5859375 " in text and "--train-samples 146484375 " in text
    assert "--global-batch-size 1536 " in text and "--step-batch-size-schedule" not in text
    back = _read_back(text, row, tmp_path)
    assert back["plan"]["batch_size_schedule"] == row["plan"]["batch_size_schedule"]


@pytest.mark.parametrize("model, tp, pinned, divisor, tokens, rows", [
    # the stack's padding (stack_db megatron-deepspeed vocab_padding: 128 x tp, the fork's own rule): 128,256 -> 129,024
    # rows (126 x 1,024), which the fork builds from Llama 3's own 128,256 tokens with its default divisor
    ("llama3-70b", 8, None, None, 128256, 129024),
    # pinned to the model's own 128,256: 128,256 / 8 = 16,032 = 96 x 167 (167 prime): divisor 96 pads them to themselves
    ("llama3-70b", 8, 128256, 96, 128256, 128256),
    ("megatron-gpt-1.7b", 8, None, None, 51200, 51200),  # 51,200 = 50 x 128 x 8: the default pads it to itself
    ("gpt3-175b", 8, None, None, 50257, 51200),  # 50,257 at 128 x 8: 51,200, the plan's rows
])
def test_the_2022_vocabulary_is_the_forks_null_tokenizer(tmp_path, model, tp, pinned, divisor, tokens, rows):
    """The 2022 fork reads --vocab-size only for its NullTokenizer (@f4157bea megatron/tokenizer/tokenizer.py
    build_tokenizer l. 38-41; pretrain_gpt.py l. 364 defaults to GPT2BPETokenizer, which ignores it), whose size is
    --vocab-size + 1 (the end-of-document id, l. 510-514), padded to a multiple of --make-vocab-size-divisible-by x tp
    (l. 52, 58-71): the export writes V - 1 and the largest divisor <= 128 that pads V to the rows the plan priced;
    read back with the model, the plan's memory."""
    from planner.trainers.export import mds_vocab_divisor
    assert mds_vocab_divisor(128256, 8) == 96 and mds_vocab_divisor(50257, 8) is None
    row = _row(model=model, gpus=64 * tp, hardware=A100, stack="megatron-deepspeed", tp=tp, pp=8, micro_batch=1,
               global_batch=512, seq_len=2048, sharding="zero1", padded_vocab_size=pinned)
    assert row["plan"].get("padded_vocab_size", row["plan"].get("vocab_rows", tokens)) == rows
    text, notes = export_plan(row["plan"], "megatron-deepspeed")
    _, fl, _ = _script(text)
    assert fl["--tokenizer-type"] == "NullTokenizer" and fl["--vocab-size"] == str(tokens - 1)
    assert fl.get("--make-vocab-size-divisible-by") == (None if divisor is None else str(divisor))
    (note,) = [n for n in notes if n.startswith("vocabulary: ")]
    assert f"{rows:,} rows, the plan's" in note
    _read_back(text, row, tmp_path)
