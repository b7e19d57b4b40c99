"""Train a small model with DistributedDataParallel on whatever accelerator anyaccel finds.

The same file runs unchanged as one plain process and under a launcher, on this CPU (gloo),
on GPUs (nccl) and on NPUs (hccl):

    python examples/ddp_train.py [--steps 50]
    torchrun --nproc-per-node 2 examples/ddp_train.py [--steps 50] [--bind-cores]

Each rank trains on its own shard of a synthetic regression task; DDP averages the gradients
(on the CPU through anyaccel's shared-memory all-reduce when the ranks share a node), so every
rank ends with the same weights (checked at the end). Alone, it trains without DDP.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from anyaccel import get_accelerator
from anyaccel.distributed import (
    all_reduce,
    ddp_comm_hook,
    init_distributed,
    is_launched,
    shm_all_reduce_status,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--bind-cores", action="store_true", help="bind each rank to its cores")
    args = parser.parse_args()

    distributed = is_launched()  # torchrun, mpirun or srun started us; else one plain process
    if distributed:
        info = init_distributed(bind_cores=args.bind_cores)  # backend, device from the accelerator
        rank, world_size = info.rank, info.world_size
    else:
        rank, world_size = 0, 1
    accelerator = get_accelerator()
    device = accelerator.current_device_name()  # 'cuda:1', 'npu:0', 'cpu': this rank's device
    on_cpu = accelerator.device_name() == "cpu"
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    trained: nn.Module = model
    if distributed:
        ddp = DistributedDataParallel(
            model, device_ids=None if on_cpu else [accelerator.current_device()]
        )
        if on_cpu:  # average gradients through shared memory when ranks share a node
            ddp.register_comm_hook(None, ddp_comm_hook)
        trained = ddp
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.05)

    data = torch.Generator().manual_seed(1000 + rank)  # each rank: its own shard
    true_weights = torch.linspace(-1, 1, 16)
    for step in range(1, args.steps + 1):
        inputs = torch.randn(args.batch_size, 16, generator=data)
        targets = (inputs @ true_weights).unsqueeze(1)
        loss = nn.functional.mse_loss(trained(inputs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step == 1 or step % 10 == 0 or step == args.steps):
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)

    if not distributed:
        print(f"done: 1 process on {accelerator.device_name()} (not launched: no DDP)")
        return
    # Every rank holds the same weights iff the element-wise max and min across ranks agree.
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    highest, lowest = weights.clone(), weights.clone()
    all_reduce(highest, op=dist.ReduceOp.MAX)
    all_reduce(lowest, op=dist.ReduceOp.MIN)
    in_sync = torch.equal(highest, lowest)
    if rank == 0:
        state = "in sync" if in_sync else "DIFFERENT"
        path = shm_all_reduce_status() if on_cpu else dist.get_backend()
        print(f"done: {world_size} ranks on {accelerator.device_name()} ({dist.get_backend()}), "
              f"parameters {state} across ranks; gradients via {path}")  # fmt: skip
    # DDP keeps its process group alive after this (torch holds it from C++), so the group's
    # worker threads run on until exit: no gloo collective on Python tensors should be the
    # last thing before it (one still releasing such a tensor at exit aborts the process).
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
