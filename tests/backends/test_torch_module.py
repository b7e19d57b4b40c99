"""TorchModuleAccelerator subclassed the DeepSpeed way: the device module follows the instance."""

from __future__ import annotations

import copy as copy_module
import json
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

import anyaccel
from anyaccel.backends.npu import NpuAccelerator
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.errors import AcceleratorError, UnsupportedFeatureError
from anyaccel.testing import simulated

SOURCE = Path(anyaccel.__file__).resolve().parents[1]


class _NamedAfterSuper(TorchModuleAccelerator):
    def __init__(self) -> None:
        super().__init__()
        self._name = "sdaa"
        self._communication_backend_name = "tccl"


class _NamedBeforeSuper(TorchModuleAccelerator):
    def __init__(self) -> None:
        self._name = "sdaa"
        self._communication_backend_name = "tccl"
        super().__init__()


class _NoSuper(TorchModuleAccelerator):
    runtime_package = "torch_sdaa"

    def __init__(self) -> None:
        self._name = "sdaa"


@pytest.mark.parametrize("cls", [_NamedAfterSuper, _NamedBeforeSuper, _NoSuper])
def test_names_set_in_init_find_the_device_module(cls: type[TorchModuleAccelerator]) -> None:
    with simulated.simulate_sdaa(device_count=2) as module:
        acc = cls()
        assert acc.device_count() == 2
        assert acc.device_module is module
        assert acc.current_device_name() == "sdaa:0"


def test_a_missing_module_is_named_from_the_instance() -> None:
    class Zpu(TorchModuleAccelerator):
        def __init__(self) -> None:
            self._name = "zpu_missing"
            super().__init__()

    with pytest.raises(UnsupportedFeatureError) as caught:
        Zpu()
    message = str(caught.value)
    assert "torch.zpu_missing" in message and "'zpu_missing'" in message
    assert "torch. " not in message and "''" not in message


def test_no_name_at_all_says_what_to_set() -> None:
    class Nameless(TorchModuleAccelerator):
        def __init__(self) -> None:
            pass

    acc = Nameless()
    with pytest.raises(AcceleratorError, match=r"Nameless names no device module: set _name"):
        acc.device_count()
    with pytest.raises(AcceleratorError, match=r"Nameless names no device module: set _name"):
        acc._settle()  # at hand-over


def test_a_backend_holding_its_device_module_pickles_and_finds_the_module_again() -> None:
    with simulated.simulate_npu(device_count=2) as module:
        acc = NpuAccelerator()
        acc._compile_backend = "eager"  # state of the instance travels
        copy = pickle.loads(pickle.dumps(acc))
        assert type(copy) is NpuAccelerator and copy is not acc
        assert copy.device_module is module and copy.device_count() == 2
        assert copy.get_compile_backend() == "eager"


def test_copies_in_this_process_share_the_device_module_even_one_torch_does_not_hold() -> None:
    class Zpu(TorchModuleAccelerator):
        _name = "zpu"

    module = types.SimpleNamespace(device_count=lambda: 5)  # injected, not torch.zpu
    acc = Zpu(module)
    acc._compile_backend = "eager"
    for duplicate in (copy_module.copy(acc), copy_module.deepcopy(acc)):
        assert duplicate is not acc and duplicate.device_module is module
        assert duplicate.device_count() == 5 and duplicate.get_compile_backend() == "eager"


_SPAWNED = """
import json, sys
import torch.multiprocessing as mp
from anyaccel.testing.simulated import simulate_npu

# At import, so the spawned child (which imports this file again) has the runtime too.
SIMULATION = simulate_npu(device_count=3)  # kept: collecting it would undo the simulation
SIMULATION.__enter__()
from anyaccel.backends.npu import NpuAccelerator


def child(rank, acc, path):
    import torch
    with open(path, "w") as out:
        json.dump({
            "class": type(acc).__name__,
            "device_count": acc.device_count(),
            "own_module": acc.device_module is torch.npu,
            "compile_backend": acc.get_compile_backend(),
        }, out)


if __name__ == "__main__":
    acc = NpuAccelerator()
    acc._compile_backend = "eager"
    mp.spawn(child, args=(acc, sys.argv[1]), nprocs=1)
"""


def test_a_spawned_process_receives_a_working_backend(tmp_path: Path) -> None:
    script = tmp_path / "spawned.py"
    script.write_text(_SPAWNED)
    result = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SOURCE), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(script), str(result)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(result.read_text()) == {
        "class": "NpuAccelerator",
        "device_count": 3,
        "own_module": True,
        "compile_backend": "eager",
    }
