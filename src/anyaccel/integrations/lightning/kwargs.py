"""The public door: a Trainer or Fabric built from anyaccel's objects, with no private hook.

``Trainer(**trainer_kwargs(devices=2, precision="bf16-mixed"))`` passes Lightning an
``AnyAccelerator``, an anyaccel strategy and, for mixed precision, anyaccel's plugin: the
arguments Lightning documents for third-party hardware. It runs the same whether or not the
connector hooks (:mod:`anyaccel.integrations.lightning.hooks`) could be installed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from anyaccel.integrations.lightning.choices import (
    SINGLE_DEVICE,
    STOCK_DDP,
    STRATEGY_NAMES,
    MixedName,
    checked_precision,
    lightning_mixed,
)
from anyaccel.integrations.lightning.classes import FLAVOURS, check_placement
from anyaccel.integrations.lightning.versions import PACKAGES, LightningSetupError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator as AnyaccelAccelerator

__all__ = ["fabric_kwargs", "trainer_kwargs"]

#: Lightning's short names for the mixed precisions.
_MIXED: dict[int | str, MixedName] = {
    16: "16-mixed",
    "16": "16-mixed",
    "16-mixed": "16-mixed",
    "bf16": "bf16-mixed",
    "bf16-mixed": "bf16-mixed",
}


def trainer_kwargs(
    devices: int | str | list[int] = "auto",
    precision: int | str = "32-true",
    strategy: str | object = "auto",
    *,
    num_nodes: int = 1,
    accelerator: AnyaccelAccelerator | None = None,
    package: str | None = None,
) -> dict[str, Any]:
    """Arguments for ``Trainer(**...)`` that run it on anyaccel's device, through public API only.

    Returns ``accelerator`` (an ``AnyAccelerator``, bound to ``accelerator`` if given), ``devices``,
    ``num_nodes``, ``strategy`` (anyaccel's single-device strategy or DDP) and either
    ``plugins=[AnyMixedPrecision]`` (16-mixed, bf16-mixed) or ``precision`` (Lightning's own).
    ``package`` is ``"lightning"`` or ``"pytorch_lightning"`` (default: ``lightning`` if installed).

    :raises LightningSetupError: a device choice the accelerator cannot give, a precision it
        cannot compute, a strategy name other than ``auto``, ``ddp*``, ``single_device`` and
        anyaccel's, an unknown ``package``, or a strategy object off the device.
    """
    return _kwargs(0, devices, precision, strategy, num_nodes, accelerator, package)


def fabric_kwargs(
    devices: int | str | list[int] = "auto",
    precision: int | str = "32-true",
    strategy: str | object = "auto",
    *,
    num_nodes: int = 1,
    accelerator: AnyaccelAccelerator | None = None,
    package: str | None = None,
) -> dict[str, Any]:
    """Arguments for ``Fabric(**...)``: :func:`trainer_kwargs` with Fabric's classes.

    :raises LightningSetupError: as :func:`trainer_kwargs`.
    """
    return _kwargs(1, devices, precision, strategy, num_nodes, accelerator, package)


def _kwargs(
    half: int,
    devices: int | str | list[int],
    precision: int | str,
    strategy: str | object,
    num_nodes: int,
    accelerator: AnyaccelAccelerator | None,
    package: str | None,
) -> dict[str, Any]:
    """The arguments for the Trainer (``half`` 0) or Fabric (1) of ``package``."""
    if package is None:
        package = "lightning" if "lightning" in FLAVOURS else next(iter(FLAVOURS))
    if package not in FLAVOURS:
        raise LightningSetupError(
            f"package={package!r} is not an installed Lightning package anyaccel supports; "
            f"use one of {sorted(FLAVOURS)} (known: {sorted(PACKAGES)})."
        )
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise LightningSetupError(f"num_nodes={num_nodes!r} is not a node count; pass 1 or more.")
    side = FLAVOURS[package]._sides[half]
    lightning_accelerator = side.accelerator(accelerator)
    backend = lightning_accelerator.anyaccel()
    parallel = lightning_accelerator.get_parallel_devices(devices)
    result: dict[str, Any] = {
        "accelerator": lightning_accelerator,
        "devices": devices,
        "num_nodes": num_nodes,
        "strategy": _strategy(side, strategy, parallel, num_nodes, lightning_accelerator),
    }
    mixed = _MIXED.get(precision) if isinstance(precision, (int, str)) else None
    if mixed is not None:
        mixed = lightning_mixed(mixed, backend, "Fabric" if half else "Trainer")
        checked_precision(mixed, backend)
        result["plugins"] = [side.precision(mixed, accelerator=backend)]
    else:
        result["precision"] = precision
    return result


def _strategy(
    side: Any, strategy: object, parallel: list[Any], num_nodes: int, accelerator: Any
) -> object:
    """anyaccel's strategy object for ``strategy`` (a name, or an instance checked here)."""
    if not isinstance(strategy, str):
        check_placement(strategy, None, accelerator)
        return strategy
    name = STOCK_DDP.get(strategy, strategy)
    if name == "auto":
        single = len(parallel) == 1 and num_nodes == 1
        interactive = hasattr(sys, "ps1") or bool(sys.flags.interactive)
        name = SINGLE_DEVICE if single else "anyaccel_ddp_fork" if interactive else "anyaccel_ddp"
    if name in ("single_device", SINGLE_DEVICE):
        if len(parallel) != 1 or num_nodes != 1:
            raise LightningSetupError(
                f"strategy={strategy!r} runs one device, but devices give {len(parallel)} "
                f"on {num_nodes} node(s). Pass devices=1, or strategy='auto' or 'ddp'."
            )
        return side.single(device=parallel[0])
    if name in STRATEGY_NAMES:  # Lightning sets accelerator and devices (it refuses them here)
        return side.ddp(
            start_method=STRATEGY_NAMES[name],
            process_group_backend=accelerator.anyaccel().communication_backend_name(),
        )
    choices = ["auto", "single_device", *STOCK_DDP, SINGLE_DEVICE, *STRATEGY_NAMES]
    raise LightningSetupError(
        f"strategy={strategy!r} is not one anyaccel builds; use one of {choices} or pass an "
        "anyaccel strategy object (AnySingleDeviceStrategy, AnyDDPStrategy...)."
    )
