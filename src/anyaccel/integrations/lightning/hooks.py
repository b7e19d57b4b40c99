"""The only place anyaccel touches Lightning's private code: hooks on its two connectors.

With ``accelerator="anyaccel"`` given as a *name*, Lightning's connectors choose the strategy
and the precision plugin themselves, for CUDA or the CPU; no public door lets a registered
accelerator steer that. These hooks do, on each installed package's Trainer connector
(``_AcceleratorConnector``) and Fabric connector (``_Connector``). Every private name they use
is listed in :data:`PRIVATE_NAMES` with its reason and the public path that remains without it.

:func:`install` first checks that each name exists on the installed Lightning, with the
signature the hooks expect; if one is missing it changes nothing, warns once
(:class:`LightningHookWarning`) and the integration keeps to the public path: the accelerator
and strategy names stay registered, a strategy or plugin off the device is still refused when
the Trainer is set up, and ``Trainer(**trainer_kwargs(...))`` / ``Fabric(**fabric_kwargs(...))``
build everything from anyaccel's objects. :func:`unhook` undoes the hooks.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from anyaccel.errors import AnyaccelWarning
from anyaccel.integrations.lightning.choices import (
    ACCELERATOR_NAME,
    STOCK_DDP,
    default_device,
    lightning_mixed,
)
from anyaccel.integrations.lightning.classes import (
    FLAVOURS,
    attribute_of,
    check_placement,
    ddp_backend,
    package_of,
    sides,
    wrapped_in_ddp,
)
from anyaccel.integrations.lightning.versions import PACKAGES, LightningSetupError

__all__ = [
    "PRIVATE_NAMES",
    "LightningHookWarning",
    "PrivateName",
    "connector_of",
    "install",
    "installed",
    "missing_private_names",
    "unhook",
]


class LightningHookWarning(AnyaccelWarning):
    """The installed Lightning lacks a private name the hooks need: they are not installed."""


class PrivateName(NamedTuple):
    """One private name of Lightning that the hooks use, why, and what remains without it."""

    owner: str  #: ``"trainer connector"``, ``"fabric connector"``, ``"trainer DDPStrategy"``...
    name: str  #: the attribute
    use: str  #: ``"wraps"`` (a method), ``"reads"``/``"writes"`` (an attribute), ``"overrides"``
    reason: str  #: what anyaccel needs it for
    fallback: str  #: the public path without it


_STRATEGY = "the strategy: single-device on the accelerator's device, or anyaccel's DDP"
_PRECISION = "16-mixed/bf16-mixed autocast on the accelerator's device (Lightning: cuda or cpu)"
_KWARGS = "trainer_kwargs()/fabric_kwargs() build the strategy and plugin"

#: Every private name of Lightning anyaccel uses. Nothing outside this module uses one.
PRIVATE_NAMES: tuple[PrivateName, ...] = (
    PrivateName("module", "_AcceleratorConnector", "imports",
                "the Trainer's connector (trainer/connectors/accelerator_connector.py)", _KWARGS),
    PrivateName("module", "_Connector", "imports", "Fabric's connector (fabric/connector.py)",
                _KWARGS),
    PrivateName("connector", "_check_config_and_set_final_flags", "wraps",
                "refuse another package's anyaccel object by name",
                "Lightning's own error (no valid accelerator/strategy/plugin)"),
    PrivateName("connector", "_choose_strategy", "wraps", _STRATEGY, _KWARGS),
    PrivateName("connector", "_init_strategy", "wraps",
                "'ddp', 'ddp_spawn'... become anyaccel's DDP",
                _KWARGS + "; or strategy='anyaccel_ddp'"),
    PrivateName("connector", "_check_and_init_precision", "wraps", _PRECISION,
                _KWARGS + "; or plugins=[AnyMixedPrecision(...)]"),
    PrivateName("connector", "_lazy_init_strategy", "wraps",
                "refuse a strategy or plugin off the device when Fabric is built",
                "AnyAccelerator.setup (Trainer) and setup_device refuse it later"),
    PrivateName("trainer connector", "_validate_precision_choice", "calls",
                "Lightning's own precision checks before anyaccel's plugin", _KWARGS),
    PrivateName("connector", "_accelerator_flag", "reads", "is the accelerator anyaccel's",
                _KWARGS),
    PrivateName("connector", "_strategy_flag", "writes", "rename 'ddp'... (see _init_strategy)",
                _KWARGS),
    PrivateName("connector", "_parallel_devices", "reads", "the single device's index", _KWARGS),
    PrivateName("trainer connector", "_precision_flag", "reads", _PRECISION, _KWARGS),
    PrivateName("trainer connector", "_precision_plugin_flag", "reads",
                "a plugin the user gave wins", _KWARGS),
    PrivateName("fabric connector", "_precision_input", "reads", _PRECISION, _KWARGS),
    PrivateName("fabric connector", "_precision_instance", "reads",
                "a plugin the user gave wins", _KWARGS),
    PrivateName("DDPStrategy", "_get_process_group_backend", "overrides",
                "the backend of the accelerator Lightning assigns after the strategy is built",
                "the backend of the accelerator given (or selected) when it is built"),
    PrivateName("trainer DDPStrategy", "_setup_model", "overrides",
                "wrap DDP on the accelerator's streams (Lightning: torch.cuda's)",
                "Lightning's own on the CPU and CUDA; elsewhere a LightningSetupError at set-up "
                "(use Fabric, whose DDP wrap is public)"),
)  # fmt: skip

#: Public attributes of the (private) connector classes the hooks read.
_CONNECTOR_PUBLIC = ("accelerator", "strategy")


def connector_of(side: Any) -> type:
    """The connector class of one package half: the Trainer's or Fabric's (both private)."""
    trainer_package, fabric_package = PACKAGES[side.package]
    if side.trainer:
        module = importlib.import_module(
            f"{trainer_package}.trainer.connectors.accelerator_connector"
        )
        connector: type = module._AcceleratorConnector
    else:
        connector = importlib.import_module(f"{fabric_package}.connector")._Connector
    return connector


def side_of(connector: Any) -> Any:
    """The package half (Trainer or Fabric) whose connector ``connector`` is."""
    for side in sides():
        if isinstance(connector, connector_of(side)):
            return side
    raise LightningSetupError(  # only a connector class hooked by hand gets here
        f"{type(connector).__name__} is no connector of a Lightning package anyaccel registered "
        f"with ({', '.join(FLAVOURS)})."
    )


def _wanted(side: Any) -> list[tuple[type, PrivateName]]:
    """The (class, name) pairs the hooks need for one package half."""
    api = "trainer" if side.trainer else "fabric"
    connector = connector_of(side)
    owners = {"connector": connector, "DDPStrategy": side.ddp_base}
    owners[f"{api} connector"] = connector
    owners[f"{api} DDPStrategy"] = side.ddp_base
    return [(owners[entry.owner], entry) for entry in PRIVATE_NAMES if entry.owner in owners]


def _names_used_by(cls: type) -> set[str]:
    """Every attribute name the functions of ``cls`` (and its bases) load or store."""
    names: set[str] = set()
    for klass in cls.__mro__:
        for value in vars(klass).values():
            code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
            if code is not None:
                names.update(code.co_names)
    return names


#: The parameters each wrapped or overridden method must have (after ``self``).
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "_check_config_and_set_final_flags": ("strategy", "accelerator", "precision", "plugins"),
    "_setup_model": ("model",),
}


def missing_private_names() -> list[str]:
    """What the installed Lightning lacks of :data:`PRIVATE_NAMES` (``Class.name: why``)."""
    missing: list[str] = []
    for side in sides():
        try:
            connector = connector_of(side)
        except (ImportError, AttributeError) as error:  # moved or renamed
            missing.append(f"{side.package} {'Trainer' if side.trainer else 'Fabric'}: {error}")
            continue
        used = _names_used_by(connector)
        for cls, entry in _wanted(side):
            where = f"{cls.__module__}.{cls.__qualname__}.{entry.name}"
            if entry.use in ("reads", "writes"):
                if entry.name not in used:
                    missing.append(f"{where}: no longer set by {cls.__qualname__}")
                continue
            method = inspect.getattr_static(cls, entry.name, None)
            if not callable(method):
                missing.append(f"{where}: no such method")
                continue
            parameters = list(inspect.signature(method).parameters)[1:]
            expected = _SIGNATURES.get(entry.name, ())
            if entry.name in _SIGNATURES and not set(expected) <= set(parameters):
                missing.append(f"{where}: parameters {parameters}, expected {list(expected)}")
            elif entry.name not in _SIGNATURES and parameters:
                missing.append(f"{where}: parameters {parameters}, expected none")
        for name in _CONNECTOR_PUBLIC:
            if name not in used:
                missing.append(f"{connector.__qualname__}.{name}: no longer set")
    return sorted(set(missing))


# ====================================================================== the hooks
def _check_config_and_set_final_flags(
    original: Callable[..., Any], connector: Any, *args: Any, **kwargs: Any
) -> Any:
    """Before Lightning reads the flags: another package's anyaccel instance is an error.

    Lightning would only say the object is no valid accelerator/strategy/plugin.
    """
    side = side_of(connector)
    given = [*args, *kwargs.values()]
    given.extend(
        item for value in list(given) if isinstance(value, (list, tuple)) for item in value
    )
    for value in given:
        owner = package_of(value)
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
                f"{attribute_of(side.package)}.{type(value).__name__.split('[')[0]} instead, or "
                f"the name (accelerator='anyaccel', strategy='anyaccel_ddp'...)."
            )
    return original(connector, *args, **kwargs)


def _uses_anyaccel(side: Any, connector: Any) -> bool:
    chosen = getattr(connector, "accelerator", None)
    if chosen is None:
        chosen = getattr(connector, "_accelerator_flag", None)
    return isinstance(chosen, side.accelerator) or chosen == ACCELERATOR_NAME


def _choose_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel: a single-device strategy on its device, else DDP with its backend."""
    side = side_of(connector)
    if not _uses_anyaccel(side, connector):
        return original(connector)
    chosen = original(connector)
    if isinstance(chosen, str):
        return STOCK_DDP.get(chosen, chosen)
    devices = connector._parallel_devices
    return side.single(device=devices[0] if devices else default_device())


def _init_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel: Lightning's own DDP names become anyaccel's before the registry lookup."""
    if _uses_anyaccel(side_of(connector), connector) and isinstance(connector._strategy_flag, str):
        connector._strategy_flag = STOCK_DDP.get(connector._strategy_flag, connector._strategy_flag)
    return original(connector)


def _check_and_init_precision(original: Callable[[Any], Any], connector: Any) -> Any:
    """For anyaccel and 16-mixed/bf16-mixed: the AMP plugin for its device (or an error)."""
    side = side_of(connector)
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
    accelerator = connector.accelerator.anyaccel()
    caller = "Trainer" if side.trainer else "Fabric"
    return side.precision(lightning_mixed(flag, accelerator, caller), accelerator=accelerator)


def _lazy_init_strategy(original: Callable[[Any], Any], connector: Any) -> Any:
    """After Lightning wires the strategy: refuse anything that runs off the device."""
    result = original(connector)
    if isinstance(connector.accelerator, side_of(connector).accelerator):
        precision = getattr(connector, "precision_plugin", None) or getattr(
            connector, "precision", None
        )
        check_placement(connector.strategy, precision, connector.accelerator)
    return result


_CONNECTOR_HOOKS: dict[str, Callable[..., Any]] = {
    "_check_config_and_set_final_flags": _check_config_and_set_final_flags,
    "_choose_strategy": _choose_strategy,
    "_init_strategy": _init_strategy,
    "_check_and_init_precision": _check_and_init_precision,
    "_lazy_init_strategy": _lazy_init_strategy,
}


def _get_process_group_backend(strategy: Any) -> str:
    """anyaccel's DDP: the backend given, else that of the accelerator Lightning assigned."""
    return ddp_backend(strategy)


def _setup_model(strategy: Any, model: Any) -> Any:
    """anyaccel's Trainer DDP: wrap the model on the accelerator's streams."""
    return wrapped_in_ddp(strategy, model, strategy.determine_ddp_device_ids())


# ====================================================================== install and undo
#: What :func:`install` changed: (class, attribute) and the value to restore (None: delete).
_INSTALLED: dict[tuple[type, str], Any] = {}
_warned = False


def _wrapped(original: Callable[..., Any], hook: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` run through ``hook(original, self, ...)``, marked as anyaccel's."""

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return hook(original, self, *args, **kwargs)

    wrapped.__anyaccel_hook__ = hook  # type: ignore[attr-defined]
    return wrapped


def _set(cls: type, name: str, value: Any) -> None:
    """Set ``cls.name``, remembering what was there (the first time) for :func:`unhook`."""
    key = (cls, name)
    if key not in _INSTALLED:
        _INSTALLED[key] = vars(cls).get(name)
    setattr(cls, name, value)


def installed() -> bool:
    """Whether the hooks are installed now."""
    return bool(_INSTALLED)


def install() -> list[str]:
    """Install the hooks on every built package, or nothing; what was missing (empty: installed).

    Installing twice changes nothing. When the installed Lightning lacks a name of
    :data:`PRIVATE_NAMES` (or its signature changed), nothing is touched and a
    :class:`LightningHookWarning` says what and which public helper to use (once per process).
    """
    global _warned
    if installed():
        return []
    missing = missing_private_names()
    if missing:
        if not _warned:
            _warned = True
            warnings.warn(_fallback_message(missing), LightningHookWarning, stacklevel=2)
        return missing
    for side in sides():
        connector = connector_of(side)
        for name, hook in _CONNECTOR_HOOKS.items():
            _set(connector, name, _wrapped(getattr(connector, name), hook))
        _set(side.ddp, "_get_process_group_backend", _get_process_group_backend)
        if side.trainer:
            _set(side.ddp, "_setup_model", _setup_model)
            _set(side.ddp, "anyaccel_streams_hooked", True)
    return []


def unhook() -> None:
    """Undo :func:`install`: every connector and strategy class as it was before."""
    for (cls, name), before in reversed(list(_INSTALLED.items())):
        if before is None:
            delattr(cls, name)
        else:
            setattr(cls, name, before)
    _INSTALLED.clear()


def _fallback_message(missing: list[str]) -> str:
    versions = ", ".join(f"{name} {flavour.version}" for name, flavour in FLAVOURS.items())
    return (
        f"anyaccel.integrations.lightning: the installed Lightning ({versions}) changed private "
        f"code that anyaccel hooks ({'; '.join(missing)}), so Lightning is left untouched. "
        f"accelerator='anyaccel' stays registered, but Lightning then picks the strategy and "
        f"precision plugin for CUDA or the CPU (anyaccel refuses one off its device when the "
        f"Trainer is set up). Pass anyaccel's objects instead: "
        f"Trainer(**anyaccel.integrations.lightning.trainer_kwargs(devices=..., precision=...)) "
        f"or Fabric(**anyaccel.integrations.lightning.fabric_kwargs(...))."
    )
