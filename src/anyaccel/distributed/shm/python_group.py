"""``ShmProcessGroup``: the ``anyaccel_shm`` group, shared memory on one node, gloo for the rest.

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
decided without them (``c10d_object``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed.errors import CollectiveError
from anyaccel.distributed.shm.c10d_object import refuse_a_whole_group_beside_other_backends
from anyaccel.distributed.shm.codes import KernelCodes, kernel_codes
from anyaccel.distributed.shm.group import (
    BACKEND_NAME,
    ShmGroup,
    adopt,
    announce_fallback,
    load_kernel,
    set_up_segment,
    wait_released,
)
from anyaccel.distributed.shm.reduction import (
    all_reduce_as_nccl,
    gloo_differs,
    premultiplied,
)

__all__ = ["FALLBACK_TAG", "NATIVE", "ShmProcessGroup"]

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
        self,
        store: Any,
        rank: int,
        size: int,
        timeout: timedelta,
        spec_known: bool = True,
        label: str = BACKEND_NAME,
    ) -> None:
        """``label`` names the group in its errors: the backend the user chose, where this
        group runs another backend's collectives (the emulated device's ``hccl``)."""
        super().__init__(rank, size)  # type: ignore[call-arg]  # the stubs list one form
        self.label = label
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
        announce_fallback(self.shm, rank, f"{label} runs every collective on gloo,")

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
    def _codes(self, tensors: Sequence[torch.Tensor]) -> KernelCodes | None:
        """The kernel's codes where ``tensors`` may go to shared memory (:meth:`_native`), else
        None (then the kernel may not even be loaded)."""
        return kernel_codes() if self._native(tensors) else None

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

        Also called by the C++ ``Backend`` (``shm_c10d_backend.cpp``) when a collective it runs
        itself fails.
        """
        message = f"{self.label} {name} failed: {error}"
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
        codes = kernel_codes()  # the kernel's collective codes: its own rounds tell them apart
        broadcast = codes.collectives["broadcast"]
        mine = torch.tensor([codes.collectives[name], root], dtype=torch.int64)
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
            seen = ", ".join(
                f"rank {rank}: {codes.collective_name(kind)}"
                + (f" from {at}" if kind == broadcast else "")
                for rank, (kind, at) in enumerate(calls)
            )
            raise CollectiveError(
                f"{self.label} {name}: the ranks called different collectives on gloo "
                f"({seen}); every rank must call the same collective in the same order"
            )

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = dist.AllreduceOptions() if opts is None else opts
        op = opts.reduceOp
        premul = op == dist.ReduceOp.PREMUL_SUM
        codes = self._codes(tensors)
        # PREMUL_SUM: a premultiplied SUM
        code = None if codes is None else codes.op_code(dist.ReduceOp.SUM if premul else op)
        dtype = None if codes is None else codes.dtypes.get(tensors[0].dtype)
        if code is None or dtype is None:
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
                work.data_ptr(), work.numel(), dtype, code,
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
            wait_released(self.gloo.allreduce([target], options), [target])

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
        codes = self._codes([source])
        # PREMUL_SUM: a premultiplied SUM
        code = (
            None if codes is None else codes.op_code(dist.ReduceOp.SUM if premul else opts.reduceOp)
        )
        dtype = None if codes is None else codes.dtypes.get(source.dtype)
        if (
            code is None
            or dtype is None
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
                source.data_ptr(), work.data_ptr(), work.numel(), dtype, code,
                self.shm.timeout, self.shm.threads,
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
