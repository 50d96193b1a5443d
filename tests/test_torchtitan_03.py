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
    # the rule sets: main's nineteen; 0.3.0 without the checks its code lacks (rules 29, 30, 53, 63). The model-code
    # rules 65-68 are in both sets; each entry maps its own release's codes (runs.model_codes: 0.3.0's at
    # release/0.3 @4f9e9a47d, no llama4 code; tests/test_startup_torchtitan_model_code.py)
    assert [c for c, _ in rules_for(old)] == [28, 29, 30, 31, 32, 48, 49, 50, 51, 52, 53, 54, 56, 62, 63, 65, 66, 67, 68]
    assert [c for c, _ in rules_for(new)] == [28, 31, 32, 48, 49, 50, 51, 52, 54, 56, 62, 65, 66, 67, 68]
    assert [c.code for c in old.runs.model_codes] == ["llama3", "llama4", "deepseek_v3", "qwen3", "gpt_oss"]
    assert [c.code for c in new.runs.model_codes] == ["llama3", "deepseek_v3", "qwen3", "gpt_oss"]
    absent = {CODES[a.rule] for a in new.runs.startup_rules_absent}
    assert absent == {29, 30, 53, 63}


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


def test_export_refuses_a_0_3_plan(cli, tmp_path):
    """torchtitan 0.3.0 reads no TOML (config/manager.py: --module / --config and command-line overrides):
    `planner export --format torchtitan` writes main's TOML only, and refuses a plan priced on 0.3.0 naming
    both releases."""
    from conftest import assert_one_error

    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--stack", "torchtitan-0.3",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert_one_error(cli("export", "--format", "torchtitan", "--model", "llama3-8b", "--gpus", "8", "--global-batch",
                         "16", "--stack", "torchtitan-0.3"), "torchtitan-0.3", "release/0.3 @4f9e9a47d", "main @e347b1e5e")


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
    """0.3.0 has no context_parallel_rotate_method (configs.py l. 232-243) and runs torch's default, allgather
    (runs.cp_rotate_methods): a job asking alltoall is refused there, priced on main."""
    from conftest import assert_one_error

    base = ["explain", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "8192", "--cp", "2",
            "--sharding", "fsdp", "--cp-rotate-method", "alltoall"]
    assert_one_error(cli(*base, "--stack", "torchtitan-0.3"), "cp_rotate_method alltoall", "runs.cp_rotate_methods")
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
