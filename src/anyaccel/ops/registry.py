"""Where each accelerator's op builders live and how a builder is found by class name.

Builder packages are scanned lazily, once, for ``OpBuilder`` subclasses; an op that some other
backend has resolves to a builder whose ``load()`` says where it is available.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import threading
from types import ModuleType

from anyaccel.ops.builder import Compatibility, OpBuilder
from anyaccel.ops.errors import OpNotAvailableError

#: The builder package of every accelerator anyaccel ships (``xpu.external`` shares ``xpu``'s).
BUILTIN_PACKAGES: dict[str, str] = {
    "cpu": "anyaccel.ops.cpu",
    "cuda": "anyaccel.ops.cuda",
    "xpu": "anyaccel.ops.xpu",
    "xpu.external": "anyaccel.ops.xpu",
    "npu": "anyaccel.ops.npu",
    "mps": "anyaccel.ops.mps",
    "hpu": "anyaccel.ops.hpu",
    "mlu": "anyaccel.ops.mlu",
    "sdaa": "anyaccel.ops.sdaa",
}

#: Accelerators anyaccel does not know get the host (CPU) ops, which run beside any device.
HOST_PACKAGE = "anyaccel.ops.cpu"

_scan_lock = threading.RLock()
_scanned: dict[str, dict[str, type[OpBuilder]]] = {}
_unavailable: dict[tuple[str, str], type[OpBuilder]] = {}


def builder_package(accelerator_name: str) -> str:
    """The import path of the package holding ``accelerator_name``'s op builders (never raises)."""
    return BUILTIN_PACKAGES.get(str(accelerator_name), HOST_PACKAGE)


def builders_in_package(package: str) -> dict[str, type[OpBuilder]]:
    """Every concrete ``OpBuilder`` subclass defined or re-exported in ``package``, by class name.

    A package that does not import yields no builders (a missing third-party package is
    not an error here; its ops are simply unavailable).
    """
    with _scan_lock:
        found = _scanned.get(package)
        if found is None:
            found = _scan(package)
            _scanned[package] = found
        return found


def _scan(package: str) -> dict[str, type[OpBuilder]]:
    """Import ``package`` and its direct submodules and collect their builder classes."""
    try:
        root = importlib.import_module(package)
    except ImportError:
        return {}
    modules: list[ModuleType] = [root]
    for info in pkgutil.iter_modules(getattr(root, "__path__", [])):
        if not info.name.startswith("_"):
            modules.append(importlib.import_module(f"{package}.{info.name}"))
    found: dict[str, type[OpBuilder]] = {}
    for module in modules:
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, OpBuilder)
                and value.NAME
                and not issubclass(value, UnavailableOpBuilder)
            ):
                found.setdefault(name, value)
    return found


def backends_providing(class_name: str) -> list[str]:
    """Names of the built-in accelerators whose packages define ``class_name``."""
    return [
        name
        for name, package in BUILTIN_PACKAGES.items()
        if class_name in builders_in_package(package)
    ]


def known_builder_names(extra_package: str | None = None) -> list[str]:
    """Every builder class name any built-in package (or ``extra_package``) defines, sorted."""
    names: set[str] = set()
    for package in {*BUILTIN_PACKAGES.values(), *([extra_package] if extra_package else [])}:
        names.update(builders_in_package(package))
    return sorted(names)


def find_builder_class(package: str, class_name: str, accelerator_name: str) -> type | None:
    """The builder class named ``class_name`` in ``package``, or ``None`` if no op has that name.

    An op that only other backends have returns an ``UnavailableOpBuilder`` subclass whose
    ``load()`` raises ``OpNotAvailableError`` naming the op, this backend and those that have it.
    """
    found = builders_in_package(package).get(class_name)
    if found is not None:
        return found
    providers = backends_providing(class_name)
    if not providers:
        return None
    with _scan_lock:
        key = (class_name, accelerator_name)
        unavailable = _unavailable.get(key)
        if unavailable is None:
            unavailable = _make_unavailable(class_name, accelerator_name, providers)
            _unavailable[key] = unavailable
        return unavailable


class UnavailableOpBuilder(OpBuilder):
    """Stands in for an op the current backend lacks: reports why, and ``load()`` raises."""

    #: The accelerator that lacks the op, and the ones that have it.
    ACCELERATOR: str = ""
    PROVIDERS: tuple[str, ...] = ()

    def reason(self) -> str:
        """The message ``load()`` raises: the op, this backend and where the op exists."""
        return (
            f"op {self.NAME!r} ({type(self).__name__}) is not available on backend "
            f"{self.ACCELERATOR!r}; available on: {', '.join(self.PROVIDERS)}"
        )

    def sources(self) -> list[str]:
        """No sources: there is nothing to build on this backend."""
        raise OpNotAvailableError(self.reason())

    def compatibility(self) -> Compatibility:
        """Never compatible, with the reason naming where the op exists."""
        return Compatibility(False, self.reason())

    def platform_compatibility(self) -> Compatibility:
        """Never compatible: the backend lacks the op."""
        return self.compatibility()

    def load(self, verbose: bool = False) -> ModuleType:
        """Raise ``OpNotAvailableError``: the op does not exist on this backend."""
        raise OpNotAvailableError(self.reason())


def _make_unavailable(
    class_name: str, accelerator_name: str, providers: list[str]
) -> type[OpBuilder]:
    """A subclass of ``UnavailableOpBuilder`` named like the missing builder."""
    op_names = {
        builders_in_package(BUILTIN_PACKAGES[provider])[class_name].NAME for provider in providers
    }
    attributes = {
        "NAME": sorted(op_names)[0],
        "ACCELERATOR": accelerator_name,
        "PROVIDERS": tuple(providers),
        "__module__": __name__,
        "__doc__": f"{class_name} is not available on {accelerator_name}; load() raises.",
    }
    return type(class_name, (UnavailableOpBuilder,), attributes)
