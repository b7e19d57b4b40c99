"""Contract cases shared by the vendor backend tests: which vendor function each call reaches.

A case names a contract method, its arguments, the simulated vendor function the call must
reach (``None`` where the backend answers without the vendor) and the kind of value it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import torch

from anyaccel.abstract import Accelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, SimulatedGraph

_STATE = torch.Generator().get_state()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_none(value: Any) -> bool:
    return value is None


@dataclass(frozen=True)
class Case:
    """One contract call and what it must reach and return."""

    method: str
    vendor: str | None
    check: Callable[[Any], bool]
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return self.method


GENERIC: dict[str, Case] = {
    c.method: c
    for c in (
        Case("device_count", "device_count", _is_int),
        Case("current_device", "current_device", _is_int),
        Case("set_device", "set_device", _is_none, (0,)),
        Case("synchronize", "synchronize", _is_none),
        Case("is_available", "is_available", lambda v: v is True),
        Case("get_rng_state", "get_rng_state", lambda v: isinstance(v, torch.Tensor)),
        Case("set_rng_state", "set_rng_state", _is_none, (_STATE,)),
        Case("manual_seed", "manual_seed", _is_none, (7,)),
        Case("manual_seed_all", "manual_seed_all", _is_none, (7,)),
        Case("initial_seed", "initial_seed", _is_int),
        Case("default_generator", None, lambda v: isinstance(v, torch.Generator), (0,)),
        Case("current_stream", "current_stream", lambda v: v is not None),
        Case("default_stream", "default_stream", lambda v: v is not None),
        Case("stream", "stream", lambda v: isinstance(v, AbstractContextManager), (None,)),
        Case("empty_cache", "empty_cache", _is_none),
        Case("memory_allocated", "memory_allocated", _is_int),
        Case("max_memory_allocated", "max_memory_allocated", _is_int),
        Case("reset_max_memory_allocated", "reset_max_memory_allocated", _is_none),
        Case("memory_cached", "memory_reserved", _is_int),
        Case("max_memory_cached", "max_memory_reserved", _is_int),
        Case("reset_max_memory_cached", "reset_max_memory_cached", _is_none),
        Case("memory_stats", "memory_stats", lambda v: isinstance(v, dict)),
        Case("reset_peak_memory_stats", "reset_peak_memory_stats", _is_none),
        Case("memory_reserved", "memory_reserved", _is_int),
        Case("max_memory_reserved", "max_memory_reserved", _is_int),
        Case("total_memory", "get_device_properties", lambda v: _is_int(v) and v > 0),
        Case("available_memory", "mem_get_info", lambda v: _is_int(v) and v > 0),
        Case("is_bf16_supported", "is_bf16_supported", lambda v: isinstance(v, bool)),
        Case("lazy_call", "_lazy_call", _is_none, (lambda: None,)),
        Case("is_current_stream_capturing", "is_current_stream_capturing", lambda v: v is False),
    )
}

#: What ``create_graph`` returns on a backend whose vendor module has a graph class.
VENDOR_GRAPH = Case("create_graph", None, lambda v: isinstance(v, SimulatedGraph))


def cases(graph_class: str | None, **overrides: Case | None) -> list[Case]:
    """The generic cases with ``overrides`` (``None`` drops one), plus ``create_graph``."""
    table: dict[str, Case | None] = dict(GENERIC)
    table.update(overrides)
    graph = (
        replace(VENDOR_GRAPH, vendor=graph_class)
        if graph_class
        else Case("create_graph", None, lambda v: type(v).__name__ == "HostGraph")
    )
    return [c for c in table.values() if c is not None] + [graph]


def check_case(accelerator: Accelerator, sim: SimulatedDeviceModule, case: Case) -> None:
    """Call ``case.method`` and check the vendor function reached and the value returned."""
    sim.calls.clear()
    result = getattr(accelerator, case.method)(*case.args)
    if case.vendor is not None:
        assert case.vendor in sim.calls, f"{case.method} did not call {case.vendor}: {sim.calls}"
    assert case.check(result), f"{case.method} returned {result!r}"
