"""The ledger's hash-chain rule: every origin writes it, every auditor (and every restore)
replays it with :func:`verify_chain`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

SECRET_META = "ledger.secret"
"""The meta key under which an origin that keeps the store's hash secret in its own data
(SQLite, memory) keeps it, as hex; the PostgreSQL origin keeps it in the KEK file instead
(:class:`efface.origin.capabilities.KeepsSecret`) and moves an older database's out of meta."""

GENESIS = "0" * 64
"""The ``prev`` of the first entry."""


def chain_hash(prev: str, seq: int, at: float, kind: str, handle: str | None, body: str) -> str:
    """The ledger's link: sha256 over the previous hash and this entry's canonical fields."""
    payload = json.dumps([prev, seq, repr(at), kind, handle, body], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainCheck:
    """What :func:`verify_chain` found."""

    ok: bool
    entries: int
    problems: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "entries": self.entries, "problems": list(self.problems)}


def verify_chain(entries: Iterable[dict]) -> ChainCheck:
    """Recompute every link. Reports gaps in the sequence, broken links and altered entries."""
    problems: list[str] = []
    prev_hash, expected_seq, n = GENESIS, 1, 0
    for e in entries:
        n += 1
        if e["seq"] != expected_seq:
            problems.append(f"entry {expected_seq}..{e['seq'] - 1} missing (gap before seq {e['seq']})")
        if e["prev"] != prev_hash:
            problems.append(f"seq {e['seq']}: link to the previous entry is broken")
        if chain_hash(e["prev"], e["seq"], e["at"], e["kind"], e["handle"], e["body"]) != e["hash"]:
            problems.append(f"seq {e['seq']}: entry was altered (hash does not match its content)")
        prev_hash, expected_seq = e["hash"], e["seq"] + 1
    return ChainCheck(ok=not problems, entries=n, problems=tuple(problems))
