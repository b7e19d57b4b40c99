"""Every op builder name DeepSpeed knows, for DeepSpeed's walk of this package (see registry)."""

from __future__ import annotations

from anyaccel.ops.registry import deepspeed_walk_names

__dir__, __getattr__ = deepspeed_walk_names(__package__ or __name__.rpartition(".")[0])
