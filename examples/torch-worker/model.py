"""A tensor-parallel Llama forward pass (transformers' LlamaForCausalLM
semantics, with Granite's multipliers) over a paged KV cache (KVPool).

Every rank holds its shard (see config.Layout) and runs the same
collectives in the same order: two all_reduce per layer per pass, one for
the embedding, and one gather of the logits to rank 0 (an all_gather when
every rank gets logits).
"""

import torch
import torch.nn.functional as F

from config import Layout


class Comm:
    """The collectives of one TP group; a no-op at world 1.

    logits_everywhere picks the collective of the logits: a gather to rank
    0 (False) or an all_gather (True). Every rank must hold the same value,
    or the collectives do not match: set it from agree_logits."""

    def __init__(self, world, reduce_dtype=None):
        self.world = world
        # gloo in torch 1.13 cannot reduce bfloat16: reduce in float32.
        self.reduce_dtype = reduce_dtype
        self.logits_everywhere = False

    def all_reduce(self, x):
        if self.world == 1:
            return x
        import torch.distributed as dist
        if self.reduce_dtype is not None and x.dtype != self.reduce_dtype:
            y = x.to(self.reduce_dtype)
            dist.all_reduce(y)
            return y.to(x.dtype)
        dist.all_reduce(x)
        return x

    def gather0(self, x, rank):
        """Rank 0 gets the list of every rank's (equal-shaped) x; others None."""
        if self.world == 1:
            return [x]
        import torch.distributed as dist
        parts = [torch.empty_like(x) for _ in range(self.world)] if rank == 0 else None
        dist.gather(x, parts, dst=0)
        return parts

    def gather_logits(self, x, rank):
        """The list of every rank's x on the ranks that get logits (rank 0,
        or every rank with logits_everywhere); None elsewhere."""
        if self.world == 1 or not self.logits_everywhere:
            return self.gather0(x, rank)
        import torch.distributed as dist
        parts = [torch.empty_like(x) for _ in range(self.world)]
        dist.all_gather(parts, x)
        return parts

    def agree_logits(self, rank, wants):
        """Decide with every rank which ranks get logits, from each rank's
        wish (HELLO's logits flag): all of them -> all_gather, rank 0 alone
        -> gather. Sets and returns logits_everywhere; raises ValueError, on
        every rank alike, for any other combination. A collective: every
        rank calls it at the same point."""
        if self.world == 1:
            self.logits_everywhere = False
            return False
        import torch.distributed as dist
        t = torch.tensor([int(bool(wants)), int(bool(wants) and rank == 0)], dtype=torch.int64)
        dist.all_reduce(t)
        n, rank0 = int(t[0]), int(t[1])
        if n == self.world:
            self.logits_everywhere = True
        elif n == 1 and rank0 == 1:
            self.logits_everywhere = False
        else:
            raise ValueError("%d of %d ranks are asked for logits (rank 0 %s); this worker serves rank 0 "
                             "alone or every rank" % (n, self.world, "among them" if rank0 else "not"))
        return self.logits_everywhere


class Linear:
    """y = x @ weight.T. float32 goes through oneDNN (mkldnn) when enabled:
    Debian's torch links the generic reference BLAS, ~10x slower. oneDNN
    is itself ~10x slower on a weight of many thousand rows than on the
    same rows in blocks of BLOCK (measured with torch 1.13), hence blocks."""

    BLOCK = 2048

    def __init__(self, weight, mkldnn):
        self.mkldnn = mkldnn and weight.dtype == torch.float32 and weight.numel() > 0
        if self.mkldnn:
            self.blocks = [b.contiguous().to_mkldnn() for b in weight.split(self.BLOCK)]
        else:
            self.weight = weight

    def __call__(self, x):
        if not self.mkldnn:
            return F.linear(x, self.weight)
        xm = x.contiguous().to_mkldnn()
        ys = [torch._C._nn.mkldnn_linear(xm, b, None).to_dense() for b in self.blocks]
        return ys[0] if len(ys) == 1 else torch.cat(ys, dim=1)


class LayerWeights:
    __slots__ = ("ln1", "qkv", "o", "ln2", "gate_up", "down")


def _layer_weights(ckpt, cfg, lay, i, dtype, mkldnn):
    """Read layer i's shard: q/k/v and gate/up by output rows, o and down
    by input columns."""
    p = "model.layers.%d." % i
    hd, H, K, D = cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.hidden
    q = ckpt.read(p + "self_attn.q_proj.weight", (H * hd, D), rows=(lay.head0 * hd, (lay.head0 + lay.heads) * hd))
    kv_rows = (lay.kv0 * hd, (lay.kv0 + lay.kv_heads) * hd)
    k = ckpt.read(p + "self_attn.k_proj.weight", (K * hd, D), rows=kv_rows)
    v = ckpt.read(p + "self_attn.v_proj.weight", (K * hd, D), rows=kv_rows)
    w = LayerWeights()
    w.qkv = Linear(torch.cat([q.to(dtype), k.to(dtype), v.to(dtype)]), mkldnn)
    w.o = Linear(ckpt.read(p + "self_attn.o_proj.weight", (D, H * hd),
                           cols=(lay.head0 * hd, (lay.head0 + lay.heads) * hd)).to(dtype), mkldnn)
    mlp_rows = (lay.inter0, lay.inter0 + lay.inter)
    I = cfg.intermediate
    gate = ckpt.read(p + "mlp.gate_proj.weight", (I, D), rows=mlp_rows)
    up = ckpt.read(p + "mlp.up_proj.weight", (I, D), rows=mlp_rows)
    w.gate_up = Linear(torch.cat([gate.to(dtype), up.to(dtype)]), mkldnn)
    w.down = Linear(ckpt.read(p + "mlp.down_proj.weight", (D, I), cols=mlp_rows).to(dtype), mkldnn)
    w.ln1 = ckpt.read(p + "input_layernorm.weight", (D,)).to(dtype)
    w.ln2 = ckpt.read(p + "post_attention_layernorm.weight", (D,)).to(dtype)
    return w


def _vocab_shard(ckpt, cfg, lay, name, dtype):
    return ckpt.read(name, (cfg.vocab, cfg.hidden), rows=(lay.vocab0, lay.vocab1)).to(dtype)


class Rope:
    """cos/sin tables of the Hugging Face rotate-half RoPE, grown on demand."""

    def __init__(self, head_dim, theta):
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.cos = self.sin = torch.empty(0, head_dim)

    def tables(self, positions, dtype):
        need = int(positions.max()) + 1
        if need > self.cos.shape[0]:
            n = max(need, 2 * self.cos.shape[0], 256)
            freqs = torch.outer(torch.arange(n, dtype=torch.float32), self.inv_freq)
            emb = torch.cat([freqs, freqs], dim=-1)
            self.cos, self.sin = emb.cos(), emb.sin()
        return self.cos[positions].to(dtype), self.sin[positions].to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rms_norm(x, weight, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class KVPool:
    """This rank's paged KV cache: for every layer, K and V each
    [kv_heads, blocks * block_size, head_dim]; slot s of KV head h is
    [h, s], and block b holds slots [b * block_size, (b + 1) * block_size).
    A block's keys of one head are contiguous (block_size x head_dim), so a
    block table gathers into [kv_heads, len(table) * block_size, head_dim],
    the layout attention multiplies, without a transpose. Allocated and
    zero-filled once, at start: the memory is committed then and stays flat."""

    def __init__(self, layers, kv_heads, head_dim, dtype, blocks, block_size):
        if blocks < 1 or block_size < 1:
            raise ValueError("a KV pool needs blocks >= 1 and block size >= 1, got %d and %d" % (blocks, block_size))
        self.blocks, self.block_size = blocks, block_size
        shape = (kv_heads, blocks * block_size, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def data_ptrs(self):
        return [t.data_ptr() for t in self.k + self.v]

    def gather(self, pool, blocks):
        """pool (one layer's K or V) at the blocks (LongTensor) in order:
        [kv_heads, len(blocks) * block_size, head_dim]."""
        kvh, _, hd = pool.shape
        return pool.view(kvh, self.blocks, self.block_size, hd).index_select(1, blocks).view(kvh, -1, hd)


def block_bytes(cfg, kv_heads, dtype, block_size):
    """Bytes of one KV block on a rank holding kv_heads: K and V, every layer."""
    elem = torch.empty(0, dtype=dtype).element_size()
    return cfg.layers * 2 * kv_heads * block_size * cfg.head_dim * elem


def slots(table, start, end, block_size):
    """The pool slots of tokens [start, end) of a sequence with this block
    table (LongTensor): table[i // block_size] * block_size + i % block_size."""
    i = torch.arange(start, end)
    return table[i // block_size] * block_size + i % block_size


class Segment:
    """One sequence's tokens in a forward pass: tokens (LongTensor) at
    positions [start, start + len(tokens)), over the sequence's block table
    (LongTensor of block ids, covering at least start + len(tokens) tokens)."""

    __slots__ = ("table", "start", "tokens")

    def __init__(self, table, start, tokens):
        self.table, self.start, self.tokens = table, start, tokens


class Plan:
    """The index tensors of one forward pass, shared by every layer.

    write: the pool slot of every new token, in pass order. Decode rows
    (one new token) attend together: dec_rows are their token indices,
    dec_blocks their tables padded with block 0 to the longest (flattened,
    rows after one another), dec_mask True at the padded key positions
    [rows, 1, padded length]. Each other segment (a prompt chunk) attends
    alone: prefill holds (first token index, tokens, start, its blocks)."""

    def __init__(self, segments, block_size):
        self.bs = block_size
        self.write = torch.cat([slots(s.table, s.start, s.start + len(s.tokens), block_size) for s in segments])
        offsets = [0]
        for s in segments:
            offsets.append(offsets[-1] + len(s.tokens))
        self.prefill = [(offsets[j], len(s.tokens), s.start, s.table[:self._blocks(s.start + len(s.tokens))])
                        for j, s in enumerate(segments) if len(s.tokens) > 1]
        decode = [(offsets[j], s) for j, s in enumerate(segments) if len(s.tokens) == 1]
        self.dec_rows = None
        if decode:
            self._decode(decode)

    def _blocks(self, tokens):
        return -(-tokens // self.bs)

    def _decode(self, decode):
        """decode: [(token index, segment)] of the one-token segments."""
        lengths = [s.start + 1 for _, s in decode]
        tables = torch.zeros(len(decode), self._blocks(max(lengths)), dtype=torch.long)
        for r, (_, s) in enumerate(decode):
            n = self._blocks(lengths[r])
            tables[r, :n] = s.table[:n]
        self.dec_rows = torch.tensor([off for off, _ in decode])
        self.dec_blocks = tables.view(-1)
        keys = torch.arange(tables.shape[1] * self.bs)
        self.dec_mask = (keys >= torch.tensor(lengths)[:, None]).unsqueeze(1)


class TPModel:
    """This rank's shard of the model and its forward pass."""

    def __init__(self, cfg, ckpt, rank, world, dtype=torch.float32, comm=None, mkldnn=None):
        self.cfg, self.dtype, self.rank = cfg, dtype, rank
        self.lay = lay = Layout(cfg, rank, world)
        self.comm = comm or Comm(world)
        if mkldnn is None:
            mkldnn = torch.backends.mkldnn.is_available()
        self.layers = [_layer_weights(ckpt, cfg, lay, i, dtype, mkldnn) for i in range(cfg.layers)]
        self.embed = _vocab_shard(ckpt, cfg, lay, "model.embed_tokens.weight", dtype)
        if cfg.tie:
            self.lm_head = Linear(self.embed, mkldnn)
        else:
            self.lm_head = Linear(_vocab_shard(ckpt, cfg, lay, "lm_head.weight", dtype), mkldnn)
        self.norm = ckpt.read("model.norm.weight", (cfg.hidden,)).to(dtype)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)
        self.q_size = lay.heads * cfg.head_dim
        self.kv_size = lay.kv_heads * cfg.head_dim
        self.pool = None

    def allocate_pool(self, blocks, block_size):
        """The KV pool every forward pass reads and writes; allocated once."""
        self.pool = KVPool(self.cfg.layers, self.lay.kv_heads, self.cfg.head_dim, self.dtype, blocks, block_size)
        return self.pool

    def embed_tokens(self, ids):
        lay = self.lay
        if lay.world == 1:
            x = F.embedding(ids, self.embed)
        else:
            inside = (ids >= lay.vocab0) & (ids < lay.vocab1)
            local = torch.where(inside, ids - lay.vocab0, torch.zeros_like(ids))
            if self.embed.shape[0] == 0:
                x = torch.zeros(ids.shape[0], self.cfg.hidden, dtype=self.dtype)
            else:
                x = F.embedding(local, self.embed) * inside.unsqueeze(1).to(self.dtype)
            x = self.comm.all_reduce(x)
        if self.cfg.embedding_multiplier != 1.0:
            x = x * self.cfg.embedding_multiplier
        return x

    def forward(self, segments):
        """One pass over segments [Segment]: their new tokens' keys and
        values go to the pool at their slots. Returns the final-normed
        hidden state after each segment's last token, [len(segments), hidden]."""
        lengths = [len(s.tokens) for s in segments]
        ids = torch.cat([s.tokens for s in segments])
        positions = torch.cat([torch.arange(s.start, s.start + n) for s, n in zip(segments, lengths)])
        plan = Plan(segments, self.pool.block_size)
        cos, sin = self.rope.tables(positions, self.dtype)
        x = self.embed_tokens(ids)
        for i, w in enumerate(self.layers):
            x = self._layer(i, w, x, cos, sin, plan)
        last = torch.tensor(lengths).cumsum(0) - 1
        return rms_norm(x[last], self.norm, self.cfg.eps)

    def _layer(self, i, w, x, cos, sin, plan):
        cfg = self.cfg
        h = rms_norm(x, w.ln1, cfg.eps)
        qkv = w.qkv(h)
        hd = cfg.head_dim
        q = qkv[:, :self.q_size].reshape(-1, self.lay.heads, hd)
        k = qkv[:, self.q_size:self.q_size + self.kv_size].reshape(-1, self.lay.kv_heads, hd)
        v = qkv[:, self.q_size + self.kv_size:].reshape(-1, self.lay.kv_heads, hd)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        attn = self._attention(i, q, k, v, plan)
        out = self.comm.all_reduce(w.o(attn))
        x = x + out * cfg.residual_multiplier if cfg.residual_multiplier != 1.0 else x + out
        h = rms_norm(x, w.ln2, cfg.eps)
        gate, up = w.gate_up(h).split(self.lay.inter, dim=-1)
        out = self.comm.all_reduce(w.down(F.silu(gate) * up))
        return x + out * cfg.residual_multiplier if cfg.residual_multiplier != 1.0 else x + out

    def _attention(self, i, q, k, v, plan):
        """Write the new keys/values to layer i's pool, then causal
        attention of every segment over its slots; [tokens, heads*hd]."""
        kp, vp = self.pool.k[i], self.pool.v[i]
        kp.index_copy_(1, plan.write, k.transpose(0, 1))
        vp.index_copy_(1, plan.write, v.transpose(0, 1))
        out = torch.empty(q.shape[0], self.q_size, dtype=q.dtype)
        if plan.dec_rows is not None:
            out[plan.dec_rows] = self._decode_attention(q[plan.dec_rows], kp, vp, plan)
        for off, t, start, blocks in plan.prefill:
            out[off:off + t] = self._prefill_attention(q[off:off + t], kp, vp, start, blocks)
        return out

    def _decode_attention(self, q, kp, vp, plan):
        """Every decode row at once over its padded table: q [rows, heads, hd]."""
        kvh, hd, rows = self.lay.kv_heads, self.cfg.head_dim, q.shape[0]
        keys = self.pool.gather(kp, plan.dec_blocks).view(kvh, rows, -1, hd)   # [kvh, rows, L, hd]
        values = self.pool.gather(vp, plan.dec_blocks).view(kvh, rows, -1, hd)
        # Local query head h uses local KV head h // group (HF repeat_kv).
        qs = q.view(rows, kvh, -1, hd).transpose(0, 1)                         # [kvh, rows, group, hd]
        scores = (qs @ keys.transpose(-1, -2)).float() * self.cfg.attention_scale
        scores = scores.masked_fill(plan.dec_mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        o = probs @ values                                                      # [kvh, rows, group, hd]
        return o.transpose(0, 1).reshape(rows, self.q_size)

    def _prefill_attention(self, q, kp, vp, start, blocks):
        """t new queries at positions [start, start + t) over the slots
        [0, start + t) of the table blocks: query j sees keys <= start + j."""
        kvh, hd, t = self.lay.kv_heads, self.cfg.head_dim, q.shape[0]
        n = start + t
        keys = self.pool.gather(kp, blocks)[:, :n].unsqueeze(1)                # [kvh, 1, n, hd]
        values = self.pool.gather(vp, blocks)[:, :n].unsqueeze(1)
        qs = q.transpose(0, 1).reshape(kvh, -1, t, hd)                          # [kvh, group, t, hd]
        scores = (qs @ keys.transpose(-1, -2)).float() * self.cfg.attention_scale
        mask = torch.ones(t, n, dtype=torch.bool).triu(start + 1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        o = probs @ values                                                      # [kvh, group, t, hd]
        return o.reshape(self.lay.heads, t, hd).transpose(0, 1).reshape(t, self.q_size)

    def logits(self, hidden):
        """Vocab-parallel lm_head; the full float32 logits [rows, vocab] on
        rank 0 (on every rank with comm.logits_everywhere), None elsewhere."""
        lay = self.lay
        local = self.lm_head(hidden).float()
        if local.shape[1] < lay.vocab_chunk:
            local = F.pad(local, (0, lay.vocab_chunk - local.shape[1]))
        parts = self.comm.gather_logits(local.contiguous(), self.rank)
        if parts is None:
            return None
        logits = torch.cat(parts, dim=1)[:, :self.cfg.vocab]
        if self.cfg.logits_scaling != 1.0:
            logits = logits / self.cfg.logits_scaling
        return logits
