"""pytest support for the conformance kit, so a vendor's own suite proves its backend.

Enabled automatically when anyaccel is installed (``pytest11`` entry point), or with
``-p anyaccel.testing.pytest_plugin``. Two ways in::

    from anyaccel.testing.pytest_plugin import conformance_tests
    test_acme_conformance = conformance_tests("acme_accel:AcmeAccelerator")  # one test per check

    def test_acme(anyaccel_conformance):                                   # one test in all
        anyaccel_conformance(AcmeAccelerator)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from anyaccel.testing.conformance import ConformanceReport

# pytest loads this module in every session of an environment with anyaccel installed, so
# it imports nothing heavy (not torch, not the kit) until a test asks for the kit.

__all__ = ["anyaccel_conformance", "conformance_tests"]

ContextFactory = Callable[[], AbstractContextManager[Any]]


def _context(context: ContextFactory | None) -> AbstractContextManager[Any]:
    return context() if context is not None else contextlib.nullcontext()


def conformance_tests(
    target: object, *, checks: Iterable[str] | None = None, context: ContextFactory | None = None
) -> Callable[[str], None]:
    """A test function parametrised over the kit's checks; assign it to a ``test_*`` name.

    ``target`` is a class, factory, instance or ``"module:Class"``; ``context`` (e.g. a
    simulated runtime) is entered around each check. Skipped checks show as pytest skips.
    """
    from anyaccel.testing.conformance import CHECKS, load_accelerator, prepare, run_check

    names = list(CHECKS) if checks is None else list(checks)

    @pytest.mark.parametrize("check", names)
    def test_conformance(check: str) -> None:
        prepare()
        with _context(context):
            accelerator, _label = load_accelerator(target)
            result = run_check(accelerator, check)
        if result.status == "skipped":
            pytest.skip("; ".join(result.messages))
        if result.status == "failed":
            pytest.fail(f"{check}:\n  - " + "\n  - ".join(result.messages), pytrace=False)

    return test_conformance


@pytest.fixture
def anyaccel_conformance() -> Callable[..., ConformanceReport]:
    """Run the whole kit on a target; fails the test with the readable report if a check fails."""

    def check(
        target: object,
        checks: Iterable[str] | None = None,
        context: ContextFactory | None = None,
    ) -> ConformanceReport:
        from anyaccel.testing.conformance import prepare, run_conformance

        prepare()
        with _context(context):
            report = run_conformance(target, checks)
        if not report.passed:
            pytest.fail(report.format(), pytrace=False)
        return report

    return check
