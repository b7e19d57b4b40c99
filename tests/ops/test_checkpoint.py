"""Checkpoints move between anyaccel, torch.optim and DeepSpeed, both ways, and training goes on."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from anyaccel.ops import hyperparams
from anyaccel.ops.adagrad import CPUAdagrad, DeepSpeedCPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW, DeepSpeedCPUAdam
from anyaccel.ops.checkpoint import CheckpointMismatchError
from anyaccel.ops.lion import CPULion, DeepSpeedCPULion

Make = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
SHAPES = [(5,), (4, 3), (2_001,)]


def fresh_params() -> list[torch.nn.Parameter]:
    """The same random parameters every call."""
    generator = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in SHAPES]


def gradients(steps: int) -> list[list[torch.Tensor]]:
    """The same random gradients every call, one list per step."""
    generator = torch.Generator().manual_seed(1)
    return [[torch.randn(shape, generator=generator) for shape in SHAPES] for _ in range(steps)]


def run(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], grads: Any) -> None:
    """Step ``optimizer`` once per gradient list."""
    for step_grads in grads:
        for param, grad in zip(params, step_grads, strict=True):
            param.grad = grad.clone()
        optimizer.step()


def saved(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` through torch.save and torch.load, as a checkpoint travels."""
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)  # type: ignore[no-any-return]


def resumed(first: Make, second: Make) -> list[torch.Tensor]:
    """5 steps with ``first``, its checkpoint loaded into ``second``, 5 more steps."""
    params, grads = fresh_params(), gradients(10)
    before = first(params)
    run(before, params, grads[:5])
    after = second(params)
    after.load_state_dict(saved(before))
    run(after, params, grads[5:])
    return [param.detach().clone() for param in params]


def straight(make: Make) -> list[torch.Tensor]:
    """10 steps with one optimizer."""
    params = fresh_params()
    run(make(params), params, gradients(10))
    return [param.detach().clone() for param in params]


def assert_within_1e6(
    actual: list[torch.Tensor], expected: list[torch.Tensor], rtol: float = 0.0
) -> None:
    """Every parameter within 1e-6 of the reference run (plus ``rtol``, for other kernels)."""
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=rtol, atol=1e-6)


#: (ours, torch's, the options both runs use). Each resumed optimizer is built with its
#: constructor defaults: the checkpoint's hyperparameters must win.
INTERCHANGE = [
    (CPUAdam, torch.optim.Adam, {}),
    (CPUAdam, torch.optim.Adam, {"amsgrad": True}),
    (CPUAdam, torch.optim.Adam, {"maximize": True}),
    (CPUAdam, torch.optim.Adam, {"weight_decay": 0.1}),
    (CPUAdamW, torch.optim.AdamW, {}),
    (CPUAdamW, torch.optim.AdamW, {"amsgrad": True, "weight_decay": 0.3}),
    (CPUAdamW, torch.optim.AdamW, {"maximize": True}),
    (CPUAdamW, torch.optim.AdamW, {"weight_decay": 0.0}),
    (CPUAdagrad, torch.optim.Adagrad, {}),
    (CPUAdagrad, torch.optim.Adagrad, {"maximize": True}),
    (CPUAdagrad, torch.optim.Adagrad, {"weight_decay": 0.1, "lr_decay": 0.05}),
]


@pytest.mark.parametrize(("ours", "theirs", "options"), INTERCHANGE, ids=str)
def test_torch_checkpoint_into_ours_continues_as_torch(
    ours: Any, theirs: Any, options: dict[str, Any]
) -> None:
    reference = straight(lambda ps: theirs(ps, lr=2e-2, **options))
    got = resumed(lambda ps: theirs(ps, lr=2e-2, **options), lambda ps: ours(ps))
    assert_within_1e6(got, reference)


@pytest.mark.parametrize(("ours", "theirs", "options"), INTERCHANGE, ids=str)
def test_our_checkpoint_into_torch_continues_as_torch(
    ours: Any, theirs: Any, options: dict[str, Any]
) -> None:
    reference = straight(lambda ps: theirs(ps, lr=2e-2, **options))
    got = resumed(lambda ps: ours(ps, lr=2e-2, **options), lambda ps: theirs(ps))
    assert_within_1e6(got, reference)


def torch_adamw_marks_decoupling() -> bool:
    """Whether this torch's AdamW writes ``decoupled_weight_decay`` in its groups (2.6+)."""
    return "decoupled_weight_decay" in hyperparams.torch_group_defaults("AdamW")


@pytest.mark.skipif(not torch_adamw_marks_decoupling(), reason="this torch's AdamW has no marker")
def test_torch_adamw_checkpoint_into_cpu_adam_keeps_decoupled_weight_decay() -> None:
    reference = straight(lambda ps: torch.optim.AdamW(ps, lr=2e-2, weight_decay=0.3))
    got = resumed(
        lambda ps: torch.optim.AdamW(ps, lr=2e-2, weight_decay=0.3), lambda ps: CPUAdam(ps)
    )
    assert_within_1e6(got, reference)


@pytest.mark.skipif(not torch_adamw_marks_decoupling(), reason="this torch's Adam has no marker")
def test_cpu_adamw_checkpoint_into_torch_adam_keeps_decoupled_weight_decay() -> None:
    reference = straight(lambda ps: torch.optim.AdamW(ps, lr=2e-2, weight_decay=0.3))
    got = resumed(
        lambda ps: CPUAdamW(ps, lr=2e-2, weight_decay=0.3), lambda ps: torch.optim.Adam(ps)
    )
    assert_within_1e6(got, reference)


def test_cpu_adamw_stays_decoupled_like_torch_adamw_whatever_the_checkpoint() -> None:
    reference = straight(lambda ps: torch.optim.Adam(ps, lr=2e-2, weight_decay=0.3))
    theirs = resumed(
        lambda ps: torch.optim.Adam(ps, lr=2e-2, weight_decay=0.3),
        lambda ps: torch.optim.AdamW(ps),
    )
    ours = resumed(
        lambda ps: torch.optim.Adam(ps, lr=2e-2, weight_decay=0.3), lambda ps: CPUAdamW(ps)
    )
    assert_within_1e6(ours, theirs)
    assert not torch.allclose(ours[-1], reference[-1])


@pytest.mark.parametrize(
    "ours", [CPUAdam, CPUAdamW, DeepSpeedCPUAdam, CPUAdagrad, DeepSpeedCPUAdagrad]
)
def test_our_groups_carry_every_key_torchs_counterpart_writes(ours: Any) -> None:
    counterpart = getattr(torch.optim, ours.torch_counterpart)
    theirs = counterpart([torch.nn.Parameter(torch.zeros(1))]).state_dict()["param_groups"][0]
    mine = ours([torch.nn.Parameter(torch.zeros(1))]).state_dict()["param_groups"][0]
    assert set(theirs) <= set(mine)


ALL = [CPUAdam, CPUAdamW, DeepSpeedCPUAdam, CPUAdagrad, DeepSpeedCPUAdagrad, CPULion]
ALL += [DeepSpeedCPULion]


def key_sets(state_dict: dict[str, Any]) -> tuple[list[set[str]], list[set[str]]]:
    """The group keys and per-parameter state keys of a state dict."""
    groups = [set(group) for group in state_dict["param_groups"]]
    states = [set(entry) for _, entry in sorted(state_dict["state"].items())]
    return groups, states


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("step_first", [False, True], ids=["fresh", "stepped"])
def test_state_dict_round_trips_without_gaining_or_losing_a_key(cls: Any, step_first: bool) -> None:
    params = fresh_params()
    groups = [{"params": params[:1], "lr": 0.05}, {"params": params[1:]}]
    original = cls(groups)
    if step_first:
        run(original, params, gradients(2))
    checkpoint = original.state_dict()
    restored = cls([{"params": params[:1]}, {"params": params[1:]}])
    restored.load_state_dict(copy.deepcopy(checkpoint))
    assert key_sets(restored.state_dict()) == key_sets(checkpoint)
    run(restored, params, gradients(1))
    after = restored.state_dict()
    assert [set(g) for g in after["param_groups"]] == [set(g) for g in checkpoint["param_groups"]]
    assert after["param_groups"][0]["lr"] == 0.05
    assert set(restored.defaults) == set(original.defaults)


# What cannot be loaded is refused before anything changes.


def snapshot(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A deep copy of everything loading could change."""
    return copy.deepcopy({"state": optimizer.state_dict(), "defaults": optimizer.defaults})


def assert_unchanged(optimizer: torch.optim.Optimizer, before: dict[str, Any]) -> None:
    """``optimizer`` holds exactly what ``before`` recorded."""
    now = snapshot(optimizer)
    assert now["defaults"] == before["defaults"]
    assert now["state"]["param_groups"] == before["state"]["param_groups"]
    assert now["state"]["state"].keys() == before["state"]["state"].keys()
    for key, entry in now["state"]["state"].items():
        for name, value in entry.items():
            assert torch.equal(
                torch.as_tensor(value), torch.as_tensor(before["state"]["state"][key][name])
            )


def stepped(cls: Any, **options: Any) -> tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]:
    """An optimizer of ``cls`` over fresh parameters, after two steps."""
    params = fresh_params()
    optimizer = cls(params, **options)
    run(optimizer, params, gradients(2))
    return optimizer, params


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(torch.optim.Adam, CPUAdam), (torch.optim.AdamW, CPUAdamW), (torch.optim.Adagrad, CPUAdagrad)],
)
def test_a_numeric_step_loads_as_torch_loads_it_and_steps_alike(theirs: Any, ours: Any) -> None:
    # Hand-edited or very old checkpoints hold "step" as a number; torch makes it a tensor.
    source, _ = stepped(theirs, lr=0.1)
    checkpoint = copy.deepcopy(source.state_dict())
    for entry in checkpoint["state"].values():
        entry["step"] = 2
    results = []
    for cls in (theirs, ours):
        optimizer, params = stepped(cls, lr=0.1)
        optimizer.load_state_dict(copy.deepcopy(checkpoint))
        run(optimizer, params, gradients(1))
        steps = [optimizer.state[p]["step"] for p in params]
        assert all(isinstance(step, torch.Tensor) and float(step) == 3 for step in steps), steps
        results.append([p.detach().clone() for p in params])
    for mine, reference in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(torch.optim.Adam, CPUAdam), (torch.optim.AdamW, CPUAdamW), (torch.optim.Adagrad, CPUAdagrad)],
)
@pytest.mark.parametrize("key", ["differentiable", "capturable"])
def test_a_checkpoint_key_we_cannot_honour_is_refused_naming_it(
    theirs: Any, ours: Any, key: str
) -> None:
    source, _ = stepped(theirs, lr=0.1)
    checkpoint = source.state_dict()
    if key not in checkpoint["param_groups"][0]:
        pytest.skip(f"torch's {theirs.__name__} has no {key}")
    checkpoint["param_groups"][0][key] = True
    target, _ = stepped(ours)
    before = snapshot(target)
    with pytest.raises(ValueError, match=f"checkpoint param group 0: {key}=True is not supported"):
        target.load_state_dict(checkpoint)
    assert_unchanged(target, before)


@pytest.mark.parametrize("cls", [CPUAdam, CPUAdagrad, CPULion])
def test_state_of_the_wrong_shape_is_refused_at_load_naming_it(cls: Any) -> None:
    source, _ = stepped(cls)
    checkpoint = source.state_dict()
    reordered = fresh_params()
    reordered[0], reordered[1] = reordered[1], reordered[0]  # (4, 3) where (5,) was saved
    target = cls(reordered)
    run(target, reordered, [[torch.ones_like(p) for p in reordered]])
    before = snapshot(target)
    with pytest.raises(
        CheckpointMismatchError,
        match=r"param group 0, index 0: '\w+' has shape \(5,\) but the parameter has shape "
        r"\(4, 3\)",
    ):
        target.load_state_dict(checkpoint)
    assert_unchanged(target, before)


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (
            lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0])),
            CheckpointMismatchError,
            "2 param groups",
        ),
        (
            lambda sd: sd["param_groups"][0]["params"].pop(),
            CheckpointMismatchError,
            "has 2 parameters",
        ),
        (
            lambda sd: sd["param_groups"][0].update(lr=-1.0),
            ValueError,
            "group 0: Invalid learning rate",
        ),
        (lambda sd: sd["param_groups"][0].update(betas="x"), TypeError, "group 0: invalid betas"),
        (lambda sd: sd["state"][0].update(step="two"), CheckpointMismatchError, "'step' must be"),
        (lambda sd: sd.pop("state"), CheckpointMismatchError, "'state' and 'param_groups'"),
    ],
    ids=["group-count", "group-size", "bad-lr", "bad-betas", "bad-step", "not-a-state-dict"],
)
def test_a_malformed_checkpoint_is_refused_and_nothing_is_loaded(
    edit: Callable[[dict[str, Any]], object], error: type[Exception], message: str
) -> None:
    source, _ = stepped(CPUAdam, lr=0.5, amsgrad=True)
    checkpoint = source.state_dict()
    edit(checkpoint)
    target, _ = stepped(CPUAdam)
    before = snapshot(target)
    with pytest.raises(error, match=message):
        target.load_state_dict(checkpoint)
    assert_unchanged(target, before)


def test_a_torch_key_we_do_not_know_loads_only_at_torchs_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    future = {**hyperparams.torch_group_defaults("Adam"), "future_option": False}
    monkeypatch.setattr(hyperparams, "torch_group_defaults", lambda counterpart: future)
    source, _ = stepped(CPUAdam)
    checkpoint = source.state_dict()
    checkpoint["param_groups"][0]["future_option"] = False
    target, _ = stepped(CPUAdam)
    target.load_state_dict(copy.deepcopy(checkpoint))
    checkpoint["param_groups"][0]["future_option"] = True
    with pytest.raises(ValueError, match="future_option=True is not supported"):
        target.load_state_dict(checkpoint)


# DeepSpeed's formats (hand-built here, so every machine checks them; the real classes below).


def deepspeed_adagrad_checkpoint(sums: list[torch.Tensor], step: int) -> dict[str, Any]:
    """A state dict as deepspeed.ops.adagrad.DeepSpeedCPUAdagrad writes it."""
    group = {"lr": 0.05, "eps": 1e-10, "weight_decay": 0, "amsgrad": False, "params": [0, 1, 2]}
    state = {i: {"step": step, "exp_avg_sq": s} for i, s in enumerate(sums)}
    return {"state": state, "param_groups": [group]}


@pytest.mark.parametrize("cls", [CPUAdagrad, DeepSpeedCPUAdagrad])
def test_deepspeed_adagrad_state_loads_and_continues_as_torch(cls: Any) -> None:
    torch_params = fresh_params()
    theirs = torch.optim.Adagrad(torch_params, lr=0.05)
    run(theirs, torch_params, gradients(3))
    sums = [theirs.state[p]["sum"].clone() for p in torch_params]
    ours_params = [torch.nn.Parameter(p.detach().clone()) for p in torch_params]
    ours = cls(ours_params)
    ours.load_state_dict(deepspeed_adagrad_checkpoint(sums, step=3))
    more = gradients(6)[3:]
    run(theirs, torch_params, more)
    run(ours, ours_params, more)
    assert_within_1e6([p.detach() for p in ours_params], [p.detach() for p in torch_params])
    assert int(ours.state[ours_params[0]]["step"]) == 6


def test_our_deepspeed_adagrad_writes_deepspeeds_state_key_and_reads_torchs() -> None:
    optimizer, params = stepped(DeepSpeedCPUAdagrad)
    assert set(optimizer.state[params[0]]) == {"step", "exp_avg_sq"}
    torch_source, _ = stepped(torch.optim.Adagrad)
    restored = DeepSpeedCPUAdagrad(fresh_params())
    restored.load_state_dict(torch_source.state_dict())
    assert "exp_avg_sq" in restored.state_dict()["state"][0]


def test_deepspeed_adam_state_keeps_the_optimizers_adamw_mode() -> None:
    params = fresh_params()
    checkpoint = {
        "state": {
            i: {"step": 2, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            for i, p in enumerate(params)
        },
        "param_groups": [
            {
                "lr": 0.01,
                "betas": (0.9, 0.999),
                "eps": 1e-8,
                "weight_decay": 0.1,
                "bias_correction": True,
                "amsgrad": False,
                "params": [0, 1, 2],
            }
        ],
    }
    for adamw_mode in (True, False):
        optimizer = DeepSpeedCPUAdam(params, adamw_mode=adamw_mode)
        optimizer.load_state_dict(copy.deepcopy(checkpoint))
        group = optimizer.param_groups[0]
        assert group["adamw_mode"] is adamw_mode and group["weight_decay"] == 0.1


def deepspeed_classes() -> dict[str, Any]:
    """DeepSpeed's CPU optimizers, skipping where DeepSpeed or its ops are not available."""
    pytest.importorskip("deepspeed")
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad as TheirAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam as TheirAdam

    try:
        TheirAdam([torch.nn.Parameter(torch.zeros(1))])
        TheirAdagrad([torch.nn.Parameter(torch.zeros(1))])
    except Exception as error:  # DeepSpeed's op build needs its own toolchain
        pytest.skip(f"DeepSpeed's CPU ops do not build here: {error}")
    return {"DeepSpeedCPUAdam": TheirAdam, "DeepSpeedCPUAdagrad": TheirAdagrad}


@pytest.mark.extras
@pytest.mark.parametrize(
    ("ours", "options"),
    [
        (DeepSpeedCPUAdam, {}),
        (DeepSpeedCPUAdam, {"weight_decay": 0.1}),
        (DeepSpeedCPUAdam, {"weight_decay": 0.1, "adamw_mode": False}),
        (DeepSpeedCPUAdagrad, {}),
    ],
    ids=str,
)
def test_checkpoints_move_between_deepspeeds_classes_and_ours_both_ways(
    ours: Any, options: dict[str, Any]
) -> None:
    theirs = deepspeed_classes()[ours.__name__]
    reference = straight(lambda ps: theirs(ps, lr=2e-2, **options))
    constructor_only = {k: v for k, v in options.items() if k == "adamw_mode"}
    into_ours = resumed(
        lambda ps: theirs(ps, lr=2e-2, **options), lambda ps: ours(ps, **constructor_only)
    )
    into_theirs = resumed(
        lambda ps: ours(ps, lr=2e-2, **options), lambda ps: theirs(ps, **constructor_only)
    )
    # DeepSpeed's kernel rounds differently from ours (a few ulps after 10 steps).
    assert_within_1e6(into_ours, reference, rtol=1e-6)
    assert_within_1e6(into_theirs, reference, rtol=1e-6)


# Property: any edit of a checkpoint loads and steps, or is refused with nothing loaded.

EDITS = st.one_of(
    st.tuples(
        st.just("state"),
        st.sampled_from(["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]),
        st.one_of(
            st.lists(st.integers(0, 6), min_size=0, max_size=3).map(
                lambda shape: torch.ones(shape)
            ),
            st.sampled_from([None, "x", 3, 2.5, True]),
        ),
    ),
    st.tuples(
        st.just("group"),
        st.sampled_from(
            [
                "lr",
                "eps",
                "betas",
                "amsgrad",
                "maximize",
                "weight_decay",
                "fused",
                "differentiable",
                "adamw_mode",
                "decoupled_weight_decay",
            ]
        ),
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([None, "x", True, False, (0.9, 0.99), (1.0, 0.5), [0.5], -1]),
        ),
    ),
)


@settings(max_examples=40, deadline=None)
@given(edits=st.lists(EDITS, min_size=1, max_size=3), index=st.integers(0, 2))
def test_an_edited_checkpoint_loads_and_steps_or_is_refused_untouched(
    edits: list[tuple[str, str, Any]], index: int
) -> None:
    source, _ = stepped(CPUAdam, amsgrad=True)
    checkpoint = copy.deepcopy(source.state_dict())
    for where, key, value in edits:
        if where == "state":
            checkpoint["state"][index][key] = value
        else:
            checkpoint["param_groups"][0][key] = value
    target, params = stepped(CPUAdam)
    before = snapshot(target)
    try:
        target.load_state_dict(checkpoint)
    except (ValueError, TypeError) as error:
        assert "checkpoint" in str(error)
        assert_unchanged(target, before)
        return
    run(target, params, gradients(1))
    for param in params:
        state = target.state[param]
        assert isinstance(state["step"], torch.Tensor) and float(state["step"]) >= 1
        assert all(state[key].shape == param.shape for key in ("exp_avg", "exp_avg_sq"))


def test_checkpoint_imports_nothing_above_it() -> None:
    """Every import of ops/checkpoint.py (TYPE_CHECKING and function level too) points down.

    host_optimizer imports checkpoint; checkpoint describes what it reads of an optimizer with
    a protocol, so the two never import each other.
    """
    import ast
    import inspect

    from anyaccel.ops import checkpoint

    tree = ast.parse(inspect.getsource(checkpoint))
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    ours = {name for name in imported if name and name.startswith("anyaccel")}
    assert ours <= {"anyaccel.ops.hyperparams", "anyaccel.errors"}, ours
