"""Accelerators from other packages, found through the ``anyaccel.accelerators`` entry point.

A vendor package declares ``name = "package.module:Class"`` in that group; the class may set
``detection_priority`` (an int, ``"before:cuda"`` or ``"after:npu"``; default ``"before:cuda"``)
and a ``probe()`` static method returning a :class:`~anyaccel.probe.ProbeOutcome`. A class
without ``probe()`` is ranked after every built-in hardware backend, with a warning: an
accelerator that cannot say whether its device is here must not take precedence over one that can.

A vendor's existing DeepSpeed accelerator joins unchanged through the adapter group
``anyaccel.deepspeed_accelerators``: ``npu = "vendor.module:NPU_Accelerator"``, named as
``DS_ACCELERATOR`` names it in DeepSpeed. That name may be a built-in one: the class then stands
just before anyaccel's own backend of that name, detected by that backend's probe.
Discovery returns values (candidates and status rows) and keeps no state: the registry
(:mod:`anyaccel.registry`) loads plugins the first time it is read, never at
``import anyaccel``, and keeps what was found.

Rules: ``ANYACCEL_PLUGINS`` (comma-separated entry-point or distribution names; empty or
``none`` for no plugins) restricts which plugins load. Plugin code (its import here, its probe
and constructor in detection) runs behind :mod:`anyaccel.guard`: a plugin that raises
anything (``SystemExit`` included), overruns ``ANYACCEL_PROBE_TIMEOUT`` or asks for the
accelerator while detection runs is passed over with a :class:`PluginWarning` and a
``broken`` row in the detection trace. Built-in names are reserved: a plugin whose entry
point claims one, or whose constructed accelerator reports one as its ``_name`` or
``device_name()``, is rejected (a class attribute inherited from a built-in base and replaced
in ``__init__``, as DeepSpeed's accelerators do, claims nothing; an adapter entry point may
report the built-in name it is registered under). Two distributions claiming one
name are both rejected until ``ANYACCEL_PLUGINS`` picks one.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from anyaccel.abstract import Accelerator
from anyaccel.contract import ACCELERATOR_NAME
from anyaccel.errors import AcceleratorError, AnyaccelWarning
from anyaccel.guard import probe_timeout, run_guarded
from anyaccel.probe import (
    ALLOW_ENV,
    FORCE_ENV,
    BackendCandidate,
    FrozenRecord,
    PluginState,
    PluginStatus,
    ProbeOutcome,
)

__all__ = [
    "ALLOW_ENV",
    "DEEPSPEED_ENTRY_POINT_GROUP",
    "DEFAULT_PRIORITY",
    "ENTRY_POINT_GROUP",
    "PluginDiscovery",
    "PluginError",
    "PluginStatus",
    "PluginWarning",
    "UnknownPriorityTargetError",
    "adapters_declared",
    "claimed_builtin_name",
    "default_probe",
    "hardware_rank_end",
    "load_plugins",
    "plugin_candidates",
    "plugin_name_problem",
    "resolve_priority",
]

logger = logging.getLogger("anyaccel.plugins")

#: The entry-point group vendor packages register their accelerator classes in.
ENTRY_POINT_GROUP = "anyaccel.accelerators"
#: The adapter group: a vendor's DeepSpeed accelerator class, named as DeepSpeed names it.
DEEPSPEED_ENTRY_POINT_GROUP = "anyaccel.deepspeed_accelerators"
#: Where a plugin that declares no ``detection_priority`` joins the cascade.
DEFAULT_PRIORITY = "before:cuda"

_NAME_PATTERN = ACCELERATOR_NAME  # an entry point's name is the accelerator's


class PluginError(AcceleratorError):
    """A plugin that cannot join detection: bad name, bad priority, or a failed import."""


class UnknownPriorityTargetError(PluginError):
    """A ``before:NAME``/``after:NAME`` priority naming a backend this anyaccel lacks."""


class PluginWarning(AnyaccelWarning):
    """A plugin was skipped or its probe failed; detection goes on without it."""


class PluginDiscovery(FrozenRecord):
    """What discovery found: the candidates to add, and one status row per entry point."""

    _fields = ("candidates", "statuses")
    candidates: list[BackendCandidate]
    statuses: list[PluginStatus]

    def __init__(self, candidates: list[BackendCandidate], statuses: list[PluginStatus]) -> None:
        self._set_fields(candidates, statuses)


def claimed_builtin_name(
    accelerator: Any, builtin: frozenset[str], registered: str | None = None
) -> str | None:
    """The built-in backend name ``accelerator`` reports as its own, or ``None``.

    ``_name`` may be none of them; ``device_name()`` may be ``'cpu'`` (the host, which every
    process has, so a plugin computing on it claims nothing false) but no accelerator's. The
    name the plugin is ``registered`` under is its own (a DeepSpeed adapter for ``npu``).
    One rule for every path: plugin detection, ``set_accelerator`` and the conformance kit.
    """
    own = {registered} if registered else set()
    name = getattr(accelerator, "_name", None)
    if isinstance(name, str) and name.strip().lower() in builtin - own:
        return f"_name {name!r}"
    device = str(accelerator.device_name()).partition(":")[0].strip().lower()
    if device in builtin - own and device != "cpu":
        return f"device_name() {device!r}"
    return None


def hardware_rank_end(existing: Sequence[BackendCandidate]) -> int:
    """The priority just after every built-in hardware backend (before the CPU fallback)."""
    hardware = [c.priority for c in existing if c.is_builtin and c.name != "cpu"]
    return max(hardware, default=949) + 1


# ---------------------------------------------------------------------- priority
def resolve_priority(spec: object, candidates: Sequence[BackendCandidate]) -> int:
    """The cascade priority for ``spec``: an int, ``"before:NAME"``, ``"after:NAME"`` or digits.

    ``before:cuda`` is one less than the earliest ``cuda`` candidate, ``after:npu`` one more
    than the latest ``npu`` candidate; names are those registered before plugins load.
    """
    if isinstance(spec, bool):
        raise PluginError(f"detection_priority={spec!r} is a bool; give an int or 'before:NAME'")
    if isinstance(spec, int):
        return spec
    if not isinstance(spec, str):
        raise PluginError(
            f"detection_priority={spec!r} is a {type(spec).__name__}; "
            "give an int, 'before:NAME' or 'after:NAME'"
        )
    text = spec.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    relation, _, target = text.partition(":")
    relation, target = relation.strip().lower(), target.strip().lower()
    if relation not in ("before", "after") or not target:
        raise PluginError(
            f"detection_priority={spec!r} is not understood; "
            "give an int, 'before:NAME' or 'after:NAME' (e.g. 'before:cuda')"
        )
    priorities = [c.priority for c in candidates if c.name == target]
    if not priorities:
        known = sorted({c.name for c in candidates})
        raise UnknownPriorityTargetError(
            f"detection_priority={spec!r} names {target!r}, which is not a registered backend; "
            f"use one of {', '.join(known)} or an int"
        )
    return min(priorities) - 1 if relation == "before" else max(priorities) + 1


# ---------------------------------------------------------------------- probing
def default_probe(accelerator_class: type[Any]) -> ProbeOutcome:
    """For a class without ``probe()``: create it and ask ``is_available()``/``device_count()``."""
    accelerator = accelerator_class()
    if not accelerator.is_available():
        return ProbeOutcome.no_device(
            f"{accelerator_class.__qualname__}().is_available() is False",
            f"Check that the {accelerator._name!r} device is visible to this process.",
        )
    count = int(accelerator.device_count())
    return ProbeOutcome.found(f"{count} device(s) (is_available() is True)", count)


def _probe_for(cls: type[Any]) -> Callable[[], ProbeOutcome]:
    """The class's own ``probe``, or :func:`default_probe` (detection runs it guarded)."""
    declared = getattr(cls, "probe", None)
    if callable(declared):
        probe: Callable[[], ProbeOutcome] = declared
        return probe
    return lambda: default_probe(cls)


def _broken_probe(reason: str, remedy: str) -> Callable[[], ProbeOutcome]:
    return lambda: ProbeOutcome.broken(reason, remedy)


def _cannot_create() -> Accelerator:
    raise PluginError("this plugin failed to load; see the detection trace")


# ---------------------------------------------------------------------- discovery
def _allow_list() -> frozenset[str] | None:
    value = os.environ.get(ALLOW_ENV)
    if value is None:
        return None
    items = {_normalise(item) for item in value.split(",") if item.strip()}
    return frozenset() if items <= {"none"} else frozenset(items)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _allowed(entry_point: importlib.metadata.EntryPoint, allowed: frozenset[str] | None) -> bool:
    if allowed is None:
        return True
    return bool(allowed & {_normalise(entry_point.name), _normalise(_distribution(entry_point))})


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    return str(dist.name) if dist is not None else "unknown distribution"


def _group_declared_on_path(*only: str) -> bool:
    """Whether any installed distribution's ``entry_points.txt`` names our groups (or ``only``).

    A quick text scan of ``sys.path``: reading every distribution's metadata through
    ``importlib.metadata`` costs several milliseconds, and most environments have no plugin.
    """
    markers = [
        marker.encode() for marker in only or (ENTRY_POINT_GROUP, DEEPSPEED_ENTRY_POINT_GROUP)
    ]
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as items:
                infos = [i.path for i in items if i.name.endswith((".dist-info", ".egg-info"))]
        except OSError:
            continue  # not a directory (e.g. a zip file): let importlib.metadata decide
        for info in infos:
            try:  # raw bytes: no text decoder to build for each of a few hundred small files
                with open(os.path.join(info, "entry_points.txt"), "rb") as points:
                    text = points.read()
            except OSError:
                continue
            if any(b"[" + marker + b"]" in text for marker in markers):
                return True
    # Zipped entries (eggs, zipapps) cannot be scanned here: let importlib.metadata read them.
    return any(os.path.isfile(entry) for entry in sys.path if entry)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    if not _group_declared_on_path():
        return []
    points = [
        *importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
        *importlib.metadata.entry_points(group=DEEPSPEED_ENTRY_POINT_GROUP),
    ]
    return sorted(points, key=lambda ep: (ep.name, _distribution(ep), ep.value, ep.group))


def _is_adapter(entry_point: importlib.metadata.EntryPoint) -> bool:
    """Whether ``entry_point`` is in the DeepSpeed adapter group."""
    return getattr(entry_point, "group", None) == DEEPSPEED_ENTRY_POINT_GROUP


def _label(name: str, distribution: str) -> str:
    return f"{name} (plugin {distribution})"


def plugin_candidates(
    entry_points: Iterable[importlib.metadata.EntryPoint],
    existing: Sequence[BackendCandidate],
) -> PluginDiscovery:
    """The candidates ``entry_points`` contribute beside ``existing``, and each one's status."""
    allowed = _allow_list()
    reserved = {c.name for c in existing}
    points = list(entry_points)
    by_name: dict[str, set[str]] = {}
    for ep in points:
        if _allowed(ep, allowed):
            by_name.setdefault(ep.name, set()).add(f"{_distribution(ep)}={ep.value}")
    statuses: list[PluginStatus] = []
    result: list[BackendCandidate] = []
    seen: set[tuple[str, str]] = set()
    for ep in points:
        distribution = _distribution(ep)
        if (ep.name, ep.value) in seen:
            continue  # the same entry point seen twice on sys.path
        seen.add((ep.name, ep.value))

        def status(
            state: PluginState, detail: str = "", ep: Any = ep, dist: str = distribution
        ) -> None:
            statuses.append(PluginStatus(ep.name, ep.value, dist, state, detail))

        if not _allowed(ep, allowed):
            status(PluginState.NOT_ALLOWED, f"{ALLOW_ENV}={os.environ.get(ALLOW_ENV, '')!r}")
            logger.debug("plugin %s (%s) not in %s; not loaded", ep.name, distribution, ALLOW_ENV)
            continue
        problem = _naming_problem(ep.name, set() if _is_adapter(ep) else reserved, by_name[ep.name])
        if problem is not None:
            status(PluginState.REJECTED, problem)
            warnings.warn(f"{problem}; it is not loaded", PluginWarning, stacklevel=3)
            if _NAME_PATTERN.fullmatch(ep.name):  # a row in the trace under the claimed name
                result.append(
                    _failed_candidate(ep.name, distribution, "rejected: " + problem, existing)
                )
            continue
        try:
            candidate = _load(ep, distribution, existing)
        except Exception as error:
            detail = f"plugin {ep.name!r} ({distribution}, {ep.value}) failed to load: " + (
                str(error) if isinstance(error, PluginError) else f"{type(error).__name__}: {error}"
            )
            status(PluginState.BROKEN, detail)
            warnings.warn(f"{detail}; passing over it", PluginWarning, stacklevel=3)
            result.append(_failed_candidate(ep.name, distribution, detail, existing))
            continue
        status(PluginState.LOADED, f"priority {candidate.priority}")
        result.append(candidate)
    return PluginDiscovery(result, statuses)


def _naming_problem(name: str, reserved: set[str], claims: set[str]) -> str | None:
    if not _NAME_PATTERN.fullmatch(name):
        return (
            f"plugin name {name!r} is not a valid {FORCE_ENV} value; use lowercase letters, "
            "digits, '_', '.', '-', starting with a letter"
        )
    if name in reserved:
        return (
            f"plugin name {name!r} is reserved by anyaccel's built-in {name!r} backend; "
            "register the plugin under a name of its own"
        )
    if len(claims) > 1:
        return (
            f"plugin name {name!r} is claimed by {len(claims)} entry points "
            f"({', '.join(sorted(claims))}); uninstall all but one, or set {ALLOW_ENV} "
            "to the distribution to use"
        )
    return None


def _failed_candidate(
    name: str, distribution: str, reason: str, existing: Sequence[BackendCandidate]
) -> BackendCandidate:
    return BackendCandidate(
        name,
        _label(name, distribution),
        _fallback_priority(existing),
        _broken_probe(reason, f"Fix or uninstall {distribution}, or leave it out of {ALLOW_ENV}."),
        _cannot_create,
        origin=distribution,
    )


def _fallback_priority(existing: Sequence[BackendCandidate]) -> int:
    try:
        return resolve_priority(DEFAULT_PRIORITY, [c for c in existing if c.is_builtin])
    except PluginError:
        return 899


def _load(
    ep: importlib.metadata.EntryPoint, distribution: str, existing: Sequence[BackendCandidate]
) -> BackendCandidate:
    imported = run_guarded(f"plugin {ep.name!r} ({distribution}) import", ep.load, probe_timeout())
    if not imported.ok:
        raise PluginError(f"importing {ep.value} {imported.problem()}")
    loaded = imported.value
    if not (inspect.isclass(loaded) or callable(loaded)):
        raise PluginError(
            f"{ep.value} is a {type(loaded).__name__}, not an accelerator class; "
            "point the entry point at the class, as 'package.module:Class'"
        )
    # The name claim is judged on the constructed accelerator (detection does it, guarded):
    # a DeepSpeed-style class sets ``self._name`` in ``__init__`` over an inherited one.
    builtin = [c for c in existing if c.is_builtin and c.name == ep.name]
    if _is_adapter(ep) and builtin and not callable(getattr(loaded, "probe", None)):
        # A DeepSpeed class for a device anyaccel knows: that backend's probe finds the device.
        first = min(builtin, key=lambda c: c.priority)
        return BackendCandidate(
            ep.name,
            _label(ep.name, distribution),
            first.priority - 1,
            first.probe,
            cast("Callable[[], Accelerator]", loaded),
            origin=distribution,
        )
    spec = getattr(loaded, "detection_priority", DEFAULT_PRIORITY)
    try:
        priority = resolve_priority(spec, existing)
    except UnknownPriorityTargetError as error:
        priority = _fallback_priority(existing)
        warnings.warn(
            f"plugin {ep.name!r} ({distribution}): {error}; using the default {DEFAULT_PRIORITY!r}",
            PluginWarning,
            stacklevel=4,
        )
    if not callable(getattr(loaded, "probe", None)):
        end = hardware_rank_end(existing)
        if priority < end:
            warnings.warn(
                f"plugin {ep.name!r} ({distribution}): {ep.value} has no probe(), so it is "
                f"ranked after every built-in hardware backend (priority {end}, not "
                f"{spec!r}); give the class a static probe() returning "
                "anyaccel.probe.ProbeOutcome to be detected where it asks",
                PluginWarning,
                stacklevel=4,
            )
            priority = end
    return BackendCandidate(
        ep.name,
        _label(ep.name, distribution),
        priority,
        _probe_for(loaded),
        cast("Callable[[], Accelerator]", loaded),  # detection checks what it makes
        origin=distribution,
    )


def name_claim_message(name: str, distribution: str, what: str) -> str:
    """The warning for a plugin that reports a built-in backend's name as its own."""
    return (
        f"plugin {name!r} ({distribution}) claims a built-in backend's name: {what}; an "
        "accelerator must report the name it is registered under, so it is rejected (rename "
        "_name and the device type, or uninstall the plugin)"
    )


def adapters_declared() -> bool:
    """Whether an installed distribution declares a DeepSpeed adapter entry point (a text scan)."""
    return _group_declared_on_path(DEEPSPEED_ENTRY_POINT_GROUP)


def plugin_name_problem(accelerator: Any, builtin: frozenset[str]) -> str | None:
    """The name-claim verdict for an accelerator whose class an installed plugin registers.

    ``None`` when its class is no plugin's entry point, or the plugin reports its own name.
    ``set_accelerator`` and the conformance kit ask this, so they judge a plugin's accelerator
    as detection does; only metadata is read (no plugin is imported).
    """
    cls = type(accelerator)
    value = f"{cls.__module__}:{cls.__qualname__}"
    try:
        points = _entry_points()
    except Exception:  # broken metadata: detection reports it; nothing to judge here
        return None
    for ep in points:
        if ep.value.replace(" ", "") == value:
            claim = claimed_builtin_name(accelerator, builtin, ep.name)
            if claim is not None:
                return name_claim_message(ep.name, _distribution(ep), claim)
    return None


def load_plugins(existing: Sequence[BackendCandidate]) -> PluginDiscovery:
    """Discover installed plugins: their candidates (the registry adds them) and status rows."""
    try:
        points = _entry_points()
    except Exception as error:  # broken metadata on sys.path must not stop detection
        warnings.warn(
            f"could not read {ENTRY_POINT_GROUP!r} entry points: {error}", PluginWarning, 2
        )
        return PluginDiscovery([], [])
    return plugin_candidates(points, existing)
