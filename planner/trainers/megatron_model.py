"""The model a Megatron-LM argument list defines by its flags, as planner ModelSpec fields.

`planner explain FILE.args` with no --model uses the one catalog model with the flags' shape
(planner/trainers/megatron.py); when there is none, the flags themselves define the model, as
Megatron builds it: this module maps them onto ModelSpec (planner/schema.py), with every
setting a flag leaves out taken from Megatron's default at commit d98e8a64 [1]-[4] and listed
as assumed. megatron.py writes the spec as a content-addressed model YAML
(trainers.write_model_file) and names that file as the job's model.

Read (a flag's Megatron default in brackets):
  --num-layers, --hidden-size, --num-attention-heads (required: Megatron asserts them [1]
      validate_args), --ffn-hidden-size [4h; with --swiglu int(8h/3 / 64) x 64 [1]],
  --group-query-attention + --num-query-groups [MHA: the heads; with the flag and no groups: 1
      [2] num_query_groups argparse default], --kv-channels [h / heads [1]],
  --swiglu / --quick-geglu (gated MLP) | --squared-relu | GeLU [plain MLP, [3] gated_linear_unit];
      --squared-relu / --quick-geglu -> mlp_activation squared_relu / quick_gelu,
  --normalization [LayerNorm [2]], --untie-embeddings-and-output-weights [tied],
  --position-embedding-type [learned_absolute [1]; rope and yarn / mrope (rotary) -> rope;
      none -> none; legacy --use-rotary-position-embeddings / --no-position-embedding]; yarn without
      MLA -> rope_scaling yarn with rope_yarn_params and rope_attention_factor from --rotary-scaling-factor
      [1], --yarn-original-max-position-embeddings [4096], --yarn-beta-fast [32], --yarn-beta-slow [1],
      --mscale [1], --mscale-all-dim [0], --[no-]yarn-correction-range-round-to-int [rounded]
      (megatron_yarn; a given --mscale / --mscale-all-dim also kept as rope_yarn_params mscale,
      mscale_all_dim: megatron_yarn_mscales); rope without MLA: --use-rope-scaling -> llama3,
      --rotary-seq-len-interpolation-factor -> linear (rope_linear_factor),
  --disable-bias-linear / --add-bias-linear [biases: add_bias_linear True [2]],
  --hidden-dropout, --attention-dropout [0.1 each [2]] -> dropout when either is > 0; the two
      probabilities as hidden_dropout / attention_dropout where they are not 0.1 each,
  --max-position-embeddings (the learned position table; [--seq-length]),
  vocabulary: below,
  MoE [3][5]: --num-experts, --moe-router-topk [2], --moe-ffn-hidden-size [the FFN width],
      --moe-shared-expert-intermediate-size (one shared MLP of that width), --moe-shared-expert-gate,
      --moe-layer-freq [1: every layer; N: layer i is MoE iff i % N == 0; a list expression
      such as "([0]*3+[1]*11)": 1 = MoE layer] -> moe.first_k_dense / moe.layer_freq where the
      pattern is one of those, else layer_kinds dense / moe and a layer_pattern,
      --moe-router-score-function [softmax], --moe-router-enable-expert-bias -> moe.expert_score_bias
      (refused with a softmax score [8]); the router's linear carries a bias exactly under the
      linear biases (moe/router.py [8]) -> moe.router_linear_bias = linear_bias,
  MLA [1] _add_mla_args: --multi-latent-attention, --q-lora-rank [None: queries projected
      directly], --kv-lora-rank [32], --qk-head-dim [128] (the no-position part),
      --qk-pos-emb-head-dim [64] (the rotary part), --v-head-dim [128],
  --mtp-num-layers [none] -> mtp_layers; --mtp-use-repeated-layer with it -> mtp_repeated_layer (one module
  built, run mtp_layers times: multi_token_prediction.py @d98e8a64 l. 1960-1996, 2048-2049).

Vocabulary. Megatron pads the tokenizer's vocabulary to a multiple of
--make-vocab-size-divisible-by [128] x the tensor-parallel size [4]
(vocab_size_with_padding: ceil(V / (128 tp)) x 128 tp), unless --padded-vocab-size gives the
padded size or --no-pad-vocab-size turns padding off; the embedding and output layer have the
padded number of rows, so the model here has the padded size. The tokenizer's own size V:
--vocab-size when given (NullTokenizer and TikTokenizer read it [4] build_tokenizer; a file
tokenizer's size is in its files, which the planner does not read: --vocab-size stands for
it); else GPT2BPETokenizer's 50,257 tokens [6] when --tokenizer-type is GPT2BPETokenizer or
absent (pretrain_gpt.py parses the arguments with args_defaults tokenizer_type
GPT2BPETokenizer [7]; its --vocab-file / --merge-file are GPT-2's vocab.json / merges.txt);
any other tokenizer without --vocab-size is an error naming the flag to add.

Not read from flags (an error: pass --model with a model YAML): encoder-decoder models
(--encoder-num-layers / --decoder-num-layers, T5), relative position embeddings.

Hybrid (Mamba) stacks, pretrain_hybrid.py [9]: --hybrid-layer-pattern (or its deprecated spelling
--hybrid-override-pattern; both at once is Megatron's assertion) gives one symbol a layer, M a Mamba-2
MambaLayer, * a TransformerLayer of self-attention only, - an MLPLayer, E an MoE layer, each one
sub-block behind one pre-norm (the structure the Hugging Face reader builds for Nemotron-H:
hf_config.hybrid_block_table, layer_kinds_of); '|' splits the main pattern into pipeline segments
(chunk j = vp x pp + pp_rank, so segments / pp is the virtual pipeline size); '/' introduces MTP
patterns. The layer count is the pattern's (arguments.py overrides --num-layers with it, a warning
where they differ). The Mamba mixer: --mamba-num-heads [None: 2h / head dim], --mamba-head-dim [64],
--mamba-state-dim [128], --mamba-num-groups [8] (TransformerConfig fields the argument factory turns
into flags), with MambaMixer's fixed expand 2, conv kernel 4 (with a bias), SSD chunk 128 and no
projection biases. G a TransformerLayer whose self-attention is GatedDeltaNet and no MLP (its norm
fused into in_proj, its hidden dropout the attention layer's bias-dropout-add) [10]: the planner's
gated_deltanet mixer alone, from --linear-num-key-heads [16], --linear-num-value-heads [32],
--linear-key-head-dim [128], --linear-value-head-dim [128], --linear-conv-kernel-dim [4], chunk 64,
no biases. '/' parts after the main pattern are the MTP module's layers, one part a depth
(hybrid_mtp, hybrid_mtp_spec: mtp_layer_pattern, the kinds of the main pattern's layers of those
symbols; --mtp-num-layers equal to the depths, or any count with --mtp-use-repeated-layer, one
module built and run that many times: mtp_repeated_layer). Refused (exit 2, naming the symbol): D
(DeepSeek sparse attention), + (MLA), G under --experimental-attention-variant gdn2
(GatedDeltaNet2), an MTP symbol the main pattern has no layer of, and the deprecated
--mtp-hybrid-override-pattern, which the planner does not price as Megatron builds them.

Sliding-window attention [8]: --window-size L,R (tuple_type) with R = 0 (causal) makes a layer
attend to its last L + 1 keys (TE's window (left, right), itself included); every layer, or
with --window-attn-skip-freq N all but each N-th (1-indexed), or a 0/1 list (1 = windowed).
The layers become layer_kinds swa / full and a layer_pattern of the shortest period.

References (NVIDIA/Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553)
[1] megatron/training/arguments.py: validate_args (required num_layers / hidden_size /
    num_attention_heads / max_position_embeddings; ffn_hidden_size and kv_channels defaults),
    _add_network_size_args (--position-embedding-type default learned_absolute,
    --make-vocab-size-divisible-by 128, --swiglu, --squared-relu, --quick-geglu,
    --untie-embeddings-and-output-weights), _add_mla_args (the MLA flags and defaults).
[2] megatron/core/transformer/transformer_config.py TransformerConfig: num_query_groups
    (argparse default 1; None -> num_attention_heads in __post_init__), hidden_dropout 0.1,
    attention_dropout 0.1, add_bias_linear True (--disable-bias-linear), normalization
    LayerNorm, moe_router_topk 2, moe_layer_freq 1, moe_router_score_function softmax.
[3] megatron/training/argument_utils.py core_transformer_config_from_args: --swiglu ->
    gated_linear_unit with SiLU, --quick-geglu -> gated, --squared-relu -> plain (l. 314-326);
    num_query_groups None without --group-query-attention.
[4] megatron/core/tokenizers/utils/build_tokenizer.py: vocab_size_with_padding (multiple =
    make_vocab_size_divisible_by x tensor_model_parallel_size) and build_tokenizer (args.vocab_size
    passed to TikTokenizer and NullTokenizer only); megatron/training/config/training_config.py
    TokenizerConfig (padded_vocab_size, pad_vocab_size).
[5] megatron/core/models/gpt/gpt_layer_specs.py get_gpt_decoder_layer_specs: the MoE layer
    pattern from moe_layer_freq (int N: i % N == 0; a list: as given, one entry a layer);
    megatron/training/arguments.py moe_freq_type.
[6] Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", sec. 2.2
    (byte-level BPE, vocabulary of 50,257); the gpt2 vocab.json Megatron downloads
    (megatron/core/tokenizers/text/libraries/megatron_hf_tokenizer.py MEGATRON_CONFIG_MAP
    GPT2BPETokenizer) has 50,257 entries.
[7] pretrain_gpt.py `__main__`: parse_and_validate_args(..., args_defaults={'tokenizer_type':
    'GPT2BPETokenizer'}); pretrain_hybrid.py l. 544 the same default.
[9] megatron/core/models/hybrid/hybrid_layer_allocation.py l. 14-26 (Symbols: M, G, *, D, +, -, E, '|',
    '/'), l. 128-142 get_hybrid_total_layer_count, l. 277-298 _validate_pattern, l. 372-493
    select_pipeline_segment (pipe segments: count % pp == 0, segment index vp x pp + pp_rank; no pipes
    and pp > 1: an even split, no virtual stages); megatron/training/arguments.py l. 743-755 (the
    deprecated --hybrid-override-pattern forwarded; both given asserted), l. 787-797 (num_layers from
    the pattern), l. 802-863 (--decoder-first/last-pipeline-num-layers refused with pipes;
    --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank,
    --pipeline-model-parallel-layout and --account-for-*-in-pipeline-split asserted absent; vpp =
    segments / pp); megatron/core/transformer/transformer_config.py l. 1256-1270 (is_hybrid_model,
    mamba_state_dim 128, mamba_head_dim 64, mamba_num_groups 8, mamba_num_heads None);
    megatron/core/ssm/mamba_mixer.py l. 174-194 (MambaMixer defaults d_conv 4, expand 2, bias False,
    conv_bias True, chunk_size 128), l. 237-274 (nheads = d_inner / headdim unless mamba_num_heads,
    nheads % tp, ngroups % tp, nheads % ngroups asserted); megatron/core/models/hybrid/hybrid_block.py
    l. 134-193 (one layer module a symbol), hybrid_layer_specs.py l. 107-234 (hybrid_stack_spec: TE
    layers, the norms fused into in_proj / linear_qkv / linear_fc1); hybrid_builders.py l. 12-44 (the
    model: --spec's stack, tied unless --untie-embeddings-and-output-weights, --position-embedding-type).
[10] megatron/core/models/hybrid/hybrid_layer_specs.py l. 122-135 (gdn_layer: TransformerLayer, self_attention
    GatedDeltaNet with in_proj TELayerNormColumnParallelLinear, out_norm TENorm, out_proj TERowParallelLinear,
    self_attn_bda get_bias_dropout_add), hybrid_block.py l. 194-203; megatron/core/ssm/gated_delta_net/common.py
    l. 113-283 (_GDNBase: in_proj h -> 2 qk + 2 v + gdn.py's 2 value heads, conv1d over 2 qk + v channels without
    bias, dt_bias and A_log a value head each, out_norm of value_head_dim, out_proj v -> h, no biases), gdn.py
    l. 44-73; transformer_config.py l. 370-383 (the linear_* defaults), l. 1470-1509 (its assertions).
[8] megatron/core/transformer/moe/router.py Router.__init__ l. 67-72 (self.bias, E entries, if
    config.add_bias_linear, else None); transformer_config.py __post_init__ l. 2617-2625
    (moe_router_enable_expert_bias only with moe_router_score_function sigmoid or sqrtsoftplus).
"""

from __future__ import annotations

import ast
import math
import re
from typing import Optional

from ..errors import PlannerError
from ..schema import MAX_COUNT
from .report import Note, cut, listed, noted

DEFAULT_VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by default [1]
DEFAULT_TOKENIZER = "GPT2BPETokenizer"  # pretrain_gpt.py args_defaults [7]
#: tokenizers whose size the planner knows without their files (the vocabulary a CI run
#: reads; any other needs --vocab-size)
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}  # [6]
#: the tokenizers whose size is --vocab-size (build_tokenizer hands it to TikTokenizer and NullTokenizer only, [4]
#: @d98e8a64 l. 58-66, 96-102; the others read their files): with --model, a job setting the rows are padded from
#: (catalog_vocab_rows), not a shape --model replaces (megatron.py)
VOCAB_SIZE_TOKENIZERS = ("NullTokenizer", "TikTokenizer")
MLA_DEFAULTS = {"--kv-lora-rank": 32, "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64, "--v-head-dim": 128}  # [1] _add_mla_args
DEFAULT_DROPOUT = 0.1  # TransformerConfig hidden_dropout / attention_dropout [2]
DEFAULT_TOPK = 2  # TransformerConfig moe_router_topk [2]
# [8] megatron/training/arguments.py @d98e8a64 --window-size (tuple_type), --window-attn-skip-freq
#     (moe_freq_type); megatron/core/transformer/utils.py is_layer_window_attention (layer_number
#     1-indexed: windowed iff layer_number % N != 0, or the list's entry is 1);
#     transformer_config.py window_size ("-1 ... infinite window size"); TransformerEngine
#     DotProductAttention window_size (left, right): query i attends keys i - left .. i + right
MAX_PATTERN = 100_000  # entries a --moe-layer-freq list may evaluate to (one a layer; far above any model's layers)

# flags that define an architecture this reader does not build (error, with the reason)
NOT_BUILT = {
    "--encoder-num-layers": "an encoder-decoder model (T5: --encoder-num-layers / --decoder-num-layers)",
    "--decoder-num-layers": "an encoder-decoder model (T5: --encoder-num-layers / --decoder-num-layers)",
}
# [9] the hybrid stack's flags: the pattern (and its deprecated spelling), the Mamba mixer's shape with
# TransformerConfig's defaults (transformer_config.py @d98e8a64 l. 1259-1268), MambaMixer's fixed settings
# (mamba_mixer.py @d98e8a64 l. 174-194: d_conv 4, expand 2, bias False, conv_bias True, chunk_size 128)
HYBRID_FLAGS = ("--hybrid-layer-pattern", "--hybrid-override-pattern")
MAMBA_DEFAULTS = {"--mamba-head-dim": 64, "--mamba-state-dim": 128, "--mamba-num-groups": 8}
MAMBA_FLAGS = ("--mamba-num-heads", *MAMBA_DEFAULTS)
MAMBA_EXPAND, MAMBA_CONV_KERNEL, MAMBA_CHUNK = 2, 4, 128
#: the stack spec pretrain_hybrid.py's recipes name (hybrid_layer_specs.py @d98e8a64 l. 107): Transformer Engine layers
HYBRID_TE_SPEC = ["megatron.core.models.hybrid.hybrid_layer_specs", "hybrid_stack_spec"]
# [9] Symbols the planner does not price as Megatron builds them (hybrid_layer_allocation.py l. 18-21)
HYBRID_UNPRICED = {
    "D": "a DeepSeek sparse-attention layer (Symbols.DS_ATTENTION: an indexer the planner does not price)",
    "+": "an MLA layer in a hybrid stack (Symbols.MLA: the planner reads MLA for pretrain_gpt.py models only)",
}
HYBRID_VALID = set("M*-EG") | set(HYBRID_UNPRICED)
# [10] the G layer's Gated DeltaNet shape: TransformerConfig's linear-attention fields, flags through the argument
# factory (transformer_config.py @d98e8a64 l. 370-383: linear_conv_kernel_dim 4, linear_key_head_dim 128,
# linear_value_head_dim 128, linear_num_key_heads 16, linear_num_value_heads 32)
GDN_DEFAULTS = {"--linear-conv-kernel-dim": 4, "--linear-key-head-dim": 128, "--linear-value-head-dim": 128,
                "--linear-num-key-heads": 16, "--linear-num-value-heads": 32}
GDN_CHUNK = 64  # gated_delta_net/gdn.py @d98e8a64 l. 70 (self.chunk_size = 64, fla's chunk_gated_delta_rule)
#: --experimental-attention-variant values under which a G symbol builds GatedDeltaNet besides its absence
#: (hybrid_block.py @d98e8a64 l. 194-203: only gdn2 swaps in GatedDeltaNet2; 'gated_delta_net' is gdn's deprecated
#: alias, transformer_config.py l. 301-309, 1405-1408); gdn also asks for --linear-attention-freq (l. 1475-1477),
#: which HybridStack does not read (l. 1471-1473: the pattern places the G layers)
GDN_VARIANTS = ("gdn", "gated_delta_net")
GDN_FLAGS = ("--experimental-attention-variant", "--linear-attention-freq", *GDN_DEFAULTS)


# counts a Megatron flag may set to 0 (`if args.mtp_num_layers:` / `if shared_size:` read 0 as none);
# every other integer flag is a count from 1 (arguments.py: sizes, degrees, layers)
ZERO_OK = frozenset({"--mtp-num-layers", "--moe-shared-expert-intermediate-size", "--wgrad-deferral-limit",
                     "--empty-unused-memory-level", "--zero-stage",
                     "--moe-min-capacity",  # Megatron-DeepSpeed's (type=int: 0 no floor, DeepSpeed _capacity)
                     # TransformerConfig refuses only < 0 (transformer_config.py @d98e8a64 l. 1538-1555: "must be between
                     # 0 and number of layers per pipeline stage"); `planner export` writes 0 for the end it keeps in fp8
                     "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16"})
# totals that may pass a 32-bit count (iterations, samples): up to an int64 (numpy's)
INT64_FLAGS = frozenset({"--train-iters", "--train-samples"})
INT64_MAX = 2**63 - 1  # numpy's int64 (planner/cli/common.py INT64_MAX)


def _short(v) -> str:
    """A value as the file gave it, cut to 60 characters (a 400-digit number is not echoed)."""
    r = repr(v)
    if isinstance(v, str) and re.fullmatch(r"[+-]?[0-9]{41,}", v):
        r = f"a {len(v.lstrip('+-'))}-digit number"
    return cut(r, 60)


def _int(where: str, flags: dict, name: str, default=None) -> Optional[int]:
    """The flag's value as a count: ASCII digits only (a fullwidth '２' or a superscript '²' is
    refused, not read as 2), single underscores between digits allowed as argparse's type=int
    (Python's int, PEP 515) takes them (BLOOM's tr11 script: TRAIN_SAMPLES=220_000_000), from 1
    (0 for ZERO_OK) to 2**31 - 1 (an int64 for INT64_FLAGS); else PlannerError naming the flag.
    `default` is returned as given when the flag is absent."""
    v = flags.get(name)
    if v is None:
        return default
    text = str(v).strip()
    lo, hi = (0 if name in ZERO_OK else 1), (INT64_MAX if name in INT64_FLAGS else MAX_COUNT)
    if v is True or not re.fullmatch(r"[+-]?[0-9]+(?:_[0-9]+)*", text):
        hint = ("the script sets it from a variable the planner cannot expand; give the number" if "$" in text
                else "give a whole number in ASCII digits, e.g. 8")
        raise PlannerError(f"{where}{name} {_short(v)} is not a whole number", hint)
    if len(text) > 40 or not lo <= int(text) <= hi:
        raise PlannerError(f"{where}{name} {_short(text)} is not a whole number from {lo} to {hi}",
                           f"give {name} a count such as {max(lo, 1)}")
    return int(text)


def _float(where: str, flags: dict, name: str, default: float) -> float:
    v = flags.get(name)
    if v is None:
        return default
    try:
        return float(v)
    except (TypeError, ValueError):
        raise PlannerError(f"{where}{name} {v!r} is not a number", "give a number") from None


def eval_layer_pattern(text: str, where: str, flag: str) -> list[int]:
    """A Megatron list expression such as "([0]*3+[1]*11)" or "[1,0]*6" (moe_freq_type [5]):
    list literals of integers, `*` by an integer, `+` of lists, parentheses. Evaluated on the
    syntax tree, never by eval()."""
    bad = PlannerError(f"{where}{flag} {text!r} is not a list expression of 0s and 1s",
                       "e.g. \"([0]*3+[1]*11)\" or \"[1,0]*6\"; or an integer N (one MoE layer every N)")
    if len(text) > 10000:
        raise bad
    try:
        tree = ast.parse(text.strip().strip("\"'"), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise bad from None

    def ev(n, depth=0):
        if depth > 50:
            raise bad
        if isinstance(n, ast.List):
            out = []
            for e in n.elts:
                if not (isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool)):
                    raise bad
                out.append(int(e.value))
            return out
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return int(n.value)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mult)):
            a, b = ev(n.left, depth + 1), ev(n.right, depth + 1)
            if isinstance(n.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(n.op, ast.Mult):  # at most MAX_PATTERN entries: one a layer
                if isinstance(a, list) and isinstance(b, int) and 0 <= b and len(a) * b <= MAX_PATTERN:
                    return a * b
                if isinstance(b, list) and isinstance(a, int) and 0 <= a and len(b) * a <= MAX_PATTERN:
                    return b * a
        raise bad

    out = ev(tree)
    if not isinstance(out, list) or any(x not in (0, 1) for x in out):
        raise bad
    return out


# the rule of the vocabulary a script's --padded-vocab-size gives (padded_vocab's assumed record; a Megatron-DeepSpeed
# fork's own padding replaces that record: megatron_deepspeed.merge)
PADDED_VOCAB_RULE = "--padded-vocab-size (Megatron pads no further)"


def padded_vocab(flags: dict, tp: int, where: str, assumed: list[str]) -> int:
    """The vocabulary Megatron builds the embedding and output layer with (module docstring)."""
    if "--padded-vocab-size" in flags:
        v = _int(where, flags, "--padded-vocab-size")
        assumed.append(listed("assumed", "vocab_size", v, PADDED_VOCAB_RULE, show=f"{v:,}"))
        return v
    tok = flags.get("--tokenizer-type")
    if "--vocab-size" in flags:
        v = _int(where, flags, "--vocab-size")
        src = f"--vocab-size {v:,}" + ("" if tok in (None, "NullTokenizer", "TikTokenizer") else
                                       f" (taken as the size of {tok}, whose files the planner does not read)")
    else:
        name = tok or DEFAULT_TOKENIZER
        if name not in TOKENIZER_VOCAB:
            raise PlannerError(f"{where}--tokenizer-type {name}: its vocabulary size is in its files, which the planner does not read",
                               "add --vocab-size N (the tokenizer's size), or pass --model")
        v = TOKENIZER_VOCAB[name]
        src = (f"{name}'s {v:,} tokens" + ("" if tok else " (no --tokenizer-type: pretrain_gpt.py's default GPT2BPETokenizer; "
                                                         "--vocab-file / --merge-file taken to be GPT-2's)"))
    out, note = pad_vocab(flags, v, tp, where)
    assumed.append(listed("assumed", "vocab_size", out, f"{src}, {note}", show=f"{out:,}"))
    return out


def pad_vocab(flags: dict, v: int, tp: int, where: str) -> tuple[int, str]:
    """(the rows Megatron builds for a tokenizer of v tokens, how, as text) [4]: v under --no-pad-vocab-size, else v
    rounded up to a multiple of --make-vocab-size-divisible-by [128] x tp (vocab_size_with_padding, build_tokenizer.py
    l. 133-146). --padded-vocab-size is the caller's (it replaces the rule)."""
    if "--no-pad-vocab-size" in flags:
        return v, "not padded (--no-pad-vocab-size)"
    div = _int(where, flags, "--make-vocab-size-divisible-by", DEFAULT_VOCAB_DIVISOR)
    if div <= 0:
        raise PlannerError(f"{where}--make-vocab-size-divisible-by {div} must be positive", "Megatron's default is 128")
    mult = div * tp
    how = "--make-vocab-size-divisible-by" if "--make-vocab-size-divisible-by" in flags else "Megatron's default"
    return int(math.ceil(v / mult) * mult), f"padded to a multiple of {div} ({how}) x tp {tp} = {mult:,} (vocab_size_with_padding)"


def stack_pads_other(rows: int, tp: int) -> bool:
    """Whether the Megatron stacks' own padding (stack_db vocab_padding: a multiple of 128 x tp, plan.padded_rows)
    builds other rows than `rows` from a vocabulary of `rows` tokens: then the reader pins them (padded_vocab_size),
    as the arguments build them."""
    mult = DEFAULT_VOCAB_DIVISOR * tp
    return rows % mult != 0


def catalog_vocab_rows(flags: dict, model: str, v: int, tp: int, where: str,
                       tokenizer: Optional[int] = None) -> tuple[Optional[int], Note]:
    """The job's padded_vocab_size for a catalog model (or --model) of v tokens, whose vocab_size stands for the
    tokenizer's size, and the note that lists it as assumed: --padded-vocab-size where given, else pad_vocab's
    rows of the tokenizer's size: `tokenizer` where the arguments give it (--vocab-size of a tokenizer that reads it,
    a job setting: VOCAB_SIZE_TOKENIZERS), else the model's v. None (and a note) where the rows are the model's own."""
    n = v if tokenizer is None else tokenizer
    src = f"{model}'s {v:,} tokens" if tokenizer is None else (
        f"the tokenizer's {n:,} tokens (--vocab-size, a setting of the run: {model} has {v:,})")
    if "--padded-vocab-size" in flags:
        rows = _int(where, flags, "--padded-vocab-size")
        how = PADDED_VOCAB_RULE
    else:
        rows, how = pad_vocab(flags, n, tp, where)
    if rows == v:
        return None, listed("assumed", "vocab_size", v, f"{src}, {how}: no padded rows" if tokenizer is not None else
                            f"{model}'s vocabulary, {how}: no padded rows", show=f"{v:,}")
    return rows, listed("assumed", "padded_vocab_size", rows, f"{src}, {how}: the embedding and output layer have "
                        f"{rows:,} rows, priced (NVIDIA/Megatron-LM @d98e8a64 "
                        "megatron/core/tokenizers/utils/build_tokenizer.py l. 133-152)", show=f"{rows:,}")


def layer_windows(flags: dict, where: str, L: int, assumed: list[str]) -> Optional[tuple[int, ...]]:
    """Each layer's window (keys attended, itself included; 0 = full attention) from
    --window-size and --window-attn-skip-freq [8]; None without --window-size."""
    skip = flags.get("--window-attn-skip-freq")
    if "--window-size" not in flags:
        if skip is not None:
            assumed.append(noted("assumed", "--window-attn-skip-freq without --window-size", "full attention on every "
                                 "layer (Megatron's is_layer_window_attention is False without a window)"))
        return None
    text = str(flags["--window-size"]).strip().strip("\"'")
    bad = PlannerError(f"{where}--window-size {text!r} is not a pair of whole numbers LEFT,RIGHT",
                       "e.g. --window-size 4095,0 (a query sees itself and the 4,095 keys before it)")
    parts = text.strip("()").split(",")
    if len(parts) != 2 or not all(p.strip().lstrip("-").isascii() and p.strip().lstrip("-").isdigit() for p in parts):
        raise bad
    left, right = (int(p) for p in parts)
    if right not in (0, -1) or left < -1:
        raise PlannerError(f"{where}--window-size {text}: a window reaching {right} keys ahead is not causal",
                           "give RIGHT 0: the planner prices causal decoders")
    if left == -1:  # an infinite window (transformer_config.py): full attention
        return (0,) * L
    if skip is None:
        pat = [1] * L
    else:
        st = str(skip).strip().strip("\"'")
        if "[" in st:
            pat = eval_layer_pattern(st, where, "--window-attn-skip-freq")
            if len(pat) != L:
                raise PlannerError(f"{where}--window-attn-skip-freq lists {len(pat)} layers, --num-layers is {L}",
                                   "give one entry a layer (1 = sliding window, 0 = full attention)")
        else:
            n = _int(where, {"--window-attn-skip-freq": st}, "--window-attn-skip-freq")
            if n <= 0:
                raise PlannerError(f"{where}--window-attn-skip-freq {n} must be positive", "one full-attention layer every N")
            pat = [1 if (i + 1) % n else 0 for i in range(L)]
    return tuple(left + 1 if x else 0 for x in pat)


def _window_kinds(windows: tuple[int, ...], where: str) -> dict:
    """layer_kinds / layer_pattern (shortest period) for per-layer windows."""
    names = {w: ("full" if w == 0 else "swa") for w in windows}
    if len({w for w in windows if w}) > 1:
        raise PlannerError(f"{where}layers with different windows", "Megatron's --window-size sets one window")
    period = next(p for p in range(1, len(windows) + 1) if all(windows[i] == windows[i % p] for i in range(len(windows))))
    kinds = {("full" if w == 0 else "swa"): ({"mixer": {"kind": "global"}} if w == 0 else
                                             {"mixer": {"kind": "sliding", "window": w}}) for w in names}
    return {"layer_kinds": kinds, "layer_pattern": [names[w] for w in windows[:period]]}


def hybrid_pattern(flags: dict, where: str) -> Optional[tuple[str, str, list[str]]]:
    """(the flag, the main pattern as given, its '|' segments) of a hybrid stack [9], or None without one. Megatron's
    checks: both spellings at once (arguments.py l. 745-749), a symbol outside Symbols (_validate_pattern l. 288-294);
    the planner's refusals: HYBRID_UNPRICED symbols and MTP patterns ('/'), each naming the flag and value."""
    given = [f for f in HYBRID_FLAGS if f in flags]
    if not given:
        return None
    if len(given) == 2:
        raise PlannerError(f"{where}--hybrid-override-pattern and --hybrid-layer-pattern together: Megatron-LM asserts "
                           "only one is given (arguments.py @d98e8a64 l. 745-749)",
                           "drop --hybrid-override-pattern (the deprecated spelling)")
    flag = given[0]
    text = str(flags[flag]).strip().strip("\"'")
    if flags[flag] is True or not text:
        raise PlannerError(f"{where}{flag} has no pattern", "give one symbol a layer, e.g. \"M-M-M*-\"")
    if flags.get("--mtp-hybrid-override-pattern") not in (None, True) and str(flags.get("--mtp-num-layers", "0")) != "0":
        raise PlannerError(f"{where}--mtp-hybrid-override-pattern with --mtp-num-layers: Megatron-LM appends it to {flag} "
                           "as '/' MTP parts (arguments.py @d98e8a64 l. 774-785, deprecated), which this reader does not "
                           "read", f"write the MTP parts into {flag} ('main/MTP/MTP', one part a depth) and drop "
                           "--mtp-hybrid-override-pattern")
    main = text.split("/")[0]  # get_hybrid_total_layer_count: the main pattern is before the first '/' (l. 128-142)
    bad = sorted({ch for ch in main if ch not in HYBRID_VALID and ch != "|"})
    if bad:
        raise PlannerError(f"{where}{flag} {_short(text)}: {', '.join(repr(c) for c in bad)} not a layer symbol "
                           "(Megatron-LM's _validate_pattern raises: hybrid_layer_allocation.py @d98e8a64 l. 288-294)",
                           "symbols: M Mamba-2, G Gated DeltaNet, * attention, - MLP, E MoE; | between pipeline segments")
    for ch in main:
        if ch in HYBRID_UNPRICED:
            raise PlannerError(f"{where}{flag} {_short(text)}: {ch!r} is {HYBRID_UNPRICED[ch]}, which the planner cannot "
                               "price from Megatron flags", "use M, G, *, - and E only, or pass --model with a model YAML "
                               "that lists its layers (layer_kinds, layer_pattern)")
    segments = main.split("|")
    if not main.replace("|", ""):
        raise PlannerError(f"{where}{flag} {_short(text)} has no layers", "give one symbol a layer, e.g. \"M-M-M*-\"")
    return flag, main, segments


def hybrid_mtp(flags: dict, where: str) -> tuple[Optional[str], int]:
    """(the MTP pattern of one depth, the depths) of a hybrid pattern's '/' parts [9] (parse_hybrid_pattern,
    hybrid_layer_allocation.py @d98e8a64 l. 233-274: "main/P/P" is P at 2 depths; no part, or only empty ones, no
    MTP), (None, 0) without them. Megatron's checks: parts that differ (l. 258-266 raises), a symbol outside Symbols or
    a '|' in a part (_validate_pattern, l. 268, 288-294); the planner's: HYBRID_UNPRICED symbols, and a symbol the
    main pattern has no layer of (an MTP module runs layers of the model's own kinds: schema.mtp_layer_pattern)."""
    hyb = hybrid_pattern(flags, where)
    if hyb is None:
        return None, 0
    flag = hyb[0]
    text = str(flags[flag]).strip().strip("\"'")
    parts = text.split("/")[1:]
    if not parts or all(p == "" for p in parts):
        return None, 0
    if any(p != parts[0] for p in parts):
        raise PlannerError(f"{where}{flag} {_short(text)}: MTP parts {', '.join(repr(p) for p in parts)} differ; Megatron-LM "
                           "raises 'All MTP patterns must be identical' (hybrid_layer_allocation.py @d98e8a64 l. 258-266)",
                           "repeat one MTP pattern once a depth, e.g. 'M*M-/*-/*-'")
    part = parts[0]
    bad = sorted({ch for ch in part if ch not in HYBRID_VALID})
    if bad:
        raise PlannerError(f"{where}{flag} {_short(text)}: {', '.join(repr(c) for c in bad)} in the MTP pattern "
                           f"{part!r} is no layer symbol (_validate_pattern, hybrid_layer_allocation.py @d98e8a64 l. 268, "
                           "288-294: no '|' in an MTP part)", "symbols: M, G, *, - and E")
    for ch in part:
        if ch in HYBRID_UNPRICED:
            raise PlannerError(f"{where}{flag} {_short(text)}: {ch!r} in the MTP pattern is {HYBRID_UNPRICED[ch]}, which "
                               "the planner cannot price from Megatron flags", "use M, G, *, - and E only")
    missing = sorted({ch for ch in part if ch not in hyb[1]})
    if missing:
        raise PlannerError(f"{where}{flag} {_short(text)}: the MTP pattern {part!r} has {', '.join(map(repr, missing))}, a "
                           "layer the main pattern has none of; the planner prices an MTP module's layers as kinds of the "
                           "model's own layers", "use MTP symbols the main pattern also has, or pass --model with a "
                           "model YAML")
    return part, len(parts)


def hybrid_mtp_spec(flags: dict, where: str, blocks: list[str], kinds_pattern: list[str], mtp: Optional[int],
                    assumed: list[str]) -> dict:
    """The flags' model's MTP fields from a hybrid pattern's '/' parts [9] (hybrid_mtp): mtp_layers from
    --mtp-num-layers, mtp_layer_pattern the kind of each MTP symbol (the main pattern's layer of that symbol),
    mtp_repeated_layer from --mtp-use-repeated-layer. Megatron builds the MTP block only with --mtp-num-layers
    (hybrid_model.py @d98e8a64 l. 219-230: mtp_on_this_rank is False for mtp_num_layers None,
    multi_token_prediction.py l. 823-828), builds one module a depth, or one with --mtp-use-repeated-layer
    (multi_token_prediction.py l. 1918-1984), and runs --mtp-num-layers of them (l. 2048-2049: self.layers[iteration],
    or layer 0 when repeated): without the repeated layer, a count other than the depths is refused (past them
    Megatron indexes a module it did not build; below them, 0 included, it builds modules it never runs)."""
    part, depths = hybrid_mtp(flags, where)
    if part is None:
        return {}
    if mtp is None:
        assumed.append(noted("assumed", f"the MTP parts of the hybrid pattern ({depths} x {part!r}) without "
                             "--mtp-num-layers", "HybridModel builds no MTP block (hybrid_model.py @d98e8a64 l. 219-230, "
                             "mtp_on_this_rank)"))
        return {}
    repeated = "--mtp-use-repeated-layer" in flags
    if (not repeated and mtp != depths) or mtp == 0:
        raise PlannerError(f"{where}--mtp-num-layers {mtp} with {depths} MTP part(s) in the hybrid pattern: Megatron-LM builds "
                           f"one module a part and runs {mtp} (multi_token_prediction.py @d98e8a64 l. 1918-1984, "
                           "2048-2049), " + ("indexing a module it did not build" if mtp > depths else
                                             "building modules it never runs") + " (mtp_on_this_rank builds the block "
                           "for any count but None, l. 823-829)",
                           f"give --mtp-num-layers {depths}, one '/' part a depth")
    names = {ch: kinds_pattern[blocks.index(ch) % len(kinds_pattern)] for ch in set(part)}
    out = {"mtp_layers": mtp, "mtp_layer_pattern": [names[ch] for ch in part]}
    if repeated:
        out["mtp_repeated_layer"] = True
    return out


def hybrid_spec(flags: dict, where: str, h: int, tp: int, blocks: list[str], spec: dict, defaults: list[str],
                assumed: list[str]) -> dict:
    """layer_kinds + layer_pattern of the hybrid stack [9] (hf_config.hybrid_block_table, layer_kinds_of: the
    structure the Nemotron-H reader builds), its Mamba-2 mixer from the --mamba-* flags (Megatron's defaults
    listed in `defaults`); MambaMixer's assertions are Megatron's errors."""
    from ..hf_config import hybrid_block_seqs, hybrid_block_table, layer_kinds_of

    mamba = None
    if "M" in blocks:
        vals = {f: _int(where, flags, f, d) for f, d in MAMBA_DEFAULTS.items()}
        absent = [f for f in MAMBA_DEFAULTS if f not in flags]
        P, N, G = vals["--mamba-head-dim"], vals["--mamba-state-dim"], vals["--mamba-num-groups"]
        H = _int(where, flags, "--mamba-num-heads")
        if H is None:  # mamba_mixer.py l. 245-251: d_inner = expand x d_model, nheads = d_inner / headdim
            if (MAMBA_EXPAND * h) % P:
                raise PlannerError(f"{where}--mamba-head-dim {P} does not divide d_inner {MAMBA_EXPAND * h} (2 x --hidden-size): "
                                   "MambaMixer asserts it (mamba_mixer.py @d98e8a64 l. 250)", "give --mamba-num-heads")
            H = MAMBA_EXPAND * h // P
            absent.append(f"--mamba-num-heads ({MAMBA_EXPAND} x {h} / {P} = {H})")
        for bad, msg in ((H % tp, f"--mamba-num-heads {H} is not divisible by --tensor-model-parallel-size {tp} (l. 262)"),
                         (G % tp, f"--mamba-num-groups {G} is not divisible by --tensor-model-parallel-size {tp} (l. 270)"),
                         (H % G, f"--mamba-num-heads {H} is not divisible by --mamba-num-groups {G} (l. 274)")):
            if bad:
                raise PlannerError(f"{where}{msg}: MambaMixer asserts it (mamba_mixer.py @d98e8a64)",
                                   "choose Mamba heads and groups that divide as Megatron requires")
        if absent:
            defaults.append("Mamba " + ", ".join(f"{f} {MAMBA_DEFAULTS[f]}" if f in MAMBA_DEFAULTS else f for f in absent))
        defaults.append(f"Mamba conv kernel {MAMBA_CONV_KERNEL} with bias, SSD chunk {MAMBA_CHUNK}, no projection "
                        "biases (MambaMixer's fixed defaults, no flag sets them)")
        mamba = {"kind": "mamba2", "num_heads": H, "head_dim": P, "state_size": N, "n_groups": G,
                 "conv_kernel": MAMBA_CONV_KERNEL, "chunk_size": MAMBA_CHUNK, "conv_bias": True, "proj_bias": False}
    else:
        given = [f for f in MAMBA_FLAGS if f in flags]
        if given:
            assumed.append(noted("assumed", ', '.join(given), "the pattern has no M layer (no Mamba mixer is built)"))
    moe = spec.get("moe")
    if "E" in blocks and moe is None:
        raise PlannerError(f"{where}the hybrid pattern has MoE layers (E) but no --num-experts",
                           "add --num-experts (Megatron builds the MoE layer from it)")
    if moe is not None and "E" not in blocks:
        spec.pop("moe")
        assumed.append(noted("assumed", "--num-experts",
                             "the hybrid pattern has no E layer, so Megatron builds no experts"))
    elif moe is not None and ("layer_freq" in moe or "first_k_dense" in moe or "layer_kinds" in spec):
        moe.pop("layer_freq", None)
        moe.pop("first_k_dense", None)
        assumed.append(noted("assumed", "--moe-layer-freq",
                             "the hybrid pattern's E symbols place the MoE layers (HybridStack builds "
                             "one layer a symbol, hybrid_block.py @d98e8a64 l. 134-193)"))
    gdn = gdn_mixer(flags, where, tp, defaults, assumed) if "G" in blocks else None
    if gdn is None:
        given = [f for f in GDN_FLAGS if f in flags]
        if given:
            assumed.append(noted("assumed", ', '.join(given),
                                 "the pattern has no G layer (no Gated DeltaNet is built)"))
    mixers, mlps = hybrid_block_seqs(blocks, hybrid_block_table(mamba, {"kind": "global"}, gdn))
    kinds, pattern = layer_kinds_of(mixers, mlps, len(blocks))
    return {"layer_kinds": kinds, "layer_pattern": pattern}


def gdn_mixer(flags: dict, where: str, tp: int, defaults: list[str], assumed: list[str]) -> dict:
    """The G layers' Gated DeltaNet (schema.GatedDeltaNet) from the --linear-* flags [10] (Megatron's defaults listed
    in `defaults`): _GDNBase reads linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
    linear_value_head_dim and linear_conv_kernel_dim (gated_delta_net/common.py @d98e8a64 l. 176-182), builds no
    projection or conv bias (l. 118-119 bias False, conv_bias False; hybrid_layer_specs.py l. 122-135 passes none) and
    runs fla's chunk rule at chunk 64 (gdn.py l. 73). Refused: --experimental-attention-variant gdn2 (G then builds
    GatedDeltaNet2, other gates: hybrid_block.py l. 196-202), gdn without --linear-attention-freq (Megatron asserts,
    transformer_config.py l. 1475-1477), value heads not a multiple of the key heads (l. 1495-1498; q and k are
    repeated to the value heads, common.py _prepare_input_for_gated_delta_rule)."""
    var = flags.get("--experimental-attention-variant")
    if var is not None and var not in GDN_VARIANTS:
        raise PlannerError(f"{where}--experimental-attention-variant {_short(var)} with G layers: "
                           + ("G then builds GatedDeltaNet2 (hybrid_block.py @d98e8a64 l. 196-202), whose channel-wise "
                              "decay, erase and write gates the planner does not price" if var == "gdn2" else
                              "not a Gated DeltaNet variant Megatron-LM builds a G layer under (transformer_config.py "
                              "@d98e8a64 l. 301)"),
                           "leave --experimental-attention-variant out (G builds GatedDeltaNet), or pass --model with "
                           "a model YAML")
    if var is not None and "--linear-attention-freq" not in flags:
        raise PlannerError(f"{where}--experimental-attention-variant {var} without --linear-attention-freq: Megatron-LM "
                           "asserts it (transformer_config.py @d98e8a64 l. 1475-1477)",
                           "add --linear-attention-freq, or leave the variant out (G layers build GatedDeltaNet)")
    if "--linear-attention-freq" in flags:
        assumed.append(noted("assumed", "--linear-attention-freq",
                             "the hybrid pattern's G symbols place the Gated DeltaNet layers "
                             "(HybridStack does not read it: transformer_config.py @d98e8a64 l. 1471-1473)"))
    vals = {f: _int(where, flags, f, d) for f, d in GDN_DEFAULTS.items()}
    absent = [f for f in GDN_DEFAULTS if f not in flags]
    w, K, V = vals["--linear-conv-kernel-dim"], vals["--linear-key-head-dim"], vals["--linear-value-head-dim"]
    Hk, H = vals["--linear-num-key-heads"], vals["--linear-num-value-heads"]
    if H % Hk:
        raise PlannerError(f"{where}--linear-num-value-heads {H} is not a multiple of --linear-num-key-heads {Hk}: "
                           "Megatron-LM asserts it (transformer_config.py @d98e8a64 l. 1495-1498) and repeats q and k "
                           "to the value heads", "choose value heads a multiple of the key heads")
    if absent:
        defaults.append("Gated DeltaNet " + ", ".join(f"{f} {GDN_DEFAULTS[f]}" for f in absent))
    defaults.append(f"Gated DeltaNet chunk {GDN_CHUNK}, no projection or conv biases (GatedDeltaNet's fixed defaults, "
                    "no flag sets them)")
    return {"kind": "gated_deltanet", "num_key_heads": Hk, "num_value_heads": H, "key_head_dim": K,
            "value_head_dim": V, "conv_kernel": w, "chunk_size": GDN_CHUNK}


def rope_scaled(flags: dict) -> bool:
    """Whether Megatron applies --use-rope-scaling: GPTModel builds its RotaryEmbedding (which takes rope_scaling)
    for --position-embedding-type rope without MLA only (gpt_model.py @d98e8a64 l. 183-194; MLA and yarn build
    their own rotary, learned and none none); --use-rotary-position-embeddings is rope's older spelling."""
    pos = flags.get("--position-embedding-type")
    rope = pos == "rope" or (pos is None and "--use-rotary-position-embeddings" in flags)
    return rope and "--multi-latent-attention" not in flags


def yarn_built(flags: dict) -> bool:
    """Whether Megatron builds the non-MLA YarnRotaryEmbedding: --position-embedding-type yarn without
    --multi-latent-attention (gpt_model.py @d98e8a64 l. 196-214; argument_utils.py l. 395-400 fills config.yarn_*
    for that case only; MLA takes its YaRN numbers from MLATransformerConfig instead)."""
    return flags.get("--position-embedding-type") == "yarn" and "--multi-latent-attention" not in flags


# Megatron-LM @d98e8a64's non-MLA YaRN on the command line: argument_utils.py _apply_yarn_config_from_args
# (l. 384-413) sets config.yarn_rotary_scaling_factor from --rotary-scaling-factor (arguments.py l. 3558, default
# 1.0), yarn_original_max_position_embeddings from --yarn-original-max-position-embeddings (l. 2400; absent: 4096),
# yarn_beta_fast / yarn_beta_slow from --yarn-beta-fast / --yarn-beta-slow (l. 2402-2405; absent: 32, 1),
# yarn_mscale / yarn_mscale_all_dim from --mscale / --mscale-all-dim (l. 3560-3563, defaults 1.0, 0.0) and
# yarn_correction_range_round_to_int from --[no-]yarn-correction-range-round-to-int (l. 2406-2410; absent: True)
YARN_FLAGS = {"--rotary-scaling-factor": 1.0, "--yarn-original-max-position-embeddings": 4096,
              "--yarn-beta-fast": 32.0, "--yarn-beta-slow": 1.0, "--mscale": 1.0, "--mscale-all-dim": 0.0}
YARN_ROUND = ("--yarn-correction-range-round-to-int", "--no-yarn-correction-range-round-to-int")


def yarn_concentration(factor: float, mscale: float = 1.0, mscale_all_dim: float = 0.0) -> float:
    """Megatron-Core's YaRN factor on cos and sin (yarn_rotary_pos_embedding.py @d98e8a64 l. 275-294:
    _yarn_get_mscale(s, m) = 0.1 m ln s + 1 for s > 1, else 1; the concentration factor is
    _yarn_get_mscale(s, mscale) / _yarn_get_mscale(s, mscale_all_dim); attention.py l. 326 applies it).
    With the command line's defaults (1, 0) it is 0.1 ln s + 1, transformers' get_mscale(factor)."""
    def g(m):
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
    return g(mscale) / g(mscale_all_dim)


def rotary_built(flags: dict) -> bool:
    """Whether Megatron builds a rotary embedding, which takes --rotary-base: MLA's own (multi_latent_attention.py
    @d98e8a64 l. 181-199), or GPTModel's for --position-embedding-type rope, yarn or mrope (gpt_model.py
    l. 183-214; absent: learned_absolute, arguments.py l. 2397); --use-rotary-position-embeddings is rope's older
    spelling."""
    pos = flags.get("--position-embedding-type")
    return ("--multi-latent-attention" in flags or pos in ("rope", "yarn", "mrope")
            or (pos is None and "--use-rotary-position-embeddings" in flags))


def megatron_rotary_base(flags: dict, where: str, defaults: Optional[list] = None) -> float:
    """--rotary-base (argparse type int, default 10000: arguments.py @d98e8a64 l. 2418) as ModelSpec.rope_theta,
    the default listed in `defaults` where the flag is absent."""
    if "--rotary-base" not in flags:
        if defaults is not None:
            defaults.append("rotary base 10000 (--rotary-base absent)")
        return 10000.0
    v = _int(where, flags, "--rotary-base")
    if v is None or v <= 0:
        raise PlannerError(f"{where}--rotary-base {_short(flags['--rotary-base'])} is not a whole number > 0",
                           "give --rotary-base a whole number, e.g. 10000")
    return float(v)


def mla_yarn_built(flags: dict) -> bool:
    """Whether Megatron builds MLA's YarnRotaryEmbedding: --multi-latent-attention with --rope-type yarn or
    none (MLATransformerConfig.rope_type default yarn, transformer_config.py @d98e8a64 l. 3306;
    multi_latent_attention.py l. 188-199)."""
    return "--multi-latent-attention" in flags and str(flags.get("--rope-type") or "yarn") == "yarn"


# MLA's YaRN on the command line: core_transformer_config_from_args (argument_utils.py @d98e8a64 l. 301-303)
# copies every args attribute named like an MLATransformerConfig field over the field's default, so
# rotary_scaling_factor, mscale and mscale_all_dim come from --rotary-scaling-factor, --mscale, --mscale-all-dim
# (arguments.py l. 3558-3563, defaults 1.0, 1.0, 0.0: MLATransformerConfig's own rotary_scaling_factor 40,
# l. 3315, never applies from pretrain_gpt.py). original_max_position_embeddings, beta_fast and beta_slow have
# no argument of that name (--yarn-* set args.yarn_*, read for non-MLA YaRN only, l. 395-413): they stay
# MLATransformerConfig's 4096, 32, 1 (transformer_config.py l. 3318-3324), and MLA passes no
# correction_range_round_to_int, so YarnRotaryEmbedding's default True (yarn_rotary_pos_embedding.py l. 63) holds.
MLA_YARN_FLAGS = {"--rotary-scaling-factor": 1.0, "--mscale": 1.0, "--mscale-all-dim": 0.0}
MLA_YARN_FIXED = (4096, 32.0, 1.0, True)  # (original_max_position_embeddings, beta_fast, beta_slow, truncate)


def megatron_mla_yarn(flags: dict, where: str, defaults: Optional[list] = None) -> tuple:
    """The MLA YaRN a pretrain_gpt.py command line builds (mla_yarn_built), as ModelSpec.mla_yarn_rope_scaling
    spells it: (factor, 4096, 32, 1, True, mscale, mscale_all_dim, attention factor rounded to 12 decimals);
    the flags left out are listed in `defaults`."""
    vals = _yarn_numbers(flags, where, MLA_YARN_FLAGS, defaults)
    f, m, a = vals["--rotary-scaling-factor"], vals["--mscale"], vals["--mscale-all-dim"]
    return (f, *MLA_YARN_FIXED, m, a, round(yarn_concentration(f, m, a), 12))


def _yarn_numbers(flags: dict, where: str, table: dict, defaults: Optional[list]) -> dict:
    """The YaRN flags of `table` (flag -> default) as numbers, the defaults of those left out listed."""
    vals = {}
    for flag, d in table.items():
        v = flags.get(flag)
        if v is None:
            vals[flag] = d
            if defaults is not None:
                defaults.append(f"{flag[2:]} {d:g}")
            continue
        if flag == "--yarn-original-max-position-embeddings":
            vals[flag] = _int(where, flags, flag)
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = float("nan")
        if not math.isfinite(x) or x < 0 or (x == 0 and flag not in ("--mscale", "--mscale-all-dim")):
            # an mscale of 0 is Megatron's own: _yarn_get_mscale(s, 0) = 1 (yarn_rotary_pos_embedding.py @d98e8a64
            # l. 275-279), a pair's numerator or denominator of 1
            sign = ">=" if flag in ("--mscale", "--mscale-all-dim") else ">"
            raise PlannerError(f"{where}{flag} {_short(v)} is not a number {sign} 0", f"give {flag} a number, e.g. {d:g}")
        vals[flag] = x
    return vals


def megatron_yarn(flags: dict, where: str, defaults: Optional[list] = None) -> tuple:
    """The YaRN a pretrain_gpt.py command line builds (yarn_built): (YarnScalingParams.key() fields, the
    attention factor), as ModelSpec.yarn_rope_scaling spells them; the flags left out are listed in `defaults`."""
    vals = _yarn_numbers(flags, where, YARN_FLAGS, defaults)
    if all(f in flags for f in YARN_ROUND):
        raise PlannerError(f"{where}{YARN_ROUND[0]} and {YARN_ROUND[1]} both given", "give one of the two")
    rounded = YARN_ROUND[1] not in flags
    if YARN_ROUND[0] not in flags and rounded and defaults is not None:
        defaults.append("yarn correction range rounded to whole dimensions")
    f = vals["--rotary-scaling-factor"]
    attention = yarn_concentration(f, vals["--mscale"], vals["--mscale-all-dim"])
    key = (f, vals["--yarn-original-max-position-embeddings"], vals["--yarn-beta-fast"], vals["--yarn-beta-slow"], rounded)
    return key, attention


def megatron_yarn_mscales(flags: dict) -> Optional[tuple]:
    """The (--mscale, --mscale-all-dim) pair of a non-MLA YaRN command line (yarn_built) where it gives either
    (the other at Megatron's default 1 or 0), as rope_yarn_params mscale, mscale_all_dim: the export writes the
    pair back (export._plain_yarn_mscales, the model's own first); None where neither is given. Call after
    megatron_yarn, which checks the numbers."""
    if "--mscale" not in flags and "--mscale-all-dim" not in flags:
        return None
    return tuple(YARN_FLAGS[f] if flags.get(f) is None else float(flags[f]) for f in ("--mscale", "--mscale-all-dim"))


def model_spec_from_flags(flags: dict, where: str, tp: int, label: str, assumed: list[str]) -> dict:
    """ModelSpec fields for the model the flags define (module docstring); each setting the
    flags leave out is Megatron's default and listed in `assumed`."""
    for flag, what in NOT_BUILT.items():
        if flag in flags:
            raise PlannerError(f"{where}{what}: the planner builds decoder-only transformers from Megatron flags",
                               "pass --model with a model YAML that lists its layers (layer_kinds, layer_pattern)")
    hybrid = hybrid_pattern(flags, where)
    missing = [f for f in ("--num-layers", "--hidden-size", "--num-attention-heads") if f not in flags
               and not (hybrid and f == "--num-layers")]
    if missing:
        raise PlannerError(f"{where}the Megatron arguments do not give the model's shape ({', '.join(missing)} needed) "
                           "and no --model was given", "add the flags, or pass --model NAME, a model YAML or a Hugging Face config.json")
    if hybrid:  # the pattern's layer count replaces --num-layers (arguments.py @d98e8a64 l. 787-797) [9]
        blocks = list(hybrid[1].replace("|", ""))
        L = len(blocks)
        given = _int(where, flags, "--num-layers")
        if given is not None and given != L:
            assumed.append(listed("assumed", "num_layers", L,
                                  f"{hybrid[0]} has {L} layers; --num-layers {given} ignored, as Megatron-LM "
                                  "ignores it (arguments.py @d98e8a64 l. 787-797: the pattern's count wins, with a warning)"))
        for f in ("--multi-latent-attention", "--window-size"):
            if f in flags:
                raise PlannerError(f"{where}{f} with {hybrid[0]}: the planner reads a hybrid stack's attention layers as "
                                   "plain self-attention (hybrid_layer_specs.py @d98e8a64 attention_layer)",
                                   "drop the flag, or pass --model with a model YAML that lists its layers")
    else:
        L = _int(where, flags, "--num-layers")
    h = _int(where, flags, "--hidden-size")
    a = _int(where, flags, "--num-attention-heads")
    for name, v in (("--num-layers", L), ("--hidden-size", h), ("--num-attention-heads", a)):
        if v <= 0:
            raise PlannerError(f"{where}{name} {v} must be positive", "give the model's size")
    defaults: list[str] = []  # Megatron defaults the flags left out (one assumed line)
    gated = "--swiglu" in flags or "--quick-geglu" in flags
    if "--ffn-hidden-size" in flags:
        ffn = _int(where, flags, "--ffn-hidden-size")
    else:
        ffn = int((4 * h * 2 / 3) / 64) * 64 if "--swiglu" in flags else 4 * h
        defaults.append(f"ffn_hidden_size {ffn:,} ({'int(8h/3 / 64) x 64 with --swiglu' if '--swiglu' in flags else '4h'})")
    if "--group-query-attention" in flags:
        kv = _int(where, flags, "--num-query-groups", 1)
        if "--num-query-groups" not in flags:
            defaults.append("num_query_groups 1 (--group-query-attention without --num-query-groups)")
    else:
        kv = None
        if "--num-query-groups" in flags:
            assumed.append(listed("assumed", "--num-query-groups", flags["--num-query-groups"], "Megatron builds "
                                  "multi-head attention (core_transformer_config_from_args sets num_query_groups None)",
                                  show=f"{flags['--num-query-groups']} without --group-query-attention", spaced=True))
    head_dim = _int(where, flags, "--kv-channels") if "--kv-channels" in flags else None
    if head_dim is None and h % a:
        raise PlannerError(f"{where}--hidden-size {h} is not divisible by --num-attention-heads {a}", "give --kv-channels")
    norm_flag = flags.get("--normalization", "LayerNorm")
    norm = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}.get(norm_flag)
    if norm is None:
        raise PlannerError(f"{where}--normalization {norm_flag!r} is not modelled", "valid: LayerNorm, RMSNorm")
    if "--normalization" not in flags:
        defaults.append("LayerNorm")
    pos_flag = flags.get("--position-embedding-type")
    if pos_flag is None:
        pos_flag = ("rope" if "--use-rotary-position-embeddings" in flags else
                    "none" if "--no-position-embedding" in flags else "learned_absolute")
        if pos_flag == "learned_absolute":
            defaults.append("learned_absolute positions")
    pos = {"learned_absolute": "learned", "rope": "rope", "yarn": "rope", "mrope": "rope", "none": "none",
           "alibi": "alibi"}.get(pos_flag)  # alibi: BigScience's Megatron-DeepSpeed (megatron_deepspeed._bigscience)
    if pos is None:
        raise PlannerError(f"{where}--position-embedding-type {pos_flag!r} is not modelled",
                           "valid: learned_absolute, rope, yarn, mrope, none")
    bias = "--disable-bias-linear" not in flags
    if "--disable-bias-linear" not in flags and "--add-bias-linear" not in flags:
        defaults.append("linear biases")
    hd = _float(where, flags, "--hidden-dropout", DEFAULT_DROPOUT)
    ad = _float(where, flags, "--attention-dropout", DEFAULT_DROPOUT)
    absent_drop = [f for f in ("--hidden-dropout", "--attention-dropout") if f not in flags]
    if absent_drop:
        defaults.append(f"dropout 0.1 ({', '.join(absent_drop)} absent)")
    tied = "--untie-embeddings-and-output-weights" not in flags
    if tied:
        defaults.append("tied embeddings")
    if "--max-position-embeddings" in flags:
        max_seq = _int(where, flags, "--max-position-embeddings")
    elif "--seq-length" in flags:
        max_seq = _int(where, flags, "--seq-length")
        assumed.append(listed("assumed", "max_seq_len", max_seq, "--max-position-embeddings absent (Megatron requires "
                              "it), --seq-length used", show=f"{max_seq:,}"))
    else:
        raise PlannerError(f"{where}neither --max-position-embeddings nor --seq-length", "Megatron requires --max-position-embeddings")
    spec: dict = dict(
        name=label, description=f"the model the Megatron-LM arguments of {label} define",
        num_layers=L, hidden_size=h, ffn_hidden_size=ffn, num_attention_heads=a,
        vocab_size=padded_vocab(flags, tp, where, assumed), gated_mlp=gated, norm=norm, tied_embeddings=tied,
        max_seq_len=max_seq, position_embedding=pos, linear_bias=bias, dropout=(hd > 0 or ad > 0),
    )
    if (hd > 0 or ad > 0) and (hd, ad) != (DEFAULT_DROPOUT, DEFAULT_DROPOUT):
        # the probabilities kept where they are not Megatron's 0.1 each (ModelSpec.hidden_dropout / attention_dropout:
        # a 0 keeps no mask), so an export writes them as read
        spec.update(hidden_dropout=hd, attention_dropout=ad)
    if "--squared-relu" in flags:  # [3] l. 320-322: activation_func squared_relu, the plain MLP
        spec["mlp_activation"] = "squared_relu"
    elif "--quick-geglu" in flags:  # [3] l. 323-326: gated, activation_func quick_gelu
        spec["mlp_activation"] = "quick_gelu"
    if "--use-rope-scaling" in flags:  # Llama 3.x RoPE scaling at Megatron's fixed numbers (trainers.MEGATRON_LLAMA3_ROPE)
        from . import MEGATRON_LLAMA3_ROPE

        if rope_scaled(flags):
            f, lo, hi, orig = MEGATRON_LLAMA3_ROPE
            spec["rope_scaling"] = "llama3"
            spec["rope_scaling_params"] = dict(factor=f, low_freq_factor=lo, high_freq_factor=hi,
                                               original_max_position_embeddings=orig)
    if pos == "rope" and rotary_built(flags):  # the rotary base every rotary takes (megatron_rotary_base)
        spec["rope_theta"] = megatron_rotary_base(flags, where, defaults)
    if yarn_built(flags):  # non-MLA YaRN (megatron_yarn: the command line's numbers, Megatron's defaults listed)
        (f, orig, bf, bs, rounded), attention = megatron_yarn(flags, where, defaults)
        spec["rope_scaling"] = "yarn"
        spec["rope_yarn_params"] = dict(factor=f, original_max_position_embeddings=orig, beta_fast=bf, beta_slow=bs,
                                        truncate=rounded)
        pair = megatron_yarn_mscales(flags)
        if pair is not None:  # --mscale / --mscale-all-dim given: kept, so an export writes the same pair
            spec["rope_yarn_params"].update(mscale=pair[0], mscale_all_dim=pair[1])
        if attention != 1.0:
            spec["rope_attention_factor"] = attention
    if "--rotary-seq-len-interpolation-factor" in flags and rope_scaled(flags):
        # linear RoPE scaling: RotaryEmbedding divides the positions by it (rotary_pos_embedding.py @d98e8a64
        # l. 135-136; argument_utils.py l. 467 passes it), the rotary of rope without MLA only
        if "--use-rope-scaling" in flags:
            raise PlannerError(f"{where}--use-rope-scaling with --rotary-seq-len-interpolation-factor: two rotary "
                               "scalings at once, which no model the planner reads has (ModelSpec.rope_scaling is one)",
                               "drop one of the two")
        spec["rope_scaling"] = "linear"
        spec["rope_linear_factor"] = float(_int(where, flags, "--rotary-seq-len-interpolation-factor"))
    if "--qk-layernorm" in flags and "--multi-latent-attention" not in flags:
        spec["qk_norm"] = True  # TransformerConfig.qk_layernorm (default False): per-head q/k norms (MLA: its latents')
    if kv is not None:
        spec["num_kv_heads"] = kv
    if head_dim is not None and (h % a or head_dim != h // a):  # --kv-channels h / heads is the default: left out
        spec["head_dim"] = head_dim
    if "--multi-latent-attention" in flags:
        if kv is not None:
            raise PlannerError(f"{where}--multi-latent-attention with --group-query-attention",
                               "Megatron refuses the pair (validate_args): drop one")
        mla = {f: _int(where, flags, f, d) for f, d in MLA_DEFAULTS.items()}
        absent = [f for f in MLA_DEFAULTS if f not in flags]
        if absent:
            defaults.append("MLA " + ", ".join(f"{f} {MLA_DEFAULTS[f]}" for f in absent))
        q = _int(where, flags, "--q-lora-rank")
        if q is None:
            defaults.append("no query latent (--q-lora-rank absent)")
        spec["mla"] = dict(q_lora_rank=q, kv_lora_rank=mla["--kv-lora-rank"], qk_nope_head_dim=mla["--qk-head-dim"],
                           qk_rope_head_dim=mla["--qk-pos-emb-head-dim"], v_head_dim=mla["--v-head-dim"])
        # MLA's rotary type: --rope-type (arguments.py @d98e8a64 choices rope, yarn; absent: MLATransformerConfig's
        # default yarn, transformer_config.py l. 3306) -> rope_scaling (plan._mla_rope_fusion reads it)
        if str(flags.get("--rope-type") or "yarn") == "yarn":
            spec["rope_scaling"] = "yarn"
            if "--rope-type" not in flags:
                defaults.append("MLA rope type yarn (--rope-type absent: MLATransformerConfig's default)")
            f, orig, bf, bs, rounded, m, a, attention = megatron_mla_yarn(flags, where, defaults)
            defaults.append(f"MLA YaRN original_max_position_embeddings {orig}, beta_fast {bf:g}, beta_slow {bs:g}, "
                            "correction range rounded (MLATransformerConfig's: no flag sets them)")
            spec["rope_yarn_params"] = dict(factor=f, original_max_position_embeddings=orig, beta_fast=bf, beta_slow=bs,
                                            truncate=rounded, mscale=m, mscale_all_dim=a)
            if attention != 1.0:
                spec["rope_attention_factor"] = attention
    if "--num-experts" in flags:
        spec.update(_moe(flags, where, L, ffn, defaults))
        if bias:  # the router's own linear bias comes with --add-bias-linear [8]
            spec["moe"]["router_linear_bias"] = True
    elif any(f in flags for f in ("--moe-ffn-hidden-size", "--moe-router-topk", "--moe-shared-expert-intermediate-size")):
        assumed.append(noted("assumed", "MoE flags without --num-experts",
                             "a dense model (Megatron builds no experts)"))
    windows = layer_windows(flags, where, L, [])
    if windows is not None and any(windows):
        moe = spec.get("moe", {})
        if "layer_kinds" in spec or "mla" in spec or moe.get("layer_freq", 1) != 1 or moe.get("first_k_dense", 0):
            raise PlannerError(f"{where}sliding-window attention with {'MLA' if 'mla' in spec else 'a --moe-layer-freq list'}",
                               "pass --model with a model YAML that lists its layers (layer_kinds, layer_pattern)")
        spec.update(_window_kinds(windows, where))
    mtp = _int(where, flags, "--mtp-num-layers")
    if hybrid:  # a hybrid stack's MTP comes from its pattern's '/' parts only (hybrid_mtp_spec)
        spec.update(hybrid_spec(flags, where, h, tp, blocks, spec, defaults, assumed))
        spec.update(hybrid_mtp_spec(flags, where, blocks, spec["layer_pattern"], mtp, assumed))
    elif mtp:
        spec["mtp_layers"] = mtp
        if "--mtp-use-repeated-layer" in flags:  # one module run mtp times (multi_token_prediction.py l. 1985-1996)
            spec["mtp_repeated_layer"] = True
    spec["sources"] = [f"Megatron-LM arguments in {label}",
                       "defaults: NVIDIA/Megatron-LM @d98e8a64 megatron/training/arguments.py, "
                       "megatron/core/transformer/transformer_config.py (planner/trainers/megatron_model.py)"]
    if defaults:
        assumed.append(noted("assumed", "Megatron defaults for what the flags leave out", ", ".join(defaults)))
    return spec


def _moe(flags: dict, where: str, L: int, ffn: int, defaults: list[str]) -> dict:
    """The `moe:` block (and the layer kinds of an irregular --moe-layer-freq list) [3][5]."""
    E = _int(where, flags, "--num-experts")
    k = _int(where, flags, "--moe-router-topk", DEFAULT_TOPK)
    if "--moe-router-topk" not in flags:
        defaults.append(f"--moe-router-topk {DEFAULT_TOPK}")
    moe: dict = dict(num_experts=E, top_k=k)
    fe = _int(where, flags, "--moe-ffn-hidden-size")
    if fe is not None and fe != ffn:
        moe["expert_ffn_hidden_size"] = fe
    elif fe is None:
        defaults.append("expert width = --ffn-hidden-size")
    fs = _int(where, flags, "--moe-shared-expert-intermediate-size")
    if fs:
        moe.update(num_shared_experts=1, shared_expert_ffn_hidden_size=fs)
        if "--moe-shared-expert-gate" in flags:
            moe["shared_expert_gate"] = True
    score = flags.get("--moe-router-score-function", "softmax")
    if score not in ("softmax", "sigmoid"):
        raise PlannerError(f"{where}--moe-router-score-function {score!r} is not modelled", "valid: softmax, sigmoid")
    moe["router"] = score
    if "--moe-router-enable-expert-bias" in flags:
        if score != "sigmoid":
            raise PlannerError(f"{where}--moe-router-enable-expert-bias with --moe-router-score-function {score}: "
                               "Megatron-Core refuses it (transformer_config.py @d98e8a64 l. 2617-2625: the expert "
                               "bias of aux-loss-free routing needs a sigmoid or sqrtsoftplus score)",
                               "add --moe-router-score-function sigmoid, or drop --moe-router-enable-expert-bias")
        moe["expert_score_bias"] = True
    groups = _int(where, flags, "--moe-router-num-groups")
    if groups:  # group-limited routing (arguments.py --moe-router-num-groups, --moe-router-group-topk)
        moe.update(expert_groups=groups, groups_per_token=_int(where, flags, "--moe-router-group-topk", 1))
    out: dict = {"moe": moe}
    freq = flags.get("--moe-layer-freq")
    if freq is None:
        return out
    text = str(freq).strip().strip("\"'")
    if "[" not in text:
        n = _int(where, {"--moe-layer-freq": text}, "--moe-layer-freq")
        if n <= 0:
            raise PlannerError(f"{where}--moe-layer-freq {n} must be positive", "one MoE layer every N layers")
        moe["layer_freq"] = n
        return out
    pat = eval_layer_pattern(text, where, "--moe-layer-freq")
    if len(pat) != L:
        raise PlannerError(f"{where}--moe-layer-freq lists {len(pat)} layers, --num-layers is {L}",
                           "Megatron asserts one entry a layer (gpt_layer_specs.py)")
    first = next((i for i, x in enumerate(pat) if x), L)
    if all(pat[first:]) and first < L:
        if first:
            moe["first_k_dense"] = first
        return out
    for n in range(2, L + 1):
        if pat == [1 if i % n == 0 else 0 for i in range(L)]:
            moe["layer_freq"] = n
            return out
    out["layer_kinds"] = {"dense": {"mlp": {"kind": "dense"}}, "moe": {"mlp": {"kind": "moe"}}}
    out["layer_pattern"] = ["moe" if x else "dense" for x in pat]
    return out
