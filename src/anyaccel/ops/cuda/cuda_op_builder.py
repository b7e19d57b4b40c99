"""``CUDAOpBuilder``: nvcc flags, archs from ``TORCH_CUDA_ARCH_LIST`` or the visible devices."""

from __future__ import annotations

import os
import re

from anyaccel.ops.builder import Compatibility, OpBuilder

#: Architectures built when neither ``TORCH_CUDA_ARCH_LIST`` nor a visible device says otherwise.
DEFAULT_CUDA_ARCHS = ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX")

#: Architecture family names ``TORCH_CUDA_ARCH_LIST`` accepts, as torch does.
NAMED_CUDA_ARCHS: dict[str, tuple[str, ...]] = {
    "maxwell": ("5.0", "5.2"),
    "pascal": ("6.0", "6.1"),
    "volta": ("7.0",),
    "turing": ("7.5",),
    "ampere": ("8.0", "8.6"),
    "ada": ("8.9",),
    "hopper": ("9.0",),
    "blackwell": ("10.0", "12.0"),
}

_ARCH_PATTERN = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_CSRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


def cuda_arch_list() -> list[str]:
    """The archs to build: ``TORCH_CUDA_ARCH_LIST``, else the visible devices, else a default."""
    configured = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if configured:
        return parse_cuda_arch_list(configured)
    import torch

    if torch.version.cuda is not None and torch.cuda.is_available():
        found = {
            "{}.{}".format(*torch.cuda.get_device_capability(index))
            for index in range(torch.cuda.device_count())
        }
        return sorted(found, key=lambda arch: tuple(int(part) for part in arch.split(".")))
    return list(DEFAULT_CUDA_ARCHS)


def parse_cuda_arch_list(text: str) -> list[str]:
    """``"8.0;8.6+PTX"`` or ``"Ampere 9.0"`` as a list of ``major.minor[+PTX]`` entries."""
    archs: list[str] = []
    for entry in text.replace(";", " ").replace(",", " ").split():
        ptx = entry.endswith("+PTX")
        family = NAMED_CUDA_ARCHS.get(entry.removesuffix("+PTX").lower())
        if family is not None:
            expanded = list(family)
            if ptx:
                expanded[-1] += "+PTX"
            archs.extend(expanded)
        elif _ARCH_PATTERN.match(entry):
            archs.append(entry)
        else:
            raise ValueError(
                f"TORCH_CUDA_ARCH_LIST entry {entry!r} is not an architecture; use entries like "
                f"'8.0', '9.0+PTX' or one of {', '.join(sorted(NAMED_CUDA_ARCHS))}"
            )
    return archs


def gencode_flags(archs: list[str]) -> list[str]:
    """nvcc ``-gencode`` flags: SASS for every arch, plus PTX where an entry ends in ``+PTX``."""
    flags: list[str] = []
    for arch in archs:
        match = _ARCH_PATTERN.match(arch)
        if match is None:
            raise ValueError(f"CUDA architecture {arch!r} is not of the form 'major.minor[+PTX]'")
        number = f"{match.group(1)}{match.group(2)}{match.group(3)}"
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
        if match.group(4):
            flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")
    return flags


def rocm_arch_flags() -> list[str]:
    """hipcc ``--offload-arch`` flags from ``PYTORCH_ROCM_ARCH`` (empty: hipcc's default)."""
    configured = os.environ.get("PYTORCH_ROCM_ARCH", "").replace(";", " ").split()
    return [f"--offload-arch={arch}" for arch in configured]


class CUDAOpBuilder(OpBuilder):
    """A device kernel for CUDA (or ROCm via torch's hipify); needs a GPU build of torch."""

    #: Source file names under ``csrc/``.
    SOURCES: tuple[str, ...] = ()

    def sources(self) -> list[str]:
        """The op's sources under ``csrc/``."""
        return [os.path.join(_CSRC_DIR, name) for name in self.SOURCES]

    def with_cuda(self) -> bool:
        """Always: these ops are compiled with nvcc (or hipcc)."""
        return True

    def cxx_args(self) -> list[str]:
        """Host-side flags (no ``-std``: torch adds the standard its headers need)."""
        return ["-O3"]

    def nvcc_args(self) -> list[str]:
        """-O3 and one ``-gencode`` per target architecture (or ROCm offload archs).

        No ``-std``: torch adds the C++ standard its headers need (C++17, or C++20 from 2.13 on).
        """
        import torch

        if torch.version.hip is not None:
            return ["-O3", *rocm_arch_flags()]
        return ["-O3", "--expt-relaxed-constexpr", *gencode_flags(cuda_arch_list())]

    def platform_compatibility(self) -> Compatibility:
        """A CUDA or ROCm build of torch is required (a device is not: cross-compiling works).

        Cheap and side-effect free: it never initialises CUDA (only ``plan()`` asks the devices).
        """
        import torch

        if torch.version.cuda is None and torch.version.hip is None:
            return Compatibility(
                False,
                f"torch {torch.__version__} is built without CUDA; install a CUDA build of "
                "torch (https://pytorch.org/get-started/locally/)",
            )
        configured = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
        try:  # validate the variable only: querying devices would initialise CUDA
            parse_cuda_arch_list(configured)
        except ValueError as exc:
            return Compatibility(False, str(exc))
        return Compatibility(True)
