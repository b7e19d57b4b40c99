"""Code that asks the accelerator for its backend gets anyaccel_shm on CPU ranks, as gloo computes.

What ``anyaccel port`` writes (``init_process_group(backend=get_accelerator()
.communication_backend_name())``), run as torchrun runs it, under ``mp.spawn`` and after a
fork: each rank registers the backend by asking, and DDP trains to gloo's losses. With
``ANYACCEL_SHM_BACKEND=0`` the same script runs on gloo.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .ranks import finish, free_port, multiprocess, start_ranks

#: A ported script's set-up, a short DDP training and the reduce ops Lightning and DeepSpeed send.
PORTED = r"""
import json, os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from anyaccel import get_accelerator




def train(rank, world_size, port, out=None):
    if port:  # mp.spawn/fork: the parent passes the rendezvous
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size))
    dist.init_process_group(backend=get_accelerator().communication_backend_name())
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(4):
        torch.manual_seed(100 * step + dist.get_rank())
        x = torch.randn(16, 8)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item())
    count = torch.tensor([3 + dist.get_rank() * 2])  # int64, as Lightning's counters
    if dist.get_backend() != "gloo":
        dist.all_reduce(count, op=dist.ReduceOp.AVG)
    else:  # Lightning's own rewrite for gloo, which has no AVG
        dist.all_reduce(count)
        count.copy_(count / dist.get_world_size())
    biggest = torch.tensor([float(dist.get_rank()), -1.0])
    dist.all_reduce(biggest, op=dist.ReduceOp.MAX)
    from anyaccel.distributed import shm_process_group

    shm = shm_process_group()  # behind torch's group where its C++ form runs (None on gloo)
    report = {
        "backend": dist.get_backend(),
        "status": "gloo" if shm is None else shm.status,
        "losses": losses,
        "weights": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
        "count": count.tolist(),
        "max": biggest.tolist(),
    }
    if out:  # ranks sharing the parent's stdout write files instead
        with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
            json.dump(report, file)
    else:
        print(json.dumps(report), flush=True)
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    import sys

    how = sys.argv[1]
    if how == "torchrun":
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None)
    else:
        import torch.multiprocessing as mp

        if how == "fork":  # the parent asked (and registered) before the fork
            print(json.dumps({"parent": get_accelerator().communication_backend_name()}))
        mp.start_processes(train, args=(2, *sys.argv[2:]), nprocs=2, start_method=how)
"""


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("ported") / "ported.py"
    script.write_text(PORTED)
    return script


def _reports(outputs: list[str]) -> list[dict[str, object]]:
    lines = [line for out in outputs for line in out.splitlines() if line.startswith("{")]
    return [json.loads(line) for line in lines]


def _torchrun(script: Path, setting: str | None) -> list[dict[str, object]]:
    env = {} if setting is None else {"ANYACCEL_SHM_BACKEND": setting}
    code = (
        "import runpy, sys; sys.argv = ['ported', 'torchrun']; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    return _reports(finish(start_ranks(code, 2, env=env)))


@multiprocess
def test_a_ported_script_under_torchrun_gets_anyaccel_shm_with_gloos_results(
    ported: Path,
) -> None:
    fast, gloo = _torchrun(ported, None), _torchrun(ported, "0")
    assert [(r["backend"], r["status"]) for r in fast] == [("anyaccel_shm", "shared memory")] * 2
    assert [r["backend"] for r in gloo] == ["gloo", "gloo"]
    for ours, theirs in zip(fast, gloo, strict=True):
        assert ours["losses"] == pytest.approx(theirs["losses"], rel=1e-6)
        assert ours["weights"] == pytest.approx(theirs["weights"], rel=1e-6)
        assert ours["count"] == theirs["count"] == [4]  # (3 + 5) / 2, an int64 AVG
        assert ours["max"] == theirs["max"] == [1.0, -1.0]


@multiprocess
@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_spawned_and_forked_ranks_register_it_by_asking(
    ported: Path, method: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from .ranks import TIMEOUT, base_env

    result = subprocess.run(
        [sys.executable, str(ported), method, str(free_port()), str(tmp_path)],
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = _reports([result.stdout])
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [(r["backend"], r["status"]) for r in ranks] == [("anyaccel_shm", "shared memory")] * 2
    assert ranks[0]["losses"] == ranks[1]["losses"] and ranks[0]["count"] == [4]
    if method == "fork":
        assert reports[0] == {"parent": "anyaccel_shm"}
