"""``efface audit``: the click command. It parses, calls :func:`~efface.audit.run_audit`, renders
(with the audit's own renderers, :mod:`efface.audit.report`)."""

from __future__ import annotations

from pathlib import Path

import click

from ..audit.kinds import KINDS
from ..audit.model import Selection
from ..audit.report import render, to_html, to_json
from ..audit.run import run_audit
from ..errors import InvalidInput
from .base import UserPath, refuse_existing, write_out
from .render import console


@click.command("audit")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("path", type=UserPath(file_okay=False, path_type=Path))
@click.option("--subject", help="Forget the records whose subject field has this value.")
@click.option("--ids", help="Forget these ids instead (comma-separated).")
@click.option(
    "--subject-field",
    default=None,
    help="Metadata field / column / payload key naming the subject (default: subject; mem0: user_id).",
)
@click.option("--collection", help="Collection, table or tenant to audit (default: the only one; efface: default).")
@click.option("--in-place", is_flag=True, help="Audit the original store, not a copy. Its data WILL be deleted.")
@click.option("--maintenance", is_flag=True, help="Also run the store's own maintenance calls, then look again.")
@click.option(
    "--html",
    "html_file",
    type=UserPath(dir_okay=False, path_type=Path),
    help="Also write an HTML report to this file (an existing one is refused unless --overwrite).",
)
@click.option("--overwrite", is_flag=True, help="Replace the --html file if it exists.")
@click.option("--id-field", default=None, help="LanceDB: the id column (default: id).")
@click.option("--text-field", default=None, help="LanceDB / Qdrant: the text column or payload key (default: text).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document instead of tables.")
def audit(
    kind,
    path,
    subject,
    ids,
    subject_field,
    collection,
    in_place,
    maintenance,
    html_file,
    overwrite,
    id_field,
    text_field,
    as_json,
) -> None:
    """Check what a store's delete really proves: forget a subject (or ids) in a copy of
    the store at PATH through the store's own API, probe every read path it exposes, scan
    the bytes of every file, and give a level per path: intent, unreadable or erased.

    Kinds: efface, chroma, lancedb, qdrant (local mode), mem0 (qdrant local + history DB).
    """
    id_list = None
    if ids is not None:
        id_list = tuple(x.strip() for x in ids.split(",") if x.strip())
    if (subject is None) == (id_list is None):
        raise InvalidInput("name exactly one of --subject or --ids")
    field = subject_field or ("user_id" if kind == "mem0" else "subject")
    refuse_existing(html_file, overwrite=overwrite, what="the --html file")  # before the audit's work
    report = run_audit(
        kind,
        path,
        Selection(subject=subject, ids=id_list, subject_field=field),
        collection=collection,
        in_place=in_place,
        maintenance=maintenance,
        id_field=id_field,
        text_field=text_field,
    )
    if html_file is not None:
        write_out(str(html_file), to_html(report), overwrite=overwrite, what="the --html file")
    # `efface --json audit ...` is noticed by the root group and kept in ctx.meta.
    if as_json or click.get_current_context().meta.get("efface.json"):
        click.echo(to_json(report))
    else:
        render(console(), report)
