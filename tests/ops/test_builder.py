"""OpBuilder: dry-run plans, loading once per process, clear errors (the JIT: tests/ops/jit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyaccel.ops import builder as builder_module
from anyaccel.ops.builder import OpBuilder, extensions_root, is_built
from anyaccel.ops.cpu import CPUAdagradBuilder, CPUAdamBuilder, CPULionBuilder
from anyaccel.ops.errors import BuildToolMissingError
from anyaccel.ops.jit import toolchain


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


def test_load_builds_once_and_caches_in_process() -> None:
    builder = CPUAdamBuilder()
    module = builder.load()
    assert builder.load() is module and CPUAdamBuilder().jit_load() is module
    assert is_built(builder.plan())
    assert module.simd_level() in ("avx512", "avx2", "neon", "generic")


def test_the_cpu_optimizers_are_one_library_built_once(tmp_path: Path) -> None:
    plans = [builder().plan() for builder in (CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder)]
    assert {plan.extension_name for plan in plans} == {plans[0].extension_name}
    assert plans[0].extension_name.startswith("anyaccel_cpu_optim_")
    assert [plan.op_name for plan in plans] == ["cpu_adam", "cpu_adagrad", "cpu_lion"]
    modules = [builder().load() for builder in (CPUAdamBuilder, CPUAdagradBuilder, CPULionBuilder)]
    assert modules[0] is modules[1] is modules[2]
    assert all(hasattr(modules[0], f) for f in ("adam_step", "adagrad_step", "lion_step"))


def test_missing_ninja_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(toolchain, "find_ninja", lambda: None)
    with pytest.raises(BuildToolMissingError, match="pip install ninja"):
        tmp_builder(tmp_path, TINY_OP, name="needs_ninja").load()


def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(BuildToolMissingError, match="install g\\+\\+"):
        tmp_builder(tmp_path, TINY_OP, name="needs_cxx").load()


def test_compatibility_reports_missing_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "find_ninja", lambda: None)
    verdict = CPUAdamBuilder().compatibility()
    assert not verdict and "ninja" in verdict.reason
    assert CPUAdamBuilder().is_compatible(verbose=True) is False


def test_abstract_builders_cannot_be_instantiated() -> None:
    with pytest.raises(TypeError, match="sets no NAME"):
        OpBuilder()


def test_builder_returns_an_ahead_of_time_extension() -> None:
    extension = CPUAdamBuilder().builder()
    assert extension.name == "anyaccel.ops.cpu_adam_op"  # type: ignore[attr-defined]
    assert "-O3" in extension.extra_compile_args["cxx"]  # type: ignore[attr-defined]


def test_the_jit_names_are_still_importable_from_the_builder_module() -> None:
    """``anyaccel.ops.builder`` re-exports what moved to ``anyaccel.ops.jit`` (the same objects)."""
    from anyaccel.ops.jit import announce, compiler, plan

    moved = {
        "EXTENSIONS_DIR_ENV": plan.EXTENSIONS_DIR_ENV,
        "BuildPlan": plan.BuildPlan,
        "extensions_root": plan.extensions_root,
        "is_built": plan.is_built,
        "find_ninja": toolchain.find_ninja,
        "cxx_compiler": toolchain.cxx_compiler,
        "toolchain_problem": toolchain.toolchain_problem,
        "first_error_lines": compiler.first_error_lines,
        "announce": announce.announce,
        "logger": announce.logger,
    }
    for name, value in moved.items():
        assert getattr(builder_module, name) is value, name
    assert set(moved) | {"Compatibility", "OpBuilder"} == set(builder_module.__all__)
