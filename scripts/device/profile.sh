#!/usr/bin/env bash
# Nsight Compute on one INT2 decode case (default D=128, B=1, S=128k): builds like check.sh, then
# profiles one stage-1 launch and one merge launch. Usage: bash scripts/device/profile.sh [D B S]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
cmake -S . -B build-dev -G Ninja -DOSCARKV_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  > "$OUT/build.log" 2>&1 && cmake --build build-dev -j16 >> "$OUT/build.log" 2>&1 \
  || { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
D=${1:-128}; B=${2:-1}; S=${3:-131072}
ncu --clock-control none -k regex:"DecodeSplit|MergeKernel" --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section LaunchStats \
  build-dev/bench/kernels/decode_attention_bench --only "$D" "$B" "$S" 2>&1 | tee "$OUT/ncu.txt"
