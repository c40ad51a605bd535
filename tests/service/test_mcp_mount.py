"""The MCP hook of create_app: the MCP app answers at /mcp in the same server, behind the
same body limit, and the API's lifespan enters the MCP app's (Starlette runs no lifespan of
a routed app by itself)."""

from __future__ import annotations

import importlib.util
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from efface.service.http import create_app
from efface.service.runner import BackgroundServer


def test_the_mcp_app_is_routed_at_mcp_and_its_lifespan_entered(served):
    events = []

    @asynccontextmanager
    async def lifespan():
        events.append("entered")
        yield
        events.append("exited")

    async def answer(request):
        assert events == ["entered"], "a request reached the MCP app before its lifespan ran"
        return PlainTextResponse(f"mcp {request.method} {request.url.path}")

    inner = Starlette(routes=[Route("/mcp", answer, methods=["GET", "POST", "DELETE"])])
    app = create_app(served.store, served.ring, mcp=(inner, lifespan), max_body=100)
    with BackgroundServer(app, access_log=False) as server:
        assert httpx.post(server.url + "/mcp", content=b"{}").text == "mcp POST /mcp"
        assert httpx.delete(server.url + "/mcp").text == "mcp DELETE /mcp"
        assert httpx.post(server.url + "/mcp", content=b"x" * 500).status_code == 413
        assert "/mcp" not in httpx.get(server.url + "/openapi.json").json()["paths"]
        assert httpx.get(server.url + "/v1/health").status_code == 200
    assert events == ["entered", "exited"]


@pytest.mark.skipif(importlib.util.find_spec("efface.service.mcp") is None, reason="efface.service.mcp not merged")
def test_the_real_mcp_server_answers_at_mcp_with_the_same_keys(served):
    from efface.service.mcp import mcp_http_app

    app = create_app(served.store, served.ring, mcp=mcp_http_app(served.store, served.ring))
    with BackgroundServer(app, access_log=False) as server:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        assert httpx.post(server.url + "/mcp", json=init, headers=headers).status_code == 401
        headers["Authorization"] = f"Bearer {served.key('acme')}"
        r = httpx.post(server.url + "/mcp", json=init, headers=headers)
        assert r.status_code == 200 and "serverInfo" in r.text
        # '/mcp/' (a client configured with the slash) is redirected to '/mcp', as the MCP
        # SDK's own servers do, while the API's routes answer a trailing slash with a 404.
        r = httpx.post(server.url + "/mcp/", json=init, headers=headers, follow_redirects=True)
        assert r.status_code == 200 and "serverInfo" in r.text
