#!/usr/bin/env bash
# On the GPU machine: end-to-end runs of lib/model_gpu with the real default model, staged by
# scripts/device/stage_model.sh in three back-to-back calls (ARCHITECTURE.md §7).
#   bash scripts/device/model.sh stage DIR          copy DIR's files to the scratch folder
#   bash scripts/device/model.sh run DIR [--bench] [--quality] [--clip] [--niah]  copy DIR's files, reassemble the
#        model, check its sha256, unpack the binaries; run the GPU-vs-CPU tests and `oscarkv
#        generate --device cuda`; with --bench also the end-to-end benchmarks; with --quality the
#        true-decode quality grid (20 windows at 2k and 8k, held-out text); with --clip the
#        clipping lever at 8k and greedy agreement (50 prompts x 128 tokens); with --niah the
#        needle in a haystack at 2k/4k/8k (5 depths x 3 trials, true decode). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
SCRATCH=${TMPDIR:-/tmp}/oscarkv-stage
mkdir -p "$SCRATCH"
cmd=${1:?stage|run}; dir=${2:?folder}
cp "$dir"/* "$SCRATCH"/
[ "$cmd" = stage ] && { ls -la "$SCRATCH"; exit 0; }

cat "$SCRATCH"/model.part1 "$SCRATCH"/model.part2 "$SCRATCH"/model.part3 > "$SCRATCH"/model.gguf
if [ "$(sha256sum "$SCRATCH"/model.gguf | cut -d' ' -f1)" != "$(cat "$SCRATCH"/model.sha256)" ]; then
  echo "model sha256 mismatch: stage again" >&2; exit 1
fi
tar -C "$SCRATCH" -xJf "$SCRATCH"/bins.tar.xz
mkdir -p data/calibration && cp "$SCRATCH"/smollm2-135m-oscar*.cal data/calibration/
cublas=$(dirname "$(find / -name 'libcublas.so.13*' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$SCRATCH/lib:$cublas:${LD_LIBRARY_PATH:-}"
export OSCARKV_DEFAULT_MODEL="$SCRATCH/model.gguf"
BIN="$SCRATCH/bin"
status=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
echo "== GPU vs CPU tests"
"$BIN"/model_gpu_test 2>&1 | tee "$OUT/model_gpu_test.log" | grep -vE '^\[ +(RUN|OK) ' || status=1
grep -q "FAILED" "$OUT/model_gpu_test.log" && status=1
echo "== generate --device cuda"
for codec in bf16 oscar; do
  "$BIN"/oscarkv generate --device cuda --codec "$codec" --max-tokens 48 \
    --prompt "The three most important things to know about the ocean are" 2>&1 \
    | tee "$OUT/generate_$codec.log" || status=1
done
bench=0; quality=0; clip=0; niah=0
for a in "${@:3}"; do
  case "$a" in --bench) bench=1 ;; --quality) quality=1 ;; --clip) clip=1 ;; --niah) niah=1 ;;
    *) echo "unknown $a" >&2; exit 2 ;; esac
done
if [ $quality = 1 ]; then
  echo "== quality (true decode on the GPU, held-out text)"
  OMP_NUM_THREADS=16 "$BIN"/gpu_e2e_bench --mode quality --config default \
    --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
    --codecs bf16,oscar,oscar-gram,oscar-hadamard,oscar-norot --contexts 2048,8192 --windows 20 \
    2>&1 | tee "$OUT/quality.log" || status=1
fi
if [ $clip = 1 ]; then
  echo "== quality: the clipping lever at 8k"
  OMP_NUM_THREADS=16 "$BIN"/gpu_e2e_bench --mode quality --config default \
    --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
    --codecs bf16,oscar@0.90/0.84,oscar@0.84/0.75,oscar-hadamard@0.90/0.84 --contexts 8192 \
    --windows 20 2>&1 | tee "$OUT/quality_clip.log" || status=1
  echo "== greedy agreement: 50 prompts of 1024 tokens, 128 new tokens"
  "$BIN"/gpu_e2e_bench --mode greedy --config default --prompt 1024 --output 128 --windows 50 \
    --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
    --codecs bf16,oscar,oscar-hadamard,oscar-norot,oscar@0.90/0.84 2>&1 \
    | tee "$OUT/greedy.log" || status=1
fi
if [ $niah = 1 ]; then
  echo "== needle in a haystack (true decode on the GPU, held-out text)"
  "$BIN"/gpu_e2e_bench --mode niah --config default \
    --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
    --codecs bf16,oscar,oscar-hadamard,oscar@0.90/0.84 --contexts 2048,4096,8192 \
    --depths 10,30,50,70,90 --trials 3 2>&1 | tee "$OUT/niah.log" || status=1
fi
if [ $bench = 1 ]; then
  E="$BIN"/gpu_e2e_bench
  echo "== TTFT"; $E --mode ttft --contexts 8192,32768 2>&1 | tee "$OUT/ttft.log"
  echo "== latency"; $E --mode latency --steps 32 2>&1 | tee "$OUT/latency.log"
  echo "== latency (default model shape, real weights)"
  $E --mode latency --config default --contexts 8192,32768,131072 --steps 32 2>&1 \
    | tee "$OUT/latency_default.log"
  echo "== throughput"; $E --mode throughput --steps 16 2>&1 | tee "$OUT/throughput.log"
fi
exit $status
