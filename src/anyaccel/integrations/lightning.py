"""Lightning (Trainer and Fabric) on anyaccel's accelerator: ``accelerator="anyaccel"``.

Lightning ships as two sets of packages with separate classes and registries: the unified
``lightning`` package (``lightning.pytorch``, ``lightning.fabric``) and the standalone
``pytorch_lightning`` + ``lightning_fabric`` (which ``pip install lightning`` also installs).
Importing this module registers, in the Trainer and Fabric registries of **every** installed
one (each a :class:`Flavour`):

- the accelerator ``"anyaccel"`` (``AnyAccelerator``), which delegates to
  :func:`anyaccel.get_accelerator` or to an accelerator bound explicitly;
- the strategies ``"anyaccel_single_device"``, ``"anyaccel_ddp"``, ``"anyaccel_ddp_spawn"``
  and ``"anyaccel_ddp_fork"``, whose root device is the accelerator's, whose process-group
  backend is its ``communication_backend_name()`` and which use its streams;

and it teaches each package's two connectors to pick those strategies and a mixed-precision
plugin for the accelerator's device whenever the accelerator is anyaccel's. So::

    import anyaccel.integrations.lightning  # noqa: F401  (registers "anyaccel")
    trainer = lightning.Trainer(accelerator="anyaccel", devices=2, precision="bf16-mixed")
    fabric = lightning.Fabric(accelerator="anyaccel", devices=2)
    trainer = pytorch_lightning.Trainer(accelerator="anyaccel", devices=2)  # the same

end on the right device, strategy and precision device. A configuration that would land on
another device (a stock DDP strategy, a strategy rooted on the CPU, a precision plugin for
another device) is refused with :class:`LightningSetupError` when the Trainer or Fabric is
built. Each package's classes are built from one definition on that package's own base
classes: :data:`LIGHTNING` and :data:`PYTORCH_LIGHTNING` hold them (``None`` when that package
is not installed). The module's own ``AnyAccelerator``, ``AnyDDPStrategy``... are the
``lightning`` package's, or the standalone packages' when ``lightning`` is not installed.
Supported versions: :data:`SUPPORTED_LIGHTNING`, for every package.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pickle
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from anyaccel.errors import AcceleratorError, UnsupportedFeatureError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator as AnyaccelAccelerator

__all__ = [
    "ACCELERATOR_NAME",
    "FLAVOURS",
    "LIGHTNING",
    "PACKAGES",
    "PYTORCH_LIGHTNING",
    "STRATEGY_NAMES",
    "SUPPORTED_LIGHTNING",
    "AnyAccelerator",
    "AnyDDPStrategy",
    "AnyFabricDDPStrategy",
    "AnyFabricMixedPrecision",
    "AnyFabricSingleDeviceStrategy",
    "AnyMixedPrecision",
    "AnySingleDeviceStrategy",
    "Flavour",
    "LightningSetupError",
    "LightningUnavailableError",
    "check_placement",
    "register",
]

#: The versions this module is written and tested against (PEP 440), for each package:
#: ``lightning``, ``pytorch_lightning`` and ``lightning_fabric``.
SUPPORTED_LIGHTNING = ">=2.5,<2.7"

#: The Lightning packages anyaccel supports: the name of each and its (Trainer, Fabric) packages.
PACKAGES: dict[str, tuple[str, str]] = {
    "lightning": ("lightning.pytorch", "lightning.fabric"),
    "pytorch_lightning": ("pytorch_lightning", "lightning_fabric"),
}

#: The name to pass as ``Trainer(accelerator=...)`` / ``Fabric(accelerator=...)``.
ACCELERATOR_NAME = "anyaccel"

#: Strategy names registered in every strategy registry, and the start method each launches with.
STRATEGY_NAMES: dict[str, str] = {
    "anyaccel_ddp": "popen",
    "anyaccel_ddp_spawn": "spawn",
    "anyaccel_ddp_fork": "fork",
}
_SINGLE_DEVICE = "anyaccel_single_device"

#: Lightning's own DDP names, and the anyaccel strategy each becomes on an anyaccel device.
_STOCK_DDP: dict[str, str] = {
    "ddp": "anyaccel_ddp",
    "ddp_spawn": "anyaccel_ddp_spawn",
    "ddp_fork": "anyaccel_ddp_fork",
    "ddp_notebook": "anyaccel_ddp_fork",
}


def _extra_hint() -> str:
    """How to install the ``lightning`` extra, in a line that works from a wheel or a clone."""
    from anyaccel.extras import install_hint

    return f"Install it with `{install_hint('lightning')}`."


class LightningUnavailableError(AcceleratorError, ImportError):
    """No Lightning package is installed, or one is outside :data:`SUPPORTED_LIGHTNING`."""


class LightningSetupError(AcceleratorError, ValueError):
    """A Trainer/Fabric configuration that anyaccel's accelerator cannot run as asked."""


def _checked_version(distribution: str, fix: str) -> str:
    """The installed version of ``distribution`` (also its module), within the supported range."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.specifiers import SpecifierSet

    try:
        found = version(distribution)
    except PackageNotFoundError:  # a module shipped inside another distribution
        found = str(getattr(importlib.import_module(distribution), "__version__", "0"))
    if found not in SpecifierSet(SUPPORTED_LIGHTNING, prereleases=True):
        raise LightningUnavailableError(
            f"{distribution} {found} is installed, but anyaccel.integrations.lightning supports "
            f"{distribution}{SUPPORTED_LIGHTNING}. {fix}"
        )
    return found


def _require_lightning() -> dict[str, str]:
    """Each installed Lightning package (a key of :data:`PACKAGES`) and its checked version.

    :raises LightningUnavailableError: none is installed; ``pytorch_lightning`` is installed
        without ``lightning_fabric``; one of them has a version outside the supported range.
    """
    found: dict[str, str] = {}
    if importlib.util.find_spec("lightning") is not None:
        fix = f"{_extra_hint()[:-1]} (it pins a supported version)."
        found["lightning"] = _checked_version("lightning", fix)
    if importlib.util.find_spec("pytorch_lightning") is not None:
        pins = f'"pytorch_lightning{SUPPORTED_LIGHTNING}" "lightning_fabric{SUPPORTED_LIGHTNING}"'
        fix = f"Install supported ones with `pip install {pins}`, or uninstall pytorch_lightning."
        if importlib.util.find_spec("lightning_fabric") is None:
            raise LightningUnavailableError(
                "pytorch_lightning is installed but lightning_fabric, which it needs, is not. "
                + fix
            )
        found["pytorch_lightning"] = _checked_version("pytorch_lightning", fix)
        _checked_version("lightning_fabric", fix)
    if not found:
        raise LightningUnavailableError(
            "anyaccel.integrations.lightning needs the `lightning` package (or the standalone "
            f"`pytorch_lightning` with `lightning_fabric`). {_extra_hint()}"
        )
    return found


_VERSIONS = _require_lightning()

import torch  # noqa: E402  (after the check: a missing lightning names the extra first)
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from anyaccel.distributed.exit_grace import install_exit_grace  # noqa: E402
from anyaccel.distributed.shm.backend import BACKEND_NAME as _SHM_BACKEND  # noqa: E402

#: Process-group backends for CPU ranks, whose jobs get the pause at exit.
_CPU_BACKENDS = frozenset({"gloo", _SHM_BACKEND})

if TYPE_CHECKING:
    import lightning.pytorch as pl


# ====================================================================== the accelerator
def _default_accelerator() -> AnyaccelAccelerator:
    from anyaccel.detection import get_accelerator

    return get_accelerator()


def _accelerator_argument(value: object, call: str) -> AnyaccelAccelerator:
    """``value`` if it is an accelerator object; ``InvalidAcceleratorError`` naming it if not."""
    from anyaccel.contract import accelerator_argument

    return accelerator_argument(value, call)


def _accelerator_or_default(value: object, prefix: str) -> AnyaccelAccelerator:
    """A mixed-precision plugin's ``accelerator=``: checked, or the selected one when None."""
    if value is None:
        return _default_accelerator()
    return _accelerator_argument(value, f"{prefix}MixedPrecision(accelerator=...)")


def _device_type(accelerator: AnyaccelAccelerator) -> str:
    """The torch device type the accelerator's tensors live on (``"cpu"``, ``"npu"``...)."""
    return accelerator.device(0).type


def _is_host(accelerator: AnyaccelAccelerator) -> bool:
    """CPU: every process uses ``torch.device("cpu")``; ``devices`` counts processes."""
    return _device_type(accelerator) == "cpu"


def _parse_indices(devices: object, count: int, backend: str) -> list[int]:
    """Lightning's ``devices`` value as device indices, checked against ``count`` devices."""
    fix = f"Pass devices=N with 1 <= N <= {count}, -1 or 'auto' for all, or indices below {count}."
    if isinstance(devices, bool) or devices is None:
        raise LightningSetupError(f"devices={devices!r} is not a device choice. {fix}")
    if devices == "auto" or devices == -1 or devices == "-1":
        if count < 1:
            raise LightningSetupError(
                f"devices={devices!r}: the {backend!r} accelerator sees no device. "
                "Check that its devices are visible to this process (anyaccel report)."
            )
        return list(range(count))
    indices: list[int]
    if isinstance(devices, int):
        if devices < 1:
            raise LightningSetupError(f"devices={devices!r} is not a device count. {fix}")
        indices = list(range(devices))
    elif isinstance(devices, str):
        text = devices.strip()
        try:
            if "," in text:  # "0,1" and "1," are indices, as in Lightning
                indices = [int(part) for part in text.split(",") if part.strip()]
            else:
                return _parse_indices(int(text), count, backend)
        except ValueError:
            raise LightningSetupError(
                f"devices={devices!r} is not a device choice. {fix}"
            ) from None
    elif isinstance(devices, (list, tuple)):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in devices):
            raise LightningSetupError(f"devices={devices!r} must hold device indices. {fix}")
        indices = list(devices)
    else:
        raise LightningSetupError(f"devices={devices!r} is not a device choice. {fix}")
    if not indices or len(set(indices)) != len(indices) or min(indices) < 0:
        raise LightningSetupError(f"devices={devices!r} needs distinct indices >= 0. {fix}")
    if max(indices) >= count:
        asked = f"{len(indices)} device(s)" if isinstance(devices, int) else f"index {max(indices)}"
        raise LightningSetupError(
            f"devices={devices!r} asks for {asked}, but the {backend!r} accelerator has "
            f"{count}. {fix}"
        )
    return indices


def _parse_processes(devices: object) -> int:
    """On the CPU, ``devices`` is a number of processes (as Lightning's own CPU accelerator)."""
    fix = "On the CPU, pass devices=N (N >= 1 processes), or 'auto'/-1 for one."
    if devices in ("auto", -1, "-1"):
        return 1
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise LightningSetupError(f"devices={devices!r} is not a process count. {fix}")
    return devices


# ====================================================================== precision
_MixedName = Literal["16-mixed", "bf16-mixed"]


def _checked_precision(precision: str, accelerator: AnyaccelAccelerator) -> str:
    """The device type for ``precision`` on ``accelerator``; one it cannot do is an error."""
    device_type = _device_type(accelerator)
    if precision == "bf16-mixed":
        supported = bool(accelerator.is_bf16_supported())
    elif precision == "16-mixed":
        supported = bool(accelerator.is_fp16_supported())
    else:
        raise LightningSetupError(
            f"precision={precision!r} is not a mixed precision; use '16-mixed' or 'bf16-mixed'."
        )
    is_autocast_available = getattr(torch.amp, "is_autocast_available", None)
    if supported and is_autocast_available is not None:
        supported = bool(is_autocast_available(device_type))
    if not supported:
        # The port's rule (anyaccel.precision): the other half type where the device has it.
        from anyaccel.precision import autocast_dtype

        wanted = torch.float16 if precision == "16-mixed" else torch.bfloat16
        chosen = autocast_dtype(wanted, accelerator)
        names = {torch.float16: "'16-mixed'", torch.bfloat16: "'bf16-mixed'"}
        instead = (
            f"precision={names[chosen]} (what anyaccel.autocast_dtype picks here)"
            if chosen != wanted
            else "precision='32-true' (the device computes neither half type)"
        )
        raise LightningSetupError(
            f"precision={precision!r} is not supported on the {device_type!r} accelerator "
            f"(anyaccel's backend {type(accelerator).__name__} or torch.autocast says no). "
            f"Use {instead}."
        )
    return device_type


def _accelerator_classes() -> tuple[type[Any], ...]:
    """Every package's ``AnyAccelerator``."""
    return tuple(side.accelerator for side in _SIDES)


def _anyaccel_of(lightning_accelerator: object) -> AnyaccelAccelerator:
    """The anyaccel accelerator behind any package's ``AnyAccelerator`` (else the selected one)."""
    if isinstance(lightning_accelerator, _accelerator_classes()):
        backend: AnyaccelAccelerator = lightning_accelerator.anyaccel()
        return backend
    return _default_accelerator()


def _accelerator_stream(accelerator: AnyaccelAccelerator) -> AbstractContextManager[Any]:
    """A side stream of the accelerator, as Lightning uses ``torch.cuda.stream`` for DDP set-up."""
    return accelerator.stream(accelerator.Stream())


def _ddp_backend(strategy: Any) -> str:
    """A DDP strategy's process-group backend: the one it was given, else the accelerator's."""
    given: str | None = strategy._process_group_backend
    backend = given or _anyaccel_of(strategy.accelerator).communication_backend_name()
    if backend in _CPU_BACKENDS:
        install_exit_grace()  # torch's gloo exit abort: see anyaccel.distributed.exit_grace
    return backend


def _wrapped_in_ddp(
    strategy: Any, module: torch.nn.Module, device_ids: list[int] | None
) -> DistributedDataParallel:
    """``module`` in DDP, built on a side stream of the accelerator (not torch.cuda's)."""
    context = (
        _accelerator_stream(_anyaccel_of(strategy.accelerator))
        if device_ids is not None
        else nullcontext()
    )
    with context:
        return DistributedDataParallel(module=module, device_ids=device_ids, **strategy._ddp_kwargs)


def _register_ddp(cls: type, strategy_registry: Any) -> None:
    """Register ``cls`` as ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
    for name, start_method in STRATEGY_NAMES.items():
        _register_once(strategy_registry, name, cls, "strategy", start_method=start_method)


def _default_device() -> torch.device:
    accelerator = _default_accelerator()
    return torch.device("cpu") if _is_host(accelerator) else accelerator.device(0)


@functools.cache
def _bound_class_for(base: type, key: int, accelerator: AnyaccelAccelerator) -> type[Any]:
    name = f"AnyAccelerator[{type(accelerator).__name__}]"
    return type(name, (base,), {"_bound": accelerator, "__module__": __name__})


def _unpickled(
    package: str,
    bound: AnyaccelAccelerator | None,
    backend: type[AnyaccelAccelerator] | None,
) -> Any:
    """An ``AnyAccelerator`` of ``package`` again, in the process that unpickles it.

    ``bound`` travelled with it; or a ``backend`` class to build afresh there (a backend
    holding its vendor module does not pickle); or neither (it follows the selection).
    """
    accelerator_class = FLAVOURS[package].AnyAccelerator
    if backend is not None:
        return accelerator_class(backend())
    return accelerator_class(bound)


# ====================================================================== one package's classes
@dataclass(frozen=True)
class Flavour:
    """The classes anyaccel adds to one Lightning package, built on that package's own.

    ``LIGHTNING`` holds those for ``lightning.pytorch``/``lightning.fabric``,
    ``PYTORCH_LIGHTNING`` those for ``pytorch_lightning``/``lightning_fabric``; use the
    latter's with a Trainer or Fabric imported from the standalone packages.
    """

    name: str  #: the package, a key of :data:`PACKAGES`
    trainer_package: str  #: where its ``Trainer`` lives (``lightning.pytorch``...)
    fabric_package: str  #: where its ``Fabric`` lives (``lightning.fabric``...)
    version: str  #: the installed version
    AnyAccelerator: type[Any]  #: ``accelerator="anyaccel"``, for the Trainer and Fabric
    AnySingleDeviceStrategy: type[Any]  #: the Trainer's ``anyaccel_single_device``
    AnyDDPStrategy: type[Any]  #: the Trainer's ``anyaccel_ddp`` (and spawn/fork)
    AnyMixedPrecision: type[Any]  #: the Trainer's 16-mixed/bf16-mixed plugin
    AnyFabricSingleDeviceStrategy: type[Any]  #: Fabric's ``anyaccel_single_device``
    AnyFabricDDPStrategy: type[Any]  #: Fabric's ``anyaccel_ddp`` (and spawn/fork)
    AnyFabricMixedPrecision: type[Any]  #: Fabric's 16-mixed/bf16-mixed plugin
    _sides: tuple[_Side, _Side] = field(repr=False, compare=False)

    def _classes(self) -> tuple[type[Any], ...]:
        """The seven classes above, in their order."""
        return (
            self.AnyAccelerator,
            self.AnySingleDeviceStrategy,
            self.AnyDDPStrategy,
            self.AnyMixedPrecision,
            self.AnyFabricSingleDeviceStrategy,
            self.AnyFabricDDPStrategy,
            self.AnyFabricMixedPrecision,
        )


@dataclass(frozen=True)
class _Side:
    """The Trainer or Fabric half of one package: what registration and the hooks need."""

    package: str
    trainer: bool
    connector: type
    accelerators: Any  # the accelerator registry
    strategies: Any  # the strategy registry
    accelerator: type
    single: type
    ddp: type
    precision: type
    parallel_base: type  # the package's ParallelStrategy
    precision_base: type  # the package's MixedPrecision


#: The attribute of this module that holds each package's :class:`Flavour`.
_ATTRIBUTES = {"lightning": "LIGHTNING", "pytorch_lightning": "PYTORCH_LIGHTNING"}


def _build(package: str, version: str) -> Flavour:
    """Every class anyaccel adds to ``package`` (a key of :data:`PACKAGES`), on its classes."""
    trainer_package, fabric_package = PACKAGES[package]

    def load(base: str, module: str, attribute: str) -> Any:
        return getattr(importlib.import_module(f"{base}.{module}"), attribute)

    if TYPE_CHECKING:  # every package has the same classes: check against `lightning`'s
        from lightning.fabric.connector import _Connector as FabricConnector
        from lightning.fabric.plugins.precision.amp import MixedPrecision as FabricMixedPrecision
        from lightning.fabric.strategies.ddp import DDPStrategy as FabricDDPStrategy
        from lightning.fabric.strategies.parallel import (
            ParallelStrategy as FabricParallelStrategy,
        )
        from lightning.fabric.strategies.single_device import (
            SingleDeviceStrategy as FabricSingleDeviceStrategy,
        )
        from lightning.pytorch.accelerators.accelerator import Accelerator
        from lightning.pytorch.plugins.precision.amp import MixedPrecision
        from lightning.pytorch.strategies.ddp import DDPStrategy
        from lightning.pytorch.strategies.parallel import ParallelStrategy
        from lightning.pytorch.strategies.single_device import SingleDeviceStrategy
        from lightning.pytorch.trainer.connectors.accelerator_connector import (
            _AcceleratorConnector as TrainerConnector,
        )
    else:
        FabricConnector = load(fabric_package, "connector", "_Connector")
        FabricMixedPrecision = load(fabric_package, "plugins.precision.amp", "MixedPrecision")
        FabricDDPStrategy = load(fabric_package, "strategies.ddp", "DDPStrategy")
        FabricParallelStrategy = load(fabric_package, "strategies.parallel", "ParallelStrategy")
        FabricSingleDeviceStrategy = load(
            fabric_package, "strategies.single_device", "SingleDeviceStrategy"
        )
        Accelerator = load(trainer_package, "accelerators.accelerator", "Accelerator")
        MixedPrecision = load(trainer_package, "plugins.precision.amp", "MixedPrecision")
        DDPStrategy = load(trainer_package, "strategies.ddp", "DDPStrategy")
        ParallelStrategy = load(trainer_package, "strategies.parallel", "ParallelStrategy")
        SingleDeviceStrategy = load(
            trainer_package, "strategies.single_device", "SingleDeviceStrategy"
        )
        TrainerConnector = load(
            trainer_package, "trainer.connectors.accelerator_connector", "_AcceleratorConnector"
        )

    class AnyAccelerator(Accelerator):
        """Lightning's accelerator for what anyaccel selected (one class for Trainer and Fabric).

        ``AnyAccelerator()`` follows :func:`anyaccel.get_accelerator`; ``AnyAccelerator(acc)``
        binds ``acc``. It travels by pickle to spawned processes; a backend that holds its vendor
        module (which does not pickle) is rebuilt there from its class, ``type(acc)()``.
        Lightning asks some questions of the class rather than the instance (``parse_devices``,
        ``is_available``): a bound instance gets a class of its own that answers them for ``acc``.
        """

        _bound: ClassVar[AnyaccelAccelerator | None] = None

        def __new__(cls, accelerator: AnyaccelAccelerator | None = None) -> AnyAccelerator:
            """Raises ``anyaccel.InvalidAcceleratorError`` for an object that is no accelerator."""
            if accelerator is not None:
                accelerator = _accelerator_argument(accelerator, "AnyAccelerator()")
            if accelerator is not None and cls._bound is not accelerator:
                cls = _bound_class_for(AnyAccelerator, id(accelerator), accelerator)
            return super().__new__(cls)

        def __init__(self, accelerator: AnyaccelAccelerator | None = None) -> None:
            super().__init__()

        def __reduce__(self) -> tuple[Any, ...]:
            bound = type(self)._bound
            if bound is None:
                return (_unpickled, (package, None, None))
            try:
                pickle.dumps(bound)
            except (pickle.PicklingError, TypeError, AttributeError):
                # Backends hold their vendor module, which does not pickle: the child builds
                # the same backend class afresh (it finds its own module).
                return (_unpickled, (package, None, type(bound)))
            return (_unpickled, (package, bound, None))

        # ------------------------------------------------------------ what it delegates to
        @classmethod
        def anyaccel(cls) -> AnyaccelAccelerator:
            """The anyaccel accelerator this class answers for (bound, else the selected one)."""
            return cls._bound if cls._bound is not None else _default_accelerator()

        @classmethod
        def device_type(cls) -> str:
            """The torch device type of that accelerator (``"cpu"``, ``"npu"``, ``"mlu"``...)."""
            return _device_type(cls.anyaccel())

        # ------------------------------------------------------------ Lightning's class-level API
        @classmethod
        def name(cls) -> str:
            """``"anyaccel"``: the registry name, whatever backend runs underneath."""
            return ACCELERATOR_NAME

        @classmethod
        def is_available(cls) -> bool:
            """Whether the accelerator can run here (the CPU always can)."""
            accelerator = cls.anyaccel()
            return _is_host(accelerator) or bool(accelerator.is_available())

        @classmethod
        def auto_device_count(cls) -> int:
            """Every visible device; one process on the CPU (as Lightning's CPU accelerator)."""
            accelerator = cls.anyaccel()
            return 1 if _is_host(accelerator) else int(accelerator.device_count())

        @classmethod
        def parse_devices(cls, devices: Any) -> int | list[int]:
            """``devices`` as indices (validated against the device count); a count on the CPU.

            :raises LightningSetupError: a value that is no device choice, or more devices (or
                a higher index) than the accelerator has.
            """
            accelerator = cls.anyaccel()
            if _is_host(accelerator):
                return _parse_processes(devices)
            if (
                isinstance(devices, list)
                and devices
                and all(isinstance(d, torch.device) for d in devices)
            ):
                devices = [int(d.index or 0) for d in devices]
            count = int(accelerator.device_count())
            return _parse_indices(devices, count, _device_type(accelerator))

        @classmethod
        def get_parallel_devices(cls, devices: Any) -> list[torch.device]:
            """One ``torch.device`` per process: the parsed indices on the accelerator's type."""
            accelerator = cls.anyaccel()
            parsed = cls.parse_devices(devices)
            if isinstance(parsed, int):
                return [torch.device("cpu")] * parsed
            return [accelerator.device(index) for index in parsed]

        # ------------------------------------------------------------ per process
        def setup_device(self, device: torch.device) -> None:
            """Make ``device`` current; a device of another type than the accelerator's is an error.

            :raises LightningSetupError: ``device`` is not on the accelerator (Lightning would
                otherwise train there, e.g. on the CPU, without saying so).
            """
            accelerator = self.anyaccel()
            expected = _device_type(accelerator)
            device = torch.device(device)
            if device.type != expected:
                raise LightningSetupError(
                    f"Lightning asked AnyAccelerator to set up {device}, but anyaccel's "
                    f"accelerator runs on {expected!r}. Use an anyaccel strategy (strategy="
                    f"'auto', '{_SINGLE_DEVICE}' or 'anyaccel_ddp') or one whose root device "
                    f"is {expected!r}."
                )
            if expected != "cpu":
                accelerator.set_device(0 if device.index is None else device.index)

        def setup(self, trainer: pl.Trainer) -> None:
            """Before the Trainer moves the model: check that strategy and precision are ours."""
            check_placement(trainer.strategy, trainer.strategy.precision_plugin, self)

        def get_device_stats(self, device: Any) -> dict[str, Any]:
            """The accelerator's memory figures for ``device`` (those its backend provides)."""
            accelerator = self.anyaccel()
            index = torch.device(device).index
            figures: dict[str, Any] = {}
            for name in (
                "memory_allocated",
                "max_memory_allocated",
                "memory_reserved",
                "max_memory_reserved",
                "total_memory",
                "available_memory",
            ):
                try:
                    figures[name] = int(getattr(accelerator, name)(index))
                except UnsupportedFeatureError:
                    continue
            return figures

        def teardown(self) -> None:
            """Release the accelerator's cached memory (nothing to do on the CPU)."""
            accelerator = self.anyaccel()
            if not _is_host(accelerator):
                accelerator.empty_cache()

        @classmethod
        def register_accelerators(cls, accelerator_registry: Any) -> None:
            """Add ``"anyaccel"`` to ``accelerator_registry`` (once; never over another entry)."""
            _register_once(accelerator_registry, ACCELERATOR_NAME, AnyAccelerator, "accelerator")

    class AnySingleDeviceStrategy(SingleDeviceStrategy):
        """The Trainer's single-device strategy, rooted on the accelerator's device by default."""

        strategy_name = _SINGLE_DEVICE

        def __init__(self, device: Any = None, **kwargs: Any) -> None:
            super().__init__(device=_default_device() if device is None else device, **kwargs)

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_single_device``."""
            _register_once(strategy_registry, cls.strategy_name, cls, "strategy")

    class AnyDDPStrategy(DDPStrategy):
        """The Trainer's DDP with anyaccel's process-group backend and streams."""

        strategy_name = "anyaccel_ddp"

        def _get_process_group_backend(self) -> str:
            return _ddp_backend(self)

        def _setup_model(self, model: torch.nn.Module) -> DistributedDataParallel:
            return _wrapped_in_ddp(self, model, self.determine_ddp_device_ids())

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
            _register_ddp(cls, strategy_registry)

    class AnyFabricSingleDeviceStrategy(FabricSingleDeviceStrategy):
        """Fabric's single-device strategy, rooted on the accelerator's device by default."""

        def __init__(self, device: Any = None, **kwargs: Any) -> None:
            super().__init__(device=_default_device() if device is None else device, **kwargs)

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_single_device``."""
            _register_once(strategy_registry, _SINGLE_DEVICE, cls, "strategy")

    class AnyFabricDDPStrategy(FabricDDPStrategy):
        """Fabric's DDP with anyaccel's process-group backend and streams."""

        def _get_process_group_backend(self) -> str:
            return _ddp_backend(self)

        def setup_module(self, module: torch.nn.Module) -> DistributedDataParallel:
            """Wrap ``module`` in DDP, on a side stream of the accelerator (not torch.cuda's)."""
            return _wrapped_in_ddp(self, module, self._determine_ddp_device_ids())

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
            _register_ddp(cls, strategy_registry)

    class AnyMixedPrecision(MixedPrecision):
        """The Trainer's AMP plugin on the accelerator's device (its autocast and GradScaler)."""

        def __init__(
            self,
            precision: _MixedName,
            scaler: torch.amp.GradScaler | None = None,
            accelerator: AnyaccelAccelerator | None = None,
        ) -> None:
            """Raises :class:`LightningSetupError` for a precision the device cannot do, and
            ``anyaccel.InvalidAcceleratorError`` for an ``accelerator`` that is no accelerator.
            """
            device = _checked_precision(precision, _accelerator_or_default(accelerator, "Any"))
            super().__init__(precision, device, scaler)

    class AnyFabricMixedPrecision(FabricMixedPrecision):
        """Fabric's AMP plugin on the accelerator's device (its autocast and GradScaler)."""

        def __init__(
            self,
            precision: _MixedName,
            scaler: torch.amp.GradScaler | None = None,
            accelerator: AnyaccelAccelerator | None = None,
        ) -> None:
            """Raises :class:`LightningSetupError` for a precision the device cannot do, and
            ``anyaccel.InvalidAcceleratorError`` for an ``accelerator`` that is no accelerator.
            """
            accelerator = _accelerator_or_default(accelerator, "AnyFabric")
            device = _checked_precision(precision, accelerator)
            super().__init__(precision, device, scaler)

    sides = (
        _Side(
            trainer=True,
            connector=TrainerConnector,
            accelerators=load(trainer_package, "accelerators", "AcceleratorRegistry"),
            strategies=load(trainer_package, "strategies", "StrategyRegistry"),
            single=AnySingleDeviceStrategy,
            ddp=AnyDDPStrategy,
            precision=AnyMixedPrecision,
            parallel_base=ParallelStrategy,
            precision_base=MixedPrecision,
            package=package,
            accelerator=AnyAccelerator,
        ),
        _Side(
            trainer=False,
            connector=FabricConnector,
            accelerators=load(fabric_package, "accelerators", "ACCELERATOR_REGISTRY"),
            strategies=load(fabric_package, "strategies", "STRATEGY_REGISTRY"),
            single=AnyFabricSingleDeviceStrategy,
            ddp=AnyFabricDDPStrategy,
            precision=AnyFabricMixedPrecision,
            parallel_base=FabricParallelStrategy,
            precision_base=FabricMixedPrecision,
            package=package,
            accelerator=AnyAccelerator,
        ),
    )
    flavour = Flavour(
        name=package,
        trainer_package=trainer_package,
        fabric_package=fabric_package,
        version=version,
        AnyAccelerator=AnyAccelerator,
        AnySingleDeviceStrategy=AnySingleDeviceStrategy,
        AnyDDPStrategy=AnyDDPStrategy,
        AnyMixedPrecision=AnyMixedPrecision,
        AnyFabricSingleDeviceStrategy=AnyFabricSingleDeviceStrategy,
        AnyFabricDDPStrategy=AnyFabricDDPStrategy,
        AnyFabricMixedPrecision=AnyFabricMixedPrecision,
        _sides=sides,
    )
    for built in flavour._classes():  # pickle finds each as `<this module>.LIGHTNING.<name>`
        built.__qualname__ = f"{_ATTRIBUTES[package]}.{built.__name__}"
    return flavour


# ====================================================================== the placement check
def check_placement(strategy: Any, precision: Any, accelerator: Any) -> None:
    """Refuse a strategy or precision plugin that would run off the accelerator's device.

    ``accelerator`` is an ``AnyAccelerator`` of any :class:`Flavour`.

    :raises LightningSetupError: a multi-device strategy other than anyaccel's DDP (Lightning's
        DDP picks its backend and streams for CUDA or gloo; DP, FSDP, DeepSpeed, ModelParallel
        and XLA are not adapted), a strategy rooted on another device type, or mixed precision
        for another device.
    """
    backend = _anyaccel_of(accelerator)
    expected = _device_type(backend)
    parallel = tuple(side.parallel_base for side in _SIDES)
    if isinstance(strategy, parallel) and not isinstance(
        strategy, tuple(side.ddp for side in _SIDES)
    ):
        raise LightningSetupError(
            f"{type(strategy).__name__} is not adapted to anyaccel's {expected!r} accelerator "
            "(Lightning picks its process-group backend, streams or devices for CUDA or gloo). "
            "Use strategy='anyaccel_ddp' (or 'ddp', which becomes it with "
            "accelerator='anyaccel'), or pass AnyDDPStrategy/AnyFabricDDPStrategy."
        )
    root = _root_device(strategy)
    if root is not None and root.type != expected:
        raise LightningSetupError(
            f"{type(strategy).__name__} is rooted on {root}, but anyaccel's accelerator runs on "
            f"{expected!r}: the model would train on {root.type!r}. Leave strategy='auto' or use "
            f"'{_SINGLE_DEVICE}'/'anyaccel_ddp'."
        )
    device = getattr(precision, "device", None)
    mixed = tuple(side.precision_base for side in _SIDES)
    if isinstance(precision, mixed) and device != expected:
        raise LightningSetupError(
            f"{type(precision).__name__} autocasts on {device!r}, but anyaccel's accelerator runs "
            f"on {expected!r}. Pass precision='16-mixed'/'bf16-mixed' (anyaccel builds the plugin) "
            "or AnyMixedPrecision/AnyFabricMixedPrecision."
        )


def _root_device(strategy: Any) -> torch.device | None:
    try:
        root = strategy.root_device
    except (AttributeError, IndexError, TypeError, AssertionError):
        return None  # no devices yet: nothing to compare
    return root if isinstance(root, torch.device) else None


# ====================================================================== the connectors
def _side_of(connector: Any) -> _Side:
    """The package half (Trainer or Fabric) whose connector ``connector`` is."""
    for side in _SIDES:
        if isinstance(connector, side.connector):
            return side
    raise LightningSetupError(  # only a connector class hooked by hand gets here
        f"{type(connector).__name__} is no connector of a Lightning package anyaccel registered "
        f"with ({', '.join(FLAVOURS)})."
    )


def _package_of(value: object) -> Flavour | None:
    """The package whose anyaccel class ``value`` is an instance of (None: no anyaccel class)."""
    for flavour in FLAVOURS.values():
        if isinstance(value, flavour._classes()):
            return flavour
    return None


def _check_config_and_set_final_flags(
    original: Callable[..., Any], connector: Any, *args: Any, **kwargs: Any
) -> Any:
    """Before Lightning reads the flags: another package's anyaccel instance is an error.

    Lightning would only say the object is no valid accelerator/strategy/plugin.
    """
    side = _side_of(connector)
    given = [*args, *kwargs.values()]
    given.extend(
        item for value in list(given) if isinstance(value, (list, tuple)) for item in value
    )
    for value in given:
        owner = _package_of(value)
        if owner is not None and owner.name != side.package:
            ours = FLAVOURS[side.package]
            api = (
                f"{ours.trainer_package}.Trainer"
                if side.trainer
                else f"{ours.fabric_package}.Fabric"
            )
            raise LightningSetupError(
                f"{type(value).__qualname__} is anyaccel's class for the {owner.name!r} package, "
                f"but this is a {api}. Pass anyaccel.integrations.lightning."
                f"{_ATTRIBUTES[side.package]}.{type(value).__name__.split('[')[0]} instead, or "
                f"the name (accelerator='anyaccel', strategy='anyaccel_ddp'...)."
            )
    return original(connector, *args, **kwargs)


def _uses_anyaccel(side: _Side, connector: Any) -> bool:
    chosen = getattr(connector, "accelerator", None)
    if chosen is None:
        chosen = getattr(connector, "_accelerator_flag", None)
    return isinstance(chosen, side.accelerator) or chosen == ACCELERATOR_NAME


def _choose_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel: a single-device strategy on its device, else DDP with its backend."""
    side = _side_of(connector)
    if not _uses_anyaccel(side, connector):
        return original(connector)
    chosen = original(connector)
    if isinstance(chosen, str):
        return _STOCK_DDP.get(chosen, chosen)
    devices = connector._parallel_devices
    return side.single(device=devices[0] if devices else _default_device())


def _init_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel: Lightning's own DDP names become anyaccel's before the registry lookup."""
    if _uses_anyaccel(_side_of(connector), connector) and isinstance(connector._strategy_flag, str):
        connector._strategy_flag = _STOCK_DDP.get(
            connector._strategy_flag, connector._strategy_flag
        )
    return original(connector)


def _check_and_init_precision(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel and 16-mixed/bf16-mixed: the AMP plugin for its device (or an error)."""
    side = _side_of(connector)
    flag = connector._precision_flag if side.trainer else connector._precision_input
    given = connector._precision_plugin_flag if side.trainer else connector._precision_instance
    if (
        not _uses_anyaccel(side, connector)
        or given is not None
        or flag not in ("16-mixed", "bf16-mixed")
    ):
        return original(connector)
    if side.trainer:
        connector._validate_precision_choice()
    return side.precision(flag, accelerator=connector.accelerator.anyaccel())


def _lazy_init_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """After Lightning wires the strategy: refuse anything that runs off the device."""
    result = original(connector)
    if isinstance(connector.accelerator, _side_of(connector).accelerator):
        precision = getattr(connector, "precision_plugin", None) or getattr(
            connector, "precision", None
        )
        check_placement(connector.strategy, precision, connector.accelerator)
    return result


_CONNECTOR_HOOKS: dict[str, Callable[..., Any]] = {
    "_choose_strategy": _choose_strategy,
    "_init_strategy": _init_strategy,
    "_check_and_init_precision": _check_and_init_precision,
    "_lazy_init_strategy": _lazy_init_strategy,
    "_check_config_and_set_final_flags": _check_config_and_set_final_flags,
}


def _check_hookable(connector_class: type) -> None:
    """:raises LightningUnavailableError: the connector lacks a method anyaccel wraps."""
    missing = [
        name for name in _CONNECTOR_HOOKS if not callable(getattr(connector_class, name, None))
    ]
    if missing:
        raise LightningUnavailableError(
            f"{connector_class.__module__}.{connector_class.__qualname__} has no "
            f"{', '.join(missing)}; anyaccel.integrations.lightning supports Lightning "
            f"{SUPPORTED_LIGHTNING} (installed: "
            f"{', '.join(f'{name} {version}' for name, version in _VERSIONS.items())})."
        )


def _hook_connector(connector_class: type) -> None:
    """Wrap the connector's methods with the anyaccel hooks (once; other accelerators untouched)."""
    _check_hookable(connector_class)
    for name, hook in _CONNECTOR_HOOKS.items():
        original = getattr(connector_class, name)
        if getattr(original, "__anyaccel_hook__", None) is hook:
            continue

        setattr(connector_class, name, _wrapped(original, hook))


def _wrapped(original: Callable[..., Any], hook: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` run through ``hook(original, self, ...)``, marked as anyaccel's."""

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return hook(original, self, *args, **kwargs)

    wrapped.__anyaccel_hook__ = hook  # type: ignore[attr-defined]
    return wrapped


# ====================================================================== registration
def _entries() -> list[tuple[Any, str, type, str, dict[str, Any]]]:
    """Every (registry, name, class, kind, init params) anyaccel adds to Lightning."""
    entries: list[tuple[Any, str, type, str, dict[str, Any]]] = []
    for side in _SIDES:
        entries.append((side.accelerators, ACCELERATOR_NAME, side.accelerator, "accelerator", {}))
        entries.append((side.strategies, _SINGLE_DEVICE, side.single, "strategy", {}))
        entries.extend(
            (side.strategies, name, side.ddp, "strategy", {"start_method": start_method})
            for name, start_method in STRATEGY_NAMES.items()
        )
    return entries


def _is_ours(
    registry: Any, name: str, target: type, kind: str, init_params: dict[str, Any]
) -> bool:
    """Whether ``name`` is registered as ``target`` already; an error if it is something else."""
    if name not in registry:
        return False
    entry = registry[name]
    registered = entry.get(kind)
    if registered is target and entry.get("init_params", {}) == init_params:
        return True
    raise LightningSetupError(
        f"Lightning's {kind} registry already has {name!r} ({registered!r}); anyaccel will "
        f"not replace it. Remove that entry (registry.remove({name!r})) first."
    )


def _register_once(registry: Any, name: str, target: type, kind: str, **init_params: Any) -> None:
    """Register ``name`` in ``registry``: a no-op if it is ours already, an error if not."""
    if not _is_ours(registry, name, target, kind, init_params):
        registry.register(name, target, description=f"anyaccel: {name}", **init_params)


def register() -> None:
    """Register the accelerator and strategies in every registry and hook every connector.

    That is the Trainer's and Fabric's registries and connectors of each installed package
    (:data:`FLAVOURS`). Runs once on import of this module; calling it again changes nothing.
    Lightning's own names (``cpu``, ``cuda``, ``mps``, ``tpu``, ``ddp``...) are never
    replaced. Every name and connector is checked before anything is added, so a conflict
    leaves every registry as it was.

    :raises LightningSetupError: another object is registered under one of anyaccel's names.
    """
    for side in _SIDES:
        _check_hookable(side.connector)
    entries = _entries()
    missing = [entry for entry in entries if not _is_ours(*entry)]
    for registry, name, target, _kind, init_params in missing:
        registry.register(name, target, description=f"anyaccel: {name}", **init_params)
    for side in _SIDES:
        _hook_connector(side.connector)


#: Each installed Lightning package's :class:`Flavour`, by package name (a key of :data:`PACKAGES`).
FLAVOURS: dict[str, Flavour] = {name: _build(name, version) for name, version in _VERSIONS.items()}
#: The ``lightning`` package's classes (``lightning.pytorch``, ``lightning.fabric``), or ``None``.
LIGHTNING: Flavour | None = FLAVOURS.get("lightning")
#: The standalone packages' classes (``pytorch_lightning``, ``lightning_fabric``), or ``None``.
PYTORCH_LIGHTNING: Flavour | None = FLAVOURS.get("pytorch_lightning")
_SIDES: tuple[_Side, ...] = tuple(side for flavour in FLAVOURS.values() for side in flavour._sides)

# The module's own names: the `lightning` package's classes, else the standalone packages'.
_MAIN = LIGHTNING or FLAVOURS["pytorch_lightning"]
AnyAccelerator = _MAIN.AnyAccelerator
AnySingleDeviceStrategy = _MAIN.AnySingleDeviceStrategy
AnyDDPStrategy = _MAIN.AnyDDPStrategy
AnyMixedPrecision = _MAIN.AnyMixedPrecision
AnyFabricSingleDeviceStrategy = _MAIN.AnyFabricSingleDeviceStrategy
AnyFabricDDPStrategy = _MAIN.AnyFabricDDPStrategy
AnyFabricMixedPrecision = _MAIN.AnyFabricMixedPrecision

register()
