"""OpBuilder: dry-run plans, caching across processes, concurrent builds and clear errors."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from anyaccel.ops import builder as builder_module
from anyaccel.ops.builder import (
    BuildPlan,
    OpBuilder,
    cxx_compiler,
    extensions_root,
    find_ninja,
    first_error_lines,
    is_built,
    toolchain_problem,
)
from anyaccel.ops.cpu import CPUAdagradBuilder, CPUAdamBuilder, CPULionBuilder
from anyaccel.ops.errors import BuildToolMissingError, OpBuildError

RunPython = Callable[..., subprocess.CompletedProcess[str]]


def tmp_builder(source_dir: Path, code: str, name: str = "tmp_op") -> OpBuilder:
    """A builder compiling one C++ file written to ``source_dir``."""
    source = source_dir / f"{name}.cpp"
    source.write_text(code)

    class TmpBuilder(OpBuilder):
        NAME = name

        def sources(self) -> list[str]:
            return [str(source)]

    return TmpBuilder()


def c_module(init: str = "return PyModule_Create(&module_def);") -> str:
    """A Python module in plain C API with ``answer() == 42``: it compiles in well under a second,
    where pybind11's headers take several (these tests are about building, not binding)."""
    return (
        "#include <Python.h>\n"
        "#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\n"
        "#define STR_(a) #a\n#define STR(a) STR_(a)\n"
        "static PyObject* answer(PyObject*, PyObject*) { return PyLong_FromLong(42); }\n"
        'static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, nullptr},\n'
        "                                {nullptr, nullptr, 0, nullptr}};\n"
        "static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, STR(TORCH_EXTENSION_NAME),\n"
        "                                 nullptr, -1, methods};\n"
        f"PyMODINIT_FUNC CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {{ {init} }}\n"
    )


#: A tiny op answering 42.
TINY_OP = c_module()

BROKEN_SOURCE = """
int broken() { return undefined_symbol_here + 1; }
"""


def test_plan_shows_flags_and_is_reproducible() -> None:
    first, second = CPUAdamBuilder().plan(), CPUAdamBuilder().plan()
    assert first == second
    assert "-O3" in first.cflags and "-fopenmp" in first.cflags
    assert first.extension_name.startswith("anyaccel_cpu_optim_")
    assert first.build_directory == str(extensions_root() / first.extension_name)
    described = first.describe()
    assert "-O3" in described and first.sources[0] in described


def test_plan_changes_when_the_simd_level_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    native = CPUAdamBuilder().plan()
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "generic")
    generic = CPUAdamBuilder().plan()
    assert generic.extension_name != native.extension_name
    assert not any(flag.startswith(("-mavx", "-march")) for flag in generic.cflags)


def test_extensions_root_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert extensions_root() == tmp_path
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert extensions_root() == tmp_path / "cache" / "torch_extensions"


def test_load_builds_once_and_caches_in_process() -> None:
    builder = CPUAdamBuilder()
    module = builder.load()
    assert builder.load() is module and CPUAdamBuilder().jit_load() is module
    assert is_built(builder.plan())
    assert module.simd_level() in ("avx512", "avx2", "neon", "generic")


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


def test_the_cpu_optimizers_are_one_library_built_once(tmp_path: Path) -> None:
    plans = [builder().plan() for builder in (CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder)]
    assert {plan.extension_name for plan in plans} == {plans[0].extension_name}
    assert plans[0].extension_name.startswith("anyaccel_cpu_optim_")
    assert [plan.op_name for plan in plans] == ["cpu_adam", "cpu_adagrad", "cpu_lion"]
    modules = [builder().load() for builder in (CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder)]
    assert modules[0] is modules[1] is modules[2]
    assert all(hasattr(modules[0], f) for f in ("adam_step", "adagrad_step", "lion_step"))


def test_compile_error_shows_the_first_compiler_errors_and_the_log_path(tmp_path: Path) -> None:
    broken = tmp_builder(tmp_path, BROKEN_SOURCE, name="broken_op")
    with pytest.raises(OpBuildError) as caught:
        broken.load()
    message = str(caught.value)
    assert "undefined_symbol_here" in message and "error" in message
    log_path = broken.plan().log_path
    assert f"full log: {log_path}" in message
    assert "undefined_symbol_here" in Path(log_path).read_text()
    assert not is_built(broken.plan())


def test_a_second_load_after_a_failed_build_says_the_build_failed(tmp_path: Path) -> None:
    """torch skips a build it already tried in this process; that is no 'library does not load'."""
    broken = tmp_builder(tmp_path, BROKEN_SOURCE, name="broken_twice_op")
    with pytest.raises(OpBuildError):
        broken.load()
    with pytest.raises(OpBuildError) as caught:
        broken.load()
    message = str(caught.value)
    assert "broken_twice_op" in message
    assert "failed" in message and "does not load" not in message


def test_missing_ninja_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(builder_module, "find_ninja", lambda: None)
    with pytest.raises(BuildToolMissingError, match="pip install ninja"):
        tmp_builder(tmp_path, TINY_OP, name="needs_ninja").load()


def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(BuildToolMissingError, match="install g\\+\\+"):
        tmp_builder(tmp_path, TINY_OP, name="needs_cxx").load()


def test_toolchain_problem_is_none_when_tools_are_present() -> None:
    assert toolchain_problem() is None


def test_compatibility_reports_missing_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builder_module, "find_ninja", lambda: None)
    verdict = CPUAdamBuilder().compatibility()
    assert not verdict and "ninja" in verdict.reason
    assert CPUAdamBuilder().is_compatible(verbose=True) is False


def test_a_stale_torch_lock_file_does_not_block_a_build(tmp_path: Path) -> None:
    builder = tmp_builder(tmp_path, TINY_OP, name="stale_lock")
    build_dir = Path(builder.plan().build_directory)
    build_dir.mkdir(parents=True)
    (build_dir / "lock").write_text("")  # left by a killed torch build
    assert builder.load().answer() == 42


def test_abstract_builders_cannot_be_instantiated() -> None:
    with pytest.raises(TypeError, match="sets no NAME"):
        OpBuilder()


def test_unreadable_source_names_the_file(tmp_path: Path) -> None:
    builder = tmp_builder(tmp_path, "", name="vanishing")
    Path(builder.sources()[0]).unlink()
    with pytest.raises(OpBuildError, match=r"vanishing\.cpp"):
        builder.plan()


def test_builder_returns_an_ahead_of_time_extension() -> None:
    extension = CPUAdamBuilder().builder()
    assert extension.name == "anyaccel.ops.cpu_adam_op"  # type: ignore[attr-defined]
    assert "-O3" in extension.extra_compile_args["cxx"]  # type: ignore[attr-defined]


def test_first_error_lines_picks_the_compiler_error() -> None:
    output = "ninja: build\nFAILED: a.o\nx.cpp:3:1: error: bad thing\n  3 | code\n    ^\n"
    assert first_error_lines(output)[0] == "x.cpp:3:1: error: bad thing"
    assert first_error_lines("no match here\nlast line") == ["no match here", "last line"]


def test_build_plan_paths() -> None:
    plan: BuildPlan = CPUAdamBuilder().plan()
    assert plan.library_path.endswith(f"{plan.extension_name}.so")
    assert plan.log_path.startswith(plan.build_directory)


def test_tool_lookups_follow_path_and_cxx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ninja() is None
    monkeypatch.delenv("CXX", raising=False)
    assert cxx_compiler() == "c++"
    monkeypatch.setenv("CXX", "clang++")
    assert cxx_compiler() == "clang++"
