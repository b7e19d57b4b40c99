"""A short training run through ``get_accelerator()``, reported as JSON (a child of the tests).

Run alone (``DS_ACCELERATOR=cpu``) it is the CPU baseline; under ``python -m
anyaccel.testing.simulated VENDOR:2`` it trains on the vendor's device type. It writes one JSON
object to the file named by its first argument: the accelerator, where every tensor of the run
lives, the losses and weights, and what a tensor left on the CPU does on that device.
"""

from __future__ import annotations

import json
import sys

import torch

from anyaccel import get_accelerator


def main(out: str) -> None:
    """Train four fp32 steps and one bf16-autocast step; report what happened where."""
    acc = get_accelerator()
    device = acc.current_device_name()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        inputs = torch.randn(32, 8, generator=data).to(device)
        targets = inputs.sum(1, keepdim=True).to(device)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    state = optimizer.state[next(iter(model.parameters()))]
    with torch.autocast(device_type=acc.device_name(), dtype=torch.bfloat16):
        low = model(torch.ones(2, 8, device=device))
    acc.manual_seed(5)  # the vendor's seeding reaches the device's own generator
    noise = torch.randn(3, device=device)
    try:  # the bug this run is for: a tensor left on the CPU
        model(torch.ones(2, 8))
        left_on_cpu = "no error"
    except RuntimeError as error:
        left_on_cpu = str(error)
    allocate = getattr(getattr(torch, acc.device_name()), "allocate", None)
    try:  # the simulation's bookkeeping helper: refused where real tensors count the memory
        refused = "no simulated allocate" if allocate is None else str(allocate(1024))
    except TypeError as error:
        refused = str(error)
    report = {
        "accelerator": type(acc).__name__,
        "backend": acc.communication_backend_name(),
        "device": device,
        "devices": sorted(
            {str(p.device) for p in model.parameters()}
            | {str(p.grad.device) for p in model.parameters() if p.grad is not None}
            | {str(v.device) for v in state.values() if isinstance(v, torch.Tensor) and v.dim()}
            | {str(inputs.device), str(loss.device)}
        ),
        "losses": losses,
        "weights": torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist(),
        "autocast": [str(low.dtype), str(low.device)],
        "noise": noise.cpu().tolist(),
        "memory_allocated": acc.memory_allocated(),
        "left_on_cpu": left_on_cpu,
        "allocate": refused,
    }
    with open(out, "w") as file:
        json.dump(report, file)


if __name__ == "__main__":
    main(sys.argv[1])
