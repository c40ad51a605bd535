"""The HTTP API: ``create_app(store, ring)`` gives a FastAPI app whose ``/v1`` routes mirror
:class:`efface.Store`. It parses, calls the library, renders, and turns library errors into
JSON (``{"error": {"type": "UnknownPurpose", "message": ...}}``) here and nowhere else.

* **The tenant comes from the key.** Every route but ``/v1/health`` needs
  ``Authorization: Bearer efk_...``; the key ring resolves it to exactly one tenant, and every
  store call is made for that tenant. A body may name ``tenant`` (so a client keeps the
  library's signatures), but naming another one is refused with 403 before anything is read or
  changed. Handle lookups pass the key's tenant to the store, which answers NotFound for a
  handle of another tenant: the same answer as for a handle that does not exist.
* **Nothing identifying is in a URL.** Every value travels in a JSON body, so uvicorn's access
  log (method, path, status) cannot carry texts, queries, keys, handles or tenant names; its
  query strings are dropped as well (:class:`DropQuery`). Errors never echo input: the
  library's messages do not, and validation errors name the field, never the value.
* **Store calls block**, so every route is a plain ``def``: FastAPI runs it in its threadpool
  and reads never wait on each other (the store's reads take no lock).
* **Limits**: request bodies over ``max_body`` bytes get 413 before they are parsed; ``wait``
  blocks at most ``max_wait`` seconds whatever the client asks (it returns the status then).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import EffaceError, ErasureNotSettled, InvalidInput
from ..model import Hit, Memory, QuarantineItem, Receipt, Status, Verification
from ..store import Store
from . import wire as w
from .keys import KeyRing

log = logging.getLogger("efface.service")

try:
    __version__ = version("efface")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0"

MAX_BODY = 1 << 20
"""Default request body limit in bytes (1 MiB): a memory is text, not a file."""
MAX_WAIT = 30.0
"""Default cap on ``wait``'s timeout, in seconds, so no request holds a worker for long."""

McpHook = tuple[ASGIApp, "AbstractAsyncContextManager[Any] | Callable[[], AbstractAsyncContextManager[Any]] | None"]
"""What ``create_app(mcp=...)`` takes (``efface.service.mcp.mcp_http_app(store, ring)``): the
MCP streamable-HTTP ASGI app, which answers at ``/mcp`` itself and is routed there, and its
lifespan (a context manager, or a callable that makes one), which this app's lifespan enters:
Starlette never runs a routed or mounted app's own lifespan."""


# -- the body limit ---------------------------------------------------------------------------------
class BodyLimit:
    """Refuse a request body over ``max_body`` bytes with 413, by its Content-Length or, for a
    chunked body, as soon as the bytes received pass the limit (the app is then told the
    client went away, and whatever it answers is replaced by the 413)."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _too_large(self.max_body)(scope, receive, send)
            return
        seen = 0
        over = False

        async def limited() -> Message:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            if not over:
                await send(message)

        try:
            await self.app(scope, limited, guarded)
        finally:
            if over:
                await _too_large(self.max_body)(scope, receive, send)


def _too_large(limit: int) -> JSONResponse:
    return _error_response(413, "PayloadTooLarge", f"the request body is over this server's limit of {limit} bytes")


# -- errors -------------------------------------------------------------------------------------------
def _error_response(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
    detail = {"type": kind, "message": message, **{k: v for k, v in extra.items() if v is not None}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": detail}, status_code=status, headers=headers)


def _efface_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EffaceError)
    extra: dict[str, Any] = {}
    if isinstance(exc, ErasureNotSettled):
        extra = {"scope": exc.scope, "required_epoch": exc.required_epoch, "applied_epoch": exc.applied_epoch}
    return _error_response(w.status_of(exc), type(exc).__name__, str(exc), **extra)


def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Name the field and the rule, never the value (pydantic keeps it under "input").
    problems = []
    for e in exc.errors()[:5]:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        if e.get("type") == "extra_forbidden":  # the unknown name is the caller's, not ours
            problems.append(f"{'.'.join(loc[:-1]) or 'body'}: a field this route does not take")
            continue
        problems.append(f"{'.'.join(loc) or 'body'}: {e.get('msg', 'invalid')}")
    return _error_response(422, "InvalidInput", "the request body does not fit this route: " + "; ".join(problems))


def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = "NotFound" if exc.status_code == 404 else "InvalidInput"
    message = "no such route: see /openapi.json" if exc.status_code == 404 else str(exc.detail)
    return _error_response(exc.status_code, kind, message)


def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    # The type only: a message or a traceback could carry a text or a key.
    log.error("request failed with %s", type(exc).__name__)
    return _error_response(500, "InternalError", "the server failed on this request; nothing about it is logged")


class DropQuery(logging.Filter):
    """For ``uvicorn.access``: drop query strings from the logged path (routes take no query
    parameters; a stray one must not reach the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], args[2].split("?", 1)[0], args[3], args[4])
        return True


def filter_access_log() -> None:
    """Install :class:`DropQuery` on uvicorn's access logger (once)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, DropQuery) for f in logger.filters):
        logger.addFilter(DropQuery())


# -- the app --------------------------------------------------------------------------------------------
def create_app(
    store: Store,
    ring: KeyRing,
    *,
    max_body: int = MAX_BODY,
    max_wait: float = MAX_WAIT,
    mcp: McpHook | None = None,
) -> FastAPI:
    """The HTTP API over ``store``, with keys from ``ring``. The caller owns both (and closes
    them); ``mcp`` mounts an MCP streamable-HTTP app at ``/mcp`` (see :data:`McpHook`)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if mcp is not None and mcp[1] is not None:
                cm = mcp[1]
                await stack.enter_async_context(cm() if callable(cm) else cm)
            yield

    app = FastAPI(
        title="efface",
        version=__version__,
        summary="A memory store for AI agents whose forget can be proven.",
        description=(
            "Every route but /v1/health needs `Authorization: Bearer efk_...` (from `efface keys create`). "
            "The key decides the tenant. Values travel in JSON bodies only, never in URLs."
        ),
        lifespan=lifespan,
        responses=w.ERROR_RESPONSES,
    )
    app.add_exception_handler(EffaceError, _efface_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(BodyLimit, max_body=max_body)

    bearer = HTTPBearer(auto_error=False, description="An API key from `efface keys create`.")

    # A default, not Annotated: the string annotation could not see the local ``bearer``.
    def key_tenant(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:  # noqa: B008
        tenant = ring.resolve(creds.credentials if creds is not None else None)
        if tenant is None:
            raise w.Unauthorized(
                "no valid API key: send 'Authorization: Bearer efk_...' with a key from `efface keys create` "
                "(a revoked key stops working at once)"
            )
        return tenant

    def scoped(body: w._Body, tenant: str) -> str:
        if body.tenant is not None and body.tenant != tenant:
            raise w.Forbidden("this API key acts for one tenant only, and the request named another; nothing was done")
        return tenant

    Tenant = Depends(key_tenant)

    @app.get("/v1/health", tags=["service"])
    def health() -> w.Health:
        """Liveness and the server's limits. Needs no key and says nothing about the store."""
        return w.Health(status="ok", version=__version__, max_wait_s=max_wait, max_body_bytes=max_body)

    # -- writes
    @app.post("/v1/write", tags=["write"])
    def write(body: w.WriteBody, tenant: str = Tenant) -> w.Epoch:
        """Store a text under a key with one claim (Store.write)."""
        epoch = store.write(
            body.key,
            body.text,
            tenant=scoped(body, tenant),
            subject=body.subject,
            purpose=body.purpose,
            basis=body.basis,
            ttl=body.ttl,
            metadata=body.metadata,
            sources=body.sources,
            replace=body.replace,
        )
        return w.Epoch(epoch=epoch)

    @app.post("/v1/write_many", tags=["write"])
    def write_many(body: w.WriteManyBody, tenant: str = Tenant) -> w.Epoch:
        """Write many records in one transaction, one epoch (Store.write_many)."""
        items = [i.model_dump(exclude_none=True) for i in body.items]
        embeddings = None
        if body.embeddings is not None:
            import numpy as np

            try:
                embeddings = np.asarray(body.embeddings, dtype=np.float32)
            except ValueError:
                raise InvalidInput("embeddings must be a list of equal-length rows of numbers") from None
        epoch = store.write_many(
            items,
            tenant=scoped(body, tenant),
            subject=body.subject,
            purpose=body.purpose,
            basis=body.basis,
            ttl=body.ttl,
            embeddings=embeddings,
            replace=body.replace,
        )
        return w.Epoch(epoch=epoch)

    @app.post("/v1/retain", tags=["write"])
    def retain(body: w.RetainBody, tenant: str = Tenant) -> w.Epoch:
        """Add a claim to an existing record (Store.retain)."""
        t = scoped(body, tenant)
        epoch = store.retain(
            body.key, tenant=t, subject=body.subject, purpose=body.purpose, basis=body.basis, ttl=body.ttl
        )
        return w.Epoch(epoch=epoch)

    @app.post("/v1/register_subject", tags=["write"])
    def register_subject(body: w.RegisterSubjectBody, tenant: str = Tenant) -> w.Epoch:
        """Record the identifiers that name a subject (Store.register_subject)."""
        epoch = store.register_subject(body.subject, tenant=scoped(body, tenant), identifiers=body.identifiers)
        return w.Epoch(epoch=epoch)

    # -- reads
    @app.post("/v1/read", tags=["read"])
    def read(body: w.ReadBody, tenant: str = Tenant) -> w.ReadResult:
        """The record under a key, if it has a live claim for the purpose (Store.read)."""
        memory = store.read(body.key, tenant=scoped(body, tenant), purpose=body.purpose)
        return w.ReadResult(found=memory is not None, memory=memory)

    @app.post("/v1/scan", tags=["read"], response_model=list[Memory])
    def scan(body: w.ScanBody, tenant: str = Tenant) -> list[Memory]:
        """The listing read, in key order, paged with ``after`` (Store.scan)."""
        return store.scan(
            tenant=scoped(body, tenant),
            purpose=body.purpose,
            prefix=body.prefix,
            subject=body.subject,
            after=body.after,
            limit=body.limit,
        )

    @app.post("/v1/recall", tags=["read"], response_model=list[Hit])
    def recall(body: w.RecallBody, tenant: str = Tenant) -> list[Hit]:
        """Hybrid recall by meaning and words (Store.recall)."""
        return store.recall(
            body.query, tenant=scoped(body, tenant), purpose=body.purpose, subject=body.subject, k=body.k
        )

    # -- forget and the erasure's life
    @app.post("/v1/forget", tags=["forget"], response_model=Receipt)
    def forget(body: w.ForgetBody, tenant: str = Tenant) -> Receipt:
        """Release the claims the selector names and erase records left with none; the receipt
        (Store.forget). Its level starts at 'intent': follow it with status, wait, verify."""
        return store.forget(
            tenant=scoped(body, tenant),
            subject=body.subject,
            purpose=body.purpose,
            prefix=body.prefix,
            key=body.key,
            everything=body.everything,
        )

    @app.post("/v1/status", tags=["forget"], response_model=Status)
    def status(body: w.HandleBody, tenant: str = Tenant) -> Status:
        """Where an erasure stands on every read path, now (Store.status)."""
        return store.status(body.handle, tenant=scoped(body, tenant))

    @app.post("/v1/wait", tags=["forget"], response_model=Status)
    def wait(body: w.WaitBody, tenant: str = Tenant) -> Status:
        """Wait until the erasure is erased (or absorbed), at most the server's max_wait_s."""
        timeout = body.timeout if body.timeout == body.timeout else 0.0  # NaN waits not at all
        timeout = min(max(timeout, 0.0), max_wait)
        return store.wait(body.handle, timeout, tenant=scoped(body, tenant), until=body.until)

    @app.post("/v1/verify", tags=["forget"], response_model=Verification)
    def verify(body: w.HandleBody, tenant: str = Tenant) -> Verification:
        """Climb the evidence ladder with recorded checks (Store.verify)."""
        return store.verify(body.handle, tenant=scoped(body, tenant))

    html: dict[int | str, dict[str, Any]] = {200: {"content": {"application/json": {}, "text/html": {}}}}

    @app.post("/v1/certificate", tags=["forget"], responses=html)
    def certificate(body: w.HandleBody, request: Request, tenant: str = Tenant) -> Response:
        """The deletion certificate (JSON; HTML with ``Accept: text/html``)."""
        cert = store.certificate(body.handle, tenant=scoped(body, tenant))
        accept = request.headers.get("accept", "")
        if "text/html" in accept and "application/json" not in accept:
            return _html(cert)
        return JSONResponse(cert)

    @app.post("/v1/certificate.html", tags=["forget"], response_class=HTMLResponse)
    def certificate_html(body: w.HandleBody, tenant: str = Tenant) -> HTMLResponse:
        """The deletion certificate as a readable HTML page."""
        return _html(store.certificate(body.handle, tenant=scoped(body, tenant)))

    @app.post("/v1/receipts", tags=["forget"])
    def receipts(body: w.TenantBody, tenant: str = Tenant) -> list[w.ReceiptRow]:
        """The tenant's stored receipts, oldest first, as kept (keyed hashes)."""
        return [w.ReceiptRow(**r) for r in store.receipts(scoped(body, tenant))]

    @app.post("/v1/ledger", tags=["ledger"])
    def ledger(body: w.TenantBody, tenant: str = Tenant) -> list[w.LedgerEntry]:
        """The ledger entries about the tenant's erasures and decisions, oldest first."""
        return [w.LedgerEntry(**e) for e in store.ledger(scoped(body, tenant))]

    @app.post("/v1/ledger/verify", tags=["ledger"])
    def ledger_verify(body: w.TenantBody, tenant: str = Tenant) -> w.ChainResult:
        """Recompute the whole ledger's hash chain (entries of every tenant: only the count shows)."""
        scoped(body, tenant)
        check = store.verify_ledger()
        return w.ChainResult(ok=check.ok, entries=check.entries, problems=list(check.problems))

    # -- derivations
    @app.post("/v1/set_policy", tags=["derivations"])
    def set_policy(body: w.PolicyBody, tenant: str = Tenant) -> w.Epoch:
        """What a forget does to derived records: quarantine, redact, or keep (Store.set_policy)."""
        return w.Epoch(epoch=store.set_policy(scoped(body, tenant), body.policy, reason=body.reason))

    @app.post("/v1/quarantined", tags=["derivations"], response_model=list[QuarantineItem])
    def quarantined(body: w.TenantBody, tenant: str = Tenant) -> list[QuarantineItem]:
        """Records held back from reads until re-derived or released (Store.quarantined)."""
        return store.quarantined(tenant=scoped(body, tenant))

    @app.post("/v1/release", tags=["derivations"])
    def release(body: w.ReleaseBody, tenant: str = Tenant) -> w.Epoch:
        """Lift a quarantine with a recorded reason (Store.release)."""
        return w.Epoch(epoch=store.release(body.key, tenant=scoped(body, tenant), reason=body.reason))

    @app.post("/v1/rederive", tags=["derivations"])
    def rederive(body: w.RederiveBody, tenant: str = Tenant) -> w.Epoch:
        """Write a new version of a derived record and lift its quarantine (Store.rederive)."""
        t = scoped(body, tenant)
        epoch = store.rederive(body.key, body.text, tenant=t, sources=body.sources, metadata=body.metadata)
        return w.Epoch(epoch=epoch)

    @app.post("/v1/stats", tags=["service"])
    def stats(body: w.TenantBody, tenant: str = Tenant) -> dict[str, Any]:
        """The epoch, the embedder, path states, and the tenant's ANN vectors (Store.stats;
        the store-wide record count is left out: it counts other tenants' records)."""
        out = store.stats(tenant=scoped(body, tenant))
        out.pop("records", None)
        return out

    if mcp is not None:
        # A route whose endpoint is an ASGI app passes the request through untouched (every
        # method, the path still /mcp, no trailing-slash redirect); a Mount would hand the
        # app the path after its prefix. It stays out of the OpenAPI document.
        app.router.routes.append(Route("/mcp", mcp[0], include_in_schema=False))
    return app


def _html(cert: dict) -> HTMLResponse:
    from ..erasure.certificate import to_html

    return HTMLResponse(to_html(cert))
