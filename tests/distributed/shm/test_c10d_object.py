"""Which c10d object an ``anyaccel_shm`` group gets: the rule, and real ranks beside another
device's backend."""

from __future__ import annotations

import json
import textwrap

import pytest

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.shm import factory
from anyaccel.distributed.shm.backend import (
    C10dObject,
    c10d_object_for,
)

from ..ranks import finish, multiprocess, shm_entries, start_ranks
from .ddp_train import with_ddp_train


@pytest.mark.parametrize(
    ("spec", "default_spec", "gets"),
    [
        ("anyaccel_shm", None, C10dObject.WHOLE_GROUP),
        ("ANYACCEL_SHM", None, C10dObject.WHOLE_GROUP),
        ("cpu:anyaccel_shm", None, C10dObject.WHOLE_GROUP),
        ("cpu:anyaccel_shm,cuda:gloo", None, C10dObject.CPU_BACKEND),
        ("cuda:nccl, cpu:anyaccel_shm", None, C10dObject.CPU_BACKEND),  # either order
        ("anyaccel_shm", "cpu:anyaccel_shm,cuda:nccl", C10dObject.WHOLE_GROUP),  # named: wins
        # torch called directly (no spec): a new_group() inherits the default group's
        (None, "cpu:anyaccel_shm,cuda:nccl", C10dObject.CPU_BACKEND),
        (None, "anyaccel_shm", C10dObject.WHOLE_GROUP),
        # a default group without anyaccel_shm: this group named it itself, spec unknown
        (None, "cpu:gloo,cuda:nccl", C10dObject.WHOLE_GROUP),
        (None, None, C10dObject.WHOLE_GROUP),  # no default group: checked at the first collective
    ],
)
def test_one_rule_says_which_c10d_object_a_spec_gets(
    spec: str | None, default_spec: str | None, gets: C10dObject
) -> None:
    assert c10d_object_for(spec, default_spec) is gets


def test_a_backend_class_that_cannot_be_built_is_refused_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from anyaccel.ops.cpu.shm_c10d_backend import ShmC10dBackendBuilder
    from anyaccel.ops.errors import OpBuildError

    def broken(self: object, verbose: bool = False) -> None:
        raise OpBuildError("g++ failed: shm_c10d_backend.cpp:1: error")

    monkeypatch.setattr(ShmC10dBackendBuilder, "load", broken)
    with pytest.raises(DistributedSetupError, match=r"g\+\+ failed.*new_group\(backend="):
        factory._device_backend_module(required=True)
    monkeypatch.setattr(factory, "_warned_python_form", False)
    with caplog.at_level("WARNING"):
        assert factory._device_backend_module(required=False) is None
        assert factory._device_backend_module(required=False) is None
    assert caplog.text.count("runs as a Python ProcessGroup instead") == 1  # once per process


SPECS = textwrap.dedent(
    """
    import json
    import torch, torch.distributed as dist
    from anyaccel.distributed import DistributedSetupError, init_distributed
    from anyaccel.distributed.shm.backend import making_group
    init_distributed("anyaccel_shm")
    mixed = "cpu:anyaccel_shm,cuda:gloo"
    result = {"world": type(dist.group.WORLD).__name__,
              "plain": type(dist.new_group(backend="anyaccel_shm")).__name__}
    direct = dist.new_group(backend=mixed)  # torch tells the factory no spec
    result["direct"] = type(direct).__name__
    try:
        dist.all_reduce(torch.ones(4), group=direct)
        result["direct_all_reduce"] = "ran"
    except DistributedSetupError as error:
        result["direct_all_reduce"] = str(error)
    with making_group(mixed):  # what init_distributed(mixed) says to the factory
        named = dist.new_group(backend=mixed)
    result["named"] = type(named).__name__
    total = torch.ones(4) * (dist.get_rank() + 1)
    dist.all_reduce(total, group=named)
    result["named_sum"] = total.tolist()
    dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    """
)


@multiprocess
def test_each_spec_gets_the_c10d_object_the_rule_names() -> None:
    """Where the c10d Backend builds (here), every spec gets torch's group over it: anyaccel_shm
    alone, a mixed spec named through anyaccel, and one torch made directly (which therefore
    runs, beside the other backend, instead of being refused as the Python form refuses it)."""
    for out in finish(start_ranks(SPECS)):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["world"] == result["plain"] == "ProcessGroup", result
        assert result["direct"] == "ProcessGroup", result
        assert result["direct_all_reduce"] == "ran", result
        assert result["named"] == "ProcessGroup", result
        assert result["named_sum"] == [3.0] * 4, result


# --- four ranks: every collective x dtype x op x size against the rank-order reference -------
BESIDE = textwrap.dedent(
    """
    import gc, json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    spec = "cpu:anyaccel_shm,cuda:gloo"  # gloo stands in for nccl: any torch builds it for cuda
    info = init_distributed(backend=spec, timeout=timedelta(seconds=60))
    rank, size = info.rank, info.world_size
    world = dist.group.WORLD
    cpu, cuda = world._get_backend(torch.device("cpu")), world._get_backend(torch.device("cuda"))
    shm = cpu.group  # the Python group the c10d Backend forwards to
    kernel_calls = {}
    class Counting:
        def __init__(self, inner):
            self.inner = inner
        def __getattr__(self, name):
            method = getattr(self.inner, name)
            if name in ("failed", "close", "abandon"):
                return method
            def call(*args):
                kernel_calls[name] = kernel_calls.get(name, 0) + 1
                return method(*args)
            return call
    shm.shm.communicator = Counting(shm.shm.communicator)
    gloo = dist.new_group(backend="gloo")
    failures = []
    def same(name, ours, theirs):
        ours = ours if isinstance(ours, list) else [ours]
        theirs = theirs if isinstance(theirs, list) else [theirs]
        if not all(torch.equal(a, b) for a, b in zip(ours, theirs)) or len(ours) != len(theirs):
            failures.append(name)
    def data(n, seed, dtype=torch.float32):
        gen = torch.Generator().manual_seed(seed * 10 + rank)
        if dtype.is_floating_point:
            return torch.randn(n, generator=gen).to(dtype)
        return torch.randint(-50, 50, (n,), generator=gen).to(dtype)
    R = dist.ReduceOp
    for op in (R.SUM, R.MAX, R.AVG):
        a = data(3001, 1); b = a.double() if op == R.AVG else a.clone()
        dist.all_reduce(a, op=op)
        dist.all_reduce(b, op=R.SUM if op == R.AVG else op, group=gloo)
        same(f"all_reduce {op}", a, b.div_(size).float() if op == R.AVG else b)
    a = data(1001, 2, torch.int64); b = a.clone()  # integers: the group's own gloo fallback
    dist.all_reduce(a); dist.all_reduce(b, group=gloo); same("all_reduce int64", a, b)
    a = data(2000, 3, torch.bfloat16); b = a.clone()
    work = dist.all_reduce(a, async_op=True); work.wait(); dist.all_reduce(b, group=gloo)
    same("all_reduce async", [a, work.get_future().value()[0]], [b, b])
    x = data(1000, 4)
    ours = [torch.empty(1000) for _ in range(size)]
    theirs = [torch.empty(1000) for _ in range(size)]
    dist.all_gather(ours, x); dist.all_gather(theirs, x, group=gloo)
    same("all_gather", ours, theirs)
    ours = torch.empty(1000 * size); theirs = torch.empty_like(ours)
    dist.all_gather_into_tensor(ours, x); dist.all_gather_into_tensor(theirs, x, group=gloo)
    same("all_gather_into_tensor", ours, theirs)
    ours = torch.empty(500); theirs = torch.empty(500)
    dist.reduce_scatter_tensor(ours, x); dist.reduce_scatter_tensor(theirs, x, group=gloo)
    same("reduce_scatter_tensor", ours, theirs)
    ours = torch.empty(500)
    dist.reduce_scatter(ours, list(x.chunk(size))); same("reduce_scatter", ours, theirs)
    a = data(777, 5); b = a.clone()
    dist.broadcast(a, 1); dist.broadcast(b, 1, group=gloo); same("broadcast", a, b)
    dist.barrier()
    # anyaccel's own entry point on torch's group: the same segment, not a second set-up
    from anyaccel.distributed import all_reduce as anyaccel_all_reduce, shm_all_reduce_status
    a = data(999, 8); b = a.clone()
    anyaccel_all_reduce(a); dist.all_reduce(b, group=gloo); same("anyaccel all_reduce", a, b)
    shared = shm_all_reduce_status(world)
    native = dict(kernel_calls, in_cpp=cpu.native_all_reduces, cpp=cpu.native_calls)
    # what the c10d Backend hands to gloo directly
    x = data(6 * size, 6)
    ours, theirs = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(ours, x); dist.all_to_all_single(theirs, x, group=gloo)
    same("all_to_all_single", ours, theirs)
    if rank == 0:
        dist.send(torch.arange(5.0), 1)
    else:
        got = torch.empty(5); dist.recv(got, 0); same("send/recv", got, torch.arange(5.0))
    bucket = [torch.empty(3) for _ in range(size)] if rank == 0 else None
    dist.gather(torch.full((3,), float(rank)), bucket, dst=0)
    if rank == 0:
        same("gather", bucket, [torch.full((3,), float(r)) for r in range(size)])
    a = data(10, 7); b = a.clone()
    dist.reduce(a, 0, op=R.MAX); dist.reduce(b, 0, op=R.MAX, group=gloo)
    if rank == 0:
        same("reduce", a, b)
    # unchanged DDP code: the same losses as on gloo
    # @DDP_TRAIN@
    (ours, _), (theirs, _) = train(None), train(gloo)
    if ours != theirs or len(set(ours)) < 3:
        failures.append(f"DDP losses {ours} vs {theirs}")
    # ranks that disagree: the group's own error, whole, on every rank
    try:
        dist.all_reduce(torch.ones(4 * (rank + 1)))
        mismatch = "no error"
    except CollectiveError as error:
        mismatch = str(error)
    # a subgroup of the same spec, made and destroyed: no mapping, fd or thread is left
    def snapshot():
        maps = open("/proc/self/maps").read().count("anyaccel-shm")
        return [len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), maps]
    seen = []
    for cycle in range(8):
        sub = dist.new_group(backend=spec)
        t = torch.ones(100)
        dist.all_reduce(t, group=sub)
        if t[0] != size:
            failures.append(f"subgroup {cycle}")
        dist.destroy_process_group(sub)
        del sub
        gc.collect()
        seen.append(snapshot())
    result = {
        "types": [type(world).__name__, type(cpu).__name__, type(cuda).__name__],
        "backend": dist.get_backend(), "status": shm.status, "native": native,
        "failures": failures, "mismatch": mismatch, "first": seen[1], "last": seen[-1],
        "shared": shared,
    }
    dist.destroy_process_group()
    del world, cpu, cuda, shm  # torch < 2.5 shuts no plugin backend down: the last reference does
    gc.collect()
    result["mapped_after"] = snapshot()[2]
    print(json.dumps(result), flush=True)
    """
)
BESIDE = with_ddp_train(BESIDE)


@multiprocess
def test_beside_another_devices_backend_it_serves_the_cpu_and_leaves_that_device_its_own() -> None:
    # "cpu:anyaccel_shm,cuda:nccl": torch registers the c10d Backend for the CPU only
    before = shm_entries()
    outputs = finish(start_ranks(BESIDE))
    assert shm_entries() - before == set()
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["failures"] == [], result["failures"]
        assert result["types"] == ["ProcessGroup", "ShmBackend", "ProcessGroupGloo"]
        assert result["backend"] == "cpu:anyaccel_shm,cuda:gloo"
        assert result["status"] == "shared memory"
        # native: 3 all_reduce + bf16 async; 2 gathers (+1 the fallback's announcement);
        # 2 reduce-scatters; broadcast; barrier
        # 5 all_reduce: the 4 through torch run by the c10d Backend in C++, without Python,
        # and anyaccel's own on the same segment
        native, cpp = result["native"], result["native"]["cpp"]
        assert native["in_cpp"] == 4 == cpp["all_reduce"], native
        assert native["all_reduce"] == 1, native
        assert result["shared"] == "shared memory"
        # reduce_scatter_tensor and broadcast in C++ too; the list form of reduce_scatter
        # (a concatenation first) through the Python group
        assert cpp["reduce_scatter"] == 1 and native["reduce_scatter"] == 1, native
        assert cpp["broadcast"] == 1 and "broadcast" not in native, native
        assert cpp["all_gather"] == 1 and native["barrier"] == 1, native
        assert "ranks called all_reduce with different tensors" in result["mismatch"]
        # cycles leak nothing: no count grows (a connection torch closes late may shrink one)
        pairs = zip(result["last"], result["first"], strict=True)
        assert all(last <= first for last, first in pairs), result
        assert result["mapped_after"] == 0  # destroy_process_group released the segment
