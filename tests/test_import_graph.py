"""The import graph of src/anyaccel: every import of ours points down the declared layers.

Every import counts: module level, inside functions, under ``TYPE_CHECKING``. A lower layer
that must name something higher does so as a ``"module:attr"`` string resolved in one place
(the registry's candidates, the CLI's command table), never by an import or by reading
``sys.modules``. docs/architecture.md shows the same table.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "anyaccel"
ARCHITECTURE_PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

#: The layers, bottom up: (name, module prefixes). A module belongs to the layer of the
#: longest prefix that matches it; ``anyaccel`` alone is the package's public face.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "vocabulary",
        (
            "anyaccel.errors",
            "anyaccel.extras",
            "anyaccel.forksafe",
            "anyaccel.probe",
            "anyaccel.tensor_types",
            "anyaccel.synchronous",
            "anyaccel.settings",
            "anyaccel.porting",
        ),
    ),
    (
        "guard and kernels",
        ("anyaccel.guard", "anyaccel.deepspeed_abc", "anyaccel.ops", "anyaccel.emulated"),
    ),
    ("contract", ("anyaccel.instance_defaults", "anyaccel.abstract", "anyaccel.contract")),
    ("backends", ("anyaccel.backends", "anyaccel.plugins", "anyaccel.emulated.accelerator")),
    ("registry", ("anyaccel.registry",)),
    ("detection", ("anyaccel.detection",)),
    (
        "face",
        (
            "anyaccel",
            "anyaccel.integrations",
            "anyaccel.distributed",
            "anyaccel.testing",
            "anyaccel.emulated.collectives",
            "anyaccel.emulated.vendors",
        ),
    ),
    ("cli", ("anyaccel.cli", "anyaccel.__main__")),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (the longest matching prefix decides)."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    if best is None:
        raise LookupError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
    return best[1]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _exports(root: Path) -> dict[str, str]:
    """The package's lazily exported names and the module defining each (its ``_EXPORTS``)."""
    tree = ast.parse((root / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                return {
                    ast.literal_eval(k): ast.literal_eval(v)
                    for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if k is not None
                }
    return {}


def imports_of(path: Path, root: Path, modules: set[str], exports: dict[str, str]) -> set[str]:
    """Every module of ours ``path`` imports, wherever the import statement stands."""
    module = module_name(path, root)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in modules:
                found.add(submodule)  # ``from package import module``
            elif base == "anyaccel" and alias.name in exports:
                found.add(exports[alias.name])  # ``from anyaccel import get_accelerator``
            else:
                found.add(base)
    # A module's own packages are initialised before it runs: importing them adds no edge,
    # except the top package, whose names are the public face above everything else.
    ancestors = {".".join(module.split(".")[:i]) for i in range(2, module.count(".") + 1)}
    if module != "anyaccel" and any(
        isinstance(n, ast.Import) and any(a.name == "anyaccel" for a in n.names)
        for n in ast.walk(ast.parse(path.read_text()))
    ):
        found.add("anyaccel")
    else:
        found.discard("anyaccel")
    return {name for name in found - ancestors if name in modules and name != module}


#: The suffixes of our compiled sources (each ``csrc/`` folder's).
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")
#: A C++ string literal that is one of our module names (``"anyaccel.x"``, ``"anyaccel.x:attr"``),
#: as ``py::module_::import`` takes it: an import the Python walker cannot see.
_NATIVE_NAME = re.compile(r'"(anyaccel(?:\.\w+)*)(?::\w+)?"')


def native_imports(root: Path, modules: set[str]) -> dict[str, set[str]]:
    """Our modules named in compiled sources, as imports of the package holding the source
    (``ops/cpu/csrc/x.cpp`` counts as ``anyaccel.ops.cpu``): loading the module runs them."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in NATIVE_SUFFIXES or not path.is_file():
            continue
        package = path.parent
        while not (package / "__init__.py").exists():
            package = package.parent
        owner = module_name(package / "__init__.py", root)
        names = {
            match.group(1) for match in _NATIVE_NAME.finditer(path.read_text("utf-8", "replace"))
        }
        found.setdefault(owner, set()).update(name for name in names if name in modules)
    return found


def import_graph(root: Path = SOURCE) -> dict[str, set[str]]:
    """Every module's imports of ours, with the modules its package's compiled sources name."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    exports = _exports(root)
    graph = {name: imports_of(path, root, set(paths), exports) for name, path in paths.items()}
    for owner, names in native_imports(root, set(paths)).items():
        graph[owner] |= names - {owner}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
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


class BackEdge(NamedTuple):
    """An import from a module to one in a higher layer."""

    importer: str
    imported: str

    def __str__(self) -> str:
        low, high = LAYERS[layer_of(self.importer)][0], LAYERS[layer_of(self.imported)][0]
        return f"{self.importer} ({low}) imports {self.imported} ({high})"


def back_edges(graph: dict[str, set[str]]) -> list[BackEdge]:
    return sorted(
        BackEdge(importer, imported)
        for importer, targets in graph.items()
        for imported in targets
        if layer_of(imported) > layer_of(importer)
    )


_PEEK = re.compile(r"""sys\.modules(?:\.get\(|\[)\s*["']anyaccel""")


def sys_modules_peeks(root: Path = SOURCE) -> list[str]:
    """Places that read one of our modules out of ``sys.modules`` instead of importing it."""
    return [
        f"{path.relative_to(root.parent)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _PEEK.search(line)
    ]


# ---------------------------------------------------------------------- the rules
GRAPH = import_graph()


def test_every_module_is_in_a_layer() -> None:
    for module in GRAPH:
        layer_of(module)  # raises naming the module otherwise


def test_every_import_points_down_or_across() -> None:
    found = back_edges(GRAPH)
    assert not found, "imports against the layer order:\n" + "\n".join(map(str, found))


def test_all_imports_form_no_cycle() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_module_peeks_into_sys_modules_for_ours() -> None:
    assert sys_modules_peeks() == []


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m.startswith("anyaccel.backends")))
def test_a_backend_never_imports_detection_or_the_registry(module: str) -> None:
    assert not GRAPH[module] & {"anyaccel.detection", "anyaccel.registry", "anyaccel.plugins"}, (
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


def test_the_architecture_page_shows_the_declared_layers() -> None:
    rows = [
        line
        for line in ARCHITECTURE_PAGE.read_text().splitlines()
        if re.match(r"\|\s*\d+\s*\|", line)
    ]
    shown = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        shown.append((cells[1], tuple(re.findall(r"`(anyaccel[\w.]*)`", cells[2]))))
    declared = [(name, tuple(sorted(p))) for name, p in LAYERS]
    assert [(name, tuple(sorted(p))) for name, p in shown] == declared


# ---------------------------------------------------------------------- the test, tested
def test_the_walker_sees_imports_wherever_they_stand() -> None:
    assert "anyaccel.probe" in GRAPH["anyaccel.backends.cpu"]
    assert "anyaccel.registry" in GRAPH["anyaccel.detection"]
    # abstract.py imports the op registry inside a method
    assert "anyaccel.ops.registry" in GRAPH["anyaccel.abstract"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A copy of the package to plant faults in."""
    copy = tmp_path / "anyaccel"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__", "csrc"))
    return copy


_IN_A_FUNCTION = "def _planted():\n    {}\n"


@pytest.mark.parametrize(
    ("where", "plant", "importer", "imported"),
    [
        (
            "errors.py",
            _IN_A_FUNCTION.format("from anyaccel.detection import get_accelerator"),
            "anyaccel.errors",
            "anyaccel.detection",
        ),
        (
            "probe.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from anyaccel.abstract import Accelerator\n",
            "anyaccel.probe",
            "anyaccel.abstract",
        ),
        (
            "ops/registry.py",
            _IN_A_FUNCTION.format("from anyaccel import get_accelerator"),
            "anyaccel.ops.registry",
            "anyaccel.detection",
        ),
        (
            "ops/registry.py",
            _IN_A_FUNCTION.format("import anyaccel"),
            "anyaccel.ops.registry",
            "anyaccel",
        ),
        (
            "abstract.py",
            _IN_A_FUNCTION.format("from .integrations import deepspeed"),
            "anyaccel.abstract",
            "anyaccel.integrations.deepspeed",
        ),
    ],
)
def test_a_planted_back_edge_fails_the_rule(
    planted: Path, where: str, plant: str, importer: str, imported: str
) -> None:
    target = planted / where
    target.write_text(target.read_text() + "\n" + plant)
    assert BackEdge(importer, imported) in back_edges(import_graph(planted))


def test_a_module_named_in_cpp_is_an_import_of_its_package(planted: Path) -> None:
    # the shared-memory kernel once imported the DeepSpeed integration as it loaded
    csrc = planted / "ops" / "cpu" / "csrc"
    csrc.mkdir()
    (csrc / "planted.cpp").write_text(
        "#include <pybind11/pybind11.h>\n"
        'constexpr const char* kGlue = "anyaccel.integrations.deepspeed";\n'
        'void f() { pybind11::module_::import("anyaccel.distributed.shm.group"); }\n'
        '// a message naming "anyaccel.testing.emulated.install() first" is no import\n'
    )
    graph = import_graph(planted)
    assert BackEdge("anyaccel.ops.cpu", "anyaccel.integrations.deepspeed") in back_edges(graph)
    assert BackEdge("anyaccel.ops.cpu", "anyaccel.distributed.shm.group") in back_edges(graph)
    assert "anyaccel.testing.emulated" not in graph["anyaccel.ops.cpu"]


def test_no_compiled_source_names_a_module_above_its_package() -> None:
    native = native_imports(SOURCE, set(GRAPH))
    upward = [(owner, name) for owner, names in native.items() for name in names
              if layer_of(name) > layer_of(owner)]  # fmt: skip
    assert upward == [], "compiled code imports a higher layer: " + repr(upward)


def test_a_planted_cycle_fails_the_rule(planted: Path) -> None:
    (planted / "guard.py").write_text(
        (planted / "guard.py").read_text() + "\ndef _f():\n    from anyaccel import deepspeed_abc\n"
    )
    (planted / "deepspeed_abc.py").write_text(
        (planted / "deepspeed_abc.py").read_text() + "\ndef _g():\n    from anyaccel import guard\n"
    )
    cycle = find_cycle(import_graph(planted))
    assert cycle is not None and {"anyaccel.guard", "anyaccel.deepspeed_abc"} <= set(cycle)


def test_a_planted_sys_modules_peek_fails_the_rule(planted: Path) -> None:
    (planted / "registry.py").write_text(
        (planted / "registry.py").read_text()
        + '\nimport sys\n_p = sys.modules.get("anyaccel.plugins")\n'
    )
    assert sys_modules_peeks(planted) == [f"anyaccel/registry.py:{_last_line(planted)}"]


def _last_line(root: Path) -> int:
    return len((root / "registry.py").read_text().splitlines())


def test_a_module_outside_every_layer_is_named() -> None:
    with pytest.raises(LookupError, match="anyaccel_other"):
        layer_of("anyaccel_other.x")
