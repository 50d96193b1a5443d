"""Migration of a runs file written before the 2026-12-07 audit4 (branch fields): run records'
free-text `activation_recompute`, `zero_fsdp_mode` and `precision` become explicit fields in the
Job's spelling. It rewrote the 192 records of tests/data; kept for runs files of the old spelling
(planner validate refuses the old keys, naming the new field), tested by tests/test_record_fields.py.

Until this migration planner/validate.py rules 4, 6 and 7 read those three free-text fields by the
term each value starts with (the longest of the field's vocabulary, as a word; "not stated ..."
and the like read as null). This script writes, for every record of the given runs files, what
those rules derived, so that no prediction moves:

    activation_recompute: TEXT -> recompute: none|selective|full  (+ activation_recompute_text: TEXT)
    zero_fsdp_mode: TEXT       -> sharding: none|zero1|zero2|fsdp|hsdp [+ sharding_mode: MODE for
                                  FSDP SHARD_GRAD_OP] (+ zero_fsdp_mode_text: TEXT)
    precision: TEXT            -> precision: bf16|fp8|nvfp4 [+ fp8_recipe: R where the text named
                                  one and the record had none] [+ precision_assumed: WHY for fp16 /
                                  "mixed 16-bit", priced as bf16: TEXT itself, the
                                  record's own reason; validate.py adds SAME_PEAK]
                                  (+ precision_text: TEXT)

A text that is exactly the value it maps to (`full`, `none`, `bf16`) is not kept as *_text; a null
stays null under the explicit name (`recompute: null`); a NOT_STATED text leaves the explicit field
out (null: the rule's default, listed as assumed with the text as before). The per-field provenance
keys follow the fields (provenance.activation_recompute -> provenance.recompute, zero_fsdp_mode ->
sharding). The file is edited line by line (comments, quoting and folding of the other lines kept),
then read back and compared with the expected records. Since the 2026-12-07 data hygiene pass
precision_assumed holds the record's own reason only (validate.py adds SAME_PEAK after it, and
refuses a record that repeats it); the script wrote "TEXT: SAME_PEAK" before.

The vocabularies below are copied from planner/validate.py (RECOMPUTE_TERMS, SHARDING_TERMS,
NOT_STATED) and planner/precisions.py (PRECISION_TERMS, SAME_PEAK, leading_term) at 0a3bb8c7, the
commit before the migration, so the script runs without them.

    PYTHONPATH=. python scripts/migrate_record_fields.py tests/data/published_runs*.yaml ...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional

import yaml

NOT_STATED = ("not stated", "not published", "unstated", "unknown", "n/a")
RECOMPUTE_TERMS = {"full": "full", "selective": "selective", "none": "none", "no": "none", "off": "none", "false": "none"}
SHARD_GRAD_OP = "shard_grad_op"
SHARDING_TERMS = {
    "none": "none", "ddp": "none", "no sharding": "none", "no_shard": "none", "fsdp no_shard": "none",
    "zero-0": "none", "zero0": "none",
    "zero-1": "zero1", "zero1": "zero1", "zero stage 1": "zero1", "distributed optimizer": "zero1",
    "zero-2": "zero2", "zero2": "zero2", "zero stage 2": "zero2", "shard_grad_op": SHARD_GRAD_OP, "fsdp shard_grad_op": SHARD_GRAD_OP,
    "zero-3": "fsdp", "zero3": "fsdp", "zero stage 3": "fsdp", "fsdp": "fsdp", "fsdp2": "fsdp", "full_shard": "fsdp",
    "fsdp full_shard": "fsdp", "fsdp full shard": "fsdp", "fsdp2 full shard": "fsdp", "fully sharded data parallel": "fsdp",
    "hsdp": "hsdp", "hybrid_shard": "hsdp", "fsdp hybrid_shard": "hsdp", "hybrid shard": "hsdp", "hybrid sharding": "hsdp",
}
SAME_PEAK = "fp16 and bf16 share the dense tensor-core peak on A100/H100 (hardware_db datasheet figures)"
PRECISION_TERMS = {
    "bf16": ("bf16", None, None), "bfloat16": ("bf16", None, None), "pure bf16": ("bf16", None, None),
    "fp16": ("bf16", None, SAME_PEAK), "float16": ("bf16", None, SAME_PEAK), "mixed 16-bit": ("bf16", None, SAME_PEAK),
    "fp8": ("fp8", None, None), "float8": ("fp8", None, None),
    "fp8 tensorwise": ("fp8", "tensorwise", None), "float8 tensorwise": ("fp8", "tensorwise", None),
    "fp8 current scaling": ("fp8", "tensorwise", None), "fp8-cs": ("fp8", "tensorwise", None),
    "fp8 rowwise": ("fp8", "rowwise", None), "float8 rowwise": ("fp8", "rowwise", None),
    "fp8 delayed": ("fp8", "delayed", None), "fp8 blockwise": ("fp8", "blockwise", None),
    "mxfp8": ("fp8", "mxfp8", None), "fp8 mxfp8": ("fp8", "mxfp8", None), "fp8-mx": ("fp8", "mxfp8", None),
    "mxfp8_cublas": ("fp8", "mxfp8", None), "mxfp8_cublas_rceil": ("fp8", "mxfp8", None),
    "nvfp4": ("nvfp4", "nvfp4", None),
}


def leading_term(text: str, terms) -> Optional[str]:
    t = " ".join(str(text).strip().lower().split())
    best = None
    for term in terms:
        if t.startswith(term) and (len(t) == len(term) or not re.match(r"[a-z0-9_]", t[len(term)])):
            if best is None or len(term) > len(best):
                best = term
    return best


def _term(rec: dict, key: str, terms) -> tuple[bool, Optional[str]]:
    """(key present, term or None for null / NOT_STATED); raises for text with no term."""
    if key not in rec:
        return False, None
    text = rec[key]
    if text is None:
        return True, None
    term = leading_term(text, list(terms) + list(NOT_STATED))
    if term is None:
        raise SystemExit(f"record {rec['id']}: {key} {text!r} starts with no term (the old rule refused it too)")
    return True, None if term in NOT_STATED else term


def _no_reshard_mode(rec: dict) -> str:
    from planner.catalog import load_stack

    stack = load_stack(rec.get("stack") or "megatron")
    runs = stack.runs.sharding if stack.runs is not None else []
    modes = [m.name for m in runs if m.level == "fsdp" and m.reshard_after_forward is False]
    if not modes:
        raise SystemExit(f"record {rec['id']}: SHARD_GRAD_OP on stack {stack.name}, which has no such mode (skipped today)")
    return modes[0]


def new_fields(rec: dict) -> dict:
    """old key -> (list of (new key, value) written in its place, text kept or None)."""
    out = {}
    has, term = _term(rec, "activation_recompute", RECOMPUTE_TERMS)
    if has:
        text = rec["activation_recompute"]
        value = RECOMPUTE_TERMS[term] if term is not None else None
        new = [("recompute", value)] if (value is not None or text is None) else []
        keep = text is not None and text.strip().lower() != (value or "")
        out["activation_recompute"] = (new, "activation_recompute_text" if keep else None)
    has, term = _term(rec, "zero_fsdp_mode", SHARDING_TERMS)
    if has:
        text = rec["zero_fsdp_mode"]
        value = SHARDING_TERMS[term] if term is not None else None
        new = []
        if value == SHARD_GRAD_OP:
            new = [("sharding", "fsdp"), ("sharding_mode", _no_reshard_mode(rec))]
        elif value is not None or text is None:
            new = [("sharding", value)]
        keep = text is not None and text.strip().lower() != (value or "")
        out["zero_fsdp_mode"] = (new, "zero_fsdp_mode_text" if keep else None)
    has, term = _term(rec, "precision", PRECISION_TERMS)
    if has:
        text = rec["precision"]
        new = []
        if term is not None:
            prec, recipe, why = PRECISION_TERMS[term]
            new.append(("precision", prec))
            if recipe is not None and rec.get("fp8_recipe") is None:
                new.append(("fp8_recipe", recipe))
            if why is not None:  # the record's own reason: validate._precision adds SAME_PEAK (why) after it
                new.append(("precision_assumed", text))
            keep = text.strip().lower() != prec
        elif text is None:
            new, keep = [("precision", None)], False
        else:
            keep = True
        out["precision"] = (new, "precision_text" if keep else None)
    return out


PROVENANCE_RENAME = {"activation_recompute": "recompute", "zero_fsdp_mode": "sharding"}


def _scalar_line(key: str, value, indent: str = "  ") -> str:
    text = yaml.safe_dump({key: value}, width=10**9, allow_unicode=True, sort_keys=False)
    assert text.count("\n") == 1, text
    return indent + text


def migrate(path: Path) -> int:
    records = yaml.safe_load(path.read_text())
    lines = path.read_text().splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.startswith("- ")]
    assert len(starts) == len(records), (path, len(starts), len(records))
    plans = [new_fields(r) for r in records]
    out: list[str] = lines[:starts[0]]
    for k, (s, rec, plan) in enumerate(zip(starts, records, plans)):
        e = starts[k + 1] if k + 1 < len(starts) else len(lines)
        in_prov = False
        for ln in lines[s:e]:
            if ln.startswith("  provenance:"):
                in_prov = True
            elif re.match(r"^  \S", ln) or ln.startswith("- "):
                in_prov = False
            m = re.match(r"^(- |  )([a-z0-9_]+):(.*)$", ln, re.S)
            if m and m.group(2) in plan:
                lead, key, rest = m.groups()
                new, text_key = plan[key]
                pre = [_scalar_line(n, v) for n, v in new]
                if lead == "- ":  # the record's first key (never one of these in the files)
                    raise SystemExit(f"{path}: record {rec['id']} starts with {key}")
                out.extend(pre)
                if text_key is not None:
                    out.append(f"  {text_key}:{rest}")
                else:
                    out.append("")  # dropped: the value is the explicit field's
                    # continuation lines of a dropped value: none in practice (exact-term texts are one word)
                continue
            pm = re.match(r"^    ([a-z0-9_]+):(.*)$", ln, re.S)
            if in_prov and pm and pm.group(1) in PROVENANCE_RENAME:
                out.append(f"    {PROVENANCE_RENAME[pm.group(1)]}:{pm.group(2)}")
                continue
            out.append(ln)
    path.write_text("".join(out))
    # read back: the records must be the old ones with exactly the planned changes
    got = yaml.safe_load(path.read_text())
    for rec, plan, new_rec in zip(records, plans, got):
        want = dict(rec)
        for key, (new, text_key) in plan.items():
            text = want.pop(key)
            for n, v in new:
                want[n] = v
            if text_key is not None:
                want[text_key] = text
        if "provenance" in want:
            want["provenance"] = {PROVENANCE_RENAME.get(k, k): v for k, v in want["provenance"].items()}
        assert want == new_rec, (path, rec["id"], {k: (want.get(k), new_rec.get(k)) for k in set(want) | set(new_rec)
                                                   if want.get(k) != new_rec.get(k)})
    return len(records)


if __name__ == "__main__":
    for f in sys.argv[1:]:
        print(f, migrate(Path(f)), "records")
