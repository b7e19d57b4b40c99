"""A process group's shared-memory path: set up once, collectively, then one collective at a time.

The first collective on a group sets it up on every rank at once: the ranks compare where they
run (host, boot, and the launcher's node number), rank 0 creates an anonymous ``memfd``
segment, the others open it through ``/proc``, and once every rank has mapped it the
descriptor is closed, so the memory goes away with the last process and nothing is left in
``/dev/shm``. A group spanning nodes, or any set-up failure, gives a group without a
communicator (its collectives use ``torch.distributed``); every rank reaches the same answer.

Threads of one process share a group's state: set-up runs once however many threads ask at
once, and ``ShmGroup.lock`` lets one shared-memory collective run at a time (as gloo, each
call then gets the whole of one peer call, never a mix of two).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.errors import InvalidSettingError
from anyaccel.forksafe import ForkSafeLock, native_threads
from anyaccel.ops.errors import UntrustedCacheError
from anyaccel.settings import read_on_off

__all__ = [
    "BACKEND_ENV",
    "BACKEND_NAME",
    "RELEASE_WAIT",
    "SEGMENT_BUDGET",
    "SHM_ENV",
    "SLOT_BYTES",
    "ShmGroup",
    "adopt",
    "announce_fallback",
    "group_state",
    "load_kernel",
    "node_identity",
    "resolve_group",
    "set_up_segment",
    "shm_all_reduce_status",
    "slot_bytes",
]

logger = logging.getLogger(__name__)

#: Set to 0 (or false/no/off) to always use ``torch.distributed``'s collectives.
SHM_ENV = "ANYACCEL_SHM_ALLREDUCE"
#: The name ``init_process_group`` takes (``"anyaccel_shm"`` or ``"cpu:anyaccel_shm"``).
BACKEND_NAME = "anyaccel_shm"
#: Set to 0 so that the CPU accelerator names gloo (and ``init_distributed()`` keeps it); read
#: here too, so a typo is said by a group made with ``init_process_group("anyaccel_shm")``.
BACKEND_ENV = "ANYACCEL_SHM_BACKEND"
#: Bytes per rank per slot (at most; large groups get smaller slots, see ``slot_bytes``).
SLOT_BYTES = 4 << 20
#: The most shared memory one group's segment takes (two slots per rank).
SEGMENT_BUDGET = 64 << 20
_DEFAULT_TIMEOUT = timedelta(minutes=30)
_NOT_SET_UP = "not set up yet"


@dataclass
class ShmGroup:
    """One group's shared-memory state in this process: a live communicator, or why not.

    ``lock`` is held for set-up and for every collective on the communicator: the kernel keeps
    one sequence per group, so two threads must never be inside it at once.
    """

    lock: ForkSafeLock = field(default_factory=ForkSafeLock)
    ready: bool = False
    communicator: Any | None = None
    reason: str = _NOT_SET_UP
    #: Whether ``reason`` is a failure (no kernel, no segment) rather than a choice (a
    #: variable, a group spanning nodes): a failure is announced at WARNING.
    failed: bool = False
    timeout: float = _DEFAULT_TIMEOUT.total_seconds()
    threads: int = 1
    #: The tensors set-up passed to gloo, held until every gloo worker has let go of them (then
    #: emptied; kept for the group's life on a torch that cannot tell): a worker must never drop
    #: the last reference to a Python tensor, which needs the GIL (torch < 2.8 destroys a group
    #: with the GIL held, so that worker and destroy_process_group() would wait on each other;
    #: after interpreter exit began, CPython ends the thread and the process aborts).
    kept: list[torch.Tensor] = field(default_factory=list)


#: id(group) -> (weak reference to the group, its state). Weak: holding the group would keep
#: torch's gloo worker threads alive past ``destroy_process_group()`` to interpreter exit,
#: where one still dropping a finished collective's Python tensors aborts the process. With no
#: reference of ours, a group dies when torch lets it, exactly as without anyaccel.
_groups: dict[int, tuple[weakref.ref[Any], ShmGroup]] = {}
_lock = ForkSafeLock()  # guards _groups only; never held across a collective


def _forget(key: int) -> Callable[[weakref.ref[Any]], None]:
    """The callback dropping a dead group's state (and unmapping its segment)."""

    def forget(dead: weakref.ref[Any]) -> None:
        entry = _groups.get(key)
        if entry is not None and entry[0] is dead:  # not a newer group at the same address
            _groups.pop(key, None)  # no lock: the collector may run this inside `with _lock`

    return forget


def resolve_group(group: Any | None) -> Any:
    """The process group a call means: ``group``, or the default group for ``None``."""
    return dist.group.WORLD if group is None else group


def node_identity() -> str:
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


def load_kernel() -> ModuleType:
    """The compiled shared-memory module (``ShmCommBuilder``), built on first use."""
    from anyaccel.ops.cpu.shm_comm import ShmCommBuilder

    return ShmCommBuilder().load()


def _local_problem() -> tuple[str, bool]:
    """Why this process cannot use shared memory ("" when it can), and whether that is a failure.

    Raises :class:`InvalidSettingError` when :data:`SHM_ENV` or ``ANYACCEL_SHM_BACKEND`` is not
    an on/off value (the latter matters only to ``init_distributed``, but a typo is said here
    too, for a group made with ``init_process_group(backend="anyaccel_shm")``).
    """
    read_on_off(BACKEND_ENV)
    if read_on_off(SHM_ENV) is False:
        return f"disabled by {SHM_ENV}", False
    if not hasattr(os, "memfd_create"):
        return "this platform has no memfd_create (Linux only)", True
    try:
        load_kernel()
    except UntrustedCacheError as exc:  # never quietly: the cache may hold another user's code
        logger.warning("anyaccel_shm: %s; this group's collectives use torch.distributed", exc)
        return f"the shared-memory op is unavailable ({exc})", True
    except Exception as exc:  # a build or load failure only means: use torch.distributed
        return f"the shared-memory op is unavailable ({exc})", True
    return "", False


#: Whether this process has warned that a group fell back to gloo after a failure.
_warned_failure = False


def announce_fallback(state: ShmGroup, rank: int, what: str) -> None:
    """Log why a group runs ``what`` without shared memory: at WARNING once per process for a
    failure (on the group's rank 0, so once per job for the default group), else at INFO.
    """
    global _warned_failure
    if not state.reason:
        return
    with _lock:
        warn = state.failed and rank == 0 and not _warned_failure
        _warned_failure = _warned_failure or warn
    if warn:
        logger.warning(
            "%s without shared memory, which is slower: %s (set %s=0 to choose this and "
            "silence the warning)",
            what, state.reason, SHM_ENV,
        )  # fmt: skip
    else:
        logger.info("%s without shared memory: %s", what, state.reason)


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


#: An all-gather of CPU tensors over a group's ranks: ``gather(outputs, input)``.
Gather = Callable[[list[torch.Tensor], torch.Tensor], None]


def _all_gather_json(value: Any, gather: Gather, size: int, kept: list[torch.Tensor]) -> list[Any]:
    """Every rank's ``value`` (JSON-able), gathered as bytes in CPU tensors.

    Not ``all_gather_object``: it pickles, and on newer torch it needs numpy, which torch
    itself does not require.
    """
    data = json.dumps(value).encode()
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    length = torch.tensor([len(data)], dtype=torch.int64)
    gather(lengths, length)
    longest = max(int(length) for length in lengths)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    buffers = [torch.empty(longest, dtype=torch.uint8) for _ in range(size)]
    gather(buffers, padded)
    kept += [*lengths, length, padded, *buffers]
    return [
        _plain(json.loads(bytes(buffer[: int(length)].tolist())))
        for buffer, length in zip(buffers, lengths, strict=True)
    ]


def _set_up(group: Any, state: ShmGroup) -> None:
    """Collectively decide ``group``'s path (set-up's all-gathers run on ``group`` itself)."""

    def gather(outputs: list[torch.Tensor], tensor: torch.Tensor) -> None:
        dist.all_gather(outputs, tensor, group=group)

    state.timeout = _group_timeout(group)
    set_up_segment(gather, dist.get_world_size(group), dist.get_rank(group), state)


#: How long set-up waits for gloo's workers to let go of its tensors (they do within
#: microseconds unless the host starves them); past it the tensors stay with the group.
RELEASE_WAIT = 10.0


def _released_by_workers(kept: list[torch.Tensor], seconds: float) -> bool:
    """Wait until nothing but ``kept`` holds its tensors (False: torch cannot tell, or too long).

    A gloo collective's ``wait()`` returns when its result is ready, a moment before the
    worker thread that ran it drops its own references to the tensors.
    """
    use_count: Any = getattr(torch.Tensor, "_use_count", None)  # C++ references to the tensor
    if use_count is None:
        return False
    deadline = time.monotonic() + seconds
    while any(use_count(tensor) > 1 for tensor in kept):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)  # releases the GIL, should the worker need it meanwhile
    return True


def wait_released(work: Any, tensors: list[torch.Tensor]) -> None:
    """Wait for a gloo ``work`` and then for its worker thread to let go of ``tensors``.

    For tensors a fallback makes and drops itself: were the worker to drop the last reference,
    it would need the GIL, and on torch < 2.8 a group destroyed meanwhile (with the GIL held)
    and that worker wait on each other for good.
    """
    work.wait()
    del work  # it holds the tensors too
    _released_by_workers(tensors, RELEASE_WAIT)


def set_up_segment(gather: Gather, size: int, me: int, state: ShmGroup) -> None:
    """Collectively decide a group's path and, on one node, share a segment among its ranks.

    ``gather`` all-gathers CPU tensors over the group's ``size`` ranks (this one is ``me``);
    every rank calls this at once. Afterwards ``state.communicator`` is set, or
    ``state.reason`` says why not (the same on every rank), and no gloo worker holds a tensor
    of set-up's any more (``state.kept`` is empty), unless torch cannot tell.
    """
    try:
        _set_up_segment(gather, size, me, state)
    finally:
        if _released_by_workers(state.kept, RELEASE_WAIT):
            state.kept.clear()


def _set_up_segment(gather: Gather, size: int, me: int, state: ShmGroup) -> None:
    """``set_up_segment`` itself (its tensors gathered into ``state.kept``)."""
    state.threads = _kernel_threads(size)
    try:
        problem, failed = _local_problem()
        invalid = ""
    except InvalidSettingError as exc:  # told to every rank, so that none waits for this one
        problem, failed, invalid = str(exc), True, str(exc)
    kept = state.kept
    views = _all_gather_json((node_identity(), problem, failed, invalid), gather, size, kept)
    settings = [f"rank {rank}: {error}" for rank, (*_, error) in enumerate(views) if error]
    if settings:
        raise InvalidSettingError("; ".join(settings))
    problems = sorted({p for _, p, _, _ in views if p})
    if problems:
        state.reason = "; ".join(problems)
        state.failed = any(f for _, p, f, _ in views if p)
        return
    if len({view[0] for view in views}) > 1:
        state.reason = "the group's ranks run on more than one node"
        return

    module = load_kernel()
    slot = slot_bytes(size)
    segment = int(module.Communicator.required_bytes(size, slot))
    communicator: Any = None
    created = -1
    offer: list[Any] = [None]
    if me == 0:
        try:
            created = os.memfd_create("anyaccel-shm", os.MFD_CLOEXEC)
            os.ftruncate(created, segment)
            communicator = module.Communicator(created, segment, size, 0, slot, True)
            offer[0] = (os.getpid(), created)
        except OSError as exc:
            offer[0] = f"rank 0 cannot create a {segment}-byte shared-memory segment ({exc})"
    offer = _all_gather_json(offer[0], gather, size, kept)[:1]  # rank 0's offer, to every rank
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
    results = _all_gather_json((failure, os.getpid()), gather, size, kept)
    if created >= 0:
        os.close(created)  # every rank has mapped it (or failed): the mapping keeps it alive
    failures = sorted({f for f, _ in results if f})
    if failures:
        if communicator is not None:
            communicator.close()
        state.reason, state.failed = "; ".join(failures), True
        return
    communicator.set_peer_pids([pid for _, pid in results])
    state.communicator, state.reason = communicator, ""


def _owned_by_cpu_backend(group: Any) -> ShmGroup | None:
    """The state of the anyaccel_shm group behind ``group``'s CPU backend, if it is one.

    Beside other devices' backends (``"cpu:anyaccel_shm,cuda:nccl"``) torch's group holds
    anyaccel_shm as a c10d ``Backend`` whose ``group`` is the Python group that owns a segment:
    calls on torch's group share that segment instead of setting up a second one.
    """
    get_backend = getattr(group, "_get_backend", None)
    if not callable(get_backend):
        return None
    try:
        backend = get_backend(torch.device("cpu"))
    except Exception:  # no CPU backend in this group (torch's error type varies by version)
        return None
    state = getattr(getattr(backend, "group", None), "shm", None)
    return state if isinstance(state, ShmGroup) else None


def _registered(group: Any) -> ShmGroup:
    """The state this process keeps for ``group``, made (not yet set up) on first sight."""
    with _lock:
        entry = _groups.get(id(group))
        if entry is not None and entry[0]() is group:
            return entry[1]
    state = _owned_by_cpu_backend(group) or ShmGroup()
    with _lock:
        entry = _groups.get(id(group))
        if entry is not None and entry[0]() is group:  # another thread got here first
            return entry[1]
        _groups[id(group)] = (weakref.ref(group, _forget(id(group))), state)
        return state


def adopt(group: Any, state: ShmGroup) -> None:
    """Record ``state`` (set up already) as ``group``'s: a backend that owns its segment."""
    with _lock:
        _groups[id(group)] = (weakref.ref(group, _forget(id(group))), state)


def group_state(group: Any) -> ShmGroup:
    """``group``'s shared-memory state, set up collectively on first use.

    Set-up is itself a collective (gloo all-gathers): it runs once, under the group's lock,
    so threads asking at once wait for the one doing it instead of starting a second.
    """
    state = _registered(group)
    if state.ready:
        return state
    with state.lock:
        if not state.ready:
            _set_up(group, state)  # raises as torch.distributed does; the next call retries
            state.ready = True
            announce_fallback(state, dist.get_rank(group), "collectives on this group run")
    return state


def shm_all_reduce_status(group: Any | None = None) -> str:
    """``"shared memory"`` or why ``group`` falls back (``"not set up yet"`` before first use)."""
    pg = resolve_group(group)
    with _lock:
        entry = _groups.get(id(pg))
    if entry is None or entry[0]() is not pg or not entry[1].ready:
        return _NOT_SET_UP
    return "shared memory" if entry[1].communicator is not None else entry[1].reason
