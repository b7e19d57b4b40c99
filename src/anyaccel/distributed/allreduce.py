"""``all_reduce`` that sums CPU tensors through shared memory when the group shares one node.

The first eligible call on a group sets it up collectively: the ranks compare where they run
(host, boot, and the launcher's node number), rank 0 creates an anonymous ``memfd`` segment,
the others open it through ``/proc``, and once every rank has mapped it the descriptor is
closed, so the memory goes away with the last process and nothing is left in ``/dev/shm``.
Groups spanning nodes, other devices, dtypes or ops, and any set-up failure use
``torch.distributed.all_reduce``; every rank takes the same path.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed.launch import DistributedSetupError
from anyaccel.forksafe import ForkSafeLock, native_threads

__all__ = [
    "CollectiveError",
    "all_reduce",
    "ddp_comm_hook",
    "deepspeed_initialize",
    "register_deepspeed_ops",
    "shm_all_reduce_status",
]

logger = logging.getLogger(__name__)

#: Set to 0 to always use ``torch.distributed.all_reduce``.
SHM_ENV = "ANYACCEL_SHM_ALLREDUCE"
#: Bytes per rank per slot (at most; large groups get smaller slots, see ``slot_bytes``).
SLOT_BYTES = 4 << 20
#: The most shared memory one group's segment takes (two slots per rank).
SEGMENT_BUDGET = 64 << 20
#: dtype -> the kernel's dtype code.
DTYPE_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
#: ReduceOp -> the kernel's op code (the others go to torch.distributed).
OP_CODES: dict[Any, int] = {
    dist.ReduceOp.SUM: 0,
    dist.ReduceOp.PRODUCT: 1,
    dist.ReduceOp.MIN: 2,
    dist.ReduceOp.MAX: 3,
}
_DEFAULT_TIMEOUT = timedelta(minutes=30)


class CollectiveError(DistributedSetupError):
    """A collective could not finish: a rank died, timed out or passed a different tensor."""


@dataclass
class _Group:
    """A group's shared-memory state: a live communicator, or why the group falls back."""

    communicator: Any | None
    reason: str
    timeout: float
    threads: int
    #: The tensors set-up passed to gloo, kept as long as the group: a gloo worker then never
    #: drops the last reference to a Python tensor, which needs the GIL (torch < 2.8 destroys a
    #: group with the GIL held, so that worker and destroy_process_group() would wait on each
    #: other; at interpreter exit it aborts the process).
    kept: list[torch.Tensor] = field(default_factory=list)


#: id(group) -> (weak reference to the group, its state). Weak: holding the group would keep
#: torch's gloo worker threads alive past ``destroy_process_group()`` to interpreter exit,
#: where one still dropping a finished collective's Python tensors aborts the process. With no
#: reference of ours, a group dies when torch lets it, exactly as without anyaccel.
_groups: dict[int, tuple[weakref.ref[Any], _Group]] = {}
_lock = ForkSafeLock()  # renewed in a forked child


def _forget(key: int) -> Any:
    """The callback dropping a dead group's state (and unmapping its segment)."""

    def forget(dead: weakref.ref[Any]) -> None:
        entry = _groups.get(key)
        if entry is not None and entry[0] is dead:  # not a newer group at the same address
            _groups.pop(key, None)  # no lock: the collector may run this inside `with _lock`

    return forget


def _node_identity() -> str:
    """Where this process runs: host, boot id, and the launcher's node number if it gives one."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
    except OSError:
        boot = ""
    launcher_node = os.environ.get("GROUP_RANK", os.environ.get("SLURM_NODEID", ""))
    return f"{socket.gethostname()}/{boot}/{launcher_node}"


def _group_timeout(group: Any) -> float:
    """The group's timeout in seconds (torch's default when the group does not say)."""
    try:
        timeout = group._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError):
        timeout = _DEFAULT_TIMEOUT
    return float(timeout.total_seconds())


def _load_module() -> ModuleType:
    from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder

    return ShareMemCommBuilder().load()


def _local_problem() -> str:
    """Why this process cannot use shared memory at all ("" when it can)."""
    if os.environ.get(SHM_ENV, "1").strip() in ("0", "false", "no", "off"):
        return f"disabled by {SHM_ENV}"
    if not hasattr(os, "memfd_create"):
        return "this platform has no memfd_create (Linux only)"
    try:
        _load_module()
    except Exception as exc:  # a build or load failure only means: use torch.distributed
        return f"the shared-memory op is unavailable ({exc})"
    return ""


def slot_bytes(world_size: int) -> int:
    """Chunk size per rank: 4 MiB, less for groups so large that the segment would pass 64 MiB."""
    share = SEGMENT_BUDGET // (2 * world_size)
    return max(256 << 10, min(SLOT_BYTES, share)) // 4096 * 4096


def _kernel_threads(world_size: int) -> int:
    """Threads per rank for copies and sums: its own cores if bound, else an even share."""
    affinity = getattr(os, "sched_getaffinity", None)
    total = os.cpu_count() or 1
    cores = len(affinity(0)) if affinity is not None else total
    share = cores if cores < total else total // world_size
    return native_threads(max(1, min(torch.get_num_threads(), share)))


def _plain(value: Any) -> Any:
    """JSON's lists back as tuples, so gathered records compare and hash as they were sent."""
    return tuple(_plain(item) for item in value) if isinstance(value, list) else value


def _all_gather_json(value: Any, group: Any, kept: list[torch.Tensor]) -> list[Any]:
    """Every rank's ``value`` (JSON-able), gathered as bytes in CPU tensors.

    Not ``all_gather_object``: it pickles, and on newer torch it needs numpy, which torch
    itself does not require.
    """
    size = dist.get_world_size(group)
    data = json.dumps(value).encode()
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    length = torch.tensor([len(data)], dtype=torch.int64)
    dist.all_gather(lengths, length, group=group)
    longest = max(int(length) for length in lengths)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    buffers = [torch.empty(longest, dtype=torch.uint8) for _ in range(size)]
    dist.all_gather(buffers, padded, group=group)
    kept += [*lengths, length, padded, *buffers]
    return [
        _plain(json.loads(bytes(buffer[: int(length)].tolist())))
        for buffer, length in zip(buffers, lengths, strict=True)
    ]


def _set_up(group: Any) -> _Group:
    """Collectively decide the group's path and, on one node, share a segment among its ranks."""
    size, me = dist.get_world_size(group), dist.get_rank(group)
    timeout = _group_timeout(group)
    threads = _kernel_threads(size)
    problem = _local_problem()
    kept: list[torch.Tensor] = []
    views = _all_gather_json((_node_identity(), problem), group, kept)
    problems = sorted({p for _, p in views if p})
    if problems:
        return _Group(None, "; ".join(problems), timeout, threads, kept)
    if len({node for node, _ in views}) > 1:
        return _Group(None, "the group's ranks run on more than one node", timeout, threads, kept)

    module = _load_module()
    slot = slot_bytes(size)
    segment = int(module.Communicator.required_bytes(size, slot))
    communicator: Any = None
    created = -1
    offer: list[Any] = [None]
    if me == 0:
        try:
            created = os.memfd_create("anyaccel-allreduce", os.MFD_CLOEXEC)
            os.ftruncate(created, segment)
            communicator = module.Communicator(created, segment, size, 0, slot, True)
            offer[0] = (os.getpid(), created)
        except OSError as exc:
            offer[0] = f"rank 0 cannot create a {segment}-byte shared-memory segment ({exc})"
    offer = _all_gather_json(offer[0], group, kept)[:1]  # rank 0's offer, to every rank
    failure = offer[0] if isinstance(offer[0], str) else ""
    if me != 0 and not failure:
        pid, fd = offer[0]
        try:
            opened = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
            try:
                communicator = module.Communicator(opened, segment, size, me, slot, False)
            finally:
                os.close(opened)
        except (OSError, RuntimeError) as exc:
            failure = f"rank {me} cannot open rank 0's segment ({exc})"
    results = _all_gather_json((failure, os.getpid()), group, kept)
    if created >= 0:
        os.close(created)  # every rank has mapped it (or failed): the mapping keeps it alive
    failures = sorted({f for f, _ in results if f})
    if failures:
        if communicator is not None:
            communicator.close()
        return _Group(None, "; ".join(failures), timeout, threads, kept)
    communicator.set_peer_pids([pid for _, pid in results])
    return _Group(communicator, "", timeout, threads, kept)


def _state(group: Any) -> _Group:
    with _lock:
        entry = _groups.get(id(group))
        if entry is not None and entry[0]() is group:
            return entry[1]
    state = _set_up(group)
    if state.reason:
        logger.info("all_reduce on this group uses torch.distributed: %s", state.reason)
    with _lock:
        _groups[id(group)] = (weakref.ref(group, _forget(id(group))), state)
    return state


def _resolve(group: Any | None) -> Any:
    return dist.group.WORLD if group is None else group


def shm_all_reduce_status(group: Any | None = None) -> str:
    """``"shared memory"`` or why ``group`` falls back (``"not set up yet"`` before first use)."""
    pg = _resolve(group)
    with _lock:
        entry = _groups.get(id(pg))
    if entry is None or entry[0]() is not pg:
        return "not set up yet"
    return "shared memory" if entry[1].communicator is not None else entry[1].reason


def all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any | None = None) -> None:
    """Reduce ``tensor`` across ``group`` in place, like ``torch.distributed.all_reduce``.

    CPU tensors (fp32, bf16, fp16; SUM, PRODUCT, MIN, MAX) go through shared memory when every
    rank of the group runs on this node; everything else calls ``torch.distributed.all_reduce``.
    The first call on a group is collective set-up. Raises ``CollectiveError`` when a rank
    dies, stops within the group's timeout, or passes a tensor of another size or dtype.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"all_reduce takes a torch.Tensor, not {type(tensor).__name__}")
    if not dist.is_initialized():
        raise DistributedSetupError(
            "all_reduce needs a process group: call anyaccel.distributed.init_distributed() first"
        )
    pg = _resolve(group)
    if dist.get_rank(pg) < 0:  # not a member: torch.distributed's own no-op (and warning)
        dist.all_reduce(tensor, op=op, group=pg)
        return
    if dist.get_world_size(pg) == 1:
        return
    eligible = (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and tensor.dtype in DTYPE_CODES
        and op in OP_CODES
    )
    if not eligible:
        dist.all_reduce(tensor, op=op, group=pg)
        return
    state = _state(pg)
    if state.communicator is None:
        dist.all_reduce(tensor, op=op, group=pg)
        return
    work = tensor if tensor.is_contiguous() else tensor.contiguous()
    try:
        state.communicator.all_reduce(
            work.data_ptr(), work.numel(), DTYPE_CODES[work.dtype], OP_CODES[op],
            state.timeout, state.threads,
        )  # fmt: skip
    except (RuntimeError, ValueError) as exc:
        raise CollectiveError(f"all_reduce over shared memory failed: {exc}") from None
    if work is not tensor:
        tensor.copy_(work)


def ddp_comm_hook(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook that averages gradients with ``all_reduce``.

    ``ddp.register_comm_hook(None, ddp_comm_hook)`` (``state`` is the process group, ``None``
    for the default): gradients of CPU models then go through shared memory on one node.
    """
    tensor: torch.Tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(state))
    all_reduce(tensor, group=state)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(tensor)
    return future


# DDP compares the annotations with the real classes; postponed evaluation made them strings.
ddp_comm_hook.__annotations__ = {
    "state": object,
    "bucket": getattr(dist, "GradBucket", object),
    "return": torch.futures.Future[torch.Tensor],
}


# --- DeepSpeed's interface (the ShareMemCommBuilder module calls these) ---------------------
_library: Any = None


def deepspeed_initialize(world_size: int, rank: int) -> None:
    """DeepSpeed's ``initialize``: set the default group up now, on every rank at once."""
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
        _state(_resolve(None))


def _inference_all_reduce_(tensor: torch.Tensor) -> torch.Tensor:
    all_reduce(tensor)
    return tensor


def _inference_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    result = tensor.clone()
    all_reduce(result)
    return result


def register_deepspeed_ops() -> None:
    """Define ``torch.ops.deepspeed.inference_all_reduce(_)`` unless something already did."""
    global _library
    if _library is not None:
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
    _library = library
