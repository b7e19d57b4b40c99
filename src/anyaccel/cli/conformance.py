"""``anyaccel conformance MODULE:CLASS``: run the contract checks against an accelerator class.

Prints one line per check (failures and skip reasons below it), or JSON with ``--json``.
Exit status: 0 when no check fails, 1 when one does, 2 when the class cannot be loaded.
``--simulate NAME`` runs inside ``anyaccel.testing.simulated.simulate_NAME()``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel conformance``."""
    from anyaccel.testing.conformance import CHECKS

    parser.add_argument(
        "target",
        nargs="?",
        help="the accelerator as 'package.module:Class' (or a factory returning an instance)",
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


def _simulation(name: str | None) -> AbstractContextManager[Any]:
    if name is None:
        return contextlib.nullcontext()
    from anyaccel.testing import simulated

    factory = getattr(simulated, f"simulate_{name}", None)
    if factory is None:
        known = sorted(
            n.removeprefix("simulate_") for n in dir(simulated) if n.startswith("simulate_")
        )
        raise LookupError(
            f"--simulate {name!r} is not a simulated runtime; choose from {', '.join(known)}"
        )
    context: AbstractContextManager[Any] = factory()
    return context


def run(args: argparse.Namespace) -> int:
    """Run the checks and print the report; the exit status says whether all passed."""
    from anyaccel.testing.conformance import CHECKS, ConformanceError, prepare, run_conformance

    if args.list:
        for name, check in CHECKS.items():
            print(f"{name:<20} {(check.__doc__ or '').strip().splitlines()[0]}")
        return 0
    if not args.target:
        print("anyaccel conformance: give the accelerator as package.module:Class", file=sys.stderr)
        return 2
    prepare()  # before a simulation patches torch
    try:
        with _simulation(args.simulate), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = run_conformance(args.target, args.check)
    except (ConformanceError, LookupError) as error:
        print(f"anyaccel conformance: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0 if report.passed else 1
