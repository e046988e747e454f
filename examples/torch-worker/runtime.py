"""Sequence state between FORWARDs over the paged KV pool: block tables,
the protocol v1 (full histories), v2 (deltas) and v3 (deltas with the
agent's blocks) bookkeeping, and the packing of a step's new tokens into
forward passes of at most --prefill-chunk tokens.

With v3 the agent hands out the blocks; with v1 and v2 the runtime takes
them from its own free list. Under v3 a block may be in several live
tables (a cached prefix: full blocks that a NEW row starting at position
p > 0 reads and never writes), but a block a row writes is in no other.
Every check here depends only on the FORWARD and on state every rank
updates identically, so all ranks accept or refuse a step together and
never leave a collective unmatched.
"""

import numpy as np
import torch

from model import Segment
from protocol import NEW, SAMPLE


class StepError(Exception):
    """A FORWARD this worker refuses; the message names the sequence."""


class Sequence:
    __slots__ = ("blocks", "length", "tokens")

    def __init__(self):
        self.blocks = []    # the block table: block j holds tokens [j*bs, (j+1)*bs)
        self.length = 0     # tokens the pool holds for it
        self.tokens = None  # v1 only: the history it holds


def blocks_for(tokens, block_size):
    return -(-tokens // block_size)


class Runtime:
    """The sequences of one agent connection, the model and its KV pool."""

    def __init__(self, model, prefill_chunk=512, log=None):
        if prefill_chunk < 1:
            raise ValueError("prefill chunk must be positive")
        self.model = model
        self.pool = model.pool
        if self.pool is None:
            raise ValueError("the model has no KV pool (allocate_pool)")
        self.bs = self.pool.block_size
        self.vocab = model.cfg.vocab
        self.chunk = prefill_chunk
        self.log = log or (lambda msg: None)
        self.reset()

    def reset(self):
        self.seqs = {}
        self.holders = {}  # block id -> the ids of the live sequences whose tables hold it
        # v3: the blocks whose last write reached their last slot, so a
        # cached prefix may read them. Freed blocks keep their contents.
        self.full = set()
        # v1/v2: the blocks the runtime hands out, lowest id first.
        self.free = list(range(self.pool.blocks - 1, -1, -1))

    def _release(self, seq_id, to_free_list):
        seq = self.seqs.pop(seq_id, None)
        if seq is None:
            return
        for b in seq.blocks:
            self._drop(b, seq_id)
        if to_free_list:
            self.free.extend(reversed(seq.blocks))

    def _hold(self, b, seq_id):
        self.holders.setdefault(b, set()).add(seq_id)

    def _drop(self, b, seq_id):
        ids = self.holders[b]
        ids.discard(seq_id)
        if not ids:
            del self.holders[b]

    def _check_tokens(self, seq_id, tokens):
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.vocab):
            bad = int(tokens[(tokens < 0) | (tokens >= self.vocab)][0])
            raise StepError("sequence %d: token %d is outside the vocab [0, %d)" % (seq_id, bad, self.vocab))

    def _check_row(self, i, seq_id, flags, allowed, tokens, seen):
        if seq_id in seen:
            raise StepError("sequence %d appears twice in one FORWARD" % seq_id)
        seen.add(seq_id)
        if flags & ~allowed:
            raise StepError("row %d (sequence %d): unknown flag bits 0x%x" % (i, seq_id, flags & ~allowed))
        if len(tokens) == 0:
            raise StepError("row %d (sequence %d) has no tokens" % (i, seq_id))
        self._check_tokens(seq_id, tokens)

    def _lookup(self, seq_id, flags, position, cached=False):
        """The v2/v3 NEW and position rules: -> the sequence (a new one for
        NEW). cached (v3): a NEW row may start at a multiple of the block
        size, its first `position` tokens a cached prefix."""
        known = self.seqs.get(seq_id)
        if flags & NEW:
            if known is not None:
                raise StepError("sequence %d is flagged NEW but the worker already holds it "
                                "(%d tokens)" % (seq_id, known.length))
            if not cached and position != 0:
                raise StepError("sequence %d is NEW but its position is %d, not 0" % (seq_id, position))
            if position % self.bs:
                raise StepError("sequence %d is NEW at position %d, not a multiple of the block size %d"
                                % (seq_id, position, self.bs))
            seq = Sequence()
            seq.length = position
            return seq
        if known is None:
            raise StepError("sequence %d is not flagged NEW but the worker does not hold it" % seq_id)
        if position != known.length:
            raise StepError("sequence %d: FORWARD says position %d, the worker's cache holds %d tokens"
                            % (seq_id, position, known.length))
        return known

    def _allocate(self, work):
        """v1/v2: grow every (id, sequence, new tokens) table from the free
        list to cover its new length, or refuse before taking any block."""
        need = []
        free = len(self.free)
        for seq_id, seq, tokens in work:
            total = seq.length + len(tokens)
            n = max(0, blocks_for(total, self.bs) - len(seq.blocks))
            if n > free:
                raise StepError("sequence %d does not fit the KV pool: %d tokens need %d more blocks of %d "
                                "tokens, %d of the pool's %d blocks are free"
                                % (seq_id, total, n, self.bs, free, self.pool.blocks))
            free -= n
            need.append(n)
        for (seq_id, seq, _), n in zip(work, need):
            for _ in range(n):
                b = self.free.pop()
                seq.blocks.append(b)
                self._hold(b, seq_id)

    def step_v3(self, finished, rows):
        """rows: [(seq id, flags, position, prompt length, tokens, [new block ids])].
        Returns (rank 0's logits of the SAMPLE rows [k, vocab] or None,
        their row indices)."""
        for seq_id in finished:
            self._release(seq_id, False)
        work, seen, granted = [], set(), {}
        for i, (seq_id, flags, position, _p, tokens, blocks) in enumerate(rows):
            self._check_row(i, seq_id, flags, NEW | SAMPLE, tokens, seen)
            seq = self._lookup(seq_id, flags, position, cached=True)
            table = seq.blocks + blocks
            self._check_table(seq_id, table, position, len(tokens))
            cached = position // self.bs if flags & NEW else 0  # blocks of a cached prefix
            self._check_prefix(seq_id, table, cached)
            for b in blocks:
                granted.setdefault(b, set()).add(seq_id)
            work.append((seq_id, seq, tokens, blocks, cached, bool(flags & SAMPLE)))
        for seq_id, seq, tokens, blocks, _, _ in work:
            self._check_writes(seq_id, seq.blocks + blocks, seq.length, len(tokens), granted)
        for seq_id, seq, tokens, blocks, cached, _ in work:
            # The blocks after a cached prefix are the row's own: not full until it fills them.
            self.full.difference_update(blocks[cached:])
            self._mark_full(seq.blocks + blocks, seq.length, seq.length + len(tokens))
            seq.blocks.extend(blocks)
            for b in blocks:
                self._hold(b, seq_id)
            self.seqs[seq_id] = seq
        return self._run([(seq, tokens, sample) for _, seq, tokens, _, _, sample in work])

    def _check_table(self, seq_id, table, position, t):
        """Every block id is in the pool, at most once in the table, and
        the table covers tokens [0, position + t)."""
        index = {}
        for j, b in enumerate(table):
            if b >= self.pool.blocks:
                raise StepError("sequence %d: block %d is outside the worker's %d blocks"
                                % (seq_id, b, self.pool.blocks))
            if b in index:
                raise StepError("sequence %d: block %d is twice in its table (at %d and %d)"
                                % (seq_id, b, index[b], j))
            index[b] = j
        need = blocks_for(position + t, self.bs)
        if len(table) < need:
            raise StepError("sequence %d: its table of %d blocks (%d tokens) does not cover position %d + %d tokens "
                            "(%d blocks of %d)" % (seq_id, len(table), len(table) * self.bs, position, t, need,
                                                  self.bs))

    def _check_prefix(self, seq_id, table, cached):
        """A NEW row's cached prefix, the first `cached` blocks of its
        table, is read and never written: each must have been filled."""
        for j in range(cached):
            if table[j] not in self.full:
                raise StepError("sequence %d: block %d of its cached prefix (tokens [%d, %d)) was never filled"
                                % (seq_id, table[j], j * self.bs, (j + 1) * self.bs))

    def _check_writes(self, seq_id, table, position, t, granted):
        """The blocks holding tokens [position, position + t), which this
        row writes, are in no other live table, counting this FORWARD's
        new blocks (granted: block -> ids), so no other row reads or
        writes them."""
        for j in range(position // self.bs, blocks_for(position + t, self.bs)):
            b = table[j]
            others = (self.holders.get(b, set()) | granted.get(b, set())) - {seq_id}
            if others:
                lo, hi = max(position, j * self.bs), min(position + t, (j + 1) * self.bs)
                raise StepError("sequence %d writes block %d (tokens [%d, %d)), which is also in the table of "
                                "sequence %d" % (seq_id, b, lo, hi, min(others)))

    def _mark_full(self, table, start, end):
        """Record which blocks tokens [start, end) leave full: a block is
        full when this write reaches its last slot, and no longer full
        when a write into it stops short of it."""
        for j in range(start // self.bs, blocks_for(end, self.bs)):
            if end >= (j + 1) * self.bs:
                self.full.add(table[j])
            else:
                self.full.discard(table[j])

    def step_v2(self, finished, rows):
        """rows: [(seq id, flags, position, prompt length, int array of tokens)].
        Returns rank 0's logits [len(rows), vocab] (None on other ranks)."""
        for seq_id in finished:
            self._release(seq_id, True)
        work, seen = [], set()
        for i, (seq_id, flags, position, _p, tokens) in enumerate(rows):
            self._check_row(i, seq_id, flags, NEW, tokens, seen)
            work.append((seq_id, self._lookup(seq_id, flags, position), tokens))
        self._allocate(work)
        for seq_id, seq, _ in work:
            self.seqs[seq_id] = seq
        return self._run([(seq, tokens, True) for _, seq, tokens in work])[0]

    def step_v1(self, rows):
        """rows: [(seq id, prompt length, int array of the whole history)].
        Ids absent from rows are freed; a known id whose history does not
        extend the tokens its cache holds is recomputed from scratch."""
        ids = [r[0] for r in rows]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise StepError("sequence %d appears twice in one FORWARD" % dup)
        keep = set(ids)
        for seq_id in [i for i in self.seqs if i not in keep]:
            self._release(seq_id, True)
        work = []
        for seq_id, _p, history in rows:
            if len(history) == 0:
                raise StepError("sequence %d has an empty history" % seq_id)
            self._check_tokens(seq_id, history)
            seq = self.seqs.get(seq_id)
            held = 0 if seq is None else len(seq.tokens)
            if seq is not None and not (len(history) > held and np.array_equal(history[:held], seq.tokens)):
                self.log("sequence %d: history does not extend the %d cached tokens; recomputing" % (seq_id, held))
                self._release(seq_id, True)
                seq, held = None, 0
            if seq is None:
                seq = Sequence()
                self.seqs[seq_id] = seq
            work.append((seq_id, seq, history[held:]))
        self._allocate(work)
        for (seq_id, seq, _), (_, _, history) in zip(work, rows):
            seq.tokens = history
        return self._run([(seq, tokens, True) for _, seq, tokens in work])[0]

    def _run(self, work):
        """Feed each (sequence, new tokens, sample) to the model in passes
        of at most `chunk` tokens (rows in order, a long row split across
        passes). Returns (the logits after the last token of each sampled
        row, or None on ranks without logits or when no row samples; the
        sampled rows' indices)."""
        pending = [torch.from_numpy(np.asarray(t, dtype=np.int64)) for _, t, _ in work]
        tables = [torch.tensor(seq.blocks, dtype=torch.long) for seq, _, _ in work]
        hidden = [None] * len(work)
        while True:
            budget, segs, rows = self.chunk, [], []
            for i, toks in enumerate(pending):
                if budget == 0:
                    break
                if toks.shape[0] == 0:
                    continue
                take = min(budget, toks.shape[0])
                seq = work[i][0]
                segs.append(Segment(tables[i], seq.length, toks[:take]))
                seq.length += take
                rows.append((i, take == toks.shape[0]))
                pending[i] = toks[take:]
                budget -= take
            if not segs:
                break
            out = self.model.forward(segs)
            for j, (i, done) in enumerate(rows):
                if done:
                    hidden[i] = out[j]
        sampled = [i for i, (_, _, sample) in enumerate(work) if sample]
        if not sampled:
            return None, sampled
        return self.model.logits(torch.stack([hidden[i] for i in sampled])), sampled
