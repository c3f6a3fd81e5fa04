#!/usr/bin/env bash
# One device call for the prefill attention only: build the kernels' model test and the prefill
# bench (kernels-only build), run the test (both kernels), memcheck and racecheck
# on its --small cases, the bench (mma.sync and Hopper kernels in one process), then PyTorch's
# cuDNN and flash SDPA on the same shapes. Logs go to $OUT (or out/device).
#   bash scripts/device/prefill.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
QUICK=${1:-}
status=0
source scripts/device/build_kernels.sh
build_kernels model_kernels_gpu_test prefill_attention_bench
echo "== model_kernels_gpu_test"
build-dev/tests/kernels/model_kernels_gpu_test > "$OUT/model_kernels_test.log" 2>&1 || status=1
grep -E "Prefill|PASSED|FAILED" "$OUT/model_kernels_test.log" | grep -E "sm90|FAIL|PASSED" | tail -40
echo "== compute-sanitizer (--small)"
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 \
    build-dev/tests/kernels/model_kernels_gpu_test --small > "$OUT/sanitizer_$tool.log" 2>&1
  rc=$?
  echo "$tool: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)"
  [ $rc -eq 0 ] || status=1
done
echo "== prefill bench"
build-dev/bench/kernels/prefill_attention_bench $QUICK 2>&1 | tee "$OUT/prefill_bench.log" || status=1
echo "== PyTorch SDPA (causal prefill)"
PYTHONUNBUFFERED=1 python3 bench/kernels/prefill_sdpa_baseline.py $QUICK 2>&1 |
  tee "$OUT/prefill_sdpa.log" || status=1
exit $status
