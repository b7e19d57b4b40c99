"""The checks of the accelerator contract: each takes an accelerator and returns its failures.

Each failure is a sentence naming the member, what it gave and what the contract wants; a
check that cannot run here raises :class:`SkipCheck` with the reason. Checks restore whatever
state they change (seeds, compile backend).
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

from anyaccel.errors import AnyaccelError
from anyaccel.testing.conformance.report import NO_DEVICE, safe_repr

__all__ = ["CHECKS", "DEVICE_CHECKS", "SkipCheck", "no_device_reason"]


class SkipCheck(AnyaccelError):
    """Raised inside a check that cannot run in this process; the message says why."""


class _Findings:
    """Collects a check's failures; ``call`` records an exception as a failure."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def expect(self, condition: bool, message: str) -> bool:
        if not condition:
            self.messages.append(message)
        return condition

    def call(self, what: str, function: Callable[[], Any]) -> tuple[bool, Any]:
        try:
            return True, function()
        except SkipCheck:
            raise
        except Exception as error:
            self.messages.append(f"{what} raised {type(error).__name__}: {error}")
            return False, None


def _kind(value: object) -> str:
    return f"{type(value).__name__} {safe_repr(value)}"[:120]


def _first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, whole (never cut mid-word)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


#: Checks that need a device of the accelerator's type; skipped when it has none.
DEVICE_CHECKS = frozenset(
    {"return_types", "device_strings", "rng_state", "streams_and_events", "memory", "tensor_types"}
)


def no_device_reason(acc: Any) -> str | None:
    """Why the device checks cannot run (``device_count()`` is 0), or ``None``.

    A ``device_count()`` that raises or exits is left to the checks, which report it.
    """
    try:
        count = acc.device_count()
    except (Exception, SystemExit):
        return None
    if _is_int(count) and count == 0:
        return (
            f"{NO_DEVICE}: device_count() is 0, so the device checks were skipped; run the kit "
            "where a device is visible (or in a simulated runtime with device_count >= 1)"
        )
    return None


def _device_context_index(value: object) -> int | None:
    """The index of a ``torch.cuda.device``-style context (DeepSpeed's MLU and SDAA accelerators
    answer ``device()`` with one), or ``None`` for anything else."""
    index = getattr(value, "idx", None)
    entered = callable(getattr(value, "__enter__", None))
    return index if entered and _is_int(index) else None


def _is_device(value: object) -> bool:
    return isinstance(value, torch.device) or _device_context_index(value) is not None


def _is_deepspeed_builder(cls: object) -> bool:
    """Whether ``cls`` is one of DeepSpeed's op builders (its ``OpBuilder`` in the bases)."""
    return inspect.isclass(cls) and any(
        base.__name__ == "OpBuilder"
        and base.__module__.split(".")[-1] == "builder"
        and "op_builder" in base.__module__
        for base in cls.__mro__
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _make_tensor(acc: Any, factory: str) -> Any:
    return getattr(acc, factory)([1, 2])


def _can_allocate(acc: Any) -> tuple[bool, str]:
    """Whether torch itself can place a tensor on ``acc``'s device in this process."""
    try:
        torch.empty(1, device=acc.device())
    except Exception as error:
        return False, (
            f"torch cannot allocate on {str(acc.device())!r} in this process "
            f"({type(error).__name__}: {_first_line(error)}); a simulated runtime has no memory"
        )
    return True, ""


# ---------------------------------------------------------------------- the checks
def check_contract_members(acc: Any) -> list[str]:
    """Every member DeepSpeed code calls exists, and ``_name`` is a non-empty string."""
    from anyaccel.contract import missing_members

    found = _Findings()
    missing = missing_members(acc)
    found.expect(not missing, f"missing members: {', '.join(missing)}")
    name = getattr(acc, "_name", None)
    found.expect(isinstance(name, str) and bool(name), f"_name is {name!r}, not a non-empty str")
    if found.messages:
        return found.messages
    from anyaccel.plugins import plugin_name_problem
    from anyaccel.registry import builtin_names

    ok, problem = found.call(
        "the plugin name rule", lambda: plugin_name_problem(acc, builtin_names())
    )
    if ok and problem is not None:  # the verdict detection and set_accelerator give
        found.messages.append(problem)
    return found.messages


_BOOL_METHODS = (
    "is_available", "is_synchronized_device", "use_host_timers", "resolves_data_dependency",
    "handles_memory_backpressure", "prefer_triton_grouped_mm", "is_bf16_supported",
    "is_fp16_supported", "is_fp64_supported", "is_triton_supported",
    "is_current_stream_capturing",
)  # fmt: skip
_INT_METHODS = ("current_device", "device_count", "initial_seed", "pin_memory_alignment")
_STR_LIST_METHODS = ("export_envs", "visible_devices_envs")


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_dtype_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(d, torch.dtype) for d in value)


#: (method names, test of the returned value, the kind wanted) for ``check_return_types``.
_RETURN_KINDS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (_BOOL_METHODS, lambda v: isinstance(v, bool), "bool"),
    (_INT_METHODS, _is_int, "int"),
    (_STR_LIST_METHODS, _is_str_list, "a list of str"),
    (
        ("device_name", "current_device_name", "communication_backend_name"),
        lambda v: isinstance(v, str),
        "str",
    ),
    (("supported_dtypes",), _is_dtype_list, "a list of dtypes"),
    (("random",), lambda v: isinstance(v, types.ModuleType), "module"),
    (("get_compile_backend",), lambda v: v is None or isinstance(v, str), "str or None"),
    (("device",), lambda v: _is_device(v), "torch.device (or DeepSpeed's device context)"),
    (("build_extension",), inspect.isclass, "a class"),
)


def check_return_types(acc: Any) -> list[str]:
    """Methods return the kinds the contract names (an int index is an int, not a device)."""
    found = _Findings()
    values: dict[str, Any] = {}
    for names, accepts, want in _RETURN_KINDS:
        for name in names:
            ok, value = found.call(f"{name}()", getattr(acc, name))
            if ok:
                found.expect(accepts(value), f"{name}() returned {_kind(value)}; want {want}")
                values[name] = value
    count = values.get("device_count")
    if isinstance(count, int) and _is_int(count):
        found.expect(count >= 0, f"device_count() returned {count}; want >= 0")
    dtypes = values.get("supported_dtypes")
    if isinstance(dtypes, list) and _is_dtype_list(dtypes):
        found.expect(
            bool(dtypes) and dtypes[0] == torch.float32,
            f"supported_dtypes() is {dtypes}; want torch.float32 first",
        )
    return found.messages


def check_device_strings(acc: Any) -> list[str]:
    """``device_name``, ``device`` and ``current_device_name`` round-trip via ``torch.device``."""
    found = _Findings()
    type_name = acc.device_name()
    ok, parsed = found.call(f"torch.device({type_name!r})", lambda: torch.device(type_name))
    if not ok:
        return found.messages
    found.expect(
        parsed.index is None and str(parsed) == type_name,
        f"device_name() is {type_name!r}; want the bare device type, e.g. 'cuda'",
    )
    indexed = parsed.type == acc.device_name(0).split(":")[0] and ":" in acc.device_name(0)
    for index in range(max(1, min(int(acc.device_count()), 2))):
        name = acc.device_name(index)
        ok, device = found.call(f"torch.device({name!r})", functools.partial(torch.device, name))
        if not ok:
            continue
        found.expect(device.type == parsed.type, f"device_name({index}) is {name!r}: wrong type")
        if indexed:
            found.expect(
                name == f"{parsed.type}:{index}",
                f"device_name({index}) is {name!r}; want '{parsed.type}:{index}'",
            )
        made = acc.device(index)
        found.expect(
            (isinstance(made, torch.device) and made == device)
            or _device_context_index(made) == index,
            f"device({index}) is {made!r}; want torch.device({name!r})",
        )
    current = acc.current_device_name()
    ok, device = found.call(f"torch.device({current!r})", lambda: torch.device(current))
    if ok and indexed:
        found.expect(
            device.type == parsed.type and device.index == acc.current_device(),
            f"current_device_name() is {current!r}; want "
            f"'{parsed.type}:{acc.current_device()}' (current_device() is {acc.current_device()})",
        )
    return found.messages


def check_rng_state(acc: Any) -> list[str]:
    """Seeding changes the generator state; restoring a saved state reproduces random draws."""
    found = _Findings()
    original = acc.get_rng_state()
    if not found.expect(
        isinstance(original, torch.Tensor) and original.dtype == torch.uint8,
        f"get_rng_state() returned {_kind(original)}; want a uint8 (Byte) tensor",
    ):
        return found.messages
    found.expect(
        original.device.type == "cpu",
        f"get_rng_state() is on {original.device}; want a CPU tensor",
    )
    allocatable, _ = _can_allocate(acc)
    try:
        acc.manual_seed(1234)
        found.expect(
            acc.initial_seed() == 1234,
            f"initial_seed() is {acc.initial_seed()!r} after manual_seed(1234); want 1234",
        )
        seeded = acc.get_rng_state().clone()
        acc.manual_seed(4321)
        found.expect(
            not torch.equal(acc.get_rng_state(), seeded),
            "get_rng_state() did not change between manual_seed(1234) and manual_seed(4321)",
        )
        acc.set_rng_state(seeded)
        found.expect(
            torch.equal(acc.get_rng_state(), seeded),
            "get_rng_state() after set_rng_state(saved) differs from the saved state",
        )
        if allocatable:
            first = torch.rand(8, device=acc.device()).cpu()
            acc.set_rng_state(seeded)
            second = torch.rand(8, device=acc.device()).cpu()
            found.expect(
                torch.equal(first, second),
                "torch.rand on the device gave different numbers after restoring the same state",
            )
        acc.manual_seed_all(99)
        found.expect(
            acc.initial_seed() == 99,
            f"initial_seed() is {acc.initial_seed()!r} after manual_seed_all(99); want 99",
        )
    finally:
        acc.set_rng_state(original)
    return found.messages


def check_streams_and_events(acc: Any) -> list[str]:
    """Streams work as contexts; events record, synchronize and time; synchronize returns."""
    found = _Findings()
    found.expect(inspect.isclass(acc.Stream), f"Stream is {_kind(acc.Stream)}; want a class")
    found.expect(inspect.isclass(acc.Event), f"Event is {_kind(acc.Event)}; want a class")
    found.call("synchronize()", acc.synchronize)
    ok, stream = found.call("current_stream()", acc.current_stream)
    found.call("default_stream()", acc.default_stream)
    if ok:

        def enter() -> None:
            with acc.stream(stream):
                acc.synchronize()

        found.call("with stream(current_stream())", enter)
    ok, start = found.call("Event(enable_timing=True)", lambda: acc.Event(enable_timing=True))
    if ok:
        end = acc.Event(enable_timing=True)
        found.call("Event.record()", start.record)
        found.call("Event.record()", end.record)
        found.call("Event.synchronize()", end.synchronize)
        ok, elapsed = found.call("Event.elapsed_time()", lambda: start.elapsed_time(end))
        if ok:
            found.expect(
                isinstance(elapsed, (int, float)) and elapsed >= 0,
                f"Event.elapsed_time() returned {_kind(elapsed)}; want a float >= 0",
            )
    ok, graph = found.call("create_graph()", acc.create_graph)
    if ok:

        def capture() -> None:
            with acc.capture_to_graph(graph):
                pass

        if found.call("with capture_to_graph(graph)", capture)[0]:
            found.call("replay_graph(graph)", lambda: acc.replay_graph(graph))
    return found.messages


_MEMORY_GETTERS = (
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "total_memory", "available_memory",
)  # fmt: skip


def check_memory(acc: Any) -> list[str]:
    """Memory figures are ints ≥ 0, peaks ≥ currents, and resetting the peak lowers it."""
    found = _Findings()
    figures: dict[str, int] = {}
    for name in _MEMORY_GETTERS:
        ok, value = found.call(f"{name}()", getattr(acc, name))
        if ok and found.expect(
            _is_int(value) and value >= 0, f"{name}() returned {_kind(value)}; want an int >= 0"
        ):
            figures[name] = value
    for peak, current in (
        ("max_memory_allocated", "memory_allocated"),
        ("max_memory_reserved", "memory_reserved"),
    ):
        if peak in figures and current in figures:
            found.expect(
                figures[peak] >= figures[current],
                f"{peak}() = {figures[peak]} is below {current}() = {figures[current]}",
            )
    if "total_memory" in figures and acc.is_available():
        found.expect(figures["total_memory"] > 0, "total_memory() is 0 on an available device")
    ok, stats = found.call("memory_stats()", acc.memory_stats)
    if ok:
        found.expect(isinstance(stats, dict), f"memory_stats() returned {_kind(stats)}; want dict")
    allocatable, _ = _can_allocate(acc)
    if not allocatable:
        found.call("reset_peak_memory_stats()", acc.reset_peak_memory_stats)
        current = acc.memory_allocated()
        found.expect(
            acc.max_memory_allocated() >= current,
            "max_memory_allocated() fell below memory_allocated() after reset_peak_memory_stats()",
        )
        return found.messages
    size = 64 * 1024 * 1024
    block = torch.ones(size // 4, dtype=torch.float32, device=acc.device())
    acc.synchronize()
    peak_with_block = acc.max_memory_allocated()
    found.expect(
        peak_with_block >= size // 2,
        f"max_memory_allocated() is {peak_with_block} with a {size}-byte tensor alive",
    )
    del block
    acc.synchronize()
    acc.empty_cache()
    found.call("reset_peak_memory_stats()", acc.reset_peak_memory_stats)
    current = acc.memory_allocated()
    peak_after = acc.max_memory_allocated()
    found.expect(
        peak_after <= peak_with_block - size // 2,
        f"max_memory_allocated() is {peak_after} after freeing {size} bytes and "
        f"reset_peak_memory_stats() (was {peak_with_block}); the reset did not take",
    )
    found.expect(
        peak_after >= current,
        "max_memory_allocated() fell below memory_allocated() after reset_peak_memory_stats()",
    )
    return found.messages


_TENSOR_TYPES = {
    "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "DoubleTensor": torch.float64,
    "FloatTensor": torch.float32, "HalfTensor": torch.float16, "IntTensor": torch.int32,
    "LongTensor": torch.int64,
}  # fmt: skip


def check_tensor_types(acc: Any) -> list[str]:
    """``FloatTensor`` and friends make tensors of their dtype on this device."""
    found = _Findings()
    allocatable, reason = _can_allocate(acc)
    if not allocatable:
        raise SkipCheck(reason)
    device_type = acc.device().type
    for name, dtype in _TENSOR_TYPES.items():
        if dtype == torch.float64 and not acc.is_fp64_supported():
            continue
        ok, tensor = found.call(f"{name}([1, 2])", functools.partial(_make_tensor, acc, name))
        if not ok:
            continue
        if not found.expect(isinstance(tensor, torch.Tensor), f"{name} made {_kind(tensor)}"):
            continue
        found.expect(
            tensor.device.type == device_type,
            f"{name}([1, 2]) landed on {tensor.device}; want {device_type!r}",
        )
        found.expect(tensor.dtype == dtype, f"{name}([1, 2]) has {tensor.dtype}; want {dtype}")
        found.expect(acc.on_accelerator(tensor) is True, f"on_accelerator({name}(...)) is not True")
    if device_type != "cpu":
        found.expect(
            acc.on_accelerator(torch.zeros(1)) is False, "on_accelerator(cpu tensor) is not False"
        )
    return found.messages


def check_visible_devices(acc: Any) -> list[str]:
    """``set_visible_devices_envs`` narrows every visible-devices variable to ``'0,2'``, only.

    The launcher's environment lists devices ``0,1,2,3`` in each variable first, as a job
    scheduler would, so backends that map ids through the variable (Gaudi) are checked too.
    """
    found = _Findings()
    names = acc.visible_devices_envs()
    found.expect(bool(names), "visible_devices_envs() is empty; launchers read its first entry")
    env = {"UNRELATED": "keep", **dict.fromkeys(names, "0,1,2,3")}
    ok, _ = found.call(
        "set_visible_devices_envs(env, [0, 2])", lambda: acc.set_visible_devices_envs(env, [0, 2])
    )
    if not ok:
        return found.messages
    for name in names:
        found.expect(
            env.get(name) == "0,2",
            f"set_visible_devices_envs wrote {name}={env.get(name)!r}; want '0,2'",
        )
    extra = sorted(set(env) - set(names) - {"UNRELATED"})
    found.expect(not extra, f"set_visible_devices_envs also wrote {', '.join(extra)}")
    found.expect(env["UNRELATED"] == "keep", "set_visible_devices_envs changed other variables")
    return found.messages


def check_compile_backend(acc: Any) -> list[str]:
    """``set_compile_backend`` accepts torch's backend names and refuses others with ValueError."""
    import torch._dynamo

    found = _Findings()
    known = set(torch._dynamo.list_backends(exclude_tags=()))
    original = acc.get_compile_backend()
    found.expect(
        original is None or original in known,
        f"get_compile_backend() is {original!r}, which torch.compile does not know",
    )
    bogus = "no-such-compile-backend"
    try:
        acc.set_compile_backend(bogus)
    except ValueError as error:
        found.expect(bogus in str(error), f"the ValueError does not name {bogus!r}: {error}")
    except Exception as error:
        found.expect(False, f"set_compile_backend({bogus!r}) raised {type(error).__name__}")
    else:
        found.expect(False, f"set_compile_backend({bogus!r}) was accepted; want ValueError")
    try:
        if found.call("set_compile_backend('eager')", lambda: acc.set_compile_backend("eager"))[0]:
            found.expect(
                acc.get_compile_backend() == "eager",
                f"get_compile_backend() is {acc.get_compile_backend()!r} after setting 'eager'",
            )
    finally:
        acc._compile_backend = original
    return found.messages


def check_op_builders(acc: Any) -> list[str]:
    """Op-builder lookups answer a class, an instance or ``None``; unknown names give ``None``.

    DeepSpeed's op builders count as op builders, and its ``NotImplementedBuilder`` as ``None``.
    """
    import importlib.util

    from anyaccel.ops.builder import OpBuilder
    from anyaccel.ops.registry import known_builder_names

    found = _Findings()
    ok, package = found.call("op_builder_dir()", acc.op_builder_dir)
    if ok and found.expect(isinstance(package, str), f"op_builder_dir() is {_kind(package)}"):
        found.expect(
            importlib.util.find_spec(package) is not None,
            f"op_builder_dir() is {package!r}, which cannot be imported",
        )
    bogus = "NoSuchOpBuilder"
    for method in ("get_op_builder", "create_op_builder"):
        ok, value = found.call(
            f"{method}({bogus!r})", functools.partial(getattr(acc, method), bogus)
        )
        # DeepSpeed's own accelerators answer an unknown name with their NotImplementedBuilder.
        not_implemented = getattr(value, "NAME", None) == "deepspeed_not_implemented"
        if ok:
            found.expect(
                value is None or not_implemented,
                f"{method}({bogus!r}) returned {_kind(value)}; want None",
            )
    for name in known_builder_names():
        ok, cls = found.call(
            f"get_op_builder({name!r})", functools.partial(acc.get_op_builder, name)
        )
        if ok and cls is not None:
            found.expect(
                inspect.isclass(cls) and (issubclass(cls, OpBuilder) or _is_deepspeed_builder(cls)),
                f"get_op_builder({name!r}) returned {_kind(cls)}; want an OpBuilder class",
            )
    return found.messages


#: Every check, by the name reports and ``--check`` use, in the order they run.
CHECKS: dict[str, Callable[[Any], list[str]]] = {
    "contract_members": check_contract_members,
    "return_types": check_return_types,
    "device_strings": check_device_strings,
    "rng_state": check_rng_state,
    "streams_and_events": check_streams_and_events,
    "memory": check_memory,
    "tensor_types": check_tensor_types,
    "visible_devices": check_visible_devices,
    "compile_backend": check_compile_backend,
    "op_builders": check_op_builders,
}
