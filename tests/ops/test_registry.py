"""Registry: builder packages per accelerator, discovery by scanning, unavailable-op builders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import anyaccel
from anyaccel.ops import registry
from anyaccel.ops.cpu import CPUAdamBuilder
from anyaccel.ops.cuda import FusedAdamBuilder
from anyaccel.ops.errors import OpNotAvailableError


@pytest.mark.parametrize(
    ("accelerator", "package"),
    [
        ("cpu", "anyaccel.ops.cpu"),
        ("cuda", "anyaccel.ops.cuda"),
        ("xpu.external", "anyaccel.ops.host"),
        ("npu", "anyaccel.ops.host"),
        ("my.vendor-device", "anyaccel.ops.cpu"),
    ],
)
def test_builder_package_maps_every_name_without_raising(accelerator: str, package: str) -> None:
    assert registry.builder_package(accelerator) == package


def test_find_builder_class_returns_the_backends_builder() -> None:
    assert (
        registry.find_builder_class("anyaccel.ops.cpu", "CPUAdamBuilder", "cpu") is CPUAdamBuilder
    )
    assert registry.find_builder_class("anyaccel.ops.cuda", "FusedAdamBuilder", "cuda") is (
        FusedAdamBuilder
    )


def test_host_ops_are_available_on_every_builtin_backend() -> None:
    for package in set(registry.BUILTIN_PACKAGES.values()):
        assert registry.builders_in_package(package)["CPUAdamBuilder"] is CPUAdamBuilder


def test_an_op_missing_here_gets_a_builder_that_says_where_it_exists() -> None:
    found = registry.find_builder_class("anyaccel.ops.cpu", "FusedAdamBuilder", "cpu")
    assert found is not None and found.__name__ == "FusedAdamBuilder"
    builder = found()
    assert not builder.is_compatible()
    with pytest.raises(OpNotAvailableError, match="available on: cuda"):
        builder.plan()  # there is nothing to build here, not even a dry run
    with pytest.raises(OpNotAvailableError) as caught:
        builder.load()
    message = str(caught.value)
    assert "'fused_adam'" in message and "backend 'cpu'" in message
    assert "available on: cuda" in message


def test_an_unknown_op_name_is_none() -> None:
    assert registry.find_builder_class("anyaccel.ops.cpu", "NoSuchBuilder", "cpu") is None


def test_a_missing_third_party_package_has_no_builders() -> None:
    assert registry.builders_in_package("no_such_vendor_package.ops") == {}


def test_third_party_packages_are_scanned_for_builders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "vendor_ops_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(
        "from anyaccel.ops.builder import OpBuilder\n"
        "class VendorAdamBuilder(OpBuilder):\n"
        "    NAME = 'vendor_adam'\n"
        "    def sources(self):\n"
        "        return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = registry.builders_in_package("vendor_ops_pkg")
    assert set(found) == {"VendorAdamBuilder"}
    assert registry.find_builder_class("vendor_ops_pkg", "VendorAdamBuilder", "vendor") is not None
    assert "VendorAdamBuilder" in registry.known_builder_names("vendor_ops_pkg")
    sys.modules.pop("vendor_ops_pkg.kernels", None)
    sys.modules.pop("vendor_ops_pkg", None)


def test_backends_providing_lists_where_an_op_exists() -> None:
    assert registry.backends_providing("FusedAdamBuilder") == ["cuda"]
    assert "cpu" in registry.backends_providing("CPUAdamBuilder")


def test_known_builder_names_cover_all_backends() -> None:
    names = registry.known_builder_names()
    assert {"CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder", "FusedAdamBuilder"} <= set(
        names
    )


def test_the_accelerator_api_resolves_builders_deepspeed_style(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    accelerator = anyaccel.get_accelerator()
    assert accelerator.op_builder_dir() == "anyaccel.ops.cpu"
    assert accelerator.get_op_builder("CPUAdamBuilder") is CPUAdamBuilder
    assert accelerator.create_op_builder("NoSuchBuilder") is None
    module = accelerator.create_op_builder("CPUAdamBuilder").load()
    assert hasattr(module, "adam_step")
    with pytest.raises(OpNotAvailableError, match="available on: cuda"):
        accelerator.create_op_builder("FusedAdamBuilder").load()
