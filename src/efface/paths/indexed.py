"""Vector read path over an origin that indexes its own vectors (:class:`NearestVectors`).

On PostgreSQL the records' vectors are in a ``vector(dim)`` column with pgvector's HNSW
index, written in the transaction that writes the record: this path keeps no copy of its own
(no file, nothing in memory), so it never lags (``synchronous``) and an erased vector leaves
it when its row leaves the origin. A query is one statement in the recall's snapshot: the
index's nearest rows, kept only where they are live for the tenant, purpose and subject
(:meth:`efface.origin.postgres.reads.PgReads.nearest`), so what it proposes was live in the
very state recall resolves and reads, and an erasure committed before the snapshot is never
among it. Its name is ``ann``, as the ANN files' path it replaces on such an origin.

What the origin's own files and index pages keep of an erased vector is the origin's to
prove (its ``erased_checks``): this path reports only on what it holds itself, which is
nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

import numpy as np

from ..model import Check
from ..origin.base import Origin
from ..origin.capabilities import NearestVectors
from ..vectors import read_many as read_vectors
from .base import Erased, Held, Query, check

NEIGHBOURS = 6
"""Live records kept per anchor query as verify's nearest-neighbour probes (as the ANN files')."""
ANCHOR_QUERIES = 4


class OriginVectors:
    """The vector read path of an origin with its own vector index (module docstring)."""

    name = "ann"
    max_propagation_s = 0.0
    synchronous = True
    yielding = False
    """Nothing absorbs in the background here (the store sets it where something does)."""

    def __init__(self, origin: Origin, index: NearestVectors) -> None:
        """``index``: the origin itself, as the capability it has."""
        self._origin = origin
        self._index = index

    # -- epochs: it lives in the origin's transaction ------------------------------------
    def applied_epoch(self) -> int:
        return self._origin.current_epoch()

    def erased_epoch(self) -> int:
        """The origin's: the vectors are in its rows and its index pages."""
        return self._origin.erased_epoch()

    def stage(self, tx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        return None  # the vector is written with its record, in the same transaction

    def catch_up(self, upto: int | None = None) -> int:
        return self.applied_epoch()

    def persist(self) -> None:
        return None

    erase = persist

    def replay_epoch(self) -> int:
        return self.applied_epoch()

    # -- what the store tells a vector path ----------------------------------------------
    def touch(self) -> None:
        return None

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        yield

    # -- reads -----------------------------------------------------------------------------
    def candidates(self, query: Query, n: int) -> list[int]:
        """The ``n`` nearest records live for the query's tenant, purpose and subject."""
        return list(self.live_candidates(query, n))

    def live_candidates(self, query: Query, n: int) -> dict[int, bytes]:
        """:meth:`candidates` with their stored vectors, checked live in the same statement
        (in the recall's snapshot: :class:`~efface.paths.base.LiveVectorSearch`)."""
        return self._index.nearest(query.vector, n, query.tenant, query.purpose, query.subject, query.now)

    def live_scored(
        self, query: Query, n: int, also: Sequence[int], ahead: Sequence[int] = ()
    ) -> tuple[dict[int, float | None], dict[int, float | None]]:
        """:meth:`live_candidates` with cosines instead of vectors, and which of ``also`` (the
        other legs' candidates) are live with theirs, in one statement in the recall's
        snapshot (:class:`~efface.paths.base.LiveVectorSearch`); ``ahead``'s rows read with
        them for the snapshot's closing read."""
        q = query
        return self._index.nearest_scored(q.vector, n, q.tenant, q.purpose, q.subject, q.now, also, ahead)

    def size(self, tenant: str) -> int:
        return self._index.vector_count(tenant)

    # -- the erasure contract ----------------------------------------------------------
    def held(self, erased: Erased) -> list[Held]:
        return []  # no copy of its own: the origin's rows are fingerprinted as the origin's

    def evidence(self, erased: Erased) -> bytes:
        """Ids of live records next to a few of the erased vectors (queries for the probe),
        found while the erased rows are still there; never the vectors themselves."""
        if not erased.sample:
            return b""
        few = erased.sample[:: max(1, len(erased.sample) // ANCHOR_QUERIES)][:ANCHOR_QUERIES]
        gone = set(erased.ids)
        anchors: set[int] = set()
        for rid in few:
            near = self._index.nearest_any(erased.vectors[rid], NEIGHBOURS + min(len(gone), 64), erased.tenant)
            anchors.update([r for r in near if r not in gone][:NEIGHBOURS])
        return np.asarray(sorted(anchors), dtype="<i8").tobytes()

    def probe(self, tenant: str | None, erased: Sequence[int], evidence: bytes) -> Check:
        """Query the origin's index with the live neighbours of the erased vectors: no
        erased id may come back (its row, and so its index entry, is gone for every reader)."""
        t0 = time.time()
        anchors = np.frombuffer(evidence, dtype="<i8").tolist() if evidence else []
        proposed: set[int] = set()
        if tenant is not None and anchors and erased:
            gone = set(erased)
            stored = [b for b in self._origin.embeddings(anchors).values() if b]
            for vec in read_vectors(stored) if stored else ():
                proposed.update(r for r in self._index.nearest_any(vec, 40, tenant) if r in gone)
        return check(
            "ann.by_neighbours",
            "unreadable",
            "fail" if proposed else "pass",
            (
                f"{len(proposed)} erased records still proposed by the origin's vector index"
                if proposed
                else f"{len(anchors)} live neighbours of the erased vectors used as queries of the origin's vector "
                "index: no erased record proposed"
            ),
            t0,
        )

    def check_erased(self, tenant: str | None, epoch: int, erased: Sequence[int]) -> Check:
        t0 = time.time()
        return check(
            "ann.erased",
            "erased",
            "pass",
            "this path keeps no copy of the vectors (no file, nothing in memory): they are in the origin's records "
            "and its vector index, whose pages the origin's own checks cover",
            t0,
        )

    def live_copies(self, tenant: str | None, windows: Sequence[bytes]) -> set[bytes]:
        return set()

    def may_hold_live(self, file: str) -> bool:
        return False

    def close(self) -> None:
        return None
