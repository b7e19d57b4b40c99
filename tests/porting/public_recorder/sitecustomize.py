"""Records what the public corpus scripts ask torch for, in every process of a run.

Loaded by Python at start-up (``sitecustomize``) when this directory is on ``PYTHONPATH``, so
the script itself, the ranks ``torchrun`` starts and the children ``mp.spawn`` starts are all
recorded, with the scripts run as their users run them. Nothing happens unless
``ANYACCEL_CORPUS_RECORD`` names a JSON-lines file; only calls made directly from a file
under ``ANYACCEL_CORPUS_SCRIPTS`` are recorded (torch's own calls are not the script's).

With ``ANYACCEL_CORPUS_SIMULATE=<vendor>`` (mlu, musa, sdaa, supa) PrivateUse1 is renamed to
the vendor's device type and its simulated runtime is installed with
``ANYACCEL_CORPUS_DEVICES`` devices (``anyaccel.testing.simulated``). Its tensors would live on
a device this machine lacks, so every device the script hands to torch is recorded and then
replaced by the CPU, and the process group backend by gloo: the script trains, and the record
says where it asked to. Without a simulation nothing is replaced (the record only watches:
the gradient scaler's scale, for instance).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

RECORD = os.environ.get("ANYACCEL_CORPUS_RECORD", "")
SCRIPTS = os.path.realpath(os.environ.get("ANYACCEL_CORPUS_SCRIPTS", "/nonexistent"))
SIMULATE = os.environ.get("ANYACCEL_CORPUS_SIMULATE", "")
_KEPT: list[object] = []


def _caller_site(depth: int = 2) -> str | None:
    """``file:line`` of the frame ``depth`` up when it is a corpus script, else None."""
    frame = sys._getframe(depth)
    path = os.path.realpath(os.path.abspath(frame.f_code.co_filename))
    if not path.startswith(SCRIPTS + os.sep):
        return None
    return f"{os.path.relpath(path, SCRIPTS)}:{frame.f_lineno}"


_WRITTEN: set[str] = set()


def _write(entry: dict[str, Any]) -> None:
    """Append one JSON line, once per process (one small O_APPEND write: ranks do not mix)."""
    entry["rank"] = os.environ.get("RANK")
    line = json.dumps(entry) + "\n"
    if line in _WRITTEN:  # the same request from the same line, every batch
        return
    _WRITTEN.add(line)
    entry["pid"] = os.getpid()
    data = (json.dumps(entry) + "\n").encode()
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _describe(device: Any) -> dict[str, Any]:
    """The device as the script gave it: its Python type and its text."""
    return {"type": type(device).__name__, "value": str(device)}


def _install() -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch.nn.parallel import DistributedDataParallel

    def is_device(value: Any) -> bool:
        return isinstance(value, (str, int, real_device)) and not isinstance(value, bool)

    def moved(value: Any) -> Any:
        """The device the run really uses: the CPU for any device under a simulation."""
        return "cpu" if SIMULATE and is_device(value) else value

    def record(api: str, site: str | None, **fields: Any) -> None:
        if site is not None:
            _write({"api": api, "site": site, **fields})

    real_device = torch.device

    class _DeviceMeta(type):
        """``torch.device`` itself: calls are recorded, instances are the real class's."""

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            made = real_device(*args, **kwargs)
            record("torch.device", _caller_site(), device=_describe(made), args=repr(args))
            return made

        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, real_device)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real_device)

    class device(metaclass=_DeviceMeta):
        """Stands for ``torch.device`` in ``torch``'s namespace."""

    torch.device = device  # type: ignore[misc,assignment]

    def recording_to(real: Callable[..., Any], api: str) -> Callable[..., Any]:
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            site = _caller_site()
            args_list = list(args)
            if "device" in kwargs:
                record(api, site, device=_describe(kwargs["device"]))
                kwargs["device"] = moved(kwargs["device"])
            elif args_list and is_device(args_list[0]):
                record(api, site, device=_describe(args_list[0]))
                args_list[0] = moved(args_list[0])
            return real(self, *args_list, **kwargs)

        return to

    torch.nn.Module.to = recording_to(torch.nn.Module.to, "Module.to")  # type: ignore[method-assign]
    torch.Tensor.to = recording_to(torch.Tensor.to, "Tensor.to")  # type: ignore[method-assign]

    real_load = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        if "map_location" in kwargs:
            location = kwargs["map_location"]
            record("torch.load", _caller_site(), device=_describe(location))
            kwargs["map_location"] = moved(location)
        return real_load(*args, **kwargs)

    torch.load = load

    real_init = c10d.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend", args[0] if args else None)
        record("init_process_group", _caller_site(), backend=backend)
        if SIMULATE:
            args, kwargs = (), {**kwargs, "backend": "gloo"}
            # the job runs on gloo though ddp_device_ids sees the MLU, so anyaccel installs no
            # pause: torch's gloo exit abort (anyaccel.distributed.exit_grace) needs one here
            from anyaccel.distributed import install_exit_grace

            install_exit_grace()
        return real_init(*args, **kwargs)

    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group

    real_ddp_init = DistributedDataParallel.__init__

    def ddp_init(self: Any, module: Any, device_ids: Any = None, output_device: Any = None,
                 *args: Any, **kwargs: Any) -> None:  # fmt: skip
        ids = None if device_ids is None else [_describe(d) for d in device_ids]
        out = None if output_device is None else _describe(output_device)
        record("DistributedDataParallel", _caller_site(), device_ids=ids, output_device=out)
        if SIMULATE:  # the module is on the CPU: DDP takes no device list there
            device_ids = output_device = None
        real_ddp_init(self, module, device_ids, output_device, *args, **kwargs)

    DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]

    real_scaler_init = torch.amp.GradScaler.__init__

    def scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        record("GradScaler", _caller_site(), device=_describe(device))
        real_scaler_init(self, moved(device), *args, **kwargs)

    torch.amp.GradScaler.__init__ = scaler_init  # type: ignore[method-assign]

    real_scale = torch.amp.GradScaler.scale

    def scale(self: Any, outputs: Any) -> Any:
        scaled = real_scale(self, outputs)
        site = _caller_site()
        if site is not None and isinstance(outputs, torch.Tensor):
            ratio = float(scaled.detach().float() / outputs.detach().float())
            record("GradScaler.scale", site, enabled=self.is_enabled(), ratio=ratio)
        return scaled

    torch.amp.GradScaler.scale = scale  # type: ignore[method-assign]

    real_autocast_init = torch.amp.autocast.__init__

    def autocast_init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        record("torch.autocast", _caller_site(), device=_describe(device_type))
        real_autocast_init(self, moved(device_type), *args, **kwargs)

    torch.amp.autocast.__init__ = autocast_init  # type: ignore[method-assign]

    if SIMULATE:
        _simulate(torch)


def _simulate(torch: Any) -> None:
    """Rename PrivateUse1 and install the vendor's simulated runtime for the whole process."""
    from anyaccel.testing import simulated

    torch.utils.rename_privateuse1_backend(SIMULATE)
    devices = int(os.environ.get("ANYACCEL_CORPUS_DEVICES", "1"))
    runtime = getattr(simulated, f"simulate_{SIMULATE}")(devices)
    runtime.__enter__()
    _KEPT.append(runtime)  # installed for the life of the process: never collected, never undone
    # Pinning needs the vendor's PrivateUse1 hooks (C++), which no simulation has: pinned
    # host memory is a speed-up, so the tensor stays as it is (DataLoader(pin_memory=True)).
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    # On a CUDA build without a driver, torch.optim's graph-capture check asks the real runtime.
    for check in ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check"):
        if hasattr(torch.optim.Optimizer, check):
            setattr(torch.optim.Optimizer, check, lambda self: None)


if RECORD:
    try:
        _install()
    except BaseException:  # site.py would hide it and the run would go on unrecorded
        traceback.print_exc()
        sys.stderr.write("public_recorder: could not install the recorder\n")
        sys.stderr.flush()
        os._exit(3)
