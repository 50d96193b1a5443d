"""Deterministic mode's own start-up checks (issue 22, detmode; planner/startup.py codes 91-93, stack_db
runs.deterministic_refuses, the job's trainer_date).

NVIDIA/Megatron-LM @d98e8a64 megatron/training/determinism.py l. 24: ARG_VALUES_REQUIRED_FOR_DETERMINISM =
{"cross_entropy_loss_fusion": False, "tp_comm_overlap": False}, asserted by apply_determinism_to_args l. 141-148,
which validate_args calls under --deterministic-mode (arguments.py l. 1708-1711). `git log -S` on the mirror:
ARG_VALUES_REQUIRED_FOR_DETERMINISM (so the TP overlap check) came with determinism.py in 3ab71eeb3e (2026-07-08);
'Cross Entropy Fusion is currently not deterministic.' was asserted in validate_args from 2ea54d6a37 (2024-07-25).
NVIDIA-NeMo/Megatron-Bridge @dc805f5cf training/config.py _validate_and_apply_deterministic_mode l. 1454-1456
(model.attention_backend flash) and l. 1458-1461 (cross_entropy_loss_fusion), both from f003cd8ca (2025-10-27); no
TP overlap check (Bridge never calls Megatron-LM's validate_args; its pinned 905c0e386 has no determinism.py).
"""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, rules_for
from planner.catalog import load_stack
from planner.trainers import load_trainer_config
from planner.trainers.rules import megatron_errors

BASE = dict(model="llama3-8b", gpus=8, tp=2, pp=1, cp=1, sequence_parallel=True, micro_batch=1, global_batch=16,
            seq_len=2048, deterministic_mode=True)


def _refused(job: dict) -> str:
    with pytest.raises(PlannerError) as e:
        resolve(Job.model_validate(job))
    return e.value.message


def test_codes_and_where_each_rule_applies():
    """Codes 91, 92, 93 (the last used was 90). The megatron entry lists the TP overlap and the fused cross-entropy
    (determinism.py l. 24), megatron-bridge the FlashAttention backend and the fused cross-entropy (config.py
    l. 1454-1461); torchtitan none (it has no deterministic_mode at all: plan._cublas_workspace refuses it)."""
    keys = ("MEGATRON_DETERMINISTIC_TP_OVERLAP", "MEGATRON_DETERMINISTIC_CE_FUSION", "MEGATRON_DETERMINISTIC_FLASH")
    assert [CODES[k] for k in keys] == [91, 92, 93]

    def listed(stack):
        return {r.key for _, r in rules_for(load_stack(stack))} & set(keys)

    assert listed("megatron") == {keys[0], keys[1]}
    assert listed("megatron-bridge") == {keys[1], keys[2]}
    assert listed("torchtitan") == set()


def test_megatron_refuses_tp_overlap_from_3ab71eeb3e():
    """--tp-comm-overlap beside --deterministic-mode: refused naming the rule and determinism.py; a run whose
    trainer_date is before the check's commit (2026-07-07) is priced, one on its day (2026-07-08) refused; without
    deterministic_mode the overlap is priced as before."""
    msg = _refused({**BASE, "tp_comm_overlap": True})
    assert "MEGATRON_DETERMINISTIC_TP_OVERLAP" in msg and "determinism.py l. 24" in msg and "3ab71eeb3e" in msg
    _, plan, warnings = resolve(Job.model_validate({**BASE, "tp_comm_overlap": True, "trainer_date": "2026-07-07"}))
    assert int(plan.tpo) == 1
    assert any("trainer_date 2026-07-07" in w and "tp_comm_overlap (checked from 2026-07-08)" in w for w in warnings)
    assert "MEGATRON_DETERMINISTIC_TP_OVERLAP" in _refused({**BASE, "tp_comm_overlap": True, "trainer_date": "2026-07-08"})
    resolve(Job.model_validate({**BASE, "tp_comm_overlap": True, "deterministic_mode": False}))


def test_megatron_refuses_fused_cross_entropy_from_2ea54d6a37():
    """--cross-entropy-loss-fusion beside --deterministic-mode: refused for the model (every plan alike); a run of
    2024-07-24 (before 2ea54d6a37) is priced."""
    msg = _refused({**BASE, "cross_entropy_fusion": True})
    assert "MEGATRON_DETERMINISTIC_CE_FUSION" in msg and "the model breaks" in msg
    resolve(Job.model_validate({**BASE, "cross_entropy_fusion": True, "trainer_date": "2024-07-24"}))
    assert "MEGATRON_DETERMINISTIC_CE_FUSION" in _refused({**BASE, "cross_entropy_fusion": True,
                                                           "trainer_date": "2024-07-25"})


def test_bridge_refuses_flash_and_fused_cross_entropy_not_tp_overlap():
    """megatron-bridge: attention_kernel flash2 (model.attention_backend flash) and cross_entropy_fusion refused
    beside deterministic_mode; the TP overlap priced (Bridge has no such check); the same Megatron-LM job refuses
    the overlap but not flash2 (determinism.py l. 150-152 keeps --use-flash-attn allowed)."""
    bridge = {**BASE, "stack": "megatron-bridge"}
    assert "MEGATRON_DETERMINISTIC_FLASH" in _refused({**bridge, "attention_kernel": "flash2"})
    assert "MEGATRON_DETERMINISTIC_CE_FUSION" in _refused({**bridge, "cross_entropy_fusion": True})
    _, plan, _ = resolve(Job.model_validate({**bridge, "tp_comm_overlap": True}))
    assert int(plan.tpo) == 1
    resolve(Job.model_validate({**BASE, "attention_kernel": "flash2"}))


def test_fit_ranks_no_tp_overlap_row_under_deterministic_mode():
    """fit at tp 2 with SP: without deterministic_mode the overlapped rows are searched (and, the overlap hiding
    the TP collectives, ranked first); with it none is ranked (a variant rule: space.Space.variant_ok)."""
    job = dict(model="llama3-8b", gpus=8, global_batch=16, seq_len=4096)
    pin = SpaceOptions(tp=(2,), pp=(1,), cp=(1,))
    free = fit(Job(**job), opts=pin, top=5).rows
    assert any(r["plan"]["tp_comm_overlap"] for r in free)
    det = fit(Job(**job, deterministic_mode=True), opts=pin, top=5).rows
    assert det and not any(r["plan"]["tp_comm_overlap"] for r in det)
    with pytest.raises(PlannerError) as e:
        fit(Job(**job, deterministic_mode=True, cross_entropy_fusion=True), opts=pin, top=5)
    assert "MEGATRON_DETERMINISTIC_CE_FUSION" in e.value.message


def _deterministic_args(tmp_path, flag: str):
    """A 4-layer GPT's Megatron argument file at TP 2 with SP and --deterministic-mode plus `flag`, read on 8 GPUs."""
    p = tmp_path / "run.args"
    p.write_text("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings "
                 "1024 --micro-batch-size 1 --global-batch-size 8 --bf16 --tensor-model-parallel-size 2 "
                 f"--sequence-parallel --deterministic-mode {flag}\n")
    return load_trainer_config(p, gpus=8)


def test_check_refuses_a_megatron_script_asking_both(tmp_path):
    """`check`'s path: the Megatron reader reads both flags, resolve refuses the job naming the rule; the argument
    rules (rules.py DETERMINISTIC, DETERMINISTIC_ENV) say the same of the flags and of NCCL_ALGO Tree (determinism.py
    l. 48: Tree is no longer accepted)."""
    cfg = _deterministic_args(tmp_path, "--tp-comm-overlap")
    assert cfg.job["deterministic_mode"] is True and cfg.job["tp_comm_overlap"] is True
    assert "MEGATRON_DETERMINISTIC_TP_OVERLAP" in _refused(cfg.job)
    flags = {"--tensor-model-parallel-size": "2", "--sequence-parallel": True, "--num-layers": "4",
             "--hidden-size": "1024", "--num-attention-heads": "16", "--seq-length": "1024",
             "--max-position-embeddings": "1024", "--micro-batch-size": "1", "--global-batch-size": "8",
             "--deterministic-mode": True, "--tp-comm-overlap": True, "--cross-entropy-loss-fusion": True}
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Tree"}
    keys = [k for k, _ in megatron_errors(flags, 8, env)]
    assert keys.count("DETERMINISTIC") == 2 and keys.count("DETERMINISTIC_ENV") == 1
    ok = {k: v for k, v in flags.items() if k not in ("--tp-comm-overlap", "--cross-entropy-loss-fusion")}
    assert not [k for k, _ in megatron_errors(ok, 8, {**env, "NCCL_ALGO": "Ring,^NVLS"}) if k.startswith("DETERMINISTIC")]


def test_corpus_rows_recorded_before_the_check_stay_compared():
    """The gpt3_weekly ..._tp_overlap rows ran --deterministic-mode with --tp-comm-overlap at 4828d651e7
    (2026-07-02), before 3ab71eeb3e: the corpus hands the row's recording date to the job (trainer_date), so both
    rows are compared as before (errors -1.09% and -0.84%, unchanged); the same job without the date is refused."""
    from planner.megatron_ci import report_corpus

    ids = ["gpt__gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap__dev_dgx_gb200",
           "gpt__gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap__dev_dgx_h100"]
    rows = report_corpus("tests/data/megatron_ci/corpus.json", ids=ids)["rows"]
    assert [r["skipped"] for r in rows] == [None, None]
    assert [round(r["error"], 4) for r in rows] == [-0.0109, -0.0084]
    assert all(any(a.startswith("trainer_date=2026-07-02") for a in r["assumed"]) for r in rows)
    cfg = load_trainer_config("tests/data/megatron_ci/args/" + ids[1] + ".args", fmt="megatron", gpus=8, hardware="h100-sxm")
    assert "MEGATRON_DETERMINISTIC_TP_OVERLAP" in _refused(cfg.job)


def test_bridge_export_writes_and_reads_back_deterministic_mode(tmp_path):
    """Bridge's deterministic mode is Megatron-Core's ModelParallelConfig.deterministic_mode (@905c0e386 l. 142): the
    export writes model.deterministic_mode=true with the plan's cross-entropy fusion off and exports the plan's
    NCCL_ALGO, Ring (Bridge asserts NCCL_ALGO set: config.py l. 1463-1466); the reader reads it back as the same plan,
    its NCCL_ALGO too. A plan priced without an NCCL_ALGO (NCCL's own choice) is refused by the export: the launch
    would run one it was not priced with. The recipe's own model.cross_entropy_loss_fusion true
    (megatron_bridge.COMMON) beside it is refused (code 92)."""
    from planner.cli.export import check_readback
    from planner.explain import evaluate, to_json
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job.model_validate({**BASE, "stack": "megatron-bridge"}))
    with pytest.raises(PlannerError, match="deterministic_mode with nccl_algo None"):
        export_plan(to_json(s, p, evaluate(s, p))["plan"], "megatron-bridge")
    s, p, _ = resolve(Job.model_validate({**BASE, "stack": "megatron-bridge", "nccl_algo": "Ring"}))
    row = to_json(s, p, evaluate(s, p))
    text, _ = export_plan(row["plan"], "megatron-bridge")
    lines = [ln.strip(" \\") for ln in text.splitlines()]
    assert "model.deterministic_mode=true" in lines and "export NCCL_ALGO=Ring" in lines
    assert "model.cross_entropy_loss_fusion=false" in lines
    check_readback(row, "megatron-bridge", text)
    out = tmp_path / "run.sh"
    out.write_text(text.replace("model.cross_entropy_loss_fusion=false", "model.cross_entropy_loss_fusion=true"))
    cfg = load_trainer_config(out, fmt="megatron-bridge", gpus=8)
    assert cfg.job["deterministic_mode"] is True and cfg.job["cross_entropy_fusion"] is True
    assert cfg.job["nccl_algo"] == "Ring"
    assert "MEGATRON_DETERMINISTIC_CE_FUSION" in _refused(cfg.job)


def test_megatron_use_flash_attn_refused_from_ac08742c96_to_3ab71eeb3e():
    """Code 98. `git log -S use_flash_attn -- megatron/training/arguments.py` on NVIDIA/Megatron-LM: ac08742c96
    (2024-05-04, 'Add a "deterministic mode".') added `assert not args.use_flash_attn` under --deterministic-mode
    (l. 528-530 there); 3ab71eeb3e (2026-07-08) removed it (determinism.py @d98e8a64 l. 150-152). So use_flash_attn
    with deterministic_mode: trainer_date 2024-05-03 priced, 2024-05-04 and 2026-07-07 refused, 2026-07-08 priced,
    no date (the stack's own commit, d98e8a64) priced; without deterministic_mode priced at any date. The flag picks
    no kernel: the plan's step time is the one without it."""
    assert CODES["MEGATRON_DETERMINISTIC_USE_FLASH_ATTN"] == 98
    job = {**BASE, "use_flash_attn": True}
    for day in ("2024-05-04", "2026-07-07"):
        msg = _refused({**job, "trainer_date": day})
        assert "MEGATRON_DETERMINISTIC_USE_FLASH_ATTN" in msg and "ac08742c96" in msg and "3ab71eeb3e" in msg
    from planner.explain import evaluate
    s0, p0, _ = resolve(Job.model_validate(BASE))
    s1, p1, w1 = resolve(Job.model_validate({**job, "trainer_date": "2026-07-08"}))
    assert any("no longer refused use_flash_attn (checked from 2024-05-04 to 2026-07-08)" in w for w in w1)
    _, _, w2 = resolve(Job.model_validate({**job, "trainer_date": "2024-05-03"}))
    assert any("did not yet refuse" in w and "use_flash_attn (checked from 2024-05-04)" in w for w in w2)
    s3, p3, w3 = resolve(Job.model_validate(job))
    assert s3.use_flash_attn and not any("trainer_date" in w for w in w3)
    assert float(evaluate(s3, p3).step_s) == float(evaluate(s0, p0).step_s)
    resolve(Job.model_validate({**job, "deterministic_mode": False, "trainer_date": "2025-01-01"}))
    with pytest.raises(PlannerError, match="use_flash_attn is Megatron-LM's --use-flash-attn"):
        resolve(Job.model_validate({**job, "stack": "megatron-bridge"}))


def test_megatron_reader_reads_use_flash_attn_and_the_export_writes_it(tmp_path):
    """The Megatron reader reads --use-flash-attn into the job (no longer listed as ignored); with --deterministic-mode
    and a trainer_date of 2025-06-01 (between ac08742c96 and 3ab71eeb3e) the job is refused (code 98); the export of
    the plan, written for the stack's own commit, carries the flag back."""
    from planner.explain import evaluate, to_json
    from planner.trainers.export import export_plan

    cfg = _deterministic_args(tmp_path, "--use-flash-attn")
    assert cfg.job["use_flash_attn"] is True
    assert not any(str(n).startswith("--use-flash-attn") for n in cfg.ignored + cfg.not_modelled)
    assert "MEGATRON_DETERMINISTIC_USE_FLASH_ATTN" in _refused({**cfg.job, "trainer_date": "2025-06-01"})
    s, pl, _ = resolve(Job.model_validate(cfg.job))
    row = to_json(s, pl, evaluate(s, pl))
    assert row["plan"]["use_flash_attn"] is True
    text, _ = export_plan(row["plan"], "megatron")
    assert "--use-flash-attn" in text.split()


def test_megatron_moe_refused_from_2ea54d6a37_to_8e1adfdc5b():
    """Code 99. `git log -S 'MoEs are currently not deterministic' -- megatron` on NVIDIA/Megatron-LM: 2ea54d6a37
    (2024-07-25, ADLR/megatron-lm!1752) added `assert args.num_experts is None` under --deterministic-mode (l. 566
    there), 8e1adfdc5b (2024-08-02, ADLR/megatron-lm!1864) removed it. Mixtral 8x7B with deterministic_mode:
    trainer_date 2024-07-24 priced, 2024-07-25 and 2024-08-01 refused, 2024-08-02 priced, no date priced; the dense
    Llama 3 8B on 2024-07-30 priced."""
    assert CODES["MEGATRON_DETERMINISTIC_MOE"] == 99
    moe = {**BASE, "model": "mixtral-8x7b"}
    for day in ("2024-07-25", "2024-08-01"):
        msg = _refused({**moe, "trainer_date": day})
        assert "MEGATRON_DETERMINISTIC_MOE" in msg and "2ea54d6a37" in msg and "8e1adfdc5b" in msg
    for day in ("2024-07-24", "2024-08-02", None):
        resolve(Job.model_validate({**moe, **({"trainer_date": day} if day else {})}))
    resolve(Job.model_validate({**BASE, "trainer_date": "2024-07-30"}))
    resolve(Job.model_validate({**moe, "deterministic_mode": False, "trainer_date": "2024-07-30"}))


def test_bridge_refuses_named_flash_where_te_would_pick_it_anyway(tmp_path):
    """Bridge @dc805f5cf training/config.py l. 1454-1456 compares the config's model.attention_backend with
    AttnBackend.flash, not the kernel Transformer Engine runs: on an A100 (sm 8.0), where TE's own choice under auto is
    FlashAttention (the stack's attention_kernels rule holds on Hopper only), a config naming flash is refused too.
    The job says so with attention_kernel_named (the Bridge reader sets it for model.attention_backend flash / fused);
    attention_kernel flash2 alone there is the kernel TE picks, which a plan records and the export writes as null
    (auto): priced and not refused. A Bridge launch naming flash beside model.deterministic_mode=true reads back
    refused; attention_kernel_named on megatron (no such check) or without a kernel is refused."""
    bridge = {**BASE, "stack": "megatron-bridge", "hardware": "a100-sxm-80gb", "nccl_algo": "Ring"}
    assert load_stack("megatron-bridge").attention_kernel_for((8, 0)) == "flash2"
    named = {**bridge, "attention_kernel": "flash2", "attention_kernel_named": True}
    assert "MEGATRON_DETERMINISTIC_FLASH" in _refused(named)
    resolve(Job.model_validate({**bridge, "attention_kernel": "flash2"}))
    resolve(Job.model_validate({**named, "deterministic_mode": False}))
    from planner.explain import evaluate, to_json
    from planner.trainers.export import export_plan

    s, p, _ = resolve(Job.model_validate(bridge))
    text, _ = export_plan(to_json(s, p, evaluate(s, p))["plan"], "megatron-bridge")
    assert "model.attention_backend=null" in text
    out = tmp_path / "run.sh"
    out.write_text(text.replace("model.attention_backend=null", "model.attention_backend=flash"))
    cfg = load_trainer_config(out, fmt="megatron-bridge", gpus=8, hardware="a100-sxm-80gb")
    assert cfg.job["attention_kernel"] == "flash2" and cfg.job["attention_kernel_named"] is True
    assert "MEGATRON_DETERMINISTIC_FLASH" in _refused(cfg.job)
    with pytest.raises(PlannerError, match="attention_kernel_named"):
        resolve(Job.model_validate({**BASE, "attention_kernel": "flash2", "attention_kernel_named": True}))
    with pytest.raises(PlannerError, match="no attention_kernel is given"):
        resolve(Job.model_validate({**bridge, "attention_kernel_named": True}))


def test_a_check_removed_before_it_was_added_is_bad_stack_data():
    """runs.deterministic_refuses until must come after since (schema.DeterministicRefusal)."""
    from pydantic import ValidationError
    from planner.schema import DeterministicRefusal

    with pytest.raises(ValidationError, match="until 2024-07-25 is not after since 2024-07-25"):
        DeterministicRefusal(setting="moe", since="2024-07-25", until="2024-07-25", source="x")
