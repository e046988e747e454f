"""The worker's logs: Python's logging, one line a record on stderr, with
the date and time, the level and who wrote it:

    2026-01-02T13:04:05.678 INFO  torch-worker[4242] rank 1: KV pool: ...

The levels are named as the agent's (DEBUG, INFO, WARN, ERROR)."""

import logging
import os
import sys

NAME = "tpcoord.worker"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"

log = logging.getLogger(NAME)


def setup(level="info", stream=None, env=None):
    """Send the worker's records at `level` and above (debug, info, warn,
    error) to `stream` (default stderr). The rank is the agent's
    TPCOORD_WORKER_RANK, when it started this worker."""
    env = os.environ if env is None else env
    logging.addLevelName(logging.WARNING, "WARN")
    who = "torch-worker[%d]" % os.getpid()
    if env.get("TPCOORD_WORKER_RANK"):
        who += " rank %s" % env["TPCOORD_WORKER_RANK"]
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)-5s " + who.replace("%", "%%")
                                           + ": %(message)s", TIME_FORMAT))
    log.handlers[:] = [handler]
    log.setLevel(LEVELS[level])
    log.propagate = False
    return log
