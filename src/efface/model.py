"""Frozen value types: what efface hands back to callers.

Every type has a ``to_dict()`` that gives the JSON shape the CLI prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

LEVELS = ("intent", "unreadable", "erased")
"""The evidence ladder, lowest first (docs/concepts.md §3)."""

LEGAL_BASES = frozenset({"legal_hold", "legal_obligation"})
"""Bases a forget releases only when it names the claim's purpose (docs/concepts.md §2)."""

BASES = frozenset(
    {
        "consent",
        "contract",
        "legal_obligation",
        "legal_hold",
        "vital_interests",
        "public_task",
        "legitimate_interests",
    }
)
"""The lawful bases a claim may state (GDPR Art. 6 plus ``legal_hold``)."""


@dataclass(frozen=True)
class Claim:
    """A reason to keep a record."""

    subject: str
    """Whose data this is."""
    purpose: str
    """What it may be used for; reads and recalls name a purpose."""
    basis: str
    """Why it may be kept: one of ``BASES``."""
    expires_at: float | None
    """Unix time when the claim lapses (None: until forgotten)."""


@dataclass(frozen=True)
class Memory:
    """One record as a point read returns it."""

    key: str
    text: str
    tenant: str
    metadata: Mapping[str, Any]
    sources: tuple[str, ...]
    """Keys this record was derived from (lineage)."""
    claims: tuple[Claim, ...]
    """The live claims for the purpose the read named."""
    updated_at: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["metadata"] = dict(self.metadata)
        return d


@dataclass(frozen=True)
class Turn:
    """A neighbouring turn of a recall hit in its session (``recall(..., window=n)``),
    read from the origin like the hit, live for the recall's purpose."""

    key: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"key": self.key, "text": self.text, "metadata": dict(self.metadata)}


@dataclass(frozen=True)
class Hit:
    """One recall result. ``text`` always comes from the origin, never from an index."""

    key: str
    text: str
    score: float
    """The fused score (paths/recall.py); higher is better."""
    via: tuple[str, ...]
    """Which indexes proposed it (``ann``, ``fts``)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    window: tuple[Turn, ...] = ()
    """With ``recall(..., window=n)``: the turns around it in its session, in order (the
    ``n`` before it, then the ``n`` after), without it."""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["metadata"] = dict(self.metadata)
        d["window"] = [t.to_dict() for t in self.window]
        return d


@dataclass(frozen=True)
class Selector:
    """What a forget names. The tenant is always named."""

    tenant: str
    subject: str | None = None
    purpose: str | None = None
    prefix: str | None = None
    key: str | None = None
    everything: bool = False
    """``forget(tenant=..., everything=True)``: all of the tenant (shown only when set)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}


@dataclass(frozen=True)
class Released:
    """A claim a forget released."""

    key: str
    subject: str
    purpose: str
    basis: str


@dataclass(frozen=True)
class Retained:
    """A record the selector matched that is kept, and why."""

    key: str
    purpose: str
    basis: str
    expires_at: float | None
    reason: str


@dataclass(frozen=True)
class Derivation:
    """A record derived from what a forget erased, and what the tenant's policy did to it."""

    key: str
    why: str
    """``lineage`` (built from an erased record), ``mention`` (names the erased subject),
    or ``lineage+mention`` (both)."""
    action: str
    """``quarantined``, ``redacted`` or ``kept``."""
    detail: str


@dataclass(frozen=True)
class QuarantineItem:
    """A record held back from reads until it is re-derived or released."""

    key: str
    why: str
    handle: str
    """The erasure that quarantined it."""
    since: float
    sources: tuple[str, ...]
    surviving_sources: tuple[str, ...]
    """The sources that still exist: what a re-derivation can be built from."""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PathState:
    """Where one read path stands with respect to one erasure."""

    state: str
    """``absorbed``: the path holds nothing of the erasure; ``pending``: entries remain
    inside it but every candidate is resolved against the origin's live claims, so
    none is served; ``refused``: the path is behind and reads through it are refused.
    The ``backups`` path (present once a backup was taken) is final at acknowledgement:
    ``shredded``: the keys sealing the erasure's content in every older backup were
    destroyed in its transaction; ``ledger-replay``: some of it is still sealed under keys
    that live (its subjects keep other claims), and only the ledger replay every restore
    runs keeps it out; ``absorbed``: nothing was released. See docs/architecture.md."""
    applied_epoch: int
    """The newest epoch this path has fully absorbed."""
    max_propagation_s: float
    """The bound this path declares for absorbing an erasure."""
    read_safe: bool = True
    """True when nothing erased can leave the store through this path right now."""
    erased_epoch: int = 0
    """The newest epoch whose erased bytes are physically gone from this path's files
    (origin: WAL checkpointed; fts: deleted entries out of its pages; ann: index file saved)."""
    measured_propagation_s: float | None = None
    """The longest time, measured by this process, this path took to absorb an erasure
    after its acknowledgement (None: none measured yet)."""
    measured_erasure_s: float | None = None
    """The longest measured time from acknowledgement to physical erasure on this path."""

    def to_dict(self) -> dict:
        return asdict(self)


COPY_STATES = ("erased", "shredded", "present", "cannot_verify")
"""What a verification says of one copy of the store's data (docs/evidence-ladder.md)."""

NOT_YET_STATES = ("pending", "unchecked")
"""What a receipt or a status says of a copy no verification has checked yet: ``pending``
while the work that removes the erasure's bytes from it (the compactor's saves and
checkpoint; on PostgreSQL the maintenance) has not run past the erasure, ``unchecked``
once it has (``verify`` checks it next). Never ``erased`` by assumption."""

FINAL_COPY_STATES = ("erased", "shredded")
"""The copy states that allow the level ``erased``: a level is ``erased`` only when every
copy is in one of them (:func:`allows_erased`)."""


@dataclass(frozen=True)
class CopyState:
    """Where one copy of the store's data stands for one erasure (docs/evidence-ladder.md).

    ``erased``: a byte scan of the copy found none of the erasure's fingerprints (or an
    earlier verification did, recorded in the ledger). ``shredded``: the copy is not
    scanned, and what it can still hold of the erasure is ciphertext under data keys that
    were destroyed, their wrapped copies under key-encryption keys that were destroyed too.
    ``present``: a scan found the erasure's bytes there (the maintenance that removes them
    is owed). ``cannot_verify``: neither scanned nor shredded; ``reason`` says why.
    On a receipt or a status also ``pending`` and ``unchecked`` (:data:`NOT_YET_STATES`)."""

    state: str
    """One of :data:`COPY_STATES`, or on a receipt or a status one of :data:`NOT_YET_STATES`."""
    reason: str
    """Why, in counts and file or copy names; never content, keys or subjects."""
    checked_at: float | None = None
    """Unix time of the verification that found this state; None when no verification did
    (a receipt's or a status's state before one, or a backups state decided in the
    erasure's own transaction)."""

    def to_dict(self) -> dict:
        return asdict(self)


def allows_erased(copies: Mapping[str, CopyState]) -> bool:
    """Whether these copies allow the level ``erased``: every one ``erased`` or ``shredded``."""
    return all(c.state in FINAL_COPY_STATES for c in copies.values())


@dataclass(frozen=True)
class Receipt:
    """The answer to ``forget`` (and to a TTL expiry): never a bare boolean."""

    handle: str
    """Verification handle: pass it to ``status``, ``wait`` and ``verify``."""
    epoch: int
    """Erasure epoch, assigned in the transaction that committed the tombstones."""
    kind: str
    """``forget`` or ``expire``."""
    selector: Selector
    level: str
    """Evidence level: ``intent``, ``unreadable`` or ``erased``."""
    released: tuple[Released, ...]
    erased: tuple[str, ...]
    """Keys whose last claim went: the records are gone from the origin."""
    retained: tuple[Retained, ...]
    quarantined: tuple[str, ...]
    """Derived records held back from reads until re-derived (cross-subject issue)."""
    paths: Mapping[str, PathState]
    max_propagation_s: float
    acknowledged_at: float
    derivations: tuple[Derivation, ...] = ()
    """Every record derived from the erasure (lineage, mentions) and what was done to it."""
    policy: str = "quarantine"
    """The tenant's derivation policy that applied."""
    identifiers_erased: bool = False
    """True when a subject's registered identifiers were erased with its last claim in the
    tenant (by whatever selector or expiry removed that claim)."""
    subjects_erased: tuple[str, ...] = ()
    """The subjects whose registered identifiers this erasure erased, their last claim gone."""
    tenant_erased: bool = False
    """True when nothing of the tenant was left, so its name was erased too (docs/concepts.md §8)."""
    ledger_seq: int = 0
    """Where this erasure sits in the hash-chained ledger."""
    ledger_hash: str = ""
    """The ledger entry's hash: keep it, and a later rewrite of the ledger shows."""
    copies: Mapping[str, CopyState] = field(default_factory=dict)
    """Each copy of the store's data and its state at acknowledgement: ``pending`` (the
    bytes may remain until the compactor's work and a ``verify``) for every copy but the
    backups, whose state the erasure's transaction decided (``shredded``, ``erased`` when
    nothing was released, ``cannot_verify`` under ``ledger-replay``). See
    docs/evidence-ladder.md."""

    def to_dict(self) -> dict:
        return {
            "handle": self.handle,
            "epoch": self.epoch,
            "kind": self.kind,
            "selector": self.selector.to_dict(),
            "level": self.level,
            "released": [asdict(r) for r in self.released],
            "erased": list(self.erased),
            "retained": [asdict(r) for r in self.retained],
            "quarantined": list(self.quarantined),
            "derivations": [asdict(d) for d in self.derivations],
            "policy": self.policy,
            "identifiers_erased": self.identifiers_erased,
            "tenant_erased": self.tenant_erased,
            "subjects_erased": list(self.subjects_erased),
            "paths": {k: v.to_dict() for k, v in self.paths.items()},
            "max_propagation_s": self.max_propagation_s,
            "acknowledged_at": self.acknowledged_at,
            "ledger_seq": self.ledger_seq,
            "ledger_hash": self.ledger_hash,
            "copies": {k: v.to_dict() for k, v in self.copies.items()},
        }


@dataclass(frozen=True)
class Status:
    """How far one erasure has gone, as ``status``/``wait`` report it."""

    handle: str
    epoch: int
    kind: str
    level: str
    paths: Mapping[str, PathState]
    pending_deletions: int
    """Erased records some derived artifact has not absorbed yet (whole store)."""
    settled: bool
    """True when every path has absorbed this erasure."""
    max_propagation_s: float
    acknowledged_at: float
    counts: Mapping[str, int]
    """How many claims were released and records erased, retained, quarantined."""
    erased: bool = False
    """True when the store's own files (origin, fts, ann) are physically rid of this erasure
    (``erased_epoch`` past its epoch): what ``verify`` then checks byte by byte. Backups
    are reported by their own path (``shredded`` or ``ledger-replay``) and by verify."""
    alarms: tuple[str, ...] = ()
    """Paths that passed their declared bound for this erasure (also logged)."""
    erase_bound_s: float = 0.0
    """The declared bound from acknowledgement to physical erasure on every path."""
    copies: Mapping[str, CopyState] = field(default_factory=dict)
    """Each copy of the store's data and its state now: what the last verification at the
    receipt's level found of it, where that still holds; else ``pending`` or ``unchecked``
    (:data:`NOT_YET_STATES`). With ``level`` ``erased``, every copy is ``erased`` or
    ``shredded``. See docs/evidence-ladder.md."""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["paths"] = {k: v.to_dict() for k, v in self.paths.items()}
        d["copies"] = {k: v.to_dict() for k, v in self.copies.items()}
        d["counts"] = dict(self.counts)
        d["alarms"] = list(self.alarms)
        return d


@dataclass(frozen=True)
class Check:
    """One recorded check of a verification (docs/concepts.md §3)."""

    name: str
    """What was checked, e.g. ``origin.by_id``, ``fts.by_text``, ``ann.by_neighbours``, ``bytes``."""
    rung: str
    """The ladder rung it supports: ``unreadable`` (probes through read paths) or
    ``erased`` (the bytes and the structures that held them)."""
    outcome: str
    """``pass``, ``fail``, ``cannot_verify``, or ``recorded`` (proven by an earlier
    verification whose fingerprints were then discarded; see ``detail``)."""
    detail: str
    """Counts and file names behind the outcome; never content, keys or subjects."""
    at: float
    """Unix time the check ran."""
    duration_s: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verification:
    """What ``verify(handle)`` found, as appended to the ledger."""

    handle: str
    epoch: int
    level: str
    """The rung every check supports now: ``intent``, ``unreadable`` or ``erased``."""
    receipt_level: str
    """The receipt's level after this verification: the highest rung ever proven (it
    only moves up; a later failure shows in ``level`` and ``checks``, not by erasing
    the earlier proof)."""
    checks: tuple[Check, ...]
    verified_at: float
    scanned_bytes: int
    """Bytes of store files scanned for fingerprints (0 when no scan ran)."""
    scanned_files: tuple[str, ...]
    fingerprints_discarded: bool
    """True once ``erased`` was proven and the fingerprints were deleted."""
    ledger_seq: int
    ledger_hash: str
    copies: Mapping[str, CopyState] = field(default_factory=dict)
    """Each copy of the store's data (the store's files; on PostgreSQL the primary's data
    files, its WAL, each replica; backups) and its state for this erasure. ``level`` is
    ``erased`` only when every copy is ``erased`` or ``shredded``."""

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.outcome in ("fail", "cannot_verify"))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = [c.to_dict() for c in self.checks]
        d["scanned_files"] = list(self.scanned_files)
        d["copies"] = {k: v.to_dict() for k, v in self.copies.items()}
        return d


PROBE_SAMPLE = 16
"""Erased records whose words and neighbours are kept for probes (a sample bounds the
cost of a forget; the byte scan covers every record)."""


def probe_sample(ids: Sequence[int]) -> tuple[int, ...]:
    """The erased records (``ids`` sorted, as the evidence keeps them) whose words and
    neighbours are kept for probes: the same ones at forget time and at every verify."""
    return tuple(ids[:: max(1, len(ids) // PROBE_SAMPLE)][:PROBE_SAMPLE])
