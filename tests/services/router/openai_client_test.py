#!/usr/bin/env python3
"""End-to-end: the official OpenAI Python client against the real oscarkv_router binary.

The router runs with the hidden, test-only --testing_echo_backend (services/router/
testing_echo_backend.h): model "oscarkv-echo", one token per prompt byte, output = the prompt's
words one per token. Checks streaming and non-streaming completions and chat completions,
extension fields, errors, /metrics, graceful SIGTERM, and runs every example of docs/API.md.

  python3 tests/services/router/openai_client_test.py --router build/services/router/oscarkv_router
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import unittest
import urllib.request

import openai
from openai import OpenAI

ROUTER = None
PORT = None
PROC = None
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROMPT = "Say this is a test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router():
    global PORT, PROC
    PORT = free_port()
    PROC = subprocess.Popen(
        [ROUTER, "--testing_echo_backend", "--http_host", "127.0.0.1", "--port", str(PORT),
         "--grpc_address", "", "--request_timeout_s", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        if PROC.poll() is not None:
            raise RuntimeError("router exited early:\n" + PROC.stdout.read())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("router did not become ready")


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="unused",
                            max_retries=0, timeout=20)

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["oscarkv-echo"])

    def test_completion(self):
        c = self.client.completions.create(model="oscarkv-echo", prompt=PROMPT, max_tokens=3,
                                           temperature=0)
        self.assertTrue(c.id.startswith("cmpl-"))
        self.assertEqual(c.object, "text_completion")
        self.assertEqual(c.choices[0].text, "Say this is")
        self.assertEqual(c.choices[0].finish_reason, "length")
        self.assertEqual(c.usage.prompt_tokens, len(PROMPT.encode()))
        self.assertEqual(c.usage.completion_tokens, 3)
        self.assertEqual(c.usage.total_tokens, len(PROMPT.encode()) + 3)

    def test_completion_stream(self):
        chunks = list(self.client.completions.create(model="oscarkv-echo", prompt=PROMPT,
                                                     stream=True))
        self.assertEqual(len({c.id for c in chunks}), 1)
        text = "".join(c.choices[0].text for c in chunks)
        self.assertEqual(text, PROMPT)
        self.assertEqual(len(chunks), 5 + 1)  # one per word, then the finish chunk
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")
        self.assertTrue(all(c.choices[0].finish_reason is None for c in chunks[:-1]))

    def test_chat(self):
        chat = self.client.chat.completions.create(
            model="oscarkv-echo", messages=[{"role": "user", "content": PROMPT}],
            extra_body={"session_id": "s-1", "codec": "bf16"})
        self.assertTrue(chat.id.startswith("chatcmpl-"))
        self.assertEqual(chat.choices[0].message.role, "assistant")
        self.assertEqual(chat.choices[0].message.content, PROMPT)
        self.assertEqual(chat.choices[0].finish_reason, "stop")
        self.assertEqual(chat.model_extra.get("session_id"), "s-1")

    def test_chat_stream_with_usage(self):
        stream = self.client.chat.completions.create(
            model="oscarkv-echo", messages=[{"role": "user", "content": PROMPT}], max_tokens=2,
            stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, "Say this")
        finish = [c.choices[0].finish_reason for c in chunks if c.choices]
        self.assertEqual(finish[-1], "length")
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 2)
        self.assertEqual(chunks[-1].usage.prompt_tokens, len(PROMPT.encode()))

    def test_logprobs_parse_in_the_clients_types(self):
        # The echo is certain: every token has logprob 0, its one alternative itself.
        c = self.client.completions.create(model="oscarkv-echo", prompt=PROMPT, max_tokens=3,
                                           logprobs=2)
        lp = c.choices[0].logprobs
        self.assertEqual(lp.tokens, ["Say", " this", " is"])
        self.assertEqual(lp.token_logprobs, [0.0, 0.0, 0.0])
        self.assertEqual(lp.top_logprobs, [{"Say": 0.0}, {" this": 0.0}, {" is": 0.0}])
        self.assertEqual(lp.text_offset, [0, 3, 8])
        chunks = list(self.client.completions.create(model="oscarkv-echo", prompt=PROMPT,
                                                     max_tokens=2, logprobs=0, stream=True))
        self.assertEqual([t for ch in chunks if ch.choices[0].logprobs
                          for t in ch.choices[0].logprobs.tokens], ["Say", " this"])
        chat = self.client.chat.completions.create(
            model="oscarkv-echo", messages=[{"role": "user", "content": PROMPT}], max_tokens=2,
            logprobs=True, top_logprobs=1)
        content = chat.choices[0].logprobs.content
        self.assertEqual([t.token for t in content], ["Say", " this"])
        self.assertEqual(content[1].bytes, list(b" this"))
        self.assertEqual(content[1].logprob, 0.0)
        self.assertEqual([a.token for a in content[1].top_logprobs], [" this"])
        stream = self.client.chat.completions.create(
            model="oscarkv-echo", messages=[{"role": "user", "content": PROMPT}], max_tokens=2,
            logprobs=True, stream=True)
        tokens = [t.token for ch in stream if ch.choices and ch.choices[0].logprobs
                  for t in ch.choices[0].logprobs.content]
        self.assertEqual(tokens, ["Say", " this"])
        no = self.client.completions.create(model="oscarkv-echo", prompt=PROMPT, max_tokens=1)
        self.assertIsNone(no.choices[0].logprobs)
        # echo: the prompt's tokens (one per byte here) lead, the first unscored (None).
        echoed = self.client.completions.create(model="oscarkv-echo", prompt="Say it",
                                                max_tokens=1, echo=True, logprobs=1)
        lp = echoed.choices[0].logprobs
        self.assertEqual(echoed.choices[0].text, "Say itSay")
        self.assertEqual(lp.tokens, ["S", "a", "y", " ", "i", "t", "Say"])
        self.assertEqual(lp.token_logprobs[0], None)
        self.assertEqual(lp.top_logprobs[0], None)
        self.assertEqual(lp.top_logprobs[1], {"a": 0.0})
        self.assertEqual(lp.text_offset, [0, 1, 2, 3, 4, 5, 6])
        self.assertEqual(echoed.usage.completion_tokens, 1)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.completions.create(model="no-such-model", prompt="hi")
        self.assertEqual(e.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="oscarkv-echo", prompt="hi", max_tokens=0)
        self.assertEqual(e.exception.body["param"], "max_tokens")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="oscarkv-echo", messages=[],)
        self.assertEqual(e.exception.body["param"], "messages")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="oscarkv-echo", prompt="x" * 5000)
        self.assertEqual(e.exception.body["code"], "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="oscarkv-echo", prompt="hi", temperature=3)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="oscarkv-echo", prompt="hi", n=17)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="oscarkv-echo", prompt="hi", logprobs=21)
        self.assertEqual(e.exception.body["param"], "logprobs")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="oscarkv-echo", messages=[{"role": "user", "content": "hi"}],
                top_logprobs=3)
        self.assertEqual(e.exception.body["param"], "top_logprobs")

    def test_metrics(self):
        self.client.completions.create(model="oscarkv-echo", prompt="a b", max_tokens=1)
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=5) as r:
            body = r.read().decode()
        m = re.search(r'^oscarkv_router_requests_total\{endpoint="completions",code="200"\} (\S+)$',
                      body, re.M)
        self.assertIsNotNone(m, body)
        self.assertGreaterEqual(float(m.group(1)), 1)


# What each docs/API.md example must print (substrings).
DOC_EXPECT = {
    "curl-models": ['"id":"oscarkv-echo"', '"object":"list"'],
    "curl-completion": ['"text":"Say this is"', '"finish_reason":"length"',
                        '"completion_tokens":3'],
    "curl-chat-stream": ['"role":"assistant"', '"content":" test"', '"finish_reason":"stop"',
                         '"session_id":"demo-session-1"', '"choices":[]', "data: [DONE]"],
    "curl-logprobs": ['"tokens":["Say"," this"]', '"token_logprobs":[0.0,0.0]',
                      '"top_logprobs":[{"Say":0.0},{" this":0.0}]', '"text_offset":[0,3]'],
    "curl-echo": ['"text":"Hi there"', '"token_logprobs":[null,0.0,0.0,', '"top_logprobs":[null,{"i":0.0},',
                  '"completion_tokens":0', '"finish_reason":"length"'],
    "curl-error": ['"code":"model_not_found"', '"type":"invalid_request_error"'],
    "python-openai": ["Say this is length 3\nSay this is a test\nSay this is a test\n"],
}


class DocExamplesTest(unittest.TestCase):
    def test_every_api_md_example_runs(self):
        with open(os.path.join(REPO, "docs", "API.md")) as f:
            doc = f.read()
        examples = re.findall(r"<!-- example: (\S+) -->\n```(\w+)\n(.*?)```", doc, re.S)
        self.assertEqual(sorted(n for n, _, _ in examples), sorted(DOC_EXPECT))
        for name, lang, code in examples:
            with self.subTest(example=name):
                code = code.replace("localhost:8000", f"127.0.0.1:{PORT}")
                cmd = ["bash", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                self.assertEqual(out.returncode, 0, out.stderr)
                for want in DOC_EXPECT[name]:
                    self.assertIn(want, out.stdout)


def main():
    global ROUTER
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", required=True)
    args, rest = ap.parse_known_args()
    ROUTER = args.router
    start_router()
    try:
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        ok = prog.result.wasSuccessful()
    finally:
        # Graceful shutdown: SIGTERM drains and exits 0.
        PROC.send_signal(signal.SIGTERM)
        try:
            rc = PROC.wait(timeout=15)
        except subprocess.TimeoutExpired:
            PROC.kill()
            rc = "hung"
        log = PROC.stdout.read()
    if rc != 0:
        print(f"router exit status after SIGTERM: {rc}\n{log}")
        ok = False
    elif "router HTTP stopped" not in log:
        print("router did not log its drain:\n" + log)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
