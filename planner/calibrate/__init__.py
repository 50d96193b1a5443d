"""Calibration: fit the planner's cost figures to a site's own measurements.

nccl.py     parse nccl-tests output (all_reduce_perf, all_gather_perf, ...) and fit
            latency and bus bandwidth per (collective, scope, ranks).
gemm.py     GEMM calibration: time the model's GEMM shapes with PyTorch (--run) or ingest
            measurements (--from); the compute model uses them for the shapes they cover
            and interpolates for others.
profile.py  the profile YAML (pydantic, unknown keys are errors): what was measured,
            where, when, and the fitted figures; `load_profile(path)`.

Submodules are imported where they are used (`from planner.calibrate.profile import
load_profile`), so that the time model does not pull in scipy.optimize.

Units: SI inside (bytes, seconds, bytes/s); human units only in YAML keys that name them.
"""
