"""The simulated device module: call recording, initialisation, bookkeeping, missing names."""

from __future__ import annotations

import pytest
import torch

from anyaccel.testing.simulated import SimulatedDeviceModule, SimulatedGraph

MiB = 1024**2


def test_public_calls_are_recorded_in_order() -> None:
    module = SimulatedDeviceModule(device_count=2)
    module.device_count()
    module.is_available()
    module.set_device(1)
    assert module.calls == ["device_count", "is_available", "set_device"]


def test_bookkeeping_helpers_are_not_recorded() -> None:
    module = SimulatedDeviceModule()
    module.allocate(10)
    module.free(10)
    module.is_initialized()
    assert module.calls == []


def test_querying_the_device_count_does_not_initialise() -> None:
    module = SimulatedDeviceModule()
    module.device_count()
    module.is_available()
    module.get_device_name()
    assert module.initialized is False


@pytest.mark.parametrize(
    ("name", "args"),
    [("set_device", (0,)), ("synchronize", ()), ("current_device", ()), ("mem_get_info", ())],
)
def test_calls_that_create_a_context_mark_it_initialised(name: str, args: tuple[int, ...]) -> None:
    module = SimulatedDeviceModule()
    getattr(module, name)(*args)
    assert module.initialized is True and module.is_initialized() is True


def test_a_missing_name_raises_attribute_error_like_a_module() -> None:
    module = SimulatedDeviceModule("torch.vendor", missing=("empty_cache",))
    with pytest.raises(AttributeError, match=r"'torch\.vendor' has no attribute 'empty_cache'"):
        module.empty_cache()
    assert not hasattr(module, "empty_cache") and module.calls == []


def test_no_graph_class_means_no_graph_context() -> None:
    module = SimulatedDeviceModule(graph_class_name=None)
    assert not hasattr(module, "graph") and not hasattr(module, "CUDAGraph")


def test_an_invalid_ordinal_is_refused_naming_the_count() -> None:
    module = SimulatedDeviceModule(device_count=2)
    with pytest.raises(RuntimeError, match="invalid device ordinal 2 \\(have 2 devices\\)"):
        module.set_device(2)


@pytest.mark.parametrize("device", [1, "cuda:1", torch.device("cuda", 1)])
def test_devices_are_named_by_index_string_or_torch_device(device: object) -> None:
    module = SimulatedDeviceModule(device_count=2)
    module.allocate(MiB, device=device)
    assert module.memory_allocated(1) == MiB and module.memory_allocated(0) == 0


def test_reserved_memory_grows_in_allocator_blocks_and_empty_cache_trims_it() -> None:
    module = SimulatedDeviceModule(total_memory=64 * MiB)
    module.allocate(3 * MiB)
    assert module.memory_reserved() == 4 * MiB  # two 2 MiB segments
    module.allocate(3 * MiB)
    module.free(5 * MiB)
    assert module.memory_allocated() == MiB and module.max_memory_allocated() == 6 * MiB
    assert module.memory_reserved() == 6 * MiB  # the allocator keeps freed blocks
    module.empty_cache()
    assert module.memory_reserved() == 2 * MiB and module.max_memory_reserved() == 6 * MiB
    assert module.mem_get_info() == (62 * MiB, 64 * MiB)
    module.reset_peak_memory_stats()
    assert module.max_memory_allocated() == MiB and module.max_memory_reserved() == 2 * MiB


def test_memory_stats_report_the_current_and_peak_figures() -> None:
    module = SimulatedDeviceModule()
    module.allocate(MiB)
    module.free(MiB)
    stats = module.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0 and stats["allocated_bytes.all.peak"] == MiB


def test_lazy_calls_wait_for_initialisation() -> None:
    module = SimulatedDeviceModule()
    ran: list[str] = []
    module._lazy_call(lambda: ran.append("queued"))
    assert ran == []
    module.init()
    assert ran == ["queued"]
    module._lazy_call(lambda: ran.append("now"))  # initialised: runs at once
    assert ran == ["queued", "now"]


def test_each_device_has_its_own_generator() -> None:
    module = SimulatedDeviceModule(device_count=2)
    module.manual_seed_all(7)
    state = module.get_rng_state(1)
    module.set_device(1)
    module.manual_seed(8)
    assert module.initial_seed() == 8 and not torch.equal(module.get_rng_state(1), state)
    module.set_rng_state(state, 1)
    assert torch.equal(module.get_rng_state(1), state)
    assert module.default_generators[0].initial_seed() == 7


def test_a_graph_replays_only_what_it_captured() -> None:
    module = SimulatedDeviceModule()
    graph = module.CUDAGraph()
    assert isinstance(graph, SimulatedGraph)
    with pytest.raises(RuntimeError, match="captured nothing"):
        graph.replay()
    with module.graph(graph):
        assert module.is_current_stream_capturing() is True
    assert module.is_current_stream_capturing() is False
    graph.replay()
    graph.replay()
    assert graph.replays == 2
    graph.reset()
    with pytest.raises(RuntimeError):
        graph.replay()


def test_the_profiler_keeps_its_range_stack() -> None:
    module = SimulatedDeviceModule(profiler_name="nvtx")
    assert module.nvtx.range_push("outer") == 0
    assert module.nvtx.range_push("inner") == 1
    assert module.nvtx.range_pop() == 1 and module.nvtx.stack == ["outer"]


def test_host_registration_goes_through_the_named_runtime() -> None:
    module = SimulatedDeviceModule(host_register=("npurt", "npuHostRegister", "npuHostUnregister"))
    runtime = module.npurt()
    assert runtime.npuHostRegister(4096, 64, 0) == 0 and runtime.registered == {4096: 64}
    assert runtime.npuHostUnregister(4096) == 0
    assert runtime.npuHostUnregister(4096) == 1  # not registered any more


def test_device_properties_carry_name_memory_and_capability() -> None:
    module = SimulatedDeviceModule(capability=(9, 0), total_memory=80 * MiB, device_name="H")
    props = module.get_device_properties(0)
    assert (props.name, props.total_memory, props.major, props.minor) == ("H", 80 * MiB, 9, 0)
    assert module.get_device_capability() == (9, 0)


def test_with_no_device_the_generator_calls_fail_as_the_real_runtime_does() -> None:
    module = SimulatedDeviceModule(device_count=0)
    module.manual_seed(3)  # lazy in the real runtime: nothing to seed, no error
    for call in (module.initial_seed, module.get_rng_state):
        with pytest.raises(RuntimeError, match="No CUDA devices are available"):
            call()
    with pytest.raises(RuntimeError, match="No CUDA devices are available"):
        module.set_rng_state(torch.get_rng_state())
