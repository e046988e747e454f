"""Test helpers: the checkpoint generator, an unsharded reference forward
pass (full recompute, no KV cache, float64) and a decode scenario whose
batch changes every step."""

import importlib.util
import os
import random
import socket

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GENERATOR = os.path.join(REPO, "scripts", "make-checkpoint.py")
WORKER = os.path.join(HERE, "worker.py")

TINY = dict(vocab=1000, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)

_gen = None


def generator():
    """scripts/make-checkpoint.py as a module."""
    global _gen
    if _gen is None:
        spec = importlib.util.spec_from_file_location("make_checkpoint", GENERATOR)
        _gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_gen)
    return _gen


def make_checkpoint(out, **kw):
    """Run the generator with --key value flags; -> (config dict, float32 weights)."""
    opts = dict(TINY)
    opts.update(kw)
    argv = ["--out", out]
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, str(value)]
    return generator().main(argv)


def free_port():
    """A loopback TCP port free now, picked at random below the kernel's
    ephemeral range, where no port-0 bind or connect of the ranks can take
    it before rank 0's store binds it (tpcoord's internal/freeport does the
    same); a port the kernel picks if there is no room below the range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 49152
    top = min(low, 30000)  # below Kubernetes' NodePorts too, as freeport
    rng = random.SystemRandom()  # whatever a test seeds random with
    ports = [rng.randrange(20000, top) for _ in range(64)] if top - 20000 >= 64 else []
    for port in ports + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free loopback port")


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Reference:
    """transformers' LlamaForCausalLM / GraniteForCausalLM, unsharded, float64."""

    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.w = {k: v.double() for k, v in weights.items()}
        self.hd = cfg["hidden_size"] // cfg["num_attention_heads"]

    def _norm(self, x, name):
        return self.w[name] * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])

    def _attention(self, h, p, cos, sin):
        cfg, hd, T = self.cfg, self.hd, h.shape[0]
        H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        q = (h @ self.w[p + "self_attn.q_proj.weight"].T).view(T, H, hd).transpose(0, 1)
        k = (h @ self.w[p + "self_attn.k_proj.weight"].T).view(T, K, hd).transpose(0, 1)
        v = (h @ self.w[p + "self_attn.v_proj.weight"].T).view(T, K, hd).transpose(0, 1)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k, v = k.repeat_interleave(H // K, dim=0), v.repeat_interleave(H // K, dim=0)
        scale = cfg.get("attention_multiplier", hd ** -0.5)
        scores = (q @ k.transpose(1, 2)) * scale
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.softmax(scores, dim=-1) @ v
        return o.transpose(0, 1).reshape(T, H * hd) @ self.w[p + "self_attn.o_proj.weight"].T

    def logits(self, tokens):
        """Logits [vocab] after the last of tokens."""
        cfg, w = self.cfg, self.w
        ids = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
        x = w["model.embed_tokens.weight"][ids] * cfg.get("embedding_multiplier", 1.0)
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))
        freqs = torch.arange(len(ids), dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        rm = cfg.get("residual_multiplier", 1.0)
        for i in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % i
            x = x + self._attention(self._norm(x, p + "input_layernorm.weight"), p, cos, sin) * rm
            h = self._norm(x, p + "post_attention_layernorm.weight")
            mlp = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + (mlp @ w[p + "mlp.down_proj.weight"].T) * rm
        x = self._norm(x[-1:], "model.norm.weight")
        head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
        return (x @ head.T)[0] / cfg.get("logits_scaling", 1.0)


class Step:
    """One FORWARD in both protocol forms, and the reference logits."""

    def __init__(self, finished, rows, histories, expected):
        self.finished = finished      # v2 finished ids
        self.rows = rows              # v2 rows: (id, flags, position, P, tokens)
        self.histories = histories    # v1 rows: (id, P, whole history)
        self.expected = expected      # float64 [n, vocab]


def _prompt(rng, n, vocab):
    return rng.integers(0, vocab, size=n).astype(np.int64)


def scenario(ref, seed=1):
    """Prompts of different lengths (one longer than a small prefill
    chunk), decode steps fed the reference's greedy tokens, rows that join,
    leave and reorder, a known row given two tokens, and a NEW row that
    resumes with output tokens. -> [Step]."""
    vocab = ref.cfg["vocab_size"]
    rng = np.random.default_rng(seed)
    plan = [  # (finished, [(id, prompt length if NEW else None)])
        ([], [(10, 5), (11, 21)]),
        ([], [(11, None), (12, 3), (10, None)]),
        ([10], [(12, None), (13, 12), (11, "two")]),
        ([], [(13, None), (11, None), (12, None)]),
        ([12], [(11, None), (14, "resume"), (13, None)]),
        ([], [(14, None), (13, None), (11, None)]),
        ([13], [(11, None), (14, None), (15, 1)]),
        ([], [(15, None), (11, None), (14, None)]),
    ]
    hist, prompt_len, held, last = {}, {}, {}, {}
    steps = []
    for finished, rows in plan:
        for f in finished:
            del hist[f], held[f]
        v2, v1, expected = [], [], []
        for seq_id, kind in rows:
            if seq_id not in hist:
                n = 4 if kind == "resume" else kind
                hist[seq_id] = _prompt(rng, n, vocab)
                prompt_len[seq_id] = n
                if kind == "resume":  # a request resumed with 3 output tokens
                    hist[seq_id] = np.concatenate([hist[seq_id], _prompt(rng, 3, vocab)])
                held[seq_id], flags = 0, 1
            else:
                extra = [int(last[seq_id].argmax())] + ([int(rng.integers(vocab))] if kind == "two" else [])
                hist[seq_id] = np.concatenate([hist[seq_id], np.array(extra, dtype=np.int64)])
                flags = 0
            new = hist[seq_id][held[seq_id]:]
            v2.append((seq_id, flags, held[seq_id], prompt_len[seq_id], new.copy()))
            v1.append((seq_id, prompt_len[seq_id], hist[seq_id].copy()))
            held[seq_id] = len(hist[seq_id])
            last[seq_id] = ref.logits(hist[seq_id])
            expected.append(last[seq_id])
        steps.append(Step(list(finished), v2, v1, torch.stack(expected)))
    return steps
