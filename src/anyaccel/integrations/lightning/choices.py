"""The choices anyaccel makes for Lightning: devices, processes, mixed precision, DDP names.

Plain functions of an anyaccel accelerator and torch; nothing here imports Lightning, so the
Trainer/Fabric classes (:mod:`.classes`), the public helper (:mod:`.kwargs`) and the connector
hooks (:mod:`.hooks`) share one answer to each question.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

from anyaccel.integrations.lightning.versions import LightningSetupError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator as AnyaccelAccelerator

__all__ = [
    "ACCELERATOR_NAME",
    "SINGLE_DEVICE",
    "STOCK_DDP",
    "STRATEGY_NAMES",
    "MixedName",
    "accelerator_argument",
    "accelerator_or_default",
    "checked_precision",
    "default_accelerator",
    "default_device",
    "device_type",
    "is_host",
    "lightning_mixed",
    "parse_indices",
    "parse_processes",
]

#: The name to pass as ``Trainer(accelerator=...)`` / ``Fabric(accelerator=...)``.
ACCELERATOR_NAME = "anyaccel"

#: Strategy names registered in every strategy registry, and the start method each launches with.
STRATEGY_NAMES: dict[str, str] = {
    "anyaccel_ddp": "popen",
    "anyaccel_ddp_spawn": "spawn",
    "anyaccel_ddp_fork": "fork",
}
#: The single-device strategy's registered name.
SINGLE_DEVICE = "anyaccel_single_device"

#: Lightning's own DDP names, and the anyaccel strategy each becomes on an anyaccel device.
STOCK_DDP: dict[str, str] = {
    "ddp": "anyaccel_ddp",
    "ddp_spawn": "anyaccel_ddp_spawn",
    "ddp_fork": "anyaccel_ddp_fork",
    "ddp_notebook": "anyaccel_ddp_fork",
}


def default_accelerator() -> AnyaccelAccelerator:
    """The accelerator anyaccel selected (:func:`anyaccel.get_accelerator`)."""
    from anyaccel.detection import get_accelerator

    return get_accelerator()


def accelerator_argument(value: object, call: str) -> AnyaccelAccelerator:
    """``value`` if it is an accelerator object; ``InvalidAcceleratorError`` naming it if not."""
    from anyaccel.contract import accelerator_argument as checked

    return checked(value, call)


def accelerator_or_default(value: object, prefix: str) -> AnyaccelAccelerator:
    """A mixed-precision plugin's ``accelerator=``: checked, or the selected one when None."""
    if value is None:
        return default_accelerator()
    return accelerator_argument(value, f"{prefix}MixedPrecision(accelerator=...)")


def device_type(accelerator: AnyaccelAccelerator) -> str:
    """The torch device type the accelerator's tensors live on (``"cpu"``, ``"npu"``...)."""
    return accelerator.device(0).type


def is_host(accelerator: AnyaccelAccelerator) -> bool:
    """CPU: every process uses ``torch.device("cpu")``; ``devices`` counts processes."""
    return device_type(accelerator) == "cpu"


def parse_indices(devices: object, count: int, backend: str) -> list[int]:
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
                return parse_indices(int(text), count, backend)
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


def parse_processes(devices: object) -> int:
    """On the CPU, ``devices`` is a number of processes (as Lightning's own CPU accelerator)."""
    fix = "On the CPU, pass devices=N (N >= 1 processes), or 'auto'/-1 for one."
    if devices in ("auto", -1, "-1"):
        return 1
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise LightningSetupError(f"devices={devices!r} is not a process count. {fix}")
    return devices


#: The mixed precisions anyaccel builds a plugin for.
MixedName = Literal["16-mixed", "bf16-mixed"]


def lightning_mixed(
    precision: MixedName, accelerator: AnyaccelAccelerator, caller: str
) -> MixedName:
    """The mixed precision Lightning itself runs for a ``precision=`` flag on this device.

    Stock Lightning on the CPU turns ``precision="16-mixed"`` into ``"bf16-mixed"`` with a
    warning (fp16 AMP is not supported there); so does ``accelerator="anyaccel"`` on the CPU,
    with the same warning on rank 0. ``caller`` is ``"Trainer"`` or ``"Fabric"``. An explicit
    plugin object is left as given, as Lightning leaves it.
    """
    if precision != "16-mixed" or not is_host(accelerator):
        return precision
    from lightning_utilities.core.rank_zero import rank_zero_warn

    rank_zero_warn(
        f"You passed `{caller}(accelerator='{ACCELERATOR_NAME}', precision='16-mixed')` and "
        "anyaccel's accelerator is the CPU, but AMP with fp16 is not supported on CPU. Using "
        "`precision='bf16-mixed'` instead."
    )
    return "bf16-mixed"


def checked_precision(precision: str, accelerator: AnyaccelAccelerator) -> str:
    """The device type for ``precision`` on ``accelerator``; one it cannot do is an error."""
    kind = device_type(accelerator)
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
        supported = bool(is_autocast_available(kind))
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
            f"precision={precision!r} is not supported on the {kind!r} accelerator "
            f"(anyaccel's backend {type(accelerator).__name__} or torch.autocast says no). "
            f"Use {instead}."
        )
    return kind


def default_device() -> torch.device:
    """The device a strategy is rooted on when none is given: the selected accelerator's first."""
    accelerator = default_accelerator()
    return torch.device("cpu") if is_host(accelerator) else accelerator.device(0)
