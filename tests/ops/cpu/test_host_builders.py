"""One list of host-side op builders, re-exported by every device's op package."""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from anyaccel.ops import registry
from anyaccel.ops.cpu import host_builders

PACKAGES = sorted(set(registry.BUILTIN_PACKAGES.values()))


def test_the_list_is_the_cpu_optimizer_builders() -> None:
    assert host_builders.__all__ == ["CPUAdagradBuilder", "CPUAdamBuilder", "CPULionBuilder"]
    assert {getattr(host_builders, name).NAME for name in host_builders.__all__} == {
        "cpu_adagrad",
        "cpu_adam",
        "cpu_lion",
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_every_op_package_re_exports_the_list(package: str) -> None:
    module = importlib.import_module(package)
    found = registry.builders_in_package(package)
    for name in host_builders.__all__:
        builder = getattr(host_builders, name)
        assert getattr(module, name) is builder
        assert name in module.__all__
        assert found[name] is builder


@pytest.mark.parametrize("package", PACKAGES)
def test_no_op_package_names_a_host_builder_itself(package: str) -> None:
    """A package that lists host builders by hand would miss the next one added to the list."""
    init = Path(importlib.import_module(package).__file__ or "")
    text = init.read_text()
    assert init.name == "__init__.py"
    assert [name for name in host_builders.__all__ if name in text] == []
    assert "from anyaccel.ops.cpu.host_builders import *" in text


def test_a_builder_added_to_the_list_is_found_under_every_device(
    run_python: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    result = run_python(
        """
        from anyaccel.ops.cpu import host_builders
        from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder

        class CPUNewOptimizerBuilder(CPUOpBuilder):
            NAME = "cpu_new_optimizer"

        host_builders.CPUNewOptimizerBuilder = CPUNewOptimizerBuilder
        host_builders.__all__.append("CPUNewOptimizerBuilder")
        from anyaccel.ops import registry
        for name, package in registry.BUILTIN_PACKAGES.items():
            if package == "anyaccel.ops.cpu":
                continue  # imported above, before the list grew
            found = registry.find_builder_class(package, "CPUNewOptimizerBuilder", name)
            print(name, found is CPUNewOptimizerBuilder)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == len(registry.BUILTIN_PACKAGES) - 1
    assert all(line.endswith(" True") for line in lines), result.stdout
