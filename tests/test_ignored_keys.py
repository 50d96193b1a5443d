"""The readers' "ignored" lists, checked by changing what they list (tests/ignored_keys.py).

A key a reader lists as ignored (no effect on memory or step time), changed or removed alone, prices to the same plan;
a key it does not list, its value changed, moves a figure, is refused, or is said (a line of the four lists). The
default run takes one shipped config per reader, at most LIMIT changes each way (a few seconds a reader); the whole
pass over every shipped config is `python -m pytest -m fuzz tests/test_ignored_keys.py`, and over the fuzz harness'
trainer seeds too `PYTHONPATH=. python scripts/fuzz.py --ignored-keys`.
"""

from __future__ import annotations

import pytest

import ignored_keys as ik
from planner.trainers.report import listed

LIMIT = 16  # changes per direction and config in the default run

# one shipped config per reader (the format its reader reports)
PER_READER = {
    "deepspeed": "ds_config_zero3.json",
    "torchtitan": "llama3_8b.toml",
    "megatron": "train_llama3_8b_h100_fp8.sh",
    "megatron-deepspeed": "run_deepspeed_example.sh",
    "megatron-bridge": "bridge_gpt_oss_120b_h100.sh",
    "torchtitan-0.3": "run_train_8b.sh",
}

# findings the check makes that are not fixed, each with why: (case, key, what) -> reason. Empty: every finding of the
# shipped configs is fixed (the full pass, -m fuzz, asserts the same over all of them).
KNOWN: dict[tuple[str, str, str], str] = {}


def _cases(names=None) -> list[ik.Case]:
    cases = ik.shipped_cases()
    return [c for c in cases if names is None or c.name in names]


def _found(tally: ik.Tally) -> set:
    return {(f.case, f.key, f.what) for f in tally.findings}


@pytest.mark.parametrize("reader", sorted(PER_READER))
def test_each_reader_says_what_it_ignores(reader):
    (case,) = _cases({PER_READER[reader]})
    tally = ik.run([case], limit=LIMIT)
    assert tally.tried >= 2, "the check changed nothing: it would pass whatever the reader says"
    found = _found(tally)
    known = {k for k in KNOWN if k[0] == case.name}
    assert found <= known, "\n".join(str(f) for f in tally.findings if (f.case, f.key, f.what) not in known)


@pytest.mark.fuzz
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.name)
def test_every_shipped_config_says_what_it_ignores(case):
    tally = ik.run([case])
    found = _found(tally)
    known = {k for k in KNOWN if k[0] == case.name}
    assert found == known, "\n".join(map(str, tally.findings))
    assert not [u for u in tally.unmutable if not u[1].startswith("shell line")], tally.unmutable


def test_a_priced_key_listed_ignored_is_found(monkeypatch):
    """A reader that lists a priced key as ignored (the DeepSpeed reader made to list train_micro_batch_size_per_gpu,
    which sets the micro-batch) is caught: its change moves the plan or is refused (train_batch_size 64 = micro x
    accumulation 2 x 8 GPUs no longer holds)."""
    from planner.trainers import deepspeed

    read = deepspeed.read

    def lying(*a, **k):
        cfg = read(*a, **k)
        cfg.ignored.append(listed("ignored", "train_micro_batch_size_per_gpu", 1, "planted"))
        return cfg

    monkeypatch.setattr(deepspeed, "read", lying)
    (case,) = _cases({"ds_config_zero3.json"})
    tally = ik.Tally()
    ik.ignored_findings(case, ik.Pricer(), tally)
    hits = {(f.key, f.what) for f in tally.findings}
    assert ("train_micro_batch_size_per_gpu", "ignored-refused") in hits  # 2 x 8 x 8 = 128 != 64: refused
    assert len(hits) == 1, tally.findings


def test_an_ignored_key_left_unsaid_is_found(monkeypatch):
    """A reader that drops its ignored lines (the DeepSpeed reader made to list nothing ignored) is caught: a change of
    steps_per_print, gradient_clipping or wall_clock_breakdown moves nothing and nothing names it."""
    from planner.trainers import deepspeed

    read = deepspeed.read

    def silent(*a, **k):
        cfg = read(*a, **k)
        cfg.ignored.clear()
        return cfg

    monkeypatch.setattr(deepspeed, "read", silent)
    (case,) = _cases({"ds_config_zero2.json"})
    tally = ik.Tally()
    ik.priced_findings(case, ik.Pricer(), tally)
    silent_keys = {f.key for f in tally.findings if f.what == "priced-silent"}
    assert {"steps_per_print", "gradient_clipping", "wall_clock_breakdown", "optimizer.params.lr"} <= silent_keys


def test_changed_values_keep_the_type():
    assert ik.changed_values("--lr", 3e-4) == [6e-4]
    assert ik.changed_values("--train-iters", 0) == [1]
    assert ik.changed_values("metrics.enable_tensorboard", True) == [False]
    assert ik.changed_values("--lr-decay-style", "cosine") == ["constant"]
    assert ik.changed_values("--save", "checkpoints/x") == ["checkpoints/x_x"]
    assert ik.changed_values("--split", "98,2,0") == ["949,50,1"]
    assert ik.changed_values("--use-mcore-models", None) == []
    assert ik.changed_values("optimizer", {"type": "AdamW", "params": {"lr": 1.0}}) == [
        {"type": "AdamW_x", "params": {"lr": 1.0}}, {"type": "AdamW", "params": {"lr": 2.0}}]


def test_flag_variants_spell_the_flag_as_the_script_does():
    text = 'ARGS=(\n    --lr 3e-4\n    "--fp8-format hybrid"\n    --bf16\n)\nrun --lr=$LR\n'
    got = dict(ik.flag_variants(text, "--lr", 3e-4))
    assert got["--lr 0.0006"] == 'ARGS=(\n    --lr 0.0006\n    "--fp8-format hybrid"\n    --bf16\n)\nrun --lr 0.0006\n'
    assert got["--lr removed"] == 'ARGS=(\n    \n    "--fp8-format hybrid"\n    --bf16\n)\nrun \n'
    got = dict(ik.flag_variants(text, "--fp8-format", "hybrid"))
    assert got["--fp8-format e4m3"] == text.replace("hybrid", "e4m3")
    assert dict(ik.flag_variants(text, "--bf16", True)) == {"--bf16 removed": text.replace("--bf16", "")}
