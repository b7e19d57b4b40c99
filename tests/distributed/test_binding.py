"""Core-binding plans for several machine shapes (injected topologies), and binding applied."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anyaccel.distributed import (
    CoreBindingError,
    Topology,
    current_binding,
    parse_core_list,
    plan_core_binding,
)
from anyaccel.distributed.binding import format_core_list

ONE_NODE_8 = Topology((tuple(range(8)),))
TWO_NODES_16 = Topology((tuple(range(8)), tuple(range(8, 16))))
FOUR_NODES_16 = Topology(tuple(tuple(range(n * 4, n * 4 + 4)) for n in range(4)))
ALL_16 = range(16)


def plans(ranks: int, topology: Topology, **kwargs: object) -> list[tuple[int, ...]]:
    allowed = kwargs.pop("allowed", [c for node in topology.nodes for c in node])
    return [
        plan_core_binding(r, ranks, topology=topology, allowed=allowed, **kwargs).cores  # type: ignore[arg-type]
        for r in range(ranks)
    ]


def test_one_numa_node_is_split_evenly() -> None:
    assert plans(2, ONE_NODE_8) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert plans(3, ONE_NODE_8) == [(0, 1), (2, 3), (4, 5)]  # the two left over stay unused


def test_two_numa_nodes_keep_each_rank_inside_one() -> None:
    two = [plan_core_binding(r, 2, topology=TWO_NODES_16, allowed=ALL_16) for r in range(2)]
    assert [p.numa_nodes for p in two] == [(0,), (1,)]
    four = plans(4, TWO_NODES_16)
    assert four == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]


def test_uneven_numa_nodes_still_keep_ranks_on_their_node() -> None:
    lopsided = Topology(((0, 1, 2, 3, 4, 5), (6, 7, 8, 9)))
    assert plans(2, lopsided) == [(0, 1, 2, 3), (6, 7, 8, 9)]


def test_fewer_ranks_than_nodes_take_whole_nodes() -> None:
    first = plan_core_binding(0, 2, topology=FOUR_NODES_16, allowed=ALL_16)
    assert (first.cores, first.numa_nodes) == (tuple(range(8)), (0, 1))


def test_explicit_core_list_is_split_in_its_order() -> None:
    assert plans(2, TWO_NODES_16, core_list="8-11,0-3") == [(8, 9, 10, 11), (0, 1, 2, 3)]
    assert plans(2, TWO_NODES_16, core_list=[1, 3, 5, 7]) == [(1, 3), (5, 7)]


def test_plan_prints_cores_nodes_and_threads() -> None:
    plan = plan_core_binding(1, 2, topology=TWO_NODES_16, allowed=ALL_16)
    assert str(plan) == "local rank 1/2: cores 8-15 (NUMA node 1), 8 threads"
    assert plan.threads == 8


def test_more_ranks_than_cores_is_a_clear_error() -> None:
    with pytest.raises(CoreBindingError, match="cannot bind 9 local ranks to the 8 cores"):
        plan_core_binding(0, 9, topology=ONE_NODE_8, allowed=range(8))


def test_core_list_with_cores_not_allowed_is_a_clear_error() -> None:
    with pytest.raises(CoreBindingError, match=r"may not use: 8-9 \(allowed: 0-7\)"):
        plan_core_binding(0, 2, core_list="6-9", topology=ONE_NODE_8, allowed=range(8))


@pytest.mark.parametrize("text", ["0-", "a", "3-1", "1,,2", "-1"])
def test_malformed_core_lists_are_refused(text: str) -> None:
    with pytest.raises(CoreBindingError, match="core list"):
        parse_core_list(text)


def test_core_lists_round_trip() -> None:
    assert parse_core_list("0-3, 8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert format_core_list((11, 10, 8, 3, 2, 1, 0)) == "0-3,8,10-11"


def test_local_rank_outside_the_node_is_refused() -> None:
    with pytest.raises(CoreBindingError, match=r"outside 0\.\.1"):
        plan_core_binding(2, 2, topology=ONE_NODE_8, allowed=range(8))


def test_topology_is_read_from_sysfs(tmp_path: Path) -> None:
    for node, cpus in (("node0", "0-3"), ("node1", "4-7"), ("node2", "")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    (tmp_path / "possible").write_text("0-2\n")
    assert Topology.from_sysfs(tmp_path).nodes == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_missing_sysfs_is_one_node_of_every_cpu(tmp_path: Path) -> None:
    assert Topology.from_sysfs(tmp_path / "absent").nodes == (tuple(range(os.cpu_count() or 1)),)


def test_current_binding_describes_this_process() -> None:
    text = current_binding()
    assert text.startswith("cores ") and "torch threads" in text


def test_report_shows_this_process_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel import get_accelerator
    from anyaccel.cli.report import accelerator_summary

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    summary = accelerator_summary(get_accelerator())
    assert summary["cpu_binding"] == current_binding()


BIND_SCRIPT = textwrap.dedent(
    """
    import os, threading, torch
    from anyaccel.distributed import bind_cores
    torch.ones(1 << 20).sum()  # start torch's thread pool before binding
    plan = bind_cores(1, 2, core_list=[0, 1] if os.cpu_count() > 1 else [0])
    seen = []
    t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    print(sorted(os.sched_getaffinity(0)), seen[0], torch.get_num_threads(),
          os.environ["OMP_NUM_THREADS"], plan)
    """
)


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux affinity and two usable cores",
)
def test_bind_cores_applies_affinity_and_thread_counts() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BIND_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("[1] [1] 1 1 local rank 1/2: cores 1")


# --- core lists far beyond the machine ------------------------------------------------------
HUGE_CORE_LISTS = textwrap.dedent(
    """
    import os
    from anyaccel.distributed import CoreBindingError, bind_cores, parse_core_list
    before = sorted(os.sched_getaffinity(0))
    for call in (lambda: bind_cores(0, 1, core_list="0-3000000"),
                 lambda: parse_core_list("0-3000000")):
        try:
            call()
            print("accepted")
        except CoreBindingError as error:
            print(error)
    print(len(parse_core_list("0-65535")), sorted(os.sched_getaffinity(0)) == before)
    """
)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux affinity")
def test_a_core_list_far_beyond_the_machine_is_refused_at_once() -> None:
    # The parser expanded ranges into a list it searched for every core: "0-60000" took 17 s,
    # "0-3000000" never returned. A hang here fails at the timeout instead of stalling the run.
    done = subprocess.run(
        [sys.executable, "-c", HUGE_CORE_LISTS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    binding, parsing, largest = done.stdout.strip().splitlines()
    allowed = format_core_list(os.sched_getaffinity(0))
    assert binding.startswith("core list names cores this process may not use: ")
    assert "-3000000 (allowed: " + allowed + ")" in binding
    assert "names core 3000000, past the highest core number possible here (65535)" in parsing
    assert largest == "65536 True"  # linear: the largest list Linux allows parses; no binding
