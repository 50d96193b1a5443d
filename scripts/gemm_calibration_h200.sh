#!/usr/bin/env bash
# Time the GEMM shapes of llama3-8b and llama3-70b (seq 8192, micro-batch 1 -> M = 8192 tokens)
# at TP 1, 2, 4 and 8 on one H200, in bf16 and fp8, with `planner calibrate gemm --run`, and
# write the profile the planner reads:
#   hardware_db/calibration/h200-sxm-gemm.yaml        sustained clock (--sustained: 30 s heat-up,
#                                                     each shape 1 s back to back before timing)
#   hardware_db/calibration/h200-sxm-gemm-burst.yaml  benchmark clock (10 warm-up calls), for
#                                                     comparison: burst / sustained measures the
#                                                     clock drop compute.py assumes (SUSTAINED_TENSOR_FRACTION)
# 40 distinct shapes x 2 dtypes. GPU time, estimated by `--dry-run --hardware h200-sxm` from the
# uncalibrated model: about 120 s sustained + 10 s burst, plus PyTorch start-up and input set-up:
# about 3 minutes in all. Each run is capped at 240 s.
#
# Needs: python3 with PyTorch (CUDA build) and planner's dependencies (typer, rich, pydantic 2,
# numpy, scipy, pyyaml). On a machine without network access carry the missing ones as wheels.
# Usage, from anywhere:  bash scripts/gemm_calibration_h200.sh [OUTPUT_DIR]
# If $OUT is set (the device runner's return folder), the profiles and the log are copied there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest_dir="${1:-hardware_db/calibration}"
mkdir -p "$dest_dir"
py="${PYTHON:-python3}"

if ! "$py" -c "import planner.cli" 2>/tmp/planner_import.err; then
  echo "error: planner does not import with $py:" >&2; tail -n 3 /tmp/planner_import.err >&2
  echo "hint: install its dependencies (pip install '.[gpu]'), or carry wheels of the missing package" >&2
  exit 2
fi
"$py" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0)); sys.exit(0 if torch.cuda.is_available() else 2)"

common=(calibrate gemm --run --model llama3-8b --model llama3-70b --tp 1,2,4,8 --seq-len 8192 --micro-batch 1
        --dtype bf16,fp8 --hardware h200-sxm --warmup 10 --repeats 30
        --note "scripts/gemm_calibration_h200.sh on $(hostname)")
log="$dest_dir/h200-sxm-gemm.log"
set +e
{
  set -e
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv || true
  # one profile per file: -o must not hold another GPU's profile (a stale one is replaced)
  rm -f "$dest_dir/h200-sxm-gemm-burst.yaml" "$dest_dir/h200-sxm-gemm.yaml"
  timeout 240 "$py" -m planner "${common[@]}" -o "$dest_dir/h200-sxm-gemm-burst.yaml"
  timeout 240 "$py" -m planner "${common[@]}" --sustained -o "$dest_dir/h200-sxm-gemm.yaml"
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv || true
} 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ -n "${OUT:-}" ]; then
  cp "$dest_dir"/h200-sxm-gemm*.yaml "$log" "$OUT"/ 2>/dev/null || true
fi
exit "$status"
