"""One rank of a 4-rank job on anyaccel_shm: TP and DP subgroups, checked against gloo's.

``python subgroup_ranks.py results``: every subgroup made three ways (``new_group(ranks=...)``
naming no backend, so inheriting anyaccel_shm; ``new_subgroups_by_enumeration``; and
``split_group`` where torch and the backend allow it) runs all_reduce (fp32, bf16; public and
direct), all_gather_into_tensor, reduce_scatter_tensor and broadcast; each rank prints one JSON
line: whether every result equals the same call on a gloo group of the same ranks, and each
subgroup's shared-memory status. ``python subgroup_ranks.py dead``: rank 3 exits inside its TP
group's second all_reduce; rank 2 prints how its call failed and how long it took, ranks 0 and
1 keep reducing on their own TP group.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed import all_reduce, init_distributed, shm_all_reduce_status
from anyaccel.distributed.shm.collectives import _ready

TP = [[0, 1], [2, 3]]
DP = [[0, 2], [1, 3]]


def pairs(groups: list[list[int]], backend: str | None, **extra: Any) -> Any:
    """This rank's group among ``groups``, every group made on every rank (as torch requires)."""
    mine = None
    for ranks in groups:
        group = dist.new_group(ranks=ranks, backend=backend, **extra)
        if dist.get_rank() in ranks:
            mine = group
    return mine


def calls(group: Any, rank: int) -> dict[str, list[torch.Tensor]]:
    """Each collective's outputs on ``group``, from inputs that depend on the global rank."""
    size = dist.get_world_size(group)
    gen = torch.Generator().manual_seed(rank)
    out: dict[str, list[torch.Tensor]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        for numel in (7, 4096, 1 << 20):  # odd, 16 KiB and 4 MiB of fp32 (several slots)
            tensor = torch.randn(numel, generator=gen).to(dtype)
            public, direct = tensor.clone(), tensor.clone()
            dist.all_reduce(public, group=group)
            if dist.get_backend(group) != "gloo":
                all_reduce(direct, group=group)
                all_reduce(direct, group=group)  # twice: the second call takes the fast path
            else:
                dist.all_reduce(direct, group=group)
                dist.all_reduce(direct, group=group)
            out[f"all_reduce {dtype} {numel}"] = [public, direct]
    # after the shortcut exists: a strided view and MAX take the full path, same results
    strided, largest = torch.randn(64, generator=gen)[::2], torch.randn(100, generator=gen)
    if dist.get_backend(group) != "gloo":
        all_reduce(strided, group=group)
        all_reduce(largest, op=dist.ReduceOp.MAX, group=group)
    else:  # gloo reduces a strided view's storage, not the view: it gets a contiguous copy
        strided = strided.contiguous()
        dist.all_reduce(strided, group=group)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=group)
    out["full path"] = [strided, largest]
    piece = torch.randn(1000, generator=gen)
    gathered = torch.empty(1000 * size)
    dist.all_gather_into_tensor(gathered, piece, group=group)
    scattered = torch.empty(1000)
    dist.reduce_scatter_tensor(scattered, torch.randn(1000 * size, generator=gen), group=group)
    sent = torch.randn(333, generator=gen)
    dist.broadcast(sent, src=dist.get_global_rank(group, 1), group=group)
    out["others"] = [gathered, scattered, sent]
    return out


def native_all_reduces(group: Any) -> int:
    """How many all_reduce calls ``group``'s c10d Backend ran in C++ (-1: not that Backend)."""
    backend = group._get_backend(torch.device("cpu"))
    return int(getattr(backend, "native_calls", {}).get("all_reduce", -1))


def split(rank: int) -> tuple[Any, str]:
    """``split_group`` of the default group into the TP pairs, or why torch refuses it here."""
    if not hasattr(dist, "split_group"):
        return None, "this torch has no split_group"
    try:
        return dist.split_group(split_ranks=TP), ""
    except (RuntimeError, ValueError) as exc:  # torch splits only backends that say they can
        return None, f"{type(exc).__name__}: {exc}"


def results() -> None:
    rank = dist.get_rank()
    record: dict[str, Any] = {"rank": rank}
    gloo_tp, gloo_dp = pairs(TP, "gloo"), pairs(DP, "gloo")
    expected = {"tp": calls(gloo_tp, rank), "dp": calls(gloo_dp, rank)}
    tp, dp = pairs(TP, None), pairs(DP, None)
    enum_tp, _ = dist.new_subgroups_by_enumeration(TP)
    enum_dp, _ = dist.new_subgroups_by_enumeration(DP)
    made = {"tp": tp, "dp": dp, "enumerated tp": enum_tp, "enumerated dp": enum_dp}
    split_tp, why = split(rank)
    record["split"] = why or "made"
    if split_tp is not None:
        made["split tp"] = split_tp
    for name, group in made.items():
        got = calls(group, rank)
        want = expected["dp" if "dp" in name else "tp"]
        record[name] = {
            "equal": all(
                torch.equal(a, b) for key in want for a, b in zip(got[key], want[key], strict=True)
            ),
            "differ": [
                key
                for key in want
                if not all(torch.equal(a, b) for a, b in zip(got[key], want[key], strict=True))
            ],
            "status": shm_all_reduce_status(group),
            "backend": dist.get_backend(group),
            "native": native_all_reduces(group),
            "fast": id(group) in _ready,
        }
    print(json.dumps(record), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def dead() -> None:
    rank = dist.get_rank()
    tp = pairs(TP, None, timeout=timedelta(seconds=20))
    tensor = torch.ones(4096)
    all_reduce(tensor, group=tp)  # sets the subgroup up on every rank
    dist.all_reduce(tensor, group=tp)
    if rank == 3:
        os._exit(0)  # gone without a word, inside the job
    start = time.monotonic()
    after = ""
    if rank == 2:
        try:
            for _ in range(3):
                time.sleep(1)
                all_reduce(tensor, group=tp)  # straight to the kernel (a call like it ran)
            outcome = "returned"
        except Exception as exc:  # the group's CollectiveError
            outcome = f"{type(exc).__name__}: {exc}"
        try:  # then the public call on the same subgroup: refused at once, never a hang
            dist.all_reduce(tensor, group=tp)
        except Exception as exc:  # the group's CollectiveError, or torch's wrapping of it
            after = f"{type(exc).__name__}: {exc}"
    else:
        for _ in range(200):
            tensor.fill_(1.0)
            dist.all_reduce(tensor, group=tp)
        outcome = f"sum {tensor[0].item()}"
    seconds = time.monotonic() - start
    record = {"rank": rank, "outcome": outcome, "after": after, "seconds": seconds}
    print(json.dumps(record), flush=True)
    os._exit(0)  # the world group lost rank 3: no collective teardown


if __name__ == "__main__":
    init_distributed(shm_backend=True)
    {"results": results, "dead": dead}[sys.argv[1]]()
