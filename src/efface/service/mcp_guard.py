"""What the MCP endpoint lets out: no protocol error and no log line repeats a request.

The MCP SDK answers a malformed request with the validator's own words, which quote every
rejected value (``Validation error: ... input_value='alice@example.org'``), echoes an unknown
method in the error's ``data``, an unknown tool, resource or prompt in its message, and logs
request values (a session id, a Host header, a tool name) as it goes. efface hides input values
in its tool errors (``_hide_inputs``); :func:`guard` does the same for the protocol layer
around them (:class:`Guard`):

* **in**: a POST body that is not JSON, or not one JSON-RPC 2.0 message, is answered here,
  in JSON-RPC's shape, naming what is wrong and never a value, before the SDK reads it; a
  ``tools/call`` of a tool the server does not have reaches the SDK under a fixed name
  (:data:`UNKNOWN_TOOL`), so neither its answer nor its log holds the name asked for;
* **out**: every JSON-RPC ``error`` the SDK sends (a JSON answer or an event of a stream) keeps
  its code and loses its ``data``; its message is kept only when it is one of the SDK's fixed
  texts (:data:`FIXED`), otherwise a fixed text for the code takes its place;
* **log**: :func:`quiet_sdk_logs` keeps the SDK's log lines without their values.

A request's ``id`` is the one value an answer must repeat (JSON-RPC pairs them by it): it is
the caller's own correlation number, and it is sent back as is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

UNKNOWN_TOOL = "unknown-tool"
"""The name a ``tools/call`` of a tool this server does not have reaches the SDK under."""

GENERIC = {
    PARSE_ERROR: "Parse error: the body is not valid JSON",
    INVALID_REQUEST: "Invalid request: the body is not one JSON-RPC 2.0 request, notification or response",
    METHOD_NOT_FOUND: "Method not found: see the MCP specification for the methods a server answers",
    INVALID_PARAMS: "Invalid params: the request's parameters do not fit its method (values are not repeated)",
    INTERNAL_ERROR: "Internal error",
}
"""The message of an error whose own message is not one of :data:`FIXED`, by its code."""
OTHER = "the request failed (its details are not repeated: they may quote the request)"

FIXED = frozenset(
    {
        "Method not found",
        "Invalid request parameters",
        "Session not found",
        "Bad Request: Missing session ID",
        "Not Found: Invalid or expired session ID",
        "Not Found: Session has been terminated",
        "Not Acceptable: Client must accept application/json",
        "Not Acceptable: Client must accept both application/json and text/event-stream",
        "Not Acceptable: Client must accept text/event-stream",
        "Unsupported Media Type: Content-Type must be application/json",
        "Session terminated before the request completed",
        "Error handling POST request",
        "Conflict: Only one SSE stream is allowed per session",
        "Method Not Allowed: Session termination not supported",
        "Method Not Allowed",
        "Error replaying events",
    }
)
"""The SDK's error messages that are fixed texts (they quote nothing): kept as they are."""


def _problem(message: Any) -> tuple[int, str] | None:
    """What makes a parsed body something other than one JSON-RPC 2.0 message, or None."""
    if not isinstance(message, dict):
        return INVALID_REQUEST, "Invalid request: the body must be one JSON-RPC 2.0 object (batches are not taken)"
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"'
    if "id" in message and (isinstance(message["id"], bool) or not isinstance(message["id"], (str, int))):
        return INVALID_REQUEST, 'Invalid request: "id" must be a string or an integer'
    if "method" in message:
        if not isinstance(message["method"], str):
            return INVALID_REQUEST, 'Invalid request: "method" must be a string'
        if "params" in message and not isinstance(message["params"], dict):
            return INVALID_PARAMS, 'Invalid params: "params" must be an object'
        return None
    if "id" not in message:
        return INVALID_REQUEST, 'Invalid request: a message needs a "method", or an "id" with a "result" or "error"'
    if "result" in message and isinstance(message["result"], dict) and "error" not in message:
        return None
    error = message.get("error")
    if "result" not in message and isinstance(error, dict):
        code, text = error.get("code"), error.get("message")
        if isinstance(code, int) and not isinstance(code, bool) and isinstance(text, str):
            return None
    return INVALID_REQUEST, 'Invalid request: a response needs an object "result", or an "error" (code, message)'


def _error_body(code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()


def _scrub(message: Any) -> Any:
    """A JSON-RPC message on its way out, its error (if any) without values of the request."""
    if isinstance(message, list):
        return [_scrub(m) for m in message]
    if not isinstance(message, dict) or not isinstance(message.get("error"), dict):
        return message
    error = message["error"]
    code = error.get("code")
    if isinstance(code, bool) or not isinstance(code, int):
        code = INTERNAL_ERROR
    text = error.get("message")
    if not (isinstance(text, str) and text in FIXED):
        text = GENERIC.get(code, OTHER)
    return {**message, "error": {"code": code, "message": text}}


def _scrub_json(body: bytes) -> bytes:
    try:
        doc = json.loads(body)
    except ValueError:
        return body  # not JSON (the SDK's few plain-text answers are fixed texts)
    scrubbed = _scrub(doc)
    if scrubbed == doc:
        return body  # no error in it: the bytes as the SDK wrote them
    return json.dumps(scrubbed, ensure_ascii=False, separators=(",", ":")).encode()


class _EventStream:
    """Scrubs the ``data:`` lines of a server-sent event stream as its chunks pass; a line cut
    across two chunks waits for its end."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, chunk: bytes, final: bool) -> bytes:
        data = self._tail + chunk
        cut = len(data) if final else data.rfind(b"\n") + 1
        self._tail = data[cut:]
        return b"".join(self._line(line) for line in data[:cut].splitlines(keepends=True))

    @staticmethod
    def _line(line: bytes) -> bytes:
        if not line.startswith(b"data:"):
            return line
        end = len(line.rstrip(b"\r\n"))
        return b"data: " + _scrub_json(line[5:end].strip()) + line[end:]


class Guard:
    """The MCP app ``app`` behind the checks of this module's docstring. ``tool_names`` gives
    the names of the server's tools (asked once, on the first ``tools/call``). A class, not a
    function: Starlette routes a plain function as a request handler, not as an ASGI app."""

    def __init__(self, app: ASGIApp, tool_names: Callable[[], Awaitable[Iterable[str]]]) -> None:
        self.app, self.tool_names = app, tool_names
        self.known: set[str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "POST":
            body, more = b"", True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away (or the body was over the server's limit)
                body += message.get("body", b"")
                more = message.get("more_body", False)
            try:
                parsed = json.loads(body)
            except ValueError:  # not UTF-8 is a ValueError too
                await _answer(send, 400, _error_body(PARSE_ERROR, GENERIC[PARSE_ERROR]))
                return
            problem = _problem(parsed)
            if problem is not None:
                await _answer(send, 400, _error_body(*problem))
                return
            if parsed.get("method") == "tools/call":
                params = parsed.get("params") or {}
                if self.known is None:
                    self.known = set(await self.tool_names())
                if params.get("name") not in self.known:
                    body = json.dumps({**parsed, "params": {**params, "name": UNKNOWN_TOOL}}).encode()
            receive = _replay(body, receive)
        await self.app(scope, receive, _scrubbing(send))


def guard_endpoint(app: Any, path: str, tool_names: Callable[[], Awaitable[Iterable[str]]]) -> None:
    """Put :class:`Guard` in front of the MCP endpoint at ``path`` of the SDK's Starlette app
    ``app``: behind the SDK's routing and its key check (``RequireAuthMiddleware``, whose
    ``app`` is the endpoint), so a request without a valid key still gets 401 whatever its
    body, and a path other than ``path`` still 404."""
    for route in getattr(app, "routes", ()):
        if getattr(route, "path", None) != path:
            continue
        endpoint = route.app
        if hasattr(endpoint, "app"):  # the key check: the guard goes inside it
            endpoint.app = Guard(endpoint.app, tool_names)
        else:
            route.app = Guard(endpoint, tool_names)
        return
    raise RuntimeError("the MCP SDK's app has no route at its endpoint's path: efface cannot guard it")


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body once more, then the connection's own messages: an event stream ends when it
    receives ``http.disconnect``, so that must stay the client's to send."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _scrubbing(send: Send) -> Send:
    """``send`` with every JSON-RPC error of the answer scrubbed (a JSON answer is held until
    its last byte and its Content-Length set again; an event stream is scrubbed as it goes)."""
    kind: str | None = None
    start: Message | None = None
    held = b""
    stream = _EventStream()

    async def scrubbing(message: Message) -> None:
        nonlocal kind, start, held
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            kind = {b"application/json": "json", b"text/event-stream": "events"}.get(ctype)
            if kind == "json":
                start = message  # sent with the body, once its length is known
                return
            if kind == "events":
                message = {**message, "headers": [(k, v) for k, v in message["headers"] if k != b"content-length"]}
            await send(message)
            return
        if message["type"] != "http.response.body" or kind is None:
            await send(message)
            return
        final = not message.get("more_body", False)
        if kind == "events":
            await send({**message, "body": stream.feed(message.get("body", b""), final)})
            return
        held += message.get("body", b"")
        if not final:
            return
        body = _scrub_json(held)
        assert start is not None
        kept = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
        await send({**start, "headers": [*kept, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return scrubbing


class _QuietRecord(logging.Filter):
    """Keep an SDK log record's template, never its values: the arguments become ``…``, a
    message built beforehand (an f-string) is cut at its first ``": "``, and an exception is
    named by its type, without its message or traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            try:
                record.msg = str(record.msg) % tuple("…" for _ in args)
            except (TypeError, ValueError, KeyError):
                record.msg = str(record.msg).split(": ", 1)[0]
            record.args = None
        else:
            record.msg = str(record.msg).split(": ", 1)[0]
        if record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.msg} ({type(exc).__name__})"
            record.exc_info = None
            record.exc_text = None
        record.stack_info = None
        return True


_QUIET = _QuietRecord()

SDK_LOGGERS = ("mcp", "sse_starlette")


def quiet_sdk_logs() -> None:
    """Put :class:`_QuietRecord` on every logger of the MCP SDK (and of the event-stream
    library it answers with) that exists now: a filter acts only on its own logger's records,
    so each one gets it. Call it once the SDK is imported."""
    names = [n for n in list(logging.Logger.manager.loggerDict) if n.split(".")[0] in SDK_LOGGERS]
    for name in {*SDK_LOGGERS, *names}:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
