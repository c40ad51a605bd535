"""Keys on PostgreSQL: per-subject data keys that seal content, and their destruction
(docs/concepts.md §9). The key-encryption key (KEK) that wraps them comes from the
operator's file and never enters the database; the file, its check against the database
and the KEK's rotation are :mod:`.kekring`'s (:class:`Keys` is a :class:`.kekring.KekRing`).

**Data keys.** One AES-256 key per (tenant, subject), identified by a random ``kid``, stored
in ``data_keys`` wrapped (AES-GCM, the kid as associated data) by the current KEK. A sealed
value is ``0x01 | kid (16) | nonce (12) | AES-GCM ciphertext and tag``, with associated data
the caller gives (the table, column and row it belongs to), so a value moved to another row
fails to open. Sealing and opening happen in the efface process; the database sees ciphertext.

**Destroying** a subject's data key deletes its row and notes, in ``destroyed_keys``, the KEK
its wrapped copies were made with. Copies of that wrapped key may remain in heap pages, the
WAL, replicas and backups (docs/postgres.md measures where); they are useless once that KEK
is gone, which the KEK's rotation (:mod:`.kekring`) brings about. A destroyed key is
*covered* once the KEK it was wrapped with is retired (:meth:`Keys.pending_destroyed`): that
is what an erasure's level waits for.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...errors import StoreDamaged
from .errors import DataKeyDestroyed, KeyFileCreated, KeyFileMismatch, KeyFileMissing
from .kekfile import FORMAT, RETIRED_GRACE_S, KekFile, kek_id, name_key_id
from .kekring import ENV, NAME_KEY_META, NONCE_LEN, KekRing, Rotation, resolve_path

if TYPE_CHECKING:
    import psycopg

SEAL_VERSION = b"\x01"
KID_LEN = 16

__all__ = [
    "ENV",
    "FORMAT",
    "NAME_KEY_META",
    "NONCE_LEN",
    "RETIRED_GRACE_S",
    "KekFile",
    "KeyFileCreated",
    "KeyFileMismatch",
    "Keys",
    "Rotation",
    "kek_id",
    "name_key_id",
    "resolve_path",
]


def name_aad(tenant: str, subject_nh: str) -> str:
    """What a subject's sealed name (``data_keys.name``) is bound to."""
    return f"data_keys.name|{tenant}|{subject_nh}"


class Keys(KekRing):
    """The store's keys, for one database schema and one KEK file: the KEKs
    (:class:`.kekring.KekRing`) and the data keys they wrap.

    Methods that take ``conn`` run in the caller's transaction (a data key is created or
    destroyed with the write or the erasure it serves); :meth:`open` and :meth:`rotate` take
    an autocommit connection and manage their own transactions."""

    # -- data keys
    def ensure(self, conn: psycopg.Connection, tenant: str, subject_h: str, now: float) -> bytes:
        """The kid of the subject's data key, created (wrapped by the newest KEK) if missing.
        ``subject_h``: the keyed hash of the subject, never its name."""
        s = self.schema
        row = conn.execute(
            f"SELECT kid FROM {s}.data_keys WHERE tenant = %s AND subject_h = %s", (tenant, subject_h)
        ).fetchone()
        if row is not None:
            return bytes(row[0])
        kek, kid, dek = self._new_key(conn)
        inserted = conn.execute(
            f"INSERT INTO {s}.data_keys(kid, tenant, subject_h, wrapped, kek_id, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, subject_h) DO NOTHING RETURNING kid",
            (kid, tenant, subject_h, self._wrap(kek, kid, dek), kek, now),
        ).fetchone()
        if inserted is None:  # another transaction created it meanwhile
            again = conn.execute(
                f"SELECT kid FROM {s}.data_keys WHERE tenant = %s AND subject_h = %s", (tenant, subject_h)
            ).fetchone()
            assert again is not None
            return bytes(again[0])
        return kid

    def ensure_subject(self, conn: psycopg.Connection, tenant: str, subject: str, now: float) -> bytes:
        """The kid of the data key of ``subject`` (as the store names it) in ``tenant``,
        created if missing, its ``subject_h`` left for :meth:`name_hash` to fill (the origin
        seals a record before the store hands it the subject's keyed hash). The row names
        the subject by :meth:`name_h` (``data_keys.subject``) and keeps the name sealed with
        the key itself (``data_keys.name``): it is shredded with the key."""
        s = self.schema
        nh = self.name_h("subject", tenant, subject)
        row = conn.execute(f"SELECT kid FROM {s}.data_keys WHERE tenant = %s AND subject = %s", (tenant, nh)).fetchone()
        if row is not None:
            return bytes(row[0])
        kek, kid, dek = self._new_key(conn)
        nonce = secrets.token_bytes(NONCE_LEN)
        name = SEAL_VERSION + kid + nonce + AESGCM(dek).encrypt(nonce, subject.encode(), name_aad(tenant, nh).encode())
        conn.execute(
            f"INSERT INTO {s}.data_keys(kid, tenant, subject, name, wrapped, kek_id, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (kid, tenant, nh, name, self._wrap(kek, kid, dek), kek, now),
        )
        return kid

    def ensure_subjects(
        self, conn: psycopg.Connection, tenant: str, subjects: Iterable[str], now: float
    ) -> dict[str, bytes]:
        """:meth:`ensure_subject` of each of ``subjects`` at once: the existing keys read in
        one statement, the missing ones inserted in one pipelined ``executemany`` (one round
        trip each instead of one or two per subject). Returns each subject's kid."""
        s = self.schema
        hashes = {subj: self.name_h("subject", tenant, subj) for subj in dict.fromkeys(subjects)}
        if not hashes:
            return {}
        found = {
            str(nh): bytes(kid)
            for nh, kid in conn.execute(
                f"SELECT subject, kid FROM {s}.data_keys WHERE tenant = %s AND subject = ANY(%s)",
                (tenant, list(hashes.values())),
            ).fetchall()
        }
        kids = {subj: found[nh] for subj, nh in hashes.items() if nh in found}
        missing = [subj for subj in hashes if subj not in kids]
        if missing:
            kek, _, _ = self._new_key(conn)
            rows = []
            for subj in missing:
                kid, dek = secrets.token_bytes(KID_LEN), AESGCM.generate_key(bit_length=256)
                nh, nonce = hashes[subj], secrets.token_bytes(NONCE_LEN)
                name = (
                    SEAL_VERSION
                    + kid
                    + nonce
                    + AESGCM(dek).encrypt(nonce, subj.encode(), name_aad(tenant, nh).encode())
                )
                rows.append((kid, tenant, nh, name, self._wrap(kek, kid, dek), kek, now))
                kids[subj] = kid
            conn.cursor().executemany(
                f"INSERT INTO {s}.data_keys(kid, tenant, subject, name, wrapped, kek_id, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
        return kids

    def name_hashes(self, conn: psycopg.Connection, pairs: Iterable[tuple[bytes, str]]) -> None:
        """:meth:`name_hash` of each ``(kid, subject_h)`` in one statement."""
        rows = list(pairs)
        if rows:
            conn.execute(
                f"UPDATE {self.schema}.data_keys d SET subject_h = u.h"
                " FROM unnest(%s::bytea[], %s::text[]) AS u(kid, h) WHERE d.kid = u.kid AND d.subject_h IS NULL",
                ([k for k, _ in rows], [h for _, h in rows]),
            )

    def _new_key(self, conn: psycopg.Connection) -> tuple[str, bytes, bytes]:
        """A new data key and its kid, and the KEK to wrap it by (the newest: 'next' during a
        rotation, else 'current'). The KEK's row is read FOR SHARE: a rotation finishing waits
        for this transaction, so no key is left wrapped by a KEK it is retiring (see rotate())."""
        kek = conn.execute(
            f"SELECT kek_id FROM {self.schema}.keks WHERE state IN ('current', 'next') "
            "ORDER BY state = 'next' DESC LIMIT 1 FOR SHARE"
        ).fetchone()
        if kek is None:
            raise KeyFileMissing("no key-encryption key is registered for this store: open the keys first")
        return kek[0], secrets.token_bytes(KID_LEN), AESGCM.generate_key(bit_length=256)

    def name_hash(self, conn: psycopg.Connection, kid: bytes, subject_h: str) -> None:
        """Record the keyed hash of the subject data key ``kid`` belongs to (once)."""
        conn.execute(
            f"UPDATE {self.schema}.data_keys SET subject_h = %s WHERE kid = %s AND subject_h IS NULL", (subject_h, kid)
        )

    def data_key(self, conn: psycopg.Connection, kid: bytes) -> bytes:
        """The data key ``kid``, unwrapped; :class:`DataKeyDestroyed` once it is gone."""
        return self._dek(conn, kid)

    def unwrap_row(self, kek_ident: str, kid: bytes, wrapped: bytes) -> bytes:
        """A data key from its ``data_keys`` row (for listings of live keys)."""
        return self._unwrap(kek_ident, kid, wrapped)

    def destroy_kid(self, conn: psycopg.Connection, kid: bytes, now: float) -> bool:
        """:meth:`destroy` of the data key ``kid``; False if it was already gone."""
        s = self.schema
        row = conn.execute(f"DELETE FROM {s}.data_keys WHERE kid = %s RETURNING kid, kek_id", (kid,)).fetchone()
        if row is None:
            return False
        conn.execute(
            f"INSERT INTO {s}.destroyed_keys(kid, kek_id, destroyed_at) VALUES (%s, %s, %s)", (row[0], row[1], now)
        )
        return True

    def _dek(self, conn: psycopg.Connection, kid: bytes) -> bytes:
        row = conn.execute(f"SELECT wrapped, kek_id FROM {self.schema}.data_keys WHERE kid = %s", (kid,)).fetchone()
        if row is None:
            raise DataKeyDestroyed("this content's data key was destroyed (its subject was erased): it cannot be read")
        return self._unwrap(row[1], kid, bytes(row[0]))

    def seal(self, conn: psycopg.Connection, kid: bytes, plaintext: bytes, aad: bytes) -> bytes:
        """``plaintext`` sealed with data key ``kid``; ``aad`` binds it to where it is stored."""
        nonce = secrets.token_bytes(NONCE_LEN)
        return SEAL_VERSION + kid + nonce + AESGCM(self._dek(conn, kid)).encrypt(nonce, plaintext, aad)

    def open_sealed(self, conn: psycopg.Connection, sealed: bytes, aad: bytes) -> bytes:
        """The plaintext of a value :meth:`seal` made with the same ``aad``.
        :class:`DataKeyDestroyed` once its key is gone; :class:`efface.errors.StoreDamaged`
        if the value was altered or moved."""
        sealed = bytes(sealed)
        if sealed[:1] != SEAL_VERSION or len(sealed) < 1 + KID_LEN + NONCE_LEN + 16:
            raise StoreDamaged("a sealed value is malformed")
        kid, nonce, body = sealed[1 : 1 + KID_LEN], sealed[1 + KID_LEN : 1 + KID_LEN + NONCE_LEN], sealed[29:]
        try:
            return AESGCM(self._dek(conn, kid)).decrypt(nonce, body, aad)
        except InvalidTag:
            raise StoreDamaged("a sealed value fails authentication (altered, or moved from another row)") from None

    def destroy(self, conn: psycopg.Connection, tenant: str, subject_h: str, now: float) -> bytes | None:
        """Delete the subject's data key, in the caller's (erasure's) transaction; returns its
        kid, or None if it had none. Its wrapped copies left anywhere become useless at the
        next finished :meth:`rotate`."""
        s = self.schema
        row = conn.execute(
            f"DELETE FROM {s}.data_keys WHERE tenant = %s AND subject_h = %s RETURNING kid, kek_id", (tenant, subject_h)
        ).fetchone()
        if row is None:
            return None
        conn.execute(
            f"INSERT INTO {s}.destroyed_keys(kid, kek_id, destroyed_at) VALUES (%s, %s, %s)", (row[0], row[1], now)
        )
        return bytes(row[0])

    def pending_destroyed(self, conn: psycopg.Connection) -> int:
        """Destroyed data keys whose KEK is not retired yet (a rotation would cover them)."""
        row = conn.execute(
            f"SELECT count(*) FROM {self.schema}.destroyed_keys d JOIN {self.schema}.keks k USING (kek_id)"
            " WHERE k.state <> 'retired'"
        ).fetchone()
        return int(row[0]) if row else 0
