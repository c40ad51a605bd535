"""Backup coverage: what protects an erasure's content in the backups taken before it.

Decided in the erasure's own transaction and kept in its receipt:

- ``shredded``: every subject whose claim it released lost its data key there, so its part
  of every older backup can no longer be decrypted;
- ``ledger-replay``: the content can still be decrypted with keys that live (a subject kept
  other claims, or a derived record was redacted or quarantined), and only the ledger replay
  every restore runs first keeps it out;
- ``absorbed``: nothing was released, so no backup holds anything of this erasure;
- ``None``: there is no backup at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..model import Derivation, PathState, Released

if TYPE_CHECKING:  # pragma: no cover
    from ..origin.base import Origin, Tx


def coverage(
    tx: Tx,
    tenant: str,
    released: Sequence[Released],
    erased: Sequence[str],
    derivations: Sequence[Derivation],
    shredded: Sequence[str],
    hasher: Callable[..., str],
) -> str | None:
    """The coverage of one erasure (see the module docstring), decided in its transaction.
    ``shredded``: the subjects whose data keys it destroyed. An older backup can hold an
    erased record under a key that still lives when a subject's claim on it went earlier but
    the subject kept others: ``backup_exposure`` remembers those, as keyed hashes, until the
    subject's key goes."""
    if tx.backup_floor() is None:
        return None
    gone = set(shredded)
    tx.note_exposure(
        tenant,
        {
            (hasher("key", tenant, r.key), hasher("subject", tenant, r.subject))
            for r in released
            if r.subject not in gone
        },
    )
    tx.drop_exposure(tenant, [hasher("subject", tenant, s) for s in gone])
    if not released:
        return "absorbed"
    # A derived record quarantined or redacted here is in older backups, unchanged, under
    # its own subjects' keys (which live): only the ledger replay keeps it out.
    if any(r.subject not in gone for r in released) or any(
        d.action in ("redacted", "quarantined") for d in derivations
    ):
        return "ledger-replay"
    if tx.exposed(tenant, sorted({hasher("key", tenant, k) for k in erased})):
        return "ledger-replay"
    return "shredded"


def with_backups(
    paths: dict[str, PathState], state: str | None, epoch: int, checkpointed_epoch: int
) -> dict[str, PathState]:
    """Add the ``backups`` path to a receipt's or a status's paths, when there are backups."""
    if state is not None:
        # Decided in the erasure's transaction (keys destroyed there, or the ledger entry
        # every restore replays committed there): nothing is left to propagate.
        # Physically erased once the destroyed keys' bytes are out of the WAL (checkpoint);
        # under ledger-replay never: the backups can still be decrypted with living keys.
        erased = checkpointed_epoch if state in ("shredded", "absorbed") else 0
        paths["backups"] = PathState(state, epoch, 0.0, True, erased)
    return paths


def backups_now(row: dict[str, Any], tenant: str | None, origin: Origin) -> dict[str, Any]:
    """A ``ledger-replay`` erasure becomes ``shredded`` once every key that could still open
    its part of older backups is gone (its subjects' later erasures destroyed them)."""
    body = row["body"]
    if body.get("backups") != "ledger-replay" or tenant is None:
        return row
    if any(d["action"] in ("redacted", "quarantined") for d in body.get("derivations", [])):
        return row
    with origin.snapshot() as r:
        if r.live_subject_hashes(tenant, [x["subject_h"] for x in body["released"]]):
            return row
        if r.exposed(tenant, body["erased"]):
            return row
    return {**row, "body": {**body, "backups": "shredded"}}
