"""torchtitan 0.3.0 as its own stack entry (issue 22, tt030): stack_db/torchtitan-0.3.yaml, read at
pytorch/torchtitan release/0.3 @4f9e9a47d, beside the TOML-era main @e347b1e5e (stack_db/torchtitan.yaml).

0.3.0 applies FSDP to every model at every shard degree (models/llama3/parallelize.py l. 69-90, 'Always run
apply_fsdp_to_decoder'; parallel_dims.py l. 191-195 keeps the fsdp mesh at degree 1): what its config
docstring calls DDP (data_parallel_replicate_degree = dp, shard degree 1) is HSDP with a shard group of one.
The hand values: Llama 3 8B has N = 8,030,261,248 parameters (model_zoo/llama3-8b.yaml), h = 4096,
V = 128,256."""

from __future__ import annotations

import pytest

from planner import comm
from planner.catalog import load_model, load_stack
from planner.params import count_params
from planner.startup import CODES, rules_for

N_8B = 8_030_261_248
H, V = 4096, 128_256


def _ring(size, n, bw, lat):
    return (n - 1) * lat + (n - 1) / n * size / bw


def test_entry_is_its_own_release():
    old, new = load_stack("torchtitan"), load_stack("torchtitan-0.3")
    assert new.version.startswith("runs and start-up rules: torchtitan 0.3.0, pytorch/torchtitan release/0.3 @4f9e9a47d")
    assert old.version.startswith("runs and start-up rules: torchtitan main @e347b1e5e")
    assert new.runs.fsdp_one_rank and not old.runs.fsdp_one_rank
    assert new.runs.etp_one_under_ep and not old.runs.etp_one_under_ep
    assert [m.name for m in new.runs.sharding] == ["fsdp2", "fsdp2_no_reshard", "fsdp2_reshard_always", "hsdp"]
    assert "ddp" in [m.name for m in old.runs.sharding]
    # the rule sets: main's (with the every-stack rules 73-75); 0.3.0 without the checks its code lacks (rules 28, 29, 30, 53, 63). The model-code
    # rules 65-68 are in both sets; each entry maps its own release's codes (runs.model_codes: 0.3.0's at
    # release/0.3 @4f9e9a47d, no llama4 code; tests/test_startup_torchtitan_model_code.py). TORCHTITAN_MTP_PP_CP (79,
    # tt03disp) is in both sets and breaks only where the entry's code trains MTP (runs.mtp true: 0.3); STACK_SP_NORM_GRADS (80,
    # mdscheck) and BRIDGE_CHUNK_CP (81, bridgecp: breaks only where the stack's chunked_attention.cp_local_sequence
    # says so) every stack's; TORCHTITAN_HYBRIDEP (82, tt03ep) in both, breaking only where the job runs hybridep, which
    # only 0.3's entry lists (runs.moe_dispatchers); DeepEP's own Hybrid-EP checks (58-61, keyed on the dispatcher, branch
    # hybridep2) on 0.3's only, the one of the two that runs hybridep; STACK_MODE_TP_PP_DP (83, bridgefsdp) and
    # PRECISION_AWARE_MFSDP (84, pamfsdp) every stack's; the sequence-length check: main's TORCHTITAN_SEQ_DIVISOR (28,
    # tp x 2 cp) and 0.3.0's trainer.py one, TORCHTITAN_SEQ_SP_CP (85, rule85: (tp under SP) x (2 cp at cp > 1)), each
    # entry listing the other's absent; TORCHTITAN_VARLEN_CP (86, varlencp) in both; TORCHTITAN_FSDP_SYMM_MEM_SM90 and
    # TORCHTITAN_SPMD_TYPECHECK_PP / _SAC_FLEX (87-89, rule87) on 0.3's only: they check options (StartupRule.option)
    # which only 0.3's entry has (runs.fsdp_symm_mem, runs.spmd_typechecking; main @e347b1e5e has neither, ttchecks);
    # TORCHTITAN_CP_PTRR_MASK (90, ttchecks) in both, which both name the CP balancers (runs.cp_load_balancers), and so
    # TORCHTITAN_CP_LOAD_BALANCER_NAME (105, cpbal: a name torch's cp_shard does not build, at cp > 1).
    # A rule that can never fire on an entry is not listed there (rules_for): TORCHTITAN_MTP_PP_CP (79, option runs.mtp)
    # and TORCHTITAN_HYBRIDEP (82, dispatcher hybridep) on 0.3's only, torchtitan's DeepEP checks (48-51, dispatcher
    # deepep) on main's only (0.3's runs.moe_dispatchers: alltoall, hybridep)
    assert [c for c, _ in rules_for(old)] == [28, 29, 30, 31, 32, 48, 49, 50, 51, 52, 53, 54, 56, 62, 63, 65, 66, 67, 68, 73, 74, 75, 80, 81, 83, 84, 86, 90, 105]
    assert [c for c, _ in rules_for(new)] == [31, 32, 52, 54, 58, 59, 60, 61, 62, 65, 66, 67, 68, 73, 74, 75, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 97, 105]  # 97: its launch line spells the split by layers_per_stage only
    assert "hybridep" in new.runs.moe_dispatchers and "hybridep" not in old.runs.moe_dispatchers
    assert new.runs.mtp and not old.runs.mtp
    assert [c.code for c in old.runs.model_codes] == ["llama3", "llama4", "deepseek_v3", "qwen3", "gpt_oss"]
    assert [c.code for c in new.runs.model_codes] == ["llama3", "deepseek_v3", "qwen3", "gpt_oss"]
    absent = {CODES[a.rule] for a in new.runs.startup_rules_absent}
    assert absent == {28, 29, 30, 53, 63}
    assert {CODES[a.rule] for a in old.runs.startup_rules_absent} == {85}


def test_llama3_8b_ddp_as_fsdp_over_one_rank_by_hand(explain):
    """torchtitan 0.3.0's replicate-only mesh on 8 H100: HSDP, shard group 1, 8 replicas. Each rank holds
    FSDP2's fp32 parameter shard whole (4 N: the master, no bf16 copy at rest, sharded_weights_copy false),
    AdamW's fp32 moments whole (8 N), no gradient at the backward's start (set_to_none), the final norm and
    the output layer kept gathered in bf16 (fully_shard([norm, lm_head], reshard_after_forward=False): 2 V h
    + 2 h). Its gradient traffic is one fp32 all-reduce of the 4 N gradient bytes across the 8 replicas per
    micro-batch (foreach_reduce's replica all-reduce); the reduce-scatter and the all-gathers run over one
    rank and move nothing. On main's entry the same mesh is refused (TORCHTITAN_FSDP_MESH)."""
    assert count_params(load_model("llama3-8b")).total == N_8B
    _, _, _, js = explain(model="llama3-8b", gpus=8, sharding="hsdp", shard_group=1, global_batch=8, micro_batch=1,
                          seq_len=8192, recompute="full", stack="torchtitan-0.3")
    assert js["plan"]["sharding_mode"] == "hsdp" and js["plan"]["shard_group"] == 1 and js["plan"]["dp"] == 8
    t = js["memory"]["terms"]
    assert t["master_weights"] == 4 * N_8B == 32_121_044_992
    assert t["adam"] == 8 * N_8B == 64_242_089_984
    assert t["weights"] == 0 and t["gradients"] == 0
    assert t["fsdp_unsharded_ends"] == 2 * V * H == 1_050_673_152
    # one all-reduce of 4 N bytes inside the 8-GPU NVLink domain: NCCL's NVLS (NVLink SHARP) there, S / B_nvls +
    # NVLS_LATENCY_S (comm.py [6][11]), B_nvls = NVLS_ALGBW_PER_RING_BUSBW x the ring's 370 GB/s
    b_nvls = comm.NVLS_ALGBW_PER_RING_BUSBW * 450e9 * comm.NVLINK_RING_EFFICIENCY
    ar = 4.0 * N_8B / b_nvls + comm.NVLS_LATENCY_S
    assert js["time"]["dp_comm_s"] == pytest.approx(ar, rel=1e-6)
    # the same ranks as FSDP over 8 (fsdp2 at dp 8): the fp32 states an eighth each
    _, _, _, j8 = explain(model="llama3-8b", gpus=8, sharding="fsdp", global_batch=8, micro_batch=1, seq_len=8192,
                          recompute="full", stack="torchtitan-0.3")
    assert j8["memory"]["terms"]["master_weights"] == pytest.approx(4 * N_8B / 8)
    assert j8["memory"]["terms"]["adam"] == pytest.approx(8 * N_8B / 8)


def test_fsdp_over_one_rank_at_dp_1(explain):
    """TP 8 on 8 GPUs (the oracle's fsdp 1 rows): fsdp2 at dp 1 on 0.3.0 holds the fp32 states of its TP
    shard whole (the output layer and the embedding split over TP too): 4 B and 8 B a local parameter."""
    _, _, _, js = explain(model="llama3-8b", gpus=8, tp=8, sharding="fsdp", global_batch=2, micro_batch=2,
                          seq_len=8192, recompute="full", stack="torchtitan-0.3")
    assert js["plan"]["dp"] == 1 and js["plan"]["sharding_mode"] == "fsdp2"
    t = js["memory"]["terms"]
    # the 65 RMSNorm weights (2 a layer x 32 + the final one, h each) are replicated over TP, the rest split 8 ways
    local = (N_8B - 65 * H) / 8 + 65 * H
    assert local == 1_004_015_616
    assert t["master_weights"] == 4 * local
    assert t["adam"] == 8 * local


@pytest.mark.parametrize("args, rule, on_main, on_03", [
    # FSDP over one rank: main runs no FSDP there (a sharded mode is refused), 0.3.0 runs it
    (["--tp", "8", "--sharding", "fsdp"], "TORCHTITAN_FSDP_MESH", False, True),
    (["--sharding", "hsdp", "--shard-group", "1"], "TORCHTITAN_FSDP_MESH", False, True),
    # TP without sequence parallelism: 0.3.0's enable_sequence_parallel
    (["--tp", "2", "--sharding", "fsdp", "--no-sequence-parallel"], "TORCHTITAN_SP", False, True),
])
def test_rules_that_differ_by_release(cli, args, rule, on_main, on_03):
    from conftest import assert_one_error

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--seq-len", "8192"]
    for stack, runs in (("torchtitan", on_main), ("torchtitan-0.3", on_03)):
        r = cli(*base, "--stack", stack, *args)
        if runs:
            assert r.exit_code == 0, (stack, r.stderr)
        else:
            assert_one_error(r, rule)


def test_no_unsharded_mode_on_0_3(cli):
    """0.3.0 lists no unsharded mode (no DDP in its code): sharding none is refused naming its modes; main's
    DDP beside TP is refused by TORCHTITAN_DDP_1D."""
    from conftest import assert_one_error

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--sharding", "none"]
    assert_one_error(cli(*base, "--stack", "torchtitan-0.3"), "no none sharding mode", "hsdp")
    assert_one_error(cli(*base, "--stack", "torchtitan", "--tp", "2"), "TORCHTITAN_DDP_1D")


def test_expert_tp_follows_ep_on_0_3(cli):
    """0.3.0's sparse mesh (pp, dp_replicate, efsdp, ep) has no expert-TP axis: with ep > 1 the routed
    experts shard over EP alone (expert TP 1, efsdp = dp_shard x cp x tp / ep), without EP over TP. A job
    that leaves etp out gets 1 under EP there (listed as assumed), tp on main (expert_tensor_parallel_degree
    set to tp by the export); an expert TP of 2 under EP is refused on 0.3.0 (TORCHTITAN_ETP), runs on main;
    fit on 0.3.0 prices expert TP 1 under EP only."""
    import json

    from conftest import assert_one_error

    base = ["explain", "--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "16", "--seq-len", "4096",
            "--ep", "2", "--tp", "2", "--recompute", "full", "--sharding", "fsdp", "--format", "json"]
    r = cli(*base, "--stack", "torchtitan-0.3")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["etp"] == 1
    r = cli(*base, "--stack", "torchtitan")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["etp"] == 2
    assert_one_error(cli(*base, "--etp", "2", "--stack", "torchtitan-0.3"), "TORCHTITAN_ETP")
    r = cli(*base, "--etp", "2", "--stack", "torchtitan")
    assert r.exit_code in (0, 1), r.stderr
    r = cli("fit", "--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096", "--stack",
            "torchtitan-0.3", "--top", "200", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    rows = json.loads(r.stdout)
    rows = rows["plans"] if isinstance(rows, dict) else rows
    pairs = {(row["plan"]["ep"] > 1, row["plan"]["etp"] == 1 if row["plan"]["ep"] > 1 else row["plan"]["etp"] == row["plan"]["tp"])
             for row in rows}
    assert pairs <= {(True, True), (False, True)} and (True, True) in pairs, pairs


def test_fit_searches_the_replicate_only_mesh(cli):
    """fit on 0.3.0 prices HSDP with a shard group of one (runs.fsdp_one_rank); on main it never does."""
    import json

    def groups(stack):
        r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "8192", "--stack",
                stack, "--sharding", "hsdp", "--tp", "1", "--top", "50", "--format", "json")
        assert r.exit_code in (0, 1), r.stderr
        rows = json.loads(r.stdout)
        rows = rows["plans"] if isinstance(rows, dict) else rows
        return {row["plan"]["shard_group"] for row in rows}

    assert 1 in groups("torchtitan-0.3")
    assert 1 not in groups("torchtitan")


def test_export_writes_a_0_3_plan_as_its_launch_line(cli, tmp_path):
    """torchtitan 0.3.0 reads no TOML (config/manager.py: --module / --config and command-line overrides):
    `planner export --format torchtitan` writes a plan priced on 0.3.0 as that launch line
    (trainers/torchtitan03.py; its round trips: tests/test_torchtitan03_launch.py), not main's TOML. The plan
    prices the config function's ChunkedLossWrapper (--chunked-loss), which no option of 0.3.0 removes."""
    r = cli("export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
            "--stack", "torchtitan-0.3", "--chunked-loss")
    assert r.exit_code == 0, r.stderr
    assert "-m torchtitan.train --module llama3 --config llama3_8b" in r.stdout and "[training]" not in r.stdout


def test_a_toml_reads_to_main_unless_the_stack_is_named(cli, tmp_path):
    """A torchtitan TOML is main's format (@e347b1e5e): it reads to the stack torchtitan by default; with
    --stack torchtitan-0.3 its unsharded mesh (data_parallel_replicate_degree 8, shard degree 1) is what 0.3.0
    runs on those degrees, HSDP with a shard group of one (listed as assumed), and its TP 8 on 8 GPUs (shard
    degree 1) FSDP over one rank, which main refuses (TORCHTITAN_FP32: no FSDP, fp32 training)."""
    import json

    from conftest import assert_one_error

    ddp = tmp_path / "ddp.toml"
    ddp.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
                   '[parallelism]\ndata_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1\n')
    r = cli("explain", str(ddp), "--gpus", "8", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    p = json.loads(r.stdout)["plan"]
    assert (p["stack"], p["sharding"], p["sharding_mode"]) == ("torchtitan", "none", "ddp")
    r = cli("explain", str(ddp), "--gpus", "8", "--stack", "torchtitan-0.3", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    p = json.loads(r.stdout)["plan"]
    assert (p["stack"], p["sharding"], p["shard_group"], p["dp"]) == ("torchtitan-0.3", "hsdp", 1, 8)
    assert "sharding=hsdp, shard_group=1" in r.stderr
    tp8 = tmp_path / "tp8.toml"
    tp8.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 2\nseq_len = 8192\n'
                   '[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 8\n')
    assert_one_error(cli("explain", str(tp8), "--gpus", "8"), "TORCHTITAN_FP32")
    r = cli("explain", str(tp8), "--gpus", "8", "--stack", "torchtitan-0.3", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    p = json.loads(r.stdout)["plan"]
    assert (p["sharding"], p["sharding_mode"], p["dp"], p["tp"]) == ("fsdp", "fsdp2", 1, 8)


def test_cp_rotate_method_is_not_an_option_on_0_3(cli):
    """0.3.0 has no context_parallel_rotate_method (configs.py l. 232-243) and its language models run no torch
    ring attention: CP under FlexAttention all-gathers K/V (distributed/context_parallel/api.py l. 56-78; stack
    memory.cp_ring_backward null): a job asking a rotate method is refused there, priced on main."""
    from conftest import assert_one_error

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "8192", "--cp", "2",
            "--sharding", "fsdp", "--cp-rotate-method", "alltoall"]
    assert_one_error(cli(*base, "--stack", "torchtitan-0.3"), "cp_rotate_method is set", "not torch's ring attention")
    r = cli(*base, "--stack", "torchtitan")
    assert r.exit_code in (0, 1), r.stderr
    r = cli(*base[:-2], "--stack", "torchtitan-0.3")
    assert r.exit_code in (0, 1), r.stderr


def test_float8_recipes_and_early_step_of_0_3(cli):
    """0.3.0's float8 converter has recipes rowwise (the default) and rowwise_with_gw_hp only (float8.py l. 58:
    no tensorwise, so no fp8 all-gather), its MX converter converts every Linear by default (the output layer
    too), and it has no early_step_in_backward: tensorwise and early_step_in_backward are refused there, a job
    naming no recipe runs rowwise; main keeps tensorwise as its default."""
    import json

    from conftest import assert_one_error

    st = load_stack("torchtitan-0.3")
    assert list(st.fp8_recipes) == ["rowwise", "mxfp8"] and st.defaults.fp8_recipe == "rowwise"
    assert st.fp8_recipes["mxfp8"].output_layer_bf16 is False and not st.memory.optimizer_in_backward
    assert load_stack("torchtitan").defaults.fp8_recipe == "tensorwise"
    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--sharding", "fsdp"]
    assert_one_error(cli(*base, "--stack", "torchtitan-0.3", "--precision", "fp8", "--fp8-recipe", "tensorwise"),
                     "tensorwise", "rowwise, mxfp8")
    assert_one_error(cli(*base, "--stack", "torchtitan-0.3", "--early-step-in-backward"), "early_step_in_backward")
    r = cli(*base, "--stack", "torchtitan-0.3", "--precision", "fp8", "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)["plan"]["fp8_recipe"] == "rowwise"


def test_attention_is_flexattention_by_hand(explain):
    """0.3.0's language models run FlexAttention (models/common/config_utils.py get_attention_config l. 71-101:
    'sdpa' is a ValueError; llama3 defaults to 'flex'), priced at FlashAttention-2's rate times FlexAttention's
    published ratio (compute.py [7d]): on H100 1.25 forward, 1.03 backward (PyTorch at GTC 2025 abstract: '~25%
    faster than FlashAttention2', '~3% faster'). Llama 3 8B, one 8,192-token sequence, a layer's causal core
    is 4 x 8192 x 32 x 128 x 4096 (mean causal keys) = 0.5498 TFLOP forward, 2.5x backward, at the sustained
    fraction 0.85 of the entry's rates. main (SDPA flash = FlashAttention-2): 0.5498e12 / (365e12 x 0.85) =
    1.7720 ms forward, 2.5 x 0.5498e12 / (310e12 x 0.85) = 5.2159 ms backward; 0.3.0: 1.7720 / 1.25 =
    1.4176 ms and 5.2159 / 1.03 = 5.0640 ms."""
    import numpy as np

    from planner import step as S

    flops = 4 * 8192 * 32 * 128 * 4096
    want = {"torchtitan": (flops / (365e12 * 0.85), 2.5 * flops / (310e12 * 0.85), "flash2"),
            "torchtitan-0.3": (flops / (365e12 * 0.85 * 1.25), 2.5 * flops / (310e12 * 0.85 * 1.03), "flex")}
    for stack, (f, b, kernel) in want.items():
        settings, plan, _, js = explain(model="llama3-8b", gpus=8, stack=stack, sharding="fsdp", global_batch=8,
                                        micro_batch=1, seq_len=8192, recompute="none")
        assert js["plan"]["attention_kernel"] == kernel
        lt = S.layer_times(S._context(settings, plan))
        assert float(np.ravel(lt.core_fwd[0])[0]) == pytest.approx(f, rel=1e-9)
        assert float(np.ravel(lt.core_bwd[0])[0]) == pytest.approx(b, rel=1e-9)
    assert want["torchtitan"][0] == pytest.approx(1.7720e-3, abs=5e-8)
    assert want["torchtitan-0.3"][0] == pytest.approx(1.4176e-3, abs=5e-8)
    assert want["torchtitan"][1] == pytest.approx(5.2159e-3, abs=5e-8)
    assert want["torchtitan-0.3"][1] == pytest.approx(5.0640e-3, abs=5e-8)


def test_flex_ratio_by_gpu():
    """compute.flex_over_flash2 [7d]: Hopper (9.x) 1.25 / 1.03 (GTC 2025, H100); any other capability 0.90 / 0.85
    (pytorch.org/blog/flexattention, A100); the stack's rule needs a compute capability, so an AMD entry (none)
    prices FlashAttention-2."""
    from planner.catalog import load_hardware
    from planner.compute import attention_kernel, attention_rates

    st = load_stack("torchtitan-0.3")
    for name, ratio in (("h100-sxm", (1.25, 1.03)), ("h200-sxm", (1.25, 1.03)), ("a100-sxm-80gb", (0.90, 0.85)),
                        ("b200", (0.90, 0.85))):
        hw = load_hardware(name)
        assert attention_kernel(st, hw) == "flex", name
        f2, flex = attention_rates(hw, "flash2"), attention_rates(hw, "flex")
        assert flex[0] == pytest.approx(f2[0] * ratio[0], rel=1e-12), name
        assert flex[1] == pytest.approx(f2[1] * ratio[1], rel=1e-12), name
    assert attention_kernel(st, load_hardware("mi300x")) == "flash2"
    assert attention_kernel(load_stack("torchtitan"), load_hardware("h100-sxm")) == "flash2"


def test_cp_under_flex_is_one_kernel_after_an_all_gather(explain):
    """CP under FlexAttention (api.py l. 56-78; torch cplib::flex_cp_allgather): K and V all-gathered, each on its
    own, one kernel of the local queries (no per-step kernels, no merges), dK/dV reduce-scattered in bf16. The
    memory-bound work is the all-gather's and the reduce-scatter's cat along the sequence dim, 4 B x cp a local
    K/V element each: Llama 3 8B, cp 2, one 8,192-token sequence: 4,096 local tokens x 2 x 8 KV heads x 128 =
    8.39M local K/V elements, forward 4 x 2 x 8.39M = 67.1 MB, backward the re-run gather's and the
    reduce-scatter's, 134.2 MB, over the stack's achievable HBM bandwidth."""
    import numpy as np

    from planner import step as S

    spec = load_stack("torchtitan-0.3").context_parallel
    assert (spec.kernel, spec.fwd_kv, spec.bwd_kv, spec.dkv, spec.dkv_bytes, spec.separate_kv) == (
        "one", "allgather", "allgather", "reduce_scatter", 2, True)
    settings, plan, _, _ = explain(model="llama3-8b", gpus=8, stack="torchtitan-0.3", sharding="fsdp", cp=2,
                                   global_batch=4, micro_batch=1, seq_len=8192, recompute="full")
    sc = S._context(settings, plan)
    mixer = sc.ll.kinds[0].mixer
    ring = S.cp_ring(sc, mixer)
    kv_el = 4096 * 2 * 8 * 128
    assert float(np.ravel(ring["kv_el"])[0]) == kv_el
    assert S.cp_kernel_factor(2, ring, True) == (1.0, 1.0)
    f, b = S.cp_pass_times(sc, ring)
    assert float(np.ravel(f)[0]) * float(np.ravel(sc.hbm)[0]) == pytest.approx(4 * 2 * kv_el, rel=1e-12)
    assert float(np.ravel(b)[0]) * float(np.ravel(sc.hbm)[0]) == pytest.approx(2 * 4 * 2 * kv_el, rel=1e-12)
