"""The LlamaIndex vector store on efface: differential against LlamaIndex's own
SimpleVectorStore, a VectorStoreIndex and a VectorMemoryBlock on it, and deletes that are real
erasures.

The differential test runs the same random sequences of ``add`` (new and re-added node ids,
several source documents, nodes with none), ``delete(ref_doc_id)``, ``delete_nodes`` (ids,
metadata filters, both) and ``clear`` on ``SimpleVectorStore`` and ``EffaceVectorStore`` and,
after every operation, compares which nodes each holds, their source documents, and which of
them each filter selects (SimpleVectorStore keeps no text, so it answers ``get_nodes`` with
nothing: the reference is its own ``data`` read through LlamaIndex's ``build_metadata_filter_fn``,
the function its ``query`` and ``delete_nodes`` filter with). A query is not compared: SimpleVectorStore ranks by
the embedding LlamaIndex computed, efface recalls by meaning and words with its own embedder.

Runs on the embedded store (SQLite and in-memory origins) and through a real ``efface serve``
with the client (``HTTP_CONTRACT``). Embeddings come from LlamaIndex's own ``MockEmbedding``.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import efface

from peer_stores import require_framework

require_framework("llama_index.core", "llamaindex")

from llama_index.core import Document, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.memory import Memory, VectorMemoryBlock  # noqa: E402
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode  # noqa: E402
from llama_index.core.vector_stores import SimpleVectorStore  # noqa: E402
from llama_index.core.vector_stores.simple import build_metadata_filter_fn  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from efface.compat.llamaindex import EffaceVectorStore  # noqa: E402

HTTP_CONTRACT = True

NODE_IDS = st.sampled_from(["n1", "n2", "n3", "n/4", "n%2F4"])
DOCS = st.sampled_from(["d1", "d/2", None])
NODES = st.lists(
    st.tuples(NODE_IDS, DOCS, st.sampled_from(["red", "blue"]), st.integers(0, 3), st.sampled_from(["tea", "key"])),
    min_size=1,
    max_size=4,
)
FILTERS = st.one_of(
    st.none(),
    st.builds(
        lambda t: MetadataFilters(filters=[MetadataFilter(key="tag", value=t)]), st.sampled_from(["red", "blue"])
    ),
    st.builds(
        lambda n, op: MetadataFilters(filters=[MetadataFilter(key="n", value=n, operator=op)]),
        st.integers(0, 3),
        st.sampled_from([FilterOperator.GTE, FilterOperator.LT, FilterOperator.NE]),
    ),
    st.just(
        MetadataFilters(
            filters=[MetadataFilter(key="tag", value="red"), MetadataFilter(key="n", value=2)],
            condition=FilterCondition.OR,
        )
    ),
)
OPS = st.one_of(
    st.tuples(st.just("add"), NODES),
    st.tuples(st.just("add"), NODES),
    st.tuples(st.just("delete"), st.sampled_from(["d1", "d/2", "nope"])),
    st.tuples(st.just("delete_nodes"), st.one_of(st.none(), st.lists(NODE_IDS, max_size=2)), FILTERS),
    st.tuples(st.just("clear")),
    st.tuples(st.just("get"), st.one_of(st.none(), st.lists(NODE_IDS, max_size=3)), FILTERS),
)


def _node(node_id: str, doc: str | None, tag: str, n: int, word: str) -> TextNode:
    rel = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)} if doc else {}
    return TextNode(
        id_=node_id,
        text=f"{word} note {n} in {tag}",
        metadata={"tag": tag, "n": n},
        relationships=rel,
        embedding=[float(n), 1.0],
    )


def _ref_state(ref: SimpleVectorStore, node_ids=None, filters=None) -> dict:
    keep = build_metadata_filter_fn(lambda i: ref.data.metadata_dict[i], filters)
    # SimpleVectorStore records a node with no source document under the string "None".
    return {
        i: {"None": None}.get(ref.data.text_id_to_ref_doc_id.get(i), ref.data.text_id_to_ref_doc_id.get(i))
        for i in ref.data.embedding_dict
        if (node_ids is None or i in node_ids) and keep(i)
    }


def _our_state(ours: EffaceVectorStore, node_ids=None, filters=None) -> dict:
    return {n.node_id: n.ref_doc_id for n in ours.get_nodes(node_ids=node_ids, filters=filters)}


def _apply(ref: SimpleVectorStore, ours: EffaceVectorStore, op) -> None:
    kind = op[0]
    if kind == "add":
        nodes = [_node(*spec) for spec in op[1]]
        assert ours.add(nodes) == ref.add(nodes)
    elif kind == "delete":
        ref.delete(op[1])
        ours.delete(op[1])
    elif kind == "delete_nodes":
        ref.delete_nodes(node_ids=op[1], filters=op[2])
        before = len(_our_state(ours))
        n = len(ours.receipts)
        ours.delete_nodes(node_ids=op[1], filters=op[2])
        assert len(ours.receipts) - n == before - len(_our_state(ours))  # one receipt per node forgotten
    elif kind == "clear":
        ref.clear()
        ours.clear()
        assert ours.last_receipt is not None
    elif kind == "get":
        assert _our_state(ours, op[1], op[2]) == _ref_state(ref, op[1], op[2])
    assert _our_state(ours) == _ref_state(ref)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=15))
def test_same_nodes_as_llamaindex_simple_vector_store(store, ops):
    # The store lives across examples; each example's nodes go under a key prefix of their own.
    ours = EffaceVectorStore(store, tenant="acme", subject="alice", key_prefix=f"li-{uuid.uuid4().hex[:8]}/")
    ref = SimpleVectorStore()
    for op in ops:
        _apply(ref, ours, op)


@pytest.fixture
def vectors(store):
    return EffaceVectorStore(store, tenant="acme", subject="alice")


def test_nodes_come_back_as_added_and_queries_filter(vectors):
    assert isinstance(vectors, BasePydanticVectorStore) and vectors.stores_text and vectors.client is not None
    nodes = [_node("n1", "d1", "red", 1, "tea"), _node("n2", None, "blue", 2, "key")]
    vectors.add(nodes)
    (got,) = vectors.get_nodes(node_ids=["n1"])
    assert (got.node_id, got.text, got.metadata, got.ref_doc_id) == (
        "n1",
        "tea note 1 in red",
        {"tag": "red", "n": 1},
        "d1",
    )
    result = vectors.query(VectorStoreQuery(query_str="tea note", similarity_top_k=5))
    assert set(result.ids) == {"n1", "n2"} and result.ids[0] == "n1" and len(result.similarities) == 2
    blue = MetadataFilters(filters=[MetadataFilter(key="tag", value="blue")])
    assert vectors.query(VectorStoreQuery(query_str="tea note", similarity_top_k=5, filters=blue)).ids == ["n2"]
    assert vectors.query(VectorStoreQuery(query_str="note", doc_ids=["d1"], similarity_top_k=5)).ids == ["n1"]
    assert vectors.query(VectorStoreQuery(query_str="note", node_ids=["n2"], similarity_top_k=5)).ids == ["n2"]
    assert len(vectors.query(VectorStoreQuery(query_str="note", similarity_top_k=1)).ids) == 1
    with pytest.raises(efface.InvalidInput, match="query_str"):
        vectors.query(VectorStoreQuery(query_embedding=[1.0, 0.0]))
    with pytest.raises(efface.InvalidInput, match="text"):
        vectors.add([TextNode(id_="empty", text="")])


def test_vector_store_index_delete_ref_doc_reaches_erased(vectors, store):
    embed = MockEmbedding(embed_dim=8)
    docs = [
        Document(text="Alice keeps the spare key under the blue flowerpot.", id_="alice-notes"),
        Document(text="Bob waters the garden on Sundays.", id_="bob-notes"),
    ]
    index = VectorStoreIndex.from_documents(
        docs, storage_context=StorageContext.from_defaults(vector_store=vectors), embed_model=embed
    )
    hits = index.as_retriever(similarity_top_k=1).retrieve("where is the spare key?")
    assert "flowerpot" in hits[0].node.get_content() and hits[0].node.ref_doc_id == "alice-notes"
    index.delete_ref_doc("alice-notes", delete_from_docstore=True)
    receipt = vectors.last_receipt
    assert len(receipt.erased) == 1 and receipt.erased[0].startswith("llamaindex/alice-notes/")
    hits = index.as_retriever(similarity_top_k=5).retrieve("where is the spare key?")
    assert [h.node.ref_doc_id for h in hits] == ["bob-notes"]
    assert store.wait(receipt.handle, timeout=30).erased
    assert store.verify(receipt.handle).level == "erased"
    index.insert(Document(text="Carol likes oolong tea.", id_="carol-notes"))
    (carol,) = [n for n in vectors.get_nodes() if n.ref_doc_id == "carol-notes"]
    index.delete_nodes([carol.node_id])
    assert vectors.last_receipt.erased == (f"llamaindex/carol-notes/{carol.node_id}",)
    vectors.clear()
    assert vectors.get_nodes() == [] and vectors.last_receipt.erased


def test_vector_memory_block_keeps_each_session_as_its_subject(store):
    vectors = EffaceVectorStore(store, tenant="acme", subject_key="session_id")
    block = VectorMemoryBlock(vector_store=vectors, embed_model=MockEmbedding(embed_dim=8), similarity_top_k=2)
    memory = Memory.from_defaults(
        session_id="alice-chat",
        token_limit=60,
        chat_history_token_ratio=0.3,
        token_flush_size=10,
        tokenizer_fn=str.split,
        memory_blocks=[block],
    )

    async def chat():
        for text in [
            "My spare key is under the blue flowerpot by the door",
            "Noted, the spare key is under the blue flowerpot",
            "I also water the garden on Sundays in the morning",
            "Watering on Sundays, noted for the garden",
            "Where did I say the spare key was?",
        ]:
            role = "user" if text[0] in "MIW" else "assistant"
            await memory.aput(ChatMessage(role=role, content=text))
        return await memory.aget()

    messages = asyncio.run(chat())
    stored = vectors.get_nodes()
    assert stored and all(n.metadata["session_id"] == "alice-chat" for n in stored)
    assert all(c.subject == "alice-chat" for m in store.scan(tenant="acme", purpose="memory") for c in m.claims)
    assert "flowerpot" in messages[0].content  # the block retrieved the flushed turn from efface
    receipt = store.forget(tenant="acme", subject="alice-chat")
    assert len(receipt.erased) == len(stored) and vectors.get_nodes() == []
    with pytest.raises(efface.InvalidInput, match="subject"):
        vectors.add([TextNode(text="no session", metadata={})])
