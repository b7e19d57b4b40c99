"""pytest support: the conformance kit for a vendor's own suite, and emulated accelerators.

Enabled automatically when anyaccel is installed (``pytest11`` entry point), or with
``-p anyaccel.testing.pytest_plugin``.

``pytest --anyaccel-emulated=npu:2`` (or the ini key ``anyaccel_emulated``, or
``DS_ACCELERATOR=emulated`` with ``ANYACCEL_EMULATED``) runs the session on emulated
accelerators: they are installed before collection, ``get_accelerator()`` returns them, and the
processes the tests start inherit the choice. The conformance kit, two ways in::

    from anyaccel.testing.pytest_plugin import conformance_tests
    test_acme_conformance = conformance_tests("acme_accel:AcmeAccelerator")  # one test per check

    def test_acme(anyaccel_conformance):                                   # one test in all
        anyaccel_conformance(AcmeAccelerator)

The target runs in worker processes (``anyaccel.testing.isolation``), so a target that exits,
crashes or hangs fails its check instead of the test session; all of a target's checks share
one worker run. A target (or ``context``) that another process cannot import (a lambda, a
local class, an instance) runs in the test process, with a warning.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pytest

from anyaccel.probe import FORCE_ENV
from anyaccel.settings import EMULATED_ENV

if TYPE_CHECKING:
    from anyaccel.testing.conformance import ConformanceReport

# pytest loads this module in every session of an environment with anyaccel installed, so
# it imports nothing heavy (not torch, not the kit) until a test asks for the kit.

__all__ = [
    "EMULATED_INI",
    "EMULATED_OPTION",
    "anyaccel_conformance",
    "conformance_tests",
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
]

#: The command-line option that runs the session on emulated accelerators.
EMULATED_OPTION = "--anyaccel-emulated"
#: The ini key (pytest.ini, pyproject.toml's [tool.pytest.ini_options]) that does the same.
EMULATED_INI = "anyaccel_emulated"
_SPEC_HELP = "TYPE:COUNT[:CAPACITY][:strict_memory], e.g. npu:2, emu:2:8GiB or npu:2:strict_memory"
#: The environment the choice travels in (read by get_accelerator(), here and in subprocesses).
_FORCE_ENV, _FORCE_VALUE, _SPEC_ENV = FORCE_ENV, "emulated", EMULATED_ENV
_emulated_key = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--anyaccel-emulated`` and the ``anyaccel_emulated`` ini key."""
    parser.getgroup("anyaccel").addoption(
        EMULATED_OPTION,
        dest="anyaccel_emulated",
        default=None,
        metavar="TYPE:COUNT[:CAPACITY][:strict_memory]",
        help="run the session on emulated accelerators, the ones get_accelerator() returns "
        f"({_SPEC_HELP}); also the {EMULATED_INI} ini key",
    )
    parser.addini(EMULATED_INI, f"run the session on emulated accelerators ({_SPEC_HELP})")


def _emulated_spec(config: pytest.Config) -> str | None:
    """The spec asked for: the option, else the ini key, else DS_ACCELERATOR=emulated's."""
    spec = config.getoption("anyaccel_emulated") or str(config.getini(EMULATED_INI) or "")
    if spec:
        return spec.strip()
    if os.environ.get(_FORCE_ENV, "").strip().lower() == _FORCE_VALUE:
        return os.environ.get(_SPEC_ENV, "").strip()  # "": the default devices
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Install the emulated accelerators before collection, when the session asks for them.

    Raises ``pytest.UsageError`` naming the spec (and the format, when that is what is wrong)
    when it is not valid or the devices cannot be installed here.
    """
    spec = _emulated_spec(config)
    if spec is None:
        return
    saved = {name: os.environ.get(name) for name in (_FORCE_ENV, _SPEC_ENV)}

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    config.add_cleanup(restore)
    os.environ[_FORCE_ENV] = _FORCE_VALUE
    if spec:
        os.environ[_SPEC_ENV] = spec
    from anyaccel import reset_accelerator, set_accelerator
    from anyaccel.emulated.spec import spec_from_environment
    from anyaccel.testing.emulated import install

    try:  # installed here, not under detection's time limit: a first use builds the device
        chosen = spec_from_environment()
        accelerator = install(
            chosen.device_type, chosen.device_count, chosen.memory_capacity, chosen.strict_memory
        )
    except Exception as exc:
        raise pytest.UsageError(
            f"{EMULATED_OPTION}={spec or os.environ.get(_SPEC_ENV, '')!r} cannot run: {exc}"
        ) from exc
    reset_accelerator()
    set_accelerator(accelerator)
    config.stash[_emulated_key] = (
        f"anyaccel: emulated accelerator {accelerator.device_name()!r} x "
        f"{accelerator.device_count()} (collectives: {accelerator.communication_backend_name()})"
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    """The emulated accelerator the session runs on, if any."""
    return config.stash.get(_emulated_key, None)


ContextFactory = Callable[[], AbstractContextManager[Any]]


def _context(context: ContextFactory | None) -> AbstractContextManager[Any]:
    return context() if context is not None else contextlib.nullcontext()


#: Isolated reports by (target, checks, context, timeout): one worker run serves every check.
_reports: dict[tuple[str, tuple[str, ...], str | None, float], ConformanceReport] = {}


def _isolated_report(
    target: object,
    checks: list[str],
    context: ContextFactory | None,
    timeout: float | None,
) -> ConformanceReport | None:
    """The report from worker processes, or ``None`` (with a warning) when they cannot import it."""
    from anyaccel.testing.isolation import DEFAULT_TIMEOUT, import_reference, run_isolated

    reference = import_reference(target)
    context_reference = None if context is None else import_reference(context)
    if reference is None or (context is not None and context_reference is None):
        unnamed = target if reference is None else context
        warnings.warn(
            f"conformance of {unnamed!r} runs in the test process, not isolated: a worker "
            "process cannot import it; give a module-level class or 'package.module:Class'",
            stacklevel=3,
        )
        return None
    seconds = DEFAULT_TIMEOUT if timeout is None else timeout
    key = (reference, tuple(checks), context_reference, seconds)
    report = _reports.get(key)
    if report is None:
        report = run_isolated(reference, checks, timeout=seconds, context=context)
        _reports[key] = report
    return report


def _in_process_report(
    target: object, checks: list[str], context: ContextFactory | None
) -> ConformanceReport:
    from anyaccel.testing.conformance import prepare, run_conformance

    prepare()
    with _context(context):
        return run_conformance(target, checks)


def conformance_tests(
    target: object,
    *,
    checks: Iterable[str] | None = None,
    context: ContextFactory | None = None,
    timeout: float | None = None,
) -> Callable[[str], None]:
    """A test function parametrised over the kit's checks; assign it to a ``test_*`` name.

    ``target`` is a class, factory or ``"module:Class"``; ``context`` (e.g. a simulated
    runtime) is entered around the target in the worker; ``timeout`` (seconds, default
    ``isolation.DEFAULT_TIMEOUT``) fails a check that hangs. Skipped checks show as skips.
    """
    from anyaccel.testing.conformance import CHECKS

    names = list(CHECKS) if checks is None else list(checks)

    @pytest.mark.parametrize("check", names)
    def test_conformance(check: str) -> None:
        from anyaccel.testing.isolation import LOAD_CHECK

        report = _isolated_report(target, names, context, timeout)
        if report is None:
            report = _in_process_report(target, [check], context)
        by_name = {result.name: result for result in report.results}
        if LOAD_CHECK in by_name:
            pytest.fail(f"{check}: {by_name[LOAD_CHECK].messages[0]}", pytrace=False)
        result = by_name[check]
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
        timeout: float | None = None,
    ) -> ConformanceReport:
        from anyaccel.testing.conformance import CHECKS

        names = list(CHECKS) if checks is None else list(checks)
        report = _isolated_report(target, names, context, timeout)
        if report is None:
            report = _in_process_report(target, names, context)
        if not report.passed:
            pytest.fail(report.format(), pytrace=False)
        return report

    return check
