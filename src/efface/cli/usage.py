"""Usage errors without the values that caused them.

click repeats a bad value in its usage errors ("'alice@example.com' is not a valid float",
"Got unexpected extra argument (secret)", "No such option '-a'" for a text that begins with
"-a"), and a value on the command line may be personal data. :func:`quiet` rewrites each
error to say which option or argument is wrong and what it must be, from the parameter's
type alone; the CLI's error edge (:mod:`.base`) prints it, as text or as JSON.
"""

from __future__ import annotations

import re

import click


class Refused(click.BadParameter):
    """A bad value refused by efface's own check, whose message says what to do and never
    repeats the value: :func:`quiet` keeps it (click's own messages it replaces, as they quote
    the value)."""


def _described(param: click.Parameter | None) -> str:
    """What a parameter's value must be, from its type alone (never from the value)."""
    kind = None if param is None else param.type
    if isinstance(kind, click.Choice):
        return "must be one of " + ", ".join(str(c) for c in kind.choices)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return "must be a number in the range its --help gives"
    if isinstance(kind, click.types.IntParamType):
        return "must be a whole number"
    if isinstance(kind, click.types.FloatParamType):
        return "must be a number"
    if isinstance(kind, click.Path):
        kinds = " to a file, not a directory" if not kind.dir_okay else " to a directory" if not kind.file_okay else ""
        return "must be a usable path" + kinds
    if kind is not None:
        return f"must be a valid {kind.name}"
    return "is not valid"


def _known_words(ctx: click.Context) -> set[str]:
    """Every command name and option name of the CLI: words a usage error may repeat."""
    words: set[str] = set()
    stack: list[click.Command] = [ctx.find_root().command]
    while stack:
        cmd = stack.pop()
        words.add(cmd.name or "")
        for param in cmd.params:
            words.update(param.opts, param.secondary_opts)
        if isinstance(cmd, click.Group):
            stack.extend(cmd.commands.values())
    return words


def quiet(ctx: click.Context, exc: click.ClickException) -> click.ClickException:
    """The usage error as click reported it, without the value that caused it: click repeats
    bad values ("'alice@example.com' is not a valid float", "Got unexpected extra argument
    (secret)"), and a value on the command line may be personal data. The message says which
    option or argument is wrong and what it must be."""
    if isinstance(exc, click.MissingParameter) or type(exc).__name__ == "NoArgsIsHelpError":
        return exc  # names the parameter, or is the help text
    kept = ctx.meta.get("efface.args", [])  # every argument, as the root group was given them
    if isinstance(exc, click.BadParameter):
        hint = exc.param.get_error_hint(exc.ctx) if exc.param is not None and exc.ctx is not None else exc.param_hint
        said = exc.message if isinstance(exc, Refused) else _described(exc.param)
        message = f"Invalid value for {hint or 'a parameter'}: {said} (the value is not repeated here)."
    elif isinstance(exc, (click.NoSuchOption, click.exceptions.NoSuchCommand)):
        what = "option" if isinstance(exc, click.NoSuchOption) else "command"
        near = f" Did you mean {' or '.join(exc.possibilities)}?" if exc.possibilities else ""
        message = f"No such {what} (the name given is not repeated here).{near}"
        if what == "option":
            message += " A value that begins with '-' goes after '--'."
    elif isinstance(exc, click.FileError):
        message = f"A file given on the command line could not be opened: {exc.message}"
    elif exc.format_message().startswith("Got unexpected extra argument"):
        message = (
            "Got unexpected extra arguments (not repeated here): quote a value that holds spaces, "
            "and put '--' before one that begins with '-'."
        )
    else:
        message = exc.format_message()
        known = _known_words(ctx)
        values = {part for arg in kept for part in arg.split("=", 1) if part and part not in known}
        if any(re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", message) for v in values):
            message = "The command line is not valid (the value at fault is not repeated here): see --help."
    if isinstance(exc, click.UsageError):  # keeps the usage line and the --help hint; exits 2
        return click.UsageError(message, ctx=exc.ctx)
    return click.ClickException(message)  # exits 1, as FileError does
