"""Vector read path: one usearch HNSW index per tenant, labelled by origin record id.

It absorbs the origin's change log *after* the commit, so it may lag; that is safe
because recall resolves every candidate it returns against the origin's live claims
before any text leaves the store (invariant 1). The compactor absorbs the log in the
background; recall makes any new content searchable first (read-your-writes), so a memory
is recallable by meaning as soon as its write is acknowledged: with the compactor running,
vectors it has not absorbed yet are searched exactly (:mod:`.delta`); without it, recall
absorbs them. The index files are saved atomically with the epoch they hold; on open, the
change log since that epoch is replayed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from usearch.index import Index

from .. import foreground
from ..dirs import fsync_dir
from ..faults import os_faults
from ..model import Check
from ..origin.base import CHANGES_PRUNED
from ..vectors import read as read_vector
from ..vectors import read_many as read_vectors
from . import ann_file
from .base import Erased, Held, Query, check
from .delta import Delta

SAVED_EPOCH = "ann.saved_epoch"
SCRUBBED_EPOCH = "ann.scrubbed_epoch"
"""The newest epoch whose removed vectors are overwritten in the saved files (see :meth:`VectorIndex.erase`)."""
ABSORB_CHUNK = 10_000
EXACT_BELOW = 10_000
"""Tenants with fewer vectors are searched exhaustively (about 1 ms at 10k, i8): exact,
and immune to HNSW's unreachable nodes after heavy remove/add churn."""
REBUILD_CHURN = 0.2
"""The compactor rebuilds a tenant's graph once removals since its last build pass this
share of its size (removed nodes stay in an HNSW graph and can cut live ones off)."""
EXPANSION_SEARCH = 128
"""The search width (HNSW's ef) of a query; recall asks for 100 candidates, so this is about
the least that can return them. 256 was measured (Debian, 60k MiniLM documents, 1,000
queries): the vector leg's recall@10 0.750 -> 0.757, recall's own 0.837 either way, at
twice the leg's search time (docs/benchmarks-history.md), so the width stays."""
SENTINEL_BASE = 1 << 62
"""Labels at and above this are scrub sentinels, never record ids."""
ADD_BATCH = 64
"""Vectors added per usearch call while absorbing. usearch holds the GIL for a whole call, so
a small batch lets concurrent searches in between (a read waits for one batch, not a chunk)."""
QUIET_S = 0.02
"""A background absorption stands back while a read or a write came this recently ..."""
MAX_PAUSE_S = 0.5
"""... but for at most this long per batch, so it always moves."""
VECTOR_REGION = 256
"""Fingerprint sampling of vectors (see erasure.fingerprint)."""
NEIGHBOURS = 6
"""Live records kept per anchor query as verify's nearest-neighbour probes (the nearest)."""
SCRUB_EXPANSION = 8
"""The insertion search width for scrub noise (records use the index's 64)."""
ANCHOR_QUERIES = 4
PROBE_THREADS = max(1, min(4, os.cpu_count() or 1))


class VectorIndex:
    name = "ann"
    synchronous = False

    def __init__(
        self,
        origin,
        directory: str,
        dim: int,
        file_for: Callable[[str], str],
        max_propagation_s: float = 5.0,
        instance: str = "",
    ):
        """``instance``: whose files these are, where several processes share the origin, each
        with its own directory (its saved and erased epochs are kept under keys of its own);
        the embedded store's one index is ``""``."""
        self._origin = origin
        self._dir = directory
        self._dim = dim
        self._file_for = file_for
        self.max_propagation_s = max_propagation_s
        with os_faults():
            os.makedirs(directory, exist_ok=True)
            for name in os.listdir(directory):  # a save killed before its rename: never valid, may hold erased vectors
                if name.endswith(".tmp"):
                    os.unlink(os.path.join(directory, name))
        self._mu = threading.RLock()
        """Serialises the mutators (absorb, scrub, save, rebuild). Searches take no lock: each
        usearch call holds the GIL throughout, so a search never sees a half-done add, and an
        index being rebuilt is swapped in whole."""
        self._load_mu = threading.Lock()
        """Serialises lazy loads only (a load puts in a tenant's index that was not there), so
        a recall never waits for an absorption holding ``_mu``."""
        self._indexes: dict[str, Index] = {}
        self._dirty: set[str] = set()
        self._rng = np.random.default_rng()
        self._churn: dict[str, int] = defaultdict(int)
        self._noise: dict[str, int] = {}
        """Scrub noise vectors held per tenant index (they go with the next rebuild)."""
        self._keys = ("ann." + instance + ".") if instance else "ann."
        self._saved_meta = SAVED_EPOCH.replace("ann.", self._keys, 1)
        self._scrubbed_meta = SCRUBBED_EPOCH.replace("ann.", self._keys, 1)
        self._saved = int(origin.meta_get(self._saved_meta) or 0)
        self._scrubbed = int(origin.meta_get(self._scrubbed_meta) or 0)
        self._applied = self._saved
        self._removed: dict[str, set[int]] = defaultdict(set)
        """Per tenant, the record ids removed from the index since its file was saved and
        not yet overwritten there: the rows :meth:`erase` overwrites (the change log since
        the saved epoch holds every one of them, so a reopen removes them again)."""
        self._layouts: dict[str, ann_file.Layout] = {}
        """Per tenant, the layout of its saved file, read at the first in-place erasure."""
        if self._saved < int(origin.meta_get(CHANGES_PRUNED) or 0):
            self._renew()
        self._delta = Delta(origin, dim, self._applied)
        """Vectors committed past the applied epoch, searched exactly until absorbed."""
        self.yielding = False
        """Set when a background compactor absorbs: absorption then stands back while reads
        and writes are active (usearch holds the GIL for a whole add, so every batch would
        delay them; measured: recall 200-380 ms and writes at a fifth of their rate)."""
        self._activity = 0.0
        self._writing = 0
        """Writes under way (see :meth:`writing`): a background absorption stands back for
        as long as one runs, not only for ``QUIET_S`` after it began or ended."""
        self._taken = 0.0
        self._urgent = False
        self.catch_up()

    # -- state -------------------------------------------------------------------------
    def _new(self) -> Index:
        # i8 quantisation of unit vectors: a quarter of f32's memory and about twice its
        # insert rate here, at a recall@10 within 0-4 points of f32 (docs/benchmarks-history.md).
        return Index(
            ndim=self._dim,
            metric="cos",
            dtype="i8",
            connectivity=16,
            expansion_add=64,
            expansion_search=EXPANSION_SEARCH,
        )

    def _path(self, tenant: str) -> str:
        return os.path.join(self._dir, self._file_for(tenant) + ".usearch")

    def _index(self, tenant: str) -> Index:
        idx = self._indexes.get(tenant)
        if idx is not None:
            return idx
        with self._load_mu:
            return self._load(tenant)

    def _load(self, tenant: str) -> Index:
        idx = self._indexes.get(tenant)
        if idx is None:
            idx = self._new()
            path = self._path(tenant)
            try:
                if os.path.exists(path):
                    idx.load(path)
                elif self._origin.meta_get(self._saved_key(tenant)) is not None:
                    # It was saved once and is gone: replaying the log cannot bring it back.
                    self._rebuild(idx, tenant)
                # else: never saved, so every change it holds is still in the log: start empty.
            except Exception:  # a torn or foreign file: the origin can always rebuild it
                idx = self._new()
                self._rebuild(idx, tenant)
            self._indexes[tenant] = idx
            keys = np.asarray(idx.keys) if len(idx) else np.empty(0, dtype=np.uint64)
            self._noise[tenant] = int(np.count_nonzero(keys >= np.uint64(SENTINEL_BASE)))
        return idx

    def _saved_key(self, tenant: str) -> str:
        return self._keys + "file." + self._file_for(tenant)

    def _renew(self) -> None:
        """These files are older than what the change log still holds (another process pruned
        it while this one was away: :mod:`efface.erasure.changelog`), so replaying cannot bring
        them up to date: drop them and build every tenant's index from the origin's records."""
        with os_faults():
            for name in os.listdir(self._dir):
                if name.endswith(".usearch"):
                    os.unlink(os.path.join(self._dir, name))
        epoch = self._origin.current_epoch()  # the records read below are at least this new
        # What was held (a tenant since erased whole too) goes: nothing is left to scrub.
        self._indexes, self._noise = {}, {}
        self._removed.clear()
        self._layouts.clear()
        self._churn.clear()
        self._dirty.clear()
        for tenant in self._origin.tenants():
            idx = self._new()
            self._rebuild(idx, tenant)
            self._indexes[tenant] = idx
            self._noise[tenant] = 0
        self._saved = self._scrubbed = self._applied = epoch

    def _rebuild(self, idx: Index, tenant: str) -> None:
        ids, vecs = [], []
        for rid, blob in self._origin.records_of_tenant(tenant):
            ids.append(rid)
            vecs.append(read_vector(blob))
        _add(idx, ids, vecs)
        self._dirty.add(tenant)

    def applied_epoch(self) -> int:
        return self._applied

    def saved_epoch(self) -> int:
        return self._saved

    replay_epoch = saved_epoch
    """The change log must be kept past this epoch: a reopen loads the saved files and
    absorbs the changes since."""

    def erased_epoch(self) -> int:
        """Erasures up to here are gone from the files: saved since, or overwritten in place."""
        return max(self._saved, self._scrubbed)

    def stage(self, tx, tenant, puts, drops, texts) -> None:  # pragma: no cover - asynchronous artifact
        raise NotImplementedError("the ANN index absorbs after commit, through catch_up()")

    def catch_up(self, upto: int | None = None) -> int:
        """Absorb the change log from the applied epoch up to ``upto`` (default: everything).
        A removed vector's slot is overwritten at once (see :meth:`_scrub`), so the erased
        vector is gone from memory, and from the file at the next :meth:`persist`."""
        with self._mu:
            return self._catch_up(upto)

    def _catch_up(self, upto: int | None) -> int:
        target = self._origin.current_epoch() if upto is None else upto
        if target <= self._applied:
            return self._applied
        if self.yielding:
            self._delta.take(target)  # searchable at once; absorbed below, slice by slice
        changes = self._origin.changes_since(self._applied, target)
        if self._applied < int(self._origin.meta_get(CHANGES_PRUNED) or 0):
            # Read after the changes: the log was pruned past this index (another process
            # pruned while this one had gone silent), so what was read may lack changes.
            self._renew()
            self._delta.absorbed(self._applied)
            return self._catch_up(upto)
        # An erasure in the range has a propagation bound to keep: absorb it without standing back.
        self._urgent = any(op == "drop" for _e, _r, _t, op in changes)
        # Slices of about ABSORB_CHUNK changes, cut between epochs: the applied epoch moves
        # after each, so the exactly searched delta shrinks while a big import is absorbed.
        start = 0
        while start < len(changes):
            end = min(start + ABSORB_CHUNK, len(changes))
            while end < len(changes) and changes[end][0] == changes[end - 1][0]:
                end += 1
            latest: dict[int, tuple[str, str]] = {}
            for _epoch, rid, tenant, op in changes[start:end]:
                latest[rid] = (tenant, op)  # only the last change per record matters
            self._absorb(list(latest.items()))
            self._applied = changes[end - 1][0] if end < len(changes) else target
            self._delta.absorbed(self._applied)
            start = end
        self._applied = target
        self._delta.absorbed(target)
        return self._applied

    def _absorb(self, chunk: list[tuple[int, tuple[str, str]]]) -> None:
        vectors = self._origin.embeddings([rid for rid, (_, op) in chunk if op == "put"])
        removed: dict[str, int] = defaultdict(int)
        adds: dict[str, tuple[list[int], list[np.ndarray]]] = defaultdict(lambda: ([], []))
        for rid, (tenant, _op) in chunk:
            idx = self._index(tenant)
            if rid in idx:
                idx.remove(rid)
                removed[tenant] += 1
                self._removed[tenant].add(rid)
            blob = vectors.get(rid)
            if blob is not None:
                ids, vecs = adds[tenant]
                ids.append(rid)
                vecs.append(read_vector(blob))
            self._dirty.add(tenant)
        for tenant, count in removed.items():
            self._scrub(self._index(tenant), count)
            self._noise[tenant] = self._noise.get(tenant, 0) + count
            self._churn[tenant] += count
        for tenant, (ids, vecs) in adds.items():
            _add(self._index(tenant), ids, vecs, self._pause)

    def touch(self) -> None:
        """A read or a write is under way: a background absorption stands back a moment."""
        self._activity = time.monotonic()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A write runs inside: a background absorption stands back until it is done (a
        1000-record ``write_many`` lasts longer than ``QUIET_S``; measured at 20k records,
        an absorption running beside a bulk import halved its rate)."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            self.touch()

    def _take(self) -> None:
        if self.yielding and time.monotonic() - self._taken > QUIET_S:
            # Writes committed while this absorption runs (or stands back) are taken into the
            # delta here, in the background, rather than by the next recall.
            self._taken = time.monotonic()
            self._delta.take(self._origin.current_epoch())

    def _pause(self) -> None:
        self._take()
        waited = 0.0
        while (
            self.yielding
            and not self._urgent
            and (self._writing or time.monotonic() - self._activity < QUIET_S)
            and waited < MAX_PAUSE_S
        ):
            time.sleep(QUIET_S)
            waited += QUIET_S
            self._take()

    def see(self, upto: int | None) -> None:
        """A recall is under way: make the vectors written up to ``upto`` (if any) searchable
        without absorbing them: they are searched exactly (:mod:`.delta`) until the compactor
        absorbs them. Takes no lock the absorption holds, so a recall never waits for a big
        import's absorption."""
        self.touch()
        if upto is not None:
            self._delta.take(upto)

    def seen_epoch(self) -> int:
        """The newest epoch whose written vectors recall finds (absorbed, or in the delta)."""
        return max(self._applied, self._delta.epoch())

    def _scrub(self, idx: Index, count: int) -> None:
        """Overwrite the slots of ``count`` just-removed vectors. usearch's ``remove`` only marks
        a node deleted and keeps its vector (we found the bytes in the saved file); a later
        ``add`` reuses freed slots, oldest freed first. So as many random vectors are added
        under reserved labels and *kept*: removing them again would put their slots ahead of
        the next erasure's in the free list, and the next scrub would overwrite noise instead
        of erased vectors (measured: 100 of 100 erased vectors left in the file from the
        second erasure on). The noise nodes are never served (no record has their labels)
        and go with the next rebuild."""
        # Random labels above SENTINEL_BASE: unique without remembering a counter across reloads.
        keys = (np.uint64(SENTINEL_BASE) + self._rng.integers(0, 1 << 61, size=count, dtype=np.uint64)).astype(
            np.uint64
        )
        noise = self._rng.standard_normal((count, self._dim)).astype(np.float32)
        # Noise is never searched for, so its nodes need no good neighbours: a narrow search
        # on insertion makes the scrub 3-5x cheaper (100 vectors at 100k: ~0.9 s -> ~0.2 s
        # under load), and the erasure waits for it.
        before = idx.expansion_add
        setattr(idx, "expansion_add", SCRUB_EXPANSION)  # noqa: B010 (usearch's stubs omit the setter)
        try:
            _add(idx, keys.tolist(), list(noise))
        finally:
            setattr(idx, "expansion_add", before)  # noqa: B010

    def persist(self) -> None:
        """Save every changed tenant index atomically, then record the epoch they hold.
        Graphs worn by churn are rebuilt from the origin first. A full disk or a read-only
        directory raises ``StoreUnwritable``; the old file stays whole and the epoch is not
        advanced, so the next save (or the next open) absorbs the change log again."""
        with self._mu, os_faults():
            self._persist()

    def _persist(self) -> None:
        for tenant, churn in list(self._churn.items()):
            worn = churn > max(1000, REBUILD_CHURN * len(self._index(tenant)))
            if worn and self._applied == self._origin.current_epoch():  # the origin is what we hold
                idx = self._new()
                self._rebuild(idx, tenant)
                self._indexes[tenant] = idx
                self._noise[tenant] = 0
                del self._churn[tenant]
        for tenant in sorted(self._dirty):
            path = self._path(tenant)
            tmp = path + ".tmp"
            try:
                # Serialise in memory (usearch holds the GIL), write with the GIL released.
                data = self._indexes[tenant].save()
                assert data is not None  # save() without a path returns the serialised index
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                del data
                os.replace(tmp, path)
                self._removed.pop(tenant, None)
                self._layouts.pop(tenant, None)
                if self._origin.meta_get(self._saved_key(tenant)) is None:
                    self._origin.meta_set(self._saved_key(tenant), "1")
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        if self._dirty:
            fsync_dir(self._dir)
        self._dirty.clear()
        if self._applied != self._saved:
            self._origin.meta_set(self._saved_meta, str(self._applied))
            self._saved = self._applied

    def erase(self) -> None:
        """Take the vectors removed since the files were saved out of those files, without
        saving them whole: each one's row in its tenant's file is overwritten in place and
        the file fsynced (:mod:`.ann_file`; at a million records 50-170 ms, the first one
        reading the file's layout, where a save takes a second, most of it holding the
        GIL). Each removed row is overwritten once. A file whose layout does not read as
        expected is saved whole instead. The saved epoch stays where it is: a reopen loads
        the files and removes those records again from the change log."""
        with self._mu, os_faults():
            if self._applied <= self.erased_epoch():
                return
            for tenant in sorted(t for t, ids in self._removed.items() if ids):
                path = self._path(tenant)
                if not os.path.exists(path):
                    self._removed[tenant].clear()  # never saved: no file holds them
                    continue
                layout = self._layouts.get(tenant)
                if layout is None or layout.size != os.path.getsize(path):
                    layout = ann_file.read_layout(path, self._dim)
                if layout is None:
                    self._persist()  # not a layout we can read: save every index whole
                    return
                self._layouts[tenant] = layout
                ann_file.overwrite(path, layout, layout.slots(sorted(self._removed[tenant])), self._rng)
                self._removed[tenant].clear()  # gone from the file: the next erasure's rows only
            self._scrubbed = self._applied
            self._origin.meta_set(self._scrubbed_meta, str(self._scrubbed))

    def candidates(self, query: Query, n: int) -> list[int]:
        idx = self._index(query.tenant)
        size = len(idx)
        found: list[int] = []
        dists: list[float] = []
        if size:
            got = idx.search(query.vector, min(n, size), exact=size <= EXACT_BELOW)
            keys = np.asarray(got.keys, dtype=np.uint64).reshape(-1)
            # Scrub noise never names a record; usearch pads a short answer with its missing-key
            # label (2**64 - 1), which a search beside removals can return.
            keep = keys < np.uint64(SENTINEL_BASE)
            found = keys[keep].astype(np.int64).tolist()
            dists = np.asarray(got.distances, dtype=np.float64).reshape(-1)[keep].tolist()
        extra, distance = self._delta.search(query.tenant, query.vector, n)
        if extra.size == 0:
            return found
        # Merged by cosine distance; a record in both is ranked by its newer vector (the delta's).
        best = dict(zip(found, dists, strict=True))
        best.update(zip(extra.tolist(), distance.tolist(), strict=True))
        return sorted(best, key=lambda r: (best[r], r))[:n]

    def size(self, tenant: str) -> int:
        """Record vectors searchable for the tenant: in its index (scrub noise not counted)
        and in the un-absorbed delta (a record in both counts twice: a bound, not a count)."""
        idx = self._index(tenant)
        return len(idx) - self._noise.get(tenant, 0) + self._delta.size(tenant)

    # -- the erasure contract ----------------------------------------------------------
    def quantized(self, tenant: str, ids: Sequence[int]) -> list[bytes]:
        """The i8 bytes the index holds for these records (what its file will hold)."""
        idx = self._index(tenant)
        present = [i for i in ids if i in idx]
        if not present:
            return []
        got = idx.get(np.asarray(present, dtype=np.uint64), dtype="i8")
        return [np.asarray(v, dtype=np.int8).tobytes() for v in _rows(got)]

    def neighbours(self, tenant: str, vectors: np.ndarray, k: int) -> list[list[int]]:
        """The ``k`` nearest labels of each vector (record ids; sentinels left out). Many
        vectors (verify's probe asks up to ``ANCHOR_QUERIES * NEIGHBOURS``) are searched on
        every core: 280 at a million records took 0.46 s on one thread, 0.28 s on two."""
        idx = self._index(tenant)
        size = len(idx)
        if size == 0 or len(vectors) == 0:
            return [[] for _ in range(len(vectors))]
        threads = PROBE_THREADS if len(vectors) >= 16 else 1
        found = idx.search(vectors, min(k, size), exact=size <= EXACT_BELOW, threads=threads)
        keys = np.asarray(found.keys).reshape(len(vectors), -1)
        return [[int(x) for x in row if int(x) < SENTINEL_BASE] for row in keys]

    def holding(self, tenant: str, ids: Sequence[int]) -> int:
        """How many of these record ids the in-memory index (or its delta) still holds."""
        idx = self._index(tenant)
        return sum(1 for i in ids if i in idx) + self._delta.holding(ids)

    def held(self, erased: Erased) -> list[Held]:
        quantized = self.quantized(erased.tenant, erased.ids)
        return [Held("vector", quantized, VECTOR_REGION)] if quantized else []

    def evidence(self, erased: Erased) -> bytes:
        """Record ids of live records next to the erased vectors (queries for the probe)."""
        anchors: set[int] = set()
        if erased.sample:
            # A few erased vectors suffice to find live records next to them; their own
            # neighbours are mostly each other (one subject's memories), so look past them.
            few = erased.sample[:: max(1, len(erased.sample) // ANCHOR_QUERIES)][:ANCHOR_QUERIES]
            vectors = np.vstack([erased.vectors[i] for i in few])
            gone = set(erased.ids)
            for row in self.neighbours(erased.tenant, vectors, NEIGHBOURS + min(len(erased.ids), 64)):
                # the nearest few live ones (rows are nearest first): the probe's strongest
                # queries; every one kept is a search at verify (280 of them took 0.5 s at 1M)
                anchors.update([r for r in row if r not in gone][:NEIGHBOURS])
        return np.asarray(sorted(anchors), dtype="<i8").tobytes()

    def probe(self, tenant: str | None, erased: Sequence[int], evidence: bytes) -> Check:
        """Query with live records next to the erased vectors: an erased id the index still
        proposes must not resolve to a live row (else it could be served)."""
        t0 = time.time()
        anchors = np.frombuffer(evidence, dtype="<i8").tolist() if evidence else []
        proposed: set[int] = set()
        served: set[int] = set()
        if tenant is not None and anchors and erased:
            vecs = self._origin.embeddings(anchors)
            if vecs:
                matrix = read_vectors(list(vecs.values()))
                gone = set(erased)
                for row in self.neighbours(tenant, matrix, 40):
                    proposed.update(r for r in row if r in gone)
                if self._origin.residual_rows(sorted(proposed)).get("records"):
                    served = proposed
        return check(
            "ann.by_neighbours",
            "unreadable",
            "fail" if served else "pass",
            (
                f"{len(served)} erased records proposed by the index resolve to live rows"
                if served
                else f"{len(anchors)} live neighbours of the erased vectors used as queries: "
                f"{len(proposed)} erased ids still proposed by the index (pending its compaction), "
                "0 resolve to a live row, so none can be served"
            ),
            t0,
        )

    def check_erased(self, tenant: str | None, epoch: int, erased: Sequence[int]) -> Check:
        t0 = time.time()
        applied, saved, gone = self.applied_epoch(), self.saved_epoch(), self.erased_epoch()
        holding = self.holding(tenant, erased) if tenant is not None else 0
        ok = applied >= epoch and gone >= epoch and holding == 0
        return check(
            "ann.erased",
            "erased",
            "pass" if ok else "fail",
            f"index applied epoch {applied}, files saved at epoch {saved} and their removed vectors "
            f"overwritten in place up to epoch {gone} (erasure epoch {epoch}); {holding} erased vectors "
            "still in memory; removed slots are overwritten with noise in memory too",
            t0,
        )

    def live_copies(self, tenant: str | None, windows: Sequence[bytes]) -> set[bytes]:
        """Which of these byte windows occur in a live vector of the tenant's index (a
        vector legitimately shared with an erased one, e.g. a retained copy of its text)."""
        if tenant is None or not windows:
            return set()
        idx = self._index(tenant)
        labels = [int(k) for k in idx.keys if int(k) < SENTINEL_BASE]
        found: set[bytes] = set()
        for start in range(0, len(labels), ABSORB_CHUNK):
            chunk = labels[start : start + ABSORB_CHUNK]
            got = idx.get(np.asarray(chunk, dtype=np.uint64), dtype="i8")
            tape = b"".join(np.asarray(v, dtype=np.int8).tobytes() for v in _rows(got))
            found.update(w for w in windows if w in tape)
            foreground.give_way()  # verify runs beside reads: recalls first
        return found

    def may_hold_live(self, file: str) -> bool:
        return file.startswith("ann" + os.sep) and file.endswith(".usearch")

    def close(self) -> None:
        self._indexes.clear()
        self._delta.clear()


def _add(idx: Index, ids: Sequence[int], vecs: Sequence[np.ndarray], pause: Callable[[], None] | None = None) -> None:
    """Add in batches of :data:`ADD_BATCH`, so a concurrent search waits for one batch at most."""
    for start in range(0, len(ids), ADD_BATCH):
        if pause is not None:
            pause()
        idx.add(np.asarray(ids[start : start + ADD_BATCH], dtype=np.uint64), np.vstack(vecs[start : start + ADD_BATCH]))
        time.sleep(0)  # let a waiting reader take the GIL between batches


def _rows(got: object) -> list[np.ndarray]:
    """The vectors usearch's ``Index.get`` returned for several keys (missing keys left out)."""
    if got is None:
        return []
    return [v for v in got if v is not None]  # type: ignore[attr-defined]  # an array or a tuple of them
