"""Lightning (Trainer and Fabric) on anyaccel's accelerator.

Two ways in, for the unified ``lightning`` package and the standalone ``pytorch_lightning`` +
``lightning_fabric`` alike (:data:`LIGHTNING`, :data:`PYTORCH_LIGHTNING`: their classes):

- **Objects** (Lightning's public door; no private hook)::

      from anyaccel.integrations.lightning import trainer_kwargs, fabric_kwargs
      trainer = lightning.Trainer(**trainer_kwargs(devices=2, precision="bf16-mixed"))
      fabric = lightning.Fabric(**fabric_kwargs(devices=2))

- **The name** ``accelerator="anyaccel"``: importing this module registers ``"anyaccel"`` and
  the strategies ``"anyaccel_single_device"``, ``"anyaccel_ddp"``, ``"anyaccel_ddp_spawn"``,
  ``"anyaccel_ddp_fork"`` in every registry (public), and installs the connector hooks
  (:mod:`.hooks`, the only user of Lightning's private code) so that ``strategy="auto"``,
  ``"ddp"`` and ``precision="bf16-mixed"`` land on the accelerator's device. When the installed
  Lightning lacks a private name they need, the hooks are not installed, a
  :class:`~.hooks.LightningHookWarning` says so, and the objects above keep working.

A configuration that would train off the device is refused with :class:`LightningSetupError`.
Supported versions: :data:`SUPPORTED_LIGHTNING` (a lower bound only).
"""

from __future__ import annotations

from anyaccel.integrations.lightning.versions import (
    PACKAGES,
    SUPPORTED_LIGHTNING,
    LightningSetupError,
    LightningUnavailableError,
    require_lightning,
)

_VERSIONS = require_lightning()  # before torch: a missing lightning names the extra first

from anyaccel.integrations.lightning import hooks  # noqa: E402
from anyaccel.integrations.lightning.choices import (  # noqa: E402
    ACCELERATOR_NAME,
    STRATEGY_NAMES,
)
from anyaccel.integrations.lightning.classes import (  # noqa: E402
    FLAVOURS,
    Flavour,
    build_flavours,
    check_placement,
    registry_entries,
)
from anyaccel.integrations.lightning.hooks import LightningHookWarning, unhook  # noqa: E402
from anyaccel.integrations.lightning.kwargs import fabric_kwargs, trainer_kwargs  # noqa: E402
from anyaccel.integrations.lightning.registration import register_all  # noqa: E402

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
    "LightningHookWarning",
    "LightningSetupError",
    "LightningUnavailableError",
    "check_placement",
    "fabric_kwargs",
    "register",
    "trainer_kwargs",
    "unhook",
]


def register() -> list[str]:
    """Register anyaccel's names in every registry and install the connector hooks.

    That is the Trainer's and Fabric's registries of each installed package (:data:`FLAVOURS`).
    Runs once on import of this module; calling it again changes nothing (after
    :func:`unhook`, it installs the hooks again). Lightning's own names (``cpu``, ``cuda``,
    ``ddp``...) are never replaced; every name is checked before anything is added. Returns
    what the installed Lightning lacks for the hooks (empty: they are installed; else a
    :class:`LightningHookWarning` was issued once and Lightning's classes are untouched).

    :raises LightningSetupError: another object is registered under one of anyaccel's names.
    """
    register_all(registry_entries())
    return hooks.install()


build_flavours(_VERSIONS)
#: The ``lightning`` package's classes (``lightning.pytorch``, ``lightning.fabric``), or ``None``.
LIGHTNING: Flavour | None = FLAVOURS.get("lightning")
#: The standalone packages' classes (``pytorch_lightning``, ``lightning_fabric``), or ``None``.
PYTORCH_LIGHTNING: Flavour | None = FLAVOURS.get("pytorch_lightning")

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
