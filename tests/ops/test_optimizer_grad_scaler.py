"""``fused=True`` and torch.amp.GradScaler: grad_scale unscales, found_inf skips, as torch's fused.

torch's fused optimizers set ``_step_supports_amp_scaling``; GradScaler then sets ``grad_scale``
and ``found_inf`` on the optimizer and calls ``step()``, which divides the gradients by the scale
in place and moves nothing when ``found_inf`` is nonzero. Ours do the same with ``fused=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from anyaccel.ops.adagrad import CPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW
from anyaccel.ops.lion import CPULion
from anyaccel.ops.optimizer_errors import OptimizerInputError

from .optim_reference import ReferenceLion

Factory = Callable[..., torch.optim.Optimizer]

#: Ours, and torch's counterpart (None: Lion, checked against the reference with unscaled grads).
OPTIMIZERS: dict[str, tuple[Factory, Factory | None]] = {
    "Adam": (CPUAdam, torch.optim.Adam),
    "AdamW": (CPUAdamW, torch.optim.AdamW),
    "Adagrad": (CPUAdagrad, torch.optim.Adagrad),
    "Lion": (CPULion, None),
}
NAMES = list(OPTIMIZERS)


def torch_fused_steps_on_cpu() -> bool:
    """Whether this torch has fused CPU Adam (2.4+), the reference of these tests."""
    probe = torch.nn.Parameter(torch.zeros(2))
    probe.grad = torch.zeros(2)
    try:
        torch.optim.Adam([probe], fused=True).step()
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


needs_torch_fused = pytest.mark.skipif(
    not torch_fused_steps_on_cpu(), reason="this torch has no fused CPU optimizers"
)


def fresh(seed: int = 0) -> list[torch.nn.Parameter]:
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape)) for shape in ((5, 3), (70_001,))]


@pytest.mark.parametrize("name", NAMES)
def test_fused_true_declares_the_grad_scaler_protocol(name: str) -> None:
    ours = OPTIMIZERS[name][0]
    assert getattr(ours(fresh(), fused=True), "_step_supports_amp_scaling", False) is True
    for fused in (None, False):
        assert not getattr(ours(fresh(), fused=fused), "_step_supports_amp_scaling", False)


@pytest.mark.parametrize("name", NAMES)
def test_found_inf_skips_the_step_and_creates_states_at_step_zero(name: str) -> None:
    ours, theirs = OPTIMIZERS[name]
    params = fresh()
    for param in params:
        param.grad = torch.randn_like(param)
    grads = [param.grad.clone() for param in params if param.grad is not None]
    before = [param.detach().clone() for param in params]
    optimizer = ours(params, fused=True)
    optimizer.grad_scale = torch.tensor(4.0)  # type: ignore[attr-defined]
    optimizer.found_inf = torch.tensor(1.0)  # type: ignore[attr-defined]
    optimizer.step()
    for param, value, grad in zip(params, before, grads, strict=True):
        assert torch.equal(param.detach(), value)
        assert torch.equal(param.grad, grad)  # skipped: not unscaled either
        state = optimizer.state[param]
        assert float(state["step"]) == 0.0
        assert all(not v.any() for k, v in state.items() if k != "step")
    if theirs is not None and torch_fused_steps_on_cpu():
        reference = fresh()
        for param, grad in zip(reference, grads, strict=True):
            param.grad = grad.clone()
        torch_optimizer = theirs(reference, fused=True)
        torch_optimizer.grad_scale = torch.tensor(4.0)
        torch_optimizer.found_inf = torch.tensor(1.0)
        torch_optimizer.step()
        ours_state = optimizer.state[params[0]]
        assert set(torch_optimizer.state[reference[0]]) <= set(ours_state)


@needs_torch_fused
@pytest.mark.parametrize("name", NAMES)
def test_grad_scale_unscales_the_gradients_in_place_as_torch_fused_does(name: str) -> None:
    ours, theirs = OPTIMIZERS[name]
    params, reference = fresh(), fresh()
    optimizer = ours(params, lr=1e-2, fused=True)
    if theirs is not None:
        torch_optimizer = theirs(reference, lr=1e-2, fused=True)
    else:
        torch_optimizer = ReferenceLion(reference, lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for step in range(3):
        for param, ref in zip(params, reference, strict=True):
            grad = torch.randn(param.shape, generator=generator) * 1024
            param.grad = grad.clone()
            ref.grad = grad.clone() if theirs is not None else grad / 1024
        optimizer.grad_scale = torch.tensor(1024.0)  # type: ignore[attr-defined]
        optimizer.found_inf = torch.tensor(0.0)  # type: ignore[attr-defined]
        if theirs is not None:
            torch_optimizer.grad_scale = torch.tensor(1024.0)  # type: ignore[attr-defined]
            torch_optimizer.found_inf = torch.tensor(0.0)  # type: ignore[attr-defined]
        optimizer.step()
        torch_optimizer.step()
        for param, ref in zip(params, reference, strict=True):
            torch.testing.assert_close(param.grad, ref.grad, rtol=0, atol=0)
            torch.testing.assert_close(param.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
        assert float(optimizer.state[params[0]]["step"]) == step + 1


def test_a_gradient_listed_twice_is_unscaled_once() -> None:
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.full((4,), 8.0)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        optimizer = CPUAdam([param, param], lr=0.0, fused=True)
    optimizer.grad_scale = torch.tensor(8.0)  # type: ignore[attr-defined]
    optimizer.found_inf = torch.tensor(0.0)  # type: ignore[attr-defined]
    optimizer.step()
    assert torch.equal(param.grad, torch.ones(4))


def test_sparse_adagrad_gradients_are_unscaled_and_skipped_too() -> None:
    weight = torch.nn.Parameter(torch.ones(6, 2))
    grad = torch.sparse_coo_tensor(
        torch.tensor([[1, 4]]), torch.full((2, 2), 4.0), (6, 2), check_invariants=True
    )
    weight.grad = grad.clone()
    optimizer = CPUAdagrad([weight], lr=0.5, fused=True)
    optimizer.grad_scale, optimizer.found_inf = torch.tensor(4.0), torch.tensor(1.0)  # type: ignore[attr-defined]
    optimizer.step()
    assert torch.equal(weight.detach(), torch.ones(6, 2))
    optimizer.found_inf = torch.tensor(0.0)  # type: ignore[attr-defined]
    optimizer.step()
    reference = torch.nn.Parameter(torch.ones(6, 2))
    reference.grad = (grad / 4.0).coalesce()
    torch.optim.Adagrad([reference], lr=0.5).step()
    torch.testing.assert_close(weight.detach(), reference.detach())
    torch.testing.assert_close(weight.grad.to_dense(), reference.grad.to_dense())


@pytest.mark.parametrize(
    ("grad_scale", "found_inf", "error", "message"),
    [
        ("2", torch.tensor(0.0), TypeError, r"grad_scale='2' \(str\)"),
        (torch.tensor([2.0, 4.0]), torch.tensor(0.0), ValueError, r"grad_scale must be a one"),
        (torch.tensor(0.0), torch.tensor(0.0), ValueError, r"grad_scale=0\.0 cannot unscale"),
        (torch.tensor(2.0), [0.0], TypeError, r"found_inf=\[0\.0\] \(list\)"),
    ],
)
def test_bad_grad_scale_or_found_inf_is_refused_before_anything_moves(
    grad_scale: Any, found_inf: Any, error: type[Exception], message: str
) -> None:
    params = fresh()
    for param in params:
        param.grad = torch.ones_like(param)
    before = [param.detach().clone() for param in params]
    optimizer = CPUAdam(params, fused=True)
    optimizer.grad_scale, optimizer.found_inf = grad_scale, found_inf  # type: ignore[attr-defined]
    with pytest.raises(error, match=message) as caught:
        optimizer.step()
    assert isinstance(caught.value, OptimizerInputError)
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before, strict=True))
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in params)
    assert not optimizer.state


def has_cpu_fp16_autocast_and_scaler() -> bool:
    """torch.amp.GradScaler("cpu") and fp16 autocast on the CPU (torch 2.4+ builds)."""
    try:
        torch.amp.GradScaler("cpu")
        with torch.autocast("cpu", dtype=torch.float16):
            torch.nn.functional.linear(torch.ones(1, 2), torch.ones(2, 2))
    except (AttributeError, RuntimeError, TypeError):
        return False
    return True


@pytest.mark.skipif(
    not (has_cpu_fp16_autocast_and_scaler() and torch_fused_steps_on_cpu()),
    reason="this torch lacks GradScaler('cpu'), CPU fp16 autocast or fused CPU optimizers",
)
@pytest.mark.parametrize("name", NAMES)
def test_grad_scaler_with_fp16_autocast_trains_like_torch(name: str) -> None:
    """End to end: autocast fp16 forward, scaled backward, scaler.step/update, 12 steps.

    The first scale (2**22) overflows fp16, so the first steps are skipped and the scale backs
    off, as in real mixed-precision training; ours must skip and step exactly as torch's does.
    """
    ours, theirs = OPTIMIZERS[name]

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    nets = {"ours": model(), "torch": model()}
    optimizers = {
        "ours": ours(nets["ours"].parameters(), lr=1e-2, fused=True),
        "torch": theirs(nets["torch"].parameters(), lr=1e-2, fused=True)
        if theirs is not None
        else ReferenceLion(nets["torch"].parameters(), lr=1e-2),
    }
    scalers = {key: torch.amp.GradScaler("cpu", init_scale=2.0**22) for key in nets}
    generator = torch.Generator().manual_seed(2)
    scales = []
    for _ in range(12):
        inputs = torch.randn(8, 16, generator=generator)
        target = torch.randn(8, 4, generator=generator)
        for key, net in nets.items():
            optimizers[key].zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(net(inputs).float(), target)
            scalers[key].scale(loss).backward()
            scalers[key].step(optimizers[key])
            scalers[key].update()
        assert scalers["ours"].get_scale() == scalers["torch"].get_scale()
        scales.append(scalers["ours"].get_scale())
    assert scales[0] < 2.0**22  # the first steps overflowed and were skipped
    for ours_param, torch_param in zip(
        nets["ours"].parameters(), nets["torch"].parameters(), strict=True
    ):
        torch.testing.assert_close(ours_param, torch_param)  # float32 tolerances
    stepped = optimizers["ours"].state[next(nets["ours"].parameters())]["step"]
    assert 0 < float(stepped) < 12


@pytest.mark.skipif(
    not (has_cpu_fp16_autocast_and_scaler() and torch_fused_steps_on_cpu()),
    reason="this torch lacks GradScaler('cpu'), CPU fp16 autocast or fused CPU optimizers",
)
def test_unscale_then_clip_then_step_is_not_unscaled_twice() -> None:
    """scaler.unscale_(opt) before clipping: GradScaler then hands over no grad_scale."""
    nets = []
    for _ in range(2):
        torch.manual_seed(0)
        nets.append(torch.nn.Linear(8, 3))
    ours = CPUAdamW(nets[0].parameters(), lr=1e-2, fused=True)
    theirs = torch.optim.AdamW(nets[1].parameters(), lr=1e-2, fused=True)
    inputs = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    for net, optimizer in ((nets[0], ours), (nets[1], theirs)):
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        for _ in range(3):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = net(inputs).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1)
            scaler.step(optimizer)
            scaler.update()
    for ours_param, torch_param in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(ours_param, torch_param)
        torch.testing.assert_close(ours_param.grad, torch_param.grad)
