"""DeepSpeed's op registry under our accelerator: every op name it knows, with a truthful flag.

DeepSpeed imports ``op_builder_dir()``, lists each submodule's names ending in ``Builder``, asks
``create_op_builder`` for each, keeps the non-``None`` ones by ``.name`` (``ALL_OPS``) and
records ``is_compatible()`` per op name (``deepspeed.ops.__compatible_ops__``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.ops import registry
from anyaccel.ops.builder import OpBuilder, toolchain_problem
from anyaccel.ops.errors import OpNotAvailableError

#: The op names DeepSpeed 0.19.8's own CPU accelerator puts in ``__compatible_ops__``.
DEEPSPEED_CPU_OPS = {
    "async_io", "cpu_adagrad", "cpu_adam", "cpu_lion", "deepspeed_ccl_comm",
    "deepspeed_not_implemented", "deepspeed_shm_comm", "fused_adam", "pin_memory",
}  # fmt: skip


class _Backend:
    """The op-builder part of an accelerator called ``name`` (the Accelerator base's methods)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def op_builder_dir(self) -> str:
        return registry.builder_package(self._name)

    def create_op_builder(self, class_name: str) -> Any:
        found = registry.find_builder_class(self.op_builder_dir(), class_name, self._name)
        return None if found is None else found()


def deepspeed_walk(accelerator: Any) -> dict[str, Any]:
    """``ALL_OPS`` as DeepSpeed 0.19.8's ``op_builder/all_ops.py`` builds it (same steps)."""
    package = importlib.import_module(accelerator.op_builder_dir())
    builders = []
    for _, module_name, _ in pkgutil.iter_modules([os.path.dirname(str(package.__file__))]):
        if module_name in ("all_ops", "builder"):
            continue
        module = importlib.import_module(f"{accelerator.op_builder_dir()}.{module_name}")
        for member_name in module.__dir__():
            if member_name.endswith("Builder"):
                builders.append(accelerator.create_op_builder(member_name))
    return {op.name: op for op in builders if op is not None}


def compatible_ops(all_ops: dict[str, Any]) -> dict[str, bool]:
    """``__compatible_ops__`` as DeepSpeed's ``git_version_info`` computes it."""
    flags = {name: bool(builder.is_compatible(False)) for name, builder in all_ops.items()}
    flags["deepspeed_not_implemented"] = False
    return flags


OUR_CPU_OPS = {"cpu_adam", "cpu_adagrad", "cpu_lion"}
OUR_CPU_BUILDERS = {"CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder"}


def test_walk_under_our_cpu_accelerator_finds_every_deepspeed_op() -> None:
    flags = compatible_ops(deepspeed_walk(CpuAccelerator()))
    assert set(flags) >= DEEPSPEED_CPU_OPS
    assert set(registry.DEEPSPEED_BUILDERS.values()) <= set(flags)
    buildable = toolchain_problem() is None
    for name in OUR_CPU_OPS:
        assert flags[name] is buildable, name
    # and the shared-memory ops: the all-reduce module, the c10d Backend beside other devices,
    # and the emulated accelerator's c10d Backend over host views
    assert {name for name, ok in flags.items() if ok} <= OUR_CPU_OPS | {
        "deepspeed_shm_comm",
        "anyaccel_shm_comm",
        "anyaccel_shm_c10d_backend",
        "anyaccel_host_view_backend",
    }


@pytest.mark.parametrize("backend", sorted(registry.BUILTIN_PACKAGES))
def test_walk_finds_every_deepspeed_op_on_every_backend(backend: str) -> None:
    all_ops = deepspeed_walk(_Backend(backend))
    assert set(registry.DEEPSPEED_BUILDERS.values()) <= set(all_ops)
    for name, builder in all_ops.items():
        assert isinstance(builder, OpBuilder) and builder.name == name
        assert builder.is_compatible() == builder.compatibility().ok


@pytest.mark.parametrize(
    "class_name",
    sorted(
        set(registry.DEEPSPEED_BUILDERS) - {"CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder"}
    ),
)
def test_a_deepspeed_op_we_lack_is_a_builder_whose_load_names_op_and_backend(
    class_name: str,
) -> None:
    builder = CpuAccelerator().create_op_builder(class_name)
    if builder.is_compatible():  # implemented here since (e.g. the shared-memory all-reduce)
        pytest.skip(f"{class_name} is implemented on cpu")
    op_name = registry.DEEPSPEED_BUILDERS[class_name]
    assert builder is not None and builder.name == op_name
    with pytest.raises(OpNotAvailableError) as caught:
        builder.load()
    assert f"op {op_name!r} ({class_name})" in str(caught.value)
    assert "backend 'cpu'" in str(caught.value)


def test_fused_lion_is_an_object_not_none() -> None:
    accelerator = CpuAccelerator()
    builder_class = accelerator.get_op_builder("FusedLionBuilder")
    assert builder_class is not None and builder_class.__name__ == "FusedLionBuilder"
    with pytest.raises(OpNotAvailableError, match="no implementation of it on any backend"):
        builder_class().jit_load()


def test_an_unknown_name_is_still_none() -> None:
    assert CpuAccelerator().get_op_builder("NoSuchOpBuilder") is None


def test_deepspeed_ops_module_resolves_each_name_by_attribute() -> None:
    module = importlib.import_module("anyaccel.ops.host.deepspeed_ops")
    assert module.__dir__() == sorted(registry.DEEPSPEED_BUILDERS)
    assert (
        module.CPUAdamBuilder is registry.builders_in_package("anyaccel.ops.host")["CPUAdamBuilder"]
    )
    assert module.FusedAdamBuilder().compatibility().reason.endswith("available on: cuda")
    with pytest.raises(AttributeError, match="no op builder 'Nope'"):
        module.Nope  # noqa: B018


def test_every_builder_package_has_a_deepspeed_ops_module() -> None:
    for package in set(registry.BUILTIN_PACKAGES.values()):
        assert importlib.util.find_spec(f"{package}.deepspeed_ops") is not None, package


REAL_WALK = """
import importlib, json
import anyaccel
accelerator = anyaccel.get_accelerator()
from deepspeed.accelerator import abstract_accelerator, real_accelerator
abstract_accelerator.DeepSpeedAccelerator.register(type(accelerator))
real_accelerator.set_accelerator(accelerator)
import deepspeed.ops
import deepspeed.ops.op_builder.all_ops as all_ops
importlib.reload(all_ops)  # DeepSpeed's own walk, now under our accelerator
vars(deepspeed.ops).pop("__compatible_ops__", None)  # 0.19.8 computes it on first access
compatible = deepspeed.ops.__compatible_ops__
errors = {}
for name, builder in all_ops.ALL_OPS.items():
    if not compatible[name]:
        try:
            builder.load()
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {error}"
print(json.dumps({"compatible": compatible, "errors": errors,
                  "modules": sorted({type(b).__module__ for b in all_ops.ALL_OPS.values()})}))
"""


def _deepspeed_python() -> str | None:
    """An interpreter with DeepSpeed: this one, or ``ANYACCEL_DEEPSPEED_PYTHON``."""
    configured = os.environ.get("ANYACCEL_DEEPSPEED_PYTHON")
    if configured:
        return configured
    return sys.executable if importlib.util.find_spec("deepspeed") is not None else None


@pytest.mark.extras
def test_deepspeeds_real_walk_under_our_accelerator() -> None:
    python = _deepspeed_python()
    if python is None:
        pytest.skip("DeepSpeed is not installed (set ANYACCEL_DEEPSPEED_PYTHON to one that has it)")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src, "DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0"}
    result = subprocess.run(
        [python, "-c", REAL_WALK], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    flags = report["compatible"]
    assert set(flags) >= DEEPSPEED_CPU_OPS
    assert set(registry.DEEPSPEED_BUILDERS.values()) <= set(flags)
    assert all(module.startswith("anyaccel.") for module in report["modules"])
    assert {name for name, ok in flags.items() if not ok} == set(report["errors"])
    for name in flags:
        if not flags[name]:
            assert report["errors"][name].startswith("OpNotAvailableError: "), name
            assert (
                f"op {name!r}" in report["errors"][name]
                and "backend 'cpu'" in report["errors"][name]
            )
