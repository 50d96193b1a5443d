"""torchtitan 0.3.0 start-up checks of its own options (issue 22, rule87): codes 87-89, the CP load balancer, and main's
attention module deciding the kernel priced.

Sources, pytorch/torchtitan release/0.3 @4f9e9a47d unless said:
  config/configs.py ParallelismConfig.__post_init__ l. 262-266: context_parallel_load_balancer == "" raises ValueError
      ('cannot be an empty string. Use None to disable load balancing.'); l. 267-277: enable_fsdp_symm_mem with
      torch.version.hip None and torch.cuda.get_device_capability() < (9, 0) raises ValueError -> rule 87
      TORCHTITAN_FSDP_SYMM_MEM_SM90. Hand: a100 "8.0" < (9, 0) refused; h100 "9.0" runs; mi300x gives no CUDA
      capability (ROCm: hip set, not checked) runs.
  trainer.py Trainer.Config.__post_init__ l. 143-153: spmd_backend "spmd_types" and debug.spmd_typechecking and
      pipeline_parallel_degree > 1 -> ValueError: rule 88 TORCHTITAN_SPMD_TYPECHECK_PP. l. 155-167: the same with
      SelectiveAC.Config and a FlexAttention.Config in the model -> rule 89 TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX. Hand:
      pp 2 refused, pp 1 runs; recompute selective with attn_backend flex (0.3's default) refused, full / none run,
      selective over varlen runs, and spmd_backend partial_dtensor turns the checks off (trainer.py l. 605-610).
  distributed/context_parallel/api.py cp_shard l. 217-264: load balancers headtail / ptrr, None none, any other name
      ValueError at the first step under CP. Without load balancing rank r of cp holds queries [r s/cp, (r+1) s/cp),
      whose causal work is (s/cp)^2 (r + 1/2); the last rank's (s/cp)^2 (cp - 1/2) over the balanced (s/cp)^2 cp / 2
      is (2 cp - 1) / cp: 1.5 at cp 2, 1.75 at cp 4 (priced: job field cp_load_balance, tests/test_cp_balance.py).
  main @e347b1e5e torchtitan/models/llama3/model/model.py Attention.__init__ l. 212-222: attn_type flex builds
      FlexAttentionWrapper, so --attention-backend flex is priced as the flex kernel, not the stack's flash2 (before: the
      same plan with --attention-kernel flex differed: 240.3 ms vs 236.1 ms a step, llama3-8b on 8 H100).
A job that passes is priced as without the switch (none of them prices a byte or a second).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_one_error, resolve_verdict
from planner.catalog import load_stack
from planner.errors import PlannerError
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, rules_for
from planner.trainers import load_trainer_config

BASE = dict(model="llama3-8b", gpus=8, global_batch=8, seq_len=4096, sharding="fsdp", stack="torchtitan-0.3")
SYMM = "TORCHTITAN_FSDP_SYMM_MEM_SM90"
PP = "TORCHTITAN_SPMD_TYPECHECK_PP"
SAC = "TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX"
SRC_SYMM = "torchtitan/config/configs.py ParallelismConfig.__post_init__ l. 267-277"
SRC_PP = "torchtitan/trainer.py Trainer.Config.__post_init__ l. 143-153"
SRC_SAC = "torchtitan/trainer.py Trainer.Config.__post_init__ l. 155-167"


def _verdict(**job):
    return resolve_verdict(**{**BASE, **job})


def _priced(**job):
    settings, plan, warnings = resolve(Job(**{**BASE, **job}))
    est = evaluate(settings, plan)
    return float(est.memory.total), float(est.step_s), warnings


def _line(tmp_path, extra: str, config: str = "llama3_8b", name: str = "run.sh"):
    p = tmp_path / name
    p.write_text(f"#!/usr/bin/bash\nMODULE=llama3 CONFIG={config} NGPU=8 ./run_train.sh --training.local_batch_size 1 "
                 f"--training.seq_len 4096 {extra}\n")
    return p


def test_codes_and_stack_data():
    """87, 88, 89 follow TORCHTITAN_VARLEN_CP (86) in the torchtitan set; only 0.3 has the two options."""
    assert (CODES[SYMM], CODES[PP], CODES[SAC]) == (87, 88, 89)  # the newest code: tests/test_startup_codes.py; detmode: 91-93, fuzz99: 96, 97: TORCHTITAN03_STAGE_LISTS (FIXED_CODE_RULES)  # 90: ttchecks' ptrr rule
    keys = {r.key for _, r in rules_for(load_stack("torchtitan-0.3"))}
    assert {SYMM, PP, SAC} <= keys
    # main has neither option (runs.fsdp_symm_mem / spmd_typechecking null), so the three checks of them are not its rules
    # (StartupRule.option; ttchecks): listed there they could never fire, the job fields being refused first
    assert not {SYMM, PP, SAC} & {r.key for _, r in rules_for(load_stack("torchtitan"))}
    rel, main = load_stack("torchtitan-0.3").runs, load_stack("torchtitan").runs
    assert (rel.fsdp_symm_mem, rel.spmd_typechecking) == ("--parallelism.enable_fsdp_symm_mem", "--debug.spmd_typechecking")
    assert (main.fsdp_symm_mem, main.spmd_typechecking) == (None, None)
    assert main.backend_kernels == {"sdpa": ["flash2", "cudnn"], "flex": ["flex"]} and rel.backend_kernels == {"flex": ["flex"]}


@pytest.mark.parametrize("hardware, refused", [("a100-sxm-80gb", True), ("h100-sxm", False), ("mi300x", False)])
def test_symm_mem_by_compute_capability(hardware, refused):
    m = _verdict(fsdp_symm_mem=True, hardware=hardware)
    if refused:
        assert m is not None and f"breaks start-up rule {SYMM} of torchtitan" in m and SRC_SYMM in m
        assert "a100-sxm-80gb: compute capability 8.0" in m
        assert _verdict(hardware=hardware) is None  # the same job without the switch runs
    else:
        assert m is None, m


def test_symm_mem_priced_as_without_it_and_said():
    on, off = _priced(fsdp_symm_mem=True, hardware="h100-sxm"), _priced(hardware="h100-sxm")
    assert on[:2] == off[:2]
    assert any(w.startswith("fsdp_symm_mem: FSDP's all-gather staging buffers") and "not modelled" in w for w in on[2])


@pytest.mark.parametrize("job, rule", [
    (dict(pp=2, recompute="full"), PP),
    (dict(recompute="selective"), SAC),
    (dict(recompute="full"), None),
    (dict(recompute="none"), None),
    (dict(recompute="selective", attention_backend="varlen"), None),  # VarlenAttention: no FlexAttention.Config
    (dict(recompute="selective", spmd_backend="partial_dtensor"), None),  # the checks run under spmd_types only
    (dict(pp=2, recompute="full", spmd_backend="full_dtensor"), None),
])
def test_spmd_typechecking_hand_cases(job, rule):
    m = _verdict(spmd_typechecking=True, **job)
    if rule is None:
        assert m is None, m
    else:
        assert m is not None and f"breaks start-up rule {rule} of torchtitan" in m
        assert (SRC_PP if rule == PP else SRC_SAC) in m
        assert _verdict(**job) is None


def test_spmd_typechecking_priced_as_without_it():
    on, off = _priced(spmd_typechecking=True, recompute="full"), _priced(recompute="full")
    assert on[:2] == off[:2] and any("spmd_typecheck" in w and "not priced" in w for w in on[2])
    ign = _priced(spmd_typechecking=True, recompute="selective", spmd_backend="partial_dtensor")[2]
    assert any(w.startswith("spmd_typechecking ignored: spmd_backend partial_dtensor") for w in ign)


def test_main_has_neither_option():
    for field in ("fsdp_symm_mem", "spmd_typechecking"):
        m = _verdict(stack="torchtitan", **{field: True})
        assert m is not None and f"{field} is set but stack torchtitan has no option" in m and f"runs.{field}" in m


def test_fit_never_ranks_the_refused_rows():
    """Without the switch fit ranks pp 2 and selective rows; with it none, each counted under its rule."""
    opts = SpaceOptions(tp=(1, 2), pp=(1, 2), cp=(1,))
    seen = {(r["plan"]["pp"], r["plan"]["recompute"]) for r in fit(Job(**BASE), opts=opts, top=500).rows}
    assert (2, "full") in seen and (1, "selective") in seen
    res = fit(Job(**BASE, spmd_typechecking=True), opts=opts, top=500)
    seen = {(r["plan"]["pp"], r["plan"]["recompute"]) for r in res.rows}
    assert seen and {pp for pp, _ in seen} == {1} and "selective" not in {rc for _, rc in seen}
    assert all(r["plan"].get("spmd_typechecking") is True for r in res.rows)
    reasons = " ".join(res.counts.reasons)
    assert PP in reasons and SAC in reasons


def test_fit_with_symm_mem_below_sm90_is_refused(cli):
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan-0.3", "--hardware", "a100-sxm-80gb",
            "--fsdp-symm-mem")
    assert_one_error(r, f"breaks start-up rule {SYMM}", SRC_SYMM)
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan-0.3", "--hardware", "h100-sxm",
            "--fsdp-symm-mem", "--top", "1")
    assert r.exit_code == 0, r.stderr


def test_launch_line_reads_the_options(cli, tmp_path):
    """The 0.3 launch reader sets the job fields; llama3_8b's own activation-checkpoint:selective over its flex attention
    is refused with --debug.spmd_typechecking (rule 89), and runs with activation-checkpoint:full."""
    p = _line(tmp_path, "--parallelism.enable_fsdp_symm_mem --debug.spmd_typechecking activation-checkpoint:full")
    job = load_trainer_config(p, hardware="h100-sxm").job
    assert job["fsdp_symm_mem"] is True and job["spmd_typechecking"] is True
    assert cli("check", str(p), "--hardware", "h100-sxm").exit_code in (0, 1)
    assert_one_error(cli("check", str(p), "--hardware", "a100-sxm-80gb"), f"breaks start-up rule {SYMM}", SRC_SYMM)
    assert_one_error(cli("check", str(_line(tmp_path, "--debug.spmd_typechecking", name="sac.sh")), "--hardware",
                         "h100-sxm"), f"breaks start-up rule {SAC}", SRC_SAC)
    p = _line(tmp_path, "--debug.spmd_typechecking --parallelism.pipeline_parallel_degree 2 "
                        "--training.disable_cuda_graphs activation-checkpoint:full", name="pp.sh")
    assert_one_error(cli("check", str(p), "--hardware", "h100-sxm"), f"breaks start-up rule {PP}", SRC_PP)


def test_export_writes_the_options_back(cli):
    """fit --export on 0.3 writes both flags, and its read-back (which refuses a changed plan) passes."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan-0.3", "--hardware", "h100-sxm",
            "--fsdp-symm-mem", "--spmd-typechecking", "--export", "torchtitan", "--top", "1")
    assert r.exit_code == 0, r.stderr
    assert "--parallelism.enable-fsdp-symm-mem" in r.stdout and "--debug.spmd-typechecking" in r.stdout


def test_load_balancer_empty_is_refused(cli, tmp_path):
    p = _line(tmp_path, "--parallelism.context_parallel_degree 2 --parallelism.context_parallel_load_balancer ''")
    assert_one_error(cli("check", str(p), "--hardware", "h100-sxm"),
                     "torchtitan/config/configs.py ParallelismConfig.__post_init__ l. 262-266",
                     "cannot be an empty string")


def test_load_balancer_unknown_name(cli, tmp_path):
    """Refused under CP (cp_shard raises in the first step: start-up rule TORCHTITAN_CP_LOAD_BALANCER_NAME, code 105),
    ignored at cp 1 (cp_shard never runs) and kept as the job's for the plans at cp > 1 fit searches
    (tests/test_cp_balancer_name.py)."""
    p = _line(tmp_path, "--parallelism.context_parallel_degree 2 --parallelism.context_parallel_load_balancer zigzag")
    assert_one_error(cli("check", str(p), "--hardware", "h100-sxm"), "api.py cp_shard l. 218-264",
                     "Invalid load_balancer_type", "context_parallel_load_balancer 'zigzag'",
                     "breaks start-up rule TORCHTITAN_CP_LOAD_BALANCER_NAME")
    p = _line(tmp_path, "--parallelism.context_parallel_load_balancer zigzag", name="cp1.sh")
    cfg = load_trainer_config(p, hardware="h100-sxm")
    assert cfg.job["cp_load_balancer"] == "zigzag"
    assert any(i.startswith("parallelism.context_parallel_load_balancer=zigzag (context_parallel_degree 1")
               for i in cfg.ignored)


def test_main_flex_backend_is_priced_as_flex():
    """--attention-backend flex on main (no kernel named) is priced as --attention-kernel flex (it builds
    FlexAttentionWrapper); sdpa keeps the stack's flash2; flex with flash2 / cudnn and sdpa with flex are refused."""
    main = dict(BASE, stack="torchtitan", hardware="h100-sxm")
    s_b, p_b, w = resolve(Job(**main, attention_backend="flex"))
    s_k, p_k, _ = resolve(Job(**main, attention_backend="flex", attention_kernel="flex"))
    s_0, p_0, _ = resolve(Job(**main))
    assert s_b.attention_kernel == "flex" and ("attention_kernel", "flex") in s_b.inherited
    b, k, z = evaluate(s_b, p_b), evaluate(s_k, p_k), evaluate(s_0, p_0)
    assert float(b.step_s) == float(k.step_s) and float(b.memory.total) == float(k.memory.total)
    assert float(b.step_s) != float(z.step_s)  # flex's rate is not flash2's (compute.py [7d])
    s_s, _, _ = resolve(Job(**main, attention_backend="sdpa"))
    assert s_s.attention_kernel is None and s_s.stack.attention_kernel_for((9, 0)) == "flash2"
    for backend, kernel in (("flex", "flash2"), ("flex", "cudnn"), ("sdpa", "flex")):
        with pytest.raises(PlannerError) as e:
            resolve(Job(**main, attention_backend=backend, attention_kernel=kernel))
        assert f"attention_backend {backend} with attention_kernel {kernel}" in e.value.message
        assert "runs.backend_kernels" in e.value.message


def test_main_flex_backend_exports_the_flex_flavor(cli):
    """Before, fit --export refused it (the plan's flash2 kernel matched no flavor with attn_type flex)."""
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--hardware", "h100-sxm",
            "--attention-backend", "flex", "--export", "torchtitan", "--top", "1")
    assert r.exit_code == 0, r.stderr
    assert 'flavor = "8B_flex"' in r.stdout
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--attention-backend",
                         "flex", "--attention-kernel", "flash2"), "attention_backend flex with attention_kernel flash2")


def test_symm_mem_step_is_a_bool_array_of_the_plan():
    """The rule answers per candidate (every one alike), as the search masks it."""
    from planner.startup import BY_CODE, cluster_of
    from planner.catalog import load_hardware

    settings, plan, _ = resolve(Job(**BASE, fsdp_symm_mem=True, hardware="h100-sxm"))
    rule = BY_CODE[87]
    a100 = cluster_of(load_hardware("a100-sxm-80gb"), 8)
    out = rule.check(settings.model, settings.stack, plan, a100)
    assert out.dtype == bool and out.shape == np.shape(plan.tp) and bool(out)
