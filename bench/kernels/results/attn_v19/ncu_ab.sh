#!/usr/bin/env bash
# ncu of stage 1 for SHAPE (default "128 1 131072"): the tree (new) and .ab/v18 laid over it.
# Writes $OUT/ncu_{new,v18}.txt and ncu_raw_{new,v18}.csv. Run from the repo root with .ab carried.
set -uo pipefail
SHAPE=${SHAPE:-128 1 131072}
rm -rf build-dev
for v in new v18; do
  if [ $v = v18 ]; then cp -r .ab/v18/. . && find .ab/v18 -type f -printf '%P\n' | xargs touch; fi
  cmake -S . -B build-dev -G Ninja -DOSCARKV_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release > /tmp/b.log 2>&1 &&
    cmake --build build-dev -j16 --target decode_attention_bench >> /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
  ncu -f --clock-control none -k regex:"DecodeSplit" --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
    --metrics sm__cycles_elapsed.avg.per_second,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fmaheavy.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,smsp__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_xu.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
    -o /tmp/prof_$v build-dev/bench/kernels/decode_attention_bench --only $SHAPE > /tmp/run_$v.txt 2>&1
  ncu --import /tmp/prof_$v.ncu-rep --print-details all > "$OUT/ncu_$v.txt" 2>&1
  ncu --import /tmp/prof_$v.ncu-rep --page raw --csv > "$OUT/ncu_raw_$v.csv" 2>&1
  tail -3 /tmp/run_$v.txt
done
