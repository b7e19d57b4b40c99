"""Collectives on CPU tensors through a group's shared memory, else ``torch.distributed``.

Each collective checks what the kernel can take (device, layout, dtype, op), gets the group's
state (``group.group_state``: set up on first use) and runs under the group's lock. A new
collective follows ``all_reduce``: the same eligibility, the same lock, its own kernel call.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from anyaccel.distributed.errors import CollectiveError, DistributedSetupError
from anyaccel.distributed.shm.codes import kernel_codes, table
from anyaccel.distributed.shm.group import group_state, resolve_group
from anyaccel.distributed.shm.reduction import all_reduce_as_nccl
from anyaccel.forksafe import after_fork_in_child

__all__ = ["all_reduce"]


def __getattr__(name: str) -> dict[Any, int]:
    """``DTYPE_CODES`` and ``OP_CODES``, the kernel's (``codes``): once defined here."""
    return table(name, __name__)


_SUM = dist.ReduceOp.SUM


class _Ready(NamedTuple):
    """A group whose shared-memory all_reduce already ran here: what the next call needs."""

    group: weakref.ref[Any]
    state: Any  # the group's state: its communicator is dropped when the group fails or closes
    communicator: Any
    dtypes: dict[torch.dtype, int]
    sum_code: int
    timeout: float
    threads: int


#: id(group) -> :class:`_Ready`, filled by a call that ran on the kernel. A call whose group,
#: tensor and op match (the common tensor-parallel case: a contiguous CPU tensor, SUM) goes
#: straight to the kernel, skipping the checks that first call made; any other call takes the
#: full path. The kernel's own mutex makes each call whole, as ``state.lock`` does.
_ready: dict[int, _Ready] = {}
after_fork_in_child(_ready.clear)  # a child's groups are not its parent's: full path first


def _fast_all_reduce(tensor: object, op: Any, group: Any | None) -> bool:
    """Run ``all_reduce`` straight on the kernel if a call like it already did; False if not."""
    pg = dist.group.WORLD if group is None else group
    ready = _ready.get(id(pg))
    if (
        ready is None
        or op is not _SUM
        or not isinstance(tensor, torch.Tensor)
        or ready.group() is not pg
        or ready.state.communicator is not ready.communicator
        or not tensor.is_cpu
        or tensor.layout is not torch.strided
        or not tensor.is_contiguous()
    ):
        return False
    dtype = ready.dtypes.get(tensor.dtype)
    if dtype is None:
        return False
    try:
        ready.communicator.all_reduce(
            tensor.data_ptr(), tensor.numel(), dtype, ready.sum_code, ready.timeout, ready.threads
        )
    except (RuntimeError, ValueError) as exc:
        _ready.pop(id(pg), None)
        raise CollectiveError(f"all_reduce over shared memory failed: {exc}") from None
    return True


def _checked_group(tensor: object, name: str, group: Any | None) -> Any:
    """The group collective ``name`` runs on, once ``tensor`` is a tensor and a group exists."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} takes a torch.Tensor, not {type(tensor).__name__}")
    if not dist.is_initialized():
        raise DistributedSetupError(
            f"{name} needs a process group: call anyaccel.distributed.init_distributed() first"
        )
    return resolve_group(group)


def all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any | None = None) -> None:
    """Reduce ``tensor`` across ``group`` in place, like ``torch.distributed.all_reduce``.

    CPU tensors (fp32, bf16, fp16; SUM, PRODUCT, MIN, MAX, AVG) go through shared memory when
    every rank of the group runs on this node; everything else calls
    ``torch.distributed.all_reduce``. MIN and MAX let a NaN from any rank win; AVG is the exact
    mean (rounded once) of floating tensors and NCCL's truncated mean of integers; PREMUL_SUM
    multiplies before summing; on the fallback too, for CPU tensors.
    The first call on a group is collective set-up. Threads may call it at once: each call is
    whole, as with gloo. Raises ``CollectiveError`` when a rank dies, stops within the group's
    timeout, or passes a tensor of another size or dtype, or another op (checked for the whole
    call before any data is reduced; the group's shared-memory path is unusable afterwards).
    """
    if _fast_all_reduce(tensor, op, group):
        return
    pg = _checked_group(tensor, "all_reduce", group)
    if dist.get_rank(pg) < 0:  # not a member: torch.distributed's own no-op (and warning)
        dist.all_reduce(tensor, op=op, group=pg)
        return
    if dist.get_world_size(pg) == 1:
        return
    # A CPU tensor sets the group up (collectively, on the first such call); the kernel's own
    # codes, read once it is loaded, then say whether it takes this dtype and op.
    eligible = tensor.device.type == "cpu" and tensor.layout == torch.strided
    state = group_state(pg) if eligible else None
    code = dtype = None
    if state is not None and state.communicator is not None:
        codes = kernel_codes()
        code, dtype = codes.op_code(op), codes.dtypes.get(tensor.dtype)
    if state is None or state.communicator is None or code is None or dtype is None:
        if tensor.device.type == "cpu":  # gloo lacks AVG and PREMUL_SUM, its MIN/MAX drop a NaN
            all_reduce_as_nccl(
                tensor, op, dist.get_world_size(pg), lambda t, o: dist.all_reduce(t, op=o, group=pg)
            )
        else:
            dist.all_reduce(tensor, op=op, group=pg)
        return
    communicator = state.communicator
    # Written through raw memory, as torch.distributed does: never an autograd in-place op
    # (a view of a parameter that requires grad is reduced, not refused).
    target = tensor.detach()
    work = target if target.is_contiguous() else target.contiguous()
    try:
        with state.lock:
            communicator.all_reduce(
                work.data_ptr(), work.numel(), dtype, code,
                state.timeout, state.threads,
            )  # fmt: skip
    except (RuntimeError, ValueError) as exc:
        raise CollectiveError(f"all_reduce over shared memory failed: {exc}") from None
    if work is not target:
        target.copy_(work)
    elif op is _SUM:  # the next such call on this group goes straight to the kernel
        key = id(pg)
        gone = weakref.ref(pg, lambda _: _ready.pop(key, None))
        _ready[key] = _Ready(
            gone, state, communicator, codes.dtypes, code, state.timeout, state.threads
        )
