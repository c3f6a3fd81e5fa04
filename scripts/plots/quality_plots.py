#!/usr/bin/env python3
"""Plots of `oscarkv eval` results: ΔNLL and token KL by codec and context (with 95% CIs), and the
NIAH passkey-probability heat map (depth x length) per codec.

    python3 scripts/plots/quality_plots.py OUT/results.json OUT

Exits 3 (after a warning) when matplotlib is missing; the eval tool then skips the plots.
"""
import json
import sys
from collections import defaultdict

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("WARNING: matplotlib missing (apt-get install python3-matplotlib); plots skipped",
          file=sys.stderr)
    sys.exit(3)


def bar_metric(results, key, title, path, log=False):
    contexts = sorted({r["context"] for r in results})
    codecs = []
    for r in results:
        if r["codec"] not in codecs:
            codecs.append(r["codec"])
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(codecs) * len(contexts) / 2 + 3), 4.2))
    width = 0.8 / max(1, len(contexts))
    for ci, ctx in enumerate(contexts):
        xs, ys, lo, hi = [], [], [], []
        for i, c in enumerate(codecs):
            row = [r for r in results if r["codec"] == c and r["context"] == ctx]
            if not row:
                continue
            e = row[0]["all_positions"][key]
            xs.append(i + (ci - (len(contexts) - 1) / 2) * width)
            m = e["mean"]
            ys.append(max(m, 1e-6) if log else m)
            lo.append(max(0.0, m - e["ci95"][0]))
            hi.append(max(0.0, e["ci95"][1] - m))
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=f"{ctx} tokens")
    labels = []
    for c in codecs:
        pid = next(r["paper_id"] for r in results if r["codec"] == c)
        labels.append(f"{c}\n{pid}")
    ax.set_xticks(range(len(codecs)))
    ax.set_xticklabels(labels, fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def niah_heatmaps(niah, path):
    codecs = []
    for r in niah:
        if r["codec"] not in codecs:
            codecs.append(r["codec"])
    contexts = sorted({r["context"] for r in niah})
    depths = sorted({r["depth_percent"] for r in niah})
    fig, axes = plt.subplots(1, len(codecs), figsize=(2.2 * len(codecs) + 1, 3.2), squeeze=False)
    for ax, c in zip(axes[0], codecs):
        grid = defaultdict(list)
        for r in niah:
            if r["codec"] == c:
                grid[(r["depth_percent"], r["context"])].append(r["passkey_prob"])
        z = [[sum(grid[(d, L)]) / len(grid[(d, L)]) if grid[(d, L)] else float("nan")
              for L in contexts] for d in depths]
        im = ax.imshow(z, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(contexts)))
        ax.set_xticklabels([str(L) for L in contexts], fontsize=7)
        ax.set_yticks(range(len(depths)))
        ax.set_yticklabels([f"{d}%" for d in depths], fontsize=7)
        ax.set_title(c, fontsize=9)
        ax.set_xlabel("context", fontsize=8)
    axes[0][0].set_ylabel("needle depth", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="passkey probability")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        r = json.load(f)
    out = sys.argv[2]
    res = r.get("results", [])
    if res:
        bar_metric(res, "delta_nll", "ΔNLL per token vs M0 (nats), decode-equivalent",
                   f"{out}/delta_nll.png")
        bar_metric(res, "token_kl", "Mean next-token KL(p_M0 || p_codec) (nats, log scale)",
                   f"{out}/token_kl.png", log=True)
    if r.get("niah"):
        niah_heatmaps(r["niah"], f"{out}/niah_heatmap.png")
    print(f"plots written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
