"""planner/field_options.py: the job fields that spell one setting two or three ways (SPELLINGS), of which a
command-line spelling replaces the file's others (command_line_spellings; issue 22, flags beat file values)."""

from __future__ import annotations

import json

from planner.field_options import command_line_spellings


def test_command_line_spellings_by_hand():
    """By hand from the rules SPELLINGS cites: file global_batch 16 with --global-batch-tokens 1,048,576 -> the file's
    global_batch out, named; a schedule 0:16 1M:32 with --global-batch 32 (its last batch: one batch) -> kept, with
    --global-batch 64 -> out; make_vocab_size_divisible_by 128 with --padded-vocab-size 128,512 -> out (resolve
    refuses the two together); account_for_loss true with --loss-layers-in-pipeline-split 2 -> out, with 1 (the
    flag's own 1 layer) -> kept; the file's own two spellings, with no option, are left for the schema to refuse."""
    data = {"global_batch": 16, "seq_len": 4096}
    assert command_line_spellings(data, {"global_batch_tokens": 1048576.0}) == [
        "global_batch: the file's 16 is not kept: the command line's global_batch_tokens 1048576.0 replaces it"]
    assert data == {"seq_len": 4096}
    ramp = [{"from_tokens": 0.0, "global_batch": 16}, {"from_tokens": 1e6, "global_batch": 32}]
    data = {"batch_size_schedule": ramp, "global_batch": 32}
    assert command_line_spellings(data, {"global_batch": 32}) == [] and data["batch_size_schedule"] == ramp
    assert command_line_spellings(data, {"global_batch": 64}) == [
        "batch_size_schedule: the file's \"0:16 1M:32\" is not kept: the command line's global_batch 64 replaces it"]
    data = {"global_batch": 32}
    assert command_line_spellings(data, {"batch_size_schedule": ramp}) == [] and data == {"global_batch": 32}
    data = {"make_vocab_size_divisible_by": 128}
    assert command_line_spellings(data, {"padded_vocab_size": 128512}) == [
        "make_vocab_size_divisible_by: the file's 128 is not kept: the command line's padded_vocab_size 128512 "
        "replaces it"] and data == {}
    data = {"account_for_loss_in_pipeline_split": True}
    assert command_line_spellings(dict(data), {"loss_layers_in_pipeline_split": 1}) == []
    assert command_line_spellings(data, {"loss_layers_in_pipeline_split": 2}) == [
        "account_for_loss_in_pipeline_split: the file's True is not kept: the command line's "
        "loss_layers_in_pipeline_split 2 replaces it"] and data == {}
    assert command_line_spellings({"loss_layers_in_pipeline_split": 2}, {"account_for_loss_in_pipeline_split": False}) == []
    data = {"global_batch": 16, "global_batch_tokens": 65536.0}
    assert command_line_spellings(data, {"tp": 2}) == [] and len(data) == 2


def test_cli_spelling_options_over_the_files_other_spelling(cli, tmp_path):
    """`explain JOB.yaml --padded-vocab-size 128512` over a job file's make_vocab_size_divisible_by, and
    `--loss-layers-in-pipeline-split 2` over its account_for_loss_in_pipeline_split: true, were refused ("give one of
    the two", exit 2) though each option alone is valid; now the option's value is the plan's, with a note naming the
    file's. Found in the fuzz78 session by hand, after the batch spellings' case."""
    job = tmp_path / "job.yaml"
    base = "model: llama3-8b\ngpus: 8\npp: 2\nsharding: zero1\nglobal_batch: 16\nseq_len: 4096\n"
    job.write_text(base + "make_vocab_size_divisible_by: 128\n")
    r = cli("explain", job, "--padded-vocab-size", "128512", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["padded_vocab_size"] == 128512
    assert "make_vocab_size_divisible_by: the file's 128 is not kept" in r.stderr
    job.write_text(base + "account_for_loss_in_pipeline_split: true\n")
    r = cli("explain", job, "--loss-layers-in-pipeline-split", "2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["loss_layers_in_pipeline_split"] == 2 and not plan["account_for_loss_in_pipeline_split"]
    assert "account_for_loss_in_pipeline_split: the file's True is not kept" in r.stderr
