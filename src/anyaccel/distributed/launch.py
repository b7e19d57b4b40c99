"""Process-group set-up on ``torch.distributed`` for whatever accelerator is in use.

``init_distributed()`` reads the launcher's environment (torchrun and DeepSpeed, Open MPI,
Intel MPI/MPICH, Slurm), picks the accelerator's collective backend (nccl, hccl, ccl, gloo,
...), selects this process's device and calls ``init_process_group``. Missing variables and
unavailable backends are errors that say what to set or install.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

import torch.distributed as dist

from anyaccel.detection import get_accelerator
from anyaccel.errors import AcceleratorError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "BACKEND_REMEDIES",
    "DEFAULT_MASTER_PORT",
    "LAUNCHERS",
    "DistributedSetupError",
    "LaunchInfo",
    "LauncherVariables",
    "init_distributed",
    "launch_info",
]


class LauncherVariables(NamedTuple):
    """The variables one launcher sets for each process."""

    name: str
    rank: str
    world_size: str
    local_rank: str
    local_world_size: str


#: Launchers by the variables they set, in priority order (torchrun inside Slurm wins).
LAUNCHERS: tuple[LauncherVariables, ...] = (
    LauncherVariables("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    LauncherVariables("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    LauncherVariables("Intel MPI/MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                      "MPI_LOCALNRANKS"),
    LauncherVariables("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                      "SLURM_NTASKS_PER_NODE"),
)  # fmt: skip

DEFAULT_MASTER_PORT = 29500

#: What to install when a collective backend is missing from this torch.
BACKEND_REMEDIES: dict[str, str] = {
    "nccl": "install a CUDA build of PyTorch (NCCL ships with it)",
    "ccl": "pip install oneccl_bind_pt (Intel oneCCL bindings for PyTorch)",
    "xccl": "use torch >= 2.8 built with XPU support, or install oneccl_bind_pt for 'ccl'",
    "hccl": "install torch_npu (Ascend) or habana_frameworks (Gaudi) and import it first",
    "cncl": "install torch_mlu (Cambricon Neuware)",
    "mccl": "install torch_musa (Moore Threads)",
    "tccl": "install torch_sdaa (Tecorigin)",
    "bccl": "install torch_supa (Biren)",
    "mpi": "build PyTorch from source with MPI support",
}

_INTEGER = re.compile(r"[0-9]+")
#: Slurm's per-node task counts: "4", "4(x2)" or "4(x2),3" (the first node's count is used).
_SLURM_TASKS = re.compile(r"([0-9]+)(\(x[0-9]+\))?(,.*)?")


class DistributedSetupError(AcceleratorError):
    """The launch environment or the collective backend is not usable as it stands."""


@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as its launcher described it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str


def _int_var(env: Mapping[str, str], name: str) -> int:
    """A non-negative integer variable, read strictly (no signs, underscores or spaces)."""
    value = env[name]
    pattern = _SLURM_TASKS if name == "SLURM_NTASKS_PER_NODE" else _INTEGER
    match = pattern.fullmatch(value.strip())
    if match is None:
        raise DistributedSetupError(
            f"{name}={value!r} is not an integer; the launcher (or you) must set it to a "
            "non-negative whole number"
        )
    return int(match.group(1)) if pattern is _SLURM_TASKS else int(match.group(0))


def _find_launcher(env: Mapping[str, str]) -> LauncherVariables:
    """The launcher whose rank and world size are both set; half-set ones name what is missing."""
    for names in LAUNCHERS:
        if names.rank in env and names.world_size in env:
            return names
    for names in LAUNCHERS:
        present = [n for n in (names.rank, names.world_size, names.local_rank) if n in env]
        if present:
            missing = [n for n in (names.rank, names.world_size) if n not in env]
            raise DistributedSetupError(
                f"{' and '.join(present)} {'is' if len(present) == 1 else 'are'} set but "
                f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing "
                f"({names.name} variables); set {' and '.join(missing)}, or launch with "
                "torchrun, mpirun or srun, which set them all"
            )
    raise DistributedSetupError(
        "no launcher variables found: set RANK and WORLD_SIZE (torchrun, deepspeed and "
        "accelerate do), or run under mpirun or srun, or pass rank= and world_size= to "
        "init_distributed()"
    )


def _port(env: Mapping[str, str]) -> int:
    """``MASTER_PORT`` as a number in 1..65535 (29500 when unset)."""
    text = env.get("MASTER_PORT", str(DEFAULT_MASTER_PORT))
    port = int(text.strip()) if _INTEGER.fullmatch(text.strip()) else -1
    if not 1 <= port <= 65535:
        raise DistributedSetupError(
            f"MASTER_PORT={text!r} is not a port number; set it to a free TCP port in "
            f"1..65535 (default {DEFAULT_MASTER_PORT})"
        )
    return port


def launch_info(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Read rank, world size and rendezvous address from the launcher's variables.

    Raises ``DistributedSetupError`` naming the variable when one is missing, not an
    integer, or inconsistent with the others (a rank outside the world, a port outside 1-65535).
    """
    env = os.environ if env is None else env
    names = _find_launcher(env)
    rank, world_size = _int_var(env, names.rank), _int_var(env, names.world_size)
    if world_size < 1:
        raise DistributedSetupError(f"{names.world_size}={world_size} must be at least 1")
    if rank >= world_size:
        raise DistributedSetupError(
            f"{names.rank}={rank} is outside 0..{world_size - 1} ({names.world_size}={world_size})"
        )
    local_rank = _int_var(env, names.local_rank) if names.local_rank in env else rank
    if names.local_world_size in env:
        local_size_var = names.local_world_size
    elif "LOCAL_SIZE" in env:
        local_size_var = "LOCAL_SIZE"
    else:
        local_size_var = names.world_size
    local_world_size = _int_var(env, local_size_var)
    if not 1 <= local_world_size <= world_size:
        raise DistributedSetupError(
            f"{local_size_var}={local_world_size} must be in 1..{world_size} "
            f"({names.world_size}={world_size}): it counts this node's processes"
        )
    if local_rank >= local_world_size:
        raise DistributedSetupError(
            f"{names.local_rank}={local_rank} is outside 0..{local_world_size - 1} "
            f"({local_size_var}={local_world_size})"
        )
    master_addr = env.get("MASTER_ADDR", "").strip()
    if not master_addr:
        if local_world_size < world_size:
            raise DistributedSetupError(
                f"MASTER_ADDR is not set and the job spans several nodes ({names.name}: "
                f"{world_size} ranks, {local_world_size} on this node); set MASTER_ADDR to "
                "the address of the rank-0 node"
            )
        master_addr = "127.0.0.1"
    return LaunchInfo(
        rank, world_size, local_rank, local_world_size, master_addr, _port(env), names.name
    )


def _backend_available(backend: str) -> bool:
    check = getattr(dist, "is_backend_available", None)
    if check is not None:
        return bool(check(backend))
    legacy = getattr(dist, f"is_{backend}_available", None)
    return bool(legacy()) if legacy is not None else backend in dist.Backend.backend_list


def select_device_index(info: LaunchInfo, accelerator: Accelerator) -> int | None:
    """The device this local rank uses, or ``None`` on the CPU (where an index is a rank).

    ``local_rank`` when the node shows at least ``local_world_size`` devices; 0 when each
    rank sees exactly one (per-rank visible devices); otherwise ``DistributedSetupError``,
    since ranks would silently share a device.
    """
    if accelerator._name == "cpu":
        return None
    count = accelerator.device_count()
    if count >= info.local_world_size:
        return info.local_rank
    if count == 1:
        return 0
    variable = (accelerator.visible_devices_envs() or ["<none>"])[0]
    shown = os.environ.get(variable)
    raise DistributedSetupError(
        f"LOCAL_RANK={info.local_rank} of LOCAL_WORLD_SIZE={info.local_world_size} has no "
        f"device of its own: this process sees {count} {accelerator._name} device(s) "
        f"({variable}={shown!r}). Start at most {count} processes on this node, show each "
        f"rank exactly one device through {variable}, or pass set_device=False"
    )


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
) -> LaunchInfo:
    """Join the job's default process group on this accelerator's collective backend.

    Reads the launcher's variables (``launch_info``), exports them as torchrun's names so
    ``env://`` rendezvous works under MPI and Slurm too, selects the device of this process's
    local rank, optionally binds this rank to its share of the node's CPU cores
    (``bind_cores=True``, ``core_list`` to restrict the cores), and initialises the group.

    Raises ``DistributedSetupError`` before any rendezvous when the launcher's variables are
    missing or inconsistent, the backend is unavailable, or local ranks would share a device;
    ``CoreBindingError`` when the cores cannot be split. Calling it again once initialised
    returns the live group's rank and world size, warning if the environment disagrees.
    """
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
    backend = backend or accelerator.communication_backend_name()
    if not _backend_available(backend):
        remedy = BACKEND_REMEDIES.get(backend, f"install the package that provides {backend!r}")
        raise DistributedSetupError(
            f"collective backend {backend!r} (for accelerator {accelerator._name!r}) is not "
            f"available in this process: {remedy}; or pass backend='gloo' for CPU collectives"
        )
    device_index = select_device_index(info, accelerator) if set_device else None
    if bind_cores or core_list is not None:
        from anyaccel.distributed.binding import bind_cores as apply_binding

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
    kwargs = {"timeout": timeout} if timeout is not None else {}
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=info.rank,
        world_size=info.world_size,
        **kwargs,  # type: ignore[arg-type]
    )
    return info
