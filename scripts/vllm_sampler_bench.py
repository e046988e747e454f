#!/usr/bin/env python3
"""Time vLLM's CPU sampling path in PyTorch on the shapes `tpcoord bench sampler` uses.

Mirrors vllm/v1/sample/ops/topk_topp_sampler.py (TopKTopPSampler.forward_native)
and vllm/v1/sample/sampler.py as of vLLM 0.6-0.8:

  logits = logits / temperature                      # apply_temperature
  logits = apply_top_k_top_p(logits, k, p)           # sort-based masking
  probs  = logits.softmax(dim=-1, dtype=torch.float32)
  q      = torch.empty_like(probs).exponential_()    # random_sample
  token  = probs.div_(q).argmax(dim=-1)

One thread (torch.set_num_threads(1)), like the Go benchmark. Prints one JSON
object per case with the fields of `tpcoord bench sampler --json`, impl
"pytorch". The logits are synthetic and LLM-like (a few large values over a
Gaussian body), as in the Go benchmark; only shapes matter for the time.
"""

import argparse
import json
import platform
import statistics
import sys
import time

import torch


def apply_top_k_top_p(logits, k, p):
    """vLLM's apply_top_k_top_p: sort once, mask top-k then top-p, scatter back."""
    if k is None and p is None:
        return logits
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)

    if k is not None:
        # Apply top-k: the k-th largest value is the threshold.
        top_k_mask = logits_sort.size(1) - k.to(torch.long)  # shape: B
        top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
        top_k_mask = logits_sort < top_k_mask
        logits_sort.masked_fill_(top_k_mask, -float("inf"))

    if p is not None:
        # Apply top-p.
        probs_sort = logits_sort.softmax(dim=-1)
        probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
        top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
        # at least one
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))

    # Re-sort the probabilities.
    logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    return logits


def random_sample(probs):
    """vLLM's random_sample without per-request generators: exponential race."""
    q = torch.empty_like(probs)
    q.exponential_()
    return probs.div_(q).argmax(dim=-1).view(-1)


def forward_native(logits, temperature, k, p):
    logits = logits.div_(temperature.unsqueeze(dim=1))  # Sampler.apply_temperature
    logits = apply_top_k_top_p(logits, k, p)
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    return random_sample(probs)


def greedy(logits):
    return logits.argmax(dim=-1).view(-1)


def synthetic_logits(batch, vocab, gen):
    x = torch.randn(batch, vocab, generator=gen, dtype=torch.float32) * 2.0
    hot = torch.randint(0, vocab, (batch, 32), generator=gen)
    x.scatter_(1, hot, torch.rand(batch, 32, generator=gen) * 10.0 + 10.0)
    return x


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + " (" + platform.machine() + ")"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ints(s):
    return [int(v) for v in s.split(",") if v]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=ints, default=[100352], help="vocabulary sizes, comma-separated")
    ap.add_argument("--batch", type=ints, default=[1, 8, 32, 64], help="batch sizes, comma-separated")
    ap.add_argument("--mode", default="plain,topk,topp",
                    help="modes: plain, topk, topp, topk_topp, minp, greedy (comma-separated)")
    ap.add_argument("--iters", type=int, default=10, help="timed calls per case")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per case")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--min-p", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.iters < 1:
        ap.error("--iters must be >= 1")
    modes = [m for m in args.mode.split(",") if m]
    known = {"plain", "topk", "topp", "topk_topp", "minp", "greedy"}
    for m in modes:
        if m not in known:
            ap.error("unknown mode %r (known: %s)" % (m, ", ".join(sorted(known))))

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    machine = {"cpu": cpu_name(), "cores": _cores(),
               "torch": torch.__version__, "python": platform.python_version()}

    for vocab in args.vocab:
        for batch in args.batch:
            base = synthetic_logits(batch, vocab, gen)
            temp = torch.full((batch,), args.temperature, dtype=torch.float32)
            k = torch.full((batch,), args.top_k, dtype=torch.long)
            p = torch.full((batch,), args.top_p, dtype=torch.float32)
            for mode in modes:
                if mode == "greedy":
                    def call(l):
                        return greedy(l)
                elif mode == "minp":
                    # vLLM's Sampler.apply_min_p, then the plain random path.
                    def call(l):
                        l = l.div_(temp.unsqueeze(dim=1))
                        probs = torch.softmax(l, dim=-1)
                        top = probs.amax(dim=-1, keepdim=True)
                        l = l.masked_fill_(probs < args.min_p * top, -float("inf"))
                        return random_sample(l.softmax(dim=-1, dtype=torch.float32))
                else:
                    kk = k if mode in ("topk", "topk_topp") else None
                    pp = p if mode in ("topp", "topk_topp") else None

                    def call(l, kk=kk, pp=pp):
                        return forward_native(l, temp, kk, pp)
                times = []
                for i in range(args.warmup + args.iters):
                    l = base.clone()  # the path modifies logits in place; copy outside the timing
                    t0 = time.perf_counter_ns()
                    tok = call(l)
                    t1 = time.perf_counter_ns()
                    assert tok.shape == (batch,)
                    if i >= args.warmup:
                        times.append((t1 - t0) / 1e6)
                times.sort()
                p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
                rec = {
                    "impl": "pytorch", "noise": "inline", "mode": mode, "vocab": vocab,
                    "batch": batch, "iters": args.iters,
                    "median_ms": statistics.median(times), "p90_ms": p90,
                }
                rec.update(machine)
                print(json.dumps(rec), flush=True)
                print("vllm_sampler_bench: %s batch %d vocab %d: %.3f ms" % (mode, batch, vocab, rec["median_ms"]),
                      file=sys.stderr, flush=True)


def _cores():
    import os
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 0


if __name__ == "__main__":
    main(sys.argv[1:])
