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


# The checkpoints e2e/torch_test.go builds (its llamaF32 and graniteBF16
# flag lists), as make_checkpoint keywords.
E2E_LLAMA_F32 = dict(seed=1, vocab=512, hidden=64, layers=2, heads=4, kv_heads=4, intermediate=128, dtype="f32",
                     shards=2)
E2E_GRANITE_BF16 = dict(seed=2, vocab=500, hidden=64, layers=2, heads=8, kv_heads=2, intermediate=96, dtype="bf16",
                        granite=True, tie_embeddings=True)

E2E_REFERENCE = os.path.join(REPO, "e2e", "testdata", "llama_reference.py")


def e2e_greedy(model_dir, requests):
    """The greedy tokens of e2e/testdata/llama_reference.py (the e2e tests'
    independent unsharded reference) for requests [(prompt, max tokens)]."""
    spec = importlib.util.spec_from_file_location("llama_reference", E2E_REFERENCE)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    cfg, w = ref.load(model_dir)
    out = []
    for prompt, n in requests:
        seq = [int(t) for t in prompt]
        for _ in range(n):
            seq.append(ref.next_token(cfg, w, seq))
        out.append(seq[len(prompt):])
    return out


def greedy_requests(vocab, count=4):
    """Prompts of 3 to 22 tokens (chunked over several FORWARDs) and
    different output lengths: [(prompt, max tokens)]."""
    lengths, outs = [22, 3, 13, 9, 17, 6], [5, 8, 4, 6, 3, 7]
    return [([(97 * i + 31 * j + 11) % vocab for j in range(lengths[i])], outs[i]) for i in range(count)]


class V3Agent:
    """An agent's side of protocol version 3 for tests: requests join at
    different steps, prompts are fed over several FORWARDs of at most
    `chunk` tokens (only the last with SAMPLE), blocks come from a shuffled
    free list (non-contiguous tables; a finished request's blocks go back at
    random places and are reused, in the same FORWARD too).

        agent = V3Agent(requests, block_size, blocks, chunk, seed)
        while not agent.done():
            finished, rows = agent.forward()
            ... tokens for the SAMPLE rows, in row order ...
            agent.sampled(tokens)
    """

    NEW, SAMPLE = 1, 2

    def __init__(self, requests, block_size, blocks, chunk, seed=0, ids_from=100):
        self.rng = random.Random(seed)
        self.bs, self.chunk = block_size, chunk
        self.free = list(range(blocks))
        self.rng.shuffle(self.free)
        self.reqs = [dict(id=ids_from + k, prompt=list(p), max=n, out=[], fed=0, start=0, blocks=[], join=2 * k)
                     for k, (p, n) in enumerate(requests)]
        self.step, self.finished, self.rows = 0, [], []

    def done(self):
        return all(len(r["out"]) == r["max"] for r in self.reqs)

    def _give(self, r, tokens):
        need = -(-tokens // self.bs) - len(r["blocks"])
        if need > len(self.free):
            raise AssertionError("test pool too small: request %d needs %d blocks" % (r["id"], need))
        new = [self.free.pop() for _ in range(need)]
        r["blocks"] += new
        return new

    def forward(self):
        """-> (finished ids, rows [(id, flags, position, P, tokens, new blocks)])."""
        self.step += 1
        finished, self.finished = self.finished, []
        rows, self.rows = [], []
        for r in self.reqs:
            if r["join"] >= self.step or len(r["out"]) == r["max"]:
                continue
            history = r["prompt"] + r["out"]
            if r["join"] + 1 == self.step:
                self._join(r)
            t = min(self.chunk, len(history) - r["fed"])
            new = r["fed"] == r["start"]
            flags = (self.NEW if new else 0) | (self.SAMPLE if r["fed"] + t == len(history) else 0)
            shared = list(r["blocks"]) if new else []  # a cached prefix's blocks
            blocks = shared + self._give(r, r["fed"] + t)
            rows.append((r["id"], flags, r["fed"], len(r["prompt"]),
                         np.array(history[r["fed"]:r["fed"] + t], dtype=np.int64), blocks))
            r["fed"] += t
            self.rows.append(r)
        return finished, rows

    def sampled(self, tokens):
        """The tokens of this step's SAMPLE rows, in row order."""
        want = [r for r in self.rows if r["fed"] == len(r["prompt"]) + len(r["out"])]
        assert len(tokens) == len(want), (len(tokens), len(want))
        for r, t in zip(want, tokens):
            r["out"].append(int(t))
            if len(r["out"]) == r["max"]:
                self.finished.append(r["id"])
                self._release(r)
                r["blocks"] = []

    def _join(self, r):
        """A request's first step: it starts with nothing cached."""

    def _release(self, r):
        """A finished request's blocks go back to the free list at random places."""
        for b in r["blocks"]:
            self.free.insert(self.rng.randrange(len(self.free) + 1), b)

    def histories(self):
        """The rows sampled this step: (id, whole history before the token)."""
        return [(r["id"], r["prompt"] + r["out"]) for r in self.rows
                if r["fed"] == len(r["prompt"]) + len(r["out"])]

    def outputs(self):
        return [r["out"] for r in self.reqs]


class PrefixAgent(V3Agent):
    """V3Agent whose requests may start with a cached prefix, as rank 0's
    prefix cache hands them out: requests [(prompt, max tokens, join step,
    share)], share None or (index of an earlier request, n): at its join
    step the request is NEW at position n * block size, the first n blocks
    of that request's table at the head of its own. The blocks shared so
    stay out of the free list for good (the test's cache never evicts
    them), even once their request finished; its other blocks go to the
    end of the free list, so the next request to need blocks writes over
    them.

    The test must let the earlier request fill those n blocks in a step
    before the join step."""

    def __init__(self, requests, block_size, blocks, chunk, seed=0, ids_from=100):
        super().__init__([(p, n) for p, n, _, _ in requests], block_size, blocks, chunk, seed, ids_from)
        self.pinned = set()
        for r, (_, _, join, share) in zip(self.reqs, requests):
            r["join"], r["share"], r["keep"] = join - 1, share, 0
        for _, _, _, share in requests:
            if share is not None:
                src = self.reqs[share[0]]
                src["keep"] = max(src["keep"], share[1])

    def _join(self, r):
        if r["share"] is None:
            return
        src, n = self.reqs[r["share"][0]], r["share"][1]
        head = (src["blocks"] or src["kept"])[:n]
        if src["fed"] < n * self.bs or len(head) < n:
            raise AssertionError("request %d shares %d blocks of request %d, which holds %d tokens"
                                 % (r["id"], n, src["id"], src["fed"]))
        r["blocks"] = head
        self.pinned.update(head)
        r["fed"] = r["start"] = n * self.bs

    def _release(self, r):
        r["kept"] = r["blocks"][:r["keep"]]
        self.pinned.update(r["kept"])
        self.free.extend(b for b in reversed(r["blocks"]) if b not in self.pinned)


def prefix_requests(vocab):
    """PrefixAgent requests for a block size of 4 and FORWARD chunks of 5:
    A (14 tokens, 3.5 blocks) decodes 6 tokens. B (A's first 8 tokens, then
    its own) joins at step 3 with A's first 2 blocks, C (A's first 12) at
    step 4 with A's first 3, both while A is live; A finishes at step 9
    (B at step 8), where D joins with A's first 2 blocks (in no live table
    then) and E, without a prefix, takes the blocks A and B freed; F joins
    at step 10 with a one-token suffix (a NEW row of one token), sharing
    A's first 2 blocks with D."""
    def tokens(n, k):
        return [(53 * k + 7 * j + 3) % vocab for j in range(n)]
    a = tokens(14, 1)
    return [(a, 6, 1, None),
            (a[:8] + tokens(6, 2), 4, 3, (0, 2)),
            (a[:12] + tokens(3, 3), 3, 4, (0, 3)),
            (a[:8] + tokens(5, 4), 3, 9, (0, 2)),
            (tokens(10, 5), 2, 9, None),
            (a[:8] + tokens(1, 6), 3, 10, (0, 2))]


# Protocol 3 refusals of cached prefixes, block size 4: PREFIX_LIVE is live
# (6 tokens in blocks 5 and 6, so block 5 is full and block 6 is not) when
# each FORWARD of PREFIX_REFUSALS [(tag, rows, the ERROR's text)] comes.
PREFIX_LIVE = (1, 3, 0, 6, [1, 2, 3, 4, 5, 6], [5, 6])
PREFIX_REFUSALS = [
    ("position not a multiple of the block size", [(2, 1, 2, 3, [1], [5])],
     "sequence 2 is NEW at position 2, not a multiple of the block size 4"),
    ("writes a block of a live table", [(2, 3, 4, 6, [5, 6], [5, 6])],
     "sequence 2 writes block 6 (tokens [4, 6)), which is also in the table of sequence 1"),
    ("table not covering position + T", [(2, 3, 4, 9, [5, 6, 7, 8, 9], [5, 8])],
     "sequence 2: its table of 2 blocks (8 tokens) does not cover position 4 + 5 tokens (3 blocks of 4)"),
    ("prefix block not full", [(2, 3, 8, 9, [9], [5, 6, 8])],
     "sequence 2: block 6 of its cached prefix (tokens [4, 8)) was never filled"),
    ("prefix block filled in the same FORWARD", [(3, 1, 0, 4, [1, 2, 3, 4], [9]), (4, 3, 4, 5, [1], [9, 10])],
     "sequence 4: block 9 of its cached prefix (tokens [0, 4)) was never filled"),
    ("two rows write one block", [(3, 3, 4, 5, [1], [5, 9]), (4, 3, 0, 1, [1], [9])],
     "sequence 3 writes block 9 (tokens [4, 5)), which is also in the table of sequence 4"),
]
