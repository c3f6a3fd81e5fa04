#!/usr/bin/env bash
# ncu of stage 1 at D128 B=1 128k for the tree, then with .ab/nomem/kernels/attention/decode_attention.cu
# (the tree with no_memory_timing.patch applied) copied over it. Run on the device from the repo
# root with .ab carried; writes $OUT/ncu_base.txt and $OUT/ncu_nomem.txt.
set -uo pipefail
for v in base nomem; do
  if [ $v = nomem ]; then cp .ab/nomem/kernels/attention/decode_attention.cu kernels/attention/; fi
  cmake -S . -B build-dev -G Ninja -DOSCARKV_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release > /tmp/b.log 2>&1 &&
    cmake --build build-dev -j16 --target decode_attention_bench >> /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
  ncu --clock-control none -k regex:"DecodeSplit" --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    --metrics sm__cycles_elapsed.avg.per_second,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fmaheavy.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,smsp__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active \
    -o /tmp/prof_$v build-dev/bench/kernels/decode_attention_bench --only 128 1 131072 > /tmp/run_$v.txt 2>&1
  ncu --import /tmp/prof_$v.ncu-rep --print-details all > "$OUT/ncu_$v.txt" 2>&1
  tail -3 /tmp/run_$v.txt
done
