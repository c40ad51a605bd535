"""Pydantic AI on efface: a toolset of ``remember``, ``recall`` and ``forget`` whose
``forget`` returns the receipt, and a ``ConversationStore`` whose deletes are forgets.

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

``EffaceConversationStore(store, tenant="acme")`` is a
``pydantic_ai.conversation_store.ConversationStore`` (the five storage primitives; loading,
saving, branching and forking are Pydantic AI's own): a conversation's record is the efface
record ``key_prefix + "r/" + quote(conversation_id)``, each message entry
``key_prefix + "e/" + entry id``, both JSON text; the subject is the conversation's ``scope``
(else the constructor's ``subject``). ``delete`` forgets the record and every entry no other
conversation reaches, with receipts (:attr:`EffaceConversationStore.receipts`).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from pydantic import TypeAdapter
from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.toolsets import FunctionToolset

from .. import validate
from ..errors import InvalidInput, UnknownPurpose
from ..model import Receipt
from ._listing import receipt_log, scan_all

__all__ = ["EffaceConversationStore", "EffaceToolset"]

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
        # Checked here: at a tool call, an InvalidInput goes back to the model as a ModelRetry,
        # and no retry of the model's can mend the toolset's own configuration.
        validate.name(tenant, "tenant")
        validate.purpose(purpose)
        validate.basis(basis)
        if isinstance(subject, str):
            validate.name(subject, "subject")
        elif not callable(subject):
            raise InvalidInput("subject must be a string, or a function of the run's context giving one")
        k = validate.k(k)  # k=-1 dropped the best hit, k=2000 failed every recall
        self.store = store
        self.tenant = tenant
        self.subject = subject
        self.purpose = purpose
        self.basis = basis
        self.key_prefix = key_prefix
        self.k = k
        self.receipts: collections.deque[Receipt] = receipt_log(keep_receipts)
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
        try:
            self.store.write(key, text, tenant=self.tenant, subject=subject, purpose=self.purpose, basis=self.basis)
        except InvalidInput as exc:  # the model's argument (empty, too long): it may try again
            raise ModelRetry(str(exc)) from None
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
        except InvalidInput as exc:  # the model's query (empty, too long): it may try again
            raise ModelRetry(str(exc)) from None
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


_RECORD = TypeAdapter(ConversationRecord)
_ENTRY = TypeAdapter(ConversationEntry)


class EffaceConversationStore(ConversationStore):
    """Pydantic AI's ``ConversationStore`` over an efface store (anything with
    ``efface.Store``'s methods: an embedded store or a client of a served one).

    ``tenant``, ``purpose``, ``basis``: the claim every record and entry is written under;
    ``subject``: the data subject of a conversation saved without a ``scope`` (a conversation's
    scope is its subject). ``keep_receipts``: how many receipts :attr:`receipts` keeps.

    A save checks the stored revision and writes the record and its new entries in one efface
    transaction; the check and the write are atomic within one process (one lock), not between
    processes writing one conversation at the same instant.
    """

    def __init__(
        self,
        store: Any,
        *,
        tenant: str,
        subject: str | None = None,
        purpose: str = "conversation",
        basis: str = "consent",
        key_prefix: str = "pydantic-ai-conversations/",
        keep_receipts: int = 1000,
    ) -> None:
        if not isinstance(key_prefix, str) or not key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string")
        self.store = store
        self.tenant = tenant
        self.subject = subject
        self.purpose = purpose
        self.basis = basis
        self.key_prefix = key_prefix
        self.receipts: collections.deque[Receipt] = receipt_log(keep_receipts)
        """Receipts of the deletes' forgets, oldest first: a delete makes one for the record
        and one for each entry it releases."""
        self.last_deletion: list[Receipt] = []
        """The receipts of the newest delete (the record's first)."""
        self._lock = threading.Lock()

    @property
    def last_receipt(self) -> Receipt | None:
        """The newest receipt (None before the first delete)."""
        return self.receipts[-1] if self.receipts else None

    # -- keys ----------------------------------------------------------------------------------
    def _record_key(self, conversation_id: str) -> str:
        return f"{self.key_prefix}r/{quote(conversation_id, safe='')}"

    def _entry_key(self, entry_id: str) -> str:
        return f"{self.key_prefix}e/{quote(entry_id, safe='')}"

    def _subject_of(self, record: ConversationRecord) -> str:
        subject = record.scope if record.scope else self.subject
        if not subject:
            raise InvalidInput("a conversation needs a data subject: save it with scope=, or give the store subject=")
        return subject

    def _get(self, key: str) -> Any:
        try:
            return self.store.read(key, tenant=self.tenant, purpose=self.purpose)
        except UnknownPurpose:  # nothing stored in this tenant yet
            return None

    # -- the five primitives -------------------------------------------------------------------
    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        mem = await _in_thread(self._get, self._record_key(conversation_id))
        return None if mem is None else _RECORD.validate_json(mem.text)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        mems = await _in_thread(
            scan_all, self.store, tenant=self.tenant, purpose=self.purpose, prefix=self.key_prefix + "r/"
        )
        records = [_RECORD.validate_json(m.text) for m in mems]
        records = [r for r in records if scope is None or r.scope == scope]
        records.sort(key=lambda r: r.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await _in_thread(self._put_record, record, list(new_entries), expected_revision)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await _in_thread(self._drop_record, conversation_id, expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        mem = await _in_thread(self._get, self._entry_key(entry_id))
        if mem is None:
            raise KeyError(entry_id)  # a LookupError, as the base class expects of a released entry
        return _ENTRY.validate_json(mem.text)

    async def delete(self, conversation_id: str, *, scope: str | None = None) -> None:
        """Delete a conversation: its record is forgotten, and so is every entry no other
        conversation's history (or branch) reaches; the receipts are :attr:`last_deletion`."""
        self.last_deletion = []
        await super().delete(conversation_id, scope=scope)

    # -- the store's side ----------------------------------------------------------------------
    def _put_record(self, record: ConversationRecord, entries: list[ConversationEntry], expected: str | None) -> None:
        with self._lock:
            mem = self._get(self._record_key(record.conversation_id))
            stored = None if mem is None else _RECORD.validate_json(mem.text)
            if (stored.revision if stored is not None else None) != expected:
                raise ConversationConflict(record.conversation_id)
            # The head must be stored or come with this save: a concurrent delete may have
            # released the entry a fork points at.
            head = record.head_id
            if head is not None and head not in {e.id for e in entries} and self._get(self._entry_key(head)) is None:
                raise ConversationConflict(record.conversation_id)
            items = [{"key": self._entry_key(e.id), "text": _ENTRY.dump_json(e).decode()} for e in entries]
            items.append({"key": self._record_key(record.conversation_id), "text": _RECORD.dump_json(record).decode()})
            self.store.write_many(
                items, tenant=self.tenant, subject=self._subject_of(record), purpose=self.purpose, basis=self.basis
            )

    def _drop_record(self, conversation_id: str, expected: str) -> None:
        with self._lock:
            key = self._record_key(conversation_id)
            mem = self._get(key)
            if mem is None or _RECORD.validate_json(mem.text).revision != expected:
                raise ConversationConflict(conversation_id)
            done = [self.store.forget(tenant=self.tenant, key=key)]
            # The entries every remaining conversation still reaches (its history and branches)
            # stay; the rest were this conversation's alone.
            records = [
                _RECORD.validate_json(m.text)
                for m in scan_all(self.store, tenant=self.tenant, purpose=self.purpose, prefix=self.key_prefix + "r/")
            ]
            entries = scan_all(self.store, tenant=self.tenant, purpose=self.purpose, prefix=self.key_prefix + "e/")
            parent = {}
            for m in entries:
                e = _ENTRY.validate_json(m.text)
                parent[e.id] = e.parent_id
            reachable: set[str] = set()
            for r in records:
                for entry_id in [r.head_id, *r.branches]:
                    while entry_id is not None and entry_id not in reachable and entry_id in parent:
                        reachable.add(entry_id)
                        entry_id = parent[entry_id]
            for entry_id in parent:
                if entry_id not in reachable:
                    done.append(self.store.forget(tenant=self.tenant, key=self._entry_key(entry_id)))
            self.receipts.extend(done)
            self.last_deletion.extend(done)


async def _in_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(func, *args, **kwargs)
