"""What travels over HTTP: the request bodies, the few response shapes that are not
:mod:`efface.model` types, and the error envelope with its status codes.

The server and the client both import this module, so the two ends cannot drift. Responses
that are library values (``Receipt``, ``Status``, ``Verification``, ``Memory``, ``Hit``) are
the frozen dataclasses of :mod:`efface.model` themselves: pydantic builds their JSON schema
for the OpenAPI document and rebuilds them, nested types included, on the client.

Nothing that identifies data is ever put in a URL: keys, handles, subjects, queries and texts
travel in request bodies, so access logs (which print the path) cannot carry them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from .. import errors
from ..errors import EffaceError
from ..model import Memory

# -- request bodies ------------------------------------------------------------------------------
# The library validates every value (and says what is wrong without echoing it); the models
# here only fix the shape, so the OpenAPI document is exact. ``tenant`` is optional everywhere:
# the key decides the tenant, and naming another one is refused.


# Fields the library validates: the OpenAPI document states their JSON type, the body models
# take any JSON value, and the store answers a wrong one with its own typed error (the same
# message an embedded store gives).
Str: TypeAlias = Annotated[Any, WithJsonSchema({"type": "string"})]
Num: TypeAlias = Annotated[Any, WithJsonSchema({"type": "number"})]
Int: TypeAlias = Annotated[Any, WithJsonSchema({"type": "integer"})]
Bool: TypeAlias = Annotated[Any, WithJsonSchema({"type": "boolean"})]
Obj: TypeAlias = Annotated[Any, WithJsonSchema({"type": "object"})]
Strs: TypeAlias = Annotated[Any, WithJsonSchema({"type": "array", "items": {"type": "string"}})]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str | None = Field(
        default=None,
        description="Optional: the API key's tenant is used. Naming another tenant is refused (403).",
    )


class WriteItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: Str
    text: Str
    subject: Str = None
    purpose: Str = None
    basis: Str = None
    ttl: Num = None
    metadata: Obj = None
    sources: Strs = None


class WriteBody(_Body):
    key: Str
    text: Str
    subject: Str
    purpose: Str
    basis: Str = "consent"
    ttl: Num = Field(default=None, description="Seconds until the claim expires.")
    metadata: Obj = None
    sources: Strs = None
    replace: Bool = Field(default=False, description="Replace a record other subjects hold claims on (erasing it).")


class WriteManyBody(_Body):
    items: list[WriteItem]
    subject: Str = None
    purpose: Str = None
    basis: Str = "consent"
    ttl: Num = None
    embeddings: list[list[float]] | None = Field(
        default=None, description="Precomputed vectors from this store's embedder, one row per item."
    )
    replace: Bool = Field(default=False, description="As for write, for every item.")


class RetainBody(_Body):
    key: Str
    subject: Str
    purpose: Str
    basis: Str
    ttl: Num = None


class RegisterSubjectBody(_Body):
    subject: Str
    identifiers: Strs


class ReadBody(_Body):
    key: Str
    purpose: Str


class ScanBody(_Body):
    purpose: Str
    prefix: Str = None
    subject: Str = None
    after: Str = None
    limit: Int = 100


class RecallBody(_Body):
    query: Str
    purpose: Str
    subject: Str = None
    k: Int = 10
    after: Annotated[Any, WithJsonSchema({"type": ["number", "string"]})] = Field(
        default=None,
        description="Only records whose metadata 'at' is at or after this time (unix seconds or ISO 8601).",
    )
    before: Annotated[Any, WithJsonSchema({"type": ["number", "string"]})] = Field(
        default=None, description="Only records whose metadata 'at' is before this time (unix seconds or ISO 8601)."
    )
    said_by: Str = Field(default=None, description="Only records whose metadata 'speaker' is this.")
    window: Int = Field(default=0, description="Each hit's neighbouring turns in its metadata 'session', each side.")


class ForgetBody(_Body):
    subject: Str = None
    purpose: Str = None
    prefix: Str = None
    key: Str = None
    # Any JSON value, checked by the library: pydantic would take "yes" for True, and erase a tenant.
    everything: Bool = Field(default=False, description="Forget all of the key's tenant (and name nothing else).")


class HandleBody(_Body):
    handle: Str = Field(description="The handle a receipt carries (receipt.handle).")


class WaitBody(HandleBody):
    timeout: float = Field(default=30.0, description="Seconds; the server caps it (see /v1/health).")
    until: Str = Field(default="erased", description="'erased' (default) or 'absorbed'.")


class PolicyBody(_Body):
    policy: Str
    reason: Str = None


class ReleaseBody(_Body):
    key: Str
    reason: Str


class RederiveBody(_Body):
    key: Str
    text: Str
    sources: Strs = None
    metadata: Obj = None


class TenantBody(_Body):
    pass


# -- responses that are not model types ----------------------------------------------------------
class Epoch(BaseModel):
    epoch: int


class ReadResult(BaseModel):
    found: bool
    memory: Memory | None = Field(description="The record, or null when none is live for the purpose.")


class ReceiptRow(BaseModel):
    """A stored receipt, as kept: keyed hashes in place of keys and subjects."""

    handle: str
    epoch: int
    kind: str
    tenant_h: str
    created_at: float
    body: dict[str, Any]


class LedgerEntry(BaseModel):
    seq: int
    at: float
    kind: str
    handle: str | None
    body: str
    prev: str
    hash: str


class ChainResult(BaseModel):
    ok: bool
    entries: int
    problems: list[str]


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    max_wait_s: float
    max_body_bytes: int


class ErrorDetail(BaseModel):
    type: str = Field(description="The efface error class, e.g. UnknownPurpose, NotFound, ScopeError.")
    message: str
    scope: str | None = None
    required_epoch: int | None = None
    applied_epoch: int | None = None
    index: int | None = Field(default=None, description="CommonIdentifier: which identifier (1-based).")
    rule: str | None = Field(default=None, description="CommonIdentifier: the rule it broke.")
    claims: int | None = Field(default=None, description="KeyInUse: claims other subjects hold on the record.")


ERROR_FIELDS: dict[type[EffaceError], tuple[str, ...]] = {
    errors.ErasureNotSettled: ("scope", "required_epoch", "applied_epoch"),
    errors.CommonIdentifier: ("index", "rule"),
    errors.KeyInUse: ("claims",),
}
"""The attributes an error carries besides its message (none of them personal data), sent
in the error body and given back to the error the client raises."""


def error_fields(exc: EffaceError) -> dict[str, Any]:
    """The attributes of ``exc`` that travel with it (see :data:`ERROR_FIELDS`)."""
    for cls, names in ERROR_FIELDS.items():
        if isinstance(exc, cls):
            return {n: getattr(exc, n, None) for n in names}
    return {}


def rebuild_error(kind: str, message: str, detail: dict[str, Any]) -> EffaceError:
    """The efface error a JSON error body names, its attributes restored."""
    cls = error_class(kind)
    for base, names in ERROR_FIELDS.items():
        if issubclass(cls, base):
            return cls(message, **{n: detail.get(n) for n in names})
    return cls(message)


class ErrorBody(BaseModel):
    error: ErrorDetail


# -- errors <-> status codes ---------------------------------------------------------------------
STATUS: dict[str, int] = {
    "InvalidInput": 400,
    "UnknownPurpose": 400,
    "UnknownBasis": 400,
    "ScopeError": 400,
    "Unauthorized": 401,
    "Forbidden": 403,
    "NotFound": 404,
    "PayloadTooLarge": 413,
    "ErasureNotSettled": 409,
    "UnverifiableDeletion": 409,
    "UnenumeratedScope": 409,
    "CacheRoutedVerification": 409,
    "UnboundedPropagation": 409,
    "EmbedderMismatch": 409,
    "StoreLocked": 503,
    "KeyRingBusy": 503,
}
"""HTTP status for each error type the server reports; anything else is 500."""


class Unauthorized(EffaceError):
    """No API key, a malformed one, an unknown one or a revoked one: nothing was done.
    Send ``Authorization: Bearer efk_...`` with a key from ``efface keys create``."""


class Forbidden(errors.ScopeError):
    """The request named a tenant other than the API key's: nothing was done or read. A key
    acts for exactly one tenant; leave ``tenant`` out or name the key's own."""


class RemoteUnsupported(EffaceError):
    """This operation works on the store's own files, so it runs where the store is (the
    server's machine, with ``efface --store DIR ...``), not through a client."""


def error_class(name: str) -> type[EffaceError]:
    """The efface error class a JSON error type names (EffaceError when unknown)."""
    if name in ("Unauthorized", "Forbidden", "RemoteUnsupported"):
        return {"Unauthorized": Unauthorized, "Forbidden": Forbidden, "RemoteUnsupported": RemoteUnsupported}[name]
    if name == "PayloadTooLarge":
        return errors.InvalidInput
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, EffaceError):
        return cls
    return EffaceError


def status_of(exc: EffaceError) -> int:
    for cls in type(exc).__mro__:
        if cls.__name__ in STATUS:
            return STATUS[cls.__name__]
    return 500


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": desc}
    for code, desc in (
        (400, "Bad input (InvalidInput, UnknownPurpose, UnknownBasis, ScopeError)"),
        (401, "No API key, or an unknown or revoked one (Unauthorized)"),
        (403, "The request named another tenant than the key's (Forbidden, a ScopeError)"),
        (404, "No such handle or record for this tenant (NotFound)"),
        (409, "ErasureNotSettled, UnverifiableDeletion, EmbedderMismatch"),
        (413, "The request body is over the server's limit (PayloadTooLarge)"),
        (422, "The body does not have the documented shape (InvalidInput)"),
        (503, "The store or the key ring is busy or closed (StoreLocked, KeyRingBusy)"),
    )
}
"""Declared on every route so the OpenAPI document lists each error the route can answer."""
