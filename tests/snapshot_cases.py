"""The cases of tests/test_snapshot.py: every record of the reference runs copied into
tests/data/ (dense and MoE) and a grid of explain plans over the zoo, each evaluated to the
JSON contract (explain.to_json) minus what depends on where a file lies.

`python -m tests.snapshot_cases` rewrites tests/data/snapshots/predictions.json. It was
written from main at commit a088714, before the layer-kind restructure (issue 20), so that
the restructure is proven to change no prediction; a later commit that changes a number on
purpose rewrites it and says which figures moved and why.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.validate import Skip, load_runs, new_row, prepare_record

DATA = Path(__file__).parent / "data"
SNAPSHOT = DATA / "snapshots" / "predictions.json"
RUN_FILES = ("published_runs.yaml", "published_runs_moe.yaml", "published_runs_lowprec.yaml")
# plan keys that name files (temporary model files of a record, their hashes)
VOLATILE = {"model_file", "hardware_file", "model_sha256", "hardware_sha256", "calibration"}

# a stand-in for a stack file written when the cases run: the megatron stack without `runs`
ANY_PLAN_STACK = "<megatron without runs>"
DENSE = ("llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b", "mpt-7b", "llama2-13b")
MOE = ("mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x22b")
DENSE_PLANS = (
    dict(gpus=8),
    dict(gpus=64, tp=8, pp=1, sharding="zero1", recompute="selective", micro_batch=1, global_batch=64),
    dict(gpus=256, tp=4, pp=4, vpp=2, sharding="zero1", recompute="full", micro_batch=1, global_batch=256),
    dict(gpus=512, tp=8, cp=2, pp=8, sharding="fsdp", micro_batch=1, global_batch=512, seq_len=16384),
    dict(gpus=128, tp=2, pp=2, sharding="hsdp", shard_group=16, global_batch=256, stack="torchtitan", torch_compile=True),
    dict(gpus=1024, tp=8, pp=16, vpp=1, sharding="zero2", recompute="full", recompute_layers=2, global_batch=1024,
         precision="fp8"),
    dict(gpus=96, tp=4, pp=3, sharding="none", global_batch=96, schedule="zb-h1", activation_model="korthikanti",
         attention="eager"),
    # plan 6 again on megatron's figures in a stack file that does not say what it runs (no `runs`):
    # Megatron-LM has no ZB-H1 schedule, so plan 6 is refused on the megatron stack (issue 22), and
    # this case keeps ZB-H1's pricing in the snapshot (the same numbers plan 6 had before)
    dict(gpus=96, tp=4, pp=3, sharding="none", global_batch=96, schedule="zb-h1", activation_model="korthikanti",
         attention="eager", stack=ANY_PLAN_STACK),
)
MOE_PLANS = (
    dict(gpus=64, tp=1, pp=1, ep=8, sharding="zero1", global_batch=64),
    dict(gpus=256, tp=2, pp=4, vpp=2, ep=8, sharding="zero1", recompute="selective", global_batch=512),
    dict(gpus=512, tp=1, pp=8, ep=32, sharding="fsdp", recompute="full", global_batch=1024, moe_capacity_factor=1.25),
    dict(gpus=256, tp=4, pp=2, vpp=2, ep=16, sharding="zero1", global_batch=512, ep_comm_overlap=True,
         precision="fp8"),
    dict(gpus=128, tp=2, pp=4, ep=4, sharding="fsdp", recompute="full", global_batch=256, moe_capacity_factor=1.25),
    dict(gpus=128, tp=1, pp=2, vpp=2, ep=8, sharding="zero1", global_batch=256, ep_comm_overlap=True,
         stack="megatron"),
    # MoE parallel folding: expert TP 1 under attention TP 2, EP 32 over 2 x 32 TP x DP ranks
    # (refused where ep 32 does not divide the routed experts)
    dict(gpus=64, tp=2, pp=1, ep=32, etp=1, sharding="zero1", global_batch=64),
    # torchtitan fp8 MoE: routed experts bf16 (the stack's rule) and converted by torchao's float8
    # grouped GEMMs (fp8_grouped_experts: rowwise rate, token groups padded to 16 rows; step.py [16])
    dict(gpus=64, tp=1, pp=1, ep=8, sharding="fsdp", global_batch=128, stack="torchtitan", precision="fp8"),
    dict(gpus=64, tp=1, pp=1, ep=8, sharding="fsdp", global_batch=128, stack="torchtitan", precision="fp8",
         fp8_grouped_experts=True),
)


def _clean(js: dict) -> dict:
    js = dict(js)
    js["plan"] = {k: v for k, v in js["plan"].items() if k not in VOLATILE}
    return js


def record_cases() -> dict:
    out = {}
    with tempfile.TemporaryDirectory(prefix="planner-snapshot-") as d:
        for fname in RUN_FILES:
            for rec in load_runs(DATA / fname):
                row = new_row(rec)
                try:
                    settings, plan = prepare_record(rec, row, Path(d), DATA)
                except (Skip, PlannerError) as e:
                    out[f"{fname}:{rec.id}"] = {"skipped": str(e)}
                    continue
                out[f"{fname}:{rec.id}"] = _clean(to_json(settings, plan, evaluate(settings, plan)))
    return out


def _any_plan_stack(folder: Path) -> str:
    """The megatron stack as a file without `runs` (schema Stack.runs: every plan runnable)."""
    import yaml

    from planner.catalog import stack_source

    data = yaml.safe_load(stack_source("megatron").read_text(encoding="utf-8"))
    data.pop("runs", None)
    path = folder / "megatron-any-plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def grid_cases() -> dict:
    out = {}
    with tempfile.TemporaryDirectory(prefix="planner-snapshot-") as d:
        stack_file = _any_plan_stack(Path(d))
        for models, plans in ((DENSE, DENSE_PLANS), (MOE, MOE_PLANS)):
            for model in models:
                for i, fields in enumerate(plans):
                    case = _grid_case(f"grid:{model}:{i}", model,
                                      {k: (stack_file if v == ANY_PLAN_STACK else v) for k, v in fields.items()})
                    for js in case.values():  # the temporary file's path is no prediction
                        if js.get("plan", {}).get("stack") == stack_file:
                            js["plan"]["stack"] = ANY_PLAN_STACK
                    out.update(case)
    return out


def _grid_case(key: str, model: str, fields: dict) -> dict:
    try:
        job = Job(model=model, **fields)
        settings, plan, _ = resolve(job)
    except PlannerError as e:
        return {key: {"refused": e.message}}
    return {key: _clean(to_json(settings, plan, evaluate(settings, plan)))}


def all_cases() -> dict:
    return {**record_cases(), **grid_cases()}


if __name__ == "__main__":
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(json.dumps(all_cases(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
