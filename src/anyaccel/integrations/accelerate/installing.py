"""install() and uninstall(): the variables set, the CPU job's group and state, the record kept."""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anyaccel.forksafe import ForkSafeLock
from anyaccel.integrations.accelerate.asking import ask_frameworks, device_type_of, is_launched
from anyaccel.integrations.accelerate.plan import (
    Plan,
    after_install_scenario,
    judge,
    levers_for,
    questions_for,
    settings_text,
)
from anyaccel.integrations.accelerate.refusals import (
    AccelerateStateConflictError,
    TransformersDeviceWarning,
)
from anyaccel.integrations.accelerate.versions import check_versions

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "Installation",
    "chosen_accelerator",
    "environ_without",
    "install",
    "installed",
    "uninstall",
]


def _existing_state() -> Any:
    """accelerate's shared ``PartialState`` if one exists in this process, else None.

    A documented hook (accelerate has no public "does a state exist" for ``PartialState``):
    ``PartialState._shared_state`` is the dict every ``PartialState`` shares, empty until the
    first one is built. Where a release lacks it, the public ``accelerate.state.is_initialized()``
    answers instead (it sees states built by ``Accelerator()``, not by a bare ``PartialState()``).
    Once one exists, ``PartialState()`` returns it and builds nothing.
    """
    state = importlib.import_module("accelerate.state")
    shared = getattr(state.PartialState, "_shared_state", None)
    exists = bool(shared) if isinstance(shared, dict) else bool(state.is_initialized())
    return state.PartialState() if exists else None


def _check_existing(plan: Plan) -> None:
    existing = _existing_state()
    if existing is None:
        return
    device = existing.device
    distributed_name = existing.distributed_type.name
    same_device = device is not None and device.type == device_type_of(plan.device)
    if same_device and distributed_name == plan.accelerate.distributed_type:
        return
    raise AccelerateStateConflictError(
        f"accelerate's state already exists on {str(device)!r} as "
        f"DistributedType.{distributed_name}, but anyaccel's device is {plan.device!r} "
        f"(DistributedType.{plan.accelerate.distributed_type}). accelerate keeps its first state "
        f"for the whole process: call anyaccel.integrations.accelerate.install() before the "
        f"first Accelerator(), PartialState() or TrainingArguments(...)."
    )


@dataclass(frozen=True)
class Installation:
    """What :func:`install` set (so that :func:`uninstall` can put it back), and what follows."""

    device: str
    distributed_type: str
    num_processes: int
    backend: str | None
    environment: dict[str, str]
    previous_environment: dict[str, str | None]
    #: The backend of the default process group when ``install()`` returned (``None``: none):
    #: under torchrun on the CPU it is the one ``install()`` joined, anyaccel_shm on one node.
    process_group: str | None = None


def _join_the_group(plan: Plan, environ: Mapping[str, str]) -> str | None:
    """On CPU ranks launched with a rendezvous, join the default group on the CPU's backend.

    accelerate names gloo for every ``MULTI_CPU`` job (``PartialState(backend=...)`` refuses
    any other) but adopts a default group that already exists: joining it here through
    ``init_distributed()`` gives accelerate and the Trainer anyaccel_shm on one node, and
    keeps gloo across nodes or with ``ANYACCEL_SHM_BACKEND=0``. Without ``MASTER_ADDR`` and
    ``MASTER_PORT`` (no launcher's rendezvous) accelerate is left to make the group itself.
    """
    if plan.accelerate.distributed_type != "MULTI_CPU":
        return None
    import torch.distributed as dist

    if not dist.is_available():
        return None
    if not dist.is_initialized():
        if not (environ.get("MASTER_ADDR") and environ.get("MASTER_PORT")):
            return None
        from anyaccel.distributed import init_distributed

        init_distributed()
    return str(dist.get_backend())


def _build_multi_cpu_state(plan: Plan, group: str | None) -> None:
    """On CPU ranks in a process group, build accelerate's shared state: ``PartialState(cpu=True)``.

    ``Accelerator()`` and ``TrainingArguments`` read ``ACCELERATE_USE_CPU``, but a bare
    ``PartialState()`` (``PartialState().is_main_process``, many scripts' first line) reads no
    variable for the CPU and would run each rank alone as ``DistributedType.NO``. accelerate
    keeps one shared state per process and every later ``PartialState()`` or ``Accelerator()``
    returns it, so building it here through its public constructor gives them all the
    ``MULTI_CPU`` state on the group ``install()`` joined. Without a group (no rendezvous for
    ``install()`` to join) the state is left to accelerate, which makes the group with the
    user's own ``InitProcessGroupKwargs``: there build ``Accelerator()`` or
    ``PartialState(cpu=True)`` first.
    """
    if plan.accelerate.distributed_type != "MULTI_CPU" or group is None:
        return
    if _existing_state() is None:
        importlib.import_module("accelerate.state").PartialState(cpu=True)


_lock = ForkSafeLock(reentrant=True)  # renewed in a forked child

_installation: Installation | None = None


def installed() -> Installation | None:
    """The active installation, or ``None`` before :func:`install` (or after :func:`uninstall`)."""
    return _installation


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def install(accelerator: Accelerator | None = None) -> Installation:
    """Make accelerate's (and transformers') state agree with anyaccel's accelerator.

    Call it before the first ``Accelerator()``, ``PartialState()`` or ``TrainingArguments``.
    It sets only the documented variables (module docstring) and asks accelerate, and for one
    process transformers, in a child process what they then do (:func:`ask_frameworks`).
    Idempotent for the same device. ``accelerator`` defaults to ``get_accelerator()``.

    Raises :class:`AccelerateNotInstalledError` or :class:`UnsupportedVersionError` (see
    :func:`check_versions`), :class:`AccelerateStateConflictError` if accelerate's state already
    exists with another device, :class:`NoDistributedTypeError` for a multi-process job on a
    device accelerate does not pick itself, :class:`AccelerateIntegrationError` when accelerate
    refuses these settings or cannot be asked, and ``anyaccel.InvalidAcceleratorError`` (a
    ``TypeError``) for an ``accelerator`` that is no accelerator object (``"cpu"``). Nothing is
    changed when it raises: an earlier installation stays in place. Warns with
    :class:`TransformersDeviceWarning` if transformers will still pick another device for one
    process (then pass ``TrainingArguments(use_cpu=True)`` or hide that device).
    """
    global _installation
    accelerator = chosen_accelerator(accelerator, "install()")
    versions = check_versions()
    with _lock:
        device = accelerator.device_name()
        if device_type_of(device) != "cpu" and not is_launched(os.environ):
            device = accelerator.current_device_name()
        current = _installation
        if current is not None and device_type_of(current.device) == device_type_of(device):
            return current
        environ = environ_without(current)  # judged as if the earlier one were undone
        levers = levers_for(device, environ)
        scenario = after_install_scenario(
            levers, questions_for(versions)
        )  # the same as explain()'s: asked once
        plan = judge(device, levers, environ, ask_frameworks((scenario,), environ)[scenario.name])
        _check_existing(plan)
        warning = None
        after = plan.transformers
        one_process = plan.accelerate.distributed_type == "NO"
        if one_process and after and device_type_of(after.device) != device_type_of(plan.device):
            fix = (
                "pass TrainingArguments(use_cpu=True)"
                if plan.device == "cpu"
                else f"hide the {device_type_of(after.device)!r} devices from this process"
            )
            warning = (
                f"transformers' TrainingArguments will still pick {after.device!r} (asked with "
                f"{settings_text(levers)}), not anyaccel's {plan.device!r}: {fix}."
            )
        # accelerate's MULTI_CPU runs DDP on gloo: see anyaccel.distributed.exit_grace
        from anyaccel.distributed.exit_grace import pause_for_backend

        pause_for_backend(plan.accelerate.backend or "")  # a bad ANYACCEL_EXIT_GRACE: refused now
        group = _join_the_group(plan, os.environ)  # before any variable: a failure changes none
        if current is not None:  # every check passed: only now is the earlier one undone
            uninstall()
        previous = {name: os.environ.get(name) for name in plan.environment}
        for name, value in plan.environment.items():
            os.environ[name] = value
        try:
            _build_multi_cpu_state(plan, group)
        except Exception:  # accelerate's own refusal: put the variables back, keep no record
            for name, before in previous.items():
                _restore(name, before)
            raise
        _installation = Installation(
            device=plan.device,
            distributed_type=plan.accelerate.distributed_type,
            num_processes=plan.accelerate.num_processes,
            backend=plan.accelerate.backend,
            environment=dict(plan.environment),
            previous_environment=previous,
            process_group=group,
        )
    if warning is not None:
        warnings.warn(warning, TransformersDeviceWarning, stacklevel=2)
    return _installation


def chosen_accelerator(accelerator: object, call: str) -> Accelerator:
    """``accelerator`` checked (``InvalidAcceleratorError`` naming it), or the selected one."""
    if accelerator is None:
        from anyaccel.detection import get_accelerator

        return get_accelerator()
    from anyaccel.contract import accelerator_argument

    return accelerator_argument(accelerator, f"anyaccel.integrations.accelerate.{call}")


def environ_without(installation: Installation | None) -> dict[str, str]:
    """``os.environ`` as it was before ``installation`` set its variables."""
    environ = dict(os.environ)
    if installation is not None:
        for name, value in installation.previous_environment.items():
            environ.pop(name, None)
            if value is not None:
                environ[name] = value
    return environ


def uninstall() -> None:
    """Undo :func:`install`: put back the environment variables it set.

    A state accelerate already built keeps its device; this only affects states built later.
    """
    global _installation
    with _lock:
        if _installation is None:
            return
        for name, value in _installation.previous_environment.items():
            _restore(name, value)
        _installation = None
