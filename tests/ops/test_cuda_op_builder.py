"""The CUDA builder's flags, tested through its dry-run plan (no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.cuda import FusedAdamBuilder
from anyaccel.ops.cuda.cuda_op_builder import (
    DEFAULT_CUDA_ARCHS,
    cuda_arch_list,
    gencode_flags,
    parse_cuda_arch_list,
    rocm_arch_flags,
)
from anyaccel.ops.errors import OpNotAvailableError


def test_plan_honours_torch_cuda_arch_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    plan = FusedAdamBuilder().plan()
    assert plan.with_cuda and plan.sources[0].endswith("fused_adam.cu")
    gencodes = [flag for flag in plan.cuda_cflags if flag.startswith("-gencode")]
    assert gencodes == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.6")
    assert FusedAdamBuilder().plan().extension_name != plan.extension_name


def test_arch_list_accepts_family_names_and_separators() -> None:
    assert parse_cuda_arch_list("Ampere+PTX, 9.0a") == ["8.0", "8.6+PTX", "9.0a"]


def test_a_bad_arch_entry_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="'sm_80'"):
        parse_cuda_arch_list("sm_80")


def test_compatibility_with_a_cuda_torch_never_touches_the_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_device_queries(*args: object) -> None:
        raise AssertionError("compatibility() must not initialise CUDA")

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", no_device_queries)
    monkeypatch.setattr(torch.cuda, "is_available", no_device_queries)
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    assert FusedAdamBuilder().platform_compatibility().ok
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "sm_80")
    assert "'sm_80'" in FusedAdamBuilder().platform_compatibility().reason


def test_without_the_variable_and_a_device_the_default_archs_are_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    if torch.cuda.is_available():
        pytest.skip("a CUDA device decides the archs here")
    assert cuda_arch_list() == list(DEFAULT_CUDA_ARCHS)


def test_gencode_flags_reject_malformed_archs() -> None:
    with pytest.raises(ValueError, match="'80'"):
        gencode_flags(["80"])


def test_rocm_archs_come_from_pytorch_rocm_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_ROCM_ARCH", "gfx90a;gfx942")
    assert rocm_arch_flags() == ["--offload-arch=gfx90a", "--offload-arch=gfx942"]


def test_loading_without_a_cuda_torch_is_a_clear_error() -> None:
    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    with pytest.raises(OpNotAvailableError, match="built without CUDA"):
        FusedAdamBuilder().load()
