"""Bug: a batch not moved to the model's device.

The model is moved, the batch from the data loader is not: on the CPU both are already there.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "Expected all tensors to be on the same device"


def main() -> None:
    device = get_accelerator().current_device_name()
    model = torch.nn.Linear(4, 2).to(device)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
    for x, y in torch.utils.data.DataLoader(data, batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)  # BUG: x and y stay on the CPU
        loss.backward()
    print(loss.item())


if __name__ == "__main__":
    main()
