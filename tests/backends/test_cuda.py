"""The CUDA backend against the simulated ``torch.cuda`` runtime (and a real GPU if present)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from anyaccel.backends.cuda import CudaAccelerator, probe
from anyaccel.testing.simulated import (
    SimulatedDeviceModule,
    simulate_cpu_only_torch,
    simulate_cuda,
)


@pytest.fixture
def sim() -> Iterator[SimulatedDeviceModule]:
    with simulate_cuda(device_count=2, capability=(8, 0)) as module:
        yield module


@pytest.fixture
def acc(sim: SimulatedDeviceModule) -> CudaAccelerator:
    return CudaAccelerator()


def called(sim: SimulatedDeviceModule, name: str) -> bool:
    return name in sim.calls


# ---------------------------------------------------------------- probe
def test_probe_on_cpu_only_torch_says_so() -> None:
    with simulate_cpu_only_torch():
        outcome = probe()
    assert outcome.kind == "not_installed"
    assert "CPU-only build" in outcome.reason
    assert "CUDA" in outcome.remedy


def test_probe_matches_the_installed_torch_build() -> None:
    """Whatever torch this is (CPU-only, CUDA or ROCm wheel, with or without a GPU)."""
    outcome = probe()
    if not torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]
        assert outcome.kind == "not_installed" and "CPU-only build" in outcome.reason
    elif torch.cuda.device_count() == 0:
        assert outcome.kind == "no_device" and "sees no GPU" in outcome.reason
        assert ("ROCm" if torch.version.hip else "CUDA") in outcome.reason
    else:
        assert outcome.available and outcome.device_count == torch.cuda.device_count()


def test_probe_counts_devices_without_initialising(sim: SimulatedDeviceModule) -> None:
    outcome = probe()
    assert outcome.available and outcome.device_count == 2
    assert sim.initialized is False
    assert sim.calls == ["device_count"]


def test_probe_with_no_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with simulate_cuda(device_count=0):
        outcome = probe()
    assert outcome.kind == "no_device"
    assert "CUDA_VISIBLE_DEVICES=''" in outcome.reason


def test_probe_names_rocm(monkeypatch: pytest.MonkeyPatch) -> None:
    with simulate_cuda(device_count=1, hip="6.2"):
        assert "ROCm" in probe().reason


# ---------------------------------------------------------------- identity
def test_identity(acc: CudaAccelerator) -> None:
    assert acc._name == "cuda"
    assert acc.communication_backend_name() == "nccl"
    assert acc.get_compile_backend() == "inductor"
    assert acc.supports_nvtx_domain is True
    assert acc.is_synchronized_device() is False
    assert acc.use_host_timers() is False
    assert acc.device_module is torch.cuda


# ---------------------------------------------------------------- device
def test_device_strings(acc: CudaAccelerator) -> None:
    assert acc.device_name() == "cuda"
    assert acc.device_name(1) == "cuda:1"
    assert acc.device(1) == torch.device("cuda", 1)
    assert acc.device() == torch.device("cuda")


def test_set_and_current_device(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    acc.set_device(1)
    assert acc.current_device() == 1
    assert acc.current_device_name() == "cuda:1"
    assert called(sim, "set_device")


def test_device_count_and_availability(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    assert acc.device_count() == 2
    assert acc.is_available() is True
    assert called(sim, "device_count") and called(sim, "is_available")


def test_synchronize_reaches_runtime(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    acc.synchronize()
    acc.synchronize(1)
    assert sim.calls.count("synchronize") == 2


# ---------------------------------------------------------------- RNG
def test_rng_state_round_trip(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    acc.manual_seed(5)
    state = acc.get_rng_state()
    first = torch.rand(3, generator=sim.default_generators[0])
    acc.set_rng_state(state)
    assert torch.equal(torch.rand(3, generator=sim.default_generators[0]), first)
    assert acc.get_rng_state(1).dtype == torch.uint8
    acc.set_rng_state(acc.get_rng_state(1), 1)
    assert called(sim, "get_rng_state") and called(sim, "set_rng_state")


def test_seeding(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    acc.manual_seed_all(9)
    assert [g.initial_seed() for g in sim.default_generators] == [9, 9]
    acc.manual_seed(11)
    assert acc.initial_seed() == 11
    assert acc.default_generator(1) is sim.default_generators[1]


# ---------------------------------------------------------------- streams, events, graphs
def test_streams_and_events_are_the_runtimes(acc: CudaAccelerator) -> None:
    assert acc.Stream is torch.cuda.Stream
    assert acc.Event is torch.cuda.Event
    stream = acc.Stream()
    with acc.stream(stream) as entered:
        assert entered is stream
    assert acc.current_stream(1).device == 1
    assert acc.default_stream().device == 0


def test_graph_capture_and_replay(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        assert acc.is_current_stream_capturing() is True
    assert acc.is_current_stream_capturing() is False
    acc.replay_graph(graph)
    assert graph.replays == 1
    assert called(sim, "CUDAGraph") and called(sim, "graph")


# ---------------------------------------------------------------- memory
def test_memory_figures_come_from_the_allocator(
    acc: CudaAccelerator, sim: SimulatedDeviceModule
) -> None:
    sim.allocate(3 * 1024 * 1024)
    sim.free(1024 * 1024)
    assert acc.memory_allocated() == 2 * 1024 * 1024
    assert acc.max_memory_allocated() == 3 * 1024 * 1024
    assert acc.memory_reserved() == acc.memory_cached() == 4 * 1024 * 1024
    assert acc.max_memory_reserved() == acc.max_memory_cached() == 4 * 1024 * 1024
    assert acc.memory_stats()["allocated_bytes.all.current"] == 2 * 1024 * 1024
    assert acc.memory_allocated(1) == 0


def test_peak_resets(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    sim.allocate(8 * 1024 * 1024)
    sim.free(8 * 1024 * 1024)
    acc.reset_max_memory_allocated()
    assert acc.max_memory_allocated() == 0
    acc.empty_cache()
    acc.reset_max_memory_cached()
    assert acc.max_memory_reserved() == 0
    sim.allocate(1024)
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == 1024


def test_total_and_available_memory(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    sim.allocate(1024**3)
    assert acc.total_memory() == 16 * 1024**3
    assert acc.available_memory() == 15 * 1024**3
    assert called(sim, "mem_get_info") and called(sim, "get_device_properties")


# ---------------------------------------------------------------- dtypes & capability
@pytest.mark.parametrize(
    ("capability", "fp16", "bf16", "dtypes"),
    [
        ((9, 0), True, True, [torch.float32, torch.float16, torch.bfloat16]),
        ((8, 0), True, True, [torch.float32, torch.float16, torch.bfloat16]),
        ((7, 0), True, False, [torch.float32, torch.float16]),
        ((6, 1), False, False, [torch.float32]),
    ],
)
def test_dtypes_follow_compute_capability(
    capability: tuple[int, int], fp16: bool, bf16: bool, dtypes: list[torch.dtype]
) -> None:
    with simulate_cuda(capability=capability):
        acc = CudaAccelerator()
        assert acc.is_fp16_supported() is fp16
        assert acc.is_bf16_supported() is bf16
        assert acc.supported_dtypes() == dtypes
        assert acc.is_fp64_supported() is True


def test_pascal_fp16_with_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ALLOW_DEPRECATED_FP16", "1")
    with simulate_cuda(capability=(6, 0)):
        assert CudaAccelerator().is_fp16_supported() is True


@pytest.mark.parametrize(("capability", "expected"), [((8, 6), True), ((7, 5), False)])
def test_triton_needs_capability_8(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: bool
) -> None:
    from anyaccel.backends import cuda as cuda_module

    monkeypatch.setattr(cuda_module, "package_installed", lambda name: name == "triton")
    with simulate_cuda(capability=capability):
        acc = CudaAccelerator()
        assert acc.is_triton_supported() is expected
        assert acc.prefer_triton_grouped_mm() is expected


def test_triton_needs_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.backends import cuda as cuda_module

    monkeypatch.setattr(cuda_module, "package_installed", lambda name: False)
    with simulate_cuda(capability=(9, 0)):
        assert CudaAccelerator().is_triton_supported() is False


# ---------------------------------------------------------------- tensor types & placement
def test_tensor_types_target_cuda(acc: CudaAccelerator) -> None:
    for prop, dtype in [("FloatTensor", torch.float32), ("HalfTensor", torch.float16)]:
        factory = getattr(acc, prop)
        assert (factory.dtype, factory.device) == (dtype, "cuda")


def test_on_accelerator(acc: CudaAccelerator) -> None:
    assert acc.on_accelerator(torch.ones(1)) is False


def test_host_memory_registration(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    buffer = torch.empty(4096, dtype=torch.uint8)
    assert acc.register_host_memory(buffer.data_ptr(), 4096) is True
    assert acc.unregister_host_memory(buffer.data_ptr()) is True
    assert acc.unregister_host_memory(buffer.data_ptr()) is False
    assert acc.pin_memory_alignment() == 1


# ---------------------------------------------------------------- profiling & misc
def test_ranges_reach_nvtx(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    acc.range_push("forward")
    assert sim.nvtx.stack == ["forward"]
    acc.range_pop()
    assert sim.nvtx.stack == []


def test_lazy_call_waits_for_init(acc: CudaAccelerator, sim: SimulatedDeviceModule) -> None:
    ran: list[str] = []
    fresh = SimulatedDeviceModule(device_count=1)
    lazy = CudaAccelerator(device_module=fresh)
    lazy.lazy_call(lambda: ran.append("cb"))
    assert ran == []
    fresh.init()
    assert ran == ["cb"]


# ---------------------------------------------------------------- launch environment
def test_visible_devices_cuda(acc: CudaAccelerator) -> None:
    env: dict[str, str] = {}
    acc.set_visible_devices_envs(env, [1, 3])
    assert env == {"CUDA_VISIBLE_DEVICES": "1,3"}
    assert acc.export_envs() == ["NCCL"]


def test_visible_devices_rocm_sets_hip_too() -> None:
    with simulate_cuda(hip="6.2"):
        acc = CudaAccelerator()
        env: dict[str, str] = {}
        acc.set_visible_devices_envs(env, [0])
        assert env == {"CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}
        assert acc.is_fp16_supported() is True


def test_simulation_is_undone() -> None:
    with simulate_cuda():
        pass
    assert not isinstance(torch.cuda, SimulatedDeviceModule)
    assert torch.version.cuda is None or isinstance(torch.version.cuda, str)


# ---------------------------------------------------------------- a real GPU, where one exists
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a real CUDA/ROCm GPU")
def test_real_gpu_round_trip() -> None:
    acc = CudaAccelerator()
    x = acc.FloatTensor([1.0, 2.0])
    assert acc.on_accelerator(x)
    acc.synchronize()
    assert acc.memory_allocated() > 0
    pinned = acc.pin_memory(torch.ones(8))
    assert acc.is_pinned(pinned)
    graph = acc.create_graph()
    static = torch.zeros(4, device="cuda")
    stream = acc.Stream()
    stream.wait_stream(acc.current_stream())
    with acc.stream(stream):
        static += 1  # warm up outside capture
    acc.current_stream().wait_stream(stream)
    with acc.capture_to_graph(graph):
        static += 1
    acc.replay_graph(graph)
    acc.synchronize()
    assert static.tolist() == [3.0] * 4
