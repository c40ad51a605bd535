"""What a forget keeps, inside its own transaction, for a later verification.

The erased record ids (never reused), each read path's probe evidence (keyed word hashes
for full text, live neighbours of the erased vectors for the ANN index), and keyed
fingerprints of every erased byte: texts, keys, embeddings, the forms the read paths hold
(the index's i8 vectors), the identifiers of every subject whose last claim in the tenant
went (whatever selector or expiry removed it), the stated reasons of the erased records'
releases, and the data keys destroyed for crypto-shredding (see :mod:`.fingerprint`). Never the content: it is
gone with the transaction.

Where the origin stores content in another form (:class:`~efface.origin.base.StoredForms`:
on PostgreSQL, sealed ciphertexts, wrapped data keys and ``vector`` values as pgvector lays
them out), those forms are fingerprinted too, under the kinds the origin names, so a scan of
the database's files looks for what they can hold (:data:`STORED_KINDS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..model import probe_sample
from ..origin.base import Tx
from ..origin.capabilities import StoredForms
from ..paths.base import Erased, ReadPath
from ..vectors import read as read_vector
from .fingerprint import REGION, VECTOR_REGION, Fingerprinter, Fingerprints


def id_blob(ids: Sequence[int]) -> bytes:
    return np.asarray(sorted(ids), dtype="<i8").tobytes()


def blob_ids(blob: bytes) -> list[int]:
    return np.frombuffer(blob, dtype="<i8").tolist() if blob else []


STORED_KINDS = {"sealed": "", "sealed.live": "", "wrapped": "", "pgvector": "vector", "name_h": ""}
"""Kinds of stored forms an origin may name (:class:`~efface.origin.base.StoredForms`), and
the sampling of their fingerprints (``vector``: :data:`.fingerprint.VECTOR_REGION`)."""


class Evidence:
    """Collects a forget's evidence; handed the read paths and the keyed hashes."""

    def __init__(self, paths: Sequence[ReadPath], fingerprinter: Fingerprinter, hasher: Callable[..., str]):
        self._paths = list(paths)
        self._fp = fingerprinter
        self._hash = hasher

    def collect(
        self,
        tx: Tx,
        tenant: str,
        handle: str,
        content: dict[int, tuple[str, str, bytes, str]],
        quarantined_ids: Sequence[int],
        identifiers: Sequence[str],
        now: float,
        keys: Sequence[bytes] = (),
        tenant_name: str | None = None,
        reasons: Sequence[str] = (),
    ) -> None:
        ids = sorted(content)
        fp = Fingerprints()
        if keys:  # subject data keys destroyed by this erasure (crypto-shredding of backups)
            self._fp.add_many(fp, "datakey", list(keys))
        sample = probe_sample(ids)
        erased = Erased(
            tenant,
            tuple(ids),
            {i: content[i][1] for i in ids},
            {i: read_vector(content[i][2]) for i in ids},
            sample,
        )
        if ids:
            # texts, keys and identifiers keep even uniform windows ("ha ha ha ha"): of 8 bytes
            # or more, none is too short to be proven gone
            self._fp.add_many(fp, "text", [content[i][1].encode("utf-8") for i in ids], uniform=True)
            self._fp.add_many(fp, "key", [content[i][0].encode("utf-8") for i in ids], uniform=True)
            self._fp.add_many(fp, "embedding", [content[i][2] for i in ids], VECTOR_REGION)
            # Metadata can hold personal data too ({"email": ...}); a JSON document under 8
            # bytes ('{}', '{"a":1}') has no room for it and is not looked for.
            meta = [m.encode("utf-8") for m in (content[i][3] for i in ids) if len(m.encode("utf-8")) >= 8]
            if meta:
                self._fp.add_many(fp, "metadata", meta, uniform=True)
            for path in self._paths:
                for held in path.held(erased):
                    self._fp.add_many(fp, held.kind, held.items, held.region)
        if isinstance(tx, StoredForms):
            for kind, items in tx.stored_forms():
                if items:
                    region = VECTOR_REGION if STORED_KINDS.get(kind) == "vector" else REGION
                    self._fp.add_many(fp, kind, items, region)
        if identifiers:
            self._fp.add_many(fp, "identifier", [i.encode("utf-8") for i in identifiers], uniform=True)
        if tenant_name is not None:  # erased with the tenant's last record, subject and key
            self._fp.add_many(fp, "tenant", [tenant_name.encode("utf-8")], uniform=True)
        if reasons:  # the stated reasons of releases of the erased records
            self._fp.add_many(fp, "reason", [r.encode("utf-8") for r in reasons], uniform=True)
        per_path = {p.name: p.evidence(erased) for p in self._paths}
        tx.save_evidence(handle, tenant, id_blob(ids), id_blob(quarantined_ids), per_path, fp.to_blob(), now)
