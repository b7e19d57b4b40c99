"""Lightning (Trainer and Fabric) on anyaccel's accelerator: ``accelerator="anyaccel"``.

Importing this module registers, in both Lightning's Trainer and Fabric registries:

- the accelerator ``"anyaccel"`` (:class:`AnyAccelerator`), which delegates to
  :func:`anyaccel.get_accelerator` or to an accelerator bound explicitly;
- the strategies ``"anyaccel_single_device"``, ``"anyaccel_ddp"``, ``"anyaccel_ddp_spawn"``
  and ``"anyaccel_ddp_fork"``, whose root device is the accelerator's, whose process-group
  backend is its ``communication_backend_name()`` and which use its streams;

and it teaches Lightning's two connectors to pick those strategies and a mixed-precision
plugin for the accelerator's device whenever the accelerator is anyaccel's. So::

    import anyaccel.integrations.lightning  # noqa: F401  (registers "anyaccel")
    trainer = lightning.Trainer(accelerator="anyaccel", devices=2, precision="bf16-mixed")
    fabric = lightning.Fabric(accelerator="anyaccel", devices=2)

end on the right device, strategy and precision device. A configuration that would land on
another device (a stock DDP strategy, a strategy rooted on the CPU, a precision plugin for
another device) is refused with :class:`LightningSetupError` when the Trainer or Fabric is
built. Supports the ``lightning`` package, versions :data:`SUPPORTED_LIGHTNING`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pickle
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from anyaccel.errors import AcceleratorError, UnsupportedFeatureError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator as AnyaccelAccelerator

__all__ = [
    "ACCELERATOR_NAME",
    "STRATEGY_NAMES",
    "SUPPORTED_LIGHTNING",
    "AnyAccelerator",
    "AnyDDPStrategy",
    "AnyFabricDDPStrategy",
    "AnyFabricMixedPrecision",
    "AnyFabricSingleDeviceStrategy",
    "AnyMixedPrecision",
    "AnySingleDeviceStrategy",
    "LightningSetupError",
    "LightningUnavailableError",
    "check_placement",
    "register",
]

#: The ``lightning`` versions this module is written and tested against (PEP 440).
SUPPORTED_LIGHTNING = ">=2.5,<2.7"

#: The name to pass as ``Trainer(accelerator=...)`` / ``Fabric(accelerator=...)``.
ACCELERATOR_NAME = "anyaccel"

#: Strategy names registered in both registries, and the start method each launches with.
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

_EXTRA_HINT = 'Install it with `pip install "anyaccel[lightning]"`.'


class LightningUnavailableError(AcceleratorError, ImportError):
    """``lightning`` is missing, or its version is outside :data:`SUPPORTED_LIGHTNING`."""


class LightningSetupError(AcceleratorError, ValueError):
    """A Trainer/Fabric configuration that anyaccel's accelerator cannot run as asked."""


def _require_lightning() -> str:
    """The installed ``lightning`` version, checked against :data:`SUPPORTED_LIGHTNING`."""
    if importlib.util.find_spec("lightning") is None:
        hint = ""
        if importlib.util.find_spec("pytorch_lightning") is not None:
            hint = (
                " (pytorch_lightning is installed, but anyaccel supports the unified `lightning`"
                " package only)"
            )
        raise LightningUnavailableError(
            f"anyaccel.integrations.lightning needs the `lightning` package{hint}. {_EXTRA_HINT}"
        )
    from importlib.metadata import PackageNotFoundError, version

    from packaging.specifiers import SpecifierSet

    try:
        found = version("lightning")
    except PackageNotFoundError:
        found = str(getattr(importlib.import_module("lightning"), "__version__", "0"))
    if found not in SpecifierSet(SUPPORTED_LIGHTNING, prereleases=True):
        raise LightningUnavailableError(
            f"lightning {found} is installed, but anyaccel.integrations.lightning supports "
            f"lightning{SUPPORTED_LIGHTNING}. {_EXTRA_HINT[:-1]} (it pins a supported version)."
        )
    return found


LIGHTNING_VERSION = _require_lightning()

import torch  # noqa: E402  (after the check: a missing lightning names the extra first)
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as _FABRIC_ACCELERATORS  # noqa: E402
from lightning.fabric.connector import _Connector as _FabricConnector  # noqa: E402
from lightning.fabric.plugins.precision.amp import (  # noqa: E402
    MixedPrecision as _FabricMixedPrecision,
)
from lightning.fabric.strategies import STRATEGY_REGISTRY as _FABRIC_STRATEGIES  # noqa: E402
from lightning.fabric.strategies.ddp import DDPStrategy as _FabricDDPStrategy  # noqa: E402
from lightning.fabric.strategies.parallel import (  # noqa: E402
    ParallelStrategy as _FabricParallelStrategy,
)
from lightning.fabric.strategies.single_device import (  # noqa: E402
    SingleDeviceStrategy as _FabricSingleDeviceStrategy,
)
from lightning.pytorch.accelerators import AcceleratorRegistry as _TRAINER_ACCELERATORS  # noqa: E402
from lightning.pytorch.accelerators.accelerator import Accelerator as _LightningAccelerator  # noqa: E402
from lightning.pytorch.plugins.precision.amp import MixedPrecision as _MixedPrecision  # noqa: E402
from lightning.pytorch.strategies import StrategyRegistry as _TRAINER_STRATEGIES  # noqa: E402
from lightning.pytorch.strategies.ddp import DDPStrategy as _DDPStrategy  # noqa: E402
from lightning.pytorch.strategies.parallel import ParallelStrategy as _ParallelStrategy  # noqa: E402
from lightning.pytorch.strategies.single_device import (  # noqa: E402
    SingleDeviceStrategy as _SingleDeviceStrategy,
)
from lightning.pytorch.trainer.connectors.accelerator_connector import (  # noqa: E402
    _AcceleratorConnector as _TrainerConnector,
)
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

if TYPE_CHECKING:
    import lightning.pytorch as pl


# ====================================================================== the accelerator
def _default_accelerator() -> AnyaccelAccelerator:
    from anyaccel.detection import get_accelerator

    return get_accelerator()


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


class AnyAccelerator(_LightningAccelerator):
    """Lightning's accelerator for whatever anyaccel selected (one class for Trainer and Fabric).

    ``AnyAccelerator()`` follows :func:`anyaccel.get_accelerator`; ``AnyAccelerator(acc)``
    binds ``acc``. It travels by pickle to spawned processes; a backend that holds its vendor
    module (which does not pickle) is rebuilt there from its class, ``type(acc)()``.
    Lightning asks some questions of the class rather than the instance (``parse_devices``,
    ``is_available``): a bound instance gets a class of its own that answers them for ``acc``.
    """

    _bound: ClassVar[AnyaccelAccelerator | None] = None

    def __new__(cls, accelerator: AnyaccelAccelerator | None = None) -> AnyAccelerator:
        if accelerator is not None and cls._bound is not accelerator:
            cls = _bound_class(accelerator)
        return super().__new__(cls)

    def __init__(self, accelerator: AnyaccelAccelerator | None = None) -> None:
        super().__init__()

    def __reduce__(self) -> tuple[Any, ...]:
        bound = type(self)._bound
        if bound is None:
            return (AnyAccelerator, ())
        try:
            pickle.dumps(bound)
        except (pickle.PicklingError, TypeError, AttributeError):
            # Backends hold their vendor module, which does not pickle: the child builds
            # the same backend class afresh (it finds its own module).
            return (_rebuilt, (type(bound),))
        return (AnyAccelerator, (bound,))

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

        :raises LightningSetupError: a value that is no device choice, or more devices (or a
            higher index) than the accelerator has.
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
                f"Lightning asked AnyAccelerator to set up {device}, but anyaccel's accelerator "
                f"runs on {expected!r}. Use an anyaccel strategy (strategy='auto', "
                f"'{_SINGLE_DEVICE}' or 'anyaccel_ddp') or one whose root device is {expected!r}."
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


@functools.cache
def _bound_class_for(key: int, accelerator: AnyaccelAccelerator) -> type[AnyAccelerator]:
    name = f"AnyAccelerator[{type(accelerator).__name__}]"
    return type(name, (AnyAccelerator,), {"_bound": accelerator, "__module__": __name__})


def _bound_class(accelerator: AnyaccelAccelerator) -> type[AnyAccelerator]:
    return _bound_class_for(id(accelerator), accelerator)


def _rebuilt(backend: type[AnyaccelAccelerator]) -> AnyAccelerator:
    """An ``AnyAccelerator`` bound to a fresh ``backend()`` (unpickling in a spawned child)."""
    return AnyAccelerator(backend())


def _anyaccel_of(lightning_accelerator: object) -> AnyaccelAccelerator:
    if isinstance(lightning_accelerator, AnyAccelerator):
        return lightning_accelerator.anyaccel()
    return _default_accelerator()


# ====================================================================== strategies
def _accelerator_stream(accelerator: AnyaccelAccelerator) -> AbstractContextManager[Any]:
    """A side stream of the accelerator, as Lightning uses ``torch.cuda.stream`` for DDP set-up."""
    return accelerator.stream(accelerator.Stream())


class AnySingleDeviceStrategy(_SingleDeviceStrategy):
    """The Trainer's single-device strategy, rooted on the accelerator's device by default."""

    strategy_name = _SINGLE_DEVICE

    def __init__(self, device: Any = None, **kwargs: Any) -> None:
        super().__init__(device=_default_device() if device is None else device, **kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``anyaccel_single_device``."""
        _register_once(strategy_registry, cls.strategy_name, cls, "strategy")


class AnyDDPStrategy(_DDPStrategy):
    """The Trainer's DDP with anyaccel's process-group backend and streams."""

    strategy_name = "anyaccel_ddp"

    def _get_process_group_backend(self) -> str:
        return (
            self._process_group_backend
            or _anyaccel_of(self.accelerator).communication_backend_name()
        )

    def _setup_model(self, model: torch.nn.Module) -> DistributedDataParallel:
        device_ids = self.determine_ddp_device_ids()
        context = (
            _accelerator_stream(_anyaccel_of(self.accelerator))
            if device_ids is not None
            else nullcontext()
        )
        with context:
            return DistributedDataParallel(module=model, device_ids=device_ids, **self._ddp_kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
        for name, start_method in STRATEGY_NAMES.items():
            _register_once(strategy_registry, name, cls, "strategy", start_method=start_method)


class AnyFabricSingleDeviceStrategy(_FabricSingleDeviceStrategy):
    """Fabric's single-device strategy, rooted on the accelerator's device by default."""

    def __init__(self, device: Any = None, **kwargs: Any) -> None:
        super().__init__(device=_default_device() if device is None else device, **kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``anyaccel_single_device``."""
        _register_once(strategy_registry, _SINGLE_DEVICE, cls, "strategy")


class AnyFabricDDPStrategy(_FabricDDPStrategy):
    """Fabric's DDP with anyaccel's process-group backend and streams."""

    def _get_process_group_backend(self) -> str:
        return (
            self._process_group_backend
            or _anyaccel_of(self.accelerator).communication_backend_name()
        )

    def setup_module(self, module: torch.nn.Module) -> DistributedDataParallel:
        """Wrap ``module`` in DDP, on a side stream of the accelerator (not torch.cuda's)."""
        device_ids = self._determine_ddp_device_ids()
        context = (
            _accelerator_stream(_anyaccel_of(self.accelerator))
            if device_ids is not None
            else nullcontext()
        )
        with context:
            return DistributedDataParallel(module=module, device_ids=device_ids, **self._ddp_kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``anyaccel_ddp``, ``anyaccel_ddp_spawn`` and ``anyaccel_ddp_fork``."""
        for name, start_method in STRATEGY_NAMES.items():
            _register_once(strategy_registry, name, cls, "strategy", start_method=start_method)


def _default_device() -> torch.device:
    accelerator = _default_accelerator()
    return torch.device("cpu") if _is_host(accelerator) else accelerator.device(0)


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
        other = "'bf16-mixed'" if precision == "16-mixed" else "'16-mixed'"
        raise LightningSetupError(
            f"precision={precision!r} is not supported on the {device_type!r} accelerator "
            f"(anyaccel's backend {type(accelerator).__name__} or torch.autocast says no). "
            f"Use precision='32-true', or {other} if the device supports it."
        )
    return device_type


class AnyMixedPrecision(_MixedPrecision):
    """The Trainer's AMP plugin on the accelerator's device (its autocast and GradScaler)."""

    def __init__(
        self,
        precision: _MixedName,
        scaler: torch.amp.GradScaler | None = None,
        accelerator: AnyaccelAccelerator | None = None,
    ) -> None:
        device = _checked_precision(precision, accelerator or _default_accelerator())
        super().__init__(precision, device, scaler)


class AnyFabricMixedPrecision(_FabricMixedPrecision):
    """Fabric's AMP plugin on the accelerator's device (its autocast and GradScaler)."""

    def __init__(
        self,
        precision: _MixedName,
        scaler: torch.amp.GradScaler | None = None,
        accelerator: AnyaccelAccelerator | None = None,
    ) -> None:
        device = _checked_precision(precision, accelerator or _default_accelerator())
        super().__init__(precision, device, scaler)


# ====================================================================== the placement check
def check_placement(strategy: Any, precision: Any, accelerator: AnyAccelerator) -> None:
    """Refuse a strategy or precision plugin that would run off the accelerator's device.

    :raises LightningSetupError: a multi-device strategy other than anyaccel's DDP (Lightning's
        DDP picks its backend and streams for CUDA or gloo; DP, FSDP, DeepSpeed, ModelParallel
        and XLA are not adapted), a strategy rooted on another device type, or mixed precision
        for another device.
    """
    backend = accelerator.anyaccel()
    expected = _device_type(backend)
    if isinstance(strategy, (_ParallelStrategy, _FabricParallelStrategy)) and not isinstance(
        strategy, (AnyDDPStrategy, AnyFabricDDPStrategy)
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
    if isinstance(precision, (_MixedPrecision, _FabricMixedPrecision)) and device != expected:
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
_Method = TypeVar("_Method", bound=Callable[..., Any])


def _uses_anyaccel(connector: Any) -> bool:
    chosen = getattr(connector, "accelerator", None)
    if chosen is None:
        chosen = getattr(connector, "_accelerator_flag", None)
    return isinstance(chosen, AnyAccelerator) or chosen == ACCELERATOR_NAME


def _choose_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel: a single-device strategy on its device, else DDP with its backend."""
    if not _uses_anyaccel(connector):
        return original(connector)
    chosen = original(connector)
    if isinstance(chosen, str):
        return _STOCK_DDP.get(chosen, chosen)
    devices = connector._parallel_devices
    device = devices[0] if devices else _default_device()
    single = (
        AnySingleDeviceStrategy
        if isinstance(connector, _TrainerConnector)
        else AnyFabricSingleDeviceStrategy
    )
    return single(device=device)


def _init_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel: Lightning's own DDP names become anyaccel's before the registry lookup."""
    if _uses_anyaccel(connector) and isinstance(connector._strategy_flag, str):
        connector._strategy_flag = _STOCK_DDP.get(
            connector._strategy_flag, connector._strategy_flag
        )
    return original(connector)


def _check_and_init_precision(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel and 16-mixed/bf16-mixed: the AMP plugin for its device (or an error)."""
    trainer = isinstance(connector, _TrainerConnector)
    flag = connector._precision_flag if trainer else connector._precision_input
    given = connector._precision_plugin_flag if trainer else connector._precision_instance
    if not _uses_anyaccel(connector) or given is not None or flag not in ("16-mixed", "bf16-mixed"):
        return original(connector)
    if trainer:
        connector._validate_precision_choice()
        return AnyMixedPrecision(flag, accelerator=connector.accelerator.anyaccel())
    return AnyFabricMixedPrecision(flag, accelerator=connector.accelerator.anyaccel())


def _lazy_init_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """After Lightning wires the strategy: refuse anything that runs off the device."""
    result = original(connector)
    if isinstance(connector.accelerator, AnyAccelerator):
        precision = getattr(connector, "precision_plugin", None) or getattr(
            connector, "precision", None
        )
        check_placement(connector.strategy, precision, connector.accelerator)
    return result


_CONNECTOR_HOOKS: dict[str, Callable[[Callable[[Any], Any], Any], Any]] = {
    "_choose_strategy": _choose_strategy,
    "_init_strategy": _init_strategy,
    "_check_and_init_precision": _check_and_init_precision,
    "_lazy_init_strategy": _lazy_init_strategy,
}


def _hook_connector(connector_class: type) -> None:
    """Wrap the connector's methods with the anyaccel hooks (once; other accelerators untouched)."""
    missing = [
        name for name in _CONNECTOR_HOOKS if not callable(getattr(connector_class, name, None))
    ]
    if missing:
        raise LightningUnavailableError(
            f"lightning {LIGHTNING_VERSION}: {connector_class.__name__} has no "
            f"{', '.join(missing)}; "
            f"anyaccel.integrations.lightning supports lightning{SUPPORTED_LIGHTNING}."
        )
    for name, hook in _CONNECTOR_HOOKS.items():
        original = getattr(connector_class, name)
        if getattr(original, "__anyaccel_hook__", None) is hook:
            continue

        def wrapped(
            self: Any,
            __original: Callable[[Any], Any] = original,
            __hook: Callable[[Callable[[Any], Any], Any], Any] = hook,
        ) -> Any:
            return __hook(__original, self)

        functools.update_wrapper(wrapped, original)
        wrapped.__anyaccel_hook__ = hook  # type: ignore[attr-defined]
        setattr(connector_class, name, wrapped)


# ====================================================================== registration
def _entries() -> list[tuple[Any, str, type, str, dict[str, Any]]]:
    """Every (registry, name, class, kind, init params) anyaccel adds to Lightning."""
    entries: list[tuple[Any, str, type, str, dict[str, Any]]] = [
        (registry, ACCELERATOR_NAME, AnyAccelerator, "accelerator", {})
        for registry in (_TRAINER_ACCELERATORS, _FABRIC_ACCELERATORS)
    ]
    for registry, single, ddp in (
        (_TRAINER_STRATEGIES, AnySingleDeviceStrategy, AnyDDPStrategy),
        (_FABRIC_STRATEGIES, AnyFabricSingleDeviceStrategy, AnyFabricDDPStrategy),
    ):
        entries.append((registry, _SINGLE_DEVICE, single, "strategy", {}))
        entries.extend(
            (registry, name, ddp, "strategy", {"start_method": start_method})
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
    """Register the accelerator and strategies in both registries and hook both connectors.

    Runs once on import of this module; calling it again changes nothing. Lightning's own
    names (``cpu``, ``cuda``, ``mps``, ``tpu``, ``ddp``...) are never replaced. Every name is
    checked before any is added, so a conflict leaves both registries as they were.

    :raises LightningSetupError: another object is registered under one of anyaccel's names.
    """
    entries = _entries()
    missing = [entry for entry in entries if not _is_ours(*entry)]
    for registry, name, target, _kind, init_params in missing:
        registry.register(name, target, description=f"anyaccel: {name}", **init_params)
    _hook_connector(_TrainerConnector)
    _hook_connector(_FabricConnector)


register()
