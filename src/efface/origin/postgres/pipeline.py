"""The first round trip of a recall's snapshot sent through libpq's pipeline directly.

:meth:`~.origin.PostgresOrigin._begin` sends ``BEGIN``, the reader lock, the snapshot's epoch,
recall's vector statement and, where the snapshot ends with it, ``COMMIT``, in one round trip.
Through psycopg's pipeline each statement costs a cursor, a query conversion and its own flush
(about 40 us of this process's CPU a statement); here they are written to libpq at once, flushed
once, and the two results that hold rows are loaded without a cursor
(``bench/experiments/pg_pipeline_cost.py``). What psycopg kept is kept here instead:

* **Prepared statements.** The epoch's and the vector statement's are prepared once per
  connection under a name made from their text (``efface_`` and a hash), in the same round trip
  as their first use; the names a connection holds are remembered beside it (a weak map: a
  connection the pool drops takes them with it).
* **Parameters.** The statement's named placeholders (``%(name)s``) become ``$n``; the query's
  vector is sent in pgvector's binary form, the rest as text (the server infers every type from
  the statement, as it did for psycopg's).
* **Errors.** A statement that fails raises psycopg's own error for it (as psycopg's pipeline
  did) once every result up to the pipeline's end is read, the connection back out of pipeline
  mode (its transaction then aborted: the snapshot's end rolls it back). psycopg deallocates
  every prepared statement of a connection that rolls back (or runs a ``DROP``, an ``ALTER``, a
  ``DISCARD ALL``) while it holds prepared statements of its own: a statement found gone raises
  :class:`~efface.origin.capabilities.SnapshotEnded` (nothing was read: recall runs again, in
  a new snapshot), and after any failure the connection's statements are prepared again, each
  closed first. Anything else that interrupts the exchange closes the connection, so the pool
  never hands out one left half way.
"""

from __future__ import annotations

import hashlib
import re
import select
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg import errors, pq
from psycopg.adapt import Transformer

from ..capabilities import SnapshotEnded

if TYPE_CHECKING:
    import psycopg

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s")
_converted: dict[str, tuple[bytes, bytes, tuple[str | int, ...]]] = {}
"""Each statement's text in libpq's form, its prepared name and its parameters in order (names,
or places for positional ``%s``)."""
_prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()
"""The statements prepared on each connection (by name)."""


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
    pg = conn.pgconn
    held = _prepared.setdefault(conn, set())
    statements = [_convert(epoch_sql), _convert(then[0])]
    sent: list[bool | bytes] = []  # per result to come: True for rows wanted, a name for its prepare
    try:
        pg.enter_pipeline_mode()
        try:
            for sql in begin_sql:
                pg.send_query_params(sql.encode(), None)
                sent.append(False)
            for text, name, names in statements:
                if name not in held:  # closed first: one left from before is not an error then
                    pg.send_close_prepared(name)
                    pg.send_prepare(name, text)
                    sent += [False, name]
                values = [_param(then[1][n]) for n in names]  # type: ignore[index]
                params, formats = [v for v, _f in values] or None, [f for _v, f in values] or None
                pg.send_query_prepared(name, params, param_formats=formats, result_format=1)
                sent.append(True)
            if last:
                pg.send_query_params(b"COMMIT", None)
                sent.append(False)
            pg.pipeline_sync()
            results = _results(pg, len(sent))
        finally:
            if pg.pipeline_status != pq.PipelineStatus.OFF:
                pg.exit_pipeline_mode()
    except BaseException:
        conn.close()  # interrupted half way: never back to the pool like this
        raise
    failed = next((r for r in results if r.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED)), None)
    if failed is not None:
        # the transaction's end (a rollback) may have psycopg deallocate every statement: prepared again
        held.clear()
        first = next((r for r in results if r.status == pq.ExecStatus.FATAL_ERROR), failed)
        if first.error_field(pq.DiagnosticField.SQLSTATE) == b"26000":  # gone (psycopg's DEALLOCATE ALL)
            _prepared.clear()  # any connection's may be: each prepares them again, closing them first
            raise SnapshotEnded()  # the snapshot read nothing: run again, in a new one
        raise errors.error_from_result(first, encoding=conn.info.encoding)
    held.update(w for w in sent if isinstance(w, bytes))
    rows = [r for r, wanted in zip(results, sent, strict=True) if wanted is True]
    tx = Transformer(conn)
    tx.set_pgresult(rows[0])
    epoch_row = tx.load_row(0, tuple) if rows[0].ntuples else None
    tx.set_pgresult(rows[1])
    return epoch_row, tx.load_rows(0, rows[1].ntuples, tuple)


def _results(pg: pq.abc.PGconn, n: int) -> list[pq.abc.PGresult]:
    """The ``n`` results of a pipeline, then its sync's."""
    while pg.flush():
        select.select([], [pg.socket], [])
    out: list[pq.abc.PGresult] = []
    while True:
        while pg.is_busy():
            select.select([pg.socket], [], [])
            pg.consume_input()
        r = pg.get_result()
        if r is None:
            continue  # the end of one statement's results
        if r.status == pq.ExecStatus.PIPELINE_SYNC:
            if len(out) != n:
                raise errors.InternalError(f"the pipeline returned {len(out)} results, not {n}")
            return out
        out.append(r)
