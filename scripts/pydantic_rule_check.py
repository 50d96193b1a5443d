"""The manual check of planner/trainers/deepspeed_types.check against DeepSpeed's own pydantic models: every key of
MODELS set to each of 26 values in its section, validated by the model microsoft/DeepSpeed @38327e07 builds for it
(DeepSpeedZeroConfig with the offload sections nested, TensorBoardConfig, WandbConfig, CSVConfig, CometConfig,
HybridEngineConfig, DeepSpeedThroughputTimerConfig, TPTrainingConfig), and DeepSpeed's refusal compared with check's;
two keys no model has in each section (a made-up one and a near miss: extra="forbid", 20 cases); and, for each key the
reader prices (deepspeed._reads) and each value DeepSpeedZeroConfig takes, deepspeed_types.coerce's value against the
model's own attribute (an enum by its value, a Path as its string; overlap_comm null, which the model replaces by the
stage's default, left out: 218 cases).

Not run by CI (DeepSpeed needs torch). To run it: put on PYTHONPATH a folder holding, at 38327e07,
deepspeed/runtime/config_utils.py, deepspeed/runtime/zero/{config,offload_config}.py, deepspeed/monitor/config.py,
deepspeed/utils/config.py and deepspeed/runtime/tensor_parallel/config.py, with empty __init__.py files on the way
except deepspeed/utils/__init__.py defining `logger = logging.getLogger()`, a module he.py holding
deepspeed/runtime/config.py l. 547-553 (HybridEngineConfig) after `from deepspeed.runtime.config_utils import
DeepSpeedConfigModel`, and a stub torch package (a `dtype` class, `float16 = dtype()`); then
`PYTHONPATH=.:... python scripts/pydantic_rule_check.py`. Run on 2026-12-07 with pydantic 2.14.4: 2,340 cases,
0 differences (3 before deepspeed_types._partial_offload: the model validator offload_ratio_check); with the unknown-key
and coerce cases (issue readers2) 2,578 cases, 0 differences (with coerce replaced by the identity, 89 differences:
the comparison can fail).
"""

from __future__ import annotations

from pathlib import Path

from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig
from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from deepspeed.utils.config import DeepSpeedThroughputTimerConfig
from he import HybridEngineConfig

from planner.errors import PlannerError
from planner.trainers.deepspeed import _reads
from planner.trainers.deepspeed_types import MODELS, check, coerce

REAL = {"zero_optimization": DeepSpeedZeroConfig, "tensorboard": TensorBoardConfig, "wandb": WandbConfig,
        "csv_monitor": CSVConfig, "comet": CometConfig, "hybrid_engine": HybridEngineConfig,
        "timers.throughput": DeepSpeedThroughputTimerConfig, "tensor_parallel": TPTrainingConfig}
VALUES = ["x", "5", "5e8", "true", "yes", "off", "cpu", "nvme", "gpu", "auto", 0, 1, 2, 3, 5, -1, 1.5, 0.5, 5e8, 2.0,
          True, False, None, [1], {"a": 1}, {}]


def main() -> None:
    cases = differences = 0
    for path, (_, _, fields) in MODELS.items():
        for key in fields:
            for v in VALUES:
                if path.startswith("zero_optimization."):  # a nested model: built through DeepSpeedZeroConfig
                    body = {path.split(".")[1]: {key: v}}
                    model, data = DeepSpeedZeroConfig, {"zero_optimization": body}
                else:
                    body = {key: v}
                    model, data = REAL[path], {}
                    cur = data
                    parts = path.split(".")
                    for part in parts[:-1]:
                        cur = cur.setdefault(part, {})
                    cur[parts[-1]] = body
                try:
                    model(**body)
                    deepspeed_takes = True
                except Exception:  # pydantic's ValidationError, an assert in a validator
                    deepspeed_takes = False
                try:
                    check("case: ", data)
                    check_takes = True
                except PlannerError:
                    check_takes = False
                cases += 1
                if deepspeed_takes != check_takes:
                    differences += 1
                    print(f"DIFFERENCE {path}.{key} = {v!r}: DeepSpeed takes it {deepspeed_takes}, check {check_takes}")
    # keys a model has not (extra="forbid"): a made-up key and a near miss of a real one in each section
    for path, (_, _, fields) in MODELS.items():
        for key in ("made_up_key", next(iter(fields)) + "x"):
            if path.startswith("zero_optimization."):
                body = {path.split(".")[1]: {key: 1}}
                model, data = DeepSpeedZeroConfig, {"zero_optimization": body}
            else:
                body, data = {key: 1}, {}
                cur = data
                for part in path.split(".")[:-1]:
                    cur = cur.setdefault(part, {})
                cur[path.split(".")[-1]] = body
                model = REAL[path]
            try:
                model(**body)
                deepspeed_takes = True
            except Exception:
                deepspeed_takes = False
            try:
                check("case: ", data)
                check_takes = True
            except PlannerError:
                check_takes = False
            cases += 1
            if deepspeed_takes != check_takes:
                differences += 1
                print(f"DIFFERENCE unknown {path}.{key}: DeepSpeed takes it {deepspeed_takes}, check {check_takes}")
    # the value coerce reads for each key the reader prices, wherever the model takes it, is the model's own attribute
    # (an enum by its value; overlap_comm's None replaced by the stage's default by the model: not compared)
    for path, (_, _, fields) in MODELS.items():
        if path != "zero_optimization" and not path.startswith("zero_optimization."):
            continue
        for key in [k for k in fields if _reads(path, k)]:  # the keys the reader prices through coerce
            for v in VALUES:
                nested = path.split(".")[1] if "." in path else None
                body = {nested: {key: v}} if nested else {key: v}
                try:
                    m = DeepSpeedZeroConfig(**body)
                except Exception:
                    continue
                got = coerce("case: ", {"zero_optimization": body}, lambda p, k: True)[0]
                mine = (got["zero_optimization"][nested] if nested else got["zero_optimization"])[key]
                sub = getattr(m, nested) if nested else m
                name = next(n for n, f in type(sub).model_fields.items() if n == key or f.alias == key)
                theirs = getattr(sub, name)
                theirs = str(theirs) if isinstance(theirs, Path) else getattr(theirs, "value", theirs)  # JSON values
                cases += 1
                if v != "auto" and not (name == "overlap_comm" and v is None) and not (
                        mine == theirs and isinstance(mine, bool) == isinstance(theirs, bool)
                        and isinstance(mine, str) == isinstance(theirs, str)):
                    differences += 1
                    print(f"DIFFERENCE coerce {path}.{key} = {v!r}: DeepSpeed reads {theirs!r}, coerce {mine!r}")
    print(f"{cases} cases, {differences} differences")


if __name__ == "__main__":
    main()
