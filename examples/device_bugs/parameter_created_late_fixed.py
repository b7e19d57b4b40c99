"""Fixed: a parameter created lazily in forward(), after `.to(device)`.

The model was moved before the parameter existed, so the parameter is made on the CPU.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


class LazyScale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale: torch.nn.Parameter | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is None:  # fixed: made where the input is
            self.scale = torch.nn.Parameter(torch.ones(x.shape[-1], device=x.device))
        return x * self.scale


def main() -> None:
    device = get_accelerator().current_device_name()
    model = LazyScale().to(device)
    print(model(torch.randn(3, 4, device=device)).sum().item())


if __name__ == "__main__":
    main()
