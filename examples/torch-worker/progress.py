"""Model-load progress, per checkpoint shard (safetensors file).

With tqdm installed (Debian's python3-tqdm) and stderr a terminal, a bar
per shard; otherwise (tqdm missing, or stderr a pipe, as under the agent)
log lines: one when a shard is read, and one every few seconds while a
shard is being read. The worker works the same without tqdm."""

import os
import time

from wlog import log

MIB = 2 ** 20


def tqdm_bars(stream):
    """A function making one tqdm bar per shard on `stream`, or None when
    stream is not a terminal or tqdm is not installed."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None

    def bar(name, total, position):
        return tqdm(total=total, desc=name, unit="tensor", file=stream, position=position, leave=True)
    return bar


class ShardProgress:
    """Counts the tensors read from each shard of a checkpoint. `shards`
    is [(file name, tensors it holds)] in the checkpoint's order; `bars`
    is a tqdm_bars function, or None for log lines every `every` seconds."""

    def __init__(self, shards, bars=None, clock=time.monotonic, every=5.0):
        self.order = [name for name, _ in shards]
        self.total = dict(shards)
        self.read_tensors = {name: 0 for name in self.order}
        self.read_bytes = {name: 0 for name in self.order}
        self.started, self.finished, self.open_bars = {}, set(), {}
        self.make_bar, self.clock, self.every = bars, clock, every
        self.last_log = clock()

    def label(self, name):
        return "shard %d/%d %s" % (self.order.index(name) + 1, len(self.order), name)

    def read(self, path, nbytes):
        """Record that a tensor (or this rank's slice of one) of `nbytes`
        was read from the shard at `path`."""
        name = os.path.basename(path)
        if name not in self.total or name in self.finished:
            return
        now = self.clock()
        if name not in self.started:
            self.started[name] = now
            if self.make_bar is not None:
                self.open_bars[name] = self.make_bar(self.label(name), self.total[name], self.order.index(name))
        self.read_tensors[name] += 1
        self.read_bytes[name] += nbytes
        if name in self.open_bars:
            self.open_bars[name].update(1)
        if self.read_tensors[name] >= self.total[name]:
            self.finish(name, now)
        elif self.make_bar is None and now - self.last_log >= self.every:
            self.last_log = now
            log.info("loading %s: %d of %d tensors, %.1f MiB", self.label(name), self.read_tensors[name],
                     self.total[name], self.read_bytes[name] / MIB)

    def finish(self, name, now):
        self.finished.add(name)
        bar = self.open_bars.pop(name, None)
        if bar is not None:
            bar.close()
            return
        log.info("loaded %s: %d of %d tensors, %.1f MiB in %.1fs", self.label(name), self.read_tensors[name],
                 self.total[name], self.read_bytes[name] / MIB, now - self.started[name])

    def close(self):
        """The load is over: report the shards read only in part (this
        rank needs only some of their tensors)."""
        now = self.clock()
        for name in self.order:
            if name in self.started and name not in self.finished:
                self.finish(name, now)
