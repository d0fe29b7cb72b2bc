"""The architecture's rules, read from the source: which package may import which, and no
import circle anywhere (docs/architecture.md, "Who may import whom")."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nas", "service", "worker", "bench")

# (importer prefix, forbidden import prefixes): the first rule whose prefix matches applies.
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("nas", ("service", "worker", "bench", "fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn")),
    ("worker.engine", ("service", "worker.jobs", "bench", "fastapi", "starlette", "sqlalchemy")),
    ("worker.jobs", ("service.api", "service.cli", "bench", "fastapi", "starlette")),
    ("worker", ("service", "bench", "torch")),  # worker/__init__.py: a namespace, nothing heavy
    ("service.store", ("service.api", "service.cli", "worker", "bench", "fastapi", "starlette")),
    ("service.api", ("service.cli", "worker", "bench")),
    ("service.cli", ("bench",)),
    ("service", ("bench",)),
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations/versions" not in path.as_posix()
    }


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module ``name`` imports, at module level or inside a function (both count)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in _modules())


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _rule_for(module: str) -> tuple[str, ...]:
    for prefix, forbidden in RULES:
        if _matches(module, prefix) and not (prefix == "worker" and module != "worker"):
            return forbidden
    return ()


@pytest.mark.parametrize("module", sorted(_modules()))
def test_a_module_imports_only_what_its_layer_allows(module: str) -> None:
    forbidden = _rule_for(module)
    bad = sorted({imp for imp in _imports(module, _modules()[module]) if any(_matches(imp, f) for f in forbidden)})
    assert not bad, f"{module} imports {bad}, which its layer may not (docs/architecture.md)"


def test_no_import_circle_anywhere() -> None:
    modules = _modules()
    graph = {
        name: sorted({imp for imp in _imports(name, path) if imp in modules and imp != name})
        for name, path in modules.items()
    }
    # A package's __init__ re-exporting its own submodules is not a circle of meaning.
    graph = {name: [dep for dep in deps if not _matches(name, dep) or dep == name] for name, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in graph[node]:
            if state.get(dep) == 1:
                circles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_rules_catch_a_forbidden_import() -> None:
    assert any(_matches("fastapi", f) for f in _rule_for("service.store.jobs"))
    assert any(_matches("service.store.jobs", f) for f in _rule_for("worker.engine.pipeline"))
    assert any(_matches("torch", f) for f in _rule_for("worker"))
    assert not any(_matches("service.store.jobs", f) for f in _rule_for("worker.jobs.runner"))
