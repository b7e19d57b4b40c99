"""cuda: NVIDIA GPUs, and AMD GPUs through torch's ROCm builds (which also answer to ``cuda``).

Runtime: a CUDA or ROCm build of torch. Collectives: ``nccl`` (RCCL on ROCm; ``gloo`` on
Windows). Visible devices: ``CUDA_VISIBLE_DEVICES``, plus ``HIP_VISIBLE_DEVICES`` on ROCm.
Exported to other nodes: ``NCCL*``. Graphs: ``torch.cuda.CUDAGraph``. fp16 from compute
capability 7 (6 with ``DS_ALLOW_DEPRECATED_FP16=1``), Triton from capability 8.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from anyaccel.abstract import InstanceDefault
from anyaccel.backends.runtime_probe import RuntimeCheck, count_devices, visibility_note
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome, package_installed

__all__ = ["CudaAccelerator", "probe"]

#: How users check the runtime when it fails: NVIDIA's and AMD's own status tools.
RUNTIME_CHECK = RuntimeCheck("`nvidia-smi` lists the GPUs", "the NVIDIA driver and CUDA runtime")
ROCM_RUNTIME_CHECK = RuntimeCheck("`rocm-smi` lists the GPUs", "the AMD GPU driver and ROCm")

_INSTALL_HINT = (
    "Install a CUDA (or ROCm) build of PyTorch that matches your driver, "
    "e.g. pip install torch --index-url <PyTorch's wheel index for your CUDA version>"
)


def probe() -> ProbeOutcome:
    """Count CUDA/ROCm devices through NVML (or amdsmi) without creating a CUDA context."""
    version = torch.__version__
    backend = "ROCm" if torch.version.hip else "CUDA"
    absent = CudaAccelerator.runtime_absent()
    if absent is not None:
        return ProbeOutcome.not_installed(absent, _INSTALL_HINT + ".")
    check = ROCM_RUNTIME_CHECK if torch.version.hip else RUNTIME_CHECK
    count = count_devices(torch.cuda.device_count, "torch.cuda", "torch", check)
    if isinstance(count, ProbeOutcome):
        return count
    if count <= 0:
        where = visibility_note("CUDA_VISIBLE_DEVICES")
        runtime = torch.version.hip or torch.version.cuda
        return ProbeOutcome.no_device(
            f"torch {version} ({backend} {runtime}) sees no GPU{where}",
            "Check that the GPU driver is loaded (nvidia-smi or rocm-smi lists the device) and "
            "that CUDA_VISIBLE_DEVICES does not hide it.",
        )
    return ProbeOutcome.found(f"{count} {backend} device(s)", count)


class CudaAccelerator(TorchModuleAccelerator):
    """NVIDIA (CUDA) and AMD (ROCm) GPUs through ``torch.cuda``."""

    _name = "cuda"
    #: ``nccl``; ``gloo`` on Windows, which has no NCCL (a subclass's own value wins).
    _communication_backend_name: InstanceDefault[str] = InstanceDefault(
        lambda self: "gloo" if sys.platform == "win32" else "nccl"
    )
    #: Whether torch is a ROCm build (read when the accelerator is made).
    is_rocm: InstanceDefault[bool] = InstanceDefault(lambda self: torch.version.hip is not None)
    _compile_backend = "inductor"
    device_module_name = "cuda"
    graph_class_name = "CUDAGraph"
    supports_nvtx_domain = True
    export_env_prefixes = ("NCCL",)
    host_registration = ("cudart", "cudaHostRegister", "cudaHostUnregister", 0)

    @classmethod
    def runtime_absent(cls) -> str | None:
        """A CPU-only torch build: torch's own flag, read without touching a driver."""
        if torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]
            return None
        return (
            f"torch {torch.__version__} is a CPU-only build (no CUDA or ROCm support compiled in)"
        )

    def visible_devices_envs(self) -> list[str]:
        """``CUDA_VISIBLE_DEVICES``, and ``HIP_VISIBLE_DEVICES`` on ROCm."""
        if self.is_rocm:
            return ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]
        return ["CUDA_VISIBLE_DEVICES"]

    def _capability_major(self) -> int:
        major, _minor = self._module.get_device_capability()
        return int(major)

    # ------------------------------------------------------------------ data types
    def is_fp16_supported(self) -> bool:
        """fp16 from compute capability 7 (6 with ``DS_ALLOW_DEPRECATED_FP16=1``); always on ROCm.

        Without a visible device (building ops on a GPU-less host) the answer is yes.
        """
        if self.is_rocm or not self.is_available():
            return True
        major = self._capability_major()
        allow_pascal = os.environ.get("DS_ALLOW_DEPRECATED_FP16", "0") == "1"
        return major >= 7 or (major == 6 and allow_pascal)

    def is_bf16_supported(self) -> bool:
        """bf16 where torch says the device has it (Ampere and later, recent ROCm GPUs)."""
        if not self.is_available():
            return True
        return bool(self._module.is_bf16_supported())

    # ------------------------------------------------------------------ triton
    def is_triton_supported(self) -> bool:
        """Triton is installed and the GPU has compute capability 8 or later."""
        if not self.is_available() or not package_installed("triton"):
            return False
        return self._capability_major() >= 8

    def prefer_triton_grouped_mm(self) -> bool:
        """On Ampere/Ada (sm8x) a Triton grouped GEMM beats ``torch._grouped_mm``'s loop."""
        if self.is_rocm or not self.is_triton_supported():
            return False
        return not hasattr(torch, "_grouped_mm") or self._capability_major() < 9

    # ------------------------------------------------------------------ profiling
    def range_push(self, msg: str, domain: str | None = None, category: str | None = None) -> Any:
        """Open an NVTX range; with ``domain``, through the ``nvtx`` package if installed."""
        if domain is not None and package_installed("nvtx"):
            import nvtx  # type: ignore[import-not-found]

            return nvtx.push_range(message=msg, domain=domain, category=category)
        return super().range_push(msg)

    def range_pop(self, domain: str | None = None) -> Any:
        """Close the innermost NVTX range (of ``domain``, if given)."""
        if domain is not None and package_installed("nvtx"):
            import nvtx

            return nvtx.pop_range(domain=domain)
        return super().range_pop()
