"""Is a forget acknowledgement intent or evidence? (docs/concepts.md §5)

An acknowledgement is **evidence** only when all five requirements hold:

1. ``handle``: the tool gave a verification handle it can check later;
2. ``verification``: a verification read, made after the acknowledgement and routed to the
   origin, came back without any of the keys (and the acknowledgement names its keys);
3. ``scopes``: every retention scope the caller says the data lived under is enumerated by
   the acknowledgement *and cleared* (retention scopes compose as a union: one left is enough
   to keep the data);
4. ``structures``: the tool says which derived structures its forget covers, and they
   include every one the caller requires;
5. ``propagation``: the tool declares a finite propagation bound and it has elapsed.

Anything less is **intent**, with one plain sentence per missing requirement. A bare boolean
or message is intent: the gate never reads evidence into what a tool did not say.

Three failures are errors of their own kind, because each is an acknowledgement that *looks*
complete on that point but is not, and each has its own remedy:

- :class:`~efface.errors.CacheRoutedVerification`: a verification read exists but was served
  by anything other than the origin (``cache``, ``replica``, ``unknown``). Incident B: an
  empty cached listing was taken as proof.
- :class:`~efface.errors.UnenumeratedScope`: the acknowledgement enumerates scopes (cleared
  or retained) but a required scope is in neither list. Incident B: the prefix scope was
  cleared, the tenant retention was never mentioned.
- :class:`~efface.errors.UnboundedPropagation`: the bound is infinite or not a number, or the
  tool names derived structures its forget covers but declares no bound for them. Incident A:
  the vector index was rebuilt "eventually".

A tool that says nothing about a requirement (no verification read, no enumeration, neither
structures nor bound) misses it plainly: that is intent, and :func:`assert_deleted` raises the
base :class:`~efface.errors.UnverifiableDeletion`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import (
    CacheRoutedVerification,
    InvalidInput,
    UnboundedPropagation,
    UnenumeratedScope,
    UnverifiableDeletion,
)
from .protocol import ForgetAck

REQUIREMENTS = ("handle", "verification", "scopes", "structures", "propagation")
"""The requirements of evidence, in the order they are checked and reported."""


@dataclass(frozen=True)
class Check:
    """The result of one requirement."""

    name: str
    """One of ``REQUIREMENTS``."""
    met: bool
    detail: str
    """A plain sentence: what was found, or what is missing."""
    error: type[UnverifiableDeletion] | None = None
    """The typed error this failure is, when it is one of its own kind."""

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "met": self.met,
            "detail": self.detail,
            "error": self.error.__name__ if self.error else None,
        }


@dataclass(frozen=True)
class Classification:
    """What a forget acknowledgement proves."""

    level: str
    """``evidence`` when every requirement holds, else ``intent``."""
    reasons: tuple[str, ...]
    """One sentence per requirement that is not met (empty for evidence)."""
    checks: tuple[Check, ...]
    """Every requirement, met or not, in ``REQUIREMENTS`` order."""
    scopes: Mapping[str, str]
    """Each required retention scope: ``cleared``, ``retained`` or ``unenumerated``."""
    structures: Mapping[str, bool]
    """Each required derived structure: covered by the forget or not."""
    settles_at: float | None
    """When the declared propagation window ends (None: no finite bound, or no ack time)."""

    @property
    def evidence(self) -> bool:
        return self.level == "evidence"

    def check(self, name: str) -> Check:
        """The result of requirement ``name``."""
        return next(c for c in self.checks if c.name == name)

    def errors(self) -> tuple[type[UnverifiableDeletion], ...]:
        """The typed errors that apply, in requirement order."""
        return tuple(c.error for c in self.checks if c.error is not None)

    def to_dict(self) -> dict:
        return {
            "level": self.level,
            "reasons": list(self.reasons),
            "checks": [c.to_dict() for c in self.checks],
            "scopes": dict(self.scopes),
            "structures": dict(self.structures),
            "settles_at": self.settles_at,
        }


def finite_seconds(x: Any) -> float | None:
    """``x`` as a float when it is a finite, non-negative number of seconds; else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        return None
    return float(x)


def seconds(x: float) -> str:
    """A duration for a message: whole seconds, or tenths below ten."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _as_ack(ack: Any) -> ForgetAck:
    # A tool that hands back a bare value (True, {"status": "erased"}, a string) said nothing
    # the gate can check: wrap it verbatim, every evidence field empty.
    return ack if isinstance(ack, ForgetAck) else ForgetAck(raw=ack, scope="")


def _names(values: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(values, str):
        raise InvalidInput(f"{what} must be a list of names, not one string")
    out = tuple(values)
    if not all(isinstance(v, str) and v for v in out):
        raise InvalidInput(f"{what} must be non-empty strings")
    return out


def _quote(names: Iterable[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _check_handle(ack: ForgetAck) -> Check:
    if ack.handle:
        return Check("handle", True, "the tool gave a verification handle")
    return Check("handle", False, "the tool gave no verification handle, so the forget cannot be checked again later")


def _check_verification(ack: ForgetAck) -> Check:
    v = ack.verification
    if v is None:
        return Check("verification", False, "no verification read was made after the forget")
    if v.routed_to != "origin":
        return Check(
            "verification",
            False,
            f"the verification read was served by '{v.routed_to}', not the origin: an empty "
            "answer from a cache or a replica proves nothing; verify with a read routed to the origin",
            CacheRoutedVerification,
        )
    if not ack.keys:
        return Check(
            "verification",
            False,
            "the acknowledgement names no keys, so the verification read cannot be shown to cover what was forgotten",
        )
    if ack.acknowledged_at and v.checked_at < ack.acknowledged_at:
        return Check("verification", False, "the verification read was made before the forget was acknowledged")
    if v.found:
        return Check(
            "verification",
            False,
            f"the origin still returned {len(v.found)} of the forgotten keys: the forget did not take effect",
        )
    return Check("verification", True, "a verification read routed to the origin found none of the keys")


def _check_scopes(ack: ForgetAck, required: tuple[str, ...]) -> tuple[Check, dict[str, str]]:
    cleared = set(ack.scopes_cleared or ())
    retained = set(ack.scopes_retained or ())
    enumerates = ack.scopes_cleared is not None or ack.scopes_retained is not None
    states = {s: "retained" if s in retained else "cleared" if s in cleared else "unenumerated" for s in required}
    if not required:
        return Check(
            "scopes",
            False,
            "no retention scopes were named, so the union cannot be checked: "
            "name every scope the data was written under",
        ), states
    if not enumerates:
        return Check("scopes", False, "the tool did not enumerate the retention scopes its forget cleared"), states
    missing = [s for s in required if states[s] == "unenumerated"]
    held = [s for s in required if states[s] == "retained"]
    if missing:
        return Check(
            "scopes",
            False,
            f"retention scope(s) {_quote(missing)} are not enumerated by the acknowledgement, which names "
            "only others: the data may still be held there",
            UnenumeratedScope,
        ), states
    if held:
        return Check(
            "scopes",
            False,
            f"retention scope(s) {_quote(held)} were enumerated but left in force: the data is still held",
        ), states
    return Check("scopes", True, f"every required retention scope was cleared ({len(required)})"), states


def _check_structures(ack: ForgetAck, required: tuple[str, ...]) -> tuple[Check, dict[str, bool]]:
    covered = set(ack.derived_covered or ())
    states = {s: s in covered for s in required}
    if ack.derived_covered is None:
        return Check(
            "structures",
            False,
            "the tool did not say which derived structures (indexes, caches, summaries) its forget covers",
        ), states
    missing = [s for s in required if not states[s]]
    if missing:
        return Check(
            "structures", False, f"derived structure(s) {_quote(missing)} are not covered by the forget"
        ), states
    return Check(
        "structures", True, "the forget covers every derived structure it names and every one required"
    ), states


def _check_propagation(ack: ForgetAck, now: float) -> tuple[Check, float | None]:
    bound = ack.max_propagation_s
    if bound is None:
        if ack.derived_covered:
            return Check(
                "propagation",
                False,
                "the tool covers derived structures but declares no bound on how "
                "long they may still serve erased content",
                UnboundedPropagation,
            ), None
        return Check("propagation", False, "the tool declares no propagation bound"), None
    if finite_seconds(bound) is None:
        return Check(
            "propagation",
            False,
            "the tool's propagation bound is infinite or not a number: its derived structures may serve "
            "erased content indefinitely",
            UnboundedPropagation,
        ), None
    if not ack.acknowledged_at:
        return Check(
            "propagation", False, "the acknowledgement has no time, so its propagation window cannot be measured"
        ), None
    settles_at = ack.acknowledged_at + bound
    if now < settles_at:
        return Check(
            "propagation",
            False,
            f"the declared propagation window ({bound:g} s) has not elapsed: {seconds(settles_at - now)} s left",
        ), settles_at
    return Check("propagation", True, f"the declared propagation window ({bound:g} s) has elapsed"), settles_at


def classify(
    ack: Any, required_scopes: Iterable[str], *, required_structures: Iterable[str] = (), now: float | None = None
) -> Classification:
    """Classify a forget acknowledgement as ``intent`` or ``evidence`` and say why.

    ``required_scopes``: every retention scope the data was written under (the caller knows
    them; the tool's own enumeration is what is checked against them). ``required_structures``:
    derived structures the caller knows the tool has. ``now`` defaults to the current time.
    Never raises on a weak acknowledgement: see :func:`assert_deleted` for that."""
    ack = _as_ack(ack)
    scopes = _names(required_scopes, "required_scopes")
    structures = _names(required_structures, "required_structures")
    now = time.time() if now is None else float(now)
    scope_check, scope_states = _check_scopes(ack, scopes)
    structure_check, structure_states = _check_structures(ack, structures)
    propagation_check, settles_at = _check_propagation(ack, now)
    checks = (_check_handle(ack), _check_verification(ack), scope_check, structure_check, propagation_check)
    reasons = tuple(c.detail for c in checks if not c.met)
    return Classification(
        level="intent" if reasons else "evidence",
        reasons=reasons,
        checks=checks,
        scopes=scope_states,
        structures=structure_states,
        settles_at=settles_at,
    )


def assert_deleted(
    ack: Any, required_scopes: Iterable[str], *, required_structures: Iterable[str] = (), now: float | None = None
) -> Classification:
    """Return the classification if the acknowledgement is evidence; otherwise fail closed.

    Raises the first typed error that applies (:class:`CacheRoutedVerification`,
    :class:`UnenumeratedScope`, :class:`UnboundedPropagation`, in requirement order), else
    :class:`UnverifiableDeletion`; the message lists every reason and the exception carries
    the classification as ``.classification``."""
    c = classify(ack, required_scopes, required_structures=required_structures, now=now)
    if c.evidence:
        return c
    kinds = c.errors()
    kind = kinds[0] if kinds else UnverifiableDeletion
    raise kind(
        "deletion cannot be verified (the acknowledgement is intent, not evidence): " + "; ".join(c.reasons),
        classification=c,
    )
