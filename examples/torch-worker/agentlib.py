"""A minimal tpcoord agent for tests: starts worker.py, speaks the worker
protocol (written here from the spec, independently of protocol.py) and
owns the shared-memory logits file."""

import mmap
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

import testlib

HELLO, HELLO_OK, FORWARD, FORWARD_OK, ERROR, SHUTDOWN = 1, 2, 3, 4, 5, 6
FLOAT32, FLOAT16, BFLOAT16 = 1, 2, 3
SIZE = {FLOAT32: 4, FLOAT16: 2, BFLOAT16: 2}
NATIVE = 1 if sys.byteorder == "little" else 2
DEADLINE = 180.0  # seconds for a worker to start (torch import on a busy host)


def start_worker(model_dir, log_path, *args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    full_env.update(env or {})
    cmd = [sys.executable, testlib.WORKER, "--model", model_dir, "--threads", "1"] + list(args)
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=full_env)


def accept(srv, proc, log_path):
    """Wait for the worker started with --socket to connect."""
    deadline = time.monotonic() + DEADLINE
    srv.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            sock, _ = srv.accept()
            sock.settimeout(DEADLINE)
            return sock
        except socket.timeout:
            if proc.poll() is not None:
                raise AssertionError("worker exited (%s) before connecting: %s" % (proc.returncode, tail(log_path)))
    raise AssertionError("worker did not connect within %ss" % DEADLINE)


def connect(path, proc, log_path):
    """Connect to a worker started with --listen, polling until it listens."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            sock.settimeout(DEADLINE)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if proc.poll() is not None:
                raise AssertionError("worker exited (%s): %s" % (proc.returncode, tail(log_path)))
            time.sleep(0.05)
    raise AssertionError("worker did not listen within %ss" % DEADLINE)


def tail(path, n=2000):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")[-n:]


class Shm:
    """The logits file the agent creates and maps."""

    def __init__(self, max_batch, vocab, dtype):
        self.vocab, self.dtype = vocab, dtype
        self.size = max_batch * vocab * SIZE[dtype]
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, self.path = tempfile.mkstemp(prefix="tpcoord-test-", suffix=".logits", dir=base)
        try:
            os.ftruncate(fd, self.size)
            self.mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)

    def logits(self, rows):
        n = rows * self.vocab
        if self.dtype == FLOAT32:
            out = np.frombuffer(self.mm, dtype="=f4", count=n).copy()
        elif self.dtype == FLOAT16:
            out = np.frombuffer(self.mm, dtype="=f2", count=n).astype(np.float32)
        else:
            bits = np.frombuffer(self.mm, dtype="=u2", count=n).astype(np.uint32) << 16
            out = bits.view(np.float32)
        return out.reshape(rows, self.vocab)

    def close(self):
        self.mm.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


class Client:
    """One agent connection."""

    def __init__(self, sock):
        self.sock = sock
        self.shm = None

    def send(self, typ, body=b""):
        self.sock.sendall(struct.pack("<IHH", len(body), typ, 0) + body)

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("worker closed the connection")
            buf += chunk
        return buf

    def recv(self):
        length, typ, reserved = struct.unpack("<IHH", self.recv_exact(8))
        assert reserved == 0 and length <= 65536, (typ, reserved, length)
        return typ, self.recv_exact(length)

    def hello(self, version=2, rank=0, world=1, vocab=1000, max_batch=8, eos=2, dtype=FLOAT32, logits=None):
        """Send HELLO (with a fresh shm file if this rank gets logits)."""
        if logits is None:
            logits = rank == 0
        path = b""
        if logits:
            self.shm = Shm(max_batch, vocab, dtype)
            path = self.shm.path.encode()
        self.send(HELLO, struct.pack("<IIIIIiBBBBQH", version, rank, world, vocab, max_batch, eos, dtype,
                                     NATIVE, int(logits), 0, self.shm.size if logits else 0, len(path)) + path)

    def hello_ok(self):
        """-> dict of the HELLO_OK fields, or raise with the ERROR text."""
        typ, body = self.recv()
        if typ == ERROR:
            raise WorkerError(body.decode())
        assert typ == HELLO_OK, typ
        names = ("version", "rank", "world", "vocab", "max_batch", "eos", "dtype", "order", "reserved", "pid")
        fields = dict(zip(names, struct.unpack_from("<IIIIIiBBHI", body)))
        (q,) = struct.unpack_from("<H", body, 32)
        fields["name"] = body[34:34 + q].decode()
        if fields["version"] >= 3:
            assert len(body) == 34 + q + 12, (len(body), q)
            fields.update(zip(("block_size", "blocks", "max_model_len"), struct.unpack_from("<III", body, 34 + q)))
        else:
            assert len(body) == 34 + q, (len(body), q)
        return fields

    def forward_v2(self, step, finished, rows):
        body = struct.pack("<QII", step, len(rows), len(finished))
        body += b"".join(struct.pack("<Q", f) for f in finished)
        for seq_id, flags, position, p, tokens in rows:
            body += struct.pack("<QIIII", seq_id, flags, position, p, len(tokens))
            body += np.asarray(tokens, dtype="<i4").tobytes()
        self.send(FORWARD, body)

    def forward_v3(self, step, finished, rows):
        """rows: (id, flags, position, P, tokens, new block ids)."""
        self.send(FORWARD, encode_forward_v3(step, finished, rows))

    def forward_v1(self, step, rows):
        body = struct.pack("<QI", step, len(rows))
        for seq_id, p, history in rows:
            body += struct.pack("<QII", seq_id, p, len(history) - p)
            body += np.asarray(history, dtype="<i4").tobytes()
        self.send(FORWARD, body)

    def forward_ok(self):
        """-> (step, rows written), or raise with the ERROR text."""
        typ, body = self.recv()
        if typ == ERROR:
            raise WorkerError(body.decode())
        assert typ == FORWARD_OK and len(body) == 12, (typ, body)
        return struct.unpack("<QI", body)

    def close(self):
        try:
            self.send(SHUTDOWN)
        except OSError:
            pass
        self.sock.close()
        if self.shm is not None:
            self.shm.close()


def encode_forward_v3(step, finished, rows):
    body = struct.pack("<QII", step, len(rows), len(finished))
    body += b"".join(struct.pack("<Q", f) for f in finished)
    for seq_id, flags, position, p, tokens, blocks in rows:
        body += struct.pack("<QIIIII", seq_id, flags, position, p, len(tokens), len(blocks))
        body += np.asarray(tokens, dtype="<i4").tobytes() + np.asarray(blocks, dtype="<u4").tobytes()
    return body


class WorkerError(Exception):
    """The worker answered ERROR."""
