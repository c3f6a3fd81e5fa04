#!/usr/bin/env python3
"""Summarises a decode-attention trace (scripts/device/trace_decode.sh).

Input: the bench's output with OSCARKV_TRACE=1 and bench/kernels/trace/decode_trace.patch
applied: one `T kind copy x y smid t0 t1 t2 t3 t4 t5` line per CTA, times in ns of %globaltimer.
Stage 1 (kind & 15 == 1): t0 start, t1 q staged, t2 every warp's loop done, t3 end, t4 warp 0's
first ring data (0 if none), t5 how far apart (ns, low 56 bits) the first and the last INT2 warp
finished their loops, and which warps they were (bits 56-59 and 60-63; 0 without INT2 tiles;
older traces lack it). Merge (kind 2): t0 start, t1 after the wait, t2 loads done, t3 end,
t4 after the barrier.

Prints, per call (copy) of the timed graph, when its stage-1 CTAs start, stage q, finish their
loops and end, and when its merge starts, waits, ends; then the spread of each phase over the
CTAs, and how the two CTAs that share an SM finish: which of them ends first (the one with the
lower block index, dispatched first, or the one whose first stamp came first), and each blockIdx.y's
median loop end against its call's median (at B=1 blockIdx.y is the KV head); then each SM's
span from its first q staged to its last loop end, and whether the same SMs are slow every call.

  python3 bench/kernels/trace/decode_trace.py TRACE.txt[.gz] [TRACE.txt[.gz] ...]
"""
import collections
import gzip
import statistics
import sys


def spread(xs):
    """min / median / max of a list of microseconds, formatted."""
    return f"{min(xs):6.2f} {statistics.median(xs):6.2f} {max(xs):6.2f}"


def correlation(a, b):
    """Pearson correlation of two equally long lists (nan if either is constant)."""
    ma, mb = statistics.mean(a), statistics.mean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    den = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    return num / den if den else float("nan")


def sm_spans(stage1):
    """Per SM and call, the time from the first q staged to the last loop end of the SM's CTAs.

    Returns the per-SM means over the calls, the largest mean over their harmonic mean (what a
    static split loses against one balanced by each SM's rate), and the mean correlation of the
    per-SM spans between two calls (near 0: noise; near 1: some SMs are slower every call).
    None with fewer than two calls."""
    per_call = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in stage1:
        per_call[r[1]][r[4]].append(r)
    calls = sorted(per_call)
    if len(calls) < 2:
        return None
    sms = sorted(set.intersection(*[set(per_call[c]) for c in calls]))
    span = {c: [(max(r[7] for r in per_call[c][m]) - min(r[6] for r in per_call[c][m])) / 1e3
                for m in sms] for c in calls}
    mean = [statistics.mean(span[c][i] for c in calls) for i in range(len(sms))]
    harmonic = len(mean) / sum(1 / x for x in mean)
    pairs = [(a, b) for i, a in enumerate(calls) for b in calls[i + 1:]]
    corr = statistics.mean(correlation(span[a], span[b]) for a, b in pairs)
    return {"mean": mean, "max_over_hm": max(mean) / harmonic, "corr": corr}


def summarise(path):
    rows = []
    header = ""
    for line in (gzip.open(path, "rt") if path.endswith(".gz") else open(path)):
        if line.startswith("TRACE"):
            header = line.strip()
        if line.startswith("T "):
            rows.append([int(x) for x in line.split()[1:]])
    if not rows:
        print(f"== {path}: no trace records")
        return
    print(f"== {path} ({header})")
    base = min(r[5] for r in rows)
    us = lambda t: (t - base) / 1000.0
    stage1 = [r for r in rows if r[0] & 15 == 1]
    merge = [r for r in rows if r[0] == 2]
    print("  per call, us from the first start: stage 1 start..  q staged (median)  loop done "
          "(min/median/max)  end (max) | merge start..  waited (max)  end (max)")
    for copy in sorted({r[1] for r in rows}):
        s1 = [r for r in stage1 if r[1] == copy]
        mg = [r for r in merge if r[1] == copy]
        line = f"  call {copy}: "
        if s1:
            line += (f"{us(min(r[5] for r in s1)):7.2f}..{us(max(r[5] for r in s1)):7.2f}  "
                     f"{us(statistics.median(r[6] for r in s1)):7.2f}  "
                     f"{us(min(r[7] for r in s1)):7.2f} {us(statistics.median(r[7] for r in s1)):7.2f} "
                     f"{us(max(r[7] for r in s1)):7.2f}  {us(max(r[8] for r in s1)):7.2f}")
        if mg:
            line += (f" | {us(min(r[5] for r in mg)):7.2f}..{us(max(r[5] for r in mg)):7.2f}  "
                     f"{us(max(r[6] for r in mg)):7.2f}  {us(max(r[8] for r in mg)):7.2f}")
        print(line)
    if stage1:
        print("  stage 1 phases, us (min median max over CTAs):")
        print(f"    start -> q staged        {spread([(r[6] - r[5]) / 1e3 for r in stage1])}")
        first = [(r[9] - r[5]) / 1e3 for r in stage1 if r[9] > 0]
        if first:
            print(f"    start -> first ring data {spread(first)}")
        print(f"    q staged -> loops done   {spread([(r[7] - r[6]) / 1e3 for r in stage1])}")
        print(f"    loops done -> end        {spread([(r[8] - r[7]) / 1e3 for r in stage1])}")
        warps = [r[10] for r in stage1 if len(r) > 10 and r[10] > 0]
        if warps:
            gap = [(w & ((1 << 56) - 1)) / 1e3 for w in warps]
            print(f"    INT2 warps of a CTA, last minus first loop end: {spread(gap)}")
            first = collections.Counter((w >> 56) & 15 for w in warps)
            last = collections.Counter((w >> 60) & 15 for w in warps)
            print("    INT2 warp that ended first: " +
                  ", ".join(f"warp {k} {v}" for k, v in sorted(first.items())) +
                  "; last: " + ", ".join(f"warp {k} {v}" for k, v in sorted(last.items())))
        # The CTAs of one call that shared an SM, ordered by when their loops finished.
        gaps = []
        lower_first = started_first = 0
        late_by_y = collections.defaultdict(list)
        for copy in {r[1] for r in stage1}:
            by_sm = collections.defaultdict(list)
            call = [r for r in stage1 if r[1] == copy]
            median_end = statistics.median(r[7] for r in call)
            for r in call:
                by_sm[r[4]].append(r)
                late_by_y[r[3]].append((r[7] - median_end) / 1e3)
            for ctas in by_sm.values():
                if len(ctas) == 2:
                    a, b = sorted(ctas, key=lambda r: r[7])
                    gaps.append((b[7] - a[7]) / 1e3)
                    # block index order (y, x); the records carry no blockIdx.z, which is 0
                    # at every bench shape (at most 8 query heads per KV head)
                    lower_first += (a[3], a[2]) < (b[3], b[2])
                    started_first += a[5] < b[5]
        if gaps:
            print(f"    loops done, later minus earlier CTA of an SM: {spread(gaps)} "
                  f"({len(gaps)} SM-calls with two CTAs)")
            print(f"    the CTA of an SM that ended first had the lower block index in "
                  f"{lower_first}, the earlier start in {started_first}")
            late = sorted(late_by_y.items())
            print("    loop end minus the call's median, median per blockIdx.y: " +
                  ", ".join(f"{y}: {statistics.median(v):+.2f}" for y, v in late))
        spans = sm_spans(stage1)
        if spans:
            print(f"    per-SM span (first q staged -> last loop end), mean over calls: "
                  f"{spread(spans['mean'])}, max / harmonic mean {spans['max_over_hm']:.3f}, "
                  f"correlation between calls {spans['corr']:+.2f}")
    if merge:
        print("  merge phases, us (min median max over blocks):")
        print(f"    start -> waited          {spread([(r[6] - r[5]) / 1e3 for r in merge])}")
        print(f"    waited -> loads done     {spread([(r[7] - r[6]) / 1e3 for r in merge])}")
        print(f"    loads done -> barrier    {spread([(r[9] - r[7]) / 1e3 for r in merge])}")
        print(f"    barrier -> end           {spread([(r[8] - r[9]) / 1e3 for r in merge])}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for path in sys.argv[1:]:
        summarise(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
