#!/usr/bin/env bash
# One device call: build kernels/ standalone with the GPU machine's nvcc, run the gpu-labelled
# tests, compute-sanitizer on the tests, the CUDA benchmark, then the PyTorch SDPA baselines.
# Logs go to $OUT (or out/device when unset). Usage: bash scripts/device/check.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
QUICK=${1:-}
status=0
source scripts/device/build_kernels.sh
build_kernels
echo "== gpu tests"
(cd build-dev && ctest -L gpu --output-on-failure 2>&1) > "$OUT/tests.log" || status=1
for t in decode_attention_gpu_test kv_quant_gpu_test model_kernels_gpu_test int2_dequant_gpu_test byte_checksum_gpu_test; do build-dev/tests/kernels/$t 2>&1; done \
  | tee "$OUT/tests_verbose.log"
grep -E "tests passed|FAILED" "$OUT/tests.log"
echo "== compute-sanitizer"
for t in decode_attention_gpu_test kv_quant_gpu_test model_kernels_gpu_test int2_dequant_gpu_test byte_checksum_gpu_test; do
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 build-dev/tests/kernels/$t --small \
      > /tmp/sanitizer.log 2>&1
    rc=$?
    { echo "=== $tool $t rc=$rc"; cat /tmp/sanitizer.log; } >> "$OUT/sanitizer.log"
    echo "$tool $t: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitizer.log | tail -1)"
    [ $rc -eq 0 ] || status=1
  done
done
echo "== CUDA bench"
build-dev/bench/kernels/decode_attention_bench $QUICK 2>&1 | tee "$OUT/bench.log" || status=1
build-dev/bench/kernels/prefill_attention_bench $QUICK 2>&1 | tee "$OUT/prefill_bench.log" || status=1
echo "== PyTorch SDPA baselines"
PYTHONUNBUFFERED=1 python3 bench/kernels/sdpa_baseline.py $QUICK 2>&1 | tee "$OUT/sdpa.log" || status=1
PYTHONUNBUFFERED=1 python3 bench/kernels/prefill_sdpa_baseline.py $QUICK 2>&1 | tee "$OUT/prefill_sdpa.log" || status=1
exit $status
