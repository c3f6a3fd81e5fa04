#!/usr/bin/env bash
# Greedy agreement vs M0: 50 prompts of 384 tokens, 128 new tokens, true decode through each
# codec's ThreeTierCache (prompt prefilled at full precision).
set -euo pipefail
BIN=${QUALITY_EVAL:-build-eval/bench/quality/quality_eval}
OUT=${QUALITY_OUT:-bench/quality/results}
TEXTS=(data/text/austen/emma.txt data/text/austen/persuasion.txt data/text/moby/mobydick.txt)
CAL="$OUT/ctx2048/calibration_qqt_sst.okvcal"
"$BIN" eval --model default --text "${TEXTS[@]}" --codecs bf16,int2-hadamard,oscar \
  --context 2048 --windows 0 --calibration "$CAL" --greedy --greedy-prompts 50 \
  --greedy-prompt-tokens 384 --greedy-new-tokens 128 --out "$OUT/greedy"
