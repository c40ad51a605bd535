"""Verification: climb the ladder intent -> unreadable -> erased with recorded checks.

At forget time, inside the erasure's transaction, :class:`~efface.erasure.evidence.Evidence` keeps what a
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

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from ..model import Check, CopyState, allows_erased
from ..origin.base import Origin
from ..origin.capabilities import CopyChecks, ScanFn
from ..paths.base import ReadPath, check
from .evidence import blob_ids
from .fingerprint import Fingerprinter, Fingerprints
from .hits import Hit, Hits
from .residue import SHORT, Judge, Judgement, Reader, in_live_cells, strays
from .serverscan import anchored_vectors, live_names

SERVER_KINDS = ("sealed", "sealed.live", "wrapped", "pgvector", "name_h", "identifier", "key", "tenant")
"""What a database server's files can hold of an erasure, the kinds its copies are scanned
for: ciphertexts, wrapped data keys, vectors as pgvector stores them, the keyed hashes that
stand for subject names and record keys; and, to prove they never reach it, the clear subject
names and identifiers, record keys and tenant name (never a text: it is sealed)."""
KEEP_SCANS, KEEP_HITS = 16, 2_000_000
"""How many of wait's clean scans the verifier keeps for the next verify of the same erasure,
and the most hits one may hold (40 bytes each): a scan not kept only costs verify a full one."""


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What a clean scan of the origin's database file by :meth:`Verifier.origin_residue`
    leaves for the next verify of the same erasure."""

    file: str
    hits: Hits
    """Hits in the file that were not in live cells (judged again by verify)."""
    live: np.ndarray
    """Offsets of the hits that lay in live cells: on a page unchanged since, the same
    bytes of the same live cell (a row's delete or a freed page rewrites its page, zeroed
    under ``secure_delete``), so verify counts them without judging them again."""


class Verifier:
    """Checks a forget's evidence later. Handed the origin, the read paths, the fingerprinter
    and the store directory; it takes no store lock, so reads go on while it runs."""

    def __init__(
        self,
        origin: Origin,
        paths: Sequence[ReadPath],
        fingerprinter: Fingerprinter,
        root: str,
        clock: Callable[[], float] = time.time,
    ):
        self._origin = origin
        self._paths = list(paths)
        self._fp = fingerprinter
        self._root = root
        self._clock = clock
        self._clean: dict[str, Any] = {}
        self._clean_mu = threading.Lock()
        """Per handle, the origin's scan token of a scan by :meth:`origin_residue` that found
        no residue of it (in this process): verify rescans only what changed since."""

    def _stamped(self, checks: list[Check]) -> list[Check]:
        """Each check's time as the store's clock tells it (durations stay measured)."""
        now = round(self._clock(), 6)
        return [dataclasses.replace(c, at=now) for c in checks]

    def verify(
        self, handle: str, receipt: dict, evidence: dict | None, tenant: str | None, previous_proof: dict | None
    ) -> tuple[str, list[Check], int, list[str], dict[str, CopyState]]:
        """Run every check; returns (level, checks, bytes scanned, files scanned, copies)."""
        checks: list[Check] = []
        epoch = receipt["epoch"]
        if evidence is None:
            checks.append(
                check(
                    "evidence",
                    "unreadable",
                    "cannot_verify",
                    "this erasure has no recorded evidence (made by an older efface); only its receipt can be shown",
                    time.time(),
                    0.0,
                )
            )
            stamped = self._stamped(checks)
            copy = CopyState("cannot_verify", "this erasure has no recorded evidence", stamped[0].at)
            return "intent", stamped, 0, [], {self.local_copy(): copy}
        erased = blob_ids(evidence["erased_ids"])
        quarantined = blob_ids(evidence["quarantined_ids"])
        checks += self._origin_probes(erased, quarantined)
        kept = self._origin.path_evidence(handle)
        for path in self._paths:
            probe = path.probe(tenant, erased, kept.get(path.name, b""))
            if probe is not None:
                checks.append(probe)
        structural = [p.check_erased(tenant, epoch, erased) for p in self._paths]
        structural += self._origin.erased_checks(epoch)  # the origin's own, named by it
        checks += structural
        scanned, files = 0, list[str]()
        if evidence["fingerprints"] is None:
            where = f"ledger seq {previous_proof['seq']}" if previous_proof else "an earlier verification"
            checks.append(
                check(
                    "bytes",
                    "erased",
                    "recorded",
                    f"no fingerprint was found in any file by {where}; the fingerprints were "
                    "then deleted, as they must not outlive the proof",
                    time.time(),
                    0.0,
                )
            )
        elif all(c.outcome == "pass" for c in structural):
            found, scanned, files = self._bytes(evidence["fingerprints"], tenant, handle)
            checks.append(found)
        else:
            checks.append(
                check(
                    "bytes",
                    "erased",
                    "fail",
                    "not scanned yet: an artifact above still holds or may hold the erased "
                    "bytes (run compact(), or wait for the compactor)",
                    time.time(),
                    0.0,
                )
            )
        copies = {self.local_copy(): _local_state(checks[-1], scanned)}
        if isinstance(self._origin, CopyChecks):
            blob = evidence["fingerprints"]
            items = None if blob is None else Fingerprints.from_blob(blob).items
            tally = [0]
            scan = None if blob is None else self._scan_fn(blob, tally)
            for name, state, c in self._origin.copy_checks(epoch, items, scan):
                copies[name] = state
                checks.append(c)
            scanned += tally[0]
        backups = backups_check(receipt["body"].get("backups"))
        if backups is not None:
            checks.append(backups)
            copies["backups"] = backups_state(receipt["body"].get("backups"), backups)
        checks = self._stamped(checks)
        at = checks[-1].at if checks else round(self._clock(), 6)
        copies = {k: dataclasses.replace(c, checked_at=at) for k, c in copies.items()}
        level = "intent"
        if all(c.outcome in ("pass", "recorded") for c in checks if c.rung == "unreadable"):
            level = "unreadable"
            if all(c.outcome in ("pass", "recorded") for c in checks if c.rung == "erased") and allows_erased(copies):
                level = "erased"
        return level, checks, scanned, files, copies

    def copy_names(self) -> tuple[str, tuple[str, ...]]:
        """The copies of the store's data a verification reports, besides the backups: the
        store's own directory's, and those the origin holds elsewhere (:class:`CopyChecks`)."""
        server = tuple(self._origin.copy_names()) if isinstance(self._origin, CopyChecks) else ()
        return self.local_copy(), server

    def local_copy(self) -> str:
        """The name of the copy the store's own directory holds: ``store``; ``cache`` where
        the origin's data lives elsewhere (the process's derived files, on PostgreSQL)."""
        return "cache" if isinstance(self._origin, CopyChecks) else "store"

    def _scan_fn(self, blob: bytes, tally: list[int]) -> ScanFn:
        """A scan of files for what a database's files can hold of this erasure (the kinds
        :data:`efface.origin.postgres.maintenance.SCANNED_KINDS` names), reading copies of
        the files (a server may shorten them under the scan)."""
        fp = Fingerprints.from_blob(blob).only(SERVER_KINDS)

        def scan(files: list[str], root: str, live: Collection[bytes] = ()) -> tuple[dict[str, dict[str, int]], int]:
            copies: dict[str, bytes] = {}
            found, n = self._fp.scan_arrays(files, fp, root, copies, read_copies=True)
            tally[0] += n
            found = found.take(_whole(self._fp, fp, found, Reader(root, copies)))
            found = found.take(anchored_vectors(fp, found))
            if live:
                found = found.take(~live_names(self._fp, fp, found, live))
            out: dict[str, dict[str, int]] = {}
            for f, k in zip(found.file.tolist(), found.kind.tolist(), strict=True):
                per = out.setdefault(found.files[f], {})
                per[found.kinds[k]] = per.get(found.kinds[k], 0) + 1
            return out, n

        return scan

    def _origin_probes(self, erased: list[int], quarantined: list[int]) -> list[Check]:
        o = self._origin
        t0 = time.time()
        rows = o.residual_rows(erased)
        # the origin's copy of liveness and vectors in memory (.origin.sqlite.liveness), if any
        liveness = o.liveness
        in_memory = liveness.holding(erased) if liveness is not None else 0
        if rows or in_memory:
            found = [f"{t}: {n}" for t, n in rows.items()] + ([f"in memory: {in_memory}"] if in_memory else [])
            detail = f"rows still name erased records: {', '.join(found)}"
        else:
            detail = f"{len(erased)} erased record ids: no row in records, claims, lineage, mentions or quarantine"
            if liveness is not None:
                detail += ", none counted live or held as a vector in memory"
        out = [check("origin.by_id", "unreadable", "fail" if rows or in_memory else "pass", detail, t0)]
        t0 = time.time()
        held = o.still_quarantined(quarantined)
        out.append(
            check(
                "derived.quarantine",
                "unreadable",
                "pass",
                f"{len(quarantined)} derived records were quarantined; {held} are still held back, the rest were "
                "re-derived, released by a recorded decision, or erased",
                t0,
            )
        )
        return out

    def _bytes(self, blob: bytes, tenant: str | None, handle: str) -> tuple[Check, int, list[str]]:
        t0 = time.time()
        fp = Fingerprints.from_blob(blob)
        root = self._root
        # No checkpoint here: page images written since the erasure's checkpoint stay in the WAL,
        # where a hit counts as residue unless the whole live value it belongs to lies there
        # (see .residue): a window-by-window excuse once passed residue from the unallocated
        # gap of live pages.
        physical = self._origin.physical
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
        copies: dict[str, bytes] = {}
        only, kept, earlier = self._unchanged(handle, physical)
        found, scanned = self._fp.scan_arrays(files, fp, root, copies, only)
        carried = 0
        if earlier is not None:
            found = _merged(found, earlier, only)
            carried = int(np.count_nonzero(_outside(earlier[1].live, (only or {}).get(earlier[0], []))))
        rel = [os.path.relpath(f, root) for f in files]
        reader = Reader(root, copies)
        try:
            is_vector = np.isin(found.kind, [i for i, k in enumerate(found.kinds) if k == "vector"])
            vectors = found.take(is_vector).objects()
            judged = self._judge(found.take(~is_vector), fp, reader, physical, handle)
            judged.live += carried
            # A vector copy can only sit in the files of the path that holds live vectors.
            windows = [reader.read(h.file, h.offset, h.width) for h in vectors]
            live: set[bytes] = set()
            for path in self._paths:
                live |= path.live_copies(tenant, sorted(set(windows)))
            for h, w in zip(vectors, windows, strict=True):
                if w in live and any(p.may_hold_live(h.file) for p in self._paths):
                    judged.live += 1
                else:
                    judged.residue.append(h)
        finally:
            reader.close()
        residue = judged.residue
        shared = judged.live
        elapsed = time.time() - t0
        short = fp.too_short.get("text", 0)
        unchecked = {k: n for k, n in fp.too_short.items() if k != "text"}
        notes = (
            (f"; {shared} windows are held by live records (retained or re-written copies)" if shared else "")
            + (
                f"; {judged.stray} windows of short items occur where the item is not whole (a purpose, "
                "a name, a schema or full-text word)"
                if judged.stray
                else ""
            )
            + (
                f"; {judged.others} windows lie in whole items of other erasures whose bytes wait for the compactor"
                if judged.others
                else ""
            )
            + kept
        )
        mbs = scanned / elapsed / 1e6 if elapsed > 0 else 0.0
        if residue:
            where: dict[str, int] = {}
            for h in residue:
                where[f"{h.file} ({h.kind})"] = where.get(f"{h.file} ({h.kind})", 0) + 1
            detail = f"{len(residue)} fingerprint windows of erased content found: " + ", ".join(
                f"{k}: {n}" for k, n in sorted(where.items())
            )
            outcome = "fail"
        elif short:
            detail = (
                f"{short} erased texts are shorter than 8 bytes (or mostly zero bytes): too short to tell their "
                "bytes from any other bytes, so their absence cannot be shown; not fingerprinted: "
                f"{', '.join(f'{n} {k}' for k, n in sorted(fp.too_short.items()))}; "
                f"the other items were not found in {len(files)} files" + notes
            )
            outcome = "cannot_verify"
        else:
            items = ", ".join(f"{n} {k}" for k, n in sorted(fp.items.items()))
            detail = (
                f"none of {fp.count()} fingerprints ({items}) found in {len(files)} files, "
                f"{scanned:,} bytes at {mbs:,.0f} MB/s"
                + notes
                + (
                    "; not checkable (under 8 bytes or too uniform): "
                    + ", ".join(f"{n} {k}" for k, n in sorted(unchecked.items()))
                    if unchecked
                    else ""
                )
            )
            outcome = "pass"
        return check("bytes", "erased", outcome, detail, t0, elapsed), scanned, rel

    def _unchanged(
        self, handle: str, physical: Any
    ) -> tuple[dict[str, list[tuple[int, int]]] | None, str, tuple[str, Earlier] | None]:
        """The byte ranges of the origin's database file to scan again, when ``wait`` scanned
        it for this erasure in this process and found no residue: the pages written since
        (by the origin's page log), each widened by a word on both sides for the windows
        across a page seam; every other page holds the bytes that scan read: its hits there
        that lay in live cells still do, the others are handed back to be judged again now.
        None: scan it all."""
        with self._clean_mu:
            clean = self._clean.pop(handle, None)  # once: a later verify reads every byte again
        if clean is None or physical is None:
            return None, "", None
        token, earlier = clean
        changed = physical.changed_pages(token)
        if changed is None:
            return None, "", None
        path, ps, pages = changed
        try:
            total = os.path.getsize(path) // ps
        except OSError:
            return None, "", None
        pages = pages[pages <= total]
        ranges: list[tuple[int, int]] = []
        for p in pages.tolist():
            lo, hi = max(0, (p - 1) * ps - 8), p * ps + 8
            if ranges and lo <= ranges[-1][1]:
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
        note = (
            f"; {os.path.relpath(path, self._root)}: {total - pages.size:,} of {total:,} pages not read again: "
            "unchanged since wait() scanned them for this erasure and found no residue (every write to "
            "the file since went through this process's SQLite writer, whose commits log the pages they "
            f"write), their {len(earlier.live):,} hits in live cells then still in them, the other "
            f"{len(earlier.hits):,} judged again now; the {pages.size:,} pages written since, "
            "and every other file, scanned now"
        )
        return {path: ranges}, note, (path, earlier)

    def origin_residue(self, blob: bytes, handle: str) -> bool:
        """Whether the origin's own files hold residue of these fingerprints: the byte check
        of :meth:`_bytes`, over the origin's files only, judged the same way, recording
        nothing. ``Store.wait`` asks it before it says the bytes are gone, and has the
        origin rewrite its files when they hold any (a stale copy of an erased cell that no
        index rebuild or checkpoint reaches)."""
        physical = self._origin.physical
        if physical is None:
            return False
        fp = Fingerprints.from_blob(blob)
        files = [f for f in physical.files() if os.path.exists(f)]
        copies: dict[str, bytes] = {}
        token = physical.scan_token() if physical is not None else None
        found, _scanned = self._fp.scan_arrays(files, fp, self._root, copies)
        # i8 vectors live in the ANN files
        found = found.take(~np.isin(found.kind, [i for i, k in enumerate(found.kinds) if k == "vector"]))
        db = os.path.relpath(files[0], self._root) if files else ""
        is_db = found.file == (found.files.index(db) if db in found.files else -1)
        live = np.zeros(len(found), dtype=bool)
        residue = False
        if len(found):
            reader = Reader(self._root, copies)
            masks: list[np.ndarray] = []
            try:
                residue = bool(self._judge(found, fp, reader, physical, handle, masks).residue)
            finally:
                reader.close()
            if masks:
                live = masks[0]
        if not residue and token is not None and int(np.count_nonzero(is_db)) <= KEEP_HITS:
            # The hits in live cells of pages that stay unchanged stay in live cells: verify
            # counts them without judging them again; the others it judges again.
            kept = Earlier(db, found.take(is_db & ~live), found.offset[is_db & live])
            with self._clean_mu:
                while len(self._clean) >= KEEP_SCANS:  # a bound: a dropped scan only costs a full one
                    self._clean.pop(next(iter(self._clean)))
                self._clean[handle] = (token, kept)
        return residue

    def _judge(
        self,
        found: Hits,
        fp: Fingerprints,
        reader: Reader,
        physical: Any,
        handle: str,
        live_out: list[np.ndarray] | None = None,
    ) -> Judgement:
        """Judge the (non-vector) hits of a scan: first, with array operations, those in the
        bytes of live cells of the origin's database file (most of them, in a big store: a
        window shared with live records is met once per record), then the rest one by one
        (see :mod:`.residue`). One read snapshot holds for both. ``live_out`` receives the
        mask of the hits found in live cells."""
        if not len(found):
            return Judgement()
        cells_of = physical.live_cells if physical is not None else None
        with cells_of(self._root) if cells_of is not None and fp.site_h else contextlib.nullcontext() as cells:
            live = in_live_cells(self._fp, found, cells)
            if live_out is not None:
                live_out.append(live)
            rest_hits = found.take(~live)
            stray = strays(self._fp, fp, rest_hits, reader) if fp.site_h else np.zeros(len(rest_hits), dtype=bool)
            rest = rest_hits.take(~stray).objects()
            regions = physical.live_regions(self._root) if physical is not None and rest else None
            if fp.site_h:
                judged = Judge(
                    self._fp,
                    fp,
                    reader,
                    regions,
                    physical.live_values if physical is not None else None,
                    (lambda: physical.pending_fingerprints(handle)) if physical is not None else list,
                ).judge(rest)
            else:  # fingerprints made by an older efface: window by window
                judged = self._legacy(rest, reader, physical, regions)
        judged.live += int(np.count_nonzero(live))
        judged.stray += int(np.count_nonzero(stray))
        return judged

    @staticmethod
    def _legacy(hits: list[Hit], reader: Reader, physical: Any, regions: Any) -> Judgement:
        """Fingerprints of an older efface keep no sites: a hit is a live copy when a live
        record holds its window and it lies in a live page (as that efface judged it)."""
        out = Judgement()
        windows = [reader.read(h.file, h.offset, h.width) for h in hits]
        live: set[bytes] = set()
        if physical is not None:
            live = physical.live_holding(set(windows), embeddings=any(h.kind == "embedding" for h in hits))
        for h, w in zip(hits, windows, strict=True):
            if w in live and regions is not None and regions.contains(h.file, h.offset, h.width, reader.read):
                out.live += 1
            else:
                out.residue.append(h)
        return out


def _outside(offsets: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Which offsets lie in none of the sorted, disjoint ``[start, end)`` ranges."""
    if not ranges:
        return np.ones(len(offsets), dtype=bool)
    starts = np.asarray([r[0] for r in ranges], dtype=np.int64)
    ends = np.asarray([r[1] for r in ranges], dtype=np.int64)
    at = np.searchsorted(starts, offsets, side="right") - 1
    return ~((at >= 0) & (offsets < np.where(at >= 0, ends[np.maximum(at, 0)], 0)))


def _merged(found: Hits, earlier: tuple[str, Earlier], only: dict[str, list[tuple[int, int]]] | None) -> Hits:
    """The hits of a scan limited to ``only`` in one file, plus an earlier full scan's hits
    in that file outside those ranges (the bytes there are unchanged since it) that were
    not in live cells."""
    path, kept = earlier
    old = kept.hits
    name = next((n for n in old.files if path.endswith(n)), None)
    if name is None or name not in found.files or not len(old):
        return found
    keep = old.take(_outside(old.offset, (only or {}).get(path, [])))
    index = found.files.index(name)
    return Hits(
        found.files,
        found.kinds,
        np.concatenate([found.file, np.full(len(keep), index, dtype=np.int64)]),
        np.concatenate([found.offset, keep.offset]),
        np.concatenate([found.width, keep.width]),
        np.concatenate([found.kind, keep.kind]),
        np.concatenate([found.hash, keep.hash]),
    )


def backups_check(state: str | None) -> Check | None:
    """Backups taken before the erasure (none: no check). ``shredded``: the keys that sealed
    its part of them were destroyed in its transaction, and the byte scan above looks for
    the key bytes too. ``ledger-replay``: they can still be decrypted with keys that live."""
    if state is None:
        return None
    t0 = time.time()
    if state in ("shredded", "absorbed"):
        return check(
            "backups",
            "erased",
            "pass",
            "every backup taken before this erasure holds its content only under subject keys "
            "destroyed in the erasure's transaction (crypto-shredding)"
            if state == "shredded"
            else "no claim was released: no backup holds anything of this erasure",
            t0,
            0.0,
        )
    return check(
        "backups",
        "erased",
        "fail",
        "backups taken before this erasure hold content it erased under subject keys that live "
        "(the subjects keep other claims); a restore replays the ledger and does not bring it "
        "back, but those bytes are not crypto-shredded",
        t0,
        0.0,
    )


def _local_state(check: Check, scanned: int) -> CopyState:
    """The store directory's copy, from its byte check (the last check so far)."""
    if check.outcome in ("pass", "recorded"):
        return CopyState("erased", check.detail)
    if check.outcome == "fail" and scanned:
        return CopyState("present", check.detail)
    return CopyState("cannot_verify", check.detail)


def backups_state(state: str | None, check: Check) -> CopyState:
    if state == "shredded":
        return CopyState("shredded", check.detail)
    if state == "absorbed":
        return CopyState("erased", check.detail)
    return CopyState("cannot_verify", check.detail)


def _whole(fpr: Fingerprinter, fp: Fingerprints, found: Hits, reader: Reader) -> np.ndarray:
    """Which hits count in a scan of a database server's files: every hit of a long item (a
    ciphertext, a wrapped key, a vector: its windows are its own), and a hit of a short one (a
    subject name, which shares its first bytes with every other: "subject-03", "subject-04")
    only where the whole item lies around it."""
    keep = ~strays(fpr, fp, found, reader)
    for i in np.flatnonzero(keep).tolist():
        sites = fp.sites_all(int(found.hash[i]))
        if not sites or any(n >= SHORT for *_, n in sites):
            continue
        f, off = found.files[int(found.file[i])], int(found.offset[i])
        keep[i] = any(fpr.whole(reader.read(f, off - o, n)) == fp.whole(kind, item) for kind, item, o, n in sites)
    return keep
