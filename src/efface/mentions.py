"""Mention detection: which registered subjects a text names.

Identifiers (names, e-mail addresses, phone numbers, handles) are normalised — case and
accents folded, whitespace collapsed, e-mail addresses lower-cased, phone numbers to
E.164 — and compiled per tenant into one Aho-Corasick automaton (pyahocorasick), so a
text is matched against every identifier of the tenant in one pass. Names and handles
match on word boundaries only ("Al" does not match inside "Alice").
"""

from __future__ import annotations

import re
from typing import Iterable

import ahocorasick
import phonenumbers

from .embed.hashing import fold

_SPACE = re.compile(r"\s+")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_PHONEISH = re.compile(r"^\+?[\d\s().\-]{7,}$")
_DIGITS7 = re.compile(r"(?:\d[\s().\-]*){7,}")
PHONE_PREFIX = "tel:"


def _phone(value: str, region: str | None) -> str | None:
    try:
        parsed = phonenumbers.parse(value, region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_possible_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def normalise_identifier(identifier: str, region: str | None = None) -> str:
    """The canonical form an identifier is matched in."""
    raw = identifier.strip()
    if _EMAIL.match(raw):
        return fold(raw)
    if _PHONEISH.match(raw):
        e164 = _phone(raw, region)
        if e164 is None:
            e164 = "+" + re.sub(r"\D", "", raw) if raw.startswith("+") else re.sub(r"\D", "", raw)
        return PHONE_PREFIX + e164
    return _SPACE.sub(" ", fold(raw)).strip()


def normalise_text(text: str, region: str | None = None) -> str:
    """The text as identifiers are searched in: folded, whitespace collapsed, and every
    phone number found in it appended in canonical form."""
    out = _SPACE.sub(" ", fold(text))
    if _DIGITS7.search(text):
        phones = set()
        for m in phonenumbers.PhoneNumberMatcher(text, region or "US", leniency=phonenumbers.Leniency.POSSIBLE):
            phones.add(phonenumbers.format_number(m.number, phonenumbers.PhoneNumberFormat.E164))
        for m in _DIGITS7.finditer(text):  # numbers the matcher's region rules reject
            digits = re.sub(r"\D", "", m.group())
            phones.add(("+" if m.group().lstrip().startswith("+") else "") + digits)
            phones.add("+" + digits)
        out += " " + " ".join(PHONE_PREFIX + p for p in sorted(phones))
    return out


def _bounded(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not before.isalnum() and not after.isalnum()


class MentionIndex:
    """Per-tenant automata over the normalised identifiers of every registered subject."""

    def __init__(self, region: str | None = None):
        self._region = region
        self._subjects: dict[str, dict[str, set[str]]] = {}  # tenant -> pattern -> subjects
        self._automata: dict[str, ahocorasick.Automaton | None] = {}

    def set_subject(self, tenant: str, subject: str, identifiers: Iterable[str]) -> None:
        """Register (or replace) a subject's identifiers."""
        self.drop_subject(tenant, subject)
        patterns = self._subjects.setdefault(tenant, {})
        for ident in identifiers:
            norm = normalise_identifier(ident, self._region)
            if norm:
                patterns.setdefault(norm, set()).add(subject)
        self._automata[tenant] = None

    def drop_subject(self, tenant: str, subject: str) -> None:
        patterns = self._subjects.get(tenant, {})
        for norm in [p for p, subs in patterns.items() if subject in subs]:
            patterns[norm].discard(subject)
            if not patterns[norm]:
                del patterns[norm]
        self._automata[tenant] = None

    def identifiers(self, tenant: str, subject: str) -> list[str]:
        """The normalised patterns registered for a subject."""
        return sorted(p for p, subs in self._subjects.get(tenant, {}).items() if subject in subs)

    def _automaton(self, tenant: str) -> ahocorasick.Automaton | None:
        auto = self._automata.get(tenant)
        if auto is None and self._subjects.get(tenant):
            auto = ahocorasick.Automaton()
            for pattern, subjects in self._subjects[tenant].items():
                auto.add_word(pattern, (pattern, frozenset(subjects)))
            auto.make_automaton()
            self._automata[tenant] = auto
        return auto

    def find(self, tenant: str, text: str) -> set[str]:
        """The subjects of ``tenant`` whose identifiers ``text`` mentions."""
        auto = self._automaton(tenant)
        if auto is None:
            return set()
        norm = normalise_text(text, self._region)
        found: set[str] = set()
        for end, (pattern, subjects) in auto.iter(norm):
            start = end - len(pattern) + 1
            if _bounded(norm, start, end + 1):
                found |= subjects
        return found

    def spans(self, tenant: str, subject: str, text: str) -> list[tuple[int, int]]:
        """Where ``text`` (as written, not normalised) names ``subject``: for redaction."""
        folded, origin = _fold_with_map(text)
        out: list[tuple[int, int]] = []
        pats = self.identifiers(tenant, subject)
        for p in pats:
            if p.startswith(PHONE_PREFIX):
                continue
            rx = re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in p.split(" ")) + r"(?!\w)")
            for m in rx.finditer(folded):
                out.append((origin[m.start()], origin[m.end() - 1] + 1))
        phones = {p[len(PHONE_PREFIX):] for p in pats if p.startswith(PHONE_PREFIX)}
        if phones and _DIGITS7.search(text):
            for m in phonenumbers.PhoneNumberMatcher(text, self._region or "US",
                                                     leniency=phonenumbers.Leniency.POSSIBLE):
                if phonenumbers.format_number(m.number, phonenumbers.PhoneNumberFormat.E164) in phones:
                    out.append((m.start, m.end))
            for m in _DIGITS7.finditer(text):
                digits = re.sub(r"\D", "", m.group())
                if digits in phones or "+" + digits in phones:
                    out.append((m.start(), m.end()))
        return sorted(set(out))


def _fold_with_map(text: str) -> tuple[str, list[int]]:
    """``fold(text)`` and, for each folded character, the index of the character it came from."""
    chars: list[str] = []
    origin: list[int] = []
    for i, c in enumerate(text):
        f = fold(c)
        chars.append(f)
        origin.extend([i] * len(f))
    return "".join(chars), origin
