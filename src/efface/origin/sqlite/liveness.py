"""Which records are live, and their vectors, held in memory: recall's check of its candidates.

A recall at 100k records asks about two hundred candidates (a hundred from each leg) whether
they are live for the tenant and purpose, and reads their vectors for the exact cosine: in
SQLite that is three look-ups a candidate for the check (the record, its quarantine, its
claims) and one for the vector, about a millisecond per leg, the largest share of a search
(docs/benchmarks-history.md). Here it is a few array reads.

What is kept, per record id (ids are never reused): the tenant id of a record that is live
for some purpose (-1 for one that is gone, quarantined, or without claims); the set of
purposes its claims that never expire hold, as a small code; for a record with claims that
expire, their (purpose, expiry) pairs, judged against the recall's ``now``; and the vector of
every record it counts live, in half precision as the origin stores it (768 bytes a record at
384 dimensions: 77 MB at 100k records). No text, no subject, no key.

The vectors are a copy of the records' content, so they follow the erasure contract: a
record that stops being live (forgotten, expired and swept, quarantined) has its row zeroed
here before the forget or write that did it returns, and a quarantined record's comes back
only when it is released. ``tests/sqlite/test_liveness.py`` checks after every step of a
state machine that the copy holds exactly the live records' vectors, and zeros elsewhere.

It is a copy, and the origin stays the truth. Recall trusts it to choose and rank, never to
serve: the records it is about to return are checked live again in SQLite, in the recall's
snapshot, as their rows are read (:func:`efface.paths.recall.hybrid`), so a copy that lags or
is wrong can cost a result, never leak one. It is kept up as the postings are: a write
transaction notes the records it writes or claims (``SQLiteTx.touched``), TEMP triggers on
the writer connection note every deletion of a record or claim and every change of
quarantine (into a TEMP table: neither is part of the file), and after each commit those
records are read again from the origin and put here, before the write or forget returns. A recall that starts
after a forget was acknowledged finds the erased records gone here too.

A store of at most :data:`LOAD_HERE` records loads the copy as it opens; a larger one in the
background from its first recall (about 1 s at 100k records), and recalls check in SQLite
meanwhile, the sample of a tenant's vectors (:meth:`Liveness.sample`) drawn from the file
alike (:func:`drawn`): the copy's state changes how fast a recall is, never its answer. A
subject-scoped recall always checks in SQLite (subjects are not kept here).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import apsw
import numpy as np

from ...vectors import F16, widen
from ...vectors import read as read_vector
from .rows import in_chunks
from .tx import Fresh

LOAD_HERE = 20_000
"""A store of at most this many records loads the copy as it opens."""
LOAD_CHUNK = 50_000
"""Record ids read per statement while loading."""
BLOCK_BITS = 16
BLOCK = 1 << BLOCK_BITS
"""Record ids per block of vectors (a block is allocated when its first live record comes)."""
MAX_SAMPLED = 1024
"""Tenants whose sample of records (:meth:`Liveness.sample`) is kept between recalls."""
_RECORDS = (
    "SELECT r.id, r.tenant, EXISTS (SELECT 1 FROM quarantine q WHERE q.record_id=r.id), r.embedding FROM records r"
)
log = logging.getLogger("efface.origin")

TRIGGERS = [
    ("records", "DELETE", "OLD.id"),
    ("records", "UPDATE OF id, tenant", "OLD.id"),
    ("records", "UPDATE OF id, tenant", "NEW.id"),
    ("claims", "DELETE", "OLD.record_id"),
    ("claims", "UPDATE OF record_id", "OLD.record_id"),
    ("quarantine", "INSERT", "NEW.record_id"),
    ("quarantine", "DELETE", "OLD.record_id"),
    ("quarantine", "UPDATE", "OLD.record_id"),
    ("quarantine", "UPDATE", "NEW.record_id"),
]
"""(table, event, the record id it names): the changes that can make a record not live, or
live again, other than the writes and claims a transaction notes itself (``SQLiteTx.touched``:
a record's upsert, a claim's insert or restatement, a text replaced). Those run by the
thousand in an import, and a trigger on them cost more than the write (SQLite journals each
row's statement once a trigger can fire: an import ran 4.2k records/s with them, 7.3k
without); a delete, an update of an id or tenant (none is made) and quarantine are rare."""


def drawn(ids: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` of ``ids`` (a tenant's records counted live for some purpose: ascending,
    distinct), at random, ascending: numpy's generator seeded by their count, so the same
    records draw the same sample whoever lists them (this copy, or the origin while it
    loads: :meth:`.origin.SQLiteOrigin.vector_sample`; the PostgreSQL origin draws alike)."""
    if len(ids) <= n:
        return ids
    return np.sort(np.random.default_rng(len(ids)).choice(ids, n, replace=False))


class Liveness:
    """The in-memory copy of which records are live (see the module docstring)."""

    def __init__(self, path: str, writer: Any, lock: Any, count: int):
        self._path = path
        self._w = writer
        self._lock = lock
        """The writer's lock: held for every use of ``writer``."""
        self._mu = threading.Lock()
        """Held while the arrays change (the writer, after a commit; a load as it installs)."""
        self._tenant = np.full(0, -1, dtype=np.int32)
        self._sig = np.zeros(0, dtype=np.int32)
        self._expiring: dict[int, tuple[tuple[str, float], ...]] = {}
        self._has = np.zeros(0, dtype=bool)
        """Per record id: whether its vector is held (in ``_blocks``)."""
        self._blocks: list[np.ndarray | None] = []
        """The live records' vectors, half precision as stored, :data:`BLOCK` ids a block."""
        self._dim: int | None = None
        self._tenants: dict[str, int] = {}
        self._sigs: list[frozenset[str]] = [frozenset()]
        self._sig_codes: dict[frozenset[str], int] = {frozenset(): 0}
        self._by_purpose: dict[str, np.ndarray] = {}
        self._ready = False
        self._writes = 0
        """Commits applied to the copy (a tenant's sample is drawn again after one)."""
        self._samples: dict[tuple[str, str, int], tuple[int, np.ndarray]] = {}
        """Per tenant, purpose and size: the write count it was drawn at, and the vectors drawn."""
        self._samples_mu = threading.Lock()
        """Guards :attr:`_samples` with the write count (never :attr:`_mu`, which a load holds
        while it puts a chunk: a commit does not wait for that)."""
        self._pending: set[int] | None = None
        """While a load runs: ids committed meanwhile, read again once it ends."""
        self._later = False
        self._stop = threading.Event()
        self.install()
        if count <= LOAD_HERE:
            self._pending = set()
            self._load()
        else:
            self._later = True

    def install(self) -> None:
        """The TEMP table and triggers on the writer connection (again after a change of its
        ``temp_store``, which drops them: see ``SQLitePhysical.rewrite``). The triggers write
        to the table in SQL: a Python function called from a trigger takes the GIL back for
        every row, and beside a busy thread (the compactor) each wait is up to a switch
        interval. The table is part of the writer's transaction: what a statement that rolls
        back noted goes with it."""
        w = self._w
        w.execute("CREATE TEMP TABLE IF NOT EXISTS efface_touched(id INTEGER)")
        for n, (table, event, col) in enumerate(TRIGGERS):
            w.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS efface_live_{n} AFTER {event} ON main.{table}"
                f" BEGIN INSERT INTO temp.efface_touched(id) VALUES({col}); END"
            )

    # -- reads --------------------------------------------------------------------------
    def usable(self, subject: str | None) -> bool:
        """Whether a recall (for ``subject``: None) can check here; the first ask of a large
        store starts its load in the background."""
        if self._later:
            self._start()
        return self._ready and subject is None

    def live(self, ids: Sequence[int], tenant: str, purpose: str, now: float) -> list[int]:
        """Those of ``ids`` live for ``tenant`` and ``purpose`` at ``now``, as far as this copy
        knows (in the order given)."""
        code = self._tenants.get(tenant)
        if code is None or not len(ids):
            return []
        tenant_of, sig_of = self._tenant, self._sig  # one read of each: a commit may swap them
        arr = np.asarray(ids, dtype=np.int64)
        inside = (arr >= 0) & (arr < min(len(tenant_of), len(sig_of)))
        mine = np.zeros(len(arr), dtype=bool)
        mine[inside] = tenant_of[arr[inside]] == code
        ok = np.zeros(len(arr), dtype=bool)
        held = self._purpose_table(purpose)
        sigs = sig_of[arr[mine]]
        ok[mine] = held[np.minimum(sigs, len(held) - 1)] & (sigs < len(held))
        out = arr[ok].tolist()
        if self._expiring:
            for rid in arr[mine & ~ok].tolist():
                if any(p == purpose and exp > now for p, exp in self._expiring.get(rid, ())):
                    out.append(rid)
            if len(out) > int(ok.sum()):
                keep = set(out)
                out = [i for i in arr.tolist() if i in keep]
        return out

    def _purpose_table(self, purpose: str) -> np.ndarray:
        """For each purpose-set code: whether it holds ``purpose``."""
        got = self._by_purpose.get(purpose)
        sigs = self._sigs
        if got is None or len(got) != len(sigs):
            got = np.fromiter((purpose in s for s in sigs), dtype=bool, count=len(sigs))
            self._by_purpose[purpose] = got
        return got

    # -- kept up with the writer ----------------------------------------------------------
    def committed(self, noted: Iterable[int] = (), fresh: Mapping[int, Fresh] | None = None) -> None:
        """After a commit (the write lock held): read the records it touched again, those the
        triggers noted and ``noted`` (the transactions' own notes, ``SQLiteTx.touched``);
        ``fresh`` (``SQLiteTx.fresh``: records the commit created, as written) are taken as
        they are, unless noted too."""
        try:
            touched = self._take_touched() | set(noted)
            made = {rid: row for rid, row in (fresh or {}).items() if rid not in touched}
            if not touched and not made:
                return
            with self._samples_mu:  # a draw made meanwhile is not kept (:meth:`sample`)
                self._writes += 1
                self._samples = {}  # drawn again at the next recall; no erased record's vector kept
            if self._pending is not None:
                self._pending |= touched | made.keys()
                return
            if self._ready:
                if touched:
                    self._refresh(self._w, touched)
                if made:
                    with self._mu:
                        self._put_made(made)
        except Exception as exc:  # committed already: the copy goes (not the write), recall checks in SQLite
            log.warning("live-record copy dropped (%s): recalls check in SQLite", type(exc).__name__)
            self._ready, self._pending = False, None

    def rolled_back(self) -> None:
        """After a rollback: what its statements noted went with it (a TEMP table is part of
        the transaction); nothing to do."""

    def _take_touched(self) -> set[int]:
        """The record ids noted since the last commit was applied here, taken out."""
        w = self._w
        (got,) = w.execute("SELECT json_group_array(DISTINCT id) FROM temp.efface_touched").fetchone()
        touched = set(json.loads(got))
        if touched:
            w.execute("DELETE FROM temp.efface_touched")
        return touched

    def _refresh(self, conn: Any, ids: Iterable[int]) -> None:
        ids = sorted(ids)
        recs: list[tuple[int, str, int, bytes]] = []
        claims: list[tuple[int, str, float | None]] = []
        for chunk, marks in in_chunks(ids):
            recs += conn.execute(f"{_RECORDS} WHERE r.id IN ({marks})", chunk).fetchall()
            claims += conn.execute(
                f"SELECT record_id, purpose, expires_at FROM claims WHERE record_id IN ({marks})", chunk
            ).fetchall()
        with self._mu:
            self._put(ids, recs, claims)

    def _put(
        self,
        ids: Sequence[int],
        recs: Sequence[tuple[int, str, int, bytes]],
        claims: Sequence[tuple[int, str, float | None]],
    ) -> None:
        """Set these records' entries from their rows (``ids`` without a row: gone). Each
        record's new entry is written in an order that a recall reading meanwhile can only
        take for "not live yet" or "not live any more": a record that stays live stays so."""
        forever: dict[int, set[str]] = {}
        expiring: dict[int, list[tuple[str, float]]] = {}
        for rid, purpose, expires in claims:
            if expires is None:
                forever.setdefault(rid, set()).add(purpose)
            else:
                expiring.setdefault(rid, []).append((purpose, float(expires)))
        top = max(ids, default=0)
        if top >= len(self._tenant):
            self._grow(top + 1)
        rows = {r[0]: r for r in recs}
        dead: list[int] = []
        live: list[int] = []
        codes: list[int] = []
        sigs: list[int] = []
        blobs: list[bytes] = []
        for rid in ids:
            row = rows.get(rid)
            held, later = forever.get(rid), expiring.get(rid)
            if row is None or row[2] or not (held or later):  # gone, quarantined, or no claim
                dead.append(rid)
                continue
            code = self._tenants.get(row[1])
            if code is None:
                code = self._tenants[row[1]] = len(self._tenants)
            live.append(rid)
            codes.append(code)
            sigs.append(self._sig_code(frozenset(held or ())))
            blobs.append(row[3])
        if dead:
            gone = np.asarray(dead, dtype=np.int64)
            self._tenant[gone] = -1
            for rid in dead:
                self._expiring.pop(rid, None)
                self._drop_vector(rid)
        if live:
            now = np.asarray(live, dtype=np.int64)
            code_of = np.asarray(codes, dtype=np.int32)
            self._tenant[now[self._tenant[now] != code_of]] = -1  # not live while its entry changes
            self._put_vectors(now, blobs)
            self._sig[now] = sigs
            for rid in live:
                later = expiring.get(rid)
                if later:
                    self._expiring[rid] = tuple(later)
                else:
                    self._expiring.pop(rid, None)
            self._tenant[now] = code_of

    def _put_made(self, made: Mapping[int, Fresh]) -> None:
        """Records just created, as written (``SQLiteTx.fresh``): each live with its one claim,
        not quarantined; in array steps (an import's batch), in :meth:`_put`'s order."""
        ids = np.fromiter(made, dtype=np.int64, count=len(made))
        rows = list(made.values())
        top = int(ids.max())
        if top >= len(self._tenant):
            self._grow(top + 1)
        for tenant in dict.fromkeys(r[0] for r in rows):
            if tenant not in self._tenants:
                self._tenants[tenant] = len(self._tenants)
        # a claim without expiry is in the record's purpose set; one with an expiry is kept aside
        sig = {key: self._sig_code(frozenset(key)) for key in {(r[1],) if r[2] is None else () for r in rows}}
        codes = np.fromiter((self._tenants[r[0]] for r in rows), dtype=np.int32, count=len(rows))
        sigs = np.fromiter((sig[(r[1],) if r[2] is None else ()] for r in rows), dtype=np.int32, count=len(rows))
        self._tenant[ids[self._tenant[ids] != codes]] = -1  # not live while its entry changes
        self._put_vectors(ids, [r[3] for r in rows])
        self._sig[ids] = sigs
        for rid, (_t, purpose, expires, _b) in made.items():
            if expires is not None:
                self._expiring[rid] = ((purpose, float(expires)),)
            elif self._expiring:
                self._expiring.pop(rid, None)
        self._tenant[ids] = codes

    # -- vectors -------------------------------------------------------------------------------
    def sample(
        self, tenant: str, purpose: str, now: float, n: int, elsewhere: Callable[[], np.ndarray] | None = None
    ) -> np.ndarray:
        """At most ``n`` vectors of ``tenant``'s records live for ``purpose``, drawn at random
        from the tenant's records once per commit, and kept until the next (a recall's
        background: :class:`efface.origin.base.VectorSample`; a claim that expires in between
        leaves it at the next commit). While the copy is not loaded, ``elsewhere`` draws it
        (the origin, from the file: the same draw, :func:`drawn`), kept alike; without it, empty.
        Every commit drops the kept draws, and a draw a commit overtook is not kept: no kept
        draw holds the vector of a record erased since (the erasure contract, as the copy's)."""
        empty = np.empty((0, 0), dtype=np.float32)
        if n <= 0:
            return empty
        writes, key = self._writes, (tenant, purpose, n)
        got = self._samples.get(key)
        if got is not None and got[0] == writes:
            return got[1]
        if self._ready:
            code = self._tenants.get(tenant)
            if code is None:
                return empty
            mine = drawn(np.flatnonzero(self._tenant == code), n)
            vectors = self.vectors(self.live(mine.tolist(), tenant, purpose, now))[1]
        elif elsewhere is not None:
            vectors = elsewhere()
        else:
            return empty
        with self._samples_mu:
            if self._writes == writes:  # else a commit came meanwhile (a forget?): serves this recall only
                if len(self._samples) >= MAX_SAMPLED:
                    self._samples.clear()
                self._samples[key] = (writes, vectors)
        return vectors

    @property
    def loaded(self) -> bool:
        """Whether the copy is loaded and kept up (never starts a load: :meth:`usable` does)."""
        return self._ready

    def vectors(self, ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Those of ``ids`` whose vector is held here (records counted live), in the order
        given, and their vectors as rows of float32."""
        blocks, has = self._blocks, self._has
        arr = np.asarray(ids, dtype=np.int64)
        inside = (arr >= 0) & (arr < len(has))
        ok = np.zeros(len(arr), dtype=bool)
        ok[inside] = has[arr[inside]]
        got = arr[ok]
        if not len(got) or self._dim is None:
            return got[:0], np.empty((0, 0), dtype=np.float32)
        block_of, row_of = got >> BLOCK_BITS, got & (BLOCK - 1)
        first = int(block_of[0])
        only = blocks[first]
        if only is not None and bool((block_of == first).all()):
            half = only[row_of]
        else:  # grouped by block: one slice per block, not a mask over all ids
            half = np.empty((len(got), self._dim), dtype=np.float16)
            ascending = bool((block_of[1:] >= block_of[:-1]).all())  # recall asks in id order
            order = None if ascending else np.argsort(block_of, kind="stable")
            by_block = block_of if order is None else block_of[order]
            starts = np.flatnonzero(np.concatenate(([True], by_block[1:] != by_block[:-1])))
            for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(got)], strict=True):
                block = blocks[int(by_block[lo])]
                assert block is not None  # an id held here has its block
                if order is None:
                    half[lo:hi] = block[row_of[lo:hi]]
                else:
                    at = order[lo:hi]
                    half[at] = block[row_of[at]]
        return got, widen(half)

    def holding(self, ids: Sequence[int]) -> int:
        """How many of ``ids`` this copy still counts live or holds a vector of (a row not
        zeroed): verify's check that erased records left memory with the forget."""
        with self._mu:
            n = 0
            for rid in ids:
                b = rid >> BLOCK_BITS
                block = self._blocks[b] if 0 <= b < len(self._blocks) else None
                counted = 0 <= rid < len(self._tenant) and (self._tenant[rid] != -1 or self._has[rid])
                if counted or (block is not None and block[rid & (BLOCK - 1)].any()):
                    n += 1
            return n

    def _put_vectors(self, ids: np.ndarray, blobs: list[bytes]) -> None:
        """The vectors of these live records, as stored: half-precision rows of the store's
        dimension copied as they are, in one operation per block; any other (a float32 row of
        a store written before half precision) one by one."""
        if self._dim is None:
            for rid, blob in zip(ids.tolist(), blobs, strict=True):
                self._put_vector(rid, blob)  # the first usable one sets the dimension
            return
        size = 1 + 2 * self._dim
        fast = np.fromiter((len(b) == size and b[:1] == F16 for b in blobs), dtype=bool, count=len(blobs))
        for i in np.flatnonzero(~fast).tolist():
            self._put_vector(int(ids[i]), blobs[i])
        if not fast.any():
            return
        got = ids[fast]
        raw = np.frombuffer(b"".join(b for b, ok in zip(blobs, fast.tolist(), strict=True) if ok), dtype=np.uint8)
        half = np.ascontiguousarray(raw.reshape(len(got), size)[:, 1:]).view(np.float16)
        block_of = got >> BLOCK_BITS
        for b in np.unique(block_of).tolist():
            at = block_of == b
            self._block(b)[got[at] & (BLOCK - 1)] = half[at]
        self._has[got] = True

    def _block(self, b: int) -> np.ndarray:
        """Block ``b`` of the vectors, allocated (zeros) when it is first needed."""
        assert self._dim is not None
        while len(self._blocks) <= b:
            self._blocks = [*self._blocks, None]
        block = self._blocks[b]
        if block is None:
            block = np.zeros((BLOCK, self._dim), dtype=np.float16)
            self._blocks[b] = block
        return block

    def _put_vector(self, rid: int, blob: bytes) -> None:
        vec: np.ndarray | None
        if self._dim is not None and len(blob) == 1 + 2 * self._dim and blob[:1] == F16:
            vec = np.frombuffer(blob, dtype=np.float16, offset=1)  # as stored: no conversion
        else:
            vec = read_vector(blob) if blob else None
        if vec is None or not len(vec):
            self._drop_vector(rid)
            return
        if self._dim is None:
            self._dim = len(vec)
        if len(vec) != self._dim:  # a store of mixed dimensions: not held, read from the origin
            self._drop_vector(rid)
            return
        self._block(rid >> BLOCK_BITS)[rid & (BLOCK - 1)] = vec
        self._has[rid] = True

    def _drop_vector(self, rid: int) -> None:
        """The record is not live (or its vector not held): its row goes, zeroed."""
        if rid < len(self._has):
            self._has[rid] = False
        b = rid >> BLOCK_BITS
        block = self._blocks[b] if b < len(self._blocks) else None
        if block is not None:
            block[rid & (BLOCK - 1)] = 0

    def _sig_code(self, purposes: frozenset[str]) -> int:
        code = self._sig_codes.get(purposes)
        if code is None:
            code = self._sig_codes[purposes] = len(self._sigs)
            self._sigs = [*self._sigs, purposes]
        return code

    def _grow(self, size: int) -> None:
        size = max(size, 2 * len(self._tenant), 1024)
        tenant_of = np.full(size, -1, dtype=np.int32)
        tenant_of[: len(self._tenant)] = self._tenant
        sig_of = np.zeros(size, dtype=np.int32)
        sig_of[: len(self._sig)] = self._sig
        has = np.zeros(size, dtype=bool)
        has[: len(self._has)] = self._has
        self._sig, self._has = sig_of, has
        self._tenant = tenant_of

    # -- loading ---------------------------------------------------------------------------
    def _start(self) -> None:
        with self._mu:
            start, self._later = self._later, False
            if start:
                self._pending = set()
        if start:
            threading.Thread(target=self._load, name="efface-liveness", daemon=True).start()

    def _load(self) -> None:
        """Read every record's liveness and vector, :data:`LOAD_CHUNK` ids a statement (short
        reads: a load holds no snapshot that keeps the WAL from being checkpointed); then,
        under the write lock, the records committed meanwhile again (each commit since the
        load began noted them), and from then on keep up after each commit."""
        try:
            conn: Any = apsw.Connection(self._path, flags=apsw.SQLITE_OPEN_READONLY)
            try:
                (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()
                for lo in range(0, top + 1, LOAD_CHUNK):
                    if self._stop.is_set():
                        return
                    hi = lo + LOAD_CHUNK
                    conn.execute("BEGIN")
                    recs = conn.execute(f"{_RECORDS} WHERE r.id >= ? AND r.id < ?", (lo, hi)).fetchall()
                    claims = conn.execute(
                        "SELECT record_id, purpose, expires_at FROM claims WHERE record_id >= ? AND record_id < ?",
                        (lo, hi),
                    ).fetchall()
                    conn.execute("COMMIT")
                    with self._mu:
                        self._put([r[0] for r in recs], recs, claims)
            finally:
                conn.close()
            with self._lock:
                pending, self._pending = self._pending, None
                if pending is None or self._stop.is_set():
                    return
                self._refresh(self._w, pending)
                self._ready = True
        except Exception as exc:  # the store closed, the file went, no memory: recalls check in SQLite
            log.warning("live-record copy not loaded (%s): recalls check in SQLite", type(exc).__name__)
            self._pending = None

    def stop(self) -> None:
        """The store closes: recalls check in SQLite from now on, and a load under way ends."""
        self._stop.set()
        self._ready, self._later, self._pending = False, False, None
