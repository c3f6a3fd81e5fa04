#!/usr/bin/env python3
"""The decode grid of a `check.sh` run (all 18 shapes, or --quick's 4) as a markdown table.

Reads the bench's log (decode_attention_bench: one `decode int2` and one `decode bf16` row per
shape, taking the default-plan row without variant tags) and sdpa_baseline.py's log (one
`sdpa cudnn` and one `sdpa flash` row per shape), and prints per shape: INT2 time, bandwidth,
floor and % of floor; our BF16 kernel's time and % of its floor; cuDNN and flash; and the INT2
speedup over each of the three. A shape missing from either log is left out, with a note on
stderr.

  python3 bench/kernels/grid_table.py bench.log sdpa.log
"""
import re
import sys

# decode int2  Hq=32 Hkv=8 D=128 B= 1 S=  8192 cps=auto ... splits=   31   7.62 us  771.4 GB/s
#   floor    1.37 us   18.0% of floor[  variant tags]
DECODE = re.compile(
    r"decode (int2|bf16)\s+Hq=\s*(\d+) Hkv=(\d+) D=\s*(\d+) B=\s*(\d+) S=\s*(\d+) cps=auto "
    r".*?bf=\s*(\d+) .*?\s([\d.]+) us\s+([\d.]+) GB/s\s+floor\s+([\d.]+) us\s+([\d.]+)% of "
    r"floor(.*)$")
# sdpa cudnn Hq=32 Hkv=8 D=128 B= 1 S=  8192     15.35 us ...
SDPA = re.compile(
    r"sdpa (cudnn|flash)\s+Hq=\s*(\d+) Hkv=(\d+) D=\s*(\d+) B=\s*(\d+) S=\s*(\d+)\s+([\d.]+) us")


def read_bench(lines):
    """{(hq, hkv, d, b, s): {"int2": (us, gbs, floor, pct), "bf16": (...)}}: the default rows.

    Variant rows carry tags after "% of floor" (sequential, plain launch, ...) or another BF16
    tier (bf=0: the INT2 tier alone); the default INT2 row has min(S, 320) BF16 tokens, the BF16
    row all S."""
    rows = {}
    for line in lines:
        m = DECODE.search(line)
        if not m or m.group(12).strip():
            continue
        kind = m.group(1)
        shape = tuple(int(m.group(i)) for i in range(2, 7))
        s, bf = shape[4], int(m.group(7))
        if bf != (min(s, 320) if kind == "int2" else s):
            continue
        rows.setdefault(shape, {}).setdefault(
            kind, tuple(float(m.group(i)) for i in range(8, 12)))
    return rows


def read_sdpa(lines):
    """{(hq, hkv, d, b, s): {"cudnn": us, "flash": us}}."""
    rows = {}
    for line in lines:
        m = SDPA.search(line)
        if m:
            shape = tuple(int(m.group(i)) for i in range(2, 7))
            rows.setdefault(shape, {}).setdefault(m.group(1), float(m.group(7)))
    return rows


def context(s):
    return f"{s // 1024}k" if s % 1024 == 0 else str(s)


def main(bench_path, sdpa_path):
    with open(bench_path) as f:
        bench = read_bench(f)
    with open(sdpa_path) as f:
        sdpa = read_sdpa(f)
    print("| shape | B | S | INT2 µs | INT2 GB/s | INT2 floor µs | % of floor | our BF16 µs "
          "(% of floor) | cuDNN BF16 µs | flash BF16 µs | INT2 vs cuDNN | vs flash | "
          "vs our BF16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in sorted(bench, key=lambda k: (-k[2], k[3], k[4])):
        hq, hkv, d, b, s = shape
        ours, base = bench[shape], sdpa.get(shape, {})
        if s < 8192 or "int2" not in ours:
            continue  # the bench's S = 320 rows time the BF16 tier alone
        missing = [k for k, have in (("bf16", ours), ("cudnn", base), ("flash", base))
                   if k not in have]
        if missing:
            print(f"shape {shape}: no {', '.join(missing)} row", file=sys.stderr)
            continue
        us, gbs, floor, pct = ours["int2"]
        bf_us, _, _, bf_pct = ours["bf16"]
        print(f"| Hq{hq}/Hkv{hkv}/D{d} | {b} | {context(s)} | {us:.2f} | {gbs:.0f} | {floor:.2f} "
              f"| {pct:.1f}% | {bf_us:.2f} ({bf_pct:.1f}%) | {base['cudnn']:.2f} | "
              f"{base['flash']:.2f} | {base['cudnn'] / us:.2f}x | {base['flash'] / us:.2f}x | "
              f"{bf_us / us:.2f}x |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    main(sys.argv[1], sys.argv[2])
