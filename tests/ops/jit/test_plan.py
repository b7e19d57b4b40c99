"""BuildPlan: where a build is cached, its paths, and whether it is finished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyaccel.ops.cpu import CPUAdamBuilder
from anyaccel.ops.jit.plan import BuildPlan, extensions_root, is_built


def test_extensions_root_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert extensions_root() == tmp_path
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert extensions_root() == tmp_path / "cache" / "torch_extensions"


def test_build_plan_paths() -> None:
    plan: BuildPlan = CPUAdamBuilder().plan()
    assert plan.library_path.endswith(f"{plan.extension_name}.so")
    assert plan.log_path.startswith(plan.build_directory)


def test_a_plan_is_built_only_with_its_key_in_the_stamp_and_its_library_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    plan = CPUAdamBuilder().plan()
    assert not is_built(plan)
    build_directory = Path(plan.build_directory)
    build_directory.mkdir(parents=True)
    stamp = build_directory / "anyaccel-build.json"
    stamp.write_text(json.dumps({"key": plan.key}))
    assert not is_built(plan)  # no library yet
    Path(plan.library_path).write_bytes(b"")
    assert is_built(plan)
    assert "cached: yes" in plan.describe()
    stamp.write_text(json.dumps({"key": "another build"}))
    assert not is_built(plan)
    stamp.write_text("{half a stamp")
    assert not is_built(plan)
