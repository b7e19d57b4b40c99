"""Installing a simulation: patching ``torch`` and ``sys.modules``, and undoing it on exit.

Each ``simulate_<vendor>`` installs the vendor's package the way its real import would
(``sys.modules`` entries that ``importlib.util.find_spec`` finds, the device module attached
to ``torch``) and restores everything on exit. The pieces here are what they share.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from anyaccel.settings import AUTOLOAD_ENV
from anyaccel.testing.simulated.device_module import SimulatedDeviceModule

__all__ = [
    "AUTOLOAD_ENV",
    "Patch",
    "installed",
    "package_module",
    "patched_attributes",
    "registered_compile_backend",
    "simulate_broken_import",
]

#: An ``(owner, attribute, value)`` patch.
Patch = tuple[object, str, object]

_Module = TypeVar("_Module", bound=SimulatedDeviceModule)


@contextlib.contextmanager
def patched_attributes(*patches: Patch, modules: dict[str, object] | None = None) -> Iterator[None]:
    """Set ``(owner, attribute, value)`` patches and ``sys.modules`` entries; undo on exit."""
    missing = object()
    saved = [(owner, name, getattr(owner, name, missing)) for owner, name, _ in patches]
    saved_modules = {name: sys.modules.get(name, missing) for name in modules or {}}
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        for name, module in (modules or {}).items():
            sys.modules[name] = module  # type: ignore[assignment]
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is missing:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)
        for name, module in saved_modules.items():
            if module is missing:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module  # type: ignore[assignment]


@contextlib.contextmanager
def installed(
    device_module: _Module, packages: dict[str, types.ModuleType], *extra: Patch
) -> Iterator[_Module]:
    """Attach ``device_module`` as ``torch.<type>``, install ``packages``, patch ``extra``."""
    attribute = device_module.device_type
    modules: dict[str, object] = {f"torch.{attribute}": device_module, **packages}
    with patched_attributes((torch, attribute, device_module), *extra, modules=modules):
        yield device_module


def package_module(name: str, **attributes: Any) -> types.ModuleType:
    """A module object standing for an installed package (``find_spec`` finds it)."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin="simulated")
    module.__path__ = []
    # An installed package has a file; vendor code finds its headers beside it (DeepSpeed's
    # NPU op builders read torch_npu.__file__). Nothing is there: it only has to be a path.
    module.__file__ = f"/simulated/site-packages/{name.replace('.', '/')}/__init__.py"
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


class _FailingLoader(importlib.abc.Loader):
    """Loads a package whose import fails the way a broken vendor install does."""

    def __init__(self, fail: Callable[[], None]) -> None:
        self._fail = fail

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        self._fail()


class _BrokenPackageFinder(importlib.abc.MetaPathFinder):
    """Finds ``package`` (so it counts as installed) with a loader that fails."""

    def __init__(self, package: str, fail: Callable[[], None]) -> None:
        self.package = package
        self.attempts = 0
        self._fail = fail

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.package:
            return None
        return importlib.machinery.ModuleSpec(fullname, _FailingLoader(self._attempt))

    def _attempt(self) -> None:
        self.attempts += 1
        self._fail()


@contextlib.contextmanager
def simulate_broken_import(
    package: str, fail: Callable[[], None]
) -> Iterator[_BrokenPackageFinder]:
    """Make ``package`` installed but failing on import with whatever ``fail`` does."""
    finder = _BrokenPackageFinder(package, fail)
    saved_env = os.environ.get(AUTOLOAD_ENV)
    saved = sys.modules.pop(package, None)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop(package, None)
        if saved is not None:
            sys.modules[package] = saved
        if saved_env is None:
            os.environ.pop(AUTOLOAD_ENV, None)
        else:
            os.environ[AUTOLOAD_ENV] = saved_env


@contextlib.contextmanager
def registered_compile_backend(name: str) -> Iterator[None]:
    """Register ``name`` as a ``torch.compile`` backend (running eagerly) while inside.

    Vendor runtimes register their compile backend with dynamo when imported, as
    habana_frameworks does for ``hpu_backend``.
    """
    import torch._dynamo
    from torch._dynamo.backends import registry

    # torch >= 2.6 keeps the functions in _COMPILER_FNS; older torch (2.4) in _BACKENDS.
    compiler_fns: dict[str, Any] = getattr(registry, "_COMPILER_FNS", registry._BACKENDS)
    if name in compiler_fns:
        yield
        return

    def run_eagerly(graph_module: Any, example_inputs: Any) -> Any:
        return graph_module.forward

    torch._dynamo.register_backend(compiler_fn=run_eagerly, name=name)
    try:
        yield
    finally:  # torch >= 2.6 also names the backend in _BACKENDS: both entries go
        compiler_fns.pop(name, None)
        registry._BACKENDS.pop(name, None)
