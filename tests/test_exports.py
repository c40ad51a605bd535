"""The exported surface, pinned (as httpx's ``tests/test_exported_members.py``).

A name enters or leaves ``efface.__all__`` or ``efface.gate.__all__`` only by changing the
list here too, in the same commit: the public surface never moves by accident. Every
exported name must import and carry its own docstring (for a constant, the string literal
right after its assignment); dunder names such as ``__version__`` are conventions, exempt.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType

import pytest

import efface
import efface.errors
import efface.gate

EFFACE_ALL = [
    "BackupCorrupt",
    "BackupMismatch",
    "BackupResult",
    "Claim",
    "Client",
    "CommonIdentifier",
    "EffaceError",
    "EmbedderMismatch",
    "ErasureNotSettled",
    "Hit",
    "InvalidArguments",
    "InvalidInput",
    "KeyInUse",
    "Memory",
    "NotFound",
    "OriginUnreachable",
    "PathState",
    "Receipt",
    "Released",
    "RestoreResult",
    "Retained",
    "ScopeError",
    "Selector",
    "Status",
    "Store",
    "StoreDamaged",
    "StoreLocked",
    "StoreUnwritable",
    "Turn",
    "UnknownBasis",
    "UnknownPurpose",
    "UnverifiableDeletion",
    "__version__",
    "open",
]

GATE_ALL = [
    "CacheRoutedVerification",
    "Check",
    "Classification",
    "ErasureNotSettled",
    "ForgetAck",
    "ForgetResult",
    "Gate",
    "MemoryTool",
    "POLICIES",
    "REQUIREMENTS",
    "ToolHit",
    "UnboundedPropagation",
    "UnenumeratedScope",
    "UnverifiableDeletion",
    "VerificationRead",
    "assert_deleted",
    "classify",
]

GATE_ERRORS = {
    "ErasureNotSettled",
    "UnverifiableDeletion",
    "UnenumeratedScope",
    "CacheRoutedVerification",
    "UnboundedPropagation",
}
"""What the gate's functions raise on purpose: ``Gate.recall`` and ``assert_deleted``."""

MODULES = {"efface": (efface, EFFACE_ALL), "efface.gate": (efface.gate, GATE_ALL)}
EXPORTED = [(module, name) for module, (_, names) in MODULES.items() for name in names]


@pytest.mark.parametrize("module", MODULES)
def test_all_is_pinned(module):
    mod, expected = MODULES[module]
    assert len(set(mod.__all__)) == len(mod.__all__), f"{module}.__all__ lists a name twice"
    assert sorted(mod.__all__) == expected


@pytest.mark.parametrize("module", MODULES)
def test_star_import_gives_exactly_all(module):
    namespace: dict = {}
    exec(f"from {module} import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == MODULES[module][1]


def _own_doc(obj: object) -> str | None:
    """The object's own docstring: not a base class's, not a dataclass's generated signature."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):  # dataclass(...) made it up
        return None
    return doc


def _attribute_doc(module: ModuleType, name: str) -> str | None:
    """The string literal right after ``name = ...`` where the module, or the sibling module
    it imports the name from, assigns it."""
    tree = ast.parse(inspect.getsource(module))
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
            source = importlib.import_module("." * node.level + (node.module or ""), package)
            return _attribute_doc(source, name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            after = tree.body[i + 1] if i + 1 < len(tree.body) else None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return after.value.value
            return None
    return None


@pytest.mark.parametrize("module, name", EXPORTED)
def test_every_exported_name_imports_and_is_documented(module, name):
    namespace: dict = {}
    exec(f"from {module} import {name}", namespace)  # importable under its exported name
    obj = namespace[name]
    if name.startswith("__") and name.endswith("__"):
        return
    if inspect.isclass(obj) or inspect.isroutine(obj):
        doc = _own_doc(obj)
    else:
        doc = _attribute_doc(MODULES[module][0], name)
    assert doc, f"{module}.{name} has no docstring of its own"


def test_gate_exports_the_errors_it_raises_as_the_same_classes():
    for name in GATE_ERRORS:
        assert name in efface.gate.__all__
        assert getattr(efface.gate, name) is getattr(efface.errors, name)
        assert issubclass(getattr(efface.gate, name), efface.EffaceError)
