"""``efface gate proxy``: the agent-side gate as an MCP server in front of another MCP memory
server (the proxy itself is :mod:`efface.gate.proxy`). Over stdio the protocol owns stdout;
logs go to stderr and name tools, never their arguments."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from typing import Any

import click

from .base import FiniteRange, UserPath, cli


def _default_state() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "efface", "gate-proxy.db")


@cli.group("gate")
def gate() -> None:
    """The agent-side gate in front of memory tools that are not efface (see docs/gate-proxy.md)."""


@gate.command("proxy", context_settings={"ignore_unknown_options": True})
@click.option(
    "--state",
    metavar="FILE",
    type=UserPath(dir_okay=False),
    envvar="EFFACE_GATE_STATE",
    show_envvar=True,
    help="The gate's state file (erasures as keyed hashes, and the handles); default "
    "$XDG_STATE_HOME/efface/gate-proxy.db.",
)
@click.option(
    "--settle",
    metavar="SECONDS",
    type=FiniteRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds after a delete's answer before sentinel probes may settle it and allow reads in its scope.",
)
@click.option(
    "--map",
    "map_file",
    metavar="FILE",
    type=UserPath(dir_okay=False),
    help="A JSON mapping file: upstream tool name -> kind (delete/read/write/other), scope argument, targets.",
)
@click.option("--upstream-url", metavar="URL", help="An upstream served over streamable HTTP instead of a command.")
@click.option(
    "--header",
    "headers",
    metavar="'NAME: VALUE'",
    multiple=True,
    help="With --upstream-url: a header sent to the upstream (repeat), e.g. 'Authorization: Bearer efk_...'.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]...")
def proxy(state, settle, map_file, upstream_url, headers, command) -> None:
    """Serve an MCP memory server's tools through the gate, over stdio.

    The upstream is COMMAND (started with this process's environment, spoken to over its stdio)
    or --upstream-url. Deletes are forwarded and answered with a handle (intent, not proof);
    reads in a scope with an unsettled delete are refused until the settling interval has
    passed and sentinel probes through the upstream's read tools come back clean.
    forget_status and verify_erasure say what is proven. See docs/gate-proxy.md.
    """
    import anyio

    from efface.gate.upstream import load_mapping

    if bool(command) == bool(upstream_url):
        raise click.UsageError(
            "give the upstream as a command (after a double dash) or as --upstream-url URL, one of them"
        )
    if headers and not upstream_url:
        raise click.UsageError("--header goes with --upstream-url: an upstream command is spoken to over stdio")
    parsed = {}
    for header in headers:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise click.UsageError("--header takes 'NAME: VALUE'")
        parsed[name.strip()] = value.strip()
    mapping = load_mapping(map_file) if map_file else None
    state = state or _default_state()
    os.makedirs(os.path.dirname(os.path.abspath(state)), exist_ok=True)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="efface gate proxy: %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    client = (
        _upstream_client(list(command), headers=parsed)
        if command
        else _upstream_client(url=upstream_url, headers=parsed)
    )
    anyio.run(lambda: _serve_stdio(client, state, settle_s=settle, mapping=mapping))


def _upstream_client(
    command: list[str] | None = None, *, url: str | None = None, headers: dict[str, str] | None = None
) -> Any:
    """The SDK client for an upstream: a command started over stdio (with this process's
    environment, so an ``env`` given to the proxy reaches it), or a streamable HTTP URL. Its
    response cache is off: a read answered from a cache would be a path the gate cannot see."""
    if (command is None) == (url is None):
        raise ValueError("give an upstream command or a URL, not both")
    if url is not None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=300))
        return Client(streamable_http_client(url, http_client=http), cache=None)
    from mcp import Client, StdioServerParameters

    assert command
    return Client(StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ)), cache=None)


async def _serve_stdio(upstream: Any, state_path: str, *, settle_s: float, mapping: dict | None) -> None:
    """Connect to the upstream, list its tools, and serve the proxy over this process's stdio
    until the client disconnects."""
    from mcp.server.stdio import stdio_server

    from efface.gate.proxy import GateProxy

    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(upstream)
        except Exception:  # a raw traceback (an ExceptionGroup of the SDK's task groups) before
            raise click.ClickException(
                "the upstream MCP server could not be reached, or closed the connection before it answered: "
                "check the command (it must speak MCP over stdio) or --upstream-url, and its headers"
            ) from None
        proxy = GateProxy(upstream, state_path, settle_s=settle_s, mapping=mapping)
        try:
            await proxy.load_tools()
            async with stdio_server() as (read, write):
                await proxy.server.run(read, write, proxy.server.create_initialization_options())
        finally:
            proxy.close()
