"""The tpcoord worker protocol, versions 1 to 3: frames, HELLO/HELLO_OK,
FORWARD bodies (v1 full histories, v2 deltas, v3 deltas with KV blocks)
and FORWARD_OK.

All integers are little-endian whatever the host (explicit '<' formats).
"""

import struct
import sys

import numpy as np

VERSIONS = (1, 2, 3)

HELLO, HELLO_OK, FORWARD, FORWARD_OK, ERROR, SHUTDOWN = 1, 2, 3, 4, 5, 6

FLOAT32, FLOAT16, BFLOAT16 = 1, 2, 3
DTYPE_SIZE = {FLOAT32: 4, FLOAT16: 2, BFLOAT16: 2}
DTYPE_NAME = {FLOAT32: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16"}

LITTLE, BIG = 1, 2
NATIVE_ORDER = LITTLE if sys.byteorder == "little" else BIG

HEADER = struct.Struct("<IHH")                  # body length, type, reserved (0)
HELLO_FIXED = struct.Struct("<IIIIIiBBBBQH")     # 38 bytes, then the shm path
HELLO_OK_FIXED = struct.Struct("<IIIIIiBBHIH")   # 34 bytes, then the name
HELLO_OK_KV = struct.Struct("<III")              # v3, after the name: block size, blocks, max model len
V1_HEAD = struct.Struct("<QI")                   # step, rows
V1_ROW = struct.Struct("<QII")                   # id, prompt length, output length
V2_HEAD = struct.Struct("<QII")                  # step, rows, finished ids
V2_ROW = struct.Struct("<QIIII")                 # id, flags, position, prompt length, T
V3_ROW = struct.Struct("<QIIIII")                # id, flags, position, prompt length, T, B
FORWARD_OK_BODY = struct.Struct("<QI")           # step, rows written

MAX_BODY = 256 << 20
MAX_ERROR = 65536


class ProtocolError(Exception):
    pass


class Hello:
    FIELDS = ("version", "rank", "world", "vocab", "max_batch", "eos", "dtype", "order",
              "logits", "reserved", "shm_size")

    def __init__(self, body):
        if len(body) < HELLO_FIXED.size:
            raise ProtocolError("HELLO of %d bytes is shorter than %d" % (len(body), HELLO_FIXED.size))
        values = HELLO_FIXED.unpack_from(body, 0)
        for name, v in zip(self.FIELDS, values):
            setattr(self, name, v)
        path_len = values[-1]
        if HELLO_FIXED.size + path_len != len(body):
            raise ProtocolError("HELLO of %d bytes does not hold its %d-byte path" % (len(body), path_len))
        try:
            self.shm_path = bytes(body[HELLO_FIXED.size:]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("HELLO's shared-memory path is not UTF-8") from None


# FORWARD v2/v3 row flags.
NEW, SAMPLE = 1, 2


def hello_ok(version, rank, world, vocab, max_batch, eos, dtype, pid, name, kv=(0, 0, 0)):
    """kv: (block size, blocks, max model len), sent from version 3 on."""
    raw = name.encode("utf-8")[:1024]
    body = HELLO_OK_FIXED.pack(version, rank, world, vocab, max_batch, eos, dtype, NATIVE_ORDER,
                               0, pid, len(raw)) + raw
    if version >= 3:
        body += HELLO_OK_KV.pack(*kv)
    return body


def forward_ok(step, rows):
    return FORWARD_OK_BODY.pack(step, rows)


def _tokens(body, off, count, what):
    if count > (len(body) - off) // 4:
        raise ProtocolError("%s: %d tokens overrun the FORWARD body" % (what, count))
    # A copy: the body buffer is reused by the next frame.
    return np.frombuffer(body, dtype="<i4", count=count, offset=off).astype(np.int64), off + 4 * count


def _check_rows(step, n, max_batch):
    if n == 0 or n > max_batch:
        raise ProtocolError("step %d has %d rows; 1 to max batch %d are allowed" % (step, n, max_batch))


def parse_forward_v1(body, max_batch):
    """-> (step, [(id, prompt length, history)])"""
    if len(body) < V1_HEAD.size:
        raise ProtocolError("FORWARD of %d bytes is too short" % len(body))
    step, n = V1_HEAD.unpack_from(body, 0)
    _check_rows(step, n, max_batch)
    off, rows = V1_HEAD.size, []
    for i in range(n):
        if off + V1_ROW.size > len(body):
            raise ProtocolError("step %d: row %d header is truncated" % (step, i))
        seq_id, p, o = V1_ROW.unpack_from(body, off)
        history, off = _tokens(body, off + V1_ROW.size, p + o, "step %d row %d (sequence %d)" % (step, i, seq_id))
        rows.append((seq_id, p, history))
    if off != len(body):
        raise ProtocolError("FORWARD of step %d has %d trailing bytes" % (step, len(body) - off))
    return step, rows


def _blocks(body, off, count, what):
    if count > (len(body) - off) // 4:
        raise ProtocolError("%s: %d block ids overrun the FORWARD body" % (what, count))
    return [int(x) for x in np.frombuffer(body, dtype="<u4", count=count, offset=off)], off + 4 * count


def _delta_head(body, max_batch):
    """The v2/v3 header: -> (step, n, finished ids, offset of the first row)."""
    if len(body) < V2_HEAD.size:
        raise ProtocolError("FORWARD of %d bytes is too short" % len(body))
    step, n, f = V2_HEAD.unpack_from(body, 0)
    _check_rows(step, n, max_batch)
    off = V2_HEAD.size
    if f > (len(body) - off) // 8:
        raise ProtocolError("step %d: %d finished ids overrun the FORWARD body" % (step, f))
    finished = [int(x) for x in np.frombuffer(body, dtype="<u8", count=f, offset=off)]
    return step, n, finished, off + 8 * f


def _check_end(body, off, step):
    if off != len(body):
        raise ProtocolError("FORWARD of step %d has %d trailing bytes" % (step, len(body) - off))


def parse_forward_v2(body, max_batch):
    """-> (step, [finished ids], [(id, flags, position, prompt length, tokens)])"""
    step, n, finished, off = _delta_head(body, max_batch)
    rows = []
    for i in range(n):
        if off + V2_ROW.size > len(body):
            raise ProtocolError("step %d: row %d header is truncated" % (step, i))
        seq_id, flags, position, p, t = V2_ROW.unpack_from(body, off)
        tokens, off = _tokens(body, off + V2_ROW.size, t, "step %d row %d (sequence %d)" % (step, i, seq_id))
        rows.append((seq_id, flags, position, p, tokens))
    _check_end(body, off, step)
    return step, finished, rows


def parse_forward_v3(body, max_batch):
    """-> (step, [finished ids], [(id, flags, position, prompt length, tokens, [new block ids])])"""
    step, n, finished, off = _delta_head(body, max_batch)
    rows = []
    for i in range(n):
        if off + V3_ROW.size > len(body):
            raise ProtocolError("step %d: row %d header is truncated" % (step, i))
        seq_id, flags, position, p, t, b = V3_ROW.unpack_from(body, off)
        what = "step %d row %d (sequence %d)" % (step, i, seq_id)
        tokens, off = _tokens(body, off + V3_ROW.size, t, what)
        blocks, off = _blocks(body, off, b, what)
        rows.append((seq_id, flags, position, p, tokens, blocks))
    _check_end(body, off, step)
    return step, finished, rows


class Conn:
    """Frames over a connected stream socket."""

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
        """-> (type, body memoryview, valid until the next read). EOFError at a clean end."""
        length, typ, reserved = HEADER.unpack(self.recv_exact(HEADER.size))
        if reserved != 0 or not HELLO <= typ <= SHUTDOWN:
            raise ProtocolError("bad frame header: type %d, reserved %d" % (typ, reserved))
        if length > MAX_BODY:
            raise ProtocolError("frame of %d bytes is too large" % length)
        if length == 0:
            return typ, memoryview(b"")
        try:
            return typ, self.recv_exact(length)
        except EOFError:
            raise ProtocolError("connection closed mid-frame") from None

    def send(self, typ, body=b""):
        self.sock.sendall(HEADER.pack(len(body), typ, 0) + body)

    def send_error(self, message):
        try:
            self.send(ERROR, message.encode("utf-8", "replace")[:MAX_ERROR])
        except OSError:
            pass
