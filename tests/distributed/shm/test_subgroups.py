"""Subgroups of an anyaccel_shm job (tensor-parallel pairs inside data-parallel pairs), 4 real
ranks: results equal gloo's on the same ranks, on shared memory, and a dead rank fails its
subgroup's peer within the group's timeout while the other subgroup carries on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from ..ranks import finish, multiprocess, start_ranks

SCRIPT = (Path(__file__).parent / "subgroup_ranks.py").read_text()


def records(outputs: list[str]) -> list[dict[str, Any]]:
    """Each rank's JSON line, in rank order."""
    rows = [json.loads(line) for out in outputs for line in out.splitlines() if line[:1] == "{"]
    return sorted(rows, key=lambda row: row["rank"])


@pytest.fixture(scope="module")
def subgroups() -> list[dict[str, Any]]:
    """Every rank's record of the 4-rank subgroup job (one job for the module's tests)."""
    return records(finish(start_ranks(SCRIPT, 4, "results"), timeout=600))


@multiprocess
@pytest.mark.parametrize("made", ["tp", "dp", "enumerated tp", "enumerated dp"])
def test_subgroups_inherit_shared_memory_and_equal_gloo(
    subgroups: list[dict[str, Any]], made: str
) -> None:
    # new_group(ranks=...) naming no backend and new_subgroups_by_enumeration inherit the
    # default group's anyaccel_shm; every collective equals gloo's on the same ranks, bit for bit
    assert [row["rank"] for row in subgroups] == [0, 1, 2, 3]
    for row in subgroups:
        got = row[made]
        assert got["backend"] == "anyaccel_shm", row
        assert got["status"] == "shared memory", row
        assert got["equal"] is True, row
        assert got["native"] != 0, row  # the C++ Backend ran its all_reduces without Python
        assert got["fast"] is True, row  # repeat direct calls went straight to the kernel


@multiprocess
def test_split_group_is_made_and_equal_or_refused_by_torch(
    subgroups: list[dict[str, Any]],
) -> None:
    # torch splits only a default group bound to a device whose backend can split (NCCL, XCCL):
    # a CPU job gets torch's own refusal at once (never a hang); where torch makes it, it equals
    for row in subgroups:
        if row["split"] == "made":
            assert row["split tp"]["equal"] is True, row
        elif hasattr(dist, "split_group"):
            assert row["split"].startswith(("RuntimeError", "ValueError")), row
        else:  # torch before 2.6 has none
            assert row["split"] == "this torch has no split_group", row


@multiprocess
def test_a_dead_rank_fails_its_subgroup_peer_and_not_the_other_subgroup() -> None:
    procs = start_ranks(SCRIPT, 4, "dead")
    rows = records(finish(procs, timeout=300))
    by_rank = {row["rank"]: row for row in rows}
    assert set(by_rank) == {0, 1, 2}, rows  # rank 3 left without a word
    assert by_rank[0]["outcome"] == by_rank[1]["outcome"] == "sum 2.0", rows
    failed = by_rank[2]
    assert failed["outcome"].startswith("CollectiveError"), failed
    assert "died" in failed["outcome"] and "restart the job" in failed["outcome"], failed
    assert failed["seconds"] < 20, failed  # within the subgroup's 20 s timeout
    assert failed["after"], failed  # the public call on the failed subgroup raised too
