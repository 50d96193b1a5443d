"""torchtitan 0.3.0's launch line: the loose ends (issue 22, 24; planner/trainers/torchtitan03.py).

Hand-derived from pytorch/torchtitan release/0.3 @4f9e9a47d and brentyi/tyro v1.0.15 (torchtitan 0.3 needs tyro >= 1.0.5,
.ci/docker/requirements.txt l. 5):
  - tyro makes a flag pair --k / --no-k of a bool with a default only (_arguments.py l. 377-412); every other option
    takes the next word, and a missing one, or a word like "--x", stops the parse (_tyro_backend.py l. 67-97, 952-995)
    with exit 2. A Literal takes one of its values; "None" is None for an `X | None`.
  - CompileConfig.components (configs.py l. 298-299) is read only for "model" (each parallelize.py) and "loss"
    (components/loss.py l. 309-315), and only with compile.enable; CompileConfig.__post_init__ (l. 303-310) stops
    async TP without compile of the model.
  - 0.3.0's qwen3 flavors build RoPE for 40960 positions (models/qwen3/__init__.py l. 430 for 14B), main's for 4096;
    decoder.py update_from_config l. 166-174 stops a longer training.seq_len (main only warns).
  - a launch line sets the run's length only by --training.steps: llama3_8b (config_registry.py l. 184-216) runs 1000
    steps; at global batch 16 x seq 8192 a step is 131,072 tokens.
"""

from __future__ import annotations

import pytest

from planner.catalog import load_model
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers import torchtitan03 as t3

from conftest import assert_one_error

HEAD = "MODULE=llama3 CONFIG=llama3_8b NGPU=8 ./run_train.sh "


def _line(tmp_path, text: str, name: str = "run.sh"):
    p = tmp_path / name
    p.write_text("#!/usr/bin/bash\n" + text + "\n")
    return p


def _read(tmp_path, text: str):
    return load_trainer_config(_line(tmp_path, text), hardware="h100-sxm")


# ------------------------------------------------------------------ (1) every option's type, as tyro parses it
def test_every_frozen_option_has_one_type():
    kinds = [t3.BOOL_OPTIONS, t3.INT_OPTIONS, t3.OPT_INT_OPTIONS, t3.FLOAT_OPTIONS, t3.OPT_FLOAT_OPTIONS, t3.STR_OPTIONS,
             t3.OPT_STR_OPTIONS, t3.FLOATS_OPTIONS, frozenset(t3.LITERAL_OPTIONS), t3.LIST_OPTIONS, t3.NOT_ONE_WORD]
    assert sum(len(k) for k in kinds) == len(t3.CLI_OPTIONS) == 222  # disjoint, and every option typed
    assert frozenset().union(*kinds) == t3.CLI_OPTIONS
    # by hand from the dataclasses: 55 booleans (configs.py's 15 among them), checkpoint.interval int (base.py),
    # lr_scheduler.decay_ratio float | None (lr_scheduler.py), checkpoint.initial_load_path str | None
    assert len(t3.BOOL_OPTIONS) == 55
    assert {"checkpoint.enable", "metrics.enable_wandb", "validator.enable", "profiler.enable_profiling"} <= t3.BOOL_OPTIONS
    assert "checkpoint.interval" in t3.INT_OPTIONS and "metrics.log_freq" in t3.INT_OPTIONS
    assert "lr_scheduler.decay_ratio" in t3.OPT_FLOAT_OPTIONS and "checkpoint.initial_load_path" in t3.OPT_STR_OPTIONS
    assert t3.LITERAL_OPTIONS["checkpoint.async_mode"] == ("disabled", "async", "async_with_pinned_mem")


@pytest.mark.parametrize("option, words", [
    ("--metrics.log_freq", ("--metrics.log_freq has no value", "an integer", "Missing value")),
    ("--checkpoint.folder --training.steps 5", ("--checkpoint.folder has no value", "a string")),
    # a value-taking option takes the next word even where it is a subcommand (tyro checks only for flag-like words)
    ("--lr_scheduler.decay_type activation-checkpoint:full", ("'activation-checkpoint:full' is not one of",
                                                              "linear, sqrt, cosine")),
    ("--metrics.no-log-freq", ("metrics.no_log_freq is no option",)),  # --no-k: booleans only
    ("--checkpoint.async_mode sync", ("'sync' is not one of", "disabled, async, async_with_pinned_mem")),
    ("--lr_scheduler.decay_ratio abc", ("'abc' is not a finite number",)),
    ("--training.max_norm inf", ("'inf' is not a finite number",)),
    ("--checkpoint.interval 1.5", ("'1.5' is not a whole number",)),
])
def test_a_value_option_without_its_value_exits_2(cli, tmp_path, option, words):
    """Before: an option outside the typed set with no word after it was read as a flag set to true."""
    p = _line(tmp_path, HEAD + option)
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), str(p), *words)


def test_values_as_tyro_types_them(tmp_path):
    cfg = _read(tmp_path, HEAD + "--checkpoint.enable --metrics.no-enable-wandb --lr_scheduler.decay_ratio None "
                                 "--dataloader.image_mean 0.5 0.25 0.125 --metrics.log_freq 5 "
                                 "--parallelism.data_parallel_shard_degree -1 --training.max_norm 2")
    assert "checkpoint.enable=true (checkpointing between steps)" in cfg.ignored
    assert "metrics.enable_wandb=false (logging)" in cfg.ignored
    assert "lr_scheduler.decay_ratio=None (the learning-rate schedule)" in cfg.ignored
    assert "dataloader.image_mean=[0.5,0.25,0.125] (the data pipeline)" in cfg.ignored  # tuple[float, ...]: 3 words
    assert "metrics.log_freq=5 (logging)" in cfg.ignored
    assert cfg.job["gpus"] == 8 and cfg.job["tp"] == 1  # shard -1: a negative number is a value, 8 / 1 = 8


# ------------------------------------------------------------------ (2) compile.components
def test_compile_components_as_0_3_reads_them(tmp_path):
    cfg = _read(tmp_path, HEAD + "--compile.components foo")  # compile off (llama3_8b sets none: enable false)
    assert cfg.job["torch_compile"] is False
    assert any(i.startswith('compile.components=["foo"] (compile.enable false: torchtitan 0.3.0 compiles no component')
               for i in cfg.ignored)
    cfg = _read(tmp_path, HEAD + "--compile.enable --compile.components model,foo")
    assert cfg.job["torch_compile"] is True  # "model" in the list
    assert any(i.startswith("compile.components 'foo' (no component of torchtitan 0.3.0") for i in cfg.ignored)
    cfg = _read(tmp_path, HEAD + "--compile.enable --compile.components foo")
    assert cfg.job["torch_compile"] is False  # compile on, but no "model": the model runs eager
    cfg = _read(tmp_path, HEAD + "--compile.enable")  # the default list ["model", "loss"]: nothing listed
    assert cfg.job["torch_compile"] is True and not any("compile.components" in i for i in cfg.ignored)


@pytest.mark.parametrize("option, words", [
    ("--parallelism.tensor_parallel_degree 2 --compile.enable-async-tensor-parallel",
     ("without --compile.enable", "CompileConfig.__post_init__ l. 303-310", "--compile.no-enable-async-tensor-parallel")),
    ("--parallelism.tensor_parallel_degree 2 --compile.enable --compile.components loss --compile.enable-async-tensor-parallel",
     ("without --compile.enable and 'model' in --compile.components",)),
    ("--parallelism.tensor_parallel_degree 2 --parallelism.no-enable-sequence-parallel --compile.enable "
     "--compile.enable-async-tensor-parallel", ("--parallelism.enable-sequence-parallel", "tp_comm_overlap needs")),
])
def test_async_tp_refusals_speak_0_3(cli, tmp_path, option, words):
    """Before: 'set torch_compile: true (--compile)', the job file's and the planner's spelling."""
    p = _line(tmp_path, HEAD + option)
    r = cli("explain", str(p), "--hardware", "h100-sxm")
    assert_one_error(r, str(p), *words)
    assert "torch_compile: true" not in r.stderr


# ------------------------------------------------------------------ (3) qwen3's RoPE length at 0.3.0
def test_qwen3_flavors_carry_0_3_rope_length():
    assert load_model("torchtitan:qwen3/14B").max_seq_len == 4096  # main's flavor
    assert load_model("torchtitan:qwen3/14B").max_seq_len_by_stack == {"torchtitan-0.3": 40960}
    assert load_model("torchtitan:qwen3/30B-A3B").max_seq_len_by_stack == {"torchtitan-0.3": 40960}  # main 262144
    assert load_model("torchtitan:qwen3/debugmodel").max_seq_len_by_stack == {}  # 4096 at both
    assert load_model("torchtitan:llama3/8B").max_seq_len_by_stack == {}  # 131072 at both


def _warnings(**kw):
    return resolve(Job(**kw))[2]


def test_beyond_context_reads_the_stacks_length(tmp_path):
    cfg = _read(tmp_path, "MODULE=qwen3 CONFIG=qwen3_14b NGPU=8 ./run_train.sh --training.seq_len 8192 "
                          "--training.local_batch_size 1")
    assert cfg.job["seq_len"] == 8192
    assert not any("beyond" in w for w in resolve(Job(**cfg.job))[2])  # 8192 <= 40960 (before: beyond 4,096)
    kw = dict(model="torchtitan:qwen3/14B", gpus=8, global_batch=8, seq_len=8192, hardware="h100-sxm")
    assert not any("beyond" in w for w in _warnings(**kw, stack="torchtitan-0.3"))
    assert any("beyond the 4,096-token context" in w for w in _warnings(**kw, stack="torchtitan"))  # main's flavor
    w = _warnings(**{**kw, "seq_len": 45056}, stack="torchtitan-0.3")
    assert any("beyond the 40,960-token context of torchtitan:qwen3/14B (its max_seq_len_by_stack torchtitan-0.3)" in x
               for x in w)


def test_a_launch_line_beyond_0_3_rope_is_refused(cli, tmp_path):
    ok = _read(tmp_path, "MODULE=qwen3 CONFIG=qwen3_14b NGPU=8 ./run_train.sh --training.seq_len 40960 "
                         "--training.local_batch_size 1")
    assert ok.job["seq_len"] == 40960
    p = _line(tmp_path, "MODULE=qwen3 CONFIG=qwen3_14b NGPU=8 ./run_train.sh --training.seq_len 40961", "b.sh")
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), str(p), "RoPE table for 40960 positions",
                     "models/qwen3/__init__.py l. 430", "update_from_config l. 166-174", "at most 40960")
    p = _line(tmp_path, "MODULE=deepseek_v3 CONFIG=deepseek_v3_16b NGPU=8 ./run_train.sh --training.seq_len 16385", "c.sh")
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), "16384 positions")  # 4096 * 4, l. 428


# ------------------------------------------------------------------ (4) the export's steps
def _plan(**kw) -> dict:
    settings, plan, _ = resolve(Job(**{"model": "llama3-8b", "gpus": 8, "global_batch": 16, "seq_len": 8192,
                                       "hardware": "h100-sxm", "stack": "torchtitan-0.3", **kw}))
    return to_json(settings, plan, evaluate(settings, plan))["plan"]


def test_export_round_trips_the_tokens_or_refuses(tmp_path):
    # 8000 steps x 131,072 = 1,048,576,000 tokens: written and read back
    text, _ = export_plan(_plan(tokens=1_048_576_000), "torchtitan")
    assert "--training.steps 8000" in text
    back = load_trainer_config(_line(tmp_path, text.split("\n", 1)[1]), hardware="h100-sxm")
    assert back.job["tokens"] == 1_048_576_000
    # 1e9 / 131,072 = 7629.39 steps: refused, naming the two whole runs (7629 and 7630 steps)
    with pytest.raises(PlannerError, match="not a whole number of steps") as e:
        export_plan(_plan(tokens=1e9), "torchtitan")
    assert "llama3_8b's own 1,000 steps" in e.value.message
    assert e.value.hint == "plan --tokens 999948288 (7,629 steps) or 1000079360 (7,630 steps)"
    # no token count: the function's 1000 steps, said with their tokens (1000 x 131,072)
    text, notes = export_plan(_plan(), "torchtitan")
    assert "--training.steps" not in text
    assert any(n.startswith("training.steps: the plan sets no token count; llama3_8b's 1,000 steps run "
                            "(131,072,000 tokens;") for n in notes)


def test_export_refusal_exits_2(cli):
    r = cli("export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
            "--stack", "torchtitan-0.3", "--hardware", "h100-sxm", "--tokens", "1e9")
    assert_one_error(r, "not a whole number of steps", "--tokens 999948288")
