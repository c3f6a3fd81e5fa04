#!/usr/bin/env bash
# Levers on OSCAR (M6): clip ratios and calibration size, one 1536-token window each (the time
# left on the shared 2-core machine), same window for every setting (same seed).
set -euo pipefail
BIN=${QUALITY_EVAL:-build-eval/bench/quality/quality_eval}
OUT=${QUALITY_OUT:-bench/quality/results}
TEXTS=(data/text/austen/emma.txt data/text/austen/persuasion.txt data/text/moby/mobydick.txt)
CAL="$OUT/ctx2048/calibration_qqt_sst.okvcal"
run() { "$BIN" eval --model default --text "${TEXTS[@]}" --codecs bf16,oscar --context 1536 \
          --windows 1 --fidelity-windows 0 --no-plots "$@"; }
run --calibration "$CAL" --out "$OUT/lever_clip_default"                       # K 0.96 / V 0.92
run --calibration "$CAL" --k-clip 1.0 --v-clip 1.0 --out "$OUT/lever_noclip"   # no clipping
run --calibration "$CAL" --k-clip 0.98 --v-clip 0.96 --out "$OUT/lever_clip_mild"
run --calibration-tokens 12288 --out "$OUT/lever_calib12k"                     # 3x calibration
