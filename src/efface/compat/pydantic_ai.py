"""Pydantic AI memory tools on efface: a toolset of ``remember``, ``recall`` and ``forget``,
whose ``forget`` returns the receipt.

``EffaceToolset(store, tenant="acme", subject=lambda ctx: ctx.deps.user_id)`` is a
``pydantic_ai.toolsets.FunctionToolset``: pass it to ``Agent(toolsets=[...])``.

How the tools map to efface (see docs/pydantic-ai.md):

* **Scope.** Every memory is a record of ``tenant`` under ``purpose`` with one claim of the
  run's **subject**: ``subject`` is a string, or a function of the ``RunContext`` (so the
  person comes from the run's dependencies, never from the model's arguments).
* **Keys.** A memory is ``key_prefix + quote(subject) + "/" + <uuid>``; that key is the id the
  tools show the model. ``recall`` and ``forget`` only ever reach the run's subject's keys:
  an id outside them is refused as unknown, whatever the model sends.
* **forget** is ``forget(key=...)`` for one memory, or ``forget(prefix=...)`` for all of the
  subject's memories made through the toolset; the tool returns the receipt as a JSON object
  (``handle``, ``epoch``, ``level``, ``erased``, ``retained``, ``paths``, ...), and the toolset
  keeps it (:attr:`EffaceToolset.receipts`, :attr:`last_receipt`).
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.toolsets import FunctionToolset

from ..errors import InvalidInput, UnknownPurpose
from ..model import Receipt

__all__ = ["EffaceToolset"]

INSTRUCTIONS = (
    "You have a long-term memory about the user. Use `remember` to keep a fact worth keeping, "
    "`recall` to look facts up before answering, and `forget` when the user asks you to forget "
    "something (one memory by its id, or everything): its answer is a receipt, tell the user its "
    "level ('intent' means recorded and no longer readable; proof of erasure follows)."
)


class EffaceToolset(FunctionToolset[Any]):
    """Memory tools over an efface store (anything with ``efface.Store``'s methods: an embedded
    store or a client of a served one).

    ``subject``: the data subject, a string or a function of the run's ``RunContext``.
    ``tenant``, ``purpose``, ``basis``: the claim every memory is written under. ``k``: how
    many memories ``recall`` returns at most. ``instructions``: what the agent is told about
    the tools (None: none). ``keep_receipts``: how many receipts :attr:`receipts` keeps.
    """

    def __init__(
        self,
        store: Any,
        *,
        tenant: str,
        subject: str | Callable[[RunContext[Any]], str],
        purpose: str = "memory",
        basis: str = "consent",
        key_prefix: str = "pydantic-ai/",
        k: int = 5,
        instructions: str | None = INSTRUCTIONS,
        keep_receipts: int = 1000,
        id: str | None = "efface",
    ) -> None:
        super().__init__(id=id, instructions=instructions)
        if not isinstance(key_prefix, str) or not key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string, e.g. 'pydantic-ai/'")
        self.store = store
        self.tenant = tenant
        self.subject = subject
        self.purpose = purpose
        self.basis = basis
        self.key_prefix = key_prefix
        self.k = k
        self.receipts: collections.deque[Receipt] = collections.deque(maxlen=keep_receipts)
        """Receipts of the forgets the tools made, oldest first."""
        self.add_function(self._remember, takes_ctx=True, name="remember")
        self.add_function(self._recall, takes_ctx=True, name="recall")
        self.add_function(self._forget, takes_ctx=True, name="forget")

    @property
    def last_receipt(self) -> Receipt | None:
        """The receipt of the newest forget (None before the first)."""
        return self.receipts[-1] if self.receipts else None

    def _subject_of(self, ctx: RunContext[Any]) -> str:
        subject = self.subject(ctx) if callable(self.subject) else self.subject
        if not isinstance(subject, str) or not subject:
            raise InvalidInput("the toolset's subject must be (or give) a non-empty string")
        return subject

    def _prefix(self, subject: str) -> str:
        return f"{self.key_prefix}{quote(subject, safe='')}/"

    # -- the tools (their docstrings are what the model reads) -------------------------------
    def _remember(self, ctx: RunContext[Any], text: str) -> str:
        """Remember a fact about the user for later conversations.

        Args:
            text: The fact, in one or two self-contained sentences.

        Returns:
            The memory's id.
        """
        subject = self._subject_of(ctx)
        key = self._prefix(subject) + uuid.uuid4().hex
        self.store.write(key, text, tenant=self.tenant, subject=subject, purpose=self.purpose, basis=self.basis)
        return key

    def _recall(self, ctx: RunContext[Any], query: str) -> list[dict[str, Any]]:
        """Look up what you remember about the user, by meaning and by words.

        Args:
            query: What to look for.

        Returns:
            The best matching memories, best first: each with its id, text and score.
        """
        subject = self._subject_of(ctx)
        prefix = self._prefix(subject)
        try:
            hits = self.store.recall(
                query, tenant=self.tenant, purpose=self.purpose, subject=subject, k=max(self.k, 50)
            )
        except UnknownPurpose:  # nothing was ever remembered in this tenant
            return []
        found = [{"id": h.key, "text": h.text, "score": h.score} for h in hits if h.key.startswith(prefix)]
        return found[: self.k]

    def _forget(self, ctx: RunContext[Any], memory_id: str | None = None) -> dict[str, Any]:
        """Forget one memory about the user, or (without an id) everything remembered about them.

        Args:
            memory_id: The id of the memory to forget (from `remember` or `recall`); leave it out
                to forget everything remembered about the user.

        Returns:
            The erasure's receipt: its handle, its level ('intent': recorded and unreadable from
            now on; 'unreadable', 'erased': proven), and what was erased or retained.
        """
        subject = self._subject_of(ctx)
        prefix = self._prefix(subject)
        if memory_id is None:
            receipt = self.store.forget(tenant=self.tenant, prefix=prefix)
        else:
            if not memory_id.startswith(prefix) or memory_id == prefix:
                raise ModelRetry("no memory of this user has that id: use an id from remember or recall")
            receipt = self.store.forget(tenant=self.tenant, key=memory_id)
        self.receipts.append(receipt)
        return receipt.to_dict()
