"""The contract: what a subclass must write, what it inherits, and that nothing is missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import anyaccel
from anyaccel import Accelerator, DeepSpeedAccelerator
from anyaccel.detection import OPTIONAL_MEMBERS, REQUIRED_MEMBERS
from anyaccel.errors import UnsupportedFeatureError

CONTRACT = Path(__file__).resolve().parents[2] / "shared" / "CONTRACT.md"


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
    assert acc.FloatTensor.keywords == {"dtype": torch.float32, "device": "minimal"}
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
