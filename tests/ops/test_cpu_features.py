"""CPU feature probing and the vector flags chosen from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyaccel.ops import cpu_features as features_module
from anyaccel.ops.cpu_features import (
    CPUFeatures,
    cpu_features,
    selected_simd,
    simd_compile_flags,
)

AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"})


@pytest.mark.parametrize(
    ("machine", "flags", "level"),
    [
        ("x86_64", AVX512, "avx512"),
        ("x86_64", frozenset({"avx2", "fma", "f16c"}), "avx2"),
        ("x86_64", frozenset({"sse2"}), "generic"),
        ("aarch64", frozenset({"asimd"}), "neon"),
        ("riscv64", frozenset(), "generic"),
    ],
)
def test_best_simd_follows_the_flags(machine: str, flags: frozenset[str], level: str) -> None:
    assert CPUFeatures(machine, flags).best_simd() == level


def test_cpuinfo_flags_are_parsed(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\n")
    assert features_module._read_cpuinfo_flags(str(cpuinfo)) == {"fpu", "sse2", "avx2"}
    assert features_module._read_cpuinfo_flags(str(tmp_path / "missing")) == frozenset()


def test_the_probe_runs_once() -> None:
    assert cpu_features() is cpu_features()


def test_the_environment_forces_a_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "generic")
    assert selected_simd(CPUFeatures("x86_64", AVX512)) == "generic"
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "sse9")
    with pytest.raises(ValueError, match="'sse9'"):
        selected_simd()


def test_flags_are_explicit_never_native() -> None:
    avx512 = simd_compile_flags("avx512", CPUFeatures("x86_64", AVX512))
    assert "-mavx512f" in avx512 and not any("native" in flag for flag in avx512)
    assert simd_compile_flags("avx2") == ["-mavx2", "-mfma", "-mf16c"]
    assert simd_compile_flags("generic") == []
    assert simd_compile_flags("neon", CPUFeatures("aarch64", frozenset({"asimdhp"}))) == [
        "-march=armv8.2-a+fp16"
    ]
    with pytest.raises(ValueError, match="unknown SIMD level"):
        simd_compile_flags("mmx")
