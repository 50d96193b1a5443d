"""planner/plan.py: the interleaved schedule's micro-batch rule per stack (stack_db runs.schedules
microbatches): Megatron-LM's multiple of pp, torch.distributed.pipelining's rounds (torchtitan),
Llama 3's any count."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from planner.errors import PlannerError
from planner.explain import evaluate
from planner.pipeline import microbatch_group
from planner.plan import interleaved_m_broken, resolve
from planner.schema import Job
from planner.catalog import load_stack
from planner.memory import STAGE_FIRST


def _torch_accepts(p: int, m: int) -> bool:
    """torch ScheduleInterleaved1F1B.__init__: number_of_rounds = max(1, m // pp), m % rounds == 0."""
    return m % max(1, m // p) == 0


def test_torch_rounds_group_is_microbatch_group():
    """For every count torch accepts (pp 2-64, m below 40 pp), the N contiguous micro-batches torch
    runs a virtual stage for, microbatches_per_round = m // rounds, is pipeline.microbatch_group's N
    (the smallest bubble-free group): the in-flight counts and the bubble the planner prices for
    Megatron's groups hold for torch's. And the rule refuses exactly the counts torch refuses."""
    torchtitan = load_stack("torchtitan")
    checked = refused = 0
    for p in range(2, 65):
        ms = list(range(1, 40 * p))
        broken = interleaved_m_broken(torchtitan, ms, p)
        for m, b in zip(ms, broken):
            assert bool(b) == (not _torch_accepts(p, m)), (p, m)
            if _torch_accepts(p, m):
                assert int(microbatch_group(p, m)) == m // max(1, m // p), (p, m)
                checked += 1
            else:
                refused += 1
    assert checked > 10_000 and refused > 10_000


def test_the_three_rules_by_hand():
    """pp 4: Megatron-LM takes 8 and 12 only; torch takes 3 (one round of 3), 6 (one round of 6),
    8, 10 (2 rounds of 5), 12, 15 (3 of 5), not 9 (2 rounds), 14 (3 rounds) or 18 (4 rounds);
    llama3-meta takes every count."""
    ms = [3, 6, 8, 9, 10, 12, 14, 15, 18]
    assert [bool(x) for x in interleaved_m_broken(load_stack("megatron"), ms, 4)] == [
        True, True, False, True, True, False, True, True, True]
    assert [bool(x) for x in interleaved_m_broken(load_stack("torchtitan"), ms, 4)] == [
        False, False, False, True, False, False, True, False, True]
    assert not any(interleaved_m_broken(load_stack("llama3-meta"), ms, 4))


JOB = dict(model="llama3-8b", gpus=32, tp=2, pp=4, vpp=2, micro_batch=1, seq_len=8192, sharding="fsdp")


def test_torchtitan_runs_ten_microbatches_on_four_stages_megatron_does_not():
    """Llama 3 8B on TP 2 x PP 4 x vpp 2 x DP 4: a global batch of 40 is m = 10 a pipeline. torchtitan
    (torch's 2 rounds of N = 5) runs it: stage 0 holds 2(p - 1) + (v - 1) N + 1 = 12 chunk-micro-
    batches, as at m = 6 (one round of 6, capped at m v = 12) and one more than m = 8 (N = 4: 11);
    36 (m = 9: 2 rounds, 9 % 2 = 1) is refused naming torch's rule; megatron refuses 40."""
    acts = {}
    for gbs in (32, 24, 40):
        s, p, _ = resolve(Job(**JOB, global_batch=gbs, stack="torchtitan"))
        m = int(p.microbatches)
        acts[m] = float(evaluate(s, p).stages[STAGE_FIRST]["layer_activations"])
    assert acts[6] == pytest.approx(acts[10], rel=1e-12)
    assert acts[10] / acts[8] == pytest.approx(12 / 11, rel=1e-12)
    with pytest.raises(PlannerError, match=r"splits 9 micro-batches per pipeline into max\(1, 9 // pp=4\) = 2 rounds, "
                                           r"and 9 is not a multiple of 2 \(torch.distributed.pipelining"):
        resolve(Job(**JOB, global_batch=36, stack="torchtitan"))
    with pytest.raises(PlannerError, match=r"divisible by pp=4 on stack megatron"):
        resolve(Job(**{**JOB, "sharding": "zero1"}, global_batch=40, stack="megatron"))


# ------------------------------------------------- Megatron's micro-batch group (Job.microbatch_group)
def test_megatron_group_rule_by_hand():
    """Megatron-LM @d98e8a64 forward_backward_pipelining_with_interleaving: N in [pp, m] and
    m % N 0 or >= pp. pp 4, m 12: N 4, 6, 7 (12 % 7 = 5), 8 (4) and 12 run; 3 (below pp), 5
    (12 % 5 = 2), 9 (3), 10 (2), 11 (1) and 13 (above m) do not. pp 4, m 5 (the CI's
    tunable_overlap case): N 5 runs, where N = pp (no group given) refuses m 5."""
    megatron = load_stack("megatron")
    ns = list(range(3, 14))
    assert [n for n, b in zip(ns, interleaved_m_broken(megatron, 12, 4, ns)) if not b] == [4, 6, 7, 8, 12]
    assert [bool(x) for x in interleaved_m_broken(megatron, [5, 5, 8], 4, [5, 0, 0])] == [False, True, False]
    # without a group: today's rule exactly
    assert [bool(x) for x in interleaved_m_broken(megatron, [3, 8, 9, 12], 4, 0)] == [True, False, True, False]


MBG = dict(model="llama3-8b", gpus=4, pp=4, vpp=2, micro_batch=1, global_batch=12, seq_len=4096)


def test_microbatch_group_moves_memory_not_bubble():
    """Llama 3 8B on PP 4 x vpp 2 (32 layers: 8 chunks of 4), m 12. Stage s warms up with
    2(p - s - 1) + (v - 1) N forwards and holds one more at its peak (schedules.py
    get_pp_rank_microbatches; pipeline.py [10]), each group of N micro-batches running chunk 0
    then chunk 1:
      N 4: stage 0 F = 6 + 4 + 1 = 11: chunk 0 4 + 3, chunk 1 4 -> (7, 4), 44 layer-micro-batches;
           stage 1 F = 9: (5, 4), 36; stage 3 F = 5: (4, 1).
      N 6: stage 0 F = 13: (6 + 1, 6) = (7, 6), 52; stage 1 F = 11: (6, 5), 44; stage 3 F = 7: (6, 1).
    Every stage holds (v - 1)(N - p) = 2 chunk-micro-batches x 4 layers = 8 layer-micro-batches
    more, and nothing else moves: the memory grows by exactly that, the bubble stays (p - 1)/(v m)
    = 3/24 (the simulator's for both groups), and no group given is N = pp = 4."""
    from planner.explain import to_json
    from planner.pipeline import simulate

    res = {}
    for n in (None, 4, 6):
        s, p, _ = resolve(Job(**MBG, microbatch_group=n))
        res[n] = to_json(s, p, evaluate(s, p))
    assert res[4]["plan"]["microbatch_group"] == 4 and "microbatch_group" not in res[None]["plan"]
    st4, st6 = res[4]["memory"]["stages"], res[6]["memory"]["stages"]
    assert res[None]["memory"]["stages"] == st4
    unit = st4["first"]["activations_bytes"] / 44  # one layer's activations for one micro-batch
    assert st4["middle"]["activations_bytes"] == pytest.approx(36 * unit, rel=1e-12)
    assert st6["first"]["activations_bytes"] == pytest.approx(52 * unit, rel=1e-12)
    assert st6["middle"]["activations_bytes"] == pytest.approx(44 * unit, rel=1e-12)
    for stage in ("first", "middle", "last"):
        for k in ("activations_bytes", "total_bytes"):
            assert st6[stage][k] - st4[stage][k] == pytest.approx(8 * unit, rel=1e-9), (stage, k)
    assert res[6]["time"]["bubble_s"] == res[4]["time"]["bubble_s"] == res[None]["time"]["bubble_s"]
    for n in (4, 6):
        sim = simulate(4, 12, "interleaved", vpp=2, group=n)
        assert sim.bubble == Fraction(3, 24)
        assert list(sim.peak_chunks) == [11 + 2 * (n == 6), 9 + 2 * (n == 6), 7 + 2 * (n == 6), 5 + 2 * (n == 6)]


def test_microbatch_group_errors_name_n_m_pp_and_the_source():
    with pytest.raises(PlannerError, match=r"microbatch_group N=5 contiguous micro-batches per virtual stage, m=12 micro-"
                                           r"batches per pipeline, pp=4: m % N = 2: a last group of 2 micro-batches, fewer "
                                           r"than pp=4; .*schedules.py forward_backward_pipelining_with_interleaving") as e:
        resolve(Job(**MBG, microbatch_group=5))
    assert e.value.hint == "use microbatch_group (--microbatch-group) 4, 6, 7, 8"
    with pytest.raises(PlannerError, match=r"N=3 is below pp=4"):
        resolve(Job(**MBG, microbatch_group=3))
    with pytest.raises(PlannerError, match=r"N=13 exceeds m=12"):
        resolve(Job(**MBG, microbatch_group=13))
    # a Megatron setting: refused on torch's rounds, Llama 3's schedule and a stack without interleaving
    for stack, why in (("torchtitan", "groups its micro-batches by torch's rounds"),
                       ("llama3-meta", "is Llama 3's, whose N the paper sets freely"),
                       ("megatron-deepspeed", "stack megatron-deepspeed has no interleaved schedule")):
        with pytest.raises(PlannerError, match=r"microbatch_group 4 is Megatron-LM's --microbatch-group-size-per-virtual-"
                                               r"pipeline-stage; .*" + why):
            resolve(Job(**{**MBG, "vpp": 1}, microbatch_group=4, stack=stack, sharding="fsdp"))


def test_microbatch_group_cli_and_fit_counts(cli, tmp_path):
    """explain/check/fit take --microbatch-group; a bad value exits 2 naming the field; fit's count
    line names the rule it applied: Megatron's group, Megatron's pp without one, torch's rounds."""
    from tests.conftest import assert_one_error

    base = ["--model", "llama3-8b", "--pp", "4", "--vpp", "2", "--micro-batch", "1", "--seq-len", "4096"]
    r = cli("explain", *base, "--gpus", "4", "--global-batch", "12", "--microbatch-group", "6", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["microbatch_group"] == 6
    assert_one_error(cli("explain", *base, "--gpus", "4", "--global-batch", "12", "--microbatch-group", "0"),
                     "microbatch_group", "greater than 0")
    job = tmp_path / "job.yaml"
    job.write_text("".join(f"{k}: {v}\n" for k, v in {**MBG, "microbatch_group": 6}.items()))
    r = cli("check", job)
    assert r.exit_code == 0 and "PASS" in r.stdout, r.stderr
    assert_one_error(cli("check", job, "--microbatch-group", "5"),
                     "m % N = 2", "hint: use microbatch_group (--microbatch-group) 4, 6, 7, 8")
    fit = ["fit", *base, "--gpus", "16", "--global-batch", "48", "--top", "1"]
    r = cli(*fit, "--microbatch-group", "5")  # m 48, 24, 12 on dp 1, 2, 4: 48 % 5 = 3 and 12 % 5 = 2 refused
    assert r.exit_code == 0, r.stderr
    assert "interleaved schedule with micro-batch group 5 below pp or above m, or m % 5 in 1 .. pp - 1 (Megatron's " \
           "--microbatch-group-size-per-virtual-pipeline-stage)" in r.stdout
    assert "--dp 2 --micro-batch 1 --global-batch 48" in r.stdout and "--microbatch-group 5" in r.stdout  # row 1's command
    r = cli(*fit[:-4], "--global-batch", "40", "--top", "1")
    assert "interleaved schedule with micro-batches per step not divisible by pp" in r.stdout
    r = cli(*fit[:-4], "--global-batch", "36", "--top", "1", "--stack", "torchtitan")
    assert "interleaved schedule with micro-batches per step not a multiple of their rounds max(1, m // pp) " \
           "(torch's ScheduleInterleaved1F1B)" in r.stdout and "not divisible by pp" not in r.stdout


def test_microbatch_group_in_the_ep_overlap_alone_passes():
    """The combined 1F1B's passes without a partner on the step's path (moe.alone_pass_share): the last
    stage's interleaved warm-up (v - 1) N + 1 plus the fill's p - 1, of the m v + p - 1 chunk passes:
    pp 4, vpp 2, m 12: (5 + 3) / 27 with N = pp (no group), (7 + 3) / 27 with N 6."""
    from planner.moe import alone_pass_share
    from planner.plan import PlanArrays

    plan = PlanArrays(tp=1, cp=1, pp=4, vpp=2, dp=8, mbs=1, gbs=96, seq=4096, sharding=0, shard=8, recompute=0, sp=0,
                      schedule=2, precision=0, ep=8, mbg=[0, 6])
    assert alone_pass_share(plan, 12).tolist() == [8 / 27, 10 / 27]


def test_a_loss_end_no_split_holds_is_refused(cli):
    """loss_layers_in_pipeline_split N is held by the last of k >= 2 chunks of U = L + e + N units only if
    N <= ceil(U / k) <= ceil(U / 2), i.e. N <= L + e + 1 (plan._loss_end_holds): Llama 3 8B (32 layers, no embedding
    counted) takes N = 33 and refuses 34 in explain, fit and export alike. Found by the cli-options fuzz kind (seed 70,
    `export --model llama3-8b --gpus 8 --stack torchtitan --format megatron-bridge --loss-layers-in-pipeline-split
    2147483647`): at pp 1 the count sized pipeline._Configs' dense key, a 42 GiB array (MemoryError); `fit` refused
    its search space as too large, naming vpp."""
    from conftest import assert_one_error

    base = ("--model", "llama3-8b", "--gpus", "8", "--loss-layers-in-pipeline-split")
    for cmd, extra in (("explain", ()), ("fit", ("--top", "1")), ("export", ("--format", "megatron"))):
        assert_one_error(cli(cmd, *base, "34", *extra), "loss_layers_in_pipeline_split 34: more than the 32 layers of "
                         "llama3-8b + 1: no pipeline split of two or more chunks holds")
        assert_one_error(cli(cmd, *base, "2147483647", *extra), "loss_layers_in_pipeline_split 2147483647")
    assert cli("explain", *base, "33").exit_code == 0
    # the embedding counted: the bound is 34, so 35 is refused naming it
    assert_one_error(cli("explain", *base, "35", "--account-for-embedding-in-pipeline-split"),
                     "loss_layers_in_pipeline_split 35: more than the 32 layers of llama3-8b + 2")


def test_etp_on_a_model_without_experts_is_refused_where_the_stack_builds_no_expert_grid():
    """Megatron-DeepSpeed reads --enable-expert-tensor-parallelism only where a layer builds DeepSpeed-MoE
    (transformer.py @f4157bea l. 1065-1082: num_experts <= 1 builds a dense ParallelMLP), and DeepSpeed creates the
    expert groups in the MoE module alone (deepspeed/moe/layer.py l. 89-103): a model without experts has no expert
    TP, and no file of the stack can say one. `check` of the job file model megatron-gpt-1.7b, gpus 8, stack
    megatron-deepspeed, sharding zero1, global_batch 16, seq_len 2048, etp 2 (fuzz seed 98, job-fields) passed, and
    its plan exported as megatron-deepspeed (or deepspeed) read back as etp 1 (the file's tp). Now refused, naming
    the stack field (runs.expert_tensor_parallel_moe_only); etp = tp passes; on the megatron stack, whose
    initialize_model_parallel builds the expert grid whatever the model, etp 2 still resolves."""
    from planner.cli.export import check_readback
    from planner.explain import to_json
    from planner.trainers.export import export_plan

    job = dict(model="megatron-gpt-1.7b", gpus=8, stack="megatron-deepspeed", sharding="zero1", global_batch=16,
               seq_len=2048)
    with pytest.raises(PlannerError, match=r"etp 2 differs from tp 1, but megatron-gpt-1\.7b has no experts.*"
                                           r"runs\.expert_tensor_parallel_moe_only") as e:
        resolve(Job(**job, etp=2))
    assert e.value.hint.startswith("leave etp out")
    resolve(Job(**job, etp=1))  # etp = tp: what the file reads back
    s, p, _ = resolve(Job(**job, tp=2, etp=2))
    d = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(d["plan"], "megatron-deepspeed")
    check_readback(d, "megatron-deepspeed", text)  # raises where the read-back differs
    assert load_stack("megatron-deepspeed").runs.expert_tensor_parallel_moe_only
    assert not load_stack("megatron").runs.expert_tensor_parallel_moe_only
    _, p, _ = resolve(Job(**{**job, "stack": "megatron"}, etp=2))
    assert int(p.etp) == 2
