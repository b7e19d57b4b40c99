"""Bug: a `torch.Generator()` without a device, drawing on the device.

A generator belongs to one device; the CPU's serves CPU tensors only.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "device type for generator but found 'cpu'"


def main() -> None:
    device = get_accelerator().current_device_name()
    generator = torch.Generator().manual_seed(0)  # BUG: a CPU generator
    noise = torch.randn(4, 4, device=device, generator=generator)
    print(noise.sum().item())


if __name__ == "__main__":
    main()
