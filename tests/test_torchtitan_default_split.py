"""A job on the torchtitan stacks without a config file splits its pipeline stages as torchtitan does by default
(issue 22): the embedding and the output layer count as a layer each of the split.

torchtitan main @e347b1e5e config/job_config.py l. 377, 383 (release/0.3 @4f9e9a47d config/configs.py l. 191, 197):
pipeline_parallel_first_stage_less_layers = 1, pipeline_parallel_last_stage_less_layers = 1. distributed/
pipeline_parallel.py pipeline_llm l. 67-68 (0.3: _get_pipeline_metadata l. 215-216) reads them as input_weight /
output_weight; generate_llm_fqn_per_model_part(num_stages, num_layers, input_weight, output_weight) l. 236-344
(0.3: _generate_llm_fqn_per_model_part l. 366-476):
    num_effective_layers = num_layers + input_weight + output_weight
    layers_per_stage, extra_layers = divmod(num_effective_layers, num_stages)
    stage i holds layers_per_stage + (i < extra_layers) effective layers, the first input_weight and the last
    output_weight of them being the embedding / the norm + output.
Llama 3 8B (32 layers) on pp 4 (1F1B: one stage per rank): 32 + 1 + 1 = 34 = 4 x 8 + 2, so stages 0-3 hold
9 - 1 = 8, 9, 8 and 8 - 1 = 7 transformer layers. With the weights 0 (--no-account-for-*) 32 = 4 x 8: 8, 8, 8, 8.
The planner's stack field: stack_db torchtitan(-0.3).yaml defaults.account_for_embedding/loss_in_pipeline_split true.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TOML = Path(__file__).parent / "data" / "trainer_configs" / "llama3_8b.toml"
NO_ENDS = ("--no-account-for-embedding", "--no-account-for-loss")
# the plan of TOML at tp 2, pp 4 on 64 GPUs, as options: dp_shard -1 = 64 / (2 x 4) = 8, global_batch_size -1 =
# local 1 x 8, pipeline_parallel_microbatch_size default 1, selective op AC, compile off, 1,000 steps x 8 x 8192 tokens
PLAIN = ("--model", "llama3-8b", "--stack", "torchtitan", "--gpus", "64", "--tp", "2", "--pp", "4", "--dp", "8",
         "--sharding", "fsdp", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "8192", "--recompute",
         "selective", "--no-compile", "--tokens", "65536000")


def _explain(cli, *args) -> dict:
    r = cli("explain", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _pp4_toml(tmp_path, extra: str = "") -> Path:
    text = TOML.read_text()
    old = "tensor_parallel_degree = 1\npipeline_parallel_degree = 1\n"
    assert old in text
    p = tmp_path / "pp4.toml"
    p.write_text(text.replace(old, "tensor_parallel_degree = 2\npipeline_parallel_degree = 4\n" + extra))
    return p


def _split_warning(d: dict) -> str:
    found = [w for w in d["warnings"] if "of the pipeline split" in w]
    return found[0] if found else ""


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-0.3"])
def test_the_stacks_default_counts_the_ends_as_torchtitan_does(cli, stack):
    """Without a file and without the flags: the plan counts both ends (34 units), its stages hold 8, 9, 8, 7 layers
    (the docstring's derivation), and the ends are listed among the stack's defaults."""
    d = _explain(cli, *PLAIN[:3], stack, *PLAIN[4:])
    p = d["plan"]
    assert (p["account_for_embedding_in_pipeline_split"], p["account_for_loss_in_pipeline_split"]) == (True, True)
    w = _split_warning(d)
    assert "32 + 2 units in pp*vpp=4 chunks" in w and "per stage 8, 9, 8, 7" in w
    assert f"stack_db {stack} defaults.account_for_*_in_pipeline_split" in w
    r = cli("explain", *PLAIN[:3], stack, *PLAIN[4:])
    assert "account_for_embedding_in_pipeline_split True, account_for_loss_in_pipeline_split True" in r.stdout


def test_the_default_split_prices_one_layer_more_on_a_middle_stage_and_one_less_on_the_last(cli):
    """Against the even split (weights 0: 8, 8, 8, 8 layers), torchtitan's default puts 9 layers on stage 1 (the
    heaviest middle stage) and 7 on the last, the first keeping 8. Each stage's optimizer_bytes (FSDP2: the fp32
    shard 4 B + Adam m, v 8 B = 12 B a parameter over dp_shard 8) moves by one Llama 3 8B layer's shard:
    the TP-sharded matrices wq, wo 4096 x 4096, wk, wv 4096 x 1024, w1, w3, w2 4096 x 14336: 218,103,808 / tp 2, plus
    the two RMSNorm weights 2 x 4096 that TP leaves whole (SequenceParallel), = 109,060,096 parameters per TP rank,
    x 12 / 8 = 163,590,144 bytes."""
    layer = (218_103_808 // 2 + 2 * 4096) * 12 // 8
    assert layer == 163_590_144
    ends = _explain(cli, *PLAIN)["memory"]["stages"]
    even = _explain(cli, *PLAIN, *NO_ENDS)["memory"]["stages"]
    assert ends["first"]["optimizer_bytes"] == even["first"]["optimizer_bytes"]
    assert ends["middle"]["optimizer_bytes"] - even["middle"]["optimizer_bytes"] == layer
    assert even["last"]["optimizer_bytes"] - ends["last"]["optimizer_bytes"] == layer
    assert _split_warning(_explain(cli, *PLAIN, *NO_ENDS)) == ""  # 32 layers on 4 stages: even, nothing to say


def test_a_plain_job_prices_as_the_equivalent_toml(cli, tmp_path):
    """The TOML at pp 4 (no end-weight keys: torchtitan's defaults 1, 1) and the plain job price the same plan,
    split included; the TOML with both weights 0 and the plain job with --no-account-for-* likewise."""
    def key(d):
        return d["memory"]["total_bytes"], d["time"]["step_s"], d["plan"]["account_for_loss_in_pipeline_split"]

    assert key(_explain(cli, _pp4_toml(tmp_path), "--gpus", "64")) == key(_explain(cli, *PLAIN))
    zero = _pp4_toml(tmp_path, "pipeline_parallel_first_stage_less_layers = 0\n"
                               "pipeline_parallel_last_stage_less_layers = 0\n")
    assert key(_explain(cli, zero, "--gpus", "64")) == key(_explain(cli, *PLAIN, *NO_ENDS))
    assert key(_explain(cli, *PLAIN)) != key(_explain(cli, *PLAIN, *NO_ENDS))


@pytest.mark.parametrize("ends", [(), NO_ENDS])
def test_the_export_round_trips_the_split(cli, tmp_path, ends):
    """export --format torchtitan writes the end weights the plan was priced with (1, 1 by default; 0, 0 with
    --no-account-for-*), and the file reads back as the same plan, memory and step."""
    out = tmp_path / "job.toml"
    r = cli("export", *PLAIN, *ends, "--format", "torchtitan", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    w = 0 if ends else 1
    text = out.read_text()
    assert f"pipeline_parallel_first_stage_less_layers = {w}\n" in text
    assert f"pipeline_parallel_last_stage_less_layers = {w}\n" in text
    back, plan = _explain(cli, out, "--gpus", "64"), _explain(cli, *PLAIN, *ends)
    assert (back["memory"]["total_bytes"], back["time"]["step_s"]) == (plan["memory"]["total_bytes"], plan["time"]["step_s"])
    assert back["plan"]["account_for_embedding_in_pipeline_split"] is (not ends)


def test_fit_rows_commands_name_the_split_only_where_it_is_not_the_stacks(cli):
    """A fit row's explain command (search.stack_args) leaves the default ends out; with --no-account-for-* it names
    them, and that command prices the row (the same step and memory as the fit's JSON row)."""
    base = ("fit", "--model", "llama3-8b", "--stack", "torchtitan", "--gpus", "64", "--pp", "4", "--top", "1")

    def row_command(*extra) -> list[str]:
        r = cli(*base, *extra)
        assert r.exit_code == 0, r.stderr
        line = next(x for x in r.stdout.splitlines() if "row 1 in full: planner explain " in x)
        return line.split("row 1 in full: planner explain ", 1)[1].split()

    assert not [a for a in row_command() if "account-for" in a]
    cmd = row_command(*NO_ENDS)
    assert [a for a in cmd if "account-for" in a] == list(NO_ENDS)
    r = cli(*base, *NO_ENDS, "--format", "json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["plan"]["account_for_embedding_in_pipeline_split"] is False
    again = _explain(cli, *cmd)
    assert (again["time"]["step_s"], again["memory"]["total_bytes"]) == (row["time"]["step_s"], row["memory"]["total_bytes"])


def test_megatron_keeps_its_flags_off_by_default(cli):
    """Megatron-Core counts the ends only on --account-for-*-in-pipeline-split (TransformerConfig defaults False):
    the megatron stack's defaults stay false."""
    d = _explain(cli, "--model", "llama3-8b", "--gpus", "64", "--pp", "4", "--tp", "2")
    assert (d["plan"]["account_for_embedding_in_pipeline_split"], d["plan"]["account_for_loss_in_pipeline_split"]) == \
        (False, False)
