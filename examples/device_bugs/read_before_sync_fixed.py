"""Fixed: reading a non_blocking copy to the host before the device is done.

A copy into pinned host memory with ``non_blocking=True`` is queued behind the device's work:
until the host synchronizes (or waits on an event recorded after it), the buffer holds stale
values, here the zeros it started with.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


def main() -> None:
    accelerator = get_accelerator()
    device = accelerator.current_device_name()
    counts = accelerator.pin_memory(torch.zeros(2, dtype=torch.int64))
    for _ in range(3):
        predictions = torch.randint(0, 2, (8,), device=device)
        labels = torch.randint(0, 2, (8,), device=device)
        seen = torch.tensor(len(labels), device=device)
        counts.copy_(torch.stack([(predictions == labels).sum(), seen]), non_blocking=True)
        accelerator.synchronize()  # fixed: the copy is done before the host reads it
        right, total = counts.tolist()
        print(right / total)
        counts.zero_()


if __name__ == "__main__":
    main()
