"""Each emulated device's memory accounting, and its capacity (torch.OutOfMemoryError beyond)."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated


@on_emulated()
def test_memory_allocated_counts_exact_bytes_per_device() -> None:
    before = (torch.emu.memory_allocated(0), torch.emu.memory_allocated(1))
    tensor = torch.empty(1000, dtype=torch.float64, device="emu:1")
    assert torch.emu.memory_allocated(1) == before[1] + 8000
    assert torch.emu.memory_allocated(0) == before[0]
    assert torch.emu.memory_reserved(1) == torch.emu.memory_allocated(1)
    del tensor
    assert torch.emu.memory_allocated(1) == before[1]


@on_emulated()
def test_results_made_by_cpu_kernels_are_counted_on_the_device() -> None:
    source = torch.ones(256, device="emu:0")
    before = torch.emu.memory_allocated(0)
    result = source * 2  # a new result, adopted into device memory
    assert torch.emu.memory_allocated(0) == before + 1024
    view = result[:10]
    assert torch.emu.memory_allocated(0) == before + 1024
    del result, view
    assert torch.emu.memory_allocated(0) == before


@on_emulated()
def test_peaks_and_their_reset() -> None:
    torch.emu.reset_peak_memory_stats(0)
    base = torch.emu.memory_allocated(0)
    transient = torch.empty(4096, dtype=torch.uint8, device="emu:0")
    del transient
    assert torch.emu.max_memory_allocated(0) == base + 4096
    assert torch.emu.max_memory_reserved(0) == base + 4096
    torch.emu.reset_peak_memory_stats(0)
    assert torch.emu.max_memory_allocated(0) == base


@on_emulated()
def test_memory_stats_use_cudas_keys() -> None:
    tensor = torch.empty(10, device="emu:1")
    stats = torch.emu.memory_stats(1)
    assert stats["allocated_bytes.all.current"] == torch.emu.memory_allocated(1)
    assert stats["reserved_bytes.all.peak"] == torch.emu.max_memory_reserved(1)
    assert stats["allocation.all.current"] >= 1 and stats["num_ooms"] == 0
    del tensor


@on_emulated()
def test_without_a_capacity_the_device_reports_the_hosts_memory() -> None:
    free, total = torch.emu.mem_get_info(0)
    assert total == torch.emu.get_device_properties(0).total_memory > 0
    assert free == total - torch.emu.memory_allocated(0)
    torch.emu.empty_cache()  # nothing is cached: a no-op that must not raise


@on_emulated(memory_capacity="1MiB")
def test_allocating_beyond_the_capacity_raises_cudas_out_of_memory_error() -> None:
    held = torch.empty(600 * 1024, dtype=torch.uint8, device="emu:0")
    with pytest.raises(torch.OutOfMemoryError) as raised:
        torch.empty(600 * 1024, dtype=torch.uint8, device="emu:0")
    message = str(raised.value)
    assert "emu out of memory. Tried to allocate 600.00 KiB" in message
    assert "Device 0 has a total capacity of 1024.00 KiB of which 424.00 KiB is free" in message
    assert "600.00 KiB is allocated by PyTorch" in message
    assert torch.emu.memory_stats(0)["num_ooms"] == 1
    torch.empty(600 * 1024, dtype=torch.uint8, device="emu:1")  # the other device has room
    del held


@on_emulated(memory_capacity="1MiB")
def test_the_capacity_bounds_mem_get_info() -> None:
    assert torch.emu.mem_get_info(1) == (2**20 - torch.emu.memory_allocated(1), 2**20)


@on_emulated(device_type="npu")
def test_an_allocation_the_host_cannot_back_raises_out_of_memory_naming_device_and_size() -> None:
    """Without a capacity the host allocator's refusal is still the device's OutOfMemoryError."""
    before = torch.npu.memory_allocated(0)
    with pytest.raises(torch.OutOfMemoryError) as raised:
        torch.empty(1 << 50, dtype=torch.uint8, device="npu:0")
    message = str(raised.value)
    assert "npu out of memory. Tried to allocate 1048576.00 GiB on device npu:0" in message
    assert torch.npu.memory_allocated(0) == before
    assert torch.npu.memory_stats(0)["num_ooms"] == 1


@on_emulated(device_type="npu")
def test_a_cpu_kernel_result_the_host_cannot_back_raises_out_of_memory() -> None:
    """A result made by a CPU kernel becomes device memory: its failure is the device's too."""
    row = torch.zeros(1, 1 << 25, dtype=torch.uint8, device="npu:1")
    with pytest.raises(torch.OutOfMemoryError) as raised:
        row.expand(1 << 25, 1 << 25).contiguous()
    message = str(raised.value)
    assert "npu out of memory. Tried to allocate 1048576.00 GiB on device npu:1" in message
