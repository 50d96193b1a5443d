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


def test_a_priced_key_listed_ignored_is_found(monkeypatch, tmp_path):
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
    ik.ignored_findings(case, ik.Pricer(tmp_path), tally)
    hits = {(f.key, f.what) for f in tally.findings}
    assert ("train_micro_batch_size_per_gpu", "ignored-refused") in hits  # 2 x 8 x 8 = 128 != 64: refused
    assert len(hits) == 1, tally.findings


def test_an_ignored_key_left_unsaid_is_found(monkeypatch, tmp_path):
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
    ik.priced_findings(case, ik.Pricer(tmp_path), tally)
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


def _read_text(tmp_path, name: str, text: str, **kw):
    from planner.trainers import load_trainer_config

    p = tmp_path / name
    p.write_text(text)
    return load_trainer_config(p, **kw)


def test_a_script_without_swiglu_defines_a_plain_mlp(tmp_path):
    """The finding behind megatron.py's absent-flag shape entries: train_llama3_8b.sh without --swiglu read as Llama 3
    8B, gated MLP and all. Megatron builds a plain MLP without it (gated_linear_unit default False,
    transformer_config.py @d98e8a64 l. 221): the flags' own model, h x ffn x L = 4,096 x 14,336 x 32 = 1,879,048,192
    parameters fewer than Llama 3 8B's (the gate's projection)."""
    from planner.catalog import load_model
    from planner.params import count_params

    text = (ik.CONFIGS / "train_llama3_8b.sh").read_text()
    assert _read_text(tmp_path, "a.sh", text).job["model"] == "llama3-8b"
    cfg = _read_text(tmp_path, "b.sh", text.replace("--swiglu", ""))
    assert cfg.job["model"] != "llama3-8b"
    spec = load_model(cfg.job["model"])
    assert spec.gated_mlp is False
    assert count_params(load_model("llama3-8b")).total - count_params(spec).total == 4096 * 14336 * 32
    # with --model the flag's absence is a shape --model replaces, said so
    cfg = _read_text(tmp_path, "c.sh", text.replace("--swiglu", ""), model="llama3-8b")
    assert any("(no --swiglu: a plain MLP)" in a for a in cfg.assumed if a.startswith("model=llama3-8b: --model replaces"))


def test_a_catalog_model_says_which_tokenizer_its_vocab_size_stands_for(tmp_path):
    """train_llama3_8b.sh with --tokenizer-type GPT2BPETokenizer (a tokenizer that reads its files, not --vocab-size)
    still matches Llama 3 8B by --vocab-size 128,256, and says so; with NullTokenizer, which reads the flag, nothing to
    say."""
    text = (ik.CONFIGS / "train_llama3_8b.sh").read_text()
    assert not any(a.startswith("--vocab-size") for a in _read_text(tmp_path, "a.sh", text).assumed)
    cfg = _read_text(tmp_path, "b.sh", text.replace("NullTokenizer", "GPT2BPETokenizer"))
    assert cfg.job["model"] == "llama3-8b"
    assert ("--vocab-size=128256: taken as the size of --tokenizer-type GPT2BPETokenizer, whose files the planner does "
            "not read (Megatron hands --vocab-size to NullTokenizer and TikTokenizer only)") in cfg.assumed


def _bridge_70b_fsdp_text() -> str:
    """The Megatron-Bridge launch `export` writes for Llama 3 70B on 64 GPUs at TP 8, PP 8 under Megatron-FSDP (the
    fuzz harness' bridge-70b-fsdp.sh, a fit row's plan): every override the export writes, a CommOverlapConfig's
    recipe, bf16 with the fp8 fields stated."""
    import tempfile
    from pathlib import Path

    from typer.testing import CliRunner

    from planner.cli import app

    out = Path(tempfile.mkdtemp()) / "b.sh"
    r = CliRunner().invoke(app, ["export", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "8",
                                 "--sharding", "fsdp", "--stack", "megatron-bridge", "--format", "megatron-bridge",
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text()


def test_bridge_overrides_the_run_does_not_read_are_listed(tmp_path):
    """The Bridge reader's findings (megatron_bridge._mp_unread, _stated_unread), fixed: each stated override the run
    replaces or never reads is listed as ignored, fp32 is said, fp8 weights without fp8 refused."""
    from planner.errors import PlannerError

    text = _bridge_70b_fsdp_text()
    assert "mixed_precision.fp8=null" in text and "mixed_precision.fp8_recipe=tensorwise" in text
    cfg = _read_text(tmp_path, "a.sh", text)
    ig = {n.entries[0][0]: str(n) for n in cfg.ignored}
    assert ig["mixed_precision.fp8_recipe"] == ("mixed_precision.fp8_recipe=tensorwise (mixed_precision.fp8 null: no "
                                                "fp8 recipe is built, Megatron-Core reads the field only under fp8)")
    assert ig["model.overlap_p2p_comm"].startswith("model.overlap_p2p_comm=false (the CommOverlapConfig replaces it")
    assert ig["model.cross_entropy_fusion_impl"] == ("model.cross_entropy_fusion_impl=native "
                                                     "(model.cross_entropy_loss_fusion false: the unfused loss)")
    cfg = _read_text(tmp_path, "b.sh", text.replace("ddp.use_megatron_fsdp=true", "ddp.use_megatron_fsdp=false"))
    assert "ddp.use_megatron_fsdp=false (dist.use_megatron_fsdp true turns both on (training/config.py l. 1537-1540))" \
        in cfg.ignored
    cfg = _read_text(tmp_path, "c.sh", text.replace("mixed_precision.bf16=true", "mixed_precision.bf16=false"))
    assert "precision=bf16: mixed_precision bf16 and fp16 false: fp32 training, not modelled (priced as bf16)" \
        in cfg.assumed
    with pytest.raises(PlannerError, match="fp8 parameters without fp8 training"):
        _read_text(tmp_path, "d.sh", text.replace("mixed_precision.fp8_param_gather=false",
                                                  "mixed_precision.fp8_param_gather=true"))
    # and the check finds nothing left in it (6 changes each way here; all of them under scripts/fuzz.py --ignored-keys)
    tally = ik.run([ik.Case("bridge-70b-fsdp.sh", text.encode(), ".sh", {})], limit=6)
    assert tally.tried == 12 and not tally.findings, "\n".join(map(str, tally.findings))


def test_bridge_override_lines_outside_the_launch_line_are_refused(tmp_path):
    """The check over a mutated fuzz seed (newest-fields bridge-8b.sh, mutated with
    random.Random("newest-fields:189:ign"): tests/data/fuzz_issue24/ignored-bridge-189-0.sh):
    `train.global_batch_size=2048 \\` moved above the torchrun line and a blank line after
    `train.micro_batch_size=1 \\`, which ends the launch line there. bash runs neither
    `train.global_batch_size=2048 torchrun ...` (a dotted name is no assignment: a command name) nor the override lines
    after the blank one; the reader priced the launch line's words and the recipe's global batch 512, and the 29 keys
    after the blank line moved nothing and said nothing (the check's two findings, train.global_batch_size and
    model.vocab_size changed). Now refused (megatron_bridge._stray_overrides), naming the first such line."""
    from planner.errors import PlannerError

    text = (ik.DATA / "fuzz_issue24" / "ignored-bridge-189-0.sh").read_text()
    with pytest.raises(PlannerError, match=r"line 7: train\.global_batch_size=2048 starts a command") as e:
        _read_text(tmp_path, "a.sh", text)
    assert "each line but the last ending with" in e.value.hint
    lines = text.splitlines()
    moved = lines[:6] + lines[7:19] + [lines[6]] + lines[19:]  # the override back on the launch line, the blank kept
    with pytest.raises(PlannerError, match=r"line 21: model\.vocab_size=128256 starts a command"):
        _read_text(tmp_path, "b.sh", "\n".join(moved) + "\n")
    whole = [ln for ln in moved if ln.strip()]  # and the blank line gone: one launch line, every override read
    cfg = _read_text(tmp_path, "c.sh", "\n".join(whole) + "\n")
    assert cfg.job["global_batch"] == 2048 and cfg.job["micro_batch"] == 1 and cfg.job["tp"] == 4
    tally = ik.run([ik.Case("c.sh", ("\n".join(whole) + "\n").encode(), ".sh", {})], limit=4)
    assert tally.tried == 8 and not tally.findings, "\n".join(map(str, tally.findings))


def test_mutated_cases_reproduce_the_seed_189_input(tmp_path):
    """scripts/fuzz.py --ignored-keys --mutate 5 --seed 189 checks the input above: ignored_keys.mutated_cases draws
    it again byte for byte (newest-fields' first input at seed 189), read with the kind's options (none: a launch)."""
    cases = ik.mutated_cases(tmp_path, 189, 5)
    assert len(cases) == 5 * len(ik.TRAINER_KINDS)
    case = next(c for c in cases if c.name == "newest-fields:bridge-8b.sh:189:0")
    assert case.data == (ik.DATA / "fuzz_issue24" / "ignored-bridge-189-0.sh").read_bytes()
    assert case.suffix == ".sh" and case.options == {}
    fp8 = next(c for c in ik.fuzz_cases(tmp_path / "seeds") if c.name == "precision-flags:fp8_tp2_pp2.args")
    assert fp8.options == {"gpus": 8, "trainer_date": "2026-07-02"}  # read as its fuzz command line reads it


def test_an_ignored_flag_with_argparse_choices_changes_to_another_choice():
    """Since the argparse merge (75a9be2) the Megatron reader refuses a value outside a flag's argparse choices, as
    Megatron-LM does (megatron_argparse.DEFINITIONS, @d98e8a64): the check's change of an ignored flag with choices is
    another of its choices (the first pass after the merge, scripts/fuzz.py --ignored-keys --mutate 10 --seed 196,
    reported `--ckpt-format torch_dist_x` and 31 like it as refused ignored keys); a flag without choices keeps the
    '_x' change, and a number among an int flag's choices becomes another of them, not its double."""
    assert ik.changed_values("--ckpt-format", "torch_dist") == ["torch"]
    assert ik.changed_values("--distributed-backend", "nccl") == ["gloo"]
    assert ik.changed_values("--dist-ckpt-strictness", "log_all") == ["assume_ok_unexpected"]
    assert ik.changed_values("--timing-log-level", 2) == [0]
    assert ik.changed_values("--timing-log-level", "2") == ["0"]  # a number written as a string
    assert ik.changed_values("--data-cache-path", "/cache") == ["/cache_x"]
    assert ik.changed_values("--lr-decay-style", "cosine") == ["constant"]  # CHOICES first, as before


def test_an_unquoted_array_s_empty_element_is_no_word(tmp_path):
    """The ignored-keys check of the shipped train_llama3_8b_h100_fp8.sh (scripts/fuzz.py --ignored-keys, seed 196):
    `--split` removed leaves `""` in the array DATA_ARGS_LIST, expanded unquoted (`${DATA_ARGS_LIST[@]}`) on the
    torchrun line (tests/data/fuzz_issue24/ignored-megatron-split-removed.sh). bash drops an unquoted empty element
    (null argument removal; bash 5.2.15: A=("--tiktoken-pattern v2" "" "--num-layers 4"); printf '[%s]' ${A[@]} gives
    [--tiktoken-pattern][v2][--num-layers][4]); the reader kept it as a word '' that became part of the flag before
    it, `--tiktoken-pattern 'v2 '`, refused as an invalid choice. Now the file prices as the shipped one does
    (`--split` is listed ignored)."""
    head = ("#!/bin/bash\nA=(\n  \"--tiktoken-pattern v2\"\n  \"\"\n  \"   \"\n  \"--num-layers 4\"\n)\n"
            "torchrun pretrain_gpt.py ${A[@]} --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
            "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--tokenizer-type NullTokenizer --vocab-size 32000 --ffn-hidden-size 2048\n")
    cfg = _read_text(tmp_path, "a.sh", head, gpus=8)
    import yaml

    assert yaml.safe_load(open(cfg.job["model"]))["num_layers"] == 4  # the element after the empty ones read
    assert any(str(x).startswith("--tiktoken-pattern=v2 ") for x in cfg.ignored)
    shipped = next(c for c in ik.shipped_cases() if c.name == "train_llama3_8b_h100_fp8.sh")
    pricer = ik.Pricer()
    try:
        base = pricer.read(shipped)
        got = pricer.read(shipped, (ik.DATA / "fuzz_issue24" / "ignored-megatron-split-removed.sh").read_bytes())
    finally:
        pricer.close()
    assert base.figures is not None and got.refused is None and got.crashed is None
    assert ik.differ(base.figures, got.figures) is None


@pytest.mark.parametrize("kind", ["seq_aux_loss", "global_aux_loss", "none"])
def test_a_balancing_type_priced_as_aux_loss_is_said(kind):
    """The ignored-keys check with the argparse choices (seeds 198, 199): the fuzz seed newest-fields muon.args (the CI
    args file moe__gpt3_moe_mcore_te_ep8_resume_torch_dist_muon, `--moe-router-load-balancing-type aux_loss`, read
    with --gpus 8) changed to seq_aux_loss moved nothing and said nothing. planner/imbalance.py prices aux_loss,
    seq_aux_loss, global_aux_loss and none alike (the aux_loss rule), so the price stays; the reader now lists the type
    as assumed, naming the rule it is priced by (megatron.router_balancing, both Megatron readers)."""
    src = (ik.DATA / "megatron_ci" / "args" / "moe__gpt3_moe_mcore_te_ep8_resume_torch_dist_muon__dev_dgx_h100.args")
    text = src.read_text()
    assert "--moe-router-load-balancing-type aux_loss\n" in text
    case = ik.Case("muon.args", text.encode(), ".args", {"gpus": 8})
    changed = text.replace("--moe-router-load-balancing-type aux_loss\n", f"--moe-router-load-balancing-type {kind}\n")
    pricer = ik.Pricer()
    try:
        base, got = pricer.read(case), pricer.read(case, changed.encode())
    finally:
        pricer.close()
    assert base.figures is not None and got.figures is not None
    assert ik.differ(base.figures, got.figures) is None  # priced alike (imbalance.py's aux_loss rule)
    said = [str(a) for a in got.lines["assumed"] if str(a).startswith(f"--moe-router-load-balancing-type {kind}")]
    assert said == [f"--moe-router-load-balancing-type {kind}: priced by planner/imbalance.py's aux_loss rule, which "
                    "prices aux_loss, seq_aux_loss, global_aux_loss and none alike and quantile_balancing as "
                    "aux_loss_free (a per-expert bias); "
                    + ("an auxiliary loss computed where the coefficient is above 0" if kind != "none"
                       else "no auxiliary loss computed")]
    assert not [a for a in base.lines["assumed"] if str(a).startswith("--moe-router-load-balancing-type aux_loss")]
    tally = ik.Tally()
    pricer = ik.Pricer()
    try:
        ik.priced_findings(ik.Case("muon.args", changed.encode(), ".args", {"gpus": 8}), pricer, tally)
    finally:
        pricer.close()
    assert tally.tried > 10 and not tally.findings, "\n".join(map(str, tally.findings))
