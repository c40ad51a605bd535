"""Locks every efface process of a PostgreSQL store sees: session advisory locks, by name.

What is the store's work rather than one process's runs under one of these, so two servers on
one database never do it twice at once (issue #34 item 4). The keys are bigints ``'effa'``
then a number, as the other advisory locks efface takes (docs/postgres.md lists them all):

=================  ==========================  ==============================================
name               key                         held while
=================  ==========================  ==============================================
``changes``        ``0x6566666100000010``      the change log is pruned, and while a process
                                               registers as one of its readers at open
``maintenance``    ``0x6566666100000011``      the compactor's shared physical work: the
                                               origin's ``physical`` side (index rebuilds,
                                               checkpoints; on PostgreSQL the maintenance that
                                               removes erased bytes: rewrite, CHECKPOINT, WAL
                                               switch) runs under it
``verify``         ``0x6566666100000012``      reserved for verification that needs the
                                               database to itself (a byte scan after
                                               maintenance)
=================  ==========================  ==============================================

A session lock is held on a pooled connection for the block and let go at its end; a process
that dies (``kill -9``) loses its session, and PostgreSQL lets go of the lock with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

BASE = 0x65666661_00000000
LOCKS = {"changes": BASE + 0x10, "maintenance": BASE + 0x11, "verify": BASE + 0x12}
"""The named locks and their advisory lock keys (see the module docstring)."""


def key(name: str) -> int:
    """The advisory lock key of the lock ``name``."""
    try:
        return LOCKS[name]
    except KeyError:
        raise ValueError(f"no shared lock is named {name!r} (known: {', '.join(sorted(LOCKS))})") from None


@contextlib.contextmanager
def hold(pool: Any, name: str, wait: bool = False) -> Iterator[bool]:
    """Hold the lock ``name`` on a connection of ``pool`` (a psycopg pool of autocommit
    connections) for the block; yields whether it is held (without ``wait``, False at once when
    another session holds it)."""
    k = key(name)
    with pool.connection() as conn:
        if wait:
            conn.execute("SELECT pg_advisory_lock(%s)", (k,))
            held = True
        else:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (k,)).fetchone()
            held = bool(row is not None and row[0])
        try:
            yield held
        finally:
            if held:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (k,))
                except Exception:
                    conn.close()  # a session that may still hold the lock never goes back to the pool
