"""The store: the public facade of docs/concepts.md §7 over one origin and its read paths.

``Store`` validates its arguments and delegates: the write side's transaction bodies to
:mod:`efface.writing`; the read side's purpose check, memories and read-your-writes to
:mod:`efface.reading`, hybrid recall to :mod:`efface.paths.recall`; the forget side
(forget, expiry, receipts, status, wait, verify) to :class:`efface.forgetting.Erasures`,
over the release rules, receipts, propagation, evidence and verification of
:mod:`efface.erasure`; absorption and physical erasure to the
:class:`~efface.erasure.compactor.Compactor`, derived records to :mod:`efface.derivations`,
backups to :mod:`efface.backups`; all of them built over its origin by one composition root,
:func:`efface.assembly.assemble`. It keeps one thing itself: the chokepoint
:meth:`Store._mutate` (group commit: :mod:`efface.chokepoint`).

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

Tenant names are personal data (docs/concepts.md §8: per-user tenants are often named by an e-mail).
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

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import numpy as np

from . import compiled, forgetting, reading, vectors, writing
from . import validate as v
from .assembly import assemble
from .backups import format as backup_format
from .backups.backup import write_backup
from .backups.context import BackupContext
from .backups.restore import restore_backup
from .capable import capable
from .chokepoint import Chokepoint, Job, StoreLock, lead
from .derivations import quarantine, validate_policy
from .embed import Embedder, QueryEmbedder
from .erasure.ledger import ChainCheck, verify_chain
from .erasure.propagation import ERASE_BOUND_S, SETTLED_STATES
from .errors import EffaceError, InvalidInput, typed_calls
from .forgetting import Erasures
from .model import Hit, Memory, QuarantineItem, Receipt, Status, Verification
from .origin.base import Origin
from .paths.base import Query
from .paths.recall import hybrid
from .reading import absorb_new_content, known_purpose, quarantined

__all__ = ["ERASE_BOUND_S", "SETTLED_STATES", "Store"]


@typed_calls
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
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))  # as efface.open does
        self._origin = origin
        self._on_close = on_close
        self._clock = clock
        self._lock = StoreLock()
        """Orders mutations (the chokepoint) and the in-memory state that follows them."""
        self._closed = False
        self._closing = threading.Lock()
        """One close() at a time: a second caller waits for the first, then finds it closed."""
        self._chokepoint = Chokepoint(self._lock)
        parts = assemble(
            origin,
            self.path,
            embedder,
            clock=clock,
            expire=self._sweep_quietly,
            compact_interval=compact_interval,
            ann_max_propagation_s=ann_max_propagation_s,
            erase_bound_s=erase_bound_s,
        )
        self._secret, self._hash, self.embedder, self._lexical = parts.secret, parts.hash, parts.embedder, parts.lexical
        self._derivations, self._fts, self._ann, self._paths = parts.derivations, parts.fts, parts.ann, parts.paths
        self._propagation, self._evidence, self._verifier = parts.propagation, parts.evidence, parts.verifier
        self._releaser, self._compactor = parts.releaser, parts.compactor
        self.erase_bound_s = erase_bound_s
        self._erasures = Erasures(
            origin,
            self._mutate,
            self._releaser,
            self._derivations,
            self._propagation,
            self._verifier,
            self._compactor,
            clock,
            self._check_open,
            self._tenant,
        )
        if background:
            self._ann.yielding = True  # recall searches the un-absorbed delta exactly meanwhile
            self._compactor.start()
        # a large store's erasures and recalls use compiled loops at once (efface.compiled); a growing one, later
        compiled.warm(self.path)
        self._grows = self._origin.physical.growing() if self._origin.physical is not None else ()

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
        """The leader's part, under the store lock (:func:`efface.chokepoint.lead`): due
        expiries are honoured before the group runs."""

        def prepare(sweep: bool) -> None:
            self._check_open()
            if sweep:
                self._erasures.expire_due(self._clock())

        lead(jobs, self._origin, self._paths, self._ann, self._compactor, prepare, self._clock)

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
        vecs = writing.vectors(self.embedder, prepared, embeddings)
        body = writing.records_body(
            self._releaser, self._derivations, self._subject_h(tenant), tenant, name, prepared, vecs, replace
        )
        # Only a replacing write can erase a subject; the others leave the group open (chokepoint).
        epoch, outcome = self._mutate("write", tenant, body, after=self._erasures.drop_mentions if replace else None)
        if outcome is not None:
            self._erasures.notify(self._erasures.receipt(epoch, outcome, name))
        compiled.warm(self.path, self._grows)  # a store grown past the size at which recall's loops pay
        return epoch

    def retain(self, key: str, *, tenant: str, subject: str, purpose: str, basis: str, ttl: Any = None) -> int:
        """Add a claim to an existing record (a second reason to keep it). Returns the epoch."""
        name = v.name(tenant, "tenant")
        tenant, key = self._tenant(name), v.key(key)
        claim = v.name(subject, "subject"), v.purpose(purpose), v.basis(basis), v.ttl(ttl)
        epoch, _ = self._mutate("retain", tenant, writing.claim_body(self._subject_h(tenant), tenant, name, key, claim))
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
        ids = writing.identifiers(identifiers)
        body = writing.subject_body(self._derivations, tenant, name, subject, ids)
        epoch, _ = self._mutate(
            "subject", tenant, body, after=lambda _: self._derivations.mentions.set_subject(tenant, subject, ids)
        )
        return epoch

    # -- reads -----------------------------------------------------------------------------
    def read(self, key: str, *, tenant: str, purpose: str) -> Memory | None:
        """The record under ``key``, if it has a live claim for ``purpose``; else None."""
        name = v.name(tenant, "tenant")
        tenant, key, purpose = self._tenant(name), v.key(key), v.purpose(purpose)
        self._check_open()
        return reading.read(self._origin, tenant, name, key, purpose, self._clock())

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
        tenant, purpose, listing = (
            self._tenant(name),
            v.purpose(purpose),
            reading.listing(prefix, subject, after, limit),
        )
        self._check_open()
        return reading.scan(self._origin, tenant, name, purpose, listing, self._clock())

    def recall(
        self,
        query: str,
        *,
        tenant: str,
        purpose: str,
        subject: str | None = None,
        k: int = 10,
        after: Any = None,
        before: Any = None,
        said_by: str | None = None,
        window: int = 0,
    ) -> list[Hit]:
        """Hybrid recall: ANN over embeddings and full text over words, fused by score (paths/recall.py).
        Every candidate is resolved against the origin's live claims for ``tenant`` and
        ``purpose`` (and ``subject`` if given) before its text, read from the origin, is
        returned. ``after``/``before`` (unix seconds, ISO 8601 or a datetime) and ``said_by``
        keep only records whose metadata ``at``/``speaker`` match; ``window=n`` gives each
        hit the ``n`` turns before and after it in its ``session`` (docs/conversations.md)."""
        tenant, purpose, query, k = self._tenant(tenant), v.purpose(purpose), v.query(query), v.k(k)
        where, window = v.where(after, before, said_by), v.window(window)
        if subject is not None:
            subject = v.name(subject, "subject")
        self._check_open()
        known_purpose(self._origin, tenant, purpose)

        def vector() -> np.ndarray:  # called while the full-text leg runs beside it
            e = self.embedder  # one that encodes queries its own way: the ONNX MiniLM's int8 copy
            got = cast(QueryEmbedder, e).embed_query(query) if capable(e, QueryEmbedder) else e.embed([query])[0]
            self._check_open()
            absorb_new_content(self._origin, self._paths, lambda: self._compactor.running)
            return got

        q = Query(tenant, query, np.empty(0, dtype=np.float32), purpose, subject, self._clock(), where)
        return hybrid(self._origin, self._paths, q, k, lexical=self._lexical, vector=vector, window=window)

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
        selector = forgetting.selector(self._tenant(name), subject, purpose, prefix, key, everything)
        self._check_open()
        if selector.purpose is not None:
            known_purpose(self._origin, selector.tenant, selector.purpose)
        return self._erasures.forget(selector, name)

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
        self._check_open()
        if not callable(callback):
            raise InvalidInput("callback must be callable")
        self._erasures.on_quarantine.append(callback)

    def quarantined(self, *, tenant: str) -> list[QuarantineItem]:
        """Records held back from reads in ``tenant``, with the sources that survive."""
        tenant = self._tenant(tenant)
        self._check_open()
        return quarantined(self._origin, tenant)

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
        vec = vectors.stored_one(self.embedder.embed([text])[0])

        body = quarantine.rederive_body(self._derivations, self._hash, tenant, key, text, vec, new_sources, meta)
        return self._mutate("rederive", tenant, body)[0]

    def release(self, key: str, *, tenant: str, reason: str) -> int:
        """Lift a quarantine without changing the record (a policy decision: ``reason`` is
        kept with the record and erased with it; the ledger records its keyed hash).
        Returns the epoch."""
        tenant, key = self._tenant(tenant), v.key(key)
        v.reason(reason)  # kept with the record, erased with it; the ledger records its hash

        body = quarantine.release_body(self._hash, tenant, key, reason)
        return self._mutate("release", tenant, body)[0]

    # -- expiry ----------------------------------------------------------------------------
    def _sweep_quietly(self) -> None:
        with self._lock:
            if not self._closed:
                self._erasures.expire_due(self._clock())

    def sweep(self) -> list[Receipt]:
        """Expire every claim whose TTL has passed now; returns the expiry receipts.
        The background compactor does this on its own; call it to force it."""
        with self._lock:
            self._check_open()
            return self._erasures.expire_due(self._clock())

    # -- receipts, status, wait, verify ------------------------------------------------------
    def status(self, handle: str, *, tenant: str | None = None) -> Status:
        """Where an erasure stands on every read path, now. Naming ``tenant`` also checks
        that the receipt belongs to it (servers pass the caller's tenant)."""
        return self._erasures.status(handle, tenant)

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
        return self._erasures.wait(handle, tenant, until, deadline)

    def verify(self, handle: str, *, tenant: str | None = None) -> Verification:
        """Climb the evidence ladder for this erasure with recorded checks (docs/concepts.md §3):
        probes through every read path for ``unreadable``; the artifacts' erased epochs and
        a scan of every file's bytes for ``erased``. The outcome is appended to the ledger;
        the receipt's level only moves up. Call ``wait`` first to give the compactor time
        to erase the bytes; until then the result says which check failed and where.
        Reads and writes go on while it runs."""
        return self._erasures.verify(handle, tenant)

    def certificate(self, handle: str, *, tenant: str | None = None) -> dict:
        """A deletion certificate for this erasure: what was asked, when, the epoch, what was
        retained and why, and every verification with each check's outcome and time, with
        the ledger entries behind them. Keyed hashes only. Render it with
        :func:`efface.erasure.certificate.to_html`."""
        from .erasure import certificate

        row = self._erasures.row(handle, tenant)
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
        if tenant is None:
            return self._origin.ledger()
        return forgetting.tenant_ledger(self._origin, self._tenant(tenant))

    def verify_ledger(self) -> ChainCheck:
        """Recompute the ledger's hash chain; any gap or altered entry is reported."""
        return verify_chain(self.ledger())

    # -- compaction ----------------------------------------------------------------------------
    def compact(self) -> int:
        """Bring every derived artifact up to the newest epoch, save it, merge the word index. Returns that epoch."""
        self._check_open()
        epoch = self._compactor.run(persist=True, merge=True)
        compiled.warm(self.path)
        return epoch

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
            expire_due=lambda: self._erasures.expire_due(self._clock()),
        )

    def backup(self, dest: str | os.PathLike, *, overwrite: bool = False) -> backup_format.BackupResult:
        """Write a backup of every live record to the file ``dest``, each record encrypted so
        that only the data keys of the subjects holding claims on it (kept in this store's
        origin, nowhere else) can open it. A later forget that leaves a subject with no claim
        destroys its key, and so its part of every backup. The file appears whole or not at
        all; the backup is recorded in the origin and the ledger. An existing ``dest`` is
        refused (:class:`~efface.errors.InvalidInput`, nothing written) unless ``overwrite=True``,
        which replaces it. Writes wait for it; reads do not."""
        self._check_open()
        return write_backup(self._backup_context(), dest, overwrite=overwrite)

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
