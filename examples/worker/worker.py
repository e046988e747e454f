#!/usr/bin/env python3
"""Reference tpcoord model worker, standard library only.

It speaks the worker protocol of docs/worker-protocol.md and runs the same
synthetic model as tpcoord's built-in executor (rank.Synthetic in Go), bit
for bit, so a job run with this worker samples exactly the tokens of a job
run with --executor synthetic.

    python3 worker.py --socket PATH   # connect to an agent (--worker-cmd)
    python3 worker.py --listen PATH   # wait for agents (--worker-socket)

Without --socket or --listen it connects to $TPCOORD_WORKER_SOCKET.
It speaks protocol versions 1 to 3 (--max-version 1 or 2 stands in for a
worker of that version). A real model runner replaces Model with its
runtime and Held with its KV caches: keep the framing, the handshake, the
delta bookkeeping (StepsV2; StepsV3 with block tables) and the
shared-memory layout.
"""

import argparse
import array
import math
import mmap
import os
import socket
import struct
import sys
import time

VERSION = 3  # the highest protocol version spoken; 1 and 2 are spoken too

HELLO, HELLO_OK, FORWARD, FORWARD_OK, ERROR, SHUTDOWN = 1, 2, 3, 4, 5, 6

FLOAT32, FLOAT16, BFLOAT16 = 1, 2, 3
DTYPE_NAMES = {"float32": FLOAT32, "f32": FLOAT32, "float16": FLOAT16, "f16": FLOAT16,
               "bfloat16": BFLOAT16, "bf16": BFLOAT16}
DTYPE_SIZE = {FLOAT32: 4, FLOAT16: 2, BFLOAT16: 2}

LITTLE, BIG = 1, 2
NATIVE_ORDER = LITTLE if sys.byteorder == "little" else BIG

HEADER = struct.Struct("<IHH")          # body length, type, reserved (0)
HELLO_FIXED = struct.Struct("<IIIIIiBBBBQH")  # 38 bytes, then the shm path
HELLO_OK_FIXED = struct.Struct("<IIIIIiBBHIH")  # 34 bytes, then the name
HELLO_OK_KV = struct.Struct("<III")     # v3, after the name: block size, blocks, max model len
FORWARD_HEAD = struct.Struct("<QI")     # v1: step, rows
ROW_HEAD = struct.Struct("<QII")        # v1: seq id, prompt length, output length
FORWARD2_HEAD = struct.Struct("<QII")   # v2: step, rows, finished ids
ROW2_HEAD = struct.Struct("<QIIII")     # v2: seq id, flags, position, prompt length, tokens
ROW3_HEAD = struct.Struct("<QIIIII")    # v3: the same, then new blocks
FLAG_NEW, FLAG_SAMPLE = 1, 2
U32LE = struct.Struct("<I")
U64 = struct.Struct("<Q")
FORWARD_OK_BODY = struct.Struct("<QI")  # step, rows written
TOKEN = struct.Struct("<i")

M64 = (1 << 64) - 1
F32 = struct.Struct("=f")
U32 = struct.Struct("=I")


def mix(z):
    """SplitMix64's finaliser, as rank.mix in Go (uint64 arithmetic)."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def to_f32(x):
    """Round a Python float to the nearest float32, as Go's float32(x)."""
    return F32.unpack(F32.pack(x))[0]


def bf16_bits(x):
    """float32 value -> bfloat16 bits, ties to even (f16.Float32ToBFloat16 in Go)."""
    b = U32.unpack(F32.pack(x))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFFFFFF
    return b >> 16


class Model:
    """The synthetic model of rank.Synthetic (rank/executor.go)."""

    LIFTS = (6.0, 5.0, 4.0, 3.0)

    def __init__(self, vocab, eos, dtype):
        self.vocab, self.eos, self.dtype = vocab, eos, dtype
        self.size = DTYPE_SIZE[dtype]
        # Token i has popularity rank mix(i) % vocab and logit
        # -1.1*log1p(rank), computed in float64 and stored as float32
        # (array('f') rounds to nearest, as Go's float32 conversion).
        base = array.array("f", (-1.1 * math.log1p(mix(i) % vocab) for i in range(vocab)))
        if dtype == FLOAT32:
            self.base = base.tobytes()
            self.fmt = struct.Struct("=f")
            self.encode = lambda x: x
        elif dtype == FLOAT16:
            # struct's 'e' rounds the (exact) float32 value to binary16,
            # ties to even, as f16.Float32ToHalf in Go.
            self.base = struct.pack("=%de" % vocab, *base)
            self.fmt = struct.Struct("=e")
            self.encode = lambda x: x
        else:
            self.base = struct.pack("=%dH" % vocab, *(bf16_bits(x) for x in base))
            self.fmt = struct.Struct("=H")
            self.encode = bf16_bits
        self.lifts = [self.encode(to_f32(v)) for v in self.LIFTS]

    @staticmethod
    def prompt_hash(prompt):
        """The hash of a prompt that sets where EOS overtakes (8 + h % 40)."""
        ph = 0
        for t in prompt:
            ph = mix(ph ^ (t & 0xFFFFFFFF))
        return ph

    def write_row(self, mm, offset, ph, last, n_output):
        """Write one row's logits at byte offset of mm (rank.Synthetic.Row):
        ph is the hash of its prompt, last its last token."""
        v, size = self.vocab, self.size
        mm[offset:offset + v * size] = self.base
        last &= 0xFFFFFFFF
        for j, lift in enumerate(self.lifts):
            self.fmt.pack_into(mm, offset + size * (mix(last * 8 + j + 1) % v), lift)
        if self.eos >= 0:
            l = 8 + ph % 40
            # float32 arithmetic in Go; every operand here is exact.
            value = to_f32(self.LIFTS[0] + 0.5 + 0.75 * (float(n_output) - l))
            self.fmt.pack_into(mm, offset + size * self.eos, self.encode(value))


class ProtocolError(Exception):
    pass


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray(1 << 16)

    def recv_exact(self, n):
        if len(self.buf) < n:
            self.buf = bytearray(n)
        view = memoryview(self.buf)[:n]
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                if got == 0:
                    raise EOFError
                raise ProtocolError("connection closed mid-frame")
            got += k
        return view

    def read_frame(self):
        length, typ, reserved = HEADER.unpack(self.recv_exact(HEADER.size))
        if reserved != 0 or not HELLO <= typ <= SHUTDOWN:
            raise ProtocolError("bad frame header: type %d, reserved %d" % (typ, reserved))
        if length > 256 << 20:
            raise ProtocolError("frame of %d bytes is too large" % length)
        return typ, self.recv_exact(length) if length else memoryview(b"")

    def send(self, typ, body=b""):
        self.sock.sendall(HEADER.pack(len(body), typ, 0) + body)

    def send_error(self, message):
        try:
            self.send(ERROR, message.encode("utf-8", "replace")[:65536])
        except OSError:
            pass


def log(msg):
    print("worker.py[%d]: %s" % (os.getpid(), msg), file=sys.stderr, flush=True)


class Steps:
    """What a connection does with FORWARD bodies: decode the rows, write
    their logits (on the rank with logits) and return (step, rows)."""

    def __init__(self, model, mm, max_batch, row_bytes, block_size=0, blocks=0):
        self.model, self.mm = model, mm
        self.max_batch, self.row_bytes = max_batch, row_bytes
        self.block_size, self.blocks = block_size, blocks  # version 3


class StepsV1(Steps):
    """Version 1: every row carries its whole history; nothing is held but
    a cache of prompt hashes."""

    def __init__(self, *a):
        super().__init__(*a)
        self.prompt_hash = {}  # seq id -> hash of its prompt

    def forward(self, body):
        if len(body) < FORWARD_HEAD.size:
            raise ProtocolError("FORWARD of %d bytes" % len(body))
        step, n = FORWARD_HEAD.unpack_from(body, 0)
        if n > self.max_batch:
            raise ProtocolError("step %d has %d rows, max batch is %d" % (step, n, self.max_batch))
        off = FORWARD_HEAD.size
        ids = set()
        for i in range(n):
            if off + ROW_HEAD.size > len(body):
                raise ProtocolError("row %d of step %d is truncated" % (i, step))
            seq_id, np_, no = ROW_HEAD.unpack_from(body, off)
            off += ROW_HEAD.size
            ntok = np_ + no
            if off + 4 * ntok > len(body):
                raise ProtocolError("row %d of step %d is truncated" % (i, step))
            ids.add(seq_id)
            if self.model is not None:
                # The synthetic model needs the last token and (once per
                # sequence) the hash of the prompt.
                last = TOKEN.unpack_from(body, off + 4 * (ntok - 1))[0] if ntok else -1
                ph = self.prompt_hash.get(seq_id)
                if ph is None and self.model.eos >= 0:
                    ph = Model.prompt_hash(struct.unpack_from("<%di" % np_, body, off))
                    self.prompt_hash[seq_id] = ph
                self.model.write_row(self.mm, i * self.row_bytes, ph or 0, last, no)
            off += 4 * ntok
        if off != len(body):
            raise ProtocolError("FORWARD of step %d has %d trailing bytes" % (step, len(body) - off))
        if len(self.prompt_hash) > 4 * max(len(ids), 64):
            self.prompt_hash = {i: h for i, h in self.prompt_hash.items() if i in ids}
        return step, n


class Held:
    """A sequence a version 2 worker holds (a real runtime: its KV cache)."""
    __slots__ = ("prompt_len", "length", "last", "ph")

    def __init__(self, prompt_len, length, last, ph):
        self.prompt_len, self.length, self.last, self.ph = prompt_len, length, last, ph


class StepsV2(Steps):
    """Version 2: deltas. Finished ids are freed first; a NEW row brings its
    whole context, a known row the tokens appended since the last FORWARD,
    at the position equal to the number of tokens held."""

    def __init__(self, *a):
        super().__init__(*a)
        self.held = {}  # seq id -> Held

    def forward(self, body):
        if len(body) < FORWARD2_HEAD.size:
            raise ProtocolError("FORWARD of %d bytes" % len(body))
        step, n, nf = FORWARD2_HEAD.unpack_from(body, 0)
        if n == 0 or n > self.max_batch:
            raise ProtocolError("step %d has %d rows, max batch is %d (and at least 1)" % (step, n, self.max_batch))
        off = FORWARD2_HEAD.size
        if off + 8 * nf + (ROW2_HEAD.size + 4) * n > len(body):
            raise ProtocolError("FORWARD claims %d finished ids and %d rows in %d bytes" % (nf, n, len(body)))
        for k in range(nf):
            self.held.pop(U64.unpack_from(body, off + 8 * k)[0], None)
        off += 8 * nf
        for i in range(n):
            off = self.row(body, off, step, i)
        if off != len(body):
            raise ProtocolError("FORWARD of step %d has %d trailing bytes" % (step, len(body) - off))
        if len(self.held) > n:
            raise ProtocolError("step %d: this worker holds %d sequences, the batch has %d rows: "
                                "the FORWARD does not finish the sequences that left" % (step, len(self.held), n))
        return step, n

    def row(self, body, off, step, i):
        """Apply row i at off, write its logits, return the offset after it."""
        if off + ROW2_HEAD.size > len(body):
            raise ProtocolError("row %d of step %d is truncated" % (i, step))
        seq_id, flags, pos, np_, nt = ROW2_HEAD.unpack_from(body, off)
        off += ROW2_HEAD.size
        where = "step %d: row %d: sequence %d" % (step, i, seq_id)
        if flags & ~FLAG_NEW:
            raise ProtocolError("%s: unknown flag bits %#x" % (where, flags & ~FLAG_NEW))
        if nt == 0 or off + 4 * nt > len(body):
            raise ProtocolError("%s: %d tokens in %d bytes (at least 1)" % (where, nt, len(body) - off))
        last = TOKEN.unpack_from(body, off + 4 * (nt - 1))[0]
        seq = self.held.get(seq_id)
        if flags & FLAG_NEW:
            if seq is not None:
                raise ProtocolError("%s is flagged NEW but this worker already holds it" % where)
            if pos != 0 or np_ > nt:
                raise ProtocolError("%s: NEW at position %d with a %d-token prompt in %d tokens" % (where, pos, np_, nt))
            ph = 0
            if self.model is not None and self.model.eos >= 0:
                ph = Model.prompt_hash(struct.unpack_from("<%di" % np_, body, off))
            seq = self.held[seq_id] = Held(np_, nt, last, ph)
        elif seq is None:
            raise ProtocolError("%s is not flagged NEW but this worker does not hold it" % where)
        elif pos != seq.length:
            raise ProtocolError("%s continues at position %d, this worker holds %d of its tokens" % (where, pos, seq.length))
        else:
            seq.length += nt
            seq.last = last
        if self.model is not None:
            self.model.write_row(self.mm, i * self.row_bytes, seq.ph, seq.last, seq.length - seq.prompt_len)
        return off + 4 * nt


class Paged:
    """A sequence a version 3 worker holds: its length (its cached prefix
    and every token sent) and block table; without a pool also what the
    synthetic model needs of its tokens (the prompt's hash, the last one).
    With a pool its tokens are in StepsV3.kv, at slot
    table[i // block_size] * block_size + i % block_size for token i
    (where a real runtime writes token i's K and V)."""
    __slots__ = ("prompt_len", "length", "last", "ph", "table")

    def __init__(self, prompt_len, length):
        self.prompt_len, self.length, self.last, self.ph, self.table = prompt_len, length, -1, 0, []


class Row3:
    """A version 3 row between joining its sequence and being fed."""
    __slots__ = ("seq", "seq_id", "sample", "pos", "prompt_len", "nt", "tok_off", "where")

    def __init__(self, seq, seq_id, sample, pos, prompt_len, nt, tok_off, where):
        self.seq, self.seq_id, self.sample, self.pos = seq, seq_id, sample, pos
        self.prompt_len, self.nt, self.tok_off, self.where = prompt_len, nt, tok_off, where


class StepsV3(Steps):
    """Version 3: deltas with block tables and chunked prefill. A row may
    feed only part of its prompt (no SAMPLE flag: no logits wanted); its B
    new blocks join its table, which must then cover every token it has.
    A NEW row may start after a cached prefix of whole blocks, the first
    blocks of its table, which it reads and never writes. A block may be in
    several live tables, but a block a row writes is in no other; finished
    ids free their tables first, so a block may pass to another sequence
    within one FORWARD. With a pool (--kv-blocks > 0) the tokens written at
    each slot are this worker's "KV": a sampled row's logits come from the
    history read back through its table, and reading a slot never written
    is an error."""

    def __init__(self, *a):
        super().__init__(*a)
        self.held = {}  # seq id -> Paged
        self.refs = {}  # block id -> live tables holding it
        self.kv = {}    # block id -> array('i'): its slots [0, len) written since the pool started

    def free(self, seq_id):
        seq = self.held.pop(seq_id, None)
        if seq is not None:
            for b in seq.table:
                self.refs[b] -= 1
                if not self.refs[b]:
                    del self.refs[b]

    def forward(self, body):
        """As a forward pass: free the finished ids, join every row to its
        sequence (tables as they are after the whole FORWARD), write every
        row's tokens, then read back and sample each row."""
        if len(body) < FORWARD2_HEAD.size:
            raise ProtocolError("FORWARD of %d bytes" % len(body))
        step, n, nf = FORWARD2_HEAD.unpack_from(body, 0)
        if n == 0 or n > self.max_batch:
            raise ProtocolError("step %d has %d rows, max batch is %d (and at least 1)" % (step, n, self.max_batch))
        off = FORWARD2_HEAD.size
        if off + 8 * nf + (ROW3_HEAD.size + 4) * n > len(body):
            raise ProtocolError("FORWARD claims %d finished ids and %d rows in %d bytes" % (nf, n, len(body)))
        for k in range(nf):
            self.free(U64.unpack_from(body, off + 8 * k)[0])
        off += 8 * nf
        rows = []
        for i in range(n):
            row, off = self.join(body, off, step, i)
            rows.append(row)
        if off != len(body):
            raise ProtocolError("FORWARD of step %d has %d trailing bytes" % (step, len(body) - off))
        if len(self.held) > n:
            raise ProtocolError("step %d: this worker holds %d sequences, the batch has %d rows: "
                                "the FORWARD does not finish the sequences that left" % (step, len(self.held), n))
        if self.blocks:
            for row in rows:
                self.write(body, row)
        for i, row in enumerate(rows):
            self.feed(body, row, i)
        return step, n

    def join(self, body, off, step, i):
        """Check row i at off against what is held and append its blocks;
        return it and the offset after it."""
        if off + ROW3_HEAD.size > len(body):
            raise ProtocolError("row %d of step %d is truncated" % (i, step))
        seq_id, flags, pos, np_, nt, nb = ROW3_HEAD.unpack_from(body, off)
        off += ROW3_HEAD.size
        where = "step %d: row %d: sequence %d" % (step, i, seq_id)
        if flags & ~(FLAG_NEW | FLAG_SAMPLE):
            raise ProtocolError("%s: unknown flag bits %#x" % (where, flags & ~(FLAG_NEW | FLAG_SAMPLE)))
        if nt == 0:
            raise ProtocolError("%s: no tokens (T = 0)" % where)
        if off + 4 * (nt + nb) > len(body):
            raise ProtocolError("%s: %d tokens and %d blocks in %d bytes" % (where, nt, nb, len(body) - off))
        sample = flags & FLAG_SAMPLE
        if sample and np_ > pos + nt:
            raise ProtocolError("%s: sampled with a %d-token prompt in %d tokens" % (where, np_, pos + nt))
        seq = self.held.get(seq_id)
        if flags & FLAG_NEW:
            if seq is not None:
                raise ProtocolError("%s is flagged NEW but this worker already holds it" % where)
            self.check_prefix(pos, where)
            seq = self.held[seq_id] = Paged(np_, pos)
        elif seq is None:
            raise ProtocolError("%s is not flagged NEW but this worker does not hold it" % where)
        elif pos != seq.length:
            raise ProtocolError("%s continues at position %d, this worker holds %d of its tokens" % (where, pos, seq.length))
        self.grow(seq, seq_id, struct.unpack_from("<%dI" % nb, body, off + 4 * nt), pos + nt, where)
        seq.length += nt
        return Row3(seq, seq_id, sample, pos, np_, nt, off, where), off + 4 * (nt + nb)

    def check_prefix(self, pos, where):
        """A NEW row starts at 0 or after a cached prefix of whole blocks."""
        if pos == 0:
            return
        if not self.blocks:
            raise ProtocolError("%s: NEW at position %d, and this worker keeps no paged cache (0 blocks) "
                                "to hold a cached prefix" % (where, pos))
        if pos % self.block_size:
            raise ProtocolError("%s: NEW at position %d, not a multiple of the block size %d" % (where, pos, self.block_size))

    def grow(self, seq, seq_id, new_blocks, end, where):
        """Append new_blocks to seq's table; it must then cover end tokens.
        Other live tables may hold them too (write checks the ones written)."""
        if not self.blocks:
            if new_blocks:
                raise ProtocolError("%s brings %d blocks, this worker keeps no paged cache (0 blocks)" % (where, len(new_blocks)))
            return
        for b in new_blocks:
            if b >= self.blocks:
                raise ProtocolError("%s: block %d is not below this worker's %d blocks" % (where, b, self.blocks))
            self.refs[b] = self.refs.get(b, 0) + 1
            seq.table.append(b)
        if new_blocks:
            ordered = sorted(seq.table)
            for a, b in zip(ordered, ordered[1:]):
                if a == b:
                    raise ProtocolError("%s: block %d is already in the table of sequence %d" % (where, b, seq_id))
        if -(-end // self.block_size) > len(seq.table):
            raise ProtocolError("%s: a table of %d blocks of %d tokens does not cover its %d tokens"
                                % (where, len(seq.table), self.block_size, end))

    def feed(self, body, row, i):
        """Take row i once every row is written (without a pool its tokens,
        with one its history read back) and write its logits if sampled."""
        seq, end = row.seq, row.pos + row.nt
        if not self.blocks:
            self.take(body, row)
            ph, last = seq.ph, seq.last
        else:
            hist = self.read(row, end, row.sample and self.model is not None)
            if hist is None:
                return
            ph = Model.prompt_hash(hist[:row.prompt_len]) if self.model.eos >= 0 else 0
            last = hist[end - 1]
        if row.sample and self.model is not None:
            self.model.write_row(self.mm, i * self.row_bytes, ph, last, end - row.prompt_len)

    def take(self, body, row):
        """Without a pool: the prompt's tokens go into its hash (the
        synthetic model's stand-in for a KV cache), the last is kept."""
        seq, off, nt = row.seq, row.tok_off, row.nt
        in_prompt = max(0, min(nt, seq.prompt_len - row.pos))
        if in_prompt and self.model is not None and self.model.eos >= 0:
            for t in struct.unpack_from("<%di" % in_prompt, body, off):
                seq.ph = mix(seq.ph ^ (t & 0xFFFFFFFF))
        seq.last = TOKEN.unpack_from(body, off + 4 * (nt - 1))[0]

    def write(self, body, row):
        """Store the row's tokens at their slots; every block written must
        be in its table only."""
        bs, table = self.block_size, row.seq.table
        toks = struct.unpack_from("<%di" % row.nt, body, row.tok_off)
        pos, k = row.pos, 0
        while k < row.nt:
            b, o = table[pos // bs], pos % bs
            if self.refs[b] > 1:
                raise ProtocolError("%s writes block %d, which is also in the table of sequence %d"
                                    % (row.where, b, self.holder(b, row.seq_id)))
            kv = self.kv.setdefault(b, array.array("i"))
            if o > len(kv):  # cannot happen: a sequence writes its blocks from their first slot on
                raise ProtocolError("%s writes block %d from slot %d, its slots from %d on were never written"
                                    % (row.where, b, o, len(kv)))
            n = min(row.nt - k, bs - o)
            kv[o:o + n] = array.array("i", toks[k:k + n])
            pos, k = pos + n, k + n

    def read(self, row, end, keep):
        """The sequence's first end tokens read back through its table (None
        unless keep: only checked); a slot never written is an error."""
        bs, table = self.block_size, row.seq.table
        hist = array.array("i") if keep else None
        j = 0
        while j * bs < end:
            b, n = table[j], min(bs, end - j * bs)
            kv = self.kv.get(b, ())
            if len(kv) < n:
                raise ProtocolError("%s reads block %d, whose slot %d (its token %d) was never written"
                                    % (row.where, b, len(kv), j * bs + len(kv)))
            if keep:
                hist.extend(kv[:n])
            j += 1
        return hist

    def holder(self, b, self_id):
        """The lowest id but self_id whose table has block b."""
        return min(i for i, seq in self.held.items() if i != self_id and b in seq.table)


def handshake(conn, body, args):
    """Answer HELLO. Returns (hello values, mapped shm or None, Steps) when
    this worker serves the agent, None when it does not."""
    if len(body) < HELLO_FIXED.size:
        raise ProtocolError("HELLO of %d bytes" % len(body))
    (version, rank, world, vocab, max_batch, eos, dtype, order, logits, _r,
     shm_size, path_len) = HELLO_FIXED.unpack_from(body, 0)
    shm_path = bytes(body[HELLO_FIXED.size:HELLO_FIXED.size + path_len]).decode()
    top = min(VERSION, args.max_version or VERSION)
    if version < 1:
        conn.send_error("protocol version %d offered; this worker speaks 1 to %d" % (version, top))
        return None
    # Speak the highest version both sides speak; report the values this
    # worker runs with for everything else (the agent refuses a difference).
    agent = (rank, world, vocab, max_batch, eos, dtype, order)
    mine = [min(version, top), rank, world, vocab, max_batch, eos, dtype, NATIVE_ORDER]
    if args.vocab:
        mine[3] = args.vocab
    if args.max_batch:
        mine[4] = args.max_batch
    if args.eos is not None:
        mine[5] = args.eos
    if args.dtype:
        mine[6] = DTYPE_NAMES[args.dtype]
    name = ("python reference worker (synthetic model) " + args.name).strip().encode()
    matches = tuple(mine[1:]) == agent
    mm = model = None
    if matches:
        if dtype not in DTYPE_SIZE:
            conn.send_error("unknown dtype code %d" % dtype)
            return None
        if logits:
            need = max_batch * vocab * DTYPE_SIZE[dtype]
            try:
                fd = os.open(shm_path, os.O_RDWR)
                try:
                    mm = mmap.mmap(fd, need, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                finally:
                    os.close(fd)
            except (OSError, ValueError) as e:
                conn.send_error("open shared memory %s (%d bytes): %s" % (shm_path, need, e))
                return None
            t0 = time.monotonic()
            model = Model(vocab, eos, dtype)
            log("rank %d: base row of %d built in %.2fs" % (rank, vocab, time.monotonic() - t0))
    reply = HELLO_OK_FIXED.pack(*mine, 0, os.getpid(), len(name)) + name
    if mine[0] >= 3:
        reply += HELLO_OK_KV.pack(args.block_size, args.kv_blocks, args.max_model_len)
    conn.send(HELLO_OK, reply)
    if not matches:
        log("handshake mismatch; the agent will refuse: agent %r, worker %r" % (agent, tuple(mine[1:])))
        if mm is not None:
            mm.close()
        return None
    log("rank %d of %d ready (protocol %d, vocab %d, max batch %d, dtype %d)" % (rank, world, mine[0], vocab, max_batch, dtype))
    steps_class = {1: StepsV1, 2: StepsV2, 3: StepsV3}[mine[0]]
    return steps_class(model, mm, max_batch, vocab * DTYPE_SIZE[dtype], args.block_size, args.kv_blocks)


def serve(sock, args):
    """One agent connection: HELLO, then FORWARD until SHUTDOWN or EOF."""
    conn = Conn(sock)
    try:
        typ, body = conn.read_frame()
    except EOFError:
        return
    if typ != HELLO:
        raise ProtocolError("expected HELLO, got frame type %d" % typ)
    steps = handshake(conn, body, args)
    if steps is None:
        return
    try:
        while True:
            try:
                typ, body = conn.read_frame()
            except EOFError:
                return
            if typ == SHUTDOWN:
                return
            if typ != FORWARD:
                raise ProtocolError("expected FORWARD or SHUTDOWN, got frame type %d" % typ)
            start = time.monotonic()
            step, n = steps.forward(body)
            if args.forward_time > 0:
                left = args.forward_time / 1000.0 - (time.monotonic() - start)
                if left > 0:
                    time.sleep(left)
            conn.send(FORWARD_OK, FORWARD_OK_BODY.pack(step, n if steps.model is not None else 0))
    except (ProtocolError, struct.error) as e:
        conn.send_error(str(e))
        raise
    finally:
        if steps.mm is not None:
            steps.mm.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="connect to the agent listening here (default $TPCOORD_WORKER_SOCKET)")
    ap.add_argument("--listen", help="listen here and serve agents one at a time (for --worker-socket)")
    ap.add_argument("--vocab", type=int, default=0, help="report this vocab instead of the agent's")
    ap.add_argument("--max-batch", type=int, default=0, help="report this max batch instead of the agent's")
    ap.add_argument("--eos", type=int, default=None, help="report this EOS instead of the agent's")
    ap.add_argument("--dtype", choices=sorted(DTYPE_NAMES), help="report this dtype instead of the agent's")
    ap.add_argument("--forward-time", type=float, default=0, help="milliseconds one forward pass takes at least")
    ap.add_argument("--name", default="", help="appended to the name reported in HELLO_OK")
    ap.add_argument("--max-version", type=int, default=0, help="speak protocol versions up to this one (default %d)" % VERSION)
    ap.add_argument("--kv-blocks", type=int, default=0, help="KV blocks it keeps and reports in HELLO_OK (version 3; 0: no paged cache)")
    ap.add_argument("--block-size", type=int, default=16, help="tokens per KV block reported in HELLO_OK (version 3)")
    ap.add_argument("--max-model-len", type=int, default=0, help="the model's context reported in HELLO_OK (version 3; 0: none)")
    args = ap.parse_args()
    if not 1 <= args.block_size < 1 << 32:
        ap.error("--block-size must be 1 to %d, got %d" % ((1 << 32) - 1, args.block_size))
    for flag, value in (("--kv-blocks", args.kv_blocks), ("--max-model-len", args.max_model_len)):
        if not 0 <= value < 1 << 32:
            ap.error("%s must be 0 to %d, got %d" % (flag, (1 << 32) - 1, value))
    if not 0 <= args.max_version <= VERSION:
        ap.error("--max-version must be 1 to %d (0: %d), got %d" % (VERSION, VERSION, args.max_version))

    if args.listen:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(args.listen)
        srv.listen(1)
        log("listening on %s" % args.listen)
        try:
            while True:
                sock, _ = srv.accept()
                with sock:
                    try:
                        serve(sock, args)
                    except (ProtocolError, OSError, struct.error) as e:
                        log("connection ended: %s" % e)
        finally:
            os.unlink(args.listen)
    path = args.socket or os.environ.get("TPCOORD_WORKER_SOCKET")
    if not path:
        ap.error("--socket, --listen or $TPCOORD_WORKER_SOCKET is needed")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    with sock:
        try:
            serve(sock, args)
        except (ProtocolError, struct.error) as e:
            log("protocol error: %s" % e)
            sys.exit(1)


if __name__ == "__main__":
    main()
