"""``[tool.anyaccel]`` in ``pyproject.toml``: which rules run and which files are left out.

The nearest ``pyproject.toml`` with a ``[tool.anyaccel]`` table above the first checked path
applies; its directory is the base of the ``exclude`` patterns. Keys: ``select`` and
``ignore`` (rule codes or code prefixes, like ruff's), ``exclude`` (gitignore-style patterns)
and ``respect-gitignore`` (default true).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anyaccel.errors import AnyaccelError
from anyaccel.porting.rules import RULES
from anyaccel.porting.source_files import DEFAULT_EXCLUDES, IgnoreRules

__all__ = ["CheckConfig", "ConfigError", "find_config", "load_config", "resolve_codes"]

_KEYS = frozenset({"select", "ignore", "exclude", "respect-gitignore"})


class ConfigError(AnyaccelError, ValueError):
    """``[tool.anyaccel]`` (or a command-line rule code) is wrong; the message says how."""


@dataclass(frozen=True)
class CheckConfig:
    """The settings a check runs with, and where they came from."""

    select: tuple[str, ...] = ("ACC",)
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True
    root: Path = field(default_factory=Path.cwd)
    source: Path | None = None

    def enabled_codes(self) -> frozenset[str]:
        """The rule codes selected and not ignored."""
        origin = f"[tool.anyaccel] in {self.source}" if self.source else "the command line"
        chosen = resolve_codes(self.select, f"select of {origin}")
        return chosen - resolve_codes(self.ignore, f"ignore of {origin}")

    def exclude_rules(self) -> list[IgnoreRules]:
        """The default excludes, then the configured ones (based at ``root``)."""
        return [
            IgnoreRules.from_lines(Path("/"), DEFAULT_EXCLUDES),
            IgnoreRules.from_lines(self.root.absolute(), self.exclude),
        ]


def resolve_codes(prefixes: Sequence[str], where: str) -> frozenset[str]:
    """The rule codes starting with any of ``prefixes``; an unmatched prefix is an error."""
    codes: set[str] = set()
    for prefix in prefixes:
        matched = {code for code in RULES if code.startswith(prefix.strip().upper())}
        if not matched or not prefix.strip():
            raise ConfigError(
                f"unknown rule code {prefix!r} in {where}; known codes: {', '.join(RULES)}"
            )
        codes |= matched
    return frozenset(codes)


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise ConfigError(
                f"{path} has a [tool.anyaccel] table, and reading it on Python "
                f"{sys.version_info.major}.{sys.version_info.minor} needs the tomli package: "
                "pip install tomli (or use Python 3.11+)"
            ) from None
    try:
        with path.open("rb") as stream:
            data: dict[str, Any] = tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    return data


def _string_list(table: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"[tool.anyaccel] {key} in {path} must be a list of strings, got {value!r}"
        )
    return tuple(value)


def load_config(path: Path) -> CheckConfig:
    """The ``[tool.anyaccel]`` settings of the ``pyproject.toml`` at ``path``.

    Raises ``ConfigError`` for unreadable TOML, unknown keys, wrong types or unknown codes.
    """
    table = _read_toml(path).get("tool", {}).get("anyaccel", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.anyaccel] in {path} must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(unknown)} in [tool.anyaccel] of {path}; "
            f"known keys: {', '.join(sorted(_KEYS))}"
        )
    respect = table.get("respect-gitignore", True)
    if not isinstance(respect, bool):
        raise ConfigError(
            f"[tool.anyaccel] respect-gitignore in {path} must be true or false, got {respect!r}"
        )
    config = CheckConfig(
        select=_string_list(table, "select", path) if "select" in table else ("ACC",),
        ignore=_string_list(table, "ignore", path),
        exclude=_string_list(table, "exclude", path),
        respect_gitignore=respect,
        root=path.parent,
        source=path,
    )
    config.enabled_codes()  # validate the codes now, with the file named
    return config


def find_config(start: Path) -> CheckConfig:
    """The settings from the nearest ``pyproject.toml`` with ``[tool.anyaccel]`` above ``start``."""
    directory = start.absolute()
    if not directory.is_dir():
        directory = directory.parent
    for parent in [directory, *directory.parents]:
        candidate = parent / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "[tool.anyaccel" in text:
                return load_config(candidate)
    return CheckConfig()
