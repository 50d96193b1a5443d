"""A user's stack file (`--stack FILE.yaml`, a job's `stack:`): what the fuzzer's stack kind (tests/fuzzing.py,
seeds stack_db/megatron, torchtitan, megatron-bridge, megatron-deepspeed-2021 and
tests/data/stacks/megatron-no-overlap.yaml) found the reader (planner/catalog.py stack_data, _extend;
planner/schema.py Stack) taking without a word, each now bad input: exit 2, `error:` naming the file and the
field, then `hint:`. And the seed written with `extends:` prices as the megatron entry with the data-parallel
collectives exposed."""

from pathlib import Path

import pytest
import yaml

from conftest import assert_one_error

ROOT = Path(__file__).resolve().parent.parent
NO_OVERLAP = ROOT / "tests" / "data" / "stacks" / "megatron-no-overlap.yaml"


def _write(folder: Path, text: str, name: str = "mine.yaml") -> Path:
    p = folder / name
    p.write_text(text)
    return p


def _explain(cli, stack: Path, *more: str):
    return cli("explain", "--model", "llama3-8b", "--gpus", "8", "--stack", str(stack), *more)


def test_a_file_that_extends_names_itself(tmp_path, cli):
    """Without `name:` the extending file took the base's name: its figures reported as stack megatron's, and a
    calibration profile's run knobs fitted on megatron applied to them (profile.run_knobs matches by name)."""
    p = _write(tmp_path, "extends: megatron\nruns:\n  max_cp: 2\n")
    r = _explain(cli, p)
    assert_one_error(r, f"{p}: extends 'megatron' but gives no `name`", "reported as stack megatron's",
                     "hint: add `name: <this stack's name>`")
    ok = _explain(cli, _write(tmp_path, "extends: megatron\nname: mine\nversion: mine\nruns:\n  max_cp: 2\n", "named.yaml"),
                  "--format", "json")
    assert ok.exit_code == 0, ok.stderr


def test_an_append_key_in_a_file_without_extends(tmp_path, cli):
    """`sources+:` in a whole stack file (no `extends:`) has no base list to append to; it was refused only as an
    unknown field with the hint "did you mean `sources`", which keeps the wrong reading."""
    data = yaml.safe_load((ROOT / "stack_db" / "megatron.yaml").read_text())
    data["runs"]["recompute"]["sources+"] = ["mine"]
    p = _write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    assert_one_error(_explain(cli, p), f"{p}: `runs.recompute.sources+` appends to a base stack's list `sources`, "
                                       "but this file has no `extends:`",
                     "hint: write `sources:` with the whole list, or add `extends: <catalog stack>`")


@pytest.mark.parametrize("text, needle", [
    # megatron's chunked_attention is null: the mapping replaces it, so its `sources+` reached the schema
    ("extends: megatron\nname: x\nversion: mine\nchunked_attention:\n  chunks_every_layer: true\n  sources+: [a]\n",
     "chunked_attention: `sources+` appends to a base stack's list `sources`, but the base stack has no "
     "`chunked_attention` (null or absent) to merge it into"),
    # a list replaces the base's whole: an append inside one of its items appends to nothing
    ("extends: megatron\nname: x\nversion: mine\nruns:\n  sharding:\n    - name: ddp\n      sources+: [a]\n",
     "runs: sharding: `0.sources+` appends to a base stack's list `sources`, but `sharding` replaces the base "
     "stack's whole"),
    # the items an append adds are taken as written
    ("extends: megatron-bridge\nname: x\nversion: mine\nruns:\n  layer_kinds+:\n    - kind: mamba1\n      sources+: [a]\n",
     "runs: layer_kinds+: `0.sources+` appends to a base stack's list `sources`, but the items a list appends are "
     "taken as written"),
])
def test_an_append_key_where_nothing_merges(tmp_path, cli, text, needle):
    p = _write(tmp_path, text)
    assert_one_error(_explain(cli, p), f"{p}: {needle}", "hint: write `sources:` with the whole list")


def test_hierarchical_sizes_are_the_jobs_not_the_stack_files(tmp_path, cli):
    """context_parallel.hierarchical_sizes is set at resolve from the job's --hierarchical-context-parallel-sizes
    (cp_comm_type.apply_cp_comm_type). A stack file that gave [0, -3] was taken as the job's: at cp 2 the error
    blamed Megatron's --hierarchical-context-parallel-sizes, which the job never gave."""
    p = _write(tmp_path, "extends: megatron\nname: x\nversion: mine\ncontext_parallel:\n  hierarchical_sizes: [0, -3]\n")
    assert_one_error(_explain(cli, p, "--cp", "2"),
                     f"{p}: field `context_parallel.hierarchical_sizes`: Value error, hierarchical_sizes is the job's "
                     "(--hierarchical-context-parallel-sizes")
    # the job's own sizes still reach the spec (a2a 2 x p2p 2 = cp 4)
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--cp", "4", "--cp-comm-type", "a2a+p2p",
            "--hierarchical-context-parallel-sizes", "2,2")
    assert r.exit_code == 0, r.stderr


def test_te_loss_bytes_are_not_negative(tmp_path, cli):
    """memory.te_loss_per_logit (bytes per logit Transformer Engine's fused loss holds and moves) had no lower
    bound: [-1000, -1000] was priced, taking 279,445,504 B off llama3-8b's memory at TP 8 on 8 GPUs and 10.5 s
    off its step."""
    p = _write(tmp_path, "extends: megatron\nname: x\nversion: mine\nmemory:\n  te_loss_per_logit: [-1000, -1000]\n")
    assert_one_error(_explain(cli, p, "--tp", "8", "--cross-entropy-fusion", "--cross-entropy-fusion-impl", "te"),
                     f"{p}: field `memory.te_loss_per_logit.0`: Input should be greater than or equal to 0")


def test_the_fuzz_seed_that_extends_megatron(cli):
    """tests/data/stacks/megatron-no-overlap.yaml: megatron with defaults.dp_comm_overlap false (Megatron-LM
    @d98e8a64 --overlap-grad-reduce, default False). The same plan on both: every figure but the data-parallel
    collectives' exposure is megatron's; on megatron part of the DP traffic hides behind the backward, on the
    file's none of it (exposed = the whole)."""
    args = ("explain", "--model", "llama3-8b", "--gpus", "8", "--sharding", "zero1", "--format", "json")
    mine, mega = cli(*args, "--stack", str(NO_OVERLAP)), cli(*args, "--stack", "megatron")
    assert mine.exit_code == 0 and mega.exit_code == 0, (mine.stderr, mega.stderr)
    import json

    a, b = json.loads(mine.stdout), json.loads(mega.stdout)
    assert a["plan"]["dp_comm_overlap"] is False and b["plan"]["dp_comm_overlap"] is True
    assert a["time"]["dp_comm_s"] == b["time"]["dp_comm_s"] > 0
    assert a["time"]["dp_comm_exposed_s"] == a["time"]["dp_comm_s"]
    assert b["time"]["dp_comm_exposed_s"] < b["time"]["dp_comm_s"]
    assert a["memory"]["total_bytes"] == b["memory"]["total_bytes"]


_QWEN_FIT = ("fit", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--global-batch", "64",
             "--hardware", "h100-sxm", "--top", "1")
# tests/test_torchtitan_zoo.py test_fit_notes_torchtitans_own_flavor: the line fit writes on stack torchtitan
_QWEN_NOTE = ("note: qwen3-30b-a3b: torchtitan @e347b1e5e builds its own qwen3 30B-A3B flavor, which differs "
              "(flavor / model: layers 0-47: mlp.router_bias 1 / 0, mlp.score_bias True / False): these rows "
              "price qwen3-30b-a3b as given, and --export torchtitan refuses them; --model "
              "torchtitan:qwen3/30B-A3B plans what torchtitan builds")


def test_the_flavor_note_follows_the_stacks_flavor_registry(tmp_path, cli):
    """fit's note on a model whose torchtitan flavor prices otherwise was asked by the stack's name (`stack.name ==
    "torchtitan"`): a file extending torchtitan under its own name lost it, a file named torchtitan extending megatron
    got it. It follows runs.flavor_registry now (stack_db/torchtitan.yaml, inherited by `extends:`)."""
    def notes(stack):
        r = cli(*_QWEN_FIT, "--stack", str(stack))
        assert r.exit_code == 0, r.stderr
        return [ln for ln in r.stderr.splitlines() if "builds its own" in ln]

    assert notes(_write(tmp_path, "extends: torchtitan\nname: my-titan\nversion: mine\n", "titan.yaml")) == [_QWEN_NOTE]
    assert notes(_write(tmp_path, "extends: megatron\nname: torchtitan\nversion: mine\n", "named.yaml")) == []
    # the field set to null in a file extending torchtitan: no registry, no note
    off = _write(tmp_path, "extends: torchtitan\nname: my-titan\nversion: mine\nruns:\n  flavor_registry: null\n", "off.yaml")
    assert notes(off) == []


def test_a_flavor_registry_needs_model_codes(tmp_path, cli):
    """The flavor is looked up by the model's code (runs.model_codes): a registry without codes would never note."""
    p = _write(tmp_path, "extends: megatron\nname: x\nversion: mine\nruns:\n  flavor_registry: torchtitan\n")
    assert_one_error(_explain(cli, p), f"{p}: field `runs`: Value error, flavor_registry torchtitan without model_codes")
    p = _write(tmp_path, "extends: torchtitan\nname: x\nversion: mine\nruns:\n  flavor_registry: megatron\n", "other.yaml")
    assert_one_error(_explain(cli, p), f"{p}: field `runs.flavor_registry`: Input should be 'torchtitan'")


def test_a_refusal_names_the_users_file_not_stack_db(tmp_path, cli):
    """A plan refused by a user's stack file named it `stack_db megatron-no-overlap runs.layer_kinds`, an entry
    stack_db does not have; a file named like an entry was named as that entry. Now the file (Stack.origin)."""
    r = cli("explain", "--model", "llama4-scout", "--gpus", "64", "--ep", "4", "--stack", str(NO_OVERLAP))
    assert_one_error(r, "llama4-scout's chunked layers (36 of 48: 0-2, 4-6, 8-10, 12-14, 16-18, 20-22, 24-26, 28-30, "
                        "32-34, 36-38, 40-42, 44-46) on stack megatron-no-overlap, whose code builds global, sliding, "
                        f"mla, gated_deltanet, mamba2, output_gate, moe (stack file {NO_OVERLAP} (extends megatron) "
                        "runs.layer_kinds, its sources)")
    assert "stack_db megatron-no-overlap" not in r.stderr
    # a user's file that calls itself megatron is not stack_db's megatron
    p = _write(tmp_path, "extends: megatron\nname: megatron\nversion: mine\nruns:\n  recompute:\n    granularities: [none]\n"
                         "    sources: [mine]\n")
    r = _explain(cli, p, "--recompute", "full")
    assert_one_error(r, f"on stack megatron, whose code has recompute none (stack file {p.resolve()} (extends "
                        "megatron) runs.recompute: mine)")
    assert "(stack_db megatron " not in r.stderr
    # the catalog entry itself is still stack_db's
    r = cli("explain", "--model", "llama4-scout", "--gpus", "64", "--ep", "4", "--stack", "megatron")
    assert r.exit_code == 2 and "(stack_db megatron runs.layer_kinds, its sources)" in r.stderr


def test_a_file_that_extends_gives_its_own_version(tmp_path, cli):
    """`version` left out was inherited: export quotes it as the release the stack's code is ("the plan was priced
    on stack my-titan (runs and start-up rules: torchtitan main @e347b1e5e ...)"), claiming the user's stack is the
    base's release. Now bad input; the base's description (prose about the base) is not inherited either."""
    p = _write(tmp_path, "extends: torchtitan\nname: my-titan\n")
    assert_one_error(_explain(cli, p), f"{p}: extends 'torchtitan' but gives no `version`: the base's would be "
                                       "reported as the release or commit this stack's code is (export quotes it)",
                     "hint: add `version: <the release or commit of the code your stack describes>`")
    from planner.catalog import load_stack

    mine = load_stack(str(_write(tmp_path, "extends: torchtitan\nname: my-titan\nversion: my fork @abc123\n", "v.yaml")))
    assert (mine.version, mine.description) == ("my fork @abc123", "")
    # the shipped entry written with extends, and the fuzz seed, give their own
    bridge, mega = load_stack("megatron-bridge"), load_stack("megatron")
    assert bridge.version.startswith("Megatron-Bridge @dc805f5cf") and bridge.description.startswith("Megatron-Bridge:")
    assert bridge.version != mega.version and bridge.description != mega.description
    assert load_stack(str(NO_OVERLAP)).version == "Megatron-Core 0.20.0 (Megatron-LM @d98e8a64), launched without --overlap-grad-reduce"


TOML_8B = ROOT / "tests" / "data" / "trainer_configs" / "llama3_8b.toml"  # [model] name "llama3", flavor "8B"


def test_a_file_extending_torchtitan_checks_a_tomls_model_name(tmp_path, cli):
    """trainers/torchtitan.py TORCHTITAN_NAME_CODES was looked up by the --stack argument, so a user's file that
    extends torchtitan (same model codes, inherited) read llama3_8b.toml's [model] name "llama3" with no check: a
    --model qwen3-30b-a3b (model_type qwen3_moe, torchtitan's qwen3 code) was priced as the llama3 code torchtitan
    would build. It follows Stack.base now (the entry the file extends): the same refusal as the catalog
    torchtitan, citing the file; a file named torchtitan that extends megatron gets no torchtitan table."""
    from planner.errors import PlannerError
    from planner.trainers import load_trainer_config

    titan = _write(tmp_path, "extends: torchtitan\nname: my-titan\nversion: mine\n", "titan.yaml")
    origin = f"stack file {titan.resolve()} (extends torchtitan)"
    cfg = load_trainer_config(TOML_8B, gpus=8, stack=str(titan))
    assert [a for a in cfg.assumed if a.startswith("model code")] == [
        f"model code llama3: [model] name 'llama3', the code {origin} runs.model_codes gives llama3-8b's model_type 'llama'"]
    for stack, who, where in (("torchtitan", "torchtitan", "stack_db torchtitan"), (str(titan), "my-titan", origin)):
        with pytest.raises(PlannerError) as e:
            load_trainer_config(TOML_8B, model="qwen3-30b-a3b", gpus=8, stack=stack)
        assert e.value.message == (f"{TOML_8B}: [model] name 'llama3' builds torchtitan's llama3 code (model_type llama), "
                                   f"but --model qwen3-30b-a3b is model_type 'qwen3_moe', which {who} trains with its "
                                   f"qwen3 code ({where} runs.model_codes)")
    r = cli("explain", str(TOML_8B), "--model", "qwen3-30b-a3b", "--stack", str(titan))
    assert_one_error(r, "[model] name 'llama3' builds torchtitan's llama3 code", f"({origin} runs.model_codes)")
    named = _write(tmp_path, "extends: megatron\nname: torchtitan\nversion: mine\n", "named.yaml")
    cfg = load_trainer_config(TOML_8B, gpus=8, stack=str(named))
    assert [a for a in cfg.assumed if a.startswith("model code")] == []


@pytest.mark.parametrize("stack, origin", [
    ("megatron", "stack_db megatron"),
    (str(NO_OVERLAP), f"stack file {NO_OVERLAP} (extends megatron)")])
def test_messages_that_cited_stack_db_without_a_stack_name_their_origin(cli, stack, origin):
    """cp_rotate.py's refusal, plan.py's bytes_per_param warning (and the other refusals of plan.py / space.py that
    said '(stack_db runs.X)' with no stack: the sharding / schedule / order / degree refusals, the output-layer,
    kernel-switch, cpu_offload, overlap-switch ones) said 'stack_db memory.cp_ring_backward' / 'stack_db
    runs.bytes_per_param' whatever the stack, a user's file included; now Stack.origin, as the other messages."""
    name = "megatron" if stack == "megatron" else "megatron-no-overlap"
    r = _explain(cli, Path(stack), "--cp", "2", "--cp-rotate-method", "alltoall")
    assert_one_error(r, f"error: cp_rotate_method is set but stack {name}'s context parallelism is not torch's ring "
                        f"attention ({origin} memory.cp_ring_backward)")
    r = _explain(cli, Path(stack), "--bytes-per-param", "pure-bf16")
    assert r.exit_code == 0, r.stderr
    assert (f"warning: bytes_per_param pure-bf16: stack {name} keeps megatron, mixed16, bf16-moments ({origin} "
            "runs.bytes_per_param); priced as asked, but its trainer files cannot say it (export refuses)") in r.stderr


def test_the_export_note_follows_the_trainer_the_stack_extends(tmp_path, cli):
    """export.py's note for a stack written in another's files (export_format) said '{name} itself is driven by
    Python recipes', Megatron-Bridge's wording, for any such stack: a user's file that extends megatron and sets
    export_format megatron was told so too. It follows Stack.base now (export.OWN_DRIVERS): Bridge's recipes for
    stack_db megatron-bridge and a file extending it; a file extending the format's own stack runs its trainer."""
    args = ["export", "--format", "megatron", "--model", "llama3-8b", "--gpus", "8", "--tp", "2"]
    want = cli(*args, "--stack", "megatron").stdout
    recipes = ("is driven by Megatron-Bridge's Python recipes and model providers (a recipe function returns its "
               "ConfigContainer, Megatron-Bridge @dc805f5cf src/megatron/bridge/recipes/), not a file the planner writes")
    bridge = _write(tmp_path, "extends: megatron-bridge\nname: my-bridge\nversion: mine\n", "bridge.yaml")
    meg = _write(tmp_path, "extends: megatron\nname: my-meg\nversion: mine\nexport_format: megatron\n", "meg.yaml")
    for stack, tail in (("megatron-bridge", f"the planner writes no megatron-bridge config: it {recipes}"),
                        (str(bridge), f"the planner writes no my-bridge config: megatron-bridge, which it extends, {recipes}"),
                        (str(meg), "my-meg extends megatron, whose trainer reads the file")):
        r = cli(*args, "--stack", stack)
        assert r.exit_code == 0 and r.stdout == want, r.stderr
        note = [x for x in r.stderr.splitlines() if "written as stack megatron's file" in x]
        assert len(note) == 1 and note[0].endswith(f"every layer of llama3-8b; {tail}"), r.stderr
        assert ("Python recipes" in note[0]) == (stack != str(meg))


@pytest.mark.parametrize("base, entry, needles", [
    ("megatron", "recompute:\n    granularities: [none, partial]",
     ("field `runs.recompute.granularities.1`: Input should be 'none', 'selective' or 'full'",)),
    ("megatron", "attention:\n    cores: [fused]", ("field `runs.attention.cores.0`: Input should be 'flash' or 'eager'",)),
    ("megatron", "half_dtypes:\n    dtypes: [fp8]", ("field `runs.half_dtypes.dtypes.0`: Input should be 'bf16' or 'fp16'",)),
    ("megatron", "optimizers:\n    optimizers: [adam, sgd]",
     ("field `runs.optimizers.optimizers.1`: Input should be 'adam' or 'muon'",)),
    ("torchtitan-0.3", "spmd_backends:\n    backends: [spmd_types, dtensor]",
     ("field `runs.spmd_backends.backends.1`: Input should be 'spmd_types', 'partial_dtensor' or 'full_dtensor'",)),
    ("megatron", "half_dtypes:\n    dtypes: [fp16, bf16, fp16]",
     ("field `runs.half_dtypes`: Value error, 16-bit dtypes repeat: ['fp16', 'bf16', 'fp16']",)),
    ("megatron", "optimizers:\n    optimizers: [muon]",
     ("field `runs.optimizers`: Value error, runs.optimizers lacks adam",)),
    # spmd_backends had no repeat check before the entries shared schema.ListedRuns (debts)
    ("torchtitan-0.3", "spmd_backends:\n    backends: [spmd_types, spmd_types]",
     ("field `runs.spmd_backends`: Value error, spmd_backends backends repeat: ['spmd_types', 'spmd_types']",)),
    ("torchtitan-0.3", "spmd_backends:\n    backends: [partial_dtensor]\n    default: spmd_types",
     ("field `runs.spmd_backends`: Value error, spmd_backends default spmd_types must be one of backends "
      "['partial_dtensor']",)),
    ("megatron", "recompute:\n    granularity: [none]",
     ("field `runs.recompute.granularity`: Extra inputs are not permitted", "hint: did you mean `granularities`?")),
])
def test_a_bad_runs_list_names_the_file_the_field_and_the_choices(tmp_path, cli, base, entry, needles):
    """The `runs` entries that list what a stack's code has (schema.ListedRuns: recompute granularities, attention
    cores, 16-bit dtypes, optimizers, SPMD backends), given wrong in a user's stack file: exit 2, the error names the
    file, the field's path, and the valid choices (the Literal's values, from pydantic's literal_error) or the
    repeat / the rule broken. The base's `sources` are kept (catalog._extend merges the mapping), so only the list
    is wrong."""
    p = _write(tmp_path, f"extends: {base}\nname: mine\nversion: mine\nruns:\n  {entry}\n")
    assert_one_error(_explain(cli, p), f"error: {p}: ", *needles)
