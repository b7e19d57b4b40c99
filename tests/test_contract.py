"""The contract check: its member lists come from Accelerator itself."""

from __future__ import annotations

import inspect

import pytest

import anyaccel
from anyaccel import contract
from anyaccel.abstract import Accelerator
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.errors import InvalidAcceleratorError


def _public_members() -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(Accelerator)
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }


def test_every_public_method_and_property_of_the_abc_is_checked() -> None:
    assert set(contract.CONTRACT_MEMBERS) == _public_members() | {"_name"}
    assert set(contract.REQUIRED_MEMBERS) | set(contract.OPTIONAL_MEMBERS) == set(
        contract.CONTRACT_MEMBERS
    )


def test_anyaccel_additions_all_exist_on_the_abc() -> None:
    assert _public_members() >= contract.ANYACCEL_ADDITIONS
    assert set(contract.OPTIONAL_MEMBERS) == contract.ANYACCEL_ADDITIONS


def test_a_method_added_to_the_abc_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    def brand_new(self: Accelerator) -> int:
        return 1

    monkeypatch.setattr(Accelerator, "brand_new", brand_new, raising=False)
    monkeypatch.setattr(contract, "_ABC_MEMBERS", contract._abc_members())
    assert "brand_new" in contract._ABC_MEMBERS
    assert "brand_new" not in contract.ANYACCEL_ADDITIONS


def test_default_helpers_are_the_abcs_private_methods() -> None:
    assert set(contract.DEFAULT_HELPERS) == {"_tensor_factory", "_can_pin"}


def _duck(**overrides: object) -> object:
    members = {
        name: getattr(CpuAccelerator, name)
        for name in contract.REQUIRED_MEMBERS
        if name != "_name" and hasattr(CpuAccelerator, name)
    }
    members["__init__"] = CpuAccelerator.__init__
    members["_name"] = "duck"
    members.update(overrides)
    return type("Duck", (), members)()


def test_a_complete_duck_passes() -> None:
    assert contract.signature_problems(_duck()) == []


@pytest.mark.parametrize(
    ("member", "value", "message"),
    [
        ("device_count", 3, "device_count is a int (3), not a method"),
        ("synchronize", "now", "synchronize is a str"),
        (
            "set_device",
            lambda self: None,
            "set_device() cannot be called as the contract's set_device(device_index)",
        ),
        ("manual_seed", lambda self, a, b: None, "manual_seed(a, b)"),
        ("FloatTensor", 1.5, "FloatTensor is a float, not a property or callable"),
    ],
)
def test_each_bad_member_is_named(member: str, value: object, message: str) -> None:
    problems = contract.signature_problems(_duck(**{member: value}))
    assert len(problems) == 1
    assert message in problems[0]


def test_validated_names_every_bad_member_at_once() -> None:
    duck = _duck(device_count=3, is_available=True)
    with pytest.raises(InvalidAcceleratorError) as info:
        contract.validated(duck)
    assert "device_count is a int" in str(info.value)
    assert "is_available is a bool" in str(info.value)


def test_a_subclass_is_not_signature_checked() -> None:
    class Odd(CpuAccelerator):
        device_count = 4  # type: ignore[assignment]

    assert contract.validated(Odd()).device_count == 4


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("  ", "dev"),
        ("Toy HW", "toy_hw"),
        ("toy hw", "toy_hw"),
        ("cuda:0", "cuda_0"),
        ("2x", "dev_2x"),
    ],
)
def test_a_name_that_is_no_device_type_is_refused_with_a_usable_one(
    name: str, suggestion: str
) -> None:
    accelerator = CpuAccelerator()
    accelerator._name = name
    with pytest.raises(InvalidAcceleratorError) as caught:
        contract.validated(accelerator)
    message = str(caught.value)
    assert f"_name is {name!r}, which is not a device-type name" in message
    assert f"(e.g. {suggestion!r})" in message
    with pytest.raises(InvalidAcceleratorError, match="not a device-type name"):
        anyaccel.set_accelerator(accelerator)  # the same check, the same place


@pytest.mark.parametrize("name", ["cuda", "toy_hw", "toy-hw", "xpu.external", "x86"])
def test_device_type_names_are_accepted(name: str) -> None:
    accelerator = CpuAccelerator()
    accelerator._name = name
    assert contract.validated(accelerator) is accelerator
