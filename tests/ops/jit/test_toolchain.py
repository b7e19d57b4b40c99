"""The build tools: ninja, the C++ compiler and nvcc, found by PATH lookups with remedies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anyaccel.ops.jit.toolchain import cxx_compiler, find_ninja, toolchain_problem


def test_toolchain_problem_is_none_when_tools_are_present() -> None:
    assert toolchain_problem() is None


def test_tool_lookups_follow_path_and_cxx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ninja() is None
    monkeypatch.delenv("CXX", raising=False)
    assert cxx_compiler() == "c++"
    monkeypatch.setenv("CXX", "clang++")
    assert cxx_compiler() == "clang++"


def test_missing_ninja_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert toolchain_problem() == "ninja is not on PATH; install it with `pip install ninja`"


def test_missing_nvcc_names_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if toolchain_problem() is not None:
        pytest.skip("ninja or the C++ compiler is missing here")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    without_nvcc = [
        path for path in os.environ["PATH"].split(os.pathsep) if not (Path(path) / "nvcc").exists()
    ]
    monkeypatch.setenv("PATH", os.pathsep.join(without_nvcc))
    problem = toolchain_problem(with_cuda=True)
    assert problem is not None
    assert problem.startswith(f"nvcc not found (looked in {tmp_path / 'bin' / 'nvcc'} and PATH)")
    assert "set CUDA_HOME" in problem
