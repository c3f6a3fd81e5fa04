#!/usr/bin/env python3
"""Measures a running oscarkv deployment through its router (any topology; written for the GPU
workers run of scripts/device/model.sh --services): per prompt length, greedy /v1/completions
over real text, first non-streamed (a cold prompt: the whole request), then the same prompt
streamed (time to first token; a prefill worker that shares the kvstore reuses the first
request's stored prefix here, and the answer must not change), with the prefill worker's phase
times, reused tokens and the bytes the decode worker received taken from their /metrics around
each request. With --generate, also checks the first answer token for token against `oscarkv
generate` (same prompt, codec and device: prints prompt + text). With --score, also scores the
first prompt (echo with logprobs, 2 greedy tokens) and expects the prompt and the two tokens
back with every token but the first scored, and the prefill's scored-token counter to move by
the prompt's tokens but one (every prefill worker scores; a one-pass GPU one through its chunked
prefill). With --temperature T > 0 the completions are sampled (seed 1, so the streamed
repeat must still give the same answer; --generate is then skipped: generate draws the first
token from the same random stream as the rest, the workers from two).

Writes one JSON line per request to --out and a summary to stdout. Standard library only.
"""
import argparse
import json
import math
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request


def post(url, body, stream=False, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def scrape(url):
    """Sum of every sample per metric name (labels summed), from the Prometheus text format."""
    out = {}
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
            if not m:
                continue
            name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
            out[name] = out.get(name, 0.0) + value
            if labels:
                out[name + labels] = value
    return out


def delta(after, before, key):
    return after.get(key, 0.0) - before.get(key, 0.0)


def score(args, model, prompt, prompt_tokens, out):
    """Echo with logprobs on `prompt`; returns 0 when every token but the first came back scored."""
    # Two tokens after it, so that the scored prefill's KV also reaches the decode worker.
    body = {"model": model, "prompt": prompt, "max_tokens": 2, "echo": True, "logprobs": 1,
            "temperature": 0}
    p0 = scrape(args.prefill_metrics)
    t0 = time.time()
    try:
        with post(args.url + "/completions", body) as r:
            code, resp = r.status, json.load(r)
    except urllib.error.HTTPError as e:
        code, resp = e.code, json.load(e)
    seconds = time.time() - t0
    p1 = scrape(args.prefill_metrics)
    rec = {"label": args.label, "score": True, "http_status": code, "seconds": seconds}
    lp = resp["choices"][0]["logprobs"] if code == 200 else None
    scores = lp["token_logprobs"] if lp else []
    ok = (code == 200 and resp["choices"][0]["text"].startswith(prompt) and
          resp["usage"]["completion_tokens"] == 2 and
          len(scores) == prompt_tokens + 2 and scores[0] is None and
          all(s is not None and -100 < s <= 0 for s in scores[1:]) and
          delta(p1, p0, "oscarkv_prefill_tokens_scored_total") == prompt_tokens - 1)
    if len(scores) > 1:
        prompt_scores = scores[1:prompt_tokens]
        rec["perplexity"] = math.exp(-sum(s or 0 for s in prompt_scores) / len(prompt_scores))
    rec["scored_tokens"] = delta(p1, p0, "oscarkv_prefill_tokens_scored_total")
    if code != 200:
        rec["message"] = resp.get("error", {}).get("message", "")
    rec["as_expected"] = ok
    out.write(json.dumps(rec) + "\n")
    print("%s score: HTTP %d in %.3f s, %s%s" % (
        args.label, code, seconds,
        "perplexity %.2f over %d tokens" % (rec["perplexity"], prompt_tokens)
        if "perplexity" in rec else rec.get("message", ""),
        "" if ok else "  NOT AS EXPECTED"), flush=True)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--prefill-metrics", default="http://127.0.0.1:9481/metrics")
    ap.add_argument("--decode-metrics", default="http://127.0.0.1:9471/metrics")
    ap.add_argument("--text", required=True, help="a text file the prompts are cut from")
    ap.add_argument("--chars", default="4000,16000,30000",
                    help="prompt lengths in characters (about 4 per token)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--generate", default="",
                    help="command prefix of `oscarkv generate ...` to check answers against")
    ap.add_argument("--score", action="store_true",
                    help="also score the first prompt (echo + logprobs, 2 tokens)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of the completions (0 = greedy)")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    text = open(args.text, encoding="utf-8", errors="replace").read()
    model = json.load(urllib.request.urlopen(args.url + "/models"))["data"][0]["id"]
    status = 0
    with open(args.out, "a") as out:
        for chars in [int(c) for c in args.chars.split(",")]:
            for rep in range(args.repeats):
                # Distinct prompts per repeat (no kvstore reuse between them).
                start = 20000 + rep * 40000 + chars
                prompt = text[start:start + chars]
                body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens,
                        "temperature": args.temperature}
                if args.temperature > 0:
                    body["seed"] = 1
                p0, d0 = scrape(args.prefill_metrics), scrape(args.decode_metrics)
                t0 = time.time()
                with post(args.url + "/completions", body) as r:
                    resp = json.load(r)
                e2e = time.time() - t0
                p1, d1 = scrape(args.prefill_metrics), scrape(args.decode_metrics)
                # Streamed, same prompt: time to the first chunk that carries text.
                t0 = time.time()
                ttft = None
                streamed = ""
                with post(args.url + "/completions", dict(body, stream=True)) as r:
                    for raw in r:
                        line = raw.decode().strip()
                        if not line.startswith("data:") or line == "data: [DONE]":
                            continue
                        piece = json.loads(line[5:])["choices"][0].get("text", "")
                        if piece and ttft is None:
                            ttft = time.time() - t0
                        streamed += piece
                p2 = scrape(args.prefill_metrics)
                usage = resp["usage"]
                completion = resp["choices"][0]["text"]
                phase = lambda name: delta(  # noqa: E731
                    p1, p0, 'oscarkv_prefill_phase_seconds_sum{phase="%s"}' % name)
                rec = {
                    "label": args.label, "chars": chars, "repeat": rep,
                    "temperature": args.temperature,
                    "prompt_tokens": usage["prompt_tokens"],
                    "completion_tokens": usage["completion_tokens"],
                    "e2e_seconds": e2e, "ttft_seconds_streamed": ttft,
                    "prefill_compute_seconds": phase("compute"),
                    "prefill_transfer_seconds": phase("transfer"),
                    "prefill_total_seconds": phase("total"),
                    "decode_received_bytes": delta(d1, d0, "oscarkv_decode_received_bytes_total"),
                    "decode_fetch_seconds": delta(d1, d0, "oscarkv_decode_fetch_seconds_sum"),
                    "prefill_pack_seconds": phase("pack"),
                    "packed_kv_sequences": delta(d1, d0, "oscarkv_decode_packed_kv_received_total"),
                    "packed_kv_transfer_seconds": delta(
                        d1, d0, "oscarkv_decode_packed_kv_transfer_seconds_sum"),
                    "decode_step_seconds": delta(d1, d0, "oscarkv_decode_step_seconds_sum"),
                    "decode_steps": delta(d1, d0, "oscarkv_decode_steps_total"),
                    "streamed_equals_non_streamed": streamed == completion,
                    "reused_tokens_cold": delta(p1, p0, "oscarkv_prefill_tokens_reused_total"),
                    "reused_tokens_streamed": delta(p2, p1, "oscarkv_prefill_tokens_reused_total"),
                    "prefill_compute_seconds_streamed": delta(
                        p2, p1, 'oscarkv_prefill_phase_seconds_sum{phase="compute"}'),
                }
                rec["received_bytes_per_prompt_token"] = (
                    rec["decode_received_bytes"] / max(1, rec["prompt_tokens"]))
                if rec["decode_steps"] > 0:
                    rec["decode_tokens_per_second"] = (
                        rec["decode_steps"] / max(1e-9, rec["decode_step_seconds"]))
                if args.generate and rep == 0 and args.temperature == 0:
                    g = subprocess.run(args.generate.split() + [
                        "--prompt", prompt, "--max-tokens", str(args.max_tokens)],
                        capture_output=True, text=True)
                    rec["matches_generate"] = g.returncode == 0 and g.stdout == prompt + completion + "\n"
                    if not rec["matches_generate"]:
                        status = 1
                        sys.stderr.write("generate differs:\n  service: %r\n  generate: %r\n%s\n" % (
                            completion[:200], g.stdout[len(prompt):len(prompt) + 200],
                            g.stderr[-500:]))
                if not rec["streamed_equals_non_streamed"]:
                    status = 1
                if args.score and rep == 0 and chars == int(args.chars.split(",")[0]):
                    status |= score(args, model, prompt, usage["prompt_tokens"], out)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                if rec["packed_kv_sequences"]:
                    print("%s %6d prompt tokens: packed KV GPU to GPU: pack %.4f s, read %.4f s "
                          "(%.1f GB/s), %d bytes, decode fetch+admit %.4f s" % (
                              args.label, rec["prompt_tokens"], rec["prefill_pack_seconds"],
                              rec["packed_kv_transfer_seconds"],
                              rec["decode_received_bytes"] / max(1e-9, rec["packed_kv_transfer_seconds"]) / 1e9,
                              rec["decode_received_bytes"], rec["decode_fetch_seconds"]), flush=True)
                print("%s %6d prompt tokens: e2e %.3f s (prefill compute %.3f, transfer %.3f); "
                      "again streamed: TTFT %.3f s, %d tokens reused, compute %.3f s, same "
                      "answer: %s; decode %.1f tok/s, %.0f bytes received (%.0f per prompt "
                      "token)%s" % (
                          args.label, rec["prompt_tokens"], e2e,
                          rec["prefill_compute_seconds"], rec["prefill_transfer_seconds"],
                          ttft or -1, rec["reused_tokens_streamed"],
                          rec["prefill_compute_seconds_streamed"],
                          rec["streamed_equals_non_streamed"],
                          rec.get("decode_tokens_per_second", 0), rec["decode_received_bytes"],
                          rec["received_bytes_per_prompt_token"],
                          "" if "matches_generate" not in rec else
                          ", matches generate: %s" % rec["matches_generate"]), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
