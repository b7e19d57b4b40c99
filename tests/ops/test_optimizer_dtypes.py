"""bf16/fp16 parameters, low-precision states and non-contiguous parameters, stepped in place.

The checks follow DeepSpeed's own CPU optimizer tests (tolerances included): where DeepSpeed is
importable they also run against its classes; everywhere they run against torch's optimizers
stepping an fp32 copy that is rounded back each step, as the kernels do.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch

from anyaccel.ops.adagrad import CPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW
from anyaccel.ops.cpu.cpu_adam import CPUAdamBuilder
from anyaccel.ops.lion import CPULion

from .optim_reference import DEEPSPEED_CLASSES, PAIRS, LowPrecisionReference

LOW = [torch.bfloat16, torch.float16]
SIZES = [22, 64, 1024, 70_001]  # DeepSpeed's sizes, plus one past the threading threshold


def norm_close(ours: torch.Tensor, theirs: torch.Tensor, relative: float) -> None:
    """DeepSpeed's check: the norms agree within ``relative`` of the reference's norm."""
    tolerance = theirs.float().norm().item() * relative
    assert abs(ours.float().norm().item() - theirs.float().norm().item()) <= tolerance


def step_both(
    ours: torch.optim.Optimizer,
    ours_params: list[torch.nn.Parameter],
    reference: Callable[[], None],
    reference_params: list[torch.Tensor],
    steps: int = 10,
) -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p, q in zip(ours_params, reference_params, strict=True):
            grad = torch.randn(p.shape, generator=generator).to(p.dtype)
            p.grad, q.grad = grad, grad.clone()
        ours.step()
        reference()


@pytest.mark.parametrize("state_precision", ["fp32", "low"])
@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_low_precision_params_match_the_rounded_reference(
    name: str, dtype: torch.dtype, state_precision: str
) -> None:
    if state_precision == "low" and name not in DEEPSPEED_CLASSES:
        pytest.skip("fp32_optimizer_states is a DeepSpeed-signature argument")
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(n).to(dtype)) for n in SIZES]
    theirs = [p.detach().clone() for p in ours]
    if state_precision == "low":
        optimizer = DEEPSPEED_CLASSES[name](ours, fp32_optimizer_states=False)
        state_dtype = dtype
    else:
        optimizer = PAIRS[name][0](ours)
        state_dtype = torch.float32
    reference = LowPrecisionReference(theirs, PAIRS[name][1], state_dtype)
    step_both(optimizer, ours, reference.step, theirs)
    for p, q in zip(ours, theirs, strict=True):
        assert p.dtype == dtype
        # At most one rounding step apart in the parameter's precision.
        torch.testing.assert_close(p.float(), q.float(), rtol=1e-2, atol=1e-3)
        norm_close(p, q, 1e-2)
        for key, value in optimizer.state[p].items():
            if key != "step":
                assert value.dtype == state_dtype, key


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
def test_low_precision_states_track_fp32_states(dtype: torch.dtype) -> None:
    """DeepSpeed's test_bf16_optimizer_states_match_fp32: norms within 5 % after 10 steps."""
    from anyaccel.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(0)
    base = torch.randn(1024).to(dtype)
    full, low = torch.nn.Parameter(base.clone()), torch.nn.Parameter(base.clone())
    opt_full = DeepSpeedCPUAdam([full], fp32_optimizer_states=True)
    opt_low = DeepSpeedCPUAdam([low], fp32_optimizer_states=False)
    for _ in range(10):
        grad = torch.randn(1024).to(dtype)
        full.grad, low.grad = grad.clone(), grad.clone()
        opt_full.step()
        opt_low.step()
    assert opt_full.state[full]["exp_avg"].dtype == torch.float32
    assert opt_low.state[low]["exp_avg"].dtype == dtype
    norm_close(low, full, 5e-2)


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
def test_copies_and_errors_work_for_low_precision_params(dtype: torch.dtype) -> None:
    from anyaccel.ops.adam import CPUAdam

    param = torch.nn.Parameter(torch.randn(100).to(dtype))
    param.grad = torch.randn(100).to(dtype)
    optimizer = CPUAdam([param])
    copy = torch.empty(100, dtype=torch.float16)
    optimizer.step(fp16_param_groups=[copy])
    assert torch.equal(copy, param.detach().to(torch.float16))
    optimizer.state[param]["exp_avg"] = torch.zeros(99)
    before = param.detach().clone()
    with pytest.raises(ValueError, match=r"state 'exp_avg' has shape \(99,\)"):
        optimizer.step()
    assert torch.equal(before, param.detach())
    optimizer.state[param]["exp_avg"] = torch.zeros(100, dtype=dtype)
    with pytest.raises(TypeError, match=r"expected a dense torch\.float32"):
        optimizer.step()


def non_contiguous_params() -> dict[str, tuple[torch.Tensor, torch.nn.Parameter]]:
    """Each non-contiguous kind: (the storage owner to check in place, the parameter)."""
    transposed = torch.nn.Parameter(torch.randn(6, 10).t())
    base = torch.randn(8, 9)
    sliced = torch.nn.Parameter(base[1:7, ::2])
    channels_last = torch.nn.Parameter(
        torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    )
    return {
        "transposed": (transposed, transposed),
        "slice": (base, sliced),
        "channels-last": (channels_last, channels_last),
    }


@pytest.mark.parametrize("kind", ["transposed", "slice", "channels-last"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_non_contiguous_params_are_updated_in_place_like_torch(name: str, kind: str) -> None:
    torch.manual_seed(0)
    owner, param = non_contiguous_params()[kind]
    reference = torch.nn.Parameter(param.detach().clone())
    address, strides = param.data_ptr(), param.stride()
    before_owner = owner.detach().clone()
    optimizer, torch_optimizer = PAIRS[name][0]([param]), PAIRS[name][1]([reference])
    step_both(optimizer, [param], torch_optimizer.step, [reference], steps=5)
    assert param.data_ptr() == address and param.stride() == strides
    torch.testing.assert_close(param.detach(), reference.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(owner.detach(), before_owner)
    if kind == "slice":  # the rest of the storage is untouched
        mask = torch.ones_like(owner, dtype=torch.bool)
        mask[1:7, ::2] = False
        assert torch.equal(owner.detach()[mask], before_owner[mask])


def test_a_tied_parameter_is_stepped_once_like_torch() -> None:
    from anyaccel.ops.adam import CPUAdamW

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
        net[1].weight = net[0].weight  # tied input and output embeddings
        return net

    ours, theirs = model(), model()
    opt_ours = CPUAdamW(ours.parameters(), lr=1e-2)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
    tokens = torch.tensor([1, 2, 3, 4])
    for _ in range(3):
        for net, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            net(tokens).square().mean().backward()
            opt.step()
    torch.testing.assert_close(ours[0].weight, theirs[0].weight, rtol=1e-5, atol=1e-6)


HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


@pytest.mark.extras
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed")
@pytest.mark.parametrize("fp32_states", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, *LOW], ids=["fp32", "bf16", "fp16"])
def test_same_results_as_deepspeed_adam(dtype: torch.dtype, fp32_states: bool) -> None:
    from deepspeed.ops.adam import DeepSpeedCPUAdam as TheirAdam

    from anyaccel.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(n).to(dtype)) for n in SIZES]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = DeepSpeedCPUAdam(ours, fp32_optimizer_states=fp32_states)
    their_opt = TheirAdam(theirs, fp32_optimizer_states=fp32_states)
    step_both(opt, ours, their_opt.step, theirs)
    for p, q in zip(ours, theirs, strict=True):
        norm_close(p, q, 1e-2)
        torch.testing.assert_close(p.float(), q.float(), rtol=1e-2, atol=1e-2)


ONE_PASS_CASES: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
    "Adam": lambda ps: CPUAdam(ps, lr=1e-2),
    "Adam-amsgrad": lambda ps: CPUAdam(ps, lr=1e-2, amsgrad=True),
    "Adam-L2": lambda ps: CPUAdam(ps, lr=1e-2, weight_decay=0.1),
    "AdamW": lambda ps: CPUAdamW(ps, lr=1e-2, weight_decay=0.1),
    "AdamW-amsgrad-maximize": lambda ps: CPUAdamW(
        ps, lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True
    ),
    "Adagrad": lambda ps: CPUAdagrad(ps, lr=1e-2),
    "Adagrad-decay": lambda ps: CPUAdagrad(ps, lr=1e-2, weight_decay=0.1, lr_decay=0.01),
    "Lion": lambda ps: CPULion(ps, lr=1e-2),
    "Lion-decay": lambda ps: CPULion(ps, lr=1e-2, weight_decay=0.1, maximize=True),
}


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(ONE_PASS_CASES))
def test_low_precision_one_pass_matches_the_chunked_pass_bit_for_bit(
    name: str, dtype: torch.dtype
) -> None:
    """bf16/fp16 params and grads with fp32 states take a one-pass loop; with a copy, chunks."""
    results = []
    for with_copy in (False, True):
        torch.manual_seed(0)
        # 5: a tail only; 70_001: vectors, threads and a tail; specials convert like torch.
        params = [torch.nn.Parameter(torch.randn(n).to(dtype)) for n in (5, 70_001)]
        with torch.no_grad():
            params[1][:6] = torch.tensor([0.0, -0.0, 1e-7, 6e4, float("inf"), float("nan")])
        optimizer = ONE_PASS_CASES[name](params)
        copies = [torch.empty_like(p, dtype=torch.bfloat16) for p in params]
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator).to(dtype)
            optimizer.step(fp16_param_groups=[copies] if with_copy else None)  # type: ignore[call-arg]
        results.append(
            [p.detach().view(torch.int16).clone() for p in params]
            + [
                v.view(torch.int32).clone()
                for p in params
                for k, v in optimizer.state[p].items()
                if k != "step"
            ]
        )
    one_pass, chunked = results
    assert len(one_pass) == len(chunked)
    for left, right in zip(one_pass, chunked, strict=True):
        assert torch.equal(left, right)


def test_fp16_takes_the_one_pass_loop_where_the_simd_level_converts_in_registers() -> None:
    """F16C (every avx2/avx512 build) converts fp16 in registers; other levels use chunks."""
    kernel = CPUAdamBuilder().load()
    expected = ["bfloat16", "float16"] if kernel.simd_level() in ("avx2", "avx512") else None
    dtypes = list(kernel.one_pass_dtypes())
    assert "bfloat16" in dtypes
    if expected is not None:
        assert dtypes == expected
