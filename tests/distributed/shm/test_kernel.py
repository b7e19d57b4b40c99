"""The shared-memory all-reduce kernel, driven in one process: one thread per rank, one segment.

The compiled communicator releases the GIL while it waits, so threads stand in for ranks here;
the multi-process behaviour (torch.distributed set-up, dying ranks) is in
tests/distributed/shm/test_collectives.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from .kernel_ranks import (
    SLOT,
    communicators,
    dtype_code,
    load_kernel_or_skip,
    on_every_rank,
    op_code,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux memfd")


@pytest.fixture(scope="module")
def shm() -> ModuleType:
    return load_kernel_or_skip()


OPS = {"sum": ("SUM", torch.sum), "product": ("PRODUCT", torch.prod), "min": ("MIN", torch.amin),
       "max": ("MAX", torch.amax)}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("numel", [0, 1, 7, 40_000])
def test_sum_matches_a_float32_reference(
    shm: ModuleType, dtype: torch.dtype, world_size: int, numel: int
) -> None:
    comms = communicators(shm, world_size)
    inputs = [torch.randn(numel, generator=torch.Generator().manual_seed(r)).to(dtype)
              for r in range(world_size)]  # fmt: skip
    outputs = [t.clone() for t in inputs]
    results = on_every_rank(
        world_size,
        lambda r: comms[r].all_reduce(
            outputs[r].data_ptr(), numel, dtype_code(dtype), op_code("SUM"), 30.0, 1
        ),
    )
    assert results == [None] * world_size
    # accumulated in fp32 in rank order, rounded once: exactly fp32's sum, then the dtype
    expected = inputs[0].float()
    for t in inputs[1:]:
        expected = expected + t.float()
    for out in outputs:
        assert torch.equal(out, expected.to(dtype))


def bf16_rounded(values: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 bits as torch's scalar conversion rounds: nearest even, NaN -> 0x7FC0."""
    bits = values.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return torch.where(values.isnan(), torch.full_like(rounded, 0x7FC0), rounded)


@pytest.mark.parametrize("op, combine", [("SUM", torch.add), ("PRODUCT", torch.mul)])
@pytest.mark.parametrize("rank_pair", [(0, 1), (1, 0)])
def test_two_rank_bf16_is_exact_on_every_bit_pattern(
    shm: ModuleType, op: str, combine: Callable[..., torch.Tensor], rank_pair: tuple[int, int]
) -> None:
    """Every bf16 bit pattern (zeros, subnormals, infinities, NaNs, rounding ties) against a
    shuffled partner, with a ragged tail: torch's scalar rounding bit for bit, and the same bits
    on both ranks though each reduces from its own tensor (rank 0's value comes first)."""
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    partner = every[torch.randperm(1 << 16, generator=torch.Generator().manual_seed(3))]
    pair = [every.view(torch.bfloat16), partner.view(torch.bfloat16)]
    numel = (1 << 16) - 5  # not a multiple of the vector width
    inputs = [pair[rank_pair[r]][:numel].clone() for r in (0, 1)]
    outputs = [t.clone() for t in inputs]
    comms = communicators(shm, 2)
    bf16, code = dtype_code(torch.bfloat16), op_code(op)
    on_every_rank(
        2, lambda r: comms[r].all_reduce(outputs[r].data_ptr(), numel, bf16, code, 30.0, 1)
    )
    expected = bf16_rounded(combine(inputs[0].float(), inputs[1].float()))
    for out in outputs:
        got = out.view(torch.int16).to(torch.int64) & 0xFFFF
        assert torch.equal(got, expected), int((got != expected).sum())


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_matches_torch(shm: ModuleType, name: str) -> None:
    op, reference = OPS[name]
    code = op_code(op)
    comms = communicators(shm, 2)
    inputs = [torch.rand(50_000, generator=torch.Generator().manual_seed(r)) + 0.5 for r in (0, 1)]
    outputs = [t.clone() for t in inputs]
    on_every_rank(2, lambda r: comms[r].all_reduce(outputs[r].data_ptr(), 50_000, 0, code, 30.0, 1))
    expected = reference(torch.stack(inputs), dim=0)
    assert torch.equal(outputs[0], expected) and torch.equal(outputs[1], expected)


def test_many_chunks_with_threads_give_identical_results_on_every_rank(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    numel = 10 * SLOT // 4 + 3
    outputs = [torch.randn(numel, generator=torch.Generator().manual_seed(r)) for r in (0, 1)]
    expected = outputs[0] + outputs[1]
    on_every_rank(2, lambda r: comms[r].all_reduce(outputs[r].data_ptr(), numel, 0, 0, 30.0, 2))
    assert torch.equal(outputs[0], expected) and torch.equal(outputs[1], expected)


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("numel", [15, 16, 1000, 4096])
def test_small_fp32_from_unaligned_views_is_exact(
    shm: ModuleType, world_size: int, numel: int
) -> None:
    """Small fp32 calls (streamed into the slot) from views 4 bytes off any cache line, with and
    without a ragged tail: rank order's sum on every rank, and the bytes around untouched."""
    comms = communicators(shm, world_size)
    bases = [torch.randn(numel + 2, generator=torch.Generator().manual_seed(r))
             for r in range(world_size)]  # fmt: skip
    inputs = [b[1 : numel + 1].clone() for b in bases]
    views = [b[1 : numel + 1] for b in bases]
    assert all(v.data_ptr() % 64 != 0 for v in views)
    edges = [(b[0].item(), b[-1].item()) for b in bases]
    on_every_rank(
        world_size, lambda r: comms[r].all_reduce(views[r].data_ptr(), numel, 0, 0, 30.0, 1)
    )
    expected = inputs[0].clone()
    for t in inputs[1:]:
        expected = expected + t
    for base, view, edge in zip(bases, views, edges, strict=True):
        assert torch.equal(view, expected)
        assert (base[0].item(), base[-1].item()) == edge


def test_waiting_sees_an_oversubscribed_machine(shm: ModuleType) -> None:
    """With more busy processes than CPUs, the kernel's wait reads the machine as oversubscribed
    (and sleeps instead of yielding its core for a whole time slice)."""
    assert isinstance(shm.oversubscribed(), bool)
    spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
    busy = [
        subprocess.Popen([sys.executable, "-c", spin]) for _ in range((os.cpu_count() or 1) + 2)
    ]
    try:
        deadline = time.monotonic() + 20
        seen = False
        while not seen and time.monotonic() < deadline:
            seen = shm.oversubscribed()
            time.sleep(0.05)
        assert seen
    finally:
        for process in busy:
            process.kill()
            process.wait(timeout=30)


def test_repeated_collectives_reuse_the_slots(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    values = [torch.zeros(1000), torch.zeros(1000)]

    def rounds(rank: int) -> None:
        for step in range(50):
            values[rank].fill_(step + rank)
            comms[rank].all_reduce(values[rank].data_ptr(), 1000, 0, 0, 30.0, 1)
            assert values[rank][0].item() == 2 * step + 1

    assert on_every_rank(2, rounds) == [None, None]


def test_barrier_waits_for_every_rank(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    arrived: list[float] = []

    def enter(rank: int) -> float:
        if rank == 1:
            time.sleep(0.3)
        arrived.append(time.monotonic())
        comms[rank].barrier(30.0)
        return time.monotonic()

    left = on_every_rank(2, enter)
    assert min(left) >= max(arrived)  # type: ignore[type-var]


def test_different_sizes_fail_on_every_rank(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    tensors = [torch.ones(10), torch.ones(11)]
    results = on_every_rank(
        2, lambda r: comms[r].all_reduce(tensors[r].data_ptr(), 10 + r, 0, 0, 30.0, 1)
    )
    for result in results:
        assert isinstance(result, RuntimeError) and "different tensors" in str(result)
    with pytest.raises(RuntimeError, match="failed earlier"):
        comms[0].all_reduce(tensors[0].data_ptr(), 10, 0, 0, 30.0, 1)


def test_a_rank_that_never_arrives_times_out(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    tensor = torch.ones(4)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"timed out after 0\.5 s .*rank\(s\) 1"):
        comms[0].all_reduce(tensor.data_ptr(), 4, 0, 0, 0.5, 1)
    assert time.monotonic() - start < 10


def test_a_dead_peer_is_detected_before_the_timeout(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    comms[0].set_peer_pids([os.getpid(), dead.pid])
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"rank 1 \(pid {dead.pid}\) died"):
        comms[0].all_reduce(torch.ones(4).data_ptr(), 4, 0, 0, 60.0, 1)
    assert time.monotonic() - start < 10


def test_an_unreaped_dead_peer_counts_as_dead(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # exited but not yet waited for: a zombie
        with open(f"/proc/{zombie.pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    try:
        comms[0].set_peer_pids([os.getpid(), zombie.pid])
        with pytest.raises(RuntimeError, match="died"):
            comms[0].all_reduce(torch.ones(4).data_ptr(), 4, 0, 0, 60.0, 1)
    finally:
        zombie.wait(timeout=60)


def test_a_failing_peer_stops_the_others_at_once(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    tensor = torch.ones(4)

    def rank(r: int) -> object:
        if r == 1:
            time.sleep(0.2)
            comms[1].abandon()
            return None
        comms[0].all_reduce(tensor.data_ptr(), 4, 0, 0, 60.0, 1)
        return None

    start = time.monotonic()
    results = on_every_rank(2, rank)
    assert isinstance(results[0], RuntimeError) and "gave up" in str(results[0])
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    "arguments",
    [(-1, 0, 0), (4, 7, 0), (4, 0, 9)],
    ids=["negative size", "unknown dtype", "unknown op"],
)
def test_bad_arguments_are_refused(shm: ModuleType, arguments: tuple[int, int, int]) -> None:
    comm = communicators(shm, 1)[0]
    numel, dtype, op = arguments
    with pytest.raises(ValueError, match="unknown dtype or op code, or negative size"):
        comm.all_reduce(torch.ones(4).data_ptr(), numel, dtype, op, 1.0, 1)


def test_a_segment_of_another_layout_is_refused(shm: ModuleType) -> None:
    size = shm.Communicator.required_bytes(2, SLOT)
    fd = os.memfd_create("anyaccel-test", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        shm.Communicator(fd, size, 2, 0, SLOT, True)
        with pytest.raises(RuntimeError, match="does not hold this group's layout"):
            shm.Communicator(fd, size, 2, 1, SLOT // 2, False)
    finally:
        os.close(fd)


def test_deepspeeds_name_loads_the_kernel_with_deepspeeds_interface(shm: ModuleType) -> None:
    from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder

    module = ShareMemCommBuilder().load()
    assert module.vector_kernel_level() == 2
    assert callable(module.initialize)
    assert module.Communicator is shm.Communicator  # one build for both names
    assert hasattr(torch.ops.deepspeed, "inference_all_reduce_")
    assert hasattr(torch.ops.deepspeed, "inference_all_reduce")


def test_the_kernel_alone_has_no_deepspeed_interface(shm: ModuleType) -> None:
    assert not hasattr(shm, "initialize") and not hasattr(shm, "vector_kernel_level")


def test_builder_is_found_under_deepspeeds_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel import get_accelerator

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    assert builder is not None
    assert builder.NAME == "deepspeed_shm_comm"
    assert builder.absolute_name() == "deepspeed.ops.comm.deepspeed_shm_comm_op"


# A liveness probe held up for 300 ms, as a rank descheduled on a loaded machine between
# reading a peer's progress and probing its process: meanwhile the peer publishes its part
# and exits. Once only ~1 job in 50 hit that window, and the slower rank reported a peer that
# had finished correctly as dead.
SLOW_PROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

int kill(pid_t pid, int sig) {
  static int (*real)(pid_t, int) = 0;
  if (!real) real = (int (*)(pid_t, int))dlsym(RTLD_NEXT, "kill");
  if (sig == 0) usleep(300000);
  return real(pid, sig);
}
"""

PEER_EXITS_AFTER_PUBLISHING = """
import os, subprocess, sys, threading, time
import torch
from anyaccel.ops.cpu.shm_comm import ShmCommBuilder

shm = ShmCommBuilder().load()
slot = 64 << 10
size = shm.Communicator.required_bytes(2, slot)
fd = os.memfd_create("anyaccel-test", os.MFD_CLOEXEC)
os.ftruncate(fd, size)
comms = [shm.Communicator(fd, size, 2, r, slot, r == 0) for r in range(2)]
peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
comms[0].set_peer_pids([os.getpid(), peer.pid])  # rank 1 "runs" in the peer process
comms[1].set_peer_pids([os.getpid(), os.getpid()])
tensors = [torch.full((4,), 1.0), torch.full((4,), 2.0)]
outcome = []

def rank0():
    try:
        comms[0].all_reduce(tensors[0].data_ptr(), 4, 0, 0, 60.0, 1)
        outcome.append(tensors[0].tolist())
    except RuntimeError as error:
        outcome.append(str(error))

waiting = threading.Thread(target=rank0)
waiting.start()
time.sleep(0.5)  # rank 0 now waits for rank 1, mostly inside a held-up liveness probe
comms[1].all_reduce(tensors[1].data_ptr(), 4, 0, 0, 60.0, 1)  # rank 1 publishes, finishes
peer.kill()  # ... and its process exits at once
peer.wait()
waiting.join(60)
print(outcome, tensors[1].tolist())
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the probe shim")
def test_a_peer_that_published_and_then_exited_is_not_reported_dead(
    shm: ModuleType, tmp_path: Path
) -> None:
    source = tmp_path / "slow_probe.c"
    source.write_text(SLOW_PROBE)
    shim = tmp_path / "slow_probe.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", PEER_EXITS_AFTER_PUBLISHING],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "LD_PRELOAD": str(shim)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[[3.0, 3.0, 3.0, 3.0]] [3.0, 3.0, 3.0, 3.0]", done.stdout


# --- all_gather, broadcast, reduce_scatter on the same slots ----------------------------------
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("numel", [0, 1, 7, 40_000])  # 40,000 fp32: several 64 KiB chunks
def test_all_gather_broadcast_and_reduce_scatter_equal_torch(
    shm: ModuleType, world_size: int, numel: int
) -> None:
    comms = communicators(shm, world_size)
    inputs = [torch.randn(numel) * (r + 1) for r in range(world_size)]
    gathered = [torch.full((numel * world_size,), -1.0) for _ in range(world_size)]
    on_every_rank(world_size, lambda r: comms[r].all_gather(
        inputs[r].data_ptr(), [gathered[r].data_ptr() + q * numel * 4 for q in range(world_size)],
        numel * 4, 0, 30.0, 1))  # fmt: skip
    for result in gathered:
        assert torch.equal(result, torch.cat(inputs))
    for root in range(world_size):
        data = [torch.randn(numel, dtype=torch.float64) for _ in range(world_size)]
        expected = data[root].clone()
        on_every_rank(world_size, lambda r, d=data, root=root: comms[r].broadcast(
            d[r].data_ptr(), numel * 8, root, 1, 30.0, 1))  # fmt: skip
        assert all(torch.equal(d, expected) for d in data)
    for dtype in (torch.float32, torch.bfloat16):
        for op, reduce in OPS.values():
            code = op_code(op)
            full = [(torch.rand(numel * world_size) + 0.5).to(dtype) for _ in range(world_size)]
            outs = [torch.full((numel,), -7.0, dtype=dtype) for _ in range(world_size)]
            on_every_rank(world_size, lambda r, c=code, f=full, o=outs, d=dtype: comms[r]
                .reduce_scatter(f[r].data_ptr(), o[r].data_ptr(), numel, dtype_code(d), c,
                                30.0, 1))  # fmt: skip
            # in rank order, accumulated in fp32 and rounded once, as the all-reduce does
            stacked = torch.stack([f.float() for f in full])
            folded = stacked[0]
            for row in stacked[1:]:
                folded = reduce(torch.stack([folded, row]), 0)
            expected_all = folded.to(dtype).chunk(world_size) if numel else None
            for r in range(world_size):
                want = expected_all[r] if expected_all else torch.empty(0, dtype=dtype)
                assert torch.equal(outs[r], want), (dtype, code, r)


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("numel", [7, 40_000])
def test_reduce_scatter_in_place_equals_out_of_place(
    shm: ModuleType, world_size: int, numel: int
) -> None:
    """Output = this rank's own chunk of its input (in place, as NCCL allows): every rank reads
    its own part from its input while writing there, and gets the out-of-place result."""
    comms = communicators(shm, world_size)
    full = [torch.randn(numel * world_size, generator=torch.Generator().manual_seed(r))
            for r in range(world_size)]  # fmt: skip
    folded = full[0].clone()
    for row in full[1:]:  # rank order, as the kernel sums
        folded = folded + row
    expected = folded.chunk(world_size)
    on_every_rank(world_size, lambda r: comms[r].reduce_scatter(
        full[r].data_ptr(), full[r].data_ptr() + r * numel * 4, numel, 0, 0, 30.0, 1))  # fmt: skip
    for r in range(world_size):
        assert torch.equal(full[r].chunk(world_size)[r], expected[r]), r


@pytest.mark.parametrize("shift", [-3, 0, 5])
def test_all_gather_from_a_shifted_overlap_of_its_output_is_exact(
    shm: ModuleType, shift: int
) -> None:
    """An input overlapping the output other than exactly as this rank's own part (shift 0),
    over several chunks: the kernel gathers from a copy of it (straight from the input, a later
    chunk read bytes an earlier chunk had overwritten)."""
    comms = communicators(shm, 2)
    numel = 40_000  # several 64 KiB chunks
    full = [torch.randn(numel * 2 + 16, generator=torch.Generator().manual_seed(r)) for r in (0, 1)]
    starts = [8 + r * numel + shift for r in (0, 1)]  # the own part, shifted by `shift`
    inputs = [full[r][starts[r] : starts[r] + numel].clone() for r in (0, 1)]
    on_every_rank(2, lambda r: comms[r].all_gather(
        full[r].data_ptr() + starts[r] * 4, [full[r].data_ptr() + (8 + q * numel) * 4
                                              for q in (0, 1)], numel * 4, 0, 30.0, 1
    ))  # fmt: skip
    for r in (0, 1):
        assert torch.equal(full[r][8 : 8 + 2 * numel], torch.cat(inputs)), r


@pytest.mark.parametrize("shift", [-3, 5])
def test_reduce_scatter_into_a_shifted_overlap_of_its_input_is_exact(
    shm: ModuleType, shift: int
) -> None:
    """An output overlapping the input other than exactly in place, over several chunks: the
    kernel reduces into a buffer of its own and copies it out (reduced straight into the
    output, a later chunk read input an earlier chunk had overwritten)."""
    comms = communicators(shm, 2)
    numel = 40_000  # several 64 KiB chunks
    full = [torch.randn(numel * 2 + 16, generator=torch.Generator().manual_seed(r)) for r in (0, 1)]
    inputs = [f[8 : 8 + 2 * numel].clone() for f in full]
    expected = (inputs[0] + inputs[1]).chunk(2)
    starts = [8 + r * numel + shift for r in (0, 1)]  # the own part, shifted by `shift`
    on_every_rank(2, lambda r: comms[r].reduce_scatter(
        full[r].data_ptr() + 32, full[r].data_ptr() + starts[r] * 4, numel, 0, 0, 30.0, 1
    ))  # fmt: skip
    for r in (0, 1):
        assert torch.equal(full[r][starts[r] : starts[r] + numel], expected[r]), r


def test_ranks_calling_different_collectives_fail_on_every_rank(shm: ModuleType) -> None:
    comms = communicators(shm, 2)
    tensor, out = torch.ones(10), torch.empty(20)
    results = on_every_rank(2, lambda r: comms[r].all_gather(
        tensor.data_ptr(), [out.data_ptr(), out.data_ptr() + 40], 40, 0, 30.0, 1) if r == 0
        else comms[r].broadcast(
        tensor.data_ptr(), 40, 0, 0, 30.0, 1))  # fmt: skip
    for result in results:
        assert isinstance(result, RuntimeError) and "different tensors" in str(result)
    assert "op all_gather" in str(results[0]) and "broadcast from rank 0" in str(results[0])
    with pytest.raises(RuntimeError, match="failed earlier"):
        comms[0].all_gather(
            tensor.data_ptr(), [out.data_ptr(), out.data_ptr() + 40], 40, 0, 30.0, 1
        )
