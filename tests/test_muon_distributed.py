"""Muon's distributed TP mode and Newton-Schulz's float32 matmul precision (the job's muon_tp_mode distributed and
muon_fp32_matmul_prec; step.py [28], memory.py [mu], layers/common.py muon_distributed), and --muon-use-syrk refused.

Distributed (NVIDIA-NeMo/Emerging-Optimizers v0.3.0 muon_utils.py newton_schulz_tp l. 279-286, the tag NVIDIA/Megatron-LM
@d98e8a64 pins; v0.1.0 l. 215-222, Megatron-Core 905c0e386's): each TP rank keeps its fp32 momentum shard, newton_schulz
transposes it by its partition_dim (not by size), so the iteration spans the matrix's unpartitioned side m with the
rank's n / tp of the other; per step the partial Gram X X^T [m, m, n / tp] is all-reduced over the TP group
(newton_schulz_step l. 315-317), then b A + c A A [m, m, m] and a X + B X [m, n / tp, m]; the sum of squares of the
normalisation is all-reduced once (distributed_normalize_p2 l. 120-124, one fp32 scalar). Precision
(torch.set_float32_matmul_precision around the orthogonalization, orthogonalized_optimizer.py v0.3.0 l. 192): medium
casts X to bf16 (l. 203-213), high runs the fp32 X's GEMMs on TF32 tensor cores (half the bf16 dense peak, TF32_PER_BF16),
low is no setting torch takes (Context.cpp: 'the current setFloat32MatmulPrecision call has no effect'), so the
default highest stays: fp32 GEMMs at the non-tensor fp32 peak. Derived by hand below."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner import comm
from planner.errors import PlannerError
from planner.layers.common import muon_distributed
from planner.memory import muon_step_temporaries
from planner.plan import resolve
from planner.schema import Job
from planner.step import newton_schulz_gemms
from planner.trainers import load_trainer_config

from test_muon_step import LLAMA, _explain, _ns_seconds
from test_muon_tp_mode import SMALL, _read  # the same small Megatron argument file


def _flops(rows):
    return sum(2.0 * float(np.asarray(g.M)) * float(np.asarray(g.N)) * float(np.asarray(g.K)) * c for g, c in rows)


def test_orientation_and_flops():
    """Llama 3 8B's matrices ([ns]: rows the TP-partitioned side) at tp 2 / 4. fc2 (h x f = 4096 x 14336, listed
    14336 x 4096) at tp 4: the Gram on the unpartitioned side m = 4096 with n = 14336 / 4 = 3584 a rank: a step
    4 m^2 n + 2 m^3 = 4 x 4096^2 x 3584 + 2 x 4096^3 = 240,518,168,576 + 137,438,953,472 = 377,957,122,048 FLOPs,
    against the whole matrix's 2^40 = 1,099,511,627,776 (duplicated) and the blockwise shard's 302,526,758,912
    (test_muon_tp_mode). k (k d x h = 1024 x 4096) at tp 2: partition_dim 0, so the Gram is the 4096 side even though
    1024 is the smaller, n = 512: 4 x 4096^2 x 512 + 2 x 4096^3 = 34,359,738,368 + 137,438,953,472 = 171,798,691,840,
    where duplicated's whole k (m 1024, n 4096) is 4 x 1024^2 x 4096 + 2 x 1024^3 = 19,327,352,832: the waste
    newton_schulz_tp's docstring warns of. A rep matrix (the router, 8 x 4096: no partition_dim) stays whole, m 8."""
    mats = ((14336, 4096, 1, "split"), (1024, 4096, 2, "split"), (8, 4096, 1, "rep"), (14336, 4096, 8, "expert"))
    (g1, n1, c1, k1), (g2, n2, c2, k2), (g3, n3, c3, k3), (g4, n4, c4, k4) = muon_distributed(
        mats, np.array([4, 2]), np.array([1, 2]))
    assert g1 == 4096 and list(n1) == [3584.0, 7168.0] and (c1, k1) == (1, "split")
    assert g2 == 4096 and list(n2) == [256.0, 512.0] and (c2, k2) == (2, "split")
    assert (g3, n3, c3, k3) == (8, 4096, 1, "rep")
    assert g4 == 4096 and list(n4) == [14336.0, 7168.0] and (c4, k4) == (8, "expert")  # / etp
    assert _flops(newton_schulz_gemms(4096, 3584.0, steps=1, oriented=True)) == 377_957_122_048
    assert _flops(newton_schulz_gemms(14336, 4096, steps=1)) == 2**40
    assert _flops(newton_schulz_gemms(4096, 512.0, steps=1, oriented=True)) == 171_798_691_840
    assert _flops(newton_schulz_gemms(1024, 4096, steps=1)) == 19_327_352_832
    # un-oriented the same (4096, 512) would be transposed to m 512: the flag is what keeps the Gram on 4096
    assert _flops(newton_schulz_gemms(4096, 512.0, steps=1)) == 4 * 512**2 * 4096 + 2 * 512**3


def test_temporaries():
    """memory.py [mu]: no gather under distributed, m the Gram side. fc1 (28672 x 4096) at tp 4: (4096, 7168),
    e = 29,360,128: max(6 e = 176,160,768, 4 e + 4 m^2 = 117,440,512 + 67,108,864 = 184,549,376) = 184,549,376 B.
    k at tp 2: (4096, 512), e = 2,097,152: max(6 e = 12,582,912, 4 e + 4 x 4096^2 = 8,388,608 + 67,108,864) =
    75,497,472 B; in fp32 (high / low: no bf16 cast, X, A, B fp32) max(4 e, 8 e + 8 m^2) = 16,777,216 + 134,217,728 =
    150,994,944 B. Duplicated fc1 in fp32: the gather 8 e (e = 117,440,512: 939,524,096) + max(4 e, 8 e + 8 x 4096^2 =
    939,524,096 + 134,217,728) = 2,013,265,920 B (bf16: 1,644,167,168, test_muon_tp_mode)."""
    fc1 = muon_distributed(((28672, 4096, 1, "split"),), np.array([4]), np.array([1]))
    assert list(muon_step_temporaries(fc1, gathered=False, oriented=True)) == [184_549_376.0]
    k = muon_distributed(((1024, 4096, 1, "split"),), np.array([2]), np.array([1]))
    assert list(muon_step_temporaries(k, gathered=False, oriented=True)) == [75_497_472.0]
    assert list(muon_step_temporaries(k, gathered=False, oriented=True, fp32=True)) == [150_994_944.0]
    assert muon_step_temporaries(((28672, 4096, 1, "split"),), fp32=True) == 2_013_265_920
    assert muon_step_temporaries(((28672, 4096, 1, "split"),)) == 1_644_167_168


def test_step_llama_tp2_distributed():
    """Llama 3 8B on 8 H100s, tp 2, dp 4, zero1, --muon-tp-mode distributed: each dp rank 1 / 4 of the 32 layers'
    (as test_muon_tp_mode's blockwise case); a layer's q (4096 x 4096) and o (h x a d, split on a d) run (m 4096,
    n 2048), k and v (4096, 512), fc1 (4096, 28672 / 2 = 14336), fc2 (4096, 14336 / 2 = 7168). The Gram all-reduces
    (tp_muon_gram_s, inside tp_comm): the six split matrices a layer, each 5 steps x the bf16 Gram 2 x 4096^2 =
    33,554,432 B plus one 4 B sum of squares, over the TP group of 2 (innermost: stride 1) priced by comm.py; no
    gather. At tp 1 the Gram is still the 4096 side (TE's partition_dim), no all-reduce (a group of one)."""
    job = dict(optimizer="muon", sharding="zero1", tp=2)
    settings = resolve(Job.model_validate({**LLAMA, **job, "muon_tp_mode": "distributed"}))[0]
    ns = _ns_seconds(settings.hardware)
    layer = 2 * ns(4096, 2048) + 2 * ns(4096, 512) + ns(4096, 14336) + ns(4096, 7168)
    res = _explain(muon_tp_mode="distributed", **job)
    assert res["time"]["muon_ns_s"] == pytest.approx(32 * layer / 4, rel=1e-12)
    cpar = comm.comm_params(settings.hardware)

    def ar(size):
        return float(comm.auto_collective_times(comm.ALL_REDUCE, size, 2, 1, cpar, 8)[0])
    grams = 6 * (5 * ar(2.0 * 4096**2) + ar(4.0))
    assert res["time"]["tp_muon_gram_s"] == pytest.approx(32 * grams / 4, rel=1e-12)
    assert res["time"]["tp_muon_gather_s"] == 0.0
    adam = _explain(optimizer="adam", sharding="zero1", tp=2)["time"]
    assert res["time"]["tp_comm_s"] == pytest.approx(adam["tp_comm_s"] + res["time"]["tp_muon_gram_s"], rel=1e-12)
    assert res["plan"]["muon_tp_mode"] == "distributed"
    dup = _explain(**job)
    assert dup["time"]["tp_muon_gram_s"] == 0.0 and dup["time"]["tp_muon_gather_s"] > 0.0
    one = _explain(muon_tp_mode="distributed", optimizer="muon", sharding="zero1", tp=1)
    layer1 = 2 * ns(4096, 4096) + 2 * ns(4096, 1024) + ns(4096, 28672) + ns(4096, 14336)
    assert one["time"]["muon_ns_s"] == pytest.approx(32 * layer1 / 8, rel=1e-12)
    assert one["time"]["tp_muon_gram_s"] == 0.0


def test_matmul_precision():
    """--muon-fp32-matmul-prec on h100-sxm (bf16 989, fp32 67 TFLOPS dense): high prices the same GEMMs at half the
    bf16 rate (TF32_PER_BF16 0.5), 2x muon_ns; low, torch's default highest, at 989 / 67 = 14.76x. Under distributed
    the Gram all-reduce carries fp32, 4 x 4096^2 = 67,108,864 B a step; the TP all-gather of duplicated is of the
    fp32 momentum whatever the precision. Refused under Adam."""
    job = dict(optimizer="muon", sharding="zero1", tp=2)
    med, high, low = (_explain(muon_fp32_matmul_prec=p, **job) for p in ("medium", "high", "low"))
    assert high["time"]["muon_ns_s"] == pytest.approx(2.0 * med["time"]["muon_ns_s"], rel=1e-12)
    assert low["time"]["muon_ns_s"] == pytest.approx(989.0 / 67.0 * med["time"]["muon_ns_s"], rel=1e-12)
    assert high["time"]["tp_muon_gather_s"] == med["time"]["tp_muon_gather_s"]
    assert high["plan"]["muon_fp32_matmul_prec"] == "high" and "muon_fp32_matmul_prec" not in med["plan"]
    settings = resolve(Job.model_validate({**LLAMA, **job, "muon_tp_mode": "distributed"}))[0]
    cpar = comm.comm_params(settings.hardware)

    def ar(size):
        return float(comm.auto_collective_times(comm.ALL_REDUCE, size, 2, 1, cpar, 8)[0])
    dh = _explain(muon_tp_mode="distributed", muon_fp32_matmul_prec="high", **job)
    assert dh["time"]["tp_muon_gram_s"] == pytest.approx(32 * 6 * (5 * ar(4.0 * 4096**2) + ar(4.0)) / 4, rel=1e-12)
    with pytest.raises(PlannerError, match="muon_fp32_matmul_prec high with optimizer adam"):
        resolve(Job.model_validate({**LLAMA, "muon_fp32_matmul_prec": "high"}))


def test_megatron_reader(tmp_path):
    """--muon-fp32-matmul-prec (arguments.py @d98e8a64 l. 2640-2642, default medium) is the job's
    muon_fp32_matmul_prec; --muon-use-syrk (l. 2656-2658) is refused: TensorParallelMuon raises below
    Emerging-Optimizers 0.4.0 (emerging_optimizers.py l. 52-56, 202-207), the pin v0.3.0 (pyproject.toml l. 248);
    under Adam both are ignored (listed)."""
    cfg = _read(tmp_path, "--optimizer muon --muon-tp-mode distributed --muon-fp32-matmul-prec high")
    assert (cfg.job["muon_tp_mode"], cfg.job["muon_fp32_matmul_prec"]) == ("distributed", "high") and not cfg.unmodelled
    assert "muon_fp32_matmul_prec" not in _read(tmp_path, "--optimizer muon --muon-fp32-matmul-prec medium").job
    with pytest.raises(PlannerError, match=r"--muon-use-syrk: .*>= 0\.4\.0.*v0\.3\.0"):
        _read(tmp_path, "--optimizer muon --muon-use-syrk")
    cfg = _read(tmp_path, "--muon-use-syrk --muon-fp32-matmul-prec low")
    assert "muon_fp32_matmul_prec" not in cfg.job and not cfg.not_modelled
    assert {str(i).split("=")[0] for i in cfg.ignored} >= {"--muon-use-syrk", "--muon-fp32-matmul-prec"}


def test_cli_refuses_syrk(cli, tmp_path):
    """The refusal as the CLI shows it: error and hint, exit 2, no traceback."""
    p = tmp_path / "run.args"
    p.write_text(SMALL + " --optimizer muon --muon-use-syrk\n")
    r = cli("explain", p, "--gpus", "8", "--hardware", "h100-sxm", "-q")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "error:" in r.stderr and "hint: drop --muon-use-syrk" in r.stderr


@pytest.mark.parametrize("fmt,stack,extra", [("megatron", "megatron", []),
                                             ("megatron-bridge", "megatron-bridge", ["--no-tp-comm-overlap"])])
def test_export_round_trip(cli, tmp_path, fmt, stack, extra):
    """export writes --muon-tp-mode distributed --muon-fp32-matmul-prec high (Megatron-LM) or optimizer.muon_tp_mode /
    optimizer.muon_fp32_matmul_prec (Megatron-Bridge: OptimizerConfig @905c0e386 l. 272, 277-278), which read back as
    the same plan with the same step terms."""
    job = ["--model", "llama3-8b", "--gpus", "8", "--stack", stack, "--optimizer", "muon", "--tp", "2",
           "--sharding", "none", "--muon-tp-mode", "distributed", "--muon-fp32-matmul-prec", "high", *extra]
    out = tmp_path / "muon.sh"
    r = cli("export", *job, "--format", fmt, "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    if fmt == "megatron":
        assert "--muon-tp-mode distributed" in text and "--muon-fp32-matmul-prec high" in text
    else:
        assert "optimizer.muon_tp_mode=distributed" in text and "optimizer.muon_fp32_matmul_prec=high" in text
    a = json.loads(cli("explain", *job, "--format", "json", "-q").stdout)
    b = json.loads(cli("explain", out, "--format", "json", "-q").stdout)
    for k in ("muon_tp_mode", "muon_fp32_matmul_prec"):
        assert a["plan"][k] == b["plan"][k]
    for k in ("muon_ns_s", "tp_muon_gram_s", "tp_comm_s"):
        assert b["time"][k] == a["time"][k]


def test_bridge_reader(tmp_path):
    """Megatron-Bridge's optimizer.muon_tp_mode=distributed (905c0e386 muon.py l. 62, 87: Emerging-Optimizers v0.1.0
    newton_schulz_tp's mode) and optimizer.muon_fp32_matmul_prec are the job's; under Adam the precision is listed
    as assumed, no effect."""
    from test_bridge_muon import OFF, _launch

    f = _launch(tmp_path, "optimizer.optimizer=muon optimizer.muon_tp_mode=distributed "
                "optimizer.muon_fp32_matmul_prec=low", OFF)
    job = load_trainer_config(f, hardware="h100-sxm").job
    assert (job["muon_tp_mode"], job["muon_fp32_matmul_prec"]) == ("distributed", "low")
    cfg = load_trainer_config(_launch(tmp_path, "optimizer.muon_fp32_matmul_prec=high", OFF), hardware="h100-sxm")
    assert "muon_fp32_matmul_prec" not in cfg.job
    assert any("optimizer.muon_fp32_matmul_prec" in str(a) for a in cfg.assumed)
