"""``anyaccel port PATH...``: rewrite CUDA-only code into accelerator-agnostic code.

Prints a unified diff by default; ``--write`` writes the files. What cannot be ported safely
is listed as ``file:line:col: CODE ...`` on stderr. Exit status: 0 when nothing is left to do,
1 when a diff was shown (not written) or something is left for you, 2 on errors (a path
missing, a file that does not parse, libcst missing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anyaccel.porting.config import ConfigError, find_config
from anyaccel.porting.source_files import iter_python_files

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel port``."""
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or directories")
    parser.add_argument("--write", action="store_true", help="write the ported files in place")
    parser.add_argument(
        "--quiet", action="store_true", help="no diff, only what is left and the summary"
    )


def run(args: argparse.Namespace) -> int:
    """Port every file under the paths; show or write the result."""
    try:
        from anyaccel.porting.codemod import PortError, port_source
    except ImportError as error:
        print(
            f"anyaccel port: needs libcst ({error}); install it with: pip install 'anyaccel[port]'",
            file=sys.stderr,
        )
        return 2
    try:
        config = find_config(args.paths[0])
        files = list(
            iter_python_files(args.paths, config.exclude_rules(), config.respect_gitignore)
        )
    except (ConfigError, FileNotFoundError) as error:
        print(f"anyaccel port: {error}", file=sys.stderr)
        return 2
    enabled = config.enabled_codes()
    errors = changed = left = 0
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            result = port_source(source, str(path))
        except (OSError, UnicodeDecodeError) as error:
            print(f"anyaccel port: {path}: cannot read: {error}", file=sys.stderr)
            errors += 1
            continue
        except PortError as error:
            print(f"anyaccel port: {error}", file=sys.stderr)
            errors += 1
            continue
        if result.changed:
            changed += 1
            if args.write:
                path.write_text(result.ported, encoding="utf-8")
            elif not args.quiet:
                sys.stdout.write(result.diff())
        for finding in result.left:
            if finding.code in enabled:
                left += 1
                print(f"left for you: {finding.format()}", file=sys.stderr)
    verb = "ported" if args.write else "would port"
    print(
        f"anyaccel port: {verb} {changed} of {len(files)} file(s); "
        f"{left} place(s) left for you; {errors} error(s)",
        file=sys.stderr,
    )
    if errors:
        return 2
    return 1 if left or (changed and not args.write) else 0
