"""Run records' settings as explicit fields (validate rules 4, 6, 7; the 2026-12-07 audit4):
scripts/migrate_record_fields.py, which rewrote the shipped records from their free text, on a
file in the old spelling, and the shipped files in the new one."""
import importlib.util
from pathlib import Path

import pytest
import yaml

from planner.validate import RETIRED_KEYS, RunRecord, load_runs

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SHIPPED = sorted(DATA.glob("published_runs*.yaml")) + sorted((DATA / "fuzz_issue24").glob("run*.yaml")) + \
    sorted((DATA / "run_calibration").glob("*.yaml"))

_spec = importlib.util.spec_from_file_location("migrate_record_fields", ROOT / "scripts" / "migrate_record_fields.py")
migrate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(migrate)

OLD = """# a runs file in the spelling before audit4
- id: a
  num_layers: 4
  hidden_size: 1024
  ffn_hidden_size: 4096
  num_attention_heads: 8
  vocab_size: 32000
  seq_length: 2048
  global_batch_size: 64
  gpu_type: H100-SXM-80GB  # the source's words
  zero_fsdp_mode: FSDP FULL_SHARD (ZeRO-3-like)
  activation_recompute: full
  precision: 'fp8 MXFP8 (FP8-MX)'
  provenance:
    zero_fsdp_mode: 'reported: table'
    precision: 'reported: table'
- id: b
  num_layers: 4
  hidden_size: 1024
  ffn_hidden_size: 4096
  num_attention_heads: 8
  vocab_size: 32000
  seq_length: 2048
  global_batch_size: 64
  gpu_type: A100
  zero_fsdp_mode: not stated (no FSDP column)
  activation_recompute: null
  precision: mixed 16-bit (fp16/bf16 not stated)
- id: c
  num_layers: 4
  hidden_size: 1024
  ffn_hidden_size: 4096
  num_attention_heads: 8
  vocab_size: 32000
  seq_length: 2048
  global_batch_size: 64
  gpu_type: H100
  stack: llm-foundry
  zero_fsdp_mode: FSDP SHARD_GRAD_OP
  activation_recompute: selective (attention core only)
  precision: fp8 current scaling (FP8-CS)
  fp8_recipe: delayed
"""


def test_migration_writes_what_the_old_rules_read(tmp_path):
    """By hand, from the old rules' vocabularies: FSDP FULL_SHARD -> fsdp, fp8 MXFP8 -> fp8 + mxfp8,
    full -> full (the text, the value itself, not kept); "not stated" -> left out (the default,
    assumed), null -> null, "mixed 16-bit" -> bf16 with why it is assumed; FSDP SHARD_GRAD_OP -> fsdp
    with the llm-foundry stack's no-reshard mode; the record's own fp8_recipe (delayed) kept over the
    text's (tensorwise). Comments and provenance follow; the file reads as RunRecords."""
    p = tmp_path / "runs.yaml"
    p.write_text(OLD)
    assert migrate.migrate(p) == 3
    text = p.read_text()
    assert "# a runs file in the spelling before audit4" in text and "# the source's words" in text
    a, b, c = yaml.safe_load(text)
    assert (a["sharding"], a["zero_fsdp_mode_text"], a["recompute"], a["precision"], a["fp8_recipe"]) == \
        ("fsdp", "FSDP FULL_SHARD (ZeRO-3-like)", "full", "fp8", "mxfp8")
    assert "activation_recompute_text" not in a and a["precision_text"] == "fp8 MXFP8 (FP8-MX)"
    assert a["provenance"] == {"sharding": "reported: table", "precision": "reported: table"}
    assert "sharding" not in b and b["zero_fsdp_mode_text"] == "not stated (no FSDP column)"
    assert b["recompute"] is None and "activation_recompute_text" not in b
    assert b["precision"] == "bf16" and b["precision_assumed"] == "mixed 16-bit (fp16/bf16 not stated)"
    assert (c["sharding"], c["sharding_mode"], c["recompute"], c["activation_recompute_text"]) == \
        ("fsdp", "shard_grad_op", "selective", "selective (attention core only)")
    assert (c["precision"], c["fp8_recipe"]) == ("fp8", "delayed")
    assert not set(RETIRED_KEYS) & (set(a) | set(b) | set(c))
    for r in (a, b, c):
        RunRecord.model_validate(r)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_records_carry_the_explicit_fields(path):
    """Every shipped record reads (load_runs), gives no retired key, and states its precision (the
    192 records all did in words): none is left to the bf16 default."""
    raw = yaml.safe_load(path.read_text())
    assert not any(set(RETIRED_KEYS) & set(r) for r in raw)
    recs = load_runs(path)
    assert recs and all(r.precision in ("bf16", "fp8", "nvfp4") for r in recs)
    # the 16-bit records whose source names no type, and the fp16 one, say why they are bf16
    assert all(r.precision == "bf16" for r in recs if r.precision_assumed)


def test_a_sharding_mode_needs_its_level(tmp_path):
    """sharding_mode names a mode of a level the record gives: alone it is an error naming the
    file, the record and the levels."""
    from planner.errors import PlannerError

    rec = yaml.safe_load((DATA / "published_runs.yaml").read_text())[0]
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump([dict(rec, sharding=None, sharding_mode="shard_grad_op")]))
    with pytest.raises(PlannerError) as e:
        load_runs(p)
    assert str(p) in e.value.message and rec["id"] in e.value.message
    assert "sharding_mode 'shard_grad_op' without sharding" in e.value.message and "zero1, zero2, fsdp, hsdp" in e.value.message


def test_precision_assumed_holds_the_records_reason_only(tmp_path):
    """precision_assumed is the record's own reason (what the source says); validate adds precisions.SAME_PEAK once
    after it: Narayanan et al. 2021's 1.7B row lists exactly the line it listed when the record carried the sentence
    itself (before the 2026-12-07 data hygiene pass). A record that repeats SAME_PEAK, or gives the field beside a
    precision other than bf16 (or none), is an error naming the file, the record and the fix; no shipped record
    carries the sentence."""
    from planner.errors import PlannerError
    from planner.precisions import SAME_PEAK
    from planner.validate import _Assumed, _precision

    assert SAME_PEAK == "fp16 and bf16 share the dense tensor-core peak on A100/H100 (hardware_db datasheet figures)"
    raw = yaml.safe_load((DATA / "published_runs.yaml").read_text())
    rec = next(r for r in raw if r["id"] == "narayanan2021-t1-1.7B")
    assert rec["precision_assumed"] == "mixed 16-bit (paper: 'mixed precision'; fp16 vs bf16 not stated)"
    (one,) = [r for r in load_runs(DATA / "published_runs.yaml") if r.id == rec["id"]]
    a = _Assumed()
    assert _precision(one, a) == ("bf16", None)
    assert a.items == ["precision=bf16 (mixed 16-bit (paper: 'mixed precision'; fp16 vs bf16 not stated): fp16 and bf16 "
                       "share the dense tensor-core peak on A100/H100 (hardware_db datasheet figures))"]
    for path in SHIPPED:
        assert SAME_PEAK not in path.read_text(), path
    p = tmp_path / "runs.yaml"
    for bad, words in ((dict(precision_assumed=f"fp16: {SAME_PEAK}"), "repeats the planner's own reason"),
                       (dict(precision="fp8"), "precision_assumed beside precision fp8"),
                       (dict(precision=None), "precision_assumed beside precision null")):
        p.write_text(yaml.safe_dump([dict(rec, **bad)]))
        with pytest.raises(PlannerError) as e:
            load_runs(p)
        assert str(p) in e.value.message and rec["id"] in e.value.message and words in e.value.message
