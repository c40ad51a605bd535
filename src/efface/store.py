"""The store: the public facade of DESIGN §7 over one origin and its read paths.

``Store`` validates its arguments and delegates: the release rules to
:mod:`efface.erasure.release`, receipts to :mod:`~efface.erasure.receipts`, path states,
bounds and alarms to :mod:`~efface.erasure.propagation`, absorption and physical erasure to
the :class:`~efface.erasure.compactor.Compactor`, evidence and verification to
:mod:`~efface.erasure.evidence` and :mod:`~efface.erasure.verify`, hybrid recall to
:mod:`efface.paths.recall`, derived records to :mod:`efface.derivations`, backups to
:mod:`efface.backups`. It keeps one thing itself: the chokepoint :meth:`Store._mutate`.

Every mutation (write, retain, register_subject, forget, TTL expiry, policy, re-derivation,
backup, restore) goes through :meth:`Store._mutate`, which honours due expiries first, opens
one origin transaction, assigns the epoch there, stages the synchronous read paths inside it,
commits durably, and only then wakes the compactor so the asynchronous paths catch up.
Nothing is acknowledged before the commit, and no read returns text that did not come from
the origin's live claims at the moment of the read. Two other writes bypass it, on purpose:
a verification's ledger entry (``Origin.record_verification``: it changes no record, claim
or epoch), and the compactor's maintenance
(absorbing, saving, purging, checkpointing: it changes no content, only where erased bytes
still sit).

Tenant names are personal data (DESIGN §8: per-user tenants are often named by an e-mail).
Every public method turns the name it is given into the tenant's id, a keyed hash of the
name (:meth:`Store._tenant`), and everything below the facade (origin rows, change log,
receipts, ledger, ANN files, backups) sees only that id. The name is kept in one place, the
origin's tenant table, and deleted in the erasure that removes the tenant's last record,
registered subject and data key; that erasure's ``verify`` fingerprints the name and proves
it gone from every file. ``forget(tenant=..., everything=True)`` is the one call that
erases all of a (per-user) tenant.

Reads (``read``, ``recall``, ``quarantined``, ``status``, ``receipts``, ``ledger``) take no
store lock: each runs on its own origin snapshot, beside writes, compaction, verification
and backups.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from . import validate as v
from .backups import format as backup_format
from .backups.backup import write_backup
from .backups.context import BackupContext
from .backups.coverage import backups_now, with_backups
from .backups.restore import restore_backup
from .chokepoint import Chokepoint, Job, StoreLock, run_jobs
from .derivations import Derivations, quarantine, validate_policy
from .derivations.identifiers import check_identifiers
from .embed import Embedder, resolve
from .erasure.compactor import Compactor
from .erasure.evidence import Evidence
from .erasure.fingerprint import Fingerprinter
from .erasure.ledger import SECRET_KEY, ChainCheck, Hasher, verify_chain
from .erasure.propagation import ERASE_BOUND_S, SETTLED_STATES, Propagation
from .erasure.receipts import Outcome, to_receipt
from .erasure.release import Releaser, overwritten_claims
from .erasure.verify import Verifier
from .errors import EffaceError, EmbedderMismatch, InvalidInput, NotFound, ScopeError, UnknownPurpose
from .model import Claim, Hit, Memory, QuarantineItem, Receipt, Selector, Status, Verification
from .origin.base import NewRecord, Origin
from .paths.ann import VectorIndex
from .paths.base import Query, ReadPath
from .paths.fts import FullTextIndex
from .paths.recall import hybrid

__all__ = ["ERASE_BOUND_S", "SETTLED_STATES", "Store"]

log = logging.getLogger("efface")
_ERASURES = frozenset({"forget", "expire"})
"""Mutation kinds that make a receipt: their bytes are erased promptly after the commit."""
_WAIT_POLL_S = 0.05
"""The longest ``wait`` sleeps between looks at the status when no compactor round ends."""


class Store:
    """An efface store over one origin. Use :func:`efface.open` to get one."""

    def __init__(
        self,
        path: str | os.PathLike,
        embedder: str | Embedder | None = None,
        *,
        origin: Origin,
        background: bool = True,
        clock: Callable[[], float] = time.time,
        compact_interval: float = 0.5,
        ann_max_propagation_s: float = 5.0,
        erase_bound_s: float = ERASE_BOUND_S,
        on_close: Callable[[], None] | None = None,
    ):
        self.path = os.path.abspath(os.fspath(path))
        self._origin = origin
        self._on_close = on_close
        self._clock = clock
        self._lock = StoreLock()
        """Orders mutations (the chokepoint) and the in-memory state that follows them."""
        self._closed = False
        self._closing = threading.Lock()
        """One close() at a time: a second caller waits for the first, then finds it closed."""
        self._chokepoint = Chokepoint(self._lock)
        secret = origin.meta_get(SECRET_KEY)
        if secret is None:
            secret = Hasher.new_secret()
            origin.meta_set(SECRET_KEY, secret)
        self._secret = bytes.fromhex(secret)
        self._hash = Hasher(self._secret)
        recorded = origin.meta_get("embedder")
        self.embedder = resolve(embedder, recorded)
        if recorded is None:
            origin.meta_set("embedder", self.embedder.name)
        elif recorded != self.embedder.name:
            raise EmbedderMismatch(
                f"this store's vectors were made by embedder '{recorded}', not '{self.embedder.name}': "
                f"open it with embedder='{recorded.split('-')[0]}' (or None), or use a new store"
            )
        self._derivations = Derivations(origin, self.embedder)
        self._fts = FullTextIndex(origin, self._secret)
        self._ann = VectorIndex(
            origin,
            os.path.join(self.path, "ann"),
            self.embedder.dim,
            lambda tenant: "t" + self._hash("tenant-file", tenant),
            max_propagation_s=ann_max_propagation_s,
        )
        self._paths: list[ReadPath] = [self._fts, self._ann]
        self._on_quarantine: list[Callable[[Receipt, list[QuarantineItem]], None]] = []
        fingerprinter = Fingerprinter(self._secret)
        self._propagation = Propagation(origin, self._paths, clock, erase_bound_s)
        self.erase_bound_s = erase_bound_s
        self._evidence = Evidence(self._paths, fingerprinter, self._hash)
        self._verifier = Verifier(origin, self._paths, fingerprinter, self.path, clock)
        self._releaser = Releaser(self._derivations, self._evidence, self._hash, self._propagation.max_propagation)
        self._compactor = Compactor(
            origin, self._paths, self._propagation, self._sweep_quietly, interval=compact_interval
        )
        if background:
            self._ann.yielding = True  # recall searches the un-absorbed delta exactly meanwhile
            self._compactor.start()

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop the compactor, absorb and save every artifact, and release the store.
        The store is released even when saving fails (a full disk: ``StoreUnwritable``);
        what was acknowledged is in the origin, and the next open absorbs it again."""
        with self._closing:
            if self._closed:
                return
            self._compactor.stop()
            with self._lock:
                try:
                    self._compactor.run(persist=True)
                finally:
                    self._closed = True
                    for p in self._paths:
                        p.close()
                    self._origin.close()
                    if self._on_close is not None:
                        self._on_close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EffaceError("the store is closed; open it again with efface.open()")

    def _tenant(self, name: Any) -> str:
        """The id that stands for tenant ``name`` everywhere below the facade: a keyed hash
        (the receipts' ``tenant_h``), so no row, file or ledger entry holds the name."""
        return self._hash("tenant", v.name(name, "tenant"))

    # -- the chokepoint ----------------------------------------------------------------
    def _mutate(
        self,
        kind: str,
        tenant: str | None,
        body: Callable,
        *,
        sweep: bool = True,
        after: Callable[[Any], None] | None = None,
    ) -> tuple[int, Any]:
        """The only way anything changes. ``body(tx, now)`` returns
        ``(result, puts, drops, texts)``; it runs inside the origin transaction.
        ``after(result)`` runs once it has committed, still under the store lock (for
        in-memory state that must follow the origin). Due expiries are honoured first, so
        a write can never revive an expired claim. Mutations that arrive together are
        committed together, each with its own epoch, result or error (group commit:
        :mod:`efface.chokepoint`); none returns before its commit is durable."""
        return self._chokepoint.submit(Job(kind, tenant, body, after, sweep), self._run_jobs)

    def _run_jobs(self, jobs: list[Job]) -> None:
        """The leader's part, under the store lock: every job gets its answer."""
        with self._ann.writing():  # a background absorption stands back meanwhile
            try:
                self._check_open()
                if any(j.sweep for j in jobs):
                    self._expire_due(self._clock())
            except Exception as exc:
                for j in jobs:
                    j.error, j.done = exc, True
                return
            run_jobs(self._origin, jobs, self._clock(), self._stage)
        if any(j.changed for j in jobs):
            # Committed and fsynced: acknowledged. Asynchronous paths (ANN) absorb it in the
            # compactor; recall catches them up on new content first (read-your-writes), and
            # reads are safe meanwhile because every candidate is resolved in the origin.
            self._ann.touch()  # writes are streaming in: a background absorption stands back
        woken = [j for j in jobs if j.changed or (j.error is None and j.kind in _ERASURES)]
        if woken:
            # An erasure's bytes are due soon even when it dropped no record (identifiers
            # only, or every record under hold): wait(until="erased") depends on it.
            self._compactor.wake(erased=any(j.erased or j.kind in _ERASURES for j in woken))

    def _stage(self, tx: Any, tenant: str | None, puts: list, drops: list, texts: dict) -> None:
        if puts or drops:
            assert tenant is not None, "content changes belong to a tenant"
            tx.log_changes(tenant, puts, drops)
            for path in self._paths:
                if path.synchronous:
                    path.stage(tx, tenant, puts, drops, texts)

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
        replace: bool = False,
    ) -> int:
        """Store ``text`` under ``key`` with one claim. Returns the epoch.

        Writing an existing key whose claims are all ``subject``'s replaces its text and
        adds (or restates) the claim; the subject's other claims on it stay. When another
        subject holds a claim on it, that claim was made for the text it holds, so the write
        is refused with :class:`~efface.errors.KeyInUse` and nothing changes, unless
        ``replace=True``: then the old record is erased with every claim on it (a receipt of
        kind ``replace`` records it, at this write's epoch: ``status``, ``wait`` and
        ``verify`` prove the old text gone like any erasure) and the new text is written
        with this one claim. A record another subject holds under ``legal_hold`` or
        ``legal_obligation`` is never replaced. See docs/identifiers.md."""
        return self.write_many(
            [{"key": key, "text": text, "metadata": metadata, "sources": sources}],
            tenant=tenant,
            subject=subject,
            purpose=purpose,
            basis=basis,
            ttl=ttl,
            replace=replace,
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
        replace: bool = False,
    ) -> int:
        """Write many records in one transaction (one epoch). Each item is a mapping with
        ``key`` and ``text`` and optionally ``subject``, ``purpose``, ``basis``, ``ttl``,
        ``metadata``, ``sources``, overriding the keyword defaults. ``embeddings`` may
        carry precomputed vectors (one row per item) from this store's embedder.
        ``replace`` is as for :meth:`write`; one refused item refuses the whole batch."""
        name = v.name(tenant, "tenant")
        tenant = self._tenant(name)
        prepared = v.items(items, defaults={"subject": subject, "purpose": purpose, "basis": basis, "ttl": ttl})
        if not isinstance(replace, bool):
            raise InvalidInput("replace must be True or False")
        if embeddings is None:
            vectors = self.embedder.embed([p[1] for p in prepared])
        else:
            vectors = np.asarray(embeddings, dtype=np.float32)
            if vectors.shape != (len(prepared), self.embedder.dim):
                raise InvalidInput(f"embeddings must have shape ({len(prepared)}, {self.embedder.dim})")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)  # once: each row's bytes are then a slice

        def body(tx, now):
            tx.set_tenant_name(tenant, name)
            puts, drops, texts = [], [], {}
            outcome = None
            known = tx.record_ids(tenant, [p[0] for p in prepared])  # once, for both uses below
            in_the_way = overwritten_claims(tx, tenant, prepared, replace, known)
            if in_the_way:
                # The replaced content goes with every claim made for it, as an erasure of its own.
                writers = frozenset(p[2] for p in prepared)  # their new claims keep their registrations
                outcome = self._releaser.release(tx, Selector(tenant), "replace", in_the_way, now, staying=writers)
                puts, drops, texts = list(outcome.puts), list(outcome.drops), dict(outcome.texts)
            recs = [
                NewRecord(key, text, meta, srcs, vec.tobytes(), subj, purp, bas, None if ttl_s is None else now + ttl_s)
                for (key, text, subj, purp, bas, ttl_s, meta, srcs), vec in zip(prepared, vectors, strict=True)
            ]
            rids = tx.upsert_many(tenant, recs, now, known)  # one statement per table for the batch
            for purp in dict.fromkeys(p[3] for p in prepared):
                tx.register_purpose(tenant, purp)
            for rid, rec in zip(rids, recs, strict=True):
                self._derivations.on_write(tx, tenant, rid, rec.text)
                puts.append(rid)
                texts[rid] = rec.text
            tx.ensure_subject_keys(tenant, {p[2] for p in prepared}, now, self._subject_h(tenant))
            return outcome, puts, drops, texts

        def after(outcome):
            for gone in outcome.subjects_erased if outcome is not None else ():
                self._derivations.mentions.drop_subject(tenant, gone)

        # Only a replacing write can erase a subject; the others leave the group open (chokepoint).
        epoch, outcome = self._mutate("write", tenant, body, after=after if replace else None)
        if outcome is not None:
            self._notify_quarantine(self._receipt(epoch, outcome, name))
        return epoch

    def retain(self, key: str, *, tenant: str, subject: str, purpose: str, basis: str, ttl: Any = None) -> int:
        """Add a claim to an existing record (a second reason to keep it). Returns the epoch."""
        name = v.name(tenant, "tenant")
        tenant, key = self._tenant(name), v.key(key)
        subject, purpose, basis, ttl_s = v.name(subject, "subject"), v.purpose(purpose), v.basis(basis), v.ttl(ttl)

        def body(tx, now):
            tx.set_tenant_name(tenant, name)
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
        """Record the identifiers (names, e-mails, phones, handles) that name a subject, so a
        forget of the subject finds the records that name it. Each must pick out one person
        (see docs/identifiers.md): an e-mail address shaped like one; a phone number of 7 to
        15 digits (a possible number for its country code, when it has one); a name or handle
        with a letter, two letters or digits or more, and a word that is not a common word
        ("the", "user", "will" alone are refused; "Will Turner" is not). Otherwise
        :class:`~efface.errors.CommonIdentifier` says which one and why, and nothing is
        registered. Identifiers match texts whole and folded (case, accents, full-width
        forms, invisible characters), whether the text was written before or after."""
        name = v.name(tenant, "tenant")
        tenant, subject = self._tenant(name), v.name(subject, "subject")
        if isinstance(identifiers, str):
            raise InvalidInput("identifiers must be a list of strings, not one string")
        if not isinstance(identifiers, Iterable):
            raise InvalidInput("identifiers must be a list of strings")
        given = [v.name(i, "each identifier") for i in identifiers]
        check_identifiers(given)
        ids = sorted(set(given))

        def body(tx, now):
            tx.set_tenant_name(tenant, name)
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
                f"this tenant has no record written under that purpose (known purposes: {listing}); check the spelling"
            )

    def read(self, key: str, *, tenant: str, purpose: str) -> Memory | None:
        """The record under ``key``, if it has a live claim for ``purpose``; else None."""
        name = v.name(tenant, "tenant")
        tenant, key, purpose = self._tenant(name), v.key(key), v.purpose(purpose)
        self._check_open()
        with self._origin.snapshot() as r:
            self._known_purpose(tenant, purpose)
            found = r.read(tenant, key, purpose, self._clock())
        return None if found is None else _memory(*found, name)

    def scan(
        self,
        *,
        tenant: str,
        purpose: str,
        prefix: str | None = None,
        subject: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        """The listing read: records with a live claim for ``purpose`` (and ``subject``)
        whose key starts with ``prefix``, in key order, at most ``limit`` (1-1000). Page on
        by passing the last key returned as ``after``."""
        name = v.name(tenant, "tenant")
        tenant, purpose = self._tenant(name), v.purpose(purpose)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput("limit must be an int from 1 to 1000; page on with after=")
        prefix = "" if prefix is None else v.key(prefix, "prefix")
        after = None if after is None else v.key(after, "after")
        subject = None if subject is None else v.name(subject, "subject")
        self._check_open()
        now = self._clock()
        with self._origin.snapshot() as r:
            self._known_purpose(tenant, purpose)
            keys = r.scan_keys(tenant, purpose, prefix, subject, after, limit, now)
            found = [r.read(tenant, key, purpose, now) for key in keys]
        return [_memory(*f, name) for f in found if f is not None]

    def recall(self, query: str, *, tenant: str, purpose: str, subject: str | None = None, k: int = 10) -> list[Hit]:
        """Hybrid recall: ANN over embeddings and full text over words, fused by reciprocal rank.
        Every candidate is resolved against the origin's live claims for ``tenant`` and
        ``purpose`` (and ``subject`` if given) before its text, read from the origin, is
        returned."""
        tenant, purpose, query, k = self._tenant(tenant), v.purpose(purpose), v.query(query), v.k(k)
        if subject is not None:
            subject = v.name(subject, "subject")
        self._check_open()
        self._known_purpose(tenant, purpose)

        def vector() -> np.ndarray:  # called while the full-text leg runs beside it
            got = self.embedder.embed([query])[0]
            self._check_open()
            self._absorb_new_content()
            return got

        q = Query(tenant, query, np.empty(0, dtype=np.float32), purpose, subject, self._clock())
        return hybrid(self._origin, self._paths, q, k, lexical=getattr(self.embedder, "lexical", False), vector=vector)

    def _absorb_new_content(self) -> None:
        """Read-your-writes for recall: bring asynchronous paths up to the newest write.
        Erasures committed after that write stay for the compactor: they are unreadable
        already, and absorbing them is not needed for a correct answer."""
        for p in self._paths:
            if p.synchronous:
                continue
            see, seen = getattr(p, "see", None), getattr(p, "seen_epoch", None)
            if see is not None and seen is not None and self._compactor.running:
                # The compactor absorbs in the background; what it has not yet is searched
                # exactly, so no recall waits for a big import's absorption.
                see(self._origin.latest_put_epoch(after=seen()))
                continue
            target = self._origin.latest_put_epoch(after=p.applied_epoch())
            if target is not None:
                p.catch_up(upto=target)

    # -- forget ----------------------------------------------------------------------------
    def forget(
        self,
        *,
        tenant: str,
        subject: str | None = None,
        purpose: str | None = None,
        prefix: str | None = None,
        key: str | None = None,
        everything: bool = False,
    ) -> Receipt:
        """Release the claims the selector matches, erase records left with none, and
        return a receipt once the tombstones and the epoch are durable. From that moment
        nothing erased is served through any read path.

        ``everything=True`` (and nothing else besides the tenant) forgets all of the
        tenant: every claim (legal holds stay, as for any forget that does not name their
        purpose), every registered subject's identifiers, and, once nothing of the tenant
        is left, the tenant's name itself; ``verify`` then proves the name gone from every
        file. An API key still bound to the tenant (``keys.db``) keeps the name: revoke it."""
        name = v.name(tenant, "tenant")
        tenant = self._tenant(name)
        if everything is not False and everything is not True:
            raise InvalidInput("everything must be True or False")
        if everything and (subject, purpose, prefix, key) != (None, None, None, None):
            raise ScopeError("forget with everything=True names only the tenant: drop subject, purpose, prefix and key")
        if not everything and subject is None and purpose is None and prefix is None and key is None:
            raise ScopeError(
                "forget must name a subject, purpose, prefix or key besides the tenant, "
                "or everything=True to erase all of the tenant"
            )
        if subject is not None:
            subject = v.name(subject, "subject")
        if purpose is not None:
            purpose = v.purpose(purpose)
        if prefix is not None:
            prefix = v.key(prefix, "prefix")
        if key is not None:
            key = v.key(key)
        selector = Selector(tenant, subject, purpose, prefix, key, everything)
        self._check_open()
        if purpose is not None:
            self._known_purpose(tenant, purpose)
        made: dict[str, Any] = {}

        def body(tx, now):
            matched = tx.match_claims(tenant, subject, purpose, prefix, key)
            outcome = self._releaser.release(tx, selector, "forget", matched, now)
            made["epoch"] = tx.epoch
            return outcome, outcome.puts, outcome.drops, outcome.texts

        def after(outcome):
            # Under the store lock, right after the commit: the receipt states the paths as
            # they are at acknowledgement, before any later mutation.
            self._drop_mentions(outcome)
            made["receipt"] = self._receipt(made["epoch"], outcome, name)

        # Not under the store lock: the forget queues at the chokepoint with the writes, and
        # commits in their group (it closes it: its after hook changes the mention matcher).
        self._mutate("forget", tenant, body, after=after)
        receipt = made["receipt"]
        self._notify_quarantine(receipt)
        return receipt

    def _notify_quarantine(self, receipt: Receipt) -> None:
        """Tell the on_quarantine callbacks (``receipt.selector.tenant`` is the caller's name)."""
        if receipt.quarantined and self._on_quarantine:
            items = [i for i in self.quarantined(tenant=receipt.selector.tenant) if i.handle == receipt.handle]
            for callback in list(self._on_quarantine):
                try:
                    callback(receipt, items)
                except Exception:  # the erasure is committed; a failing callback must not hide that
                    log.exception("on_quarantine callback failed")

    # -- derivations: policy, quarantine, re-derivation ------------------------------------
    def set_policy(self, tenant: str, policy: str, *, reason: str | None = None) -> int:
        """What a forget does to records derived from what it erased, for one tenant:
        ``quarantine`` (default), ``redact``, or ``keep`` (needs a ``reason``)."""
        tenant = self._tenant(tenant)
        policy, reason = validate_policy(policy, reason)

        body = quarantine.policy_body(self._hash, tenant, policy, reason)
        return self._mutate("policy", tenant, body)[0]

    def on_quarantine(self, callback: Callable[[Receipt, list[QuarantineItem]], None]) -> None:
        """Call ``callback(receipt, items)`` after a forget quarantines derived records, so the
        agent learns what to re-derive. It runs after the commit; its errors are logged."""
        if not callable(callback):
            raise InvalidInput("callback must be callable")
        self._on_quarantine.append(callback)

    def quarantined(self, *, tenant: str) -> list[QuarantineItem]:
        """Records held back from reads in ``tenant``, with the sources that survive."""
        tenant = self._tenant(tenant)
        self._check_open()
        with self._origin.snapshot() as r:
            rows = r.quarantined(tenant)
            all_sources = sorted({s for row in rows for s in json.loads(row[5])})
            live = r.live_keys(tenant, all_sources)
        return [
            QuarantineItem(
                key=key,
                why=why,
                handle=handle,
                since=since,
                sources=tuple(json.loads(src)),
                surviving_sources=tuple(s for s in json.loads(src) if s in live),
            )
            for _rid, key, why, handle, since, src in rows
        ]

    def rederive(
        self,
        key: str,
        text: str,
        *,
        tenant: str,
        sources: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """Write a new version of a derived record (its claims stay) and lift its quarantine.
        ``sources`` replaces its lineage when given. Returns the epoch."""
        tenant, key, text = self._tenant(tenant), v.key(key), v.text(text)
        new_sources = None if sources is None else v.sources(sources)
        meta = None if metadata is None else v.metadata(metadata)
        vec = np.ascontiguousarray(self.embedder.embed([text])[0], dtype=np.float32).tobytes()

        body = quarantine.rederive_body(self._derivations, self._hash, tenant, key, text, vec, new_sources, meta)
        return self._mutate("rederive", tenant, body)[0]

    def release(self, key: str, *, tenant: str, reason: str) -> int:
        """Lift a quarantine without changing the record (a policy decision: ``reason`` is
        kept with the record and erased with it; the ledger records its keyed hash).
        Returns the epoch."""
        tenant, key = self._tenant(tenant), v.key(key)
        if not isinstance(reason, str) or not reason.strip() or len(reason) > 500:
            raise InvalidInput("release needs a reason (1-500 characters); the ledger records its hash")

        body = quarantine.release_body(self._hash, tenant, key, reason)
        return self._mutate("release", tenant, body)[0]

    # -- expiry ----------------------------------------------------------------------------
    def _expire_due(self, now: float) -> list[Receipt]:
        """Release every claim whose TTL has passed: one erasure (and receipt) per tenant."""
        receipts = []
        while (tenant := self._origin.due_tenant(now)) is not None:
            name = self._origin.tenant_name(tenant)  # read before the expiry may erase it

            def body(tx, _now, tenant=tenant):
                matched = [c for t, c in tx.due_claims(now) if t == tenant]
                outcome = self._releaser.release(tx, Selector(tenant), "expire", matched, now)
                return outcome, outcome.puts, outcome.drops, outcome.texts

            epoch, outcome = self._mutate("expire", tenant, body, sweep=False, after=self._drop_mentions)
            receipts.append(self._receipt(epoch, outcome, name))
        return receipts

    def _drop_mentions(self, outcome: Outcome) -> None:
        """After an erasure commits: the mention matcher forgets the subjects it erased."""
        for subject in outcome.subjects_erased:
            self._derivations.mentions.drop_subject(outcome.selector.tenant, subject)

    def _sweep_quietly(self) -> None:
        with self._lock:
            if not self._closed:
                self._expire_due(self._clock())

    def sweep(self) -> list[Receipt]:
        """Expire every claim whose TTL has passed now; returns the expiry receipts.
        The background compactor does this on its own; call it to force it."""
        with self._lock:
            self._check_open()
            return self._expire_due(self._clock())

    # -- receipts, status, wait, verify ------------------------------------------------------
    def _receipt(self, epoch: int, out: Outcome, name: str | None) -> Receipt:
        """The receipt returned to the caller, its selector naming the tenant as the caller
        did (``name``; the tenant's id if the name is unknown)."""
        paths = with_backups(self._propagation.paths(epoch), out.backups, epoch, self._origin.erased_epoch())
        receipt = to_receipt(epoch, out, paths, self._propagation.max_propagation())
        if name is None:
            return receipt
        return dataclasses.replace(receipt, selector=dataclasses.replace(receipt.selector, tenant=name))

    def _receipt_row(self, handle: str, tenant: str | None) -> dict:
        """The stored receipt for ``handle`` (checked against ``tenant`` when named)."""
        if not isinstance(handle, str) or not handle:
            raise InvalidInput("handle must be the string a receipt carries (receipt.handle)")
        self._check_open()
        row = self._origin.receipt(handle)
        if row is None or (tenant is not None and row["tenant_h"] != self._tenant(tenant)):
            raise NotFound("no receipt with that handle in this store (for this tenant)")
        return row

    def status(self, handle: str, *, tenant: str | None = None) -> Status:
        """Where an erasure stands on every read path, now. Naming ``tenant`` also checks
        that the receipt belongs to it (servers pass the caller's tenant)."""
        row = self._receipt_row(handle, tenant)
        epoch = row["epoch"]
        paths = with_backups(
            self._propagation.paths(epoch), row["body"].get("backups"), epoch, self._origin.erased_epoch()
        )
        return self._propagation.status(row, paths)

    def wait(self, handle: str, timeout: float = 30.0, *, tenant: str | None = None, until: str = "erased") -> Status:
        """Block until the erasure has gone through every path, or ``timeout`` seconds pass.
        ``until="erased"`` (default) waits for the bytes to be gone from every file, which
        ``verify`` then checks; ``until="absorbed"`` only for every read path to absorb it.
        Returns the status either way: check ``.erased`` or ``.settled``.

        Before it says erased, it scans the origin's files for the erasure's fingerprints
        (while they are kept): a stale copy of an erased cell can sit in a live page of a
        table where no index rebuild or checkpoint reaches it, and then the origin rewrites
        its files (``physical.rewrite``: VACUUM on SQLite) so that ``verify`` finds them gone."""
        if until not in ("erased", "absorbed"):
            raise InvalidInput("until must be 'erased' or 'absorbed'")
        deadline = time.monotonic() + v.timeout(timeout)
        scanned = settled = False
        while True:
            seen = self._compactor.rounds
            st = self.status(handle, tenant=tenant)
            if not self._compactor.running:
                # No compactor thread: do its work here.
                self._compactor.run(persist=until == "erased" and not st.erased)
                st = self.status(handle, tenant=tenant)
            done = st.erased if until == "erased" else st.settled
            if done and until == "erased":
                if not scanned:
                    scanned = True
                    settled = not self._origin_residue(handle) or self._rewrite_origin()
                elif not settled:  # a reader held the rewrite's checkpoint back: once more
                    settled = self._origin.physical.checkpoint()  # type: ignore[attr-defined]
                done = settled
            if done or time.monotonic() >= deadline:
                return st
            if not self._compactor.running:
                time.sleep(0.005)  # this loop is the compactor: run it again soon
                continue
            self._compactor.wake()
            # Sleep until the compactor finishes a round (it moves the paths along), not in a
            # busy poll: many waiters on a served store would otherwise spin on status reads.
            # A read's own catch-up can also move a path, hence the bound.
            self._compactor.after_round(seen, min(_WAIT_POLL_S, max(0.0, deadline - time.monotonic())))

    def _origin_residue(self, handle: str) -> bool:
        """Whether the origin's files still hold fingerprints of this erasure (judged as
        ``verify`` judges them); False once its bytes were proven gone."""
        physical = getattr(self._origin, "physical", None)
        evidence = self._origin.evidence(handle) if physical is not None else None
        if evidence is None or evidence["fingerprints"] is None:
            return False
        return self._verifier.origin_residue(evidence["fingerprints"], handle)

    def _rewrite_origin(self) -> bool:
        """Rewrite the origin's files whole; False if a reader kept its checkpoint from
        completing (the caller tries again)."""
        self._check_open()
        physical = self._origin.physical  # type: ignore[attr-defined]
        return bool(physical.rewrite())

    def verify(self, handle: str, *, tenant: str | None = None) -> Verification:
        """Climb the evidence ladder for this erasure with recorded checks (DESIGN §3):
        probes through every read path for ``unreadable``; the artifacts' erased epochs and
        a scan of every file's bytes for ``erased``. The outcome is appended to the ledger;
        the receipt's level only moves up. Call ``wait`` first to give the compactor time
        to erase the bytes; until then the result says which check failed and where.
        Reads and writes go on while it runs."""
        row = self._receipt_row(handle, tenant)
        tenant_id = row["tenant_h"]  # the receipt's keyed tenant hash is the tenant's id
        evidence = self._origin.evidence(handle)
        row = backups_now(row, tenant_id, self._origin)
        proof = self._origin.erased_proof(handle)
        level, checks, scanned, files = self._verifier.verify(handle, row, evidence, tenant_id, proof)
        ladder = ("intent", "unreadable", "erased")
        receipt_level = max(row["body"]["level"], level, key=ladder.index)
        discard = level == "erased" and evidence is not None and evidence["fingerprints"] is not None
        now = self._clock()
        body = {
            "level": level,
            "receipt_level": receipt_level,
            "epoch": row["epoch"],
            "checks": [c.to_dict() for c in checks],
            "scanned_bytes": scanned,
            "fingerprints_discarded": discard or (evidence is not None and evidence["fingerprints"] is None),
        }
        self._check_open()
        seq, digest = self._origin.record_verification(handle, body, receipt_level, discard, now)
        return Verification(
            handle=handle,
            epoch=row["epoch"],
            level=level,
            receipt_level=receipt_level,
            checks=tuple(checks),
            verified_at=now,
            scanned_bytes=scanned,
            scanned_files=tuple(files),
            fingerprints_discarded=body["fingerprints_discarded"],
            ledger_seq=seq,
            ledger_hash=digest,
        )

    def certificate(self, handle: str, *, tenant: str | None = None) -> dict:
        """A deletion certificate for this erasure: what was asked, when, the epoch, what was
        retained and why, and every verification with each check's outcome and time, with
        the ledger entries behind them. Keyed hashes only. Render it with
        :func:`efface.erasure.certificate.to_html`."""
        from .erasure import certificate

        row = self._receipt_row(handle, tenant)
        return certificate.build(row, self._origin.ledger(), self._hash("store", "id"), self._clock())

    def receipts(self, tenant: str | None = None) -> list[dict]:
        """Every stored receipt (hashed form), oldest first, optionally for one tenant."""
        self._check_open()
        th = self._tenant(tenant) if tenant is not None else None
        return self._origin.receipts(th)

    # -- ledger ------------------------------------------------------------------------------
    def ledger(self, tenant: str | None = None) -> list[dict]:
        """The erasure ledger, oldest first. It holds keyed hashes, never personal data.
        With ``tenant``, only the entries about that tenant's erasures and decisions (what a
        server shows a tenant's key); the chain can only be checked whole (``verify_ledger``)."""
        self._check_open()
        entries = self._origin.ledger()
        if tenant is None:
            return entries
        th = self._hash("tenant", v.name(tenant, "tenant"))
        handles = {r["handle"] for r in self._origin.receipts(th)}
        return [e for e in entries if e["handle"] in handles or f'"tenant_h":"{th}"' in e["body"]]

    def verify_ledger(self) -> ChainCheck:
        """Recompute the ledger's hash chain; any gap or altered entry is reported."""
        return verify_chain(self.ledger())

    # -- compaction ----------------------------------------------------------------------------
    def compact(self) -> int:
        """Bring every derived artifact up to the newest epoch and save it. Returns that epoch."""
        self._check_open()
        return self._compactor.run(persist=True)

    # -- introspection ---------------------------------------------------------------------------
    def stats(self, *, tenant: str | None = None) -> dict:
        """Counts and path states; with ``tenant``, also the record vectors its ANN index holds
        (erased ones included until the index absorbs their erasure)."""
        self._check_open()
        epoch = self._origin.current_epoch()
        out = {
            "records": self._origin.count_records(),
            "epoch": epoch,
            "embedder": self.embedder.name,
            "paths": {n: p.to_dict() for n, p in self._propagation.paths(epoch).items()},
        }
        if tenant is not None:
            out["ann_vectors"] = self._ann.size(self._tenant(tenant))
        return out

    # -- backups with crypto-shredding -----------------------------------------------------------
    def _subject_h(self, tenant: str) -> Callable[[str], str]:
        return lambda subject: self._hash("subject", tenant, subject)

    def _backup_context(self) -> BackupContext:
        return BackupContext(
            origin=self._origin,
            mutate=self._mutate,
            hasher=self._hash,
            secret=lambda label: backup_format.derive_key(self._secret, label),
            embedder_name=self.embedder.name,
            derivations=self._derivations,
            expire_due=lambda: self._expire_due(self._clock()),
        )

    def backup(self, dest: str | os.PathLike) -> backup_format.BackupResult:
        """Write a backup of every live record to the file ``dest``, each record encrypted so
        that only the data keys of the subjects holding claims on it (kept in this store's
        origin, nowhere else) can open it. A later forget that leaves a subject with no claim
        destroys its key, and so its part of every backup. The file appears whole or not at
        all; the backup is recorded in the origin and the ledger. Writes wait for it; reads
        do not."""
        self._check_open()
        return write_backup(self._backup_context(), dest)

    def restore(self, src: str | os.PathLike) -> backup_format.RestoreResult:
        """Bring back the records of a backup this store made that are missing from it, after
        replaying the erasure ledger: nothing erased, released or expired since the backup
        comes back, and a record whose subjects' keys were destroyed cannot be decrypted at
        all. Records already live are left as they are. The whole file is authenticated
        before anything is written; a failure restores nothing."""
        # The store lock is held throughout, so no erasure can commit between the ledger
        # replay and the records it lets back in.
        with self._lock:
            self._check_open()
            return restore_backup(self._backup_context(), src)


def _memory(rec: Any, claims: Iterable[Any], tenant: str) -> Memory:
    return Memory(
        key=rec.key,
        text=rec.text,
        tenant=tenant,  # the origin keeps the tenant's id, not its name
        metadata=json.loads(rec.metadata),
        sources=tuple(json.loads(rec.sources)),
        claims=tuple(Claim(c.subject, c.purpose, c.basis, c.expires_at) for c in claims),
        updated_at=rec.updated_at,
    )
