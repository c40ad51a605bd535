"""The forget side of the store, below its facade: a forget's selector; releasing the
claims a forget or a TTL expiry names, through the store's chokepoint; then what follows an
erasure's commit: the receipt as returned, where it stands now, waiting for it to settle, and
verifying it (docs/concepts.md §3).

The release rules themselves are :mod:`efface.erasure.release`'s, the path states
:mod:`~efface.erasure.propagation`'s, the checks of the ladder :mod:`~efface.erasure.verify`'s;
:class:`Erasures` puts them together for one store, as ``Store`` calls them once it has
checked the caller's arguments.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from . import validate as v
from .backups.coverage import backups_now, with_backups
from .derivations import Derivations
from .erasure import copies as copy_states
from .erasure.compactor import Compactor
from .erasure.propagation import Propagation
from .erasure.receipts import Outcome, to_receipt
from .erasure.release import Releaser
from .erasure.verify import Verifier
from .errors import InvalidInput, NotFound, ScopeError
from .model import CopyState, PathState, QuarantineItem, Receipt, Selector, Status, Verification
from .origin.base import Origin
from .origin.capabilities import CopyChecks
from .reading import quarantined

log = logging.getLogger("efface")
WAIT_POLL_S = 0.05
"""The longest ``wait`` sleeps between looks at the status when no compactor round ends."""
_LADDER = ("intent", "unreadable", "erased")


def selector(tenant: str, subject: Any, purpose: Any, prefix: Any, key: Any, everything: Any) -> Selector:
    """The selector of ``forget(tenant=..., ...)`` (``tenant`` is the tenant's id), each
    field checked; it must name something besides the tenant, or be ``everything``."""
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
    return Selector(tenant, subject, purpose, prefix, key, everything)


def tenant_ledger(origin: Origin, tenant: str) -> list[dict]:
    """The ledger entries about one tenant (its id): its erasures and its decisions."""
    entries = origin.ledger()
    handles = {r["handle"] for r in origin.receipts(tenant)}
    return [e for e in entries if e["handle"] in handles or f'"tenant_h":"{tenant}"' in e["body"]]


@dataclasses.dataclass(frozen=True)
class Erasures:
    """One store's erasures: forgets and expiries, their receipts, status, wait and verify."""

    origin: Origin
    mutate: Callable[..., tuple[int, Any]]
    """The store's chokepoint (:meth:`efface.store.Store._mutate`)."""
    releaser: Releaser
    derivations: Derivations
    propagation: Propagation
    verifier: Verifier
    compactor: Compactor
    clock: Callable[[], float]
    check_open: Callable[[], None]
    """Raises once the store is closed."""
    tenant_id: Callable[[Any], str]
    """A tenant's name -> its id (:meth:`efface.store.Store._tenant`)."""
    on_quarantine: list[Callable[[Receipt, list[QuarantineItem]], None]] = dataclasses.field(default_factory=list)
    """Told after an erasure quarantines derived records (``Store.on_quarantine``)."""

    # -- releasing claims --------------------------------------------------------------------
    def forget(self, sel: Selector, name: str) -> Receipt:
        """Release what ``sel`` matches; the receipt once the tombstones are durable."""
        made: dict[str, Any] = {}

        def body(tx, now):
            matched = tx.match_claims(sel.tenant, sel.subject, sel.purpose, sel.prefix, sel.key)
            outcome = self.releaser.release(tx, sel, "forget", matched, now)
            made["epoch"] = tx.epoch
            return outcome, outcome.puts, outcome.drops, outcome.texts

        def after(outcome):
            # Under the store lock, right after the commit: the receipt states the paths as
            # they are at acknowledgement, before any later mutation.
            self.drop_mentions(outcome)
            made["receipt"] = self.receipt(made["epoch"], outcome, name)

        # Not under the store lock: the forget queues at the chokepoint with the writes, and
        # commits in their group (it closes it: its after hook changes the mention matcher).
        self.mutate("forget", sel.tenant, body, after=after)
        self.notify(made["receipt"])
        return made["receipt"]

    def expire_due(self, now: float) -> list[Receipt]:
        """Release every claim whose TTL has passed: one erasure (and receipt) per tenant."""
        receipts = []
        while (tenant := self.origin.due_tenant(now)) is not None:
            name = self.origin.tenant_name(tenant)  # read before the expiry may erase it

            def body(tx, _now, tenant=tenant):
                matched = [c for t, c in tx.due_claims(now) if t == tenant]
                outcome = self.releaser.release(tx, Selector(tenant), "expire", matched, now)
                return outcome, outcome.puts, outcome.drops, outcome.texts

            epoch, outcome = self.mutate("expire", tenant, body, sweep=False, after=self.drop_mentions)
            receipts.append(self.receipt(epoch, outcome, name))
        return receipts

    def drop_mentions(self, outcome: Outcome | None) -> None:
        """After an erasure commits: the mention matcher forgets the subjects it erased
        (None: a replacing write that replaced nothing)."""
        if outcome is None:
            return
        for subject in outcome.subjects_erased:
            self.derivations.mentions.drop_subject(outcome.selector.tenant, subject)

    # -- after the commit --------------------------------------------------------------------
    def notify(self, receipt: Receipt) -> None:
        """Tell the on_quarantine callbacks (``receipt.selector.tenant`` is the caller's name)."""
        if receipt.quarantined and self.on_quarantine:
            tenant = self.tenant_id(receipt.selector.tenant)
            self.check_open()
            items = [i for i in quarantined(self.origin, tenant) if i.handle == receipt.handle]
            for callback in list(self.on_quarantine):
                try:
                    callback(receipt, items)
                except Exception as exc:  # the erasure is committed; a failing callback must not hide that
                    # Its type only: its message and traceback could hold the keys it was given.
                    log.error("on_quarantine callback failed (%s); the forget itself is committed", type(exc).__name__)

    def receipt(self, epoch: int, out: Outcome, name: str | None) -> Receipt:
        """The receipt returned to the caller, its selector naming the tenant as the caller
        did (``name``; the tenant's id if the name is unknown)."""
        paths = with_backups(self.propagation.paths(epoch), out.backups, epoch, self.origin.erased_epoch())
        copies = copy_states.at_ack(copy_states.Names(*self.verifier.copy_names()), out.backups)
        receipt = to_receipt(epoch, out, paths, self.propagation.max_propagation(), copies)
        if name is None:
            return receipt
        return dataclasses.replace(receipt, selector=dataclasses.replace(receipt.selector, tenant=name))

    def row(self, handle: str, tenant: str | None) -> dict:
        """The stored receipt for ``handle`` (checked against ``tenant`` when named)."""
        handle = v.handle(handle)
        self.check_open()
        row = self.origin.receipt(handle)
        if row is None or (tenant is not None and row["tenant_h"] != self.tenant_id(tenant)):
            raise NotFound("no receipt with that handle in this store (for this tenant)")
        return row

    def status(self, handle: str, tenant: str | None) -> Status:
        """Where the erasure stands on every read path, now (``Store.status``)."""
        row = self.row(handle, tenant)
        epoch = row["epoch"]
        paths = with_backups(
            self.propagation.paths(epoch), row["body"].get("backups"), epoch, self.origin.erased_epoch()
        )
        return self.propagation.status(row, paths, self._copies(row, paths))

    def _copies(self, row: dict, paths: dict[str, PathState]) -> dict[str, CopyState]:
        """Every copy's state for a status: as the last verification at the receipt's level
        found it where that still holds, else ``pending`` or ``unchecked``
        (:func:`efface.erasure.copies.now`)."""
        body = row["body"]
        verified = body.get("verified")
        proven = isinstance(verified, dict) and verified.get("level") == "erased"
        if body["level"] == "erased" and proven:  # the proof's copies are shown: the origin is not asked
            found = [k for k in verified.get("copies", {}) if k not in (self.verifier.local_copy(), "backups")]
            names = copy_states.Names(self.verifier.local_copy(), tuple(sorted(found)))
        else:
            names = copy_states.Names(*self.verifier.copy_names())
        proof = self.origin.erased_proof(row["handle"]) if body["level"] == "erased" and not proven else None
        erased = {n: p.erased_epoch for n, p in paths.items()}
        return copy_states.now(body["level"], names, erased, row["epoch"], body.get("backups"), verified, proof)

    def wait(self, handle: str, tenant: str | None, until: str, deadline: float) -> Status:
        """``Store.wait``'s loop, until ``until`` is reached or the ``time.monotonic()``
        deadline passes."""
        scanned = settled = False
        while True:
            seen = self.compactor.rounds
            st = self.status(handle, tenant)
            if not self.compactor.running:
                # No compactor thread: do its work here.
                self.compactor.run(persist=until == "erased" and not st.erased, whole=False)
                st = self.status(handle, tenant)
            if until == "erased" and not scanned and self.propagation.origin_files_erased(st.epoch):
                # The origin's files are done: scan them now, while the compactor may still
                # be saving the other paths' files (the two overlap on a big store).
                scanned = True
                settled = not self._origin_residue(handle) or self._rewrite_origin()
                st = self.status(handle, tenant)
            elif until == "erased" and scanned and not settled and st.erased:
                # a reader held the rewrite's checkpoint back: once more
                physical = self.origin.physical
                settled = physical is None or physical.checkpoint()
            done = st.erased if until == "erased" else st.settled
            if done and until == "erased":
                if not scanned:  # erased without the origin's files done (no such path today)
                    scanned = True
                    settled = not self._origin_residue(handle) or self._rewrite_origin()
                done = settled
            if done or time.monotonic() >= deadline:
                return st
            if not self.compactor.running:
                time.sleep(0.005)  # this loop is the compactor: run it again soon
                continue
            self.compactor.wake(urgent=until == "erased")  # a waiter: no batching delay
            # Sleep until the compactor finishes a round (it moves the paths along), not in a
            # busy poll: many waiters on a served store would otherwise spin on status reads.
            # A read's own catch-up can also move a path, hence the bound.
            self.compactor.after_round(seen, min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))

    def _origin_residue(self, handle: str) -> bool:
        """Whether the origin's files still hold fingerprints of this erasure (judged as
        ``verify`` judges them); False once its bytes were proven gone."""
        physical = self.origin.physical
        evidence = self.origin.evidence(handle) if physical is not None else None
        if evidence is None or evidence["fingerprints"] is None:
            return False
        return self.verifier.origin_residue(evidence["fingerprints"], handle)

    def _rewrite_origin(self) -> bool:
        """Rewrite the origin's files whole; False if a reader kept its checkpoint from
        completing (the caller tries again)."""
        self.check_open()
        physical = self.origin.physical
        return physical is None or bool(physical.rewrite())

    def verify(self, handle: str, tenant: str | None) -> Verification:
        """Run the ladder's checks for the erasure and record the outcome in the ledger
        (``Store.verify``)."""
        row = self.row(handle, tenant)
        if isinstance(self.origin, CopyChecks):  # one verification of a handle at a time, across processes
            with self.origin.verifying(handle):
                return self._verify(handle, row)
        return self._verify(handle, row)

    def _verify(self, handle: str, row: dict) -> Verification:
        tenant_id = row["tenant_h"]  # the receipt's keyed tenant hash is the tenant's id
        evidence = self.origin.evidence(handle)
        row = backups_now(row, tenant_id, self.origin)
        proof = self.origin.erased_proof(handle)
        erased_before = self.propagation.erased_epochs()  # before the checks: what they may have seen
        level, checks, scanned, files, copies = self.verifier.verify(handle, row, evidence, tenant_id, proof)
        receipt_level = max(row["body"]["level"], level, key=_LADDER.index)
        discard = level == "erased" and evidence is not None and evidence["fingerprints"] is not None
        now = self.clock()
        body = {
            "level": level,
            "receipt_level": receipt_level,
            "epoch": row["epoch"],
            "checks": [c.to_dict() for c in checks],
            "scanned_bytes": scanned,
            "fingerprints_discarded": discard or (evidence is not None and evidence["fingerprints"] is None),
            "copies": {k: v.to_dict() for k, v in copies.items()},
        }
        verified = None
        if level == receipt_level:  # at the receipt's level: its status shows these copies
            local = self.verifier.local_copy()
            names = copy_states.Names(local, tuple(k for k in copies if k not in (local, "backups")))
            reached = copy_states.reached(names, erased_before, row["epoch"])
            verified = copy_states.recorded(level, now, copies, reached)
        self.check_open()
        seq, digest = self.origin.record_verification(handle, body, receipt_level, discard, now, verified)
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
            copies=copies,
        )
