"""The contract: what a subclass must write, what it inherits, and that nothing is missing."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

import anyaccel
from anyaccel import Accelerator, DeepSpeedAccelerator
from anyaccel.abstract import InstanceDefault
from anyaccel.detection import OPTIONAL_MEMBERS, REQUIRED_MEMBERS
from anyaccel.errors import UnsupportedFeatureError

CONTRACT = Path(__file__).resolve().parents[2] / "shared" / "CONTRACT.md"
SOURCE = Path(anyaccel.__file__).resolve().parents[1]


class Minimal(Accelerator):
    """The abstract core and nothing else: a stand-in for an out-of-tree backend."""

    _name = "minimal"

    def __init__(self) -> None:
        self.allocated = 100
        self.peak = 150
        self.seed = 0

    def set_device(self, device_index: int) -> None:
        self.index = device_index

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def is_available(self) -> bool:
        return True

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        pass

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        return torch.zeros(4, dtype=torch.uint8)

    def manual_seed(self, seed: int) -> None:
        self.seed = seed

    def manual_seed_all(self, seed: int) -> None:
        self.seed = seed

    def initial_seed(self) -> int:
        return self.seed

    def memory_allocated(self, device_index: int | None = None) -> int:
        return self.allocated

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        self.peak = self.allocated

    def total_memory(self, device_index: int | None = None) -> int:
        return 1000


def test_deepspeed_name_is_the_same_class() -> None:
    assert DeepSpeedAccelerator is Accelerator


def test_the_abstract_core_is_small_and_enforced() -> None:
    assert sorted(Accelerator.__abstractmethods__) == sorted(
        [
            "set_device", "current_device", "device_count", "synchronize", "is_available",
            "set_rng_state", "get_rng_state", "manual_seed", "manual_seed_all", "initial_seed",
            "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats",
            "total_memory",
        ]
    )  # fmt: skip

    class Incomplete(Accelerator):
        _name = "incomplete"

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


def test_a_core_only_subclass_has_every_contract_member() -> None:
    acc = Minimal()
    for name in REQUIRED_MEMBERS + OPTIONAL_MEMBERS:
        assert hasattr(acc, name), name
    anyaccel.set_accelerator(acc)
    assert anyaccel.get_accelerator() is acc


def test_defaults_derive_from_the_core() -> None:
    acc = Minimal()
    assert acc.device_name() == "minimal" and acc.device_name(2) == "minimal:2"
    assert acc.current_device_name() == "minimal:0"
    assert acc.memory_reserved() == acc.memory_cached() == 100
    assert acc.max_memory_reserved() == acc.max_memory_cached() == 150
    assert acc.available_memory() == 900
    assert acc.memory_stats()["allocated_bytes.all.peak"] == 150
    acc.reset_max_memory_allocated()
    assert acc.max_memory_allocated() == 100
    acc.peak = 500
    acc.reset_max_memory_cached()
    assert acc.max_memory_cached() == 100


def test_defaults_for_missing_features() -> None:
    acc = Minimal()
    assert acc.supported_dtypes() == [torch.float32]
    assert acc.communication_backend_name() == "gloo"
    assert acc.export_envs() == [] and acc.visible_devices_envs() == []
    assert acc.is_synchronized_device() is False
    assert acc.random() is torch.random
    assert acc.amp() is None and acc.is_triton_supported() is False
    assert (acc.FloatTensor.dtype, acc.FloatTensor.device) == (torch.float32, "minimal")
    assert acc.on_accelerator(torch.ones(1)) is False
    with pytest.raises(UnsupportedFeatureError, match=r"default_generator.*'minimal'"):
        acc.default_generator(0)


def test_default_streams_events_and_graphs_are_usable() -> None:
    acc = Minimal()
    with acc.stream(acc.Stream()):
        pass
    assert acc.current_stream().query() is True
    event = acc.Event(enable_timing=True)
    event.record()
    assert event.elapsed_time(event) == 0.0
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        assert acc.is_current_stream_capturing() is False
    acc.replay_graph(graph)
    assert graph.replays == 1


def test_repr_names_class_and_backend() -> None:
    assert repr(Minimal()) == "<Minimal 'minimal'>"


@pytest.mark.skipif(not CONTRACT.exists(), reason="../shared/CONTRACT.md is not beside the repo")
def test_every_name_in_the_contract_document_exists() -> None:
    text = CONTRACT.read_text()
    section = text.split("## Instance contract", 1)[1].split("## Backend facts", 1)[0]
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)\b", section))
    not_members = {"Accelerator", "None", "ValueError", "torch", "cuda"}
    parameters = {"align_bytes", "device_index", "make_copy"}
    names -= not_members | parameters
    missing = sorted(name for name in names if not hasattr(Accelerator, name))
    assert missing == []
    assert len(names) > 70


class Pinning(Minimal):
    """A backend that can pin (where this torch has no pinning hooks, buffers stay pageable)."""

    def _can_pin(self) -> bool:
        return True


def test_pin_memory_without_copy_gives_a_fresh_buffer_of_the_templates_shape() -> None:
    template = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    fresh = Pinning().pin_memory(template, False)
    flat = Pinning().pin_memory(template, make_copy=False, match_shape=False)
    assert fresh.shape == (2, 3) and flat.shape == (6,)
    assert fresh.dtype == flat.dtype == torch.float16
    assert fresh.untyped_storage().data_ptr() != template.untyped_storage().data_ptr()
    assert template.tolist() == [[0, 1, 2], [3, 4, 5]]  # the template is left alone


def test_pin_memory_of_a_device_tensor_or_on_a_backend_that_cannot_pin_is_the_tensor() -> None:
    meta = torch.empty(3, device="meta")
    assert Pinning().pin_memory(meta) is meta

    class CannotPin(Minimal):
        def _can_pin(self) -> bool:
            return False

    host = torch.ones(3)
    assert CannotPin().pin_memory(host, make_copy=False) is host


def test_unpin_memory_returns_none_as_deepspeed() -> None:
    tensor = torch.ones(2)
    assert Pinning().unpin_memory(tensor) is None
    assert tensor.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("size", [(2, 3), ((2, 3),), ([2, 3],), (torch.Size([2, 3]),)])
def test_pin_empty_takes_sizes_like_torch_empty(size: tuple[object, ...]) -> None:
    made = Pinning().pin_empty(*size, dtype=torch.bfloat16)  # type: ignore[arg-type]
    assert made.shape == (2, 3) and made.dtype == torch.bfloat16


def test_pin_empty_without_size_is_zero_dimensional() -> None:
    assert Pinning().pin_empty(dtype=torch.float32).shape == ()


@pytest.mark.parametrize("device", ["cuda", "meta", "not-a-device"])
def test_pin_empty_refuses_a_device_that_is_not_the_cpu(device: str) -> None:
    with pytest.raises(ValueError, match=rf"pin_empty makes host buffers; device='{device}'"):
        Pinning().pin_empty(2, dtype=torch.float32, device=device)
    with pytest.raises(ValueError, match="pin_empty_like makes host buffers"):
        Pinning().pin_empty_like(torch.ones(2), device=device)


def test_pin_empty_like_keeps_the_shape_and_takes_a_new_dtype() -> None:
    made = Pinning().pin_empty_like(torch.ones(4, 2, dtype=torch.int8), dtype=torch.float64)
    assert made.shape == (4, 2) and made.dtype == torch.float64
    assert Pinning().pin_empty_like(torch.ones(3, dtype=torch.int8)).dtype == torch.int8


def test_pin_memory_applies_follows_what_pinning_does() -> None:
    from anyaccel.backends.cpu import CpuAccelerator
    from anyaccel.backends.cuda import CudaAccelerator
    from anyaccel.testing.simulated import simulate_cuda, simulate_mps

    cpu = CpuAccelerator()
    tensor = torch.ones(4)
    assert cpu.pin_memory_applies() is False
    assert cpu.pin_memory(tensor) is tensor  # what False promises: pinning is a no-op
    with simulate_cuda(device_count=1):
        assert CudaAccelerator().pin_memory_applies() is True
    from anyaccel.backends.mps import MpsAccelerator

    with simulate_mps():
        assert MpsAccelerator().pin_memory_applies() is False  # unified memory


def test_memory_measure_names_what_memory_allocated_counts() -> None:
    from anyaccel.backends.cpu import CpuAccelerator
    from anyaccel.backends.cuda import CudaAccelerator
    from anyaccel.testing.simulated import simulate_cuda

    assert CpuAccelerator().memory_measure() == "process resident memory"
    with simulate_cuda(device_count=1):
        assert CudaAccelerator().memory_measure() == "tensor memory"


# ---------------------------------------------------------------------- declared base state
_BACKEND_CLASSES = [
    ("anyaccel.backends.cpu", "CpuAccelerator"),
    ("anyaccel.backends.cuda", "CudaAccelerator"),
    ("anyaccel.backends.xpu", "XpuAccelerator"),
    ("anyaccel.backends.supa", "SupaAccelerator"),
    ("anyaccel.backends.npu", "NpuAccelerator"),
]


@pytest.mark.parametrize(("module", "name"), _BACKEND_CLASSES, ids=[n for _, n in _BACKEND_CLASSES])
def test_no_class_keeps_a_declared_default_as_a_class_attribute(module: str, name: str) -> None:
    # A class-level descriptor stops CPython specialising reads of the attribute (issue 29).
    cls = getattr(importlib.import_module(module), name)
    for klass in cls.__mro__:
        leftovers = [k for k, v in vars(klass).items() if isinstance(v, InstanceDefault)]
        assert leftovers == [], f"{klass.__qualname__} keeps {leftovers}"


class _Declared(Minimal):
    """No ``__init__`` of its own: the inherited one still completes the declared state."""

    made: InstanceDefault[str] = InstanceDefault(lambda self: f"made for {self._name}")


class _NamedLate(_Declared):
    def __init__(self) -> None:
        super().__init__()
        self.seen_in_init = self.made
        self._name = "late"


def test_declared_state_is_made_when_construction_is_over() -> None:
    assert _Declared().made == "made for minimal"
    late = _NamedLate()
    # Made when the inner __init__ returned (readable in the subclass's __init__), from the
    # names set by then; a later assignment of the name does not remake it.
    assert late.seen_in_init == "made for minimal" and late.made == "made for minimal"


def test_a_value_the_subclass_assigns_is_kept_even_if_it_equals_an_inherited_class_value() -> None:
    class Explicit(Minimal):
        _communication_backend_name: InstanceDefault[str] = InstanceDefault(lambda self: "nccl")

        def __init__(self) -> None:
            self._communication_backend_name = "gloo"  # the same as Accelerator's class value
            super().__init__()

    assert Explicit().communication_backend_name() == "gloo"
    assert _declared_backend().communication_backend_name() == "nccl"


def _declared_backend() -> Accelerator:
    class Declared(Minimal):
        _communication_backend_name: InstanceDefault[str] = InstanceDefault(lambda self: "nccl")

    return Declared()


def test_an_object_made_with_new_alone_gets_its_state_when_settled() -> None:
    bare = _Declared.__new__(_Declared)
    with pytest.raises(AttributeError):
        bare.made  # noqa: B018 - no __init__ ran and nothing was handed over yet
    bare._settle()
    assert bare.made == "made for minimal"


def test_an_instance_default_outside_an_accelerator_is_refused() -> None:
    with pytest.raises(Exception) as caught:

        class NotAnAccelerator:
            value: InstanceDefault[int] = InstanceDefault(lambda self: 1)

    text = f"{caught.value} {caught.value.__cause__}"
    assert "NotAnAccelerator.value" in text and "only an anyaccel.Accelerator subclass" in text


_SPECIALISED_READ = """
import dis, json, sys, warnings
warnings.simplefilter("ignore")
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.backends.torch_module import TorchModuleAccelerator
import torch, types

class Fast(TorchModuleAccelerator):
    _name = "fast"

module = types.SimpleNamespace(device_count=torch.cpu.device_count)
result = {}
for acc, attribute in ((CpuAccelerator(), "_device_count"), (Fast(module), "_module")):
    for _ in range(2000):
        acc.device_count()
    result[attribute] = [
        i.opname for i in dis.get_instructions(type(acc).device_count, adaptive=True)
        if i.argval == attribute
    ]
print(json.dumps(result))
"""


@pytest.mark.skipif(
    sys.version_info < (3, 11)
    or sys.implementation.name != "cpython"
    or bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    reason="attribute reads are specialised from CPython 3.11 (with the GIL)",
)
def test_hot_reads_of_base_state_are_specialised() -> None:
    # No timing: the interpreter's own record of how it runs the read. A descriptor on the
    # class, or a __dict__ sharing the inline values (CPython 3.11/3.12), leaves it generic.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE")}
    env["PYTHONPATH"] = os.pathsep.join([str(SOURCE), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _SPECIALISED_READ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    opnames = json.loads(done.stdout.strip().splitlines()[-1])
    for attribute, names in opnames.items():
        assert names and all(
            name in ("LOAD_ATTR_INSTANCE_VALUE", "LOAD_ATTR_WITH_HINT") for name in names
        ), (attribute, names)
