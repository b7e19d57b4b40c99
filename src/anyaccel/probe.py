"""The probe vocabulary: what a probe found, how a candidate is described, the status words.

This is the bottom of anyaccel's detection layers: backends import it to describe themselves,
the registry and detection import it to run them. It imports nothing else from anyaccel, so
any module may import it without creating a cycle.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALLOW_ENV",
    "FORCE_ENV",
    "BackendCandidate",
    "Decision",
    "HowChosen",
    "PluginState",
    "PluginStatus",
    "ProbeKind",
    "ProbeOutcome",
    "forced_name",
    "package_installed",
    "resolve",
    "torch_release",
]

#: The environment variable that forces a backend by name.
FORCE_ENV = "DS_ACCELERATOR"
#: The environment variable restricting which plugins load.
ALLOW_ENV = "ANYACCEL_PLUGINS"


class _Word(str, enum.Enum):
    """A status word: an enum member that compares, prints and serialises as its string."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ProbeKind(_Word):
    """What a probe found."""

    AVAILABLE = "available"
    NOT_INSTALLED = "not_installed"
    BROKEN = "broken"
    NO_DEVICE = "no_device"
    NOT_PROBED = "not_probed"


class Decision(_Word):
    """What the cascade decided about one candidate."""

    SELECTED = "selected"
    PASSED_OVER = "passed over"
    LOWER_PRIORITY = "available, lower priority"
    NOT_PROBED = "not probed"


class HowChosen(_Word):
    """How the current accelerator was chosen."""

    DETECTED = "detected"
    FORCED = FORCE_ENV
    SET = "set_accelerator"


class PluginState(_Word):
    """What became of one installed plugin."""

    LOADED = "loaded"
    BROKEN = "broken"
    REJECTED = "rejected"
    NOT_ALLOWED = "not allowed"


@dataclass(frozen=True)
class PluginStatus:
    """What became of one discovered plugin entry point, and why."""

    name: str
    value: str
    distribution: str
    state: PluginState
    """``"loaded"``, ``"broken"``, ``"rejected"`` or ``"not allowed"``."""
    detail: str = ""


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe found: whether its backend can run here, and why (not)."""

    kind: ProbeKind
    """``"available"``, ``"not_installed"``, ``"broken"`` or ``"no_device"``."""
    reason: str
    device_count: int | None = None
    remedy: str = ""
    """What a user who forces this backend should do about it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ProbeKind(self.kind))  # plain strings still accepted

    @property
    def available(self) -> bool:
        """Whether the backend can be selected."""
        return self.kind is ProbeKind.AVAILABLE

    @classmethod
    def found(cls, reason: str, device_count: int | None = None) -> ProbeOutcome:
        """The backend is usable."""
        return cls(ProbeKind.AVAILABLE, reason, device_count)

    @classmethod
    def not_installed(cls, reason: str, remedy: str) -> ProbeOutcome:
        """The backend's runtime package is missing."""
        return cls(ProbeKind.NOT_INSTALLED, reason, 0, remedy)

    @classmethod
    def broken(cls, reason: str, remedy: str) -> ProbeOutcome:
        """The runtime is installed but fails to import or initialise."""
        return cls(ProbeKind.BROKEN, reason, None, remedy)

    @classmethod
    def no_device(cls, reason: str, remedy: str) -> ProbeOutcome:
        """The runtime imports but sees no device."""
        return cls(ProbeKind.NO_DEVICE, reason, 0, remedy)


@dataclass(frozen=True)
class BackendCandidate:
    """One way of providing an accelerator, as the cascade tries it."""

    name: str
    """The accelerator name ``DS_ACCELERATOR`` accepts (several candidates may share one)."""
    path: str
    """A label for the trace, naming how this candidate provides the backend."""
    priority: int
    """Lower priorities are probed first."""
    probe: str | Callable[[], ProbeOutcome]
    """``"module:function"`` (or the function) returning a :class:`ProbeOutcome`."""
    accelerator: str | Callable[[], object]
    """``"module:Class"`` (or a callable) that makes the accelerator once probed (detection
    checks what it makes against the contract: this vocabulary module knows no contract)."""
    origin: str = "anyaccel"
    """Who registered it: ``"anyaccel"`` or the plugin's distribution."""
    creation_seconds: float | None = None
    """The least time its constructor gets, past the probe timeout: one that may compile native
    code on first use (the emulated device) needs minutes, not the probe's seconds."""

    @property
    def is_builtin(self) -> bool:
        """Whether anyaccel itself provides this candidate (not a plugin or a user)."""
        return self.origin == "anyaccel"


def resolve(target: str | Callable[..., Any]) -> Any:
    """What a candidate's ``"module:attribute"`` names, imported now; a callable as it is.

    The one reader of those strings: detection resolves a candidate's probe and class with it,
    the registry the class whose data sheet names a built-in candidate's runtime.
    """
    if callable(target):
        return target
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


_RELEASE = re.compile(r"(\d+)\.(\d+)")


def torch_release(version: str | None = None) -> tuple[int, int]:
    """``(major, minor)`` of torch's version (``"2.8.0+cpu"`` -> ``(2, 8)``), compared as tuples.

    ``version`` defaults to the installed torch's (importing it); ``(0, 0)`` when it does not
    start with two numbers. The one reading of torch's version for release checks.
    """
    if version is None:
        import torch

        version = str(torch.__version__)
    match = _RELEASE.match(version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def package_installed(name: str) -> bool:
    """Whether ``name`` could be imported, decided without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def forced_name() -> str | None:
    """The backend name ``DS_ACCELERATOR`` forces (normalised), or ``None``."""
    value = os.environ.get(FORCE_ENV)
    if value is None or not value.strip():
        return None
    return value.strip().lower()
