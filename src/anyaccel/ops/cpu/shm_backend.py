"""The old module of the c10d ``Backend``'s builder, kept so old imports work.

Use ``anyaccel.ops.cpu.shm_c10d_backend`` (``ShmC10dBackendBuilder``, also ``ShmBackendBuilder``):
"shm_backend" also names the Python process group (``anyaccel.distributed.shm.backend``).
"""

from __future__ import annotations

from anyaccel.ops.cpu.shm_c10d_backend import ShmBackendBuilder, ShmC10dBackendBuilder

__all__ = ["ShmBackendBuilder", "ShmC10dBackendBuilder"]
