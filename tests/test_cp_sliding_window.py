"""Start-up rule MEGATRON_CP_SLIDING_WINDOW (code 72; issue 22/24 audit): Transformer Engine's
context parallelism runs a sliding-window layer only with cp_comm_type a2a or all_gather.

NVIDIA/TransformerEngine @4329ff84 (2.17.1, pinned by Megatron-LM @d98e8a64's uv.lock)
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
attn_forward_func_with_cp l. 4763-4769:

    sliding_window_attn = window_size is not None and window_size != (-1, 0) and window_size != (-1, -1)
    assert not sliding_window_attn or cp_comm_type in ["a2a", "all_gather"], ...

and Megatron-Core passes every windowed layer's window to TE (megatron/core/extensions/
transformer_engine.py @d98e8a64 l. 2163-2171). Before the rule, fit ranked gemma3-27b on 64 H100
with the default p2p ring at cp 2 second (8x2x1x4, 88.2 s), a plan Megatron would stop at its
first attention layer; explain priced mistral-7b at cp 2 with the ring. The window's reach does
not matter to the assert: Mistral 7B's 4,096 window at seq 4,096 is refused as well."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.trainers.rules import megatron_errors

MISTRAL = dict(model="mistral-7b", gpus=8, seq_len=8192, global_batch=8)


@pytest.mark.parametrize("cct, sizes", [(None, None), ("a2a+p2p", [2, 2]), ("a2a+p2p", [1, 4])])
def test_the_p2p_ring_with_a_window_is_refused(cct, sizes):
    """p2p (the default), a2a+p2p, and a2a+p2p with one a2a rank (TE runs it as p2p) refuse."""
    cp = 4 if sizes else 2
    with pytest.raises(PlannerError, match="MEGATRON_CP_SLIDING_WINDOW") as e:
        resolve(Job(**MISTRAL, cp=cp, cp_comm_type=cct, hierarchical_cp_sizes=sizes))
    assert "--cp-comm-type a2a" in e.value.hint


@pytest.mark.parametrize("cct, sizes", [("a2a", None), ("all_gather", None), ("a2a+p2p", [4, 1])])
def test_a2a_and_all_gather_run_a_window(cct, sizes):
    """a2a, all_gather, and a2a+p2p with one p2p rank (TE runs it as a2a) resolve."""
    s = resolve(Job(**MISTRAL, cp=4 if sizes else 2, cp_comm_type=cct, hierarchical_cp_sizes=sizes))
    assert int(s[1].cp) == (4 if sizes else 2)


def test_a_window_as_long_as_the_sequence_is_refused_and_global_layers_are_not():
    """TE checks the window, not its reach: mistral-7b at seq 4,096 (window 4,096) is refused at cp
    2; llama3-8b (global layers only) at cp 2 on the same ring resolves; cp 1 resolves; torchtitan 0.3.0
    (no such rule: its ring is torch's) resolves the same mistral plan under FSDP (torchtitan main builds no window
    on every layer, rule 73: docs/stack_models.md)."""
    with pytest.raises(PlannerError, match="MEGATRON_CP_SLIDING_WINDOW"):
        resolve(Job(**{**MISTRAL, "seq_len": 4096}, cp=2))
    assert int(resolve(Job(**{**MISTRAL, "model": "llama3-8b"}, cp=2))[1].cp) == 2
    assert int(resolve(Job(**MISTRAL))[1].cp) == 1
    assert int(resolve(Job(**MISTRAL, cp=2, stack="torchtitan-0.3", sharding="fsdp"))[1].cp) == 2


def test_fit_never_ranks_a_windowed_model_on_the_ring():
    """gemma3-27b (52 sliding layers of 1,024) on 64 H100 at its 32K pre-training length: no row
    with cp > 1 under the default p2p; with cp_comm_type a2a the cp 2 rows come back."""
    job = dict(model="gemma3-27b", gpus=64, seq_len=32768, global_batch=512, stack="megatron-bridge")  # post-norms
    opts = SpaceOptions(tp=(8,), cp=(1, 2), pp=(1, 2))
    rows = fit(Job(**job), opts=opts, top=200).rows
    assert rows and all(r["plan"]["cp"] == 1 for r in rows)
    rows = fit(Job(**job, cp_comm_type="a2a"), opts=opts, top=200).rows
    assert any(r["plan"]["cp"] == 2 for r in rows)


def test_the_argument_level_check_on_a_launch_script():
    """planner/trainers/rules.py CP_SLIDING_WINDOW on Megatron's own flags: --window-size 4095,0 at
    cp 2 without --cp-comm-type (p2p) fails, with a2a or all_gather passes, and --window-size -1,0
    (TE's no-window value) passes."""
    base = {"--num-layers": "32", "--hidden-size": "4096", "--num-attention-heads": "32",
            "--group-query-attention": None, "--num-query-groups": "8", "--seq-length": "8192",
            "--max-position-embeddings": "8192", "--context-parallel-size": "2", "--micro-batch-size": "1",
            "--global-batch-size": "8"}
    keys = lambda flags: [k for k, _ in megatron_errors(flags, 8, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})]  # noqa: E731
    assert "CP_SLIDING_WINDOW" in keys({**base, "--window-size": "4095,0"})
    assert "CP_SLIDING_WINDOW" not in keys({**base, "--window-size": "4095,0", "--cp-comm-type": "a2a"})
    assert "CP_SLIDING_WINDOW" not in keys({**base, "--window-size": "4095,0", "--cp-comm-type": "all_gather"})
    assert "CP_SLIDING_WINDOW" not in keys({**base, "--window-size": "-1,0"})
