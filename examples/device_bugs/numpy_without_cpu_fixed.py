"""Fixed: `.numpy()` on a device tensor.

NumPy reads host memory: a device tensor must be copied back with `.cpu()` first.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


def main() -> None:
    device = get_accelerator().current_device_name()
    predictions = torch.randn(6, device=device).sigmoid()
    print((predictions.detach().cpu().numpy() > 0.5).sum())  # fixed


if __name__ == "__main__":
    main()
