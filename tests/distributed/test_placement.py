"""DDP's device arguments and a node's process count, on the CPU and on a simulated vendor."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.backends.mlu import MluAccelerator
from anyaccel.backends.npu import NpuAccelerator
from anyaccel.distributed import (
    CPU_PROCESSES_ENV,
    DistributedSetupError,
    ddp_device_ids,
    ddp_output_device,
    local_process_count,
)
from anyaccel.testing.simulated import simulate_mlu, simulate_npu

LAUNCH_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "LOCAL_SIZE", CPU_PROCESSES_ENV,
)  # fmt: skip


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a plain process: no launcher variable, no process count asked for."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_cpu_gets_no_device_ids_and_no_output_device() -> None:
    cpu = CpuAccelerator()
    assert ddp_device_ids(1, cpu) is None
    assert ddp_output_device(1, cpu) is None


def test_a_vendor_device_gets_the_index_as_given() -> None:
    with simulate_npu(device_count=2):
        npu = NpuAccelerator()
        assert ddp_device_ids(1, npu) == [1]
        assert ddp_output_device(1, npu) == 1
        assert ddp_device_ids("npu:0", npu) == ["npu:0"]


def test_a_privateuse1_device_gets_the_index_and_its_count() -> None:
    with simulate_mlu(device_count=4):
        mlu = MluAccelerator()
        assert ddp_device_ids(3, mlu) == [3]
        assert ddp_output_device(3, mlu) == 3
        assert local_process_count(mlu) == 4


def test_a_vendor_without_devices_is_treated_like_the_cpu() -> None:
    with simulate_npu(device_count=0):
        npu = NpuAccelerator()
        assert ddp_device_ids(0, npu) is None
        assert ddp_output_device(0, npu) is None


@pytest.mark.parametrize("bad", [None, True, False])
def test_no_index_is_a_type_error_naming_it(bad: object) -> None:
    with pytest.raises(TypeError, match=repr(bad)):
        ddp_device_ids(bad, CpuAccelerator())
    with pytest.raises(TypeError, match=repr(bad)):
        ddp_output_device(bad, CpuAccelerator())


def test_a_negative_index_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="-1"):
        ddp_device_ids(-1, CpuAccelerator())


def test_device_ids_default_to_the_current_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("anyaccel.detection.get_accelerator", CpuAccelerator)
    assert ddp_device_ids(0) is None


def test_process_count_is_the_device_count_on_a_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_PROCESSES_ENV, "5")  # asked of the CPU only
    with simulate_npu(device_count=3):
        assert local_process_count(NpuAccelerator()) == 3


def test_process_count_on_the_cpu_is_one_by_default() -> None:
    assert local_process_count(CpuAccelerator()) == 1


def test_process_count_on_the_cpu_is_what_the_variable_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CPU_PROCESSES_ENV, " 4 ")
    assert local_process_count(CpuAccelerator()) == 4


def test_process_count_under_a_launcher_is_its_local_world_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1"),
                        ("LOCAL_WORLD_SIZE", "2"), ("MASTER_ADDR", "node0"),
                        (CPU_PROCESSES_ENV, "8")):  # fmt: skip
        monkeypatch.setenv(name, value)
    assert local_process_count(CpuAccelerator()) == 2


def test_process_count_on_a_vendor_without_devices_falls_back_to_the_cpu_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CPU_PROCESSES_ENV, "2")
    with simulate_npu(device_count=0):
        assert local_process_count(NpuAccelerator()) == 2


@pytest.mark.parametrize("bad", ["0", "-2", "two", "", "1.5"])
def test_a_bad_process_count_names_the_variable_and_value(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(CPU_PROCESSES_ENV, bad)
    with pytest.raises(DistributedSetupError, match=rf"{CPU_PROCESSES_ENV}={bad!r}"):
        local_process_count(CpuAccelerator())


DDP_SCRIPT = """
import os, sys, tempfile
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from anyaccel.distributed import ddp_device_ids, ddp_output_device, local_process_count

store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
model = torch.nn.Linear(4, 2)
try:
    DDP(model, device_ids=[0], output_device=0)
except Exception as error:  # what the unported script meets on the CPU
    print("unported:", type(error).__name__)
ddp = DDP(model, device_ids=ddp_device_ids(0), output_device=ddp_output_device(0))
ddp(torch.randn(3, 4)).sum().backward()
print("ported: trained", local_process_count())
dist.destroy_process_group()
"""


def test_ddp_takes_the_helpers_arguments_on_the_cpu_in_a_real_process() -> None:
    """A real gloo group and torch's DDP: the helpers' values are what DDP accepts on the CPU."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", DDP_SCRIPT],
        capture_output=True, text=True, timeout=120,
        env={**env, "DS_ACCELERATOR": "cpu", CPU_PROCESSES_ENV: "3"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["unported: ValueError", "ported: trained 3"]
