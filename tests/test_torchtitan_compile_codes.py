"""What torch.compile compiles in each torchtitan model code (issue 21 (a)): ModelCode.compiles_blocks.

torchtitan @e347b1e5e: llama3's parallelize applies apply_compile to every TransformerBlock after apply_ac
(models/llama3/infra/parallelize.py l. 107-123, 256-269); llama4's apply_compile (l. 593-690) compiles a dense
block whole and an MoE block child by child, with the experts' _run_experts_grouped_mm compiled apart;
deepseek_v3 and qwen3 import llama4's; gpt_oss's parallelize_gptoss (l. 61-172) calls none, so with
compile.enable its blocks run eager, silently, while the loss is still compiled (components/loss.py l. 33-35).
torchtitan 0.3.0 (release/0.3 @4f9e9a47d): every code, gpt_oss included, calls distributed/compile.py
apply_compile. The planner prices a code that compiles no block with the stack's eager kernels and saves
(stacks.kernel_bytes: the loss's fields compiled, the layers' eager; memory.experts_run_eager) and lists it
as assumed (startup.model_code_compile_note)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.catalog import load_hardware, load_stack
from planner.explain import evaluate
from planner.plan import resolve
from planner.schema import Job
from planner.stacks import kernel_bytes
from planner.step import HBM_EFFICIENCY

# torchtitan @e347b1e5e / release/0.3 @4f9e9a47d, read by hand (the sources in stack_db): does the code compile its blocks
COMPILES = {"torchtitan": {"llama3": True, "llama4": True, "deepseek_v3": True, "qwen3": True, "gpt_oss": False},
            "torchtitan-0.3": {"llama3": True, "deepseek_v3": True, "qwen3": True, "gpt_oss": True}}

OSS = dict(model="gpt-oss-20b", gpus=64, hardware="h100-sxm", stack="torchtitan", global_batch=512, seq_len=4096,
           micro_batch=2, tp=1, pp=1, cp=1, ep=8, etp=1, sharding="fsdp", recompute="selective")
V_OSS = 201_088  # gpt-oss-20b's vocab_size (model_zoo/gpt-oss-20b.yaml; config.json vocab_size 201088)


def test_each_code_says_whether_it_compiles_its_blocks():
    for stack, want in COMPILES.items():
        codes = load_stack(stack).runs.model_codes
        assert {c.code: c.compiles_blocks for c in codes} == want
        for c in codes:  # each code cites what it compiles
            assert any(s.startswith(f"compiles_blocks {str(want[c.code]).lower()}:") for s in c.sources), c.code


def test_gpt_oss_kernels_eager_and_loss_compiled_under_compile():
    s, plan, _ = resolve(Job(**OSS, torch_compile=True))
    assert not s.code_compiles_blocks and int(plan.compile) == 1
    kb = kernel_bytes(s.stack, plan.compile, s)
    # stack_db/torchtitan.yaml: kernels norm 36, norm_saved_extra 4, mlp_activation_gated 10 (eager); compiled_kernels
    # loss_per_logit 9, loss_saved_per_logit 4, loss_pool_per_logit 0
    assert (kb["norm"], kb["norm_saved_extra"], kb["mlp_activation_gated"]) == (36.0, 4.0, 10.0)
    assert (kb["loss_per_logit"], kb["loss_saved_per_logit"], kb["loss_pool_per_logit"]) == (9.0, 4.0, 0.0)
    # a code that compiles its blocks (llama3): the compiled layer kernels (norm 4, norm_saved_extra 0)
    s8, p8, _ = resolve(Job(model="llama3-8b", gpus=8, hardware="h100-sxm", stack="torchtitan", global_batch=64,
                            seq_len=8192, tp=1, pp=1, sharding="fsdp", torch_compile=True))
    assert s8.code_compiles_blocks
    kb8 = kernel_bytes(s8.stack, p8.compile, s8)
    assert (kb8["norm"], kb8["norm_saved_extra"], kb8["loss_saved_per_logit"]) == (4.0, 0.0, 4.0)


def test_gpt_oss_compile_on_moves_only_the_loss():
    """gpt-oss-20b, op SAC: with compile on only the compiled loss differs from compile off. Its peak holds the loss's
    backward: (12 - 4) B a logit less (eager fp32 log-softmax, nll and log-softmax gradients against the compiled
    bf16 logits and gradient), and the allocator's bf16-logit block (2 B a logit, loss_pool_per_logit) gone; the
    layers' activations (the routed experts' gate/up and activation outputs re-run, not kept: memory.py [gmm]) and
    recompute buffer the same. The step: the loss's bytes (36 - 9 B a logit) once per micro-batch at HBM speed."""
    on, off = (evaluate(*resolve(Job(**OSS, torch_compile=c))[:2]) for c in (True, False))
    t_mb = 2 * 4096  # micro-batch 2 x 4,096 tokens
    mem_on, mem_off = on.memory, off.memory
    for k in mem_on:
        d = float(np.asarray(mem_on[k]) - np.asarray(mem_off[k]))
        want = {"output_activations": -(12 - 4) * t_mb * V_OSS, "stream_pools": -2 * t_mb * V_OSS}.get(k, 0.0)
        assert d == pytest.approx(want, abs=1.0), k
    hw = load_hardware("h100-sxm")
    n_mb = 512 // (64 * 2)  # global batch / (dp 64 x micro-batch 2): 4 micro-batches a step
    loss_s = (36 - 9) * t_mb * V_OSS * n_mb / (hw.hbm_bandwidth * HBM_EFFICIENCY)
    assert float(off.time["compute"] - on.time["compute"]) == pytest.approx(loss_s, rel=1e-9)


def test_a_compiling_code_keeps_the_compiled_expert_gemms():
    """qwen3-30b-a3b (torchtitan's qwen3 code imports llama4's apply_compile): with compile the selective policy keeps
    the compiled _run_experts_grouped_mm's outputs (memory.py [gmm]): more layer activations than without; gpt_oss,
    whose code compiles nothing, keeps them under neither (the test above)."""
    job = dict(OSS, model="qwen3-30b-a3b")
    on, off = (evaluate(*resolve(Job(**job, torch_compile=c))[:2]) for c in (True, False))
    assert float(on.memory["layer_activations"]) > float(off.memory["layer_activations"])
    s, plan, _ = resolve(Job(**OSS, torch_compile=True))
    flipped = evaluate(replace(s, code_compiles_blocks=True), plan)  # as if gpt_oss's code compiled: kept
    oss = evaluate(s, plan)
    assert float(flipped.memory["layer_activations"]) > float(oss.memory["layer_activations"])


def test_the_note_says_so_where_the_code_compiles_nothing():
    s, _, _ = resolve(Job(**OSS, torch_compile=True))
    notes = [a for a in s.code_assumed if a.startswith("torch.compile:")]
    assert len(notes) == 1 and "gpt_oss" in notes[0] and "priced eager" in notes[0]
    s03, _, _ = resolve(Job(**dict(OSS, stack="torchtitan-0.3")))
    assert s03.code_compiles_blocks and not [a for a in s03.code_assumed if a.startswith("torch.compile:")]
    s8, _, _ = resolve(Job(**dict(OSS, model="qwen3-30b-a3b")))
    assert not [a for a in s8.code_assumed if a.startswith("torch.compile:")]
