#!/usr/bin/env python3
"""Loads that wait for loads issued after them: a scoreboard check on a kernel's SASS.

A long-latency load sets one of six scoreboards (SB0-SB5) and a later instruction that needs its
result waits until that scoreboard's count is zero. Loads share scoreboards, so if ptxas places
the wait for an older load after a newer load on the same scoreboard, the wait covers the newer
one too: a prefetch then waits for itself. That cost the demotion kernel 18% of its stall
samples (bench/NOTES.md "Demotion v6"). This script reads the SASS with its control bits and
lists every wait whose register came from an older load while a newer load on the same
scoreboard was issued shortly before it (straight-line order; loops are not followed).

    python3 bench/kernels/sass_scoreboards.py FILE [--kernel SUBSTRING] [--window N] [--batch N]

FILE is a cubin or a binary with embedded device code (`cuobjdump -sass` must read it; where the
CUDA toolkit lacks cuobjdump and nvdisasm, `bash scripts/fetch_sass_tools.sh` fetches them from
PyPI). Exit status 1 when something is listed.
"""
import argparse
import re
import subprocess
import sys

INSTR = re.compile(r"\s+/\*([0-9a-f]{4,6})\*/\s+(.*?);\s+/\* (0x[0-9a-f]{16}) \*/")
ENCODING = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")
REG = re.compile(r"\bR(\d+)\b")
WIDTH = {".64": 2, ".128": 4}
NO_DEST = re.compile(r"(ST|RED|ATOM|BRA|EXIT)")  # opcodes whose first operand is not written


def parse(sass):
    """Yields (function name, [(address, text, write_sb, wait_mask)])."""
    for chunk in re.split(r"\n\s+Function : ", sass)[1:]:
        lines = chunk.split("\n")
        code = []
        for i, line in enumerate(lines):
            m = INSTR.match(line)
            if not m or i + 1 >= len(lines):
                continue
            hi = ENCODING.search(lines[i + 1])
            if not hi:
                continue
            ctrl = int(hi.group(1), 16) >> 41  # the 23 control bits of the upper word
            code.append((int(m.group(1), 16), m.group(2).strip(), (ctrl >> 5) & 7,
                         (ctrl >> 11) & 0x3F))
        yield lines[0].strip(), code


def split(text):
    """(opcode, operands) of an instruction, its predicate dropped."""
    parts = re.sub(r"^@!?U?P\w+\s+", "", text).split(None, 1)
    return parts[0], (parts[1].split(",") if len(parts) > 1 else [])


def first_dest(op, operands, width):
    """The registers of a leading destination operand of `width` registers, if there is one."""
    regs = REG.findall(operands[0]) if operands and not NO_DEST.match(op) else []
    return {int(regs[0]) + k for k in range(width)} if regs else set()


def load_dests(text):
    """Registers written by a load instruction (LDG/LDS/LDC/LDL), else an empty set."""
    op, operands = split(text)
    if not re.match(r"LD[GSCL](\.|$)", op):
        return set()
    return first_dest(op, operands, next((w for sfx, w in WIDTH.items() if sfx in op), 1))


def dests(text):
    """Registers an instruction writes (its first operand, two for wide results)."""
    op, operands = split(text)
    wide = ".WIDE" in op or ".64" in op or op.startswith("CS2R")
    return first_dest(op, operands, 2 if wide else 1)


def sources(text):
    """Registers an instruction reads (all but a leading destination)."""
    op, operands = split(text)
    reads = operands if NO_DEST.match(op) else operands[1:]
    return {int(r) for operand in reads for r in REG.findall(operand)}


def check(code, window, batch):
    findings = []
    producer = {}  # register -> (index of the load, scoreboard)
    last_set = {}  # scoreboard -> index of the last instruction that set it
    for i, (_, text, wsb, wait) in enumerate(code):
        for sb in range(6):
            if not (wait >> sb) & 1 or sb not in last_set:
                continue
            newest = last_set[sb]
            needed = [producer[r][0] for r in sources(text) if r in producer and
                      producer[r][1] == sb]
            # A batch of loads issued together also shares a wait, and a constant or shared
            # memory load is short: only a global load issued long after the needed one (not its
            # batch) and shortly before the wait counts.
            if needed and newest - max(needed) >= batch and i - newest <= window and \
                    "LDG" in code[newest][1] and load_dests(code[newest][1]):
                findings.append((i, sb, max(needed), newest))
        for r in dests(text):
            producer.pop(r, None)  # overwritten (a load sets it again just below)
        for r in load_dests(text):
            producer[r] = (i, wsb)
        if wsb != 7:
            last_set[wsb] = i
    return findings


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", help="cubin or binary with device code")
    ap.add_argument("--kernel", default="", help="only functions whose name contains this")
    ap.add_argument("--window", type=int, default=24,
                    help="report when the newer load is at most this many instructions before "
                         "the wait (default 24)")
    ap.add_argument("--batch", type=int, default=64,
                    help="loads fewer than this many instructions apart count as one batch "
                         "(default 64)")
    args = ap.parse_args()
    try:
        sass = subprocess.run(["cuobjdump", "-sass", args.file], check=True, text=True,
                              capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"cuobjdump -sass {args.file} failed: {e}")
    found = 0
    for name, code in parse(sass):
        if args.kernel not in name:
            continue
        for i, sb, need, newest in check(code, args.window, args.batch):
            found += 1
            print(f"{name[:100]}\n  {code[i][0]:05x} {code[i][1][:70]}\n"
                  f"    waits on SB{sb} for the load at {code[need][0]:05x} "
                  f"({code[need][1][:50]}),\n    which also covers the newer load at "
                  f"{code[newest][0]:05x} ({code[newest][1][:50]}), {i - newest} instructions "
                  f"before the wait")
    print(f"{found} wait(s) that also wait for a newer load")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
