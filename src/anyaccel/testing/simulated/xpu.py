"""Intel GPUs on each path: native ``torch.xpu``, IPEX, and intel_extension_for_deepspeed.

``"ipex"`` extends ``torch.xpu`` the way intel_extension_for_pytorch does; ``"external"`` adds
intel_extension_for_deepspeed's own accelerator class, simulated by
``SimulatedForeignXpuAccelerator`` (not an ``anyaccel.Accelerator``; that package's quirks kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.torch_version import TorchVersion

from anyaccel.probe import torch_release
from anyaccel.testing.simulated.device_module import SimulatedDeviceModule
from anyaccel.testing.simulated.patching import Patch, installed, package_module

__all__ = [
    "IXDS_OLD_RELEASE_MISSING",
    "XPU_NATIVE_MISSING",
    "SimulatedForeignXpuAccelerator",
    "SimulatedXpuDeviceProperties",
    "SimulatedXpuModule",
    "simulate_xpu",
]

#: Names the native ``torch.xpu`` lacks compared with ``torch.cuda``.
XPU_NATIVE_MISSING = frozenset(
    {
        "memory_cached", "max_memory_cached", "reset_max_memory_allocated",
        "reset_max_memory_cached", "default_stream",
    }
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SimulatedXpuDeviceProperties:
    """What ``torch.xpu.get_device_properties`` returns: SYCL device facts, no CUDA ``major``."""

    name: str
    total_memory: int
    platform_name: str = "Intel(R) oneAPI Unified Runtime over Level-Zero"
    vendor: str = "Intel(R) Corporation"
    driver_version: str = "1.6.31294"
    version: str = "12.60.7"
    type: str = "gpu"
    max_compute_units: int = 1024
    gpu_eu_count: int = 1024
    gpu_subslice_count: int = 128
    max_work_group_size: int = 1024
    max_num_sub_groups: int = 64
    sub_group_sizes: tuple[int, ...] = (16, 32)
    has_fp16: bool = True
    has_fp64: bool = True
    has_atomic64: bool = True


class SimulatedXpuModule(SimulatedDeviceModule):
    """``torch.xpu``: native (``_is_compiled``) or as IPEX extends it (``lazy_init``, ``amp``).

    ``get_device_capability()`` is a dict of the device's properties, as torch's is.
    """

    def _is_compiled(self) -> bool:
        return True

    def get_device_properties(self, device: Any = None) -> SimulatedXpuDeviceProperties:  # type: ignore[override]
        self._index(device)
        return SimulatedXpuDeviceProperties(self._device_name, self._total)

    def get_device_capability(self, device: Any = None) -> dict[str, Any]:  # type: ignore[override]
        properties = self.get_device_properties(device)
        return {
            field.name: getattr(properties, field.name) for field in dataclasses.fields(properties)
        }


class SimulatedForeignXpuAccelerator:
    """An accelerator in the shape of intel_extension_for_deepspeed's ``XPU_Accelerator``.

    It does not subclass ``anyaccel.Accelerator`` and keeps that package's quirks (its
    ``initial_seed`` wants an argument); every call goes to ``torch.xpu`` at call time.
    """

    def __init__(self) -> None:
        self._name = "xpu"
        self._communication_backend_name = "ccl"
        self._compile_backend = "inductor"

    @staticmethod
    def _xpu() -> Any:
        return torch.xpu

    def is_synchronized_device(self) -> bool:
        return False

    def use_host_timers(self) -> bool:
        return False

    def resolves_data_dependency(self) -> bool:
        return False

    def handles_memory_backpressure(self) -> bool:
        return False

    def device_name(self, device_index: int | None = None) -> str:
        return "xpu" if device_index is None else f"xpu:{device_index}"

    def device(self, device_index: int | None = None) -> Any:
        return torch.device("xpu" if device_index is None else f"xpu:{device_index}")

    def set_device(self, device_index: int) -> None:
        self._xpu().set_device(device_index)

    def current_device(self) -> int:
        return int(self._xpu().current_device())

    def current_device_name(self) -> str:
        return f"xpu:{self._xpu().current_device()}"

    def device_count(self) -> int:
        return int(self._xpu().device_count())

    def synchronize(self, device_index: int | None = None) -> None:
        self._xpu().synchronize(device_index)

    def random(self) -> Any:
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        if device_index is None:
            self._xpu().set_rng_state(new_state)
        else:
            self._xpu().set_rng_state(new_state, device_index)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        if device_index is None:
            return self._xpu().get_rng_state()  # type: ignore[no-any-return]
        return self._xpu().get_rng_state(device_index)  # type: ignore[no-any-return]

    def manual_seed(self, seed: int) -> None:
        self._xpu().manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self._xpu().manual_seed_all(seed)

    def initial_seed(self, seed: int) -> int:
        return int(self._xpu().initial_seed(seed))

    def default_generator(self, device_index: int) -> Any:
        return self._xpu().default_generators[device_index]

    @property
    def Stream(self) -> Any:
        return self._xpu().Stream

    def stream(self, stream: Any) -> Any:
        return self._xpu().stream(stream)

    def current_stream(self, device_index: int | None = None) -> Any:
        return self._xpu().current_stream(device_index)

    def default_stream(self, device_index: int | None = None) -> Any:
        return self._xpu().current_stream(device_index)

    @property
    def Event(self) -> Any:
        return self._xpu().Event

    def empty_cache(self) -> None:
        self._xpu().empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        return int(self._xpu().memory_allocated(device_index))

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return int(self._xpu().max_memory_allocated(device_index))

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        self._xpu().reset_max_memory_allocated(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        return int(self._xpu().memory_reserved(device_index))

    def max_memory_cached(self, device_index: int | None = None) -> int:
        return int(self._xpu().max_memory_reserved(device_index))

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        self._xpu().reset_peak_memory_stats(device_index)

    def memory_stats(self, device_index: int | None = None) -> Any:
        return self._xpu().memory_stats(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        self._xpu().reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        return int(self._xpu().memory_reserved(device_index))

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return int(self._xpu().max_memory_reserved(device_index))

    def total_memory(self, device_index: int | None = None) -> int:
        return int(self._xpu().get_device_properties(device_index).total_memory)

    def available_memory(self, device_index: int | None = None) -> int:
        return self.total_memory(device_index) - self.memory_reserved(device_index)

    def is_bf16_supported(self) -> bool:
        return True

    def is_fp16_supported(self) -> bool:
        return True

    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float, torch.half, torch.bfloat16]

    def is_available(self) -> bool:
        return bool(self._xpu().is_available())

    def range_push(self, msg: str) -> None:
        return None

    def range_pop(self) -> None:
        return None

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        return self._xpu().lazy_init._lazy_call(callback)

    def communication_backend_name(self) -> str:
        return self._communication_backend_name

    def is_triton_supported(self) -> bool:
        return False

    def create_graph(self) -> None:
        return None

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:
        return contextlib.nullcontext()

    def replay_graph(self, graph: Any) -> None:
        return None

    def _tensor(self, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
        return functools.partial(torch.tensor, dtype=dtype, device="xpu")

    @property
    def BFloat16Tensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.bfloat16)

    @property
    def ByteTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.uint8)

    @property
    def DoubleTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.float64)

    @property
    def FloatTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.float32)

    @property
    def HalfTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.float16)

    @property
    def IntTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.int32)

    @property
    def LongTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.int64)

    def pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return bool(tensor.is_pinned())

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        return str(tensor.device).startswith("xpu:")

    def op_builder_dir(self) -> str:
        return "intel_extension_for_deepspeed.op_builder"

    def create_op_builder(self, class_name: str) -> Any:
        return None

    def get_op_builder(self, class_name: str) -> Any:
        return None

    def build_extension(self) -> Any:
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    def export_envs(self) -> list[str]:
        return []

    def visible_devices_envs(self) -> list[str]:
        return ["ZE_AFFINITY_MASK"]

    def set_visible_devices_envs(self, current_env: dict[str, str], local_ids: list[int]) -> None:
        current_env["ZE_AFFINITY_MASK"] = ",".join(map(str, local_ids))

    def get_compile_backend(self) -> str:
        return self._compile_backend

    def set_compile_backend(self, backend: str) -> None:
        self._compile_backend = backend


#: Members the 2023 releases of intel_extension_for_deepspeed's class lack (DeepSpeed's
#: contract grew after them); removing them simulates such an old release.
IXDS_OLD_RELEASE_MISSING = (
    "use_host_timers", "resolves_data_dependency", "handles_memory_backpressure",
    "available_memory", "supported_dtypes", "is_triton_supported", "create_graph",
    "capture_to_graph", "replay_graph", "export_envs", "visible_devices_envs",
    "set_visible_devices_envs", "get_compile_backend", "set_compile_backend",
)  # fmt: skip


@contextlib.contextmanager
def simulate_xpu(
    device_count: int = 1,
    *,
    path: str = "native",
    old_external_release: bool = False,
    total_memory: int = 48 * 1024**3,
) -> Iterator[SimulatedDeviceModule]:
    """Intel GPUs through ``path``: ``"native"`` torch.xpu, ``"ipex"`` or ``"external"``.

    ``"ipex"`` also installs intel_extension_for_pytorch (which extends ``torch.xpu``);
    ``"external"`` installs intel_extension_for_deepspeed on top of that, with its own
    accelerator class (an old release lacking newer members with ``old_external_release``).
    """
    if path not in ("native", "ipex", "external"):
        raise ValueError(f"path={path!r}; expected 'native', 'ipex' or 'external'")
    extended = path != "native"
    module = SimulatedXpuModule(
        "torch.xpu",
        device_type="xpu",
        device_count=device_count,
        total_memory=total_memory,
        device_name="Simulated Intel Data Center GPU Max 1550",
        graph_class_name="XPUGraph",
        profiler_name="itt" if extended else None,
        host_register=None,
        missing=() if extended else XPU_NATIVE_MISSING,
    )
    packages: dict[str, types.ModuleType] = {}
    if extended:
        ipex_additions = {
            "lazy_init": types.SimpleNamespace(_lazy_call=module._lazy_call),
            "amp": package_module("torch.xpu.amp"),
        }
        for name, value in ipex_additions.items():
            setattr(module, name, value)
        cpp_extension = package_module(
            "intel_extension_for_pytorch.xpu.cpp_extension",
            DpcppBuildExtension=type("DpcppBuildExtension", (), {}),
        )
        ipex_xpu = package_module("intel_extension_for_pytorch.xpu", cpp_extension=cpp_extension)
        packages["intel_extension_for_pytorch"] = package_module(
            "intel_extension_for_pytorch",
            xpu=ipex_xpu,
            _C=types.SimpleNamespace(_has_xpu=lambda: True),
            __version__="2.8.10+xpu",
        )
        packages["intel_extension_for_pytorch.xpu"] = ipex_xpu
        packages["intel_extension_for_pytorch.xpu.cpp_extension"] = cpp_extension
    if path == "external":
        accelerator_class: type[Any] = SimulatedForeignXpuAccelerator
        if old_external_release:
            accelerator_class = type(
                "XPU_Accelerator",
                (),
                {
                    name: member
                    for name, member in vars(SimulatedForeignXpuAccelerator).items()
                    if name not in IXDS_OLD_RELEASE_MISSING and not name.startswith("__")
                }
                | {"__init__": SimulatedForeignXpuAccelerator.__init__},
            )
        packages["intel_extension_for_deepspeed"] = package_module(
            "intel_extension_for_deepspeed", XPU_Accelerator=accelerator_class
        )
    # Native torch.xpu as anyaccel drives it comes with a newer torch than some users have: on
    # an older torch the simulated machine reports that release, as a real XPU build would.
    from anyaccel.backends import xpu as xpu_backend

    release: Patch | None = None
    if path == "native" and torch_release() < xpu_backend.NATIVE_MIN_TORCH:
        needed = ".".join(map(str, xpu_backend.NATIVE_MIN_TORCH))
        release = (torch, "__version__", TorchVersion(f"{needed}.0"))
    with installed(module, packages, *([release] if release else [])):
        yield module
