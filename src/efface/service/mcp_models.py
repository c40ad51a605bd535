"""What the MCP tools return: typed models, so every tool publishes an output schema.

Each model is built from the library object's ``to_dict()`` (the CLI's JSON shape), minus the
tenant: over MCP the tenant is never the agent's to name or to see, it comes from the server's
configuration (stdio) or from the API key (HTTP). Field descriptions are part of the schema an
agent reads, so they say what each value proves and what it does not.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Level = Literal["intent", "unreadable", "erased"]

LADDER = {
    "intent": (
        "intent: the forget is recorded and durable (tombstones committed, epoch assigned). "
        "This is all an acknowledgement proves: it is not evidence that the content is gone anywhere."
    ),
    "unreadable": (
        "unreadable: probes through every read path (point read, full text, vector neighbours, "
        "derived records), routed to the origin, found nothing: no read path serves the content. "
        "Its bytes may still be on disk."
    ),
    "erased": (
        "erased: verify scanned the bytes of every file in the store's custody and found no trace: "
        "the content is proven gone. Only verify_erasure reaches this level."
    ),
}
"""What each rung of the evidence ladder means, in the words the tool descriptions use."""

LADDER_TEXT = " ".join(LADDER.values())


class _Out(BaseModel):
    # Built from to_dict(): fields the agent must not see (the tenant) are dropped silently.
    model_config = ConfigDict(extra="ignore")


class WriteResult(_Out):
    """A write acknowledged: committed and fsynced."""

    key: str
    epoch: int = Field(description="The epoch the write was committed at.")


class SubjectResult(_Out):
    """A subject's identifiers registered."""

    epoch: int
    identifiers: int = Field(description="How many distinct identifiers are now registered for the subject.")


class ClaimOut(_Out):
    subject: str
    purpose: str
    basis: str = Field(description="Why it may be kept: consent, contract, legal_hold, ...")
    expires_at: float | None = Field(description="Unix time the claim lapses; null: until forgotten.")


class MemoryOut(_Out):
    key: str
    text: str
    metadata: dict[str, Any]
    sources: list[str] = Field(description="Keys this record was derived from.")
    claims: list[ClaimOut] = Field(description="The live claims for the purpose the read named.")
    updated_at: float


class ReadResult(_Out):
    """A point read: the record, or found=false when none is live for this purpose."""

    found: bool
    memory: MemoryOut | None


class TurnOut(_Out):
    key: str
    text: str
    metadata: dict[str, Any]


class HitOut(_Out):
    key: str
    text: str = Field(description="Read from the origin at query time, never from an index.")
    score: float = Field(description="Reciprocal-rank-fusion score; higher is better.")
    via: list[str] = Field(description="Which indexes proposed it: ann (meaning), fts (words).")
    metadata: dict[str, Any]
    window: list[TurnOut] = Field(default_factory=list, description="Its session's turns around it, when asked.")


class RecallResult(_Out):
    hits: list[HitOut]


class SelectorOut(_Out):
    """What the forget named (the tenant is implied)."""

    subject: str | None = None
    purpose: str | None = None
    prefix: str | None = None
    key: str | None = None
    everything: bool = Field(default=False, description="True when the forget named all of the tenant.")


class ReleasedOut(_Out):
    key: str
    subject: str
    purpose: str
    basis: str


class RetainedOut(_Out):
    key: str
    purpose: str
    basis: str
    expires_at: float | None
    reason: str = Field(description="Why the record is kept (another claim, a legal basis, ...).")


class DerivationOut(_Out):
    key: str
    why: str = Field(description="lineage, mention, or lineage+mention.")
    action: str = Field(description="quarantined, redacted or kept.")
    detail: str


class PathOut(_Out):
    state: str = Field(
        description="absorbed: the path holds nothing of the erasure; pending: entries remain inside it but "
        "none is served (every candidate is resolved against the origin); refused: reads through it are refused; "
        "backups: shredded or ledger-replay."
    )
    applied_epoch: int
    max_propagation_s: float
    read_safe: bool = Field(description="True when nothing erased can leave the store through this path now.")
    erased_epoch: int = Field(description="The newest epoch whose erased bytes are gone from this path's files.")
    measured_propagation_s: float | None = None
    measured_erasure_s: float | None = None


class CopyOut(_Out):
    state: str = Field(
        description="erased: a byte scan of this copy found nothing of the erasure; shredded: only ciphertext under "
        "destroyed keys can remain; present: a scan found its bytes; cannot_verify: neither (the reason says why); "
        "pending: the work that removes the bytes has not run past the erasure yet; unchecked: it has, and no "
        "verification has checked the copy since. The level is erased only when every copy is erased or shredded."
    )
    reason: str
    checked_at: float | None = Field(
        default=None, description="When a verification found this state; null: no verification checked it."
    )


COPIES = (
    "Each copy of the store's data (the store's files, or on PostgreSQL this server's cache, the primary's files "
    "and WAL, each replica; backups) and its state for this erasure."
)


class ReceiptOut(_Out):
    """The answer to forget: a receipt with a verification handle, never a bare success."""

    handle: str = Field(description="Pass it to erasure_status, wait_erasure and verify_erasure.")
    epoch: int = Field(description="The erasure epoch, assigned in the transaction that committed the tombstones.")
    kind: str = Field(description="forget (or expire, for a TTL expiry).")
    selector: SelectorOut
    level: Level = Field(description="The evidence level now. " + LADDER_TEXT)
    level_means: str = Field(description="What this level proves, in words.")
    released: list[ReleasedOut] = Field(description="The claims this forget released.")
    erased: list[str] = Field(description="Keys whose last claim went: the records are gone from the origin.")
    retained: list[RetainedOut] = Field(description="Records the selector matched that are kept, and why.")
    quarantined: list[str] = Field(description="Derived records held back from reads until re-derived.")
    derivations: list[DerivationOut]
    policy: str
    identifiers_erased: bool
    subjects_erased: list[str] = Field(
        default_factory=list, description="Subjects whose registered identifiers went with their last claim."
    )
    tenant_erased: bool = Field(
        default=False, description="True when nothing of the tenant was left, so its name was erased too."
    )
    paths: dict[str, PathOut] = Field(description="Every read path and where it stands with this erasure.")
    max_propagation_s: float
    acknowledged_at: float
    ledger_seq: int
    ledger_hash: str
    copies: dict[str, CopyOut] = Field(
        default_factory=dict, description=COPIES + " At acknowledgement every copy but the backups is pending."
    )
    next_step: str = Field(description="What to call to move the receipt up the ladder.")


class StatusOut(_Out):
    """Where an erasure stands on every read path, now. Reading it proves nothing new."""

    handle: str
    epoch: int
    kind: str
    level: Level = Field(description="The receipt's level: the highest rung verify has proven. " + LADDER_TEXT)
    level_means: str
    paths: dict[str, PathOut]
    pending_deletions: int = Field(description="Erased records some derived artifact has not absorbed (whole store).")
    settled: bool = Field(description="True when every read path has absorbed this erasure.")
    erased: bool = Field(
        description="True when the store's files are rid of this erasure by the artifacts' own account: what "
        "verify_erasure then checks byte by byte. Not the 'erased' level until verify proves it."
    )
    max_propagation_s: float
    acknowledged_at: float
    counts: dict[str, int]
    alarms: list[str] = Field(description="Paths that passed their declared bound for this erasure.")
    erase_bound_s: float
    copies: dict[str, CopyOut] = Field(
        default_factory=dict,
        description=COPIES + " As the last verification at the receipt's level found it where that still holds, "
        "else pending or unchecked.",
    )


class CheckOut(_Out):
    name: str
    rung: str = Field(description="unreadable (probes through read paths) or erased (bytes and structures).")
    outcome: str = Field(description="pass, fail, cannot_verify, or recorded (proven by an earlier verification).")
    detail: str
    at: float
    duration_s: float


class VerificationOut(_Out):
    """What verify_erasure found, as appended to the store's hash-chained ledger."""

    handle: str
    epoch: int
    level: Level = Field(description="The rung every check supports now. " + LADDER_TEXT)
    level_means: str
    receipt_level: Level = Field(description="The receipt's level after this verification (it only moves up).")
    checks: list[CheckOut]
    failed: list[str] = Field(description="Names of the checks that failed or could not verify.")
    verified_at: float
    scanned_bytes: int
    scanned_files: list[str]
    fingerprints_discarded: bool
    ledger_seq: int
    ledger_hash: str
    copies: dict[str, CopyOut] = Field(default_factory=dict, description=COPIES + " What this verification found.")
