"""One real two-rank job through the whole package: init_distributed twice, core binding, the
shared-memory all_reduce against gloo for every dtype and size, DDP's hook, DeepSpeed's op; and
the DDP example under torchrun.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .ranks import TIMEOUT, base_env, finish, free_port, start_ranks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux"),
]

ROOT = Path(__file__).resolve().parents[2]


# --- one job: correctness against gloo, fallbacks, barrier, binding, DeepSpeed's op ----------
JOB = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import init_distributed, all_reduce, shm_all_reduce_status
    info = init_distributed("gloo", bind_cores=True, timeout=timedelta(seconds=60))
    again = init_distributed()
    rank = info.rank
    checks = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for numel in (3, 1_500_001):  # the large one spans several 4 MiB slots
            x = torch.randn(numel, generator=torch.Generator().manual_seed(rank)).to(dtype)
            y = x.clone()
            all_reduce(x)
            dist.all_reduce(y)
            checks[f"{dtype} x {numel} equals gloo"] = torch.equal(x, y)
    m = (torch.arange(12.0).reshape(3, 4) + rank).t()
    n = m.clone()
    all_reduce(m)
    dist.all_reduce(n)
    checks["non-contiguous equals gloo"] = torch.equal(m, n)
    x = torch.tensor([1.0, 5.0]) * (rank + 1)
    all_reduce(x, op=dist.ReduceOp.MAX)
    checks["max"] = x.tolist() == [2.0, 10.0]
    i = torch.tensor([rank + 1])
    all_reduce(i)
    checks["int64 falls back to gloo"] = i.item() == 3
    from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder
    module = ShareMemCommBuilder().load()
    module.initialize(info.world_size, rank)
    t = torch.full((5,), float(rank + 1))
    r = torch.ops.deepspeed.inference_all_reduce_(t)
    checks["deepspeed inference_all_reduce_"] = t.tolist() == [3.0] * 5 and r is t
    from anyaccel.distributed import ddp_comm_hook
    grads = []
    for hook in (None, ddp_comm_hook):
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 3))
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        ddp(torch.randn(8, 64, generator=torch.Generator().manual_seed(rank))).sum().backward()
        grads.append([p.grad.clone() for p in ddp.parameters()])
    checks["ddp_comm_hook equals DDP's gloo averaging"] = all(
        torch.equal(a, b) for a, b in zip(*grads))
    solo = dist.new_group([0])
    s = torch.full((4,), float(rank + 1))
    all_reduce(s, group=solo)  # rank 1 is not a member: untouched; rank 0 alone: untouched
    checks["group of one / non-member leaves the tensor"] = s.tolist() == [rank + 1.0] * 4
    dist.barrier()
    checks["second init_distributed"] = (again.rank, again.world_size) == (rank, 2)
    print(json.dumps({"rank": rank, "checks": checks, "status": shm_all_reduce_status(),
                      "affinity": sorted(os.sched_getaffinity(0)),
                      "threads": torch.get_num_threads()}))
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def job() -> list[dict[str, Any]]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("core binding of 2 ranks needs 2 usable cores")
    outputs = finish(start_ranks(JOB))
    return sorted((json.loads(out.strip().splitlines()[-1]) for out in outputs),
                  key=lambda r: r["rank"])  # fmt: skip


def test_all_reduce_equals_gloo_for_every_dtype_and_size(job: list[dict[str, Any]]) -> None:
    for result in job:
        failed = [name for name, ok in result["checks"].items() if not ok]
        assert failed == [], f"rank {result['rank']}: {failed}"


def test_one_node_group_uses_shared_memory(job: list[dict[str, Any]]) -> None:
    assert [r["status"] for r in job] == ["shared memory", "shared memory"]


def test_bind_cores_gives_each_rank_its_own_cores(job: list[dict[str, Any]]) -> None:
    first, second = (set(r["affinity"]) for r in job)
    assert first and second and not first & second
    share = len(os.sched_getaffinity(0)) // 2
    assert [len(r["affinity"]) for r in job] == [share, share]
    assert [r["threads"] for r in job] == [share, share]


# --- the DDP example -----------------------------------------------------------------------
def test_ddp_example_trains_under_torchrun() -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               str(ROOT / "examples" / "ddp_train.py"), "--steps", "30"]  # fmt: skip
    proc = subprocess.Popen(command, env=base_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    losses = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step")]
    assert len(losses) >= 3 and losses[-1] < losses[0] / 4, out + err[-3000:]
    # init_distributed() gives CPU ranks on one node the shared-memory backend by default
    expected = "done: 2 ranks on cpu (anyaccel_shm), parameters in sync across ranks"
    assert expected in out, err[-3000:]
    assert out.rstrip().endswith("gradients via shared memory")
    assert proc.returncode == 0, err[-3000:]
