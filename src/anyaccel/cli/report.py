"""``anyaccel report``: which accelerator this process would use, and why.

Prints the detection trace (every candidate probed, what it found, how long it took), a
summary of the chosen accelerator, and the environment a bug report needs (versions, build,
CPU, vendor packages, devices, ops, plugins, steering variables; see
:mod:`anyaccel.cli.environment`). ``--json`` gives the same as data with a ``schema_version``;
``--markdown`` gives a block to paste into an issue.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from anyaccel.errors import AcceleratorError

__all__ = ["accelerator_summary", "add_arguments", "run"]


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


def accelerator_summary(accelerator: Any, devices: bool = True) -> dict[str, Any]:
    """The chosen accelerator's main facts, as plain data.

    With ``devices=False`` the figures only a device runtime can give (current device, dtypes,
    memory) are left out unless the accelerator is the CPU, so nothing gets initialised.
    """
    from anyaccel.distributed.binding import current_binding

    ask = devices or accelerator.device_name() == "cpu"
    return {
        "name": accelerator._name,
        "device_count": accelerator.device_count(),
        "current_device": accelerator.current_device_name() if ask else NOT_QUERIED,
        "communication_backend": accelerator.communication_backend_name(),
        "supported_dtypes": (
            [str(d).replace("torch.", "") for d in accelerator.supported_dtypes()]
            if ask
            else NOT_QUERIED
        ),
        "visible_devices_envs": accelerator.visible_devices_envs(),
        "compile_backend": accelerator.get_compile_backend(),
        "total_memory": accelerator.total_memory() if ask else NOT_QUERIED,
        "cpu_binding": current_binding(),
    }


def run(args: argparse.Namespace) -> int:
    """Detect, then print the trace and the summary; exit 1 if detection fails."""
    from anyaccel.detection import detect_accelerator

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accelerator, report = detect_accelerator(probe_all=args.all)
    except AcceleratorError as error:
        print(f"anyaccel report: {error}", file=sys.stderr)
        return 1
    summary = accelerator_summary(accelerator, devices=args.devices)
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
            "accelerator": summary,
            "environment": environment,
        }
        print(json.dumps(data, indent=2, default=str))
        return 0
    width = max(len(key) for key in summary)
    summary_text = "\n".join(
        f"{key:<{width}}  {', '.join(value) if isinstance(value, list) else value}"
        for key, value in summary.items()
    )
    if args.markdown:
        print(format_markdown(environment, trace=f"{report.format()}\n\n{summary_text}"))
        return 0
    print(report.format())
    print()
    print(summary_text)
    print()
    print(format_environment(environment))
    return 0
