#!/usr/bin/env python3
"""How far a model's INT2 V scales stay from the decode kernel's fp16 bound.

Lazy rescaling in kernels/attention/decode_attention.cu packs p * scale to fp16 with p up to
2^kRescaleSlack = 256, so a per-token V scale (range / 3) must stay below 65504 / 256 = 255.
Reads the V dumps of `oscarkv calibrate --dump-dir DIR` (layer_L_v.npy, [T, Hkv, D] f32) and
prints, over the tokens past the 64-token BF16 sink: the largest per-token range (unrotated,
unclipped: the clip only narrows it) and the rotation-free bound 2 * max |v|_2 (no orthogonal
rotation can widen a row's range beyond it), each as a scale.

    ./build/tools/oscarkv calibrate --text data/text/austen/prideprejudice.txt --tokens 2048 \\
        --out /tmp/vcal.cal --dump-dir /tmp/vdump --dump-tokens 2048
    python3 bench/kernels/v_scale_bound.py /tmp/vdump
"""
import glob
import os
import re
import sys

import numpy as np

SINK = 64
LIMIT = 65504.0 / 256.0


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    files = glob.glob(os.path.join(argv[1], "layer_*_v.npy"))
    if not files:
        print(f"no layer_*_v.npy in {argv[1]}")
        return 1
    worst_range, worst_bound = (0.0, ""), (0.0, "")
    for f in sorted(files, key=lambda p: int(re.search(r"layer_(\d+)_v", p).group(1))):
        v = np.load(f).astype(np.float64)[SINK:]
        name = os.path.basename(f)
        worst_range = max(worst_range, (float((v.max(-1) - v.min(-1)).max()), name))
        worst_bound = max(worst_bound, (float(2 * np.linalg.norm(v, axis=-1).max()), name))
    print(f"{len(files)} layers, {v.shape[0]} tokens past the sink each")
    print(f"largest per-token V range (unrotated): {worst_range[0]:.2f} ({worst_range[1]}): "
          f"scale {worst_range[0] / 3:.2f}")
    print(f"2 * largest |v|_2 (any rotation):      {worst_bound[0]:.2f} ({worst_bound[1]}): "
          f"scale {worst_bound[0] / 3:.2f}")
    print(f"fp16 bound on the scale: {LIMIT:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
