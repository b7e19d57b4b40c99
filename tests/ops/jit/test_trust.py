"""The cache's trust rule under attack: another user's builds, links and directories are never used.

The other user is real: files are planted by a child process running as ``nobody`` (uid and
gid 65534, no supplementary groups) in a sticky world-writable root, as on a cluster's shared
scratch. A planted library's constructor writes a marker file, so "never loaded" is checked
by the marker's absence. Ops load in a fresh interpreter, so a failure could not run the
planted code in the test process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anyaccel.ops.errors import UntrustedCacheError
from anyaccel.ops.jit import trust
from anyaccel.ops.jit.plan import BuildPlan

from ..conftest import _run_python
from ..test_builder import TINY_OP, tmp_builder

NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="planting another user's files needs root (to run a child as uid 65534); "
    "CI and the dev machine run the suite as root",
)
RunPython = Callable[..., subprocess.CompletedProcess[str]]

#: Loads the op(s) named in OPS from the sources in SOURCE_DIR; prints each answer or the error.
LOAD = """
    import os
    from anyaccel.ops.builder import OpBuilder
    from anyaccel.ops.errors import OpError

    for name in os.environ["OPS"].split(","):
        class Builder(OpBuilder):
            NAME = name

            def sources(self):
                return [os.path.join(os.environ["SOURCE_DIR"], name + ".cpp")]

        try:
            print(name, Builder().load().answer())
        except OpError as error:
            print(name, type(error).__name__, "|", error, "|", getattr(error, "path", ""))
"""


def as_nobody(script: str) -> None:
    """Run shell ``script`` as uid/gid 65534 with no supplementary groups: another user."""
    result = subprocess.run(
        ["sh", "-ec", script],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


class World:
    """A root-owned directory under /tmp that ``nobody`` can read: the planted library, the
    marker its constructor writes, and fresh sticky shared roots."""

    def __init__(self, top: Path, sources: Path) -> None:
        self.top, self.sources = top, sources
        self.marker = top / "constructor-ran"
        self.evil = top / "evil.so"
        code = top / "evil.c"
        code.write_text(
            "#include <stdio.h>\n"
            "__attribute__((constructor)) static void planted(void) {\n"
            f'  FILE* f = fopen("{self.marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n'
            "}\n"
        )
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(self.evil), str(code)], check=True)
        self.evil.chmod(0o755)

    def shared_root(self) -> Path:
        """A fresh root like /tmp: owned by root, mode 1777."""
        root = Path(tempfile.mkdtemp(prefix="shared-", dir=self.top))
        root.chmod(0o1777)
        return root

    def plan(self, name: str, root: Path) -> BuildPlan:
        """The tiny op ``name``'s plan under the cache root ``root``."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TORCH_EXTENSIONS_DIR", str(root))
            return tmp_builder(self.sources, TINY_OP, name=name).plan()

    def plant_build(self, directory: Path, plan: BuildPlan, *, make: str = "mkdir -p") -> None:
        """As ``nobody``: a finished-looking build of ``plan`` in ``directory`` whose library is
        the planted one, with a stamp that matches (the key is deterministic)."""
        stamp = json.dumps({"key": plan.key, "library_bytes": self.evil.stat().st_size})
        as_nobody(
            f"{make} '{directory}'\n"
            f"cp '{self.evil}' '{directory}/{plan.extension_name}.so'\n"
            f"printf '%s' '{stamp}' > '{directory}/anyaccel-build.json'\n"
        )

    def load(self, root: Path, *names: str) -> dict[str, str]:
        """Load the tiny ops ``names`` with ``root`` as TORCH_EXTENSIONS_DIR in a fresh process."""
        env = {"TORCH_EXTENSIONS_DIR": str(root), "SOURCE_DIR": str(self.sources)}
        result = _run_python(LOAD, env={**env, "OPS": ",".join(names)})
        assert result.returncode == 0, result.stderr[-3000:]
        lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
        lines["stderr"] = result.stderr
        return lines


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    if os.geteuid() != 0:
        pytest.skip("planting another user's files needs root")
    top = Path(tempfile.mkdtemp(prefix="anyaccel-trust-", dir="/tmp"))
    top.chmod(0o755)
    sources = tmp_path_factory.mktemp("trust_sources")
    for name in ("trust_warm", "trust_cold", "trust_own", "trust_victim"):
        (sources / f"{name}.cpp").write_text(TINY_OP)
    try:
        yield World(top, sources)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def attacked_shared_root(
    world: World, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, object]:
    """A sticky shared root where ``nobody`` planted both attacks of the issue, then root loads.

    ``trust_warm``: a finished-looking build (library and stamp) at its deterministic path.
    ``trust_cold``: a build directory whose lock and build.ninja are links to root's files.
    """
    root = world.shared_root()
    secrets = tmp_path_factory.mktemp("root_only")
    victim = secrets / "victim.conf"
    victim.write_text("root's own file\n")
    victim.chmod(0o600)
    lock_target = secrets / "created-by-lock"
    warm, cold = world.plan("trust_warm", root), world.plan("trust_cold", root)
    world.plant_build(root / warm.extension_name, warm)
    cold_dir = root / cold.extension_name
    as_nobody(
        f"mkdir '{cold_dir}'\n"
        f"ln -s '{lock_target}' '{cold_dir}/anyaccel.lock'\n"
        f"ln -s '{victim}' '{cold_dir}/build.ninja'\n"
    )
    outcome = world.load(root, "trust_warm", "trust_cold")
    return {
        "root": root, "victim": victim, "lock_target": lock_target, "outcome": outcome,
        "warm": warm, "cold": cold,
    }  # fmt: skip


# ------------------------------------------------------------------ a sticky shared root
@needs_root
def test_a_build_planted_in_a_shared_root_is_never_loaded(
    world: World, attacked_shared_root: dict[str, object]
) -> None:
    outcome = attacked_shared_root["outcome"]
    assert isinstance(outcome, dict) and outcome["trust_warm"] == "42", outcome
    assert not world.marker.exists()  # the planted constructor never ran
    warm = attacked_shared_root["warm"]
    assert isinstance(warm, BuildPlan)
    planted = Path(str(attacked_shared_root["root"])) / warm.extension_name
    assert planted.stat().st_uid == NOBODY  # left alone: neither loaded nor "repaired"
    assert (planted / f"{warm.extension_name}.so").read_bytes() == world.evil.read_bytes()


@needs_root
def test_planted_lock_and_build_ninja_links_in_a_shared_root_touch_nothing(
    attacked_shared_root: dict[str, object],
) -> None:
    outcome = attacked_shared_root["outcome"]
    assert isinstance(outcome, dict) and outcome["trust_cold"] == "42", outcome
    assert Path(str(attacked_shared_root["victim"])).read_text() == "root's own file\n"
    assert not Path(str(attacked_shared_root["lock_target"])).exists()


@needs_root
def test_a_shared_root_builds_in_the_users_private_directory(
    attacked_shared_root: dict[str, object],
) -> None:
    root = Path(str(attacked_shared_root["root"]))
    private = root / f"anyaccel-{os.geteuid()}"
    status = private.lstat()
    assert stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid()
    assert stat.S_IMODE(status.st_mode) == 0o700
    for plan in (attacked_shared_root["warm"], attacked_shared_root["cold"]):
        assert isinstance(plan, BuildPlan)
        assert plan.build_directory == str(private / plan.extension_name)
        library = Path(plan.library_path)
        assert library.stat().st_uid == os.geteuid()
        assert not library.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)


@needs_root
def test_a_private_directory_another_user_made_first_is_refused_with_path_and_fix(
    world: World,
) -> None:
    root = world.shared_root()
    private = root / f"anyaccel-{os.geteuid()}"
    plan = world.plan("trust_warm", root)
    assert plan.build_directory == str(private / plan.extension_name)
    world.plant_build(Path(plan.build_directory), plan)
    outcome = world.load(root, "trust_warm")
    kind, message, path = outcome["trust_warm"].split(" | ")
    assert kind == "UntrustedCacheError" and path == str(private)
    assert f"private directory {private}" in message
    assert "owned by uid 65534" in message and "export TORCH_EXTENSIONS_DIR=" in message
    assert not world.marker.exists()


@needs_root
def test_a_file_another_user_put_where_the_private_directory_goes_is_refused(
    world: World,
) -> None:
    root = world.shared_root()
    private = root / f"anyaccel-{os.geteuid()}"
    as_nobody(f"touch '{private}'")
    outcome = world.load(root, "trust_warm")
    kind, message, path = outcome["trust_warm"].split(" | ")
    assert kind == "UntrustedCacheError" and path == str(private)
    assert "another user made it a file (owned by uid 65534" in message


@needs_root
def test_a_private_directory_that_is_a_link_is_refused(world: World) -> None:
    root = world.shared_root()
    private = root / f"anyaccel-{os.geteuid()}"
    as_nobody(f"ln -s /root '{private}'")  # a directory root owns: the link is the attack
    outcome = world.load(root, "trust_warm")
    assert outcome["trust_warm"].startswith("UntrustedCacheError | "), outcome
    assert "it is a symbolic link" in outcome["trust_warm"]
    assert not any(Path("/root").glob("anyaccel_trust_warm_*"))


#: Every rank of a two-rank CPU job: anyaccel's default backend, one all-reduce, its status.
JOB = """
import json, os, torch, torch.distributed as dist
from anyaccel.distributed import init_distributed, shm_all_reduce_status
info = init_distributed()
x = torch.ones(4)
dist.all_reduce(x)
record = {"rank": info.rank, "sum": x.tolist(), "status": shm_all_reduce_status()}
with open(os.path.join(os.environ["JOB_OUT"], f"rank{info.rank}.json"), "w") as out:
    json.dump(record, out)  # a file per rank: the ranks share torchrun's stdout
dist.destroy_process_group()
"""


@needs_root
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="anyaccel_shm needs Linux")
def test_init_distributed_refuses_a_planted_shm_op_loudly_and_runs_on_gloo(
    world: World, tmp_path: Path
) -> None:
    from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder

    root = world.shared_root()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(root))
        plan = ShareMemCommBuilder().plan()
    world.plant_build(root / plan.extension_name, plan)  # where anyaccel looked before
    world.plant_build(Path(plan.build_directory), plan)  # and the private directory, first
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD"))}
    src = str(Path(__file__).resolve().parents[3] / "src")
    out = tmp_path / "out"
    out.mkdir()
    env.update(
        TORCH_EXTENSIONS_DIR=str(root), OMP_NUM_THREADS="1", PYTHONPATH=src, JOB_OUT=str(out)
    )
    env.pop("DS_ACCELERATOR", None)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(script)],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    private = root / f"anyaccel-{os.geteuid()}"
    for rank in ranks:
        assert rank["sum"] == [2.0] * 4
        assert rank["status"].startswith("the shared-memory op is unavailable (refusing the op ")
        assert str(private) in rank["status"]
    warnings = [line for line in result.stderr.splitlines() if "anyaccel_shm: refusing" in line]
    assert len(warnings) == 2, result.stderr[-3000:]  # one per rank, at the default level
    assert not world.marker.exists()


# ------------------------------------------------------------------ a root of another user
@needs_root
def test_a_root_owned_by_another_user_is_refused_with_its_path(world: World) -> None:
    root = world.shared_root() / "nobodys-cache"  # made by nobody in a sticky /tmp
    as_nobody(f"mkdir -m 755 '{root}'")
    plan = world.plan("trust_warm", root)
    assert plan.build_directory == str(root / plan.extension_name)  # not sticky, not shared
    world.plant_build(Path(plan.build_directory), plan)
    outcome = world.load(root, "trust_warm")
    kind, message, path = outcome["trust_warm"].split(" | ")
    assert kind == "UntrustedCacheError" and path == str(root)
    assert f"root {root}: it belongs to another user (owned by uid 65534" in message
    assert not world.marker.exists()
    assert sorted(p.name for p in root.iterdir()) == [plan.extension_name]  # nothing added


@needs_root
def test_a_root_that_is_another_users_link_is_refused(world: World, tmp_path: Path) -> None:
    root = world.shared_root() / "torch_extensions"
    as_nobody(f"ln -s '{tmp_path}' '{root}'")  # to a directory root owns, e.g. a home
    outcome = world.load(root, "trust_warm")
    kind, message, path = outcome["trust_warm"].split(" | ")
    assert kind == "UntrustedCacheError" and path == str(root)
    assert "it is a symbolic link owned by uid 65534" in message
    assert not any(tmp_path.iterdir())  # nothing built where the link points


@needs_root
def test_a_root_behind_another_users_link_on_its_path_is_refused_and_nothing_made(
    world: World, tmp_path: Path
) -> None:
    shared = world.shared_root()
    as_nobody(f"ln -s '{tmp_path}' '{shared}/project'")  # the user meant to make shared/project
    root = shared / "project" / "ext"
    outcome = world.load(root, "trust_warm")
    kind, message, path = outcome["trust_warm"].split(" | ")
    assert kind == "UntrustedCacheError" and path == str(root)
    assert f"{shared}/project on its path is a symbolic link owned by uid 65534" in message
    assert not any(tmp_path.iterdir())  # no directory made where the link points


@needs_root
def test_a_root_under_another_users_directory_is_refused(world: World) -> None:
    parent = world.shared_root() / "nobodys"
    as_nobody(f"mkdir -m 755 '{parent}'")  # its owner could swap the root for a link at will
    with pytest.raises(UntrustedCacheError, match="nobodys on its path belongs to another user"):
        trust.open_home(parent / "ext", create=True)
    assert not (parent / "ext").exists()


def test_a_root_under_a_non_sticky_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # anyone may rename the root away and put a link in its place
    with pytest.raises(UntrustedCacheError, match="may be written by others and is not sticky"):
        trust.open_home(parent / "ext", create=True)
    parent.chmod(0o1777)
    os.close(trust.open_home(parent / "ext", create=True))


# ------------------------------------------------------------------ our own directories
@pytest.fixture
def private_root(world: World) -> Path:
    """A root only root may write, that ``nobody`` can look into (0755)."""
    root = Path(tempfile.mkdtemp(prefix="private-", dir=world.top))
    root.chmod(0o755)
    return root


@needs_root
def test_links_planted_while_our_build_directory_was_open_are_refused(
    world: World, private_root: Path, tmp_path: Path
) -> None:
    plan = world.plan("trust_victim", private_root)
    build_dir = Path(plan.build_directory)
    build_dir.mkdir(mode=0o777)
    build_dir.chmod(0o777)  # ours, but anyone could write it for a while
    victim = tmp_path / "victim.conf"
    victim.write_text("root's own file\n")
    lock_target = tmp_path / "created-by-lock"
    as_nobody(
        f"ln -s '{lock_target}' '{build_dir}/anyaccel.lock'\n"
        f"ln -s '{victim}' '{build_dir}/build.ninja'\n"
    )
    outcome = world.load(private_root, "trust_victim")
    kind, message, path = outcome["trust_victim"].split(" | ")
    assert kind == "UntrustedCacheError" and path == str(build_dir / "anyaccel.lock")
    assert "lock file" in message and "it is a symbolic link" in message
    assert "made it private (0700)" in outcome["stderr"]  # the directory was repaired, loudly
    assert stat.S_IMODE(build_dir.stat().st_mode) == 0o700
    assert victim.read_text() == "root's own file\n" and not lock_target.exists()


@needs_root
def test_another_users_build_in_our_open_build_directory_is_refused(
    world: World, private_root: Path
) -> None:
    plan = world.plan("trust_victim", private_root)
    build_dir = Path(plan.build_directory)
    build_dir.mkdir()
    build_dir.chmod(0o777)
    world.plant_build(build_dir, plan, make="true")
    outcome = world.load(private_root, "trust_victim")
    kind, message, path = outcome["trust_victim"].split(" | ")
    assert kind == "UntrustedCacheError"
    assert path == str(build_dir / "anyaccel-build.json")
    assert "belongs to another user (owned by uid 65534" in message
    assert not world.marker.exists()


@needs_root
def test_our_library_others_could_write_is_rebuilt_never_loaded(
    world: World, private_root: Path
) -> None:
    plan = world.plan("trust_own", private_root)
    build_dir = Path(plan.build_directory)
    build_dir.mkdir(mode=0o755)
    shutil.copy(world.evil, plan.library_path)  # root's file, but anyone may write it
    os.chmod(plan.library_path, 0o666)
    (build_dir / "anyaccel-build.json").write_text(
        json.dumps({"key": plan.key, "library_bytes": world.evil.stat().st_size})
    )
    outcome = world.load(private_root, "trust_own")
    assert outcome["trust_own"] == "42", outcome
    assert "others could have changed it" in outcome["stderr"]
    assert not world.marker.exists()
    assert stat.S_IMODE(os.stat(plan.library_path).st_mode) & 0o022 == 0


# ------------------------------------------------------------------ the rule, piece by piece
def test_build_home_is_the_root_unless_others_may_write_it(tmp_path: Path) -> None:
    private, shared = tmp_path / "private", tmp_path / "shared"
    private.mkdir(mode=0o755)
    shared.mkdir()
    shared.chmod(0o1777)
    assert trust.build_home(private) == private
    assert trust.build_home(shared) == shared / f"anyaccel-{os.geteuid()}"
    assert trust.build_home(tmp_path / "missing") == tmp_path / "missing"


def test_open_home_gives_the_checked_directory_builds_go_in(tmp_path: Path) -> None:
    private, shared = tmp_path / "private", tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    for root in (private, shared):
        fd = trust.open_home(root, create=True)
        try:
            opened, home = os.fstat(fd), trust.build_home(root).stat()
            assert (opened.st_dev, opened.st_ino) == (home.st_dev, home.st_ino)
        finally:
            os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    # made missing: only the owner writes, everyone reads (what root builds loads for all)
    assert stat.S_IMODE(private.stat().st_mode) == 0o755 & ~umask
    assert stat.S_IMODE((shared / f"anyaccel-{os.geteuid()}").stat().st_mode) == 0o700
    with pytest.raises(FileNotFoundError):
        trust.open_home(tmp_path / "missing", create=False)


def test_a_link_is_never_opened_as_a_cache_file(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x")
    os.symlink(tmp_path / "real", tmp_path / "link")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(UntrustedCacheError, match="it is a symbolic link"):
            trust.open_to_read("link", dir_fd=fd, display=tmp_path / "link", what="library")
        with pytest.raises(UntrustedCacheError, match=r"lock file .* symbolic link"):
            trust.open_lock("link", dir_fd=fd, display=tmp_path / "link")
    finally:
        os.close(fd)


def test_a_planted_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "anyaccel-build.json")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.alarm(20)  # an open that blocks on the FIFO would hang here
    try:
        with pytest.raises(UntrustedCacheError, match="not a regular file"):
            trust.open_to_read("anyaccel-build.json", dir_fd=fd, display="stamp", what="record")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.close(fd)


def test_our_directory_others_may_write_is_made_private_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "build").mkdir()
    (tmp_path / "build").chmod(0o777)
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    caplog.set_level(logging.WARNING, logger="anyaccel.ops")
    try:
        fd = trust.open_directory(
            "build", dir_fd=parent, display="b", what="build directory", create=False
        )
        os.close(fd)
    finally:
        os.close(parent)
    assert stat.S_IMODE((tmp_path / "build").stat().st_mode) == 0o700
    assert "made it private (0700)" in caplog.text


def test_before_a_build_our_files_others_may_write_are_deleted_and_hard_links_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "main.o").write_text("maybe changed by others")
    (tmp_path / "main.o").chmod(0o666)
    (tmp_path / "kept.o").write_text("ours")
    (tmp_path / "kept.o").chmod(0o644)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        trust.check_before_build(fd, tmp_path, keep="anyaccel.lock")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.o"]
        os.link(tmp_path / "kept.o", tmp_path / "build.ninja")
        with pytest.raises(UntrustedCacheError, match=r"it has 2 names \(hard links\)"):
            trust.check_before_build(fd, tmp_path, keep="anyaccel.lock")
    finally:
        os.close(fd)


def test_removing_a_build_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the cache's")
    build = tmp_path / "build"
    (build / "sub").mkdir(parents=True)
    (build / "sub" / "x.o").write_text("")
    os.symlink(outside, build / "link")
    (build / "anyaccel.lock").write_text("")
    fd = os.open(build, os.O_RDONLY | os.O_DIRECTORY)
    try:
        trust.remove_entries(fd, keep="anyaccel.lock")
    finally:
        os.close(fd)
    assert [p.name for p in build.iterdir()] == ["anyaccel.lock"]
    assert (outside / "keep.txt").read_text() == "not the cache's"


def test_a_built_library_loses_group_and_other_write(tmp_path: Path) -> None:
    library = tmp_path / "op.so"
    library.write_bytes(b"")
    library.chmod(0o775)  # what a umask of 002 leaves
    fd = os.open(library, os.O_RDONLY)
    try:
        trust.make_private_file(fd)
    finally:
        os.close(fd)
    assert stat.S_IMODE(library.stat().st_mode) == 0o755


def test_a_descriptor_path_names_the_open_file_even_after_a_swap(tmp_path: Path) -> None:
    (tmp_path / "checked").write_text("checked")
    fd = os.open(tmp_path / "checked", os.O_RDONLY)
    try:
        os.replace(tmp_path / "checked", tmp_path / "moved")
        (tmp_path / "checked").write_text("swapped in")
        path = trust.descriptor_path(fd)
        if path is None:
            pytest.skip("no /proc/self/fd here")
        assert Path(path).read_text() == "checked"
    finally:
        os.close(fd)


def test_a_refusal_names_the_path_the_owner_the_mode_and_the_fix(tmp_path: Path) -> None:
    status = os.stat(tmp_path)
    error = trust.refusal(
        tmp_path, "root", f"it belongs to another user ({trust.describe(status)})"
    )
    assert error.path == str(tmp_path)
    message = str(error)
    assert f"root {tmp_path}: it belongs to another user (owned by uid {status.st_uid}" in message
    assert f"mode {stat.S_IMODE(status.st_mode):04o}" in message
    assert "export TORCH_EXTENSIONS_DIR=$HOME/.cache/torch_extensions" in message
    assert os.geteuid() in trust.trusted_uids() and 0 in trust.trusted_uids()
