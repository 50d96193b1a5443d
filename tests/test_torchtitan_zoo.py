"""torchtitan's flavors as models the user names (issue 22): --model torchtitan:<code>/<flavor>.

planner/trainers/torchtitan_flavors.py holds pytorch/torchtitan @e347b1e5e's registries; each flavor is a model
(model_name, flavor_model_file: a generated model YAML, validated like any), `planner models` lists them, a plan of
one exports as that flavor and its TOML reads back, without --model, as the same plan. The refusal of a catalog
model torchtitan builds otherwise names the --model of its nearest flavor, and fit says so in one note line.
torchtitan computes no router auxiliary loss (stack_db runs.router_losses false): a model recipe's
moe_aux_loss_coeff (deepseek-v3's 0.0001, model_zoo deepseek-v3 training) is not taken there.
"""

from __future__ import annotations

import json
import tomllib

import pytest

from planner import recipe
from planner.catalog import load_model, model_source
from planner.errors import PlannerError
from planner.explain import evaluate, to_json
from planner.plan import resolve
from planner.schema import Job
from planner.trainers import load_trainer_config
from planner.trainers.export import export_plan
from planner.trainers.torchtitan_flavors import FLAVOR_ARGS, flavor_spec, model_name

from conftest import assert_one_error

H = dict(hardware="h100-sxm", stack="torchtitan", sharding="fsdp")


def _row(**kw) -> dict:
    settings, plan, _ = resolve(Job(**kw))
    return to_json(settings, plan, evaluate(settings, plan))


def test_every_flavor_is_a_model_by_name():
    for fl in FLAVOR_ARGS:
        name = f"torchtitan:{fl.code}/{fl.flavor}"
        assert model_name(fl) == name
        m = load_model(name)  # the generated YAML, validated as a model file
        assert m == flavor_spec(fl)
        assert m.sources == [f"pytorch/torchtitan @e347b1e5e torchtitan/models/{fl.code}/__init__.py "
                             f"{ {'llama3': 'llama3_args', 'llama4': 'llama4_args', 'qwen3': 'qwen3_args', 'deepseek_v3': 'deepseekv3_args', 'gpt_oss': 'gptoss_configs'}[fl.code]} "
                             f"{fl.flavor!r} ({fl.lines})"]
    assert model_source("torchtitan:qwen3/30B-A3B").suffix == ".yaml"
    # Qwen3-30B-A3B as torchtitan builds it: the catalog entry's shape plus the expert score bias
    m = load_model("torchtitan:qwen3/30B-A3B")
    assert (m.num_layers, m.hidden_size, m.moe.num_experts, m.moe.top_k, m.moe.expert_ffn_hidden_size,
            m.moe.expert_score_bias, m.hf_model_type) == (48, 2048, 128, 8, 768, True, "qwen3_moe")


def test_an_unknown_flavor_is_bad_input(cli):
    with pytest.raises(PlannerError, match="no flavor '30B' of code 'qwen3'") as e:
        load_model("torchtitan:qwen3/30B")
    assert "torchtitan:qwen3/30B-A3B" in e.value.hint
    r = cli("explain", "--model", "torchtitan:qwen9/8B", "--gpus", "8")
    assert_one_error(r, "unknown model 'torchtitan:qwen9/8B'", "name a model code (llama3, llama4, qwen3, deepseek_v3, gpt_oss)")


def test_a_job_file_names_a_flavor(cli, tmp_path):
    """A job file's model is resolved beside the file where it looks like a path; a flavor's name is a name."""
    job = tmp_path / "j.yaml"
    job.write_text("model: torchtitan:qwen3/30B-A3B\ngpus: 16\nstack: torchtitan\nsharding: fsdp\nep: 8\nglobal_batch: 64\n")
    r = cli("check", str(job), "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    assert json.loads(r.stdout)[0]["plan"]["model"] == "torchtitan:qwen3/30B-A3B"


def test_planner_models_lists_them_with_their_source(cli):
    r = cli("models", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert len([n for n in rows if n.startswith("torchtitan:")]) == len(FLAVOR_ARGS) == 32
    q = rows["torchtitan:qwen3/30B-A3B"]
    assert q["source"] == "pytorch/torchtitan @e347b1e5e torchtitan/models/qwen3/__init__.py qwen3_args '30B-A3B' (l. 145-167)"
    assert (q["layers"], q["experts"]) == (48, "128 top-8")
    assert rows["qwen3-30b-a3b"]["source"] == "model_zoo/qwen3-30b-a3b.yaml"


# one flavor per code, by its new name; the kernel its attn_type runs (sdpa: the stack's flash2; flex: flex)
ROUND_TRIPS = [
    ("llama3", "8B_flex", dict(gpus=16, tp=2, pp=2, global_batch=64, attention_kernel="flex")),
    ("llama4", "17bx16e_irope", dict(gpus=64, tp=4, pp=4, ep=4, global_batch=64, attention_kernel="flex")),
    ("qwen3", "30B-A3B", dict(gpus=16, tp=1, pp=1, ep=8, global_batch=64)),
    ("deepseek_v3", "16B", dict(gpus=32, tp=1, pp=2, ep=8, global_batch=64, attention_kernel="flex")),
    ("gpt_oss", "20b", dict(gpus=16, tp=2, pp=1, ep=8, global_batch=64, attention_kernel="flex")),
]


@pytest.mark.parametrize("code, flavor, kw", ROUND_TRIPS, ids=[c for c, _, _ in ROUND_TRIPS])
def test_a_flavor_exports_as_itself_and_reads_back_alone(tmp_path, code, flavor, kw):
    name = f"torchtitan:{code}/{flavor}"
    row = _row(model=name, **H, **kw)
    text, _ = export_plan(row["plan"], "torchtitan")
    d = tomllib.loads(text)
    assert (d["model"]["name"], d["model"]["flavor"]) == (code, flavor)
    p = tmp_path / "x.toml"
    p.write_text(text)
    cfg = load_trainer_config(p, gpus=kw["gpus"], hardware="h100-sxm")  # no --model: the flavor names it
    want = "llama3-8b" if code == "llama3" else name  # 8B_flex has llama3-8b's priced shape (TORCHTITAN_ZOO)
    assert cfg.job["model"] == want
    assert cfg.job.get("attention_kernel") == kw.get("attention_kernel")
    settings, plan, _ = resolve(Job(**cfg.job))  # the TOML's training.seq_len is the plan's
    back = to_json(settings, plan, evaluate(settings, plan))
    assert back["memory"]["total_bytes"] == row["memory"]["total_bytes"] > 0
    assert back["time"] == row["time"]


def test_fit_export_of_qwen3_30b_a3b_through_the_cli(cli, tmp_path):
    out = tmp_path / "q.toml"
    r = cli("fit", "--model", "torchtitan:qwen3/30B-A3B", "--gpus", "16", "--ep", "8", "--global-batch", "64",
            "--hardware", "h100-sxm", "--stack", "torchtitan", "--top", "1", "--export", "torchtitan", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert 'name = "qwen3"\nflavor = "30B-A3B"' in out.read_text()


def test_the_refusal_names_the_flavor_to_plan():
    """gpt-oss-20b: torchtitan's 20b flavor adds the expert score bias; it runs attn_type flex."""
    row = _row(model="gpt-oss-20b", gpus=16, tp=2, ep=8, global_batch=64, attention_kernel="flex", **H)
    with pytest.raises(PlannerError) as e:
        export_plan(row["plan"], "torchtitan")
    assert e.value.hint.startswith("plan --model torchtitan:gpt_oss/20b --attention-kernel flex (the nearest flavor as "
                                   "torchtitan builds it; its attn_type 'flex' is priced with --attention-kernel flex), "
                                   "then export")
    # Llama 4 Scout's nearest is the _irope flavor: its layers are Scout's kinds (one NoPE in four), placed otherwise
    row = _row(model="llama4-scout", gpus=64, tp=4, pp=4, ep=4, global_batch=64, attention_kernel="flex", **H)
    with pytest.raises(PlannerError) as e:
        export_plan(row["plan"], "torchtitan")
    assert e.value.hint.startswith("plan --model torchtitan:llama4/17bx16e_irope --attention-kernel flex")


def test_fit_notes_torchtitans_own_flavor(cli):
    r = cli("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--global-batch", "64",
            "--hardware", "h100-sxm", "--stack", "torchtitan", "--top", "1")
    assert r.exit_code == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "builds its own" in ln]
    assert lines == ["note: qwen3-30b-a3b: torchtitan @e347b1e5e builds its own qwen3 30B-A3B flavor, which differs "
                     "(flavor / model: layers 0-47: mlp.router_bias 1 / 0, mlp.score_bias True / False): these rows "
                     "price qwen3-30b-a3b as given, and --export torchtitan refuses them; --model "
                     "torchtitan:qwen3/30B-A3B plans what torchtitan builds"]
    r = cli("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--global-batch", "64",
            "--hardware", "h100-sxm", "--top", "1")  # megatron: its own model, no such note
    assert r.exit_code == 0 and "builds its own" not in r.stderr
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "torchtitan", "--top", "1")  # a flavor of its shape
    assert r.exit_code == 0 and "builds its own" not in r.stderr


def test_the_recipes_aux_loss_is_not_taken_where_the_stack_computes_none():
    """model_zoo deepseek-v3 training.moe_aux_loss_coeff 0.0001 (arXiv:2412.19437's sequence-wise balance loss):
    taken on megatron; on torchtitan (runs.router_losses false) not, with the reason."""
    base = {"model": "deepseek-v3", "gpus": 256, "hardware": "h100-sxm"}
    data, notes = recipe.apply({**base, "stack": "megatron"})
    assert data["moe_aux_loss_coeff"] == 0.0001
    data, notes = recipe.apply({**base, "stack": "torchtitan"})
    assert "moe_aux_loss_coeff" not in data
    assert ("moe_aux_loss_coeff 0.0001 not taken: stack torchtitan computes no auxiliary loss on the router "
            "(stack_db runs.router_losses)") in notes
    data, _ = recipe.apply({**base, "stack": "torchtitan-0.3"})
    assert "moe_aux_loss_coeff" not in data
    # so the recipe's plan exports: deepseek-v3 on torchtitan is the 671B flavor
    row = _row(model="deepseek-v3", gpus=256, tp=1, pp=8, ep=32, global_batch=256, attention_kernel="flex", **H)
    assert not row["plan"].get("moe_aux_loss_coeff")
    text, _ = export_plan(row["plan"], "torchtitan")
    assert 'name = "deepseek_v3"\nflavor = "671B"' in text
