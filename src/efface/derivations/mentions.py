"""Mention detection: which registered subjects a text names.

Identifiers (names, e-mail addresses, phone numbers, handles) are normalised — case and
accents, compatibility forms and invisible characters folded (:func:`efface.text.fold`),
whitespace collapsed, e-mail addresses lower-cased, phone numbers to
E.164 — and compiled per tenant into one Aho-Corasick automaton (pyahocorasick), so a
text is matched against every identifier of the tenant in one pass. An identifier matches
only as a whole, after folding: names and handles on word boundaries ("Al" does not match
inside "Alice"), e-mail addresses as a whole address ("bob@x.com" does not match inside
"alice.bob@x.com"). A phone number is
matched as its E.164 form and as its national number with and without the trunk ``0``,
against every run of 7+ digits in the text (with ``phonenumbers`` parsing only the
registered identifiers, never every text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import ahocorasick
import phonenumbers

from ..text import fold, spaced

_SPACE = re.compile(r"\s+")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+\Z")
_PHONEISH = re.compile(r"^\+?[\d\s().\-]{7,}\Z")
_DIGITS7 = re.compile(r"(?:\d[\s().\-]*){7,}")
PHONE_PREFIX = "tel:"


def normalise_identifier(identifier: str, region: str | None = None) -> str:
    """The canonical form of an identifier (a phone number: E.164)."""
    return identifier_patterns(identifier, region)[0]


def identifier_patterns(identifier: str, region: str | None = None) -> list[str]:
    """Every form an identifier is matched in. A phone number is matched as its E.164 form
    and as its national number with and without the trunk ``0``, because texts write numbers
    either way and parsing every digit run in every written text with a region's rules costs
    far more than a few more patterns in the automaton."""
    raw = identifier.strip()
    if _EMAIL.match(raw):
        return [fold(raw)]
    if _PHONEISH.match(raw):
        try:
            parsed = phonenumbers.parse(raw, region)
        except phonenumbers.NumberParseException:
            parsed = None
        if parsed is None or not phonenumbers.is_possible_number(parsed):
            digits = re.sub(r"\D", "", raw)
            return [PHONE_PREFIX + ("+" + digits if raw.startswith("+") else digits)]
        national = phonenumbers.national_significant_number(parsed)
        e164 = phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
        cc = str(parsed.country_code)
        return [
            PHONE_PREFIX + e164,
            PHONE_PREFIX + national,
            PHONE_PREFIX + "0" + national,
            # international with the trunk 0 kept ("+44 (0)20 ...") and with the 00 prefix
            PHONE_PREFIX + "+" + cc + "0" + national,
            PHONE_PREFIX + "00" + cc + national,
        ]
    return [_SPACE.sub(" ", fold(raw)).strip()]


_GROUP = re.compile(r"\d+")


def _phone_candidates(text: str) -> list[tuple[int, int, str]]:
    """(start, end, digits) for every window of consecutive digit groups, inside a run of
    digits and separators, that holds 7 to 15 digits: a number written right after a year,
    a room number or another number is still found on its own. A window never starts just
    after a country code (``+1 20 7946 0958`` holds no ``20 7946 0958``: that is another
    country's number, matched only as a whole with its code)."""
    out = []
    for run in _DIGITS7.finditer(text):
        groups = [(run.start() + g.start(), run.start() + g.end(), g.group()) for g in _GROUP.finditer(run.group())]
        inside = _after_country_code(text, run.start(), [g[2] for g in groups])
        for i in range(len(groups)):
            if i in inside:
                continue
            digits = ""
            for j in range(i, len(groups)):
                digits += groups[j][2]
                if len(digits) > 15:
                    break
                if len(digits) >= 7:
                    out.append((groups[i][0], groups[j][1], digits))
    return out


def _after_country_code(text: str, start: int, groups: list[str]) -> set[int]:
    """Indexes of the groups that follow an international prefix (``+`` before the run, or a
    group starting with ``00``) by a country code of 1-3 digits and maybe a ``(0)`` trunk:
    the national part of an international number, which is no number on its own."""
    out: set[int] = set()
    plus = start > 0 and text[start - 1] == "+"
    for i, g in enumerate(groups):
        if i == 0 and plus:
            code = g
        elif g.startswith("00"):
            code = g[2:]
        else:
            continue
        for j in range(i + 1, len(groups)):
            if 1 <= len(code) <= 3 or (len(code) <= 4 and j - 1 > i and groups[j - 1] == "0"):
                out.add(j)
            elif code:
                break
            code += groups[j]
    return out


def normalise_text(text: str, region: str | None = None) -> str:
    """The text as identifiers are searched in: folded, whitespace collapsed, and every digit
    window that may be a phone number appended as ``tel:DIGITS`` and ``tel:+DIGITS``."""
    out = _SPACE.sub(" ", fold(text))
    if _DIGITS7.search(text):
        phones = set()
        for _start, _end, digits in _phone_candidates(text):
            phones.add(digits)
            phones.add("+" + digits)
        out += " " + " ".join(PHONE_PREFIX + p for p in sorted(phones))
    return out


_EMAIL_BEFORE = frozenset("._%+-'")


def _bounded(text: str, start: int, end: int, email: bool = False) -> bool:
    """Whether ``text[start:end]`` stands as a whole: a whole word, or a whole e-mail address
    (``bob@x.com`` is not a match inside ``alice.bob@x.com`` nor inside ``bob@x.com.au``)."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if before.isalnum() or after.isalnum():
        return False
    if email:
        if before in _EMAIL_BEFORE or after in "-_":
            return False
        # a full stop after an address ends the sentence; one followed by a letter goes on
        # with the domain
        if after == "." and end + 1 < len(text) and text[end + 1].isalnum():
            return False
    return True


def _is_email(pattern: str) -> bool:
    return "@" in pattern and not pattern.startswith("@") and not pattern.startswith(PHONE_PREFIX)


class MentionIndex:
    """Per-tenant automata over the normalised identifiers of every registered subject."""

    def __init__(self, region: str | None = None):
        self._region = region
        self._subjects: dict[str, dict[str, set[str]]] = {}  # tenant -> pattern -> subjects
        self._automata: dict[str, ahocorasick.Automaton | None] = {}
        self._by_subject: dict[str, dict[str, set[str]]] = {}  # tenant -> subject -> patterns

    def set_subject(self, tenant: str, subject: str, identifiers: Iterable[str]) -> None:
        """Register (or replace) a subject's identifiers."""
        self.drop_subject(tenant, subject)
        patterns = self._subjects.setdefault(tenant, {})
        for ident in identifiers:
            for norm in identifier_patterns(ident, self._region):
                if norm:
                    patterns.setdefault(norm, set()).add(subject)
                    self._by_subject.setdefault(tenant, {}).setdefault(subject, set()).add(norm)
        self._automata[tenant] = None

    def drop_subject(self, tenant: str, subject: str) -> None:
        patterns = self._subjects.get(tenant, {})
        for norm in self._by_subject.get(tenant, {}).pop(subject, ()):
            patterns[norm].discard(subject)
            if not patterns[norm]:
                del patterns[norm]
        self._automata[tenant] = None

    def identifiers(self, tenant: str, subject: str) -> list[str]:
        """The normalised patterns registered for a subject."""
        return sorted(self._by_subject.get(tenant, {}).get(subject, ()))

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
            if _bounded(norm, start, end + 1, _is_email(pattern)):
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
                if _bounded(folded, m.start(), m.end(), _is_email(p)):
                    out.append((origin[m.start()], origin[m.end() - 1] + 1))
        phones = {p[len(PHONE_PREFIX) :] for p in pats if p.startswith(PHONE_PREFIX)}
        if phones and _DIGITS7.search(text):
            for start, end, digits in _phone_candidates(text):
                if digits in phones or "+" + digits in phones:
                    if start > 0 and text[start - 1] == "+":
                        start -= 1
                    out.append((start, end))
        return sorted(set(out))


def _fold_with_map(text: str) -> tuple[str, list[int]]:
    """``fold(text)`` and, for each folded character, the index of the character it came from."""
    chars: list[str] = []
    origin: list[int] = []
    for i, c in enumerate(spaced(text)):  # a zero-width space between letters: a space, as fold sees it
        f = fold(c)
        chars.append(f)
        origin.extend([i] * len(f))
    return "".join(chars), origin
