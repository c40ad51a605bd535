"""A real ``efface serve`` process under hostile traffic (#33): unknown paths and methods,
lone surrogates, malformed keys and bodies, malformed JSON-RPC on /mcp, and a marker value in
every field of every route. No answer of /mcp repeats a value it was sent, no answer is a
server error, and the server's whole log (stdout and stderr) holds none of the values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from efface.service.keys import KeyRing, key_path

TENANT = "tenant-of-quillon.marker@example.org"


class Marks:
    """Distinct marker values, each remembered, so the log can be scanned for every one."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, field: str = "v") -> str:
        value = f"mk{len(self.sent):03d}-{re.sub(r'[^a-z]', '', field.lower())[:12]}.quillon@example.org"
        self.sent.append(value)
        return value


class ServeProcess:
    def __init__(self, tmp_path) -> None:
        store = str(tmp_path / "store")
        with KeyRing(key_path(store)) as ring:
            self.key = ring.create(TENANT)[0]
        self.log_path = tmp_path / "serve.log"
        env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": os.pathsep.join(sys.path)}
        args = [sys.executable, "-m", "efface", "serve", "--store", store, "--port", "0", "--embedder", "hashing"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([*args, "--purpose", "support"], stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while (m := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", self.log())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("efface serve did not start:\n" + self.log()[-3000:])
            time.sleep(0.1)
        self.url = m.group(1)
        self.auth = {"Authorization": f"Bearer {self.key}"}

    def log(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def serve(tmp_path_factory) -> Iterator[ServeProcess]:
    s = ServeProcess(tmp_path_factory.mktemp("hostile"))
    yield s
    s.stop()


def _assert_log_clean(serve: ServeProcess, values: list[str]) -> None:
    log = serve.log()
    assert '"POST /' in log  # the access log is on and read
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
    for value in values:
        for form in {value, quote(value), json.dumps(value)[1:-1]}:
            assert form not in log, f"a value sent ({form[:8]}...) is in the server's log"


def _schemas(serve: ServeProcess) -> dict[str, dict]:
    """Each POST route of the OpenAPI document and its body's properties."""
    doc = httpx.get(serve.url + "/openapi.json").json()
    out = {}
    for path, ops in doc["paths"].items():
        ref = ops.get("post", {}).get("requestBody", {}).get("content", {}).get("application/json", {})
        ref = ref.get("schema", {}).get("$ref")
        if ref:
            out[path] = doc["components"]["schemas"][ref.rsplit("/", 1)[1]].get("properties", {})
    return out


def test_hostile_traffic_answers_no_server_error_and_leaves_no_value_in_the_log(serve):
    mark = Marks()
    key = serve.auth
    write = {"key": "k1", "text": "Quillon prefers tea", "subject": "s1", "purpose": "support"}
    assert httpx.post(serve.url + "/v1/write", json=write, headers=key).status_code == 200
    statuses = []

    def send(method: str, path: str, **kw) -> httpx.Response:
        r = httpx.request(method, serve.url + path, timeout=60, **kw)
        statuses.append((method, r.status_code))
        return r

    # Unknown paths and methods: the path (or a query) is where a client put a value.
    send("POST", f"/v1/memories/{mark('path')}", json={}, headers=key)
    send("GET", f"/{quote(mark('path'))}?q={mark('query')}")
    send("DELETE", f"/v1/{mark('path')}/{mark('path')}", headers=key)
    send("QUILLONMARKERMETHOD", "/v1/write", headers=key)
    mark.sent.append("QUILLONMARKERMETHOD")
    # Malformed and unknown keys.
    for bad in (mark("key"), "efk_" + mark("key"), f"efk_0123456789ab_{mark('key')}"):
        send("POST", "/v1/status", json={"handle": "efr_x"}, headers={"Authorization": f"Bearer {bad}"})
    send("POST", "/v1/status", json={}, headers={"Authorization": f"Bearer {mark('key')}é".encode()})
    # Malformed bodies.
    send("POST", "/v1/write", content=("{" + mark("body")).encode(), headers=key)
    send("POST", "/v1/write", content=json.dumps([mark("body")] * 11).encode(), headers=key)
    send("POST", "/v1/write", json={mark("field"): mark("body"), **write}, headers=key)
    send("POST", "/v1/write", content=b'{"key": "\xff' + mark("body").encode() + b'"}', headers=key)
    send("POST", "/v1/write", json={**write, "text": mark("huge") * 150_000}, headers=key)  # over 4 MiB
    # A marker in every field of every route (as a string, with a lone surrogate, nested in
    # the wrong type), and the routes' own typed errors (an unknown purpose, a foreign tenant).
    for path, props in _schemas(serve).items():
        for field in props:
            for shape in ("plain", "surrogate", "nested"):
                value = mark(field)
                raw = {
                    "plain": json.dumps(value),
                    "surrogate": f'"\\ud800{value}"',
                    "nested": json.dumps({value: [value]}),
                }
                body = {**{f: "support" if f == "purpose" else "x" for f in props if f != field}}
                text = json.dumps(body)[:-1] + (", " if body else "") + f'"{field}": {raw[shape]}' + "}"
                send("POST", path, content=text.encode(), headers={**key, "Content-Type": "application/json"})
    assert not [s for s in statuses if s[1] >= 500], statuses
    _assert_log_clean(serve, [*mark.sent, serve.key, TENANT])
    assert "<unknown path>" in serve.log()


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def test_mcp_protocol_errors_echo_nothing(serve):
    """#33: the SDK's validation error repeated the request body (an e-mail address, 11 times);
    unknown methods, tools, resources and prompts came back named, and were logged."""
    mark = Marks()
    headers = {**MCP_HEADERS, **serve.auth}
    r = httpx.post(serve.url + "/mcp", json=INIT, headers=headers)
    assert r.status_code == 200, r.text
    session = {**headers, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    httpx.post(serve.url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)

    def req(n: int, method: str, params) -> dict:
        return {"jsonrpc": "2.0", "id": n, "method": method, "params": params}

    m = mark("mcp")
    bodies = [
        ('{"jsonrpc": "2.0", "id": 1, "method": "' + m).encode(),
        ('{"x": "' + mark("mcp") + '", }').encode(),
        json.dumps({"jsonrpc": "2.0", "id": {"x": m}, "method": 5, "params": m}).encode(),
        json.dumps({"jsonrpc": m, "id": 1, "method": "tools/list"}).encode(),
        json.dumps([m] * 11).encode(),
        json.dumps(m).encode(),
        json.dumps(req(2, mark("method"), {"a": m})).encode(),
        json.dumps(req(3, "tools/call", {"name": mark("tool"), "arguments": {}})).encode(),
        json.dumps(req(4, "tools/call", {"name": "remember", "arguments": {"key": [m] * 11, "text": {m: m}}})).encode(),
        json.dumps(req(5, "tools/call", m)).encode(),
        json.dumps(req(6, "tools/call", {"name": "read", "arguments": m})).encode(),
        json.dumps(req(7, "tools/call", {"name": "read", "arguments": {m: m, "key": m}})).encode(),
        json.dumps(req(8, "resources/read", {"uri": mark("uri")})).encode(),
        json.dumps(req(9, "prompts/get", {"name": mark("prompt")})).encode(),
        json.dumps(req(10, "logging/setLevel", {"level": m})).encode(),
        json.dumps(req(11, "completion/complete", {"ref": {"type": m}, "argument": {"name": m, "value": m}})).encode(),
        json.dumps(req(12, "initialize", {"protocolVersion": m, "capabilities": m, "clientInfo": m})).encode(),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/" + mark("note"), "params": {"a": m}}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 99, "error": {"code": m, "message": m}}).encode(),
        json.dumps(req(13, "ping", {"_meta": {"progressToken": {"a": m}}})).encode(),
        json.dumps(req(14, "tools/call", {"name": "recall", "arguments": {"query": m * 2000, "k": m}})).encode(),
        b'{"jsonrpc": "2.0", "id": 15, "method": "tools/list", "params": {"cursor": "\\ud800' + m.encode() + b'"}}',
    ]
    answers = []
    for body in bodies:
        for hdrs in (session, headers, {**session, "mcp-session-id": mark("session")}, MCP_HEADERS):
            r = httpx.post(serve.url + "/mcp", content=body, headers=hdrs, timeout=60)
            answers.append((r.status_code, r.text))
    assert not [a for a in answers if a[0] >= 500], answers
    assert [s for s, _ in answers[3::4]] == [401] * len(bodies)  # no key: refused before the body is read
    for value in mark.sent:
        echoed = [text[:200] for _, text in answers if value in text]
        assert not echoed, f"an answer of /mcp repeats a value it was sent: {echoed}"
    _assert_log_clean(serve, mark.sent)
