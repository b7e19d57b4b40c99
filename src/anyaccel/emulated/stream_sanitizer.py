"""Find device memory used on two streams without a synchronization between them.

The emulated device runs every op when it is issued, so work on a side stream used on another
stream without ``wait_stream``/``wait_event`` never races here; on a GPU it may. This sanitizer,
in the model of ``torch.cuda._sanitizer`` (CSAN), sees every op on the emulated device (a
``TorchDispatchMode``), keeps for each storage its last writer and its readers with the
stream's op count, and asks the native core's stream clocks whether the current stream has
synchronized with them (an event wait, a stream wait, a host synchronization then a new op).
An access that has not raises ``UnsynchronizedStreamAccessError``.

Turn it on with ``ANYACCEL_EMULATED_SANITIZE_STREAMS=1`` (read by ``install``), or
``enable()`` / ``disable()``, or ``with sanitize_streams():``. It costs a Python call per op.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anyaccel.emulated.spec import MAX_DEVICES
from anyaccel.emulated.state import EmulatedDeviceError, installed_spec, native
from anyaccel.settings import read_on_off

__all__ = [
    "SANITIZE_STREAMS_ENV",
    "UnsynchronizedStreamAccessError",
    "disable",
    "enable",
    "enable_from_environment",
    "is_enabled",
    "sanitize_streams",
]

#: Set to ``1`` to run the emulated device under the stream sanitizer from ``install``.
SANITIZE_STREAMS_ENV = "ANYACCEL_EMULATED_SANITIZE_STREAMS"


class UnsynchronizedStreamAccessError(EmulatedDeviceError):
    """A tensor was used on one stream after another stream's access, with no sync between."""


@dataclass
class _Access:
    stream: int  # the native core's stream key
    count: int  # that stream's op count at the access
    op: str


@dataclass
class _StorageRecord:
    write: _Access | None = None
    reads: dict[int, _Access] = field(default_factory=dict)


def _stream_name(key: int) -> str:
    stream, device = divmod(key, MAX_DEVICES)  # the native core's stream_key
    kind = "the default stream" if stream == 0 else f"stream {stream}"
    return f"{kind} of {_device_type()}:{device}"


def _device_type() -> str:
    spec = installed_spec()
    if spec is None:
        raise EmulatedDeviceError(
            "the stream sanitizer checks the emulated device: install it first "
            "(anyaccel.testing.emulated.install())"
        )
    return spec.device_type


def _flat(values: Any) -> Iterator[Any]:
    """The leaves of nested tuples, lists and dicts (an op's arguments or results)."""
    if isinstance(values, (tuple, list)):
        for value in values:
            yield from _flat(value)
    elif isinstance(values, dict):
        for value in values.values():
            yield from _flat(value)
    else:
        yield values


#: Ops whose schema marks a tensor mutable that touch none of its memory.
_NO_MEMORY_ACCESS = frozenset({"aten::record_stream"})


class _Sanitizer(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's is untyped
    """Checks each op's device tensors against their storages' last accesses."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.records: dict[int, _StorageRecord] = {}
        self.device_type = _device_type()

    def _device_tensors(self, values: Any) -> list[torch.Tensor]:
        return [
            value
            for value in _flat(values)
            if isinstance(value, torch.Tensor) and value.device.type == self.device_type
        ]

    def _written(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[int]:
        """Storages the op writes in place (its schema's mutable arguments)."""
        written: set[int] = set()
        for position, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            if argument.name in kwargs:
                value = kwargs[argument.name]
            elif position < len(args):
                value = args[position]
            else:
                continue
            written.update(_key(tensor) for tensor in self._device_tensors(value))
        return written

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "is_view", False) or func.name() in _NO_MEMORY_ACCESS:
            return func(*args, **kwargs)
        inputs = self._device_tensors((args, kwargs))
        written = self._written(func, args, kwargs) if inputs else set()
        result = func(*args, **kwargs)
        outputs = [
            tensor
            for tensor in self._device_tensors(result)
            if _key(tensor) not in {_key(item) for item in inputs}
        ]
        if not inputs and not outputs:
            return result
        index = (inputs or outputs)[0].device.index or 0
        clock = {int(k): int(v) for k, v in native().issue_on_current_stream(index).items()}
        stream = int(native().stream_key(index, int(native().current_stream_id(index))))
        access = _Access(stream, clock[stream], str(func))
        for tensor in inputs:
            key = _key(tensor)
            self._check(key, access, clock, write=key in written)
        for tensor in outputs:  # fresh memory: earlier accesses were to a freed allocation
            self.records[_key(tensor)] = _StorageRecord(write=access)
        return result

    def _check(self, key: int, access: _Access, clock: dict[int, int], write: bool) -> None:
        record = self.records.setdefault(key, _StorageRecord())
        earlier = [record.write] if record.write is not None else []
        if write:
            earlier += list(record.reads.values())
        for previous in earlier:
            if previous.stream != access.stream and clock.get(previous.stream, 0) < previous.count:
                action = "writes" if write else "reads"
                before = "wrote" if previous is record.write else "read"
                raise UnsynchronizedStreamAccessError(
                    f"{access.op} on {_stream_name(access.stream)} {action} a tensor that "
                    f"{previous.op} on {_stream_name(previous.stream)} {before} with no "
                    "synchronization between them: on a GPU the two may race. Make the "
                    "stream wait first (current_stream().wait_stream(other) or "
                    "wait_event(event recorded after the access)), or synchronize"
                )
        if write:
            record.write, record.reads = access, {}
        else:
            record.reads[access.stream] = access


def _key(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().data_ptr())


_active: _Sanitizer | None = None


def enable() -> None:
    """Check every later op of the emulated device for unsynchronized stream use."""
    global _active
    if _active is not None:
        return
    native().track_stream_clocks(True)
    _active = _Sanitizer()
    _active.__enter__()  # type: ignore[no-untyped-call]


def disable() -> None:
    """Stop checking (a no-op when off)."""
    global _active
    if _active is None:
        return
    _active.__exit__(None, None, None)  # type: ignore[no-untyped-call]
    _active = None
    native().track_stream_clocks(False)


def is_enabled() -> bool:
    """Whether the sanitizer checks ops now."""
    return _active is not None


@contextmanager
def sanitize_streams() -> Iterator[None]:
    """Check the ops of the block for unsynchronized stream use."""
    was_on = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was_on:
            disable()


def enable_from_environment() -> bool:
    """Enable when ``ANYACCEL_EMULATED_SANITIZE_STREAMS`` is on; whether it did.

    Raises ``InvalidSettingError`` when the variable is neither on nor off.
    """
    if not read_on_off(SANITIZE_STREAMS_ENV):
        return False
    enable()
    return True
