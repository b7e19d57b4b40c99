"""Fixed: the labels not moved with the inputs.

The loss mixes the model's output (on the device) with labels still on the CPU.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


def main() -> None:
    device = get_accelerator().current_device_name()
    model = torch.nn.Linear(6, 3).to(device)
    inputs, labels = torch.randn(8, 6), torch.randint(0, 3, (8,))
    logits = model(inputs.to(device))
    loss = torch.nn.functional.cross_entropy(logits, labels.to(device))  # fixed
    print(loss.item())


if __name__ == "__main__":
    main()
