"""A ``torch.distributed`` backend for CPU tensors: shared memory on one node, gloo for the rest.

``init_process_group(backend="anyaccel_shm")`` (or ``"cpu:anyaccel_shm"``) gives every caller of
``torch.distributed`` (DDP, ZeRO, FSDP, plain scripts) the shared-memory collectives. The group
is a Python ``ProcessGroup`` holding a gloo group over the same ranks (same store, its own
prefix): collectives the kernel runs (``NATIVE``) go through the group's shared-memory segment;
every other call, and any tensor the kernel cannot take (integer dtypes, other ops), goes to
gloo, which is also registered as the group's CPU backend so that every method not overridden
here (send/recv, all_to_all, gather, scatter, object collectives, ...) reaches it unchanged.

Native calls run synchronously and return a completed ``Work`` (``wait()`` returns at once,
``get_future()`` holds the outputs, as DDP needs). Ranks that die or stall raise within the
group's timeout; ranks that pass different sizes, dtypes or ops raise on every rank.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed.errors import CollectiveError, DistributedSetupError
from anyaccel.distributed.shm.group import ShmGroup, adopt, set_up_segment

__all__ = [
    "BACKEND_ENV",
    "BACKEND_NAME",
    "NATIVE",
    "ShmProcessGroup",
    "backend_registered",
    "register_backend",
    "shm_backend_wanted",
]

logger = logging.getLogger(__name__)

#: The name ``init_process_group`` takes (``"anyaccel_shm"`` or ``"cpu:anyaccel_shm"``).
BACKEND_NAME = "anyaccel_shm"
#: Set to 0 so that ``init_distributed()`` keeps gloo for CPU tensors.
BACKEND_ENV = "ANYACCEL_SHM_BACKEND"
#: The collectives this backend runs on shared memory (for CPU float tensors); the rest is gloo.
NATIVE = ("all_reduce", "barrier")

_FLOAT_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_OFF = ("0", "false", "no", "off")


def _op_code(op: Any) -> int | None:
    """The kernel's code for ``op`` (AVG runs as SUM, then a division), or None for gloo."""
    for candidate, code in (
        (dist.ReduceOp.SUM, 0),
        (dist.ReduceOp.AVG, 0),
        (dist.ReduceOp.PRODUCT, 1),
        (dist.ReduceOp.MIN, 2),
        (dist.ReduceOp.MAX, 3),
    ):
        if op == candidate:
            return code
    return None


def _completed(result: Any) -> Any:
    """A finished ``Work`` whose future holds ``result``."""
    future: torch.futures.Future[Any] = torch.futures.Future()
    future.set_result(result)
    c10d: Any = torch._C._distributed_c10d
    return c10d._create_work_from_future(future)


class ShmProcessGroup(dist.ProcessGroup):
    """A process group over shared memory for CPU collectives, delegating the rest to gloo."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the stubs list one form
        c10d: Any = dist  # torch's stubs declare neither PrefixStore's export nor gloo's methods
        self.gloo: Any = c10d.ProcessGroupGloo(
            c10d.PrefixStore(f"{BACKEND_NAME}/gloo/", store), rank, size, timeout
        )
        # Every method not overridden below dispatches to the group's backend for the device.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self.gloo)
        self.shm = ShmGroup()
        self.shm.timeout = timeout.total_seconds()
        if size > 1:
            set_up_segment(self._gather, size, rank, self.shm)
        else:
            self.shm.reason = "a group of one rank needs no shared memory"
        self.shm.ready = True
        adopt(self, self.shm)  # anyaccel.distributed.all_reduce(group=this) shares the segment
        if self.shm.reason:
            logger.info("%s uses gloo for every collective: %s", BACKEND_NAME, self.shm.reason)

    # -- set-up and status ------------------------------------------------------------------
    def _gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor) -> None:
        self.gloo.allgather([outputs], [tensor]).wait()

    def getBackendName(self) -> str:
        return BACKEND_NAME

    @property
    def status(self) -> str:
        """``"shared memory"``, or why every collective of this group runs on gloo."""
        return "shared memory" if self.shm.communicator is not None else self.shm.reason

    def shutdown(self) -> None:
        """Unmap the segment (the gloo group goes with the last reference to this one)."""
        with self.shm.lock:
            if self.shm.communicator is not None:
                self.shm.communicator.close()
                self.shm.communicator = None
                self.shm.reason = "the group was destroyed"

    def __del__(self) -> None:
        communicator = getattr(getattr(self, "shm", None), "communicator", None)
        if communicator is not None:
            communicator.close()

    # -- the native collectives -------------------------------------------------------------
    def _native(self, tensors: Sequence[torch.Tensor]) -> bool:
        return (
            self.shm.communicator is not None
            and len(tensors) == 1
            and tensors[0].device.type == "cpu"
            and tensors[0].layout == torch.strided
        )

    def _run(self, name: str, call: Callable[[Any], None]) -> None:
        try:
            with self.shm.lock:
                communicator = self.shm.communicator
                if communicator is None:
                    raise CollectiveError(f"{name}: the process group was destroyed")
                call(communicator)
        except (RuntimeError, ValueError) as exc:
            if isinstance(exc, CollectiveError):
                raise
            raise CollectiveError(f"{BACKEND_NAME} {name} failed: {exc}") from None

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = dist.AllreduceOptions() if opts is None else opts
        code = _op_code(opts.reduceOp)
        if code is None or not self._native(tensors) or tensors[0].dtype not in _FLOAT_CODES:
            return self.gloo.allreduce(tensors, opts)
        target = tensors[0].detach()
        work = target if target.is_contiguous() else target.contiguous()
        self._run(
            "all_reduce",
            lambda c: c.all_reduce(
                work.data_ptr(), work.numel(), _FLOAT_CODES[work.dtype], code,
                self.shm.timeout, self.shm.threads,
            ),
        )  # fmt: skip
        if opts.reduceOp == dist.ReduceOp.AVG:
            work.div_(self.size())
        if work is not target:
            target.copy_(work)
        return _completed(tensors)

    def barrier(self, opts: Any = None) -> Any:
        opts = dist.BarrierOptions() if opts is None else opts
        if self.shm.communicator is None:
            return self.gloo.barrier(opts)
        self._run("barrier", lambda c: c.barrier(self.shm.timeout))
        return _completed([])


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> ShmProcessGroup:
    """The factory ``torch.distributed`` calls on every rank of a new group."""
    return ShmProcessGroup(store, rank, size, timeout)


def backend_registered() -> bool:
    """Whether ``torch.distributed`` knows :data:`BACKEND_NAME` in this process."""
    return BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {})


def register_backend() -> None:
    """Register :data:`BACKEND_NAME` with ``torch.distributed`` for CPU tensors (idempotent).

    Raises ``DistributedSetupError`` on a torch whose ``Backend.register_backend`` takes no
    ``devices`` (before 2.1): upgrade torch, or use backend="gloo".
    """
    if backend_registered():
        return
    register = getattr(dist.Backend, "register_backend", None)
    if register is None or "devices" not in inspect.signature(register).parameters:
        raise DistributedSetupError(
            f"torch {torch.__version__} cannot register the {BACKEND_NAME!r} backend "
            "(Backend.register_backend(..., devices=) is missing): upgrade to torch >= 2.4, "
            "or pass backend='gloo'"
        )
    register(BACKEND_NAME, _create, extended_api=False, devices=["cpu"])


def shm_backend_wanted(argument: bool | None = None) -> tuple[bool, str]:
    """Whether ``init_distributed`` should use :data:`BACKEND_NAME`, and why (for the trace).

    ``argument`` (``init_distributed(shm_backend=...)``) decides when given; otherwise
    :data:`BACKEND_ENV` set to 0/false/no/off turns it off.
    """
    if argument is not None:
        return argument, f"shm_backend={argument}"
    value = os.environ.get(BACKEND_ENV, "").strip().lower()
    if value in _OFF:
        return False, f"{BACKEND_ENV}={value}"
    if not hasattr(os, "memfd_create"):
        return False, "this platform has no memfd_create (Linux only)"
    return True, "default for CPU ranks on one node"
