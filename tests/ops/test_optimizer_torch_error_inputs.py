"""torch's own error inputs for Adam, AdamW and Adagrad, replayed against ours.

torch's optimizer tests (``test_errors``, from the error inputs its ``OptimizerInfo`` entries
list for the CPU, and ``test_fused_error_on_params_on_meta``) expect an exception type and a
regex for each input below. Ours must raise that type with a message the regex matches, and
still say our cause and fix. An input the installed torch accepts (an older release) is
skipped, except where the message is our kernel's own (meta parameters).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
from torch.nn import Parameter

from anyaccel.ops.adagrad import CPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW
from anyaccel.ops.optimizer_errors import OptimizerInputError

Factory = Callable[..., torch.optim.Optimizer]
CLASSES: dict[str, tuple[Factory, Factory]] = {
    "Adam": (CPUAdam, torch.optim.Adam),
    "AdamW": (CPUAdamW, torch.optim.AdamW),
    "Adagrad": (CPUAdagrad, torch.optim.Adagrad),
}
ADAM = ("Adam", "AdamW")


def sample() -> Parameter:
    return Parameter(torch.randn(1, 1))


class ErrorInput(NamedTuple):
    """Constructor arguments, and the exception type and regex torch's tests expect for them."""

    params: Callable[[], Any]
    kwargs: dict[str, Any]
    error: type[Exception] | type[Warning]
    regex: str
    only: tuple[str, ...] = tuple(CLASSES)


def _same_param_twice() -> list[Parameter]:
    p = sample()
    return [p, p]


def _same_param_in_two_groups() -> list[dict[str, Any]]:
    p = sample()
    return [{"params": p}, {"params": p}]


INPUTS: dict[str, ErrorInput] = {
    "a tensor, not an iterable": ErrorInput(
        sample,
        {},
        TypeError,
        "params argument given to the optimizer should be an iterable of Tensors or dicts",
    ),
    "a parameter twice in one group": ErrorInput(
        _same_param_twice, {}, UserWarning, ".*a parameter group with duplicate parameters.*"
    ),
    "a parameter in two groups": ErrorInput(
        _same_param_in_two_groups,
        {},
        ValueError,
        "some parameters appear in more than one parameter group",
    ),
    "a tensor lr of two elements": ErrorInput(
        lambda: None,
        {"lr": torch.tensor([0.001, 0.001])},
        ValueError,
        "Tensor lr must be 1-element",
    ),
    "named and unnamed params": ErrorInput(
        lambda: [("weight", sample()), sample()],
        {},
        ValueError,
        "all optimizer params should be with/without names. Some param names are missing",
    ),
    "named and unnamed groups": ErrorInput(
        lambda: [{"params": [sample()], "lr": 1e-2}, {"params": [("weight", sample())]}],
        {},
        ValueError,
        "all optimizer param groups should be with/without names. "
        "cannot add param group with names to the optimizer",
    ),
    "beta1 of 1": ErrorInput(
        lambda: None,
        {"lr": 1e-2, "betas": (1.0, 0.0)},
        ValueError,
        "Invalid beta parameter at index 0: 1.0",
        ADAM,
    ),
    "negative weight_decay": ErrorInput(
        lambda: None, {"lr": 1e-2, "weight_decay": -1}, ValueError, "Invalid weight_decay value: -1"
    ),
    "a tensor lr with foreach": ErrorInput(
        lambda: None,
        {"lr": torch.tensor(0.001), "foreach": True},
        ValueError,
        "lr as a Tensor is not supported for capturable=False and foreach=True",
        ADAM,
    ),
    "a float beta1 and a tensor beta2": ErrorInput(
        lambda: None,
        {"lr": 1e-2, "betas": (0.9, torch.tensor(0.99))},
        ValueError,
        "betas must be either both floats or both Tensors",
        ADAM,
    ),
    "a tensor beta1 and a float beta2": ErrorInput(
        lambda: None,
        {"lr": 1e-2, "betas": (torch.tensor(0.9), 0.99)},
        ValueError,
        "betas must be either both floats or both Tensors",
        ADAM,
    ),
    "tensor betas with foreach": ErrorInput(
        lambda: None,
        {"lr": 1e-2, "betas": (torch.tensor(0.9), torch.tensor(0.99)), "foreach": True},
        ValueError,
        r"betas\[0\] as a Tensor is not supported for capturable=False and foreach=True",
        ADAM,
    ),
    "negative lr_decay": ErrorInput(
        lambda: None,
        {"lr": 1e-2, "lr_decay": -0.5},
        ValueError,
        "Invalid lr_decay value: -0.5",
        ("Adagrad",),
    ),
}


def outcome(cls: Factory, case: ErrorInput) -> BaseException | Warning | None:
    """What constructing ``cls`` with the input raises (or, for a warning, warns), else None."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cls(case.params(), **case.kwargs)
        except Exception as error:  # the verdict is the exception itself
            return error
    matching = [w.message for w in caught if isinstance(w.message, case.error)]
    return matching[0] if matching else None


def matches(found: BaseException | Warning | None, case: ErrorInput) -> bool:
    return isinstance(found, case.error) and re.search(case.regex, str(found)) is not None


@pytest.mark.parametrize("name", list(CLASSES))
@pytest.mark.parametrize("case", list(INPUTS))
def test_each_torch_error_input_raises_torchs_type_in_torchs_words(case: str, name: str) -> None:
    spec = INPUTS[case]
    if name not in spec.only:
        pytest.skip(f"torch lists {case!r} for {', '.join(spec.only)} only")
    ours, theirs = CLASSES[name]
    if not matches(outcome(theirs, spec), spec):
        pytest.skip(f"this torch ({torch.__version__}) does not refuse {case!r} so")
    found = outcome(ours, spec)
    assert matches(found, spec), (case, name, repr(found))
    if isinstance(found, Exception) and isinstance(found, OptimizerInputError):
        assert len(str(found)) > len(spec.regex)  # our cause and fix come with torch's words


def _meta_model() -> torch.nn.Module:
    with torch.device("meta"):
        return torch.nn.Sequential(
            torch.nn.Linear(2, 3), torch.nn.Sigmoid(), torch.nn.Linear(3, 1), torch.nn.Sigmoid()
        )


@pytest.mark.parametrize("name", list(CLASSES))
def test_fused_on_meta_params_is_refused_in_torchs_words_and_makes_nothing(name: str) -> None:
    model = _meta_model()
    optimizer = CLASSES[name][0](model.parameters(), fused=True)
    with torch.device("meta"):
        for p in model.parameters():
            p.grad = torch.rand_like(p)
    with pytest.raises(RuntimeError) as caught:
        optimizer.step()
    message = str(caught.value)
    assert "`fused=True` requires all the params to be floating point Tensors" in message
    assert message.startswith("group 0 param 0 is torch.float32 on meta: ")  # which one
    assert "move the parameter to the CPU" in message  # and the fix
    assert not optimizer.state  # the refused step made nothing
    optimizer.zero_grad(set_to_none=True)
    model.to_empty(device="cpu")  # new parameters: the optimizer's are left without gradients
    for p in model.parameters():
        p.grad = torch.rand_like(p)
    optimizer.step()  # as torch's test ends: a step after the refusal still runs
