"""Muon on Megatron-Bridge (issue 22): optimizer.optimizer muon / dist_muon read and written, priced as the megatron
stack prices Megatron's Muon (memory.py [mu]).

Bridge's setup_optimizer (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf training/optim.py l. 69-84) builds Megatron-Core
905c0e386's get_megatron_muon_optimizer for a name holding muon, its LayerWiseDistributedOptimizer where the name holds
dist; Muon raises beside the distributed optimizer (optimizer/muon.py l. 192-193), which Bridge keeps in step on its
ddp and optimizer sides (training/config.py l. 1944-1966), so a Muon launch turns both off, as NVIDIA's Kimi-K2
recipe does (recipes/kimi/kimi_k2.py l. 195-197). At 905c0e386 the layer-wise optimizer hands each parameter whole to
one rank (layer_wise_optimizer.py l. 105-155): the megatron stack's optimizer_whole_tensors."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from planner.trainers import load_trainer_config
from planner.trainers.export import plan_signature

from conftest import assert_one_error, explain_job

RUN = "scripts/training/run_recipe.py"
OFF = "ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false ddp.overlap_param_gather=false"


def _launch(tmp_path, *overrides, name="launch.sh"):
    f = tmp_path / name
    f.write_text(f"torchrun --nproc_per_node 8 {RUN} --recipe llama3_8b_pretrain_config model.context_parallel_size=1 "
                 f"{' '.join(overrides)}\n")
    return f


def test_muon_under_ddp_by_hand(cli, tmp_path):
    """llama3_8b_pretrain_config on 8 GPUs at CP 1 with optimizer.optimizer=muon and the distributed optimizer off:
    DDP, every rank holds every state. Llama 3 8B's 8,030,261,248 parameters: the word embedding and the output
    layer (128,256 x 4,096 = 525,336,576 each, untied) and the 65 RMSNorm weights (32 x 2 + 1, 4,096 each: 266,240)
    keep Adam (get_megatron_muon_optimizer takes 2-D non-embedding weights only, muon.py @905c0e386 l. 251-255); the
    other 6,979,321,856 are 2-D hidden matrices with one fp32 momentum. Optimizer bytes: the fp32 master of every
    parameter (4 x 8,030,261,248 = 32,121,044,992), Muon's momentum (4 x 6,979,321,856 = 27,917,287,424) and Adam's
    m and v on the rest (8 x 1,050,939,392 = 8,407,515,136): 68,445,847,552 B, as the megatron stack's job prices it."""
    f = _launch(tmp_path, "optimizer.optimizer=muon", OFF)
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert (j["optimizer"], j["sharding_mode"], j["sharding"], j.get("optimizer_whole_tensors")) == \
        ("muon", "ddp", "none", None)
    js = json.loads(cli("explain", f, "--format", "json", "-q").stdout)
    n, emb, norms = 8_030_261_248, 128_256 * 4096, 65 * 4096
    muon = n - 2 * emb - norms
    assert muon == 6_979_321_856
    assert js["memory"]["optimizer_bytes"] == 4 * n + 4 * muon + 8 * (2 * emb + norms) == 68_445_847_552
    _, _, _, mg = explain_job(model="llama3-8b", gpus=8, global_batch=512, micro_batch=1, seq_len=8192,
                              sharding="none", optimizer="muon", stack="megatron")
    assert mg["memory"]["optimizer_bytes"] == js["memory"]["optimizer_bytes"]


def test_dist_muon_is_the_layer_wise_optimizer_on_whole_tensors(cli, tmp_path):
    """optimizer.optimizer=dist_muon: the layer-wise distributed optimizer (zero1, whole tensors), the same memory
    as the megatron stack's Muon at zero1 on its legacy path (--no-use-layer-wise-param-layout); both overlap_param_
    gather fields false (the Kimi-K2 recipe's; layer_wise_optimizer.py @905c0e386 l. 280-288: the all-gather after the
    step, synchronous, async_allgather off) read as the gather exposed (dp_param_gather_overlap false, step.py [40]);
    with both true it is noted as deferred to the forward (tests/test_dp_param_gather_overlap.py); ddp.overlap_param_
    gather alone (the recipe's true) fails at the first forward and is refused (megatron_bridge._hooks_without_gather;
    before, read as exposed)."""
    f = _launch(tmp_path, "optimizer.optimizer=dist_muon",
                "ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false",
                "ddp.overlap_param_gather=false")
    cfg = load_trainer_config(f, hardware="h100-sxm")
    j = cfg.job
    assert (j["optimizer"], j["sharding_mode"], j["sharding"], j["optimizer_whole_tensors"]) == \
        ("muon", "distributed_optimizer", "zero1", True)
    assert j["dp_param_gather_overlap"] is False  # both off: async_allgather off, no forward pre-hooks
    with pytest.raises(PlannerError, match="ddp.overlap_param_gather=true under dist_muon without optimizer."
                                           "overlap_param_gather"):
        load_trainer_config(_launch(tmp_path, "optimizer.optimizer=dist_muon", "ddp.use_distributed_optimizer=false "
                                    "optimizer.use_distributed_optimizer=false", name="half.sh"), hardware="h100-sxm")
    both = load_trainer_config(_launch(tmp_path, "optimizer.optimizer=dist_muon", "optimizer.overlap_param_gather=true",
                                       "ddp.use_distributed_optimizer=false optimizer.use_distributed_optimizer=false",
                                       name="both.sh"), hardware="h100-sxm")
    assert "dp_param_gather_overlap" not in both.job
    assert any("overlap_param_gather=true: with optimizer.overlap_param_gather: the layer-wise optimizer's parameter "
               "all-gather" in a for a in both.assumed)
    js = json.loads(cli("explain", f, "--format", "json", "-q").stdout)
    _, _, _, mg = explain_job(model="llama3-8b", gpus=8, global_batch=512, micro_batch=1, seq_len=8192,
                              sharding="zero1", optimizer="muon", optimizer_whole_tensors=True, stack="megatron")
    assert js["memory"]["optimizer_bytes"] == mg["memory"]["optimizer_bytes"]
    # sharded: below the DDP Muon's 68,445,847,552 B
    assert js["memory"]["optimizer_bytes"] < 68_445_847_552


@pytest.mark.parametrize("line,needles", [
    # the recipes' distributed optimizer left on: muon.py @905c0e386 l. 192-193 raises
    ("optimizer.optimizer=muon", ["muon with dist optimizer is not supported", "hint: add ddp.use_distributed_optimizer=false"]),
    ("optimizer.optimizer=sgd " + OFF, ["optimizer.optimizer='sgd'", "valid: adam, muon, dist_muon"]),
    ("optimizer.optimizer=muon dist.use_torch_fsdp2=true " + OFF, ["under Megatron-FSDP or torch FSDP2"]),
    ("optimizer.optimizer=muon optimizer.use_precision_aware_optimizer=true " + OFF, ["precision-aware optimizer"]),
])
def test_muon_refusals(cli, tmp_path, line, needles):
    assert_one_error(cli("explain", _launch(tmp_path, line)), *needles)


@pytest.mark.parametrize("args,written,gather", [
    (["--sharding", "none"], "optimizer.optimizer=muon", "false"),
    (["--sharding", "zero1", "--optimizer-whole-tensors"], "optimizer.optimizer=dist_muon", "true"),
])
def test_muon_export_round_trip(cli, tmp_path, args, written, gather):
    """export --format megatron-bridge of a Muon plan writes optimizer.optimizer with the distributed optimizer's
    flags off, and reads back as the same plan with the same memory. DDP's Muon gathers nothing (overlap_param_gather
    false); dist_muon's all-gather hidden as the plan prices it (the DP overlap on, dp_param_gather_overlap left out):
    ddp.overlap_param_gather true (before: false, against the plan; step.py [40])."""
    job = ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--optimizer", "muon",
           "--no-tp-comm-overlap", *args]
    out = tmp_path / "muon.sh"
    r = cli("export", *job, "--format", "megatron-bridge", "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    for line in (written, "ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false",
                 f"ddp.overlap_param_gather={gather}"):
        assert f"    {line} \\\n" in text
    a = json.loads(cli("explain", *job, "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    assert plan_signature(b["plan"]) == plan_signature(a["plan"])
    assert b["memory"]["total_bytes"] == a["memory"]["total_bytes"]


def test_muon_export_refuses_the_layout_bridge_lacks(cli):
    """Muon at zero1 with the precomputed layer-wise layout (Megatron-LM @d98e8a64's default) is not what
    Megatron-Core 905c0e386 runs: refused, naming the option that prices what Bridge runs. Since the stack says so
    (stack_db megatron-bridge runs.optimizers muon_param_layout false) the plan itself is refused, before any file
    is written (plan._optimizer)."""
    r = cli("export", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--optimizer", "muon",
            "--sharding", "zero1", "--no-tp-comm-overlap", "--format", "megatron-bridge")
    assert_one_error(r, "layer-wise parameter layout", "muon_param_layout false", "hint: add optimizer_whole_tensors",
                     "--optimizer-whole-tensors")


def _fit_rows(cli, *args):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--optimizer", "muon", "--top", "1000", "--format", "json",
            "-q", *args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_fit_ranks_only_the_muon_bridge_runs(cli):
    """fit --stack megatron-bridge --optimizer muon ranked zero1 rows with the layer-wise layout (its top row was
    one: TP 2 x DP 4 zero1, 83,769 tokens/s), which Megatron-Core 905c0e386 lacks, so `fit --export` refused its own
    top row. Now the stack's runs.optimizers muon_param_layout false leaves them out: the rows are DDP (sharding none,
    optimizer.optimizer=muon), the layer-wise optimizer's whole-tensor rows with --optimizer-whole-tensors (zero1
    only, dist_muon), and --sharding zero1 alone is refused naming the stack field. The megatron stack
    (Megatron-LM @d98e8a64, muon_param_layout true) still ranks both levels."""
    bridge = _fit_rows(cli, "--stack", "megatron-bridge")
    assert bridge and {r["plan"]["sharding"] for r in bridge} == {"none"}
    whole = _fit_rows(cli, "--stack", "megatron-bridge", "--optimizer-whole-tensors")
    assert whole and {(r["plan"]["sharding"], r["plan"]["optimizer_whole_tensors"]) for r in whole} == {("zero1", True)}
    assert {r["plan"]["sharding"] for r in _fit_rows(cli, "--stack", "megatron")} == {"none", "zero1"}
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--optimizer", "muon", "--stack", "megatron-bridge",
            "--sharding", "zero1")
    assert_one_error(r, "layer-wise parameter layout", "muon_param_layout false", "--optimizer-whole-tensors")


def test_check_spells_bridge_muon_sharding_without_the_distributed_optimizer(cli):
    """check's suggestion of a sharding change on a Muon plan is spelled as the export writes it
    (bridge_sharding.sharding_overrides): the distributed optimizer's two flags false (Megatron-Core 905c0e386 raises
    'muon with dist optimizer is not supported.', optimizer/muon.py l. 192-193) and optimizer.optimizer naming the
    mode: dist_muon for the layer-wise optimizer, muon under DDP; it wrote ddp.use_distributed_optimizer=true."""
    from planner.trainers.spelling import spell

    job = ["--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--optimizer", "muon",
           "--no-tp-comm-overlap", "--format", "json", "-q"]
    ddp = json.loads(cli("explain", *job, "--sharding", "none").stdout)["plan"]
    dist = json.loads(cli("explain", *job, "--sharding", "zero1", "--optimizer-whole-tensors").stdout)["plan"]
    for before, after, name in ((ddp, dist, "dist_muon"), (dist, ddp, "muon")):
        got = {x.key: x.value for x in spell("megatron-bridge", ["sharding"], before, after, {}, None).settings}
        assert got["ddp.use_distributed_optimizer"] is False and got["optimizer.use_distributed_optimizer"] is False
        assert got["optimizer.optimizer"] == name
    adam = json.loads(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--sharding",
                          "zero1", "--no-tp-comm-overlap", "--format", "json", "-q").stdout)["plan"]
    got = {x.key: x.value for x in spell("megatron-bridge", ["sharding"], ddp, adam, {}, None).settings}
    assert got["ddp.use_distributed_optimizer"] is True and "optimizer.optimizer" not in got


def test_adam_is_written_too(cli, tmp_path):
    """The writer writes the update rule over the recipe's for every plan: adam where the plan prices Adam."""
    out = tmp_path / "adam.sh"
    assert cli("export", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-bridge", "--sharding", "zero1",
               "--no-tp-comm-overlap", "--format", "megatron-bridge", "-o", out, "-q").exit_code == 0
    assert "    optimizer.optimizer=adam \\\n" in out.read_text()
