"""The DDP tutorial with CUDA's mixed precision: ``torch.cuda.amp.autocast()`` and a GradScaler.

CUDA's autocast runs in float16 and the scaler keeps float16 gradients from underflowing. The
script prints the dtype autocast ran in and whether the scaler scaled, so a port can be held to
the precision it reports.
"""
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
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ddp_model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    scaler = torch.cuda.amp.GradScaler()
    inputs = torch.randn(64, 16).cuda(local_rank)
    targets = inputs.sum(dim=1, keepdim=True)
    for _ in range(10):
        optimizer.zero_grad()
        with torch.cuda.amp.autocast():
            outputs = ddp_model(inputs)
            loss = torch.nn.functional.mse_loss(outputs.float(), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    print(f"autocast ran in {outputs.dtype}")
    print(f"scaler enabled {scaler.is_enabled()}")
    print(f"rank {rank} loss {loss.item():.4f}")
    assert loss.item() == loss.item()  # not NaN
    dist.destroy_process_group()
    print("OK")


if __name__ == "__main__":
    main()
