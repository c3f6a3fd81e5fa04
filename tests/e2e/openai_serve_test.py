#!/usr/bin/env python3
"""The official OpenAI Python client against `oscarkv serve` (all-in-one: router, prefill,
decode and kvstore in one process, real default model on CPU): /v1/models, completions and chat
completions, non-streaming and streaming (greedy, so the streamed text must equal the
non-streamed text), then every ```bash example in docs/SERVING.md that uses $OSCARKV_URL and
every ```python example there (run with OSCARKV_URL set to this server).

Exit code 0 = pass; 77 = skipped (no model or no openai package).
"""
import argparse
import math
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oscarkv", required=True)
    ap.add_argument("--docs", default=os.path.join(REPO, "docs", "SERVING.md"))
    args = ap.parse_args()
    try:
        import openai  # noqa: F401
    except ImportError:
        print("SKIP: the openai package is not installed (scripts/setup.sh installs it)")
        return 77
    codec = "oscar" if os.path.exists(
        os.path.join(REPO, "data/calibration/smollm2-135m-oscar.cal")) else "oscar-hadamard"
    proc = subprocess.Popen([args.oscarkv, "serve", "--host", "127.0.0.1", "--port", "0",
                             "--codec", codec],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    log = []
    url = None
    for line in proc.stdout:
        log.append(line)
        m = re.search(r"ready at (http://127\.0\.0\.1:\d+/v1)", line)
        if m:
            url = m.group(1)
            break
    if url is None:
        text = "".join(log)
        if "not found" in text.lower() and "model" in text.lower():
            print("SKIP: default model not installed\n" + text)
            return 77
        print("FAIL: server did not start\n" + text)
        return 1
    # Keep draining the server's output so it never blocks on a full pipe.
    import threading
    threading.Thread(target=lambda: [log.append(l) for l in proc.stdout], daemon=True).start()
    try:
        run_client_checks(url)
        run_doc_examples(args.docs, url)
    except Exception:
        print("".join(log[-60:]))
        raise
    finally:
        proc.terminate()
        rc = proc.wait(timeout=60)
    assert rc == 0, f"oscarkv serve exited {rc} after SIGTERM"
    print("PASS")
    return 0


def run_client_checks(url):
    from openai import OpenAI
    client = OpenAI(base_url=url, api_key="unused")
    models = client.models.list()
    model = models.data[0].id
    print("model:", model)

    t0 = time.time()
    c = client.completions.create(model=model, prompt="The capital of France is",
                                  max_tokens=8, temperature=0)
    dt = time.time() - t0
    text = c.choices[0].text
    assert text.strip(), "empty completion"
    assert c.usage.completion_tokens >= 1
    print(f"[measure] all-in-one completion: {c.usage.prompt_tokens} prompt tokens, "
          f"{c.usage.completion_tokens} generated, {dt:.3f} s: {text!r}")

    streamed = ""
    chunks = 0
    for chunk in client.completions.create(model=model, prompt="The capital of France is",
                                           max_tokens=8, temperature=0, stream=True):
        streamed += chunk.choices[0].text
        chunks += 1
    assert chunks >= 2, f"expected several stream chunks, got {chunks}"
    assert streamed == text, f"streamed {streamed!r} != non-streamed {text!r}"

    # A stop string cuts the text right before its first match (and ends with "stop").
    if "\n" in text:
        cut = client.completions.create(model=model, prompt="The capital of France is",
                                        max_tokens=8, temperature=0, stop=["\n"])
        assert cut.choices[0].text == text[:text.index("\n")], (cut.choices[0].text, text)
        assert cut.choices[0].finish_reason == "stop", cut.choices[0].finish_reason
        streamed = "".join(ch.choices[0].text for ch in client.completions.create(
            model=model, prompt="The capital of France is", max_tokens=8, temperature=0,
            stop=["\n"], stream=True))
        assert streamed == cut.choices[0].text, (streamed, cut.choices[0].text)
        # A stop string that never matches changes nothing (held-back text still arrives).
        same = client.completions.create(model=model, prompt="The capital of France is",
                                         max_tokens=8, temperature=0, stop=[text[-2:] + "#"])
        assert same.choices[0].text == text, (same.choices[0].text, text)

    # OpenAI's penalties reach the decode worker: greedy on a repetitive prompt repeats itself,
    # and with frequency_penalty (over the generated tokens) it moves on.
    loop = "I like apples. I like apples. I like apples. I like apples. I like"
    plain = client.completions.create(model=model, prompt=loop, max_tokens=24,
                                      temperature=0).choices[0].text
    penalized = client.completions.create(model=model, prompt=loop, max_tokens=24, temperature=0,
                                          frequency_penalty=1.0).choices[0].text
    assert plain.count("apples") > penalized.count("apples") + 1, (plain, penalized)
    print("penalties:", repr(plain), "->", repr(penalized))

    # Logprobs: a greedy token is its own most likely alternative; the first comes from the
    # prefill worker and the rest from the decode worker, and each agrees with the prefill's
    # own logprob when the prompt is extended by the tokens before it (a short prompt: all KV
    # in the BF16 windows, so the two paths differ only in rounding).
    prompt = "The capital of France is"
    base = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    lp_out = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                       logprobs=3)
    lp = lp_out.choices[0].logprobs
    assert "".join(lp.tokens).startswith(lp_out.choices[0].text), (lp.tokens, lp_out.choices[0].text)
    checked = 0
    for k, (tok, logprob, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        assert len(top) == 3 and max(top.values()) == logprob and top[tok] == logprob, (tok, top)
        assert list(top.values()) == sorted(top.values(), reverse=True), top
        assert -30 < logprob <= 0, logprob
        extended = client.completions.create(model=model, prompt=prompt + "".join(lp.tokens[:k]),
                                             max_tokens=1, temperature=0, logprobs=0)
        if extended.usage.prompt_tokens != base.usage.prompt_tokens + k:
            continue  # the text retokenized differently; not the same context
        first = extended.choices[0].logprobs
        assert first.tokens[0] == tok, (k, first.tokens, tok)
        assert abs(first.token_logprobs[0] - logprob) < 0.05, (k, first.token_logprobs, logprob)
        checked += 1
    assert checked >= 3, f"only {checked} positions retokenized alike: {lp.tokens}"
    streamed = [t for ch in client.completions.create(
        model=model, prompt=prompt, max_tokens=6, temperature=0, logprobs=3,
        stream=True) if ch.choices[0].logprobs for t in ch.choices[0].logprobs.token_logprobs]
    assert streamed == lp.token_logprobs, (streamed, lp.token_logprobs)
    print(f"logprobs: {list(zip(lp.tokens, [round(x, 3) for x in lp.token_logprobs]))}, "
          f"{checked} checked against the prefill")

    # echo with logprobs (what lm-eval-harness sends for loglikelihood: token-id prompts,
    # max_tokens 0 or 1): the prompt comes back with every token scored but the first, by the
    # prefill; the tokens the decode worker generated score the same when sent back as prompt.
    as_ids = {"return_tokens_as_token_ids": True}
    ids_out = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                        logprobs=0, extra_body=as_ids).choices[0].logprobs
    prompt_ids = [int(t.split(":")[1]) for t in client.completions.create(
        model=model, prompt=prompt, max_tokens=0, echo=True, logprobs=0,
        extra_body=as_ids).choices[0].logprobs.tokens]
    assert len(prompt_ids) == base.usage.prompt_tokens, (prompt_ids, base.usage)
    gen_ids = [int(t.split(":")[1]) for t in ids_out.tokens]
    scored = client.completions.create(model=model, prompt=prompt_ids + gen_ids, max_tokens=1,
                                       echo=True, logprobs=1, temperature=0)
    slp = scored.choices[0].logprobs
    n_ctx = len(prompt_ids)
    assert scored.usage.prompt_tokens == n_ctx + 6 and scored.usage.completion_tokens == 1
    assert len(slp.tokens) == n_ctx + 7 and slp.token_logprobs[0] is None, slp
    assert slp.top_logprobs[0] is None
    assert scored.choices[0].text.startswith(prompt + lp_out.choices[0].text), scored.choices[0]
    echo_diffs = [abs(a - b) for a, b in zip(slp.token_logprobs[n_ctx:n_ctx + 6],
                                             ids_out.token_logprobs)]
    assert max(echo_diffs) < 0.05, (slp.token_logprobs[n_ctx:], ids_out.token_logprobs)
    # Echo without logprobs: the prompt's text before the completion's (max_tokens 0: no worker).
    plain_echo = client.completions.create(model=model, prompt=prompt, max_tokens=6, echo=True,
                                           temperature=0)
    assert plain_echo.choices[0].text == prompt + lp_out.choices[0].text, plain_echo.choices[0]
    assert plain_echo.usage.completion_tokens == 6, plain_echo.usage
    bare = client.completions.create(model=model, prompt=prompt, max_tokens=0, echo=True)
    assert bare.choices[0].text == prompt and bare.usage.completion_tokens == 0, bare
    offsets = [len("".join(slp.tokens[:i])) for i in range(len(slp.tokens))]
    assert slp.text_offset == offsets, (slp.text_offset, offsets)
    # A prompt over several prefill chunks (256 tokens): later chunks attend to earlier ones in
    # the codec's stored form. Every position is computed (no stored prefix), so a repeat gives
    # the same numbers, and the stream gives them too.
    with open(os.path.join(REPO, "data/text/austen/emma.txt"), encoding="utf-8") as f:
        long_prompt = f.read()[30000:33000]
    def echo_long(**extra):
        return client.completions.create(model=model, prompt=long_prompt, max_tokens=0, echo=True,
                                         logprobs=2, **extra)
    long1, long2 = echo_long(), echo_long()
    l1 = long1.choices[0].logprobs
    assert long1.choices[0].text == long_prompt and long1.usage.completion_tokens == 0
    assert len(l1.tokens) == long1.usage.prompt_tokens > 600, long1.usage
    assert l1.token_logprobs == long2.choices[0].logprobs.token_logprobs
    # The 2 most likely, and the prompt's own token when it is not one of them.
    assert all(len(t) in (2, 3) and max(t.values()) >= v and v in t.values() for t, v in
               zip(l1.top_logprobs[1:], l1.token_logprobs[1:])), "alternatives out of order"
    streamed = [v for ch in echo_long(stream=True) if ch.choices[0].logprobs
                for v in ch.choices[0].logprobs.token_logprobs]
    assert streamed == l1.token_logprobs
    ppl = math.exp(-sum(l1.token_logprobs[1:]) / (len(l1.tokens) - 1))
    assert 3 < ppl < 60, ppl
    # vLLM's prompt_logprobs: the same scores as echo's, with ranks, on chat too (the template's
    # tokens), and no prompt in the text.
    vl = client.completions.create(model=model, prompt=long_prompt, max_tokens=1, temperature=0,
                                   extra_body={"prompt_logprobs": 2}).model_dump()["choices"][0]
    entries = vl["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(l1.tokens), len(entries)
    assert not vl["text"].startswith(long_prompt[:20]), vl["text"]
    for pos, entry in enumerate(entries[1:], start=1):
        first = next(iter(entry.values()))  # the prompt's own token comes first
        assert first["logprob"] == l1.token_logprobs[pos], (pos, first, l1.token_logprobs[pos])
        best = [v for v in entry.values() if v["rank"] == 1]
        assert best and max(v["logprob"] for v in entry.values()) == best[0]["logprob"], entry
        assert (first["rank"] == 1) == (first["logprob"] == best[0]["logprob"]), entry
    chat_scored = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=1,
        extra_body={"prompt_logprobs": 0}).model_dump()
    assert chat_scored["prompt_logprobs"][0] is None, chat_scored
    assert len(chat_scored["prompt_logprobs"]) == chat_scored["usage"]["prompt_tokens"]
    print(f"echo: generated tokens rescored within {max(echo_diffs):.4f} nats; "
          f"{len(l1.tokens)}-token prompt perplexity {ppl:.2f}")

    # logit_bias -100 bans a token: the first (sampled by the prefill worker) and a later one
    # (sampled by the decode worker) give way to their runners-up. Logprobs stay the model's own
    # (raw), so the runner-up reads what it read before. Ids through vLLM's
    # return_tokens_as_token_ids.
    ids = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                    logprobs=2, extra_body=as_ids).choices[0].logprobs
    assert all(t.startswith("token_id:") for t in ids.tokens), ids.tokens
    k = next(i for i in range(1, len(ids.tokens)) if ids.tokens[i] not in ids.tokens[:i])
    for pos in (0, k):
        banned_id = ids.tokens[pos].split(":")[1]
        runner_up, runner_up_logprob = list(ids.top_logprobs[pos].items())[1]
        out = client.completions.create(model=model, prompt=prompt, max_tokens=pos + 1,
                                        temperature=0, logprobs=0, extra_body=as_ids,
                                        logit_bias={banned_id: -100}).choices[0].logprobs
        assert out.tokens[:pos] == ids.tokens[:pos], (pos, out.tokens, ids.tokens)
        assert out.tokens[pos] == runner_up, (pos, out.tokens, runner_up)
        assert abs(out.token_logprobs[pos] - runner_up_logprob) < 1e-4, (out.token_logprobs, pos)
    print(f"logit_bias: banned positions 0 and {k}, runners-up took them")
    # vLLM's stop_token_ids end the completion before the token (the first one, from the
    # prefill worker, or a later one, from the decode worker).
    pieces = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                       logprobs=0).choices[0].logprobs.tokens
    for pos in (0, k):
        out = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                        extra_body={"stop_token_ids":
                                                    [int(ids.tokens[pos].split(":")[1])]})
        assert out.choices[0].finish_reason == "stop", out.choices[0]
        assert out.choices[0].text == "".join(pieces[:pos]), (pos, out.choices[0].text, pieces)
    # ... unless min_tokens keeps the prefill off it: then its runner-up starts the text.
    floor = client.completions.create(model=model, prompt=prompt, max_tokens=2, temperature=0,
                                      logprobs=0, extra_body={
                                          "stop_token_ids": [int(ids.tokens[0].split(":")[1])],
                                          "min_tokens": 1, **as_ids}).choices[0]
    assert floor.logprobs.tokens[0] == list(ids.top_logprobs[0])[1], (floor, ids.top_logprobs[0])

    # Sampling: a seed reproduces a completion; without one each request draws its own.
    def sampled(**extra):
        return client.completions.create(model=model, prompt="Once upon a time", max_tokens=16,
                                         temperature=1.2, **extra).choices[0].text
    assert sampled(seed=7) == sampled(seed=7)
    unseeded = {sampled() for _ in range(3)}
    assert len(unseeded) > 1, f"three unseeded samples were identical: {unseeded}"

    # n > 1: indexed choices that differ from each other, reproduce under a seed, and stream
    # (interleaved by index) to the same texts.
    many = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12,
                                     temperature=1.0, n=3, seed=11)
    texts = [ch.text for ch in sorted(many.choices, key=lambda ch: ch.index)]
    assert [ch.index for ch in many.choices] == [0, 1, 2] and len(set(texts)) > 1, texts
    again = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12,
                                      temperature=1.0, n=3, seed=11)
    assert [ch.text for ch in again.choices] == texts, ([ch.text for ch in again.choices], texts)
    one = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12,
                                    temperature=1.0, seed=11).choices[0].text
    assert one == texts[0], (one, texts)  # choice 0 keeps the client's seed
    streamed = ["", "", ""]
    for chunk in client.completions.create(model=model, prompt="Once upon a time", max_tokens=12,
                                           temperature=1.0, n=3, seed=11, stream=True):
        streamed[chunk.choices[0].index] += chunk.choices[0].text
    assert streamed == texts, (streamed, texts)
    print(f"n=3: {texts}")

    # vLLM's ignore_eos and min_tokens (what benchmark harnesses send for fixed output
    # lengths): the end-of-generation token stops neither, or not before min_tokens.
    yes_no = [{"role": "user", "content": "Reply with one word: yes or no."}]
    def chat_once(**extra):
        r = client.chat.completions.create(model=model, messages=yes_no, max_tokens=24,
                                           temperature=0, extra_body=extra)
        return r.usage.completion_tokens, r.choices[0].finish_reason, r.choices[0].message.content
    n_plain, why_plain, plain_answer = chat_once()
    assert why_plain == "stop" and n_plain < 10, (n_plain, why_plain, plain_answer)
    n, why, text = chat_once(ignore_eos=True)
    assert (n, why) == (24, "length") and text.startswith(plain_answer), (n, why, text)
    n, why, text = chat_once(min_tokens=10)
    assert n >= 10 and text.startswith(plain_answer), (n, why, text)
    print(f"ignore_eos / min_tokens: {n_plain} tokens ({plain_answer!r}) -> 24 / {n}")

    msgs = [{"role": "user", "content": "Name one colour of the rainbow."}]
    chat = client.chat.completions.create(model=model, messages=msgs, max_tokens=10,
                                          temperature=0)
    answer = chat.choices[0].message.content
    assert answer and answer.strip(), "empty chat answer"
    assert chat.choices[0].message.role == "assistant"
    streamed = ""
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=10,
                                                temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            streamed += chunk.choices[0].delta.content
    assert streamed == answer, f"streamed chat {streamed!r} != {answer!r}"
    print("chat:", repr(answer))

    # Continuous batching: concurrent requests share decode steps and each still gets exactly
    # its sequential (greedy) answer.
    import concurrent.futures
    import urllib.request
    prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
               "The three primary colours are"]
    def one(p):
        return client.completions.create(model=model, prompt=p, max_tokens=16,
                                         temperature=0).choices[0].text
    alone = {p: one(p) for p in prompts}
    def scrape(name):
        page = urllib.request.urlopen(url[:-3] + "/metrics").read().decode()
        return float(re.search(r"^" + name + r" (\S+)$", page, re.M).group(1))
    # Every prompt scored above (echo with logprobs, prompt_logprobs) counted its tokens.
    assert scrape("oscarkv_prefill_tokens_scored_total") >= 4 * (len(l1.tokens) - 1), "scored"
    # n choices score the prompt once: the second choice repeats the first's scores.
    before = scrape("oscarkv_prefill_tokens_scored_total")
    two = client.completions.create(model=model, prompt=long_prompt, max_tokens=2, echo=True,
                                    logprobs=2, n=2, seed=3)
    assert scrape("oscarkv_prefill_tokens_scored_total") - before == len(l1.tokens) - 1
    for c in two.choices:
        assert c.text.startswith(long_prompt), c.text[:40]
        assert c.logprobs.token_logprobs[:len(l1.tokens)] == l1.token_logprobs, c.index
    steps0, tokens0 = scrape("oscarkv_decode_steps_total"), scrape("oscarkv_decode_tokens_generated_total")
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
        together = dict(zip(prompts, ex.map(one, prompts)))
    dt = time.time() - t0
    steps = scrape("oscarkv_decode_steps_total") - steps0
    tokens = scrape("oscarkv_decode_tokens_generated_total") - tokens0
    for p in prompts:
        assert together[p] == alone[p], f"batched {together[p]!r} != alone {alone[p]!r}"
    assert steps < tokens, f"no batching: {steps} steps for {tokens} tokens"
    print(f"[measure] {len(prompts)} concurrent completions: {tokens:.0f} decode tokens in "
          f"{steps:.0f} steps ({tokens / steps:.2f} per step), {dt:.2f} s")

    # Batched prompts (one request, a list of prompts): one choice per prompt, in order, each
    # its sequential answer.
    batch = client.completions.create(model=model, prompt=prompts, max_tokens=16, temperature=0)
    assert [ch.index for ch in batch.choices] == list(range(len(prompts))), batch.choices
    for p, ch in zip(prompts, batch.choices):
        assert ch.text == alone[p], (p, ch.text, alone[p])

    # A burst larger than the prefill worker's slots (--max_concurrent 4) waits for them instead
    # of failing with 429: every request completes, each with its own sequential answer. The
    # client's own retries (it retries a 429 twice by default) are off, so the server must wait.
    burst = [f"Item {i} of the list is" for i in range(12)]
    no_retry = OpenAI(base_url=url, api_key="unused", max_retries=0)
    def short(p):
        return no_retry.completions.create(model=model, prompt=p, max_tokens=2,
                                           temperature=0).choices[0].text
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(burst)) as ex:
        burst_out = list(ex.map(short, burst))
    dt = time.time() - t0
    for p, text in zip(burst, burst_out):
        assert text == short(p), (p, text)
    print(f"[measure] a burst of {len(burst)} concurrent completions, all answered: {dt:.2f} s")


def run_doc_examples(docs, url):
    with open(docs) as f:
        md = f.read()
    blocks = re.findall(r"```(bash|python)\n(.*?)```", md, re.S)
    env = dict(os.environ, OSCARKV_URL=url)
    ran = 0
    for lang, code in blocks:
        if "OSCARKV_URL" not in code:
            continue
        if lang == "bash":
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", code], env=env, cwd=REPO,
                                 capture_output=True, text=True, timeout=120)
        else:
            out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO,
                                 capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"doc example failed:\n{code}\n{out.stdout}\n{out.stderr}"
        assert out.stdout.strip(), f"doc example printed nothing:\n{code}"
        ran += 1
    assert ran >= 3, f"expected at least 3 runnable examples in {docs}, found {ran}"
    print(f"ran {ran} examples from {os.path.basename(docs)}")


if __name__ == "__main__":
    sys.exit(main())
