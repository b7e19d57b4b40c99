"""Bug: padding made on the CPU and concatenated to a device tensor.

`torch.cat` takes tensors of one device; the padding came from `torch.full` without one.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "Expected all tensors to be on the same device"


def main() -> None:
    device = get_accelerator().current_device_name()
    tokens = torch.randint(1, 9, (3, 5), device=device)
    padding = torch.full((3, 3), 0, dtype=tokens.dtype)  # BUG: no device
    print(torch.cat([tokens, padding], dim=1).shape)


if __name__ == "__main__":
    main()
