"""``AnyAccelerator``: Lightning's accelerator for anyaccel's, built on each package's base.

One class answers for the Trainer and Fabric of a package. ``AnyAccelerator()`` follows
:func:`anyaccel.get_accelerator`; ``AnyAccelerator(acc)`` binds ``acc``. Lightning asks some
questions of the class rather than the instance (``parse_devices``, ``is_available``), so a
bound instance gets a class of its own that answers them for ``acc``.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from anyaccel.errors import UnsupportedFeatureError
from anyaccel.integrations.lightning.choices import (
    ACCELERATOR_NAME,
    SINGLE_DEVICE,
    accelerator_argument,
    default_accelerator,
    device_type,
    is_host,
    parse_indices,
    parse_processes,
)
from anyaccel.integrations.lightning.registration import register_once
from anyaccel.integrations.lightning.versions import LightningSetupError

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from anyaccel.abstract import Accelerator as AnyaccelAccelerator

__all__ = ["ACCELERATORS", "accelerator_class", "anyaccel_of"]

#: Each package's ``AnyAccelerator``, by package name: filled by :func:`accelerator_class`.
ACCELERATORS: dict[str, type[Any]] = {}


def anyaccel_of(lightning_accelerator: object) -> AnyaccelAccelerator:
    """The anyaccel accelerator behind any package's ``AnyAccelerator`` (else the selected one)."""
    classes: tuple[type[Any], ...] = tuple(ACCELERATORS.values())
    if isinstance(lightning_accelerator, classes):
        backend: AnyaccelAccelerator = lightning_accelerator.anyaccel()
        return backend
    return default_accelerator()


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
    accelerator_class = ACCELERATORS[package]
    if backend is not None:
        return accelerator_class(backend())
    return accelerator_class(bound)


def accelerator_class(
    package: str, base: type, check_placement: Callable[[Any, Any, Any], None]
) -> type[Any]:
    """``package``'s ``AnyAccelerator`` on its ``Accelerator`` ``base``.

    ``check_placement(strategy, precision, accelerator)`` refuses, when the Trainer is set up,
    a strategy or plugin that would run off the device.
    """
    if TYPE_CHECKING:
        from lightning.pytorch.accelerators.accelerator import Accelerator
    else:
        Accelerator = base

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
                accelerator = accelerator_argument(accelerator, "AnyAccelerator()")
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
            return cls._bound if cls._bound is not None else default_accelerator()

        @classmethod
        def device_type(cls) -> str:
            """The torch device type of that accelerator (``"cpu"``, ``"npu"``, ``"mlu"``...)."""
            return device_type(cls.anyaccel())

        # ------------------------------------------------------------ Lightning's class-level API
        @classmethod
        def name(cls) -> str:
            """``"anyaccel"``: the registry name, whatever backend runs underneath."""
            return ACCELERATOR_NAME

        @classmethod
        def is_available(cls) -> bool:
            """Whether the accelerator can run here (the CPU always can)."""
            accelerator = cls.anyaccel()
            return is_host(accelerator) or bool(accelerator.is_available())

        @classmethod
        def auto_device_count(cls) -> int:
            """Every visible device; one process on the CPU (as Lightning's CPU accelerator)."""
            accelerator = cls.anyaccel()
            return 1 if is_host(accelerator) else int(accelerator.device_count())

        @classmethod
        def parse_devices(cls, devices: Any) -> int | list[int]:
            """``devices`` as indices (validated against the device count); a count on the CPU.

            :raises LightningSetupError: a value that is no device choice, or more devices (or
                a higher index) than the accelerator has.
            """
            accelerator = cls.anyaccel()
            if is_host(accelerator):
                return parse_processes(devices)
            if (
                isinstance(devices, list)
                and devices
                and all(isinstance(d, torch.device) for d in devices)
            ):
                devices = [int(d.index or 0) for d in devices]
            count = int(accelerator.device_count())
            return parse_indices(devices, count, device_type(accelerator))

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
            expected = device_type(accelerator)
            device = torch.device(device)
            if device.type != expected:
                raise LightningSetupError(
                    f"Lightning asked AnyAccelerator to set up {device}, but anyaccel's "
                    f"accelerator runs on {expected!r}. Use an anyaccel strategy (strategy="
                    f"'auto', '{SINGLE_DEVICE}' or 'anyaccel_ddp') or one whose root device "
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
            if not is_host(accelerator):
                accelerator.empty_cache()

        @classmethod
        def register_accelerators(cls, accelerator_registry: Any) -> None:
            """Add ``"anyaccel"`` to ``accelerator_registry`` (once; never over another entry)."""
            register_once(accelerator_registry, ACCELERATOR_NAME, AnyAccelerator, "accelerator")

    ACCELERATORS[package] = AnyAccelerator
    return AnyAccelerator
