#!/usr/bin/env python3
"""Markdown table of a services run (the JSON lines scripts/device/services_client.py writes):
per prompt and label (codec_mode), bytes the decode worker received, their ratio to the bf16 run
of the same prompt, cold TTFT parts, the repeat's reuse, decode speed, and the checks.

  python3 bench/multigpu/services_table.py bench/multigpu/results/services/services.jsonl
"""
import json
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    bf16 = {(r["chars"], r["repeat"]): r for r in rows if r["label"].startswith("bf16")}
    print("| prompt | run | prompt tokens | bytes to decode | per token | vs bf16 | cold: e2e "
          "(64 tokens) | prefill compute | prefill transfer | decode fetch + import | repeat: "
          "TTFT | reused tokens | same answer | = generate | decode tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["chars"], r["repeat"], r["label"])):
        base = bf16.get((r["chars"], r["repeat"]))
        ratio = ""
        if base is not None and base is not r:
            ratio = "%.3f" % (r["received_bytes_per_prompt_token"] /
                              base["received_bytes_per_prompt_token"])
        check = {True: "yes", False: "**NO**"}
        print("| %d chars #%d | %s | %d | %.1f MB | %d B | %s | %.0f ms | %.0f ms | %.0f ms | "
              "%.0f ms | %.0f ms | %d | %s | %s | %.0f |" % (
                  r["chars"], r["repeat"] + 1, r["label"], r["prompt_tokens"],
                  r["decode_received_bytes"] / 1e6, r["received_bytes_per_prompt_token"], ratio,
                  r["e2e_seconds"] * 1e3, r["prefill_compute_seconds"] * 1e3,
                  r["prefill_transfer_seconds"] * 1e3, r["decode_fetch_seconds"] * 1e3,
                  (r["ttft_seconds_streamed"] or 0) * 1e3, r.get("reused_tokens_streamed", 0),
                  check[r["streamed_equals_non_streamed"]],
                  check.get(r.get("matches_generate"), "—"),
                  r.get("decode_tokens_per_second", 0)))


if __name__ == "__main__":
    main()
