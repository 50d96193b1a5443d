"""torchtitan exports name the model torchtitan builds (issue 22): planner/trainers/torchtitan_flavors.py.

The flavors are pytorch/torchtitan @e347b1e5e's registries (torchtitan/models/<code>/__init__.py), copied
argument for argument; each is a planner model compared field by field with the zoo. The hand-derived
figures below are from those files:
  llama3 8B: FeedForward hidden = 1024 * ceil(int(1.3 * int(2 * 4 * 4096 / 3)) / 1024)
             = 1024 * ceil(int(1.3 * 10922) / 1024) = 1024 * ceil(14198 / 1024) = 14336
  llama4 17bx16e: dense FeedForward int(1.2 * int(2 * 20480 / 3)) = int(1.2 * 13653) = 16383 -> 16384 (2048s);
             expert int(16383 / (top_k 1 + shared 1)) = 8191 -> 8192; NoPE on layer_id % 4 == 0
  deepseek_v3 671B: 61 layers, 3 dense (n_dense_layers), 256 experts of 2048, 1 shared, top 8 of 8 groups / 4
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from planner.catalog import list_models, load_model
from planner.cli.export import check_readback
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers.torchtitan_flavors import (FLAVOR_ARGS, FLAVORS, TORCHTITAN_03, TORCHTITAN_ZOO, flavor_spec, matching,
                                                 shape_differences)

from conftest import assert_one_error

DATA = Path(__file__).parent / "data" / "torchtitan_flavors"
QWEN_TT = str(DATA / "qwen3-30b-a3b-torchtitan.yaml")
GPTOSS_TT = str(DATA / "gpt-oss-20b-torchtitan.yaml")
SCOUT_TT = str(DATA / "llama4-scout-torchtitan.yaml")

# every ModelSpec field the comparison must see, as attribute paths (a dotted path into moe / mla)
FIELDS = ("hidden_size", "num_layers", "num_attention_heads", "kv_heads", "dhead", "vocab_size", "tied_embeddings",
          "gated_mlp", "norm", "linear_bias", "qk_norm", "activation_clamp", "position_embedding", "rope_theta",
          "rope_scaling", "llama3_rope_scaling", "yarn_rope_scaling", "rope_attention_factor", "layer_windows",
          "mtp_layers", "moe.num_experts", "moe.top_k", "moe.num_shared_experts", "moe.first_k_dense",
          "moe.layer_freq", "moe.router", "moe.expert_score_bias", "moe.router_linear_bias", "moe.expert_groups",
          "moe.groups_per_token", "mla.q_lora_rank", "mla.kv_lora_rank", "mla.qk_rope_head_dim",
          "mla.qk_nope_head_dim", "mla.v_head_dim")


def _attr(m, path):
    for p in path.split("."):
        m = getattr(m, p, None) if m is not None else None
    return m


def _expert_width(m):
    return (m.moe.expert_ffn_hidden_size or m.ffn_hidden_size) if m.moe is not None else None


# the costless differences the table keeps (noted at export and read-back): torchtitan's llama3 flavors always
# apply Llama 3.1's RoPE scaling (models/llama3/model/args.py RoPEScalingArgs), the Llama 3 entries state none
COSTLESS = {("llama3", f): {"rope_scaling", "llama3_rope_scaling"} for f in ("8B", "8B_flex", "8B_varlen", "70B")}


@pytest.mark.parametrize("key", sorted(TORCHTITAN_ZOO["torchtitan"]))
def test_each_table_entry_is_its_zoo_entry_field_by_field(key):
    fl, zoo = FLAVORS[key], load_model(TORCHTITAN_ZOO["torchtitan"][key])
    mine = flavor_spec(fl)
    skip = COSTLESS.get(key, set())
    for f in FIELDS:
        if f not in skip:
            assert _attr(mine, f) == _attr(zoo, f), (key, f, _attr(mine, f), _attr(zoo, f))
    assert _expert_width(mine) == _expert_width(zoo)
    if zoo.moe is None or zoo.moe.first_k_dense:  # the dense layers' width
        assert mine.ffn_hidden_size == zoo.ffn_hidden_size
    assert shape_differences(fl, zoo)[0] == []  # the layers, resolved, agree too


def test_the_hand_derived_shapes():
    l8 = flavor_spec(FLAVORS[("llama3", "8B")])
    assert (l8.ffn_hidden_size, l8.kv_heads, l8.vocab_size) == (14336, 8, 128256)
    s = flavor_spec(FLAVORS[("llama4", "17bx16e_irope")])
    assert (s.ffn_hidden_size, s.moe.expert_ffn_hidden_size, s.moe.num_shared_experts, s.moe.top_k) == (16384, 8192, 1, 1)
    assert s.layer_pattern[0] != s.layer_pattern[3] and s.layer_kinds[s.layer_pattern[0]].mixer.position == "nope"
    m = flavor_spec(FLAVORS[("llama4", "17bx128e")])  # interleave_moe_layer_step 2: MoE on layers 1, 3, ...
    assert [s.layer_kinds[n].mlp.kind for n in m.layer_pattern for s in [m]] == ["dense", "moe"]
    v3 = flavor_spec(FLAVORS[("deepseek_v3", "671B")])
    assert (v3.moe.first_k_dense, v3.moe.num_experts, v3.moe.expert_ffn_hidden_size, v3.moe.expert_groups,
            v3.moe.groups_per_token, v3.mla.q_lora_rank) == (3, 256, 2048, 8, 4, 1536)
    assert flavor_spec(FLAVORS[("deepseek_v3", "16B")]).mla.q_lora_rank is None  # q_lora_rank 0: no query latent


def test_no_other_flavor_is_a_zoo_entry():
    """Completeness: every (flavor, zoo entry) pair of equal priced shape is in the table, and only those."""
    zoo = {n: load_model(n) for n in list_models()}
    found = {(fl.code, fl.flavor): n for fl in FLAVOR_ARGS for n, m in zoo.items() if not shape_differences(fl, m)[0]}
    assert found == TORCHTITAN_ZOO["torchtitan"]


def test_the_flavors_that_differ_and_why():
    """What keeps the other released flavors from their zoo entries, pinned: torchtitan's expert bias
    (MoEArgs load_balance_coeff 1e-3) and llama4's NoPE layer placement; 235B-A22B's rope_theta costs nothing."""
    assert shape_differences(FLAVORS[("qwen3", "30B-A3B")], load_model("qwen3-30b-a3b")) == (
        ["layers 0-47: mlp.router_bias 1 / 0, mlp.score_bias True / False"], [])
    assert shape_differences(FLAVORS[("gpt_oss", "120b")], load_model("gpt-oss-120b"))[0] == [
        "layers 0-35: mlp.router_bias 2 / 1, mlp.score_bias True / False"]
    pr, cl = shape_differences(FLAVORS[("qwen3", "235B-A22B")], load_model("qwen3-235b-a22b"))
    assert pr == ["layers 0-93: mlp.router_bias 1 / 0, mlp.score_bias True / False"]
    assert cl == ["rope_theta 5000000.0 / 1000000.0"]
    pr, _ = shape_differences(FLAVORS[("llama4", "17bx16e_irope")], load_model("llama4-scout"))
    assert pr[0] == "layer 0: mixer.rope False / True, mixer.chunk None / 8192, mlp.router_bias 1 / 0, mlp.score_bias True / False"
    for path, key in ((QWEN_TT, ("qwen3", "30B-A3B")), (GPTOSS_TT, ("gpt_oss", "20b")),
                      (SCOUT_TT, ("llama4", "17bx16e_irope"))):
        assert [(f.code, f.flavor) for f in matching(load_model(path))] == [key]


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(**kw))
    return to_json(settings, plan, evaluate(settings, plan))


H = dict(hardware="h100-sxm", stack="torchtitan", sharding="fsdp")
ROUND_TRIPS = [  # one plan per code (the codes' limits: stack_db torchtitan runs.model_codes)
    ("llama3-8b", dict(gpus=16, tp=2, pp=2, global_batch=64), ("llama3", "8B")),
    ("deepseek-v3", dict(gpus=256, tp=1, pp=8, ep=32, global_batch=256, attention_kernel="flex",
                         moe_aux_loss_coeff=0.0, precision="bf16"), ("deepseek_v3", "671B")),
    (QWEN_TT, dict(gpus=16, tp=1, pp=1, ep=8, global_batch=64), ("qwen3", "30B-A3B")),
    (GPTOSS_TT, dict(gpus=16, tp=2, pp=1, ep=8, global_batch=64, attention_kernel="flex"), ("gpt_oss", "20b")),
    (SCOUT_TT, dict(gpus=64, tp=4, pp=4, ep=4, global_batch=64, attention_kernel="flex"), ("llama4", "17bx16e_irope")),
]


@pytest.mark.parametrize("model, kw, key", ROUND_TRIPS, ids=[k[0] for _, _, k in ROUND_TRIPS])
def test_export_names_the_flavor_and_reads_back(tmp_path, model, kw, key):
    row = _row(model=model, **H, **kw)
    text, notes = export_plan(row["plan"], "torchtitan")
    d = tomllib.loads(text)
    assert (d["model"]["name"], d["model"]["flavor"]) == key
    check_readback(row, "torchtitan", text)  # the same plan and memory, read with --model
    p = tmp_path / "x.toml"
    p.write_text(text)
    zoo = TORCHTITAN_ZOO["torchtitan"].get(key)
    if zoo is not None:  # planner check on the file alone: the flavor names the model
        cfg = load_trainer_config(p, gpus=kw["gpus"], hardware="h100-sxm")
        assert cfg.job["model"] == zoo
        assert cfg.job.get("attention_kernel") == kw.get("attention_kernel")
    else:  # no catalog model of its shape: the flavor itself, by its --model name (torchtitan_flavors.model_name)
        cfg = load_trainer_config(p, gpus=kw["gpus"], hardware="h100-sxm")
        assert cfg.job["model"] == f"torchtitan:{key[0]}/{key[1]}"


def test_deepseek_v3_through_the_cli(cli, tmp_path):
    """planner export writes the 671B flavor; planner check on the file alone prices the same memory."""
    args = ["--model", "deepseek-v3", "--gpus", "256", "--pp", "8", "--ep", "32", "--global-batch", "256",
            "--hardware", "h100-sxm", "--stack", "torchtitan", "--sharding", "fsdp", "--attention-kernel", "flex",
            "--moe-aux-loss-coeff", "0", "--precision", "bf16"]
    r = cli("export", "--format", "torchtitan", *args)
    assert r.exit_code == 0, r.stderr
    assert 'name = "deepseek_v3"\nflavor = "671B"' in r.stdout
    assert "masks attention block_causal" in r.stderr
    assert "applies its YaRN only where training.seq_len exceeds original_seq_len 4096" in r.stderr  # seq_len 4096
    p = tmp_path / "ds.toml"
    p.write_text(r.stdout)
    import json

    a = cli("check", str(p), "--gpus", "256", "--hardware", "h100-sxm", "--format", "json")
    b = cli("explain", *args, "--format", "json")
    assert b.exit_code == 0, b.stderr
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert a.exit_code in (0, 1), a.stderr
    ja = ja[0]
    assert ja["memory"]["total_bytes"] == jb["memory"]["total_bytes"] > 0
    assert ja["time"] == jb["time"]


def test_a_model_without_a_flavor_is_refused(cli):
    r = cli("export", "--format", "torchtitan", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8",
            "--global-batch", "64", "--hardware", "h100-sxm", "--stack", "torchtitan", "--sharding", "fsdp")
    assert_one_error(r, "export torchtitan: model qwen3-30b-a3b: no flavor of torchtitan @e347b1e5e's registries has its "
                        "shape", "the flavors of its code qwen3: debugmodel, 0.6B, 1.7B, 4B, 8B, 14B, 32B, debugmodel_moe, "
                        "30B-A3B, 235B-A22B", "the nearest, 30B-A3B, differs in (flavor / model) layers 0-47: "
                        "mlp.router_bias 1 / 0, mlp.score_bias True / False",
                     "plan --model torchtitan:qwen3/30B-A3B (the nearest flavor as torchtitan builds it; its attn_type "
                     "'sdpa' runs the stack's kernel), then export; or add a flavor of the model's shape to torchtitan's "
                     "registry (torchtitan/models/qwen3/__init__.py)")
    r = cli("fit", "--model", "gpt-oss-20b", "--gpus", "16", "--hardware", "h100-sxm", "--stack", "torchtitan",
            "--export", "torchtitan")
    assert r.exit_code == 2 and "Traceback" not in r.stderr  # fit warns which row it exports first
    assert "error: export torchtitan: model gpt-oss-20b: no flavor" in r.stderr
    assert "its code gpt_oss: debugmodel, 20b, 120b" in r.stderr


def test_the_flavors_attention_kernel_is_the_plans():
    row = _row(model="deepseek-v3", gpus=256, tp=1, pp=8, ep=32, global_batch=256, moe_aux_loss_coeff=0.0, **H)
    with pytest.raises(PlannerError, match="deepseek_v3 671B\\) runs attn_type 'flex', attention kernel flex, but the "
                                           "plan was priced with flash2") as e:
        export_plan(row["plan"], "torchtitan")
    assert e.value.hint == "price it with --attention-kernel flex, then export"
    row = _row(model="llama3-8b", gpus=8, global_batch=64, attention_kernel="flex", **H)
    assert 'flavor = "8B_flex"' in export_plan(row["plan"], "torchtitan")[0]


def test_an_aux_loss_is_refused():
    """DeepSeek-V3's recipe coefficient (model_zoo deepseek-v3 training: 0.0001, which planner.recipe takes on
    every stack): torchtitan has no such loss, so the plan priced is not the run."""
    row = _row(model="deepseek-v3", gpus=256, tp=1, pp=8, ep=32, global_batch=256, attention_kernel="flex",
               moe_aux_loss_coeff=0.0001, **H)
    with pytest.raises(PlannerError, match="moe_aux_loss_coeff 0.0001: torchtitan @e347b1e5e computes no auxiliary"):
        export_plan(row["plan"], "torchtitan")


BODY = "[parallelism]\ndata_parallel_shard_degree = 8\nexpert_parallel_degree = 8\n"


def _toml(tmp_path, name, flavor, body=BODY):
    p = tmp_path / "t.toml"
    p.write_text(f'[model]\nname = "{name}"\nflavor = "{flavor}"\n' + body)
    return p


def test_hand_written_tomls(tmp_path):
    # a flavor of another priced shape than --model: refused, naming the fields
    p = _toml(tmp_path, "qwen3", "30B-A3B")
    with pytest.raises(PlannerError) as e:
        load_trainer_config(p, model="qwen3-30b-a3b", gpus=8)
    assert e.value.message == (f"{p}: [model] qwen3 30B-A3B (torchtitan @e347b1e5e models/qwen3/__init__.py l. 145-167) "
                               "contradicts --model qwen3-30b-a3b (flavor / model): layers 0-47: mlp.router_bias 1 / 0, "
                               "mlp.score_bias True / False")
    # its own shape: read, the code stated
    cfg = load_trainer_config(p, model=QWEN_TT, gpus=8)
    assert cfg.job["model"] == QWEN_TT and "attention_kernel" not in cfg.job
    # no --model and no catalog model of the flavor's shape: the flavor itself (--model torchtitan:qwen3/30B-A3B)
    cfg = load_trainer_config(p, gpus=8)
    assert cfg.job["model"] == "torchtitan:qwen3/30B-A3B"
    assert any("no catalog model has its shape: the flavor as torchtitan builds it" in a for a in cfg.assumed)
    # a flavor the registry does not have: its code's flavors listed
    with pytest.raises(PlannerError) as e:
        load_trainer_config(_toml(tmp_path, "qwen3", "XL"), gpus=8)
    assert "qwen3's flavors: debugmodel, 0.6B" in e.value.hint
    # with --model: noted, priced as the model
    cfg = load_trainer_config(_toml(tmp_path, "qwen3", "XL"), model=QWEN_TT, gpus=8)
    assert any(a.startswith("[model] flavor 'XL': not in torchtitan @e347b1e5e's qwen3 registry") for a in cfg.assumed)
    # a FlexAttention flavor: the kernel read, the mask noted
    cfg = load_trainer_config(_toml(tmp_path, "llama3", "8B_flex", ""), gpus=8)
    assert cfg.job["model"] == "llama3-8b" and cfg.job["attention_kernel"] == "flex"
    assert any("attn_mask_type block_causal" in a for a in cfg.assumed)
    # llama3_ft builds llama3's registry
    cfg = load_trainer_config(_toml(tmp_path, "llama3_ft", "70B", ""), gpus=64)
    assert cfg.job["model"] == "llama3-70b"
    # 235B-A22B with a model of its priced shape: the rotary base noted, not refused
    with pytest.raises(PlannerError, match="contradicts --model qwen3-235b-a22b"):
        load_trainer_config(_toml(tmp_path, "qwen3", "235B-A22B"), model="qwen3-235b-a22b", gpus=8)


@pytest.mark.parametrize("model, module, config", [("llama3-8b", "llama3", "llama3_8b"),
                                                   ("deepseek-v3", "deepseek_v3", "deepseek_v3_671b")])
def test_a_torchtitan_03_plan_is_written_in_0_3_0s_own_spelling(cli, model, module, config):
    """release/0.3 @4f9e9a47d reads no TOML: the export writes the launch line with the config function that
    builds the model (TORCHTITAN_03; trainers/torchtitan03.py), its ChunkedLossWrapper priced (--chunked-loss).
    Every 0.3.0 flavor TORCHTITAN_03 names is a flavor of main's registry: a zoo entry (TORCHTITAN_ZOO) or the
    flavor's own model (torchtitan:<code>/<flavor>, qwen3 / gpt_oss / deepseek_v3 16B)."""
    from planner.trainers.torchtitan_flavors import FLAVORS

    assert set(TORCHTITAN_03) <= set(FLAVORS)
    assert {("llama3", "8B"), ("llama3", "70B"), ("llama3", "405B"), ("deepseek_v3", "671B")} <= (
        set(TORCHTITAN_03) & set(TORCHTITAN_ZOO["torchtitan"]))
    extra = ["--precision", "bf16", "--moe-aux-loss-coeff", "0"] if model != "llama3-8b" else []
    r = cli("export", "--format", "torchtitan", "--model", model, "--gpus", "256", "--ep", "32" if model != "llama3-8b" else "1",
            "--pp", "8", "--global-batch", "256", "--stack", "torchtitan-0.3", "--chunked-loss", *extra)
    assert r.exit_code == 0, r.stderr
    assert f"-m torchtitan.train --module {module} --config {config}" in r.stdout


def test_no_flavor_is_torchtitans_debugmodel_noted(tmp_path):
    """job_config.py @e347b1e5e Model.flavor defaults to "debugmodel": a TOML without one builds the debug model."""
    p = tmp_path / "t.toml"
    p.write_text('[model]\nname = "llama3"\n' + BODY.replace("expert_parallel_degree = 8\n", ""))
    cfg = load_trainer_config(p, model="llama3-8b", gpus=8)
    assert any(a.startswith("[model] flavor unset: torchtitan's default \"debugmodel\" (job_config.py Model.flavor, "
                            "l. 104) builds its llama3 debug model, not --model llama3-8b") for a in cfg.assumed)
