"""torchtitan 0.3's HybridEP token dispatcher, priced (issue 22; layers/moe.py [19], memory.py [ep], stack_db
torchtitan-0.3 runs.sources moe_dispatchers).

deepseek_v3_16b_hybridep (pytorch/torchtitan release/0.3 @4f9e9a47d torchtitan/models/deepseek_v3/config_registry.py
l. 173-182) is deepseek_v3_16b (l. 138-170: local_batch_size 4, seq_len 4096, expert_parallel_degree 8, SelectiveAC,
compile of the loss only) with model_registry("16B", moe_comm_backend="hybridep", non_blocking_capacity_factor=1.0)
and disable_cuda_graphs False. Its model (deepseek_v3/__init__.py _16b): h 2048, 27 layers (the first dense, 26 MoE),
64 routed experts of f_e 1408, top-6, 2 shared experts.

By hand, on 8 GPUs (NGPU 8: dp_shard 8, tp = cp = pp = 1, ep 8), n = 4 x 4096 / (1 x 1) = 16,384 local tokens:
  HybridEP's non-blocking dispatch (distributed/deepep/hybridep.py _num_permuted_tokens_for_non_blocking l. 80-109)
  allocates int(n x ep x min(E / ep, k) x 1.0) = 16,384 x 8 x min(8, 6) = 786,432 rows, 48 a local token against the
  6 routed (x the busiest rank's load);
  permuted expert input: 786,432 rows x 2048 x 2 B = 3,221,225,472 B a MoE layer (and the experts' output as many);
  gate + up outputs 786,432 x 2 x 1408 x 2 B = 4,429,185,024 B; the activation output 786,432 x 1408 x 2 B =
  2,214,592,512 B;
  HybridEPBuffer (deepseek-ai/DeepEP hybrid-ep @94a9f8f = the pinned @f725d2969 but a build fix): the Configurer's
  max(16,384, 512) rounded up to 64 = 16,384 tokens a rank, one NVLink domain (8 ranks of an H100 node: N = 1, no
  RDMA buffer), NVLink buffers M = 16,384 x 8 = 131,072 rows of 2h + 4 (E / ep) x 8 + 4 x h / 128 = 4096 + 256 + 64 =
  4,416 B (578,813,952 B) + the all-gather's routing map E x M = 8,388,608 B: 587,202,560 B.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.catalog import load_stack
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.layers import layer_list
from planner.moe_padding import host_synced
from planner.plan import resolve
from planner.schema import Job
from planner.stacks import plan_context
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan

from conftest import assert_one_error

H, FE, MOE_LAYERS = 2048, 1408, 26
N = 4 * 4096  # local tokens a rank: local_batch_size x seq_len / (cp x tp)
ROWS = N * 8 * min(64 // 8, 6)  # 786,432 permuted rows a MoE layer
HAND_BUFFER = 131_072 * (2 * H + 4 * (64 // 8) * 8 + 4 * (H // 128)) + 64 * 131_072


def _line(tmp_path, text: str, name: str = "run.sh") -> Path:
    p = tmp_path / name
    p.write_text("#!/usr/bin/bash\n" + text + "\n")
    return p


def _priced(tmp_path, config: str, extra: str = ""):
    cfg = load_trainer_config(_line(tmp_path, f"MODULE=deepseek_v3 CONFIG={config} NGPU=8 ./run_train.sh {extra}",
                                    f"{config}.sh"), hardware="h100-sxm")
    settings, plan, _ = resolve(Job(**cfg.job))
    est = evaluate(settings, plan)
    return cfg, settings, plan, to_json(settings, plan, est)


def _moe(settings):
    return next(k for k in layer_list(settings.model).kinds if k.has_experts).mlp


def test_hand_figures():
    assert ROWS == 786_432 and ROWS * H * 2 == 3_221_225_472
    assert ROWS * 2 * FE * 2 == 4_429_185_024 and ROWS * FE * 2 == 2_214_592_512
    assert HAND_BUFFER == 587_202_560


def test_16b_hybridep_reads_by_hand(tmp_path):
    """The function's settings are deepseek_v3_16b's; its dispatcher and capacity factor the job's fields."""
    cfg, settings, plan, js = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    j = cfg.job
    assert (j["model"], j["ep"], j["micro_batch"], j["global_batch"], j["seq_len"]) == ("torchtitan:deepseek_v3/16B", 8,
                                                                                       4, 32, 4096)
    assert (j["moe_dispatcher"], j["moe_hybridep_capacity_factor"]) == ("hybridep", 1.0)
    assert any(a.startswith("moe_dispatcher=hybridep, moe_hybridep_capacity_factor=1: deepseek_v3_16b_hybridep's "
                            "model_registry(moe_comm_backend='hybridep', non_blocking_capacity_factor=1)")
               for a in cfg.assumed)
    assert (settings.moe_dispatcher, settings.moe_hybridep_capacity_factor) == ("hybridep", 1.0)
    assert js["plan"]["moe_hybridep_capacity_factor"] == 1.0 and js["moe"]["dispatcher"] == "hybridep"
    assert js["moe"]["capacity_rows"] == 48.0  # explain's MoE line says it
    # 0.3 captures the step in a CUDA graph here (l. 181: disable_cuda_graphs False): listed, not priced
    assert any(n.startswith("training.disable_cuda_graphs=false") for n in cfg.not_modelled)


def test_16b_capacity_rows_by_hand(tmp_path):
    """48 rows a local token (ep x min(E / ep, k) x 1.0) in Ctx; the expert tensors of one MoE layer and micro-batch
    at the 786,432 rows, whatever the busiest rank's load; the alltoall function's at the rows routed."""
    _, settings, plan, _ = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    ctx = plan_context(settings, plan)
    assert float(ctx.capacity_rows) == 48.0 and float(ctx.T) == N and float(ctx.rep_div) == 1.0
    moe = _moe(settings)
    t = moe.tensors(ctx, "flash")
    got = {k: float(ctx.T * t[k][0]) for k in ("moe_expert_in", "moe_expert_out", "moe_expert_gate_up",
                                                "moe_expert_act_out")}
    # "split" tensors divide by tp (1 here), "full" ones are per token as they stand
    assert got["moe_expert_in"] == pytest.approx(3_221_225_472, rel=1e-12)
    assert got["moe_expert_out"] == pytest.approx(3_221_225_472, rel=1e-12)
    assert got["moe_expert_gate_up"] == pytest.approx(4_429_185_024, rel=1e-12)
    assert got["moe_expert_act_out"] == pytest.approx(2_214_592_512, rel=1e-12)
    _, s16, p16, _ = _priced(tmp_path, "deepseek_v3_16b")
    c16 = plan_context(s16, p16)
    assert float(c16.capacity_rows) == 0.0
    load = float(c16.cf)  # the busiest rank's routed tokens / the mean (planner/imbalance.py)
    assert 1.0 <= load < 1.1
    assert float(c16.T * _moe(s16).tensors(c16, "flash")["moe_expert_in"][0]) == pytest.approx(N * 6 * load * H * 2,
                                                                                              rel=1e-12)


def test_16b_layer_activations_move_by_the_capacity_rows(tmp_path):
    """Against deepseek_v3_16b (the same job on the standard all-to-all), the 26 MoE layers' kept expert tensors:
    on HybridEP, whose dispatch and combine ops are on the save list (stack_db torchtitan-0.3 selective), the input
    and output rows (2 h + 2 h = 8,192 B a row) at 48 rows a local token; gate + up and the activation output
    (2 x 2 f_e + 2 f_e) are kept on neither dispatcher (aten._grouped_mm is on no save list: selective.expert_gemms_kept
    never, memory.py [gmm3]), and the all-to-all, whose eager exchange is on no save list (selective.exchange_kept
    compiled, memory.py [xk]: the job does not compile), keeps none of the four; and the
    HybridEP ops' saves under the op SAC (layers/moe.py [20]: the dispatch's cached fp32 scores, 4 B x 48 rows, 192 B a
    local token, 81,788,928 B over the 26 layers; and the dispatch handle, 353.5 B a local token at R 8 in one NVLink
    domain, 150,585,344 B: tests/test_hybridep_torch_saves.py). topk's cached fp32 values and int64 indices (12 x 6 B a
    local token, 30,670,848 B) are the router's, kept on both dispatchers ([21], memory.py [tr]): no difference."""
    _, _, _, hy = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    _, s16, p16, a16 = _priced(tmp_path, "deepseek_v3_16b")
    load = float(plan_context(s16, p16).cf)
    per_row = 2 * H + 2 * H + 2 * 2 * FE + 2 * FE
    saves = MOE_LAYERS * N * (4 * 48 + 353.5)
    assert saves == 81_788_928 + 150_585_344
    assert not s16.sac_reruns_exchange and int(p16.compile) == 0  # the code keeps it; the job runs eager
    # gate + up and the activation output are kept on neither dispatcher (aten._grouped_mm on no save list, eager or
    # compiled: selective.expert_gemms_kept never, memory.py [gmm3]); the all-to-all's exchange outputs re-made eager
    # [xk]: HybridEP keeps its input and output rows (2 h + 2 h), the all-to-all none of the four
    assert per_row - (2 * 2 * FE + 2 * FE) == 2 * H + 2 * H
    want = MOE_LAYERS * N * 48 * (2 * H + 2 * H) + saves
    got = hy["memory"]["terms"]["layer_activations"] - a16["memory"]["terms"]["layer_activations"]
    assert got == pytest.approx(want, rel=1e-9)
    # 277.11 before the router's topk cache was priced on both, 277.09 before the eager exchange's outputs left [xk],
    # 296.79 before the grouped GEMMs' outputs left on both [gmm3] (48 rows of 2 x 2 f_e + 2 f_e on HybridEP less
    # 6 x load on the all-to-all)
    assert got / 2**30 == pytest.approx(156.22, abs=0.01)
    # memory no longer moves with the routing imbalance: the rows are the capacity's; nor on the all-to-all under
    # eager op SAC now that none of its routed rows is kept ([xk], [gmm3], the reorder saves and permutation index
    # re-made: [ro], [pi]) and the peak (the loss's backward) holds no layer's recompute buffer
    assert hy["moe"]["imbalance_bytes"] == 0.0 and a16["moe"]["imbalance_bytes"] == 0.0


def test_16b_hybridep_buffer_by_hand(tmp_path):
    """HybridEPBuffer at local_batch_size x seq_len / (cp x tp) = 16,384 tokens a rank (stack runs.
    hybridep_buffer_tokens local_batch), one 8-GPU NVLink domain: 587,202,560 B outside the allocator; the
    alltoall function none."""
    _, _, _, hy = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    _, _, _, a16 = _priced(tmp_path, "deepseek_v3_16b")
    assert hy["memory"]["terms"]["ep_buffers"] == HAND_BUFFER
    assert a16["memory"]["terms"]["ep_buffers"] == 0.0
    assert load_stack("torchtitan-0.3").runs.hybridep_buffer_tokens == "local_batch"
    assert load_stack("megatron").runs.hybridep_buffer_tokens == "dispatch"


def test_buffer_tokens_rule_floor_and_pp(tmp_path):
    """The local-batch rule: the Configurer's floor of 512 tokens (config.cuh l. 385-387), and under PP the local
    batch (gbs / dp), not the PP micro-batch: local 2 x seq 128 = 256 tokens -> 512; with pp 2 and micro-batch 1
    of a local batch of 4 at seq 2048: 8,192 tokens a rank, not 2,048 (PP with CUDA graphs off: trainer.py l. 183-187)."""
    from planner.memory import hybridep_tokens

    _, settings, plan, _ = _priced(tmp_path, "deepseek_v3_debugmodel_hybridep",
                                   "--parallelism.expert_parallel_degree 8 --training.local_batch_size 2 "
                                   "--training.seq_len 128")
    assert float(hybridep_tokens(settings, plan, plan_context(settings, plan))) == 512.0
    _, settings, plan, _ = _priced(tmp_path, "deepseek_v3_debugmodel_hybridep",
                                   "--parallelism.expert_parallel_degree 4 --parallelism.pipeline_parallel_degree 2 "
                                   "--parallelism.data_parallel_shard_degree 4 --training.local_batch_size 4 "
                                   "--parallelism.pipeline_parallel_microbatch_size 1 --training.disable_cuda_graphs")
    assert (int(plan.pp), int(plan.mbs), int(plan.gbs), int(plan.dp)) == (2, 1, 16, 4)
    assert float(hybridep_tokens(settings, plan, plan_context(settings, plan))) == 4 * 2048


def test_grouped_gemms_run_the_rows_routed(tmp_path):
    """torch.nn.functional.grouped_mm ignores the rows past offs[-1]: the GEMMs' shapes are the routed rows', the
    same as on the all-to-all; the gated activation's memory-bound bytes run over the capacity rows."""
    _, s_h, p_h, _ = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    _, s_a, p_a, _ = _priced(tmp_path, "deepseek_v3_16b")
    c_h, c_a = plan_context(s_h, p_h), plan_context(s_a, p_a)
    g_h = {r[0].name: (r[0].M, r[0].N, r[0].K, r[1]) for r in _moe(s_h).gemms(c_h)}
    g_a = {r[0].name: (r[0].M, r[0].N, r[0].K, r[1]) for r in _moe(s_a).gemms(c_a)}
    assert g_h == g_a
    from collections import defaultdict

    kb = defaultdict(lambda: 1.0)  # every kernel's bytes 1 an element: the widths alone
    moe = _moe(s_h)
    # width per token of the gated activation: routed rows x f_e (over the capacity rows) + the shared experts'
    w_h = float(moe.token_copies(c_h) * FE * c_h.expert_scale * moe.capacity_scale(c_h) + moe.num_shared * moe.fs)
    assert float(moe.token_copies(c_h) * c_h.expert_scale * moe.capacity_scale(c_h)) == pytest.approx(48.0, rel=1e-12)
    from planner.layers.mlp import mlp_elementwise_bytes

    assert float(moe.elementwise_bytes(c_h, kb, "")) == pytest.approx(
        float(mlp_elementwise_bytes(moe, w_h, c_h, kb, "") + moe.unfused_bytes(c_h, kb, "")), rel=1e-12)


def test_non_blocking_never_synchronises():
    """hybridep.py l. 1-20, 176-183: no device-to-host copy in non-blocking mode; the blocking one synchronises."""
    assert host_synced(False, "hybridep", non_blocking=True) is False
    assert host_synced(False, "hybridep") is True and host_synced(False, "alltoall", non_blocking=True) is True


def test_debugmodel_hybridep_needs_ep(cli, tmp_path):
    """deepseek_v3_debugmodel_hybridep keeps deepseek_v3_debugmodel's expert_parallel_degree 1, which 0.3 refuses at
    start-up (token_dispatcher.py l. 1238-1242): rule TORCHTITAN_HYBRIDEP; with ep 8 it is priced, E 8 top-3 over 8
    ranks: 8 x min(1, 3) = 8 rows a local token."""
    p = _line(tmp_path, "MODULE=deepseek_v3 CONFIG=deepseek_v3_debugmodel_hybridep NGPU=8 ./run_train.sh")
    assert_one_error(cli("explain", str(p), "--hardware", "h100-sxm"), "TORCHTITAN_HYBRIDEP",
                     "update_ep_token_dispatcher_config l. 1216-1242", "ep > 1")
    _, settings, plan, js = _priced(tmp_path, "deepseek_v3_debugmodel_hybridep", "--parallelism.expert_parallel_degree 8")
    assert float(plan_context(settings, plan).capacity_rows) == 8.0 and js["moe"]["dispatcher"] == "hybridep"


def test_rule_reads_ep_and_the_token_shards(tmp_path):
    """TORCHTITAN_HYBRIDEP's own check on a priced plan: ep 1, or seq_len % (cp x tp) (a seq the stack's
    TORCHTITAN_SEQ_DIVISOR, tp x 2 cp, refuses first on every plan it reaches)."""
    from dataclasses import replace

    from planner.startup import LATER_RULES

    rule = next(r for r in LATER_RULES if r.key == "TORCHTITAN_HYBRIDEP")  # (code 82; STACK_MODE_TP_PP_DP, 83, follows)
    _, settings, plan, _ = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    assert rule.key == "TORCHTITAN_HYBRIDEP" and not rule.broken(settings.model, settings.stack, plan)
    assert rule.broken(settings.model, settings.stack, replace(plan, ep=np.int64(1)))
    assert rule.broken(settings.model, settings.stack, replace(plan, tp=np.int64(2), dp=np.int64(4), seq=np.int64(4095)))
    # another dispatcher on the same plan: nothing to refuse
    st = settings.stack.model_copy(update={"defaults": settings.stack.defaults.model_copy(
        update={"moe_dispatcher": "alltoall"})})
    assert not rule.broken(settings.model, st, replace(plan, ep=np.int64(1)))


def test_capacity_factor_refused_off_hybridep_and_on_megatron():
    base = dict(model="qwen3-30b-a3b", gpus=8, ep=8, hardware="h100-sxm", moe_hybridep_capacity_factor=1.0)
    with pytest.raises(PlannerError, match="with moe_dispatcher alltoall"):
        resolve(Job(stack="torchtitan-0.3", moe_dispatcher="alltoall", **base))
    with pytest.raises(PlannerError, match="runs.hybridep_non_blocking"):
        resolve(Job(stack="megatron", moe_dispatcher="hybridep", **base))


def test_export_writes_the_hybridep_function_and_reads_back(tmp_path):
    """The export picks the config function whose dispatcher is the plan's (no option sets it), both ways."""
    for config in ("deepseek_v3_16b_hybridep", "deepseek_v3_16b"):
        _, settings, plan, js = _priced(tmp_path, config)
        text, _ = export_plan(js["plan"], "torchtitan")
        assert f"--config {config} " in text
        back = load_trainer_config(_line(tmp_path, text, f"back_{config}.sh"), hardware="h100-sxm").job
        assert back.get("moe_hybridep_capacity_factor") == js["plan"].get("moe_hybridep_capacity_factor")


def test_megatron_hybridep_prices_as_before(explain):
    """The megatron stack's HybridEP: no capacity rows, the first dispatch's tokens for the buffer (T / rep_div; 4,096
    here, above DeepEP's floor of 512)."""
    settings, plan, _, js = explain(model="qwen3-30b-a3b", gpus=8, ep=8, stack="megatron", moe_dispatcher="hybridep",
                                    micro_batch=1, seq_len=4096, global_batch=8, hardware="h100-sxm")
    ctx = plan_context(settings, plan)
    assert float(ctx.capacity_rows) == 0.0 and float(_moe(settings).capacity_scale(ctx)) == 1.0
    from planner.memory import hybridep_tokens

    assert np.all(hybridep_tokens(settings, plan, ctx) == ctx.T / ctx.rep_div)


def test_fit_and_explain_agree_on_the_capacity_rows(cli):
    """fit --stack torchtitan-0.3 --moe-dispatcher hybridep --moe-hybridep-capacity-factor 1.0 over ep 2, 4, 8 (the
    capacity rows ep x min(128 / ep, 8) = 16, 32, 64 a local token for Qwen3-30B-A3B): each row's reproduce line
    prices the same time and memory terms; no row at ep 1 (rule TORCHTITAN_HYBRIDEP)."""
    import json

    from conftest import explain_each_row

    args = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--stack", "torchtitan-0.3", "--moe-dispatcher", "hybridep",
            "--moe-hybridep-capacity-factor", "1.0", "--ep", "1,2,4,8", "--tp", "1", "--pp", "1", "--seq-len", "4096",
            "--global-batch", "32", "--hardware", "h100-sxm", "--top", "6"]
    r = cli("fit", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {row["plan"]["ep"] for row in rows} <= {2, 4, 8} and len(rows) >= 2
    job = Job(model="qwen3-30b-a3b", gpus=16, stack="torchtitan-0.3", moe_dispatcher="hybridep",
              moe_hybridep_capacity_factor=1.0, seq_len=4096, global_batch=32, hardware="h100-sxm")
    for row, one in explain_each_row(cli, job, rows):
        assert row["plan"]["moe_hybridep_capacity_factor"] == 1.0
        assert one["time"] == row["time"], row["plan"]
        assert one["memory"]["terms"] == row["memory"]["terms"], row["plan"]
        assert one["memory"]["stages"] == row["memory"]["stages"], row["plan"]


def test_export_refuses_the_blocking_dispatch(tmp_path):
    """A plan on the blocking HybridEP dispatch (no capacity factor: what fit's dispatcher search prices) has no
    transcribed config function: model_registry's moe_comm_backend / non_blocking_capacity_factor are the function's."""
    _, _, _, js = _priced(tmp_path, "deepseek_v3_16b_hybridep")
    p = dict(js["plan"])
    p.pop("moe_hybridep_capacity_factor")
    with pytest.raises(PlannerError, match=r"moe_dispatcher hybridep \(blocking\).*deepseek_v3_16b_hybridep: moe_dispatcher "
                                           r"hybridep, moe_hybridep_capacity_factor 1"):
        export_plan(p, "torchtitan")


# fit ranks what a 0.3 launch line reaches: HybridEP is built only by deepseek_v3_*_hybridep, at
# non_blocking_capacity_factor 1.0 (config_registry.py l. 114, 179), the stack's defaults.moe_hybridep_capacity_factor
FIT_16 = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--stack", "torchtitan-0.3", "--ep", "2,4,8,16", "--tp", "1",
          "--pp", "1", "--seq-len", "4096", "--global-batch", "32", "--hardware", "h100-sxm"]


def _fit_rows(cli, *extra, args=FIT_16):
    import json

    r = cli("fit", *args, *extra, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_hybridep_without_a_factor_takes_the_config_functions_one():
    """A job on hybridep that gives no factor runs the shipped functions' 1.0 (listed as inherited); 0 is the blocking
    dispatch, priced only where asked; alltoall reads none."""
    from planner.catalog import load_stack

    assert load_stack("torchtitan-0.3").defaults.moe_hybridep_capacity_factor == 1.0
    assert load_stack("megatron").defaults.moe_hybridep_capacity_factor is None
    base = dict(model="qwen3-30b-a3b", gpus=8, ep=8, hardware="h100-sxm", stack="torchtitan-0.3")
    s, p, _ = resolve(Job(moe_dispatcher="hybridep", **base))
    assert s.moe_hybridep_capacity_factor == 1.0 and ("moe_hybridep_capacity_factor", 1.0) in s.inherited
    # E 128, k 8 over ep 8: 8 x min(16, 8) x 1.0 = 64 rows a local token
    assert float(plan_context(s, p).capacity_rows) == 64.0
    s, p, _ = resolve(Job(moe_dispatcher="hybridep", moe_hybridep_capacity_factor=0.0, **base))
    assert s.moe_hybridep_capacity_factor == 0.0 and float(plan_context(s, p).capacity_rows) == 0.0
    s, _, _ = resolve(Job(moe_dispatcher="alltoall", **base))
    assert s.moe_hybridep_capacity_factor == 0.0
    # megatron's HybridEP is the blocking one: 0 is what it runs, anything above refused (as before)
    s, _, _ = resolve(Job(**{**base, "stack": "megatron"}, moe_dispatcher="hybridep", moe_hybridep_capacity_factor=0.0))
    assert s.moe_hybridep_capacity_factor == 0.0


def test_fit_no_longer_ranks_the_blocking_dispatch_first(cli):
    """fit ranked blocking HybridEP first here (0.804 s against the all-to-all's 0.809 s, on the model 0.3 builds), a
    row the export refuses (no config function builds it). The search now prices hybridep at the config functions'
    1.0 (64 capacity rows a token at ep 8: heavier), the all-to-all row leads and exports (qwen3_30b_a3b); the blocking
    dispatch comes back only with --moe-hybridep-capacity-factor 0, named in the row, and still refused by the export."""
    case = ["--model", "torchtitan:qwen3/30B-A3B", "--gpus", "16", "--stack", "torchtitan-0.3", "--ep", "2,4,8,16",
            "--global-batch", "32", "--hardware", "h100-sxm"]  # the case as found (tp, pp searched)
    rows = _fit_rows(cli, "--top", "4", args=case)
    top = rows[0]["plan"]
    assert top["moe_dispatcher"] == "alltoall" and "moe_hybridep_capacity_factor" not in top
    # 0.8094 s before branch ttexpert: its no-recompute row (70.2 GiB) takes the reorder and combine's saves
    # (memory.py [ro], 48 x 134,873,088 B) and no longer fits; the op-SAC row of the same split led (0.8605 s) until
    # the routed experts' grouped GEMMs were re-run under 0.3's op SAC compiled too (stack selective.expert_gemms_kept
    # never, memory.py [gmm3]): the op-SAC rows (tp 1 / 2 / 4, pp 1: 0.8605 / 0.8677 / 0.8705 s) fell behind and the
    # no-recompute row of tp 2, pp 2 (vpp 5, dp 4, 0.8730 s) led until GEMM tile quantization (compute.wave_efficiency
    # M N / (waves x SMs x tm x tn), tests/test_compute_tiles.py): each of its 16 local experts' GEMMs, priced apart on
    # 132 SMs at the busiest rank's 1,031.2 rows an expert, up [1031.2, 1536] and down [1031.2, 2048], runs
    # ceil(1031.2 / 256) = 5 row tiles of 256 x 128 (1,280 rows computed) in one wave: 60 / 132 = 0.455 and
    # 80 / 132 = 0.606 before, now 1031.2 x 1536 / (132 x 32,768) = 0.366 and 1031.2 x 2048 / (132 x 32,768) = 0.488
    # (x 1031.2 / 1280 = 0.806); grouped-GEMM efficiency 0.339 -> 0.273, compute 0.613 -> 0.685 s, step 0.9474 s.
    # The selective row of tp 1, pp 2 (vpp 13, dp 8, micro-batch 1) has 2,062.5 rows an expert: up 9 x 12 = 108
    # tiles in one wave, 0.818 -> 0.732, down 144 in two, 144 / 264 = 0.545 -> 0.488 (x 2062.5 / 2304 = 0.895);
    # efficiency 0.479 -> 0.429, step 0.8818 -> 0.9159 s, and led; but its split (48 layers + the two ends in pp 2 x
    # vpp 13 = 26 chunks, which no layers_per_stage gives) is module_fqns_per_model_part, which the 0.3 launch line
    # cannot carry: start-up rule TORCHTITAN03_STAGE_LISTS (code 97) drops it, and the same selective row at vpp 5
    # (50 units / 10 stages: layers_per_stage 5) led at 0.9182 s and exported, until a GEMM's output write was priced
    # after its K loop (compute [5a]: the experts' small K, 768 on the down projection, pays the most write a FLOP):
    # that row takes 0.9780 s and the no-recompute row of tp 4, pp 1 (dp 4, ep 8, 68.9 GiB) leads at 0.9615 s; 0.9638 s
    # with 0.3's int64 token counts' all-to-all before the tokens' (branch commleft: +2.3 ms a step, as it added 2.4 ms
    # to the pp 2 row; priced by hand in tests/test_moe_alltoall_exchanges.py; pp 1, so nothing from branch p2pbatch).
    # Since the routed experts' DP traffic splits as the dense traffic's (step.dp_expert_comm, branch expdp: FSDP2's
    # expert units gathered and reduced every micro-batch, each behind that micro-batch's own passes, where all hid
    # behind the step's) that row's DP exposed is 0.1704 -> 0.1977 s (its experts' 0.1867 s), 0.9923 s a step with the
    # head's TP collectives (step.py [36], 1.3 ms), and the selective row of tp 1, pp 2 (vpp 5, dp 8, ep 8), whose
    # experts lie on the FSDP units of a 2-stage pipeline, leads again at 0.9789 s (unchanged; it exports)
    assert (rows[0]["plan"]["recompute"], rows[0]["plan"]["tp"], rows[0]["plan"]["pp"]) == ("selective", 1, 2)
    assert (rows[0]["plan"]["vpp"], rows[0]["plan"]["dp"], rows[0]["plan"]["ep"]) == (5, 8, 8)
    assert rows[0]["time"]["step_s"] == pytest.approx(0.9789, abs=5e-4)
    assert all(r["plan"].get("moe_hybridep_capacity_factor", 1.0) == 1.0 for r in rows)
    assert "--config qwen3_30b_a3b " in export_plan(top, "torchtitan")[0]
    blocking = _fit_rows(cli, "--top", "1", "--moe-hybridep-capacity-factor", "0", args=case)[0]
    assert (blocking["plan"]["moe_dispatcher"], blocking["plan"]["moe_hybridep_capacity_factor"]) == ("hybridep", 0.0)
    # 0.8040 s (tp 1, ep 8, 70.5 GiB), as before branch ttexpert: since [ro] its all-to-all twin needs 76 GiB, and the
    # search dropped the candidate (0.8116 s, tp 4, ep 16) until it kept those another dispatcher fits (branch
    # dispsearch: test_dispatcher_search_keeps_a_row_only_another_dispatcher_fits below). With GEMM tile quantization
    # the tp 1, ep 8 row takes 0.8300 s (compute 0.506 -> 0.532 s) and tp 1, ep 16 (67.3 GiB; 0.8048 s before) leads at
    # 0.8153 s (compute 0.476 -> 0.486 s); its all-to-all twin needs 72.9 GiB, above the usable 71.2 GiB. With the
    # GEMMs' output write (compute [5a]) the same row leads at 0.8456 s
    assert (blocking["plan"]["tp"], blocking["plan"]["pp"], blocking["plan"]["ep"]) == (1, 1, 16)
    assert blocking["time"]["step_s"] == pytest.approx(0.8456, abs=5e-4)
    assert blocking["time"]["step_s"] < rows[0]["time"]["step_s"]
    with pytest.raises(PlannerError, match=r"moe_dispatcher hybridep \(blocking\)"):
        export_plan(blocking["plan"], "torchtitan")


def test_dispatcher_search_keeps_a_row_only_another_dispatcher_fits(cli):
    """The dispatcher search's best blocking row is the pinned dispatcher's best (explain and search must agree).
    That row is tp 1, pp 1, ep 16, dp 16 (fsdp2_no_reshard, no recompute): 0.8456 s at 67.3 GiB, while its all-to-all
    twin needs 72.9 GiB (78,282,292,995 B), above the usable 71.2 GiB, so only the blocking dispatcher fits it. Before
    GEMM tile quantization (compute.wave_efficiency) the row was tp 1, ep 8 at 0.8040 s (70.5 GiB; its all-to-all twin
    76.3 GiB); with tile quantization that row takes 0.8300 s and ep 16's 0.8048 -> 0.8153 s leads; with the GEMMs'
    output write priced after their K loop (compute [5a]) the same row, 0.8456 s."""
    case = ["--model", "torchtitan:qwen3/30B-A3B", "--gpus", "16", "--stack", "torchtitan-0.3", "--ep", "2,4,8,16",
            "--global-batch", "32", "--hardware", "h100-sxm", "--moe-hybridep-capacity-factor", "0"]
    pinned = _fit_rows(cli, "--top", "1", "--moe-dispatcher", "hybridep", args=case)[0]
    assert (pinned["plan"]["tp"], pinned["plan"]["pp"], pinned["plan"]["ep"], pinned["plan"]["dp"]) == (1, 1, 16, 16)
    assert pinned["time"]["step_s"] == pytest.approx(0.8456, abs=5e-4)
    searched = _fit_rows(cli, "--top", "1", args=case)[0]
    assert searched["time"]["step_s"] == pytest.approx(pinned["time"]["step_s"], abs=1e-9)


def test_fit_factor_without_a_dispatcher_sizes_the_hybridep_rows_only(cli):
    """--moe-hybridep-capacity-factor 0.5 with the dispatcher searched: the all-to-all rows carry no factor and price as
    without it, the hybridep rows run at 0.5 (ep 4: 4 x min(32, 8) x 0.5 = 16 rows a token); explain of each row's
    reproduce line prices the same terms. The top 12 (the first hybridep row at index 9 since a GEMM's output write is
    priced after its K loop, compute [5a]; within the top 8 before)."""
    from conftest import explain_each_row

    plain = {(r["plan"]["ep"], r["plan"]["dp"], r["plan"]["micro_batch"], r["plan"]["sharding_mode"],
              r["plan"]["recompute"]): r["time"]["step_s"] for r in _fit_rows(cli, "--top", "12")}
    rows = _fit_rows(cli, "--top", "12", "--moe-hybridep-capacity-factor", "0.5")
    kinds = {r["plan"]["moe_dispatcher"] for r in rows}
    assert kinds == {"alltoall", "hybridep"}, kinds
    for r in rows:
        p = r["plan"]
        if p["moe_dispatcher"] == "alltoall":
            assert "moe_hybridep_capacity_factor" not in p and r["moe"].get("capacity_rows") is None
            key = (p["ep"], p["dp"], p["micro_batch"], p["sharding_mode"], p["recompute"])
            if key in plain:
                assert r["time"]["step_s"] == plain[key]
        else:
            assert p["moe_hybridep_capacity_factor"] == 0.5
            assert r["moe"]["capacity_rows"] == p["ep"] * min(128 // p["ep"], 8) * 0.5
    job = Job(model="qwen3-30b-a3b", gpus=16, stack="torchtitan-0.3", moe_hybridep_capacity_factor=0.5, seq_len=4096,
              global_batch=32, hardware="h100-sxm")
    for row, one in explain_each_row(cli, job, rows):
        assert one["plan"].get("moe_hybridep_capacity_factor") == row["plan"].get("moe_hybridep_capacity_factor")
        assert one["time"] == row["time"], row["plan"]
        assert one["memory"]["terms"] == row["memory"]["terms"], row["plan"]


def test_fit_factor_with_no_hybridep_row_is_refused(cli):
    """The factor sizes nothing where the search prices no hybridep row: the job's own reason (megatron: no
    non-blocking dispatch) or the search's (a dense model: no MoE fields), exit 2."""
    r = cli("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--stack", "megatron", "--global-batch", "32",
            "--moe-hybridep-capacity-factor", "0.5")
    assert_one_error(r, "moe_hybridep_capacity_factor 0.5 on stack megatron", "runs.hybridep_non_blocking")
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan-0.3", "--moe-hybridep-capacity-factor",
            "0.5")
    assert_one_error(r, "moe_hybridep_capacity_factor set but llama3-8b has no experts")


def test_megatron_buffer_takes_deepeps_512_token_floor(explain):
    """Megatron passes the first dispatch's x.shape[-2] to HybridEPBuffer (fused_a2a.py @d98e8a64 l. 401, 343), whose
    Configurer takes max(tokens, 512) (DeepEP hybrid-ep @94a9f8f config.cuh l. 385-387): a micro-batch of 1 x 256
    tokens a rank is sized at 512. Qwen3-30B-A3B (h 2048, E 128) over ep 8 in one 8-GPU NVLink domain: 512 x 8 x
    (2 x 2048 + 4 x 16 x 8 + 4 x 16) + 128 x 512 x 8 = 19,660,800 B (before: 9,830,400 B at 256 tokens)."""
    from planner.memory import hybridep_tokens

    settings, plan, _, js = explain(model="qwen3-30b-a3b", gpus=8, ep=8, stack="megatron", moe_dispatcher="hybridep",
                                    micro_batch=1, seq_len=256, global_batch=8, hardware="h100-sxm")
    ctx = plan_context(settings, plan)
    assert float(ctx.T / ctx.rep_div) == 256.0 and float(hybridep_tokens(settings, plan, ctx)) == 512.0
    hand = 512 * 8 * (2 * 2048 + 4 * 16 * 8 + 4 * (2048 // 128)) + 128 * 512 * 8
    assert hand == 19_660_800
    assert js["memory"]["terms"]["ep_buffers"] == hand


# DeepEP's own Hybrid-EP checks (codes 58-61, keyed on the dispatcher: StartupRule.dispatcher) on torchtitan 0.3
TT16 = dict(model="torchtitan:deepseek_v3/16B", stack="torchtitan-0.3", moe_dispatcher="hybridep", tp=1, pp=1, cp=1)


def _tt_refused(rule: str, **kw) -> PlannerError:
    with pytest.raises(PlannerError) as e:
        resolve(Job(**{**TT16, **kw}))
    assert f"breaks start-up rule {rule} of torchtitan " in e.value.message, e.value.message
    assert e.value.message.startswith("torchtitan's HybridEP dispatcher (DeepEP's HybridEPBuffer"), e.value.message
    return e.value


def test_deepep_hybridep_rules_apply_on_torchtitan_03():
    """rules_for gives the four to every stack that runs hybridep (megatron, torchtitan-0.3), none to one that does not;
    Megatron's messages are its own words as before."""
    from planner.startup import BY_CODE, CODES, rules_for

    keys = ("MEGATRON_HYBRIDEP_GPU", "MEGATRON_HYBRIDEP_DOMAIN", "MEGATRON_HYBRIDEP_EXPERTS", "MEGATRON_HYBRIDEP_TOKENS")
    assert [CODES[k] for k in keys] == [58, 59, 60, 61]
    for st, has in (("megatron", True), ("torchtitan-0.3", True), ("torchtitan", False), ("deepseek", False)):
        got = {r.key for _, r in rules_for(load_stack(st))}
        assert all((k in got) == has for k in keys), st
    r = BY_CODE[58]
    assert r.text_on(load_stack("megatron")) == r.text == ("Megatron's Hybrid-EP dispatcher runs its TMA kernels on "
                                                           "compute capability 9.0+ only")
    assert r.trainer_on(load_stack("megatron")) == "megatron" and r.trainer_on(load_stack("torchtitan-0.3")) == "torchtitan"


def test_torchtitan_hybridep_needs_hopper():
    """TMA bulk copies (sm_90): the 16B at ep 8 on A100 is refused, on H100 it runs."""
    _tt_refused("MEGATRON_HYBRIDEP_GPU", gpus=8, ep=8, hardware="a100-sxm-80gb", global_batch=32, seq_len=4096)
    resolve(Job(**TT16, gpus=8, ep=8, hardware="h100-sxm", global_batch=32, seq_len=4096))


def test_torchtitan_hybridep_expert_columns():
    """The debug flavor (E 8) on H100 PCIe (NVLink pairs): ep 8 holds 1 expert a rank x 2 ranks a domain = 2, not a
    multiple of 4 (BufferConfig::is_valid): refused; ep 4, 2 x 2 = 4, runs."""
    base = dict(TT16, model="torchtitan:deepseek_v3/debugmodel", hardware="h100-pcie", gpus=8, global_batch=8,
                seq_len=2048)
    e = _tt_refused("MEGATRON_HYBRIDEP_EXPERTS", **base, ep=8)
    assert "(1 experts per rank x 2 ranks per NVLink domain; hidden size 256)" in e.message
    resolve(Job(**base, ep=4))


def test_torchtitan_hybridep_group_divisible_by_domain_ranks():
    """GB200 NVL72, 288 GPUs: EP 32 straddles a rack as 8 + 24 ranks (32 % 24 != 0): refused; EP 16 runs."""
    base = dict(TT16, hardware="gb200-nvl72", gpus=288, global_batch=288, seq_len=4096)
    e = _tt_refused("MEGATRON_HYBRIDEP_DOMAIN", **base, ep=32)
    assert "its 32 ranks meet 8 or 16 or 24 or 32 of their group in an NVLink domain of 72 GPUs on 288" in e.message
    resolve(Job(**base, ep=16))


def test_torchtitan_hybridep_token_cap_reads_the_local_batch():
    """Across domains (ep 16 over two 8-GPU H100 nodes) at most 21,844 tokens a rank, counted by 0.3's rule
    (runs.hybridep_buffer_tokens local_batch): with pp 2 the local batch gbs / dp = 64 / 16 = 4 sequences of 8,192 =
    32,768 tokens (3 x 32,768 + 1 = 98,305 >= 65,536), refused, where Megatron's rule (the micro-batch's 1 x 8,192)
    would pass; the same plan at a local batch of 2 x 8,192 = 16,384 runs."""
    from planner.startup import hybridep_tokens

    base = dict(TT16, hardware="h100-sxm", gpus=32, pp=2, ep=16, micro_batch=1, seq_len=8192, schedule="1f1b")
    e = _tt_refused("MEGATRON_HYBRIDEP_TOKENS", **base, global_batch=64)
    assert "32,768 tokens per rank as padded: 3 x 32,768 + 1 = 98,305" in e.message
    assert e.hint.startswith("lower the tokens per rank (the local batch x seq_len / (cp x tp)")
    settings, plan, _ = resolve(Job(**base, global_batch=32))
    assert int(hybridep_tokens(plan, settings.stack)) == 16_384 and int(hybridep_tokens(plan)) == 8_192


def test_stage_lists_rule_by_hand():
    """TORCHTITAN03_STAGE_LISTS (code 97) on Qwen3-30B-A3B's 48 layers with both ends counted (50 units), pp 2,
    interleaved: vpp 5 -> 10 stages, layers_per_stage ceil(50 / 10) = 5 gives ceil(50 / 5) = 10 stages: spelled;
    vpp 13 -> 26 stages, ceil(50 / 26) = 2 gives ceil(50 / 2) = 25 stages, not 26: refused; vpp 2 (the interleaved
    default) is never refused; torchtitan main (stage lists in its TOML) lists no such rule."""
    from types import SimpleNamespace

    import numpy as np

    from planner.catalog import load_stack
    from planner.pipeline import INTERLEAVED
    from planner.startup import BY_CODE, CODES, rules_for

    rule = BY_CODE[97]
    assert rule.key == "TORCHTITAN03_STAGE_LISTS" and CODES[rule.key] == 97
    tt03 = load_stack("torchtitan-0.3")
    assert 97 in [c for c, _ in rules_for(tt03)] and 97 not in [c for c, _ in rules_for(load_stack("torchtitan"))]
    plan = SimpleNamespace(pp=np.array([2, 2, 2, 1]), vpp=np.array([5, 13, 2, 13]), split_emb=np.ones(4, dtype=np.int64),
                           split_loss=np.ones(4, dtype=np.int64), schedule=np.full(4, INTERLEAVED))
    model = SimpleNamespace(num_layers=48)
    assert rule.check(model, tt03, plan, None).tolist() == [False, True, False, False]
