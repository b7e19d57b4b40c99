"""The classes anyaccel adds to each Lightning package, built on that package's own bases.

Lightning ships as two sets of packages with separate classes and registries: the unified
``lightning`` (``lightning.pytorch``, ``lightning.fabric``) and the standalone
``pytorch_lightning`` + ``lightning_fabric``. :func:`build_flavours` builds, for each installed
one, an accelerator, single-device and DDP strategies and a mixed-precision plugin for the
Trainer and for Fabric (a :class:`Flavour`), all from the definitions below, and keeps them in
:data:`FLAVOURS`. Everything here uses Lightning's public API (constructors, public methods
and properties, registries); the few private names the integration still needs live in
:mod:`anyaccel.integrations.lightning.hooks`.
"""

from __future__ import annotations

import importlib
import inspect
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch.nn.parallel import DistributedDataParallel

from anyaccel.distributed.exit_grace import pause_for_backend
from anyaccel.integrations.lightning.accelerator import accelerator_class, anyaccel_of
from anyaccel.integrations.lightning.choices import (
    ACCELERATOR_NAME,
    SINGLE_DEVICE,
    STRATEGY_NAMES,
    MixedName,
    accelerator_or_default,
    checked_precision,
    default_device,
    device_type,
)
from anyaccel.integrations.lightning.registration import Entry, register_once
from anyaccel.integrations.lightning.versions import PACKAGES, LightningSetupError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator as AnyaccelAccelerator

__all__ = ["FLAVOURS", "Flavour", "build_flavours", "check_placement", "sides"]

#: The package that pickle finds every built class in, as ``<FACE>.LIGHTNING.<name>``.
FACE = "anyaccel.integrations.lightning"


# ====================================================================== the accelerator
def sides() -> tuple[_Side, ...]:
    """The Trainer and Fabric halves of every built package."""
    return tuple(side for flavour in FLAVOURS.values() for side in flavour._sides)


def _ddp_stream(accelerator: AnyaccelAccelerator, index: int) -> AbstractContextManager[Any]:
    """The accelerator's stream to build DDP on: the device's default one, a side one in capture.

    As Lightning's own DDP set-up does for ``torch.cuda`` after 2.6.6 (its PR #21746): built on
    a side stream, DDP keeps AccumulateGrad nodes on another stream than the backward passes
    (torch 2.10+ warns, and syncs). Only a whole-network graph capture needs a side stream; the
    mismatch is meant there, and torch's warning about it is turned off (as Lightning does).
    """
    if not accelerator.is_current_stream_capturing():
        return accelerator.stream(accelerator.default_stream(index))
    quiet = getattr(torch.autograd.graph, "set_warn_on_accumulate_grad_stream_mismatch", None)
    if quiet is not None:  # torch 2.10 and later have the warning
        quiet(False)
    return accelerator.stream(accelerator.Stream())


def ddp_backend(strategy: Any) -> str:
    """A DDP strategy's process-group backend: the one it was given, else its accelerator's.

    A CPU backend gets the pause at exit (torch's gloo exit abort: see
    :mod:`anyaccel.distributed.exit_grace`).
    """
    given: str | None = strategy.anyaccel_backend_given
    backend = given or anyaccel_of(strategy.accelerator).communication_backend_name()
    pause_for_backend(backend)
    return backend


def wrapped_in_ddp(
    strategy: Any, module: torch.nn.Module, device_ids: list[int] | None
) -> DistributedDataParallel:
    """``module`` in DDP, built on the accelerator's streams (not torch.cuda's): see
    :func:`_ddp_stream`; on the CPU (no ``device_ids``) on none.
    """
    context = (
        _ddp_stream(anyaccel_of(strategy.accelerator), device_ids[0])
        if device_ids
        else nullcontext()
    )
    with context:
        return DistributedDataParallel(
            module=module, device_ids=device_ids, **strategy.anyaccel_ddp_kwargs
        )


def _ddp_kwargs(base: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What of ``kwargs`` goes to torch's DDP: what ``base.__init__`` does not name."""
    named = inspect.signature(base).parameters
    return {key: value for key, value in kwargs.items() if key not in named}


def _device_ids(strategy: Any) -> list[int] | None:
    """DDP's ``device_ids``: none on the CPU, else the root device's index."""
    root: torch.device = strategy.root_device
    return None if root.type == "cpu" else [0 if root.index is None else root.index]


def _initial_backend(given: str | None, kwargs: dict[str, Any]) -> str:
    """The backend a DDP strategy starts with: the one given, else its accelerator's.

    That is the public ``process_group_backend=`` argument; where the connector hooks are
    installed, the accelerator Lightning assigns later decides instead (:func:`ddp_backend`).
    """
    return given or anyaccel_of(kwargs.get("accelerator")).communication_backend_name()


def _pause_at_exit_on_cpu(strategy: Any) -> None:
    """After set-up: CPU ranks pause at exit (see :mod:`anyaccel.distributed.exit_grace`)."""
    pause_for_backend(strategy.process_group_backend or "")


def _refuse_cuda_streams_off_cuda(strategy: Any, hooked: bool) -> None:
    """Without the hooks, the Trainer's DDP may only run where ``torch.cuda`` streams work."""
    kind = device_type(anyaccel_of(strategy.accelerator))
    if not hooked and kind not in ("cpu", "cuda"):
        raise LightningSetupError(
            f"The Trainer's DDP would wrap the model on torch.cuda streams, not the {kind!r} "
            "accelerator's: anyaccel's hooks are not installed (the installed Lightning changed "
            "the private code they need, see the LightningHookWarning at import, or unhook() "
            "was called). Use Fabric "
            "(Fabric(**fabric_kwargs(devices=...))), which needs no hook, or one device."
        )


def _register_ddp(cls: type, strategy_registry: Any) -> None:
    """Register ``cls`` as ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
    for name, start_method in STRATEGY_NAMES.items():
        register_once(strategy_registry, name, cls, "strategy", start_method=start_method)


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
    accelerators: Any  # the accelerator registry
    strategies: Any  # the strategy registry
    accelerator: type
    single: type
    ddp: type
    precision: type
    parallel_base: type  # the package's ParallelStrategy
    ddp_base: type  # the package's DDPStrategy
    precision_base: type  # the package's MixedPrecision


#: The attribute of this module that holds each package's :class:`Flavour`.
_ATTRIBUTES = {"lightning": "LIGHTNING", "pytorch_lightning": "PYTORCH_LIGHTNING"}


def build(package: str, version: str) -> Flavour:
    """Every class anyaccel adds to ``package`` (a key of :data:`PACKAGES`), on its classes."""
    trainer_package, fabric_package = PACKAGES[package]

    def load(base: str, module: str, attribute: str) -> Any:
        return getattr(importlib.import_module(f"{base}.{module}"), attribute)

    if TYPE_CHECKING:  # every package has the same classes: check against `lightning`'s
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
    else:
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

    AnyAccelerator = accelerator_class(package, Accelerator, check_placement)

    class AnySingleDeviceStrategy(SingleDeviceStrategy):
        """The Trainer's single-device strategy, rooted on the accelerator's device by default."""

        strategy_name = SINGLE_DEVICE

        def __init__(self, device: Any = None, **kwargs: Any) -> None:
            super().__init__(device=default_device() if device is None else device, **kwargs)

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_single_device``."""
            register_once(strategy_registry, cls.strategy_name, cls, "strategy")

    class AnyDDPStrategy(DDPStrategy):
        """The Trainer's DDP with anyaccel's process-group backend and streams."""

        strategy_name = "anyaccel_ddp"
        #: Set by the hooks while they wrap the model on the accelerator's streams.
        anyaccel_streams_hooked: ClassVar[bool] = False

        def __init__(self, *, process_group_backend: str | None = None, **kwargs: Any) -> None:
            self.anyaccel_backend_given = process_group_backend
            self.anyaccel_ddp_kwargs = _ddp_kwargs(DDPStrategy, kwargs)
            backend = _initial_backend(process_group_backend, kwargs)
            super().__init__(process_group_backend=backend, **kwargs)

        def setup_environment(self) -> None:
            """Lightning's set-up; then a CPU backend gets the pause at exit.

            :raises LightningSetupError: the device is neither the CPU nor CUDA and the hooks
                are not installed: Lightning would wrap the model on ``torch.cuda`` streams.
            """
            _refuse_cuda_streams_off_cuda(self, type(self).anyaccel_streams_hooked)
            super().setup_environment()
            _pause_at_exit_on_cpu(self)

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
            _register_ddp(cls, strategy_registry)

    class AnyFabricSingleDeviceStrategy(FabricSingleDeviceStrategy):
        """Fabric's single-device strategy, rooted on the accelerator's device by default."""

        def __init__(self, device: Any = None, **kwargs: Any) -> None:
            super().__init__(device=default_device() if device is None else device, **kwargs)

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_single_device``."""
            register_once(strategy_registry, SINGLE_DEVICE, cls, "strategy")

    class AnyFabricDDPStrategy(FabricDDPStrategy):
        """Fabric's DDP with anyaccel's process-group backend and streams."""

        def __init__(self, *, process_group_backend: str | None = None, **kwargs: Any) -> None:
            self.anyaccel_backend_given = process_group_backend
            self.anyaccel_ddp_kwargs = _ddp_kwargs(FabricDDPStrategy, kwargs)
            backend = _initial_backend(process_group_backend, kwargs)
            super().__init__(process_group_backend=backend, **kwargs)

        def setup_environment(self) -> None:
            """Lightning's set-up; then a CPU backend gets the pause at exit."""
            super().setup_environment()
            _pause_at_exit_on_cpu(self)

        def setup_module(self, module: torch.nn.Module) -> DistributedDataParallel:
            """Wrap ``module`` in DDP on the accelerator's streams (not torch.cuda's)."""
            return wrapped_in_ddp(self, module, _device_ids(self))

        @classmethod
        def register_strategies(cls, strategy_registry: Any) -> None:
            """Register ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
            _register_ddp(cls, strategy_registry)

    class AnyMixedPrecision(MixedPrecision):
        """The Trainer's AMP plugin on the accelerator's device (its autocast and GradScaler)."""

        def __init__(
            self,
            precision: MixedName,
            scaler: torch.amp.GradScaler | None = None,
            accelerator: AnyaccelAccelerator | None = None,
        ) -> None:
            """Raises :class:`LightningSetupError` for a precision the device cannot do, and
            ``anyaccel.InvalidAcceleratorError`` for an ``accelerator`` that is no accelerator.
            """
            device = checked_precision(precision, accelerator_or_default(accelerator, "Any"))
            super().__init__(precision, device, scaler)

    class AnyFabricMixedPrecision(FabricMixedPrecision):
        """Fabric's AMP plugin on the accelerator's device (its autocast and GradScaler)."""

        def __init__(
            self,
            precision: MixedName,
            scaler: torch.amp.GradScaler | None = None,
            accelerator: AnyaccelAccelerator | None = None,
        ) -> None:
            """Raises :class:`LightningSetupError` for a precision the device cannot do, and
            ``anyaccel.InvalidAcceleratorError`` for an ``accelerator`` that is no accelerator.
            """
            accelerator = accelerator_or_default(accelerator, "AnyFabric")
            device = checked_precision(precision, accelerator)
            super().__init__(precision, device, scaler)

    halves = (
        _Side(
            trainer=True,
            accelerators=load(trainer_package, "accelerators", "AcceleratorRegistry"),
            strategies=load(trainer_package, "strategies", "StrategyRegistry"),
            single=AnySingleDeviceStrategy,
            ddp=AnyDDPStrategy,
            precision=AnyMixedPrecision,
            parallel_base=ParallelStrategy,
            ddp_base=DDPStrategy,
            precision_base=MixedPrecision,
            package=package,
            accelerator=AnyAccelerator,
        ),
        _Side(
            trainer=False,
            accelerators=load(fabric_package, "accelerators", "ACCELERATOR_REGISTRY"),
            strategies=load(fabric_package, "strategies", "STRATEGY_REGISTRY"),
            single=AnyFabricSingleDeviceStrategy,
            ddp=AnyFabricDDPStrategy,
            precision=AnyFabricMixedPrecision,
            parallel_base=FabricParallelStrategy,
            ddp_base=FabricDDPStrategy,
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
        _sides=halves,
    )
    for built in flavour._classes():  # pickle finds each as `<FACE>.LIGHTNING.<name>`
        built.__module__ = FACE
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
    backend = anyaccel_of(accelerator)
    expected = device_type(backend)
    parallel = tuple(side.parallel_base for side in sides())
    if isinstance(strategy, parallel) and not isinstance(
        strategy, tuple(side.ddp for side in sides())
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
            f"'{SINGLE_DEVICE}'/'anyaccel_ddp'."
        )
    device = getattr(precision, "device", None)
    mixed = tuple(side.precision_base for side in sides())
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


# ====================================================================== the built packages
#: Each installed Lightning package's :class:`Flavour`, by package name (a key of
#: :data:`~anyaccel.integrations.lightning.versions.PACKAGES`); filled by :func:`build_flavours`.
FLAVOURS: dict[str, Flavour] = {}


def build_flavours(versions: dict[str, str]) -> dict[str, Flavour]:
    """Build (once) the classes of each package in ``versions`` (package name: its version)."""
    for package, version in versions.items():
        if package not in FLAVOURS:
            FLAVOURS[package] = build(package, version)
    return FLAVOURS


def package_of(value: object) -> Flavour | None:
    """The package whose anyaccel class ``value`` is an instance of (None: no anyaccel class)."""
    for flavour in FLAVOURS.values():
        if isinstance(value, flavour._classes()):
            return flavour
    return None


def attribute_of(package: str) -> str:
    """The face's attribute that holds ``package``'s :class:`Flavour` (``LIGHTNING``...)."""
    return _ATTRIBUTES[package]


def registry_entries() -> list[Entry]:
    """Every name anyaccel adds to Lightning's registries, for every built package."""
    entries: list[Entry] = []
    for side in sides():
        entries.append(
            Entry(side.accelerators, ACCELERATOR_NAME, side.accelerator, "accelerator", {})
        )
        entries.append(Entry(side.strategies, SINGLE_DEVICE, side.single, "strategy", {}))
        entries.extend(
            Entry(side.strategies, name, side.ddp, "strategy", {"start_method": start_method})
            for name, start_method in STRATEGY_NAMES.items()
        )
    return entries
