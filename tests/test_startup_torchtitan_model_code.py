"""Which torchtitan model code trains the model, and what that code runs (issue 22).

torchtitan @e347b1e5e trains each model with its own code, torchtitan/models/<code>/ (TrainSpec:
parallelize_fn, pipelining_fn), and the codes differ: only deepseek_v3's builds DeepEPMoE
(models/moe/moe.py build_moe, called from models/deepseek_v3/model/model.py l. 358-362); qwen3 and
gpt_oss have no pipelining function (their __init__.py pipelining_fn=None; train.py l. 218-223 raises);
gpt_oss refuses CP (model/args.py l. 89-92) and never applies async TP (infra/parallelize.py l. 95-101);
deepseek_v3's released flavors and llama4's chunked (_irope) ones run FlexAttention, which update_from_config
refuses under CP. The model says its implementation family with an explicit field, hf_model_type (its Hugging
Face config.json model_type); stack_db torchtitan runs.model_codes maps it to a code (never the model's name)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from planner.catalog import load_model, load_stack
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job
from planner.search import fit
from planner.space import SpaceOptions
from planner.startup import CODES, FIXED_CODE_RULES, LATER_RULES, RULES, model_code, model_code_assumed

from conftest import assert_one_error

ROOT = Path(__file__).resolve().parents[1]
ARCH = ROOT / "tests" / "data" / "arch"

# every model_zoo entry's config.json model_type, read by hand from the config each cites (the stored copies
# under tests/data/arch say the same: test_stored_configs_say_the_zoo_model_type); None: no config.json
ZOO_TYPES = {
    "deepseek-v2": "deepseek_v2", "deepseek-v2-lite": "deepseek_v2",
    "deepseek-v3": "deepseek_v3", "gemma3-27b": "gemma3", "gpt-oss-120b": "gpt_oss", "gpt-oss-20b": "gpt_oss",
    "gpt3-175b": None, "jamba-v0.1": "jamba", "kimi-k2": "kimi_k2", "llama2-13b": "llama", "llama2-70b": "llama",
    "llama2-7b": "llama", "llama3-405b-paper": "llama", "llama3-405b": "llama", "llama3-70b-paper": "llama",
    "llama3-70b": "llama", "llama3-8b": "llama", "llama3.2-1b": "llama", "llama3.2-3b": "llama",
    "llama4-maverick": "llama4", "llama4-scout": "llama4",
    "megatron-gpt-1.7b": None, "megatron-gpt-145.6b": None, "megatron-gpt-18.4b": None, "megatron-gpt-1t": None,
    "megatron-gpt-3.6b": None, "megatron-gpt-310.1b": None, "megatron-gpt-39.1b": None, "megatron-gpt-529.6b": None,
    "megatron-gpt-7.5b": None, "megatron-gpt-76.1b": None, "mistral-7b": "mistral", "mixtral-8x22b": "mixtral",
    "mixtral-8x7b": "mixtral", "mpt-13b": None, "mpt-30b": None, "mpt-70b": None, "mpt-7b": None,
    "nemotron-h-56b": "nemotron_h", "qwen3-235b-a22b": "qwen3_moe", "qwen3-30b-a3b": "qwen3_moe",
    "qwen3-next-80b-a3b": "qwen3_next",
}
# model_type -> torchtitan code at e347b1e5e (torchtitan/models/<code>/), by hand; the rest have none
CODE_OF = {"llama": "llama3", "llama4": "llama4", "deepseek_v3": "deepseek_v3", "kimi_k2": "deepseek_v3",
           "qwen3_moe": "qwen3", "gpt_oss": "gpt_oss"}
# what each code runs (torchtitan @e347b1e5e, the sources in stack_db): dispatchers, cp, pp, async TP
RUNS = {"llama3": (None, True, True, True), "llama4": (["alltoall"], False, True, True),
        "deepseek_v3": (["alltoall", "deepep"], False, True, True), "qwen3": (["alltoall"], True, False, True),
        "gpt_oss": (["alltoall"], False, False, False)}

QWEN = dict(model="qwen3-30b-a3b", gpus=64, hardware="h100-sxm", stack="torchtitan", global_batch=512, seq_len=4096,
            tp=1, pp=1, cp=1, sharding="fsdp", ep=8, etp=1)
V3 = dict(model="deepseek-v3", gpus=512, hardware="h100-sxm", stack="torchtitan", global_batch=1024, seq_len=4096,
          tp=1, pp=1, sharding="fsdp", ep=64, etp=1)


def test_every_zoo_entry_says_its_model_type():
    """The catalog walk: every entry is in the table, an entry citing a Hugging Face config.json gives its
    model_type, one citing none gives none (GPT-3 cites GPT-2's config for its vocabulary only)."""
    names = sorted(p.stem for p in (ROOT / "model_zoo").glob("*.yaml"))
    assert names == sorted(ZOO_TYPES)
    for name in names:
        m = load_model(name)
        assert m.hf_model_type == ZOO_TYPES[name], name
        cites = any(re.search(r"huggingface\.co/[^ ]*config\.json", s) for s in m.sources)
        assert cites == (m.hf_model_type is not None) or name == "gpt3-175b", name


def test_stored_configs_say_the_zoo_model_type():
    """The config.json copies under tests/data/arch: their top-level model_type is the zoo entry's, and the
    reader (planner/hf_config.py) carries it into hf_model_type (a wrapper's, not its text_config's)."""
    pairs = {"gemma-3-27b-it": "gemma3-27b", "gpt-oss-120b": "gpt-oss-120b", "gpt-oss-20b": "gpt-oss-20b",
             "jamba-v0.1": "jamba-v0.1", "kimi-k2-instruct": "kimi-k2", "llama-4-maverick-17b-128e-instruct":
             "llama4-maverick", "llama-4-scout-17b-16e-instruct": "llama4-scout", "mistral-7b-v0.1": "mistral-7b",
             "nemotron-h-56b-base-8k": "nemotron-h-56b", "qwen3-next-80b-a3b-thinking": "qwen3-next-80b-a3b"}
    for folder, zoo in pairs.items():
        cfg = json.loads((ARCH / folder / "config.json").read_text())
        assert cfg["model_type"] == ZOO_TYPES[zoo], folder
        assert load_model(str(ARCH / folder / "config.json")).hf_model_type == cfg["model_type"], folder


def test_a_config_without_model_type_reads_none_and_a_bad_one_is_refused(tmp_path):
    cfg = dict(num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=4,
               vocab_size=1000, hidden_act="silu", tie_word_embeddings=False, max_position_embeddings=4096,
               rms_norm_eps=1e-5, rope_theta=10000.0)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert load_model(str(p)).hf_model_type is None
    q = tmp_path / "bad" / "config.json"
    q.parent.mkdir()
    q.write_text(json.dumps({**cfg, "model_type": "Llama-3"}))
    with pytest.raises(PlannerError, match="model_type"):
        load_model(str(q))


def test_the_stack_maps_each_model_type_to_its_code():
    stack = load_stack("torchtitan")
    codes = {c.code: c for c in stack.runs.model_codes}
    assert sorted(codes) == sorted(RUNS)
    for code, (disp, cp, pp, atp) in RUNS.items():
        c = codes[code]
        assert (c.moe_dispatchers, c.context_parallel, c.pipeline_parallel, c.async_tp) == (disp, cp, pp, atp), code
        assert c.sources and all("@e347b1e5e" in s or "config.json" in s for s in c.sources[:1]), code
    for name, mt in ZOO_TYPES.items():
        c = model_code(load_model(name), stack)
        assert (c.code if c else None) == CODE_OF.get(mt), name
        # a model torchtitan has no code for (or with no model_type) is priced, listed as assumed
        assert bool(model_code_assumed(load_model(name), stack)) == (c is None), name
    # the other stacks keep no map: no model-code line
    assert not model_code_assumed(load_model("mixtral-8x7b"), load_stack("megatron"))


def test_the_toml_reader_s_flavors_are_their_code_s():
    """planner/trainers/torchtitan_flavors.py TORCHTITAN_ZOO ([model] name, flavor -> zoo entry): each zoo entry's
    model_type maps to that [model] name."""
    from planner.trainers.torchtitan_flavors import TORCHTITAN_ZOO

    stack = load_stack("torchtitan")
    for (name, _flavor), zoo in TORCHTITAN_ZOO["torchtitan"].items():
        assert model_code(load_model(zoo), stack).code == name


def test_the_rules_are_appended_last():
    """LATER_RULES keeps every earlier code: the four model-code rules follow MEGATRON_NVFP4_TOKENS (64),
    TE's FP8 / MXFP8 row rules (69, 70) and its width rule (71) follow them, and TE's sliding-window
    CP rule (72) follows those, then STACK_LAYER_KIND (73), STACK_SEQUENCE_PARALLEL (74), STACK_RECOMPUTE (75), DEEPSPEED_PP_SPLIT_ENDS (76)
    DEEPSPEED_MOE (77), DEEPSPEED_MOE_SP (78), TORCHTITAN_MTP_PP_CP (79), STACK_SP_NORM_GRADS (80), BRIDGE_CHUNK_CP (81),
    TORCHTITAN_HYBRIDEP (82), STACK_MODE_TP_PP_DP (83), PRECISION_AWARE_MFSDP (84), TORCHTITAN_SEQ_SP_CP (85), TORCHTITAN_VARLEN_CP (86),
    TORCHTITAN_FSDP_SYMM_MEM_SM90 (87), TORCHTITAN_SPMD_TYPECHECK_PP (88), TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX (89) and
    TORCHTITAN_CP_PTRR_MASK (90, ttchecks), MEGATRON_DETERMINISTIC_TP_OVERLAP, _CE_FUSION, _FLASH (91-93, detmode);
    FIXED_CODE_RULES 94-97 after them."""
    assert [r.key for r in LATER_RULES[-3:]] == ["MEGATRON_DETERMINISTIC_TP_OVERLAP", "MEGATRON_DETERMINISTIC_CE_FUSION",
                                                "MEGATRON_DETERMINISTIC_FLASH"]
    assert [CODES[r.key] for r in LATER_RULES[-3:]] == [91, 92, 93]
    assert LATER_RULES[-4].key == "TORCHTITAN_CP_PTRR_MASK" and CODES["TORCHTITAN_CP_PTRR_MASK"] == 90
    keys = ["TORCHTITAN_MODEL_DISPATCHER", "TORCHTITAN_MODEL_PP", "TORCHTITAN_MODEL_CP", "TORCHTITAN_MODEL_ASYNC_TP"]
    # RULES ends with LATER_RULES, then the rules of codes handed out ahead (FIXED_CODE_RULES: 94, 95 muonleft, 96 fuzz99)
    f = len(FIXED_CODE_RULES)
    assert [r.key for r in LATER_RULES[-29:-25]] == keys and [r.key for r in RULES[-29 - f:-25 - f]] == keys
    assert [(c, r.key) for c, r in FIXED_CODE_RULES][:4] == [(94, "MUON_QKV_SPLIT_TP"), (95, "MEGATRON_MLA_FUSION_TP"),
                                                          (96, "MEGATRON_BF16_LAYERS_STAGE"),  # 96: fuzz99
                                                          (97, "TORCHTITAN03_STAGE_LISTS")]
    assert [r.key for r in RULES[-f:]][:4] == ["MUON_QKV_SPLIT_TP", "MEGATRON_MLA_FUSION_TP", "MEGATRON_BF16_LAYERS_STAGE",
                                               "TORCHTITAN03_STAGE_LISTS"]
    assert [r.key for r in RULES[-f:]] == [r.key for _, r in sorted(FIXED_CODE_RULES, key=lambda cr: cr[0])]
    assert [CODES[k] for k in keys] == [65, 66, 67, 68] and CODES["MEGATRON_NVFP4_TOKENS"] == 64
    assert LATER_RULES[-12].key == "TORCHTITAN_HYBRIDEP" and CODES["TORCHTITAN_HYBRIDEP"] == 82
    assert LATER_RULES[-11].key == "STACK_MODE_TP_PP_DP" and CODES["STACK_MODE_TP_PP_DP"] == 83  # bridgefsdp
    assert LATER_RULES[-10].key == "PRECISION_AWARE_MFSDP" and CODES["PRECISION_AWARE_MFSDP"] == 84  # pamfsdp
    assert LATER_RULES[-9].key == "TORCHTITAN_SEQ_SP_CP" and CODES["TORCHTITAN_SEQ_SP_CP"] == 85  # rule85
    assert LATER_RULES[-8].key == "TORCHTITAN_VARLEN_CP" and CODES["TORCHTITAN_VARLEN_CP"] == 86  # varlencp
    assert [r.key for r in LATER_RULES[-7:-4]] == ["TORCHTITAN_FSDP_SYMM_MEM_SM90", "TORCHTITAN_SPMD_TYPECHECK_PP",
                                                 "TORCHTITAN_SPMD_TYPECHECK_SAC_FLEX"]  # rule87: 87, 88, 89
    assert [r.key for r in LATER_RULES[-25:-12]] == ["MEGATRON_FP8_ROWS", "MEGATRON_MXFP8_ROWS", "MEGATRON_FP8_WIDTHS",
                                                 "MEGATRON_CP_SLIDING_WINDOW", "STACK_LAYER_KIND", "STACK_SEQUENCE_PARALLEL",
                                                 "STACK_RECOMPUTE", "DEEPSPEED_PP_SPLIT_ENDS", "DEEPSPEED_MOE",
                                                 "DEEPSPEED_MOE_SP", "TORCHTITAN_MTP_PP_CP",
                                                 "STACK_SP_NORM_GRADS", "BRIDGE_CHUNK_CP"]
    assert CODES["MEGATRON_CP_SLIDING_WINDOW"] == 72 and CODES["STACK_LAYER_KIND"] == 73


def test_qwen3_on_deepep_is_refused_naming_the_rule():
    """qwen3's parallelize never reads expert_parallel_comm_backend: the run would be the standard all-to-all."""
    with pytest.raises(PlannerError) as e:
        resolve(Job(**QWEN, moe_dispatcher="deepep"))
    m = e.value.message
    assert "breaks start-up rule TORCHTITAN_MODEL_DISPATCHER of torchtitan" in m and "@e347b1e5e" in m
    assert "model_type qwen3_moe, torchtitan model code qwen3: dispatchers alltoall" in m
    assert "alltoall" in e.value.hint
    assert resolve(Job(**QWEN, moe_dispatcher="alltoall"))[0].moe_dispatcher == "alltoall"


def test_deepseek_v3_on_deepep_runs():
    settings, plan, _ = resolve(Job(**V3, moe_dispatcher="deepep"))
    assert settings.moe_dispatcher == "deepep" and int(plan.ep) == 64 and settings.code_assumed == ()


@pytest.mark.parametrize("job, rule", [
    ({**QWEN, "pp": 2}, "TORCHTITAN_MODEL_PP"),                                    # pipelining_fn None
    (dict(model="gpt-oss-20b", gpus=64, stack="torchtitan", global_batch=512, seq_len=4096, tp=1, pp=2,
          sharding="fsdp"), "TORCHTITAN_MODEL_PP"),
    (dict(model="gpt-oss-20b", gpus=64, stack="torchtitan", global_batch=512, seq_len=4096, tp=1, cp=2,
          sharding="fsdp"), "TORCHTITAN_MODEL_CP"),                               # 'CP support ... in progress'
    ({**V3, "cp": 2}, "TORCHTITAN_MODEL_CP"),                                      # the 671B flavor's FlexAttention
    (dict(model="llama4-scout", gpus=64, stack="torchtitan", global_batch=512, seq_len=8192, tp=1, cp=2,
          sharding="fsdp"), "TORCHTITAN_MODEL_CP"),                               # the _irope flavors' FlexAttention
    (dict(model="gpt-oss-20b", gpus=64, stack="torchtitan", global_batch=512, seq_len=4096, tp=2, pp=1,
          sharding="fsdp", sequence_parallel=True, tp_comm_overlap=True, torch_compile=True),
     "TORCHTITAN_MODEL_ASYNC_TP"),                                                 # apply_non_moe_tp(enable_async_tp=False)
])
def test_each_code_rule_refuses_its_job(job, rule):
    with pytest.raises(PlannerError) as e:
        resolve(Job(**job))
    assert f"breaks start-up rule {rule} of torchtitan" in e.value.message and "@e347b1e5e" in e.value.message
    assert e.value.hint


@pytest.mark.parametrize("job", [
    {**QWEN, "cp": 2},                                                             # qwen3 applies CP (SDPA)
    dict(model="llama3-8b", gpus=64, stack="torchtitan", global_batch=512, seq_len=8192, tp=1, cp=2, pp=2,
         sharding="fsdp"),
    dict(model="llama3-8b", gpus=64, stack="torchtitan", global_batch=512, seq_len=8192, tp=2, sharding="fsdp",
         sequence_parallel=True, tp_comm_overlap=True, torch_compile=True),
    {**V3, "pp": 2, "moe_dispatcher": "deepep"},
])
def test_what_the_codes_run_is_not_refused(job):
    resolve(Job(**job))


def test_a_model_without_a_code_is_priced_and_says_so():
    """mixtral (no torchtitan code) and Megatron's GPT (no model_type) run what the stack runs, pp and cp
    included, and explain lists the assumption; a model torchtitan has code for lists none."""
    s, _, _ = resolve(Job(model="mixtral-8x7b", gpus=64, stack="torchtitan", global_batch=512, seq_len=4096, tp=1,
                          pp=2, cp=2, sharding="fsdp", ep=8))
    assert len(s.code_assumed) == 1 and "no model code for model_type 'mixtral'" in s.code_assumed[0]
    # a model without a model_type: Megatron's GPT is refused on torchtitan for its layers (learned positions,
    # LayerNorm, plain MLP: rule 73, docs/stack_models.md), so Llama 3 8B's shape with the field left out
    from planner.startup import model_code_assumed
    bare = load_model("llama3-8b").model_copy(update={"hf_model_type": None, "name": "llama-no-type"})
    assert "llama-no-type gives no hf_model_type" in model_code_assumed(bare, load_stack("torchtitan"))[0]
    s, _, _ = resolve(Job(model="mixtral-8x7b", gpus=64, stack="megatron", global_batch=512, seq_len=4096, tp=1,
                          sharding="fsdp", ep=8))
    assert s.code_assumed == ()


def test_explain_and_check_exit_2(cli, tmp_path):
    args = ["--model", "qwen3-30b-a3b", "--gpus", "64", "--stack", "torchtitan", "--global-batch", "512", "--seq-len",
            "4096", "--tp", "1", "--pp", "1", "--ep", "8", "--etp", "1", "--sharding", "fsdp"]
    assert_one_error(cli("explain", *args, "--moe-dispatcher", "deepep"), "TORCHTITAN_MODEL_DISPATCHER",
                     "models/qwen3")
    toml = tmp_path / "job.toml"
    toml.write_text("[training]\nlocal_batch_size = 2\nglobal_batch_size = 512\nseq_len = 4096\n"
                    "[parallelism]\ndata_parallel_shard_degree = 32\npipeline_parallel_degree = 2\n")
    assert_one_error(cli("check", str(toml), "--model", "gpt-oss-20b", "--hardware", "h100-sxm"), "TORCHTITAN_MODEL_PP",
                     "does not support pipelining")
    r = cli("explain", "--model", "mixtral-8x7b", "--gpus", "64", "--stack", "torchtitan", "--ep", "8", "--sharding",
            "fsdp", "--format", "json")
    assert r.exit_code == 0
    assert any("no model code for model_type 'mixtral'" in a for a in json.loads(r.stdout)["assumed"])


def test_fit_searches_what_the_code_runs():
    """qwen3: no deepep (left out of the dispatcher search, named), no pp > 1 (counted reason), cp kept;
    deepseek-v3: deepep searched beside alltoall, pp kept, cp refused."""
    res = fit(Job(**{k: v for k, v in QWEN.items() if k not in ("tp", "pp", "cp", "ep", "etp", "sharding")}),
              opts=SpaceOptions(tp=(1,), pp=(1, 2), cp=(1, 2), ep=(1, 8)), top=200, search_dispatchers=True)
    assert res.rows and not res.counts.dispatchers
    assert [n for n, _ in res.counts.dispatchers_left] == ["deepep"]
    assert "TORCHTITAN_MODEL_DISPATCHER" in res.counts.dispatchers_left[0][1]
    assert {r["plan"]["moe_dispatcher"] for r in res.rows} == {"alltoall"}
    assert {r["plan"]["pp"] for r in res.rows} == {1} and {r["plan"]["cp"] for r in res.rows} == {1, 2}
    assert any("no pipelining function" in x for x in res.counts.reasons)
    res = fit(Job(**{k: v for k, v in V3.items() if k not in ("tp", "pp", "ep", "etp")}),
              opts=SpaceOptions(tp=(1,), pp=(1, 4), cp=(1, 2), ep=(8, 64)), top=400, search_dispatchers=True)
    assert set(res.counts.dispatchers) == {"alltoall", "deepep"}
    assert "deepep" in {r["plan"]["moe_dispatcher"] for r in res.rows}  # (each row: the faster one where it starts)
    assert {r["plan"]["cp"] for r in res.rows} == {1}
    assert any("refuses context parallelism" in x for x in res.counts.reasons)
    assert not any("no pipelining function" in x for x in res.counts.reasons)



# ---------------------------------------------------------------- torchtitan 0.3.0 (stack torchtitan-0.3)
# pytorch/torchtitan release/0.3 @4f9e9a47d, read by hand (the sources in stack_db/torchtitan-0.3.yaml): the codes
# are torchtitan/models/__init__.py _supported_models, no llama4 among them. Every listed code's model_registry
# returns pipelining_fn=pipeline_llm (llama3 l. 387, qwen3 l. 632, gpt_oss l. 407, deepseek_v3 l. 639), calls
# apply_compile (async TP, distributed/compile.py l. 49-52), builds its experts with moe_comm_backend 'standard' by
# default; CP runs under FlexAttention (distributed/context_parallel/api.py l. 56-78) and is refused under varlen
# (l. 103-104), which gpt_oss's 20b / 120b configs run (config_registry.py l. 70-71, 101-102)
CODE_OF_03 = {"llama": "llama3", "deepseek_v3": "deepseek_v3", "kimi_k2": "deepseek_v3", "qwen3_moe": "qwen3",
              "gpt_oss": "gpt_oss"}
RUNS_03 = {"llama3": (None, True, True, True), "deepseek_v3": (None, True, True, True),
           "qwen3": (None, True, True, True), "gpt_oss": (None, False, True, True)}
T03 = "torchtitan-0.3"


def test_0_3_maps_each_model_type_to_its_code():
    stack = load_stack(T03)
    codes = {c.code: c for c in stack.runs.model_codes}
    assert sorted(codes) == sorted(RUNS_03)
    for code, (disp, cp, pp, atp) in RUNS_03.items():
        c = codes[code]
        assert (c.moe_dispatchers, c.context_parallel, c.pipeline_parallel, c.async_tp) == (disp, cp, pp, atp), code
        assert "release/0.3 @4f9e9a47d" in c.sources[0], code
    for name, mt in ZOO_TYPES.items():
        c = model_code(load_model(name), stack)
        assert (c.code if c else None) == CODE_OF_03.get(mt), name
        assert bool(model_code_assumed(load_model(name), stack)) == (c is None), name
    # Llama 4 has a code on main, none on 0.3.0: priced on the stack's runs, listed as assumed
    (line,) = model_code_assumed(load_model("llama4-scout"), stack)
    assert "torchtitan-0.3 has no model code for model_type 'llama4'" in line
    assert "torchtitan-0.3's codes train llama, deepseek_v3, kimi_k2, qwen3, qwen3_moe, gpt_oss" in line


def _on(job, stack):
    return {**job, "stack": stack}


GPT_OSS = dict(model="gpt-oss-20b", gpus=64, global_batch=512, seq_len=4096, tp=1, sharding="fsdp")


@pytest.mark.parametrize("job, rule_on_main", [
    ({**QWEN, "pp": 2}, "TORCHTITAN_MODEL_PP"),                  # main: pipelining_fn None; 0.3.0: pipeline_llm
    ({**GPT_OSS, "pp": 2}, "TORCHTITAN_MODEL_PP"),
    ({**V3, "cp": 2}, "TORCHTITAN_MODEL_CP"),                    # FlexAttention: main refuses CP, 0.3.0 all-gathers K/V
    ({**GPT_OSS, "tp": 2, "sequence_parallel": True, "tp_comm_overlap": True, "torch_compile": True},
     "TORCHTITAN_MODEL_ASYNC_TP"),                               # 0.3.0's gpt_oss goes through apply_compile
])
def test_what_0_3_runs_and_main_refuses(job, rule_on_main):
    with pytest.raises(PlannerError) as e:
        resolve(Job(**_on(job, "torchtitan")))
    assert f"breaks start-up rule {rule_on_main} of torchtitan" in e.value.message
    settings, _, _ = resolve(Job(**_on(job, T03)))
    assert settings.code_assumed == ()


def test_gpt_oss_cp_is_refused_on_both_for_its_own_reason():
    """main: 'CP support for gpt-oss model is still in progress'; 0.3.0: the 20b / 120b configs' varlen
    attention, which apply_cp_to_forward refuses. The refusal names 0.3.0's code and sources."""
    with pytest.raises(PlannerError) as e:
        resolve(Job(**_on({**GPT_OSS, "cp": 2}, T03)))
    m = e.value.message
    assert "breaks start-up rule TORCHTITAN_MODEL_CP of torchtitan" in m
    assert "release/0.3 @4f9e9a47d" in m and "Variable-length attention CP is not yet supported" in m
    assert "model_type gpt_oss, torchtitan-0.3 model code gpt_oss: every dispatcher of the stack; cp no, pp yes, " \
           "async TP yes" in m
    assert e.value.hint == "use cp 1 for this model on torchtitan"


def test_0_3_fit_keeps_pp_for_qwen3_and_drops_cp_for_gpt_oss():
    res = fit(Job(**{k: v for k, v in _on(QWEN, T03).items() if k not in ("pp", "cp")}),
              opts=SpaceOptions(tp=(1,), pp=(1, 2), cp=(1,), ep=(8,)), top=200)
    assert {r["plan"]["pp"] for r in res.rows} == {1, 2}
    assert not any("no pipelining function" in x for x in res.counts.reasons)
    res = fit(Job(**{k: v for k, v in _on(GPT_OSS, T03).items() if k not in ("tp",)}),
              opts=SpaceOptions(tp=(1,), pp=(1,), cp=(1, 2)), top=200)
    assert res.rows and {r["plan"]["cp"] for r in res.rows} == {1}
    assert any("refuses context parallelism" in x for x in res.counts.reasons)
