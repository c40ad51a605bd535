"""Run an audit: copy the store, forget through its own API, probe every read path, scan
every byte, optionally run its own maintenance and look again."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from .kinds import make
from .model import AuditReport, ByteScan, Cell, ProbeResult, Selection, Stage, Targets
from .scan import Fingerprints, scan_tree

_REPR_MAX = 300


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 1] + "…"


def _bytes_cell(scan: ByteScan, n: int, has_vectors: bool, baseline: ByteScan) -> Cell:
    name = "bytes in the store's files"
    if not scan.clean:
        where = "; ".join(
            f"{r.file}: {r.texts}/{n} texts ({r.texts_whole} whole), {r.vectors}/{n} vectors"
            + (f" [decoded by {r.decoded_by}]" if r.decoded_by else "")
            for r in scan.files
        )
        return Cell(name, "unreadable", f"{scan.texts}/{n} texts and {scan.vectors}/{n} vectors remain: {where}")
    complete = baseline.texts == n and (baseline.vectors == n or not has_vectors)
    scanned = f"{scan.files_scanned} files, {scan.bytes_scanned} bytes scanned"
    if complete:
        return Cell(name, "erased", f"no target text or vector left ({scanned}); all {n} were found before the delete")
    return Cell(
        name,
        "unreadable",
        f"nothing found ({scanned}), but before the delete only {baseline.texts}/{n} texts and "
        f"{baseline.vectors}/{n} vectors were detectable in the bytes: absence proves nothing for the rest",
    )


def _stage(
    name: str,
    calls: list,
    seconds: float,
    probes: list[ProbeResult],
    scan: ByteScan,
    n: int,
    has_vectors: bool,
    baseline: ByteScan,
) -> Stage:
    cells = [Cell(p.path, p.level, f"{p.returned}/{p.checked} targets returned ({p.detail})") for p in probes]
    files = _bytes_cell(scan, n, has_vectors, baseline)
    cells.append(files)
    # A read path that returns a target caps the stage at intent; when none does, the bytes
    # decide between unreadable and erased.
    level = "intent" if any(p.returned for p in probes) else files.level
    return Stage(
        name,
        tuple(f"{c.name} -> {_short(c.returned)}" for c in calls),
        round(seconds, 4),
        tuple(probes),
        scan,
        tuple(cells),
        level,
    )


def run_audit(
    kind: str,
    path: str | os.PathLike,
    selection: Selection,
    *,
    collection: str | None = None,
    in_place: bool = False,
    maintenance: bool = False,
    workdir: str | None = None,
    **driver_options: Any,
) -> AuditReport:
    """Audit a forget on the store at ``path`` (a copy of it unless ``in_place``).

    Returns the report; the copy is removed before returning, and the targets' texts and
    vectors exist only in this function's memory."""
    src = Path(path)
    if not src.is_dir():
        raise InvalidInput("the store path is not a directory: pass the store's directory")
    if (selection.subject is None) == (selection.ids is None):
        raise InvalidInput("name exactly one of --subject or --ids")
    if selection.ids is not None and not selection.ids:
        raise InvalidInput("--ids is empty: give at least one id")
    driver = make(kind, collection, **driver_options)
    started = time.time()
    tmp = None
    try:
        if in_place:
            root = src
        else:
            tmp = tempfile.mkdtemp(prefix="efface-audit-", dir=workdir)
            root = Path(tmp) / "store"
            shutil.copytree(src, root, symlinks=True)
        report = _audit(driver, root, selection, maintenance)
        return AuditReport(
            kind=kind,
            library=driver.library(),
            collection=driver.collection,
            in_place=in_place,
            started_at=started,
            **report,
        )
    finally:
        try:
            driver.close()
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


def _look(
    name: str,
    calls: list,
    seconds: float,
    driver,
    root: Path,
    selection: Selection,
    targets: Targets,
    fp: Fingerprints,
    baseline: ByteScan,
) -> Stage:
    driver.open(root)
    try:
        probes = driver.probes(selection, targets)
    finally:
        driver.close()
    scan = scan_tree(root, fp, driver.decoders())
    return _stage(name, calls, seconds, probes, scan, len(targets.ids), bool(len(targets.vectors)), baseline)


def _audit(driver, root: Path, selection: Selection, maintenance: bool) -> dict:
    driver.open(root)
    targets: Targets = driver.targets(selection)
    other_texts, other_vectors = driver.others(targets)
    driver.close()
    fp = Fingerprints(targets, other_texts, other_vectors)
    del other_texts, other_vectors
    baseline = scan_tree(root, fp, driver.decoders())

    # Each stage: the store's calls, then close (flushes what the store persists; timed
    # with the calls), then probes on a freshly opened store, then the byte scan.
    driver.open(root)
    t0 = time.perf_counter()
    call = driver.delete(selection, targets)
    driver.close()
    seconds = time.perf_counter() - t0
    stages = [_look("delete", [call], seconds, driver, root, selection, targets, fp, baseline)]
    notes = list(getattr(driver, "notes", lambda: [])())
    if maintenance:
        t0 = time.perf_counter()
        calls = driver.maintenance(root)
        seconds = time.perf_counter() - t0
        if not calls:
            notes.append(f"{driver.kind} has no maintenance call of its own; the maintenance stage only looks again")
        stages.append(_look("maintenance", calls, seconds, driver, root, selection, targets, fp, baseline))
        # Deeper calls some libraries offer beyond their usual maintenance, each its own
        # clearly named stage (e.g. Lance's compaction with every deletion materialised).
        for name, step in getattr(driver, "extra_maintenance", lambda: [])():
            t0 = time.perf_counter()
            calls = step(root)
            seconds = time.perf_counter() - t0
            stages.append(_look(name, calls, seconds, driver, root, selection, targets, fp, baseline))
    return {
        "targets": len(targets.ids),
        "detectable_texts": baseline.texts,
        "detectable_vectors": baseline.vectors,
        "delete_returned": _short(call.returned),
        "stages": tuple(stages),
        "overall": stages[-1].level,
        "notes": tuple(notes),
    }
