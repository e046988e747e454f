"""The worker's log lines and its model-load progress (no torch needed)."""

import io
import logging
import os
import re
import sys
import unittest
from unittest import mock

import progress
import wlog
from progress import ShardProgress, tqdm_bars


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class TTY(io.StringIO):
    def isatty(self):
        return True


def capture(level="debug", env=None):
    out = io.StringIO()
    wlog.setup(level, out, env={} if env is None else env)
    return out


class LogTest(unittest.TestCase):
    def test_line_format(self):
        """Date and time to the millisecond, the level padded as the
        agent's, the process and rank, then the message."""
        out = capture(env={"TPCOORD_WORKER_RANK": "3"})
        wlog.log.info("loaded %s", "x")
        wlog.log.warning("careful")
        lines = out.getvalue().splitlines()
        pid = os.getpid()
        self.assertRegex(lines[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} INFO  torch-worker\[%d\] rank 3: loaded x$" % pid)
        self.assertRegex(lines[1], r" WARN  torch-worker\[%d\] rank 3: careful$" % pid)

    def test_level(self):
        out = capture("warn")
        wlog.log.info("hidden")
        wlog.log.error("shown")
        self.assertNotIn("hidden", out.getvalue())
        self.assertRegex(out.getvalue(), r" ERROR torch-worker\[\d+\]: shown\n$")


class ProgressTest(unittest.TestCase):
    def setUp(self):
        self.out = capture()
        self.clock = Clock()

    def lines(self):
        return [re.sub(r"^\S+ INFO  torch-worker\[\d+\]: ", "", l) for l in self.out.getvalue().splitlines()]

    def test_plain_lines_per_shard(self):
        """Without bars: a line every 5 s while a shard is read, one when it
        is read whole, and at the end one for a shard read in part."""
        p = ShardProgress([("a.safetensors", 3), ("b.safetensors", 2)], None, self.clock)
        p.read("/m/a.safetensors", 2 * progress.MIB)
        self.clock.now += 6
        p.read("/m/a.safetensors", progress.MIB)
        p.read("/m/b.safetensors", progress.MIB)
        self.clock.now += 1
        p.read("/m/a.safetensors", progress.MIB)
        p.read("/m/other.bin", 1)  # not a shard: ignored
        p.close()
        self.assertEqual(self.lines(), [
            "loading shard 1/2 a.safetensors: 2 of 3 tensors, 3.0 MiB",
            "loaded shard 1/2 a.safetensors: 3 of 3 tensors, 4.0 MiB in 7.0s",
            "loaded shard 2/2 b.safetensors: 1 of 2 tensors, 1.0 MiB in 1.0s",
        ])

    def test_bars_with_tqdm(self):
        """With tqdm on a terminal, a bar per shard and no log lines."""
        try:
            import tqdm  # noqa: F401  (Debian's python3-tqdm)
        except ImportError:
            self.skipTest("tqdm is not installed")
        tty = TTY()
        p = ShardProgress([("a.safetensors", 2), ("b.safetensors", 1)], tqdm_bars(tty), self.clock)
        for f in ("a", "b", "a"):
            p.read("/m/%s.safetensors" % f, 10)
        p.close()
        bars = tty.getvalue()
        self.assertIn("shard 1/2 a.safetensors", bars)
        self.assertIn("2/2", bars)
        self.assertIn("shard 2/2 b.safetensors", bars)
        self.assertEqual(self.lines(), [])

    def test_no_tqdm_or_no_terminal(self):
        """Without tqdm, or on a pipe, no bars: log lines instead."""
        self.assertIsNone(tqdm_bars(io.StringIO()))
        with mock.patch.dict(sys.modules, {"tqdm": None}):  # import tqdm fails
            self.assertIsNone(tqdm_bars(TTY()))


if __name__ == "__main__":
    logging.basicConfig()
    unittest.main()
