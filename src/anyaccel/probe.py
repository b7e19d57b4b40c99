"""The probe vocabulary: what a probe found, how candidates are described, the trace, status words.

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
from dataclasses import FrozenInstanceError
from typing import Any, ClassVar, TypeVar

__all__ = [
    "ALLOW_ENV",
    "FORCE_ENV",
    "BackendCandidate",
    "Decision",
    "DetectionReport",
    "FrozenRecord",
    "HowChosen",
    "PluginState",
    "PluginStatus",
    "ProbeKind",
    "ProbeOutcome",
    "ProbeRecord",
    "forced_name",
    "package_absent",
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


_Record = TypeVar("_Record", bound="FrozenRecord")


class FrozenRecord:
    """An immutable record, as a frozen dataclass behaves: fields set once by ``__init__``,
    equal, hashed and shown by value, with ``replace()`` and ``to_dict()``.

    Written out, not a dataclass: each frozen dataclass compiles six methods when its module
    is imported (about 0.4 ms), a cost every first detection paid for each record it uses.
    """

    #: The fields, in the order the constructor takes them.
    _fields: ClassVar[tuple[str, ...]] = ()

    def _set_fields(self, *values: object) -> None:
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, FrozenRecord)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({shown})"

    def replace(self: _Record, **changes: Any) -> _Record:
        """A copy with ``changes`` made (``dataclasses.replace``'s job)."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__qualname__} has no field(s) {sorted(unknown)}")
        values = {name: getattr(self, name) for name in self._fields}
        return type(self)(**{**values, **changes})

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data, records inside it too (``dataclasses.asdict``'s job)."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


def _plain(value: object) -> Any:
    if isinstance(value, FrozenRecord):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class PluginStatus(FrozenRecord):
    """What became of one discovered plugin entry point, and why."""

    _fields = ("name", "value", "distribution", "state", "detail")
    name: str
    value: str
    distribution: str
    state: PluginState
    """``"loaded"``, ``"broken"``, ``"rejected"`` or ``"not allowed"``."""
    detail: str

    def __init__(
        self, name: str, value: str, distribution: str, state: PluginState, detail: str = ""
    ) -> None:
        self._set_fields(name, value, distribution, state, detail)


class ProbeOutcome(FrozenRecord):
    """What one probe found: whether its backend can run here, and why (not)."""

    _fields = ("kind", "reason", "device_count", "remedy")
    kind: ProbeKind
    """``"available"``, ``"not_installed"``, ``"broken"`` or ``"no_device"``."""
    reason: str
    device_count: int | None
    remedy: str
    """What a user who forces this backend should do about it."""

    def __init__(
        self,
        kind: ProbeKind | str,
        reason: str,
        device_count: int | None = None,
        remedy: str = "",
    ) -> None:
        # plain strings still accepted
        self._set_fields(ProbeKind(kind), reason, device_count, remedy)

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


class BackendCandidate(FrozenRecord):
    """One way of providing an accelerator, as the cascade tries it."""

    _fields = ("name", "path", "priority", "probe", "accelerator", "origin", "creation_seconds")
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
    origin: str
    """Who registered it: ``"anyaccel"`` or the plugin's distribution."""
    creation_seconds: float | None
    """The least time its constructor gets, past the probe timeout: one that may compile native
    code on first use (the emulated device) needs minutes, not the probe's seconds."""

    def __init__(
        self,
        name: str,
        path: str,
        priority: int,
        probe: str | Callable[[], ProbeOutcome],
        accelerator: str | Callable[[], object],
        origin: str = "anyaccel",
        creation_seconds: float | None = None,
    ) -> None:
        self._set_fields(name, path, priority, probe, accelerator, origin, creation_seconds)

    @property
    def is_builtin(self) -> bool:
        """Whether anyaccel itself provides this candidate (not a plugin or a user)."""
        return self.origin == "anyaccel"


class ProbeRecord(FrozenRecord):
    """One line of the trace: a candidate, what its probe found and what was decided."""

    _fields = (
        "candidate",
        "name",
        "priority",
        "kind",
        "reason",
        "decision",
        "seconds",
        "device_count",
    )
    candidate: str
    name: str
    priority: int
    kind: ProbeKind
    reason: str
    decision: Decision
    seconds: float
    device_count: int | None

    def __init__(
        self,
        candidate: str,
        name: str,
        priority: int,
        kind: ProbeKind,
        reason: str,
        decision: Decision,
        seconds: float,
        device_count: int | None = None,
    ) -> None:
        self._set_fields(candidate, name, priority, kind, reason, decision, seconds, device_count)


class DetectionReport(FrozenRecord):
    """The trace of how the current accelerator was chosen."""

    _fields = (
        "accelerator",
        "accelerator_class",
        "how",
        "forced_name",
        "probes",
        "seconds",
        "plugins",
        "stands_in_for",
    )
    accelerator: str
    """The chosen accelerator's name."""
    accelerator_class: str
    """``module.Class`` of the chosen accelerator."""
    how: HowChosen
    """``"detected"``, ``"DS_ACCELERATOR"`` or ``"set_accelerator"``."""
    forced_name: str | None
    """The value of ``DS_ACCELERATOR`` when it decided the choice."""
    probes: tuple[ProbeRecord, ...]
    seconds: float
    plugins: tuple[PluginStatus, ...]
    """What became of every installed plugin (empty when none was looked for)."""
    stands_in_for: tuple[str, ...]
    """Plugins that failed before the chosen backend, which stands in for them: one line each."""

    def __init__(
        self,
        accelerator: str,
        accelerator_class: str,
        how: HowChosen,
        forced_name: str | None,
        probes: tuple[ProbeRecord, ...] = (),
        seconds: float = 0.0,
        plugins: tuple[PluginStatus, ...] = (),
        stands_in_for: tuple[str, ...] = (),
    ) -> None:
        self._set_fields(
            accelerator,
            accelerator_class,
            how,
            forced_name,
            probes,
            seconds,
            plugins,
            stands_in_for,
        )

    def format(self) -> str:
        """The report as a table a person can read."""
        lines = [f"accelerator: {self.accelerator} ({self.accelerator_class})"]
        lines.extend(
            f"STAND-IN: {self.accelerator!r} stands in for {failed}"
            for failed in self.stands_in_for
        )
        if self.how == HowChosen.FORCED:
            lines.append(f"chosen by: {FORCE_ENV}={self.forced_name}")
        elif self.how == HowChosen.SET:
            lines.append("chosen by: set_accelerator()")
        else:
            lines.append(f"chosen by: detection ({FORCE_ENV} not set)")
        lines.append(f"detection took {self.seconds * 1000:.2f} ms")
        if self.probes:
            width = max(len(p.candidate) for p in self.probes)
            lines.append("")
            lines.append(f"  {'candidate':<{width}}  {'ms':>7}  found")
            for p in self.probes:
                if p.decision == Decision.NOT_PROBED:
                    lines.append(f"  {p.candidate:<{width}}        -  not probed ({p.reason})")
                    continue
                lines.append(
                    f"  {p.candidate:<{width}}  {p.seconds * 1000:7.2f}  {p.kind}: {p.reason}"
                )
                lines.append(f"  {'':<{width}}           -> {p.decision}")
        if self.plugins:
            lines.append("")
            lines.append("plugins:")
            for plugin in self.plugins:
                lines.append(
                    f"  {plugin.name} ({plugin.distribution}, {plugin.value}): {plugin.state}"
                    + (f": {plugin.detail}" if plugin.detail else "")
                )
        return "\n".join(lines)


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


def package_absent(package: str) -> str | None:
    """``"<top> is not installed"`` when ``package``'s top-level package cannot be found, else None.

    Found with ``find_spec`` alone: no vendor code runs, so detection may ask it unguarded.
    """
    top = package.partition(".")[0]
    return None if package_installed(top) else f"{top} is not installed"


def forced_name() -> str | None:
    """The backend name ``DS_ACCELERATOR`` forces (normalised), or ``None``."""
    value = os.environ.get(FORCE_ENV)
    if value is None or not value.strip():
        return None
    return value.strip().lower()
