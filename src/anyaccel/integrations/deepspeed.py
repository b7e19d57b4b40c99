"""Hand anyaccel's accelerator to DeepSpeed: ``deepspeed.accelerator`` then runs on it.

DeepSpeed's ``set_accelerator`` accepts only instances of its own ``DeepSpeedAccelerator``
ABC; :mod:`anyaccel.deepspeed_abc` registers anyaccel's classes with it as soon as both
exist, without importing DeepSpeed. :func:`install` does the whole hand-over explicitly::

    import anyaccel.integrations.deepspeed as ds_integration
    ds_integration.install()            # before deepspeed.initialize(...)

Called before ``import deepspeed``, it also covers backends DeepSpeed's own list lacks
(``DS_ACCELERATOR=musa``, plugins): DeepSpeed takes the accelerator before its import-time
detection runs. This module imports neither torch nor DeepSpeed at load time.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from anyaccel.deepspeed_abc import (
    DEEPSPEED_ABC_MODULES,
    DEEPSPEED_SELECTOR_MODULE,
    hand_over_when_loaded,
    register_with_deepspeed,
    registered_abcs,
)
from anyaccel.errors import AcceleratorError, AnyaccelError
from anyaccel.probe import FORCE_ENV

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "DEEPSPEED_ABC_MODULES",
    "SHM_VECTOR_KERNEL_LEVEL",
    "DeepSpeedHandOverError",
    "DeepSpeedNotInstalledError",
    "install",
    "register_shm_comm_ops",
    "register_with_deepspeed",
    "registered_abcs",
    "shm_comm_initialize",
    "shm_comm_module",
    "shm_vector_kernel_level",
]


class DeepSpeedNotInstalledError(AnyaccelError, ImportError):
    """DeepSpeed is needed for this call but cannot be imported."""


class DeepSpeedHandOverError(AcceleratorError):
    """DeepSpeed could not be made to use anyaccel's accelerator; the message says why."""


def install(accelerator: Accelerator | None = None) -> Accelerator:
    """Make DeepSpeed use ``accelerator`` (default: ``anyaccel.get_accelerator()``); returns it.

    Imports DeepSpeed, registers the accelerator's class with DeepSpeed's ABC and sets it as
    DeepSpeed's accelerator, whatever was imported first. Called before ``import deepspeed``,
    DeepSpeed takes it while it loads, so a backend DeepSpeed does not know (``musa``, a
    plugin) is handed over too. What DeepSpeed binds while it is imported (the op-builder
    classes in ``deepspeed.ops.op_builder``, whose native modules DeepSpeed's optimizers
    call) stays DeepSpeed's own. Raises :class:`DeepSpeedNotInstalledError` when DeepSpeed
    cannot be imported, :class:`DeepSpeedHandOverError` when DeepSpeed refuses the
    accelerator, and ``anyaccel.InvalidAcceleratorError`` for an object that is no accelerator;
    for these two refusals nothing is changed (anyaccel's accelerator stays as it was). When
    DeepSpeed is there but fails while importing, ``accelerator`` is already anyaccel's.
    """
    from anyaccel.detection import get_accelerator, set_accelerator

    if accelerator is not None:
        from anyaccel.contract import check_accelerator

        check_accelerator(accelerator)
    if not _deepspeed_present():  # before set_accelerator: a refusal changes nothing
        raise DeepSpeedNotInstalledError(
            "anyaccel.integrations.deepspeed.install() needs DeepSpeed, which is not installed "
            "here. Install it with `DS_BUILD_OPS=0 pip install deepspeed`."
        )
    if accelerator is None:
        accelerator = get_accelerator()
    else:
        set_accelerator(accelerator)  # validates it (and adopts duck-typed accelerators)
    register_with_deepspeed(type(accelerator))
    # A selector loaded by an earlier, failed ``import deepspeed`` takes it now; otherwise the
    # hook gives it to the selector as it loads, before DeepSpeed's import-time detection.
    selector = sys.modules.get(DEEPSPEED_SELECTOR_MODULE)
    if selector is not None:
        _set_in_deepspeed(selector, accelerator)
    hand_over_when_loaded(accelerator)
    try:
        ds_accelerator = importlib.import_module("deepspeed.accelerator")
    except ImportError as error:
        raise DeepSpeedNotInstalledError(
            f"anyaccel.integrations.deepspeed.install() needs DeepSpeed, which cannot be "
            f"imported here ({error}). Install it with `DS_BUILD_OPS=0 pip install deepspeed`."
        ) from error
    except ValueError as error:  # DeepSpeed's own detection, or its config checks
        raise DeepSpeedHandOverError(
            f"DeepSpeed failed to import with anyaccel's {accelerator._name!r} accelerator "
            f"handed over: {error}. If it names {FORCE_ENV}, something imported DeepSpeed "
            "in a way anyaccel could not see: call install() before anything imports it."
        ) from error
    finally:
        hand_over_when_loaded(None)
    _set_in_deepspeed(ds_accelerator, accelerator)
    return accelerator


def _deepspeed_present() -> bool:
    """Whether ``import deepspeed`` can find a package (without importing it)."""
    try:
        return importlib.util.find_spec("deepspeed") is not None
    except (ImportError, ValueError):  # a half-imported module: let the import itself say why
        return True


def _set_in_deepspeed(module: ModuleType, accelerator: Accelerator) -> None:
    """``module.set_accelerator(accelerator)``, DeepSpeed's ABC refusal said plainly."""
    try:
        module.set_accelerator(accelerator)
    except AssertionError as error:  # DeepSpeed's ABC check
        raise DeepSpeedHandOverError(
            f"DeepSpeed's set_accelerator refused {type(accelerator).__qualname__}: {error}. "
            "Its class could not be registered with DeepSpeed's DeepSpeedAccelerator ABC."
        ) from error


# =============================================================================================
# DeepSpeed's ShareMemCommBuilder interface (moved here from anyaccel.distributed.allreduce).
# ``anyaccel.ops.cpu.shm_comm.ShareMemCommBuilder.load()`` hands the compiled kernel to
# :func:`shm_comm_module` (its ``DEEPSPEED_INTERFACE`` name), which registers DeepSpeed's op
# names and gives DeepSpeed ``initialize(world_size, rank)`` and ``vector_kernel_level()``.
# The kernel itself imports nothing of anyaccel's. These import anyaccel.distributed (and
# torch) only when called; this section needs only ``Any``, ``ModuleType`` and
# ``from __future__ import annotations`` from the top of the module.
# =============================================================================================
#: DeepSpeed's scale of ``vector_kernel_level()``: 1 = fp32 kernels usable, 2 = bf16 and fp16
#: too. anyaccel's kernels are portable C++ built for this CPU's own SIMD level, so every dtype
#: runs wherever they load.
SHM_VECTOR_KERNEL_LEVEL = 2
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


def shm_vector_kernel_level() -> int:
    """DeepSpeed's ``vector_kernel_level()``: :data:`SHM_VECTOR_KERNEL_LEVEL`."""
    return SHM_VECTOR_KERNEL_LEVEL


#: DeepSpeed's module per kernel module (one kernel per process, so one entry).
_shm_modules: dict[int, ModuleType] = {}


def shm_comm_module(kernel: ModuleType) -> ModuleType:
    """DeepSpeed's ``ShareMemCommBuilder`` module on anyaccel's compiled ``kernel``.

    It holds the kernel's names, ``initialize`` (:func:`shm_comm_initialize`) and
    ``vector_kernel_level`` (:func:`shm_vector_kernel_level`); making it registers
    ``torch.ops.deepspeed``'s all-reduce ops (:func:`register_shm_comm_ops`), as DeepSpeed's
    own module does when it loads.
    """
    register_shm_comm_ops()
    module = _shm_modules.get(id(kernel))
    if module is None:
        module = ModuleType(
            f"{__name__}.shm_comm", "DeepSpeed's ShareMemCommBuilder interface on anyaccel's kernel"
        )
        for name, value in vars(kernel).items():
            if not name.startswith("__"):
                setattr(module, name, value)
        module.__file__ = getattr(kernel, "__file__", None)
        module.initialize = shm_comm_initialize  # type: ignore[attr-defined]
        module.vector_kernel_level = shm_vector_kernel_level  # type: ignore[attr-defined]
        _shm_modules[id(kernel)] = module
    return module


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
