"""One validator for every CPU optimizer: torch's rules, checked against the installed torch."""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anyaccel.ops.adagrad import CPUAdagrad, DeepSpeedCPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW, DeepSpeedCPUAdam
from anyaccel.ops.hyperparams import ADAM_RULES, validate
from anyaccel.ops.lion import CPULion, DeepSpeedCPULion

from .optim_reference import ReferenceLion
from .test_adam import assert_parity, train

#: Our optimizer, torch's counterpart, and the numeric hyperparameters both take.
PAIRS = [
    (CPUAdam, torch.optim.Adam, ["lr", "eps", "weight_decay"]),
    (CPUAdamW, torch.optim.AdamW, ["lr", "eps", "weight_decay"]),
    (
        CPUAdagrad,
        torch.optim.Adagrad,
        ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"],
    ),
]
NUMERIC_CASES = [
    pytest.param(
        [(ours, theirs, key) for ours, theirs, keys in PAIRS for key in keys][i],
        id=f"{[(o.__name__, k) for o, _, ks in PAIRS for k in ks][i]}",
    )
    for i in range(sum(len(keys) for _, _, keys in PAIRS))
]
#: Values people pass; how torch treats each is read from the installed torch, not listed here.
VALUES: list[Any] = [
    "1e-3",
    -1.0,
    float("nan"),
    float("inf"),
    -float("inf"),
    0,
    0.0,
    0.5,
    3,
    3.5e38,
    True,
    None,
    [0.1],
    torch.tensor(0.1),
    torch.tensor([0.1]),
    torch.tensor([0.1, 0.2]),
    torch.tensor(-1.0),
]


def param() -> torch.nn.Parameter:
    """One small parameter."""
    return torch.nn.Parameter(torch.zeros(3))


def outcome(make: Callable[[], object]) -> type[BaseException] | None:
    """The exception type ``make()`` raises, or None when it succeeds."""
    try:
        make()
    except Exception as error:
        return type(error)
    return None


def assert_same_verdict(ours: Callable[[], object], theirs: Callable[[], object]) -> None:
    """Refused by both or by neither; where torch says ValueError or TypeError, so do we."""
    our_error, their_error = outcome(ours), outcome(theirs)
    assert (our_error is None) == (their_error is None), (our_error, their_error)
    if their_error in (ValueError, TypeError):
        assert our_error is not None and issubclass(our_error, their_error)


@pytest.mark.parametrize("case", NUMERIC_CASES)
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_numeric_hyperparameters_are_accepted_and_refused_as_torch_does(
    case: tuple[type[torch.optim.Optimizer], type[torch.optim.Optimizer], str], value: Any
) -> None:
    ours, theirs, key = case
    if key == "initial_accumulator_value" and isinstance(value, torch.Tensor) and value.dim():
        # torch's own fill (full_like) trips over a shape-(1,) tensor; we take its one value.
        verdict = outcome(lambda: ours([param()], **{key: value}))
        if value.numel() == 1 and value.item() >= 0:
            assert verdict is None
        else:
            assert verdict is not None and issubclass(verdict, ValueError)
        return
    assert_same_verdict(
        lambda: ours([param()], **{key: value}), lambda: theirs([param()], **{key: value})
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.sampled_from(["lr", "eps", "weight_decay", "lr_decay", "initial_accumulator_value"]),
    value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**6), 10**6),
)
def test_any_number_gets_torch_adagrads_verdict(key: str, value: float) -> None:
    assert_same_verdict(
        lambda: CPUAdagrad([param()], **{key: value}),
        lambda: torch.optim.Adagrad([param()], **{key: value}),
    )


@settings(max_examples=60, deadline=None)
@given(
    beta1=st.floats(allow_nan=True, allow_infinity=True),
    beta2=st.floats(allow_nan=True, allow_infinity=True),
)
def test_float_betas_get_torch_adams_verdict_and_lion_agrees(beta1: float, beta2: float) -> None:
    betas = (beta1, beta2)
    assert_same_verdict(
        lambda: CPUAdam([param()], betas=betas), lambda: torch.optim.Adam([param()], betas=betas)
    )
    assert outcome(lambda: CPULion([param()], betas=betas)) == outcome(
        lambda: CPUAdam([param()], betas=betas)
    )


@pytest.mark.parametrize("key", ["lr", "weight_decay"])
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_lion_and_adam_agree_on_every_value(key: str, value: Any) -> None:
    assert outcome(lambda: CPULion([param()], **{key: value})) == outcome(
        lambda: CPUAdam([param()], **{key: value})
    )


@pytest.mark.parametrize(
    "cls", [CPUAdam, CPUAdamW, CPUAdagrad, CPULion, DeepSpeedCPUAdam, DeepSpeedCPUAdagrad]
)
def test_a_string_learning_rate_is_a_type_error_naming_it_everywhere(
    cls: type[torch.optim.Optimizer],
) -> None:
    with pytest.raises(TypeError, match=r"learning rate lr='1e-3' \(str\)"):
        cls([param()], lr="1e-3")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lr": -0.5}, r"Invalid learning rate: -0.5 \(lr=-0.5\)"),
        ({"eps": float("nan")}, r"Invalid epsilon value: nan \(eps=nan\)"),
        ({"betas": (0.9, 1.0)}, r"beta parameter at index 1: 1.0 \(betas\[1\]=1.0\)"),
        ({"betas": (0.9,)}, "exactly two numbers"),
        ({"betas": "0.9"}, "pair of numbers"),
        ({"lr": torch.tensor([1.0, 2.0])}, "Tensor lr must be 1-element"),
        ({"amsgrad": "yes"}, "amsgrad='yes'"),
        ({"foreach": "x"}, "foreach='x'"),
    ],
)
def test_errors_name_the_hyperparameter_and_its_value(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        CPUAdam([param()], **options)


def test_tensor_betas_are_accepted_and_used() -> None:
    betas = (torch.tensor(0.0), torch.tensor(0.5))
    ours = train(lambda ps: CPUAdam(ps, lr=1e-2, betas=betas), steps=5)
    torch_ = train(lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.0, 0.5)), steps=5)
    assert_parity(ours, torch_)


def test_integer_betas_are_used_where_deepspeed_and_lion_take_them() -> None:
    """DeepSpeed's signature and Lion take any numbers; CPUAdam follows torch's type rule."""
    want = train(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.0, betas=(0.0, 0.5)), 5)
    got = train(lambda ps: DeepSpeedCPUAdam(ps, lr=1e-2, betas=(0, torch.tensor(0.5))), 5)
    assert_parity(got, want)
    CPULion([param()], betas=(0, 1 - 2**-7))


def test_a_tensor_learning_rate_is_read_at_every_step() -> None:
    lr = torch.tensor(1e-2)
    param_ = torch.nn.Parameter(torch.ones(4))
    optimizer = CPUAdam([param_], lr=lr)
    lr.fill_(0.0)  # a scheduler updating the tensor in place
    param_.grad = torch.ones(4)
    optimizer.step()
    assert torch.equal(param_.detach(), torch.ones(4))


@pytest.mark.parametrize(
    "cls", [CPUAdam, CPUAdamW, CPUAdagrad, CPULion, DeepSpeedCPUAdam, DeepSpeedCPUAdagrad]
)
def test_per_group_values_are_validated_in_the_constructor(
    cls: type[torch.optim.Optimizer],
) -> None:
    groups = [{"params": [param()]}, {"params": [param()], "lr": -1.0}]
    with pytest.raises(ValueError, match=r"param group 1: Invalid learning rate: -1\.0"):
        cls(groups)


@pytest.mark.parametrize("cls", [CPUAdam, CPUAdagrad, CPULion])
def test_add_param_group_refuses_a_bad_value_and_adds_nothing(
    cls: type[torch.optim.Optimizer],
) -> None:
    optimizer = cls([param()])
    with pytest.raises(TypeError, match="param group 1: invalid weight_decay value"):
        optimizer.add_param_group({"params": [param()], "weight_decay": "0.1"})
    assert len(optimizer.param_groups) == 1


def test_validate_ignores_keys_it_has_no_rule_for() -> None:
    validate(ADAM_RULES, {"params": [], "name": "decoder", "lr_scale": "anything"})
    with pytest.raises(ValueError, match="where: Invalid learning rate"):
        validate(ADAM_RULES, {"lr": -1}, "where")


# torch.optim's keyword arguments


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (CPUAdam, torch.optim.Adam),
        (CPUAdamW, torch.optim.AdamW),
        (CPUAdagrad, torch.optim.Adagrad),
    ],
)
def test_every_argument_torch_takes_we_take_in_the_same_place(
    ours: type[torch.optim.Optimizer], theirs: type[torch.optim.Optimizer]
) -> None:
    torch_parameters = inspect.signature(theirs.__init__).parameters
    our_parameters = inspect.signature(ours.__init__).parameters
    assert set(torch_parameters) <= set(our_parameters)
    positional = [name for name, p in torch_parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert list(our_parameters)[: len(positional)] == positional


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (CPUAdam, torch.optim.Adam),
        (CPUAdamW, torch.optim.AdamW),
        (CPUAdagrad, torch.optim.Adagrad),
    ],
)
@pytest.mark.parametrize(
    "options",
    [
        {"foreach": True},
        {"foreach": False},
        {"fused": True},
        {"fused": None},
        {"capturable": False},
        {"differentiable": False},
        {"maximize": True},
    ],
    ids=str,
)
def test_torch_keywords_that_keep_our_semantics_are_accepted(
    ours: type[torch.optim.Optimizer],
    theirs: type[torch.optim.Optimizer],
    options: dict[str, Any],
) -> None:
    if "capturable" in options and "capturable" not in inspect.signature(theirs).parameters:
        pytest.skip(f"{theirs.__name__} takes no capturable")
    maximize = {"maximize": options["maximize"]} if "maximize" in options else {}
    got = train(lambda ps: ours(ps, lr=1e-2, **options), steps=5)
    want = train(lambda ps: theirs(ps, lr=1e-2, **maximize), steps=5)
    assert_parity(got, want)


@pytest.mark.parametrize(
    "cls", [CPUAdam, CPUAdamW, CPUAdagrad, CPULion, DeepSpeedCPUAdam, DeepSpeedCPUAdagrad]
)
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"differentiable": True}, "differentiable=True is not supported"),
        ({"capturable": True}, "capturable=True is not supported"),
        ({"fused": True, "foreach": True}, "`fused` and `foreach` cannot be `True` together"),
    ],
)
def test_torch_keywords_we_cannot_honour_are_refused_per_group(
    cls: type[torch.optim.Optimizer], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cls([{"params": [param()], **options}])


@pytest.mark.parametrize("cls", [CPUAdam, CPUAdamW, CPUAdagrad, CPULion])
def test_torch_keywords_we_cannot_honour_are_refused_in_the_constructor(
    cls: type[torch.optim.Optimizer],
) -> None:
    with pytest.raises(ValueError, match="differentiable=True is not supported"):
        cls([param()], differentiable=True)


def test_code_written_for_torch_adamw_swaps_in() -> None:
    def build(cls: Any, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return cls(
            params,
            lr=1e-2,
            betas=(0.9, 0.95),
            eps=1e-8,
            weight_decay=0.1,
            amsgrad=False,
            maximize=False,
            foreach=None,
            capturable=False,
            differentiable=False,
            fused=None,
        )

    assert_parity(
        train(lambda ps: build(CPUAdamW, ps), steps=10),
        train(lambda ps: build(torch.optim.AdamW, ps), steps=10),
    )


def test_decoupled_weight_decay_is_torchs_name_for_adamw_mode() -> None:
    optimizer = CPUAdam([param()], weight_decay=0.1, decoupled_weight_decay=True)
    assert optimizer.param_groups[0]["adamw_mode"] is True
    assert optimizer.param_groups[0]["decoupled_weight_decay"] is True
    assert_parity(
        train(lambda ps: CPUAdam(ps, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True), 20),
        train(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), 20),
    )
    with pytest.raises(ValueError, match="disagree"):
        optimizer.add_param_group(
            {"params": [param()], "adamw_mode": True, "decoupled_weight_decay": False}
        )


# per-group values behave as torch's


def two_groups(options: tuple[dict[str, Any], dict[str, Any]]) -> Callable[..., Any]:
    """Split the test parameters into two groups with their own options."""

    def split(params: list[torch.nn.Parameter]) -> list[dict[str, Any]]:
        return [{"params": params[:2], **options[0]}, {"params": params[2:], **options[1]}]

    return split


@pytest.mark.parametrize(
    "options",
    [
        ({"lr_decay": 0.5}, {"lr_decay": 0.0}),
        ({"initial_accumulator_value": 0.0}, {"initial_accumulator_value": 2.0}),
        ({"eps": 1e-3, "maximize": True}, {"weight_decay": 0.2, "lr": 0.1}),
    ],
    ids=["lr_decay", "initial_accumulator_value", "eps-maximize-weight_decay-lr"],
)
def test_adagrad_per_group_values_behave_as_torchs(
    options: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    split = two_groups(options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = train(
            lambda ps: CPUAdagrad(split(ps), lr=1e-2, initial_accumulator_value=0.5), steps=20
        )
    torch_ = train(
        lambda ps: torch.optim.Adagrad(split(ps), lr=1e-2, initial_accumulator_value=0.5),
        steps=20,
    )
    assert_parity(ours, torch_)
    ignored = [w for w in caught if "initial_accumulator_value" in str(w.message)]
    assert len(ignored) == sum("initial_accumulator_value" in o for o in options)


@pytest.mark.parametrize(
    ("ours", "theirs"), [(CPUAdam, torch.optim.Adam), (CPUAdamW, torch.optim.AdamW)]
)
@pytest.mark.parametrize(
    "options",
    [
        ({"amsgrad": True}, {"maximize": True}),
        ({"betas": (0.5, 0.9), "eps": 1e-3}, {"weight_decay": 0.3, "lr": 0.1}),
    ],
    ids=["amsgrad-maximize", "betas-eps-weight_decay-lr"],
)
def test_adam_per_group_values_behave_as_torchs(
    ours: type[torch.optim.Optimizer],
    theirs: type[torch.optim.Optimizer],
    options: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    split = two_groups(options)
    assert_parity(
        train(lambda ps: ours(split(ps), lr=1e-2), steps=30),
        train(lambda ps: theirs(split(ps), lr=1e-2), steps=30),
    )


def test_lion_per_group_values_behave_as_the_reference() -> None:
    split = two_groups(({"betas": (0.5, 0.9), "lr": 1e-2}, {"weight_decay": 0.1}))
    ours = train(lambda ps: CPULion(split(ps), lr=1e-3, betas=(0.9, 0.99)), steps=30)
    reference = train(lambda ps: ReferenceLion(split(ps), 1e-3, (0.9, 0.99), 0.0), steps=30)
    assert_parity(ours, reference)


@pytest.mark.parametrize(
    ("ours", "theirs", "extra"),
    [
        (CPUAdam, torch.optim.Adam, {"amsgrad": True, "lr": 0.05}),
        (CPUAdagrad, torch.optim.Adagrad, {"lr_decay": 0.3, "lr": 0.05}),
    ],
)
def test_a_group_added_after_construction_behaves_as_torchs(
    ours: type[torch.optim.Optimizer], theirs: type[torch.optim.Optimizer], extra: dict[str, Any]
) -> None:
    def make(cls: Any) -> Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]:
        def build(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
            optimizer = cls(params[:2], lr=1e-2)
            optimizer.add_param_group({"params": params[2:], **extra})
            return optimizer

        return build

    try:
        want = train(make(theirs), steps=10)
    except KeyError:  # torch < 2.5's Adagrad creates state only in its constructor
        pytest.skip(f"this torch's {theirs.__name__} cannot step a group added later")
    assert_parity(train(make(ours), steps=10), want)


def test_deepspeed_lion_checks_like_lion() -> None:
    with pytest.raises(ValueError, match=r"betas\[0\]=1.5"):
        DeepSpeedCPULion([param()], betas=(1.5, 0.9))
    assert math.isinf(CPULion([param()], lr=float("inf")).defaults["lr"])
