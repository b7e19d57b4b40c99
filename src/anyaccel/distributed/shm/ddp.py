"""A DDP communication hook that averages gradients through the shared-memory ``all_reduce``."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed.shm.collectives import all_reduce

__all__ = ["ddp_comm_hook"]


def ddp_comm_hook(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook that averages gradients with ``all_reduce``.

    ``ddp.register_comm_hook(None, ddp_comm_hook)`` (``state`` is the process group, ``None``
    for the default): gradients of CPU models then go through shared memory on one node.
    """
    tensor: torch.Tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(state))
    all_reduce(tensor, group=state)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(tensor)
    return future


# DDP compares the annotations with the real classes; postponed evaluation made them strings.
ddp_comm_hook.__annotations__ = {
    "state": object,
    "bucket": getattr(dist, "GradBucket", object),
    "return": torch.futures.Future[torch.Tensor],
}
