"""The CLI's frame: the ``efface`` click group, the common options, and the one edge where
library errors become exit codes. The commands live in :mod:`.app` and :mod:`.admin`."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console

import efface
from efface.errors import EffaceError, InvalidInput, ScopeError

from .render import (
    console,
)
from .usage import Refused, quiet

DEFAULT_TENANT = "default"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


@dataclass
class Settings:
    """The common options, gathered from the group and the command (the command wins)."""

    store: str | None = None
    origin: str | None = None
    kek_file: str | None = None
    url: str | None = None
    api_key: str | None = None
    tenant: str | None = None
    embedder: str | None = None
    json: bool = False
    from_env: set[str] = field(default_factory=set)
    """The fields whose value came from an environment variable (EFFACE_URL, ...)."""


# -- the edge: errors -> exit codes ---------------------------------------------------------
def _json_requested(args: Iterable[str]) -> bool:
    args = list(args)
    if "--" in args:
        args = args[: args.index("--")]
    return "--json" in args


def _fail(ctx: click.Context, kind: str, message: str, code: int) -> None:
    if ctx.meta.get("efface.json"):
        # After the command's own document (closing the store failed: a full disk), the error
        # goes to stderr, so stdout still holds exactly one document.
        emitted = ctx.meta.get("efface.emitted", False)
        click.echo(json.dumps({"error": {"type": kind, "message": message}}, ensure_ascii=False), err=emitted)
    else:
        click.echo(f"Error: {message}", err=True)
    ctx.exit(code)


class EffaceGroup(click.Group):
    """The root group: translates efface errors (and, under ``--json``, usage errors)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Known before parsing, so even a usage error can be answered as JSON.
        ctx.meta["efface.json"] = _json_requested(args)
        ctx.meta["efface.args"] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:  # an option of the root group itself
            self._usage(ctx, exc)
            raise  # pragma: no cover - _usage always raises

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EffaceError as exc:
            bad_input = isinstance(exc, (InvalidInput, ScopeError))
            _fail(ctx, type(exc).__name__, str(exc), EXIT_BAD_INPUT if bad_input else EXIT_FAILED)
        except click.ClickException as exc:
            self._usage(ctx, exc)

    @staticmethod
    def _usage(ctx: click.Context, exc: click.ClickException) -> None:
        told = quiet(ctx, exc)
        if not ctx.meta.get("efface.json"):
            raise told from None
        kind = "BadParameter" if isinstance(exc, Refused) else type(exc).__name__  # click's name for it
        _fail(ctx, kind, told.format_message(), exc.exit_code)


SERVE_MODULES = ("fastapi", "uvicorn", "mcp", "starlette", "anyio")
"""What ``efface serve`` and ``efface mcp`` import: the ``serve`` extra (httptools and uvloop,
also in it, are what uvicorn picks up when present; it runs without them)."""


def require_serve(command: str) -> None:
    """Refuse ``command`` with the install line when the ``serve`` extra is missing: the
    library, the client and every other command work without it."""
    missing = []
    for name in SERVE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise click.ClickException(
            f"{command} needs efface's service stack, which is not installed (missing: {', '.join(missing)}): "
            "pip install 'efface[serve]' (from a clone: pip install -e \".[serve]\")"
        )


# -- common options ----------------------------------------------------------------------------
class UserPath(click.Path):
    """A file or directory option as ``click.Path``, with a leading ``~`` or ``~user`` expanded
    as a shell would (``--out=~/x``, a quoted ``"~/x"`` or a variable holding one reach a
    command unexpanded)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = os.path.expanduser(value)
        return super().convert(value, param, ctx)


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN (which compares false with both bounds, so
    the range let it through) and infinities."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        got = super().convert(value, param, ctx)
        if not math.isfinite(got):
            self.fail("must be a finite number", param, ctx)
        return got


PATH_FIELDS = ("store", "kek_file")
"""The settings that name a file or directory: a leading ``~`` is expanded (:class:`UserPath`)."""


def _setter(name: str) -> Callable:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        settings = ctx.ensure_object(Settings)
        if value is not None and value is not False:
            if name in PATH_FIELDS and isinstance(value, str):
                value = os.path.expanduser(value)
            setattr(settings, name, value)
            if param.name is not None and ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT:
                settings.from_env.add(name)
            else:
                settings.from_env.discard(name)

    return callback


def _tenant_setter(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """``--tenant``; a blank one given on the command line (``--tenant "$T"`` with ``T``
    unset) is refused rather than taken for the default tenant, where it would act on the
    wrong tenant's records. (An empty ``EFFACE_TENANT`` is unset, as click reads it.)"""
    if isinstance(value, str) and not value.strip():
        raise Refused("must not be empty: name a tenant, or leave --tenant out for the default one")
    _setter("tenant")(ctx, param, value)


def host_option(default: str = "127.0.0.1", help: str = "Address to listen on (loopback by default).") -> Callable:
    """A server's ``--host``. A blank one (``--host "$HOST"`` with ``HOST`` unset) is refused:
    uvicorn and asyncio take ``""`` for every interface, so it served the store to the whole
    network where the default serves this machine only."""

    def check(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise Refused(
                "must not be empty: name the address to bind (127.0.0.1 for this machine only, "
                "0.0.0.0 for every interface)"
            )
        return value

    return click.option("--host", default=default, show_default=True, callback=check, help=help)


def embedder_option() -> Callable:
    """A command's ``--embedder``: the embedder of a store it creates."""
    return click.option(
        "--embedder",
        type=click.Choice(["hashing", "minilm"]),
        expose_value=False,
        callback=_setter("embedder"),
        help="Embedder for a new store (default: the store's own, else the best installed).",
    )


def origin_options() -> Callable:
    """A command's ``--origin URL`` and ``--kek-file FILE`` (see :func:`_origin_options`)."""

    def decorate(f: Callable) -> Callable:
        for option in reversed(_origin_options()):
            f = option(f)
        return f

    return decorate


def _origin_options(*, root: bool = False) -> list[Callable]:
    """``--origin URL`` and ``--kek-file FILE``: a store in a PostgreSQL database instead of
    ``--store DIR`` (docs/postgres.md). On the root group they read the environment."""

    def env(name: str) -> dict:
        return {"envvar": name, "show_envvar": True} if root else {}

    return [
        click.option(
            "--origin",
            metavar="URL",
            expose_value=False,
            callback=_setter("origin"),
            help="A store in PostgreSQL (postgresql://user@host/db; or EFFACE_ORIGIN) instead of --store DIR; "
            "several efface servers and commands may share it. A password in it is never printed; give the "
            "URL with one in EFFACE_ORIGIN, or the password in PGPASSFILE or PGPASSWORD, never here: ps shows "
            "command lines to every user.",
            **env("EFFACE_ORIGIN"),
        ),
        click.option(
            "--kek-file",
            metavar="FILE",
            expose_value=False,
            callback=_setter("kek_file"),
            help="With --origin: the key-encryption key file every server of the store shares (or "
            "EFFACE_KEK_FILE), holding its keys and hash secret; created on the store's first use, with a "
            "warning to back it up: without it nothing in the store can be read or found by name.",
        ),
    ]


def _common_options(*, root: bool = False, store: bool = True, remote: bool = True) -> Callable:
    """The shared options. On the root group they read the environment; on a command they
    override what the root was given. ``remote=False``: a command that works on the store's
    own files only (``backup``, ``compact``, ...) offers no ``--url`` or ``--api-key``."""

    def env(name: str) -> dict:
        return {"envvar": name, "show_envvar": True} if root else {}

    def decorate(f: Callable) -> Callable:
        options = [
            click.option(
                "--json",
                "json_",
                is_flag=True,
                default=False,
                expose_value=False,
                callback=_setter("json"),
                help="Print exactly one JSON document on stdout (errors too) instead of tables.",
            ),
        ]
        if store:
            options += [
                click.option(
                    "--store",
                    metavar="DIR",
                    expose_value=False,
                    callback=_setter("store"),
                    help="The store's directory (created if missing).",
                    **env("EFFACE_STORE"),
                ),
                *_origin_options(root=root),
            ]
        if store and remote:
            options += [
                click.option(
                    "--url",
                    metavar="URL",
                    expose_value=False,
                    callback=_setter("url"),
                    help="Talk to a running `efface serve` instead of opening --store (no model is loaded).",
                    **env("EFFACE_URL"),
                ),
                click.option(
                    "--api-key",
                    metavar="KEY",
                    expose_value=False,
                    callback=_setter("api_key"),
                    help="The API key for --url (from `efface keys create`).",
                    **env("EFFACE_API_KEY"),
                ),
            ]
        if store:
            options += [
                click.option(
                    "--tenant",
                    metavar="TENANT",
                    expose_value=False,
                    callback=_tenant_setter,
                    help=f"Tenant to act in (default: '{DEFAULT_TENANT}').",
                    **env("EFFACE_TENANT"),
                ),
                embedder_option(),
            ]
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def _settings() -> Settings:
    return click.get_current_context().ensure_object(Settings)


def _tenant() -> Any:
    settings = _settings()
    if settings.url:  # a server acts for the API key's tenant; --tenant may only restate it
        return settings.tenant
    return settings.tenant or DEFAULT_TENANT


def _open() -> Any:
    """Open the store for this one command; it is closed (and compacted) when the command ends.
    With ``--url`` (``EFFACE_URL``) it is a client of that server instead: the same methods,
    no model loaded, the store left to the server. A server and a store named together
    (``--url`` with ``--store`` or ``--origin``, from the command line or the environment) is
    a usage error: which one was meant cannot be guessed, and the URL is never repeated."""
    settings = _settings()
    ctx = click.get_current_context()
    if settings.url:
        if settings.store or settings.origin:
            raise click.UsageError(
                "give either --url URL (a running server) or --store DIR / --origin URL (a store opened here), "
                "not both: the environment counts too (EFFACE_URL, EFFACE_STORE, EFFACE_ORIGIN); unset the one "
                "you do not mean"
            )
        return ctx.with_resource(efface.Client(settings.url, api_key=settings.api_key))
    return ctx.with_resource(open_store(settings, background=False))


def _open_local() -> efface.Store:
    """:func:`_open` for a command that works on the store's own files (``backup``, ``restore``,
    ``compact``, ``sweep``), which a server's client cannot do, so it offers no ``--url``. A
    server named with no store (``EFFACE_URL``, or the root's ``--url``) is refused with where
    to run it (``RemoteUnsupported``, as the client refuses it); a root ``--url`` given with a
    store is the usage error :func:`_open` gives; ``EFFACE_URL`` beside a store is not its
    concern (it opens the store)."""
    from efface.service.wire import RemoteUnsupported

    settings = _settings()
    ctx = click.get_current_context()
    name = ctx.command_path.removeprefix(ctx.find_root().info_name or "efface").strip()
    if settings.url and not (settings.store or settings.origin):
        raise RemoteUnsupported(
            f"{name} works on the store's own files: run it where the store is "
            "(`efface --store DIR ...` on the server's machine), not through a server's --url or EFFACE_URL"
        )
    if settings.url and "url" not in settings.from_env:
        raise click.UsageError(
            f"give either --url URL or --store DIR / --origin URL, not both; {name} works on the store's own "
            "files, so it takes --store DIR (or --origin URL) only"
        )
    return ctx.with_resource(open_store(settings, background=False))


def store_location(settings: Settings) -> str:
    """The store named by ``--origin URL`` or ``--store DIR`` (exactly one), else a usage error."""
    if settings.origin and settings.store:
        raise click.UsageError("give either --store DIR or --origin URL (EFFACE_STORE or EFFACE_ORIGIN), not both")
    if settings.origin:
        if not settings.origin.startswith(POSTGRES_SCHEMES):
            raise click.UsageError("--origin takes a postgresql:// URL (a directory is --store DIR)")
        return settings.origin
    if not settings.store:
        raise click.UsageError(
            "no store given: pass --store DIR or set EFFACE_STORE (or --origin URL of a PostgreSQL store, "
            "or --url URL of a running server)"
        )
    if settings.kek_file:
        raise click.UsageError("--kek-file goes with --origin URL (a PostgreSQL store); a --store DIR has none")
    return settings.store


def open_store(settings: Settings, **options: Any) -> efface.Store:
    """Open the store of ``--store DIR`` or ``--origin URL`` (with ``--kek-file``)."""
    where = store_location(settings)
    if settings.origin:
        options["kek_file"] = settings.kek_file
    return efface.open(where, embedder=settings.embedder, **options)


def write_out(path: str, text: str, *, overwrite: bool, what: str) -> None:
    """Write ``text`` to the file ``path`` given on the command line: an existing file is
    refused unless ``overwrite`` (as ``efface backup`` refuses one), and a file that cannot be
    written is a typed error naming ``what`` (not a traceback, not the path)."""
    try:
        with open(path, "w" if overwrite else "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise InvalidInput(f"{what} exists already: choose another file, or pass --overwrite to replace it") from None
    except IsADirectoryError:
        raise InvalidInput(f"{what} is a directory: give a file path") from None
    except OSError as exc:
        raise InvalidInput(f"{what} could not be written ({exc.strerror or type(exc).__name__})") from None


def refuse_existing(path: str | os.PathLike | None, *, overwrite: bool, what: str) -> None:
    """Refuse, before any work, an output file that exists (see :func:`write_out`)."""
    if path is not None and not overwrite and os.path.lexists(path):
        raise InvalidInput(f"{what} exists already: choose another file, or pass --overwrite to replace it")


def _stdin_text() -> str:
    """TEXT given as '-': standard input in its encoding, or a typed error when it is not."""
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"standard input is not valid {exc.encoding} text: convert it to {exc.encoding} first "
            "(for example with iconv), or set PYTHONIOENCODING to the encoding it is in"
        ) from None


def _emit(doc: Any, human: Callable[[Console], None]) -> None:
    """One JSON document, or the human rendering. Never both."""
    if _settings().json:
        click.echo(json.dumps(doc, ensure_ascii=False, indent=2))
        click.get_current_context().meta["efface.emitted"] = True
    else:
        human(console())


# -- commands ------------------------------------------------------------------------------------
@click.group("efface", cls=EffaceGroup, context_settings={"help_option_names": ["-h", "--help"]})
@_common_options(root=True)
@click.version_option(efface.__version__, prog_name="efface", help="Show the version and exit.")
def cli() -> None:
    """efface: a memory store for AI agents whose forget can be proven.

    Write memories, read and recall them, forget them by subject, purpose, key prefix or
    key, and follow each erasure through every read path with its receipt.

    What efface promises (the incidents it answers, claims and selectors, the invariants,
    the evidence ladder intent -> unreadable -> erased): docs/concepts.md in efface's
    repository. What it measured: docs/benchmarks.md. `efface demo` replays the incidents.
    """
