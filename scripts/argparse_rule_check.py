"""The check of the Megatron-LM argument reader (planner/trainers/megatron.py) against Megatron-LM's own argparse
parser at @d98e8a64 (issue argparse).

Megatron-LM parses its command line with argparse (megatron/training/arguments.py @d98e8a64 parse_args l. 117-131:
`argparse.ArgumentParser(allow_abbrev=False)`, then `parser.parse_args()`; parse_known_args only where a caller
passes ignore_unknown_args=True: ft_integration.py l. 78, inprocess_restart.py l. 133 and unit tests, never the
training entry points). argparse refuses before anything runs (exit 2, "error: argument --x: ..."): a value its
`type` callable rejects (int('1.5'), float('x')), a value outside `choices`, an explicit value given to a
store_true / store_false flag (`--bf16=1`: "ignored explicit argument"), a flag that takes a value given none, and
a flag the parser does not define ("unrecognized arguments"; allow_abbrev=False: no prefix matching).

arguments.py imports torch, so its `_add_*_args` functions are not run here: the definitions are read from the
source at the commit (git show from the read-only mirror), by AST:
  - every `<group>.add_argument('--flag', ..., type=int|float|str|<other>, choices=[...], action=..., nargs=...)`
    call in arguments.py (a type that is not int / float / str, e.g. a lambda, is kept as 'other': the values it
    refuses are not predicted and its type cases are left out);
  - every `ArgumentGroupFactory(Config, exclude=[...])` (argument_utils.py @d98e8a64 l. 93-200): each annotated
    field of Config (and its dataclass bases) not excluded becomes `--field-name`; int / float / str become the type,
    Optional[X] X's, Literal[...] choices, list[X] nargs '+', bool store_true (default False) or store_false with
    a `--no-` prefix (default True); a field whose metadata holds an "argparse_meta" dict literal takes its keys
    over the inferred ones; a field of another type (an enum, a Union, a Callable) is kept as 'other'.
A real argparse.ArgumentParser(allow_abbrev=False) is built from those definitions (type 'other' parsed as str)
and given, on top of a base argument file that reads (BASE), the cases of each flag of megatron_argparse.DEFINITIONS
(those the reader prices, VALUE_FLAGS, BOOL_FLAGS, BOOL_READ of megatron.py, that Megatron defines, and every other
whose value argparse can refuse: store_true / store_false, int, float, choices, nargs): a valid value, a wrong-typed value ('x' for int and
float; '1.5' for int), a value outside its choices, an explicit value for a store_true flag, the flag misspelt
(a letter doubled). argparse's verdict (refused with its message / parsed) is compared with the reader's
(megatron.read on the same text: refused with a PlannerError, exit 2 / read).

`python scripts/argparse_rule_check.py` prints the differences (argparse refuses, the reader reads: a gap;
argparse parses, the reader refuses: a refusal of the reader's own, e.g. a value it does not model, not a gap);
`--write` records every case in tests/data/megatron_argparse_cases.json, which tests/test_argparse_rules.py checks
the reader against, with every option string (flag_names) and each entry script's flags (entry_scripts, below);
`--emit` rewrites the tables of planner/trainers/megatron_argparse.py, the reader's check: DEFINITIONS (the flags it
prices and those whose value argparse can refuse, as Megatron defines them), OTHER_FLAGS (every other option string),
ENTRY_FLAGS / ENTRY_SCRIPTS (entry_scripts(): each file outside tests/ that calls parse_args / parse_and_validate_args
with an extra_args_provider, the flags that function adds, following the functions it calls into the modules it
imports, and its ignore_unknown_args; a wrapper that runpy-runs one, pretrain_mamba.py, takes its script's).
Run on 2026-12-07 (Python 3.12's argparse): 878 option strings defined (before 2026-12-07 939: the TransformerConfig
factory's exclude list, given by name, was read as none, so 70 option strings of fields Megatron leaves out were
counted, and 4 of init=False fields, which build_group skips, and a
BooleanOptionalAction's 13 --no- forms were not), 770 in DEFINITIONS (174 of them priced; the reader prices five
Megatron does not define: --add-bias-linear, --fp8-dot-product-attention, --cpu-offloading, never flags of Megatron-LM,
now refused; --overlap-p2p-communication, an older Megatron-LM's, read for a --trainer-date in its dates; and
--export-kd-teacher-load, ModelOpt's entry scripts'); 31 entry scripts, none passing ignore_unknown_args=True; 2,938
cases, argparse refuses 2,168, the reader every one of them with argparse's reason (before unkflags the 827 misspelt
flags were read, listed as unknown to the planner: the one gap then; the CI corpus's 404 argument files hold 8 flags
Megatron @d98e8a64 does not define, in 5 files, the entry scripts' own: ModelOpt's --export-*, examples/mimo's
--model-provider / --dataset-provider / --language-model-checkpoint / --total-seq-length, read as the row's script's
or every entry script's). Before megatron_argparse.check, over the priced flags' 659 cases, the reader read 301 that
argparse refuses (125 mistyped, out-of-choices or store_true-with-a-value cases, 176 misspelt flags). It refuses 15 values
argparse parses for its own reasons: 'x' for a free-text flag whose later checks want a known
name (--cp-comm-type, --cuda-graph-modules / -scope, --hybrid-*-pattern, --pipeline-model-parallel-layout,
--step-batch-size-schedule, --window-size), a flag that needs another (--wgrad-deferral-limit,
--use-precision-aware-optimizer, --optimizer-cpu-offload: Megatron's validate_args asserts), a T5 flag
(--encoder- / --decoder-num-layers), --hidden-size 2 against 16 heads, and --tokenizer-type BertWordPieceLowerCase
(its vocabulary size is in its files).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.errors import PlannerError  # noqa: E402
from planner.trainers import megatron  # noqa: E402

MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
COMMIT = "d98e8a64"
FIXTURE = ROOT / "tests" / "data" / "megatron_argparse_cases.json"
# an argument file that reads (a small GPT; every setting it leaves out Megatron's default)
BASE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
        "--max-position-embeddings", "1024", "--micro-batch-size", "1", "--global-batch-size", "8",
        "--train-iters", "10", "--bf16"]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(MIRROR), *args], check=True, capture_output=True, text=True).stdout


def _show(path: str) -> str:
    return _git("show", f"{COMMIT}:{path}")


def _lit(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return None


def _type_name(node) -> str:
    if isinstance(node, ast.Name) and node.id in ("int", "float", "str"):
        return node.id
    return "other"


def _from_add_argument(tree) -> dict:
    defs = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                 and a.value.startswith("-")]
        if not names:
            continue
        kw = {k.arg: k.value for k in node.keywords}
        d = {"type": _type_name(kw["type"]) if "type" in kw else "str", "choices": None, "action": None,
             "nargs": None, "source": f"arguments.py l. {node.lineno}"}
        if "choices" in kw:
            c = _lit(kw["choices"])
            d["choices"] = [str(x) for x in c] if c is not None else "other"
        if "action" in kw:
            d["action"] = _lit(kw["action"]) if isinstance(kw["action"], ast.Constant) else "other"
            if isinstance(kw["action"], ast.Attribute) and kw["action"].attr == "BooleanOptionalAction":
                # argparse.BooleanOptionalAction: the flag alone, and its --no- form (Python 3.9+ argparse.py)
                d["action"], d["type"] = "boolean_optional", None
                names += ["--no-" + n[2:] for n in names if n.startswith("--")]
        if "nargs" in kw:
            d["nargs"] = _lit(kw["nargs"])
        if d["action"] in ("store_true", "store_false", "store_const", "count"):
            d["type"] = None
        for n in names:
            defs[n] = d
    return defs


def _find_class(name: str):
    """(module tree, ClassDef) of a dataclass named `name` in megatron/ at the commit."""
    try:
        out = _git("grep", "-l", f"^class {name}\\b", COMMIT, "--", "megatron/")
    except subprocess.CalledProcessError:
        raise SystemExit(f"class {name} not found at {COMMIT}") from None
    for line in out.splitlines():
        path = line.split(":", 1)[1]
        tree = ast.parse(_show(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return path, node
    raise SystemExit(f"class {name} not found at {COMMIT}")


def _enum_members(name: str):
    """The member names of an enum class `name` at the commit, or None where it is no enum found there."""
    try:
        _, cls = _find_class(name)
    except SystemExit:
        return None
    if not any("Enum" in (getattr(b, "id", None) or getattr(b, "attr", "")) for b in cls.bases):
        return None
    return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]


def _annotation(ann) -> dict:
    """{type, choices, nargs, bool} of a field annotation, as ArgumentGroupFactory._extract_type reads it."""
    if isinstance(ann, ast.Name):
        if ann.id == "bool":
            return {"bool": True}
        if ann.id not in ("int", "float", "str"):
            members = _enum_members(ann.id)
            if members is not None:  # _get_enum_kwargs: type config_type[cli_arg], choices the members
                return {"type": "str", "choices": members}
        return {"type": _type_name(ann)}
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):  # a string annotation
        return _annotation(ast.parse(ann.value, mode="eval").body)
    if isinstance(ann, ast.Subscript):
        head = ann.value.id if isinstance(ann.value, ast.Name) else getattr(ann.value, "attr", "")
        inner = ann.slice
        if head == "Optional":
            return _annotation(inner)
        if head == "Literal":
            vals = _lit(inner)
            vals = list(vals) if isinstance(vals, tuple) else [vals]
            t = type(vals[0]).__name__
            return {"type": t if t in ("int", "float", "str") else "other", "choices": [str(v) for v in vals]}
        if head in ("list", "List"):
            d = _annotation(inner)
            d["nargs"] = "+"
            return d
        if head == "Union" and isinstance(inner, ast.Tuple) and len(inner.elts) == 2 and \
                isinstance(inner.elts[1], ast.Constant) and inner.elts[1].value is None:
            return _annotation(inner.elts[0])
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
        if isinstance(ann.right, ast.Constant) and ann.right.value is None:
            return _annotation(ann.left)
    return {"type": "other"}


def _fields(cls_name: str, seen=None) -> list:
    path, cls = _find_class(cls_name)
    out = []
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in ("object",):
            try:
                out += _fields(base.id)
            except SystemExit:
                pass
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((path, cls_name, node))
    return out


def _exclude_list(tree, node) -> list:
    """An ArgumentGroupFactory's exclude list: a literal, or a name assigned a literal list in arguments.py
    (`exclude = [...]`, l. 2279-2372 for TransformerConfig: before 2026-12-07 a name was read as no exclusion, so 70
    option strings of fields Megatron leaves out, --fp8-dot-product-attention among them, were counted as flags)."""
    if isinstance(node, ast.Name):
        values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)]
        if len(values) != 1 or _lit(values[0]) is None:
            raise SystemExit(f"exclude={node.id}: not one literal assignment in arguments.py at {COMMIT}")
        return list(_lit(values[0]))
    v = _lit(node)
    if v is None:
        raise SystemExit(f"exclude at l. {node.lineno}: not a literal")
    return list(v)


def _init_false(f) -> bool:
    return isinstance(f.value, ast.Call) and getattr(f.value.func, "id", getattr(f.value.func, "attr", "")) == "field" \
        and any(k.arg == "init" and _lit(k.value) is False for k in f.value.keywords)


def _classvar(ann) -> bool:
    head = ann.value if isinstance(ann, ast.Subscript) else ann
    return getattr(head, "id", getattr(head, "attr", "")) in ("ClassVar", "InitVar")


def _from_factories(tree) -> dict:
    defs = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "ArgumentGroupFactory"):
            continue
        cls = node.args[0].id
        exclude = set()
        for k in node.keywords:
            if k.arg == "exclude":
                exclude = set(_exclude_list(tree, k.value))
        for path, owner, f in _fields(cls):
            name = f.target.id
            # build_group (argument_utils.py @d98e8a64 l. 222-224) skips an excluded field and one of init=False;
            # a ClassVar is no dataclass field
            if name in exclude or name.startswith("_") or _init_false(f) or _classvar(f.annotation):
                continue
            d = _annotation(f.annotation)
            default = None
            meta = {}
            if f.value is not None:
                if isinstance(f.value, ast.Call) and getattr(f.value.func, "id", getattr(f.value.func, "attr", "")) == "field":
                    for k in f.value.keywords:
                        if k.arg == "default":
                            default = _lit(k.value)
                        if k.arg == "metadata" and isinstance(k.value, ast.Dict):
                            for mk, mv in zip(k.value.keys, k.value.values):
                                if _lit(mk) == "argparse_meta" and isinstance(mv, ast.Dict):
                                    meta = {_lit(a): b for a, b in zip(mv.keys, mv.values)}
                else:
                    default = _lit(f.value)
            flag = "--" + name.replace("_", "-")
            entry = {"type": d.get("type", "str"), "choices": d.get("choices"), "action": None,
                     "nargs": d.get("nargs"), "source": f"{path} {owner}.{name} (ArgumentGroupFactory({cls}))"}
            names = [flag]
            if d.get("bool"):  # store_true where the default is False, else store_false as --no-x / --disable-x
                entry["type"] = None
                if default is False:
                    entry["action"] = "store_true"
                else:
                    entry["action"] = "store_false"
                    names = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
            if "arg_names" in meta:
                names = _lit(meta["arg_names"]) or names
            if "type" in meta:
                entry["type"] = _type_name(meta["type"])
            if "choices" in meta:
                c = _lit(meta["choices"])
                entry["choices"] = [str(x) for x in c] if c is not None else "other"
            if "nargs" in meta:
                entry["nargs"] = _lit(meta["nargs"])
            if "action" in meta:
                entry["action"] = _lit(meta["action"])
                if entry["action"] in ("store_true", "store_false"):
                    entry["type"] = None
            for n in names:
                defs[n] = entry
    return defs


def definitions() -> dict:
    tree = ast.parse(_show("megatron/training/arguments.py"))
    defs = _from_factories(tree)
    defs.update(_from_add_argument(tree))
    return defs


# the calls that build Megatron-LM's parser with an entry script's extra_args_provider (first positional argument or
# keyword) and ignore_unknown_args (second or keyword): arguments.py @d98e8a64 l. 88 parse_and_validate_args, l. 117
# parse_args
PARSER_CALLS = ("parse_args", "parse_and_validate_args")


def _imports(tree) -> dict:
    """{local name: (module, name)} of every `from M import n [as a]` in a module, at any depth (a function's own
    import, train_rl.py's `from megatron.inference.utils import add_inference_args`, counts)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = (node.module, a.name)
    return out


def _module_path(module: str, beside: str):
    """The file of `module` at the commit: from the repository root (megatron.x.y, examples.mimo.z), else beside the
    importing script (examples/multimodal/train.py's `from multimodal_args import ...`: its folder is on sys.path)."""
    rel = module.replace(".", "/")
    folder = beside.rsplit("/", 1)[0] + "/" if "/" in beside else ""
    for cand in (f"{rel}.py", f"{rel}/__init__.py", f"{folder}{rel}.py", f"{folder}{rel}/__init__.py"):
        try:
            return cand, ast.parse(_show(cand))
        except (subprocess.CalledProcessError, SyntaxError):
            continue
    return None, None


def _provider_flags(path: str, tree, name: str, seen: set) -> set:
    """The flags a function `name` of the module at `path` adds: its add_argument calls, and those of every function it
    calls that the module defines or imports from the repository (followed to any depth)."""
    if (path, name) in seen:
        return set()
    seen.add((path, name))
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
              None)
    if fn is None:  # imported into this module (a re-export): followed to where it is defined
        mod = _imports(tree).get(name)
        if mod is None:
            return set()
        mpath, mtree = _module_path(mod[0], path)
        return _provider_flags(mpath, mtree, mod[1], seen) if mtree is not None else set()
    flags = set(_from_add_argument(fn))
    imports = _imports(tree)
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id != name:
            callee = node.func.id
            if any(isinstance(n, ast.FunctionDef) and n.name == callee for n in tree.body):
                flags |= _provider_flags(path, tree, callee, seen)
            elif callee in imports:
                mpath, mtree = _module_path(imports[callee][0], path)
                if mtree is not None:
                    flags |= _provider_flags(mpath, mtree, imports[callee][1], seen)
    return flags


def _runpy_target(tree):
    """The script a wrapper runs as __main__ (pretrain_mamba.py @d98e8a64 l. 16-19: runpy.run_path of
    pretrain_hybrid.py beside it), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "run_path":
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.endswith(".py"):
                    return c.value
    return None


def entry_scripts() -> dict:
    """{script path at the commit: {"flags": the flags its extra_args_provider adds, "ignore_unknown": whether it
    passes ignore_unknown_args=True (then argparse's parse_known_args: an unknown flag is dropped, not refused),
    "source": where it builds the parser}} for every file outside tests/ that calls parse_args /
    parse_and_validate_args with an extra_args_provider (or, like a wrapper, runs one that does). A provider chosen
    by a condition (`add_modelopt_args if has_nvidia_modelopt else None`, pretrain_gpt.py l. 526) counts as given:
    the flags it adds when the condition holds (nvidia-modelopt installed, as in NVIDIA's containers)."""
    out_ = _git("grep", "-l", "-e", "extra_args_provider", "-e", "run_path", COMMIT, "--", "*.py", ":!tests",
                ":!megatron/training/arguments.py", ":!megatron/training/training.py",
                ":!megatron/training/initialize.py")
    scripts, wrappers = {}, {}
    for line in out_.splitlines():
        path = line.split(":", 1)[1]
        tree = ast.parse(_show(path))
        target = _runpy_target(tree)
        if target is not None:
            wrappers[path] = ((path.rsplit("/", 1)[0] + "/" if "/" in path else "") + target, tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                    in PARSER_CALLS):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            provider = kw.get("extra_args_provider", node.args[0] if node.args else None)
            ignore = kw.get("ignore_unknown_args", node.args[1] if len(node.args) > 1 else None)
            if isinstance(provider, ast.IfExp):
                provider = provider.body
            if not isinstance(provider, ast.Name):
                continue
            flags = _provider_flags(path, tree, provider.id, set())
            entry = scripts.setdefault(path, {"flags": set(), "ignore_unknown": False, "source": []})
            entry["flags"] |= flags
            entry["ignore_unknown"] |= _lit(ignore) is True if ignore is not None else False
            entry["source"].append(f"{path} l. {node.lineno} ({provider.id})")
    for path, (target, _) in wrappers.items():
        if target in scripts and path not in scripts:
            scripts[path] = {**scripts[target], "source": [f"{path}: runpy.run_path({target})"] + scripts[target]["source"]}
    return {p: {"flags": sorted(e["flags"]), "ignore_unknown": e["ignore_unknown"], "source": "; ".join(e["source"])}
            for p, e in sorted(scripts.items())}


def flag_names(defs: dict) -> list:
    """Every option string Megatron-LM's own parser defines at the commit (add_megatron_arguments: arguments.py's
    add_argument calls, a BooleanOptionalAction's --no- form, the ArgumentGroupFactory fields with their --no- /
    --disable- forms)."""
    return sorted(defs)


def build_parser(defs: dict) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    done = set()
    for name, d in defs.items():
        if id(d) in done and any(n in done for n in ()):
            continue
        kw = {}
        if d["action"] in ("store_true", "store_false"):
            kw["action"] = d["action"]
        elif d["action"] == "boolean_optional":
            if name.startswith("--no-") and name[5:] in {n[2:] for n in defs}:
                continue  # argparse adds the --no- form itself
            kw["action"] = argparse.BooleanOptionalAction
        elif d["action"] not in (None, "store", "other"):
            kw["action"] = "store_true"  # store_const / count / a custom action: takes no value here
        else:
            kw["type"] = {"int": int, "float": float}.get(d["type"], str)
            if isinstance(d["choices"], list):
                kw["choices"] = d["choices"] if d["type"] in ("str", "other", None) else \
                    [kw["type"](c) for c in d["choices"]]
            if d["nargs"] is not None:
                kw["nargs"] = d["nargs"]
        try:
            p.add_argument(name, dest="d_" + name.strip("-").replace("-", "_"), **kw)
        except (argparse.ArgumentError, ValueError, TypeError):
            pass
    return p


def argparse_verdict(parser, words) -> tuple[str, str]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(words)
    except SystemExit as e:
        if e.code == 2:
            return "refused", err.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1]
        raise
    return "parsed", ""


def reader_verdict(words) -> tuple[str, str]:
    text = "\n".join(words) + "\n"
    try:
        megatron.read(Path("case.args"), text=text, gpus=8, hardware="h100-sxm")
    except PlannerError as e:
        return "refused", str(e).split(": ", 1)[-1][:200]
    return "read", ""


def _misspelt(flag: str) -> str:
    return flag[:-1] + flag[-1] * 2


def _priced(defs: dict) -> set:
    return (megatron.VALUE_FLAGS | set(megatron.BOOL_FLAGS) | megatron.BOOL_READ) & set(defs)


def _checked(defs: dict) -> list:
    """The flags of megatron_argparse.DEFINITIONS (emitted): priced, or with a value argparse can refuse."""
    return sorted(f for f, d in defs.items() if f in _priced(defs) or d["action"] in ("store_true", "store_false")
                  or d["type"] in ("int", "float") or isinstance(d["choices"], list)
                  or isinstance(d["nargs"], int) or d["nargs"] == "+")


def cases(defs: dict) -> list:
    priced = _checked(defs)
    out = []
    for flag in priced:
        d = defs[flag]
        if d["action"] in ("store_true", "store_false"):
            out += [(flag, "valid", [flag]), (flag, "explicit value", [f"{flag}=1"])]
        else:
            t = d["type"]
            if isinstance(d["choices"], list):
                valid = d["choices"][0]
            else:
                valid = {"int": "2", "float": "0.5"}.get(t, "x")
            n = d["nargs"] if isinstance(d["nargs"], int) else 1  # nargs N: N words, the last the case's
            out.append((flag, "valid", [flag] + [valid] * n))
            if t in ("int", "float"):
                out.append((flag, "wrong type", [flag] + [valid] * (n - 1) + ["x"]))
            if t == "int":
                out.append((flag, "wrong type", [flag] + [valid] * (n - 1) + ["1.5"]))
            if isinstance(d["choices"], list):
                out.append((flag, "out of choices", [flag] + [valid] * (n - 1) + ["not_a_choice"]))
            if n > 1:
                out.append((flag, "too few values", [flag] + [valid] * (n - 1)))
            if d["nargs"] in (None, "?") and d["type"] is not None:
                out.append((flag, "no value", [flag]))
        out.append((flag, "misspelt", [_misspelt(flag), "2"]))
    return out


def run() -> dict:
    defs = definitions()
    parser = build_parser(defs)
    assert argparse_verdict(parser, BASE)[0] == "parsed" and reader_verdict(BASE)[0] == "read"
    rows = []
    for flag, kind, words in cases(defs):
        # the case's words after the base's: its value is the one both take (the last of a repeated flag); a flag
        # without a value then ends the line
        a, why = argparse_verdict(parser, BASE + words)
        r, rwhy = reader_verdict(BASE + words)
        row = {"flag": flag, "case": kind, "words": words, "argparse": a, "reader": r}
        if a == "refused":
            row["argparse_message"] = why
        if r == "refused" and a == "parsed":  # the reader's own reason (where argparse refuses: argparse's)
            row["reader_message"] = rwhy
        rows.append(row)
    gaps = [x for x in rows if x["argparse"] == "refused" and x["reader"] == "read"]
    own = [x for x in rows if x["argparse"] == "parsed" and x["reader"] == "refused"]
    return {"commit": COMMIT, "base": BASE, "flags_defined": len(defs), "flag_names": flag_names(defs),
            "entry_scripts": entry_scripts(),
            "definitions": {f: defs[f]["source"] for f in sorted({x["flag"] for x in rows})},
            "summary": {"cases": len(rows), "argparse_refuses": sum(x["argparse"] == "refused" for x in rows),
                        "gaps": len(gaps), "reader_refuses_what_argparse_parses": len(own)},
            "cases": rows}


MODULE = ROOT / "planner" / "trainers" / "megatron_argparse.py"
MARK_BEGIN = "# --- generated by scripts/argparse_rule_check.py --emit: begin ---"
MARK_END = "# --- generated by scripts/argparse_rule_check.py --emit: end ---"


def emitted(defs: dict) -> str:
    """The DEFINITIONS table of planner/trainers/megatron_argparse.py: every flag Megatron defines whose value
    argparse can refuse (a store_true / store_false flag, an int or float type, choices, nargs), and every flag the
    reader prices."""
    priced = _checked(defs)
    lines = [MARK_BEGIN, f"# flag: (type, choices, action, nargs, where Megatron-LM @{COMMIT} defines it)",
             "DEFINITIONS = {"]
    for flag in priced:
        d = defs[flag]
        choices = tuple(d["choices"]) if isinstance(d["choices"], list) else None
        lines.append(f"    {flag!r}: ({d['type']!r}, {choices!r}, {d['action']!r}, {d['nargs']!r},")
        lines.append(f"        {d['source']!r}),")
    lines += ["}", ""]
    lines += _packed("OTHER_FLAGS", sorted(set(flag_names(defs)) - set(priced)),
                     f"# every other option string Megatron-LM @{COMMIT}'s own parser defines (a str flag without choices: "
                     "it takes any word)", "frozenset({", "})")
    entries = entry_scripts()
    groups, scripts = {}, {}
    for path, e in entries.items():
        extra = tuple(f for f in e["flags"] if f not in defs)  # a flag Megatron defines too is checked as Megatron's
        key = next((k for k, v in groups.items() if v == extra), None)
        if key is None:
            key = e["source"].rsplit("(", 1)[-1].rstrip(")")
            key = key if key not in groups else f"{path}:{key}"
            groups[key] = extra
        scripts[path] = (e["ignore_unknown"], key, e["source"])
    lines += ["", "# {provider: the flags an entry script's extra_args_provider adds beyond Megatron-LM's own}",
              "ENTRY_FLAGS = {"]
    for key, extra in groups.items():
        lines += _packed(f"    {key!r}:", list(extra), None, "(", "),", indent="        ")
    lines += ["}", "# {entry script at the commit: (ignore_unknown_args, its ENTRY_FLAGS key, where it builds its parser)}",
              "ENTRY_SCRIPTS = {"]
    for path, (ignore, key, source) in scripts.items():
        lines.append(f"    {path!r}: ({ignore!r}, {key!r},")
        lines.append(f"        {source!r}),")
    lines += ["}", MARK_END]
    return "\n".join(lines) + "\n"


def _packed(head: str, names: list, comment, opening: str, closing: str, indent: str = "    ") -> list:
    """`head opening` then the names' reprs packed into lines of at most 120 characters, then `closing`."""
    out = ([comment] if comment else []) + [f"{head} {opening}" if head.startswith(" ") else f"{head} = {opening}"]
    line = indent
    for n in names:
        item = repr(n) + ","
        if len(line) + len(item) + 1 > 120 and line.strip():
            out.append(line.rstrip())
            line = indent
        line += item + " "
    if line.strip():
        out.append(line.rstrip())
    out.append((indent[:-4] if head.startswith(" ") else "") + closing)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"record the cases in {FIXTURE.relative_to(ROOT)}")
    ap.add_argument("--emit", action="store_true", help=f"rewrite the table of {MODULE.relative_to(ROOT)}")
    args = ap.parse_args()
    if args.emit:
        text = MODULE.read_text()
        head, rest = text.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1]
        MODULE.write_text(head + emitted(definitions()) + tail.lstrip("\n"))
        return
    res = run()
    for x in res["cases"]:
        if x["argparse"] == "refused" and x["reader"] == "read":
            print(f"GAP {' '.join(x['words'])}: argparse {x['argparse_message']}")
    print(json.dumps(res["summary"]))
    if args.write:
        cases = res.pop("cases")
        text = json.dumps(res, indent=1)[:-2] + ',\n "cases": [\n' + \
            ",\n".join("  " + json.dumps(x) for x in cases) + "\n ]\n}\n"
        assert json.loads(text)["cases"] == cases
        FIXTURE.write_text(text)


if __name__ == "__main__":
    main()
