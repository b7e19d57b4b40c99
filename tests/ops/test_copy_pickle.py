"""A copied or unpickled CPU optimizer steps exactly like the original."""

from __future__ import annotations

import copy
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from anyaccel.ops.adagrad import CPUAdagrad, DeepSpeedCPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW, DeepSpeedCPUAdam
from anyaccel.ops.lion import CPULion, DeepSpeedCPULion

ALL = [CPUAdam, CPUAdamW, DeepSpeedCPUAdam, CPUAdagrad, DeepSpeedCPUAdagrad, CPULion]
ALL += [DeepSpeedCPULion]
OPTIONS: dict[type, dict[str, Any]] = {CPUAdam: {"amsgrad": True, "weight_decay": 0.1}}


def build(cls: Any) -> tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]:
    """An optimizer over two groups of parameters, stepped twice."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=generator)) for n in (7, 300)]
    optimizer = cls(
        [{"params": params[:1], "lr": 0.05}, {"params": params[1:]}], **OPTIONS.get(cls, {})
    )
    step(optimizer, params, seed=1, count=2)
    return optimizer, params


def step(optimizer: Any, params: list[torch.nn.Parameter], seed: int, count: int) -> None:
    """``count`` steps on seeded gradients."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator)
        optimizer.step()


def params_of(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """The optimizer's parameters in group order."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def assert_same(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    """Same parameters, state, groups, defaults and attributes, bit for bit."""
    for pa, pb in zip(params_of(a), params_of(b), strict=True):
        assert pa is not pb and torch.equal(pa, pb)
        assert a.state[pa].keys() == b.state[pb].keys()
        for key, value in a.state[pa].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b.state[pb][key]))
    strip = [[(k, v) for k, v in g.items() if k != "params"] for g in a.param_groups]
    assert strip == [[(k, v) for k, v in g.items() if k != "params"] for g in b.param_groups]
    assert a.defaults == b.defaults
    assert type(a) is type(b)
    assert sorted(vars(a)) == sorted(vars(b))
    plain = (bool, int, float, str)
    for name, value in vars(a).items():
        if isinstance(value, plain):
            assert vars(b)[name] == value, name


Copier = Callable[[Any], Any]
COPIERS: dict[str, Copier] = {
    "deepcopy": copy.deepcopy,
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
}


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("copier", list(COPIERS), ids=str)
def test_a_copy_steps_exactly_like_the_original(cls: Any, copier: str) -> None:
    original, params = build(cls)
    duplicate = COPIERS[copier](original)
    step(original, params, seed=2, count=3)
    step(duplicate, params_of(duplicate), seed=2, count=3)
    assert_same(original, duplicate)


def test_the_compiled_kernel_is_not_pickled_and_is_reloaded_through_the_builder() -> None:
    original, _ = build(CPUAdam)
    state = original.__getstate__()
    assert "_kernel" not in state and "kernel" not in state
    duplicate = pickle.loads(pickle.dumps(original))
    assert "_kernel" not in vars(duplicate)
    assert duplicate.kernel is original.kernel  # the builder's in-process cache
    assert "_kernel" in vars(duplicate)


def test_hooks_are_not_copied_as_torch_does_not_copy_them() -> None:
    original, _ = build(CPULion)
    original.register_step_post_hook(lambda *args: None)
    duplicate = pickle.loads(pickle.dumps(original))
    assert len(duplicate._optimizer_step_post_hooks) == 0
    step(duplicate, params_of(duplicate), seed=2, count=1)


def test_an_optimizer_pickled_here_steps_alike_in_a_fresh_process(
    tmp_path: Path, run_python: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    original, params = build(CPUAdagrad)
    torch.save(original, tmp_path / "optimizer.pt")
    step(original, params, seed=2, count=3)
    torch.save(params_of(original), tmp_path / "expected.pt")
    result = run_python(
        f"""
        import torch
        from tests.ops.test_copy_pickle import params_of, step
        optimizer = torch.load({str(tmp_path / "optimizer.pt")!r}, weights_only=False)
        step(optimizer, params_of(optimizer), seed=2, count=3)
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        assert all(torch.equal(a, b) for a, b in zip(params_of(optimizer), expected, strict=True))
        print("same")
        """,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "same"
