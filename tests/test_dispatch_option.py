"""The --moe-dispatcher option of fit, explain and check (issue 23): the job field moe_dispatcher
from the command line. `fit --moe-dispatcher X` ranks only plans on X (each under X's start-up
rules: DeepEP's group sizes, MEGATRON_DEEPEP_GROUP), the fit table names the row's dispatcher in
its stack options, and the `row N in full` command carries `--moe-dispatcher X` where X is not
what explain takes without it (the model recipe's where the stack runs it, else the stack's), so
that command re-prices the row. Megatron's HybridEP backend refuses fp8 dispatch (fused_a2a.py
@d98e8a64 l. 327): a job asking for both is refused."""

from __future__ import annotations

import json
import shlex

import pytest

from conftest import assert_one_error
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.startup import DEEPEP_GROUP_SIZES

# DeepSeek-V3 on DeepSeek's 2,048 H800 (arXiv:2412.19437 sec. 3.1); the model recipe names deepep
V3 = ["--model", "deepseek-v3", "--gpus", "2048", "--hardware", "h800-sxm", "--global-batch", "15360", "--seq-len", "4096"]
NARROW = ["--tp", "4,8", "--pp", "1"]  # a small space: the test's speed, not the search's


def _fit_json(cli, *args):
    r = cli("fit", *V3, *NARROW, "--top", "3", "--format", "json", *args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_fit_moe_dispatcher_deepep_keeps_deepep_only(cli):
    """--moe-dispatcher deepep: every row runs deepep, and each row's expert-TP x EP group is a
    size DeepEP's tables list (the rule is applied, not only the name)."""
    rows = _fit_json(cli, "--moe-dispatcher", "deepep")
    assert rows
    for row in rows:
        p = row["plan"]
        assert p["moe_dispatcher"] == "deepep" and row["moe"]["dispatcher"] == "deepep"
        assert (p.get("etp") or p["tp"]) * p["ep"] in DEEPEP_GROUP_SIZES, p


def test_fit_moe_dispatcher_hybridep_row_command_reprices_the_row(cli):
    """--moe-dispatcher hybridep (not the recipe's deepep): the table names hybridep, row 1's
    command carries --moe-dispatcher hybridep, and explain of that command gives row 1's step and
    dispatcher (without the flag explain would take the recipe's deepep)."""
    rows = _fit_json(cli, "--moe-dispatcher", "hybridep")
    assert all(r["plan"]["moe_dispatcher"] == "hybridep" for r in rows)
    table = cli("fit", *V3, *NARROW, "--top", "1", "--moe-dispatcher", "hybridep")
    assert table.exit_code == 0, table.stderr
    assert "hybridep" in table.stdout.split("row 1 in full")[0]  # the stack options column
    line = next(x for x in table.stdout.splitlines() if "row 1 in full:" in x)
    argv = shlex.split(line.split("row 1 in full: planner ", 1)[1])
    assert argv[0] == "explain" and "--moe-dispatcher" in argv and argv[argv.index("--moe-dispatcher") + 1] == "hybridep"
    r = cli(*argv, "--format", "json")
    assert r.exit_code == 0, r.stderr
    ex = json.loads(r.stdout)
    assert ex["moe"]["dispatcher"] == "hybridep"
    assert ex["time"]["step_s"] == pytest.approx(rows[0]["time"]["step_s"], rel=1e-9)


def test_row_command_leaves_out_the_recipes_dispatcher(cli):
    """With the recipe's own dispatcher (deepep, pinned) the row's command needs no flag: explain takes it."""
    table = cli("fit", *V3, *NARROW, "--top", "1", "--moe-dispatcher", "deepep")
    assert table.exit_code == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if "row 1 in full:" in x)
    assert "--moe-dispatcher" not in line


def test_explain_option_replaces_the_recipe(cli):
    """explain --moe-dispatcher alltoall prices the NCCL all-to-all where the recipe says deepep;
    at EP 256 (refused by DeepEP's tables) the option is what lets the plan run."""
    args = [*V3, "--tp", "2", "--pp", "1", "--ep", "256", "--etp", "1", "--sharding", "zero1", "--format", "json"]
    assert cli("explain", *args).exit_code == 2  # the recipe's deepep at a 256-rank group
    r = cli("explain", *args, "--moe-dispatcher", "alltoall")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["moe"]["dispatcher"] == "alltoall"


def test_unknown_or_unrun_dispatcher_is_bad_input(cli):
    """A name the schema does not know, or one the stack does not run (Megatron-Core trains with
    no low-latency kernels: stack_db megatron runs.moe_dispatchers), exits 2 without a traceback."""
    for name in ("nccl", "deepep_ll"):
        r = cli("explain", *V3, "--tp", "2", "--pp", "1", "--ep", "64", "--moe-dispatcher", name)
        assert r.exit_code == 2 and "Traceback" not in r.stderr, (name, r.stderr)


def test_hybridep_refuses_fp8_dispatch_on_megatron():
    """Megatron-Core's HybridEP backend dispatches bf16 only (fused_a2a.py @d98e8a64 l. 327): a
    job with moe_fp8_dispatch on hybridep is refused with the source; deepep takes it."""
    base = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096, tp=2, etp=1,
                pp=1, ep=64, sharding="zero1", micro_batch=1, moe_fp8_dispatch=True, precision="fp8")
    with pytest.raises(PlannerError) as e:
        resolve(Job(**base, moe_dispatcher="hybridep"))
    assert "HybridEP dispatcher does not support fp8 dispatch now" in e.value.message
    assert "fused_a2a.py @d98e8a64" in e.value.message and "deepep" in e.value.hint
    settings, _, _ = resolve(Job(**base, moe_dispatcher="deepep"))
    assert settings.moe_dispatcher == "deepep"
    settings, _, _ = resolve(Job(**{**base, "moe_fp8_dispatch": False}, moe_dispatcher="hybridep"))
    assert settings.moe_dispatcher == "hybridep"


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep", "hybridep"])
def test_fp8_dispatch_without_an_fp8_recipe_is_refused(cli, dispatcher):
    """A bf16 job's moe_fp8_dispatch (planner/dispatch.py [11]): the fp8 tokens are quantized for an fp8
    up-projection, which bf16 has not (the planner would price the fp8 wire without the casts around a
    bf16 GEMM), and no stack it prices runs one (Megatron-LM @d98e8a64 quantizes the wire only with
    --moe-dispatch-fwd-dtype mxfp8 on the ncclep backend, transformer_config.py l. 1776-1784): exit 2
    naming the option, on every dispatcher and command; off, or under fp8, it is priced."""
    args = [*V3, "--tp", "2", "--pp", "1", "--ep", "64", "--moe-dispatcher", dispatcher, "--precision", "bf16"]
    for cmd in ("explain", "fit"):
        assert_one_error(cli(cmd, *args, "--moe-fp8-dispatch"), "moe_fp8_dispatch (--moe-fp8-dispatch) with precision bf16",
                         "--moe-dispatch-fwd-dtype mxfp8", "transformer_config.py l. 1776-1784", "--precision fp8")
    base = dict(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096, tp=2, etp=1,
                pp=1, ep=64, sharding="zero1", micro_batch=1, moe_dispatcher=dispatcher, precision="bf16")
    assert resolve(Job(**base, moe_fp8_dispatch=False))[0].moe_fp8_dispatch is False
    if dispatcher != "hybridep":  # (HybridEP refuses it under fp8 too: the test above)
        assert resolve(Job(**{**base, "precision": "fp8"}, moe_fp8_dispatch=True))[0].moe_fp8_dispatch is True


def test_megatron_export_names_the_fp8_wire_it_cannot_write():
    """An fp8 job's moe_fp8_dispatch is priced (the what-if of DeepSeek-V3's fp8 dispatch on Megatron's
    dispatchers) but not exported: Megatron's one fp8 wire, --moe-dispatch-fwd-dtype mxfp8, runs on the
    ncclep backend alone (the export's message named no flag before)."""
    from planner.cli.export import resolved_plan
    from planner.trainers.export import export_plan

    plan = resolved_plan(Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096,
                             tp=2, etp=1, pp=1, ep=64, sharding="zero1", micro_batch=1, precision="fp8",
                             moe_dispatcher="deepep", moe_fp8_dispatch=True))
    with pytest.raises(PlannerError) as e:
        export_plan(plan, "megatron")
    assert "--moe-dispatch-fwd-dtype mxfp8" in e.value.message and "ncclep" in e.value.message
    assert "transformer_config.py l. 1776-1784" in e.value.message


def test_megatron_reader_refuses_an_fp8_wire(cli, tmp_path):
    """--moe-dispatch-fwd-dtype / --moe-combine-bwd-dtype mxfp8 (TransformerConfig @d98e8a64 l. 997-1009):
    Megatron refuses them on every dispatcher but the ncclep flex backend (l. 1776-1784), which the planner
    does not price: the reader refuses them (before: read as 'not modelled' and priced in bf16); bf16, the
    default, is read as nothing."""
    script = ("torchrun pretrain_gpt.py --num-layers 48 --hidden-size 2048 --num-attention-heads 32 --seq-length 4096 "
              "--max-position-embeddings 40960 --micro-batch-size 1 --global-batch-size 512 --expert-model-parallel-size 8 "
              "--num-experts 128 --moe-router-topk 8 --bf16 --moe-token-dispatcher-type flex {}\n")
    for flag in ("--moe-dispatch-fwd-dtype", "--moe-combine-bwd-dtype"):
        p = tmp_path / "run.sh"
        p.write_text(script.format(f"{flag} mxfp8"))
        assert_one_error(cli("explain", str(p), "--model", "qwen3-30b-a3b", "--gpus", "16"), f"{flag} 'mxfp8'",
                         "ncclep", "transformer_config.py @d98e8a64 l. 1776-1784")
        p.write_text(script.format(f"{flag} bf16"))
        r = cli("explain", str(p), "--model", "qwen3-30b-a3b", "--gpus", "16")
        assert r.exit_code == 0 and flag not in r.stderr, r.stderr


def test_fit_export_writes_the_rows_dispatcher(cli):
    """fit --moe-dispatcher hybridep --export megatron writes Megatron's flex dispatcher with the
    hybridep backend (the export reads the file back against the row: export.write_export)."""
    r = cli("fit", *V3, "--tp", "8", "--pp", "1", "--moe-dispatcher", "hybridep", "--export", "megatron")
    assert r.exit_code == 0, r.stderr
    assert "--moe-token-dispatcher-type flex" in r.stdout and "--moe-flex-dispatcher-backend hybridep" in r.stdout


def _priced(job: Job):
    """explain's step seconds of a job (resolve + evaluate), None where the job is refused or does not
    fit in memory (a dispatcher's buffers count: DeepEP's can push a plan over where Hybrid-EP's do not)."""
    from planner.explain import evaluate

    try:
        settings, plan, _ = resolve(job)
    except PlannerError:
        return None
    est = evaluate(settings, plan)
    return float(est.time.total) if bool(est.fits) else None


def test_searched_dispatcher_flips_with_ep_at_deepeps_group_rule():
    """fit without a dispatcher (search_dispatchers) on DeepSeek-V3, TP 8, ZeRO-1, one micro-batch
    of 4,096 tokens, EP 128 or 256 (etp 1): each row runs the dispatcher whose explain is fastest
    among those that start. At EP 128 (a size DeepEP's tables list) that is deepep; at EP 256
    deepep does not start (MEGATRON_DEEPEP_GROUP) and the row flips to hybridep. Each row's step is
    explain's of its own dispatcher, and no other dispatcher that starts and fits is faster there (at
    EP 128 one row without TP overlap runs hybridep: DeepEP's buffers leave it 0.5 GiB over the usable
    HBM, 71.66 against 71.18 GiB)."""
    from planner.search import fit, row_job
    from planner.space import SpaceOptions

    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096, precision="fp8",
              fp8_recipe="blockwise", mtp_layers=1, bytes_per_param="bf16-moments")
    opts = SpaceOptions(tp=(8,), pp=(1,), ep=(128, 256), etp=(1,), sharding=("zero1",), micro_batch=(1,),
                        recompute=("none",))
    res = fit(job, opts=opts, top=20, search_dispatchers=True)
    seen = {}
    for row in res.rows:
        p = row["plan"]
        one = row_job(job, row)
        steps = {d: _priced(one.model_copy(update={"moe_dispatcher": d})) for d in ("alltoall", "deepep", "hybridep")}
        steps["allgather"] = _priced(one.model_copy(update={"moe_dispatcher": "allgather", "ep_comm_overlap": False}))
        ran = {d: s for d, s in steps.items() if s is not None}
        assert row["time"]["step_s"] == pytest.approx(steps[p["moe_dispatcher"]], rel=1e-9)
        assert min(ran, key=ran.get) == p["moe_dispatcher"], (p["ep"], ran)
        seen.setdefault(p["ep"], set()).add(p["moe_dispatcher"])
        if p["ep"] == 256:
            assert steps["deepep"] is None  # DeepEP's tables: no 256-rank Buffer
    assert "deepep" in seen[128] and seen[256] == {"hybridep"}, seen


def test_fit_searches_only_without_a_pinned_dispatcher(cli):
    """Without --moe-dispatcher fit says it searched and names the stack's dispatchers; with one it
    does not search (the rows all run it); a dense model is not searched (no note)."""
    r = cli("fit", *V3, *NARROW, "--top", "3")
    assert r.exit_code == 0 and "MoE dispatcher searched" in r.stderr, r.stderr
    r = cli("fit", *V3, *NARROW, "--top", "3", "--moe-dispatcher", "alltoall", "--format", "json")
    assert r.exit_code == 0 and "MoE dispatcher searched" not in r.stderr
    assert {row["plan"]["moe_dispatcher"] for row in json.loads(r.stdout)} == {"alltoall"}
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1")
    assert r.exit_code == 0 and "MoE dispatcher searched" not in r.stderr


def test_dispatcher_bound_holds_where_the_ep_overlap_moves_the_pipeline_warmup():
    """fit's dispatcher search bounds a dispatcher variant by variant 0's step without the terms a
    dispatcher changes (search.DISPATCHER_TERMS). allgather runs without the EP overlap
    (plan.ep_comm_overlap), and with the overlap the interleaved schedule's blocking warm-up holds one
    more forward chunk (step.pp_warmup_flush, in pp_comm): on Qwen3-30B-A3B / 128 B200 fp8 with PP 2 x
    VPP 2 the pp_comm of allgather differs from alltoall's, so without pp_comm among those terms the
    bound's bit-for-bit check failed and every variant was priced unbounded (Counts.bound_fallback).
    The bounded ranking is the exhaustive one (keep_feasible prices every candidate, no bound)."""
    from planner.search import fit
    from planner.space import SpaceOptions

    job = Job(model="qwen3-30b-a3b", gpus=128, hardware="b200", precision="fp8")
    opts = SpaceOptions(pp=(2,), vpp=(2,), recompute=("none",))
    res = fit(job, opts=opts, top=10, search_dispatchers=True)
    assert not res.counts.bound_fallback
    full = fit(job, opts=opts, top=10, search_dispatchers=True, keep_feasible=True)
    assert [(r["plan"]["moe_dispatcher"], r["time"]["step_s"]) for r in res.rows] == \
        [(r["plan"]["moe_dispatcher"], r["time"]["step_s"]) for r in full.rows]


def test_few_memory_is_memory_totals_on_the_whole_space():
    """search._few_memory (the dispatcher search's memory of a few candidates, on a space of their
    base rows alone) gives memory_totals' bytes on the whole space, bit for bit, for another
    dispatcher's Settings (DeepSeek-V3 / 2,048 H800, TP 4 or 8, PP 1: hybridep's buffers)."""
    import numpy as np
    from dataclasses import replace

    from planner import dispatch
    from planner.search import _few_memory, dispatcher_settings, memory_totals
    from planner.space import OK, SpaceOptions, build_space, settings_for

    job = Job(model="deepseek-v3", gpus=2048, hardware="h800-sxm", global_batch=15360, seq_len=4096)
    settings, gbs, seq, _ = settings_for(job)
    disp, _ = dispatcher_settings(job, settings)
    space = build_space(next(iter(disp.values())), gbs, seq, job.precision, SpaceOptions(tp=(4, 8), pp=(1,)))
    rows = np.flatnonzero((space.codes == OK) & (np.broadcast_to(space.base.ep, np.shape(space.base.tp)) > 1))
    b = np.repeat(rows[::7][:40], 2)  # a few rows, each twice, with two recompute choices
    r = np.tile([0, len(space.recompute) - 1], len(b) // 2)
    st = disp[dispatch.CODES["hybridep"]]
    whole = memory_totals(replace(space, settings=st), b, r)
    assert np.array_equal(_few_memory(space, st, b, r), whole)
    assert not np.array_equal(whole, memory_totals(space, b, r))  # the dispatcher's bytes are in it


def test_dispatcher_search_defers_no_candidate_with_another_order(monkeypatch):
    """fit's dispatcher search (issue 23's speed): _first_orders' bounded best_variants never defers a
    candidate that has another distinct rank order (its `eager` mask), so the re-run that chose a deferred
    candidate's variant before pricing its other orders (a best_variants call: one step_time and one
    memory_totals call per dispatcher) never runs. Mixtral 8x7B / 64 H100, PP 1 or 2: the top rows run
    the second rank order (tp-cp-dp-pp), and the bound alone defers candidates that have it. The choice
    of every such candidate that can rank is an unbounded best_variants' (variant, step, floor), bit for
    bit, and the rows are an exhaustive evaluation's (keep_feasible)."""
    import sys

    import numpy as np

    import planner.search as search
    from planner.space import SpaceOptions, row_counts

    job = Job(model="mixtral-8x7b", gpus=64)
    opts = SpaceOptions(pp=(1, 2), recompute=("none",))
    real, calls = search.best_variants, []

    def spy(space, bidx, rcidx, order, *a, **k):
        out = real(space, bidx, rcidx, order, *a, **k)
        calls.append((sys._getframe(1).f_code.co_name, space, bidx, rcidx, order, a, k, out))  # the caller's name
        return out

    monkeypatch.setattr(search, "best_variants", spy)
    res = search.fit(job, opts=opts, top=10, search_dispatchers=True)
    monkeypatch.setattr(search, "best_variants", real)
    assert not res.counts.bound_fallback
    first = [c for c in calls if c[0] == "_first_orders"]
    # no re-run for deferred candidates: one call a space (search.vocab_spaces: one a padded vocabulary, the
    # largest tp's first, unbounded by another's)
    assert len(first) == len({id(c[1]) for c in first}) >= 1
    _, space, fb, fr, fo, a, k, (fv, step, floor, _, deferred, held, can, v0) = first[0]
    multi = row_counts(space.order_ok[fb]) > 1
    assert held and deferred.any() and not (deferred & multi).any() and (multi & can).any()
    # without the eager mask the same bound defers some of them (what the re-run resolved before)
    plain = real(space, fb, fr, fo, *a, **{**k, "eager": None})
    assert (plain[4] & multi).any()
    # their choice is an unbounded run's
    free = real(space, fb, fr, fo, can=can, v0=v0, fit=k["fit"])
    m = multi & can
    for x, y in zip((fv, step, floor), free[:3]):
        np.testing.assert_array_equal(x[m], y[m])
    assert any(r["plan"]["rank_order"] != "tp-cp-pp-dp" for r in res.rows)
    full = search.fit(job, opts=opts, top=10, search_dispatchers=True, keep_feasible=True)
    assert [(r["plan"]["moe_dispatcher"], r["plan"]["rank_order"], r["time"]["step_s"]) for r in res.rows] == \
        [(r["plan"]["moe_dispatcher"], r["plan"]["rank_order"], r["time"]["step_s"]) for r in full.rows]
