"""The shared-memory collectives kernel (``ShmCommBuilder``) and DeepSpeed's name for it.

``ShmCommBuilder`` builds ``csrc/shm_comm.cpp``: the ``Communicator`` that
``anyaccel.distributed.shm`` runs its collectives on, the codes of ``csrc/shm_contract.h``
(``DTYPE_CODES``, ``OP_CODES``, ``COLLECTIVE_CODES``, read by ``anyaccel.distributed.shm.codes``)
and the C entries of anyaccel's c10d ``Backend``. Loading it imports nothing of anyaccel's.

``ShareMemCommBuilder`` is the same build under the class and op name DeepSpeed asks an
accelerator for; its ``load()`` gives DeepSpeed's module interface, which the DeepSpeed
integration provides (:data:`DEEPSPEED_INTERFACE`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import cast

from anyaccel.ops.builder import Compatibility
from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder
from anyaccel.probe import resolve

__all__ = ["DEEPSPEED_INTERFACE", "ShareMemCommBuilder", "ShmCommBuilder"]

#: Where DeepSpeed's ``ShareMemCommBuilder`` module interface is made from the kernel: a
#: ``"module:attr"`` name, resolved in :meth:`ShareMemCommBuilder.load` only (the kernel's
#: layer never imports the integrations; docs/architecture.md lists this name).
DEEPSPEED_INTERFACE = "anyaccel.integrations.deepspeed:shm_comm_module"


class ShmCommBuilder(CPUOpBuilder):
    """One node's collectives through shared memory (all_reduce, all_gather, reduce_scatter,
    broadcast, barrier) for ``anyaccel.distributed.shm`` and the ``anyaccel_shm`` backend."""

    NAME = "anyaccel_shm_comm"
    #: One build, whichever of this op's names loads it (``ShareMemCommBuilder`` too).
    LIBRARY = "shm_comm"
    SOURCES = ("shm_comm.cpp",)

    def platform_compatibility(self) -> Compatibility:
        """Linux only (memfd segments, /proc liveness checks); else the host-kernel checks."""
        if not sys.platform.startswith("linux"):
            return Compatibility(False, f"needs Linux shared memory, not {sys.platform}")
        return super().platform_compatibility()


class ShareMemCommBuilder(ShmCommBuilder):
    """DeepSpeed's name for the shared-memory kernel, with DeepSpeed's module interface.

    DeepSpeed's ``TorchBackend`` asks the accelerator for this class, checks ``NAME`` in its
    ``__compatible_ops__`` and loads it: the module then has ``initialize(world_size, rank)``
    and ``vector_kernel_level()``, and loading it defines
    ``torch.ops.deepspeed.inference_all_reduce_`` (all from ``anyaccel.integrations.deepspeed``),
    beside the kernel's own names. anyaccel's own entry point is
    ``anyaccel.distributed.all_reduce``.
    """

    NAME = "deepspeed_shm_comm"

    def absolute_name(self) -> str:
        """DeepSpeed's dotted name for this op."""
        return f"deepspeed.ops.comm.{self.NAME}_op"

    def load(self, verbose: bool = False) -> ModuleType:
        """The kernel (built once for both names) behind DeepSpeed's module interface.

        Raises what :meth:`ShmCommBuilder.load` raises.
        """
        kernel = super().load(verbose)
        interface = cast(Callable[[ModuleType], ModuleType], resolve(DEEPSPEED_INTERFACE))
        return interface(kernel)
