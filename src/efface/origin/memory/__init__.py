"""The in-memory reference origin: plain dicts and a small word index, nothing on disk.

In the manner of ZODB's ``MappingStorage``: the whole state is one :class:`_State` object.
A transaction works on a copy of it (the top-level containers are copied, the values in
them are never mutated in place) and the copy is swapped in by one reference assignment at
commit, so an exception leaves nothing behind and a reader sees either the old or the new
state, never a half-applied one. One writer at a time, under :attr:`MemoryOrigin.write_lock`.

The word index (:class:`MemoryText`, at ``origin.text``) holds postings and per-record term
counts over :func:`efface.text.words`, ranks by BM25, and is staged inside the transaction
like the SQLite FTS5 index. Nothing of it survives :meth:`MemoryOrigin.close`: there are no
bytes to checkpoint, purge or scan, so the origin has no ``physical`` capability and its
erased epoch is its current epoch. It is the reference the contract tests run beside SQLite.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ...model import Check
from ...vectors import read_many as read_vectors
from ..base import ClaimRow, RecordRow, require_epoch
from ..fields import turn_fields
from .state import _all_subjects, _exposed, _live, _live_ids, _live_subject_hashes, _State, _subject_keys
from .text import MemoryText
from .tx import MemoryTx

__all__ = ["MemoryOrigin", "MemoryText", "MemoryTx"]


class MemoryOrigin:
    """The origin in this process's memory (see the module docstring)."""

    physical = None
    """It keeps no files: nothing of an erasure lingers in bytes it keeps (its erased epoch is its current one)."""
    liveness = None
    """Its reads are already in memory: no copy of liveness beside them."""

    def __init__(self) -> None:
        self.write_lock = threading.RLock()
        """Held for every transaction and every maintenance write."""
        self._state = _State()
        self._pending: _State | None = None
        """The open transaction's state (only ever set with :attr:`write_lock` held)."""
        self._local = threading.local()
        self._closed = False
        self.text = MemoryText(self._st, self.current_epoch)
        """The word index: see :class:`MemoryText`."""
        self._samples: dict[tuple[str, int], tuple[tuple[int, int], list[int]]] = {}
        """Per tenant and size: the state its sample of records was drawn in (epoch, next record id),
        and their ids."""

    # -- states ---------------------------------------------------------------------------
    def _st(self) -> _State:
        """The state this thread reads: its snapshot's, or the newest committed one."""
        pinned = getattr(self._local, "state", None)
        if pinned is not None:
            return pinned
        if self._closed:
            raise RuntimeError("the origin is closed")
        return self._state

    @contextlib.contextmanager
    def snapshot(self, at_least: int | None = None) -> Iterator[MemoryOrigin]:
        """Every read made in this thread inside the block sees one committed state
        (``at_least``: see :meth:`efface.origin.base.Origin.snapshot`)."""
        outer = getattr(self._local, "state", None)
        if outer is None:
            self._local.state = self._st()
        try:
            require_epoch(self, at_least)
            yield self
        finally:
            if outer is None:
                self._local.state = None

    @contextlib.contextmanager
    def transaction(self, kind: str, tenant: str | None, now: float) -> Iterator[MemoryTx]:
        """One write transaction on a copy of the state; the epoch is assigned in it. The copy
        is swapped in on a clean exit; on an exception it is dropped."""
        with self.write_lock:
            if self._closed:
                raise RuntimeError("the origin is closed")
            state = self._state.clone()
            state.epoch += 1
            tx = MemoryTx(state, state.epoch)
            self._pending = state
            try:
                yield tx
            finally:
                self._pending = None
            self._state = state

    def _replace(self, change: Callable[[_State], None]) -> None:
        """A maintenance write (no epoch): ``change`` edits a copy, swapped in whole. Made by the
        thread inside an open transaction (the lock is reentrant), it joins that transaction,
        as it does on SQLite's writer connection."""
        with self.write_lock:
            if self._pending is not None:
                change(self._pending)
                return
            state = self._state.clone()
            change(state)
            self._state = state

    def meta_get(self, key: str) -> str | None:
        return self._st().meta.get(key)

    def meta_items(self, prefix: str) -> dict[str, str]:
        return {k: v for k, v in self._st().meta.items() if k.startswith(prefix)}

    def meta_set(self, key: str, value: str) -> None:
        self._replace(lambda s: s.meta.__setitem__(key, value))

    def prune_changes(self, upto: int) -> None:
        def change(s: _State) -> None:
            s.changes = [c for c in s.changes if c[0] > upto]

        self._replace(change)

    def record_verification(
        self, handle: str, body: dict, receipt_level: str, discard: bool, now: float, verified: dict | None = None
    ) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level, and (once erased is
        proven) drop the fingerprints and the word hashes: all or none."""
        with self.write_lock:
            state = self._state.clone()
            tx = MemoryTx(state, state.epoch)
            seq, digest = tx.append_ledger("verify", handle, body, now)
            row = state.receipts.get(handle)
            if row is not None:
                stored = json.loads(row[4])
                stored["level"] = receipt_level
                if verified is not None:
                    stored["verified"] = verified
                state.receipts[handle] = row[:4] + (json.dumps(stored, sort_keys=True),)
            if discard:
                ev = state.evidence.get(handle)
                if ev is not None:
                    state.evidence[handle] = {**ev, "fingerprints": None, "tokens": b"[]"}
                kept = state.path_evidence.get(handle)
                if kept is not None and "fts" in kept:
                    state.path_evidence[handle] = {k: v for k, v in kept.items() if k != "fts"}
            self._state = state
        return seq, digest

    def path_evidence(self, handle: str) -> dict[str, bytes]:
        """What each read path kept at forget time for its probe (see paths.base.ReadPath)."""
        return dict(self._st().path_evidence.get(handle, {}))

    def erased_epoch(self) -> int:
        """Nothing is on disk: an erasure's bytes go with the state it was committed over."""
        return self.current_epoch()

    def erased_checks(self, epoch: int) -> list[Check]:
        """None to make: it keeps no bytes of its own (the byte scan covers the paths' files)."""
        return []

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        return _live_subject_hashes(self._st(), tenant, hashes)

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        return _exposed(self._st(), tenant, key_hashes)

    def close(self) -> None:
        with self.write_lock:
            self._closed = True
            self._state = _State()  # drop every reference the origin holds to the content

    # -- reads ---------------------------------------------------------------------------
    def read(self, tenant: str, key: str, purpose: str, now: float) -> tuple[RecordRow, list[ClaimRow]] | None:
        s = self._st()
        rid = s.by_key.get((tenant, key))
        if rid is None or rid in s.quarantine:
            return None
        rec = s.records[rid]
        claims = [
            ClaimRow(c.id, rid, rec.key, c.subject, c.purpose, c.basis, c.expires_at)
            for c in (s.claims[i] for i in s.claims_of.get(rid, ()))
            if c.purpose == purpose and _live(c, now)
        ]
        return (rec.row(), claims) if claims else None

    def live_ids(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float) -> set[int]:
        """The ids among ``ids`` that are live for this tenant and purpose (and subject)."""
        return _live_ids(self._st(), ids, tenant, purpose, subject, now)

    def live_embeddings(
        self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float
    ) -> dict[int, bytes]:
        s = self._st()
        return {i: s.records[i].embedding or b"" for i in _live_ids(s, ids, tenant, purpose, subject, now)}

    def vector_sample(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """At most ``n`` vectors of ``tenant``'s live records, drawn at random once per
        committed state (:class:`efface.origin.base.VectorSample`)."""
        s = self._st()
        got = self._samples.get((tenant, n))
        drawn = (s.epoch, s.next_record)
        if got is None or got[0] != drawn:
            mine = sorted(rid for (t, _k), rid in s.by_key.items() if t == tenant)
            if len(mine) > n:  # seeded by the tenant's size, as the SQLite origin's copy draws
                mine = sorted(np.random.default_rng(len(mine)).choice(mine, n, replace=False).tolist())
            got = (drawn, mine)
            if len(self._samples) >= 1024:
                self._samples.clear()
            self._samples[(tenant, n)] = got
        live = _live_ids(s, got[1], tenant, purpose, None, now)
        blobs = [s.records[i].embedding for i in got[1] if i in live and s.records[i].embedding]
        return read_vectors(blobs) if blobs else np.empty((0, 0), dtype=np.float32)

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        s = self._st()
        return {i: s.records[i].row() for i in ids if i in s.records}

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return _all_subjects(self._st())

    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]:
        """(record id, key, why, handle, since, sources JSON) of every quarantined record."""
        s = self._st()
        rows = [
            (rid, s.records[rid].key, why, handle, since, s.records[rid].sources)
            for rid, (t, why, handle, since) in s.quarantine.items()
            if t == tenant and rid in s.records
        ]
        return sorted(rows, key=lambda r: r[1])

    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]:
        s = self._st()
        return {k for k in keys if (tenant, k) in s.by_key}

    def scan_keys(
        self, tenant: str, purpose: str, prefix: str, subject: str | None, after: str | None, limit: int, now: float
    ) -> list[str]:
        s = self._st()
        found = sorted(
            k for (t, k) in s.by_key if t == tenant and k.startswith(prefix) and (after is None or k > after)
        )
        out = []
        for k in found:
            if _live_ids(s, [s.by_key[(tenant, k)]], tenant, purpose, subject, now):
                out.append(k)
                if len(out) == limit:
                    break
        return out

    def purposes(self, tenant: str) -> list[str]:
        return sorted(p for t, p in self._st().purposes if t == tenant)

    def changes_since(self, epoch: int, upto: int | None = None) -> list[tuple[int, int, str, str]]:
        return [c for c in self._st().changes if c[0] > epoch and (upto is None or c[0] <= upto)]

    def latest_put_epoch(self, after: int) -> int | None:
        return max((c[0] for c in self._st().changes if c[0] > after and c[3] == "put"), default=None)

    def due_tenant(self, now: float) -> str | None:
        """A tenant with a claim whose TTL has passed, if any (the one that expired first)."""
        s = self._st()
        due = [
            (c.expires_at, c.id, c.record_id)
            for c in s.claims.values()
            if c.expires_at is not None and c.expires_at <= now
        ]
        return s.records[min(due)[2]].tenant if due else None

    def pending_drops(self, applied: int) -> int:
        return sum(1 for c in self._st().changes if c[3] == "drop" and c[0] > applied)

    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]:
        s = self._st()
        return {i: s.records[i].embedding for i in ids if i in s.records}

    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]:
        s = self._st()
        return [(rid, r.embedding) for rid, r in sorted(s.records.items()) if r.tenant == tenant]

    def turn_fields(self, tenant: str) -> Iterable[tuple[int, Any, Any, Any]]:
        s = self._st()
        return [turn_fields(rid, r.metadata) for rid, r in sorted(s.records.items()) if r.tenant == tenant]

    def tenants(self) -> list[str]:
        return list(dict.fromkeys(r.tenant for r in self._st().records.values()))

    def current_epoch(self) -> int:
        return self._st().epoch

    def receipt(self, handle: str) -> dict[str, Any] | None:
        row = self._st().receipts.get(handle)
        if row is None:
            return None
        epoch, kind, tenant_h, at, body = row
        return {
            "handle": handle,
            "epoch": epoch,
            "kind": kind,
            "tenant_h": tenant_h,
            "created_at": at,
            "body": json.loads(body),
        }

    def receipts(self, tenant_h: str | None = None) -> list[dict[str, Any]]:
        s = self._st()
        handles = sorted(
            (row[0], n, h) for n, (h, row) in enumerate(s.receipts.items()) if not tenant_h or row[2] == tenant_h
        )
        out = []
        for _epoch, _n, h in handles:
            epoch, kind, th, at, body = s.receipts[h]
            out.append(
                {"handle": h, "epoch": epoch, "kind": kind, "tenant_h": th, "created_at": at, "body": json.loads(body)}
            )
        return out

    def ledger(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self._st().ledger]

    # -- evidence for verify -------------------------------------------------------------
    def evidence(self, handle: str) -> dict[str, Any] | None:
        ev = self._st().evidence.get(handle)
        return dict(ev) if ev is not None else None

    def erased_proof(self, handle: str) -> dict[str, Any] | None:
        """The newest verification of ``handle`` that proved ``erased``."""
        for e in reversed(self._st().ledger):
            if e["handle"] == handle and e["kind"] == "verify" and json.loads(e["body"]).get("level") == "erased":
                return dict(e)
        return None

    def ack_times(self, after: int, upto: int) -> list[float]:
        """Acknowledgement times of the erasures with epochs in (after, upto]."""
        return [row[3] for row in self._st().receipts.values() if after < row[0] <= upto]

    def tenant_name(self, tenant: str) -> str | None:
        """The name kept for this tenant id, while the tenant has anything left."""
        return self._st().tenant_names.get(tenant)

    def residual_rows(self, ids: Sequence[int]) -> dict[str, int]:
        """Rows that still name any of these record ids, per table."""
        s = self._st()
        wanted = set(ids)
        counts = {
            "records": sum(1 for i in wanted if i in s.records),
            "claims": sum(len(s.claims_of.get(i, ())) for i in wanted),
            "lineage": sum(len(s.lineage[i][1]) for i in wanted if i in s.lineage),
            "mentions": sum(len(s.mentions[i][1]) for i in wanted if i in s.mentions),
            "quarantine": sum(1 for i in wanted if i in s.quarantine),
            "reasons": sum(len(s.reasons[i]) for i in wanted if i in s.reasons),
        }
        return {t: n for t, n in counts.items() if n}

    def still_quarantined(self, ids: Sequence[int]) -> int:
        s = self._st()
        return sum(1 for i in set(ids) if i in s.quarantine)

    def count_records(self) -> int:
        return len(self._st().records)

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key (restore opens backups with them)."""
        return _subject_keys(self._st())
