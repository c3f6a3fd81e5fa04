#!/usr/bin/env python3
"""Merges the per-run results.json files of bench/quality/results/ into one and redraws the plots
(ΔNLL and KL by codec and context, NIAH heat map) into bench/quality/.

    python3 bench/quality/combine_results.py   # from the repo root, after run_grid.sh
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")
merged = {"results": [], "niah": []}
for run in sorted(os.listdir(RES)):
    path = os.path.join(RES, run, "results.json")
    if run.startswith("lever_") or not os.path.exists(path):
        continue
    with open(path) as f:
        r = json.load(f)
    merged["results"] += r.get("results", [])
    merged["niah"] += r.get("niah", [])
out = os.path.join(HERE, "combined_results.json")
with open(out, "w") as f:
    json.dump(merged, f, indent=1)
script = os.path.join(HERE, "..", "..", "scripts", "plots", "quality_plots.py")
for py in ("python3", "/usr/bin/python3"):
    if subprocess.call([py, script, out, HERE]) == 0:
        sys.exit(0)
sys.exit("plots failed (python3-matplotlib missing?)")
