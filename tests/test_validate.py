"""`planner validate RUNS.yaml` (planner/validate.py, planner/cli/validate.py): the runs-file
schema, the documented inference rules and their `assumed` lists, skipped records with
reasons, hand-computed summary statistics, and the accuracy target on the complete records
of published_runs.yaml (run with `-s` to see the table).

tests/data/published_runs.yaml is a copy of the project's reference data
(shared/reference/published_runs.yaml); every record names its source. Records edited here
since (a field a framework's own config gives, a fix of a misread figure) say so in their
provenance, and `git log tests/data/published_runs.yaml` has why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from planner.cli import validate as cli_validate
from planner.plan import plan_dict
from planner.validate import (
    COMPLETE_GROUPS, RunRecord, _Assumed, infer_architecture, is_complete, load_runs,
)

DATA = Path(__file__).parent / "data" / "published_runs.yaml"

# The complete records (planner/validate.py `is_complete`, CLI `--complete`): source groups
# Megatron-LM 2021 Table 1, Megatron-LM README H100, MosaicML llm-foundry FSDP and torchtitan
# 2024, with a published tokens/s (or iteration time) and non-null tp, pp and num_gpus. The
# README strong-scaling group's two records give no tp/pp and no tokens/s, so none is in.
COMPLETE_IDS = [
    # Narayanan et al. 2021, Table 1 (A100 80 GB; micro-batch and vpp not published)
    'narayanan2021-t1-1.7B', 'narayanan2021-t1-3.6B', 'narayanan2021-t1-7.5B', 'narayanan2021-t1-18.4B',
    'narayanan2021-t1-39.1B', 'narayanan2021-t1-76.1B', 'narayanan2021-t1-145.6B', 'narayanan2021-t1-310.1B',
    'narayanan2021-t1-529.6B', 'narayanan2021-t1-1008.0B',
    # Megatron-LM README, H100 weak-scaling table (micro-batch, recompute, SP not published)
    'megatron-readme-h100-1.7B', 'megatron-readme-h100-7.1B', 'megatron-readme-h100-16B',
    'megatron-readme-h100-32B', 'megatron-readme-h100-70B', 'megatron-readme-h100-119B',
    'megatron-readme-h100-177B', 'megatron-readme-h100-314B', 'megatron-readme-h100-462B',
    # torchtitan docs/performance.md (2024)
    'torchtitan-a100-llama3-8B-sac-layer', 'torchtitan-a100-llama3-8B-sac-op', 'torchtitan-a100-llama3-70B-full',
    'torchtitan-a100-llama2-13B-bs2-none', 'torchtitan-a100-llama2-13B-bs2-selective-layer',
    'torchtitan-a100-llama2-13B-bs2-selective-op', 'torchtitan-a100-llama2-70B-bs1-selective-op',
    'torchtitan-a100-llama2-70B-bs2-full', 'torchtitan-h100-405b-128gpu-none',
    'torchtitan-h100-405b-128gpu-float8', 'torchtitan-h100-405b-128gpu-float8+asynctp',
    # MosaicML llm-foundry benchmark tables (pure FSDP; all 77 records)
    'mosaic-mpt-70b-h100_80gb-512gpu-s2048-ls', 'mosaic-mpt-70b-h100_80gb-256gpu-s2048-ls',
    'mosaic-mpt-70b-h100_80gb-128gpu-s2048-ls', 'mosaic-mpt-30b-h100_80gb-512gpu-s2048-ls',
    'mosaic-mpt-30b-h100_80gb-256gpu-s2048-ls', 'mosaic-mpt-30b-h100_80gb-128gpu-s2048-ls',
    'mosaic-mpt-13b-h100_80gb-512gpu-s2048-ls', 'mosaic-mpt-13b-h100_80gb-256gpu-s2048-ls',
    'mosaic-mpt-13b-h100_80gb-128gpu-s2048-ls', 'mosaic-mpt-7b-h100_80gb-512gpu-s2048-ls',
    'mosaic-mpt-7b-h100_80gb-256gpu-s2048-ls', 'mosaic-mpt-7b-h100_80gb-128gpu-s2048-ls',
    'mosaic-mpt-70b-h100_80gb-64gpu-s2048-std', 'mosaic-mpt-70b-h100_80gb-32gpu-s2048-std',
    'mosaic-mpt-30b-h100_80gb-8gpu-s8192-std', 'mosaic-mpt-30b-h100_80gb-8gpu-s4096-std',
    'mosaic-mpt-30b-h100_80gb-32gpu-s2048-std', 'mosaic-mpt-30b-h100_80gb-16gpu-s2048-std',
    'mosaic-mpt-30b-h100_80gb-8gpu-s2048-std', 'mosaic-mpt-30b-h100_80gb-8gpu-s1024-std',
    'mosaic-mpt-13b-h100_80gb-8gpu-s32768-std', 'mosaic-mpt-13b-h100_80gb-8gpu-s16384-std',
    'mosaic-mpt-13b-h100_80gb-8gpu-s4096-std', 'mosaic-mpt-13b-h100_80gb-64gpu-s2048-std',
    'mosaic-mpt-13b-h100_80gb-32gpu-s2048-std', 'mosaic-mpt-13b-h100_80gb-16gpu-s2048-std',
    'mosaic-mpt-13b-h100_80gb-8gpu-s2048-std', 'mosaic-mpt-13b-h100_80gb-8gpu-s1024-std',
    'mosaic-mpt-7b-h100_80gb-8gpu-s65536-std', 'mosaic-mpt-7b-h100_80gb-8gpu-s32768-std',
    'mosaic-mpt-7b-h100_80gb-8gpu-s8192-std', 'mosaic-mpt-7b-h100_80gb-8gpu-s4096-std',
    'mosaic-mpt-7b-h100_80gb-8gpu-s2048-std', 'mosaic-mpt-7b-h100_80gb-8gpu-s1024-std',
    'mosaic-mpt-70b-a100_80gb-64gpu-s2048-std', 'mosaic-mpt-70b-a100_80gb-32gpu-s2048-std',
    'mosaic-mpt-30b-a100_80gb-8gpu-s8192-std', 'mosaic-mpt-30b-a100_80gb-8gpu-s4096-std',
    'mosaic-mpt-30b-a100_80gb-8gpu-s2048-std', 'mosaic-mpt-30b-a100_80gb-8gpu-s1024-std',
    'mosaic-mpt-30b-a100_80gb-8gpu-s512-std', 'mosaic-mpt-13b-a100_80gb-8gpu-s32768-std',
    'mosaic-mpt-13b-a100_80gb-8gpu-s16384-std', 'mosaic-mpt-13b-a100_80gb-8gpu-s8192-std',
    'mosaic-mpt-13b-a100_80gb-8gpu-s4096-std', 'mosaic-mpt-13b-a100_80gb-8gpu-s2048-std',
    'mosaic-mpt-13b-a100_80gb-8gpu-s1024-std', 'mosaic-mpt-7b-a100_80gb-8gpu-s65536-std',
    'mosaic-mpt-7b-a100_80gb-8gpu-s32768-std', 'mosaic-mpt-7b-a100_80gb-8gpu-s16384-std',
    'mosaic-mpt-7b-a100_80gb-8gpu-s8192-std', 'mosaic-mpt-7b-a100_80gb-8gpu-s4096-std',
    'mosaic-mpt-7b-a100_80gb-8gpu-s2048-std', 'mosaic-mpt-7b-a100_80gb-8gpu-s1024-std',
    'mosaic-mpt-70b-a100_40gb-128gpu-s2048-std', 'mosaic-mpt-70b-a100_40gb-64gpu-s2048-std',
    'mosaic-mpt-30b-a100_40gb-128gpu-s2048-std', 'mosaic-mpt-30b-a100_40gb-32gpu-s2048-std',
    'mosaic-mpt-13b-a100_40gb-8gpu-s8192-std', 'mosaic-mpt-13b-a100_40gb-8gpu-s4096-std',
    'mosaic-mpt-13b-a100_40gb-128gpu-s2048-std', 'mosaic-mpt-13b-a100_40gb-64gpu-s2048-std',
    'mosaic-mpt-13b-a100_40gb-32gpu-s2048-std', 'mosaic-mpt-13b-a100_40gb-16gpu-s2048-std',
    'mosaic-mpt-13b-a100_40gb-8gpu-s2048-std', 'mosaic-mpt-13b-a100_40gb-8gpu-s1024-std',
    'mosaic-mpt-13b-a100_40gb-8gpu-s512-std', 'mosaic-mpt-7b-a100_40gb-8gpu-s16384-std',
    'mosaic-mpt-7b-a100_40gb-8gpu-s8192-std', 'mosaic-mpt-7b-a100_40gb-8gpu-s4096-std',
    'mosaic-mpt-7b-a100_40gb-128gpu-s2048-std', 'mosaic-mpt-7b-a100_40gb-64gpu-s2048-std',
    'mosaic-mpt-7b-a100_40gb-32gpu-s2048-std', 'mosaic-mpt-7b-a100_40gb-16gpu-s2048-std',
    'mosaic-mpt-7b-a100_40gb-8gpu-s2048-std', 'mosaic-mpt-7b-a100_40gb-8gpu-s1024-std',
    'mosaic-mpt-7b-a100_40gb-8gpu-s512-std',
]

RUN_KEYS = {"id", "predicted_tokens_per_s_per_gpu", "published_tokens_per_s_per_gpu", "error",
            "predicted_memory_gib", "published_memory_gib", "memory_error", "assumed", "skipped"}
SUMMARY_KEYS = {"n", "median_abs_error", "p90_abs_error"}


def _app() -> typer.Typer:
    """The real `planner` app once it registers cli/validate.py; until then a local one."""
    from planner.cli import app

    if any(c.name == "validate" for c in app.registered_commands):
        return app
    local = typer.Typer()

    @local.callback()
    def _root() -> None:
        pass

    cli_validate.register(local)
    return local


@pytest.fixture
def run():
    app, runner = _app(), CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def _record(id: str, **kw) -> dict:
    """A small, complete run record (a 4-layer GPT-like shape on 8 H100s)."""
    r = dict(id=id, model_name="GPT tiny", num_layers=4, hidden_size=1024, ffn_hidden_size=4096,
             num_attention_heads=8, num_kv_heads=8, vocab_size=32000, seq_length=2048, global_batch_size=64,
             micro_batch_size=1, gpu_type="H100-SXM-80GB", hardware="h100-sxm", num_gpus=8, tp=1, pp=1, vpp=1, cp=1,
             sharding="none", recompute="none", sequence_parallel=False, precision="bf16",
             tokens_per_sec_per_gpu=1000.0)
    r.update(kw)
    return r


def _write(tmp_path: Path, records) -> Path:
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump(records, sort_keys=False))
    return p


def _assumed_fields(row: dict) -> set[str]:
    return {a.split("=", 1)[0] for a in row["assumed"]}


# ------------------------------------------------------------------------------ schema
def test_schema_accepts_every_published_record():
    raw = yaml.safe_load(DATA.read_text())
    keys = set().union(*(r.keys() for r in raw))
    assert keys <= set(RunRecord.model_fields), keys - set(RunRecord.model_fields)
    records = load_runs(DATA)
    assert len(records) == len(raw) == 137
    assert [r.id for r in records] == [r["id"] for r in raw]


def test_typo_in_user_file_names_record_and_field(run, tmp_path):
    bad = _record("my-second-run")
    bad["num_layer"] = bad.pop("num_layers")
    path = _write(tmp_path, [_record("my-first-run"), bad])
    r = run("validate", path)
    assert r.exit_code == 2
    assert "record 1 (id 'my-second-run')" in r.stderr and "num_layer" in r.stderr and str(path) in r.stderr
    assert "hint:" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("text, message", [
    ("- id: a\n  num_layers: [1\n", "invalid YAML"),
    ("id: a\nnum_layers: 2\n", "expected a YAML list of run records, got dict"),
    ("- just a string\n", "record 0: expected a mapping"),
    ("[]\n", "no run records"),
])
def test_load_errors_name_the_file(run, tmp_path, text, message):
    p = tmp_path / "runs.yaml"
    p.write_text(text)
    r = run("validate", p)
    assert r.exit_code == 2
    assert str(p) in r.stderr and message in r.stderr


def test_duplicate_ids_are_an_error(run, tmp_path):
    r = run("validate", _write(tmp_path, [_record("a"), _record("a")]))
    assert r.exit_code == 2 and "duplicate id 'a'" in r.stderr


def test_unknown_id_or_group_is_an_error(run):
    r = run("validate", DATA, "--ids", "no-such-run")
    assert r.exit_code == 2 and "no-such-run" in r.stderr
    r = run("validate", DATA, "--group", "nope")
    assert r.exit_code == 2 and "nope" in r.stderr and "narayanan2021_table1" in r.stderr


# -------------------------------------------------------------------- inference rules
def test_hardware_comes_from_the_field_never_from_gpu_type_text(run, tmp_path):
    """Rule 1: the entry is the record's `hardware:` field. A record without it is skipped, whatever its gpu_type
    text says (before audit2 'H100-SXM-80GB' was matched to h100-sxm); `hardware_assumed` lists the entry as
    assumed with its reason; a stated entry is not listed."""
    recs = [_record("no-field", hardware=None), _record("stated"),
            _record("grand-teton", gpu_type="H100 SXM 95/96GB HBM2e", hardware="h100-sxm-96gb-hbm2e",
                    hardware_assumed="the 94-96 GB HBM2e part")]
    rows = {r["id"]: r for r in json.loads(run("validate", _write(tmp_path, recs), "--format", "json").stdout)["runs"]}
    assert rows["no-field"]["skipped"].startswith("no hardware entry for H100-SXM-80GB")
    assert rows["stated"]["skipped"] is None and rows["stated"]["hardware"] == "h100-sxm"
    assert "hardware" not in _assumed_fields(rows["stated"])
    gt = rows["grand-teton"]
    assert gt["hardware"] == "h100-sxm-96gb-hbm2e"
    assert "hardware=h100-sxm-96gb-hbm2e (gpu_type 'H100 SXM 95/96GB HBM2e'; the 94-96 GB HBM2e part)" in gt["assumed"]
    shipped = load_runs(DATA)
    assert all(r.hardware is not None for r in shipped if r.gpu_type != "TPU v4")


@pytest.mark.parametrize("model_name, family, ffn, gated, reason", [
    ("Llama-ish 1B", "llama", 2816, True, "Llama-style"),
    ("Nemotron-8B", "nemotron", 4096, False, "Nemotron"),
    ("GPT tiny", "gpt", 4096, False, "GPT-3"),
    ("mystery", None, 4096, False, "ffn/hidden = 4"),
    ("mystery", None, 2816, True, "ffn/hidden = 2.75"),
])
def test_architecture_rules(model_name, family, ffn, gated, reason):
    a = _Assumed()
    arch = infer_architecture(RunRecord(**_record("x", model_name=model_name, family=family, ffn_hidden_size=ffn)), a)
    assert arch["gated_mlp"] is gated
    assert {s.split("=")[0] for s in a.items} == {"gated_mlp", "norm", "tied_embeddings", "position_embedding",
                                                   "linear_bias", "dropout"}
    assert all(reason in s for s in a.items)
    # A record that states gated_mlp keeps it, and it is not listed as assumed.
    a = _Assumed()
    arch = infer_architecture(RunRecord(**_record("x", model_name=model_name, family=family, ffn_hidden_size=ffn,
                                                   gated_mlp=not gated)), a)
    assert arch["gated_mlp"] is (not gated) and not any(s.startswith("gated_mlp=") for s in a.items)


def test_architecture_from_catalog_model_of_the_same_shape():
    rec = next(r for r in load_runs(DATA) if r.id == "mosaic-mpt-7b-h100_80gb-8gpu-s2048-std")
    a = _Assumed()
    arch = infer_architecture(rec, a)
    # model_zoo/mpt-7b.yaml: llm-foundry benchmark config (learned positions, biases, tied).
    assert arch == dict(gated_mlp=False, norm="layernorm", tied_embeddings=True, position_embedding="learned",
                        linear_bias=True, dropout=False)
    assert all("catalog model mpt-7b" in s for s in a.items)


def test_assumed_fields_are_listed(run):
    ids = ["narayanan2021-t1-1.7B", "megatron-readme-h100-7.1B", "torchtitan-h100-405b-128gpu-none",
           "torchtitan-h100-405b-128gpu-float8"]
    r = run("validate", DATA, "--ids", ",".join(ids), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}

    nar = rows["narayanan2021-t1-1.7B"]
    assert {"gated_mlp", "micro_batch_size", "vpp", "precision", "attention"} <= _assumed_fields(nar)
    # Published in the record, so not assumed: recompute full, SP off, no ZeRO, cp 1, its hardware field (rule 1).
    assert not {"recompute", "sequence_parallel", "sharding", "cp", "hardware"} & _assumed_fields(nar)
    p = nar["plan"]
    assert (p["hardware"], p["micro_batch"], p["vpp"], p["recompute"], p["sharding"], p["sequence_parallel"],
            p["attention"], p["bytes_per_param"]) == ("a100-sxm-80gb", 1, 1, "full", "none", False, "eager", "megatron")
    assert nar["mesh"] == "TP1 PP1 DP32"

    meg = rows["megatron-readme-h100-7.1B"]
    assert "sequence_parallel=true (not published; on iff tp > 1 (Korthikanti et al. 2022))" in meg["assumed"]
    assert {"recompute", "micro_batch_size"} <= _assumed_fields(meg)
    assert (meg["plan"]["sharding"], meg["plan"]["recompute"], meg["plan"]["sequence_parallel"]) == ("zero1", "none", True)

    tt = rows["torchtitan-h100-405b-128gpu-none"]
    hw = next(a for a in tt["assumed"] if a.startswith("hardware="))
    assert hw.startswith("hardware=h100-sxm") and "HBM2e" in hw
    assert not {"micro_batch_size", "recompute", "sequence_parallel", "precision"} & _assumed_fields(tt)
    assert (tt["plan"]["sharding"], tt["plan"]["tp"], tt["plan"]["dp"], tt["plan"]["precision"]) == ("fsdp", 8, 16, "bf16")
    assert rows["torchtitan-h100-405b-128gpu-float8"]["plan"]["precision"] == "fp8"


def test_inline_shape_hf_model_type_reaches_the_model_code(run, tmp_path):
    """A record's inline shape with hf_model_type (rule 12b) is checked against the stack's model code like a
    catalog entry: on torchtitan, llama is the llama3 code (no `model code:` assumed line in the job's settings,
    which explain lists); without it the code is assumed. Beside `model:` it is an error (the entry carries its
    own)."""
    from planner.errors import PlannerError
    from planner.validate import RunRecord, Skip, new_row, prepare_record

    def settings_of(**kw):
        rec = RunRecord.model_validate(_record(kw.pop("id", "r"), **kw))
        return prepare_record(rec, new_row(rec), tmp_path, tmp_path)[0]

    # a Llama-like block (torchtitan builds no learned positions, LayerNorm or plain MLP: rule 73, docs/stack_models.md)
    tt = dict(stack="torchtitan", sharding="fsdp", vpp=None, gated_mlp=True, norm="rmsnorm",
              position_embedding="rope", linear_bias=False, dropout=False)
    assert settings_of(hf_model_type="llama", **tt).code_assumed == ()
    (line,) = settings_of(**tt).code_assumed
    assert line.startswith("model code: GPT tiny gives no hf_model_type")
    # on torchtitan 0.3.0 gpt_oss's code refuses cp > 1 (its configs' varlen attention): the record's code is checked
    with pytest.raises((Skip, PlannerError), match="TORCHTITAN_MODEL_CP"):
        settings_of(hf_model_type="gpt_oss", stack="torchtitan-0.3", sharding="fsdp", vpp=None, cp=2)
    # gpt_oss's code on torchtitan: checked (no `model code:` line); its one line says that code compiles no block
    # (ModelCode.compiles_blocks false: models/gpt_oss/infra/parallelize.py calls no apply_compile)
    (oss,) = settings_of(hf_model_type="gpt_oss", **tt).code_assumed
    assert oss.startswith("torch.compile: torchtitan's model code gpt_oss (model_type gpt_oss) applies no torch.compile")
    both = _write(tmp_path, [_record("both", model="llama3-8b", hf_model_type="llama", num_layers=32, hidden_size=4096,
                                     num_attention_heads=32, vocab_size=128256)])
    r = run("validate", both)
    assert r.exit_code == 2 and "field `hf_model_type` with `model: llama3-8b`" in r.stderr and "Traceback" not in r.stderr


def test_validate_rows_list_the_model_code_line_explain_lists(run, tmp_path):
    """A torchtitan record whose model no model code covers (hf_model_type mixtral: stack_db torchtitan
    runs.model_codes lists llama, llama4 / llama4_text, deepseek_v3 / kimi_k2, qwen3 / qwen3_moe, gpt_oss) or that
    gives none carries, in its row's assumed list, the same `model code:` line explain lists for its job
    (explain.to_json: settings.code_assumed); gpt_oss's row its `torch.compile:` line; llama's none; the table's
    last column abbreviates both as `code`."""
    from planner.explain import evaluate, to_json
    from planner.validate import RunRecord, new_row, prepare_record

    # a Llama-like block (torchtitan builds no learned positions, LayerNorm or plain MLP: rule 73, docs/stack_models.md)
    tt = dict(stack="torchtitan", sharding="fsdp", vpp=None, gated_mlp=True, norm="rmsnorm",
              position_embedding="rope", linear_bias=False, dropout=False)
    recs = [_record("mixtral", hf_model_type="mixtral", **tt), _record("none", **tt),
            _record("llama", hf_model_type="llama", **tt), _record("oss", hf_model_type="gpt_oss", **tt),
            _record("meg", hf_model_type="mixtral", stack="megatron")]
    r = run("validate", _write(tmp_path, recs), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    code = {k: [a for a in v["assumed"] if a.startswith(("model code:", "torch.compile:"))] for k, v in rows.items()}
    assert code["mixtral"] == ["model code: torchtitan has no model code for model_type 'mixtral'; torchtitan's codes "
                               "train llama, llama4, llama4_text, deepseek_v3, kimi_k2, qwen3, qwen3_moe, gpt_oss "
                               "(stack_db torchtitan runs.model_codes): priced on the stack's runs as a port of the "
                               "model would run them, the model-code start-up rules (TORCHTITAN_MODEL_*) not applied"]
    assert code["none"] == [code["mixtral"][0].replace("torchtitan has no model code for model_type 'mixtral'",
                                                       "GPT tiny gives no hf_model_type (no Hugging Face config.json)")]
    assert code["llama"] == [] and code["meg"] == []  # llama3's code; Megatron keeps no map
    assert len(code["oss"]) == 1 and code["oss"][0].startswith("torch.compile: torchtitan's model code gpt_oss")
    # the lines explain lists for the same job
    for rid in ("mixtral", "none", "oss"):
        rec = RunRecord.model_validate(next(x for x in recs if x["id"] == rid))
        settings, plan = prepare_record(rec, new_row(rec), tmp_path, tmp_path)
        assert [a for a in to_json(settings, plan, evaluate(settings, plan))["assumed"]
                if a.startswith(("model code:", "torch.compile:"))] == code[rid]
    table = run("validate", _write(tmp_path, recs[:1]))
    assert table.exit_code == 0 and " code" in table.stdout and "model code:" not in table.stdout
    assert "code the trainer's model code (none covers the model" in table.stdout


def test_published_torchtitan_records_give_their_model_type():
    """The 13 torchtitan records (inline Llama 2 / 3 shapes) name the model they ran, each citing its source:
    hf_model_type llama, the code torchtitan trained it with."""
    raw = yaml.safe_load(DATA.read_text())
    tt = [r for r in raw if str(r.get("stack", "")).startswith("torchtitan")]
    assert len(tt) == 13
    for r in tt:
        assert r["hf_model_type"] == "llama" and "model" not in r, r["id"]
        assert r["model_name"] in r["provenance"]["hf_model_type"] and "model_type \"llama\"" in r["provenance"]["hf_model_type"]


# ------------------------------------------------------------------------------ skips
# The 12 NeMo 24.07 records, what NeMo-Framework-Launcher at the 24.07 tag (8325688d) runs, read by
# hand from launcher_scripts/conf/training/<config>.yaml and the H100 fp8 example scripts (each
# record's provenance cites the key): ub_tp_comm_overlap, activations_checkpoint_granularity, and
# the gradient buffer's bytes (grad_sync_dtype bf16 from the example script or the config: 2; unset: 4;
# GPT3-175B on 512 GPUs, which no example runs: the model's fp8 config and fp8 example script set bf16, 2).
NEMO_2407 = {  # id suffix -> (tp_comm_overlap, recompute, gradient bytes)
    "GPT3-5B-64gpu": (False, "none", 2.0), "GPT3-20B-64gpu": (True, "none", 2.0),
    "GPT3-175B-128gpu": (False, "none", 2.0), "GPT3-175B-512gpu": (False, "none", 2.0),
    "LLAMA2-7B-8gpu": (False, "none", 2.0), "LLAMA2-13B-16gpu": (False, "none", 2.0),
    "LLAMA2-70B-64gpu": (True, "none", 2.0), "Nemotron-8B-64gpu": (True, "none", 4.0),
    "Nemotron-22B-64gpu": (True, "none", 4.0), "Nemotron-340B-128gpu": (False, "selective", 2.0),
    "LLAMA3-8B-8gpu": (False, "none", 2.0), "LLAMA3-70B-64gpu": (True, "none", 2.0),
}


def test_nemo_2407_records_run_their_launcher_config_settings(run):
    """Every NeMo 24.07 record sets what its NeMo-Framework-Launcher 24.07 config runs: NeMo's
    distributed_fused_adam (ZeRO-1 in memory), overlap_grad_sync, fp8 DelayedScaling, the config's
    ub_tp_comm_overlap and recompute, and the state bytes of Apex's DistributedFusedAdam under NeMo
    (bf16 weights 2, gradient buffer in grad_sync_dtype, fp32 master stored as 2-byte remainders,
    Adam 8). They reach the plan and none is listed as assumed (before: null, read as plain DDP
    with the megatron preset, 18 B a parameter replicated: 11 of 12 predicted above 79 GiB)."""
    ids = [f"nemo-24.07-h100-fp8-{k}" for k in NEMO_2407]
    r = run("validate", DATA, "--ids", ",".join(ids), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    assert len(rows) == 12
    for suffix, (ub, recompute, grad) in NEMO_2407.items():
        row = rows[f"nemo-24.07-h100-fp8-{suffix}"]
        p = row["plan"]
        assert (p["sharding"], p["dp_comm_overlap"], p["fp8_recipe"], p["tp_comm_overlap"], p["recompute"]) == (
            "zero1", True, "delayed", ub, recompute), suffix
        assert p["bytes_per_param"] == {"weights": 2.0, "gradients": grad, "master": 2.0, "optimizer": 8.0}, suffix
        assert not {"tp_comm_overlap", "sequence_parallel", "recompute", "sharding", "dp_comm_overlap",
                    "fp8_recipe", "bytes_per_param"} & _assumed_fields(row), suffix


def test_nemo_2407_records_state_vpp_fusion_and_selective_policy(run):
    """What the NeMo-Framework-Launcher 24.07 configs state beside the above: the PP 1 rows'
    virtual_pipeline_model_parallel_size null (vpp 1), the Nemotron configs' bias_activation_fusion
    false, and Nemotron-340B's selective granularity, which Megatron-Core core_r0.8.0 runs on the
    attention core only (recompute_modules [core_attn]). None of them is listed as assumed (before:
    vpp, bias_activation_fusion and selective_policy were, at the same values: no figure moved)."""
    pp1 = ["GPT3-5B-64gpu", "GPT3-20B-64gpu", "LLAMA2-7B-8gpu", "Nemotron-8B-64gpu", "LLAMA3-8B-8gpu"]
    nemotron = ["Nemotron-8B-64gpu", "Nemotron-22B-64gpu", "Nemotron-340B-128gpu"]
    ids = [f"nemo-24.07-h100-fp8-{k}" for k in sorted(set(pp1) | set(nemotron))]
    r = run("validate", DATA, "--ids", ",".join(ids), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"][len("nemo-24.07-h100-fp8-"):]: x for x in json.loads(r.stdout)["runs"]}
    for k in pp1:
        assert rows[k]["plan"]["vpp"] == 1 and "vpp" not in _assumed_fields(rows[k]), k
    for k in nemotron:
        assert rows[k]["plan"]["bias_activation_fusion"] is False, k
        assert "bias_activation_fusion" not in _assumed_fields(rows[k]), k
    big = rows["Nemotron-340B-128gpu"]
    assert big["plan"]["recompute"] == "selective" and big["plan"]["recompute_modules"] == ["core_attn"]
    assert "selective_policy" not in _assumed_fields(big)


def test_record_bias_activation_fusion_reaches_the_job(run, tmp_path):
    """A record's bias_activation_fusion is the job's (rule 13c); null leaves the stack's default,
    listed as assumed (as for the Nemotron records: a squared-ReLU MLP, rule 2b)."""
    nemotron = dict(model_name="Nemotron tiny")
    path = _write(tmp_path, [_record("off", bias_activation_fusion=False, **nemotron), _record("unstated", **nemotron)])
    r = run("validate", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    assert rows["off"]["plan"]["bias_activation_fusion"] is False
    assert "bias_activation_fusion" not in _assumed_fields(rows["off"])
    assert "bias_activation_fusion" in _assumed_fields(rows["unstated"])


def test_nemo_llama2_7b_model_state_is_nemo_distributed_adams(run, tmp_path):
    """LLAMA2-7B on 8 GPUs (TP1 PP1 DP8, no recompute, SP off: the same activations either way):
    its record's memory against the old reading of it (sharding null -> plain DDP, megatron
    preset 2 + 4 + 4 + 8 = 18 B a parameter on every rank) differs by the model state alone:
    P x (18 - (2 + 2 + (2 + 8) / 8)) = 12.75 B a parameter, P by hand for Llama 2 7B (32 layers,
    h 4096, ffn 11008, vocab 32000, untied, RMSNorm): 2 x 32000 x 4096 + 32 x (4 h^2 + 3 h ffn + 2 h) + h
    = 6,738,415,616 -> 85,914,799,104 B (80.0 GiB)."""
    rec = next(x for x in yaml.safe_load(DATA.read_text()) if x["id"] == "nemo-24.07-h100-fp8-LLAMA2-7B-8gpu")
    old = dict(rec, id="old-reading", sharding=None, bytes_per_param=None)
    r = run("validate", _write(tmp_path, [rec, old]), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    h, ffn, layers, vocab = 4096, 11008, 32, 32000
    params = 2 * vocab * h + layers * (4 * h * h + 3 * h * ffn + 2 * h) + h
    assert params == 6_738_415_616
    moved = (rows["old-reading"]["predicted_memory_gib"] - rows[rec["id"]]["predicted_memory_gib"]) * 2**30
    assert moved == pytest.approx(params * (18 - (2 + 2 + (2 + 8) / 8)), rel=1e-9)
    assert rows[rec["id"]]["predicted_memory_gib"] < 79.09 < rows["old-reading"]["predicted_memory_gib"]


def test_unknown_gpu_type_is_skipped_with_reason(run):
    r = run("validate", DATA, "--ids", "palm-540b-6144tpuv4", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert SUMMARY_KEYS <= set(js["summary"]) and js["summary"]["n"] == 0
    (row,) = js["runs"]
    assert RUN_KEYS <= set(row)
    assert row["id"] == "palm-540b-6144tpuv4"
    assert row["skipped"].startswith("no hardware entry for TPU v4")
    assert row["predicted_tokens_per_s_per_gpu"] is None and row["published_tokens_per_s_per_gpu"] == 38.79


def test_named_hardware_overrides_gpu_type(run, tmp_path):
    path = _write(tmp_path, [_record("tpu-as-h100", gpu_type="TPU v4", hardware="h100-sxm")])
    row = json.loads(run("validate", path, "--format", "json").stdout)["runs"][0]
    assert row["skipped"] is None and row["hardware"] == "h100-sxm" and "hardware" not in _assumed_fields(row)
    r = run("validate", _write(tmp_path, [_record("typo-hw", hardware="h100-sxn")]))
    assert r.exit_code == 2 and "typo-hw" in r.stderr and "hardware" in r.stderr and "h100-sxm" in r.stderr


def test_a_record_of_36_million_layers_is_priced_at_once(run, tmp_path):
    """Issue 24: a record with num_layers 36,000,000 took about a minute (the layer list was
    built layer by layer, planner/layers LayerList); it is now a head and a period. With pp 1
    every GPU holds every layer, so the memory per GPU is affine in the layer count: the
    36M-layer figure is the 4-layer one plus (36M - 4) times a layer's share, measured as
    the difference of the 8- and 4-layer records over 4 layers."""
    L = 36_000_000
    mem = {}
    for n, tps in ((4, 1000.0), (8, 1000.0), (L, 1e-4)):  # 1e-4 tokens/s: below the hardware's peak at 36M layers
        r = run("validate", _write(tmp_path, [_record(f"L{n}", num_layers=n, tokens_per_sec_per_gpu=tps)]),
                "--format", "json")
        assert r.exit_code == 0, r.stderr
        row = json.loads(r.stdout)["runs"][0]
        assert row["skipped"] is None and row["plan"]["gpus"] == 8
        mem[n] = row["predicted_memory_gib"]
    per_layer = (mem[8] - mem[4]) / 4
    assert mem[L] == pytest.approx(mem[4] + (L - 4) * per_layer, rel=1e-12)


def test_records_that_cannot_be_evaluated_are_listed_with_reasons(run, tmp_path):
    records = [
        _record("no-tp", tp=None),
        _record("bad-batch", global_batch_size=100),  # 100 sequences over dp=8 x micro-batch 1
        _record("moe", moe=True),
        _record("odd-recompute", recompute="sometimes"),
        _record("nothing-published", tokens_per_sec_per_gpu=None),
        _record("hybrid-no-group", sharding="hsdp", zero_fsdp_mode_text="HSDP (hybrid shard)"),
    ]
    # a value outside the field's list is an error (issue 24), a skipped row with --lenient
    assert run("validate", _write(tmp_path, records)).exit_code == 2
    r = run("validate", _write(tmp_path, records), "--lenient", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    why = {x["id"]: x["skipped"] for x in js["runs"]}
    # none dropped: the records the schema refuses (odd-recompute) first, the others in file order
    assert list(why) == ["odd-recompute"] + [x["id"] for x in records if x["id"] != "odd-recompute"]
    assert why["no-tp"].startswith("tp not published")
    assert "global batch 100 sequences does not divide into dp=8 x micro_batch=1" in why["bad-batch"]
    assert "dense models only" in why["moe"]
    assert "field `recompute`: Input should be 'none', 'selective' or 'full'" in why["odd-recompute"]
    assert why["nothing-published"].startswith("nothing to compare")
    assert "shard_group" in why["hybrid-no-group"]
    assert js["summary"]["n"] == 0 and js["summary"]["n_skipped"] == len(records)
    table = run("validate", _write(tmp_path, records), "--lenient")
    assert table.exit_code == 0
    assert f"skipped ({len(records)}):" in table.stdout and "bad-batch: global batch 100" in table.stdout


# ------------------------------------------------------------------------ statistics
def test_summary_statistics_by_hand(run, tmp_path, monkeypatch):
    """Predictions 1100, 1600, 4200 against published 1000, 2000 and 4000 (the last from an
    iteration time: 64 x 2048 / (4.096 s x 8 GPUs) = 4000): errors +10%, -20%, +5%.
    |err| sorted 0.05, 0.10, 0.20: median 0.10; p90 (linear) at rank 0.9 x 2 = 1.8:
    0.10 + 0.8 x (0.20 - 0.10) = 0.18. The TPU record is skipped and not counted."""
    predicted = {"m1": 1100.0, "m2": 1600.0, "m3": 4200.0}

    def fake_predict(settings, plan):
        return {"tokens_per_s_per_gpu": predicted[settings.model.name], "step_s": None, "mfu": None,
                "memory_bytes": 10 * 2**30, "plan": plan_dict(plan, settings)}

    monkeypatch.setattr("planner.validate.predict", fake_predict)
    records = [
        _record("r1", model_name="m1", tokens_per_sec_per_gpu=1000.0, memory_per_gpu_gib=8.0),
        _record("r2", model_name="m2", tokens_per_sec_per_gpu=2000.0),
        _record("r3", model_name="m3", tokens_per_sec_per_gpu=None, iteration_time_s=4.096),
        _record("r4", model_name="m1", gpu_type="TPU v4", hardware=None),
    ]
    path = _write(tmp_path, records)
    js = json.loads(run("validate", path, "--format", "json").stdout)
    rows = {x["id"]: x for x in js["runs"]}
    assert rows["r1"]["error"] == pytest.approx(0.10)
    assert rows["r2"]["error"] == pytest.approx(-0.20)
    assert rows["r3"]["published_tokens_per_s_per_gpu"] == pytest.approx(4000.0)
    assert rows["r3"]["published_from"] == "iteration_time_s"
    assert rows["r3"]["error"] == pytest.approx(0.05)
    assert rows["r1"]["predicted_memory_gib"] == pytest.approx(10.0)
    assert rows["r1"]["memory_error"] == pytest.approx(0.25)
    assert rows["r4"]["skipped"].startswith("no hardware entry for TPU v4")
    s = js["summary"]
    assert s["n"] == 3
    assert s["median_abs_error"] == pytest.approx(0.10)
    assert s["p90_abs_error"] == pytest.approx(0.18)
    assert s["median_error"] == pytest.approx(0.05)
    assert (s["n_memory"], s["median_abs_memory_error"]) == (1, pytest.approx(0.25))

    table = run("validate", path)
    assert table.exit_code == 0, table.stderr
    out = table.stdout
    # signed errors +10%, -20%, +5%: signed median +5%
    assert "n=3 median |err|=10.0% signed median=+5.0% p90 |err|=18.0%" in out
    assert "+10.0%" in out and "-20.0%" in out and "4,000*" in out
    assert "skipped (1):" in out and "r4: no hardware entry for TPU v4" in out

    csv_out = run("validate", path, "--format", "csv").stdout
    assert csv_out.splitlines()[0].startswith("id,") and len(csv_out.splitlines()) == 5


# ------------------------------------------------------------------------- accuracy
def test_complete_subset_is_the_documented_one():
    records = load_runs(DATA)
    complete = [r.id for r in records if is_complete(r)]
    assert complete == COMPLETE_IDS
    assert {r.source_group for r in records if is_complete(r)} == set(COMPLETE_GROUPS) - {
        "megatron_lm_readme_h100_strong_scaling"}


def test_median_error_on_complete_records_within_15_percent(run):
    """The issue's target: median |predicted/published - 1| of tokens/s per GPU <= 15% on
    the complete records. Run with -s to see the table."""
    r = run("validate", DATA, "--complete", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    print()
    cli_validate.render_table(js, f"planner validate {DATA.name} --complete")
    assert [x["id"] for x in js["runs"]] == COMPLETE_IDS
    assert [x["id"] for x in js["runs"] if x["skipped"]] == []
    s = js["summary"]
    assert s["n"] == len(COMPLETE_IDS) == 107
    assert s["median_abs_error"] <= 0.15, (
        f"median |err| {100 * s['median_abs_error']:.1f}% (p90 {100 * s['p90_abs_error']:.1f}%) on "
        f"{s['n']} complete records"
    )


# Before stacks (commit 284a1fa) the Megatron-LM records (Narayanan Table 1 and the Megatron-LM
# README H100 table, 19 records) had median |error| 3.81%; llm-foundry +10.9% signed, torchtitan +15.3%.
MEGATRON_MEDIAN_BEFORE_STACKS = 0.0381
# (with tolerance for the last digit; see the README's validation section for the figures)


def test_accuracy_per_stack(run):
    """Issue 10's targets on the complete records: every stack with >= 5 records has median
    |error| <= 10% and |signed median| <= 5%; the Megatron records stay within 0.5 points of
    their accuracy before stacks (bucketed DP collectives cost a little there, see the README);
    the whole set's p90 below 25%."""
    js = json.loads(run("validate", DATA, "--complete", "--format", "json").stdout)
    s = js["summary"]
    assert s["p90_abs_error"] < 0.25
    for name, st in s["by_stack"].items():
        if st["n"] >= 5:
            assert st["median_abs_error"] <= 0.10, (name, st)
            assert abs(st["median_error"]) <= 0.05, (name, st)
    assert set(s["by_stack"]) == {"megatron", "llm-foundry", "torchtitan"}
    assert s["by_stack"]["megatron"]["median_abs_error"] <= MEGATRON_MEDIAN_BEFORE_STACKS + 0.005


def test_memory_records_within_10_percent(run):
    """The records that publish memory (torchtitan on H200, which logs max reserved) within 10%."""
    js = json.loads(run("validate", DATA, "--group", "torchtitan_benchmarks_trainy_h200", "--format", "json").stdout)
    errs = [r["memory_error"] for r in js["runs"] if r["memory_error"] is not None]
    assert len(errs) == 2
    assert all(abs(e) <= 0.10 for e in errs), errs
    # with the records' fsdp_root_unit (memory.py [tt10]): -1.2% and -3.1% (-1.3% and -3.2% before SDPA's fp32
    # logsumexp, planner/layers/attention.py [ls]; without the field -5.8% and -7.8%; their measured-memory rows in
    # tests/data/memory, the same runs as jobs: -1.6% and -3.5%)
    assert sorted(round(e, 3) for e in errs) == [-0.031, -0.012], errs
    # issue 21: each row carries the heaviest stage's allocated and reserved peaks and the fragmentation band's
    # top beside the peak the stack logs (torchtitan: max reserved); FSDP2's reduce-scatter pool is reserved,
    # not allocated; the band's top is the allocated peak x 1.45 (memory.py [13]), never below the reserved
    for r in js["runs"]:
        alloc, res, top = r["predicted_allocated_gib"], r["predicted_reserved_gib"], r["predicted_reserved_high_gib"]
        assert r["predicted_memory_gib"] == res and alloc < res < top
        assert top == pytest.approx(max(res, 1.45 * alloc), rel=1e-12)


def test_calibration_profile_reaches_every_prediction(run, tmp_path):
    """A GEMM profile at 600 TFLOP/s (sustained) slows every H100 prediction of the Megatron
    README group down; a missing profile is bad input."""
    csv = tmp_path / "g.csv"
    csv.write_text("M,N,K,dtype,tflops\n8192,8192,8192,bf16,600\n")
    prof = tmp_path / "p.yaml"
    r = run("calibrate", "gemm", "--from", str(csv), "--hardware", "h100-sxm", "--sustained", "-o", str(prof))
    assert r.exit_code == 0, r.stderr
    args = ["validate", DATA, "--group", "megatron_lm_readme_h100_weak_scaling", "--format", "json"]
    base = json.loads(run(*args).stdout)
    cal = json.loads(run(*args, "--calibration", str(prof)).stdout)
    assert cal["calibration"] == str(prof)
    for a, b in zip(base["runs"], cal["runs"]):
        assert b["predicted_tokens_per_s_per_gpu"] < a["predicted_tokens_per_s_per_gpu"]
    r = run(*args, "--calibration", str(tmp_path / "none.yaml"))
    assert r.exit_code == 2 and "none.yaml" in r.stderr


def test_attention_rule_9_record_then_stack_default_then_date(run, tmp_path):
    """Rule 9 (issue 22): a record that leaves attention out takes the stack's defaults.attention where the
    stack file sets one (megatron-deepspeed: eager, microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py
    l. 927-935 --use-flash-attn* store_true, model/transformer.py l. 606-611 CoreAttention without them), whatever
    the source's date; on a stack file without the key (megatron) the date rule: 2023 flash, 2021 eager."""
    src = dict(source="Example et al. 2023, a training report", source_year=2023)
    mds = dict(src, stack="megatron-deepspeed", sharding="zero1", zero_fsdp_mode_text="ZeRO-1 (DeepSpeed)")  # bf16 without ZeRO: not zero0
    recs = [_record("mds-2023", **mds),
            _record("mds-2023-eager", attention="eager", **mds),
            _record("mds-2023-flash", attention="flash", **mds),
            _record("meg-2023", stack="megatron", **src),
            _record("meg-2023-flash", stack="megatron", attention="flash", **src),
            _record("meg-2021", stack="megatron", source="Example et al. 2021", source_year=2021)]
    r = run("validate", _write(tmp_path, recs), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)["runs"]}

    def att(i):
        return [a for a in rows[i]["assumed"] if a.startswith("attention=")]

    mds = rows["mds-2023"]
    assert mds["plan"]["attention"] == "eager"
    assert att("mds-2023") == ["attention=eager (not published; rule 9b: the megatron-deepspeed stack's "
                               "defaults.attention, what its code runs without an attention option)"]
    # priced as the stated eager core, not as flash
    pred = {i: rows[i]["predicted_tokens_per_s_per_gpu"] for i in rows}
    assert pred["mds-2023"] == pred["mds-2023-eager"] != pred["mds-2023-flash"]
    assert att("mds-2023-eager") == att("mds-2023-flash") == []  # rule 9a: stated, not assumed
    assert rows["mds-2023-flash"]["plan"]["attention"] == "flash"

    assert rows["meg-2023"]["plan"]["attention"] == "flash"
    assert att("meg-2023") == ["attention=flash (not published; rule 9c: source dated 2023: FlashAttention)"]
    assert pred["meg-2023"] == pred["meg-2023-flash"]
    assert rows["meg-2021"]["plan"]["attention"] == "eager"
    assert att("meg-2021") == ["attention=eager (not published; rule 9c: source dated 2021, before FlashAttention (2022))"]
