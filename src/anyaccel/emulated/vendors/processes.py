"""A whole process on a simulated vendor over the emulated device, and the processes it starts.

``python -m anyaccel.testing.simulated npu:2 train.py`` enters the simulation ``npu:2`` for the
rest of its process (:func:`enter_for_process`) and makes the Python processes the script
starts enter it too (:func:`propagate_to_children`: ``ANYACCEL_SIMULATED`` and the
``sitecustomize`` in ``startup/`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from anyaccel.settings import SIMULATED_ENV

if TYPE_CHECKING:
    from anyaccel.testing.simulated.device_module import SimulatedDeviceModule

__all__ = [
    "EMULATED_VENDORS",
    "SIMULATED_ENV",
    "SITE_DIR",
    "enter_for_process",
    "parse_simulation",
    "propagate_to_children",
    "simulation_for",
]

#: The folder holding the ``sitecustomize`` that enters it.
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")

#: The simulated vendors whose device is a PrivateUse1 device, so the emulation can be theirs.
EMULATED_VENDORS = ("npu", "mlu", "sdaa", "musa", "supa")


def parse_simulation(spec: str) -> tuple[str, int]:
    """``VENDOR[:COUNT]`` (``npu:2``; two devices by default) as ``(vendor, count)``.

    Checks only; installs nothing. Raises ``ValueError`` naming the bad part and what is accepted.
    """
    vendor, _, count_text = spec.partition(":")
    if vendor not in EMULATED_VENDORS:
        raise ValueError(
            f"{vendor!r} is not a simulated vendor that can run on emulated devices; use one of "
            f"{', '.join(EMULATED_VENDORS)} (cuda, xpu and hpu are torch's own device types, "
            "which PrivateUse1 cannot take)"
        )
    try:
        count = int(count_text) if count_text else 2
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"device count {count_text!r} in {spec!r} is not a positive integer")
    return vendor, count


def _simulations() -> dict[str, Callable[..., Any]]:
    """``simulate_<vendor>`` for each of ``EMULATED_VENDORS``."""
    from anyaccel.testing.simulated.npu import simulate_npu
    from anyaccel.testing.simulated.privateuse1 import (
        simulate_mlu,
        simulate_musa,
        simulate_sdaa,
        simulate_supa,
    )

    return {
        "npu": simulate_npu,
        "mlu": simulate_mlu,
        "sdaa": simulate_sdaa,
        "musa": simulate_musa,
        "supa": simulate_supa,
    }


def simulation_for(spec: str) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """The emulated simulation ``VENDOR[:COUNT]`` names (see :func:`parse_simulation`).

    For some vendors making it installs the devices already (torch names them once per
    process); check a spec with :func:`parse_simulation` alone.
    """
    vendor, count = parse_simulation(spec)
    simulate = _simulations()[vendor]
    manager: contextlib.AbstractContextManager[SimulatedDeviceModule] = simulate(
        count, emulated=True
    )
    return manager


_process_simulation: contextlib.ExitStack | None = None


def enter_for_process(spec: str) -> None:
    """Enter the simulation ``spec`` names for the rest of this process (once; idempotent).

    Raises ``ValueError`` for a bad ``spec`` and ``EmulatedDeviceError`` when this process
    already entered another one (the one rule of ``anyaccel.emulated.state``: torch names
    PrivateUse1 once per process).
    """
    global _process_simulation
    vendor, count = parse_simulation(spec)
    if _process_simulation is not None:
        from anyaccel.emulated.spec import EmulatedSpec
        from anyaccel.emulated.state import check_installable

        check_installable(EmulatedSpec(vendor, count))  # the same devices, or the rule's error
        return
    stack = contextlib.ExitStack()
    stack.enter_context(simulation_for(spec))
    _process_simulation = stack


def propagate_to_children(spec: str) -> None:
    """Make the Python processes this one starts enter ``spec`` at startup, as it did.

    Sets ``ANYACCEL_SIMULATED`` and puts the folder of its ``sitecustomize`` first on
    ``PYTHONPATH`` (a ``sitecustomize`` of the user's own is then shadowed in those children).
    """
    os.environ[SIMULATED_ENV] = spec
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    os.environ["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *paths])
