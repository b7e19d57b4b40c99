"""Fixed: a causal mask built in forward() on the CPU.

`torch.triu(torch.ones(...))` is a CPU tensor;
`masked_fill` of device scores takes a mask on the same device.
"""

from __future__ import annotations

import torch

from anyaccel import get_accelerator


def causal_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1)
    ones = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)  # fixed
    return scores.masked_fill(torch.triu(ones, 1), float("-inf")).softmax(-1)


def main() -> None:
    device = get_accelerator().current_device_name()
    q = torch.randn(2, 5, 8, device=device)
    print(causal_scores(q, q).sum().item())


if __name__ == "__main__":
    main()
