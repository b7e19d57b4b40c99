"""``FusedAdamBuilder`` on a real toolkit and GPU: built, cached, reloaded, and equal to torch.

The reference is ``torch.optim.Adam``/``AdamW(fused=True)`` on the same device, fed the same
gradients. Tolerances are in ulps of the compared dtype (see ``ulps.py``): parameters (kept
away from zero) at no less than 1/1000 of the tensor's largest magnitude, the moments (sums
that can cancel to near zero) at the scale of the tensor's largest moment:

* fp32 parameters: parameters within 8 ulps, ``exp_avg``/``exp_avg_sq`` within 8 ulps, after
  3 steps (the kernels differ in rounding order: a reciprocal multiply against a divide, a
  decay factor against a subtraction);
* bf16 and fp16 parameters: parameters within 2 ulps of their dtype; torch keeps the moments
  in the parameter dtype (rounding them every step) and we keep fp32 moments, so ours,
  rounded to that dtype, are within 4 ulps of torch's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from anyaccel.ops.builder import is_built
from anyaccel.ops.capabilities import capabilities
from anyaccel.ops.cuda import FusedAdamBuilder

from .harness import GPU, explain, run_python
from .models import SHAPE_SETS
from .ulps import assert_within_ulps

pytestmark = GPU

STEPS = 3
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PARAM_ULPS = {torch.float32: 8, torch.bfloat16: 2, torch.float16: 2}
STATE_ULPS = {torch.float32: 8, torch.bfloat16: 4, torch.float16: 4}


@pytest.fixture(scope="module")
def extensions_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cache for this module (``ANYACCEL_TEST_EXTENSIONS_DIR`` to keep it between runs)."""
    configured = os.environ.get("ANYACCEL_TEST_EXTENSIONS_DIR")
    root = Path(configured) if configured else tmp_path_factory.mktemp("torch_extensions")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(root))
        patch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
        yield root


@pytest.fixture(scope="module")
def fused_adam(extensions_dir: Path) -> ModuleType:
    """The op, built for this GPU's architecture on first use."""
    return FusedAdamBuilder().load()


def present_arch() -> str:
    return "{}{}".format(*torch.cuda.get_device_capability(0))


def test_builds_for_the_present_architecture_and_says_so(
    fused_adam: ModuleType, extensions_dir: Path
) -> None:
    plan = FusedAdamBuilder().plan()
    arch = present_arch()
    assert f"-gencode=arch=compute_{arch},code=sm_{arch}" in plan.cuda_cflags
    assert is_built(plan) and Path(plan.library_path).is_file()
    assert Path(plan.build_directory).parent == extensions_dir
    rows = {row.builder: row for row in capabilities("cuda")}
    assert rows["FusedAdamBuilder"].buildable, rows["FusedAdamBuilder"].reason
    assert callable(fused_adam.fused_adam_step)


def test_a_second_process_reloads_the_cached_build(
    fused_adam: ModuleType, extensions_dir: Path
) -> None:
    library = Path(FusedAdamBuilder().plan().library_path)
    built_at = library.stat().st_mtime_ns
    done = run_python(
        """
        import logging, torch
        logging.basicConfig(level=logging.INFO)
        from anyaccel.ops.cuda import FusedAdamBuilder
        op = FusedAdamBuilder().load()
        p = torch.ones(8, device="cuda"); g = torch.ones(8, device="cuda")
        m = torch.zeros(8, device="cuda"); v = torch.zeros(8, device="cuda")
        op.fused_adam_step(p, g, m, v, 1, 0.1, 0.9, 0.999, 1e-8, 0.0, False, True)
        print(round(p[0].item(), 4))
        """,
        TORCH_EXTENSIONS_DIR=str(extensions_dir),
        TORCH_CUDA_ARCH_LIST=None,
    )
    assert done.returncode == 0, explain(done)
    assert "building op" not in done.stderr, done.stderr
    assert done.stdout.split()[-1] == "0.9"
    assert library.stat().st_mtime_ns == built_at


def test_torch_cuda_arch_list_chooses_what_is_built(tmp_path: Path) -> None:
    major, _minor = torch.cuda.get_device_capability(0)
    # PTX of an older arch runs on this GPU through the driver's JIT; SASS alone would not
    wanted = "8.0+PTX" if major >= 8 else f"{major}.{_minor}+PTX"
    number = wanted.removesuffix("+PTX").replace(".", "")
    done = run_python(
        """
        import torch
        from anyaccel.ops.cuda import FusedAdamBuilder
        builder = FusedAdamBuilder()
        print(" ".join(builder.plan().cuda_cflags))
        op = builder.load()
        p = torch.ones(8, device="cuda"); g = torch.ones(8, device="cuda")
        m = torch.zeros(8, device="cuda"); v = torch.zeros(8, device="cuda")
        op.fused_adam_step(p, g, m, v, 1, 0.1, 0.9, 0.999, 1e-8, 0.0, False, True)
        print("result", round(p[0].item(), 4))
        """,
        timeout=900,
        TORCH_EXTENSIONS_DIR=str(tmp_path),
        TORCH_CUDA_ARCH_LIST=wanted,
    )
    assert done.returncode == 0, explain(done)
    flags = done.stdout.splitlines()[0].split()
    assert f"-gencode=arch=compute_{number},code=sm_{number}" in flags
    assert f"-gencode=arch=compute_{number},code=compute_{number}" in flags
    assert done.stdout.split()[-2:] == ["result", "0.9"]


def make_parameters(
    shapes: list[tuple[int, ...]], dtype: torch.dtype, seed: int
) -> list[torch.Tensor]:
    """Parameters of magnitude 0.5 to 1.5 (either sign), so 3 steps never cross zero."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    params = []
    for shape in shapes:
        magnitude = 0.5 + torch.rand(shape, device="cuda", generator=generator)
        sign = torch.randint(0, 2, shape, device="cuda", generator=generator) * 2 - 1
        params.append((magnitude * sign).to(dtype))
    return params


def make_gradients(params: list[torch.Tensor], step: int, seed: int) -> list[torch.Tensor]:
    """Gradients for ``step``, the same for both optimizers, of magnitude 0.5 to 1.5.

    Not smaller: torch keeps fp16 parameters' moments in fp16, where ``(1 - beta2) * g**2``
    of a gradient below ~0.01 underflows to zero and torch's step becomes ``lr * m / eps``;
    the comparison is of the kernels, not of that underflow.
    """
    generator = torch.Generator(device="cuda").manual_seed(seed * 1000 + step)
    grads = []
    for p in params:
        magnitude = 0.5 + torch.rand(p.shape, device="cuda", generator=generator)
        sign = torch.randint(0, 2, p.shape, device="cuda", generator=generator) * 2 - 1
        grads.append((magnitude * sign).to(p.dtype))
    return grads


@pytest.mark.parametrize("decoupled", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("shape_set", list(SHAPE_SETS))
def test_steps_equal_torch_fused_adam(
    fused_adam: ModuleType, shape_set: str, dtype_name: str, decoupled: bool
) -> None:
    dtype = DTYPES[dtype_name]
    if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    weight_decay = 0.01
    shapes = SHAPE_SETS[shape_set]
    ours = make_parameters(shapes, dtype, seed=1)
    theirs = [p.clone().requires_grad_(True) for p in ours]
    exp_avg = [torch.zeros(p.shape, device="cuda") for p in ours]
    exp_avg_sq = [torch.zeros(p.shape, device="cuda") for p in ours]
    torch_class = torch.optim.AdamW if decoupled else torch.optim.Adam
    reference = torch_class(
        theirs, lr=LR, betas=BETAS, eps=EPS, weight_decay=weight_decay, fused=True
    )
    for step in range(1, STEPS + 1):
        grads = make_gradients(ours, step, seed=1)
        for p, g, m, v in zip(ours, grads, exp_avg, exp_avg_sq, strict=True):
            fused_adam.fused_adam_step(
                p, g, m, v, step, LR, *BETAS, EPS, weight_decay, decoupled, True
            )
        for p, g in zip(theirs, grads, strict=True):
            p.grad = g
        reference.step()
    torch.cuda.synchronize()
    for index, (p, q) in enumerate(zip(ours, theirs, strict=True)):
        where = f"{shape_set} tensor {index} {tuple(p.shape)}"
        floor = 1e-3 * float(q.detach().abs().max())
        assert_within_ulps(p, q.detach(), PARAM_ULPS[dtype], f"param of {where}", floor)
        state = reference.state[q]
        for name, mine in (("exp_avg", exp_avg[index]), ("exp_avg_sq", exp_avg_sq[index])):
            expected = state[name]
            floor = float(expected.abs().max())  # moments cancel: judge them at their scale
            assert_within_ulps(
                mine.to(expected.dtype), expected, STATE_ULPS[dtype], f"{name} of {where}", floor
            )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("p, g.cpu(), m, v", "grad is on cpu but param is on cuda:0"),
        ("p, g, m[:4], v", "exp_avg must be contiguous with param's 4096 elements, got 4"),
        ("p, g, m, v.cpu()", "exp_avg_sq is on cpu"),
        ("p.cpu(), g, m, v", "param must be a contiguous CUDA tensor"),
        ("p, g.half(), m, v", "grad's dtype Half differs from param's Float"),
        ("p, g, m.half(), v.half()", "optimizer states must be contiguous fp32 tensors"),
    ],
)
def test_mismatched_tensors_are_refused_before_the_kernel_touches_them(
    fused_adam: ModuleType, extensions_dir: Path, bad: str, message: str
) -> None:
    """Before the fix a CPU or short tensor reached the kernel: out-of-bounds device access."""
    done = run_python(
        f"""
        import torch
        from anyaccel.ops.cuda import FusedAdamBuilder
        op = FusedAdamBuilder().load()
        p, g = torch.ones(4096, device="cuda"), torch.ones(4096, device="cuda")
        m, v = torch.zeros(4096, device="cuda"), torch.zeros(4096, device="cuda")
        try:
            op.fused_adam_step({bad}, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False, True)
        except RuntimeError as error:
            print("refused:", str(error).splitlines()[0])
        torch.cuda.synchronize()  # a kernel that ran out of bounds fails here
        print("device still healthy:", torch.ones(1, device="cuda").item())
        """,
        timeout=120,
        TORCH_EXTENSIONS_DIR=str(extensions_dir),
        TORCH_CUDA_ARCH_LIST=None,
    )
    assert done.returncode == 0, explain(done)
    assert f"refused: {message}" in done.stdout, done.stdout
    assert "device still healthy: 1.0" in done.stdout
