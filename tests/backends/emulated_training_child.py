"""Train a tiny model on a device type anyaccel has no backend file for, then on the CPU.

``python emulated_training_child.py generic zpu`` installs emulated ``zpu`` devices and uses
anyaccel's ``GenericAccelerator`` (``DS_ACCELERATOR=zpu`` is set by the caller);
``... plugin ypu`` uses the DeepSpeed-style plugin class the caller installed as a
distribution (``DS_ACCELERATOR=ypu``). The same steps then run on anyaccel's CPU accelerator.
Prints one JSON line: the accelerator, per run the losses, weights and where they lived, and
the error a batch left on the CPU raised (``"ok"`` when it trained).
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import torch

STEPS = 3


def train(accelerator: Any) -> dict[str, Any]:
    """Three Adam steps under bf16 autocast on ``accelerator``'s device 0, as users write it."""
    device = accelerator.device_name(0)
    accelerator.set_device(0)
    torch.manual_seed(0)
    accelerator.manual_seed_all(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(7)
    x_host, y_host = torch.randn(4, 8, generator=data), torch.randn(4, 1, generator=data)
    x = accelerator.pin_memory(x_host).to(device, non_blocking=True)
    y = y_host.to(device)
    losses, autocast_dtypes = [], set()
    for _ in range(STEPS):
        with torch.autocast(device_type=accelerator.device_name(), dtype=torch.bfloat16):
            out = model(x)
        autocast_dtypes.add(str(out.dtype))
        loss = torch.nn.functional.mse_loss(out.float(), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        accelerator.synchronize()
        losses.append(loss.item())
    try:  # the negative: the batch left on the CPU
        model(x_host)
        cpu_batch = "ok"
    except RuntimeError as error:
        cpu_batch = str(error)
    return {
        "losses": losses,
        "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
        "devices": sorted({str(p.device) for p in model.parameters()}),
        "autocast": sorted(autocast_dtypes),
        "memory_allocated": accelerator.memory_allocated(0) > 0,
        "cpu_batch": cpu_batch,
    }


def main(path: str, device_type: str) -> None:
    warnings.simplefilter("ignore")
    from anyaccel.testing.emulated import install

    install(device_type=device_type, device_count=1)
    import anyaccel
    from anyaccel.backends.cpu import CpuAccelerator

    accelerator = anyaccel.get_accelerator()
    result = {
        "path": path,
        "accelerator": f"{type(accelerator).__module__}.{type(accelerator).__qualname__}",
        "name": accelerator._name,
        "device": train(accelerator),
        "cpu": train(CpuAccelerator()),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:3])
