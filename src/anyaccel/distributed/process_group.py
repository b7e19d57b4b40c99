"""Join the job's process group on ``torch.distributed`` for whatever accelerator is in use.

``init_distributed()`` reads the launcher's environment (``launch_info``), picks the
accelerator's collective backend (nccl, hccl, ccl, gloo, ...), selects this process's device,
optionally binds its CPU cores, and calls ``init_process_group``. Missing variables and
unavailable backends are errors that say what to set or install.
"""

from __future__ import annotations

import itertools
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from anyaccel.abstract import Accelerator
from anyaccel.detection import get_accelerator
from anyaccel.distributed.agreement import AGREEMENT_WAIT_S, BackendChoice, agree_on_backend
from anyaccel.distributed.binding import bind_cores as apply_binding
from anyaccel.distributed.devices import select_device_index
from anyaccel.distributed.environment import DEFAULT_MASTER_PORT, LaunchInfo, launch_info
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.exit_grace import CPU_BACKENDS, backend_names, pause_for_backend
from anyaccel.distributed.shm.backend import (
    BACKEND_ENV,
    BACKEND_NAME,
    cpu_backend_choice,
    making_group,
    register_backend,
)
from anyaccel.errors import InvalidSettingError
from anyaccel.probe import resolve
from anyaccel.registry import BUILTIN_CANDIDATES

__all__ = [
    "BACKEND_REMEDIES",
    "backend_choice",
    "backend_remedy",
    "cpu_collectives",
    "init_distributed",
]

logger = logging.getLogger(__name__)

#: What the last ``init_distributed()`` in this process chose for CPU tensors, and why.
_choice: dict[str, str] = {}
#: Numbers this process's backend agreements, so a second job in one process reads no stale key.
_agreements = itertools.count()


def backend_choice() -> dict[str, str]:
    """The collective backend ``init_distributed()`` chose in this process and why ({} before)."""
    return dict(_choice)


def cpu_collectives() -> str:
    """Where CPU collectives go, for ``anyaccel report``: this process's choice, else the default.

    ``"gloo (opt-in: ...)"``, ``"anyaccel_shm (ANYACCEL_SHM_BACKEND=1)"``...
    """
    if _choice and dist.is_available() and dist.is_initialized():
        return f"{_choice['backend']} ({_choice['reason']}; chosen by init_distributed)"
    try:
        backend, why = cpu_backend_choice()
    except InvalidSettingError as exc:
        return f"none: init_distributed() will refuse the setting ({exc})"
    return f"{backend} ({why})"


def _default_backend(accelerator_name: str, native: str, info: LaunchInfo, shm: bool | None) -> str:
    """The backend to use when the caller names none: anyaccel_shm for CPU ranks on one node."""
    if accelerator_name != "cpu" or native not in ("gloo", BACKEND_NAME):
        _choice.update(backend=native, reason=f"the {accelerator_name} accelerator's backend")
        return native
    backend, why = cpu_backend_choice(shm, info.local_world_size < info.world_size)
    _choice.update(backend=backend, reason=why)
    logger.info("init_distributed: CPU collectives on %s (%s)", backend, why)
    return backend


#: What to install when one of torch's own collective backends is missing. A vendor's backend
#: (hccl, cncl, ...) is answered from the backend classes: their runtime package.
BACKEND_REMEDIES: dict[str, str] = {
    "nccl": "install a CUDA build of PyTorch (NCCL ships with it)",
    "ccl": "pip install oneccl_bind_pt (Intel oneCCL bindings for PyTorch)",
    "xccl": "use torch >= 2.8 built with XPU support, or install oneccl_bind_pt for 'ccl'",
    "mpi": "build PyTorch from source with MPI support",
}


def _runtime_packages(backend: str, accelerator: Accelerator) -> list[str]:
    """The runtime packages of the backend classes whose collective backend is ``backend``.

    Read from the classes (the one in use, then anyaccel's built-ins), never restated here.
    """
    classes: list[object] = [type(accelerator)]
    classes += [resolve(c.accelerator) for c in BUILTIN_CANDIDATES if c.is_builtin]
    packages: list[str] = []
    for cls in classes:
        package = getattr(cls, "runtime_package", None)
        if cls is type(accelerator):
            names = backend_names(accelerator.communication_backend_name())
        else:
            named = getattr(cls, "_communication_backend_name", None)
            names = [named] if isinstance(named, str) else []
        if isinstance(package, str) and backend in names and package not in packages:
            packages.append(package)
    return packages


def backend_remedy(backend: str, accelerator: Accelerator) -> str:
    """What to install so that collective backend ``backend`` is available."""
    if backend in BACKEND_REMEDIES:
        return BACKEND_REMEDIES[backend]
    packages = _runtime_packages(backend, accelerator)
    if packages:
        return f"install {' or '.join(packages)} and import it first"
    return f"install the package that provides {backend!r}"


def _backend_available(backend: str) -> bool:
    """Whether every backend ``backend`` names (one, or a device-mapped list) can run here."""
    names = backend_names(backend)
    return bool(names) and all(_one_backend_available(name) for name in names)


def _one_backend_available(backend: str) -> bool:
    check = getattr(dist, "is_backend_available", None)
    if check is not None:
        return bool(check(backend))
    legacy = getattr(dist, f"is_{backend}_available", None)
    return bool(legacy()) if legacy is not None else backend in dist.Backend.backend_list


def _live_info(env: Mapping[str, str]) -> LaunchInfo:
    """The running default group's rank and size; warns where the environment disagrees."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        described: LaunchInfo | None = launch_info(env)
    except DistributedSetupError:
        described = None
    if described is None:
        return LaunchInfo(
            rank, world_size, rank, world_size, env.get("MASTER_ADDR", "127.0.0.1"),
            DEFAULT_MASTER_PORT, "existing process group",
        )  # fmt: skip
    if (described.rank, described.world_size) != (rank, world_size):
        warnings.warn(
            f"torch.distributed is already initialised as rank {rank} of {world_size}, but the "
            f"environment ({described.launcher}) says rank {described.rank} of "
            f"{described.world_size}; returning the live group's values",
            RuntimeWarning,
            stacklevel=3,
        )
    local_world_size = min(described.local_world_size, world_size)
    return LaunchInfo(
        rank, world_size, min(described.local_rank, local_world_size - 1), local_world_size,
        described.master_addr, described.master_port, described.launcher,
    )  # fmt: skip


def init_distributed(
    backend: str | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    timeout: timedelta | None = None,
    set_device: bool = True,
    bind_cores: bool = False,
    core_list: str | Sequence[int] | None = None,
    shm_backend: bool | None = None,
) -> LaunchInfo:
    """Join the job's default process group on this accelerator's collective backend.

    Reads the launcher's variables (``launch_info``), exports them as torchrun's names so
    ``env://`` rendezvous works under MPI and Slurm too, selects the device of this process's
    local rank, optionally binds this rank to its share of the node's CPU cores
    (``bind_cores=True``, ``core_list`` to restrict the cores), and initialises the group.

    With no ``backend``, CPU ranks all on one node get ``"anyaccel_shm"`` (shared-memory
    collectives, gloo for the rest) unless ``shm_backend=False`` or ``ANYACCEL_SHM_BACKEND=0``
    keeps gloo; ranks across nodes get gloo; ``backend_choice()`` tells what was chosen and
    why.

    Raises ``DistributedSetupError`` before any rendezvous when the launcher's variables are
    missing or inconsistent, the backend is unavailable, or local ranks would share a device,
    and right after it (on every rank, not at the timeout) when the ranks chose different
    backends for CPU tensors, naming the setting that differs on which rank;
    ``InvalidSettingError`` when ``ANYACCEL_SHM_BACKEND`` is not an on/off value;
    ``CoreBindingError`` when the cores cannot be split. Calling it again once initialised
    returns the live group's rank and world size, warning if the environment disagrees.
    """
    _check_arguments(backend, timeout, set_device, bind_cores, shm_backend)
    if dist.is_available() and dist.is_initialized():
        return _live_info(os.environ)
    env: dict[str, str] = dict(os.environ)
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise DistributedSetupError("pass rank= and world_size= together, or neither")
        env.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        env.setdefault("LOCAL_RANK", str(rank))
        env.setdefault("LOCAL_WORLD_SIZE", str(world_size))
    info = launch_info(env)
    if not dist.is_available():
        raise DistributedSetupError("this torch build has no torch.distributed support")

    accelerator = get_accelerator()
    if backend is None:
        try:
            backend = _default_backend(
                accelerator._name, accelerator.communication_backend_name(), info, shm_backend
            )
        except InvalidSettingError as exc:
            if info.world_size > 1:
                _refuse_with_the_others(info, timeout, exc)
            raise
    else:
        _choice.update(backend=backend, reason="backend= given")
    if BACKEND_NAME in backend_names(backend):
        register_backend()
    if not _backend_available(backend):
        missing = [n for n in backend_names(backend) if not _one_backend_available(n)] or [backend]
        remedy = "; ".join(backend_remedy(name, accelerator) for name in missing)
        raise DistributedSetupError(
            f"collective backend {backend!r} (for accelerator {accelerator._name!r}) is not "
            f"available in this process: {remedy}; or pass backend='gloo' for CPU collectives"
        )
    pause_for_backend(backend)  # see anyaccel.distributed.exit_grace
    device_index = select_device_index(info, accelerator) if set_device else None
    if bind_cores or core_list is not None:
        apply_binding(info.local_rank, info.local_world_size, core_list=core_list)
    for name, value in (
        ("RANK", info.rank),
        ("WORLD_SIZE", info.world_size),
        ("LOCAL_RANK", info.local_rank),
        ("LOCAL_WORLD_SIZE", info.local_world_size),
        ("MASTER_ADDR", info.master_addr),
        ("MASTER_PORT", info.master_port),
    ):
        os.environ[name] = str(value)
    if device_index is not None:
        accelerator.set_device(device_index)
    kwargs: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
    if info.world_size > 1 and CPU_BACKENDS & set(backend_names(backend)):
        kwargs["store"] = _agreed_store(backend, info, timeout)
    else:
        kwargs["init_method"] = "env://"
    with making_group(backend):  # anyaccel_shm's factory: which c10d object this spec gets
        dist.init_process_group(
            backend=backend, rank=info.rank, world_size=info.world_size, **kwargs
        )
    return info


def _check_arguments(
    backend: object, timeout: object, set_device: object, bind_cores: object, shm_backend: object
) -> None:
    """Refuse an argument of the wrong kind before anything changes (environment, device, cores)."""
    if backend is not None and not (isinstance(backend, str) and backend.strip()):
        raise DistributedSetupError(
            f"init_distributed(backend={backend!r}): pass a backend name such as 'gloo' or "
            "'cpu:gloo,cuda:nccl', or leave it out for the accelerator's own"
        )
    if timeout is not None and not (isinstance(timeout, timedelta) and timeout.total_seconds() > 0):
        raise DistributedSetupError(
            f"init_distributed(timeout={timeout!r}): pass a positive datetime.timedelta, e.g. "
            "timeout=timedelta(minutes=30), or leave it out for torch's default"
        )
    for name, value, optional in (
        ("set_device", set_device, False),
        ("bind_cores", bind_cores, False),
        ("shm_backend", shm_backend, True),
    ):
        if not isinstance(value, bool) and not (optional and value is None):
            allowed = "True, False or None" if optional else "True or False"
            raise DistributedSetupError(f"init_distributed({name}={value!r}): pass {allowed}")


def _refuse_with_the_others(
    info: LaunchInfo, timeout: timedelta | None, refused: InvalidSettingError
) -> None:
    """Tell the other ranks, on the job's store, that this one refuses its setting, then return.

    They would otherwise wait for this rank in ``init_process_group`` until the group's
    timeout; told, each raises at once naming the setting (``agree_on_backend``). Nothing of
    this process changes: the store is reached by its address, not through the environment.
    """
    from torch.distributed.constants import default_pg_timeout

    limit = default_pg_timeout if timeout is None else timeout
    wait = min(AGREEMENT_WAIT_S, limit.total_seconds())
    host = f"[{info.master_addr}]" if ":" in info.master_addr else info.master_addr
    c10d: Any = dist  # torch's stubs declare no rendezvous export
    mine = BackendChoice("", str(refused), os.environ.get(BACKEND_ENV))
    key = f"anyaccel/init_distributed/{next(_agreements)}/backend"
    try:
        store, _, _ = next(
            c10d.rendezvous(
                f"tcp://{host}:{info.master_port}",
                rank=info.rank,
                world_size=info.world_size,
                timeout=timedelta(seconds=wait),
            )
        )
        agree_on_backend(store, info.rank, info.world_size, mine, key, wait)
    except (DistributedSetupError, RuntimeError, OSError, ValueError):
        pass  # the others were told, or are gone: this rank's own error follows


def _agreed_store(backend: str, info: LaunchInfo, timeout: timedelta | None) -> Any:
    """The job's store (``env://`` rendezvous), once every rank is known to use ``backend``.

    Made as ``init_process_group`` makes it for an ``init_method`` (same rendezvous, timeout
    and ``default_pg`` prefix), so that the ranks can compare their choice on it first.
    """
    from torch.distributed.constants import default_pg_timeout

    timeout = default_pg_timeout if timeout is None else timeout
    c10d: Any = dist  # torch's stubs declare neither rendezvous's nor PrefixStore's export
    store, _, _ = next(
        c10d.rendezvous("env://", rank=info.rank, world_size=info.world_size, timeout=timeout)
    )
    store.set_timeout(timeout)
    setting = os.environ.get(BACKEND_ENV)
    mine = BackendChoice(backend, _choice.get("reason", "backend= given"), setting)
    key = f"anyaccel/init_distributed/{next(_agreements)}/backend"
    wait = min(AGREEMENT_WAIT_S, timeout.total_seconds())
    agree_on_backend(store, info.rank, info.world_size, mine, key, wait)
    return c10d.PrefixStore("default_pg", store)
