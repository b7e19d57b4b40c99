"""The exceptions anyaccel raises where a caller may want to catch them.

Each message names the bad value and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "AcceleratorError",
    "AcceleratorUnavailableError",
    "AnyaccelError",
    "AnyaccelWarning",
    "CpuFallbackWarning",
    "DuplicateBackendError",
    "InvalidAcceleratorError",
    "InvalidSettingError",
    "ReentrantDetectionError",
    "UnknownAcceleratorError",
    "UnsupportedFeatureError",
]


class AnyaccelError(Exception):
    """The root of every exception anyaccel defines: ``except AnyaccelError`` catches them all.

    Each subclass also derives from the built-in type a caller would expect (``ValueError``,
    ``TypeError``, ``RuntimeError``...), so code written against those keeps working.
    """


class AnyaccelWarning(UserWarning):
    """The root of every warning anyaccel issues, for one ``warnings.filterwarnings`` line."""


class AcceleratorError(AnyaccelError, RuntimeError):
    """Base class of every error anyaccel raises about accelerators."""


class UnknownAcceleratorError(AcceleratorError, ValueError):
    """A backend name (e.g. from ``DS_ACCELERATOR``) that no registered backend answers to."""

    def __init__(self, name: str, valid: list[str], source: str) -> None:
        self.name = name
        self.valid = list(valid)
        self.source = source
        super().__init__(
            f"{source}={name!r} is not a known accelerator. "
            f"Valid names: {', '.join(self.valid)}. "
            f"Set {source} to one of them, or unset it to detect the accelerator automatically."
        )


class AcceleratorUnavailableError(AcceleratorError):
    """A known backend was asked for but cannot run here.

    ``kind`` says why: ``"not_installed"`` (its runtime package is missing), ``"broken"``
    (the package is there but fails to import or initialise) or ``"no_device"`` (it imports
    but sees no device).
    """

    def __init__(self, name: str, kind: str, reason: str, remedy: str) -> None:
        self.name = name
        self.kind = kind
        self.reason = reason
        self.remedy = remedy
        what = {
            "not_installed": "its runtime is not installed",
            "broken": "its runtime is installed but broken",
            "no_device": "no device is visible",
        }.get(kind, kind)
        super().__init__(f"accelerator {name!r} was requested but {what}: {reason}. {remedy}")


class InvalidAcceleratorError(AcceleratorError, TypeError):
    """An object passed as an accelerator that does not satisfy the contract."""


class DuplicateBackendError(AcceleratorError, ValueError):
    """``register_backend`` was asked to add a name that is taken, without ``override=True``."""


class InvalidSettingError(AcceleratorError, ValueError):
    """An anyaccel environment variable holds a value anyaccel cannot use."""


class ReentrantDetectionError(AcceleratorError):
    """The accelerator was asked for from code that runs inside detection (a plugin's probe)."""


class UnsupportedFeatureError(AcceleratorError, NotImplementedError):
    """A contract feature this backend's hardware or runtime does not provide."""

    def __init__(self, backend: str, feature: str, hint: str = "") -> None:
        self.backend = backend
        self.feature = feature
        message = f"{feature} is not supported on the {backend!r} accelerator"
        super().__init__(f"{message}. {hint}" if hint else message)


class CpuFallbackWarning(AnyaccelWarning):
    """Detection found no accelerator and fell back to the CPU."""
