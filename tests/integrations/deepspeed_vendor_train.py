"""ZeRO-2 and ZeRO-3 through ``deepspeed.initialize`` on anyaccel's accelerator; one file per rank.

Run under ``torchrun --nproc-per-node 2``, either plainly (anyaccel's CPU accelerator) or
through ``python -m anyaccel.testing.simulated npu:2`` (anyaccel's ``NpuAccelerator`` over
emulated ``npu`` devices, collectives under ``hccl``). Every tensor the script makes goes to
``engine.device``, as on real hardware. After training, one forward is run with the batch
deliberately left on the CPU: on the device it must fail, on the CPU it passes. Each rank
writes ``<out>/rank<N>.json``: the accelerator, the backend, the device, and per
configuration the losses, the gathered weights and that forward's outcome.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import torch

#: name: (ZeRO stage, dtype); 3 steps each, a tiny model, one process group for all.
CONFIGS = {
    "zero2-fp32": (2, "fp32"),
    "zero3-fp32": (3, "fp32"),
    "zero2-bf16": (2, "bf16"),
    "zero3-bf16": (3, "bf16"),
}
STEPS = 3


def train(stage: int, dtype: str) -> dict[str, Any]:
    """Train one engine for ``STEPS`` steps; its losses, weights and the CPU-batch forward."""
    import deepspeed

    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1000,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
        "bf16": {"enabled": dtype == "bf16"},
        "zero_optimization": {"stage": stage},
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    compute = torch.bfloat16 if dtype == "bf16" else torch.float32
    data = torch.Generator().manual_seed(99 + torch.distributed.get_rank())
    x_host = torch.randn(4, 16, generator=data).to(compute)
    x, y = x_host.to(engine.device), torch.randn(4, 4, generator=data).to(engine.device)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(engine(x).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach().cpu()))
    parameters = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(parameters):  # whole weights under ZeRO-3 too
        weights = [p.detach().float().cpu().flatten().tolist() for p in parameters]
        devices = sorted({str(p.device) for p in parameters})
    try:  # the negative: a batch left on the CPU
        engine(x_host)
        cpu_batch = "ok"
    except RuntimeError as error:
        cpu_batch = str(error)
    engine.destroy()
    return {
        "losses": losses,
        "weights": weights,
        "param_devices": devices,
        "cpu_batch": cpu_batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for rank<N>.json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    from anyaccel.integrations.deepspeed import install

    install()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    deepspeed.init_distributed()  # naming no backend: the accelerator's answer
    accelerator = get_accelerator()
    runs = {name: train(*config) for name, config in CONFIGS.items()}
    result = {  # the current device after training: the engines set it to the rank's
        "accelerator": f"{type(accelerator).__module__}.{type(accelerator).__qualname__}",
        "communication_backend_name": accelerator.communication_backend_name(),
        "backend": torch.distributed.get_backend(),
        "device": accelerator.current_device_name(),
        "runs": runs,
    }
    rank = torch.distributed.get_rank()
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
    # as deepspeed_train.py ends (docs/distributed.md): no teardown race at exit; imported
    # here, as a script, from beside this file (the tests import this module for CONFIGS)
    from deepspeed_train import end_the_job

    end_the_job()


if __name__ == "__main__":
    main()
