"""The first round trip of a recall's snapshot sent through libpq's pipeline directly.

:meth:`~.origin.PostgresOrigin._begin` sends ``BEGIN``, the reader lock, the snapshot's epoch,
recall's vector statement and, where the snapshot ends with it, ``COMMIT``, in one round trip.
Through psycopg's pipeline each statement costs a cursor, a query conversion and its own flush
(about 40 us of this process's CPU a statement); here they are written to libpq at once, flushed
once, and the two results that hold rows are loaded without a cursor
(``bench/experiments/pg_pipeline_cost.py``). What psycopg kept is kept here instead:

* **Prepared statements.** The epoch's and the vector statement's are prepared once per
  connection, in the same round trip as their first use, under a name made from their text
  (``efface_`` and a hash) and the connection's generation; the names a connection holds are
  remembered beside it (a weak map: a connection the pool drops takes them with it). A
  failure is raised once every result up to the sync is read, so which prepares took is known
  and those stay held (the server keeps them past the aborted transaction): failed round trips
  leave nothing behind. Only when the server's statements are not the ones held (SQLSTATE
  26000, a statement gone; 42P05, a name already taken) does the generation move on, so the
  next prepare never clashes with a name the server may still hold (no ``Close`` is sent:
  libpq has it only from 17 on, and psycopg may run on an older system libpq).
* **Parameters.** The statement's named placeholders (``%(name)s``) become ``$n``; the query's
  vector is sent in pgvector's binary form, the rest as text (the server infers every type from
  the statement, as it did for psycopg's).
* **Waiting.** Through :mod:`psycopg.waiting` (``poll``, so a descriptor numbered past 1024 is
  fine), flushing what is left to send while reading what the server answers (a large send
  never deadlocks), waking every 0.1 s to let a signal (Ctrl-C) through.
* **Errors.** A statement that fails raises psycopg's own error for it (as psycopg's pipeline
  did) once every result up to the pipeline's end is read, the connection back out of pipeline
  mode (its transaction then aborted: the snapshot's end rolls it back). psycopg deallocates
  every prepared statement of a connection that rolls back (or runs a ``DROP``, an ``ALTER``, a
  ``DISCARD ALL``) while it holds prepared statements of its own, and a pooler or maintenance
  may too: a statement found gone (SQLSTATE 26000, nothing read yet) has the transaction
  rolled back and the round trip sent once more on the same connection, under new names.
  Anything that interrupts the exchange (a lost connection, Ctrl-C, a parameter of no known
  form) closes the connection, so the pool never hands out one left half way, and is raised as
  it is, a lost connection as :class:`~efface.errors.OriginUnreachable`.
"""

from __future__ import annotations

import hashlib
import re
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import errors, pq, waiting
from psycopg.adapt import Transformer
from psycopg.waiting import Ready, Wait

from ...errors import OriginUnreachable

if TYPE_CHECKING:
    from psycopg.abc import PQGen

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s")
_converted: dict[str, tuple[bytes, bytes, tuple[str | int, ...]]] = {}
"""Each statement's text in libpq's form, its prepared name and its parameters in order (names,
or places for positional ``%s``)."""


def _convert(sql: str) -> tuple[bytes, bytes, tuple[str | int, ...]]:
    got = _converted.get(sql)
    if got is None:
        names: list[str | int] = []

        def number(m: re.Match[str]) -> str:
            name = m.group(1) or len(names)  # a positional %s: its place
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        text = _PLACEHOLDER.sub(number, sql)
        name = b"efface_" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest().encode()
        if len(_converted) > 256:  # a handful of statements in practice: never grows without bound
            _converted.clear()
        got = _converted[sql] = (text.encode(), name, tuple(names))
    return got


def _param(value: Any) -> tuple[bytes | None, int]:
    """A parameter's bytes and format (0 text, 1 binary)."""
    if value is None:
        return None, 0
    if isinstance(value, np.ndarray):  # pgvector's binary form: dimension, unused, big-endian float32s
        return struct.pack(">HH", len(value), 0) + np.asarray(value, dtype=">f4").tobytes(), 1
    if isinstance(value, bytes):
        return value, 1
    if isinstance(value, float):
        return repr(value).encode(), 0
    if isinstance(value, (list, tuple)):  # of ints: an array literal (the statement casts it)
        return ("{" + ",".join(str(int(v)) for v in value) + "}").encode(), 0
    if isinstance(value, bool | int | str):
        return str(value).encode(), 0
    raise TypeError(f"no text form here for a parameter of type {type(value).__name__}")


def begin(
    conn: psycopg.Connection,
    begin_sql: Sequence[str],
    epoch_sql: str,
    then: tuple[str, Mapping[str, Any] | Sequence[Any]],
    *,
    last: bool,
) -> tuple[Any, list[tuple[Any, ...]]]:
    """Send ``begin_sql`` (statements without parameters), ``epoch_sql`` and ``then`` (both
    prepared; ``then`` with named or positional placeholders and their arguments), and
    ``COMMIT`` if ``last``, in one pipeline;
    the epoch statement's first row and ``then``'s rows (results in binary)."""
    held = _prepared.get(conn)
    if held is None:
        held = _prepared[conn] = _Held()
    statements = [_convert(epoch_sql), _convert(then[0])]
    results, sent = _exchange(conn, held, begin_sql, statements, then[1], last=last)
    failed = _failed(results)
    if failed is not None and failed.error_field(pq.DiagnosticField.SQLSTATE) == b"26000" and _usable(conn):
        # a statement this connection held is gone (psycopg's DEALLOCATE ALL after a rollback,
        # a DISCARD ALL, a pooler): nothing was read; rolled back and sent again under new names
        held.forget()
        try:
            conn.rollback()
        except psycopg.OperationalError as e:
            raise _lost() from e
        results, sent = _exchange(conn, held, begin_sql, statements, then[1], last=last)
        failed = _failed(results)
    # every result up to the sync was read: the prepares that took stay held, failed or not (the
    # server keeps a connection's prepared statements past its transaction's end)
    held.names.update(
        w for r, w in zip(results, sent, strict=True) if isinstance(w, bytes) and r.status == pq.ExecStatus.COMMAND_OK
    )
    if failed is not None:
        if failed.error_field(pq.DiagnosticField.SQLSTATE) in _NOT_AS_HELD:
            held.forget()  # what the server holds is not what was thought: new names from now on
        error = errors.error_from_result(failed, encoding=conn.info.encoding)
        if not _usable(conn):
            raise _lost() from error
        raise error
    rows = [r for r, wanted in zip(results, sent, strict=True) if wanted is True]
    tx = Transformer(conn)
    tx.set_pgresult(rows[0])
    epoch_row = tx.load_row(0, tuple) if rows[0].ntuples else None
    tx.set_pgresult(rows[1])
    return epoch_row, tx.load_rows(0, rows[1].ntuples, tuple)


class _Held:
    """The statements prepared on one connection: their names end with the connection's
    generation, which moves on whenever what it holds is no longer known (a statement found
    gone, a name found taken), so a statement is never prepared under a name the server may
    still hold (no ``Close`` needed: libpq's ``PQsendClosePrepared`` exists only from libpq 17
    on)."""

    __slots__ = ("generation", "names")

    def __init__(self) -> None:
        self.generation = 0
        self.names: set[bytes] = set()

    def name(self, base: bytes) -> bytes:
        return b"%s_%d" % (base, self.generation)

    def forget(self) -> None:
        self.generation += 1
        self.names.clear()


_NOT_AS_HELD = (b"26000", b"42P05")
"""The SQLSTATEs of a statement gone (``invalid_sql_statement_name``) and of a name already
prepared (``duplicate_prepared_statement``): the connection's names then move on."""

_prepared: weakref.WeakKeyDictionary[Any, _Held] = weakref.WeakKeyDictionary()
"""The statements prepared on each connection."""


def _exchange(
    conn: psycopg.Connection,
    held: _Held,
    begin_sql: Sequence[str],
    statements: Sequence[tuple[bytes, bytes, tuple[str | int, ...]]],
    args: Any,
    *,
    last: bool,
) -> tuple[list[pq.abc.PGresult], list[bool | bytes]]:
    """One pipeline's results (every one, up to its sync's) and what each is (:func:`begin`):
    the connection back out of pipeline mode. Anything that interrupts it closes the connection
    (never back to the pool half way) and is raised as it is: a lost connection as
    :class:`~efface.errors.OriginUnreachable`."""
    pg = conn.pgconn
    sent: list[bool | bytes] = []  # per result to come: True for rows wanted, a name for its prepare
    try:
        pg.enter_pipeline_mode()
        for sql in begin_sql:
            pg.send_query_params(sql.encode(), None)
            sent.append(False)
        for text, base, names in statements:
            name = held.name(base)
            if name not in held.names:
                pg.send_prepare(name, text)
                sent.append(name)
            values = [_param(args[n]) for n in names]
            params, formats = [v for v, _f in values] or None, [f for _v, f in values] or None
            pg.send_query_prepared(name, params, param_formats=formats, result_format=1)
            sent.append(True)
        if last:
            pg.send_query_params(b"COMMIT", None)
            sent.append(False)
        pg.pipeline_sync()
        results = waiting.wait(_results(pg, len(sent)), pg.socket, interval=_INTERVAL)
        pg.exit_pipeline_mode()
    except BaseException as e:
        # no exit from pipeline mode first: it fails while results are still due, over this error
        conn.close()
        if isinstance(e, psycopg.OperationalError):
            raise _lost() from e
        raise
    return results, sent


_INTERVAL = 0.1
"""How often (seconds) the wait for the server wakes to let a signal (Ctrl-C) through."""


def _results(pg: pq.abc.PGconn, n: int) -> PQGen[list[pq.abc.PGresult]]:
    """The ``n`` results of a pipeline, then its sync's, as a generator for psycopg's wait
    (:mod:`psycopg.waiting`: poll, not select, so any descriptor number): whatever is left to
    send is flushed as the server's answers are read, so a large send never waits on a server
    waiting for its answers to be read."""
    out: list[pq.abc.PGresult] = []
    state = Wait.RW if pg.flush() else Wait.R
    while True:
        ready = yield state
        if not ready:
            continue  # woken to let signals through: the same wait again
        if ready & Ready.W and state == Wait.RW:
            state = Wait.RW if pg.flush() else Wait.R
        if not ready & Ready.R:
            continue
        pg.consume_input()
        while not pg.is_busy():
            r = pg.get_result()
            if r is None:
                continue  # the end of one statement's results
            if r.status == pq.ExecStatus.PIPELINE_SYNC:
                if len(out) != n:
                    raise errors.InternalError(f"the pipeline returned {len(out)} results, not {n}")
                return out
            out.append(r)
        if state == Wait.RW:
            state = Wait.RW if pg.flush() else Wait.R


def _failed(results: Sequence[pq.abc.PGresult]) -> pq.abc.PGresult | None:
    """The first failed statement's result (the ones after it: aborted), if any."""
    failed = [r for r in results if r.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED)]
    return next((r for r in failed if r.status == pq.ExecStatus.FATAL_ERROR), failed[0] if failed else None)


def _usable(conn: psycopg.Connection) -> bool:
    return not conn.closed and conn.pgconn.status == pq.ConnStatus.OK


def _lost() -> OriginUnreachable:
    return OriginUnreachable(
        "the connection to the PostgreSQL server was lost during the read (the server restarted or"
        " stopped, the network failed, or its session was ended): nothing was changed; try again"
    )
