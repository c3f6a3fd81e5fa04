#!/usr/bin/env python3
"""Loads a running oscarkv deployment with concurrent completions (written for the GPU workers run
of scripts/device/model.sh --services, SVC_BATCH): N requests at once, each a different prompt cut
from --text, M tokens each (ignore_eos, so every request runs M decode steps), at --temperature
(seeded per request). Prints the whole batch's tokens/s and, from the decode worker's /metrics
around it, its step time (the model), sampling time (the host) and steps, and writes one JSON line
to --out. Standard library only.
"""
import argparse
import json
import threading
import time
import urllib.request

from services_client import delta, post, scrape


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--decode-metrics", default="http://127.0.0.1:9471/metrics")
    ap.add_argument("--text", required=True, help="a text file the prompts are cut from")
    ap.add_argument("--requests", type=int, default=32, help="requests sent at once")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--chars", type=int, default=2000, help="prompt length in characters")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    text = open(args.text, encoding="utf-8", errors="replace").read()
    model = json.load(urllib.request.urlopen(args.url + "/models"))["data"][0]["id"]
    results, errors = {}, []

    def one(i):
        start = 50000 + i * (args.chars + 997)
        body = {"model": model, "prompt": text[start:start + args.chars],
                "max_tokens": args.max_tokens, "temperature": args.temperature,
                "seed": i, "ignore_eos": True}
        try:
            with post(args.url + "/completions", body) as r:
                results[i] = json.load(r)["usage"]["completion_tokens"]
        except Exception as e:  # reported below; the run counts as failed
            errors.append("%d: %s" % (i, e))

    d0 = scrape(args.decode_metrics)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.requests)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - t0
    d1 = scrape(args.decode_metrics)
    steps = delta(d1, d0, "oscarkv_decode_steps_total")
    rec = {"label": args.label, "requests": args.requests, "max_tokens": args.max_tokens,
           "temperature": args.temperature, "seconds": seconds,
           "completion_tokens": sum(results.values()), "errors": errors,
           "decode_steps": steps,
           "decode_step_seconds": delta(d1, d0, "oscarkv_decode_step_seconds_sum"),
           "decode_sample_seconds": delta(d1, d0, "oscarkv_decode_sample_seconds_sum")}
    rec["tokens_per_second"] = rec["completion_tokens"] / seconds
    with open(args.out, "a") as out:
        out.write(json.dumps(rec) + "\n")
    print("%s batch: %d requests x %d tokens at T %g: %.2f s, %.1f tok/s; decode %d steps, "
          "model %.3f s, host sampling %.3f s%s" % (
              args.label, args.requests, args.max_tokens, args.temperature, seconds,
              rec["tokens_per_second"], steps, rec["decode_step_seconds"],
              rec["decode_sample_seconds"], "; errors: %s" % errors[:3] if errors else ""),
          flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
