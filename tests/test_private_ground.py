"""anyaccel reaches accelerate, transformers and torch.distributed only through public names.

Every module under ``src/anyaccel`` is read (its AST, never imported): a name bound to one of
those frameworks (an import, ``importlib.import_module("...")``, or a variable assigned from
one) followed by an attribute, or a ``getattr`` string, that starts with ``_`` is a use of
their private ground. Only the documented hooks in :data:`HOOKS` may do it; each names why,
and its docstring says what it falls back to. (Lightning's hooks are checked by the Lightning
integration's own tests, as ``integrations/lightning`` is.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import anyaccel

SRC = Path(anyaccel.__file__).resolve().parent
FRAMEWORKS = ("accelerate", "transformers", "torch.distributed", "torch._C._distributed_c10d")
#: Framework modules that are private as a whole (torch.distributed's compiled half).
PRIVATE_MODULES = {"torch._C._distributed_c10d": "_distributed_c10d"}
#: (module path under src/anyaccel, private name) -> why the hook exists.
HOOKS: dict[tuple[str, str], str] = {
    ("integrations/accelerate.py", "_shared_state"): (
        "accelerate has no public test for an existing PartialState; falls back to "
        "accelerate.state.is_initialized()"
    ),
}


def _framework(dotted: str) -> bool:
    return any(dotted == name or dotted.startswith(name + ".") for name in FRAMEWORKS)


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` with ``a`` resolved through ``aliases``; calls kept as ``()``; else None."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            module = _import_module_call(node)
            if module is not None:
                return ".".join([module, *reversed(parts)])
            parts.append("()")
            node = node.func
        elif isinstance(node, ast.Name):
            root = aliases.get(node.id)
            return None if root is None else ".".join([root, *reversed(parts)])
        else:
            return None


def _import_module_call(node: ast.Call) -> str | None:
    """The module name of ``importlib.import_module("name")``, else None."""
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )
    if named and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Every name in the module bound to something of the frameworks (to a fixed point)."""
    aliases: dict[str, str] = {}
    for _ in range(4):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                dotted = _dotted(node.value, aliases)
                if dotted is None or not _framework(dotted):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        aliases[target.id] = dotted
    return aliases


def _private(dotted: str) -> str | None:
    """The first private component after the framework's own name, else None."""
    for module, private in PRIVATE_MODULES.items():
        if dotted == module or dotted.startswith(module + "."):
            return private
    for name in FRAMEWORKS:
        if dotted == name or dotted.startswith(name + "."):
            for part in dotted[len(name) + 1 :].split("."):
                if part.startswith("_") and not part.startswith("__"):
                    return part
            return None
    return None


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, private name) for each use of the frameworks' private ground in ``source``."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        dotted: str | None = None
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node, aliases)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2:
                owner, name = _dotted(node.args[0], aliases), node.args[1]
                if owner and isinstance(name, ast.Constant) and isinstance(name.value, str):
                    dotted = f"{owner}.{name.value}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                private = _private(f"{node.module}.{alias.name}")
                if private:
                    found.append((node.lineno, private))
        if dotted is not None:
            private = _private(dotted)
            if private:
                found.append((node.lineno, private))  # type: ignore[attr-defined]
    return sorted(set(found))


def _modules() -> list[Path]:
    return sorted(
        path
        for path in SRC.rglob("*.py")
        if not path.relative_to(SRC).as_posix().startswith("integrations/lightning")
    )


def test_only_the_documented_hooks_touch_private_names_of_the_frameworks() -> None:
    unexpected = [
        f"{path.relative_to(SRC).as_posix()}:{line}: {name}"
        for path in _modules()
        for line, name in private_uses(path.read_text(encoding="utf-8"))
        if (path.relative_to(SRC).as_posix(), name) not in HOOKS
    ]
    assert unexpected == []


def test_every_documented_hook_is_still_used() -> None:
    """A hook that is gone must leave :data:`HOOKS` too (the list is the report)."""
    used = {
        (path.relative_to(SRC).as_posix(), name)
        for path in _modules()
        for _, name in private_uses(path.read_text(encoding="utf-8"))
    }
    assert set(HOOKS) <= used


@pytest.mark.parametrize(
    ("source", "found"),
    [
        # what the accelerate integration and the c10d backend did before
        (
            "import importlib\n"
            "state = importlib.import_module('accelerate.state')\n"
            "partial_state = state.PartialState\n"
            "partial_state._prepare_backend(None, True, False, None)\n",
            [(4, "_prepare_backend")],
        ),
        (
            "import torch.distributed as dist\ngetattr(dist.Backend, '_plugins', {})\n",
            [(2, "_plugins")],
        ),
        ("import torch\nx = torch._C._distributed_c10d\n", [(2, "_distributed_c10d")]),
        (
            "from accelerate.state import PartialState\nPartialState._shared_state\n",
            [(2, "_shared_state")],
        ),
        # public names and anyaccel's own private names are fine
        ("import torch.distributed as dist\ndist.Backend.backend_list\n", []),
        ("import accelerate\n_mine = 1\naccelerate.Accelerator\n", []),
    ],
)
def test_the_scan_finds_private_names_through_aliases(
    source: str, found: list[tuple[int, str]]
) -> None:
    assert private_uses(source) == found
