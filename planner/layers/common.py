"""What every layer kind shares: the parameter split, GEMM shapes, activation-tensor tables
and the per-micro-batch quantities of a plan. Units: parameters (counts), bytes, FLOPs,
tokens. Functions take PlanArrays fields as 0-d or 1-d arrays.

A block (one sub-block of a layer: a mixer or an MLP, planner/layers/__init__.py) reports
its parameters as a BlockParams: `split` (the matrices and biases tensor parallelism splits
over tp ranks), `replicated` (kept whole on every TP rank: norms, MLA's down projections and
latent norms, the MoE router, the row-parallel linears' biases [rb]) and `expert` (routed
experts, split over etp x ep ranks but their output biases [rb], of which `active_expert` are the
ones one token passes through). Of these, `split_bias` the column-parallel linears' biases (split
with their outputs), `row_bias` the row-parallel linears' output biases (in `replicated`),
`qk_norm` the query/key norms (in `replicated`), `expert_row_bias` the routed experts' output
biases (in `expert`), `expert_bias` all the routed experts' biases (in `expert`: not quantized [qb]).
`score_bias` the router's expert score bias, in none of the others: a buffer, not a trained
parameter [sb]; `total` and `active` count it (the checkpoints list it), the per-GPU parameter
counts (dense_per_gpu, experts_per_gpu) do not. `split_plain` the mixer's TP-split parameters that belong to no
linear (in `split`: Mamba's and Gated DeltaNet's conv1d weights and biases, dt_bias, A_log, D, Mamba-2's gated
norm) [pl]; `split_linear` what is left of `split`: the linears' weight matrices, all that Transformer Engine
quantizes and torchao converts.

[pl] Mamba-2's conv1d_weight / conv1d_bias, dt_bias, A_log and D are plain nn.Parameters of MambaMixer and its gated
norm a mamba_ssm RMSNormGated (ExtendedRMSNorm), no Transformer Engine module: NVIDIA/Megatron-LM @d98e8a64
megatron/core/ssm/mamba_mixer.py l. 321-351 (conv1d_weight, conv1d_bias in config.params_dtype), l. 377-392 (dt_bias),
l. 394-404 (A_log, built fp32), l. 413-421 (D, built fp32), l. 422-434 (norm, params_dtype); only in_proj and out_proj
are TE linears (l. 281-295, 437-451). Gated DeltaNet's conv1d is an nn.Conv1d, its dt_bias and A_log nn.Parameters in
params_dtype (gated_delta_net/common.py l. 229-260); its out_norm is in `replicated` already. The "Keep in fp32" of
A_log and D does not survive Megatron's bf16 wrapper: Float16Module casts every floating parameter but those marked
keep_in_fp32 (transformer/module.py l. 445-476, convert_module_to_dtype_except_fp32_marked), which no SSM parameter
is at d98e8a64 (mark_keep_in_fp32 is called in tests only; training/training.py l. 2468-2470 wraps every model under
--bf16), so they are weights of the job's dtype like the norms: no fp32 share to price apart. They are not weights of
any GEMM: Transformer Engine's fp8 / mxfp8 / nvfp4 autocast quantizes a TE module's own weight only
(TransformerEngine @d0067d0d transformer_engine/pytorch/module/linear.py l. 480 quantize_weight of the module's
weight, l. 1926-1948; [qb]), and fp8_model_init (--fp8-param-gather) makes TE modules' weights Float8Tensors, not
plain parameters; torchao's converters swap nn.Linear modules only (fp8_linears.py [1]). So they are neither in
TE's quantized weight cache, nor quantized parameters, nor gathered in fp8 by FSDP (memory.quantized_weight_terms,
converted_linear_elems, step.linear_share). Mamba-1's dt_proj bias (an nn.Linear bias, column-parallel over d_i
in the assumed layout) is a split_bias; its conv1d, A_log and D are split_plain.

[sb] DeepSeek-V3's score-correction bias (MoESpec.expert_score_bias; HF e_score_correction_bias) is a
buffer in the trainers: NVIDIA/Megatron-LM @d98e8a64 megatron/core/transformer/moe/router.py
TopKRouter.__init__ l. 180-198 (register_buffer 'expert_bias', torch.float32, beside its fp32
'local_tokens_per_expert' counter, non-persistent; l. 262-271 keep it fp32), updated outside autograd
from the token counts; pytorch/torchtitan @e347b1e5e torchtitan/models/moe/moe.py l. 456-471
(register_buffer "expert_bias" float32 with load_balance_coeff, and the float32 "tokens_per_expert"
counter), updated by the optimizer's pre-step hook (components/optimizer.py l. 367-440). A buffer has
no gradient, no optimizer state, and is in no gradient reduction (Megatron's finalize_model_grads
walks named_parameters only). It and its counter are priced as fp32 buffers, whole on every rank
(memory.py model_buffers: 2 x 4 B x E a MoE layer).

[mu] Which parameters Megatron-LM's Muon steps (memory.py [mu]): NVIDIA/Megatron-LM @d98e8a64
megatron/core/optimizer/emerging_optimizers.py l. 140-147 (_is_muon_excluded: use_muon False, the
is_embedding_or_output_parameter ones, or len(param.shape) != 2) and layer_wise_optimizer.py l. 38-53 (the same
rule); language_module.py l. 229-236 tags only the word embedding and the output layer, so a learned position
table (2-D) is Muon's; mamba_mixer.py l. 309 sets use_muon False on Mamba's in_proj weight (`no_muon`). The 2-D
matrices among `replicated`: the router's weight (E x h; its bias 1-D) and MLA's down projections (h r_q,
h (r_kv + d_rope); their latent norms 1-D) are `rep_matrix`.

[ns] The shapes Muon orthogonalizes (block.muon_matrices(): (rows, cols, count, group), whole matrices; step.py [28],
memory.py [mu]): the elements of each block's list are its muon_per_gpu(1) (groups split and rep) and
muon_experts_per_gpu(1, 1) (group expert), to the element (tests/test_muon_step.py checks every catalogued model).
Each parameter's momentum is one matrix, but linear_qkv, which Megatron splits per query group into q (and the output
gate's), k and v before orthogonalizing (--muon-split-qkv, on by default: emerging_optimizers.py @d98e8a64 l. 150-162,
404-430); the routed experts one matrix each (TE GroupedLinear's weight{i}). Groups: split, a TP-split linear (a
column / row linear carries partition_dim 0 / 1 whatever tp, Megatron's for the experts in transformer_engine.py
l. 91-123 and TE's for the rest (NVIDIA/TransformerEngine @4329ff84 module/linear.py
reset_parameters l. 1756-1763), so newton_schulz_tp all-gathers it over the TP group, at tp 1 a group of one); expert, over the expert-TP group; rep, a matrix whole on every TP rank
(the router, MLA's down projections, the shared experts' gate, a learned position table: no partition_dim, the
fallback newton_schulz on the tensor itself, muon_utils.py v0.3.0 l. 263-265). Orientation: a split or expert matrix
lists the dimension TP partitions first (rows: a column linear's output, a row linear's input, i.e. a row linear's
weight transposed): newton_schulz transposes to the smaller side anyway (muon_utils.py v0.3.0 l. 176-180), so the
iteration's GEMMs, the gathers' bytes and the temporaries are the same on the transpose, and muon_local can divide the
partitioned dimension. Under Muon's blockwise TP mode (the job's muon_tp_mode; muon.py @905c0e386 l. 133,
emerging_optimizers.py @d98e8a64 l. 403: partition_dim None) each TP rank orthogonalizes its own shard, rows / tp
(rows / etp for the experts), with no gather (muon_local).

[qb] Transformer Engine quantizes a grouped linear's weights only: NVIDIA/TransformerEngine
@d0067d0d transformer_engine/pytorch/module/grouped_linear.py l. 832-850 (quantize_weight per
weight{i} into the cached workspace), l. 853-857 (the biases cast_if_needed to the activation
dtype: bf16 stays bf16, no copy), l. 1738-1771 (weight{i} registered with an fp8_meta_index,
bias{i} without: fp8 primary weights leave the biases in params_dtype). So the experts' biases
are neither in TE's quantized weight cache nor quantized parameters (memory.quantized_weight_terms).

[rb] A row-parallel linear's bias is whole on every TP rank: it is added after the partial outputs
are summed, so each rank holds all `output_size` of it. NVIDIA/Megatron-LM @d98e8a64
megatron/core/tensor_parallel/layers.py RowParallelLinear.__init__ l. 1482-1499 (`Parameter(torch.empty(
self.output_size, ...))`, no tensor_model_parallel attribute; ColumnParallelLinear's, l. 1110-1123, is
`output_size_per_partition`); TERowParallelLinear (extensions/transformer_engine.py l. 1912-1998:
te.pytorch.Linear with parallel_mode "row") and NVIDIA/TransformerEngine @d0067d0d
transformer_engine/pytorch/module/linear.py l. 1622-1625, 1703-1709, 1864-1870 (row mode divides
in_features only; the bias has out_features and no TP attribute); the routed experts' grouped row-parallel
linear the same (transformer_engine.py l. 91-123 _set_expert_parameter_attributes: "row-parallel biases
remain replicated"; l. 2470-2472 divides only the input size); microsoft/Megatron-DeepSpeed @f4157bea
megatron/core/tensor_parallel/layers.py l. 750-759 (RowParallelLinear: `torch.empty(self.output_size`);
pytorch/torchtitan @e347b1e5e models/gpt_oss/infra/expert_parallel.py l. 32-37, 64-70 (mlp2_bias
Replicate() over TP, Shard(0) over EP) and parallelize.py l. 224 (attention.wo RowwiseParallel, whose
_partition_linear_fn makes the bias Replicate(): pytorch/pytorch @004c2c9a
torch/distributed/tensor/parallel/style.py RowwiseParallel; torchtitan's other models have no linear
biases). The whole model's count is unchanged: only where the bias lives moves.

Activation tensors are named (schema.ACTIVATION_TENSORS for the ones a stack's selective
recompute policy can name) with bytes per token and a kind that says how they divide
across the plan's ranks:
  rep    replicated across TP unless sequence parallel (then / tp)
  split  split across TP (/ tp)
  kv     per local KV head (/ min(tp, kv heads): they replicate once tp exceeds them)
  score  eager attention: per token per attended key (/ tp, x keys / cp)
  full   gathered across TP, never divided (MoE expert inputs and outputs under expert TP = TP)
A tensor whose name is not in schema.ACTIVATION_TENSORS is kept by every recompute policy
but full recompute (a selective policy names attention-layer tensors only).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

ACT_BYTES = 2.0  # bf16/fp16 activations and TP/PP/CP messages (Korthikanti et al. 2022 sec. 4)
TENSOR_KINDS = ("rep", "split", "kv", "score", "full")


@dataclass(frozen=True)
class BlockParams:
    split: int = 0
    replicated: int = 0
    expert: int = 0
    active_expert: int = 0
    split_bias: int = 0  # the column-parallel linears' biases among `split` (the rest of split is weight matrices)
    row_bias: int = 0  # the row-parallel linears' output biases among `replicated` [rb]
    qk_norm: int = 0  # the query/key norms' weights among `replicated` (ModelSpec.qk_norm; step.py [27])
    expert_row_bias: int = 0  # the routed experts' output biases among `expert`, whole on each expert-TP rank [rb]
    expert_bias: int = 0  # every routed expert's biases among `expert` (column and row: expert_row_bias of them) [qb]
    score_bias: int = 0  # the router's expert score bias: a fp32 buffer, in no other field [sb]
    split_plain: int = 0  # the mixer's TP-split parameters of no linear, among `split` (conv1d, dt_bias, A_log...) [pl]
    rep_matrix: int = 0  # the 2-D weight matrices among `replicated` (the router's, MLA's down projections) [mu]
    no_muon: int = 0  # the TP-split linears' weight matrices Megatron keeps off Muon (use_muon False: Mamba's in_proj) [mu]

    def __add__(self, o: "BlockParams") -> "BlockParams":
        return BlockParams(*(getattr(self, f.name) + getattr(o, f.name) for f in fields(BlockParams)))

    def times(self, n: int) -> "BlockParams":
        """n of these blocks (every field x n)."""
        return BlockParams(*(n * getattr(self, f.name) for f in fields(BlockParams)))

    @property
    def total(self) -> int:
        """The block's parameters as its checkpoint lists them (the score bias [sb] among them)."""
        return self.split + self.replicated + self.expert + self.score_bias

    @property
    def active(self) -> int:
        return self.split + self.replicated + self.active_expert + self.score_bias

    @property
    def split_linear(self) -> int:
        """The TP-split linears' weight matrices: `split` less the column-parallel biases and the plain mixer
        parameters [pl] (what TE quantizes, torchao converts and FSDP's fp8 all-gather gathers)."""
        return self.split - self.split_bias - self.split_plain

    def muon_per_gpu(self, tp):
        """Dense parameters one GPU holds of this block that Megatron's Muon steps [mu]: the 2-D weight matrices (the
        TP-split linears' / tp but those kept off Muon, and the replicated ones whole); not the norms, biases or the
        mixers' plain parameters (conv1d is 3-D, dt_bias, A_log, D 1-D)."""
        return (self.split_linear - self.no_muon) / tp + self.rep_matrix

    def muon_experts_per_gpu(self, etp, ep):
        """Routed-expert parameters one GPU holds of this block that Muon steps [mu]: every expert's weight
        matrices (2-D each: TE's GroupedLinear weight{i}, SequentialMLP's linears) / (etp ep), their biases not."""
        return (self.expert - self.expert_bias) / (etp * ep)

    def dense_per_gpu(self, tp):
        """Dense parameters one GPU holds of this block: the TP-split ones / tp, the replicated ones (row-parallel
        biases included) whole [rb]."""
        return self.split / tp + self.replicated

    def experts_per_gpu(self, etp, ep):
        """Routed-expert parameters one GPU holds of this block: the experts / (etp ep), their output-projection biases
        / ep only (whole on each expert-TP rank) [rb]."""
        return (self.expert - self.expert_row_bias) / (etp * ep) + self.expert_row_bias / ep


class GemmShape(NamedTuple):
    name: str
    M: Any  # float64 scalar or array
    N: Any
    K: Any


def shapes(rows) -> list[tuple[GemmShape, Any]]:
    """[(GemmShape, count)] from rows (name, M, N, K, count), M, N, K broadcast to float64."""
    out = []
    for name, m, n, k, count in rows:
        m, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (m, n, k)))
        out.append((GemmShape(name, m, n, k), count))
    return out


def merge_tables(*tables: dict) -> dict:
    """One layer's activation table from its sub-blocks' (a name in both: bytes add)."""
    out: dict = {}
    for t in tables:
        for name, (b, kind) in t.items():
            if name in out:
                out[name] = (out[name][0] + b, kind)
            else:
                out[name] = (b, kind)
    return out


def norm_params(model) -> int:
    """One pre-norm of width h: RMSNorm h (Zhang & Sennrich 2019), LayerNorm 2h (scale + bias)."""
    return model.hidden_size if model.norm == "rmsnorm" else 2 * model.hidden_size


def tp_f(plan) -> np.ndarray:
    return plan.tp.astype(np.float64)


def rep_div(plan) -> np.ndarray:
    """What a replicated activation divides by: tp under sequence parallelism, else 1."""
    return np.where(plan.sp > 0, tp_f(plan), 1.0)


def mb_tokens(plan) -> np.ndarray:
    """Tokens of one micro-batch on one GPU: micro-batch x seq / cp (CP splits the sequence)."""
    return plan.mbs * (plan.seq / plan.cp)


def etp_of(plan) -> np.ndarray:
    """The expert tensor-parallel degree (PlanArrays.etp; 0 = tp, Megatron's default: planner/moe.py [9])."""
    etp = np.asarray(plan.etp)
    return np.where(etp > 0, etp, np.asarray(plan.tp))


def gathered_tokens(plan) -> np.ndarray:
    """How many ranks' tokens an expert-TP group gathers after the dispatch all-to-all (planner/moe.py [10]):
    etp, where the group's ranks hold distinct tokens (sequence-parallel, or tp = 1); 1 where
    they hold the same replicated ones (tp > 1 without SP, etp = tp: no gather)."""
    distinct = (plan.sp > 0) | (etp_of(plan) != plan.tp)
    return np.where(distinct, etp_of(plan), 1).astype(np.float64)


def kv_local(kv_heads, tp) -> np.ndarray:
    """KV heads per GPU: max(k / tp, 1) (fewer KV heads than TP ranks: each rank keeps one)."""
    return np.maximum(kv_heads / np.asarray(tp, dtype=np.float64), 1.0)


def distinct_draws(n, k) -> np.ndarray:
    """Mean distinct targets among n reached by k uniform draws: n (1 - (1 - 1/n)^k) (the EP ranks or
    nodes a token's k experts reach under uniform routing: planner/dispatch.py, layers/moe.py)."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return n * (1.0 - (1.0 - 1.0 / n) ** np.asarray(k, dtype=np.float64))


def muon_local(mats, tp, etp, blockwise) -> tuple:
    """The matrices (rows, cols, count, group) one TP rank orthogonalizes ([ns]): under Muon's blockwise TP mode
    (`blockwise`, a job setting) a split matrix's shard, rows / tp, an expert's rows / etp (tp, etp: the plans' int64
    degrees; rows float64 arrays); rep ones, and every one under duplicated, whole (`mats` unchanged). A split q / k / v
    of linear_qkv keeps its split on the shard: orthogonalize (muon.py @905c0e386 l. 136-152, emerging_optimizers.py
    @d98e8a64 l. 407-437) splits the local rows into k / tp query groups, q a d / tp rows, k and v k d / tp each
    (where tp divides k; elsewhere Megatron-LM @d98e8a64 orthogonalizes the shard whole, Attention.muon_matrices, and
    905c0e386 raises: start-up rule MUON_QKV_SPLIT_TP)."""
    if not blockwise:
        return tuple(mats)
    div = {"split": np.asarray(tp, dtype=np.float64), "expert": np.asarray(etp, dtype=np.float64)}
    return tuple((rows / div[group] if group in div else rows, cols, count, group) for rows, cols, count, group in mats)


def muon_distributed(mats, tp, etp) -> tuple:
    """The matrices (gram, local, count, group) one TP rank orthogonalizes under Muon's distributed TP mode ([ns]; the
    job's muon_tp_mode; step.py [28]), oriented: `gram` the side the iteration's Gram A = X X^T spans, `local` the
    rank's share of the other. newton_schulz_tp (Emerging-Optimizers v0.3.0 muon_utils.py l. 279-286; v0.1.0 l. 215-222,
    Megatron-Core 905c0e386's) transposes the rank's shard by its partition_dim, not by size (partition_dim 0: the
    transpose, 1: as it is), so a split matrix (rows the partitioned side, [ns]) runs on its cols, gram = cols, with
    rows / tp of the other side (an expert's rows / etp), at tp 1 too (a group of one: the partition_dim is TE's,
    whatever tp; the Gram on cols even where rows is the smaller, the waste the function's docstring warns of); a rep
    matrix (no partition_dim: the fallback newton_schulz, l. 263-265) transposes to its smaller side, whole. tp, etp:
    the plans' int64 degrees (local float64 arrays)."""
    div = {"split": np.asarray(tp, dtype=np.float64), "expert": np.asarray(etp, dtype=np.float64)}
    return tuple((cols, rows / div[group], count, group) if group in div
                 else (np.minimum(rows, cols), np.maximum(rows, cols), count, group) for rows, cols, count, group in mats)
