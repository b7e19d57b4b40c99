"""DeepSpeed's ZeRO-3 subgroup calls: step_subgroup and rollback_subgroup (its tests' behaviour)."""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.adagrad import DeepSpeedCPUAdagrad
from anyaccel.ops.adam import DeepSpeedCPUAdam
from anyaccel.ops.lion import DeepSpeedCPULion

ALL = [DeepSpeedCPUAdam, DeepSpeedCPUAdagrad, DeepSpeedCPULion]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("cls", ALL)
def test_step_subgroup_keeps_state_and_count_per_subgroup(
    cls: type[DeepSpeedCPUAdam], dtype: torch.dtype
) -> None:
    param = torch.nn.Parameter(torch.randn(64).to(dtype))
    optimizer = cls([param])
    for step in range(1, 4):
        param.grad = torch.randn(64).to(dtype)
        before = param.detach().clone()
        optimizer.step_subgroup(0)
        assert not torch.equal(param.detach(), before)
        assert optimizer.state[0]["step"] == step
    optimizer.step_subgroup(1)
    assert optimizer.state[0]["step"] == 3 and optimizer.state[1]["step"] == 1
    assert param not in optimizer.state


def test_subgroup_steps_match_plain_steps_bit_for_bit() -> None:
    """DeepSpeed's same-step idempotence: a subgroup step is the plain step on that state."""
    base = torch.randn(128)
    a, b = torch.nn.Parameter(base.clone()), torch.nn.Parameter(base.clone())
    by_subgroup, plain = DeepSpeedCPUAdam([a]), DeepSpeedCPUAdam([b])
    for _ in range(4):
        grad = torch.randn(128)
        a.grad, b.grad = grad.clone(), grad.clone()
        by_subgroup.step_subgroup(7)
        plain.step()
        assert torch.equal(a, b)
        assert torch.equal(by_subgroup.state[7]["exp_avg_sq"], plain.state[b]["exp_avg_sq"])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("cls", ALL)
def test_rollback_undoes_the_latest_step_exactly(
    cls: type[DeepSpeedCPUAdam], dtype: torch.dtype
) -> None:
    param = torch.nn.Parameter(torch.randn(1000).to(dtype))
    optimizer = cls([param])
    for _ in range(2):
        param.grad = torch.randn(1000).to(dtype)
        optimizer.step_subgroup(3)
    saved = param.detach().clone(), {k: v.clone() for k, v in optimizer.state[3].items()}
    param.grad = torch.full((1000,), float("inf")).to(dtype)  # the overflow to roll back
    optimizer.step_subgroup(3)
    optimizer.rollback_subgroup(3)
    assert torch.equal(param.detach(), saved[0])
    for key, value in saved[1].items():
        assert torch.equal(optimizer.state[3][key], value), key


def test_rollback_of_a_first_step_restores_fresh_state() -> None:
    param = torch.nn.Parameter(torch.randn(10))
    initial = param.detach().clone()
    optimizer = DeepSpeedCPUAdagrad([param])
    param.grad = torch.randn(10)
    optimizer.step_subgroup(0)
    optimizer.rollback_subgroup(0)
    assert torch.equal(param.detach(), initial)
    assert optimizer.state[0]["step"] == 0
    assert torch.equal(optimizer.state[0][optimizer.accumulator_key], torch.zeros(10))


def test_adam_rolls_back_older_steps_algebraically_like_deepspeed() -> None:
    """DeepSpeed's test_step_rollback_sequence: three steps, three rollbacks, same gradient."""
    param = torch.nn.Parameter(torch.randn(64))
    initial = param.detach().clone()
    optimizer = DeepSpeedCPUAdam([param], weight_decay=0.01)
    param.grad = torch.randn(64)
    for step in range(1, 4):
        optimizer.step_subgroup(0)
        assert optimizer.state[0]["step"] == step
    for step in range(2, -1, -1):
        optimizer.rollback_subgroup(0)
        assert optimizer.state[0]["step"] == step
    torch.testing.assert_close(param.detach(), initial, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(optimizer.state[0]["exp_avg"], torch.zeros(64), atol=1e-6, rtol=0)


def test_rollback_of_an_unknown_subgroup_or_at_step_zero_names_it() -> None:
    param = torch.nn.Parameter(torch.randn(64))
    optimizer = DeepSpeedCPUAdam([param])
    with pytest.raises(RuntimeError, match="Cannot rollback optimizer state for sub_group_id 0"):
        optimizer.rollback_subgroup(0)
    param.grad = torch.randn(64)
    optimizer.step_subgroup(0)
    optimizer.rollback_subgroup(0)
    with pytest.raises(RuntimeError, match="Cannot rollback sub_group_id 0: step count is 0"):
        optimizer.rollback_subgroup(0)


def test_lion_refuses_an_older_rollback_rather_than_guessing() -> None:
    param = torch.nn.Parameter(torch.randn(8))
    optimizer = DeepSpeedCPULion([param])
    param.grad = torch.randn(8)
    optimizer.step_subgroup(0)
    optimizer.step_subgroup(0)
    optimizer.rollback_subgroup(0)
    with pytest.raises(RuntimeError, match="only its latest step"):
        optimizer.rollback_subgroup(0)
    assert optimizer.state[0]["step"] == 1


def test_step_subgroup_with_several_gradients_is_refused_before_any_write() -> None:
    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(2)]
    optimizer = DeepSpeedCPUAdam(params)
    for param in params:
        param.grad = torch.randn(4)
    before = [p.detach().clone() for p in params]
    with pytest.raises(ValueError, match="2 parameters have gradients"):
        optimizer.step_subgroup(0)
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before, strict=True))
    assert 0 not in optimizer.state
