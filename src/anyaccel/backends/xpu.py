"""xpu: Intel GPUs, reached by three paths tried in this order.

1. ``xpu.external``: the accelerator class of ``intel_extension_for_deepspeed``, used as it
   is (it does not subclass ``anyaccel.Accelerator``; detection checks it duck-typed).
2. ``intel_extension_for_pytorch`` (IPEX), which extends ``torch.xpu``.
3. Native ``torch.xpu`` (torch >= 2.8, the first release with the ``xccl`` backend), taken
   only when no CUDA device is visible, unless ``DS_ACCELERATOR=xpu`` asks for it.

Collectives: ``ccl`` when ``oneccl_bindings_for_pytorch`` imports, else ``xccl``. Visible
devices: ``ZE_AFFINITY_MASK``. Nothing exported to other nodes. Graphs: ``torch.xpu.XPUGraph``
where torch has it. ``torch.xpu`` has no default stream distinct from the current one, and
natively lacks ``memory_cached``-style names (the base maps them to ``memory_reserved``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from anyaccel.abstract import InstanceDefault
from anyaccel.backends.cpu import ccl_backend_available
from anyaccel.backends.runtime_probe import (
    RuntimeCheck,
    count_devices,
    import_runtime,
    probe_device_runtime,
    probe_runtime_of,
    visibility_note,
)
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import FORCE_ENV, ProbeOutcome, forced_name, package_installed, torch_release

__all__ = [
    "IpexXpuAccelerator",
    "XpuAccelerator",
    "external_accelerator",
    "probe_external",
    "probe_ipex",
    "probe_native",
]

#: The first torch release whose native ``torch.xpu`` anyaccel accepts (``xccl`` arrived here).
NATIVE_MIN_TORCH = (2, 8)
_NATIVE_NEEDED = ".".join(map(str, NATIVE_MIN_TORCH))

#: How users check the runtime when it fails (Intel's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`xpu-smi discovery` lists the GPUs", "the Intel GPU driver (Level Zero) and oneAPI runtime"
)

_EXTERNAL_PACKAGE = "intel_extension_for_deepspeed"


def _xpu_module(_package: object = None) -> Any:
    return getattr(torch, XpuAccelerator.device_module_name, None)


def _visible_env() -> str:
    """The variable that hides Intel GPUs, as the accelerator class states it."""
    return XpuAccelerator.visible_devices_env_names[0]


def probe_external() -> ProbeOutcome:
    """intel_extension_for_deepspeed imports, offers ``XPU_Accelerator``, and sees an XPU."""
    outcome = probe_device_runtime(
        package=_EXTERNAL_PACKAGE,
        device_module=_xpu_module,
        vendor="Intel XPU",
        install_hint="pip install intel-extension-for-deepspeed (with IPEX and oneCCL bindings).",
        check=RUNTIME_CHECK,
        visible_env=_visible_env(),
    )
    if outcome.available and not hasattr(import_runtime(_EXTERNAL_PACKAGE), "XPU_Accelerator"):
        return ProbeOutcome.broken(
            f"{_EXTERNAL_PACKAGE} imports but has no XPU_Accelerator class",
            f"Upgrade intel-extension-for-deepspeed, or set {FORCE_ENV}=xpu to use IPEX or "
            "native torch.xpu instead.",
        )
    return outcome


def external_accelerator() -> Any:
    """An instance of intel_extension_for_deepspeed's own ``XPU_Accelerator`` class."""
    accelerator_class: Callable[[], Any] = import_runtime(_EXTERNAL_PACKAGE).XPU_Accelerator
    return accelerator_class()


def probe_ipex() -> ProbeOutcome:
    """intel_extension_for_pytorch imports and ``torch.xpu`` sees a device."""
    return probe_runtime_of(
        IpexXpuAccelerator,
        vendor="Intel XPU",
        install_hint=(
            "pip install intel-extension-for-pytorch (or use torch >= 2.8 with native XPU "
            "support: pip install torch --index-url https://download.pytorch.org/whl/xpu)."
        ),
        check=RUNTIME_CHECK,
    )


def _cuda_device_count() -> int:
    if not torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]
        return 0
    return int(torch.cuda.device_count())


def probe_native() -> ProbeOutcome:
    """torch >= 2.8 built with XPU sees a device, and no CUDA device competes for the process."""
    absent = XpuAccelerator.runtime_absent()
    if absent is not None:
        return ProbeOutcome.not_installed(
            absent,
            f"Install torch >= {_NATIVE_NEEDED} built for XPU: "
            "pip install torch --index-url https://download.pytorch.org/whl/xpu.",
        )
    module = _xpu_module()
    count = count_devices(module.device_count, "torch.xpu", "torch", RUNTIME_CHECK)
    if isinstance(count, ProbeOutcome):
        return count
    if count <= 0:
        where = visibility_note(_visible_env())
        return ProbeOutcome.no_device(
            f"torch {torch.__version__} supports XPU but sees no Intel GPU{where}",
            "Check that the Intel GPU driver (Level Zero) is installed and that "
            f"{_visible_env()} does not hide the device.",
        )
    forced = forced_name() == "xpu"
    cuda = _cuda_device_count() if not forced else 0
    if cuda > 0:
        return ProbeOutcome.no_device(
            f"{count} native XPU device(s), but {cuda} CUDA device(s) are visible too, and "
            "native XPU is chosen only without CUDA",
            f"Set {FORCE_ENV}=xpu to use the Intel GPU anyway.",
        )
    return ProbeOutcome.found(f"{count} Intel XPU device(s) through native torch.xpu", count)


class XpuAccelerator(TorchModuleAccelerator):
    """Intel GPUs through native ``torch.xpu``."""

    _name = "xpu"
    #: ``ccl`` where oneCCL's bindings import, else ``xccl`` (a subclass's own value wins).
    _communication_backend_name: InstanceDefault[str] = InstanceDefault(
        lambda self: "ccl" if ccl_backend_available() else "xccl"
    )
    _compile_backend = "inductor"
    device_module_name = "xpu"
    graph_class_name = "XPUGraph"
    profiler_module_name = "itt"
    visible_devices_env_names = ("ZE_AFFINITY_MASK",)
    export_env_prefixes = ()

    @classmethod
    def runtime_absent(cls) -> str | None:
        """Native: a torch too old for it or built without it (torch's flags); IPEX: not found."""
        if cls.runtime_package:
            return super().runtime_absent()
        module = _xpu_module()
        if torch_release() < NATIVE_MIN_TORCH or module is None:
            return (
                f"torch {torch.__version__} has no native XPU support (needs >= {_NATIVE_NEEDED})"
            )
        is_compiled = getattr(module, "_is_compiled", None)
        if is_compiled is not None and not is_compiled():
            return f"torch {torch.__version__} was built without XPU support"
        return None

    def random(self) -> Any:
        """``torch.xpu.random`` where the runtime has it, else ``torch.random``."""
        return getattr(self._module, "random", None) or super().random()

    def default_stream(self, device_index: int | None = None) -> Any:
        """The current stream: ``torch.xpu`` has no CUDA-like default stream that syncs."""
        return self.current_stream(device_index)

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        """Queue ``callback`` until XPU initialises (IPEX keeps ``_lazy_call`` in ``lazy_init``)."""
        function = self._optional("_lazy_call")
        if function is None:
            function = getattr(getattr(self._module, "lazy_init", None), "_lazy_call", None)
        return function(callback) if function is not None else callback()

    def is_triton_supported(self) -> bool:
        """Triton (Intel's XPU backend ships as ``triton``) is installed and a device is visible."""
        return package_installed("triton") and self.is_available()


class IpexXpuAccelerator(XpuAccelerator):
    """Intel GPUs through ``torch.xpu`` as intel_extension_for_pytorch extends it."""

    runtime_package = "intel_extension_for_pytorch"

    def build_extension(self) -> type[Any]:
        """IPEX's ``DpcppBuildExtension``, which compiles SYCL sources."""
        try:
            from intel_extension_for_pytorch.xpu.cpp_extension import (  # type: ignore[import-not-found]
                DpcppBuildExtension,
            )
        except ImportError:
            return super().build_extension()
        extension: type[Any] = DpcppBuildExtension
        return extension
