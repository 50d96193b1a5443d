"""Calibration: fit the planner's cost figures to a site's own measurements.

nccl.py     parse nccl-tests output (all_reduce_perf, all_gather_perf, ...) and fit
            latency and bus bandwidth per (collective, scope, ranks).
profile.py  the profile YAML (pydantic, unknown keys are errors): what was measured,
            where, when, and the fitted figures; `load_profile(path)` and
            `CalibrationProfile.bandwidth_and_latency(collective, scope, ranks)` are what
            the communication model calls.
(gemm.py    GEMM calibration: added by its own task.)

Units: SI inside (bytes, seconds, bytes/s); human units only in YAML keys that name them.
"""

from .nccl import calibrate_logs, parse_log
from .profile import CalibrationProfile, load_profile

__all__ = ["CalibrationProfile", "calibrate_logs", "load_profile", "parse_log"]
