"""Fixed: a tensor created in forward() without a device.

`torch.zeros(...)` makes a CPU tensor; on the CPU it matches the input, on a GPU it does not.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


class Recurrent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.Linear(8, 8)

    def forward(self, steps: torch.Tensor) -> torch.Tensor:
        state = steps.new_zeros(steps.shape[1], 8)  # fixed: on the input's device
        for step in steps:
            state = torch.tanh(self.cell(step) + state)
        return state


def main() -> None:
    device = get_accelerator().current_device_name()
    model = Recurrent().to(device)
    print(model(torch.randn(5, 3, 8, device=device)).sum().item())


if __name__ == "__main__":
    main()
