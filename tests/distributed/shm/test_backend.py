"""The ``anyaccel_shm`` torch.distributed backend: in one process, and real ranks against gloo."""

from __future__ import annotations

import json
import signal
import textwrap
import time

import pytest
import torch.distributed as dist

from anyaccel.distributed import BACKEND_NAME, backend_choice
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.process_group import cpu_collectives
from anyaccel.distributed.shm import backend as backend_module
from anyaccel.distributed.shm.backend import (
    C10dObject,
    c10d_object_for,
    register_backend,
    shm_backend_wanted,
)
from anyaccel.errors import InvalidSettingError

from ..ranks import finish, free_port, multiprocess, shm_entries, start_ranks


def test_the_backend_is_registered_for_cpu_on_import() -> None:
    assert backend_module.backend_registered()
    assert dist.is_backend_available(BACKEND_NAME)
    register_backend()  # idempotent
    assert list(dist.Backend.backend_list).count(BACKEND_NAME) == 1


def test_a_torch_without_register_backend_devices_gets_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def old_register(name: object, func: object, extended_api: bool = False) -> None: ...

    monkeypatch.setattr(backend_module, "backend_registered", lambda: False)
    monkeypatch.setattr(dist.Backend, "register_backend", old_register)
    with pytest.raises(DistributedSetupError, match=r"upgrade to torch >= 2\.4.*'gloo'"):
        register_backend()


def test_the_environment_and_the_argument_turn_it_on_and_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANYACCEL_SHM_BACKEND", raising=False)
    assert shm_backend_wanted() == (
        True,
        "the default for CPU ranks on one node; ANYACCEL_SHM_BACKEND=0 keeps gloo",
    )
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "1")
    assert shm_backend_wanted() == (True, "ANYACCEL_SHM_BACKEND=1")
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "FALSE")  # any case, as every on/off variable
    assert shm_backend_wanted() == (False, "ANYACCEL_SHM_BACKEND=FALSE")
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "0")
    assert shm_backend_wanted() == (False, "ANYACCEL_SHM_BACKEND=0")
    assert shm_backend_wanted(True) == (True, "shm_backend=True")
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "enable")  # not a silent gloo: an error
    with pytest.raises(InvalidSettingError, match="ANYACCEL_SHM_BACKEND='enable' is not an on/off"):
        shm_backend_wanted()
    with pytest.raises(InvalidSettingError, match="'enable'"):
        shm_backend_wanted(True)  # a bad value is refused even where the argument decides
    monkeypatch.delenv("ANYACCEL_SHM_BACKEND")
    assert shm_backend_wanted(False) == (False, "shm_backend=False")


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
    from anyaccel.ops.cpu.shm_backend import ShmBackendBuilder
    from anyaccel.ops.errors import OpBuildError

    def broken(self: object, verbose: bool = False) -> None:
        raise OpBuildError("g++ failed: shm_backend.cpp:1: error")

    monkeypatch.setattr(ShmBackendBuilder, "load", broken)
    with pytest.raises(DistributedSetupError, match=r"g\+\+ failed.*new_group\(backend="):
        backend_module._device_backend_module(required=True)
    monkeypatch.setattr(backend_module, "_warned_python_form", False)
    with caplog.at_level("WARNING"):
        assert backend_module._device_backend_module(required=False) is None
        assert backend_module._device_backend_module(required=False) is None
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


def test_init_distributed_on_one_rank_picks_it_and_reports_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    import torch

    from anyaccel.distributed import init_distributed, shm_process_group

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name, value in {
        "DS_ACCELERATOR": "cpu",
        "MASTER_ADDR": "127.0.0.1",
        "ANYACCEL_SHM_BACKEND": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(port))
    init_distributed(rank=0, world_size=1)
    try:
        assert backend_choice() == {
            "backend": BACKEND_NAME,
            "reason": "ANYACCEL_SHM_BACKEND=1",
        }
        assert dist.get_backend() == BACKEND_NAME
        assert cpu_collectives() == (
            "anyaccel_shm (ANYACCEL_SHM_BACKEND=1; chosen by init_distributed)"
        )
        world = dist.group.WORLD
        # no segment, nothing for the C++ Backend to run: the Python group itself
        assert shm_process_group(world) is world
        assert world.status == "a group of one rank needs no shared memory"
        tensor = torch.arange(4.0)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        dist.destroy_process_group()


# --- every collective against gloo, in one job of real ranks --------------------------------
#: ``steps`` training steps of a small MLP on ``group`` (rank-seeded data), wrapped by ``wrap``
#: (DDP by default; FSDP...): the losses and the parameters. Pasted into the rank scripts at
#: ``# @DDP_TRAIN@`` (indented as that line is).
DDP_TRAIN = """\
def ddp(model, group):
    return torch.nn.parallel.DistributedDataParallel(model, process_group=group)
def train(group, wrap=ddp, steps=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    wrapped = wrap(model, group)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen)
        loss = torch.nn.functional.mse_loss(wrapped(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    return losses, [p.detach() for p in model.parameters()]
"""


def with_ddp_train(script: str) -> str:
    """``script`` with :data:`DDP_TRAIN` in place of its ``# @DDP_TRAIN@`` line."""
    marker = "# @DDP_TRAIN@\n"
    start = script.index(marker)
    indent = script[script.rindex("\n", 0, start) + 1 : start]
    return script.replace(indent + marker, textwrap.indent(DDP_TRAIN, indent), 1)


AGAINST_GLOO = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import (CollectiveError, backend_choice, init_distributed,
                                      shm_process_group)
    from anyaccel.distributed.shm.backend import FALLBACK_TAG
    info = init_distributed(timeout=timedelta(seconds=60), shm_backend=True)
    rank, size = info.rank, info.world_size
    world = dist.group.WORLD
    backend = world._get_backend(torch.device("cpu"))  # anyaccel's c10d Backend
    shm = shm_process_group(world)  # the Python group it forwards all but all_reduce to
    gloo = dist.new_group(backend="gloo")
    failures, checks = [], 0
    R = dist.ReduceOp

    class Counting:  # counts the kernel calls of the default group, to prove they are native
        def __init__(self, inner):
            self.inner, self._calls = inner, {}
        @property
        def calls(self):  # with the calls the c10d Backend ran itself, in C++, without Python
            merged = dict(self._calls)
            for name, count in backend.native_calls.items():
                if count or name == "all_reduce":
                    merged[name] = merged.get(name, 0) + count
            return merged
        def __getattr__(self, name):
            method = getattr(self.inner, name)
            if name in ("failed", "close", "abandon"):
                return method
            def call(*args):
                key = "announce" if name == "all_gather" and args[3] == FALLBACK_TAG else name
                self._calls[key] = self._calls.get(key, 0) + 1
                return method(*args)
            return call
    shm.shm.communicator = kernel = Counting(shm.shm.communicator)

    def check(name, ours, theirs):
        global checks
        checks += 1
        ours = ours if isinstance(ours, list) else [ours]
        theirs = theirs if isinstance(theirs, list) else [theirs]
        same = len(ours) == len(theirs) and all(
            a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
            for a, b in zip(ours, theirs))
        if not same:
            failures.append(f"{name}: {[o.flatten()[:4].tolist() for o in ours]} vs "
                            f"{[t.flatten()[:4].tolist() for t in theirs]}")

    def data(n, dtype, seed):
        gen = torch.Generator().manual_seed(seed * 10 + rank)
        if dtype.is_floating_point:
            return (torch.randn(n, generator=gen) * 4).to(dtype)
        return torch.randint(-50, 50, (n,), generator=gen).to(dtype)

    FLOATS = [torch.float32, torch.bfloat16, torch.float16]
    DTYPES = FLOATS + [torch.int32, torch.int64, torch.uint8]
    SIZES = [0, 1, 1023, 1 << 18]
    for dtype in DTYPES:
        for n in SIZES:
            for op in [R.SUM, R.PRODUCT, R.MIN, R.MAX]:
                if dtype == torch.uint8 and op == R.PRODUCT:
                    continue
                a = data(n, dtype, 1); b = a.clone()
                dist.all_reduce(a, op=op); dist.all_reduce(b, op=op, group=gloo)
                check(f"all_reduce {dtype} {n} {op}", a, b)
            if dtype in FLOATS:
                # AVG: the exact mean (float64 sum of two floats is exact), rounded once
                a = data(n, dtype, 2); b = a.double()
                dist.all_reduce(a, op=R.AVG); dist.all_reduce(b, group=gloo)
                check(f"all_reduce {dtype} {n} AVG", a, b.div_(size).to(dtype))
            x = data(n, dtype, 3)
            ours = [torch.empty_like(x) for _ in range(size)]
            theirs = [torch.empty_like(x) for _ in range(size)]
            dist.all_gather(ours, x); dist.all_gather(theirs, x, group=gloo)
            check(f"all_gather {dtype} {n}", ours, theirs)
            ours = torch.empty(n * size, dtype=dtype); theirs = torch.empty_like(ours)
            dist.all_gather_into_tensor(ours, x); dist.all_gather_into_tensor(theirs, x, group=gloo)
            check(f"all_gather_into_tensor {dtype} {n}", ours, theirs)
            for root in range(size):
                a = data(n, dtype, 4); b = a.clone()
                dist.broadcast(a, root); dist.broadcast(b, root, group=gloo)
                check(f"broadcast {dtype} {n} root {root}", a, b)
            if dtype != torch.uint8:
                big = data(n * size, dtype, 5)
                a = torch.empty(n, dtype=dtype); b = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(a, big); dist.reduce_scatter_tensor(b, big, group=gloo)
                check(f"reduce_scatter_tensor {dtype} {n}", a, b)
                parts = list(big.chunk(size)) if n else [big.clone() for _ in range(size)]
                a = torch.empty(n, dtype=dtype); b = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(a, parts)
                try:
                    dist.reduce_scatter(b, parts, group=gloo)
                except RuntimeError as exc:  # older torch's gloo has no list form
                    assert "does not support reduce_scatter" in str(exc), exc
                    dist.reduce_scatter_tensor(b, big, group=gloo)
                check(f"reduce_scatter {dtype} {n}", a, b)

    native_calls = dict(kernel.calls)
    # 64 MiB per rank (16 rounds of the 4 MiB slots): every collective on fp32, bf16, int32
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        n = (64 << 20) // dtype.itemsize
        x = data(n, dtype, 12)
        for op in [R.SUM, R.MAX] + ([R.AVG] if dtype.is_floating_point else []):
            a = x.clone(); b = x.double() if op == R.AVG else x.clone()
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=R.SUM if op == R.AVG else op, group=gloo)
            if op == R.AVG:  # the exact mean, rounded once
                b = b.div_(size).to(dtype)
            check(f"all_reduce {dtype} 64 MiB {op}", a, b)
        ours = torch.empty(n * size, dtype=dtype); theirs = torch.empty_like(ours)
        dist.all_gather_into_tensor(ours, x); dist.all_gather_into_tensor(theirs, x, group=gloo)
        check(f"all_gather_into_tensor {dtype} 64 MiB", ours, theirs)
        ours, theirs = list(ours.chunk(size)), list(theirs.chunk(size))
        dist.all_gather(ours, x); dist.all_gather(theirs, x, group=gloo)
        check(f"all_gather {dtype} 64 MiB", ours, theirs)
        a = x.clone(); b = x.clone()
        dist.broadcast(a, size - 1); dist.broadcast(b, size - 1, group=gloo)
        check(f"broadcast {dtype} 64 MiB", a, b)
        a = torch.empty(n // size, dtype=dtype); b = torch.empty_like(a)
        dist.reduce_scatter_tensor(a, x); dist.reduce_scatter_tensor(b, x, group=gloo)
        check(f"reduce_scatter_tensor {dtype} 64 MiB", a, b)
        del x, a, b, ours, theirs
    # reduce_scatter_tensor over several 4 MiB chunks, in place (the output is this rank's own
    # part of the input) and into a shifted overlap of the input, and all_gather_into_tensor
    # from such views of its output: gloo's results either way (gloo works on copies)
    part = 1_100_000  # past one 4 MiB slot per rank: all_gather too takes two chunks
    for shift in (0, 5, -3):
        buf = torch.cat([torch.zeros(8), data(part * size, torch.float32, 9), torch.zeros(8)])
        source = buf[8 : 8 + part * size]
        b = torch.empty(part); dist.reduce_scatter_tensor(b, source.clone(), group=gloo)
        start = 8 + rank * part + shift
        dist.reduce_scatter_tensor(buf[start : start + part], source)
        out = buf[start : start + part]
        check(f"reduce_scatter_tensor into its input, shifted {shift}", out, b)
        # and all_gather_into_tensor from a view of its output, shifted alike
        inp = buf[start : start + part]
        b = torch.empty(part * size); dist.all_gather_into_tensor(b, inp.clone(), group=gloo)
        dist.all_gather_into_tensor(source, inp)
        check(f"all_gather_into_tensor from its output, shifted {shift}", source, b)
    # non-contiguous input: reduced in place, as a contiguous copy through gloo would be
    a = data(64, torch.float32, 6).reshape(8, 8).t(); b = a.contiguous()
    dist.all_reduce(a); dist.all_reduce(b, group=gloo)
    check("all_reduce non-contiguous", a.contiguous(), b)
    # async_op: a Work to wait on, with the outputs in its future
    a = data(1000, torch.float32, 7); b = a.clone()
    work = dist.all_reduce(a, async_op=True)
    work.wait()
    dist.all_reduce(b, group=gloo)
    check("all_reduce async", [a] + list(work.get_future().value()), [b, b])
    # a subgroup of the backend, and barrier
    sub = dist.new_group(list(range(size)))
    a = data(999, torch.bfloat16, 8); b = a.clone()
    dist.all_reduce(a, group=sub); dist.all_reduce(b, group=gloo)
    check("all_reduce subgroup", a, b)
    dist.barrier(); dist.barrier(group=sub)
    # what runs on gloo inside the backend
    x = data(6 * size, torch.float32, 9)
    ours, theirs = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(ours, x); dist.all_to_all_single(theirs, x, group=gloo)
    check("all_to_all_single", ours, theirs)
    # uneven list parts whose total happens to fit: refused as gloo refuses them (the native
    # path would cut the concatenation at the wrong place), and the output left untouched
    def uneven(group):
        out = torch.full((3,), -7.0)
        try:
            dist.reduce_scatter(out, [data(2, torch.float32, 10), data(4, torch.float32, 11)],
                                group=group)
        except RuntimeError as exc:
            return str(exc).strip().rsplit("] ", 1)[-1], out
        return None, out
    (ours, ours_out), (theirs, theirs_out) = uneven(None), uneven(gloo)
    checks += 1
    if ours is None or ours != theirs or not torch.equal(ours_out, torch.full((3,), -7.0)):
        failures.append(f"uneven reduce_scatter: {ours!r} {ours_out} vs gloo's {theirs!r}")
    if rank == 0:
        dist.send(torch.arange(5.0), 1)
    elif rank == 1:
        got = torch.empty(5); dist.recv(got, 0); check("send/recv", got, torch.arange(5.0))
    try:  # torch >= 2.15's object collectives need NumPy, which torch does not require
        import numpy  # noqa: F401
    except ImportError:
        pass
    else:
        gathered = [None] * size
        dist.all_gather_object(gathered, {"rank": rank})
        checks += 1
        if gathered != [{"rank": r} for r in range(size)]:
            failures.append(f"all_gather_object: {gathered}")
    # unchanged DDP code: the same losses and parameters as on gloo
    # @DDP_TRAIN@
    (ours, ours_params), (theirs, theirs_params) = train(None), train(gloo)
    check("DDP parameters", ours_params, theirs_params)
    checks += 1
    if ours != theirs or len(set(ours)) < 3:
        failures.append(f"DDP losses: {ours} vs {theirs}")
    # FSDP (and FSDP2 where torch has it): all_gather_into_tensor and reduce_scatter_tensor
    import warnings
    warnings.filterwarnings("ignore")
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    def fsdp1(model, group):
        return FSDP(model, process_group=group, device_id=torch.device("cpu"))
    wraps = {"FSDP": fsdp1}
    try:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import DeviceMesh
        def fsdp2(model, group):
            fully_shard(model, mesh=DeviceMesh.from_group(group or world, "cpu"))
            return model
        wraps["FSDP2"] = fsdp2
    except ImportError:  # torch < 2.6 has no public fully_shard
        pass
    sharded = {}
    for name, wrap in wraps.items():
        before = dict(kernel.calls)
        ours, theirs = train(None, wrap, 4)[0], train(gloo, wrap, 4)[0]
        checks += 1
        if ours != theirs or len(set(ours)) < 3:
            failures.append(f"{name} losses: {ours} vs {theirs}")
        sharded[name] = sorted(k for k in kernel.calls if kernel.calls[k] > before.get(k, 0))
    status = {"world": shm.status, "sub": shm_process_group(sub).status,
              "types": [type(g._get_backend(torch.device("cpu"))).__name__ for g in (world, sub)],
              "backend": dist.get_backend(), "choice": backend_choice()}
    # ranks that disagree: an error on every rank, never a wrong result
    bad = dist.new_group(list(range(size)))
    errors = []
    for tensor in (torch.ones(4 * (rank + 1)), torch.ones(4, dtype=[torch.float32,
                   torch.bfloat16][rank % 2])):
        try:
            dist.all_reduce(tensor, group=bad)
            errors.append(f"no error: {tensor[:2].tolist()}")
        except CollectiveError as error:
            errors.append(str(error))
    # the same through a collective the c10d Backend runs in C++: the group's error, raised
    bad = dist.new_group(list(range(size)))
    try:
        n = 4 * (rank + 1)
        dist.all_gather_into_tensor(torch.empty(n * size), torch.ones(n), group=bad)
        errors.append("no error from all_gather_into_tensor")
    except CollectiveError as error:
        errors.append(str(error))
    dist.destroy_process_group()
    print(json.dumps({"failures": failures, "checks": checks, "status": status,
                      "errors": errors, "native": native_calls, "sharded": sharded,
                      "grid": [len(DTYPES), len(FLOATS), len(SIZES)]}), flush=True)
    # Every group is destroyed by now. os._exit skips interpreter teardown, where this job
    # aborted about once in 40 loaded runs before the group's default backend was set (a gloo
    # worker destroying a finished AsyncAllgatherWork whose tensor's PyObject needs the GIL
    # after Py_FinalizeEx began: take_gil -> pthread_exit -> std::terminate). Not seen since
    # in about 150 runs, but the trigger is not pinned down: see docs/distributed.md.
    os._exit(0)
    """
)
AGAINST_GLOO = with_ddp_train(AGAINST_GLOO)


@multiprocess
def test_every_collective_equals_gloo_bit_for_bit_on_two_ranks() -> None:
    before = shm_entries()
    outputs = [
        json.loads(out.strip().splitlines()[-1]) for out in finish(start_ranks(AGAINST_GLOO))
    ]
    assert shm_entries() - before == set()
    for rank, result in enumerate(outputs):
        assert result["failures"] == [], result["failures"][:10]
        assert result["checks"] > 200
        assert result["status"] == {
            "world": "shared memory",
            "sub": "shared memory",
            "types": ["ShmBackend", "ShmBackend"],  # torch's groups, anyaccel's c10d Backend
            "backend": BACKEND_NAME,
            "choice": {"backend": BACKEND_NAME, "reason": "shm_backend=True"},
        }
        dtypes, floats, sizes_ = result["grid"]
        assert result["native"] == {
            # SUM, PRODUCT, MIN, MAX and AVG of the float dtypes; integers go to gloo
            "all_reduce": floats * sizes_ * 5,
            # all_gather and all_gather_into_tensor, every dtype (bytes)
            "all_gather": dtypes * sizes_ * 2,
            "broadcast": dtypes * sizes_ * 2,  # from each of the 2 roots
            "reduce_scatter": floats * sizes_ * 2,  # the list form and the tensor form
            # what goes to gloo announces it first: integer all_reduce (SUM, PRODUCT, MIN,
            # MAX; uint8 has no PRODUCT) and reduce_scatter (both forms; not uint8)
            "announce": sizes_ * (4 + 4 + 3) + sizes_ * 2 * 2,
        }, (rank, result["native"])
        for name, used in result["sharded"].items():  # FSDP's collectives ran natively
            assert {"all_gather", "reduce_scatter"} <= set(used), (name, used)
        sizes, later, gathered = result["errors"]
        assert "ranks called all_gather with different tensors" in gathered, gathered
        assert "anyaccel_shm all_gather failed" in gathered, gathered
        assert "different tensors" in sizes and "4 float32 elements" in sizes
        assert "8 float32 elements" in sizes, (rank, sizes)
        assert "failed earlier" in later or "different tensors" in later, (rank, later)


# --- faults: a rank killed mid-collective, and create/destroy cycles -------------------------
KILLED = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    dist.all_reduce(torch.ones(8))
    print("ready", flush=True)
    if info.rank == 1:
        time.sleep(600)  # the test kills it
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 20))
    except CollectiveError as error:
        print(f"{time.monotonic() - start:.2f} {error}", flush=True)
        os._exit(0)
    print("no error", flush=True)
    os._exit(3)
    """
)


@multiprocess
def test_a_rank_killed_mid_collective_fails_the_others_fast() -> None:
    before = shm_entries()
    procs = start_ranks(KILLED, 2)
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        procs[1].send_signal(signal.SIGKILL)
        out, err = procs[0].communicate(timeout=90)
        assert procs[0].returncode == 0, out + err[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert shm_entries() - before == set()
    elapsed, _, message = out.strip().splitlines()[-1].partition(" ")
    assert "anyaccel_shm all_reduce failed" in message and "rank 1 (pid" in message
    assert "died" in message
    assert float(elapsed) < 30  # well inside the group's 60 s timeout


CYCLES = textwrap.dedent(
    """
    import gc, json, os, sys
    import torch, torch.distributed as dist
    import anyaccel.distributed
    from anyaccel.distributed import shm_process_group
    rank, size, cycles = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(sys.argv[1])
    base = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), size, rank == 0)

    def snapshot():
        maps = open("/proc/self/maps").read().count("anyaccel-shm")
        return [len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), maps]

    seen = []
    for cycle in range(cycles):
        dist.init_process_group("anyaccel_shm", store=dist.PrefixStore(f"{cycle}/", base),
                                rank=rank, world_size=size)
        tensor = torch.ones(10)
        dist.all_reduce(tensor)
        assert tensor[0] == size and shm_process_group().status == "shared memory"
        mapped = snapshot()[2]
        dist.destroy_process_group()
        gc.collect()
        seen.append(snapshot())
    print(json.dumps({"mapped": mapped, "first": seen[0], "last": seen[-1]}), flush=True)
    """
)


@multiprocess
def test_create_and_destroy_cycles_leak_no_mapping_fd_or_thread() -> None:
    before = shm_entries()
    outputs = finish(start_ranks(CYCLES, 2, "50"))
    assert shm_entries() - before == set()
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["mapped"] == 1  # the live group's segment is mapped once...
        assert result["first"][2] == 0  # ...and unmapped by destroy_process_group()
        assert result["last"] == result["first"], result


# --- four ranks as two simulated nodes: gloo across nodes, shared memory within one ----------
TWO_NODES = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import backend_choice, init_distributed, shm_process_group
    info = init_distributed(timeout=timedelta(seconds=60), shm_backend=True)
    rank, size = info.rank, info.world_size
    choice = backend_choice()["backend"]
    # every rank's gloo mesh is connected before any rank tears it down: a rank still
    # connecting to one that already destroyed the group fails ("Connection closed by peer")
    dist.barrier()
    dist.destroy_process_group()
    # a second rendezvous on its own port: on the first one, a fast rank could reach rank 0's
    # old store, about to be destroyed, instead of its new one
    os.environ["MASTER_PORT"] = sys.argv[1]
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    node = dist.new_group([0, 1]), dist.new_group([2, 3])  # every rank creates both
    mine = node[rank // 2]
    failures = []
    for group, members in ((None, size), (mine, 2)):
        gen = torch.Generator().manual_seed(rank)
        for dtype in (torch.float32, torch.bfloat16):
            x = (torch.randn(1001, generator=gen) * 3).to(dtype)
            a, b = x.clone(), x.clone()
            dist.all_reduce(a, group=group)
            ref = [torch.empty_like(x) for _ in range(size)]
            dist.all_gather(ref, x, group=gloo)
            lo = 0 if group is None else rank // 2 * 2
            want = ref[lo].float()
            for part in ref[lo + 1: lo + members]:
                want = want + part.float()  # rank order, accumulated in fp32, rounded once
            if not torch.equal(a, want.to(dtype)) and group is not None:
                failures.append(f"all_reduce {dtype} on {members} ranks")
            # across nodes gloo adds in its own order and rounds each step: the dtype's tolerance
            atol = 1e-4 if dtype == torch.float32 else 0.25
            if group is None and not torch.allclose(a.float(), want, rtol=0, atol=atol):
                failures.append(f"all_reduce {dtype} on the world")
            out = [torch.empty_like(x) for _ in range(members)]
            dist.all_gather(out, x, group=group)
            if not all(torch.equal(o, r) for o, r in zip(out, ref[lo: lo + members])):
                failures.append(f"all_gather {dtype} on {members} ranks")
            dist.broadcast(b, lo + 1, group=group)
            if not torch.equal(b, ref[lo + 1]):
                failures.append(f"broadcast {dtype} on {members} ranks")
            big = torch.cat([x] * members)
            rs = torch.empty_like(x)
            dist.reduce_scatter_tensor(rs, big, group=group)
            whole = torch.empty_like(x)
            dist.all_reduce(whole.copy_(x), group=group)
            if not torch.allclose(rs.float(), whole.float(), rtol=0, atol=atol):
                failures.append(f"reduce_scatter_tensor {dtype} on {members} ranks")
            dist.reduce_scatter(rs, [x] * members, group=group)
            if not torch.allclose(rs.float(), whole.float(), rtol=0, atol=atol):
                failures.append(f"reduce_scatter {dtype} on {members} ranks")
            flat = torch.empty(members * x.numel(), dtype=dtype)
            dist.all_gather_into_tensor(flat, x, group=group)
            if not torch.equal(flat, torch.cat(ref[lo: lo + members])):
                failures.append(f"all_gather_into_tensor {dtype} on {members} ranks")
        dist.barrier(group=group)
    status = [shm_process_group().status, shm_process_group(mine).status]
    dist.destroy_process_group()
    print(json.dumps({"choice": choice, "status": status, "failures": failures}), flush=True)
    """
)


@multiprocess
def test_four_ranks_on_two_nodes_use_gloo_across_and_shared_memory_within() -> None:
    outputs = finish(start_ranks(TWO_NODES, 4, str(free_port()), nodes=2))
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["choice"] == "gloo"  # asked for, but the job spans two nodes
        assert result["status"] == ["the group's ranks run on more than one node", "shared memory"]
        assert result["failures"] == []


# --- faults: a stalled rank, a mixed native/gloo call, a fork after use ----------------------
STALLED = textwrap.dedent(
    """
    import json, os, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=3))
    dist.all_reduce(torch.ones(8))
    if info.rank == 1:
        time.sleep(6)  # stalled: alive, but late for the next collective
    start = time.monotonic()
    results = []
    for _ in range(2):
        tensor = torch.ones(1000)
        try:
            dist.all_reduce(tensor)
            results.append(tensor[:2].tolist())
        except CollectiveError as error:
            results.append(str(error))
        results.append(time.monotonic() - start)
    print(json.dumps(results), flush=True)
    os._exit(0)  # the group is unusable by design; skip destroying it
    """
)


@multiprocess
def test_a_stalled_rank_fails_every_other_rank_within_the_group_timeout() -> None:
    before = shm_entries()
    punctual, late = (json.loads(out.strip().splitlines()[-1])
                      for out in finish(start_ranks(STALLED, 2), timeout=60))  # fmt: skip
    assert shm_entries() - before == set()
    message, elapsed, again, _ = punctual
    assert "timed out after 3.0 s" in message and "rank(s) 1" in message, message
    assert "alive but did not enter" in message
    assert 2.5 < elapsed < 5.5  # the group's 3 s timeout, not a hang
    assert "failed earlier" in again
    # The late rank finds rank 0's contribution published before it gave up: the sum is whole
    # (never a partial one); its next collective fails at once, as the group is abandoned.
    summed, _, message, elapsed = late
    assert summed == [2.0, 2.0]
    assert "rank 0 of the shared-memory group gave up" in message, message
    assert elapsed < 2


MIXED = textwrap.dedent(
    """
    import json, os, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    rank = info.rank
    results = []
    # the same collectives on gloo on both ranks: announced, then run (no error)
    tensor = torch.arange(6, dtype=torch.int32)
    dist.all_reduce(tensor)
    results.append(tensor.tolist())
    # different collectives on gloo: both fail at once
    start = time.monotonic()
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(4, dtype=torch.int64))
        else:
            dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.int64),
                                       torch.ones(4, dtype=torch.int64))
        results.append("no error")
    except CollectiveError as error:
        results.append(str(error))
    # one rank native (float32), the other on gloo (int32): both fail at once
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int32))
        results.append("no error")
    except CollectiveError as error:
        results.append(str(error))
    results.append(time.monotonic() - start)
    print(json.dumps(results), flush=True)
    os._exit(0)  # the group's shared-memory path is unusable by design
    """
)


@multiprocess
def test_one_rank_on_gloo_and_another_native_fail_at_once_not_at_the_timeout() -> None:
    outputs = [json.loads(out.strip().splitlines()[-1]) for out in finish(start_ranks(MIXED, 2))]
    for rank, (summed, different, mixed, elapsed) in enumerate(outputs):
        assert summed == [0, 2, 4, 6, 8, 10]  # announced on shared memory, then run on gloo
        assert "different collectives on gloo" in different, different
        assert "rank 0: all_reduce, rank 1: reduce_scatter" in different
        assert "failed" in mixed and "announced that it runs this collective on gloo" in mixed, (
            rank,
            mixed,
        )
        assert elapsed < 20  # the group's timeout is 60 s


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


FOUR_RANKS = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import init_distributed, shm_process_group
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    rank, size = info.rank, info.world_size
    gloo = dist.new_group(backend="gloo")
    R = dist.ReduceOp
    failures, checks = [], 0

    def data(n, dtype, seed, r):  # any rank's input, made locally: the reference needs them all
        gen = torch.Generator().manual_seed(seed * 100 + r)
        if dtype.is_floating_point:
            return torch.randn(n, generator=gen).to(dtype)
        return torch.randint(-50, 50, (n,), generator=gen).to(dtype)

    def rank_order(values, op, dtype):
        # the kernel's definition: fp32 accumulation in rank order, rounded once to the dtype;
        # AVG: the exact mean (float64 sums of these few floats are exact), rounded once
        if op == R.AVG:
            return (torch.stack([v.double() for v in values]).sum(0) / size).to(dtype)
        fold = {R.SUM: torch.add, R.PRODUCT: torch.mul,
                R.MIN: torch.minimum, R.MAX: torch.maximum}[op]
        acc = values[0].float()
        for value in values[1:]:
            acc = fold(acc, value.float())
        return acc.to(dtype)

    def check(name, ours, exact, theirs, dtype, scale=None):
        # ours: bit for bit the rank-order result; gloo: bit for bit where the order cannot
        # matter (MIN, MAX, integers: scale None), else within size roundings of the dtype
        # (eps each) of the magnitudes involved (sum of |x| for sums, |product| for products)
        global checks
        checks += 1
        if not torch.equal(ours, exact):
            failures.append(f"{name}: not the rank-order result")
        if scale is None:
            if not torch.equal(ours, theirs):
                failures.append(f"{name}: differs from gloo")
        else:
            info = torch.finfo(dtype)
            bound = size * info.eps * scale + info.tiny
            if not bool(((ours.double() - theirs.double()).abs() <= bound).all()):
                failures.append(f"{name}: beyond {size} roundings of {dtype} from gloo")

    def magnitude(values, op):
        if op == R.PRODUCT:
            return torch.stack([v.double() for v in values]).prod(0).abs()
        scale = torch.stack([v.double().abs() for v in values]).sum(0)
        return scale / size if op == R.AVG else scale

    # torch 2.4's gloo reduce_scatter_tensor sums whatever the op: is this torch's right?
    probe = torch.empty(1)
    dist.reduce_scatter_tensor(probe, torch.full((size,), float(rank)), op=R.MAX, group=gloo)
    GLOO_SCATTERS_BY_OP = probe.item() == size - 1
    DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8]
    for dtype in DTYPES:
        itemsize = torch.empty(0, dtype=dtype).element_size()
        for n in [0, 1, 1023, (1 << 20) // itemsize]:
            ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype.is_floating_point else [])
            for seed, op in enumerate(ops):
                if dtype == torch.uint8 and op == R.PRODUCT:
                    continue
                values = [data(n, dtype, seed, r) for r in range(size)]
                ours, theirs = values[rank].clone(), values[rank].clone()
                dist.all_reduce(ours, op=op)
                if op == R.AVG:
                    dist.all_reduce(theirs, group=gloo)
                    theirs = theirs.div_(size)
                else:
                    dist.all_reduce(theirs, op=op, group=gloo)
                exact = rank_order(values, op, dtype)
                if not dtype.is_floating_point:
                    exact = theirs  # integers run on gloo: gloo's result is the reference
                ordered = op in (R.MIN, R.MAX) or not dtype.is_floating_point
                check(f"all_reduce {dtype} {n} {op}", ours, exact, theirs, dtype,
                      None if ordered else magnitude(values, op))
                if op in (R.SUM, R.MAX) and dtype != torch.uint8:
                    big = [data(n * size, dtype, seed + 10, r) for r in range(size)]
                    ours, theirs = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
                    dist.reduce_scatter_tensor(ours, big[rank], op=op)
                    dist.reduce_scatter_tensor(theirs, big[rank], op=op, group=gloo)
                    # integers too: gloo's reduce_scatter sums whatever the op on older torch
                    exact = rank_order([b[rank * n:(rank + 1) * n] for b in big], op, dtype)
                    if op != R.SUM and not GLOO_SCATTERS_BY_OP:
                        theirs = exact  # nothing to compare with: gloo is wrong here
                    parts = [b[rank * n:(rank + 1) * n] for b in big]
                    ordered = op == R.MAX or not dtype.is_floating_point
                    check(f"reduce_scatter_tensor {dtype} {n} {op}", ours, exact, theirs, dtype,
                          None if ordered else magnitude(parts, op))
            x = data(n, dtype, 20, rank)
            ours = [torch.empty_like(x) for _ in range(size)]
            dist.all_gather(ours, x)
            exact = [data(n, dtype, 20, r) for r in range(size)]
            checks += 1
            if not all(torch.equal(a, b) for a, b in zip(ours, exact)):
                failures.append(f"all_gather {dtype} {n}")
            root = n % size
            y = data(n, dtype, 21, rank)
            dist.broadcast(y, root)
            checks += 1
            if not torch.equal(y, data(n, dtype, 21, root)):
                failures.append(f"broadcast {dtype} {n} from {root}")
    # 64 MiB (16 of the segment's 4 MiB slots): all_reduce fp32 SUM, all_gather_into_tensor;
    # cheap inputs (randn of 16 Mi elements on every rank for every rank would cost seconds)
    n = 16 << 20

    def ramp(count, r):
        return torch.arange(count, dtype=torch.float32).remainder_(977).mul_(0.37 + r)

    ours = ramp(n, rank)
    dist.all_reduce(ours)
    exact = ramp(n, 0)
    for r in range(1, size):
        exact += ramp(n, r)
    checks += 1
    if not torch.equal(ours, exact):
        failures.append("all_reduce 64 MiB")
    del ours, exact
    whole = torch.empty(n)
    dist.all_gather_into_tensor(whole, ramp(n // size, rank))
    checks += 1
    if not all(torch.equal(part, ramp(n // size, r)) for r, part in enumerate(whole.chunk(size))):
        failures.append("all_gather_into_tensor 64 MiB")
    del whole
    # reduce_scatter_tensor of 64 MiB (rank order), all_reduce MAX, broadcast from the last rank
    part = torch.empty(n // size)
    dist.reduce_scatter_tensor(part, ramp(n, rank))
    exact = ramp(n, 0)
    for r in range(1, size):
        exact += ramp(n, r)
    checks += 1
    if not torch.equal(part, exact[rank * (n // size) : (rank + 1) * (n // size)]):
        failures.append("reduce_scatter_tensor 64 MiB")
    del part, exact
    ours = ramp(n, rank).neg_()
    dist.all_reduce(ours, op=R.MAX)
    checks += 1
    if not torch.equal(ours, ramp(n, 0).neg_()):
        failures.append("all_reduce MAX 64 MiB")
    ours = ramp(n, rank)
    dist.broadcast(ours, size - 1)
    checks += 1
    if not torch.equal(ours, ramp(n, size - 1)):
        failures.append("broadcast 64 MiB")
    del ours
    status = shm_process_group().status
    dist.destroy_process_group()
    print(json.dumps({"failures": failures, "checks": checks, "status": status}), flush=True)
    os._exit(0)  # as the two-rank job: see there
    """
)


@multiprocess
def test_four_ranks_every_collective_dtype_op_and_size_against_the_reference_and_gloo() -> None:
    before = shm_entries()
    outputs = finish(start_ranks(FOUR_RANKS, 4))
    assert shm_entries() - before == set()
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["status"] == "shared memory"
        assert result["failures"] == [], result["failures"][:10]
        assert result["checks"] > 150


FORKED = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import ShmProcessGroup, init_distributed, shm_process_group
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    rank, size = info.rank, info.world_size
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)  # the group is in use (its segment mapped) before the fork
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child makes a fresh group with the other ranks' children
        os.close(read)
        store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), size, rank == 0,
                              timeout=timedelta(seconds=60))
        group = ShmProcessGroup(store, rank, size, timedelta(seconds=60))
        mine = torch.full((1000,), float(rank + 1))
        group.allreduce([mine]).wait()
        report = {"status": group.status, "sum": mine[:2].tolist()}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        forked = json.loads(pipe.read() or "null")
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)  # the parent's group still works after the fork
    parent = [shm_process_group().status, tensor[:2].tolist()]
    dist.destroy_process_group()
    print(json.dumps({"child_exit": status, "child": forked, "parent": parent}), flush=True)
    """
)


@multiprocess
def test_a_fork_after_use_leaves_the_parent_working_and_the_child_free_to_make_a_group() -> None:
    from ..ranks import free_port

    before = shm_entries()
    outputs = finish(start_ranks(FORKED, 2, str(free_port())))
    assert shm_entries() - before == set()
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["child_exit"] == 0
        assert result["child"] == {"status": "shared memory", "sum": [3.0, 3.0]}
        assert result["parent"] == ["shared memory", [2.0, 2.0]]
