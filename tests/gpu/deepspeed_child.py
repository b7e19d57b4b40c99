"""ZeRO-2 with CPU optimizer offload on one GPU, on DeepSpeed's own CUDA accelerator or ours.

Run as ``torchrun --standalone --nproc-per-node 1 deepspeed_child.py --accelerator
{deepspeed,anyaccel} --out OUT``; writes JSON: the accelerator class DeepSpeed used and the
loss of every step, per configuration (fp32 and bf16).
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch

STEPS = 20


def train(dtype: str) -> list[float]:
    import deepspeed

    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 16))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1000,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2}},
        "bf16": {"enabled": dtype == "bf16"},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    data = torch.Generator().manual_seed(99)
    compute = torch.bfloat16 if dtype == "bf16" else torch.float32
    x = torch.randn(8, 64, generator=data).to(engine.device, compute)
    y = torch.randn(8, 16, generator=data).to(engine.device, compute)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(engine(x).float(), y.float())
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    engine.destroy()
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerator", choices=("deepspeed", "anyaccel"), required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.accelerator == "anyaccel":
        from anyaccel.integrations.deepspeed import install

        install()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    deepspeed.init_distributed(dist_backend="nccl")
    losses = {dtype: train(dtype) for dtype in ("fp32", "bf16")}
    used = type(get_accelerator())
    record = {"accelerator": f"{used.__module__}.{used.__qualname__}", "losses": losses}
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(record, out)


if __name__ == "__main__":
    main()
