"""Megatron-Bridge's long-context Llama 3 recipes (issue 22): context parallel 2 to 8, read as they build and their
ring K/V exchange priced as the megatron stack prices Transformer Engine's P2P ring (step.py cp_ring_comm), then
written back (export --format megatron-bridge) and read again as the same plan and memory.

The recipes (NVIDIA-NeMo/Megatron-Bridge @dc805f5cf src/megatron/bridge/recipes/llama/llama3.py): each is its base
recipe line for line (llama3_8b_pretrain_config l. 225-303, llama3_70b_pretrain_config l. 658-745) but the layout
and the length, which it sets on both model.seq_length and dataset.seq_length (SEQUENCE_LENGTH_16K / 64K / 128K,
l. 32-34). No recipe nor the Llama provider sets model.cp_comm_type, so Megatron-Core 905c0e386 hands Transformer
Engine p2p (transformer_engine.py l. 1445-1446)."""

from __future__ import annotations

import json

import pytest

from planner import comm
from planner.trainers import detect_format, load_trainer_config
from planner.trainers.export import plan_signature

from conftest import explain_job

RUN = "scripts/training/run_recipe.py"
H100 = ["--hardware", "h100-sxm"]

# recipe -> (nodes of 8, TP, PP, VP, CP, SP, tokens, model, TP overlap): llama3.py @dc805f5cf 8B 16K l. 323-330,
# 8B 64K l. 404-411, 8B 128K l. 485-492 (no CommOverlapConfig: none in the recipe nor in _pretrain_common, so no TP
# overlap), 70B 16K l. 765-772, 70B 64K l. 854-861 (CommOverlapConfig(tp_comm_overlap=True) l. 827-830, 916-919)
RECIPES = {
    "llama3_8b_16k_pretrain_config": (2, 4, 2, 1, 2, True, 16384, "llama3-8b", False),
    "llama3_8b_64k_pretrain_config": (4, 4, 2, 1, 4, True, 65536, "llama3-8b", False),
    "llama3_8b_128k_pretrain_config": (8, 4, 2, 1, 8, True, 131072, "llama3-8b", False),
    "llama3_70b_16k_pretrain_config": (4, 8, 2, 1, 2, True, 16384, "llama3-70b", True),
    "llama3_70b_64k_pretrain_config": (32, 8, 4, 1, 8, True, 65536, "llama3-70b", True),
}


def _launch(tmp_path, recipe, nodes, *overrides):
    f = tmp_path / f"{recipe}.sh"
    f.write_text(f"torchrun --nproc_per_node 8 --nnodes {nodes} {RUN} --recipe {recipe} {' '.join(overrides)}\n")
    return f


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_long_context_recipes_read_as_they_build(tmp_path, recipe):
    """Each recipe on the GPUs its layout needs with DP 1 (TP x PP x CP): the layout, sequence parallelism, the length
    on both keys, the base recipe's global batch 512 and micro-batch 1 (l. 251-253 and the like), p2p (the job's
    default: no cp_comm_type written), 1,168,251 iterations of 512 x the length tokens."""
    nodes, tp, pp, vp, cp, sp, seq, model, tpo = RECIPES[recipe]
    f = _launch(tmp_path, recipe, nodes)
    assert detect_format(f) == "megatron-bridge"
    j = load_trainer_config(f, hardware="h100-sxm").job
    assert nodes * 8 == tp * pp * cp  # DP 1
    assert (j["model"], j["gpus"], j["stack"]) == (model, nodes * 8, "megatron-bridge")
    assert (j["tp"], j["pp"], j["vpp"], j["cp"], j["sequence_parallel"], j["seq_len"]) == (tp, pp, vp, cp, sp, seq)
    assert (j["global_batch"], j["micro_batch"], j["sharding_mode"], j["precision"]) == \
        (512, 1, "distributed_optimizer", "bf16")
    assert "cp_comm_type" not in j and j["tp_comm_overlap"] is tpo
    assert j["tokens"] == 1168251 * 512 * seq


def test_cp_ring_exchange_by_hand_on_the_16k_recipe(tmp_path):
    """llama3_8b_16k_pretrain_config on 2 nodes of 8 H100 (TP 4, PP 2, CP 2, DP 1), by hand: the CP pair is TP 4
    ranks apart (rank order tp-cp-dp-pp), within one node: NVLink. Each rank holds 16,384 / 2 = 8,192 tokens and
    8 / 4 = 2 of the 8 KV heads (head dim 128), so its K and V are 2 x 8,192 x 2 x 128 = 4,194,304 elements,
    8,388,608 B in bf16. Transformer Engine's P2P ring at CP 2 (one send, n = cp - 1 = 1; step.py cp_ring_comm):
    forward the local K/V once; backward the K/V (first step) and the dK/dV (bf16, last step), no middle step:
    three sends of 8,388,608 B a layer and micro-batch, each NV_LAT + bytes / NV_BW (comm.py's NVLink send).
    16 layers a stage (32 / PP 2), 512 micro-batches a step (global batch 512 / (micro-batch 1 x DP 1)).
    Every send hides behind its step's attention kernel but the stack's exposed share (overlapped_exposed_fraction
    0.189, stack_db megatron overlap), and the same figure as the megatron stack's job of the same layout."""
    f = _launch(tmp_path, "llama3_8b_16k_pretrain_config", 2)
    r = json.loads(_cli("explain", f, *H100, "--format", "json", "-q").stdout)
    assert r["placement"]["cp"]["tier"] == "NVLink" and r["placement"]["cp"]["stride"] == 4
    kv = 2 * (16384 // 2) * (8 // 4) * 128 * 2
    assert kv == 8_388_608
    send = comm.NVLINK_LATENCY_S + kv / (450e9 * comm.NVLINK_RING_EFFICIENCY)  # h100-sxm nvlink_GBps 450
    total = 512 * 16 * 3 * send
    assert r["time"]["cp_comm_total_s"] == pytest.approx(total, rel=1e-9)
    assert r["time"]["cp_comm_s"] == pytest.approx(0.189 * total, rel=1e-9)
    # the megatron stack's job of the same layout: the same exchange
    _, _, _, mg = explain_job(model="llama3-8b", gpus=16, tp=4, pp=2, cp=2, sequence_parallel=True, seq_len=16384,
                              global_batch=512, micro_batch=1, stack="megatron")
    assert mg["time"]["cp_comm_total_s"] == pytest.approx(total, rel=1e-9)


def test_cp_over_the_network_on_the_64k_recipe(tmp_path):
    """llama3_8b_64k_pretrain_config (TP 4, CP 4): the CP group's 4 ranks stride 4 over 16 GPUs, two nodes, so the
    ring crosses the network, and its local K/V (65,536 / 4 tokens) is twice the 16K recipe's: its exposed
    exchange a step is above the 16K recipe's."""
    a = json.loads(_cli("explain", _launch(tmp_path, "llama3_8b_64k_pretrain_config", 4), *H100, "--format", "json",
                        "-q").stdout)
    b = json.loads(_cli("explain", _launch(tmp_path, "llama3_8b_16k_pretrain_config", 2), *H100, "--format", "json",
                        "-q").stdout)
    assert (a["placement"]["cp"]["ranks"], a["placement"]["cp"]["stride"], a["placement"]["cp"]["tier"]) == \
        (4, 4, "network")
    assert a["time"]["cp_comm_s"] > b["time"]["cp_comm_s"] > 0.0


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_long_context_recipes_round_trip(cli, tmp_path, recipe):
    """export --format megatron-bridge of each recipe's plan, read back: the same plan and the same memory. The
    writer names the base recipe of the model (recipe_for matches by shape, first in RECIPES) and writes every priced
    setting over it, the length and CP among them."""
    nodes, tp, pp, vp, cp, sp, seq, model, tpo = RECIPES[recipe]
    f = _launch(tmp_path, recipe, nodes)
    out = tmp_path / "back.sh"
    assert cli("export", f, *H100, "--format", "megatron-bridge", "-o", out, "-q").exit_code == 0
    text = out.read_text()
    assert f"    model.context_parallel_size={cp} \\\n" in text and f"    model.seq_length={seq} \\\n" in text
    a = json.loads(cli("explain", f, *H100, "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, *H100, "--format", "json", "-q").stdout)
    assert plan_signature(b["plan"]) == plan_signature(a["plan"])
    assert b["memory"]["total_bytes"] == a["memory"]["total_bytes"]
    assert b["time"]["cp_comm_total_s"] == a["time"]["cp_comm_total_s"] > 0.0


def _cli(*args):
    from conftest import _Run

    r = _Run()(*args)
    assert r.exit_code == 0, r.stderr
    return r
