"""TorchModuleAccelerator subclassed the DeepSpeed way: the device module follows the instance."""

from __future__ import annotations

import pytest

from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.errors import AcceleratorError, UnsupportedFeatureError
from anyaccel.testing import simulated


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
