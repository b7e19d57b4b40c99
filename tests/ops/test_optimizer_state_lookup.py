"""How a native step finds and holds its tensors: state found by key, references released."""

from __future__ import annotations

import sys

import pytest
import torch

from .optim_reference import PAIRS

NAMES = ["CPUAdam", "CPUAdagrad", "CPULion"]


class HashedByValue(torch.nn.Parameter):
    """A parameter whose ``__hash__`` is not torch's ``id(self)``: its state must still be found."""

    def __hash__(self) -> int:
        return 12345


def stepped_twice(name: str, make: type[torch.nn.Parameter]) -> tuple[torch.Tensor, dict]:
    """Two steps of ``name`` over one parameter of class ``make``: the result and its state."""
    ours, _ = PAIRS[name]
    torch.manual_seed(0)
    param = make(torch.randn(5))
    optimizer = ours([param])
    for _ in range(2):
        param.grad = torch.randn(5)
        optimizer.step()
    return param.detach().clone(), dict(optimizer.state[param])


@pytest.mark.parametrize("name", NAMES)
def test_a_parameter_with_its_own_hash_finds_its_state_and_steps_alike(name: str) -> None:
    plain, plain_state = stepped_twice(name, torch.nn.Parameter)
    custom, custom_state = stepped_twice(name, HashedByValue)
    assert torch.equal(plain, custom)
    assert float(custom_state["step"]) == 2.0  # the first step's state was found, not remade
    assert plain_state.keys() == custom_state.keys()


@pytest.mark.parametrize("name", NAMES)
def test_a_gradient_replaced_between_prepare_and_run_is_refused(name: str) -> None:
    ours, _ = PAIRS[name]
    param = torch.nn.Parameter(torch.randn(5))
    param.grad = torch.randn(5)
    optimizer = ours([param])
    plans = optimizer._prepare(None, None)
    param.grad = torch.randn(5)  # a different tensor than the one checked
    before = param.detach().clone()
    with pytest.raises(RuntimeError, match="gradient replaced"):
        optimizer._run(plans)
    assert torch.equal(param.detach(), before)


@pytest.mark.parametrize("name", NAMES)
def test_a_refused_step_keeps_no_reference_to_its_tensors(name: str) -> None:
    ours, _ = PAIRS[name]
    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(40)]
    for param in params:
        param.grad = torch.randn(3)
    optimizer = ours(params)
    optimizer.step()
    key = next(iter(optimizer.state[params[35]]))
    optimizer.state[params[35]][key] = torch.zeros(4)  # wrong shape: refused at param 35
    counts = [sys.getrefcount(p) for p in params[:35]]
    states = [sys.getrefcount(optimizer.state[p][key]) for p in params[:35]]
    for _ in range(3):
        with pytest.raises(ValueError, match="param 35"):
            optimizer.step()
    assert [sys.getrefcount(p) for p in params[:35]] == counts
    assert [sys.getrefcount(optimizer.state[p][key]) for p in params[:35]] == states


class StateDict(dict):  # type: ignore[type-arg]
    """A state dict of a subclass: read through lookups, not the plain-dict walk."""


def fresh_key(key: object) -> object:
    """An equal key that is not the same object (as unpickled checkpoint keys are)."""
    return "".join(list(key)) if isinstance(key, str) else key


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "rebuild",
    [
        pytest.param(lambda s: {fresh_key(k): v for k, v in s.items()}, id="equal-not-same-keys"),
        pytest.param(lambda s: {"note": 1, 7: "x", **s}, id="extra-keys"),
        pytest.param(lambda s: {**{f"k{i}": i for i in range(12)}, **s}, id="large-dict"),
        pytest.param(lambda s: StateDict(s), id="dict-subclass"),
        pytest.param(lambda s: dict(reversed(list(s.items()))), id="other-order"),
    ],
)
def test_every_shape_of_state_dict_is_read_as_a_lookup_reads_it(name: str, rebuild: object) -> None:
    # The native step reads a small plain state dict in one walk over its entries; whatever the
    # dict looks like, it must find exactly what dict lookups find.
    ours, _ = PAIRS[name]
    results = []
    for edit in (False, True):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(3)) for _ in range(40)]  # more than one block
        optimizer = ours(params)
        for step in range(3):
            for param in params:
                param.grad = torch.randn(3)
            optimizer.step()
            if edit and step == 0:
                for param in params:
                    optimizer.state[param] = rebuild(optimizer.state[param])  # type: ignore[operator]
        results.append(([p.detach().clone() for p in params],
                        [float(optimizer.state[p]["step"]) for p in params]))  # fmt: skip
    (plain, plain_steps), (edited, edited_steps) = results
    assert edited_steps == plain_steps == [3.0] * 40  # the edited states were found, not remade
    assert all(torch.equal(a, b) for a, b in zip(plain, edited, strict=True))
