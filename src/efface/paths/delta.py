"""The un-absorbed delta of the vector index: written vectors searched exactly until absorbed.

HNSW inserts run at a few thousand vectors a second on two cores, so after a bulk import
the index lags the origin by tens of seconds. Recall must not wait for it (read-your-writes
used to absorb the whole import on the first recall: 8-17 s at 100-200k records). Instead,
the vectors committed since the index's applied epoch are kept here, normalised, in blocks
of one change-log slice each, and searched by one matrix product per block: a few
milliseconds for tens of thousands of vectors. The compactor absorbs in the background and
drops every block whose changes the index now holds.

Erasure: a drop in the change log zeroes the row of that record here as soon as the delta
takes the slice in, and every block is dropped once the index has absorbed past it, so when
the index's applied epoch passes an erasure no copy of an erased vector is left here either
(the ``ann.erased`` check also counts what the delta holds). Candidates from here are
resolved against the origin's live claims like any other (invariant 1).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..vectors import read_many as read_vectors
from ..vectors import unit_rows


@dataclass
class _Block:
    hi: int
    """The newest epoch of the slice of the change log this block took in."""
    ids: np.ndarray
    vectors: np.ndarray
    """Unit rows (float32); a dead row is all zeros."""
    alive: np.ndarray


class Delta:
    """Vectors of the change log in ``(absorbed, epoch]``, per tenant, searched exactly."""

    def __init__(self, origin, dim: int, epoch: int):
        self._origin = origin
        self._dim = dim
        self._epoch = epoch
        self._mu = threading.Lock()
        """Serialises taking slices in and dropping absorbed blocks; searches copy the block
        list under it and compute outside it."""
        self._blocks: dict[str, list[_Block]] = defaultdict(list)
        self._where: dict[int, tuple[_Block, int]] = {}

    def epoch(self) -> int:
        """The newest epoch whose written vectors are searchable (here or in the index)."""
        return self._epoch

    def take(self, upto: int) -> None:
        """Take in the change log up to ``upto``: the last change of each record counts; a
        put brings its vector, and any change hides (and zeroes) the record's older row."""
        with self._mu:
            if upto <= self._epoch:
                return
            latest: dict[int, tuple[str, str]] = {}
            for _epoch, rid, tenant, op in self._origin.changes_since(self._epoch, upto):
                latest[rid] = (tenant, op)
            for rid in latest.keys() & self._where.keys():
                self._kill(rid)
            puts: dict[str, list[int]] = defaultdict(list)
            for rid, (tenant, op) in latest.items():
                if op == "put":
                    puts[tenant].append(rid)
            for tenant, rids in puts.items():
                blobs = self._origin.embeddings(rids)
                ids = [r for r in rids if r in blobs]
                if not ids:
                    continue
                matrix = unit_rows(read_vectors([blobs[r] for r in ids]))
                del blobs
                block = _Block(upto, np.asarray(ids, dtype=np.int64), matrix, np.ones(len(ids), dtype=bool))
                self._blocks[tenant].append(block)
                self._where.update((rid, (block, row)) for row, rid in enumerate(ids))
            self._epoch = upto

    def _kill(self, rid: int) -> None:
        at = self._where.pop(rid, None)
        if at is not None:
            block, row = at
            block.alive[row] = False
            block.vectors[row] = 0.0  # the vector leaves memory now, not when the block goes

    def absorbed(self, epoch: int) -> None:
        """The index holds every change up to ``epoch``: drop the blocks it covers."""
        with self._mu:
            for tenant, blocks in list(self._blocks.items()):
                keep = []
                for b in blocks:
                    if b.hi > epoch:
                        keep.append(b)
                        continue
                    for rid in b.ids.tolist():
                        if self._where.get(rid, (None,))[0] is b:
                            del self._where[rid]
                    b.vectors[:] = 0.0
                if keep:
                    self._blocks[tenant] = keep
                else:
                    del self._blocks[tenant]
            self._epoch = max(self._epoch, epoch)

    def search(self, tenant: str, vector: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``n`` nearest live rows of the tenant: (record ids, cosine distances), best first."""
        with self._mu:
            blocks = list(self._blocks.get(tenant, ()))
        if not blocks or n <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        q = q / norm if norm else q
        ids, dists = [], []
        for b in blocks:
            d = 1.0 - b.vectors @ q
            d[~b.alive] = np.inf
            if d.size > n:
                top = np.argpartition(d, n)[:n]
                ids.append(b.ids[top])
                dists.append(d[top])
            else:
                ids.append(b.ids)
                dists.append(d)
        all_ids, all_d = np.concatenate(ids), np.concatenate(dists)
        keep = np.isfinite(all_d)
        all_ids, all_d = all_ids[keep], all_d[keep]
        order = np.argsort(all_d, kind="stable")[:n]
        return all_ids[order], all_d[order]

    def size(self, tenant: str) -> int:
        with self._mu:
            return sum(int(b.alive.sum()) for b in self._blocks.get(tenant, ()))

    def holding(self, ids) -> int:
        """How many of these record ids have a live row here."""
        with self._mu:
            return sum(1 for i in ids if i in self._where)

    def clear(self) -> None:
        with self._mu:
            for blocks in self._blocks.values():
                for b in blocks:
                    b.vectors[:] = 0.0
            self._blocks.clear()
            self._where.clear()
