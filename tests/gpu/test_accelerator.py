"""Every ``CudaAccelerator`` method on a real NVIDIA GPU, each against torch's own answer."""

from __future__ import annotations

import pytest
import torch

from anyaccel.backends.cuda import CudaAccelerator

from .harness import GPU, explain, run_python

pytestmark = GPU

MIB = 1 << 20


@pytest.fixture
def acc() -> CudaAccelerator:
    torch.cuda.synchronize()
    return CudaAccelerator()


# ------------------------------------------------------------------ devices
def test_devices_match_torch(acc: CudaAccelerator) -> None:
    assert acc.is_available() is True
    assert acc.device_count() == torch.cuda.device_count() >= 1
    acc.set_device(0)
    assert acc.current_device() == torch.cuda.current_device() == 0
    assert acc.current_device_name() == "cuda:0"
    assert acc.device_name() == "cuda"
    assert acc.device_name(0) == "cuda:0"
    assert acc.device(0) == torch.device("cuda:0")
    assert acc.on_accelerator(torch.zeros(1, device="cuda"))
    assert not acc.on_accelerator(torch.zeros(1))


def test_tensor_factories_make_device_tensors(acc: CudaAccelerator) -> None:
    for factory, dtype in [
        (acc.FloatTensor, torch.float32),
        (acc.HalfTensor, torch.float16),
        (acc.BFloat16Tensor, torch.bfloat16),
        (acc.LongTensor, torch.int64),
    ]:
        made = factory([1, 2, 3])
        assert (made.device.type, made.dtype, made.tolist()) == ("cuda", dtype, [1, 2, 3])


# ------------------------------------------------------------------ memory
def test_memory_figures_match_torch(acc: CudaAccelerator) -> None:
    block = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    assert acc.memory_allocated() == torch.cuda.memory_allocated() >= 64 * MIB
    assert acc.memory_allocated(0) == torch.cuda.memory_allocated(0)
    assert acc.memory_reserved() == torch.cuda.memory_reserved() >= 64 * MIB
    assert acc.memory_cached() == torch.cuda.memory_reserved()
    assert acc.max_memory_reserved() == torch.cuda.max_memory_reserved()
    stats = acc.memory_stats()
    assert (
        stats["allocated_bytes.all.current"]
        == torch.cuda.memory_stats()["allocated_bytes.all.current"]
    )
    del block


def test_peaks_rise_and_reset_as_torch_reports(acc: CudaAccelerator) -> None:
    acc.reset_peak_memory_stats()
    base = acc.memory_allocated()
    peak = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    del peak
    assert acc.max_memory_allocated() == torch.cuda.max_memory_allocated() >= base + 128 * MIB
    acc.reset_max_memory_allocated()
    assert acc.max_memory_allocated() == torch.cuda.max_memory_allocated()
    assert acc.max_memory_allocated() < base + 128 * MIB
    acc.reset_peak_memory_stats()
    assert acc.max_memory_reserved() == torch.cuda.max_memory_reserved()


def test_empty_cache_returns_cached_blocks(acc: CudaAccelerator) -> None:
    block = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    del block
    held = acc.memory_reserved()
    acc.empty_cache()
    assert acc.memory_reserved() == torch.cuda.memory_reserved() <= held - 256 * MIB


def test_total_and_available_memory_match_the_driver(acc: CudaAccelerator) -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    assert acc.total_memory() == acc.total_memory(0) == total
    free, driver_total = torch.cuda.mem_get_info(0)
    available = acc.available_memory(0)
    assert 0 < available <= driver_total
    # other processes may allocate between the two questions; 256 MiB of slack for them
    assert abs(available - free) <= 256 * MIB


# ------------------------------------------------------------------ streams and events
def test_streams_are_torch_streams(acc: CudaAccelerator) -> None:
    assert acc.Stream is torch.cuda.Stream
    assert acc.Event is torch.cuda.Event
    assert acc.current_stream() == torch.cuda.current_stream()
    assert acc.default_stream() == torch.cuda.default_stream()
    side = acc.Stream()
    with acc.stream(side):
        assert acc.current_stream() == side == torch.cuda.current_stream()
    assert acc.current_stream() == torch.cuda.default_stream()


def test_wait_stream_orders_a_slow_producer_before_its_consumer(acc: CudaAccelerator) -> None:
    side = acc.Stream()
    data = torch.zeros(1 << 20, device="cuda")
    side.wait_stream(acc.current_stream())
    with acc.stream(side):
        torch.cuda._sleep(50_000_000)  # ~tens of ms: a race would read the zeros
        data.fill_(7.0)
    acc.current_stream().wait_stream(side)
    total = data.sum()
    acc.synchronize()
    assert total.item() == 7.0 * (1 << 20)


def test_events_time_and_order_work(acc: CudaAccelerator) -> None:
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) > 0.0
    side = acc.Stream()
    ready = acc.Event()
    out = torch.zeros(4, device="cuda")
    with acc.stream(side):
        torch.cuda._sleep(20_000_000)
        out.add_(1.0)
        ready.record(side)
    acc.current_stream().wait_event(ready)
    assert out.cpu().tolist() == [1.0] * 4


def test_synchronize_waits_for_queued_work(acc: CudaAccelerator) -> None:
    done = acc.Event()
    torch.cuda._sleep(20_000_000)
    done.record()
    acc.synchronize()
    assert done.query()
    acc.synchronize(0)


# ------------------------------------------------------------------ random numbers
def test_seeds_match_torch(acc: CudaAccelerator) -> None:
    acc.manual_seed(1234)
    assert acc.initial_seed() == torch.cuda.initial_seed() == 1234
    first = torch.rand(8, device="cuda")
    acc.manual_seed_all(1234)
    assert torch.equal(torch.rand(8, device="cuda"), first)


def test_rng_state_round_trips(acc: CudaAccelerator) -> None:
    acc.manual_seed(7)
    state = acc.get_rng_state()
    assert torch.equal(state, torch.cuda.get_rng_state(0))
    assert torch.equal(acc.get_rng_state(0), state)
    drawn = torch.rand(16, device="cuda")
    acc.set_rng_state(state)
    assert torch.equal(torch.rand(16, device="cuda"), drawn)
    acc.set_rng_state(state, 0)
    assert torch.equal(torch.rand(16, device="cuda"), drawn)


def test_default_generator_is_torchs(acc: CudaAccelerator) -> None:
    generator = acc.default_generator(0)
    assert generator is torch.cuda.default_generators[0]
    generator.manual_seed(99)
    assert acc.initial_seed() == 99
    own = torch.Generator(device=acc.device_name(0)).manual_seed(99)
    assert torch.equal(torch.rand(4, device="cuda", generator=own), torch.rand(4, device="cuda"))
    assert acc.random() is torch.random


# ------------------------------------------------------------------ graphs
def test_cuda_graph_captures_and_replays(acc: CudaAccelerator) -> None:
    graph = acc.create_graph()
    assert isinstance(graph, torch.cuda.CUDAGraph)
    static = torch.zeros(1024, device="cuda")
    warmup = acc.Stream()
    warmup.wait_stream(acc.current_stream())
    with acc.stream(warmup):
        static.mul_(2).add_(1)  # warm up outside capture, as torch requires
    acc.current_stream().wait_stream(warmup)
    acc.synchronize()
    assert not acc.is_current_stream_capturing()
    capturing: list[bool] = []
    with acc.capture_to_graph(graph):
        capturing.append(acc.is_current_stream_capturing())
        static.mul_(2).add_(1)
    assert capturing == [True]
    static.fill_(1.0)
    for _ in range(3):
        acc.replay_graph(graph)
    acc.synchronize()
    assert static.cpu().unique().tolist() == [15.0]  # 1 -> 3 -> 7 -> 15


# ------------------------------------------------------------------ pinned memory
def test_pinned_memory_is_page_locked_and_copies_asynchronously(acc: CudaAccelerator) -> None:
    host = torch.arange(1 << 20, dtype=torch.float32)
    pinned = acc.pin_memory(host)
    assert acc.is_pinned(pinned) and pinned.is_pinned() and not acc.is_pinned(host)
    assert torch.equal(pinned, host)
    assert acc.pin_memory(pinned) is pinned
    fresh = acc.pin_memory(host, make_copy=False, match_shape=False)
    assert fresh.is_pinned() and fresh.shape == (host.numel(),)
    empty = acc.pin_empty(4, 5, dtype=torch.bfloat16)
    assert empty.is_pinned() and empty.shape == (4, 5) and empty.dtype == torch.bfloat16
    assert acc.pin_empty_like(host).is_pinned()
    device = pinned.to("cuda", non_blocking=True)
    back = acc.pin_empty_like(host)
    back.copy_(device, non_blocking=True)
    acc.synchronize()
    assert torch.equal(back, host)
    acc.unpin_memory(pinned)


def test_register_host_memory_page_locks_an_existing_buffer(acc: CudaAccelerator) -> None:
    buffer = torch.zeros(1 << 20, dtype=torch.uint8)
    assert acc.register_host_memory(buffer.data_ptr(), buffer.numel())
    try:
        assert buffer.is_pinned()
    finally:
        assert acc.unregister_host_memory(buffer.data_ptr())
    assert not buffer.is_pinned()


# ------------------------------------------------------------------ environment and dtypes
def test_visible_devices_env_hides_and_selects_devices(acc: CudaAccelerator) -> None:
    assert acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES"]
    env: dict[str, str] = {}
    acc.set_visible_devices_envs(env, [0])
    assert env == {"CUDA_VISIBLE_DEVICES": "0"}
    code = """
        import anyaccel, torch
        print(anyaccel.get_accelerator()._name, torch.cuda.device_count())
    """
    hidden = run_python(code, CUDA_VISIBLE_DEVICES="", DS_ACCELERATOR=None)
    assert hidden.returncode == 0, explain(hidden)
    assert hidden.stdout.split() == ["cpu", "0"]
    shown = run_python(code, CUDA_VISIBLE_DEVICES="0", DS_ACCELERATOR=None)
    assert shown.returncode == 0, explain(shown)
    assert shown.stdout.split() == ["cuda", "1"]


def test_dtypes_follow_the_compute_capability(acc: CudaAccelerator) -> None:
    major, _minor = torch.cuda.get_device_capability(0)
    assert acc.is_fp16_supported() is (major >= 7)
    assert acc.is_bf16_supported() is torch.cuda.is_bf16_supported()
    assert acc.is_fp64_supported()
    dtypes = acc.supported_dtypes()
    assert torch.float32 in dtypes
    assert (torch.float16 in dtypes) is acc.is_fp16_supported()
    assert (torch.bfloat16 in dtypes) is acc.is_bf16_supported()
    for dtype in dtypes:
        a = torch.randn(64, 64, device="cuda").to(dtype)
        product = (a @ a).float()
        reference = a.float() @ a.float()
        assert torch.allclose(product, reference, rtol=2e-2, atol=2e-1), dtype


def test_collective_compile_and_launch_names(acc: CudaAccelerator) -> None:
    assert acc.communication_backend_name() == "nccl"
    assert acc.get_compile_backend() == "inductor"
    assert acc.export_envs() == ["NCCL"]
    assert acc.is_synchronized_device() is False


def test_triton_support_follows_capability_and_install(acc: CudaAccelerator) -> None:
    import importlib.util

    major, _minor = torch.cuda.get_device_capability(0)
    expected = importlib.util.find_spec("triton") is not None and major >= 8
    assert acc.is_triton_supported() is expected


def test_profiler_ranges_and_lazy_call(acc: CudaAccelerator) -> None:
    acc.range_push("anyaccel-gpu-suite")
    acc.range_pop()
    called: list[int] = []
    acc.lazy_call(lambda: called.append(1))
    torch.cuda.synchronize()
    assert called == [1]  # CUDA is initialised, so the callback runs at once


def test_op_builders_come_from_the_cuda_package(acc: CudaAccelerator) -> None:
    from anyaccel.ops.cuda import FusedAdamBuilder

    assert acc.op_builder_dir() == "anyaccel.ops.cuda"
    assert acc.get_op_builder("FusedAdamBuilder") is FusedAdamBuilder
    assert isinstance(acc.create_op_builder("FusedAdamBuilder"), FusedAdamBuilder)
