"""The rest of a PostgreSQL write transaction: the change log, receipts, evidence, the ledger,
purposes, subjects, policies, data keys, backups and exposure (:class:`efface.origin.base.Tx`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pgvector import Vector

from ...errors import StoreDamaged
from ...vectors import read as read_vector
from ..base import ClaimRow
from ..ledger import GENESIS, chain_hash
from .keys import KID_LEN
from .names import key_aad, subject_names
from .reads import all_subjects, subject_keys, vector_bytes
from .rows import record_aad
from .schema import vector_digest
from .sealing import TENANT_SUBJECT, kid_of

if TYPE_CHECKING:
    import psycopg

PostgresOrigin = Any
"""The origin this part serves (:class:`.origin.PostgresOrigin`), untyped here: the origin
imports this module, and importing it back, even for types, would close a circle."""


LEDGER_LOCK = 0x65666661_00000004
"""Advisory lock ('effa' + 4) held by a transaction appending to the ledger: verifications
append without an epoch, so the epoch counter's row lock does not order them."""


HELD_VECTORS = (
    "SELECT u.i FROM unnest(%b::vector[]) WITH ORDINALITY AS u(v, i) CROSS JOIN LATERAL"
    f" (SELECT 1 FROM {{s}}.records r WHERE {vector_digest('r.embedding')} = {vector_digest('u.v')}"
    " AND vector_send(r.embedding) = vector_send(u.v) LIMIT 1) AS held"
)
"""The positions (from 1) of the given vectors that a live record holds byte for byte: for
each, the records whose digest (:data:`.schema.VECTOR_DIGEST`, computed on the server by the
index's own function) is its digest, the first whose binary form is its binary form. The
subquery per vector (``LATERAL`` with ``LIMIT``: PostgreSQL cannot flatten it into a join)
makes the plan a lookup of the index per vector, whatever the planner guesses of the digests'
spread (it has no statistics on them): a semi-join form was planned as a hash join over every
record (17.7 s at 1M), an ``= ANY(ARRAY(...))`` one as a parallel bitmap scan (26-63 ms at 1M,
nearly all of it starting workers, for 1 ms of work). The vectors go in binary (``%b``: their
text form took 37-48 ms of this process for 100). Measured: 1.0-1.5 ms for 100 vectors at 100k
records, where comparing every record's vector took 176-212 ms (docs/postgres.md);
tests/postgres/test_vector_digest.py checks the plan."""

NAME_HOLDERS = (("claims", "subject"), ("mentions", "subject"), ("subjects", "subject"), ("data_keys", "subject"))
"""The columns holding name hashes (:mod:`.names`) a live row may hold, each indexed by itself
(``claims_subject``, and migration 8's ``*_by_subject``)."""
HELD_NAMES = " UNION ".join(f"SELECT {col} FROM {{s}}.{table} WHERE {col} = ANY(%s)" for table, col in NAME_HOLDERS)
"""Which of the given name hashes a live row holds."""


class TxMore:
    """Shared state and the second half of :class:`.tx.PostgresTx`."""

    def __init__(self, origin: PostgresOrigin, conn: psycopg.Connection, epoch: int) -> None:
        self._o = origin
        self._c = conn
        self._s = origin._s
        self.epoch = epoch
        self._kids: dict[tuple[str, str], bytes] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._forms: dict[str, list[bytes]] = {"sealed": [], "wrapped": [], "pgvector": [], "name_h": []}
        """What this transaction deleted or replaced, as stored (:meth:`stored_forms`)."""

    # -- helpers ----------------------------------------------------------------------------
    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return self._c.execute(sql.format(s=self._s), args, binary=True).fetchall()

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self._c.execute(sql.format(s=self._s), args, binary=True).fetchone()

    def _seal(self, kid: bytes, value: str, aad: str) -> bytes:
        return self._o._sealer.seal(self._c, kid, value, aad)

    def _open(self, sealed: bytes, aad: str) -> str:
        return self._o._sealer.open(self._c, sealed, aad)

    def _subject_h(self, tenant: str, subject: str) -> str:
        return self._o._sealer.subject_h(tenant, subject)

    def _kid(self, tenant: str, subject: str, now: float) -> bytes:
        """The kid of the subject's data key in the tenant, created if missing."""
        kid = self._kids.get((tenant, subject))
        if kid is None:
            kid = self._o._keys.ensure_subject(self._c, tenant, subject, now)
            self._kids[(tenant, subject)] = kid
        return kid

    def _prefetch_kids(self, tenant: str, subjects: Iterable[str], now: float) -> None:
        """:meth:`_kid` of each of ``subjects`` at once (one statement for those known, one
        pipelined insert for the new ones), so a batch's sealing asks the database nothing more."""
        missing = [subj for subj in dict.fromkeys(subjects) if (tenant, subj) not in self._kids]
        if missing:
            for subj, kid in self._o._keys.ensure_subjects(self._c, tenant, missing, now).items():
                self._kids[(tenant, subj)] = kid

    # -- stored forms, for the erasure's evidence (efface.origin.base.StoredForms) ------------
    def note_stored(self, kind: str, *values: Any) -> None:
        """Note sealed values or wrapped keys, as stored, that this transaction deletes or replaces."""
        self._forms[kind].extend(bytes(v) for v in values if v is not None)

    def note_names(self, hashes: Iterable[Any]) -> None:
        """Note name hashes (:mod:`.names`) of rows this transaction deletes."""
        self._forms["name_h"].extend(str(h).encode("ascii") for h in hashes if h is not None)

    def note_vector(self, value: Any) -> None:
        """Note a ``vector`` value this transaction deletes or replaces, as pgvector stores
        it: float32, little-endian (after a header the scan does not need)."""
        raw = vector_bytes(value)
        if raw:
            self._forms["pgvector"].append(np.asarray(read_vector(raw), dtype="<f4").tobytes())

    def stored_forms(self) -> list[tuple[str, list[bytes]]]:
        """What this transaction deleted or replaced, as the database stored it: sealed
        values (``sealed`` under data keys destroyed by now, ``sealed.live`` under keys that
        live), wrapped data keys destroyed (``wrapped``), ``vector`` values (``pgvector``) no
        live record still holds (an identical vector a live record holds is that record's,
        not residue), and the name hashes of subjects no live row names any more (``name_h``,
        :mod:`.names`; not the keys': a replace writes the same key again in its transaction)."""
        sealed = list(dict.fromkeys(self._forms["sealed"]))
        kids = sorted({kid_of(v) for v in sealed})
        live = (
            {bytes(r[0]) for r in self._all("SELECT kid FROM {s}.data_keys WHERE kid = ANY(%s)", (kids,))}
            if kids
            else set()
        )
        vectors = list(dict.fromkeys(self._forms["pgvector"]))
        if vectors:
            held = self._held_vectors(vectors)
            vectors = [v for v in vectors if v not in held]
        names = list(dict.fromkeys(self._forms["name_h"]))
        if names:
            held = {
                str(r[0]).encode("ascii")
                for r in self._all(HELD_NAMES, [[n.decode("ascii") for n in names]] * len(NAME_HOLDERS))
            }
            names = [n for n in names if n not in held]
        # Without the version byte and the kid: every value a key seals starts with them, so a
        # window over them would meet the key's live values; from the nonce on, a value is its own.
        head = 1 + KID_LEN
        return [
            ("sealed", [v[head:] for v in sealed if kid_of(v) not in live]),
            ("sealed.live", [v[head:] for v in sealed if kid_of(v) in live]),
            ("wrapped", list(dict.fromkeys(self._forms["wrapped"]))),
            ("pgvector", vectors),
            ("name_h", names),
        ]

    def _held_vectors(self, vectors: Sequence[bytes]) -> set[bytes]:
        """Which of ``vectors`` (float32, little-endian) a live record holds, byte for byte.

        Through the index of ``records`` by the digest of each vector's bytes
        (:data:`.schema.VECTOR_DIGEST`, computed by the server from the binary form on every
        write, so a live copy is never missed), not a scan of every record; a candidate counts
        only when its binary form is the vector's (:data:`HELD_VECTORS`)."""
        rows = self._all(HELD_VECTORS, ([Vector(np.frombuffer(v, dtype="<f4")) for v in vectors],))
        return {vectors[int(r[0]) - 1] for r in rows}

    # -- change log, receipts, evidence, ledger ----------------------------------------------
    def log_changes(self, tenant: str, puts: Iterable[int], drops: Iterable[int]) -> None:
        ids = [int(i) for i in puts]
        ops = ["put"] * len(ids)
        ids += [int(i) for i in drops]
        ops += ["drop"] * (len(ids) - len(ops))
        if ids:  # one statement, whatever the number of rows
            self._c.execute(
                f"INSERT INTO {self._s}.changes(epoch, record_id, tenant, op)"
                " SELECT %s, u.r, %s, u.o FROM unnest(%s::bigint[], %s::text[]) AS u(r, o)",
                (self.epoch, tenant, ids, ops),
            )

    def save_receipt(self, handle: str, kind: str, tenant_h: str, body: dict, now: float) -> None:
        self._c.execute(
            f"INSERT INTO {self._s}.receipts(handle, epoch, kind, tenant_h, created_at, body)"
            " VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
            (handle, self.epoch, kind, tenant_h, now, json.dumps(body, sort_keys=True)),
        )

    def save_evidence(
        self,
        handle: str,
        tenant_h: str,
        erased_ids: bytes,
        quarantined_ids: bytes,
        paths: dict[str, bytes],
        fingerprints: bytes,
        now: float,
    ) -> None:
        self._c.execute(
            f"INSERT INTO {self._s}.evidence(handle, tenant_h, epoch, erased_ids, quarantined_ids, anchors, tokens,"
            " fingerprints, created_at) VALUES (%s, %s, %s, %s, %s, '', '', %s, %s)",
            (handle, tenant_h, self.epoch, erased_ids, quarantined_ids, fingerprints, now),
        )
        self.save_path_evidence(handle, paths)

    def save_path_evidence(self, handle: str, evidence: dict[str, bytes]) -> None:
        if evidence:
            self._c.cursor().executemany(
                f"INSERT INTO {self._s}.path_evidence(handle, path, data) VALUES (%s, %s, %s)",
                [(handle, name, data) for name, data in evidence.items()],
            )

    def append_ledger(self, kind: str, handle: str | None, body: dict, now: float) -> tuple[int, str]:
        self._c.execute("SELECT pg_advisory_xact_lock(%s)", (LEDGER_LOCK,))
        last = self._one("SELECT seq, hash FROM {s}.ledger ORDER BY seq DESC LIMIT 1")
        seq, prev = (int(last[0]) + 1, last[1]) if last else (1, GENESIS)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        digest = chain_hash(prev, seq, now, kind, handle, text)
        self._c.execute(
            f"INSERT INTO {self._s}.ledger(seq, at, kind, handle, body, prev, hash)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (seq, now, kind, handle, text, prev, digest),
        )
        return seq, digest

    # -- purposes, tenants, subjects, policies ---------------------------------------------------
    def register_purpose(self, tenant: str, purpose: str) -> None:
        self._c.execute(
            f"INSERT INTO {self._s}.purposes(tenant, purpose) VALUES (%s, %s) ON CONFLICT DO NOTHING", (tenant, purpose)
        )

    def all_purposes(self) -> list[tuple[str, str]]:
        return [(t, p) for t, p in self._all("SELECT tenant, purpose FROM {s}.purposes")]

    def set_tenant_name(self, tenant: str, name: str) -> None:
        if self._one("SELECT 1 FROM {s}.tenants WHERE tenant = %s", (tenant,)) is not None:
            return
        sealed = self._seal(self._kid(tenant, TENANT_SUBJECT, 0.0), name, f"tenants|{tenant}")
        self._c.execute(
            f"INSERT INTO {self._s}.tenants(tenant, name) VALUES (%s, %s) ON CONFLICT DO NOTHING", (tenant, sealed)
        )

    def drop_tenant_name(self, tenant: str) -> str | None:
        """Delete the tenant's name once no record, registered subject or subject key of it is
        left, and then its own key (unless a policy's reason still needs it)."""
        own = self._subject_h(tenant, TENANT_SUBJECT)
        for sql, args in (
            ("SELECT 1 FROM {s}.records WHERE tenant = %s LIMIT 1", (tenant,)),
            ("SELECT 1 FROM {s}.subjects WHERE tenant = %s LIMIT 1", (tenant,)),
            ("SELECT 1 FROM {s}.data_keys WHERE tenant = %s AND subject <> %s LIMIT 1", (tenant, own)),
        ):
            if self._one(sql, args) is not None:
                return None
        row = self._one("DELETE FROM {s}.tenants WHERE tenant = %s RETURNING name", (tenant,))
        if row is None:
            return None
        self.note_stored("sealed", row[0])
        name = self._open(row[0], f"tenants|{tenant}")
        if self._one("SELECT 1 FROM {s}.policies WHERE tenant = %s AND reason IS NOT NULL", (tenant,)) is None:
            self._destroy(tenant, TENANT_SUBJECT)
        return name

    def subjects_of(self, tenant: str) -> list[str]:
        hashes = [
            r[0]
            for r in self._all(
                "SELECT subject FROM {s}.subjects WHERE tenant = %s UNION SELECT c.subject FROM {s}.claims c"
                " JOIN {s}.records r ON r.id = c.record_id WHERE r.tenant = %s",
                (tenant, tenant),
            )
        ]
        names = subject_names(self._o._sealer, self._c, self._s, tenant, hashes)
        if len(names) < len(set(hashes)):
            raise StoreDamaged("a subject of the tenant has no data key holding its name")
        return sorted(names.values())

    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None:
        sealed = self._seal(self._kid(tenant, subject, now), identifiers, f"subjects|{tenant}|{subject}")
        self._c.execute(
            f"INSERT INTO {self._s}.subjects(tenant, subject, identifiers, updated_at) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (tenant, subject) DO UPDATE SET identifiers = excluded.identifiers,"
            " updated_at = excluded.updated_at",
            (tenant, self._subject_h(tenant, subject), sealed, now),
        )

    def subject_identifiers(self, tenant: str, subject: str) -> str | None:
        row = self._one(
            "SELECT identifiers FROM {s}.subjects WHERE tenant = %s AND subject = %s",
            (tenant, self._subject_h(tenant, subject)),
        )
        return None if row is None else self._open(row[0], f"subjects|{tenant}|{subject}")

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return all_subjects(self._o._sealer, self._c, self._s)

    def subject_has_claims(self, tenant: str, subject: str) -> bool:
        sql = (
            "SELECT 1 FROM {s}.claims c JOIN {s}.records r ON r.id = c.record_id WHERE r.tenant = %s AND c.subject = %s"
        )
        return self._one(sql + " LIMIT 1", (tenant, self._subject_h(tenant, subject))) is not None

    def drop_subject(self, tenant: str, subject: str) -> bool:
        """Erase a subject's registered identifiers and the mention rows that point at it; a
        subject left with no claim loses the data key its identifiers were sealed with."""
        nh = self._subject_h(tenant, subject)
        gone = self._c.execute(
            f"DELETE FROM {self._s}.mentions WHERE tenant = %s AND subject = %s RETURNING subject", (tenant, nh)
        )
        self.note_names(r[0] for r in gone.fetchall())
        cur = self._c.execute(
            f"DELETE FROM {self._s}.subjects WHERE tenant = %s AND subject = %s RETURNING identifiers, subject",
            (tenant, nh),
        )
        rows = cur.fetchall()
        self.note_stored("sealed", *(r[0] for r in rows))
        self.note_names(r[1] for r in rows)
        if cur.rowcount > 0 and not self.subject_has_claims(tenant, subject):
            self._destroy(tenant, subject)
        return cur.rowcount > 0

    def policy(self, tenant: str) -> tuple[str, str | None]:
        row = self._one("SELECT policy, reason FROM {s}.policies WHERE tenant = %s", (tenant,))
        if row is None:
            return ("quarantine", None)
        return row[0], None if row[1] is None else self._open(row[1], f"policies|{tenant}")

    def set_policy(self, tenant: str, policy: str, reason: str | None) -> None:
        sealed = (
            None if reason is None else self._seal(self._kid(tenant, TENANT_SUBJECT, 0.0), reason, f"policies|{tenant}")
        )
        self._c.execute(
            f"INSERT INTO {self._s}.policies(tenant, policy, reason) VALUES (%s, %s, %s) ON CONFLICT (tenant)"
            " DO UPDATE SET policy = excluded.policy, reason = excluded.reason",
            (tenant, policy, sealed),
        )

    def drop_policy(self, tenant: str) -> str | None:
        """Delete the tenant's policy; once its name is gone too, so is the tenant's own key."""
        row = self._one("DELETE FROM {s}.policies WHERE tenant = %s RETURNING reason", (tenant,))
        if row is not None:
            self.note_stored("sealed", row[0])
        reason = None if row is None or row[0] is None else self._open(row[0], f"policies|{tenant}")
        if self._one("SELECT 1 FROM {s}.tenants WHERE tenant = %s", (tenant,)) is None:
            self._destroy(tenant, TENANT_SUBJECT)
        return reason

    def has_policy(self, tenant: str) -> bool:
        return self._one("SELECT 1 FROM {s}.policies WHERE tenant = %s", (tenant,)) is not None

    def all_policies(self) -> list[tuple[str, str, str | None]]:
        rows = self._all("SELECT tenant, policy, reason FROM {s}.policies")
        return [(t, p, None if r is None else self._open(r, f"policies|{t}")) for t, p, r in rows]

    # -- per-subject data keys ------------------------------------------------------------------
    def ensure_subject_keys(
        self, tenant: str, subjects: Iterable[str], now: float, subject_h: Callable[[str], str]
    ) -> None:
        subjs = sorted(set(subjects))
        self._prefetch_kids(tenant, subjs, now)
        self._o._keys.name_hashes(self._c, [(self._kid(tenant, subj, now), subject_h(subj)) for subj in subjs])

    def destroy_subject_keys(self, tenant: str, subjects: Iterable[str]) -> list[tuple[str, bytes]]:
        """Destroy the data key of every subject in ``subjects`` left with no claim in the
        tenant; what it sealed that still lives (a record another subject claims, the
        subject's registration, a stated reason) is sealed again under a live key first.
        Returns (subject, key) of each key destroyed."""
        gone = []
        for subj in sorted(set(subjects)):
            if not self.subject_has_claims(tenant, subj):
                dek = self._destroy(tenant, subj)
                if dek is not None:
                    gone.append((subj, dek))
        return gone

    def _kid_of_hash(self, tenant: str, subject_nh: str | None) -> bytes:
        """The kid of a subject that has a data key, named by its hash; the tenant's own key for None."""
        if subject_nh is not None:
            row = self._one("SELECT kid FROM {s}.data_keys WHERE tenant = %s AND subject = %s", (tenant, subject_nh))
            if row is not None:
                return bytes(row[0])
        return self._kid(tenant, TENANT_SUBJECT, 0.0)

    def _destroy(self, tenant: str, subject: str) -> bytes | None:
        nh = self._subject_h(tenant, subject)
        row = self._one(
            "SELECT kid, wrapped, kek_id, name FROM {s}.data_keys WHERE tenant = %s AND subject = %s", (tenant, nh)
        )
        if row is None:
            return None
        kid, dek = bytes(row[0]), self._o._keys.unwrap_row(row[2], bytes(row[0]), bytes(row[1]))
        self.note_stored("wrapped", row[1])
        self.note_stored("sealed", row[3])  # the subject's name, sealed with the key itself
        self.note_names([nh])
        # open what still lives under the key, destroy it, then seal those values again
        kept = self._all(
            "SELECT key_sealed, text, metadata, sources FROM {s}.records WHERE sealed_by = %s"
            " UNION ALL SELECT text, NULL, NULL, NULL FROM {s}.reasons WHERE substring(text FROM 2 FOR 16) = %s"
            " UNION ALL SELECT identifiers, NULL, NULL, NULL FROM {s}.subjects WHERE tenant = %s AND subject = %s",
            (kid, kid, tenant, nh),
        )
        self.note_stored("sealed", *(v for row in kept for v in row))  # sealed again below, under a live key
        recs = []
        for rid, t, ks, *vals in self._all(
            "SELECT id, tenant, key_sealed, text, metadata, sources FROM {s}.records WHERE sealed_by = %s", (kid,)
        ):
            k = self._open(ks, key_aad(t))
            recs.append(
                (
                    int(rid),
                    t,
                    k,
                    *(
                        self._open(v, record_aad(col, t, k))
                        for v, col in zip(vals, ("text", "metadata", "sources"), strict=True)
                    ),
                )
            )
        reasons = [
            (rid, h, created, self._open(text, f"reasons|{rid}|{h}"))
            for rid, h, created, text in self._all(
                "SELECT record_id, reason_h, created_at, text FROM {s}.reasons"
                " WHERE substring(text FROM 2 FOR 16) = %s",
                (kid,),
            )
        ]
        ident = self._one("SELECT identifiers FROM {s}.subjects WHERE tenant = %s AND subject = %s", (tenant, nh))
        idents = (
            None if ident is None or kid_of(ident[0]) != kid else self._open(ident[0], f"subjects|{tenant}|{subject}")
        )
        self._o._keys.destroy_kid(self._c, kid, self.epoch_time())
        self._o._sealer.forget(kid)
        self._kids.pop((tenant, subject), None)
        for rid, t, k, text, meta, sources in recs:
            holder = self._one("SELECT subject FROM {s}.claims WHERE record_id = %s ORDER BY id LIMIT 1", (rid,))
            new = self._kid_of_hash(t, None if holder is None else holder[0])
            self._c.execute(
                f"UPDATE {self._s}.records SET key_sealed = %s, text = %s, metadata = %s, sources = %s, sealed_by = %s"
                " WHERE id = %s",
                (
                    self._seal(new, k, key_aad(t)),
                    self._seal(new, text, record_aad("text", t, k)),
                    self._seal(new, meta, record_aad("metadata", t, k)),
                    self._seal(new, sources, record_aad("sources", t, k)),
                    new,
                    rid,
                ),
            )
        for rid, h, created, text in reasons:
            owner = self._one("SELECT sealed_by FROM {s}.records WHERE id = %s", (rid,))
            new = bytes(owner[0]) if owner is not None else self._kid(tenant, TENANT_SUBJECT, 0.0)
            self._c.execute(
                f"UPDATE {self._s}.reasons SET text = %s WHERE record_id = %s AND reason_h = %s AND created_at = %s",
                (self._seal(new, text, f"reasons|{rid}|{h}"), rid, h, created),
            )
        if idents is not None:
            self.set_subject(tenant, subject, idents, self.epoch_time())
        return dek

    def epoch_time(self) -> float:
        """The time recorded with this transaction's epoch."""
        row = self._one("SELECT at FROM {s}.mutations WHERE epoch = %s", (self.epoch,))
        return 0.0 if row is None else float(row[0])

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        return subject_keys(self._o._sealer, self._c, self._s)

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        rows = self._all(
            "SELECT subject_h FROM {s}.data_keys WHERE tenant = %s AND subject_h = ANY(%s)", (tenant, list(hashes))
        )
        return {r[0] for r in rows}

    def claim_subjects(self, now: float) -> list[tuple[str, str]]:
        rows = self._all(
            "SELECT DISTINCT r.tenant, c.subject FROM {s}.claims c JOIN {s}.records r ON r.id = c.record_id"
            " WHERE c.expires_at IS NULL OR c.expires_at > %s",
            (now,),
        )
        return [(t, self._subject_name(t, nh)) for t, nh in rows]

    def _subject_name(self, tenant: str, subject_nh: str) -> str:
        name = self._names.get((tenant, subject_nh))
        if name is None:
            got = subject_names(self._o._sealer, self._c, self._s, tenant, [subject_nh])
            if subject_nh not in got:
                raise StoreDamaged("a claim names a subject whose data key is gone")
            name = self._names[(tenant, subject_nh)] = got[subject_nh]
        return name

    # -- backups and exposure ------------------------------------------------------------------
    def backup_rows(self, now: float) -> Iterator[tuple[tuple, list[tuple]]]:
        claims: dict[int, list[tuple]] = {}
        for rid, t, nh, purpose, basis, expires_at in self._all(
            "SELECT c.record_id, r.tenant, c.subject, c.purpose, c.basis, c.expires_at FROM {s}.claims c"
            " JOIN {s}.records r ON r.id = c.record_id"
            " WHERE c.expires_at IS NULL OR c.expires_at > %s ORDER BY c.record_id, c.id",
            (now,),
        ):
            claims.setdefault(int(rid), []).append((self._subject_name(t, nh), purpose, basis, expires_at))
        for row in self._all(
            "SELECT r.id, r.tenant, r.key_sealed, r.text, r.metadata, r.sources, r.embedding, r.created_at,"
            " r.updated_at, q.why, q.handle, q.since FROM {s}.records r"
            " LEFT JOIN {s}.quarantine q ON q.record_id = r.id ORDER BY r.id"
        ):
            rid, t, ks, text, meta, sources, emb, created, updated, why, handle, since = row
            if int(rid) not in claims:
                continue
            k = self._open(ks, key_aad(t))
            opened = (
                self._open(v, record_aad(col, t, k))
                for v, col in ((text, "text"), (meta, "metadata"), (sources, "sources"))
            )
            yield (int(rid), t, k, *opened, vector_bytes(emb), created, updated, why, handle, since), claims[int(rid)]

    def backup_floor(self) -> int | None:
        row = self._one("SELECT min(ledger_seq) FROM {s}.backups")
        return None if row is None or row[0] is None else int(row[0])

    def record_backup(
        self, backup_id: str, path_h: str, ledger_seq: int, now: float, records: int, subjects: int
    ) -> None:
        self._c.execute(
            f"INSERT INTO {self._s}.backups(id, path_h, epoch, ledger_seq, created_at, records, subjects)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (backup_id, path_h, self.epoch, ledger_seq, now, records, subjects),
        )

    def note_exposure(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None:
        rows = [(tenant, k, subj) for k, subj in pairs]
        if rows:
            self._c.cursor().executemany(
                f"INSERT INTO {self._s}.backup_exposure(tenant, key_h, subject_h) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                rows,
            )

    def drop_exposure(self, tenant: str, subject_hashes: Iterable[str]) -> None:
        self._c.execute(
            f"DELETE FROM {self._s}.backup_exposure WHERE tenant = %s AND subject_h = ANY(%s)",
            (tenant, list(subject_hashes)),
        )

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        rows = self._all(
            "SELECT subject_h FROM {s}.backup_exposure WHERE tenant = %s AND key_h = ANY(%s)",
            (tenant, list(key_hashes)),
        )
        return {r[0] for r in rows}


__all__ = ["HELD_NAMES", "HELD_VECTORS", "LEDGER_LOCK", "NAME_HOLDERS", "ClaimRow", "TxMore"]
