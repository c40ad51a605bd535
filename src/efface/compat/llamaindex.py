"""A LlamaIndex vector store on efface: ``BasePydanticVectorStore`` whose deletes are forgets
with receipts.

``EffaceVectorStore(store=store, tenant="acme", subject="alice")`` implements
``llama_index.core.vector_stores.types.BasePydanticVectorStore`` (``add``, ``delete``,
``delete_nodes``, ``get_nodes``, ``clear``, ``query``; their async forms run them in a worker
thread), so it goes into a ``VectorStoreIndex`` (``StorageContext.from_defaults(
vector_store=...)``) and a ``VectorMemoryBlock``.

How LlamaIndex's names map to efface (see docs/llamaindex.md):

* **Scope.** Every node is a record of ``tenant`` under ``purpose``; its **subject** is the
  value of the node's metadata key ``subject_key`` when set (e.g. ``"session_id"``, what a
  ``VectorMemoryBlock`` stamps on the messages it stores), else ``subject``.
* **Keys.** A node is ``key_prefix + quote(ref_doc_id) + "/" + quote(node_id)`` (a node with
  no source document is under ``%-``, which ``quote`` never writes), so ``delete(ref_doc_id)``
  is one forget by prefix.
* **Records.** The text is the node's content (what recall searches and what a forget erases);
  the metadata is LlamaIndex's own ``node_to_metadata_dict`` of the node (its metadata, its
  relationships, without the text), from which a node is rebuilt as it was added.
* **Embeddings.** efface embeds with its own embedder, for records and queries alike
  (``is_embedding_query`` is False, so a retriever sends the query text without embedding it):
  a node's ``embedding`` is not stored, and a query is answered by efface's hybrid recall
  (meaning and words) of ``query_str``.
* **Deletes** (``delete``, ``delete_nodes``, ``clear``) are forgets; LlamaIndex's calls return
  None, so the receipts are kept in :attr:`EffaceVectorStore.receipts` (newest last;
  :attr:`last_receipt`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, unquote

from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.simple import build_metadata_filter_fn
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from pydantic import PrivateAttr

from ..errors import InvalidInput, UnknownPurpose
from ..model import Memory, Receipt
from ._listing import receipt_log, scan_all

__all__ = ["EffaceVectorStore"]

_META = "llamaindex"
_NO_DOC = "%-"
"""The ref-doc part of the key of a node with no source document (``quote`` never writes it)."""
_RECALL_K = 1000
"""Hits asked of recall (its maximum) when a query filters: the filter runs on what comes back."""


class EffaceVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store over an efface store (anything with ``efface.Store``'s methods:
    an embedded store or a client of a served one).

    ``tenant``, ``purpose``, ``basis``: the claim every node is written under; ``subject``: the
    data subject of a node whose metadata has no ``subject_key`` value. ``keep_receipts``: how
    many receipts :attr:`receipts` keeps.
    """

    stores_text: bool = True
    is_embedding_query: bool = False
    flat_metadata: bool = False

    tenant: str
    subject: str | None = None
    subject_key: str | None = None
    purpose: str = "memory"
    basis: str = "consent"
    key_prefix: str = "llamaindex/"

    _store: Any = PrivateAttr()
    _receipts: collections.deque = PrivateAttr()
    _lock: Any = PrivateAttr()

    def __init__(self, store: Any, *, keep_receipts: int = 1000, **fields: Any) -> None:
        super().__init__(**fields)
        if not self.key_prefix:
            raise InvalidInput("key_prefix must be a non-empty string, e.g. 'llamaindex/'")
        self._store = store
        self._receipts = receipt_log(keep_receipts)
        self._lock = threading.Lock()

    @classmethod
    def class_name(cls) -> str:
        return "EffaceVectorStore"

    @property
    def client(self) -> Any:
        """The efface store."""
        return self._store

    # -- what LlamaIndex lacks: the receipts --------------------------------------------------
    @property
    def receipts(self) -> collections.deque[Receipt]:
        """Receipts of this store's deletes and clears, oldest first."""
        return self._receipts

    @property
    def last_receipt(self) -> Receipt | None:
        """The receipt of the newest delete or clear (None before the first)."""
        return self._receipts[-1] if self._receipts else None

    def _keep(self, receipt: Receipt) -> Receipt:
        self._receipts.append(receipt)
        return receipt

    # -- keys and records ----------------------------------------------------------------------
    def _key(self, node: BaseNode) -> str:
        ref = node.ref_doc_id
        return f"{self.key_prefix}{quote(ref, safe='') if ref else _NO_DOC}/{quote(node.node_id, safe='')}"

    def _node_id(self, key: str) -> str:
        return unquote(key.rsplit("/", 1)[1])

    def _subject(self, node: BaseNode) -> str:
        value = node.metadata.get(self.subject_key) if self.subject_key else None
        subject = value if isinstance(value, str) and value else self.subject
        if subject is None:
            where = f"or the node a {self.subject_key!r} metadata value" if self.subject_key else "(or subject_key=)"
            raise InvalidInput(f"a node needs a data subject: give the store subject= {where}")
        return subject

    def _all(self) -> list[Memory]:
        return scan_all(self._store, tenant=self.tenant, purpose=self.purpose, prefix=self.key_prefix)

    def _node(self, mem: Memory) -> BaseNode:
        node = metadata_dict_to_node(dict(mem.metadata[_META]), text=mem.text)
        return node

    def _selected(
        self, mems: list[Memory], node_ids: Sequence[str] | None, filters: MetadataFilters | None
    ) -> list[Memory]:
        by_key = {m.key: m for m in mems}
        keep = build_metadata_filter_fn(lambda key: by_key[key].metadata[_META], filters)
        wanted = None if node_ids is None else set(node_ids)
        return [m for m in mems if (wanted is None or self._node_id(m.key) in wanted) and keep(m.key)]

    # -- BasePydanticVectorStore ---------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Write the nodes (one efface transaction per subject among them); a node id already
        stored is replaced, and one given twice is written as its last. A node whose id is
        stored under another source document replaces it: the old record is forgotten (its
        receipt in :attr:`receipts`)."""
        if not nodes:
            return []
        groups: dict[str, list[dict[str, Any]]] = {}
        keys = {}
        latest = {node.node_id: node for node in nodes}  # a node id given twice: the last one wins
        for node in latest.values():
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            if not isinstance(text, str) or not text.strip():
                raise InvalidInput("a node needs text: efface stores, recalls and erases text")
            meta = node_to_metadata_dict(node, remove_text=True, flat_metadata=self.flat_metadata)
            key = self._key(node)
            keys[node.node_id] = key
            groups.setdefault(self._subject(node), []).append({"key": key, "text": text, "metadata": {_META: meta}})
        with self._lock:
            for mem in self._all():
                node_id = self._node_id(mem.key)
                if node_id in keys and keys[node_id] != mem.key:
                    self._keep(self._store.forget(tenant=self.tenant, key=mem.key))
            for subject, records in groups.items():
                self._store.write_many(
                    records, tenant=self.tenant, subject=subject, purpose=self.purpose, basis=self.basis
                )
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Forget every node of the source document (one forget by key prefix); the receipt
        is :attr:`last_receipt`."""
        if not isinstance(ref_doc_id, str) or not ref_doc_id:
            raise InvalidInput("ref_doc_id must be a non-empty string")
        with self._lock:
            prefix = f"{self.key_prefix}{quote(ref_doc_id, safe='')}/"
            self._keep(self._store.forget(tenant=self.tenant, prefix=prefix))

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Forget the nodes with these ids that pass the filters (neither: every node), one
        forget (and receipt) per node."""
        with self._lock:
            for mem in self._selected(self._all(), node_ids, filters):
                self._keep(self._store.forget(tenant=self.tenant, key=mem.key))

    def clear(self) -> None:
        """Forget every node of this store (one forget by key prefix); the receipt is
        :attr:`last_receipt`."""
        with self._lock:
            self._keep(self._store.forget(tenant=self.tenant, prefix=self.key_prefix))

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The stored nodes with these ids that pass the filters (neither: every node), as added."""
        return [self._node(m) for m in self._selected(self._all(), node_ids, filters)]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """efface's hybrid recall of ``query.query_str``, restricted to this store's nodes,
        ``node_ids``, ``doc_ids`` (empty lists restrict nothing) and ``filters``; the best
        ``similarity_top_k``. ``mode``,
        ``alpha`` and the query embedding are not used (efface ranks by meaning and words with
        its own embedder). ``similarities`` are efface's fused scores."""
        if not query.query_str or not query.query_str.strip():
            raise InvalidInput("efface recalls by the query's text: give query_str (a retriever does)")
        top_k = query.similarity_top_k
        try:
            hits = self._store.recall(query.query_str, tenant=self.tenant, purpose=self.purpose, k=_RECALL_K)
        except UnknownPurpose:  # nothing was ever written for this purpose in the tenant
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        metas = {h.key: h.metadata.get(_META) for h in hits if h.key.startswith(self.key_prefix)}
        keep = build_metadata_filter_fn(lambda key: metas[key], query.filters)
        # An empty list restricts nothing: a VectorStoreIndex over a store that keeps the text
        # sends node_ids=[] (its index struct lists no nodes), as vector store integrations read it.
        node_ids = set(query.node_ids) if query.node_ids else None
        doc_ids = set(query.doc_ids) if query.doc_ids else None
        nodes, scores, ids = [], [], []
        for h in hits:
            meta = metas.get(h.key)
            if meta is None or not keep(h.key):
                continue
            node_id = self._node_id(h.key)
            if node_ids is not None and node_id not in node_ids:
                continue
            if doc_ids is not None and meta.get("ref_doc_id") not in doc_ids:
                continue
            nodes.append(metadata_dict_to_node(dict(meta), text=h.text))
            scores.append(h.score)
            ids.append(node_id)
            if len(nodes) == top_k:
                break
        return VectorStoreQueryResult(nodes=nodes, similarities=scores, ids=ids)
