"""The erasure ledger: append-only, hash-chained, and free of personal data.

Keys, subjects and tenants enter it only as keyed hashes (HMAC-SHA256 under a per-store
secret), so the ledger can be handed to an auditor without handing over whose data it was.
Each entry's hash covers the previous entry's hash, so a removed, reordered or altered
entry breaks the chain at a place :func:`verify_chain` names.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..origin.ledger import GENESIS, chain_hash

SECRET_KEY = "ledger.secret"


class Hasher:
    """Keyed hashes of identifying values, stable for one store."""

    def __init__(self, secret: bytes):
        self._secret = secret

    @staticmethod
    def new_secret() -> str:
        return secrets.token_hex(32)

    def __call__(self, *parts: str) -> str:
        msg = "\x1f".join(parts).encode("utf-8")
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()[:32]


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
