#!/usr/bin/env python3
"""Decode step time of the PyTorch worker's paged KV cache against the
per-sequence cache it replaced, and how many 2,048-token sequences a KV
budget holds with each.

The per-sequence cache is the worker's model.py and runtime.py of an
earlier commit (--old-rev, default 11c0497), read with `git show` into a
temporary directory and imported beside the current ones, so both run in
the same processes on the same checkpoint: batch 16, contexts 512 and
2,048, TP 1 and 2 (torch.multiprocessing, gloo on 127.0.0.1). Each context
is prefilled in both (the paged one through protocol-v3 rows with a
shuffled block table), then repetitions alternate which cache goes first;
a repetition times --steps decode steps (16 rows of one token) of each.
Rank 0 times every step between barriers; the figure is the median over
repetitions of each repetition's median.

    /usr/bin/python3 scripts/bench-paged-kv.py            # makes the checkpoint
    /usr/bin/python3 scripts/bench-paged-kv.py --model DIR --tp 1 --contexts 512
"""

import argparse
import datetime
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_DIR = os.path.join(ROOT, "examples", "torch-worker")
sys.path.insert(0, WORKER_DIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import testlib  # noqa: E402
import worker  # noqa: E402
from config import ModelConfig  # noqa: E402
from model import Comm, TPModel  # noqa: E402
from runtime import Runtime  # noqa: E402
from safetensors_io import Checkpoint  # noqa: E402

# The benchmark's checkpoint: larger than the tests' so that attention
# matters (head_dim 32, 8 query heads over 4 KV heads), Llama-2's vocab.
CHECKPOINT = ["--seed", "7", "--vocab", "32000", "--hidden", "256", "--layers", "4", "--heads", "8",
              "--kv-heads", "4", "--intermediate", "768", "--dtype", "f32"]
SAMPLE = 2


def load_old(rev, tmp):
    """The per-sequence cache's model.py and runtime.py at rev, as modules."""
    mods = {}
    for name in ("model", "runtime"):
        path = os.path.join(tmp, "old_%s.py" % name)
        src = subprocess.run(["git", "-C", ROOT, "show", "%s:examples/torch-worker/%s.py" % (rev, name)],
                             check=True, capture_output=True, text=True).stdout
        with open(path, "w") as f:
            f.write(src)
        spec = importlib.util.spec_from_file_location("old_" + name, path)
        mods[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[name])
    return mods["model"], mods["runtime"]


class Paged:
    """The current runtime, fed protocol-v3 rows over a shuffled pool."""

    def __init__(self, model, opts, context, seed):
        bs = opts["block_size"]
        per_seq = -(-(context + opts["decode_tokens"]) // bs)
        model.allocate_pool(opts["batch"] * per_seq, bs)
        self.runtime = Runtime(model, opts["prefill_chunk"])
        perm = np.random.default_rng(seed).permutation(opts["batch"] * per_seq).tolist()
        self.tables = [perm[i * per_seq:(i + 1) * per_seq] for i in range(opts["batch"])]

    def prefill(self, prompts):
        rows = [(i, 1 | SAMPLE, 0, len(p), p, self.tables[i]) for i, p in enumerate(prompts)]
        self.runtime.step_v3([], rows)

    def decode(self, positions, token):
        rows = [(i, SAMPLE, pos, 0, np.array([token]), []) for i, pos in enumerate(positions)]
        self.runtime.step_v3([], rows)

    def pool_tokens(self):
        return self.runtime.pool.blocks * self.runtime.pool.block_size


class PerSeq:
    """The replaced runtime (a growing cache per sequence), fed v2 rows."""

    def __init__(self, old_runtime, model, opts):
        self.runtime = old_runtime.Runtime(model, opts["prefill_chunk"])

    def prefill(self, prompts):
        self.runtime.step_v2([], [(i, 1, 0, len(p), p) for i, p in enumerate(prompts)])

    def decode(self, positions, token):
        self.runtime.step_v2([], [(i, 0, pos, 0, np.array([token])) for i, pos in enumerate(positions)])

    def reserved_tokens(self):
        return [s.cache.k.shape[2] for s in self.runtime.seqs.values()]


def timed(step, world):
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def run_context(new, old, old_runtime, opts, context, world):
    """Prefill both caches with the same prompts, warm up, then alternate
    repetitions. -> per-cache lists of per-repetition step times."""
    rng = np.random.default_rng(context)
    prompts = [rng.integers(0, new.cfg.vocab, size=context).astype(np.int64) for _ in range(opts["batch"])]
    caches = dict(paged=Paged(new, opts, context, seed=context), perseq=PerSeq(old_runtime, old, opts))
    pos = {}
    for name, c in caches.items():
        c.prefill(prompts)
        pos[name] = context
        for _ in range(opts["warmup"]):
            c.decode([pos[name]] * opts["batch"], 5)
            pos[name] += 1
    ptrs = new.pool.data_ptrs()
    times = {name: [] for name in caches}
    for rep in range(opts["reps"]):
        order = ["perseq", "paged"] if rep % 2 == 0 else ["paged", "perseq"]
        for name in order:
            c, rep_times = caches[name], []
            for _ in range(opts["steps"]):
                rep_times.append(timed(lambda: c.decode([pos[name]] * opts["batch"], 7), world))
                pos[name] += 1
            times[name].append(rep_times)
    assert new.pool.data_ptrs() == ptrs, "the pool moved"
    return dict(times=times, perseq_reserved=caches["perseq"].reserved_tokens(), final_len=pos["paged"])


def run_rank(rank, world, port, opts, outdir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    threads = worker.default_threads(os.environ)
    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(minutes=10))
    with tempfile.TemporaryDirectory() as tmp:
        old_model, old_runtime = load_old(opts["old_rev"], tmp)
    cfg = ModelConfig.load(opts["model"])
    ck = Checkpoint(opts["model"])
    new = TPModel(cfg, ck, rank, world, torch.float32, Comm(world))
    old = old_model.TPModel(cfg, ck, rank, world, torch.float32, old_model.Comm(world))
    ck.close()
    out = dict(threads=threads, contexts={})
    for context in opts["contexts"]:
        out["contexts"][str(context)] = run_context(new, old, old_runtime, opts, context, world)
    if rank == 0:
        with open(os.path.join(outdir, "result.json"), "w") as f:
            json.dump(out, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def summarize(rep_times):
    """Median over repetitions of each repetition's median, and the range
    of those medians, in ms."""
    meds = [statistics.median(r) * 1000 for r in rep_times]
    return statistics.median(meds), min(meds), max(meds)


def capacity(cfg, world, gib, block_size, context):
    """Concurrent context-token sequences gib holds on one rank: paged
    (whole blocks), and the per-sequence cache at best (capacity == length)
    and at worst (doubling reserved 2x the tokens)."""
    size = worker.PoolSize(cfg, world, torch.float32, gib, block_size)
    token_bytes = size.block_bytes // block_size
    budget = int(gib * 2 ** 30)
    return dict(blocks=size.blocks, paged=size.blocks // -(-context // block_size),
                perseq_best=budget // (context * token_bytes), perseq_worst=budget // (2 * context * token_bytes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="checkpoint directory (default: make one with %s)" % " ".join(CHECKPOINT))
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--contexts", default="512,2048")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=8, help="decode steps per repetition and cache")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--prefill-chunk", type=int, default=512)
    ap.add_argument("--kv-cache-gib", type=float, default=worker.DEFAULT_KV_CACHE_GIB,
                    help="the budget of the capacity comparison")
    ap.add_argument("--old-rev", default="11c0497", help="the commit of the per-sequence cache")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-paged-") as tmp:
        model = args.model
        if model is None:
            model = os.path.join(tmp, "model")
            testlib.generator().main(["--out", model] + CHECKPOINT)
        opts = dict(model=model, batch=args.batch, reps=args.reps, steps=args.steps, warmup=args.warmup,
                    block_size=args.block_size, prefill_chunk=args.prefill_chunk, old_rev=args.old_rev,
                    contexts=[int(c) for c in args.contexts.split(",")],
                    decode_tokens=args.warmup + args.reps * args.steps)
        cfg = ModelConfig.load(model)
        results = {}
        for world in [int(w) for w in args.tp.split(",")]:
            outdir = tempfile.mkdtemp(dir=tmp)
            mp.spawn(run_rank, args=(world, testlib.free_port(), opts, outdir), nprocs=world, join=True)
            with open(os.path.join(outdir, "result.json")) as f:
                results[world] = json.load(f)
    report(args, opts, cfg, results)


def report(args, opts, cfg, results):
    print("| TP | threads/rank | context | per-seq ms/step | paged ms/step | paged/per-seq |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for world, res in results.items():
        for context, r in res["contexts"].items():
            old, new = summarize(r["times"]["perseq"]), summarize(r["times"]["paged"])
            summary["tp%d-ctx%s" % (world, context)] = dict(perseq=old, paged=new, ratio=new[0] / old[0],
                                                           perseq_reserved=max(r["perseq_reserved"]),
                                                           final_len=r["final_len"])
            print("| %d | %d | %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.3f |" % (
                world, res["threads"], context, *old, *new, new[0] / old[0]))
    print()
    context = 2048
    print("Concurrent %d-token sequences in --kv-cache-gib %g (one rank's KV heads):" % (context, args.kv_cache_gib))
    print("| TP | blocks of %d | paged | per-seq best | per-seq worst (2x reserved) |" % opts["block_size"])
    print("|---|---|---|---|---|")
    for world in results:
        c = capacity(cfg, world, args.kv_cache_gib, opts["block_size"], context)
        summary["capacity-tp%d" % world] = c
        print("| %d | %d | %d | %d | %d |" % (world, c["blocks"], c["paged"], c["perseq_best"], c["perseq_worst"]))
    for key, s in summary.items():
        if key.endswith("ctx2048"):
            print("\nper-seq cache after %s: a sequence of %d tokens reserved up to %d"
                  % (key, s["final_len"], s["perseq_reserved"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
