"""Achievable fractions of a datasheet rate that more than one layer needs. Dimensionless.

A leaf module (it imports nothing of planner): compute.py prices memory-bound kernels with
HBM_EFFICIENCY and profile.py bounds the run-calibration knob that scales it
(`memory_bound_efficiency_scale`), and compute imports profile, so the one constant lives
here for both (compute re-exports it: `compute.HBM_EFFICIENCY`).
"""

from __future__ import annotations

HBM_EFFICIENCY = 0.90  # achievable fraction of HBM bandwidth for streaming elementwise kernels
# (assumption: STREAM-style copies reach ~90% of HBM peak on H100/A100-class GPUs; a
# calibration profile replaces it)
