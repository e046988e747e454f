#!/usr/bin/env python3
"""Greedy decoding of a Hugging Face Llama/Granite checkpoint, written
plainly: one process, no tensor parallelism, no KV cache (every step runs
the whole sequence again), float64. It is the e2e tests' reference for the
tokens a tensor-parallel worker under tpcoord must produce, and shares no
code with that worker.

    llama_reference.py --model DIR < requests.json > tokens.json

requests.json: [{"prompt": [ids...], "max_tokens": n}, ...]; the output is
one list of n token ids per request (EOS is not a stop: the tests ignore it).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """All tensors of one .safetensors file, as float64."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0)
        out[name] = t.reshape(info["shape"]).to(torch.float64)
    return out


def load(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(model_dir, name)))
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f), weights


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, theta):
    """Rotary embedding of x [T, heads, D] at positions 0..T-1 (HF convention)."""
    t, _, d = x.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    return x * cos + rotate_half(x) * sin


def attention(cfg, w, i, x):
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    t = x.shape[0]
    p = f"model.layers.{i}.self_attn."
    q = (x @ w[p + "q_proj.weight"].T).reshape(t, heads, d)
    k = (x @ w[p + "k_proj.weight"].T).reshape(t, kv, d)
    v = (x @ w[p + "v_proj.weight"].T).reshape(t, kv, d)
    theta = cfg.get("rope_theta", 10000.0)
    q, k = rope(q, theta), rope(k, theta)
    group = heads // kv
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = cfg.get("attention_multiplier", 1.0 / math.sqrt(d))
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(t, heads * d)
    return out @ w[p + "o_proj.weight"].T


def mlp(w, i, x):
    p = f"model.layers.{i}.mlp."
    gate = torch.nn.functional.silu(x @ w[p + "gate_proj.weight"].T)
    return (gate * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def next_token(cfg, w, tokens):
    eps, res = cfg.get("rms_norm_eps", 1e-6), cfg.get("residual_multiplier", 1.0)
    h = w["model.embed_tokens.weight"][torch.tensor(tokens)] * cfg.get("embedding_multiplier", 1.0)
    for i in range(cfg["num_hidden_layers"]):
        x = rms_norm(h, w[f"model.layers.{i}.input_layernorm.weight"], eps)
        h = h + attention(cfg, w, i, x) * res
        x = rms_norm(h, w[f"model.layers.{i}.post_attention_layernorm.weight"], eps)
        h = h + mlp(w, i, x) * res
    h = rms_norm(h[-1], w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = (head @ h) / cfg.get("logits_scaling", 1.0)
    return int(torch.argmax(logits))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg, w = load(args.model)
    out = []
    for req in json.load(sys.stdin):
        seq = list(req["prompt"])
        for _ in range(req["max_tokens"]):
            seq.append(next_token(cfg, w, seq))
        out.append(seq[len(req["prompt"]):])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
