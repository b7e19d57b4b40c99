"""Op loading under faults: corrupt cached libraries, unusable cache directories, forced SIMD.

Whatever goes wrong, ``load()`` raises an ``OpError`` naming the path and the fix; a process
that could die (a truncated library, code for a CPU this is not) runs in a subprocess.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anyaccel.ops import builder as builder_module
from anyaccel.ops.cpu import CPUAdamBuilder
from anyaccel.ops.cpu_features import (
    CPUFeatures,
    UnsupportedSimdError,
    cpu_features,
    selected_simd,
)
from anyaccel.ops.errors import ExtensionsDirError, OpLoadError, OpNotAvailableError
from anyaccel.ops.jit import cache

from .conftest import _run_python
from .test_builder import TINY_OP, c_module, tmp_builder

RunPython = Callable[..., subprocess.CompletedProcess[str]]

AVX2_ONLY = frozenset({"sse2", "avx", "avx2", "fma", "f16c"})
AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"})

#: Compiles and links, but the loader refuses it: its module initialisation raises ImportError.
REFUSED_OP = c_module('PyErr_SetString(PyExc_ImportError, "refused by init"); return nullptr;')


#: Defines ``SmallBuilder`` for the op source in ``SOURCE_DIR`` (an environment variable).
SMALL_BUILDER = """
    import os
    from anyaccel.ops.builder import OpBuilder

    class SmallBuilder(OpBuilder):
        NAME = "fault_small"

        def sources(self):
            return [os.path.join(os.environ["SOURCE_DIR"], "small.cpp")]
"""


@pytest.fixture(scope="module")
def small_op_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The small op's sources, a cache with its finished build (built once), its stderr."""
    root = tmp_path_factory.mktemp("small_op")
    source_dir, cache = root / "src", root / "cache"
    source_dir.mkdir()
    (source_dir / "small.cpp").write_text(TINY_OP)
    env = {"SOURCE_DIR": str(source_dir), "TORCH_EXTENSIONS_DIR": str(cache)}
    first = _run_python(SMALL_BUILDER + "\n    print(SmallBuilder().load().answer())", env=env)
    assert first.returncode == 0 and first.stdout.strip() == "42", first.stderr[-2000:]
    return source_dir, cache, first.stderr


def _truncated_copy(
    small_op_cache: tuple[Path, Path, str], tmp_path: Path
) -> tuple[dict[str, str], Path]:
    """A copy of the small op's cache whose library is cut short, as a full disk would leave it."""
    source_dir, cache, _ = small_op_cache
    shutil.copytree(cache, tmp_path / "cache")
    env = {"SOURCE_DIR": str(source_dir), "TORCH_EXTENSIONS_DIR": str(tmp_path / "cache")}
    (library,) = (tmp_path / "cache").glob("anyaccel_fault_small_*/anyaccel_fault_small_*.so")
    with open(library, "r+b") as handle:
        handle.truncate(1000)
    return env, library


# ------------------------------------------------------------------ corrupt cached library
def test_first_build_says_what_why_and_where_before_it_starts_then_the_time(
    small_op_cache: tuple[Path, Path, str],
) -> None:
    _, cache, stderr = small_op_cache
    (build_dir,) = cache.glob("anyaccel_fault_small_*")
    lines = [line for line in stderr.splitlines() if line.startswith("[anyaccel] ")]
    assert len(lines) == 2, stderr
    assert lines[0].startswith("[anyaccel] building op 'fault_small' (SmallBuilder): first use")
    assert lines[0].endswith(f"cached in {build_dir}")
    assert re.fullmatch(r"\[anyaccel\] built op 'fault_small' in \d+\.\d s", lines[1])


def test_truncated_cached_library_is_rebuilt_once_with_a_warning(
    small_op_cache: tuple[Path, Path, str], tmp_path: Path, run_python: RunPython
) -> None:
    env, library = _truncated_copy(small_op_cache, tmp_path)
    result = run_python(SMALL_BUILDER + "\n    print(SmallBuilder().load().answer())", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "42"
    assert "does not load" in result.stderr and "rebuilding it once" in result.stderr
    assert str(library) in result.stderr
    assert "the cached library does not load" in result.stderr  # the build says why
    assert library.stat().st_size > 1000
    again = run_python(SMALL_BUILDER + "\n    print(SmallBuilder().load().answer())", env=env)
    assert again.returncode == 0 and again.stdout.strip() == "42"
    assert "rebuilding" not in again.stderr and "building op" not in again.stderr


def test_truncated_library_that_cannot_be_rebuilt_is_an_op_load_error(
    small_op_cache: tuple[Path, Path, str], tmp_path: Path, run_python: RunPython
) -> None:
    env, library = _truncated_copy(small_op_cache, tmp_path)
    code = (
        SMALL_BUILDER
        + """
    from anyaccel.ops.errors import OpLoadError
    try:
        SmallBuilder().load()
    except OpLoadError as error:
        print("LOADER:", error.loader_message)
        print("PATH:", error.library_path)
        print("MESSAGE:", error)
    """
    )
    result = run_python(code, env={**env, "PATH": "/nonexistent"})  # no ninja, no compiler
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert f"PATH: {library}" in out
    loader = out.split("LOADER:", 1)[1].splitlines()[0].strip()
    assert loader and loader in out.split("MESSAGE:", 1)[1]  # the loader's own words
    assert "cannot be rebuilt here" in out and "ninja" in out


def test_library_the_loader_refuses_is_an_op_load_error(tmp_path: Path) -> None:
    refused = tmp_builder(tmp_path, REFUSED_OP, name="fault_refused")
    with pytest.raises(OpLoadError) as caught:
        refused.load()
    assert "refused by init" in caught.value.loader_message
    assert caught.value.library_path == refused.plan().library_path
    assert refused.plan().library_path in str(caught.value)
    assert isinstance(caught.value.__cause__, ImportError)  # the loader's own error


# ------------------------------------------------------------------ unusable cache directory
def test_extensions_dir_that_is_a_file_is_an_op_error_naming_path_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("not a directory")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(not_a_dir))
    with pytest.raises(ExtensionsDirError) as caught:
        tmp_builder(tmp_path, TINY_OP, name="fault_file_dir").load()
    message = str(caught.value)
    assert f"TORCH_EXTENSIONS_DIR={not_a_dir}" in message
    assert f"{not_a_dir} is a file, not a directory" in message
    assert "Point TORCH_EXTENSIONS_DIR at a writable directory" in message
    assert caught.value.path == str(not_a_dir)


def test_extensions_dir_under_a_file_is_an_op_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(blocker / "cache"))
    with pytest.raises(ExtensionsDirError, match=f"{blocker} is a file, not a directory"):
        tmp_builder(tmp_path, TINY_OP, name="fault_under_file").load()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_extensions_dir_nobody_can_write_is_an_op_error_even_for_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /proc refuses new entries to every user, root included (where os.access says "writable").
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/proc")
    with pytest.raises(ExtensionsDirError) as caught:
        tmp_builder(tmp_path, TINY_OP, name="fault_proc").load()
    assert "TORCH_EXTENSIONS_DIR=/proc is not a writable directory" in str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_extensions_dir_without_write_permission_is_an_op_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(locked))
    try:
        with pytest.raises(ExtensionsDirError, match="Permission denied"):
            tmp_builder(tmp_path, TINY_OP, name="fault_locked").load()
    finally:
        locked.chmod(0o700)


def test_read_only_cache_with_a_good_build_still_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    CPUAdamBuilder().load()  # the session cache holds it
    monkeypatch.setattr(cache, "usable_build_directory", lambda *_: pytest.fail("tried to write"))
    builder_module._loaded.clear()
    assert CPUAdamBuilder().load().simd_level()


#: Loads the small op as root, then in a forked child as uid 65534 (another user, torch
#: already loaded); prints each answer or the error.
LOAD_AS_ROOT_AND_NOBODY = (
    SMALL_BUILDER
    + """
    import os
    from anyaccel.ops import builder
    from anyaccel.ops.errors import OpError

    def load(who):
        builder._loaded.clear()
        try:
            print(who, SmallBuilder().load().answer(), flush=True)
        except OpError as error:
            print(who, type(error).__name__, error, flush=True)

    load("root")
    pid = os.fork()
    if pid == 0:
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        load("nobody")
        os._exit(0)
    os.waitpid(pid, 0)
"""
)


@pytest.fixture
def world_readable_copy(small_op_cache: tuple[Path, Path, str]) -> Iterator[dict[str, str]]:
    """The small op's sources and finished cache, copied (modes kept) under a 0755 folder in /tmp.

    As a container image or a shared software tree has it: built by root, read by all.
    """
    source_dir, cache_dir, _ = small_op_cache
    top = Path(tempfile.mkdtemp(prefix="anyaccel-readonly-", dir="/tmp"))
    try:
        top.chmod(0o755)
        shutil.copytree(source_dir, top / "src")
        (top / "src").chmod(0o755)
        shutil.copytree(cache_dir, top / "cache")
        yield {"SOURCE_DIR": str(top / "src"), "TORCH_EXTENSIONS_DIR": str(top / "cache")}
    finally:
        shutil.rmtree(top)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting read-only and becoming uid 65534 need root")
def test_a_cache_root_built_loads_for_every_user_from_a_read_only_mount(
    world_readable_copy: dict[str, str],
) -> None:
    # a real read-only file system: a read-only bind mount in a private mount namespace (root
    # writes through permission bits, never through a read-only mount)
    cache_dir = world_readable_copy["TORCH_EXTENSIONS_DIR"]
    (build_dir,) = Path(cache_dir).glob("anyaccel_fault_small_*")
    assert stat.S_IMODE(build_dir.stat().st_mode) & 0o055 == 0o055  # others may read, not write
    src = str(Path(__file__).resolve().parents[2] / "src")
    mount = f"mount --bind {cache_dir} {cache_dir} && mount -o remount,bind,ro {cache_dir}"
    probe = f"{mount} && ! touch {cache_dir}/written 2>/dev/null"
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "sh", "-c", probe], capture_output=True).returncode
    ):
        pytest.skip("no private mount namespace here (unshare -m and mount need CAP_SYS_ADMIN)")
    script = textwrap.dedent(LOAD_AS_ROOT_AND_NOBODY)
    result = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f'{mount} && PATH=/nonexistent exec "$0" -c "$1"',
            sys.executable,
            script,
        ],
        env={**os.environ, **world_readable_copy, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # no compiler on PATH either: both loaded the build, neither tried to make one
    assert result.stdout.split("\n")[:2] == ["root 42", "nobody 42"], result.stdout
    assert not (Path(cache_dir) / "written").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming uid 65534 needs root")
def test_a_build_another_user_cannot_read_is_named_when_it_cannot_be_rebuilt(
    world_readable_copy: dict[str, str],
) -> None:
    # a cache built by root before build directories were made readable (0700): uid 65534
    # cannot open it, nor build beside it; the error says what is there, not only "not writable"
    cache_dir = Path(world_readable_copy["TORCH_EXTENSIONS_DIR"])
    (build_dir,) = cache_dir.glob("anyaccel_fault_small_*")
    build_dir.chmod(0o700)
    src = str(Path(__file__).resolve().parents[2] / "src")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOAD_AS_ROOT_AND_NOBODY)],
        env={**os.environ, **world_readable_copy, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    root, nobody = result.stdout.splitlines()[:2]
    assert root == "root 42"
    assert nobody.startswith("nobody ExtensionsDirError cannot build op 'fault_small'")
    assert f"a build directory {build_dir} this user cannot open" in nobody
    assert "Permission denied" in nobody and "must let others read it" in nobody


def test_a_corrupt_build_record_without_a_compiler_names_the_build_and_the_remedy(
    small_op_cache: tuple[Path, Path, str], tmp_path: Path, run_python: RunPython
) -> None:
    source_dir, cache_dir, _ = small_op_cache
    shutil.copytree(cache_dir, tmp_path / "cache")
    (stamp,) = (tmp_path / "cache").glob("anyaccel_fault_small_*/anyaccel-build.json")
    stamp.write_text('{"key": "3f2a')  # cut short
    env = {"SOURCE_DIR": str(source_dir), "TORCH_EXTENSIONS_DIR": str(tmp_path / "cache")}
    code = (
        SMALL_BUILDER
        + """
    from anyaccel.ops.errors import OpError
    try:
        SmallBuilder().load()
    except OpError as error:
        print(type(error).__name__, error)
    """
    )
    result = run_python(code, env={**env, "PATH": "/nonexistent"})  # no ninja, no compiler
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.startswith("BuildToolMissingError cannot build op 'fault_small': ninja"), out
    assert f"the cache holds a corrupt build record {stamp}" in out  # what was found
    assert "anyaccel ops --build SmallBuilder" in out  # what to do


def test_no_raw_os_error_escapes_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(plan: object, directory: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache, "compile_extension", disk_full)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))
    with pytest.raises(OpLoadError, match="No space left on device") as caught:
        tmp_builder(tmp_path, TINY_OP, name="fault_disk_full").load()
    assert str(tmp_path / "cache") in str(caught.value)


# ------------------------------------------------------------------ forced SIMD level
def test_forcing_a_level_the_cpu_lacks_names_the_missing_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "avx512")
    with pytest.raises(UnsupportedSimdError) as caught:
        selected_simd(CPUFeatures("x86_64", AVX2_ONLY))
    message = str(caught.value)
    assert "missing: avx512bw, avx512dq, avx512f, avx512vl" in message
    assert "choose one of avx2, generic" in message
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "avx2")
    with pytest.raises(UnsupportedSimdError, match="missing: avx2, f16c, fma"):
        selected_simd(CPUFeatures("x86_64", frozenset({"sse2"})))
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "neon")
    with pytest.raises(UnsupportedSimdError, match="an Arm CPU"):
        selected_simd(CPUFeatures("x86_64", AVX512))
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "avx2")
    with pytest.raises(UnsupportedSimdError, match="an x86 CPU"):
        selected_simd(CPUFeatures("aarch64", frozenset({"asimd"})))


def test_forcing_a_level_the_cpu_has_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "avx2")
    assert selected_simd(CPUFeatures("x86_64", AVX512)) == "avx2"
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "generic")
    assert selected_simd(CPUFeatures("riscv64", frozenset())) == "generic"
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "avx512")  # unknown flags: the user's word stands
    assert selected_simd(CPUFeatures("x86_64", frozenset())) == "avx512"


def test_runnable_levels_follow_the_cpu() -> None:
    assert CPUFeatures("x86_64", AVX512).runnable_levels() == ["avx512", "avx2", "generic"]
    assert CPUFeatures("x86_64", AVX2_ONLY).runnable_levels() == ["avx2", "generic"]
    assert CPUFeatures("aarch64", frozenset()).runnable_levels() == ["neon", "generic"]


def test_forced_level_the_cpu_lacks_makes_the_builder_incompatible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANYACCEL_CPU_SIMD", "neon" if cpu_features().is_x86 else "avx2")
    builder = CPUAdamBuilder()
    verdict = builder.compatibility()
    assert not verdict and "lacks" in verdict.reason
    with pytest.raises(OpNotAvailableError, match="asks for instructions this CPU lacks"):
        builder.load()


def _missing_level() -> str:
    """A SIMD level this machine's CPU cannot run (there is always one: another architecture's)."""
    features = cpu_features()
    lacking = [level for level in ("avx512", "avx2", "neon") if features.missing_for(level)]
    return lacking[0]


def test_forced_level_missing_here_is_an_error_not_an_illegal_instruction(
    run_python: RunPython, tmp_path: Path
) -> None:
    level = _missing_level()
    code = """
        import torch
        from anyaccel.ops.adam import CPUAdam
        from anyaccel.ops.errors import OpNotAvailableError
        param = torch.nn.Parameter(torch.ones(4))
        param.grad = torch.ones(4)
        try:
            CPUAdam([param]).step()
        except OpNotAvailableError as error:
            print("ERROR:", error)
        """
    result = run_python(
        code, env={"ANYACCEL_CPU_SIMD": level, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert f"ANYACCEL_CPU_SIMD={level} asks for instructions this CPU lacks" in result.stdout
    assert not any(tmp_path.iterdir())  # nothing was compiled


def test_forced_avx512_on_a_cpu_without_it_is_an_error_in_a_fresh_process(
    run_python: RunPython, tmp_path: Path
) -> None:
    code = f"""
        from anyaccel.ops import cpu_features
        from anyaccel.ops.cpu import CPUAdamBuilder
        from anyaccel.ops.errors import OpNotAvailableError
        cpu_features.cpu_features.cache_clear()
        cpu_features._read_cpuinfo_flags = lambda path="/proc/cpuinfo": {AVX2_ONLY!r}
        try:
            CPUAdamBuilder().load()
        except OpNotAvailableError as error:
            print("ERROR:", error)
        """
    result = run_python(
        textwrap.dedent(code),
        env={"ANYACCEL_CPU_SIMD": "avx512", "TORCH_EXTENSIONS_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "missing: avx512bw, avx512dq, avx512f, avx512vl" in result.stdout


# ------------------------------------------------------------------ fork while loading
def test_a_child_forked_while_another_thread_loads_can_load(run_python: RunPython) -> None:
    CPUAdamBuilder().load()  # the session cache holds it: the child only imports
    code = """
        import os, signal, threading
        from anyaccel.ops import builder
        from anyaccel.ops.cpu import CPUAdamBuilder
        held, release = threading.Event(), threading.Event()

        def hold():
            with builder._load_lock:
                held.set()
                release.wait()

        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # a lock copied held would hang here forever
            CPUAdamBuilder().load()
            os._exit(0)
        release.set()
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "0"
