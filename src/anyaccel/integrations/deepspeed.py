"""Hand anyaccel's accelerator to DeepSpeed: ``deepspeed.accelerator`` then runs on it.

DeepSpeed's ``set_accelerator`` accepts only instances of its own ``DeepSpeedAccelerator``
ABC. anyaccel registers its :class:`~anyaccel.Accelerator` as a virtual subclass of that ABC
as soon as both classes exist, whichever is imported first, without importing DeepSpeed:
when anyaccel's contract loads it registers with a DeepSpeed already in ``sys.modules``, and
otherwise a small import hook registers at the moment DeepSpeed's ABC module finishes
loading. :func:`install` does the whole hand-over explicitly::

    import anyaccel.integrations.deepspeed as ds_integration
    ds_integration.install()            # before deepspeed.initialize(...)

This module imports neither torch nor DeepSpeed at load time.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from anyaccel.forksafe import ForkSafeLock

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "DEEPSPEED_ABC_MODULES",
    "DeepSpeedNotInstalledError",
    "install",
    "register_with_deepspeed",
    "registered_abcs",
]

#: Modules that define DeepSpeed's ``DeepSpeedAccelerator``: the installed package's, and the
#: top-level ``accelerator`` package DeepSpeed's ``set_accelerator`` also accepts (build time).
DEEPSPEED_ABC_MODULES: tuple[str, ...] = (
    "deepspeed.accelerator.abstract_accelerator",
    "accelerator.abstract_accelerator",
)

_lock = ForkSafeLock(reentrant=True)  # renewed in a forked child
#: anyaccel classes to register with every DeepSpeed ABC that appears.
_classes: list[type] = []
#: The DeepSpeed ABCs registered with so far (by identity; a reload makes a new one).
_abcs: list[type] = []


class DeepSpeedNotInstalledError(ImportError):
    """DeepSpeed is needed for this call but cannot be imported."""


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
        # register now, so the ABC knows anyaccel's classes before DeepSpeed checks one.
        _register_all()

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, is_package...: whatever else the real loader offers.
        return getattr(self._loader, name)


class _DeepSpeedABCWatcher(importlib.abc.MetaPathFinder):
    """A meta-path finder that only answers for DeepSpeed's ABC modules (one set lookup)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in DEEPSPEED_ABC_MODULES:
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


def install(accelerator: Accelerator | None = None) -> Accelerator:
    """Make DeepSpeed use ``accelerator`` (default: ``anyaccel.get_accelerator()``); returns it.

    Imports DeepSpeed, registers the accelerator's class with DeepSpeed's ABC and calls
    ``deepspeed.accelerator.set_accelerator``, whatever was imported first. What DeepSpeed
    binds while it is imported (the op-builder classes in ``deepspeed.ops.op_builder``, whose
    native modules DeepSpeed's optimizers call) stays DeepSpeed's own. Raises
    :class:`DeepSpeedNotInstalledError` when DeepSpeed cannot be imported, and
    ``anyaccel.InvalidAcceleratorError`` for an object that is no accelerator.
    """
    from anyaccel.detection import get_accelerator, set_accelerator

    if accelerator is None:
        accelerator = get_accelerator()
    else:
        set_accelerator(accelerator)  # validates it (and adopts duck-typed accelerators)
    register_with_deepspeed(type(accelerator))
    try:
        ds_accelerator = importlib.import_module("deepspeed.accelerator")
    except ImportError as error:
        raise DeepSpeedNotInstalledError(
            f"anyaccel.integrations.deepspeed.install() needs DeepSpeed, which cannot be "
            f"imported here ({error}). Install it with `DS_BUILD_OPS=0 pip install deepspeed`."
        ) from error
    _register_all()
    ds_accelerator.set_accelerator(accelerator)
    return accelerator


# =============================================================================================
# DeepSpeed's ShareMemCommBuilder interface (moved here from anyaccel.distributed.allreduce).
# The compiled shared-memory module (anyaccel.ops.cpu.shm_comm) calls these two by name:
# ``initialize(world_size, rank)`` and, when it is imported, the op registration. They import
# anyaccel.distributed (and torch) only when called. This section needs only ``Any`` and
# ``from __future__ import annotations`` from the top of the module.
# =============================================================================================
_shm_library: Any = None


def shm_comm_initialize(world_size: int, rank: int) -> None:
    """DeepSpeed's ``initialize``: set the default group's shared memory up now, on every rank.

    Raises ``anyaccel.distributed.DistributedSetupError`` when torch.distributed is not
    initialised or ``world_size``/``rank`` differ from the default process group's.
    """
    import torch.distributed as dist

    from anyaccel.distributed.errors import DistributedSetupError
    from anyaccel.distributed.shm.group import group_state, resolve_group

    if not dist.is_initialized():
        raise DistributedSetupError(
            "initialize(world_size, rank) needs torch.distributed initialised first"
        )
    live = (dist.get_world_size(), dist.get_rank())
    if live != (world_size, rank):
        raise DistributedSetupError(
            f"initialize({world_size}, {rank}) does not match the process group (world size "
            f"{live[0]}, rank {live[1]})"
        )
    if world_size > 1:
        group_state(resolve_group(None))


def _inference_all_reduce_(tensor: Any) -> Any:
    from anyaccel.distributed.shm.collectives import all_reduce

    all_reduce(tensor)
    return tensor


def _inference_all_reduce(tensor: Any) -> Any:
    from anyaccel.distributed.shm.collectives import all_reduce

    result = tensor.clone()
    all_reduce(result)
    return result


def register_shm_comm_ops() -> None:
    """Define ``torch.ops.deepspeed.inference_all_reduce(_)`` unless something already did.

    The ops run ``anyaccel.distributed.all_reduce`` (shared memory on one node); DeepSpeed's
    own module, when loaded, keeps its ops.
    """
    global _shm_library
    import torch

    if _shm_library is not None:
        return
    namespace = getattr(torch.ops, "deepspeed", None)
    if namespace is not None and hasattr(namespace, "inference_all_reduce_"):
        return  # DeepSpeed's own module is loaded: leave its ops alone
    library_class: Any = torch.library.Library  # untyped in torch
    library = library_class("deepspeed", "FRAGMENT")
    library.define("inference_all_reduce(Tensor self) -> Tensor")
    library.define("inference_all_reduce_(Tensor(a!) self) -> Tensor(a!)")
    library.impl("inference_all_reduce", _inference_all_reduce, "CPU")
    library.impl("inference_all_reduce_", _inference_all_reduce_, "CPU")
    library.impl("inference_all_reduce", torch.empty_like, "Meta")
    library.impl("inference_all_reduce_", lambda tensor: tensor, "Meta")
    _shm_library = library


__all__ += ["register_shm_comm_ops", "shm_comm_initialize"]
