"""Process-group set-up on ``torch.distributed`` for whatever accelerator is in use.

``init_distributed()`` reads the launcher's environment (torchrun and DeepSpeed, Open MPI,
Intel MPI/MPICH, Slurm), picks the accelerator's collective backend (nccl, hccl, ccl, gloo,
...), selects this process's device and calls ``init_process_group``. Missing variables and
unavailable backends are errors that say what to set or install.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from anyaccel.detection import get_accelerator
from anyaccel.errors import AcceleratorError

__all__ = ["DistributedSetupError", "LaunchInfo", "init_distributed", "launch_info"]

#: Launchers by the variables they set: (name, rank, world size, local rank, local size).
LAUNCHERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("Intel MPI/MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
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
    value = env[name]
    try:
        return int(value.split("(")[0].split(",")[0])  # Slurm may say "4(x2)" or "4,4"
    except ValueError:
        raise DistributedSetupError(f"{name}={value!r} is not an integer") from None


def launch_info(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Read rank, world size and rendezvous address from the launcher's variables."""
    env = os.environ if env is None else env
    found = next((names for names in LAUNCHERS if names[1] in env and names[2] in env), None)
    if found is None:
        raise DistributedSetupError(
            "no launcher variables found: set RANK and WORLD_SIZE (torchrun, deepspeed and "
            "accelerate do), or run under mpirun or srun, or pass rank= and world_size= to "
            "init_distributed()"
        )
    launcher, rank_var, size_var, local_rank_var, local_size_var = found
    rank, world_size = _int_var(env, rank_var), _int_var(env, size_var)
    local_rank = _int_var(env, local_rank_var) if local_rank_var in env else rank
    if local_size_var in env:
        local_world_size = _int_var(env, local_size_var)
    else:
        local_world_size = _int_var(env, "LOCAL_SIZE") if "LOCAL_SIZE" in env else world_size
    if not 0 <= rank < world_size:
        raise DistributedSetupError(
            f"{rank_var}={rank} is outside 0..{world_size - 1} ({size_var}={world_size})"
        )
    master_addr = env.get("MASTER_ADDR")
    if master_addr is None:
        if local_world_size < world_size:
            raise DistributedSetupError(
                f"MASTER_ADDR is not set and the job spans several nodes ({launcher}: "
                f"{world_size} ranks, {local_world_size} on this node); set MASTER_ADDR to "
                "the address of the rank-0 node"
            )
        master_addr = "127.0.0.1"
    port_text = env.get("MASTER_PORT", str(DEFAULT_MASTER_PORT))
    if not port_text.isdigit():
        raise DistributedSetupError(f"MASTER_PORT={port_text!r} is not a port number")
    return LaunchInfo(
        rank, world_size, local_rank, local_world_size, master_addr, int(port_text), launcher
    )


def _backend_available(backend: str) -> bool:
    check = getattr(dist, "is_backend_available", None)
    if check is not None:
        return bool(check(backend))
    legacy = getattr(dist, f"is_{backend}_available", None)
    return bool(legacy()) if legacy is not None else backend in dist.Backend.backend_list


def init_distributed(
    backend: str | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    timeout: timedelta | None = None,
    set_device: bool = True,
) -> LaunchInfo:
    """Join the job's default process group on this accelerator's collective backend.

    Reads the launcher's variables (``launch_info``), exports them as torchrun's names so
    ``env://`` rendezvous works under MPI and Slurm too, selects the device of this process's
    local rank and initialises the group. Calling it again once initialised returns the
    same information without re-initialising.
    """
    env: dict[str, str] = dict(os.environ)
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise DistributedSetupError("pass rank= and world_size= together, or neither")
        env.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        env.setdefault("LOCAL_RANK", str(rank))
        env.setdefault("LOCAL_WORLD_SIZE", str(world_size))
    info = launch_info(env)
    if dist.is_available() and dist.is_initialized():
        return info
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
    for name, value in (
        ("RANK", info.rank),
        ("WORLD_SIZE", info.world_size),
        ("LOCAL_RANK", info.local_rank),
        ("LOCAL_WORLD_SIZE", info.local_world_size),
        ("MASTER_ADDR", info.master_addr),
        ("MASTER_PORT", info.master_port),
    ):
        os.environ[name] = str(value)
    if set_device and accelerator._name != "cpu" and accelerator.device_count() > 0:
        accelerator.set_device(info.local_rank % accelerator.device_count())
    kwargs = {"timeout": timeout} if timeout is not None else {}
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=info.rank,
        world_size=info.world_size,
        **kwargs,  # type: ignore[arg-type]
    )
    return info
