"""The on-disk cache: a finished build loads in any process; concurrent builds build once."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from anyaccel.ops.cpu import CPUAdamBuilder

from ..test_builder import TINY_OP, tmp_builder

RunPython = Callable[..., subprocess.CompletedProcess[str]]


def test_cached_build_loads_in_a_new_process_without_any_build_tool(run_python: RunPython) -> None:
    CPUAdamBuilder().load()  # make sure the session cache holds it
    result = run_python(
        """
        import time
        import torch
        from anyaccel.ops.cpu import CPUAdamBuilder
        started = time.perf_counter()
        module = CPUAdamBuilder().load()
        print(module.simd_level(), f"{time.perf_counter() - started:.3f}")
        """,
        env={"PATH": "/nonexistent"},  # neither ninja nor a compiler is reachable
    )
    assert result.returncode == 0, result.stderr
    level, seconds = result.stdout.split()
    assert level in ("avx512", "avx2", "neon", "generic")
    print(f"cached load in a new process: {seconds} s")  # informative only, never asserted


def test_two_processes_building_the_same_op_at_once_both_succeed(
    tmp_path: Path, run_python: RunPython
) -> None:
    source = tmp_path / "race_op.cpp"
    source.write_text(TINY_OP)
    code = (
        "from anyaccel.ops.builder import OpBuilder\n"
        "class RaceBuilder(OpBuilder):\n"
        "    NAME = 'race_op'\n"
        f"    def sources(self): return [{str(source)!r}]\n"
        "print(RaceBuilder().load().answer())\n"
    )
    extensions = tmp_path / "extensions"
    env = {"TORCH_EXTENSIONS_DIR": str(extensions)}
    launcher = f"""
        import os, subprocess, sys
        env = dict(os.environ)
        procs = [subprocess.Popen([sys.executable, "-c", {code!r}], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outputs = [proc.communicate(timeout=280) for proc in procs]
        for proc, (out, err) in zip(procs, outputs):
            print(proc.returncode, out.strip(), err.strip()[-300:].replace(chr(10), ' '))
        """
    result = run_python(launcher, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("0 42") for line in lines), result.stdout
    built = [path for path in extensions.iterdir() if path.name.startswith("anyaccel_race_op_")]
    assert len(built) == 1 and (built[0] / "anyaccel-build.json").exists()


def test_a_stale_torch_lock_file_does_not_block_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cache of its own: the shared one may hold this op's build from an earlier run
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    builder = tmp_builder(tmp_path, TINY_OP, name="stale_lock")
    build_dir = Path(builder.plan().build_directory)
    build_dir.mkdir(parents=True)
    (build_dir / "lock").write_text("")  # left by a killed torch build
    assert builder.load().answer() == 42


def test_two_cached_ops_load_in_one_process_without_a_rebuild(
    tmp_path: Path, run_python: RunPython
) -> None:
    # dlopen knows a library by the /proc/self/fd/N path it was loaded through: were that
    # descriptor closed, the second op would reuse its number and get the first op's library
    # back (no PyInit_ of its own), then be rebuilt on every run
    builders = [tmp_builder(tmp_path, TINY_OP, name=name) for name in ("fd_first", "fd_second")]
    for builder in builders:
        assert builder.load().answer() == 42  # built and cached here
    code = "\n".join(
        [
            "import sys",
            f"sys.path.insert(0, {str(Path(__file__).parents[3])!r})",
            "from pathlib import Path",
            "from tests.ops.test_builder import TINY_OP, tmp_builder",
            f"here = Path({str(tmp_path)!r})",
            "for name in ('fd_first', 'fd_second'):",
            "    print(tmp_builder(here, TINY_OP, name=name).load().answer())",
        ]
    )
    result = run_python(code, env={"PATH": "/nonexistent"})  # a rebuild would fail: no compiler
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["42", "42"]
    assert "does not load" not in result.stderr and "building op" not in result.stderr
