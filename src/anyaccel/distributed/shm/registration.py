"""Registering ``anyaccel_shm`` with ``torch.distributed``, and whether a job's CPU collectives
use it (:func:`cpu_backend_choice`, the one decision).
"""

from __future__ import annotations

import inspect
import os

import torch
import torch.distributed as dist

from anyaccel.distributed.environment import is_launched, launch_info
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.exit_grace import pause_for_backend
from anyaccel.distributed.shm.factory import create_group
from anyaccel.distributed.shm.group import BACKEND_ENV, BACKEND_NAME
from anyaccel.forksafe import ForkSafeLock
from anyaccel.settings import read_on_off

__all__ = [
    "backend_registered",
    "cpu_backend_choice",
    "cpu_backend_name",
    "register_backend",
    "shm_backend_wanted",
]


def backend_registered() -> bool:
    """Whether ``torch.distributed`` knows :data:`BACKEND_NAME` in this process."""
    return BACKEND_NAME in dist.Backend.backend_list  # register_backend appends the name


def register_backend() -> None:
    """Register :data:`BACKEND_NAME` with ``torch.distributed`` for CPU tensors (idempotent).

    Raises ``DistributedSetupError`` on a torch whose ``Backend.register_backend`` takes no
    ``devices`` (before 2.1): upgrade torch, or use backend="gloo".
    """
    with _registering:
        if not backend_registered():
            _register()


#: Two threads asking at once register once (torch refuses a second registration).
_registering = ForkSafeLock()


def _register() -> None:
    register = getattr(dist.Backend, "register_backend", None)
    if register is None or "devices" not in inspect.signature(register).parameters:
        raise DistributedSetupError(
            f"torch {torch.__version__} cannot register the {BACKEND_NAME!r} backend "
            "(Backend.register_backend(..., devices=) is missing): upgrade to torch >= 2.4, "
            "or pass backend='gloo'"
        )
    register(BACKEND_NAME, create_group, extended_api=False, devices=["cpu"])


def shm_backend_wanted(argument: bool | None = None) -> tuple[bool, str]:
    """Whether ``init_distributed`` should use :data:`BACKEND_NAME`, and why (for the trace).

    On by default (CPU ranks on one node; the caller checks the node): ``argument``
    (``init_distributed(shm_backend=...)``) decides when given; otherwise :data:`BACKEND_ENV`
    off (0/false/no/off, any case) keeps gloo, and on (1/true/yes/on) or unset picks the
    backend. Raises :class:`~anyaccel.errors.InvalidSettingError` naming the value when
    :data:`BACKEND_ENV` is set to anything else (read even when ``argument`` decides).
    """
    setting = read_on_off(BACKEND_ENV)
    if argument is not None:
        return argument, f"shm_backend={argument}"
    value = os.environ.get(BACKEND_ENV, "").strip()
    if setting is False:
        return False, f"{BACKEND_ENV}={value}"
    if not hasattr(os, "memfd_create"):
        return False, "this platform has no memfd_create (Linux only)"
    if setting is None:
        return True, f"the default for CPU ranks on one node; {BACKEND_ENV}=0 keeps gloo"
    return True, f"{BACKEND_ENV}={value}"


def _spans_nodes() -> bool:
    """Whether the launcher's variables say this job's ranks are on more than one node."""
    try:
        info = launch_info()
    except DistributedSetupError:  # not launched, or a launcher init_distributed would refuse
        return False
    return info.local_world_size < info.world_size


def cpu_backend_choice(
    argument: bool | None = None, spans_nodes: bool | None = None
) -> tuple[str, str]:
    """The backend for CPU collectives (:data:`BACKEND_NAME`, registered, or ``"gloo"``) and why.

    The one decision, for ``CpuAccelerator.communication_backend_name()`` and
    ``init_distributed()``: :func:`shm_backend_wanted` (``argument``, :data:`BACKEND_ENV`, the
    platform), then gloo for ranks on several nodes (``spans_nodes``; None reads the
    launcher's variables), then gloo where this torch cannot register the backend.
    Raises :class:`~anyaccel.errors.InvalidSettingError` naming a bad :data:`BACKEND_ENV`.
    """
    wanted, why = shm_backend_wanted(argument)
    if wanted and (_spans_nodes() if spans_nodes is None else spans_nodes):
        wanted, why = False, "the ranks span more than one node"
    if wanted:
        try:
            register_backend()
        except DistributedSetupError as exc:
            wanted, why = False, str(exc)
    return (BACKEND_NAME if wanted else "gloo"), why


def cpu_backend_name() -> str:
    """What the CPU accelerator names for ``init_process_group``: registered before it answers.

    Resolved by ``anyaccel.backends.cpu`` from a ``"module:attr"`` string (a backend never
    imports ``anyaccel.distributed``); cheap after the first call, safe in forked and spawned
    processes (each registers in its own interpreter, once). A rank a launcher started also
    gets the pause at exit (``anyaccel.distributed.exit_grace``): the script that asked is
    about to make its CPU group with torch's own ``init_process_group``.
    """
    name = cpu_backend_choice()[0]
    try:
        launched = is_launched()
    except DistributedSetupError:  # a half-set launcher: init_process_group says so
        launched = False
    if launched:
        pause_for_backend(name)
    return name
