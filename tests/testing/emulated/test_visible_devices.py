"""``<TYPE>_VISIBLE_DEVICES`` on the emulated device: only the listed devices, renumbered from 0,
as a vendor runtime shows them; a bad value refused naming the variable and the value."""

from __future__ import annotations

import textwrap

import pytest

from anyaccel.emulated.spec import visible_devices, visible_devices_env
from anyaccel.errors import InvalidSettingError

from .worker import run_python

VARIABLE = "ANYACCEL_TEST_VISIBLE_DEVICES"


def test_unset_shows_every_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    assert visible_devices(VARIABLE, 3) == (0, 1, 2)


@pytest.mark.parametrize(("value", "shown"), [("2", (2,)), ("3,1", (3, 1)), (" 0 , 2 ", (0, 2))])
def test_the_listed_devices_in_their_order(
    monkeypatch: pytest.MonkeyPatch, value: str, shown: tuple[int, ...]
) -> None:
    monkeypatch.setenv(VARIABLE, value)
    assert visible_devices(VARIABLE, 4) == shown


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0,x", "'x' is not a device index"),
        ("-1", "'-1' is not a device index"),
        ("4", "device 4 does not exist"),
        ("1,1", "device 1 is listed twice"),
        ("", "shows no device"),
        ("GPU-5f3e", "not a device index"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    monkeypatch.setenv(VARIABLE, value)
    with pytest.raises(InvalidSettingError) as raised:
        visible_devices(VARIABLE, 4)
    assert f"{VARIABLE}={value!r}" in str(raised.value) and why in str(raised.value)


def test_a_type_without_a_vendor_reads_its_own_variable() -> None:
    assert visible_devices_env("emu") == "EMU_VISIBLE_DEVICES"


_SHOWN = textwrap.dedent(
    """
    import torch
    from anyaccel.testing.emulated import install
    accelerator = install({device_type!r}, 4)
    module = getattr(torch, {device_type!r})
    assert module.device_count() == 2 and torch.accelerator.device_count() == 2
    assert accelerator.device_count() == 2
    assert torch.ones(2, device="{device_type}:1").sum().item() == 2.0
    try:
        torch.ones(2, device="{device_type}:2")
    except RuntimeError as error:
        print("refused:", error)
    """
)


@pytest.mark.parametrize(
    ("device_type", "variable"),
    [("npu", "ASCEND_RT_VISIBLE_DEVICES"), ("emu", "EMU_VISIBLE_DEVICES")],
)
def test_the_installed_device_shows_only_the_listed_devices(
    device_type: str, variable: str
) -> None:
    result = run_python(_SHOWN.format(device_type=device_type), env={variable: "3,1"})
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "Invalid device index 2" in result.stdout


def test_installing_with_a_bad_value_fails_naming_it() -> None:
    code = "from anyaccel.testing.emulated import install\ninstall('npu', 2)\n"
    result = run_python(code, env={"ASCEND_RT_VISIBLE_DEVICES": "0,7"})
    assert result.returncode != 0
    assert "ASCEND_RT_VISIBLE_DEVICES='0,7'" in result.stderr
    assert "device 7 does not exist" in result.stderr
