"""The one normaliser and tokeniser: full-text search, mention detection and evidence.

:func:`fold` is how efface compares text, wherever it does: the words the full-text index
holds (SQLite's FTS5 is fed :func:`index_text`, not the text as written), the identifiers a
subject registers, the texts they are searched in, and every query. So a name written with
a soft hyphen or a zero-width joiner inside it, or in full-width letters, is the same name
on write, on registration and on search, whatever the order. It is Unicode's NFKC_Casefold
(compatibility forms folded, case folded, Default_Ignorable_Code_Point removed) with accents
stripped on top, which is what SQLite's ``unicode61 remove_diacritics 2`` does to a word.

One invisible character is not simply removed: a zero-width space (U+200B) between two
letters or digits separates them as a space would ("Alice\u200bMartin", as text pasted from a
chat app carries it, is "alice martin"). Unicode's word segmentation (UAX #29) breaks words
there too, while it keeps a soft hyphen, a joiner or a word joiner inside its word: those
join, as before.

Only matching folds: a record's text is stored and read back exactly as written.

Words are runs of letters and digits (``_`` splits) of the folded text.
"""

from __future__ import annotations

import re
import unicodedata

import regex

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}+")
"""Unicode's Default_Ignorable_Code_Point set (soft hyphen, zero-width space, joiner and
non-joiner, word joiner, byte-order mark, variation selectors, tag characters, ...), as the
``regex`` module's Unicode tables define it, so the set follows Unicode releases instead of
a hand list."""
_ZWSP_BETWEEN = regex.compile(
    r"(?<=[\p{L}\p{N}][\p{M}\p{Default_Ignorable_Code_Point}]*)\u200b(?=\p{Default_Ignorable_Code_Point}*[\p{L}\p{N}])"
)
"""A zero-width space with a letter or digit on each side (past accents and other invisible
characters): a word break, as a space."""
MAX_QUERY_TERMS = 32


def spaced(text: str) -> str:
    """``text`` with each zero-width space between letters made a space (one character for
    one, so positions in it are positions in ``text``)."""
    return _ZWSP_BETWEEN.sub(" ", text) if "\u200b" in text else text


def fold(text: str) -> str:
    """Case, accents, compatibility forms and invisible characters folded, so 'Zoë',
    'zoe', its full-width form and 'Zo\\u00ade' share features (a zero-width space between
    letters: a space, see :func:`spaced`)."""
    if text.isascii():  # the common case, without a per-character Python loop
        return text.lower()
    # NFKC first (full-width and other compatibility forms, so casefold sees real letters),
    # then casefold, then decompose to strip accents; NFC puts back what is not an accent
    # (Hangul syllables), so folding twice changes nothing.
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", spaced(text)).casefold())
    kept = _IGNORABLE.sub("", "".join(c for c in decomposed if not unicodedata.combining(c)))
    return unicodedata.normalize("NFC", kept)


def words(text: str) -> list[str]:
    """Every word of ``text``, in order, folded."""
    return _WORD.findall(fold(text))


def index_text(text: str) -> str:
    """What a word index is fed for ``text``: its folded words, space-separated. An index
    with a tokenizer of its own (FTS5) then holds exactly the words :func:`words` sees."""
    return " ".join(words(text))


def query_words(text: str) -> list[str]:
    """The distinct words of a query, in order, at most :data:`MAX_QUERY_TERMS`."""
    return list(dict.fromkeys(words(text)))[:MAX_QUERY_TERMS]


STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "m",
        "d",
        "ll",
        "re",
        "ve",
        "don",
        "doesn",
        "didn",
        "isn",
        "aren",
        "wasn",
        "weren",
        "hasn",
        "haven",
        "hadn",
        "wouldn",
        "shouldn",
        "couldn",
        "mustn",
    ]
)
"""English function words (the Snowball project's list, which Lucene's and tantivy's English
analysers use, with contractions as :func:`words` splits them: "don't" is "don" and "t"). A
query's are dropped before the full-text leg scores it (:func:`content_words`); records are
indexed with every word, and the erasure evidence keeps every word."""


def content_words(query: list[str]) -> list[str]:
    """The words of ``query`` (:func:`query_words`) less :data:`STOP_WORDS`; all of them
    when nothing else is left ("who is it?" still finds what its words find)."""
    kept = [w for w in query if w not in STOP_WORDS]
    return kept or query
