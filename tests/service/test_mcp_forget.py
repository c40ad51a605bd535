"""The MCP forget tool can do what the library's forget does for an agent: every selector
(subject, key, prefix, purpose, combined with AND), and, where the server allows it (a tenant
that is one person), everything=true. Through the SDK's own in-memory client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
from mcp import Client

from efface.service.mcp import build_mcp

RECORDS = {
    "ana/tea": ("Ana prefers green tea", "ana", "support"),
    "ana/trip": ("Ana flies to Porto in May", "ana", "travel"),
    "ben/tea": ("Ben drinks black coffee", "ben", "support"),
    "notes/ana": ("a note about the shop's hours", "ana", "support"),
}


async def _seed(client: Client) -> None:
    for key, (text, subject, purpose) in RECORDS.items():
        result = await client.call_tool("remember", {"key": key, "text": text, "subject": subject, "purpose": purpose})
        assert not result.is_error, result.content


async def _forget(client: Client, args: dict[str, Any]) -> dict:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    result = await client.call_tool("forget", args)
    assert not result.is_error, result.content
    jsonschema.validate(result.structured_content, tools["forget"].output_schema)  # the typed receipt
    return result.structured_content


def test_every_selector_of_the_library_is_a_forget_argument(store):
    cases = [
        ({"subject": "ana"}, ["ana/tea", "ana/trip", "notes/ana"]),
        ({"key": "ben/tea"}, ["ben/tea"]),
        ({"prefix": "ana/"}, ["ana/tea", "ana/trip"]),
        ({"purpose": "travel"}, ["ana/trip"]),
        ({"subject": "ana", "purpose": "support"}, ["ana/tea", "notes/ana"]),  # AND
    ]

    async def body():
        out = []
        for i, (args, _) in enumerate(cases):
            async with Client(build_mcp(store, tenant=f"t{i}", purpose="support")) as client:
                await _seed(client)
                receipt = await _forget(client, args)
                left = [
                    k
                    for k in RECORDS
                    if (await client.call_tool("read", {"key": k, "purpose": RECORDS[k][2]})).structured_content[
                        "found"
                    ]
                ]
                out.append((receipt, left))
        return out

    for (args, erased), (receipt, left) in zip(cases, asyncio.run(body()), strict=True):
        assert sorted(receipt["erased"]) == erased, args
        assert {k: v for k, v in receipt["selector"].items() if v not in (None, False)} == args
        assert receipt["level"] == "intent" and receipt["handle"].startswith("efr_")
        assert sorted(left) == sorted(set(RECORDS) - set(erased)), args


def test_everything_is_not_offered_unless_the_server_allows_it(store):
    async def body():
        async with Client(build_mcp(store, tenant="acme", purpose="support")) as client:
            await _seed(client)
            tools = {t.name: t for t in (await client.list_tools()).tools}
            refused = await client.call_tool("forget", {"everything": True})
            still = await client.call_tool("read", {"key": "ana/tea"})
            return tools["forget"], refused, still.structured_content

    forget, refused, still = asyncio.run(body())
    assert "everything" not in forget.input_schema["properties"]
    assert "everything" not in forget.description
    assert refused.is_error  # an argument outside the schema; nothing was forgotten
    (block,) = refused.content
    error = json.loads(block.text)["error"]
    # It says what this server allows, not the library's everything=True it does not offer.
    assert error["type"] == "ScopeError" and "--allow-forget-everything" in error["message"]
    assert "everything=True" not in error["message"]
    assert still["found"] is True


def test_everything_forgets_the_whole_tenant_and_no_other(store):
    person = "ana@example.com"  # a per-user tenant, named as such services often name them

    async def body():
        async with (
            Client(build_mcp(store, tenant=person, purpose="support", forget_everything=True)) as mine,
            Client(build_mcp(store, tenant="globex", purpose="support")) as other,
        ):
            await _seed(mine)
            await _seed(other)
            tools = {t.name: t for t in (await mine.list_tools()).tools}
            mixed = await mine.call_tool("forget", {"everything": True, "subject": "ana"})
            receipt = await _forget(mine, {"everything": True})
            mine_left = [
                (await mine.call_tool("read", {"key": k, "purpose": p})).structured_content["found"]
                for k, (_, _, p) in RECORDS.items()
            ]
            other_left = [
                (await other.call_tool("read", {"key": k, "purpose": p})).structured_content["found"]
                for k, (_, _, p) in RECORDS.items()
            ]
            return tools["forget"], mixed, receipt, mine_left, other_left

    forget, mixed, receipt, mine_left, other_left = asyncio.run(body())
    assert forget.input_schema["properties"]["everything"]["type"] == "boolean"
    assert "everything=true" in forget.description and "confirm" in forget.description
    assert mixed.is_error and json.loads(mixed.content[0].text)["error"]["type"] == "ScopeError"
    assert sorted(receipt["erased"]) == sorted(RECORDS)
    assert receipt["selector"]["everything"] is True and receipt["tenant_erased"] is True
    assert not any(mine_left) and all(other_left)
    assert person not in json.dumps(receipt)  # the tenant is implied, never in the receipt
