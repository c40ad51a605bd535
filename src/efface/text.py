"""One normaliser and tokeniser for full-text search, mentions' candidates and evidence.

Words are what SQLite's ``unicode61 remove_diacritics 2`` tokenizer sees: runs of letters
and digits (``_`` splits), case-folded, accents stripped. Every origin's word index uses the
same rule, so a query, a probe and an index agree on what a word is.
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_QUERY_TERMS = 32


def fold(text: str) -> str:
    """Lower-case and strip accents, so 'Zoë' and 'zoe' share features."""
    if text.isascii():  # the common case, without a per-character Python loop
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str) -> list[str]:
    """Every word of ``text``, in order, folded."""
    return _WORD.findall(fold(text))


def query_words(text: str) -> list[str]:
    """The distinct words of a query, in order, at most :data:`MAX_QUERY_TERMS`."""
    return list(dict.fromkeys(words(text)))[:MAX_QUERY_TERMS]
