#!/usr/bin/env bash
# Same-run A/B of variants of one source file on the GPU machine. Each variant is a copy of the
# tree with FILE replaced by VARIANT.cu, or, when VARIANT is a folder, with the files under it
# laid over the tree at their relative paths (a change to several files); all build kernels/
# standalone in parallel and run the gpu test named by TEST (default decode_attention_gpu_test),
# then the bench rows run in alternating rounds (variant after variant, shape after shape), so
# every variant sees the same machine state. A shape is "D B S" (an INT2 decode case, --only) or
# "demote D CLIP [T]" (a demotion case of T tokens, --demote). Carry the folder that holds the
# variants (an ignored one such as .ab).
# Log: $OUT/ab.log (one line per row, prefixed by the variant's name), tests and builds in
# $OUT/ab_<name>.log; at the end the medians per shape against the first variant
# (bench/kernels/ab_summary.py) go to stdout.
# Usage: [TEST=kv_quant_gpu_test] bash scripts/device/ab.sh FILE ROUNDS "SHAPE;SHAPE;..." VARIANT.cu...
#   e.g. bash scripts/device/ab.sh kernels/attention/decode_attention.cu 3 \
#          "128 1 131072;128 32 8192" .ab/base.cu .ab/new.cu
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out/device}
mkdir -p "$OUT"
if [ $# -lt 4 ]; then
  sed -n '2,15p' "$0"
  exit 2
fi
FILE=$1 ROUNDS=$2 SHAPES=$3
TEST=${TEST:-decode_attention_gpu_test}
shift 3
jobs=$((16 / $#))
[ "$jobs" -ge 1 ] || jobs=1
names=()
for v in "$@"; do
  name=$(basename "$v" .cu)
  names+=("$name")
  dir=/tmp/ab/$name
  rm -rf "$dir" && mkdir -p "$dir/src"
  tar --exclude='./build*' --exclude=./.cache --exclude=./.carry --exclude=./.git \
    --exclude=./out -cf - . | tar -xf - -C "$dir/src"
  if [ -d "$v" ]; then cp -r "$v"/. "$dir/src/"; else cp "$v" "$dir/src/$FILE"; fi
  (cmake -S "$dir/src" -B "$dir/build" -G Ninja -DOSCARKV_KERNELS_ONLY=ON \
     -DCMAKE_BUILD_TYPE=Release && cmake --build "$dir/build" -j "$jobs" \
     --target decode_attention_bench "$TEST" &&
   "$dir/build/tests/kernels/$TEST") > "$OUT/ab_$name.log" 2>&1 &
done
wait
for name in "${names[@]}"; do
  echo "$name: build $(test -x "/tmp/ab/$name/build/bench/kernels/decode_attention_bench" \
&& echo ok || echo FAILED), gpu test: $(grep -cE '\] PASS' "$OUT/ab_$name.log") cases pass, \
$(grep -cE '\] FAIL' "$OUT/ab_$name.log") fail, $(grep -E 'ALL PASS|SOME FAILED' "$OUT/ab_$name.log")"
done
IFS=';' read -ra shapes <<< "$SHAPES"
for ((round = 1; round <= ROUNDS; ++round)); do
  for shape in "${shapes[@]}"; do
    for name in "${names[@]}"; do
      bin=/tmp/ab/$name/build/bench/kernels/decode_attention_bench
      [ -x "$bin" ] || continue
      mode=--only args=$shape
      [[ $shape == demote* ]] && mode=--demote args=${shape#demote}
      # shellcheck disable=SC2086  # args is "D B S" or "D CLIP [T]"
      "$bin" $mode $args 2>&1 | sed "s/^/$name r$round /" | tee -a "$OUT/ab.log"
    done
  done
done
python3 bench/kernels/ab_summary.py "$OUT/ab.log"
