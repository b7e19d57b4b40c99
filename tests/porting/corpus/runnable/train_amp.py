#!/usr/bin/env python
"""Mixed-precision training with autocast and a gradient scaler (the torch.cuda.amp recipe)."""

from __future__ import annotations

import torch
from torch.cuda.amp import GradScaler, autocast


def build(device):
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)
    ).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(steps: int = 30) -> float:
    device = torch.cuda.current_device()
    model, optimizer = build(torch.device("cuda", device))
    scaler = GradScaler(enabled=True)
    data = torch.randn(128, 32).cuda()
    target = data.sum(dim=1, keepdim=True).cuda()
    amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with autocast(dtype=amp_dtype):
            loss = torch.nn.functional.mse_loss(model(data).float(), target)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    with torch.cuda.amp.autocast(enabled=False):
        final = torch.nn.functional.mse_loss(model(data), target).item()
    return final


if __name__ == "__main__":
    loss = train()
    print(f"final loss {loss:.4f}")
    assert loss == loss  # not NaN
    print("OK")
