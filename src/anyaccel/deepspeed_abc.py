"""DeepSpeed's ``DeepSpeedAccelerator`` ABC learns anyaccel's classes as soon as both exist.

DeepSpeed's ``set_accelerator`` accepts only instances of its own ABC. The contract registers
:class:`~anyaccel.Accelerator` here as a virtual subclass of that ABC without importing
DeepSpeed: with a DeepSpeed already in ``sys.modules`` at once, otherwise through a small
meta-path hook the moment DeepSpeed's ABC module finishes loading. The same hook can hand an
accelerator to DeepSpeed the moment its ``real_accelerator`` module loads, before DeepSpeed's
own import-time detection refuses a ``DS_ACCELERATOR`` it does not know (see
:func:`anyaccel.integrations.deepspeed.install`).

It needs nothing of anyaccel but :mod:`anyaccel.forksafe`, so the contract can import it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from anyaccel.forksafe import ForkSafeLock
from anyaccel.probe import FORCE_ENV

__all__ = [
    "DEEPSPEED_ABC_MODULES",
    "DEEPSPEED_SELECTOR_MODULE",
    "hand_over_when_loaded",
    "register_with_deepspeed",
    "registered_abcs",
]

logger = logging.getLogger("anyaccel.deepspeed")

#: Modules that define DeepSpeed's ``DeepSpeedAccelerator``: the installed package's, and the
#: top-level ``accelerator`` package DeepSpeed's ``set_accelerator`` also accepts (build time).
DEEPSPEED_ABC_MODULES: tuple[str, ...] = (
    "deepspeed.accelerator.abstract_accelerator",
    "accelerator.abstract_accelerator",
)
#: DeepSpeed's module holding ``get_accelerator``/``set_accelerator`` and the chosen object.
DEEPSPEED_SELECTOR_MODULE = "deepspeed.accelerator.real_accelerator"
_WATCHED = frozenset((*DEEPSPEED_ABC_MODULES, DEEPSPEED_SELECTOR_MODULE))

_lock = ForkSafeLock(reentrant=True)  # renewed in a forked child
#: anyaccel classes to register with every DeepSpeed ABC that appears.
_classes: list[type] = []
#: The DeepSpeed ABCs registered with so far (by identity; a reload makes a new one).
_abcs: list[type] = []
#: The accelerator to hand to DeepSpeed when its selector module loads, if any.
_pending: list[object] = []


def _deepspeed_abc(module: ModuleType | None) -> type | None:
    """The ``DeepSpeedAccelerator`` ABC defined by ``module``, if it is that ABC's module."""
    candidate = getattr(module, "DeepSpeedAccelerator", None) if module is not None else None
    if isinstance(candidate, type) and hasattr(candidate, "register"):
        return candidate
    return None


def _register_all() -> None:
    """Register every known anyaccel class with every DeepSpeed ABC loaded now."""
    with _lock:
        for module_name in DEEPSPEED_ABC_MODULES:
            abc_class = _deepspeed_abc(sys.modules.get(module_name))
            if abc_class is None:
                continue
            for cls in _classes:
                if not issubclass(cls, abc_class):
                    abc_class.register(cls)  # type: ignore[attr-defined]
            if not any(known is abc_class for known in _abcs):
                _abcs.append(abc_class)


def _after_load(module: ModuleType) -> None:
    """Register with a new ABC; give a pending accelerator to DeepSpeed's new selector."""
    _register_all()
    if module.__name__ != DEEPSPEED_SELECTOR_MODULE:
        return
    with _lock:
        pending = _pending[:1]
    setter = getattr(module, "set_accelerator", None)
    if pending and callable(setter) and _deepspeed_would_refuse(module):
        try:
            setter(pending[0])
        except Exception as error:  # DeepSpeed's import goes on; install() reports the outcome
            logger.warning("handing the accelerator to DeepSpeed as it loaded failed: %s", error)


def _deepspeed_would_refuse(selector: ModuleType) -> bool:
    """Whether DeepSpeed's own import-time detection will refuse ``DS_ACCELERATOR``.

    Only then is the accelerator handed over early: DeepSpeed binds its op-builder classes
    (whose native modules its optimizers call) while it is imported, from the accelerator it
    has then, and for a name it knows those must stay its own.
    """
    name = os.environ.get(FORCE_ENV)
    known = getattr(selector, "SUPPORTED_ACCELERATOR_LIST", None)
    return name is not None and isinstance(known, list | tuple) and name not in known


def registered_abcs() -> list[type]:
    """The DeepSpeed ``DeepSpeedAccelerator`` classes anyaccel has registered with so far."""
    with _lock:
        return list(_abcs)


class _RegisteringLoader(importlib.abc.Loader):
    """Runs the real loader, then registers anyaccel's classes with the ABC it just defined."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # The module is complete (and in sys.modules) but not yet returned to the importer:
        # act now, so DeepSpeed knows anyaccel's classes before it checks one.
        _after_load(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, is_package...: whatever else the real loader offers.
        return getattr(self._loader, name)


class _DeepSpeedABCWatcher(importlib.abc.MetaPathFinder):
    """A meta-path finder that only answers for DeepSpeed's accelerator modules (a set lookup)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _DeepSpeedABCWatcher):
                continue
            find_spec = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find_spec(fullname, path, target) if find_spec is not None else None
            )
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


def _install_watcher() -> None:
    if not any(isinstance(finder, _DeepSpeedABCWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeepSpeedABCWatcher())


def register_with_deepspeed(cls: type) -> None:
    """Make ``cls`` a virtual subclass of DeepSpeed's ABC, now or when DeepSpeed loads it.

    Imports nothing: a DeepSpeed already imported is registered with at once; otherwise
    an import hook does it when ``deepspeed.accelerator`` is first imported.
    """
    with _lock:
        if cls not in _classes:
            _classes.append(cls)
        _install_watcher()
        _register_all()


def hand_over_when_loaded(accelerator: object | None) -> None:
    """Have DeepSpeed's selector take ``accelerator`` as it loads, if it would refuse the
    ``DS_ACCELERATOR`` name (``None``: stop).

    DeepSpeed picks its accelerator while ``import deepspeed`` runs and refuses a
    ``DS_ACCELERATOR`` it does not know (``musa``, a plugin's name); set before that, its
    cached choice wins. For a name it knows, nothing is done early.
    """
    with _lock:
        _pending[:] = [] if accelerator is None else [accelerator]
        _install_watcher()
