"""DeepSpeed ZeRO-3 with a tied output layer (planner/memory.py [z3t]; the model field tied_embeddings), derived by hand
from microsoft/DeepSpeed @38327e07 and microsoft/Megatron-DeepSpeed @8fd352da:

- Megatron-DeepSpeed's GPTModel.forward (megatron/model/gpt_model.py l. 126-133) passes word_embeddings_weight()
  (megatron/model/module.py l. 53-55: with one pipeline stage the embedding module's own weight) to
  parallel_lm_logits (language_model.py l. 29-38, F.linear): one leaf parameter used by two modules.
- The engine's forward sets _parameters._in_forward on every module (engine.py l. 1974-1992), so the access outside
  the embedding module registers the weight as an external parameter of the module running, GPTModel
  (parameter_offload.py ZeROOrderedDict.__getitem__ l. 56-70; partitioned_param_coordinator.py get_all_parameters
  l. 34-36 then counts it among GPTModel's). GPTModel's pre-backward hook gathers it at the loss's backward; its
  post-backward hook hangs on its inputs, the token ids, which need no gradient, so it never fires (nor the
  embedding's): the weight stays gathered to the step's _partition_all_parameters (stage3.py l. 2091;
  parameter_offload.py partition_all_parameters l. 183-190 says so), in __n_available_params (l. 484), which bounds
  the prefetch (l. 379-381).
- The gradient hook is register_post_accumulate_grad_hook (utils/torch.py l. 25-31): autograd runs the weight's one
  AccumulateGrad node once both uses' gradients are in, at the embedding's backward, the last of the backward; the
  output layer's V/t x h gradient (2 B) waits in its input buffer through every layer's backward.

So beside every layer's moment: the tied weight and its gradient, 2 x V/t x h x 2 B (term zero3_tied_output); at the
embedding's backward (the end of the backward, no layer's activations): the weight, the held gradient and the
embedding's own V/t x h gradient, 3 x V/t x h x 2 B, + its incoming gradient (tokens x h x 2 B), beside the kept
tensors, the IPG buffer and the persistent parameters; its excess over the peak adds to the term.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.memory import zero3_layer_peak

TOY = dict(stage3_max_live_parameters=10, stage3_prefetch_bucket_size=1, stage3_max_reuse_distance=10,
           reduce_bucket_size=2, stage3_param_persistence_threshold=0, sub_group_size=10)
MODS = [np.float64(3), np.float64(1), np.float64(4), np.float64(4)]  # q, p, u, d (tests/test_zero3_working_set.py)


def test_toy_held_parameters_shrink_the_prefetch():
    """Held 6 (a tied weight gathered all backward): the prefetch budget is min(L 10 - gathered - 6, P 1).
    Full recompute (u and d kept from their re-run, test_zero3_working_set's docstring):
      re-run q 3 (+ p 1: budget 1) = 4; re-run p 1 (+ u 4: budget 1) = 5; re-run u 4 (budget 0) = 4; re-run d 4 + u 4 = 8
      back d: 4 + kept u 4 = 8 (budget < 0), gradients d 4 + the layer above's q 3 (> B 2) = 7    -> 15, the peak
      back u: 4 (budget 0), gradients 4 + 4 = 8 -> 12; back p: 1 + q 3 = 4, gradients 5 -> 9; back q: 3 + 3 = 6, + 3 -> 9
    (16 without the held ones: back d prefetched p). Without recompute: back d 4 + 7 = 11, back u 4 + 8 = 12, the peak
    (back p 4 + 5, back q 3 + the next layer's d 4 + 3 = 10); 15 without the held ones."""
    g, d, c = zero3_layer_peak(MODS, True, TOY, held=6.0)
    assert (float(g), float(d), float(c)) == (8.0, 7.0, 0.0)
    g, d, c = zero3_layer_peak(MODS, False, TOY, held=6.0)
    assert (float(g), float(d), float(c)) == (4.0, 8.0, 0.0)
    g, d, c = zero3_layer_peak(MODS, True, TOY, held=0.0)  # the untied reading (test_zero3_working_set)
    assert (float(g), float(d), float(c)) == (9.0, 7.0, 0.0)


def _model(tmp_path, name, **fields):
    """model_zoo/gpt3-175b.yaml with fields replaced, as a model file."""
    model = yaml.safe_load((Path(__file__).parents[1] / "model_zoo" / "gpt3-175b.yaml").read_text())
    model.update(name=name, **fields)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(model))
    return str(path)


GPT3 = dict(gpus=64, stack="megatron-deepspeed", sharding="fsdp", recompute="full", micro_batch=1, global_batch=64,
            hardware="a100-sxm-80gb")
H2 = 12288**2


def test_gpt3_untied_keeps_the_prefetch(explain, tmp_path):
    """GPT-3 175B untied (tied_embeddings false): no zero3_tied_output, and back fc2's GEMM prefetches fc1 again
    (budget min(1e9 - 4 h^2, 5e7) = 5e7): 8 h^2 gathered + its gradient 4 h^2; the output layer's own moment,
    2 x 50,304 x h = 1.24e9, below that 12 h^2 = 1.81e9. Tied (the catalog's): 4 h^2 + 4 h^2 and the tied pair
    2 x 2 B x 618,135,552 (test_zero3_working_set.test_gpt3_defaults): 2.47e9 B more, 1.21e9 B less gathered."""
    untied = explain(model=_model(tmp_path, "gpt3-untied", tied_embeddings=False), **GPT3)[3]["memory"]["terms"]
    assert (untied["zero3_working_set"], untied["zero3_unreduced_grads"], untied["zero3_tied_output"]) == \
        (2 * 8 * H2, 2 * 4 * H2, 0.0)
    tied = explain(model="gpt3-175b", **GPT3)[3]["memory"]["terms"]
    assert (tied["zero3_working_set"], tied["zero3_unreduced_grads"], tied["zero3_tied_output"]) == \
        (2 * 4 * H2, 2 * 4 * H2, 2 * 2 * 50304 * 12288)  # 50,304: the fork's rows at tp 1 (stack_db vocab_padding)


def test_tied_output_only_under_zero3(explain):
    """ZeRO-1 gathers nothing: the term is 0 (its parameters are whole on every rank)."""
    assert explain(model="gpt3-175b", **{**GPT3, "sharding": "zero1"})[3]["memory"]["terms"]["zero3_tied_output"] == 0.0


def test_end_of_backward_moment(explain, tmp_path):
    """A wide, shallow tied model (h 4,096, 1 layer, vocab 256,000, seq 128, micro-batch 1) on 8 GPUs, reduce_bucket_size
    1e7: the embedding's backward holds the tied weight, its held gradient and the embedding's own gradient,
    3 x 256,000 x 4,096 x 2 B = 6,291,456,000 B, + the incoming gradient 128 x 4,096 x 2 B, beside the kept tensors
    (the states, workspaces), the IPG buffer 2 B x 1e7 and the persistent norms and biases: above the backward's peak,
    whose loss tensors (128 tokens x 256,000 logits), layer and bucket are far smaller than the weight's V h. The
    stage's allocated peak is that moment (the step's, 6 B x the local 1.6e8 parameters [z3s], is below it)."""
    small = _model(tmp_path, "gpt-wide-tied", num_layers=1, hidden_size=4096, ffn_hidden_size=16384,
                   num_attention_heads=32, vocab_size=256000, max_seq_len=128)
    m = explain(model=small, gpus=8, stack="megatron-deepspeed", sharding="fsdp", recompute="full", micro_batch=1,
                global_batch=8, seq_len=128, hardware="a100-sxm-80gb",
                deepspeed_zero3={"reduce_bucket_size": 10_000_000})[3]["memory"]
    t = m["terms"]
    kept = sum(t[k] for k in ("weights", "gradients", "master_weights", "adam", "workspaces", "mpu_buffer",
                              "model_buffers", "quantized_weights", "dummy_wgrads"))
    v_h = 256000 * 4096
    end = kept + 2 * 1e7 + t["zero3_persistent"] + 3 * 2 * v_h + 2 * 128 * 4096
    assert m["allocated_bytes"] == pytest.approx(end, rel=1e-12)
    assert t["zero3_tied_output"] > 2 * 2 * v_h  # the pair beside a layer, and the end's excess over that peak
    assert t["zero3_step_grads"] == 0.0
