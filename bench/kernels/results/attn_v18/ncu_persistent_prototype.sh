#!/usr/bin/env bash
# ncu of the persistent prototype (pxa4 = persistent_prototype.patch + _cp_async + _4_producers,
# kept under .ab/pxa4 when run) at D128 B=1 128k, no BF16 tier, plain launch; run on the device
# from the repo root with .ab carried; writes $OUT/ncu_persistent_prototype.txt.
set -uo pipefail
cp .ab/pxa4/kernels/attention/decode_attention.cu kernels/attention/
cmake -S . -B build-dev -G Ninja -DOSCARKV_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release > /tmp/b.log 2>&1 &&
  cmake --build build-dev -j16 --target decode_attention_bench >> /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
export OSCARKV_EXP_PERSIST=1 OSCARKV_BENCH_PLAIN_LAUNCH=1 OSCARKV_BENCH_BF16_TOKENS=0
ncu --clock-control none -k regex:"PersistentInt2" --launch-skip 4 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
  --section WarpStateStats --section SchedulerStats --section Occupancy \
  --metrics smsp__inst_executed_pipe_alu.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active \
  -o /tmp/prof_px build-dev/bench/kernels/decode_attention_bench --only 128 1 131072 > /tmp/run_px.txt 2>&1
tail -3 /tmp/run_px.txt
ncu --import /tmp/prof_px.ncu-rep --print-details all > "$OUT/ncu_persistent_prototype.txt" 2>&1
