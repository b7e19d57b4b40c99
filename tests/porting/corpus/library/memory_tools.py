"""Helpers a training library keeps around: device moves, memory reports, profiler ranges."""
from __future__ import annotations

import torch
import torch.cuda as tc
from torch.cuda import nvtx


def to_device(batch, device_id=None):
    """Move a nested batch to the GPU."""
    if isinstance(batch, torch.Tensor):
        return batch.cuda(device_id) if device_id is not None else batch.cuda()
    if isinstance(batch, dict):
        return {k: to_device(v, device_id) for k, v in batch.items()}
    return type(batch)(to_device(v, device_id) for v in batch)


def memory_report(prefix=""):
    nvtx.range_push("memory_report")
    allocated = tc.memory_allocated() / 2**30
    reserved = tc.memory_reserved() / 2**30
    nvtx.range_pop()
    return f"{prefix}allocated {allocated:.2f} GiB, reserved {reserved:.2f} GiB"


def on_gpu(module: torch.nn.Module) -> bool:
    return all(p.is_cuda for p in module.parameters())


def current_index() -> int:
    return torch.cuda.current_device() + 0


def sync_all():
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)
