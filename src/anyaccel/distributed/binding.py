"""CPU core binding per local rank, as DeepSpeed's ``--bind_cores_to_rank``/``--bind_core_list``.

The node's usable cores (or an explicit list) are split evenly among the local ranks, keeping
each rank inside one NUMA node where the split allows (the topology is read from
``/sys/devices/system/node``). ``plan_core_binding`` only computes; ``bind_cores`` applies the
plan with ``os.sched_setaffinity`` to every thread of the process and sets the thread counts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from anyaccel.distributed.environment import launch_info
from anyaccel.errors import AcceleratorError

__all__ = [
    "CoreBinding",
    "CoreBindingError",
    "Topology",
    "bind_cores",
    "current_binding",
    "format_core_list",
    "parse_core_list",
    "plan_core_binding",
]

#: Where Linux describes NUMA nodes and their CPUs.
NUMA_SYSFS = "/sys/devices/system/node"
#: No Linux kernel numbers more CPUs than this (its NR_CPUS ceiling is 8192): core numbers
#: at or above it are refused before a range is expanded.
KERNEL_CPU_LIMIT = 1 << 16

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


class CoreBindingError(AcceleratorError, ValueError):
    """The cores cannot be split among the ranks as asked (too few, or not allowed)."""


def _core_spans(text: str) -> list[tuple[int, int]]:
    """The ranges of a core list (``"0-3,8"`` -> ``[(0, 3), (8, 8)]``), checked, not expanded."""
    spans: list[tuple[int, int]] = []
    for part in text.replace(" ", "").split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise CoreBindingError(
                f"core list {text!r} is not valid: {part!r} is not a core number or a range "
                "like 4-7; write it as e.g. '0-3,8-11'"
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise CoreBindingError(f"core list {text!r}: range {part!r} runs backwards")
        spans.append((first, last))
    return spans


def parse_core_list(text: str, *, cpu_limit: int = KERNEL_CPU_LIMIT) -> tuple[int, ...]:
    """Cores from Linux's list syntax (``"0-3,8,10-11"``), in the order given, without repeats.

    Every number must be below ``cpu_limit`` (default: more than any Linux kernel numbers); a
    larger one is refused before any range is expanded, so the cost stays linear in the cores
    that can exist. ``plan_core_binding`` refuses cores outside the process's affinity.
    """
    spans = _core_spans(text)
    for _, last in spans:
        if last >= cpu_limit:
            raise CoreBindingError(
                f"core list {text!r} names core {last}, past the highest core number possible "
                f"here ({cpu_limit - 1}); name cores this machine has (see `nproc --all`)"
            )
    cores: dict[int, None] = {}
    for first, last in spans:
        cores.update(dict.fromkeys(range(first, last + 1)))
    return tuple(cores)


def format_core_list(cores: Iterable[int]) -> str:
    """Cores in Linux's compact list syntax: ``(0, 1, 2, 3, 8)`` -> ``"0-3,8"``."""
    ordered = sorted(set(cores))
    parts: list[str] = []
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            first, last = ordered[start], ordered[index - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = index
    return ",".join(parts)


@dataclass(frozen=True)
class Topology:
    """The machine's NUMA nodes, each with its logical CPUs."""

    nodes: tuple[tuple[int, ...], ...]

    @classmethod
    def from_sysfs(cls, root: str | os.PathLike[str] = NUMA_SYSFS) -> Topology:
        """Read ``root/node*/cpulist``; a machine without that tree is one node of all CPUs."""
        nodes: list[tuple[int, ...]] = []
        directory = Path(root)
        entries = sorted(
            (int(p.name[4:]), p) for p in directory.glob("node[0-9]*") if p.name[4:].isdigit()
        )
        for _, path in entries:
            try:
                text = (path / "cpulist").read_text(encoding="ascii").strip()
            except OSError:
                continue
            if text:
                nodes.append(parse_core_list(text))
        if not nodes:
            return cls((tuple(range(os.cpu_count() or 1)),))
        return cls(tuple(nodes))

    def node_of(self, core: int) -> int | None:
        """The NUMA node holding ``core``, or ``None``."""
        return next((i for i, cores in enumerate(self.nodes) if core in cores), None)


@dataclass(frozen=True)
class CoreBinding:
    """One local rank's share of the node's cores, and the thread count that matches it."""

    local_rank: int
    local_world_size: int
    cores: tuple[int, ...]
    numa_nodes: tuple[int, ...]
    threads: int

    def __str__(self) -> str:
        nodes = ",".join(map(str, self.numa_nodes)) or "?"
        return (
            f"local rank {self.local_rank}/{self.local_world_size}: cores "
            f"{format_core_list(self.cores)} (NUMA node {nodes}), {self.threads} threads"
        )


def _allowed_cores() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask, else every CPU)."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return frozenset(range(os.cpu_count() or 1))
    return frozenset(getter(0))


def _split(
    cores: Sequence[int], local_world_size: int, topology: Topology
) -> list[tuple[int, ...]]:
    """Every rank's cores: NUMA node by node where ranks and nodes divide, else contiguous."""
    by_node = [[c for c in node if c in cores] for node in topology.nodes]
    by_node = [node for node in by_node if node]
    placed = {c for node in by_node for c in node}
    if len(placed) != len(cores):  # cores the topology does not know: treat as one node
        by_node = [list(cores)]
    per_rank = len(cores) // local_world_size
    node_count = len(by_node)
    if node_count > 1 and local_world_size % node_count == 0:
        ranks_per_node = local_world_size // node_count
        share = min(len(node) for node in by_node) // ranks_per_node
        if share >= 1:
            return [
                tuple(node[i * share : (i + 1) * share])
                for node in by_node
                for i in range(ranks_per_node)
            ]
    if node_count > 1 and node_count % local_world_size == 0:
        nodes_per_rank = node_count // local_world_size
        return [
            tuple(
                c for node in by_node[r * nodes_per_rank : (r + 1) * nodes_per_rank] for c in node
            )
            for r in range(local_world_size)
        ]
    ordered = [c for node in by_node for c in node]
    return [tuple(ordered[r * per_rank : (r + 1) * per_rank]) for r in range(local_world_size)]


def plan_core_binding(
    local_rank: int,
    local_world_size: int,
    *,
    core_list: str | Sequence[int] | None = None,
    topology: Topology | None = None,
    allowed: Iterable[int] | None = None,
) -> CoreBinding:
    """The cores ``local_rank`` of ``local_world_size`` gets; nothing is applied.

    ``core_list`` restricts the split to those cores, split in the order written (all must
    be ``allowed``, which defaults to this process's affinity). Raises ``CoreBindingError``
    when there are fewer cores than ranks or the list names cores the process may not use.
    """
    if not 0 <= local_rank < local_world_size:
        raise CoreBindingError(
            f"local rank {local_rank} is outside 0..{local_world_size - 1} "
            f"(local world size {local_world_size})"
        )
    topology = topology or Topology.from_sysfs()
    allowed_set = frozenset(allowed) if allowed is not None else _original_affinity()
    if core_list is None:
        cores: tuple[int, ...] = tuple(
            c for node in topology.nodes for c in node if c in allowed_set
        ) or tuple(sorted(allowed_set))
        source = f"the {len(cores)} cores this process may use"
    else:
        if isinstance(core_list, str):
            top = max(allowed_set, default=-1)
            beyond = [(max(first, top + 1), last) for first, last in _core_spans(core_list)]
            if any(first <= last for first, last in beyond):  # refused before expanding
                raise CoreBindingError(
                    "core list names cores this process may not use: "
                    + ",".join(f"{a}-{b}" if a < b else str(a) for a, b in beyond if a <= b)
                    + f" (allowed: {format_core_list(allowed_set)}); pick cores from the "
                    "allowed set or widen the process's affinity (taskset, cgroup cpuset)"
                )
            cores = parse_core_list(core_list, cpu_limit=top + 1)
        else:
            cores = tuple(dict.fromkeys(core_list))
            if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cores):
                raise CoreBindingError(
                    f"core list {list(core_list)!r} must hold non-negative integers"
                )
        refused = [c for c in cores if c not in allowed_set]
        if refused:
            raise CoreBindingError(
                f"core list names cores this process may not use: {format_core_list(refused)} "
                f"(allowed: {format_core_list(allowed_set)}); pick cores from the allowed set "
                "or widen the process's affinity (taskset, cgroup cpuset)"
            )
        source = f"the {len(cores)} cores of the core list {format_core_list(cores)}"
    if len(cores) < local_world_size:
        raise CoreBindingError(
            f"cannot bind {local_world_size} local ranks to {source}: each rank needs at least "
            f"one core; start at most {len(cores)} processes on this node or give more cores"
        )
    if core_list is None:
        mine = _split(cores, local_world_size, topology)[local_rank]
    else:  # an explicit list is the user's order: split it as written
        per_rank = len(cores) // local_world_size
        mine = cores[local_rank * per_rank : (local_rank + 1) * per_rank]
    nodes = tuple(sorted({n for c in mine if (n := topology.node_of(c)) is not None}))
    return CoreBinding(local_rank, local_world_size, mine, nodes, len(mine))


_ORIGINAL_AFFINITY: frozenset[int] | None = None


def _original_affinity() -> frozenset[int]:
    """The affinity before ``bind_cores`` first narrowed it (so a re-plan sees every core)."""
    return _ORIGINAL_AFFINITY if _ORIGINAL_AFFINITY is not None else _allowed_cores()


def bind_cores(
    local_rank: int | None = None,
    local_world_size: int | None = None,
    *,
    core_list: str | Sequence[int] | None = None,
    topology: Topology | None = None,
) -> CoreBinding:
    """Bind this process (all its threads) to its share of cores and match the thread counts.

    Rank and size default to the launcher's variables (``launch_info``). Sets
    ``torch.set_num_threads`` and ``OMP_NUM_THREADS`` (for child processes). Raises
    ``CoreBindingError`` as ``plan_core_binding`` does, before changing anything.
    """
    global _ORIGINAL_AFFINITY
    if local_rank is None or local_world_size is None:
        info = launch_info()
        local_rank = info.local_rank if local_rank is None else local_rank
        local_world_size = info.local_world_size if local_world_size is None else local_world_size
    plan = plan_core_binding(local_rank, local_world_size, core_list=core_list, topology=topology)
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        raise CoreBindingError(
            "this platform has no os.sched_setaffinity; core binding needs Linux"
        )
    if _ORIGINAL_AFFINITY is None:
        _ORIGINAL_AFFINITY = _allowed_cores()
    for thread in _thread_ids():
        try:
            setter(thread, plan.cores)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            continue
    import torch

    torch.set_num_threads(plan.threads)
    os.environ["OMP_NUM_THREADS"] = str(plan.threads)
    return plan


def _thread_ids() -> list[int]:
    """This process's thread ids (the main one first), so existing pools are bound too."""
    try:
        others = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        others = []
    return [0, *(tid for tid in others if tid != os.getpid())]


def current_binding() -> str:
    """This process's CPU affinity and thread count, for reports: ``"cores 0-3, 4 threads"``."""
    import torch

    cores = _allowed_cores()
    total = os.cpu_count() or len(cores)
    scope = "all" if len(cores) >= total else f"{len(cores)} of {total}"
    return f"cores {format_core_list(cores)} ({scope}), {torch.get_num_threads()} torch threads"
