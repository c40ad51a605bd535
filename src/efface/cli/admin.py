"""The CLI's erasure and maintenance commands: ledger, certificates, quarantine, policy,
compaction, backups, sweep, the demo and the audit; and ``main``."""

from __future__ import annotations

import json

import click
from rich.console import Console

from .base import (
    EXIT_FAILED,
    UserPath,
    _common_options,
    _emit,
    _open,
    _open_local,
    _settings,
    _stdin_text,
    _tenant,
    cli,
    refuse_existing,
    write_out,
)
from .render import (
    console,
    data,
    kv_table,
    ledger_table,
    paths_table,
    quarantine_table,
    render_receipt,
    render_verification,
)


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
                out.print(data(f"  - {p}"))

    _emit(check.to_dict(), human)
    if not check.ok:
        click.get_current_context().exit(EXIT_FAILED)


@ledger.command("export")
@click.argument("handle")
@click.option(
    "--out",
    "out_path",
    type=UserPath(dir_okay=False, writable=True),
    help="Write the JSON certificate to this file (default: standard output, unless --html is given).",
)
@click.option(
    "--html",
    "html_path",
    type=UserPath(dir_okay=False, writable=True),
    help="Write a readable HTML certificate to this file (the JSON one then goes only to --out, if given).",
)
@click.option(
    "--overwrite", is_flag=True, default=False, help="Replace the --out and --html files if they exist (else refused)."
)
@_common_options()
def ledger_export(handle, out_path, html_path, overwrite) -> None:
    """Export the deletion certificate of erasure HANDLE: what was asked, when, the epoch,
    each verification check with its outcome and time, and what was retained and why.
    It goes to standard output as JSON, or to the files --out (JSON) and --html (HTML) name;
    with --json, standard output holds the JSON certificate either way. An existing file is
    refused unless --overwrite is given."""
    from efface.erasure.certificate import to_html

    refuse_existing(out_path, overwrite=overwrite, what="the --out file")
    refuse_existing(html_path, overwrite=overwrite, what="the --html file")
    cert = _open().certificate(handle, tenant=_tenant())
    if html_path:
        write_out(html_path, to_html(cert), overwrite=overwrite, what="the --html file")
    if out_path:
        write_out(out_path, json.dumps(cert, indent=2, sort_keys=True), overwrite=overwrite, what="the --out file")

    def human(out: Console) -> None:
        if not out_path and not html_path:
            click.echo(json.dumps(cert, indent=2, sort_keys=True))
        if out_path:
            out.print(data(f"certificate for {handle} (level {cert['level']}) written to {out_path}"))
        if html_path:
            out.print(data(f"HTML certificate for {handle} (level {cert['level']}) written to {html_path}"))

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
@_common_options(remote=False)
def compact() -> None:
    """Bring every derived read path up to the newest epoch and save it."""
    store = _open_local()
    epoch = store.compact()
    stats = store.stats()

    def human(out: Console) -> None:
        out.print(f"every read path at epoch {epoch} ({stats['records']} records, embedder {stats['embedder']})")
        out.print(paths_table(stats["paths"]))

    _emit({"epoch": epoch, "stats": stats}, human)


@cli.command()
@click.argument("dest", type=UserPath(dir_okay=False))
@click.option("--overwrite", is_flag=True, default=False, help="Replace DEST if it exists (else it is refused).")
@_common_options(remote=False)
def backup(dest, overwrite) -> None:
    """Write an encrypted backup of every live record to the file DEST. Each subject's part
    is sealed with a key only this store holds; forgetting the subject destroys it. An
    existing DEST is refused unless --overwrite is given."""
    result = _open_local().backup(dest, overwrite=overwrite).to_dict()

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
@click.argument("src", type=UserPath(dir_okay=False))
@_common_options(remote=False)
def restore(src) -> None:
    """Restore the records of the backup SRC that are missing from the store, after replaying
    the erasure ledger: nothing erased since the backup comes back."""
    result = _open_local().restore(src).to_dict()

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
@_common_options(remote=False)
def sweep() -> None:
    """Expire every claim whose TTL has passed now, and print the expiry receipts."""
    docs = [r.to_dict() for r in _open_local().sweep()]

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
        text = _stdin_text()
    new_sources = [] if no_sources else (list(sources) if sources else None)
    epoch = _open().rederive(key, text, tenant=_tenant(), sources=new_sources)
    _emit({"key": key, "epoch": epoch}, lambda out: out.print(f"re-derived and released at epoch {epoch}"))


@quarantine.command("release")
@click.argument("key")
@click.option(
    "--reason", required=True, help="Why it may be served as it is (kept with the record; the ledger records its hash)."
)
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
    """Replay the two incidents of docs/concepts.md §1 against a naive store and against efface."""
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
