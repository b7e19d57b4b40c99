"""Fixed: a `torch.Generator()` without a device, drawing on the device.

A generator belongs to one device; the CPU's serves CPU tensors only.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


def main() -> None:
    device = get_accelerator().current_device_name()
    generator = torch.Generator(device=device).manual_seed(0)  # fixed: the device's generator
    noise = torch.randn(4, 4, device=device, generator=generator)
    print(noise.sum().item())


if __name__ == "__main__":
    main()
