"""What the gate proxy knows about an upstream MCP memory server's tools, without calling it.

Each upstream tool is one of four **kinds**:

- ``delete``: its answer is a forget acknowledgement (classified and recorded by the gate);
- ``read``: it can return memories (refused in a scope with an unsettled erasure, and used
  as a sentinel probe);
- ``write`` and ``other``: forwarded as they are.

A tool's kind comes, in this order, from the operator's mapping file (:func:`load_mapping`),
from its annotations (``destructiveHint: true`` is delete, ``readOnlyHint: true`` is read; a
hint left out says nothing), then from the words of its name (``delete_entities``,
``removeMemory``: delete; ``search_nodes``, ``read_graph``: read; anything else: write).

What a delete erased is read from its arguments as **targets** (:func:`targets`): the strings
it names (``entityNames: ["Alice"]``), the innermost strings of nested lists
(``deletions[].observations[]``: the observation texts, not the entity that keeps them), and
objects made only of scalars as whole objects (a relation ``{from, to, relationType}``). A
probe's answer **contains** a target when a string anywhere in it equals the target, or an
object in it has all the target object's fields, or a text block that is not JSON holds it
(:func:`found_in`). A record that merely mentions a deleted name (another entity's
observation "met Alice") is not the deleted target. Targets live only in the
proxy's memory; the gate's state file keeps their keyed hashes (:func:`target_key`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

KINDS = ("delete", "read", "write", "other")
"""The kinds of upstream tool the proxy tells apart."""

DELETE_WORDS = frozenset({"delete", "remove", "forget", "erase", "purge", "drop", "clear", "wipe", "destroy"})
READ_WORDS = frozenset(
    {"read", "search", "get", "list", "open", "recall", "find", "query", "fetch", "retrieve", "lookup", "show"}
)

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


@dataclass(frozen=True)
class ToolRule:
    """How the proxy treats one upstream tool."""

    kind: str
    """One of ``KINDS``."""
    why: str
    """Where the kind came from: ``mapping``, ``annotations`` or ``name``."""
    scope: str | None = None
    """The argument whose value names the scope the call acts in (None: the upstream's one scope)."""
    targets: tuple[str, ...] | None = None
    """Delete: the arguments that name what is deleted (None: every argument but the scope)."""
    probe: bool = True
    """Read: whether the proxy may call it as a sentinel probe."""


def _words(name: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(name)}


def load_mapping(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Read an operator's mapping file: ``{"tools": {NAME: {"kind": ..., "scope": ARG,
    "targets": [ARG, ...], "probe": bool}}}``. Raises :class:`InvalidInput` saying what is
    wrong (never quoting the file's values)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise InvalidInput(f"the mapping file cannot be read ({type(exc).__name__})") from None
    except ValueError:
        raise InvalidInput("the mapping file is not JSON") from None
    tools = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(tools, dict) or set(doc) - {"tools"}:
        raise InvalidInput('the mapping file must be an object {"tools": {tool name: {"kind": ...}}}')
    for entry in tools.values():
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS:
            raise InvalidInput(f"each tool in the mapping file needs a kind: one of {', '.join(KINDS)}")
        if set(entry) - {"kind", "scope", "targets", "probe"}:
            raise InvalidInput("a tool in the mapping file takes only kind, scope, targets and probe")
        if "scope" in entry and not (isinstance(entry["scope"], str) and entry["scope"]):
            raise InvalidInput("a mapping's scope is the name of one argument")
        if "targets" in entry and not (
            isinstance(entry["targets"], list) and all(isinstance(t, str) and t for t in entry["targets"])
        ):
            raise InvalidInput("a mapping's targets is a list of argument names")
        if "probe" in entry and not isinstance(entry["probe"], bool):
            raise InvalidInput("a mapping's probe is true or false")
    return tools


def rule_for(name: str, annotations: Any, mapping: Mapping[str, Mapping[str, Any]] | None = None) -> ToolRule:
    """The kind of an upstream tool (see the module docstring for the order)."""
    entry = (mapping or {}).get(name)
    if entry is not None:
        targets = entry.get("targets")
        return ToolRule(
            entry["kind"],
            "mapping",
            scope=entry.get("scope"),
            targets=tuple(targets) if targets is not None else None,
            probe=entry.get("probe", True),
        )
    if annotations is not None:
        if getattr(annotations, "destructive_hint", None) is True:
            return ToolRule("delete", "annotations")
        if getattr(annotations, "read_only_hint", None) is True:
            return ToolRule("read", "annotations")
    words = _words(name)
    if words & DELETE_WORDS:
        return ToolRule("delete", "name")
    if words & READ_WORDS:
        return ToolRule("read", "name")
    return ToolRule("write", "name")


# -- targets: what a delete named -------------------------------------------------------------
def _walk_targets(value: Any) -> Iterator[str | dict]:
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _walk_targets(item)
    elif isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        if lists:  # the scalars beside a list qualify it (the entity that keeps the observations)
            for v in lists:
                yield from _walk_targets(v)
        elif value and all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values()):
            yield dict(value)


def targets(arguments: Mapping[str, Any], rule: ToolRule) -> list[str | dict]:
    """What a delete call names, as strings and scalar-only objects (see the module docstring)."""
    names = rule.targets if rule.targets is not None else [a for a in arguments if a != rule.scope]
    out: list[str | dict] = []
    for name in names:
        for t in _walk_targets(arguments.get(name)):
            if t not in out:
                out.append(t)
    return out


def target_key(target: str | dict) -> str:
    """One string per target, unambiguous between a string and an object."""
    if isinstance(target, str):
        return "s:" + target
    return "o:" + json.dumps(target, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def probe_words(found: list[str | dict]) -> list[str]:
    """The strings a probe can search with: the string targets, and the strings in object targets."""
    out: list[str] = []
    for t in found:
        for s in [t] if isinstance(t, str) else [v for v in t.values() if isinstance(v, str)]:
            if s and s not in out:
                out.append(s)
    return out


# -- what an answer contains -------------------------------------------------------------------
class FreeText(str):
    """A text block that is not JSON: a target is found in it when it occurs anywhere."""


def answer_values(structured: Any, texts: list[str]) -> list[Any]:
    """The parts of a tool's answer to look into: its structured content, and each text block
    (parsed when it is JSON, else kept as :class:`FreeText`)."""
    out: list[Any] = [] if structured is None else [structured]
    for text in texts:
        try:
            out.append(json.loads(text))
        except ValueError:
            out.append(FreeText(text))
    return out


def _leaves(value: Any) -> Iterator[str | dict]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _leaves(v)


def found_in(target: str | dict, values: list[Any]) -> bool:
    """Whether an answer (:func:`answer_values`) contains a target."""
    for leaf in (leaf for v in values for leaf in _leaves(v)):
        if isinstance(target, str):
            if isinstance(leaf, FreeText) and target in leaf:
                return True
            if isinstance(leaf, str) and leaf == target:
                return True
        elif isinstance(leaf, dict) and all(k in leaf and leaf[k] == v for k, v in target.items()):
            return True
    return False


def hit_keys(values: list[Any]) -> list[str]:
    """Every string and object of an answer as :func:`target_key` keys, so the gate can
    recognise an erased target by its keyed hash (after a restart, when only hashes are left)."""
    out = []
    for leaf in (leaf for v in values for leaf in _leaves(v)):
        if isinstance(leaf, str) or all(isinstance(x, (str, int, float, bool)) or x is None for x in leaf.values()):
            out.append(target_key(leaf))
    return out


def probe_arguments(input_schema: Mapping[str, Any], words: list[str]) -> list[dict[str, Any]]:
    """The calls of a read tool that probe for ``words``: none when it requires an argument
    the proxy cannot fill (only strings and lists of strings are filled); one call without
    arguments when it requires none; else one call per word (a string argument) or one with
    every word (a list of strings)."""
    props = input_schema.get("properties") or {}
    required = list(input_schema.get("required") or [])
    if not required:
        return [{}]
    kinds = {}
    for name in required:
        spec = props.get(name) or {}
        if spec.get("type") == "string":
            kinds[name] = "string"
        elif spec.get("type") == "array" and (spec.get("items") or {}).get("type") == "string":
            kinds[name] = "list"
        else:
            return []
    if not words:
        return []
    if all(k == "list" for k in kinds.values()):
        return [{name: list(words) for name in required}]
    return [{name: (word if k == "string" else [word]) for name, k in kinds.items()} for word in words]
