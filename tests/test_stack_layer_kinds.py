"""Stack field runs.layer_kinds and start-up rule STACK_LAYER_KIND (code 73, issue 22 audit): a stack builds only
the layer kinds its code has, each cited; a model with another is refused (explain exit 2, fit no feasible plan).
Megatron-LM @d98e8a64 builds no Mamba-1 mixer (megatron/core/ssm/mamba_mixer.py runs the Mamba-2 SSD kernel only)
and no chunked attention, so Jamba and Llama 4 on it are refused."""

import pytest
from pydantic import ValidationError

from planner.catalog import list_models, list_stacks, load_model, load_stack
from planner.errors import PlannerError
from planner.plan import resolve
from planner.schema import Job, StackRuns
from planner.startup import CODES, model_layer_features, missing_layer_features, stacks_building

# what each shipped stack builds, read by hand from its code / paper (stack_db <stack> runs.layer_kinds sources)
BUILT = {
    "megatron": {"global", "sliding", "mla", "gated_deltanet", "mamba2", "output_gate", "moe"},
    # megatron's kinds plus Megatron-Bridge @dc805f5cf's Llama4SelfAttention (llama4_utils.py: chunkify)
    "megatron-bridge": {"global", "sliding", "mla", "gated_deltanet", "mamba2", "output_gate", "moe", "chunked"},
    "torchtitan": {"global", "chunked", "sliding", "mla", "moe"},
    "torchtitan-0.3": {"global", "sliding", "mla", "gated_deltanet", "output_gate", "moe"},
    "megatron-deepspeed": {"global", "moe"},
    "megatron-deepspeed-2021": {"global"},  # DeepSpeed a12aaedc has no deepspeed/moe
    "megatron-deepspeed-bigscience": {"global"},  # BigScience's fork @497aa1bf has no --num-experts
    "llm-foundry": {"global", "sliding", "moe"},
    "litgpt-benchmark": {"global", "sliding", "moe"},
    "llama3-meta": {"global"},
    "deepseek": {"global", "mla", "moe"},
}
# the shipped models no shipped stack builds (documented: README rule 73)
RUNS_ON_NONE = {"jamba-v0.1": {"mamba1"}}


def test_every_shipped_stack_carries_layer_kinds_each_cited():
    assert set(list_stacks()) == set(BUILT)
    for name in list_stacks():
        st = load_stack(name)
        assert st.runs is not None and st.runs.layer_kinds is not None, name
        assert {k.kind for k in st.runs.layer_kinds} == BUILT[name], name
        assert all(k.sources and all(s.strip() for s in k.sources) for k in st.runs.layer_kinds), name


def test_no_shipped_stack_builds_mamba1_or_megatron_chunked():
    assert stacks_building("mamba1") == []
    assert stacks_building("chunked") == ["megatron-bridge", "torchtitan"]
    assert stacks_building("mamba2") == ["megatron", "megatron-bridge"]
    assert stacks_building("gated_deltanet") == ["megatron", "megatron-bridge", "torchtitan-0.3"]
    assert set(stacks_building("moe")) == {"megatron", "megatron-bridge", "torchtitan", "torchtitan-0.3", "megatron-deepspeed", "deepseek",
                                           "llm-foundry", "litgpt-benchmark"}


def test_layer_kinds_is_validated():
    runs = load_stack("megatron").runs.model_dump()
    with pytest.raises(ValidationError):
        StackRuns(**{**runs, "layer_kinds": [{"kind": "mamba3", "sources": ["x"]}]})
    with pytest.raises(ValidationError):
        StackRuns(**{**runs, "layer_kinds": [{"kind": "global", "sources": ["x"], "extra": 1}]})
    with pytest.raises(ValidationError):
        StackRuns(**{**runs, "layer_kinds": [{"kind": "global", "sources": []}]})
    with pytest.raises(ValidationError, match="listed twice"):
        StackRuns(**{**runs, "layer_kinds": [{"kind": "global", "sources": ["x"]}, {"kind": "global", "sources": ["y"]}]})


def test_model_layer_features_by_hand():
    """Jamba: 32 layers, attention at i % 8 == 4, MoE at odd i (attn_layer_period 8 offset 4, expert period 2
    offset 1); Llama 4 Scout: 48 layers, NoPE global every 4th ((i + 1) % 4 == 0), chunked the rest, MoE all."""
    j = model_layer_features(load_model("jamba-v0.1"))
    assert j["global"] == [4, 12, 20, 28]
    assert j["mamba1"] == [i for i in range(32) if i % 8 != 4]
    assert j["moe"] == list(range(1, 32, 2))
    s = model_layer_features(load_model("llama4-scout"))
    assert s["global"] == [i for i in range(48) if (i + 1) % 4 == 0] and len(s["chunked"]) == 36
    q = model_layer_features(load_model("qwen3-next-80b-a3b"))
    assert len(q["gated_deltanet"]) == 36 and q["output_gate"] == q["global"] and len(q["global"]) == 12
    assert set(model_layer_features(load_model("deepseek-v3"))) == {"mla", "moe"}
    assert set(model_layer_features(load_model("llama3-8b"))) == {"global"}


@pytest.mark.parametrize("stack", sorted(BUILT))
@pytest.mark.parametrize("model", sorted(list_models()))
def test_missing_features_per_stack_and_model(stack, model):
    m = load_model(model)
    assert set(missing_layer_features(m, load_stack(stack))) == set(model_layer_features(m)) - BUILT[stack]


def test_every_shipped_model_runs_on_a_shipped_stack_or_is_documented():
    stacks = [load_stack(n) for n in list_stacks()]
    for name in list_models():
        m = load_model(name)
        if name in RUNS_ON_NONE:
            assert not any(not missing_layer_features(m, s) for s in stacks)
            assert all(set(missing_layer_features(m, s)) >= RUNS_ON_NONE[name] for s in stacks)
        else:
            assert any(not missing_layer_features(m, s) for s in stacks), name


@pytest.mark.parametrize("model, kind", [("jamba-v0.1", "mamba1"), ("llama4-scout", "chunked")])
def test_megatron_refuses_what_it_does_not_build(model, kind):
    with pytest.raises(PlannerError, match="STACK_LAYER_KIND") as e:
        resolve(Job(model=model, gpus=64, tp=8, ep=8, global_batch=64, hardware="h100-sxm"))
    msg = str(e.value)
    assert f"{kind} layers" in msg and "stack megatron" in msg and "runs.layer_kinds" in msg
    assert ("shipped stacks that build chunked: megatron-bridge, torchtitan" in msg if kind == "chunked"
            else "shipped stacks that build mamba1: none" in msg)
    assert e.value.hint == (f"choose a stack that builds every layer of {model}: megatron-bridge, torchtitan (--stack), "
                            "or another model"
                            if kind == "chunked" else
                            "no shipped stack builds every layer of jamba-v0.1 (mamba1 on none): a stack file of your "
                            "own whose code builds it (runs.layer_kinds, cited), or another model")

def test_torchtitan_refuses_mamba2_and_gated_deltanet():
    for model, kind, others in (("nemotron-h-56b", "mamba2", "megatron, megatron-bridge"),
                                ("qwen3-next-80b-a3b", "gated_deltanet", "megatron, megatron-bridge, torchtitan-0.3")):
        with pytest.raises(PlannerError, match="STACK_LAYER_KIND") as e:
            resolve(Job(model=model, gpus=64, tp=8, global_batch=64, stack="torchtitan", sharding="fsdp"))
        assert f"{kind} layers" in str(e.value) and f"shipped stacks that build {kind}: {others}" in str(e.value)


def test_a_stack_without_layer_kinds_is_not_checked():
    st = load_stack("megatron")
    bare = st.model_copy(update={"runs": st.runs.model_copy(update={"layer_kinds": None})})
    assert missing_layer_features(load_model("jamba-v0.1"), bare) == {}
    assert CODES["STACK_LAYER_KIND"] == 73


def test_a_stack_listing_no_kinds_says_so_and_mamba1_cp_is_assumed(explain, unlisted_stack):
    """On a stack file without runs.layer_kinds Jamba is priced, and explain lists both assumptions: the kinds taken
    as built (in order of first layer: Mamba-1 at 0, MoE at 1, attention at 4), and Mamba-1's context parallelism
    (MAMBA1_CP_STATE_PASSING, which no trainer implements)."""
    from planner.startup import layer_kinds_assumed

    *_, res = explain(model="jamba-v0.1", gpus=8, tp=1, cp=2, pp=1, global_batch=8, seq_len=4096, stack=unlisted_stack)
    lines = res["assumed"]
    assert ("layer kinds: stack megatron-unlisted lists none (runs.layer_kinds): mamba1, moe, global taken as built, "
            "start-up rule STACK_LAYER_KIND not applied") in lines
    assert any(x.startswith("Mamba-1 under cp > 1: no trainer implements") for x in lines)
    # a shipped stack lists its kinds: nothing assumed about them (and Jamba is refused there)
    assert all(layer_kinds_assumed(load_model(m), load_stack(s)) == [] for m in ("llama3-8b", "nemotron-h-56b")
               for s in list_stacks())


def test_fit_says_before_searching_that_the_stack_cannot_train_the_model(cli):
    """fit resolves the job before it searches: Llama 4 Scout on megatron exits 2 with the rule and the hint naming
    torchtitan, and ranks plans on torchtitan."""
    r = cli("fit", "--model", "llama4-scout", "--gpus", "64", "--hardware", "h100-sxm", "--top", "1")
    assert r.exit_code == 2 and "STACK_LAYER_KIND" in r.stderr and "chunked layers (36 of 48" in r.stderr
    assert "choose a stack that builds every layer of llama4-scout: megatron-bridge, torchtitan (--stack)" in r.stderr
    # the rule reads the model and the stack alone (StartupRule.model_level): no plan's degrees quoted (fit has none)
    assert "the model breaks start-up rule STACK_LAYER_KIND" in r.stderr and "the plan (tp" not in r.stderr
    ok = cli("fit", "--model", "llama4-scout", "--gpus", "64", "--hardware", "h100-sxm", "--top", "1", "--stack",
             "torchtitan", "--seq-len", "4096")
    assert ok.exit_code == 0, ok.stderr


def test_check_refuses_jamba_on_every_shipped_stack(cli, tmp_path):
    """check: exit 2 naming the rule and Jamba's Mamba-1 layers, on megatron (the default) and on torchtitan."""
    for stack in ("megatron", "torchtitan"):
        job = tmp_path / f"{stack}.yaml"
        job.write_text(f"model: jamba-v0.1\ngpus: 8\nhardware: h100-sxm\nstack: {stack}\n")
        r = cli("check", str(job))
        assert r.exit_code == 2 and "STACK_LAYER_KIND" in r.stderr, r.stderr
        assert "mamba1 layers (28 of 32: 0-3, 5-11, 13-19, 21-27, 29-31)" in r.stderr and f"stack {stack}," in r.stderr
