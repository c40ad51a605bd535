"""``efface mcp``: serve a store to agents as an MCP server, over stdio or streamable HTTP.

Over stdio the protocol owns stdout: nothing else is written there (the SDK moves file
descriptor 1 aside while it serves, and the store is opened with Python's stdout sent to
stderr), and logs go to stderr without personal data. The tools are
:mod:`efface.service.mcp`'s.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys

import click
from click.core import ParameterSource

from efface.service.keys import KeyRing

from .base import (
    DEFAULT_TENANT,
    Settings,
    UserPath,
    _setter,
    _settings,
    _tenant_setter,
    cli,
    embedder_option,
    host_option,
    open_store,
    origin_options,
    require_serve,
    store_location,
)


@cli.command("mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: one client (its tenant is --tenant); http: streamable HTTP, each API key acts for its tenant.",
)
@host_option(help="HTTP: the address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="HTTP: the port to bind.")
@click.option("--path", default="/mcp", show_default=True, help="HTTP: the MCP endpoint's path.")
@click.option(
    "--store",
    metavar="DIR",
    expose_value=False,
    callback=_setter("store"),
    help="The store's directory (or EFFACE_STORE).",
)
@origin_options()
@click.option(
    "--tenant",
    metavar="TENANT",
    expose_value=False,
    callback=_tenant_setter,
    help=f"stdio: the tenant every tool acts in (or EFFACE_TENANT; default '{DEFAULT_TENANT}'). Not used over HTTP.",
)
@click.option(
    "--purpose",
    envvar="EFFACE_PURPOSE",
    show_envvar=True,
    help="The purpose remember, read and recall use when the agent names none.",
)
@embedder_option()
@click.option(
    "--keys",
    "keys_file",
    metavar="FILE",
    type=UserPath(dir_okay=False),
    help="HTTP: the API key ring (default: DIR.keys.db beside the store's directory DIR; with --origin, the "
    "store's database).",
)
@click.option(
    "--allow-forget-everything",
    "forget_everything",
    is_flag=True,
    help="Let the forget tool take everything=true (forget the whole tenant): for a tenant that is one person.",
)
def mcp(transport, host, port, path, purpose, keys_file, forget_everything) -> None:
    """Serve the store to agents over MCP (tools: remember, recall, forget with its receipt, ...).

    See docs/mcp.md for a client's configuration. Runs until the client disconnects (stdio)
    or until interrupted (http).
    """
    require_serve("efface mcp")
    settings = _settings()
    store_location(settings)  # a usage error before anything starts
    ctx = click.get_current_context()
    given = [
        n for n in ("host", "port", "path", "keys_file") if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE
    ]
    if transport == "stdio" and given:
        # They were taken and ignored: a stdio server binds nothing.
        raise click.UsageError("--host, --port, --path and --keys go with --transport http")
    if transport == "http" and settings.tenant and "tenant" not in settings.from_env:
        # Taken and ignored, it read as if the server were limited to that tenant: every key's works.
        raise click.UsageError(
            "--tenant goes with --transport stdio: over HTTP each API key acts for its own tenant "
            "(make keys with efface keys create --tenant T)"
        )
    if settings.origin and keys_file:
        raise click.UsageError(
            "--keys names an embedded store's key ring; an --origin store's keys are in its database"
        )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="efface mcp: %(levelname)s %(message)s")
    # SIGTERM (what a client or a supervisor sends) ends the server like a normal exit, so the store
    # is closed (its compactor stopped, its lock released) on the way out. uvicorn re-raises the
    # signal after its graceful shutdown, to this handler.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from efface.service.runner import serving_interpreter

    serving_interpreter()
    if transport == "stdio":
        _stdio(settings, settings.tenant or DEFAULT_TENANT, purpose, forget_everything)
    else:
        if settings.tenant:
            click.echo("efface mcp: over HTTP each API key names its tenant; --tenant is not used", err=True)
        _http(settings, keys_file, host, port, path, purpose, forget_everything)


def _stdio(settings: Settings, tenant: str, purpose: str | None, forget_everything: bool) -> None:
    from efface.service.mcp import build_mcp

    # A model loading may print; stdout is the protocol's from the first byte.
    with contextlib.redirect_stdout(sys.stderr):
        store = open_store(settings)
    with store:
        build_mcp(store, tenant=tenant, purpose=purpose, forget_everything=forget_everything).run("stdio")


def _http(
    settings: Settings,
    keys_file: str | None,
    host: str,
    port: int,
    path: str,
    purpose: str | None,
    forget_everything: bool,
) -> None:
    import uvicorn

    from efface.service.mcp import mcp_http_app

    from .serve import open_ring

    ring = KeyRing(keys_file) if keys_file else open_ring(settings)
    with open_store(settings) as store, ring:
        # The SDK's app runs its own lifespan (the session manager) when served alone.
        app, _lifespan = mcp_http_app(
            store, ring, path=path, host=host, purpose=purpose, forget_everything=forget_everything
        )
        click.echo(f"efface mcp: serving http://{host}:{port}{path}", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning")
