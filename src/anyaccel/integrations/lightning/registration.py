"""Adding anyaccel's names to Lightning's accelerator and strategy registries (their public API).

A registry is Lightning's documented door for third-party hardware: ``registry.register(name,
cls, description=..., **init_params)``. Here a name is added once, never over another entry,
and a batch is all or nothing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from anyaccel.integrations.lightning.versions import LightningSetupError

__all__ = ["Entry", "is_ours", "register_all", "register_once"]


class Entry(NamedTuple):
    """One name anyaccel adds to one of Lightning's registries."""

    registry: Any  #: the registry (a dict subclass with ``register``)
    name: str  #: the name users pass (``"anyaccel"``, ``"anyaccel_ddp"``...)
    target: type  #: the class it builds
    kind: str  #: ``"accelerator"`` or ``"strategy"`` (the registry entry's key for the class)
    init_params: dict[str, Any]  #: what the registry passes to the class


def is_ours(registry: Any, name: str, target: type, kind: str, init_params: dict[str, Any]) -> bool:
    """Whether ``name`` is registered as ``target`` already; an error if it is something else.

    :raises LightningSetupError: another class (or other init parameters) holds ``name``.
    """
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


def register_once(registry: Any, name: str, target: type, kind: str, **init_params: Any) -> None:
    """Register ``name`` in ``registry``: a no-op if it is ours already, an error if not."""
    if not is_ours(registry, name, target, kind, init_params):
        registry.register(name, target, description=f"anyaccel: {name}", **init_params)


def register_all(entries: list[Entry]) -> None:
    """Register every entry, after checking them all: a conflict leaves every registry as it was.

    :raises LightningSetupError: another object is registered under one of the names.
    """
    missing = [entry for entry in entries if not is_ours(*entry)]
    for registry, name, target, _kind, init_params in missing:
        registry.register(name, target, description=f"anyaccel: {name}", **init_params)
