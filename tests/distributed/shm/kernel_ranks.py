"""Driving the shared-memory kernel in one process: one thread per rank, one segment (the kernel
releases the GIL while it waits, so threads stand in for ranks)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist

from anyaccel.distributed.shm.codes import kernel_codes


def load_kernel_or_skip() -> ModuleType:
    """The compiled kernel (``ShmCommBuilder``); skips the test where it cannot be built."""
    from anyaccel.ops.cpu.shm_comm import ShmCommBuilder

    builder = ShmCommBuilder()
    if not builder.is_compatible():
        pytest.skip(builder.compatibility().reason)
    return builder.load()


SLOT = 64 << 10  # small slots, so modest tensors already take several chunks


def communicators(shm: ModuleType, world_size: int) -> list[Any]:
    """``world_size`` communicators on one fresh segment, as the ranks of one group."""
    size = shm.Communicator.required_bytes(world_size, SLOT)
    fd = os.memfd_create("anyaccel-test", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        comms = [shm.Communicator(fd, size, world_size, r, SLOT, r == 0) for r in range(world_size)]
    finally:
        os.close(fd)
    for comm in comms:
        comm.set_peer_pids([os.getpid()] * world_size)
    return comms


def on_every_rank(world_size: int, work: Callable[[int], object]) -> list[object]:
    """Run ``work(rank)`` on one thread per rank; return each result or raised exception."""
    results: list[object] = [None] * world_size

    def run(rank: int) -> None:
        try:
            results[rank] = work(rank)
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a rank hung"
    return results


def dtype_code(dtype: torch.dtype) -> int:
    """The kernel's code for ``dtype`` (read from the kernel, as anyaccel reads it)."""
    return kernel_codes().dtypes[dtype]


def op_code(name: str) -> int:
    """The kernel's code for ReduceOp ``name``."""
    return kernel_codes().ops[getattr(dist.ReduceOp, name)]
