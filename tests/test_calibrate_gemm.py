"""planner calibrate gemm (planner/calibrate/gemm.py) and the GEMM model it feeds
(planner/compute.py): layer shapes, the calibrated GEMM rate and its interpolation,
ingesting measurements, the profile section and the CLI (--from, --run without a GPU).

Data: tests/data/gemm_measurements.yaml is a verbatim copy of the project's reference file
(one `# source:` line added on top, so its line numbers are the reference's + 1). Its rows
used here: H100 80GB HBM3 square torch.mm sweep (zzc0721/torch-performance-test-data issue
#79), 4096^3 bf16 788.72 TFLOP/s; Azure ND H100 v5 cuBLASLt fp8, 6144x12288x12288 1351.4.

Hand-derived wave efficiencies on 132 SMs (128x256 tiles, compute.py): 4096^2, 8192^2 and
6144x12288 all have 512, 2048 and 2304 tiles = 4, 16 and 18 waves of 132 -> 32/33.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.calibrate import gemm as g
from planner.calibrate.gemm import benchmark_shapes, ingest, ingest_files, run_gemm_benchmark
from planner.calibrate.profile import dump_profile
from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.compute import (
    SUSTAINED_TENSOR_FRACTION, calibrated_gemm_rate, calibrated_gemm_time, forward_gemm_times, gemm_efficiency,
    gemm_epilogue_rate, gemm_mainloop, gemm_plateau, gemm_time, layer_gemm_shapes, wave_efficiency,
)
from planner.errors import PlannerError
from planner.profile import GemmCalibration, GemmProvenance, GemmRow, load_profile

DATA = Path(__file__).parent / "data"
REF = DATA / "gemm_measurements.yaml"
NCCL_LOG = DATA / "nccl_logs" / "h100_8gpu_allreduce_aws-p5-batch.txt"
H100 = load_hardware("h100-sxm")  # bf16 MAMF 794.5, fp8 1402.6 TFLOP/s, 132 SMs
W = 32.0 / 33.0  # wave efficiency of the shapes named in the module docstring
F = SUSTAINED_TENSOR_FRACTION
# The uncalibrated model's K-loop rates and epilogue write rate on H100 SXM (compute [5a]): the
# write, 2 B an output element, at 3.35e12 x 0.9 = 3.015e12 B/s; the MAMF figures less their
# write at their K: 1 / (1/794.5e12 - 2 / (2 x 13312 x 3.015e12)) = 810.545e12 (bf16) and
# 1 / (1/1402.6e12 - 2 / (2 x 14336 x 3.015e12)) = 1449.641e12 FLOP/s (fp8).
EPI = 3.015e12
P16, P8 = 810.545e12, 1449.641e12


def _model_time(m, n, k, p):
    """The uncalibrated model by hand at shapes of wave efficiency W: (2mnk / (P F) + 2mn / EPI) / W."""
    return (2.0 * m * n * k / (p * F) + 2.0 * m * n / EPI) / W
runner = CliRunner()


def _cal(rows, sustained=False, sm_count=None) -> GemmCalibration:
    return GemmCalibration(
        gpu="test", sm_count=sm_count, sustained=sustained,
        rows=[GemmRow(M=m, N=n, K=k, dtype=d, tflops=t, source="test") for m, n, k, d, t in rows],
        provenance=GemmProvenance(method="ingested", created="2026-01-01T00:00:00Z", planner_version="test"),
    )


def _gemm(*args):
    return runner.invoke(app, ["calibrate", "gemm", *[str(a) for a in args]])


# ----------------------------------------------------------------------------- shapes
def test_layer_shapes_of_llama3_8b_at_tp2():
    m = load_model("llama3-8b")  # h 4096, 32 heads, 8 KV heads, d 128, f 14336 (SwiGLU), V 128256
    got = {s.name: (float(s.M), float(s.N), float(s.K)) for s in layer_gemm_shapes(m, 2, 8192)}
    assert got == {
        "qkv": (8192, (16 + 2 * 4) * 128, 4096),
        "attn_out": (8192, 4096, 2048),
        "mlp_up": (8192, 2 * 14336 / 2, 4096),
        "mlp_down": (8192, 4096, 7168),
        "output_layer": (8192, 128256 / 2, 4096),
    }


def test_layer_shapes_replicate_kv_heads_beyond_their_count_and_broadcast():
    m = load_model("llama3-8b")
    qkv = layer_gemm_shapes(m, np.array([8, 16, 32]), 4096)[0]
    # 8 KV heads: at tp 16 and 32 each rank keeps one K and one V head
    assert qkv.N.tolist() == [(4 + 2) * 128, (2 + 2) * 128, (1 + 2) * 128]
    assert qkv.M.tolist() == [4096.0] * 3 and qkv.K.tolist() == [4096.0] * 3


def test_plain_mlp_has_no_gate():
    m = load_model("gpt3-175b")  # f = 4h = 49152, GELU
    up = layer_gemm_shapes(m, 4, 6144)[2]
    assert (float(up.N), float(up.K)) == (49152 / 4, 12288)


def test_uncalibrated_forward_times_are_the_step_models():
    """cal=None: compute.gemm_time at the (sustained) K-loop rate and the epilogue's write rate,
    as step.py prices them; the plateau (attention's reference) stays the MAMF figure."""
    m = load_model("llama3-8b")
    t = forward_gemm_times(m, H100, np.array([1, 2]), 8192.0, np.array([0, 1]))
    assert [gemm_plateau(H100, "bf16"), gemm_plateau(H100, "fp8")] == [794.5e12 * F, 1402.6e12 * F]
    plat = np.array([gemm_mainloop(H100, "bf16"), gemm_mainloop(H100, "fp8")])
    np.testing.assert_allclose(plat, [P16 * F, P8 * F], rtol=1e-6)
    assert gemm_epilogue_rate(H100) == pytest.approx(EPI, rel=1e-12)
    expected_qkv = gemm_time(8192.0, np.array([6144.0, 3072.0]), 4096, plat, 132, EPI)
    np.testing.assert_allclose(t.qkv, expected_qkv, rtol=1e-12)
    np.testing.assert_allclose(t.output_layer, gemm_time(8192.0, np.array([128256.0, 64128.0]), 4096, plat, 132, EPI),
                               rtol=1e-12)


def test_benchmark_shapes_dedupe_round_up_and_check_tp():
    m8, m70 = load_model("llama3-8b"), load_model("llama3-70b")
    shapes = benchmark_shapes([m8, m70], [1, 2, 4, 8], [None], [1])
    assert len(shapes) == 40  # 2 models x 4 TP x 5 GEMMs, all distinct at T = 8192
    assert all(s.M == 8192 for s in shapes)
    by = {(s.M, s.N, s.K): s.layers for s in shapes}
    assert by[(8192, 768, 4096)] == ["llama3-8b tp=8 T=8192 qkv"]
    assert by[(8192, 128256, 8192)] == ["llama3-70b tp=1 T=8192 output_layer"]
    # the MLP-up of 8B at TP 2 and the output layer share no shape, but two layers can:
    two = benchmark_shapes([m8], [1, 2], [4096], [1, 2])  # T = 4096 and 8192
    assert {s.M for s in two} == {4096, 8192}
    # GPT-3's 50,257-entry vocabulary does not split evenly: rounded up, and said so
    gpt = benchmark_shapes([load_model("gpt3-175b")], [8], [2048], [1])
    out = [s for s in gpt if any("output_layer" in x for x in s.layers)][0]
    assert out.N == 6283 and "N 6282.12 rounded up" in out.layers[0]
    with pytest.raises(PlannerError, match="--tp 3 does not divide the 32 attention heads"):
        benchmark_shapes([m8], [3], [None], [1])


# ----------------------------------------------------------------------------- rates
def test_measured_shape_time_is_2MNK_over_tflops_exactly():
    M, N, K, tf = 4096, 4096, 4096, 788.72
    sustained = _cal([(M, N, K, "bf16", tf), (8192, 8192, 8192, "bf16", 797.51)], sustained=True)
    assert calibrated_gemm_time(M, N, K, "bf16", H100, sustained) == 2.0 * M * N * K / (tf * 1e12)
    # benchmark-burst rows get the same sustained-clock derating as the hardware entries' figures
    burst = _cal([(M, N, K, "bf16", tf), (8192, 8192, 8192, "bf16", 797.51)])
    assert calibrated_gemm_time(M, N, K, "bf16", H100, burst) == 2.0 * M * N * K / (tf * 1e12 * F)


def test_several_rows_of_one_shape_use_their_median():
    cal = _cal([(8192, 8192, 8192, "bf16", t) for t in (797.51, 797.8, 518.6)], sustained=True)
    assert float(calibrated_gemm_rate(8192, 8192, 8192, "bf16", H100, cal)) == 797.51e12


@pytest.mark.parametrize("query", [(8192, 8192, 8192), (4096, 14336, 4096), (1024, 128256, 8192), (77, 3000, 50000)])
def test_lower_measured_tflops_raise_time_by_the_ratio(query):
    """One row at 8192^3 (wave efficiency 32/33): every shape's time scales by one factor,
    default plateau / measured plateau, measured and default at the same clock."""
    M, N, K = query
    default = gemm_time(M, N, K, gemm_plateau(H100, "bf16"), 132)
    burst = calibrated_gemm_time(M, N, K, "bf16", H100, _cal([(8192, 8192, 8192, "bf16", 600.0)]))
    assert burst / default == pytest.approx(794.5 * W / 600.0, rel=1e-12)
    sus = calibrated_gemm_time(M, N, K, "bf16", H100, _cal([(8192, 8192, 8192, "bf16", 600.0)], sustained=True))
    assert sus / default == pytest.approx(794.5 * F * W / 600.0, rel=1e-12)
    assert burst / default > 1.28  # 770.4 / 600 = 1.284: slower


def test_rows_equal_to_the_hardware_figure_reproduce_the_default():
    cal = _cal([(8192, 8192, 8192, "bf16", 794.5 * W)])  # measured at 8192^3 = plateau x wave efficiency
    M, N, K = np.array([512, 4096, 8192, 30000]), np.array([1024, 6144, 28672, 128256]), 4096
    np.testing.assert_allclose(calibrated_gemm_time(M, N, K, "bf16", H100, cal),
                               gemm_time(M, N, K, gemm_plateau(H100, "bf16"), 132), rtol=1e-12)


def test_interpolation_between_two_squares_by_hand():
    """Query at the geometric mean of 2048^3 and 4096^3: equal log-distances, equal weights."""
    cal = _cal([(2048, 2048, 2048, "bf16", 676.59), (4096, 4096, 4096, "bf16", 788.72)], sustained=True)
    q = (2048 * 4096) ** 0.5  # 2896.3: 23 x 12 = 276 tiles of 128x256 -> 3 waves of 132
    w_ref = 32.0 / 33.0  # 2048^2: 128 full tiles -> 1 wave; 4096^2: 512 -> 4 waves (no partial tile)
    # the query's useful fraction, tile and wave quantization: q^2 / (3 waves x 132 SMs x 128 x 256)
    expected = (676.59 + 788.72) / 2 / w_ref * (2048 * 4096 / (3 * 132 * 128 * 256)) * 1e12
    assert float(calibrated_gemm_rate(q, q, q, "bf16", H100, cal)) == pytest.approx(expected, rel=1e-12)


def test_profile_sm_count_is_the_wave_size():
    rows = [(4096, 4096, 4096, "bf16", 700.0)]
    # 114 SMs (H100 PCIe): 4096^2 = 512 tiles -> 5 waves -> 512/570; a query 8192^2 -> 2048/2052
    cal = _cal(rows, sustained=True, sm_count=114)
    got = float(calibrated_gemm_rate(8192, 8192, 8192, "bf16", H100, cal))
    assert got == pytest.approx(700e12 / (512 / 570) * (2048 / 2052), rel=1e-12)


shape_st = st.tuples(*(st.integers(min_value=16, max_value=200_000) for _ in range(3)))


@settings(max_examples=60, deadline=None)
@given(st.lists(shape_st, min_size=1, max_size=8))
def test_interpolated_plateau_stays_within_the_measured_ones(queries):
    ref = _cal([(1024, 1024, 1024, "bf16", 176.62), (2048, 2048, 2048, "bf16", 676.59), (4096, 4096, 4096, "bf16", 788.72),
                (8192, 8192, 8192, "bf16", 797.51), (10240, 10240, 10240, "bf16", 719.72)], sustained=True)
    q = np.array(queries, dtype=np.float64)
    rate = calibrated_gemm_rate(q[:, 0], q[:, 1], q[:, 2], "bf16", H100, ref)
    plateau = rate / wave_efficiency(q[:, 0], q[:, 1], 132)
    measured = np.array([176.62, 676.59, 788.72, 797.51, 719.72]) * 1e12 / wave_efficiency(
        np.array([1024, 2048, 4096, 8192, 10240]), np.array([1024, 2048, 4096, 8192, 10240]), 132)
    assert np.all(plateau >= measured.min() * (1 - 1e-12)) and np.all(plateau <= measured.max() * (1 + 1e-12))
    # vectorized = one at a time
    one = [float(calibrated_gemm_rate(*row, "bf16", H100, ref)) for row in q]
    np.testing.assert_allclose(rate, one, rtol=1e-13)


def test_precision_codes_and_fallbacks():
    cal = _cal([(4096, 4096, 4096, "bf16", 788.72)], sustained=True)
    r = calibrated_gemm_rate(4096, 4096, 4096, np.array([0, 1]), H100, cal)
    assert r[0] == 788.72e12
    # no fp8 rows: the uncalibrated model, 2 x 4096^3 / _model_time = 1086.45e12 FLOP/s (sustained)
    assert r[1] == pytest.approx(2.0 * 4096**3 / _model_time(4096, 4096, 4096, P8), rel=1e-6)
    assert r[1] == pytest.approx(1086.45e12, rel=1e-5)
    # bf16 queries use fp16 rows when there are no bf16 ones (one dense 16-bit peak)
    fp16 = _cal([(4096, 4096, 4096, "fp16", 760.04)], sustained=True)
    assert float(calibrated_gemm_rate(4096, 4096, 4096, "bf16", H100, fp16)) == 760.04e12
    eff = gemm_efficiency(cal, 4096, 4096, 4096, "bf16", H100)
    assert float(eff) == pytest.approx(788.72 / 989.0, rel=1e-12)
    with pytest.raises(PlannerError, match="not modelled"):
        calibrated_gemm_rate(4096, 4096, 4096, "fp4", H100, cal)
    a100 = load_hardware("a100-sxm-80gb")  # no FP8 tensor cores: NaN, as step.py
    assert np.isnan(calibrated_gemm_rate(4096, 4096, 4096, np.array([1]), a100, cal)[0])


def test_precision_code_arrays_match_the_per_precision_results():
    cal = _cal([(4096, 4096, 4096, "bf16", 788.72), (8192, 8192, 8192, "bf16", 797.51),
                (4096, 4096, 4096, "fp8", 1216.9), (16384, 16384, 16384, "fp8", 1377.3)])
    M = np.array([4096, 4096, 6000, 6000, 8192, 8192, 100, np.nan])
    N = np.array([4096, 4096, 3000, 3000, 28672, 28672, 50, 4096])
    code = np.array([0, 1, 0, 1, 0, 1, 1, 0])
    got = calibrated_gemm_rate(M, N, 4096, code, H100, cal)
    want = np.where(code == 1, calibrated_gemm_rate(M, N, 4096, "fp8", H100, cal),
                    calibrated_gemm_rate(M, N, 4096, "bf16", H100, cal))
    np.testing.assert_array_equal(got, want)
    assert got[0] == 788.72e12 * F and got[1] == 1216.9e12 * F and np.isnan(got[-1])


# ----------------------------------------------------------------------------- ingest
def test_reference_file_rows_and_reasons():
    res = ingest(REF, gpu_filter="H100 80GB HBM3")
    assert [(r.M, r.dtype, r.tflops) for r in res.rows] == [
        (1024, "bf16", 176.62), (2048, "bf16", 676.59), (4096, "bf16", 788.72), (8192, "bf16", 797.51),
        (10240, "bf16", 719.72), (1024, "fp16", 179.13), (2048, "fp16", 645.12), (4096, "fp16", 760.04),
        (8192, "fp16", 736.19), (10240, "fp16", 668.42)]
    assert res.rows[2].source == "gemm_measurements.yaml:100 (zzc_torch)"  # reference line 99 + the added source line
    assert res.other_gpus == 112 - 15
    assert res.skipped == [
        "gemm_measurements.yaml:108: dtype 'tf32' is not a training precision the planner models (bf16, fp8)",
        "gemm_measurements.yaml:109: dtype 'tf32' is not a training precision the planner models (bf16, fp8)",
        "gemm_measurements.yaml:110: dtype 'fp32' is not a training precision the planner models (bf16, fp8)",
        "gemm_measurements.yaml:111: dtype 'fp32' is not a training precision the planner models (bf16, fp8)",
        "gemm_measurements.yaml:117: no numeric M/N/K (has shape): not a single GEMM shape",
    ]
    assert res.files[0].provenance[0].startswith("source: project reference data")


def test_reference_file_grouped_batched_and_blockscaled_rows():
    h800 = ingest(REF, gpu_filter="H800")
    assert len(h800.rows) == 18 and {r.dtype_as_given for r in h800.rows} == {"fp8_e4m3_blockscaled"}
    assert sum("no numeric M (has groups, M_per_group)" in s for s in h800.skipped) == 10
    swiglu = ingest(REF, gpu_filter="H100")  # the SwiGLU d_ff bench is torch.bmm with batch 4
    assert sum("batched GEMM (batch 4)" in s for s in swiglu.skipped) == 6


def test_several_gpus_need_a_filter():
    with pytest.raises(PlannerError, match=r"rows from 21 GPUs .* a profile describes one GPU") as e:
        ingest_files([REF])
    assert "--gpu-filter" in e.value.hint
    with pytest.raises(PlannerError, match=r"no usable GEMM rows \(112 row\(s\) of other GPUs\)"):
        ingest(REF, gpu_filter="TPU v5p")


def test_plain_csv(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("# source: our H100 box, 2026-03-01\nM,N,K,dtype,tflops\n4096,4096,4096,bf16,700.5\n"
                 "8192, 28672, 8192, fp8_e4m3, 1300\n1024,1024,1024,tf32,100\n")
    res = ingest(p)
    assert [(r.M, r.N, r.K, r.dtype, r.tflops, r.source) for r in res.rows] == [
        (4096, 4096, 4096, "bf16", 700.5, "mine.csv:3"), (8192, 28672, 8192, "fp8", 1300.0, "mine.csv:4")]
    assert res.rows[1].dtype_as_given == "fp8_e4m3"
    assert res.skipped == ["mine.csv:5: dtype 'tf32' is not a training precision the planner models (bf16, fp8)"]
    assert res.files[0].provenance == ["source: our H100 box, 2026-03-01"]


@pytest.mark.parametrize("text, message", [
    ("M,N,K,dtype,tflops\n4096,4096,4096,bf16,fast\n", "bad.csv:2: field `tflops`: 'fast' is not a positive number"),
    ("M,N,K,dtype,tflops\n4096,4096,4096,bf16,-3\n", "bad.csv:2: field `tflops`: '-3' is not a positive number"),
    ("M,N,K,dtype,tflops\n4096,40x6,4096,bf16,700\n", "bad.csv:2: field `N`: '40x6' is not a positive integer"),
    ("M,N,K,dtype,tflops\n4096.5,4096,4096,bf16,700\n", "bad.csv:2: field `M`: '4096.5' is not a positive integer"),
    ("M,N,K,dtype,tflops\n4096,4096,4096,bf17,700\n", "bad.csv:2: field `dtype`: unknown precision 'bf17'"),
    ("M,N,K,dtype,tflops\n4096,4096,4096,bf16\n", "bad.csv:2: 4 fields where the header (line 1) has 5"),
    ("M,N,K,dtype,TFLOP\n4096,4096,4096,bf16,700\n", "bad.csv:1: the CSV header has no `tflops` column"),
    ("", "no CSV header or rows"),
])
def test_csv_errors_name_file_line_and_field(tmp_path, text, message):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(PlannerError) as e:
        ingest(p)
    assert message in e.value.message and e.value.hint


def test_json_and_yaml_forms(tmp_path):
    rows = [{"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "tflops": 700}, {"M": 64, "N": 4096, "K": 7168, "dtype": "e4m3", "tflops": 287}]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.json").write_text(json.dumps({"measurements": rows}))
    (tmp_path / "c.yml").write_text(yaml.safe_dump({"rows": rows}))
    for name in ("a.json", "b.json", "c.yml"):
        res = ingest(tmp_path / name)
        assert [(r.M, r.dtype, r.tflops) for r in res.rows] == [(4096, "bf16", 700.0), (64, "fp8", 287.0)]
    assert ingest(tmp_path / "a.json").rows[1].source == "a.json: row 2"
    assert ingest(tmp_path / "c.yml").rows[1].source == "c.yml:7"
    (tmp_path / "d.json").write_text(json.dumps([{"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}]))
    with pytest.raises(PlannerError, match=r"d.json: row 1: field `tflops`: missing"):
        ingest(tmp_path / "d.json")
    (tmp_path / "e.json").write_text("[{")
    with pytest.raises(PlannerError, match=r"e.json: line 1, column 3: invalid JSON"):
        ingest(tmp_path / "e.json")
    (tmp_path / "f.yaml").write_text("gpu: H100\n")
    with pytest.raises(PlannerError, match="no list of GEMM rows found"):
        ingest(tmp_path / "f.yaml")
    (tmp_path / "g.txt").write_text("M,N,K,dtype,tflops\n")
    with pytest.raises(PlannerError, match=r"unknown file type '.txt'") as e:
        ingest(tmp_path / "g.txt")
    assert ".csv, .json or .yaml" in e.value.hint
    with pytest.raises(PlannerError, match="no such file"):
        ingest(tmp_path / "missing.csv")


def test_a_written_profile_can_be_ingested_again(tmp_path):
    out = tmp_path / "p.yaml"
    assert _gemm("--from", REF, "--gpu-filter", "H100 SXM (Azure", "-o", out).exit_code == 0
    res = ingest(out)
    assert len(res.rows) == 9 and res.rows[4].tflops == 1377.3


# ----------------------------------------------------------------------------- the check
def test_from_reference_rows_changes_a_matching_layer_bf16(tmp_path):
    """Llama 2 7B, seq 4096, micro-batch 1, TP 1: its attention output projection is the
    4096^3 GEMM that the H100 sweep measured at 788.72 TFLOP/s (burst clock)."""
    out = tmp_path / "p.yaml"
    r = _gemm("--from", REF, "--gpu-filter", "H100 80GB HBM3", "--hardware", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    prof = load_profile(out)
    m = load_model("llama2-7b")
    before = forward_gemm_times(m, H100, 1, 4096, "bf16")
    after = forward_gemm_times(m, H100, 1, 4096, "bf16", prof.gemm)
    flops = 2.0 * 4096**3
    assert float(before.attn_out) == pytest.approx(_model_time(4096, 4096, 4096, P16), rel=1e-6)  # at 632.78 TFLOP/s
    assert float(after.attn_out) == pytest.approx(flops / (788.72e12 * F), rel=1e-12)
    assert float(after.attn_out / before.attn_out) == pytest.approx(632.783 / (788.72 * F), rel=1e-5)  # 0.9439
    # the profile's section priced directly gives the same, arrays and precision codes included
    t = calibrated_gemm_time(np.array([4096.0]), 4096, 4096, np.array([0]), H100, prof.gemm)
    assert t[0] == pytest.approx(float(after.attn_out), rel=1e-15)


def test_from_reference_rows_changes_a_matching_layer_fp8(tmp_path):
    """GPT-3 175B, seq 2048, micro-batch 3, TP 4: MLP up [6144, 49152/4, 12288] and down
    [6144, 12288, 49152/4] are the 6144x12288x12288 GEMM Azure measured on H100 in fp8."""
    out = tmp_path / "p.yaml"
    assert _gemm("--from", REF, "--gpu-filter", "H100 SXM (Azure", "-o", out).exit_code == 0
    cal = load_profile(out).gemm
    m = load_model("gpt3-175b")
    before = forward_gemm_times(m, H100, 4, 3 * 2048, "fp8")
    after = forward_gemm_times(m, H100, 4, 3 * 2048, "fp8", cal)
    flops = 2.0 * 6144 * 12288 * 12288
    for name in ("mlp_up", "mlp_down"):
        assert float(after[name]) == pytest.approx(flops / (1351.4e12 * F), rel=1e-12)
        assert float(before[name]) == pytest.approx(_model_time(6144, 12288, 12288, P8), rel=1e-6)  # at 1156.40 TFLOP/s
    assert float(after.mlp_up / before.mlp_up) == pytest.approx(1156.395 / (1351.4 * F), rel=1e-5)  # 1.0067


# ----------------------------------------------------------------------------- CLI and profile
def test_cli_from_prints_the_table_and_reasons(tmp_path):
    out = tmp_path / "p.yaml"
    r = _gemm("--from", REF, "--gpu-filter", "H100 80GB HBM3", "--hardware", "h100-sxm", "-o", out)
    assert r.exit_code == 0
    assert "788.7" in r.stdout and "79.7%" in r.stdout  # 788.72 / 989
    assert f"wrote {out} (gemm: 10 row(s))" in r.stdout.replace("\n", "")
    assert "warning: skipped gemm_measurements.yaml:108: dtype 'tf32'" in r.stderr
    assert "warning: skipped 97 row(s) of other GPUs" in r.stderr
    prof = load_profile(out)
    assert prof.hardware == "h100-sxm" and prof.nccl is None
    gem = prof.gemm
    assert (gem.gpu, gem.sm_count, gem.peak_bf16_TFLOPS, gem.peak_fp8_TFLOPS, gem.sustained) == ("H100 80GB HBM3", 132, 989.0, 1979.0, False)
    prov = gem.provenance
    assert prov.method == "ingested" and prov.gpu_filter == "H100 80GB HBM3" and prov.rows_of_other_gpus == 97
    import hashlib

    assert prov.files[0].sha256 == hashlib.sha256(REF.read_bytes()).hexdigest()
    assert load_profile(out) == type(prof).model_validate(yaml.safe_load(dump_profile(prof)))  # reads back identically


def test_cli_keeps_the_nccl_section_and_its_created_time(tmp_path):
    out = tmp_path / "p.yaml"
    r = runner.invoke(app, ["calibrate", "nccl", str(NCCL_LOG), "--collective", "all_reduce", "--nodes", "1",
                            "--hardware", "h100-sxm", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    nccl = load_profile(out)
    r = _gemm("--from", REF, "--gpu-filter", "H100 80GB HBM3", "--hardware", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert "kept its nccl section" in r.stdout
    both = load_profile(out)
    assert both.nccl == nccl.nccl and both.created == nccl.created and len(both.gemm.rows) == 10
    assert both.covered() == nccl.covered()
    # a second run replaces the gemm section
    assert _gemm("--from", REF, "--gpu-filter", "H100 SXM (Azure", "-o", out).exit_code == 0
    again = load_profile(out)
    assert again.nccl == nccl.nccl and {r.dtype for r in again.gemm.rows} == {"fp8"} and again.hardware == "h100-sxm"
    # one profile, one kind of GPU
    r = _gemm("--from", REF, "--gpu-filter", "H200 SXM (Azure", "--hardware", "h200-sxm", "-o", out)
    assert r.exit_code == 2 and "calibrated on hardware 'h100-sxm', not 'h200-sxm'" in r.stderr


def test_cli_does_not_overwrite_a_file_that_is_not_a_profile(tmp_path):
    out = tmp_path / "notes.yaml"
    out.write_text("shopping: [eggs]\n")
    r = _gemm("--from", REF, "--gpu-filter", "H100 80GB HBM3", "-o", out)
    assert r.exit_code == 2 and "exists and is not a calibration profile" in r.stderr and "hint:" in r.stderr
    assert out.read_text() == "shopping: [eggs]\n"


def test_cli_bad_invocations_exit_2(tmp_path):
    out = tmp_path / "p.yaml"
    cases = [
        ((), "give either --from FILE"),
        (("--from", REF, "--run", "--model", "llama3-8b"), "give either --from FILE"),
        (("--from", REF, "--gpu-filter", "H100 80GB HBM3"), "-o/--output is required"),
        (("--from", REF), "rows from 21 GPUs"),
        (("--run", "--tp", "1,2"), "--run needs --model"),
        (("--run", "--model", "llama3-8b", "--tp", "1,two"), "--tp: '1,two' is not a list of positive integers"),
        (("--run", "--model", "llama3-8b", "--dtype", "fp4"), "--dtype: fp4 is not bf16 or fp8"),
        (("--run", "--model", "llama9"), "unknown model 'llama9'"),
    ]
    for args, message in cases:
        r = _gemm(*args, *(("-o", out) if "-o/--output" not in message else ()))
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr + r.stdout, (args, r.stderr)
    assert not out.exists()


def test_run_dry_run_lists_the_shapes_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as without the extra
    r = _gemm("--run", "--model", "llama3-8b", "--tp", "1,2", "--hardware", "h200-sxm", "--dry-run")
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    assert "10 GEMM shape(s) x bf16, fp8" in text
    for row in ("│ 8,192 │   3,072 │  4,096 │", "│ 8,192 │ 128,256 │  4,096 │", "│ 8,192 │   4,096 │ 14,336 │"):
        assert row in text, row
    assert "llama3-8b tp=2 T=8192 qkv" in text and "estimated GPU time on h200-sxm" in text


def test_run_without_torch_exits_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    r = _gemm("--run", "--model", "llama3-8b", "--tp", "1,2,4,8", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 2
    assert "error: PyTorch is not installed" in r.stderr
    assert "hint: pip install '.[gpu]'" in r.stderr
    assert not (tmp_path / "p.yaml").exists()


# ----------------------------------------------------------------------------- --run with a stand-in torch
class _T:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    def t(self):
        return _T(self.shape[::-1], self.dtype)

    def to(self, dtype):
        return _T(self.shape, dtype)


def _fake_torch(cuda=True, cap=(9, 0), rate_bf16=500e12, rate_fp8=1000e12):
    """Just enough of torch for run_gemm_benchmark: a GPU whose clock advances by 2MNK/rate
    per product, so the times (and TFLOP/s) the benchmark reports are known exactly."""
    torch = types.ModuleType("torch")
    clock = [0.0]
    torch.__version__ = "9.9.0+stand-in"
    torch.version = SimpleNamespace(cuda="12.8", hip=None)
    torch.bfloat16, torch.float32, torch.float8_e4m3fn = "bf16", "f32", "e4m3"
    torch.log = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self):
            self.t = clock[0]

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3  # milliseconds, as torch

    torch.cuda = SimpleNamespace(
        is_available=lambda: cuda,
        get_device_properties=lambda i: SimpleNamespace(name="Stand-in H200", major=cap[0], minor=cap[1],
                                                        multi_processor_count=132, L2_cache_size=50 * 2**20),
        Event=Event, synchronize=lambda: None, empty_cache=lambda: None,
    )
    torch.randn = lambda *shape, device=None, dtype=None: _T(shape, dtype)
    torch.tensor = lambda v, device=None, dtype=None: _T((), dtype)

    def mm(a, b):
        (M, K), (K2, N) = a.shape, b.shape
        assert K == K2 and a.dtype == b.dtype == "bf16"
        clock[0] += 2.0 * M * N * K / rate_bf16
        torch.log.append(("mm", M, N, K))
        return _T((M, N), "bf16")

    def scaled_mm(a, b, scale_a=None, scale_b=None, out_dtype=None):
        (M, K), (K2, N) = a.shape, b.shape
        assert K == K2 and a.dtype == b.dtype == "e4m3" and out_dtype == "bf16" and scale_a.dtype == "f32"
        clock[0] += 2.0 * M * N * K / rate_fp8
        torch.log.append(("scaled_mm", M, N, K))
        return _T((M, N), "bf16")

    torch.mm, torch._scaled_mm = mm, scaled_mm
    return torch


def test_run_with_torch_but_no_gpu_exits_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(cuda=False))
    r = _gemm("--run", "--model", "llama3-8b", "-o", tmp_path / "p.yaml")
    assert r.exit_code == 2 and "PyTorch sees no GPU" in r.stderr and "hint:" in r.stderr


def test_run_times_each_shape_and_records_provenance(tmp_path, monkeypatch):
    fake = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    out = tmp_path / "p.yaml"
    r = _gemm("--run", "--model", "llama3-8b", "--tp", "1,2", "--seq-len", "4096", "--hardware", "h200-sxm",
              "--warmup", "3", "--repeats", "5", "--note", "stand-in GPU", "-o", out)
    assert r.exit_code == 0, r.stderr
    prof = load_profile(out)
    gem = prof.gemm
    assert len(gem.rows) == 20  # 10 shapes x bf16, fp8
    assert {r.tflops for r in gem.rows if r.dtype == "bf16"} == {500.0}
    assert {r.tflops for r in gem.rows if r.dtype == "fp8"} == {1000.0}
    row = next(r for r in gem.rows if (r.M, r.N, r.K, r.dtype) == (4096, 3072, 4096, "bf16"))
    assert row.layers == ["llama3-8b tp=2 T=4096 qkv"] and row.repeats == 5 and row.tflops_best == 500.0
    assert (gem.gpu, gem.sm_count, gem.sustained, gem.peak_bf16_TFLOPS) == ("Stand-in H200", 132, False, 989.0)
    p = gem.provenance
    assert (p.method, p.torch_version, p.cuda_version, p.compute_capability) == ("measured", "9.9.0+stand-in", "12.8", "9.0")
    assert (p.models, p.tp, p.seq_len, p.micro_batch, p.warmup, p.repeats, p.notes) == (
        ["llama3-8b"], [1, 2], [4096], [1], 3, 5, ["stand-in GPU"])
    # each shape: 3 warm-up + 5 timed calls, operands as nn.Linear (W[N, K] used transposed)
    assert fake.log.count(("mm", 4096, 3072, 4096)) == 8 and fake.log.count(("scaled_mm", 4096, 3072, 4096)) == 8
    # the calibrated model now predicts the stand-in's rate (derated: not a sustained run)
    t = calibrated_gemm_time(4096, 3072, 4096, "bf16", load_hardware("h200-sxm"), gem)
    assert t == 2.0 * 4096 * 3072 * 4096 / (500e12 * F)


def test_run_skips_fp8_without_fp8_tensor_cores_and_can_run_sustained(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(cap=(8, 0)))  # A100: compute capability 8.0
    shapes = benchmark_shapes([load_model("llama3-8b")], [8], [1024], [1])
    res = run_gemm_benchmark(shapes, ("bf16", "fp8"), warmup=1, repeats=3, sustained=True, heat_s=0.01, warm_s=0.001)
    assert len(res.rows) == 5 and {r.dtype for r in res.rows} == {"bf16"} and res.sustained
    assert res.skipped == ["fp8: Stand-in H200 (compute capability 8.0) has no FP8 GEMM in this PyTorch"]
    cal = g.calibration_from_run(res, heat_s=0.01, warm_s=0.001)
    assert cal.sustained and "sustained: 0.01 s heat-up" in cal.provenance.timing


def test_gemm_only_profile_is_accepted_by_explain(tmp_path):
    out = tmp_path / "p.yaml"
    assert _gemm("--from", REF, "--gpu-filter", "H100 80GB HBM3", "-o", out).exit_code == 0
    r = runner.invoke(app, ["explain", "--model", "llama2-7b", "--gpus", "8", "--calibration", str(out), "--format", "json"])
    assert r.exit_code == 0, r.stderr


def test_explain_compute_time_follows_a_slower_gemm_profile(tmp_path):
    """A profile whose single measured shape runs at 600 TFLOP/s (sustained) makes every GEMM
    slower than the default 794.5 x 0.85 plateau: explain's compute time rises, the
    communication terms stay but for the backward's wgrad input re-gathers (step.py [35]), which hide behind the
    now longer dgrad GEMMs, and the output says the GEMM calibration was used."""
    csv = tmp_path / "g.csv"
    csv.write_text("M,N,K,dtype,tflops\n8192,8192,8192,bf16,600\n")
    out = tmp_path / "p.yaml"
    assert _gemm("--from", csv, "--hardware", "h100-sxm", "--sustained", "-o", out).exit_code == 0
    args = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--format", "json"]
    base = json.loads(runner.invoke(app, args).stdout)
    cal = json.loads(runner.invoke(app, args + ["--calibration", str(out)]).stdout)
    assert cal["time"]["compute_s"] > base["time"]["compute_s"]
    rg, rg0 = cal["time"]["tp_wgrad_regather_s"], base["time"]["tp_wgrad_regather_s"]
    assert 0 < rg < rg0
    assert cal["time"]["tp_comm_s"] - rg == pytest.approx(base["time"]["tp_comm_s"] - rg0, rel=1e-12)
    assert cal["calibration"]["used"] == ["gemm"]


def test_nccl_calibration_keeps_an_existing_gemm_section(tmp_path):
    out = tmp_path / "p.yaml"
    assert _gemm("--from", REF, "--gpu-filter", "H100 80GB HBM3", "--hardware", "h100-sxm", "-o", out).exit_code == 0
    r = runner.invoke(app, ["calibrate", "nccl", "tests/data/nccl_logs/h100_8gpu_allreduce_aws-p5-batch.txt",
                            "--collective", "all_reduce", "--nodes", "1", "--hardware", "h100-sxm", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    prof = load_profile(out)
    assert prof.gemm is not None and prof.nccl is not None
