"""Exceptions raised while finding, building and loading native ops."""

from __future__ import annotations


class OpError(RuntimeError):
    """Base class for every op-builder error, so callers can catch them all at once."""


class OpNotAvailableError(OpError):
    """The requested op has no implementation for the current accelerator."""


class OpBuildError(OpError):
    """Compiling or loading an op failed; the message carries the first errors and the log path."""


class BuildToolMissingError(OpBuildError):
    """A tool the build needs (ninja, a C++ compiler, nvcc) is not installed."""
