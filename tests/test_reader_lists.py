"""Issue 22: the trainer readers sort every flag they do not price into "ignored" (no memory or
time effect, with the reason) or "not modelled" (what it changes). The Megatron-LM CI corpus's
argument files (tests/data/megatron_ci/args) leave no flag "unknown to the planner", so a new
flag in the corpus or a regression in the tables fails here; spot checks of verdicts read at
Megatron-LM @d98e8a64; torchtitan's [float8] FSDP all-gather keys as torchtitan reads them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config
from planner.trainers import megatron as m

DATA = Path(__file__).parent / "data"
ARGS = sorted((DATA / "megatron_ci" / "args").glob("*.args"))
UNKNOWN = "unknown to the planner: it may change memory or time"


def _unread(path: Path) -> dict:
    flags, _ = m.parse_flags(shlex.split(path.read_text(), comments=True), f"{path.name}: ")
    return {k: m.classify_unread(k, v) for k, v in flags.items()
            if k not in m.BOOL_FLAGS and k not in m.VALUE_FLAGS and k not in m.BOOL_READ}


def test_ci_corpus_has_no_unknown_flag():
    assert len(ARGS) == 404
    unknown = sorted({k for p in ARGS for k, (_, why) in _unread(p).items() if why == UNKNOWN})
    assert unknown == []


def test_unknown_flag_still_reported():
    assert m.classify_unread("--no-such-flag-at-all", True) == ("not_modelled", UNKNOWN)


@pytest.mark.parametrize("flag,value,kind,word", [
    ("--norm-epsilon", "1e-5", "ignored", "numerics"),
    ("--moe-router-topk-scaling-factor", "2.5", "ignored", "numerics"),
    ("--mtp-loss-scaling-factor", "0.1", "ignored", "numerics"),
    ("--attention-softmax-in-fp32", True, "ignored", "own core attention"),  # read with --transformer-impl local
    ("--dist-ckpt-strictness", "log_all", "ignored", "checkpointing"),
    ("--use-persistent-ckpt-worker", True, "ignored", "checkpointing"),
    ("--muon-momentum", "0.9", "ignored", "optimizer hyper-parameter"),
    ("--fim-rate", "0.5", "ignored", "data pipeline"),
    ("--deterministic-mode", True, "not_modelled", "slower"),
    ("--check-weight-hash-across-dp-replicas-interval", "10", "not_modelled", "hashes"),
    ("--vocab-extra-ids", "100", "not_modelled", "larger vocabulary"),
    # (--megatron-fsdp-main-grads-dtype / --megatron-fsdp-grad-comm-dtype are read: tests/test_megatron_fsdp_grads.py;
    # --megatron-fsdp-main-params-dtype too: test_megatron_fsdp_main_params_dtype)
    ("--mamba-state-dim", "128", "not_modelled", "Mamba"),
    ("--export-kd-cfg", "x.yaml", "not_modelled", "teacher"),
])
def test_verdicts(flag, value, kind, word):
    got_kind, why = m.classify_unread(flag, value)
    assert got_kind == kind and word in why


def _titan(tmp_path, body: str, gpus: int = 8):
    p = tmp_path / "t.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\n' + body)
    return load_trainer_config(p, gpus=gpus)


FP8 = 'converters = ["float8"]\n[parallelism]\ndata_parallel_shard_degree = -1\n[float8]\n'


def test_torchtitan_fp8_all_gather_true_is_priced(tmp_path):
    # read into the job's fp8_allgather (step.py [15]), not Megatron's fp8_param_gather
    cfg = _titan(tmp_path, FP8 + "enable_fsdp_float8_all_gather = true\n")
    assert cfg.job["precision"] == "fp8" and cfg.job["fp8_recipe"] == "tensorwise" and "fp8_param_gather" not in cfg.job
    assert cfg.job["fp8_allgather"] is True
    assert not any("enable_fsdp_float8_all_gather" in x for x in cfg.ignored + cfg.not_modelled + cfg.assumed)


def test_torchtitan_fp8_all_gather_false_is_priced(tmp_path):
    cfg = _titan(tmp_path, FP8 + "enable_fsdp_float8_all_gather = false\n"
                 "precompute_float8_dynamic_scale_for_fsdp = true\n")
    assert cfg.job["fp8_allgather"] is False
    assert not any("enable_fsdp_float8_all_gather" in x for x in cfg.not_modelled + cfg.assumed)
    assert any(x.startswith("float8.precompute_float8_dynamic_scale_for_fsdp=true (read only") for x in cfg.ignored)


def test_torchtitan_fp8_all_gather_without_converter_ignored(tmp_path):
    cfg = _titan(tmp_path, "[float8]\nenable_fsdp_float8_all_gather = true\n")
    assert not any("enable_fsdp_float8_all_gather" in x for x in cfg.not_modelled) and "fp8_allgather" not in cfg.job
    assert any(x.startswith("float8.enable_fsdp_float8_all_gather=true (read by torchtitan only") for x in cfg.ignored)


@pytest.mark.parametrize("fqns,want", [('["output"]', ["output"]), ('"output"', ["output"]), ("[]", []),
                                       ('["output", "attention.wq"]', ["output", "attention.wq"])])
def test_torchtitan_float8_filter_fqns(tmp_path, fqns, want):
    # every list is the job's filter_fqns, priced per Linear (planner/fp8_linears.py, step.py [18]; fp8cov):
    # ["output"] keeps the output layer in bf16, [] (torchtitan's default) converts it too (fp8_output_layer),
    # ["output", "attention.wq"] keeps the query projections in bf16 as well (before: listed as not modelled);
    # the key is listed once, with what it was read as, never as not modelled; as assumed (read and priced), not as
    # ignored (before 2026-12-07: tests/ignored_keys.py found a line of the ignored list that said it was priced)
    cfg = _titan(tmp_path, FP8 + f"filter_fqns = {fqns}\n")
    assert cfg.job["filter_fqns"] == want
    assert sum(x.startswith("float8.filter_fqns=") and "priced" in x for x in cfg.assumed) == 1
    assert not any(x.startswith("float8.filter_fqns=") for x in cfg.ignored)
    assert not any(x.startswith("float8.filter_fqns=") for x in cfg.not_modelled)


def test_torchtitan_fp8_all_gather_with_recipe_refused(tmp_path):
    # torchtitan asserts enable_fsdp_float8_all_gather off when recipe_name is set (float8.py l. 65-69)
    with pytest.raises(PlannerError, match="torchtitan refuses it"):
        _titan(tmp_path, FP8 + 'recipe_name = "rowwise"\nenable_fsdp_float8_all_gather = true\n')


def test_torchtitan_tokenizer_path_ignored():
    cfg = load_trainer_config(DATA / "trainer_configs" / "llama3_8b.toml", gpus=64)
    assert any(x.startswith("model.tokenizer_path=") and "tokenizer's files" in x for x in cfg.ignored)
    assert cfg.not_modelled == []


MFSDP_ARGS = Path(__file__).parent / "data" / "megatron_ci" / "args" / (
    "gpt__gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_1node__dev_dgx_gb200.args")


@pytest.mark.parametrize("value,priced", [("fp32", True), ("bf16", False), ("auto", False)])
def test_megatron_fsdp_main_params_dtype(tmp_path, value, priced):
    """--megatron-fsdp-main-params-dtype (Megatron-LM @d98e8a64 arguments.py l. 3687-3690, default fp32) is read by
    _megatron_fsdp_buffers: fp32 is the priced 4 B main weight buffer (no warning); bf16 (a 2 B buffer) and auto (none)
    are listed in TrainerConfig.unmodelled, which `planner validate` skips; without --use-megatron-fsdp it is ignored."""
    text = MFSDP_ARGS.read_text().replace("--megatron-fsdp-main-params-dtype fp32", f"--megatron-fsdp-main-params-dtype {value}")
    p = tmp_path / "m.args"
    p.write_text(text)
    cfg = load_trainer_config(p, fmt="megatron", gpus=4, hardware="gb200-nvl72")
    hits = [u for u in cfg.unmodelled if u.startswith("--megatron-fsdp-main-params-dtype")]
    assert bool(hits) != priced
    assert not any("--megatron-fsdp-main-params-dtype" in x for x in cfg.not_modelled)
    p.write_text(text.replace("--use-megatron-fsdp\n", "").replace("--ckpt-format fsdp_dtensor\n", ""))
    cfg = load_trainer_config(p, fmt="megatron", gpus=4, hardware="gb200-nvl72")
    assert any("--megatron-fsdp-main-params-dtype" in i and "no --use-megatron-fsdp" in i for i in cfg.ignored)
