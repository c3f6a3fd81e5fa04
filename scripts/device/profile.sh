#!/usr/bin/env bash
# Nsight Compute on one INT2 decode case (default D=128, B=1, S=128k): builds like check.sh, then
# profiles one stage-1 launch and one merge launch.
# Usage: bash scripts/device/profile.sh [D B S [CPS]] (CPS: the plan's stage-1 CTAs per SM, as
# decode_attention_bench --only takes it; default 0 = the plan's own choice).
# With --demote [D CLIP] instead: one unrotated bf16 demotion launch (default D=128, K's clip 0.96),
# with the instruction mix per pipe, the issue stalls (ncu_demote.txt) and the stall samples per
# SASS instruction (ncu_demote_source.csv, summarised by bench/kernels/ncu_stalls.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
source scripts/device/build_kernels.sh
build_kernels
if [ "${1:-}" = --demote ]; then
  # Args after --demote: D CLIP (default 128 0.96), one launch of that demotion case.
  DD=${2:-128} CLIP=${3:-0.96}
  ncu --clock-control none -k regex:"KvInt2RowsKernel" --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section SourceCounters \
    --metrics smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fp16.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,regex:smsp__pcsamp_warps_issue_stalled_.* \
    -o "$OUT/prof" build-dev/bench/kernels/decode_attention_bench --demote "$DD" "$CLIP" \
    > "$OUT/ncu_run.txt" 2>&1
  ncu --import "$OUT/prof.ncu-rep" --print-details all > "$OUT/ncu_demote.txt" 2>&1
  ncu --import "$OUT/prof.ncu-rep" --page source --print-source sass --csv \
    > "$OUT/ncu_demote_source.csv" 2>&1
  rm -f "$OUT/prof.ncu-rep"
  python3 bench/kernels/ncu_stalls.py "$OUT/ncu_demote_source.csv" --top 40
  exit 0
fi
D=${1:-128}; B=${2:-1}; S=${3:-131072}; CPS=${4:-0}
# The stall reasons (sampled per warp) go to ncu.txt; the SASS of stage 1 with its stall samples
# per instruction to ncu_source.csv (which instructions the warps wait on; summarise it here with
# python3 bench/kernels/ncu_stalls.py FILE).
ncu --clock-control none -k regex:"DecodeSplit|MergeKernel" --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters \
  --metrics regex:smsp__pcsamp_warps_issue_stalled_.* -o "$OUT/prof" \
  build-dev/bench/kernels/decode_attention_bench --only "$D" "$B" "$S" "$CPS" \
  > "$OUT/ncu_run.txt" 2>&1
ncu --import "$OUT/prof.ncu-rep" --print-details all 2>&1 | tee "$OUT/ncu.txt"
ncu --import "$OUT/prof.ncu-rep" -k regex:DecodeSplit --page source --print-source sass --csv \
  > "$OUT/ncu_source.csv" 2>&1
rm -f "$OUT/prof.ncu-rep"
