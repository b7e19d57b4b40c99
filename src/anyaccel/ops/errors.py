"""Exceptions raised while finding, building and loading native ops."""

from __future__ import annotations

from anyaccel.errors import AnyaccelError


class OpError(AnyaccelError, RuntimeError):
    """Base class for every op-builder error, so callers can catch them all at once."""


class OpNotAvailableError(OpError):
    """The requested op has no implementation for the current accelerator."""


class OpBuildError(OpError):
    """Compiling or loading an op failed; the message carries the first errors and the log path."""


class BuildToolMissingError(OpBuildError):
    """A tool the build needs (ninja, a C++ compiler, nvcc) is not installed."""


class OpLoadError(OpBuildError):
    """A compiled op's library does not load, even after one rebuild.

    ``library_path`` is the cached library and ``loader_message`` what the loader said.
    """

    def __init__(self, message: str, *, library_path: str, loader_message: str) -> None:
        super().__init__(message)
        self.library_path = library_path
        self.loader_message = loader_message


class ExtensionsDirError(OpError):
    """The op cache directory (``TORCH_EXTENSIONS_DIR``) is unusable: not a writable directory,
    or not trusted (``UntrustedCacheError``). ``path`` is the offending path."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class UntrustedCacheError(ExtensionsDirError):
    """A directory or file in the op cache could hold another user's code: owned by another user,
    writable by others, or a symbolic link. Nothing there is built in or loaded; the message
    names ``path``, its owner and mode, and the fix."""
