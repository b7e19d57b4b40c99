"""Make HF accelerate (and the transformers ``Trainer`` built on it) run on anyaccel's device.

accelerate and transformers pick their device and ``DistributedType`` themselves and have no
extension point; both read documented environment variables. :func:`install` sets those,
before their state exists, and changes nothing else::

    from anyaccel.integrations import accelerate as anyaccel_accelerate
    anyaccel_accelerate.install()       # before Accelerator() / TrainingArguments(...)
    accelerator = accelerate.Accelerator()

- the CPU: ``ACCELERATE_USE_CPU=true`` (what ``accelerate launch --cpu`` sets), read by every
  ``Accelerator()`` and ``TrainingArguments``. Under ``torchrun`` this makes a real
  ``MULTI_CPU`` job instead of N processes that each believe they are alone; there
  :func:`install` also joins the default group and builds accelerate's shared
  ``PartialState(cpu=True)``, which a bare ``PartialState()`` would build as one process.
- another device, one process: ``ACCELERATE_TORCH_DEVICE=<device>:<index>``, which both
  accelerate's ``PartialState`` and the last step of transformers' own device choice read.
- another device, several processes: accelerate must already pick it on its own; otherwise
  :func:`install` refuses, naming what accelerate does instead.

What accelerate and transformers will do is never worked out here: :func:`ask_frameworks`
asks them, in a child process (building their state would fix this process's), and keeps the
answer for the same settings. :func:`explain` shows those answers next to anyaccel's choice.
Importing this module imports neither torch, accelerate nor transformers and changes nothing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from anyaccel.errors import AcceleratorError, AnyaccelWarning
from anyaccel.extras import install_hint
from anyaccel.forksafe import ForkSafeLock

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "SUPPORTED_VERSIONS",
    "AccelerateIntegrationError",
    "AccelerateNotInstalledError",
    "AccelerateStateConflictError",
    "Explanation",
    "FrameworkChoice",
    "Installation",
    "NoDistributedTypeError",
    "Scenario",
    "SupportedRange",
    "TransformersDeviceWarning",
    "UnsupportedVersionError",
    "ask_frameworks",
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


#: The variables and arguments used here exist unchanged in accelerate 1.0 and transformers
#: 4.46 up to the versions tested (accelerate 1.15.0, transformers 5.23.0); see
#: docs/accelerate.md.
SUPPORTED_VERSIONS: dict[str, SupportedRange] = {
    "accelerate": SupportedRange("accelerate", "1.0", "2"),
    "transformers": SupportedRange("transformers", "4.46", "6"),
}

_USE_CPU = "ACCELERATE_USE_CPU"
_TORCH_DEVICE = "ACCELERATE_TORCH_DEVICE"
#: What accelerate reads to decide a job has several processes (besides LOCAL_RANK).
_WORLD_SIZE_ENVS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
#: Launcher variables a question about one process must not see.
_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", *_WORLD_SIZE_ENVS)


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


# ---------------------------------------------------------------------- asking them
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


@dataclass(frozen=True)
class Scenario:
    """Questions for accelerate and transformers, asked with some variables set or unset.

    ``ask`` names questions of ``anyaccel.integrations.framework_probe``: ``"accelerate"``
    (``Accelerator().state``), ``"transformers"`` (``TrainingArguments().device``),
    ``"fp16"`` (``Accelerator(mixed_precision="fp16")``), ``"device_map"``
    (``accelerate.utils.get_max_memory()``), ``"bf16=True"`` and
    ``"bf16=True, use_cpu=True"`` (``TrainingArguments(...)``).
    """

    name: str
    ask: tuple[str, ...]
    set: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()


#: Answers already given, by (environment, scenario): each is asked once per process.
_answers: dict[tuple[tuple[tuple[tuple[str, str], ...], str], Scenario], dict[str, Any]] = {}
_asking = ForkSafeLock()


def ask_frameworks(
    scenarios: tuple[Scenario, ...],
    environ: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Each scenario's answers, from accelerate and transformers asked in one child process.

    The child runs with ``environ`` (default ``os.environ``) and each scenario's changes, and
    builds the frameworks' state there, never here. Every question's entry is
    ``{"answer": ...}`` or ``{"error": "<the framework's own refusal>"}``. Answers are kept for
    the rest of this process, per environment and scenario; only those not yet known are asked.
    Raises :class:`AccelerateIntegrationError` when the child cannot answer (it crashed or ran
    past ``timeout`` seconds), with the end of its output.
    """
    env = dict(os.environ if environ is None else environ)
    runtime = _device_runtime()
    key = (tuple(sorted(env.items())), json.dumps(runtime, sort_keys=True))
    with _asking:
        missing = [scenario for scenario in scenarios if (key, scenario) not in _answers]
        # one child for all of them; where this platform cannot fork, one per question
        batches = (
            [missing]
            if hasattr(os, "fork") or not missing
            else [[Scenario(s.name, (q,), s.set, s.unset)] for s in missing for q in s.ask]
        )
        for batch in batches:
            if not batch:
                continue
            for name, answers in _ask_child(batch, env, runtime, timeout).items():
                scenario = next(s for s in missing if s.name == name)
                _answers.setdefault((key, scenario), {}).update(answers)
        return {scenario.name: _answers[(key, scenario)] for scenario in scenarios}


def _device_runtime() -> dict[str, Any]:
    """How the child gets the PrivateUse1 device this process has (nothing for torch's own).

    A vendor package without torch's backend autoload (or the generic backend's runtime)
    registers its device when the user's script imports it, and the emulated device when
    ``install()`` is called: a fresh child has neither, and ``torch.device("vpu:0")`` fails
    there. So the child is told the PrivateUse1 name, the package that provides
    ``torch.<name>`` (imported there, from where it was found here) and the emulated device's
    spec (installed there; its build is cached).
    """
    torch = sys.modules.get("torch")  # no torch imported: no device of its to describe
    getter = getattr(getattr(torch, "_C", None), "_get_privateuse1_backend_name", None)
    name = str(getter()) if getter is not None else "privateuseone"
    if torch is None or name == "privateuseone":
        return {}
    runtime: dict[str, Any] = {"privateuse1": name}
    module = getattr(torch, name, None)
    parts = str(getattr(module, "__name__", "")).split(".")
    for depth in range(len(parts), 0, -1):  # the deepest importable module of its name
        found = sys.modules.get(".".join(parts[:depth]))
        origin = getattr(getattr(found, "__spec__", None), "origin", None)
        if found is None or parts[0] == "__main__" or not origin or not Path(origin).is_file():
            continue
        root = Path(origin).parents[depth - (0 if origin.endswith("__init__.py") else 1)]
        runtime["import"] = {"module": ".".join(parts[:depth]), "path": str(root)}
        break
    from anyaccel.emulated.state import installed_spec

    spec = installed_spec()
    if spec is not None and spec.device_type == name:
        runtime["emulated"] = asdict(spec)
    return runtime


def _ask_child(
    scenarios: list[Scenario], env: dict[str, str], runtime: dict[str, Any], timeout: float
) -> dict[str, dict[str, dict[str, Any]]]:
    """Run ``framework_probe`` once for ``scenarios``; its answers by scenario name."""
    source = Path(__file__).with_name("framework_probe.py").read_text(encoding="utf-8")
    request = {
        "runtime": runtime,
        "scenarios": [
            {"name": s.name, "ask": list(s.ask), "set": dict(s.set), "unset": list(s.unset)}
            for s in scenarios
        ],
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", source, json.dumps(request)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as error:
        raise AccelerateIntegrationError(
            f"accelerate and transformers did not answer within {timeout} s in a child process"
        ) from error
    lines = done.stdout.strip().splitlines()
    try:
        answers: dict[str, dict[str, dict[str, Any]]] = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise AccelerateIntegrationError(
            f"accelerate and transformers could not be asked in a child process (exit "
            f"{done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
        ) from None
    return answers


@dataclass(frozen=True)
class FrameworkChoice:
    """What one framework will run on: device, distributed type, backend, process count."""

    framework: str
    version: str | None
    device: str
    distributed_type: str
    backend: str | None
    num_processes: int
    how: str


def _choice(
    framework: str, entry: Mapping[str, Any], environ: Mapping[str, str], how: str
) -> FrameworkChoice | str:
    """A question's answer as a :class:`FrameworkChoice`, or the framework's refusal."""
    if "error" in entry:
        return str(entry["error"])
    answer = entry["answer"]
    distributed = str(answer["distributed_type"])
    processes = 1 if distributed == "NO" else launched_world_size(environ)
    return FrameworkChoice(
        framework, None, str(answer["device"]), distributed, answer["backend"], processes, how
    )


def _device_type(device: str) -> str:
    return device.partition(":")[0]


def _multi_device_types() -> dict[str, str]:
    """Device type -> accelerate's ``MULTI_*`` member name (``MULTI_GPU`` is ``cuda``)."""
    distributed_type = importlib.import_module("accelerate.utils").DistributedType
    table: dict[str, str] = {}
    for name in distributed_type.__members__:
        if name.startswith("MULTI_"):
            device = name.removeprefix("MULTI_").lower()
            table["cuda" if device == "gpu" else device] = name
    return table


# ---------------------------------------------------------------------- the plan
def _levers(device: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables :func:`install` sets for ``device``; raises if the user's say otherwise."""
    device_type = _device_type(device)
    user_device = environ.get(_TORCH_DEVICE)
    if user_device and _device_type(user_device) != device_type:
        raise AccelerateStateConflictError(
            f"{_TORCH_DEVICE}={user_device} is set, but anyaccel's device is {device!r}: "
            f"accelerate would follow the variable. Unset {_TORCH_DEVICE}, or set "
            f"DS_ACCELERATOR={_device_type(user_device)} so that anyaccel agrees."
        )
    if device_type == "cpu":
        return {_USE_CPU: "true"}
    if not _is_launched(environ):
        return {_TORCH_DEVICE: device}
    return {}  # several processes: accelerate's own choice, checked by _judge


def _after(levers: Mapping[str, str], ask: tuple[str, ...]) -> Scenario:
    """The scenario "after install()": the levers set."""
    return Scenario("after install()", ask, tuple(sorted(levers.items())))


def _questions(versions: Mapping[str, str | None]) -> tuple[str, ...]:
    """Who is asked what each does: accelerate, and transformers where it is installed."""
    return ("accelerate", "transformers") if versions.get("transformers") else ("accelerate",)


@dataclass(frozen=True)
class _Plan:
    """What :func:`install` will set, and what accelerate and transformers said they then do."""

    device: str
    environment: dict[str, str]
    accelerate: FrameworkChoice
    transformers: FrameworkChoice | None


def _judge(
    device: str,
    levers: dict[str, str],
    environ: Mapping[str, str],
    answers: Mapping[str, Mapping[str, Any]],
) -> _Plan:
    """The plan, from what the frameworks answered with the levers set; raise if it fails."""
    device_type = _device_type(device)
    world = launched_world_size(environ)
    how = "Accelerator() asked in a child process"
    after = _choice("accelerate", answers["accelerate"], environ, how)
    if isinstance(after, str):
        raise AccelerateIntegrationError(
            f"accelerate refuses to start with {_settings(levers)}: {after}"
        )
    transformers: FrameworkChoice | str | None = None
    if "transformers" in answers:
        how = "TrainingArguments().device asked in a child process"
        transformers = _choice("transformers", answers["transformers"], environ, how)
    plan = _Plan(device, levers, after, None if isinstance(transformers, str) else transformers)
    if device_type == "cpu" or not _is_launched(environ):
        return plan
    multi_types = _multi_device_types()
    wanted = multi_types.get(device_type)
    if wanted is None:
        raise NoDistributedTypeError(
            f"this is a {world}-process job on anyaccel's {device_type!r} device, but accelerate "
            f"has no distributed type for {device_type!r} (its multi-process types are "
            f"{', '.join(sorted(multi_types.values()))}), so it would run every rank as "
            f"DistributedType.NO or on another device. Run one process with accelerate, or use "
            f"anyaccel.distributed with torch.distributed directly for this device."
        )
    if after.distributed_type != wanted or _device_type(after.device) != device_type:
        launcher = (
            ""
            if environ.get("LOCAL_RANK", "-1") != "-1"
            else "launch with torchrun or accelerate launch (they set LOCAL_RANK), "
        )
        raise NoDistributedTypeError(
            f"this is a {world}-process job on anyaccel's {device_type!r} device, but accelerate "
            f"would run it as DistributedType.{after.distributed_type} on "
            f"{_device_type(after.device)!r} (backend {after.backend}): accelerate has {wanted}, "
            f"yet it does not pick {device_type!r} here and it has no setting to choose a device "
            f"for a multi-process job. To fix it, {launcher}make {device_type!r} the only device "
            f"family visible, or set DS_ACCELERATOR={_device_type(after.device)} so that "
            f"anyaccel agrees."
        )
    return plan


def _settings(levers: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in levers.items()) or "nothing set"


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


def _check_existing(plan: _Plan) -> None:
    existing = _existing_state()
    if existing is None:
        return
    device = existing.device
    distributed_name = existing.distributed_type.name
    same_device = device is not None and device.type == _device_type(plan.device)
    if same_device and distributed_name == plan.accelerate.distributed_type:
        return
    raise AccelerateStateConflictError(
        f"accelerate's state already exists on {str(device)!r} as "
        f"DistributedType.{distributed_name}, but anyaccel's device is {plan.device!r} "
        f"(DistributedType.{plan.accelerate.distributed_type}). accelerate keeps its first state "
        f"for the whole process: call anyaccel.integrations.accelerate.install() before the "
        f"first Accelerator(), PartialState() or TrainingArguments(...)."
    )


# ---------------------------------------------------------------------- install / uninstall
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


def _join_the_group(plan: _Plan, environ: Mapping[str, str]) -> str | None:
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


def _build_multi_cpu_state(plan: _Plan, group: str | None) -> None:
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
        levers = _levers(device, environ)
        scenario = _after(levers, _questions(versions))  # the same as explain()'s: asked once
        plan = _judge(device, levers, environ, ask_frameworks((scenario,), environ)[scenario.name])
        _check_existing(plan)
        warning = None
        after = plan.transformers
        one_process = plan.accelerate.distributed_type == "NO"
        if one_process and after and _device_type(after.device) != _device_type(plan.device):
            fix = (
                "pass TrainingArguments(use_cpu=True)"
                if plan.device == "cpu"
                else f"hide the {_device_type(after.device)!r} devices from this process"
            )
            warning = (
                f"transformers' TrainingArguments will still pick {after.device!r} (asked with "
                f"{_settings(levers)}), not anyaccel's {plan.device!r}: {fix}."
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


# ---------------------------------------------------------------------- explain
@dataclass(frozen=True)
class Explanation:
    """anyaccel's device next to what accelerate and transformers said they do, and limits."""

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
    refusals: dict[str, str] = field(default_factory=dict)

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
        rows.extend((label, f"refused: {text}") for label, text in self.refusals.items())
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


def _limits(device_type: str, answers: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """accelerate's fp16 and ``device_map="auto"`` answers for ``device_type``, as text."""
    limits: dict[str, str] = {}
    fp16 = answers["fp16"]
    if "error" in fp16:
        limits["fp16"] = f"refused by accelerate on {device_type!r}: {fp16['error']}; use bf16"
    else:
        answer = fp16["answer"]
        scaler = (
            "no GradScaler"
            if answer["grad_scaler"] is None
            else f"a GradScaler from {answer['grad_scaler']}, "
            + ("enabled" if answer["grad_scaler_enabled"] else "disabled")
        )
        limits["fp16"] = f"accepted by accelerate on {answer['device']!r} ({scaler})"
    spread = answers["device_map"]
    if "error" in spread:
        limits['device_map="auto"'] = f"accelerate's get_max_memory() fails: {spread['error']}"
    else:
        devices = [str(device) for device in spread["answer"]]
        types = {_device_type(device) if not device.isdigit() else "" for device in devices}
        verdict = (
            "uses this device"
            if device_type in types
            else f"never places weights on {device_type!r}"
        )
        limits['device_map="auto"'] = f"spreads over {', '.join(devices)} ({verdict})"
    return limits


#: ``TrainingArguments(bf16=True)`` alone, then with ``use_cpu=True``, in one process.
_BF16 = Scenario("bf16", ("bf16=True", "bf16=True, use_cpu=True"), unset=_LAUNCH_VARIABLES)


def _bf16_line(answers: Mapping[str, Mapping[str, Any]], device_type: str) -> str:
    """The line that works for bf16; ``use_cpu=True`` only where the device is the CPU."""
    alone, with_cpu = answers["bf16=True"].get("error"), answers["bf16=True, use_cpu=True"]
    if alone is None:
        return "TrainingArguments(bf16=True) is accepted by transformers here"
    refused = f"TrainingArguments(bf16=True) is refused by transformers here ({alone})"
    if "error" not in with_cpu and device_type == "cpu":
        return f"{refused}; TrainingArguments(bf16=True, use_cpu=True) is accepted: use that line"
    if "error" not in with_cpu:  # elsewhere that line would move training off the device
        off = f"use_cpu=True would train on the CPU instead of {device_type!r}"
        return f"{refused}; {off}: use bf16=False"
    return f"{refused}; use bf16=False"


def trainer_bf16(
    environ: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    device_type: str | None = None,
) -> str:
    """What the Trainer says to ``TrainingArguments(bf16=True)`` here, and the line that works.

    transformers is asked in a child process (:func:`ask_frameworks`; it validates the
    arguments as a user's script would), so nothing in this process is built or changed.
    ``use_cpu=True`` is named only where ``device_type`` (default: the selected accelerator's)
    is the CPU: elsewhere it would move training off the device.
    """
    try:
        answers = ask_frameworks((_BF16,), environ, timeout)[_BF16.name]
    except AccelerateIntegrationError as error:
        return f"transformers could not be asked ({error})"
    if device_type is None:
        device_type = _device_type(_accelerator_argument(None, "trainer_bf16()").device_name())
    return _bf16_line(answers, device_type)


def explain(accelerator: Accelerator | None = None) -> Explanation:
    """anyaccel's choice next to what accelerate and transformers do, alone and after install().

    Asks them in one child process (:func:`ask_frameworks`, its answers kept for the same
    settings), so it builds no framework state here and changes nothing. Raises like
    :func:`check_versions` when accelerate is missing or unsupported,
    :class:`AccelerateIntegrationError` when the child cannot answer, and
    ``anyaccel.InvalidAcceleratorError`` for an ``accelerator`` that is no accelerator object.
    """
    accelerator = _accelerator_argument(accelerator, "explain()")
    versions = check_versions()
    device = accelerator.device_name()
    device_type = _device_type(device)
    environ = _environ_without(_installation)  # "on its own" means without what install() set
    has_transformers = versions.get("transformers") is not None
    both = _questions(versions)
    alone = Scenario("on its own", both)
    refused: str | None = None
    try:
        levers = _levers(device, environ)
    except AccelerateIntegrationError as error:
        refused, levers = str(error), {}
    after = _after(levers, both)
    limits_scenario = Scenario("limits", ("fp16", "device_map"), after.set)
    scenarios = (alone, after, limits_scenario, *((_BF16,) if has_transformers else ()))
    answers = ask_frameworks(scenarios, environ)
    refusals: dict[str, str] = {}
    own: dict[str, FrameworkChoice | None] = {}
    for framework in both:
        how = "asked in a child process, nothing set"
        choice = _choice(framework, answers[alone.name][framework], environ, how)
        if isinstance(choice, str):
            refusals[f"{framework} on its own"] = choice
            own[framework] = None
        else:
            own[framework] = FrameworkChoice(**{**asdict(choice), "version": versions[framework]})
    plan: _Plan | None = None
    if refused is None:
        try:
            plan = _judge(device, levers, environ, answers[after.name])
        except AccelerateIntegrationError as error:
            refused = str(error)
    limits = _limits(device_type, answers[limits_scenario.name])
    if has_transformers:
        limits["Trainer bf16"] = _bf16_line(answers[_BF16.name], device_type)
    return Explanation(
        anyaccel_device=device,
        anyaccel_backend=accelerator.communication_backend_name(),
        world_size=launched_world_size(environ),
        versions=versions,
        accelerate=own.get("accelerate"),
        transformers=own.get("transformers"),
        after_install=None if plan is None else plan.accelerate,
        transformers_after_install=None if plan is None else plan.transformers,
        install_refused=refused,
        limits=limits,
        refusals=refusals,
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
