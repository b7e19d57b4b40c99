"""Ops without a kernel for the device: torch's own run on the CPU's kernels, others fail as on
a GPU unless allowed by name (ANYACCEL_EMULATED_CPU_OPS, allow_cpu_kernels)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from .worker import on_emulated, run_python


def _cpu_only_op(namespace: str) -> torch.library.Library:
    """``<namespace>::double``, with a CPU kernel only (an extension's op)."""
    library = torch.library.Library(namespace, "DEF")
    library.define("double(Tensor x) -> Tensor")
    library.impl("double", lambda x: x * 2, "CPU")
    return library


@on_emulated(device_type="npu")
def test_an_extension_op_with_a_cpu_kernel_only_fails_as_on_a_gpu() -> None:
    library = _cpu_only_op("anyaccel_gate_refused")
    with pytest.raises(NotImplementedError) as raised:
        torch.ops.anyaccel_gate_refused.double(torch.ones(2, device="npu:0"))
    message = str(raised.value)
    assert (
        "Could not run 'anyaccel_gate_refused::double' with arguments from the 'npu' backend"
        in message
    )
    assert "ANYACCEL_EMULATED_CPU_OPS=anyaccel_gate_refused::double" in message
    assert torch.ops.anyaccel_gate_refused.double(torch.ones(2)).tolist() == [2.0, 2.0]  # CPU
    del library


@on_emulated(device_type="npu")
def test_the_same_op_with_a_kernel_for_the_device_runs() -> None:
    library = _cpu_only_op("anyaccel_gate_ported")
    library.impl("double", lambda x: x + x, "PrivateUse1")
    result = torch.ops.anyaccel_gate_ported.double(torch.ones(2, device="npu:0"))
    assert result.device == torch.device("npu:0") and result.tolist() == [2.0, 2.0]
    del library


@on_emulated(device_type="npu")
def test_torchs_own_ops_and_composites_keep_running_on_the_cpu_kernels() -> None:
    x = torch.randn(4, 4, device="npu:1")
    assert torch.ops.prims.sum(x, [0]).device == x.device  # prims
    assert torch.nn.functional.layer_norm(x, (4,)).device == x.device  # a composite
    assert torch.linalg.inv(x + 4 * torch.eye(4, device="npu:1")).device == x.device


@on_emulated(device_type="npu")
def test_an_allowed_op_or_namespace_runs_its_cpu_kernel() -> None:
    from anyaccel.testing.emulated import (
        EmulatedDeviceError,
        allow_cpu_kernels,
        allowed_cpu_kernels,
    )

    by_name, by_space = _cpu_only_op("anyaccel_gate_op"), _cpu_only_op("anyaccel_gate_space")
    allow_cpu_kernels("anyaccel_gate_op::double", "anyaccel_gate_space")
    assert {"anyaccel_gate_op::double", "anyaccel_gate_space"} <= set(allowed_cpu_kernels())
    for op in (torch.ops.anyaccel_gate_op.double, torch.ops.anyaccel_gate_space.double):
        result = op(torch.ones(3, device="npu:0"))
        assert result.device == torch.device("npu:0") and result.tolist() == [2.0] * 3
    with pytest.raises(EmulatedDeviceError, match=r"'my lib' is not an op or a namespace"):
        allow_cpu_kernels("my lib")
    del by_name, by_space


def test_the_environment_variable_allows_ops_at_install() -> None:
    code = textwrap.dedent(
        """
        import torch
        from anyaccel.testing.emulated import install
        install("emu", 1)
        library = torch.library.Library("anyaccel_gate_env", "DEF")
        library.define("double(Tensor x) -> Tensor")
        library.impl("double", lambda x: x * 2, "CPU")
        print(torch.ops.anyaccel_gate_env.double(torch.ones(2, device="emu")).tolist())
        """
    )
    allowed = run_python(code, env={"ANYACCEL_EMULATED_CPU_OPS": "other::op, anyaccel_gate_env"})
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert allowed.stdout.strip().endswith("[2.0, 2.0]")
    malformed = run_python(code, env={"ANYACCEL_EMULATED_CPU_OPS": "a::b::c"})
    assert malformed.returncode != 0
    assert "ANYACCEL_EMULATED_CPU_OPS: 'a::b::c' is not an op or a namespace" in malformed.stderr
