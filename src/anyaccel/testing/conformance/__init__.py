"""The conformance kit: named checks of the accelerator contract, run against any accelerator.

Use it from code (``run_conformance(MyAccelerator)`` in this process, or
``anyaccel.testing.isolation.run_isolated("pkg.mod:Class")`` in worker processes that a target's
crash, exit or hang cannot take down), the command line (``anyaccel conformance
package.module:Class``, isolated) or pytest (``anyaccel.testing.pytest_plugin``, isolated).
Each check returns failures as sentences naming the member, what it gave and what the contract
wants; a check that cannot run here (e.g. no tensor can live on a simulated device) is skipped
with the reason. Checks restore whatever state they change (seeds, compile backend).

The package by job: ``checks`` (the checks and :data:`CHECKS`), ``report`` (each check's
verdict and the report) and ``runner`` (loading a target and running the checks in this
process); ``anyaccel.testing.isolation`` runs them in worker processes.
"""

from __future__ import annotations

from anyaccel.testing.conformance.checks import CHECKS, DEVICE_CHECKS, SkipCheck, no_device_reason
from anyaccel.testing.conformance.report import (
    NO_DEVICE,
    CheckResult,
    ConformanceReport,
    describe_exception,
)
from anyaccel.testing.conformance.runner import (
    ConformanceError,
    load_accelerator,
    prepare,
    run_check,
    run_conformance,
)

__all__ = [
    "CHECKS",
    "DEVICE_CHECKS",
    "NO_DEVICE",
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "SkipCheck",
    "describe_exception",
    "load_accelerator",
    "no_device_reason",
    "prepare",
    "run_check",
    "run_conformance",
]
