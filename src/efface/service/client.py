"""A client for ``efface serve`` with the methods, arguments, return types and errors of a
local :class:`efface.Store`, so code moves between embedded and served without change:

    with efface.open("http://127.0.0.1:8750", api_key="efk_...") as store:
        store.write("n1", "Alice prefers tea", tenant="acme", subject="alice", purpose="support")

The key decides the tenant. ``tenant=`` keeps its place in every signature: leave it out (the
key's tenant is used) or name the key's own; another tenant is refused by the server with
:class:`~efface.service.wire.Forbidden` (a :class:`~efface.ScopeError`), nothing done.
Results are rebuilt as the library's own types (``Memory``, ``Hit``, ``Receipt``, ``Status``,
``Verification``, ...), and each JSON error becomes the efface error class it names.

What a client cannot do: ``backup``, ``restore``, ``compact``, ``sweep`` and ``on_quarantine``
work on the store's own files or process, so they raise
:class:`~efface.service.wire.RemoteUnsupported`; run them where the store is
(``efface --store DIR backup ...``). The server's compactor does compaction and TTL expiry on
its own.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import TypeAdapter

from .. import validate as v
from ..erasure.ledger import ChainCheck
from ..errors import EffaceError, InvalidInput, typed_calls
from ..model import Hit, Memory, QuarantineItem, Receipt, Status, Verification
from . import wire as w

T = TypeVar("T")

_ADAPTERS: dict[Any, TypeAdapter] = {}


def _adapter(t: Any) -> TypeAdapter:
    if t not in _ADAPTERS:
        _ADAPTERS[t] = TypeAdapter(t)
    return _ADAPTERS[t]


KEEP_ALIVE_S = 20.0
"""How long the client keeps an idle connection for reuse: less than the server keeps it open
(:data:`efface.service.runner.KEEP_ALIVE_S`), so the client never sends on a connection the
server is closing."""


class Unreachable(EffaceError):
    """The efface server could not be reached (not running, wrong URL, or the connection
    broke). A write that was sent may or may not have committed: read it back or retry."""


def _ttl(ttl: Any) -> Any:
    return ttl.total_seconds() if isinstance(ttl, _dt.timedelta) else ttl


def _opt(**values: Any) -> dict[str, Any]:
    """The arguments whose library default is None, left out when None (the server applies
    the same default). Every other argument is sent as given, None included, so the library
    refuses a None where the embedded store would (``basis=None`` is UnknownBasis)."""
    return {k: v for k, v in values.items() if v is not None}


def _metadata(value: Any) -> Any:
    # Checked here with the library's own rule as well: JSON would turn {1: "a"} into
    # {"1": "a"}, and a structure nested 50,000 deep cannot be encoded at all.
    # Sent as the library stores it: a datetime ``at`` as ISO 8601 (docs/conversations.md).
    return None if value is None else json.loads(v.metadata(value))


def _time(value: Any) -> Any:
    """A recall bound as JSON: a datetime or date as ISO 8601 (naive stays naive: UTC)."""
    return value.isoformat() if isinstance(value, _dt.date) else value


def _seq(values: Iterable[str] | None) -> Any:
    if values is None or isinstance(values, (str, bytes)):
        return values
    return list(values) if isinstance(values, Iterable) else values


def _api_key(value: Any) -> None:
    """Refuse a key that cannot travel in an HTTP header, before anything is sent: CR, LF or
    NUL made the HTTP library refuse the request (reported as ``Unreachable``, which says to
    retry), and a non-ASCII character raised an encoding error naming the character and its
    place in the key. Keys are visible ASCII (``efk_<id>_<secret>``). The message never shows
    the key: it is a secret."""
    if not isinstance(value, str):
        raise InvalidInput(f"the API key must be a string (an efk_... key), not {type(value).__name__}")
    if not all("!" <= ch <= "~" for ch in value):
        raise InvalidInput(
            "the API key holds a character that cannot be sent in an HTTP header (a space, a line break, "
            "a control or non-ASCII character): give the efk_... key exactly as `efface keys create` printed it "
            "(read from a file, strip its final newline)"
        )


def _shown(url: str) -> str:
    """``url`` without what may be a secret or personal: its user and password (``***`` in
    their place), its query string and its fragment."""
    scheme, sep, rest = url.partition("//")
    if sep and "@" in rest:  # a password may hold '/', '?' or '#' unescaped: all before the last '@' goes
        url = scheme + "//***@" + rest.rpartition("@")[2]
    try:
        parts = urlsplit(url)
    except ValueError:
        return scheme + "//<a malformed address>"
    netloc = parts.netloc if "@" not in parts.netloc else "***@" + parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@typed_calls
class Client:
    """An efface store served over HTTP. ``api_key`` defaults to ``EFFACE_API_KEY``."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        api_key = api_key if api_key is not None else os.environ.get("EFFACE_API_KEY")
        if not api_key:
            raise InvalidInput(
                "an efface server needs an API key: pass api_key= in Python, --api-key on the command line, "
                "or set EFFACE_API_KEY"
            )
        _api_key(api_key)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput("the server URL must start with http:// or https://")
        try:
            host = urlsplit(url).hostname
        except ValueError:  # an unclosed '[': the message below says how to write it
            host = "?"
        if not host:
            raise InvalidInput("the server URL names no host: give http(s)://host:port, e.g. http://127.0.0.1:8750")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise InvalidInput("timeout must be a positive, finite number of seconds per request (default 60)")
        self.url = url.rstrip("/")
        self._shown = _shown(self.url)
        """The URL as messages and repr show it: no user, password, query or fragment."""
        self.path = None
        """A served store has no local directory."""
        self._timeout = timeout
        self._closed = False
        try:
            self._http = httpx.Client(
                base_url=self.url,
                headers={"Authorization": f"Bearer {api_key}", "User-Agent": "efface-client"},
                timeout=timeout,
                transport=transport,
                limits=httpx.Limits(keepalive_expiry=KEEP_ALIVE_S),
            )
        except httpx.InvalidURL:  # its message quotes the URL's parts: never shown
            raise InvalidInput(
                "the server URL is malformed: give http(s)://host:port, with any '/', '?', '#' or '@' in a "
                "user name or password percent-encoded"
            ) from None

    # -- lifecycle
    def close(self) -> None:
        """Close the connection pool (the served store stays open). Idempotent."""
        self._closed = True
        self._http.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EffaceError("this client is closed; open it again with efface.open(url, api_key=...)")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"efface.Client({self._shown!r})"

    # -- the wire
    def _post(
        self, route: str, body: Mapping[str, Any], *, timeout: float | None = None, accept: str | None = None
    ) -> httpx.Response:
        self._check_open()
        try:
            content = json.dumps(dict(body), ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError):
            raise InvalidInput(
                "an argument cannot be sent as JSON (metadata and lists must hold JSON values; numbers must be finite)"
            ) from None
        headers = {"Content-Type": "application/json"}
        if accept:
            headers["Accept"] = accept
        try:
            response = self._http.post(route, content=content, headers=headers, timeout=timeout or self._timeout)
        except httpx.HTTPError as exc:
            raise Unreachable(
                f"the efface server at {self._shown} could not be reached ({type(exc).__name__})"
            ) from None
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def _get(self, route: str) -> httpx.Response:
        self._check_open()
        try:
            response = self._http.get(route)
        except httpx.HTTPError as exc:
            raise Unreachable(
                f"the efface server at {self._shown} could not be reached ({type(exc).__name__})"
            ) from None
        if response.status_code >= 400:
            raise self._error(response)
        return response

    @staticmethod
    def _error(response: httpx.Response) -> EffaceError:
        try:
            detail = response.json()["error"]
            kind, message = str(detail["type"]), str(detail["message"])
        except (ValueError, KeyError, TypeError):
            return EffaceError(f"the server answered HTTP {response.status_code} without an efface error")
        return w.rebuild_error(kind, message, detail)

    def _as(self, t: Any, route: str, body: Mapping[str, Any], **kw: Any) -> Any:
        return _adapter(t).validate_json(self._post(route, body, **kw).content)

    def _epoch(self, route: str, body: Mapping[str, Any]) -> int:
        return int(self._post(route, body).json()["epoch"])

    # -- writes
    def write(
        self,
        key: str,
        text: str,
        *,
        tenant: str | None = None,
        subject: str,
        purpose: str,
        basis: str = "consent",
        ttl: Any = None,
        metadata: Mapping[str, Any] | None = None,
        sources: Iterable[str] | None = None,
        replace: bool = False,
    ) -> int:
        """As :meth:`efface.Store.write`. Returns the epoch."""
        body: dict[str, Any] = {"key": key, "text": text, "subject": subject, "purpose": purpose, "basis": basis}
        body |= {"replace": replace} | _opt(tenant=tenant, ttl=_ttl(ttl), metadata=_metadata(metadata))
        body |= _opt(sources=_seq(sources))
        return self._epoch("/v1/write", body)

    def write_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        tenant: str | None = None,
        subject: str | None = None,
        purpose: str | None = None,
        basis: str = "consent",
        ttl: Any = None,
        embeddings: Any = None,
        replace: bool = False,
    ) -> int:
        """As :meth:`efface.Store.write_many` (one transaction, one epoch)."""
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvalidInput("items must be a list of mappings, each with 'key' and 'text'")
        sent = []
        for item in items:
            if not isinstance(item, Mapping):
                raise InvalidInput("each item must be a mapping with 'key' and 'text'")
            one = {k: x for k, x in item.items() if x is not None}
            _metadata(one.get("metadata"))
            if "ttl" in one:
                one["ttl"] = _ttl(one["ttl"])
            if "sources" in one:
                one["sources"] = _seq(one["sources"])
            sent.append(one)
        vectors = None if embeddings is None else [list(map(float, row)) for row in embeddings]
        body: dict[str, Any] = {"items": sent, "basis": basis, "replace": replace}
        body |= _opt(tenant=tenant, subject=subject, purpose=purpose, ttl=_ttl(ttl), embeddings=vectors)
        return self._epoch("/v1/write_many", body)

    def retain(
        self, key: str, *, tenant: str | None = None, subject: str, purpose: str, basis: str, ttl: Any = None
    ) -> int:
        """As :meth:`efface.Store.retain`."""
        body = {"key": key, "subject": subject, "purpose": purpose, "basis": basis} | _opt(tenant=tenant, ttl=_ttl(ttl))
        return self._epoch("/v1/retain", body)

    def register_subject(self, subject: str, *, tenant: str | None = None, identifiers: Iterable[str]) -> int:
        """As :meth:`efface.Store.register_subject`."""
        body = {"subject": subject, "identifiers": _seq(identifiers)} | _opt(tenant=tenant)
        return self._epoch("/v1/register_subject", body)

    # -- reads
    def read(self, key: str, *, tenant: str | None = None, purpose: str) -> Memory | None:
        """As :meth:`efface.Store.read`."""
        return self._as(w.ReadResult, "/v1/read", {"key": key, "purpose": purpose} | _opt(tenant=tenant)).memory

    def scan(
        self,
        *,
        tenant: str | None = None,
        purpose: str,
        prefix: str | None = None,
        subject: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        """As :meth:`efface.Store.scan`."""
        body: dict[str, Any] = {"purpose": purpose, "limit": v.whole(limit)}
        body |= _opt(tenant=tenant, prefix=prefix, subject=subject, after=after)
        return self._as(list[Memory], "/v1/scan", body)

    def recall(
        self,
        query: str,
        *,
        tenant: str | None = None,
        purpose: str,
        subject: str | None = None,
        k: int = 10,
        after: Any = None,
        before: Any = None,
        said_by: str | None = None,
        window: int = 0,
    ) -> list[Hit]:
        """As :meth:`efface.Store.recall`."""
        body = {"query": query, "purpose": purpose, "k": v.whole(k), "window": v.whole(window)}
        body |= _opt(tenant=tenant, subject=subject)
        body |= _opt(after=_time(after), before=_time(before), said_by=said_by)
        return self._as(list[Hit], "/v1/recall", body)

    # -- forget and the erasure's life
    def forget(
        self,
        *,
        tenant: str | None = None,
        subject: str | None = None,
        purpose: str | None = None,
        prefix: str | None = None,
        key: str | None = None,
        everything: bool = False,
    ) -> Receipt:
        """As :meth:`efface.Store.forget`: the receipt, once the erasure is durable."""
        body: dict[str, Any] = _opt(tenant=tenant, subject=subject, purpose=purpose, prefix=prefix, key=key)
        if everything is not False:
            body["everything"] = everything
        return self._as(Receipt, "/v1/forget", body)

    def status(self, handle: str, *, tenant: str | None = None) -> Status:
        """As :meth:`efface.Store.status` (only the key's tenant's handles are found)."""
        return self._as(Status, "/v1/status", {"handle": handle} | _opt(tenant=tenant))

    def wait(self, handle: str, timeout: float = 30.0, *, tenant: str | None = None, until: str = "erased") -> Status:
        """As :meth:`efface.Store.wait`. The server caps one wait (``/v1/health``'s
        ``max_wait_s``); the client asks again until its own ``timeout`` has passed."""
        deadline = time.monotonic() + v.timeout(timeout)  # the library's rule: finite, 0 or more
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            body = {"handle": handle, "until": until, "timeout": left} | _opt(tenant=tenant)
            st: Status = self._as(Status, "/v1/wait", body, timeout=left + self._timeout)
            done = st.erased if until == "erased" else st.settled
            if done or time.monotonic() >= deadline:
                return st

    def verify(self, handle: str, *, tenant: str | None = None) -> Verification:
        """As :meth:`efface.Store.verify`."""
        return self._as(Verification, "/v1/verify", {"handle": handle} | _opt(tenant=tenant))

    def certificate(self, handle: str, *, tenant: str | None = None) -> dict:
        """As :meth:`efface.Store.certificate` (the JSON certificate)."""
        return self._post("/v1/certificate", {"handle": handle} | _opt(tenant=tenant)).json()

    def certificate_html(self, handle: str, *, tenant: str | None = None) -> str:
        """The certificate as the server renders it in HTML."""
        return self._post("/v1/certificate", {"handle": handle} | _opt(tenant=tenant), accept="text/html").text

    def receipts(self, tenant: str | None = None) -> list[dict]:
        """As :meth:`efface.Store.receipts`: the key's tenant's receipts only."""
        return self._post("/v1/receipts", _opt(tenant=tenant)).json()

    def ledger(self, tenant: str | None = None) -> list[dict]:
        """The ledger entries about the key's tenant (a served store never shows others')."""
        return self._post("/v1/ledger", _opt(tenant=tenant)).json()

    def verify_ledger(self) -> ChainCheck:
        """As :meth:`efface.Store.verify_ledger`: the server checks the whole chain."""
        doc = self._post("/v1/ledger/verify", {}).json()
        return ChainCheck(ok=doc["ok"], entries=doc["entries"], problems=tuple(doc["problems"]))

    # -- derivations
    def set_policy(self, tenant: str | None, policy: str, *, reason: str | None = None) -> int:
        """As :meth:`efface.Store.set_policy`."""
        return self._epoch("/v1/set_policy", {"policy": policy} | _opt(tenant=tenant, reason=reason))

    def quarantined(self, *, tenant: str | None = None) -> list[QuarantineItem]:
        """As :meth:`efface.Store.quarantined`."""
        return self._as(list[QuarantineItem], "/v1/quarantined", _opt(tenant=tenant))

    def release(self, key: str, *, tenant: str | None = None, reason: str) -> int:
        """As :meth:`efface.Store.release`."""
        return self._epoch("/v1/release", {"key": key, "reason": reason} | _opt(tenant=tenant))

    def rederive(
        self,
        key: str,
        text: str,
        *,
        tenant: str | None = None,
        sources: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """As :meth:`efface.Store.rederive`."""
        body = {"key": key, "text": text} | _opt(tenant=tenant, sources=_seq(sources), metadata=_metadata(metadata))
        return self._epoch("/v1/rederive", body)

    # -- introspection
    def stats(self, *, tenant: str | None = None) -> dict:
        """As :meth:`efface.Store.stats` for the key's tenant, without the store-wide record
        count (it would count other tenants' records)."""
        return self._post("/v1/stats", _opt(tenant=tenant)).json()

    def health(self) -> dict:
        """The server's liveness and limits (needs no valid key)."""
        return self._get("/v1/health").json()

    # -- what runs only where the store is
    def _local_only(self, what: str) -> EffaceError:
        return w.RemoteUnsupported(
            f"{what} works on the store's own files: run it where the store is "
            "(e.g. `efface --store DIR ...` on the server's machine), not through a client"
        )

    def backup(self, dest: Any, *, overwrite: bool = False) -> Any:
        raise self._local_only("backup")

    def restore(self, src: Any) -> Any:
        raise self._local_only("restore")

    def compact(self) -> int:
        raise self._local_only("compact (the server's compactor runs on its own)")

    def sweep(self) -> list[Receipt]:
        raise self._local_only("sweep (the server's compactor expires TTLs on its own)")

    def on_quarantine(self, callback: Any) -> None:
        raise self._local_only("on_quarantine (callbacks run in the server's process)")
