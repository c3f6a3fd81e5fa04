#!/usr/bin/env python3
"""Merges the per-run results.json files of bench/quality/results/ into one and redraws the plots
into bench/quality/: ΔNLL and KL by codec and context (delta_nll.png, token_kl.png), the levers
tried on OSCAR (levers_kl.png: codec variants such as oscar@0.90/0.84+g32), and the NIAH heat map.

For each (codec, context) the run with the most windows wins (ties: the later folder name), so
the plots show the 20-window grid where it exists and older, smaller runs only where it does not;
the same holds for NIAH cases (the run with the most haystacks per codec and context).

    python3 bench/quality/combine_results.py   # from the repo root
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")
best = {}
niah_runs = {}  # (codec, context) -> NIAH rows of the run with the most of them
for run in sorted(os.listdir(RES)):
    path = os.path.join(RES, run, "results.json")
    # lever_*: session-1 single-window lever runs; fidelity_*: 1-2 windows for the per-layer
    # fidelity tables (RESULTS.md), not grid cells.
    if run.startswith(("lever_", "fidelity_")) or not os.path.exists(path):
        continue
    with open(path) as f:
        r = json.load(f)
    for row in r.get("results", []):
        key = (row["codec"], row["context"])
        if key not in best or row["windows"] >= best[key]["windows"]:
            best[key] = dict(row, run=run)
    cells = {}
    for row in r.get("niah", []):
        cells.setdefault((row["codec"], row["context"]), []).append(row)
    for key, rows_ in cells.items():
        if key not in niah_runs or len(rows_) >= len(niah_runs[key]):
            niah_runs[key] = rows_
niah = [row for rows_ in niah_runs.values() for row in rows_]


def is_variant(codec):
    return "@" in codec or "+g" in codec


ORDER = ["bf16", "int2-naive", "int2-hadamard", "oscar-hadamard", "oscar-norot", "oscar-gram",
         "oscar", "kivi2", "oscar-tns"]
rows = sorted(best.values(), key=lambda r: (ORDER.index(r["codec"]) if r["codec"] in ORDER
                                            else len(ORDER), r["codec"], r["context"]))
niah.sort(key=lambda r: ORDER.index(r["codec"]) if r["codec"] in ORDER else len(ORDER))
grid = [r for r in rows if not is_variant(r["codec"])]
levers = [r for r in rows if is_variant(r["codec"]) or r["codec"] == "oscar"]
out = os.path.join(HERE, "combined_results.json")
with open(out, "w") as f:
    json.dump({"results": grid, "niah": niah}, f, indent=1)
lever_out = os.path.join(HERE, "combined_levers.json")
with open(lever_out, "w") as f:
    json.dump({"results": levers}, f, indent=1)
script = os.path.join(HERE, "..", "..", "scripts", "plots", "quality_plots.py")
for py in ("python3", "/usr/bin/python3"):
    if subprocess.call([py, script, out, HERE]) == 0:
        break
else:
    sys.exit("plots failed (python3-matplotlib missing?)")
if any(is_variant(r["codec"]) for r in levers):
    tmp = os.path.join(HERE, ".levers")
    os.makedirs(tmp, exist_ok=True)
    subprocess.check_call([py, script, lever_out, tmp])
    os.replace(os.path.join(tmp, "token_kl.png"), os.path.join(HERE, "levers_kl.png"))
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    os.rmdir(tmp)
