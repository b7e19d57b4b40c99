"""hpu: Intel Gaudi (Habana) accelerators through habana_frameworks.

Runtime: ``habana_frameworks.torch`` (from Intel Gaudi's installer, not PyPI); the device
module is ``habana_frameworks.torch.hpu``. Collectives: ``hccl`` (Gaudi's own, same name as
Ascend's). Visible devices: ``HABANA_VISIBLE_MODULES``, which holds *module ids* (stable, but
not always 0..N: in virtual machines a guest may own modules ``1,4,5,2``). Nothing exported.
Compile backend: ``hpu_backend``. Graphs: ``HPUGraph``, which only exists in lazy mode
(``PT_HPU_LAZY_MODE=1``); in eager/compile mode graphs are no-ops.

Where Gaudi differs from ``torch.cuda``: one device per process (device names carry no
index), ``synchronize()``, ``current_stream()`` and ``default_stream()`` take no device,
``get_device_properties`` returns a string (capacity comes from ``memory_stats()['Limit']``)
and there is no ``empty_cache``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from anyaccel.backends.runtime_probe import RuntimeCheck, import_runtime, probe_device_runtime
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome

#: How users check the runtime when it fails (the vendor's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`hl-smi` lists the Gaudi devices", "the Intel Gaudi driver and software stack"
)

__all__ = ["LAZY_MODE_DEFAULTS", "HpuAccelerator", "probe"]

logger = logging.getLogger("anyaccel.backends.hpu")

_DEVICE_MODULE = "habana_frameworks.torch.hpu"

#: Environment defaults for lazy mode that DeepSpeed relies on; a user's own value wins.
LAZY_MODE_DEFAULTS: dict[str, str] = {
    "PT_HPU_LAZY_ACC_PAR_MODE": "0",
    "PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES": "0",
}

_MODULES_ENV = "HABANA_VISIBLE_MODULES"


def _set_lazy_mode_defaults() -> None:
    for name, value in LAZY_MODE_DEFAULTS.items():
        os.environ.setdefault(name, value)


def probe() -> ProbeOutcome:
    """Import habana_frameworks.torch.hpu (only if installed) and count Gaudi devices."""
    return probe_device_runtime(
        package=_DEVICE_MODULE,
        device_module=lambda module: module,
        vendor="Intel Gaudi",
        install_hint=(
            "Install the Intel Gaudi software stack and its PyTorch packages "
            "(habana_frameworks), e.g. from Intel's Gaudi Docker images."
        ),
        check=RUNTIME_CHECK,
        visible_env=_MODULES_ENV,
    )


class HpuAccelerator(TorchModuleAccelerator):
    """Intel Gaudi through ``habana_frameworks.torch.hpu``."""

    _name = "hpu"
    _communication_backend_name = "hccl"
    _compile_backend = "hpu_backend"
    device_module_name = "hpu"
    runtime_package = _DEVICE_MODULE
    graph_class_name = "HPUGraph"
    profiler_module_name = None
    visible_devices_env_names = (_MODULES_ENV,)
    export_env_prefixes = ()

    def __init__(self, device_module: Any | None = None) -> None:
        _set_lazy_mode_defaults()
        super().__init__(device_module)

    @classmethod
    def load_device_module(cls) -> Any:
        """``habana_frameworks.torch.hpu`` itself (it need not be attached to ``torch``)."""
        _set_lazy_mode_defaults()
        return import_runtime(_DEVICE_MODULE)

    def _load_device_module(self) -> Any:
        """``habana_frameworks.torch.hpu``, whatever this instance's name."""
        return self.load_device_module()

    # ------------------------------------------------------------------ execution model
    def resolves_data_dependency(self) -> bool:
        """The Gaudi runtime orders dependent work across its streams itself."""
        return True

    def handles_memory_backpressure(self) -> bool:
        """The Gaudi allocator blocks until memory frees rather than failing."""
        return True

    # ------------------------------------------------------------------ device
    def device_name(self, device_index: int | None = None) -> str:
        """Always ``'hpu'``: a process drives one Gaudi, whatever the index."""
        return "hpu"

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device('hpu')``: one device per process."""
        return torch.device("hpu")

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait for the process's Gaudi (``synchronize()`` takes no device)."""
        self._module.synchronize()

    def current_stream(self, device_index: int | None = None) -> Any:
        """The current stream of the process's Gaudi."""
        return self._module.current_stream()

    def default_stream(self, device_index: int | None = None) -> Any:
        """The default stream of the process's Gaudi."""
        return self._module.default_stream()

    # ------------------------------------------------------------------ memory
    def total_memory(self, device_index: int | None = None) -> int:
        """The memory limit Gaudi's allocator reports (``memory_stats()['Limit']``)."""
        return int(self._module.memory_stats(device_index)["Limit"])

    # ------------------------------------------------------------------ data types
    def is_bf16_supported(self) -> bool:
        """Every Gaudi computes in bfloat16."""
        return True

    def is_fp16_supported(self) -> bool:
        """float16 on Gaudi2 and later, as ``habana_frameworks`` reports it."""
        try:
            experimental = import_runtime("habana_frameworks.torch.utils.experimental")
        except ImportError:
            return False
        return bool(experimental._is_fp16_supported())

    def supported_dtypes(self) -> list[torch.dtype]:
        """float32 and bfloat16, plus float16 where supported."""
        dtypes = [torch.float32, torch.bfloat16]
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        return dtypes

    # ------------------------------------------------------------------ graphs
    def capture_to_graph(
        self, graph: Any, pool: Any = None, stream: Any = None
    ) -> AbstractContextManager[Any]:
        """Capture into an ``HPUGraph`` (lazy mode); ``pool`` has no Gaudi equivalent."""
        capture = self._optional("graph")
        if capture is None:
            return super().capture_to_graph(graph, pool, stream)
        context: AbstractContextManager[Any] = capture(graph, stream=stream)
        return context

    # ------------------------------------------------------------------ launch environment
    def set_visible_devices_envs(
        self, current_env: dict[str, str], local_accelerator_ids: Sequence[int | str]
    ) -> None:
        """Restrict ``HABANA_VISIBLE_MODULES`` to the given devices, never guessing module ids.

        With ``HABANA_VISIBLE_MODULES`` unset nothing is written: local ids are not module
        ids, and each process then acquires a free Gaudi. When it is set, ids already in it
        are taken as module ids; otherwise they are positions in it (``[0, 1]`` of
        ``"1,4,5,2"`` gives ``"1,4"``).
        """
        existing = current_env.get(_MODULES_ENV)
        if existing is None or not existing.strip():
            logger.debug("%s unset; leaving module choice to the Gaudi runtime", _MODULES_ENV)
            return
        modules = [m.strip() for m in existing.split(",") if m.strip()]
        ids = [str(i).strip() for i in local_accelerator_ids]
        if all(i in modules for i in ids):
            chosen = ids
        elif all(i.isdigit() and int(i) < len(modules) for i in ids):
            chosen = [modules[int(i)] for i in ids]
        else:
            raise ValueError(
                f"devices {ids} are neither module ids in {_MODULES_ENV}={existing!r} nor "
                f"positions in it (0..{len(modules) - 1}); pass one or the other"
            )
        current_env[_MODULES_ENV] = ",".join(chosen)
