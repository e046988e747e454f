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
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"f32": ("F32", torch.float32, "float32"), "f16": ("F16", torch.float16, "float16"),
          "bf16": ("BF16", torch.bfloat16, "bfloat16")}

GRANITE = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 8.0}


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
    args = ap.parse_args(argv)
    if args.kv_heads is None:
        args.kv_heads = args.heads
    if args.hidden % args.heads or args.heads % args.kv_heads or (args.hidden // args.heads) % 2:
        ap.error("--hidden must split into an even head_dim per head, and --kv-heads must divide --heads")
    if args.eos >= args.vocab or args.shards < 1:
        ap.error("--eos must be below --vocab and --shards positive")
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
    return cfg, weights


if __name__ == "__main__":
    main()
    sys.exit(0)
