"""A trainer config's inferred settings in `explain --format json` and `check --format json`
(planner/trainers/report.py; issue 22 / 24: what a record or job leaves out is inferred by a
documented rule and listed as assumed). Each reader's lines follow the job's own in `assumed`,
word for word as the stderr note prints them, and `trainer_config` holds them as entries
(setting, field, value, rule, source, line) beside what was read and not priced (ignored,
not_modelled, unmodelled). Every expected value is derived from the fixture files
(tests/data/trainer_configs/, tests/data/torchtitan03/; their sources in those folders' READMEs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
T = DATA / "trainer_configs"


def _js(cli, *args):
    r = cli(*args, "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    out = json.loads(r.stdout)
    return (out[0] if isinstance(out, list) else out), r.stderr


def _entry(res, setting, source=None):
    hits = [e for e in res["trainer_config"]["assumed"] if e["setting"] == setting
            and (source is None or e["source"] == source)]
    assert len(hits) == 1, (setting, [e["setting"] for e in res["trainer_config"]["assumed"]])
    return hits[0]


def _listed(res, key, setting):
    hits = [e for e in res["trainer_config"][key] if e["setting"] == setting]
    assert len(hits) == 1, (key, setting, [e["setting"] for e in res["trainer_config"][key]])
    return hits[0]


def _note_lines(stderr: str, source) -> list[str]:
    """The items of the stderr note 'SOURCE: assumed: a; b; c' (cli/core.py report_trainer_config)."""
    head = f"note: {source}: assumed: "
    line = next(ln for ln in stderr.splitlines() if ln.startswith(head))
    return line[len(head):]


def _same_as_note(res, stderr):
    """The JSON's trainer lines are the stderr note's, in its order, after the job's own in `assumed`."""
    lines = list(dict.fromkeys(e["line"] for e in res["trainer_config"]["assumed"]))
    assert _note_lines(stderr, res["trainer_config"]["source"]) == "; ".join(lines)
    assert res["assumed"][-len(lines):] == lines


def test_megatron_script(cli):
    """train_llama3_8b.sh: --train-iters 1000, --global-batch-size 128, --seq-length 8192, no
    --attention-backend (Megatron's auto), no rank-order flag."""
    res, err = _js(cli, "explain", T / "train_llama3_8b.sh")
    tc = res["trainer_config"]
    assert (tc["source"], tc["format"]) == (str(T / "train_llama3_8b.sh"), "megatron")
    tok = _entry(res, "tokens")
    # the line prints 1.04858e+09; the value is the job's exact 1000 x 128 x 8192
    assert (tok["field"], tok["value"]) == ("tokens", 1000 * 128 * 8192)
    assert tok["rule"] == "--train-iters x global batch x sequence length"
    assert tok["line"].startswith("tokens=1.04858e+09: ")
    assert _entry(res, "rank_order")["value"] == "tp-cp-dp-pp"
    att = _entry(res, "attention")
    assert (att["field"], att["value"]) == ("attention", "flash")
    assert att["rule"].startswith("--attention-backend auto (Megatron's default)")
    assert _entry(res, "model")["value"] == "llama3-8b"
    # the ignored flags, each its own entry with its value and reason; nothing assumed among them
    lr = _listed(res, "ignored", "--lr")
    assert (lr["value"], lr["reason"]) == (0.00015, "optimizer, schedule and initialisation settings")
    assert _listed(res, "ignored", "--split")["value"] == "99,1,0"
    assert {e["setting"] for e in tc["ignored"]}.isdisjoint(e["setting"] for e in tc["assumed"])
    assert tc["not_modelled"] == [] and tc["unmodelled"] == []
    _same_as_note(res, err)


def test_megatron_defaults_and_not_modelled(cli):
    """train_llama3_8b_h100_fp8.sh (NVIDIA's, as published): TP 1 with --sequence-parallel (Megatron turns it
    off), --fp8-format without --fp8-recipe (delayed), --vocab-size 128256, --manual-gc (not modelled)."""
    res, err = _js(cli, "explain", T / "train_llama3_8b_h100_fp8.sh")
    sp = _entry(res, "sequence_parallel")
    assert (sp["field"], sp["value"]) == ("sequence_parallel", False)
    assert sp["rule"].startswith("--sequence-parallel with tp 1")
    assert (_entry(res, "fp8_recipe")["value"], _entry(res, "fp8_recipe")["rule"]) == (
        "delayed", "--fp8-recipe default (arguments.py)")
    voc = _entry(res, "vocab_size")  # a model attribute, not a job field: field null
    assert (voc["field"], voc["value"]) == (None, 128256)
    # --train-samples 1953125000 x --seq-length $SEQ_LENGTH (8192)
    assert _entry(res, "tokens")["value"] == 1953125000 * 8192
    gc = _listed(res, "not_modelled", "--manual-gc")
    assert gc["value"] is True and gc["reason"].startswith("Python's threshold garbage collector off")
    # a line with no 'SETTING: ' head is all rule
    assert any(e["setting"] is None and e["rule"].startswith("script lines 180, 181, 182, 183 inside")
               for e in res["trainer_config"]["assumed"])
    _same_as_note(res, err)


def test_megatron_deepspeed_script(cli):
    """run_deepspeed_example.sh: --global-batch-size 1024 beside the JSON's train_batch_size 64,
    --checkpoint-activations, no --use-flash-attn, --fp16, and the ds_config.json its heredoc (line 22)
    writes: stage 2, no overlap_comm (DeepSpeed's default false below stage 3)."""
    res, err = _js(cli, "explain", T / "run_deepspeed_example.sh", "--gpus", "8")
    tc = res["trainer_config"]
    assert tc["format"] == "megatron-deepspeed"
    gb = _entry(res, "global_batch")
    assert (gb["value"], gb["source"]) == (1024, str(T / "run_deepspeed_example.sh"))
    assert gb["rule"].startswith("Megatron's, not the JSON's train_batch_size 64")
    assert _entry(res, "recompute")["value"] == "full"
    assert _entry(res, "attention", str(T / "run_deepspeed_example.sh"))["value"] == "eager"
    # the JSON's own lines: named as the JSON's, the prefix taken off the setting
    js = f"{T / 'run_deepspeed_example.sh'} (line 22: ds_config.json)"
    ov = _entry(res, "dp_comm_overlap", js)
    assert (ov["field"], ov["value"]) == ("dp_comm_overlap", False)
    assert ov["rule"].startswith("zero_optimization.overlap_comm absent")
    pr = _entry(res, "precision", js)
    assert (pr["value"], pr["rule"]) == ("bf16", "fp16 priced as bf16 (same 2-byte width and tensor peak)")
    assert pr["line"] == f"{js}: {pr['setting']}={pr['value']}: {pr['rule']}"
    assert _listed(res, "ignored", "steps_per_print")["source"] == js
    # the script's flags choose the core attention: the JSON reader's "attention=flash" line is not kept (it was,
    # beside the script's eager, before this change)
    assert [e["value"] for e in tc["assumed"] if e["field"] == "attention"] == ["eager"]
    assert _listed(res, "ignored", "--zero-stage")["value"] == 2
    _same_as_note(res, err)


def test_bigscience_stack_inferred():
    """tr11-176B-ml.slurm: the fork's flags choose the stack megatron-deepspeed-bigscience; --pad-vocab-size-to
    250880; --position-embedding-type alibi; the JSON's BF16_Optimizer (stage 0, bf16). Read by the library
    (the CLI's path is the tests above): config_report is what with_config lays into the JSON."""
    from planner.trainers import load_trainer_config
    from planner.trainers.report import config_report

    cfg = load_trainer_config(T / "tr11-176B-ml.slurm", gpus=384, hardware="a100-sxm-80gb")
    rep = config_report(cfg)
    by = {e["setting"]: e for e in rep["assumed"] if e["source"] == cfg.source}
    assert (by["stack"]["field"], by["stack"]["value"]) == ("stack", "megatron-deepspeed-bigscience")
    assert by["stack"]["rule"].startswith("--position-embedding-type, --embed-layernorm")
    assert (by["vocab_size"]["field"], by["vocab_size"]["value"]) == (None, 250880)
    assert (by["--position-embedding-type"]["field"], by["--position-embedding-type"]["value"]) == (None, "alibi")
    assert by["sync_tp_duplicated_parameters"]["value"] is True
    assert by["batch_size_schedule"]["value"] == cfg.job["batch_size_schedule"]  # the job's ramp, not the text
    assert by["batch_size_schedule"]["value"][0] == {"from_tokens": 0.0, "global_batch": 192}
    # --train-samples 220,000,000 x --seq-length 2048 (the slurm file's TRAIN_SAMPLES, SEQ_LEN)
    assert by["tokens"]["value"] == 220_000_000 * 2048
    js = [e for e in rep["assumed"] if e["source"] != cfg.source]
    assert {e["source"] for e in js} == {f"{cfg.source} (line 149: ./ds_config.$SLURM_JOB_ID.json)"}
    sh = next(e for e in js if e["setting"] == "sharding")
    assert sh["field"] == "sharding" and sh["rule"].startswith("DeepSpeed's BF16_Optimizer")


def test_deepspeed_json_in_check(cli):
    """ds_config_zero2.json with --model llama3-8b --gpus 8, through `check --format json`: a JSON has no
    model parallelism (tp = pp = cp = 1, one entry each), no activation checkpointing, no core attention,
    no sequence length (plan.default_seq_len: min(4096, llama3-8b's 8,192-token context))."""
    res, err = _js(cli, "check", T / "ds_config_zero2.json", "--model", "llama3-8b", "--gpus", "8")
    tc = res["trainer_config"]
    assert tc["format"] == "deepspeed" and res["file"] == str(T / "ds_config_zero2.json")
    for k in ("tp", "pp", "cp"):
        e = _entry(res, k)
        assert (e["field"], e["value"]) == (k, 1) and e["line"].startswith("tp=pp=cp=1: ")
    assert _entry(res, "recompute")["value"] == "none"
    assert _entry(res, "attention")["value"] == "flash"
    seq = _entry(res, "seq_len")
    assert (seq["field"], seq["value"]) == ("seq_len", 4096)
    assert seq["rule"].startswith("the config gives no sequence length (pass --seq-len)")
    comm = _entry(res, "communication_data_type absent")  # a DeepSpeed key, no job field
    assert (comm["field"], comm["value"]) == (None, None)
    nm = _listed(res, "not_modelled", "zero_optimization.allgather_bucket_size")
    assert nm["value"] == 500_000_000 and nm["reason"].startswith("buckets, prefetch and persistence")
    assert _listed(res, "ignored", "gradient_clipping")["value"] == 1.0
    assert _listed(res, "ignored", "optimizer")["value"]["type"] == "AdamW"
    _same_as_note(res, err)


def test_torchtitan_toml_and_command_line(cli):
    """llama3_8b.toml at --gpus 64: data_parallel_shard_degree -1 (the leftover GPUs, 64), global_batch_size
    unset (local_batch_size 1 x dp 64); --seq-len 4096 replaces the file's 8192, listed after the reader's
    lines, and the tokens are the file's steps at it: 1000 x 64 x 4096 = 262,144,000 (torchtitan runs
    training.steps steps at the length it is given, train.py @e347b1e5e l. 714; before: x the file's 8192)."""
    res, err = _js(cli, "explain", T / "llama3_8b.toml", "--gpus", "64", "--seq-len", "4096")
    tc = res["trainer_config"]
    assert tc["format"] == "torchtitan"
    sh = _entry(res, "data_parallel_shard_degree")
    assert (sh["field"], sh["value"], sh["rule"]) == (None, 64, "-1 takes the leftover GPUs, 64 / 1")
    gb = _entry(res, "global_batch")
    assert (gb["field"], gb["value"]) == ("global_batch", 64)
    assert _entry(res, "tokens")["value"] == 1000 * 64 * 4096 == res["plan"]["tokens"]
    seq = _entry(res, "seq_len")
    assert (seq["value"], seq["rule"]) == (4096, "the command line replaces the file's 8192")
    assert tc["assumed"][-1]["setting"] == "seq_len"  # the command line's, after the reader's
    assert _listed(res, "ignored", "training.dataset")["value"] == "c4"
    assert res["plan"]["seq_len"] == 4096
    _same_as_note(res, err)


@pytest.mark.parametrize("script, dp, local", [("run_train_8b.sh", 4, 2)])
def test_torchtitan03_launch_line(cli, script, dp, local):
    """run_train_8b.sh: llama3_8b's config function on NGPU=8 with TP 2 and local batch 2: dp_shard -1 is
    8 / 2 = 4, global batch 2 x 4; the function's flex attention, ChunkedLossWrapper and CUDA graph; 0.3's
    sequence parallelism on by default."""
    res, err = _js(cli, "explain", DATA / "torchtitan03" / script)
    assert res["trainer_config"]["format"] == "torchtitan-0.3"
    assert _entry(res, "data_parallel_shard_degree")["value"] == dp
    assert _entry(res, "global_batch")["value"] == local * dp
    assert _entry(res, "attention_kernel")["value"] == "flex"
    assert _entry(res, "chunked_loss")["value"] is True
    sp = _entry(res, "sequence_parallel")
    assert sp["value"] is True and sp["rule"] == "parallelism.enable_sequence_parallel default true (configs.py l. 160)"
    g = _entry(res, "training.disable_cuda_graphs")
    assert (g["field"], g["value"]) == (None, False)
    # the launch line's options as the record's two settings (was one setting '--module llama3 --config llama3_8b',
    # value null, as the grammar read the text)
    mod, conf = _entry(res, "--module"), _entry(res, "--config")
    assert (mod["value"], conf["value"], mod["line"]) == ("llama3", "llama3_8b", conf["line"])
    assert mod["line"].startswith("--module llama3 --config llama3_8b: ")
    assert _listed(res, "ignored", "metrics.log_freq")["value"] == 10
    _same_as_note(res, err)


def test_table_leaves_the_lines_to_the_note(cli):
    """The table prints the job's assumed lines; the trainer's are the stderr note's, not printed twice."""
    r = cli("explain", T / "train_llama3_8b.sh")
    assert r.exit_code == 0, r.stderr
    assert "rank_order=tp-cp-dp-pp: Megatron's parallel_state order" in r.stderr
    assert "rank_order=tp-cp-dp-pp" not in r.stdout


def test_a_job_yaml_has_no_trainer_block(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\n")
    res, _ = _js(cli, "explain", job)
    assert "trainer_config" not in res


def test_read_value():
    """report.py's reading of a word a reader hands over as a value (a flag's argument, an override's text): true /
    false, a whole number with thousands separators, a number, JSON, else the text (no line is read back: each is a
    record, tests/test_reader_notes_records.py)."""
    from planner.trainers.report import read_value

    assert [read_value(x) for x in ("true", "1,024", "0.1", "[1, 2]", "fsdp", "inf")] == [True, 1024, 0.1, [1, 2],
                                                                                       "fsdp", "inf"]


FIXTURES = [(T / "llama3_8b.toml", dict(gpus=64)), (T / "train_llama3_8b.sh", {}), (T / "train_llama3_8b_h100_fp8.sh", {}),
            (T / "train_gpt3_175b_distributed.sh", {}), (T / "ds_config_zero2.json", dict(model="llama3-8b", gpus=8)),
            (T / "ds_config_zero3.json", dict(model="llama3-8b", gpus=8)), (T / "run_deepspeed_example.sh", dict(gpus=8)),
            (T / "tr11-176B-ml.slurm", dict(gpus=384, hardware="a100-sxm-80gb")),
            (T / "pretrain_llama2_distributed.sh", dict(model="llama2-7b")),
            (DATA / "torchtitan03" / "run_train_8b.sh", {}), (DATA / "torchtitan03" / "torchrun_405b.sh", {})]


@pytest.mark.parametrize("path, given", FIXTURES, ids=[p.name for p, _ in FIXTURES])
def test_an_assumed_value_is_the_one_priced(path, given):
    """Every fixture: an entry naming a job field the reader set holds the job's value (a line's text that
    qualifies it, 'zero1 as bf16_optimizer', or a mapping's shorthand, bytes_per_param 2+2+4+8, starts with or
    stands for it); every line of the lists is one entry or more, none dropped."""
    from planner.cli.core import load_job
    from planner.trainers.report import Note, config_report

    read: list = []
    load_job(path, given, None, read)
    cfg = read[0]
    rep = config_report(cfg)
    for e in rep["assumed"]:
        if e["field"] in cfg.job and e["value"] is not None and e["source"] == cfg.source:
            have = cfg.job[e["field"]]
            assert e["value"] == have or isinstance(have, dict) or str(e["value"]).startswith(f"{have} "), e
    for key in ("assumed", "ignored", "not_modelled", "unmodelled"):
        assert list(dict.fromkeys(e["line"] for e in rep[key])) == list(dict.fromkeys(getattr(cfg, key))), key
        # the command line's notes over the file (cli/core.py load_job) are records too, as the readers' lines
        assert all(isinstance(x, Note) and x.kind == key for x in getattr(cfg, key)), key
