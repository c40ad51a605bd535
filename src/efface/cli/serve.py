"""``efface serve`` (the HTTP API, and the MCP server at ``/mcp`` when it is installed) and
``efface keys create|list|revoke`` (the API key ring).

``keys`` opens only the key ring, never the store nor the embedder, so it works in a second
terminal while ``efface serve`` holds the store, and a revocation takes effect on the server's
next request. An embedded store's ring is ``DIR.keys.db`` beside its directory
(:class:`~efface.service.keys.KeyRing`); a PostgreSQL store's (``--origin URL``) is in its
database (:class:`~efface.service.pgkeys.PgKeyRing`), shared by every server of the store.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

import efface
from efface.service.keys import ApiKey, KeyRing, Ring, key_path

from .base import (
    FiniteRange,
    Settings,
    _common_options,
    _emit,
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


def open_ring(settings: Settings) -> Ring:
    """The key ring of the store of ``--store DIR`` (``DIR.keys.db``) or ``--origin URL`` (its
    database), opened alone: no store, no embedder."""
    where = store_location(settings)
    if settings.origin:
        from efface.service.pgkeys import PgKeyRing

        return PgKeyRing(where, kek_file=settings.kek_file)
    os.makedirs(os.path.dirname(os.path.abspath(where)) or ".", exist_ok=True)
    return KeyRing(key_path(where))


def _ring() -> Ring:
    return click.get_current_context().with_resource(open_ring(_settings()))


def _no_local_ring() -> bool:
    """Whether ``--store DIR`` has no key ring yet (``keys list`` and ``keys revoke`` then
    change nothing: they made ``DIR.keys.db``, and its parent directories, for a mistyped DIR)."""
    settings = _settings()
    where = store_location(settings)
    return not settings.origin and not os.path.exists(key_path(where))


def _key_doc(k: ApiKey) -> dict:
    return {"id": k.id, "tenant": k.tenant, "label": k.label, "created_at": k.created_at}


def _mcp_hook(
    store: efface.Store, ring: Ring, host: str, purpose: str | None = None, forget_everything: bool = False
) -> Any:
    """The MCP streamable-HTTP app and its lifespan, when efface's MCP server is installed."""
    try:
        mcp_module = importlib.import_module("efface.service.mcp")
    except ImportError:
        return None
    make = getattr(mcp_module, "mcp_http_app", None)
    return None if make is None else make(store, ring, host=host, purpose=purpose, forget_everything=forget_everything)


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A float option's value, refused when NaN (which passes every range check)."""
    if value != value:
        raise click.BadParameter("must be a number of seconds, not NaN", ctx=ctx, param=param)
    return value


@cli.command()
@host_option()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8750,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--max-body",
    type=click.IntRange(min=1),
    default=4 << 20,
    show_default=True,
    help="Largest request body accepted, in bytes.",
)
@click.option(
    "--max-wait",
    type=FiniteRange(0.0, 86400.0),
    callback=_finite,
    default=30.0,
    show_default=True,
    help="Longest a /v1/wait request blocks, in seconds.",
)
@click.option("--no-access-log", is_flag=True, help="Do not log requests (method, path and status only anyway).")
@click.option(
    "--purpose",
    envvar="EFFACE_PURPOSE",
    show_envvar=True,
    help="/mcp: the purpose remember, read and recall use when the agent names none (the /v1 routes take theirs "
    "in each request).",
)
@click.option(
    "--allow-forget-everything",
    "forget_everything",
    is_flag=True,
    help="/mcp: let the forget tool take everything=true (forget the key's whole tenant): for a tenant per person.",
)
@embedder_option()
@click.option(
    "--store",
    metavar="DIR",
    expose_value=False,
    callback=_setter("store"),
    help="The store's directory (or EFFACE_STORE; created if missing).",
)
@origin_options()
@_common_options(store=False)
def serve(host, port, max_body, max_wait, no_access_log, purpose, forget_everything) -> None:
    """Serve the store over HTTP (/v1/..., /docs, /openapi.json; /mcp when available) until
    interrupted. Clients need an API key: `efface keys create --tenant T`. A new store gets
    the best embedder installed (MiniLM with the minilm extra); `--embedder hashing` serves
    without a model.

    With --origin postgresql://... (and --kek-file) the store is in that database: start as
    many servers on it as you like (each on its own port); they share the store and its API
    keys, and a forget acknowledged by one is never served by another (docs/postgres.md)."""
    require_serve("efface serve")
    import uvicorn

    from efface.service.http import create_app
    from efface.service.runner import serving_interpreter, uvicorn_config

    settings = _settings()
    store_location(settings)  # a usage error before anything is opened
    for name, told in (
        ("tenant", "--tenant: every API key acts for its own tenant (efface keys create --tenant T)"),
        ("url", "--url: the server serves its --store or --origin"),
    ):
        if getattr(settings, name) and name not in settings.from_env:
            # Taken and ignored, --tenant read as if the server were limited to that tenant.
            raise click.UsageError(f"efface serve takes no {told}")
    logging.basicConfig(level=logging.INFO)
    serving_interpreter()
    with open_store(settings) as store, open_ring(settings) as ring:
        if settings.origin:
            from efface.service.pgkeys import redact

            logging.getLogger("efface.serve").info("serving the PostgreSQL store at %s", redact(settings.origin))
        app = create_app(
            store,
            ring,
            max_body=max_body,
            max_wait=max_wait,
            mcp=_mcp_hook(store, ring, host, purpose, forget_everything),
        )
        uvicorn.Server(uvicorn_config(app, host, port, access_log=not no_access_log)).run()


def _key_options(tenant_help: str | None) -> Callable:
    """What the keys commands take: the store (whose key ring they open), a tenant (when
    ``tenant_help`` says what it is for) and --json; not the server or embedder options,
    which they never use."""

    def decorate(f: Callable) -> Callable:
        if tenant_help is not None:
            f = click.option(
                "--tenant", metavar="TENANT", expose_value=False, callback=_tenant_setter, help=tenant_help
            )(f)
        f = click.option(
            "--store",
            metavar="DIR",
            expose_value=False,
            callback=_setter("store"),
            help="The store's directory (or EFFACE_STORE); its key ring is DIR.keys.db beside it.",
        )(f)
        f = origin_options()(f)
        return _common_options(store=False)(f)

    return decorate


def _date(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


@cli.group()
def keys() -> None:
    """API keys for `efface serve`: each acts for exactly one tenant; only hashes are kept.

    With --store DIR they live in DIR.keys.db beside the store; with --origin URL in the
    PostgreSQL store's database (its tenant names sealed: give --kek-file), where every
    server of the store sees a new or revoked key from its next request."""


@keys.command("create")
@click.option("--label", help="A note on who or what holds the key.")
@_key_options("The one tenant the key acts for (required).")
def keys_create(label) -> None:
    """Make a key for --tenant (required) and print it. It is shown this once: keep it now."""
    tenant = _settings().tenant
    if not tenant:
        raise click.UsageError("name the key's tenant: efface keys create --tenant T")
    token, key = _ring().create(tenant, label=label)

    def human(out: Console) -> None:
        click.echo(token)
        out.print(f"key {key.id} for its tenant; shown once, only its hash is kept", style="dim", highlight=False)

    _emit({"key": token, **_key_doc(key)}, human)


@keys.command("list")
@_key_options("List only this tenant's keys.")
def keys_list() -> None:
    """List keys (ids, tenants, labels; never the keys themselves); --tenant narrows it."""
    found = [] if _no_local_ring() else _ring().list(tenant=_settings().tenant)

    def human(out: Console) -> None:
        table = Table("id", "tenant", "label", "created")
        for k in found:
            table.add_row(k.id, k.tenant, k.label or "-", _date(k.created_at))
        out.print(table)

    _emit({"keys": [_key_doc(k) for k in found]}, human)


@keys.command("revoke")
@click.argument("key_id")
@_key_options(None)
def keys_revoke(key_id) -> None:
    """Revoke the key KEY_ID (or the key itself): it stops working at the next request."""
    if _no_local_ring():
        raise efface.NotFound("no key ring beside that store: it has no keys to revoke (check --store)")
    key = _ring().revoke(key_id)
    _emit({"revoked": key.id}, lambda out: out.print(f"key {key.id} revoked"))
