"""EmulatedSpec, sizes and ANYACCEL_EMULATED: what is accepted, and errors naming the fix."""

from __future__ import annotations

import pytest

from anyaccel.emulated.spec import (
    EMULATED_ENV,
    EmulatedSpec,
    parse_capacity,
    spec_from_environment,
)
from anyaccel.errors import InvalidSettingError


@pytest.mark.parametrize(
    ("text", "size"),
    [("1024", 1024), ("2GiB", 2 * 2**30), ("512MB", 512 * 10**6), ("1.5k", 1536), (7, 7)],
)
def test_capacities_in_bytes_or_with_a_unit(text: str | int, size: int) -> None:
    assert parse_capacity(text) == size


@pytest.mark.parametrize("bad", ["", "-1", "2 parsecs", "GiB", 0, True])
def test_a_bad_capacity_is_refused_by_value(bad: str | int) -> None:
    with pytest.raises(ValueError, match=repr(bad) if isinstance(bad, str) else str(bad)):
        parse_capacity(bad)


def test_no_capacity_means_no_limit() -> None:
    assert parse_capacity(None) is None


@pytest.mark.parametrize("name", ["emu", "npu", "my_dev2"])
def test_device_type_names_a_vendor_may_use(name: str) -> None:
    assert EmulatedSpec(name).device_type == name


@pytest.mark.parametrize("name", ["cuda", "cpu", "Emu", "2x", "privateuseone", ""])
def test_device_types_that_cannot_be_privateuse1_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=repr(name)):
        EmulatedSpec(name)


def test_the_environment_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMULATED_ENV, "npu:8:16GiB")
    assert spec_from_environment() == EmulatedSpec("npu", 8, 16 * 2**30)
    monkeypatch.setenv(EMULATED_ENV, "sdaa:1")
    assert spec_from_environment() == EmulatedSpec("sdaa", 1, None)
    monkeypatch.delenv(EMULATED_ENV)
    assert spec_from_environment() == EmulatedSpec("emu", 2, None)


@pytest.mark.parametrize("bad", ["emu", "emu:x", "emu:2:lots", "cuda:2", "emu:0", "a:1:2:3"])
def test_a_bad_environment_spec_names_variable_value_and_format(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(EMULATED_ENV, bad)
    with pytest.raises(InvalidSettingError) as raised:
        spec_from_environment()
    assert f"{EMULATED_ENV}={bad!r} is not valid" in str(raised.value)
    assert "<type>:<count>[:<capacity>]" in str(raised.value)


@pytest.mark.parametrize(
    ("bad", "part"),
    [
        ("npu:two", "the count (second part) 'two' is not a whole number of devices, 1 to 64"),
        ("npu", "it names the type 'npu' but no count"),
        ("npu:2:8GiB:x", "it has 4 ':'-separated parts, at most 3 are read"),
        ("Npu:2", "device type 'Npu' is not a valid name"),
        ("npu:2:lots", "memory capacity 'lots' is not a size"),
        ("npu:99", "device count 99 must be an int from 1 to 64"),
    ],
)
def test_a_bad_environment_spec_says_which_part_is_wrong(
    monkeypatch: pytest.MonkeyPatch, bad: str, part: str
) -> None:
    monkeypatch.setenv(EMULATED_ENV, bad)
    with pytest.raises(InvalidSettingError) as raised:
        spec_from_environment()
    assert f"{EMULATED_ENV}={bad!r} is not valid: {part}" in str(raised.value)
