"""explain's context-parallel line tells the attention layers' K/V ring from the state-space and
linear-attention layers' CP exchanges (issue 22/24 audit). step.cp_comm prices the two apart
(ring attention beside the core, planner/layers/attention.py; Megatron-Core's all-to-alls of
MambaContextParallel and the Gated DeltaNet's, exposed, planner/layers/mamba.py and
linear_attention.py), but explain printed their sum as "CP ring: K/V traffic": nemotron-h-56b at
tp 8 x cp 4 (16K tokens) showed 4.488 s of "K/V traffic" of which 4.338 s were the 54 Mamba-2
layers' all-to-alls and 0.151 s its 10 attention layers' ring. The time JSON now has
cp_scan_comm_s (of cp_comm_total_s, all exposed) for a model with such layers.

Derived without the planner's own split: with pp 1 every layer is on the one stage and each
layer's CP time is its own (sizes from its mixer and the micro-batch), so the whole model's
scan part equals the CP time of the model with its Mamba-2 layers alone (54 of them), and its
ring part that of the model with its attention layers alone (10)."""

from __future__ import annotations

import pytest
import yaml

from planner.catalog import load_model

JOB = dict(gpus=64, tp=8, cp=4, pp=1, global_batch=64, micro_batch=1, seq_len=16384, sharding="zero1")


def _only(tmp_path, kind: str, n: int) -> str:
    base = load_model("nemotron-h-56b").model_dump(exclude_none=True)
    base.update(num_layers=n, layer_pattern=[kind], name=f"nemotron-h-{kind}-only")
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(base))
    return str(path)


def test_the_mamba_all_to_alls_are_not_the_kv_ring(explain, tmp_path):
    *_, full = explain(model="nemotron-h-56b", **JOB)
    *_, mamba = explain(model=_only(tmp_path, "mamba", 54), **JOB)
    *_, attn = explain(model=_only(tmp_path, "attn", 10), **JOB)
    t, tm, ta = full["time"], mamba["time"], attn["time"]
    assert t["cp_scan_comm_s"] == pytest.approx(tm["cp_comm_total_s"], rel=1e-9)
    assert tm["cp_scan_comm_s"] == pytest.approx(tm["cp_comm_total_s"], rel=1e-12) == tm["cp_comm_s"]
    assert t["cp_comm_total_s"] - t["cp_scan_comm_s"] == pytest.approx(ta["cp_comm_total_s"], rel=1e-9)
    assert t["cp_comm_s"] - t["cp_scan_comm_s"] == pytest.approx(ta["cp_comm_s"], rel=1e-9)
    assert "cp_scan_comm_s" not in ta  # attention layers only: no such key
    # the scans' exchanges dominate here: 54 layers of 6 all-to-alls of T d_i / t = 4,096 x 2,048 bf16 ...
    assert t["cp_scan_comm_s"] > 10 * (t["cp_comm_total_s"] - t["cp_scan_comm_s"])


def test_explain_prints_the_two_apart(cli):
    r = cli("explain", "--model", "nemotron-h-56b", *[f"--{k.replace('_', '-')}={v}" for k, v in JOB.items()])
    assert r.exit_code == 0, r.stderr
    ring = next(line for line in r.stdout.splitlines() if "CP ring: K/V traffic" in line)
    scan = next(line for line in r.stdout.splitlines() if "CP of the state-space / linear-attention layers" in line)
    kv = float(ring.split("K/V traffic ")[1].split(" s")[0])
    ssm = float(scan.split("layers: ")[1].split(" s")[0])
    assert kv < 0.2 < 4.0 < ssm
