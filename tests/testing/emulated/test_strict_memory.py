"""Strict memory: device memory out of the host's reach outside the device's own kernels.

A host library reading a device tensor's ``data_ptr()`` dies with SIGSEGV, as on a GPU (each
crash in a fresh process, with a timeout); the fixed twin (``.cpu()`` first) and everything the
device itself does (ops, the CPU-kernel fallback, copies, resizing, checkpoints, pinned memory,
threads) keep working. Whether memory is open is asked of the kernel (``write(2)`` from it to a
pipe fails with EFAULT where the pages are protected), so those tests need no crash.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import signal
import threading

import pytest
import torch

from anyaccel.emulated.spec import EmulatedSpec, spec_from_environment
from anyaccel.errors import InvalidSettingError

from .worker import on_emulated, run_python

_libc = ctypes.CDLL(None, use_errno=True)


def _host_can_read(address: int, size: int = 4) -> bool:
    """Whether the host may read ``size`` bytes at ``address`` (the kernel checks; no crash)."""
    read, write = os.pipe()
    try:
        written = _libc.write(write, ctypes.c_void_p(address), ctypes.c_size_t(size))
        if written < 0:
            assert ctypes.get_errno() == errno.EFAULT
        return bool(written == size)
    finally:
        os.close(read)
        os.close(write)


# --- the bug and its fixed twin, each in a fresh process ---------------------------------------
#: MODE, MADE, CODE set before it: a device tensor made as MADE, and a host read of its first
#: float through ctypes (CODE "fixed": of its .cpu() copy).
HOST_READ = """
import ctypes
import torch
from anyaccel.testing.emulated import install
install("npu", 1, strict_memory=MODE == "strict")
made = {
    "factory": lambda: torch.full((4,), 7.0, device="npu:0"),
    "op result": lambda: torch.full((4,), 3.5, device="npu:0") * 2,
    "copied from the cpu": lambda: torch.full((4,), 7.0).to("npu:0"),
    "a large result": lambda: torch.full((1 << 16,), 3.5, device="npu:0") + 3.5,
}[MADE]()
source = made.cpu() if CODE == "fixed" else made
print("read", ctypes.c_float.from_address(source.data_ptr()).value, flush=True)
"""


def _host_read(mode: str, made: str, code: str) -> tuple[int, str]:
    """The return code and output of HOST_READ in a fresh process."""
    script = f"MODE, MADE, CODE = {mode!r}, {made!r}, {code!r}\n{HOST_READ}"
    finished = run_python(script, timeout=300)
    return finished.returncode, finished.stdout + finished.stderr


@pytest.mark.parametrize("made", ["factory", "op result", "copied from the cpu", "a large result"])
def test_a_host_read_of_device_memory_dies_with_sigsegv_in_strict_mode(made: str) -> None:
    returncode, output = _host_read("strict", made, "bug")
    assert returncode == -signal.SIGSEGV, output
    assert "read" not in output


def test_the_fixed_twin_copies_to_the_cpu_first_and_reads() -> None:
    returncode, output = _host_read("strict", "op result", "fixed")
    assert returncode == 0, output
    assert "read 7.0" in output


def test_by_default_a_host_read_of_device_memory_is_not_caught() -> None:
    returncode, output = _host_read("default", "factory", "bug")
    assert returncode == 0, output
    assert "read 7.0" in output


# --- turning it on ----------------------------------------------------------------------------
def test_the_environment_spec_takes_a_strict_memory_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYACCEL_EMULATED", "npu:2:strict_memory")
    assert spec_from_environment() == EmulatedSpec("npu", 2, None, True)
    monkeypatch.setenv("ANYACCEL_EMULATED", "npu:2:8GiB:strict_memory")
    assert spec_from_environment() == EmulatedSpec("npu", 2, 8 << 30, True)
    monkeypatch.setenv("ANYACCEL_EMULATED", "npu:2:8GiB")
    assert spec_from_environment().strict_memory is False


def test_a_strict_memory_field_after_too_many_parts_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANYACCEL_EMULATED", "npu:2:8GiB:x:strict_memory")
    with pytest.raises(InvalidSettingError, match=r"4 ':'-separated parts.*'strict_memory'"):
        spec_from_environment()


def test_a_spec_refuses_a_strict_memory_that_is_not_a_bool() -> None:
    with pytest.raises(ValueError, match=r"strict_memory 'yes' must be True or False"):
        EmulatedSpec("npu", 2, None, "yes")  # type: ignore[arg-type]


# --- what keeps working -----------------------------------------------------------------------
@on_emulated(strict_memory=True)
def test_device_memory_is_closed_to_the_host_between_kernels() -> None:
    from anyaccel.emulated.runtime import native

    assert native().strict_memory()
    tensor = torch.arange(1024.0, device="emu:0")
    assert not _host_can_read(tensor.data_ptr())
    assert (tensor * 2).sum().item() == 1023.0 * 1024.0
    assert not _host_can_read(tensor.data_ptr())


@on_emulated(strict_memory=True)
def test_ops_and_the_cpu_kernel_fallback_give_the_cpus_results() -> None:
    torch.manual_seed(0)
    host = torch.randn(64, 32)
    device = host.to("emu:0")
    cases = {
        "matmul": lambda t: t @ t.T,
        "softmax": lambda t: torch.softmax(t, dim=1),
        "view then in place": lambda t: t[4:8].mul_(3).add_(1),
        "sort": lambda t: torch.sort(t, dim=1).values,
        "unique": lambda t: torch.unique(t.round()),
        "out= resizing": lambda t: torch.sum(t, dim=0, out=torch.empty(0, device=t.device)),
        "cat": lambda t: torch.cat([t, t * 2]),
    }
    for name, case in cases.items():
        ours, theirs = case(device.clone()), case(host.clone())
        assert ours.device == torch.device("emu:0"), name
        assert torch.equal(ours.cpu(), theirs), name
        assert not _host_can_read(ours.data_ptr()), name


@on_emulated(strict_memory=True)
def test_copies_resizing_and_memory_counters_work() -> None:
    torch_emu = torch.emu  # type: ignore[attr-defined]
    before = torch_emu.memory_allocated(0)
    tensor = torch.arange(10.0).to("emu:0")
    assert torch_emu.memory_allocated(0) == before + 40  # counted as asked, not by the page
    tensor.resize_(2000)
    assert tensor[:10].cpu().tolist() == [float(i) for i in range(10)]
    other = tensor.to("emu:1")
    assert other.device == torch.device("emu:1") and torch.equal(
        other[:10].cpu(), tensor[:10].cpu()
    )
    assert not _host_can_read(other.data_ptr())
    into = torch.empty(2000)
    into.copy_(tensor)
    assert into[:10].tolist() == [float(i) for i in range(10)]


@on_emulated(strict_memory=True)
def test_a_host_view_opens_the_memory_while_it_lives() -> None:
    from anyaccel.testing.emulated import host_view

    tensor = torch.full((256,), 2.0, device="emu:0")
    view = host_view(tensor)
    assert _host_can_read(tensor.data_ptr())
    assert ctypes.c_float.from_address(view.data_ptr()).value == 2.0
    del view
    assert not _host_can_read(tensor.data_ptr())


@on_emulated(strict_memory=True)
def test_several_threads_on_one_tensor_leave_it_closed() -> None:
    shared = torch.arange(4096.0, device="emu:0")
    expected = float((torch.arange(4096.0) * 3).sum())
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(50):
                assert (shared * 3).sum().item() == expected
                shared.add_(0)  # in place on the shared storage
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert not _host_can_read(shared.data_ptr())


@on_emulated(strict_memory=True)
def test_checkpoints_save_and_load_device_tensors() -> None:
    model = torch.nn.Linear(8, 4).to("emu:0")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)
    assert state["weight"].device == torch.device("emu:0")
    assert torch.equal(state["weight"].cpu(), model.weight.cpu())
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert torch.equal(on_cpu["bias"], model.bias.cpu())


@on_emulated(strict_memory=True)
def test_pinned_memory_copies_both_ways() -> None:
    pinned = torch.arange(16.0).pin_memory()
    assert pinned.is_pinned()
    device = pinned.to("emu:0", non_blocking=True)
    back = torch.empty(16).pin_memory()
    back.copy_(device, non_blocking=True)
    torch.emu.synchronize()  # type: ignore[attr-defined]
    assert torch.equal(back, pinned)


@on_emulated(strict_memory=True)
def test_a_training_step_matches_the_cpu_bit_for_bit() -> None:
    def losses(device: str) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 2)
        ).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(1)
        found = []
        for _ in range(3):
            inputs = torch.randn(5, 3, 8, 8, generator=gen).to(device)
            loss = torch.nn.functional.cross_entropy(
                model(inputs), torch.tensor([0, 1, 0, 1, 1]).to(device)
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            found.append(loss.item())
        return found

    assert losses("emu:0") == losses("cpu")
