"""A metamorphic check of what the trainer-config readers say they ignore (planner/trainers/).

Every reader lists the keys / flags it reads and does not price as "ignored (not modelled)" (TrainerConfig.ignored:
no effect on the plan's memory or step time), and what it infers as "assumed". Nothing the user gave is silently
dropped: a key listed ignored must not move the price, and a key the reader does not list ignored must, when changed,
move the price, be refused, or be said (a line of the four lists naming it). The fuzz harness (tests/fuzzing.py) checks
exit codes and error shapes and cannot see either lie; this module does:

- ignored_findings(case): for each setting the reader lists as ignored, the file changed at that key alone (a
  type-preserving change, `changed_values`: a number doubled, a bool flipped, a string from the trainer's choices where
  CHOICES or Megatron-LM's argparse table (megatron_argparse.DEFINITIONS) knows them, else another string; and the key
  removed) must price to the same plan: explain's JSON (the plan,
  its memory terms, stages and total, its time terms) equal to the unchanged file's. A change refused (exit 2) is a
  finding too: a key that is checked is read, and "ignored" then says less than the reader does.
- priced_findings(case): for each key the file sets that is not listed ignored, the change of its value (not its
  removal: a key removed may equal its default) must move a figure, be refused (PlannerError: exit 2 with error /
  hint), or be said: named by a line of the changed file's ignored / not_modelled / unmodelled / assumed lists (its
  setting, or its name in the line's text), or the lists' lines otherwise changed (a rule that reads it: "neither bf16
  nor fp16 enabled"). A change that moves nothing and says nothing: the key is really ignored.

The job a file reads to is priced by cli/core.explain_json, the library call behind `planner explain --format json`
(the price is a function of the schema.Job alone: an unchanged Job is an unchanged price, so a Job seen before is not
priced again). A key is found in the file's text by its format's spelling (a Megatron flag `--flag VALUE` /
`--flag=VALUE` anywhere in the script, a shell variable for a value replaced by the literal; a JSON key, in a DeepSpeed
file or a Megatron-DeepSpeed heredoc; a TOML `key = value` in its [section]; a torchtitan 0.3 `--section.key VALUE`; a
Megatron-Bridge `a.b=VALUE` override); a setting the text does not spell so (a shell line, a record with no setting)
is counted as not mutable, never as passing.

tests/test_ignored_keys.py runs a bounded pass over the shipped configs (CASES) in the default suite and the whole
pass under `pytest -m fuzz`; `scripts/fuzz.py --ignored-keys` runs it over the shipped configs and the fuzz
harness' trainer-config seeds (fuzz_cases).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CONFIGS = DATA / "trainer_configs"


@dataclass
class Case:
    """A trainer config and the command-line options it is read with (`planner explain FILE OPTIONS`)."""

    name: str
    data: bytes
    suffix: str
    options: dict = field(default_factory=dict)  # load_job's overrides: model, gpus, hardware, seq_len


def _case(path: Path, **options) -> Case:
    return Case(path.name, path.read_bytes(), path.suffix, options)


def shipped_cases() -> list[Case]:
    """The shipped trainer configs (tests/data/trainer_configs, tests/data/torchtitan03) with the options their tests
    read them with (tests/fuzzing.py _issue24_targets); pretrain_llama2_distributed.sh with --model llama2-7b (its
    tokenizer's vocabulary is in files the planner does not read)."""
    C = CONFIGS
    return [
        _case(C / "ds_config_zero2.json", model="llama3-8b", gpus=8),
        _case(C / "ds_config_zero3.json", model="llama3-8b", gpus=8),
        _case(C / "llama3_8b.toml", gpus=8),
        _case(C / "train_llama3_8b.sh"),
        _case(C / "train_llama3_8b_h100_fp8.sh"),
        _case(C / "train_gpt3_175b_distributed.sh", gpus=128),
        _case(C / "run_deepspeed_example.sh", gpus=8, hardware="h100-sxm"),
        _case(C / "tr11-176B-ml.slurm", gpus=384, hardware="a100-sxm-80gb"),
        _case(C / "bridge_llama31_405b_h100.sh"),
        _case(C / "bridge_deepseek_v2_h100.sh"),
        _case(C / "bridge_deepseek_v3_h800.sh"),
        _case(C / "bridge_gpt_oss_120b_h100.sh"),
        _case(C / "bridge_qwen3_next_h100.sh"),
        *[_case(p, hardware="h100-sxm") for p in sorted((DATA / "torchtitan03").glob("*.sh"))],
    ]


# command-line options of the fuzz targets' command lines that load_job takes (the rest are the command's own)
_OPTIONS = {"--model": ("model", str), "--gpus": ("gpus", int), "--hardware": ("hardware", str),
            "--seq-len": ("seq_len", int), "--trainer-date": ("trainer_date", str)}


def options_of(args: list[str]) -> dict:
    """load_job's overrides from a command line's options (--model, --gpus, --hardware, --seq-len, --trainer-date: the
    precision-flags seed fp8_tp2_pp2.args is refused without its --trainer-date 2026-07-02)."""
    out = {}
    for a, b in zip(args, args[1:]):
        if a in _OPTIONS:
            k, t = _OPTIONS[a]
            out[k] = t(b)
    return out


TRAINER_KINDS = ("megatron", "torchtitan", "deepspeed", "megatron-deepspeed", "torchtitan-0.3", "megatron-bridge",
                 "megatron-recent", "newest-fields", "precision-flags")


def fuzz_cases(work: Path) -> list[Case]:
    """The fuzz harness' trainer-config seeds (tests/fuzzing.py targets: the TRAINER_KINDS kinds), each read with the
    options of its kind's first explain / check command line."""
    from fuzzing import targets

    out, seen = [], set()
    for kind, t in targets(work).items():
        if kind not in TRAINER_KINDS:
            continue
        for i, (name, data) in enumerate(sorted(t.seeds.items())):
            if data in seen:
                continue
            seen.add(data)
            line = next((a for a in t.args if a and a[0] in ("explain", "check")), [])
            args = [*line, *t.seed_args.get(name, [])]
            out.append(Case(f"{kind}:{name}", data, t.seed_suffix.get(name, t.suffix), options_of(args)))
    return out


def mutated_cases(work: Path, seed: int, per_kind: int) -> list[Case]:
    """per_kind inputs of each TRAINER_KINDS kind, its seeds mutated in turn as the fuzz pass mutates them
    (fuzzing.mutate, random.Random(f"{kind}:{seed}:ign")), each read with the options fuzz_cases gives its seed: new
    inputs for the check (scripts/fuzz.py --ignored-keys --mutate N --seed S). An input refused as given is skipped."""
    import random

    from fuzzing import mutate, targets

    out = []
    for kind, t in targets(work).items():
        if kind not in TRAINER_KINDS:
            continue
        rng, names = random.Random(f"{kind}:{seed}:ign"), sorted(t.seeds)
        line = next((a for a in t.args if a and a[0] in ("explain", "check")), [])
        for i in range(per_kind):
            name = names[i % len(names)]
            data = mutate(rng, t, t.seeds[name])
            out.append(Case(f"{kind}:{name}:{seed}:{i}", data, t.seed_suffix.get(name, t.suffix),
                            options_of([*line, *t.seed_args.get(name, [])])))
    return out


# ------------------------------------------------------------------ reading and pricing
@dataclass
class Read:
    """A file read and priced: refused (the PlannerError's text) or its figures and the reader's four lists."""

    refused: str | None = None
    figures: dict | None = None
    lines: dict = field(default_factory=dict)  # kind -> the reader's Note records
    fmt: str | None = None
    crashed: str | None = None  # an exception other than PlannerError: a reader bug


class Pricer:
    """load_job then explain_json (cli/core.py), the figures of a Job priced once (a Job seen before: its figures)."""

    def __init__(self, tmp: Path | None = None):
        """tmp: the folder the changed files are written to (a fresh temporary one by default: close() removes it)."""
        self.seen: dict[str, dict] = {}
        self.own = tmp is None
        self.tmp = Path(tempfile.mkdtemp(prefix="ignored-keys-")) if tmp is None else Path(tmp)
        self.n = 0

    def close(self) -> None:
        if self.own:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def read(self, case: Case, data: bytes | None = None) -> Read:
        from planner.cli.core import explain_json, load_job
        from planner.errors import PlannerError

        self.n += 1
        path = self.tmp / f"{self.n}" / f"input{case.suffix}"
        path.parent.mkdir()
        path.write_bytes(case.data if data is None else data)
        got: list = []
        sink = io.StringIO()
        try:
            with contextlib.redirect_stderr(sink):
                job, where = load_job(path, dict(case.options), None, got)
                cfg = got[0]
                lines = {k: list(getattr(cfg, k)) for k in ("ignored", "not_modelled", "unmodelled", "assumed")}
                key = json.dumps(job.model_dump(mode="json"), sort_keys=True, default=str)
                if key not in self.seen:
                    res, _ = explain_json(job, where)
                    self.seen[key] = figures(res)
        except PlannerError as e:
            return Read(refused=str(e), lines={})
        except Exception as e:  # noqa: BLE001 -- a reader bug is a finding, not a crash of the check
            return Read(crashed=f"{type(e).__name__}: {e}")
        return Read(figures=self.seen[key], lines=lines, fmt=cfg.fmt)


def figures(res: dict) -> dict:
    """explain's JSON less what is no figure of the plan: its warnings and assumed lines (the reader's lines are the
    trainer_config block, which explain_json without a trainer leaves out)."""
    return {k: v for k, v in res.items() if k not in ("warnings", "assumed")}


def differ(a, b, path: str = "") -> str | None:
    """The first path at which two JSON values differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            d = differ(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = differ(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {_short(a)} -> {_short(b)}"


def _short(v) -> str:
    from planner.trainers.report import cut

    return cut(json.dumps(v, default=str), 80)


# ------------------------------------------------------------------ values changed
# a string setting's other choices, where the trainer's code gives them (argparse choices / config Literal types)
CHOICES = {
    # NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py: --lr-decay-style, --lr-wsd-decay-style,
    # --weight-decay-incr-style, --init-method / --tokenizer-type are free strings; these are argparse choices
    "--lr-decay-style": ["constant", "linear", "cosine", "inverse-square-root", "WSD"],
    "--lr-wsd-decay-style": ["exponential", "linear", "cosine", "minus_sqrt"],
    "--weight-decay-incr-style": ["constant", "linear", "cosine"],
    "--optimizer": ["adam", "sgd"],
    "--position-embedding-type": ["learned_absolute", "rope", "none"],
    "--normalization": ["LayerNorm", "RMSNorm"],
    "--attention-backend": ["flash", "fused", "unfused", "local", "auto"],
    "--transformer-impl": ["local", "transformer_engine"],
    "--fp8-format": ["e4m3", "hybrid"],
    "--fp8-recipe": ["delayed", "tensorwise", "mxfp8", "blockwise"],
    "--recompute-granularity": ["full", "selective"],
    "--recompute-method": ["uniform", "block"],
    "--split": ["949,50,1", "98,2,0"],
    "--data-parallel-sharding-strategy": ["no_shard", "optim", "optim_grads", "optim_grads_params"],
    # Megatron-Bridge @dc805f5cf (Megatron-Core 905c0e386 DistributedDataParallelConfig / TransformerConfig Literals)
    "ddp.data_parallel_sharding_strategy": ["no_shard", "optim", "optim_grads", "optim_grads_params"],
    "model.cross_entropy_fusion_impl": ["native", "te"],
    "mixed_precision.fp8_recipe": ["tensorwise", "delayed", "mxfp8", "blockwise"],
    "mixed_precision.fp8": ["hybrid", "e4m3"],
    # megatron/training/config/training_config.py l. 698-711: tokenizer_type's Literal
    "--tokenizer-type": ["GPT2BPETokenizer", "NullTokenizer", "HuggingFaceTokenizer", "TikTokenizer",
                         "GPTSentencePieceTokenizer", "SentencePieceTokenizer", "Llama2Tokenizer"],
    # torchtitan @e347b1e5e torchtitan/config/job_config.py
    "optimizer.name": ["AdamW", "Adam"],
    "lr_scheduler.decay_type": ["linear", "sqrt", "cosine"],
    "activation_checkpoint.mode": ["selective", "full", "none"],
    "parallelism.pipeline_parallel_schedule": ["1F1B", "Interleaved1F1B", "GPipe"],
    "parallelism.fsdp_reshard_after_forward": ["default", "always", "never"],
    "parallelism.context_parallel_rotate_method": ["allgather", "alltoall"],
    "training.mixed_precision_param": ["bfloat16", "float32"],
    "training.mixed_precision_reduce": ["float32", "bfloat16"],
}


def _argparse_choices(key: str):
    """A Megatron-LM flag's argparse choices (planner/trainers/megatron_argparse.DEFINITIONS, generated from
    arguments.py @d98e8a64): a value outside them is refused as Megatron refuses it (since the argparse merge, 75a9be2),
    so the change of an ignored flag with choices is another of its choices, not the value with '_x' added."""
    if not key.startswith("--"):
        return None
    from planner.trainers.megatron_argparse import DEFINITIONS

    d = DEFINITIONS.get(key)
    return list(d[1]) if d and d[1] else None


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def changed_values(key: str, v) -> list:
    """Type-preserving changes of a setting's value: a bool flipped, a number doubled (0: 1 / 0.5), a string another of
    CHOICES[key] or a Megatron-LM flag's argparse choices (else the string with '_x' added; a number written as a
    string, doubled; a number among its flag's choices, another of them), a list with its first item
    changed; a mapping: one change per leaf (returned as the whole mapping changed). A switch (None, or True for a flag
    given without a value): none (its change is its removal)."""
    short = key.rsplit(".", 1)[-1] if "." in key and not key.startswith("-") else key
    choices = CHOICES.get(key) or CHOICES.get(short) or _argparse_choices(key)
    if v is None:
        return []
    if isinstance(v, bool):
        return [not v]
    if _num(v):
        if choices and str(v) in choices:  # an int flag with choices (--timing-log-level 0|1|2): another of them
            return [type(v)(c) for c in choices if c != str(v)][:1]
        return [(v * 2 if v else 1) if isinstance(v, int) else (v * 2 if v else 0.5)]
    if isinstance(v, str):
        if choices:
            other = [c for c in choices if c != v]
            return other[:1]
        from planner.trainers.report import read_value

        r = read_value(v)
        if _num(r):
            return [str(changed_values(key, r)[0])]
        return [v + "_x"]
    if isinstance(v, list):
        if not v:
            return [[1]]
        first = changed_values(key, v[0])
        return [[first[0], *v[1:]]] if first else [v[1:]]
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            for y in changed_values(f"{key}.{k}", x):
                out.append({**v, k: y})
        return out
    return []


# ------------------------------------------------------------------ keys found in a file's text
_TOKEN = r'"[^"\n]*"|\'[^\'\n]*\'|\$\{[^}\n]*\}|(?!--)[^\s\\;|&)("\']+'


def _flag_re(flag: str, valued: bool, many: bool) -> re.Pattern:
    head = rf"(?<![\w$-]){re.escape(flag)}(?![\w.-])"
    if not valued:
        return re.compile(head + r"(?![=])")
    if many:
        return re.compile(head + rf"(?:=(?:{_TOKEN})|(?:[ \t]+(?:{_TOKEN}))+)")
    return re.compile(head + rf"(?:=|[ \t]+)(?:{_TOKEN})")


def _shell_word(v) -> str:
    from planner.trainers.report import shown_value

    s = " ".join(map(shown_value, v)) if isinstance(v, list) else shown_value(v)
    return f'"{s}"' if re.search(r"[\s;&|()<>]", s) or not s else s


def flag_variants(text: str, flag: str, value) -> list[tuple[str, str]]:
    """(label, new text) for a command-line flag: each changed value written for every occurrence (`--flag NEW`), and
    the flag removed with its value; [] where the text does not spell it."""
    switch = value is None or value is True
    many = isinstance(value, list)
    rx = _flag_re(flag, not switch, many)
    if not rx.search(text):
        return []
    out = [(f"{flag} {_shell_word(new)}", rx.sub(lambda m: f"{flag} {_shell_word(new)}", text))
           for new in ([] if switch else changed_values(flag, value))]
    out.append((f"{flag} removed", rx.sub("", text)))
    return out


def _json_token(v) -> str:
    return json.dumps(v)


_JSON_VALUE = r'"(?:[^"\\\n]|\\.)*"|\$\{?\w+\}?|[-\w.+]+'


def json_text_variants(text: str, key: str, value) -> list[tuple[str, str]]:
    """(label, new text) for a JSON key written in a script's text (a Megatron-DeepSpeed heredoc ds_config): its last
    name's `"name": VALUE` (a scalar, or a shell variable) changed and removed; [] where absent or not a scalar."""
    leaf = key.rsplit(".", 1)[-1]
    rx = re.compile(rf'"{re.escape(leaf)}"\s*:\s*(?:{_JSON_VALUE})')
    if not rx.search(text) or isinstance(value, (dict, list)):
        return []
    out = [(f"{key}: {_json_token(new)}", rx.sub(lambda m: f'"{leaf}": {_json_token(new)}', text))
           for new in changed_values(key, value)]
    removed = re.sub(r",(\s*)}", r"\1}", re.sub(rf'"{re.escape(leaf)}"\s*:\s*(?:{_JSON_VALUE})\s*,?', "", text))
    out.append((f"{key} removed", removed))
    return out


def json_variants(text: str, key: str, value) -> list[tuple[str, str]]:
    """(label, new text) for a key of a JSON document (a DeepSpeed config; `a.b` nested): each changed value, and the
    key removed."""
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    parts = key.split(".")
    node = doc
    for p in parts[:-1]:
        node = node.get(p) if isinstance(node, dict) else None
    if not isinstance(node, dict) or parts[-1] not in node:
        return []
    out = []
    for new in changed_values(key, node[parts[-1]]):
        node_v = node[parts[-1]]
        node[parts[-1]] = new
        out.append((f"{key}: {_short(new)}", json.dumps(doc, indent=1)))
        node[parts[-1]] = node_v
    v = node.pop(parts[-1])
    out.append((f"{key} removed", json.dumps(doc, indent=1)))
    node[parts[-1]] = v
    return out


def _leaves(doc, empty_leaf: bool) -> dict:
    """A document's settings, `a.b` -> value, every leaf (a list is a leaf; an empty table one where `empty_leaf`,
    else nothing); {} for a document that is no mapping."""
    out = {}

    def walk(d, pre):
        for k, v in d.items():
            if isinstance(v, dict) and (v or not empty_leaf):
                walk(v, f"{pre}{k}.")
            else:
                out[f"{pre}{k}"] = v
    if isinstance(doc, dict):
        walk(doc, "")
    return out


def json_keys(text: str) -> dict:
    """A JSON document's settings, `a.b` -> value, every leaf (a list is a leaf; so is an empty object)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return _leaves(doc, True)


def _toml_token(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return json.dumps(v)


def toml_variants(text: str, key: str, value) -> list[tuple[str, str]]:
    """(label, new text) for a TOML `section.key` (the key's line in its [section]): each changed value, and the line
    removed."""
    section, _, name = key.rpartition(".")
    lines = text.split("\n")
    cur, at = "", None
    for i, line in enumerate(lines):
        h = re.match(r"\s*\[([^\[\]]+)\]\s*(#.*)?$", line)
        if h:
            cur = h.group(1).strip()
        elif cur == section and re.match(rf"\s*{re.escape(name)}\s*=", line):
            at = i
    if at is None:
        return []
    out = []
    for new in changed_values(key, value):
        changed = lines[:at] + [f"{name} = {_toml_token(new)}"] + lines[at + 1:]
        out.append((f"{key} = {_toml_token(new)}", "\n".join(changed)))
    out.append((f"{key} removed", "\n".join(lines[:at] + lines[at + 1:])))
    return out


def toml_keys(text: str) -> dict:
    """A TOML document's settings, `section.key` -> value, every leaf (an empty [section] none)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}
    return _leaves(doc, False)


def _override_re(key: str) -> re.Pattern:
    return re.compile(rf"(?<![\w.]){re.escape(key)}=(?:{_TOKEN})")


def override_variants(text: str, key: str, value) -> list[tuple[str, str]]:
    """(label, new text) for a Megatron-Bridge override `a.b=VALUE` (Hydra's `+` / `++` prefixes kept): each changed
    value, and the override removed."""
    rx = _override_re(key)
    if not rx.search(text):
        return []
    from planner.trainers.report import shown_value

    def word(v):
        s = shown_value(v)
        return f"'{s}'" if re.search(r"[\s;&|()<>\[\]{},]", s) else s
    out = [(f"{key}={word(new)}", rx.sub(lambda m: f"{key}={word(new)}", text)) for new in changed_values(key, value)]
    out.append((f"{key} removed", rx.sub("", text)))
    return out


def _script_flags(text: str, fmt: str) -> dict:
    """A Megatron / Megatron-DeepSpeed script's flags as its reader parses them ({flag: value}), values read as a line
    reads them (report.read_value: numbers, true / false, else the word); lists as lists."""
    from planner.errors import PlannerError
    from planner.trainers import megatron
    from planner.trainers.megatron_deepspeed import MDS_NARGS
    from planner.trainers.report import read_value

    try:
        split = megatron.read_script_words(None, text, "", "")
        flags, _ = megatron.parse_flags(split.words, "", MDS_NARGS if fmt == "megatron-deepspeed" else frozenset())
    except PlannerError:
        return {}
    return {k: (v if v is True else [read_value(str(x)) for x in v] if isinstance(v, list) else read_value(str(v)))
            for k, v in flags.items() if k.startswith("--")}


def _heredoc_json_keys(text: str) -> dict:
    """The scalar `"name": VALUE` keys of a script's JSON heredocs (a Megatron-DeepSpeed ds_config), name -> value (a
    shell variable's value unknown: skipped)."""
    from planner.trainers.report import read_value

    out = {}
    for m in re.finditer(rf'"(\w+)"\s*:\s*({_JSON_VALUE})', text):
        raw = m.group(2)
        if raw.startswith("$"):
            continue
        out[m.group(1)] = json.loads(raw) if raw.startswith('"') else read_value(raw)
    return out


_TT03_OPTION = re.compile(r"(?<![\w-])--([a-z_][\w]*(?:\.[\w]+)+)(?:=|[ \t]+)(" + _TOKEN + ")")
_BRIDGE_OVERRIDE = re.compile(r"(?<![\w.+-])\+{0,2}([a-z_]\w*(?:\.\w+)+)=(" + _TOKEN + ")")


def file_keys(case: Case, fmt: str) -> dict:
    """The settings a file sets, as its reader names them in its lists: setting -> value."""
    from planner.trainers.report import read_value

    text = case.data.decode("utf-8", "replace")
    if fmt == "deepspeed":
        return json_keys(text)
    if fmt == "torchtitan":
        return toml_keys(text)
    if fmt in ("megatron", "megatron-deepspeed"):
        keys = _script_flags(text, fmt)
        if fmt == "megatron-deepspeed":
            keys.update({k: v for k, v in _heredoc_json_keys(text).items() if k not in keys})
        return keys
    unq = lambda s: s[1:-1] if s[:1] in "'\"" and s[-1:] == s[:1] else s  # noqa: E731
    if fmt == "torchtitan-0.3":
        return {m.group(1): read_value(unq(m.group(2))) for m in _TT03_OPTION.finditer(text)
                if not m.group(2).startswith("$")}
    if fmt == "megatron-bridge":
        keys = {m.group(1): read_value(unq(m.group(2))) for m in _BRIDGE_OVERRIDE.finditer(text)
                if not m.group(2).startswith("$")}
        keys.update({k: v for k, v in _script_flags(text, "megatron").items() if k not in keys})
        return keys
    return {}


def variants(case: Case, fmt: str, key: str, value) -> list[tuple[str, bytes]]:
    """(label, changed file) for one setting of a file of format `fmt`."""
    text = case.data.decode("utf-8", "replace")
    if key is None or re.search(r"\s", key):
        return []
    if fmt == "deepspeed":
        out = json_variants(text, key, value)
    elif fmt == "torchtitan":
        out = toml_variants(text, key, value)
    elif key.startswith("--"):
        out = flag_variants(text, key, value)
    elif fmt == "torchtitan-0.3":
        out = flag_variants(text, f"--{key}", value)
    elif fmt == "megatron-bridge":
        out = override_variants(text, key, value)
    else:  # a Megatron-DeepSpeed ds_config key
        out = json_text_variants(text, key, value)
    return [(label, t.encode()) for label, t in out if t != text]


# ------------------------------------------------------------------ the two checks
@dataclass
class Finding:
    case: str
    fmt: str
    key: str
    change: str
    what: str  # "ignored-moves" | "ignored-refused" | "priced-silent" | "crash"
    detail: str

    def __str__(self):
        return f"{self.case} [{self.fmt}] {self.key}: {self.change}: {self.what}: {self.detail}"


@dataclass
class Tally:
    findings: list = field(default_factory=list)
    tried: int = 0
    unmutable: list = field(default_factory=list)  # (case, key): listed, but the text does not spell it so


def _settings(lines: list) -> list[tuple[str, object]]:
    return [(k, v) for n in lines for k, v in getattr(n, "entries", ()) if k is not None]


def _reads(case: Case, fmt: str, changes, pricer: Pricer, tally: Tally, limit: int | None):
    """Each (key, label, changed file) of `changes` read (at most `limit` of them; the next is drawn before the
    limit stops, as each check's own loop drew it): counted tried, a crash recorded as a Finding; yields (key, label,
    Read) of the others, for the check's own test."""
    for done, (key, label, data) in enumerate(changes):
        if limit is not None and done >= limit:
            return
        tally.tried += 1
        got = pricer.read(case, data)
        if got.crashed:
            tally.findings.append(Finding(case.name, fmt, key, label, "crash", got.crashed))
        else:
            yield key, label, got


def ignored_findings(case: Case, pricer: Pricer, tally: Tally, limit: int | None = None) -> None:
    """Each setting listed ignored, changed and removed: the same figures as the unchanged file (Finding otherwise)."""
    base = pricer.read(case)
    if base.crashed:
        tally.findings.append(Finding(case.name, "?", "-", "unchanged", "crash", base.crashed))
        return
    if base.figures is None:  # refused as given (a fuzz seed that stands for a refusal): nothing to compare with
        tally.unmutable.append((case.name, f"(refused as given: {base.refused.splitlines()[0][:200]})"))
        return

    def changes():  # drawn lazily: a setting the text does not spell is counted unmutable as the loop reaches it
        for key, value in _settings(base.lines["ignored"]):
            vs = variants(case, base.fmt, key, value)
            if not vs:
                tally.unmutable.append((case.name, key))
            yield from ((key, label, data) for label, data in vs)

    for key, label, got in _reads(case, base.fmt, changes(), pricer, tally, limit):
        if got.refused is not None:
            tally.findings.append(Finding(case.name, base.fmt, key, label, "ignored-refused",
                                          got.refused.splitlines()[0][:300]))
        elif (d := differ(base.figures, got.figures)) is not None:
            tally.findings.append(Finding(case.name, base.fmt, key, label, "ignored-moves", d))


def _named(lines: dict, key: str) -> bool:
    """Whether a line of the four lists names `key`: as a setting, or in its text (a rule that reads it)."""
    short = key.lstrip("-")
    for kind in ("ignored", "not_modelled", "unmodelled", "assumed"):
        for n in lines.get(kind, ()):
            if any(k == key for k, _ in getattr(n, "entries", ())):
                return True
            if re.search(rf"(?<![\w-]){re.escape(short)}(?![\w-])", str(n)):
                return True
    return False


def _texts(lines: dict) -> dict:
    return {k: sorted(map(str, v)) for k, v in lines.items()}


def priced_findings(case: Case, pricer: Pricer, tally: Tally, limit: int | None = None) -> None:
    """Each setting the file sets and the reader does not list ignored, its value changed: a figure moves, the change
    is refused, or a line names the setting (Finding otherwise)."""
    base = pricer.read(case)
    if base.figures is None:
        return  # ignored_findings reports it
    ignored = {k for k, _ in _settings(base.lines["ignored"])}

    def changes():
        for key, value in file_keys(case, base.fmt).items():
            parts = key.split(".")
            if (key in ignored or parts[-1] in ignored
                    or any(".".join(parts[:i]) in ignored for i in range(1, len(parts)))):
                continue  # listed ignored (itself, as a heredoc's bare name, or a section it sits in)
            vs = [(label, data) for label, data in variants(case, base.fmt, key, value)
                  if not label.endswith(" removed")]
            if value is True and not vs:  # a switch: its change is its removal
                vs = variants(case, base.fmt, key, None)
            yield from ((key, label, data) for label, data in vs)

    for key, label, got in _reads(case, base.fmt, changes(), pricer, tally, limit):
        if got.refused is not None or differ(base.figures, got.figures) is not None:
            continue
        elif not _named(got.lines, key) and _texts(got.lines) == _texts(base.lines):
            tally.findings.append(Finding(case.name, base.fmt, key, label, "priced-silent",
                                          "no figure moved and no line names it"))


def run(cases: list[Case], *, limit: int | None = None, priced: bool = True) -> Tally:
    """Both checks over `cases` (at most `limit` changes each way and case), the changed files written to a temporary
    folder removed at the end."""
    pricer, tally = Pricer(), Tally()
    try:
        for case in cases:
            ignored_findings(case, pricer, tally, limit)
            if priced:
                priced_findings(case, pricer, tally, limit)
    finally:
        pricer.close()
    return tally
