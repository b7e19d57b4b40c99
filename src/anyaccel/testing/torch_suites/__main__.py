"""``python -m anyaccel.testing.torch_suites``: torch's device-generic suites on your device.

    python -m anyaccel.testing.torch_suites opinfo --emulated npu:1 --ops add,mul,softmax
    python -m anyaccel.testing.torch_suites modules --backend torch_acme --dtype float32
    python -m anyaccel.testing.torch_suites openreg PATH/TO/torch_openreg/tests --emulated openreg:2

Exit status: 0 when nothing failed, 1 when a test failed, 2 when the suite could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from anyaccel.testing.torch_suites import SuiteError, SuiteReport, prepare_device, run_tests

if TYPE_CHECKING:
    import torch

SUITES = ("opinfo", "modules", "openreg")


def build_parser() -> argparse.ArgumentParser:
    """The command's options."""
    parser = argparse.ArgumentParser(
        prog="python -m anyaccel.testing.torch_suites",
        description="Run PyTorch's device-generic tests on a PrivateUse1 device: the emulated "
        "one (--emulated) or your own (--backend).",
    )
    parser.add_argument(
        "suite",
        choices=SUITES,
        help="opinfo: every OpInfo against the CPU (torch's test_compare_cpu); modules: every "
        "ModuleInfo's forward and backward against the CPU; openreg: PyTorch's OpenReg test "
        "files at PATH",
    )
    parser.add_argument("path", nargs="?", help="openreg only: the directory of OpenReg's tests")
    device = parser.add_mutually_exclusive_group()
    device.add_argument(
        "--emulated",
        metavar="TYPE:COUNT",
        help="install anyaccel's emulated device (default npu:2; openreg:2 for openreg)",
    )
    device.add_argument(
        "--backend",
        metavar="MODULE",
        help="import MODULE, your runtime, which registers the device",
    )
    parser.add_argument(
        "--ops", metavar="NAMES", help="comma-separated OpInfo/ModuleInfo names (default: all)"
    )
    parser.add_argument("--skip", metavar="NAMES", help="comma-separated names to leave out")
    parser.add_argument(
        "--dtype",
        action="append",
        metavar="DTYPE",
        help="a torch dtype to test, repeatable (default float32)",
    )
    parser.add_argument(
        "--tolerance", type=float, default=None, help="atol and rtol of a comparison (1e-3)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each test as it ends")
    return parser


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def _dtypes(names: Sequence[str] | None) -> list[torch.dtype]:
    import torch

    chosen: list[torch.dtype] = []
    for name in names or ["float32"]:
        dtype = getattr(torch, name.removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise SuiteError(f"--dtype {name!r} is not a torch dtype (e.g. float32, bfloat16)")
        chosen.append(dtype)
    return chosen


def run(args: argparse.Namespace) -> SuiteReport:
    """Set up the device, build the suite asked for and run it."""
    if args.suite == "openreg":
        from anyaccel.testing.torch_suites.openreg import run_openreg_tests

        if args.path is None:
            raise SuiteError("openreg needs PATH: the torch_openreg/tests directory of a checkout")
        return run_openreg_tests(
            args.path, emulated=args.emulated or "openreg:2", verbose=args.verbose
        )
    if args.path is not None:
        raise SuiteError(f"{args.suite} takes no PATH (got {args.path!r})")
    emulated = args.emulated if args.emulated or args.backend else "npu:2"
    device_type = prepare_device(emulated=emulated, backend=args.backend)
    dtypes = _dtypes(args.dtype)
    from anyaccel.testing.torch_suites import compare_cpu

    build = compare_cpu.opinfo_tests if args.suite == "opinfo" else compare_cpu.module_tests
    tolerance = compare_cpu.DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    try:
        suite = build(
            device_type,
            _names(args.ops),
            dtypes,
            _names(args.skip) or (),
            tolerance,
        )
    except compare_cpu.UnknownTestError as error:
        raise SuiteError(f"--ops/--skip: {error}") from error
    return run_tests(suite, args.suite, device_type, verbose=args.verbose)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except SuiteError as error:
        print(f"torch_suites: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
