"""``anyaccel conformance [MODULE:CLASS]``: run the contract checks against an accelerator.

Without a target it checks the accelerator this process would pick (``get_accelerator()``, as
``anyaccel report`` shows it: ``DS_ACCELERATOR``, plugins, detection). The target runs in a
worker process: a target that exits, crashes or hangs fails the check it was in (a hang after
``--timeout`` seconds) and a new worker runs the other checks. Prints one line per check
(failures and skip reasons below it), or JSON with ``--json``, always.
Exit status: 0 when no check fails, 1 when one does, 2 when the target cannot be loaded.
``--emulated TYPE:COUNT`` installs emulated devices in the worker first (the target, or the
accelerator picked, runs on them); ``--simulate NAME`` runs inside
``anyaccel.testing.simulated.simulate_NAME()``, and ``--context module:function`` inside the
context manager that ``function()`` returns (the twin of the pytest plugin's ``context=``:
e.g. a vendor's own simulated runtime, or zero boards).
"""

from __future__ import annotations

import argparse
import json
import sys

from anyaccel.settings import EMULATED_ENV

__all__ = ["PICKED_TARGET", "add_arguments", "run"]

#: The target checked when none is given: the factory that returns the accelerator this
#: process would pick, imported and called in the worker like any other factory.
PICKED_TARGET = "anyaccel:get_accelerator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel conformance``."""
    from anyaccel.testing.conformance import CHECKS
    from anyaccel.testing.isolation import DEFAULT_TIMEOUT

    parser.add_argument(
        "target",
        nargs="?",
        help="the accelerator as 'package.module:Class' (or a factory returning an instance); "
        "default: the one this process would pick, as `anyaccel report` shows it",
    )
    parser.add_argument(
        "--check",
        action="append",
        choices=list(CHECKS),
        metavar="NAME",
        help="run only this check (repeatable); see --list",
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--simulate",
        metavar="NAME",
        help="run inside anyaccel.testing.simulated.simulate_NAME() (e.g. cuda)",
    )
    parser.add_argument(
        "--emulated",
        metavar="TYPE:COUNT[:CAPACITY]",
        help=f"install emulated devices first (as {EMULATED_ENV}, e.g. npu:2): without a "
        "target they are the accelerator checked; a target runs over torch.TYPE",
    )
    parser.add_argument(
        "--context",
        metavar="MODULE:FUNCTION",
        help="run inside the context manager FUNCTION() returns (e.g. your simulated runtime)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"fail a check (or loading the target) that runs longer (default {DEFAULT_TIMEOUT:g})",
    )


def _check_simulation(name: str) -> None:
    """Refuse a ``--simulate`` name that is not a simulated runtime, listing the valid ones."""
    from anyaccel.testing import simulated

    if not callable(getattr(simulated, f"simulate_{name}", None)):
        known = sorted(
            n.removeprefix("simulate_") for n in dir(simulated) if n.startswith("simulate_")
        )
        raise LookupError(
            f"--simulate {name!r} is not a simulated runtime; choose from {', '.join(known)}"
        )


def _check_context(reference: str) -> None:
    """Refuse a ``--context`` that a worker could not import and call, saying what is wrong."""
    import importlib.util

    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise LookupError(
            f"--context {reference!r} is not of the form 'package.module:function' (a function "
            "returning a context manager, e.g. mypkg.testing:simulate_board)"
        )
    try:  # found, not imported: the context runs in the worker only
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as error:
        spec, problem = None, f": {error}"
    else:
        problem = ""
    if spec is None:
        raise LookupError(
            f"--context {reference!r}: no module {module_name!r} can be imported here{problem}; "
            "check its spelling and that its package is installed (or on PYTHONPATH)"
        )


def run(args: argparse.Namespace) -> int:
    """Run the checks in worker processes and print the report; the exit status says how it went."""
    from anyaccel.testing.conformance import CHECKS, ConformanceError
    from anyaccel.testing.isolation import LOAD_CHECK, run_isolated

    if args.list:
        for name, check in CHECKS.items():
            print(f"{name:<20} {(check.__doc__ or '').strip().splitlines()[0]}")
        return 0
    target = args.target or PICKED_TARGET
    try:
        if ":" not in target:
            raise ConformanceError(
                f"{target!r} is not of the form 'package.module:Class'; "
                "e.g. anyaccel.backends.cpu:CpuAccelerator"
            )
        if args.simulate is not None:
            _check_simulation(args.simulate)
        if args.context is not None:
            _check_context(args.context)
        report = run_isolated(
            target,
            args.check,
            timeout=args.timeout,
            simulate=args.simulate,
            context=args.context,
            emulated=args.emulated,
        )
    except (ConformanceError, LookupError) as error:
        print(f"anyaccel conformance: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    load = next((r for r in report.results if r.name == LOAD_CHECK), None)
    if load is not None:
        print(f"anyaccel conformance: {load.messages[0]}", file=sys.stderr)
        return 2
    return 0 if report.passed else 1
