"""``efface mcp --origin URL`` end to end: an agent's MCP client (the SDK's own, over stdio)
writes, recalls and forgets in a PostgreSQL store, and the erasure climbs to ``erased``;
a second MCP server on the same database, started after the forget, serves nothing erased.

The URL carries a password (the test cluster trusts loopback and ignores it): it must never
reach the agent, stdout's protocol stream or stderr. It is given in ``EFFACE_ORIGIN``, as
``efface mcp --origin`` also reads it, never on a command line, where ``ps`` would show it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import efface
from child_env import child_env
from efface.origin.postgres.keys import KeyFileCreated

PASSWORD = "Pw-mcp-origin-51c2"


def _params(url: str, kek) -> StdioServerParameters:
    # the URL in EFFACE_ORIGIN, never on the command line (ps shows a password there to every user)
    args = ["-m", "efface", "mcp", "--kek-file", str(kek), "--embedder", "hashing"]
    return StdioServerParameters(
        command=sys.executable,
        args=[*args, "--tenant", "acme", "--purpose", "support"],
        env={**child_env(), "EFFACE_ORIGIN": url},
    )


async def _call(client: Client, name: str, args: dict[str, Any]) -> dict:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def test_mcp_on_a_postgres_origin_forgets_and_proves(pg_db, tmp_path):
    url = pg_db.url.replace("@", f":{PASSWORD}@", 1)
    kek = tmp_path / "store.kek"  # created by the first server, with a warning to back it up

    async def first() -> tuple[dict, dict, list[dict]]:
        async with Client(_params(url, kek)) as client:
            await _call(client, "remember", {"key": "alice/tea", "text": "Alice prefers green tea", "subject": "alice"})
            await _call(client, "remember", {"key": "bob/tea", "text": "Bob prefers black tea", "subject": "bob"})
            hits = (await _call(client, "recall", {"query": "green tea"}))["hits"]
            receipt = await _call(client, "forget", {"subject": "alice"})
            waited = await _call(client, "wait_erasure", {"handle": receipt["handle"], "timeout_s": 120})
            verified = await _call(client, "verify_erasure", {"handle": receipt["handle"]})
            return receipt, {"waited": waited, "verified": verified}, hits

    receipt, proof, hits = asyncio.run(first())
    assert hits[0]["key"] == "alice/tea" and hits[0]["text"] == "Alice prefers green tea"
    assert receipt["erased"] == ["alice/tea"] and receipt["level"] in ("intent", "unreadable")
    assert proof["waited"]["erased"] is True
    verified = proof["verified"]
    assert verified["failed"] == []
    # erased only where every copy was checked: the test server's data directory is readable here
    assert verified["level"] == "erased", verified
    assert kek.exists()

    async def second() -> tuple[list[dict], dict]:
        async with Client(_params(url, kek)) as client:
            hits = (await _call(client, "recall", {"query": "green tea"}))["hits"]
            status = await _call(client, "erasure_status", {"handle": receipt["handle"]})
            return hits, status

    hits, status = asyncio.run(second())
    assert [h["key"] for h in hits] == ["bob/tea"]  # the other server serves nothing of alice
    assert status["level"] == "erased"

    with efface.open(pg_db.url, kek_file=kek, embedder="hashing", background=False) as store:
        assert store.read("alice/tea", tenant="acme", purpose="support") is None
        assert store.read("bob/tea", tenant="acme", purpose="support").text == "Bob prefers black tea"


def test_mcp_origin_errors_name_no_password(pg_db, tmp_path):
    """A missing KEK file for an existing store is a clear error on stderr, never a new key,
    and the URL's password is not in it."""
    url = pg_db.url.replace("@", f":{PASSWORD}@", 1)
    kek = tmp_path / "store.kek"
    with (
        pytest.warns(KeyFileCreated, match="back this file up"),
        efface.open(pg_db.url, kek_file=kek, embedder="hashing", background=False) as store,
    ):
        store.write("k", "a note", tenant="acme", subject="s", purpose="support")
    missing = tmp_path / "nowhere.kek"
    proc = subprocess.run(
        [sys.executable, "-m", "efface", "mcp", "--kek-file", str(missing), "--embedder", "hashing"],
        env={**child_env(), "EFFACE_ORIGIN": url},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert PASSWORD not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "kek" in proc.stderr.lower()
