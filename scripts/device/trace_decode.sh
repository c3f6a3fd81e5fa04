#!/usr/bin/env bash
# Per-CTA timeline of decode attention on the GPU machine. Builds kernels/ in a copy of the tree
# with bench/kernels/trace/decode_trace.patch applied (%globaltimer stamps per CTA: diagnostics
# only, never in the production build), runs `decode_attention_bench --only D B S` for each shape
# with OSCARKV_TRACE=1, once as the bench runs it and once with OSCARKV_BENCH_PLAIN_LAUNCH=1, and
# summarises each trace with bench/kernels/trace/decode_trace.py.
# Output: $OUT/trace_<D>_<B>_<S>[_plain].txt (raw records) and $OUT/trace_summary.txt.
# VARIANT=DIR lays the files under DIR over the copy first (an ab.sh folder variant); if they
# carry the stamps already, the patch is not applied again.
# Usage: [VARIANT=DIR] bash scripts/device/trace_decode.sh "D B S;D B S;..."
#   e.g. bash scripts/device/trace_decode.sh "128 1 131072;128 32 8192"
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
if [ $# -ne 1 ]; then
  sed -n '2,11p' "$0"
  exit 2
fi
dir=/tmp/trace_decode
rm -rf "$dir" && mkdir -p "$dir/src"
tar --exclude='./build*' --exclude=./.cache --exclude=./.carry --exclude=./.git --exclude=./out \
  -cf - . | tar -xf - -C "$dir/src"
if [ -n "${VARIANT:-}" ]; then cp -r "$VARIANT"/. "$dir/src/"; fi
# A variant whose kernel and bench already carry the stamps (the patch merged by hand over a
# timing patch that touches the same lines) is built as it is.
if grep -q TraceNow "$dir/src/kernels/attention/decode_attention.cu" &&
   grep -q OSCARKV_TRACE "$dir/src/bench/kernels/decode_attention_bench.cu"; then
  echo "trace_decode: the variant carries the trace already; decode_trace.patch not applied"
elif ! patch -d "$dir/src" -p1 --quiet < bench/kernels/trace/decode_trace.patch; then
  echo "decode_trace.patch no longer applies to kernels/attention/decode_attention.cu or the" \
       "bench: regenerate it (bench/NOTES.md, v16)" >&2
  exit 1
fi
{ cmake -S "$dir/src" -B "$dir/build" -G Ninja -DOSCARKV_KERNELS_ONLY=ON \
    -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$dir/build" -j 16 --target decode_attention_bench; } > "$dir/build.log" 2>&1 ||
  { tail -30 "$dir/build.log" >&2; exit 1; }
bin=$dir/build/bench/kernels/decode_attention_bench
: > "$OUT/trace_summary.txt"
IFS=';' read -ra shapes <<< "$1"
for shape in "${shapes[@]}"; do
  name=trace_$(echo "$shape" | tr ' ' _)
  # shellcheck disable=SC2086  # shape is "D B S"
  OSCARKV_TRACE=1 "$bin" --only $shape > "$OUT/$name.txt"
  # shellcheck disable=SC2086
  OSCARKV_TRACE=1 OSCARKV_BENCH_PLAIN_LAUNCH=1 "$bin" --only $shape > "$OUT/${name}_plain.txt"
  grep -h '^decode' "$OUT/$name.txt" "$OUT/${name}_plain.txt" >> "$OUT/trace_summary.txt"
  python3 bench/kernels/trace/decode_trace.py "$OUT/$name.txt" "$OUT/${name}_plain.txt" \
    >> "$OUT/trace_summary.txt"
done
cat "$OUT/trace_summary.txt"
