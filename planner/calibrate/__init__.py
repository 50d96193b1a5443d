"""Calibration: what measures, parses and fits a site's own measurements, and writes the
profile (plain data the cost models receive: planner/profile.py).

nccl.py     parse nccl-tests output (all_reduce_perf, all_gather_perf, ...) and fit
            latency and bus bandwidth per (collective, scope, ranks).
gemm.py     GEMM calibration: time the model's GEMM shapes with PyTorch (--run) or ingest
            measurements (--from); compute.py uses them for the shapes they cover and
            interpolates for others.
run.py      measured training runs (run records, torchtitan and Megatron-LM logs with the
            job or trainer config they ran) -> the run-calibration knobs of the time and
            memory model (profile.RUN_PARAMETERS), fitted by bounded least squares.
host_adam.py a timed CPU Adam step (DeepSpeed's ZeRO-1/2 wall-clock breakdown, its CPU Adam
            benchmarks, records) -> the host Adam's fraction of the DRAM peak under CPU offload
            (profile section host_adam, in place of offload.HOST_MEMORY_EFFICIENCY).
profile.py  build and write the profile YAML; planner/profile.py holds its data models
            (pydantic, unknown keys are errors) and `load_profile(path)`.

Nothing below the commands imports this package: the cost models (compute, comm, step)
read a loaded profile, never a parser or a fitter (tests/test_imports.py). Submodules are
imported where they are used, so that the commands that do not calibrate do not pull in
scipy.optimize.

Units: SI inside (bytes, seconds, bytes/s); human units only in YAML keys that name them.
"""
