"""One error root: every exception and warning anyaccel defines derives from it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import anyaccel
from anyaccel.errors import AcceleratorError, AnyaccelError, AnyaccelWarning

#: Modules that import optional frameworks or need a device runtime at import time.
_OPTIONAL_IMPORTS = ("anyaccel.integrations.lightning", "anyaccel.integrations.accelerate")


def _defined_classes() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(anyaccel.__path__, "anyaccel."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            if info.name.startswith(_OPTIONAL_IMPORTS):
                continue
            raise
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == module.__name__ and not value.__name__.startswith("_"):
                found.append(value)
    return found


CLASSES = _defined_classes()


def test_the_walk_finds_the_known_roots() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"AcceleratorError", "OpError", "PortError", "CpuFallbackWarning"} <= names


@pytest.mark.parametrize(
    "cls",
    [c for c in CLASSES if issubclass(c, BaseException) and not issubclass(c, Warning)],
    ids=lambda c: f"{c.__module__}.{c.__qualname__}",
)
def test_every_exception_derives_from_the_root(cls: type) -> None:
    assert issubclass(cls, AnyaccelError), (
        f"{cls.__module__}.{cls.__qualname__} does not derive from anyaccel.errors.AnyaccelError"
    )


@pytest.mark.parametrize(
    "cls",
    [c for c in CLASSES if issubclass(c, Warning)],
    ids=lambda c: f"{c.__module__}.{c.__qualname__}",
)
def test_every_warning_derives_from_the_warning_root(cls: type) -> None:
    assert issubclass(cls, AnyaccelWarning)


def test_the_root_keeps_the_builtin_mixins() -> None:
    from anyaccel.errors import InvalidAcceleratorError, UnknownAcceleratorError

    assert issubclass(AcceleratorError, RuntimeError)
    assert issubclass(UnknownAcceleratorError, ValueError)
    assert issubclass(InvalidAcceleratorError, TypeError)
    assert not issubclass(AnyaccelError, (RuntimeError, ValueError))
