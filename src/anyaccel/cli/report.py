"""``anyaccel report``: which accelerator this process would use, and why.

Prints the detection trace (every candidate probed, what it found, how long it took) and a
summary of the chosen accelerator; ``--json`` gives the same as data for scripts.
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
        "--all",
        action="store_true",
        help="probe every candidate, also those after the chosen one",
    )


def accelerator_summary(accelerator: Any) -> dict[str, Any]:
    """The chosen accelerator's main facts, as plain data."""
    from anyaccel.distributed.binding import current_binding

    return {
        "name": accelerator._name,
        "device_count": accelerator.device_count(),
        "current_device": accelerator.current_device_name(),
        "communication_backend": accelerator.communication_backend_name(),
        "supported_dtypes": [str(d).replace("torch.", "") for d in accelerator.supported_dtypes()],
        "visible_devices_envs": accelerator.visible_devices_envs(),
        "compile_backend": accelerator.get_compile_backend(),
        "total_memory": accelerator.total_memory(),
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
    summary = accelerator_summary(accelerator)
    if args.json:
        print(json.dumps({"report": report.to_dict(), "accelerator": summary}, indent=2))
        return 0
    print(report.format())
    print()
    width = max(len(key) for key in summary)
    for key, value in summary.items():
        shown = ", ".join(value) if isinstance(value, list) else value
        print(f"{key:<{width}}  {shown}")
    return 0
