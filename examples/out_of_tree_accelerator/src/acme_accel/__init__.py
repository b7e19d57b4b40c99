"""anyaccel support for Acme boards (an example of adding hardware from outside anyaccel)."""

from __future__ import annotations

from acme_accel.accelerator import AcmeAccelerator

__all__ = ["AcmeAccelerator"]
