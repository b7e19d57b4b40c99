"""ZeRO-Offload on a real GPU (``offload.py``): equal to the all-GPU reference after 10 steps.

Tolerance: the fp32 master weights and the bf16 weights, both compared in bf16, within 2 ulps
(measured at no less than 1/1000 of each tensor's largest weight). Two independent training
runs are compared, so a weight whose bf16 rounding differs changes later gradients; the
tolerance allows that, and no more: a lost or stale update moves weights by about ``lr``,
which at these weights' scale is several bf16 ulps.
"""

from __future__ import annotations

import pytest
import torch

from anyaccel.backends.cuda import CudaAccelerator

from .harness import GPU
from .offload import GpuAdam, OffloadedAdam, make_model, train
from .ulps import assert_within_ulps

pytestmark = GPU

STEPS, LR = 10, 1e-3


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "overlapped"])
def test_offloaded_adam_equals_the_all_gpu_reference(overlap: bool) -> None:
    accelerator = CudaAccelerator()
    ours_model, reference_model = make_model(seed=3), make_model(seed=3)
    ours_params = list(ours_model.parameters())
    ours = OffloadedAdam(accelerator, ours_params, LR, overlap)
    assert all(accelerator.is_pinned(t) for t in ours.master + ours.grad_buffers)
    reference = GpuAdam(list(reference_model.parameters()), LR)
    ours_losses = train(ours_model, ours, STEPS)
    reference_losses = train(reference_model, reference, STEPS)
    torch.cuda.synchronize()
    assert ours_losses[-1] < ours_losses[0], ours_losses
    assert ours_losses == pytest.approx(reference_losses, rel=1e-2)
    for index, (param, master, ref_param, ref_master) in enumerate(
        zip(ours_params, ours.master, reference.params, reference.master, strict=True)
    ):
        floor = 1e-3 * float(ref_master.detach().abs().max())
        assert_within_ulps(
            master.bfloat16(), ref_master.detach().cpu().bfloat16(), 2, f"master {index}", floor
        )
        assert_within_ulps(param.detach(), ref_param.detach(), 2, f"bf16 param {index}", floor)


def test_weights_change_every_step() -> None:
    """The copy back lands before the next forward: each step's loss is a new one."""
    accelerator = CudaAccelerator()
    model = make_model(seed=5)
    optimizer = OffloadedAdam(accelerator, list(model.parameters()), 1e-2, overlap=True)
    losses = train(model, optimizer, 5)
    assert len(set(losses)) == 5 and losses[-1] < losses[0], losses
