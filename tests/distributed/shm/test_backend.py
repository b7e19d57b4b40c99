"""The ``anyaccel_shm`` backend's collectives on real ranks, against gloo and the rank-order
reference."""

from __future__ import annotations

import json
import textwrap

from anyaccel.distributed import BACKEND_NAME

from ..ranks import finish, multiprocess, shm_entries, start_ranks
from .ddp_train import with_ddp_train

# --- every collective against gloo, in one job of real ranks --------------------------------
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


# --- four ranks: every collective x dtype x op x size against the rank-order reference -------
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
