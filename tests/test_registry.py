"""The registry: built-in candidates, registering one call, and no silent replacement."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import anyaccel
from anyaccel import detection, registry
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.errors import DuplicateBackendError
from anyaccel.probe import BackendCandidate, ProbeOutcome


class Board(CpuAccelerator):
    _name = "board"


def _candidate(name: str, path: str, priority: int = 5) -> BackendCandidate:
    return BackendCandidate(name, path, priority, lambda: ProbeOutcome.found("here", 1), Board)


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Names to unregister after the test (built-ins restored if a test overrode one)."""
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister_backend(name)
        for builtin in registry.BUILTIN_CANDIDATES:
            if builtin.name == name:
                registry._candidates.append(builtin)
    registry._refresh_supported_names()


def test_registering_a_new_name_adds_it_in_priority_order(cleanup: list[str]) -> None:
    cleanup.append("board")
    registry.register_backend(_candidate("board", "board (bench)", priority=950))
    names = [c.name for c in registry.registered_backends()]
    assert names.index("cuda") < names.index("board") < names.index("cpu")
    assert "board" in anyaccel.SUPPORTED_ACCELERATOR_LIST


def test_registering_a_taken_name_is_refused_and_names_the_fix(cleanup: list[str]) -> None:
    cleanup.append("board")
    registry.register_backend(_candidate("board", "board (bench)"))
    with pytest.raises(
        DuplicateBackendError, match=r"'board' is registered already.*override=True"
    ):
        registry.register_backend(_candidate("board", "board (other)"))
    paths = [c.path for c in registry.registered_backends() if c.name == "board"]
    assert paths == ["board (bench)"]


def test_a_builtin_name_is_refused_without_override() -> None:
    with pytest.raises(DuplicateBackendError, match="'cuda' is registered already"):
        registry.register_backend(_candidate("cuda", "cuda (mine)"))
    assert [c.path for c in registry.registered_backends() if c.name == "cuda"] == [
        "cuda (torch CUDA/ROCm build)"
    ]


def test_override_replaces_every_candidate_of_the_name(cleanup: list[str]) -> None:
    cleanup.append("xpu")
    registry.register_backend(_candidate("xpu", "xpu (mine)", priority=1), override=True)
    assert [c.path for c in registry.registered_backends() if c.name == "xpu"] == ["xpu (mine)"]
    assert type(anyaccel.get_accelerator()) is Board


def test_duplicate_error_is_a_value_error_and_an_accelerator_error() -> None:
    with pytest.raises(DuplicateBackendError) as info:
        registry.register_backend(_candidate("cpu", "cpu (again)"))
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, anyaccel.AcceleratorError)


def test_builtin_names_are_the_builtin_table() -> None:
    assert registry.builtin_names() == {c.name for c in registry.BUILTIN_CANDIDATES}
    assert {"cpu", "cuda", "npu", "xpu", "generic"} <= registry.builtin_names()


def test_detection_keeps_its_old_registry_names() -> None:
    assert detection.register_backend is registry.register_backend
    assert detection.registered_backends is registry.registered_backends
    assert detection.SUPPORTED_ACCELERATOR_LIST is registry.SUPPORTED_ACCELERATOR_LIST
    assert detection._BUILTIN_CANDIDATES is registry.BUILTIN_CANDIDATES


def test_a_builtin_row_labels_itself_with_its_class_runtime_package() -> None:
    from anyaccel.backends.mlu import MluAccelerator
    from anyaccel.backends.xpu import IpexXpuAccelerator

    labels = {c.accelerator: c.path for c in registry.BUILTIN_CANDIDATES}
    assert labels["anyaccel.backends.mlu:MluAccelerator"] == (
        f"mlu ({MluAccelerator.runtime_package})"
    )
    assert labels["anyaccel.backends.xpu:IpexXpuAccelerator"] == (
        f"xpu ({IpexXpuAccelerator.runtime_package})"
    )
    assert labels["anyaccel.backends.cpu:CpuAccelerator"] == "cpu (fallback)"


@pytest.mark.parametrize("forced", ["cpu", None])
def test_the_registry_imports_no_backend_before_detection_probes_it(forced: str | None) -> None:
    """Forcing cpu probes cpu alone: no vendor backend is imported for the trace's labels."""
    script = (
        "import sys, warnings; warnings.simplefilter('ignore'); import anyaccel\n"
        "from anyaccel import registry\n"
        "registry.registered_backends(include_plugins=False)\n"
        "assert 'anyaccel.backends.npu' not in sys.modules, 'read the rows'\n"
        "anyaccel.get_accelerator()\n"
        "print(sorted(m for m in sys.modules if m.startswith('anyaccel.backends.')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    if forced is not None:
        env["DS_ACCELERATOR"] = forced
    env["PYTHONPATH"] = str(Path(anyaccel.__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    imported = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert ("anyaccel.backends.npu" in imported) is (forced is None)  # probed: then imported
