"""The Megatron-DeepSpeed forks' fused scale-mask-softmax: its key limit per fork, the unfused path's time by the
softmax dtype, and --no-masked-softmax-fusion (issues 21, 22).

Each fork's eager core attention builds FusedScaleMaskSoftmax, which takes its fused kernel only up to a key length:
  microsoft/Megatron-DeepSpeed @f4157bea megatron/model/fused_softmax.py is_kernel_available l. 152-172: 16 < sk <= 4096
  (since the fork merged Megatron-LM 7a77abd9, 2022-01-12); the 2021 fork b56b50bb fused_softmax.py l. 132-133:
  16 < sk <= 2048; BigScience's @497aa1bf is_kernel_available l. 165-184: 16 < sk <= 4096
  (stack kernels.score_softmax_max_keys). Beyond it, or at every length with --no-masked-softmax-fusion (store_false,
  dest masked_softmax_fusion, the condition's first term: @f4157bea megatron/arguments.py l. 899-903), the torch path
  forward_torch_softmax (@f4157bea l. 192-207). Bytes a score element (stack kernels, sources there):
  - fused causal kernel: 3 forward (read half the row 2 x 1/2, write 2), 4 backward;
  - torch path, softmax_in_fp32 (the job's attention_softmax_in_fp32; query-key layer scaling, on by default, forces
    it and adds the scale multiply): .float() 2 + 4, * scale 4 + 4, masked_fill_ 4 + 1 + 4, softmax 4 + 4, cast back
    4 + 2 = 37 forward; 6 + 12 + 9 + 8 + 6 = 41 backward;
  - torch path in the 16-bit dtype (attention_softmax_in_fp32 false; scale None, l. 139-141 assert): masked_fill_
    2 + 1 + 2, softmax 2 + 2 = 9 forward; softmax backward 2 + 2 + 2, masked_fill backward 2 + 1 + 2 = 11.
Each timed at the streaming rate (H100 SXM: 3.35 TB/s x HBM_EFFICIENCY 0.90) over the score elements."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlannerError
from tests.conftest import explain_job

DATA = Path(__file__).parent / "data" / "trainer_configs"
MDS = DATA / "run_deepspeed_example.sh"
# Megatron's GPT 1.7B: 24 layers, 24 heads (tp 1); one micro-batch of one sequence a step (global 8 over dp 8)
GPT = dict(model="megatron-gpt-1.7b", gpus=8, stack="megatron-deepspeed", sharding="zero1", tp=1, pp=1, micro_batch=1,
           global_batch=8, recompute="none", attention="eager")
H100_HBM = 3.35e12 * 0.90  # hardware_db h100-sxm hbm_TBps x planner/efficiencies.py HBM_EFFICIENCY
LAYERS, HEADS = 24, 24


def _softmax_s(seq: int, per_element: float) -> float:
    """The step's softmax seconds by hand: layers x (1 x heads x seq^2) score elements x (forward + backward bytes) over
    the streaming rate."""
    return LAYERS * HEADS * seq * seq * per_element / H100_HBM


@pytest.mark.parametrize("stack,seq,fields,per_element", [
    ("megatron-deepspeed", 2048, {}, 3 + 4),  # fused
    ("megatron-deepspeed", 4096, {}, 3 + 4),  # fused up to 4,096 keys on microsoft's fork (was priced 37 + 41)
    ("megatron-deepspeed", 8192, {}, 37 + 41),  # beyond: the fp32 torch path with the scale multiply
    ("megatron-deepspeed", 8192, dict(attention_softmax_in_fp32=False), 9 + 11),  # in the 16-bit dtype
    ("megatron-deepspeed", 2048, dict(masked_softmax_fusion=False), 37 + 41),  # the fusion off: torch path at 2,048
    ("megatron-deepspeed", 2048, dict(masked_softmax_fusion=False, attention_softmax_in_fp32=False), 9 + 11),
    ("megatron-deepspeed-2021", 4096, {}, 37 + 41),  # the 2021 fork fuses up to 2,048 only
    ("megatron-deepspeed-2021", 2048, dict(masked_softmax_fusion=False), 37 + 41),
    ("megatron-deepspeed-bigscience", 4096, {}, 3 + 4),
    ("megatron-deepspeed-bigscience", 2048, dict(masked_softmax_fusion=False, attention_softmax_in_fp32=False), 9 + 11),
])
def test_softmax_seconds_by_hand(stack, seq, fields, per_element):
    """E.g. microsoft's fork at 2,048 keys with --no-masked-softmax-fusion: 24 x 24 x 2,048^2 x 78 B / 3.015 TB/s =
    0.06250 s; with --no-query-key-layer-scaling too (the 16-bit path) 24 x 24 x 2,048^2 x 20 B / 3.015 TB/s =
    0.01603 s; fused 0.005609 s."""
    t = explain_job(**dict(GPT, stack=stack, seq_len=seq, **fields))[3]["time"]
    assert t["eager_core_softmax_s"] == pytest.approx(_softmax_s(seq, per_element), rel=1e-9)


def test_softmax_seconds_figures():
    """The docstring's figures, so the formula above is checked against numbers derived on paper."""
    assert _softmax_s(2048, 78) == pytest.approx(0.062501, rel=1e-4)
    assert _softmax_s(2048, 20) == pytest.approx(0.016026, rel=1e-4)
    assert _softmax_s(2048, 7) == pytest.approx(0.0056091, rel=1e-4)


@pytest.mark.parametrize("stack", ["megatron-deepspeed", "megatron-deepspeed-2021", "megatron-deepspeed-bigscience"])
def test_fusion_off_memory_by_hand(stack):
    """--no-masked-softmax-fusion at 2,048 keys: the torch softmax saves its fp32 output, 4 - 2 = 2 B a score element
    beyond the 16-bit scores (memory.py [sm]): 24 x 24 x 2,048^2 x 2 = 4,831,838,208 B more on the (only) stage; in
    the 16-bit dtype (attention_softmax_in_fp32 false) it saves a 16-bit output, the same bytes as the fused kernel."""
    def act(**f):
        return explain_job(**dict(GPT, stack=stack, seq_len=2048, **f))[3]["memory"]["stages"]["first"]["activations_bytes"]

    fused = act()
    assert act(masked_softmax_fusion=False) - fused == LAYERS * HEADS * 2048 * 2048 * 2 == 4_831_838_208
    assert act(masked_softmax_fusion=False, attention_softmax_in_fp32=False) == fused


def test_megatron_still_needs_its_local_core():
    """Megatron-Core reads masked_softmax_fusion in its own DotProductAttention only (stack megatron's runs.attention
    has no eager_softmax_fusion_switch): refused without transformer_impl local, as before."""
    with pytest.raises(PlannerError, match="masked_softmax_fusion false without Megatron-Core's local core attention"):
        explain_job(**dict(GPT, stack="megatron", sharding="none", seq_len=2048, masked_softmax_fusion=False))


def _script(tmp_path, flags: str) -> Path:
    text = MDS.read_text()
    old = "    --fp16 \\\n"
    assert old in text
    p = tmp_path / "run.sh"
    p.write_text(text.replace(old, old + "".join(f"    {f} \\\n" for f in flags.split())))
    return p


def test_reader_reads_the_flag(tmp_path):
    """--no-masked-softmax-fusion in a Megatron-DeepSpeed script: the job's masked_softmax_fusion false (was listed as
    ignored, 'read only by Megatron-Core's own DotProductAttention'); under --use-flash-attn-v2 (no CoreAttention)
    listed as ignored, naming the fork's lines."""
    from planner.trainers import load_trainer_config

    cfg = load_trainer_config(_script(tmp_path, "--no-masked-softmax-fusion"), gpus=8)
    assert cfg.job["attention"] == "eager" and cfg.job["masked_softmax_fusion"] is False
    assert not any("masked-softmax" in str(x) for x in cfg.ignored + cfg.not_modelled)
    flash = load_trainer_config(_script(tmp_path, "--use-flash-attn-v2 --no-masked-softmax-fusion"), gpus=8)
    assert flash.job["attention"] == "flash" and "masked_softmax_fusion" not in flash.job
    ig = [str(x) for x in flash.ignored if "masked-softmax" in str(x)]
    assert len(ig) == 1 and ig[0].startswith("--no-masked-softmax-fusion (read by the eager core attention's softmax "
                                             "only (microsoft/Megatron-DeepSpeed @f4157bea megatron/arguments.py l. 899-903")


def test_bloom_abort_flag_with_the_fusion_off(tmp_path):
    """BLOOM's tr11 passes --abort-on-unmet-fused-kernel-constraints: with --no-masked-softmax-fusion BigScience's
    initialize.py l. 200-206 exits at start-up (args.masked_softmax_fusion false): refused, as before the flag moved to
    the fork's own reader."""
    from planner.trainers import load_trainer_config

    bloom = DATA / "tr11-176B-ml.slurm"
    text = bloom.read_text()
    old = "    --deepspeed-activation-checkpointing"
    assert old in text
    p = tmp_path / "tr11.slurm"
    p.write_text(text.replace(old, "    --no-masked-softmax-fusion \\\n" + old, 1))
    with pytest.raises(PlannerError, match="fused softmax's constraints"):
        load_trainer_config(p, gpus=384, hardware="a100-sxm-80gb")


@pytest.mark.parametrize("stack,attention", [
    ("megatron-deepspeed", "eager"), ("megatron-deepspeed", "flash"),  # only @f4157bea has FlashAttention (runs.attention)
    ("megatron-deepspeed-2021", "eager"), ("megatron-deepspeed-bigscience", "eager"),
])
def test_export_round_trip(stack, attention):
    """An eager plan with masked_softmax_fusion false writes --no-masked-softmax-fusion (each fork's arguments.py has
    it) and reads back as the same plan and memory; a flash plan's false is the same plan (the flag does nothing
    under a FlashAttention kernel): nothing written. The DeepSpeed JSON has no key for it: refused on the eager plan."""
    from planner.cli.export import check_readback
    from planner.trainers.export import export_plan

    row = explain_job(**dict(GPT, stack=stack, seq_len=2048, attention=attention, masked_softmax_fusion=False))[3]
    text, _ = export_plan(row["plan"], "megatron-deepspeed")
    assert ("--no-masked-softmax-fusion" in text) == (attention == "eager")
    check_readback(row, "megatron-deepspeed", text)  # raises where the plan or its memory reads back otherwise
    if attention == "eager" and stack == "megatron-deepspeed":
        with pytest.raises(PlannerError, match="masked_softmax_fusion False: set in the model code"):
            export_plan(row["plan"], "deepspeed")


@pytest.mark.parametrize("stack,seq,fields,warned", [
    ("megatron-deepspeed-bigscience", 4096, {}, True),  # 2,048 < 4,096 <= 4,096: the gate passes, the causal kernel asserts
    ("megatron-deepspeed-bigscience", 2052, {}, True),
    ("megatron-deepspeed-bigscience", 2048, {}, False),  # the kernel takes it
    ("megatron-deepspeed-bigscience", 8192, {}, False),  # beyond the gate: the torch softmax
    ("megatron-deepspeed-bigscience", 4096, dict(masked_softmax_fusion=False), False),
    ("megatron-deepspeed", 4096, {}, False),  # @f4157bea's causal kernel takes up to 16,384 (its .cu l. 26)
])
def test_bigscience_causal_kernel_assert_warned(stack, seq, fields, warned):
    """BigScience's @497aa1bf fused-softmax gate passes 16 < sk <= 4096 (fused_softmax.py l. 165-184) and hands GPT's
    causal layers to ScaledUpperTriangMaskedSoftmax, whose CUDA forward asserts seq_len <= 2048
    (scaled_upper_triang_masked_softmax_cuda.cu l. 38; stack kernels score_softmax_causal_max_keys): a job between the
    two with the fusion on is warned about (not refused: the gate's divisibility terms are not modelled)."""
    from planner.plan import resolve
    from planner.schema import Job

    w = resolve(Job(**dict(GPT, stack=stack, seq_len=seq, **fields)))[2]
    said = [x for x in w if "its causal kernel asserts" in str(x)]
    assert len(said) == int(warned)
    if warned:
        assert said[0].startswith(f"attention eager at {seq:,} keys with the fused softmax: stack {stack}'s fused-softmax "
                                  "gate takes up to 4,096 keys but its causal kernel asserts 2,048")
