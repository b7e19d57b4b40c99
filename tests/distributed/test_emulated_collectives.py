"""The emulated accelerator's collective backend: registration, and real ranks against gloo.

The c10d class itself (``HostViewBackend``) is exercised on CPU tensors too (registered for
``cpu`` under a test name), so every collective's mapping is checked where no emulated device
is installed; the device jobs check the same on ``emu:<rank>`` and ``npu:<rank>`` tensors.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
import torch.distributed as dist

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.emulated import collectives
from anyaccel.emulated.collective_registration import register_collectives, registered_collectives
from anyaccel.emulated.state import MINIMUM_TORCH, EmulatedDeviceError

from .ranks import finish, multiprocess, start_ranks

#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)


def test_registering_is_idempotent_and_maps_the_device_type() -> None:
    name = register_collectives("emukit", "EmuKitCCL")
    assert name == "emukitccl"
    assert register_collectives("emukit", "emukitccl") == name
    assert registered_collectives()["emukitccl"] == "emukit"
    assert dist.Backend.backend_capability["emukitccl"] == ["emukit"]
    assert dist.Backend.default_device_backend_map["emukit"] == "emukitccl"
    assert list(dist.Backend.backend_list).count("emukitccl") == 1


def test_a_name_taken_by_another_device_type_is_refused_by_name() -> None:
    register_collectives("emukit2", "emukit2ccl")
    with pytest.raises(EmulatedDeviceError, match=r"'emukit2ccl'.*'emukit2' device.*'emukit3'"):
        register_collectives("emukit3", "emukit2ccl")


def test_a_name_another_package_registered_is_refused() -> None:
    import anyaccel.distributed  # noqa: F401  (registers anyaccel_shm, for CPU tensors)

    with pytest.raises(EmulatedDeviceError, match=r"'anyaccel_shm'.*another package"):
        register_collectives("emukit4", "anyaccel_shm")


def test_torchs_own_backend_names_are_refused() -> None:
    # klxpu's data sheet says nccl (torch_xmlir serves it): torch builds nccl itself
    with pytest.raises(EmulatedDeviceError, match=r"'klxpu'.*'nccl', one of torch's own"):
        register_collectives("klxpu", "nccl")


def test_a_torch_without_register_backend_devices_gets_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def old_register(name: object, func: object, extended_api: bool = False) -> None: ...

    monkeypatch.setattr(dist.Backend, "register_backend", old_register)
    with pytest.raises(EmulatedDeviceError, match=r"devices=\) is missing.*upgrade torch"):
        register_collectives("emukit6", "emukit6ccl")


def test_a_backend_class_that_cannot_be_built_is_named_with_the_remedy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from anyaccel.ops.errors import OpBuildError

    def broken() -> None:
        raise OpBuildError("g++ failed: host_view_backend.cpp:1: error")

    monkeypatch.setattr(collectives, "_backend_module", broken)
    with pytest.raises(DistributedSetupError, match=r"'hccl'.*'npu'.*g\+\+ failed.*ninja"):
        collectives.create_backend("npu", "hccl", None, 0, 1, None)  # type: ignore[arg-type]


# --- real ranks: every collective through the backend against gloo ----------------------------
#: argv: device type ("cpu": the c10d class registered for CPU tensors under a test name), name,
#: and optionally "strict_memory" (device memory closed to the host outside kernels).
AGAINST_GLOO = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    device_type, name = sys.argv[1], sys.argv[2]
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device_type == "cpu":
        from anyaccel.emulated.collective_registration import register_collectives
        register_collectives("cpu", name)
        dev = torch.device("cpu")
    else:
        from anyaccel.testing.emulated import install
        install(device_type=device_type, device_count=size,
                strict_memory=sys.argv[3:] == ["strict_memory"])
        dev = torch.device(device_type, rank)
    dist.init_process_group(name, timeout=timedelta(seconds=60))
    world = dist.group.WORLD
    backend = world._get_backend(dev)
    gloo = dist.new_group(backend="gloo")
    failures, checks = [], []
    R = dist.ReduceOp
    def on_host(t):
        return t.to("cpu") if isinstance(t, torch.Tensor) else [on_host(x) for x in t]
    def same(what, ours, theirs):
        checks.append(what)
        ours, theirs = on_host(ours), on_host(theirs)
        ours = ours if isinstance(ours, list) else [ours]
        theirs = theirs if isinstance(theirs, list) else [theirs]
        if len(ours) != len(theirs) or not all(torch.equal(a, b) for a, b in zip(ours, theirs)):
            failures.append(what)
    def data(n, seed, dtype=torch.float32):
        gen = torch.Generator().manual_seed(seed * 10 + rank)
        if dtype.is_floating_point:
            return torch.randn(n, generator=gen).to(dtype)
        return torch.randint(-50, 50, (n,), generator=gen).to(dtype)
    def both(host):  # the same values on the device (ours) and on the host (gloo's)
        return host.to(dev), host.clone()
    for op in (R.SUM, R.MAX, R.MIN, R.PRODUCT, R.AVG):
        a, b = both(data(3001, 1))
        dist.all_reduce(a, op=op)
        dist.all_reduce(b, op=R.SUM if op == R.AVG else op, group=gloo)
        same(f"all_reduce {op}", a, b.div_(size) if op == R.AVG else b)
    a, b = both(data(1001, 2, torch.int64))
    dist.all_reduce(a); dist.all_reduce(b, group=gloo); same("all_reduce int64", a, b)
    a, b = both(data(2000, 3, torch.bfloat16))
    work = dist.all_reduce(a, async_op=True); work.wait(); dist.all_reduce(b, group=gloo)
    value = work.get_future().value()[0]
    same("all_reduce async", [a, value], [b, b])
    if value.device != a.device or value.data_ptr() != a.data_ptr():
        failures.append(f"the future holds {value.device}, not the device tensor")
    a, b = both(data(64, 4).view(8, 8).t())  # not contiguous
    dist.all_reduce(a); dist.all_reduce(b, group=gloo); same("all_reduce strided", a, b)
    x, xh = both(data(1000, 4))
    ours = [torch.empty(1000, device=dev) for _ in range(size)]
    theirs = [torch.empty(1000) for _ in range(size)]
    dist.all_gather(ours, x); dist.all_gather(theirs, xh, group=gloo)
    same("all_gather", ours, theirs)
    ours = torch.empty(1000 * size, device=dev); theirs = torch.empty(1000 * size)
    dist.all_gather_into_tensor(ours, x); dist.all_gather_into_tensor(theirs, xh, group=gloo)
    same("all_gather_into_tensor", ours, theirs)
    ours = torch.empty(500, device=dev); theirs = torch.empty(500)
    dist.reduce_scatter_tensor(ours, x); dist.reduce_scatter_tensor(theirs, xh, group=gloo)
    same("reduce_scatter_tensor", ours, theirs)
    ours = torch.empty(500, device=dev)
    dist.reduce_scatter(ours, list(x.chunk(size))); same("reduce_scatter", ours, theirs)
    a, b = both(data(777, 5))
    dist.broadcast(a, 1); dist.broadcast(b, 1, group=gloo); same("broadcast", a, b)
    dist.barrier(); checks.append("barrier")
    a, b = both(data(10, 7))
    dist.reduce(a, 0, op=R.MAX); dist.reduce(b, 0, op=R.MAX, group=gloo)
    if rank == 0:
        same("reduce", a, b)
    x, xh = both(data(6 * size, 6))
    ours, theirs = torch.empty_like(x), torch.empty_like(xh)
    dist.all_to_all_single(ours, x); dist.all_to_all_single(theirs, xh, group=gloo)
    same("all_to_all_single", ours, theirs)
    # the list all_to_all (gloo has none): against gloo's all_to_all_single of the same data
    outs = [torch.empty(6, device=dev) for _ in range(size)]
    dist.all_to_all(outs, list(x.chunk(size))); same("all_to_all", outs, list(theirs.chunk(size)))
    if rank == 0:
        dist.send(torch.arange(5.0, device=dev), 1)
    else:
        got = torch.empty(5, device=dev); dist.recv(got, 0)
        same("send/recv", got, torch.arange(5.0))
    # both ranks send before they receive (pipeline stages do): must not deadlock
    peer = 1 - rank
    mine, theirs_ = torch.full((4,), float(rank), device=dev), torch.empty(4, device=dev)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, peer),
                                    dist.P2POp(dist.irecv, theirs_, peer)])
    for w in works:
        w.wait()
    same("isend/irecv", theirs_, torch.full((4,), float(peer)))
    bucket = [torch.empty(3, device=dev) for _ in range(size)] if rank == 0 else None
    dist.gather(torch.full((3,), float(rank), device=dev), bucket, dst=0)
    if rank == 0:
        same("gather", bucket, [torch.full((3,), float(r)) for r in range(size)])
    got = torch.empty(3, device=dev)
    parts = [torch.full((3,), float(r), device=dev) for r in range(size)] if rank == 0 else None
    dist.scatter(got, parts, src=0); same("scatter", got, torch.full((3,), float(rank)))
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank})
    checks.append("all_gather_object")
    if objects != [{"rank": r} for r in range(size)]:
        failures.append(f"all_gather_object {objects}")
    box = [{"from": rank}]
    dist.broadcast_object_list(box, src=1)
    checks.append("broadcast_object_list")
    if box != [{"from": 1}]:
        failures.append(f"broadcast_object_list {box}")
    # coalesced (ZeRO's all_gather_coalesced, FSDP's buckets): one work for the lot
    a1, b1 = both(data(100, 8)); a2, b2 = both(data(50, 9))
    with dist.distributed_c10d._coalescing_manager(device=dev):
        dist.all_reduce(a1); dist.all_reduce(a2)
    dist.all_reduce(b1, group=gloo); dist.all_reduce(b2, group=gloo)
    same("coalesced all_reduce", [a1, a2], [b1, b2])
    outs = [torch.empty(100 * size, device=dev), torch.empty(50 * size, device=dev)]
    with dist.distributed_c10d._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], a1); dist.all_gather_into_tensor(outs[1], a2)
    cm.wait()
    theirs = [torch.empty(100 * size), torch.empty(50 * size)]
    dist.all_gather_into_tensor(theirs[0], b1, group=gloo)
    dist.all_gather_into_tensor(theirs[1], b2, group=gloo)
    same("coalesced all_gather_into_tensor", outs, theirs)
    # unchanged DDP code on the device: gloo's losses on the CPU, bit for bit
    timed = []
    def train(wrap, device, steps=5):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 1)).to(device)
        wrapped = wrap(model)
        opt = torch.optim.SGD(wrapped.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + rank)
        losses = []
        for _ in range(steps):
            x = torch.randn(8, 16, generator=gen).to(device)
            loss = torch.nn.functional.mse_loss(wrapped(x), x.sum(1, keepdim=True))
            opt.zero_grad(); loss.backward(); opt.step()
            losses.append(loss.item())
        stats = wrapped._get_ddp_logging_data()  # DDP's runtime statistics need a timer
        timed.append(stats.get("avg_forward_compute_time", 0) > 0
                     and stats.get("avg_backward_compute_time", 0) > 0)
        return losses
    DDP = torch.nn.parallel.DistributedDataParallel
    ids = None if dev.type == "cpu" else [rank]
    ours = train(lambda m: DDP(m, device_ids=ids), dev)
    theirs = train(lambda m: DDP(m, process_group=gloo), "cpu")
    if not timed[0]:
        failures.append("DDP on the device collected no forward/backward times")
    checks.append("DDP")
    if ours != theirs or len(set(ours)) < 3:
        failures.append(f"DDP losses {ours} vs {theirs}")
    refused, mixed = "", []
    if dev.type != "cpu":
        try:  # a CPU tensor handed to the device's backend
            dist.all_gather_into_tensor(torch.empty(2 * size, device=dev), torch.ones(2))
        except Exception as error:
            refused = str(error).splitlines()[0]
        # a group with a backend per device: CPU tensors to gloo, the device's to this one
        both_group = dist.new_group(backend=f"cpu:gloo,{device_type}:{name}")
        c, d = torch.ones(3), torch.ones(3, device=dev)
        dist.all_reduce(c, group=both_group); dist.all_reduce(d, group=both_group)
        mixed = [type(both_group._get_backend(torch.device("cpu"))).__name__,
                 type(both_group._get_backend(dev)).__name__, c.tolist(), d.cpu().tolist()]
    result = {
        "types": [type(world).__name__, type(backend).__name__, type(backend.host).__name__],
        "name": backend.name() if hasattr(backend, "name") else backend._get_backend_name(),
        "status": backend.host.group.status, "failures": failures, "checks": len(checks),
        "refused": refused, "backend": dist.get_backend(), "mixed": mixed,
    }
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    """
)


@multiprocess
def test_every_collective_of_the_class_on_cpu_tensors_matches_gloo() -> None:
    outputs = finish(start_ranks(AGAINST_GLOO, 2, "cpu", "hostviewtest"))
    for rank, out in enumerate(outputs):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["failures"] == [], result
        assert result["types"] == ["ProcessGroup", "HostViewBackend", "ShmBackend"]
        assert result["backend"] == result["name"] == "hostviewtest"
        assert result["status"] == "shared memory"
        assert result["checks"] == (25 if rank == 0 else 24)  # reduce, gather: rank 0; recv: 1


@multiprocess
@needs_emulated_device
def test_standing_in_for_npu_every_collective_and_ddp_on_hccl_give_gloos_results() -> None:
    """One battery on a vendor's type and name (emuccl differs only by name: registration tests
    above and the device-bug scripts cover it), to keep the gate's time."""
    outputs = finish(start_ranks(AGAINST_GLOO, 2, "npu", "hccl"))
    for rank, out in enumerate(outputs):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["failures"] == [], result  # DDP's losses among them, bit for bit
        assert result["types"] == ["ProcessGroup", "HostViewBackend", "ShmBackend"]
        assert result["backend"] == result["name"] == "hccl"
        assert result["status"] == "shared memory"
        assert result["checks"] == (25 if rank == 0 else 24)
        assert result["refused"] == (
            "hccl all_gather_into_tensor: the input is on cpu, not on the npu device: the "
            "hccl backend takes npu tensors, as on the real hardware. Move it with .to('npu'), "
            "or give the group a CPU backend for CPU tensors "
            "(init_process_group('cpu:gloo,npu:hccl'))"
        )
        assert result["mixed"] == [
            "ProcessGroupGloo", "HostViewBackend", [2.0, 2.0, 2.0], [2.0, 2.0, 2.0]
        ]  # fmt: skip


@multiprocess
@needs_emulated_device
def test_in_strict_memory_every_collective_and_ddp_give_gloos_results() -> None:
    """The backend reads device memory through the device's host view, which opens it."""
    outputs = finish(start_ranks(AGAINST_GLOO, 2, "npu", "hccl", "strict_memory"))
    for rank, out in enumerate(outputs):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["failures"] == [], result  # DDP's losses among them, bit for bit
        assert result["checks"] == (25 if rank == 0 else 24)


#: DS_ACCELERATOR=emulated: the accelerator names its backend, which torch knows at once.
FROM_THE_ENVIRONMENT = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    # a loaded host can take detection's 10 s to install the device (torch's inductor import)
    os.environ.update(DS_ACCELERATOR="emulated", ANYACCEL_EMULATED="mlu:2",
                      ANYACCEL_PROBE_TIMEOUT="300")
    import torch, torch.distributed as dist
    from anyaccel import get_accelerator
    accelerator = get_accelerator()
    rank = int(os.environ["RANK"])
    dist.init_process_group(accelerator.communication_backend_name(),
                            timeout=timedelta(seconds=60))
    tensor = torch.full((4,), float(rank + 1), device=accelerator.device_name(rank))
    dist.all_reduce(tensor)
    print(json.dumps({"name": accelerator.communication_backend_name(),
                      "device": str(tensor.device), "sum": tensor.cpu().tolist()}), flush=True)
    dist.destroy_process_group()
    """
)


@multiprocess
@needs_emulated_device
def test_ds_accelerator_emulated_registers_the_backend_its_accelerator_names() -> None:
    outputs = finish(start_ranks(FROM_THE_ENVIRONMENT, 2))
    for rank, out in enumerate(outputs):
        assert json.loads(out.strip().splitlines()[-1]) == {
            "name": "cncl", "device": f"mlu:{rank}", "sum": [3.0, 3.0, 3.0, 3.0]
        }  # fmt: skip


#: FSDP2 (fully_shard) on the emulated device against the same on the CPU (gloo), and FSDP1.
FSDP = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from anyaccel.testing.emulated import install
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    install("emu", size)
    dist.init_process_group("cpu:gloo,emu:emuccl", timeout=timedelta(seconds=60))
    torch.emu.set_device(rank)
    def train(device, wrap):
        torch.manual_seed(0)
        model = wrap(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                         torch.nn.Linear(32, 1)).to(device))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + rank)
        losses = []
        for _ in range(4):
            x = torch.randn(8, 16, generator=gen).to(device)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad(); loss.backward(); opt.step()
            losses.append(loss.item())
        return losses
    def sharded(mesh):
        def wrap(model):
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            return fully_shard(model, mesh=mesh)
        return wrap
    ours = train(f"emu:{rank}", sharded(init_device_mesh("emu", (size,))))
    theirs = train("cpu", sharded(init_device_mesh("cpu", (size,))))
    fsdp1 = train(f"emu:{rank}",
                  lambda m: FullyShardedDataParallel(m, device_id=torch.device("emu", rank)))
    print(json.dumps({"ours": ours, "theirs": theirs, "fsdp1": fsdp1}), flush=True)
    dist.destroy_process_group()
    """
)


@multiprocess
@needs_emulated_device
def test_fsdp_on_the_emulated_device_trains_as_fsdp_on_the_cpu() -> None:
    import math

    for out in finish(start_ranks(FSDP, 2)):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["ours"] == result["theirs"]  # FSDP2: all_gather and reduce_scatter
        assert len(set(result["ours"])) == 4
        assert len(result["fsdp1"]) == 4 and all(math.isfinite(x) for x in result["fsdp1"])


@needs_emulated_device
def test_installing_registers_the_backend_or_warns_why_not() -> None:
    import subprocess
    import sys

    script = textwrap.dedent(
        """
        import logging, sys
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
        from anyaccel.emulated.collective_registration import registered_collectives
        from anyaccel.testing.emulated import install
        accelerator = install(sys.argv[1], 1)
        print(accelerator.communication_backend_name(), registered_collectives())
        """
    )
    runs = {}
    for device_type in ("sdaa", "klxpu"):
        runs[device_type] = subprocess.run(
            [sys.executable, "-c", script, device_type],
            capture_output=True, text=True, timeout=300, check=True,
        ).stdout  # fmt: skip
    assert runs["sdaa"].strip() == "tccl {'tccl': 'sdaa'}"
    # klxpu's data sheet names nccl, which torch keeps for itself: the emulation takes emuccl
    assert runs["klxpu"].strip() == "emuccl {'emuccl': 'klxpu'}"


#: Rank 1 dies after the group is up; rank 0's next all_reduce must fail, naming hccl.
DEAD_RANK = textwrap.dedent(
    """
    import json, os, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.testing.emulated import install
    rank = int(os.environ["RANK"])
    install(device_type="npu", device_count=2)
    dist.init_process_group("hccl", timeout=timedelta(seconds=20))
    tensor = torch.ones(1024, device=f"npu:{rank}")
    dist.all_reduce(tensor)  # both ranks alive: the shared segment is set up
    if rank == 1:
        os._exit(0)  # dies without a word, as a killed rank does
    began = time.monotonic()
    try:
        dist.all_reduce(tensor)
        error = ""
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    print(json.dumps({"error": error, "seconds": time.monotonic() - began}), flush=True)
    os._exit(0)  # the group cannot be destroyed with a dead peer
    """
)


@multiprocess
@needs_emulated_device
def test_a_dead_rank_is_reported_under_the_backend_the_user_chose() -> None:
    survivor = json.loads(finish(start_ranks(DEAD_RANK, 2))[0].strip().splitlines()[-1])
    assert survivor["error"], "the survivor's all_reduce returned although its peer was dead"
    assert "hccl" in survivor["error"] and "emulated npu" in survivor["error"], survivor
    assert survivor["seconds"] < 60, survivor


#: DDP with every rank's model on one device (argv "shared") or on its own (argv "own").
TWO_RANKS_ONE_DEVICE = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.testing.emulated import install
    rank = int(os.environ["RANK"])
    install("npu", 2)
    dist.init_process_group("hccl", timeout=timedelta(seconds=60))
    index = 0 if sys.argv[1] == "shared" else rank
    error, losses = "", []
    try:
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Linear(4, 1).to(f"npu:{index}"), device_ids=[index])
        for _ in range(2):
            loss = model(torch.ones(2, 4, device=f"npu:{index}")).sum()
            loss.backward()
            losses.append(loss.item())
    except Exception as exc:
        error = str(exc).splitlines()[0]
    print(json.dumps({"error": error, "losses": len(losses)}), flush=True)
    dist.destroy_process_group()
    """
)


@multiprocess
@needs_emulated_device
def test_two_ranks_on_one_device_are_refused_on_every_rank_as_nccl_does() -> None:
    for out in finish(start_ranks(TWO_RANKS_ONE_DEVICE, 2, "shared")):
        result = json.loads(out.strip().splitlines()[-1])
        assert "duplicate device detected: rank 1 and rank 0 both on npu:0" in result["error"]
        assert "set_device(local_rank)" in result["error"]
        assert result["losses"] == 0


@multiprocess
@needs_emulated_device
def test_each_rank_on_a_device_of_its_own_trains() -> None:
    for out in finish(start_ranks(TWO_RANKS_ONE_DEVICE, 2, "own")):
        assert json.loads(out.strip().splitlines()[-1]) == {"error": "", "losses": 2}


#: all_reduce of float32 on rank 0 and of the dtype argv names on rank 1.
DTYPE_MISMATCH = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.testing.emulated import install
    rank = int(os.environ["RANK"])
    install("npu", 2)
    dist.init_process_group("hccl", timeout=timedelta(seconds=60))
    dtype = torch.float32 if rank == 0 else getattr(torch, sys.argv[1])
    tensor = torch.ones(4, dtype=dtype, device=f"npu:{rank}")
    error = ""
    try:
        dist.all_reduce(tensor)
    except Exception as exc:
        error = str(exc).splitlines()[0]
    print(json.dumps({"error": error, "sum": tensor.cpu().tolist()}), flush=True)
    dist.destroy_process_group()
    """
)


@multiprocess
@needs_emulated_device
def test_a_dtype_mismatch_across_ranks_is_reported_as_one_naming_both() -> None:
    for rank, out in enumerate(finish(start_ranks(DTYPE_MISMATCH, 2, "bfloat16"))):
        error = json.loads(out.strip().splitlines()[-1])["error"]
        mine, theirs = ("float32", "bfloat16") if rank == 0 else ("bfloat16", "float32")
        assert (
            f"dtype mismatch in all_reduce: rank {rank} passes {mine}, "
            f"rank {1 - rank} passes {theirs}; every rank must pass the same dtype."
        ) in error


@multiprocess
@needs_emulated_device
def test_the_same_dtype_on_every_rank_reduces() -> None:
    for out in finish(start_ranks(DTYPE_MISMATCH, 2, "float32")):
        assert json.loads(out.strip().splitlines()[-1]) == {"error": "", "sum": [2.0] * 4}
