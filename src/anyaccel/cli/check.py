"""``anyaccel check PATH...``: list the CUDA-specific code in Python files, one finding a line.

Exit status: 0 when nothing is found, 1 when something is, 2 when a path, a file or the
configuration cannot be read, or a file is refused (a symlink out of the tree given, a named
pipe or device, a /proc or /sys file: never opened); the message says which and why.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from anyaccel.porting.checker import Finding, check_source
from anyaccel.porting.config import CheckConfig, ConfigError, find_config
from anyaccel.porting.source_files import PythonFile, iter_python_files
from anyaccel.porting.source_text import SourceReadError, read_source

__all__ = ["add_arguments", "check_file", "check_paths", "format_findings", "path_argument", "run"]

FORMATS = ("text", "json", "github")
#: From this many files on, files are checked in parallel processes.
_PARALLEL_FROM = 200


def path_argument(text: str) -> Path:
    """A PATH argument; an empty one is refused (``Path("")`` would silently mean ``.``)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "an empty path (an unset shell variable?); name a file or directory, e.g. ."
        )
    return Path(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``anyaccel check``."""
    parser.add_argument(
        "paths", nargs="+", type=path_argument, metavar="PATH", help="files or directories"
    )
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format")
    parser.add_argument(
        "--select", help="comma-separated codes or prefixes to check (replaces the config's)"
    )
    parser.add_argument("--ignore", help="comma-separated codes or prefixes to skip (added)")
    parser.add_argument(
        "--exclude", action="append", default=[], help="gitignore-style pattern to skip (repeat)"
    )
    parser.add_argument(
        "--no-gitignore", action="store_true", help="check files that .gitignore excludes too"
    )


def _codes(text: str | None) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip()) if text else ()


def check_file(found: PythonFile) -> tuple[list[Finding], str | None]:
    """The findings in one file the walk found, or why it could not be checked."""
    path = found.path
    try:
        source = read_source(path, found.root).text
    except SourceReadError as error:
        return [], str(error)
    try:
        return check_source(source, str(path)), None
    except SyntaxError as error:
        return [], f"{path}:{error.lineno}:{error.offset}: cannot parse: {error.msg}"
    except ValueError as error:  # null bytes
        return [], f"{path}: cannot parse: {error}"
    except (RecursionError, MemoryError) as error:
        return [], (
            f"{path}: cannot parse: {type(error).__name__}: an expression is nested too "
            "deeply for Python's parser; split it into smaller expressions"
        )


def check_paths(
    paths: Sequence[Path], config: CheckConfig | None = None
) -> tuple[list[Finding], list[str]]:
    """Findings under ``paths`` with ``config`` (default: the nearest pyproject's), and errors.

    Raises ``ConfigError`` when the configuration is wrong.
    """
    settings = config if config is not None else find_config(paths[0])
    enabled = settings.enabled_codes()
    findings: list[Finding] = []
    errors: list[str] = []
    files = list(
        iter_python_files(paths, settings.exclude_rules(), settings.respect_gitignore, errors)
    )
    if len(files) >= _PARALLEL_FROM and (os.cpu_count() or 1) > 1:
        workers = min(os.cpu_count() or 1, 8)
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(check_file, files, chunksize=16))
    else:
        results = [check_file(found) for found in files]
    for found, problem in results:
        findings.extend(f for f in found if f.code in enabled)
        if problem:
            errors.append(problem)
    return findings, errors


def format_findings(findings: Sequence[Finding], fmt: str) -> str:
    """The findings as ``text``, ``json`` or ``github`` workflow annotations."""
    items = list(findings)
    if fmt == "json":
        return json.dumps([f.to_dict() for f in items], indent=2)
    if fmt == "github":
        return "\n".join(
            f"::error file={_escape_property(f.path)},line={f.line},col={f.column},"
            f"title=anyaccel {f.code}::"
            f"{_escape(f.message)} ({_escape(f.suggestion)})"
            for f in items
        )
    return "\n".join(f.format() for f in items)


def _escape(text: str) -> str:
    """GitHub workflow-command escaping of a message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """GitHub workflow-command escaping of a property value (``,`` and ``:`` end one)."""
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def run(args: argparse.Namespace) -> int:
    """Check the paths; print the findings; exit 0 (clean), 1 (findings) or 2 (errors)."""
    try:
        config = find_config(args.paths[0])
        if args.select:
            config = replace(config, select=_codes(args.select))
        if args.ignore:
            config = replace(config, ignore=(*config.ignore, *_codes(args.ignore)))
        if args.exclude or args.no_gitignore:
            config = replace(
                config,
                exclude=(*config.exclude, *args.exclude),
                respect_gitignore=config.respect_gitignore and not args.no_gitignore,
            )
        findings, errors = check_paths(args.paths, config)
    except ConfigError as error:
        print(f"anyaccel check: {error}", file=sys.stderr)
        return 2
    output = format_findings(findings, args.format)
    if output or args.format == "json":
        print(output)
    for problem in errors:
        print(f"anyaccel check: {problem}", file=sys.stderr)
    if args.format == "text" and findings:
        print(f"anyaccel check: {len(findings)} finding(s)", file=sys.stderr)
    if errors:
        return 2
    return 1 if findings else 0
