"""Bug: a constant tensor kept as a plain attribute, not a buffer.

`module.to(device)` moves parameters and registered buffers only;
a plain attribute stays on the CPU.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "Expected all tensors to be on the same device"


class Normalize(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.tensor([0.5, 0.25, 0.125])  # BUG: not a buffer, .to() skips it
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x - self.mean)


def main() -> None:
    device = get_accelerator().current_device_name()
    model = Normalize().to(device)
    print(model(torch.randn(4, 3, device=device)).sum().item())


if __name__ == "__main__":
    main()
