"""Issue "readers": the torchtitan TOML reader and the DeepSpeed JSON reader refuse (exit 2, the file, the key, the
type the trainer declares, the value) a value of another type than the trainer's config declares, at the trainer's
own rules: torchtitan @e347b1e5e's dataclasses as tyro v1.0.15 checks a TOML's values (planner/trainers/
torchtitan_types.py: it warns and runs on; a number is never warned, the first item of a list only), DeepSpeed
@38327e07's pydantic models in pydantic's lax mode (planner/trainers/deepspeed_types.py: "5" is an int, "yes" a
bool, "auto" dropped). One case per kind of mistyped value; what the trainer takes is read as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config
from planner.trainers.torchtitan_types import MAIN_TYPES, tyro_warns
from conftest import edited_json

TRAINERS = Path(__file__).parent / "data" / "trainer_configs"
TOML = TRAINERS / "llama3_8b.toml"
DS = TRAINERS / "ds_config_zero2.json"


def _error(r, *needles):
    """Exit 2, one `error:` line naming each needle, a hint, no traceback."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    for n in needles:
        assert n in errors[0], (n, errors[0])
    assert "hint: " in r.stderr


# a small job file (hand-written): Llama 3 8B under FSDP; each case appends its own tables
BASE = """[model]
name = "llama3"
flavor = "8B"
{model}
[training]
local_batch_size = 1
seq_len = 8192

[parallelism]
data_parallel_shard_degree = -1
"""


def _toml(tmp_path, extra: str, model: str = "", top: str = "") -> Path:
    p = tmp_path / "job.toml"
    p.write_text(top + BASE.format(model=model) + "\n" + extra + "\n", encoding="utf-8")
    return p


# ------------------------------------------------------------ torchtitan TOML: refused where tyro warns
TT_REFUSED = [  # (id, TOML appended, what the error names)
    ("str-for-float", '[optimizer]\nlr = "3e-4"', ("[optimizer] lr = '3e-4' (str) is not a number",
                                                   "lr: float", "job_config.py @e347b1e5e l. 138")),
    ("list-for-int", "[metrics]\nlog_freq = [10]", ("[metrics] log_freq = [10] (list) is not an integer",
                                                    "log_freq: int", "l. 75")),
    ("str-for-bool", '[metrics]\nenable_tensorboard = "false"', ("[metrics] enable_tensorboard = 'false' (str) is not "
                                                                 "true or false", "enable_tensorboard: bool", "l. 78")),
    ("literal-name", '[lr_scheduler]\ndecay_type = "exponential"',
     ("[lr_scheduler] decay_type = 'exponential' (str) is not one of \"linear\", \"sqrt\", \"cosine\"", "l. 192")),
    ("list-first-item", '[checkpoint]\nexclude_from_loading = [1, "optimizer"]',
     ("[checkpoint] exclude_from_loading = [1, 'optimizer'] (list) is not a list of strings", "l. 619")),
    ("table-for-float", "[optimizer.lr]\nvalue = 1", ("[optimizer] lr = {'value': 1} (dict) is not a number",)),
    ("str-for-optional-float", '[lr_scheduler]\ndecay_ratio = "0.8"',
     ("[lr_scheduler] decay_ratio = '0.8' (str) is not a number", "decay_ratio: float | None", "l. 183")),
    ("float-for-optional-int", "[training.dataloader]\nprefetch_factor = 2.0",
     ("[training.dataloader] prefetch_factor = 2.0 (float) is not an integer", "int | None", "l. 235")),
    ("int-for-optional-str", "[job]\nsave_config_file = 5", ("[job] save_config_file = 5 (int) is not a string",)),
    ("str-list-converters", "", ("[model] converters = 'float8' (str) is not a list of strings", "l. 118")),
    ("date-for-int", "[profiling]\nprofile_freq = 2024-01-01", ("[profiling] profile_freq = datetime.date(2024, 1, 1)",)),
    ("section-scalar", "metrics_x = 1", ("metrics = 5: [metrics] must be a table",)),
    ("validation-steps-0", "[validation]\nsteps = 0", ("[validation] steps = 0", "l. 978-981")),
    ("priced-literal-after-reading", "", ("[parallelism] fsdp_reshard_after_forward = 'sometimes' (str) is not one of "
                                          '"default", "always", "never"', "l. 336")),
    ("number-for-assets-path", "", ("[model] hf_assets_path = 1.5 is not a path", "manager.py @e347b1e5e l. 195-216")),
]


@pytest.mark.parametrize("extra,needles", [c[1:] for c in TT_REFUSED], ids=[c[0] for c in TT_REFUSED])
def test_torchtitan_mistyped_value_exits_2(cli, tmp_path, extra, needles):
    if "fsdp_reshard_after_forward" in needles[0]:  # read as the default by the reading, refused after it
        p = _toml(tmp_path, "")
        p.write_text(p.read_text().replace("data_parallel_shard_degree = -1", 'data_parallel_shard_degree = -1\n'
                                           'fsdp_reshard_after_forward = "sometimes"'), encoding="utf-8")
    elif "hf_assets_path" in needles[0]:  # a number tyro takes (a str field), which _validate_config trips on
        p = _toml(tmp_path, "", model="hf_assets_path = 1.5")
    elif extra == "":  # a comma-separated string: torchtitan's list_str_rule splits it on the command line only
        p = _toml(tmp_path, "", model='converters = "float8"')
    elif extra == "metrics_x = 1":  # a scalar where torchtitan has a section
        p = _toml(tmp_path, "", top="metrics = 5\n")
    else:
        p = _toml(tmp_path, extra)
    _error(cli("check", p, "--gpus", "8"), str(p), *needles)


def test_torchtitan_numbers_and_first_items_taken_as_tyro_takes_them(tmp_path):
    """tyro never warns about a number (an int for a float, a float for an int, an int for a bool, a number for a
    string) and checks a list's first item only: each read as before, listed as ignored."""
    p = _toml(tmp_path, "[optimizer]\nlr = 1\n[metrics]\nlog_freq = 10.0\nenable_tensorboard = 1\n"
              '[checkpoint]\nfolder = 5\nexclude_from_loading = ["optimizer", 1]\n'
              "[training.dataloader]\nnum_workers = 2\n[validation]\nsteps = -1\n")
    cfg = load_trainer_config(p, gpus=8)
    for shown in ("optimizer.lr=1 ", "metrics.log_freq=10.0 ", "metrics.enable_tensorboard=1 ", "checkpoint.folder=5 ",
                  'checkpoint.exclude_from_loading=["optimizer",1] '):
        assert any(a.startswith(shown) for a in cfg.ignored), (shown, cfg.ignored)
    assert cfg.job["tp"] == 1 and cfg.job["sharding"] == "fsdp"


TT_UNKNOWN = [  # (id, TOML appended, what the error and the hint name)
    ("typo-key", "[checkpoint]\nintervall = 500", ("[checkpoint] intervall is not a key of torchtitan's JobConfig "
                                                   "[checkpoint]", "config/manager.py _dict_to_dataclass l. 165-171",
                                                   "did you mean 'interval'?")),
    ("made-up-key", '[metrics]\nmade_up_key = "x"', ("[metrics] made_up_key is not a key", "valid: ")),
    ("typo-section", "[paralelism]\ntensor_parallel_degree = 2", ("[paralelism] is not a section of torchtitan's JobConfig",
                                                                  "did you mean 'parallelism'?")),
    ("nested-section-key", "[quantize.linear.float8]\nrecipe = 'rowwise'", ("[quantize.linear.float8] recipe is not a key",
                                                                             "did you mean 'recipe_name'?")),
    ("earlier-section-key", "[float8]\nenable_fsdp_float8_all_gathers = true",
     ("[float8] enable_fsdp_float8_all_gathers is not a key of torchtitan's [float8] (job_config.py @6404b932",
      "valid: emulate, enable_fsdp_float8_all_gather")),
]


@pytest.mark.parametrize("extra,needles", [c[1:] for c in TT_UNKNOWN], ids=[c[0] for c in TT_UNKNOWN])
def test_torchtitan_unknown_key_exits_2(cli, tmp_path, extra, needles):
    """A key or section neither torchtitan @e347b1e5e's JobConfig nor the earlier layout the reader reads (@6404b932)
    has: torchtitan's ConfigManager raises 'Invalid field names' when it loads the file (config/manager.py l. 165-171),
    so the reader refuses it, the hint naming the nearest key (difflib) or the valid ones."""
    p = _toml(tmp_path, extra)
    r = cli("check", p, "--gpus", "8")
    _error(r, str(p), *[n for n in needles if not n.startswith(("did you mean", "valid: "))])
    hint = [ln for ln in r.stderr.splitlines() if ln.startswith("hint: ")][0]
    for n in needles:
        if n.startswith(("did you mean", "valid: ")):
            assert n in hint, (n, hint)


def test_torchtitan_earlier_layout_keys_and_custom_module_keep_their_listing(tmp_path):
    """A key of the earlier layout the reader reads (@6404b932's [checkpoint] enable_checkpoint, [job] print_args), which
    @e347b1e5e has not, is listed as before; with [job] custom_config_module the fields and types are the user's
    module's: neither checked, said so."""
    cfg = load_trainer_config(_toml(tmp_path, '[job]\nprint_args = false\n[checkpoint]\nenable_checkpoint = false'),
                              gpus=8)
    assert any(a.startswith("job.print_args=false ") for a in cfg.ignored), cfg.ignored
    assert any(a.startswith("checkpoint.enable_checkpoint=false ") for a in cfg.ignored), cfg.ignored
    cfg = load_trainer_config(_toml(tmp_path, '[job]\ncustom_config_module = "my.config"\n[optimizer]\nlr = "3e-4"\n'
                                    '[metrics]\nmy_key = 1'), gpus=8)
    assert any("custom_config_module 'my.config'" in a and "not checked" in a for a in cfg.assumed), cfg.assumed
    assert any(a.startswith("optimizer.lr=3e-4 ") for a in cfg.ignored), cfg.ignored
    assert any(a.startswith("metrics.my_key=1 ") for a in cfg.ignored), cfg.ignored


def test_torchtitan_earlier_table_is_not_the_current_one():
    """EARLIER holds only keys @e347b1e5e lacks (a key in both would be typed by MAIN_TYPES and never reach it)."""
    from planner.trainers.torchtitan_types import EARLIER
    assert EARLIER["checkpoint"] == {"enable_checkpoint": 378} and EARLIER["training"]["compile"] == 213
    for sec, body in EARLIER.items():
        assert not set(body) & set(MAIN_TYPES.get(sec, {})), sec


def test_torchtitan_type_table_rows():
    """The transcription: 149 keys of torchtitan @e347b1e5e's JobConfig, spot rows against job_config.py, and a rule
    for every type (tyro_warns answers for each)."""
    assert sum(len(b) for b in MAIN_TYPES.values()) == 149
    assert MAIN_TYPES["optimizer"]["lr"] == (float, 138)
    assert MAIN_TYPES["training"]["max_norm"] == (float | int, 264)
    assert MAIN_TYPES["parallelism"]["module_fqns_per_model_part"][1] == 367
    assert MAIN_TYPES["quantize.grouped_mm.mx"]["recipe_name"][1] == 795
    for body in MAIN_TYPES.values():
        for typ, _ in body.values():
            for v in ("x", 1, 1.5, True, ["x"], [1], {}):
                tyro_warns(typ, v)
    # the rule's corners, as tyro v1.0.15 runs them (a Literal option of a union: no union warning)
    assert not tyro_warns(float, 1) and not tyro_warns(int, 2.5) and not tyro_warns(str, True)
    assert tyro_warns(int | None, 2.0) and not tyro_warns(float | None, 2) and tyro_warns(str | None, True)
    assert not tyro_warns(list[str], ["a", 1]) and tyro_warns(list[str], [1, "a"]) and not tyro_warns(list[str], [])


# ------------------------------------------------------------ DeepSpeed JSON: refused where pydantic (lax) refuses
def _ds(tmp_path, edit) -> Path:
    return edited_json(DS, tmp_path / "ds.json", edit)


DS_REFUSED = [  # (id, edit, what the error names)
    ("str-not-int", lambda d: d["zero_optimization"].update(allgather_bucket_size="5e8"),
     ("zero_optimization.allgather_bucket_size = '5e8' is not int (Field ge=0)", "DeepSpeedZeroConfig",
      "deepspeed/runtime/zero/config.py l. 128", "unable to parse string as an integer")),
    ("fraction-for-int", lambda d: d["zero_optimization"].update(sub_group_size=1.5),
     ("zero_optimization.sub_group_size = 1.5", "l. 168", "fractional part")),
    ("word-not-bool", lambda d: d["zero_optimization"].update(reduce_scatter="maybe"),
     ("zero_optimization.reduce_scatter = 'maybe' is not bool", "l. 104")),
    ("alias-listed-key", lambda d: d["zero_optimization"].update(stage3_max_live_parameters=[1]),
     ("zero_optimization.stage3_max_live_parameters = [1]", "l. 231")),
    ("bound", lambda d: d["zero_optimization"].update(offload_optimizer={"device": "cpu", "ratio": 1.5}),
     ("zero_optimization.offload_optimizer.ratio = 1.5", "Field ge=0.0, le=1.0", "offload_config.py l. 93",
      "less than or equal to 1")),
    ("number-for-str", lambda d: d.update(tensorboard={"enabled": True, "output_path": 5}),
     ("tensorboard.output_path = 5 is not str", "TensorBoardConfig", "monitor/config.py l. 23")),
    ("section-not-object", lambda d: d.update(wandb=3), ("wandb = 3 must be a JSON object", "WandbConfig")),
    ("partial-offload-stage-2", lambda d: d["zero_optimization"].update(offload_optimizer={"device": "cpu", "ratio": 0.5}),
     ("zero_optimization.offload_optimizer.ratio = 0.5 at stage 2", "offload_ratio_check", "l. 356-361")),
    ("null-for-bool", lambda d: d.update(hybrid_engine={"enabled": None}),
     ("hybrid_engine.enabled = null is not bool", "runtime/config.py l. 548")),
]


@pytest.mark.parametrize("edit,needles", [c[1:] for c in DS_REFUSED], ids=[c[0] for c in DS_REFUSED])
def test_deepspeed_mistyped_value_exits_2(cli, tmp_path, edit, needles):
    p = _ds(tmp_path, edit)
    _error(cli("check", p, "--model", "llama3-8b", "--gpus", "8"), str(p), "@38327e07", *needles)


def test_deepspeed_lax_values_and_auto_taken(tmp_path):
    """What pydantic's lax mode takes is read as before: "500000000" for an int, "yes" for a bool, a whole 5e8, "auto"
    anywhere (DeepSpeedConfigModel drops it); a top-level key DeepSpeed does not know keeps its listing (DeepSpeed's
    top level is a dict its get_* helpers look up, the rest unread)."""
    def edit(d):
        d["zero_optimization"].update(allgather_bucket_size="500000000", reduce_scatter="yes",
                                      stage3_max_live_parameters=1e9, sub_group_size="auto")
        d["tensorboard"] = {"enabled": "false", "output_path": "auto"}
        d["made_up_key"] = "x"
    cfg = load_trainer_config(_ds(tmp_path, edit), model="llama3-8b", gpus=8)
    for shown in ("zero_optimization.allgather_bucket_size=500000000 ", "zero_optimization.reduce_scatter=yes ",
                  "made_up_key=x "):
        assert any(a.startswith(shown) for a in cfg.not_modelled), (shown, cfg.not_modelled)
    assert any(a.startswith("tensorboard=") for a in cfg.ignored), cfg.ignored
    assert cfg.job["sharding"] == "zero2"


def _assumed(cfg, key):
    return [a for a in cfg.assumed if a.startswith(key + "=")]


def test_deepspeed_priced_keys_read_as_pydantic_reads_them(tmp_path):
    """The keys the reader prices are read as DeepSpeed reads them (pydantic's lax mode: deepspeed_types.coerce), the
    JSON's spelling listed as assumed: overlap_comm "false" prices the overlap off (it was refused before: a JSON
    boolean only), "true" / 1 on; the stage "2" or 2.0 is ZeRO-2, "3" ZeRO-3 with its knobs as numbers from strings;
    offload pin_memory "true" pinned; a value pydantic refuses ("maybe", stage 5, "two") is still refused."""
    def read(edit):
        return load_trainer_config(_ds(tmp_path, edit), model="llama3-8b", gpus=8)
    cfg = read(lambda d: d["zero_optimization"].update(overlap_comm="false"))
    assert cfg.job["dp_comm_overlap"] is False and cfg.stated["zero_optimization.overlap_comm"] is False
    (note,) = _assumed(cfg, "zero_optimization.overlap_comm")
    assert note.startswith('zero_optimization.overlap_comm="false": read as false, as DeepSpeed reads it'), note
    assert "config_utils.py l. 105-113" in note
    base = read(lambda d: None)
    assert base.job["dp_comm_overlap"] is True and not _assumed(base, "zero_optimization.overlap_comm")
    for v in ("true", "on", 1):
        assert read(lambda d: d["zero_optimization"].update(overlap_comm=v)).job["dp_comm_overlap"] is True, v
    for v in ("2", 2.0):
        cfg = read(lambda d: d["zero_optimization"].update(stage=v))
        assert cfg.job["sharding"] == "zero2" and cfg.stated["zero_optimization.stage"] == 2, v
        assert cfg.job["deepspeed_zero3"] == base.job["deepspeed_zero3"]
    assert not _assumed(read(lambda d: d["zero_optimization"].update(stage=2.0)), "zero_optimization.stage")
    cfg = read(lambda d: d["zero_optimization"].update(stage="3", stage3_max_live_parameters="1000000000",
                                                       contiguous_gradients="false",
                                                       offload_optimizer={"device": "cpu", "pin_memory": "true"}))
    assert cfg.job["sharding"] == "fsdp" and cfg.job["dp_comm_overlap"] is True  # stage 3's default overlap
    assert cfg.job["deepspeed_zero3"]["stage3_max_live_parameters"] == 10**9
    assert cfg.job["deepspeed_zero3"]["contiguous_gradients"] == 0 and cfg.job["offload_optimizer"] == "cpu"
    assert not any("pin_memory" in a for a in cfg.not_modelled), cfg.not_modelled  # "true": pinned
    assert len(_assumed(cfg, "zero_optimization.stage")) == 1
    with pytest.raises(PlannerError, match="overlap_comm = 'maybe' is not true, false"):
        read(lambda d: d["zero_optimization"].update(overlap_comm="maybe"))
    with pytest.raises(PlannerError, match=r"zero_optimization.stage = 5 is not a ZeRO stage"):
        read(lambda d: d["zero_optimization"].update(stage=5))
    with pytest.raises(PlannerError, match=r"zero_optimization.stage = 'two' is not a ZeRO stage"):
        read(lambda d: d["zero_optimization"].update(stage="two"))
    # a read key the reader takes (a ratio below 1: not modelled) is still checked against the model after it
    with pytest.raises(PlannerError, match=r"offload_optimizer.ratio = 1.5 is not float \(Field ge=0.0, le=1.0\)"):
        read(lambda d: d["zero_optimization"].update(offload_optimizer={"device": "cpu", "pin_memory": True, "ratio": 1.5}))


DS_UNKNOWN = [  # (id, edit, what the error names, the hint)
    ("typo-in-zero", lambda d: d["zero_optimization"].update(overlap_com=True),
     ("zero_optimization.overlap_com is not a key of DeepSpeed's DeepSpeedZeroConfig", "extra=\"forbid\"",
      "Extra inputs are not permitted"), "did you mean 'overlap_comm'?"),
    ("made-up-in-zero", lambda d: d["zero_optimization"].update(made_up_key="x"),
     ("zero_optimization.made_up_key is not a key",), "valid keys of zero_optimization: allgather_bucket_size"),
    ("typo-in-offload", lambda d: d["zero_optimization"].update(offload_optimizer={"device": "cpu", "pin_memry": True}),
     ("zero_optimization.offload_optimizer.pin_memry is not a key of DeepSpeed's DeepSpeedZeroOffloadOptimizerConfig",
      "offload_config.py"), "did you mean 'pin_memory'?"),
    ("typo-in-monitor", lambda d: d.update(wandb={"enabled": False, "projet": "x"}),
     ("wandb.projet is not a key of DeepSpeed's WandbConfig",), "did you mean 'project'?"),
    ("typo-in-tp", lambda d: d.update(tensor_parallel={"autotp_sise": 0}),
     ("tensor_parallel.autotp_sise is not a key of DeepSpeed's TPTrainingConfig",), "did you mean 'autotp_size'?"),
]


@pytest.mark.parametrize("edit,needles,hint", [c[1:] for c in DS_UNKNOWN], ids=[c[0] for c in DS_UNKNOWN])
def test_deepspeed_unknown_key_in_a_model_section_exits_2(cli, tmp_path, edit, needles, hint):
    """A key a DeepSpeedConfigModel section has not: pydantic's extra="forbid" (config_utils.py l. 110) stops the run
    at start-up, so the reader refuses it, the hint naming the nearest key (difflib) or the section's keys."""
    p = _ds(tmp_path, edit)
    r = cli("check", p, "--model", "llama3-8b", "--gpus", "8")
    _error(r, str(p), "@38327e07", *needles)
    assert hint in r.stderr, r.stderr


def test_deepspeed_model_sections_take_every_field_of_their_model(tmp_path):
    """The fields MODELS does not type (TPTrainingConfig's dtype, tp, injection_policy_tuple; the nested offload
    sections) are keys of the models: not refused as unknown."""
    def edit(d):
        d["tensor_parallel"] = {"autotp_size": 0, "dtype": "bf16", "tp": {}, "injection_policy_tuple": None}
        d["zero_optimization"]["offload_param"] = {"device": "none"}
    cfg = load_trainer_config(_ds(tmp_path, edit), model="llama3-8b", gpus=8)
    assert any(a.startswith("tensor_parallel=") for a in cfg.ignored), cfg.ignored


# ------------------------------------------------------------ DeepSpeed JSON: the untyped keys as DeepSpeed computes
# with them (bf16 / fp16.enabled and the batch keys: get_scalar_param, runtime/config.py @38327e07 l. 160-171, 244-245,
# 527-535, config_utils.py l. 193-194: the JSON's value as it is, branched on by its truth and computed with by
# _set_batch_related_parameters / _batch_assertion l. 919-979)
DS_ENABLED = [  # (JSON snippet for "bf16", the job's fp16 (None: neither on), the assumed line's start or None)
    ('{"enabled": true}', False, None),
    ('{"enabled": "false"}', False, 'bf16.enabled="false": read as true: a non-empty string, which DeepSpeed\'s `if` '
                                    "takes as true: the run is in bf16, not what the word says"),
    ('{"enabled": "yes"}', False, 'bf16.enabled="yes": read as true: a non-empty string, which DeepSpeed\'s `if` takes '
                                  "as true ("),
    ('{"enabled": 1}', False, "bf16.enabled=1: read as true: a non-zero number, which DeepSpeed's `if` takes as true"),
    ('{"enabled": 0}', None, "bf16.enabled=0: read as false: zero, which DeepSpeed's `if` takes as false"),
    ('{"enabled": ""}', None, 'bf16.enabled="": read as false: an empty string'),
    ('{"enabled": null}', None, None),
]


@pytest.mark.parametrize("snippet,fp16,note", DS_ENABLED, ids=[c[0] for c in DS_ENABLED])
def test_deepspeed_enabled_read_by_its_truth(tmp_path, snippet, fp16, note):
    """bf16.enabled is read as DeepSpeed's `if self.bfloat16_enabled():` reads it (engine.py @38327e07 l. 947, 1014,
    1228): "false" is a non-empty string, so the run is bf16 (the job's fp16 false: bf16 on), said so as assumed; 0 and
    "" are off (neither enabled: fp16 left out); a JSON boolean or null says nothing."""
    cfg = load_trainer_config(_ds(tmp_path, lambda d: d.update(bf16=json.loads(snippet))), model="llama3-8b", gpus=8)
    assert cfg.job.get("fp16") is fp16, cfg.job
    lines = _assumed(cfg, "bf16.enabled")
    if note is None:
        assert not lines, lines
    else:
        (line,) = lines
        assert line.startswith(note), line
        assert "get_bfloat16_enabled l. 167-171" in line and "l. 834-835" in line


DS_ENABLED_REFUSED = [  # (id, edit, what the error names)
    ("both-on-by-truth", lambda d: d.update(fp16={"enabled": "false"}),  # bf16 true + fp16 "false" (truthy)
     ("bf16.enabled and fp16.enabled are both true (as DeepSpeed reads them)",
      "'bfloat16 and fp16 modes cannot be simultaneously enabled'", "runtime/config.py @38327e07 l. 834-835")),
    ("null-section", lambda d: d.update(bf16=None),
     ("bf16 = None must be an object", "get_scalar_param(param_dict['bf16'], 'enabled', ...)", "AttributeError")),
]

DS_BATCH_REFUSED = [  # (id, edit, what the error names): what stops DeepSpeed's _batch_assertion at start-up
    ("string", lambda d: d.update(train_batch_size="64"),
     ('train_batch_size = "64" is not a whole number from 1', "TypeError: '>' not supported between a str and an int")),
    ("list", lambda d: d.update(gradient_accumulation_steps=[2]),
     ("gradient_accumulation_steps = [2] is not a whole number", "a list stops DeepSpeed at start-up")),
    ("false", lambda d: d.update(train_micro_batch_size_per_gpu=False),
     ("train_micro_batch_size_per_gpu = false", "false is Python's 0, which fails `assert ... > 0` (l. 925-929)")),
    ("zero", lambda d: d.update(gradient_accumulation_steps=0),
     ("gradient_accumulation_steps = 0", "it fails `assert ... > 0` at start-up (l. 925-929)")),
    ("fraction", lambda d: d.update(train_micro_batch_size_per_gpu=2.5, gradient_accumulation_steps=3.2),
     ("train_micro_batch_size_per_gpu = 2.5", "a fraction of a sample")),
    ("float-product", lambda d: d.update(train_batch_size=32.0),  # 32.0 != 4 x 2 x 8: the assert, as with 32
     ("train_batch_size 32 != train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 x 8 GPUs = 64",)),
]


@pytest.mark.parametrize("edit,needles", [c[1:] for c in DS_ENABLED_REFUSED + DS_BATCH_REFUSED],
                         ids=[c[0] for c in DS_ENABLED_REFUSED + DS_BATCH_REFUSED])
def test_deepspeed_untyped_keys_refused_where_deepspeed_stops(cli, tmp_path, edit, needles):
    p = _ds(tmp_path, edit)
    _error(cli("check", p, "--model", "llama3-8b", "--gpus", "8"), str(p), *needles)


def test_deepspeed_batch_keys_computed_as_deepspeed_computes(tmp_path):
    """A whole float (64.0) and true (Python's 1) run in DeepSpeed's arithmetic as 64 and 1: read so, listed as assumed
    with the JSON's spelling; an integer, null (get_scalar_param's None: not given) and "auto" say nothing new."""
    cfg = load_trainer_config(_ds(tmp_path, lambda d: d.update(train_batch_size=64.0)), model="llama3-8b", gpus=8)
    assert cfg.job["global_batch"] == 64 and type(cfg.job["global_batch"]) is int and cfg.job["micro_batch"] == 4
    (line,) = _assumed(cfg, "train_batch_size")
    assert line.startswith("train_batch_size=64.0: read as 64: a whole float, which DeepSpeed's arithmetic takes as 64")
    assert "_batch_assertion" in line and "l. 919-979" in line
    assert "PipelineEngine" not in line  # Megatron-DeepSpeed replaces train_batch_size by its own before each step
    cfg = load_trainer_config(_ds(tmp_path, lambda d: d.update(train_micro_batch_size_per_gpu=4.0)), model="llama3-8b",
                              gpus=8)
    assert cfg.job["micro_batch"] == 4 and type(cfg.job["micro_batch"]) is int
    (line,) = _assumed(cfg, "train_micro_batch_size_per_gpu")
    assert "takes as 4; but under DeepSpeed's PipelineEngine" in line and "pipe/schedule.py l. 200-201" in line, line
    cfg = load_trainer_config(_ds(tmp_path, lambda d: d.update(train_batch_size=16, train_micro_batch_size_per_gpu=True)),
                              model="llama3-8b", gpus=8)  # 16 = 1 x 2 x 8
    assert cfg.job["micro_batch"] == 1 and cfg.job["global_batch"] == 16
    (line,) = _assumed(cfg, "train_micro_batch_size_per_gpu")
    assert line.startswith("train_micro_batch_size_per_gpu=true: read as 1: true is Python's 1"), line
    cfg = load_trainer_config(_ds(tmp_path, lambda d: d.update(train_batch_size=None)), model="llama3-8b", gpus=8)
    assert cfg.job["global_batch"] == 64 and not _assumed(cfg, "train_batch_size")  # derived: 4 x 2 x 8


# ------------------------------------------------------------ torchtitan TOML: unknown keys against the trainer's verdict
UNKNOWN_FIXTURE = Path(__file__).parent / "data" / "torchtitan_unknown_keys.json"


def _unknown_cases():
    return json.loads(UNKNOWN_FIXTURE.read_text(encoding="utf-8"))["cases"]


def test_torchtitan_unknown_key_fixture_holds_both_trainers_verdicts():
    """The fixture (scripts/tyro_rule_check.py --unknown --write, torchtitan's own ConfigManager at both commits):
    @e347b1e5e refuses every key its JobConfig has not ('Invalid field names', manager.py l. 160-172); @6404b932 takes
    the earlier layout's keys (torchtitan_types.EARLIER: its fields) and drops every other without a word (l. 157-170),
    [training] batch_size too (local_batch_size since 8570415c3)."""
    from planner.trainers.torchtitan_types import EARLIER
    cases = _unknown_cases()
    assert len(cases) == 107
    assert {c["@e347b1e5e"] for c in cases} == {"refused"}
    taken = {c["toml"] for c in cases if c["@6404b932"] == "taken"}
    assert len(taken) == sum(len(b) for b in EARLIER.values()) == 25
    assert "[float8]\nrecipe_name = 1\n" in taken and "[training]\ncompile = 1\n" in taken
    assert {c["@6404b932"] for c in cases if c["toml"] not in taken} == {"dropped"}
    assert any(c["toml"] == "[training]\nbatch_size = 4\n" and c["@6404b932"] == "dropped" for c in cases)


@pytest.mark.parametrize("case", _unknown_cases(), ids=lambda c: c["toml"].replace("\n", " ").strip())
def test_torchtitan_reader_refuses_what_torchtitan_refuses(case):
    """torchtitan_types.check's verdict is @e347b1e5e's (refused) for every key no layout the reader reads has; the
    keys of the earlier layouts it reads (@6404b932's fields, and [training] batch_size, which it prices as
    local_batch_size) are taken and named in `earlier`, whence the reader's assumed line (earlier_note) says the stack's
    torchtitan refuses them."""
    import tomllib

    from planner.trainers.torchtitan import MODELLED
    from planner.trainers.torchtitan_types import check
    earlier: list = []
    try:
        check("case: ", tomllib.loads(case["toml"]), known=lambda p, k: k in MODELLED.get(p, ()), earlier=earlier)
        verdict = "taken"
    except PlannerError:
        verdict = "refused"
    read_earlier = case["@6404b932"] == "taken" or case["toml"] == "[training]\nbatch_size = 4\n"
    assert verdict == ("taken" if read_earlier else case["@e347b1e5e"]), (case, verdict)
    if verdict == "taken":
        assert earlier, case


def test_torchtitan_earlier_layout_note(tmp_path):
    """The reader's assumed line for a file of the earlier layouts: which keys, that torchtitan @e347b1e5e refuses the
    file and @6404b932 drops [training] batch_size (so the job there runs local_batch_size's default 8)."""
    p = _toml(tmp_path, "[float8]\nemulate = false\n[checkpoint]\nenable_checkpoint = false")
    p.write_text(p.read_text().replace("local_batch_size = 1", "batch_size = 1"), encoding="utf-8")
    cfg = load_trainer_config(p, gpus=8)
    (line,) = [a for a in cfg.assumed if "the earlier layout's" in a]
    assert line.startswith("[training] batch_size, [float8], [checkpoint] enable_checkpoint: the earlier layout's "
                           "(torchtitan/config/job_config.py @6404b932; [training] batch_size the name before "
                           "local_batch_size, 8570415c3, 2025-06-05)"), line
    assert "torchtitan @e347b1e5e, the stack torchtitan's, refuses the file" in line
    assert line.endswith("so there [training] batch_size is not read and local_batch_size keeps its default, 8"), line
    assert cfg.job["micro_batch"] == 1
    assert not [a for a in load_trainer_config(_toml(tmp_path, ""), gpus=8).assumed if "the earlier layout's" in a]


def test_deepspeed_bfloat16_older_section_name(tmp_path):
    """DeepSpeed reads its bf16 section as "bf16", else by the older name "bfloat16" (runtime/constants.py @38327e07
    BFLOAT16_OLD; get_bfloat16_enabled l. 167-171): {"bfloat16": {"enabled": true}} at stage 0 is the BF16_Optimizer, as
    "bf16" is (before, it was listed as not modelled and the job read as neither bf16 nor fp16); beside "bf16" it is
    never read: listed as ignored."""
    def older(d, stage):
        d["bfloat16"] = d.pop("bf16")
        d["zero_optimization"]["stage"] = stage
    base = load_trainer_config(_ds(tmp_path, lambda d: d["zero_optimization"].update(stage=0)), model="llama3-8b", gpus=8)
    cfg = load_trainer_config(_ds(tmp_path, lambda d: older(d, 0)), model="llama3-8b", gpus=8)
    assert cfg.job == base.job and cfg.job["sharding_mode"] == "bf16_optimizer" and cfg.job["fp16"] is False
    assert any(a.startswith("bfloat16: read as bf16, DeepSpeed's older name") for a in cfg.assumed), cfg.assumed
    assert not any("bfloat16" in a for a in cfg.not_modelled), cfg.not_modelled
    cfg = load_trainer_config(_ds(tmp_path, lambda d: d.update(bfloat16={"enabled": False})), model="llama3-8b", gpus=8)
    assert cfg.job["fp16"] is False and cfg.job["sharding"] == "zero2"  # bf16's true, not bfloat16's false
    assert any(a.startswith('bfloat16={"enabled":false} (DeepSpeed reads bf16 and never') for a in cfg.ignored), cfg.ignored
    with pytest.raises(PlannerError, match=r"bfloat16 = None must be an object"):
        load_trainer_config(_ds(tmp_path, lambda d: (d.pop("bf16"), d.update(bfloat16=None))), model="llama3-8b", gpus=8)


def test_megatron_deepspeed_dtype_conflict_reads_the_json_as_deepspeed_does(tmp_path):
    """A Megatron-DeepSpeed script with --bf16 whose ds_config enables fp16 by a truthy value ("enabled": 1, which the
    check `is True` missed) is refused as one with true; "bfloat16" (the older name) agrees with --bf16; bf16 true beside
    fp16 "false" (on, by its truth) is DeepSpeed's refused pair."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from test_export_mds import _row
    from planner.trainers.export import export_plan
    text, _ = export_plan(_row(model="llama3-8b", gpus=8, tp=2, pp=2, sharding="zero1", global_batch=32, micro_batch=1,
                               seq_len=4096)["plan"], "megatron-deepspeed")
    on = '"bf16": {\n    "enabled": true\n  }'
    assert on in text and "    --bf16 \\\n" in text
    p = tmp_path / "run.sh"

    def read(json_text):
        p.write_text(text.replace(on, json_text), encoding="utf-8")
        return load_trainer_config(p)
    assert read(on).job["fp16"] is False
    with pytest.raises(PlannerError, match=r"--bf16 but .*fp16.enabled on \(as DeepSpeed reads it\)"):
        read('"fp16": {"enabled": 1}')
    assert read('"bfloat16": {"enabled": true}').job["fp16"] is False
    with pytest.raises(PlannerError, match="bf16.enabled and fp16.enabled are both true"):
        read('"bf16": {"enabled": true}, "fp16": {"enabled": "false"}')
