"""The seams of the service, read from the source with ``ast`` (nothing is imported): the
store (service/store) knows nothing of HTTP, and the HTTP layer (service/api) runs no worker.
Route modules take what they use through typed dependencies and hold no SQL."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (imports inside functions count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _under(names: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))


def _modules(layer: str) -> list[Path]:
    paths = sorted((SERVICE / layer).rglob("*.py"))
    assert paths, f"no modules under service/{layer}"
    return paths


@pytest.mark.parametrize("path", _modules("store"), ids=lambda p: str(p.relative_to(SERVICE)))
def test_the_store_imports_no_web_framework_and_nothing_of_the_api(path: Path) -> None:
    bad = _under(_imports(path), ("fastapi", "starlette", "service.api"))
    assert not bad, f"{path.relative_to(SERVICE.parent)} imports {bad}"


@pytest.mark.parametrize("path", _modules("api"), ids=lambda p: str(p.relative_to(SERVICE)))
def test_the_api_imports_nothing_of_the_worker(path: Path) -> None:
    bad = _under(_imports(path), ("worker",))
    assert not bad, f"{path.relative_to(SERVICE.parent)} imports {bad}"


SQL_NAMES = {"select", "update", "insert", "delete", "bindparam", "text", "exists", "func"}


@pytest.mark.parametrize("path", sorted((SERVICE / "api" / "routes").glob("*.py")), ids=lambda p: p.name)
def test_routes_hold_no_sql_and_never_read_the_app_state(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    sql = sorted(
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy")
        for alias in node.names
        if alias.name in SQL_NAMES
    )
    calls = sorted(
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"execute", "scalars", "scalar"}
    )
    state = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "state"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "app"
    ]
    assert not sql and not calls, f"{path.name} builds or runs SQL: {sql + calls}"
    assert not state, f"{path.name} reads request.app.state at lines {state}"
