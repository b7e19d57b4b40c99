"""The errors of ``anyaccel.distributed``: a job that cannot start, a collective that cannot end."""

from __future__ import annotations

from anyaccel.errors import AcceleratorError

__all__ = ["CollectiveError", "DistributedSetupError"]


class DistributedSetupError(AcceleratorError):
    """The launch environment or the collective backend is not usable as it stands."""


class CollectiveError(AcceleratorError):
    """A collective could not finish: a rank died, timed out or passed a different tensor.

    A run-time failure of a group that was set up, not a set-up error; after it the group's
    shared-memory path is unusable.
    """
