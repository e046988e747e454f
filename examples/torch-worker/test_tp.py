"""Tensor parallelism: TP 1, 2 and 4 processes (torch.multiprocessing,
gloo on 127.0.0.1) run a decode scenario whose batch changes every step
(protocol v2, the runtime's own blocks), and greedy decoding through
protocol v3 FORWARDs (chunked prefill, shuffled block tables, rows
starting with a cached prefix) on the checkpoints the e2e tests build;
rank 0's logits must match an unsharded full-recompute reference, and the
v3 greedy tokens those of e2e/testdata/llama_reference.py."""

import datetime
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
import torch
import torch.multiprocessing as mp

import testlib
from config import ModelConfig
from model import Comm, TPModel, block_bytes
from runtime import Runtime, StepError
from safetensors_io import Checkpoint

# float32 compute against the float64 reference: differences are rounding
# (measured ~1e-5 on logits with a spread of ~3).
TOLERANCE = 1e-4
# bfloat16 compute (8-bit mantissa) drifts by ~0.1-0.3 on logits spread ~3;
# a sharding bug moves them by the whole spread.
BF16_TOLERANCE = 0.5


# v2 cases: the runtime's blocks of this size from a pool of this many.
V2_BLOCK_SIZE, V2_BLOCKS = 4, 64


def _load(model_dir, rank, world, dtype, mkldnn, blocks, block_size):
    ck = Checkpoint(model_dir)
    reduce_dtype = torch.float32 if dtype != torch.float32 else None
    model = TPModel(ModelConfig.load(model_dir), ck, rank, world, dtype, Comm(world, reduce_dtype), mkldnn)
    ck.close()
    model.allocate_pool(blocks, block_size)
    return model


def _greedy_v3(runtime, agent, rank, world):
    """Drive agent's FORWARDs; rank 0 picks the argmax and every rank gets
    it. -> [(histories of the sampled rows, their logits)] on rank 0."""
    import torch.distributed as dist
    record = []
    while not agent.done():
        finished, rows = agent.forward()
        histories = agent.histories()
        logits, sampled = runtime.step_v3(finished, rows)
        if rank == 0 and logits is not None:
            record.append((histories, logits))
        tokens = logits.argmax(1) if rank == 0 and logits is not None else torch.zeros(len(sampled), dtype=torch.long)
        if world > 1 and sampled:
            dist.broadcast(tokens, src=0)
        agent.sampled(tokens.tolist())
    return record


def _check_prefix_refusals(runtime, rank):
    """Every rank refuses testlib.PREFIX_REFUSALS alike, before any
    collective (a refused FORWARD changes nothing, so they run in turn)."""
    runtime.step_v3([], [_row(testlib.PREFIX_LIVE)])
    for tag, rows, want in testlib.PREFIX_REFUSALS:
        try:
            runtime.step_v3([], [_row(r) for r in rows])
        except StepError as e:
            assert want in str(e), "rank %d, %s: %r lacks %r" % (rank, tag, str(e), want)
        else:
            raise AssertionError("rank %d, %s: the FORWARD was accepted" % (rank, tag))


def _row(row):
    seq_id, flags, position, p, tokens, blocks = row
    return seq_id, flags, position, p, np.array(tokens, dtype=np.int64), list(blocks)


def _child(rank, world, port, cases, outdir):
    """One TP rank: run every case; rank 0 saves its logits (and the v3
    greedy tokens). The pool's memory must stay where it was allocated."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo")
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    for i, case in enumerate(cases):
        if case["kind"] == "v2":
            model = _load(case["dir"], rank, world, case["dtype"], case["mkldnn"], V2_BLOCKS, V2_BLOCK_SIZE)
            ptrs = model.pool.data_ptrs()
            runtime = Runtime(model, case["chunk"])
            outs = [runtime.step_v2(finished, rows) for finished, rows in case["steps"]]
        else:
            model = _load(case["dir"], rank, world, torch.float32, None, case["blocks"], case["block_size"])
            ptrs = model.pool.data_ptrs()
            agent_class = testlib.PrefixAgent if case["kind"] == "prefix" else testlib.V3Agent
            agent = agent_class(case["requests"], case["block_size"], case["blocks"], case["chunk"], seed=i)
            record = _greedy_v3(Runtime(model, case["prefill_chunk"]), agent, rank, world)
            outs = dict(record=record, tokens=agent.outputs())
            if case["kind"] == "prefix":
                _check_prefix_refusals(Runtime(model, case["prefill_chunk"]), rank)
        assert model.pool.data_ptrs() == ptrs, "rank %d: the KV pool moved" % rank
        want = model.pool.blocks * block_bytes(model.cfg, model.lay.kv_heads, model.dtype, model.pool.block_size)
        assert model.pool.nbytes() == want, "rank %d: pool of %d bytes, not %d" % (rank, model.pool.nbytes(), want)
        if rank == 0:
            torch.save(outs, os.path.join(outdir, "case%d.pt" % i))
        elif case["kind"] == "v2":
            assert all(o is None for o in outs), "rank %d got logits" % rank
    if world > 1:
        dist.destroy_process_group()


class TPTest(unittest.TestCase):
    max_diff = 0.0

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tp-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)
        print("\nmax |TP - unsharded reference| over float32-compute cases: %.3g" % TPTest.max_diff,
              file=sys.stderr)

    def run_world(self, world, specs, v3=(), prefix=()):
        """specs: v2 cases [(name, generator flags, compute dtype, prefill chunk[, mkldnn])];
        v3: greedy cases [(name, generator flags, block size, blocks, FORWARD chunk, prefill chunk)];
        prefix: v3 greedy cases of testlib.prefix_requests (block size 4, FORWARD chunk 5)
        [(name, generator flags, blocks, prefill chunk)], then the refusals of cached prefixes."""
        cases, checks = [], []
        for name, flags, dtype, chunk, *mkldnn in specs:
            d = os.path.join(self.tmp, name)
            cfg, weights = testlib.make_checkpoint(d, **flags)
            steps = testlib.scenario(testlib.Reference(cfg, weights))
            cases.append(dict(kind="v2", dir=d, dtype=dtype, chunk=chunk, mkldnn=mkldnn[0] if mkldnn else None,
                              steps=[(s.finished, s.rows) for s in steps]))
            checks.append(lambda got, name=name, dtype=dtype, steps=steps: self.check(name, dtype, steps, got))
        for name, flags, bs, blocks, chunk, prefill in v3:
            d = os.path.join(self.tmp, name)
            cfg, weights = testlib.make_checkpoint(d, **flags)
            requests = testlib.greedy_requests(cfg["vocab_size"])
            cases.append(dict(kind="v3", dir=d, requests=requests, block_size=bs, blocks=blocks, chunk=chunk,
                              prefill_chunk=prefill))
            checks.append(lambda got, name=name, d=d, requests=requests, ref=testlib.Reference(cfg, weights):
                          self.check_v3(name, d, requests, ref, got))
        for name, flags, blocks, prefill in prefix:
            d = os.path.join(self.tmp, name)
            cfg, weights = testlib.make_checkpoint(d, **flags)
            requests = testlib.prefix_requests(cfg["vocab_size"])
            cases.append(dict(kind="prefix", dir=d, requests=requests, block_size=4, blocks=blocks, chunk=5,
                              prefill_chunk=prefill))
            checks.append(lambda got, name=name, d=d, requests=[(p, n) for p, n, _, _ in requests],
                          ref=testlib.Reference(cfg, weights): self.check_v3(name, d, requests, ref, got))
        outdir = tempfile.mkdtemp(dir=self.tmp)
        mp.spawn(_child, args=(world, testlib.free_port(), cases, outdir), nprocs=world, join=True)
        for i, check in enumerate(checks):
            check(torch.load(os.path.join(outdir, "case%d.pt" % i)))

    def check_v3(self, name, model_dir, requests, ref, got):
        """Greedy tokens equal the e2e reference's; every sampled row's
        logits match the float64 reference on its history."""
        self.assertEqual(got["tokens"], testlib.e2e_greedy(model_dir, requests), "%s: greedy tokens" % name)
        worst = 0.0
        for histories, logits in got["record"]:
            expected = torch.stack([ref.logits(h) for _, h in histories])
            worst = max(worst, (logits.double() - expected).abs().max().item())
        self.assertLess(worst, TOLERANCE, name)
        TPTest.max_diff = max(TPTest.max_diff, worst)
        print("\n  %s: greedy tokens equal the reference's; |logit - reference| max %.3g" % (name, worst),
              file=sys.stderr, end="")

    def check(self, name, dtype, steps, got):
        self.assertEqual(len(got), len(steps))
        worst, total, count = 0.0, 0.0, 0
        for k, (step, logits) in enumerate(zip(steps, got)):
            self.assertEqual(tuple(logits.shape), tuple(step.expected.shape), "%s step %d" % (name, k + 1))
            diff = (logits.double() - step.expected).abs()
            worst = max(worst, diff.max().item())
            total, count = total + diff.sum().item(), count + diff.numel()
            if dtype == torch.float32:
                self.assertTrue(torch.equal(logits.argmax(1), step.expected.argmax(1)),
                                "%s step %d: greedy tokens differ" % (name, k + 1))
        if dtype == torch.float32:
            self.assertLess(worst, TOLERANCE, name)
            TPTest.max_diff = max(TPTest.max_diff, worst)
        else:
            self.assertLess(worst, BF16_TOLERANCE, name)
            self.assertLess(total / count, BF16_TOLERANCE / 10, name)
        print("\n  %s: |logit - reference| max %.3g, mean %.3g" % (name, worst, total / count),
              file=sys.stderr, end="")

    @staticmethod
    def v3_cases(world):
        """The e2e checkpoints through protocol v3: llama with 4-token blocks
        and 5-token FORWARD chunks, granite with 3-token blocks and 7-token
        chunks; pools small enough that freed blocks are reused."""
        return [("tp%d-v3-e2e-llama-f32" % world, testlib.E2E_LLAMA_F32, 4, 24, 5, 8),
                ("tp%d-v3-e2e-granite-bf16" % world, testlib.E2E_GRANITE_BF16, 3, 28, 7, 4)]

    @staticmethod
    def prefix_cases(world):
        """Rows starting with a cached prefix, on the e2e llama f32
        checkpoint: prefill passes of 8 and 3 tokens (a prefix row's
        suffix split across passes too)."""
        return [("tp%d-v3-prefix-llama-f32" % world, testlib.E2E_LLAMA_F32, 40, 8),
                ("tp%d-v3-prefix-llama-f32-pass3" % world, testlib.E2E_LLAMA_F32, 40, 3)]

    def test_tp1(self):
        # The float32 matmuls through oneDNN (default) and through torch's BLAS.
        self.run_world(1, [("tp1-f32", dict(seed=11), torch.float32, 8),
                           ("tp1-f32-blas", dict(seed=13), torch.float32, 8, False),
                           ("tp1-bf16-compute", dict(seed=12), torch.bfloat16, 512)], self.v3_cases(1),
                       self.prefix_cases(1))

    def test_tp2(self):
        # 4 KV heads split 2 per rank; vocab 1001 does not divide by 2.
        self.run_world(2, [("tp2-f16-tied", dict(seed=21, dtype="f16", kv_heads=4, vocab=1001,
                                                 tie_embeddings=True), torch.float32, 8),
                           ("tp2-bf16-compute", dict(seed=22, dtype="bf16"), torch.bfloat16, 8)], self.v3_cases(2),
                       self.prefix_cases(2))

    def test_tp4(self):
        # 2 KV heads replicated over 4 ranks; chunk 2 also splits the decode batch.
        self.run_world(4, [("tp4-bf16-sharded-granite", dict(seed=41, dtype="bf16", shards=3, granite=True),
                            torch.float32, 8),
                           ("tp4-f32-vocab1001", dict(seed=42, kv_heads=4, vocab=1001, rope_theta=500000.0),
                            torch.float32, 2)], self.v3_cases(4))


if __name__ == "__main__":
    unittest.main()
