"""A Google ADK memory service on efface: ``BaseMemoryService`` whose ``delete_memory`` is a
forget with a receipt, registered under the ``efface://`` URI scheme.

``EffaceMemoryService(store, tenant="acme")`` implements ADK's ``BaseMemoryService``
(``add_session_to_memory``, ``add_events_to_memory``, ``add_memory``, ``search_memory``,
``delete_memory``). Importing this module registers the ``efface`` scheme in ADK's service
registry, so ``adk web --memory_service_uri=efface://./memories?tenant=acme`` works once the
agents directory's ``services.py`` imports it (see docs/adk.md for the URI's forms).

How ADK's names map to efface:

* **Scope.** ADK scopes memory by ``(app_name, user_id)``. ``user_id`` is the efface
  **subject**; the **tenant** is the constructor's ``tenant``, or ``app_name`` when none is
  given; the **purpose** is the constructor's (default ``memory``). Every record's key
  starts with ``key_prefix + quote(app_name) + "/" + quote(user_id) + "/"``, so one app's
  memories never answer another's search, even in one tenant.
* **Keys.** A session event is ``<scope>s/<session id>/<event id>``, an explicit memory
  (``add_memory``) ``<scope>m/<memory id>``; every part is percent-quoted, so no two
  (app, user, session, id) share a key.
* **Records.** The text is the event's text parts joined by spaces (what recall searches and
  what a forget erases); the metadata keeps the ``Content`` as ADK gave it, the author and the
  timestamp, so a search returns the ``MemoryEntry`` InMemoryMemoryService would.
* **delete_memory** forgets the memory's record(s) by key; ADK's call returns None, so the
  receipt is kept in :attr:`EffaceMemoryService.receipts` (newest last; :attr:`last_receipt`),
  and :meth:`forget_memory` returns it. As InMemoryMemoryService does, a deleted id is not
  taken in again when its session is added anew: the service keeps a tombstone record (the
  id only) under the purpose ``<purpose>:deleted``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from google.adk.cli.service_registry import get_service_registry
from google.adk.memory import _utils as adk_utils
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

import efface

from ..errors import InvalidInput, UnknownPurpose
from ..model import Memory, Receipt
from ._listing import receipt_log, scan_all

__all__ = ["SCHEME", "EffaceMemoryService", "register"]

SCHEME = "efface"
_META = "adk"
_UNKNOWN_SESSION_ID = "__unknown_session_id__"
"""InMemoryMemoryService's session id for events added without one."""
_MAX_RESULTS = 10
"""At most this many memories per search, as InMemoryMemoryService returns."""
_RECALL_K = 100
"""Hits asked of recall before keeping the app's: a tenant may hold other apps' records."""


def _text(content: Any) -> str:
    parts = getattr(content, "parts", None) or []
    return " ".join(p.text for p in parts if getattr(p, "text", None))


class EffaceMemoryService(BaseMemoryService):
    """An ADK memory service over an efface store (anything with ``efface.Store``'s methods: an
    embedded store or a client of a served one).

    ``store``: the store; or ``uri``: an ``efface://`` URI to open (the service then owns the
    store, and :meth:`close` closes it). ``tenant``: the efface tenant (None: each
    ``app_name`` is its own tenant). ``purpose``, ``basis``: the claim every memory is written
    under. ``keep_receipts``: how many receipts :attr:`receipts` keeps.
    """

    def __init__(
        self,
        store: Any = None,
        *,
        uri: str | None = None,
        tenant: str | None = None,
        purpose: str = "memory",
        basis: str = "consent",
        key_prefix: str = "adk/",
        keep_receipts: int = 1000,
        agents_dir: str | None = None,
    ) -> None:
        self._owns_store = False
        if uri is not None:
            if store is not None:
                raise InvalidInput("give a store or a uri, not both")
            store, options = _open_uri(uri)
            self._owns_store = True
            tenant = options.get("tenant", tenant)
            purpose = options.get("purpose", purpose)
            basis = options.get("basis", basis)
        if store is None:
            raise InvalidInput("give an efface store (efface.open(...)) or an efface:// uri")
        if not isinstance(key_prefix, str) or not key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string, e.g. 'adk/'")
        self.store = store
        self.tenant = tenant
        self.purpose = purpose
        self.tombstone_purpose = f"{purpose}:deleted"
        self.basis = basis
        self.key_prefix = key_prefix
        self.agents_dir = agents_dir
        self.receipts: collections.deque[Receipt] = receipt_log(keep_receipts)
        """Receipts of this service's deletes and forgets, oldest first."""
        self._lock = threading.Lock()

    # -- what ADK lacks: receipts ------------------------------------------------------------
    @property
    def last_receipt(self) -> Receipt | None:
        """The receipt of the newest delete or forget (None before the first)."""
        return self.receipts[-1] if self.receipts else None

    def forget_memory(self, *, app_name: str, user_id: str, memory_id: str) -> Receipt | None:
        """Forget one memory (what ``delete_memory`` does) and return the receipt; None when
        the user has no memory with that id. Several records (an event added under two
        sessions) give one receipt each, all in :attr:`receipts`; the last is returned."""
        with self._lock:
            tenant, scope = self._tenant(app_name), self._scope(app_name, user_id)
            suffix = "/" + quote(memory_id, safe="")
            keys = [m.key for m in self._scan(tenant, scope) if m.key.endswith(suffix)]
            receipt = None
            for key in keys:
                receipt = self._keep(self.store.forget(tenant=tenant, key=key))
            if keys:
                tomb = {"key": f"{scope}x{suffix}", "text": f"deleted memory {memory_id}"}
                self.store.write_many(
                    [tomb], tenant=tenant, subject=user_id, purpose=self.tombstone_purpose, basis=self.basis
                )
            return receipt

    def forget_user(self, *, app_name: str, user_id: str) -> Receipt:
        """Forget every memory of ``user_id`` in ``app_name`` (the tombstones too) and return
        the receipt. ``store.forget(tenant=..., subject=user_id)`` forgets the person in every
        app of the tenant, and their other records."""
        with self._lock:
            tenant = self._tenant(app_name)
            return self._keep(self.store.forget(tenant=tenant, prefix=self._scope(app_name, user_id)))

    def close(self) -> None:
        """Close the store if this service opened it (from a uri)."""
        if self._owns_store:
            self.store.close()

    def _keep(self, receipt: Receipt) -> Receipt:
        self.receipts.append(receipt)
        return receipt

    # -- BaseMemoryService -------------------------------------------------------------------
    async def add_session_to_memory(self, session: Any) -> None:
        """Take the session's events in, as InMemoryMemoryService does: the session's memory
        becomes its events that have content (those with text; a deleted id stays out). An
        event no longer in the session is forgotten (its receipt goes to :attr:`receipts`)."""
        await asyncio.to_thread(self._add_session, session)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Any],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Append the events (a delta) to the session's memory; ids already there, or deleted,
        are skipped. ``custom_metadata`` is not used."""
        await asyncio.to_thread(self._add_events, app_name, user_id, list(events), session_id or _UNKNOWN_SESSION_ID)

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Write explicit memories (one transaction). An entry without an ``id`` gets one; an
        entry with an id already written replaces it. ``custom_metadata`` is not used; each
        entry's own ``custom_metadata`` is kept."""
        await asyncio.to_thread(self._add_memories, app_name, user_id, list(memories))

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """efface's hybrid recall (meaning and words) over the user's memories in the app: at
        most 10, best first."""
        return await asyncio.to_thread(self._search, app_name, user_id, query)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Forget the memory ``memory_id`` (``MemoryEntry.id`` from a search); the receipt is
        :attr:`last_receipt`. An unknown id, or none, forgets nothing."""
        if not memory_id:
            return
        await asyncio.to_thread(lambda: self.forget_memory(app_name=app_name, user_id=user_id, memory_id=memory_id))

    # -- the store's side ----------------------------------------------------------------------
    def _tenant(self, app_name: str) -> str:
        return self.tenant if self.tenant is not None else app_name

    def _scope(self, app_name: str, user_id: str) -> str:
        if not isinstance(app_name, str) or not app_name or not isinstance(user_id, str) or not user_id:
            raise InvalidInput("app_name and user_id must be non-empty strings")
        return f"{self.key_prefix}{quote(app_name, safe='')}/{quote(user_id, safe='')}/"

    def _scan(self, tenant: str, prefix: str, purpose: str | None = None) -> list[Memory]:
        return scan_all(self.store, tenant=tenant, purpose=purpose or self.purpose, prefix=prefix)

    def _deleted(self, tenant: str, scope: str) -> set[str]:
        mems = self._scan(tenant, scope + "x/", self.tombstone_purpose)
        return {unquote(m.key.rsplit("/", 1)[1]) for m in mems}

    def _event_record(self, scope: str, session_id: str, event: Any) -> dict[str, Any]:
        meta = {
            "id": event.id,
            "author": event.author,
            "event_time": event.timestamp,  # formatted at search time, as InMemoryMemoryService does
            "content": event.content.model_dump(mode="json", exclude_none=True),
        }
        key = f"{scope}s/{quote(session_id, safe='')}/{quote(event.id, safe='')}"
        return {"key": key, "text": _text(event.content), "metadata": {_META: meta}}

    def _add_session(self, session: Any) -> None:
        with self._lock:
            tenant, scope = self._tenant(session.app_name), self._scope(session.app_name, session.user_id)
            deleted = self._deleted(tenant, scope)
            wanted = [
                self._event_record(scope, session.id, e)
                for e in session.events
                if e.content and e.content.parts and _text(e.content) and e.id not in deleted
            ]
            prefix = f"{scope}s/{quote(session.id, safe='')}/"
            have = {m.key for m in self._scan(tenant, prefix)}
            keys = {r["key"] for r in wanted}
            for gone in sorted(have - keys):
                self._keep(self.store.forget(tenant=tenant, key=gone))
            self._write(tenant, session.user_id, [r for r in wanted if r["key"] not in have])

    def _add_events(self, app_name: str, user_id: str, events: list[Any], session_id: str) -> None:
        with self._lock:
            tenant, scope = self._tenant(app_name), self._scope(app_name, user_id)
            deleted = self._deleted(tenant, scope)
            have = {m.key for m in self._scan(tenant, f"{scope}s/{quote(session_id, safe='')}/")}
            new: dict[str, dict[str, Any]] = {}
            for e in events:
                if not (e.content and e.content.parts and _text(e.content)) or e.id in deleted:
                    continue
                record = self._event_record(scope, session_id, e)
                if record["key"] not in have:
                    new.setdefault(record["key"], record)
            self._write(tenant, user_id, list(new.values()))

    def _add_memories(self, app_name: str, user_id: str, memories: list[MemoryEntry]) -> None:
        with self._lock:
            tenant, scope = self._tenant(app_name), self._scope(app_name, user_id)
            records = []
            for entry in memories:
                text = _text(entry.content)
                if not text:
                    raise InvalidInput("a memory needs text in its content's parts (that is what a search matches)")
                mid = entry.id or str(uuid.uuid4())
                meta = {
                    "id": mid,
                    "author": entry.author,
                    "timestamp": entry.timestamp,
                    "content": entry.content.model_dump(mode="json", exclude_none=True),
                    "custom": dict(entry.custom_metadata),
                }
                records.append({"key": f"{scope}m/{quote(mid, safe='')}", "text": text, "metadata": {_META: meta}})
            self._write(tenant, user_id, records)

    def _write(self, tenant: str, user_id: str, records: list[dict[str, Any]]) -> None:
        if records:
            self.store.write_many(records, tenant=tenant, subject=user_id, purpose=self.purpose, basis=self.basis)

    def _search(self, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        tenant, scope = self._tenant(app_name), self._scope(app_name, user_id)
        if not isinstance(query, str) or not query.strip():
            return SearchMemoryResponse()
        try:
            hits = self.store.recall(query, tenant=tenant, purpose=self.purpose, subject=user_id, k=_RECALL_K)
        except UnknownPurpose:  # nothing was ever written for this purpose in the tenant
            return SearchMemoryResponse()
        out = []
        for h in hits:
            meta = h.metadata.get(_META) if h.key.startswith(scope) else None
            if meta is None:
                continue
            out.append(
                MemoryEntry(
                    id=meta["id"],
                    content=types.Content.model_validate(meta["content"]),
                    author=meta.get("author"),
                    timestamp=(
                        adk_utils.format_timestamp(meta["event_time"])
                        if "event_time" in meta
                        else meta.get("timestamp")
                    ),
                    custom_metadata=meta.get("custom", {}),
                )
            )
            if len(out) == _MAX_RESULTS:
                break
        return SearchMemoryResponse(memories=out)


def _open_uri(uri: str) -> tuple[Any, dict[str, str]]:
    """``efface://LOCATION?tenant=T&purpose=P&basis=B&embedder=E``: LOCATION is a store
    directory (``efface://./memories``, ``efface:///var/lib/efface``) or an efface server's
    URL (``efface://http://127.0.0.1:8750``, with the API key in ``EFFACE_API_KEY``)."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME + "://"):
        raise InvalidInput(f"an efface memory service URI starts with {SCHEME}://")
    location, _, query = uri[len(SCHEME) + 3 :].partition("?")
    params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=False).items()}
    unknown = set(params) - {"tenant", "purpose", "basis", "embedder"}
    if unknown:
        raise InvalidInput(f"unknown efface:// URI parameter(s): {', '.join(sorted(unknown))}")
    if not location:
        raise InvalidInput("name the store: efface://DIRECTORY or efface://http://HOST:PORT")
    if location.startswith(("http://", "https://")):
        if "embedder" in params:
            raise InvalidInput("a served store uses the server's embedder: leave embedder out of the URI")
        store = efface.open(location)  # the client reads EFFACE_API_KEY
    else:
        store = efface.open(unquote(location), embedder=params.get("embedder"))
    params.pop("embedder", None)
    return store, params


def register() -> None:
    """Register the ``efface`` URI scheme for memory services in ADK's service registry
    (done when this module is imported)."""
    get_service_registry().register_memory_service(SCHEME, lambda uri, **kw: EffaceMemoryService(uri=uri, **kw))


register()
