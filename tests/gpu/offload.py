"""ZeRO-Offload's optimizer step, built from anyaccel's accelerator API and its CPU Adam.

As DeepSpeed's ZeRO-Offload does it: the model trains in bf16 on the GPU; fp32 master weights
and Adam's moments live in pinned host memory and ``CPUAdam`` updates them; each gradient is
copied into a pinned host buffer on a side stream (with ``overlap``, as soon as backward has
produced it, while backward goes on); the updated weights go back to the GPU as bf16 with
non-blocking copies that the next forward waits for. Used by the GPU tests and by
``benchmarks/gpu.py``; this file imports nothing relative, so both can load it by path.
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.adam import CPUAdam


class OffloadedAdam:
    """Adam over bf16 GPU parameters with fp32 master weights and the step on the host."""

    def __init__(
        self, accelerator: Any, params: list[torch.nn.Parameter], lr: float, overlap: bool
    ) -> None:
        self.accelerator = accelerator
        self.params = params
        self.overlap = overlap
        self.copy_stream = accelerator.Stream()
        self.master = [accelerator.pin_memory(p.detach().float().cpu()) for p in params]
        self.grad_buffers = [accelerator.pin_empty(p.shape, dtype=p.dtype) for p in params]
        self.param_buffers = [accelerator.pin_empty(p.shape, dtype=p.dtype) for p in params]
        for master in self.master:
            master.grad = torch.zeros_like(master)
        self.optimizer = CPUAdam(self.master, lr=lr)
        self.grads_copied = accelerator.Event()
        self.params_uploaded: Any = None
        self.hooks: list[Any] = []
        if overlap:
            for index, param in enumerate(params):
                register = param.register_post_accumulate_grad_hook
                self.hooks.append(register(self._copy_hook(index)))  # type: ignore[no-untyped-call]

    def _copy_hook(self, index: int) -> Any:
        def copy_now(param: torch.Tensor) -> None:
            self._copy_grad(index, param)

        return copy_now

    def _copy_grad(self, index: int, param: torch.Tensor) -> None:
        """Queue one gradient's device-to-host copy on the side stream, after its producer."""
        assert param.grad is not None
        grad = param.grad
        self.copy_stream.wait_stream(self.accelerator.current_stream())
        with self.accelerator.stream(self.copy_stream):
            self.grad_buffers[index].copy_(grad, non_blocking=True)
        grad.record_stream(self.copy_stream)  # the allocator must not reuse it before the copy

    def wait_for_parameters(self) -> None:
        """Make the compute stream wait for the last upload (call before each forward)."""
        if self.params_uploaded is not None:
            self.accelerator.current_stream().wait_event(self.params_uploaded)

    def step(self) -> None:
        """Gradients to the host, Adam on the fp32 masters, bf16 weights back to the GPU."""
        if not self.overlap:
            for index, param in enumerate(self.params):
                self._copy_grad(index, param)
        self.grads_copied.record(self.copy_stream)
        self.grads_copied.synchronize()
        if self.params_uploaded is not None:
            self.params_uploaded.synchronize()  # param_buffers are free to overwrite again
        for master, buffer in zip(self.master, self.grad_buffers, strict=True):
            assert master.grad is not None
            master.grad.copy_(buffer)
        self.optimizer.step()
        self.copy_stream.wait_stream(self.accelerator.current_stream())
        with self.accelerator.stream(self.copy_stream):
            for param, master, buffer in zip(
                self.params, self.master, self.param_buffers, strict=True
            ):
                buffer.copy_(master)
                param.data.copy_(buffer, non_blocking=True)
            self.params_uploaded = self.accelerator.Event()
            self.params_uploaded.record(self.copy_stream)
        for param in self.params:
            param.grad = None


class GpuAdam:
    """The all-GPU reference: fp32 masters on the device, ``torch.optim.Adam`` there."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float) -> None:
        self.params = params
        self.master = [p.detach().float().clone().requires_grad_(True) for p in params]
        self.optimizer = torch.optim.Adam(self.master, lr=lr)

    def wait_for_parameters(self) -> None:
        """Nothing to wait for: everything runs on one stream."""

    def step(self) -> None:
        """Adam on the fp32 masters, then the bf16 weights from them."""
        for param, master in zip(self.params, self.master, strict=True):
            assert param.grad is not None
            master.grad = param.grad.float()
        self.optimizer.step()
        with torch.no_grad():
            for param, master in zip(self.params, self.master, strict=True):
                param.copy_(master)
                param.grad = None


def make_parameters(seed: int, shapes: list[tuple[int, ...]]) -> list[torch.nn.Parameter]:
    """bf16 parameters on ``cuda`` drawn like a linear layer's initial weights (scale 0.05)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return [
        torch.nn.Parameter(
            (0.05 * torch.randn(shape, device="cuda", generator=generator)).bfloat16()
        )
        for shape in shapes
    ]


def train_on_given_gradients(
    params: list[torch.nn.Parameter], optimizer: Any, steps: int, seed: int
) -> None:
    """``steps`` steps whose gradients are fixed random tensors, whatever the weights are.

    The loss ``sum(p * g)`` has gradient ``g`` exactly, delivered by backward (so the
    per-parameter hooks fire as in training), and two optimizers given the same ``g`` differ
    only by their arithmetic: no feedback through the weights amplifies a rounding difference.
    """
    generator = torch.Generator(device="cuda").manual_seed(seed)
    for _ in range(steps):
        optimizer.wait_for_parameters()
        grads = [
            (1e-2 * torch.randn(p.shape, device="cuda", generator=generator)).bfloat16()
            for p in params
        ]
        loss = sum((p.float() * g.float()).sum() for p, g in zip(params, grads, strict=True))
        assert isinstance(loss, torch.Tensor)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()


def make_model(seed: int, width: int = 256, depth: int = 3) -> torch.nn.Sequential:
    """A small bf16 MLP on ``cuda``, the same for the same seed."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1]).to(device="cuda", dtype=torch.bfloat16)


def train(model: torch.nn.Sequential, optimizer: Any, steps: int, batch: int = 64) -> list[float]:
    """``steps`` steps of regression onto fixed targets; the losses."""
    first = model[0]
    assert isinstance(first, torch.nn.Linear)
    width = first.in_features
    generator = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(batch, width, device="cuda", generator=generator).to(torch.bfloat16)
    y = torch.randn(batch, width, device="cuda", generator=generator).to(torch.bfloat16)
    losses = []
    for _ in range(steps):
        optimizer.wait_for_parameters()
        loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses
