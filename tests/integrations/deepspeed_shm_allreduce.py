"""DeepSpeed's ``inference_all_reduce`` on anyaccel's accelerator: which op ran, what it gave.

Run under ``torchrun --nproc-per-node 2``. Hands DeepSpeed anyaccel's accelerator, lets
``deepspeed.init_distributed`` build its shared-memory op through it (``ShareMemCommBuilder``),
counts the calls DeepSpeed makes to ``torch.ops.deepspeed.inference_all_reduce_`` and prints,
on rank 0, one JSON line: the op module's name and file, the call count and the results.
"""

from __future__ import annotations

import json
import warnings

import torch


def main() -> None:
    warnings.simplefilter("ignore")
    from anyaccel.integrations.deepspeed import install

    install()
    import deepspeed
    import deepspeed.comm as ds_comm

    deepspeed.init_distributed(dist_backend="gloo")
    backend = ds_comm.comm.cdb
    op_module = backend.shm_comm_op
    calls = []
    real_op = torch.ops.deepspeed.inference_all_reduce_

    def counted(tensor: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(tensor.shape))
        return real_op(tensor)

    torch.ops.deepspeed.inference_all_reduce_ = counted
    rank = ds_comm.get_rank()
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        base = torch.arange(1000) % 16  # small integers: exact in bf16 too
        tensor = (base * (rank + 1)).to(dtype)
        ds_comm.inference_all_reduce(tensor)
        expected = (base * 3).float()  # rank 0 gives 1x, rank 1 gives 2x
        results[str(dtype)] = bool(torch.equal(tensor.float(), expected))
    if rank == 0:
        print(
            json.dumps(
                {
                    "module": getattr(op_module, "__name__", None),
                    "file": getattr(op_module, "__file__", None),
                    "kernel_level": getattr(backend, "shm_vector_kernel_level", None),
                    "calls": len(calls),
                    "results": results,
                }
            )
        )
    ds_comm.barrier()


if __name__ == "__main__":
    main()
