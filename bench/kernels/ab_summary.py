#!/usr/bin/env python3
"""Median per shape and variant of an ab.sh log (scripts/device/ab.sh), against the first variant.

Input: ab.log lines `NAME rROUND decode ... D= d B= b S= s ... T us ...` (decode rows) or
`NAME rROUND demote ... T us ...` (demotion rows). Prints one row per shape: the first variant's
median in µs, then each other variant's median and its change against the first.

  python3 bench/kernels/ab_summary.py ab.log
"""
import collections
import re
import statistics
import sys

DECODE = re.compile(r"(\S+) r\d+ decode .*?D=\s*(\d+) B=\s*(\d+) S=\s*(\d+).*?\s([\d.]+) us")
DEMOTE = re.compile(r"(\S+) r\d+ (demote .*?)\s+([\d.]+) us")


def parse(lines):
    """Times per shape per variant, and the shapes and variants in order of appearance."""
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    shapes, names = [], []
    for line in lines:
        m = DECODE.match(line)
        if m:
            name, shape, t = m.group(1), f"D{m.group(2)} B={m.group(3)} S={m.group(4)}", m.group(5)
        else:
            m = DEMOTE.match(line)
            if not m:
                continue
            name, shape, t = m.group(1), " ".join(m.group(2).split()), m.group(3)
        if shape not in shapes:
            shapes.append(shape)
        if name not in names:
            names.append(name)
        times[shape][name].append(float(t))
    return times, shapes, names


def main(path):
    with open(path) as f:
        times, shapes, names = parse(f)
    if not names:
        print(f"{path}: no ab.sh rows")
        return 1
    width = max(24, max(len(s) for s in shapes) + 2)
    print(f"{'shape':{width}s}" + "".join(f"{n:>9s}{'':7s}" for n in names))
    for shape in shapes:
        row = times[shape]
        base = statistics.median(row[names[0]]) if row[names[0]] else None
        out = f"{shape:{width}s}"
        for i, name in enumerate(names):
            if not row[name]:
                out += f"{'-':>16s}"
                continue
            med = statistics.median(row[name])
            change = f" {100 * (med / base - 1):+5.1f}%" if base and i > 0 else " " * 7
            out += f"{med:9.2f}{change}"
        print(out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
