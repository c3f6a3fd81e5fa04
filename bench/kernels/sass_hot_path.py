#!/usr/bin/env python3
"""Instructions along one path through a kernel's SASS: what a loop body issues per iteration.

A static count of the whole loop body overstates the hot path (cold fallbacks sit inside it) and
misses what the warp issues for both sides of a divergent branch. This walks the SASS from START
to END (both hex addresses, as cuobjdump prints them) in program order: an unconditional branch
is followed, a conditional one falls through unless its address is listed in --taken. It prints
the instruction count (BSSY/BSYNC included: they issue) and a histogram of opcodes; --show lists
the instructions of the named opcodes on the path.

    python3 bench/kernels/sass_hot_path.py FILE --kernel SUBSTRING START END [--taken A,B,..]
        [--show OP,OP,..]

FILE is a cubin (`nvcc -cubin -arch=sm_90a ...`) or a binary with embedded device code; the
SASS comes from `cuobjdump -sass` (`bash scripts/fetch_sass_tools.sh` fetches it where the
toolkit lacks it). Used for the demotion kernel's counts in bench/kernels/RESULTS.md
("Session 24"), e.g. for the K build at D = 128:
    nvcc -I. -std=c++20 -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -cubin \\
        -o /tmp/kvq.cubin kernels/quant/kv_quant.cu
    python3 bench/kernels/sass_hot_path.py /tmp/kvq.cubin --kernel ILi128ELb1ELi1ELi6E \\
        a00 9850 --taken 1490,2fe0,4230,5b90,76e0,8930
(the addresses are those of the build at hand: the loop head and its back edge, and the
branches that skip the cold paths; read them from the SASS first).
"""
import argparse
import collections
import re
import subprocess
import sys

INSTR = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);")


def kernel_sass(path, substring):
    names = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True,
                           check=True).stdout
    found = [n for n in re.findall(r"Function : (\S+)", names) if substring in n]
    if not found:
        sys.exit(f"no kernel matching {substring!r} in {path}")
    return subprocess.run(["cuobjdump", "-sass", "-fun", found[0], path], capture_output=True,
                          text=True, check=True).stdout


def walk(sass, start, end, taken):
    ins, order = {}, []
    for line in sass.splitlines():
        m = INSTR.search(line)
        if m:
            addr = int(m.group(1), 16)
            ins[addr] = (m.group(2), m.group(3), m.group(4))
            order.append(addr)
    index = {a: i for i, a in enumerate(order)}
    path, pc = [], start
    while True:
        if pc not in ins:
            sys.exit(f"no instruction at {pc:#x}")
        pred, op, rest = ins[pc]
        path.append((pc, pred, op, rest))
        if pc == end or len(path) > 100000:
            return path
        if op.split(".")[0] == "BRA" and (pred is None or pc in taken):
            pc = int(re.search(r"0x([0-9a-f]+)", rest).group(1), 16)
        else:
            pc = order[index[pc] + 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("start")
    ap.add_argument("end")
    ap.add_argument("--kernel", required=True, help="substring of the kernel's mangled name")
    ap.add_argument("--taken", default="", help="hex addresses of the branches taken")
    ap.add_argument("--show", default="", help="opcodes to list along the path")
    args = ap.parse_args()
    taken = {int(a, 16) for a in args.taken.split(",") if a}
    path = walk(kernel_sass(args.file, args.kernel), int(args.start, 16), int(args.end, 16),
                taken)
    ops = collections.Counter(op.split(".")[0] for _, _, op, _ in path)
    print(f"{len(path)} instructions from {args.start} to {args.end}")
    print(", ".join(f"{op} {n}" for op, n in ops.most_common()))
    show = set(args.show.split(",")) - {""}
    for addr, pred, op, rest in path:
        if op.split(".")[0] in show:
            print(f"{addr:#06x} {pred or ''}{op}{rest}")


if __name__ == "__main__":
    main()
