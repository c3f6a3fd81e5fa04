#!/usr/bin/env bash
# Stronger clipping (after run_levers.sh showed clipping is the biggest lever): same window.
set -euo pipefail
BIN=${QUALITY_EVAL:-build-eval/bench/quality/quality_eval}
OUT=${QUALITY_OUT:-bench/quality/results}
TEXTS=(data/text/austen/emma.txt data/text/austen/persuasion.txt data/text/moby/mobydick.txt)
CAL="$OUT/ctx2048/calibration_qqt_sst.okvcal"
run() { "$BIN" eval --model default --text "${TEXTS[@]}" --codecs bf16,oscar --context 1536 \
          --windows 1 --fidelity-windows 0 --no-plots "$@"; }
run --calibration "$CAL" --k-clip 0.94 --v-clip 0.88 --out "$OUT/lever_clip_094_088"
run --calibration "$CAL" --k-clip 0.90 --v-clip 0.84 --out "$OUT/lever_clip_090_084"
run --calibration "$CAL" --k-clip 0.84 --v-clip 0.75 --out "$OUT/lever_clip_084_075"
