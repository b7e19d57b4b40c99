"""ZeRO-Offload on a real GPU (``offload.py``) against the all-GPU reference.

Given gradients (the loss ``sum(p * g)``, so both runs see the same gradients whatever their
weights): after 10 steps the fp32 master weights are within 4 fp32 ulps of the reference's at
each tensor's scale (ulps of its largest weight) and the bf16 weights within 1 bf16 ulp (one
rounding of a master that differs in its last bits). A lost, stale or doubled update moves a
weight by about ``lr``: tens of thousands of those ulps.

Trained on a model, the two runs feed their own weights back into their gradients, so a bf16
rounding that differs once is amplified; there the losses must agree to 0.1% per step, which
a race between the upload of the weights and the next forward would break.
"""

from __future__ import annotations

import pytest
import torch

from anyaccel.backends.cuda import CudaAccelerator

from .harness import GPU
from .offload import (
    GpuAdam,
    OffloadedAdam,
    make_model,
    make_parameters,
    train,
    train_on_given_gradients,
)
from .ulps import assert_within_ulps

pytestmark = GPU

STEPS, LR = 10, 1e-3
SHAPES = [(1024, 1024), (1024,), (4096, 768), (768,), (3,)]


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "overlapped"])
def test_offloaded_adam_equals_the_all_gpu_reference(overlap: bool) -> None:
    accelerator = CudaAccelerator()
    ours_params, reference_params = make_parameters(3, SHAPES), make_parameters(3, SHAPES)
    start = [p.detach().float().clone() for p in ours_params]
    ours = OffloadedAdam(accelerator, ours_params, LR, overlap)
    assert all(accelerator.is_pinned(t) for t in ours.master + ours.grad_buffers)
    reference = GpuAdam(reference_params, LR)
    train_on_given_gradients(ours_params, ours, STEPS, seed=5)
    train_on_given_gradients(reference_params, reference, STEPS, seed=5)
    torch.cuda.synchronize()
    for index, (param, master, ref_param, ref_master) in enumerate(
        zip(ours_params, ours.master, reference_params, reference.master, strict=True)
    ):
        expected = ref_master.detach().cpu()
        scale = float(expected.abs().max())
        assert_within_ulps(master, expected, 4, f"fp32 master {index}", floor=scale)
        assert_within_ulps(param.detach(), ref_param.detach(), 1, f"bf16 param {index}")
        moved = (param.detach().float() - start[index]).abs().max()
        assert moved > 0.5 * LR * STEPS, f"param {index} hardly moved: {moved}"


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "overlapped"])
def test_training_losses_equal_the_all_gpu_reference(overlap: bool) -> None:
    accelerator = CudaAccelerator()
    ours_model, reference_model = make_model(seed=3), make_model(seed=3)
    ours = OffloadedAdam(accelerator, list(ours_model.parameters()), LR, overlap)
    reference = GpuAdam(list(reference_model.parameters()), LR)
    ours_losses = train(ours_model, ours, STEPS)
    reference_losses = train(reference_model, reference, STEPS)
    assert ours_losses[-1] < ours_losses[0], ours_losses
    assert len(set(ours_losses)) == STEPS, "a step did not change the weights"
    assert ours_losses == pytest.approx(reference_losses, rel=1e-3)
