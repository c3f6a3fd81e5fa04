#!/usr/bin/env bash
# Reproduces the CPU tables of bench/quality/RESULTS.md with `oscarkv eval` (decode-equivalent
# teacher forcing, 20 windows per setting, default calibration, held-out Emma / Persuasion /
# Moby Dick). From the repo root, after `bash scripts/setup.sh` and the build (scripts/test.sh
# and scripts/run.sh do both):
#   bash bench/quality/run_grid.sh [PART...]    PART: 2k 4k 8k levers niah greedy fidelity
#                                               (default: all)
# JOBS (default: nproc) (window, codec) forwards run in parallel, one core each; the numbers do
# not depend on it. On the 2-core dev VM one (window, codec) forward took ~14 s at 2k, ~46 s at
# 4k and ~117 s at 8k (session 6 runs: 544 s, 1863 s, and 5839 s with JOBS=2 for 100 forwards),
# so the 8k part with all nine codecs (180 forwards) takes about 3 hours with JOBS=2;
# RESULTS.md says which codecs each committed folder holds (the GPU runs of the other 8k codecs
# are scripts/device/model.sh's --quality/--clip).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${OSCARKV:-build/tools/oscarkv}
OUT=${QUALITY_OUT:-bench/quality/results}
JOBS=${JOBS:-$(nproc)}
TEXTS=(data/text/austen/emma.txt data/text/austen/persuasion.txt data/text/moby/mobydick.txt)
CAL=data/calibration/smollm2-135m-oscar.cal,data/calibration/smollm2-135m-oscar-gram.cal
ALL=bf16,int2-naive,int2-hadamard,oscar-hadamard,oscar-norot,oscar-gram,oscar,kivi2,oscar-tns
LEVERS=bf16,oscar@0.90/0.84,oscar+g32,oscar@0.90/0.84+g32
# --fidelity-windows 0 unless a part asks for fidelity (FID); NIAH and greedy prefill one prompt
# at a time on JOBS BLAS threads instead (EVAL_JOBS=1: --jobs > 1 keeps BLAS on one thread).
eval_() { "$BIN" eval --model default --text "${TEXTS[@]}" --calibration "$CAL" \
            --jobs "${EVAL_JOBS:-$JOBS}" --fidelity-windows "${FID:-0}" "$@"; }
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(2k 4k 8k levers niah greedy fidelity)
for part in "${parts[@]}"; do
  case "$part" in
    2k) eval_ --codecs "$ALL" --context 2048 --windows 20 --out "$OUT/ctx2048_cpu20" ;;
    4k) eval_ --codecs "$ALL" --context 4096 --windows 20 --out "$OUT/ctx4096_cpu20" ;;
    8k) eval_ --codecs "$ALL" --context 8192 --windows 20 --out "$OUT/ctx8192_cpu20" ;;
    levers) eval_ --codecs "$LEVERS" --context 2048 --windows 20 --out "$OUT/levers_2k" ;;
    niah) EVAL_JOBS=1 eval_ --codecs "$ALL" --context 2048 --windows 0 --niah \
            --niah-context 2048,4096,8192 --niah-trials 2 --threads "$JOBS" \
            --out "$OUT/niah_cpu_all" ;;
    greedy) EVAL_JOBS=1 eval_ --codecs "$ALL" --context 2048 --windows 0 --greedy \
              --greedy-prompts 50 --greedy-new-tokens 128 --threads "$JOBS" \
              --out "$OUT/greedy_cpu_all" ;;
    # Per-layer attention fidelity (attention-row KL, output error) on the first windows.
    fidelity)
      FID=2 eval_ --codecs "$ALL" --context 2048 --windows 2 --out "$OUT/fidelity_2k"
      FID=2 eval_ --codecs "$ALL" --context 4096 --windows 2 --out "$OUT/fidelity_4k"
      FID=1 eval_ --codecs "$ALL" --context 8192 --windows 1 --out "$OUT/fidelity_8k" ;;
    *) echo "unknown part $part (2k 4k 8k levers niah greedy fidelity)" >&2; exit 2 ;;
  esac
done
python3 bench/quality/combine_results.py
