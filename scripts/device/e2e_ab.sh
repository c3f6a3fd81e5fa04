#!/usr/bin/env bash
# On the GPU machine, after `model.sh run DIR` in the same call (it unpacks the binaries and the
# model into the scratch folder): the batch-1 decode latency of other builds of gpu_e2e_bench
# against this one, in alternating rounds so that every build sees the same machine state.
# OLD holds the other builds, each a stripped gpu_e2e_bench compressed as NAME.xz (built here
# from another commit and carried); the staged build runs as "new".
# RUNS: the gpu_e2e_bench argument sets of a round, separated by ';' (default: batch-1 latency of
# both codecs at 8k and 128k, default model then qwen3-8b-like).
# Usage: [RUNS="--mode throughput --budgets-gib 16 --steps 16"] bash scripts/device/e2e_ab.sh
#          OLD_DIR [ROUNDS (2)]
# Log: $OUT/e2e_ab.log, one "== NAME round N" header per build and round, then the table rows.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out/device}
SCRATCH=${TMPDIR:-/tmp}/oscarkv-stage
old=${1:?folder of NAME.xz builds}; rounds=${2:-2}
[ -x "$SCRATCH/bin/gpu_e2e_bench" ] || { echo "run model.sh run first" >&2; exit 1; }
cublas=$(dirname "$(find / -name 'libcublas.so.13*' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$SCRATCH/lib:$cublas:${LD_LIBRARY_PATH:-}"
export OSCARKV_DEFAULT_MODEL="$SCRATCH/model.gguf"
names=()
for f in "$old"/*.xz; do
  n=$(basename "$f" .xz)
  xz -dc "$f" > "$SCRATCH/bench_$n" && chmod +x "$SCRATCH/bench_$n" && names+=("$n")
done
ln -sf "$SCRATCH/bin/gpu_e2e_bench" "$SCRATCH/bench_new"
names+=(new)
RUNS=${RUNS:-"--mode latency --config default --codecs bf16,oscar --contexts 8192,131072 \
--steps 64;--mode latency --config qwen3-8b-like --codecs bf16,oscar --contexts 8192,131072 \
--steps 32"}
IFS=';' read -ra runs <<< "$RUNS"
for r in $(seq 1 "$rounds"); do
  for n in "${names[@]}"; do
    echo "== $n round $r"
    for args in "${runs[@]}"; do
      # shellcheck disable=SC2086  # one argument set, split into its words
      "$SCRATCH/bench_$n" $args 2>&1 | grep '^|'
    done
  done
done | tee "$OUT/e2e_ab.log"
