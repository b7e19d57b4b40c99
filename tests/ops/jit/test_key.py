"""The build key: the hash that names a cached build, so a build from before still loads."""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

import pytest

from anyaccel.ops.cpu import CPUAdagradBuilder, CPUAdamBuilder, CPULionBuilder
from anyaccel.ops.errors import OpBuildError
from anyaccel.ops.jit.key import build_key

from ..test_builder import tmp_builder


def test_the_cpu_optimizer_library_key_is_the_one_earlier_releases_computed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key is written out here as every release since the cache began computed it: a change
    makes every user's cached build stale (then bump ``LAYOUT_VERSION`` on purpose instead)."""
    import torch

    monkeypatch.delenv("CXX", raising=False)
    plan = CPUAdamBuilder().plan()
    context = [
        "1",
        "cpu_optim",
        torch.__version__,
        sys.implementation.cache_tag,
        platform.machine(),
        "c++",
        "False",
    ]
    flags = [list(plan.include_paths), list(plan.cflags), [], list(plan.ldflags)]
    digest = hashlib.sha256(json.dumps([context, flags]).encode())
    for path in plan.sources + plan.depends:
        digest.update(Path(path).read_bytes())
    assert plan.key == digest.hexdigest()
    assert plan.extension_name == f"anyaccel_cpu_optim_{digest.hexdigest()[:12]}"
    assert {builder().plan().key for builder in (CPUAdagradBuilder, CPULionBuilder)} == {plan.key}


def test_the_key_follows_the_compiler_cuda_flags_and_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source = tmp_path / "a.cpp"
    source.write_text("// one")
    files, flags = (str(source),), (("-O3",),)
    monkeypatch.setenv("CXX", "g++")
    base = build_key("op", "lib", files, flags, with_cuda=False)
    assert build_key("op", "lib", files, flags, with_cuda=False) == base
    assert build_key("op", "lib", files, flags, with_cuda=True) != base
    assert build_key("op", "lib", files, (("-O2",),), with_cuda=False) != base
    assert build_key("op", "other", files, flags, with_cuda=False) != base
    monkeypatch.setenv("CXX", "clang++")
    assert build_key("op", "lib", files, flags, with_cuda=False) != base
    monkeypatch.setenv("CXX", "g++")
    source.write_text("// two")
    assert build_key("op", "lib", files, flags, with_cuda=False) != base


def test_unreadable_source_names_the_file(tmp_path: Path) -> None:
    builder = tmp_builder(tmp_path, "", name="vanishing")
    Path(builder.sources()[0]).unlink()
    with pytest.raises(OpBuildError, match=r"vanishing\.cpp"):
        builder.plan()
