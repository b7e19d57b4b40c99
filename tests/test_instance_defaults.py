"""The doors to declared base state: what a class declares, settling, a value without __init__.

How declared state is made during construction is specified with the contract, in
tests/test_abstract.py; these tests cover what other modules call.
"""

from __future__ import annotations

import pytest

import anyaccel.abstract
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.instance_defaults import (
    InstanceDefault,
    instance_defaults,
    settle,
    value_before_init,
)


class _Nccl(CpuAccelerator):
    """Declares its collectives backend; its factory reads a class attribute only."""

    _name = "nccl_box"
    _communication_backend_name: InstanceDefault[str] = InstanceDefault(
        lambda self: f"nccl-for-{self._name}"
    )


class _Fixed(CpuAccelerator):
    """Names its collectives backend as a plain class attribute: nothing declared for it."""

    _communication_backend_name = "hccl"


class _Counted(CpuAccelerator):
    """Counts how often it is constructed, to show that asking the class creates nothing."""

    made = 0

    def __init__(self) -> None:
        type(self).made += 1
        super().__init__()


def test_the_contract_module_hands_out_the_same_declaration_class() -> None:
    assert anyaccel.abstract.InstanceDefault is InstanceDefault


def test_instance_defaults_lists_what_a_class_resolves_by_name() -> None:
    declared = instance_defaults(_Nccl)
    assert "_communication_backend_name" in declared
    assert isinstance(declared["_communication_backend_name"], InstanceDefault)
    # A plain class attribute further down the MRO means no default for that name.
    assert "_communication_backend_name" not in instance_defaults(_Fixed)


def test_instance_defaults_of_a_class_outside_the_machinery_is_empty() -> None:
    assert instance_defaults(object) == {}
    assert instance_defaults(str) == {}


def test_value_before_init_makes_a_declared_default_for_a_bare_instance() -> None:
    made_before = _Counted.made
    assert value_before_init(_Nccl, "_communication_backend_name") == "nccl-for-nccl_box"
    assert value_before_init(_Counted, "_communication_backend_name") in ("gloo", "ccl")
    assert _Counted.made == made_before  # no instance was created through __init__


def test_value_before_init_of_an_undeclared_name_is_the_class_attribute() -> None:
    assert value_before_init(_Fixed, "_communication_backend_name") == "hccl"


def test_value_before_init_of_an_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_attribute"):
        value_before_init(_Fixed, "no_such_attribute")


def test_settle_makes_what_a_bare_instance_lacks() -> None:
    bare = _Nccl.__new__(_Nccl)
    assert "_communication_backend_name" not in vars(bare)
    settle(bare)
    assert bare.communication_backend_name() == "nccl-for-nccl_box"


def test_settle_keeps_a_value_the_instance_already_has() -> None:
    bare = _Nccl.__new__(_Nccl)
    bare._communication_backend_name = "mine"
    settle(bare)
    assert bare.communication_backend_name() == "mine"


def test_settle_leaves_an_object_without_declared_state_alone() -> None:
    class DuckTyped:
        _name = "duck"

    duck = DuckTyped()
    settle(duck)
    assert vars(duck) == {}


def test_settle_raises_what_a_factory_raises() -> None:
    def no_runtime(self: object) -> str:
        raise ImportError("torch_acme is not installed")

    class NeedsRuntime(CpuAccelerator):
        _communication_backend_name: InstanceDefault[str] = InstanceDefault(no_runtime)

    with pytest.raises(ImportError, match="torch_acme"):
        settle(NeedsRuntime.__new__(NeedsRuntime))
