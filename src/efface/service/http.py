"""The HTTP API: ``create_app(store, ring)`` gives a FastAPI app whose ``/v1`` routes mirror
:class:`efface.Store`. It parses, calls the library, renders, and turns library errors into
JSON (``{"error": {"type": "UnknownPurpose", "message": ...}}``) at its edges and nowhere else
(:mod:`.edges`: the body limit, server timing, the error handlers, the access log's filter).

* **The tenant comes from the key.** Every route but ``/v1/health`` needs
  ``Authorization: Bearer efk_...``; the key ring resolves it to exactly one tenant, and every
  store call is made for that tenant. A body may name ``tenant`` (so a client keeps the
  library's signatures), but naming another one is refused with 403 before anything is read or
  changed. Handle lookups pass the key's tenant to the store, which answers NotFound for a
  handle of another tenant: the same answer as for a handle that does not exist.
* **Nothing identifying is in a URL.** Every value travels in a JSON body, so uvicorn's access
  log (method, path, status) cannot carry texts, queries, keys, handles or tenant names; its
  query strings are dropped as well (:class:`.edges.DropQuery`). Errors never echo input: the
  library's messages do not, and validation errors name the field, never the value.
* **Store calls block**, so each runs in a worker thread, in its own lane (:class:`Lanes`):
  reads, mutations (one at a time at the store's chokepoint anyway), ``wait`` and
  ``verify`` never queue for a thread behind one another. The key check and the body's
  parsing run on the event loop; the JSON is rendered in the worker.
* **Limits**: request bodies over ``max_body`` bytes get 413 before they are parsed; ``wait``
  blocks at most ``max_wait`` seconds whatever the client asks (it returns the status then).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp

from .. import validate as v
from ..errors import EffaceError, InvalidInput
from ..model import Hit, Memory, QuarantineItem, Receipt, Status, Verification
from ..store import Store
from . import wire as w
from .edges import PHASES, BodyLimit, HeadAsGet, QuietErrors, ServerTiming, efface_error, http_error, validation_error
from .keys import Ring

try:
    __version__ = version("efface")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0"

MAX_BODY = 4 << 20
"""Default request body limit in bytes (4 MiB): room for the library's largest single write
(a 1 MiB text, 64 KiB of metadata, a 1 KiB key, sources, JSON's escapes), so every write an
embedded store takes is taken here too; a bigger ``write_many`` is sent in parts."""
MAX_WAIT = 30.0
"""Default cap on ``wait``'s timeout, in seconds, so no request holds a worker for long."""

McpHook = tuple[ASGIApp, "AbstractAsyncContextManager[Any] | Callable[[], AbstractAsyncContextManager[Any]] | None"]
"""What ``create_app(mcp=...)`` takes (``efface.service.mcp.mcp_http_app(store, ring)``): the
MCP streamable-HTTP ASGI app, which answers at ``/mcp`` itself and is routed there, and its
lifespan (a context manager, or a callable that makes one), which this app's lifespan enters:
Starlette never runs a routed or mounted app's own lifespan."""


# -- thread lanes ---------------------------------------------------------------------------------
READ, WRITE, WAIT, VERIFY = "read", "write", "wait", "verify"
LANE_THREADS = {READ: 32, WRITE: 32, WAIT: 32, VERIFY: 2}
"""Worker threads per lane. Store calls block, so each runs in a worker thread, and each kind
of call has its own lane: a read must never queue for a thread behind writers waiting their
turn at the store's chokepoint, behind ``wait`` calls that sleep up to ``max_wait``, or behind
verifications that scan every file's bytes. The write lane is as wide as the read lane because
the mutations waiting at the chokepoint are committed together, one fsync for the lot (group
commit, :mod:`efface.chokepoint`): a group can only be as large as the threads that wait in it."""

_EPOCH = TypeAdapter(w.Epoch)
_READ_RESULT = TypeAdapter(w.ReadResult)
_MEMORIES = TypeAdapter(list[Memory])
_HITS = TypeAdapter(list[Hit])
_RECEIPT = TypeAdapter(Receipt)
_STATUS = TypeAdapter(Status)
_VERIFICATION = TypeAdapter(Verification)
_RECEIPT_ROWS = TypeAdapter(list[w.ReceiptRow])
_LEDGER = TypeAdapter(list[w.LedgerEntry])
_CHAIN = TypeAdapter(w.ChainResult)
_QUARANTINED = TypeAdapter(list[QuarantineItem])


class Lanes:
    """One capacity limiter per lane (:data:`LANE_THREADS`), made on first use inside the
    server's event loop. ``run`` calls the store in a worker thread of the lane and renders the
    JSON there too (the ``response_model`` of each route documents the shape): one thread hop
    per request, and the event loop only moves bytes."""

    def __init__(self, threads: dict[str, int] | None = None) -> None:
        self._threads = dict(LANE_THREADS if threads is None else threads)
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    def limiter(self, lane: str) -> anyio.CapacityLimiter:
        if lane not in self._limiters:
            self._limiters[lane] = anyio.CapacityLimiter(self._threads[lane])
        return self._limiters[lane]

    async def run(self, lane: str, adapter: TypeAdapter | None, call: Callable[[], Any]) -> Response:
        phases = PHASES.get()
        asked = time.perf_counter()

        def work() -> Response:
            started = time.perf_counter()
            value = call()
            done = time.perf_counter()
            out = value if adapter is None else Response(adapter.dump_json(value), media_type="application/json")
            if phases is not None:
                phases.extend(
                    [
                        ("lane", (started - asked) * 1000),
                        ("store", (done - started) * 1000),
                        ("render", (time.perf_counter() - done) * 1000),
                    ]
                )
            return out

        return await anyio.to_thread.run_sync(work, limiter=self.limiter(lane))


# -- the app --------------------------------------------------------------------------------------------
def create_app(
    store: Store,
    ring: Ring,
    *,
    max_body: int = MAX_BODY,
    max_wait: float = MAX_WAIT,
    mcp: McpHook | None = None,
) -> FastAPI:
    """The HTTP API over ``store``, with keys from ``ring``. The caller owns both (and closes
    them); ``mcp`` mounts an MCP streamable-HTTP app at ``/mcp`` (see :data:`McpHook`)."""
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise InvalidInput("max_body must be a positive whole number of bytes")
    if isinstance(max_wait, bool) or not isinstance(max_wait, int | float) or not 0 <= max_wait <= 86_400:
        # NaN too: min(timeout, nan) is the client's timeout, so a NaN cap capped nothing
        raise InvalidInput("max_wait must be a number of seconds from 0 to 86400")

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
        redirect_slashes=False,  # '/v1/health/' is a 404 with the error body, as on every route
    )
    app.add_exception_handler(EffaceError, efface_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_middleware(BodyLimit, max_body=max_body)
    app.add_middleware(HeadAsGet, gets=lambda: _get_paths(app))
    app.add_middleware(QuietErrors)  # around everything of ours, /mcp included
    app.add_middleware(ServerTiming)  # outermost: a 413 and a 500 are timed too

    bearer = HTTPBearer(auto_error=False, description="An API key from `efface keys create`.")
    lanes = Lanes()

    # Async, so a local ring's key check runs on the event loop (one indexed SQLite read) and
    # costs no thread hop; a remote ring's (a database round trip) runs in a thread. A default,
    # not Annotated: the string annotation could not see ``bearer``.
    async def key_tenant(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:  # noqa: B008
        token = creds.credentials if creds is not None else None
        tenant = await anyio.to_thread.run_sync(ring.resolve, token) if ring.remote else ring.resolve(token)
        if tenant is None:
            raise w.Unauthorized(
                "no valid API key: send 'Authorization: Bearer efk_...' with a key from `efface keys create` "
                "(a revoked key stops working at once)"
            )
        return tenant

    def scoped(body: w._Body, tenant: str) -> str:
        if body.tenant is not None:
            v.name(body.tenant, "tenant")  # a malformed name is refused as the library refuses it
        if body.tenant is not None and body.tenant != tenant:
            raise w.Forbidden("this API key acts for one tenant only, and the request named another; nothing was done")
        return tenant

    Tenant = Depends(key_tenant)

    @app.get("/v1/health", tags=["service"])
    async def health() -> w.Health:
        """Liveness and the server's limits. Needs no key and says nothing about the store."""
        return w.Health(status="ok", version=__version__, max_wait_s=max_wait, max_body_bytes=max_body)

    # -- writes
    @app.post("/v1/write", tags=["write"], response_model=w.Epoch)
    async def write(body: w.WriteBody, tenant: str = Tenant) -> Response:
        """Store a text under a key with one claim (Store.write)."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE,
            _EPOCH,
            lambda: w.Epoch(
                epoch=store.write(
                    body.key,
                    body.text,
                    tenant=t,
                    subject=body.subject,
                    purpose=body.purpose,
                    basis=body.basis,
                    ttl=body.ttl,
                    metadata=body.metadata,
                    sources=body.sources,
                    replace=body.replace,
                )
            ),
        )

    @app.post("/v1/write_many", tags=["write"], response_model=w.Epoch)
    async def write_many(body: w.WriteManyBody, tenant: str = Tenant) -> Response:
        """Write many records in one transaction, one epoch (Store.write_many)."""
        t = scoped(body, tenant)

        def call() -> w.Epoch:
            items = [i.model_dump(exclude_none=True) for i in body.items]
            embeddings = None
            if body.embeddings is not None:
                import numpy as np

                try:
                    with np.errstate(over="ignore"):  # out of float32's range: refused below, as not finite
                        embeddings = np.asarray(body.embeddings, dtype=np.float32)
                except ValueError:
                    raise InvalidInput("embeddings must be a list of equal-length rows of numbers") from None
            epoch = store.write_many(
                items,
                tenant=t,
                subject=body.subject,
                purpose=body.purpose,
                basis=body.basis,
                ttl=body.ttl,
                embeddings=embeddings,
                replace=body.replace,
            )
            return w.Epoch(epoch=epoch)

        return await lanes.run(WRITE, _EPOCH, call)

    @app.post("/v1/retain", tags=["write"], response_model=w.Epoch)
    async def retain(body: w.RetainBody, tenant: str = Tenant) -> Response:
        """Add a claim to an existing record (Store.retain)."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE,
            _EPOCH,
            lambda: w.Epoch(
                epoch=store.retain(
                    body.key, tenant=t, subject=body.subject, purpose=body.purpose, basis=body.basis, ttl=body.ttl
                )
            ),
        )

    @app.post("/v1/register_subject", tags=["write"], response_model=w.Epoch)
    async def register_subject(body: w.RegisterSubjectBody, tenant: str = Tenant) -> Response:
        """Record the identifiers that name a subject (Store.register_subject)."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE,
            _EPOCH,
            lambda: w.Epoch(epoch=store.register_subject(body.subject, tenant=t, identifiers=body.identifiers)),
        )

    # -- reads
    @app.post("/v1/read", tags=["read"], response_model=w.ReadResult)
    async def read(body: w.ReadBody, tenant: str = Tenant) -> Response:
        """The record under a key, if it has a live claim for the purpose (Store.read)."""
        t = scoped(body, tenant)

        def call() -> w.ReadResult:
            memory = store.read(body.key, tenant=t, purpose=body.purpose)
            return w.ReadResult(found=memory is not None, memory=memory)

        return await lanes.run(READ, _READ_RESULT, call)

    @app.post("/v1/scan", tags=["read"], response_model=list[Memory])
    async def scan(body: w.ScanBody, tenant: str = Tenant) -> Response:
        """The listing read, in key order, paged with ``after`` (Store.scan)."""
        t = scoped(body, tenant)
        return await lanes.run(
            READ,
            _MEMORIES,
            lambda: store.scan(
                tenant=t,
                purpose=body.purpose,
                prefix=body.prefix,
                subject=body.subject,
                after=body.after,
                limit=body.limit,
            ),
        )

    @app.post("/v1/recall", tags=["read"], response_model=list[Hit])
    async def recall(body: w.RecallBody, tenant: str = Tenant) -> Response:
        """Hybrid recall by meaning and words (Store.recall)."""
        t = scoped(body, tenant)
        return await lanes.run(
            READ,
            _HITS,
            lambda: store.recall(
                body.query,
                tenant=t,
                purpose=body.purpose,
                subject=body.subject,
                k=body.k,
                after=body.after,
                before=body.before,
                said_by=body.said_by,
                window=body.window,
            ),
        )

    # -- forget and the erasure's life
    @app.post("/v1/forget", tags=["forget"], response_model=Receipt)
    async def forget(body: w.ForgetBody, tenant: str = Tenant) -> Response:
        """Release the claims the selector names and erase records left with none; the receipt
        (Store.forget). Its level starts at 'intent': follow it with status, wait, verify."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE,
            _RECEIPT,
            lambda: store.forget(
                tenant=t,
                subject=body.subject,
                purpose=body.purpose,
                prefix=body.prefix,
                key=body.key,
                everything=body.everything,
            ),
        )

    @app.post("/v1/status", tags=["forget"], response_model=Status)
    async def status(body: w.HandleBody, tenant: str = Tenant) -> Response:
        """Where an erasure stands on every read path, now (Store.status)."""
        t = scoped(body, tenant)
        return await lanes.run(READ, _STATUS, lambda: store.status(body.handle, tenant=t))

    @app.post("/v1/wait", tags=["forget"], response_model=Status)
    async def wait(body: w.WaitBody, tenant: str = Tenant) -> Response:
        """Wait until the erasure is erased (or absorbed), at most the server's max_wait_s."""
        t = scoped(body, tenant)
        timeout = body.timeout if body.timeout == body.timeout else 0.0  # NaN waits not at all
        timeout = min(max(timeout, 0.0), max_wait)
        return await lanes.run(WAIT, _STATUS, lambda: store.wait(body.handle, timeout, tenant=t, until=body.until))

    @app.post("/v1/verify", tags=["forget"], response_model=Verification)
    async def verify(body: w.HandleBody, tenant: str = Tenant) -> Response:
        """Climb the evidence ladder with recorded checks (Store.verify)."""
        t = scoped(body, tenant)
        return await lanes.run(VERIFY, _VERIFICATION, lambda: store.verify(body.handle, tenant=t))

    html: dict[int | str, dict[str, Any]] = {200: {"content": {"application/json": {}, "text/html": {}}}}

    @app.post("/v1/certificate", tags=["forget"], responses=html)
    async def certificate(body: w.HandleBody, request: Request, tenant: str = Tenant) -> Response:
        """The deletion certificate (JSON; HTML with ``Accept: text/html``)."""
        t = scoped(body, tenant)
        accept = request.headers.get("accept", "")
        as_html = "text/html" in accept and "application/json" not in accept

        def call() -> Response:
            cert = store.certificate(body.handle, tenant=t)
            return _html(cert) if as_html else JSONResponse(cert)

        return await lanes.run(READ, None, call)

    @app.post("/v1/certificate.html", tags=["forget"], response_class=HTMLResponse)
    async def certificate_html(body: w.HandleBody, tenant: str = Tenant) -> Response:
        """The deletion certificate as a readable HTML page."""
        t = scoped(body, tenant)
        return await lanes.run(READ, None, lambda: _html(store.certificate(body.handle, tenant=t)))

    @app.post("/v1/receipts", tags=["forget"], response_model=list[w.ReceiptRow])
    async def receipts(body: w.TenantBody, tenant: str = Tenant) -> Response:
        """The tenant's stored receipts, oldest first, as kept (keyed hashes)."""
        t = scoped(body, tenant)
        return await lanes.run(READ, _RECEIPT_ROWS, lambda: [w.ReceiptRow(**r) for r in store.receipts(t)])

    @app.post("/v1/ledger", tags=["ledger"], response_model=list[w.LedgerEntry])
    async def ledger(body: w.TenantBody, tenant: str = Tenant) -> Response:
        """The ledger entries about the tenant's erasures and decisions, oldest first."""
        t = scoped(body, tenant)
        return await lanes.run(READ, _LEDGER, lambda: [w.LedgerEntry(**e) for e in store.ledger(t)])

    @app.post("/v1/ledger/verify", tags=["ledger"], response_model=w.ChainResult)
    async def ledger_verify(body: w.TenantBody, tenant: str = Tenant) -> Response:
        """Recompute the whole ledger's hash chain (entries of every tenant: only the count shows)."""
        scoped(body, tenant)

        def call() -> w.ChainResult:
            check = store.verify_ledger()
            return w.ChainResult(ok=check.ok, entries=check.entries, problems=list(check.problems))

        return await lanes.run(VERIFY, _CHAIN, call)

    # -- derivations
    @app.post("/v1/set_policy", tags=["derivations"], response_model=w.Epoch)
    async def set_policy(body: w.PolicyBody, tenant: str = Tenant) -> Response:
        """What a forget does to derived records: quarantine, redact, or keep (Store.set_policy)."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE, _EPOCH, lambda: w.Epoch(epoch=store.set_policy(t, body.policy, reason=body.reason))
        )

    @app.post("/v1/quarantined", tags=["derivations"], response_model=list[QuarantineItem])
    async def quarantined(body: w.TenantBody, tenant: str = Tenant) -> Response:
        """Records held back from reads until re-derived or released (Store.quarantined)."""
        t = scoped(body, tenant)
        return await lanes.run(READ, _QUARANTINED, lambda: store.quarantined(tenant=t))

    @app.post("/v1/release", tags=["derivations"], response_model=w.Epoch)
    async def release(body: w.ReleaseBody, tenant: str = Tenant) -> Response:
        """Lift a quarantine with a recorded reason (Store.release)."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE, _EPOCH, lambda: w.Epoch(epoch=store.release(body.key, tenant=t, reason=body.reason))
        )

    @app.post("/v1/rederive", tags=["derivations"], response_model=w.Epoch)
    async def rederive(body: w.RederiveBody, tenant: str = Tenant) -> Response:
        """Write a new version of a derived record and lift its quarantine (Store.rederive)."""
        t = scoped(body, tenant)
        return await lanes.run(
            WRITE,
            _EPOCH,
            lambda: w.Epoch(
                epoch=store.rederive(body.key, body.text, tenant=t, sources=body.sources, metadata=body.metadata)
            ),
        )

    @app.post("/v1/stats", tags=["service"], response_model=dict[str, Any])
    async def stats(body: w.TenantBody, tenant: str = Tenant) -> Response:
        """The epoch, the embedder, path states, and the tenant's ANN vectors (Store.stats;
        the store-wide record count is left out: it counts other tenants' records)."""
        t = scoped(body, tenant)

        def call() -> Response:
            out = store.stats(tenant=t)
            out.pop("records", None)
            return JSONResponse(out)

        return await lanes.run(READ, None, call)

    if mcp is not None:
        # A route whose endpoint is an ASGI app passes the request through untouched (every
        # method, the path still /mcp, no trailing-slash redirect); a Mount would hand the
        # app the path after its prefix. It stays out of the OpenAPI document.
        app.router.routes.append(Route("/mcp", mcp[0], include_in_schema=False))
        # '/mcp/' goes to the MCP app too, which redirects it to '/mcp' as the MCP SDK's own
        # servers do (MCP clients follow it; one configured with the slash keeps working).
        app.router.routes.append(Route("/mcp/", mcp[0], include_in_schema=False))
    return app


def _get_paths(app: FastAPI) -> set[str]:
    """The paths of ``app``'s routes that take GET (HEAD answers there as GET does)."""
    return {r.path for r in app.routes if isinstance(r, Route) and "GET" in (r.methods or ())}


def _html(cert: dict) -> HTMLResponse:
    from ..erasure.certificate import to_html

    return HTMLResponse(to_html(cert))
