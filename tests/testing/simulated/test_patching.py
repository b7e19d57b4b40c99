"""Installing a simulation: patches and ``sys.modules`` entries are undone, whatever happens."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

import pytest
import torch

from anyaccel.testing.simulated import (
    SimulatedDeviceModule,
    patched_attributes,
    registered_compile_backend,
    simulate_broken_import,
)
from anyaccel.testing.simulated.patching import AUTOLOAD_ENV, installed, package_module


def test_patched_attributes_restores_replaced_and_removes_added_attributes() -> None:
    owner = types.SimpleNamespace(kept="before")
    with patched_attributes((owner, "kept", "during"), (owner, "added", 1)):
        assert (owner.kept, owner.added) == ("during", 1)
    assert owner.kept == "before" and not hasattr(owner, "added")


def test_patched_attributes_restores_sys_modules_after_an_error() -> None:
    name = "anyaccel_simulated_test_package"
    stand_in = types.ModuleType(name)
    with pytest.raises(KeyError), patched_attributes(modules={name: stand_in, "os": stand_in}):
        assert sys.modules[name] is stand_in and sys.modules["os"] is stand_in
        raise KeyError("inside")
    assert name not in sys.modules and sys.modules["os"] is os


def test_a_package_module_counts_as_installed() -> None:
    name = "anyaccel_simulated_vendor"
    package = package_module(name, answer=42)
    with patched_attributes(modules={name: package}):
        assert importlib.util.find_spec(name) is not None
        assert importlib.import_module(name).answer == 42
    assert importlib.util.find_spec(name) is None


def test_installed_attaches_the_device_module_to_torch_and_yields_it() -> None:
    module = SimulatedDeviceModule("torch_vendor.simdev", device_type="simdev")
    package = package_module("torch_vendor", simdev=module)
    with installed(module, {"torch_vendor": package}, (torch.version, "simdev", "1.0")) as yielded:
        assert yielded is module and getattr(torch, "simdev") is module  # noqa: B009
        assert sys.modules["torch.simdev"] is module and sys.modules["torch_vendor"] is package
        assert getattr(torch.version, "simdev") == "1.0"  # noqa: B009
    assert not hasattr(torch, "simdev") and not hasattr(torch.version, "simdev")
    assert "torch.simdev" not in sys.modules and "torch_vendor" not in sys.modules


def test_a_broken_package_is_found_but_fails_on_each_import() -> None:
    name = "anyaccel_simulated_broken"

    def fail() -> None:
        os.environ[AUTOLOAD_ENV] = "0"
        raise ImportError("libvendor.so: cannot open shared object file")

    saved_env = os.environ.get(AUTOLOAD_ENV)
    with simulate_broken_import(name, fail) as finder:
        assert importlib.util.find_spec(name) is not None
        for _ in range(2):
            with pytest.raises(ImportError, match=r"libvendor\.so"):
                importlib.import_module(name)
        assert finder.attempts == 2
    assert importlib.util.find_spec(name) is None and finder not in sys.meta_path
    assert os.environ.get(AUTOLOAD_ENV) == saved_env


def _registered_backends() -> set[str]:
    from torch._dynamo.backends import registry

    # torch >= 2.6 names a backend in _BACKENDS and keeps its function in _COMPILER_FNS.
    return set(registry._BACKENDS) | set(getattr(registry, "_COMPILER_FNS", {}))


def test_a_registered_compile_backend_is_gone_after_exit() -> None:
    name = "anyaccel_simulated_backend"
    with registered_compile_backend(name):
        assert name in _registered_backends()
    assert name not in _registered_backends()
    with registered_compile_backend(name):  # registering again works
        assert name in _registered_backends()
    assert name not in _registered_backends()
