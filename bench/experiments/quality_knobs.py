#!/usr/bin/env python
"""bench_quality.py with two of recall's knobs set from the environment, to measure what
they buy (issue #11 item 2; not a benchmark of record):

    BUDGET=40000 EF=256 PYTHONPATH=src python bench/experiments/quality_knobs.py \
        --efface-only --corpora debian --embedders minilm > OUT.json

``BUDGET``: the full-text leg's posting budget (``paths/fts.py``, POSTING_BUDGET);
``EF``: the ANN search width (``paths/ann.py``, EXPANSION_SEARCH). Unset: as shipped.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import efface.paths.ann as ann  # noqa: E402
import efface.paths.fts as fts  # noqa: E402

fts.POSTING_BUDGET = int(os.environ.get("BUDGET", fts.POSTING_BUDGET))
ann.EXPANSION_SEARCH = int(os.environ.get("EF", ann.EXPANSION_SEARCH))
print(f"[knobs] POSTING_BUDGET {fts.POSTING_BUDGET}, EXPANSION_SEARCH {ann.EXPANSION_SEARCH}", file=sys.stderr)
sys.argv = [str(BENCH / "bench_quality.py"), *sys.argv[1:]]
runpy.run_path(str(BENCH / "bench_quality.py"), run_name="__main__")
