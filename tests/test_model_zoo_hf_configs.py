"""Every model_zoo entry with a local copy of the Hugging Face config.json it cites
(tests/data/arch/<folder>/config.json; where each copy comes from: tests/data/arch/README.md)
agrees with that copy on every field both carry.

The comparison reads the raw JSON, not planner/hf_config.py (tests/test_layer_zoo.py compares the
reader's model with the zoo's; this file checks the zoo's numbers against the file itself, so a
reader bug and a zoo typo cannot hide each other). Each zoo field is paired with one explicit
config.json key (FIELDS, per model type in FAMILY_FIELDS); nothing is matched by name or
substring. A key the config leaves out is compared with its transformers class default only where
CLASS_DEFAULTS states it (with its source); otherwise the field is not carried by the config and is
not compared. Where an entry differs from its copy on purpose, EXPECTED_DIFFERENCES says why, and
the test checks the difference is still there (a stale reason fails).

max_seq_len is the context an entry chose (its pre-training context, or the context it serves:
planner/schema.py ModelSpec.max_seq_len), not always max_position_embeddings: SEQ_FROM names
the config key each entry's value is, or none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.catalog import load_model

ARCH = Path(__file__).parent / "data" / "arch"

# zoo entry -> folder under tests/data/arch. Llama 3 8B / 70B: no faithful copy of
# meta-llama/Meta-Llama-3-8B or -70B config.json was found (README); their shape fields are
# checked against the Llama 3.1 copies, which Meta released with the same shape (the zoo entries
# cite both), with the Llama 3.1-only fields in EXPECTED_DIFFERENCES.
COPIES = {
    "deepseek-v2": "deepseek-v2",
    "deepseek-v3": "deepseek-v3",
    "gemma3-27b": "gemma-3-27b-it",
    "gpt-oss-120b": "gpt-oss-120b",
    "gpt-oss-20b": "gpt-oss-20b",
    "jamba-v0.1": "jamba-v0.1",
    "kimi-k2": "kimi-k2-instruct",
    "llama2-7b": "llama-2-7b-hf",
    "llama2-13b": "llama-2-13b-hf",
    "llama2-70b": "llama-2-70b-hf",
    "llama3-8b": "llama-3.1-8b",
    "llama3-70b": "llama-3.1-70b",
    "llama3-70b-paper": "llama-3.1-70b",
    "llama3-405b": "llama-3.1-405b",
    "llama3-405b-paper": "llama-3.1-405b",
    "llama3.2-1b": "llama-3.2-1b",
    "llama3.2-3b": "llama-3.2-3b",
    "llama4-maverick": "llama-4-maverick-17b-128e-instruct",
    "llama4-scout": "llama-4-scout-17b-16e-instruct",
    "mistral-7b": "mistral-7b-v0.1",
    "mixtral-8x7b": "mixtral-8x7b-v0.1",
    "mixtral-8x22b": "mixtral-8x22b-v0.1",
    "nemotron-h-56b": "nemotron-h-56b-base-8k",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-next-80b-a3b": "qwen3-next-80b-a3b-thinking",
}

# Zoo entries that cite a Hugging Face config.json with no local copy (README "No local copy"):
# the citation stays as it is.
NO_COPY = {
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite config.json (cited for the family's model_type): no vendored copy "
                        "found; the entry's shape is cited from Megatron-Bridge's DeepSeekV2LiteModelProvider and "
                        "Megatron-LM's DeepSeek-V2-Lite.sh, which agree",
    "gpt3-175b": "openai-community/gpt2 config.json (cited for vocab 50257, dropout 0.1, tied lm_head; GPT-3 has no HF "
                 "checkpoint): no vendored byte copy with a nameable repository, path and commit was found",
}


def same(v):
    return v


def rope_type(rs):
    """config.json rope_scaling -> ModelSpec.rope_scaling: its `rope_type` (transformers >= 4.45) or legacy `type`
    (DeepSeek-V3, Kimi K2); null: none."""
    if rs is None:
        return None
    return rs["rope_type"] if "rope_type" in rs else rs["type"]


def one_group_is_no_limit(n_group):
    """DeepSeek n_group / topk_group -> MoESpec.expert_groups / groups_per_token: one group is no group limit
    (MoESpec null for both)."""
    return None if n_group == 1 else n_group


NO_EQUIVALENT = object()  # a config value ModelSpec cannot state: never equal to a zoo value


def sparse_step_as_layer_freq(step):
    """Qwen MoE decoder_sparse_step -> MoESpec.layer_freq. Qwen: layer i is MoE iff (i + 1) % step == 0
    (Qwen3MoeDecoderLayer); MoESpec: iff (i - first_k_dense) % layer_freq == 0. They agree at 1 (every layer) only."""
    return 1 if step == 1 else NO_EQUIVALENT


def mlp_only_as_first_k_dense(layers):
    """Qwen MoE mlp_only_layers -> MoESpec.first_k_dense: [] is 0; [0, ..., k-1] is k; any other list has none."""
    return len(layers) if list(layers) == list(range(len(layers))) else NO_EQUIVALENT


def dropout_on(p):
    """attention_dropout (a probability) -> ModelSpec.dropout (dropout layers at all)."""
    return p != 0.0


# (zoo field path, config.json key, the config value as the zoo field reads it): every model type.
# The key is looked up in `text_config` where the config has one (Gemma 3, Llama 4: the zoo entry is
# the text model), else at the top level.
FIELDS = (
    ("num_layers", "num_hidden_layers", same),
    ("hidden_size", "hidden_size", same),
    ("num_attention_heads", "num_attention_heads", same),
    ("kv_heads", "num_key_value_heads", same),
    ("dhead", "head_dim", same),
    ("vocab_size", "vocab_size", same),
    ("tied_embeddings", "tie_word_embeddings", same),
    ("rope_theta", "rope_theta", float),
    ("rope_scaling", "rope_scaling", rope_type),
    ("mtp_layers", "num_nextn_predict_layers", same),
)

_DENSE = (("ffn_hidden_size", "intermediate_size", same),)
# LlamaConfig attention_bias: biases on q/k/v/o; mlp_bias: on gate/up/down (ModelSpec.linear_bias: on all of them)
_BIASES = (("linear_bias", "attention_bias", same), ("linear_bias", "mlp_bias", same))
_DROPOUT = (("dropout", "attention_dropout", dropout_on),)
_DEEPSEEK = (
    ("ffn_hidden_size", "intermediate_size", same),
    ("moe.num_experts", "n_routed_experts", same),
    ("moe.top_k", "num_experts_per_tok", same),
    ("moe.expert_ffn_hidden_size", "moe_intermediate_size", same),
    ("moe.num_shared_experts", "n_shared_experts", same),
    ("moe.first_k_dense", "first_k_dense_replace", same),
    ("moe.layer_freq", "moe_layer_freq", same),
    ("moe.router", "scoring_func", same),
    ("moe.expert_groups", "n_group", one_group_is_no_limit),
    ("moe.groups_per_token", "topk_group", one_group_is_no_limit),  # Kimi K2: n_group 1, topk_group 1
    ("mla.q_lora_rank", "q_lora_rank", same),
    ("mla.kv_lora_rank", "kv_lora_rank", same),
    ("mla.qk_rope_head_dim", "qk_rope_head_dim", same),
    ("mla.qk_nope_head_dim", "qk_nope_head_dim", same),
    ("mla.v_head_dim", "v_head_dim", same),
    # modeling_deepseek.py MoEGate: e_score_correction_bias exists iff topk_method == "noaux_tc"
    ("moe.expert_score_bias", "topk_method", lambda t: t == "noaux_tc"),
) + _BIASES + _DROPOUT
_QWEN_MOE = (
    ("ffn_hidden_size", "intermediate_size", same),
    ("moe.num_experts", "num_experts", same),
    ("moe.top_k", "num_experts_per_tok", same),
    ("moe.expert_ffn_hidden_size", "moe_intermediate_size", same),
    ("moe.layer_freq", "decoder_sparse_step", sparse_step_as_layer_freq),
    ("moe.first_k_dense", "mlp_only_layers", mlp_only_as_first_k_dense),
)

# model_type of the text model -> its own keys (transformers' config class of that type names them)
FAMILY_FIELDS = {
    "llama": _DENSE + _BIASES + _DROPOUT,
    "mistral": _DENSE,
    "gemma3_text": _DENSE,
    "nemotron_h": _DENSE + (("dhead", "attention_head_dim", same),),  # NemotronHConfig attention_head_dim
    "mixtral": _DENSE + _DROPOUT + (("moe.num_experts", "num_local_experts", same),
                                    ("moe.top_k", "num_experts_per_tok", same)),
    "gpt_oss": _DENSE + (("moe.num_experts", "num_local_experts", same), ("moe.top_k", "num_experts_per_tok", same),
                         ("moe.top_k", "experts_per_token", same)),
    "jamba": _DENSE + (("moe.num_experts", "num_experts", same), ("moe.top_k", "num_experts_per_tok", same)),
    "qwen3_moe": _QWEN_MOE + _BIASES[:1] + _DROPOUT,
    "qwen3_next": _QWEN_MOE + (("moe.shared_expert_ffn_hidden_size", "shared_expert_intermediate_size", same),),
    "deepseek_v2": _DEEPSEEK,
    "deepseek_v3": _DEEPSEEK,
    "kimi_k2": _DEEPSEEK,
    # Llama4TextConfig: intermediate_size is one expert's (and the shared expert's) width,
    # intermediate_size_mlp the dense layers' width
    "llama4_text": (("ffn_hidden_size", "intermediate_size_mlp", same),
                    ("moe.expert_ffn_hidden_size", "intermediate_size", same),
                    ("moe.num_experts", "num_local_experts", same),
                    ("moe.top_k", "num_experts_per_tok", same)),
}

# rope_scaling numbers, by the scaling's type
ROPE_PARAMS = {
    "llama3": ("rope_scaling_params", ("factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings")),
    "yarn": ("rope_yarn_params", ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
                                  "mscale_all_dim", "truncate")),
}

# (model_type, key) -> the transformers class default a config that leaves the key out takes
CLASS_DEFAULTS = {
    # LlamaConfig.__init__ rope_theta=10000.0 (transformers models/llama/configuration_llama.py; the Llama 2
    # config.json files predate the key)
    ("llama", "rope_theta"): 10000.0,
    # Gemma3TextConfig.__init__ (transformers models/gemma3/configuration_gemma3.py, commit 008f5c8c, the zoo entry's
    # source): vocab_size=262_208, tie_word_embeddings=True, max_position_embeddings=131_072, rope_theta=1_000_000.0
    ("gemma3_text", "vocab_size"): 262208,
    ("gemma3_text", "tie_word_embeddings"): True,
    ("gemma3_text", "max_position_embeddings"): 131072,
    ("gemma3_text", "rope_theta"): 1000000.0,
    # Llama4TextConfig.__init__ (models/llama4/configuration_llama4.py, commit 008e5743): tie_word_embeddings=False
    # (the abridged Scout / Maverick copies leave it out)
    ("llama4_text", "tie_word_embeddings"): False,
}
# model types whose attention takes head_dim = hidden_size // num_attention_heads when config.json has no head_dim
# (LlamaAttention / MistralAttention / MixtralAttention: getattr(config, "head_dim", hidden_size // num_heads))
HEAD_DIM_FROM_HEADS = {"llama", "mistral", "mixtral"}

# zoo entry -> config.json key its max_seq_len is ("rope_scaling.original_max_position_embeddings": the context
# before the rope scaling's extension), or None: a published training context the config does not state
SEQ_FROM = {
    "deepseek-v2": "rope_scaling.original_max_position_embeddings",  # 4K pre-training (paper sec. 3.1.2)
    "deepseek-v3": "rope_scaling.original_max_position_embeddings",  # 4K pre-training (report sec. 4.2)
    "gemma3-27b": "max_position_embeddings",  # absent: Gemma3TextConfig's default (CLASS_DEFAULTS)
    "gpt-oss-120b": "rope_scaling.original_max_position_embeddings",
    "gpt-oss-20b": "rope_scaling.original_max_position_embeddings",
    "jamba-v0.1": "max_position_embeddings",
    "kimi-k2": "rope_scaling.original_max_position_embeddings",
    "llama2-7b": "max_position_embeddings",
    "llama2-13b": "max_position_embeddings",
    "llama2-70b": "max_position_embeddings",
    "llama3-8b": "rope_scaling.original_max_position_embeddings",  # the 8K pre-training context
    "llama3-70b": "rope_scaling.original_max_position_embeddings",
    "llama3-70b-paper": "rope_scaling.original_max_position_embeddings",
    "llama3-405b": "rope_scaling.original_max_position_embeddings",
    "llama3-405b-paper": "rope_scaling.original_max_position_embeddings",
    "llama3.2-1b": "max_position_embeddings",  # the context it serves; Meta publishes no pre-training length
    "llama3.2-3b": "max_position_embeddings",
    "llama4-maverick": "max_position_embeddings",
    "llama4-scout": "max_position_embeddings",  # 10,485,760 served; 8,192 is RoPE scaling's original, no training length
    "mistral-7b": None,  # paper Table 1 context_len 8192; config.json max_position_embeddings 32768
    "mixtral-8x7b": "max_position_embeddings",
    "mixtral-8x22b": "max_position_embeddings",
    "nemotron-h-56b": "max_position_embeddings",
    "qwen3-235b-a22b": None,  # Qwen3 report sec. 3.2: 4,096-token S1/S2 stages; config.json 40960
    "qwen3-30b-a3b": None,
    "qwen3-next-80b-a3b": "max_position_embeddings",
}

# zoo entry -> {zoo field: why the entry differs from its local copy on purpose}
EXPECTED_DIFFERENCES = {
    "deepseek-v3": {"mtp_layers": "the MTP module is not part of the 671B model (zoo mtp_layers 0); the training "
                                  "recipe trains it (training.mtp_layers 1)"},
    "llama3-8b": {"rope_scaling": "the entry is Llama 3 8B (Meta-Llama-3-8B: rope_scaling null); the local copy is "
                                  "Llama 3.1 8B, whose llama3 scaling came with the 128K stage"},
    "llama3-70b": {"rope_scaling": "the entry is Llama 3 70B (rope_scaling null); the copy is Llama 3.1 70B"},
    "llama3-70b-paper": {"rope_scaling": "as llama3-70b",
                         "vocab_size": "Table 3 prints 128,000; the released checkpoint has 128,256 rows"},
    "llama3-405b-paper": {"vocab_size": "Table 3 prints 128,000; the released checkpoint has 128,256 rows"},
}

# the fields every entry must have compared (a mapping that silently stopped reading would fail here)
CORE = {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_heads", "vocab_size",
        "tied_embeddings", "max_seq_len"}


def _zoo(m, path):
    obj = m
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part)
    return obj


def config_of(folder):
    top = json.loads((ARCH / folder / "config.json").read_text())
    return top, (top["text_config"] if "text_config" in top else top)


def compare(name, m, top, cfg):
    """[(zoo field, zoo value, config value)] for every field the zoo entry and its config.json both carry."""
    mt = cfg["model_type"] if "model_type" in cfg else top["model_type"]
    out = [("hf_model_type", m.hf_model_type, top["model_type"])]
    for path, key, conv in FIELDS + FAMILY_FIELDS[mt]:
        if key in cfg:
            got = conv(cfg[key])
        elif (mt, key) in CLASS_DEFAULTS:
            got = conv(CLASS_DEFAULTS[(mt, key)])
        elif key == "head_dim" and mt in HEAD_DIM_FROM_HEADS:
            got = cfg["hidden_size"] // cfg["num_attention_heads"]
        else:
            continue  # the config does not carry it
        zoo = _zoo(m, path)
        if zoo is None and path != "rope_scaling" and got is not None:
            continue  # the zoo entry does not carry it (rope_scaling null is a statement: plain RoPE)
        out.append((path, zoo, got))
    rs = cfg.get("rope_scaling")
    kind = rope_type(rs)
    if kind in ROPE_PARAMS and m.rope_scaling == kind:
        field, keys = ROPE_PARAMS[kind]
        for k in keys:
            if k in rs:
                out.append((f"{field}.{k}", _zoo(m, f"{field}.{k}"), rs[k]))
    src = SEQ_FROM[name]
    if src == "max_position_embeddings":
        mp = cfg["max_position_embeddings"] if "max_position_embeddings" in cfg else CLASS_DEFAULTS[
            (mt, "max_position_embeddings")]
        out.append(("max_seq_len", m.max_seq_len, mp))
    elif src == "rope_scaling.original_max_position_embeddings":
        out.append(("max_seq_len", m.max_seq_len, rs["original_max_position_embeddings"]))
    return out


def _equal(a, b):
    # bool is an int in Python: keep True from equalling 1
    return a == b and isinstance(a, bool) == isinstance(b, bool)


@pytest.mark.parametrize("name", sorted(COPIES))
def test_zoo_entry_agrees_with_its_config_json(name):
    top, cfg = config_of(COPIES[name])
    rows = compare(name, load_model(name), top, cfg)
    expected = EXPECTED_DIFFERENCES.get(name, {})
    wrong = [(f, z, c) for f, z, c in rows if not _equal(z, c) and f not in expected]
    assert not wrong, (name, wrong)
    stale = [f for f in expected if all(_equal(z, c) for g, z, c in rows if g == f) or f not in {r[0] for r in rows}]
    assert not stale, (name, "differences no longer there", stale)
    compared = {f for f, *_ in rows}
    assert CORE <= compared | ({"max_seq_len"} if SEQ_FROM[name] is None else set()), (name, CORE - compared)


def test_every_zoo_entry_citing_a_config_json_has_a_copy_or_says_why_not():
    """A zoo entry that cites huggingface.co/<org>/<repo>/blob/main/config.json has a local copy (COPIES) or a
    reason in NO_COPY; every copy listed exists."""
    citing = set()
    for p in sorted((Path(__file__).parent.parent / "model_zoo").glob("*.yaml")):
        text = p.read_text()
        if "huggingface.co/" in text and "/blob/main/config.json" in text:
            citing.add(p.stem)
    assert citing == set(COPIES) | set(NO_COPY), (sorted(citing - set(COPIES) - set(NO_COPY)),
                                                  sorted(set(COPIES) - citing))
    for folder in set(COPIES.values()):
        assert (ARCH / folder / "config.json").is_file(), folder
    assert set(SEQ_FROM) == set(COPIES)


def test_deepseek_v3_rotary_numbers_by_hand():
    """The numbers the issue named, read off the copy by hand: rope_theta 10000, YaRN factor 40 over 4096,
    beta_fast 32, beta_slow 1, mscale 1.0 / mscale_all_dim 1.0; MLA ranks 1536 / 512, rope/nope/v head dims
    64 / 128 / 128; 256 routed experts, top-8, 1 shared, 3 dense-first layers, groups 8 / 4."""
    m = load_model("deepseek-v3")
    _, c = config_of("deepseek-v3")
    assert c["rope_theta"] == 10000 and m.rope_theta == 10000.0
    y = m.rope_yarn_params
    assert c["rope_scaling"]["type"] == "yarn" == m.rope_scaling
    assert (y.factor, y.original_max_position_embeddings, y.beta_fast, y.beta_slow, y.mscale, y.mscale_all_dim) == (
        40.0, 4096, 32.0, 1.0, 1.0, 1.0)
    assert (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_rope_head_dim, m.mla.qk_nope_head_dim,
            m.mla.v_head_dim) == (1536, 512, 64, 128, 128)
    assert (m.moe.num_experts, m.moe.top_k, m.moe.num_shared_experts, m.moe.first_k_dense, m.moe.expert_groups,
            m.moe.groups_per_token) == (256, 8, 1, 3, 8, 4)


@pytest.mark.parametrize("name,factor,theta", [("llama3-405b", 8.0, 500000.0), ("llama3-405b-paper", 8.0, 500000.0)])
def test_llama31_rope_scaling_by_hand(name, factor, theta):
    """Llama 3.1 config.json rope_scaling {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"}, rope_theta 500000.0."""
    m = load_model(name)
    p = m.rope_scaling_params
    assert m.rope_scaling == "llama3" and m.rope_theta == theta
    assert (p.factor, p.low_freq_factor, p.high_freq_factor, p.original_max_position_embeddings) == (
        factor, 1.0, 4.0, 8192)


@pytest.mark.parametrize("name,shape,params", [
    # config.json (tests/data/arch/llama-3.2-1b, -3b): layers, hidden, heads, KV heads, head_dim, intermediate
    ("llama3.2-1b", (16, 2048, 32, 8, 64, 8192), 1_235_814_400),
    ("llama3.2-3b", (28, 3072, 24, 8, 128, 8192), 3_212_749_824),
])
def test_llama32_by_hand(name, shape, params):
    """Llama 3.2: tie_word_embeddings true, rope_scaling llama3 with factor 32.0 (Llama 3.1's is 8.0), low 1.0,
    high 4.0 over 8192, rope_theta 500000.0, max_position_embeddings 131072. Parameters by hand: the shared
    128,256 x h embedding counted once, each layer h (h + 2 x 8 x d + h) attention + 3 h 8,192 MLP + 2 h norms,
    a final norm: 1B 262,668,288 + 16 x 60,821,504 + 2,048 = 1,235,814,400 (model card 1.23B); 3B 394,002,432 +
    28 x 100,669,440 + 3,072 = 3,212,749,824 (model card 3.21B)."""
    from planner.params import count_params

    m = load_model(name)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_dim, m.ffn_hidden_size) == shape
    p = m.rope_scaling_params
    assert m.tied_embeddings is True and m.rope_scaling == "llama3" and m.rope_theta == 500000.0
    assert (p.factor, p.low_freq_factor, p.high_freq_factor, p.original_max_position_embeddings) == (
        32.0, 1.0, 4.0, 8192)
    assert m.max_seq_len == 131072 and m.training is None
    layers, h, heads, kv, d, f = shape
    assert layers * (h * (heads * d + 2 * kv * d) + heads * d * h + 3 * h * f + 2 * h) + 128256 * h + h == params
    assert count_params(m).total == params


def test_a_wrong_zoo_number_is_caught():
    """The comparison fails on a changed number: rope_theta, an expert count, a yarn beta, a MLA rank."""
    top, cfg = config_of("deepseek-v3")
    m = load_model("deepseek-v3")
    for path, bad in (("rope_theta", 1e6), ("moe.num_experts", 128), ("rope_yarn_params.beta_fast", 16.0),
                      ("mla.kv_lora_rank", 256)):
        head, _, last = path.rpartition(".")
        part = _zoo(m, head) if head else m
        changed = part.model_copy(update={last: bad})
        m2 = m.model_copy(update={head: changed}) if head else changed
        rows = {f: (z, c) for f, z, c in compare("deepseek-v3", m2, top, cfg)}
        z, c = rows[path]
        assert not _equal(z, c), path
    # and a changed config value: Mixtral's rope_theta
    top, cfg = config_of("mixtral-8x7b-v0.1")
    rows = {f: (z, c) for f, z, c in compare("mixtral-8x7b", load_model("mixtral-8x7b"), top, dict(cfg, rope_theta=1e4))}
    assert rows["rope_theta"] == (1e6, 1e4)


# the copies added for issue 22 (the ten non-uniform ones: tests/test_layer_zoo.py)
ADDED = ("deepseek-v3", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
         "llama3.2-1b", "llama3.2-3b", "mixtral-8x7b", "mixtral-8x22b", "qwen3-235b-a22b", "qwen3-30b-a3b")
# parameters in the released checkpoint, as the zoo entries' "Parameter check" sources cite them
CHECKPOINT_PARAMS = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
                     "llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496, "llama3-405b": 405_853_388_800}


@pytest.mark.parametrize("name", ADDED)
def test_hf_reader_plans_the_zoo_model_from_the_copy(name):
    """planner/hf_config.py on the copy gives the zoo entry's layer list and parameter counts (Llama: the
    safetensors totals the zoo entries cite, e.g. Llama 3.1 405B 405,853,388,800). DeepSeek-V3's copy also
    describes the MTP module (num_nextn_predict_layers 1), which the zoo entry leaves out of the model."""
    from planner.catalog import model_from_hf_config
    from planner.layers import layer_list
    from planner.params import count_params

    p = ARCH / COPIES[name] / "config.json"
    hf, zoo = model_from_hf_config(json.loads(p.read_text()), str(p)), load_model(name)
    a, b = count_params(zoo), count_params(hf)
    assert (a.total, a.active) == (b.total, b.active)
    if name in CHECKPOINT_PARAMS:
        assert b.total == CHECKPOINT_PARAMS[name]
    la, lb = layer_list(zoo), layer_list(hf)
    assert la.kinds == lb.kinds and list(la.index) == list(lb.index)
    assert (a.mtp.total == 0) and ((b.mtp.total > 0) == (name == "deepseek-v3"))
