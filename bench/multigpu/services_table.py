#!/usr/bin/env python3
"""Markdown table of a services run (the JSON lines scripts/device/services_client.py writes):
per prompt and label (codec_mode), bytes the decode worker received, their ratio to the bf16 run
of the same prompt (the same mode when there is one), cold TTFT parts (prefill compute, then
either the block path's prefill transfer and decode fetch + import, or the GPU-direct path's
pack, read and fetch + admit), the repeat's reuse, decode speed, and the checks.

  python3 bench/multigpu/services_table.py bench/multigpu/results/services/services.jsonl
"""
import json
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    mode = lambda r: r["label"].split("_", 1)[1] if "_" in r["label"] else ""  # noqa: E731
    bf16 = {}
    for r in rows:
        if r["label"].startswith("bf16"):
            bf16.setdefault((r["chars"], r["repeat"]), r)  # any bf16 run of the prompt
            bf16[(r["chars"], r["repeat"], mode(r))] = r
    print("| prompt | run | prompt tokens | bytes to decode | per token | vs bf16 | cold: e2e "
          "(64 tokens) | prefill compute | prefill transfer (GPU-direct: pack) | decode fetch + "
          "import (GPU-direct: read / fetch + admit) | repeat: TTFT | reused tokens | same answer "
          "| = generate | decode tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["chars"], r["repeat"], r["label"])):
        base = bf16.get((r["chars"], r["repeat"], mode(r)), bf16.get((r["chars"], r["repeat"])))
        ratio = ""
        if base is not None and base is not r:
            ratio = "%.3f" % (r["received_bytes_per_prompt_token"] /
                              base["received_bytes_per_prompt_token"])
        check = {True: "yes", False: "**NO**"}
        direct = r.get("packed_kv_sequences", 0) > 0
        transfer = ("%.2f ms" % (r["prefill_pack_seconds"] * 1e3) if direct else
                    "%.0f ms" % (r["prefill_transfer_seconds"] * 1e3))
        fetch = ("%.2f / %.2f ms" % (r["packed_kv_transfer_seconds"] * 1e3,
                                     r["decode_fetch_seconds"] * 1e3) if direct else
                 "%.0f ms" % (r["decode_fetch_seconds"] * 1e3))
        print("| %d chars #%d | %s | %d | %.1f MB | %d B | %s | %.0f ms | %.0f ms | %s | "
              "%s | %.0f ms | %d | %s | %s | %.0f |" % (
                  r["chars"], r["repeat"] + 1, r["label"], r["prompt_tokens"],
                  r["decode_received_bytes"] / 1e6, r["received_bytes_per_prompt_token"], ratio,
                  r["e2e_seconds"] * 1e3, r["prefill_compute_seconds"] * 1e3, transfer, fetch,
                  (r["ttft_seconds_streamed"] or 0) * 1e3, r.get("reused_tokens_streamed", 0),
                  check[r["streamed_equals_non_streamed"]],
                  check.get(r.get("matches_generate"), "—"),
                  r.get("decode_tokens_per_second", 0)))


if __name__ == "__main__":
    main()
