"""The host Adam under CPU offload, calibrated (issue 21): `planner calibrate host-adam` turns a timed CPU Adam step
(a record, DeepSpeed's ZeRO-1/2 wall-clock breakdown, DeepSpeed's tests/perf/adam_test1.py) into the fraction of the
host's DRAM peak it sustains, efficiency = processes x params x 28 B / (seconds x host_memory_GBps), written to the
profile's host_adam section and read back by step.py in place of offload.HOST_MEMORY_EFFICIENCY (0.5); and the
job's host fields (pcie_gbps, host_memory_gbps, host_memory_gb: plan._apply_host) for a server whose hardware entry
fixes no host. Fixtures: tests/data/host_adam (SOURCES.md there; illustrative figures).

Llama 3 8B at ZeRO-2 on 8 H100s (tests/test_offload.py): a rank's partition L = 8,030,261,248 / 8 = 1,003,782,656
elements; DGX H100's host 563.2 GB/s DRAM peak, PCIe Gen5 x16 64 GB/s a direction.
"""

import json
from pathlib import Path

import pytest
import yaml

from conftest import assert_one_error

DATA = Path(__file__).parent / "data" / "host_adam"
L = 8_030_261_248 // 8
DS2 = dict(model="llama3-8b", gpus=8, stack="megatron-deepspeed", sharding="zero2", micro_batch=1, global_batch=8,
           seq_len=4096, offload_optimizer="cpu")
# the log's steady optimizer_step lines 700, 720, 710 ms: the median 0.710 s, less the fp32 partition's copy to the
# GPU that DeepSpeed's timer spans (stage_1_and_2.py @38327e07 l. 1879-1882): L x 4 B / 64 GB/s
LOG_SECONDS = 0.710 - L * 4 / 64e9
LOG_EFF = 8 * L * 28 / (LOG_SECONDS * 563.2e9)


def _explain(cli, tmp_path, job: dict, *args, name="job.yaml"):
    f = tmp_path / name
    f.write_text(yaml.safe_dump(job))
    r = cli("explain", str(f), "--format", "json", *args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _log_profile(cli, tmp_path, *extra, name="profile.yaml"):
    out = tmp_path / name
    r = cli("calibrate", "host-adam", str(DATA / "deepspeed_zero2_offload.log"), "--params", str(L), "--processes", "8",
            "--hardware", "h100-sxm", "-o", str(out), *extra)
    assert r.exit_code == 0, r.stderr
    return out, r


def test_efficiency_by_hand_from_a_deepspeed_log(cli, tmp_path):
    """0.710 s - 1,003,782,656 x 4 B / 64e9 B/s = 0.710 - 0.0627364 = 0.6472636 s for 8 x L x 28 B = 224.847 GB:
    347.38 GB/s of 563.2, an efficiency of 0.6168."""
    out, r = _log_profile(cli, tmp_path)
    assert LOG_SECONDS == pytest.approx(0.6472636, rel=1e-6)
    assert LOG_EFF == pytest.approx(0.61680, rel=1e-4)
    from planner.profile import load_profile

    sec = load_profile(out).host_adam
    assert sec.efficiency == pytest.approx(LOG_EFF, rel=1e-12)
    (m,) = sec.measurements
    assert m.source.endswith("deepspeed_zero2_offload.log:4-6") and m.steps == 3  # the warm-up line 2 dropped
    assert m.seconds_measured == pytest.approx(0.710, rel=1e-12)
    assert m.copy_seconds == pytest.approx(L * 4 / 64e9, rel=1e-12)
    assert (m.processes, m.params, m.bytes_per_param, m.host_memory_GBps) == (8, L, 28.0, 563.2)
    assert sec.hardware == "h100-sxm" and sec.inputs[0].kind == "deepspeed-zero-log"
    assert "efficiency 0.6168" in r.stdout and "in place of the assumed 0.5" in r.stdout


def test_round_trip_into_explain(cli, tmp_path):
    """explain --calibration: the host's Adam at the calibrated fraction, 8 x L x 28 / (563.2e9 x 0.6168) = 0.6473 s in
    place of 0.7985 s at 0.5; the link's copies and every other term as before; the note names the profile."""
    out, _ = _log_profile(cli, tmp_path)
    plain = _explain(cli, tmp_path, DS2)
    cal = _explain(cli, tmp_path, DS2, "--calibration", str(out), name="cal.yaml")
    adam = 8 * L * 28 / (563.2e9 * LOG_EFF)
    assert plain["time"]["offload_cpu_adam_s"] == pytest.approx(8 * L * 28 / (563.2e9 * 0.5), rel=1e-12)
    assert cal["time"]["offload_cpu_adam_s"] == pytest.approx(adam, rel=1e-12)
    assert adam == pytest.approx(LOG_SECONDS, rel=1e-12)  # the model gives back the measured step
    assert cal["time"]["offload_link_s"] == plain["time"]["offload_link_s"]
    assert cal["time"]["step_s"] - plain["time"]["step_s"] == pytest.approx(
        adam - plain["time"]["offload_cpu_adam_s"], rel=1e-9)
    assert cal["memory"] == {**plain["memory"], "host": {**plain["memory"]["host"], "adam_efficiency": LOG_EFF,
                                                        "adam_efficiency_calibrated": True,
                                                        "adam_efficiency_source": cal["memory"]["host"]["adam_efficiency_source"]}}
    assert plain["memory"]["host"]["adam_efficiency"] == 0.5 and plain["memory"]["host"]["adam_efficiency_calibrated"] is False
    assert plain["memory"]["host"]["adam_efficiency_source"] == "assumed: offload.HOST_MEMORY_EFFICIENCY"
    assert cal["memory"]["host"]["adam_efficiency_source"].startswith(f"profile {out}: host_adam 0.6168 measured")
    assert cal["calibration"]["host_adam"] == {"efficiency": LOG_EFF, "hardware": "h100-sxm", "applied": True}
    f = tmp_path / "cal.yaml"
    text = cli("explain", str(f), "--calibration", str(out)).stdout
    assert "at the calibrated fraction 0.6168 of its peak, profile" in text
    assert "at an assumed fraction" in cli("explain", str(f)).stdout


def test_not_applied_on_other_hardware(cli, tmp_path):
    """A section measured on h100-sxm's host does not price an h200-sxm node (DGX H200: the same 563.2 GB/s, but
    another entry): the assumption stays, and the JSON says why."""
    out, _ = _log_profile(cli, tmp_path)
    job = dict(DS2, hardware="h200-sxm")
    cal = _explain(cli, tmp_path, job, "--calibration", str(out))
    assert cal["time"]["offload_cpu_adam_s"] == pytest.approx(8 * L * 28 / (563.2e9 * 0.5), rel=1e-12)
    assert cal["calibration"]["host_adam"]["applied"] is False
    assert "measured for hardware h100-sxm, not h200-sxm" in cal["calibration"]["host_adam"]["not_applied"]
    text = cli("explain", str(tmp_path / "job.yaml"), "--calibration", str(out)).stdout
    assert ("at an assumed fraction, offload.HOST_MEMORY_EFFICIENCY; profile " in text
            and "host_adam section not applied (measured for hardware h100-sxm, not h200-sxm)" in text)


def test_records_and_adam_test_by_hand(cli, tmp_path):
    """records.yaml: 8 x 1e9 x 28 / (0.8 x 563.2e9) = 0.49716; 4 x 5e8 x 28 / (0.25 x 563.2e9) = 0.39773;
    8 x 2e9 x 28 / (1.4 x 614.4e9) = 0.52083 (its bandwidth from --host-memory-gbps); the median 0.49716.
    adam_test1.txt: one process, 1024**3 elements x 28 B in 0.8 s over 614.4 GB/s = 0.061166."""
    out = tmp_path / "p.yaml"
    r = cli("calibrate", "host-adam", str(DATA / "records.yaml"), "--host-memory-gbps", "614.4", "-o", str(out),
            "--format", "json")
    assert r.exit_code == 0, r.stderr
    sec = json.loads(r.stdout)
    effs = [m["efficiency"] for m in sec["measurements"]]
    assert effs == pytest.approx([8e9 * 28 / (0.8 * 563.2e9), 2e9 * 28 / (0.25 * 563.2e9), 16e9 * 28 / (1.4 * 614.4e9)],
                                 rel=1e-12)
    assert sec["efficiency"] == pytest.approx(8e9 * 28 / (0.8 * 563.2e9), rel=1e-12) and sec["hardware"] is None
    r = cli("calibrate", "host-adam", str(DATA / "adam_test1.txt"), "--host-memory-gbps", "614.4", "-o", str(out),
            "--processes", "8")
    assert r.exit_code == 0, r.stderr
    assert "replacing its host_adam section" in r.stderr
    assert "--processes: for a DeepSpeed ZeRO log; ignored" in r.stderr  # nothing dropped silently
    from planner.profile import load_profile

    sec = load_profile(out).host_adam
    assert sec.efficiency == pytest.approx(1024**3 * 28 / (0.8 * 614.4e9), rel=1e-12)
    assert sec.inputs[0].kind == "deepspeed-adam-test" and sec.measurements[0].processes == 1


def test_other_sections_kept(cli, tmp_path):
    """calibrate host-adam into a profile with a gemm section keeps it, and calibrate gemm after keeps host_adam."""
    out = tmp_path / "p.yaml"
    csv = tmp_path / "g.csv"
    csv.write_text("M,N,K,dtype,tflops\n8192,8192,8192,bf16,700\n")
    assert cli("calibrate", "gemm", "--from", str(csv), "--hardware", "h100-sxm", "-o", str(out)).exit_code == 0
    _log_profile(cli, tmp_path, name="p.yaml")
    from planner.profile import load_profile

    p = load_profile(out)
    assert p.gemm is not None and p.host_adam is not None
    assert cli("calibrate", "gemm", "--from", str(csv), "--hardware", "h100-sxm", "-o", str(out)).exit_code == 0
    p = load_profile(out)
    assert p.gemm is not None and p.host_adam.efficiency == pytest.approx(LOG_EFF, rel=1e-12)


@pytest.mark.parametrize("args, needle", [
    ([str(DATA / "deepspeed_zero2_offload.log"), "--hardware", "h100-sxm"], "--params"),
    ([str(DATA / "deepspeed_zero2_offload.log"), "--params", "1e9", "--hardware", "h100-sxm"], "--processes"),
    ([str(DATA / "deepspeed_zero2_offload.log"), "--params", "1e9", "--processes", "8", "--host-memory-gbps", "563.2"],
     "--pcie-gbps"),
    ([str(DATA / "deepspeed_zero2_offload.log"), "--params", "1e9", "--processes", "8", "--pcie-gbps", "64"],
     "--host-memory-gbps"),
    # 8 x 1e10 elements in 0.65 s would be 3,446 GB/s of a 563.2 GB/s DRAM: refused
    ([str(DATA / "deepspeed_zero2_offload.log"), "--params", "1e10", "--processes", "8", "--hardware", "h100-sxm"],
     "an efficiency above 1"),
    ([str(DATA / "deepspeed_zero2_offload.log"), "--params", "1e9", "--processes", "8", "--hardware", "h100-sxm",
      "--warmup", "9"], "no optimizer_step line"),
    ([str(DATA / "deepspeed_zero3.log"), "--params", "1e9", "--processes", "8", "--hardware", "h100-sxm"], "ZeRO-3"),
    ([str(DATA / "deepspeed_zero2_offload.log"), "--params", "x", "--processes", "8", "--hardware", "h100-sxm"],
     "--params"),
    ([str(DATA / "records.yaml")], "--host-memory-gbps"),  # the third record gives no bandwidth
    ([str(DATA / "SOURCES.md")], "neither host Adam records nor a DeepSpeed log"),
    ([str(DATA / "nope.log")], "no such file"),
    ([str(DATA / "records.yaml"), "--host-memory-gbps", "-5"], "--host-memory-gbps"),
])
def test_bad_inputs_exit_2(cli, tmp_path, args, needle):
    assert_one_error(cli("calibrate", "host-adam", *args, "-o", str(tmp_path / "p.yaml")), needle)
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("record, needle", [
    (dict(optimizer="torch_foreach_adam", params=1e9, seconds=1), "one-pass"),
    (dict(optimizer="deepspeed_cpu_adam", params=1e9), "missing seconds"),
    (dict(optimizer="deepspeed_cpu_adam", params=1e9, seconds=-1), "seconds"),
    (dict(optimizer="deepspeed_cpu_adam", params=1e9, seconds=1, processes=0), "processes"),
    (dict(optimizer="deepspeed_cpu_adam", params=1e9, seconds=1, ranks=8), "unknown key"),
    (dict(optimizer="deepspeed_cpu_adam", params=".inf", seconds=1), "params"),
])
def test_bad_records_exit_2(cli, tmp_path, record, needle):
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump([dict(record, host_memory_GBps=563.2)]))
    assert_one_error(cli("calibrate", "host-adam", str(f), "-o", str(tmp_path / "p.yaml")), needle)


def test_not_a_profile_is_not_overwritten(cli, tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text("just: text\n")
    assert_one_error(cli("calibrate", "host-adam", str(DATA / "records.yaml"), "--host-memory-gbps", "614.4", "-o",
                         str(out)), "not a calibration profile")
    assert out.read_text() == "just: text\n"


# ----------------------------------------------------------------------------------- the job's host
def test_host_flags_price_a_server_without_a_fixed_host(cli, tmp_path):
    """h100-pcie (any server) gives a link (PCIe Gen5 x16, 64 GB/s) but no host: refused, the hint naming the flags;
    with --host-memory-gbps 409.6 (say, 2 x 8 DDR5-3200 channels) the host's Adam is 8 x L x 28 / (409.6e9 x 0.5) and
    with --host-memory-gb 100 check gates the 8 x 16 B x L of the node's host bytes against it."""
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(dict(DS2, hardware="h100-pcie")))
    r = cli("explain", str(f))
    assert_one_error(r, "host_memory_GBps", "--host-memory-gbps", "--pcie-gbps", "--host-memory-gb")
    res = _explain(cli, tmp_path, dict(DS2, hardware="h100-pcie"), "--host-memory-gbps", "409.6")
    assert res["time"]["offload_cpu_adam_s"] == pytest.approx(8 * L * 28 / (409.6e9 * 0.5), rel=1e-12)
    assert res["plan"]["host_memory_gbps"] == 409.6 and "pcie_gbps" not in res["plan"]
    assert res["memory"]["host"]["capacity_bytes_per_node"] is None  # h100-pcie gives no host memory
    r = cli("check", str(f), "--host-memory-gbps", "409.6", "--host-memory-gb", "100", "--format", "json")
    assert r.exit_code == 1, r.stderr
    (out,) = json.loads(r.stdout)
    host = [x for x in out["failures"] if x["kind"] == "host_memory"]
    assert host and host[0]["overflow_bytes"] == 8 * 16 * L - 100e9


def test_a_flag_beats_the_entry_with_a_note(cli, tmp_path):
    """--pcie-gbps 32 on h100-sxm (64): the copies, 4 + 4 B x L (fp32 down and up), at 32 GB/s; noted as replacing the entry's."""
    res = _explain(cli, tmp_path, DS2, "--pcie-gbps", "32")
    assert res["time"]["offload_link_s"] == pytest.approx(8 * L / 32e9, rel=1e-12)
    assert "pcie_gbps 32 replaces hardware h100-sxm's pcie_GBps 64 (the job's host)" in res["warnings"]
    same = _explain(cli, tmp_path, DS2, "--pcie-gbps", "64", name="same.yaml")
    assert not [w for w in same["warnings"] if "replaces hardware" in w]


@pytest.mark.parametrize("text, needle", [
    # DeepSpeed's timer writes "%.2f" of a float: nan and inf were passed over as no line (the regexes read digits
    # only) and the file refused as empty, or its other lines calibrated without them; now each is refused by line
    ("[Rank 0] time (ms) | optimizer_allgather: 1.00 | optimizer_gradients: 1.00 | optimizer_step: 700.00\n"
     "[Rank 0] time (ms) | optimizer_allgather: 1.00 | optimizer_gradients: 1.00 | optimizer_step: nan\n"
     "[Rank 0] time (ms) | optimizer_allgather: 1.00 | optimizer_gradients: 1.00 | optimizer_step: 710.00\n",
     "log.txt:2: optimizer_step nan ms"),
    ("[Rank 0] time (ms) | optimizer_allgather: 1.00 | optimizer_gradients: 1.00 | optimizer_step: inf\n",
     "log.txt:1: optimizer_step inf ms"),
    ("Elapsed Time is  0.91\nElapsed Time is  nan\n", "log.txt:2: the step time 'nan'"),
    ("Step time: torch_time=5.1 ds_time=inf\n", "log.txt:1: the step time 'inf'"),
])
def test_non_finite_timings_refused_by_line(cli, tmp_path, text, needle):
    f = tmp_path / "log.txt"
    f.write_text(text)
    assert_one_error(cli("calibrate", "host-adam", str(f), "--params", "1e9", "--processes", "8", "--hardware",
                         "h100-sxm", "-o", str(tmp_path / "p.yaml")), needle)
    assert not (tmp_path / "p.yaml").exists()


def test_export_notes_the_jobs_host(cli):
    """The job's host fields are no setting of any trainer file: export says so, one note each, as it does for
    te_version and cublas_workspace_config (review6: they were left out of the file without a word)."""
    r = cli("export", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--sharding", "zero2",
            "--offload-optimizer", "cpu", "--pcie-gbps", "32", "--host-memory-gbps", "400", "--host-memory-gb", "1000",
            "--format", "deepspeed")
    assert r.exit_code == 0, r.stderr
    for note in ("pcie_gbps 32: the servers' host (priced in place of hardware pcie_GBps); the file cannot hold it",
                 "host_memory_gbps 400: the servers' host (priced in place of hardware host_memory_GBps)",
                 "host_memory_gb 1000: the servers' host (priced in place of hardware host_memory_GB)"):
        assert note in r.stderr
    r = cli("export", "--model", "llama3-8b", "--gpus", "8", "--stack", "megatron-deepspeed", "--format", "deepspeed")
    assert r.exit_code == 0 and "the servers' host" not in r.stderr
