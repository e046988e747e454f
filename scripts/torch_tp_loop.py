#!/usr/bin/env python3
"""The plain PyTorch decode loop that `tpcoord bench e2e --executor worker` is compared with.

The same model code as examples/torch-worker (its loader, TPModel, Runtime:
imported, not copied), without tpcoord: torch.multiprocessing spawns the TP
ranks (gloo on 127.0.0.1, env:// like torchrun), every rank runs every
forward pass, rank 0 gets the logits (gather), samples them with vLLM's
PyTorch sampling path (scripts/vllm_sampler_bench.py: temperature, softmax,
exponential_ noise, argmax; argmax alone at temperature 0) and sends the
tokens to the other ranks with dist.broadcast.

The workload is bench e2e's: one warm-up request (2 tokens), then --batch
concurrent requests whose prompts are cmd/tpcoord/internal/bench/job.Prompt's (three
tokens), each run for --tokens output tokens (no EOS stop), all at
--temperature. Unlike tpcoord's requests they have no per-request seeds:
vLLM's seeded rows take a slower per-row generator path, so the loop takes
the fast one (torch.manual_seed(0) for repeatability).

Prints one JSON line per TP size in the shape of bench e2e's lines (impl
"pytorch-loop"): output tokens/s over the batch (first forward pass to the
last token on every rank) and rank 0's median ms per step: forward (the
worker's forward pass with the logits gather), sample, broadcast. Each rank
takes --threads torch threads; by default the worker's default, the host's
cores divided by the ranks. Run it with a python that has torch
(/usr/bin/python3 on Debian).

    /usr/bin/python3 scripts/torch_tp_loop.py --model DIR --nproc 1,2,4 --batch 16 --tokens 32
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "torch-worker"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import vllm_sampler_bench as vllm  # noqa: E402
import testlib  # noqa: E402
import worker  # noqa: E402
from config import ModelConfig  # noqa: E402
from runtime import Runtime  # noqa: E402

WARMUP_TOKENS = 2
WARMUP_ID = 1 << 20  # a sequence id apart from the batch's


def prompt(i, vocab):
    """cmd/tpcoord/internal/bench/job.Prompt: request i's three prompt tokens."""
    return [(1 + 7 * i) % vocab, (100 + 13 * i) % vocab, (1000 + 31 * i) % vocab]


def sample(logits, temperature):
    """vLLM's sampler on rank 0's logits [rows, vocab] -> int64 tokens [rows]."""
    if temperature < 1e-5:  # tpcoord's and vLLM's greedy threshold
        return vllm.greedy(logits)
    temp = torch.full((logits.shape[0],), temperature, dtype=torch.float32)
    return vllm.forward_native(logits, temp, None, None)


class Loop:
    """One rank's decode loop over the worker's Runtime."""

    def __init__(self, runtime, rank, temperature):
        self.runtime, self.rank, self.temperature = runtime, rank, temperature
        self.steps = []  # rank 0: (forward, sample, broadcast) seconds per step

    def step(self, rows):
        """One forward pass of rows (the worker's v2 rows); every rank
        returns the tokens rank 0 sampled."""
        t0 = time.perf_counter()
        logits = self.runtime.step_v2([], rows)
        t1 = time.perf_counter()
        if self.rank == 0:
            toks = sample(logits, self.temperature).to(torch.int64)
        else:
            toks = torch.empty(len(rows), dtype=torch.int64)
        t2 = time.perf_counter()
        if dist.is_initialized():
            dist.broadcast(toks, src=0)
        t3 = time.perf_counter()
        self.steps.append((t1 - t0, t2 - t1, t3 - t2))
        return toks.tolist()

    def generate(self, ids, prompts, n):
        """Run the requests ids (with prompts) for n tokens each; -> tokens."""
        out = [[] for _ in ids]
        rows = [(seq, 1, 0, len(p), np.asarray(p, dtype=np.int32)) for seq, p in zip(ids, prompts)]
        for _ in range(n):
            toks = self.step(rows)
            for k, t in enumerate(toks):
                out[k].append(t)
            rows = [(seq, 0, len(p) + len(o) - 1, len(p), np.asarray(o[-1:], dtype=np.int32))
                    for seq, p, o in zip(ids, prompts, out)]
        return out


def run_rank(rank, world, port, opts, outdir):
    """One TP rank: load the shard as the worker does, warm up, run the
    batch; rank 0 writes the result and the tokens to outdir."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    threads = opts["threads"] or worker.default_threads(os.environ)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = ModelConfig.load(opts["model"])
    wargs = argparse.Namespace(model=opts["model"], compute_dtype=opts["compute_dtype"], backend="gloo",
                               no_mkldnn=False)
    model = worker.Loaded(wargs).get(cfg, rank, world)  # loads the shard, then init_process_group
    loop = Loop(Runtime(model, opts["prefill_chunk"]), rank, opts["temperature"])
    loop.generate([WARMUP_ID], [prompt(0, cfg.vocab)], WARMUP_TOKENS)
    loop.runtime.reset()
    loop.steps = []
    batch = opts["batch"]
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    out = loop.generate(list(range(batch)), [prompt(i, cfg.vocab) for i in range(batch)], opts["tokens"])
    elapsed = time.perf_counter() - start
    if rank == 0:
        with open(os.path.join(outdir, "result.json"), "w") as f:
            json.dump(dict(elapsed=elapsed, steps=loop.steps, tokens=out, threads=threads, vocab=cfg.vocab), f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def median_ms(values):
    return round(statistics.median(values) * 1000, 3) if values else 0.0


def result_line(world, opts, res):
    """A line in the shape of bench e2e's (impl "pytorch-loop")."""
    n = sum(len(t) for t in res["tokens"])
    steps = res["steps"]
    return {
        "kind": "combo", "cpu": vllm.cpu_name(), "cores": vllm._cores(),
        "python": platform.python_version(), "torch": torch.__version__,
        "nproc": world, "batch": opts["batch"], "vocab": res["vocab"], "impl": "pytorch-loop",
        "tokens": opts["tokens"], "combo": "pytorch-loop", "threads": res["threads"],
        "temperature": opts["temperature"], "output_tokens": n, "total_s": res["elapsed"],
        "output_tokens_per_s": n / res["elapsed"],
        "step_median_ms": {
            "steps": len(steps), "forward": median_ms([s[0] for s in steps]),
            "sample": median_ms([s[1] for s in steps]), "broadcast": median_ms([s[2] for s in steps]),
            "total": median_ms([sum(s) for s in steps]),
        },
    }


def tokens_lines(world, opts, tokens, vocab):
    for i, toks in enumerate(tokens):
        yield {"impl": "pytorch-loop", "nproc": world, "temperature": opts["temperature"], "request": i,
               "prompt": prompt(i, vocab), "tokens": toks}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json, *.safetensors)")
    ap.add_argument("--nproc", default="2", help="TP sizes, comma-separated (default 2)")
    ap.add_argument("--batch", type=int, default=16, help="concurrent requests (default 16)")
    ap.add_argument("--tokens", type=int, default=32, help="output tokens per request (default 32)")
    ap.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (0: greedy; default 0.8)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank (default: the worker's, this host's cores / ranks)")
    ap.add_argument("--compute-dtype", choices=sorted(worker.COMPUTE_DTYPES), default="float32")
    ap.add_argument("--prefill-chunk", type=int, default=512, help="the worker's --prefill-chunk (default 512)")
    ap.add_argument("--tokens-out", help="append each request's tokens here (JSON lines, as bench e2e's)")
    args = ap.parse_args(argv)
    try:
        args.nproc = [int(v) for v in args.nproc.split(",") if v]
    except ValueError:
        ap.error("--nproc: %r is not a comma-separated list of integers" % args.nproc)
    if not args.nproc or min(args.nproc) < 1:
        ap.error("--nproc: TP sizes must be >= 1")
    if args.batch < 1 or args.tokens < 1 or args.threads < 0 or args.prefill_chunk < 1:
        ap.error("--batch, --tokens and --prefill-chunk must be >= 1, --threads >= 0")
    if not args.temperature >= 0 or args.temperature == float("inf"):
        ap.error("--temperature must be a finite number >= 0")
    return args


def main(argv):
    args = parse_args(argv)
    opts = dict(model=args.model, batch=args.batch, tokens=args.tokens, temperature=args.temperature,
                threads=args.threads, compute_dtype=args.compute_dtype, prefill_chunk=args.prefill_chunk)
    for world in args.nproc:
        print("torch_tp_loop: TP %d: batch %d x %d tokens ..." % (world, args.batch, args.tokens),
              file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="torch-tp-loop-") as outdir:
            mp.spawn(run_rank, args=(world, testlib.free_port(), opts, outdir), nprocs=world, join=True)
            with open(os.path.join(outdir, "result.json")) as f:
                res = json.load(f)
        line = result_line(world, opts, res)
        print(json.dumps(line), flush=True)
        print("torch_tp_loop: TP %d: %d tokens in %.2fs: %.1f tokens/s" % (
            world, line["output_tokens"], line["total_s"], line["output_tokens_per_s"]), file=sys.stderr, flush=True)
        if args.tokens_out:
            with open(args.tokens_out, "a") as f:
                for rec in tokens_lines(world, opts, res["tokens"], res["vocab"]):
                    f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
