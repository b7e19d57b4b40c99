"""Devices per local rank (one each, never shared) and visible-device variables for a node."""

from __future__ import annotations

import pytest

from anyaccel.distributed import DistributedSetupError, LaunchInfo, assign_visible_devices
from anyaccel.distributed.devices import select_device_index


class FakeAccelerator:
    """Just the device-count side of an accelerator, with a chosen count."""

    def __init__(self, name: str, count: int, variable: str = "CUDA_VISIBLE_DEVICES") -> None:
        self._name = name
        self.count = count
        self.variable = variable
        self.selected: int | None = None

    def device_count(self) -> int:
        return self.count

    def visible_devices_envs(self) -> list[str]:
        return [self.variable]

    def communication_backend_name(self) -> str:
        return "gloo"

    def set_device(self, index: int) -> None:
        self.selected = index


def info(local_rank: int, local_world_size: int) -> LaunchInfo:
    return LaunchInfo(local_rank, local_world_size, local_rank, local_world_size,
                      "127.0.0.1", 29500, "torchrun")  # fmt: skip


# --- device selection ----------------------------------------------------------------------
def test_each_local_rank_gets_its_own_device_when_enough_are_visible() -> None:
    assert select_device_index(info(3, 4), FakeAccelerator("cuda", 4)) == 3  # type: ignore[arg-type]
    assert select_device_index(info(1, 2), FakeAccelerator("cuda", 8)) == 1  # type: ignore[arg-type]


def test_per_rank_visible_device_is_device_zero() -> None:
    assert select_device_index(info(3, 4), FakeAccelerator("npu", 1)) == 0  # type: ignore[arg-type]


def test_cpu_selects_no_device() -> None:
    assert select_device_index(info(1, 2), FakeAccelerator("cpu", 1)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [0, 2, 3])
def test_too_few_devices_is_an_error_naming_everything(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    accelerator = FakeAccelerator("npu", count, "ASCEND_RT_VISIBLE_DEVICES")
    with pytest.raises(DistributedSetupError) as raised:
        select_device_index(info(3, 4), accelerator)  # type: ignore[arg-type]
    message = str(raised.value)
    for part in ("LOCAL_RANK=3", "LOCAL_WORLD_SIZE=4", f"sees {count}",
                 "ASCEND_RT_VISIBLE_DEVICES='0,1'"):  # fmt: skip
        assert part in message


# --- visible devices -----------------------------------------------------------------------
class Recorder:
    """An accelerator's launch-environment side only."""

    def visible_devices_envs(self) -> list[str]:
        return ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]

    def set_visible_devices_envs(self, env: dict[str, str], ids: list[int]) -> None:
        for name in self.visible_devices_envs():
            env[name] = ",".join(map(str, ids))


def test_visible_devices_are_written_through_the_contract() -> None:
    env = {"PATH": "/bin"}
    changed = assign_visible_devices(env, [1, 2], Recorder())  # type: ignore[arg-type]
    assert changed == {"CUDA_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1,2"}
    assert env == {"PATH": "/bin", **changed}


@pytest.mark.parametrize("ids", ["12", b"12", 12, [1, "2"], [True], [1.0]])
def test_visible_devices_take_integers_only(ids: object) -> None:
    with pytest.raises(TypeError, match="integer"):
        assign_visible_devices({}, ids, Recorder())  # type: ignore[arg-type]


@pytest.mark.parametrize(("ids", "message"), [([-1], ">= 0"), ([1, 1], "repeat")])
def test_visible_devices_refuse_negative_and_repeated_ids(ids: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        assign_visible_devices({}, ids, Recorder())  # type: ignore[arg-type]


def test_zero_devices_never_blank_the_variables() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert assign_visible_devices(env, [], Recorder()) == {}  # type: ignore[arg-type]
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_visible_devices_on_the_current_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel import get_accelerator

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    env: dict[str, str] = {}
    assign_visible_devices(env, [3])
    for name in get_accelerator().visible_devices_envs():
        assert env[name] == "3"
