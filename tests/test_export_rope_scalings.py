"""Issue 22: the Megatron export of each rotary scaling, and the reader's round trip.

Megatron-LM @d98e8a64's command line spells (a) llama3 at its fixed numbers: --use-rope-scaling
(tests/test_export_rope_fp4.py); (b) YaRN without MLA: --position-embedding-type yarn with
--rotary-scaling-factor, --yarn-original-max-position-embeddings, --yarn-beta-fast, --yarn-beta-slow,
--[no-]yarn-correction-range-round-to-int and --mscale / --mscale-all-dim (argument_utils.py l. 384-413), its
attention factor _yarn_get_mscale(factor, mscale) / _yarn_get_mscale(factor, mscale_all_dim), 0.1 ln(factor) + 1 at
the defaults 1, 0 (yarn_rotary_pos_embedding.py l. 275-294);
(c) linear: --rotary-seq-len-interpolation-factor, a whole number (arguments.py l. 2422;
rotary_pos_embedding.py l. 135-136). It has no dynamic-NTK or longrope rotary: those refuse.
The numbers of gpt-oss's YaRN: config.json rope_scaling {factor 32, original 4096, beta_fast 32,
beta_slow 1, truncate false} (tests/data/arch/gpt-oss-*/config.json; Megatron-Bridge's gpt_oss_bridge.py
sets the same: yarn_rotary_scaling_factor 32, yarn_original_max_position_embeddings 4096, beta 32 / 1,
yarn_correction_range_round_to_int False).
"""

from __future__ import annotations

import math

import pytest

from planner.catalog import load_model
from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.schema import ModelSpec
from planner.trainers import write_model_file
from planner.trainers.export import export_plan, plan_signature
from planner.trainers.megatron_model import yarn_concentration

from tests.test_export_rope_fp4 import _read, _row

GPT_OSS = dict(model="gpt-oss-20b", gpus=8, hardware="h100-sxm", stack="megatron", global_batch=256)
GPT_OSS_YARN = (32.0, 4096, 32.0, 1.0, False)  # config.json rope_scaling of both gpt-oss models
ATTN_32 = 0.1 * math.log(32) + 1  # 1.3465735902799727: YaRN's attention factor at factor 32


def _flags(text: str) -> list[str]:
    return text.split()


def _after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_zoo_gpt_oss_states_its_yarn_numbers():
    for name in ("gpt-oss-120b", "gpt-oss-20b"):
        m = load_model(name)
        assert m.rope_yarn_params.key() == GPT_OSS_YARN
        assert m.yarn_rope_scaling == GPT_OSS_YARN + (round(ATTN_32, 12),)
        assert m.llama3_rope_scaling is None and m.linear_rope_scaling is None
    assert yarn_concentration(32.0) == pytest.approx(1.3465735902799727, rel=1e-15)
    assert yarn_concentration(1.0) == 1.0  # _yarn_get_mscale: 1 for a factor <= 1
    # DeepSeek's mscale = mscale_all_dim: the ratio is 1
    assert yarn_concentration(40.0, 1.0, 1.0) == 1.0


def test_yarn_and_linear_numbers_only_with_their_scaling():
    spec = load_model("llama3-70b").model_dump(exclude_none=True)
    with pytest.raises(ValueError, match="rope_yarn_params are a yarn rope_scaling's numbers"):
        ModelSpec.model_validate(dict(spec, rope_yarn_params=dict(factor=32.0, original_max_position_embeddings=4096)))
    with pytest.raises(ValueError, match="rope_linear_factor is a linear rope_scaling's factor"):
        ModelSpec.model_validate(dict(spec, rope_scaling="yarn", rope_linear_factor=8.0))
    # transformers' defaults for what a yarn rope_scaling leaves out: beta_fast 32, beta_slow 1, truncate true
    m = ModelSpec.model_validate(dict(spec, rope_scaling="yarn",
                                      rope_yarn_params=dict(factor=4.0, original_max_position_embeddings=8192)))
    assert m.rope_yarn_params.key() == (4.0, 8192, 32.0, 1.0, True)


def test_megatron_export_writes_gpt_oss_yarn_and_reads_back_the_same_model(tmp_path):
    row = _row(**GPT_OSS)
    text, _ = export_plan(row["plan"], "megatron")
    w = _flags(text)
    assert _after(w, "--position-embedding-type") == "yarn"
    assert (_after(w, "--rotary-scaling-factor"), _after(w, "--yarn-original-max-position-embeddings"),
            _after(w, "--yarn-beta-fast"), _after(w, "--yarn-beta-slow")) == ("32", "4096", "32", "1")
    assert "--no-yarn-correction-range-round-to-int" in w  # truncate false
    assert "--use-rope-scaling" not in w and "--mscale" not in w  # Megatron's --mscale 1, --mscale-all-dim 0
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "oss.sh", gpus=8)
    assert cfg.job["model"] == "gpt-oss-20b"
    assert plan_signature(_row(**cfg.job)["plan"]) == plan_signature(row["plan"])
    assert not [i for i in cfg.ignored + cfg.not_modelled if "yarn" in i or "rotary" in i]
    # a plain-RoPE script is not gpt-oss: the flags' own model, the mismatch named
    plain = text.replace("--position-embedding-type yarn", "--position-embedding-type rope")
    cfg = _read(tmp_path, plain, "megatron", "plain.sh", gpus=8)
    assert cfg.job["model"] != "gpt-oss-20b"
    rule = next(a for a in cfg.assumed if a.startswith("model="))
    assert "(--position-embedding-type rope: no yarn) None contradicts" in rule
    flags_model = load_model(cfg.job["model"])
    assert flags_model.rope_scaling is None and flags_model.rope_attention_factor == 1.0
    # the YaRN flags beside rope build nothing: listed as ignored
    assert any(i.startswith("--rotary-scaling-factor=32") for i in cfg.ignored)


def test_megatron_reader_builds_the_yarn_its_flags_define(tmp_path):
    """Another factor (16) with the round-to-int default: the flags' model carries Megatron's numbers, its
    attention factor 0.1 ln 16 + 1 = 1.2772588722239781, and the defaults it took are listed."""
    row = _row(**GPT_OSS)
    text, _ = export_plan(row["plan"], "megatron")
    other = (text.replace("--rotary-scaling-factor 32", "--rotary-scaling-factor 16")
             .replace(" --yarn-beta-fast 32", "").replace(" --no-yarn-correction-range-round-to-int", ""))
    assert other.count("--rotary-scaling-factor 16") == 1 and "--yarn-beta-fast" not in other
    cfg = _read(tmp_path, other, "megatron", "f16.sh", gpus=8)
    m = load_model(cfg.job["model"])
    assert cfg.job["model"] != "gpt-oss-20b"
    assert m.rope_scaling == "yarn"
    assert m.rope_yarn_params.key() == (16.0, 4096, 32.0, 1.0, True)
    assert m.rope_attention_factor == pytest.approx(1.2772588722239781, rel=1e-15)
    assert any("yarn-beta-fast 32" in a and "yarn correction range rounded" in a for a in cfg.assumed)
    # with --model the model wins, the contradiction listed
    cfg = _read(tmp_path, other, "megatron", "f16.sh", gpus=8, model="gpt-oss-20b")
    assert cfg.job["model"] == "gpt-oss-20b"
    assert any("--model replaces the arguments' shape" in a and "yarn_rope_scaling" in a for a in cfg.assumed)
    with pytest.raises(PlannerError, match="both given"):
        _read(tmp_path, text.replace("--no-yarn-correction-range-round-to-int",
                                     "--no-yarn-correction-range-round-to-int --yarn-correction-range-round-to-int"),
              "megatron", "both.sh", gpus=8)


def _variant(tmp_path, name: str, **changes) -> str:
    spec = load_model("gpt-oss-20b").model_dump(exclude_none=True)
    for k, v in changes.items():
        if v is None:
            spec.pop(k, None)
        else:
            spec[k] = v
    return write_model_file(spec, name)


def test_megatron_export_refuses_yarn_it_cannot_spell(tmp_path):
    unstated = _variant(tmp_path, "oss-yarn-unstated", rope_yarn_params=None)
    with pytest.raises(PlannerError, match=r"rope_scaling yarn \(.*\): its numbers are not stated") as e:
        export_plan(_row(**dict(GPT_OSS, model=unstated))["plan"], "megatron")
    assert "rope_yarn_params" in e.value.hint
    # at a factor <= 1 _yarn_get_mscale is 1 whatever the mscale (yarn_rotary_pos_embedding.py l. 276-277): an
    # attention factor of 1.2 there has no --mscale pair
    yarn1 = dict(load_model("gpt-oss-20b").rope_yarn_params.model_dump(exclude_none=True), factor=1.0)
    off = _variant(tmp_path, "oss-yarn-attn", rope_yarn_params=yarn1, rope_attention_factor=1.2)
    with pytest.raises(PlannerError, match=r"rope_scaling yarn \(.*\): rope_attention_factor 1.2, but Megatron-LM "
                                           r"@d98e8a64's YarnRotaryEmbedding puts _yarn_get_mscale\(factor, --mscale\) / "
                                           r".*1 for a factor <= 1 .*at factor 1 every --mscale pair puts 1 there") as e:
        export_plan(_row(**dict(GPT_OSS, model=off))["plan"], "megatron")
    assert e.value.hint.endswith("the attention factor of its YaRN factor")
    # at factor 1.0001 an attention factor of 1e308 needs m = (1e308 - 1) / (0.1 ln 1.0001) = 1e313: past a float
    yarn_near1 = dict(yarn1, factor=1.0001)
    huge = _variant(tmp_path, "oss-yarn-huge", rope_yarn_params=yarn_near1, rope_attention_factor=1e308)
    with pytest.raises(PlannerError, match=r"rope_attention_factor 1e\+308 at factor 1.0001: no finite --mscale / "
                                           "--mscale-all-dim gives it"):
        export_plan(_row(**dict(GPT_OSS, model=huge))["plan"], "megatron")


def test_megatron_export_writes_a_whole_linear_factor_and_reads_it_back(tmp_path):
    base = dict(rope_scaling="linear", rope_yarn_params=None, rope_attention_factor=1.0)
    lin = _variant(tmp_path, "oss-linear-4", rope_linear_factor=4.0, **base)
    row = _row(**dict(GPT_OSS, model=lin))
    text, _ = export_plan(row["plan"], "megatron")
    w = _flags(text)
    assert _after(w, "--position-embedding-type") == "rope"
    assert _after(w, "--rotary-seq-len-interpolation-factor") == "4"
    assert not [f for f in w if "yarn" in f] and "--use-rope-scaling" not in w
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "lin.sh", gpus=8, model=lin)
    assert not [a for a in cfg.assumed if "--model replaces" in a]  # the shape agrees, scaling included
    assert plan_signature(_row(**cfg.job)["plan"]) == plan_signature(row["plan"])
    # without --model: the flags' own model, linear x4
    cfg = _read(tmp_path, text, "megatron", "lin.sh", gpus=8)
    m = load_model(cfg.job["model"])
    assert (m.rope_scaling, m.rope_linear_factor) == ("linear", 4.0)
    with pytest.raises(PlannerError, match="two rotary scalings"):
        _read(tmp_path, text.replace("--position-embedding-type rope", "--position-embedding-type rope --use-rope-scaling"),
              "megatron", "two.sh", gpus=8)
    frac = _variant(tmp_path, "oss-linear-2.5", rope_linear_factor=2.5, **base)
    with pytest.raises(PlannerError, match=r"factor 2.5\): Megatron-LM @d98e8a64's --rotary-seq-len-interpolation-"
                                           "factor takes a whole number only"):
        export_plan(_row(**dict(GPT_OSS, model=frac))["plan"], "megatron")
    unstated = _variant(tmp_path, "oss-linear-unstated", **base)
    with pytest.raises(PlannerError, match="rope_scaling linear .*its factor is not stated"):
        export_plan(_row(**dict(GPT_OSS, model=unstated))["plan"], "megatron")


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
def test_megatron_export_refuses_dynamic_and_longrope(tmp_path, kind):
    m = _variant(tmp_path, f"oss-{kind}", rope_scaling=kind, rope_yarn_params=None, rope_attention_factor=1.0)
    with pytest.raises(PlannerError, match=f"rope_scaling {kind} .*: Megatron-LM @d98e8a64 has no {kind} rotary scaling"):
        export_plan(_row(**dict(GPT_OSS, model=m))["plan"], "megatron")


def test_megatron_export_cli_refusal_is_error_hint_exit_2(cli, tmp_path):
    m = _variant(tmp_path, "oss-longrope-cli", rope_scaling="longrope", rope_yarn_params=None, rope_attention_factor=1.0)
    r = cli("export", "-m", m, "-g", "8", "--format", "megatron")
    assert r.exit_code == 2
    assert "error: " in r.stderr and "rope_scaling longrope" in r.stderr and "hint: " in r.stderr
    assert "Traceback" not in r.stderr


DSV3_ROW = dict(model="deepseek-v3", gpus=256, tp=1, pp=8, hardware="h100-sxm", stack="megatron", global_batch=512)
# DeepSeek-V3 config.json rope_scaling: factor 40, original 4096, beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1
# (no truncate: true); its cos/sin factor get_mscale(40, 1) / get_mscale(40, 1) = 1
DSV3_MLA_YARN = (40.0, 4096, 32.0, 1.0, True, 1.0, 1.0, 1.0)


def test_mla_yarn_writes_its_factor_and_mscales_and_reads_back_the_same_model(tmp_path):
    """MLA's YaRN: Megatron-LM @d98e8a64 copies --rotary-scaling-factor (default 1.0), --mscale (1.0) and
    --mscale-all-dim (0.0) over MLATransformerConfig's factor 40 and mscales (argument_utils.py l. 301-303), so
    the export writes DeepSeek-V3's 40, 1, 1 (it wrote none: the run trained factor 1); still --rope-type
    yarn by default (no --rope-type, no --position-embedding-type yarn, no --yarn-*)."""
    m = load_model("deepseek-v3")
    assert m.mla_yarn_rope_scaling == DSV3_MLA_YARN and m.rope_attention_factor == 1.0
    row = _row(**DSV3_ROW)
    text, _ = export_plan(row["plan"], "megatron")
    w = _flags(text)
    assert _after(w, "--position-embedding-type") == "rope" and "--rope-type" not in w
    assert (_after(w, "--rotary-scaling-factor"), _after(w, "--mscale"), _after(w, "--mscale-all-dim")) == ("40", "1", "1")
    assert not [f for f in w if "yarn" in f]
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "dsv3.sh", gpus=256)
    assert cfg.job["model"] == "deepseek-v3"
    assert plan_signature(_row(**cfg.job)["plan"]) == plan_signature(row["plan"])
    assert not [i for i in cfg.ignored + cfg.not_modelled if "mscale" in i or "rotary" in i]
    # the script without the factor trains Megatron's 1.0, not DeepSeek-V3's 40: the flags' own model, the mismatch named
    bare = text.replace(" --rotary-scaling-factor 40", "").replace("--rotary-scaling-factor 40", "")
    assert "--rotary-scaling-factor" not in bare
    cfg = _read(tmp_path, bare, "megatron", "bare.sh", gpus=256)
    assert cfg.job["model"] != "deepseek-v3"
    flags_model = load_model(cfg.job["model"])
    assert flags_model.mla_yarn_rope_scaling == (1.0, 4096, 32.0, 1.0, True, 1.0, 1.0, 1.0)
    cfg = _read(tmp_path, bare, "megatron", "bare.sh", gpus=256, model="deepseek-v3")
    assert any("--model replaces the arguments' shape" in a and "mla_yarn_rope_scaling" in a
               and "(1.0, 4096, 32.0, 1.0, True, 1.0, 1.0, 1.0) contradicts" in a and "(40.0, " in a for a in cfg.assumed)



def _mscales(words: list[str]) -> tuple:
    return tuple(_after(words, f) if f in words else None for f in ("--mscale", "--mscale-all-dim"))


def test_yarn_without_mla_writes_the_models_own_mscales(tmp_path):
    """Without MLA, --mscale / --mscale-all-dim reach GPTModel's YarnRotaryEmbedding too (argument_utils.py
    @d98e8a64 l. 411-412 set config.yarn_mscale / yarn_mscale_all_dim, gpt_model.py l. 209-210 pass them), whose
    only use of them is the factor on cos and sin (_yarn_get_concentration_factor, attention.py l. 326). gpt-oss
    with a stated mscale 2, mscale_all_dim 1: at the default attention factor 0.1 ln 32 + 1 (that pair's is
    (0.2 ln 32 + 1) / (0.1 ln 32 + 1) = 1.25737) nothing is written (Megatron's 1, 0 give it); at 1.25737 the
    model's pair is written, and the script reads back as the same model."""
    yarn = dict(load_model("gpt-oss-20b").rope_yarn_params.model_dump(exclude_none=True), mscale=2.0, mscale_all_dim=1.0)
    w = _flags(export_plan(_row(**dict(GPT_OSS, model=_variant(tmp_path, "oss-mscales", rope_yarn_params=yarn)))["plan"],
                           "megatron")[0])
    assert _after(w, "--rotary-scaling-factor") == "32" and _mscales(w) == (None, None)
    own = (0.2 * math.log(32) + 1) / ATTN_32
    assert own == pytest.approx(1.2573744, rel=1e-7) and yarn_concentration(32.0, 2.0, 1.0) == pytest.approx(own, rel=1e-15)
    path = _variant(tmp_path, "oss-mscales-attn", rope_yarn_params=yarn, rope_attention_factor=own)
    row = _row(**dict(GPT_OSS, model=path))
    text, _ = export_plan(row["plan"], "megatron")
    assert _mscales(_flags(text)) == ("2", "1")
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "oss-mscales.sh", gpus=8, model=path)
    assert not [a for a in cfg.assumed if "--model replaces" in a and "yarn" in a]
    cfg = _read(tmp_path, text, "megatron", "oss-mscales.sh", gpus=8)
    back = load_model(cfg.job["model"])
    assert back.yarn_rope_scaling == load_model(path).yarn_rope_scaling == GPT_OSS_YARN + (round(own, 12),)
    assert (back.rope_yarn_params.mscale, back.rope_yarn_params.mscale_all_dim) == (2.0, 1.0)


# a hand-made config.json: a Llama with YaRN factor 4 and DeepSeek-style mscale = mscale_all_dim = 0.707, whose
# attention factor (transformers _compute_yarn_parameters: both stated) is get_mscale(4, 0.707) /
# get_mscale(4, 0.707) = 1, where Megatron's defaults 1, 0 give 0.1 ln 4 + 1 = 1.1386294361119891
YARN_LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=1024, intermediate_size=2816,
                  num_attention_heads=16, num_key_value_heads=8, num_hidden_layers=8, vocab_size=32000,
                  max_position_embeddings=16384, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  hidden_act="silu", rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                                                   "mscale": 0.707, "mscale_all_dim": 0.707})
YARN_LLAMA_ROW = dict(gpus=8, hardware="h100-sxm", stack="megatron", global_batch=64, seq_len=16384)


def _config_json(tmp_path, name: str, rope_scaling: dict) -> str:
    import json

    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(dict(YARN_LLAMA, rope_scaling=rope_scaling)))
    return str(d / "config.json")


def test_config_json_yarn_with_its_own_mscales_exports_and_reads_back(tmp_path):
    """The hand-made YaRN Llama (YARN_LLAMA): refused before (its attention factor 1 is not Megatron's 1.13863 at
    --mscale 1 --mscale-all-dim 0), now written with --mscale 0.707 --mscale-all-dim 0.707, whose factor
    _yarn_get_mscale(4, 0.707) / _yarn_get_mscale(4, 0.707) is 1; the script reads back as the same model."""
    path = _config_json(tmp_path, "yarn-llama", YARN_LLAMA["rope_scaling"])
    m = load_model(path)
    assert m.yarn_rope_scaling == (4.0, 4096, 32.0, 1.0, True, 1.0) and m.mla is None
    assert (m.rope_yarn_params.mscale, m.rope_yarn_params.mscale_all_dim) == (0.707, 0.707)
    assert yarn_concentration(4.0) == pytest.approx(1.1386294361119891, rel=1e-15)
    row = _row(model=path, **YARN_LLAMA_ROW)
    text, _ = export_plan(row["plan"], "megatron")
    w = _flags(text)
    assert _after(w, "--position-embedding-type") == "yarn"
    assert (_after(w, "--rotary-scaling-factor"), _after(w, "--yarn-original-max-position-embeddings")) == ("4", "4096")
    assert _mscales(w) == ("0.707", "0.707") and "--no-yarn-correction-range-round-to-int" not in w
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "yarn-llama.sh", gpus=8, model=path)
    assert not [a for a in cfg.assumed if "--model replaces" in a and "yarn" in a]
    assert not [i for i in cfg.ignored + cfg.not_modelled if "mscale" in i]
    cfg = _read(tmp_path, text, "megatron", "yarn-llama.sh", gpus=8)
    back = load_model(cfg.job["model"])
    assert back.yarn_rope_scaling == m.yarn_rope_scaling and back.rope_attention_factor == 1.0
    assert (back.rope_yarn_params.mscale, back.rope_yarn_params.mscale_all_dim) == (0.707, 0.707)
    assert plan_signature(_row(**dict(cfg.job, seq_len=16384))["plan"]) == plan_signature(row["plan"])
    # the script without the pair trains Megatron's 1.13863: another model, the mismatch named
    bare = text.replace(" --mscale 0.707", "").replace(" --mscale-all-dim 0.707", "")
    assert "--mscale" not in bare
    cfg = _read(tmp_path, bare, "megatron", "bare.sh", gpus=8, model=path)
    assert any("--model replaces the arguments' shape" in a and "yarn_rope_scaling" in a
               and "(4.0, 4096, 32.0, 1.0, True, 1.138629436112) contradicts" in a for a in cfg.assumed)
    # Megatron takes an mscale of 0 (_yarn_get_mscale(4, 0) = 1): the factor 1 / (0.0707 ln 4 + 1) = 0.9107377
    # (0.0707 ln 4 = 0.0980110); a negative one is refused
    zero = load_model(_read(tmp_path, text.replace("--mscale 0.707", "--mscale 0"), "megatron", "zero.sh", gpus=8)
                      .job["model"])
    assert zero.rope_attention_factor == pytest.approx(1 / (0.0707 * math.log(4) + 1), rel=1e-15)
    assert zero.rope_attention_factor == pytest.approx(0.9107377, rel=1e-7)
    with pytest.raises(PlannerError, match="--mscale '-1' is not a number >= 0"):
        _read(tmp_path, text.replace("--mscale 0.707", "--mscale -1"), "megatron", "neg.sh", gpus=8)


@pytest.mark.parametrize("attention,pair,solved", [
    # above 0.1 ln 32 + 1: m = (1.5 - 1) / (0.1 ln 32) = 5 / (5 ln 2) = 1 / ln 2 = 1.4426950408889634, a = 0
    (1.5, ("1.44269504088896", None), 1 / math.log(2)),
    # below it: m = 1, a = ((0.1 ln 32 + 1) / 1.2 - 1) / (0.1 ln 32) = 0.352434986370346...
    (1.2, (None, "0.352434986370346"), (ATTN_32 / 1.2 - 1) / (0.1 * math.log(32))),
])
def test_config_json_attention_factor_alone_gets_the_pair_that_gives_it(tmp_path, attention, pair, solved):
    """A config.json attention_factor with no mscale pair (transformers takes it as stated): the export writes the
    pair whose Megatron factor _yarn_get_mscale(32, m) / _yarn_get_mscale(32, a) is it (at the fewest digits that
    keep it to 1e-15), and the script reads back at that attention factor."""
    rs = {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "attention_factor": attention}
    path = _config_json(tmp_path, f"attn-{attention:g}", rs)
    assert load_model(path).rope_attention_factor == attention
    row = _row(model=path, **YARN_LLAMA_ROW)
    text, _ = export_plan(row["plan"], "megatron")
    m, a = _mscales(_flags(text))
    want = (pair[0] or "1", pair[1] or "0")
    assert (m, a) == want and float(want[0 if pair[0] else 1]) == pytest.approx(solved, rel=1e-14)
    assert yarn_concentration(32.0, float(m), float(a)) == pytest.approx(attention, rel=1e-15)
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", "attn.sh", gpus=8, model=path)
    assert not [x for x in cfg.assumed if "--model replaces" in x and "yarn" in x]


def test_mla_yarn_refuses_what_megatron_cannot_spell(tmp_path):
    """Kimi K2's beta_fast 1 (config.json rope_scaling, tests/data/arch/kimi-k2-instruct) has no Megatron flag:
    MLA keeps MLATransformerConfig's 32 (transformer_config.py l. 3321); unstated numbers and an attention factor
    other than the mscales' also refuse."""
    k2 = load_model("kimi-k2")
    assert k2.mla_yarn_rope_scaling == (32.0, 4096, 1.0, 1.0, True, 1.0, 1.0, 1.0)
    with pytest.raises(PlannerError, match=r"rope_scaling yarn with MLA \(kimi-k2: original_max_position_embeddings "
                                           r"4096, beta_fast 1, beta_slow 1, truncate true\): Megatron-LM @d98e8a64's "
                                           "MLA YaRN has no flag for them"):
        export_plan(_row(**dict(DSV3_ROW, model="kimi-k2"))["plan"], "megatron")
    spec = load_model("deepseek-v3").model_dump(exclude_none=True)
    unstated = write_model_file({k: v for k, v in spec.items() if k != "rope_yarn_params"}, "dsv3-yarn-unstated")
    with pytest.raises(PlannerError, match=r"rope_scaling yarn with MLA \(.*\): its numbers are not stated"):
        export_plan(_row(**dict(DSV3_ROW, model=unstated))["plan"], "megatron")
    # no mscales stated: Megatron's 1 and 0, whose cos/sin factor 0.1 ln 40 + 1 = 1.3688879454113936 the model must have
    no_m = dict(spec, rope_yarn_params={k: v for k, v in spec["rope_yarn_params"].items() if "mscale" not in k})
    with pytest.raises(PlannerError, match=r"rope_attention_factor 1, but .* factor 40, --mscale 1, --mscale-all-dim 0 "
                                           r"puts 1.36889 on cos and sin"):
        export_plan(_row(**dict(DSV3_ROW, model=write_model_file(no_m, "dsv3-no-mscale")))["plan"], "megatron")
    ok = write_model_file(dict(no_m, rope_attention_factor=0.1 * math.log(40) + 1), "dsv3-no-mscale-attn")
    w = _flags(export_plan(_row(**dict(DSV3_ROW, model=ok))["plan"], "megatron")[0])
    assert (_after(w, "--rotary-scaling-factor"), _after(w, "--mscale"), _after(w, "--mscale-all-dim")) == ("40", "1", "0")


def test_hf_config_reads_kimi_k2_mla_yarn():
    """Kimi K2's config.json rope_scaling (tests/data/arch/kimi-k2-instruct) gives the zoo's rope_yarn_params,
    mscale and mscale_all_dim included."""
    import json
    from pathlib import Path

    from planner.hf_config import read

    cfg = json.loads((Path(__file__).parent / "data" / "arch" / "kimi-k2-instruct" / "config.json").read_text())
    data, _ = read(cfg, "config.json")
    assert dict(data["rope_yarn_params"], truncate=True) == load_model("kimi-k2").rope_yarn_params.model_dump(exclude_none=True)
    assert data.get("rope_attention_factor", 1.0) == 1.0
    with pytest.raises(PlannerError, match="mscale_all_dim >= 0"):
        read(dict(cfg, rope_scaling=dict(cfg["rope_scaling"], mscale_all_dim=-1)), "config.json")


def test_gemma3_linear_scaling_of_its_global_layers_is_refused(tmp_path):
    """Gemma 3 scales its global layers' RoPE linearly by 8 (config.json rope_scaling linear; the local layers
    take rope_local_base_freq unscaled), which no Megatron-LM flag says: its entry states no rope_linear_factor
    and the export, once past the post-norms, refuses rather than writing plain RoPE (it used to)."""
    m = load_model("gemma3-27b")
    assert (m.rope_scaling, m.rope_linear_factor, m.linear_rope_scaling) == ("linear", None, "linear, factor not stated")
    spec = m.model_dump(exclude_none=True) | {"post_norms": False}
    path = write_model_file(spec, "gemma3-no-post-norms")
    with pytest.raises(PlannerError, match=r"rope_scaling linear \(.*\): its factor is not stated"):
        export_plan(_row(model=path, gpus=64, tp=2, hardware="h100-sxm", stack="megatron", global_batch=256)["plan"],
                    "megatron")


def test_hf_config_reads_the_yarn_numbers():
    """gpt-oss's config.json rope_scaling gives the zoo's rope_yarn_params; a yarn table without
    original_max_position_embeddings states none (the export then refuses); absent betas and truncate are
    transformers' 32, 1, true."""
    import json
    from pathlib import Path

    from planner.hf_config import read

    arch = Path(__file__).parent / "data" / "arch"
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        cfg = json.loads((arch / name / "config.json").read_text())
        data, _ = read(cfg, "config.json")
        assert ModelSpec.model_validate(dict(load_model(name).model_dump(exclude_none=True),
                                             rope_yarn_params=data["rope_yarn_params"])).yarn_rope_scaling == \
            load_model(name).yarn_rope_scaling
        bare = dict(cfg, rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048})
        assert read(bare, "config.json")[0]["rope_yarn_params"] == dict(factor=8.0, original_max_position_embeddings=2048)
        unstated = dict(cfg, rope_scaling={"rope_type": "yarn", "factor": 8.0})
        assert "rope_yarn_params" not in read(unstated, "config.json")[0]
        with pytest.raises(PlannerError, match="truncate must be true or false"):
            read(dict(cfg, rope_scaling=dict(cfg["rope_scaling"], truncate="no")), "config.json")



# ------------------------------------------------------------------ the rotary base (--rotary-base, rope_theta)


@pytest.mark.parametrize("name,gpus,base", [("gpt-oss-120b", 64, "150000"), ("llama3-8b", 8, "500000")])
def test_megatron_export_writes_the_rotary_base_and_reads_back_the_same_model(tmp_path, name, gpus, base):
    """Megatron-LM @d98e8a64's --rotary-base defaults to 10000 (arguments.py l. 2418): gpt-oss's 150,000
    (config.json rope_theta) and Llama 3's 500,000 (Table 3) are written, read back into rope_theta, and a
    script at the default is not the model (the mismatch named)."""
    assert load_model(name).rope_theta == float(base)
    row = _row(model=name, gpus=gpus, hardware="h100-sxm", stack="megatron", global_batch=256)
    text, _ = export_plan(row["plan"], "megatron")
    assert _after(_flags(text), "--rotary-base") == base
    check_readback(row, "megatron", text)
    cfg = _read(tmp_path, text, "megatron", f"{name}.sh", gpus=gpus)
    assert cfg.job["model"] == name
    assert plan_signature(_row(**cfg.job)["plan"]) == plan_signature(row["plan"])
    assert not [i for i in cfg.ignored + cfg.not_modelled if "rotary-base" in i]
    default = text.replace(f" --rotary-base {base}", "").replace(f"--rotary-base {base}", "")
    assert "--rotary-base" not in default
    cfg = _read(tmp_path, default, "megatron", f"{name}-default.sh", gpus=gpus)
    assert cfg.job["model"] != name and load_model(cfg.job["model"]).rope_theta == 10000.0
    assert any(f"(no --rotary-base: 10000) 10000.0 contradicts --model {name} (rope_theta = {float(base)})" in a
               for a in cfg.assumed)
    assert any("rotary base 10000 (--rotary-base absent)" in a for a in cfg.assumed)
    cfg = _read(tmp_path, default, "megatron", f"{name}-default.sh", gpus=gpus, model=name)
    assert any("--model replaces the arguments' shape" in a and "rope_theta" in a for a in cfg.assumed)


def test_megatron_export_rotary_base_default_and_refusal(tmp_path):
    """DeepSeek-V3's 10,000 is Megatron's default (not written); an unstated base writes nothing; a base that is no
    whole number is refused (argparse type int)."""
    assert load_model("deepseek-v3").rope_theta == 10000.0
    text, _ = export_plan(_row(**DSV3_ROW)["plan"], "megatron")
    assert "--rotary-base" not in text
    unstated = _variant(tmp_path, "oss-theta-unstated", rope_theta=None)
    assert "--rotary-base" not in export_plan(_row(**dict(GPT_OSS, model=unstated))["plan"], "megatron")[0]
    frac = _variant(tmp_path, "oss-theta-frac", rope_theta=12345.5)
    with pytest.raises(PlannerError, match=r"rope_theta 12345.5 \(.*\): Megatron-LM @d98e8a64's --rotary-base takes a "
                                           "whole number only"):
        export_plan(_row(**dict(GPT_OSS, model=frac))["plan"], "megatron")
    spec = load_model("gpt3-175b").model_dump(exclude_none=True)
    with pytest.raises(ValueError, match="rope_theta is a rotary embedding's base"):
        ModelSpec.model_validate(dict(spec, rope_theta=10000.0))


def test_hf_config_reads_rope_theta():
    import json
    from pathlib import Path

    from planner.hf_config import read

    arch = Path(__file__).parent / "data" / "arch"
    for d, name in (("gpt-oss-120b", "gpt-oss-120b"), ("kimi-k2-instruct", "kimi-k2"), ("mistral-7b-v0.1", "mistral-7b"),
                    ("qwen3-next-80b-a3b-thinking", "qwen3-next-80b-a3b")):
        data, _ = read(json.loads((arch / d / "config.json").read_text()), "config.json")
        assert data["rope_theta"] == load_model(name).rope_theta
    cfg = json.loads((arch / "gpt-oss-120b" / "config.json").read_text())
    with pytest.raises(PlannerError, match="rope_theta must be a number > 0"):
        read(dict(cfg, rope_theta=-1), "config.json")
