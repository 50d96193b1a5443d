"""The litgpt-benchmark stack (lightning-thunder benchmark_litgpt.py @69ee6a218 on litgpt 0.4.11) builds sliding
windows and MoE as litgpt's model code does (issue 22): stack_db/litgpt-benchmark.yaml runs.layer_kinds (sliding,
moe, and the forms its code does not build: not_built), windowed_attention (the window as a dense [T, T] mask:
layers/attention.py [11], memory.py [lg3]) and moe_experts (a Python loop over the experts: layers/moe.py [16]).
Every figure below is worked by hand from litgpt v0.4.11 litgpt/model.py and the h100-sxm entry's datasheet
numbers, not read from the functions under test."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from planner.catalog import load_model, load_stack
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import GlobalAttention, Job, LayerKindBuilt, SlidingAttention
from planner.startup import model_layer_features, model_layer_forms, unbuilt_layer_forms

STACK = "litgpt-benchmark"
H100_HBM = 3.35e12 * 0.90            # hbm_TBps x HBM_EFFICIENCY (planner/efficiencies.py)
H100_ATTN_FWD = 365e12 * 0.85        # attention_fwd_TFLOPS x SUSTAINED_TENSOR_FRACTION (power fraction 1 at 700 W)
H100_ATTN_BWD = 310e12 * 0.85        # attention_bwd_TFLOPS x SUSTAINED_TENSOR_FRACTION


def _json(model, stack_update=None, **job):
    """explain's JSON for a job on litgpt-benchmark, the stack's fields replaced by stack_update."""
    settings, plan, _ = resolve(Job(model=model, stack=STACK, hardware="h100-sxm", **job))
    if stack_update:
        settings = replace(settings, stack=settings.stack.model_copy(update=stack_update))
    return to_json(settings, plan, evaluate(settings, plan))


# ---------------------------------------------------------------- what litgpt builds (start-up rule 73)
def test_litgpt_builds_the_mistral_and_mixtral_layers():
    """Mistral 7B (a 4,096 window on every layer: sliding_window_layer_placing 'all'), Mixtral 8x7B and 8x22B
    (LLaMAMoE on every layer, top-2 of 8, softmax over the top 2, no shared expert) lack nothing on the stack."""
    st = load_stack(STACK)
    for name in ("mistral-7b", "mixtral-8x7b", "mixtral-8x22b"):
        assert unbuilt_layer_forms(load_model(name), st) == {}, name
    explained = _json("mixtral-8x7b", gpus=8, seq_len=4096, global_batch=8, recompute="full")
    assert explained["params"]["total"] == 46_702_792_704


def test_gpt_oss_windows_are_litgpts_interleaved_placing_but_its_moe_is_not_llamamoe():
    """gpt-oss-20b: windows on the even-indexed layers, global on the odd ones (litgpt's 'interleaved':
    block_idx % 2 == 0), so the placement passes; its router's linear bias and clamped SwiGLU do not."""
    m = load_model("gpt-oss-20b")
    feats = model_layer_features(m)
    assert list(feats["sliding"]) == list(range(0, m.num_layers, 2))
    assert list(feats["global"]) == list(range(1, m.num_layers, 2))
    assert set(unbuilt_layer_forms(m, load_stack(STACK))) == {"router_linear_bias", "activation_clamp"}


@pytest.mark.parametrize("model, forms", [
    ("deepseek-v3", {"shared_experts", "dense_layers", "sigmoid_router", "expert_score_bias", "group_limited_routing"}),
    ("gemma3-27b", {"window_placement", "qk_norm"}),        # five windowed layers to one global; q/k norms
    ("qwen3-30b-a3b", {"qk_norm"}),                         # LLaMAMoE-shaped, but Qwen3's q_norm / k_norm
    ("llama4-scout", {"shared_experts", "sigmoid_router"}),  # (and chunked attention: a kind litgpt lacks)
    ("mixtral-8x7b", set()),
])
def test_the_forms_litgpt_does_not_build(model, forms):
    assert set(unbuilt_layer_forms(load_model(model), load_stack(STACK))) == forms


def test_refusal_names_the_form_and_litgpts_code():
    """Qwen3 30B-A3B on litgpt-benchmark: refused (exit 2 in explain) for its query/key norms, the message naming
    the form and litgpt's CausalSelfAttention lines; the hint names the stacks that build every layer."""
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND") as e:
        resolve(Job(model="qwen3-30b-a3b", gpus=8, stack=STACK, global_batch=8))
    msg = str(e.value)
    assert "qwen3-30b-a3b's global layers have query/key norms (qk_norm)" in msg
    assert "litgpt v0.4.11 litgpt/model.py l. 237-262 CausalSelfAttention.forward" in msg
    assert e.value.hint.startswith("choose a stack that builds every layer of qwen3-30b-a3b: ")
    assert STACK not in e.value.hint
    with pytest.raises(PlannerError, match="window_placement") as g:
        resolve(Job(model="gemma3-27b", gpus=8, stack=STACK, global_batch=8))
    assert "windows on 52 of 62 layers (0-4, 6-10" in str(g.value) and "sliding_window_layer_placing" in str(g.value)


def test_forms_by_hand_on_shapes_of_our_own():
    """Two window sizes (a 4,096 and a 1,024 window alternating, on every layer) -> window_sizes and
    windows_every_layer; windows on layers 1, 3, ... (the odd ones) -> window_placement (litgpt windows
    block_idx % 2 == 0); the even ones on a model of 2^31 - 1 layers -> windows_alternate, which litgpt builds
    ('interleaved'), read from the pattern's period (never layer by layer: the fuzz reproducers' size)."""
    base = load_model("mistral-7b")
    # Mistral's model-wide forms beside the windows (branch mdsfork2's Llama-era forms): RMSNorm, SwiGLU, 8 key/value
    # heads of 32, rotary positions, an untied output layer, no linear biases (its config.json)
    llama = {"rmsnorm", "gated_mlp", "grouped_query", "rotary_positions", "untied_embeddings", "no_linear_bias"}
    glob = base.layer_kinds["swa"].model_copy(update={"mixer": GlobalAttention()})
    two = base.model_copy(update={"layer_kinds": {
        "a": base.layer_kinds["swa"], "b": base.layer_kinds["swa"].model_copy(
            update={"mixer": SlidingAttention(kind="sliding", window=1024)})}, "layer_pattern": ["a", "b"]})
    assert set(model_layer_forms(two)) == llama | {"window_sizes", "windows_every_layer"}
    odd = base.model_copy(update={"layer_kinds": {"g": glob, "s": base.layer_kinds["swa"]}, "layer_pattern": ["g", "s"]})
    assert set(model_layer_forms(odd)) == llama | {"window_placement"}
    even = base.model_copy(update={"layer_kinds": {"g": glob, "s": base.layer_kinds["swa"]}, "layer_pattern": ["s", "g"],
                                   "num_layers": 2**31 - 1})
    assert set(model_layer_forms(even)) == llama | {"windows_alternate"}  # litgpt's 'interleaved': built there
    assert unbuilt_layer_forms(even, load_stack(STACK)) == {}


def test_not_built_forms_belong_to_their_kind():
    with pytest.raises(ValidationError, match="forms of another kind"):
        LayerKindBuilt(kind="sliding", sources=["x"], not_built=[{"form": "shared_experts", "sources": ["y"]}])
    with pytest.raises(ValidationError, match="twice"):
        LayerKindBuilt(kind="moe", sources=["x"], not_built=[{"form": "dense_layers", "sources": ["y"]},
                                                            {"form": "dense_layers", "sources": ["z"]}])
    with pytest.raises(ValidationError):
        LayerKindBuilt(kind="moe", sources=["x"], not_built=[{"form": "dense_layers", "sources": []}])


# ---------------------------------------------------------------- the window as a dense mask
def test_dense_mask_flops_by_hand():
    """Mistral 7B at 4,096 tokens (window 4,096): litgpt's windowed SDPA runs the whole 4,096 x 4,096 square,
    12 a d s = 12 x 32 x 128 x 4,096 = 201,326,592 FLOPs a token a layer, 32 layers 6,442,450,944; the causal
    kernel (a kernel that skips) runs half: the hardware FLOPs per token differ by 3,221,225,472. The model-FLOP
    convention (MFU) does not move."""
    dense = _json("mistral-7b", gpus=8, seq_len=4096, global_batch=8, recompute="none")
    skip = _json("mistral-7b", {"windowed_attention": None}, gpus=8, seq_len=4096, global_batch=8, recompute="none")
    assert dense["flops"]["hardware_flops_per_token"] - skip["flops"]["hardware_flops_per_token"] == 3_221_225_472
    assert dense["flops"]["model_flops_per_token"] == skip["flops"]["model_flops_per_token"]
    # under full recompute the forward runs again: a third of the extra once more
    d_rc = _json("mistral-7b", gpus=8, seq_len=4096, global_batch=8, recompute="full")["flops"]
    s_rc = _json("mistral-7b", {"windowed_attention": None}, gpus=8, seq_len=4096, global_batch=8,
                 recompute="full")["flops"]
    assert d_rc["recompute_flops_per_token"] - s_rc["recompute_flops_per_token"] == pytest.approx(3_221_225_472 / 3)


def test_dense_mask_time_by_hand():
    """The extra core time a step: one micro-batch of T = 4,096 tokens a GPU (global batch 8 on dp 8), per layer
    4 T a d (s - s/2) = 4 x 4,096 x 32 x 128 x 2,048 = 137,438,953,472 FLOPs more forward, 2.5 x that backward
    (FlashAttention's backward ratio), at the h100-sxm entry's FlashAttention-2 rates (365 and 310 TFLOP/s x
    0.85 sustained; head dim 128, attention_speed 1): 32 x (F / 310.25e12 + 2.5 F / 263.5e12) = 0.05590 s."""
    extra = 4 * 4096 * 32 * 128 * 2048
    want = 32 * (extra / H100_ATTN_FWD + 2.5 * extra / H100_ATTN_BWD)
    dense = _json("mistral-7b", gpus=8, seq_len=4096, global_batch=8, recompute="none")["time"]["compute_s"]
    skip = _json("mistral-7b", {"windowed_attention": None}, gpus=8, seq_len=4096, global_batch=8,
                 recompute="none")["time"]["compute_s"]
    assert dense - skip == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(0.05590, abs=5e-6)


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_dense_mask_memory_by_hand(micro_batch):
    """One bf16 [4,096, 4,096] mask a windowed layer and micro-batch, 2 x 4,096^2 = 33,554,432 B whatever the
    micro-batch size (it broadcasts over the batch): without recompute 32 layers keep 1,073,741,824 B; under
    full recompute the re-run block holds one (the recompute buffer), the block inputs alone are kept."""
    job = dict(gpus=8, seq_len=4096, global_batch=8 * micro_batch, micro_batch=micro_batch)
    for rc, term, want in (("none", "layer_activations", 32 * 33_554_432), ("full", "recompute_buffer", 33_554_432)):
        on = _json("mistral-7b", recompute=rc, **job)["memory"]["terms"]
        off = _json("mistral-7b", {"windowed_attention": None}, recompute=rc, **job)["memory"]["terms"]
        assert on[term] - off[term] == want, (rc, term)
    on = _json("mistral-7b", recompute="full", **job)["memory"]["terms"]
    off = _json("mistral-7b", {"windowed_attention": None}, recompute="full", **job)["memory"]["terms"]
    assert on["layer_activations"] == off["layer_activations"]


def test_a_global_model_has_no_mask():
    """Llama 2 7B (no window) prices the same with and without the stack's windowed_attention."""
    on = _json("llama2-7b", gpus=8, seq_len=4096, global_batch=8)
    off = _json("llama2-7b", {"windowed_attention": None}, gpus=8, seq_len=4096, global_batch=8)
    assert on["memory"]["total_bytes"] == off["memory"]["total_bytes"] and on["time"] == off["time"]


# ---------------------------------------------------------------- the experts as a Python loop
def _loop_bytes_by_hand(E, k, h):
    """(forward, backward) bytes a token of LLaMAMoE's loop beside its GEMMs and SwiGLU (layers/moe.py [16]),
    written out op by op from litgpt v0.4.11 model.py l. 393-404 (k rows a token, balanced routing)."""
    fwd_token = (2 * E + 10 * k)      # topk: read the bf16 logits, write bf16 values and int64 indices
    fwd_token += 2 * k + 4 * k        # softmax(dtype=float): read bf16, write fp32
    fwd_token += 4 * k + 2 * k        # .to(bf16)
    fwd_token += 8 * k + k * E        # indices == arange(E): a bool [k, E] a token
    fwd_token += 2 * h                # zeros_like(x)
    fwd_token += k * E                # E torch.where reading their bool [n, k] slices
    fwd_row = 16 + (8 + 4 * h) + 20 + (4 * h + 2) + (8 + 4 * h) + 6 * h + (8 + 4 * h)
    bwd_token = (E - 1) * (4 * h + 2 * h + 6 * h)   # index_put_'s copy, getitem's zeros, their sum (not expert 0)
    bwd_token += E * (2 * h + 6 * h)                  # x[token_idx]'s zeros and the sum into x's gradient
    bwd_token += E * 2 * k + (E - 1) * 6 * k          # the probabilities' zeros and sums
    bwd_token += 6 * k + 10 * k + (2 * E + 12 * k)    # cast back, softmax backward, topk backward
    bwd_row = (8 + 4 * h) + (4 * h + 2) + (8 * h + 2) + 22 + (8 + 6 * h)
    bwd_row += (E - 1) / E * ((6 * h + 8) + (8 + 6 * h))
    return fwd_token + k * fwd_row, bwd_token + k * bwd_row


def test_loop_bytes_by_hand_mixtral():
    """Mixtral 8x7B (E 8, top-2, h 4,096): 188,648 B a token forward, 872,748 B backward; under full recompute
    the forward runs twice: 32 layers x 4,096 tokens x (2 x 188,648 + 872,748) B at 3.35 TB/s x 0.9 = 0.05434 s,
    explain's moe_permute_s row."""
    fwd, bwd = _loop_bytes_by_hand(8, 2, 4096)
    assert (fwd, bwd) == (188_648, 872_748)
    got = _json("mixtral-8x7b", gpus=8, seq_len=4096, global_batch=8, recompute="full")
    want = 32 * 4096 * (2 * fwd + bwd) / H100_HBM
    assert got["time"]["moe_permute_s"] == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(0.054344, abs=1e-6)
    assert got["moe"]["experts"] == "per_expert_loop" and got["plan"]["ep"] == 1


def test_loop_replaces_the_dispatchers_bytes_only_on_its_stack():
    """Without moe_experts the same job prices Megatron's permutation kernels (layers/moe.py dispatch_bytes):
    a different figure, and the explain report names the dispatcher."""
    loop = _json("mixtral-8x7b", gpus=8, seq_len=4096, global_batch=8, recompute="full")
    disp = _json("mixtral-8x7b", {"moe_experts": None}, gpus=8, seq_len=4096, global_batch=8, recompute="full")
    assert "experts" not in disp["moe"] and disp["time"]["moe_permute_s"] != loop["time"]["moe_permute_s"]
    # the GEMMs, cores and kernels (compute_s) are the same; the loop's bytes are the moe_permute row's own
    assert loop["time"]["compute_s"] == pytest.approx(disp["time"]["compute_s"], rel=1e-12)


def test_no_expert_parallelism_on_litgpt():
    """benchmark_litgpt.py has no EP option (stack expert_parallel null): ep 2 is refused."""
    with pytest.raises(PlannerError, match="no expert parallelism"):
        resolve(Job(model="mixtral-8x7b", gpus=8, ep=2, stack=STACK, global_batch=8))


def test_explain_lists_how_litgpt_runs_the_windows_and_the_experts():
    """explain's assumed lines name the two mechanisms where the model has such layers, and neither for Llama 2."""
    w = _json("mistral-7b", gpus=8, seq_len=4096, global_batch=8)["assumed"]
    assert any(a.startswith("sliding windows as stack litgpt-benchmark's code runs them: one dense [s, s] mask")
               for a in w)
    e = _json("mixtral-8x7b", gpus=8, seq_len=4096, global_batch=8, recompute="full")["assumed"]
    assert any(a.startswith("MoE experts as stack litgpt-benchmark's code runs them: a Python loop") for a in e)
    assert not any(a.startswith(("sliding windows as", "MoE experts as"))
                   for a in _json("llama2-7b", gpus=8, seq_len=4096, global_batch=8).get("assumed", []))
