"""The optional capabilities of an origin, its transactions and its word index.

Each is a small ``runtime_checkable`` protocol the code asks for with ``isinstance`` (every
use typed, none probed by name; ``tests/test_seam.py``): an origin that lacks one simply is
not an instance, and the caller takes its general way. The required members are in
:mod:`.base`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..model import Check, CopyState


@runtime_checkable
class UncheckedRanking(Protocol):
    """A word index that ranks every match without checking it live (recall checks them, best
    first, in its own snapshot: :meth:`efface.paths.fts.FullTextIndex.ranked_within`)."""

    def ranked_unchecked(
        self, words: Sequence[str], tenant: str | None, *, narrow: bool, scoring: Sequence[str]
    ) -> Any:
        """A :class:`efface.ranking.Ranking` of every record ``words`` find (BM25)."""
        ...


@runtime_checkable
class HeldInMemory(Protocol):
    """A word index that keeps postings in this process's memory (verify probes them too)."""

    def held_in_memory(self, ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the postings in memory still hold."""
        ...


@runtime_checkable
class StoredForms(Protocol):
    """A transaction whose origin stores content in another form than the store hands it
    (sealed, or as a database type lays it out): the forms of what this transaction
    erased, for the erasure's evidence to fingerprint (the PostgreSQL origin's
    ciphertexts, wrapped data keys and ``vector`` values)."""

    def stored_forms(self) -> list[tuple[str, list[bytes]]]:
        """(kind, items) of the bytes this transaction deleted or replaced, as stored."""
        ...


@runtime_checkable
class KeepsSecret(Protocol):
    """An origin that keeps the store's hash secret (every keyed hash and fingerprint is made
    with it) outside the data it stores, where a copy of that data does not reach: the
    PostgreSQL origin's KEK file (:mod:`efface.origin.postgres.hashsecret`). The store takes it
    from here, never from meta."""

    def hash_secret(self) -> bytes:
        """The store's hash secret."""
        ...


ScanFn = Callable[[list[str], str, Collection[bytes]], tuple[dict[str, dict[str, int]], int]]
"""A byte scan for one erasure's fingerprints: (files, root, live names) -> (per file relative
to root, hits per kind of item; bytes read). The live names are the stored forms of names
(``name_h``) that live rows hold *now*: a subject erased from a tenant may come back to it
later under the same name, and its name's hash is then that new subject's, not residue of
the erasure. The verifier hands it to an origin that checks copies of its own."""


@runtime_checkable
class Maintained(Protocol):
    """An origin whose storage keeps erased bytes until a maintenance removes them (the
    PostgreSQL origin: rewrites, checkpoint, WAL switches, key rotation). The compactor
    runs it in each round that erases bytes; the origin's own locks keep processes apart."""

    def maintain(self) -> bool:
        """Run the maintenance; True when it covered every epoch committed when it began
        (False: another process runs it now, or it failed; the next round tries again)."""
        ...

    def erased_epoch_for(self, epoch: int) -> int:
        """The origin's erased epoch as the erasure at ``epoch`` sees it: below ``epoch`` while
        the maintenance owes that erasure alone more work (a verification found it still in
        storage the maintenance had covered), whatever later erasures it proved."""
        ...

    def owes(self) -> bool:
        """Whether the maintenance owes work to erasures it already covered (the compactor
        runs it then, as for a new erasure)."""
        ...


@runtime_checkable
class CopyChecks(Protocol):
    """An origin whose data lives in copies the store's directory does not hold (a
    database's files, its WAL, replicas): it says, for one erasure, where each stands."""

    def copy_checks(
        self, epoch: int, items: Mapping[str, int] | None, scan: ScanFn | None
    ) -> list[tuple[str, CopyState, Check]]:
        """(copy name, state, the check behind it) for the erasure at ``epoch``.
        ``items``: how many items of each kind the erasure's fingerprints hold, None once
        an earlier verification proved it erased and they were deleted; ``scan`` looks for
        them in files (None with them)."""
        ...

    def copy_names(self) -> list[str]:
        """The copies it holds now (for a receipt's and a status's states before a
        verification): the names :meth:`copy_checks` reports, in its order."""
        ...

    def verifying(self, handle: str) -> AbstractContextManager[None]:
        """Held while one erasure is verified: one verification of a handle at a time,
        across processes."""
        ...


@runtime_checkable
class KnownPurposes(Protocol):
    """An origin that can say a tenant has written under a purpose without a look-up each
    time (PostgreSQL: a purpose once written is never removed, so this process remembers the
    ones it has seen; a round trip less per read)."""

    def knows_purpose(self, tenant: str, purpose: str) -> bool:
        """Whether the tenant has written under ``purpose`` (False: it has not, as of now)."""
        ...


@runtime_checkable
class NearestVectors(Protocol):
    """An origin that indexes its records' vectors itself (PostgreSQL: pgvector's HNSW): the
    vector read path searches them there (:class:`efface.paths.indexed.OriginVectors`),
    filtered to live records in the same statement, instead of keeping copies of its own."""

    def nearest(
        self, vector: np.ndarray, n: int, tenant: str, purpose: str, subject: str | None, now: float
    ) -> dict[int, bytes]:
        """Up to ``n`` records live for the tenant and purpose (and subject), nearest to
        ``vector`` first (approximately: an index's order), each id with its stored vector
        (:mod:`efface.vectors`); inside a snapshot, read in it."""
        ...

    def nearest_scored(
        self,
        vector: np.ndarray,
        n: int,
        tenant: str,
        purpose: str,
        subject: str | None,
        now: float,
        also: Sequence[int],
        ahead: Sequence[int] = (),
    ) -> tuple[dict[int, float | None], dict[int, float | None]]:
        """:meth:`nearest` (up to ``n``; an origin may ask its index for fewer, as PostgreSQL's
        half: ``efface.origin.postgres.reads.NEAR_SHARE``), and which of ``also`` (another
        leg's candidates) are live, in one round trip: each id with its vector's dot product
        with ``vector`` (the cosine recall judges it by: stored vectors are unit length)
        instead of the vector, None for a record without one. Inside a snapshot, read in it;
        there the rows of ``ahead`` (some of ``also``: those recall expects to return) may be
        read in the same round trip, for the snapshot's :class:`ClosingRead`."""
        ...

    def nearest_any(self, vector: np.ndarray, n: int, tenant: str) -> list[int]:
        """Up to ``n`` ids of the tenant's records nearest to ``vector``, live or not (verify's
        probes: which records the index itself leads to)."""
        ...

    def vector_count(self, tenant: str) -> int:
        """How many of the tenant's records have a vector."""
        ...


@runtime_checkable
class VectorSample(Protocol):
    """An origin that can draw a few of a tenant's live records' vectors at random, cheaply
    (recall judges how far the vector leg's best stands out against them:
    :func:`efface.paths.scores._standing`)."""

    def vector_sample(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """At most ``n`` vectors (rows of float32, unit length) of ``tenant``'s records live
        for ``purpose`` at ``now``, chosen at random once per tenant and state of the store
        (the same draw until a write; on PostgreSQL until a few dozen writes or a minute,
        :mod:`efface.origin.postgres.sample`); empty when it cannot tell (then recall judges
        against the records only the words found)."""
        ...


@runtime_checkable
class GroupCommit(Protocol):
    """An origin that commits several write transactions together (:mod:`efface.chokepoint`)."""

    def group(self, members: int | None = None) -> AbstractContextManager[Callable[..., AbstractContextManager[Any]]]:
        """A block whose ``member(kind, tenant, now)`` opens one member transaction (a
        savepoint with its own epoch); all of them commit at the block's end."""
        ...


@runtime_checkable
class SharedByProcesses(Protocol):
    """An origin that several efface processes use at once (PostgreSQL): work that is the
    store's, not one process's (pruning the change log, maintenance that removes erased bytes,
    verification), runs under a lock all of them see, and what one process derives for itself
    is registered under its own :attr:`instance`.

    On such an origin :meth:`Origin.prune_changes` is per process: ``upto`` is how far *this*
    instance replays the change log, noted in the origin's register of readers, and the log is
    pruned only to the oldest reader seen within the origin's bound (a process that died stops
    holding it back then). Origins one process owns (SQLite, memory) lack this protocol: the
    store's own lock orders everything, and :class:`efface.erasure.changelog.ChangeLog` keeps
    their consumers in meta."""

    instance: str
    """This process's id among the origin's users (its row in the readers' register)."""

    def shared_lock(self, name: str, wait: bool = False) -> AbstractContextManager[bool]:
        """Hold the lock ``name`` (one of the origin's named locks) across every process of the
        store for the block. Yields True when held; without ``wait``, False at once when another
        holder has it (the block then must skip the work). A process that dies lets go of it."""
        ...


class SnapshotEnded(Exception):
    """A read in a snapshot its origin ended early: its first statement read ahead the rows the
    caller expected to return and committed with them (:class:`DeferredSnapshot`), and the
    caller needs more than that. The caller runs its reads again, in a new snapshot, asking
    for nothing ahead."""


@runtime_checkable
class DeferredSnapshot(Protocol):
    """An origin whose read snapshot can begin with its first statement instead of a round
    trip of its own (PostgreSQL: ``BEGIN`` and the snapshot's epoch sent with recall's vector
    statement). Its word index answers before the snapshot begins, at the index's own epoch;
    recall asks :meth:`words_stale` after that statement and ranks the words again in the
    snapshot when it began at a newer epoch (another process committed meanwhile).

    Where that first statement is :meth:`NearestVectors.nearest_scored` with records ``ahead``,
    the origin may read their rows with it and end the snapshot in the same round trip: its
    :class:`ClosingRead` then serves those rows, and any other read in the snapshot raises
    :class:`SnapshotEnded`."""

    def snapshot_deferred(self) -> AbstractContextManager[Any]:
        """:meth:`~efface.origin.base.Origin.snapshot`, begun by its first read."""
        ...

    def words_stale(self) -> bool:
        """Whether this thread's snapshot began past the epoch its words were ranked at
        (asked once: the answer is cleared)."""
        ...


@runtime_checkable
class ClosingRead(Protocol):
    """An origin whose read snapshot can end in the round trip of its last read (PostgreSQL:
    the rows and the transaction's ``COMMIT`` sent together): recall's final rows, when no
    read follows them in its snapshot."""

    def records_by_id_closing(self, ids: Sequence[int]) -> Mapping[int, Any]:
        """:meth:`~efface.origin.base.Reads.records_by_id`, read in this thread's snapshot,
        which ends with it: a read after it in the same snapshot block raises (it would no
        longer see the snapshot). Rows the snapshot read ahead (``nearest_scored``'s ``ahead``)
        are not read again. Outside a snapshot, :meth:`records_by_id`."""
        ...
