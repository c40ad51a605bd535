"""Input checks shared by every interface. Each failure is a typed, actionable error
that never repeats the offending value (it may be personal data)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidInput, UnknownBasis
from .model import BASES
from .paths.turns import Where, seconds

MAX_KEY_BYTES = 1024
MAX_TEXT_BYTES = 1 << 20
MAX_NAME_BYTES = 256
MAX_METADATA_BYTES = 64 << 10
MAX_SOURCES = 1000
MAX_IDENTIFIERS = 1000
"""Identifiers one subject is registered with: its names, e-mails, phones and handles. More is
no person's, and every one is matched in every text and fingerprinted at its forget."""

MAX_METADATA_DEPTH = 64
MAX_HANDLE_BYTES = 256
MAX_REASON_CHARS = 500

# fullmatch, never `$`: `$` also matches before a final newline, so "support\n" got in
_PURPOSE = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")


def _utf8(value: Any, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidInput(f"{what} must be str, not bytes: decode it (e.g. .decode('utf-8')) first")
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be str, not {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"{what} is not valid Unicode (it holds a lone surrogate, often from bytes decoded "
            "with errors='surrogateescape'); decode the source bytes with the right encoding"
        ) from None


def key(value: Any, what: str = "key") -> str:
    raw = _utf8(value, what)
    if not raw:
        raise InvalidInput(f"{what} must not be empty")
    if len(raw) > MAX_KEY_BYTES:
        raise InvalidInput(f"{what} is {len(raw)} bytes; the limit is {MAX_KEY_BYTES}: use a shorter key")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    return value


def text(value: Any) -> str:
    raw = _utf8(value, "text")
    if not value.strip():  # str.strip: Unicode whitespace too (bytes.strip knows only ASCII)
        raise InvalidInput("text must not be empty or blank: to remove a memory use forget()")
    if len(raw) > MAX_TEXT_BYTES:
        raise InvalidInput(f"text is {len(raw)} bytes; the limit is {MAX_TEXT_BYTES}: split it into several memories")
    if "\x00" in value:
        # NUL is no character of text, and zero bytes fill every file's free space: an erased
        # text of them could never be told apart from them, so its erasure could not be shown.
        raise InvalidInput("text must not contain NUL characters: strip them, or store binary data elsewhere")
    return value


def name(value: Any, what: str) -> str:
    """Tenants and subjects: any non-empty string up to 256 bytes."""
    raw = _utf8(value, what)
    if not value.strip():
        raise InvalidInput(f"{what} must not be empty")
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidInput(f"{what} is {len(raw)} bytes; the limit is {MAX_NAME_BYTES}")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    return value


def handle(value: Any) -> str:
    """An erasure's handle as a caller gives it back: a string (its shape is the store's
    business: one it never issued is NotFound, not bad input)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput("handle must be the string a receipt carries (receipt.handle)")
    raw = _utf8(value, "handle")
    if len(raw) > MAX_HANDLE_BYTES or "\x00" in value:
        raise InvalidInput("handle must be the string a receipt carries (receipt.handle)")
    return value


def reason(value: Any, what: str = "reason", *, blank: bool = False) -> str:
    """A stated reason (for ``keep``, a release): free text of at most 500 characters (not
    blank unless ``blank``), kept where it can be erased; the ledger records its keyed hash."""
    _utf8(value, what)
    if (not blank and not value.strip()) or len(value) > MAX_REASON_CHARS:
        raise InvalidInput(f"{what} must be text of {'at most ' if blank else '1-'}{MAX_REASON_CHARS} characters")
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    return value


def file_path(value: Any, what: str) -> str:
    """A file's location as a caller gives it (str or os.PathLike), made absolute, a leading
    ``~`` expanded as a shell would."""
    try:
        where = os.fspath(value)
    except TypeError:
        raise InvalidInput(f"{what} must be a file path (str or os.PathLike)") from None
    if not isinstance(where, str) or "\x00" in where:
        raise InvalidInput(f"{what} must be a file path given as str, without NUL characters")
    return os.path.abspath(os.path.expanduser(where))


def purpose(value: Any) -> str:
    _utf8(value, "purpose")
    if not _PURPOSE.fullmatch(value):
        raise InvalidInput(
            "purpose must be 1-64 characters: a letter, then letters, digits or _ . : - "
            "(for example 'support' or 'analytics')"
        )
    return value


def basis(value: Any) -> str:
    if not isinstance(value, str) or value not in BASES:
        raise UnknownBasis(f"basis must be one of {', '.join(sorted(BASES))}")
    return value


def ttl(value: Any) -> float | None:
    """Seconds (int/float) or a timedelta; None means no expiry."""
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput("ttl must be seconds (int or float) or a datetime.timedelta")
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float (10**400)
            seconds = math.inf
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput("ttl must be a positive, finite duration; to remove a memory now use forget()")
    return seconds


TURN_FIELDS = ("at", "speaker", "session")
"""Metadata fields recall filters and windows on (efface.paths.turns), checked at write."""

MAX_TURN_FIELD = 256
"""Characters a ``speaker`` or ``session`` may have."""


def _turn_fields(value: dict) -> dict:
    """``value`` with ``at`` as JSON (a ``datetime`` or ``date`` as ISO 8601), after checking
    the reserved fields: ``at`` a time, ``speaker`` and ``session`` non-empty strings."""
    for name in ("speaker", "session"):
        got = value.get(name)
        if name in value and (not isinstance(got, str) or not got.strip() or len(got) > MAX_TURN_FIELD):
            raise InvalidInput(f"metadata['{name}'] must be a non-empty string of at most {MAX_TURN_FIELD} characters")
    if "at" in value:
        at = value["at"]
        if seconds(at) is None:
            raise InvalidInput(
                "metadata['at'] must be a time: unix seconds, an ISO 8601 date or time "
                "('2018-05-08', '2018-05-08T14:30:00+02:00'; no zone means UTC) or a datetime"
            )
        if isinstance(at, _dt.date):  # a datetime is a date too
            value = {**value, "at": at.isoformat()}
    return value


def time(value: Any, what: str) -> float | None:
    """A recall bound (``after``, ``before``) as unix seconds; None stays None."""
    if value is None:
        return None
    got = seconds(value)
    if got is None:
        raise InvalidInput(f"{what} must be unix seconds, an ISO 8601 date or time, or a datetime")
    return got


def where(after: Any, before: Any, said_by: Any) -> Where | None:
    """Recall's turn filters (efface.paths.turns.Where), or None when none is given."""
    if after is None and before is None and said_by is None:
        return None
    if said_by is not None:
        said_by = name(said_by, "said_by")
    return Where(time(after, "after"), time(before, "before"), said_by)


def whole(value: Any) -> Any:
    """``value`` as an ``int`` when it is a whole number of any integer type (numpy's
    ``int64`` from an array is one; ``bool`` is not), else as given, for the caller's check."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def window(value: Any) -> int:
    value = whole(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 50:
        raise InvalidInput("window must be an int from 0 (no window) to 50: the turns each side of a hit")
    return value


def metadata(value: Any) -> str:
    """Returns the canonical JSON to store."""
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise InvalidInput("metadata must be a dict of JSON values")
    if not all(isinstance(k, str) for k in value):
        raise InvalidInput(_keys("metadata"))
    if "at" in value or "speaker" in value or "session" in value:
        value = _turn_fields(value)
    if not all(type(v) in _SCALARS for v in value.values()):  # flat metadata needs no depth check
        json_tree(value, "metadata")
    try:
        encoded = _canonical(value)
        raw = _utf8(encoded, "metadata")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput("metadata must hold only JSON values (str, int, float, bool, None, list, dict)") from None
    if len(raw) > MAX_METADATA_BYTES:
        raise InvalidInput(f"metadata is larger than {MAX_METADATA_BYTES} bytes as JSON")
    return encoded


_canonical = json.JSONEncoder(sort_keys=True, ensure_ascii=False, allow_nan=False).encode
"""``json.dumps`` with these options, without building an encoder per call (~1 us an item)."""

_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Value types with nothing nested inside (exact types: a subclass may be anything)."""


def _keys(what: str) -> str:
    return (
        f"{what} keys must be strings at every level, as JSON's are (a key 1 would come back as '1', "
        "and two keys could become one): convert them with str() first"
    )


def json_tree(value: dict, what: str) -> None:
    """Refuse a dict (``what``: metadata, a LangGraph value) nested deeper than
    MAX_METADATA_DEPTH, without recursing (the JSON encoder recurses, and 50,000 levels would
    raise RecursionError), or holding an object with a key that is not a string at any level
    (the JSON encoder turns 1, True or None into one)."""
    if not all(isinstance(k, str) for k in value):
        raise InvalidInput(_keys(what))
    level: list[Any] = [value]
    for _depth in range(MAX_METADATA_DEPTH):
        deeper: list[Any] = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, dict):
                    if not all(isinstance(k, str) for k in child):
                        raise InvalidInput(_keys(what))
                    deeper.append(child)
                elif isinstance(child, (list, tuple)):
                    deeper.append(child)
        level = deeper
        if not level:
            return
    raise InvalidInput(f"{what} is nested more than {MAX_METADATA_DEPTH} levels deep: flatten it")


def timeout(value: Any) -> float:
    """Seconds to wait at most: a finite number, 0 or more. Never None (no limit): an
    erasure may never reach ``erased`` (an older backup holds it), and a wait must end."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(
            "timeout must be a number of seconds (int or float), e.g. 30; there is no unlimited wait: "
            "call wait() again if it returns unfinished"
        )
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInput("timeout must be a finite number of seconds, 0 or more")
    return seconds


def sources(value: Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise InvalidInput("sources must be a list of keys, not a single string")
    if not isinstance(value, Iterable):
        raise InvalidInput("sources must be a list of keys")
    out = tuple(dict.fromkeys(key(v, "each source") for v in value))
    if len(out) > MAX_SOURCES:
        raise InvalidInput(f"a record may name at most {MAX_SOURCES} sources")
    return out


def k(value: Any) -> int:
    value = whole(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise InvalidInput("k must be an int from 1 to 1000")
    return value


def query(value: Any) -> str:
    raw = _utf8(value, "query")
    if not value.strip():
        raise InvalidInput("query must not be empty")
    if len(raw) > MAX_TEXT_BYTES:
        raise InvalidInput(f"query is larger than {MAX_TEXT_BYTES} bytes")
    return value


ITEM_FIELDS = frozenset({"key", "text", "subject", "purpose", "basis", "ttl", "metadata", "sources"})


def items(values: Any, *, defaults: Mapping[str, Any]) -> list[tuple]:
    """The items of a ``write_many``, each checked, with the keyword defaults applied:
    ``(key, text, subject, purpose, basis, ttl_s, metadata_json, sources)`` per item.
    ``defaults`` holds the ``subject``, ``purpose``, ``basis`` and ``ttl`` of the call."""
    if not isinstance(values, Iterable):
        raise InvalidInput("items must be a list of mappings with 'key' and 'text'")
    given = list(values)
    if not given:
        raise InvalidInput("write_many needs at least one item")
    prepared = []
    # A batch mostly repeats a few subjects, purposes, bases and ttls (often the call's
    # defaults): each distinct value is checked once. Keyed by type too, since True == 1.
    checked: dict[tuple, Any] = {}

    def once(check: Any, value: Any, *args: Any) -> Any:
        try:
            memo = (check, type(value), value)
            return checked[memo]
        except TypeError:  # unhashable: check it every time
            return check(value, *args)
        except KeyError:
            checked[memo] = out = check(value, *args)
            return out

    d_subject, d_purpose, d_basis, d_ttl = (defaults.get(f) for f in ("subject", "purpose", "basis", "ttl"))
    for item in given:
        if not isinstance(item, Mapping):
            raise InvalidInput("each item must be a mapping with 'key' and 'text'")
        if not ITEM_FIELDS.issuperset(item):
            raise InvalidInput(f"unknown item fields: {', '.join(sorted(set(item) - ITEM_FIELDS))}")
        get = item.get
        s, p, b, t = get("subject", d_subject), get("purpose", d_purpose), get("basis", d_basis), get("ttl", d_ttl)
        if s is None or p is None:
            raise InvalidInput("every record needs a subject and a purpose (a claim)")
        prepared.append(
            (
                key(item.get("key")),
                text(item.get("text")),
                once(name, s, "subject"),
                once(purpose, p),
                once(basis, b),
                once(ttl, t),
                metadata(item.get("metadata")),
                sources(item.get("sources")),
            )
        )
    if len({p[0] for p in prepared}) != len(prepared):
        raise InvalidInput("the same key appears twice in one batch: write it once")
    return prepared
