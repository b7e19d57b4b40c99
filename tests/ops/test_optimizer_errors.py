"""Where torch.optim raises for an input, ours raise the same built-in type, in torch's words.

One table of bad inputs (hyperparameter values and types, tensor learning rates and betas,
keyword pairs, meta/complex/sparse/expanded parameters, parameter lists torch refuses) is run
through torch's optimizer and ours. Whenever torch raises, ours raise an anyaccel
``OptimizerInputError`` that is also an instance of torch's exception type, and whose message
holds torch's wording (where torch's message is its own, not Python's) before our cause and fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch

from anyaccel.errors import AnyaccelError
from anyaccel.ops.adagrad import CPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW
from anyaccel.ops.optimizer_errors import (
    OptimizerIndexError,
    OptimizerInputError,
    OptimizerRuntimeError,
    OptimizerTypeError,
    OptimizerValueError,
    as_optimizer_error,
)

Factory = Callable[..., torch.optim.Optimizer]
CLASSES: dict[str, tuple[Factory, Factory]] = {
    "Adam": (CPUAdam, torch.optim.Adam),
    "AdamW": (CPUAdamW, torch.optim.AdamW),
    "Adagrad": (CPUAdagrad, torch.optim.Adagrad),
}


def param(*shape: int, **options: Any) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(*shape, **options) if shape else torch.randn(3))


def with_grad(p: torch.nn.Parameter, grad: torch.Tensor | None = None) -> torch.nn.Parameter:
    p.grad = torch.randn_like(p) if grad is None else grad
    return p


class Case(NamedTuple):
    """One bad input: how to use it with an optimizer class, and torch's wording for it."""

    run: Callable[[Factory], object]
    #: A stable part of torch's message that ours must contain (None: torch's is Python's own).
    wording: str | None
    #: Which classes the case applies to.
    only: tuple[str, ...] = tuple(CLASSES)
    #: Compare with torch's fused=True path (ours always run fused kernels).
    fused: bool = False


def build(**options: Any) -> Callable[[Factory], object]:
    return lambda cls: cls([param()], **options)


def step_on(make: Callable[[], torch.nn.Parameter], **options: Any) -> Callable[[Factory], object]:
    return lambda cls: cls([with_grad(param(4)), make()], **options).step()


def meta_param() -> torch.nn.Parameter:
    return with_grad(
        torch.nn.Parameter(torch.empty(3, device="meta")), torch.empty(3, device="meta")
    )


def complex_param() -> torch.nn.Parameter:
    return with_grad(param(3, dtype=torch.complex64))


def sparse_grad_param() -> torch.nn.Parameter:
    return with_grad(param(3, 2), torch.randn(3, 2).to_sparse())


def expanded_param() -> torch.nn.Parameter:
    return with_grad(torch.nn.Parameter(torch.randn(1).expand(4)), torch.randn(4))


def same_param_in_two_groups(cls: Factory) -> object:
    shared = param()
    optimizer = cls([shared])
    optimizer.add_param_group({"params": [shared]})
    return optimizer


T = torch.tensor
ADAM = ("Adam", "AdamW")
CASES: dict[str, Case] = {
    "lr negative": Case(build(lr=-1.0), "Invalid learning rate: -1.0"),
    "lr nan": Case(build(lr=float("nan")), "Invalid learning rate: nan"),
    "lr string": Case(build(lr="0.1"), None),
    "lr None": Case(build(lr=None), None),
    "lr tensor of two": Case(build(lr=T([0.1, 0.2])), "Tensor lr must be 1-element"),
    "lr tensor negative": Case(build(lr=T(-0.5)), "Invalid learning rate: -0.5"),
    "eps negative": Case(build(eps=-1e-8), "Invalid epsilon value: -1e-08"),
    "weight_decay negative": Case(build(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
    "weight_decay string": Case(build(weight_decay="x"), None),
    "fused and foreach": Case(
        build(fused=True, foreach=True), "`fused` and `foreach` cannot be `True` together."
    ),
    "fused and differentiable": Case(
        build(fused=True, differentiable=True), "`fused` does not support `differentiable`"
    ),
    "beta1 of 1": Case(build(betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0", ADAM),
    "beta2 negative": Case(
        build(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1", ADAM
    ),
    "beta nan": Case(
        build(betas=(float("nan"), 0.9)), "Invalid beta parameter at index 0: nan", ADAM
    ),
    "one beta": Case(build(betas=(0.9,)), None, ADAM),
    "betas float and tensor": Case(
        build(betas=(0.9, T(0.999))), "betas must be either both floats or both Tensors", ADAM
    ),
    "betas int and float": Case(
        build(betas=(0, 0.999)), "betas must be either both floats or both Tensors", ADAM
    ),
    "betas tensors of two": Case(build(betas=(T([0.9, 0.8]), T([0.99, 0.9]))), None, ADAM),
    "betas a string": Case(build(betas="ab"), None, ADAM),
    "lr_decay negative": Case(build(lr_decay=-1.0), "Invalid lr_decay value: -1.0", ("Adagrad",)),
    "initial_accumulator_value negative": Case(
        build(initial_accumulator_value=-1.0),
        "Invalid initial_accumulator_value value: -1.0",
        ("Adagrad",),
    ),
    "initial_accumulator_value beyond fp32": Case(  # torch: RuntimeError filling the state
        build(initial_accumulator_value=1e40),
        "value cannot be converted to type float without overflow",
        ("Adagrad",),
    ),
    "meta parameter": Case(  # (torch's fused Adagrad fails inside its kernel instead)
        step_on(meta_param, fused=True),
        "all the params to be floating point Tensors of supported devices",
        ADAM,
        fused=True,
    ),
    "complex parameter": Case(
        step_on(complex_param, fused=True),
        "all the params to be floating point Tensors of supported devices",
        fused=True,
    ),
    "sparse gradient": Case(
        step_on(sparse_grad_param),
        "does not support sparse gradients, please consider SparseAdam instead",
        ADAM,
    ),
    "expanded parameter": Case(
        step_on(expanded_param),
        "more than one element of the written-to tensor refers to a single memory location",
    ),
    "empty parameter list": Case(lambda cls: cls([]), "optimizer got an empty parameter list"),
    "non-leaf tensor": Case(
        lambda cls: cls([torch.randn(3, requires_grad=True) * 2]),
        "can't optimize a non-leaf Tensor",
    ),
    "a tensor, not a list": Case(
        lambda cls: cls(param()), "params argument given to the optimizer should be an iterable"
    ),
    "a parameter in two groups": Case(
        same_param_in_two_groups, "some parameters appear in more than one parameter group"
    ),
}


def torch_fused_supported() -> bool:
    probe = with_grad(param(2))
    try:
        torch.optim.Adam([probe], fused=True).step()
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def raised(run: Callable[[Factory], object], cls: Factory) -> Exception | None:
    try:
        run(cls)
    except Exception as exc:  # the verdict is the exception itself
        return exc
    return None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", list(CLASSES))
@pytest.mark.parametrize("case", list(CASES))
def test_ours_raise_what_torch_raises_in_torchs_words(case: str, name: str) -> None:
    spec = CASES[case]
    if name not in spec.only:
        pytest.skip(f"{case!r} is not an input of {name}")
    if spec.fused and not torch_fused_supported():
        pytest.skip("this torch has no fused CPU optimizers to compare with")
    ours, theirs = CLASSES[name]
    their_error = raised(spec.run, theirs)
    if their_error is None:
        pytest.skip(f"this torch accepts {case!r} for {name}")
    our_error = raised(spec.run, ours)
    assert our_error is not None, f"torch raises {their_error!r}; ours accepted {case!r}"
    assert isinstance(our_error, type(their_error)), (our_error, their_error)
    assert isinstance(our_error, OptimizerInputError), repr(our_error)
    if spec.wording is not None:
        assert spec.wording in str(our_error), (str(our_error), str(their_error))
        assert len(str(our_error)) > len(spec.wording)  # our cause and fix come with it


def test_the_table_states_torchs_own_wording() -> None:
    """On the torch these tests were written against, torch's messages hold the table's words."""
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if release < (2, 13) or not torch_fused_supported():
        pytest.skip("the wording was taken from torch 2.13")
    for case, spec in CASES.items():
        if spec.wording is None:
            continue
        cls = CLASSES[spec.only[0]][1]
        error = raised(spec.run, cls)
        assert error is not None and spec.wording in str(error), (case, error)


@pytest.mark.parametrize(
    ("builtin", "ours"),
    [
        (ValueError("v"), OptimizerValueError),
        (TypeError("t"), OptimizerTypeError),
        (RuntimeError("r"), OptimizerRuntimeError),
    ],
)
def test_kernel_errors_become_ours_keeping_their_builtin_type(
    builtin: Exception, ours: type[Exception]
) -> None:
    mapped = as_optimizer_error(builtin)
    assert type(mapped) is ours
    assert isinstance(mapped, type(builtin))
    assert str(mapped) == str(builtin)
    assert as_optimizer_error(mapped) is mapped


def test_one_beta_is_an_index_error_as_torch_raises() -> None:
    with pytest.raises(OptimizerIndexError, match="exactly two numbers"):
        CPUAdam([param()], betas=(0.9,))
    with pytest.raises(IndexError):
        torch.optim.Adam([param()], betas=(0.9,))


def test_a_bad_value_is_not_a_runtime_error() -> None:
    # Only what torch refuses as RuntimeError is one: ``except RuntimeError`` around a step
    # must not swallow a bad learning rate.
    param = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="Invalid learning rate") as caught:
        CPUAdam([param], lr=-1.0)
    assert isinstance(caught.value, AnyaccelError)
    assert not isinstance(caught.value, RuntimeError)
