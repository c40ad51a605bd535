"""A plain in-memory model of efface's contract (docs/concepts.md §2, §4, §7), for property tests.

It knows nothing of indexes, epochs or files: records per (tenant, key) with their text and
claims, the union rule, forget by selector, TTL expiry. The property and crash tests drive
it next to a real store and compare what each says is readable.

What it models, precisely:

* A record lives while at least one claim lives; claims are keyed by
  (subject, purpose, basis). Writing a key replaces its text and adds or restates its
  claim (a restated claim takes the newest expiry, even a shorter one or none); other
  claims stay. ``retain`` adds a claim to a live record, or fails with :class:`ModelNotFound`.
* A claim is live at ``now`` when ``expires_at is None or expires_at > now``. A read or
  recall for a purpose sees a record only through a live claim for that purpose.
* Every mutation first honours due expiries (claims with ``expires_at <= now`` are
  released and records left with none are erased, one expiry receipt per tenant), so a
  write or retain on a record whose claims have all lapsed sees no record.
* ``forget`` releases the claims its selector matches, except claims whose basis is
  ``legal_hold`` or ``legal_obligation`` when the selector names no purpose; a record with
  no claim left is erased; every other claim of a matched record is listed as retained.
* Reads, recalls and forgets that name a purpose the tenant never wrote under fail with
  :class:`ModelUnknownPurpose`; such a forget changes nothing (not even expiry).
* A subject's registered identifiers go with its last claim in the tenant (docs/concepts.md §8),
  whatever released it: a forget by any selector or an expiry. A forget that names a
  subject with no claim left erases its registration too.
* A write to a key whose record another subject holds a claim on fails with
  :class:`ModelKeyInUse` (after expiry), unless ``replace``: then the old record is erased
  with every claim on it (an outcome of kind ``replace``, one ledger entry) and the new one
  written. A claim of another subject under a legal basis always refuses it.
* Registered names (a subject's phrase, folded by :func:`model_fold`, an independent
  stand-in for efface's folding): a forget by subject holds back every live record whose
  text names the subject's registered phrase. The phrase goes with the subject's registration; once other
  identifiers replace it, the model only bounds what may be held back.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

LEGAL_BASES = frozenset({"legal_hold", "legal_obligation"})

ClaimKey = tuple[str, str, str]
"""(subject, purpose, basis)"""


class ModelNotFound(Exception):
    """retain on a key with no live record."""


class ModelUnknownPurpose(Exception):
    """A purpose the tenant has never written (or retained) under."""


class ModelKeyInUse(Exception):
    """A write over another subject's claims, without ``replace`` (or over a legal hold)."""

    def __init__(self, expired: dict):
        super().__init__("key in use")
        self.expired = expired
        """The expiry outcomes honoured before the refusal (they stay committed)."""


INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff\ufe0f"
"""The invisible characters the property tests put inside names."""


def model_fold(text: str) -> list[str]:
    """The words of ``text`` as the model compares names: NFKC, lower case, a zero-width
    space a word break (as Unicode's word segmentation has it), the other :data:`INVISIBLE`
    characters dropped."""
    t = unicodedata.normalize("NFKC", text).lower().replace("\u200b", " ")
    t = "".join(c for c in t if c not in INVISIBLE)
    return re.findall(r"[^\W_]+", t)


def names_phrase(text: str, phrase: tuple[str, ...]) -> bool:
    w = model_fold(text)
    n = len(phrase)
    return any(tuple(w[i : i + n]) == phrase for i in range(len(w) - n + 1))


def is_live(expires_at: float | None, now: float) -> bool:
    return expires_at is None or expires_at > now


@dataclass
class ModelRecord:
    text: str
    claims: dict[ClaimKey, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What one forget (or one tenant's expiry) did, in receipt terms."""

    tenant: str
    kind: str
    released: Counter
    """Counter of (key, subject, purpose, basis)."""
    erased: frozenset[str]
    retained: Counter
    """Counter of (key, purpose, basis, expires_at)."""
    erased_texts: Mapping[str, str]
    """key -> the text it had when erased."""
    subjects_erased: frozenset[str] = frozenset()
    """Registered subjects whose last claim in the tenant went: their identifiers with it."""
    erased_identifiers: tuple[str, ...] = ()
    """The identifiers those subjects were registered with."""
    mentioning: frozenset[str] = frozenset()
    """Keys a forget by subject may hold back: live records naming the subject's phrase."""
    exact: bool = True
    """Whether exactly :attr:`mentioning` is held back (else at most that)."""


class ReferenceModel:
    def __init__(self) -> None:
        self.records: dict[tuple[str, str], ModelRecord] = {}
        self.purposes: dict[str, set[str]] = {}
        self.subjects: dict[tuple[str, str], tuple[str, ...]] = {}
        """(tenant, subject) -> registered identifiers."""
        self.ledger_entries = 0
        """Receipts written: one per forget, one per tenant per expiry round, one per replace."""
        self.quarantined: set[tuple[str, str]] = set()
        """(tenant, key) of records held back by a forget (never read nor recalled)."""
        self.names: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        """(tenant, subject) -> (the registered phrase's words, the identifiers as given)."""
        self.unsure: set[tuple[str, str]] = set()
        """Registrations whose subject lost its last claim other than by a forget by subject."""
        self.last_replace: Outcome | None = None
        """What the latest write replaced (``replace=True``), if anything."""

    def clone(self) -> ReferenceModel:
        return copy.deepcopy(self)

    # -- expiry ----------------------------------------------------------------------
    def expire(self, now: float) -> dict[str, Outcome]:
        """Release every claim with ``expires_at <= now``; one outcome per tenant touched."""
        due: dict[str, list[tuple[str, ClaimKey]]] = {}
        for (tenant, key), rec in self.records.items():
            for ck, exp in rec.claims.items():
                if exp is not None and exp <= now:
                    due.setdefault(tenant, []).append((key, ck))
        out = {}
        for tenant in sorted(due):
            out[tenant] = self._release(tenant, "expire", due[tenant], held=set())
        return out

    def _release(
        self,
        tenant: str,
        kind: str,
        matched: list[tuple[str, ClaimKey]],
        held: set[tuple[str, ClaimKey]],
        named: str | None = None,
        staying: frozenset[str] = frozenset(),
    ) -> Outcome:
        released: Counter = Counter()
        for key, ck in matched:
            if (key, ck) in held:
                continue
            del self.records[(tenant, key)].claims[ck]
            released[(key, *ck)] += 1
        erased, erased_texts, retained = set(), {}, Counter()
        for key in sorted({k for k, _ in matched}):
            rec = self.records[(tenant, key)]
            if not rec.claims:
                erased.add(key)
                erased_texts[key] = rec.text
                del self.records[(tenant, key)]
                self.quarantined.discard((tenant, key))
            else:
                for (_subject, purpose, basis), exp in rec.claims.items():
                    retained[(key, purpose, basis, exp)] += 1
        # the writers of a replacing write get a new claim at once: their registrations stay
        bare = ({subject for _k, subject, _p, _b in released} - staying) | ({named} if named is not None else set())
        subjects_erased, identifiers = set(), []
        for subject in sorted(bare):
            if subject in self.claim_subjects(tenant) or (tenant, subject) not in self.subjects:
                continue
            subjects_erased.add(subject)
            identifiers += self.subjects.pop((tenant, subject))
            self.names.pop((tenant, subject), None)  # the name goes with the registration
            self.unsure.discard((tenant, subject))
        self.ledger_entries += 1
        return Outcome(
            tenant,
            kind,
            released,
            frozenset(erased),
            retained,
            erased_texts,
            frozenset(subjects_erased),
            tuple(identifiers),
        )

    def claim_subjects(self, tenant: str) -> set[str]:
        """Every subject with a claim in the tenant (expired ones too, until released)."""
        return {ck[0] for (t, _k), rec in self.records.items() if t == tenant for ck in rec.claims}

    def register(
        self, tenant: str, subject: str, identifiers: Iterable[str], *, now: float, phrase: str | None = None
    ) -> dict[str, Outcome]:
        """register_subject: replaces the subject's identifiers. Returns the expiries honoured first."""
        expired = self.expire(now)
        self.subjects[(tenant, subject)] = tuple(sorted(set(identifiers)))
        if phrase is not None:
            self.names[(tenant, subject)] = (tuple(model_fold(phrase)), tuple(identifiers))
            self.unsure.discard((tenant, subject))
        elif (tenant, subject) in self.names:
            self.unsure.add((tenant, subject))  # the old name's mention rows stay in the store
        return expired

    def live_identifiers(self) -> set[str]:
        """Identifiers some subject is registered with now, in any tenant."""
        return {i for ids in self.subjects.values() for i in ids}

    def has_claims(self, tenant: str, subject: str) -> bool:
        return any(ck[0] == subject for (t, _k), rec in self.records.items() if t == tenant for ck in rec.claims)

    # -- mutations -------------------------------------------------------------------
    def write(
        self,
        tenant: str,
        key: str,
        text: str,
        *,
        subject: str,
        purpose: str,
        basis: str = "consent",
        ttl: float | None = None,
        now: float,
        replace: bool = False,
    ) -> dict[str, Outcome]:
        return self.write_many(
            tenant,
            [dict(key=key, text=text, subject=subject, purpose=purpose, basis=basis, ttl=ttl)],
            now=now,
            replace=replace,
        )

    def write_many(
        self, tenant: str, items: Iterable[Mapping], *, now: float, replace: bool = False
    ) -> dict[str, Outcome]:
        """Each item: key, text, subject, purpose, basis, ttl (all required here).
        Returns the expiry outcomes honoured first; what was replaced is :attr:`last_replace`."""
        items = list(items)
        assert len({i["key"] for i in items}) == len(items), "the store rejects duplicate keys"
        expired = self.expire(now)
        self.last_replace = None
        in_the_way: list[tuple[str, ClaimKey]] = []
        for item in items:
            rec = self.records.get((tenant, item["key"]))
            others = [ck for ck in rec.claims if ck[0] != item["subject"]] if rec is not None else []
            if not others:
                continue
            if not replace or any(ck[2] in LEGAL_BASES for ck in others):
                raise ModelKeyInUse(expired)
            in_the_way += [(item["key"], ck) for ck in rec.claims]
        if in_the_way:
            writers = frozenset(item["subject"] for item in items)
            self.last_replace = self._release(tenant, "replace", in_the_way, held=set(), staying=writers)
        for item in items:
            rec = self.records.setdefault((tenant, item["key"]), ModelRecord(item["text"]))
            rec.text = item["text"]
            ttl = item.get("ttl")
            rec.claims[(item["subject"], item["purpose"], item["basis"])] = None if ttl is None else now + float(ttl)
            self.purposes.setdefault(tenant, set()).add(item["purpose"])
        return expired

    def retain(
        self, tenant: str, key: str, *, subject: str, purpose: str, basis: str, ttl: float | None = None, now: float
    ) -> dict[str, Outcome]:
        expired = self.expire(now)  # committed even when the retain itself fails
        rec = self.records.get((tenant, key))
        if rec is None:
            raise ModelNotFound(key)
        rec.claims[(subject, purpose, basis)] = None if ttl is None else now + float(ttl)
        self.purposes.setdefault(tenant, set()).add(purpose)
        return expired

    def forget(
        self,
        tenant: str,
        *,
        subject: str | None = None,
        purpose: str | None = None,
        prefix: str | None = None,
        key: str | None = None,
        now: float,
    ) -> Outcome:
        assert any(x is not None for x in (subject, purpose, prefix, key)), "an empty selector is a ScopeError"
        self.check_purpose(tenant, purpose)
        self.expire(now)
        matched = []
        for (t, k), rec in self.records.items():
            if t != tenant:
                continue
            if prefix is not None and not k.startswith(prefix):
                continue
            if key is not None and k != key:
                continue
            for ck in rec.claims:
                s, p, _b = ck
                if subject is not None and s != subject:
                    continue
                if purpose is not None and p != purpose:
                    continue
                matched.append((k, ck))
        held = set() if purpose is not None else {(k, ck) for k, ck in matched if ck[2] in LEGAL_BASES}
        registered = self.names.get((tenant, subject)) if subject is not None else None
        exact = (tenant, subject) not in self.unsure
        out = self._release(tenant, "forget", matched, held, named=subject)
        if registered is None:
            return out
        phrase = registered[0]
        naming = frozenset(k for (t, k), rec in self.records.items() if t == tenant and names_phrase(rec.text, phrase))
        return dataclasses.replace(out, mentioning=naming, exact=exact)

    # -- reads -----------------------------------------------------------------------
    def check_purpose(self, tenant: str, purpose: str | None) -> None:
        if purpose is not None and purpose not in self.purposes.get(tenant, set()):
            raise ModelUnknownPurpose(purpose)

    def live_claims(
        self, tenant: str, key: str, purpose: str, now: float, subject: str | None = None
    ) -> set[tuple[str, str, str, float | None]]:
        rec = self.records.get((tenant, key))
        if rec is None:
            return set()
        return {
            (s, p, b, exp)
            for (s, p, b), exp in rec.claims.items()
            if p == purpose and is_live(exp, now) and (subject is None or s == subject)
        }

    def read(self, tenant: str, key: str, purpose: str, now: float) -> str | None:
        self.check_purpose(tenant, purpose)
        if (tenant, key) in self.quarantined or not self.live_claims(tenant, key, purpose, now):
            return None
        return self.records[(tenant, key)].text

    def visible(self, tenant: str, purpose: str, now: float, subject: str | None = None) -> dict[str, str]:
        """key -> text of every record a read or recall for this scope may return."""
        return {
            k: rec.text
            for (t, k), rec in self.records.items()
            if t == tenant and (t, k) not in self.quarantined and self.live_claims(tenant, k, purpose, now, subject)
        }

    def text(self, tenant: str, key: str) -> str | None:
        rec = self.records.get((tenant, key))
        return None if rec is None else rec.text
