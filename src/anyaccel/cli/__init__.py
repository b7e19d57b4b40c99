"""The ``anyaccel`` command: one subcommand per tool, each in its own module.

A subcommand module offers ``add_arguments(parser)`` and ``run(args) -> int`` (the exit
status); registering it is one line in ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["SUBCOMMANDS", "main"]

#: Subcommand name -> (module under anyaccel.cli, one-line help).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "report": ("anyaccel.cli.report", "show which accelerator is used here and why"),
    "conformance": ("anyaccel.cli.conformance", "check an accelerator class against the contract"),
    "check": ("anyaccel.cli.check", "find CUDA-only code in Python files"),
    "port": ("anyaccel.cli.port", "rewrite CUDA-only code to use get_accelerator()"),
    "ops": ("anyaccel.cli.ops", "show which op builders can be built here; plan or build them"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only ``command``'s module is imported to add its options.

    A subcommand's module may import heavy dependencies (``conformance`` imports torch), so
    ``anyaccel check`` does not pay for the others. With no ``command``, every module is loaded.
    """
    from anyaccel import __version__

    parser = argparse.ArgumentParser(
        prog="anyaccel", description="Accelerator tools for PyTorch code."
    )
    parser.add_argument("--version", action="version", version=f"anyaccel {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if command is None or name == command:
            importlib.import_module(module_name).add_arguments(sub)
        sub.set_defaults(_module=module_name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``anyaccel`` command line; returns the process exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = arguments[0] if arguments and arguments[0] in SUBCOMMANDS else ""
    parser = build_parser(chosen)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    status: int = importlib.import_module(args._module).run(args)
    return status
