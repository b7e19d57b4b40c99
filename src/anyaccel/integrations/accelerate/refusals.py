"""What the accelerate integration raises and warns: one root, and the built-in type to expect."""

from __future__ import annotations

from anyaccel.errors import AcceleratorError, AnyaccelWarning

__all__ = [
    "AccelerateIntegrationError",
    "AccelerateNotInstalledError",
    "AccelerateStateConflictError",
    "NoDistributedTypeError",
    "TransformersDeviceWarning",
    "UnsupportedVersionError",
]


class AccelerateIntegrationError(AcceleratorError):
    """accelerate or transformers cannot be made to run on anyaccel's device."""


class AccelerateNotInstalledError(AccelerateIntegrationError, ImportError):
    """accelerate (or transformers) is needed for this call but is not installed."""


class UnsupportedVersionError(AccelerateIntegrationError, ValueError):
    """The installed accelerate or transformers is outside :data:`SUPPORTED_VERSIONS`."""


class AccelerateStateConflictError(AccelerateIntegrationError):
    """accelerate's state already exists with another device or distributed type."""


class NoDistributedTypeError(AccelerateIntegrationError):
    """A multi-process job on a device accelerate has no ``DistributedType`` (or path) for."""


class TransformersDeviceWarning(AnyaccelWarning):
    """transformers' own single-process device chain will pick another device than anyaccel."""
