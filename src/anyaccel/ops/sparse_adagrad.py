"""Adagrad on sparse gradients (``nn.Embedding(sparse=True)``), with torch.optim.Adagrad's math.

The native kernels take dense tensors; a sparse gradient touches few rows, so its update runs
in torch tensor ops over those rows only, exactly as ``torch.optim.Adagrad`` computes it.
"""

from __future__ import annotations

from typing import Any

import torch


def check_sparse_gradient(
    param: torch.Tensor, grad: torch.Tensor, weight_decay: float, where: str
) -> None:
    """Refuse, before any parameter moves, a sparse gradient the update cannot take."""
    if weight_decay != 0:
        raise RuntimeError(
            f"{where}: weight_decay={weight_decay} is not compatible with sparse gradients "
            "(torch.optim.Adagrad refuses it too); use weight_decay=0 for this group"
        )
    if param.device.type != "cpu" or param.dtype != torch.float32:
        raise TypeError(
            f"{where}: sparse gradients are supported for fp32 CPU parameters, got "
            f"{param.dtype} on {param.device}; keep the embedding in fp32 on the CPU"
        )


def accumulator(
    param: torch.Tensor, state: dict[str, Any], key: str, initial: float
) -> torch.Tensor:
    """``state[key]``, the sum of squares, created at ``initial`` (as torch does) when absent."""
    value = state.get(key)
    if not isinstance(value, torch.Tensor):
        value = state[key] = torch.full_like(param, initial, memory_format=torch.contiguous_format)
    return value


def advance_step(state: dict[str, Any]) -> int:
    """Count one more step in ``state['step']`` (a float tensor, as torch keeps it); return it."""
    step = state.get("step")
    if not isinstance(step, torch.Tensor):
        step = state["step"] = torch.tensor(float(step or 0.0), dtype=torch.float32)
    step += 1
    return int(step.item())


def sparse_adagrad_update(
    param: torch.Tensor,
    grad: torch.Tensor,
    state_sum: torch.Tensor,
    step: int,
    lr: float,
    lr_decay: float,
    eps: float,
    maximize: bool,
) -> None:
    """One Adagrad update of the rows a sparse ``grad`` touches (``step`` counts this one)."""
    if maximize:
        grad = -grad
    grad = grad.coalesce()  # the update is not linear: repeated indices are summed first
    indices, values = grad.indices(), grad.values()
    clr = lr / (1 + (step - 1) * lr_decay)
    state_sum.add_(_like(grad, indices, values.pow(2)))
    std_values = state_sum.sparse_mask(grad).values().sqrt_().add_(eps)
    param.add_(_like(grad, indices, values / std_values.to(values.dtype)), alpha=-clr)


def _like(grad: torch.Tensor, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A sparse tensor of ``grad``'s size with the given (already valid, coalesced) entries."""
    return torch.sparse_coo_tensor(indices, values, grad.size(), check_invariants=False)
