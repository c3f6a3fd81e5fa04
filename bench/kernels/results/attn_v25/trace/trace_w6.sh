#!/usr/bin/env bash
# Trace of the int2_warps_6 variant (session 25): tree copy + trace patch + the w6 edits.
set -euo pipefail
d=/tmp/tw6; rm -rf $d; mkdir -p $d/src
tar --exclude='./build*' --exclude=./.git --exclude=./.ab -cf - . | tar -xf - -C $d/src
patch -d $d/src -p1 --quiet < bench/kernels/trace/decode_trace.patch
python3 - $d/src/kernels/attention/decode_attention.cu <<'PY'
import sys
p=sys.argv[1]; s=open(p).read()
reps=[('''  __shared__ __align__(128) SplitSmem<D, C> sm;''','''  extern __shared__ __align__(128) uint8_t stage1_smem[];
  SplitSmem<D, C>& sm = *reinterpret_cast<SplitSmem<D, C>*>(stage1_smem);'''),
('''    const int64_t static_bytes = static_cast<int64_t>(sizeof(SplitSmem<D, C>));
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(128, footprint - static_bytes));''','''    const int64_t smem_bytes = static_cast<int64_t>(sizeof(SplitSmem<D, C>));
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(smem_bytes, footprint));'''),
('''      return LaunchSplits<D, Bf16WarpCta>(p, grid, overlap, stream);''','''      return LaunchSplits<D, CtaLayout<6, false, 2>>(p, grid, overlap, stream);''')]
for a,b in reps:
    assert a in s, a
    s=s.replace(a,b)
open(p,'w').write(s)
PY
cmake -S $d/src -B $d/build -G Ninja -DOSCARKV_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release > $d/b.log 2>&1
cmake --build $d/build -j16 --target decode_attention_bench >> $d/b.log 2>&1 || { tail -30 $d/b.log; exit 1; }
OSCARKV_TRACE=1 $d/build/bench/kernels/decode_attention_bench --only 128 1 131072 > "$OUT/trace_w6.txt"
grep -h '^decode' "$OUT/trace_w6.txt"
python3 bench/kernels/trace/decode_trace.py "$OUT/trace_w6.txt"
gzip "$OUT/trace_w6.txt"
