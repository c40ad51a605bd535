"""The ``efface`` command line: parse, call the library, render. Nothing else.

Every command takes ``--store DIR`` (or ``EFFACE_STORE``), ``--tenant`` (or
``EFFACE_TENANT``), ``--embedder`` and ``--json``, before or after the command name.
With ``--json`` a command prints exactly one JSON document on stdout, errors included
(``{"error": {"type": ..., "message": ...}}``). Library errors are turned into exit codes
here and nowhere else: 2 for bad input or scope (as click does for usage errors), 1 for
the rest.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.text import Text

import efface
from efface.errors import EffaceError, InvalidInput, ScopeError

from .render import (
    console,
    fmt_time,
    hits_table,
    kv_table,
    ledger_table,
    paths_table,
    quarantine_table,
    receipts_table,
    render_receipt,
    render_status,
    render_verification,
)

DEFAULT_TENANT = "default"

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


@dataclass
class Settings:
    """The common options, gathered from the group and the command (the command wins)."""

    store: str | None = None
    tenant: str | None = None
    embedder: str | None = None
    json: bool = False


# -- the edge: errors -> exit codes ---------------------------------------------------------
def _json_requested(args: Iterable[str]) -> bool:
    args = list(args)
    if "--" in args:
        args = args[: args.index("--")]
    return "--json" in args


def _fail(ctx: click.Context, kind: str, message: str, code: int) -> None:
    if ctx.meta.get("efface.json"):
        click.echo(json.dumps({"error": {"type": kind, "message": message}}, ensure_ascii=False))
    else:
        click.echo(f"Error: {message}", err=True)
    ctx.exit(code)


class EffaceGroup(click.Group):
    """The root group: translates efface errors (and, under ``--json``, usage errors)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Known before parsing, so even a usage error can be answered as JSON.
        ctx.meta["efface.json"] = _json_requested(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EffaceError as exc:
            bad_input = isinstance(exc, (InvalidInput, ScopeError))
            _fail(ctx, type(exc).__name__, str(exc), EXIT_BAD_INPUT if bad_input else EXIT_FAILED)
        except click.ClickException as exc:
            if not ctx.meta.get("efface.json"):
                raise
            _fail(ctx, type(exc).__name__, exc.format_message(), exc.exit_code)


# -- common options ----------------------------------------------------------------------------
def _setter(field: str) -> Callable:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        settings = ctx.ensure_object(Settings)
        if value is not None and value is not False:
            setattr(settings, field, value)

    return callback


def _common_options(*, root: bool = False, store: bool = True) -> Callable:
    """The shared options. On the root group they read the environment; on a command they
    override what the root was given."""

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
                click.option(
                    "--tenant",
                    metavar="TENANT",
                    expose_value=False,
                    callback=_setter("tenant"),
                    help=f"Tenant to act in (default: '{DEFAULT_TENANT}').",
                    **env("EFFACE_TENANT"),
                ),
                click.option(
                    "--embedder",
                    type=click.Choice(["hashing", "minilm"]),
                    expose_value=False,
                    callback=_setter("embedder"),
                    help="Embedder for a new store (default: the store's own, else the best installed).",
                ),
            ]
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def _settings() -> Settings:
    return click.get_current_context().ensure_object(Settings)


def _tenant() -> str:
    return _settings().tenant or DEFAULT_TENANT


def _open() -> efface.Store:
    """Open the store for this one command; it is closed (and compacted) when the command ends."""
    settings = _settings()
    if not settings.store:
        raise click.UsageError("no store given: pass --store DIR or set EFFACE_STORE")
    ctx = click.get_current_context()
    return ctx.with_resource(efface.open(settings.store, embedder=settings.embedder, background=False))


def _emit(doc: Any, human: Callable[[Console], None]) -> None:
    """One JSON document, or the human rendering. Never both."""
    if _settings().json:
        click.echo(json.dumps(doc, ensure_ascii=False, indent=2))
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
    """


@cli.command()
@click.argument("key")
@click.argument("text")
@click.option("--subject", required=True, help="Whose data this is (the claim's subject).")
@click.option("--purpose", required=True, help="What it may be used for (the claim's purpose), e.g. support.")
@click.option(
    "--basis",
    default="consent",
    show_default=True,
    help="Why it may be kept: consent, contract, legal_obligation, legal_hold, ...",
)
@click.option("--ttl", type=float, help="Seconds until this claim expires (default: until forgotten).")
@click.option("--metadata", metavar="JSON", help="A JSON object stored with the record.")
@click.option(
    "--source", "sources", multiple=True, metavar="KEY", help="A key this record was derived from (repeat for several)."
)
@_common_options()
def write(key, text, subject, purpose, basis, ttl, metadata, sources) -> None:
    """Store TEXT under KEY with one claim. TEXT '-' reads it from stdin."""
    if text == "-":
        text = sys.stdin.read()
    meta = None
    if metadata is not None:
        try:
            meta = json.loads(metadata)
        except json.JSONDecodeError:
            raise InvalidInput('--metadata must be a JSON object, e.g. \'{"channel": "chat"}\'') from None
    store = _open()
    epoch = store.write(
        key,
        text,
        tenant=_tenant(),
        subject=subject,
        purpose=purpose,
        basis=basis,
        ttl=ttl,
        metadata=meta,
        sources=list(sources) or None,
    )
    _emit({"key": key, "epoch": epoch}, lambda out: out.print(f"written at epoch {epoch}"))


@cli.command()
@click.argument("key")
@click.option("--subject", required=True, help="Whose claim this is.")
@click.option("--purpose", required=True, help="The purpose the record is kept for.")
@click.option("--basis", required=True, help="Why it may be kept: consent, contract, legal_hold, ...")
@click.option("--ttl", type=float, help="Seconds until this claim expires (default: until forgotten).")
@_common_options()
def retain(key, subject, purpose, basis, ttl) -> None:
    """Add a claim (another reason to keep it) to the existing record KEY."""
    epoch = _open().retain(key, tenant=_tenant(), subject=subject, purpose=purpose, basis=basis, ttl=ttl)
    _emit({"key": key, "epoch": epoch}, lambda out: out.print(f"claim added at epoch {epoch}"))


@cli.command("register-subject")
@click.argument("subject")
@click.option(
    "--identifier",
    "identifiers",
    multiple=True,
    required=True,
    help="A name, e-mail, phone number or handle that names SUBJECT (repeat for several).",
)
@_common_options()
def register_subject(subject, identifiers) -> None:
    """Record the identifiers that name SUBJECT, so a forget finds records mentioning them."""
    epoch = _open().register_subject(subject, tenant=_tenant(), identifiers=list(identifiers))
    n = len(set(identifiers))
    _emit({"epoch": epoch, "identifiers": n}, lambda out: out.print(f"{n} identifier(s) registered at epoch {epoch}"))


@cli.command()
@click.argument("key")
@click.option("--purpose", required=True, help="The purpose you read for; only claims for it are visible.")
@_common_options()
def read(key, purpose) -> None:
    """Print the record under KEY. Exits 1 when there is none live for this purpose."""
    memory = _open().read(key, tenant=_tenant(), purpose=purpose)

    def human(out: Console) -> None:
        if memory is None:
            return
        out.print(
            kv_table(
                memory.key,
                [
                    ("text", memory.text),
                    ("metadata", json.dumps(dict(memory.metadata), ensure_ascii=False)),
                    ("sources", ", ".join(memory.sources) or "-"),
                    ("updated", fmt_time(memory.updated_at)),
                    (
                        "claims",
                        "; ".join(
                            f"{c.subject} / {c.purpose} / {c.basis} / until {fmt_time(c.expires_at)}"
                            for c in memory.claims
                        ),
                    ),
                ],
            )
        )

    _emit({"found": memory is not None, "memory": None if memory is None else memory.to_dict()}, human)
    if memory is None:
        if not _settings().json:
            click.echo("no live record under that key for this purpose", err=True)
        click.get_current_context().exit(EXIT_FAILED)


@cli.command()
@click.argument("query")
@click.option("--purpose", required=True, help="The purpose you recall for; only claims for it are visible.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="How many hits at most.")
@click.option("--subject", help="Only records with a live claim of this subject.")
@_common_options()
def recall(query, purpose, k, subject) -> None:
    """Find memories by meaning and by words for QUERY."""
    hits = _open().recall(query, tenant=_tenant(), purpose=purpose, subject=subject, k=k)

    _emit({"hits": [h.to_dict() for h in hits]}, lambda out: out.print(hits_table(hits)))


@cli.command()
@click.option("--subject", help="Release this subject's claims.")
@click.option("--purpose", help="Release claims for this purpose.")
@click.option("--prefix", help="Release claims on keys starting with this prefix.")
@click.option("--key", help="Release claims on this one key.")
@_common_options()
def forget(subject, purpose, prefix, key) -> None:
    """Release the claims the selector names; erase records left with none; print the receipt.

    Name at least one of --subject, --purpose, --prefix, --key (they combine with AND).
    """
    receipt = _open().forget(tenant=_tenant(), subject=subject, purpose=purpose, prefix=prefix, key=key)
    doc = receipt.to_dict()
    _emit(doc, lambda out: render_receipt(out, doc))


@cli.command()
@click.argument("handle")
@_common_options()
def status(handle) -> None:
    """Show how far the erasure HANDLE has gone through every read path, now."""
    doc = _open().status(handle).to_dict()
    _emit(doc, lambda out: render_status(out, doc))


@cli.command()
@click.argument("handle")
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait at most. Exits 1 if the erasure is not done by then.",
)
@click.option(
    "--until",
    type=click.Choice(["erased", "absorbed"]),
    default="erased",
    show_default=True,
    help="erased: until its bytes are gone from every file; absorbed: until every read path absorbed it.",
)
@_common_options()
def wait(handle, timeout, until) -> None:
    """Drive the erasure HANDLE through every path and wait until it is done (then `efface verify`)."""
    st = _open().wait(handle, timeout=timeout, until=until)
    doc = st.to_dict()
    _emit(doc, lambda out: render_status(out, doc))
    if not (st.erased if until == "erased" else st.settled):
        if not _settings().json:
            click.echo(f"not {until} within the timeout: run `efface wait` again or check the paths above", err=True)
        click.get_current_context().exit(EXIT_FAILED)


@cli.command()
@click.option("--all-tenants", is_flag=True, help="List the receipts of every tenant, not just --tenant's.")
@_common_options()
def receipts(all_tenants) -> None:
    """List stored receipts, oldest first (as kept: hashes in place of keys and subjects)."""
    rows = _open().receipts(None if all_tenants else _tenant())

    _emit({"receipts": rows}, lambda out: out.print(receipts_table(rows)))


@cli.group(invoke_without_command=True)
@_common_options()
@click.pass_context
def ledger(ctx) -> None:
    """The erasure ledger: hash-chained, free of personal data. Alone, it lists the entries."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(ledger_list)


@ledger.command("list")
@_common_options()
def ledger_list() -> None:
    """List the ledger's entries, oldest first."""
    entries = _open().ledger()

    _emit({"entries": entries}, lambda out: out.print(ledger_table(entries)))


@ledger.command("verify")
@_common_options()
def ledger_verify() -> None:
    """Recompute the ledger's hash chain. Exits 1 when an entry is missing or altered."""
    check = _open().verify_ledger()

    def human(out: Console) -> None:
        if check.ok:
            out.print(
                f"[green]ledger intact[/]: {check.entries} entr{'y' if check.entries == 1 else 'ies'}, "
                "every link verified"
            )
        else:
            out.print(f"[red]ledger BROKEN[/]: {len(check.problems)} problem(s) in {check.entries} entries")
            for p in check.problems:
                out.print(Text(f"  - {p}"))

    _emit(check.to_dict(), human)
    if not check.ok:
        click.get_current_context().exit(EXIT_FAILED)


@ledger.command("export")
@click.argument("handle")
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the JSON certificate to this file (default: standard output).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write a readable HTML certificate to this file.",
)
@_common_options()
def ledger_export(handle, out_path, html_path) -> None:
    """Export the deletion certificate of erasure HANDLE: what was asked, when, the epoch,
    each verification check with its outcome and time, and what was retained and why."""
    from efface.erasure.certificate import to_html

    cert = _open().certificate(handle, tenant=_tenant())
    if html_path:
        with open(html_path, "w", encoding="utf-8") as f:
            f.write(to_html(cert))
    if out_path:
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(cert, f, indent=2, sort_keys=True)

    def human(out: Console) -> None:
        if not out_path:
            click.echo(json.dumps(cert, indent=2, sort_keys=True))
        else:
            out.print(f"certificate for {handle} (level {cert['level']}) written to {out_path}")
        if html_path:
            out.print(f"HTML certificate written to {html_path}", highlight=False)

    _emit(cert, human)


@cli.command()
@click.argument("handle")
@_common_options()
def verify(handle) -> None:
    """Climb the evidence ladder for erasure HANDLE with recorded checks: probes through every
    read path (unreadable), then the artifacts and a scan of every file's bytes (erased).
    The outcome goes to the ledger. Exits 1 unless the level reached is erased."""
    v = _open().verify(handle, tenant=_tenant())
    doc = v.to_dict()

    _emit(doc, lambda out: render_verification(out, v))
    if v.level != "erased":
        click.get_current_context().exit(EXIT_FAILED)


@cli.command()
@_common_options()
def compact() -> None:
    """Bring every derived read path up to the newest epoch and save it."""
    store = _open()
    epoch = store.compact()
    stats = store.stats()

    def human(out: Console) -> None:
        out.print(f"every read path at epoch {epoch} ({stats['records']} records, embedder {stats['embedder']})")
        out.print(paths_table(stats["paths"]))

    _emit({"epoch": epoch, "stats": stats}, human)


@cli.command()
@click.argument("dest", type=click.Path(dir_okay=False))
@_common_options()
def backup(dest) -> None:
    """Write an encrypted backup of every live record to the file DEST. Each subject's part
    is sealed with a key only this store holds; forgetting the subject destroys it."""
    result = _open().backup(dest).to_dict()

    def human(out: Console) -> None:
        out.print(
            kv_table(
                f"Backup {result['backup_id']}",
                [
                    ("file", result["path"]),
                    ("records", result["records"]),
                    ("subject keys", result["subjects"]),
                    ("epoch", result["epoch"]),
                    ("ledger seq", result["ledger_seq"]),
                    ("bytes", result["bytes"]),
                ],
            )
        )

    _emit(result, human)


@cli.command()
@click.argument("src", type=click.Path(dir_okay=False))
@_common_options()
def restore(src) -> None:
    """Restore the records of the backup SRC that are missing from the store, after replaying
    the erasure ledger: nothing erased since the backup comes back."""
    result = _open().restore(src).to_dict()

    def human(out: Console) -> None:
        out.print(
            kv_table(
                f"Restore of {result['backup_id']}",
                [
                    ("restored", f"{result['restored']} record(s)"),
                    ("shredded", f"{result['shredded']} record(s): their subjects' keys are destroyed"),
                    ("replayed", f"{result['replayed']} record(s): erased or released since the backup"),
                    ("present", f"{result['present']} record(s) already live (left as they are)"),
                    ("subjects", f"{result['subjects']} registered subject(s) restored"),
                ],
            )
        )

    _emit(result, human)


@cli.command()
@_common_options()
def sweep() -> None:
    """Expire every claim whose TTL has passed now, and print the expiry receipts."""
    docs = [r.to_dict() for r in _open().sweep()]

    def human(out: Console) -> None:
        if not docs:
            out.print("nothing was due to expire")
        for doc in docs:
            render_receipt(out, doc, title=f"Expiry receipt {doc['handle']}")

    _emit({"receipts": docs}, human)


@cli.group(invoke_without_command=True)
@_common_options()
@click.pass_context
def quarantine(ctx) -> None:
    """Records held back because a forget erased what they were derived from or whom they
    name. Alone, it lists them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(quarantine_list)


@quarantine.command("list")
@_common_options()
def quarantine_list() -> None:
    """List the tenant's quarantined records, why, and the sources that survive."""
    items = [i.to_dict() for i in _open().quarantined(tenant=_tenant())]

    _emit({"quarantined": items}, lambda out: out.print(quarantine_table(items)))


@quarantine.command("rederive")
@click.argument("key")
@click.argument("text")
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="KEY",
    help="A key the new version is derived from (repeat; replaces the old lineage).",
)
@click.option("--no-sources", is_flag=True, help="The new version is derived from nothing (clears its lineage).")
@_common_options()
def quarantine_rederive(key, text, sources, no_sources) -> None:
    """Write a new version of KEY (TEXT; '-' reads stdin) and lift its quarantine."""
    if text == "-":
        text = sys.stdin.read()
    new_sources = [] if no_sources else (list(sources) if sources else None)
    epoch = _open().rederive(key, text, tenant=_tenant(), sources=new_sources)
    _emit({"key": key, "epoch": epoch}, lambda out: out.print(f"re-derived and released at epoch {epoch}"))


@quarantine.command("release")
@click.argument("key")
@click.option("--reason", required=True, help="Why it may be served as it is (recorded in the ledger).")
@_common_options()
def quarantine_release(key, reason) -> None:
    """Lift KEY's quarantine without changing it (a policy decision, recorded with its reason)."""
    epoch = _open().release(key, tenant=_tenant(), reason=reason)
    _emit({"key": key, "epoch": epoch}, lambda out: out.print(f"released at epoch {epoch}"))


@cli.command()
@click.argument("policy", type=click.Choice(["quarantine", "redact", "keep"]))
@click.option("--reason", help="Required for keep: why derived records may stay served (recorded).")
@_common_options()
def policy(policy, reason) -> None:
    """Set what a forget does to records derived from what it erased, for --tenant:
    quarantine (default), redact (identifiers replaced by [redacted]) or keep."""
    epoch = _open().set_policy(_tenant(), policy, reason=reason)
    _emit({"policy": policy, "epoch": epoch}, lambda out: out.print(f"policy {policy} set at epoch {epoch}"))


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the demo's temporary store and print where it is.")
@_common_options(store=False)
def demo(keep) -> None:
    """Replay the two incidents of DESIGN.md against a naive store and against efface."""
    from .demo import run

    run(keep=keep, as_json=_settings().json, out=console())


def _register_audit() -> None:
    from .audit import audit  # the command lives in its own module, beside the audit package's renderers

    cli.add_command(audit)


_register_audit()


def main() -> None:
    """Entry point of the ``efface`` script and of ``python -m efface``."""
    cli(prog_name="efface")


if __name__ == "__main__":  # pragma: no cover
    main()
