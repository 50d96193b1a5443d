"""The training length of a job that gives no --seq-len (issue 24; plan.HF_DEFAULT_SEQ's rule).

A model's context is the context it serves, often extended after pre-training, not the length
it trains at. Gemma 3 27B serves 131,072 tokens (Gemma3TextConfig max_position_embeddings) but
pre-trained on 32K sequences and was scaled to 128K only "at the end of pre-training"
(arXiv:2503.19786 sec. 5.3); before this rule `fit --model gemma3-27b --gpus 64` planned
131,072-token sequences with CP 16. Now: the job's seq_len wins; else the entry's published
pre-training length (model_zoo training.seq_len, cited); else the smaller of 4,096 and the
context, listed as assumed. Trainer configs and run records never take the published length.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.calibrate.gemm import benchmark_shapes
from planner.catalog import list_models, load_model
from planner.plan import DEFAULT_GLOBAL_BATCH_TOKENS, HF_DEFAULT_SEQ, default_seq_len, resolve
from planner.schema import Job, ModelSpec

TRAINER = Path(__file__).parent / "data" / "trainer_configs"

# the main-phase pre-training length each entry cites (model_zoo training.seq_len), from the
# developers' text: Gemma 3 sec. 5.3 "pre-train our models with 32K sequences"; Mixtral sec. 2
# "pretrained ... using a context size of 32k tokens"; Llama 3 sec. 3.4.1 "sequences of 8,192
# tokens" (405B; "similar recipes" and Meta's post for 8B/70B); DeepSeek-V3 sec. 4.2 "4K";
# Kimi K2 sec. 2.5 "4,096-token context window"; Qwen3 sec. 3.2 S1 "4,096 tokens"
PUBLISHED = {"gemma3-27b": 32768, "mixtral-8x7b": 32768, "llama3-8b": 8192, "llama3-70b": 8192,
             "llama3-70b-paper": 8192, "llama3-405b": 8192, "llama3-405b-paper": 8192, "deepseek-v3": 4096,
             "kimi-k2": 4096, "qwen3-30b-a3b": 4096, "qwen3-235b-a22b": 4096}
# entries whose context exceeds 4,096 and whose developers publish no pre-training length (in the
# sources read): they train HF_DEFAULT_SEQ, the context they serve listed beside it
UNPUBLISHED = {"jamba-v0.1": 262144, "llama3.2-1b": 131072, "llama3.2-3b": 131072, "llama4-maverick": 1048576,
               "llama4-scout": 10485760, "mistral-7b": 8192,
               "mixtral-8x22b": 65536, "nemotron-h-56b": 8192, "qwen3-next-80b-a3b": 262144}


def _explain(cli, *args):
    r = cli("explain", *args, "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_gemma3_27b_trains_its_published_32k_not_the_131k_it_serves(cli):
    d = _explain(cli, "--model", "gemma3-27b", "--stack", "megatron-bridge", "--gpus", "64", "--tp", "8")
    assert d["plan"]["seq_len"] == 32768
    assert d["plan"]["global_batch"] == DEFAULT_GLOBAL_BATCH_TOKENS // 32768 == 512  # 16,777,216 / 32,768
    seq = [a for a in d["assumed"] if a.startswith("seq_len=")]
    assert len(seq) == 1 and seq[0].startswith("seq_len=32,768: the published pre-training length")
    assert "arXiv:2503.19786, sec. 5.3 'Enabling long context'" in seq[0] and "131,072 is the context" in seq[0]
    # fit says so too (a note), and no longer splits 131,072-token sequences over CP 16
    r = cli("fit", "--model", "gemma3-27b", "--stack", "megatron-bridge", "--gpus", "64", "--top", "1")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("gemma3-27b on 64 x h100-sxm, global batch 512 x 32,768 tokens,")
    assert "note: gemma3-27b: assumed: seq_len=32,768: the published pre-training length" in r.stderr


def test_a_flag_or_job_field_replaces_the_published_length(cli, tmp_path):
    d = _explain(cli, "--model", "gemma3-27b", "--stack", "megatron-bridge", "--gpus", "64", "--tp", "8", "--seq-len", "131072")
    assert d["plan"]["seq_len"] == 131072 and d["plan"]["global_batch"] == 128
    assert not any(a.startswith("seq_len=") for a in d.get("assumed", []))
    job = tmp_path / "job.yaml"
    job.write_text("model: gemma3-27b\nstack: megatron-bridge\ngpus: 64\ntp: 8\nseq_len: 8192\n", encoding="utf-8")
    r = cli("explain", str(job), "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    d = json.loads(r.stdout)
    assert d["plan"]["seq_len"] == 8192 and not any(a.startswith("seq_len=") for a in d.get("assumed", []))


def test_an_entry_without_a_published_length_trains_4096_and_says_what_it_serves(cli):
    d = _explain(cli, "--model", "mixtral-8x22b", "--gpus", "64", "--ep", "8")
    assert d["plan"]["seq_len"] == 4096 and d["plan"]["global_batch"] == 4096  # 16,777,216 / 4,096
    assert ("seq_len=4,096: the default training length (plan.HF_DEFAULT_SEQ) of a model entry that publishes no "
            "pre-training length (training.seq_len); its max_seq_len 65,536 is the context the model serves") in \
        " ".join(d["assumed"])


def test_every_long_context_entry_cites_its_length_or_gets_the_documented_default(unlisted_stack):
    """The zoo walk: an entry whose max_seq_len exceeds HF_DEFAULT_SEQ either cites training.seq_len
    (a quoted source) and trains it, or trains HF_DEFAULT_SEQ with the default listed as assumed.
    The lists above name every such entry, so a new long-context entry must be placed in one."""
    seen_published, seen_default = {}, {}
    for name in list_models():
        m = load_model(name)
        published = m.training.seq_len if m.training is not None else None
        if published is not None:
            assert "'" in m.training.sources["seq_len"], name  # a quoted passage, not a bare reference
            assert published <= m.max_seq_len
        # a model with a layer kind megatron does not build (Jamba, Llama 4: start-up rule STACK_LAYER_KIND) on
        # megatron's figures from a stack file listing no layer kinds (tests/conftest.py unlisted_stack)
        from planner.catalog import load_stack
        from planner.startup import layer_gaps

        stack = {"stack": unlisted_stack} if layer_gaps(m, load_stack("megatron")) else {}
        settings, plan, _ = resolve(Job(model=name, gpus=1, **stack))
        seq = int(plan.seq)
        lines = list(settings.seq_assumed)
        if published is not None:
            seen_published[name] = seq
            assert seq == published and len(lines) == 1 and "the published pre-training length" in lines[0], name
        elif m.max_seq_len > HF_DEFAULT_SEQ:
            seen_default[name] = m.max_seq_len
            assert seq == HF_DEFAULT_SEQ == default_seq_len(m), name
            assert len(lines) == 1 and f"max_seq_len {m.max_seq_len:,} is the context the model serves" in lines[0], name
        else:  # a context of at most 4,096 is its training length (GPT-3 2,048; Llama 2 4,096)
            assert seq == m.max_seq_len and not lines, name
    assert seen_published == PUBLISHED
    assert seen_default == UNPUBLISHED


def test_a_trainer_config_without_a_length_takes_no_published_one(cli):
    """A DeepSpeed JSON says nothing of the sequence: the default of a job without a recipe (4,096
    for Llama 3 8B, not its published 8,192), listed as assumed; --seq-len replaces it. (Gemma 3 was
    the model here: megatron-deepspeed builds no sliding-window layer, start-up rule STACK_LAYER_KIND; then
    Mixtral 8x7B (published 32,768): this JSON is ZeRO-3, which DeepSpeed-MoE refuses, rule DEEPSPEED_MOE.)"""
    ds = TRAINER / "ds_config_zero3.json"
    r = cli("explain", ds, "--model", "llama3-8b", "--gpus", "8", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["seq_len"] == 4096
    assert "seq_len=4,096: the config gives no sequence length (pass --seq-len)" in r.stderr
    r = cli("explain", ds, "--model", "llama3-8b", "--gpus", "8", "--seq-len", "2048", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["seq_len"] == 2048 and "seq_len=" not in r.stderr


def test_the_published_length_is_cited_and_within_the_context():
    base = load_model("gemma3-27b").model_dump()
    with pytest.raises(ValueError, match="no source for seq_len"):
        ModelSpec(**{**base, "training": {"seq_len": 32768, "sources": {"precision": "x"}}})
    with pytest.raises(ValueError, match=r"training.seq_len \(262,144\) exceeds max_seq_len \(131,072\)"):
        ModelSpec(**{**base, "training": {"seq_len": 262144, "sources": {"seq_len": "x"}}})


def test_gemm_calibration_shapes_default_to_the_planned_length():
    """`calibrate gemm --run` without --seq-len measures the tokens a planned job runs: Gemma 3's
    32,768 per micro-batch (its QKV GEMM, M = 32,768), not the 131,072 it serves."""
    shapes = benchmark_shapes([load_model("gemma3-27b")], [8], [None], [1])
    assert {s.M for s in shapes} == {32768}


def test_planner_models_lists_the_context_and_the_training_length(cli):
    """`planner models` keeps `seq` (the context, max_seq_len) and adds `train_seq`, the length
    a job without --seq-len trains: gemma3-27b serves 131,072 and trains 32,768 (its cited
    training.seq_len); jamba-v0.1 serves 262,144 and, citing none, trains HF_DEFAULT_SEQ."""
    r = cli("models", "--format", "json")
    rows = {m["name"]: m for m in json.loads(r.stdout)}
    assert (rows["gemma3-27b"]["seq"], rows["gemma3-27b"]["train_seq"]) == (131_072, 32_768)
    assert (rows["jamba-v0.1"]["seq"], rows["jamba-v0.1"]["train_seq"]) == (262_144, 4_096)
    assert (rows["llama3-8b"]["seq"], rows["llama3-8b"]["train_seq"]) == (8_192, 8_192)
    assert "train seq" in cli("models").stdout
