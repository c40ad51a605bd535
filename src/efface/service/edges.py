"""The HTTP app's edges: what every request meets around the routes of :mod:`.http`.

* **The body limit** (:class:`BodyLimit`): a body over ``max_body`` bytes gets 413 before it
  is parsed, by its Content-Length or as soon as a chunked body passes the limit.
* **Server timing** (:class:`ServerTiming`): every answer says how long the app took, and the
  phases a lane timed (:data:`PHASES`).
* **Errors** (:func:`efface_error`, :func:`validation_error`, :func:`http_error`,
  :class:`QuietErrors`): library errors become JSON (``{"error": {"type": ..., "message": ...}}``)
  here and nowhere else, validation errors name the field and never the value, and an
  unexpected error is a 500 whose type alone is logged.
* **The access log** (:class:`DropQuery`): method, path and status, and nothing a client chose.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import EffaceError
from . import wire as w

log = logging.getLogger("efface.service")


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


PHASES: contextvars.ContextVar[list[tuple[str, float]] | None] = contextvars.ContextVar(
    "efface_server_timing", default=None
)
"""The phases a request's handler timed (name, milliseconds), for :class:`ServerTiming`."""


class ServerTiming:
    """Add ``Server-Timing: app;dur=MS`` to every answer: the milliseconds from the request
    reaching the app to its answer starting, so a client (or a load test) can tell the time
    spent in the server from the time on the wire and in its own process. A call that ran in
    a lane adds its phases: ``lane`` (waiting for the lane's thread to start it: a full lane,
    or the interpreter busy elsewhere), ``store`` (the library call) and ``render`` (the JSON)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        phases: list[tuple[str, float]] = []
        PHASES.set(phases)

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                parts = [f"app;dur={(time.perf_counter() - t0) * 1000:.2f}"]
                parts += [f"{name};dur={ms:.2f}" for name, ms in phases]
                dur = ", ".join(parts).encode()
                message = {**message, "headers": [*message.get("headers", ()), (b"server-timing", dur)]}
            await send(message)

        await self.app(scope, receive, timed)


class HeadAsGet:
    """``HEAD`` on a route that takes ``GET`` (``/v1/health``, ``/openapi.json``, ``/docs``) is
    answered as ``GET`` is, without the body, as HTTP asks; FastAPI's routes answered it 405.
    ``gets()`` gives the paths of those routes (read once the app has all of them)."""

    def __init__(self, app: ASGIApp, gets: Callable[[], set[str]]) -> None:
        self.app = app
        self.gets = gets
        self._paths: set[str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        if self._paths is None:
            self._paths = self.gets()
        if scope["path"] not in self._paths:
            await self.app(scope, receive, send)
            return

        async def bodiless(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, bodiless)


def _too_large(limit: int) -> JSONResponse:
    return _error_response(413, "PayloadTooLarge", f"the request body is over this server's limit of {limit} bytes")


# -- errors -------------------------------------------------------------------------------------------
def _error_response(
    status: int, kind: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    detail = {"type": kind, "message": message, **{k: v for k, v in extra.items() if v is not None}}
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse({"error": detail}, status_code=status, headers=None if headers is None else dict(headers))


NOT_JSON = (
    "the request body is not JSON this server can read (UTF-8 JSON, numbers of at most 4300 digits, "
    "not nested thousands deep): send one JSON object, as /openapi.json describes"
)
"""The answer (a 422, as for a body of the wrong shape) to a body that cannot be parsed at all,
however it fails: FastAPI answered a syntax error with a 422 naming only a byte position
("8: JSON decode error"), and a body that is not UTF-8, a number too long or nesting too deep
with a 400 in its own words ("There was an error parsing the body")."""


def efface_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EffaceError)
    return _error_response(w.status_of(exc), type(exc).__name__, str(exc), **w.error_fields(exc))


def validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    if any(e.get("type") == "json_invalid" for e in exc.errors()):
        return _error_response(422, "InvalidInput", NOT_JSON)
    # Name the field and the rule, never the value (pydantic keeps it under "input").
    problems = []
    for e in exc.errors()[:5]:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        if e.get("type") == "extra_forbidden":  # the unknown name is the caller's, not ours
            problems.append(f"{'.'.join(loc[:-1]) or 'body'}: a field this route does not take")
            continue
        problems.append(f"{'.'.join(loc) or 'body'}: {e.get('msg', 'invalid')}")
    return _error_response(422, "InvalidInput", "the request body does not fit this route: " + "; ".join(problems))


def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        if len(request.url.path) > 1 and request.url.path.endswith("/"):  # no redirect: one answer for all
            return _error_response(404, "NotFound", "no such route (no route ends with '/'): see /openapi.json")
        return _error_response(404, "NotFound", "no such route: see /openapi.json")
    if exc.status_code == 405:  # the Allow header stays (HTTP requires it on a 405)
        allow = (exc.headers or {}).get("Allow", "")
        if allow == "GET":  # HEAD is answered there too (HeadAsGet)
            allow = "GET, HEAD"
            exc.headers = {**(exc.headers or {}), "Allow": allow}
        told = f"this route takes {allow} only" if allow else "this route does not take that method"
        return _error_response(405, "MethodNotAllowed", f"{told}: see /openapi.json", headers=exc.headers)
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":  # FastAPI's own
        return _error_response(422, "InvalidInput", NOT_JSON)
    return _error_response(exc.status_code, "InvalidInput", str(exc.detail), headers=exc.headers)


def _unexpected(exc: Exception) -> JSONResponse:
    # The type only: a message or a traceback could carry a text or a key.
    log.error("request failed with %s", type(exc).__name__)
    return _error_response(500, "InternalError", "the server failed on this request; nothing about it is logged")


class QuietErrors:
    """Answer an unexpected error with a 500 and log its type only. Starlette's own handler
    for ``Exception`` answers too, but then raises the error again for the server to log, and
    uvicorn logs it whole: a traceback whose message and frames can hold a text, a key or a
    tenant. Here the error ends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            response = _unexpected(exc)
            if not started:  # else the client sees the answer cut short, as it would anyway
                await response(scope, receive, send)


UNKNOWN_PATH = "<unknown path>"
"""What the access log shows for a path no server in this process answers (a 404)."""
UNKNOWN_METHOD = "<other method>"
"""What it shows for a method outside HTTP's usual ones (h11 takes any token as a method)."""
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


class DropQuery(logging.Filter):
    """For ``uvicorn.access``: log method, path and status, and nothing a client chose. The
    query string is dropped (routes take no query parameters); a path that is not one of the
    apps' routes (:meth:`know`) is logged as :data:`UNKNOWN_PATH`, since a client can put
    anything there (``POST /v1/memories/alice@example.org``), and an unusual method as
    :data:`UNKNOWN_METHOD`."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: set[str] = set()

    def know(self, paths: set[str]) -> None:
        self.paths |= paths

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path = args[2].split("?", 1)[0]
            method = args[1] if args[1] in _METHODS else UNKNOWN_METHOD
            record.args = (args[0], method, path if path in self.paths else UNKNOWN_PATH, args[3], args[4])
        return True


def filter_access_log(app: Any = None) -> None:
    """Install :class:`DropQuery` on uvicorn's access logger (once), and let it show the paths
    of ``app``'s routes (every app's given so far: tests run several in one process)."""
    logger = logging.getLogger("uvicorn.access")
    found = [f for f in logger.filters if isinstance(f, DropQuery)]
    drop = found[0] if found else DropQuery()
    if not found:
        logger.addFilter(drop)
    drop.know({p for r in getattr(app, "routes", ()) if isinstance(p := getattr(r, "path", None), str)})
