#!/usr/bin/env python3
"""Write a seeded random Llama (or Granite) checkpoint for testing workers.

The directory holds config.json and model.safetensors, or with --shards N
several model-0000i-of-0000N.safetensors plus model.safetensors.index.json,
in the layout of Hugging Face's LlamaForCausalLM. The safetensors files are
written here directly from the format's published spec (no safetensors
package). Run it with a python that has torch (on Debian: /usr/bin/python3
with python3-torch):

    /usr/bin/python3 scripts/make-checkpoint.py --out /tmp/tiny --vocab 1000 \\
        --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128

Weights are scaled so that a greedy decode of the random model is not
degenerate: attention scores and logits spread over a few units, and each
layer's output is comparable to its input. The same seed gives the same
files byte for byte.

Unless --no-tokenizer is given, it also writes tokenizer.json and
tokenizer_config.json: a byte-level BPE tokenizer (GPT-2's byte alphabet,
merges learnt from a built-in English text) whose ids are exactly
0..vocab-1, with <unk> 0, <s> 1 (bos_token_id), </s> at eos_token_id and
the chat template's <|system|>, <|user|> and <|assistant|> at the top ids,
so that the checkpoint can be served with text (tpcoord serve-model). It
needs a vocab of at least 262; below that the default writes none.
"""

import argparse
import collections
import json
import math
import os
import re
import struct
import sys

import torch

DTYPES = {"f32": ("F32", torch.float32, "float32"), "f16": ("F16", torch.float16, "float16"),
          "bf16": ("BF16", torch.bfloat16, "bfloat16")}

GRANITE = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 8.0}

CHAT_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
MIN_TOKENIZER_VOCAB = 256 + 3 + len(CHAT_TOKENS)

# The text the tokenizer's merges are learnt from: common English words,
# so that a prompt in English takes fewer tokens than bytes.
CORPUS = """
The quick brown fox jumps over the lazy dog. Once upon a time there was a
little model that wanted to talk. It learned words one at a time, and then
whole sentences: hello, world, how are you today? I am fine, thank you.
What is the weather like? It is sunny and warm, with a light wind from the
west. Please tell me a story about a dragon who lived in a castle near the
sea. The dragon was kind and wise, and every morning it flew over the
village to see that everyone was safe. People in the village said that the
dragon knew the answer to every question, so they came to ask it about
their lives, their work and their dreams. Be brief. Say hello. You are a
helpful assistant. Answer the question in one sentence. Write a short poem
about the moon and the stars. Explain how a computer works, step by step.
The number of tokens in this text is small, but it is enough for a test.
Tensor parallel decoding splits every layer of the model across several
ranks, and each rank computes its part of the logits for every step.
"""


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def learn_merges(n, alphabet):
    """Up to n BPE merges learnt from CORPUS, most frequent pair first."""
    words = collections.Counter()
    for w in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", CORPUS):
        words[tuple(alphabet[b] for b in w.encode("utf-8"))] += 1
    merges = []
    while len(merges) < n:
        pairs = collections.Counter()
        for w, count in words.items():
            for pair in zip(w, w[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = collections.Counter()
        for w, count in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def tokenizer_files(vocab, eos):
    """(tokenizer.json, tokenizer_config.json) dicts whose ids are 0..vocab-1."""
    special = {0: "<unk>", 1: "<s>"}
    if eos >= 0:
        special[eos] = "</s>"
    top = sorted(set(range(vocab)) - set(special))[-len(CHAT_TOKENS):]
    special.update(zip(top, CHAT_TOKENS))
    free = [i for i in range(vocab) if i not in special]
    alphabet = bytes_to_unicode()
    pieces = [alphabet[b] for b in range(256)]
    merges = learn_merges(len(free) - 256, alphabet)
    known = set(pieces)
    for a, b in merges:
        known.add(a + b)
    pieces += [a + b for a, b in merges]
    # More ids than the text has merges for: pairs of pieces already there.
    for a in list(pieces):
        for b in pieces[:256]:
            if len(pieces) == len(free):
                break
            if a + b not in known:
                known.add(a + b)
                merges.append((a, b))
                pieces.append(a + b)
    model_vocab = dict(zip(pieces, free))
    model_vocab.update((name, i) for i, name in special.items())
    added = [{"id": i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, name in sorted(special.items())]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": model_vocab, "merges": [list(m) for m in merges]},
    }
    end = "{{ eos_token }}" if eos >= 0 else ""
    template = ("{{ bos_token }}{% for message in messages %}"
                "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
                "{{ raise_exception('unknown role: ' + message['role']) }}{% endif %}"
                "<|{{ message['role'] }}|>\n{{ message['content'] | trim }}" + end + "\n"
                "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True, "add_eos_token": False,
           "bos_token": "<s>", "unk_token": "<unk>", "model_max_length": 4096, "chat_template": template}
    if eos >= 0:
        cfg["eos_token"] = "</s>"
    if eos == 0:
        cfg.pop("unk_token")
    return tok, cfg


def write_tokenizer(out, vocab, eos):
    for name, data in zip(("tokenizer.json", "tokenizer_config.json"), tokenizer_files(vocab, eos)):
        with open(os.path.join(out, name), "w") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="checkpoint directory to write (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=1, help="N > 1 writes N files and the index")
    ap.add_argument("--granite", action="store_true", help="write Granite's four multipliers")
    ap.add_argument("--tie-embeddings", action="store_true", help="no lm_head.weight: tie it to the embedding")
    ap.add_argument("--eos", type=int, default=2, help="eos_token_id (-1: none)")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--tokenizer", action=argparse.BooleanOptionalAction, default=None,
                    help="write tokenizer.json and tokenizer_config.json matching --vocab and --eos (default: "
                         "when --vocab is at least %d)" % MIN_TOKENIZER_VOCAB)
    args = ap.parse_args(argv)
    if args.kv_heads is None:
        args.kv_heads = args.heads
    if args.hidden % args.heads or args.heads % args.kv_heads or (args.hidden // args.heads) % 2:
        ap.error("--hidden must split into an even head_dim per head, and --kv-heads must divide --heads")
    if args.eos >= args.vocab or args.shards < 1:
        ap.error("--eos must be below --vocab and --shards positive")
    if args.tokenizer and args.vocab < MIN_TOKENIZER_VOCAB:
        ap.error("--tokenizer needs --vocab of at least %d (256 bytes, <unk>, <s>, </s> and 3 chat tokens)"
                 % MIN_TOKENIZER_VOCAB)
    if args.tokenizer is None:
        args.tokenizer = args.vocab >= MIN_TOKENIZER_VOCAB
    return args


def make_config(args):
    head_dim = args.hidden // args.heads
    cfg = {
        "architectures": ["GraniteForCausalLM" if args.granite else "LlamaForCausalLM"],
        "model_type": "granite" if args.granite else "llama",
        "vocab_size": args.vocab, "hidden_size": args.hidden, "intermediate_size": args.intermediate,
        "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": args.rope_theta, "rope_scaling": None,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": bool(args.tie_embeddings),
        "bos_token_id": 1, "eos_token_id": None if args.eos < 0 else args.eos,
        "torch_dtype": DTYPES[args.dtype][2],
    }
    if args.granite:
        cfg.update(GRANITE)
        # muP-style, as Granite: 1/head_dim instead of 1/sqrt(head_dim).
        cfg["attention_multiplier"] = 1.0 / head_dim
    return cfg


def init_weights(cfg, seed, dtype):
    """name -> float32 tensor holding values exactly representable in dtype."""
    g = torch.Generator().manual_seed(seed)
    D, I, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["hidden_size"] // cfg["num_attention_heads"]
    H, K, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    scale = cfg.get("attention_multiplier", 1.0 / math.sqrt(hd))
    resid = cfg.get("residual_multiplier", 1.0)
    logit_scale = cfg.get("logits_scaling", 1.0)
    # Normed inputs have unit RMS: q.k * scale then has std ~ 2 with this.
    qk_std = math.sqrt(2.0 / (scale * math.sqrt(hd) * D))

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    def norm_weight():
        return 1.0 + normal((D,), 0.1)

    w = {}
    if cfg["tie_word_embeddings"]:
        w["model.embed_tokens.weight"] = normal((V, D), 3.0 * logit_scale / math.sqrt(D))
    else:
        w["model.embed_tokens.weight"] = normal((V, D), 1.0 / cfg.get("embedding_multiplier", 1.0))
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = norm_weight()
        w[p + "self_attn.q_proj.weight"] = normal((H * hd, D), qk_std)
        w[p + "self_attn.k_proj.weight"] = normal((K * hd, D), qk_std)
        w[p + "self_attn.v_proj.weight"] = normal((K * hd, D), 1.0 / math.sqrt(D))
        w[p + "self_attn.o_proj.weight"] = normal((D, H * hd), 1.0 / math.sqrt(H * hd) / resid)
        w[p + "post_attention_layernorm.weight"] = norm_weight()
        w[p + "mlp.gate_proj.weight"] = normal((I, D), 1.0 / math.sqrt(D))
        w[p + "mlp.up_proj.weight"] = normal((I, D), 1.0 / math.sqrt(D))
        w[p + "mlp.down_proj.weight"] = normal((D, I), 2.0 / math.sqrt(I) / resid)
    w["model.norm.weight"] = norm_weight()
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = normal((V, D), 3.0 * logit_scale / math.sqrt(D))
    return {name: t.to(dtype).float() for name, t in w.items()}


def tensor_bytes(t, dtype):
    """Little-endian bytes of t stored as dtype."""
    if dtype is torch.float32:
        return t.numpy().astype("<f4").tobytes()
    if dtype is torch.float16:
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors, st_dtype, dtype):
    """tensors: [(name, float32 tensor)] in file order."""
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        data = tensor_bytes(t, dtype)
        header[name] = {"dtype": st_dtype, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # keep the data buffer 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)
    return off


def write_checkpoint(out, cfg, weights, dtype_flag, shards):
    st_dtype, dtype, _ = DTYPES[dtype_flag]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    items = list(weights.items())
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), items, st_dtype, dtype)
        return
    shards = min(shards, len(items))
    weight_map, total = {}, 0
    for s in range(shards):
        part = items[s * len(items) // shards:(s + 1) * len(items) // shards]
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        total += write_safetensors(os.path.join(out, fname), part, st_dtype, dtype)
        weight_map.update((name, fname) for name, _ in part)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


def main(argv=None):
    """Write the checkpoint; return (config dict, float32 weights) for tests."""
    args = parse_args(argv)
    cfg = make_config(args)
    weights = init_weights(cfg, args.seed, DTYPES[args.dtype][1])
    write_checkpoint(args.out, cfg, weights, args.dtype, args.shards)
    if args.tokenizer:
        write_tokenizer(args.out, args.vocab, args.eos)
    return cfg, weights


if __name__ == "__main__":
    main()
    sys.exit(0)
