"""``anyaccel ops``: which op builders this machine can build, what a build would do, or build it.

With no option, prints the capability table of the accelerator (``--accelerator NAME``, else
the detected one); ``--plan BUILDER ...`` prints each build's flags and paths without compiling,
``--build BUILDER ...`` builds each (or loads it from the cache). Exit status: 0 on success,
1 when an op cannot be built or loaded here (the message says why), 2 for an unknown builder
or accelerator.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from anyaccel.ops import registry
from anyaccel.ops.capabilities import capabilities, format_capabilities
from anyaccel.ops.errors import OpError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel ops``."""
    parser.add_argument("--accelerator", help="accelerator name (default: the detected one)")
    parser.add_argument(
        "--plan",
        nargs="+",
        default=[],
        metavar="BUILDER",
        help="show what would be built (flags, paths) without compiling",
    )
    parser.add_argument(
        "--build",
        nargs="+",
        default=[],
        metavar="BUILDER",
        help="build (or load from cache) these builders",
    )


def run(args: argparse.Namespace) -> int:
    """Print the capability table, the dry-run plan of builders, or build them."""
    target: str | Accelerator
    if args.accelerator:
        from anyaccel.detection import SUPPORTED_ACCELERATOR_LIST

        name = target = str(args.accelerator)
        known = sorted({*SUPPORTED_ACCELERATOR_LIST, *registry.BUILTIN_PACKAGES})
        if name not in known:
            print(
                f"unknown accelerator {name!r} for --accelerator; known: {', '.join(known)}; "
                "or leave --accelerator out for the detected one (a plugin's included)",
                file=sys.stderr,
            )
            return 2
        package = registry.builder_package(name)
    else:
        from anyaccel import get_accelerator

        target = get_accelerator()
        name, package = target._name, target.op_builder_dir()
    try:
        if not args.plan and not args.build:
            print(format_capabilities(capabilities(target)))
        for class_name in [*args.plan, *args.build]:
            builder_class = registry.find_builder_class(package, class_name, name)
            if builder_class is None:
                print(
                    f"unknown op builder {class_name!r}; known: "
                    f"{', '.join(registry.known_builder_names(package))}",
                    file=sys.stderr,
                )
                return 2
            builder = builder_class()
            if class_name in args.plan:
                print(builder.plan().describe())
            if class_name in args.build:
                builder.load(verbose=True)
                print(f"{class_name}: loaded from {builder.plan().library_path}")
    except (OpError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
