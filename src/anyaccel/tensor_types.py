"""``FloatTensor`` and friends: tensor constructors of one dtype on one device type.

DeepSpeed's accelerators answer ``FloatTensor`` either with torch's legacy type
(``torch.FloatTensor(2)`` is two elements, ``isinstance(t, torch.FloatTensor)`` works) or with
``partial(torch.tensor, ...)`` (values only). A :class:`TensorType` accepts both call forms
on every device and answers ``isinstance``, so code written for either keeps working.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TensorType"]


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class TensorType:
    """Makes tensors of ``dtype`` on ``device``: ``T(2, 3)`` by sizes, ``T([1, 2])`` by values."""

    __slots__ = ("device", "dtype", "name")

    def __init__(self, name: str, dtype: torch.dtype, device: str) -> None:
        self.name = name
        self.dtype = dtype
        self.device = device

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Sizes (ints or one ``torch.Size``) give an uninitialised tensor; data gives its values.

        No argument gives an empty tensor, as ``torch.FloatTensor()`` does. Keywords (such as
        ``requires_grad`` or ``device``) are passed to torch.
        """
        options: dict[str, Any] = {"dtype": self.dtype, "device": self.device, **kwargs}
        if not args:
            return torch.empty(0, **options)
        if len(args) == 1 and isinstance(args[0], torch.Size):
            return torch.empty(args[0], **options)
        if all(_is_size(arg) for arg in args):
            return torch.empty(args, **options)
        if len(args) == 1:
            data = args[0]
            if isinstance(data, torch.Tensor):
                requires_grad = options.pop("requires_grad", False)
                copy = data.detach().to(copy=True, **options)
                return copy.requires_grad_(requires_grad)
            return torch.tensor(data, **options)
        raise TypeError(
            f"{self.name}{args!r}: give sizes as ints ({self.name}(2, 3)) or one piece of data "
            f"({self.name}([1.0, 2.0]) or a tensor), not a mix of both"
        )

    def __instancecheck__(self, instance: object) -> bool:
        """``isinstance(t, acc.FloatTensor)``: a tensor of this dtype on this device type."""
        return (
            isinstance(instance, torch.Tensor)
            and instance.dtype == self.dtype
            and instance.device.type == torch.device(self.device).type
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorType):
            return NotImplemented
        return (self.dtype, torch.device(self.device)) == (other.dtype, torch.device(other.device))

    def __hash__(self) -> int:
        return hash((self.dtype, str(torch.device(self.device))))

    def __repr__(self) -> str:
        return f"<{self.name} {self.dtype} on {self.device!r}>"
