"""``anyaccel port PATH...``: rewrite CUDA-only code into accelerator-agnostic code.

Prints a unified diff by default; ``--write`` writes the files. What cannot be ported safely
is listed as ``file:line:col: CODE ...`` on stderr. Exit status: 0 when nothing is left to do,
1 when a diff was shown (not written) or something is left for you, 2 on errors (a path
missing, a file that does not parse, libcst missing, a file refused: a symlink out of the
tree given, a named pipe or device, a /proc or /sys file; refused files are never opened
and never written).
"""

from __future__ import annotations

import argparse
import sys

from anyaccel.cli.check import path_argument
from anyaccel.extras import install_hint
from anyaccel.porting.config import ConfigError, find_config
from anyaccel.porting.source_files import PythonFile, iter_python_files
from anyaccel.porting.source_text import (
    PreparedWrite,
    SourceReadError,
    SourceWriteError,
    read_source,
)

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel port``."""
    parser.add_argument(
        "paths", nargs="+", type=path_argument, metavar="PATH", help="files or directories"
    )
    parser.add_argument("--write", action="store_true", help="write the ported files in place")
    parser.add_argument(
        "--quiet", action="store_true", help="no diff, only what is left and the summary"
    )


def run(args: argparse.Namespace) -> int:
    """Port every file under the paths; show or write the result.

    With ``--write``, every ported file is first written to a temporary beside it; only if
    all of them could be prepared are they renamed into place, so a read-only file or
    directory leaves the whole tree as it was (files that cannot be read or parsed are
    reported and skipped; they never stop the others).
    """
    try:
        import anyaccel.porting.codemod  # noqa: F401  (libcst is needed)
    except ImportError as error:
        print(
            f"anyaccel port: needs libcst ({error}); install it with: {install_hint('port')}",
            file=sys.stderr,
        )
        return 2
    problems: list[str] = []
    try:
        config = find_config(args.paths[0])
        files = list(
            iter_python_files(
                args.paths, config.exclude_rules(), config.respect_gitignore, problems
            )
        )
    except ConfigError as error:
        print(f"anyaccel port: {error}", file=sys.stderr)
        return 2
    enabled = config.enabled_codes()
    prepared: list[PreparedWrite] = []
    try:
        changed, left, unwritable = _port_all(files, args, enabled, prepared, problems)
        written = _commit_all(prepared, unwritable, problems) if args.write else 0
    finally:  # an interrupt leaves no temporary behind
        for write in prepared:
            write.discard()
    for problem in problems:
        print(f"anyaccel port: {problem}", file=sys.stderr)
    if args.write:
        summary = f"ported {written} of {len(files)} file(s)"
        if unwritable:
            summary += " (nothing written: some files could not be)"
    else:
        summary = f"would port {changed} of {len(files)} file(s)"
    print(
        f"anyaccel port: {summary}; {left} place(s) left for you; {len(problems)} error(s)",
        file=sys.stderr,
    )
    if problems:
        return 2
    return 1 if left or (changed and not args.write) else 0


def _port_all(
    files: list[PythonFile],
    args: argparse.Namespace,
    enabled: frozenset[str],
    prepared: list[PreparedWrite],
    problems: list[str],
) -> tuple[int, int, int]:
    """Port each file; print diffs and what is left; prepare writes. (changed, left, unwritable)."""
    from anyaccel.porting.codemod import PortError, port_source

    changed = left = unwritable = 0
    for path, root in files:
        try:
            source = read_source(path, root)
            result = port_source(source.text, str(path))
            data = source.encode(result.ported) if result.changed and args.write else b""
        except (SourceReadError, SourceWriteError, PortError) as error:
            problems.append(str(error))
            continue
        except (RecursionError, MemoryError) as error:
            problems.append(
                f"{path}: cannot port: {type(error).__name__} (the file nests too deeply or "
                "is too large for the porter); it is left as it was"
            )
            continue
        if result.changed:
            changed += 1
            if args.write:
                try:
                    prepared.append(PreparedWrite(path, data, source))
                except SourceWriteError as error:
                    problems.append(str(error))
                    unwritable += 1
            elif not args.quiet:
                sys.stdout.write(result.diff())
        for finding in result.left:
            if finding.code in enabled:
                left += 1
                print(f"left for you: {finding.format()}", file=sys.stderr)
        for note in result.precision:  # a choice made for the user is always named
            print(f"precision: {note}", file=sys.stderr)
    return changed, left, unwritable


def _commit_all(prepared: list[PreparedWrite], unwritable: int, problems: list[str]) -> int:
    """Rename every prepared file into place, or none if any could not be prepared."""
    if unwritable:
        problems.append(
            f"nothing was written: {unwritable} of {len(prepared) + unwritable} ported file(s) "
            "could not be written (above); fix that or --exclude them, and run again"
        )
        return 0
    written = 0
    for write in prepared:
        try:
            write.commit()
            written += 1
        except SourceWriteError as error:
            problems.append(str(error))
    return written
