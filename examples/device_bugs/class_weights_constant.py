"""Bug: class weights for the loss made without a device.

`torch.tensor([...])` in the training step is a CPU tensor handed to a device kernel.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "Expected all tensors to be on the same device"


def main() -> None:
    device = get_accelerator().current_device_name()
    logits = torch.randn(8, 3, device=device)
    labels = torch.randint(0, 3, (8,), device=device)
    weight = torch.tensor([1.0, 2.0, 0.5])  # BUG: no device
    print(torch.nn.functional.cross_entropy(logits, labels, weight=weight).item())


if __name__ == "__main__":
    main()
