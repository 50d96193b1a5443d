"""Megatron-Core's own core attention's softmax (issue 21; job fields masked_softmax_fusion and
attention_softmax_in_fp32; planner/memory.py [sm]). NVIDIA/Megatron-LM @d98e8a64 fused_softmax.py: the fused CUDA
kernel (masked_softmax_fusion, 16 < sk <= 4096: the stack's score_softmax_max_keys) saves its 16-bit output; else
forward_torch_softmax with attention_softmax_in_fp32 casts the scores to fp32 and torch.nn.Softmax saves its fp32
output (PyTorch derivatives.yaml `_softmax`: result): 4 - 2 = 2 B a score element more than the 16-bit scores,
[micro-batch x heads / tp, s, s] a layer, dropped by recompute. Without fp32 (Megatron-LM's argument default) the
torch softmax saves its 16-bit output: nothing more."""

from __future__ import annotations

import pytest

from tests.conftest import assert_one_error, explain_job

S = 2048
LOCAL = dict(model="llama3-8b", gpus=8, tp=1, pp=1, micro_batch=1, global_batch=8, seq_len=S, recompute="none",
             attention="eager", transformer_impl="local", sharding="zero1")
SCORES = 32 * S * S  # Llama 3 8B: 32 heads at tp 1, S x S scores a layer and micro-batch


def _act(**fields):
    return explain_job(**dict(LOCAL, **fields))[3]["memory"]["stages"]["first"]["activations_bytes"]


@pytest.mark.parametrize("fields,extra", [
    (dict(masked_softmax_fusion=False), 2 * SCORES),                                   # fp32 output, 2 B more a score
    (dict(masked_softmax_fusion=False, attention_softmax_in_fp32=True), 2 * SCORES),    # the default said
    (dict(masked_softmax_fusion=False, attention_softmax_in_fp32=False), 0),            # 16-bit torch softmax
    (dict(attention_softmax_in_fp32=False), 0),                                         # the fused kernel runs
    (dict(masked_softmax_fusion=False, recompute="full"), 0),                           # the scores are not kept
])
def test_fp32_softmax_output_by_hand(fields, extra):
    # 32 layers on the one stage, one micro-batch in flight (pp 1): 32 x 32 heads x 2,048^2 x 2 B = 8 GiB
    base = _act(**{k: v for k, v in fields.items() if k == "recompute"})
    assert _act(**fields) - base == 32 * extra


def test_beyond_the_fused_kernels_keys():
    # 8,192 keys > 4,096 (fused_softmax.py is_kernel_available l. 256): the torch softmax runs whatever the switch
    at = dict(seq_len=8192, global_batch=8)
    assert _act(**at) - _act(**at, attention_softmax_in_fp32=False) == 32 * 2 * 32 * 8192 * 8192


def test_fusion_off_runs_the_unfused_softmax_time():
    on = explain_job(**LOCAL)[3]["time"]["step_s"]
    off = explain_job(**dict(LOCAL, masked_softmax_fusion=False))[3]["time"]["step_s"]
    assert off > on  # the stack's unfused figures, 29 / 33 B a score element against the fused kernel's 3 / 4


@pytest.mark.parametrize("fields,needle", [
    (dict(model="llama3-8b", gpus=8, attention="eager", masked_softmax_fusion=False), "without Megatron-Core's local core"),
    (dict(model="llama3-8b", gpus=8, stack="torchtitan", sharding="fsdp", attention_softmax_in_fp32=True),
     "runs no torch softmax"),
])
def test_refused(fields, needle):
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match=needle):
        explain_job(**fields)


UNINSTALL_TE = "tests/data/megatron_ci/args/gpt__gpt3_mcore_tp2_pp2_uninstall_te__lts_dgx_a100.args"


def test_reader_reads_the_softmax_flags():
    # --transformer-impl local, --no-masked-softmax-fusion, --apply-query-key-layer-scaling (which sets fp32)
    from planner.trainers import load_trainer_config

    cfg = load_trainer_config(UNINSTALL_TE, fmt="megatron", gpus=8, hardware="a100-sxm-80gb")
    assert (cfg.job["masked_softmax_fusion"], cfg.job["attention_softmax_in_fp32"]) == (False, True)
    listed = cfg.not_modelled + cfg.unmodelled + cfg.ignored
    assert not any("masked-softmax" in x or "apply-query-key-layer-scaling" in x or "softmax-in-fp32" in x for x in listed)


def test_reader_without_the_fp32_flags(tmp_path):
    from planner.trainers import load_trainer_config

    p = tmp_path / "run.args"
    p.write_text("\n".join(x for x in open(UNINSTALL_TE).read().splitlines() if x != "--apply-query-key-layer-scaling"))
    cfg = load_trainer_config(p, fmt="megatron", gpus=8, hardware="a100-sxm-80gb")
    assert cfg.job["attention_softmax_in_fp32"] is False
    assert any(a.startswith("attention_softmax_in_fp32=false: neither --attention-softmax-in-fp32") for a in cfg.assumed)


def test_reader_with_te_attention_ignores_them(tmp_path):
    from planner.trainers import load_trainer_config
    from tests.test_imbalance import ARGS

    p = tmp_path / "run.args"
    p.write_text(ARGS + " --attention-softmax-in-fp32 --no-masked-softmax-fusion\n")
    cfg = load_trainer_config(p, fmt="megatron", gpus=16, model="mixtral-8x7b")
    assert "masked_softmax_fusion" not in cfg.job and "attention_softmax_in_fp32" not in cfg.job
    assert any(x.startswith("--attention-softmax-in-fp32") for x in cfg.ignored)
    assert any(x.startswith("--no-masked-softmax-fusion") for x in cfg.ignored)


def test_corpus_rows_by_hand():
    # the two uninstall_te rows (TP 2, PP 2, micro-batch 4, 1,024 tokens, 8 heads): the last stage's 6 layers keep one
    # micro-batch's fp32 softmax output beside the 16-bit scores: 6 x 4 x 8 / 2 x 1,024^2 x 2 B = 192 MiB more
    from planner.megatron_ci import report_corpus

    rows = report_corpus("tests/data/megatron_ci/corpus.json", ids=[
        "gpt__gpt3_mcore_tp2_pp2_uninstall_te__dev_dgx_a100", "gpt__gpt3_mcore_tp2_pp2_uninstall_te__lts_dgx_a100"])["rows"]
    for r in rows:
        assert r["skipped"] is None
        # 2,019,205,120 B (was -12.9%), and --deterministic-mode's 32 MiB cuBLAS workspaces, two of 8.125 before
        # (tests/test_megatron_deterministic.py): 2,069,274,624 B; and the row-parallel biases whole on each TP rank
        # (layers/common.py [rb]): h = 512 a layer more of 6 layers at 16 B, +49,152 B: 2,069,323,776 B
        assert r["predicted_bytes"] == 1817878528.0 + 6 * 4 * 4 * 1024 * 1024 * 2 + 2 * (32 - 8.125) * 2**20 \
            + 6 * 512 * 16
        assert r["error"] == pytest.approx(r["predicted_bytes"] / r["measured_bytes"] - 1.0)


@pytest.mark.parametrize("fields", [dict(masked_softmax_fusion=False), dict(attention_softmax_in_fp32=False), {}])
def test_export_reads_back(fields):
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    row = explain_job(**dict(LOCAL, **fields))[3]
    text = export_plan(row["plan"], "megatron")[0]
    assert ("--no-masked-softmax-fusion" in text, "--attention-softmax-in-fp32" in text) == (
        fields.get("masked_softmax_fusion") is False, fields.get("attention_softmax_in_fp32") is not False)
    check_readback(row, "megatron", text)
