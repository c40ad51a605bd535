"""The Google ADK memory service on efface: differential against ADK's own
InMemoryMemoryService, the ``efface://`` scheme through ADK's service registry (what ``adk
web --memory_service_uri`` calls), and deletes that are real erasures.

ADK ships no conformance suite for memory services, so the differential test is the contract:
the same random sequences of ``add_session_to_memory``, ``add_events_to_memory``,
``delete_memory`` and ``search_memory`` run on both, over real ADK ``Session`` and ``Event``
objects. After every operation each user's memory (every session's remembered events, with
id, content, author and timestamp) must be the same. Where the two differ on purpose:

* a search: InMemoryMemoryService ranks by shared words; efface recalls by meaning and words.
  Every memory efface returns must be a live memory of that user, as ADK would return it
  (``MemoryEntry`` fields equal), and when the user holds at most 10 memories every memory
  ADK finds must be among efface's;
* events whose content has no text (a function call alone): ADK keeps them, but no search
  can ever return them; efface does not write them. The comparison is over events with text;
* ``add_memory``: InMemoryMemoryService does not implement it (``NotImplementedError``).

Runs on the embedded store (SQLite and in-memory origins) and through a real ``efface serve``
with the client (``HTTP_CONTRACT``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import efface

from peer_stores import require_framework

require_framework("google.adk", "adk", venv="adk")

from google.adk.cli.service_registry import load_services_module  # noqa: E402
from google.adk.cli.utils.service_factory import create_memory_service_from_options  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.memory import InMemoryMemoryService  # noqa: E402
from google.adk.memory.base_memory_service import BaseMemoryService  # noqa: E402
from google.adk.memory.memory_entry import MemoryEntry  # noqa: E402
from google.adk.sessions import InMemorySessionService, Session  # noqa: E402
from google.genai import types  # noqa: E402

from efface.compat.adk import EffaceMemoryService  # noqa: E402
from served import Served  # noqa: E402

HTTP_CONTRACT = True

APPS = st.sampled_from(["app", "app", "app/2"])
USERS = st.sampled_from(["u1", "u1", "u 2"])
SESSIONS = st.sampled_from(["s1", "s1", "s/2"])
WORDS = ["tea", "green", "flowerpot", "Lisbon", "refund"]
TEXTS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
EVENT = st.one_of(
    st.tuples(st.sampled_from(["user", "model"]), TEXTS),
    st.tuples(st.sampled_from(["user", "model"]), TEXTS),
    st.tuples(st.just("call"), st.just("")),  # a function call: content without text
)
OPS = st.one_of(
    st.tuples(st.just("session"), APPS, USERS, SESSIONS, st.lists(EVENT, max_size=3)),
    st.tuples(st.just("session"), APPS, USERS, SESSIONS, st.lists(EVENT, max_size=3)),
    st.tuples(st.just("session"), APPS, USERS, SESSIONS, st.just([])),  # the same session again
    st.tuples(st.just("rewind"), APPS, USERS, SESSIONS),
    st.tuples(st.just("events"), APPS, USERS, st.one_of(st.none(), SESSIONS), st.lists(EVENT, max_size=2)),
    st.tuples(st.just("delete"), APPS, USERS, st.integers(0, 30)),
    st.tuples(st.just("delete"), APPS, USERS, st.integers(0, 30)),
    st.tuples(st.just("search"), APPS, USERS, TEXTS),
    st.tuples(st.just("search"), APPS, USERS, TEXTS),
    st.tuples(st.just("search"), APPS, USERS, st.sampled_from(["nothing matches", "TEA", ""])),
)
SESSION_1 = ("session", "app", "u1", "s1", [("user", "green tea"), ("model", "Lisbon"), ("call", "")])


class World:
    """The sessions and events a test makes, shared by both services."""

    def __init__(self, run: str):
        self.run = run
        self.sessions: dict[tuple, Session] = {}
        self.ids: list[str] = []
        self.clock = itertools.count(1_800_000_000)

    def user(self, user: str) -> str:
        return f"{user}-{self.run}"  # a new subject per example: the store lives across examples

    def event(self, kind: str, text: str) -> Event:
        if kind == "call":
            part = types.Part(function_call=types.FunctionCall(name="lookup", args={"q": 1}))
            content = types.Content(role="model", parts=[part])
        else:
            content = types.Content(role=kind, parts=[types.Part(text=text)])
        e = Event(author="user" if kind == "user" else "assistant", content=content, timestamp=float(next(self.clock)))
        self.ids.append(e.id)
        return e

    def session(self, app: str, user: str, sid: str) -> Session:
        key = (app, user, sid)
        if key not in self.sessions:
            self.sessions[key] = Session(id=sid, app_name=app, user_id=self.user(user), events=[])
        return self.sessions[key]


def _entry(m: MemoryEntry) -> tuple:
    return (
        m.id,
        json.dumps(m.content.model_dump(mode="json", exclude_none=True), sort_keys=True),
        m.author,
        m.timestamp,
    )


def _ref_live(ref: InMemoryMemoryService, app: str, user: str) -> dict[str, set]:
    out = {}
    for sid, events in ref._session_events.get((app, user), {}).items():
        rows = {(e.id, e.author, e.timestamp) for e in events if "".join(p.text or "" for p in e.content.parts).strip()}
        if rows:
            out[sid] = rows
    return out


def _our_live(ours: EffaceMemoryService, app: str, user: str) -> dict[str, set]:
    from urllib.parse import unquote

    scope = ours._scope(app, user)
    out: dict[str, set] = {}
    for m in ours._scan(ours._tenant(app), scope + "s/"):
        sid = unquote(m.key[len(scope) + 2 :].split("/")[0])
        meta = m.metadata["adk"]
        out.setdefault(sid, set()).add((meta["id"], meta["author"], meta["event_time"]))
    return out


async def _apply(ref: InMemoryMemoryService, ours: EffaceMemoryService, world: World, op) -> None:
    kind, app, user = op[0], op[1], world.user(op[2])
    if kind == "session":
        session = world.session(op[1], op[2], op[3])
        session.events.extend(world.event(k, t) for k, t in op[4])
        await ref.add_session_to_memory(session)
        await ours.add_session_to_memory(session)
    elif kind == "rewind":  # the session lost its newest event (ADK's rewind): added again
        session = world.session(op[1], op[2], op[3])
        if session.events:
            session.events.pop()
        await ref.add_session_to_memory(session)
        await ours.add_session_to_memory(session)
    elif kind == "events":
        events = [world.event(k, t) for k, t in op[4]]
        if world.ids and events:
            events.append(events[0])  # the same event twice in one delta is taken once
        await ref.add_events_to_memory(app_name=app, user_id=user, events=events, session_id=op[3])
        await ours.add_events_to_memory(app_name=app, user_id=user, events=events, session_id=op[3])
    elif kind == "delete":
        # Mostly one of this user's live memories; else any event id made so far (another
        # user's, a deleted one) or an id that never existed.
        mine = sorted(r[0] for rows in _ref_live(ref, app, user).values() for r in rows)
        if mine and op[3] < 20:
            memory_id = mine[op[3] % len(mine)]
        else:
            memory_id = world.ids[op[3] % len(world.ids)] if world.ids and op[3] < 28 else "no-such-id"
        live = any(memory_id in {r[0] for r in rows} for rows in _our_live(ours, app, user).values())
        before = len(ours.receipts)
        await ref.delete_memory(app_name=app, user_id=user, memory_id=memory_id)
        await ours.delete_memory(app_name=app, user_id=user, memory_id=memory_id)
        assert len(ours.receipts) == before + live
        if live:
            assert len(ours.last_receipt.erased) == 1
    elif kind == "search":
        got = (await ours.search_memory(app_name=app, user_id=user, query=op[3])).memories
        want = (await ref.search_memory(app_name=app, user_id=user, query=op[3])).memories
        assert len(got) <= 10
        everything = {e.id: e for evs in ref._session_events.get((app, user), {}).values() for e in evs}
        for m in got:
            e = everything[m.id]  # a live memory of this user (KeyError: efface served another's)
            ref_entry = MemoryEntry(id=e.id, content=e.content, author=e.author, timestamp=m.timestamp)
            assert _entry(m) == _entry(ref_entry)
        total = sum(len(rows) for rows in _ref_live(ref, app, user).values())
        if total <= 10 and op[3].strip():
            assert {m.id for m in want} <= {m.id for m in got}
            assert {_entry(m) for m in want} <= {_entry(m) for m in got}
    for a, u in itertools.product(["app", "app/2"], ["u1", "u 2"]):
        assert _our_live(ours, a, world.user(u)) == _ref_live(ref, a, world.user(u))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=15))
# A deleted memory stays out when its session is added again, and one that left the session goes.
@example(ops=[SESSION_1, ("delete", "app", "u1", 0), ("session", "app", "u1", "s1", [])])
@example(ops=[SESSION_1, ("session", "app", "u1", "s1", [("user", "refund")]), ("rewind", "app", "u1", "s1")])
def test_same_memories_as_adk_in_memory_memory_service(store, ops):
    world = World(uuid.uuid4().hex[:8])
    ref, ours = InMemoryMemoryService(), EffaceMemoryService(store)  # each app its own tenant

    async def main():
        for op in ops:
            await _apply(ref, ours, world, op)

    asyncio.run(main())


@pytest.fixture
def memory(store):
    return EffaceMemoryService(store, tenant="acme")


def _adk_session(app: str, user: str, texts: list[str]) -> Session:
    """A session made by ADK's own InMemorySessionService, events appended as a Runner does."""
    sessions = InMemorySessionService()

    async def make():
        s = await sessions.create_session(app_name=app, user_id=user)
        for i, text in enumerate(texts):
            role = "user" if i % 2 == 0 else "model"
            content = types.Content(role=role, parts=[types.Part(text=text)])
            await sessions.append_event(s, Event(author="user" if role == "user" else "helper", content=content))
        return await sessions.get_session(app_name=app, user_id=user, session_id=s.id)

    return asyncio.run(make())


def test_delete_memory_is_a_forget_that_reaches_erased(memory, store):
    assert isinstance(memory, BaseMemoryService)
    session = _adk_session("helpdesk", "alice", ["I keep the spare key under the blue flowerpot", "Noted."])
    asyncio.run(memory.add_session_to_memory(session))
    found = asyncio.run(memory.search_memory(app_name="helpdesk", user_id="alice", query="flowerpot")).memories
    target = next(m for m in found if "flowerpot" in m.content.parts[0].text)
    assert target.author == "user" and target.id == session.events[0].id
    result = asyncio.run(memory.delete_memory(app_name="helpdesk", user_id="alice", memory_id=target.id))
    assert result is None  # ADK's signature: the receipt is kept by the service
    receipt = memory.last_receipt
    assert len(receipt.erased) == 1 and receipt.erased[0].endswith("/" + target.id)
    again = asyncio.run(memory.search_memory(app_name="helpdesk", user_id="alice", query="flowerpot")).memories
    assert target.id not in {m.id for m in again}
    asyncio.run(memory.add_session_to_memory(session))  # the session again: the deleted id stays out
    again = asyncio.run(memory.search_memory(app_name="helpdesk", user_id="alice", query="flowerpot")).memories
    assert target.id not in {m.id for m in again}
    assert store.wait(receipt.handle, timeout=30).erased
    assert store.verify(receipt.handle).level == "erased"
    assert asyncio.run(memory.delete_memory(app_name="helpdesk", user_id="alice", memory_id="nope")) is None
    assert memory.last_receipt is receipt


def test_add_memory_and_forget_user(memory, store):
    entry = MemoryEntry(
        id="pref-1",
        content=types.Content(role="user", parts=[types.Part(text="Alice prefers green tea")]),
        author="alice",
        timestamp="2027-01-15T10:00:00",
        custom_metadata={"source": "profile"},
    )
    asyncio.run(memory.add_memory(app_name="helpdesk", user_id="alice", memories=[entry]))
    asyncio.run(memory.add_memory(app_name="other-app", user_id="alice", memories=[entry]))
    (got,) = asyncio.run(memory.search_memory(app_name="helpdesk", user_id="alice", query="green tea")).memories
    assert got == entry
    assert asyncio.run(memory.search_memory(app_name="helpdesk", user_id="bob", query="green tea")).memories == []
    receipt = memory.forget_user(app_name="helpdesk", user_id="alice")
    assert receipt.erased == ("adk/helpdesk/alice/m/pref-1",) and memory.last_receipt is receipt
    assert asyncio.run(memory.search_memory(app_name="helpdesk", user_id="alice", query="green tea")).memories == []
    (other,) = asyncio.run(memory.search_memory(app_name="other-app", user_id="alice", query="tea")).memories
    assert other.id == "pref-1"
    with pytest.raises(efface.InvalidInput, match="text"):
        empty = MemoryEntry(content=types.Content(role="user", parts=[]))
        asyncio.run(memory.add_memory(app_name="helpdesk", user_id="alice", memories=[empty]))


def test_the_efface_scheme_through_adks_service_registry(tmp_path, monkeypatch):
    """What `adk web --memory_service_uri=efface://...` runs: the agents directory's
    services.py is loaded, then ADK's registry makes the service from the URI."""
    agents_dir = tmp_path / "agents"
    agents_dir.mkdir()
    (agents_dir / "services.py").write_text("import efface.compat.adk  # registers efface://\n")
    monkeypatch.syspath_prepend(str(agents_dir))
    monkeypatch.delitem(__import__("sys").modules, "services", raising=False)
    load_services_module(str(agents_dir))
    monkeypatch.chdir(tmp_path)
    service = create_memory_service_from_options(
        base_dir=agents_dir, memory_service_uri="efface://./memories?tenant=acme&embedder=hashing"
    )
    try:
        assert isinstance(service, EffaceMemoryService) and service.tenant == "acme"
        assert service.store.path == str(tmp_path / "memories")
        session = _adk_session("helpdesk", "alice", ["Alice flies to Lisbon on Friday"])
        asyncio.run(service.add_session_to_memory(session))
        (hit,) = asyncio.run(service.search_memory(app_name="helpdesk", user_id="alice", query="Lisbon")).memories
        asyncio.run(service.delete_memory(app_name="helpdesk", user_id="alice", memory_id=hit.id))
        assert service.store.wait(service.last_receipt.handle, timeout=30).erased
    finally:
        service.close()

    served = Served(tmp_path / "served", embedder="hashing", background=False)
    try:
        monkeypatch.setenv("EFFACE_API_KEY", served.key("acme"))
        remote = create_memory_service_from_options(
            base_dir=agents_dir, memory_service_uri=f"efface://{served.url}?tenant=acme&purpose=support"
        )
        assert isinstance(remote.store, efface.Client) and remote.purpose == "support"
        asyncio.run(remote.add_session_to_memory(session))
        assert served.store.scan(tenant="acme", purpose="support")[0].claims[0].subject == "alice"
        remote.close()
    finally:
        served.close()
    with pytest.raises(efface.InvalidInput, match="unknown"):
        EffaceMemoryService(uri="efface://./m?tenantt=acme")
