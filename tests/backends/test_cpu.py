"""The CPU backend, for real: every contract method on this machine."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anyaccel.backends import cpu as cpu_module
from anyaccel.backends.cpu import CpuAccelerator, numa_node_count
from anyaccel.errors import InvalidSettingError


@pytest.fixture
def acc(monkeypatch: pytest.MonkeyPatch) -> CpuAccelerator:
    monkeypatch.delenv("LOCAL_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return CpuAccelerator()


# ---------------------------------------------------------------- identity
def test_name_and_compile_backend(acc: CpuAccelerator) -> None:
    assert acc._name == "cpu"
    assert acc.get_compile_backend() == "inductor"


def test_execution_model_is_synchronous(acc: CpuAccelerator) -> None:
    assert acc.is_synchronized_device() is True
    assert acc.use_host_timers() is True
    assert acc.resolves_data_dependency() is True
    assert acc.handles_memory_backpressure() is True
    assert acc.prefer_triton_grouped_mm() is False
    assert acc.supports_nvtx_domain is False


def test_communication_backend_is_anyaccel_shm_registered_when_asked_not_on_import() -> None:
    # A fresh interpreter: `import anyaccel` registers nothing; asking names and registers it.
    script = (
        "import sys, anyaccel, torch.distributed as dist\n"
        "before = 'ANYACCEL_SHM' in getattr(dist.Backend, '_plugins', {})\n"
        "early = sorted(m for m in sys.modules if m.startswith('anyaccel.distributed'))\n"
        "acc = anyaccel.get_accelerator()\n"
        "names = [acc.communication_backend_name() for _ in range(2)]\n"
        "print(before, early, names, dist.is_backend_available(names[0]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ANYACCEL_SHM_BACKEND", "WORLD_SIZE")}
    env.update(DS_ACCELERATOR="cpu")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "False [] ['anyaccel_shm', 'anyaccel_shm'] True"


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_anyaccel_shm_backend_off_names_gloo(
    acc: CpuAccelerator, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", value)
    assert acc.communication_backend_name() == "gloo"


def test_a_bad_anyaccel_shm_backend_is_refused_naming_it(
    acc: CpuAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "maybe")
    with pytest.raises(InvalidSettingError, match="ANYACCEL_SHM_BACKEND='maybe'"):
        acc.communication_backend_name()


def test_ranks_on_several_nodes_get_gloo_and_on_one_node_anyaccel_shm(
    acc: CpuAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANYACCEL_SHM_BACKEND", raising=False)
    torchrun = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node0"}
    for name, value in torchrun.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun --nnodes 2 --nproc-per-node 2
    assert acc.communication_backend_name() == "gloo"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert acc.communication_backend_name() == "anyaccel_shm"


def test_the_name_is_resolved_from_the_distributed_layer() -> None:
    # The string names a real function (a backend never imports anyaccel.distributed).
    from anyaccel.distributed.shm import backend

    module, _, attribute = cpu_module.CPU_COLLECTIVES.partition(":")
    assert module == backend.__name__ and getattr(backend, attribute) is backend.cpu_backend_name


def test_communication_backend_is_ccl_when_bindings_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_module, "ccl_backend_available", lambda: True)
    assert CpuAccelerator().communication_backend_name() == "ccl"


# ---------------------------------------------------------------- device
@pytest.mark.parametrize("index", [None, 0, 3])
def test_device_names_are_always_cpu(acc: CpuAccelerator, index: int | None) -> None:
    assert acc.device_name(index) == "cpu"
    assert acc.device(index) == torch.device("cpu")


def test_current_device_is_local_rank_as_int(
    acc: CpuAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert acc.current_device() == 0
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert acc.current_device() == 3
    assert isinstance(acc.current_device(), int)
    assert acc.current_device_name() == "cpu"


def test_bad_local_rank_names_the_value(
    acc: CpuAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_RANK", "first")
    with pytest.raises(ValueError, match="LOCAL_RANK='first'"):
        acc.current_device()


def test_set_device_and_synchronize_are_accepted(acc: CpuAccelerator) -> None:
    acc.set_device(1)
    acc.synchronize()
    acc.synchronize(0)
    assert acc.device_name() == "cpu"


def test_device_count_from_local_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_SIZE", "4")
    assert CpuAccelerator().device_count() == 4


def test_device_count_falls_back_to_numa_nodes(acc: CpuAccelerator) -> None:
    assert acc.device_count() == numa_node_count() >= 1


def test_device_count_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_SIZE", "2")
    acc = CpuAccelerator()
    monkeypatch.setenv("LOCAL_SIZE", "8")
    assert acc.device_count() == 2


@pytest.mark.parametrize("value", ["two", "0"])
def test_bad_local_size_names_the_value(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LOCAL_SIZE", value)
    with pytest.raises(ValueError, match=f"LOCAL_SIZE='{value}'"):
        CpuAccelerator()


def test_numa_node_count_reads_sysfs_layout(tmp_path: Path) -> None:
    for name in ("node0", "node1", "possible", "has_cpu"):
        (tmp_path / name).mkdir()
    assert numa_node_count(tmp_path) == 2
    assert numa_node_count(tmp_path / "missing") == 1


def test_is_available(acc: CpuAccelerator) -> None:
    assert acc.is_available() is True


# ---------------------------------------------------------------- RNG
def test_rng_state_round_trip_reproduces_draws(acc: CpuAccelerator) -> None:
    acc.manual_seed(1234)
    state = acc.get_rng_state()
    first = torch.rand(5)
    acc.set_rng_state(state)
    assert torch.equal(torch.rand(5), first)
    assert state.dtype == torch.uint8


def test_manual_seed_all_and_initial_seed(acc: CpuAccelerator) -> None:
    acc.manual_seed_all(77)
    assert acc.initial_seed() == 77
    a = torch.rand(3)
    acc.manual_seed(77)
    assert torch.equal(torch.rand(3), a)


def test_default_generator_and_random_module(acc: CpuAccelerator) -> None:
    assert acc.default_generator(0) is torch.default_generator
    assert acc.random() is torch.random


# ---------------------------------------------------------------- streams & events
def test_streams_work_as_contexts(acc: CpuAccelerator) -> None:
    stream = acc.Stream()
    with acc.stream(stream) as entered:
        assert entered is stream
        y = torch.ones(2) + 1
    stream.synchronize()
    assert stream.query() is True
    assert acc.current_stream() == acc.default_stream()
    assert torch.equal(y, torch.full((2,), 2.0))


def test_events_time_host_work(acc: CpuAccelerator) -> None:
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record()
    torch.ones(1000, 1000).sum()
    end.record()
    end.synchronize()
    assert end.query() is True
    assert start.elapsed_time(end) >= 0.0


def test_event_elapsed_time_needs_records(acc: CpuAccelerator) -> None:
    with pytest.raises(RuntimeError, match="record"):
        acc.Event().elapsed_time(acc.Event())


# ---------------------------------------------------------------- memory
def test_memory_allocated_tracks_process_growth(acc: CpuAccelerator) -> None:
    before = acc.memory_allocated()
    block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
    after = acc.memory_allocated()
    assert after - before >= 48 * 1024 * 1024
    del block


def test_peak_is_at_least_current_and_reset_lowers_it(acc: CpuAccelerator) -> None:
    block = torch.ones(128 * 1024 * 1024 // 4)
    del block
    acc.empty_cache()
    # Current first, then the peak: the resident set may grow between the two reads.
    current = acc.memory_allocated()
    peak_before = acc.max_memory_allocated()
    assert peak_before >= current
    acc.reset_peak_memory_stats()
    current = acc.memory_allocated()  # read before the peak: the process may grow in between
    assert acc.max_memory_allocated() >= current
    assert acc.max_memory_allocated() < peak_before


def test_reset_aliases_reset_the_peak(acc: CpuAccelerator) -> None:
    for reset in (acc.reset_max_memory_allocated, acc.reset_max_memory_cached):
        block = torch.ones(64 * 1024 * 1024 // 4)
        del block
        acc.empty_cache()
        high = acc.max_memory_allocated()
        reset()
        assert acc.max_memory_allocated() < high


def test_reserved_and_cached_figures_are_consistent(acc: CpuAccelerator) -> None:
    # Read the current figure first: the process may grow between the two reads, and a peak
    # read later must still cover the earlier current value.
    reserved = acc.memory_reserved()
    assert reserved > 0
    assert acc.max_memory_reserved() >= reserved
    cached = acc.memory_cached()
    assert cached > 0
    assert acc.max_memory_cached() >= cached


def test_memory_stats_has_cuda_style_keys(acc: CpuAccelerator) -> None:
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"] > 0
    assert stats["system.total"] == acc.total_memory()


def test_total_and_available_memory(acc: CpuAccelerator) -> None:
    import psutil

    total = acc.total_memory()
    assert 0 < acc.available_memory() <= total <= psutil.virtual_memory().total


def test_cgroup_limit_bounds_total_memory(
    acc: CpuAccelerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_module, "_cgroup_memory_limit", lambda: 1024**3)
    assert acc.total_memory() == 1024**3
    assert acc.available_memory() <= 1024**3


# ---------------------------------------------------------------- dtypes & tensor types
def test_supported_dtypes(acc: CpuAccelerator) -> None:
    dtypes = acc.supported_dtypes()
    assert dtypes[:2] == [torch.float32, torch.bfloat16]
    assert (torch.float16 in dtypes) == acc.is_fp16_supported()
    assert acc.is_bf16_supported() is True
    assert acc.is_fp64_supported() is True


def test_fp16_follows_onednn(acc: CpuAccelerator) -> None:
    assert acc.is_fp16_supported() == bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())


# ---------------------------------------------------------------- pinning & placement
def test_pin_memory_returns_the_tensor_itself_as_deepspeeds_cpu_accelerator(
    acc: CpuAccelerator,
) -> None:
    t = torch.ones(4)
    assert acc.pin_memory(t) is t
    assert acc.pin_memory(t, False) is t  # positional make_copy, as DeepSpeed calls it
    assert acc.pin_memory(t, align_bytes=64) is t
    assert acc.pin_memory(t, make_copy=False, match_shape=False) is t
    assert acc.is_pinned(t) is False


def test_unpin_memory_returns_none_and_leaves_the_tensor(acc: CpuAccelerator) -> None:
    t = torch.ones(4)
    assert acc.unpin_memory(t) is None
    assert t.tolist() == [1.0] * 4


def test_create_op_builder_takes_deepspeeds_cpu_keyword(acc: CpuAccelerator) -> None:
    assert acc.create_op_builder(op_name="NoSuchBuilder") is None
    assert type(acc.create_op_builder(op_name="CPUAdamBuilder")) is acc.get_op_builder(
        "CPUAdamBuilder"
    )


def test_get_rss_and_reset_rss_report_the_resident_set(acc: CpuAccelerator) -> None:
    import psutil

    rss = acc.get_rss()
    assert abs(rss - psutil.Process().memory_info().rss) < 64 << 20
    reset = acc.reset_rss()
    assert reset > 0 and acc.max_memory_allocated() >= reset - (64 << 20)
    block = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB touched
    assert acc.get_rss() >= reset + (32 << 20)
    assert acc.max_memory_allocated() >= acc.get_rss() - (8 << 20)
    del block


def test_pin_empty_shapes_and_dtype(acc: CpuAccelerator) -> None:
    a = acc.pin_empty(2, 3, dtype=torch.float16)
    b = acc.pin_empty((2, 3), dtype=torch.float16)
    like = acc.pin_empty_like(a, dtype=torch.float32)
    assert a.shape == b.shape == like.shape == (2, 3)
    assert a.dtype == torch.float16 and like.dtype == torch.float32
    assert acc.pin_empty_like(a).dtype == torch.float16


def test_pin_empty_rejects_a_device(acc: CpuAccelerator) -> None:
    with pytest.raises(ValueError, match="device='meta'"):
        acc.pin_empty(2, dtype=torch.float32, device="meta")


def test_host_registration_is_a_noop(acc: CpuAccelerator) -> None:
    buffer = torch.empty(1024, dtype=torch.uint8)
    assert acc.pin_memory_alignment() == 1
    assert acc.register_host_memory(buffer.data_ptr(), 1024) is False
    assert acc.unregister_host_memory(buffer.data_ptr()) is False


def test_on_accelerator(acc: CpuAccelerator) -> None:
    assert acc.on_accelerator(torch.ones(1)) is True
    assert acc.on_accelerator(torch.ones(1, device="meta")) is False


# ---------------------------------------------------------------- profiling, misc, graphs
def test_ranges_and_lazy_call(acc: CpuAccelerator) -> None:
    assert acc.range_push("step") is None
    assert acc.range_pop() is None
    assert acc.range_push("step", domain="train", category="fwd") is None
    calls: list[int] = []
    acc.lazy_call(lambda: calls.append(1))
    assert calls == [1]
    assert acc.amp() is None
    assert acc.is_triton_supported() is False


def test_graphs_are_noops_that_still_work(acc: CpuAccelerator) -> None:
    graph = acc.create_graph()
    x = torch.zeros(2)
    with acc.capture_to_graph(graph, pool=None, stream=acc.Stream()) as captured:
        assert captured is graph
        assert acc.is_current_stream_capturing() is False
        x += 1
    acc.replay_graph(graph)
    assert torch.equal(x, torch.ones(2))  # ran once, eagerly
    assert graph.replays == 1


# ---------------------------------------------------------------- launch environment
def test_launch_environment(acc: CpuAccelerator) -> None:
    assert acc.export_envs() == []
    assert acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES"]
    env: dict[str, str] = {}
    acc.set_visible_devices_envs(env, [0, 2])
    assert env == {"CUDA_VISIBLE_DEVICES": "0,2"}


# ---------------------------------------------------------------- compile
def test_set_compile_backend_accepts_known(acc: CpuAccelerator) -> None:
    acc.set_compile_backend("eager")
    assert acc.get_compile_backend() == "eager"
    assert CpuAccelerator().get_compile_backend() == "inductor"  # per instance


def test_set_compile_backend_rejects_unknown_listing_valid(acc: CpuAccelerator) -> None:
    with pytest.raises(ValueError, match=r"'nonsense'.*inductor"):
        acc.set_compile_backend("nonsense")


# ---------------------------------------------------------------- op building
def test_op_builder_lookups(acc: CpuAccelerator) -> None:
    assert acc.op_builder_dir() == "anyaccel.ops.cpu"
    assert acc.get_op_builder("NoSuchBuilder") is None
    assert acc.create_op_builder("NoSuchBuilder") is None
    from torch.utils.cpp_extension import BuildExtension

    assert acc.build_extension() is BuildExtension


def test_tensor_types_take_sizes_and_answer_isinstance(acc: CpuAccelerator) -> None:
    assert acc.FloatTensor(2).shape == (2,)
    assert isinstance(acc.FloatTensor([1.0]), acc.FloatTensor)


def test_a_subclass_that_names_its_backend_keeps_it_and_one_that_does_not_gets_anyaccel_shm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANYACCEL_SHM_BACKEND", raising=False)

    class Named(CpuAccelerator):
        def __init__(self) -> None:
            super().__init__()
            self._communication_backend_name = "gloo"  # a board's own choice, as DeepSpeed's

    class Declared(CpuAccelerator):
        _communication_backend_name = "gloo"

    class Plain(CpuAccelerator):
        pass

    assert Named().communication_backend_name() == "gloo"
    assert Declared().communication_backend_name() == "gloo"
    assert Plain().communication_backend_name() == "anyaccel_shm"
    # an accelerator sent to a spawned rank (Lightning pickles its strategy) still asks
    sent = pickle.loads(pickle.dumps(CpuAccelerator()))
    assert sent._communication_backend_name == "gloo"
    assert sent.communication_backend_name() == "anyaccel_shm"


def test_threads_asking_at_once_register_the_backend_once() -> None:
    # torch refuses a second registration of one name: the first askers race for it here
    script = (
        "import threading, anyaccel\n"
        "acc = anyaccel.get_accelerator()\n"
        "names, go = [], threading.Barrier(8)\n"
        "def ask():\n"
        "    go.wait()\n"
        "    names.append(acc.communication_backend_name())\n"
        "threads = [threading.Thread(target=ask) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(sorted(set(names)), len(names))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ANYACCEL_SHM_BACKEND", "WORLD_SIZE")}
    env.update(DS_ACCELERATOR="cpu")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['anyaccel_shm'] 8"
