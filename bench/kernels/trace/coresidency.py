#!/usr/bin/env python3
"""What shared an SM with each CTA when it started, from a decode-attention trace.

Input: raw traces of scripts/device/trace_decode.sh (`T kind copy x y smid t0 t1 t2 t3 t4 t5`
lines; kind & 15 == 1: stage 1, kind 2: merge; t0 start, t3 end). For every CTA, counts the
other stage-1 CTAs and merge blocks resident on its SM at its start (any call), and per trace
prints the histogram of (stage-1 CTAs, merge blocks) seen by merge starts and by stage-1 starts,
and how many stage-1 CTAs (summed over the calls) started only after the previous call's merge
had ended.
A (2, m) key among the merge starts means a merge block ran beside two stage-1 CTAs.

  python3 bench/kernels/trace/coresidency.py TRACE.txt[.gz] [TRACE.txt[.gz] ...]
"""
import collections
import gzip
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [[int(x) for x in line.split()[1:]] for line in f if line.startswith("T ")]


def summarise(path):
    rows = read(path)
    by_sm = collections.defaultdict(list)
    for r in rows:
        by_sm[r[4]].append(r)
    at_merge, at_stage1 = collections.Counter(), collections.Counter()
    for r in rows:
        t = r[5]
        s1 = sum(1 for x in by_sm[r[4]] if x[0] & 15 == 1 and x[5] <= t <= x[8] and x is not r)
        m = sum(1 for x in by_sm[r[4]] if x[0] == 2 and x[5] <= t <= x[8] and x is not r)
        (at_merge if r[0] == 2 else at_stage1)[(s1, m)] += 1
    late = 0
    for c in sorted({r[1] for r in rows}):
        merges = [r[8] for r in rows if r[0] == 2 and r[1] == c - 1]
        if c == 0 or not merges:
            continue
        late += sum(1 for r in rows if r[0] & 15 == 1 and r[1] == c and r[5] > max(merges))
    print(f"{path}\n  merge starts (stage-1 CTAs, other merge blocks): {sorted(at_merge.items())}"
          f"\n  stage-1 starts (other stage-1 CTAs, merge blocks): {sorted(at_stage1.items())}"
          f"\n  stage-1 CTAs started after the previous call's merge ended (all calls): {late}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    for p in sys.argv[1:]:
        summarise(p)
