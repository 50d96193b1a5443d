"""planner: analytic capacity planner and auto-parallelism search for LLM training.

Units inside the package are SI: bytes, seconds, FLOPs, bytes/s. Human units
(GB, GiB, TFLOP/s, GB/s) appear only in YAML keys that say so and in planner/render/.
"""

__version__ = "0.1.0"
