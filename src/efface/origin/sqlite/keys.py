"""A SQLite transaction's rows for backups: per-subject data keys, the records a backup copies, exposures.

Backups are sealed per subject (crypto-shredding): each subject with a claim has a data key,
made in the transaction of the claim that needs it and destroyed in the forget that leaves
it without one; a backup copies the records with a live claim and is recorded in the ledger's
order; a claim released while its subject keeps its key is an exposure (older backups still
open that record). :class:`BackupRows` is that part of :class:`~.tx.SQLiteTx`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .rows import LIVE, in_chunks


class BackupRows:
    """The backup part of :class:`~.tx.SQLiteTx`, which sets ``_c`` and ``epoch``."""

    _c: Any
    epoch: int

    def subject_has_claims(self, tenant: str, subject: str) -> bool:
        raise NotImplementedError  # SQLiteTx's

    def ensure_subject_keys(
        self, tenant: str, subjects: Iterable[str], now: float, subject_h: Callable[[str], str]
    ) -> None:
        """Give each subject that has none yet a data key in this tenant (same transaction
        as the claim that needs it, so no claim ever exists without its key)."""
        wanted = sorted(set(subjects))
        have: set[str] = set()
        for chunk, marks in in_chunks(wanted):
            have |= {
                r[0]
                for r in self._c.execute(
                    f"SELECT subject FROM subject_keys WHERE tenant=? AND subject IN ({marks})", [tenant, *chunk]
                )
            }
        self._c.executemany(
            "INSERT INTO subject_keys(tenant, subject, kid, key, subject_h, created_at) VALUES(?,?,?,?,?,?)",
            [(tenant, s, os.urandom(16), os.urandom(32), subject_h(s), now) for s in wanted if s not in have],
        )

    def destroy_subject_keys(self, tenant: str, subjects: Iterable[str]) -> list[tuple[str, bytes]]:
        """Delete the data key of every subject in ``subjects`` left with no claim in the
        tenant. With ``secure_delete=ON`` the row's bytes are zeroed in the page; the old page
        image in the WAL goes at the compactor's checkpoint. Returns (subject, key) of each key
        destroyed: verify fingerprints the key bytes to prove them gone from every file."""
        gone = []
        for s in sorted(set(subjects)):
            if not self.subject_has_claims(tenant, s):
                row = self._c.execute(
                    "DELETE FROM subject_keys WHERE tenant=? AND subject=? RETURNING key", (tenant, s)
                ).fetchone()
                if row is not None:
                    gone.append((s, row[0]))
        return gone

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key."""
        return self._c.execute("SELECT tenant, subject, kid, key FROM subject_keys").fetchall()

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        """Which of these keyed subject hashes still have a data key in the tenant."""
        hs = sorted(set(hashes))
        out: set[str] = set()
        for chunk, marks in in_chunks(hs):
            out |= {
                r[0]
                for r in self._c.execute(
                    f"SELECT subject_h FROM subject_keys WHERE tenant=? AND subject_h IN ({marks})", [tenant, *chunk]
                )
            }
        return out

    def claim_subjects(self, now: float) -> list[tuple[str, str]]:
        """Every (tenant, subject) with a live claim."""
        return self._c.execute(
            f"SELECT DISTINCT r.tenant, c.subject FROM claims c JOIN records r ON r.id=c.record_id WHERE {LIVE}", (now,)
        ).fetchall()

    def backup_rows(self, now: float) -> Iterator[tuple[tuple, list[tuple]]]:
        """Each record with a live claim, in id order, with its live claims
        (subject, purpose, basis, expires_at) and its quarantine (why, handle, since) or None."""
        claims: dict[int, list[tuple]] = {}
        for rid, subject, purpose, basis, expires_at in self._c.execute(
            f"SELECT c.record_id, c.subject, c.purpose, c.basis, c.expires_at FROM claims c WHERE {LIVE}"
            " ORDER BY c.record_id, c.id",
            (now,),
        ):
            claims.setdefault(rid, []).append((subject, purpose, basis, expires_at))
        for row in self._c.execute(
            "SELECT r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.embedding, r.created_at,"
            " r.updated_at, q.why, q.handle, q.since FROM records r LEFT JOIN quarantine q ON q.record_id=r.id"
            " ORDER BY r.id"
        ):
            if row[0] in claims:
                yield row, claims[row[0]]

    def backup_floor(self) -> int | None:
        """The ledger seq of the oldest recorded backup (None: no backup was ever taken)."""
        return self._c.execute("SELECT min(ledger_seq) FROM backups").fetchone()[0]

    def record_backup(
        self, backup_id: str, path_h: str, ledger_seq: int, now: float, records: int, subjects: int
    ) -> None:
        self._c.execute(
            "INSERT INTO backups(id, path_h, epoch, ledger_seq, created_at, records, subjects) VALUES(?,?,?,?,?,?,?)",
            (backup_id, path_h, self.epoch, ledger_seq, now, records, subjects),
        )

    def note_exposure(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None:
        """Remember (key hash, subject hash) of claims released while their subject keeps its
        key: older backups still hold that record's key wrapped under a key that lives."""
        self._c.executemany(
            "INSERT OR IGNORE INTO backup_exposure(tenant, key_h, subject_h) VALUES(?,?,?)",
            [(tenant, k, s) for k, s in pairs],
        )

    def drop_exposure(self, tenant: str, subject_hashes: Iterable[str]) -> None:
        """Forget the exposures of subjects whose key was destroyed: nothing opens them any more."""
        self._c.executemany(
            "DELETE FROM backup_exposure WHERE tenant=? AND subject_h=?", [(tenant, s) for s in subject_hashes]
        )

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        """Subject hashes noted as exposing any of these key hashes in older backups."""
        out: set[str] = set()
        for chunk, marks in in_chunks(key_hashes):
            out |= {
                r[0]
                for r in self._c.execute(
                    f"SELECT subject_h FROM backup_exposure WHERE tenant=? AND key_h IN ({marks})", [tenant, *chunk]
                )
            }
        return out
