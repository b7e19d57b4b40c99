"""The emulated accelerator's collective backend, documented here: ``create_backend``.

It lives in :mod:`anyaccel.emulated.collectives`, with the rest of the emulated device.
"""

from __future__ import annotations

from anyaccel.emulated.collectives import create_backend

__all__ = ["create_backend"]
