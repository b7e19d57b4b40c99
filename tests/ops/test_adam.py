"""CPU Adam/AdamW: parity with torch.optim over 100 steps, and Optimizer behaviour."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from anyaccel.ops.adam import CPUAdam, CPUAdamW, DeepSpeedCPUAdam

SHAPES = [(7,), (33, 65), (70_001,)]  # tiny, 2-D, and odd-sized past the threading threshold


def make_params(seed: int = 0) -> list[torch.Tensor]:
    """Fresh random fp32 parameters of several shapes."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in SHAPES]


def train(
    make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    steps: int = 100,
    seed: int = 0,
) -> list[torch.Tensor]:
    """Run ``steps`` steps on random gradients and return the final parameters."""
    params = [torch.nn.Parameter(p) for p in make_params(seed)]
    optimizer = make_optimizer(params)
    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator)
        optimizer.step()
    return [param.detach() for param in params]


def assert_parity(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    """Within 1e-5 relative (1e-6 absolute for values that pass through zero)."""
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert ((got - want).norm() / want.norm()).item() < 1e-6


@pytest.mark.parametrize(
    "options",
    [{}, {"weight_decay": 0.1}, {"amsgrad": True}, {"maximize": True}, {"betas": (0.8, 0.99)}],
    ids=["plain", "l2-decay", "amsgrad", "maximize", "betas"],
)
def test_cpu_adam_matches_torch_adam_over_100_steps(options: dict[str, object]) -> None:
    ours = train(lambda ps: CPUAdam(ps, lr=1e-2, **options))  # type: ignore[arg-type]
    torch_ = train(lambda ps: torch.optim.Adam(ps, lr=1e-2, **options))  # type: ignore[arg-type]
    assert_parity(ours, torch_)


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.3}, {"amsgrad": True}])
def test_cpu_adamw_matches_torch_adamw_over_100_steps(options: dict[str, object]) -> None:
    ours = train(lambda ps: CPUAdamW(ps, lr=1e-2, **options))  # type: ignore[arg-type]
    torch_ = train(lambda ps: torch.optim.AdamW(ps, lr=1e-2, **options))  # type: ignore[arg-type]
    assert_parity(ours, torch_)


def test_adamw_weight_decay_shrinks_parameters_with_zero_gradient() -> None:
    param = torch.nn.Parameter(torch.ones(10))
    optimizer = CPUAdamW([param], lr=0.1, weight_decay=0.5)
    param.grad = torch.zeros(10)
    optimizer.step()
    torch.testing.assert_close(param.detach(), torch.full((10,), 1 - 0.1 * 0.5))


def test_param_groups_use_their_own_hyperparameters() -> None:
    def groups(ps: list[torch.nn.Parameter]) -> list[dict[str, object]]:
        return [
            {"params": ps[:2], "lr": 1e-1, "weight_decay": 0.2},
            {"params": ps[2:], "lr": 1e-3},
        ]

    ours = train(lambda ps: CPUAdamW(groups(ps), lr=1e-2), steps=30)  # type: ignore[arg-type]
    torch_ = train(lambda ps: torch.optim.AdamW(groups(ps), lr=1e-2), steps=30)  # type: ignore[arg-type]
    assert_parity(ours, torch_)


def test_state_dict_round_trip_continues_training_identically() -> None:
    generator = torch.Generator().manual_seed(3)
    grads = [torch.randn(1000, generator=generator) for _ in range(20)]
    straight = torch.nn.Parameter(torch.zeros(1000))
    straight_opt = CPUAdam([straight], lr=1e-2, amsgrad=True)
    resumed = torch.nn.Parameter(torch.zeros(1000))
    first_opt = CPUAdam([resumed], lr=1e-2, amsgrad=True)
    for index, grad in enumerate(grads):
        if index == 10:
            saved = first_opt.state_dict()
            first_opt = CPUAdam([resumed], lr=1e-2, amsgrad=True)
            first_opt.load_state_dict(saved)
        for param, opt in ((straight, straight_opt), (resumed, first_opt)):
            param.grad = grad.clone()
            opt.step()
    assert torch.equal(straight.detach(), resumed.detach())
    assert int(first_opt.state[resumed]["step"].item()) == 20


def test_loads_a_torch_adam_state_dict_and_continues_like_torch() -> None:
    generator = torch.Generator().manual_seed(4)
    grads = [torch.randn(500, generator=generator) for _ in range(20)]
    torch_param = torch.nn.Parameter(torch.ones(500))
    torch_opt = torch.optim.Adam([torch_param], lr=1e-2)
    for grad in grads[:10]:
        torch_param.grad = grad.clone()
        torch_opt.step()
    ours_param = torch.nn.Parameter(torch_param.detach().clone())
    ours_opt = CPUAdam([ours_param], lr=1e-2)
    ours_opt.load_state_dict(copy.deepcopy(torch_opt.state_dict()))  # as torch.save would
    for grad in grads[10:]:
        for param, opt in ((torch_param, torch_opt), (ours_param, ours_opt)):
            param.grad = grad.clone()
            opt.step()
    torch.testing.assert_close(ours_param.detach(), torch_param.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_copy_equals_rounded_master_weights(dtype: torch.dtype) -> None:
    params = [torch.nn.Parameter(p) for p in make_params(5)]
    copies = [torch.empty_like(p, dtype=dtype) for p in params]
    optimizer = CPUAdam(params, lr=1e-2)
    for _ in range(5):
        for param in params:
            param.grad = torch.randn_like(param)
        optimizer.step(fp16_param_groups=copies)
        for param, low in zip(params, copies, strict=True):
            assert torch.equal(low, param.detach().to(dtype))


def test_copies_may_be_given_per_group_with_gaps() -> None:
    first, second = torch.nn.Parameter(torch.randn(100)), torch.nn.Parameter(torch.randn(50))
    optimizer = CPUAdam([{"params": [first]}, {"params": [second]}])
    low = torch.zeros(50, dtype=torch.bfloat16)
    first.grad, second.grad = torch.randn(100), torch.randn(50)
    optimizer.step(fp16_param_groups=[[None], [low]])
    assert torch.equal(low, second.detach().to(torch.bfloat16))


def test_copies_of_the_wrong_shape_or_count_are_rejected() -> None:
    param = torch.nn.Parameter(torch.randn(10))
    param.grad = torch.randn(10)
    optimizer = CPUAdam([param])
    with pytest.raises(ValueError, match="does not match parameter"):
        optimizer.step(fp16_param_groups=[torch.empty(11, dtype=torch.bfloat16)])
    with pytest.raises(ValueError, match="copies per group"):
        optimizer.step(fp16_param_groups=[torch.empty(10, dtype=torch.bfloat16)] * 2)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        optimizer.step(fp16_param_groups=[torch.empty(10, dtype=torch.float64)])


def test_special_values_convert_like_torch() -> None:
    values = [0.0, -0.0, 1e-40, -3e-39, 6e-8, 2e-5, 65504.0, 65520.0, 1e6, 3.4e38]
    values += [float("inf"), float("-inf"), float("nan"), 1.00390625, 1.01171875]
    param = torch.nn.Parameter(torch.tensor(values))
    param.grad = torch.zeros_like(param)
    optimizer = CPUAdam([param], lr=0.0)
    for dtype in (torch.bfloat16, torch.float16):
        low = torch.empty_like(param, dtype=dtype)
        optimizer.step(fp16_param_groups=[low])
        expected = param.detach().to(dtype)
        assert torch.equal(low.view(torch.int16)[:-3], expected.view(torch.int16)[:-3])
        assert torch.equal(low[-2:], expected[-2:]) and low[-3].isnan()


def test_misaligned_copies_are_written_exactly() -> None:
    param = torch.nn.Parameter(torch.randn(70_001))
    param.grad = torch.randn_like(param)
    buffer = torch.empty(70_002, dtype=torch.bfloat16)
    CPUAdam([param]).step(fp16_param_groups=[buffer[1:]])
    assert torch.equal(buffer[1:], param.detach().to(torch.bfloat16))


def test_deepspeed_signature_is_positional_compatible() -> None:
    ours = train(lambda ps: DeepSpeedCPUAdam(ps, 1e-2, True, (0.9, 0.999), 1e-8, 0.1), steps=20)
    torch_ = train(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), steps=20)
    assert_parity(ours, torch_)


def test_deepspeed_adam_mode_false_is_l2_adam() -> None:
    ours = train(lambda ps: DeepSpeedCPUAdam(ps, lr=1e-2, weight_decay=0.1, adamw_mode=False), 20)
    torch_ = train(lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1), steps=20)
    assert_parity(ours, torch_)


def test_low_precision_states_follow_the_parameter_dtype() -> None:
    param = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    param.grad = torch.ones_like(param)
    optimizer = DeepSpeedCPUAdam([param], fp32_optimizer_states=False)
    optimizer.step()
    assert optimizer.state[param]["exp_avg"].dtype == torch.bfloat16
    assert optimizer.state[param]["exp_avg_sq"].dtype == torch.bfloat16


def test_without_bias_correction_the_first_step_is_not_rescaled() -> None:
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.ones(4)
    CPUAdam([param], lr=1.0, eps=0.0, bias_correction=False).step()
    # m = 0.1, v = 0.001: step = 0.1 / sqrt(0.001)
    torch.testing.assert_close(param.detach(), torch.full((4,), -0.1 / 0.001**0.5))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lr": -1.0}, "learning rate"),
        ({"eps": -1.0}, "epsilon"),
        ({"betas": (1.0, 0.9)}, "beta parameter at index 0"),
        ({"weight_decay": -1}, "weight_decay"),
    ],
)
def test_invalid_hyperparameters_name_the_value(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CPUAdam([torch.nn.Parameter(torch.zeros(2))], **options)  # type: ignore[arg-type]


def test_float64_parameters_are_refused_naming_the_supported_dtypes() -> None:
    param = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    param.grad = torch.zeros_like(param)
    with pytest.raises(TypeError, match=r"group 0 param 0 is torch.float64.*bfloat16"):
        CPUAdam([param]).step()


def test_sparse_gradients_are_refused() -> None:
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.zeros(4).to_sparse()
    with pytest.raises(TypeError, match="sparse"):
        CPUAdam([param]).step()


def test_non_contiguous_gradients_are_handled() -> None:
    ours, reference = torch.nn.Parameter(torch.ones(4, 6)), torch.nn.Parameter(torch.ones(4, 6))
    grad = torch.randn(6, 4).t()
    ours.grad, reference.grad = grad, grad.clone()
    CPUAdam([ours]).step()
    torch.optim.Adam([reference]).step()
    torch.testing.assert_close(ours.detach(), reference.detach())


def test_step_runs_the_closure_and_skips_params_without_grad() -> None:
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = CPUAdam([used, unused], lr=0.1)

    def closure() -> float:
        optimizer.zero_grad()
        loss = (used**2).sum()
        loss.backward()
        return float(loss.detach())

    assert optimizer.step(closure) == 3.0
    assert torch.all(used < 1) and torch.equal(unused.detach(), torch.ones(3))
    assert unused not in optimizer.state
