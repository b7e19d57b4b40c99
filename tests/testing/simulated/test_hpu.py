"""habana_frameworks: the package tree, lazy-mode graphs and the ``hpu_backend`` compile backend."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from torch._dynamo.backends import registry

from anyaccel.testing.simulated import simulate_hpu


def test_the_package_tree_is_installed_and_undone(interpreter_state: Callable[[], object]) -> None:
    before = interpreter_state()
    with simulate_hpu(fp16=False) as module:
        assert "hpu_backend" in registry._BACKENDS
        assert sys.modules["habana_frameworks.torch.hpu"] is module
        assert sys.modules["habana_frameworks.torch.core"].hpu is module
        assert (
            sys.modules["habana_frameworks.torch.utils.experimental"]._is_fp16_supported() is False
        )
        assert "Limit" in module.memory_stats() and isinstance(module.get_device_properties(), str)
    assert interpreter_state() == before


def test_graphs_exist_in_lazy_mode_only() -> None:
    with simulate_hpu() as eager:
        assert not hasattr(eager, "HPUGraph") and not hasattr(eager, "graph")
    with simulate_hpu(lazy_mode=True) as lazy:
        graph = lazy.HPUGraph()
        with lazy.graph(graph):
            pass
        graph.replay()
        assert graph.replays == 1


def test_names_gaudi_lacks_raise_attribute_error() -> None:
    with simulate_hpu() as module, pytest.raises(AttributeError, match="empty_cache"):
        module.empty_cache()
