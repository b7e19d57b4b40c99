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
import contextlib
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from anyaccel.settings import AUTOLOAD_ENV

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


class _CapturedStdout:
    """What was written to file descriptor 1 while it pointed at a temporary file."""

    def __init__(self) -> None:
        self.text = ""


@contextlib.contextmanager
def _stdout_captured() -> Iterator[_CapturedStdout]:
    """Point fd 1 (and ``sys.stdout``) at a temporary file: C libraries' prints land there too.

    Plugins and vendor libraries may print while they load; the report's own output
    (``--json``) must stay the only thing on stdout.
    """
    captured = _CapturedStdout()
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 1)
            try:
                yield captured
            finally:
                sys.stdout.flush()
                _flush_c_stdio()
                os.dup2(saved, 1)
                sink.seek(0)
                captured.text = sink.read().decode("utf-8", errors="replace")
    finally:
        os.close(saved)


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: C code's buffered ``printf`` output goes where fd 1 points now."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask (not on this platform)
        pass


def _torch_import_problem() -> str | None:
    """Why ``import torch`` fails here, said for a person (the autoload case named), or None."""
    try:
        import torch  # noqa: F401
    except Exception as error:  # torch's own import, and third-party code it runs
        if AUTOLOAD_ENV not in str(error):
            return f"importing torch failed: {type(error).__name__}: {error}"
        cause = error.__cause__
        raised = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return (
            f"importing torch failed: a torch device-backend plugin raised while torch "
            f"autoloaded it{raised}. torch runs every entry point of the group "
            f"'torch.backends' on import; installed here: {_torch_backend_entry_points()}. "
            f"Fix or uninstall that package, or set {AUTOLOAD_ENV}=0 to skip autoloading"
        )
    return None


def _torch_backend_entry_points() -> str:
    """The ``torch.backends`` entry points, with the distributions that declare them."""
    import importlib.metadata

    found = []
    for distribution in importlib.metadata.distributions():
        for entry in distribution.entry_points:
            if entry.group == "torch.backends":
                name = distribution.metadata["Name"]
                found.append(f"{entry.name} = {entry.value} (from {name} {distribution.version})")
    return "; ".join(found) or "none found"


def run(args: argparse.Namespace) -> int:
    """Detect, then print the trace, warnings and summary; exit 1 if detection fails.

    Whatever plugins or vendor libraries print while loading is kept off stdout (it goes to
    stderr, and into ``"captured_stdout"`` with ``--json``), so ``--json`` is always JSON.
    """
    with _stdout_captured() as captured:
        status, output = _collect(args)
    if captured.text:
        sys.stderr.write(
            "anyaccel report: printed to stdout while loading (moved here):\n" + captured.text
        )
        if not captured.text.endswith("\n"):
            sys.stderr.write("\n")
    if args.json:
        data = output if isinstance(output, dict) else {"error": output}
        data["captured_stdout"] = captured.text
        print(json.dumps(data, indent=2, default=str))
    elif status == 0:
        print(output)
    return status


def _collect(args: argparse.Namespace) -> tuple[int, dict[str, Any] | str]:
    """(exit status, the report as data or text); errors are printed on stderr."""
    from anyaccel.cli.environment import SCHEMA_VERSION

    problem = _torch_import_problem()
    if problem is not None:
        print(f"anyaccel report: {problem}", file=sys.stderr)
        return 1, {"schema_version": SCHEMA_VERSION, "error": problem}
    from anyaccel.detection import detect_accelerator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            accelerator, report = detect_accelerator(probe_all=args.all)
        except Exception as error:  # AcceleratorError and anything a backend let through
            for warning in caught:
                print(f"warning: {warning.message}", file=sys.stderr)
            print(f"anyaccel report: {error}", file=sys.stderr)
            return 1, {"schema_version": SCHEMA_VERSION, "error": str(error)}
        summary = accelerator_summary(accelerator, devices=args.devices)
    shown_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    from anyaccel.cli.environment import (
        environment_report,
        format_environment,
        format_markdown,
    )

    environment = environment_report(accelerator, devices=args.devices)
    frameworks = _framework_sections(accelerator)
    if args.json:
        return 0, {
            "schema_version": SCHEMA_VERSION,
            "report": report.to_dict(),
            "accelerator": {key: _json_value(value) for key, value in summary.items()},
            "warnings": shown_warnings,
            "environment": environment,
            **{name: section for name, (section, _) in frameworks.items()},
        }
    width = max(len(key) for key in summary)
    summary_text = "\n".join(
        f"{key:<{width}}  {', '.join(value) if isinstance(value, list) else value}"
        for key, value in summary.items()
    )
    trace = report.format()
    if shown_warnings:
        trace += "\n\nwarnings:\n" + "\n".join(f"  {text}" for text in shown_warnings)
    if args.markdown:
        return 0, format_markdown(environment, trace=f"{trace}\n\n{summary_text}")
    sections = [trace, summary_text, format_environment(environment)]
    return 0, "\n\n".join([*sections, *(text for _, text in frameworks.values())])


def _framework_sections(accelerator: Any) -> dict[str, tuple[dict[str, Any], str]]:
    """Sections the framework integrations add: name -> (data for --json, text)."""
    from anyaccel.integrations import accelerate

    section = accelerate.report_section(accelerator)
    return {"accelerate": (section, accelerate.format_report_section(section))}
