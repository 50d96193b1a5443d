"""`planner fit CONFIG` (issue 22, "fit takes no trainer config"): the file gives the job, fit searches
the plan, and the file's own plan is priced by explain's path and ranked among the rows.

Files: tests/data/trainer_configs/ (their sources in that folder's README.md). The figures compared
are the planner's own through two paths (fit's search against `planner explain`, and fit CONFIG
against a plain `fit --model` of the same job), and the hand-counted facts of the files (8 GPUs from
the script's torchrun line, 128 x 8,192 tokens, fp8, the torchtitan preset's 64 x 8,192)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import assert_one_error, fit_table_and_rows

from planner.render.common import GiB

D = "tests/data/trainer_configs/"
FP8 = D + "train_llama3_8b_h100_fp8.sh"  # NVIDIA's Llama 3 8B fp8 script: 8 H100 (GPUS_PER_NODE 8, NUM_NODES 1)
TOML = D + "llama3_8b.toml"  # torchtitan's Llama 3 8B preset: no GPU count (the launcher's)
DS = D + "ds_config_zero3.json"  # a DeepSpeed ZeRO-3 JSON: no model, no sequence length


def _json(r) -> dict:
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _line(stderr: str, needle: str) -> str:
    lines = [ln for ln in stderr.splitlines() if needle in ln]
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_fp8_script_on_8_h100_its_own_plan_does_not_fit_the_top_row_does(cli):
    r = cli("fit", FP8, "--top", "3", "--format", "json")
    d = _json(r)
    rows, cp = d["rows"], d["config_plan"]
    assert len(rows) == 3
    # the file's facts, in every row: 8 GPUs (torchrun 8 x 1), 128 x 8,192 tokens, fp8 on megatron
    for row in rows:
        p = row["plan"]
        assert (p["gpus"], p["global_batch"], p["seq_len"], p["precision"], p["stack"]) == (8, 128, 8192, "fp8", "megatron")
        assert row["memory"]["fits"] and row["memory"]["total_bytes"] <= row["memory"]["usable_bytes"]
    # the file's own plan: TP 1 CP 1 PP 1 DP 8, the distributed optimizer, priced and not ranked
    own = cp["explain"]
    assert (own["plan"]["tp"], own["plan"]["cp"], own["plan"]["pp"], own["plan"]["dp"]) == (1, 1, 1, 8)
    assert own["plan"]["sharding_mode"] == "distributed_optimizer"
    assert not own["memory"]["fits"] and cp["rank"] is None and cp["of"] is None
    gib = own["memory"]["total_bytes"] / GiB
    assert cp["reason"].startswith(f"does not fit: {gib:,.1f} GiB per GPU")
    # the figures `planner check` gives the script (its FAIL line: 83.3 GiB of 71.2 GiB usable)
    c = json.loads(cli("check", FP8, "--format", "json").stdout)[0]
    assert c["verdict"] == "fail" and (c["memory"], c["time"]) == (own["memory"], own["time"])
    # 83.0 before the saved softmax statistics (32 heads x 4 B x 8,192 x 32 layers: +33.6 MB), 83.1 before NCCL's NVLS
    # buffers of the 8-rank DP group (258 MiB, memory.py [nv], branch nvlsmem)
    assert f"{gib:.1f}" == "83.3"
    assert cp["top_speedup"] == own["time"]["step_s"] / rows[0]["time"]["step_s"] - 1
    line = _line(r.stderr, "your config's plan")
    assert "TP1xCP1xPP1xDP8 (zero1, micro-batch 1 x 16, recompute none): not ranked: does not fit" in line
    # the file's plan values fit searches, said once
    searched = _line(r.stderr, "fit searches the plan")
    for v in ("tp=1", "cp=1", "pp=1", "micro_batch=1", "sharding=zero1", "sharding_mode=distributed_optimizer",
              "recompute=none", "sequence_parallel=false", "rank_order=tp-cp-dp-pp"):
        assert v in searched


def test_the_own_plan_is_explains_and_its_rank_line_gives_explains_figures(cli):
    """--cp 2 (the plan NVIDIA's examples/llama/README.md reports for this script) beats the file's CP 1
    with check's note; the file's plan then fits, is ranked, and its step and MFU are `planner explain
    CONFIG --cp 2`'s, bit for bit in the JSON and as printed on the rank line."""
    r = cli("fit", FP8, "--cp", "2", "--top", "3", "--format", "json")
    cp = _json(r)["config_plan"]
    e = _json(cli("explain", FP8, "--cp", "2", "--format", "json"))
    assert cp["explain"]["time"] == e["time"] and cp["explain"]["memory"] == e["memory"]
    assert cp["explain"]["throughput"] == e["throughput"]
    assert "cp=2: the command line replaces the file's 1" in r.stderr  # flags beat file values, as check says
    assert cp["reason"] is None and cp["searched"] is True and 1 <= cp["rank"] <= cp["of"]
    line = _line(r.stderr, "your config's plan")
    m = re.search(r"rank (\d+) of ([\d,]+), step ([\d.]+) s, MFU ([\d.]+)%", line)
    assert m and int(m[1]) == cp["rank"] and int(m[2].replace(",", "")) == cp["of"]
    assert m[3] == f"{e['time']['step_s']:.3g}" and m[4] == f"{100 * e['throughput']['mfu']:.1f}"
    # the pinned CP reaches the search: every row has it (the same command's rows, above)
    assert {row["plan"]["cp"] for row in _json(r)["rows"]} == {2}


def test_a_torchtitan_toml_needs_gpus_and_ranks_as_a_plain_fit_of_the_same_job(cli):
    assert_one_error(cli("fit", TOML), "--gpus")
    args = ("--gpus", "64", "--hardware", "a100-sxm-80gb")
    r = cli("fit", TOML, *args, "--top", "30", "--format", "json")
    d = _json(r)
    cp = d["config_plan"]
    own = cp["explain"]["plan"]
    assert (own["tp"], own["dp"], own["sharding_mode"], own["recompute"], own["micro_batch"]) == (1, 64, "fsdp2", "selective", 1)
    # hand check: the same job from options (the preset's facts: llama3-8b, 64 x 8,192 tokens, compile off, its
    # 1,000 steps, and torchtitan's end weights pipeline_parallel_first / last_stage_less_layers, default 1 each,
    # job_config.py @e347b1e5e l. 377, 383: the embedding and output counted as layers of a pp > 1 row's split, as
    # torchtitan run with --parallelism.pipeline_parallel_degree N splits them) gives the same ranked rows, and the
    # file's plan sits where its step and memory put it. The end weights are the torchtitan stack's default
    # (stack_db torchtitan defaults.account_for_*_in_pipeline_split): the plain fit needs no flag for them, and the
    # same fit with the two flags given is the same job
    opts = ("fit", "--model", "llama3-8b", *args, "--stack", "torchtitan", "--seq-len", "8192", "--global-batch", "64",
            "--no-compile", "--tokens", "524288000", "--top", "30", "--format", "json")
    plain = _json(cli(*opts))
    flagged = _json(cli(*opts, "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"))
    assert [(x["time"]["step_s"], x["memory"]["total_bytes"]) for x in plain] == \
        [(x["time"]["step_s"], x["memory"]["total_bytes"]) for x in d["rows"]] == \
        [(x["time"]["step_s"], x["memory"]["total_bytes"]) for x in flagged]
    s, m = cp["explain"]["time"]["step_s"], cp["explain"]["memory"]["total_bytes"]
    faster = [x for x in plain if (x["time"]["step_s"], x["memory"]["total_bytes"]) < (s, m)]
    assert cp["rank"] == len(faster) + 1 < 30  # 24 of 5,471 at the time of writing (25 before compute [5a])
    same = plain[cp["rank"] - 1]
    assert same["plan"]["recompute"] == "selective" and same["time"]["step_s"] == s
    # 5,471 fit, as the plain fit with the end weights counted (6,444 before the file's pp-1 end weights were carried
    # to the pp > 1 rows: 34 units split over pp x vpp chunks instead of 32; 5,332 before memory.py [lp]: no loss pool
    # under PP and the compiled loss's saved logits counted once with fwd_cache's)
    assert cp["of"] == int(re.search(r"([\d,]+) fit", r.stderr)[1].replace(",", "")) == 5471


def test_a_deepspeed_json_with_model_and_seq_len(cli):
    r = cli("fit", DS, "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--top", "3", "--format", "json")
    d = _json(r)
    assert {(x["plan"]["seq_len"], x["plan"]["global_batch"], x["plan"]["stack"]) for x in d["rows"]} == \
        {(4096, 64, "megatron-deepspeed")}
    own = d["config_plan"]["explain"]["plan"]
    assert (own["sharding"], own["sharding_mode"], own["micro_batch"]) == ("fsdp", "zero3", 1)
    e = _json(cli("explain", DS, "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--format", "json"))
    assert d["config_plan"]["explain"]["time"]["step_s"] == e["time"]["step_s"]
    assert d["config_plan"]["rank"] >= 1


def test_a_flag_beats_the_file_with_a_note(cli):
    r = cli("fit", FP8, "--seq-len", "4096", "--tp", "2", "--top", "2", "--format", "json")
    d = _json(r)
    assert "seq_len=4096: the command line replaces the file's 8192" in r.stderr
    assert "tp=2: the command line replaces the file's 1" in r.stderr
    assert {(x["plan"]["seq_len"], x["plan"]["tp"]) for x in d["rows"]} == {(4096, 2)}
    assert d["config_plan"]["explain"]["plan"]["tp"] == 2  # the file's plan as the command line amends it
    assert "tp=" not in _line(r.stderr, "fit searches the plan")  # pinned, not searched
    # a bound or a list bounds the search, not the file's plan: named beside the file's value it searches over
    r = cli("fit", FP8, "--max-pp", "2", "--tp", "1,2", "--top", "1", "--format", "json")
    searched = _line(r.stderr, "fit searches the plan")
    assert "tp=1 (searched within the command line's --tp 1,2)" in searched
    assert "pp=1 (searched within the command line's --max-pp 2)" in searched
    assert {x["plan"]["tp"] for x in _json(r)["rows"]} <= {1, 2}
    # several GPU counts: the file's plan is priced at the first, not ranked
    r = cli("fit", FP8, "--cp", "2", "--gpus", "8,16", "--top", "2", "--format", "json")
    cp = _json(r)["config_plan"]
    assert cp["rank"] is None and cp["reason"].startswith("fit compares several GPU counts")
    assert cp["explain"]["plan"]["gpus"] == 8 and cp["explain"]["memory"]["fits"]
    # a model flag beats the file's flags-built model, as check's does
    r = cli("fit", FP8, "--model", "llama3-8b", "--top", "1", "--format", "json")
    assert _json(r)["rows"][0]["plan"]["model"] == "llama3-8b"


def test_the_json_contract_and_from_fit(cli, tmp_path):
    r = cli("fit", FP8, "--cp", "2", "--top", "2", "--format", "json")
    d = _json(r)
    assert set(d) == {"rows", "config_plan"}
    assert set(d["config_plan"]) == {"file", "rank", "of", "searched", "reason", "top_speedup", "explain"}
    for row in d["rows"] + [d["config_plan"]["explain"]]:
        assert {"plan", "params", "memory", "flops", "time", "throughput"} <= set(row)
    assert "trainer_config" in d["config_plan"]["explain"]  # explain's block of the file read
    saved = tmp_path / "fit.json"
    saved.write_text(r.stdout)
    e = _json(cli("explain", "--from-fit", str(saved), "--row", "2", "--format", "json"))
    assert e["time"]["step_s"] == d["rows"][1]["time"]["step_s"]
    # csv: the rows alone; without a file the JSON is the list it always was
    assert cli("fit", FP8, "--top", "2", "--format", "csv").stdout.count("\n") == 3
    assert isinstance(_json(cli("fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1", "--format", "json")), list)


def test_the_table_and_its_row_command(cli):
    """The command under the table is `planner explain CONFIG` with row 1's plan and the job options the fit
    was given, and it prices row 1: the file's flags-built model and custom bytes per parameter (which no
    `explain --model` option spells) stay the file's."""
    for args in ((FP8, "--top", "2"),
                 (DS, "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--headroom", "0.05", "--tokens", "1T",
                  "--no-dp-comm-overlap", "--top", "2")):
        r, rows = fit_table_and_rows(cli, *args)  # one search: the table and the JSON's rows (conftest)
        assert r.exit_code == 0, r.stderr
        cmd = re.search(r"row 1 in full: planner explain (.*)", r.stdout)[1].split()
        assert cmd[0] == args[0] and "job options" not in cmd
        step = re.search(r"│ 1 │.*│\s+([\d.]+) │\s+[\d.]+% │", r.stdout)[1]
        j = rows[0]  # `fit ARGS --format json`'s rows[0]
        e = _json(cli("explain", *cmd, "--format", "json"))
        assert f"{e['time']['step_s']:.2f}" == step
        assert (e["time"], e["memory"], e["throughput"]) == (j["time"], j["memory"], j["throughput"])


def test_export_keeps_the_files_settings(cli):
    r = cli("fit", FP8, "--export", "megatron")
    assert r.exit_code == 0, r.stderr
    for flag in ("--fp8-format hybrid", "--fp8-recipe delayed", "--fp8-param-gather", "--grad-reduce-in-bf16",
                 "--rotary-base 1000000", "--global-batch-size 128", "--seq-length 8192", "--empty-unused-memory-level 1"):
        assert flag in r.stdout


def test_bad_files_give_checks_messages(cli, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("just some words\n")
    for path in (str(tmp_path / "missing.sh"), str(notes)):
        f, c = cli("fit", path), cli("check", path)
        assert_one_error(f, path)
        assert [ln for ln in f.stderr.splitlines() if ln.startswith(("error", "hint"))] == \
            [ln for ln in c.stderr.splitlines() if ln.startswith(("error", "hint"))]


def test_a_launch_line_whose_own_plan_is_the_top_row(cli):
    """torchtitan 0.3.0's Llama 3 405B launch line (tests/data/torchtitan03/torchrun_405b.sh: 128 GPUs, TP 8,
    FSDP, full recompute, rowwise fp8): nothing the search finds beats it, and the top row prices the same."""
    r = cli("fit", "tests/data/torchtitan03/torchrun_405b.sh", "--top", "1", "--format", "json")
    d = _json(r)
    cp, top = d["config_plan"], d["rows"][0]
    assert (cp["rank"], cp["searched"], cp["reason"]) == (1, True, None)
    assert (top["time"]["step_s"], top["memory"]["total_bytes"]) == \
        (cp["explain"]["time"]["step_s"], cp["explain"]["memory"]["total_bytes"])
    assert cp["top_speedup"] == 0.0
    assert _line(r.stderr, "your config's plan").endswith("the top row prices the same")


def test_a_file_setting_explain_keeps_is_said_in_the_row_command(cli, tmp_path):
    """A Megatron --microbatch-group-size-per-virtual-pipeline-stage is the interleaved schedule's at the file's
    pp: fit searches without it (the note says it is dropped), and the rows' `planner explain CONFIG`
    command, which keeps it (no option clears it), says so."""
    script = _with_group(tmp_path)
    r = cli("fit", script, "--top", "1")
    assert r.exit_code == 0, r.stderr
    assert "microbatch_group=4" in _line(r.stderr, "fit searches the plan")
    assert "(it keeps the file's microbatch_group=4, which the row was priced without" in r.stdout
    r = cli("fit", D + "train_llama3_8b.sh", "--top", "1")
    assert "it keeps the file's" not in r.stdout


def _with_group(tmp_path):
    """train_llama3_8b.sh (TP 2, SP, 8 H100, global batch 128) with --microbatch-group-size-per-virtual-pipeline-stage
    4 (the reader's microbatch_group, planner/trainers/megatron.py)."""
    text = open(D + "train_llama3_8b.sh").read()
    flag = "    --tensor-model-parallel-size $TP_SIZE"
    assert flag in text
    script = tmp_path / "train.sh"
    script.write_text(text.replace(flag, flag + " --microbatch-group-size-per-virtual-pipeline-stage 4"))
    return script


def test_the_files_microbatch_group_is_said_dropped_not_searched(cli, tmp_path):
    """fit does not vary microbatch_group (no SpaceOptions axis): the search job drops the file's 4 and every
    interleaved row runs the stack's rule, N = pp (PlanArrays.mbg 0: no microbatch_group in a row's plan). The note
    says so, not 'searched over'; --microbatch-group 4 keeps it in every row, and the note then names it nowhere."""
    script = _with_group(tmp_path)
    r = cli("fit", script, "--schedule", "interleaved", "--top", "5", "--format", "json")
    rows = _json(r)["rows"]
    assert rows and all(x["plan"]["schedule"] == "interleaved" and "microbatch_group" not in x["plan"] for x in rows)
    line = _line(r.stderr, "fit searches the plan")
    searched, _, rest = line.partition("are searched over")
    assert "microbatch_group" not in searched
    assert ("the file's microbatch_group=4 (the interleaved schedule's micro-batches per virtual stage) is dropped from "
            "the search: its interleaved rows group pp micro-batches") in rest
    kept = cli("fit", script, "--schedule", "interleaved", "--microbatch-group", "4", "--top", "5", "--format", "json")
    assert {x["plan"].get("microbatch_group") for x in _json(kept)["rows"]} == {4}
    assert "microbatch_group" not in _line(kept.stderr, "fit searches the plan")


def test_the_files_tp_comm_overlap_is_listed_only_where_fit_varies_it(cli):
    """train_llama3_8b_tp1_tp_comm_overlap.sh sets --tp-comm-overlap (at TP 1, which Megatron refuses: --tp 2 pins
    the TP it runs at): the megatron stack overlaps TP, so fit tries it off and on (space.variant_choices), the note
    lists tp_comm_overlap=true among the searched values and the rows hold both. Megatron-Bridge's DeepSeek-V3
    script (tp_comm_overlap false): the stack turns the overlap off for multi-head latent attention
    (overlap.tp_comm_overlap_off_with_mla), so fit tries it off only: the note says so instead of listing it, and
    no row has it; likewise where a --no-sequence-parallel pin leaves no row the overlap runs in."""
    r = cli("fit", D + "train_llama3_8b_tp1_tp_comm_overlap.sh", "--tp", "2", "--top", "30", "--format", "json")
    rows = _json(r)["rows"]
    line = _line(r.stderr, "fit searches the plan")
    assert "tp_comm_overlap=true are searched over" in line and "is not searched" not in line
    assert {x["plan"]["tp_comm_overlap"] for x in rows} == {True, False}
    r = cli("fit", D + "bridge_deepseek_v3_h800.sh", "--top", "10", "--format", "json")
    rows = _json(r)["rows"]
    searched, _, rest = _line(r.stderr, "fit searches the plan").partition("are searched over")
    assert "tp_comm_overlap" not in searched
    assert ("the file's tp_comm_overlap=false is not searched: every row runs without TP overlap, as stack "
            "megatron-bridge turns it off for a model with multi-head latent attention (deepseek-v3;") in rest
    assert rows and not any(x["plan"].get("tp_comm_overlap") for x in rows)
    # train_llama3_8b.sh (TP 2, SP, tp_comm_overlap false) with --no-sequence-parallel: no row can overlap TP
    r = cli("fit", D + "train_llama3_8b.sh", "--no-sequence-parallel", "--top", "5", "--format", "json")
    searched, _, rest = _line(r.stderr, "fit searches the plan").partition("are searched over")
    assert "tp_comm_overlap" not in searched
    assert ("the file's tp_comm_overlap=false is not searched: every row runs without TP overlap, as the command line's "
            "--no-sequence-parallel leaves no row it runs in") in rest
    assert not any(x["plan"]["tp_comm_overlap"] for x in _json(r)["rows"])


def _job_yaml(tmp_path, name, **fields):
    """A planner job file (YAML) of Llama 3 8B on 8 H100, megatron, global batch 128, seq 8,192, TP 2 with SP and TP
    overlap, with `fields` on top (key: YAML value text)."""
    base = dict(model="llama3-8b", hardware="h100-sxm", gpus="8", stack="megatron", global_batch="128",
                seq_len="8192", tp="2", sequence_parallel="true", tp_comm_overlap="true")
    path = tmp_path / name
    path.write_text("".join(f"{k}: {v}\n" for k, v in {**base, **fields}.items()))
    return path


def _note_parts(r) -> tuple[str, str]:
    """(the searched list, the rest) of the 'fit searches the plan' note."""
    note = _line(r.stderr, "fit searches the plan").partition("fit searches the plan:")[2]  # past the file's path
    searched, _, rest = note.partition("are searched over")
    return searched, rest


@pytest.mark.parametrize("fields, said", [
    # Megatron-LM @d98e8a64 determinism.py l. 24, 141-148: --deterministic-mode refuses --tp-comm-overlap
    (dict(deterministic_mode="true"), "start-up rule MEGATRON_DETERMINISTIC_TP_OVERLAP (code 91) refuses it: "
                                      "deterministic_mode refuses TP communication overlap"),
    # TE's userbuffers have no Float8BlockQuantizer branch (@4329ff84 base.py l. 720): the pinned recipe refuses it
    (dict(precision="fp8", fp8_recipe="blockwise"), "start-up rule MEGATRON_TP_OVERLAP_QUANTIZER (code 106) refuses it "
                                                   "(fp8 recipe blockwise): TP communication overlap"),
])
def test_the_files_tp_comm_overlap_a_rule_refuses_is_said_not_searched(cli, tmp_path, fields, said):
    """The stack tries TP overlap off and on (space.variant_choices), but a setting of the file makes a start-up rule
    refuse every overlapped row (startup.OVERLAP_RULES): the note says tp_comm_overlap=true is not searched and names
    the rule, and no ranked row has it. The same file without that setting (delayed fp8 for the recipe) lists it among
    the searched values (so the check can fail)."""
    r = cli("fit", _job_yaml(tmp_path, "job.yaml", **fields), "--top", "10", "--format", "json")
    searched, rest = _note_parts(r)
    assert "tp_comm_overlap" not in searched and "sequence_parallel=true" in searched
    assert f"the file's tp_comm_overlap=true is not searched: every row runs without TP overlap, as {said}" in rest
    assert not any(x["plan"]["tp_comm_overlap"] for x in _json(r)["rows"])
    plain = {k: v for k, v in fields.items() if k != "deterministic_mode"}
    plain = {**plain, "fp8_recipe": "delayed"} if "fp8_recipe" in plain else plain
    r = cli("fit", _job_yaml(tmp_path, "plain.yaml", **plain), "--top", "1", "--format", "json")
    searched, rest = _note_parts(r)
    assert "tp_comm_overlap=true" in searched and "is not searched" not in rest


def test_the_files_tp_comm_overlap_refused_by_the_mla_fusion_rule(cli, tmp_path):
    """DeepSeek-V2 (q_lora_rank 1536) with mla_down_proj_fusion on megatron, trainer_date 2025-03-01 (before
    4e6ae3a2d2, 2025-04-24, from which the stack turns TP overlap off for MLA: the search would not try it at all):
    the search tries the overlap, but start-up rule MEGATRON_MLA_FUSION_TP_OVERLAP (code 101) refuses every overlapped
    row; the note says so."""
    path = _job_yaml(tmp_path, "mla.yaml", model="deepseek-v2", gpus="256", global_batch="1024", seq_len="4096",
                     mla_down_proj_fusion="true", trainer_date='"2025-03-01"')
    r = cli("fit", path, "--top", "3", "--format", "json")
    searched, rest = _note_parts(r)
    assert "tp_comm_overlap" not in searched
    assert ("the file's tp_comm_overlap=true is not searched: every row runs without TP overlap, as start-up rule "
            "MEGATRON_MLA_FUSION_TP_OVERLAP (code 101) refuses it") in rest
    assert not any(x["plan"]["tp_comm_overlap"] for x in _json(r)["rows"])


def test_the_files_sequence_parallel_under_a_tp_1_pin_is_said_not_searched(cli, tmp_path):
    """With --tp 1 every row runs without SP (space: SP only where tp > 1): the file's sequence_parallel=true is said
    not searched, not listed among the searched values, and every row has tp 1 without SP; without the pin it is
    listed (test_the_files_tp_comm_overlap_a_rule_refuses_is_said_not_searched)."""
    r = cli("fit", _job_yaml(tmp_path, "job.yaml"), "--tp", "1", "--top", "5", "--format", "json")
    note = _line(r.stderr, "fit searches the plan").partition("fit searches the plan:")[2]
    # nothing the file sets is searched now: tp pinned, SP and the overlap at one value
    assert note.startswith(" its own plan is priced and ranked below;") and "are searched over" not in note
    assert ("the file's sequence_parallel=true is not searched: every row runs without sequence parallelism, as the "
            "command line's --tp 1 leaves no row it runs in (it splits across TP ranks)") in note
    rows = _json(r)["rows"]
    assert rows and all(x["plan"]["tp"] == 1 and not x["plan"]["sequence_parallel"] for x in rows)


DSV3 = D + "deepseek_v3_2048_h800.yaml"  # DeepSeek-V3's published layout (PP 16, EP 64, ZeRO-1) on 2,048 H800, megatron


@pytest.fixture(scope="module")
def dsv3_fit():
    """`planner fit DSV3 --top 3 --format json`, run once for the module (the search of 2,048 GPUs with the
    dispatchers searched is the file's slowest): test_the_deepseek_v3_layouts_rank reads its JSON and stderr,
    test_the_files_moe_dispatcher_is_searched_as_tp_overlap_is the plain file's notes on stderr (the notes are the
    same in every format: render/fit.py emit_fit adds only the counts line for a machine format). Nothing mutates it."""
    from conftest import _Run

    return _Run()("fit", DSV3, "--top", "3", "--format", "json")


def _ranks(path, overrides: dict, objective: str = "time") -> tuple:
    """fit CONFIG's rank of the file's own plan two ways, as planner/cli/fit.py runs them: the pruned search
    widened to the plan's keys (search.fit around=, what fit CONFIG runs) and every fitting plan priced
    (keep_feasible, as --plot runs); each with its FitResult."""
    from pathlib import Path

    from planner.cli.fit_config import config_jobs, price_config
    from planner.search import fit, rank_config, row_objective

    from planner.cli.fit_config import widen_to_plan
    from planner.space import SpaceOptions

    job, own, where, trainer = config_jobs(Path(path), overrides, {}, None)
    res, why = price_config(own, where, trainer, False)
    assert why is None, why
    opts, _ = widen_to_plan(SpaceOptions(), res["plan"], job, set(), where)  # as fit.py: no bound given on the command line
    fast = fit(job, opts=opts, objective=objective, search_dispatchers=True, around=row_objective(res, objective))
    brute = fit(job, opts=opts, objective=objective, search_dispatchers=True, keep_feasible=True)
    return rank_config(fast, res), fast, rank_config(brute, res), brute


@pytest.mark.parametrize("path,overrides,objectives", [
    (D + "train_llama3_8b.sh", {}, ("time", "memory", "cost")),  # dense, Megatron-LM launch script (8 GPUs)
    (TOML, dict(gpus=64, hardware="a100-sxm-80gb"), ("time", "memory")),  # torchtitan TOML
    (DS, dict(model="llama3-8b", gpus=8, seq_len=4096), ("time", "cost")),  # DeepSpeed JSON
    ("llama3-405b", {}, ("time",)),  # a job YAML whose fitting plans are many (the prefilter runs)
    (DSV3, {}, ("time",)),  # MoE, the dispatchers searched
])
def test_the_pruned_rank_is_the_rank_among_every_fitting_plan(tmp_path, path, overrides, objectives):
    """The rank fit CONFIG gives (its search's bounds widened to the file's plan: every plan that can sort
    before it priced, no other) equals the rank counted among every fitting plan's step at every order
    (keep_feasible), for each objective, and the rows are the same; `of` is the counts line's "fit" (with
    the file's plan where no searched plan prices the same)."""
    if path == "llama3-405b":  # Llama 3 405B on 16,384 H100 at Meta's TP 8, PP 16 (arXiv:2407.21783 Table 4), ZeRO-1, full recompute
        path = tmp_path / "job.yaml"
        path.write_text("model: llama3-405b\ngpus: 16384\ntp: 8\npp: 16\nsharding: zero1\nrecompute: full\n")
    for objective in objectives:
        fast, f, brute, b = _ranks(path, overrides, objective)
        assert fast == brute, (objective, fast, brute)
        assert [(r["time"]["step_s"], r["memory"]["total_bytes"]) for r in f.rows] == \
            [(r["time"]["step_s"], r["memory"]["total_bytes"]) for r in b.rows]
        assert fast["of"] == f.counts.feasible + (0 if fast["searched"] else 1)
        assert 1 < fast["rank"] <= fast["of"]  # the cases' own plans are not the top row
        # the pruning ran: fewer steps priced than every fitting plan's (at the time of writing: DeepSeek-V3
        # 192,053 of 1,556,764; Llama 3 405B, whose own plan ranks 6,039th, 81,270 of 129,393)
        if objective != "memory" and f.counts.feasible > 20000:
            assert f.counts.time_evaluations < b.counts.time_evaluations and f.counts.prefilter_dropped > 0


def test_the_deepseek_v3_layouts_rank(cli, dsv3_fit):
    """fit CONFIG on DeepSeek-V3's published layout: 61 layers on PP 16 leave 64 - 61 = 3 layer slots empty,
    beyond the default --max-layer-slack 2 (README "DeepSeek-V3"): fit widens the bound to 3 for that split only,
    with a note, so a searched plan prices the same and `of` is the counts line's "fit"; the rank line's figures
    are the JSON's. A --max-layer-slack given on the command line is never widened: the plan then lies outside the
    searched space, `of` counts it beside the counts line's "fit", and the rank line says so."""
    r = dsv3_fit
    cp = _json(r)["config_plan"]
    own = cp["explain"]["plan"]
    assert (own["tp"], own["pp"], own["vpp"], own["ep"], own["dp"], own["recompute"]) == (1, 16, 1, 64, 128, "full")
    assert (f"{DSV3}: --max-layer-slack 2 -> 3 for the file's split only, to include its PP 16 over 61 layers "
            "(3 of its 64 layer slots empty; the other splits keep 2)") in r.stderr
    fitting = int(re.search(r"([\d,]+) fit", r.stderr)[1].replace(",", ""))
    assert cp["searched"] is True and cp["of"] == fitting
    line = _line(r.stderr, "your config's plan")
    assert f"rank {cp['rank']:,} of {cp['of']:,}, step" in line and "no searched plan prices the same" not in line
    given = cli("fit", DSV3, "--top", "3", "--format", "json", "--max-layer-slack", "2")
    cg = _json(given)["config_plan"]
    assert "--max-layer-slack 2 ->" not in given.stderr
    fitting = int(re.search(r"([\d,]+) fit", given.stderr)[1].replace(",", ""))
    # the bounded space lacks the PP 16 plans the widened one ranks before the file's (3,223 against 3,742 at the time
    # of writing)
    assert cg["searched"] is False and cg["of"] == fitting + 1 and cg["rank"] < cp["rank"]
    assert "no searched plan prices the same" in _line(given.stderr, "your config's plan")


def test_the_files_moe_dispatcher_is_searched_as_tp_overlap_is(cli, tmp_path, dsv3_fit):
    """A job YAML's moe_dispatcher is a stack option fit CONFIG searches (every dispatcher the stack runs, the
    faster per plan), as it searches the file's tp_comm_overlap: listed in the "fit searches the plan" note; the
    dispatcher note says `explain CONFIG` takes the file's; a row on another dispatcher names it in its explain
    command. DeepSeek-V3's recipe dispatcher (deepep) is not the file's and is not listed; --moe-dispatcher pins
    one (no search, nothing listed)."""
    path = tmp_path / "dsv3.yaml"
    path.write_text(open(DSV3).read() + "moe_dispatcher: alltoall\n")
    r, rows = fit_table_and_rows(cli, str(path), "--top", "1")  # one search: the table and the JSON's rows (conftest)
    assert r.exit_code == 0, r.stderr
    assert rows is not None and len(rows) == 1
    assert "recompute=full, moe_dispatcher=alltoall are searched over, not pinned" in _line(r.stderr, "fit searches the plan")
    assert "explain and check take alltoall without --moe-dispatcher" in _line(r.stderr, "MoE dispatcher searched")
    assert "hybridep," in r.stdout and "--moe-dispatcher hybridep" in r.stdout  # row 1 on Hybrid-EP, its command says so
    cmd = re.search(r"row 1 in full: planner explain (.*)", r.stdout)[1].split()
    j = rows[0]  # row 1 as `fit --top 1 --format json` prints it, not searched again
    e = _json(cli("explain", *cmd, "--format", "json"))  # without --moe-dispatcher it would price the file's alltoall
    assert (e["plan"]["moe_dispatcher"], e["time"], e["memory"]) == ("hybridep", j["time"], j["memory"])
    plain = dsv3_fit  # the file without moe_dispatcher (its notes as the table run's: emit_fit)
    assert plain.exit_code == 0, plain.stderr
    assert "moe_dispatcher=" not in _line(plain.stderr, "fit searches the plan")
    assert "explain and check take deepep without --moe-dispatcher" in _line(plain.stderr, "MoE dispatcher searched")
    pinned = cli("fit", str(path), "--top", "1", "--moe-dispatcher", "deepep")
    assert pinned.exit_code == 0, pinned.stderr
    assert "moe_dispatcher=" not in _line(pinned.stderr, "fit searches the plan")
    assert "MoE dispatcher searched" not in pinned.stderr


def test_with_a_plot_the_rank_is_the_same(cli, tmp_path):
    """--plot prices every fitting plan (keep_feasible), and rank_config then counts over all of them: the same
    rank and `of` as the pruned search without --plot."""
    args = (TOML, "--gpus", "64", "--hardware", "a100-sxm-80gb", "--top", "3", "--format", "json")
    plain = _json(cli("fit", *args))["config_plan"]
    plotted = _json(cli("fit", *args, "--plot", str(tmp_path / "fit.svg")))["config_plan"]
    assert (tmp_path / "fit.svg").exists()
    assert (plain["rank"], plain["of"], plain["searched"]) == (plotted["rank"], plotted["of"], plotted["searched"]) == \
        (24, 5471, True)  # 5,471: test_a_torchtitan_toml_needs_gpus_and_ranks_as_a_plain_fit_of_the_same_job; rank 24
    # since a GEMM's output write is priced after its K loop (compute [5a]; 25 before: README's fit example)


def test_widen_to_plan_by_hand():
    """widen_to_plan on llama3-8b's 32 layers: PP 5 holds ceil(32 / 5) = 7 layers a stage, 5 x 7 - 32 = 3 slots
    empty, past the default slack 2: that split alone is searched (SpaceOptions.splits), the bound kept; PP 4
    (slack 0) widens nothing; an order with TP not innermost is added to the TP-inner six; a bound given on the
    command line is never widened."""
    from planner.cli.fit_config import widen_to_plan
    from planner.schema import Job
    from planner.space import SpaceOptions, build_space, order_choices, settings_for

    job = Job(model="llama3-8b", gpus=40, global_batch=40, seq_len=8192)
    plan = dict(pp=5, vpp=1, rank_order="tp-cp-dp-pp")
    opts, notes = widen_to_plan(SpaceOptions(), plan, job, set())
    assert (opts.splits, opts.max_layer_slack, opts.rank_orders) == (((5, 1),), 2, SpaceOptions().rank_orders)
    assert notes == ["--max-layer-slack 2 -> 3 for the file's split only, to include its PP 5 over 32 layers (3 of its "
                     "35 layer slots empty; the other splits keep 2); --max-layer-slack N bounds it"]
    assert widen_to_plan(SpaceOptions(), plan, job, {"max_layer_slack"}) == (SpaceOptions(), [])
    assert widen_to_plan(SpaceOptions(), dict(plan, pp=4), job, set()) == (SpaceOptions(), [])
    # the space: PP 5 splits at vpp 1 only join it (vpp 2: 10 chunks of 4 = 40, slack 8, still out)
    settings = settings_for(job)[0]
    plain, wide = (build_space(settings, 40, 8192, opts=o) for o in (SpaceOptions(), opts))
    assert 5 not in set(plain.base.pp.tolist()) and set(wide.base.vpp[wide.base.pp == 5].tolist()) == {1}
    assert wide.slack_dropped < plain.slack_dropped
    opts, notes = widen_to_plan(SpaceOptions(), dict(pp=1, vpp=1, rank_order="cp-tp-dp-pp"), job, set())
    assert set(order_choices(opts.rank_orders)) == set(order_choices("tp-inner")) | set(order_choices(("cp-tp-dp-pp",)))
    assert notes == ["--rank-orders tp-inner -> tp-inner and cp-tp-dp-pp to include the file's rank order; "
                     "--rank-orders bounds it"]
    assert widen_to_plan(SpaceOptions(), dict(pp=1, vpp=1, rank_order="cp-tp-dp-pp"), job, {"rank_orders"})[1] == []
