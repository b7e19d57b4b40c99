"""The registry: built-in candidates, registering one call, and no silent replacement."""

from __future__ import annotations

from collections.abc import Iterator

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
