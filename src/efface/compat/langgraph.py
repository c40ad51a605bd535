"""A LangGraph store on efface: ``BaseStore`` whose delete is a forget with a receipt.

``EffaceStore(store, tenant="acme")`` implements ``langgraph.store.base.BaseStore``
(``batch``/``abatch`` over ``GetOp``, ``PutOp``, ``SearchOp``, ``ListNamespacesOp``).

How LangGraph's names map to efface (see docs/langgraph.md):

* **Scope.** ``template`` names, position by position, which namespace labels are the efface
  ``tenant``, ``subject`` and ``purpose`` (``"*"``: a free label). A role the template does not
  place (or a namespace too short to hold it) comes from the constructor default. The default
  template ``("subject",)`` makes the first label the data subject; tenant and purpose come
  from the constructor. Listing and searching never span tenants or purposes: their prefix
  must fix the tenant and purpose when the template places them.
* **Keys.** An item is the efface record ``key_prefix + ".".join(namespace) + ".." + key``.
  LangGraph forbids ``.`` and empty labels, so the first ``..`` ends the namespace: no two
  (namespace, key) pairs share a record, and a namespace prefix is a key prefix.
* **Values** are stored as their JSON text (what recall searches and what erasure erases);
  ``metadata`` holds only the creation time and the item's TTL.
* **Delete** is ``forget(key=...)``: LangGraph's ``delete`` returns None, so the receipt is
  kept in :attr:`EffaceStore.receipts` (newest last, also :attr:`last_receipt`);
  :meth:`forget_key`, :meth:`forget_namespace` and :meth:`forget_subject` return it.
* **TTL** (minutes in LangGraph) is the claim's TTL in seconds: expiry is an efface erasure
  with its own receipt, and an expired item is invisible at once (as ``omit_expired=True``).
  A refreshing read (``refresh_ttl``, on by default) restates the claim with a fresh TTL.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import math
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from .. import validate
from ..errors import InvalidInput, UnknownPurpose, typed_calls
from ..model import Memory, Receipt
from ._listing import receipt_log, scan_all

__all__ = ["EffaceStore"]

ROLES = ("tenant", "subject", "purpose")
_META = "langgraph"
_RECALL_K = 1000
"""A query search ranks the tenant's best ``_RECALL_K`` recall hits, then keeps those in the
namespace prefix that pass the filter."""


@typed_calls
class EffaceStore(BaseStore):
    """A LangGraph ``BaseStore`` over an efface store (anything with ``efface.Store``'s methods).

    ``tenant``, ``subject``, ``purpose``: defaults for roles the namespace does not carry.
    ``template``: which namespace positions are ``"tenant"``, ``"subject"``, ``"purpose"``
    (``"*"`` for a free label). ``basis``: the lawful basis of every claim written.
    ``ttl_config``: LangGraph's ``TTLConfig`` (``default_ttl`` in minutes,
    ``refresh_on_read``); efface's compactor sweeps, so ``sweep_interval_minutes`` is unused.
    ``keep_receipts``: how many receipts :attr:`receipts` keeps.
    """

    supports_ttl = True

    def __init__(
        self,
        store: Any,
        *,
        tenant: str | None = None,
        subject: str | None = None,
        purpose: str | None = "memory",
        template: Sequence[str] = ("subject",),
        basis: str = "consent",
        key_prefix: str = "langgraph/",
        ttl_config: TTLConfig | None = None,
        keep_receipts: int = 1000,
    ) -> None:
        template = tuple(template)
        for role in template:
            if role not in (*ROLES, "*"):
                raise InvalidInput("template entries must be 'tenant', 'subject', 'purpose' or '*'")
        for role in ROLES:
            if template.count(role) > 1:
                raise InvalidInput(f"template names the {role} at most once")
        if not isinstance(key_prefix, str) or not key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string, e.g. 'langgraph/'")
        self.store = store
        self.defaults = {"tenant": tenant, "subject": subject, "purpose": purpose}
        self.template = template
        self.basis = basis
        self.key_prefix = key_prefix
        self.ttl_config = ttl_config
        self.receipts: collections.deque[Receipt] = receipt_log(keep_receipts)
        """Receipts of this store's deletes, forgets and TTL sweeps, oldest first."""
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._last_ns = 0

    # -- what LangGraph lacks: forgets with receipts -----------------------------------------
    @property
    def last_receipt(self) -> Receipt | None:
        """The receipt of the newest delete or forget (None before the first)."""
        return self.receipts[-1] if self.receipts else None

    def forget_key(self, namespace: tuple[str, ...], key: str) -> Receipt:
        """Forget one item (what ``delete`` does) and return the receipt."""
        _plain_arguments(GetOp(namespace, str(key)))
        validate_op_namespace(GetOp(tuple(namespace), str(key)))
        scope = self._scope(tuple(namespace))
        return self._keep(self.store.forget(tenant=scope["tenant"], key=self._key(tuple(namespace), str(key))))

    def forget_namespace(self, prefix: tuple[str, ...]) -> Receipt:
        """Forget every item whose namespace starts with ``prefix`` (literal labels, no
        wildcards), whoever the subject: the namespace delete LangGraph has no call for."""
        _plain_arguments(GetOp(prefix, ""))  # a str would forget its characters' namespace: nothing
        prefix = tuple(prefix)
        if not prefix or "*" in prefix:
            raise InvalidInput("forget_namespace needs a prefix of one or more literal labels (no '*')")
        validate_op_namespace(GetOp(prefix, ""))
        tenant = self._fixed(prefix, "tenant", required=True)
        assert tenant is not None
        return self._keep(self.store.forget(tenant=tenant, prefix=self._prefix(prefix)))

    def forget_subject(self, subject: str, *, tenant: str | None = None) -> Receipt:
        """Forget everything of ``subject`` in the tenant: every namespace, and every record
        of that subject outside this LangGraph store too (efface's forget is per subject)."""
        tenant = tenant if tenant is not None else self.defaults["tenant"]
        if tenant is None:
            raise InvalidInput("name the tenant: this store has no default tenant")
        return self._keep(self.store.forget(tenant=tenant, subject=subject))

    def sweep_ttl(self) -> int:
        """Erase every item whose TTL has passed now; returns how many expiry receipts it
        made (efface's compactor also does this on its own)."""
        got = self.store.sweep()
        for r in got:
            self._keep(r)
        return len(got)

    def _keep(self, receipt: Receipt) -> Receipt:
        self.receipts.append(receipt)
        return receipt

    # -- BaseStore ---------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` as InMemoryStore does: every read sees the state before the batch;
        then the puts and deletes, one per (namespace, key), the last one winning."""
        ops = list(ops)
        for op in ops:
            _plain_arguments(op)
            validate_op_namespace(op)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), str(op.key))] = op
                results.append(None)
            else:
                raise InvalidInput(f"unknown LangGraph operation type: {type(op).__name__}")
        for op in puts.values():
            self._put(op)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)

    # -- scope and keys ----------------------------------------------------------------------
    def _scope(self, namespace: tuple[str, ...]) -> dict[str, str]:
        """Tenant, subject and purpose of an item's namespace: the label at the role's
        template position, or (for a namespace too short to reach it) the default."""
        out = {}
        for role in ROLES:
            i = self.template.index(role) if role in self.template else None
            value = namespace[i] if i is not None and i < len(namespace) else self.defaults[role]
            if value is None:
                where = f"at position {i} of its namespace" if i is not None else "in its template"
                raise InvalidInput(f"an item needs a {role}: put one {where}, or give the store a default {role}")
            out[role] = value
        return out

    def _fixed(self, prefix: tuple[str, ...], role: str, *, required: bool) -> str | None:
        """The role's value shared by every namespace under ``prefix``, or None if they may
        differ. Listings and searches never span tenants or purposes (``required``)."""
        if role not in self.template:
            value = self.defaults[role]
        else:
            i = self.template.index(role)
            value = prefix[i] if i < len(prefix) else None
        if value is None and required:
            raise InvalidInput(
                f"a listing or search must name one {role}: start the prefix with the template's labels "
                f"up to the {role}, or give the store a default {role} outside the template"
            )
        return value

    def _key(self, namespace: tuple[str, ...], key: str) -> str:
        return self.key_prefix + ".".join(namespace) + ".." + key

    def _prefix(self, prefix: tuple[str, ...]) -> str:
        return self.key_prefix + "".join(label + "." for label in prefix)

    def _decode(self, ekey: str) -> tuple[tuple[str, ...], str]:
        ns, _, key = ekey[len(self.key_prefix) :].partition("..")
        return tuple(ns.split(".")), key

    # -- ops -----------------------------------------------------------------------------------
    def _get(self, op: GetOp) -> Item | None:
        namespace, key = tuple(op.namespace), str(op.key)
        scope = self._scope(namespace)
        try:
            mem = self.store.read(self._key(namespace, key), tenant=scope["tenant"], purpose=scope["purpose"])
        except UnknownPurpose:
            return None
        if mem is None:
            return None
        if op.refresh_ttl:
            self._refresh(mem, scope)
        return self._item(mem, Item)

    def _put(self, op: PutOp) -> None:
        namespace, key = tuple(op.namespace), str(op.key)
        scope = self._scope(namespace)
        ekey = self._key(namespace, key)
        if op.value is None:
            self._keep(self.store.forget(tenant=scope["tenant"], key=ekey))
            return
        if not isinstance(op.value, dict):
            raise InvalidInput("a LangGraph value must be a dict of JSON values")
        # JSON would make {1: "x"} {"1": "x"}, and json.dumps raise RecursionError 50,000 levels down
        validate.json_tree(op.value, "a LangGraph value")
        try:
            text = json.dumps(op.value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidInput("a LangGraph value must hold only JSON values") from None
        ttl = op.ttl
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise InvalidInput("ttl is minutes: a positive number, or None for no expiry")
        created = None
        try:
            old = self.store.read(ekey, tenant=scope["tenant"], purpose=scope["purpose"])
        except UnknownPurpose:
            old = None
        if old is not None:
            created = old.metadata.get(_META, {}).get("created")
        meta = {_META: {"created": created if created is not None else self._now_ns(), "ttl": ttl}}
        self.store.write(
            ekey,
            text,
            tenant=scope["tenant"],
            subject=scope["subject"],
            purpose=scope["purpose"],
            basis=self.basis,
            ttl=None if ttl is None else ttl * 60.0,
            metadata=meta,
        )

    def _now_ns(self) -> int:
        # Strictly increasing within this process: the order of first puts, as InMemoryStore
        # keeps it, must survive two puts within one clock tick.
        with self._lock:
            self._last_ns = max(time.time_ns(), self._last_ns + 1)
            return self._last_ns

    def _refresh(self, mem: Memory, scope: dict[str, str]) -> None:
        ttl = mem.metadata.get(_META, {}).get("ttl")
        if ttl is not None:
            # Restating the same claim replaces its expiry (efface's retain).
            self.store.retain(
                mem.key,
                tenant=scope["tenant"],
                subject=scope["subject"],
                purpose=scope["purpose"],
                basis=self.basis,
                ttl=ttl * 60.0,
            )

    def _item(self, mem: Memory, cls: type, score: float | None = None) -> Any:
        namespace, key = self._decode(mem.key)
        created_ns = mem.metadata.get(_META, {}).get("created")
        created = created_ns / 1e9 if created_ns is not None else mem.updated_at
        kw = {
            "value": json.loads(mem.text),
            "key": key,
            "namespace": namespace,
            "created_at": datetime.fromtimestamp(created, tz=UTC),
            "updated_at": datetime.fromtimestamp(mem.updated_at, tz=UTC),
        }
        if cls is SearchItem:
            return SearchItem(score=score, **kw)
        return Item(**kw)

    def _listing(self, prefix: tuple[str, ...]) -> list[Memory]:
        """Every live item under a literal namespace prefix."""
        tenant = self._fixed(prefix, "tenant", required=True)
        purpose = self._fixed(prefix, "purpose", required=True)
        subject = self._fixed(prefix, "subject", required=False)
        return scan_all(self.store, tenant=tenant, purpose=purpose, prefix=self._prefix(prefix), subject=subject)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        limit, offset = op.limit, op.offset
        if limit < 0 or offset < 0:
            raise InvalidInput("limit and offset must not be negative")
        if op.query:
            found = self._query(prefix, op.query)
        else:
            mems = self._listing(prefix)
            # InMemoryStore's order: namespaces in the order they were first written, items
            # in the order they were first put (an overwrite keeps its place). Here a
            # namespace's place is its oldest live item.
            created = {m.key: m.metadata.get(_META, {}).get("created") or 0 for m in mems}
            first: dict[tuple[str, ...], int] = {}
            for m in mems:
                ns = self._decode(m.key)[0]
                first[ns] = min(first.get(ns, created[m.key]), created[m.key])
            mems.sort(key=lambda m: (first[self._decode(m.key)[0]], created[m.key], m.key))
            found = [(m, None) for m in mems]
        kept = [(m, s) for m, s in found if _matches(json.loads(m.text), op.filter)]
        page = kept[offset : offset + limit]
        if op.refresh_ttl:
            for m, _ in page:
                self._refresh(m, self._scope(self._decode(m.key)[0]))
        return [self._item(m, SearchItem, s) for m, s in page]

    def _query(self, prefix: tuple[str, ...], query: str) -> list[tuple[Memory, float | None]]:
        tenant = self._fixed(prefix, "tenant", required=True)
        purpose = self._fixed(prefix, "purpose", required=True)
        subject = self._fixed(prefix, "subject", required=False)
        try:
            hits = self.store.recall(query, tenant=tenant, purpose=purpose, subject=subject, k=_RECALL_K)
        except UnknownPurpose:
            return []
        start = self._prefix(prefix)
        out = []
        for h in hits:
            if not h.key.startswith(start):
                continue
            # Hits carry no update time: read the record (it is live: recall just saw it).
            mem = self.store.read(h.key, tenant=tenant, purpose=purpose)
            if mem is not None:
                out.append((mem, h.score))
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        literal: tuple[str, ...] = ()
        for c in conditions:
            if c.match_type == "prefix":
                literal = tuple(itertools.takewhile(lambda label: label != "*", c.path))
                break
        spaces = {self._decode(m.key)[0] for m in self._listing(literal)}
        spaces = {ns for ns in spaces if all(_does_match(c, ns) for c in conditions)}
        if op.max_depth is not None:
            spaces = {ns[: op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset : op.offset + op.limit]


def _plain_arguments(op: Op) -> None:
    """Refuse what LangGraph's own checks let through and this store would misread: a str
    namespace (its characters taken as labels: ``"alice"`` became subject ``"a"``, out of
    reach of ``forget_subject("alice")``), a filter that is not a dict (a raw AttributeError),
    a negative limit, offset or max_depth (slicing from the end)."""
    spaces = [op.namespace] if isinstance(op, GetOp | PutOp) else []
    if isinstance(op, SearchOp):
        spaces.append(op.namespace_prefix)
    if isinstance(op, ListNamespacesOp):
        spaces += [c.path for c in op.match_conditions or ()]
    if any(isinstance(ns, str) for ns in spaces):
        raise InvalidInput(
            "a namespace (or a prefix or suffix of one) is a tuple of labels, such as ('alice', 'notes'), not a str"
        )
    if isinstance(op, SearchOp) and op.filter is not None and not isinstance(op.filter, dict):
        raise InvalidInput("filter must be a dict (field -> value or {'$op': value})")
    if isinstance(op, ListNamespacesOp | SearchOp):
        numbers = [op.limit, op.offset]
        if isinstance(op, ListNamespacesOp) and op.max_depth is not None:
            numbers.append(op.max_depth)
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in numbers):
            raise InvalidInput("limit, offset and max_depth must be whole numbers, 0 or more")


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInput("a namespace match condition is 'prefix' or 'suffix'")
    return all(p == "*" or n == p for n, p in pairs)


def _matches(value: dict, filter: dict[str, Any] | None) -> bool:
    """LangGraph's filter semantics (JSONB-like, as InMemoryStore and PostgresStore apply
    them): equality per key, nested dicts matched key by key, ``$eq``/``$ne``/``$gt``/
    ``$gte``/``$lt``/``$lte`` operators."""
    return not filter or all(_compare(value.get(k), f) for k, f in filter.items())


def _compare(value: Any, f: Any) -> bool:
    if isinstance(f, dict):
        if any(k.startswith("$") for k in f):
            return all(_operator(value, k, v) for k, v in f.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in f.items())
    if isinstance(f, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(f)
            and all(_compare(a, b) for a, b in zip(value, f, strict=True))
        )
    return bool(value == f)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(arg)
        except (TypeError, ValueError):
            return False
        if math.isnan(a) or math.isnan(b):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise InvalidInput(f"unsupported filter operator {op}: use $eq, $ne, $gt, $gte, $lt or $lte")
