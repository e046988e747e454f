"""Sequence state between FORWARDs: a KV cache per sequence id, the
protocol-v1 (full histories) and v2 (deltas) bookkeeping, and the packing of
a step's new tokens into forward passes of at most --prefill-chunk tokens.

Every check here depends only on the FORWARD and on state every rank
updates identically, so all ranks accept or refuse a step together and
never leave a collective unmatched.
"""

import numpy as np
import torch


class StepError(Exception):
    """A FORWARD this worker refuses; the message names the sequence."""


class Sequence:
    __slots__ = ("cache", "tokens")

    def __init__(self, cache):
        self.cache = cache
        self.tokens = None  # v1 only: the history the cache holds


class Runtime:
    """The sequences of one agent connection and the model they run on."""

    def __init__(self, model, prefill_chunk=512, log=None):
        if prefill_chunk < 1:
            raise ValueError("prefill chunk must be positive")
        self.model = model
        self.vocab = model.cfg.vocab
        self.chunk = prefill_chunk
        self.seqs = {}
        self.log = log or (lambda msg: None)

    def reset(self):
        self.seqs = {}

    def _check_tokens(self, seq_id, tokens):
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.vocab):
            bad = int(tokens[(tokens < 0) | (tokens >= self.vocab)][0])
            raise StepError("sequence %d: token %d is outside the vocab [0, %d)" % (seq_id, bad, self.vocab))

    def step_v2(self, finished, rows):
        """rows: [(seq id, flags, position, prompt length, int array of tokens)].
        Returns rank 0's logits [len(rows), vocab] (None on other ranks)."""
        for seq_id in finished:
            self.seqs.pop(seq_id, None)
        work, seen = [], set()
        for i, (seq_id, flags, position, _p, tokens) in enumerate(rows):
            if seq_id in seen:
                raise StepError("sequence %d appears twice in one FORWARD" % seq_id)
            seen.add(seq_id)
            if flags & ~1:
                raise StepError("row %d (sequence %d): unknown flag bits 0x%x" % (i, seq_id, flags & ~1))
            if len(tokens) == 0:
                raise StepError("row %d (sequence %d) has no tokens" % (i, seq_id))
            self._check_tokens(seq_id, tokens)
            known = self.seqs.get(seq_id)
            if flags & 1:
                if known is not None:
                    raise StepError("sequence %d is flagged NEW but the worker already holds it "
                                    "(%d tokens)" % (seq_id, known.cache.length))
                if position != 0:
                    raise StepError("sequence %d is NEW but its position is %d, not 0" % (seq_id, position))
                known = Sequence(self.model.new_cache())
            elif known is None:
                raise StepError("sequence %d is not flagged NEW but the worker does not hold it" % seq_id)
            elif position != known.cache.length:
                raise StepError("sequence %d: FORWARD says position %d, the worker's cache holds %d tokens"
                                % (seq_id, position, known.cache.length))
            work.append((seq_id, known, tokens))
        for seq_id, seq, _ in work:
            self.seqs[seq_id] = seq
        return self._run([(seq, tokens) for _, seq, tokens in work])

    def step_v1(self, rows):
        """rows: [(seq id, prompt length, int array of the whole history)].
        Ids absent from rows are freed; a known id whose history does not
        extend the tokens its cache holds is recomputed from scratch."""
        ids = [r[0] for r in rows]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise StepError("sequence %d appears twice in one FORWARD" % dup)
        keep = set(ids)
        self.seqs = {i: s for i, s in self.seqs.items() if i in keep}
        work = []
        for seq_id, _p, history in rows:
            if len(history) == 0:
                raise StepError("sequence %d has an empty history" % seq_id)
            self._check_tokens(seq_id, history)
            seq = self.seqs.get(seq_id)
            held = 0 if seq is None else len(seq.tokens)
            if seq is not None and not (len(history) > held and np.array_equal(history[:held], seq.tokens)):
                self.log("sequence %d: history does not extend the %d cached tokens; recomputing" % (seq_id, held))
                seq, held = None, 0
            if seq is None:
                seq = Sequence(self.model.new_cache())
                self.seqs[seq_id] = seq
            seq.tokens = history
            work.append((seq, history[held:]))
        return self._run(work)

    def _run(self, work):
        """Feed each (sequence, new tokens) to the model in passes of at
        most `chunk` tokens (rows in order, a long row split across passes);
        return the logits after each row's last token."""
        pending = [torch.from_numpy(np.asarray(t, dtype=np.int64)) for _, t in work]
        hidden = [None] * len(work)
        while True:
            budget, segs, rows = self.chunk, [], []
            for i, toks in enumerate(pending):
                if budget == 0:
                    break
                if toks.shape[0] == 0:
                    continue
                take = min(budget, toks.shape[0])
                segs.append((work[i][0].cache, toks[:take]))
                rows.append((i, take == toks.shape[0]))
                pending[i] = toks[take:]
                budget -= take
            if not segs:
                break
            out = self.model.forward(segs)
            for j, (i, done) in enumerate(rows):
                if done:
                    hidden[i] = out[j]
        return self.model.logits(torch.stack(hidden))
