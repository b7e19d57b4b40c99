"""CPU Adagrad (parity with torch) and CPU Lion (parity with a reference written in torch)."""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.adagrad import CPUAdagrad, DeepSpeedCPUAdagrad
from anyaccel.ops.lion import CPULion, DeepSpeedCPULion

from .optim_reference import ReferenceLion
from .test_adam import assert_parity, train


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"weight_decay": 0.1, "lr_decay": 0.01},
        {"initial_accumulator_value": 0.5},
        {"maximize": True},
    ],
    ids=["plain", "decay", "initial-accumulator", "maximize"],
)
def test_cpu_adagrad_matches_torch_adagrad_over_100_steps(options: dict[str, object]) -> None:
    ours = train(lambda ps: CPUAdagrad(ps, lr=1e-2, **options))  # type: ignore[arg-type]
    torch_ = train(lambda ps: torch.optim.Adagrad(ps, lr=1e-2, **options))  # type: ignore[arg-type]
    assert_parity(ours, torch_)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_cpu_lion_matches_the_reference_over_100_steps(weight_decay: float) -> None:
    ours = train(lambda ps: CPULion(ps, lr=1e-3, betas=(0.9, 0.99), weight_decay=weight_decay))
    reference = train(lambda ps: ReferenceLion(ps, 1e-3, (0.9, 0.99), weight_decay))
    assert_parity(ours, reference)


@pytest.mark.parametrize("optimizer_class", [CPUAdagrad, CPULion])
def test_bf16_copy_is_kept_in_sync(optimizer_class: type[torch.optim.Optimizer]) -> None:
    param = torch.nn.Parameter(torch.randn(50_000))
    copy = torch.empty_like(param, dtype=torch.bfloat16)
    optimizer = optimizer_class([param])
    param.grad = torch.randn_like(param)
    optimizer.step(fp16_param_groups=[copy])  # type: ignore[call-arg]
    assert torch.equal(copy, param.detach().to(torch.bfloat16))


def test_deepspeed_adagrad_and_lion_signatures() -> None:
    adagrad = train(lambda ps: DeepSpeedCPUAdagrad(ps, 1e-2, 1e-10, 0.1), steps=10)
    torch_ = train(lambda ps: torch.optim.Adagrad(ps, lr=1e-2, weight_decay=0.1), steps=10)
    assert_parity(adagrad, torch_)
    lion = train(lambda ps: DeepSpeedCPULion(ps, 1e-3, (0.9, 0.999), 0.0), steps=10)
    reference = train(lambda ps: ReferenceLion(ps, 1e-3, (0.9, 0.999), 0.0), steps=10)
    assert_parity(lion, reference)
    with pytest.raises(ValueError, match="amsgrad"):
        DeepSpeedCPUAdagrad([torch.nn.Parameter(torch.zeros(1))], amsgrad=True)


@pytest.mark.parametrize(
    ("cls", "options"), [(CPULion, {"betas": (0.9, 1.0)}), (CPUAdagrad, {"lr_decay": -1.0})]
)
def test_invalid_hyperparameters_are_rejected(
    cls: type[torch.optim.Optimizer], options: dict[str, object]
) -> None:
    with pytest.raises(ValueError, match=r"(?i)invalid"):
        cls([torch.nn.Parameter(torch.zeros(1))], **options)
