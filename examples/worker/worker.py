#!/usr/bin/env python3
"""Reference tpcoord model worker, standard library only.

It speaks the worker protocol of docs/worker-protocol.md and runs the same
synthetic model as tpcoord's built-in executor (rank.Synthetic in Go), bit
for bit, so a job run with this worker samples exactly the tokens of a job
run with --executor synthetic.

    python3 worker.py --socket PATH   # connect to an agent (--worker-cmd)
    python3 worker.py --listen PATH   # wait for agents (--worker-socket)

Without --socket or --listen it connects to $TPCOORD_WORKER_SOCKET.
A real model runner replaces Model with its runtime: keep the framing,
the handshake and the shared-memory layout.
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

VERSION = 1

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
FORWARD_HEAD = struct.Struct("<QI")     # step, rows
ROW_HEAD = struct.Struct("<QII")        # seq id, prompt length, output length
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
        self.prompt_hash = {}  # seq id -> hash of its prompt

    def eos_after(self, seq_id, prompt):
        """The output length L where EOS overtakes the top candidate."""
        ph = self.prompt_hash.get(seq_id)
        if ph is None:
            ph = 0
            for t in prompt:
                ph = mix(ph ^ (t & 0xFFFFFFFF))
            self.prompt_hash[seq_id] = ph
        return 8 + ph % 40

    def write_row(self, mm, offset, seq_id, prompt_fn, last, n_output):
        """Write one row's logits at byte offset of mm (rank.Synthetic.Row)."""
        v, size = self.vocab, self.size
        mm[offset:offset + v * size] = self.base
        last &= 0xFFFFFFFF
        for j, lift in enumerate(self.lifts):
            self.fmt.pack_into(mm, offset + size * (mix(last * 8 + j + 1) % v), lift)
        if self.eos >= 0:
            l = self.eos_after(seq_id, prompt_fn())
            # float32 arithmetic in Go; every operand here is exact.
            value = to_f32(self.LIFTS[0] + 0.5 + 0.75 * (float(n_output) - l))
            self.fmt.pack_into(mm, offset + size * self.eos, self.encode(value))

    def forget_except(self, ids):
        if len(self.prompt_hash) > 4 * max(len(ids), 64):
            self.prompt_hash = {i: h for i, h in self.prompt_hash.items() if i in ids}


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


def serve(sock, args):
    """One agent connection: HELLO, then FORWARD until SHUTDOWN or EOF."""
    conn = Conn(sock)
    try:
        typ, body = conn.read_frame()
    except EOFError:
        return
    if typ != HELLO:
        raise ProtocolError("expected HELLO, got frame type %d" % typ)
    (version, rank, world, vocab, max_batch, eos, dtype, order, logits, _r,
     shm_size, path_len) = HELLO_FIXED.unpack_from(body, 0)
    shm_path = bytes(body[HELLO_FIXED.size:HELLO_FIXED.size + path_len]).decode()
    # Report what this worker runs with; the agent refuses any difference.
    agent = (version, rank, world, vocab, max_batch, eos, dtype, order)
    mine = [VERSION, rank, world, vocab, max_batch, eos, dtype, NATIVE_ORDER]
    if args.vocab:
        mine[3] = args.vocab
    if args.max_batch:
        mine[4] = args.max_batch
    if args.eos is not None:
        mine[5] = args.eos
    if args.dtype:
        mine[6] = DTYPE_NAMES[args.dtype]
    name = ("python reference worker (synthetic model) " + args.name).strip().encode()
    matches = tuple(mine) == agent
    mm = None
    model = None
    if matches:
        if dtype not in DTYPE_SIZE:
            conn.send_error("unknown dtype code %d" % dtype)
            return
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
                return
            t0 = time.monotonic()
            model = Model(vocab, eos, dtype)
            log("rank %d: base row of %d built in %.2fs" % (rank, vocab, time.monotonic() - t0))
    conn.send(HELLO_OK, HELLO_OK_FIXED.pack(*mine, 0, os.getpid(), len(name)) + name)
    if not matches:
        log("handshake mismatch; the agent will refuse: agent %r, worker %r" % (agent, tuple(mine)))
        return
    log("rank %d of %d ready (vocab %d, max batch %d, dtype %d)" % (rank, world, vocab, max_batch, dtype))

    row_bytes = vocab * DTYPE_SIZE[dtype]
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
            step, n = FORWARD_HEAD.unpack_from(body, 0)
            if n > max_batch:
                raise ProtocolError("step %d has %d rows, max batch is %d" % (step, n, max_batch))
            off = FORWARD_HEAD.size
            ids = set()
            for i in range(n):
                seq_id, np_, no = ROW_HEAD.unpack_from(body, off)
                off += ROW_HEAD.size
                ntok = np_ + no
                if off + 4 * ntok > len(body):
                    raise ProtocolError("row %d of step %d is truncated" % (i, step))
                ids.add(seq_id)
                if model is not None:
                    # A real runtime keeps KV caches and needs only the new
                    # token; the synthetic model needs the last token and
                    # (once per sequence) the prompt.
                    last = TOKEN.unpack_from(body, off + 4 * (ntok - 1))[0] if ntok else -1
                    p0 = off
                    prompt = lambda p0=p0, np_=np_: [TOKEN.unpack_from(body, p0 + 4 * k)[0] for k in range(np_)]
                    model.write_row(mm, i * row_bytes, seq_id, prompt, last, no)
                off += 4 * ntok
            if off != len(body):
                raise ProtocolError("FORWARD of step %d has %d trailing bytes" % (step, len(body) - off))
            if model is not None:
                model.forget_except(ids)
            if args.forward_time > 0:
                left = args.forward_time / 1000.0 - (time.monotonic() - start)
                if left > 0:
                    time.sleep(left)
            conn.send(FORWARD_OK, FORWARD_OK_BODY.pack(step, n if model is not None else 0))
    except (ProtocolError, struct.error) as e:
        conn.send_error(str(e))
        raise
    finally:
        if mm is not None:
            mm.close()


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
    args = ap.parse_args()

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
