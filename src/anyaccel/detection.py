"""Which accelerator this process uses, and the trace of why.

The registry lists every backend candidate with a priority (lower runs first), a probe and
the accelerator class, both named as ``"module:attribute"`` strings so that nothing is
imported until that candidate is probed. ``DS_ACCELERATOR`` forces a registered name; it is
never used as a module path. Probes look for devices without creating a device context, so
a process that detects its accelerator can still fork.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from anyaccel.abstract import Accelerator
from anyaccel.errors import (
    AcceleratorError,
    AcceleratorUnavailableError,
    CpuFallbackWarning,
    InvalidAcceleratorError,
    UnknownAcceleratorError,
)

__all__ = [
    "SUPPORTED_ACCELERATOR_LIST",
    "BackendCandidate",
    "DetectionReport",
    "ProbeOutcome",
    "ProbeRecord",
    "detect_accelerator",
    "detection_report",
    "forced_name",
    "get_accelerator",
    "is_current_accelerator_supported",
    "package_installed",
    "register_backend",
    "registered_backends",
    "reset_accelerator",
    "set_accelerator",
]

logger = logging.getLogger("anyaccel.detection")

#: The environment variable that forces a backend by name.
FORCE_ENV = "DS_ACCELERATOR"


# ---------------------------------------------------------------------- probe results
@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe found: whether its backend can run here, and why (not)."""

    kind: str
    """``"available"``, ``"not_installed"``, ``"broken"`` or ``"no_device"``."""
    reason: str
    device_count: int | None = None
    remedy: str = ""
    """What a user who forces this backend should do about it."""

    @property
    def available(self) -> bool:
        """Whether the backend can be selected."""
        return self.kind == "available"

    @classmethod
    def found(cls, reason: str, device_count: int | None = None) -> ProbeOutcome:
        """The backend is usable."""
        return cls("available", reason, device_count)

    @classmethod
    def not_installed(cls, reason: str, remedy: str) -> ProbeOutcome:
        """The backend's runtime package is missing."""
        return cls("not_installed", reason, 0, remedy)

    @classmethod
    def broken(cls, reason: str, remedy: str) -> ProbeOutcome:
        """The runtime is installed but fails to import or initialise."""
        return cls("broken", reason, None, remedy)

    @classmethod
    def no_device(cls, reason: str, remedy: str) -> ProbeOutcome:
        """The runtime imports but sees no device."""
        return cls("no_device", reason, 0, remedy)


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
    accelerator: str | Callable[[], Accelerator]
    """``"module:Class"`` (or a callable) that makes the accelerator once probed."""
    origin: str = "anyaccel"
    """Who registered it: ``"anyaccel"`` or the plugin's distribution."""


@dataclass(frozen=True)
class ProbeRecord:
    """One line of the trace: a candidate, what its probe found and what was decided."""

    candidate: str
    name: str
    priority: int
    kind: str
    reason: str
    decision: str
    seconds: float
    device_count: int | None = None


@dataclass(frozen=True)
class DetectionReport:
    """The trace of how the current accelerator was chosen."""

    accelerator: str
    """The chosen accelerator's name."""
    accelerator_class: str
    """``module.Class`` of the chosen accelerator."""
    how: str
    """``"detected"``, ``"DS_ACCELERATOR"`` or ``"set_accelerator"``."""
    forced_name: str | None
    """The value of ``DS_ACCELERATOR`` when it decided the choice."""
    probes: tuple[ProbeRecord, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data, for JSON."""
        return asdict(self)

    def format(self) -> str:
        """The report as a table a person can read."""
        lines = [f"accelerator: {self.accelerator} ({self.accelerator_class})"]
        if self.how == "DS_ACCELERATOR":
            lines.append(f"chosen by: {FORCE_ENV}={self.forced_name}")
        elif self.how == "set_accelerator":
            lines.append("chosen by: set_accelerator()")
        else:
            lines.append(f"chosen by: detection ({FORCE_ENV} not set)")
        lines.append(f"detection took {self.seconds * 1000:.2f} ms")
        if self.probes:
            width = max(len(p.candidate) for p in self.probes)
            lines.append("")
            lines.append(f"  {'candidate':<{width}}  {'ms':>7}  found")
            for p in self.probes:
                if p.decision == "not probed":
                    lines.append(f"  {p.candidate:<{width}}        -  not probed ({p.reason})")
                    continue
                lines.append(
                    f"  {p.candidate:<{width}}  {p.seconds * 1000:7.2f}  {p.kind}: {p.reason}"
                )
                lines.append(f"  {'':<{width}}           -> {p.decision}")
        return "\n".join(lines)


# ---------------------------------------------------------------------- the registry
def _builtin(
    name: str, path: str, priority: int, module: str, cls: str, probe: str = "probe"
) -> BackendCandidate:
    return BackendCandidate(
        name,
        path,
        priority,
        f"anyaccel.backends.{module}:{probe}",
        f"anyaccel.backends.{module}:{cls}",
    )


#: Built-in candidates. The order is the contract's detection order; vendor backends join
#: here with their priorities, and plugins through ``register_backend``.
_BUILTIN_CANDIDATES: tuple[BackendCandidate, ...] = (
    _builtin(
        "xpu.external",
        "xpu.external (intel_extension_for_deepspeed)",
        100,
        "xpu",
        "external_accelerator",
        "probe_external",
    ),
    _builtin(
        "xpu", "xpu (intel_extension_for_pytorch)", 200, "xpu", "IpexXpuAccelerator", "probe_ipex"
    ),
    _builtin("xpu", "xpu (native torch.xpu)", 300, "xpu", "XpuAccelerator", "probe_native"),
    _builtin("npu", "npu (torch_npu)", 400, "npu", "NpuAccelerator"),
    _builtin("sdaa", "sdaa (torch_sdaa)", 500, "sdaa", "SdaaAccelerator"),
    _builtin("mps", "mps (torch.backends.mps)", 600, "mps", "MpsAccelerator"),
    _builtin("hpu", "hpu (habana_frameworks)", 700, "hpu", "HpuAccelerator"),
    _builtin("mlu", "mlu (torch_mlu)", 800, "mlu", "MluAccelerator"),
    # supa and musa answer through torch.cuda too, so they must be probed before cuda.
    _builtin("supa", "supa (torch_supa)", 850, "supa", "SupaAccelerator"),
    _builtin("musa", "musa (torch_musa)", 870, "musa", "MusaAccelerator"),
    _builtin("cuda", "cuda (torch CUDA/ROCm build)", 900, "cuda", "CudaAccelerator"),
    _builtin("generic", "generic (torch.accelerator)", 950, "generic", "GenericAccelerator"),
    _builtin("cpu", "cpu (fallback)", 10_000, "cpu", "CpuAccelerator"),
)

_registry_lock = threading.Lock()
_candidates: list[BackendCandidate] = list(_BUILTIN_CANDIDATES)


class _RegistryNames(list[str]):
    """A list of backend names that loads plugins before it is first read."""

    def _loaded(self) -> _RegistryNames:
        _load_plugins_once()
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


def registered_backends() -> tuple[BackendCandidate, ...]:
    """Every registered candidate, in the order the cascade probes them."""
    _load_plugins_once()
    return tuple(sorted(_candidates, key=lambda c: c.priority))


def register_backend(candidate: BackendCandidate) -> None:
    """Add a candidate to the cascade (replacing one with the same name and path)."""
    with _registry_lock:
        _candidates[:] = [
            c for c in _candidates if (c.name, c.path) != (candidate.name, candidate.path)
        ]
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

# Plugins (anyaccel.plugins) join the registry the first time it is read, not at import.
_plugins_lock = threading.RLock()
_plugins_state = "unloaded"  # -> "loading" -> "loaded"
_plugin_candidates: list[BackendCandidate] = []


def _load_plugins_once() -> None:
    global _plugins_state
    if _plugins_state == "loaded":
        return
    with _plugins_lock:  # re-entry from the loading thread sees "loading" and returns
        if _plugins_state != "unloaded":
            return
        _plugins_state = "loading"
        try:
            from anyaccel.plugins import late_candidates

            with _registry_lock:
                existing = list(_candidates)
            _plugin_candidates[:] = late_candidates(existing)
            for candidate in _plugin_candidates:
                register_backend(candidate)
        finally:
            _plugins_state = "loaded"


def _forget_plugins() -> None:
    """Drop plugin candidates so the next registry read discovers plugins again."""
    global _plugins_state
    with _plugins_lock:
        for candidate in _plugin_candidates:
            unregister_backend(candidate.name, candidate.path)
        _plugin_candidates.clear()
        _plugins_state = "unloaded"


def package_installed(name: str) -> bool:
    """Whether ``name`` could be imported, decided without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(target):
        return target
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    resolved: Callable[..., Any] = getattr(module, attribute)
    return resolved


# ---------------------------------------------------------------------- the cascade
def _probe(candidate: BackendCandidate) -> tuple[ProbeOutcome, float]:
    start = time.perf_counter()
    try:
        outcome = _resolve(candidate.probe)()
        if not isinstance(outcome, ProbeOutcome):
            raise TypeError(f"probe returned {type(outcome).__name__}, not ProbeOutcome")
    except Exception as error:  # a probe must never take detection down
        outcome = ProbeOutcome.broken(
            f"probe raised {type(error).__name__}: {error}",
            f"Report this to whoever provides the {candidate.name!r} backend ({candidate.origin}).",
        )
    return outcome, time.perf_counter() - start


def _instantiate(candidate: BackendCandidate) -> Accelerator:
    accelerator = _resolve(candidate.accelerator)()
    return _validated(accelerator)


def forced_name() -> str | None:
    """The backend name ``DS_ACCELERATOR`` forces (normalised), or ``None``."""
    value = os.environ.get(FORCE_ENV)
    if value is None or not value.strip():
        return None
    return value.strip().lower()


def _record(
    candidate: BackendCandidate, outcome: ProbeOutcome, seconds: float, decision: str
) -> ProbeRecord:
    return ProbeRecord(
        candidate.path,
        candidate.name,
        candidate.priority,
        outcome.kind,
        outcome.reason,
        decision,
        seconds,
        outcome.device_count,
    )


def _not_probed(candidate: BackendCandidate) -> ProbeRecord:
    return ProbeRecord(
        candidate.path,
        candidate.name,
        candidate.priority,
        "not_probed",
        "an earlier candidate was selected",
        "not probed",
        0.0,
    )


_SEVERITY = {"not_installed": 0, "broken": 1, "no_device": 2}


def detect_accelerator(*, probe_all: bool = False) -> tuple[Accelerator, DetectionReport]:
    """Run the cascade (or honour ``DS_ACCELERATOR``) and return a new accelerator and its trace.

    This does not touch the cached choice; ``get_accelerator`` does. With ``probe_all``, the
    candidates after the chosen one are probed too, so the trace shows everything present.
    """
    start = time.perf_counter()
    forced = forced_name()
    candidates = registered_backends()
    if forced is not None:
        candidates = tuple(c for c in candidates if c.name == forced)
        if not candidates:
            raise UnknownAcceleratorError(forced, list(SUPPORTED_ACCELERATOR_LIST), FORCE_ENV)

    records: list[ProbeRecord] = []
    chosen: Accelerator | None = None
    chosen_candidate: BackendCandidate | None = None
    failures: list[tuple[BackendCandidate, ProbeOutcome]] = []
    for candidate in candidates:
        if chosen is not None and not probe_all:
            records.append(_not_probed(candidate))
            continue
        outcome, seconds = _probe(candidate)
        if not outcome.available:
            failures.append((candidate, outcome))
            records.append(_record(candidate, outcome, seconds, "passed over"))
            continue
        if chosen is not None:
            records.append(_record(candidate, outcome, seconds, "available, lower priority"))
            continue
        try:
            chosen = _instantiate(candidate)
        except Exception as error:
            outcome = ProbeOutcome.broken(
                f"{outcome.reason}, but creating the accelerator raised "
                f"{type(error).__name__}: {error}",
                f"Check the {candidate.name!r} runtime installation.",
            )
            failures.append((candidate, outcome))
            records.append(_record(candidate, outcome, seconds, "passed over"))
            continue
        chosen_candidate = candidate
        records.append(_record(candidate, outcome, seconds, "selected"))

    elapsed = time.perf_counter() - start
    for record in records:
        logger.debug(
            "probe %s: %s (%s) -> %s [%.3f ms]",
            record.candidate,
            record.kind,
            record.reason,
            record.decision,
            record.seconds * 1000,
        )
    if chosen is None or chosen_candidate is None:
        if forced is None:
            raise AcceleratorError(
                "no accelerator candidate is available, not even the CPU fallback: "
                + "; ".join(f"{c.path}: {o.reason}" for c, o in failures)
            )
        candidate, outcome = max(failures, key=lambda f: _SEVERITY.get(f[1].kind, 1))
        reasons = "; ".join(f"{c.path}: {o.reason}" for c, o in failures)
        raise AcceleratorUnavailableError(
            forced, outcome.kind, reasons, f"{outcome.remedy} Or unset {FORCE_ENV}."
        )

    report = DetectionReport(
        accelerator=chosen._name,
        accelerator_class=f"{type(chosen).__module__}.{type(chosen).__qualname__}",
        how="detected" if forced is None else FORCE_ENV,
        forced_name=forced,
        probes=tuple(records),
        seconds=elapsed,
    )
    logger.debug("selected accelerator %r in %.3f ms", chosen._name, elapsed * 1000)
    return chosen, report


# ---------------------------------------------------------------------- the contract check
#: Members every accelerator object must have (DeepSpeed's abstract contract).
REQUIRED_MEMBERS: tuple[str, ...] = (
    "_name",
    "is_synchronized_device", "use_host_timers", "resolves_data_dependency",
    "handles_memory_backpressure", "device_name", "device", "set_device", "current_device",
    "current_device_name", "device_count", "synchronize", "random", "set_rng_state",
    "get_rng_state", "manual_seed", "manual_seed_all", "initial_seed", "default_generator",
    "Stream", "stream", "current_stream", "default_stream", "Event", "empty_cache",
    "memory_allocated", "max_memory_allocated", "reset_max_memory_allocated", "memory_cached",
    "max_memory_cached", "reset_max_memory_cached", "memory_stats", "reset_peak_memory_stats",
    "memory_reserved", "max_memory_reserved", "total_memory", "available_memory",
    "is_bf16_supported", "is_fp16_supported", "supported_dtypes", "is_available", "range_push",
    "range_pop", "lazy_call", "communication_backend_name", "is_triton_supported",
    "create_graph", "capture_to_graph", "replay_graph", "BFloat16Tensor", "ByteTensor",
    "DoubleTensor", "FloatTensor", "HalfTensor", "IntTensor", "LongTensor", "pin_memory",
    "is_pinned", "on_accelerator", "op_builder_dir", "create_op_builder", "get_op_builder",
    "build_extension", "export_envs", "visible_devices_envs", "set_visible_devices_envs",
    "get_compile_backend", "set_compile_backend",
)  # fmt: skip

#: Newer members anyaccel fills in with its defaults on objects that lack them.
OPTIONAL_MEMBERS: tuple[str, ...] = (
    "prefer_triton_grouped_mm", "is_fp64_supported", "unpin_memory", "pin_empty",
    "pin_empty_like", "pin_memory_alignment", "register_host_memory", "unregister_host_memory",
    "amp", "is_current_stream_capturing",
)  # fmt: skip

#: Private helpers the optional members' defaults call.
_DEFAULT_HELPERS: tuple[str, ...] = ("_can_pin", "_tensor_factory")


def _missing_members(candidate: object) -> list[str]:
    cls = type(candidate)
    missing = []
    for name in REQUIRED_MEMBERS:
        if name in ("Stream", "Event") or name.endswith("Tensor"):
            present = hasattr(cls, name)  # properties: do not evaluate them
        else:
            present = hasattr(candidate, name)
        if not present:
            missing.append(name)
    return missing


def _validated(candidate: object) -> Accelerator:
    """``candidate`` as an accelerator, or ``InvalidAcceleratorError`` naming what is missing.

    Objects that satisfy the contract without subclassing :class:`Accelerator` (such as an
    accelerator written for DeepSpeed) are accepted; the newer optional members they lack
    are bound from anyaccel's defaults.
    """
    if isinstance(candidate, type):
        raise InvalidAcceleratorError(
            f"set_accelerator() needs an accelerator instance, got the class "
            f"{candidate.__qualname__}; call it: set_accelerator({candidate.__qualname__}())"
        )
    missing = _missing_members(candidate)
    if missing:
        raise InvalidAcceleratorError(
            f"{type(candidate).__qualname__} object is not an accelerator: it lacks "
            f"{', '.join(missing)}. Subclass anyaccel.Accelerator (or "
            "anyaccel.backends.torch_module.TorchModuleAccelerator) and implement them."
        )
    name = getattr(candidate, "_name", None)
    if not isinstance(name, str) or not name:
        raise InvalidAcceleratorError(
            f"{type(candidate).__qualname__}._name is {name!r}; an accelerator needs a non-empty "
            "string name such as 'cuda' (set it as a class attribute or in __init__)"
        )
    if not isinstance(candidate, Accelerator):
        for member in OPTIONAL_MEMBERS + _DEFAULT_HELPERS:
            if not hasattr(candidate, member):
                default = getattr(Accelerator, member)
                setattr(candidate, member, default.__get__(candidate, type(candidate)))
        Accelerator.register(type(candidate))
    assert isinstance(candidate, Accelerator)
    return candidate


# ---------------------------------------------------------------------- the cached choice
_accelerator: Accelerator | None = None
_report: DetectionReport | None = None
_lock = threading.Lock()


def _renew_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


def get_accelerator() -> Accelerator:
    """The process's accelerator: detected on first use, then the same object every time."""
    return _accelerator or _detect_once()  # one global read once detected


def _detect_once() -> Accelerator:
    global _accelerator, _report
    with _lock:
        if _accelerator is None:
            accelerator, report = detect_accelerator()
            if report.how == "detected" and report.accelerator == "cpu":
                _warn_cpu_fallback(report)
            _accelerator, _report = accelerator, report
        return _accelerator


def _warn_cpu_fallback(report: DetectionReport) -> None:
    passed = [p.candidate for p in report.probes if p.decision == "passed over"]
    warnings.warn(
        "anyaccel found no accelerator and is using the CPU "
        f"(probed: {', '.join(passed) or 'nothing else'}). To force a backend, set "
        f"{FORCE_ENV} to one of: {', '.join(SUPPORTED_ACCELERATOR_LIST)}. "
        "Run `anyaccel report` to see why each was passed over.",
        CpuFallbackWarning,
        stacklevel=4,
    )


def set_accelerator(accel_obj: object) -> None:
    """Make ``accel_obj`` the process's accelerator (checked against the contract)."""
    global _accelerator, _report
    accelerator = _validated(accel_obj)
    with _lock:
        _accelerator = accelerator
        _report = DetectionReport(
            accelerator=accelerator._name,
            accelerator_class=f"{type(accelerator).__module__}.{type(accelerator).__qualname__}",
            how="set_accelerator",
            forced_name=None,
        )


def reset_accelerator() -> None:
    """Forget the cached accelerator so the next ``get_accelerator`` detects again (for tests)."""
    global _accelerator, _report
    with _lock:
        _accelerator = None
        _report = None
    _forget_plugins()


def detection_report() -> DetectionReport:
    """How the current accelerator was chosen (detecting it first if nothing has yet)."""
    get_accelerator()
    report = _report
    assert report is not None
    return report


def is_current_accelerator_supported() -> bool:
    """Whether the current accelerator's name is one ``DS_ACCELERATOR`` accepts."""
    return get_accelerator()._name in SUPPORTED_ACCELERATOR_LIST
