"""``efface gate proxy``: the agent-side gate (docs/concepts.md §5) as an MCP server in front of another.

The proxy connects to an upstream MCP memory server (a command over stdio, or a streamable
HTTP URL) with the official SDK's client, lists its tools and serves them again, through the
gate (:class:`~efface.gate.Gate`), with the SDK's low-level ``Server``:

- a **delete** tool (see :mod:`.upstream` for how tools are told apart) is forwarded; before
  that the gate records the erasure durably, with the keyed hashes of what the call names
  (its *targets*), and after it classifies the answer (a message or a boolean is ``intent``).
  The answer goes back as the upstream gave it, plus an ``efface_gate`` object (in the
  structured content and as a last text block) with a **handle**;
- a **read** tool in a scope with an unsettled erasure is refused with a tool error that says
  why and until when. After the settling interval the gate runs **sentinel probes** through
  the upstream's own read tools (each called with the deleted names and texts, and those that
  need no argument) and the read itself; when none returns a target, the erasure settles and
  the read is answered. A probe that answers with an error proves nothing; with no probe
  that answered, nothing settles (fail closed);
- a **write** is forwarded; what it writes again of an unsettled delete's targets is recorded
  (keyed hashes), so the new copy is not taken for the deleted one;
- ``forget_status(handle)`` and ``verify_erasure(handle)`` say what is proven and what is
  not. The proxy never reports ``erased`` on its own: it cannot see the upstream's files. When
  the upstream is efface, its receipt passes through as evidence: ``verify_erasure`` calls the
  upstream's own ``verify_erasure`` with the receipt's handle and reports the level it proves.

Only tools are served (an upstream's resources and prompts are not: a resource read would be
a read path the gate does not see). Upstream tools named like the proxy's own are hidden
behind them. Nothing of a call's arguments or answers is logged or written to the state file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from mcp import Client
from mcp.server.lowlevel import Server

from ..errors import EffaceError, ErasureNotSettled
from .gate import Gate
from .handles import HandleBook, ProxyHandle
from .protocol import ForgetAck, ToolHit, VerificationRead
from .state import Erasure
from .upstream import (
    ToolRule,
    answer_values,
    found_in,
    hit_keys,
    probe_arguments,
    probe_words,
    rule_for,
    target_key,
    targets,
)

log = logging.getLogger(__name__)

ONE_SCOPE = "*"
"""The scope of a call that names none: an upstream without scopes is one scope."""
EVERYTHING = "\x00everything"
"""The subject the gate records for a delete that names nothing (it may have erased anything)."""
OWN_TOOLS = ("forget_status", "verify_erasure")
LADDER = {
    "intent": "the upstream acknowledged the delete and the gate recorded it; nothing is checked yet, "
    "and reads in its scope are refused",
    "unreadable": "checked: the upstream's read paths no longer return what was deleted (see 'proven' for how)",
    "erased": "checked by the upstream itself (an efface receipt): the bytes are gone from its files",
}


class _UpstreamRefused(Exception):
    """The upstream answered a forwarded delete with an error."""


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def _texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


def _error(kind: str, message: str, **extra: Any) -> types.CallToolResult:
    doc = {"error": {"type": kind, "message": message, **extra}}
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(doc))], is_error=True)


def _efface_receipt(structured: Any) -> dict | None:
    """An efface receipt in a delete's answer (``efface mcp``'s forget), else None."""
    if (
        isinstance(structured, dict)
        and isinstance(structured.get("handle"), str)
        and structured.get("level") in ("intent", "unreadable", "erased")
        and "epoch" in structured
    ):
        return structured
    return None


@dataclass
class _Call:
    """One tool call being served (held in memory only)."""

    name: str
    arguments: dict[str, Any]
    result: types.CallToolResult | None = None
    hits: list[ToolHit] = field(default_factory=list)
    held: bool = False
    """A verification whose targets this process holds (so its probes can use them)."""


class _Upstream:
    """The upstream as a :class:`~efface.gate.MemoryTool`, for the gate, which runs in a worker
    thread: each method calls back into the event loop that holds the upstream's session."""

    name = "mcp-upstream"

    def __init__(self, proxy: GateProxy):
        self.proxy = proxy

    def write(self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Any = None) -> None:
        """Nothing: the proxy has forwarded the write already; the gate only records it."""

    def forget(self, *, scope: str, subject: str | None = None, keys: Any = None) -> ForgetAck:
        call = self.proxy.current
        call.result = anyio.from_thread.run(self.proxy.forward, call.name, call.arguments)
        if call.result.is_error:
            raise _UpstreamRefused
        receipt = _efface_receipt(call.result.structured_content)
        bound = receipt.get("max_propagation_s") if receipt else None
        return ForgetAck(
            raw=call.result.structured_content if call.result.structured_content is not None else _texts(call.result),
            scope=scope,
            keys=tuple(keys or ()),
            acknowledged_at=self.proxy.clock(),
            handle=receipt["handle"] if receipt else None,
            epoch=receipt["epoch"] if receipt and isinstance(receipt["epoch"], int) else None,
            max_propagation_s=bound if isinstance(bound, (int, float)) and not isinstance(bound, bool) else None,
        )

    def recall(self, query: str, *, scope: str, k: int = 10) -> list[ToolHit]:
        """``query`` says what to do: ``call`` forwards the read being served, ``cached`` gives
        its answer again (another scope's check), ``probe`` runs the argument-free probes."""
        call = self.proxy.current
        if query == "call":
            call.result = anyio.from_thread.run(self.proxy.forward, call.name, call.arguments)
            values = [] if call.result.is_error else answer_values(call.result.structured_content, _texts(call.result))
            call.hits = [ToolHit(key=k, text="") for k in hit_keys(values)]
            return call.hits
        if query == "cached":
            return call.hits
        results = anyio.from_thread.run(self.proxy.probe_calls, [])
        if not results and not call.held:
            raise ErasureNotSettled(
                "no read tool that needs no argument answered a probe, and the targets are not held"
            )
        hits: list[ToolHit] = []
        for result in results:
            hits += [
                ToolHit(key=k, text="") for k in hit_keys(answer_values(result.structured_content, _texts(result)))
            ]
        return hits

    def verification_read(self, keys: Any, scope: str) -> VerificationRead:
        """Sentinel probes for the targets behind ``keys`` (held in memory): every read tool,
        called with their names and texts. No probe that answered: every key counts as found."""
        held = {k: self.proxy.targets[k] for k in keys if k in self.proxy.targets and k not in self.proxy.rewritten}
        results = anyio.from_thread.run(self.proxy.probe_calls, probe_words(list(held.values())))
        values = [answer_values(r.structured_content, _texts(r)) for r in results]
        found = tuple(key for key, t in held.items() if any(found_in(t, v) for v in values))
        if not results:
            found = tuple(keys)
        return VerificationRead(routed_to="unknown", found=found, checked_at=self.proxy.clock())


class GateProxy:
    """The proxy over one connected upstream :class:`mcp.Client`.

    ``settle_s``: the least time between a delete's answer and the probes that may settle it.
    ``mapping``: the operator's mapping (:func:`.upstream.load_mapping`), tool name -> entry."""

    def __init__(
        self,
        upstream: Client,
        state_path: str,
        *,
        settle_s: float = 60.0,
        mapping: dict[str, dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.upstream = upstream
        self.mapping = mapping or {}
        self.gate = Gate(_Upstream(self), state_path, settle_s=settle_s, clock=clock, reveal_scopes=False)
        self.book = HandleBook(state_path)
        self.clock = clock
        self.tools: dict[str, types.Tool] = {}
        self.rules: dict[str, ToolRule] = {}
        self.hidden: set[str] = set()
        self.targets: dict[str, str | dict] = {}
        """target key -> target, for the probes of this process's deletes. Never persisted."""
        self.scopes: dict[str, str] = {self.gate.scope_tag(ONE_SCOPE): ONE_SCOPE}
        """scope tag -> scope name, for the scopes this process has seen. Never persisted."""
        self.rewritten: set[str] = set()
        """Target keys written again through the proxy since their delete. Never persisted."""
        self.held: set[int] = set()
        """Erasure ids whose targets this process holds (its own deletes)."""
        self.current = _Call("", {})
        self._lock = anyio.Lock()
        self.server: Server[Any] = Server(
            "efface-gate",
            version="1",
            instructions="A gate in front of a memory server: deletes answer with a handle and are intent, not "
            "proof; reads in a scope with an unsettled delete are refused until it settles. Ask forget_status or "
            "verify_erasure(handle) before you report anything as deleted.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    # -- the upstream ------------------------------------------------------------------------
    async def load_tools(self) -> None:
        """List the upstream's tools (every page) and decide each one's kind."""
        cursor = None
        while True:
            page = await self.upstream.list_tools(cursor=cursor)
            for tool in page.tools:
                self.tools[tool.name] = tool
                self.rules[tool.name] = rule_for(tool.name, tool.annotations, self.mapping)
            cursor = page.next_cursor
            if not cursor:
                break
        self.hidden = set(self.tools) & set(OWN_TOOLS)
        log.info("upstream tools: %s", ", ".join(f"{n}={r.kind}" for n, r in sorted(self.rules.items())))

    async def forward(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            return await self.upstream.call_tool(name, arguments)
        except Exception as exc:  # the upstream's failure, answered as a tool error; never its arguments
            log.warning("upstream tool %s failed: %s", name, type(exc).__name__)
            return _error("UpstreamError", f"the upstream failed on {name} ({type(exc).__name__})")

    async def probe_calls(self, words: list[str]) -> list[types.CallToolResult]:
        """Call every read tool that may probe, with ``words``; the answers that are not errors."""
        out = []
        for name, rule in sorted(self.rules.items()):
            if rule.kind != "read" or not rule.probe or name in self.hidden:
                continue
            for arguments in probe_arguments(self.tools[name].input_schema, words):
                result = await self.forward(name, arguments)
                if not result.is_error:
                    out.append(result)
        return out

    async def _gated(self, call: _Call, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (which uses the gate) in a worker thread, one call at a time."""
        async with self._lock:
            self.current = call
            return await anyio.to_thread.run_sync(fn)

    # -- the server's handlers -----------------------------------------------------------------
    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        tools = []
        for name, tool in self.tools.items():
            if name in self.hidden:
                continue
            kind = self.rules[name].kind
            if kind == "delete":
                schema = tool.output_schema
                if schema and isinstance(schema.get("properties"), dict):
                    schema = {**schema, "properties": {**schema["properties"], "efface_gate": {"type": "object"}}}
                note = " [efface gate: the answer is intent, not proof of deletion; its efface_gate.handle is for "
                note += "forget_status and verify_erasure]"
                tool = tool.model_copy(update={"output_schema": schema, "description": (tool.description or "") + note})
            elif kind == "read":
                note = " [efface gate: refused in a scope with a delete that has not settled]"
                tool = tool.model_copy(update={"description": (tool.description or "") + note})
            tools.append(tool)
        return types.ListToolsResult(tools=tools + _own_tools())

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            return await self._dispatch(params.name, dict(params.arguments or {}))
        except EffaceError as exc:  # efface's messages never quote arguments
            return _error(type(exc).__name__, str(exc))
        except Exception as exc:  # a bug: logged by type only, as its message might quote an argument
            log.error("gate proxy failed on %s: %s", params.name, type(exc).__name__)
            return _error("InternalError", "the gate proxy failed on this call (its log names the exception type)")

    async def _dispatch(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name in OWN_TOOLS:
            handle = arguments.get("handle")
            if not isinstance(handle, str) or not handle:
                return _error("InvalidInput", f"{name} needs a handle: the one a delete's efface_gate carried")
            return await (self.forget_status(handle) if name == "forget_status" else self.verify_erasure(handle))
        if name not in self.tools:
            return _error("NotFound", "no such tool on this server (tools/list names them)")
        rule = self.rules[name]
        if rule.kind == "delete":
            return await self._delete(name, arguments, rule)
        if rule.kind == "read":
            return await self._read(name, arguments, rule)
        if rule.kind == "write":
            return await self._write(name, arguments, rule)
        return await self.forward(name, arguments)

    async def _write(self, name: str, arguments: dict[str, Any], rule: ToolRule) -> types.CallToolResult:
        """Forward a write; what it writes again of an unsettled delete's targets is recorded
        (as keyed hashes, by :meth:`Gate.write`), so the probes do not take it for the old."""
        result = await self.forward(name, arguments)
        scope = self._scope_of(arguments, rule)
        scopes = list(dict.fromkeys([scope or ONE_SCOPE, ONE_SCOPE]))
        if result.is_error or not any(self.gate.unsettled(s) for s in scopes):
            return result
        written = hit_keys(answer_values({k: v for k, v in arguments.items() if k != rule.scope}, []))
        self.rewritten.update(k for k in written if k in self.targets)

        def record() -> None:
            for s in scopes:
                for key in dict.fromkeys(written):
                    self.gate.write(key, "", scope=s)

        await self._gated(_Call(name, arguments), record)
        return result

    def _scope_of(self, arguments: dict[str, Any], rule: ToolRule) -> str | None:
        value = arguments.get(rule.scope) if rule.scope else None
        if isinstance(value, str) and value:
            self.scopes[self.gate.scope_tag(value)] = value
            return value
        return None

    async def _delete(self, name: str, arguments: dict[str, Any], rule: ToolRule) -> types.CallToolResult:
        scope = self._scope_of(arguments, rule) or ONE_SCOPE
        if rule.scope and scope == ONE_SCOPE:
            return _error("InvalidInput", f"{name} must name its scope (argument '{rule.scope}', by the mapping)")
        found = targets(arguments, rule)
        keys = [target_key(t) for t in found]
        for key, t in zip(keys, found, strict=True):
            self.targets[key] = t
            self.rewritten.discard(key)  # deleted again: a copy that comes back is the deleted one
        call = _Call(name, arguments)

        def forget() -> Any:
            if keys:
                return self.gate.forget(scope=scope, keys=keys)
            return self.gate.forget(scope=scope, subject=EVERYTHING)

        try:
            done = await self._gated(call, forget)
        except _UpstreamRefused:
            assert call.result is not None
            note = {"efface_gate": {"handle": None, "level": "intent", "note": _FAILED}}
            return call.result.model_copy(
                update={"content": [*call.result.content, types.TextContent(type="text", text=json.dumps(note))]}
            )
        assert call.result is not None and done.erasure_id is not None
        self.held.add(done.erasure_id)
        upstream_handle = _efface_receipt(call.result.structured_content)
        handle = self.book.add(
            done.erasure_id, name, self.clock(), upstream_handle["handle"] if upstream_handle else None
        )
        erasure = self.gate.erasure(done.erasure_id)
        assert erasure is not None
        doc = {
            "handle": handle,
            "level": "intent",
            "level_means": LADDER["intent"],
            "acknowledgement": done.classification.level,
            "reasons": list(done.classification.reasons),
            "reads": "refused in this scope until probes_from, then until sentinel probes come back clean",
            "probes_from": _iso(self.gate.probes_from(erasure)),
            "next_step": "call forget_status(handle) or verify_erasure(handle); report the level they give",
        }
        result = call.result
        structured = result.structured_content
        if isinstance(structured, dict):
            structured = {**structured, "efface_gate": doc}
        text = types.TextContent(type="text", text=json.dumps({"efface_gate": doc}))
        return result.model_copy(update={"structured_content": structured, "content": [*result.content, text]})

    async def _read(self, name: str, arguments: dict[str, Any], rule: ToolRule) -> types.CallToolResult:
        scope = self._scope_of(arguments, rule)
        scopes = [scope, ONE_SCOPE] if scope else list(dict.fromkeys(self.scopes.values()))
        if scope is None and self.gate.unsettled_tags() - set(self.scopes):
            return _error(
                "ErasureNotSettled",
                f"{name} refused: a delete in a scope this proxy knows only by its hash (it restarted since) has "
                "not settled, and this read spans every scope; read naming that scope, so its probes run",
                retry_after=None,
            )
        call = _Call(name, arguments)

        def check() -> None:
            for i, s in enumerate(scopes):
                self.gate.recall("call" if i == 0 else "cached", scope=s)

        try:
            await self._gated(call, check)
        except ErasureNotSettled as exc:
            return self._refusal(name, scopes, exc)
        assert call.result is not None
        return call.result

    def _refusal(self, name: str, scopes: list[str], exc: ErasureNotSettled) -> types.CallToolResult:
        now = self.clock()
        waits = [self.gate.probes_from(e) for s in scopes for e in self.gate.unsettled(s)]
        until = max((w for w in waits if w > now), default=None)
        when = f"Retry after {_iso(until)}" if until else "The probes run again on every read: retry later"
        return _error(
            "ErasureNotSettled",
            f"{name} refused: a delete forwarded through this gate has not settled in the scope this read touches, "
            f"so its answer could still hold what was deleted ({exc}). {when}; forget_status(handle) "
            "says where each delete stands.",
            retry_after=_iso(until),
        )

    # -- forget_status and verify_erasure -----------------------------------------------------------
    def _lookup(self, handle: str) -> tuple[ProxyHandle, Erasure] | types.CallToolResult:
        rec = self.book.get(handle)
        erasure = self.gate.erasure(rec.erasure_id) if rec else None
        if rec is None or erasure is None:
            return _error("NotFound", "no such handle: give the efface_gate.handle a delete's answer carried")
        return rec, erasure

    async def forget_status(self, handle: str, checked: list[str] | None = None) -> types.CallToolResult:
        found = self._lookup(handle)
        if isinstance(found, types.CallToolResult):
            return found
        rec, erasure = found
        doc = self._status(rec, erasure)
        if checked is not None:
            doc["checked"] = checked
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(doc))], structured_content=doc
        )

    async def verify_erasure(self, handle: str) -> types.CallToolResult:
        found = self._lookup(handle)
        if isinstance(found, types.CallToolResult):
            return found
        rec, erasure = found
        if rec.upstream_handle and "verify_erasure" in self.tools:
            return await self._verify_upstream(rec)
        now = self.clock()
        if now < self.gate.probes_from(erasure):
            return await self.forget_status(
                handle, [f"not yet: sentinel probes run from {_iso(self.gate.probes_from(erasure))}"]
            )
        name = self.scopes.get("#" + erasure.scope_h[:8])
        if name is None:
            return await self.forget_status(
                handle, ["cannot_verify: the proxy restarted and no longer knows this delete's scope by name"]
            )
        if erasure.settled_at is not None:
            return await self.forget_status(handle, ["already settled; the gate keeps no probe to re-run once settled"])
        if erasure.id not in self.held and not self._argument_free_probe():
            return await self.forget_status(
                handle,
                ["cannot_verify: no probe is possible (the proxy restarted, and no read tool needs no argument)"],
            )
        try:
            call = _Call("", {}, held=erasure.id in self.held)
            await self._gated(call, lambda: self.gate.recall("probe", scope=name))
        except ErasureNotSettled as exc:
            return await self.forget_status(handle, [f"sentinel probes: not clean ({exc})"])
        return await self.forget_status(handle, ["sentinel probes through the upstream's read tools came back clean"])

    def _argument_free_probe(self) -> bool:
        return any(
            r.kind == "read"
            and r.probe
            and n not in self.hidden
            and probe_arguments(self.tools[n].input_schema, []) == [{}]
            for n, r in self.rules.items()
        )

    async def _verify_upstream(self, rec: ProxyHandle) -> types.CallToolResult:
        result = await self.forward("verify_erasure", {"handle": rec.upstream_handle})
        structured = result.structured_content if not result.is_error else None
        level = structured.get("level") if isinstance(structured, dict) else None
        if level in ("unreadable", "erased"):
            self.book.verified(rec.handle, level, self.clock())
            self.gate.settle_verified(rec.erasure_id)
            checked = [f"the upstream verified its own receipt: {level}"]
        else:
            checked = ["the upstream's verification did not prove the erasure (its answer is in 'upstream')"]
        out = await self.forget_status(rec.handle, checked)
        if isinstance(out.structured_content, dict):
            out.structured_content["upstream"] = structured if structured is not None else {"error": _texts(result)}
            out.content = [types.TextContent(type="text", text=json.dumps(out.structured_content))]
        return out

    def _status(self, rec: ProxyHandle, erasure: Erasure) -> dict[str, Any]:
        settled = erasure.settled_at is not None
        if rec.verified_level:
            level = rec.verified_level
        elif erasure.settled_by in ("probe", "evidence", "epoch"):
            level = "unreadable"
        else:
            level = "intent"
        reads = [n for n, r in sorted(self.rules.items()) if r.kind == "read" and r.probe and n not in self.hidden]
        proven = [f"the upstream acknowledged the delete ({rec.tool}) and the gate recorded it durably"]
        not_proven = []
        if rec.verified_level:
            proven.append(f"the upstream (efface) verified its own receipt as '{rec.verified_level}', in its ledger")
        elif level == "unreadable":
            proven.append(
                "after the settling interval, sentinel probes through the upstream's read tools "
                f"({', '.join(reads)}) no longer returned the deleted names and texts"
            )
        else:
            not_proven.append("that the upstream's read tools no longer return what was deleted (probes not clean yet)")
        if level != "erased":
            not_proven.append(
                "that the bytes are gone from the upstream's files, caches, replicas or backups: the proxy cannot "
                "scan them, so only an upstream that proves it (efface) can reach 'erased'"
            )
        not_proven.append("that records merely mentioning the deleted names are gone (they are not the targets)")
        return {
            "handle": rec.handle,
            "tool": rec.tool,
            "level": level,
            "level_means": LADDER[level],
            "settled": settled,
            "settled_by": erasure.settled_by,
            "reads": "allowed" if settled else "refused",
            "requested_at": _iso(erasure.requested_at),
            "acknowledged_at": _iso(erasure.acknowledged_at),
            "probes_from": _iso(self.gate.probes_from(erasure)),
            "proven": proven,
            "not_proven": not_proven,
            "upstream_handle": rec.upstream_handle,
        }

    def close(self) -> None:
        self.gate.close()
        self.book.close()


_FAILED = (
    "the upstream answered the delete with an error; the gate still counts it as an unsettled erasure (it "
    "may have deleted part), so reads in its scope wait for the settling interval and clean probes"
)

_HANDLE_SCHEMA = {
    "type": "object",
    "properties": {"handle": {"type": "string", "description": "The efface_gate.handle a delete's answer carried."}},
    "required": ["handle"],
}


def _own_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name="forget_status",
            title="Where a delete stands (efface gate)",
            description="What the gate has proven about a delete forwarded through it, by its handle: its level "
            "(intent, unreadable, erased), whether reads in its scope are allowed, when probes may settle it, and "
            "what is proven and what is not. It checks nothing (verify_erasure does).",
            input_schema=_HANDLE_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
        types.Tool(
            name="verify_erasure",
            title="Check a delete (efface gate)",
            description="Run the checks for a delete now, by its handle: the upstream's own verification when it "
            "is efface (its receipt is evidence), else sentinel probes through the upstream's read tools once "
            "the settling interval has passed. Never reports 'erased' unless the upstream proved it.",
            input_schema=_HANDLE_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True),
        ),
    ]
