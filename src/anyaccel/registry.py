"""The candidates detection chooses from: anyaccel's built-ins, plugins, and registered ones.

The registry owns every candidate list and what became of each plugin (its status rows).

Each candidate names its probe and accelerator class as ``"module:attribute"`` strings, so
nothing is imported until that candidate is probed. Plugins (:mod:`anyaccel.plugins`) join
the first time the registry is read, never at ``import anyaccel``. Registering a name that is
taken is refused unless ``override=True``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from anyaccel.errors import DuplicateBackendError
from anyaccel.forksafe import ForkSafeLock, after_fork_in_child
from anyaccel.probe import BackendCandidate, PluginState, PluginStatus, resolve

__all__ = [
    "BUILTIN_CANDIDATES",
    "SUPPORTED_ACCELERATOR_LIST",
    "builtin_names",
    "mark_plugin_failed",
    "plugin_statuses",
    "register_backend",
    "registered_backends",
    "unregister_backend",
]


class _BuiltinCandidate(BackendCandidate):
    """A built-in row whose label names the runtime package its class states.

    ``"npu (torch_npu)"``: the package is read from the class (``runtime_package``) the first
    time the label is shown, so the registry restates no vendor fact and imports no backend
    before detection probes it.
    """

    @property
    def path(self) -> str:
        """``"<name> (<how>)"``, where a row gives no ``how``, the class's runtime package."""
        label: str | None = self.__dict__["_label"]
        if label is None:
            label = f"{self.name} ({resolve(self.accelerator).runtime_package})"
            self.__dict__["_label"] = label
        return label

    @path.setter
    def path(self, label: str | None) -> None:  # the record's __init__ sets it, once
        self.__dict__["_label"] = label


def _builtin(
    name: str,
    priority: int,
    module: str,
    cls: str,
    probe: str = "probe",
    *,
    how: str | None = None,
    creation_seconds: float | None = None,
) -> BackendCandidate:
    """A row of ``anyaccel.backends.<module>``; ``how`` labels it (default: its runtime package)."""
    return _BuiltinCandidate(
        name,
        None if how is None else f"{name} ({how})",  # type: ignore[arg-type]  # None: read later
        priority,
        f"anyaccel.backends.{module}:{probe}",
        f"anyaccel.backends.{module}:{cls}",
        creation_seconds=creation_seconds,
    )


#: The emulated device's constructor builds its C++ core on first use (1-2 minutes on 2 busy
#: cores, then cached): it gets this long, whatever the probe timeout.
EMULATED_CREATION_SECONDS = 900.0


#: Built-in candidates. The order is the contract's detection order; plugins join through
#: entry points, other code through ``register_backend``.
BUILTIN_CANDIDATES: tuple[BackendCandidate, ...] = (
    _builtin(
        "xpu.external",
        100,
        "xpu",
        "external_accelerator",
        "probe_external",
        how="intel_extension_for_deepspeed",
    ),
    _builtin("xpu", 200, "xpu", "IpexXpuAccelerator", "probe_ipex"),
    _builtin("xpu", 300, "xpu", "XpuAccelerator", "probe_native", how="native torch.xpu"),
    _builtin("npu", 400, "npu", "NpuAccelerator"),
    _builtin("sdaa", 500, "sdaa", "SdaaAccelerator"),
    _builtin("mps", 600, "mps", "MpsAccelerator", how="torch.backends.mps"),
    _builtin("hpu", 700, "hpu", "HpuAccelerator", how="habana_frameworks"),
    _builtin("mlu", 800, "mlu", "MluAccelerator"),
    # supa, musa and klxpu answer through torch.cuda too, so they must be probed before cuda.
    _builtin("supa", 850, "supa", "SupaAccelerator"),
    _builtin("musa", 870, "musa", "MusaAccelerator"),
    _builtin("klxpu", 880, "klxpu", "KlxpuAccelerator"),
    _builtin("cuda", 900, "cuda", "CudaAccelerator", how="torch CUDA/ROCm build"),
    # chosen only when asked for (DS_ACCELERATOR=emulated, or installed in this process); before
    # generic, which would otherwise take an installed emulated device for an unknown one
    BackendCandidate(
        "emulated",
        "emulated (host memory)",
        940,
        "anyaccel.emulated.accelerator:probe",
        "anyaccel.emulated.accelerator:EmulatedAccelerator",
        creation_seconds=EMULATED_CREATION_SECONDS,
    ),
    _builtin("generic", 950, "generic", "GenericAccelerator", how="torch.accelerator"),
    _builtin("cpu", 10_000, "cpu", "CpuAccelerator", how="fallback"),
)

logger = logging.getLogger("anyaccel.plugins")

_registry_lock = ForkSafeLock()
_candidates: list[BackendCandidate] = list(BUILTIN_CANDIDATES)


def builtin_names() -> frozenset[str]:
    """The names anyaccel's own backends answer to (reserved: no plugin may take one)."""
    return frozenset(c.name for c in BUILTIN_CANDIDATES)


class _RegistryNames(list[str]):
    """A list of backend names that loads plugins before it is first read."""

    def _loaded(self) -> _RegistryNames:
        load_plugins_once()
        return self

    def __contains__(self, name: object) -> bool:
        return list.__contains__(self._loaded(), name)

    def __iter__(self) -> Iterator[str]:
        return list.__iter__(self._loaded())

    def __len__(self) -> int:
        return list.__len__(self._loaded())

    def __getitem__(self, index: Any) -> Any:
        return list.__getitem__(self._loaded(), index)

    def __eq__(self, other: object) -> bool:
        return list.__eq__(self._loaded(), other)

    __hash__ = None

    def __repr__(self) -> str:
        return list.__repr__(self._loaded())

    def index(self, value: str, *args: Any) -> int:
        """Position of ``value`` in detection order."""
        return list.index(self._loaded(), value, *args)


#: The names ``DS_ACCELERATOR`` accepts, in detection order (plugins included).
SUPPORTED_ACCELERATOR_LIST: list[str] = _RegistryNames()


def _refresh_supported_names() -> None:
    names: list[str] = []
    for candidate in sorted(_candidates, key=lambda c: c.priority):
        if candidate.name not in names:
            names.append(candidate.name)
    SUPPORTED_ACCELERATOR_LIST[:] = names


def registered_backends(*, include_plugins: bool = True) -> tuple[BackendCandidate, ...]:
    """Every registered candidate, in the order the cascade probes them.

    With ``include_plugins=False`` no plugin is discovered or imported for the answer (the
    plugins already loaded are left out too).
    """
    if include_plugins:
        load_plugins_once()
    with _registry_lock:
        candidates = list(_candidates)
    if not include_plugins:  # by identity: reading labels would import every backend
        plugins = {id(c) for c in _plugin_candidates}
        candidates = [c for c in candidates if id(c) not in plugins]
    return tuple(sorted(candidates, key=lambda c: c.priority))


def register_backend(candidate: BackendCandidate, *, override: bool = False) -> None:
    """Add a candidate to the cascade.

    Raises :class:`~anyaccel.errors.DuplicateBackendError` if a candidate with that name is
    registered already, unless ``override=True``, which replaces every candidate of the name.
    """
    with _registry_lock:
        taken = [c for c in _candidates if c.name == candidate.name]
        if taken and not override:
            raise DuplicateBackendError(
                f"a backend named {candidate.name!r} is registered already "
                f"({', '.join(c.path for c in taken)}, from {taken[0].origin}); pass "
                f"override=True to replace it, or register {candidate.path!r} under a name "
                "of its own"
            )
        _candidates[:] = [c for c in _candidates if c.name != candidate.name]
        _candidates.append(candidate)
        _refresh_supported_names()


def unregister_backend(name: str, path: str | None = None) -> None:
    """Remove the candidates called ``name`` (only the one at ``path`` if given)."""
    with _registry_lock:
        _candidates[:] = [
            c for c in _candidates if not (c.name == name and (path is None or c.path == path))
        ]
        _refresh_supported_names()


_refresh_supported_names()

# ---------------------------------------------------------------------- plugins
_plugins_lock = ForkSafeLock(reentrant=True)
_plugins_state = "unloaded"  # -> "loading" -> "loaded"
_plugins_loader: int | None = None  # the thread loading them
_plugin_candidates: list[BackendCandidate] = []
_plugin_statuses: list[PluginStatus] = []


def plugin_statuses() -> tuple[PluginStatus, ...]:
    """What became of each plugin entry point found so far (detection amends the rows)."""
    with _registry_lock:
        return tuple(_plugin_statuses)


def mark_plugin_failed(name: str, distribution: str, state: PluginState, detail: str) -> None:
    """Record that a loaded plugin failed later (its probe or constructor), replacing its row."""
    with _registry_lock:
        for index, status in enumerate(_plugin_statuses):
            if (status.name, status.distribution) == (name, distribution):
                _plugin_statuses[index] = PluginStatus(
                    name, status.value, distribution, state, detail
                )


def _late_candidates(
    existing: list[BackendCandidate],
) -> tuple[list[BackendCandidate], list[PluginStatus]]:
    """Everything that joins on the first read: plugins, then torch's own device type.

    The torch device (see :mod:`anyaccel.backends.generic`) is added under its own name, so
    ``DS_ACCELERATOR=foo`` works for a PrivateUse1 device ``foo`` that no backend claims.
    """
    # Deferred for cost (plugins import the contract and torch), not to dodge a cycle.
    from anyaccel.backends.generic import device_alias_candidate
    from anyaccel.plugins import load_plugins

    found = load_plugins(existing)

    try:
        alias = device_alias_candidate({c.name for c in [*existing, *found.candidates]})
    except Exception as error:  # asking torch must never stop detection
        logger.debug("could not ask torch for its device type: %s", error)
        alias = None
    added = found.candidates if alias is None else [*found.candidates, alias]
    return added, found.statuses


def load_plugins_once() -> None:
    """Discover and add installed plugins, the first time anything asks (then a no-op)."""
    global _plugins_state, _plugins_loader
    if _plugins_state == "loaded":
        return
    with _plugins_lock:  # re-entry from the loading thread sees "loading" and returns
        if _plugins_state != "unloaded":
            return
        _plugins_state, _plugins_loader = "loading", threading.get_ident()
        try:
            with _registry_lock:
                existing = list(_candidates)
            added, statuses = _late_candidates(existing)
            with _registry_lock:
                _candidates.extend(added)
                _plugin_candidates[:] = added
                _plugin_statuses[:] = statuses
                _refresh_supported_names()
        finally:
            _plugins_state, _plugins_loader = "loaded", None


def forget_plugins() -> None:
    """Drop plugin candidates so the next registry read discovers plugins again."""
    global _plugins_state
    with _plugins_lock:
        with _registry_lock:
            _plugin_statuses.clear()
            plugins = {id(c) for c in _plugin_candidates}
            _candidates[:] = [c for c in _candidates if id(c) not in plugins]
            _plugin_candidates.clear()
            _refresh_supported_names()
        _plugins_state = "unloaded"


def _after_fork() -> None:
    """A child forked while another thread loaded plugins loads them again itself."""
    global _plugins_state, _plugins_loader
    if _plugins_state == "loading" and _plugins_loader != threading.get_ident():
        _plugins_state, _plugins_loader = "unloaded", None


after_fork_in_child(_after_fork)
