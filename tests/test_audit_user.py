"""The 2026-12-07 audit5 (a new user's hour with the CLI: README quick start, fit / explain / check / budget / export
on the catalog and tests/data/trainer_configs, bad input): one test per defect it fixed, each failing before its fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import assert_one_error

CONFIGS = Path(__file__).parent / "data" / "trainer_configs"


# ------------------------------------------------------------ a missing launch script
@pytest.mark.parametrize("command", ["check", "explain", "budget", "fit"])
def test_a_missing_shell_script_is_named_missing_not_an_unknown_format(cli, tmp_path, command):
    # before: `planner check run.sh` of a path that does not exist said "run.sh: not a trainer config this planner
    # reads" (cli/core._shell_script judged the name alone), sending the user to the formats' list for a typo
    r = cli(command, tmp_path / "run.sh")
    assert_one_error(r, "run.sh: cannot read (no such file)", "check the path")
    assert "not a trainer config" not in r.stderr


def test_an_unknown_shell_script_is_still_named_so(cli, tmp_path):
    script = tmp_path / "convert.sh"
    script.write_text("#!/bin/bash\npython convert.py --in a --out b\n", encoding="utf-8")
    assert_one_error(cli("check", script), "convert.sh: not a trainer config this planner reads")


# ------------------------------------------------------------ DeepSpeed ZeRO-1/2's reduce_bucket_size
def _explain(cli, *args):
    r = cli("explain", *args, "--format", "json", "-q")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_zero2_reduce_bucket_size_is_priced_and_not_warned_about(cli):
    # before: the HF guide's ZeRO-2 JSON (reduce_bucket_size 5e8) drew "deepspeed_zero3 {'reduce_bucket_size':
    # 500000000} at sharding zero2: DeepSpeed reads these in its stage-3 engine only ..., so they price nothing here
    # and an exported file does not carry them", while memory.py [zb] priced the bucket and the export wrote it
    res = _explain(cli, CONFIGS / "ds_config_zero2.json", "--model", "llama3-8b", "--gpus", "8")
    assert res["plan"]["sharding"] == "zero2" and res["plan"]["dp_comm_overlap"] is True
    # two IPG buffers under overlap_comm (stage_1_and_2.py l. 2038-2057), 5e8 elements of bf16 (2 B) each
    assert res["memory"]["terms"]["zero12_ipg_bucket"] == 2 * 5e8 * 2
    assert not [w for w in res["warnings"] if w.startswith("deepspeed_zero3")]


def test_zero2_warns_of_the_stage3_knobs_alone(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "model": "llama3-8b", "gpus": 8, "stack": "megatron-deepspeed", "sharding": "zero2", "global_batch": 64,
        "seq_len": 4096, "dp_comm_overlap": False,
        "deepspeed_zero3": {"reduce_bucket_size": 100_000_000, "stage3_max_live_parameters": 1000}}), encoding="utf-8")
    res = _explain(cli, job)
    assert res["memory"]["terms"]["zero12_ipg_bucket"] == 1e8 * 2  # one buffer without overlap_comm, 1e8 x 2 B
    warned = [w for w in res["warnings"] if w.startswith("deepspeed_zero3")]
    assert len(warned) == 1
    assert warned[0].startswith("deepspeed_zero3 {'stage3_max_live_parameters': 1000} at sharding zero2: ")
    assert "reduce_bucket_size" not in warned[0]
    # and the export writes both (DeepSpeed's stage-2 engine ignores the stage-3 knob), as the warning now says
    r = cli("export", job, "--format", "deepspeed", "-q")
    assert r.exit_code == 0, r.stderr
    zero = json.loads(r.stdout)["zero_optimization"]
    assert zero["reduce_bucket_size"] == 100_000_000 and zero["stage3_max_live_parameters"] == 1000
    assert "still writes those that differ from DeepSpeed's defaults" in warned[0]


# ------------------------------------------------------------ `planner hardware`'s FP4 column
def test_hardware_lists_the_fp4_peak(cli):
    # before: the table had an FP4 TF column and the JSON no fp4_TFLOPS: cli/core.hardware_cmd never filled it, so the
    # Blackwell entries that nvfp4 plans are priced on showed a blank
    r = cli("hardware", "--format", "json")
    assert r.exit_code == 0, r.stderr
    fp4 = {row["name"]: row["fp4_TFLOPS"] for row in json.loads(r.stdout)}
    # hardware_db: DGX B200 144 PF FP4 sparse / 8 GPUs / 2 = 9,000 dense; GB200 NVL72 1,440 PF / 72 / 2 = 10,000
    assert fp4["b200"] == 9000 and fp4["gb200-nvl72"] == 10000
    assert fp4["h100-sxm"] is None and fp4["a100-sxm-80gb"] is None  # no FP4 tensor cores
    table = cli("hardware")
    assert "9000.0" in next(ln for ln in table.stdout.splitlines() if ln.startswith("│ b200 "))


# ------------------------------------------------------------ every error has its hint
@pytest.mark.parametrize("args,needle", [
    (["collective", "--op", "all-reduce", "--size", "1GB", "-n", "8", "--bandwidth", "0"], "--bandwidth must be > 0"),
    (["collective", "--op", "all-reduce", "--size", "1GB", "-n", "8", "--latency", "-5"], "--latency must be >= 0"),
])
def test_collective_link_overrides_refused_with_a_hint(cli, args, needle):
    # before: `error: --bandwidth must be > 0, got 0 GB/s` and no hint line (README: every bad input `error: ... /
    # hint: ...`)
    r = cli(*args)
    assert_one_error(r, needle, "hint: give ", "or leave it out for the hardware's")


def test_a_config_json_that_is_no_object_is_refused_with_a_hint(cli, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("[1, 2]", encoding="utf-8")
    r = cli("explain", "--model", folder / "config.json", "--gpus", "8")
    assert_one_error(r, "config.json: expected a JSON object", "hint: give a Hugging Face config.json")


# ------------------------------------------------------------ explain's placement line under CP
def test_placement_names_the_dp_x_cp_gradient_group(cli):
    # before: "TP 1 x CP 2 x PP 1 x DP 8" over "... DP16 NVLink": the gradient group is DP x CP (placement.groups,
    # Megatron's data-parallel group with CP), 8 x 2 = 16 ranks, labelled as if DP were 16
    r = cli("explain", "--model", "llama3-8b", "--gpus", "16", "--tp", "1", "--cp", "2", "--seq-len", "8192",
            "--global-batch", "64", "-q")
    assert r.exit_code == 0, r.stderr
    assert "TP 1 x CP 2 x PP 1 x DP 8" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("placement ("))
    assert "DP x CP 16 " in line and "; DP16 " not in line and "CP2 NVLink" in line
    # without CP the group is DP alone and keeps its label
    r1 = cli("explain", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--global-batch", "64", "-q")
    assert "DP8 " in next(ln for ln in r1.stdout.splitlines() if ln.strip().startswith("placement ("))


# ------------------------------------------------------------ what the hints offer
def test_an_unknown_sharding_names_the_levels_too(cli):
    # before: the hint listed the stack's seven modes only, not the five levels --sharding takes (none ... hsdp)
    r = cli("explain", "--model", "llama3-8b", "--gpus", "8", "--sharding", "zero9")
    assert_one_error(r, "'zero9' is not a mode of stack megatron", "distributed_optimizer",
                     "none, zero1, zero2, fsdp, hsdp")


def test_fit_output_without_export_offers_every_format(cli, tmp_path):
    # before: "add --export torchtitan|megatron|deepspeed": three of the five formats --export takes
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "-o", tmp_path / "run.sh")
    assert_one_error(r, "--export torchtitan|megatron|deepspeed|megatron-deepspeed|megatron-bridge")
    assert "megatron-bridge" in cli("fit", "--help").stdout.split("--export")[1].split("--output")[0]


# ------------------------------------------------------------ nothing fits, because --max-layer-slack dropped the splits
def test_nothing_fits_names_the_pipeline_splits_max_layer_slack_left_out(cli):
    # before: DeepSeek-V3 on its own stack and DeepSeek's 2,048 H800s read "nothing fits ... TP 1 x CP 1 x PP 1 x DP
    # 2048 ... hint: shard the gradients (zero2/fsdp), ...": every pp > 1 split of its 61 layers (+ the MTP module) is
    # uneven beyond the default slack of 2 (PP 16: middle stages 4 layers, the first 2, the last 3: slack 2 + 1 = 3),
    # and the message did not say so, while the no-plan message of the same search does
    args = ["fit", "--model", "deepseek-v3", "--gpus", "2048", "--stack", "deepseek", "--hardware", "h800-sxm", "-q"]
    r = cli(*args)
    assert r.exit_code == 1, r.stderr
    assert "nothing fits" in r.stderr and "pipeline splits (pp, vpp) left out" in r.stderr
    assert "hint:" in r.stderr and "raise --max-layer-slack" in r.stderr
    # and raising it prices DeepSeek's PP 16 x EP 64 (arXiv:2412.19437 sec. 3.2), which then fits
    ok = cli(*args, "--pp", "16", "--ep", "64", "--max-layer-slack", "3", "--format", "json")
    assert ok.exit_code == 0, ok.stderr
    row = json.loads(ok.stdout)[0]["plan"]
    assert (row["tp"], row["pp"], row["dp"], row["ep"]) == (1, 16, 128, 64)


# ------------------------------------------------------------ counts: B for billion, a minus sign
@pytest.mark.parametrize("value,needles", [
    ("300B", ["cannot read --tokens '300B': B is not a prefix here", "300G", "300e9"]),
    ("-1T", ["--tokens '-1T' is negative", "give a positive number"]),
])
def test_token_count_misreadings_are_named(cli, value, needles):
    # before: both "cannot read --tokens ...", hint "write a number, optionally with k, M, G, T, P": 300B tokens is how
    # papers write it (and Megatron's --step-batch-size-schedule reads B), and -1T is a number
    assert_one_error(cli("budget", "--model", "llama3-8b", "--gpus", "8", "--tokens", value), *needles)


def test_a_negative_gpu_count_is_named_negative(cli):
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "-8"), "--gpus '-8' is negative")


def test_a_negative_time_or_size_is_named_negative(cli, tmp_path):
    # before: "cannot read --max-step-time '-1'" / "cannot read --size '-1GB'" (units.parse_seconds / parse_bytes)
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 8\n", encoding="utf-8")
    assert_one_error(cli("check", job, "--max-step-time", "-1"), "--max-step-time '-1' is negative", "30s")
    assert_one_error(cli("collective", "--op", "all-reduce", "--size", "-1GB", "-n", "8"), "--size '-1GB' is negative")


# ------------------------------------------------------------ fit --export over several GPU counts
def test_fit_export_over_several_counts_names_the_count_and_the_mode(cli):
    # before: "exporting row 1: tp 1, cp 1, pp 1, vpp 1, dp 16, micro-batch 1, zero2, recompute none": which of --gpus
    # 8,16 was left to dp to tell, and "zero2" for the Megatron-FSDP optim_grads the script's flags run
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8,16", "--export", "megatron", "-q")
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "exporting row 1" in ln)
    assert line.startswith("warning: exporting row 1 of 16 GPUs: ") and "dp 16" in line
    assert "--nnodes 2" in r.stdout  # 16 GPUs = 2 nodes x 8 (h100-sxm gpus_per_node 8)
    sharding = line.split("micro-batch 1, ")[1].split(", recompute")[0]
    assert sharding.startswith("zero2 as megatron_fsdp_optim") and "--use-megatron-fsdp" in r.stdout


# ------------------------------------------------------------ fit's pinned options the stack or each other rule out
def test_fit_refuses_a_pinned_degree_above_the_stacks_own(cli):
    # before: `fit --stack llm-foundry --tp 2` answered "no plan ... satisfies the constraints (0 candidates)", exit 1,
    # no reason: stack_bounds capped max_tp at the stack's 1 and the pinned 2 emptied the axis
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--stack", "llm-foundry", "--tp", "2")
    assert_one_error(r, "--tp 2: stack llm-foundry runs tp 1 at most", "runs.max_tp", "give --tp 1")
    r = cli("fit", "--model", "deepseek-v3", "--gpus", "2048", "--stack", "deepseek", "--cp", "2")
    assert_one_error(r, "--cp 2: stack deepseek runs cp 1 at most")


@pytest.mark.parametrize("pin,named", [(["--tp", "1"], "--tp 1"), (["--no-sequence-parallel"], "--no-sequence-parallel")])
def test_fit_refuses_tp_overlap_beside_a_pin_that_rules_it_out(cli, pin, named):
    # before: searched every plan (each broke TP_OVERLAP_SP), then nearest_working tried 1,024 GPU counts: about 40 s
    # of wall time on a shared machine for "no plan ... satisfies the constraints", exit 1; explain refuses it, exit 2
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--tp-comm-overlap", *pin)
    assert_one_error(r, f"--tp-comm-overlap with {named}: tp_comm_overlap needs sequence parallelism with tp > 1")
    # a list that keeps a tp above 1 is still searched: its TP 2 rows run the overlap
    ok = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--tp-comm-overlap", "--tp", "1,2", "--top", "1",
             "--format", "json", "-q")
    assert ok.exit_code == 0, ok.stderr
    plan = json.loads(ok.stdout)[0]["plan"]
    assert plan["tp"] == 2 and plan["tp_comm_overlap"] is True and plan["sequence_parallel"] is True


@pytest.mark.parametrize("args,needle", [
    (["--sequence-parallel", "--tp", "1"], "--sequence-parallel with --tp 1: sequence_parallel needs tp > 1"),
    (["--schedule", "interleaved", "--pp", "1"], "--schedule interleaved with --pp 1: the interleaved schedule needs"),
    (["--schedule", "interleaved", "--vpp", "1"], "--schedule interleaved with --vpp 1: the interleaved schedule needs"),
])
def test_fit_refuses_pins_that_contradict_each_other(cli, args, needle):
    # before: each searched (every candidate broke SP_TP / the interleaved rule), then the nearby GPU counts: 11-14 s wall
    # on a shared machine for exit 1; explain refuses the same plan at once, exit 2
    assert_one_error(cli("fit", "--model", "llama3-8b", "--gpus", "8", *args), needle)


def test_nothing_fits_hint_does_not_offer_what_the_closest_plan_already_does(cli):
    # before: "hint: allow full recompute, more TP/CP/PP, ..." for a closest plan at recompute full (10M tokens on 8
    # GPUs: activations 1,415.8 GiB), and "on 1 GPUs"
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "10000000", "--global-batch", "8", "-q")
    assert r.exit_code == 1, r.stderr
    assert "recompute full" in r.stderr and "largest component: activations" in r.stderr
    assert "allow full recompute" not in r.stderr and "hint: more TP/CP/PP, a shorter --seq-len" in r.stderr
    one = cli("fit", "--model", "llama3-8b", "--gpus", "1", "-q")
    assert one.exit_code == 1 and "on 1 GPU, needs" in one.stderr


def test_a_rule_across_model_fields_is_not_named_a_top_level_field(cli, tmp_path):
    # before: "error: m.yaml: field `(top level)`: Value error, num_attention_heads (32) must be a multiple of
    # num_kv_heads (5)" and "hint: fix the field `(top level)`"
    spec = yaml.safe_load((Path(__file__).parent.parent / "model_zoo" / "llama3-8b.yaml").read_text(encoding="utf-8"))
    spec["num_kv_heads"] = 5
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(spec), encoding="utf-8")
    r = cli("explain", "--model", p, "--gpus", "8")
    assert_one_error(r, "m.yaml: num_attention_heads (32) must be a multiple of num_kv_heads (5)", "fix the fields it names")
    assert "(top level)" not in r.stderr and "Value error" not in r.stderr


# ------------------------------------------------------------ export of a plan priced on a hardware YAML
@pytest.fixture
def own_hardware(tmp_path):
    """hardware_db/h100-sxm.yaml as a user's file named h100-custom (the same figures)."""
    spec = yaml.safe_load((Path(__file__).parent.parent / "hardware_db" / "h100-sxm.yaml").read_text(encoding="utf-8"))
    spec["name"] = "h100-custom"
    p = tmp_path / "h100-custom.yaml"
    p.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return p


@pytest.mark.parametrize("stack,fmt", [("megatron", "megatron"), ("torchtitan", "torchtitan"),
                                       ("torchtitan-0.3", "torchtitan"), ("megatron-deepspeed", "deepspeed")])
def test_export_of_a_plan_on_a_hardware_file(cli, own_hardware, stack, fmt):
    # before: "error: unknown hardware 'h100-custom'" (exit 2): the Megatron, torchtitan and torchtitan 0.3 writers
    # looked the plan's GPU up by its name in the catalog, not by the file it was priced with (plan hardware_file)
    r = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--hardware", own_hardware, "--stack", stack, "--export", fmt,
            "-q")
    assert r.exit_code == 0, r.stderr
    assert "unknown hardware" not in r.stderr
    if fmt == "megatron":
        assert "# hardware h100-custom: 8 GPUs = 1 node(s) x 8" in r.stdout
    if fmt == "deepspeed":  # the read-back line names the file, which --hardware loads (the name alone it does not)
        assert f"--hardware {own_hardware} " in r.stderr


def test_a_suffixed_number_in_a_job_file_gets_the_number_to_write(cli, tmp_path):
    # before: "field `tokens`: Input should be a valid number" with "hint: fix the field `tokens`", for the 15T the
    # command line's --tokens takes
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 8\ntokens: 15T\n", encoding="utf-8")
    assert_one_error(cli("explain", job), "field `tokens`", "write the field `tokens` as a number: 1.5e+13")


def test_check_time_gate_without_a_fix_points_to_fit(cli, tmp_path):
    # before: "no single change, nor any pair of changes, ... makes it pass" and nothing more for a time gate, while the
    # ladders only save memory (TP and PP only go up): fit's TP 1 plans on the same 8 GPUs run above 60% MFU
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\ngpus: 8\ntp: 8\n", encoding="utf-8")
    r = cli("check", job, "--min-mfu", "0.5")
    assert r.exit_code == 1, r.stderr
    assert "too little MFU: 41.0% < --min-mfu 50.0%" in r.stdout  # README's check example: TP 8 on 8 GPUs, MFU 41.0%
    assert "never lower TP or PP: `planner fit`" in r.stdout
    fit = cli("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1", "--format", "json", "-q")
    assert json.loads(fit.stdout)[0]["throughput"]["mfu"] > 0.5  # what fit finds, at the gate
