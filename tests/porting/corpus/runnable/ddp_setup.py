"""DistributedDataParallel set-up as torchrun launches it (runs as a single process too)."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    return rank, local_rank


def main():
    rank, local_rank = setup()
    device = f"cuda:{local_rank}"
    model = torch.nn.Linear(8, 8).to(device)
    # The module sits on one device, so DDP needs no device_ids.
    ddp_model = DDP(model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        out = ddp_model(torch.randn(4, 8, device=device))
        out.pow(2).mean().backward()
        opt.step()
    total = torch.tensor([float(rank)], device=torch.cuda.current_device())
    dist.all_reduce(total)
    if dist.get_backend() == "nccl":
        torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} sum of ranks {total.item()}")
    dist.destroy_process_group()
    print("OK")


if __name__ == "__main__":
    main()
