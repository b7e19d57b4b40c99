"""Bug: a running metric kept in a CPU tensor.

Adding a device result into a CPU accumulator in place writes across devices.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "Expected all tensors to be on the same device"


def main() -> None:
    device = get_accelerator().current_device_name()
    correct = torch.zeros(1)  # BUG: no device
    for _ in range(3):
        predictions = torch.randint(0, 2, (8,), device=device)
        labels = torch.randint(0, 2, (8,), device=device)
        correct += (predictions == labels).sum()
    print(correct.item())


if __name__ == "__main__":
    main()
