"""The pipeline's word-embedding gradient all-reduce under Megatron-FSDP and torch FSDP2 (planner/step.py [20],
pp_tied_grads; stack_db runs.sharding embedding_grad_shard).

What the code moves, NVIDIA/Megatron-LM @d98e8a64:
- megatron/core/distributed/finalize_model_grads.py l. 250-258: `grad_attr = _get_main_grad_attr(weight)`;
  `if ddp_config.use_megatron_fsdp: orig_grad = orig_grad._local_tensor`; `torch.distributed.all_reduce(grad,
  group=embd_group)`. By then (finish_grad_sync, megatron_fsdp.py l. 1376-1427) the module's weight is the
  optimizer's DTensor parameter, with no main_grad attribute: grad_attr is "grad".
- fsdp/src/megatron_fsdp/param_and_grad_buffer.py update_main_grads l. 3351-3409: param.grad's local tensor is
  main_grad_buffer.get_item(item_id, only_shard=True) at every level but no_shard (optim: a virtual shard of the whole
  buffer; optim_grads / optim_grads_params: the sharded buffer), .to(param.dtype), the fp32 main weight's
  (--megatron-fsdp-main-params-dtype default fp32); with use_decoupled_grad (--use-precision-aware-optimizer,
  training.py l. 2649-2650) it goes to param.decoupled_grad and param.grad stays None: finalize_model_grads returns
  before the all-reduce (l. 255-257).
- _get_parameter_groups l. 1774-1785: each shared_embedding copy (both ends: language_module.py l. 270-290) is a
  bucket of its own; l. 1876-1912 its chunk size is h; l. 283-286 the bucket padded to a multiple of n x h; l. 410-411
  n equal shards. A rank's piece: ceil(V/tp / n) x h elements, n the main buffer's group (dp x cp; HSDP's shard group
  x cp).
Megatron-Core 905c0e386 (stack megatron-bridge) the same, but update_main_grads sets param.grad whatever the optimizer
(l. 2845, 2872 read a use_precision_aware_optimizer attribute that nothing sets).
torch FSDP2: --use-torch-fsdp2 asserts pipeline_model_parallel_size == 1 and untied embeddings (arguments.py
l. 1034-1035, 1044-1045): no embedding group of two ranks, nothing moves.

By hand, Llama 3 8B (V 128,256, h 4,096, untied) with one MTP module (its stage's embedding copy all-reduced with the
first stage's) on 16 H100s, tp 1, pp 2, dp 8, the two ends on two nodes (hardware_db/h100-sxm.yaml: 50 GB/s line x
0.94 = 47 GB/s, 10 us a round; a 2-rank ring all-reduce is 2 rounds and 2 (n - 1) / n = 1 x the bytes):
- whole (the distributed optimizer): 128,256 x 4,096 x 4 B = 2,101,346,304 B -> 2 x 10 us + 2,101,346,304 / 47e9
  = 0.044729496 s (tests/test_mtp_embedding.py);
- Megatron-FSDP, n 8: ceil(128,256 / 8) = 16,032 rows x 4,096 x 4 B = 262,668,288 B -> 20 us + 5.588687 ms
  = 0.005608687 s.
"""
from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.step import step_time

H, V = 4096, 128_256
NET, ROUND = 47e9, 10e-6


def _tied_s(**kw):
    job = dict(model="llama3-8b", gpus=16, tp=1, pp=2, stack="megatron", hardware="h100-sxm", global_batch=16,
               micro_batch=1, seq_len=4096, recompute="full", mtp_layers=1)
    job.update(kw)
    s, p, _ = resolve(Job(**job))
    return s, p, float(step_time(s, p)[1]["pp_tied_grads_s"])


def _want(rows):
    return 2 * ROUND + rows * H * 4 / NET


def test_hand_figures():
    assert -(-V // 8) * H * 4 == 262_668_288
    assert _want(-(-V // 8)) == pytest.approx(0.005608686978723404, rel=1e-12)
    assert _want(V) == pytest.approx(0.044729496, rel=1e-8)


@pytest.mark.parametrize("sharding, mode", [("zero1", "megatron_fsdp_optim"), ("zero2", "megatron_fsdp_optim_grads"),
                                            ("fsdp", "megatron_fsdp_optim_grads_params")])
def test_each_level_moves_the_ranks_shard_in_fp32(sharding, mode):
    """Every sharded level reads the same only_shard piece (optim's gradients stay whole in the buffer, the piece is
    its virtual shard): ceil(V / 8) x h x 4 B, an eighth of the distributed optimizer's whole gradient (was whole)."""
    s, p, t = _tied_s(sharding=sharding, sharding_mode=mode)
    assert int(p.dp) == 8 and int(p.pp) == 2 and s.stack.runs.sharding[int(p.smode)].name == mode
    assert t == pytest.approx(_want(-(-V // 8)), rel=1e-12)
    _, _, whole = _tied_s(sharding="zero1")  # the distributed optimizer: the whole main_grad
    assert whole == pytest.approx(_want(V), rel=1e-12)


def test_bf16_main_gradients_still_move_fp32():
    """--megatron-fsdp-main-grads-dtype auto (bf16: the job's 2 B gradients) changes nothing: update_main_grads
    converts the shard to the fp32 main weight's dtype before finalize_model_grads reads it (was 2 B x the whole)."""
    s, _, t = _tied_s(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params",
                      bytes_per_param=dict(weights=2, gradients=2, master=4, optimizer=8))
    assert s.bpp.gradients == 2.0
    assert t == pytest.approx(_want(-(-V // 8)), rel=1e-12)


def test_hsdp_shards_over_its_shard_group():
    """megatron_fsdp_hsdp with shard group 4 (two replicas): the main buffer is cut over the shard group only:
    ceil(V / 4) = 32,064 rows, 525,336,576 B -> 20 us + 11.177374 ms."""
    _, p, t = _tied_s(sharding="hsdp", sharding_mode="megatron_fsdp_hsdp", shard_group=4)
    assert int(p.dp) == 8 and int(p.shard) == 4
    assert t == pytest.approx(_want(32_064), rel=1e-12)
    assert t == pytest.approx(0.011197373957446808, rel=1e-12)


def test_the_shard_rounds_up_and_counts_cp():
    """dp 7 (14 GPUs): 128,256 / 7 = 18,322.3 rows, the padded bucket's shard 18,323 (the last rank's is shorter; the
    pair with full shards sets the time); cp 2 x dp 4: the group is dp x cp = 8, as dp 8."""
    _, p, t = _tied_s(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params", gpus=14, global_batch=14)
    assert int(p.dp) == 7
    assert t == pytest.approx(_want(18_323), rel=1e-12)
    _, p, t = _tied_s(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params", cp=2)
    assert (int(p.dp), int(p.cp)) == (4, 2)
    assert t == pytest.approx(_want(16_032), rel=1e-12)


def test_tied_model_at_tp_2():
    """The tied embedding alone (no MTP): Megatron's GPT 1.7B (V 51,200, h 2,304, tied) at tp 2, pp 2, dp 4 on 16
    H100s: V / tp = 25,600 rows, / 4 = 6,400 rows x 2,304 x 4 B = 58,982,400 B -> 20 us + 1.254945 ms (the distributed
    optimizer: 235,929,600 B, 5.039779 ms)."""
    kw = dict(model="megatron-gpt-1.7b", mtp_layers=0, tp=2, global_batch=32, seq_len=2048)
    s, p, t = _tied_s(sharding="zero1", sharding_mode="megatron_fsdp_optim", **kw)
    assert s.model.tied_embeddings and (s.model.vocab_size, s.model.hidden_size, int(p.dp)) == (51_200, 2_304, 4)
    assert t == pytest.approx(2 * ROUND + 6_400 * 2_304 * 4 / NET, rel=1e-12)
    assert t == pytest.approx(0.001274944680851064, rel=1e-12)
    _, _, whole = _tied_s(sharding="zero1", **kw)
    assert whole == pytest.approx(2 * ROUND + 25_600 * 2_304 * 4 / NET, rel=1e-12)


def test_precision_aware_optimizer_skips_it_on_megatron_lm_only():
    """Megatron-LM @d98e8a64: under --use-precision-aware-optimizer param.grad is None, the all-reduce never runs (0;
    the two copies' gradients are not summed). Megatron-Core 905c0e386 (megatron-bridge) installs param.grad anyway:
    the shard moves (fp8 tensorwise: FusedAdam reads param.grad there; under bf16 it reads decoupled_grad, which
    905c0e386 never sets, start-up rule PRECISION_AWARE_MFSDP)."""
    s, _, t = _tied_s(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params", precision_aware_optimizer=True)
    assert s.precision_aware and t == 0.0
    s, _, t = _tied_s(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params", precision_aware_optimizer=True,
                      stack="megatron-bridge", precision="fp8", fp8_recipe="tensorwise")
    assert s.precision_aware and t == pytest.approx(_want(16_032), rel=1e-12)
    _, _, t = _tied_s(sharding="fsdp", sharding_mode="megatron_fsdp_optim_grads_params", stack="megatron-bridge")
    assert t == pytest.approx(_want(16_032), rel=1e-12)


def test_which_modes_shard_it():
    """stack_db: the four Megatron-FSDP modes of each Megatron stack; not DDP, the distributed optimizer (main_grad,
    whole) or torch FSDP2 (never at pp > 1)."""
    from planner.catalog import load_stack

    for name, skip in (("megatron", True), ("megatron-bridge", False)):
        modes = {m.name: m.embedding_grad_shard for m in load_stack(name).runs.sharding}
        shard = {n for n, e in modes.items() if e is not None}
        assert shard == {"megatron_fsdp_optim", "megatron_fsdp_optim_grads", "megatron_fsdp_optim_grads_params",
                         "megatron_fsdp_hsdp"}, name
        assert {modes[n].skipped_decoupled for n in shard} == {skip}, name


def test_torch_fsdp2_never_runs_it():
    """--use-torch-fsdp2 at pp 2 is refused (start-up rule MEGATRON_TORCH_FSDP2, arguments.py l. 1034-1035); at pp 1
    the embedding group is one rank: 0."""
    with pytest.raises(PlannerError, match="MEGATRON_TORCH_FSDP2"):
        _tied_s(sharding="fsdp", sharding_mode="torch_fsdp2", mtp_layers=0)
    _, _, t = _tied_s(sharding="fsdp", sharding_mode="torch_fsdp2", mtp_layers=0, pp=1, gpus=8)
    assert t == 0.0


def test_a_mode_sharding_nothing_cannot_claim_a_shard():
    from planner.schema import EmbeddingGradShard, ShardingMode

    e = EmbeddingGradShard(skipped_decoupled=False, sources=["s"])
    with pytest.raises(ValueError, match="embedding_grad_shard"):
        ShardingMode(name="x", level="none", embedding_grad_shard=e, spelling="s", sources=["s"])
    assert ShardingMode(name="x", level="zero1", embedding_grad_shard=e, spelling="s", sources=["s"])
