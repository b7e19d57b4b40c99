"""A child forked after a parallel optimizer step can still step (serially) instead of hanging."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

FORK_THEN_STEP = """
import json, os, torch
from anyaccel.ops.adam import CPUAdam

torch.manual_seed(0)
torch.set_num_threads(2)
param = torch.nn.Parameter(torch.randn(1_000_000))  # large enough for a parallel region
param.grad = torch.randn_like(param)
optimizer = CPUAdam([param])
optimizer.step()  # the parent runs the kernel with two OpenMP threads
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    optimizer.step()
    torch.set_num_threads(1)  # torch's own parallel ops would hang here, as DataLoader knows
    with os.fdopen(write, "w") as out:
        out.write(json.dumps({"sum": float(param.detach().double().sum())}))
    os._exit(0)
os.close(write)
child = json.loads(os.fdopen(read).read())
_, status = os.waitpid(pid, 0)
optimizer.step()  # the parent steps on in parallel, and must agree with the child
print(json.dumps({"status": status, "child": child["sum"],
                  "parent": float(param.detach().double().sum())}))
"""


def test_child_forked_after_a_parallel_step_steps_without_hanging(
    run_python: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    try:
        result = run_python(FORK_THEN_STEP)
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child hung in the optimizer's OpenMP region")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["status"] == 0
    assert outcome["child"] == pytest.approx(outcome["parent"], rel=1e-12, abs=1e-9)
