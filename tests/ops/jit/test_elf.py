"""The checks before a cached library is mapped: a cut-short file is named, never loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from anyaccel.ops.cpu import CPUAdamBuilder
from anyaccel.ops.jit.elf import elf_problem, library_problem
from anyaccel.ops.jit.plan import BuildPlan


def _copied_build(tmp_path: Path) -> BuildPlan:
    """A copy of the CPU optimizer library's finished build, in a plan of its own."""
    CPUAdamBuilder().load()  # the session cache holds it
    plan = CPUAdamBuilder().plan()
    copy = tmp_path / plan.extension_name
    shutil.copytree(plan.build_directory, copy)
    return BuildPlan(**{**plan.__dict__, "build_directory": str(copy)})


def _problem(plan: BuildPlan) -> str | None:
    """``library_problem`` of ``plan``'s library against the size its stamp recorded."""
    recorded = json.loads((Path(plan.build_directory) / "anyaccel-build.json").read_text())
    with open(plan.library_path, "rb") as library:
        return library_problem(library, recorded["library_bytes"])


def test_an_intact_library_has_no_problem(tmp_path: Path) -> None:
    assert _problem(_copied_build(tmp_path)) is None


def test_a_library_cut_short_is_named_with_both_sizes(tmp_path: Path) -> None:
    plan = _copied_build(tmp_path)
    recorded = json.loads((Path(plan.build_directory) / "anyaccel-build.json").read_text())
    with open(plan.library_path, "r+b") as library:
        library.truncate(1000)
    problem = _problem(plan)
    assert problem == (
        f"file too short or changed: 1000 bytes, the build wrote {recorded['library_bytes']}"
    )


def test_a_cut_short_elf_file_is_caught_from_its_headers_alone(tmp_path: Path) -> None:
    plan = _copied_build(tmp_path)
    with open(plan.library_path, "r+b") as library:
        library.truncate(1000)
    with open(plan.library_path, "rb") as library:
        problem = elf_problem(library, library.read(64), 1000)
    assert problem is not None and problem.startswith("file too short: 1000 bytes, its ELF")


def test_a_file_that_is_not_elf_is_left_to_the_size_check(tmp_path: Path) -> None:
    path = tmp_path / "library.dylib"
    path.write_bytes(b"\xcf\xfa\xed\xfe" + bytes(60))
    with open(path, "rb") as library:
        assert elf_problem(library, library.read(64), 64) is None


def test_an_unreadable_library_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    plan = _copied_build(tmp_path)
    with open(plan.library_path, "wb") as library:  # open for writing only: reads fail
        problem = library_problem(library, None)
    assert problem is not None and problem.startswith("cannot read the cached library")
