"""Where each accelerator's op builders live and how a builder is found by class name.

Builder packages are scanned lazily, once, for ``OpBuilder`` subclasses; an op that some other
backend has, or that only DeepSpeed has, resolves to a builder whose ``load()`` says so.
DeepSpeed walks ``op_builder_dir()``'s submodules for names ending in ``Builder``; each builder
package's ``deepspeed_ops`` module lists every name DeepSpeed knows for that walk.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from types import ModuleType

from anyaccel.forksafe import ForkSafeLock
from anyaccel.ops.builder import Compatibility, OpBuilder
from anyaccel.ops.errors import OpNotAvailableError

#: The package of the devices anyaccel ships no kernels for: the host-side builders alone.
DEVICE_HOST_PACKAGE = "anyaccel.ops.host"

#: The builder package of every accelerator anyaccel ships.
BUILTIN_PACKAGES: dict[str, str] = {
    "cpu": "anyaccel.ops.cpu",
    "cuda": "anyaccel.ops.cuda",
    "xpu": DEVICE_HOST_PACKAGE,
    "xpu.external": DEVICE_HOST_PACKAGE,
    "npu": DEVICE_HOST_PACKAGE,
    "mps": DEVICE_HOST_PACKAGE,
    "hpu": DEVICE_HOST_PACKAGE,
    "mlu": DEVICE_HOST_PACKAGE,
    "sdaa": DEVICE_HOST_PACKAGE,
}

#: Accelerators anyaccel does not know get the host (CPU) ops, which run beside any device.
HOST_PACKAGE = "anyaccel.ops.cpu"

#: Where the native parts that run beside any accelerator live: the host package (optimizers,
#: shared-memory collectives) and the emulated device's module. ``anyaccel ops --build NAME``
#: finds them under every accelerator, and ``--build all`` builds those that apply here.
HOST_NATIVE_PACKAGES: tuple[str, ...] = (HOST_PACKAGE, "anyaccel.emulated.native_builders")

#: Every op builder DeepSpeed 0.19.8 ships, class name -> op name. Under our accelerator
#: DeepSpeed's ``ALL_OPS`` and ``__compatible_ops__`` hold each of these op names, with
#: ``is_compatible()`` true only where anyaccel can build the op here.
DEEPSPEED_BUILDERS: dict[str, str] = {
    "AsyncIOBuilder": "async_io",
    "CCLCommBuilder": "deepspeed_ccl_comm",
    "CPUAdagradBuilder": "cpu_adagrad",
    "CPUAdamBuilder": "cpu_adam",
    "CPULionBuilder": "cpu_lion",
    "DeepCompileBuilder": "dc",
    "EvoformerAttnBuilder": "evoformer_attn",
    "FPQuantizerBuilder": "fp_quantizer",
    "FlashAttentionBuilder": "flash_attn",
    "FusedAdamBuilder": "fused_adam",
    "FusedLambBuilder": "fused_lamb",
    "FusedLionBuilder": "fused_lion",
    "GDSBuilder": "gds",
    "InferenceBuilder": "transformer_inference",
    "InferenceCoreBuilder": "inference_core_ops",
    "InferenceCutlassBuilder": "cutlass_ops",
    "NotImplementedBuilder": "deepspeed_not_implemented",
    "PinMemoryBuilder": "pin_memory",
    "QuantizerBuilder": "quantizer",
    "RaggedOpsBuilder": "ragged_device_ops",
    "RaggedUtilsBuilder": "ragged_ops",
    "RandomLTDBuilder": "random_ltd",
    "ShareMemCommBuilder": "deepspeed_shm_comm",
    "SpatialInferenceBuilder": "spatial_inference",
    "StochasticTransformerBuilder": "stochastic_transformer",
    "TransformerBuilder": "transformer",
    "UtilsBuilder": "utils",
}

_scan_lock = ForkSafeLock(reentrant=True)
_scanned: dict[str, dict[str, type[OpBuilder]]] = {}
_unavailable: dict[tuple[str, str], type[OpBuilder]] = {}


def builder_package(accelerator_name: str) -> str:
    """The import path of the package holding ``accelerator_name``'s op builders (never raises)."""
    return BUILTIN_PACKAGES.get(str(accelerator_name), HOST_PACKAGE)


def builders_in_package(package: str) -> dict[str, type[OpBuilder]]:
    """Every concrete ``OpBuilder`` subclass defined or re-exported in ``package``, by class name.

    A package that does not import yields no builders (a missing third-party package is
    not an error here; its ops are simply unavailable).
    """
    with _scan_lock:
        found = _scanned.get(package)
        if found is None:
            found = _scan(package)
            _scanned[package] = found
        return found


def _scan(package: str) -> dict[str, type[OpBuilder]]:
    """Import ``package`` and its direct submodules and collect their builder classes."""
    try:
        root = importlib.import_module(package)
    except ImportError:
        return {}
    modules: list[ModuleType] = [root]
    for info in pkgutil.iter_modules(getattr(root, "__path__", [])):
        if not info.name.startswith("_"):
            modules.append(importlib.import_module(f"{package}.{info.name}"))
    found: dict[str, type[OpBuilder]] = {}
    for module in modules:
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, OpBuilder)
                and value.NAME
                and not issubclass(value, UnavailableOpBuilder)
            ):
                found.setdefault(name, value)
    return found


def backends_providing(class_name: str) -> list[str]:
    """Names of the built-in accelerators whose packages define ``class_name``."""
    return [
        name
        for name, package in BUILTIN_PACKAGES.items()
        if class_name in builders_in_package(package)
    ]


def known_builder_names(extra_package: str | None = None) -> list[str]:
    """Every builder class name any built-in package (or ``extra_package``) defines, sorted."""
    names: set[str] = set()
    packages = {*BUILTIN_PACKAGES.values(), *HOST_NATIVE_PACKAGES}
    for package in {*packages, *([extra_package] if extra_package else [])}:
        names.update(builders_in_package(package))
    return sorted(names)


def buildable_builder_class(package: str, class_name: str, accelerator_name: str) -> type | None:
    """``find_builder_class``, where a native part of the host (``HOST_NATIVE_PACKAGES``) is found
    under any accelerator: it is built here whatever the accelerator's own package holds."""
    found = find_builder_class(package, class_name, accelerator_name)
    if found is None or issubclass(found, UnavailableOpBuilder):
        for host in HOST_NATIVE_PACKAGES:
            native = builders_in_package(host).get(class_name)
            if native is not None:
                return native
    return found


def every_builder(package: str) -> dict[str, type[OpBuilder]]:
    """Every builder ``package`` and ``HOST_NATIVE_PACKAGES`` define, by class name (sorted)."""
    found: dict[str, type[OpBuilder]] = {}
    for source in (package, *HOST_NATIVE_PACKAGES):
        for name, builder in builders_in_package(source).items():
            found.setdefault(name, builder)
    # an alias (ShmBackendBuilder) of a class that is also listed under its own name goes
    aliases = {n for n, b in found.items() if n != b.__name__ and found.get(b.__name__) is b}
    return {name: found[name] for name in sorted(found) if name not in aliases}


def find_builder_class(package: str, class_name: str, accelerator_name: str) -> type | None:
    """The builder class named ``class_name`` in ``package``, or ``None`` if no op has that name.

    An op that only other backends have, or that only DeepSpeed ships, returns an
    ``UnavailableOpBuilder`` subclass: ``is_compatible()`` is false and ``load()`` raises
    ``OpNotAvailableError`` naming the op, this backend and where the op exists.
    """
    found = builders_in_package(package).get(class_name)
    if found is not None:
        return found
    providers = backends_providing(class_name)
    if not providers and class_name not in DEEPSPEED_BUILDERS:
        return None
    with _scan_lock:
        key = (class_name, accelerator_name)
        unavailable = _unavailable.get(key)
        if unavailable is None:
            unavailable = _make_unavailable(class_name, accelerator_name, providers)
            _unavailable[key] = unavailable
        return unavailable


def package_backend(package: str) -> str:
    """The built-in accelerator whose builders live in ``package`` (``cpu`` for the host one)."""
    return next((name for name, found in BUILTIN_PACKAGES.items() if found == package), "cpu")


def deepspeed_walk_names(package: str) -> tuple[Callable[[], list[str]], Callable[[str], type]]:
    """``__dir__`` and ``__getattr__`` for a builder package's ``deepspeed_ops`` module.

    DeepSpeed lists each submodule of ``op_builder_dir()`` with ``module.__dir__()`` and asks
    the accelerator's ``create_op_builder`` for every name ending in ``Builder``: this module
    lists every builder name DeepSpeed knows, so each op is in ``ALL_OPS`` with a truthful flag.
    """

    def names() -> list[str]:
        return sorted(DEEPSPEED_BUILDERS)

    def builder_class(name: str) -> type:
        found = find_builder_class(package, name, package_backend(package))
        if found is None:
            raise AttributeError(f"{package}.deepspeed_ops has no op builder {name!r}")
        return found

    return names, builder_class


class UnavailableOpBuilder(OpBuilder):
    """Stands in for an op the current backend lacks: reports why, and ``load()`` raises."""

    #: The accelerator that lacks the op, and the ones that have it.
    ACCELERATOR: str = ""
    PROVIDERS: tuple[str, ...] = ()

    def reason(self) -> str:
        """The message ``load()`` raises: the op, this backend and where the op exists."""
        where = (
            f"available on: {', '.join(self.PROVIDERS)}"
            if self.PROVIDERS
            else "anyaccel has no implementation of it on any backend"
        )
        return (
            f"op {self.NAME!r} ({type(self).__name__}) is not available on backend "
            f"{self.ACCELERATOR!r}; {where}"
        )

    def sources(self) -> list[str]:
        """No sources: there is nothing to build on this backend."""
        raise OpNotAvailableError(self.reason())

    def compatibility(self) -> Compatibility:
        """Never compatible, with the reason naming where the op exists."""
        return Compatibility(False, self.reason())

    def platform_compatibility(self) -> Compatibility:
        """Never compatible: the backend lacks the op."""
        return self.compatibility()

    def load(self, verbose: bool = False) -> ModuleType:
        """Raise ``OpNotAvailableError``: the op does not exist on this backend."""
        raise OpNotAvailableError(self.reason())


def _make_unavailable(
    class_name: str, accelerator_name: str, providers: list[str]
) -> type[OpBuilder]:
    """A subclass of ``UnavailableOpBuilder`` named like the missing builder."""
    op_names = {
        builders_in_package(BUILTIN_PACKAGES[provider])[class_name].NAME for provider in providers
    } or {DEEPSPEED_BUILDERS[class_name]}
    attributes = {
        "NAME": sorted(op_names)[0],
        "ACCELERATOR": accelerator_name,
        "PROVIDERS": tuple(providers),
        "__module__": __name__,
        "__doc__": f"{class_name} is not available on {accelerator_name}; load() raises.",
    }
    return type(class_name, (UnavailableOpBuilder,), attributes)
