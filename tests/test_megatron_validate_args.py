"""The audit of Megatron-LM's validate_args against the plan (docs/megatron_validate_args.md,
NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py l. 389-1988): every place the table
names exists, and the rules it marks new refuse a job that breaks them (exit 2, error naming the
check and hint) and never let fit rank one. The fsdp2 / fp8-parameter rules (the sharding modes'
job_settings) are tests/test_mode_settings.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES
from planner.trainers.rules import SOURCES

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "megatron_validate_args.md"


def _rows():
    return [line for line in DOC.read_text(encoding="utf-8").splitlines() if re.match(r"^\| \d", line)]


def _places_exist(rows, least: int) -> None:
    """At least `least` `file:name` places in the rows, each a file of the repository holding that name."""
    places = re.findall(r"`([\w/.-]+\.(?:py|yaml)):(\w+)`", "\n".join(rows))
    assert len(places) >= least
    for path, name in places:
        assert (ROOT / path).is_file(), path
        assert re.search(rf"\b{name}\b", (ROOT / path).read_text(encoding="utf-8")), (path, name)


def test_the_table_names_places_that_exist():
    """Each `file:name` the table cites is a file of the repository holding that name, each rule
    key it gives after a place is one of the planner's (plan.rule_codes' codes, startup.RULES'
    keys, rules.py's keys), and its line ranges ascend within validate_args."""
    from planner import plan

    rows = _rows()
    assert len(rows) >= 45
    starts = [int(re.match(r"^\| (\d+)", r).group(1)) for r in rows]
    assert starts == sorted(starts) and 389 <= starts[0] and starts[-1] <= 1988
    _places_exist(rows, 40)
    keys = set(re.findall(r"(?:rule_codes|RULES|megatron_errors)` ([A-Z][A-Z0-9_]+)", "\n".join(rows)))
    keys |= set(re.findall(r"rules\.py ([A-Z][A-Z0-9_]+)", "\n".join(rows)))
    known = set(CODES) | set(SOURCES) | {k for k in dir(plan) if k.isupper()}
    assert keys and keys <= known, keys - known


def test_mtp_with_learned_position_embeddings_is_refused(cli):
    """validate_args l. 882-886: --mtp-num-layers only with rope or no position embedding. A GPT
    model with learned positions and an MTP module is refused by explain and by fit (exit 2), on the
    megatron stack only."""
    r = cli("explain", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--mtp-layers", "1")
    assert r.exit_code == 2 and "breaks start-up rule MEGATRON_MTP_POSITION of megatron" in r.stderr
    assert "arguments.py validate_args l. 882-886" in r.stderr and "\nhint: leave mtp_layers out" in r.stderr
    r = cli("fit", "--model", "megatron-gpt-1.7b", "--gpus", "8", "--mtp-layers", "1", "--tp", "1", "--pp", "1")
    assert r.exit_code == 2 and "MEGATRON_MTP_POSITION" in r.stderr and "Traceback" not in r.stderr
    assert cli("explain", "--model", "megatron-gpt-1.7b", "--gpus", "8").exit_code == 0
    # torchtitan main has no such check, and trains no MTP module at all (stack_db torchtitan runs.mtp false): a job's
    # mtp_layers is refused there for that, before the model's learned positions (rule 73, STACK_LAYER_KIND)
    for model in ("megatron-gpt-1.7b", "llama3-8b"):
        with pytest.raises(PlannerError, match="stack torchtitan's code trains no multi-token prediction module") as e:
            resolve(Job(model=model, gpus=8, mtp_layers=1, stack="torchtitan", sharding="fsdp"))
        assert "MEGATRON_MTP_POSITION" not in str(e.value)
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND") as e:
        resolve(Job(model="megatron-gpt-1.7b", gpus=8, stack="torchtitan", sharding="fsdp"))
    assert "learned_positions" in str(e.value)


def test_grouped_gemm_below_compute_capability_8_is_refused(cli, tmp_path):
    """validate_args l. 1378-1380: --moe-grouped-gemm asserts compute capability major >= 8. An
    A100 entry relabelled 7.0 (a V100's) refuses a job with it; the A100 (8.0) takes it."""
    hw = yaml.safe_load((ROOT / "hardware_db" / "a100-sxm-80gb.yaml").read_text(encoding="utf-8"))
    hw.update(name="a100-as-sm70", compute_capability="7.0")
    p = tmp_path / "sm70.yaml"
    p.write_text(yaml.safe_dump(hw), encoding="utf-8")
    job = dict(model="mixtral-8x7b", gpus=64, tp=2, ep=8, sharding="zero1", global_batch=256, moe_grouped_gemm=True)
    with pytest.raises(PlannerError, match=r"moe_grouped_gemm on a100-as-sm70 \(compute capability 7.0\): Megatron refuses "
                                           r"it .*validate_args l. 1378-1380"):
        resolve(Job(**job, hardware=str(p)))
    resolve(Job(**job, hardware="a100-sxm-80gb"))
    with pytest.raises(PlannerError, match="moe_grouped_gemm on a100-as-sm70"):
        fit(Job(**job, hardware=str(p)), opts=SpaceOptions(tp=(2,), pp=(1,)), top=1)


def test_local_core_attention_is_not_exported_without_a_model_megatron_builds():
    """validate_args l. 436-437 runs --attention-backend local only with --spec local, from which
    pretrain_gpt.py builds no model (gpt_builders.py l. 32-33): the export refuses the plan it used
    to write as --attention-backend local alone (which rules.py ATTN_LOCAL refuses); the job is
    still priced, and --transformer-impl local (Megatron-Core's own layers) is exported."""
    from planner.cli.export import resolved_plan
    from planner.trainers.export import export_plan
    from planner.trainers.rules import megatron_script_errors

    job = dict(model="llama3-8b", gpus=8, sharding="zero1", global_batch=64, seq_len=4096, attention="eager")
    plan = resolved_plan(Job(**job, local_core_attention=True))
    with pytest.raises(PlannerError, match=r"export megatron: local_core_attention: .*validate_args l. 436-437"):
        export_plan(plan, "megatron")
    text, _ = export_plan(resolved_plan(Job(**job, transformer_impl="local")), "megatron")
    assert "--transformer-impl local" in text and "--attention-backend local" not in text
    assert megatron_script_errors(text) == []


SECTION = "## Megatron-Core's model-config checks"


def test_the_model_config_audit_names_lines_places_and_rules_that_exist():
    """The audit of TransformerConfig / MLATransformerConfig / ModelParallelConfig.__post_init__
    (the doc's second table): every row gives a line inside the __post_init__ it audits at d98e8a64
    (tc: transformer_config.py l. 1390-3276 and MLA's l. 3343-3354; mpc: model_parallel_config.py
    l. 497-577), a status (enforced, new, not reachable, missing), `file:name` places that exist and
    start-up rule keys of startup.RULES; the rules it marks new are tests/test_startup_transformer_config.py's."""
    text = DOC.read_text(encoding="utf-8")
    rows = [line for line in text[text.index(SECTION):].splitlines()
            if line.startswith("| ") and not line.startswith("| rule")]
    assert len(rows) >= 40
    for r in rows:
        cells = r.split("|")
        assert cells[3].strip().split()[0].rstrip(":") in {"enforced", "new", "not", "missing"}, r
        m = re.search(r"(tc|mpc) l\. (\d+)", cells[2])
        assert m, r
        line = int(m.group(2))
        assert (1390 <= line <= 3276 or 3343 <= line <= 3354) if m.group(1) == "tc" else (497 <= line <= 577), r
    _places_exist(rows, 20)
    keys = set(re.findall(r"\b(MEGATRON_[A-Z0-9_]+)", "\n".join(rows)))
    assert {"MEGATRON_MOE_BIAS_ETP", "MEGATRON_GDN_HEADS", "MEGATRON_MOE_SP"} <= keys <= set(CODES), keys - set(CODES)
    assert {"MOE_BIAS_ETP", "SPLIT", "RECOMPUTE"} <= set(SOURCES)
