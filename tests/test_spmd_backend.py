"""torchtitan 0.3's parallelism.spmd_backend as the job field spmd_backend (issue 21; memory.py [sb]).

pytorch/torchtitan release/0.3 @4f9e9a47d config/configs.py l. 163-165: spmd_backend in partial_dtensor | full_dtensor |
spmd_types, default spmd_types (stack_db torchtitan-0.3 runs.spmd_backends). On the default the eager TP reduce-scatters
and the EP exchange are spmd_types' c10d autograd functions, on no op-SAC save list (stack selective.tp_collectives_kept
/ exchange_kept 'compiled', memory.py [tk] / [xk]); off it (token_dispatcher.py l. 258-266: `is_compiling() or
get_spmd_backend() != "spmd_types"`; DTensor redistributes) they are the _c10d_functional ops the save list holds
(distributed/activation_checkpoint.py l. 62-63): kept eager too, the same bytes and times as the fields 'always'."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.catalog import load_stack
from planner.explain import evaluate, to_json
from planner.trainers import load_trainer_config

from conftest import assert_one_error

# the eager selective jobs of test_torchtitan03_tp_sac.py and test_torchtitan_sac_all_to_all.py
DENSE = dict(model="llama3-8b", stack="torchtitan-0.3", gpus=8, tp=2, pp=1, sharding="fsdp", micro_batch=1,
             seq_len=4096, global_batch=4, recompute="selective")
MOE = dict(model="qwen3-30b-a3b", stack="torchtitan-0.3", gpus=8, tp=1, ep=8, pp=1, sharding="fsdp", micro_batch=1,
           seq_len=4096, global_batch=8, recompute="selective", moe_rank_imbalance=1.0)
# Llama 3 8B, T = 4,096 tokens, h 4,096, tp 2: 2 reduce-scatter outputs a layer of 2 B x h / t a token,
# 2 x 4,096 x 2 x 4,096 / 2 = 33,554,432 B, x 32 layers = 1,073,741,824 B (test_torchtitan03_tp_sac.py)
TP_KEPT = 32 * (2 * 4096 * 2 * 4096 // 2)
# Qwen3-30B-A3B: moe_expert_in + moe_expert_out, 2 B x h 2,048 a received row, 32,768 rows at rank load 1, 48 layers
# (test_torchtitan_sac_all_to_all.py): 48 x 32,768 x 2 x 2,048 x 2 = 12,884,901,888 B
EP_KEPT = 48 * 32_768 * 2 * 2048 * 2


def _always(settings, plan):
    """The same job with the stack's selective fields forced to 'always' (the pre-field harness rule O5)."""
    st = settings.stack
    keep = replace(settings, stack=st.model_copy(update={"selective": st.selective.model_copy(
        update={"tp_collectives_kept": "always", "exchange_kept": "always"})}))
    return to_json(keep, plan, evaluate(keep, plan))


def test_stack_field():
    spmd = load_stack("torchtitan-0.3").runs.spmd_backends
    assert (spmd.backends, spmd.default) == (["spmd_types", "partial_dtensor", "full_dtensor"], "spmd_types")
    assert load_stack("torchtitan").runs.spmd_backends is None


@pytest.mark.parametrize("backend", ["partial_dtensor", "full_dtensor"])
def test_dtensor_backend_keeps_the_tp_reduce_scatter_outputs(explain, backend):
    """Dense TP 2 eager selective: a DTensor backend prices what 'always' prices (bytes and TP time), 1,073,741,824 B
    more activations than the default spmd_types, which re-runs 2 TP pairs a layer: tp_comm 6 p against 5 p
    (p = tp_comm(no recompute) / 4)."""
    assert TP_KEPT == 1_073_741_824
    settings, plan, _, jd = explain(spmd_backend=backend, **DENSE)
    assert settings.spmd_backend == backend
    ja = _always(settings, plan)
    assert jd["memory"]["activations_bytes"] == ja["memory"]["activations_bytes"]
    assert jd["memory"]["total_bytes"] == ja["memory"]["total_bytes"]
    _, _, _, js = explain(**DENSE)
    _, _, _, jt = explain(spmd_backend="spmd_types", **DENSE)
    assert jd["memory"]["activations_bytes"] - js["memory"]["activations_bytes"] == TP_KEPT
    assert jt["memory"]["activations_bytes"] == js["memory"]["activations_bytes"]  # the default stated
    _, _, _, jn = explain(**dict(DENSE, recompute="none"))
    p = (jn["time"]["tp_comm_s"] - jn["time"].get("tp_head_s", 0.0)) / 4.0
    assert (jd["time"]["tp_comm_s"] - jd["time"].get("tp_head_s", 0.0)) == pytest.approx(5.0 * p, rel=1e-12)
    assert (js["time"]["tp_comm_s"] - js["time"].get("tp_head_s", 0.0)) == pytest.approx(6.0 * p, rel=1e-12)


def test_dtensor_backend_keeps_the_ep_exchange_outputs(explain):
    """Qwen3-30B-A3B eager selective: partial_dtensor keeps moe_expert_in / moe_expert_out (12,884,901,888 B over
    the default, which re-runs them) and re-runs no exchange: the same as 'always'."""
    assert EP_KEPT == 12_884_901_888
    settings, plan, _, jd = explain(spmd_backend="partial_dtensor", **MOE)
    ja = _always(settings, plan)
    assert jd["memory"]["activations_bytes"] == ja["memory"]["activations_bytes"]
    assert jd["moe"]["sac_rerun_s"] == 0.0
    _, _, _, js = explain(**MOE)
    assert jd["memory"]["activations_bytes"] - js["memory"]["activations_bytes"] == EP_KEPT
    assert js["moe"]["sac_rerun_s"] > 0.0


def test_refused_on_a_stack_without_the_option(cli):
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--stack",
                         "torchtitan", "--spmd-backend", "partial_dtensor"),
                     "spmd_backend partial_dtensor is set but stack torchtitan has no SPMD backend option",
                     "runs.spmd_backends", "hint: ")
    assert_one_error(cli("explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", "h100-sxm", "--stack",
                         "torchtitan-0.3", "--spmd-backend", "dtensor"), "--spmd-backend")


def test_cli_option_prices_the_field(cli):
    import json
    args = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--hardware", "h100-sxm", "--stack",
            "torchtitan-0.3", "--recompute", "selective", "--micro-batch", "1", "--seq-len", "4096",
            "--global-batch", "4", "--format", "json"]
    d = json.loads(cli(*args, "--spmd-backend", "partial_dtensor").stdout)
    s = json.loads(cli(*args).stdout)
    assert d["memory"]["activations_bytes"] - s["memory"]["activations_bytes"] == TP_KEPT


def test_launch_line_reads_the_backend(tmp_path):
    """--parallelism.spmd_backend partial_dtensor is read into the job field (priced, no longer 'not modelled');
    the default stated is ignored as the default; unstated: nothing set. (EP 8 under the standard all-to-all with CUDA
    graphs off, which 0.3.0 needs: trainer.py l. 189-210.)"""
    base = ("MODULE=qwen3 CONFIG=qwen3_30b_a3b NGPU=16 ./run_train.sh --parallelism.expert_parallel_degree 8 "
            "--training.disable_cuda_graphs")

    def read(line):
        p = tmp_path / "run.sh"
        p.write_text("#!/usr/bin/bash\n" + line + "\n")
        return load_trainer_config(p, hardware="h100-sxm")

    for backend in ("partial_dtensor", "full_dtensor"):
        cfg = read(f"{base} --parallelism.spmd_backend {backend}")
        assert cfg.job["spmd_backend"] == backend
        assert not any("spmd_backend" in n for n in cfg.not_modelled + cfg.ignored)
    cfg = read(f"{base} --parallelism.spmd_backend spmd_types")
    assert "spmd_backend" not in cfg.job and "parallelism.spmd_backend=spmd_types (the default)" in cfg.ignored
    assert "spmd_backend" not in read(base).job
