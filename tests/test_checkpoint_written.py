"""The checkpoint's bytes under the precision-aware optimizer (budget.checkpoint_bytes_per_param, budget.py [5]): what
Megatron-LM @d98e8a64 writes, against what the memory model holds (memory.master_bytes [mw]).

Read at the pinned commits (budget.py [5]):
- distributed optimizer, --ckpt-format torch_dist (default), sharding type dp_reshardable (checkpointing.py l. 558):
  _get_main_param_and_optimizer_states (distrib_optimizer.py l. 1090-1117) reads TE FusedAdam.get_unscaled_state for each
  state under use_precision_aware_optimizer_no_fp8_or_ds_fp8 (l. 1108) and saves master_param as "param" (l. 1109),
  each tensor at its own dtype (l. 1977). TransformerEngine @4329ff84 fused_adam.py get_unscaled_state returns the
  int16 remainders as they are (l. 334-341: the fp32 master is NOT reconstructed) and a bf16 moment as .float()
  (l. 344-349): master 2 B, Adam's m and v 4 + 4 B, and the bf16 weights (the model's own state dict), without which the
  remainders restore nothing (fused_adam.py l. 98-101): 2 B. 2 + 8 + 2 = 12 B a parameter.
- Megatron-FSDP, --ckpt-format fsdp_dtensor (required, arguments.py l. 1169-1170): the optimizer writes its raw state
  (sharded_param_state_fsdp_dtensor, distrib_optimizer.py l. 1635-1657: bf16 m, v, 2 + 2 B) and the model's state dict
  holds the fp32 main weight shards (megatron_fsdp.py l. 1168-1173, 1408-1427): 4 B, no bf16 weights. 4 + 4 = 8 B.
Before, the job's copy was P x (bpp.master 2 + bpp.optimizer 4) = 6 B a parameter for both, and the per-GPU shard under
Megatron-FSDP came from the memory terms (4 + 4 = 8 B over 8), so their ratio (the distinct shards) was 6, not 8.

By hand, Llama 3 8B, P = 8,030,261,248 (vocab 128,256 = 128 x 1,002: no padding at tp 1), 8 GPUs, DP 8, zero1,
bf16-moments (weights 2, gradients 4, master 4 -> 2 as TE's remainders, moments 2 x 2), L8 = P / 8 = 1,003,782,656:
- distributed_optimizer: job 12 P = 96,363,134,976 B; per GPU master 2 L8 = 2,007,565,312, moments 8 L8 =
  8,030,261,248, weights 2 L8 = 2,007,565,312: zero1 holds the whole bf16 weights (explain's `weights` term, 2 P), but
  Megatron's fully parallel save (on by default) shares the replicated weights' write among the 8 data-parallel ranks
  (budget.py [8]), each about its partition's L8 elements. Before branch ckpt the shard counted the whole 2 P.
- megatron_fsdp_optim: job 8 P = 64,242,089,984 B; per GPU master 4 L8 = 4,015,130,624, moments 4 L8 = 4,015,130,624,
  no weights; distinct shards 8 P / 8 L8 = 8 (the DP degree).
- fp32 Adam (--bytes-per-param megatron, no precision-aware optimizer): the distributed optimizer 4 + 8 and the model's
  bf16 weights 2 = 14 B (budget.py [8]; 12 B before branch ckpt), Megatron-FSDP 4 + 8 = 12 B (its model state dict
  holds the fp32 main weights, no bf16 copy beside them).
"""
from __future__ import annotations

import json

import pytest

from planner.budget import checkpoint_bytes_per_param, checkpoint_shards

P = 8_030_261_248
L8 = P // 8


def _job(**kw):
    job = dict(model="llama3-8b", gpus=8, tp=1, stack="megatron", hardware="h100-sxm", global_batch=8, micro_batch=1,
               seq_len=1024, recompute="full", bytes_per_param="bf16-moments", sharding="zero1")
    job.update(kw)
    return job


@pytest.mark.parametrize("mode, master, moments, weights, job", [
    ("distributed_optimizer", 2 * L8, 8 * L8, 2 * L8, 12 * P),
    ("megatron_fsdp_optim", 4 * L8, 4 * L8, 0, 8 * P),
])
def test_precision_aware_checkpoint_bytes(explain, mode, master, moments, weights, job):
    """What each mode writes for Llama 3 8B with bf16 moments (module docstring)."""
    s, plan, est, out = explain(**_job(sharding_mode=mode))
    assert s.te_master and s.remainders
    sh = checkpoint_shards(s, plan, est)
    assert float(sh.size.master_weights_bytes) == pytest.approx(master, rel=1e-12)
    assert float(sh.size.optimizer_bytes) == pytest.approx(moments, rel=1e-12)
    assert float(sh.size.extra_bytes) == pytest.approx(weights, rel=1e-12)
    assert sh.job_bytes == pytest.approx(job, rel=1e-12)
    # the memory model holds the moments at 2 B each either way; the master as memory.master_bytes says
    t = out["memory"]["terms"]
    assert t["adam"] == pytest.approx(4 * L8, rel=1e-12)
    assert t["master_weights"] == pytest.approx(master, rel=1e-12)


def test_megatron_fsdp_distinct_shards_is_dp():
    """Megatron-FSDP: one copy is the 8 GPUs' shards exactly (8 P / 8 L8), not 6 as with the job-level 2 B master."""
    from planner.explain import evaluate
    from planner.plan import resolve
    from planner.schema import Job

    s, plan, _ = resolve(Job(**_job(sharding_mode="megatron_fsdp_optim")))
    assert checkpoint_shards(s, plan, evaluate(s, plan)).distinct == pytest.approx(8.0, rel=1e-12)


@pytest.mark.parametrize("mode, weights", [("distributed_optimizer", 2.0), ("megatron_fsdp_optim", 0.0)])
def test_fp32_adam(explain, mode, weights):
    """fp32 Adam without the precision-aware optimizer: master 4 + moments 8 B a parameter, and under torch_dist the
    model's bf16 weights, 2 B (budget.py [8]); Megatron-FSDP's model state dict is its fp32 main weights."""
    s, plan, _, _ = explain(**_job(sharding_mode=mode, bytes_per_param="megatron"))
    assert not s.te_master
    ck = checkpoint_bytes_per_param(s, plan)
    assert (float(ck.master), float(ck.optimizer), float(ck.weights)) == (4.0, 8.0, weights)


def test_budget_cli_reports_the_written_bytes(cli):
    """`planner budget` on the distributed optimizer: job 12 P, the bf16 weights among the saved terms, the rank's share
    of them (2 L8) in its shard."""
    r = cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--sharding", "distributed_optimizer",
            "--bytes-per-param", "bf16-moments", "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024",
            "--recompute", "full", "--tokens", "1e9", "--mc-runs", "0", "--format", "json")
    assert r.exit_code == 0, r.stderr
    ck = json.loads(r.stdout)["checkpoint"]
    assert ck["saved_terms"] == "master_weights + adam + weights"
    assert ck["job_bytes"] == pytest.approx(12 * P, rel=1e-12)
    assert ck["bytes_per_gpu"] == pytest.approx(2 * L8 + 8 * L8 + 2 * L8, rel=1e-12)


# ---------------------------------------------------------------- each stack's own bytes (budget.py [8])
# Llama 3 70B: 70,553,706,496 parameters at the catalog's vocabulary (128,256 rows); megatron and megatron-deepspeed pad
# it to a multiple of 128 x tp = 1,024 at tp 8, 129,024 rows: 768 x 8,192 x 2 = 12,582,912 more (stack_db vocab_padding)
N70 = 70_553_706_496
N70_PADDED = N70 + 768 * 8192 * 2
PLAN_70B = ("--model", "llama3-70b", "--gpus", "4096", "--tp", "8", "--tokens", "15e12", "--mc-runs", "0")


@pytest.mark.parametrize("stack, sharding, n, per_param, contents", [
    # Megatron torch_dist, distributed optimizer: bf16 model weights 2 + fp32 main param 4 + exp_avg, exp_avg_sq 8
    ("megatron", "zero1", N70_PADDED, 14, "Megatron-LM dist-ckpt"),
    # Megatron-FSDP (fsdp_dtensor): its fp32 main weights in the model's state dict, the moments: the seed's 846 GB
    ("megatron", "fsdp", N70_PADDED, 12, "Megatron-LM dist-ckpt"),
    # Megatron-Bridge inherits megatron's section (no vocabulary padding on Bridge)
    ("megatron-bridge", "zero1", N70, 14, "Megatron-LM dist-ckpt"),
    # torchtitan DCP: FSDP2's fp32 sharded parameters (the master) and the fp32 moments: the seed's 846 GB
    ("torchtitan", "fsdp", N70, 12, "torch.distributed.checkpoint"),
    # DeepSpeed: rank 0's module file (2 B) beside the optimizer files (4 + 8 B); at ZeRO-3 placeholders
    ("megatron-deepspeed", "zero1", N70_PADDED, 14, "DeepSpeed engine.save_checkpoint"),
    ("megatron-deepspeed", "fsdp", N70_PADDED, 12, "DeepSpeed engine.save_checkpoint"),
    # Meta's code is not public: the seed's convention, stated as the stack's data
    ("llama3-meta", "zero2", N70, 12, "Meta's Llama 3 checkpointing"),
])
def test_each_stack_writes_its_own_bytes(cli, stack, sharding, n, per_param, contents):
    """Llama 3 70B on 4,096 GPUs, tp 8, fp32 master and moments (the stacks' default bytes_per_param): one copy is n x
    the stack's bytes a parameter. 12 B: 12 x 70,566,289,408 = 846,795,472,896 B (megatron) and 12 x 70,553,706,496 =
    846,644,477,952 B (the seed's "846 GB"); 14 B: 987,928,051,712 B (megatron, megatron-deepspeed), 987,751,890,944 B
    (megatron-bridge). Before branch ckpt every stack wrote 12 B."""
    r = cli("budget", *PLAN_70B, "--stack", stack, "--sharding", sharding, "--format", "json")
    js = json.loads(r.stdout)
    assert r.exit_code == (0 if js["fits"] else 1), r.stderr  # a plan that does not fit: printed, exit 1
    assert js["params"] == n
    ck = js["checkpoint"]
    assert ck["job_bytes"] == pytest.approx(per_param * n, rel=1e-12)
    assert ck["contents"].startswith(contents)
    assert not any(a.startswith("checkpoint contents") for a in js.get("assumed", []))


def test_megatron_rank_writes_its_share_of_the_weights(cli):
    """Megatron's fully parallel save shares the replicated bf16 weights' write among the dp x cp ranks (budget.py [8]),
    whole tensors each (budget.py [9]): Llama 3 70B, tp 8, dp 512, zero1: a rank's optimizer partition is (4 + 8) B x
    N_padded / 4,096 (within 2e-3: the norms, replicated over tp, make a rank's part a little more than N / 4,096), but
    the word embedding's tensor-parallel shard, 129,024 / 8 x 8,192 = 132,120,576 elements, is one ShardedTensor that
    one rank of its dp x cp group writes whole: 264,241,152 B, where the even share was 2 N_padded / 4,096 = 34,456,196 B
    (before branch ckptmoe). DeepSpeed's data-parallel rank 0 writes its whole model-parallel part's weights,
    2 N_padded / 8, beside its 12 B partition."""
    meg = json.loads(cli("budget", *PLAN_70B, "--stack", "megatron", "--sharding", "zero1", "--format", "json").stdout)
    ck = meg["checkpoint"]
    assert ck["weights_bytes_per_gpu"] == 2 * 129_024 * 8192 // 8 == 264_241_152
    assert ck["master_weights_bytes_per_gpu"] + ck["optimizer_bytes_per_gpu"] == pytest.approx(
        12 * N70_PADDED / 4096, rel=2e-3)
    assert ck["copy_s"] == pytest.approx(ck["bytes_per_gpu"] / 64e9, rel=1e-12)  # PCIe Gen5 x16, the host copy
    assert ck["write_s"] == pytest.approx(14 * N70_PADDED / 2e12, rel=1e-12)  # one copy over 2 TB/s: not the rank's
    ds = json.loads(cli("budget", *PLAN_70B, "--stack", "megatron-deepspeed", "--sharding", "zero1", "--format",
                        "json").stdout)["checkpoint"]
    assert ds["weights_bytes_per_gpu"] == pytest.approx(2 * N70_PADDED / 8, rel=2e-3)
    assert ds["master_weights_bytes_per_gpu"] + ds["optimizer_bytes_per_gpu"] == pytest.approx(
        12 * N70_PADDED / 4096, rel=2e-3)


def test_torchtitan_8b_is_master_and_moments(cli):
    """Llama 3 8B on 8 GPUs, torchtitan FSDP2: 4 + 8 = 12 B a parameter, 12 L8 = 12,045,391,872 B a rank, no weights."""
    r = cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", "torchtitan", "--sharding", "fsdp",
            "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024", "--tokens", "1e9", "--mc-runs", "0",
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    ck = json.loads(r.stdout)["checkpoint"]
    assert ck["job_bytes"] == pytest.approx(12 * P, rel=1e-12)
    assert ck["bytes_per_gpu"] == pytest.approx(12 * L8, rel=1e-12)
    assert ck["weights_bytes_per_gpu"] == 0.0 and ck["saved_terms"] == "master_weights + adam"


def test_a_stack_without_a_checkpoint_section_is_assumed(cli, tmp_path):
    """A user's stack file with `checkpoint: null`: the seed's convention (12 B under megatron's zero1, not 14 B), and
    budget says so in its assumed list and the checkpoint's contents."""
    p = tmp_path / "mine.yaml"
    p.write_text("extends: megatron\nname: mine\nversion: mine\ncheckpoint: null\n")
    r = cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", str(p), "--sharding", "zero1",
            "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024", "--recompute", "full", "--tokens", "1e9",
            "--mc-runs", "0", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["checkpoint"]["job_bytes"] == pytest.approx(12 * P, rel=1e-12)
    assert js["checkpoint"]["contents"].startswith("the seed's convention")
    assert [a for a in js["assumed"] if a.startswith("checkpoint contents")] == [
        f"checkpoint contents: stack file {p.resolve()} (extends megatron) has no checkpoint section: the seed's "
        "convention (sec. 9.2): the master weights and Adam's moments, the working weights only where there is no fp32 "
        "master"]


def test_a_stack_without_runs_cannot_name_the_plans_mode(cli, free_stack):
    """The megatron stack without `runs` (conftest free_stack): its checkpoint section names modes, but there is no
    runs.sharding to find the plan's among, so the working weights are not counted (12 P) and budget says so."""
    r = cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", free_stack, "--sharding", "zero1",
            "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024", "--recompute", "full", "--tokens", "1e9",
            "--mc-runs", "0", "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["checkpoint"]["job_bytes"] == pytest.approx(12 * P, rel=1e-12)
    assert any(a.startswith("checkpoint contents:") and "has no runs.sharding" in a for a in js["assumed"])


@pytest.mark.parametrize("section, needles", [
    ("  format: x\n  model_weights_modes: [zero1]\n  model_weights_writer: replicas_share\n  sources: [a]\n",
     ("checkpoint.model_weights_modes ['zero1']: not sharding modes of runs.sharding", "distributed_optimizer")),
    ("  format: x\n  model_weights_modes: []\n  model_weights_writer: replicas_share\n  saves_master: true\n"
     "  sources: [a]\n", ("checkpoint.saves_master", "valid fields: format, model_weights_modes")),
    ("  format: x\n  model_weights_modes: []\n  model_weights_writer: rank0\n  sources: [a]\n",
     ("checkpoint.model_weights_writer", "replicas_share")),
    ("  format: x\n  model_weights_modes: []\n  model_weights_writer: replicas_share\n  state_dict: full\n"
     "  sources: [a]\n", ("checkpoint.state_dict", "full_rank0")),
    ("  format: x\n  model_weights_modes: []\n  model_weights_writer: replicas_share\n  enabled_by: ''\n"
     "  sources: [a]\n", ("checkpoint.enabled_by",)),
])
def test_bad_checkpoint_sections(cli, tmp_path, section, needles):
    """schema.CheckpointSpec: extra fields forbidden, mode names checked against runs.sharding, the writer a choice."""
    from conftest import assert_one_error

    p = tmp_path / "bad.yaml"
    p.write_text("extends: megatron\nname: mine\nversion: mine\ncheckpoint:\n" + section)
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", str(p))
    assert_one_error(r, str(p), *needles)


# ---------------------------------------------------------------- who writes, and whether by default (budget.py [10])
MPT7B = ("--model", "mpt-7b", "--gpus", "64", "--sharding", "fsdp", "--tokens", "1e12", "--mc-runs", "0", "--format",
         "json")


def test_llm_foundry_rank0_writes_the_full_state(cli):
    """Composer 0.17's default FSDP state_dict_type 'full': global rank 0 gathers the fp32 parameters and
    DecoupledAdamW's fp32 moments and writes them alone: its shard is the job's whole copy, 12 N, all of it through
    its host link (12 N / 64 GB/s), one shard (the write 12 N / 2 TB/s as before). Before branch ckptmoe each of the
    64 FSDP ranks was priced its shard, 12 N / 64, and the pause was the write's."""
    js = json.loads(cli("budget", *MPT7B, "--stack", "llm-foundry").stdout)
    n, ck = js["params"], js["checkpoint"]
    assert ck["job_bytes"] == 12 * n
    assert ck["bytes_per_gpu"] == 12 * n and ck["weights_bytes_per_gpu"] == 0.0
    assert (ck["master_weights_bytes_per_gpu"], ck["optimizer_bytes_per_gpu"]) == (4 * n, 8 * n)
    assert ck["copy_s"] == pytest.approx(12 * n / 64e9, rel=1e-12)
    assert ck["write_s"] == pytest.approx(12 * n / 2e12, rel=1e-12)
    assert ck["pause_s"] == ck["copy_s"]  # synchronous: the slower of the two
    assert ck["writer"] == "global rank 0, the full state dict"
    assert ck["written_by_default"] is False and ck["enabled_by"].startswith("a save_folder")
    assert any(a.startswith("checkpoint enabled: stack_db llm-foundry writes no periodic checkpoint unless told to (on with: a save_folder") and "priced as if enabled" in a
               for a in js["assumed"]), js["assumed"]


def test_litgpt_benchmark_writes_the_jobs_bytes_on_rank0(cli):
    """litgpt's pretrain (Fabric, state_dict_type 'full') at the entry's pure-bf16: the bf16 parameters (no fp32
    master: written, 2 B) and AdamW's bf16 moments (2 + 2 B), 6 N on global rank 0 alone; the benchmark script itself
    saves none (enabled_by)."""
    js = json.loads(cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", "litgpt-benchmark",
                        "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024", "--tokens", "1e9",
                        "--mc-runs", "0", "--format", "json").stdout)
    ck = js["checkpoint"]
    assert ck["job_bytes"] == 6 * P and ck["bytes_per_gpu"] == 6 * P
    assert (ck["weights_bytes_per_gpu"], ck["master_weights_bytes_per_gpu"], ck["optimizer_bytes_per_gpu"]) == (
        2 * P, 0.0, 4 * P)
    assert ck["written_by_default"] is False and "benchmark_litgpt.py" in ck["enabled_by"]


@pytest.mark.parametrize("stack, default, text", [
    ("torchtitan", False, "[checkpoint] enable = true"),
    ("torchtitan-0.3", False, "enable = true"),
    ("megatron", True, None),
    ("megatron-deepspeed", True, None),
])
def test_checkpoint_enabled_by_default(cli, stack, default, text):
    """torchtitan writes no checkpoint unless [checkpoint] enable (default false): budget keeps the figures (priced as
    if enabled: a run without checkpoints would restart from step 0 at every failure) and says so in its JSON, its
    assumed list and its table; a stack whose section names no enabled_by says nothing."""
    args = ("budget", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--stack", stack, "--sharding", "fsdp",
            "--global-batch", "8", "--micro-batch", "1", "--seq-len", "1024", "--tokens", "1e9", "--mc-runs", "0")
    r = cli(*args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    ck = js["checkpoint"]
    assert ck["written_by_default"] is default and ck["writer"] == "every rank, its shard"
    lines = [a for a in js.get("assumed", []) if a.startswith("checkpoint enabled:")]
    table = " ".join(cli(*args).stdout.replace("│", " ").split())  # the table's note column, its wrapped lines joined
    if default:
        assert ck["enabled_by"] is None and lines == []
        assert "default writes none" not in table
    else:
        assert text in ck["enabled_by"] and len(lines) == 1 and text in lines[0]
        assert "priced as if enabled" in lines[0]
        assert "if enabled: the stack's default writes none" in table
        assert ck["job_bytes"] == 12 * P and ck["bytes_per_gpu"] == 12 * L8  # the figures kept


@pytest.mark.parametrize("section, stated, line", [
    ("[checkpoint]\nenable = true\n", True, False),
    ("[checkpoint]\nenable = false\n", False, True),
    ("", None, True),
])
def test_torchtitan_config_that_enables_checkpoints(cli, tmp_path, section, stated, line):
    """A torchtitan TOML whose [checkpoint] enable is true (job_config.py @e347b1e5e l. 487-489) runs the checkpoint
    budget prices: the "priced as if enabled" line and the table's "if enabled" go; false or unstated keep them
    (budget.py [10]); checkpoint.enabled_in_config says what the file states. The test config's own [checkpoint]
    section (enable_checkpoint, an older spelling torchtitan @e347b1e5e does not read) is replaced."""
    from pathlib import Path

    base = (Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml").read_text()
    head, _, rest = base.partition("[checkpoint]\n")
    rest = rest[rest.index("\n[") + 1:] if "\n[" in rest else ""
    p = tmp_path / "titan.toml"
    p.write_text(head + section + rest)
    args = ("budget", str(p), "--gpus", "8", "--tokens", "1e9", "--mc-runs", "0")
    r = cli(*args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["checkpoint"]["enabled_in_config"] is stated
    assert js["checkpoint"]["written_by_default"] is False
    lines = [a for a in js.get("assumed", []) if a.startswith("checkpoint enabled:")]
    assert len(lines) == (1 if line else 0)
    table = " ".join(cli(*args).stdout.replace("│", " ").split())
    assert ("if enabled: the stack's default writes none" in table) is line
