"""torchtitan's MoE dispatchers (issue 22; stack_db torchtitan runs.moe_dispatchers, planner/startup.py
TORCHTITAN_DEEPEP_*): the TOML-configured torchtitan @e347b1e5e runs [parallelism]
expert_parallel_comm_backend "standard" (torch all-to-all, the planner's alltoall) and "deepep"
(torchtitan/config/job_config.py l. 474); DeepEP raises without expert parallelism and with expert TP
(models/deepseek_v3/infra/parallelize.py l. 99-113) and DeepEP's config tables take the EP group at
2 .. 160 listed sizes (deepseek-ai/DeepEP @567632d deep_ep/buffer.py l. 245-289). A job breaking one
is refused naming the rule (exit 2 for explain / check); fit drops such rows with the counted reason;
`export --format torchtitan` writes the dispatcher in torchtitan's key and reads it back."""

from __future__ import annotations

import pytest

from planner.cli.export import resolved_plan
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, TORCHTITAN_DEEPEP_SIZES
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

from conftest import assert_one_error

# DeepSeek-V3 (256 routed experts) on 512 H100s, torchtitan FSDP2, one pipeline stage, expert TP 1
V3 = dict(model="deepseek-v3", gpus=512, hardware="h100-sxm", stack="torchtitan", global_batch=1024, seq_len=4096,
          tp=1, pp=1, sharding="fsdp", etp=1, moe_dispatcher="deepep")
ARGS = ["--model", "deepseek-v3", "--gpus", "512", "--hardware", "h100-sxm", "--stack", "torchtitan",
        "--global-batch", "1024", "--seq-len", "4096", "--pp", "1", "--sharding", "fsdp"]


def test_the_stack_lists_what_torchtitan_runs():
    """runs.moe_dispatchers is expert_parallel_comm_backend's two values; the sizes are DeepEP
    @567632d's table (48 and 96 beside the hybrid-ep branch's), all within 8 NVLink x 20 RDMA
    peers and multiples of 8 above 8; the codes start at the last contiguous code + 5 (48)."""
    from planner.catalog import load_stack

    assert load_stack("torchtitan").runs.moe_dispatchers == ["alltoall", "deepep"]
    assert TORCHTITAN_DEEPEP_SIZES == (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)
    assert all(g <= 8 or g % 8 == 0 for g in TORCHTITAN_DEEPEP_SIZES) and max(TORCHTITAN_DEEPEP_SIZES) == 160
    assert [CODES[k] for k in ("TORCHTITAN_DEEPEP_EP", "TORCHTITAN_DEEPEP_ETP", "TORCHTITAN_DEEPEP_GROUP")] == [48, 49, 50]


@pytest.mark.parametrize("kw, rule", [
    (dict(ep=1), "TORCHTITAN_DEEPEP_EP"),                     # ValueError: DeepEP requires ep_degree > 1
    (dict(tp=2, ep=64, etp=2, sequence_parallel=True), "TORCHTITAN_DEEPEP_ETP"),  # NotImplementedError with ETP
    (dict(ep=256), "TORCHTITAN_DEEPEP_GROUP"),                # 256 ranks: not in DeepEP's table (nor <= 160)
    # DeepEPMoE has no reorderer to split the TP-gathered tokens (moe_deepep.py l. 36-37): issue 22
    (dict(tp=2, ep=64, etp=1, sequence_parallel=True), "TORCHTITAN_DEEPEP_TP"),
])
def test_each_rule_refuses_its_job(kw, rule):
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**V3, **kw}))
    assert f"breaks start-up rule {rule} of torchtitan" in e.value.message
    assert "@e347b1e5e" in e.value.message and e.value.hint


@pytest.mark.parametrize("kw", [dict(ep=64), dict(ep=32)])
def test_neighbouring_jobs_run(kw):
    """EP 64 and 32 (listed sizes) at expert TP 1 and attention TP 1 run (attention TP 2 is
    TORCHTITAN_DEEPEP_TP); the alltoall dispatcher runs EP 256, ep 1, expert TP 2 and attention TP 2
    with expert TP 1 alike."""
    settings, plan, _ = resolve(Job(**{**V3, **kw}))
    assert settings.moe_dispatcher == "deepep" and int(plan.ep) == kw["ep"]
    for other in (dict(ep=256), dict(ep=1), dict(tp=2, ep=64, etp=2, sequence_parallel=True),
                  dict(tp=2, ep=64, etp=1, sequence_parallel=True)):
        settings, _, _ = resolve(Job(**{**V3, "moe_dispatcher": "alltoall", **other}))
        assert settings.moe_dispatcher == "alltoall"


def test_a_size_between_listed_ones_is_refused(tmp_path):
    """A 40-expert model on 40 x 8 GPUs: EP 40 is a multiple of 8 within 160 ranks but not in the
    table (DeepEP asserts 'Unsupported number of EP ranks'); EP 8 runs."""
    import yaml

    from pathlib import Path

    m = yaml.safe_load((Path(__file__).resolve().parents[1] / "model_zoo" / "deepseek-v3.yaml").read_text())
    m.update(name="v3-40e")
    m["moe"].update(num_experts=40, expert_groups=None, groups_per_token=None)
    m.pop("training", None)
    p = tmp_path / "v3-40e.yaml"
    p.write_text(yaml.safe_dump(m))
    base = {**V3, "model": str(p), "gpus": 320, "global_batch": 640}
    with pytest.raises(PlannerError, match="TORCHTITAN_DEEPEP_GROUP"):
        resolve(Job(**base, ep=40))
    assert int(resolve(Job(**base, ep=8))[1].ep) == 8


def test_other_dispatchers_are_refused_naming_the_stack():
    """hybridep (torchtitan's came after its TOML era), deepep_ll and allgather: not runs.moe_dispatchers."""
    for d in ("hybridep", "deepep_ll", "allgather"):
        with pytest.raises(PlannerError) as e:
            resolve(Job(**{**V3, "ep": 64, "moe_dispatcher": d}))
        assert f"moe_dispatcher {d}: stack torchtitan runs alltoall, deepep" in e.value.message
        assert "expert_parallel_comm_backend" in e.value.message


def test_explain_and_check_exit_2(cli, tmp_path):
    """The model's recipe gives deepep (now taken: torchtitan runs it): explain at ep 1 exits 2
    naming the rule; a TOML saying deepep with expert_parallel_degree 1 fails `check` the same way."""
    assert_one_error(cli("explain", *ARGS, "--tp", "1", "--ep", "1"), "TORCHTITAN_DEEPEP_EP", "ep_degree > 1")
    assert_one_error(cli("explain", *ARGS, "--tp", "2", "--ep", "64", "--etp", "2"), "TORCHTITAN_DEEPEP_ETP",
                     "Expert Tensor Parallelism")
    toml = tmp_path / "job.toml"
    toml.write_text("[training]\nlocal_batch_size = 2\nglobal_batch_size = 1024\nseq_len = 4096\n"
                    "[parallelism]\ndata_parallel_shard_degree = 512\nexpert_parallel_degree = 1\n"
                    "expert_parallel_comm_backend = \"deepep\"\n")
    assert_one_error(cli("check", str(toml), "--model", "deepseek-v3", "--hardware", "h100-sxm"), "TORCHTITAN_DEEPEP_EP")
    toml.write_text(toml.read_text().replace("expert_parallel_comm_backend = \"deepep\"", "expert_parallel_comm_backend = \"hybridep\""))
    assert_one_error(cli("check", str(toml), "--model", "deepseek-v3", "--hardware", "h100-sxm"),
                     "expert_parallel_comm_backend", "valid: standard, deepep")


def test_fit_drops_the_rows_with_the_counted_reason():
    """fit at ep 1 pinned ranks nothing and names the rule; unpinned, every ranked row has ep in
    DeepEP's table and etp 1, and the three rules are among the counted reasons."""
    job = Job(**{**{k: v for k, v in V3.items() if k not in ("tp", "pp", "etp")}, "ep": 64})  # (resolved before the search)
    with pytest.raises(PlannerError) as e:
        fit(job, opts=SpaceOptions(tp=(1,), pp=(1,), ep=(1,)), top=1)
    assert "torchtitan's DeepEP backend needs expert parallelism" in e.value.message
    res = fit(job, opts=SpaceOptions(tp=(1, 2), pp=(1,), ep=(1, 64, 256)), top=20)
    assert res.rows
    for row in res.rows:
        p = row["plan"]
        assert p["moe_dispatcher"] == "deepep" and p["ep"] in TORCHTITAN_DEEPEP_SIZES and (p.get("etp") or p["tp"]) == 1, p
        assert p["tp"] == 1, p  # TORCHTITAN_DEEPEP_TP
    counted = " ".join(res.counts.reasons)
    for text in ("needs expert parallelism", "runs without expert TP", "which DeepEP's config tables take"):
        assert text in counted, res.counts.reasons


@pytest.mark.parametrize("dispatcher, key", [("deepep", "deepep"), ("alltoall", "standard")])
def test_export_writes_the_backend_and_reads_it_back(tmp_path, dispatcher, key):
    # the 671B flavor's FlexAttention: the export names it only for a plan priced with it (issue 22)
    plan = resolved_plan(Job(**{**V3, "ep": 64, "moe_dispatcher": dispatcher, "attention_kernel": "flex"}))
    text, _ = export_plan(plan, "torchtitan")
    assert f'expert_parallel_comm_backend = "{key}"' in text and "expert_tensor_parallel_degree = 1" in text
    p = tmp_path / "job.toml"
    p.write_text(text)
    job = load_trainer_config(p, model="deepseek-v3", hardware="h100-sxm").job
    assert job["moe_dispatcher"] == dispatcher
    back = resolved_plan(Job.model_validate(job))
    for k in ("moe_dispatcher", "ep", "etp", "tp", "dp", "sharding_mode"):
        assert back[k] == plan[k], k


def test_export_refuses_what_torchtitan_cannot_say():
    """A plan priced with an fp8 dispatch (under fp8: planner/dispatch.py [11]) or node-limited routing: no key
    of torchtitan's TOML says it."""
    for kw, what in ((dict(moe_fp8_dispatch=True, precision="fp8"), "moe_fp8_dispatch"), (dict(moe_route_nodes=4), "moe_route_nodes 4")):
        plan = resolved_plan(Job(**{**V3, "ep": 64, "attention_kernel": "flex", **kw}))
        with pytest.raises(PlannerError, match=f"export torchtitan: {what}"):
            export_plan(plan, "torchtitan")


def test_a_dense_model_ignores_the_key(tmp_path):
    """torchtitan: 'No effect for non-MoE models' (job_config.py l. 474-476): llama3-8b reads it as ignored."""
    p = tmp_path / "job.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = 8\n'
                 'expert_parallel_comm_backend = "deepep"\n')
    cfg = load_trainer_config(p)
    assert "moe_dispatcher" not in cfg.job
    assert any("expert_parallel_comm_backend" in x and "dense" in x for x in cfg.ignored)


@pytest.mark.parametrize("stack, sharding, source", [("megatron-deepspeed", "zero1", "sharded_moe.py"),
                                                     ("llm-foundry", "fsdp", "megablocks")])
def test_deepspeed_and_megablocks_run_alltoall_only(stack, sharding, source):
    """DeepSpeed-MoE's MOELayer (deepspeed/moe/sharded_moe.py _AllToAll) and MegaBlocks' ParallelMLP
    (megablocks/layers/all_to_all.py) exchange tokens with all_to_all_single: a DeepEP job is refused
    naming the stack's entry (before, neither stack listed its dispatchers and any was taken)."""
    job = dict(model="mixtral-8x7b", gpus=64, stack=stack, global_batch=64, seq_len=4096, tp=1, pp=1, ep=8,
               sharding=sharding)
    with pytest.raises(PlannerError) as e:
        resolve(Job(**job, moe_dispatcher="deepep"))
    assert f"stack {stack} runs alltoall" in e.value.message and source in e.value.message
    assert resolve(Job(**job, moe_dispatcher="alltoall"))[0].moe_dispatcher == "alltoall"
