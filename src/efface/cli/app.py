"""The ``efface`` command line: parse, call the library, render. Nothing else.

Every command takes ``--store DIR`` (or ``EFFACE_STORE``), or ``--origin URL`` (or
``EFFACE_ORIGIN``) with ``--kek-file`` for a store in PostgreSQL, ``--tenant`` (or
``EFFACE_TENANT``), ``--embedder`` and ``--json``, before or after the command name.
With ``--json`` a command prints exactly one JSON document on stdout, errors included
(``{"error": {"type": ..., "message": ...}}``). Library errors are turned into exit codes
here and nowhere else: 2 for bad input or scope (as click does for usage errors), 1 for
the rest.
"""

from __future__ import annotations

import json

import click
from rich.console import Console

from efface.errors import InvalidInput

from .base import EXIT_FAILED, _common_options, _emit, _open, _settings, _stdin_text, _tenant, cli
from .render import (
    fmt_time,
    hits_table,
    kv_table,
    receipts_table,
    render_receipt,
    render_status,
)


def _when(value: str | None) -> float | str | None:
    """A --after/--before value: unix seconds when it is a number, else the ISO 8601 text
    (the library says what is wrong with either)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value


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
@click.option(
    "--replace",
    is_flag=True,
    help="KEY holds another subject's claims: erase that record with them (its own 'replace' "
    "receipt, listed by 'efface receipts') and write this one. Without it such a write is refused.",
)
@_common_options()
def write(key, text, subject, purpose, basis, ttl, metadata, sources, replace) -> None:
    """Store TEXT under KEY with one claim. TEXT '-' reads it from stdin."""
    if text == "-":
        text = _stdin_text()
    meta = None
    if metadata is not None:
        try:
            meta = json.loads(metadata)
        except (json.JSONDecodeError, RecursionError):  # RecursionError: nested thousands deep
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
        replace=replace,
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
@click.option("--after", help="Only turns whose metadata 'at' is at or after this time (ISO 8601 or unix seconds).")
@click.option("--before", help="Only turns whose metadata 'at' is before this time (ISO 8601 or unix seconds).")
@click.option("--said-by", "said_by", help="Only turns whose metadata 'speaker' is this name.")
@click.option(
    "--window",
    type=int,
    default=0,
    show_default=True,
    help="Give each hit this many turns before and after it in its session.",
)
@_common_options()
def recall(query, purpose, k, subject, after, before, said_by, window) -> None:
    """Find memories by meaning and by words for QUERY (docs/conversations.md for turns)."""
    hits = _open().recall(
        query,
        tenant=_tenant(),
        purpose=purpose,
        subject=subject,
        k=k,
        after=_when(after),
        before=_when(before),
        said_by=said_by,
        window=window,
    )

    _emit({"hits": [h.to_dict() for h in hits]}, lambda out: out.print(hits_table(hits)))


@cli.command()
@click.option("--subject", help="Release this subject's claims.")
@click.option("--purpose", help="Release claims for this purpose.")
@click.option("--prefix", help="Release claims on keys starting with this prefix.")
@click.option("--key", help="Release claims on this one key.")
@click.option("--everything", is_flag=True, help="All of the tenant, its name included (alone: no other selector).")
@_common_options()
def forget(subject, purpose, prefix, key, everything) -> None:
    """Release the claims the selector names; erase records left with none; print the receipt.

    Name at least one of --subject, --purpose, --prefix, --key (they combine with AND), or
    --everything alone to erase all of a (per-user) tenant.
    """
    receipt = _open().forget(
        tenant=_tenant(), subject=subject, purpose=purpose, prefix=prefix, key=key, everything=everything
    )
    doc = receipt.to_dict()
    _emit(doc, lambda out: render_receipt(out, doc))


@cli.command()
@click.argument("handle")
@_common_options()
def status(handle) -> None:
    """Show how far the erasure HANDLE of --tenant has gone through every read path, now."""
    doc = _open().status(handle, tenant=_tenant()).to_dict()
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
    """Drive the erasure HANDLE of --tenant through every path and wait until it is done (then `efface verify`)."""
    st = _open().wait(handle, timeout=timeout, until=until, tenant=_tenant())
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
