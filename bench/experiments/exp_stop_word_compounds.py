#!/usr/bin/env python
"""capture_fusion.py with a variant of the text leg's query stop words (issue #36, session 26;
not a benchmark of record): does keeping a stop word win back the queries session 25's stop
words cost the man pages and Debian ("Off-the-Record Messaging plugin for Pidgin" loses "off")?

    PYTHONPATH=src python bench/experiments/exp_stop_word_compounds.py VARIANT SET EMBEDDER OUT.pkl [DOCS QUERIES]

VARIANT: ``shipped`` (efface.text.content_words); ``compound`` (a stop word that is part of a
word joined by ``-``, ``/`` or an apostrophe in the question is kept: "off-the-record",
"to/from", "don't"); ``hyphen`` (joined by ``-`` only); ``few`` (every word kept unless at
least two content words remain). Compare the captures with exp_fusion_calibration.py's
``text_leg`` and what recall returned (``got``).
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

from efface import text as T
from efface.paths import fts as F

variant = sys.argv.pop(1)
JOINED = {"compound": re.compile(r"[^\W_]+(?:[-/'’][^\W_]+)+"), "hyphen": re.compile(r"[^\W_]+(?:-[^\W_]+)+")}


class _Words(list):
    raw = ""


def query_words(text: str) -> list[str]:
    out = _Words(T.query_words(text))
    out.raw = text
    return out


def content_words(query: list[str]) -> list[str]:
    if variant == "shipped":
        return T.content_words(list(query))
    if variant == "few":
        kept = [w for w in query if w not in T.STOP_WORDS]
        return kept if len(kept) >= 2 else list(query)
    joined = {w for m in JOINED[variant].findall(T.fold(getattr(query, "raw", ""))) for w in T.words(m)}
    kept = [w for w in query if w not in T.STOP_WORDS or w in joined]
    return kept or list(query)


F.query_words = query_words
F.content_words = content_words
sys.argv = ["capture_fusion.py", *sys.argv[1:]]
runpy.run_path(str(Path(__file__).with_name("capture_fusion.py")), run_name="__main__")
