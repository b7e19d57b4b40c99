"""Every vendor backend subclassed the DeepSpeed way keeps working and keeps the vendor's names.

A vendor's own DeepSpeed accelerator sets ``_name``, ``_communication_backend_name`` and
``_compile_backend`` in ``__init__``; subclassing an anyaccel backend that way, before or after
``super().__init__()`` or without calling it, must give a working accelerator through
``set_accelerator``, on the backend's simulated runtime.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

import pytest

import anyaccel
from anyaccel.abstract import Accelerator
from anyaccel.testing import simulated

_Runtime = Callable[[], contextlib.AbstractContextManager[Any]]
#: backend module, class, simulated runtime (two devices where it can have two).
_BACKENDS: list[tuple[str, str, _Runtime]] = [
    ("cuda", "CudaAccelerator", lambda: simulated.simulate_cuda(2)),
    ("npu", "NpuAccelerator", lambda: simulated.simulate_npu(2)),
    ("xpu", "XpuAccelerator", lambda: simulated.simulate_xpu(2)),
    ("hpu", "HpuAccelerator", lambda: simulated.simulate_hpu(2)),
    ("mlu", "MluAccelerator", lambda: simulated.simulate_mlu(2)),
    ("sdaa", "SdaaAccelerator", lambda: simulated.simulate_sdaa(2)),
    ("supa", "SupaAccelerator", lambda: simulated.simulate_supa(2)),
    ("musa", "MusaAccelerator", lambda: simulated.simulate_musa(2)),
    ("klxpu", "KlxpuAccelerator", lambda: simulated.simulate_klxpu(2)),
    ("mps", "MpsAccelerator", simulated.simulate_mps),
]


def _subclass(base: type[Accelerator], name: str, variant: str) -> type[Accelerator]:
    def names(self: Any) -> None:
        self._name = name
        self._communication_backend_name = "vendor-ccl"
        self._compile_backend = "eager"

    def init(self: Any) -> None:
        if variant == "after":
            base.__init__(self)
        names(self)
        if variant == "before":
            base.__init__(self)

    return type(f"DeepSpeedStyle{base.__name__}", (base,), {"__init__": init})


@pytest.fixture(autouse=True)
def _forget() -> Any:
    yield
    anyaccel.reset_accelerator()


@pytest.mark.parametrize("variant", ["after", "before", "nosuper"])
@pytest.mark.parametrize(("module", "cls", "runtime"), _BACKENDS, ids=[b[0] for b in _BACKENDS])
def test_a_deepspeed_style_subclass_works_and_keeps_its_names(
    module: str, cls: str, runtime: _Runtime, variant: str
) -> None:
    with runtime():
        base = getattr(importlib.import_module(f"anyaccel.backends.{module}"), cls)
        anyaccel.set_accelerator(_subclass(base, module, variant)())
        acc = anyaccel.get_accelerator()
        assert acc._name == module
        assert acc.communication_backend_name() == "vendor-ccl"
        assert acc.get_compile_backend() == "eager"
        assert acc.device_count() >= 1
        assert acc.is_available() is True
        acc.set_device(0)
        assert acc.current_device() == 0
        assert acc.memory_allocated() >= 0
        acc.manual_seed(7)
        assert acc.initial_seed() == 7
        assert acc.max_memory_allocated() >= acc.memory_allocated()
