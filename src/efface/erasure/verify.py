"""Verification: climb the ladder intent -> unreadable -> erased with recorded checks.

At forget time, inside the erasure's transaction, :meth:`Verifier.collect` keeps what a
later verification needs and nothing it must not keep: the erased record ids (never
reused), keyed hashes of the erased texts' words (to find, in the full-text vocabulary,
the words live records still use and probe with them), the ids of live records nearest
to the erased vectors (probes by nearest neighbour), and keyed fingerprints of the
erased bytes (see :mod:`.fingerprint`). The content itself is gone with the transaction.

:meth:`Verifier.verify` then runs two groups of checks:

- ``unreadable``: probes through every read path, routed to the origin: rows by id in
  every table, the resolution step every read goes through, full text by the erased
  words, nearest neighbours of the erased vectors through the ANN index.
- ``erased``: every artifact absorbed and saved past the epoch, the full-text index
  merged past it, the WAL checkpointed past it, and a scan of the bytes of every file in
  the store directory that finds no fingerprint (copies held by live records, such as a
  retained duplicate, are told apart and named).

A rung is claimed only when all its checks pass; "cannot verify" blocks it like a
failure. Once ``erased`` is proven the fingerprints are deleted, and later
verifications show the byte check as ``recorded`` with the ledger entry that proved it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..model import Check, Verification
from ..paths.fts import query_words
from .fingerprint import VECTOR_REGION, Fingerprinter, Fingerprints

if TYPE_CHECKING:  # pragma: no cover
    from ..store import Store

PROBE_SAMPLE = 16
"""Erased records whose words and neighbours are kept for probes (a sample bounds the
cost of a forget; the byte scan covers every record)."""
NEIGHBOURS = 6
LIVE_BTREES = ("records", "sqlite_autoindex_records_1", "claims", "claims_subject", "sqlite_autoindex_claims_1",
               "subjects", "sqlite_autoindex_subjects_1", "mentions", "sqlite_autoindex_mentions_1",
               "mentions_subject", "subject_keys", "sqlite_autoindex_subject_keys_1",
               "sqlite_autoindex_subject_keys_2")
"""The b-trees where a live record, claim or subject legitimately holds bytes."""
ANCHOR_QUERIES = 4


def _ids(blob: bytes) -> list[int]:
    return np.frombuffer(blob, dtype="<i8").tolist() if blob else []


def _blob(ids: Sequence[int]) -> bytes:
    return np.asarray(sorted(ids), dtype="<i8").tobytes()


class Verifier:
    """Collects evidence at forget time and checks it later, for one store."""

    def __init__(self, store: "Store", secret: bytes):
        self._s = store
        self._fp = Fingerprinter(secret)
        self._token_key = hashlib.blake2b(b"efface-token-key", key=secret[:64], digest_size=32).digest()

    def _token(self, word: str) -> int:
        return int.from_bytes(hashlib.blake2b(word.encode(), key=self._token_key, digest_size=8).digest(), "little")

    # -- at forget time (inside the transaction) ---------------------------------------
    def collect(self, tx, tenant: str, handle: str, content: dict[int, tuple[str, str, bytes]],
                quarantined_ids: Sequence[int], identifiers: Sequence[str], now: float,
                keys: Sequence[bytes] = ()) -> None:
        ids = sorted(content)
        fp = Fingerprints()
        if keys:  # subject data keys destroyed by this erasure (crypto-shredding of backups)
            self._fp.add_many(fp, "datakey", list(keys))
        if ids:
            self._fp.add_many(fp, "text", [content[i][1].encode("utf-8") for i in ids])
            self._fp.add_many(fp, "key", [content[i][0].encode("utf-8") for i in ids])
            self._fp.add_many(fp, "embedding", [content[i][2] for i in ids], VECTOR_REGION)
            quantized = self._s._ann.quantized(tenant, ids)
            if quantized:
                self._fp.add_many(fp, "vector", quantized, VECTOR_REGION)
        if identifiers:
            self._fp.add_many(fp, "identifier", [i.encode("utf-8") for i in identifiers])
        sample = ids[:: max(1, len(ids) // PROBE_SAMPLE)][:PROBE_SAMPLE]
        tokens = [[self._token(w) for w in query_words(content[i][1])] for i in sample]
        anchors: set[int] = set()
        if sample:
            # A few erased vectors suffice to find live records next to them; their own
            # neighbours are mostly each other (one subject's memories), so look past them.
            few = sample[:: max(1, len(sample) // ANCHOR_QUERIES)][:ANCHOR_QUERIES]
            vectors = np.vstack([np.frombuffer(content[i][2], dtype=np.float32) for i in few])
            for row in self._s._ann.neighbours(tenant, vectors, NEIGHBOURS + min(len(ids), 64)):
                anchors.update(r for r in row if r not in content)
        tx.save_evidence(
            handle, self._s._hash("tenant", tenant), _blob(ids), _blob(quarantined_ids), _blob(anchors),
            json.dumps(tokens).encode(), fp.to_blob(), now,
        )

    # -- later -------------------------------------------------------------------------
    def verify(self, handle: str, receipt: dict, evidence: dict | None, tenant: str | None,
               previous_proof: dict | None) -> tuple[str, list[Check], int, list[str]]:
        """Run every check; returns (level, checks, bytes scanned, files scanned)."""
        checks: list[Check] = []
        epoch = receipt["epoch"]
        if evidence is None:
            checks.append(_check("evidence", "unreadable", "cannot_verify",
                                 "this erasure has no recorded evidence (made by an older efface); "
                                 "only its receipt can be shown", time.time(), 0.0))
            return "intent", checks, 0, []
        erased = _ids(evidence["erased_ids"])
        quarantined = _ids(evidence["quarantined_ids"])
        checks += self._probes(tenant, erased, quarantined, evidence)
        scanned, files = 0, []
        structural = self._structure(tenant, epoch, erased)
        checks += structural
        if evidence["fingerprints"] is None:
            where = f"ledger seq {previous_proof['seq']}" if previous_proof else "an earlier verification"
            checks.append(_check("bytes", "erased", "recorded",
                                 f"no fingerprint was found in any file by {where}; the fingerprints were "
                                 "then deleted, as they must not outlive the proof", time.time(), 0.0))
        elif all(c.outcome == "pass" for c in structural):
            check, scanned, files = self._bytes(evidence["fingerprints"], tenant)
            checks.append(check)
        else:
            checks.append(_check("bytes", "erased", "fail",
                                 "not scanned yet: an artifact above still holds or may hold the erased "
                                 "bytes (run compact(), or wait for the compactor)", time.time(), 0.0))
        backups = _backups_check(receipt["body"].get("backups"))
        if backups is not None:
            checks.append(backups)
        level = "intent"
        if all(c.outcome in ("pass", "recorded") for c in checks if c.rung == "unreadable"):
            level = "unreadable"
            if all(c.outcome in ("pass", "recorded") for c in checks if c.rung == "erased"):
                level = "erased"
        return level, checks, scanned, files

    def _probes(self, tenant: str | None, erased: list[int], quarantined: list[int], evidence: dict) -> list[Check]:
        o = self._s._origin
        out = []
        t0 = time.time()
        rows = o.residual_rows(erased)
        out.append(_check(
            "origin.by_id", "unreadable", "fail" if rows else "pass",
            (f"rows still name erased records: {', '.join(f'{t}: {n}' for t, n in rows.items())}" if rows
             else f"{len(erased)} erased record ids: no row in records, claims, lineage, mentions or quarantine"),
            t0, time.time() - t0))
        t0 = time.time()
        held = o.still_quarantined(quarantined)
        out.append(_check(
            "derived.quarantine", "unreadable", "pass",
            f"{len(quarantined)} derived records were quarantined; {held} are still held back, the rest were "
            "re-derived, released by a recorded decision, or erased", t0, time.time() - t0))
        # Full text: find the erased words that live records still use, and ask the index
        # whether any of them still leads to an erased id.
        t0 = time.time()
        wanted: dict[int, int] = {}
        per_record = json.loads(evidence["tokens"] or b"[]")
        for words in per_record:
            for h in words:
                wanted[h] = 0
        recovered: dict[int, str] = {}
        if wanted:
            for term, _docs in o.fts_terms():
                h = self._token(term)
                if h in wanted:
                    recovered[h] = term
        leaked: set[int] = set()
        probes = 0
        if erased:
            for words in per_record:
                terms = [recovered[h] for h in words if h in recovered]
                for start in range(0, len(terms), 8):
                    expr = " OR ".join(f'"{t}"' for t in terms[start : start + 8])
                    probes += 1
                    leaked.update(o.fts_match_ids(expr, erased))
        missing = sum(1 for h in wanted if h not in recovered)
        out.append(_check(
            "fts.by_text", "unreadable", "fail" if leaked else "pass",
            (f"{len(leaked)} erased records still matched by their words" if leaked else
             f"{len(per_record)} sampled erased texts: {len(recovered)} of their words are still in the index "
             f"(used by live records), {missing} are gone; {probes} queries matched no erased record"),
            t0, time.time() - t0))
        # Nearest neighbours: query with live records next to the erased vectors.
        t0 = time.time()
        anchors = _ids(evidence["anchors"])
        proposed: set[int] = set()
        served: set[int] = set()
        if tenant is not None and anchors and erased:
            vecs = o.embeddings(anchors)
            if vecs:
                matrix = np.vstack([np.frombuffer(b, dtype=np.float32) for b in vecs.values()])
                erased_set = set(erased)
                for row in self._s._ann.neighbours(tenant, matrix, 40):
                    proposed.update(r for r in row if r in erased_set)
                if o.residual_rows(sorted(proposed)).get("records"):
                    served = proposed
        out.append(_check(
            "ann.by_neighbours", "unreadable", "fail" if served else "pass",
            (f"{len(served)} erased records proposed by the index resolve to live rows" if served else
             f"{len(anchors)} live neighbours of the erased vectors used as queries: "
             f"{len(proposed)} erased ids still proposed by the index (pending its compaction), "
             "0 resolve to a live row, so none can be served"),
            t0, time.time() - t0))
        return out

    def _structure(self, tenant: str | None, epoch: int, erased: list[int]) -> list[Check]:
        s = self._s
        out = []
        t0 = time.time()
        applied, saved = s._ann.applied_epoch(), s._ann.saved_epoch()
        holding = s._ann.holding(tenant, erased) if tenant is not None else 0
        ok = applied >= epoch and saved >= epoch and holding == 0
        out.append(_check(
            "ann.erased", "erased", "pass" if ok else "fail",
            f"index applied epoch {applied}, saved epoch {saved} (erasure epoch {epoch}); "
            f"{holding} erased vectors still in memory; removed slots are overwritten with noise before saving",
            t0, time.time() - t0))
        t0 = time.time()
        purged = s._fts.purged_epoch()
        out.append(_check(
            "fts.erased", "erased", "pass" if purged >= epoch else "fail",
            f"full-text segments merged at epoch {purged} (erasure epoch {epoch}): deleted entries are dropped "
            "by the merge and the freed pages zeroed (secure_delete)", t0, time.time() - t0))
        t0 = time.time()
        ck = s._origin.checkpointed_epoch()
        out.append(_check(
            "origin.wal", "erased", "pass" if ck >= epoch else "fail",
            f"WAL checkpointed and truncated at epoch {ck} (erasure epoch {epoch})", t0, time.time() - t0))
        return out

    def _bytes(self, blob: bytes, tenant: str | None) -> tuple[Check, int, list[str]]:
        t0 = time.time()
        fp = Fingerprints.from_blob(blob)
        root = self._s.path
        files = sorted(
            os.path.join(d, f) for d, _, names in os.walk(root) for f in names
        )
        hits, scanned = self._fp.scan(files, fp, root)
        rel = [os.path.relpath(f, root) for f in files]
        # Tell copies held by live records (a retained duplicate, a shared phrase) from residue.
        windows: list[bytes] = []
        handles: dict[str, object] = {}
        try:
            for hit in hits:
                f = handles.get(hit.file) or handles.setdefault(hit.file, open(os.path.join(root, hit.file), "rb"))
                f.seek(hit.offset)
                windows.append(f.read(hit.width))
        finally:
            for f in handles.values():
                f.close()
        vector = {w for h, w in zip(hits, windows) if h.kind == "vector"}
        other = {w for h, w in zip(hits, windows) if h.kind != "vector"}
        live = self._s._origin.live_holding(other, embeddings=any(h.kind == "embedding" for h in hits))
        if vector and tenant is not None:
            live |= self._s._ann.holds_bytes(tenant, sorted(vector))
        # A live copy can only sit where live content is stored: texts, keys and embeddings on
        # the pages of the records table (and its key index), subjects and identifiers on the
        # pages of the tables that name live subjects, vectors in the ANN index files.
        origin = self._s._origin
        origin_name = os.path.relpath(origin.path, root)
        owned, page = origin.pages_of(LIVE_BTREES), origin.page_size()

        def where_live(h) -> bool:
            if h.kind == "vector":
                return h.file.startswith("ann" + os.sep) and h.file.endswith(".usearch")
            first, last = h.offset // page + 1, (h.offset + h.width - 1) // page + 1
            return h.file == origin_name and first == last and first in owned

        residue = [h for h, w in zip(hits, windows) if not (w in live and where_live(h))]
        shared = len(hits) - len(residue)
        residue_count = len(residue)
        elapsed = time.time() - t0
        short = fp.too_short.get("text", 0)
        unchecked = {k: n for k, n in fp.too_short.items() if k != "text"}
        mbs = scanned / elapsed / 1e6 if elapsed > 0 else 0.0
        if residue_count:
            where: dict[str, int] = {}
            for h in residue:
                where[f"{h.file} ({h.kind})"] = where.get(f"{h.file} ({h.kind})", 0) + 1
            detail = (f"{residue_count} fingerprint windows of erased content found: "
                      + ", ".join(f"{k}: {n}" for k, n in sorted(where.items())))
            outcome = "fail"
        elif short:
            detail = (f"{short} erased items ({', '.join(f'{n} {k}' for k, n in sorted(fp.too_short.items()))}) "
                      "are too short or too uniform to fingerprint; "
                      f"the other items were not found in {len(files)} files")
            outcome = "cannot_verify"
        else:
            items = ", ".join(f"{n} {k}" for k, n in sorted(fp.items.items()))
            detail = (f"none of {fp.count()} fingerprints ({items}) found in {len(files)} files, "
                      f"{scanned:,} bytes at {mbs:,.0f} MB/s"
                      + (f"; {shared} windows are held by live records (retained or re-written copies)"
                         if shared else "")
                      + (f"; not checkable (under 8 bytes or too uniform): "
                         + ", ".join(f"{n} {k}" for k, n in sorted(unchecked.items())) if unchecked else ""))
            outcome = "pass"
        return _check("bytes", "erased", outcome, detail, t0, elapsed), scanned, rel


def _backups_check(state: str | None) -> Check | None:
    """Backups taken before the erasure (none: no check). ``shredded``: the keys that sealed
    its part of them were destroyed in its transaction, and the byte scan above looks for
    the key bytes too. ``ledger-replay``: they can still be decrypted with keys that live."""
    if state is None:
        return None
    t0 = time.time()
    if state in ("shredded", "absorbed"):
        return _check("backups", "erased", "pass",
                      "every backup taken before this erasure holds its content only under subject keys "
                      "destroyed in the erasure's transaction (crypto-shredding)" if state == "shredded"
                      else "no claim was released: no backup holds anything of this erasure", t0, 0.0)
    return _check("backups", "erased", "fail",
                  "backups taken before this erasure hold content it erased under subject keys that live "
                  "(the subjects keep other claims); a restore replays the ledger and does not bring it "
                  "back, but those bytes are not crypto-shredded", t0, 0.0)


def _check(name: str, rung: str, outcome: str, detail: str, at: float, duration: float) -> Check:
    return Check(name=name, rung=rung, outcome=outcome, detail=detail, at=round(at, 6),
                 duration_s=round(duration, 6))
