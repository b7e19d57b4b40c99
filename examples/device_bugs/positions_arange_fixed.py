"""Fixed: position ids from `torch.arange` without a device.

The embedding table is on the device, the indices looked up in it are on the CPU.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


class Embed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(50, 16)
        self.positions = torch.nn.Embedding(32, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        where = torch.arange(ids.shape[1], device=ids.device)  # fixed
        return self.tokens(ids) + self.positions(where)


def main() -> None:
    device = get_accelerator().current_device_name()
    model = Embed().to(device)
    print(model(torch.randint(0, 50, (2, 10), device=device)).sum().item())


if __name__ == "__main__":
    main()
