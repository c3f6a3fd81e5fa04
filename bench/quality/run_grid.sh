#!/usr/bin/env bash
# The quality grid committed in bench/quality/RESULTS.md (exact commands). Run from the repo root
# after building `quality_eval` (same code as `oscarkv eval`):
#   cmake --build build-eval --target quality_eval
#   nohup bash bench/quality/run_grid.sh > bench/quality/run_grid.log 2>&1 &
# Sized for a shared 2-core machine (see RESULTS.md for what that cost in windows).
set -euo pipefail
BIN=${QUALITY_EVAL:-build-eval/bench/quality/quality_eval}
OUT=${QUALITY_OUT:-bench/quality/results}
TEXTS=(data/text/austen/emma.txt data/text/austen/persuasion.txt data/text/moby/mobydick.txt)
CODECS=bf16,int2-naive,int2-hadamard,oscar,kivi2
# 2k grid; calibrates here on Austen P&P + S&S (4096 tokens), disjoint from the texts above.
"$BIN" eval --model default --text "${TEXTS[@]}" --codecs "$CODECS" --context 2048 --windows 4 \
  --calibration-tokens 4096 --out "$OUT/ctx2048"
CAL="$OUT/ctx2048/calibration_qqt_sst.okvcal"
# NIAH at 2k (true decode through each codec's cache), grid skipped.
"$BIN" eval --model default --text "${TEXTS[@]}" --codecs "$CODECS" --context 2048 --windows 0 \
  --calibration "$CAL" --niah --niah-context 2048 --niah-depth 10,50,90 --out "$OUT/niah"
# 4k grid.
"$BIN" eval --model default --text "${TEXTS[@]}" --codecs "$CODECS" --context 4096 --windows 2 \
  --calibration "$CAL" --out "$OUT/ctx4096"
