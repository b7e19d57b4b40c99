"""One torchrun rank on one GPU: ``init_distributed`` with the given backend, then collectives.

Run as ``torchrun --standalone --nproc-per-node 1 distributed_child.py OUT [BACKEND]``; writes
JSON to OUT: the group's backend string, the backend that serves CUDA (and CPU) tensors, and
the all-reduced values.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from anyaccel.distributed import init_distributed


def serving_backend(device: str) -> str:
    """The name of the backend the default group uses for tensors on ``device``."""
    group = dist.distributed_c10d._get_default_group()
    return str(group._get_backend(torch.device(device)).name())


def main() -> None:
    out = sys.argv[1]
    backend = sys.argv[2] if len(sys.argv) > 2 else None
    info = init_distributed(backend)
    record: dict[str, object] = {
        "rank": info.rank,
        "world_size": info.world_size,
        "backend": str(dist.get_backend()),
        "cuda_backend": serving_backend("cuda"),
        "device": torch.cuda.current_device(),
    }
    on_gpu = torch.full((4,), 3.0, device="cuda")
    dist.all_reduce(on_gpu)
    record["cuda_sum"] = on_gpu.tolist()
    if backend is not None and "cpu:" in backend:
        record["cpu_backend"] = serving_backend("cpu")
        on_cpu = torch.full((4,), 5.0)
        dist.all_reduce(on_cpu)
        record["cpu_sum"] = on_cpu.tolist()
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    main()
