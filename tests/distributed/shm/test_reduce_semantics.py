"""MIN/MAX let a NaN from any rank win, AVG is the exact mean: on every path, in real jobs.

Each rank builds every rank's inputs (they are deterministic), so each checks its results
against the rank-order fold of ``torch.minimum``/``torch.maximum`` and the float64 mean on its
own: shared memory (all_reduce, reduce_scatter in both forms), the backend's gloo fallback
(float64, and a group whose shared memory is off), and ``anyaccel.distributed.all_reduce`` on a
plain gloo group.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from ..ranks import finish, multiprocess, start_ranks

SEMANTICS = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import all_reduce, init_distributed, shm_process_group
    info = init_distributed(timeout=timedelta(seconds=90), shm_backend=True)
    rank, size = info.rank, info.world_size
    R = dist.ReduceOp
    world = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    os.environ["ANYACCEL_SHM_ALLREDUCE"] = "off"  # this group's shared memory is off: gloo
    off = dist.new_group(backend="anyaccel_shm")
    del os.environ["ANYACCEL_SHM_ALLREDUCE"]
    failures, checks = [], 0
    nan, inf = float("nan"), float("inf")

    def special(r, dtype):
        # column j < size: NaN on rank j only; NaN everywhere; signed zeros; infinities
        row = [nan if j == r else float(j + r + 1) for j in range(size)]
        row += [nan, -0.0 if r % 2 else 0.0, 0.0 if r % 2 else -0.0, inf, -inf]
        row += [inf if r == size - 1 else 1.0, -inf if r == 0 else -1.0]
        return torch.tensor(row, dtype=dtype)

    def long_special(r, dtype):
        # three million elements (several shared-memory chunks), NaNs far apart on each rank
        t = torch.arange(3_000_000, dtype=torch.float32).to(dtype) * (r + 1)
        t[r * 700_001 + 11] = nan
        t[-1 - r] = nan
        return t

    def fold(inputs, op):
        result = inputs[0]
        for t in inputs[1:]:
            result = op(result, t)
        return result

    def same(name, ours, want, zeros=True):
        global checks
        checks += 1
        ok = (ours.dtype == want.dtype and torch.equal(ours.isnan(), want.isnan())
              and torch.equal(torch.nan_to_num(ours), torch.nan_to_num(want))
              and (not zeros or torch.equal(torch.signbit(ours) & ~want.isnan(),
                                            torch.signbit(want) & ~want.isnan())))
        if not ok:
            bad = ((ours != want) & ~(ours.isnan() & want.isnan())) | (ours.isnan() != want.isnan())
            if zeros:
                bad |= (torch.signbit(ours) != torch.signbit(want)) & ~want.isnan()
            where = bad.nonzero().flatten()[:4].tolist()
            failures.append(f"{name}: at {where}: {ours[where].tolist()} != {want[where].tolist()}")

    OPS = {"MIN": (R.MIN, torch.minimum), "MAX": (R.MAX, torch.maximum)}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        native = dtype != torch.float64  # float64 takes the backend's gloo fallback
        for make in (special, long_special):
            inputs = [make(r, dtype) for r in range(size)]
            if make is long_special and not native:
                continue
            for name, (op, torch_op) in OPS.items():
                want = fold(inputs, torch_op)
                tag = f"{dtype} {make.__name__} {name}"
                t = inputs[rank].clone(); dist.all_reduce(t, op=op)
                same(f"all_reduce {tag}", t, want, zeros=native)
                t = inputs[rank].clone(); dist.all_reduce(t, op=op, group=off)
                same(f"all_reduce shm off {tag}", t, want, zeros=False)
                t = inputs[rank].clone(); all_reduce(t, op=op, group=gloo)
                same(f"anyaccel all_reduce on gloo {tag}", t, want, zeros=False)
                t = inputs[rank].clone(); all_reduce(t, op=op)
                same(f"anyaccel all_reduce {tag}", t, want, zeros=native)
                full = torch.cat([inputs[rank]] * size)
                out = torch.empty_like(inputs[rank])
                dist.reduce_scatter_tensor(out, full, op=op)
                same(f"reduce_scatter_tensor {tag}", out, want, zeros=native)
                out = torch.empty_like(inputs[rank])
                dist.reduce_scatter_tensor(out, full, op=op, group=off)
                same(f"reduce_scatter_tensor shm off {tag}", out, want, zeros=False)
                out = torch.empty_like(inputs[rank])
                dist.reduce_scatter(out, [inputs[rank].clone() for _ in range(size)], op=op)
                same(f"reduce_scatter {tag}", out, want, zeros=native)

    # AVG: the exact mean, even where the sum overflows the dtype (or fp32)
    big = {torch.float16: [40000.0, 60000.0, -50000.0], torch.bfloat16: [3e38, -3e38, 2e38],
           torch.float32: [3e38, -3e38, 2e38]}
    for dtype, values in big.items():
        gen = torch.Generator().manual_seed(5)
        inputs = [torch.cat([torch.tensor(values), torch.randn(70_000, generator=gen) * 100])
                  .to(dtype) for _ in range(size)]
        want = (torch.stack(inputs).double().sum(0) / size).to(dtype)
        assert torch.isfinite(want).all()
        t = inputs[rank].clone(); dist.all_reduce(t, op=R.AVG)
        same(f"all_reduce AVG {dtype}", t, want)
        t = inputs[rank].clone(); all_reduce(t, op=R.AVG)
        same(f"anyaccel all_reduce AVG {dtype}", t, want)
        out = torch.empty_like(inputs[rank])
        dist.reduce_scatter_tensor(out, torch.cat([inputs[rank]] * size), op=R.AVG)
        same(f"reduce_scatter_tensor AVG {dtype}", out, want)
        out = torch.empty_like(inputs[rank])
        dist.reduce_scatter(out, [inputs[rank].clone() for _ in range(size)], op=R.AVG)
        same(f"reduce_scatter AVG {dtype}", out, want)
    status = [shm_process_group(world).status, shm_process_group(off).status]
    dist.destroy_process_group()
    print(json.dumps({"failures": failures, "checks": checks, "status": status}), flush=True)
    os._exit(0)  # every group is destroyed; skip torch's gloo teardown at exit
    """
)


@multiprocess
@pytest.mark.parametrize("world_size", [2, 4])
def test_nan_wins_min_max_and_avg_is_the_exact_mean_on_every_path(world_size: int) -> None:
    outputs = finish(start_ranks(SEMANTICS, world_size), timeout=400)
    for rank, out in enumerate(outputs):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["failures"] == [], (rank, result["failures"][:8])
        assert result["checks"] == 2 * (3 * 2 * 7 + 7) + 3 * 4
        assert result["status"] == ["shared memory", "disabled by ANYACCEL_SHM_ALLREDUCE"]
