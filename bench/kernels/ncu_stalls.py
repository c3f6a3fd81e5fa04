#!/usr/bin/env python3
"""Where a kernel's warps wait, from the ncu_source.csv that scripts/device/profile.sh writes.

Groups the per-instruction stall samples of the first kernel in the file by execution count
(instructions executed once per warp, once per loop step, ... fall into separate groups, so the
main loop, the once-per-CTA prologue/epilogue and the ring refill separate without reading the
SASS), then lists the instructions that hold the most samples with their top stall reasons.

    python3 bench/kernels/ncu_stalls.py OUT/ncu_source.csv [--top N]
"""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr = rows[start]
    col = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    data = []
    for r in rows[start + 1:]:
        if not r or r[0] in ("Address", "Kernel Name"):
            break  # the next kernel's section
        samples = int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        executed = int(r[col["Instructions Executed"]] or 0)
        reasons = collections.Counter({h[6:]: int(r[col[h]] or 0) for h in stalls})
        data.append((samples, executed, r[col["Source"]].strip(), reasons))
    total = sum(d[0] for d in data) or 1
    print(f"{len(data)} instructions, {total} warp samples ({rows[0][1] if len(rows[0]) > 1 else ''})")
    print("\nby execution count (warp-level executions per instruction):")
    groups = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for samples, executed, _, reasons in data:
        g = groups[executed]
        g[0] += 1
        g[1] += samples
        g[2].update(reasons)
    for executed, (n, samples, reasons) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:10]:
        top = ", ".join(f"{k} {v}" for k, v in reasons.most_common(3))
        print(f"  executed {executed:9d}: {n:5d} instructions, {100 * samples / total:5.1f}% of "
              f"samples  ({top})")
    print("\nreasons over the kernel:")
    all_reasons = collections.Counter()
    for *_, reasons in data:
        all_reasons.update(reasons)
    for k, v in all_reasons.most_common(10):
        print(f"  {k:16s} {100 * v / total:5.1f}%")
    print(f"\ntop {args.top} instructions:")
    ranked = sorted(range(len(data)), key=lambda i: -data[i][0])[:args.top]
    for i in sorted(ranked):
        samples, executed, src, reasons = data[i]
        top = ", ".join(f"{k} {v}" for k, v in reasons.most_common(2) if v)
        print(f"  {i:5d} {100 * samples / total:5.1f}% x{executed:<8d} {src[:60]:60s} {top}")


if __name__ == "__main__":
    main()
