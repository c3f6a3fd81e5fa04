"""Tiny random-weight Hugging Face checkpoints (Llama, Qwen2, Qwen3) and transformers' outputs
for them, for the safetensors loading tests in tests/lib/model/hf_model_test.cc.

For each architecture this writes tests/lib/model/fixtures/hf_tiny/<arch>/:
  config.json, model.safetensors (save_pretrained), generation_config.json,
  tokenizer.json + tokenizer_config.json (a 512-token byte-level BPE trained here on data/text),
  reference.json (token-id sequences, greedy continuation, tokenizer ids of real text lines,
    versions) and logits_<i>.f32 (raw little-endian float32 [T, vocab] per sequence).

The reference numbers come from transformers in float32 (eager attention) over the weights as
stored (bf16 / f16 rounding included), so only our summation order and our bf16 rounding of the
prompt K/V differ. Deterministic for fixed versions (seeded torch and Python RNGs, 1 thread).

    python3 tools/reference/make_tiny_hf_fixtures.py
"""

import json
import os
import random
import shutil
import sys

import torch
import transformers
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

OUT = os.path.join(common.REPO, "tests", "lib", "model", "fixtures", "hf_tiny")
VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer split (tokenizer.json of Qwen2/Qwen3): every digit alone.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
TEXT_FILES = ["austen/prideprejudice.txt", "moby/mobydick.txt"]


def text_lines():
    out = []
    for rel in TEXT_FILES:
        out += [l.decode("utf-8", "replace") for l in common.read_lines(rel)]
    return out


def train_tokenizer(style, lines):
    tok = Tokenizer(models.BPE())
    if style == "gpt2":  # what Llama-style GPT-2 BPE files carry: ByteLevel with its own regex
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:  # Qwen2/Qwen3: Split(regex) then ByteLevel without regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def randomize(model, seed):
    """Weights with O(1) activations and logits (HF's 0.02 init gives near-uniform logits, where
    every position is a near-tie); norms and biases non-trivial so loading them is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:  # also the output matrix when tied: keep logits O(1)
                p.copy_(2.0 * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            elif "lm_head" in name:
                p.copy_(2.0 * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


ARCHS = {
    # name: (config class, kwargs, save dtype, tokenizer style)
    "llama": ("LlamaConfig", dict(head_dim=32, tie_word_embeddings=False, rope_theta=10000.0,
                                  rms_norm_eps=1e-5), torch.bfloat16, "gpt2"),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=True, rope_theta=1000000.0,
                                  rms_norm_eps=1e-6), torch.float16, "qwen2"),
    "qwen3": ("Qwen3Config", dict(head_dim=64, tie_word_embeddings=True, rope_theta=1000000.0,
                                  rms_norm_eps=1e-6), torch.bfloat16, "qwen2"),
}


def main():
    torch.set_num_threads(1)
    lines = text_lines()
    train_lines = [l for l in lines if l.strip()][:4000]
    probe = [l for l in lines[4000:] if l.strip()]
    rnd = random.Random(1234)
    probe_lines = rnd.sample(probe, 24) + ["  1846.  digits 12345 and   spaces\tand tabs", "it's WE'LL"]
    for i, (arch, (cls_name, extra, dtype, tok_style)) in enumerate(ARCHS.items()):
        d = os.path.join(OUT, arch)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        cfg = getattr(transformers, cls_name)(
            vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            bos_token_id=None, eos_token_id=SPECIALS.index("<|im_end|>") + VOCAB - len(SPECIALS),
            **extra)
        cfg._attn_implementation = "eager"
        torch.manual_seed(100 + i)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        randomize(model, 100 + i)
        model.to(dtype).save_pretrained(d)
        tok = train_tokenizer(tok_style, train_lines)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False,
                       "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                       "bos_token": None, "model_max_length": 512, "chat_template": CHATML},
                      f, indent=2)

        ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                                attn_implementation="eager")
        ref.eval()
        g = random.Random(7 + i)
        seqs = [[g.randrange(VOCAB) for _ in range(n)] for n in (8, 17, 33)]
        files = []
        with torch.no_grad():
            for k, s in enumerate(seqs):
                logits = ref(torch.tensor([s])).logits[0].float().contiguous()
                name = f"logits_{k}.f32"
                logits.numpy().astype("<f4").tofile(os.path.join(d, name))
                files.append(name)
            prompt = tok.encode("It is a truth universally acknowledged").ids
            cur, greedy, margins = list(prompt), [], []
            for _ in range(32):
                last = ref(torch.tensor([cur])).logits[0, -1]
                top = torch.topk(last, 2)
                greedy.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
                cur.append(greedy[-1])
        enc = [tok.encode(l).ids for l in probe_lines]
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({
                "arch": arch, "dtype": str(dtype).replace("torch.", ""),
                "versions": {"transformers": transformers.__version__,
                             "torch": torch.__version__, "tokenizers": tokenizers.__version__},
                "sequences": seqs, "logits_files": files, "vocab": VOCAB,
                "greedy_prompt": prompt, "greedy_tokens": greedy, "greedy_margins": margins,
                "text_lines": probe_lines, "text_ids": enc,
            }, f)
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{arch}: {size / 1e6:.2f} MB in {d}")


if __name__ == "__main__":
    main()
