"""The origin protocol: the single source of truth behind every read path.

An origin stores records, claims, subjects, lineage, the change log that derived
artifacts replay, receipts and the erasure ledger, and gives out strictly increasing
epochs inside the transaction that commits a mutation. Two implement it: SQLite
(``origin.sqlite``, the embedded store) and the in-memory reference (``origin.memory``);
PostgreSQL will implement the same methods.

Beside the methods, an origin has ``text`` (its word index, :class:`WordIndex`), a
``write_lock`` (held for every write), ``physical`` (:class:`Physical`, the byte-level side
of an origin that keeps files, or None: then its erased epoch is its current one) and
``liveness`` (:class:`LivenessCopy`, a copy in memory of which records are live, or None).
Capabilities an origin may lack are small ``runtime_checkable`` protocols in :mod:`.capabilities` (:class:`GroupCommit`,
:class:`NearestVectors`, :class:`VectorSample`, :class:`Maintained`, :class:`CopyChecks`,
:class:`SharedByProcesses`, on its transactions :class:`StoredForms`, and on its word index
:class:`UncheckedRanking`, :class:`HeldInMemory`), asked for with ``isinstance``: every use is
typed, none is probed by name.

Every ``tenant`` an origin is handed is the tenant's id, a keyed hash of its name made by
the store (docs/concepts.md §8: tenant names are personal data). An origin keeps the name itself in
one place only (``set_tenant_name``), and deletes it when the tenant's last record,
registered subject and data key are gone (``drop_tenant_name``, in the erasure's
transaction, which fingerprints it for ``verify``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import ErasureNotSettled
from ..model import Check

CHANGES_CONSUMER = "changes.consumer."
"""Meta keys under which each consumer of the change log (one read path's files in one process)
records the epoch it still replays from (:mod:`efface.erasure.changelog`)."""
CHANGES_PRUNED = "changes.pruned"
"""Meta key: the change log holds nothing at or below this epoch. A consumer whose files are
older than it cannot replay them up to date: it rebuilds them from the origin instead."""
RECORD_TABLES = (
    ("records", "id"),
    ("claims", "record_id"),
    ("lineage", "record_id"),
    ("mentions", "record_id"),
    ("quarantine", "record_id"),
    ("reasons", "record_id"),
)
"""The origin's tables whose rows name a record, each with its column naming it: where
:meth:`Reads.residual_rows` looks for an erased record's rows."""


@dataclass(frozen=True)
class RecordRow:
    id: int
    tenant: str
    key: str
    text: str
    metadata: str
    sources: str
    updated_at: float


@dataclass(frozen=True)
class ClaimRow:
    id: int
    record_id: int
    key: str
    subject: str
    purpose: str
    basis: str
    expires_at: float | None


@dataclass(frozen=True)
class NewRecord:
    key: str
    text: str
    metadata: str
    sources: tuple[str, ...]
    embedding: bytes
    subject: str
    purpose: str
    basis: str
    expires_at: float | None


class Tx(Protocol):
    """One open write transaction. Everything done through it commits together, or nothing."""

    epoch: int
    old_texts: dict[int, str]
    """Each changed record's text as it was before this transaction (the word index deletes
    exactly what it indexed; derivations tell a rewrite from a new record)."""

    # -- records and claims
    def upsert(self, tenant: str, rec: NewRecord, now: float) -> int: ...
    def add_claim(
        self, record_id: int, subject: str, purpose: str, basis: str, expires_at: float | None, now: float
    ) -> None: ...
    def upsert_many(
        self, tenant: str, recs: Sequence[NewRecord], now: float, known: Mapping[str, int] | None = None
    ) -> list[int]:
        """:meth:`upsert` of each record in order (one batch); returns their ids in order.
        ``known``: the ids of these keys from :meth:`record_ids` earlier in this transaction,
        so the batch is not looked up twice (ids erased since then are fine)."""
        ...

    def record_id(self, tenant: str, key: str) -> int | None: ...
    def record_ids(self, tenant: str, keys: Sequence[str]) -> dict[str, int]:
        """The id of each of ``keys`` that names a record in the tenant (absent keys left out)."""
        ...

    def record(self, record_id: int) -> RecordRow | None: ...
    def match_claims(
        self, tenant: str, subject: str | None, purpose: str | None, prefix: str | None, key: str | None
    ) -> list[ClaimRow]: ...
    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]: ...
    def release(self, claim_ids: Sequence[int]) -> None: ...
    def remaining_claims(self, record_ids: Sequence[int]) -> dict[int, list[ClaimRow]]: ...
    def content_of(self, record_ids: Sequence[int]) -> dict[int, tuple[str, str, bytes, str]]: ...
    def erase_records(self, record_ids: Sequence[int]) -> None: ...
    def replace_text(self, record_id: int, text: str, embedding: bytes, now: float) -> None: ...
    def set_sources(self, record_id: int, tenant: str, sources: Sequence[str]) -> None: ...
    def forget_sources(self, tenant: str, keys: Sequence[str], marker: str) -> list[int]:
        """Put ``marker`` in place of these erased keys in every lineage citing them (docs/concepts.md §8)."""
        ...

    def set_metadata(self, record_id: int, metadata: str) -> None: ...
    def set_times(self, record_id: int, created_at: float, updated_at: float) -> None: ...
    def count_live_records(self, now: float) -> int: ...
    # -- change log, receipts, evidence, ledger
    def log_changes(self, tenant: str, puts: Iterable[int], drops: Iterable[int]) -> None: ...
    def save_receipt(self, handle: str, kind: str, tenant_h: str, body: dict, now: float) -> None: ...
    def save_evidence(
        self,
        handle: str,
        tenant_h: str,
        erased_ids: bytes,
        quarantined_ids: bytes,
        paths: dict[str, bytes],
        fingerprints: bytes,
        now: float,
    ) -> None: ...
    def save_path_evidence(self, handle: str, evidence: dict[str, bytes]) -> None: ...
    def append_ledger(self, kind: str, handle: str | None, body: dict, now: float) -> tuple[int, str]: ...
    # -- purposes, subjects, policies
    def register_purpose(self, tenant: str, purpose: str) -> None: ...
    def set_tenant_name(self, tenant: str, name: str) -> None:
        """Keep the name of tenant id ``tenant`` (the one place it is kept: docs/concepts.md §8)."""
        ...

    def drop_tenant_name(self, tenant: str) -> str | None:
        """Delete the tenant's name once no record, registered subject or data key of it is
        left; returns the name deleted (to be fingerprinted), else None."""
        ...

    def subjects_of(self, tenant: str) -> list[str]: ...
    def all_purposes(self) -> list[tuple[str, str]]: ...
    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None: ...
    def subject_identifiers(self, tenant: str, subject: str) -> str | None: ...
    def all_subjects(self) -> list[tuple[str, str, str]]: ...
    def subject_has_claims(self, tenant: str, subject: str) -> bool: ...
    def drop_subject(self, tenant: str, subject: str) -> bool: ...
    def policy(self, tenant: str) -> tuple[str, str | None]: ...
    def set_policy(self, tenant: str, policy: str, reason: str | None) -> None: ...
    def drop_policy(self, tenant: str) -> str | None:
        """Delete the tenant's policy (it reverts to the default, ``quarantine``); returns
        its stated reason, if it had one, to be fingerprinted."""
        ...

    # A release's stated reason is kept beside the record it released (the ledger commits
    # only to ``reason_h``); erase_records erases it with the record, and reasons_of gives
    # the texts to fingerprint first, so verify proves them gone.
    def save_reason(self, record_id: int, tenant: str, reason_h: str, text: str, now: float) -> None: ...
    def reasons_of(self, record_ids: Sequence[int]) -> list[str]: ...
    def has_policy(self, tenant: str) -> bool: ...
    def all_policies(self) -> list[tuple[str, str, str | None]]: ...
    # -- derivations: lineage, mentions, quarantine
    def set_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None: ...
    def add_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None: ...
    def mentioning(self, tenant: str, subject: str) -> list[tuple[int, str]]: ...
    def derived_from(self, tenant: str, keys: Sequence[str]) -> list[tuple[int, str]]: ...
    def records_with_phrase(self, tenant: str, text: str, limit: int = 100000) -> list[tuple[int, str]]:
        """(id, text) of the tenant's records whose words contain the words of ``text``
        consecutively (words as :func:`efface.text.words` cuts them)."""
        ...

    def quarantine(self, record_id: int, tenant: str, why: str, handle: str, now: float) -> None: ...
    def is_quarantined(self, record_id: int) -> bool: ...
    def lift_quarantine(self, record_id: int) -> bool: ...
    # -- per-subject data keys and backups (crypto-shredding)
    def ensure_subject_keys(
        self, tenant: str, subjects: Iterable[str], now: float, subject_h: Callable[[str], str]
    ) -> None: ...
    def destroy_subject_keys(self, tenant: str, subjects: Iterable[str]) -> list[tuple[str, bytes]]: ...
    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]: ...
    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]: ...
    def claim_subjects(self, now: float) -> list[tuple[str, str]]: ...
    def backup_rows(self, now: float) -> Iterator[tuple[tuple, list[tuple]]]: ...
    def backup_floor(self) -> int | None: ...
    def record_backup(
        self, backup_id: str, path_h: str, ledger_seq: int, now: float, records: int, subjects: int
    ) -> None: ...
    def note_exposure(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None: ...
    def drop_exposure(self, tenant: str, subject_hashes: Iterable[str]) -> None: ...
    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]: ...


class WordIndex(Protocol):
    """An origin's word index (``origin.text``): staged inside the origin's transaction, so a
    deleted row never matches again; words as :func:`efface.text.words` cuts them."""

    def stage(self, tx: Any, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        """Index ``texts`` of ``puts`` and unindex ``drops`` (and the old texts of ``puts``) in
        ``tx`` (the origin's own transaction type); every one of them is ``tenant``'s."""
        ...

    scoped: bool
    """Whether the index holds each entry's tenant, so a query can rank one tenant's matches."""

    def doc_count(self) -> int: ...
    def tenant_count(self, tenant: str) -> int:
        """About how many records ``tenant`` (its id) holds (an index with a tenant column
        narrows a query to it when that is a small share: ``paths.fts.NARROW``)."""
        ...

    def index_terms(self, words: Sequence[str], *, remember: bool = True) -> list[str | None]:
        """The term the index holds for each word (a stem, if the index stems), None for a word
        it would not hold as one term: what verify's word probe must look for. ``remember``:
        whether an implementation may memoise the words (not those of erased texts)."""
        ...

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        """Records holding each word's term (words absent from the index left out)."""
        ...

    def bm25_ceiling(self, dfs: Sequence[int]) -> float:
        """The most BM25 any record could score for a query whose distinct terms are held by
        ``dfs`` records each (a score's share of it means the same on any candidate list;
        recall fuses by it)."""
        ...

    def search(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[int]:
        """The ``depth`` best matches of any of ``words`` (BM25), those live for the tenant and
        purpose (and subject) kept, best first, at most ``limit``."""
        ...

    def ranked(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[tuple[int, float]]:
        """:meth:`search` with each id's BM25 score (higher is better)."""
        ...

    def ranked_seen(
        self,
        words: Sequence[str],
        tenant: str,
        purpose: str,
        subject: str | None,
        now: float,
        depth: int,
        limit: int,
        *,
        narrow: bool = True,
        scoring: Sequence[str] = (),
    ) -> tuple[list[tuple[int, float]], int]:
        """:meth:`ranked`, and how many matches the index ranked before the filters (at most
        ``depth``; fewer means no further match exists to widen to). ``narrow``: rank only the
        tenant's own matches, where the index can (an index that cannot ignores it).
        ``scoring``: more words that add to the scores of the records ``words`` find, where
        the index can (the common words past the posting budget: they score, they do not find)."""
        ...

    def count_matches(self, words: Sequence[str], cap: int) -> int: ...
    def terms(self) -> Iterable[str]: ...
    def terms_of_erased(self, ids: Sequence[int]) -> Iterable[str] | None:
        """The words of the erased ``ids``' texts the index still held right after their
        delete, when this process deleted them (answered once); None: ask :meth:`terms`."""

    def matching_ids(self, terms: Sequence[str], ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the index still holds under any of ``terms`` (as :meth:`terms`
        lists them, not words: a stem is matched as it is, not stemmed again)."""
        ...

    def purge(self) -> bool:
        """Drop deleted entries from wherever they linger; True when it did any work."""
        ...

    def purged_epoch(self) -> int:
        """The newest epoch whose deleted entries are gone from the index's bytes."""
        ...


class LiveCells(Protocol):
    """The bytes of the live cells of the origin's database file, held for one scan."""

    name: str
    """The file's name, relative to the store directory."""

    def inside_words(self, offsets: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For 8-aligned windows: whether each lies in a live cell, and its two 64-bit words."""
        ...

    def pages(self) -> int: ...


class LivenessCopy(Protocol):
    """An origin's copy in memory of which records are live (and their vectors)."""

    def usable(self, subject: str | None) -> bool:
        """Whether it can answer for a recall scoped to ``subject`` (or to none)."""
        ...

    def live(self, ids: Sequence[int], tenant: str, purpose: str, now: float) -> list[int]: ...
    def holding(self, ids: Sequence[int]) -> int:
        """How many of ``ids`` it still counts live or holds a vector of."""
        ...


class LiveRegions(Protocol):
    """Where, in the origin's files, live values are legitimately stored. ``read(file, start,
    n)`` reads the bytes a scan saw (a file may have changed since)."""

    def bounds(
        self, file: str, offset: int, read: Callable[[str, int, int], bytes]
    ) -> tuple[int, int, frozenset[str]] | None:
        """The region ``[start, end)`` of ``file`` (relative to the store directory) around
        ``offset`` and the kinds of live value it may hold; None where live values are not kept."""
        ...

    def contains(self, file: str, offset: int, width: int, read: Callable[[str, int, int], bytes]) -> bool:
        """Whether ``width`` bytes at ``offset`` of ``file`` lie where live content is kept."""
        ...


class Physical(Protocol):
    """The optional byte-level capability of an origin that keeps files (``origin.physical``):
    what the compactor needs to make erased bytes go, and the verifier to tell a live copy
    from residue without knowing the file format."""

    def files(self) -> list[str]: ...
    def checkpoint(self) -> bool:
        """Move erased bytes out of every file they may linger in (the SQLite WAL); records the
        epoch covered. False if it could not complete now."""
        ...

    def rebuild_indexes(self) -> bool:
        """Rebuild structures whose pages keep fragments of erased cells, if anything was erased
        since the last rebuild; True when it rebuilt."""
        ...

    def rewrite(self) -> bool:
        """Rewrite the origin's files whole, so no stale copy of an erased cell survives in
        a live page; True when it completed."""
        ...

    def checkpointed_epoch(self) -> int: ...
    def live_regions(self, root: str) -> LiveRegions: ...
    def live_holding(self, windows: set[bytes], embeddings: bool) -> set[bytes]:
        """Which of these byte windows a live record (text, key, embedding if asked) or live
        subject still holds: copies allowed to be there."""
        ...

    def growing(self) -> tuple[str, ...]:
        """The files a write grows (a reader stats them to tell a changed store)."""
        ...

    def merge_segments(self, stop: Callable[[], bool] | None = None, *, always: bool = False) -> bool:
        """Merge the word index's segments, in short steps until ``stop()``; True when done."""
        ...

    def scan_token(self) -> Any:
        """A token for a scan of the database file beginning now (see :meth:`changed_pages`)."""
        ...

    def changed_pages(self, token: Any) -> tuple[str, int, np.ndarray] | None:
        """(file, page size, pages) a scan that began at ``token`` may not have seen as they
        are now; None when that cannot be shown."""
        ...

    def live_cells(self, root: str) -> AbstractContextManager[LiveCells | None]:
        """The live cells' bytes in one read snapshot held for the block; None if unreadable."""
        ...

    def live_values(self, embeddings: bool) -> Iterable[tuple[bytes, str]]:
        """Every value a live row holds, with its kind (what a live copy may belong to)."""
        ...

    def pending_fingerprints(self, handle: str) -> list[bytes]:
        """The fingerprints of every other erasure not yet proven erased."""
        ...


class Reads(Protocol):
    """The origin's reads. Outside :meth:`Origin.snapshot` each call sees the newest committed
    state; inside it every call made in that thread sees one state."""

    def read(self, tenant: str, key: str, purpose: str, now: float) -> tuple[RecordRow, list[ClaimRow]] | None: ...
    def live_ids(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float) -> set[int]: ...
    def live_embeddings(
        self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float
    ) -> dict[int, bytes]:
        """:meth:`live_ids` and :meth:`embeddings` in one read: each live id with its
        embedding as stored (``b""`` for a record without one)."""
        ...

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]: ...
    def purposes(self, tenant: str) -> list[str]: ...
    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]: ...
    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]: ...
    def scan_keys(
        self, tenant: str, purpose: str, prefix: str, subject: str | None, after: str | None, limit: int, now: float
    ) -> list[str]:
        """Keys (in code-point order, after ``after``) of the tenant's unquarantined records
        starting with ``prefix`` that have a live claim for ``purpose`` (and ``subject``)."""
        ...

    def all_subjects(self) -> list[tuple[str, str, str]]: ...
    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]: ...
    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]: ...
    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]: ...
    # -- the change log and epochs
    def current_epoch(self) -> int: ...
    def changes_since(self, epoch: int, upto: int | None = None) -> list[tuple[int, int, str, str]]: ...
    def latest_put_epoch(self, after: int) -> int | None: ...
    def pending_drops(self, applied: int) -> int: ...
    def due_tenant(self, now: float) -> str | None: ...
    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]: ...
    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]: ...
    def turn_fields(self, tenant: str) -> Iterable[tuple[int, Any, Any, Any]]:
        """``(id, speaker, session, at)`` of every record of ``tenant``, by id: :mod:`efface.origin.fields`."""
        ...

    def count_records(self) -> int: ...
    def tenants(self) -> list[str]: ...
    def tenant_name(self, tenant: str) -> str | None:
        """The name kept for this tenant id (the keyed hash every other row holds), while
        the tenant has anything left; None once it was erased."""
        ...

    # -- receipts, ledger, evidence
    def receipt(self, handle: str) -> dict[str, Any] | None: ...
    def receipts(self, tenant_h: str | None = None) -> list[dict[str, Any]]: ...
    def ledger(self) -> list[dict[str, Any]]: ...
    def evidence(self, handle: str) -> dict[str, Any] | None: ...
    def path_evidence(self, handle: str) -> dict[str, bytes]: ...
    def erased_proof(self, handle: str) -> dict[str, Any] | None: ...
    def ack_times(self, after: int, upto: int) -> list[float]: ...
    def residual_rows(self, ids: Sequence[int]) -> dict[str, int]: ...
    def still_quarantined(self, ids: Sequence[int]) -> int: ...
    def meta_get(self, key: str) -> str | None: ...
    def meta_items(self, prefix: str) -> dict[str, str]:
        """Every meta entry whose key starts with ``prefix`` (the change log's consumers)."""
        ...


def require_epoch(reads: Reads, at_least: int | None) -> None:
    """Raise :class:`ErasureNotSettled` unless ``reads`` (a snapshot) includes epoch ``at_least``."""
    if at_least is None:
        return
    current = reads.current_epoch()
    if current < at_least:
        raise ErasureNotSettled(
            f"this state holds changes up to epoch {current}, and the read needs epoch {at_least}: "
            "retry once it has caught up, or read where it has",
            required_epoch=at_least,
            applied_epoch=current,
        )


class Origin(Reads, Protocol):
    """What the store needs from its source of truth."""

    write_lock: threading.RLock
    """Held for every write: transactions, meta, pruning, verification, maintenance."""

    @property
    def text(self) -> WordIndex: ...
    @property
    def physical(self) -> Physical | None:
        """The byte-level side, where the origin keeps files; None where it keeps none."""
        ...

    @property
    def liveness(self) -> LivenessCopy | None:
        """A copy in memory of which records are live, where the origin keeps one."""
        ...

    def transaction(self, kind: str, tenant: str | None, now: float) -> AbstractContextManager[Tx]:
        """One write transaction; its epoch is assigned in it and is greater than every
        committed one. Commits durably on a clean exit; on an exception nothing of it stays."""
        ...

    def snapshot(self, at_least: int | None = None) -> AbstractContextManager[Reads]:
        """Hold one committed state for every read this thread makes inside the block.
        ``at_least``: the state must include every change up to that epoch (an erasure a
        read must see, acknowledged perhaps by another process); :class:`ErasureNotSettled`
        when this origin's state is older (:func:`require_epoch`)."""
        ...

    def erased_checks(self, epoch: int) -> list[Check]:
        """The origin's own structural checks that its storage let go of the erasure at
        ``epoch`` (named by the origin: ``origin.wal`` on SQLite), for ``verify``'s rung
        ``erased``; the byte scan is separate."""
        ...

    def erased_epoch(self) -> int:
        """The newest epoch whose erased bytes are gone from the origin's own storage."""
        ...

    def record_verification(
        self, handle: str, body: dict, receipt_level: str, discard: bool, now: float, verified: dict | None = None
    ) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level, set its
        ``verified`` entry to ``verified`` when given (what the verification found of each
        copy: :func:`efface.erasure.copies.recorded`), and (``discard``) drop the
        fingerprints and word hashes, all together; no new epoch."""
        ...

    def meta_set(self, key: str, value: str) -> None: ...
    def prune_changes(self, upto: int) -> None: ...
    def close(self) -> None: ...
