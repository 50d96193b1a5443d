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


def test_torchtitan_unknown_keys_and_custom_module_keep_their_listing(tmp_path):
    """A key torchtitan @e347b1e5e has not (the earlier layout's [checkpoint] enable_checkpoint, a made-up key) is
    listed as before; with [job] custom_config_module the types are the user's module's: not checked, said so."""
    cfg = load_trainer_config(_toml(tmp_path, '[metrics]\nmade_up_key = "x"\n[checkpoint]\nenable_checkpoint = false'),
                              gpus=8)
    assert any(a.startswith("metrics.made_up_key=x ") for a in cfg.ignored), cfg.ignored
    assert any(a.startswith("checkpoint.enable_checkpoint=false ") for a in cfg.ignored), cfg.ignored
    cfg = load_trainer_config(_toml(tmp_path, '[job]\ncustom_config_module = "my.config"\n[optimizer]\nlr = "3e-4"'),
                              gpus=8)
    assert any("custom_config_module 'my.config'" in a and "not checked" in a for a in cfg.assumed), cfg.assumed
    assert any(a.startswith("optimizer.lr=3e-4 ") for a in cfg.ignored), cfg.ignored


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
    data = json.loads(DS.read_text())
    edit(data)
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    return p


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
    anywhere (DeepSpeedConfigModel drops it); a key no model has keeps its listing."""
    def edit(d):
        d["zero_optimization"].update(allgather_bucket_size="500000000", reduce_scatter="yes",
                                      stage3_max_live_parameters=1e9, sub_group_size="auto", made_up_key="x")
        d["tensorboard"] = {"enabled": "false", "output_path": "auto"}
    cfg = load_trainer_config(_ds(tmp_path, edit), model="llama3-8b", gpus=8)
    for shown in ("allgather_bucket_size=500000000 ", "reduce_scatter=yes ", "made_up_key=x "):
        assert any(a.startswith(f"zero_optimization.{shown}") for a in cfg.not_modelled), (shown, cfg.not_modelled)
    assert any(a.startswith("tensorboard=") for a in cfg.ignored), cfg.ignored
    assert cfg.job["sharding"] == "zero2"


def test_deepspeed_reader_stricter_on_the_keys_it_prices(tmp_path):
    """The keys the reader prices keep its own checks (a JSON boolean: a string "false" for overlap_comm, which
    pydantic would take as false, is refused), ahead of which the type check refuses what pydantic refuses."""
    with pytest.raises(PlannerError, match="overlap_comm = 'false' is not true, false"):
        load_trainer_config(_ds(tmp_path, lambda d: d["zero_optimization"].update(overlap_comm="false")),
                            model="llama3-8b", gpus=8)
    with pytest.raises(PlannerError, match=r"zero_optimization.stage = 5 is not a ZeRO stage"):
        load_trainer_config(_ds(tmp_path, lambda d: d["zero_optimization"].update(stage=5)), model="llama3-8b", gpus=8)
    # a read key the reader takes (a ratio below 1: not modelled) is still checked against the model after it
    with pytest.raises(PlannerError, match=r"offload_optimizer.ratio = 1.5 is not float \(Field ge=0.0, le=1.0\)"):
        load_trainer_config(_ds(tmp_path, lambda d: d["zero_optimization"].update(
            offload_optimizer={"device": "cpu", "pin_memory": True, "ratio": 1.5})), model="llama3-8b", gpus=8)
