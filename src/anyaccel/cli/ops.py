"""``anyaccel ops``: which op builders this machine can build, what a build would do, or build it.

With no option, prints the capability table of the accelerator (``--accelerator NAME``, else
the detected one); ``--plan BUILDER ...`` prints each build's flags and paths without compiling,
``--build BUILDER ...`` builds each (or loads it from the cache). The native parts that run beside
any accelerator (the host collectives, the emulated device) are found by name under every
accelerator; ``all`` names every builder that applies to this machine, so a CI job can build
once and cache ``TORCH_EXTENSIONS_DIR``. Exit status: 0 on success, 1 when an op cannot be
built or loaded here (the message says why), 2 for an unknown builder or accelerator.
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
        help="show what would be built (flags, paths) without compiling ('all': every builder "
        "that applies here)",
    )
    parser.add_argument(
        "--build",
        nargs="+",
        default=[],
        metavar="BUILDER",
        help="build (or load from cache) these builders ('all': every builder that applies "
        "here, e.g. to fill a CI cache of TORCH_EXTENSIONS_DIR)",
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
        plan, build = _expand_all(args.plan, package), _expand_all(args.build, package)
        for class_name in dict.fromkeys([*plan, *build]):
            builder_class = registry.buildable_builder_class(package, class_name, name)
            if builder_class is None:
                print(
                    f"unknown op builder {class_name!r}; known: "
                    f"{', '.join(registry.known_builder_names(package))} (or 'all')",
                    file=sys.stderr,
                )
                return 2
            builder = builder_class()
            if class_name in plan:
                print(builder.plan().describe())
            if class_name in build:
                builder.load(verbose=True)
                print(f"{class_name}: loaded from {builder.plan().library_path}")
    except (OpError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _expand_all(names: list[str], package: str) -> list[str]:
    """``names``, with ``all`` replaced by every builder that applies to this machine.

    One that does not apply (another backend's op, a torch too old for the emulated device) is
    named on stderr with the reason; a missing compiler is not such a reason (the build says so).
    """
    if "all" not in names:
        return names
    expanded: list[str] = []
    for class_name, builder_class in registry.every_builder(package).items():
        verdict = builder_class().platform_compatibility()
        if verdict:
            expanded.append(class_name)
        else:
            print(
                f"{class_name}: not built, it does not apply here: {verdict.reason}",
                file=sys.stderr,
            )
    return [*expanded, *(n for n in names if n != "all" and n not in expanded)]
