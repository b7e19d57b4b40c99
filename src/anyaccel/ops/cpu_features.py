"""The host CPU's vector instruction sets, probed once per process, and the flags they imply."""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

from anyaccel.errors import AnyaccelError

#: Environment variable forcing the SIMD level compiled into CPU ops (for fleets and CI).
SIMD_ENV = "ANYACCEL_CPU_SIMD"

#: SIMD levels anyaccel can compile CPU kernels for, best first.
SIMD_LEVELS = ("avx512", "avx2", "neon", "generic")

_X86 = {"x86_64", "amd64", "i686", "i386"}
_ARM = {"aarch64", "arm64"}

#: The CPU flags (as /proc/cpuinfo spells them) each x86 level's compile flags assume.
SIMD_REQUIRED_FLAGS: dict[str, frozenset[str]] = {
    "avx512": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"}),
    "avx2": frozenset({"avx2", "fma", "f16c"}),
}


class UnsupportedSimdError(AnyaccelError, ValueError):
    """``ANYACCEL_CPU_SIMD`` names a level this CPU cannot run (its code would die on SIGILL)."""


@dataclass(frozen=True)
class CPUFeatures:
    """What the host CPU offers: its architecture and the feature flags the kernel reports."""

    machine: str
    flags: frozenset[str]

    @property
    def is_x86(self) -> bool:
        """Whether the CPU is an x86 (Intel/AMD) processor."""
        return self.machine in _X86

    @property
    def is_arm(self) -> bool:
        """Whether the CPU is a 64-bit Arm processor."""
        return self.machine in _ARM

    def best_simd(self) -> str:
        """The widest SIMD level both this CPU and anyaccel's kernels support."""
        if self.is_x86 and SIMD_REQUIRED_FLAGS["avx512"] <= self.flags:
            return "avx512"
        if self.is_x86 and SIMD_REQUIRED_FLAGS["avx2"] <= self.flags:
            return "avx2"
        if self.is_arm:
            return "neon"  # Advanced SIMD is mandatory on AArch64.
        return "generic"  # portable C++, auto-vectorised for the baseline ISA

    def runnable_levels(self) -> list[str]:
        """Every SIMD level whose code this CPU can execute, best first."""
        best = SIMD_LEVELS.index(self.best_simd())
        return [
            level
            for level in SIMD_LEVELS[best:]
            if level == "generic" or (level == "neon") == self.is_arm
        ]

    def missing_for(self, simd: str) -> list[str]:
        """What this CPU lacks to run ``simd``: missing CPU flags, or the wrong architecture.

        Empty when it can run it, or when the flags are unknown (no /proc/cpuinfo and no torch
        probe): then the user's choice is trusted.
        """
        if simd in SIMD_REQUIRED_FLAGS:
            if not self.is_x86:
                return [f"an x86 CPU (this is {self.machine})"]
            if not self.flags:
                return []
            return sorted(SIMD_REQUIRED_FLAGS[simd] - self.flags)
        if simd == "neon" and not self.is_arm:
            return [f"an Arm CPU with Advanced SIMD (this is {self.machine})"]
        return []


def _read_cpuinfo_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """Feature flags from the first processor entry of ``/proc/cpuinfo`` (empty if unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def _flags_from_torch() -> frozenset[str]:
    """Flags implied by torch's own CPU capability probe, for hosts without /proc/cpuinfo."""
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError, RuntimeError):
        return frozenset()
    if capability.startswith("AVX512"):
        return frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"})
    if capability.startswith("AVX2"):
        return frozenset({"avx2", "fma", "f16c"})
    return frozenset()


@functools.cache
def cpu_features() -> CPUFeatures:
    """The host CPU's features; read once from /proc/cpuinfo (no subprocess), then cached."""
    flags = _read_cpuinfo_flags()
    if not flags:
        flags = _flags_from_torch()
    return CPUFeatures(machine=platform.machine().lower(), flags=flags)


def selected_simd(features: CPUFeatures | None = None) -> str:
    """The SIMD level to compile for: ``ANYACCEL_CPU_SIMD`` if set, else the CPU's best."""
    features = cpu_features() if features is None else features
    forced = os.environ.get(SIMD_ENV, "").strip().lower()
    if not forced:
        return features.best_simd()
    if forced not in SIMD_LEVELS:
        raise ValueError(
            f"{SIMD_ENV}={forced!r} is not a SIMD level; use one of {', '.join(SIMD_LEVELS)}"
        )
    missing = features.missing_for(forced)
    if missing:
        raise UnsupportedSimdError(
            f"{SIMD_ENV}={forced} asks for instructions this CPU lacks (missing: "
            f"{', '.join(missing)}); its code would die with an illegal instruction. Unset "
            f"{SIMD_ENV} or choose one of {', '.join(features.runnable_levels())}"
        )
    return forced


def simd_compile_flags(simd: str, features: CPUFeatures | None = None) -> list[str]:
    """Compiler flags enabling ``simd`` (explicit ISA flags, never ``-march=native``)."""
    features = cpu_features() if features is None else features
    if simd == "avx512":
        flags = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma"]
        flags += ["-mf16c", "-mprefer-vector-width=512"]
        return flags
    if simd == "avx2":
        return ["-mavx2", "-mfma", "-mf16c"]
    if simd == "neon":
        return ["-march=armv8.2-a+fp16"] if "asimdhp" in features.flags else []
    if simd == "generic":
        return []
    raise ValueError(f"unknown SIMD level {simd!r}; use one of {', '.join(SIMD_LEVELS)}")


@functools.cache
def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor id in lower case (``genuineintel``, ``authenticamd``), as DeepSpeed's CPU
    optimizers keep it in ``cpu_vendor``; the processor name where ``/proc/cpuinfo`` has none."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    return value.strip().lower()
    except OSError:
        pass
    return platform.processor().lower()
