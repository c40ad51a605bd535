"""Which identifiers may name a subject: the rule ``register_subject`` enforces.

A registered identifier is matched against every text of the tenant, and a forget of the
subject quarantines (or redacts) every record that names it. An identifier that does not
pick out one person would make that forget hold back or rewrite other people's records,
so registration refuses it with :class:`~efface.errors.CommonIdentifier`. After folding
(:func:`efface.text.fold`: case, accents, full-width forms and invisible characters):

* **an e-mail address** (anything with ``@`` that does not start with it) must be shaped
  like one: ``local@domain.tld``, a top-level domain of two letters or more;
* **a phone number** (only digits and ``+ ( ) . -`` and spaces) needs 7 to 15 digits (E.164
  allows at most 15); written with a country code (``+`` or ``00``) it must be a possible
  number for that country, as ``phonenumbers`` judges it;
* **a name or a handle** (everything else) needs at least one letter, at least two letters
  or digits, and at least one word that is neither a single character nor a common word:
  a function word of English or of another major European language (articles, pronouns,
  prepositions, conjunctions, auxiliaries, the Snowball stop-word lists'), or a word an
  agent's memory uses for anyone (``user``, ``customer``, ``assistant``, ...). "Will" or "May"
  alone is refused, "Will Turner" or "May Ling" is not: a name that is also a common word
  needs a second word, an e-mail address or a phone number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import phonenumbers

from ..errors import CommonIdentifier
from ..text import fold, words

_EMAIL = re.compile(r"^[^@\s]+@(?:[^\W_](?:[\w-]*[^\W_])?\.)+(?:[^\W\d_]{2,}|xn--[\w-]+)$")
_PHONE_CHARS = re.compile(r"^\+?[\d\s().\-]+$")
MIN_PHONE_DIGITS, MAX_PHONE_DIGITS = 7, 15

# Function words of the Snowball stop-word lists (snowballstem.org/algorithms/*/stop.txt:
# English in full, the commonest of French, German, Spanish, Italian, Portuguese and
# Dutch), minus the forms that are also common given names ("al", "del", "don", "ben", "dan", "van"),
# plus words an agent's memories use for whoever they are about.
_ENGLISH = """
i me my myself we us our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom this
that these those am is are was were be been being have has had having do does did doing will
would shall should can could may might must ought a an the and but if or because as until while
of at by for with about against between into through during before after above below to from
up down in out on off over under again further then once here there when where why how all any
both each few more most other some such no nor not only own same so than too very one every
least less many now ever never say says said also get go goes just made make put see seen
whether like well back even still way take since another however two three four five first
second new old yes ok okay hi hello mr mrs ms dr sir madam
"""
_EUROPEAN = """
le la les un une des du de et est en au aux ce ces cet cette il elle ils elles je tu nous vous on
ne pas que qui quoi dans par pour sur avec sans mais ou son sa ses leur leurs mon ma mes ton ta
tes lui eux moi toi se être avoir
der die das den dem des ein eine einer einem einen und ist sind war ich du er sie es wir ihr
nicht mit von zu auf für im ins bei aus nach wie als auch oder aber dass wer was sein
el los las una unos unas y es son del al lo que por para con pero como su sus yo tú él ella
nosotros ellos mi mis muy más
il lo gli uno e è di da con per tra fra che non io tu lui lei noi voi loro
o os um uma uns umas é do da dos das em no na nos nas ao eu ele ela eles elas você não
het een en van de is zijn dat die niet met op te voor aan ik jij hij zij wij jullie maar ook
"""
_ROLES = """
user users customer customers client clients assistant agent bot system admin administrator
human person people someone somebody anyone anybody everyone everybody nobody noone guest
member staff team support owner patient unknown anonymous null none nil undefined test example
name email mail phone self
"""
COMMON_WORDS = frozenset(fold(w) for w in (_ENGLISH + _EUROPEAN + _ROLES).split()) - {
    "al",
    "del",
    "don",
    "ben",
    "dan",
    "van",
}
"""Words too common to name a person on their own (folded)."""


def problem(identifier: str) -> tuple[str, str] | None:
    """Why ``identifier`` cannot name a subject, as (rule, explanation), or None if it can."""
    raw = identifier.strip()
    if "@" in raw and not raw.startswith("@"):
        if not _EMAIL.match(fold(raw)):
            return "not_email", (
                "looks like an e-mail address but is not shaped like one (name@domain.tld): correct it, "
                "or register the name on its own"
            )
        return None
    if _PHONE_CHARS.match(raw) and any(c.isdigit() for c in raw):
        digits = re.sub(r"\D", "", raw)
        international = raw.startswith("+") or digits.startswith("00")
        if not MIN_PHONE_DIGITS <= len(digits) - (2 if raw.startswith("00") else 0) <= MAX_PHONE_DIGITS:
            return "not_phone", (
                f"is a number but not a phone number ({MIN_PHONE_DIGITS} to {MAX_PHONE_DIGITS} digits): "
                "a short number occurs in unrelated texts; register the full number with its country code"
            )
        if international:
            try:
                parsed = phonenumbers.parse("+" + digits[2:] if raw.startswith("00") else raw, None)
                possible = phonenumbers.is_possible_number(parsed)
            except phonenumbers.NumberParseException:
                possible = False
            if not possible:
                return "not_phone", ("has a country code but is not a possible phone number for it: check the digits")
        return None
    folded = fold(raw)
    found = words(raw)
    if not any(c.isalpha() for c in folded):
        return "no_letter", (
            "has no letter: a name or handle needs one, and a phone number needs "
            f"{MIN_PHONE_DIGITS} to {MAX_PHONE_DIGITS} digits"
        )
    if sum(len(w) for w in found) < 2:
        return "too_short", (
            "is a single character: it occurs in unrelated texts; register a full name, an e-mail address "
            "or a phone number"
        )
    if all(len(w) < 2 or w in COMMON_WORDS for w in found):
        return "common_word", (
            "is a common word (or only common words and initials): a forget would hold back every record "
            "that uses it; add a surname, or register an e-mail address or phone number instead"
        )
    return None


def check_identifiers(identifiers: Sequence[str]) -> None:
    """Raise :class:`~efface.errors.CommonIdentifier` for the first identifier that cannot
    name a subject. The message gives its position in the list, never its value."""
    for n, ident in enumerate(identifiers):
        found = problem(ident)
        if found is not None:
            rule, why = found
            raise CommonIdentifier(
                f"identifier {n + 1} of {len(identifiers)} {why}; nothing was registered",
                index=n,
                rule=rule,
            )
