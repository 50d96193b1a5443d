"""Megatron-Core's unfused MoE permutation and router paths (--moe-permute-fusion /
--moe-router-fusion off, Megatron-LM's defaults: transformer_config.py @d98e8a64 l. 941-947):
the bytes they move beyond the fused Transformer Engine kernels dispatch_bytes prices
(planner/layers/moe.py unfused_token_terms, unfused_dispatch_bytes), counted by hand from
moe_utils.py @d98e8a64 permute / unpermute / topk_routing_with_score_function."""
from __future__ import annotations

import pytest

from planner.layers import context
from planner.layers.moe import fused_token_terms, unfused_dispatch_bytes, unfused_token_terms
from test_moe import _moe_block, _qwen3

# Qwen3-30B-A3B: h 2048, E 128, k 8; A h = 4,096 B a bf16 token row. int64 L = 8, bool B = 1,
# int32 I = 4, fp32 P = 4.
# permute, forward, per local token (unfused):
#   map transpose 2 E = 256; argsort: arange 8 E = 1,024, histogram E = 128, one pass 18 E = 2,304;
#   % num_tokens 2 L k = 128; probs transpose 2 P E = 1,024; probs gather L k + 2 P k = 64 + 64;
#   index_select L k + 2 k A h = 64 + 65,536                                     -> 70,592
#   fused (test_moe.py): row-id map 3,204 + permutation 1 36,996                  -> 40,200
# unpermute, forward: zeros A h 4,096 + L k 64 + k A h 32,768 + 2 A h 8,192       -> 45,120
#   fused 36,932
# unpermute's gradient: L k 64 + 2 k A h 65,536 = 65,600; fused 36,932
# permute's gradient: zeros 4,096 + L k 64 + k A h 32,768 + add 8,192; probabilities P E 512
#   + L k 64 + P k 32 + 2 P k 64                                                  -> 45,792
#   fused 37,476
# router, forward: score 2 P E 1,024; topk P E + k (P + L) 512 + 96; routing_probs zeros 512,
#   copy 1,024, scatter L k + 2 P k 128; routing_map zeros 512, .int() 512 + 512, copy 1,024,
#   scatter L k + I k 96, .bool() 512 + 128                                        -> 6,592
#   fused 3 P E + E = 1,664
# router, backward: gather L k + 2 P k 128; topk's gradient P E + L k + 2 P k 640; score 3 P E
#   1,536                                                                         -> 2,304
#   fused 1,664
UNFUSED = {"permute_fwd": 70_592, "unpermute_fwd": 45_120, "unpermute_bwd": 65_600, "permute_bwd": 45_792,
           "router_fwd": 6_592, "router_bwd": 2_304}
FUSED = {"permute_fwd": 40_200, "unpermute_fwd": 36_932, "unpermute_bwd": 36_932, "permute_bwd": 37_476,
         "router_fwd": 1_664, "router_bwd": 1_664}


def test_unfused_token_terms_qwen3_by_hand():
    assert unfused_token_terms(2048.0, 128.0, 8.0) == UNFUSED
    assert fused_token_terms(2048.0, 128.0, 8.0) == FUSED


def test_unfused_dispatch_bytes_qwen3_micro_batch():
    """T = 4096 local tokens (tp 1): the unfused permutations add (70,592 - 40,200) + (45,120 -
    36,932) = 38,580 B a token forward and (65,600 - 36,932) + (45,792 - 37,476) = 36,984 B
    backward; the unfused router 4,928 forward and 640 backward. Under SP with tp 2 each rank
    permutes its 2048 local tokens: half of it. The expert rows (per-row sorts) do not change."""
    settings, plan, _, _ = _qwen3()
    extra = unfused_dispatch_bytes(_moe_block(settings.model), context(plan, 1.0))
    assert tuple(float(x) for x in extra["permute"]) == (4096 * 38_580, 4096 * 36_984)
    assert tuple(float(x) for x in extra["router"]) == (4096 * 4_928, 4096 * 640)
    s_sp, p_sp, _, _ = _qwen3(gpus=16, tp=2, sequence_parallel=True)
    sp = unfused_dispatch_bytes(_moe_block(s_sp.model), context(p_sp, 1.0))
    assert float(sp["permute"][0]) == 2048 * 38_580


def test_unfused_share_of_the_fused_dispatch_bytes():
    """Against the whole fused dispatch (dispatch_bytes, ep 8: 860,536,832 B forward and
    849,248,256 B backward a micro-batch, test_moe.py), both paths unfused move 20.7% more
    forward and 18.1% more backward: not within a few percent of the fused pricing."""
    settings, plan, _, _ = _qwen3()
    ctx = context(plan, 1.0)
    fwd, bwd = _moe_block(settings.model).dispatch_bytes(ctx)
    extra = unfused_dispatch_bytes(_moe_block(settings.model), ctx)
    up_f = (extra["permute"][0] + extra["router"][0]) / fwd
    up_b = (extra["permute"][1] + extra["router"][1]) / bwd
    assert float(up_f) == pytest.approx(4096 * 43_508 / 860_536_832, rel=1e-12) and 0.20 < float(up_f) < 0.21
    assert float(up_b) == pytest.approx(4096 * 37_624 / 849_248_256, rel=1e-12) and 0.18 < float(up_b) < 0.19


def test_the_step_adds_the_unfused_bytes_a_job_runs():
    """explain's moe_permute row (48 MoE layers over B200's 8 TB/s x HBM_EFFICIENCY, as
    test_moe.py): with both fusions off it grows by 48 x 4096 x (38,580 + 36,984 + 4,928 + 640)
    B; with only the router fused, by the permutations' share alone. A megatron job that does
    not say runs Megatron-LM's default, both off, listed as inherited."""
    from planner.compute import HBM_EFFICIENCY

    s_on, _, _, on = _qwen3(moe_permute_fusion=True, moe_router_fusion=True)
    _, _, _, off = _qwen3(moe_permute_fusion=False, moe_router_fusion=False)
    _, _, _, perm = _qwen3(moe_permute_fusion=False, moe_router_fusion=True)
    s_default, _, _, default = _qwen3(moe_permute_fusion=None, moe_router_fusion=None)
    hbm = s_on.hardware.hbm_bandwidth * HBM_EFFICIENCY
    base = on["time"]["moe_permute_s"]
    assert off["time"]["moe_permute_s"] - base == pytest.approx(48 * 4096 * (38_580 + 36_984 + 4_928 + 640) / hbm, rel=1e-9)
    assert perm["time"]["moe_permute_s"] - base == pytest.approx(48 * 4096 * (38_580 + 36_984) / hbm, rel=1e-9)
    assert default["time"]["moe_permute_s"] == off["time"]["moe_permute_s"]
    assert (s_default.moe_permute_fusion, s_default.moe_router_fusion) == (False, False)
    assert ("moe_permute_fusion", False) in s_default.inherited and ("moe_router_fusion", False) in s_default.inherited
    assert on["plan"]["moe_permute_fusion"] is True and default["plan"]["moe_router_fusion"] is False


def test_a_stack_without_the_switch_refuses_it():
    """torchtitan has no such switch (stack defaults null): its MoE is priced on the fused
    kernels as before, and the field is refused, as other Megatron-only fields are."""
    from planner.errors import PlannerError

    s, _, _, js = _qwen3(stack="torchtitan", sharding="fsdp", moe_permute_fusion=None, moe_router_fusion=None)
    assert s.moe_permute_fusion is True and "moe_permute_fusion" not in js["plan"]
    with pytest.raises(PlannerError, match="moe_permute_fusion is a Megatron-Core setting"):
        _qwen3(stack="torchtitan", sharding="fsdp", moe_permute_fusion=False, moe_router_fusion=None)


@pytest.mark.parametrize("fused", [True, False])
def test_megatron_export_round_trip(tmp_path, fused):
    """The Megatron export writes --moe-permute-fusion / --moe-router-fusion where the plan runs
    the fused kernels (store_true, off by default) and nothing where it does not; read back, the
    plan is the same."""
    from planner.cli.export import resolved_plan
    from planner.schema import Job
    from planner.trainers import load_trainer_config
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(stack="megatron", model="qwen3-30b-a3b", gpus=8, ep=8, sharding="zero1", global_batch=8,
                             seq_len=4096, rank_order="tp-cp-dp-pp", moe_permute_fusion=fused, moe_router_fusion=fused))
    text, _ = export_plan(plan, "megatron")
    assert ("--moe-permute-fusion" in text) is fused and ("--moe-router-fusion" in text) is fused
    p = tmp_path / "exported.sh"
    p.write_text(text)
    back = resolved_plan(Job.model_validate(load_trainer_config(p).job))
    assert (back["moe_permute_fusion"], back["moe_router_fusion"]) == (plan["moe_permute_fusion"],
                                                                       plan["moe_router_fusion"]) == (fused, fused)


@pytest.mark.parametrize("stack,model,runs", [
    ("torchtitan", "qwen3-30b-a3b", "torch._grouped_mm, always"),
    ("torchtitan-0.3", "qwen3-30b-a3b", "torch._grouped_mm, always"),
    ("megatron-deepspeed", "mixtral-8x7b", "one GEMM per local expert, always"),
    ("deepseek", "deepseek-v3", "one grouped GEMM per projection over the local routed experts, always (assumed"),
    ("llm-foundry", "mixtral-8x7b", "MegaBlocks' grouped GEMM (ffn_type mb_dmoe, mlp_impl grouped)"),
    ("litgpt-benchmark", "mixtral-8x7b", "each expert's own LLaMAMLP (three nn.Linear GEMMs) on its tokens, in a "
                                         "Python loop over the experts, always"),
])
@pytest.mark.parametrize("flag", ["--moe-grouped-gemm", "--no-moe-grouped-gemm"])
def test_grouped_gemm_switch_refused_on_a_stack_without_it(cli, stack, model, runs, flag):
    """moe_grouped_gemm is Megatron-Core's switch (TEGroupedMLP and its Transformer Engine workspaces, the only stack
    whose defaults.moe_grouped_gemm is not null: stack_db/megatron.yaml). On torchtitan the experts always run
    torch._grouped_mm (torchtitan @e347b1e5e models/moe/moe.py MoEArgs.use_grouped_mm = True l. 37, no job-config
    option; 0.3 @4f9e9a47d models/common/moe.py l. 88-120), on DeepSpeed-MoE a loop of expert modules
    (deepspeed/moe/experts.py Experts.forward), on DeepSeek's HAI-LLM fp8 grouped GEMMs (DeepGEMM's contiguous
    layout), on llm-foundry MegaBlocks' dMoE with mlp_impl grouped (grouped_gemm's gmm), on litgpt a loop of LLaMAMLP
    experts: either value of the flag changed no figure there, and was dropped silently. Now exit 2, naming the stack
    and what its experts run (stack_db defaults.moe_experts_kernel, given by every stack that builds MoE layers but
    megatron, whose switch it is)."""
    r = cli("explain", "--model", model, "--gpus", "64", "--stack", stack, flag)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert f"({flag}) is a Megatron-Core setting; stack {stack} has no such switch: its routed experts run {runs}" in r.stderr
    assert f"hint: leave {flag} out, or price the plan on --stack megatron" in r.stderr
    r = cli("fit", "--model", model, "--gpus", "64", "--stack", stack, flag, "--top", "1")
    assert r.exit_code == 2 and f"stack {stack} has no such switch" in r.stderr, r.stderr


def test_every_moe_stack_says_what_its_experts_run():
    """A shipped stack whose code builds MoE layers (runs.layer_kinds moe) either has Megatron-Core's switch
    (defaults.moe_grouped_gemm: megatron, and megatron-bridge through `extends`) or says what its routed experts run,
    cited (defaults.moe_experts_kernel), which the refusal of a job's moe_grouped_gemm quotes. llm-foundry, deepseek
    and litgpt-benchmark lacked it (the refusal said "what its own code builds")."""
    from planner.catalog import list_stacks, load_stack

    moe = [n for n in list_stacks() if any(k.kind == "moe" for k in load_stack(n).runs.layer_kinds or ())]
    assert {"megatron", "torchtitan", "torchtitan-0.3", "megatron-deepspeed", "deepseek", "llm-foundry",
            "litgpt-benchmark"} <= set(moe)
    lacking = [n for n in moe if load_stack(n).defaults.moe_grouped_gemm is None
               and not load_stack(n).defaults.moe_experts_kernel]
    assert lacking == []


def test_grouped_gemm_switch_still_priced_on_megatron(cli):
    """The refusal leaves Megatron alone: --moe-grouped-gemm there is priced (its workspaces, memory.te_grouped_gemm_streams)
    and the JSON plan says so."""
    import json

    r = cli("explain", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--moe-grouped-gemm", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["moe_grouped_gemm"] is True
