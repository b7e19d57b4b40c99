"""``anyaccel.ops`` is the kernel library below the contract: it never asks which accelerator
is current, and imports nothing above it (the contract, backends, plugins, registry, detection).
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Callable
from pathlib import Path

OPS = Path(__file__).resolve().parents[2] / "src" / "anyaccel" / "ops"

#: Modules of ours above ``ops/`` in the layer order; ``ops/`` may import none of them.
ABOVE = (
    "anyaccel.abstract",
    "anyaccel.contract",
    "anyaccel.backends",
    "anyaccel.plugins",
    "anyaccel.registry",
    "anyaccel.detection",
    "anyaccel.integrations",
    "anyaccel.distributed",
    "anyaccel.testing",
    "anyaccel.cli",
)


def _upward_references(path: Path) -> list[str]:
    """Every import of a higher layer, and every mention of ``get_accelerator``, in ``path``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name == "get_accelerator":
                found.append(f"{path.name}:{node.lineno}: get_accelerator")
        found += [
            f"{path.name}:{node.lineno}: imports {name}"
            for name in names
            if name.endswith(".get_accelerator")
            or any(name == above or name.startswith(above + ".") for above in ABOVE)
        ]
    return found


def test_no_ops_module_reaches_above_the_contract() -> None:
    sources = sorted(OPS.rglob("*.py"))
    assert len(sources) > 20
    found = [reference for path in sources for reference in _upward_references(path)]
    assert found == []


def test_the_check_sees_a_planted_back_edge(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from typing import TYPE_CHECKING\n"
        "import anyaccel\n"
        "if TYPE_CHECKING:\n"
        "    from anyaccel.abstract import Accelerator\n"
        "def current():\n"
        "    from anyaccel.registry import candidates\n"
        "    return anyaccel.get_accelerator()\n"
    )
    assert _upward_references(planted) == [
        "planted.py:4: imports anyaccel.abstract",
        "planted.py:4: imports anyaccel.abstract.Accelerator",
        "planted.py:6: imports anyaccel.registry",
        "planted.py:6: imports anyaccel.registry.candidates",
        "planted.py:7: get_accelerator",
    ]


def test_every_ops_module_and_the_capability_tables_load_nothing_above(
    run_python: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    result = run_python(
        """
        import importlib, pkgutil, sys
        import anyaccel.ops
        from anyaccel.ops import registry
        from anyaccel.ops.capabilities import capabilities
        for info in pkgutil.walk_packages(anyaccel.ops.__path__, "anyaccel.ops."):
            importlib.import_module(info.name)
        for name in registry.BUILTIN_PACKAGES:
            capabilities(name)
        print(" ".join(sorted(m for m in sys.modules if m.startswith("anyaccel."))))
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = result.stdout.split()
    assert "anyaccel.ops.cpu.cpu_adam" in loaded
    assert [module for module in loaded if module.startswith(ABOVE)] == []
