"""Every reduce op on every dtype gloo or NCCL takes, on anyaccel_shm, with NCCL's meaning.

Two real ranks; each builds both ranks' inputs (small whole numbers, so every floating sum,
product and mean is exact on any path, plus integers at their dtype's limits, so integer sums
wrap) and checks all_reduce, reduce_scatter_tensor and the list reduce_scatter, on shared
memory and on a group whose shared memory is off (gloo), against a reference written out in
Python: wrapped integer arithmetic, NCCL's integer AVG (the wrapped sum divided by the world
size, truncated toward zero: FuncSumPostDiv in NVIDIA/nccl src/device/reduce_kernel.h), the
exact mean for floating AVG, and PREMUL_SUM as each input times the factor, summed. bool
tensors, which NCCL takes as bytes, are checked against gloo's own result.
"""

from __future__ import annotations

import json
import textwrap

from ..ranks import finish, multiprocess, start_ranks

EVERY_OP = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import all_reduce, init_distributed, shm_process_group
    info = init_distributed(timeout=timedelta(seconds=90), shm_backend=True)
    rank, size = info.rank, info.world_size
    R = dist.ReduceOp
    gloo = dist.new_group(backend="gloo")
    os.environ["ANYACCEL_SHM_ALLREDUCE"] = "0"
    off = dist.new_group(backend="anyaccel_shm")
    del os.environ["ANYACCEL_SHM_ALLREDUCE"]
    OPS = {"SUM": R.SUM, "PRODUCT": R.PRODUCT, "MIN": R.MIN, "MAX": R.MAX, "AVG": R.AVG,
           "PREMUL": dist._make_nccl_premul_sum(0.5),
           "PREMUL_TENSOR": dist._make_nccl_premul_sum(torch.tensor([2.0]))}
    FACTORS = {"PREMUL": 0.5, "PREMUL_TENSOR": 2.0}
    FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    INTS = [torch.uint8, torch.int8, torch.int32, torch.int64]
    failures, checks, refused = [], 0, {}
    N = 64

    def inputs(dtype):
        gen = torch.Generator().manual_seed(7)
        rows = []
        for r in range(size):
            if dtype == torch.bool:
                rows.append(torch.randint(0, 2, (N,), generator=gen).bool())
            elif dtype.is_complex:
                rows.append(torch.complex(torch.randint(-8, 9, (N,), generator=gen).float(),
                                          torch.randint(-8, 9, (N,), generator=gen).float()))
            elif dtype == torch.uint8:
                row = torch.randint(0, 17, (N,), generator=gen).to(dtype)
                row[0] = 255 - r  # wraps in SUM
                rows.append(row)
            else:
                row = torch.randint(-8, 9, (N,), generator=gen).to(dtype)
                if not dtype.is_floating_point:
                    info_ = torch.iinfo(dtype)
                    row[0], row[1] = info_.max - r, info_.min + r  # wrap in SUM and PRODUCT
                rows.append(row)
        return rows

    def wrap(value, dtype):
        bits = torch.iinfo(dtype).bits
        if dtype == torch.uint8:
            return value % (1 << bits)
        return (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))

    def reference(rows, name, dtype):
        values = [row.tolist() for row in rows]
        if dtype == torch.bool:  # any rank for SUM and MAX, every rank for PRODUCT and MIN
            fold = {"SUM": any, "MAX": any, "PRODUCT": all, "MIN": all}[name]
            return torch.tensor([fold(column) for column in zip(*values)], dtype=dtype)
        if dtype.is_floating_point or dtype.is_complex:
            out = []
            for column in zip(*values):
                f = FACTORS.get(name, 1.0)
                total = sum(v * f for v in column)
                product = 1
                for v in column:
                    product *= v
                out.append({"SUM": total, "PREMUL": total, "PREMUL_TENSOR": total,
                            "PRODUCT": product, "MIN": min(column) if not dtype.is_complex
                            else 0, "MAX": max(column) if not dtype.is_complex else 0,
                            "AVG": total / size}[name])
            return torch.tensor(out, dtype=dtype)
        out = []
        for column in zip(*values):
            total = wrap(sum(column), dtype)
            product = 1
            for v in column:
                product = wrap(product * v, dtype)
            magnitude = abs(total) // size  # NCCL: |sum| / n, the sign kept
            out.append({"SUM": total, "PRODUCT": product, "MIN": min(column),
                        "MAX": max(column), "AVG": magnitude if total >= 0 else -magnitude}[name])
        return torch.tensor(out, dtype=dtype)

    def run(kind, group, tensor, op):
        if kind == "anyaccel all_reduce":  # anyaccel.distributed.all_reduce's own fallback
            out = tensor.clone(); all_reduce(out, op=op, group=group); return out
        if kind == "all_reduce":
            out = tensor.clone(); dist.all_reduce(out, op=op, group=group); return out
        if kind == "reduce_scatter_tensor":
            out = torch.empty_like(tensor)
            dist.reduce_scatter_tensor(out, torch.cat([tensor] * size), op=op, group=group)
            return out
        out = torch.empty_like(tensor)
        dist.reduce_scatter(out, [tensor.clone() for _ in range(size)], op=op, group=group)
        return out

    for dtype in FLOATS + INTS + [torch.bool, torch.complex64]:
        rows = inputs(dtype)
        for name, op in OPS.items():
            if dtype.is_complex and name in ("PRODUCT", "MIN", "MAX"):
                continue  # torch.distributed itself refuses these on complex tensors
            for kind in ("all_reduce", "reduce_scatter_tensor", "reduce_scatter",
                         "anyaccel all_reduce"):
                if dtype.is_complex and kind == "reduce_scatter":
                    continue  # torch's list form takes no complex tensors on any backend
                paths = [("shm", None), ("gloo", off)]
                if kind == "anyaccel all_reduce":
                    paths = [("plain gloo group", gloo)]
                for path, group in paths:
                    tag = f"{kind} {path} {dtype} {name}"
                    checks += 1
                    try:
                        ours = run(kind, group, rows[rank], op)
                    except (TypeError, ValueError, RuntimeError) as exc:
                        refused[tag] = str(exc).strip().splitlines()[-1][:200]
                        continue
                    want = reference(rows, name, dtype)
                    if ours.dtype != want.dtype or not torch.equal(ours, want):
                        failures.append(f"{tag}: {ours[:4].tolist()} != {want[:4].tolist()}")
    status = [shm_process_group().status, shm_process_group(off).status]
    dist.destroy_process_group()
    print(json.dumps({"failures": failures, "checks": checks, "refused": refused,
                      "status": status}), flush=True)
    os._exit(0)
    """
)


@multiprocess
def test_every_op_on_every_dtype_has_nccls_meaning_on_shared_memory_and_on_gloo() -> None:
    outputs = finish(start_ranks(EVERY_OP, 2), timeout=400)
    for rank, out in enumerate(outputs):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["status"] == ["shared memory", "disabled by ANYACCEL_SHM_ALLREDUCE"]
        assert result["failures"] == [], (rank, result["failures"][:10])
        refused = result["refused"]
        # refused only where torch's NCCL refuses too: AVG of bool, PREMUL_SUM of integers
        assert {tag.rsplit(" ", 1)[-1] for tag in refused} <= {"AVG", "PREMUL", "PREMUL_TENSOR"}
        for tag, message in refused.items():
            if tag.endswith("AVG"):
                assert "torch.bool" in tag and "AVG of a bool tensor" in message, (tag, message)
            else:
                assert "PREMUL_SUM takes float16, bfloat16, float32 or float64" in message, (
                    tag,
                    message,
                )
        # 4 floats x 7 ops, 4 integers and bool x 7 ops: 3 forms on 2 paths and
        # anyaccel.distributed.all_reduce on a plain gloo group; complex x 4 ops: 2 forms
        assert result["checks"] == (4 * 7 + 5 * 7) * 7 + 4 * 5
        assert len(refused) == (1 + 4 * 2 + 2) * 7  # bool AVG; PREMUL x2 of ints and bool
