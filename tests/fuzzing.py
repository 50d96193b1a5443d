"""Mutation fuzzing of every reader, through the CLI in-process (issue 12).

Each reader kind has real seed files (tests/data, the catalogs, or files the CLI writes
from them: a calibration profile, a saved fit) and the command that reads it. `fuzz(kind,
n, seed)` makes n mutated inputs, deterministically (random.Random(seed)): byte flips,
insertions, truncation, deleted / duplicated / swapped lines, and, for YAML and JSON, one
value swapped for a huge, negative, zero, NaN, infinite, string, list, mapping or deeply
nested one, or a key deleted or renamed. It runs the command on each with typer's
CliRunner and checks the contract of the README ("Robustness"):

- the exit code is 0, 1 or 2 (1 only for "does not fit");
- no exception escapes (no traceback);
- an exit 2 prints `error: ...` first on stderr (after any `warning:` / `note:` lines);
- and a kind's own check (Target.check): the job-fields kind's job files, with random schema.Job fields set
  (_job_field_mutation), have each row of their `fit` priced again by `explain` of the row's reproduce line, to
  the same time and memory terms (fit_rows_agree).
- the cli-options kind's command lines (fit, explain, check, budget, export with options drawn from each command's
  typer parameters, valid and bad values; _cli_mutation): an exit 2 gives `hint:` too and does not refuse an option
  beside the file's other spelling of its setting, a `--format json|yaml|csv` output parses, and an option that
  replaces a job file's or trainer config's value is named in a note and held by the plan (cli_options_check).
- the job-fields kind's explain and check alike (plans_check): check's plan, time and memory those of explain of the same
  line, and the plan of either exported in every format that writes it read back as the same plan and memory.
- the megatron-recent kind's Megatron-LM functional-test argument files (an uneven pipeline split, Muon, optimizer
  instances, Megatron-FSDP, a hybrid pattern; one of RECENT_FLAGS set or removed, _recent_mutation): fit's rows as
  the config-fit kind's; check's plan, time and memory those of explain of the same line; explain's and check's plan
  exported in every format that writes it read back as the same plan and memory (recent_check).
- the newest-fields kind's inputs (torchtitan TOMLs with the CP load balancer and pipeline keys, a torchtitan 0.3 launch
  with spmd_typechecking / fsdp_symm_mem, Megatron-Bridge recipes with overrides, Megatron argument files with hybrid
  patterns of G layers and '/' MTP parts and Muon; one NEWEST_* setting set or removed, _newest_mutation): recent_check.
- the precision-flags kind's inputs (Megatron argument files with fp8, --deterministic-mode and the softmax flags, and
  with Muon, virtual stages and bf16 layers at both ends of an fp8 model; Megatron-DeepSpeed launches whose eager core
  attention reads --no-masked-softmax-fusion / --attention-softmax-in-fp32; one PRECISION_* flag set or removed,
  _precision_mutation): recent_check.

tests/test_fuzz.py runs a short deterministic pass in the default suite and a long one
under `pytest -m fuzz`.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.files import YAML_LOADER

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

# values a field is swapped for: huge, negative, zero, non-finite, wrong types, deep nesting
NASTY = [
    2**63, 2**64 + 1, 10**30, -1, 0, -(2**63), 1e308, 1e-308, -0.0, 0.5, 3.7,
    float("nan"), float("inf"), -float("inf"), "abc", "", "16M", "1e400", "x" * 5000, True, False, None,
    [], [1, 2], {}, {"a": 1}, [[[[[[[[[[1]]]]]]]]]],
]
# valid but extreme values, that get past the schema into the cost models and the search
EXTREME = [1, 2, 3, 7, 1000, 65536, 10**6, 2**31 - 1, 1e-6, 1e6, 1e12, 0.999]


def _deep(depth: int) -> str:
    """A placeholder _dump turns into `depth` nested flow lists (dumping them would recurse)."""
    return f"__DEEP_{depth}__"


@dataclass
class Target:
    """A reader: its seed files (name -> bytes), how an input is laid out on disk, and the
    CLI arguments that read it (`{f}` is the input's path, `{d}` a scratch folder)."""

    kind: str
    seeds: dict[str, bytes]
    args: list[list[str]]  # one command line per seed index (cycled)
    structured: str | None = None  # "yaml" / "json": value mutations apply
    suffix: str = ".yaml"
    filename: str | None = None  # a fixed name (config.json) inside a fresh folder per input
    seed_args: dict[str, list[str]] = field(default_factory=dict)  # appended for inputs made from that seed
    # files written beside each input (name -> text; `{f}` and the seed's seed_vars substituted), e.g. a job file
    # that names the input by a path relative to itself
    companions: dict[str, str] = field(default_factory=dict)
    # per seed, placeholders of args and companions (`{m}` -> a model that seed's stack builds)
    seed_vars: dict[str, dict[str, str]] = field(default_factory=dict)
    # a check beyond check_result's contract, run on an input that kept it: (args, result) -> None, or what broke
    check: Callable | None = None
    # per seed, the input's suffix where it is not `suffix` (a kind whose seeds are several trainers' formats)
    seed_suffix: dict[str, str] = field(default_factory=dict)
    # the input is itself a command line (a JSON list of arguments, `{f}` / `{d}` and the seed_vars substituted),
    # appended to `args` (the cli-options kind: the options are what is mutated; the file keeps the input to reproduce)
    argv_input: bool = False


@dataclass
class Outcome:
    tried: int = 0
    codes: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)


# ----------------------------------------------------------------------- mutations
def _byte_mutation(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    op = rng.randrange(7)
    if not b:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    if op == 0:  # flip a few bytes
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif op == 1:  # truncate
        del b[rng.randrange(len(b)):]
    elif op == 2:  # insert random bytes
        i = rng.randrange(len(b) + 1)
        b[i:i] = bytes(rng.choice(b"\x00\xff\t\n:-[]{}#&*!|>'\"%@`,?e.0123456789") for _ in range(rng.randint(1, 12)))
    else:  # line operations
        lines = bytes(b).split(b"\n")
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        if op == 3:
            del lines[i]
        elif op == 4:
            lines.insert(i, lines[j])
        elif op == 5:
            lines[i], lines[j] = lines[j], lines[i]
        else:  # a numeric token of a line replaced
            toks = lines[i].split(b" ")
            k = rng.randrange(len(toks))
            toks[k] = rng.choice([b"1e400", b"-1", b"0", b"nan", b"inf", b"1e-308", b"99999999999999999999999",
                                  b"1e308", b"abc", b"N/A", b"", b"1" * 400])
            lines[i] = b" ".join(toks)
        return b"\n".join(lines)
    return bytes(b)


def _paths(obj, prefix=()):
    """Every (path, value) of a parsed document: keys of mappings, indices of lists."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    if not path:
        return value
    node = obj
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return obj


def _value_mutation(rng: random.Random, doc, kind: str):
    doc = copy.deepcopy(doc)
    paths = [p for p, _ in _paths(doc)]
    path = rng.choice(paths)
    op = rng.randrange(10)
    if op < 3:
        value = rng.choice(NASTY)
    elif op < 6:
        value = rng.choice(EXTREME)
    elif op == 6:
        value = _deep(rng.choice([50, 200, 1200]))
    elif op == 7 and path:  # delete the key / item
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        del parent[path[-1]]
        return doc
    elif op == 8 and path and isinstance(path[-1], str):  # rename the key (a typo)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1] + rng.choice(["_", "s", "-x"])] = parent.pop(path[-1])
        return doc
    else:  # scale a number
        old = dict(_paths(doc)).get(path)
        value = old * rng.choice([10**6, -1, 10**20, 1e-9]) if isinstance(old, (int, float)) and not isinstance(old, bool) else 2**70
    return _set(doc, path, value)


def _dump(doc, structured: str) -> bytes:
    if structured == "json":
        text = json.dumps(doc, allow_nan=True)
    elif structured == "toml":
        text = _dump_toml(doc)
    else:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=200)
    return re.sub(r"['\"]?__DEEP_(\d+)__['\"]?", lambda m: "[" * int(m.group(1)) + "1" + "]" * int(m.group(1)), text).encode()


def _toml_value(v) -> str:
    """One TOML value (inline): strings JSON-quoted (a TOML basic string), nan / inf as TOML
    spells them, lists and tables inline; None (TOML has no null) as the string "null"."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == -float("inf") else repr(v))
    if isinstance(v, int) or (isinstance(v, str) and v.startswith("__DEEP_")):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps("null" if v is None else str(v))


def _dump_toml(doc) -> str:
    """A TOML document: top-level scalars, then one [section] per top-level table (nested
    tables inline); a top-level value that is not a table stays a key (`training = 5`)."""
    if not isinstance(doc, dict):
        return f"value = {_toml_value(doc)}\n"
    lines = [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append(f"\n[{json.dumps(str(k))}]")
            lines += [f"{json.dumps(str(kk))} = {_toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def _parse(structured: str, seed: bytes):
    if structured == "json":
        return json.loads(seed)
    if structured == "toml":
        import tomllib

        return tomllib.loads(seed.decode())
    return _load(seed)


# the stack kind (catalog.stack_data): what `extends:` may be set to (a catalog name, one that extends another, the
# input's own name, paths, which extends may not name, wrong types), values a number is set to, and what a nested
# mapping or list is swapped for
EXTENDS = ["megatron", "megatron-bridge", "torchtitan", "megatron-deepspeed-2021", "nosuch", "input", "input.yaml",
           "./input.yaml", "stack_db/megatron.yaml", "MEGATRON", "megatron ", "", None, 7, True, 1e400, [], ["megatron"],
           {}, {"megatron": 1}, "x" * 300]
STACK_NUMBERS = [-1, -0.5, 0, 0.0, 1e-300, float("nan"), float("inf"), -float("inf"), 2**63, 2**70, 10**400, 1e308,
                 0.999999, 1.000001, 7, 10**6]


def _stack_mutation(rng: random.Random, doc):
    """One mutation aimed at a stack file (schema.Stack, catalog.stack_data / _extend): `extends:` set to another
    value, added or deleted; a `name+` append key (on a list, a non-list, beside `name`); a number out of range;
    a nested mapping (a mode table, runs.sharding's entries) or a list (sources) of the wrong shape."""
    if not isinstance(doc, dict):
        return doc
    doc = copy.deepcopy(doc)
    op = rng.randrange(6)
    if op == 0:  # extends: another value, or gone
        if "extends" in doc and rng.random() < 0.2:
            del doc["extends"]
        else:
            doc = {"extends": rng.choice(EXTENDS), **{k: v for k, v in doc.items() if k != "extends"}}
        return doc
    paths = [p for p, _ in _paths(doc) if p]
    if op == 1:  # an append key: `name+` at a mapping's key, with its value or another
        maps = [p for p, v in _paths(doc) if isinstance(v, dict) and v]
        path = rng.choice(maps)
        node = doc
        for k in path:
            node = node[k]
        key = rng.choice(list(node))
        value = rng.choice([node[key], [node[key]], ["an appended source"], "not a list", None, {"a": 1}, []])
        if rng.random() < 0.5:
            node[f"{key}+"] = node.pop(key)  # the key itself as an append
            if rng.random() < 0.3:
                node[f"{key}+"] = value
        else:
            node[f"{key}+"] = value  # beside the key
        return doc
    if op == 2:  # a number out of range
        nums = [p for p, v in _paths(doc) if p and isinstance(v, (int, float)) and not isinstance(v, bool)]
        if nums:
            return _set(doc, rng.choice(nums), rng.choice(STACK_NUMBERS))
    if op == 3:  # a nested mapping of the wrong shape
        maps = [p for p, v in _paths(doc) if p and isinstance(v, dict)]
        if maps:
            return _set(doc, rng.choice(maps), rng.choice([None, [], [{}], "table", 0, {}, {"unknown": 1}]))
    if op == 4:  # a list (sources, modes, layer kinds) of the wrong shape
        lists = [p for p, v in _paths(doc) if p and isinstance(v, list)]
        if lists:
            return _set(doc, rng.choice(lists), rng.choice([None, [], [None], [1], "a string", [[]], [{}], ["s"] * 1000]))
    # a key of a nested mapping deleted or given twice over (a mode entry with its name missing)
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, list):
        parent.append(copy.deepcopy(parent[path[-1]]))
    return doc


# megatron-bridge: what an override's value is set to (Hydra's grammar: null, booleans, numbers, quoted strings,
# lists, dicts, `_target_` dicts) and the keys an override may name beside the seed's (unknown, misspelt, sections)
BRIDGE_VALUES = ["null", "None", "~", "true", "false", "True", "0", "-1", "1", "2", "3", "7", "1000", "2147483647",
                 "99999999999999999999999", "1e400", "-1e400", "nan", "inf", "-inf", "1e-308", "0.5", "-0.0", "abc", "''",
                 '""', "'8'", '"true"', "'null'", "[]", "[1,2]", "[[1]]", "{}", "{a:1}", "{a}", "{:}", "{a:{b:1}}",
                 "{_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig,tp_comm_overlap:true}",
                 "{_target_:nosuch.Class}", "{_target_:null}", "{tp_comm_overlap:true}", "hybrid", "e4m3", "full",
                 "selective", "uniform", "block", "optim_grads_params", "bf16_mixed", "bf16_with_fp8_hybrid", "=",
                 "x" * 300, "1" * 400]
BRIDGE_KEYS = ["model.nosuch", "nosuch", "model", "model.", ".x", "train.global_batch_size", "train.micro_batch_size",
               "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.num_layers",
               "model.hidden_size", "model.seq_length", "dataset.seq_length", "dataset.sequence_length",
               "comm_overlap", "comm_overlap.tp_comm_overlap", "comm_overlap._target_", "mixed_precision",
               "mixed_precision.fp8", "mixed_precision.fp8_recipe", "ddp.use_megatron_fsdp", "dist.use_torch_fsdp2",
               "ddp.data_parallel_sharding_strategy", "ddp.num_distributed_optimizer_instances",
               "model.recompute_granularity", "model.recompute_num_layers", "model.vocab_size",
               "model.expert_model_parallel_size", "+model.new_key", "++train.train_iters", "model.seq_length.x",
               # Hydra's other forms (issue 22): a deletion of a held, a null, an unknown key or a section, an add over a
               # held key, a property, a package / group
               "~model.context_parallel_size", "~model.vocab_size", "~nosuch", "~model", "+train.micro_batch_size",
               "+dataset.seq_length", "model@pkg", "model/x"]


def _bridge_mutation(rng: random.Random, data: bytes) -> bytes:
    """One mutation aimed at a run_recipe.py launch (planner/trainers/megatron_bridge.py): an override's value set to
    another (BRIDGE_VALUES), quoted, or to nothing; an override deleted, given twice (with another value), or added
    under another key (BRIDGE_KEYS); the --recipe's name changed."""
    lines = data.decode("utf-8", "replace").split("\n")
    over = [i for i, ln in enumerate(lines) if re.match(r"\s*\+{0,2}[\w.]+=", ln)]
    if not over:
        return data
    i = rng.choice(over)
    m = re.match(r"(\s*)(\+{0,2}[\w.]+)=(\S*)(.*)$", lines[i])
    indent, key, val, tail = m.groups()
    op = rng.randrange(7)
    if op == 0:  # the value replaced
        val = rng.choice(BRIDGE_VALUES)
    elif op == 1:  # the value quoted, or its quoting broken
        val = rng.choice([f"'{val}'", f'"{val}"', f"'{val}", f"\\'{val}\\'", f"'{val}'\"x\""])
    elif op == 2:  # the key given twice, the second time with another value
        lines.insert(i + 1, f"{indent}{key}={rng.choice(BRIDGE_VALUES + [val])}{tail}")
    elif op == 3:  # another key added
        lines.insert(i + 1, f"{indent}{rng.choice(BRIDGE_KEYS)}={rng.choice(BRIDGE_VALUES + [val])}{tail}")
    elif op == 4:  # the override deleted (the recipe's value stands)
        del lines[i]
        return "\n".join(lines).encode()
    elif op == 5:  # the recipe
        j = next((k for k, ln in enumerate(lines) if "--recipe" in ln), None)
        if j is not None:
            lines[j] = re.sub(r"--recipe[ =]\S+", "--recipe " + rng.choice(
                ["llama3_8b_pretrain_config", "llama3_70b_pretrain_config", "llama31_405b_pretrain_config",
                 "nosuch_config", "''", "--recipe", "llama3_8b_pretrain_config --recipe llama3_70b_pretrain_config"]),
                lines[j])
    else:  # the value emptied, or the `=` gone
        val = rng.choice(["", "=", " "])
        if rng.random() < 0.5:
            lines[i] = f"{indent}{key}{val}{tail}"
            return "\n".join(lines).encode()
    lines[i] = f"{indent}{key}={val}{tail}"
    return "\n".join(lines).encode()


# the job-fields kind: every schema.Job field, each set to values of its own domain (the seeds set a handful of
# fields; the other kinds' mutations only change, delete or misspell the keys a seed has, so most Job fields, and
# their combinations, never reached the cost models). Drawn from the schema itself (a Literal's options, a
# boolean, a count or a fraction inside the field's bounds), so a new field is fuzzed without a change here; a
# string, mapping or list-of-strings field takes the values below (catalog names, the stacks' mode and recipe
# names, the spellings its pattern allows). A value may still be refused by the combination: that is exit 2.
JOB_FIELD_VALUES = {
    "model": ["llama3-8b", "qwen3-30b-a3b", "megatron-gpt-1.7b", "mistral-7b", "gpt-oss-20b", "jamba-v0.1",
              str(DATA / "tiny-fit.yaml")],
    "gpus": [1, 2, 4, 8, 16, 24, 64],
    "global_batch": [1, 8, 16, 24, 64, 1024],
    "global_batch_tokens": [65536.0, 4194304.0, 1e3],
    "seq_len": [128, 1024, 2048, 4096, 8192, 32768],
    "tokens": [1e9, 1e12, 1.5e13],
    "power_limit_w": [200.0, 500.0, 700.0, 1200.0],
    "pcie_gbps": [16.0, 64.0, 256.0],
    "host_memory_gbps": [100.0, 614.4, 2000.0],
    "host_memory_gb": [64.0, 2048.0],
    "reserve_GiB": [0.0, 1.0, 8.0, 70.0],
    "rank_order": ["tp-cp-dp-pp", "tp-cp-pp-dp", "tp-dp-cp-pp", "cp-tp-dp-pp", "pp-dp-cp-tp", "dp-pp-cp-tp"],
    "te_version": ["1.8", "1.13", "2.1", "2.8.0"],
    # around the dated start-up checks (stack_db runs.deterministic_refuses since: 2024-07-25, 2025-10-27, 2026-07-08)
    "trainer_date": ["2024-07-24", "2025-10-27", "2026-07-02", "2026-07-08"],
    "cublas_workspace_config": [":4096:8", ":16:8", ":4096:2:16:8"],
    "filter_fqns": [["output"], ["output", "router.gate"], ["auto_filter_small_kn"], ["attention.wq", "feed_forward.w1"],
                    []],
    "batch_size_schedule": [[{"from_tokens": 0, "global_batch": 8}, {"from_tokens": 1e9, "global_batch": 16}],
                            [{"from_tokens": 0, "global_batch": 16}]],
    "deepspeed_zero3": [{"stage3_max_live_parameters": 10**9}, {"reduce_bucket_size": 5 * 10**8, "contiguous_gradients": 1},
                        {"stage3_param_persistence_threshold": 0, "sub_group_size": 10**9}],
    "hierarchical_cp_sizes": [[2, 2], [1, 4], [2, 1]],
    "padded_vocab_size": [32000, 50304, 128256, 128512, 151936, 152064, 201088],  # the models' vocabularies, padded or not
    "calibration": [None],
}


def _bounds(meta) -> tuple[float, float, bool, bool]:
    """A field's numeric bounds from its annotated_types metadata: (low, high, low inclusive, high inclusive)."""
    lo, hi, lo_in, hi_in = -float("inf"), float("inf"), True, True
    for m in meta:
        for attr, strict in (("gt", True), ("ge", False)):
            if getattr(m, attr, None) is not None:
                lo, lo_in = getattr(m, attr), not strict
        for attr, strict in (("lt", True), ("le", False)):
            if getattr(m, attr, None) is not None:
                hi, hi_in = getattr(m, attr), not strict
    return lo, hi, lo_in, hi_in


def _inside(v, bounds) -> bool:
    lo, hi, lo_in, hi_in = bounds
    return (v > lo or (lo_in and v == lo)) and (v < hi or (hi_in and v == hi))


def _domain(ann, meta) -> list:
    """The values a field annotation allows that the fuzz sets: a Literal's options, both booleans, counts and
    fractions inside the bounds, lists of a Literal's options; [] where it has none of its own (strings)."""
    import typing

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return list(args)
    if origin is typing.Annotated:
        return _domain(args[0], list(meta) + list(getattr(args[1], "metadata", []) if len(args) > 1 else []))
    if origin is typing.Union:
        return [v for a in args if a is not type(None) for v in _domain(a, meta)] + [None]
    if origin is list:
        opts = _domain(args[0], [])
        return [opts[:1], opts[:2], opts, opts[1:]] if opts and all(isinstance(o, str) for o in opts) else []
    if ann is bool:
        return [True, False]
    bounds = _bounds(meta)
    if ann is int:
        return [v for v in (0, 1, 2, 3, 4, 8, 16, 64) if _inside(v, bounds)]
    if ann is float:
        return [v for v in (0.0, 0.001, 0.05, 0.5, 0.9, 1.0, 1.25, 2.0, 64.0) if _inside(v, bounds)]
    return []


def job_field_domains() -> dict[str, list]:
    """Each schema.Job field's values for the job-fields kind (JOB_FIELD_VALUES, else the schema's domain; the
    string fields naming catalog entries or a stack's own names from the catalog)."""
    from planner.catalog import list_hardware, list_stacks, load_stack
    from planner.schema import Job

    stacks = [load_stack(s) for s in list_stacks()]
    named = {"hardware": list_hardware(), "stack": list_stacks(),
             "sharding_mode": sorted({m.name for st in stacks for m in (st.runs.sharding if st.runs else ())}),
             "fp8_recipe": sorted({r for st in stacks for r in st.fp8_recipes})}
    out = {}
    for name, info in Job.model_fields.items():
        values = JOB_FIELD_VALUES.get(name) or named.get(name) or _domain(info.annotation, info.metadata)
        if values:
            out[name] = values
    return out


_JOB_DOMAINS: dict[str, list] = {}


def _job_field_mutation(rng: random.Random, doc):
    """One Job field set to a value of its domain (job_field_domains), or a field the job sets (not its model or GPU
    count, which every command needs) removed."""
    if not isinstance(doc, dict):
        return doc
    if not _JOB_DOMAINS:
        _JOB_DOMAINS.update(job_field_domains())
    doc = dict(doc)
    optional = sorted(k for k in doc if k not in ("model", "gpus"))
    if optional and rng.random() < 0.1:
        del doc[rng.choice(optional)]
        return doc
    name = rng.choice(sorted(_JOB_DOMAINS))
    doc[name] = copy.deepcopy(rng.choice(_JOB_DOMAINS[name]))
    return doc


def mutate(rng: random.Random, target: Target, seed: bytes) -> bytes:
    if target.kind == "job-fields" and rng.random() < 0.85:
        doc = _parse("yaml", seed)
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4, 6])):
            doc = _job_field_mutation(rng, doc)
        return _dump(doc, "yaml")
    if target.kind == "cli-options":
        argv = cli_argv(seed)
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
            argv = _cli_mutation(rng, argv)
        return json.dumps(argv).encode()
    if target.kind == "config-fit" and rng.random() < 0.85:
        name = next(n for n, d in target.seeds.items() if d == seed)
        data = seed
        for _ in range(rng.choice([1, 1, 2, 3])):  # a Bridge launch's overrides as the megatron-bridge kind mutates them
            data = (_bridge_mutation(rng, data) if name in CONFIG_FIT_BRIDGE
                    else _config_mutation(rng, data, target.seed_suffix.get(name, target.suffix)))
        return data
    if target.kind == "megatron-recent" and rng.random() < 0.9:
        data = seed
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = _recent_mutation(rng, data)
        return data
    if target.kind == "newest-fields" and rng.random() < 0.9:
        suffix = Path(next((k for k, v in target.seeds.items() if v == seed), ".sh")).suffix
        data = seed
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = _newest_mutation(rng, data, suffix)
        return data
    if target.kind == "precision-flags" and rng.random() < 0.9:
        suffix = Path(next((k for k, v in target.seeds.items() if v == seed), ".sh")).suffix
        data = seed
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = _precision_mutation(rng, data, suffix)
        return data
    if target.kind == "megatron-bridge" and rng.random() < 0.7:
        data = seed
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = _bridge_mutation(rng, data)
        return data
    if target.kind == "stack" and rng.random() < 0.3:
        doc = _parse("yaml", seed)
        for _ in range(rng.choice([1, 1, 2])):
            doc = _stack_mutation(rng, doc)
        return _dump(doc, "yaml")
    if target.structured and rng.random() < 0.6:
        try:
            doc = _parse(target.structured, seed)
        except Exception:  # noqa: BLE001 - a seed that does not parse: fall back to bytes
            doc = None
        if doc is not None:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                doc = _value_mutation(rng, doc, target.kind)
            return _dump(doc, target.structured)
    data = seed
    for _ in range(rng.choice([1, 1, 2, 3])):
        data = _byte_mutation(rng, data)
    return data


# -------------------------------------------------------------------------- running
def check_result(r) -> str | None:
    """None if the result keeps the contract, else what broke it."""
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        return f"{type(r.exception).__name__}: {r.exception}"[:300]
    if r.exit_code not in (0, 1, 2):
        return f"exit code {r.exit_code}"
    err = r.stderr
    if "Traceback" in err or "Traceback" in r.stdout:
        return "traceback in the output"
    if r.exit_code == 2:
        # warnings and notes may come first: a trainer config's reader reports what it read
        # (issue 24) before the plan it makes is found invalid
        first = next((ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("warning: ", "note: "))), "")
        if not first.startswith("error: "):
            return f"exit 2 without `error:` first: {first[:200]!r}"
    return None


def _lay_out(target: Target, name: str, data: bytes, folder: Path, cmd: int) -> list[str]:
    """Write one input into a fresh folder (a fresh path: the catalog caches files by path)
    and return the command line that reads it."""
    folder.mkdir(parents=True)
    f = folder / (target.filename or f"input{target.seed_suffix.get(name, target.suffix)}")
    f.write_bytes(data)
    subst = {"{f}": str(f), "{d}": str(folder), **target.seed_vars.get(name, {})}

    def fill(a: str) -> str:
        for k, v in subst.items():
            a = a.replace(k, v)
        return a

    for cname, text in target.companions.items():
        (folder / cname).write_text(fill(text))
    given = cli_argv(data) if target.argv_input else []
    return [fill(a) for a in target.args[cmd] + target.seed_args.get(name, []) + given]


def seed_results(workdir: Path, every_command: bool = True) -> list[tuple[str, str, list[str], object]]:
    """The commands of every target (or only each one's first) on its unmutated seeds:
    (kind, seed, args, result)."""
    runner = CliRunner()
    out = []
    for kind, t in split_gemm(targets(workdir)).items():
        for name, data in sorted(t.seeds.items()):
            for c in range(len(t.args) if every_command else 1):
                args = _lay_out(t, name, data, workdir / f"seed-{kind}-{name}-{c}", c)
                out.append((kind, name, args, runner.invoke(app, args)))
    return out


def fuzz(target: Target, n: int, seed: int, workdir: Path, on_input: Callable | None = None) -> Outcome:
    """n mutated inputs of `target`, each run once; deterministic in `seed`."""
    rng = random.Random(f"{target.kind}:{seed}")
    runner = CliRunner()
    out = Outcome()
    names = sorted(target.seeds)
    for i in range(n):
        name = names[i % len(names)]
        data = mutate(rng, target, target.seeds[name])
        args = _lay_out(target, name, data, workdir / f"{target.kind}-{seed}-{i}", i % len(target.args))
        r = runner.invoke(app, args)
        out.tried += 1
        out.codes[r.exit_code] = out.codes.get(r.exit_code, 0) + 1
        why = check_result(r)
        if why is None and target.check is not None:
            why = target.check(args, r)
        if why is not None:
            out.failures.append((target.kind, name, i, args, why, data[:400]))
        if on_input is not None:
            on_input(target, i, r)
    return out


# --------------------------------------------------------------------------- targets
def _read(p: Path) -> bytes:
    return p.read_bytes()


def _hf_config(model_yaml: Path) -> bytes:
    """A transformers config.json with a catalog model's shape, under transformers' key
    names (LlamaConfig's), for the HF reader's seeds."""
    m = _load(model_yaml.read_bytes())
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu" if m["gated_mlp"] else "gelu",
        "num_hidden_layers": m["num_layers"], "hidden_size": m["hidden_size"], "intermediate_size": m["ffn_hidden_size"],
        "num_attention_heads": m["num_attention_heads"], "num_key_value_heads": m.get("num_kv_heads") or m["num_attention_heads"],
        "vocab_size": m["vocab_size"], "max_position_embeddings": m["max_seq_len"], "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": bool(m.get("tied_embeddings", False)), "attention_dropout": 0.0,
        "attention_bias": False, "torch_dtype": "bfloat16",
    }
    return json.dumps(cfg, indent=2).encode()


JOBS = {
    "job-8b.yaml": {"model": "llama3-8b", "gpus": 8, "tp": 8, "global_batch": 64, "seq_len": 8192},
    "job-70b.yaml": {"model": "llama3-70b", "gpus": 64, "tp": 8, "pp": 4, "vpp": 2, "micro_batch": 1, "global_batch": 512,
                     "sharding": "zero1", "recompute": "selective", "precision": "fp8", "stack": "megatron"},
    "job-titan.yaml": {"model": "llama3-8b", "hardware": "h200-sxm", "gpus": 16, "sharding": "fsdp", "stack": "torchtitan",
                       "global_batch_tokens": 4194304, "tokens": 1.5e13, "recompute": "full", "headroom": 0.05},
}

NCCL_ARGS = {  # facts each seed log leaves out (tests/test_calibrate_nccl.py LOG_OPTIONS), else it stops before the fit
    "a100_16gpu_2node_allreduce_aws-p4de-efa.txt": ["--nodes", "2"],
    "a100_8gpu_allreduce_stas00-mlengineering-TRIMMED.txt": ["--nodes", "1"],
    "b200_16gpu_2node_allgather_google-dranet.txt": ["--collective", "all_gather"],
    "gb200_72gpu_nvl72_allreduce_coreweave.txt": ["--nodes", "18", "--hardware", "gb200-nvl72"],
    "h100_8gpu_allreduce_aws-p5-batch.txt": ["--nodes", "1"],
    "h100_8gpu_reducescatter_nccl-issue1047-PARTIAL.txt": ["--nodes", "1"],
}


_TARGETS: dict[Path, dict[str, Target]] = {}
ISSUE24_KINDS = ("megatron", "torchtitan", "deepspeed", "export", "run-log", "run-records", "plot", "moe-config",
                 "megatron-deepspeed", "torchtitan-0.3", "host-adam")


def targets(workdir: Path) -> dict[str, Target]:
    """Every reader kind with its seeds (built once per workdir). Writes the derived seeds
    (profile, fit) under workdir."""
    if workdir not in _TARGETS:
        _TARGETS[workdir] = _targets(workdir)
    return _TARGETS[workdir]


def _load(data: bytes):
    return yaml.load(data, Loader=YAML_LOADER)


def _targets(workdir: Path) -> dict[str, Target]:
    runner = CliRunner()
    zoo, hwdb = ROOT / "model_zoo", ROOT / "hardware_db"
    models = {p.name: _read(p) for p in [zoo / "llama3-8b.yaml", zoo / "gpt3-175b.yaml", zoo / "mpt-7b.yaml", DATA / "tiny-fit.yaml"]}
    hardware = {p.name: _read(p) for p in [hwdb / "h100-sxm.yaml", hwdb / "mi300x.yaml", hwdb / "gb200-nvl72.yaml",
                                           DATA / "hardware" / "aws-p4de.yaml"]}
    logs = {p.name: _read(p) for p in sorted((DATA / "nccl_logs").glob("*.txt"))}
    gemm_yaml = _read(DATA / "gemm_measurements.yaml")
    gemm_rows = [r for r in _load(gemm_yaml)["measurements"] if isinstance(r, dict)][:40]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["M", "N", "K", "dtype", "tflops", "gpu"])
    w.writerows([[r[k] for k in ("M", "N", "K", "dtype", "tflops")] + [r.get("gpu", "")] for r in gemm_rows
                 if all(k in r for k in ("M", "N", "K", "dtype", "tflops"))])
    runs_all = _load(_read(DATA / "published_runs.yaml"))
    runs = {"runs-head.yaml": yaml.safe_dump(runs_all[:3], sort_keys=False).encode(),
            "runs-tail.yaml": yaml.safe_dump(runs_all[-2:], sort_keys=False).encode()}
    # derived seeds: a calibration profile (nccl + gemm) and a saved fit, as the CLI writes them
    seeds_dir = workdir / "seeds"
    seeds_dir.mkdir(parents=True, exist_ok=True)
    prof = seeds_dir / "profile.yaml"
    runner.invoke(app, ["calibrate", "nccl", str(DATA / "nccl_logs" / "h100_8gpu_allreduce_aws-p5-batch.txt"), "--nodes", "1",
                        "-o", str(prof)])
    runner.invoke(app, ["calibrate", "gemm", "--from", str(DATA / "gemm_measurements.yaml"), "--gpu-filter", "h100",
                        "-o", str(prof)])
    job = seeds_dir / "job-8b.yaml"
    job.write_text(yaml.safe_dump(JOBS["job-8b.yaml"]))
    fit_json = runner.invoke(app, ["fit", "--model", "llama3-8b", "--gpus", "8", "--top", "3", "--format", "json"]).stdout
    explain = ["explain", "--model", "{f}", "--gpus", "8"]
    return {
        "model": Target("model", models, [explain, ["fit", "--model", "{f}", "--gpus", "16", "--top", "2"]], "yaml"),
        "hf-config": Target("hf-config", {"llama3-8b.json": _hf_config(zoo / "llama3-8b.yaml"),
                                          "gpt3-175b.json": _hf_config(zoo / "gpt3-175b.yaml")},
                            [explain, ["explain", "--model", "{d}", "--gpus", "8", "--format", "json"]], "json",
                            filename="config.json"),
        "hardware": Target("hardware", hardware, [["explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", "{f}"],
                                                  ["fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1", "--hardware", "{f}"]],
                           "yaml"),
        "job": Target("job", {k: yaml.safe_dump(v, sort_keys=False).encode() for k, v in JOBS.items()},
                      [["explain", "{f}"], ["check", "{f}", "--format", "json"], ["budget", "{f}", "--tokens", "1T", "--mc-runs", "2"]], "yaml"),
        "runs": Target("runs", runs, [["validate", "{f}"]], "yaml"),
        "nccl-log": Target("nccl-log", logs, [["calibrate", "nccl", "{f}", "-o", "{d}/p.yaml"]], None, suffix=".txt",
                           seed_args=NCCL_ARGS),
        "gemm": Target("gemm", {"gemm.yaml": gemm_yaml, "gemm.csv": buf.getvalue().encode(),
                                "gemm.json": json.dumps(gemm_rows).encode()},
                       [["calibrate", "gemm", "--from", "{f}", "--gpu-filter", "h100", "-o", "{d}/p.yaml"]], None),
        "profile": Target("profile", {"profile.yaml": prof.read_bytes()},
                          [["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--calibration", "{f}"],
                           ["check", str(job), "--calibration", "{f}", "--max-step-time", "100s"]], "yaml"),
        "fit-json": Target("fit-json", {"fit.json": fit_json.encode()}, [["explain", "--from-fit", "{f}", "--row", "2"]],
                           "json", suffix=".json"),
        **_issue24_targets(),
        "stack": _stack_target(),
        "megatron-bridge": _bridge_target(seeds_dir),
        "job-fields": _job_fields_target(),
        "config-fit": _config_fit_target(seeds_dir),
        "cli-options": _cli_options_target(seeds_dir, prof, fit_json),
        "megatron-recent": _recent_target(),
        "newest-fields": _newest_target(seeds_dir),
        "precision-flags": _precision_target(),
    }


def _bridge_target(seeds_dir: Path) -> Target:
    """Megatron-Bridge run_recipe.py launches (planner/trainers/megatron_bridge.py): the hand-written 405B fixture
    and two launches the CLI writes (`export --format megatron-bridge` of Llama 3 8B on 8 GPUs at TP 4, a plan that fits; `fit --export
    megatron-bridge` of Llama 3 70B on 64 with Megatron-FSDP), read by check and explain."""
    runner = CliRunner()
    out8, out70 = seeds_dir / "bridge-8b.sh", seeds_dir / "bridge-70b-fsdp.sh"
    runner.invoke(app, ["export", "--model", "llama3-8b", "--gpus", "8", "--tp", "4", "--stack", "megatron-bridge", "--format",
                        "megatron-bridge", "-o", str(out8)])
    runner.invoke(app, ["fit", "--model", "llama3-70b", "--gpus", "64", "--sharding", "fsdp", "--stack",
                        "megatron-bridge", "--top", "1", "--export", "megatron-bridge", "-o", str(out70)])
    seeds = {"bridge_llama31_405b_h100.sh": _read(CONFIGS / "bridge_llama31_405b_h100.sh"),
             "bridge-8b.sh": out8.read_bytes(), "bridge-70b-fsdp.sh": out70.read_bytes()}
    return Target("megatron-bridge", seeds, [["check", "{f}", "--format", "json"], ["explain", "{f}"]], None,
                  suffix=".sh")


# the job-fields kind: small job files (a dense and an MoE model on Megatron-Core, torchtitan in fp8 under FSDP,
# Megatron-DeepSpeed ZeRO-1 with GPT-2's shape), each plan fitting its GPUs, each mutated by _job_field_mutation
JOB_FIELD_SEEDS = {
    "jf-llama3-8b.yaml": {"model": "llama3-8b", "gpus": 8, "tp": 2, "sharding": "zero1", "global_batch": 16, "seq_len": 4096},
    "jf-qwen3-moe.yaml": {"model": "qwen3-30b-a3b", "gpus": 16, "ep": 8, "sharding": "zero1", "recompute": "full",
                          "global_batch": 32, "seq_len": 4096, "stack": "megatron"},
    "jf-titan-fp8.yaml": {"model": "llama3-8b", "gpus": 8, "stack": "torchtitan", "sharding": "fsdp", "precision": "fp8",
                          "recompute": "full", "global_batch": 16, "seq_len": 4096},
    "jf-mds.yaml": {"model": "megatron-gpt-1.7b", "gpus": 8, "stack": "megatron-deepspeed", "sharding": "zero1",
                    "global_batch": 16, "seq_len": 2048},
}


def _differ(a, b, where: str = "") -> str | None:
    """Where two JSON values differ (numbers beyond a relative 1e-9: the same sums in another order), else None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'fit' if k in b else 'explain'}"
            d = _differ(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _differ(x, y, f"{where}[{i}]"))), None)
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return None if a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)) else f"{where}: explain {a!r}, fit {b!r}"
    return None if a == b else f"{where}: explain {a!r}, fit {b!r}"


def fit_rows_agree(args: list[str], r) -> str | None:
    """`fit JOB.yaml --format json`'s rows each priced again by `explain` of the row's reproduce lines: the one
    `fit --model ...` prints (search.explain_args, as tests/conftest.explain_each_row) and the one `fit JOB.yaml`
    prints (search.config_explain_args: `explain JOB.yaml` with the row's plan; where the file sets none of the
    settings that explain keeps and the row was priced without, fit_config.unkept). Each must exit 0 and give the
    same time terms, memory terms, stage totals and host block (DESIGN: explain and search never disagree;
    tests/test_explain_search_agree.py's check, on the plans the job-fields kind's mutations make)."""
    import contextlib
    import shlex

    from planner.cli.fit_config import config_jobs, file_axes, unkept
    from planner.errors import PlannerError
    from planner.search import config_explain_args, explain_args

    if args[0] != "fit" or r.exit_code != 0 or "json" not in args:
        return None
    data = json.loads(r.stdout)
    rows = data["rows"] if isinstance(data, dict) else data
    overrides, repeat = _fit_job_options(args)
    with contextlib.redirect_stderr(io.StringIO()):  # config_jobs' notes, which fit has printed
        job, own, _, _ = config_jobs(Path(args[1]), overrides, {}, None)
    runner = CliRunner()
    for i, row in enumerate(rows, 1):
        try:
            lines = [explain_args(job, row)]
        except PlannerError as e:  # a row the options cannot spell (a custom bytes_per_param): fit says so
            if "has no explain option" not in str(e):
                return f"row {i}: explain_args: {e}"
            lines = []
        if not unkept(own, overrides, {}):  # the options given to fit itself are the caller's to repeat
            lines.append(config_explain_args(args[1], job, row, file_axes(own)) + repeat)
        for again in lines:
            e = runner.invoke(app, ["explain", *again, "--format", "json"])
            line = f"row {i}: planner explain {shlex.join(again)}"
            if e.exit_code != 0:
                return f"{line}: exit {e.exit_code} where fit ranked the row: {(e.stderr or '')[-300:]}"
            one = json.loads(e.stdout)
            for key in ("time", "memory"):
                got, want = one[key], row[key]
                if key == "memory":
                    got, want = ({k: m.get(k) for k in ("terms", "stages", "host")} for m in (got, want))
                d = _differ(got, want, key)
                if d:
                    return f"{line}: disagrees with fit at {d}"[:600]
    return None


# fit CONFIG's job options that a fuzz command line gives (the config-fit and precision-flags kinds' seed_args: what a
# trainer config does not hold), as fit passes them to config_jobs (Job field -> value) and as explain of a row's
# reproduce line repeats them (fit's own line ends with them: render/fit.row_command's `given`). --trainer-date: the
# precision-flags kind's fp8 functional test runs at 2026-07-02 (f34bc667), which decides what its deterministic mode
# sets (stack megatron runs.deterministic_nccl_algo, from 2026-07-08): a line without it prices another NCCL algorithm
# (fuzz seed 116's false failure; tests/test_fuzz.py test_fit_job_options_cover_every_seed_option)
FIT_JOB_OPTIONS = {"--gpus": ("gpus", int), "--hardware": ("hardware", str), "--model": ("model", str),
                   "--seq-len": ("seq_len", int), "--trainer-date": ("trainer_date", str)}


def _fit_job_options(args: list[str]) -> tuple[dict, list[str]]:
    """(config_jobs' overrides, the options to repeat) of a `fit CONFIG ...` command line (FIT_JOB_OPTIONS)."""
    overrides, repeat = {}, []
    for j, a in enumerate(args[:-1]):
        if a in FIT_JOB_OPTIONS:
            key, typ = FIT_JOB_OPTIONS[a]
            overrides[key] = typ(args[j + 1])
            repeat += [a, args[j + 1]]
    return overrides, repeat


def exports_read_back(args: list[str], r) -> str | None:
    """Each row of `fit ... --format json` exported in every trainer format that writes it (export_plan; a format
    that refuses the plan, naming why, is skipped: another stack's format, a setting it cannot hold) and read back as
    `fit --export` reads its file back (cli/export.check_readback): the same plan signature and memory total, else
    what differs. `fit --export FORMAT` refuses such a row (exit 2, "report it"); this finds it on every row
    (_row_reads_back)."""
    if args[0] != "fit" or r.exit_code != 0 or "json" not in args:
        return None
    data = json.loads(r.stdout)
    for i, row in enumerate(data["rows"] if isinstance(data, dict) else data, 1):
        why = _row_reads_back(row, f"row {i}")
        if why:
            return why
    return None


def config_fit_check(args: list[str], r) -> str | None:
    """The config-fit kind's check: fit_rows_agree (each row's reproduce lines priced again by explain), then
    exports_read_back (each row exported in every format that writes it reads back as the same plan and memory)."""
    return fit_rows_agree(args, r) or exports_read_back(args, r)


# the config-fit kind: trainer configs of each format that `fit CONFIG` searches around (fit --top 2 --format json),
# each row priced again by explain of its reproduce lines and exported in every format that writes it, read back
# (config_fit_check). Its mutations aim at configs that still read (_config_mutation): a value set to one a trainer
# takes, a setting removed, a parallelism or memory flag added
CONFIG_VALUES = ["1", "2", "3", "4", "8", "16", "64", "0", "-1", "true", "false", "full", "selective", "none", "uniform",
                 "block", "bf16", "fp8", "e4m3", "hybrid", "2048", "8192"]
CONFIG_FLAGS = ["--sequence-parallel", "--use-distributed-optimizer", "--recompute-activations", "--overlap-grad-reduce",
                "--overlap-param-gather", "--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2",
                "--context-parallel-size 2", "--micro-batch-size 2", "--recompute-granularity full",
                "--recompute-method uniform --recompute-num-layers 1", "--num-layers-per-virtual-pipeline-stage 2",
                "--fp8-format hybrid", "--zero-stage 1", "--zero-stage 3", "--tp-comm-overlap", "--bf16",
                "--parallelism.tensor_parallel_degree 2", "--parallelism.pipeline_parallel_degree 2",
                "--parallelism.context_parallel_degree 2", "--activation_checkpoint.mode full",
                "--training.local_batch_size 4"]
CONFIG_TOML = [("parallelism", "tensor_parallel_degree", [1, 2, 4, 8]), ("parallelism", "pipeline_parallel_degree", [1, 2]),
               ("parallelism", "context_parallel_degree", [1, 2]), ("parallelism", "data_parallel_replicate_degree", [1, 2]),
               ("parallelism", "data_parallel_shard_degree", [-1, 1, 2, 4]), ("training", "local_batch_size", [1, 2, 4]),
               ("training", "seq_len", [2048, 4096, 8192]), ("activation_checkpoint", "mode", ["none", "selective", "full"]),
               ("model", "converters", [["float8"], []]), ("compile", "enable", [True, False]),
               ("parallelism", "enable_async_tensor_parallel", [True, False]),
               ("parallelism", "fsdp_reshard_after_forward", ["default", "always", "never"])]
CONFIG_JSON = [(("zero_optimization", "stage"), [0, 1, 2, 3]), (("train_micro_batch_size_per_gpu",), [1, 2, 8]),
               (("gradient_accumulation_steps",), [1, 2, 4]), (("train_batch_size",), [16, 64, 128]),
               (("bf16", "enabled"), [True, False]), (("fp16", "enabled"), [True, False]),
               (("zero_optimization", "offload_optimizer"), [{"device": "cpu"}, {"device": "none"}]),
               (("activation_checkpointing", "partition_activations"), [True, False])]
# a launch script's NCCL environment (megatron.read_nccl_env, which the Megatron-LM, Megatron-DeepSpeed,
# Megatron-Bridge and torchtitan 0.3 launch readers call): an `export` line after the shebang, the job field's values
# and one only NCCL's reading gives (NCCL_NVLS_ENABLE 3: forced on, the job's 1; refused, exit 2, before 2026-12-07)
CONFIG_ENV = ["NCCL_NVLS_ENABLE=0", "NCCL_NVLS_ENABLE=1", "NCCL_NVLS_ENABLE=2", "NCCL_NVLS_ENABLE=3", "NCCL_ALGO=Ring",
              "NCCL_PROTO=simple"]


def _config_mutation(rng: random.Random, data: bytes, suffix: str) -> bytes:
    """One change to a trainer config that leaves it a config of its trainer: a TOML section's key or a DeepSpeed
    JSON key set to a value the trainer takes (CONFIG_TOML, CONFIG_JSON) or removed; in a launch script a flag's
    value (`--name value`) or a variable (`NAME=value`) set to another (CONFIG_VALUES), a flag removed, or a flag
    added after another (CONFIG_FLAGS); in a .sh launch also an NCCL variable exported (CONFIG_ENV)."""
    if suffix == ".toml":
        import tomllib

        doc = tomllib.loads(data.decode())
        sec, key, values = rng.choice(CONFIG_TOML)
        if rng.random() < 0.15:
            doc.get(sec, {}).pop(key, None)
        else:
            doc.setdefault(sec, {})[key] = rng.choice(values)
        return _dump(doc, "toml")
    if suffix == ".json":
        doc = json.loads(data)
        path, values = rng.choice(CONFIG_JSON)
        node = doc
        for k in path[:-1]:
            node = node.setdefault(k, {}) if isinstance(node, dict) else {}
        if rng.random() < 0.15:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = rng.choice(values)
        return json.dumps(doc, indent=2).encode()
    text = data.decode("utf-8", "replace")
    spots = [m for m in re.finditer(r"(--[\w.-]+)([ =])(?!-)([^\s\\]+)|^(\s*)([A-Z_][A-Z0-9_]*)=(\S*)", text, re.M)]
    op = rng.randrange(5 if suffix == ".sh" else 4)
    if op == 4:  # an NCCL variable exported before the launch line (after the shebang)
        lines = text.split("\n")
        at = 1 if lines and lines[0].startswith("#!") else 0
        return "\n".join(lines[:at] + [f"export {rng.choice(CONFIG_ENV)}"] + lines[at:]).encode()
    if op == 3 or not spots:  # a flag added after a flag's line
        at = [m.end() for m in re.finditer(r"--[\w.-]+[^\n\\]*", text)]
        if at:
            i = rng.choice(at)
            return (text[:i] + " " + rng.choice(CONFIG_FLAGS) + text[i:]).encode()
        return data
    m = rng.choice(spots)
    if m.group(1):  # --name value
        if op == 2:  # the flag removed
            return (text[:m.start()] + text[m.end():]).encode()
        return (text[:m.start(3)] + rng.choice(CONFIG_VALUES) + text[m.end(3):]).encode()
    return (text[:m.start(6)] + rng.choice(CONFIG_VALUES) + text[m.end(6):]).encode()  # NAME=value


CONFIG_FIT_BRIDGE = ("bridge-8b.sh",)  # the config-fit seeds that are Megatron-Bridge launches (key=value overrides)


def _config_fit_target(seeds_dir: Path) -> Target:
    """Trainer configs fit searches around, one of each read format: torchtitan TOML (llama3_8b.toml), a Megatron-LM
    launch (train_llama3_8b.sh), a Megatron-DeepSpeed launch (run_deepspeed_example.sh), a DeepSpeed JSON
    (ds_config_zero2.json, with the model), the Megatron-Bridge launch the megatron-bridge kind writes (bridge-8b.sh)
    and a torchtitan 0.3 launch (run_train_8b.sh): `fit CONFIG --top 2 --format json`, checked by config_fit_check."""
    seeds = {"llama3_8b.toml": _read(CONFIGS / "llama3_8b.toml"), "train_llama3_8b.sh": _read(CONFIGS / "train_llama3_8b.sh"),
             "run_deepspeed_example.sh": _read(CONFIGS / "run_deepspeed_example.sh"),
             "ds_config_zero2.json": _read(CONFIGS / "ds_config_zero2.json"),
             "bridge-8b.sh": (seeds_dir / "bridge-8b.sh").read_bytes(),
             "run_train_8b.sh": _read(DATA / "torchtitan03" / "run_train_8b.sh")}
    return Target("config-fit", seeds, [["fit", "{f}", "--top", "2", "--format", "json"]], None, suffix=".sh",
                  seed_args={"llama3_8b.toml": ["--gpus", "8"], "run_deepspeed_example.sh": ["--gpus", "8", "--hardware", "h100-sxm"],
                             "ds_config_zero2.json": ["--model", "llama3-8b", "--gpus", "8"]},
                  seed_suffix={"llama3_8b.toml": ".toml", "ds_config_zero2.json": ".json"}, check=config_fit_check)


def _job_fields_target() -> Target:
    """Job files with random Job fields set (_job_field_mutation): read by fit (its rows priced again by explain,
    fit_rows_agree, and exported in every format that writes them, read back: exports_read_back), explain and check
    (check agrees with explain, and the plan of either exported reads back: plans_check)."""
    seeds = {k: yaml.safe_dump(v, sort_keys=False).encode() for k, v in JOB_FIELD_SEEDS.items()}
    return Target("job-fields", seeds, [["fit", "{f}", "--top", "3", "--format", "json"], ["explain", "{f}", "--format", "json"],
                                        ["check", "{f}", "--format", "json"]], "yaml", check=plans_check)



# the megatron-recent kind: Megatron-LM's own functional-test argument files (tests/data/megatron_ci/args) of the
# features added since the config-fit kind was written (an uneven pipeline split, Muon, optimizer instances,
# Megatron-FSDP with its main-params dtype, a hybrid Mamba pattern with vpp), mutated by _recent_mutation: one of
# RECENT_FLAGS set (added, or its value replaced) or removed, the other settings as _config_mutation changes them.
# Checked by recent_check: fit's rows as config_fit_check; check's plan, memory and time equal explain's for the same
# command line; explain's (and check's) plan exported in each format that writes it reads back as the same plan and
# memory (`fit --export`'s check_readback, on the file's own plan)
CI_ARGS = DATA / "megatron_ci" / "args"
RECENT_SEEDS = ("gpt__gpt3_mcore_te_tp1_pp4_vp1_uneven_pipeline__dev_dgx_h100.args",
                "moe__gpt3_moe_mcore_te_ep8_resume_torch_dist_dist_muon__dev_dgx_h100.args",
                "gpt__gpt3_mcore_te_tp2_pp1_resume_torch_dist_multi_dist_optimizer_instances_1node__dev_dgx_gb200.args",
                "gpt__gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_1node__dev_dgx_gb200.args",
                "hybrid__hybrid_mr_mcore_te_tp1_pp2_vpp2_cp1_dgx_a100_1N8G__dev_dgx_h100.args")
# (flag, its values; None: a switch) of the recent features and the plan axes they meet (Megatron-LM @d98e8a64
# arguments.py), valid values and ones Megatron refuses
RECENT_FLAGS = [
    ("--optimizer", ["muon", "dist_muon", "adam", "sgd", "nosuch"]),
    ("--decoder-first-pipeline-num-layers", ["1", "2", "3", "4", "6", "0", "-1", "12"]),
    ("--decoder-last-pipeline-num-layers", ["1", "2", "3", "4", "6", "0", "12"]),
    ("--pipeline-model-parallel-size", ["1", "2", "4", "3"]),
    ("--num-layers-per-virtual-pipeline-stage", ["1", "2", "3"]),
    ("--num-virtual-stages-per-pipeline-rank", ["1", "2", "4"]),
    ("--num-distributed-optimizer-instances", ["1", "2", "4", "3", "0", "8"]),
    ("--use-distributed-optimizer", None),
    ("--no-use-layer-wise-param-layout", None),
    ("--use-megatron-fsdp", None),
    ("--use-torch-fsdp2", None),
    ("--data-parallel-sharding-strategy", ["no_shard", "optim", "optim_grads", "optim_grads_params", "nosuch"]),
    ("--megatron-fsdp-main-params-dtype", ["fp32", "bf16", "fp16", "auto", "int8"]),
    ("--megatron-fsdp-main-grads-dtype", ["fp32", "bf16", "auto"]),
    ("--hybrid-layer-pattern", ['"M-M-M-M-M-M-"', '"M*-M*-M*-"', '"M-M-|M-M-"', '"M-|M-|M-|M-"', '"MMMM"', '"X-"', '""']),
    ("--attention-backend", ["flash", "fused", "unfused", "local", "auto", "nosuch"]),
    ("--tensor-model-parallel-size", ["1", "2", "4"]),
    ("--context-parallel-size", ["1", "2"]),
    ("--expert-model-parallel-size", ["1", "2", "8"]),
    ("--micro-batch-size", ["1", "2", "4"]),
    ("--global-batch-size", ["8", "32", "64"]),
    ("--recompute-granularity", ["full", "selective"]),
    ("--account-for-embedding-in-pipeline-split", None),
    ("--account-for-loss-in-pipeline-split", None),
    ("--overlap-param-gather", None),
    ("--sequence-parallel", None),
    ("--fp8-format", ["hybrid", "e4m3"]),
]


def _recent_mutation(rng: random.Random, data: bytes) -> bytes:
    """One change to a Megatron argument file (one flag a line): a RECENT_FLAGS flag set (its line replaced, or added)
    or removed, or another setting changed as _config_mutation changes a launch's."""
    if rng.random() < 0.25:
        return _config_mutation(rng, data, ".args")
    text = data.decode("utf-8", "replace")
    flag, values = rng.choice(RECENT_FLAGS)
    line = flag if values is None else f"{flag} {rng.choice(values)}"
    lines = text.splitlines()
    at = [i for i, ln in enumerate(lines) if ln.split(" ", 1)[0] == flag]
    if at and rng.random() < 0.3:
        del lines[at[0]]
    elif at:
        lines[at[0]] = line
    else:
        lines.insert(rng.randrange(len(lines) + 1), line)
    return ("\n".join(lines) + "\n").encode()


def _row_reads_back(row: dict, where: str) -> str | None:
    """A priced row's plan exported in every trainer format that writes it (export_plan; a refusal, naming why, is
    skipped) and read back as `fit --export` reads its file (check_readback): None, else what differs."""
    from planner.cli.export import check_readback
    from planner.errors import PlannerError
    from planner.trainers import FORMATS
    from planner.trainers.export import export_plan

    for fmt in FORMATS:
        try:
            text, _ = export_plan(row["plan"], fmt)
        except PlannerError:
            continue
        try:
            check_readback(row, fmt, text)
        except PlannerError as e:
            return f"{where}: export {fmt} read back: {e}"[:600]
    return None


def recent_check(args: list[str], r) -> str | None:
    """The megatron-recent kind's check: an exit 2 gives a `hint:` after its error; fit as config_fit_check; check's
    plan, time and memory (terms, stages, total) those of explain of the same command line, and its verdict explain's
    `fits`; explain's and check's plan exported in every format that writes it reads back as the same plan and memory
    (_row_reads_back)."""
    if r.exit_code == 2:  # a bad value (a flag Megatron refuses): the error and its hint (README "Robustness")
        lines = [ln for ln in (r.stderr or "").splitlines() if ln.strip()]
        at = next((i for i, ln in enumerate(lines) if ln.startswith("error: ")), None)
        if at is None or not any(ln.startswith("hint: ") for ln in lines[at + 1:]):
            return f"exit 2 without a hint: {(r.stderr or '')[-300:]!r}"
        return None
    return plans_check(args, r)


def plans_check(args: list[str], r) -> str | None:
    """fit as config_fit_check; check's plan, time and memory (terms, stages, total) those of explain of the same
    command line, and its exit 1 a plan that does not fit; explain's and check's plan exported in every format that
    writes it reads back as the same plan and memory (_row_reads_back). The job-fields and megatron-recent kinds'."""
    if args[0] == "fit":
        return config_fit_check(args, r)
    if r.exit_code not in (0, 1) or "json" not in args or not r.stdout.strip():
        return None
    data = json.loads(r.stdout)
    one = data[0] if isinstance(data, list) else data
    if args[0] == "check":
        e = CliRunner().invoke(app, ["explain", *args[1:]])
        if e.exit_code != 0:
            return f"check exit {r.exit_code}, explain of the same line exit {e.exit_code}: {(e.stderr or '')[-300:]}"
        two = json.loads(e.stdout)
        pick = lambda d: {"plan": d["plan"], "time": d["time"],  # noqa: E731
                          "memory": {k: d["memory"].get(k) for k in ("terms", "stages", "total_bytes", "fits")}}
        d = _differ(pick(two), pick(one))
        if d:
            return f"check disagrees with explain at {d} (explain / check)"[:600]
        if (r.exit_code == 0) != bool(one["memory"]["fits"]) and one.get("verdict") != "fail":
            return f"check exit {r.exit_code} with memory fits {one['memory']['fits']}"
    return _row_reads_back(one, f"{args[0]}'s plan")


def _recent_target() -> Target:
    """Megatron-LM functional-test argument files of the recent features (RECENT_SEEDS), read by explain, check and
    fit at 8 GPUs, checked by recent_check."""
    seeds = {name: _read(CI_ARGS / name) for name in RECENT_SEEDS}
    return Target("megatron-recent", seeds, [["explain", "{f}", "--gpus", "8", "--format", "json"],
                                             ["check", "{f}", "--gpus", "8", "--format", "json"],
                                             ["fit", "{f}", "--gpus", "8", "--top", "2", "--format", "json"]],
                  None, suffix=".args", check=recent_check)


# the newest-fields kind (issue 22's round trips on the fields added last): torchtitan TOMLs with the CP load balancer
# and the pipeline keys (context_parallel_load_balancer, pipeline_parallel_layers_per_stage, *_stage_less_layers), a
# torchtitan 0.3 launch with spmd_typechecking, fsdp_symm_mem and the load balancer, Megatron-Bridge recipes with
# overrides (Muon, Megatron-FSDP, CP, EP), and Megatron hybrid patterns with G (Gated DeltaNet) layers and '/' MTP parts
# and the Muon flags; one NEWEST_* setting set (to a value the trainer takes or one it refuses) or removed per input
# (_newest_mutation). Checked by recent_check: an exit 2 gives error and hint; fit's rows priced again by explain and
# exported in every format that writes them read back as the same plan and memory; check agrees with explain; explain's
# and check's plans exported read back as the same plan and memory
NEWEST_TOML = [
    ("parallelism", "context_parallel_degree", [1, 2, 4]),
    ("parallelism", "context_parallel_load_balancer", ["headtail", "ptrr", "None", "", "nosuch"]),
    ("parallelism", "context_parallel_rotate_method", ["allgather", "alltoall", "nosuch"]),
    ("parallelism", "pipeline_parallel_degree", [1, 2, 4]),
    ("parallelism", "pipeline_parallel_schedule", ["1F1B", "GPipe", "Interleaved1F1B", "InterleavedZeroBubble",
                                                    "ZBVZeroBubble", "nosuch"]),
    ("parallelism", "pipeline_parallel_layers_per_stage", [1, 2, 4, 8, 16, 3, 0]),
    ("parallelism", "pipeline_parallel_first_stage_less_layers", [0, 1, 2, -1]),
    ("parallelism", "pipeline_parallel_last_stage_less_layers", [0, 1, 2, 40]),
    ("parallelism", "pipeline_parallel_microbatch_size", [1, 2, 0]),
    ("parallelism", "tensor_parallel_degree", [1, 2, 4]),
    ("parallelism", "data_parallel_shard_degree", [-1, 1, 2]),
    ("parallelism", "fsdp_reshard_after_forward", ["default", "always", "never"]),
    ("training", "local_batch_size", [1, 2, 4]),
    ("training", "seq_len", [2048, 8192]),
    ("activation_checkpoint", "mode", ["none", "selective", "full"]),
]
NEWEST_TT03 = [
    ("--debug.spmd_typechecking", None), ("--debug.no-spmd_typechecking", None),
    ("--parallelism.enable_fsdp_symm_mem", None), ("--parallelism.no-enable_fsdp_symm_mem", None),
    ("--parallelism.context_parallel_load_balancer", ["headtail", "ptrr", "None", "''", "nosuch"]),
    ("--parallelism.context_parallel_degree", ["1", "2", "4"]),
    ("--parallelism.pipeline_parallel_degree", ["1", "2", "4"]),
    ("--parallelism.pipeline_parallel_schedule", ["1F1B", "Interleaved1F1B", "GPipe", "nosuch"]),
    ("--parallelism.pipeline_parallel_layers_per_stage", ["1", "2", "4", "8", "3"]),
    ("--parallelism.spmd_backend", ["spmd_types", "partial_dtensor", "full_dtensor", "nosuch"]),
    ("--parallelism.tensor_parallel_degree", ["1", "2", "4"]),
    ("--activation_checkpoint.mode", ["none", "selective", "full"]),
    ("--training.local_batch_size", ["1", "2", "4"]),
]
NEWEST_BRIDGE = [
    ("optimizer.optimizer", ["adam", "muon", "dist_muon", "sgd", "nosuch"]),
    ("ddp.use_distributed_optimizer", ["true", "false"]),
    ("optimizer.use_distributed_optimizer", ["true", "false"]),
    ("ddp.use_megatron_fsdp", ["true", "false"]),
    ("ddp.data_parallel_sharding_strategy", ["no_shard", "optim", "optim_grads", "optim_grads_params", "nosuch"]),
    ("model.context_parallel_size", ["1", "2", "4"]),
    ("model.tensor_model_parallel_size", ["1", "2", "4"]),
    ("model.pipeline_model_parallel_size", ["1", "2", "4"]),
    ("model.expert_model_parallel_size", ["1", "2", "8"]),
    ("model.sequence_parallel", ["true", "false"]),
    ("model.recompute_granularity", ["full", "selective", "null"]),
    ("train.micro_batch_size", ["1", "2", "4"]),
    ("mixed_precision", ["bf16_mixed", "bf16_with_fp8_hybrid"]),
]
NEWEST_MEGATRON = [
    ("--hybrid-layer-pattern", ['"MEMEM*EMEMEM*E/*E/*E"', '"MGMG*EMEMGM*E/*E/*E"', '"GEGEG*EGEGEG*E/*E"',
                                '"MEMEM*EMEMEM*E/*E"', '"MEMEM*EMEMEM*E//"', '"MEMEM*EMEMEM*E/G/G"', '"MEM|EM*EME|MEM*E/*E/*E"',
                                '"GGGGGGGGGGGGGG"', '"MEMEM*EMEMEM*E/"', '"/*E"', '"MEMEM*EMEMEM*E/*E/*X"']),
    ("--mtp-num-layers", ["1", "2", "3", "0"]),
    ("--mtp-use-repeated-layer", None),
    ("--linear-attention-freq", ["2", "4"]),
    ("--experimental-attention-variant", ["gdn", "gdn2", "nosuch"]),
    ("--linear-num-key-heads", ["4", "8", "3"]), ("--linear-num-value-heads", ["8", "16", "12"]),
    ("--linear-key-head-dim", ["64", "128"]), ("--linear-value-head-dim", ["64", "128"]),
    ("--optimizer", ["muon", "dist_muon", "adam", "nosuch"]),
    ("--muon-scalar-optimizer", ["adam", "sgd", "nosuch"]),
    ("--muon-momentum", ["0.95", "0.9"]), ("--muon-num-ns-steps", ["5", "3"]), ("--muon-tp-mode", ["blockwise", "duplicated", "distributed"]),
    ("--muon-fp32-matmul-prec", ["medium", "high", "low"]),
    ("--no-use-layer-wise-param-layout", None),
    ("--use-distributed-optimizer", None),
    ("--pipeline-model-parallel-size", ["1", "2"]),
    ("--tensor-model-parallel-size", ["1", "2"]),
    ("--expert-model-parallel-size", ["1", "2", "4", "8"]),
    ("--context-parallel-size", ["1", "2"]),
    ("--micro-batch-size", ["1", "2"]),
]
NEWEST_SEEDS = {"nemotron3.args": CI_ARGS / "nemotron__nemotron3_5_lightning_no_load_optim_tp1_pp1_cp1_ep4_dgx_gb200_1N4G__dev_dgx_gb200.args",
                "muon.args": CI_ARGS / "moe__gpt3_moe_mcore_te_ep8_resume_torch_dist_muon__dev_dgx_h100.args"}


def _newest_mutation(rng: random.Random, data: bytes, suffix: str) -> bytes:
    """One NEWEST_* setting set (a value of its list, valid or one the trainer refuses; a switch added) or removed:
    a TOML key (NEWEST_TOML), a torchtitan 0.3 launch's `--section.key value` (NEWEST_TT03, after the launch's last
    flag), a Megatron-Bridge override `key=value` (NEWEST_BRIDGE, after the last override), a Megatron argument
    file's flag (NEWEST_MEGATRON, one a line)."""
    if suffix == ".toml":
        import tomllib

        doc = tomllib.loads(data.decode())
        sec, key, values = rng.choice(NEWEST_TOML)
        if rng.random() < 0.15:
            doc.get(sec, {}).pop(key, None)
        else:
            doc.setdefault(sec, {})[key] = rng.choice(values)
        return _dump(doc, "toml")
    text = data.decode("utf-8", "replace")
    if suffix == ".args":
        flag, values = rng.choice(NEWEST_MEGATRON)
        line = flag if values is None else f"{flag} {rng.choice(values)}"
        lines = text.splitlines()
        at = [i for i, ln in enumerate(lines) if ln.split(" ", 1)[0] == flag]
        if at and rng.random() < 0.3:
            del lines[at[0]]
        elif at:
            lines[at[0]] = line
        else:
            lines.insert(rng.randrange(len(lines) + 1), line)
        return ("\n".join(lines) + "\n").encode()
    bridge = "run_recipe.py" in text
    flag, values = rng.choice(NEWEST_BRIDGE if bridge else NEWEST_TT03)
    if bridge:
        word = f"{flag}={rng.choice(values)}"
        spots = [m for m in re.finditer(rf"(?m)^\s*{re.escape(flag)}=\S*", text)]
        last = [m for m in re.finditer(r"(?m)^\s*\+{0,2}[\w.]+=[^\n\\]*", text)]
    else:
        word = flag if values is None else f"{flag} {rng.choice(values)}"
        spots = [m for m in re.finditer(rf"{re.escape(flag)}( (?!-)[^\s\\]+)?", text)]
        last = [m for m in re.finditer(r"--[\w.-]+[^\n\\]*", text)]
    if spots and rng.random() < 0.3:  # the setting removed
        m = spots[0]
        return (text[:m.start()] + text[m.end():]).encode()
    if spots:  # its value replaced
        m = spots[0]
        lead = re.match(r"\s*", m.group(0)).group(0)
        return (text[:m.start()] + lead + word + text[m.end():]).encode()
    if not last:
        return data
    i = last[-1].end()
    return (text[:i] + (" \\\n  " if bridge else " ") + word + text[i:]).encode()


def _newest_target(seeds_dir: Path) -> Target:
    """The newest fields' inputs (NEWEST_*): torchtitan's llama3_8b.toml at CP 2 with the ptrr balancer (flavor 8B_flex) and at PP 2
    with 9 layers a stage (34 weighted layers: 4 stages, 2 a rank) and an interleaved schedule, torchtitan 0.3's run_train_8b.sh, Megatron-Bridge's Qwen3-Next
    recipe and the 8B launch the megatron-bridge kind writes (bridge-8b.sh), Megatron-LM's Nemotron 3 argument file
    (a hybrid pattern with '/' MTP parts) and a Muon MoE one; read by explain, check and fit (--top 2), checked by
    recent_check."""
    toml = _read(CONFIGS / "llama3_8b.toml").decode()
    # ptrr needs FlexAttention's BlockMask (start-up rule TORCHTITAN_CP_PTRR_MASK): the flavor 8B_flex
    cp = toml.replace("context_parallel_degree = 1", 'context_parallel_degree = 2\ncontext_parallel_load_balancer = "ptrr"'
                      ).replace('flavor = "8B"', 'flavor = "8B_flex"')
    pp = toml.replace("pipeline_parallel_degree = 1", 'pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 9'
                      '\npipeline_parallel_schedule = "Interleaved1F1B"')
    seeds = {"llama3_8b_cp.toml": cp.encode(), "llama3_8b_pp.toml": pp.encode(),
             "run_train_8b.sh": _read(DATA / "torchtitan03" / "run_train_8b.sh"),
             "bridge_qwen3_next_h100.sh": _read(CONFIGS / "bridge_qwen3_next_h100.sh"),
             "bridge-8b.sh": (seeds_dir / "bridge-8b.sh").read_bytes(),
             **{k: _read(v) for k, v in NEWEST_SEEDS.items()}}
    gpus = ["--gpus", "8"]
    return Target("newest-fields", seeds, [["explain", "{f}", "--format", "json"], ["check", "{f}", "--format", "json"],
                                           ["fit", "{f}", "--top", "2", "--format", "json"]], None, suffix=".sh",
                  seed_args={k: gpus for k in seeds if k.endswith((".toml", ".args"))},
                  seed_suffix={k: Path(k).suffix for k in seeds if not k.endswith(".sh")}, check=recent_check)


# the precision-flags kind (issue 22's round trips on precision and kernel settings beside the plan axes they meet):
# Megatron-LM argument files with fp8 (the tensorwise TP 2 x PP 2 functional test with --deterministic-mode and
# --attention-softmax-in-fp32) and with Muon, virtual stages and fp8 layers kept bf16 at both ends, and
# Megatron-DeepSpeed launches (Microsoft's example; BigScience's BLOOM tr11, its fork) whose eager core attention reads the
# softmax flags; one PRECISION_* flag set (a value the trainer takes or refuses; a switch added) or removed per change
# (_precision_mutation). Checked by recent_check, as the megatron-recent kind
FP8_CI_ARGS = "gpt__gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap__dev_dgx_h100.args"
# the uneven-pipeline functional test (RECENT_SEEDS[0]) turned to pp 2 with 2 layers a virtual stage (vpp 3), Muon and
# fp8 tensorwise keeping the first 2 and the last layer in bf16 (Megatron-Core refuses bf16 layers with delayed scaling)
MUON_VPP_BF16 = {"--pipeline-model-parallel-size 4": "--pipeline-model-parallel-size 2\n--num-layers-per-virtual-pipeline-stage 2"
                 "\n--optimizer muon\n--fp8-format hybrid\n--fp8-recipe tensorwise\n--first-last-layers-bf16"
                 "\n--num-layers-at-start-in-bf16 2\n--num-layers-at-end-in-bf16 1",
                 "--decoder-first-pipeline-num-layers 2\n": "", "--decoder-last-pipeline-num-layers 2\n": ""}
PRECISION_MEGATRON = [
    ("--fp8-format", ["hybrid", "e4m3"]),
    ("--fp8-recipe", ["tensorwise", "delayed", "mxfp8", "blockwise", "nosuch"]),
    ("--first-last-layers-bf16", None),
    ("--num-layers-at-start-in-bf16", ["0", "1", "2", "3", "6", "-1"]),
    ("--num-layers-at-end-in-bf16", ["0", "1", "2", "7"]),
    ("--fp8-param-gather", None),
    ("--deterministic-mode", None),
    ("--no-masked-softmax-fusion", None),
    ("--attention-softmax-in-fp32", None),
    ("--apply-query-key-layer-scaling", None),
    ("--attention-backend", ["unfused", "flash", "fused", "auto"]),
    ("--optimizer", ["muon", "dist_muon", "adam"]),
    ("--pipeline-model-parallel-size", ["1", "2", "4"]),
    ("--num-layers-per-virtual-pipeline-stage", ["1", "2", "3"]),
    ("--tensor-model-parallel-size", ["1", "2"]),
    ("--sequence-parallel", None),
    ("--micro-batch-size", ["1", "2"]),
]
PRECISION_MDS = [
    ("--no-masked-softmax-fusion", None),
    ("--attention-softmax-in-fp32", None),
    ("--no-query-key-layer-scaling", None),
    ("--apply-query-key-layer-scaling", None),
    ("--fp16", None), ("--bf16", None),
    ("--seq-length", ["256", "2048", "4096"]),
    ("--micro-batch-size", ["1", "2", "4"]),
    ("--tensor-model-parallel-size", ["1", "2", "4"]),
    ("--checkpoint-activations", None),
]


def _precision_mutation(rng: random.Random, data: bytes, suffix: str) -> bytes:
    """One PRECISION_* flag set (a value of its list, valid or one the trainer refuses; a switch added) or removed: a
    Megatron argument file's line (PRECISION_MEGATRON, one flag a line), a Megatron-DeepSpeed launch's flag
    (PRECISION_MDS, its value replaced where the launch has it, else added after the launch's last flag)."""
    text = data.decode("utf-8", "replace")
    if suffix == ".args":
        flag, values = rng.choice(PRECISION_MEGATRON)
        line = flag if values is None else f"{flag} {rng.choice(values)}"
        lines = text.splitlines()
        at = [i for i, ln in enumerate(lines) if ln.split(" ", 1)[0] == flag]
        if at and rng.random() < 0.3:
            del lines[at[0]]
        elif at:
            lines[at[0]] = line
        else:
            lines.insert(rng.randrange(len(lines) + 1), line)
        return ("\n".join(lines) + "\n").encode()
    flag, values = rng.choice(PRECISION_MDS)
    word = flag if values is None else f"{flag} {rng.choice(values)}"
    spots = list(re.finditer(rf"{re.escape(flag)}(?![\w-])( (?!-)[^\s\\]+)?", text))
    last = list(re.finditer(r"--[\w.-]+[^\n\\]*", text))
    if spots and rng.random() < 0.3:  # the flag removed
        m = spots[0]
        return (text[:m.start()] + text[m.end():]).encode()
    if spots:  # its value replaced
        m = spots[0]
        return (text[:m.start()] + word + text[m.end():]).encode()
    if not last:
        return data
    i = last[-1].end()
    return (text[:i] + " " + word + text[i:]).encode()


def _precision_target() -> Target:
    """The precision-flags kind's inputs: FP8_CI_ARGS and MUON_VPP_BF16 (Megatron argument files) at 8 GPUs, Microsoft's
    Megatron-DeepSpeed example at 8 H100s and BigScience's tr11 (BLOOM 176B) at 384 A100s; read by explain, check and
    fit (--top 2), checked by recent_check."""
    muon = _read(CI_ARGS / RECENT_SEEDS[0]).decode()
    for old, new in MUON_VPP_BF16.items():
        assert old in muon, old  # the functional test still has the lines replaced
        muon = muon.replace(old, new)
    seeds = {"fp8_tp2_pp2.args": _read(CI_ARGS / FP8_CI_ARGS), "muon_vpp_bf16.args": muon.encode(),
             "run_deepspeed_example.sh": _read(CONFIGS / "run_deepspeed_example.sh"),
             "tr11-176B-ml.slurm": _read(CONFIGS / "tr11-176B-ml.slurm")}
    gpus = ["--gpus", "8"]
    return Target("precision-flags", seeds, [["explain", "{f}", "--format", "json"], ["check", "{f}", "--format", "json"],
                                             ["fit", "{f}", "--top", "2", "--format", "json"]], None, suffix=".sh",
                  # the functional test's --deterministic-mode with --tp-comm-overlap ran at the corpus row's recording
                  # commit 4828d651 (2026-07-02), before Megatron-LM refused the pair (3ab71eeb3e, 2026-07-08: rule
                  # MEGATRON_DETERMINISTIC_TP_OVERLAP): the launch's trainer date, as planner/megatron_ci.py gives it
                  seed_args={"fp8_tp2_pp2.args": [*gpus, "--trainer-date", "2026-07-02"], "muon_vpp_bf16.args": gpus,
                             "run_deepspeed_example.sh": [*gpus, "--hardware", "h100-sxm"],
                             "tr11-176B-ml.slurm": ["--gpus", "384", "--hardware", "a100-sxm-80gb"]},
                  seed_suffix={"fp8_tp2_pp2.args": ".args", "muon_vpp_bf16.args": ".args"}, check=recent_check)


STACKS = DATA / "stacks"
# a model each seed's stack builds (runs.layer_kinds): the synthetic 4-layer tiny-fit (RMSNorm, SwiGLU, GQA, RoPE)
# for the Megatron-Core and torchtitan entries, a GPT-2-style model for Megatron-DeepSpeed 2021, which builds
# LayerNorm, GeLU, MHA and learned positions only (its runs.layer_kinds not_built)
STACK_MODELS = {"megatron-deepspeed-2021.yaml": "megatron-gpt-1.7b"}


def _stack_target() -> Target:
    """Stack files (`--stack FILE.yaml`, a job's `stack:`; schema.Stack, catalog.stack_data): four catalog entries,
    one of them written with `extends:` (megatron-bridge), and a user's file that extends megatron
    (tests/data/stacks/megatron-no-overlap.yaml); read by explain, by check of a job file that names the input by a
    path relative to itself, and by a small fit."""
    sdb = ROOT / "stack_db"
    seeds = {p.name: _read(p) for p in [sdb / "megatron.yaml", sdb / "torchtitan.yaml", sdb / "megatron-bridge.yaml",
                                        sdb / "megatron-deepspeed-2021.yaml", STACKS / "megatron-no-overlap.yaml"]}
    tiny = str(DATA / "tiny-fit.yaml")
    job = "model: {m}\ngpus: 8\nsharding: fsdp\nrecompute: full\nglobal_batch: 16\nseq_len: 1024\nstack: input.yaml\n"
    return Target("stack", seeds, [["explain", "--model", "{m}", "--gpus", "8", "--stack", "{f}"],
                                   ["check", "{d}/job.yaml", "--format", "json"],
                                   ["fit", "--model", "{m}", "--gpus", "8", "--top", "1", "--seq-len", "1024", "--stack", "{f}"]],
                  "yaml", companions={"job.yaml": job},
                  seed_vars={name: {"{m}": STACK_MODELS.get(name, tiny)} for name in seeds})


# issue 24: the inputs added since issue 12 (trainer configs, export, calibrate run, --plot, MoE configs)
CONFIGS, LOGS = DATA / "trainer_configs", DATA / "training_logs"
MOE_SEQ = ["--seq-len", "4096"]  # a training length for every MoE seed (DeepSeek-V3's max_position_embeddings is 163,840)


def _moe_configs() -> dict[str, bytes]:
    """HF config.json files of MoE models: Mixtral 8x7B, DeepSeek-V3 and Qwen3-30B-A3B as in
    tests/test_moe.py (their config.json fields, cited there), gpt-oss-20b as shipped in
    tests/data/arch (its README gives the source)."""
    from test_moe import DEEPSEEK_V3_HF, MIXTRAL_HF, QWEN3_MOE_HF

    out = {name: json.dumps(cfg, indent=2).encode() for name, cfg in
           (("mixtral-8x7b.json", MIXTRAL_HF), ("deepseek-v3.json", DEEPSEEK_V3_HF), ("qwen3-30b-a3b.json", QWEN3_MOE_HF))}
    out["gpt-oss-20b.json"] = _read(DATA / "arch" / "gpt-oss-20b" / "config.json")
    return out


def _issue24_targets() -> dict[str, Target]:
    megatron = {p.name: _read(p) for p in [CONFIGS / "train_llama3_8b.sh", CONFIGS / "train_gpt3_175b_distributed.sh",
                                           CONFIGS / "train_llama3_8b_h100_fp8.sh", LOGS / "megatron_llama3_8b_16xh100.sh",
                                           DATA / "megatron_ci" / "args" / "gpt__gpt3_7b_tp1_pp4_memory_speed__dev_dgx_h100.args"]}
    jobs = {k: yaml.safe_dump(JOBS[k], sort_keys=False).encode() for k in ("job-8b.yaml", "job-70b.yaml")}
    ds_job = {"model": "llama3-8b", "gpus": 8, "sharding": "zero2", "stack": "megatron-deepspeed", "global_batch": 64,
              "seq_len": 4096}
    exports = {f"export-{k}.yaml": yaml.safe_dump(v, sort_keys=False).encode() for k, v in
               (("megatron", JOBS["job-70b.yaml"]), ("titan", JOBS["job-titan.yaml"]), ("ds", ds_job))}
    runs_all = _load(_read(DATA / "published_runs.yaml"))
    records = {"one-record.yaml": _read(DATA / "run_calibration" / "megatron_h100_1.7b.yaml"),
               "two-records.yaml": yaml.safe_dump([r for r in runs_all if r.get("id") in (
                   "megatron-readme-h100-7.1B", "megatron-readme-h100-16B")], sort_keys=False).encode()}
    return {
        "megatron": Target("megatron", megatron, [["explain", "{f}"], ["check", "{f}", "--format", "json"]], None,
                           suffix=".sh", seed_args={"train_gpt3_175b_distributed.sh": ["--gpus", "128"],
                                                    "gpt__gpt3_7b_tp1_pp4_memory_speed__dev_dgx_h100.args": ["--gpus", "8"]}),
        "torchtitan": Target("torchtitan", {"llama3_8b.toml": _read(CONFIGS / "llama3_8b.toml")},
                             [["explain", "{f}", "--gpus", "8"], ["check", "{f}", "--gpus", "64", "--format", "json"]],
                             "toml", suffix=".toml"),
        "deepspeed": Target("deepspeed", {p.name: _read(p) for p in [CONFIGS / "ds_config_zero2.json", CONFIGS / "ds_config_zero3.json"]},
                            [["explain", "{f}", "--model", "llama3-8b", "--gpus", "8"],
                             ["check", "{f}", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "8192", "--format", "json"],
                             ["budget", "{f}", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1T", "--mc-runs", "0"]],
                            "json", suffix=".json"),
        "export": Target("export", exports, [["export", "{f}"]], "yaml", seed_args={
            "export-megatron.yaml": ["--format", "megatron", "-o", "{d}/out.sh"],
            "export-titan.yaml": ["--format", "torchtitan"],
            "export-ds.yaml": ["--format", "deepspeed", "-o", "{d}/ds.json"]}),
        "run-log": Target("run-log", {p.name: _read(p) for p in [LOGS / "torchtitan_llama3_8b_8xh100.log",
                                                                  LOGS / "megatron_llama3_8b_16xh100.log"]},
                          [["calibrate", "run", "{f}", "-o", "{d}/p.yaml"]], None, suffix=".log",
                          seed_args={"torchtitan_llama3_8b_8xh100.log": ["--job", str(LOGS / "torchtitan_llama3_8b_8xh100.job.yaml")],
                                     "megatron_llama3_8b_16xh100.log": ["--config", str(LOGS / "megatron_llama3_8b_16xh100.sh"),
                                                                        "--hardware", "h100-sxm"]}),
        "run-records": Target("run-records", records, [["calibrate", "run", "{f}", "-o", "{d}/p.yaml", "--format", "json"]],
                              "yaml"),
        "plot": Target("plot", jobs, [["explain", "{f}", "--plot", "{d}/m.png"], ["explain", "{f}", "--plot", "{d}/m.svg"],
                                      ["explain", "{f}", "--plot", "{d}/m.pdf"]], "yaml"),
        "megatron-deepspeed": Target("megatron-deepspeed", {p.name: _read(p) for p in [CONFIGS / "run_deepspeed_example.sh",
                                                                                      CONFIGS / "tr11-176B-ml.slurm"]},
                                     [["check", "{f}", "--format", "json"], ["explain", "{f}"]], None, suffix=".sh",
                                     seed_args={"run_deepspeed_example.sh": ["--gpus", "8", "--hardware", "h100-sxm"],
                                                "tr11-176B-ml.slurm": ["--gpus", "384", "--hardware", "a100-sxm-80gb"]}),
        # calibrate host-adam (planner/calibrate/host_adam.py): a DeepSpeed ZeRO-Offload log, DeepSpeed's adam_test1
        # output and a records file (tests/data/host_adam, SOURCES.md)
        "host-adam": Target("host-adam", {p.name: _read(p) for p in [DATA / "host_adam" / "deepspeed_zero2_offload.log",
                                                                      DATA / "host_adam" / "adam_test1.txt",
                                                                      DATA / "host_adam" / "records.yaml"]},
                            [["calibrate", "host-adam", "{f}", "--host-memory-gbps", "614.4", "-o", "{d}/p.yaml"]], None,
                            suffix=".txt", seed_args={"deepspeed_zero2_offload.log": ["--params", "1003782656",
                                                                                      "--processes", "8", "--hardware",
                                                                                      "h100-sxm"]}),
        "torchtitan-0.3": Target("torchtitan-0.3", {p.name: _read(p) for p in sorted((DATA / "torchtitan03").glob("*.sh"))},
                                 [["check", "{f}", "--format", "json"], ["explain", "{f}", "--hardware", "h100-sxm"]], None,
                                 suffix=".sh"),
        "moe-config": Target("moe-config", _moe_configs(),
                             [["explain", "--model", "{d}", "--gpus", "64", *MOE_SEQ, "--format", "json"],
                              ["explain", "--model", "{d}", "--gpus", "64", "--ep", "8", "--sharding", "zero1", *MOE_SEQ],
                              ["fit", "--model", "{d}", "--gpus", "16", "--top", "1", *MOE_SEQ]], "json",
                             filename="config.json"),
    }


# ------------------------------------------------------------------ the cli-options kind
# Command lines of fit, check, explain, budget and export with their options drawn from each command's own typer
# parameters (introspected from the app, so a new option is fuzzed without a change here): added with a value of its
# domain (CLI_VALUES, else the schema.Job field it sets, job_field_domains, else its annotation: an Enum's members, a
# help text's `a|b|c` choices, counts and fractions), with a bad value (CLI_BAD), a flag or its --no- form, removed,
# given twice, or junk (an unknown option, a missing value, a stray argument). The seeds run with and without a job
# file or trainer config, which the options override (issue 22: "flags beat file values", with a note).
CLI_JOB = {"model": "llama3-8b", "gpus": 8, "tp": 2, "sharding": "zero1", "global_batch": 16, "seq_len": 4096,
           "recompute": "full", "precision": "bf16"}
CLI_BAD = ["-1", "0", "abc", "", "1e400", "nan", "inf", "-inf", "9223372036854775808", "9" * 40, "0.5", "1,2,x", ",",
           "..", "8..", "x" * 300, " 8", "\uff18", "1e-308", "-0", "1_000", "0x10", "None", "[1]", "{}", "8,8", "3", "7",
           "1e6", "2147483647", "-", "=", "k=v", "a=1 b", ".", "/", "{d}", "{d}/nosuch/x"]
# a path option's bad values (--output, --plot, --calibration, --from-fit): each under the input's scratch folder {d}
CLI_BAD_PATHS = ["{d}", "{d}/nosuch/x.png", "{d}/" + "x" * 300, "{d}/x.txt", "{d}/job.yaml", "{d}/x.PNG", "{d}/x."]
# the options whose domain neither the Job schema nor the annotation gives (by parameter name; (command, name) first)
CLI_VALUES = {
    "model": ["llama3-8b", "qwen3-30b-a3b", "megatron-gpt-1.7b", "mistral-7b", "llama3-70b", str(DATA / "tiny-fit.yaml")],
    "gpus": ["1", "2", "8", "16", "64"], ("fit", "gpus"): ["8", "16", "8,16", "8..32", "64"],
    "hardware": ["h100-sxm", "h200-sxm", "a100-sxm-80gb", "mi300x", "b200", "gb200-nvl72", str(DATA / "hardware" / "aws-p4de.yaml")],
    "tokens": ["1T", "15e12", "1e9", "2.5B"], "global_batch_tokens": ["4M", "65536", "1e6", "1048576"],
    "step_batch_size_schedule": ["0:8 1M:16", "0:16", "0:512 252M:1024"],
    "hierarchical_cp_sizes": ["2,2", "1,2", "2 1"], "rank_orders": ["tp-inner", "all", "tp-cp-dp-pp,tp-dp-cp-pp"],
    "objective": ["time", "memory", "cost"], "top": ["1", "3", "50"], "explain_row": ["1", "2"],
    "export": ["torchtitan", "megatron", "deepspeed", "megatron-deepspeed", "megatron-bridge"],
    ("export", "target"): ["torchtitan", "megatron", "deepspeed", "megatron-deepspeed", "megatron-bridge"],
    "sweep_gpus": ["8,16", "8..32", "64"], "checkpoint_interval": ["27min", "1h", "90s"],
    "max_step_time": ["100s", "1s", "2min"], "min_mfu": ["0.1", "0.9"], "mfu": ["0.4", "0.01"], "currency": ["USD", "EUR"],
    "row": ["1", "2", "3"], "config_format": ["torchtitan", "megatron", "deepspeed", "megatron-deepspeed", "torchtitan-0.3"],
    "plot": ["{d}/p.png", "{d}/p.svg", "{d}/p.txt"], "output": ["{d}/out.txt", "{d}/out.sh"],
    "mc_runs": ["0", "2"], "mc_seed": ["0", "7"], "max_layer_slack": ["0", "2", "5"],
    # NCCL's own grammar (comm.nccl_algo_candidates): names, ^ to exclude, a collective's prefix (Tree alone is refused)
    "nccl_algo": ["Ring", "^NVLS", "Ring,Tree", "allreduce:Tree;reducescatter:Ring;allgather:Ring"],
    # NCCL_PROTO in the same grammar (comm.nccl_proto_protocols): Megatron-LM CI's simple, an exclusion, a per-function list
    "nccl_proto": ["simple", "^LL128", "LL,Simple", "Simple;allreduce:LL,Simple"],
    # {prof}, {fit}: the calibration profile and the saved fit the kind's seeds_dir holds (Target.seed_vars)
    "calibration": ["{prof}", str(DATA / "tiny-fit.yaml"), "{d}/nosuch.yaml"], "from_fit": ["{fit}", "{d}/job.yaml"],
}
# option parameter -> the schema.Job field it sets, where the names differ (cli/core.py job_options)
CLI_FIELD = {"causal": "causal_attention_flops", "reserve_gib": "reserve_GiB",
             "split_emb": "account_for_embedding_in_pipeline_split", "split_loss": "account_for_loss_in_pipeline_split",
             "loss_layers": "loss_layers_in_pipeline_split", "step_batch_size_schedule": "batch_size_schedule",
             "hierarchical_cp_sizes": "hierarchical_cp_sizes"}
# fit's options that take a comma list (the search's pins)
CLI_FIT_LISTS = ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "ep", "etp", "sharding", "shard_group", "recompute", "schedule")
_CLI_PARAMS: dict[str, list] = {}


def cli_argv(data: bytes) -> list[str]:
    """A cli-options input's command line (a JSON list of arguments); [] for anything else."""
    try:
        doc = json.loads(data)
    except ValueError:
        return []
    return [str(a) for a in doc] if isinstance(doc, list) else []


def _cli_params(cmd: str) -> list:
    """The command's click options (typer's parameters, introspected from the app)."""
    if cmd not in _CLI_PARAMS:
        import typer.main

        group = typer.main.get_command(app)
        _CLI_PARAMS[cmd] = [p for p in group.commands[cmd].params if p.param_type_name == "option"]
    return _CLI_PARAMS[cmd]


def _cli_text(v) -> str:
    """A Job field's value as the option spells it: a list as a comma list, a mapping as KEY=N words."""
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    if isinstance(v, dict):
        return " ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def cli_option_values(cmd: str, p) -> list[str]:
    """The valid values of a value option: CLI_VALUES, else the Job field's domain, else its annotation's."""
    import enum

    if not _JOB_DOMAINS:
        _JOB_DOMAINS.update(job_field_domains())
    got = CLI_VALUES.get((cmd, p.name)) or CLI_VALUES.get(p.name)
    field = CLI_FIELD.get(p.name, p.name)
    if not got and field in _JOB_DOMAINS:
        got = [_cli_text(v) for v in _JOB_DOMAINS[field] if v is not None and not isinstance(v, bool)]
        if p.name == "sharding":
            got += _JOB_DOMAINS.get("sharding_mode", [])
        if cmd == "fit" and p.name in CLI_FIT_LISTS and len(got) > 1:
            got += [f"{got[0]},{got[1]}", ",".join(got[:3])]
    if got:
        return list(got)
    ann = p.type_descriptor.annotation
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return [m.value for m in ann]
    choices = re.findall(r"\b([\w.+-]+(?:\|[\w.+-]+)+)", p.help or "")
    if choices:
        return choices[0].split("|")
    if ann is int:
        return ["1", "2", "4", "8", "64"]
    if ann is float:
        return ["0.1", "0.5", "1", "2"]
    return ["{d}/x"] if ann is Path else ["abc"]


def _cli_opt_spans(cmd: str, argv: list[str]) -> list[tuple[int, int, object]]:
    """The options of a command line: (start, end, click parameter) per option given (a flag one argument, else two)."""
    by = {o: p for p in _cli_params(cmd) for o in p.opts + p.secondary_opts}
    spans, i = [], 1
    while i < len(argv):
        p = by.get(argv[i])
        if argv[i] == "--":
            break
        if p is None:
            i += 1
            continue
        n = 1 if p.is_flag else 2
        spans.append((i, min(i + n, len(argv)), p))
        i += n
    return spans


def _cli_option(rng: random.Random, cmd: str, p) -> list[str]:
    """One option of `p` with a value: a flag or its --no- form; a valid value, or a bad one (CLI_BAD)."""
    if p.is_flag:
        return [rng.choice(p.opts + p.secondary_opts)]
    opt = rng.choice(p.opts)
    bad = CLI_BAD_PATHS if p.type_descriptor.annotation is Path else CLI_BAD  # (a file written stays in the scratch folder)
    value = rng.choice(cli_option_values(cmd, p) if rng.random() < 0.6 else bad)
    return [f"{opt}={value}"] if opt.startswith("--") and rng.random() < 0.1 else [opt, value]


def _cli_mutation(rng: random.Random, argv: list[str]) -> list[str]:
    """One change to a command line: an option added (a valid or a bad value), an option given removed, an option
    given again with another value (click keeps the last), or junk (an unknown option, an option missing its value,
    a stray argument, `--`, `--help`)."""
    if not argv:
        return argv
    argv, cmd = list(argv), argv[0]
    params, spans = _cli_params(cmd), _cli_opt_spans(cmd, argv)
    op = rng.randrange(10)
    if op < 6 or (op < 9 and not spans):
        return argv + _cli_option(rng, cmd, rng.choice(params))
    if op < 8:
        i, j, p = rng.choice(spans)
        return argv[:i] + argv[j:] if op == 6 else argv + _cli_option(rng, cmd, p)
    junk = rng.choice([["--nosuch"], [rng.choice(params).opts[0]], ["extra"], ["--", "--tp"], ["--help"], ["-Z"],
                       ["--tp=2"], ["--gpus", "--tp"]])
    return argv + junk


# the seeds: each command with and without a job file ({d}/job.yaml, CLI_JOB) or a trainer config
def _cli_seeds() -> dict[str, list[str]]:
    toml, sh = str(CONFIGS / "llama3_8b.toml"), str(CONFIGS / "train_llama3_8b.sh")
    return {
        "fit.json": ["fit", "--model", "llama3-8b", "--gpus", "8", "--top", "2", "--format", "json"],
        "fit-job.json": ["fit", "{d}/job.yaml", "--top", "2", "--format", "json"],
        "fit-moe.json": ["fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4096", "--top", "1", "--format", "json"],
        "explain.json": ["explain", "--model", "llama3-8b", "--gpus", "8", "--format", "json"],
        "explain-job.json": ["explain", "{d}/job.yaml", "--format", "json"],
        "explain-toml.json": ["explain", toml, "--gpus", "8", "--format", "json"],
        "explain-fit.json": ["explain", "--from-fit", "{fit}", "--row", "2", "--format", "json"],
        "check-job.json": ["check", "{d}/job.yaml", "--format", "json"],
        "check-megatron.json": ["check", sh, "--format", "json"],
        "check-calibration.json": ["check", "{d}/job.yaml", "--calibration", "{prof}", "--max-step-time", "100s",
                                   "--format", "json"],
        "budget.json": ["budget", "{d}/job.yaml", "--tokens", "1T", "--mc-runs", "0", "--format", "json"],
        # (fsdp: llama3-8b's default unsharded plan fits at neither count, which budget answers with exit 1)
        "budget-sweep.json": ["budget", "--model", "llama3-8b", "--sharding", "fsdp", "--tokens", "1T", "--sweep-gpus",
                              "8,16", "--mc-runs", "0", "--format", "json"],
        "export.json": ["export", "{d}/job.yaml", "--format", "megatron", "-o", "{d}/out.sh"],
        "export-titan.json": ["export", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--format", "torchtitan"],
        # trainer configs under every command, with the yaml and csv outputs (their options replace the file's values)
        "explain-megatron.json": ["explain", sh, "--format", "yaml"],
        "check-toml.json": ["check", toml, "--gpus", "8", "--format", "csv"],
        "budget-megatron.json": ["budget", sh, "--tokens", "1T", "--mc-runs", "0", "--format", "yaml"],
        "budget-toml.json": ["budget", toml, "--gpus", "8", "--mc-runs", "0", "--format", "csv"],
        "fit-megatron.json": ["fit", sh, "--top", "2", "--format", "yaml"],
        "export-toml.json": ["export", toml, "--gpus", "8", "--format", "torchtitan"],
        "export-megatron.json": ["export", sh, "--format", "megatron"],
    }


def _cli_options_target(seeds_dir: Path, prof: Path, fit_json: str) -> Target:
    """Command lines whose options are drawn (_cli_mutation), checked by cli_options_check."""
    saved = seeds_dir / "fit.json"
    saved.write_text(fit_json)
    seeds = {k: json.dumps(v).encode() for k, v in _cli_seeds().items()}
    return Target("cli-options", seeds, [[]], None, suffix=".json", argv_input=True,
                  companions={"job.yaml": yaml.safe_dump(CLI_JOB, sort_keys=False)}, check=cli_options_check,
                  seed_vars={name: {"{prof}": str(prof), "{fit}": str(saved)} for name in seeds})


def _last(argv: list[str], opts: tuple[str, ...]):
    """The value of the last of `opts` on a command line (click keeps the last), or None."""
    out = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a in opts and i + 1 < len(argv):
            out = argv[i + 1]
        elif any(a.startswith(o + "=") for o in opts if o.startswith("--")):
            out = a.split("=", 1)[1]
    return out


_CLI_FILES: dict[tuple, dict] = {}


def _cli_file_data(args: list[str]) -> dict | None:
    """The job fields the command line's file sets: CLI_JOB for the seeds' job YAML, a trainer config's as its reader
    gives them (at the command line's --gpus, as load_job reads it), None without a file."""
    if len(args) < 2 or args[1].startswith("-"):
        return None
    if args[1].endswith("/job.yaml"):
        return CLI_JOB
    if not args[1].endswith((".toml", ".sh")):
        return None
    from planner.errors import PlannerError
    from planner.trainers import load_trainer_config

    gpus = _last(args, ("--gpus", "-g"))
    key = (args[1], gpus)
    if key not in _CLI_FILES:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                _CLI_FILES[key] = dict(load_trainer_config(Path(args[1]), gpus=int(gpus) if gpus else None).job)
        except (PlannerError, ValueError):
            _CLI_FILES[key] = {}
    return _CLI_FILES[key]


# the plan fields the override check compares with the option's value (a scalar explain's `plan` holds as given)
CLI_PLAN_FIELDS = ("tp", "cp", "pp", "vpp", "dp", "micro_batch", "global_batch", "seq_len", "recompute", "precision",
                   "schedule", "ep", "etp", "gpus", "rank_order")


def _csv_rows(text: str) -> list[dict]:
    """`--format csv` output read back: a header and rows of its width (a cell holding a comma or a line break is
    quoted), each row as {column: text}; ValueError where a row's width differs or there is no header."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0]:
        raise ValueError("no header row")
    bad = next((i for i, row in enumerate(rows[1:], 2) if len(row) != len(rows[0])), None)
    if bad is not None:
        raise ValueError(f"row {bad} has {len(rows[bad - 1])} cells, the header {len(rows[0])}")
    return [dict(zip(rows[0], row)) for row in rows[1:]]


def _yaml_doc(text: str):
    """`--format yaml` output read back (yaml.safe_load: plain YAML, no Python tags); ValueError where it does not."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(str(e).replace("\n", " ")) from None


def _json_doc(text: str):
    """`--format json` output read back as strict JSON: NaN, Infinity and -Infinity, which json.loads takes and
    JSON (RFC 8259) has not, are refused (render/common.py turns a non-finite figure into null)."""
    def constant(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=constant)


# what each machine-readable --format's output must parse as (cli/common.py FormatOption: json|yaml|csv)
CLI_PARSERS = {"json": _json_doc, "yaml": _yaml_doc, "csv": _csv_rows}


def _plan_of(cmd: str, fmt: str, data) -> dict | None:
    """The plan explain's or check's output holds (json and yaml: the `plan` object; csv: the `plan.` columns of
    the first row, as text), else None."""
    if cmd not in ("explain", "check", "budget") or not data:
        return None
    first = data[0] if isinstance(data, list) else data
    if not isinstance(first, dict):
        return None
    if fmt == "csv":
        return {k[len("plan."):]: v for k, v in first.items() if k.startswith("plan.")} or None
    plan = first.get("plan")
    return plan if isinstance(plan, dict) else None


# an error that refuses two fields set together (plan._global_batch, plan.vocab_divisor, schema.Job._loss_layers, ...)
TWO_SPELLINGS = re.compile(r"give one of|both .+ are set|contradicts|beside")


def _refused_as_two_spellings(args: list[str], error: list[str]) -> str | None:
    """An exit 2 that refuses an option's field together with a field only the file sets (the error names both and
    says to give one): the option did not replace the file's other spelling (issue 22, flags beat file values;
    `explain job.yaml --global-batch-tokens N` over the file's global_batch was refused so)."""
    text = " ".join(error)
    if not TWO_SPELLINGS.search(text):
        return None
    file_data = _cli_file_data(args)
    if not file_data:
        return None
    cmd = args[0]
    named = {f for f in file_data if re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)}
    given = {CLI_FIELD.get(p.name, p.name) for a in args[2:] if a.startswith("-")
             for p in _cli_params(cmd) if a.split("=", 1)[0] in p.opts + p.secondary_opts}
    for f in sorted(given):
        if f not in file_data and re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text):
            other = sorted(named - given)
            if other:
                return f"{f} given with the file's {other[0]}: refused as two spellings ({text[:200]})"
    return None


def cli_options_check(args: list[str], r) -> str | None:
    """Beyond check_result's contract: an exit 2 gives a `hint:` after its error, and does not refuse an option beside
    the file's other spelling of its setting (_refused_as_two_spellings); a `--format json|yaml|csv` output
    parses (CLI_PARSERS: csv rows as wide as the header); an
    option that replaces a value the job file (CLI_JOB) sets is named in a note (unless --quiet), and explain's,
    check's and budget's plan holds the option's value."""
    if "--help" in args[:args.index("--")] if "--" in args else "--help" in args:
        return None
    err = r.stderr or ""
    if r.exit_code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        at = next((i for i, ln in enumerate(lines) if ln.startswith("error: ")), None)
        if at is None or not any(ln.startswith("hint: ") for ln in lines[at + 1:]):
            return f"exit 2 without a hint: {err[-300:]!r}"
        return _refused_as_two_spellings(args, lines[at:])
    cmd = args[0]
    fmt = _last(args, ("--format", "-f"))
    data = None
    if cmd != "export" and fmt in CLI_PARSERS and not (cmd == "fit" and _last(args, ("--export",))) and (
            r.exit_code == 0 or r.stdout.strip()):
        try:
            data = CLI_PARSERS[fmt](r.stdout)
        except ValueError as e:
            return f"--format {fmt} printed what does not parse ({e}): {r.stdout[:200]!r}"
    file_data = _cli_file_data(args) if r.exit_code == 0 else None
    if not file_data:
        return None
    quiet = any(a in ("--quiet", "-q") for a in args)
    for opt in {a.split("=", 1)[0] for a in args[2:] if a.startswith("-")}:
        p = next((q for q in _cli_params(cmd) if opt in q.opts), None)
        if p is None or p.is_flag:
            continue
        field = CLI_FIELD.get(p.name, p.name)
        value = _last(args, tuple(p.opts))
        if field not in file_data or value is None or field in ("sharding", "model", "hardware"):
            continue
        want = file_data[field]
        if not isinstance(want, (int, str)) or isinstance(want, bool) or (cmd == "fit" and "," in value):
            continue  # (fit's comma list pins the search, not the file's plan: no replacement)
        try:
            given = type(want)(value)
        except ValueError:
            continue
        if given == want:
            continue
        if not quiet and f"{field}={given}: the command line replaces the file's {want}" not in err:
            return f"{opt} {value} replaces the job file's {field}: {want} without a note"
        plan = _plan_of(cmd, fmt, data)
        if field in CLI_PLAN_FIELDS and plan is not None and field in plan and (
                plan[field] != (str(given) if fmt == "csv" else given)):
            return f"{opt} {value} given with the job file: the plan has {field} {plan[field]!r}"
    return None


def split_gemm(ts: dict[str, Target]) -> dict[str, Target]:
    """The GEMM target as one target per seed suffix (the reader picks CSV / JSON / YAML by it)."""
    out = {}
    for kind, t in ts.items():
        if kind != "gemm":
            out[kind] = t
            continue
        for name, data in sorted(t.seeds.items()):
            ext = Path(name).suffix
            out[f"gemm{ext}"] = Target(f"gemm{ext}", {name: data}, t.args, {".json": "json", ".yaml": "yaml"}.get(ext),
                                       suffix=ext)
    return out


def run_all(workdir: Path, n: int, seed: int, kinds=None) -> dict[str, Outcome]:
    """fuzz() every target (n inputs each; the GEMM reader n per file format)."""
    return {kind: fuzz(t, n, seed, workdir) for kind, t in split_gemm(targets(workdir)).items()
            if not kinds or kind in kinds}


__all__ = ["ISSUE24_KINDS", "JOB_FIELD_SEEDS", "fit_rows_agree", "job_field_domains", "NASTY", "Outcome", "Target", "check_result", "fuzz", "mutate", "run_all", "seed_results",
           "split_gemm", "targets"]
