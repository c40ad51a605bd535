"""mem0's ``Memory`` on efface: switch with one import, get receipts for every delete.

``from efface.compat.mem0 import Memory`` offers mem0's open-source ``Memory`` methods
(``add``, ``search``, ``get``, ``get_all``, ``update``, ``delete``, ``delete_all``,
``history``, ``reset``) with mem0's return shapes (mem0ai 2.2.1), over an efface store. It
never imports mem0. Where it differs, on purpose (see docs/mem0.md):

* ``delete``/``delete_all``/``reset`` are efface forgets: mem0's message plus ``receipt``
  (the receipt as a dict: ``handle`` for ``wait``/``verify``, ``level``, ``erased``, ...).
* ``history`` never returns deleted text: a deleted memory's history lists its events with
  no text and a ``DELETE`` event carrying the receipt's handle. While a memory lives, its
  earlier texts are kept (as mem0 does) in records erased with it.
* ``expiration_date`` is a TTL: the memory is erased (with an expiry receipt) when the date
  has passed (at the end of that day, UTC), not hidden; ``show_expired`` has nothing to show.
* ``add(infer=True)`` needs an LLM: pass ``extractor`` (messages -> list of fact strings) in
  the config; without one the messages are stored verbatim, with a warning and
  ``"stored_verbatim": True`` in the result.
* ``search`` scores are efface's fused scores (vector and word evidence summed, about 0 to 2,
  higher is better; not a cosine), so mem0's cosine ``threshold`` is not applied.

Scope: ``user_id`` is the efface subject; a memory with no ``user_id`` takes
``"agent_id:<agent_id>"`` (else ``"run_id:<run_id>"``) as its subject. All three are kept
and filter as in mem0. The tenant, the purpose and the lawful basis come from the config.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

from .. import validate
from ..errors import InvalidArguments, InvalidInput, NotFound, UnknownPurpose, typed_calls
from ..model import Receipt
from ._listing import scan_all
from ._mem0_shapes import IDS, _expiration, _ids, _item, _match, _md5, _subject

__all__ = ["Memory", "MemoryNotFound"]

_UNSET: Any = object()
_CONFIG_KEYS = ("tenant", "purpose", "basis", "extractor", "key_prefix", "clock")
"""What :meth:`Memory.from_config` takes besides ``store`` or ``path`` and ``embedder``."""
_MEM0_ONLY = ("vector_store", "llm", "graph_store", "history_db_path", "version", "reranker", "custom_instructions")


def _served(store: Any) -> bool:
    """Whether ``store`` is a served store's client, whose ``tenant=None`` means its API key's."""
    from ..service.client import Client  # only here: the facade does not need the service

    return isinstance(store, Client)


class MemoryNotFound(NotFound, ValueError):
    """No live memory with that id (a ValueError too, as mem0 raises)."""


@typed_calls
class Memory:
    """mem0's ``Memory`` over an efface store. Prefer :meth:`from_config`."""

    def __init__(
        self,
        store: Any,
        *,
        tenant: str | None = "default",
        purpose: str = "memory",
        basis: str = "consent",
        extractor: Callable[[list[dict]], list[str]] | None = None,
        key_prefix: str = "mem0/",
        clock: Callable[[], float] = time.time,
        owns_store: bool = False,
    ) -> None:
        self.store = store
        # checked here, not at the first add: a config that names a bad one is refused at once
        self.tenant, self.purpose, self.basis = (
            None if tenant is None and _served(store) else validate.name(tenant, "tenant"),
            validate.purpose(purpose),
            validate.basis(basis),
        )
        self.history_purpose = validate.purpose(purpose + ".history")
        """History events live under their own purpose, so recall never returns them."""
        self.extractor = extractor
        self.key_prefix = key_prefix
        self.clock = clock
        self.last_receipt: Receipt | None = None
        """The receipt of the newest delete, delete_all or reset."""
        self._owns_store = owns_store
        self._lock = threading.Lock()
        self._last = 0

    @classmethod
    def from_config(cls, config: dict[str, Any] | None = None) -> Memory:
        """Build from a dict: ``store`` (an open efface store) or ``path`` (a directory,
        opened with ``efface.open(path, embedder=...)``; ``embedder`` is ``"hashing"``,
        ``"minilm"`` or None), and optionally ``tenant``, ``purpose``, ``basis``,
        ``extractor``, ``key_prefix``. mem0's own keys (``vector_store``, ``llm``, ...) are
        accepted and ignored with a warning: efface is the store."""
        config = dict(config or {})
        ignored = sorted(k for k in config if k in _MEM0_ONLY)
        if isinstance(config.get("embedder"), dict):
            ignored.append("embedder")
            config.pop("embedder")
        for k in ignored:
            config.pop(k)
        if ignored:
            warnings.warn(f"efface ignores mem0 settings {ignored}: efface is the store", stacklevel=2)
        store, path = config.pop("store", None), config.pop("path", None)
        embedder = config.pop("embedder", None)
        if (store is None) == (path is None):
            raise InvalidInput("give the config exactly one of 'store' (an efface store) or 'path' (a directory)")
        unknown = set(config) - set(_CONFIG_KEYS)
        if unknown:  # before opening anything: a refused config must leave no store open (and locked)
            raise InvalidArguments(
                f"unknown config key(s) ({len(unknown)}): Memory.from_config takes store or path, "
                f"{', '.join(_CONFIG_KEYS)}, embedder, and mem0's own {', '.join(_MEM0_ONLY)} (ignored)"
            )
        if store is not None:
            return cls(store, **config)
        import efface

        opened = efface.open(path, embedder=embedder)
        try:
            return cls(opened, owns_store=True, **config)
        except BaseException:
            opened.close()
            raise

    def close(self) -> None:
        """Close the store if :meth:`from_config` opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- keys ------------------------------------------------------------------------------
    def _mkey(self, memory_id: str) -> str:
        return f"{self.key_prefix}{memory_id}/m"

    def _hkey(self, memory_id: str, seq: int) -> str:
        return f"{self.key_prefix}{memory_id}/h/{seq:06d}"

    def _tombstone_key(self, memory_id: str) -> str:
        return f"{self.key_prefix}deleted/{memory_id}"

    @staticmethod
    def _check_id(memory_id: Any) -> str:
        if not isinstance(memory_id, str) or not memory_id or "/" in memory_id or memory_id == "deleted":
            raise InvalidInput("memory_id must be the id string add() returned")
        return memory_id

    # -- add -------------------------------------------------------------------------------
    def add(
        self,
        messages: Any,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        timestamp: Any = None,
        expiration_date: Any = None,
        infer: bool = True,
        memory_type: str | None = None,
        prompt: str | None = None,
    ) -> dict[str, Any]:
        """Store memories from ``messages`` (a string, a message dict, or a list of them).
        Returns ``{"results": [{"id", "memory", "event": "ADD", "actor_id", "role"}]}``."""
        if timestamp is not None or memory_type is not None:
            raise InvalidInput("timestamp and memory_type are mem0 platform features efface does not offer")
        ids = _ids(user_id=user_id, agent_id=agent_id, run_id=run_id)
        if not ids:
            raise InvalidInput("add needs at least one of user_id, agent_id, run_id")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidInput("metadata must be a dict of JSON values")
        expires = _expiration(expiration_date)
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        elif isinstance(messages, dict):
            messages = [messages]
        elif not isinstance(messages, list):
            raise InvalidInput("messages must be str, dict, or list[dict]")
        if not messages:
            raise InvalidInput("messages is empty: give the text to remember (a str, or messages with a 'content')")
        base = {k: v for k, v in (metadata or {}).items() if k not in IDS}
        base.update(ids)
        if expires is not None:
            base["expiration_date"] = expires
        verbatim = False
        if infer and self.extractor is not None:
            facts = self.extractor(messages)
            if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
                raise InvalidInput("the extractor must return a list of fact strings")
            todo: list[tuple[str, dict[str, Any]]] = [(f, {}) for f in facts if f.strip()]
        else:
            if infer:
                verbatim = True
                warnings.warn(
                    "add(infer=True) needs an LLM; no extractor is configured, so the messages are stored verbatim",
                    stacklevel=2,
                )
            todo = []
            skipped = 0
            for m in messages:
                if not isinstance(m, dict) or m.get("role") is None or m.get("content") is None:
                    skipped += 1  # mem0 skips malformed messages too (an assistant's tool call has no content)
                    continue
                if m["role"] == "system":
                    continue
                extra = {"role": m["role"]}
                if m.get("name"):
                    extra["actor_id"] = m["name"]
                todo.append((m["content"], extra))
            if skipped == len(messages):
                raise InvalidInput(
                    "no message has both a 'role' and a 'content': nothing was stored; "
                    "give messages like {'role': 'user', 'content': 'text'}"
                )
        # Every text is checked before the first is written: a bad one stores none of them.
        for text, _extra in todo:
            if not isinstance(text, str):
                raise InvalidInput(
                    "a message's content must be a string (efface stores text; images and content "
                    "parts are not taken): nothing was stored"
                )
            try:
                validate.text(text)
            except InvalidInput as exc:
                raise InvalidInput(f"a message's content is not storable, so nothing was stored: {exc}") from None
        results = []
        for text, extra in todo:
            memory_id = self._create(text, {**base, **extra})
            item: dict[str, Any] = {"id": memory_id, "memory": text, "event": "ADD"}
            if not (infer and self.extractor is not None):
                item["actor_id"] = extra.get("actor_id")
                item["role"] = extra.get("role")
            results.append(item)
        out: dict[str, Any] = {"results": results}
        if verbatim:
            out["stored_verbatim"] = True
        return out

    def _now_iso(self) -> str:
        return datetime.fromtimestamp(self.clock(), tz=UTC).isoformat()

    def _ttl(self, payload: dict[str, Any]) -> float | None:
        """Seconds from now to the end (UTC) of the payload's expiration date."""
        exp = payload.get("expiration_date")
        if exp is None:
            return None
        day = date.fromisoformat(exp)
        # In seconds: the day after 9999-12-31 has no date (date + timedelta raised OverflowError).
        left = datetime.combine(day, datetime.min.time(), tzinfo=UTC).timestamp() + 86400 - self.clock()
        if left <= 0:
            raise InvalidInput("expiration_date has passed already: nothing would be kept; use delete() to remove")
        return left

    def _order(self) -> int:
        # Strictly increasing: get_all lists oldest first even within one clock tick.
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return self._last

    def _write(self, memory_id: str, text: str, payload: dict[str, Any], order: int) -> None:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("a memory's text must be a non-empty string")
        self.store.write(
            self._mkey(memory_id),
            text,
            tenant=self.tenant,
            subject=_subject(payload),
            purpose=self.purpose,
            basis=self.basis,
            ttl=self._ttl(payload),
            metadata={"mem0": payload, "order": order},
        )

    def _create(self, text: str, base: dict[str, Any]) -> str:
        memory_id = str(uuid.uuid4())
        now = self._now_iso()
        payload = {**base, "hash": _md5(text), "created_at": now, "updated_at": now}
        self._write(memory_id, text, payload, self._order())
        self._event(memory_id, payload, None, text, "ADD")
        return memory_id

    def _event(self, memory_id: str, payload: dict[str, Any], old: str | None, new: str | None, event: str) -> None:
        """One history event, kept under the memory's subject and erased with the memory."""
        seq = len(self._events(memory_id))
        body = {
            "id": str(uuid.uuid4()),
            "memory_id": memory_id,
            "old_memory": old,
            "new_memory": new,
            "event": event,
            "created_at": payload.get("created_at"),
            "updated_at": payload.get("updated_at"),
            "is_deleted": False,
            "actor_id": payload.get("actor_id"),
            "role": payload.get("role"),
        }
        self.store.write(
            self._hkey(memory_id, seq),
            json.dumps(body, ensure_ascii=False),
            tenant=self.tenant,
            subject=_subject(payload),
            purpose=self.history_purpose,
            basis=self.basis,
            ttl=self._ttl(payload),
        )

    def _events(self, memory_id: str) -> list[dict[str, Any]]:
        return [json.loads(m.text) for m in self._scan(f"{self.key_prefix}{memory_id}/h/", self.history_purpose)]

    def _scan(self, prefix: str, purpose: str, subject: str | None = None) -> list[Any]:
        return scan_all(self.store, tenant=self.tenant, purpose=purpose, prefix=prefix, subject=subject)

    # -- reads -----------------------------------------------------------------------------
    def _read(self, memory_id: str) -> Any:
        try:
            return self.store.read(self._mkey(self._check_id(memory_id)), tenant=self.tenant, purpose=self.purpose)
        except UnknownPurpose:
            return None

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """The memory as mem0 returns it (``id``, ``memory``, ``hash``, ``metadata``,
        ``score``, ``created_at``, ``updated_at``, ``user_id``, ...), or None."""
        mem = self._read(memory_id)
        return None if mem is None else _item(memory_id, mem.text, mem.metadata.get("mem0", {}))

    def get_all(
        self,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 20,
        show_expired: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """``{"results": [...]}``: the scope's memories, oldest first, at most ``top_k``.
        ``filters`` must name a ``user_id``, ``agent_id`` or ``run_id`` (passing them as
        keywords, as mem0 1.x did, works too)."""
        filters, top_k = self._filters(filters, kwargs, top_k, "get_all")
        mems = self._scan(self.key_prefix, self.purpose, self._scope_subject(filters))
        rows = []
        for m in mems:
            if not m.key.endswith("/m"):
                continue
            payload = m.metadata.get("mem0", {})
            if _match(payload, filters):
                item = _item(m.key[len(self.key_prefix) : -2], m.text, payload)
                item.pop("score")
                rows.append((m.metadata.get("order") or 0, item))
        rows.sort(key=lambda r: r[0])
        return {"results": [item for _, item in rows[:top_k]]}

    def search(
        self,
        query: str,
        *,
        top_k: int = 20,
        filters: dict[str, Any] | None = None,
        threshold: float | None = None,
        rerank: bool = False,
        explain: bool = False,
        reference_date: Any = None,
        show_expired: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """``{"results": [...]}`` with ``score``: efface recall (ANN + full text) in the
        scope ``filters`` names. ``threshold`` is accepted and not applied (see module doc);
        ``reference_date`` only as None, as mem0's open-source ``Memory`` takes it."""
        if reference_date is not None:
            raise InvalidInput("reference_date is not supported (nor by mem0's open-source Memory): leave it None")
        filters, top_k = self._filters(filters, kwargs, top_k, "search")
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query must be a non-empty string")
        try:
            hits = self.store.recall(
                query,
                tenant=self.tenant,
                purpose=self.purpose,
                subject=self._scope_subject(filters),
                k=min(1000, max(top_k * 4, 60)),
            )
        except UnknownPurpose:
            return {"results": []}
        rows = []
        for h in hits:
            if not (h.key.startswith(self.key_prefix) and h.key.endswith("/m")):
                continue
            payload = dict(h.metadata).get("mem0", {})
            if _match(payload, filters):
                rows.append(_item(h.key[len(self.key_prefix) : -2], h.text, payload, score=h.score))
            if len(rows) == top_k:
                break
        return {"results": rows}

    def _filters(self, filters: Any, kwargs: dict[str, Any], top_k: Any, what: str) -> tuple[dict[str, Any], int]:
        if "limit" in kwargs:
            top_k = kwargs.pop("limit")
        if filters is not None and not isinstance(filters, dict):
            raise InvalidInput('filters must be a dict, e.g. {"user_id": "alice"}')
        merged = dict(filters or {})
        for k in IDS:
            if k in kwargs:
                merged[k] = kwargs.pop(k)
        if kwargs:  # a TypeError, as Python's for a keyword a method does not take; the names only
            raise InvalidArguments(
                f"Memory.{what}() got {len(kwargs)} keyword argument(s) it does not take: besides its own "
                f"it takes limit and {', '.join(IDS)}; see help(efface.compat.mem0.Memory.{what})"
            )
        if not any(merged.get(k) for k in IDS):
            raise InvalidInput("filters must contain at least one of: user_id, agent_id, run_id")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InvalidInput("top_k must be a positive int")
        return merged, top_k

    @staticmethod
    def _scope_subject(filters: dict[str, Any]) -> str | None:
        # Only a user_id names the subject for sure: memories without one took their
        # agent_id or run_id as subject, so those filter on the stored ids instead.
        uid = filters.get("user_id")
        return uid if isinstance(uid, str) else None

    # -- update ------------------------------------------------------------------------------
    def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        expiration_date: Any = _UNSET,
        data: str | None = None,
    ) -> dict[str, str]:
        """Replace the text and/or merge metadata; ``{"message": "Memory updated successfully!"}``."""
        if text is None:
            text = data
        if text is None and metadata is None and expiration_date is _UNSET:
            raise InvalidInput("At least one of text, metadata, or expiration_date must be provided.")
        if text is not None and not isinstance(text, str):  # a list raised a raw AttributeError
            raise InvalidInput("text must be a string: the memory's new text")
        mem = self._read(memory_id)
        if mem is None:
            raise MemoryNotFound("no memory with that id: check the id add() returned")
        payload = dict(mem.metadata.get("mem0", {}))
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise InvalidInput("metadata must be a dict of JSON values")
            payload.update({k: v for k, v in metadata.items() if k not in (*IDS, "actor_id")})
        if expiration_date is not _UNSET:
            exp = _expiration(expiration_date)
            if exp is None:
                payload.pop("expiration_date", None)
            else:
                payload["expiration_date"] = exp
        old = mem.text
        new = old if text is None else text
        payload.update({"hash": _md5(new), "updated_at": self._now_iso()})
        self._write(memory_id, new, payload, mem.metadata.get("order") or self._order())
        if expiration_date is not _UNSET:
            # Earlier events live as long as the memory does.
            for i in range(len(self._events(memory_id))):
                self.store.retain(
                    self._hkey(memory_id, i),
                    tenant=self.tenant,
                    subject=_subject(payload),
                    purpose=self.history_purpose,
                    basis=self.basis,
                    ttl=self._ttl(payload),
                )
        self._event(memory_id, payload, old, new, "UPDATE")
        return {"message": "Memory updated successfully!"}

    # -- delete ------------------------------------------------------------------------------
    def delete(self, memory_id: str) -> dict[str, Any]:
        """Forget one memory and its history; ``{"message": "Memory deleted successfully!",
        "receipt": {...}}``. Raises :class:`MemoryNotFound` (a ValueError) if there is none."""
        mem = self._read(memory_id)
        if mem is None:
            raise MemoryNotFound("no memory with that id: check the id add() returned")
        receipt = self._forget_memories([memory_id], prefix=f"{self.key_prefix}{memory_id}/")
        return {"message": "Memory deleted successfully!", "receipt": receipt.to_dict()}

    def delete_all(
        self, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Forget every memory in the scope, with their histories. Returns mem0's message and
        ``receipt``; when the scope is exactly one ``user_id`` this is one forget of that
        subject's memories, else one forget per memory (all in ``receipts``)."""
        filters = _ids(user_id=user_id, agent_id=agent_id, run_id=run_id)
        if not filters:
            raise InvalidInput(
                "At least one filter is required to delete all memories. "
                "If you want to delete all memories, use the `reset()` method."
            )
        ids = [r["id"] for r in self.get_all(filters=filters, top_k=10**9)["results"]]
        if set(filters) == {"user_id"}:
            receipts = [self._forget_memories(ids, subject=filters["user_id"])]
        else:
            receipts = [self._forget_memories([i], prefix=f"{self.key_prefix}{i}/") for i in ids]
        out: dict[str, Any] = {"message": "Memories deleted successfully!"}
        out["receipt"] = receipts[-1].to_dict() if receipts else None
        out["receipts"] = [r.to_dict() for r in receipts]
        return out

    def _forget_memories(self, ids: list[str], *, prefix: str | None = None, subject: str | None = None) -> Receipt:
        skeletons = {i: self._events(i) for i in ids}
        if subject is not None:
            receipt = self.store.forget(tenant=self.tenant, subject=subject, prefix=self.key_prefix)
        else:
            receipt = self.store.forget(tenant=self.tenant, prefix=prefix)
        self.last_receipt = receipt
        now = self._now_iso()
        for memory_id, events in skeletons.items():
            # What is left of a deleted memory: its events without text, and the deletion
            # with the receipt's handle. No personal data: no text, no ids but its own.
            kept = [{**e, "old_memory": None, "new_memory": None, "actor_id": None} for e in events]
            kept.append(
                {
                    "id": str(uuid.uuid4()),
                    "memory_id": memory_id,
                    "old_memory": None,
                    "new_memory": None,
                    "event": "DELETE",
                    "created_at": events[0]["created_at"] if events else None,
                    "updated_at": now,
                    "is_deleted": True,
                    "actor_id": None,
                    "role": None,
                    "receipt": receipt.handle,
                }
            )
            self.store.write(
                self._tombstone_key(memory_id),
                json.dumps(kept),
                tenant=self.tenant,
                subject=_TOMBSTONE_SUBJECT,
                purpose=self.history_purpose,
                basis=self.basis,
            )
        return receipt

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory's events, oldest first, as mem0 returns them. A deleted memory's
        events carry no text; its ``DELETE`` event carries the ``receipt`` handle."""
        memory_id = self._check_id(memory_id)
        events = self._events(memory_id)
        if events:
            return events
        try:
            tomb = self.store.read(self._tombstone_key(memory_id), tenant=self.tenant, purpose=self.history_purpose)
        except UnknownPurpose:
            return []
        return [] if tomb is None else json.loads(tomb.text)

    def reset(self) -> dict[str, Any]:
        """Forget every memory, history and deletion record under this facade's key prefix
        in the tenant (mem0 returns None; here the receipt comes back)."""
        receipt = self.store.forget(tenant=self.tenant, prefix=self.key_prefix)
        self.last_receipt = receipt
        return {"message": "Memory store reset.", "receipt": receipt.to_dict()}


_TOMBSTONE_SUBJECT = "efface.compat.mem0:deleted"
"""The subject of deletion records: they hold no personal data and must outlive the
forgotten user's own claims, so they are not that user's."""
