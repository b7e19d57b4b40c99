"""Bug: `.numpy()` on a device tensor.

NumPy reads host memory: a device tensor must be copied back with `.cpu()` first.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator

#: The error a GPU gives (and the emulated device): its text holds this.
EXPECTED_ERROR = "to numpy"


def main() -> None:
    device = get_accelerator().current_device_name()
    predictions = torch.randn(6, device=device).sigmoid()
    print((predictions.detach().numpy() > 0.5).sum())  # BUG: no .cpu()


if __name__ == "__main__":
    main()
