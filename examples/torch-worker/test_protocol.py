"""worker.py over the worker protocol, driven by a small test agent
(agentlib): handshake, v1, v2 and v3 FORWARDs against the unsharded
reference, the errors the worker owes the agent (v3's block rules, the KV
pool's size), and TP 2 over env://."""

import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

import agentlib
import protocol
import testlib
import worker
from agentlib import BFLOAT16, FLOAT16, FLOAT32, Client, WorkerError

TOLERANCE = 1e-4
NEW, SAMPLE = 1, 2

# The listening worker's pool: 64 blocks of 4 tokens. A block of the tiny
# model (2 layers, K and V, 2 KV heads, head dim 16, float32) is
# 2*2*2*4*16*4 = 2048 bytes; 64 of them are 2^17 bytes = 2^-13 GiB.
BLOCK_SIZE, BLOCKS = 4, 64
KV_GIB = BLOCKS * 2048 / 2 ** 30


def gib_flag(gib):
    return "%.17g" % gib


def check_logits(test, got, expected, what, bits=None):
    """bits: the mantissa bits of a 16-bit logits dtype (one rounding)."""
    expected = expected.numpy()
    if bits:  # half an ulp, relative, plus the float32 tolerance
        tol = np.abs(expected) * 2.0 ** -bits + TOLERANCE
        test.assertTrue(np.all(np.abs(got - expected) <= tol), what)
    else:
        test.assertLess(np.abs(got - expected).max(), TOLERANCE, what)
        test.assertTrue(np.array_equal(got.argmax(1), expected.argmax(1)), what)


class ListenWorkerTest(unittest.TestCase):
    """One `worker.py --listen` process serves every test's connections."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="proto-test-")
        cls.model = os.path.join(cls.tmp, "model")
        cfg, weights = testlib.make_checkpoint(cls.model, seed=5, eos=2)
        cls.steps = testlib.scenario(testlib.Reference(cfg, weights))
        cls.ref = testlib.Reference(cfg, weights)
        cls.path = os.path.join(cls.tmp, "worker.sock")
        cls.log = os.path.join(cls.tmp, "worker.log")
        cls.proc = agentlib.start_worker(cls.model, cls.log, "--listen", cls.path, "--prefill-chunk", "8",
                                         "--block-size", str(BLOCK_SIZE), "--kv-cache-gib", gib_flag(KV_GIB))

    @classmethod
    def tearDownClass(cls):
        cls.proc.kill()
        cls.proc.wait()
        shutil.rmtree(cls.tmp)

    def connect(self, **hello):
        c = Client(agentlib.connect(self.path, self.proc, self.log))
        self.addCleanup(c.close)
        c.hello(**hello)
        return c

    def test_log_lines(self):
        """The worker logs with the time and the level, and its model load
        shard by shard (plain lines: its stderr is a file here)."""
        c = self.connect()
        c.hello_ok()
        log = agentlib.tail(self.log, 1 << 20)
        stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} INFO  torch-worker\[%d\]: " % self.proc.pid
        self.assertRegex(log, stamp + "listening on ")
        self.assertRegex(log, stamp + r"loaded shard 1/1 model\.safetensors: \d+ of \d+ tensors, [\d.]+ MiB in ")
        self.assertRegex(log, stamp + r"rank 0 of 1: loaded ")

    def test_v2_deltas_match_reference(self):
        c = self.connect(version=2, max_batch=4)
        ok = c.hello_ok()
        self.assertEqual({k: ok[k] for k in ("version", "rank", "world", "vocab", "max_batch", "eos", "dtype",
                                             "order", "pid")},
                         dict(version=2, rank=0, world=1, vocab=1000, max_batch=4, eos=2, dtype=FLOAT32,
                              order=agentlib.NATIVE, pid=self.proc.pid))
        for k, s in enumerate(self.steps):
            c.forward_v2(100 + 3 * k, s.finished, s.rows)
            self.assertEqual(c.forward_ok(), (100 + 3 * k, len(s.rows)))
            check_logits(self, c.shm.logits(len(s.rows)), s.expected, "v2 step %d" % (k + 1))

    def test_v1_histories_and_bf16_logits(self):
        c = self.connect(version=1, dtype=BFLOAT16)
        ok = c.hello_ok()
        self.assertEqual((ok["version"], ok["dtype"]), (1, BFLOAT16))
        for k, s in enumerate(self.steps):
            c.forward_v1(k + 1, s.histories)
            self.assertEqual(c.forward_ok(), (k + 1, len(s.histories)))
            check_logits(self, c.shm.logits(len(s.rows)), s.expected, "v1 step %d" % (k + 1), bits=8)
        # A history that does not extend what the worker holds (an earlier
        # token changed) is recomputed from scratch.
        rows = [(i, p, h.copy()) for i, p, h in self.steps[-1].histories]
        rows[1][2][2] = (rows[1][2][2] + 1) % 1000
        rows = [(i, p, np.append(h, 7)) for i, p, h in rows]
        c.forward_v1(len(self.steps) + 1, rows)
        c.forward_ok()
        expected = torch.stack([self.ref.logits(h) for _, _, h in rows])
        check_logits(self, c.shm.logits(len(rows)), expected, "v1 diverged history", bits=8)

    def test_float16_logits(self):
        c = self.connect(dtype=FLOAT16)
        self.assertEqual(c.hello_ok()["dtype"], FLOAT16)
        for k, s in enumerate(self.steps[:3]):
            c.forward_v2(k + 1, s.finished, s.rows)
            c.forward_ok()
            check_logits(self, c.shm.logits(len(s.rows)), s.expected, "float16 step %d" % (k + 1), bits=11)

    def test_version_negotiation(self):
        c = self.connect(version=2)
        self.assertNotIn("blocks", c.hello_ok())  # v2: no KV fields
        c.close()  # the worker serves one agent at a time
        c = self.connect(version=4)
        ok = c.hello_ok()
        self.assertEqual((ok["version"], ok["block_size"], ok["blocks"], ok["max_model_len"]),
                         (3, BLOCK_SIZE, BLOCKS, 4096))
        c.close()
        c = self.connect(version=0)
        with self.assertRaises(WorkerError) as cm:
            c.hello_ok()
        self.assertIn("version 0", str(cm.exception))

    def test_v3_greedy_chunked_prefill_matches_reference(self):
        # Prompts fed 3 tokens per FORWARD, shuffled tables from the pool;
        # greedy tokens from the shm rows of the SAMPLE rows.
        c = self.connect(version=3, max_batch=4)
        self.assertEqual(c.hello_ok()["version"], 3)
        requests = testlib.greedy_requests(1000)
        agent = testlib.V3Agent(requests, BLOCK_SIZE, BLOCKS, chunk=3, seed=3)
        step = 0
        while not agent.done():
            step += 1
            finished, rows = agent.forward()
            histories = agent.histories()
            c.forward_v3(step, finished, rows)
            self.assertEqual(c.forward_ok(), (step, len(rows)))
            logits = c.shm.logits(len(rows))
            sampled = [i for i, r in enumerate(rows) if r[1] & SAMPLE]
            expected = torch.stack([self.ref.logits(h) for _, h in histories]) if histories else None
            if sampled:
                check_logits(self, logits[sampled], expected, "v3 step %d" % step)
            agent.sampled([int(logits[i].argmax()) for i in sampled])
        self.assertEqual(agent.outputs(), testlib.e2e_greedy(self.model, requests))

    def test_v3_rows_without_sample(self):
        c = self.connect(version=3)
        c.hello_ok()
        c.forward_v3(1, [], [(5, NEW, 0, 9, [1, 2, 3, 4, 5], [7, 3])])
        self.assertEqual(c.forward_ok(), (1, 1))
        c.forward_v3(2, [], [(5, SAMPLE, 5, 9, [6, 7, 8, 9], [40])])
        self.assertEqual(c.forward_ok(), (2, 1))
        check_logits(self, c.shm.logits(1), self.ref.logits(list(range(1, 10)))[None], "v3 after two chunks")

    def test_v3_step_errors_name_the_sequence_and_block(self):
        new7 = (7, NEW | SAMPLE, 0, 3, [1, 2, 3], [5])
        cases = [
            ("new but known", [(7, NEW | SAMPLE, 0, 3, [1, 2, 3], [6])],
             "sequence 7 is flagged NEW but the worker already holds it (3 tokens)"),
            ("new at a position", [(9, NEW, 2, 3, [1], [6])],
             "sequence 9 is NEW at position 2, not a multiple of the block size 4"),
            ("unknown", [(8, SAMPLE, 3, 3, [4], [])], "sequence 8 is not flagged NEW but the worker does not hold it"),
            ("position", [(7, SAMPLE, 4, 3, [4], [])],
             "sequence 7: FORWARD says position 4, the worker's cache holds 3"),
            ("no tokens", [(7, SAMPLE, 3, 3, [], [])], "row 0 (sequence 7) has no tokens"),
            ("flags", [(7, 4 | SAMPLE, 3, 3, [4], [])], "row 0 (sequence 7): unknown flag bits 0x4"),
            ("vocab", [(9, NEW, 0, 1, [1000], [9])], "sequence 9: token 1000 is outside the vocab"),
            ("twice", [(7, SAMPLE, 3, 3, [4], []), (7, SAMPLE, 3, 3, [4], [])], "sequence 7 appears twice"),
            ("block outside", [(9, NEW, 0, 1, [1], [BLOCKS])],
             "sequence 9: block %d is outside the worker's %d blocks" % (BLOCKS, BLOCKS)),
            ("not covered", [(7, SAMPLE, 3, 3, [4, 5], [])],
             "sequence 7: its table of 1 blocks (4 tokens) does not cover position 3 + 2 tokens (2 blocks of 4)"),
            ("new not covered", [(9, NEW, 0, 1, [1], [])],
             "sequence 9: its table of 0 blocks (0 tokens) does not cover position 0 + 1 tokens (1 blocks of 4)"),
            ("live table", [(9, NEW, 0, 1, [1], [5])],
             "sequence 9 writes block 5 (tokens [0, 1)), which is also in the table of sequence 7"),
            ("two rows", [(9, NEW, 0, 1, [1], [10]), (10, NEW, 0, 1, [1], [10])],
             "sequence 9 writes block 10 (tokens [0, 1)), which is also in the table of sequence 10"),
            ("one row", [(9, NEW, 0, 5, [1] * 5, [11, 11])], "sequence 9: block 11 is twice in its table (at 0 and 1)"),
            ("known row", [(7, SAMPLE, 3, 3, [4, 5], [5])], "sequence 7: block 5 is twice in its table (at 0 and 1)"),
        ]
        for tag, rows, want in cases:
            with self.subTest(tag):
                c = self.connect(version=3)
                c.hello_ok()
                c.forward_v3(1, [], [new7])
                self.assertEqual(c.forward_ok(), (1, 1))
                c.forward_v3(2, [], rows)
                with self.assertRaises(WorkerError) as cm:
                    c.forward_ok()
                self.assertIn(want, str(cm.exception))
        # Finished ids free their tables first: 7's block 5 goes to 9 in the
        # same FORWARD, and 7 may come back as NEW.
        c = self.connect(version=3)
        c.hello_ok()
        c.forward_v3(1, [], [new7])
        c.forward_ok()
        c.forward_v3(2, [7, 12345], [(9, NEW | SAMPLE, 0, 3, [1, 2, 3], [5]), (7, NEW | SAMPLE, 0, 3, [1, 2, 3], [6])])
        self.assertEqual(c.forward_ok(), (2, 2))
        expected = self.ref.logits([1, 2, 3])[None].repeat(2, 1)
        check_logits(self, c.shm.logits(2), expected, "blocks reused after finished")

    def test_v3_cached_prefix(self):
        # 9 is NEW at position 8 over 7's first two blocks while 7 decodes;
        # after 7 finished, 11 is NEW at 4 over its first block, and 12
        # writes over 7's last block, freed.
        c = self.connect(version=3)
        c.hello_ok()
        c.forward_v3(1, [], [(7, NEW | SAMPLE, 0, 10, list(range(1, 11)), [5, 6, 7])])
        self.assertEqual(c.forward_ok(), (1, 1))
        c.forward_v3(2, [], [(7, SAMPLE, 10, 10, [11], []), (9, NEW | SAMPLE, 8, 10, [20, 21], [5, 6, 8])])
        self.assertEqual(c.forward_ok(), (2, 2))
        expected = torch.stack([self.ref.logits(list(range(1, 12))), self.ref.logits(list(range(1, 9)) + [20, 21])])
        check_logits(self, c.shm.logits(2), expected, "a cached prefix of a live sequence")
        c.forward_v3(3, [7], [(11, NEW | SAMPLE, 4, 5, [30], [5, 9]), (12, NEW | SAMPLE, 0, 5, [40] * 5, [7, 10])])
        self.assertEqual(c.forward_ok(), (3, 2))
        expected = torch.stack([self.ref.logits([1, 2, 3, 4, 30]), self.ref.logits([40] * 5)])
        check_logits(self, c.shm.logits(2), expected, "a cached prefix of a finished sequence")
        c.forward_v3(4, [], [(9, SAMPLE, 10, 10, [22], [])])
        self.assertEqual(c.forward_ok(), (4, 1))
        check_logits(self, c.shm.logits(1), self.ref.logits(list(range(1, 9)) + [20, 21, 22])[None],
                     "a prefix row decoding")

    def test_v3_cached_prefix_refusals(self):
        for tag, rows, want in testlib.PREFIX_REFUSALS:
            with self.subTest(tag):
                c = self.connect(version=3)
                c.hello_ok()
                c.forward_v3(1, [], [testlib.PREFIX_LIVE])
                self.assertEqual(c.forward_ok(), (1, 1))
                c.forward_v3(2, [], rows)
                with self.assertRaises(WorkerError) as cm:
                    c.forward_ok()
                self.assertIn(want, str(cm.exception))

    def test_vocab_mismatch_reports_checkpoint_values(self):
        # The agent compares and refuses; the worker states what it runs.
        c = self.connect(vocab=4096, eos=-1)
        ok = c.hello_ok()
        self.assertEqual((ok["vocab"], ok["eos"]), (1000, 2))

    def test_world_without_torchrun_env(self):
        c = self.connect(rank=1, world=2)
        with self.assertRaises(WorkerError) as cm:
            c.hello_ok()
        self.assertIn("rank 1 of world 2", str(cm.exception))
        self.assertIn("RANK and WORLD_SIZE are not set", str(cm.exception))

    def test_step_errors_name_the_sequence(self):
        new7 = (7, 1, 0, 3, [1, 2, 3])
        cases = [
            ("new but known", [new7], "sequence 7 is flagged NEW but the worker already holds it"),
            ("unknown", [(8, 0, 3, 3, [4])], "sequence 8 is not flagged NEW but the worker does not hold it"),
            ("position", [(7, 0, 4, 3, [4])], "sequence 7: FORWARD says position 4, the worker's cache holds 3"),
            ("flags", [(7, 2, 3, 3, [4])], "unknown flag bits 0x2"),
            ("vocab", [(9, 1, 0, 1, [1000])], "sequence 9: token 1000 is outside the vocab"),
            ("twice", [(7, 0, 3, 3, [4]), (7, 0, 3, 3, [4])], "sequence 7 appears twice"),
        ]
        for tag, rows, want in cases:
            with self.subTest(tag):
                c = self.connect()
                c.hello_ok()
                c.forward_v2(1, [], [new7])
                self.assertEqual(c.forward_ok(), (1, 1))
                c.forward_v2(2, [], rows)
                with self.assertRaises(WorkerError) as cm:
                    c.forward_ok()
                self.assertIn(want, str(cm.exception))
        # Finished ids free the state: 7 may come back as NEW.
        c = self.connect()
        c.hello_ok()
        c.forward_v2(1, [], [new7])
        c.forward_ok()
        c.forward_v2(2, [7, 12345], [new7])
        self.assertEqual(c.forward_ok(), (2, 1))


class ProtocolV3Test(unittest.TestCase):
    """protocol.py's v3 encoding and parsing against agentlib's (written
    independently)."""

    def test_hello_ok_v3(self):
        body = protocol.hello_ok(3, 0, 1, 1000, 8, 2, FLOAT32, 77, "w", kv=(16, 1234, 4096))
        self.assertEqual(len(body), 34 + 1 + 12)
        self.assertEqual(struct.unpack_from("<III", body, 35), (16, 1234, 4096))
        self.assertEqual(len(protocol.hello_ok(2, 0, 1, 1000, 8, 2, FLOAT32, 77, "w", kv=(16, 1234, 4096))), 35)

    def test_parse_forward_v3(self):
        rows = [(7, NEW | SAMPLE, 0, 3, [1, 2, 3], [9, 4]), (2 ** 40, 0, 17, 5, [999], [])]
        body = agentlib.encode_forward_v3(42, [3, 2 ** 63], rows)
        self.assertEqual(len(body), 16 + 8 * 2 + 28 + 12 + 8 + 28 + 4)
        step, finished, got = protocol.parse_forward_v3(memoryview(body), 8)
        self.assertEqual((step, finished), (42, [3, 2 ** 63]))
        self.assertEqual([(i, f, p, n, list(t), b) for i, f, p, n, t, b in got],
                         [(i, f, p, n, list(t), b) for i, f, p, n, t, b in rows])

    def test_parse_forward_v3_refusals(self):
        good = agentlib.encode_forward_v3(5, [], [(7, NEW, 0, 3, [1, 2, 3], [9, 4])])
        cases = [
            (good[:16 + 20], "step 5: row 0 header is truncated"),
            (good[:-8], "step 5 row 0 (sequence 7): 2 block ids overrun the FORWARD body"),
            (good[:16 + 28 + 4], "step 5 row 0 (sequence 7): 3 tokens overrun the FORWARD body"),
            (good + b"\0", "FORWARD of step 5 has 1 trailing bytes"),
            (agentlib.encode_forward_v3(5, [], []), "step 5 has 0 rows; 1 to max batch 8 are allowed"),
            (good[:12], "FORWARD of 12 bytes is too short"),
        ]
        for body, want in cases:
            with self.subTest(want):
                with self.assertRaises(protocol.ProtocolError) as cm:
                    protocol.parse_forward_v3(memoryview(body), 8)
                self.assertIn(want, str(cm.exception))


class PoolSizeTest(unittest.TestCase):
    """--kv-cache-gib -> blocks, and the refusals, without a worker."""

    def setUp(self):
        tmp = tempfile.mkdtemp(prefix="pool-size-")
        self.addCleanup(shutil.rmtree, tmp)
        testlib.make_checkpoint(tmp)
        self.cfg = worker.ModelConfig.load(tmp)

    def test_blocks(self):
        # 1 GiB of 2048-byte blocks; at TP 2 each rank holds 1 of the 2 KV heads.
        size = worker.PoolSize(self.cfg, 1, torch.float32, 1.0, 4)
        self.assertEqual((size.block_bytes, size.blocks, size.nbytes), (2048, 2 ** 19, 2 ** 30))
        size = worker.PoolSize(self.cfg, 2, torch.bfloat16, 0.5, 16)
        self.assertEqual((size.block_bytes, size.blocks), (2 * 2 * 1 * 16 * 16 * 2, 2 ** 29 // 2048))

    def test_refusals(self):
        size = worker.PoolSize(self.cfg, 1, torch.float32, 1.0, 4)
        with self.assertRaises(worker.HelloError) as cm:
            size.check_memory(2 ** 30 - 1)
        self.assertIn("takes 1073741824 bytes, more than the host's MemAvailable of 1073741823 bytes",
                      str(cm.exception))
        size.check_memory(2 ** 30)
        with self.assertRaises(worker.HelloError) as cm:
            worker.PoolSize(self.cfg, 1, torch.float32, 2047 / 2 ** 30, 4).check_blocks()
        self.assertIn("holds 0 KV blocks: one block of 4 tokens takes 2048 bytes", str(cm.exception))

    def test_mem_available(self):
        self.assertGreater(worker.mem_available(), 0)


class HelloErrorTest(unittest.TestCase):
    """Errors at HELLO: the ERROR frame carries the message."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="proto-err-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.log = os.path.join(self.tmp, "worker.log")

    def test_bad_checkpoint(self):
        model = os.path.join(self.tmp, "model")
        testlib.make_checkpoint(model, dtype="bf16")
        path = os.path.join(model, "model.safetensors")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 4)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(srv.close)
        sock_path = os.path.join(self.tmp, "agent.sock")
        srv.bind(sock_path)
        srv.listen(1)
        proc = agentlib.start_worker(model, self.log, "--socket", sock_path)
        self.addCleanup(proc.kill)
        c = Client(agentlib.accept(srv, proc, self.log))
        self.addCleanup(c.close)
        c.hello()
        with self.assertRaises(WorkerError) as cm:
            c.hello_ok()
        self.assertIn("lm_head.weight", str(cm.exception))
        self.assertIn(path, str(cm.exception))
        self.assertEqual(proc.wait(timeout=agentlib.DEADLINE), 1)
        self.assertRegex(agentlib.tail(self.log), r"\d\d\.\d{3} ERROR torch-worker\[%d\]: .*lm_head\.weight" % proc.pid)

    def listen(self, *flags):
        model = os.path.join(self.tmp, "model")
        testlib.make_checkpoint(model)
        sock_path = os.path.join(self.tmp, "worker.sock")
        proc = agentlib.start_worker(model, self.log, "--listen", sock_path, *flags)
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        c = Client(agentlib.connect(sock_path, proc, self.log))
        self.addCleanup(c.close)
        return c

    def test_pool_larger_than_mem_available(self):
        # 1000 GiB of 2048-byte blocks.
        c = self.listen("--block-size", "4", "--kv-cache-gib", "1000")
        c.hello(version=3)
        with self.assertRaises(WorkerError) as cm:
            c.hello_ok()
        blocks = 1000 * 2 ** 30 // 2048
        m = re.search(r"the KV pool of (\d+) blocks \(--kv-cache-gib 1000\) takes (\d+) bytes, more than the "
                      r"host's MemAvailable of (\d+) bytes", str(cm.exception))
        self.assertIsNotNone(m, str(cm.exception))
        self.assertEqual((int(m.group(1)), int(m.group(2))), (blocks, blocks * 2048))
        self.assertLess(int(m.group(3)), blocks * 2048)

    def test_pool_of_no_block(self):
        c = self.listen("--block-size", "4", "--kv-cache-gib", gib_flag(2047 / 2 ** 30))
        c.hello(version=3)
        with self.assertRaises(WorkerError) as cm:
            c.hello_ok()
        self.assertIn("holds 0 KV blocks: one block of 4 tokens takes 2048 bytes on this rank (2 KV heads)",
                      str(cm.exception))

    def test_v1_v2_sequence_larger_than_pool(self):
        # 3 blocks of 4 tokens.
        c = self.listen("--block-size", "4", "--kv-cache-gib", gib_flag(3 * 2048 / 2 ** 30))
        c.hello(version=2)
        self.assertEqual(c.hello_ok()["version"], 2)
        c.forward_v2(1, [], [(7, 1, 0, 5, list(range(5)))])
        self.assertEqual(c.forward_ok(), (1, 1))
        c.forward_v2(2, [], [(7, 0, 5, 5, [5]), (8, 1, 0, 5, list(range(5)))])
        with self.assertRaises(WorkerError) as cm:
            c.forward_ok()
        self.assertIn("sequence 8 does not fit the KV pool: 5 tokens need 2 more blocks of 4 tokens, "
                      "1 of the pool's 3 blocks are free", str(cm.exception))

    def test_bad_tp_split_and_rank_mismatch(self):
        model = os.path.join(self.tmp, "model")
        testlib.make_checkpoint(model)
        sock_path = os.path.join(self.tmp, "worker.sock")
        proc = agentlib.start_worker(model, self.log, "--listen", sock_path, env=dict(RANK="0", WORLD_SIZE="3"))
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        for rank, want in ((0, "tensor parallelism 3 does not divide num_attention_heads 4"),
                           (1, "HELLO says rank 1 of world 3, the environment says RANK=0 WORLD_SIZE=3")):
            c = Client(agentlib.connect(sock_path, proc, self.log))
            self.addCleanup(c.close)
            c.hello(rank=rank, world=3)
            with self.assertRaises(WorkerError) as cm:
                c.hello_ok()
            self.assertIn(want, str(cm.exception))


class TP2ProtocolTest(unittest.TestCase):
    """Two workers joined by env:// (as tpcoord sets it): rank 0 alone
    writes logits (gather), or every rank does (all_gather, for
    --sampling-ranks all), as the ranks' HELLOs agree."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="proto-tp2-")
        cls.model = os.path.join(cls.tmp, "model")
        cfg, weights = testlib.make_checkpoint(cls.model, seed=9, dtype="bf16", granite=True, shards=2)
        cls.steps = testlib.scenario(testlib.Reference(cfg, weights))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def start_pair(self, logits):
        """Start two workers and send each its HELLO (both before either
        answers: they rendezvous); logits[r] is rank r's logits flag."""
        tmp = tempfile.mkdtemp(dir=self.tmp)
        port = str(testlib.free_port())
        started = []
        for rank in range(2):
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.addCleanup(srv.close)
            path = os.path.join(tmp, "agent%d.sock" % rank)
            srv.bind(path)
            srv.listen(1)
            env = dict(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo")
            log = os.path.join(tmp, "worker%d.log" % rank)
            proc = agentlib.start_worker(self.model, log, "--socket", path, "--prefill-chunk", "8", env=env)
            self.addCleanup(lambda p=proc: (p.kill(), p.wait()))
            started.append((srv, proc, log))
        clients = [Client(agentlib.accept(*s)) for s in started]
        for c in clients:
            self.addCleanup(c.close)
        for rank, c in enumerate(clients):
            c.hello(rank=rank, world=2, logits=logits[rank])
        return clients

    def run_steps(self, clients, written):
        """Every step on both workers; written[r]: rank r writes logits."""
        for k, s in enumerate(self.steps):
            for c in clients:
                c.forward_v2(k + 1, s.finished, s.rows)
            want = [(k + 1, len(s.rows) if w else 0) for w in written]
            self.assertEqual([c.forward_ok() for c in clients], want)
            for rank, c in enumerate(clients):
                if written[rank]:
                    check_logits(self, c.shm.logits(len(s.rows)), s.expected,
                                 "TP 2 rank %d step %d" % (rank, k + 1))

    def test_tp2_logits_on_rank0(self):
        clients = self.start_pair([True, False])
        self.assertEqual([c.hello_ok()["world"] for c in clients], [2, 2])
        self.run_steps(clients, [True, False])

    def test_tp2_logits_on_every_rank(self):
        clients = self.start_pair([True, True])
        self.assertEqual([c.hello_ok()["rank"] for c in clients], [0, 1])
        self.run_steps(clients, [True, True])

    def test_tp2_ranks_disagree(self):
        # A follower with logits but not rank 0: no collective serves that;
        # both ranks refuse alike (neither is left in a collective).
        clients = self.start_pair([False, True])
        for c in clients:
            with self.assertRaises(WorkerError) as cm:
                c.hello_ok()
            self.assertIn("1 of 2 ranks are asked for logits (rank 0 not)", str(cm.exception))


if __name__ == "__main__":
    unittest.main(argv=sys.argv)
