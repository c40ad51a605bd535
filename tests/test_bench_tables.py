"""docs/benchmarks.md's generated tables are what bench/tables/current.py prints from bench/results/.

The script reads only the result files (no store, no model), so this runs in well under a second.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _current():
    spec = importlib.util.spec_from_file_location("bench_tables_current", ROOT / "bench" / "tables" / "current.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_document_matches_the_result_files():
    current = _current()
    assert current.problems((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")) == []


def test_a_changed_figure_or_a_missing_table_is_found():
    current = _current()
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "| **0.087 / 0.107** |" in text
    (wrong,) = current.problems(text.replace("| **0.087 / 0.107** |", "| **0.080 / 0.107** |", 1))
    assert "'erasure' differs" in wrong
    start = text.index("<!-- table: quality")
    end = text.index("<!-- /table -->", start) + len("<!-- /table -->")
    assert current.problems(text[:start] + text[end:]) == ["table 'quality' is not in the document"]
    assert current.render(text) == text


def test_every_source_file_is_in_the_repository():
    current = _current()
    for source in current.SOURCES.values():
        for rel in [source] if isinstance(source, str) else source:
            assert (current.RESULTS / rel).is_file(), rel
