"""The one check of an installed framework's version against the range an integration supports.

The Lightning and accelerate integrations each state their range as a PEP 440 specifier
(``lightning>=2.4``; ``accelerate>=1.0,<2``); both read the installed version and test it here,
so a version is found and compared one way.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

__all__ = ["installed_version", "supports"]


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or ``None`` when it cannot be imported.

    A module shipped inside another distribution (no metadata of its own) reports its
    ``__version__`` (``"0"`` without one).
    """
    if importlib.util.find_spec(distribution) is None:
        return None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        module = importlib.import_module(distribution)
        return str(getattr(module, "__version__", "0"))


def supports(specifier: str, version: str) -> bool:
    """Whether ``version`` is in ``specifier`` (pre-releases count; an unparsable one does not)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return SpecifierSet(specifier, prereleases=True).contains(parsed)
