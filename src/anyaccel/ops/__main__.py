"""``python -m anyaccel.ops [--accelerator NAME] [--plan BUILDER ...] [--build BUILDER ...]``."""

from __future__ import annotations

import argparse
import sys

from anyaccel.ops import registry
from anyaccel.ops.capabilities import capabilities, format_capabilities
from anyaccel.ops.errors import OpError


def main(argv: list[str] | None = None) -> int:
    """Print the capability table, the dry-run plan of builders, or build them."""
    parser = argparse.ArgumentParser(prog="python -m anyaccel.ops", description=__doc__)
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
    args = parser.parse_args(argv)
    if args.accelerator is None:
        from anyaccel import get_accelerator

        accelerator = get_accelerator()
        name, package = accelerator._name, accelerator.op_builder_dir()
    else:
        name, package = args.accelerator, registry.builder_package(args.accelerator)
    try:
        if not args.plan and not args.build:
            print(format_capabilities(capabilities(args.accelerator or None)))
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


if __name__ == "__main__":
    sys.exit(main())
