"""A record's row as the PostgreSQL origin stores it, opened; and recall's final rows, read
ahead with its vector statement where it can.

A recall reads the sealed rows of the records it returns last, in its snapshot, with the
snapshot's ``COMMIT`` (:meth:`~.origin.PostgresOrigin.records_by_id_closing`). Most of those
records are known before the snapshot begins (with the hashing embedder, whose cosine does not
vote, the first ``k`` the words rank are the ``k`` returned whenever they are live), so recall
names them (``ahead``), and the vector statement (:meth:`~.reads.PgReads.nearest_scored`)
checks them live in a branch of its own (:func:`ahead_branch`) that also returns their sealed
columns and wrapped data keys: read in the same snapshot, in its first round trip. The closing
read then asks the database only for the chosen records that were not read ahead; where there
are none it sends the ``COMMIT`` alone and opens the rows while the server answers.

A record read ahead was live in the snapshot the whole recall reads (its branch checks it as
the others do), so a forget committed before the snapshot is never served from it; one
committed after it is seen by no read of the recall, as before.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..base import RecordRow
from ..capabilities import SnapshotEnded
from .names import key_aad
from .sealing import Sealer

if TYPE_CHECKING:
    import psycopg

    from .keys import Keys

REC_COLS = "r.id, r.tenant, r.key_sealed, r.text, r.metadata, r.sources, r.updated_at"
KEY_COLS = "r.sealed_by, k.wrapped, k.kek_id"
"""A row's data key: its kid and its wrapped copy (``k``: ``data_keys`` joined on the kid)."""
CLOSING_SQL = (
    f"SELECT {REC_COLS}, {KEY_COLS} FROM {{s}}.records r"
    " LEFT JOIN {s}.data_keys k ON k.kid = r.sealed_by WHERE r.id = ANY(%s::bigint[])"
)
"""The closing read's rows: :data:`REC_COLS`, then :data:`KEY_COLS` (:func:`opened` takes them)."""
AHEAD_COL = (
    "ARRAY[r.key_sealed, r.text, r.metadata, r.sources, float8send(r.updated_at), r.sealed_by, k.wrapped,"
    " convert_to(k.kek_id, 'UTF8')]"
)
"""What a record read ahead comes with beyond the vector statement's ``id, dot, is_near``, in one
column (the other branches' rows carry a NULL there, which costs less to load than one per
field): its sealed fields, ``updated_at`` as 8 bytes, and its data key's kid, wrapped copy and
KEK id (:func:`ahead_row` makes a row of :data:`CLOSING_SQL`'s form of it). Its tenant is the
query's (the branch's live filter)."""
AHEAD_NONE = ", NULL"
"""The column, empty, in the vector statement's other branches (typed by the ahead branch)."""


def ahead_branch(s: str, live: str) -> str:
    """The vector statement's branch for the records read ahead (``%(ahead)s``, an id array),
    under the same live conditions (``live``: :func:`~.reads.live_claim`, named) as its others."""
    return (
        f" UNION ALL (SELECT r.id, -(r.embedding <#> %(q)s), false, {AHEAD_COL} FROM {s}.records r"
        f" LEFT JOIN {s}.data_keys k ON k.kid = r.sealed_by WHERE r.id = ANY(%(ahead)s::bigint[]) AND {live})"
    )


def ahead_row(rid: int, tenant: str, col: Sequence[Any]) -> tuple[Any, ...]:
    """A row of :data:`CLOSING_SQL`'s form from the ahead branch's column (:data:`AHEAD_COL`)."""
    key_sealed, text, metadata, sources, updated_at, sealed_by, wrapped, kek_id = col
    when = struct.unpack(">d", updated_at)[0]
    return (
        rid,
        tenant,
        key_sealed,
        text,
        metadata,
        sources,
        when,
        sealed_by,
        wrapped,
        kek_id and bytes(kek_id).decode(),
    )


def record_aad(column: str, tenant: str, key: str) -> str:
    return f"records.{column}|{tenant}|{key}"


def unseal_record(sealer: Sealer, conn: psycopg.Connection, row: Sequence[Any]) -> RecordRow:
    """A :class:`RecordRow` from ``(id, tenant, key_sealed, text, metadata, sources, updated_at)`` as stored."""
    rid, tenant, key_sealed, text, metadata, sources, updated_at = row
    key = sealer.open(conn, key_sealed, key_aad(tenant))
    return RecordRow(
        int(rid),
        tenant,
        key,
        sealer.open(conn, text, record_aad("text", tenant, key)),
        sealer.open(conn, metadata, record_aad("metadata", tenant, key)),
        sealer.open(conn, sources, record_aad("sources", tenant, key)),
        float(updated_at),
    )


def opened(sealer: Sealer, keys: Keys, conn: psycopg.Connection, rows: Iterable[Sequence[Any]]) -> dict[int, RecordRow]:
    """Rows of :data:`CLOSING_SQL`'s form opened, each one's data key held from its wrapped
    copy first (so none is read from the database after the snapshot's ``COMMIT``)."""
    out: dict[int, RecordRow] = {}
    for row in rows:
        if row[8] is not None:
            kid = bytes(row[7])
            sealer.hold(kid, functools.partial(keys.unwrap_row, row[9], kid, bytes(row[8])))
        out[int(row[0])] = unseal_record(sealer, conn, row[:7])
    return out


class EarlyEnds:
    """Whether a snapshot whose first statement reads ahead ends with it: yes, but for a while
    after one that did and had to be read again (:class:`~efface.origin.capabilities.SnapshotEnded`:
    another process's commits made the words stale, a candidate was no longer live), a while
    that doubles with each such one in a row, up to :attr:`MOST` snapshots, and halves with each
    one served. Threads racing on these counts only move the while."""

    MOST = 256

    def __init__(self) -> None:
        self.left = 0
        """Snapshots still to leave open at their first statement."""
        self.after = 0
        """How many to leave after the next early end that had to be read again."""

    def ends_early(self) -> bool:
        if self.left > 0:
            self.left -= 1
            return False
        return True

    def ended(self) -> SnapshotEnded:
        """The signal of a read in a snapshot ended early (the next ones do not end early for a while)."""
        self.after = self.left = min(self.MOST, 2 * self.after or 1)
        return SnapshotEnded()

    def served(self) -> None:
        """A snapshot ended early served all its caller asked."""
        self.after //= 2
