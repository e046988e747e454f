"""One process of the gloo case of `tpcoord bench broadcast`.

torch.distributed's gloo broadcast, the path a plain PyTorch TP loop ships
its sampled tokens on (scripts/torch_tp_loop.py): rank 0 is the publisher,
ranks 1..world-1 the followers. The Go side (cmd/tpcoord/internal/bench/fanout) starts
these processes with the same protocol as its own publisher and followers:

  publisher  prints "addr URL" (the store followers join), joins the
             process group, waits for "go" on stdin, broadcasts --messages
             messages every --interval-ns and then the end marker, prints
             one JSON report {"sent_interval_us", "cpu_ns"} and exits when
             stdin ends.
  follower   joins the process group, prints "ready", receives every
             broadcast and prints one JSON report {"lat_ns", "cpu_ns"}:
             receive minus send in ns per sequence number.

A message is a uint8 tensor of --payload bytes: the sequence number and the
publisher's wall-clock send time (time.time_ns(), CLOCK_REALTIME as Go's
time.Now), little-endian uint64 and int64, then zeros; the Go transports
send the same bytes. Only protocol lines go to stdout; errors go to stderr
with a non-zero exit.
"""

import argparse
import datetime
import json
import os
import struct
import sys
import time

HEADER = struct.Struct("<Qq")  # sequence number, send time in Unix ns
END_SEQ = (1 << 64) - 1  # the end marker's sequence number
MIN_PAYLOAD, MAX_PAYLOAD = HEADER.size, 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=("publisher", "follower"))
    p.add_argument("--world", type=int, required=True, help="processes: 1 publisher + followers")
    p.add_argument("--rank", type=int, default=0, help="follower: this process's rank, 1..world-1")
    p.add_argument("--addr", required=True, help="the process group's init URL (file://PATH)")
    p.add_argument("--payload", type=int, default=256, help="publisher: message size in bytes")
    p.add_argument("--interval-ns", type=int, default=200_000, help="publisher: between two messages")
    p.add_argument("--messages", type=int, required=True, help="messages the publisher sends")
    p.add_argument("--deadline-s", type=float, default=60, help="give up after this long (gloo's timeout)")
    a = p.parse_args(argv)
    if not 2 <= a.world <= 65:
        p.error("--world: %d is outside 2..65" % a.world)
    if a.role == "follower" and not 1 <= a.rank < a.world:
        p.error("--rank: %d is outside 1..%d" % (a.rank, a.world - 1))
    if a.role == "publisher" and a.rank != 0:
        p.error("--rank: the publisher is rank 0")
    if not MIN_PAYLOAD <= a.payload <= MAX_PAYLOAD:
        p.error("--payload: %d is outside %d..%d bytes" % (a.payload, MIN_PAYLOAD, MAX_PAYLOAD))
    if a.interval_ns <= 0 or a.messages < 1 or a.deadline_s <= 0:
        p.error("--interval-ns, --messages and --deadline-s must be > 0")
    if not a.addr.startswith("file://"):
        p.error("--addr: %r is not a file:// URL" % a.addr)
    return a


def join(a):
    """Joins the gloo process group on loopback, as the seed's TP loop does."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=a.addr, rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.deadline_s))
    return dist


def report(obj):
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def publish(dist, a, msg, header):
    """Broadcasts the messages on an absolute schedule, then the end marker;
    returns the achieved mean interval in µs. After a stall it drops the
    debt instead of bursting, as the Go publisher does."""
    start = time.monotonic_ns()
    nxt = start
    for seq in range(a.messages):
        d = nxt - time.monotonic_ns()
        if d > 0:
            time.sleep(d / 1e9)
        HEADER.pack_into(header, 0, seq, time.time_ns())
        dist.broadcast(msg, src=0)
        nxt += a.interval_ns
        now = time.monotonic_ns()
        if now - nxt > a.interval_ns:
            nxt = now + a.interval_ns
    sent = (time.monotonic_ns() - start) / 1e3 / a.messages
    HEADER.pack_into(header, 0, END_SEQ, time.time_ns())
    dist.broadcast(msg, src=0)
    return sent


def run_publisher(a, torch):
    msg = torch.zeros(a.payload, dtype=torch.uint8)
    header = memoryview(msg.numpy())  # shares msg's memory
    print("addr " + a.addr, flush=True)
    dist = join(a)
    line = sys.stdin.readline()
    if line != "go\n":
        sys.exit('waiting for "go" on stdin: got %r' % line)
    cpu0 = time.process_time_ns()
    sent = publish(dist, a, msg, header)
    report({"sent_interval_us": sent, "cpu_ns": time.process_time_ns() - cpu0})
    sys.stdin.read()  # until stdin ends: every follower has reported


def run_follower(a, torch):
    dist = join(a)
    msg = torch.zeros(a.payload, dtype=torch.uint8)
    header = memoryview(msg.numpy())
    lat = [-1] * a.messages
    print("ready", flush=True)
    cpu0 = time.process_time_ns()
    # Every rank makes the same number of collective calls: the messages
    # and the end marker.
    for _ in range(a.messages + 1):
        dist.broadcast(msg, src=0)
        now = time.time_ns()
        seq, sent_at = HEADER.unpack_from(header, 0)
        if seq == END_SEQ:
            break
        if seq < a.messages and lat[seq] < 0:
            lat[seq] = max(0, now - sent_at)
    report({"lat_ns": lat, "cpu_ns": time.process_time_ns() - cpu0})


def main(argv):
    a = parse_args(argv)
    import torch
    if a.role == "publisher":
        run_publisher(a, torch)
    else:
        run_follower(a, torch)
    # The report is out (flushed). Leave without the interpreter's teardown:
    # ProcessGroupGloo's destructor, racing peers that exit at the same
    # moment, sometimes ends in std::terminate ("terminate called without
    # an active exception", SIGABRT) after a complete run.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
