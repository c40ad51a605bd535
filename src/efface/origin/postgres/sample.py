"""The PostgreSQL origin's random sample of a tenant's live vectors (:class:`~efface.origin.capabilities.VectorSample`).

Recall lets its vector leg vote only as far as the best cosine stands out from the query's
cosines with a random sample of the tenant's live records (:func:`efface.paths.scores._standing`).
The SQLite origin draws that sample from its copy of liveness in memory, again after every
commit (0.4 ms at 50k records).

**The draw.** Up to ``n`` of the tenant's record ids, from this process's word index (:mod:`.text`:
its postings hold every record's id and tenant, so no scan of the table), chosen with numpy's
generator seeded by their count, as the SQLite origin's copy draws
(:meth:`efface.origin.sqlite.liveness.Liveness.sample`): a store with the same records under
the same ids draws the same sample on both origins. Then one round trip reads the vectors of
those live for the purpose at the recall's ``now`` (by primary key; in the recall's snapshot).
A scan of the tenant's rows for their count or ids instead cost 31 ms at 10k records and
260 ms at 50k (the rows hold the vectors, so the table is wide).

**Kept in this process.** Even one round trip a recall is worth saving, so a draw is used
again until one of:

* the tenant changed since the draw (a change-log entry of its records, as this process's
  word index applies the log, its own commits and other processes'): at once when the draw
  was the whole tenant (fewer records than the sample's size: its size is what a small
  tenant's best is judged against, :func:`efface.paths.scores._edge`), else after
  :data:`REDRAW_CHANGES` of them;
* :data:`REDRAW_S` seconds passed (a claim that expired, a purpose withdrawn).

**The trade-off.** Between redraws the statistic lags the tenant by up to
:data:`REDRAW_CHANGES` writes or :data:`REDRAW_S` seconds: a mean and a spread of 256
cosines, which a few dozen records more or less hardly move
(``bench/experiments/exp_fusion_standing.py``: 128 and 256 records judge alike), for no round
trip on a recall that finds it fresh. The sample only ever judges how far the vector leg
votes: recall never names, returns or ranks its records.

**Erased records.** A kept draw holds vectors of records, a copy of their content in this
process's memory. When the change log says a record was dropped (erased, by any process), its
row is zeroed in every kept draw and removed as the word index drops its postings
(:meth:`PgSample.changed`): this process holds an erased record's vector no longer than its
postings, and not after a forget made here returns. When the log was pruned past the word
index (it rebuilds), every kept draw is zeroed and forgotten. A draw during which drops of its
tenant were applied may hold one of them (its ids were taken before): it serves that recall
and is not kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .reads import _RawVector, live_claim, stored_many, to_vector

PostgresOrigin = Any
"""The origin this part serves (:class:`.origin.PostgresOrigin`), untyped here (as :mod:`.text`):
the origin imports this module."""

REDRAW_CHANGES = 64
"""Changes to a tenant (records put or dropped) after which its kept draw is drawn again."""
REDRAW_S = 60.0
"""Seconds after which a kept draw is drawn again, whatever changed."""
MAX_KEPT = 1024
"""Draws (tenant, purpose, size) kept at most (all forgotten at once past it), as the SQLite origin's."""

_EMPTY = np.empty((0, 0), dtype=np.float32)


@dataclass
class _Draw:
    ids: np.ndarray
    """The drawn records' ids (int64), one per row of :attr:`vectors`."""
    vectors: np.ndarray
    """Their vectors, rows of float32."""
    whole: bool
    """Drawn from fewer records than the sample's size: the whole tenant."""
    changes: int
    """The tenant's change count (:attr:`PgSample._changes`) when drawn."""
    at: float
    """``time.monotonic()`` when drawn."""


class PgSample:
    """Kept draws of tenants' live vectors (see the module docstring)."""

    def __init__(self, origin: PostgresOrigin) -> None:
        self._o = origin
        self._mu = threading.Lock()
        self._kept: dict[tuple[str, str, int], _Draw] = {}
        self._changes: dict[str, int] = {}
        """Per tenant: how many changes of its records this process has seen since it opened."""
        self._drops: dict[str, int] = {}
        """Per tenant: how many times this process has applied drops of its records."""
        self._rebuilds = 0
        """The word index's rebuilds (drops it could not name, of any tenant)."""

    def sample(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """At most ``n`` vectors of ``tenant``'s records live for ``purpose`` (rows of float32),
        a kept draw while it is fresh, else drawn now (in the thread's snapshot, if any)."""
        if n <= 0:
            return _EMPTY
        key = (tenant, purpose, n)
        with self._mu:
            got = self._kept.get(key)
            changes = self._changes.get(tenant, 0)
            drops = (self._drops.get(tenant, 0), self._rebuilds)
            if got is not None and self._fresh(got, changes):
                return got.vectors
        ids, vectors, whole = self._draw(tenant, purpose, now, n)
        draw = _Draw(ids, vectors, whole, changes, time.monotonic())
        with self._mu:
            # Kept unless a drop of the tenant's records was applied here while it was read (its
            # ids came from the word index before): it may hold one then, and serves this recall
            # only. Writes meanwhile do not stop it being kept (they count towards its redraw).
            if (self._drops.get(tenant, 0), self._rebuilds) == drops:
                if len(self._kept) >= MAX_KEPT:
                    self._kept.clear()
                self._kept[key] = draw
        return vectors

    @staticmethod
    def _fresh(got: _Draw, changes: int) -> bool:
        since = changes - got.changes
        if since >= (1 if got.whole else REDRAW_CHANGES):
            return False
        return time.monotonic() - got.at < REDRAW_S

    def _draw(self, tenant: str, purpose: str, now: float, n: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """(ids, vectors, whole) of a new draw: see the module docstring."""
        mine = self._o.text.tenant_ids(tenant)
        whole = len(mine) <= n
        if not len(mine):
            return mine, _EMPTY, whole
        if not whole:  # seeded by the tenant's size, as the SQLite origin's copy draws
            mine = np.sort(np.random.default_rng(len(mine)).choice(mine, n, replace=False))
        s = self._o._s
        with self._o._reading() as conn:
            cur = conn.cursor(binary=True)
            cur.adapters.register_loader("vector", _RawVector)
            rows = cur.execute(
                f"SELECT r.id, r.embedding FROM {s}.records r WHERE r.id = ANY(%s) AND r.embedding IS NOT NULL"
                f" AND {live_claim(s, None)} ORDER BY r.id",
                (mine.tolist(), tenant, purpose, now),
            ).fetchall()
        if not rows:
            return np.empty(0, dtype=np.int64), _EMPTY, whole
        ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
        vecs = [to_vector(b) for b in stored_many([r[1] for r in rows])]
        return ids, np.stack([v for v in vecs if v is not None]).astype(np.float32, copy=False), whole

    def changed(self, changes: Mapping[int, tuple[str, str]] | None) -> None:
        """Changes this process's word index applied from the change log (record id ->
        (tenant, op)), or None when it cannot tell which (the log was pruned past it: it
        rebuilt). Count them per tenant, and zero and remove the kept rows of records dropped."""
        with self._mu:
            if changes is None:
                self._zero_all()
                self._kept.clear()
                self._rebuilds += 1
                return
            per: dict[str, set[int]] = {}
            for rid, (tenant, op) in changes.items():
                self._changes[tenant] = self._changes.get(tenant, 0) + 1
                if op == "drop":
                    per.setdefault(tenant, set()).add(rid)
            for tenant in per:
                self._drops[tenant] = self._drops.get(tenant, 0) + 1
            for (tenant, _p, _n), got in self._kept.items():
                dropped = per.get(tenant)
                if not dropped or not len(got.ids):
                    continue
                gone = np.isin(got.ids, np.fromiter(dropped, dtype=np.int64, count=len(dropped)))
                if gone.any():
                    got.vectors[gone] = 0.0  # the copy itself, not only this draw's view of it
                    got.ids, got.vectors = got.ids[~gone], got.vectors[~gone]

    def held(self, ids: set[int]) -> list[int]:
        """Which of ``ids`` a kept draw holds a vector of (tests: an erased record's is gone)."""
        with self._mu:
            return sorted({int(i) for got in self._kept.values() for i in got.ids.tolist() if i in ids})

    def clear(self) -> None:
        with self._mu:
            self._zero_all()
            self._kept.clear()

    def _zero_all(self) -> None:
        for got in self._kept.values():
            got.vectors[...] = 0.0
