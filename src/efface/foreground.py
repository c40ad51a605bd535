"""Reads first: background work gives way to the recalls in flight in this process.

One interpreter runs everything a served store does: recalls, writes, the compactor, and
``verify``'s byte scans. Its threads take turns at the GIL, and a thread that gives the GIL up
for a moment (every SQLite step does) waits for it to come back until the holder blocks or its
switch interval (5 ms by default) runs out. So one busy background thread makes every recall
wait a few intervals: measured in one process, a 250-record recall went from 2.6 to 14.4 ms
p50 (16.7 to 95.7 ms p99) beside one thread running Python (docs/benchmarks-history.md).

Recalls say when they run (:func:`reading`); background loops call :func:`give_way` between
their steps, which waits while any recall is in flight, for at most ``MAX_PAUSE_S`` per call,
so the background still moves on under a steady stream of reads. Nothing here is a lock on
data: a recall never waits for anything of this module, and background work that does not
call :func:`give_way` is unaffected.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSE_S = 0.01
"""How long one :func:`give_way` waits at most for the recalls in flight to end: a recall
takes a few milliseconds, and a background step then goes on even if recalls never stop."""

_cond = threading.Condition(threading.Lock())
_in_flight = 0


@contextmanager
def reading() -> Iterator[None]:
    """Mark a recall in flight for the duration of the block."""
    global _in_flight
    with _cond:
        _in_flight += 1
    try:
        yield
    finally:
        with _cond:
            _in_flight -= 1
            if not _in_flight:
                _cond.notify_all()


def in_flight() -> int:
    """Recalls in flight now (a snapshot)."""
    return _in_flight


def give_way(max_s: float = MAX_PAUSE_S) -> None:
    """Between two steps of background work: wait while a recall runs (at most ``max_s``),
    else just let a waiting thread take the GIL."""
    if not _in_flight:
        time.sleep(0)
        return
    with _cond:
        _cond.wait_for(lambda: not _in_flight, timeout=max_s)
