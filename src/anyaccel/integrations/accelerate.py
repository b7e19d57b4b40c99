"""Make HF accelerate (and the transformers ``Trainer`` built on it) run on anyaccel's device.

accelerate picks its device and ``DistributedType`` from fixed chains in ``accelerate/state.py``
and has no extension point; transformers' ``TrainingArguments`` builds accelerate's
``PartialState`` and then, for a single process, re-picks the device with its own chain.
:func:`install` steers both through the levers they already read, before their state exists::

    from anyaccel.integrations import accelerate as anyaccel_accelerate
    anyaccel_accelerate.install()       # before Accelerator() / PartialState() / TrainingArguments
    accelerator = accelerate.Accelerator()

- the CPU backend: ``ACCELERATE_USE_CPU=true`` (what ``accelerate launch --cpu`` sets), and
  ``PartialState(cpu=...)`` defaulted to ``True`` (a direct ``PartialState()`` ignores that
  variable). Under ``torchrun`` this makes a real ``MULTI_CPU`` job over gloo instead of N
  processes that each believe they are alone (``DistributedType.NO``, one process).
- another device, one process: ``ACCELERATE_TORCH_DEVICE=<device>:<index>``, which both
  accelerate's ``PartialState`` and the last branch of transformers' chain read.
- another device, several processes: accelerate must already pick it on its own (a
  ``MULTI_<DEVICE>`` type exists and its chain reaches it); otherwise :func:`install` refuses,
  naming what accelerate lacks.

:func:`explain` sets nothing: it shows anyaccel's choice next to what accelerate and
transformers would pick on their own, and their known limits on this device. Importing this
module imports neither torch, accelerate nor transformers and changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from anyaccel.errors import AcceleratorError, AnyaccelWarning
from anyaccel.extras import install_hint
from anyaccel.forksafe import ForkSafeLock

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "ACCELERATE_FP16_DEVICES",
    "SUPPORTED_VERSIONS",
    "AccelerateIntegrationError",
    "AccelerateNotInstalledError",
    "AccelerateStateConflictError",
    "Explanation",
    "FrameworkChoice",
    "Installation",
    "NoDistributedTypeError",
    "SupportedRange",
    "TransformersDeviceWarning",
    "UnsupportedVersionError",
    "check_versions",
    "explain",
    "format_report_section",
    "install",
    "installed",
    "launched_world_size",
    "report_section",
    "trainer_bf16",
    "uninstall",
]


class SupportedRange(NamedTuple):
    """The versions of one framework this module works with: ``minimum <= v < below``."""

    package: str
    minimum: str
    below: str

    def __str__(self) -> str:
        return f"{self.package}>={self.minimum},<{self.below}"


#: The levers used here exist unchanged in accelerate 1.0 and transformers 4.46 up to the
#: versions tested (accelerate 1.15.0, transformers 5.23.0); see docs/accelerate.md.
SUPPORTED_VERSIONS: dict[str, SupportedRange] = {
    "accelerate": SupportedRange("accelerate", "1.0", "2"),
    "transformers": SupportedRange("transformers", "4.46", "6"),
}

#: Devices accelerate 1.15's ``Accelerator`` accepts for fp16 mixed precision (a tuple local
#: to its ``__init__``, so not importable); any other device is refused with a ValueError.
ACCELERATE_FP16_DEVICES: tuple[str, ...] = (
    "xpu", "cuda", "npu", "xla", "mlu", "musa", "hpu", "sdaa", "mps",
)  # fmt: skip

_USE_CPU = "ACCELERATE_USE_CPU"
_TORCH_DEVICE = "ACCELERATE_TORCH_DEVICE"
#: What accelerate reads to decide a CPU job has several processes (besides LOCAL_RANK).
_WORLD_SIZE_ENVS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")

#: transformers' single-process device chain (``TrainingArguments._setup_devices``), in order;
#: after it: ``cuda:0`` if CUDA is available, else ``ACCELERATE_TORCH_DEVICE``, else ``cpu``.
_TRANSFORMERS_CHAIN = (
    ("mps", "is_torch_mps_available"), ("xpu", "is_torch_xpu_available"),
    ("mlu", "is_torch_mlu_available"), ("musa", "is_torch_musa_available"),
    ("npu", "is_torch_npu_available"), ("hpu", "is_torch_hpu_available"),
    ("neuron", "is_torch_neuron_available"), ("tpu", "is_torch_tpu_available"),
)  # fmt: skip
#: accelerate's ``get_grad_scaler`` chain; after it, a GradScaler for ``cuda``.
_GRAD_SCALER_CHAIN = (
    ("mlu", "is_mlu_available"), ("sdaa", "is_sdaa_available"), ("musa", "is_musa_available"),
    ("npu", "is_npu_available"), ("hpu", "is_hpu_available"), ("xpu", "is_xpu_available"),
    ("mps", "is_mps_available"),
)  # fmt: skip
#: accelerate's ``get_max_memory`` chain (what ``device_map="auto"`` spreads over); after it,
#: ``torch.cuda``'s devices. ``mps`` and ``cpu`` memory are added besides.
_DEVICE_MAP_CHAIN = (
    ("npu", "is_npu_available"), ("mlu", "is_mlu_available"), ("sdaa", "is_sdaa_available"),
    ("musa", "is_musa_available"), ("xpu", "is_xpu_available"), ("hpu", "is_hpu_available"),
)  # fmt: skip


# ---------------------------------------------------------------------- errors
class AccelerateIntegrationError(AcceleratorError):
    """accelerate or transformers cannot be made to run on anyaccel's device."""


class AccelerateNotInstalledError(AccelerateIntegrationError, ImportError):
    """accelerate (or transformers) is needed for this call but is not installed."""


class UnsupportedVersionError(AccelerateIntegrationError, ValueError):
    """The installed accelerate or transformers is outside :data:`SUPPORTED_VERSIONS`."""


class AccelerateStateConflictError(AccelerateIntegrationError):
    """accelerate's state already exists with another device or distributed type."""


class NoDistributedTypeError(AccelerateIntegrationError):
    """A multi-process job on a device accelerate has no ``DistributedType`` (or path) for."""


class TransformersDeviceWarning(AnyaccelWarning):
    """transformers' own single-process device chain will pick another device than anyaccel."""


# ---------------------------------------------------------------------- versions
def _installed_version(package: str) -> str | None:
    if importlib.util.find_spec(package) is None:
        return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # importable, but not from a distribution
        module = importlib.import_module(package)
        return str(getattr(module, "__version__", "0"))


def check_versions(require_transformers: bool = False) -> dict[str, str | None]:
    """The installed accelerate and transformers versions, checked against the supported range.

    Raises :class:`AccelerateNotInstalledError` if accelerate (or, with
    ``require_transformers``, transformers) is missing, and :class:`UnsupportedVersionError` if
    either installed one is outside :data:`SUPPORTED_VERSIONS`.
    """
    from packaging.version import InvalidVersion, Version

    found: dict[str, str | None] = {}
    for package, supported in SUPPORTED_VERSIONS.items():
        version = _installed_version(package)
        found[package] = version
        if version is None:
            if package == "accelerate" or require_transformers:
                raise AccelerateNotInstalledError(
                    f"{package} is not installed; anyaccel's accelerate integration needs "
                    f"{supported}. Install it with: {install_hint(package)}"
                )
            continue
        try:
            parsed = Version(version)
        except InvalidVersion:
            parsed = None
        if parsed is None or not Version(supported.minimum) <= parsed < Version(supported.below):
            raise UnsupportedVersionError(
                f"{package} {version} is installed, but anyaccel's accelerate integration "
                f"supports {supported} (tested with accelerate 1.15.0 and transformers 5.23.0). "
                f"Install a supported version: {install_hint(package)}"
            )
    return found


# ---------------------------------------------------------------------- what each would pick
def launched_world_size(environ: Mapping[str, str] | None = None) -> int:
    """How many processes the launcher started, from the variables accelerate reads (1 if none).

    ``LOCAL_RANK`` alone (``torchrun --nproc-per-node 1``) counts as a job of one process.
    """
    env = os.environ if environ is None else environ
    sizes = [int(env[name]) for name in _WORLD_SIZE_ENVS if env.get(name, "").strip().isdigit()]
    return max(sizes, default=1)


def _is_launched(environ: Mapping[str, str]) -> bool:
    """Whether accelerate would treat this process as one rank of a launched job."""
    return environ.get("LOCAL_RANK", "-1") != "-1" or launched_world_size(environ) > 1


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "y", "on"}


def _first_available(module: Any, chain: tuple[tuple[str, str], ...]) -> str | None:
    for device, checker in chain:
        check = getattr(module, checker, None)
        if check is not None and bool(check()):
            return device
    return None


def _multi_device_types(distributed_type: Any) -> dict[str, str]:
    """Device type -> accelerate's ``MULTI_*`` member name (``MULTI_GPU`` is ``cuda``)."""
    table: dict[str, str] = {}
    for name in distributed_type.__members__:
        if name.startswith("MULTI_"):
            device = name.removeprefix("MULTI_").lower()
            table["cuda" if device == "gpu" else device] = name
    return table


@dataclass(frozen=True)
class FrameworkChoice:
    """What one framework would run on: device, distributed type, backend, process count."""

    framework: str
    version: str | None
    device: str
    distributed_type: str
    backend: str | None
    num_processes: int
    how: str


def _accelerate_choice(environ: Mapping[str, str], cpu: bool) -> FrameworkChoice:
    """What accelerate's ``PartialState`` would pick in ``environ`` with ``cpu``; builds nothing."""
    state = importlib.import_module("accelerate.state")
    partial_state = state.PartialState
    world = launched_world_size(environ)
    with _environment(environ):
        # Both are accelerate's own code; neither reads ``self``, and neither builds any state.
        backend, distributed = partial_state._prepare_backend(None, cpu, False, None)
        mps_fallback = os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK")
        default = "cpu" if cpu else str(partial_state.default_device.fget(None).type)
        _restore("PYTORCH_ENABLE_MPS_FALLBACK", mps_fallback)
    env_device = environ.get(_TORCH_DEVICE)
    if distributed.name == "NO":
        device = env_device or default
        how = (
            f"{_TORCH_DEVICE}={env_device}"
            if env_device
            else ("cpu=True" if cpu else "PartialState.default_device")
        )
        return FrameworkChoice("accelerate", None, device, "NO", None, 1, how)
    by_type = {v: k for k, v in _multi_device_types(type(distributed)).items()}
    device = by_type.get(distributed.name, distributed.name.lower())
    how = "cpu=True and a launcher's world size" if cpu else "_prepare_backend's device chain"
    return FrameworkChoice("accelerate", None, device, distributed.name, backend, world, how)


def _transformers_choice(
    environ: Mapping[str, str], accelerate_choice: FrameworkChoice
) -> FrameworkChoice:
    """What ``TrainingArguments().device`` would be, given accelerate's choice, building nothing."""
    if accelerate_choice.distributed_type != "NO":
        return FrameworkChoice(
            "transformers",
            None,
            accelerate_choice.device,
            accelerate_choice.distributed_type,
            accelerate_choice.backend,
            accelerate_choice.num_processes,
            "accelerate's PartialState.device (a distributed job)",
        )
    import torch

    chosen = _first_available(importlib.import_module("transformers.utils"), _TRANSFORMERS_CHAIN)
    if chosen is not None:
        device, how = f"{chosen}:0", f"its own chain (is_torch_{chosen}_available)"
    elif torch.cuda.is_available():
        device, how = "cuda:0", "its own chain (torch.cuda.is_available)"
    elif environ.get(_TORCH_DEVICE):
        device, how = environ[_TORCH_DEVICE], f"its own chain's last step, {_TORCH_DEVICE}"
    else:
        device, how = "cpu", "its own chain's last step (nothing found)"
    return FrameworkChoice("transformers", None, device, "NO", None, 1, how)


def _device_type(device: str) -> str:
    return device.partition(":")[0]


# ---------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class _Plan:
    """What :func:`install` will set, and what accelerate then picks (decided before any change)."""

    device: str
    environment: dict[str, str]
    partial_state_cpu: bool
    expected: FrameworkChoice


def _plan(accelerator: Accelerator, environ: Mapping[str, str], device: str) -> _Plan:
    """Decide the levers for ``accelerator`` in ``environ``; raise if none can work."""
    device_type = _device_type(device)
    launched = _is_launched(environ)
    world = launched_world_size(environ)
    distributed_type = importlib.import_module("accelerate.utils").DistributedType
    multi_types = _multi_device_types(distributed_type)
    user_device = environ.get(_TORCH_DEVICE)
    if user_device and _device_type(user_device) != device_type:
        raise AccelerateStateConflictError(
            f"{_TORCH_DEVICE}={user_device} is set, but anyaccel's device is {device!r}: "
            f"accelerate would follow the variable. Unset {_TORCH_DEVICE}, or set "
            f"DS_ACCELERATOR={_device_type(user_device)} so that anyaccel agrees."
        )
    if device_type == "cpu":
        env = {**environ, _USE_CPU: "true"}
        expected = _accelerate_choice(env, cpu=True)
        fast = accelerator.communication_backend_name()
        if expected.backend == "gloo" and fast != "gloo":
            # MULTI_CPU's gloo, made by _join_on_the_cpus_backend before accelerate makes it
            how = f"{expected.how}; the process group made by anyaccel on {fast}"
            expected = FrameworkChoice(**{**asdict(expected), "backend": fast, "how": how})
        return _Plan("cpu", {_USE_CPU: "true"}, True, expected)
    if not launched:
        env = {**environ, _TORCH_DEVICE: device}
        expected = _accelerate_choice(env, cpu=False)
        return _Plan(device, {_TORCH_DEVICE: device}, False, expected)
    wanted = multi_types.get(device_type)
    if wanted is None:
        raise NoDistributedTypeError(
            f"this is a {world}-process job on anyaccel's {device_type!r} device, but accelerate "
            f"has no distributed type for {device_type!r} (its multi-process types are "
            f"{', '.join(sorted(multi_types.values()))}), so it would run every rank as "
            f"DistributedType.NO or on another device. Run one process with accelerate, or use "
            f"anyaccel.distributed with torch.distributed directly for this device."
        )
    own = _accelerate_choice(environ, cpu=_flag(environ.get(_USE_CPU)))
    if own.distributed_type != wanted:
        launcher = (
            ""
            if environ.get("LOCAL_RANK", "-1") != "-1"
            else "launch with torchrun or accelerate launch (they set LOCAL_RANK), "
        )
        raise NoDistributedTypeError(
            f"this is a {world}-process job on anyaccel's {device_type!r} device, but accelerate "
            f"would run it as DistributedType.{own.distributed_type} on {own.device!r} "
            f"(backend {own.backend}): accelerate has {wanted}, yet its device chain does not "
            f"reach {device_type!r} here and it has no setting to choose a device for a "
            f"multi-process job. To fix it, {launcher}make {device_type!r} the only device "
            f"family visible, or set DS_ACCELERATOR={own.device} so that anyaccel agrees."
        )
    return _Plan(device, {}, False, own)


def _existing_state() -> dict[str, Any] | None:
    """accelerate's shared ``PartialState`` if one exists (from the module, never created)."""
    state_module = importlib.import_module("accelerate.state")
    shared = state_module.PartialState._shared_state
    return dict(shared) if shared else None


def _check_existing(plan: _Plan) -> None:
    existing = _existing_state()
    if existing is None:
        return
    device = existing.get("device")
    distributed = existing.get("distributed_type")
    distributed_name = getattr(distributed, "name", str(distributed))
    same_device = device is not None and device.type == _device_type(plan.device)
    if same_device and distributed_name == plan.expected.distributed_type:
        return
    raise AccelerateStateConflictError(
        f"accelerate's state already exists on {str(device)!r} as "
        f"DistributedType.{distributed_name}, but anyaccel's device is {plan.device!r} "
        f"(DistributedType.{plan.expected.distributed_type}). accelerate keeps its first state "
        f"for the whole process: call anyaccel.integrations.accelerate.install() before the "
        f"first Accelerator(), PartialState() or TrainingArguments(...)."
    )


# ---------------------------------------------------------------------- install / uninstall
@dataclass(frozen=True)
class Installation:
    """What :func:`install` changed, so that :func:`uninstall` can put it back."""

    device: str
    distributed_type: str
    num_processes: int
    backend: str | None
    environment: dict[str, str]
    previous_environment: dict[str, str | None]
    partial_state_cpu: bool


_lock = ForkSafeLock(reentrant=True)  # renewed in a forked child
_installation: Installation | None = None
_original_init: Callable[..., None] | None = None


def installed() -> Installation | None:
    """The active installation, or ``None`` before :func:`install` (or after :func:`uninstall`)."""
    return _installation


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextlib.contextmanager
def _environment(environ: Mapping[str, str]) -> Iterator[None]:
    """Run with ``os.environ`` made equal to ``environ`` (accelerate reads ``os.environ``)."""
    changed = {
        name: os.environ.get(name)
        for name in set(os.environ) | set(environ)
        if os.environ.get(name) != environ.get(name)
    }
    try:
        for name in changed:
            _restore(name, environ.get(name))
        yield
    finally:
        for name, value in changed.items():
            _restore(name, value)


def _patch_partial_state_cpu() -> None:
    """Make ``PartialState(...)`` build a CPU state, as ``ACCELERATE_USE_CPU`` does elsewhere."""
    global _original_init
    partial_state = importlib.import_module("accelerate.state").PartialState
    original: Callable[..., None] = partial_state.__init__

    @functools.wraps(original)
    def __init__(self: Any, cpu: bool = False, **kwargs: Any) -> None:
        _join_on_the_cpus_backend(kwargs)
        original(self, True, **kwargs)  # anyaccel chose the CPU: see install()
        if self.backend == "gloo" and _group_backend() not in (None, "gloo"):
            self.backend = _group_backend()  # the group's real backend: anyaccel_shm

    _original_init = original
    partial_state.__init__ = __init__


def _join_on_the_cpus_backend(kwargs: Mapping[str, Any]) -> None:
    """Make MULTI_CPU's process group on the CPU's backend (anyaccel_shm) before accelerate would.

    accelerate names ``"gloo"`` for every MULTI_CPU job and refuses another ``backend=``, but
    uses a group that already exists: ``init_distributed()`` makes it (any launcher accelerate
    reads, ``timeout=`` as accelerate would pass it). Nothing when the plan is gloo (across
    nodes, ``ANYACCEL_SHM_BACKEND=0``), not MULTI_CPU, or a group exists.
    """
    plan = _installation
    if plan is None or plan.distributed_type != "MULTI_CPU" or plan.backend in (None, "gloo"):
        return
    import torch.distributed as dist

    from anyaccel.distributed import init_distributed

    if not dist.is_initialized():
        init_distributed(backend=plan.backend, timeout=kwargs.get("timeout"), set_device=False)


def _group_backend() -> str | None:
    """The default process group's backend, None without one."""
    import torch.distributed as dist

    return str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None


def _unpatch_partial_state() -> None:
    global _original_init
    if _original_init is not None:
        importlib.import_module("accelerate.state").PartialState.__init__ = _original_init
        _original_init = None


def install(accelerator: Accelerator | None = None) -> Installation:
    """Make accelerate's (and transformers') state agree with anyaccel's accelerator.

    Call it before the first ``Accelerator()``, ``PartialState()`` or ``TrainingArguments``.
    Idempotent for the same device. ``accelerator`` defaults to ``get_accelerator()``.

    Raises :class:`AccelerateNotInstalledError` or :class:`UnsupportedVersionError` (see
    :func:`check_versions`), :class:`AccelerateStateConflictError` if accelerate's state already
    exists with another device, :class:`NoDistributedTypeError` for a multi-process job on a
    device accelerate cannot run distributed, and ``anyaccel.InvalidAcceleratorError`` (a
    ``TypeError``) for an ``accelerator`` that is no accelerator object (``"cpu"``). Nothing is
    changed when it raises: an earlier installation stays in place. Warns with
    :class:`TransformersDeviceWarning` if transformers' own single-process chain would still
    pick another device (then pass ``TrainingArguments(use_cpu=True)`` or hide that device).
    """
    global _installation
    accelerator = _accelerator_argument(accelerator, "install()")
    versions = check_versions()
    with _lock:
        device = accelerator.device_name()
        if _device_type(device) != "cpu" and not _is_launched(os.environ):
            device = accelerator.current_device_name()
        current = _installation
        if current is not None and _device_type(current.device) == _device_type(device):
            return current
        environ = _environ_without(current)  # judged as if the earlier one were undone
        plan = _plan(accelerator, environ, device)
        _check_existing(plan)
        warning = None
        if versions.get("transformers") is not None and plan.expected.distributed_type == "NO":
            after = _transformers_choice({**environ, **plan.environment}, plan.expected)
            if _device_type(after.device) != _device_type(plan.device):
                fix = (
                    "pass TrainingArguments(use_cpu=True)"
                    if plan.device == "cpu"
                    else f"hide the {_device_type(after.device)!r} devices from this process"
                )
                warning = (
                    f"transformers' TrainingArguments will still pick {after.device!r} by "
                    f"{after.how}, not anyaccel's {plan.device!r}: {fix}."
                )
        # accelerate's MULTI_CPU runs DDP on gloo: see anyaccel.distributed.exit_grace
        from anyaccel.distributed.exit_grace import pause_for_backend

        pause_for_backend(plan.expected.backend or "")  # a bad ANYACCEL_EXIT_GRACE: refused now
        if current is not None:  # every check passed: only now is the earlier one undone
            uninstall()
        previous = {name: os.environ.get(name) for name in plan.environment}
        os.environ.update(plan.environment)
        if plan.partial_state_cpu:
            _patch_partial_state_cpu()
        _installation = Installation(
            device=plan.device,
            distributed_type=plan.expected.distributed_type,
            num_processes=plan.expected.num_processes,
            backend=plan.expected.backend,
            environment=dict(plan.environment),
            previous_environment=previous,
            partial_state_cpu=plan.partial_state_cpu,
        )
    if warning is not None:
        warnings.warn(warning, TransformersDeviceWarning, stacklevel=2)
    return _installation


def _accelerator_argument(accelerator: object, call: str) -> Accelerator:
    """``accelerator`` checked (``InvalidAcceleratorError`` naming it), or the selected one."""
    if accelerator is None:
        from anyaccel.detection import get_accelerator

        return get_accelerator()
    from anyaccel.contract import accelerator_argument

    return accelerator_argument(accelerator, f"anyaccel.integrations.accelerate.{call}")


def _environ_without(installation: Installation | None) -> dict[str, str]:
    """``os.environ`` as it was before ``installation`` set its variables."""
    environ = dict(os.environ)
    if installation is not None:
        for name, value in installation.previous_environment.items():
            environ.pop(name, None)
            if value is not None:
                environ[name] = value
    return environ


def uninstall() -> None:
    """Undo :func:`install`: restore the environment variables and ``PartialState``.

    A state accelerate already built keeps its device; this only affects states built later.
    """
    global _installation
    with _lock:
        if _installation is None:
            return
        for name, value in _installation.previous_environment.items():
            _restore(name, value)
        _unpatch_partial_state()
        _installation = None


# ---------------------------------------------------------------------- explain
@dataclass(frozen=True)
class Explanation:
    """anyaccel's device next to what accelerate and transformers pick, and their limits."""

    anyaccel_device: str
    anyaccel_backend: str
    world_size: int
    versions: dict[str, str | None]
    accelerate: FrameworkChoice | None = None
    transformers: FrameworkChoice | None = None
    after_install: FrameworkChoice | None = None
    transformers_after_install: FrameworkChoice | None = None
    install_refused: str | None = None
    limits: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for ``anyaccel report --json``)."""
        return asdict(self)

    def format(self) -> str:
        """Aligned text lines (for ``anyaccel report``)."""
        rows: list[tuple[str, str]] = [
            ("anyaccel", f"{self.anyaccel_device} (backend {self.anyaccel_backend})"),
            ("processes launched", str(self.world_size)),
        ]
        for label, choice in (
            ("accelerate on its own", self.accelerate),
            ("transformers on its own", self.transformers),
            ("accelerate after install()", self.after_install),
            ("transformers after install()", self.transformers_after_install),
        ):
            if choice is not None:
                rows.append((label, _format_choice(choice)))
        if self.install_refused is not None:
            rows.append(("install()", f"refused: {self.install_refused}"))
        rows.extend((f"limit: {name}", text) for name, text in self.limits.items())
        versions = ", ".join(
            f"{name} {version}" if version else f"{name} not installed ({install_hint(name)})"
            for name, version in self.versions.items()
        )
        rows.append(("versions", versions))
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label:<{width}}  {text}" for label, text in rows)


def _format_choice(choice: FrameworkChoice) -> str:
    backend = f", backend {choice.backend}" if choice.backend else ""
    return (
        f"{choice.device} as DistributedType.{choice.distributed_type}, "
        f"{choice.num_processes} process(es){backend} ({choice.how})"
    )


def _limits(device_type: str) -> dict[str, str]:
    """accelerate's fp16, grad-scaler and ``device_map="auto"`` behaviour for ``device_type``."""
    import torch

    utils = importlib.import_module("accelerate.utils")
    limits: dict[str, str] = {}
    if device_type == "cpu":
        limits["fp16"] = "accelerate skips fp16 autocast and the GradScaler on the CPU (use bf16)"
    elif device_type in ACCELERATE_FP16_DEVICES:
        limits["fp16"] = f"accepted by accelerate on {device_type!r}"
    else:
        limits["fp16"] = (
            f"refused by accelerate on {device_type!r}: Accelerator(mixed_precision='fp16') "
            f"raises ValueError (its list: {', '.join(ACCELERATE_FP16_DEVICES)}); use bf16"
        )
    scaler = _first_available(utils, _GRAD_SCALER_CHAIN) or "cuda"
    if device_type != "cpu":
        verdict = "matches" if scaler == device_type else f"not {device_type!r}"
        limits["grad scaler device"] = f"{scaler} (accelerate's get_grad_scaler; {verdict})"
    family = _first_available(utils, _DEVICE_MAP_CHAIN)
    if family is None:
        family = "cuda" if torch.cuda.is_available() else None
    spread = [d for d in (family, "mps" if utils.is_mps_available() else None, "cpu") if d]
    verdict = (
        "uses this device" if device_type in spread else f"never places weights on {device_type!r}"
    )
    limits['device_map="auto"'] = f"spreads over {', '.join(spread)} ({verdict})"
    return limits


#: Asks transformers itself, in a child process, whether ``TrainingArguments`` takes bf16 here
#: (alone, then with ``use_cpu=True``); prints one JSON object: arguments -> error or null.
_TRAINER_BF16_PROBE = """
import json, sys, tempfile, warnings
warnings.simplefilter("ignore")
from transformers import TrainingArguments
answers = {}
for words, extra in (("bf16=True", {}), ("bf16=True, use_cpu=True", {"use_cpu": True})):
    try:
        with tempfile.TemporaryDirectory() as out:
            TrainingArguments(output_dir=out, bf16=True, report_to="none", **extra)
        answers[words] = None
    except Exception as error:
        answers[words] = f"{type(error).__name__}: {error}".splitlines()[0]
print(json.dumps(answers))
"""
#: Launcher variables the probe's child must not see (it would join a process group).
_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def trainer_bf16(
    environ: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    device_type: str | None = None,
) -> str:
    """What the Trainer says to ``TrainingArguments(bf16=True)`` here, and the line that works.

    transformers is asked in a child process (it validates the arguments as a user's script
    would), so nothing in this process is built or changed. ``use_cpu=True`` is named only
    where ``device_type`` (default: the selected accelerator's) is the CPU: elsewhere it would
    move training off the device.
    """
    import json
    import subprocess
    import sys

    env = dict(os.environ if environ is None else environ)
    for name in (*_LAUNCH_VARIABLES, *_WORLD_SIZE_ENVS):
        env.pop(name, None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TRAINER_BF16_PROBE],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        answers = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as error:
        return f"transformers could not be asked ({type(error).__name__}: {error})"
    alone, with_cpu = answers.get("bf16=True"), answers.get("bf16=True, use_cpu=True")
    if alone is None:
        return "TrainingArguments(bf16=True) is accepted by transformers here"
    if device_type is None:
        device_type = _device_type(_accelerator_argument(None, "trainer_bf16()").device_name())
    if with_cpu is None and device_type == "cpu":
        return (
            f"TrainingArguments(bf16=True) is refused by transformers here ({alone}); "
            "TrainingArguments(bf16=True, use_cpu=True) is accepted: use that line"
        )
    if with_cpu is None:
        return (
            f"TrainingArguments(bf16=True) is refused by transformers here ({alone}); "
            f"use_cpu=True would train on the CPU instead of {device_type!r}: use bf16=False"
        )
    return f"TrainingArguments(bf16=True) is refused by transformers here ({alone}); use bf16=False"


def explain(accelerator: Accelerator | None = None) -> Explanation:
    """anyaccel's choice next to what accelerate and transformers pick on their own.

    Builds no framework state and changes nothing (accelerate's availability checks run, as
    they would in accelerate itself). Raises like :func:`check_versions` when accelerate is
    missing or unsupported, and ``anyaccel.InvalidAcceleratorError`` for an ``accelerator``
    that is no accelerator object.
    """
    accelerator = _accelerator_argument(accelerator, "explain()")
    versions = check_versions()
    device = accelerator.device_name()
    device_type = _device_type(device)
    environ = _environ_without(_installation)  # "on its own" means without what install() set
    own = _accelerate_choice(environ, cpu=_flag(environ.get(_USE_CPU)))
    own = FrameworkChoice(**{**asdict(own), "version": versions["accelerate"]})
    has_transformers = versions.get("transformers") is not None
    own_transformers = _transformers_choice(environ, own) if has_transformers else None
    after: FrameworkChoice | None = None
    after_transformers: FrameworkChoice | None = None
    refused: str | None = None
    try:
        plan = _plan(accelerator, environ, device)
    except AccelerateIntegrationError as error:
        refused = str(error)
    else:
        after = plan.expected
        if has_transformers:
            after_transformers = _transformers_choice({**environ, **plan.environment}, after)
    limits = _limits(device_type)
    if own_transformers is not None:
        own_transformers = FrameworkChoice(
            **{**asdict(own_transformers), "version": versions["transformers"]}
        )
        limits["Trainer bf16"] = trainer_bf16(environ, device_type=device_type)
    return Explanation(
        anyaccel_device=device,
        anyaccel_backend=accelerator.communication_backend_name(),
        world_size=launched_world_size(environ),
        versions=versions,
        accelerate=own,
        transformers=own_transformers,
        after_install=after,
        transformers_after_install=after_transformers,
        install_refused=refused,
        limits=limits,
    )


# ---------------------------------------------------------------------- anyaccel report
def report_section(accelerator: Accelerator) -> dict[str, Any]:
    """The ``accelerate`` section of ``anyaccel report``: :func:`explain` as data, never raising."""
    if importlib.util.find_spec("accelerate") is None:
        return {
            "installed": False,
            "note": f"accelerate is not installed ({install_hint('accelerate')})",
        }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {"installed": True, **explain(accelerator).to_dict()}
    except Exception as error:  # the frameworks' own code: report it, do not die of it
        return {"installed": True, "error": f"{type(error).__name__}: {error}"}


def format_report_section(section: Mapping[str, Any]) -> str:
    """The text form of :func:`report_section`, under an ``accelerate / transformers`` heading."""
    heading = "accelerate / transformers"
    if not section.get("installed"):
        return f"{heading}\n  {section.get('note', '')}"
    if "error" in section:
        return f"{heading}\n  error: {section['error']}"
    fields = {k: v for k, v in section.items() if k != "installed"}
    for key in ("accelerate", "transformers", "after_install", "transformers_after_install"):
        if fields.get(key) is not None:
            fields[key] = FrameworkChoice(**fields[key])
    text = Explanation(**fields).format()
    return heading + "\n" + "\n".join(f"  {line}" for line in text.splitlines())
