"""`planner check`'s suggestions spelled completely in the trainer's own file (issue 22,
planner/trainers/spelling.py), tested by applying them: for each reader, a failing config
from tests/data/trainer_configs (or a variant of one, written here from it), each suggested
setting written into the file's text, the file read back with the planner's reader (with the
same command line), and the plan it gives is the suggested plan, and it passes `check`.

The variants change one line of a fixture, named at each: the torchtitan preset at 32,768 tokens
(llama3_8b.toml: data_parallel_shard_degree -1 and no global_batch_size, as in torchtitan's
preset) and with the shard degree stated (8); the Megatron fp8 script as NVIDIA published it and
without its --global-batch-size line; the DeepSpeed ZeRO-2 JSON at 8,192 tokens with its three
batch keys, without gradient_accumulation_steps, and without train_batch_size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.check import Gates, _built_order, evaluate_job, failures
from planner.cli.core import load_job
from planner.schema import Job

DATA = Path(__file__).parent / "data" / "trainer_configs"
TOML, FP8_SH, DS2 = DATA / "llama3_8b.toml", DATA / "train_llama3_8b_h100_fp8.sh", DATA / "ds_config_zero2.json"
DS3 = DATA / "ds_config_zero3.json"
# plan keys that name the file read (its path) rather than the plan
PATH_KEYS = {"model_file", "model_sha256"}


# ---------------------------------------------------------------- writing a setting into a file's text
def _toml_value(v) -> str:
    return "true" if v is True else "false" if v is False else f'"{v}"' if isinstance(v, str) else str(v)


def apply_toml(text: str, key: str, value) -> str:
    """Set `section.name = value` in a TOML text: the line replaced where the section has it,
    else added under the section's header (a new section at the end where there is none)."""
    section, name = key.split(".", 1)
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"[{section}]"), None)
    if start is None:
        return text.rstrip("\n") + f"\n\n[{section}]\n{name} = {_toml_value(value)}\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    for i in range(start + 1, end):
        if re.match(rf"\s*{re.escape(name)}\s*=", lines[i]):
            lines[i] = f"{name} = {_toml_value(value)}"
            break
    else:
        lines.insert(start + 1, f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def apply_json(text: str, key: str, value) -> str:
    data = json.loads(text)
    *path, last = key.split(".")
    d = data
    for p in path:
        d = d.setdefault(p, {})
    if value is None:
        d.pop(last, None)
    else:
        d[last] = value
    return json.dumps(data, indent=2)


def apply_flag(text: str, flag: str, value) -> str:
    """A Megatron flag in a launch script that writes one flag a line (the fixtures' bash arrays):
    its line replaced (value None: removed), else added after --disable-bias-linear (MODEL_ARGS)."""
    pattern = re.compile(rf"^\s*{re.escape(flag)}(\s.*)?$", re.M)
    line = "" if value is None else f"    {flag}" + ("" if value is True else f" {value}")
    if pattern.search(text):
        out = pattern.sub(line, text)
        return re.sub(r"\n\n+(?=\s*--)", "\n", out) if value is None else out
    assert value is not None, f"{flag} to drop is not in the script"
    anchor = re.search(r"^\s*--disable-bias-linear\s*$", text, re.M)
    return text[:anchor.end()] + "\n" + line + text[anchor.end():]


APPLY = {"torchtitan": apply_toml, "deepspeed": apply_json, "megatron": apply_flag}


def _check(path: Path, overrides: dict) -> dict:
    read: list = []
    job, where = load_job(path, overrides, None, read)
    from planner.check import check_job

    return check_job(job, where, Gates(), read[0].fmt, read[0].stated)


def _readback(tmp_path: Path, src: Path, text: str, overrides: dict, fmt: str, launcher=None) -> tuple[int, list[dict]]:
    """Check the config `text` (written beside a copy of the fixture's name), then for every
    suggestion write its settings into the text, read the file back and compare: the same plan,
    the same memory, and it passes. A suggestion the file cannot hold (trainer_unspellable) is
    skipped, or, with `launcher` (suggestion -> the command-line options that stand for what the
    spelling names outside the file: Megatron-DeepSpeed's --tensor-model-parallel-size as --tp),
    read back with those options too. Returns (suggestions applied, the suggestions)."""
    path = tmp_path / src.name
    path.write_text(text, encoding="utf-8")
    res = _check(path, overrides)
    assert res["verdict"] == "fail"
    applied = 0
    for i, s in enumerate(res["suggestions"]):
        for st in s["trainer_settings"]:  # every written setting is in the printed spelling
            assert f"[{fmt}: " in s["description"]
        extra = {}
        if s["trainer_unspellable"]:
            if launcher is None:
                continue
            extra = launcher(s)
        new = text
        for st in s["trainer_settings"]:
            new = APPLY[fmt](new, st["key"], st["value"])
        # the fixture's own name in a folder of its own: a model the flags define is named after its file
        # (NVIDIA's fp8 script since issue 22: --rotary-base 1000000 is not llama3-8b's rope_theta)
        again = tmp_path / f"s{i}" / src.name
        again.parent.mkdir(exist_ok=True)
        again.write_text(new, encoding="utf-8")
        job, _ = load_job(again, overrides | extra)
        out = evaluate_job(job)
        # the rank order as the stack builds it (startup.built_order: orders equal up to size-1 axes are one)
        want = {k: v for k, v in s["plan"].items() if k not in PATH_KEYS} | {"rank_order": _built_order(s["plan"])}
        got = {k: v for k, v in out["plan"].items() if k not in PATH_KEYS} | {"rank_order": _built_order(out["plan"])}
        assert got == want, (s["description"], {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)})
        assert out["memory"]["total_bytes"] == s["total_bytes"], s["description"]
        assert failures(out, Gates()) == [], s["description"]
        applied += 1
    return applied, res["suggestions"]


# ------------------------------------------------------------------------------- torchtitan
def _toml_32k(shard: str = "-1") -> str:
    text = TOML.read_text(encoding="utf-8").replace("seq_len = 8192", "seq_len = 32768")
    return text.replace("data_parallel_shard_degree = -1", f"data_parallel_shard_degree = {shard}")


def test_torchtitan_inferred_shard_degree_and_global_batch(tmp_path):
    """torchtitan's preset (data_parallel_shard_degree -1, no global_batch_size) at 32,768 tokens
    on 8 H100s: CP 4 and TP 4 (dp 8 -> 2) need global_batch_size = 8 spelled (-1 would be
    local 1 x dp 2 = 2, not the checked plan's 8), and name the inferred shard degree's new value."""
    n, sugg = _readback(tmp_path, TOML, _toml_32k(), {"gpus": 8}, "torchtitan")
    assert n == len(sugg) >= 2
    [cp] = [s for s in sugg if s["changes"] == {"cp": 4}]
    assert cp["description"] == (
        "CP 1 -> 4 (DP 8 -> 2) [torchtitan: [parallelism] context_parallel_degree = 4; [parallelism] "
        "data_parallel_shard_degree = -1 (the leftover GPUs: 8 -> 2); [training] global_batch_size = 8]")
    assert cp["trainer_settings"] == [{"key": "parallelism.context_parallel_degree", "value": 4},
                                      {"key": "parallelism.data_parallel_shard_degree", "value": -1},
                                      {"key": "training.global_batch_size", "value": 8}]


def test_torchtitan_stated_shard_degree_changes_with_dp(tmp_path):
    """The same preset with data_parallel_shard_degree = 8 stated: torchtitan's ParallelDims
    validation (dp_replicate x dp_shard x cp x tp x pp == world size, parallel_dims.py
    @e347b1e5e _validate) would refuse CP 4 with it left at 8: the spelling sets it to 2."""
    n, sugg = _readback(tmp_path, TOML, _toml_32k("8"), {"gpus": 8}, "torchtitan")
    assert n == len(sugg) >= 2
    for s in sugg:
        if s["plan"]["dp"] != 8:
            assert {"key": "parallelism.data_parallel_shard_degree", "value": s["plan"]["dp"]} in s["trainer_settings"]
            assert f"[parallelism] data_parallel_shard_degree = {s['plan']['dp']}" in s["description"]


# ------------------------------------------------------------------------------- Megatron
def test_megatron_fp8_script_num_microbatches_named(tmp_path):
    """NVIDIA's fp8 script (--global-batch-size 128 stated) fails at 83.0 GiB: a change of dp needs
    no flag for the batch, and the spelling names Megatron's num-microbatches 128 / (1 x 8) = 16
    -> 128 / (1 x 4) = 32."""
    n, sugg = _readback(tmp_path, FP8_SH, FP8_SH.read_text(encoding="utf-8"), {}, "megatron")
    assert n == len(sugg) >= 4
    [cp] = [s for s in sugg if s["changes"] == {"cp": 2}]
    assert cp["description"] == ("CP 1 -> 2 (DP 8 -> 4) [megatron: --context-parallel-size 2; num-microbatches 16 -> 32 "
                                 "(Megatron derives it: --global-batch-size / (--micro-batch-size x dp); no flag)]")
    assert cp["trainer_settings"] == [{"key": "--context-parallel-size", "value": 2}]
    # TP 2 runs the script's --sequence-parallel (off at tp 1 only): the flag stays, and the script read
    # back at --tensor-model-parallel-size 2 runs it (the plans compared above)
    [tp] = [s for s in sugg if "tp" in s["changes"]]
    assert tp["plan"]["sequence_parallel"] is True and tp["trainer_settings"] == [{"key": "--tensor-model-parallel-size", "value": 2}]


def test_megatron_script_without_global_batch_size(tmp_path):
    """Without --global-batch-size Megatron takes micro x dp (arguments.py validate_args): 1 x 8 = 8
    sequences; the checked plan keeps 8 at dp 4, so the spelling adds --global-batch-size 8."""
    text = FP8_SH.read_text(encoding="utf-8")
    text = re.sub(r"^\s*--global-batch-size .*\n", "", text, flags=re.M)
    n, sugg = _readback(tmp_path, FP8_SH, text, {}, "megatron")
    assert n == len(sugg) >= 3
    for s in sugg:
        has = {"key": "--global-batch-size", "value": 8} in s["trainer_settings"]
        assert has == (s["plan"]["dp"] != 8), s["description"]


# ------------------------------------------------------------------------------- DeepSpeed
DS_CLI = {"model": "llama3-8b", "gpus": 8, "seq_len": 8192}
# the micro-batch-1 plan of the ZeRO-2 JSON at 8,192 tokens needs 71.2 GiB on the H100 since branch nvlsmem priced
# NCCL's NVLS buffers (its 8-rank DP group: 16 x 2 x 1 MiB x 8 + 2 MiB = 258 MiB, memory.py [nv]), 0.04 GiB over the
# usable 71.2: the tests of its spelling run it without NVLS (NCCL_NVLS_ENABLE=0), where it fits and is suggested
DS_CLI_NO_NVLS = {**DS_CLI, "nccl_nvls_enable": 0}


def _ds(drop: str = "", src: Path = DS2, **zero) -> str:
    data = json.loads(src.read_text(encoding="utf-8"))
    data.pop(drop, None)
    data["zero_optimization"].update(zero)
    return json.dumps(data, indent=2)


def _launcher(s: dict) -> dict:
    """What a DeepSpeed suggestion names outside the JSON, as the command-line options that stand for
    Megatron-DeepSpeed's launcher arguments (--tp for --tensor-model-parallel-size, --pp for
    --pipeline-model-parallel-size) and the model code's activation checkpointing (--recompute)."""
    return {k: s["plan"][k] for k in s["changes"] if k in ("tp", "pp", "recompute")}


def test_deepspeed_micro_batch_moves_the_accumulation(tmp_path):
    """The ZeRO-2 JSON (64 = micro 4 x accumulation 2 x 8 GPUs) at 8,192 tokens: micro-batch 1
    keeps 64 = 1 x 8 x 8, so gradient_accumulation_steps 8 is spelled with it (DeepSpeed refuses
    the triple otherwise); the TP and recompute changes cannot be written in the JSON and say so,
    TP 8 with the accumulation its dp of 1 then needs (64 / (4 x 1) = 16; TP 4, 64 / (4 x 2) = 8, until SP was
    refused on megatron-deepspeed, start-up rule STACK_SP_NORM_GRADS: the TP change check finds is priced SP off now). Each reads back as the
    plan checked, with the same memory: the JSON as spelled, and for TP and recompute the launcher's
    argument the spelling names given as --tp 4 / --recompute full."""
    n, sugg = _readback(tmp_path, DS2, _ds(), DS_CLI_NO_NVLS, "deepspeed", _launcher)
    assert n == len(sugg) == 3
    [mb] = [s for s in sugg if "micro_batch" in s["changes"]]
    assert mb["trainer_settings"] == [{"key": "train_micro_batch_size_per_gpu", "value": 1},
                                      {"key": "gradient_accumulation_steps", "value": 8}]
    [tp] = [s for s in sugg if "tp" in s["changes"]]
    assert tp["description"].startswith(
        "TP 1 -> 8 (DP 8 -> 1) [deepspeed: cannot be written in a DeepSpeed JSON: it has no key for TP (Megatron-DeepSpeed's "
        "--tensor-model-parallel-size 8, on its command line); with it the JSON needs \"gradient_accumulation_steps\": 16]")
    assert 64 == tp["plan"]["micro_batch"] * 16 * tp["plan"]["dp"]
    [rc] = [s for s in sugg if "recompute" in s["changes"]]
    assert rc["trainer_unspellable"] and rc["trainer_settings"] == []


def test_deepspeed_derived_and_defaulted_accumulation(tmp_path):
    """Without gradient_accumulation_steps DeepSpeed derives it from train_batch_size and the
    micro-batch: no key, a note (2 -> 8); without train_batch_size the accumulation's default 1
    would make the batch micro x dp, so it is spelled."""
    n, sugg = _readback(tmp_path, DS2, _ds("gradient_accumulation_steps"), DS_CLI_NO_NVLS, "deepspeed")
    [mb] = [s for s in sugg if "micro_batch" in s["changes"]]
    assert mb["trainer_settings"] == [{"key": "train_micro_batch_size_per_gpu", "value": 1}]
    assert mb["trainer_notes"] == ["gradient_accumulation_steps 2 -> 8 (DeepSpeed derives it: train_batch_size / "
                                   "(micro x dp); no key)"]
    n, sugg = _readback(tmp_path, DS2, _ds("train_batch_size"), DS_CLI_NO_NVLS, "deepspeed")
    [mb] = [s for s in sugg if "micro_batch" in s["changes"]]
    assert {"key": "gradient_accumulation_steps", "value": 8} in mb["trainer_settings"]


def test_deepspeed_zero_stage_written_and_read_back(tmp_path):
    """The ZeRO-2 JSON at stage 0 with micro 1 x accumulation 8 x 8 GPUs = 64 (two keys changed), at 4,096
    tokens: bf16 at stage 0 is DeepSpeed's BF16_Optimizer (engine.py @38327e07 l. 1010-1025, 1300-1350), read as
    sharding zero1, mode bf16_optimizer: llama3-8b's P = 8,030,261,248 parameters, bf16 weights 2P = 14.958 GiB,
    bf16 gradients and the fp32 accumulation buffer 6P = 44.873 GiB, the fp32 master 4P/8 = 3.739 GiB and Adam
    8P/8 = 7.479 GiB, 92.08 GiB in all on the H100's 80 (it was priced as DDP's 16 B replicated, 140.7 GiB,
    before issue 21). ZeRO-2 is spelled "zero_optimization": {"stage": 2} with "overlap_comm": false (the file's
    true, not read at stage 0, would turn on at stage 2; dp and the batch stay) and reads back as the plan checked,
    50.3 GiB with the NVLS buffers (one IPG buffer: the file's overlap_comm read at stage 0 gave two, 50.9 GiB). PP 2 (dp 8 -> 4) cannot be written in the JSON: the spelling
    names --pipeline-model-parallel-size 2 and the accumulation 64 / (1 x 4) = 16 the JSON then needs; read
    back with --pp 2 (the reader takes the batch keys at DeepSpeed's world size, the data-parallel 4) it is the
    plan checked, still the BF16_Optimizer. TP 2 likewise."""
    text = _ds(src=DS2, stage=0).replace('"train_micro_batch_size_per_gpu": 4', '"train_micro_batch_size_per_gpu": 1')
    text = text.replace('"gradient_accumulation_steps": 2', '"gradient_accumulation_steps": 8')
    path = tmp_path / "as_read" / DS2.name
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    res = _check(path, {**DS_CLI, "seq_len": 4096})
    assert (res["plan"]["sharding"], res["plan"]["sharding_mode"]) == ("zero1", "bf16_optimizer")
    t = res["memory"]["terms"]
    P = 8_030_261_248
    assert (t["weights"], t["gradients"], t["master_weights"], t["adam"]) == (2 * P, 6 * P, 4 * P / 8, 8 * P / 8)
    # 92.08 before the flash core's fp32 log-sum-exp (layers/attention.py [ls]): 32 layers x 4,096 tokens x 32 heads
    # x 4 B = 16 MiB a micro-batch in flight; 92.09 before NCCL's NVLS buffers of the 8-rank DP group (258 MiB,
    # memory.py [nv], branch nvlsmem)
    assert t["nvls_buffers"] == 16 * 2 * 2**20 * 8 + 2 * 2**20
    assert round(res["memory"]["total_bytes"] / 2**30, 2) == 92.35
    n, sugg = _readback(tmp_path, DS2, text, {**DS_CLI, "seq_len": 4096}, "deepspeed", _launcher)
    assert n == len(sugg) == 3
    [z2] = [s for s in sugg if "sharding" in s["changes"]]
    assert z2["changes"] == {"sharding": "zero2"}
    # the file's overlap_comm true is not read at stage 0 (the BF16_Optimizer, not the ZeRO optimizer: DeepSpeed
    # engine.py @38327e07 l. 1632, 1686, 1730, 1775), so the plan checked runs without it and ZeRO-2 is spelled with
    # overlap_comm false: one IPG buffer of 5e8 x 2 B, 1e9 B (0.93 GiB) below the 50.9 GiB the file's true gave
    assert z2["trainer_settings"] == [{"key": "zero_optimization.stage", "value": 2},
                                      {"key": "zero_optimization.overlap_comm", "value": False}]
    assert z2["description"] == ('sharding zero1 -> zero2 [deepspeed: "zero_optimization": {"stage": 2}; '
                                 '"zero_optimization": {"overlap_comm": false}]')
    assert round(z2["total_bytes"] / 2**30, 1) == 50.3  # 50.0 before the DP group's 258 MiB of NVLS buffers (nvlsmem)
    [pp] = [s for s in sugg if "pp" in s["changes"]]
    assert pp["trainer_unspellable"] == ["PP (Megatron-DeepSpeed's --pipeline-model-parallel-size 2, on its command line)"]
    assert pp["trainer_settings"] == [{"key": "gradient_accumulation_steps", "value": 16}]
    assert pp["plan"]["sharding_mode"] == "bf16_optimizer"
    [tp] = [s for s in sugg if "tp" in s["changes"]]
    assert tp["trainer_settings"] == [{"key": "gradient_accumulation_steps", "value": 16}]


def test_deepspeed_mics_to_zero3_written_and_read_back(tmp_path):
    """The ZeRO-3 JSON with "mics_shard_size": 2 (ZeRO-3 within pairs of GPUs: hsdp, 84.3 GiB) at 4,096
    tokens: FSDP over all 8 keeps stage 3, so only "mics_shard_size": -1 (MiCS off) is spelled, no stage
    key; read back, it is the plan checked (39.7 GiB with the NVLS buffers). Recompute full is set in the model code: read back
    with --recompute full, the JSON unchanged, it is the plan checked too."""
    n, sugg = _readback(tmp_path, DS3, _ds(src=DS3, mics_shard_size=2), {**DS_CLI, "seq_len": 4096}, "deepspeed", _launcher)
    assert n == len(sugg) == 3
    [fsdp] = [s for s in sugg if "sharding" in s["changes"]]
    assert fsdp["changes"] == {"sharding": "fsdp", "shard_group": None}
    assert fsdp["trainer_settings"] == [{"key": "zero_optimization.mics_shard_size", "value": -1}]
    assert fsdp["description"] == 'sharding hsdp (shard group 2) -> fsdp [deepspeed: "zero_optimization": {"mics_shard_size": -1}]'
    assert round(fsdp["total_bytes"] / 2**30, 1) == 39.7  # 39.4 before the DP group's 258 MiB of NVLS buffers (nvlsmem)
    [rc] = [s for s in sugg if "recompute" in s["changes"]]
    assert rc["trainer_settings"] == [] and rc["trainer_unspellable"] == ["activation checkpointing (set in the model code)"]


def test_deepspeed_batch_keys_read_at_the_data_parallel_size(tmp_path):
    """The ZeRO-2 JSON (64 = 4 x 2 x 8) under --tp 4 on 8 GPUs: DeepSpeed checks the triple at its
    world size, Megatron-DeepSpeed's data-parallel size 2 (config.py world_size =
    mpu.get_data_parallel_world_size()), 4 x 2 x 2 = 16 != 64: refused, as DeepSpeed refuses it; with
    "gradient_accumulation_steps": 8 (4 x 8 x 2 = 64) it reads as tp 4, dp 2, 8 micro-batches."""
    from planner.errors import PlannerError

    path = tmp_path / DS2.name
    path.write_text(_ds(), encoding="utf-8")
    with pytest.raises(PlannerError) as e:
        load_job(path, {**DS_CLI, "tp": 4})
    assert e.value.message.endswith("train_batch_size 64 != train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 "
                                    "x 2 data-parallel ranks = 16")
    path.write_text(apply_json(_ds(), "gradient_accumulation_steps", 8), encoding="utf-8")
    job, _ = load_job(path, {**DS_CLI, "tp": 4})
    plan = evaluate_job(job)["plan"]
    assert (plan["tp"], plan["dp"], plan["micro_batch"], plan["global_batch"]) == (4, 2, 4, 64)
    with pytest.raises(PlannerError) as e:
        load_job(path, {**DS_CLI, "tp": 3})
    assert "--tp 3 x --pp 1 x --cp 1 = 3 does not divide 8 GPUs" in e.value.message


@pytest.mark.parametrize("knob,fmt,plan,want", [
    ("tp_comm_overlap", "deepspeed", {"tp": 2}, "cannot be written in a DeepSpeed JSON: it has no key for TP communication overlap"),
    ("tp_comm_overlap", "torchtitan", {}, "[parallelism] enable_async_tensor_parallel = false"),
    ("recompute", "torchtitan", {"recompute": "full"}, "[activation_checkpoint] mode = \"full\""),
])
def test_spell_change_single_knobs(knob, fmt, plan, want):
    from planner.trainers.spelling import spell_change

    assert spell_change(fmt, knob, plan) == want


def test_megatron_rank_order_change_applied(tmp_path):
    """The fp8 script with --use-tp-pp-dp-mapping (a line added after --disable-bias-linear) at PP 2
    and 16,384 tokens (command line): CP 4 leaves dp 1, where the default order is built
    (MEGATRON_TP_PP_DP_MAPPING), so the spelling drops the flag; read back, the plan is the one
    checked (rank order tp-cp-dp-pp), and num-microbatches 128 / (1 x 4) = 32 -> 128 / (1 x 1) = 128."""
    text = FP8_SH.read_text(encoding="utf-8").replace("    --disable-bias-linear \n",
                                                      "    --disable-bias-linear \n    --use-tp-pp-dp-mapping\n")
    n, sugg = _readback(tmp_path, FP8_SH, text, {"pp": 2, "seq_len": 16384}, "megatron")
    assert n == len(sugg)
    [cp] = [s for s in sugg if "cp" in s["changes"]]
    assert cp["changes"] == {"cp": 4, "rank_order": "tp-cp-dp-pp"}
    assert cp["trainer_settings"] == [{"key": "--context-parallel-size", "value": 4},
                                      {"key": "--use-tp-pp-dp-mapping", "value": None}]
    assert cp["trainer_notes"] == ["num-microbatches 32 -> 128 (Megatron derives it: --global-batch-size / "
                                   "(--micro-batch-size x dp); no flag)"]


def test_torchtitan_hsdp_replicate_and_shard_degrees(tmp_path):
    """The preset as Llama 3 70B (flavor "70B", torchtitan's llama3_configs) on 32 GPUs with
    data_parallel_replicate_degree 2 and data_parallel_shard_degree 16 stated (HSDP, 162.8 GiB):
    no single change passes; each pair is spelled with both degrees where they move (FSDP over
    all 32: replicate 1, shard 32; TP 8 then leaves dp 4: shard 4), and with the global batch,
    local 1 x dp 32 = 32, stated once dp shrinks."""
    text = (TOML.read_text(encoding="utf-8").replace('flavor = "8B"', 'flavor = "70B"')
            .replace("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 2")
            .replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 16"))
    n, sugg = _readback(tmp_path, TOML, text, {}, "torchtitan")
    assert n == len(sugg) >= 3
    [tp] = [s for s in sugg if s["changes"].get("tp") == 8]
    assert tp["trainer_settings"] == [{"key": "parallelism.tensor_parallel_degree", "value": 8},
                                      {"key": "parallelism.data_parallel_replicate_degree", "value": 1},
                                      {"key": "parallelism.data_parallel_shard_degree", "value": 4},
                                      {"key": "training.global_batch_size", "value": 32}]


def test_torchtitan_ddp_to_fsdp_and_to_pipeline(tmp_path):
    """The preset as DDP (data_parallel_replicate_degree 8, data_parallel_shard_degree 1) in pure
    bf16 (training.dtype "bfloat16", which torchtitan needs to run TP or PP without FSDP: start-up
    rule TORCHTITAN_FP32), 90.3 GiB: FSDP swaps the two degrees; PP 8 (dp 8 -> 1) spells replicate 1,
    the global batch 8 (local 1 x dp 1 would be 1), and no stage weight: torchtitan's defaults count the
    embedding and the output as a layer each (pipeline_parallel_first/last_stage_less_layers 1, job_config.py
    @e347b1e5e l. 377, 383), and the checked plan does too (the reader carries the file's end weights at pp 1,
    torchtitan.read_sections; before, the plan at pp 8 counted neither and the fix spelled both 0)."""
    text = (TOML.read_text(encoding="utf-8").replace("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 8")
            .replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1")
            .replace("seq_len = 8192", 'seq_len = 8192\ndtype = "bfloat16"'))
    n, sugg = _readback(tmp_path, TOML, text, {}, "torchtitan")
    assert n == len(sugg) >= 3
    [fsdp] = [s for s in sugg if s["changes"].get("sharding") == "fsdp"]
    assert fsdp["trainer_settings"] == [{"key": "parallelism.data_parallel_replicate_degree", "value": 1},
                                        {"key": "parallelism.data_parallel_shard_degree", "value": 8}]
    [pp] = [s for s in sugg if "pp" in s["changes"]]
    assert pp["trainer_settings"] == [{"key": "parallelism.pipeline_parallel_degree", "value": 8},
                                      {"key": "parallelism.data_parallel_replicate_degree", "value": 1},
                                      {"key": "training.global_batch_size", "value": 8}]


def test_a_sharding_level_torchtitan_does_not_build_is_not_spelled():
    """A torchtitan TOML checked on another stack (--stack megatron) may be offered ZeRO-1, which
    torchtitan does not build (DDP, FSDP or HSDP): the spelling says the TOML cannot hold it."""
    from planner.trainers.spelling import spell

    base = dict(model="llama3-8b", gpus=8, seq_len=4096, stack="megatron")
    before = evaluate_job(Job(**base, sharding="none"))["plan"]
    after = evaluate_job(Job(**base, sharding="zero1"))["plan"]
    sp = spell("torchtitan", ["sharding"], before, after, {})
    # no data-parallel degree for a level torchtitan does not build (the batch keys are the bare job's against the
    # TOML defaults: a job not read from a file)
    assert not any(st.key.startswith("parallelism.data_parallel") for st in sp.settings)
    assert sp.unspellable == ["sharding zero1 (distributed_optimizer: --use-distributed-optimizer)"]
    assert sp.text("torchtitan").startswith("cannot be written in a torchtitan TOML: it has no key for sharding zero1")


# ------------------------------------------------------------------------------- Megatron-DeepSpeed
MDS_SH = DATA / "run_deepspeed_example.sh"


def apply_mds_flag(text: str, flag: str, value) -> str:
    """A flag in Megatron-DeepSpeed's example script: a `    --flag value \\` line of its deepspeed line
    replaced or removed, a `ds_args=" --flag=value ${ds_args}"` line rewritten or removed, else added
    after its `--fp16 \\` line."""
    line = re.compile(rf"^\s*{re.escape(flag)}(\s+\S+)?\s*\\\s*$", re.M)
    new = "" if value is None else f"    {flag}" + ("" if value is True else f" {value}") + " \\"
    if line.search(text):
        return line.sub(lambda _: new, text).replace("\n\n    --", "\n    --")
    ds = re.compile(rf'^ds_args=" {re.escape(flag)}\b.*$', re.M)
    if ds.search(text):
        rep = "" if value is None else f'ds_args=" {flag}' + ("" if value is True else f"={value}") + ' ${ds_args}"'
        return ds.sub(lambda _: rep, text)
    assert value is not None, f"{flag} to drop is not in the script"
    anchor = re.search(r"^\s*--fp16 \\\s*$", text, re.M)
    return text[:anchor.end()] + "\n" + new + text[anchor.end():]


def test_megatron_deepspeed_suggestions_written_and_read_back(tmp_path):
    """Megatron-DeepSpeed's example script (run_deepspeed_example.sh @f4157bea) at hidden 4,096, 32 layers,
    2,048 tokens and ZeRO stage 0, its ds_config.json as a file beside it (the heredoc taken out; micro 4 x
    accumulation 32, stage 0, fp16: DeepSpeed's FP16_Optimizer, zero0), on 8 H100s: 149.9 GiB, fails (105.6
    before the FP16_Optimizer's step copies were priced, 8 B a parameter: memory.py [sg]). Each suggestion is
    spelled as the script's flags and the JSON's keys: ZeRO-1 as "zero_optimization": {"stage": 1} with
    --zero-stage 1 (the two agree: the JSON's stage runs, --zero-stage 3 against it is refused); PP 4 (PP 2 fit
    before the step copies) as --pipeline-model-parallel-size 4 with --no-pipeline-parallel dropped
    (Megatron-DeepSpeed asserts pp 1 with it) and the JSON's accumulation 1,024 / (4 x 2) = 128; each written
    into both files, read back and checked: the plan suggested, its memory, and a pass."""
    src = MDS_SH.read_text(encoding="utf-8")
    start = src.index("cat <<EOT")
    end = src.index("EOT\n", start + 10) + 4
    sh = (src[:start] + src[end:]).replace("HIDDEN=512", "HIDDEN=4096").replace("NLAYERS=24", "NLAYERS=32")
    sh = sh.replace("ZERO_STAGE=2", "ZERO_STAGE=0").replace("--seq-length 256", "--seq-length 2048")
    sh = sh.replace("--max-position-embeddings 1024", "--max-position-embeddings 2048")
    js = json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 32, "steps_per_print": 1,
                     "zero_optimization": {"stage": 0}, "fp16": {"enabled": True, "initial_scale_power": 12}}, indent=2)
    (tmp_path / "run.sh").write_text(sh, encoding="utf-8")
    (tmp_path / "ds_config.json").write_text(js, encoding="utf-8")
    cli = {"gpus": 8, "hardware": "h100-sxm"}
    res = _check(tmp_path / "run.sh", cli)
    assert res["verdict"] == "fail"
    sugg = res["suggestions"]
    assert len(sugg) >= 3
    [z1] = [s for s in sugg if s["changes"] == {"sharding": "zero1"}]
    assert z1["trainer_settings"] == [{"key": "zero_optimization.stage", "value": 1}, {"key": "--zero-stage", "value": 1}]
    [pp] = [s for s in sugg if "pp" in s["changes"]]
    assert round(res["memory"]["total_bytes"] / 2**30, 1) == 150.1  # 149.9 before the 258 MiB of NVLS buffers (nvlsmem)
    assert pp["trainer_settings"] == [{"key": "--pipeline-model-parallel-size", "value": 4},
                                      {"key": "--no-pipeline-parallel", "value": None},
                                      {"key": "gradient_accumulation_steps", "value": 128}]
    for i, s in enumerate(sugg):
        assert s["trainer_unspellable"] == [] and "[megatron-deepspeed: " in s["description"]
        new_sh, new_js = sh, js
        for st in s["trainer_settings"]:
            if st["key"].startswith("--"):
                new_sh = apply_mds_flag(new_sh, st["key"], st["value"])
            else:
                new_js = apply_json(new_js, st["key"], st["value"])
        again = tmp_path / f"s{i}"
        again.mkdir()
        (again / "run.sh").write_text(new_sh, encoding="utf-8")
        (again / "ds_config.json").write_text(new_js, encoding="utf-8")
        job, _ = load_job(again / "run.sh", cli)
        out = evaluate_job(job)
        want = {k: v for k, v in s["plan"].items() if k not in PATH_KEYS} | {"rank_order": _built_order(s["plan"])}
        got = {k: v for k, v in out["plan"].items() if k not in PATH_KEYS} | {"rank_order": _built_order(out["plan"])}
        # the rows: the suggestion's stack padding of the flags' model (vocab_rows) is the read-back model's own
        rows = want.pop("vocab_rows", None)
        assert got == want, (s["description"], {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)})
        if s["changes"].get("tp", 1) > 1:
            # the flags' model is padded as Megatron pads it, to 128 x tp (megatron_model.py): the script read back
            # at TP 4 trains a vocabulary of ceil(50,257 / 512) x 512 = 50,688 rows (TP 2: 50,432), and the
            # suggestion priced the same, the stack padding TP 1's 50,304 to 128 x 4 (stack_db vocab_padding;
            # ceil(ceil(v / 128) x 128 / 512) x 512 = ceil(v / 512) x 512): the same memory
            from planner.catalog import load_model

            assert (s["changes"]["tp"], load_model(job.model).vocab_size, rows) == (4, 50_688, 50_688)
            assert out["memory"]["total_bytes"] == pytest.approx(s["total_bytes"], rel=1e-12)
        else:
            assert out["memory"]["total_bytes"] == s["total_bytes"], s["description"]
        assert failures(out, Gates()) == [], s["description"]
