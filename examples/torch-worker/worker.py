#!/usr/bin/env python3
"""tpcoord model worker: a tensor-parallel Llama/Granite in PyTorch.

It speaks the worker protocol (versions 1 to 3) to a tpcoord agent, loads
its rank's shard of a Hugging Face Llama/Granite checkpoint (safetensors),
joins the job's torch.distributed group (env://, the torchrun variables
tpcoord sets) and runs the forward pass over a paged KV cache: a pool of
--kv-cache-gib allocated at start, in blocks of --block-size tokens. Rank
0 gathers the logits and writes them to the agent's shared memory; when
every rank's agent asks for logits (--sampling-ranks all), every rank
all-gathers them and writes its own.

    worker.py --socket PATH --model DIR   # connect to an agent (--worker-cmd)
    worker.py --listen PATH --model DIR   # serve agents one at a time (--worker-socket)

See README.md beside this file.
"""

import argparse
import datetime
import mmap
import os
import socket
import sys
import time

import torch

from config import Layout, ModelConfig
import wlog
from model import Comm, TPModel, block_bytes
from progress import ShardProgress, tqdm_bars
from protocol import (DTYPE_NAME, DTYPE_SIZE, FLOAT16, FLOAT32, FORWARD, FORWARD_OK, HELLO, HELLO_OK,
                      NATIVE_ORDER, SHUTDOWN, VERSIONS, Conn, Hello, ProtocolError, forward_ok, hello_ok,
                      parse_forward_v1, parse_forward_v2, parse_forward_v3)
from runtime import Runtime, StepError
from safetensors_io import Checkpoint, CheckpointError
from wlog import log

NAME = "tpcoord torch worker"
# The agent allows 5 minutes for the handshake; a rendezvous that takes
# longer has failed anyway.
DIST_TIMEOUT = datetime.timedelta(minutes=5)
COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# The KV pool when --kv-cache-gib is not given: committed at start on every
# rank (TP 4 on one host: 4 GiB), so small enough to share a host and run
# the tests, large enough for the example models (see README.md).
DEFAULT_KV_CACHE_GIB = 1.0
DEFAULT_BLOCK_SIZE = 16


class HelloError(Exception):
    """A HELLO this worker cannot serve."""


EXPECTED = (ProtocolError, CheckpointError, StepError, HelloError)


def negotiate(offered):
    version = min(offered, max(VERSIONS))
    if version not in VERSIONS:
        raise HelloError("the agent offers protocol version %d; this worker speaks versions %s"
                         % (offered, ", ".join(map(str, VERSIONS))))
    return version


def check_env(rank, world):
    """HELLO's rank/world must be the torchrun RANK/WORLD_SIZE tpcoord set."""
    env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if env_rank is None and env_world is None:
        if world != 1:
            raise HelloError("HELLO says rank %d of world %d, but RANK and WORLD_SIZE are not set in the "
                             "worker's environment (tpcoord sets torchrun's variables)" % (rank, world))
        return
    try:
        env = (int(env_rank), int(env_world))
    except (TypeError, ValueError):
        raise HelloError("environment RANK=%r WORLD_SIZE=%r are not both integers" % (env_rank, env_world)) from None
    if env != (rank, world):
        raise HelloError("HELLO says rank %d of world %d, the environment says RANK=%d WORLD_SIZE=%d"
                         % (rank, world, env[0], env[1]))


def init_distributed(backend, world):
    if world == 1:
        return
    import torch.distributed as dist
    if dist.is_initialized():
        return
    try:
        dist.init_process_group(backend, init_method="env://", timeout=DIST_TIMEOUT)
    except (RuntimeError, ValueError) as e:
        raise HelloError("torch.distributed init (backend %s, env:// with MASTER_ADDR=%s MASTER_PORT=%s): %s"
                         % (backend, os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"), e)) from None


def mem_available(path="/proc/meminfo"):
    """The host's MemAvailable in bytes, None when unknown."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class PoolSize:
    """The KV pool --kv-cache-gib and --block-size give this rank:
    blocks = floor(GiB * 2^30 / bytes per block), a block being block_size
    tokens of K and V in every layer for this rank's KV heads."""

    def __init__(self, cfg, world, dtype, gib, block_size):
        self.gib, self.block_size = gib, block_size
        self.kv_heads = Layout(cfg, 0, world).kv_heads
        self.block_bytes = block_bytes(cfg, self.kv_heads, dtype, block_size)
        self.blocks = int(gib * 2 ** 30) // self.block_bytes
        self.nbytes = self.blocks * self.block_bytes

    def check_blocks(self):
        if self.blocks < 1:
            raise HelloError("--kv-cache-gib %g holds 0 KV blocks: one block of %d tokens takes %d bytes on this "
                             "rank (%d KV heads)" % (self.gib, self.block_size, self.block_bytes, self.kv_heads))
        if self.blocks > 0xFFFFFFFF:
            raise HelloError("--kv-cache-gib %g makes %d KV blocks, more than HELLO_OK's 4294967295"
                             % (self.gib, self.blocks))

    def check_memory(self, available):
        if available is not None and self.nbytes > available:
            raise HelloError("the KV pool of %d blocks (--kv-cache-gib %g) takes %d bytes, more than the host's "
                             "MemAvailable of %d bytes" % (self.blocks, self.gib, self.nbytes, available))

    def describe(self):
        return "%d blocks of %d tokens = %d tokens, %.3f GiB (%d bytes per block)" % (
            self.blocks, self.block_size, self.blocks * self.block_size, self.nbytes / 2 ** 30, self.block_bytes)


class Loaded:
    """The model of this process and its KV pool: loaded and allocated once,
    kept across --listen agents."""

    def __init__(self, args):
        self.args = args
        self.model = None
        self.rank = self.world = None

    def get(self, cfg, rank, world):
        if self.model is not None:
            if (rank, world) != (self.rank, self.world):
                raise HelloError("this worker runs rank %d of world %d; HELLO asks for rank %d of world %d"
                                 % (self.rank, self.world, rank, world))
            return self.model
        args = self.args
        dtype = COMPUTE_DTYPES[args.compute_dtype]
        size = pool_size(args, cfg, world)
        size.check_blocks()
        t0 = time.monotonic()
        ckpt = Checkpoint(args.model)
        ckpt.progress = ShardProgress(ckpt.shards(), tqdm_bars(sys.stderr))
        log.info("rank %d of %d: loading %s (%d shards)", rank, world, args.model, len(ckpt.progress.order))
        try:
            reduce_dtype = torch.float32 if args.backend == "gloo" and dtype != torch.float32 else None
            model = TPModel(cfg, ckpt, rank, world, dtype, Comm(world, reduce_dtype),
                            mkldnn=False if args.no_mkldnn else None)
        finally:
            ckpt.progress.close()
            ckpt.close()
        log.info("rank %d of %d: loaded %s in %.1fs", rank, world, args.model, time.monotonic() - t0)
        allocate_pool(model, size)
        init_distributed(args.backend, world)
        self.model, self.rank, self.world = model, rank, world
        return model


def pool_size(args, cfg, world):
    """PoolSize of args (a Namespace without the KV flags takes the defaults)."""
    return PoolSize(cfg, world, COMPUTE_DTYPES[args.compute_dtype],
                    getattr(args, "kv_cache_gib", DEFAULT_KV_CACHE_GIB),
                    getattr(args, "block_size", DEFAULT_BLOCK_SIZE))


def allocate_pool(model, size):
    """Allocate and zero-fill the pool (committing its memory), refusing one
    larger than the host's MemAvailable."""
    size.check_memory(mem_available())
    t0 = time.monotonic()
    try:
        model.allocate_pool(size.blocks, size.block_size)
    except RuntimeError as e:
        raise HelloError("allocating the KV pool of %d bytes (%d blocks): %s" % (size.nbytes, size.blocks, e)) from None
    log.info("KV pool: %s, allocated in %.1fs", size.describe(), time.monotonic() - t0)


def agree_logits(model, hello):
    """Which ranks get logits, decided with every rank (a collective, after
    the process group is up): all of them (--sampling-ranks all) or rank 0
    alone. True for every rank."""
    try:
        return model.comm.agree_logits(hello.rank, hello.logits)
    except ValueError as e:
        raise HelloError(str(e)) from None


def open_shm(path, size):
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:
        raise HelloError("open shared memory %s (%d bytes): %s" % (path, size, e)) from None


class Session:
    """One agent connection after a successful handshake."""

    def __init__(self, hello, version, runtime, mm):
        self.hello, self.version, self.runtime, self.mm = hello, version, runtime, mm


def handshake(conn, hello, args, loaded):
    """Answer HELLO. Returns a Session, or None when the worker's values
    differ from the agent's (HELLO_OK tells the agent, which refuses)."""
    version = negotiate(hello.version)
    check_env(hello.rank, hello.world)
    if hello.dtype not in DTYPE_SIZE:
        raise HelloError("unknown logits dtype code %d (1 float32, 2 float16, 3 bfloat16)" % hello.dtype)
    cfg = ModelConfig.load(args.model)
    size = pool_size(args, cfg, hello.world)
    size.check_blocks()
    mine = (version, hello.rank, hello.world, cfg.vocab, hello.max_batch, cfg.eos, hello.dtype)
    name = "%s (llama, rank %d of %d, %s compute)" % (NAME, hello.rank, hello.world, args.compute_dtype)
    reply = hello_ok(*mine, os.getpid(), name, kv=(size.block_size, size.blocks, cfg.max_model_len))
    if (cfg.vocab, cfg.eos, hello.order) != (hello.vocab, hello.eos, NATIVE_ORDER):
        log.error("handshake mismatch, the agent will refuse: agent vocab %d eos %d, checkpoint vocab %d eos %d",
                  hello.vocab, hello.eos, cfg.vocab, cfg.eos)
        conn.send(HELLO_OK, reply)
        return None
    mm = None
    if hello.logits:
        need = hello.max_batch * cfg.vocab * DTYPE_SIZE[hello.dtype]
        if hello.shm_size < need:
            raise HelloError("shared memory of %d bytes is smaller than max batch %d x vocab %d x %d"
                             % (hello.shm_size, hello.max_batch, cfg.vocab, DTYPE_SIZE[hello.dtype]))
        mm = open_shm(hello.shm_path, need)
    try:
        model = loaded.get(cfg, hello.rank, hello.world)
        everywhere = agree_logits(model, hello)
    except BaseException:
        if mm is not None:
            mm.close()
        raise
    conn.send(HELLO_OK, reply)
    log.info("rank %d of %d (LOCAL_RANK %s) ready: protocol v%d, max batch %d, %s logits %s",
             hello.rank, hello.world, os.environ.get("LOCAL_RANK", "-"), version, hello.max_batch,
             DTYPE_NAME[hello.dtype], "on every rank (all_gather)" if everywhere else "on rank 0 (gather)")
    return Session(hello, version, Runtime(model, args.prefill_chunk, log.info), mm)


def write_logits(mm, logits, dtype, rows=None):
    """logits [k, vocab] in native byte order into mm: at its start, or
    logits row j at row rows[j] (the FORWARD's row order)."""
    if dtype == FLOAT32:
        arr = logits.contiguous().numpy()
    elif dtype == FLOAT16:
        arr = logits.to(torch.float16).contiguous().numpy()
    else:
        arr = logits.to(torch.bfloat16).contiguous().view(torch.int16).numpy()
    src = memoryview(arr).cast("B")
    if rows is None:
        memoryview(mm)[:arr.nbytes] = src
        return
    size = arr.nbytes // len(rows)
    for j, r in enumerate(rows):
        memoryview(mm)[r * size:(r + 1) * size] = src[j * size:(j + 1) * size]


def forward_loop(conn, session):
    """FORWARD until SHUTDOWN or EOF."""
    hello = session.hello
    while True:
        try:
            typ, body = conn.read_frame()
        except EOFError:
            return
        if typ == SHUTDOWN:
            return
        if typ != FORWARD:
            raise ProtocolError("expected FORWARD or SHUTDOWN, got frame type %d" % typ)
        sampled = None  # v1, v2: every row
        if session.version == 1:
            step, rows = parse_forward_v1(body, hello.max_batch)
            logits = session.runtime.step_v1(rows)
        elif session.version == 2:
            step, finished, rows = parse_forward_v2(body, hello.max_batch)
            logits = session.runtime.step_v2(finished, rows)
        else:
            step, finished, rows = parse_forward_v3(body, hello.max_batch)
            logits, sampled = session.runtime.step_v3(finished, rows)
        written = 0
        if session.mm is not None:  # this rank gets logits
            # v3 rows without SAMPLE keep whatever their shm row holds.
            if logits is not None:
                write_logits(session.mm, logits, hello.dtype, sampled)
            written = len(rows)
        conn.send(FORWARD_OK, forward_ok(step, written))


def serve(sock, args, loaded):
    """One agent connection. Returns True if it ended cleanly."""
    conn = Conn(sock)
    session = None
    try:
        typ, body = conn.read_frame()
        if typ != HELLO:
            raise ProtocolError("expected HELLO, got frame type %d" % typ)
        session = handshake(conn, Hello(body), args, loaded)
        if session is not None:
            forward_loop(conn, session)
        return True
    except EOFError:
        return True
    except EXPECTED as e:
        log.error("%s", e)
        conn.send_error(str(e))
    except Exception as e:  # a bug or a torch failure: still tell the agent
        log.exception("internal error: %s: %s", type(e).__name__, e)
        conn.send_error("internal error: %s: %s" % (type(e).__name__, e))
    finally:
        if session is not None and session.mm is not None:
            session.mm.close()
    return False


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="connect to the agent listening here (default $TPCOORD_WORKER_SOCKET)")
    ap.add_argument("--listen", help="listen here and serve agents one at a time (for --worker-socket)")
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint directory (config.json, *.safetensors)")
    ap.add_argument("--backend", default="gloo", help="torch.distributed backend (default gloo)")
    ap.add_argument("--compute-dtype", choices=sorted(COMPUTE_DTYPES), default="float32")
    ap.add_argument("--prefill-chunk", type=int, default=512, help="most tokens per forward pass (default 512)")
    ap.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE,
                    help="tokens per KV block (default %d)" % DEFAULT_BLOCK_SIZE)
    ap.add_argument("--kv-cache-gib", type=float, default=DEFAULT_KV_CACHE_GIB,
                    help="this rank's KV pool in GiB, allocated at start (default %g)" % DEFAULT_KV_CACHE_GIB)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads (default: this host's cores shared by LOCAL_WORLD_SIZE ranks)")
    ap.add_argument("--no-mkldnn", action="store_true",
                    help="float32 matmuls through torch's BLAS instead of oneDNN (mkldnn)")
    ap.add_argument("--log-level", choices=sorted(wlog.LEVELS), default="info",
                    help="least severe level logged (default info)")
    args = ap.parse_args(argv)
    if args.prefill_chunk < 1:
        ap.error("--prefill-chunk must be positive")
    if args.block_size < 1:
        ap.error("--block-size must be positive, got %d" % args.block_size)
    if not 0 < args.kv_cache_gib < float("inf"):
        ap.error("--kv-cache-gib must be a positive number, got %g" % args.kv_cache_gib)
    if not args.listen and not args.socket:
        args.socket = os.environ.get("TPCOORD_WORKER_SOCKET")
        if not args.socket:
            ap.error("--socket, --listen or $TPCOORD_WORKER_SOCKET is needed")
    return args


def listen(args, loaded):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(args.listen)
    srv.listen(1)
    log.info("listening on %s", args.listen)
    try:
        while True:
            sock, _ = srv.accept()
            with sock:
                try:
                    serve(sock, args, loaded)
                except OSError as e:
                    log.warning("connection ended: %s", e)
    finally:
        os.unlink(args.listen)


def default_threads(env):
    """The cores of this host divided among the job's ranks on it, at least 1:
    every rank using every core would oversubscribe a shared host."""
    try:
        local = max(1, int(env.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // local)


def main(argv=None):
    args = parse_args(argv)
    wlog.setup(args.log_level)
    torch.set_num_threads(args.threads if args.threads > 0 else default_threads(os.environ))
    loaded = Loaded(args)
    if args.listen:
        listen(args, loaded)
        return 0
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(args.socket)
    except OSError as e:
        log.error("connect %s: %s", args.socket, e)
        return 1
    with sock:
        try:
            ok = serve(sock, args, loaded)
        except OSError as e:
            log.error("connection failed: %s", e)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
