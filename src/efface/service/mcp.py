"""The MCP server: efface as an agent's memory tool, over stdio and streamable HTTP.

One set of tools, built by :func:`build_mcp` on the official MCP SDK (``MCPServer``):
``remember``, ``register_subject``, ``read``, ``recall``, ``forget`` (its result is the
receipt, as structured output), ``erasure_status``, ``wait_erasure`` and ``verify_erasure``.
The tools only parse, call the :class:`~efface.Store` and render; a library error comes back
as a tool error whose text is ``{"error": {"type": ..., "message": ...}}`` (the CLI's JSON
shape), never a traceback.

The tenant is never a tool argument. Over stdio it is the server's configuration
(``build_mcp(store, tenant=...)``). Over HTTP every request carries an API key as a bearer
token; :class:`KeyVerifier` maps it to its one tenant (:meth:`Ring.resolve`) and each tool
acts for the tenant of the request's own access token, so a key never sees or forgets another
tenant's data. :func:`mcp_http_app` is the ASGI app the HTTP server mounts.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Literal, ParamSpec, TypeVar, cast

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import AnyHttpUrl, Field, ValidationError
from starlette.types import ASGIApp

from ..errors import EffaceError, InvalidInput, ScopeError
from ..store import Store
from .keys import Ring
from .mcp_guard import guard_endpoint, quiet_sdk_logs
from .mcp_models import (
    LADDER,
    LADDER_TEXT,
    ReadResult,
    RecallResult,
    ReceiptOut,
    StatusOut,
    SubjectResult,
    VerificationOut,
    WriteResult,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

NEXT_STEP = {
    "intent": "call wait_erasure(handle) to let the store erase the bytes, then verify_erasure(handle) for evidence",
    "unreadable": "call wait_erasure(handle), then verify_erasure(handle): only its byte scan proves 'erased'",
    "erased": "nothing: verify has proven the bytes gone; verify_erasure(handle) re-runs the checks at any time",
}

FORGET = (
    "Release the claims the selector names (at least one of subject, purpose, prefix, key; they combine "
    "with AND) and erase every record left with none. Returns the receipt: its handle, its epoch, what was "
    "released, erased, retained (and why) and quarantined, and every read path's state. The receipt's level "
    "is the evidence, and it starts at 'intent': " + LADDER_TEXT + " Call wait_erasure, then verify_erasure, "
    "before you report a memory as erased; report the level verify_erasure returns."
)

FORGET_EVERYTHING = (
    " everything=true (and nothing else) forgets all of this tenant: every claim but legal holds, every "
    "registered subject's identifiers and, once nothing of it is left, the tenant's name. This server allows it "
    "because its tenant is one person's (a per-user tenant); ask the user to confirm before you call it."
)

INSTRUCTIONS = (
    "efface is a memory store whose forget can be proven. Write memories with remember, find them with "
    "read and recall, and forget them with forget, which returns a receipt with a handle. A receipt's "
    "level is evidence, and only these words count: " + LADDER_TEXT + " A receipt at 'intent' is not proof "
    "of deletion: call wait_erasure, then verify_erasure, and report the level verify returns. "
    "Every tool acts for one tenant, fixed by the server (its configuration or your API key)."
)


# -- the HTTP side: API keys -> one tenant each ----------------------------------------------
class TenantToken(AccessToken):
    """An API key accepted by :class:`KeyVerifier`: the tenant it acts for travels with it."""

    tenant: str


class KeyVerifier:
    """The SDK's ``TokenVerifier`` over efface's key ring: a bearer token is an API key, and a
    valid one stands for exactly one tenant. Malformed, unknown and revoked keys are refused
    (the SDK answers 401 before any tool runs). The ring is asked on every request, so a
    revocation takes effect on the next one."""

    def __init__(self, ring: Ring) -> None:
        self.ring = ring

    async def verify_token(self, token: str) -> AccessToken | None:
        tenant = await anyio.to_thread.run_sync(self.ring.resolve, token)
        if tenant is None:
            return None
        # client_id is the key's public id (efk_<id>_...): the SDK binds each HTTP session to it,
        # so a session opened with one key cannot be used with another.
        return TenantToken(token=token, client_id=token.split("_")[1], scopes=[], tenant=tenant)


# -- the edge: library errors -> tool errors -----------------------------------------------
def _tool_error(kind: str, message: str) -> CallToolResult:
    doc = {"error": {"type": kind, "message": message}}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(doc, ensure_ascii=False))], is_error=True)


def _edge(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Turn what a tool raises into an MCP tool error. efface's messages never echo personal
    data, so they go to the agent as they are; anything else is a bug, logged by type only (its
    message might hold a key or a text) and answered without details."""

    @functools.wraps(fn)
    async def tool(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except EffaceError as exc:
            return cast(T, _tool_error(type(exc).__name__, str(exc)))
        except Exception as exc:
            log.error("MCP tool %s failed: %s", fn.__name__, type(exc).__name__)
            return cast(
                T,
                _tool_error(
                    "InternalError",
                    "the server failed on this call (its log names the exception type, nothing else); check "
                    "with read, or erasure_status for a forget's handle, before calling it again",
                ),
            )

    # The SDK takes the docstring as the description: without the source's indentation.
    tool.__doc__ = inspect.cleandoc(fn.__doc__ or "")
    return tool


class EffaceTool(Tool):
    """The SDK's ``Tool`` whose arguments, when they do not fit its input schema, come back as
    an efface tool error (``{"error": {"type": "InvalidInput", ...}}``, the shape of every
    other refusal), not as the SDK's text: the SDK raises a ``ToolError`` caused by the
    ``ValidationError`` (``Tool.run``'s contract), and this answers it in efface's shape."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            result = _tool_error("InvalidInput", _misfit(exc.__cause__, set(self.parameters.get("properties", {}))))
            return self.fn_metadata.convert_result(result) if convert_result else result


EVERYTHING_OFF = (
    "forget must name a subject, purpose, prefix or key; forgetting the whole tenant is "
    "off on this server (its operator can allow it: --allow-forget-everything)"
)


class EffaceServer(MCPServer):
    """The SDK's ``MCPServer`` that answers a call of a tool it does not have in efface's
    error shape (``NotFound``), without the name asked for (the SDK's answer, "Unknown tool:
    <name>", repeats it). Its handler calls :meth:`call_tool` for every ``tools/call``."""

    tool_names: frozenset[str] = frozenset()
    """The names of the tools :func:`build_mcp` registered."""
    forget_everything: bool = False
    """Whether the forget tool takes ``everything`` (see :func:`build_mcp`)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name not in self.tool_names:
            return _tool_error("NotFound", "this server has no tool of that name: tools/list gives the ones it has")
        if name == "forget" and not self.forget_everything and "everything" in (arguments or {}):
            # Said in words the agent can act on, rather than "an argument this tool does not take".
            return _tool_error("ScopeError", EVERYTHING_OFF)
        return await super().call_tool(name, arguments, context)


def _misfit(exc: ValidationError, fields: set[str]) -> str:
    """What is wrong with a tool's arguments: each argument by its name and pydantic's rule,
    never a value (nor a name the caller made up: it may be data too)."""
    problems = []
    for e in exc.errors(include_input=False, include_url=False)[:5]:
        loc = e.get("loc", ())
        if e.get("type") == "extra_forbidden":  # its name is the caller's: not repeated
            problems.append("an argument this tool does not take (tools/list gives the ones it takes)")
            continue
        name = loc[0] if loc and loc[0] in fields else "an argument"
        where = "".join(f"[{p}]" for p in loc[1:] if isinstance(p, int))
        problems.append(f"{name}{where}: {e.get('msg', 'invalid')}")
    return "the arguments do not fit this tool's input schema: " + "; ".join(problems)


def _ladder(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Append what each rung of the ladder means to a tool's description."""
    fn.__doc__ = inspect.cleandoc(fn.__doc__ or "") + " " + LADDER_TEXT
    return fn


async def _call(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a blocking store call in a worker thread, so one slow call (a wait, a verify's byte
    scan) never holds up the event loop that serves every other session."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


# -- argument types: their descriptions are the input schema an agent reads -----------------
Key = Annotated[str, Field(description="The memory's key: a stable name such as 'alice/preferences/tea'.")]
Subject = Annotated[str, Field(description="Whose data this is (a person's id in your system).")]
Purpose = Annotated[
    str | None,
    Field(description="What the memory may be used for, e.g. 'support'. Default: the server's configured purpose."),
]
Handle = Annotated[str, Field(description="The handle a forget's receipt carries.")]
ForgetSubject = Annotated[str | None, Field(description="Release this subject's claims.")]
ForgetPurpose = Annotated[
    str | None, Field(description="Release claims for this purpose (no default: a forget is never narrowed).")
]
ForgetPrefix = Annotated[str | None, Field(description="Release claims on keys starting with this.")]
ForgetKey = Annotated[str | None, Field(description="Release the claims on this one key.")]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def build_mcp(
    store: Store,
    *,
    tenant: str | None = None,
    purpose: str | None = None,
    ring: Ring | None = None,
    name: str = "efface",
    forget_everything: bool = False,
) -> MCPServer:
    """The MCP server for ``store``.

    Give ``tenant`` for a server that acts for one configured tenant (stdio, or an in-memory
    client), or ``ring`` for one that acts, per request, for the tenant of the API key the
    request carries (streamable HTTP: see :func:`mcp_http_app`); not both. ``purpose`` is the
    default purpose of ``remember``, ``read`` and ``recall`` when the agent names none (a
    forget never narrows to it: it releases what its selector names).

    ``forget_everything`` adds ``everything`` to the forget tool, so an agent can forget the
    whole tenant (``Store.forget(everything=True)``). Off by default: a tenant is often a whole
    company, and one tool call must not erase it. Turn it on where a tenant is one person (a
    desktop agent's own store, a service with a tenant per user).
    """
    if (tenant is None) == (ring is None):
        raise InvalidInput("give build_mcp either a tenant (stdio) or a key ring (HTTP), not both and not neither")
    if tenant is not None and (not isinstance(tenant, str) or not tenant.strip()):
        raise InvalidInput("tenant must be a non-empty string")
    auth = verifier = None
    if ring is not None:
        verifier = KeyVerifier(ring)
        # The SDK's auth needs an issuer URL; efface issues its own keys (`efface keys create`) and
        # publishes no OAuth metadata (no resource_server_url), so this one is never served.
        auth = AuthSettings(issuer_url=AnyHttpUrl("http://localhost"), resource_server_url=None)
    tools: list[Tool] = []

    def tool(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tools.append(_hide_inputs(EffaceTool.from_function(fn, **options)))
            return fn

        return register

    def acting_tenant() -> str:
        if tenant is not None:
            return tenant
        token = get_access_token()
        if not isinstance(token, TenantToken):
            raise EffaceError("this server acts only for an API key's tenant: send the key as a bearer token")
        return token.tenant

    def purpose_for(asked: str | None) -> str:
        if asked is not None:
            return asked
        if purpose is None:
            raise InvalidInput("name a purpose: this server has no default purpose (start it with --purpose)")
        return purpose

    @tool(
        title="Write a memory",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    @_edge
    async def remember(
        key: Key,
        text: Annotated[str, Field(description="The memory itself.")],
        subject: Subject,
        purpose: Purpose = None,
        basis: Annotated[
            str, Field(description="Why it may be kept: consent, contract, legal_obligation, legal_hold, ...")
        ] = "consent",
        ttl_s: Annotated[float | None, Field(description="Seconds until this claim expires (erased then).")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="A JSON object stored with it.")] = None,
        sources: Annotated[list[str] | None, Field(description="Keys this memory was derived from.")] = None,
        replace: Annotated[
            bool,
            Field(description="Replace a key another subject holds claims on: its old record is erased with them."),
        ] = False,
    ) -> WriteResult:
        """Store a memory under a key, with one claim (subject, purpose, basis). Writing a key
        only this subject holds replaces its text and adds the claim. A key another subject
        holds claims on is refused (KeyInUse) unless replace is true: then the old record is
        erased with every claim on it, as an erasure with its own receipt (kind "replace").
        Committed and fsynced when this returns."""
        epoch = await _call(
            store.write,
            key,
            text,
            tenant=acting_tenant(),
            subject=subject,
            purpose=purpose_for(purpose),
            basis=basis,
            ttl=ttl_s,
            metadata=metadata,
            sources=sources,
            replace=replace,
        )
        return WriteResult(key=key, epoch=epoch)

    @tool(
        title="Register a subject's identifiers",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    @_edge
    async def register_subject(
        subject: Subject,
        identifiers: Annotated[
            list[str], Field(description="Names, e-mails, phone numbers or handles that name the subject.")
        ],
    ) -> SubjectResult:
        """Record the identifiers that name a subject, so that forgetting the subject also finds
        (and quarantines) other records that mention them, such as digests written about them."""
        epoch = await _call(store.register_subject, subject, tenant=acting_tenant(), identifiers=identifiers)
        return SubjectResult(epoch=epoch, identifiers=len(set(identifiers)))

    @tool(title="Read a memory by key", annotations=READ_ONLY)
    @_edge
    async def read(key: Key, purpose: Purpose = None) -> ReadResult:
        """The memory under a key, if it has a live claim for the purpose; found=false
        otherwise (never written, forgotten, expired, or kept only for another purpose)."""
        memory = await _call(store.read, key, tenant=acting_tenant(), purpose=purpose_for(purpose))
        return ReadResult.model_validate({"found": memory is not None, "memory": memory and memory.to_dict()})

    @tool(title="Recall memories by meaning and words", annotations=READ_ONLY)
    @_edge
    async def recall(
        query: Annotated[str, Field(description="What to look for, in words.")],
        purpose: Purpose = None,
        subject: Annotated[str | None, Field(description="Only memories with a live claim of this subject.")] = None,
        k: Annotated[int, Field(description="How many hits at most.", ge=1, le=1000)] = 10,
        said_by: Annotated[str | None, Field(description="Only memories whose metadata 'speaker' is this.")] = None,
        after: Annotated[
            str | None, Field(description="Only memories whose metadata 'at' is at or after this ISO 8601 time.")
        ] = None,
        before: Annotated[
            str | None, Field(description="Only memories whose metadata 'at' is before this ISO 8601 time.")
        ] = None,
        window: Annotated[
            int, Field(description="Also give each hit this many turns before and after it in its 'session'.")
        ] = 0,
    ) -> RecallResult:
        """Find memories by meaning (vector index) and by words (full text), fused by rank.
        Every hit's text is read from the origin, so nothing forgotten is ever returned, even
        while an index still holds its entries. Turns written with metadata 'speaker', 'at' and
        'session' can be narrowed by speaker and time, and widened to their session's turns."""
        hits = await _call(
            store.recall,
            query,
            tenant=acting_tenant(),
            purpose=purpose_for(purpose),
            subject=subject,
            k=k,
            said_by=said_by,
            after=after,
            before=before,
            window=window,
        )
        return RecallResult.model_validate({"hits": [h.to_dict() for h in hits]})

    async def receipt_of(**selector: Any) -> ReceiptOut:
        receipt = await _call(store.forget, tenant=acting_tenant(), **selector)
        return ReceiptOut.model_validate(
            {**receipt.to_dict(), "level_means": LADDER[receipt.level], "next_step": NEXT_STEP[receipt.level]}
        )

    forget_options: dict[str, Any] = {
        "title": "Forget memories, with a receipt",
        "description": FORGET + (FORGET_EVERYTHING if forget_everything else ""),
        "annotations": ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False),
    }
    if forget_everything:

        @tool(**forget_options)
        @_edge
        async def forget(
            subject: ForgetSubject = None,
            purpose: ForgetPurpose = None,
            prefix: ForgetPrefix = None,
            key: ForgetKey = None,
            everything: Annotated[
                bool, Field(description="Forget all of this tenant; name nothing else. Ask the user first.")
            ] = False,
        ) -> ReceiptOut:
            return await receipt_of(subject=subject, purpose=purpose, prefix=prefix, key=key, everything=everything)

    else:

        @tool(**forget_options)
        @_edge
        async def forget(
            subject: ForgetSubject = None,
            purpose: ForgetPurpose = None,
            prefix: ForgetPrefix = None,
            key: ForgetKey = None,
        ) -> ReceiptOut:
            if (subject, purpose, prefix, key) == (None, None, None, None):
                raise ScopeError(EVERYTHING_OFF)
            return await receipt_of(subject=subject, purpose=purpose, prefix=prefix, key=key)

    @tool(title="Where an erasure stands", annotations=READ_ONLY)
    @_edge
    @_ladder
    async def erasure_status(handle: Handle) -> StatusOut:
        """How far a forget has gone through every read path, now. It reads the receipt's
        level; it does not check anything (verify_erasure does)."""
        st = await _call(store.status, handle, tenant=acting_tenant())
        return StatusOut.model_validate({**st.to_dict(), "level_means": LADDER[st.level]})

    @tool(
        title="Wait for an erasure to complete",
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    @_edge
    @_ladder
    async def wait_erasure(
        handle: Handle,
        timeout_s: Annotated[float, Field(description="Seconds to wait at most.", ge=0, le=300)] = 30.0,
        until: Annotated[
            Literal["erased", "absorbed"],
            Field(description="erased: until the bytes are gone from every file; absorbed: every read path absorbed."),
        ] = "erased",
    ) -> StatusOut:
        """Let the store carry a forget through every path and wait until it is done or the
        timeout passes; returns the status (check 'erased' or 'settled'). Waiting proves
        nothing by itself: call verify_erasure next."""
        st = await _call(store.wait, handle, timeout_s, tenant=acting_tenant(), until=until)
        return StatusOut.model_validate({**st.to_dict(), "level_means": LADDER[st.level]})

    @tool(
        title="Verify an erasure (evidence)",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    @_edge
    @_ladder
    async def verify_erasure(handle: Handle) -> VerificationOut:
        """Check a forget and record the outcome in the store's ledger: probes through every
        read path for 'unreadable', and a scan of every file's bytes for 'erased'. The only
        tool that moves a receipt up the ladder. Call wait_erasure first."""
        ver = await _call(store.verify, handle, tenant=acting_tenant())
        return VerificationOut.model_validate(
            {**ver.to_dict(), "failed": [c.name for c in ver.failed], "level_means": LADDER[ver.level]}
        )

    server = EffaceServer(
        name,
        instructions=INSTRUCTIONS,
        version=_version(),
        token_verifier=verifier,
        auth=auth,
        log_level="WARNING",
        tools=tools,
    )
    server.tool_names = frozenset(t.name for t in tools)
    server.forget_everything = forget_everything
    return server


def _hide_inputs(registered: Tool) -> Tool:
    """Arguments that do not fit a tool's input schema are refused by the SDK with pydantic's
    message, which quotes each rejected value by default; keep the field and the rule, never the
    value (it may be a memory's text or a key). An argument the tool does not take is refused."""
    model = registered.fn_metadata.arg_model
    model.model_config["hide_input_in_errors"] = True
    # An argument the tool does not take is refused, not dropped: {"ttl": 60} for ttl_s kept
    # the memory with no expiry, {"tenant": "globex"} wrote in the server's tenant, silently.
    model.model_config["extra"] = "forbid"
    model.model_rebuild(force=True)
    registered.parameters["additionalProperties"] = False
    return registered


def _version() -> str:
    # From the installed metadata, not ``efface.__version__``: the package's __init__ imports
    # efface.Client from this folder, so importing it back would be a circle between rooms.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("efface")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0"


def mcp_http_app(
    store: Store,
    ring: Ring,
    *,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    purpose: str | None = None,
    forget_everything: bool = False,
) -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
    """The MCP server over streamable HTTP, as an ASGI app plus what runs its lifespan.

    Returns ``(app, lifespan)``:

    * ``app`` answers the MCP endpoint at ``path`` (default ``/mcp``) *inside* itself, and 404
      for any other path. Every request must carry ``Authorization: Bearer <API key>``; a
      missing, malformed, unknown or revoked key gets 401 before any tool runs, and each tool
      acts for the key's one tenant (:class:`KeyVerifier`). Revocation is seen on the next
      request.
    * ``lifespan()`` returns an async context manager that runs the SDK's session manager
      (the task group every MCP session lives in). Enter it once, for the server's whole life
      (in the host app's lifespan), before the first MCP request; it cannot be entered twice.

    How to serve it at ``/mcp`` in a FastAPI (or Starlette) server: add it as a *route* whose
    endpoint is the app, at the same path it answers — ``api.add_route("/mcp", app)`` (a
    Starlette ``Route`` with an ASGI app as endpoint passes the request through untouched: every
    method, no trailing-slash redirect) — and enter ``lifespan()`` in the host's lifespan; or
    mount it at the root after every other route (``api.mount("/", app)``).
    Do **not** ``api.mount("/mcp", app)``: a Mount hands the app the path after its prefix, so the
    endpoint would be ``/mcp/mcp``, ``/mcp/`` a 404, and the bare ``/mcp`` a 307 redirect to
    ``/mcp/`` that MCP clients need not follow.

    ``host`` is the host the server binds: for a loopback host the SDK turns on its DNS-rebinding
    protection (only ``Host: 127.0.0.1|localhost|[::1]:*`` accepted); for any other host it is
    off, and TLS and the network in front are the deployer's. ``purpose`` is the default
    purpose of ``remember``, ``read`` and ``recall``; ``forget_everything`` as for
    :func:`build_mcp` (for a service whose every tenant is one person). The app does not close
    ``store`` or ``ring``: their owner does, after the lifespan has ended.
    """
    server = build_mcp(store, ring=ring, purpose=purpose, forget_everything=forget_everything)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    quiet_sdk_logs()

    async def tool_names() -> list[str]:
        return [t.name for t in await server.list_tools()]

    guard_endpoint(app, path, tool_names)
    return app, server.session_manager.run
