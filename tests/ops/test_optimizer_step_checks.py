"""CPU optimizers check a whole step before writing: bad input is a clear error, nothing changes."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import torch

from .optim_reference import PAIRS

RunPython = Callable[..., subprocess.CompletedProcess[str]]
NAMES = list(PAIRS)


def frozen(value: Any) -> Any:
    """A deep copy of ``value`` that later writes cannot reach (meta tensors kept by shape)."""
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            return ("meta", value.dtype, tuple(value.shape))
        return value.to_dense().clone() if value.is_sparse else value.detach().clone()
    if isinstance(value, dict):
        return {key: frozen(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(frozen(item) for item in value)
    return copy.deepcopy(value)


def snapshot(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> Any:
    """Everything a step could change: parameters, gradients, every state entry, the groups."""
    return frozen(
        (
            list(params),
            [p.grad for p in params],
            {id(key): value for key, value in optimizer.state.items()},
            [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
        )
    )


def assert_same(before: Any, after: Any) -> None:
    """Bit-identical snapshots (NaN-aware, dtype-exact)."""
    assert type(before) is type(after)
    if isinstance(before, torch.Tensor):
        assert before.dtype == after.dtype and before.shape == after.shape
        left, right = before.contiguous().view(-1), after.contiguous().view(-1)
        assert torch.equal(left.view(torch.uint8), right.view(torch.uint8))
    elif isinstance(before, dict):
        assert before.keys() == after.keys()
        for key in before:
            assert_same(before[key], after[key])
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after)
        for left, right in zip(before, after, strict=True):
            assert_same(left, right)
    else:
        assert before == after


def two_groups(name: str) -> tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]:
    """An optimizer over two groups (3 and 2 params) that has taken one step."""
    torch.manual_seed(0)
    shapes = [(4, 3), (5,), (2, 2), (7,), (3,)]
    params = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
    optimizer = PAIRS[name][0](params)
    optimizer.param_groups[0]["params"] = params[:3]
    optimizer.add_param_group({"params": params[3:]})
    for param in params:
        param.grad = torch.randn_like(param)
    optimizer.step()
    for param in params:
        param.grad = torch.randn_like(param)
    return optimizer, params


def first_state_key(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> str:
    return next(k for k, v in optimizer.state[param].items() if k != "step" and v.dim() > 0)


def provoke(kind: str, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> dict:
    """Break the last parameter (group 1, index 1) in one way; returns step() kwargs."""
    target = params[4]
    state = optimizer.state[target]
    key = first_state_key(optimizer, target)
    if kind == "state-too-small":
        state[key] = torch.zeros(2)
    elif kind == "state-too-large":
        state[key] = torch.zeros(1000)
    elif kind == "state-same-numel-other-shape":
        state[key] = torch.zeros(3, 1)
    elif kind == "state-float64":
        state[key] = state[key].double()
    elif kind == "state-meta-device":
        state[key] = torch.empty(3, device="meta")
    elif kind == "state-not-a-tensor":
        state[key] = [0.0, 0.0, 0.0]
    elif kind == "step-not-a-number":
        state["step"] = "three"
    elif kind == "state-not-a-dict":
        optimizer.state[target] = 5  # type: ignore[assignment]
    elif kind == "sparse-grad":
        target.grad = torch.randn(3).to_sparse()
    elif kind == "copy-wrong-numel":
        copies = [[None] * 3, [None, torch.zeros(4, dtype=torch.bfloat16)]]
        return {"fp16_param_groups": copies}
    elif kind == "copy-float32":
        return {"fp16_param_groups": [[None] * 3, [None, torch.zeros(3)]]}
    elif kind == "copy-not-contiguous":
        copies = [[None] * 3, [None, torch.zeros(6, dtype=torch.float16)[::2]]]
        return {"fp16_param_groups": copies}
    elif kind == "param-float64":
        target.data = target.data.double()
        target.grad = torch.randn_like(target)
    elif kind == "param-expanded":  # a stride-0 view: one element written three times
        target.data = torch.randn(1).expand(3)
    else:
        raise AssertionError(kind)
    return {}


KINDS = {
    "state-too-small": (ValueError, r"group 1 param 1 state '\w+' has shape \(2,\).*\(3,\)"),
    "state-too-large": (ValueError, r"group 1 param 1 state '\w+' has shape \(1000,\).*\(3,\)"),
    "state-same-numel-other-shape": (ValueError, r"group 1 param 1 .*\(3, 1\)"),
    "state-float64": (TypeError, r"group 1 param 1 state '\w+' is torch.float64"),
    "state-meta-device": (TypeError, r"group 1 param 1 state '\w+' .* on meta"),
    "state-not-a-tensor": (TypeError, r"group 1 param 1 state '\w+' is a list"),
    "step-not-a-number": (TypeError, r"group 1 param 1 state 'step' is a str"),
    "state-not-a-dict": (TypeError, r"group 1 param 1 has a state of type int"),
    "sparse-grad": (TypeError, r"group 1 param 1 has a sparse gradient"),
    "copy-wrong-numel": (ValueError, r"group 1 param 1 copy of shape \(4,\).*\(3,\)"),
    "copy-float32": (TypeError, r"group 1 param 1 has a copy of torch.float32"),
    "copy-not-contiguous": (ValueError, r"group 1 param 1 copy .*not contiguous"),
    "param-float64": (TypeError, r"group 1 param 1 is torch.float64"),
    "param-expanded": (
        RuntimeError,
        r"group 1 param 1 of shape \(3,\) and strides \(0,\) is an expanded view .*"
        r"more than one element of the written-to tensor refers to a single memory location",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", NAMES)
def test_a_bad_last_parameter_is_refused_before_any_write(name: str, kind: str) -> None:
    if kind == "sparse-grad" and "Adagrad" in name:
        pytest.skip("Adagrad steps sparse gradients as torch.optim.Adagrad does")
    optimizer, params = two_groups(name)
    kwargs = provoke(kind, optimizer, params)
    before = snapshot(optimizer, params)
    error, message = KINDS[kind]
    with pytest.raises(error, match=message):
        optimizer.step(**kwargs)
    assert_same(before, snapshot(optimizer, params))


@pytest.mark.parametrize("name", [name for name in NAMES if "Adagrad" not in name])
def test_a_first_step_that_fails_creates_no_state(name: str) -> None:
    params = [torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(3))]
    optimizer = PAIRS[name][0](params)
    params[0].grad = torch.randn(4)
    params[1].grad = torch.randn(3).to_sparse()
    with pytest.raises(TypeError, match="group 0 param 1 has a sparse gradient"):
        optimizer.step()
    assert len(optimizer.state) == 0


@pytest.mark.parametrize("name", NAMES)
def test_an_expanded_parameter_beside_a_normal_one_is_refused_before_any_write(
    name: str,
) -> None:
    """torch refuses a stride-0 parameter too (RuntimeError); ours does so before any write."""
    normal = torch.nn.Parameter(torch.randn(4))
    expanded = torch.nn.Parameter(torch.randn(1).expand(4))
    params = [normal, expanded]
    for param in params:
        param.grad = torch.randn(4)
    optimizer = PAIRS[name][0](params)
    before = snapshot(optimizer, params)
    with pytest.raises(RuntimeError, match=r"group 0 param 1 .* expanded view .*clone\(\)"):
        optimizer.step()
    assert_same(before, snapshot(optimizer, params))
    assert len(optimizer.state) == 0
    with pytest.raises(RuntimeError, match="refers to a single memory location"):
        PAIRS[name][1](params).step()  # torch's own verdict on the same parameters


WRONG_SIZE_STATE = """
    import torch
    from anyaccel.ops.adam import CPUAdam
    from anyaccel.ops.adagrad import CPUAdagrad
    from anyaccel.ops.lion import CPULion
    for cls, key in ((CPUAdam, "exp_avg_sq"), (CPUAdagrad, "sum"), (CPULion, "exp_avg")):
        for size in (10, 10_000_000):  # a checkpoint's state for a smaller or a larger tensor
            param = torch.nn.Parameter(torch.randn(100_000))
            param.grad = torch.randn(100_000)
            optimizer = cls([param])
            optimizer.step()
            optimizer.state[param][key] = torch.zeros(size)
            before = param.detach().clone()
            try:
                optimizer.step()
            except ValueError as exc:
                assert "has shape ({},)".format(size) in str(exc), exc
            else:
                raise SystemExit("no error for a state of size {}".format(size))
            assert torch.equal(before, param.detach())
    print("ok")
"""


def test_wrong_size_states_are_errors_not_heap_corruption(run_python: RunPython) -> None:
    result = run_python(WRONG_SIZE_STATE)
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    assert result.stdout.strip() == "ok"


FUZZ = """
    import copy, sys, torch
    from hypothesis import HealthCheck, given, settings, strategies as st
    sys.path.insert(0, {tests!r})
    from ops.optim_reference import PAIRS, LowPrecisionReference
    from ops.test_optimizer_step_checks import assert_same, snapshot

    DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32]
    counts = {{"tried": 0, "stepped": 0, "checked against the reference": 0, "clear errors": 0}}

    def state_value(draw, shape):
        kind = draw(st.sampled_from(["absent", "right", "other-shape", "scalar", "list", "none"]))
        if kind == "absent":
            return None
        if kind == "list":
            return [0.0]
        if kind == "none":
            return "none"
        size = shape if kind == "right" else draw(st.sampled_from([(1,), (2, 3), (0,), (64, 2)]))
        if kind == "scalar":
            size = ()
        return torch.zeros(size, dtype=draw(st.sampled_from(DTYPES)))

    @st.composite
    def cases(draw):
        name = draw(st.sampled_from(sorted(PAIRS)))
        shape = st.sampled_from([(3,), (2, 3), (1,), (0,), (4, 1, 2)])
        shapes = draw(st.lists(shape, min_size=1, max_size=3))
        dtypes = [draw(st.sampled_from(DTYPES[:3])) for _ in shapes]
        states = []
        for shape in shapes:
            entry = {{}}
            for key in ("exp_avg", "exp_avg_sq", "sum", "max_exp_avg_sq"):
                value = state_value(draw, shape)
                if value is not None:
                    entry[key] = None if value == "none" else value
            step = draw(st.sampled_from([None, 1, 2.0, "tensor", "bad"]))
            if step is not None:
                entry["step"] = torch.tensor(3.0) if step == "tensor" else step
            states.append(entry if draw(st.booleans()) else None)
        copies = draw(st.sampled_from([None, "right", "wrong"]))
        return name, shapes, dtypes, states, copies

    @settings(max_examples={examples}, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases())
    def run(case):
        name, shapes, dtypes, states, copies = case
        counts["tried"] += 1
        params = [torch.nn.Parameter(torch.randn(s).to(d)) for s, d in zip(shapes, dtypes)]
        for p in params:
            p.grad = torch.randn(p.shape).to(p.dtype)
        optimizer = PAIRS[name][0](params)
        for p, entry in zip(params, states):
            if entry is not None:
                optimizer.state[p] = dict(entry)
        kwargs = {{}}
        if copies is not None:
            kwargs["fp16_param_groups"] = [
                torch.empty(p.numel() + (copies == "wrong"), dtype=torch.bfloat16) for p in params
            ]
        before = snapshot(optimizer, params)
        try:
            optimizer.step(**kwargs)
        except (ValueError, TypeError) as exc:
            assert "group 0 param" in str(exc) or "copies" in str(exc), exc
            assert_same(before, snapshot(optimizer, params))
            counts["clear errors"] += 1
            return
        counts["stepped"] += 1
        for p, old in zip(params, before[0]):
            assert p.dtype == old.dtype and p.shape == old.shape
        if all(entry is None for entry in states):  # fresh state: the reference's first step
            counts["checked against the reference"] += 1
            start = [old.clone() for old in before[0]]
            for q, p in zip(start, params):
                q.grad = p.grad.clone()
            LowPrecisionReference(start, PAIRS[name][1], torch.float32).step()
            for p, q in zip(params, start):
                torch.testing.assert_close(p.float(), q.float(), rtol=1e-2, atol=1e-3)

    run()
    print(" ".join("{{}} {{}}".format(k, v) for k, v in counts.items()))
"""


def test_random_states_shapes_and_dtypes_step_or_fail_cleanly(run_python: RunPython) -> None:
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1])
    result = run_python(FUZZ.format(tests=tests, examples=300))
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    assert result.stdout.strip().startswith("tried 300")
