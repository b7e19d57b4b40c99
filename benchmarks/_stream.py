"""STREAM-style kernels built with anyaccel's CPU op flags: the benchmark's bandwidth roofline."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

import torch

from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder


class StreamBuilder(CPUOpBuilder):
    """``add_inplace`` (12 B/element) and ``triad`` (16 B/element), OpenMP and vectorised."""

    NAME = "bench_stream"

    def sources(self) -> list[str]:
        """The one kernel file beside this module."""
        here = os.path.dirname(os.path.abspath(__file__))
        return [os.path.join(here, "_stream_csrc", "stream.cpp")]

    def depends(self) -> list[str]:
        """No shared headers."""
        return []


def stream_kernels(count: int = 50_000_000) -> dict[str, tuple[Callable[[], object], int]]:
    """Bandwidth kernels over ``count``-element fp32 arrays, with the bytes moved per element."""
    module: ModuleType = StreamBuilder().load()
    a, b, c, d = (torch.ones(count) for _ in range(4))
    threads = torch.get_num_threads()
    return {
        "p,m,v += g (compiled, Adam's 28 B/elt)": (
            lambda: module.adam_shaped(
                a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), count, threads
            ),
            28,
        ),
        "a += b (compiled, 12 B/elt)": (
            lambda: module.add_inplace(a.data_ptr(), b.data_ptr(), count, threads),
            12,
        ),
        "a = b + s*c (compiled, 16 B/elt)": (
            lambda: module.triad(a.data_ptr(), b.data_ptr(), c.data_ptr(), 0.5, count, threads),
            16,
        ),
        "torch a.add_(b) (12 B/elt)": (lambda: a.add_(b), 12),
        "torch b.copy_(a) (12 B/elt)": (lambda: b.copy_(a), 12),
    }


def adam_shaped_step(size: int) -> Callable[[], object]:
    """Adam's memory traffic (read p, g, m, v; write p, m, v) with no arithmetic, on ``size``."""
    module: ModuleType = StreamBuilder().load()
    p, g, m, v = (torch.ones(size) for _ in range(4))
    threads = torch.get_num_threads()
    return lambda: module.adam_shaped(
        p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr(), size, threads
    )


def adam_shaped_copy_step(size: int) -> Callable[[], object]:
    """Adam's traffic plus the offload step's bf16 copy, written the way the optimizer writes it."""
    module: ModuleType = StreamBuilder().load()
    p, g, m, v = (torch.ones(size) for _ in range(4))
    copy = torch.empty(size, dtype=torch.bfloat16)
    threads = torch.get_num_threads()
    return lambda: module.adam_shaped_copy(
        p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr(), copy.data_ptr(), size, threads
    )
