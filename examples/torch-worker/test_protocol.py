"""worker.py over the worker protocol, driven by a small test agent
(agentlib): handshake, v1 and v2 FORWARDs against the unsharded reference,
the errors the worker owes the agent, and TP 2 over env://."""

import os
import shutil
import socket
import sys
import tempfile
import unittest

import numpy as np
import torch

import agentlib
import testlib
from agentlib import BFLOAT16, FLOAT16, FLOAT32, Client, WorkerError

TOLERANCE = 1e-4


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
        cls.proc = agentlib.start_worker(cls.model, cls.log, "--listen", cls.path, "--prefill-chunk", "8")

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
        c = self.connect(version=3)
        self.assertEqual(c.hello_ok()["version"], 2)
        c.close()  # the worker serves one agent at a time
        c = self.connect(version=0)
        with self.assertRaises(WorkerError) as cm:
            c.hello_ok()
        self.assertIn("version 0", str(cm.exception))

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
        self.assertIn("lm_head.weight", agentlib.tail(self.log))

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
