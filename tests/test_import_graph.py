"""The import graph of src/anyaccel: module-level imports only point down, and stay acyclic."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "anyaccel"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    # ``from package import module`` imports the submodule too.
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _imports(path: Path, *, module_level_only: bool) -> set[str]:
    """The anyaccel modules ``path`` imports (at import time, or anywhere if not only those)."""
    tree = ast.parse(path.read_text(), str(path))
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.update(_imported(node, module, is_package))
            elif isinstance(node, ast.If) and _is_type_checking(node):
                continue  # not executed at run time
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for block in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, block, []):
                        visit(child.body if isinstance(child, ast.ExceptHandler) else [child])

    if module_level_only:
        visit(tree.body)
    else:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.update(_imported(node, module, is_package))
    # A module's own packages are initialised before it runs: importing them adds no edge.
    ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    return {
        name for name in found - ancestors if name == "anyaccel" or name.startswith("anyaccel.")
    }


MODULES = {_module_name(p): p for p in sorted(SOURCE.rglob("*.py"))}


def _graph(*, module_level_only: bool = True) -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        targets = _imports(path, module_level_only=module_level_only)
        graph[name] = {t for t in targets if t in MODULES and t != name}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := walk(target)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)) is not None:
            return cycle
    return None


def test_the_walker_sees_the_imports_it_must() -> None:
    graph = _graph()
    assert "anyaccel.probe" in graph["anyaccel.backends.cpu"]
    assert "anyaccel.registry" in graph["anyaccel.detection"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_module_level_imports_form_no_cycle() -> None:
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("anyaccel.backends")))
def test_a_backend_never_imports_detection_or_the_registry(module: str) -> None:
    imported = _imports(MODULES[module], module_level_only=False)
    assert not imported & {"anyaccel.detection", "anyaccel.registry", "anyaccel.plugins"}, (
        f"{module} imports the modules that choose it: a backend imports only anyaccel.probe "
        "and the contract"
    )


@pytest.mark.parametrize("module", ["anyaccel.probe", "anyaccel.forksafe", "anyaccel.errors"])
def test_bottom_modules_load_nothing_else_of_ours(module: str) -> None:
    script = (
        f"import sys, {module}\nprint(sorted(m for m in sys.modules if m.startswith('anyaccel')))"
    )
    env = {**os.environ, "PYTHONPATH": str(SOURCE.parent)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(["anyaccel", module])
