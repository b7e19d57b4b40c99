"""``anyaccel report``: which accelerator this process would use, and why.

Prints the detection trace (every candidate probed, what it found, how long it took, what
became of each plugin), the warnings detection raised, a summary of the chosen accelerator,
and the environment a bug report needs (versions, build, CPU, vendor packages, devices, ops,
plugins, steering variables; see :mod:`anyaccel.cli.environment`). ``--json`` gives the same
as data with a ``schema_version``; ``--markdown`` gives a block to paste into an issue. A
summary method that raises shows as an error in its row: the report never ends in a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["SummaryError", "accelerator_summary", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel report``."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--markdown", action="store_true", help="print a block to paste into a bug report"
    )
    parser.add_argument(
        "--devices",
        action="store_true",
        help="also ask each device for its name and memory (may initialise the devices)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="probe every candidate, also those after the chosen one",
    )


#: Shown instead of a figure whose question would initialise the device runtime.
NOT_QUERIED = "not queried (would initialise the device; add --devices)"


class SummaryError:
    """A summary figure whose method raised, shown as an error in its row."""

    def __init__(self, error: BaseException) -> None:
        self.text = f"{type(error).__name__}: {error}"

    def __str__(self) -> str:
        return f"error: {self.text}"


def _ask(question: Callable[[], Any]) -> Any:
    try:
        return question()
    except Exception as error:  # the accelerator's own code: report it, do not die of it
        return SummaryError(error)


def accelerator_summary(accelerator: Any, devices: bool = True) -> dict[str, Any]:
    """The chosen accelerator's main facts, as plain data (a ``SummaryError`` where one raised).

    With ``devices=False`` the figures only a device runtime can give (current device, dtypes,
    memory) are left out unless the accelerator is the CPU, so nothing gets initialised.
    """
    from anyaccel.distributed.binding import current_binding
    from anyaccel.distributed.process_group import cpu_collectives

    ask = devices or _ask(accelerator.device_name) == "cpu"
    return {
        "name": _ask(lambda: accelerator._name),
        "device_count": _ask(accelerator.device_count),
        "current_device": _ask(accelerator.current_device_name) if ask else NOT_QUERIED,
        "communication_backend": _ask(accelerator.communication_backend_name),
        "supported_dtypes": (
            _ask(lambda: [str(d).replace("torch.", "") for d in accelerator.supported_dtypes()])
            if ask
            else NOT_QUERIED
        ),
        "visible_devices_envs": _ask(accelerator.visible_devices_envs),
        "compile_backend": _ask(accelerator.get_compile_backend),
        "total_memory": _ask(accelerator.total_memory) if ask else NOT_QUERIED,
        "cpu_binding": _ask(current_binding),
        # CPU collectives on one node: anyaccel_shm or gloo, and why (issue 26)
        "cpu_collectives": _ask(cpu_collectives),
    }


def _json_value(value: Any) -> Any:
    return {"error": value.text} if isinstance(value, SummaryError) else value


def run(args: argparse.Namespace) -> int:
    """Detect, then print the trace, warnings and summary; exit 1 if detection fails."""
    from anyaccel.detection import detect_accelerator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            accelerator, report = detect_accelerator(probe_all=args.all)
        except Exception as error:  # AcceleratorError and anything a backend let through
            for warning in caught:
                print(f"warning: {warning.message}", file=sys.stderr)
            print(f"anyaccel report: {error}", file=sys.stderr)
            return 1
        summary = accelerator_summary(accelerator, devices=args.devices)
    shown_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    from anyaccel.cli.environment import (
        SCHEMA_VERSION,
        environment_report,
        format_environment,
        format_markdown,
    )

    environment = environment_report(accelerator, devices=args.devices)
    if args.json:
        data = {
            "schema_version": SCHEMA_VERSION,
            "report": report.to_dict(),
            "accelerator": {key: _json_value(value) for key, value in summary.items()},
            "warnings": shown_warnings,
            "environment": environment,
        }
        print(json.dumps(data, indent=2, default=str))
        return 0
    width = max(len(key) for key in summary)
    summary_text = "\n".join(
        f"{key:<{width}}  {', '.join(value) if isinstance(value, list) else value}"
        for key, value in summary.items()
    )
    trace = report.format()
    if shown_warnings:
        trace += "\n\nwarnings:\n" + "\n".join(f"  {text}" for text in shown_warnings)
    if args.markdown:
        print(format_markdown(environment, trace=f"{trace}\n\n{summary_text}"))
        return 0
    print(trace)
    print()
    print(summary_text)
    print()
    print(format_environment(environment))
    return 0
