"""Every ```python block in README.md and docs/*.md runs, and its comments tell the truth.

How a file's blocks run: in order, in one namespace (a later block may use an earlier one's
names), with a fresh temporary directory as the working directory, so ``efface.open("./memories")``
creates its store there. Stores and gates left open in the namespace are closed afterwards.
``test_block_runs`` fails when a statement without a claim raises.

What a comment claims. Only a comment at the end of an *expression statement* (a line that
is just an expression, such as ``receipt.erased``; on a statement spanning lines, its last
line) is read, and only when its text, after an optional ``->``, starts with a claim; the
rest of the comment is prose (``# 'erased': probes and a byte scan`` claims ``'erased'``).
Comments on assignments, ``with`` lines and the like are prose. Each claim is one
``test_claim`` item, named by the file and line. A claim is one of:

- ``raises X`` or a bare ``X`` naming an exception class (efface's, a builtin, or one the
  block imported): the statement must raise X or a subclass of it; the block goes on.
- a pattern, the longest prefix of the comment that is one:

  - a Python literal (``('acme:alice:1',)``, ``'intent'``, ``True``, ``3``): the value must equal it;
  - ``...``: any value;
  - ``Name(...)`` or ``Name(field=pattern, ...)``: an instance of a class called ``Name``
    whose named fields match their patterns; a ``...`` argument stands for fields not checked;
  - ``[p]`` or ``(p,)`` with one non-literal pattern: a non-empty list (tuple) whose every
    item matches ``p`` (``# -> [Hit(...)]``: a list of hits); with several patterns: the same
    number of items, matched in order.

  So a comment that starts with a plain word (``# the compactor erases the bytes``) claims
  nothing; one that starts with a number or a string does.

Opting out and skipping. A block preceded by ``<!-- no-test: reason -->`` (the last non-blank
line before its fence) does not run; the test says so with the reason. A block that imports
a third-party library (directly, or through an efface peer module such as
``efface.adapters.chroma``) runs only when the library is installed, else it is skipped with
the reason, and fails under ``CI=true`` (as the peer tests do, see ``peer_stores.require``).

Known wrong claims are listed in ``KNOWN_WRONG`` and run as strict expected failures: when
the code or the doc is fixed, the claim passes, the xfail turns into a failure, and the entry
must be removed.
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib
import importlib.util
import io
import os
import re
import sys
import tokenize
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import efface
import efface.errors
import efface.gate

from peer_stores import require, require_framework

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

KNOWN_WRONG: dict[tuple[str, str], str] = {}
"""(file, statement source) -> why its claim fails today. Each runs as ``xfail(strict=True)``."""

PEER_LIBRARIES = {"chroma": "chromadb", "lancedb": "lancedb", "qdrant": "qdrant_client", "mem0": "mem0"}
"""efface's peer modules (``efface.adapters.X``, ``efface.peers.X``) -> the library each needs."""

COMPAT_LIBRARIES = {
    "langgraph": "langgraph",
    "openai_agents": "agents",
    "adk": "google.adk",
    "llamaindex": "llama_index.core",
}
"""efface's framework adapters (``efface.compat.X``) -> the framework each needs."""

VENV_FRAMEWORKS = {
    "agents": ("openai-agents", "openai-agents"),
    "google.adk": ("adk", "adk"),
    "crewai": ("crewai", "crewai"),
}
"""Frameworks CI installs in a virtual environment of their own -> (extra, venv name): their
blocks are run there (scripts/check frameworks), and skipped by the main suite, under CI too."""

NAMESPACE_PACKAGES = ("google", "llama_index")
"""Namespace packages: a block needs ``google.adk``, not whatever else lives under ``google``."""

_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
_NO_TEST = re.compile(r"^\s*<!--\s*no-test:\s*(.*?)\s*-->\s*$")


# -- reading the docs ------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """One checkable comment."""

    file: str
    line: int
    """Line in the Markdown file."""
    source: str
    """The expression statement, as written."""
    comment: str
    raises: str | None = None
    """The exception class name a ``raises`` claim expects."""
    pattern: ast.expr | None = None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Block:
    """One ```python block."""

    file: str
    line: int
    """Line of the opening fence in the Markdown file."""
    source: str
    no_test: str | None = None
    requires: tuple[str, ...] = ()
    """Third-party modules it needs."""
    tree: ast.Module | None = None
    syntax_error: str | None = None
    claims: list[Claim] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def _blocks(path: Path, rel: str | None = None) -> list[Block]:
    rel = rel or path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in ("python", "py"):
            continue
        before = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        no_test = _NO_TEST.match(before)
        out.append(Block(rel, start + 1, "\n".join(body) + "\n", no_test.group(1) if no_test else None))
    for block in out:
        _parse(block)
    return out


def _comments(source: str) -> dict[int, str]:
    """Line (in the block) -> the text of the comment that ends it."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string[1:].strip()
    return found


def _parse(block: Block) -> None:
    try:
        block.tree = ast.parse(block.source, filename=block.file)
    except SyntaxError as exc:
        block.syntax_error = f"{exc.msg} (block line {exc.lineno})"
        return
    block.requires = _requires(block.tree)
    if block.no_test is not None:
        return
    comments = _comments(block.source)
    for node in ast.walk(block.tree):
        if isinstance(node, ast.Expr) and node.end_lineno in comments:
            claim = _claim(block, node, comments[node.end_lineno])
            if claim is not None:
                block.claims.append(claim)
    block.claims.sort(key=lambda c: c.line)


def _requires(tree: ast.Module) -> tuple[str, ...]:
    needed = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "efface":
                if len(parts) > 2 and parts[1] in ("adapters", "peers") and parts[2] in PEER_LIBRARIES:
                    needed.append(PEER_LIBRARIES[parts[2]])
                if len(parts) > 2 and parts[1] == "compat" and parts[2] in COMPAT_LIBRARIES:
                    needed.append(COMPAT_LIBRARIES[parts[2]])
            elif parts[0] in NAMESPACE_PACKAGES and len(parts) > 1:
                needed.append(".".join(parts[:2]))
            elif parts[0] not in sys.stdlib_module_names:
                needed.append(parts[0])
    return tuple(dict.fromkeys(needed))


# -- claims ----------------------------------------------------------------------------------
def _is_literal(node: ast.expr) -> bool:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return value is not Ellipsis and not _has_ellipsis(node)


def _has_ellipsis(node: ast.expr) -> bool:
    return any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(node))


def _is_pattern(node: ast.expr) -> bool:
    if _is_literal(node) or (isinstance(node, ast.Constant) and node.value is Ellipsis):
        return True
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and all(isinstance(a, ast.Constant) and a.value is Ellipsis for a in node.args)
            and all(k.arg is not None and _is_pattern(k.value) for k in node.keywords)
        )
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and all(_is_pattern(e) for e in node.elts)
    return False


def _exception(name: str, namespace: dict[str, Any] | None = None) -> type[BaseException] | None:
    for where in (namespace or {}, vars(efface.errors), vars(builtins)):
        obj = where.get(name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return obj
    return None


def _claim(block: Block, node: ast.Expr, comment: str) -> Claim | None:
    text = comment.removeprefix("->").strip()
    source = ast.get_source_segment(block.source, node) or ""
    line = block.line + (node.end_lineno or node.lineno)
    m = re.match(r"(?:raises\s+)?([A-Za-z_]\w*)\b", text)
    if m and (text.startswith("raises") or _exception(m.group(1)) is not None):
        return Claim(block.file, line, source, comment, raises=m.group(1))
    # The longest prefix that is a pattern and ends where a word does.
    for end in range(len(text), 0, -1):
        if end < len(text) and not (text[end].isspace() or text[end] in ":;,"):
            continue
        try:
            # `Name(field=..., ...)`: a trailing `...` after keywords is not Python; read it as `_=...`.
            expr = ast.parse(re.sub(r",\s*\.\.\.(?=\s*\))", ", _=...", text[:end]), mode="eval").body
        except SyntaxError:
            continue
        if _is_pattern(expr):
            return Claim(block.file, line, source, comment, pattern=expr)
    return None


def _mismatch(pattern: ast.expr, value: Any, where: str = "value") -> str | None:
    """None when ``value`` matches ``pattern``, else what differs."""
    if isinstance(pattern, ast.Constant) and pattern.value is Ellipsis:
        return None
    if _is_literal(pattern):
        expected = ast.literal_eval(pattern)
        return None if value == expected else f"{where} is {value!r}, the doc says {expected!r}"
    if isinstance(pattern, ast.Call):
        assert isinstance(pattern.func, ast.Name)
        name = pattern.func.id
        if name not in {c.__name__ for c in type(value).__mro__}:
            return f"{where} is a {type(value).__name__} ({value!r:.200}), the doc says a {name}"
        for kw in pattern.keywords:
            assert kw.arg is not None
            if kw.arg == "_":  # the `...` that stands for the fields not checked
                continue
            if not hasattr(value, kw.arg):
                return f"{where} has no field {kw.arg!r}"
            wrong = _mismatch(kw.value, getattr(value, kw.arg), f"{where}.{kw.arg}")
            if wrong:
                return wrong
        return None
    assert isinstance(pattern, (ast.List, ast.Tuple))
    kind = list if isinstance(pattern, ast.List) else tuple
    if not isinstance(value, kind):
        return f"{where} is a {type(value).__name__} ({value!r:.200}), the doc says a {kind.__name__}"
    if len(pattern.elts) == 1:
        if not value:
            return f"{where} is empty, the doc says at least one item"
        items = [(pattern.elts[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif len(pattern.elts) != len(value):
        return f"{where} has {len(value)} items, the doc says {len(pattern.elts)}"
    else:
        items = [(p, v, f"{where}[{i}]") for i, (p, v) in enumerate(zip(pattern.elts, value, strict=True))]
    return next((w for p, v, at in items if (w := _mismatch(p, v, at))), None)


# -- running ---------------------------------------------------------------------------------
@dataclass
class FileRun:
    """What running one file's blocks gave."""

    blocks: dict[int, str | None] = field(default_factory=dict)
    """Block line -> None (ran), the skip reason (``missing:<module>``) or the error."""
    claims: dict[int, str | None] = field(default_factory=dict)
    """Claim line -> None (held) or what was wrong. Claims not reached are absent."""


class _Instrument(ast.NodeTransformer):
    """Turns each claimed expression statement into ``__claim__(line, lambda: <expr>)``."""

    def __init__(self, lines: dict[int, int]):
        self.lines = lines  # end line in the block -> claim line in the file

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        line = self.lines.get(node.end_lineno or -1)
        if line is None:
            return node
        thunk = ast.Lambda(
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), body=node.value
        )
        call = ast.Call(func=ast.Name("__claim__", ast.Load()), args=[ast.Constant(line), thunk], keywords=[])
        return ast.copy_location(ast.Expr(call), node)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # ``google.adk`` when there is no ``google`` at all
        return False


def _run_file(rel: str, blocks: list[Block], workdir: Path) -> FileRun:
    run = FileRun()
    claims = {c.line: c for b in blocks for c in b.claims}
    namespace: dict[str, Any] = {"__name__": "__docs__"}

    def check(line: int, thunk: Any) -> None:
        claim = claims[line]
        try:
            value = thunk()
        except Exception as exc:
            expected = _exception(claim.raises, namespace) if claim.raises else None
            if expected is not None and isinstance(exc, expected):
                run.claims[line] = None
            else:
                run.claims[line] = f"raised {type(exc).__name__}: {exc}"
            return
        if claim.raises:
            run.claims[line] = f"returned {value!r:.200} instead of raising {claim.raises}"
        else:
            assert claim.pattern is not None
            run.claims[line] = _mismatch(claim.pattern, value)

    namespace["__claim__"] = check
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for block in blocks:
            if block.no_test is not None:
                continue
            if block.syntax_error or block.tree is None:
                run.blocks[block.line] = f"does not parse: {block.syntax_error}"
                continue
            missing = [m for m in block.requires if not _installed(m)]
            if missing:
                run.blocks[block.line] = "missing:" + ",".join(missing)
                continue
            tree = _Instrument({c.line - block.line: c.line for c in block.claims}).visit(copy.deepcopy(block.tree))
            tree = ast.fix_missing_locations(tree)
            ast.increment_lineno(tree, block.line)  # tracebacks name the Markdown line
            try:
                exec(compile(tree, str(ROOT / rel), "exec"), namespace)
            except Exception as exc:
                frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(ROOT / rel)]
                where = f" (line {frames[-1].lineno})" if frames else ""
                run.blocks[block.line] = f"raised {type(exc).__name__}{where}: {exc}"
            else:
                run.blocks[block.line] = None
    finally:
        os.chdir(cwd)
        for value in list(namespace.values()):
            if isinstance(value, (efface.Store, efface.gate.Gate)):
                value.close()
    return run


BLOCKS = {path.relative_to(ROOT).as_posix(): _blocks(path) for path in DOC_FILES}
"""Markdown file (relative to the repository) -> its python blocks, read at collection."""


@pytest.fixture(scope="module")
def doc_run(tmp_path_factory):
    """``doc_run(file)``: run a file's blocks once (on first use) and return the FileRun."""
    cache: dict[str, FileRun] = {}

    def get(rel: str) -> FileRun:
        if rel not in cache:
            cache[rel] = _run_file(rel, BLOCKS[rel], tmp_path_factory.mktemp(re.sub(r"\W", "_", rel)))
        return cache[rel]

    return get


def _block_params():
    return [pytest.param(b, id=b.id) for blocks in BLOCKS.values() for b in blocks]


def _claim_params():
    out = []
    for blocks in BLOCKS.values():
        for b in blocks:
            for c in b.claims:
                why = KNOWN_WRONG.get((c.file, c.source))
                marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
                out.append(pytest.param(b, c, id=c.id, marks=marks))
    return out


def _skip_unless_runnable(block: Block, run: FileRun) -> None:
    if block.no_test is not None:
        pytest.skip(f"no-test: {block.no_test}")
    state = run.blocks.get(block.line)
    if state and state.startswith("missing:"):
        for module in state.removeprefix("missing:").split(","):
            if module in VENV_FRAMEWORKS:
                extra, venv = VENV_FRAMEWORKS[module]
                require_framework(module, extra, venv=venv)  # skips, or fails in its CI venv step
            require(module)  # skips, or fails under CI=true


@pytest.mark.parametrize("block", _block_params())
def test_block_runs(block, doc_run):
    run = doc_run(block.file)
    _skip_unless_runnable(block, run)
    assert run.blocks[block.line] is None, f"{block.id}: {run.blocks[block.line]}"


@pytest.mark.parametrize("block, claim", _claim_params())
def test_claim(block, claim, doc_run):
    run = doc_run(block.file)
    _skip_unless_runnable(block, run)
    assert claim.line in run.claims, f"{claim.id}: never reached ({run.blocks[block.line]})"
    wrong = run.claims[claim.line]
    assert wrong is None, f"{claim.id}: `{claim.source}  # {claim.comment}`: {wrong}"


def test_the_readme_examples_are_found_and_checked():
    readme = BLOCKS["README.md"]
    assert len(readme) >= 2 and all(b.no_test is None for b in readme)
    assert sum(len(b.claims) for b in readme) >= 8


def test_known_wrong_claims_still_exist():
    """An entry whose statement left the docs would silently stop meaning anything."""
    present = {(c.file, c.source) for blocks in BLOCKS.values() for b in blocks for c in b.claims}
    assert set(KNOWN_WRONG) <= present


@pytest.mark.parametrize(
    "comment, value, ok",
    [
        ("('acme:alice:1',)", ("acme:alice:1",), True),
        ("('acme:alice:1',)", ["acme:alice:1"], False),
        ("'erased': probes and a byte scan", "erased", True),
        ("'erased': probes and a byte scan", "unreadable", False),
        ("True once its bytes are gone", True, True),
        ("-> [Hit(...)]", [efface.Hit(key="k", text="t", score=1.0, via=("ann",), metadata={})], True),
        ("-> [Hit(...)]", [], False),
        ("-> [Hit(...)]", ("not", "hits"), False),
        ("PathState(state='pending', ...): prose", efface.PathState("pending", 1, 5.0, True), True),
        ("PathState(state='pending', ...): prose", efface.PathState("absorbed", 1, 5.0, True), False),
        ("('acme:digest',)  -- built from her record", ("acme:digest",), True),
    ],
)
def test_claim_rule(comment, value, ok):
    block = Block("x.md", 1, f"x  # {comment}\n")
    _parse(block)
    (claim,) = block.claims
    assert claim.pattern is not None
    assert (_mismatch(claim.pattern, value) is None) == ok


@pytest.mark.parametrize(
    "comment", ["the compactor erases the bytes", "JSON; for people", "a list of hits", "-> what comes back"]
)
def test_prose_claims_nothing(comment):
    block = Block("x.md", 1, f"x  # {comment}\n")
    _parse(block)
    assert block.claims == []


def test_raises_claims_and_opt_out(tmp_path):
    block = Block("x.md", 1, "f()  # ErasureNotSettled until settled\ng()  # raises KeyError (fails closed)\n")
    _parse(block)
    assert [c.raises for c in block.claims] == ["ErasureNotSettled", "KeyError"]
    path = tmp_path / "x.md"
    path.write_text("text\n<!-- no-test: needs a server -->\n\n```python\nimport efface  # 1\n```\n", encoding="utf-8")
    (only,) = _blocks(path, "x.md")
    assert (only.no_test, only.claims) == ("needs a server", [])


# -- the repository is enough ----------------------------------------------------------------
_OUTSIDE = re.compile(r"DESIGN(?:\.md| §| invariant)|shared folder", re.IGNORECASE)
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def _shipped_text_files() -> list[Path]:
    files = [*DOC_FILES, *sorted((ROOT / "src" / "efface").rglob("*.py"))]
    return [*files, *sorted((ROOT / "bench").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py"))]


def test_nothing_cites_a_document_outside_the_repository():
    """A user with a clone has docs/concepts.md, not the brief it was written from (issue #33)."""
    here = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _shipped_text_files()
        if path != here
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert not found, "cite docs/concepts.md instead:\n" + "\n".join(found)


@pytest.mark.parametrize("path", DOC_FILES, ids=[p.relative_to(ROOT).as_posix() for p in DOC_FILES])
def test_relative_links_resolve(path):
    missing = [
        target
        for target in _LINK.findall(path.read_text(encoding="utf-8"))
        if "://" not in target and not target.startswith("mailto:") and not (path.parent / target).exists()
    ]
    assert not missing, f"{path.relative_to(ROOT)} links to files that are not in the repository: {missing}"
