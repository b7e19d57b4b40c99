"""A ``torch.distributed`` backend for CPU tensors: shared memory on one node, gloo for the rest.

``init_process_group(backend="anyaccel_shm")`` (or ``"cpu:anyaccel_shm"``) gives every caller of
``torch.distributed`` (DDP, ZeRO, FSDP, plain scripts) the shared-memory collectives. The group
is a Python ``ProcessGroup`` holding a gloo group over the same ranks (same store, its own
prefix): collectives the kernel runs (``NATIVE``: all_reduce, all_gather and
all_gather_into_tensor, reduce_scatter and reduce_scatter_tensor, broadcast, barrier) go
through the group's shared-memory segment;
every other call, and any tensor the kernel cannot take (float64, complex, integer dtypes),
goes to gloo, which is also registered as the group's CPU backend so that every method not
overridden here (send/recv, all_to_all, gather, scatter, object collectives, ...) reaches it
unchanged. Reduce ops mean the same on either path (``reduction``): MIN/MAX let a NaN win,
AVG is the exact mean of floats and NCCL's truncated mean of integers, PREMUL_SUM multiplies
first.

Native calls run synchronously and return a completed ``Work`` (``wait()`` returns at once,
``get_future()`` holds the outputs, as DDP needs). Ranks that die or stall raise within the
group's timeout; ranks that pass different sizes, dtypes or ops raise on every rank. A rank
that sends one of the ``NATIVE`` collectives to gloo announces it on the segment first, so
ranks that take different paths for one call fail at once instead of at the timeout.

torch's private ground, used here only (each also listed in ``tests/test_private_ground.py``):
``torch._C._distributed_c10d`` for ``AllgatherOptions`` and a finished ``Work`` from a future
(neither is re-exported by ``torch.distributed``, 2.4 to 2.14); ``ProcessGroup._register_backend``
(how a Python group hands the methods it does not override to gloo) and
``_set_default_backend`` (newer torch only, read with getattr); the overrides
``_allgather_base`` and ``_reduce_scatter_base``, the names torch < 2.10 calls (newer torch
calls the public ``all_gather_single`` and ``reduce_scatter_single``). Where torch changes
them, gloo is the public path: ``ANYACCEL_SHM_BACKEND=0``. Which c10d object a group gets is
decided without them: :func:`c10d_object_for`.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed.environment import launch_info
from anyaccel.distributed.errors import CollectiveError, DistributedSetupError
from anyaccel.distributed.exit_grace import pause_for_backend
from anyaccel.distributed.shm.group import (
    BACKEND_ENV,
    SHM_ENV,
    ShmGroup,
    adopt,
    announce_fallback,
    set_up_segment,
)
from anyaccel.distributed.shm.reduction import (
    DTYPE_CODES,
    all_reduce_as_nccl,
    gloo_differs,
    op_code,
    premultiplied,
)
from anyaccel.errors import InvalidSettingError
from anyaccel.forksafe import ForkSafeLock
from anyaccel.settings import read_on_off

__all__ = [
    "BACKEND_ENV",
    "BACKEND_NAME",
    "FALLBACK_TAG",
    "NATIVE",
    "ShmProcessGroup",
    "backend_registered",
    "cpu_backend_choice",
    "cpu_backend_name",
    "register_backend",
    "shm_backend_wanted",
    "shm_process_group",
]

logger = logging.getLogger(__name__)

#: The name ``init_process_group`` takes (``"anyaccel_shm"`` or ``"cpu:anyaccel_shm"``).
BACKEND_NAME = "anyaccel_shm"
#: The collectives this backend runs on shared memory (for CPU float tensors); the rest is gloo.
NATIVE = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "barrier",
)

#: dtype -> the tag the kernel compares across ranks in byte collectives (gather, broadcast).
_DTYPE_TAGS: dict[torch.dtype, int] = {
    dtype: index
    for index, dtype in enumerate(
        (
            torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
            torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
            torch.complex64, torch.complex128,
        )
    )
}  # fmt: skip
#: The byte tag a rank announces a gloo fallback of a native collective with (no dtype has it):
#: a peer that runs the same collective on shared memory then fails at once, not at the timeout.
FALLBACK_TAG = 1000
#: The collective a fallback announces, so ranks that fall back to different ones fail too.
_KINDS = {"all_reduce": 1, "all_gather": 2, "broadcast": 3, "reduce_scatter": 4}
#: A documented hook: torch.distributed's compiled module, for the two things it does not
#: re-export on any torch from 2.4 to 2.14: ``AllgatherOptions`` and a finished ``Work`` made
#: from a future (``_create_work_from_future``). The other options come from ``dist``.
_C10D: Any = torch._C._distributed_c10d


def _gloo_call(gloo: Any, new: str, old: str) -> Any:
    """gloo's method under torch's newer name where it has it, else the older one."""
    return getattr(gloo, new, None) or getattr(gloo, old)


def _completed(result: Any) -> Any:
    """A finished ``Work`` whose future holds ``result``."""
    future: torch.futures.Future[Any] = torch.futures.Future()
    future.set_result(result)
    return _C10D._create_work_from_future(future)


class ShmProcessGroup(dist.ProcessGroup):
    """A process group over shared memory for CPU collectives, delegating the rest to gloo."""

    def __init__(
        self, store: Any, rank: int, size: int, timeout: timedelta, spec_known: bool = True
    ) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the stubs list one form
        c10d: Any = dist  # torch's stubs declare neither PrefixStore's export nor gloo's methods
        self.gloo: Any = c10d.ProcessGroupGloo(
            c10d.PrefixStore(f"{BACKEND_NAME}/gloo/", store), rank, size, timeout
        )
        # Every method not overridden below dispatches to the group's backend for the device.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self.gloo)
        # Newer torch asks every group for its default backend (the flight recorder's hook in
        # init_process_group): it is gloo's, which also serves every method not overridden.
        set_default = getattr(self, "_set_default_backend", None)
        if callable(set_default):
            set_default(dist.ProcessGroup.BackendType.GLOO)
        self.shm = ShmGroup()
        self.shm.timeout = timeout.total_seconds()
        if size > 1:
            set_up_segment(self._gather, size, rank, self.shm)
        else:
            self.shm.reason = "a group of one rank needs no shared memory"
        self.shm.ready = True
        self.spec_checked = spec_known  # else read back from torch at the first collective
        adopt(self, self.shm)  # anyaccel.distributed.all_reduce(group=this) shares the segment
        announce_fallback(self.shm, rank, f"{BACKEND_NAME} runs every collective on gloo,")

    # -- set-up and status ------------------------------------------------------------------
    def _gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor) -> None:
        self.gloo.allgather([outputs], [tensor]).wait()

    def getBackendName(self) -> str:
        return BACKEND_NAME

    @property
    def status(self) -> str:
        """``"shared memory"``, or why every collective of this group runs on gloo."""
        return "shared memory" if self.shm.communicator is not None else self.shm.reason

    def shutdown(self) -> None:
        """Unmap the segment and shut the gloo group down (``destroy_process_group`` calls it)."""
        with self.shm.lock:
            if self.shm.communicator is not None:
                self.shm.communicator.close()
                self.shm.communicator = None
                self.shm.reason = "the group was destroyed"
        # torch's own shutdown of the group's backends (gloo's); absent on older torch
        shutdown = getattr(super(), "shutdown", None)
        if shutdown is not None:
            shutdown()

    def __del__(self) -> None:
        communicator = getattr(getattr(self, "shm", None), "communicator", None)
        if communicator is not None:
            communicator.close()

    # -- the native collectives -------------------------------------------------------------
    def _native(self, tensors: Sequence[torch.Tensor]) -> bool:
        if not self.spec_checked:
            self.spec_checked = True
            refuse_a_whole_group_beside_other_backends(self)
        return (
            self.shm.communicator is not None
            and len(tensors) == 1
            and tensors[0].device.type == "cpu"
            and tensors[0].layout == torch.strided
        )

    def _run(self, name: str, call: Callable[[Any], None]) -> None:
        try:
            with self.shm.lock:
                communicator = self.shm.communicator
                if communicator is None:
                    raise CollectiveError(f"{name}: the process group was destroyed")
                call(communicator)
        except (RuntimeError, ValueError) as exc:
            if isinstance(exc, CollectiveError):
                raise
            self.native_failure(name, str(exc))

    def native_failure(self, name: str, error: str) -> None:
        """Raise the :class:`CollectiveError` for collective ``name`` that failed with ``error``.

        Also called by the C++ ``Backend`` (``shm_backend.cpp``) when a collective it runs itself
        fails.
        """
        message = f"{BACKEND_NAME} {name} failed: {error}"
        if f"dtype #{FALLBACK_TAG} " in message:
            message += (
                " (a rank announced that it runs this collective on gloo, because its "
                "tensor has a dtype, op, layout or shape the shared-memory path does not "
                "take, while another rank ran it on shared memory: pass the same kind "
                "of tensor on every rank)"
            )
        raise CollectiveError(message) from None

    @property
    def native_entry_addresses(self) -> dict[str, int]:
        """The kernel's C entries by collective (all_reduce, all_gather, broadcast,
        reduce_scatter), for the C++ ``Backend``'s calls without Python."""
        from anyaccel.distributed.shm.group import load_kernel

        return {
            name: int(address) for name, address in load_kernel().native_entry_addresses().items()
        }

    @property
    def native_dtype_tags(self) -> list[tuple[torch.Tensor, int]]:
        """Each dtype's byte-collective tag (an empty tensor of the dtype, and its tag), so the
        C++ ``Backend`` tags its calls as this group does and ranks on either path agree."""
        return [(torch.empty(0, dtype=dtype), tag) for dtype, tag in _DTYPE_TAGS.items()]

    def _to_gloo(self, name: str, root: int = 0) -> None:
        """Announce to the other ranks that this rank runs collective ``name`` on gloo.

        Every rank that falls back announces it on the shared segment first, so a rank that
        runs the same call natively fails at once (the kernel sees another collective), and
        ranks that fall back to different collectives (or broadcast roots) fail together,
        instead of all of them waiting for the group's timeout.
        """
        communicator = self.shm.communicator
        if communicator is None or communicator.failed():
            return  # no shared path (or a failed one): every rank goes to gloo alike
        mine = torch.tensor([_KINDS[name], root], dtype=torch.int64)
        everyone = torch.empty(self.size(), 2, dtype=torch.int64)
        self._run(
            name,
            lambda c: c.all_gather(
                mine.data_ptr(), [row.data_ptr() for row in everyone], mine.nbytes,
                FALLBACK_TAG, self.shm.timeout, 1,
            ),
        )  # fmt: skip
        calls = [tuple(row) for row in everyone.tolist()]
        if len(set(calls)) > 1:
            names = {kind: key for key, kind in _KINDS.items()}
            seen = ", ".join(
                f"rank {rank}: {names.get(kind, kind)}" + (f" from {at}" if kind == 3 else "")
                for rank, (kind, at) in enumerate(calls)
            )
            raise CollectiveError(
                f"{BACKEND_NAME} {name}: the ranks called different collectives on gloo "
                f"({seen}); every rank must call the same collective in the same order"
            )

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = dist.AllreduceOptions() if opts is None else opts
        op = opts.reduceOp
        premul = op == dist.ReduceOp.PREMUL_SUM
        code = 0 if premul else op_code(op)  # PREMUL_SUM: a premultiplied SUM
        if code is None or not self._native(tensors) or tensors[0].dtype not in DTYPE_CODES:
            self._to_gloo("all_reduce")
            if len(tensors) != 1 or not gloo_differs(tensors[0], op):
                return self.gloo.allreduce(tensors, opts)
            self._all_reduce_on_gloo(tensors[0], opts)
            return _completed(tensors)
        target = tensors[0].detach()
        work = premultiplied(target, op) if premul else None
        if work is None:
            work = target if target.is_contiguous() else target.contiguous()
        self._run(
            "all_reduce",
            lambda c: c.all_reduce(
                work.data_ptr(), work.numel(), DTYPE_CODES[work.dtype], code,
                self.shm.timeout, self.shm.threads,
            ),
        )  # fmt: skip
        if work is not target:
            target.copy_(work)
        return _completed(tensors)

    def _all_reduce_on_gloo(self, tensor: torch.Tensor, opts: Any) -> None:
        """gloo's all_reduce of ``tensor`` under ``opts``, waited for, with every op as on shared
        memory (``reduction.all_reduce_as_nccl``: AVG, PREMUL_SUM, a NaN that wins MIN/MAX)."""

        def reduce(target: torch.Tensor, op: Any) -> None:
            options = dist.AllreduceOptions()
            options.reduceOp = op
            options.timeout = opts.timeout
            self.gloo.allreduce([target], options).wait()

        all_reduce_as_nccl(tensor, opts.reduceOp, self.size(), reduce)

    def _gathered(self, outputs: list[torch.Tensor], tensor: torch.Tensor) -> None:
        """Fill ``outputs`` (contiguous, one per rank, each like ``tensor``) with every rank's."""
        source = tensor.detach().contiguous()
        nbytes = source.numel() * source.element_size()
        addresses = [output.data_ptr() for output in outputs]
        self._run(
            "all_gather",
            lambda c: c.all_gather(
                source.data_ptr(), addresses, nbytes, _DTYPE_TAGS[source.dtype],
                self.shm.timeout, self.shm.threads,
            ),
        )  # fmt: skip

    def allgather(  # type: ignore[override]
        self, outputs: list[list[torch.Tensor]], tensors: list[torch.Tensor], opts: Any = None
    ) -> Any:
        opts = _C10D.AllgatherOptions() if opts is None else opts
        if (
            not self._native(tensors)
            or tensors[0].dtype not in _DTYPE_TAGS
            or len(outputs) != 1
            or len(outputs[0]) != self.size()
            or any(
                o.dtype != tensors[0].dtype
                or o.numel() != tensors[0].numel()
                or o.device.type != "cpu"
                or o.layout != torch.strided
                for o in outputs[0]
            )
        ):
            self._to_gloo("all_gather")
            return self.gloo.allgather(outputs, tensors, opts)
        targets = [o.detach() for o in outputs[0]]
        buffers = [t if t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype) for t in targets]
        self._gathered(buffers, tensors[0])
        for target, buffer in zip(targets, buffers, strict=True):
            if buffer is not target:
                target.copy_(buffer)
        return _completed(outputs)

    def _allgather_base(self, output: torch.Tensor, tensor: torch.Tensor, opts: Any = None) -> Any:
        opts = _C10D.AllgatherOptions() if opts is None else opts
        if (
            not self._native([tensor])
            or tensor.dtype not in _DTYPE_TAGS
            or output.dtype != tensor.dtype
            or output.device.type != "cpu"
            or output.layout != torch.strided
            or output.numel() != tensor.numel() * self.size()
        ):
            self._to_gloo("all_gather")
            return _gloo_call(self.gloo, "all_gather_single", "_allgather_base")(
                output, tensor, opts
            )
        target = output.detach()
        buffer = target if target.is_contiguous() else torch.empty(target.shape, dtype=target.dtype)
        self._gathered(list(buffer.view(-1).chunk(self.size())) if tensor.numel() else
                       [buffer.view(-1)] * self.size(), tensor)  # fmt: skip
        if buffer is not target:
            target.copy_(buffer)
        return _completed([output])

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = dist.BroadcastOptions() if opts is None else opts
        if not self._native(tensors) or tensors[0].dtype not in _DTYPE_TAGS:
            self._to_gloo("broadcast", int(opts.rootRank))
            return self.gloo.broadcast(tensors, opts)
        target = tensors[0].detach()
        work = target if target.is_contiguous() else target.contiguous()
        root = int(opts.rootRank)
        self._run(
            "broadcast",
            lambda c: c.broadcast(
                work.data_ptr(), work.numel() * work.element_size(), root,
                _DTYPE_TAGS[work.dtype], self.shm.timeout, self.shm.threads,
            ),
        )  # fmt: skip
        if work is not target:
            target.copy_(work)
        return _completed(tensors)

    def _scattered(self, output: torch.Tensor, source: torch.Tensor, opts: Any) -> bool:
        """Reduce-scatter ``source`` (``size`` parts) into ``output``; False: not native."""
        premul = opts.reduceOp == dist.ReduceOp.PREMUL_SUM
        code = 0 if premul else op_code(opts.reduceOp)  # PREMUL_SUM: a premultiplied SUM
        if (
            code is None
            or not self._native([source])
            or source.dtype not in DTYPE_CODES
            or output.dtype != source.dtype
            or output.device.type != "cpu"
            or source.numel() != output.numel() * self.size()
        ):
            return False
        source = source.detach().contiguous()
        if premul:
            source = premultiplied(source, opts.reduceOp)  # type: ignore[assignment]  # a copy
        target = output.detach()
        work = target if target.is_contiguous() else torch.empty_like(target).contiguous()
        self._run(
            "reduce_scatter",
            lambda c: c.reduce_scatter(
                source.data_ptr(), work.data_ptr(), work.numel(), DTYPE_CODES[work.dtype],
                code, self.shm.timeout, self.shm.threads,
            ),
        )  # fmt: skip
        if work is not target:
            target.copy_(work)
        return True

    def reduce_scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> Any:
        opts = dist.ReduceScatterOptions() if opts is None else opts
        native = (
            len(outputs) == 1
            and len(inputs) == 1
            and len(inputs[0]) == self.size()
            and all(
                t.dtype == outputs[0].dtype and t.numel() == outputs[0].numel()
                and t.device.type == "cpu" and t.layout == torch.strided
                for t in inputs[0]
            )
        )  # fmt: skip
        source = torch.cat([t.detach().reshape(-1) for t in inputs[0]]) if native else None
        if source is not None and self._scattered(outputs[0], source, opts):
            return _completed(outputs)
        self._to_gloo("reduce_scatter")
        # only parts of the output's size and dtype: uneven parts are gloo's to judge
        if source is not None and self._scattered_on_gloo(outputs[0], source, opts, owned=True):
            return _completed(outputs)
        return self.gloo.reduce_scatter(outputs, inputs, opts)

    def _reduce_scatter_base(
        self, output: torch.Tensor, tensor: torch.Tensor, opts: Any = None
    ) -> Any:
        opts = dist.ReduceScatterOptions() if opts is None else opts
        if self._scattered(output, tensor, opts):
            return _completed([output])
        self._to_gloo("reduce_scatter")
        if self._scattered_on_gloo(output, tensor, opts):
            return _completed([output])
        return _gloo_call(self.gloo, "reduce_scatter_single", "_reduce_scatter_base")(
            output, tensor, opts
        )

    def _scattered_on_gloo(
        self, output: torch.Tensor, source: torch.Tensor, opts: Any, *, owned: bool = False
    ) -> bool:
        """Reduce-scatter through gloo's all_reduce of the whole input; False: leave it to gloo.

        ``owned``: ``source`` is this call's own copy (the list form's concatenation), reduced
        in place; otherwise it is the caller's input, reduced in a copy.

        gloo's own reduce-scatter is missing (the list form) or ignores the op (every op sums)
        on older torch (2.4 at least), so a fallback that is not a sum would come back wrong;
        its all_reduce honours every op gloo has, and ``_all_reduce_on_gloo`` adds the rest
        (AVG, PREMUL_SUM). Shapes that do not split evenly are left to gloo, which refuses them
        as it does for any caller.
        """
        if (
            source.numel() != output.numel() * self.size()
            or source.device.type != "cpu"
            or output.device.type != "cpu"
            or source.dtype != output.dtype
        ):
            return False
        whole = source.reshape(-1) if owned else source.detach().reshape(-1).clone()
        self._all_reduce_on_gloo(whole, opts)
        part = whole[self.rank() * output.numel() : (self.rank() + 1) * output.numel()]
        output.detach().copy_(part.view(output.shape))
        return True

    # torch >= 2.10 calls these names for all_gather_into_tensor and reduce_scatter_tensor
    # (all_gather_single, reduce_scatter_single); older torch calls the underscored ones.
    def all_gather_single(
        self, output: torch.Tensor, tensor: torch.Tensor, opts: Any = None
    ) -> Any:
        """``all_gather_into_tensor`` on torch's newer method name."""
        return self._allgather_base(output, tensor, opts)

    def reduce_scatter_single(
        self, output: torch.Tensor, tensor: torch.Tensor, opts: Any = None
    ) -> Any:
        """``reduce_scatter_tensor`` on torch's newer method name."""
        return self._reduce_scatter_base(output, tensor, opts)

    def barrier(self, opts: Any = None) -> Any:
        opts = dist.BarrierOptions() if opts is None else opts
        if self.shm.communicator is None:
            return self.gloo.barrier(opts)
        self._run("barrier", lambda c: c.barrier(self.shm.timeout))
        return _completed([])


class C10dObject(str, enum.Enum):
    """What :data:`BACKEND_NAME`'s factory gives torch for one group (:func:`c10d_object_for`)."""

    WHOLE_GROUP = "whole group"  # a Python ProcessGroup, which torch takes as the whole group
    CPU_BACKEND = "cpu backend"  # a c10d Backend, which torch registers for CPU tensors only


#: The backend spec of the group anyaccel is asking torch to make now (None: not anyaccel).
_group_spec: ContextVar[str | None] = ContextVar("anyaccel_shm_group_spec", default=None)


@contextlib.contextmanager
def making_group(spec: str) -> Iterator[None]:
    """Within it, a group torch makes with :data:`BACKEND_NAME` is made for backend ``spec``.

    torch passes the factory no device map, so anyaccel's own calls (``init_distributed``)
    say it this way; ``spec`` is what they pass to ``init_process_group`` / ``new_group``.
    """
    token = _group_spec.set(spec)
    try:
        yield
    finally:
        _group_spec.reset(token)


def spec_backends(spec: str) -> dict[str, str]:
    """The backend each device type gets in ``spec`` (``""`` for a plain name), lowercased."""
    entries = [entry.strip() for entry in spec.lower().split(",") if entry.strip()]
    if len(entries) == 1 and ":" not in entries[0]:
        return {"": entries[0]}
    return {
        device.strip(): backend.strip()
        for device, _, backend in (entry.partition(":") for entry in entries)
    }


def c10d_object_for(spec: str | None, default_spec: str | None = None) -> C10dObject:
    """Which c10d object a group whose backend ``spec`` names :data:`BACKEND_NAME` gets.

    The one rule. anyaccel_shm the group's only backend (``"anyaccel_shm"``,
    ``"cpu:anyaccel_shm"``): the whole group (torch's group over anyaccel's c10d ``Backend``
    where it builds and the group has shared memory, else the Python ``ProcessGroup``).
    Another device given another backend (``"cpu:anyaccel_shm,cuda:nccl"``): a c10d
    ``Backend`` for CPU tensors that torch registers beside the others (compiled; refused,
    naming the fix, where it cannot be built). ``spec`` None (torch called directly, which
    tells the factory no spec): judged by ``default_spec``, the default group's, where that
    names anyaccel_shm (a ``new_group()`` naming no backend inherits it, as DDP, FSDP and
    DeepSpeed make their subgroups); otherwise the whole group, which reads its spec back
    from torch at its first collective and refuses one that names other backends.
    """
    inherited = default_spec is not None and BACKEND_NAME in spec_backends(default_spec).values()
    known = spec if spec is not None else (default_spec if inherited else None)
    if known is None:
        return C10dObject.WHOLE_GROUP
    others = {backend for backend in spec_backends(known).values() if backend != BACKEND_NAME}
    return C10dObject.CPU_BACKEND if others else C10dObject.WHOLE_GROUP


def _default_spec() -> str | None:
    """The default group's backend spec (torch's public ``get_backend_config``), None without."""
    if not dist.is_initialized():
        return None
    try:
        return str(dist.get_backend_config())
    except (RuntimeError, ValueError, KeyError, AttributeError):
        return None


def _beside_others_advice() -> str:
    return (
        f"pass the spec to anyaccel.distributed.init_distributed() (for a subgroup: call "
        f"new_group inside anyaccel.distributed.shm.backend.making_group(spec)), which makes "
        f"{BACKEND_NAME} a c10d Backend for CPU tensors beside the others, or use "
        f"'cpu:gloo,cuda:nccl' with dist.new_group(backend='{BACKEND_NAME}') for the CPU "
        "collectives"
    )


def refuse_a_whole_group_beside_other_backends(group: Any) -> None:
    """Raise if torch took ``group`` as the whole group of a spec that names other backends.

    That happens only when torch was called directly with such a spec (the factory could not
    know it); torch's public ``get_backend_config`` says the spec once the group exists.
    """
    try:
        spec = str(dist.get_backend_config(group))
    except (RuntimeError, ValueError, KeyError, AttributeError, TypeError):
        return  # a group torch does not know (made by hand): nothing to compare
    if c10d_object_for(spec) is C10dObject.CPU_BACKEND:
        raise DistributedSetupError(
            f"this group was made with backend {spec!r} by torch.distributed directly, so "
            f"{BACKEND_NAME} could not tell it shares the group with other backends, and "
            f"torch took it as the whole group (the others would never run): "
            f"{_beside_others_advice()}"
        )


#: Whether this process has said that the C++ form could not be built (said once).
_warned_python_form = False


def _device_backend_module(required: bool) -> Any:
    """The compiled ``ShmBackendBuilder`` module; None where it cannot be built and need not be.

    ``required``: the spec names other devices' backends, which only the C++ form serves.
    """
    global _warned_python_form
    from anyaccel.ops.cpu.shm_backend import ShmBackendBuilder
    from anyaccel.ops.errors import OpError

    try:
        return ShmBackendBuilder().load()
    except OpError as exc:
        if required:
            raise DistributedSetupError(
                f"{BACKEND_NAME} beside another device's backend (such as "
                f"'cpu:{BACKEND_NAME},cuda:nccl') needs anyaccel's c10d backend class, which "
                f"could not be built here: {exc}. Install a C++ compiler and ninja, or use "
                f"'cpu:gloo,cuda:nccl' with dist.new_group(backend='{BACKEND_NAME}') for the "
                "CPU collectives"
            ) from exc
        log = logger.info if _warned_python_form else logger.warning
        _warned_python_form = True
        log(
            "%s: anyaccel's c10d backend class could not be built here (%s); the group runs as "
            "a Python ProcessGroup instead (the same results, more time per all_reduce). "
            "Install a C++ compiler and ninja for the faster form",
            BACKEND_NAME, exc,
        )  # fmt: skip
        return None


def _shm_not_turned_off() -> bool:
    """Whether :data:`SHM_ENV` leaves the shared-memory path on (a bad value: the group's
    set-up says so on every rank at once, so it counts as on here)."""
    try:
        return read_on_off(SHM_ENV) is not False
    except InvalidSettingError:
        return True


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """The factory ``torch.distributed`` calls on every rank of a new group.

    Returns what :func:`c10d_object_for` requires for the spec anyaccel named
    (:func:`making_group`), in its faster form where it can: a Python :class:`ShmProcessGroup`
    behind a c10d ``Backend`` (``ShmBackend``, ``shm_backend.cpp``), which torch registers for
    the CPU, alone or beside other devices' backends. The ``Backend`` runs all_reduce itself,
    without Python, and forwards the rest to the Python group. A group of anyaccel_shm alone is
    the Python group itself where it has no shared segment (one rank, several nodes, turned
    off: every call goes to gloo) or where the class cannot be built (slower per call, the same
    results).
    """
    pause_for_backend(BACKEND_NAME)  # torch's gloo exit abort, whoever made the group
    spec = _group_spec.get()
    default_spec = _default_spec() if spec is None else None
    required = c10d_object_for(spec, default_spec) is C10dObject.CPU_BACKEND
    # Loaded before the group's set-up loads the kernel's module (a cached build of this one
    # failed to import after that, and its rebuild outlasted the set-up's timeout elsewhere).
    wanted = required or (size > 1 and _shm_not_turned_off())
    module = _device_backend_module(required) if wanted else None
    # a Python whole group torch made without a spec checks the spec at its first collective
    unchecked = spec is None and module is None
    group = ShmProcessGroup(store, rank, size, timeout, spec_known=not unchecked)
    if module is None or (group.shm.communicator is None and not required):
        return group  # no segment: every call goes to gloo, nothing for the class to run
    return module.ShmBackend(rank, size, group, group.gloo)


def shm_process_group(group: Any | None = None) -> ShmProcessGroup | None:
    """The :class:`ShmProcessGroup` that runs ``group``'s CPU collectives (None: not ours).

    ``group`` (default: the default group) is the group itself where it runs as a Python
    group, else torch's group whose CPU backend is anyaccel's c10d ``Backend``.
    """
    group = dist.group.WORLD if group is None else group
    if group is None or isinstance(group, ShmProcessGroup):
        return group
    try:
        backend = group._get_backend(torch.device("cpu"))
    except (AttributeError, RuntimeError):  # not a group, or no CPU backend
        return None
    inner = getattr(backend, "group", None)
    return inner if isinstance(inner, ShmProcessGroup) else None


def backend_registered() -> bool:
    """Whether ``torch.distributed`` knows :data:`BACKEND_NAME` in this process."""
    return BACKEND_NAME in dist.Backend.backend_list  # register_backend appends the name


def register_backend() -> None:
    """Register :data:`BACKEND_NAME` with ``torch.distributed`` for CPU tensors (idempotent).

    Raises ``DistributedSetupError`` on a torch whose ``Backend.register_backend`` takes no
    ``devices`` (before 2.1): upgrade torch, or use backend="gloo".
    """
    with _registering:
        if not backend_registered():
            _register()


#: Two threads asking at once register once (torch refuses a second registration).
_registering = ForkSafeLock()


def _register() -> None:
    register = getattr(dist.Backend, "register_backend", None)
    if register is None or "devices" not in inspect.signature(register).parameters:
        raise DistributedSetupError(
            f"torch {torch.__version__} cannot register the {BACKEND_NAME!r} backend "
            "(Backend.register_backend(..., devices=) is missing): upgrade to torch >= 2.4, "
            "or pass backend='gloo'"
        )
    register(BACKEND_NAME, _create, extended_api=False, devices=["cpu"])


def shm_backend_wanted(argument: bool | None = None) -> tuple[bool, str]:
    """Whether ``init_distributed`` should use :data:`BACKEND_NAME`, and why (for the trace).

    On by default (CPU ranks on one node; the caller checks the node): ``argument``
    (``init_distributed(shm_backend=...)``) decides when given; otherwise :data:`BACKEND_ENV`
    off (0/false/no/off, any case) keeps gloo, and on (1/true/yes/on) or unset picks the
    backend. Raises :class:`~anyaccel.errors.InvalidSettingError` naming the value when
    :data:`BACKEND_ENV` is set to anything else (read even when ``argument`` decides).
    """
    setting = read_on_off(BACKEND_ENV)
    if argument is not None:
        return argument, f"shm_backend={argument}"
    value = os.environ.get(BACKEND_ENV, "").strip()
    if setting is False:
        return False, f"{BACKEND_ENV}={value}"
    if not hasattr(os, "memfd_create"):
        return False, "this platform has no memfd_create (Linux only)"
    if setting is None:
        return True, f"the default for CPU ranks on one node; {BACKEND_ENV}=0 keeps gloo"
    return True, f"{BACKEND_ENV}={value}"


def _spans_nodes() -> bool:
    """Whether the launcher's variables say this job's ranks are on more than one node."""
    try:
        info = launch_info()
    except DistributedSetupError:  # not launched, or a launcher init_distributed would refuse
        return False
    return info.local_world_size < info.world_size


def cpu_backend_choice(
    argument: bool | None = None, spans_nodes: bool | None = None
) -> tuple[str, str]:
    """The backend for CPU collectives (:data:`BACKEND_NAME`, registered, or ``"gloo"``) and why.

    The one decision, for ``CpuAccelerator.communication_backend_name()`` and
    ``init_distributed()``: :func:`shm_backend_wanted` (``argument``, :data:`BACKEND_ENV`, the
    platform), then gloo for ranks on several nodes (``spans_nodes``; None reads the
    launcher's variables), then gloo where this torch cannot register the backend.
    Raises :class:`~anyaccel.errors.InvalidSettingError` naming a bad :data:`BACKEND_ENV`.
    """
    wanted, why = shm_backend_wanted(argument)
    if wanted and (_spans_nodes() if spans_nodes is None else spans_nodes):
        wanted, why = False, "the ranks span more than one node"
    if wanted:
        try:
            register_backend()
        except DistributedSetupError as exc:
            wanted, why = False, str(exc)
    return (BACKEND_NAME if wanted else "gloo"), why


def cpu_backend_name() -> str:
    """What the CPU accelerator names for ``init_process_group``: registered before it answers.

    Resolved by ``anyaccel.backends.cpu`` from a ``"module:attr"`` string (a backend never
    imports ``anyaccel.distributed``); cheap after the first call, safe in forked and spawned
    processes (each registers in its own interpreter, once).
    """
    return cpu_backend_choice()[0]
