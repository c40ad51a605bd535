"""The embedded store: one directory, one origin, every read path, one chokepoint.

Every mutation (write, retain, register_subject, forget, TTL expiry) goes through
:meth:`Store._mutate`, which honours due expiries first, opens one origin transaction,
assigns the epoch there, stages the synchronous artifacts (full-text) inside it, commits
durably, and only then lets the asynchronous artifacts (ANN) catch up. Nothing is
acknowledged before the commit, and no read returns text that did not come from the
origin's live claims at the moment of the read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from . import backup as _backup
from . import validate as v
from .derivations import Derivations, validate_policy
from .embed import Embedder, resolve
from .erasure.ledger import SECRET_KEY, ChainCheck, Hasher, verify_chain
from .erasure.verify import Verifier
from .errors import (
    BackupMismatch,
    EffaceError,
    EmbedderMismatch,
    InvalidInput,
    NotFound,
    ScopeError,
    StoreLocked,
    UnknownPurpose,
    UnverifiableDeletion,
)
from .model import (
    LEGAL_BASES,
    Claim,
    Derivation,
    Hit,
    Memory,
    PathState,
    QuarantineItem,
    Receipt,
    Released,
    Retained,
    Selector,
    Status,
    Verification,
)
from .origin.base import ClaimRow, NewRecord
from .origin.sqlite import SQLiteOrigin, SQLiteTx, _fsync_dir
from .paths.ann import VectorIndex
from .paths.base import Query
from .paths.fts import FullTextIndex

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack et al. 2009)."""

MAX_ANN_CANDIDATES = 4096
"""How far recall widens the ANN candidate list when filters thin it."""

_PERSIST_EVERY_S = 30.0
_ERASE_PERSIST_S = 0.5
"""After an erasure, the compactor saves every artifact (and so erases the bytes) at
most this long after its previous save."""
ERASE_BOUND_S = 60.0
"""Declared bound from acknowledgement to physical erasure on every path."""

log = logging.getLogger("efface")

SETTLED_STATES = ("absorbed", "shredded", "ledger-replay")
"""Path states after which nothing more happens to an erasure on that path (the backups
path is final at acknowledgement: its keys are destroyed or its restores replay the ledger)."""


@dataclass
class _ForgetOutcome:
    selector: Selector
    kind: str
    released: list[Released]
    erased: list[str]
    retained: list[Retained]
    drops: list[int]
    puts: list[int] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    derivations: list[Derivation] = field(default_factory=list)
    policy: str = "quarantine"
    identifiers_erased: bool = False
    handle: str = ""
    acknowledged_at: float = 0.0
    ledger_seq: int = 0
    ledger_hash: str = ""
    backups: str | None = None


class Store:
    """An efface store in one directory. Use :func:`efface.open` to get one."""

    def __init__(
        self,
        path: str | os.PathLike,
        embedder: "str | Embedder | None" = None,
        *,
        background: bool = True,
        clock: Callable[[], float] = time.time,
        compact_interval: float = 0.5,
        ann_max_propagation_s: float = 5.0,
        erase_bound_s: float = ERASE_BOUND_S,
    ):
        self.path = os.path.abspath(os.fspath(path))
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise InvalidInput("the store path exists and is not a directory: give a directory path")
        os.makedirs(self.path, exist_ok=True)
        self._lockfile = open(os.path.join(self.path, "efface.lock"), "a+")
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lockfile.close()
            raise StoreLocked(
                "another process has this store open; close it (or stop `efface serve`) and try again"
            ) from None
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._origin = SQLiteOrigin(os.path.join(self.path, "origin.db"))
            secret = self._origin.meta_get(SECRET_KEY)
            if secret is None:
                secret = Hasher.new_secret()
                self._origin.meta_set(SECRET_KEY, secret)
            self._hash = Hasher(bytes.fromhex(secret))
            self._verifier = Verifier(self, bytes.fromhex(secret))
            recorded = self._origin.meta_get("embedder")
            self.embedder = resolve(embedder, recorded)
            if recorded is None:
                self._origin.meta_set("embedder", self.embedder.name)
            elif recorded != self.embedder.name:
                raise EmbedderMismatch(
                    f"this store's vectors were made by embedder '{recorded}', not '{self.embedder.name}': "
                    f"open it with embedder='{recorded.split('-')[0]}' (or None), or use a new store"
                )
            self._derivations = Derivations(self._origin, self.embedder)
            self._fts = FullTextIndex(self._origin)
            self._ann = VectorIndex(
                self._origin,
                os.path.join(self.path, "ann"),
                self.embedder.dim,
                lambda tenant: "t" + self._hash("tenant-file", tenant),
                max_propagation_s=ann_max_propagation_s,
            )
        except BaseException:
            self._release_lock()
            raise
        self._synchronous = [self._fts]
        self._asynchronous = [self._ann]
        self._on_quarantine: list[Callable[[Receipt, list[QuarantineItem]], None]] = []
        self._last_persist = time.monotonic()
        self._compact_interval = compact_interval
        self.erase_bound_s = erase_bound_s
        # An erasure may be waiting for its bytes to go since before a restart: save soon.
        self._erasure_unsaved = True
        self._measured: dict[str, dict[str, float]] = {}
        self._alarmed: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._worker: threading.Thread | None = None
        if background:
            self._worker = threading.Thread(target=self._background, name="efface-compactor", daemon=True)
            self._worker.start()

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop the compactor, absorb and save every artifact, and release the store."""
        if self._closed:
            return
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join()
        with self._lock:
            try:
                self._compact(persist=True)
            finally:
                self._closed = True
                self._ann.close()
                self._origin.close()
                self._release_lock()

    def _release_lock(self) -> None:
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_UN)
        finally:
            self._lockfile.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EffaceError("the store is closed; open it again with efface.open()")

    # -- the chokepoint ----------------------------------------------------------------
    def _mutate(self, kind: str, tenant: str, body: Callable, *, sweep: bool = True,
                after: Callable[[Any], None] | None = None) -> tuple[int, Any]:
        """The only way anything changes. ``body(tx, now)`` returns
        ``(result, puts, drops, texts)``; it runs inside the origin transaction.
        ``after(result)`` runs once it has committed, still under the store lock (for
        in-memory state that must follow the origin). Due expiries are honoured first, so
        a write can never revive an expired claim."""
        with self._lock:
            self._check_open()
            if sweep:
                self._expire_due(self._clock())
            now = self._clock()
            with self._origin.transaction(kind, tenant, now) as tx:
                result, puts, drops, texts = body(tx, now)
                if puts or drops:
                    tx.log_changes(tenant, puts, drops)
                    for artifact in self._synchronous:
                        artifact.stage(tx, tenant, puts, drops, texts)
            if after is not None:
                after(result)
            if drops:
                self._erasure_unsaved = True
            if puts or drops:
                self._wake.set()  # the compactor absorbs new content and erasures promptly
            # Committed and fsynced: acknowledged. Asynchronous artifacts (ANN) absorb it
            # in the compactor; recall catches them up on new content first (read-your-writes),
            # and reads are safe meanwhile because every candidate is resolved in the origin.
            return tx.epoch, result

    # -- writes --------------------------------------------------------------------------
    def write(
        self,
        key: str,
        text: str,
        *,
        tenant: str,
        subject: str,
        purpose: str,
        basis: str = "consent",
        ttl: Any = None,
        metadata: Mapping[str, Any] | None = None,
        sources: Iterable[str] | None = None,
    ) -> int:
        """Store ``text`` under ``key`` with one claim. Writing an existing key replaces its
        text and adds (or restates) the claim; other claims on it stay. Returns the epoch."""
        return self.write_many(
            [{"key": key, "text": text, "metadata": metadata, "sources": sources}],
            tenant=tenant, subject=subject, purpose=purpose, basis=basis, ttl=ttl,
        )

    def write_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        tenant: str,
        subject: str | None = None,
        purpose: str | None = None,
        basis: str = "consent",
        ttl: Any = None,
        embeddings: np.ndarray | None = None,
    ) -> int:
        """Write many records in one transaction (one epoch). Each item is a mapping with
        ``key`` and ``text`` and optionally ``subject``, ``purpose``, ``basis``, ``ttl``,
        ``metadata``, ``sources``, overriding the keyword defaults. ``embeddings`` may
        carry precomputed vectors (one row per item) from this store's embedder."""
        tenant = v.name(tenant, "tenant")
        if not isinstance(items, Iterable):
            raise InvalidInput("items must be a list of mappings with 'key' and 'text'")
        items = list(items)
        if not items:
            raise InvalidInput("write_many needs at least one item")
        prepared = []
        for item in items:
            if not isinstance(item, Mapping):
                raise InvalidInput("each item must be a mapping with 'key' and 'text'")
            unknown = set(item) - {"key", "text", "subject", "purpose", "basis", "ttl", "metadata", "sources"}
            if unknown:
                raise InvalidInput(f"unknown item fields: {', '.join(sorted(unknown))}")
            s = item.get("subject", subject)
            p = item.get("purpose", purpose)
            if s is None or p is None:
                raise InvalidInput("every record needs a subject and a purpose (a claim)")
            prepared.append(
                (
                    v.key(item.get("key")),
                    v.text(item.get("text")),
                    v.name(s, "subject"),
                    v.purpose(p),
                    v.basis(item.get("basis", basis)),
                    v.ttl(item.get("ttl", ttl)),
                    v.metadata(item.get("metadata")),
                    v.sources(item.get("sources")),
                )
            )
        if len({p[0] for p in prepared}) != len(prepared):
            raise InvalidInput("the same key appears twice in one batch: write it once")
        if embeddings is None:
            vectors = self.embedder.embed([p[1] for p in prepared])
        else:
            vectors = np.asarray(embeddings, dtype=np.float32)
            if vectors.shape != (len(prepared), self.embedder.dim):
                raise InvalidInput(f"embeddings must have shape ({len(prepared)}, {self.embedder.dim})")

        def body(tx, now):
            puts, texts = [], {}
            for (key, text, subj, purp, bas, ttl_s, meta, srcs), vec in zip(prepared, vectors):
                rec = NewRecord(key, text, meta, srcs, np.ascontiguousarray(vec, dtype=np.float32).tobytes(),
                                subj, purp, bas, None if ttl_s is None else now + ttl_s)
                rid = tx.upsert(tenant, rec, now)
                tx.register_purpose(tenant, purp)
                self._derivations.on_write(tx, tenant, rid, text)
                puts.append(rid)
                texts[rid] = text
            tx.ensure_subject_keys(tenant, {p[2] for p in prepared}, now, self._subject_h(tenant))
            return None, puts, [], texts

        epoch, _ = self._mutate("write", tenant, body)
        return epoch

    def retain(self, key: str, *, tenant: str, subject: str, purpose: str, basis: str, ttl: Any = None) -> int:
        """Add a claim to an existing record (a second reason to keep it). Returns the epoch."""
        tenant, key = v.name(tenant, "tenant"), v.key(key)
        subject, purpose, basis, ttl_s = v.name(subject, "subject"), v.purpose(purpose), v.basis(basis), v.ttl(ttl)

        def body(tx, now):
            rid = tx.record_id(tenant, key)
            if rid is None:
                raise NotFound("no live record with that key in this tenant: write it before retaining it")
            tx.add_claim(rid, subject, purpose, basis, None if ttl_s is None else now + ttl_s, now)
            tx.register_purpose(tenant, purpose)
            tx.ensure_subject_keys(tenant, [subject], now, self._subject_h(tenant))
            return None, [], [], {}

        epoch, _ = self._mutate("retain", tenant, body)
        return epoch

    def register_subject(self, subject: str, *, tenant: str, identifiers: Iterable[str]) -> int:
        """Record the identifiers (names, e-mails, phones, handles) that name a subject."""
        tenant, subject = v.name(tenant, "tenant"), v.name(subject, "subject")
        if isinstance(identifiers, str):
            raise InvalidInput("identifiers must be a list of strings, not one string")
        if not isinstance(identifiers, Iterable):
            raise InvalidInput("identifiers must be a list of strings")
        ids = sorted({v.name(i, "each identifier") for i in identifiers})

        def body(tx, now):
            tx.set_subject(tenant, subject, json.dumps(ids, ensure_ascii=False), now)
            self._derivations.on_register(tx, tenant, subject, ids)
            return None, [], [], {}

        epoch, _ = self._mutate(
            "subject", tenant, body, after=lambda _: self._derivations.mentions.set_subject(tenant, subject, ids)
        )
        return epoch

    # -- reads -----------------------------------------------------------------------------
    def _known_purpose(self, tenant: str, purpose: str) -> None:
        known = self._origin.purposes(tenant)
        if purpose not in known:
            listing = ", ".join(known) if known else "none yet"
            raise UnknownPurpose(
                # Neither the tenant nor the purpose is echoed (errors never repeat input).
                f"this tenant has no record written under that purpose (known purposes: {listing}); "
                "check the spelling"
            )

    def read(self, key: str, *, tenant: str, purpose: str) -> Memory | None:
        """The record under ``key``, if it has a live claim for ``purpose``; else None."""
        tenant, key, purpose = v.name(tenant, "tenant"), v.key(key), v.purpose(purpose)
        with self._lock:
            self._check_open()
            self._known_purpose(tenant, purpose)
            found = self._origin.read(tenant, key, purpose, self._clock())
        if found is None:
            return None
        rec, claims = found
        return Memory(
            key=rec.key, text=rec.text, tenant=rec.tenant, metadata=json.loads(rec.metadata),
            sources=tuple(json.loads(rec.sources)),
            claims=tuple(Claim(c.subject, c.purpose, c.basis, c.expires_at) for c in claims),
            updated_at=rec.updated_at,
        )

    def recall(self, query: str, *, tenant: str, purpose: str, subject: str | None = None, k: int = 10) -> list[Hit]:
        """Hybrid recall: ANN over embeddings and FTS5 over words, fused by reciprocal rank.
        Every candidate is resolved against the origin's live claims for ``tenant`` and
        ``purpose`` (and ``subject`` if given) before its text, read from the origin, is
        returned."""
        tenant, purpose, query, k = v.name(tenant, "tenant"), v.purpose(purpose), v.query(query), v.k(k)
        if subject is not None:
            subject = v.name(subject, "subject")
        with self._lock:
            self._check_open()
            self._known_purpose(tenant, purpose)
        vector = self.embedder.embed([query])[0]
        with self._lock:
            self._check_open()
            self._absorb_new_content()
            q = Query(tenant, query, vector, purpose, subject, self._clock())
            n = max(4 * k, 40)
            fts_ids = self._fts.candidates(q, n)
            ann_ids = self._ann.candidates(q, n)
            live = self._origin.live_ids(list({*fts_ids, *ann_ids}), tenant, purpose, subject, q.now)
            ann_live = [i for i in ann_ids if i in live]
            size = self._ann.size(tenant)
            # Purpose, subject and pending erasures thin the ANN list; widen until k survive
            # (bounded: records too rare for that are still found by their words, via FTS).
            while len(ann_live) < k and len(ann_ids) == n and n < min(size, MAX_ANN_CANDIDATES):
                n = min(n * 4, MAX_ANN_CANDIDATES)
                ann_ids = self._ann.candidates(q, n)
                live |= self._origin.live_ids([i for i in ann_ids if i not in live], tenant, purpose, subject, q.now)
                ann_live = [i for i in ann_ids if i in live]
            scores: dict[int, float] = {}
            via: dict[int, list[str]] = {}
            for name, ranked in (("ann", ann_live), ("fts", [i for i in fts_ids if i in live])):
                for rank, rid in enumerate(ranked):
                    scores[rid] = scores.get(rid, 0.0) + 1.0 / (RRF_K + rank + 1)
                    via.setdefault(rid, []).append(name)
            best = sorted(scores, key=lambda r: (-scores[r], r))[:k]
            # Text leaves the store only here: from the origin, for ids checked live just above.
            rows = self._origin.records_by_id(best)
        return [
            Hit(key=rows[r].key, text=rows[r].text, score=round(scores[r], 6), via=tuple(via[r]),
                metadata=json.loads(rows[r].metadata))
            for r in best
        ]

    def _absorb_new_content(self) -> None:
        """Read-your-writes for recall: bring asynchronous artifacts up to the newest write.
        Erasures committed after that write stay for the compactor: they are unreadable
        already, and absorbing them is not needed for a correct answer."""
        for a in self._asynchronous:
            target = self._origin.latest_put_epoch(after=a.applied_epoch())
            if target is not None:
                a.catch_up(upto=target)

    # -- forget ----------------------------------------------------------------------------
    def forget(
        self,
        *,
        tenant: str,
        subject: str | None = None,
        purpose: str | None = None,
        prefix: str | None = None,
        key: str | None = None,
    ) -> Receipt:
        """Release the claims the selector matches, erase records left with none, and
        return a receipt once the tombstones and the epoch are durable. From that moment
        nothing erased is served through any read path."""
        tenant = v.name(tenant, "tenant")
        if subject is None and purpose is None and prefix is None and key is None:
            raise ScopeError(
                "forget must name a subject, purpose, prefix or key besides the tenant; "
                "erasing a whole tenant is not a forget"
            )
        if subject is not None:
            subject = v.name(subject, "subject")
        if purpose is not None:
            purpose = v.purpose(purpose)
        if prefix is not None:
            prefix = v.key(prefix, "prefix")
        if key is not None:
            key = v.key(key)
        selector = Selector(tenant, subject, purpose, prefix, key)
        with self._lock:
            self._check_open()
            if purpose is not None:
                self._known_purpose(tenant, purpose)

            def body(tx, now):
                matched = tx.match_claims(tenant, subject, purpose, prefix, key)
                outcome = self._release(tx, selector, "forget", matched, now)
                return outcome, outcome.puts, outcome.drops, outcome.texts

            def after(outcome):
                if outcome.identifiers_erased:
                    self._derivations.mentions.drop_subject(tenant, subject)

            epoch, outcome = self._mutate("forget", tenant, body, after=after)
            receipt = self._receipt(epoch, outcome)
        if receipt.quarantined and self._on_quarantine:
            items = [i for i in self.quarantined(tenant=tenant) if i.handle == receipt.handle]
            for callback in list(self._on_quarantine):
                try:
                    callback(receipt, items)
                except Exception:  # the erasure is committed; a failing callback must not hide that
                    import logging

                    logging.getLogger("efface").exception("on_quarantine callback failed")
        return receipt

    def _release(self, tx, selector: Selector, kind: str, matched: Sequence[ClaimRow], now: float) -> _ForgetOutcome:
        """Release claims, erase records left with none, list what stays and why, and
        write the receipt and the ledger entry: all inside the caller's transaction."""
        held = [c for c in matched if kind == "forget" and c.basis in LEGAL_BASES and selector.purpose is None]
        held_ids = {c.id for c in held}
        released = [c for c in matched if c.id not in held_ids]
        tx.release([c.id for c in released])
        out = _ForgetOutcome(selector, kind, [Released(c.key, c.subject, c.purpose, c.basis) for c in released],
                             [], [], [])
        key_of = {c.record_id: c.key for c in matched}
        left = tx.remaining_claims(sorted(key_of))
        for rid in sorted(key_of):
            if rid not in left:
                out.erased.append(key_of[rid])
                out.drops.append(rid)
                continue
            for c in left[rid]:
                if c.id in held_ids:
                    reason = (f"basis {c.basis} is kept unless the forget names purpose '{c.purpose}'")
                else:
                    reason = "another live claim keeps the record (retention scopes are a union)"
                out.retained.append(Retained(c.key, c.purpose, c.basis, c.expires_at, reason))
        content = tx.content_of(out.drops)  # for the fingerprints verify needs; gone at commit
        tx.erase_records(out.drops)
        # Crypto-shredding: a subject left with no claim in the tenant loses its data key here,
        # in the erasure's own transaction, so its part of every backup is unreadable from now.
        shredded = tx.destroy_subject_keys(selector.tenant, {c.subject for c in released})
        handle = "efr_" + secrets.token_hex(12)
        subject = selector.subject if kind == "forget" else None
        out.derivations, out.puts, out.texts = self._derivations.process(
            tx, tenant=selector.tenant, subject=subject, erased_keys=out.erased,
            erased_ids=set(out.drops), handle=handle, now=now)
        out.policy = tx.policy(selector.tenant)[0]
        identifiers: list[str] = []
        if subject is not None:
            row = tx.execute("SELECT identifiers FROM subjects WHERE tenant=? AND subject=?",
                             (selector.tenant, subject)).fetchone()
            out.identifiers_erased = self._derivations.forget_subject(tx, selector.tenant, subject)
            if out.identifiers_erased or not tx.subject_has_claims(selector.tenant, subject):
                identifiers = [subject, *(json.loads(row[0]) if row else [])]
        quarantined_ids = [rid for d in out.derivations if d.action == "quarantined"
                           if (rid := tx.record_id(selector.tenant, d.key)) is not None]
        self._verifier.collect(tx, selector.tenant, handle, content, quarantined_ids, identifiers, now,
                               keys=[key for _s, key in shredded])
        body = self._hashed_body(out, tx.epoch, now)
        body["backups"] = out.backups = self._backup_coverage(tx, out, [s for s, _key in shredded])
        tenant_h = self._hash("tenant", selector.tenant)
        tx.save_receipt(handle, kind, tenant_h, body, now)
        out.ledger_seq, out.ledger_hash = tx.append_ledger(kind, handle, body, now)
        out.handle, out.acknowledged_at = handle, now
        return out

    def _hashed_body(self, out: _ForgetOutcome, epoch: int, now: float) -> dict:
        """The receipt as it is kept: keyed hashes in place of every key, subject and tenant."""
        t = out.selector.tenant
        memo: dict[tuple[str, str], str] = {}

        def h(kind: str, value: str | None) -> str | None:
            if value is None:
                return None
            if (kind, value) not in memo:
                memo[kind, value] = self._hash(kind, t, value)
            return memo[kind, value]

        return {
            "epoch": epoch,
            "kind": out.kind,
            "level": "intent",
            "selector": {
                "tenant_h": self._hash("tenant", t),
                "subject_h": h("subject", out.selector.subject),
                "purpose": out.selector.purpose,
                "prefix_h": h("key", out.selector.prefix),
                "key_h": h("key", out.selector.key),
            },
            "released": [{"key_h": h("key", r.key), "subject_h": h("subject", r.subject),
                          "purpose": r.purpose, "basis": r.basis} for r in out.released],
            "erased": [h("key", k) for k in out.erased],
            "retained": [{"key_h": h("key", r.key), "purpose": r.purpose, "basis": r.basis,
                          "expires_at": r.expires_at, "reason": r.reason} for r in out.retained],
            "quarantined": [h("key", d.key) for d in out.derivations if d.action == "quarantined"],
            "derivations": [{"key_h": h("key", d.key), "why": d.why, "action": d.action} for d in out.derivations],
            "policy": out.policy,
            "identifiers_erased": out.identifiers_erased,
            "max_propagation_s": self._max_propagation(),
            "acknowledged_at": now,
        }

    def _max_propagation(self) -> float:
        return max(a.max_propagation_s for a in (*self._synchronous, *self._asynchronous))

    def _erased_epochs(self) -> dict[str, int]:
        """Per path, the newest epoch whose erased bytes are gone from its files."""
        return {"origin": self._origin.checkpointed_epoch(), "fts": self._fts.purged_epoch(),
                "ann": self._ann.saved_epoch()}

    def _paths(self, epoch: int) -> dict[str, PathState]:
        erased = self._erased_epochs()
        m = self._measured
        paths = {"origin": PathState("absorbed", self._origin.current_epoch(), 0.0, True, erased["origin"],
                                     0.0, m.get("origin", {}).get("erase"))}
        for a in (*self._synchronous, *self._asynchronous):
            applied = a.applied_epoch()
            paths[a.name] = PathState("absorbed" if applied >= epoch else "pending", applied, a.max_propagation_s,
                                      True, erased.get(a.name, 0), m.get(a.name, {}).get("absorb"),
                                      m.get(a.name, {}).get("erase"))
        return paths

    def _measure(self, what: str, before: dict[str, int], after: dict[str, int], now: float) -> None:
        """Record how long the erasures a path just absorbed (or erased) took since their
        acknowledgement: the measured propagation that status reports beside the bound."""
        for name, new in after.items():
            old = before.get(name, new)
            if new <= old:
                continue
            took = self._origin.ack_times(old, new)
            if took:
                worst = max(now - t for t in took)
                slot = self._measured.setdefault(name, {})
                slot[what] = round(max(slot.get(what, 0.0), worst), 6)

    def _receipt(self, epoch: int, out: _ForgetOutcome) -> Receipt:
        return Receipt(
            handle=out.handle,
            epoch=epoch,
            kind=out.kind,
            selector=out.selector,
            level="intent",
            released=tuple(out.released),
            erased=tuple(out.erased),
            retained=tuple(out.retained),
            quarantined=tuple(d.key for d in out.derivations if d.action == "quarantined"),
            paths=self._with_backups(self._paths(epoch), out.backups, epoch),
            max_propagation_s=self._max_propagation(),
            acknowledged_at=out.acknowledged_at,
            derivations=tuple(out.derivations),
            policy=out.policy,
            identifiers_erased=out.identifiers_erased,
            ledger_seq=out.ledger_seq,
            ledger_hash=out.ledger_hash,
        )

    # -- derivations: policy, quarantine, re-derivation ------------------------------------
    def set_policy(self, tenant: str, policy: str, *, reason: str | None = None) -> int:
        """What a forget does to records derived from what it erased, for one tenant:
        ``quarantine`` (default), ``redact``, or ``keep`` (needs a ``reason``)."""
        tenant = v.name(tenant, "tenant")
        policy, reason = validate_policy(policy, reason)

        def body(tx, now):
            tx.set_policy(tenant, policy, reason)
            tx.append_ledger("policy", None, {"tenant_h": self._hash("tenant", tenant), "policy": policy,
                                              "reason": reason}, now)
            return None, [], [], {}

        return self._mutate("policy", tenant, body)[0]

    def on_quarantine(self, callback: Callable[[Receipt, list[QuarantineItem]], None]) -> None:
        """Call ``callback(receipt, items)`` after a forget quarantines derived records, so the
        agent learns what to re-derive. It runs after the commit; its errors are logged."""
        if not callable(callback):
            raise InvalidInput("callback must be callable")
        self._on_quarantine.append(callback)

    def quarantined(self, *, tenant: str) -> list[QuarantineItem]:
        """Records held back from reads in ``tenant``, with the sources that survive."""
        tenant = v.name(tenant, "tenant")
        with self._lock:
            self._check_open()
            rows = self._origin.quarantined(tenant)
            all_sources = sorted({s for row in rows for s in json.loads(row[5])})
            live = self._origin.live_keys(tenant, all_sources)
        return [
            QuarantineItem(key=key, why=why, handle=handle, since=since, sources=tuple(json.loads(src)),
                           surviving_sources=tuple(s for s in json.loads(src) if s in live))
            for _rid, key, why, handle, since, src in rows
        ]

    def rederive(self, key: str, text: str, *, tenant: str, sources: Iterable[str] | None = None,
                 metadata: Mapping[str, Any] | None = None) -> int:
        """Write a new version of a derived record (its claims stay) and lift its quarantine.
        ``sources`` replaces its lineage when given. Returns the epoch."""
        tenant, key, text = v.name(tenant, "tenant"), v.key(key), v.text(text)
        new_sources = None if sources is None else v.sources(sources)
        meta = None if metadata is None else v.metadata(metadata)
        vec = np.ascontiguousarray(self.embedder.embed([text])[0], dtype=np.float32).tobytes()

        def body(tx, now):
            rid = tx.record_id(tenant, key)
            if rid is None:
                raise NotFound("no live record with that key in this tenant: write it instead")
            tx.replace_text(rid, text, vec, now)
            if meta is not None:
                tx.execute("UPDATE records SET metadata=? WHERE id=?", (meta, rid))
            if new_sources is not None:
                tx.set_sources(rid, tenant, new_sources)
            self._derivations.on_write(tx, tenant, rid, text)
            lifted = tx.lift_quarantine(rid)
            tx.append_ledger("rederive", None, {"tenant_h": self._hash("tenant", tenant),
                                                "key_h": self._hash("key", tenant, key), "lifted": lifted}, now)
            return None, [rid], [], {rid: text}

        return self._mutate("rederive", tenant, body)[0]

    def release(self, key: str, *, tenant: str, reason: str) -> int:
        """Lift a quarantine without changing the record (a policy decision: ``reason`` is
        recorded in the ledger). Returns the epoch."""
        tenant, key = v.name(tenant, "tenant"), v.key(key)
        if not isinstance(reason, str) or not reason.strip() or len(reason) > 500:
            raise InvalidInput("release needs a reason (1-500 characters); it is recorded in the ledger")

        def body(tx, now):
            rid = tx.record_id(tenant, key)
            if rid is None or not tx.lift_quarantine(rid):
                raise NotFound("no quarantined record with that key in this tenant")
            tx.append_ledger("release", None, {"tenant_h": self._hash("tenant", tenant),
                                               "key_h": self._hash("key", tenant, key), "reason": reason}, now)
            return None, [], [], {}

        return self._mutate("release", tenant, body)[0]

    # -- expiry ----------------------------------------------------------------------------
    def _expire_due(self, now: float) -> list[Receipt]:
        """Release every claim whose TTL has passed: one erasure (and receipt) per tenant."""
        receipts = []
        while (tenant := self._origin.due_tenant(now)) is not None:

            def body(tx, _now, tenant=tenant):
                matched = [c for t, c in tx.due_claims(now) if t == tenant]
                outcome = self._release(tx, Selector(tenant), "expire", matched, now)
                return outcome, outcome.puts, outcome.drops, outcome.texts

            epoch, outcome = self._mutate("expire", tenant, body, sweep=False)
            receipts.append(self._receipt(epoch, outcome))
        return receipts

    def sweep(self) -> list[Receipt]:
        """Expire every claim whose TTL has passed now; returns the expiry receipts.
        The background compactor does this on its own; call it to force it."""
        with self._lock:
            self._check_open()
            return self._expire_due(self._clock())

    # -- status ------------------------------------------------------------------------------
    def _receipt_row(self, handle: str, tenant: str | None) -> dict:
        """The stored receipt for ``handle`` (checked against ``tenant`` when named). Call with
        the lock held."""
        if not isinstance(handle, str) or not handle:
            raise InvalidInput("handle must be the string a receipt carries (receipt.handle)")
        self._check_open()
        row = self._origin.receipt(handle)
        if row is None or (tenant is not None and row["tenant_h"] != self._hash("tenant", v.name(tenant, "tenant"))):
            raise NotFound("no receipt with that handle in this store (for this tenant)")
        return row

    def status(self, handle: str, *, tenant: str | None = None) -> Status:
        """Where an erasure stands on every read path, now. Naming ``tenant`` also checks
        that the receipt belongs to it (servers pass the caller's tenant)."""
        with self._lock:
            row = self._receipt_row(handle, tenant)
            epoch, body = row["epoch"], row["body"]
            paths = self._with_backups(self._paths(epoch), body.get("backups"), epoch)
            pending = self._origin.pending_drops(min(a.applied_epoch() for a in self._asynchronous))
            alarms = self._alarms(handle, epoch, body["acknowledged_at"], paths)
        return Status(
            handle=handle, epoch=epoch, kind=row["kind"], level=body["level"], paths=paths,
            pending_deletions=pending, settled=all(p.state in SETTLED_STATES for p in paths.values()),
            max_propagation_s=body["max_propagation_s"], acknowledged_at=body["acknowledged_at"],
            counts={"released": len(body["released"]), "erased": len(body["erased"]),
                    "retained": len(body["retained"]), "quarantined": len(body["quarantined"])},
            # The store's own files; backups are outside the directory, and a backup that
            # still opens under a living key (ledger-replay) is reported by its path and by
            # verify's backups check, not waited for: nothing the compactor does changes it.
            erased=all(p.erased_epoch >= epoch for n, p in paths.items() if n != "backups"),
            alarms=alarms, erase_bound_s=self.erase_bound_s,
        )

    def _alarms(self, handle: str, epoch: int, acked: float, paths: dict[str, PathState]) -> tuple[str, ...]:
        """Paths past their declared bound for this erasure; each is logged once."""
        age = self._clock() - acked
        out = []
        for name, p in paths.items():
            if p.state not in SETTLED_STATES and age > p.max_propagation_s:
                out.append(f"{name}: not absorbed {age:.1f} s after the acknowledgement "
                           f"(bound {p.max_propagation_s:g} s)")
            elif p.erased_epoch < epoch and p.state != "ledger-replay" and age > self.erase_bound_s:
                # (ledger-replay declares no bound: only the subject's last claim going, or the
                # backup files being deleted, erases those bytes; status.erased stays False.)
                out.append(f"{name}: bytes not erased {age:.1f} s after the acknowledgement "
                           f"(bound {self.erase_bound_s:g} s)")
        for alarm in out:
            if (handle, alarm.split(":")[0]) not in self._alarmed:
                self._alarmed.add((handle, alarm.split(":")[0]))
                log.warning("erasure %s: %s", handle, alarm)  # the handle is random, not personal
        return tuple(out)

    def wait(self, handle: str, timeout: float = 30.0, *, tenant: str | None = None,
             until: str = "erased") -> Status:
        """Block until the erasure has gone through every path, or ``timeout`` seconds pass.
        ``until="erased"`` (default) waits for the bytes to be gone from every file, which
        ``verify`` then checks; ``until="absorbed"`` only for every read path to absorb it.
        Returns the status either way: check ``.erased`` or ``.settled``."""
        if until not in ("erased", "absorbed"):
            raise InvalidInput("until must be 'erased' or 'absorbed'")
        deadline = time.monotonic() + timeout
        while True:
            if self._worker is None:
                # No compactor thread: do its work here.
                with self._lock:
                    self._check_open()
                    st = self.status(handle, tenant=tenant)
                    if until == "erased" and not st.erased:
                        self._compact(persist=True)
                    else:
                        self._compact(persist=False)
            st = self.status(handle, tenant=tenant)
            done = st.erased if until == "erased" else st.settled
            if done or time.monotonic() >= deadline:
                return st
            self._wake.set()
            time.sleep(0.005)

    def verify(self, handle: str, *, tenant: str | None = None) -> Verification:
        """Climb the evidence ladder for this erasure with recorded checks (DESIGN §3):
        probes through every read path for ``unreadable``; the artifacts' erased epochs and
        a scan of every file's bytes for ``erased``. The outcome is appended to the ledger;
        the receipt's level only moves up. Call ``wait`` first to give the compactor time
        to erase the bytes; until then the result says which check failed and where."""
        with self._lock:
            row = self._receipt_row(handle, tenant)
            name = next((t for t in self._origin.tenant_names() if self._hash("tenant", t) == row["tenant_h"]), None)
            evidence = self._origin.evidence(handle)
            row = self._backups_now(row, name)
            proof = self._origin.erased_proof(handle)
            level, checks, scanned, files = self._verifier.verify(handle, row, evidence, name, proof)
            ladder = ("intent", "unreadable", "erased")
            previous = row["body"]["level"]
            receipt_level = max(previous, level, key=ladder.index)
            discard = level == "erased" and evidence is not None and evidence["fingerprints"] is not None
            now = self._clock()
            body = {"level": level, "receipt_level": receipt_level, "epoch": row["epoch"],
                    "checks": [c.to_dict() for c in checks], "scanned_bytes": scanned,
                    "fingerprints_discarded": discard or (evidence is not None and evidence["fingerprints"] is None)}
            seq, digest = self._origin.record_verification(handle, body, receipt_level, discard, now)
        return Verification(
            handle=handle, epoch=row["epoch"], level=level, receipt_level=receipt_level, checks=tuple(checks),
            verified_at=now, scanned_bytes=scanned, scanned_files=tuple(files),
            fingerprints_discarded=body["fingerprints_discarded"], ledger_seq=seq, ledger_hash=digest,
        )

    def _backups_now(self, row: dict, tenant: str | None) -> dict:
        """A ``ledger-replay`` erasure becomes ``shredded`` once every key that could still open
        its part of older backups is gone (its subjects' later erasures destroyed them)."""
        body = row["body"]
        if body.get("backups") != "ledger-replay" or tenant is None:
            return row
        if any(d["action"] in ("redacted", "quarantined") for d in body.get("derivations", [])):
            return row
        reader = SQLiteTx(self._origin.connection, self._origin.current_epoch())
        if reader.live_subject_hashes(tenant, [r["subject_h"] for r in body["released"]]):
            return row
        if reader.exposed(tenant, body["erased"]):
            return row
        return {**row, "body": {**body, "backups": "shredded"}}

    def certificate(self, handle: str, *, tenant: str | None = None) -> dict:
        """A deletion certificate for this erasure: what was asked, when, the epoch, what was
        retained and why, and every verification with each check's outcome and time, with
        the ledger entries behind them. Keyed hashes only. Render it with
        :func:`efface.erasure.certificate.to_html`."""
        from .erasure import certificate

        with self._lock:
            row = self._receipt_row(handle, tenant)
            return certificate.build(row, self._origin.ledger(), self._hash("store", "id"), self._clock())

    def receipts(self, tenant: str | None = None) -> list[dict]:
        """Every stored receipt (hashed form), oldest first, optionally for one tenant."""
        with self._lock:
            self._check_open()
            th = self._hash("tenant", v.name(tenant, "tenant")) if tenant is not None else None
            return self._origin.receipts(th)

    # -- ledger ------------------------------------------------------------------------------
    def ledger(self) -> list[dict]:
        """The erasure ledger, oldest first. It holds keyed hashes, never personal data."""
        with self._lock:
            self._check_open()
            return self._origin.ledger()

    def verify_ledger(self) -> ChainCheck:
        """Recompute the ledger's hash chain; any gap or altered entry is reported."""
        return verify_chain(self.ledger())

    # -- compaction ----------------------------------------------------------------------------
    def compact(self) -> int:
        """Bring every derived artifact up to the newest epoch and save it. Returns that epoch."""
        with self._lock:
            self._check_open()
            return self._compact(persist=True)

    def _compact(self, persist: bool) -> int:
        applied = {a.name: a.applied_epoch() for a in self._asynchronous}
        for a in self._asynchronous:
            a.catch_up()
        self._measure("absorb", applied, {a.name: a.applied_epoch() for a in self._asynchronous}, self._clock())
        if persist:
            erased = self._erased_epochs()
            self._erasure_unsaved = False
            for a in (*self._synchronous, *self._asynchronous):
                a.persist()
            self._origin.prune_changes(min(a.saved_epoch() for a in self._asynchronous))
            self._origin.rebuild_indexes()
            self._origin.checkpoint()
            self._last_persist = time.monotonic()
            self._measure("erase", erased, self._erased_epochs(), self._clock())
        return min(a.applied_epoch() for a in (*self._synchronous, *self._asynchronous))

    def _background(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._compact_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                with self._lock:
                    if self._closed:
                        return
                    self._expire_due(self._clock())
                    since = time.monotonic() - self._last_persist
                    due = since > _PERSIST_EVERY_S or (self._erasure_unsaved and since > _ERASE_PERSIST_S)
                    self._compact(persist=due)
            except Exception:  # keep the worker alive; the next round retries
                import logging

                logging.getLogger("efface").exception("compactor round failed")

    # -- introspection ---------------------------------------------------------------------------
    def stats(self) -> dict:
        with self._lock:
            self._check_open()
            return {
                "records": self._origin.count_records(),
                "epoch": self._origin.current_epoch(),
                "embedder": self.embedder.name,
                "paths": {n: p.to_dict() for n, p in self._paths(self._origin.current_epoch()).items()},
            }

    # -- backups with crypto-shredding -----------------------------------------------------------
    def _subject_h(self, tenant: str) -> Callable[[str], str]:
        return lambda subject: self._hash("subject", tenant, subject)

    def _backup_secret(self, label: str) -> bytes:
        return _backup.derive_key(bytes.fromhex(self._origin.meta_get(SECRET_KEY)), label)

    def _backup_coverage(self, tx, out: _ForgetOutcome, shredded: Sequence[str]) -> str | None:
        """What covers this erasure in the backups taken before it (None: there are none).
        ``shredded``: every subject whose claim it released lost its data key here, no record
        was redacted (the unredacted text stays in backups under its own subjects' keys), and
        no older backup can hold an erased record under a key that still lives (a subject
        whose claim on it went earlier but who kept others: ``backup_exposure`` remembers
        those, as keyed hashes, until the subject's key goes). Otherwise ``ledger-replay``:
        the content can still be decrypted with the origin's keys, and only the ledger replay
        that every restore runs keeps it out."""
        if tx.backup_floor() is None:
            return None
        tenant = out.selector.tenant
        gone = set(shredded)
        sh = self._subject_h(tenant)
        tx.note_exposure(tenant, {(self._hash("key", tenant, r.key), sh(r.subject))
                                  for r in out.released if r.subject not in gone})
        tx.drop_exposure(tenant, [sh(s) for s in gone])
        if not out.released:
            return "absorbed"  # nothing released: nothing of this erasure is in a backup
        # A derived record quarantined or redacted here is in older backups, unchanged, under
        # its own subjects' keys (which live): only the ledger replay keeps it out.
        if any(r.subject not in gone for r in out.released) or any(d.action in ("redacted", "quarantined")
                                                                     for d in out.derivations):
            return "ledger-replay"
        if tx.exposed(tenant, sorted({self._hash("key", tenant, k) for k in out.erased})):
            return "ledger-replay"
        return "shredded"

    def _with_backups(self, paths: dict[str, PathState], state: str | None, epoch: int) -> dict[str, PathState]:
        if state is not None:
            # Decided in the erasure's transaction (keys destroyed there, or the ledger entry
            # every restore replays committed there): nothing is left to propagate.
            # Physically erased once the destroyed keys' bytes are out of the WAL (checkpoint);
            # under ledger-replay never: the backups can still be decrypted with living keys.
            erased = self._origin.checkpointed_epoch() if state in ("shredded", "absorbed") else 0
            paths["backups"] = PathState(state, epoch, 0.0, True, erased)
        return paths

    def backup(self, dest: str | os.PathLike) -> _backup.BackupResult:
        """Write a backup of every live record to the file ``dest``, each record encrypted so
        that only the data keys of the subjects holding claims on it (kept in this store's
        origin, nowhere else) can open it. A later forget that leaves a subject with no claim
        destroys its key, and so its part of every backup. The file appears whole or not at
        all; the backup is recorded in the origin and the ledger."""
        dest = os.path.abspath(os.fspath(dest))
        parent, base = os.path.dirname(dest), os.path.basename(dest)
        if os.path.isdir(dest):
            raise InvalidInput("the backup destination is a directory: give a file path")
        if not os.path.isdir(parent):
            raise InvalidInput("the backup destination's directory does not exist: create it first")
        with self._lock:
            self._check_open()
            store_id = self._hash("store", "id")
            mac_key, settings_key = self._backup_secret("backup-mac"), self._backup_secret("backup-settings")
            backup_id = "efb_" + secrets.token_hex(12)
            path_h = self._hash("backup-path", dest)
            # Temporary files of an earlier backup to the same path killed mid-way (ciphertext only).
            for name in os.listdir(parent):
                if name.startswith(f".{base}.") and name.endswith(".efface-tmp"):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(parent, name))
            tmp: list[str] = []

            def body(tx, now):
                # Subjects of stores made before keys existed get theirs now.
                pairs: dict[str, set[str]] = {}
                for t, s in tx.claim_subjects(now):
                    pairs.setdefault(t, set()).add(s)
                for t, subjects in pairs.items():
                    tx.ensure_subject_keys(t, subjects, now, self._subject_h(t))
                seq, ledger_hash = tx.append_ledger("backup", None, {"backup_id": backup_id, "epoch": tx.epoch,
                                                                     "path_h": path_h}, now)
                keys = {(t, s): (kid, key) for t, s, kid, key in tx.subject_keys()}
                rows = tx.execute("SELECT tenant, subject, identifiers FROM subjects").fetchall()
                subjects = [r for r in rows if (r[0], r[1]) in keys]
                n_records = tx.execute("SELECT count(DISTINCT record_id) FROM claims c WHERE"
                                       " c.expires_at IS NULL OR c.expires_at > ?", (now,)).fetchone()[0]
                header = {"format": _backup.FORMAT, "store_id": store_id, "backup_id": backup_id,
                          "epoch": tx.epoch, "ledger_seq": seq, "ledger_hash": ledger_hash, "created_at": now,
                          "embedder": self.embedder.name,
                          "counts": {"records": n_records, "identifiers": len(subjects), "keys": len(keys)}}
                fd, path = tempfile.mkstemp(prefix=f".{base}.", suffix=".efface-tmp", dir=parent)
                tmp.append(path)
                ctx = {"store_id": store_id, "backup_id": backup_id}
                with os.fdopen(fd, "wb") as f:
                    w = _backup.BackupWriter(f, mac_key, header)
                    settings = {"t": "settings",
                                "policies": tx.execute("SELECT tenant, policy, reason FROM policies").fetchall(),
                                "purposes": tx.execute("SELECT tenant, purpose FROM purposes").fetchall()}
                    w.frame(_backup.seal(json.dumps(settings).encode(), [(_backup.STORE_KID, settings_key, b"")],
                                         index=0, **ctx))
                    index = 1
                    for t, s, ids in subjects:
                        kid, key = keys[t, s]
                        payload = json.dumps({"t": "subject", "tenant": t, "subject": s, "identifiers": ids},
                                             ensure_ascii=False).encode()
                        w.frame(_backup.seal(payload, [(kid, key, b"")], index=index, **ctx))
                        index += 1
                    written = 0
                    for row, claims in tx.backup_rows(now):
                        rid, t, key_, text, meta, srcs, emb, created, updated, qwhy, qhandle, qsince = row
                        by_subject: dict[str, list] = {}
                        for s, purpose, basis, expires_at in claims:
                            by_subject.setdefault(s, []).append([s, purpose, basis, expires_at])
                        wraps = [(*keys[t, s], json.dumps(cs, ensure_ascii=False).encode())
                                 for s, cs in sorted(by_subject.items())]
                        fields = {"t": "record", "tenant": t, "key": key_, "text": text, "metadata": meta,
                                  "sources": srcs, "created_at": created, "updated_at": updated,
                                  "quarantine": None if qwhy is None else [qwhy, qhandle, qsince]}
                        w.frame(_backup.seal(_backup.encode_record(fields, emb), wraps, index=index, **ctx))
                        index += 1
                        written += 1
                    size = w.finish()
                    f.flush()
                    os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the backup
                tx.record_backup(backup_id, path_h, seq, now, written, len(keys))
                result = _backup.BackupResult(dest, backup_id, tx.epoch, seq, written, len(keys), size)
                return result, [], [], {}

            def after(_result):
                os.replace(tmp[0], dest)
                _fsync_dir(parent)

            try:
                _epoch, result = self._mutate("backup", None, body, after=after)
            except BaseException:
                for path in tmp:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                raise
            return result

    def restore(self, src: str | os.PathLike) -> _backup.RestoreResult:
        """Bring back the records of a backup this store made that are missing from it, after
        replaying the erasure ledger: nothing erased, released or expired since the backup
        comes back, and a record whose subjects' keys were destroyed cannot be decrypted at
        all. Records already live are left as they are. The whole file is authenticated
        before anything is written; a failure restores nothing."""
        src = os.path.abspath(os.fspath(src))
        if not os.path.isfile(src):
            raise NotFound("no backup file at that path")
        header = _backup.read_header(src)
        with self._lock:
            self._check_open()
            if header.get("store_id") != self._hash("store", "id"):
                raise BackupMismatch("this backup was made by another efface store; only the store that made it "
                                     "holds its keys: restore it there")
            _backup.verify_file(src, self._backup_secret("backup-mac"))
            self._expire_due(self._clock())
            entries = self._origin.ledger()
            check = verify_chain(entries)
            if not check.ok:
                raise UnverifiableDeletion("the erasure ledger does not verify, so a restore could bring back "
                                           "erased records; nothing was restored (run `efface ledger verify`)")
            seq = header["ledger_seq"]
            mark = entries[seq - 1] if 0 < seq <= len(entries) else None
            if mark is None or mark["hash"] != header["ledger_hash"] or mark["kind"] != "backup":
                raise BackupMismatch("this store's ledger has no record of this backup; nothing was restored")
            erased: set[str] = set()
            released: set[tuple] = set()
            for e in entries[seq:]:
                if e["kind"] in ("forget", "expire"):
                    b = json.loads(e["body"])
                    erased.update(b["erased"])
                    # Records held back or redacted because of a later erasure: the backup has
                    # the version from before it, which must not come back.
                    erased.update(d["key_h"] for d in b["derivations"] if d["action"] != "kept")
                    released.update((r["key_h"], r["subject_h"], r["purpose"], r["basis"]) for r in b["released"])
            keys = {kid: key for _t, _s, kid, key in self._origin.subject_keys()}
            keys[_backup.STORE_KID] = self._backup_secret("backup-settings")
            ctx = {"store_id": header["store_id"], "backup_id": header["backup_id"]}
            n_subjects = header["counts"]["identifiers"]
            plan: dict[str, dict] = {}
            shredded = 0

            def tenant_plan(t: str) -> dict:
                return plan.setdefault(t, {"policies": [], "purposes": [], "subjects": [], "records": []})

            # Decrypt and authenticate everything before writing anything.
            for index, frame in enumerate(_backup.frames(src)):
                opened = _backup.open_frame(frame, keys, **ctx, index=index)
                if opened is None:
                    shredded += index > n_subjects  # settings and subjects are not records
                    continue
                payload, wraps = opened
                if index == 0:
                    settings = json.loads(payload)
                    for t, policy, reason in settings["policies"]:
                        tenant_plan(t)["policies"].append((policy, reason))
                    for t, purpose in settings["purposes"]:
                        tenant_plan(t)["purposes"].append(purpose)
                elif index <= n_subjects:
                    s = json.loads(payload)
                    tenant_plan(s["tenant"])["subjects"].append((s["subject"], s["identifiers"], wraps[0][0]))
                else:
                    fields, emb = _backup.decode_record(payload)
                    claims = [(kid, c) for kid, extra in wraps for c in json.loads(extra)]
                    tenant_plan(fields["tenant"])["records"].append((fields, emb, claims))

            totals = {"restored": 0, "shredded": shredded, "replayed": 0, "present": 0, "subjects": 0}
            last_epoch = 0
            for tenant in sorted(plan):
                p = plan[tenant]
                installed: list[str] = []

                def body(tx, now, tenant=tenant, p=p, installed=installed):
                    alive = {kid for _t, _s, kid, _k in tx.subject_keys()}
                    n = dict.fromkeys(("restored", "shredded", "replayed", "present", "subjects"), 0)
                    for purpose in p["purposes"]:
                        tx.register_purpose(tenant, purpose)
                    for policy, reason in p["policies"]:
                        if tx.execute("SELECT 1 FROM policies WHERE tenant=?", (tenant,)).fetchone() is None:
                            tx.set_policy(tenant, policy, reason)
                    for subject, ids, kid in p["subjects"]:
                        exists = tx.execute("SELECT 1 FROM subjects WHERE tenant=? AND subject=?",
                                            (tenant, subject)).fetchone()
                        if kid in alive and exists is None:
                            tx.set_subject(tenant, subject, ids, now)
                            idents = json.loads(ids)
                            self._derivations.on_register(tx, tenant, subject, idents)
                            # Restored records below must be checked for this subject's names too.
                            self._derivations.mentions.set_subject(tenant, subject, idents)
                            installed.append(subject)
                            n["subjects"] += 1
                    puts, texts = [], {}
                    for fields, emb, claims in p["records"]:
                        key = fields["key"]
                        key_h = self._hash("key", tenant, key)
                        if key_h in erased:
                            n["replayed"] += 1
                            continue
                        live = [c for kid, c in claims if kid in alive]
                        if not live:  # its subjects' keys went since the decryption above
                            n["shredded"] += 1
                            continue
                        live = [c for c in live
                                if (key_h, self._hash("subject", tenant, c[0]), c[1], c[2]) not in released
                                and (c[3] is None or c[3] > now)]
                        if not live:
                            n["replayed"] += 1
                            continue
                        if tx.record_id(tenant, key) is not None:
                            n["present"] += 1
                            continue
                        s0, p0, b0, e0 = live[0]
                        rid = tx.upsert(tenant, NewRecord(key, fields["text"], fields["metadata"],
                                                          tuple(json.loads(fields["sources"])), emb, s0, p0, b0, e0),
                                        now)
                        for s, purpose, basis, expires_at in live[1:]:
                            tx.add_claim(rid, s, purpose, basis, expires_at, now)
                        for purpose in {c[1] for c in live}:
                            tx.register_purpose(tenant, purpose)
                        tx.execute("UPDATE records SET created_at=?, updated_at=? WHERE id=?",
                                   (fields["created_at"], fields["updated_at"], rid))
                        if fields["quarantine"] is not None:
                            why, handle, since = fields["quarantine"]
                            tx.quarantine(rid, tenant, why, handle, since)
                        self._derivations.on_write(tx, tenant, rid, fields["text"])
                        puts.append(rid)
                        texts[rid] = fields["text"]
                        n["restored"] += 1
                    tx.append_ledger("restore", None, {"tenant_h": self._hash("tenant", tenant),
                                                       "backup_id": header["backup_id"], **n}, now)
                    return n, puts, [], texts

                try:
                    last_epoch, n = self._mutate("restore", tenant, body)
                except BaseException:
                    for subject in installed:
                        self._derivations.mentions.drop_subject(tenant, subject)
                    raise
                for name, value in n.items():
                    totals[name] += value
        return _backup.RestoreResult(backup_id=header["backup_id"], epoch=last_epoch, **totals)
