"""Issue 12, "rough edges a newcomer hits": one test per edge (CLI end to end)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.catalog import list_hardware, list_models, model_dir, model_from_hf_config
from planner.params import count_params

from conftest import assert_one_error

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


# ------------------------------------------------------------------ --gpus 4,096
def test_thousands_separator_in_a_gpu_list_is_an_error(cli):
    """A group with a leading zero after a comma (4,096; 1,024) is a thousands separator:
    refused. Three-digit groups without one (16,384; 64,128,256) are ambiguous: read as a
    list, with a warning that names the single count."""
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "4,096"), "--gpus '4,096'", "4096")
    assert_one_error(cli("budget", "--model", "llama3-8b", "--tokens", "1T", "--sweep-gpus", "1,024"), "--sweep-gpus", "1024")
    r = cli("fit", "--model", "llama3-8b", "--gpus", "16,384", "--top", "2")
    assert r.exit_code == 0, r.stderr
    assert "read as the list 16, 384" in r.stderr and "--gpus 16384" in r.stderr


def test_an_ambiguous_sweep_list_warns_once_from_the_library(cli):
    """planner.budget.parse_gpu_list is the one place that checks --sweep-gpus for thousands
    separators: an API caller gets the warning through warn=, the CLI prints it once (it no
    longer checks the text a second time), and a list that then fails to parse ('100,100':
    100 twice) raises without a warning first."""
    from planner.budget import parse_gpu_list
    from planner.errors import PlannerError

    want = ("--sweep-gpus '64,128,256' is read as the list 64, 128, 256; for the single count 64,128,256 "
            "write --sweep-gpus 64128256")
    notes: list[str] = []
    assert parse_gpu_list("64,128,256", warn=notes.append) == [64, 128, 256]
    assert notes == [want]
    assert parse_gpu_list("64,128,256") == [64, 128, 256]  # no warn given: silent
    notes.clear()
    with pytest.raises(PlannerError, match="100 is listed twice"):
        parse_gpu_list("100,100", warn=notes.append)
    assert notes == []
    r = cli("budget", "--model", "llama3-8b", "--tokens", "1T", "--sweep-gpus", "64,128,256", "--format", "json")
    assert r.exit_code == 1, r.stderr  # llama3-8b's default plan (TP 1, no sharding) fits at none of the counts
    assert [ln for ln in r.stderr.splitlines() if "is read as the list" in ln] == [f"warning: {want}"]


def test_a_gpu_list_still_works_and_no_count_vanishes(cli):
    """With several GPU counts the table shows the best row of each count, so none vanishes."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "4, 128", "--top", "2")
    assert r.exit_code == 0, r.stderr
    assert "on 4, 128 x h100-sxm" in r.stdout
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("│ ")]
    assert [ln.split("│")[2].strip() for ln in rows] == ["4", "128"]


# ------------------------------------------------------------------ job files
def test_paths_in_a_job_file_resolve_against_its_folder(cli, tmp_path, monkeypatch):
    jobs = tmp_path / "jobs"
    (jobs / "models").mkdir(parents=True)
    (jobs / "models" / "mine.yaml").write_text((model_dir() / "llama3-8b.yaml").read_text())
    (jobs / "a.yaml").write_text("model: models/mine.yaml\ngpus: 8\nglobal_batch: 64\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = cli("check", jobs / "a.yaml")
    assert r.exit_code in (0, 1), r.stderr  # a verdict, not a lookup error
    assert "models/mine.yaml" not in r.stderr
    r = cli("explain", jobs / "a.yaml", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["model_file"] == str((jobs / "models" / "mine.yaml").resolve())


def test_a_missing_model_file_is_a_missing_file(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: models/nope.yaml\ngpus: 8\n")
    r = cli("explain", job)
    assert_one_error(r, "job.yaml", "model file", "nope.yaml", "does not exist")
    assert "unknown model" not in r.stderr
    assert_one_error(cli("explain", "--model", "nope/config.json", "--gpus", "8"), "model file nope/config.json", "does not exist")
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", "hw/mine.yaml"),
                     "hardware file hw/mine.yaml", "does not exist")
    # a bare name is still a catalog lookup, with a did-you-mean
    assert_one_error(cli("explain", "--model", "llama-8b", "--gpus", "8"), "unknown model 'llama-8b'", "llama3-8b")


def test_misspelled_keys_get_a_did_you_mean(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\nmicro_bach: 2\n")
    assert_one_error(cli("explain", job), "job.yaml", "micro_bach", "did you mean `micro_batch`?")
    hw = yaml.safe_load((ROOT / "hardware_db" / "h100-sxm.yaml").read_text())
    hw["hbm_gb"] = hw.pop("hbm_GB")
    p = tmp_path / "gpu.yaml"
    p.write_text(yaml.safe_dump(hw))
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", p), "gpu.yaml", "hbm_gb",
                     "did you mean `hbm_GB`?")
    hw["hbm_GB"] = hw.pop("hbm_gb")
    hw["compute"]["gemm_bf16_tflops"] = hw["compute"].pop("gemm_bf16_TFLOPS")
    p.write_text(yaml.safe_dump(hw))
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", p),
                     "compute.gemm_bf16_tflops", "did you mean `gemm_bf16_TFLOPS`?")


def test_dashed_keys_are_aliases_and_a_key_given_twice_is_an_error(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\nmicro-batch: 2\nglobal-batch: 64\nreserve-gib: 2\n")
    r = cli("explain", job, "--format", "json")
    assert r.exit_code == 0, r.stderr
    p = json.loads(r.stdout)["plan"]
    assert (p["micro_batch"], p["global_batch"], p["reserve_GiB"]) == (2, 64, 2.0)
    job.write_text("model: llama3-8b\ngpus: 8\nmicro-batch: 2\nmicro_batch: 1\n")
    assert_one_error(cli("explain", job), "job.yaml", "micro_batch", "given twice")


# ------------------------------------------------------------------ GPU counts, pins
@pytest.mark.parametrize("gpus,near", [("4k", "4,096"), ("1000", "1,024")])
def test_a_gpu_count_that_does_not_factor_names_counts_that_do(cli, gpus, near):
    r = cli("fit", "--model", "llama3-8b", "--gpus", gpus)
    assert r.exit_code == 1
    assert "with valid plans:" in r.stderr and near in r.stderr and "--global-batch" in r.stderr


def test_a_tp_pin_that_does_not_divide_the_heads_is_bad_input(cli):
    assert_one_error(cli("fit", "--model", "llama3-70b", "--gpus", "64", "--tp", "3"), "--tp 3", "64 attention heads",
                     "valid: 1, 2, 4, 8")
    assert_one_error(cli("explain", "--model", "llama3-70b", "--gpus", "48", "--tp", "3"), "tp=3", "64 attention heads")


# ------------------------------------------------------------------ HF configs
def _hf_small(**extra):
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
           "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu"}
    cfg.update(extra)
    return cfg


def test_hf_config_without_tie_word_embeddings_is_tied():
    """transformers' PretrainedConfig defaults tie_word_embeddings to True. By hand for the small
    config: per layer q 64*64 + k, v 2 * 64*32 + o 64*64 + MLP 3 * 64*128 + 2 norms of 64 =
    36,992; 2 layers 73,984; embedding 1000*64 = 64,000; final norm 64: 138,048 tied, and
    64,000 more untied."""
    tied = count_params(model_from_hf_config(_hf_small(), "small/config.json")).total
    untied = count_params(model_from_hf_config(_hf_small(tie_word_embeddings=False), "small/config.json")).total
    assert tied == 138_048
    assert untied - tied == 64_000


def test_gemma2_9b_config_gives_its_published_9_24b(cli, tmp_path):
    """Gemma-2-9B's config.json (google/gemma-2-9b; it has no tie_word_embeddings key): 42
    layers x (q 3584x4096 + k, v 2 x 3584x2048 + o 4096x3584 + MLP 3 x 3584x14336 + norms
    4 x 3584: Gemma2DecoderLayer's input, post-attention, pre- and post-feedforward RMSNorms) =
    42 x 198,195,200, + embedding 256,000 x 3584 + final norm 3584 = 9,241,705,984 (Gemma 2
    report, Table 1: 9B; untied it would be 10.16B)."""
    cfg = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584,
           "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 256, "vocab_size": 256000, "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
           "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "attention_bias": False, "attention_dropout": 0.0}
    d = tmp_path / "gemma-2-9b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    # on megatron-bridge: Gemma's post-norms are a form Megatron-LM's pretrain_gpt.py does not build (stack_db megatron
    # runs.layer_kinds not_built post_norms, start-up rule STACK_LAYER_KIND; Bridge's Gemma providers build them)
    bridge = ("--stack", "megatron-bridge")
    r = cli("explain", "--model", d, "--gpus", "8", "--global-batch", "8", "--format", "json", *bridge)
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["params"]["total"] == 9_241_705_984
    assert any(a.startswith("tie_word_embeddings absent") for a in js["assumed"])
    r = cli("explain", "--model", d, "--gpus", "8", "--global-batch", "8", *bridge)
    assert "assumed (what the model file and the job leave out): tie_word_embeddings absent" in r.stdout


def test_seq_len_beyond_the_model_maximum_warns(cli):
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "16384", "--global-batch", "8")
    assert r.exit_code == 0
    assert "seq_len 16,384 is beyond the 8,192-token context of llama3-8b" in r.stderr
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--global-batch", "8")
    assert "beyond" not in r.stderr


# ------------------------------------------------------------------ listings, version, packaging
@pytest.mark.parametrize("cmd,names", [("models", list_models), ("hardware", list_hardware)])
def test_catalog_listings_never_cut_names(cli, cmd, names):
    from typer.testing import CliRunner

    from planner.cli import app

    r = CliRunner().invoke(app, [cmd], env={"COLUMNS": "80"})
    assert r.exit_code == 0
    cells = {c.strip() for ln in r.stdout.splitlines() for c in ln.split("│")[1:2]}
    for n in names():
        assert n in cells, (n, r.stdout)
    assert "…" not in r.stdout


def test_version(cli):
    from planner import __version__

    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"planner {__version__}"


def test_validate_finds_the_reference_runs_without_a_path(cli):
    rid = yaml.safe_load((DATA / "published_runs.yaml").read_text())[0]["id"]
    r = cli("validate", "--ids", rid, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert [x["id"] for x in json.loads(r.stdout)["runs"]] == [rid]
    toml = (ROOT / "pyproject.toml").read_text()
    assert '"tests/data/published_runs.yaml" = "planner/_data/published_runs.yaml"' in toml


def test_no_shipped_or_test_data_file_names_a_machine_path():
    roots = [ROOT / d for d in ("model_zoo", "hardware_db", "stack_db", "tests/data")] + [ROOT / "README.md"]
    files = [f for r in roots for f in ([r] if r.is_file() else r.rglob("*")) if f.is_file()]
    assert len(files) > 20
    bad = [str(f) for f in files if re.search(r"/(work|root|home)/", f.read_text(errors="replace"))]
    assert bad == []
