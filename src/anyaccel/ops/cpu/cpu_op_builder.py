"""``CPUOpBuilder``: the flags every host (CPU) kernel is compiled with."""

from __future__ import annotations

import os
import sys

from anyaccel.ops.builder import Compatibility, OpBuilder
from anyaccel.ops.cpu_features import selected_simd, simd_compile_flags

#: Directory holding the C++ sources of the CPU kernels.
CSRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


class CPUOpBuilder(OpBuilder):
    """A host kernel: C++ with OpenMP and vector flags for this CPU (or ``ANYACCEL_CPU_SIMD``)."""

    #: Source file names under ``csrc/``.
    SOURCES: tuple[str, ...] = ()

    def sources(self) -> list[str]:
        """The op's sources under ``csrc/``."""
        return [os.path.join(CSRC_DIR, name) for name in self.SOURCES]

    def depends(self) -> list[str]:
        """The shared kernel headers, whose contents enter the build hash."""
        return sorted(
            os.path.join(CSRC_DIR, name) for name in os.listdir(CSRC_DIR) if name.endswith(".h")
        )

    def simd(self) -> str:
        """The SIMD level this build targets."""
        return selected_simd()

    def openmp_flags(self) -> list[str]:
        """``-fopenmp`` where the compiler ships OpenMP (not Apple clang, which runs serially)."""
        return [] if sys.platform == "darwin" else ["-fopenmp"]

    def cxx_args(self) -> list[str]:
        """-O3, OpenMP, sqrt without errno (so it vectorises), no FMA contraction, vector flags.

        ``-ffp-contract=off`` rounds every operation as torch's reference optimizers do. No
        ``-std``: torch adds the standard its headers need (a forced C++17 breaks on torch 2.14).
        """
        flags = ["-O3", "-fno-math-errno", "-ffp-contract=off"]
        flags += self.openmp_flags()
        return flags + simd_compile_flags(self.simd())

    def extra_ldflags(self) -> list[str]:
        """Link the OpenMP runtime (torch's, already loaded in the process)."""
        return self.openmp_flags()

    def platform_compatibility(self) -> Compatibility:
        """Host kernels run on any CPU; an ``ANYACCEL_CPU_SIMD`` it cannot run is the only blocker.

        A forced level the CPU lacks names the missing CPU flags, before anything is compiled.
        """
        try:
            self.simd()
        except ValueError as exc:
            return Compatibility(False, str(exc))
        return Compatibility(True)
