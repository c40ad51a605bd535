"""Every copy's state on a receipt and a status (docs/evidence-ladder.md, "Copies").

A verification checks each copy of the store's data (:meth:`efface.erasure.verify.Verifier.verify`).
Before one does, a receipt and a status still name every copy, in a state that claims
nothing: ``pending`` while the work that removes the erasure's bytes from it has not run
past the erasure, ``unchecked`` once it has (:data:`efface.model.NOT_YET_STATES`). The
backups' state is decided in the erasure's own transaction (:mod:`efface.backups.coverage`),
so it is known at acknowledgement.

A verification at the receipt's level leaves on the stored receipt what it found
(:func:`recorded`: the copies, and which of them the work had already reached); a status
shows a copy as that verification found it while that still holds: a final state
(``erased``, ``shredded``), a copy the work had reached, or one it has not reached since.
Otherwise the copy is ``pending`` or ``unchecked`` again. A status whose level is ``erased``
shows the copies of the verification that proved it, so every one is ``erased`` or
``shredded`` (:func:`efface.model.allows_erased`), on every origin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import FINAL_COPY_STATES, CopyState
from .verify import backups_check, backups_state

PENDING = (
    "the bytes may remain: the compactor's work that removes them has not run past this erasure yet; "
    "wait(handle) runs it"
)
UNCHECKED = (
    "the compactor's work that removes the bytes ran past this erasure; no verification has checked "
    "this copy since: verify(handle)"
)


@dataclass(frozen=True)
class Names:
    """The copies of one store's data: the store's own directory (``store``; ``cache`` where
    the origin's data lives elsewhere) and the copies an origin holds elsewhere (a database
    server's files, its WAL, each replica)."""

    local: str
    server: tuple[str, ...] = ()


def reached(names: Names, erased_epochs: Mapping[str, int], epoch: int) -> dict[str, bool]:
    """Per copy, whether the work that removes an erasure's bytes has run past ``epoch`` on
    it: the store's directory once every path's files (the origin's too, where they live
    there) are erased past it, a server's copy once the origin's storage is (``erased_epochs``:
    per path, ``origin`` included, the newest epoch whose erased bytes are gone)."""
    server = bool(names.server)
    local = all(e >= epoch for n, e in erased_epochs.items() if n != "backups" and not (server and n == "origin"))
    out = {names.local: local}
    for name in names.server:
        out[name] = erased_epochs.get("origin", 0) >= epoch
    return out


def backups(state: str | None) -> CopyState | None:
    """The backups' copy as the erasure's transaction decided it (None: no backup)."""
    check = backups_check(state)
    return None if check is None else backups_state(state, check)


def at_ack(names: Names, backups_coverage: str | None) -> dict[str, CopyState]:
    """Every copy's state on a receipt, at acknowledgement: ``pending``, the backups as decided."""
    out = {name: CopyState("pending", PENDING) for name in (names.local, *names.server)}
    kept = backups(backups_coverage)
    if kept is not None:
        out["backups"] = kept
    return out


def recorded(level: str, at: float, copies: Mapping[str, CopyState], reached_now: Mapping[str, bool]) -> dict:
    """What a verification at the receipt's level leaves on the stored receipt (its
    ``verified`` entry): its level and time, each copy's state, and the copies the work that
    removes the bytes had reached when it ran."""
    return {
        "level": level,
        "at": at,
        "copies": {k: v.to_dict() for k, v in copies.items()},
        "reached": sorted(k for k, done in reached_now.items() if done),
    }


def decoded(copies: Mapping[str, Any]) -> dict[str, CopyState]:
    """Copies as JSON keeps them -> :class:`CopyState` (unknown keys of a newer efface ignored)."""
    return {
        name: CopyState(str(c["state"]), str(c.get("reason", "")), c.get("checked_at"))
        for name, c in copies.items()
        if isinstance(c, Mapping) and "state" in c
    }


def now(
    level: str,
    names: Names,
    erased_epochs: Mapping[str, int],
    epoch: int,
    backups_coverage: str | None,
    verified: Mapping[str, Any] | None,
    proof: Mapping[str, Any] | None = None,
) -> dict[str, CopyState]:
    """Every copy's state on a status of the erasure at ``epoch`` whose receipt is at
    ``level``. ``verified``: the stored receipt's ``verified`` entry (None: no verification
    recorded one); ``proof``: for a receipt proven ``erased`` before verifications recorded
    it there, the ledger entry that proved it (its body as JSON, its seq)."""
    if level == "erased":
        return _ordered(_proven(names, verified, proof), names)
    found = decoded(verified["copies"]) if verified else {}
    was_reached = set(verified.get("reached", ())) if verified else set()
    reached_now = reached(names, erased_epochs, epoch)
    out: dict[str, CopyState] = {}
    for name, done in reached_now.items():
        seen = found.get(name)
        if seen is not None and (seen.state in FINAL_COPY_STATES or name in was_reached or not done):
            out[name] = seen  # what the verification found still holds
        else:
            out[name] = CopyState("unchecked", UNCHECKED) if done else CopyState("pending", PENDING)
    for name, seen in found.items():  # a copy gone since (a replica detached): as it was found
        if name not in out and name != "backups":
            out[name] = seen
    kept = found.get("backups") or backups(backups_coverage)
    if kept is not None:
        out["backups"] = kept
    return _ordered(out, names)


def _ordered(copies: dict[str, CopyState], names: Names) -> dict[str, CopyState]:
    """The store's own copy first, then the origin's in its order, any other, the backups last
    (a database may keep JSON keys in another order)."""
    first = [n for n in (names.local, *names.server) if n in copies]
    rest = sorted(n for n in copies if n not in first and n != "backups")
    return {n: copies[n] for n in (*first, *rest, *(["backups"] if "backups" in copies else []))}


def _proven(names: Names, verified: Mapping[str, Any] | None, proof: Mapping[str, Any] | None) -> dict[str, CopyState]:
    """The copies of the verification that proved ``erased``: each ``erased`` or ``shredded``."""
    if verified is not None and verified.get("level") == "erased":
        return decoded(verified["copies"])
    body = _body(proof)
    copies = decoded(body.get("copies", {}))
    if copies and all(c.state in FINAL_COPY_STATES for c in copies.values()):
        return copies
    # proven by an efface that recorded no copies: its byte scan covered the store's files
    seq = proof.get("seq") if proof else None
    where = f"the verification at ledger seq {seq}" if seq is not None else "an earlier verification"
    at = proof.get("at") if proof else None
    return {
        name: CopyState("erased", f"proven by {where}, which recorded no copies", at)
        for name in (names.local, *names.server)
    }


def _body(proof: Mapping[str, Any] | None) -> dict[str, Any]:
    if not proof:
        return {}
    body = proof.get("body")
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return dict(body) if isinstance(body, Mapping) else {}
