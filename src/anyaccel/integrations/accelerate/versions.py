"""The accelerate and transformers versions the integration supports, and the check.

The version is read and compared by :mod:`anyaccel.integrations.supported_versions`, as for
Lightning.
"""

from __future__ import annotations

from typing import NamedTuple

from anyaccel.extras import install_hint
from anyaccel.integrations.accelerate.refusals import (
    AccelerateNotInstalledError,
    UnsupportedVersionError,
)
from anyaccel.integrations.supported_versions import installed_version, supports

__all__ = ["SUPPORTED_VERSIONS", "SupportedRange", "check_versions"]


class SupportedRange(NamedTuple):
    """The versions of one framework this module works with: ``minimum <= v < below``."""

    package: str
    minimum: str
    below: str

    @property
    def specifier(self) -> str:
        """The range as a PEP 440 specifier: ``>=minimum,<below``."""
        return f">={self.minimum},<{self.below}"

    def __str__(self) -> str:
        return f"{self.package}{self.specifier}"


#: The variables and arguments used here exist unchanged in accelerate 1.0 and transformers
#: 4.46 up to the versions tested (accelerate 1.15.0, transformers 5.23.0); see
#: docs/accelerate.md.
SUPPORTED_VERSIONS: dict[str, SupportedRange] = {
    "accelerate": SupportedRange("accelerate", "1.0", "2"),
    "transformers": SupportedRange("transformers", "4.46", "6"),
}


def check_versions(require_transformers: bool = False) -> dict[str, str | None]:
    """The installed accelerate and transformers versions, checked against the supported range.

    Raises :class:`AccelerateNotInstalledError` if accelerate (or, with
    ``require_transformers``, transformers) is missing, and :class:`UnsupportedVersionError` if
    either installed one is outside :data:`SUPPORTED_VERSIONS`.
    """
    found: dict[str, str | None] = {}
    for package, supported in SUPPORTED_VERSIONS.items():
        version = installed_version(package)
        found[package] = version
        if version is None:
            if package == "accelerate" or require_transformers:
                raise AccelerateNotInstalledError(
                    f"{package} is not installed; anyaccel's accelerate integration needs "
                    f"{supported}. Install it with: {install_hint(package)}"
                )
            continue
        if not supports(supported.specifier, version):
            raise UnsupportedVersionError(
                f"{package} {version} is installed, but anyaccel's accelerate integration "
                f"supports {supported} (tested with accelerate 1.15.0 and transformers 5.23.0). "
                f"Install a supported version: {install_hint(package)}"
            )
    return found
