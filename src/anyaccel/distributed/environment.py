"""Where this process sits in the job, read from what its launcher set.

torchrun (and DeepSpeed, accelerate), Open MPI, Intel MPI/MPICH and Slurm each name rank, world
size, local rank and local size differently; ``launch_info()`` reads whichever launcher is
complete, strictly, and names the variable when one is missing or inconsistent;
``is_launched()`` answers "was I launched?" so one script runs alone and under a launcher.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.settings import LAUNCHERS, LauncherVariables

__all__ = [
    "DEFAULT_MASTER_PORT",
    "LAUNCHERS",
    "LaunchInfo",
    "LauncherVariables",
    "is_launched",
    "launch_info",
]


DEFAULT_MASTER_PORT = 29500

_INTEGER = re.compile(r"[0-9]+")
#: Slurm's per-node task counts: "4", "4(x2)" or "4(x2),3" (the first node's count is used).
_SLURM_TASKS = re.compile(r"([0-9]+)(\(x[0-9]+\))?(,.*)?")


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


def is_launched(env: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher (torchrun, mpirun, srun...) started this process as part of a job.

    ``False`` when no launcher variable is set: the script runs as one plain process and
    should not call ``init_distributed()``. Raises ``DistributedSetupError`` naming the
    missing variable when a launcher's variables are only half set.
    """
    env = os.environ if env is None else env
    if not any(
        name in env
        for names in LAUNCHERS
        for name in (names.rank, names.world_size, names.local_rank)
    ):
        return False
    _find_launcher(env)  # raises for a half-set launcher instead of guessing
    return True


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
