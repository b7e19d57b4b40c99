"""anyaccel's environment variables: the names read in more than one place, and on/off values.

Each name shared between modules is defined here once (``DS_ACCELERATOR`` is
:data:`anyaccel.probe.FORCE_ENV`, beside the detection vocabulary that reads it).

Every ``ANYACCEL_*`` variable that turns something on or off is read by :func:`read_on_off`:
``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off`` in any case, surrounding
spaces ignored; unset or empty means "not set" (the caller's default). Any other value is an
:class:`~anyaccel.errors.InvalidSettingError` naming the variable, the value and the accepted
spellings, never a silent default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from anyaccel.errors import InvalidSettingError

__all__ = [
    "AUTOLOAD_ENV",
    "EMULATED_ENV",
    "LAUNCHERS",
    "OFF_VALUES",
    "ON_VALUES",
    "SIMULATED_ENV",
    "LauncherVariables",
    "read_on_off",
]

#: The emulated device to install, ``<type>:<count>[:<capacity>][:strict_memory]``
#: (``"npu:4:2GiB"``; ``strict_memory``: device memory out of the host's reach).
EMULATED_ENV = "ANYACCEL_EMULATED"
#: The simulated vendor runtime a starting interpreter enters (``anyaccel.testing.simulated``).
SIMULATED_ENV = "ANYACCEL_SIMULATED"
#: torch's switch for its out-of-tree device backend autoload (torch >= 2.5).
AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"


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

#: The spellings that turn a variable on (compared in lower case).
ON_VALUES: tuple[str, ...] = ("1", "true", "yes", "on")
#: The spellings that turn a variable off (compared in lower case).
OFF_VALUES: tuple[str, ...] = ("0", "false", "no", "off")


def read_on_off(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """Whether on/off variable ``name`` is on; None when it is unset or empty.

    Reads ``environ`` (``os.environ`` by default). Raises :class:`InvalidSettingError` naming
    the variable, its value and the accepted spellings when it is set to anything else.
    """
    raw = (os.environ if environ is None else environ).get(name, "")
    value = raw.strip().lower()
    if not value:
        return None
    if value in ON_VALUES:
        return True
    if value in OFF_VALUES:
        return False
    raise InvalidSettingError(
        f"{name}={raw!r} is not an on/off value: set it to one of "
        f"{'/'.join(ON_VALUES)} (on) or {'/'.join(OFF_VALUES)} (off), in any case, "
        "or unset it for the default"
    )
