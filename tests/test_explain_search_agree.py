"""explain and search price a plan alike, for each mechanism merged in the session of hostcal, mds2021pp,
metaoverlap, tecp and bigsci (review6): `fit` prices many plans as one 1-d PlanArrays (search.rows_of), `explain` of
each row's reproduce line (search.explain_args) one 0-d plan; the two must give the same time and memory terms. Each
case first checks that its rows run the mechanism (the term it moves is there), so the comparison cannot pass on
plans that leave it out:

- llama3-meta's per-micro-batch reduce-scatters queued behind the schedule (step.py [26], pipeline.py [12]);
- TP overlap's userbuffers by Transformer Engine release (memory.py [ub], --te-version 1.8: 10 buffers);
- TE CP's P2P backward second-half softmax-statistics copy (memory.py [cp5]);
- DeepSpeed a12aaedc's bisection split and activations-only partitioned sends (megatron-deepspeed-2021: pipeline.py
  [11], step.py [25]);
- BigScience's three optimizer groups' bucket copies (megatron-deepspeed-bigscience, memory.py [bo]);
- the host Adam's calibrated fraction (a profile's host_adam section, planner/calibrate/host_adam.py) under CPU
  offload, beside --host-memory-gbps / --pcie-gbps / --host-memory-gb.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import explain_each_row
from planner.schema import Job

FUZZ = Path(__file__).resolve().parent / "data" / "fuzz_issue24"


def _agree(cli, job: Job, fit_args: list[str], least: int = 2) -> list[dict]:
    """fit's rows and explain of each row's reproduce line: the same time terms, memory terms, stage totals and
    (where CPU offload runs) host block. The rows, for the caller's checks that they run the mechanism."""
    r = cli("fit", *fit_args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) >= least, [row["plan"] for row in rows]
    for row, one in explain_each_row(cli, job, rows):
        assert one["time"] == row["time"], row["plan"]
        assert one["memory"]["terms"] == row["memory"]["terms"], row["plan"]
        assert one["memory"]["stages"] == row["memory"]["stages"], row["plan"]
        assert one["memory"].get("host") == row["memory"].get("host"), row["plan"]
    return rows


def test_queued_reductions_on_llama3_meta(cli):
    """llama3-meta (overlap.grad_reduce_queued): the interleaved rows' queued per-micro-batch reduce-scatters
    (dp_comm_exposed_s from pipeline.reduce_queue_overrun), pp 2 and 4, several chunk counts."""
    base = ["--model", "llama3-8b", "--gpus", "32", "--stack", "llama3-meta", "--seq-len", "8192",
            "--global-batch", "64"]
    job = Job(model="llama3-8b", gpus=32, stack="llama3-meta", seq_len=8192, global_batch=64)
    rows = _agree(cli, job, base + ["--tp", "2", "--cp", "1", "--pp", "2,4", "--top", "6"], least=3)
    assert len({row["plan"]["vpp"] for row in rows}) >= 2  # interleaved rows of several depths (17 and 9 chunks)
    for row in rows:
        assert row["plan"]["sharding_mode"] == "fsdp_no_reshard" and row["plan"]["schedule"] == "interleaved"
        assert row["plan"]["pp"] > 1 and row["time"]["dp_comm_exposed_s"] > 0


def test_te_version_userbuffers(cli):
    """--te-version 1.8 with TP overlap on megatron: 10 userbuffers (6 all-gather, 4 reduce-scatter) of 2 B x T h
    each in bf16 (20 B x T h), and the overlapped GEMMs' 3 workspaces in place of the plain one, at tp 2 and 4."""
    base = ["--model", "llama3-8b", "--gpus", "16", "--stack", "megatron", "--seq-len", "8192",
            "--tp-comm-overlap", "--te-version", "1.8", "--cp", "1", "--pp", "1"]
    job = Job(model="llama3-8b", gpus=16, stack="megatron", seq_len=8192, tp_comm_overlap=True, te_version="1.8",
              cp=1, pp=1)
    rows = _agree(cli, job, base + ["--tp", "2,4", "--top", "6"])
    assert {row["plan"]["tp"] for row in rows} == {2, 4}
    for row in rows:
        assert row["plan"]["te_version"] == "1.8"
        tokens = row["plan"]["micro_batch"] * 8192
        assert row["plan"]["tp_comm_overlap"] is True
        assert row["memory"]["terms"]["tp_overlap_buffers"] >= 20 * tokens * 4096


def test_cp_lse_copy(cli):
    """TE's P2P CP backward's second-half lse copy (memory.cp_backward_lse_copy_bytes, 2 B a local token and query
    head a layer) at cp 2 and 4 on megatron: priced alike in fit's rows and their explain."""
    from planner import memory
    from planner.catalog import load_model
    from planner.params import count_params
    from planner.plan import resolve
    from planner.search import row_job
    from planner.stacks import plan_context

    base = ["--model", "llama3-8b", "--gpus", "16", "--stack", "megatron", "--seq-len", "16384", "--tp", "1",
            "--pp", "1", "--cp-comm-type", "p2p"]
    job = Job(model="llama3-8b", gpus=16, stack="megatron", seq_len=16384, tp=1, pp=1, cp_comm_type="p2p")
    rows = _agree(cli, job, base + ["--cp", "2,4", "--top", "6"])
    assert {row["plan"]["cp"] for row in rows} == {2, 4}
    kind = count_params(load_model("llama3-8b")).layers.kinds[0]
    for row in rows:
        settings, plan, _ = resolve(row_job(job, row))
        # 2 B x the local tokens (micro-batch x 16,384 / cp) x 32 heads, one layer's
        want = 2.0 * row["plan"]["micro_batch"] * 16384 / row["plan"]["cp"] * 32
        assert float(memory.cp_backward_lse_copy_bytes(kind, plan_context(settings, plan))) == want


def test_bisection_split_and_activations_only_sends(cli, tmp_path):
    """megatron-deepspeed-2021: 32 layers on pp 3 and 5 (DeepSpeed a12aaedc's bisection: 11, 11, 10 and 7, 7, 7, 7,
    4) at tp 2 (the activations-only partitioned sends), on Megatron GPT 1.7B's shape with 32 layers (Llama 3 8B's
    count; the 2021 fork builds no Llama layer, stack_db runs.layer_kinds global not_built, mdsfork2)."""
    import yaml

    spec = yaml.safe_load((Path(__file__).parents[1] / "model_zoo" / "megatron-gpt-1.7b.yaml").read_text())
    spec.update(name="gpt-32-layers", num_layers=32)
    model = tmp_path / "gpt-32-layers.yaml"
    model.write_text(yaml.safe_dump(spec))
    base = ["--model", str(model), "--stack", "megatron-deepspeed-2021", "--seq-len", "2048", "--sharding", "zero1",
            "--micro-batch", "1", "--tp", "2", "--recompute", "full"]
    rows = []
    for gpus, pp in ((12, 3), (20, 5)):
        job = Job(model=str(model), gpus=gpus, stack="megatron-deepspeed-2021", seq_len=2048, sharding="zero1",
                  micro_batch=1, tp=2, pp=pp, recompute="full")
        rows += [(row, job) for row in _agree(cli, job, base + ["--gpus", str(gpus), "--pp", str(pp), "--top", "2"],
                                              least=1)]
    from planner.plan import resolve
    from planner.search import row_job

    for row, job in rows:
        assert resolve(row_job(job, row))[0].pipe_partitioned and row["time"]["pp_comm_s"] > 0, row["plan"]
    rows = [row for row, _ in rows]
    stages = {row["plan"]["pp"]: row["memory"]["stages"] for row in rows}
    assert stages[5]["last"]["weights_bytes"] < stages[5]["middle"]["weights_bytes"]  # 4 layers against 7


def test_bigscience_three_groups(cli):
    """megatron-deepspeed-bigscience: the BF16_Optimizer's bucket copy over the three groups (bf16_reduce_copy) on
    every stage, pp 1, 2 and 4 at tp 2 under full recompute (the first stage holds the tied embedding at the front of
    its first half)."""
    base = ["--model", "megatron-gpt-1.7b", "--gpus", "16", "--stack", "megatron-deepspeed-bigscience",
            "--hardware", "a100-sxm-80gb", "--global-batch", "64", "--tp", "2", "--recompute", "full"]
    job = Job(model="megatron-gpt-1.7b", gpus=16, stack="megatron-deepspeed-bigscience", hardware="a100-sxm-80gb",
              global_batch=64, tp=2, recompute="full")
    rows = _agree(cli, job, base + ["--pp", "1,2,4", "--top", "6"])
    # the copy outlasts the step's other moments where the micro-batch is small (full recompute: little kept)
    assert {row["plan"]["pp"] for row in rows if row["memory"]["terms"]["bf16_reduce_copy"] > 0} >= {1, 2}


def test_host_adam_calibration_and_host_fields(cli, tmp_path):
    """CPU offload on megatron-deepspeed ZeRO-2 with a profile's host_adam section (calibrate host-adam on the
    records of tests/data/host_adam: 8 x 1e9 x 28 B / (0.8 s x 563.2 GB/s) = 0.4972, the median of 0.3977, 0.4972
    and 0.5682) and the job's host (pcie_gbps 32, host_memory_gbps
    400, host_memory_gb 1024). fit does not search CPU offload, so the batch is built as search builds one: three
    plans (micro-batch 1, 2, 4) as one 1-d PlanArrays under one Settings, each row priced as explain prices it
    alone, with the same calibrated fraction, host Adam, copies and host block."""
    from pathlib import Path

    from planner.explain import evaluate, to_json
    from planner.plan import PlanArrays, resolve

    prof = tmp_path / "profile.yaml"
    data = Path(__file__).parent / "data" / "host_adam" / "records.yaml"
    r = cli("calibrate", "host-adam", str(data), "--hardware", "h100-sxm", "-o", str(prof))
    assert r.exit_code == 0, r.stderr
    kw = dict(model="llama3-8b", gpus=16, tp=2, pp=1, stack="megatron-deepspeed", seq_len=4096, sharding="zero2",
              offload_optimizer="cpu", calibration=str(prof), pcie_gbps=32, host_memory_gbps=400, host_memory_gb=1024,
              global_batch=64)
    alone = [resolve(Job(**kw, micro_batch=mb))[:2] for mb in (1, 2, 4)]
    settings = alone[0][0]
    assert settings.host_adam_calibrated and settings.host_adam_efficiency == pytest.approx(8 * 1e9 * 28 / (0.8 * 563.2e9),
                                                                                          rel=1e-12)
    fields = PlanArrays.__dataclass_fields__
    batch = PlanArrays(**{f: np.concatenate([np.atleast_1d(getattr(p, f)) for _, p in alone]) for f in fields})
    est = evaluate(settings, batch)
    for i, (s_i, p_i) in enumerate(alone):
        one = to_json(s_i, p_i, evaluate(s_i, p_i))
        row = to_json(settings, batch, est, i)
        assert row["plan"]["micro_batch"] == one["plan"]["micro_batch"] == (1, 2, 4)[i]
        assert row["time"] == one["time"], i
        assert row["memory"]["terms"] == one["memory"]["terms"], i
        assert row["memory"]["host"] == one["memory"]["host"], i
        host = one["memory"]["host"]
        assert host["adam_efficiency"] == settings.host_adam_efficiency and "host_adam" in host["adam_efficiency_source"]
        assert host["capacity_bytes_per_node"] == 1024e9
        assert one["time"]["optimizer_s"] > 0


def test_padded_vocabulary_per_tp_on_megatron(cli):
    """fit on megatron pads Llama 3's 128,256 tokens per candidate's tp as Megatron builds them (stack_db megatron
    vocab_padding: a multiple of 128 x tp; search.vocab_spaces): tp 1 and 2 keep 128,256 (128 x 1,002 = 256 x 501),
    tp 4 128,512 (251 x 512), tp 8 129,024 (126 x 1,024); explain of each row's line (no --padded-vocab-size: the
    stack pads at the row's tp) prices the same rows."""
    base = ["--model", "llama3-8b", "--gpus", "16", "--stack", "megatron", "--seq-len", "4096", "--global-batch", "64",
            "--cp", "1", "--pp", "1"]
    job = Job(model="llama3-8b", gpus=16, stack="megatron", seq_len=4096, global_batch=64, cp=1, pp=1)
    want = {1: None, 2: None, 4: 128512, 8: 129024}
    for tp in (1, 2, 4, 8):
        rows = _agree(cli, job, base + ["--tp", str(tp), "--top", "3"], least=1)
        for row in rows:
            assert row["plan"].get("vocab_rows") == want[tp]
            assert row["params"]["embedding"] == (want[tp] or 128256) * 4096


def test_job_power_limit_in_the_reproduce_line(cli):
    """A job's GPU power limit (--power-limit-w 500 on H100 SXM's 700 W) is in each fit row's reproduce line: the
    line had left it out (search.stack_args asked the row's job fields for power_limit_source, which they do not
    hold), so explain priced the row at the hardware's 700 W: the job-fields fuzz pass (scripts/fuzz.py --seed 64,
    tests/data/fuzz_issue24/job-fields-20-36.yaml) found explain's compute 0.683 s against fit's 1.008 s at 200 W.
    At 500 W the tensor cores run at (500/700)^(1/3) = 0.893904 of their rate (tests/test_power.py)."""
    from planner.search import explain_args

    base = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--global-batch", "16", "--power-limit-w", "500"]
    job = Job(model="llama3-8b", gpus=8, seq_len=4096, global_batch=16, power_limit_w=500)
    rows = _agree(cli, job, base + ["--top", "3"])
    for row in rows:
        assert (row["plan"]["power_limit_w"], row["plan"]["power_limit_source"]) == (500.0, "job")
        assert row["plan"]["tensor_rate_fraction"] == pytest.approx(0.893904, abs=1e-6)
        args = explain_args(job, row)
        assert args[args.index("--power-limit-w") + 1] == "500.0"
    # the hardware's own limit is not a job field: no option for it
    job700 = Job(model="llama3-8b", gpus=8, seq_len=4096, global_batch=16)
    rows = _agree(cli, job700, base[:-2] + ["--top", "1"], least=1)
    assert rows[0]["plan"]["power_limit_source"] == "tdp" and "--power-limit-w" not in explain_args(job700, rows[0])


def test_unfused_wgrad_add_in_the_search(cli):
    """Without gradient-accumulation fusion (Megatron --no-gradient-accumulation-fusion) the layer's backward adds each
    weight gradient by a kernel of its own, except under FSDP (step.wgrad_add_bytes [11]): the compute floor reads
    the sharding level. The search's floor grouped the candidates without it (KeyError 'plan.sharding was read':
    every fit with the switch off; the job-fields fuzz pass, seed 64, tests/data/fuzz_issue24/job-fields-3-12.yaml).
    Rows below FSDP carry the add (unfused_passes_s > 0), FSDP rows none, and explain prices each row alike."""
    base = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--global-batch", "16",
            "--no-gradient-accumulation-fusion"]
    job = Job(model="llama3-8b", gpus=8, seq_len=4096, global_batch=16, gradient_accumulation_fusion=False)
    below = _agree(cli, job, base + ["--sharding", "zero1", "--top", "3"])
    fsdp = _agree(cli, job, base + ["--sharding", "fsdp", "--top", "3"])
    assert all(row["plan"]["sharding"] == "zero1" and row["time"]["unfused_passes_s"] > 0.0 for row in below)
    # torch FSDP2 rows none; a Megatron-FSDP row (in the top 3 since a GEMM's output write is priced, compute [5a])
    # its hook's copy into the unsharded bucket (step.wgrad_add_bytes: memory.mfsdp_hook_unfused)
    assert all(row["plan"]["sharding"] == "fsdp" for row in fsdp)
    assert all((row["time"]["unfused_passes_s"] > 0.0) == row["plan"]["sharding_mode"].startswith("megatron_fsdp")
               for row in fsdp)
    assert any(row["plan"]["sharding_mode"] == "torch_fsdp2" for row in fsdp)


@pytest.mark.parametrize("stack", ["megatron", "torchtitan"])
def test_korthikanti_activations_with_fp8_in_the_search(cli, stack):
    """activation_model korthikanti with fp8: the search prices its candidates' fp8 recipes as one array, so a
    layer's tensor bytes are arrays, and kind_tensors' scale to Korthikanti's 34 sbh took their truth value
    (ValueError: every `fit --precision fp8 --activation-model korthikanti`; the job-fields fuzz pass, seed 64,
    tests/data/fuzz_issue24/job-fields-16-3.yaml). Each row now priced as explain prices it."""
    base = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096", "--global-batch", "16", "--stack", stack,
            "--precision", "fp8", "--activation-model", "korthikanti"]
    job = Job(model="llama3-8b", gpus=8, seq_len=4096, global_batch=16, stack=stack, precision="fp8",
              activation_model="korthikanti")
    rows = _agree(cli, job, base + ["--top", "3"])
    assert all(row["plan"]["activation_model"] == "korthikanti" and row["plan"]["precision"] == "fp8" for row in rows)


def _config_rows_agree(cli, path, least: int = 2) -> list[dict]:
    """`fit JOB.yaml`'s rows and explain of the line it prints for each (search.config_explain_args: `explain
    JOB.yaml` with the row's plan): exit 0, the same time terms, memory terms and stage totals. The rows."""
    from planner.cli.fit_config import config_jobs, file_axes
    from planner.search import config_explain_args

    r = cli("fit", path, "--top", "3", "--format", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert len(rows) >= least
    job, own = config_jobs(Path(path), {}, {}, None)[:2]
    for row in rows:
        line = config_explain_args(str(path), job, row, file_axes(own))
        one = cli("explain", *line, "--format", "json")
        assert one.exit_code == 0, (line, one.stderr)
        one = json.loads(one.stdout)
        assert one["time"] == row["time"], line
        assert one["memory"]["terms"] == row["memory"]["terms"] and one["memory"]["stages"] == row["memory"]["stages"], line
    return rows


def test_config_line_mode_replaces_the_files_level(cli, tmp_path):
    """A job YAML with `sharding: zero1` whose best rows are FSDP modes (torch_fsdp2 on 8 GPUs): fit prints each row
    as `explain JOB.yaml --sharding torch_fsdp2 ...`, which exited 2 ("sharding zero1 contradicts sharding_mode
    torch_fsdp2"): a job YAML's command-line mode did not replace the file's level, as it does a trainer config's
    (core.command_line_sharding, found by fuzzing.fit_rows_agree on the job-fields kind's seed jf-llama3-8b.yaml).
    Now the mode chooses its level, the file's named as not kept; and a command-line level over the file's mode
    chooses the mode anew."""
    f = tmp_path / "job.yaml"
    f.write_text("model: llama3-8b\ngpus: 8\ntp: 2\nsharding: zero1\nglobal_batch: 16\nseq_len: 4096\n")
    rows = _config_rows_agree(cli, f)
    assert {row["plan"]["sharding"] for row in rows} != {"zero1"}  # a row of another level than the file's
    r = cli("explain", f, "--sharding", "torch_fsdp2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert ("sharding: the file's zero1 is not kept: the command line's sharding mode torch_fsdp2 chooses its level, "
            "fsdp") in r.stderr
    assert (json.loads(r.stdout)["plan"]["sharding"], json.loads(r.stdout)["plan"]["sharding_mode"]) == ("fsdp", "torch_fsdp2")
    g = tmp_path / "mode.yaml"
    g.write_text("model: llama3-8b\ngpus: 8\nsharding_mode: torch_fsdp2\nglobal_batch: 16\nseq_len: 4096\n")
    r = cli("explain", g, "--sharding", "zero1", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert "sharding_mode: the file's torch_fsdp2 is not kept: the command line's sharding zero1 choose(s) the mode" in r.stderr
    assert json.loads(r.stdout)["plan"]["sharding_mode"] == "distributed_optimizer"  # megatron's first zero1 mode


def test_config_line_names_the_searched_attention(cli, tmp_path):
    """megatron-deepspeed runs eager attention unless told (defaults.attention), fit plans flash for a job that
    leaves it out (plan.fit_attention): the line `fit JOB.yaml` printed left --attention out, so its explain priced
    eager (compute 0.130 s against the row's 0.094 s: found by fuzzing.fit_rows_agree on the job-fields seed
    jf-mds.yaml). The line names the row's core where it is not what explain takes for the file."""
    from planner.cli.fit_config import config_jobs
    from planner.search import config_explain_args

    f = tmp_path / "job.yaml"
    f.write_text("model: megatron-gpt-1.7b\ngpus: 8\nstack: megatron-deepspeed\nsharding: zero1\nglobal_batch: 16\n"
                 "seq_len: 2048\n")
    rows = _config_rows_agree(cli, f)
    job = config_jobs(f, {}, {}, None)[0]
    for row in rows:
        assert row["plan"]["attention"] == "flash"
        line = config_explain_args(str(f), job, row)
        assert line[line.index("--attention") + 1] == "flash"
    g = tmp_path / "eager.yaml"  # the file says eager: the rows' core, no option
    g.write_text(f.read_text() + "attention: eager\n")
    rows = _config_rows_agree(cli, g)
    assert all(row["plan"]["attention"] == "eager" for row in rows)
    assert "--attention" not in config_explain_args(str(g), config_jobs(g, {}, {}, None)[0], rows[0])


def test_config_line_names_a_dense_rows_expert_tp(cli, tmp_path):
    """A torchtitan job of a dense model that sets etp 4 (no tp): fit searches the plan axes (the file's etp among
    them) and ranks rows at tp 2 with etp 2, but the line it printed named no --etp on a dense row, so `explain
    JOB.yaml --tp 2 ...` kept the file's etp 4, which torchtitan refuses (etp must be tp or 1): the short fuzz
    pass's job-fields input 3 (seed 12) under fuzzing.fit_rows_agree. The line names the expert axes the file sets
    (fit_config.file_axes) as the row has them; a file without them gets none (the printed lines unchanged)."""
    from planner.cli.fit_config import config_jobs, file_axes
    from planner.search import config_explain_args

    f = tmp_path / "job.yaml"
    f.write_text("model: llama3-8b\ngpus: 8\nstack: torchtitan\nsharding: fsdp\nrecompute: full\nglobal_batch: 16\n"
                 "seq_len: 4096\netp: 4\n")
    rows = _config_rows_agree(cli, f, least=1)
    job, own = config_jobs(f, {}, {}, None)[:2]
    assert file_axes(own) == ("etp",)
    for row in rows:
        line = config_explain_args(str(f), job, row, file_axes(own))
        assert line[line.index("--etp") + 1] == str(row["plan"]["tp"]) and "--ep" not in line
    g = tmp_path / "plain.yaml"
    g.write_text(f.read_text().replace("etp: 4\n", ""))
    job, own = config_jobs(g, {}, {}, None)[:2]
    assert file_axes(own) == () and "--etp" not in config_explain_args(str(g), job, _config_rows_agree(cli, g, least=1)[0])


def test_config_line_level_drops_the_files_shard_group(cli, tmp_path):
    """A job YAML's hsdp shard group under a command-line sharding that is not hsdp: `explain JOB.yaml --sharding
    distributed_optimizer ...`, the line fit prints for a zero1 row, exited 2 ("shard_group is only used with
    sharding hsdp"): the job-fields pass, scripts/fuzz.py --runs 1000 --seed 66 --kinds job-fields, input 18-18
    (tests/data/fuzz_issue24/job-fields-18-18.yaml: Qwen3-30B-A3B, zero1, shard_group 16). The command line's
    level or mode chooses anew: the file's shard group is named as not kept (core.command_line_sharding)."""
    f = tmp_path / "hsdp.yaml"
    f.write_text("model: llama3-8b\ngpus: 16\nsharding: hsdp\nshard_group: 8\nglobal_batch: 32\nseq_len: 4096\n")
    for option, level in (("zero1", "zero1"), ("torch_fsdp2", "fsdp")):
        r = cli("explain", f, "--sharding", option, "--format", "json")
        assert r.exit_code == 0, r.stderr
        assert f"shard_group: the file's 8 is not kept: the command line's sharding {option} is not hsdp" in r.stderr
        assert json.loads(r.stdout)["plan"]["sharding"] == level
    r = cli("explain", f, "--sharding", "hsdp", "--format", "json")  # an hsdp option keeps it
    assert r.exit_code == 0 and json.loads(r.stdout)["plan"]["shard_group"] == 8
    rows = _config_rows_agree(cli, FUZZ / "job-fields-18-18.yaml")
    assert all(row["plan"]["sharding"] != "hsdp" for row in rows)


@pytest.mark.parametrize("overlap", ["--dp-comm-overlap", "--no-dp-comm-overlap"])
def test_per_microbatch_dp_traffic_in_the_critical_stage(cli, overlap):
    """ZeRO-2 on megatron (Megatron-FSDP optim_grads: a reduce-scatter after every micro-batch) at pp 2: each stage's
    per-micro-batch DP exposure behind its own passes weighs in the critical-stage pick (step.dp_comm's mb, issue 22
    critdp); fit's 1-d rows and explain's 0-d plan give the same terms, DP overlap on and off."""
    base = ["--model", "llama3-8b", "--gpus", "16", "--tp", "4", "--pp", "2", "--sharding", "zero2", "--global-batch",
            "32", "--seq-len", "2048", "--stack", "megatron", overlap]
    job = Job(model="llama3-8b", gpus=16, seq_len=2048, global_batch=32, stack="megatron")
    rows = _agree(cli, job, base + ["--top", "4"], least=3)
    for row in rows:
        assert row["plan"]["pp"] == 2 and row["plan"]["sharding"] == "zero2", row["plan"]
        assert row["time"]["dp_comm_exposed_s"] > 0
