"""An OpenAI Agents SDK session on efface: ``SessionABC`` whose ``clear_session`` is a forget
with a receipt.

``EffaceSession(session_id, store, tenant="acme", subject="alice")`` implements
``agents.memory.SessionABC`` (``get_items``, ``add_items``, ``pop_item``, ``clear_session``),
so ``Runner.run(agent, input, session=...)`` keeps the conversation in efface.

How the SDK's names map to efface (see docs/openai-agents.md):

* **Scope.** A session is one conversation of one data subject: every item is a record of
  ``tenant`` with one claim ``(subject, purpose, basis)`` given to the constructor (the SDK
  has no user; the session id names a conversation, not a person). Forgetting the subject
  (``store.forget(tenant=..., subject=...)``, or :meth:`EffaceSession.forget_subject`)
  takes every session of that person.
* **Keys.** An item is ``key_prefix + quote(session_id) + "/" + n``, ``n`` a 20-digit number
  above every number the session holds and at least the time in nanoseconds: key order is
  insertion order, and a popped item's key is not written again (as SQLite's AUTOINCREMENT,
  which SQLiteSession uses). ``quote`` escapes ``/`` (and ``%``), so a session's key prefix
  never reaches another session's items.
* **Items** are stored as their JSON text: what recall searches, what a forget erases.
* **clear_session** is ``forget(prefix=<the session's prefix>)``; **pop_item** is
  ``forget(key=<the last item>)``. Both return None in the SDK, so the receipts are kept in
  :attr:`EffaceSession.receipts` (newest last; :attr:`last_receipt`).
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from typing import Any
from urllib.parse import quote

from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import resolve_session_limit

from ..errors import InvalidInput
from ..model import Receipt
from ._listing import receipt_log, scan_all

__all__ = ["EffaceSession"]

_DIGITS = 20


class EffaceSession(SessionABC):
    """An Agents SDK session over an efface store (anything with ``efface.Store``'s methods:
    an embedded store or a client of a served one).

    ``tenant``, ``subject``, ``purpose``, ``basis``: the claim every item is written under.
    ``ttl``: seconds (or a ``timedelta``) each item is kept; expiry is an efface erasure.
    ``session_settings``: the SDK's ``SessionSettings`` (its ``limit`` is ``get_items``'s
    default). ``keep_receipts``: how many receipts :attr:`receipts` keeps.
    """

    def __init__(
        self,
        session_id: str,
        store: Any,
        *,
        tenant: str,
        subject: str,
        purpose: str = "conversation",
        basis: str = "consent",
        ttl: Any = None,
        key_prefix: str = "agents/",
        session_settings: SessionSettings | None = None,
        keep_receipts: int = 1000,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput("session_id must be a non-empty string")
        if not isinstance(key_prefix, str) or not key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string, e.g. 'agents/'")
        self.session_id = session_id
        self.session_settings = session_settings or SessionSettings()
        self.store = store
        self.tenant = tenant
        self.subject = subject
        self.purpose = purpose
        self.basis = basis
        self.ttl = ttl
        self.prefix = key_prefix + quote(session_id, safe="") + "/"
        """Every item of this session, and only them, has a key starting with this."""
        self.receipts: collections.deque[Receipt] = receipt_log(keep_receipts)
        """Receipts of this session's clears, pops and forgets, oldest first."""
        # Appends through this object must not take the same item number; the numbers come
        # from the store (its last key) and the clock, so a session made again continues.
        self._lock = threading.Lock()

    # -- what the SDK lacks: the receipts ---------------------------------------------------
    @property
    def last_receipt(self) -> Receipt | None:
        """The receipt of the newest clear, pop or forget (None before the first)."""
        return self.receipts[-1] if self.receipts else None

    def forget(self) -> Receipt:
        """Forget every item of this session (what ``clear_session`` does) and return the receipt."""
        with self._lock:
            return self._keep(self.store.forget(tenant=self.tenant, prefix=self.prefix))

    def forget_subject(self) -> Receipt:
        """Forget everything of this session's subject in the tenant: every session of that
        person, and their other records in the store (efface's forget is per subject)."""
        with self._lock:
            return self._keep(self.store.forget(tenant=self.tenant, subject=self.subject))

    def _keep(self, receipt: Receipt) -> Receipt:
        self.receipts.append(receipt)
        return receipt

    # -- SessionABC --------------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The conversation in order; with ``limit`` (or the settings' limit) the newest
        ``limit`` items, still in order. ``limit <= 0`` as SQLiteSession: 0 gives nothing,
        a negative limit everything."""
        n = resolve_session_limit(limit, self.session_settings)
        items = [json.loads(m.text) for m in await asyncio.to_thread(self._all)]
        if n is None or n < 0:
            return items
        return items[-n:] if n > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in one efface transaction (one epoch): all of them or none."""
        if not items:
            return
        texts = []
        for item in items:
            try:
                texts.append(json.dumps(item, ensure_ascii=False, allow_nan=False))
            except (TypeError, ValueError):
                raise InvalidInput("a session item must be a JSON value (the SDK's input items are)") from None
        await asyncio.to_thread(self._append, texts)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None when the session is empty); its forget's
        receipt goes to :attr:`receipts`."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Forget every item of the session; the receipt is :attr:`last_receipt`."""
        await asyncio.to_thread(self.forget)

    # -- the store's side ----------------------------------------------------------------------
    def _all(self) -> list[Any]:
        return scan_all(self.store, tenant=self.tenant, purpose=self.purpose, prefix=self.prefix)

    def _append(self, texts: list[str]) -> None:
        with self._lock:
            mems = self._all()
            start = max(int(mems[-1].key[len(self.prefix) :]) + 1 if mems else 0, time.time_ns())
            batch = [{"key": f"{self.prefix}{start + i:0{_DIGITS}d}", "text": t} for i, t in enumerate(texts)]
            self.store.write_many(
                batch, tenant=self.tenant, subject=self.subject, purpose=self.purpose, basis=self.basis, ttl=self.ttl
            )

    def _pop(self) -> Any | None:
        with self._lock:
            mems = self._all()
            if not mems:
                return None
            last = mems[-1]
            self._keep(self.store.forget(tenant=self.tenant, key=last.key))
            return json.loads(last.text)
