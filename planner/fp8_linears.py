"""Which of a layer's linears run in the plan's low precision (issue 22): the converted set, per GEMM row.

[1] torchtitan's float8 / mx Linear converters swap nn.Linear modules for torchao's Float8Linear / MXLinear where
    the module filter lets them (pytorch/torchtitan @e347b1e5e torchtitan/components/quantization/float8.py
    Float8LinearConverter._init_filter_fn l. 104-138, convert l. 140-158: convert_to_float8_training(model,
    module_filter_fn=...); mx.py l. 65, 88). The default filter (components/quantization/utils.py module_filter_fn
    l. 10-27) keeps a Linear bf16 where a dim of its weight is not a multiple of 16 or where any entry of
    filter_fqns is a substring of its fully qualified name (`filter_fqn in fqn`). The conversion runs on the whole
    (meta) model before parallelize_fn (train.py l. 154-155 before l. 254): the weight shapes read are the full
    [out, in] ones, not a TP shard's. release/0.3 @4f9e9a47d float8.py l. 83-147 is the same rule (the output module
    named lm_head there).
[2] filter_fqns entry "auto_filter_small_kn" (float8 converter only: float8.py l. 104-131; mx.py uses
    module_filter_fn alone): torchao's _auto_filter_for_recipe (pytorch/ao @9cd41075, the nightly nearest
    torchtitan @e347b1e5e, torchao/float8/float8_linear_utils.py l. 126-206; unchanged since 9eeb101ef, PR #2410,
    2025-06-24) also keeps bf16 the Linears whose weight [N, K] = [out, in] is too small for float8 to pay, by the
    recipe's H100 microbenchmark table: tensorwise skips K <= 4096 and N <= 1024 (l. 203); rowwise skips N <= 2048,
    K <= 1024, or N <= 4096 and K <= 2048 (l. 173-178). (The recipe is the plan's, a searched code: the mask is an
    np.where over it.)
[3] The MoE router gate stays bf16 unless the job converts it: Megatron-LM @d98e8a64's TopKRouter is no Transformer
    Engine module (megatron/core/transformer/moe/router.py gating l. 105-111: a plain linear in the input's dtype),
    and every torchtitan MoE train config sets filter_fqns = ["output", "router.gate"] (@e347b1e5e models/
    deepseek_v3/train_configs/deepseek_v3_671b.toml l. 74, llama4/train_configs/llama4_17bx128e.toml l. 69,
    gpt_oss/train_configs/debug_model.toml l. 73; release/0.3 deepseek_v3/config_registry.py l. 259): a job
    without filter_fqns takes that. The output layer keeps its own field, fp8_output_layer (step.py [14]).

[4] Which casts of a converted Linear all-reduce their amax over the TP group (tp_amax_casts; step.py [39] has the
    code): torchtitan's TP plans make each TP-split weight a DTensor (ColwiseParallel Shard(0), RowwiseParallel
    Shard(1)) and pass a row-parallel linear its input as a Shard(-1) DTensor (pytorch/torchtitan @e347b1e5e
    models/llama3/infra/parallelize.py apply_tp l. 161-253, layer_plan l. 218-241); under float8 tensorwise TP
    (l. 76-93: "float8" among model.converters and recipe_name neither rowwise nor rowwise_with_gw_hp; at @e347b1e5e
    never, the converter being named "quantize.linear.float8": stack fp8_recipes float8_tp_styles) the blocks'
    linears take torchao's Float8ColwiseParallel / Float8RowwiseParallel and the attention / feed_forward modules
    PrepareFloat8ModuleInput (l. 190-207; llama4 l. 267-307 for attention and the dense feed_forward, its shared
    experts keep the plain styles, l. 538-547).

Module names (torchtitan @e347b1e5e): models/llama3/model/model.py l. 203-208 attention.wq / wk / wv / wo,
l. 338-340 feed_forward.w1 / w2 / w3 (llama4, qwen3 the same); models/deepseek_v3/model/model.py l. 215-231
attention.wq (no q_lora_rank) or wq_a / wq_b, wkv_a, wkv_b, wo; models/moe/moe.py l. 224 moe.router.gate, l. 445
moe.shared_experts (a FeedForward: w1 / w2 / w3, l. 63-65). A row whose linears this table does not name (Mamba,
Gated DeltaNet, the MTP projection: no torchtitan model has them) is converted whole, as before: its linears' matrices
(BlockParams.split_linear), not the mixers' conv1d, dt_bias, A_log, D or norms, which are no nn.Linear
(layers/common.py [pl]). Not modelled: torchtitan 0.3.0's own module paths (release/0.3 @4f9e9a47d models/common/attention.py l. 964-965:
attention.qkv_linear.wq / wk / wv, decoder.py l. 204 lm_head), which a filter is matched against here as if they
were @e347b1e5e's (the shipped "router.gate" entry names the same module in both: common/moe.py l. 215, 377); a
filter naming some layers by index (the reader lists it as not modelled).
"""

from __future__ import annotations

import numpy as np

AUTO_FILTER = "auto_filter_small_kn"  # float8.py @e347b1e5e l. 25
DEFAULT_FILTER = ("output", "router.gate")  # [3]: the shipped MoE configs' list (the output layer: fp8_output_layer)


def module_filter(stack) -> bool:
    """The stack's linears are converted module by module (torchao's converters: a recipe that can convert the
    output layer, stack_db fp8_recipes output_layer_convertible), not under Transformer Engine's autocast."""
    return any(r.output_layer_convertible for r in stack.fp8_recipes.values())


def torchtitan_linears(mixer, mlp) -> dict[str, list[tuple[str, int, int]]]:
    """GEMM row name -> [(fqn inside a block, N out, K in)] of the nn.Linear modules the row prices (full shapes)."""
    from .layers.attention import MLA, Attention
    from .layers.mlp import DenseMLP
    from .layers.moe import MoEMLP

    out: dict[str, list[tuple[str, int, int]]] = {}
    if isinstance(mixer, Attention):
        h, a, k, d = mixer.h, mixer.a, mixer.k, mixer.d
        out["qkv"] = [("attention.wq", (2 if mixer.gate else 1) * a * d, h), ("attention.wk", k * d, h),
                      ("attention.wv", k * d, h)]
        out["attn_out"] = [("attention.wo", h, a * d)]
    elif isinstance(mixer, MLA):
        h, a = mixer.h, mixer.a
        if mixer.q_lora_rank is None:
            out["mla_q"] = [("attention.wq", a * mixer.qk_head_dim, h)]
        else:
            out["mla_q_down"] = [("attention.wq_a", mixer.q_lora_rank, h)]
            out["mla_q_up"] = [("attention.wq_b", a * mixer.qk_head_dim, mixer.q_lora_rank)]
        out["mla_kv_down"] = [("attention.wkv_a", mixer.kv_lora_rank + mixer.qk_rope_head_dim, h)]
        out["mla_kv_up"] = [("attention.wkv_b", a * (mixer.qk_nope_head_dim + mixer.v_head_dim), mixer.kv_lora_rank)]
        out["mla_out"] = [("attention.wo", h, a * mixer.v_head_dim)]
    if isinstance(mlp, DenseMLP):
        h, f = mlp.h, mlp.f
        out["mlp_up"] = [("feed_forward.w1", f, h)] + ([("feed_forward.w3", f, h)] if mlp.gated else [])
        out["mlp_down"] = [("feed_forward.w2", h, f)]
    elif isinstance(mlp, MoEMLP):
        h, fs = mlp.h, mlp.num_shared * mlp.fs
        out["router"] = [("moe.router.gate", mlp.num_experts, h)]
        if fs:
            out["shared_up"] = [("moe.shared_experts.w1", fs, h)] + ([("moe.shared_experts.w3", fs, h)] if mlp.gated else [])
            out["shared_down"] = [("moe.shared_experts.w2", h, fs)]
    return out


def _small(n: int, k: int, recipe: str) -> bool:
    """torchao's auto filter [2]: the weight [N, K] too small for the recipe to pay (tensorwise, rowwise)."""
    if recipe == "tensorwise":
        return k <= 4096 and n <= 1024
    if recipe == "rowwise":
        return n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048)
    return False  # mx converter / other recipes: no auto filter [2]


def converted_shares(mixer, mlp, filter_fqns, recipe_codes) -> dict[str, np.ndarray]:
    """GEMM row name -> the share (0..1, an array over the plan's recipe codes) of its FLOPs whose linears are
    converted, by each linear's out width N (a row's linears share its M and K), for the rows torchtitan_linears
    names; rows left out are converted whole. filter_fqns None: DEFAULT_FILTER [3]."""
    from .precisions import FP8_RECIPES

    fqns = list(DEFAULT_FILTER if filter_fqns is None else filter_fqns)
    auto = AUTO_FILTER in fqns
    names = [f for f in fqns if f != AUTO_FILTER]
    codes = np.asarray(recipe_codes, dtype=np.int64)
    out = {}
    for row, lins in torchtitan_linears(mixer, mlp).items():
        total = float(sum(n for _, n, _ in lins))
        per = {}
        for r in set(np.unique(codes).tolist()):
            recipe = FP8_RECIPES[r]
            keep = sum(n for fqn, n, k in lins
                       if n % 16 or k % 16 or any(f in fqn for f in names) or (auto and _small(n, k, recipe)))
            per[r] = 1.0 - keep / total
        share = np.zeros(codes.shape)
        for r, v in per.items():
            share = np.where(codes == r, v, share)
        out[row] = share
    return out


REPLICATED_ROWS = ("router", "mla_q_down", "mla_kv_down")  # linears kept whole on every TP rank (BlockParams.replicated)

def converted_linears(mixer, mlp, filter_fqns, recipe_codes) -> np.ndarray:
    """The converted Float8Linear modules of one layer of this kind (the filter of [1] [2] [3]), an array over the
    plans' recipe codes: each holds one weight torchao casts per FSDP all-gather or scales at the step (step.py [39])."""
    from .precisions import FP8_RECIPES

    fqns = list(DEFAULT_FILTER if filter_fqns is None else filter_fqns)
    auto = AUTO_FILTER in fqns
    names = [f for f in fqns if f != AUTO_FILTER]
    codes = np.asarray(recipe_codes, dtype=np.int64)
    out = np.zeros(codes.shape)
    for lins in torchtitan_linears(mixer, mlp).values():
        for r in np.unique(codes).tolist():
            recipe = FP8_RECIPES[r]
            c = float(sum(1 for fqn, n, k in lins
                          if not (n % 16 or k % 16 or any(f in fqn for f in names) or (auto and _small(n, k, recipe)))))
            out = np.where(codes == r, out + c, out)
    return out


# [4] torchtitan's TP styles (pytorch/torchtitan @e347b1e5e models/llama3/infra/parallelize.py l. 218-241):
# the row-parallel linears (input sharded on its last dim, Shard(-1)) and, under torchao's float8 TP styles, the
# block inputs each module-input preparation casts before its all-gather (attention, feed_forward)
ROWWISE_ROWS = ("attn_out", "mla_out", "mlp_down", "shared_down")
FLOAT8_STYLE_ROWS = ("qkv", "attn_out", "mlp_up", "mlp_down")  # llama3 / llama4 / qwen3 blocks; not the shared experts
PREPARED_ROWS = ("qkv", "mlp_up")  # PrepareFloat8ModuleInput on "attention" and "feed_forward": one cast a block


def tp_amax_casts(mixer, mlp, filter_fqns, recipe_codes, styled) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[4] (weight casts, forward input casts, output-gradient casts) per micro-batch of one layer of this kind whose
    tensor is a TP-sharded DTensor under torchao's dynamic tensorwise scaling, so that the cast's amax is all-reduced
    over the TP group (step.py [39]); arrays over the plans' recipe codes. Per converted linear (the filter of [1]
    [2] [3]) on a TP-split row (not REPLICATED_ROWS): its weight (a Shard(0) / Shard(1) DTensor: each weight cast,
    forward and for the dgrad GEMM); a row-parallel linear's (ROWWISE_ROWS) input (Shard(-1)). Output gradients: with
    the plain styles a column-parallel linear's (its output Shard(-1), the gradient the Function's backward receives
    a Shard(-1) DTensor; a row-parallel linear's arrives Replicate, after the all-gather of its reduce-scatter's
    backward); where `styled` (an array over the codes: the recipe runs torchao's float8 TP styles) every
    FLOAT8_STYLE_ROWS linear's (NoopFwToFloat8BwDynamic on the colwise Shard(-1) and the rowwise Shard(1) output),
    the rest's as plain, and one block-input cast per PREPARED_ROWS row converted (PrepareFloat8ModuleInput on the
    Shard(1) input; the column-parallel linears then find it cast)."""
    from .precisions import FP8_RECIPES

    fqns = list(DEFAULT_FILTER if filter_fqns is None else filter_fqns)
    auto = AUTO_FILTER in fqns
    names = [f for f in fqns if f != AUTO_FILTER]
    codes = np.asarray(recipe_codes, dtype=np.int64)
    styled = np.asarray(styled, dtype=bool)
    w, i, g = np.zeros(codes.shape), np.zeros(codes.shape), np.zeros(codes.shape)
    for row, lins in torchtitan_linears(mixer, mlp).items():
        if row in REPLICATED_ROWS:
            continue
        rowwise, style = row in ROWWISE_ROWS, row in FLOAT8_STYLE_ROWS
        for r in np.unique(codes).tolist():
            recipe = FP8_RECIPES[r]
            c = float(sum(1 for fqn, n, k in lins
                          if not (n % 16 or k % 16 or any(f in fqn for f in names) or (auto and _small(n, k, recipe)))))
            at = codes == r
            w = np.where(at, w + c, w)
            if rowwise:
                i = np.where(at, i + c, i)
            # output gradients: a column-parallel linear's under either style; a row-parallel one's under the float8 style
            g = np.where(at & (~rowwise | (styled & style)), g + c, g)
            if row in PREPARED_ROWS and c > 0:
                i = np.where(at & styled, i + 1.0, i)
    return w, i, g


def converted_param_change(mixer, mlp, filter_fqns, recipe_codes) -> tuple[np.ndarray, np.ndarray]:
    """(change of the TP-split converted linear weight elements, replicated converted linear weight elements) of one
    layer of this kind against 'every TP-split linear matrix converted' (BlockParams.split less its biases, what FSDP's
    fp8 all-gather read before issue 22): a TP-split row's kept share of its weights subtracted, a converted router's
    and MLA down projection's weights (replicated, whole on each TP rank) added. Per linear, by the same filter as
    converted_shares [1] [2] [3]."""
    from .precisions import FP8_RECIPES

    fqns = list(DEFAULT_FILTER if filter_fqns is None else filter_fqns)
    auto = AUTO_FILTER in fqns
    names = [f for f in fqns if f != AUTO_FILTER]
    codes = np.asarray(recipe_codes, dtype=np.int64)
    split, rep = np.zeros(codes.shape), np.zeros(codes.shape)
    for row, lins in torchtitan_linears(mixer, mlp).items():
        for r in np.unique(codes).tolist():
            recipe = FP8_RECIPES[r]
            conv = sum(n * k for fqn, n, k in lins
                       if not (n % 16 or k % 16 or any(f in fqn for f in names) or (auto and _small(n, k, recipe))))
            whole = sum(n * k for _, n, k in lins)
            if row in REPLICATED_ROWS:
                rep = np.where(codes == r, rep + conv, rep)
            else:
                split = np.where(codes == r, split + conv - whole, split)
    return split, rep
