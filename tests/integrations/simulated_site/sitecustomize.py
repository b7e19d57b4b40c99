"""Simulated devices from interpreter start, in a test child and every process it starts.

Put this folder on ``PYTHONPATH`` with ``ANYACCEL_TEST_SIMULATE`` naming a host: ``supa``
(a CPU-only torch with two Biren ``supa`` devices, PrivateUse1 renamed as torch_supa does) or
``mps`` (an MPS Mac), or ``cuda-xpu`` (two CUDA GPUs and two Intel XPUs). The children that
``anyaccel.integrations.accelerate`` starts to ask accelerate and transformers inherit both
variables, so they see the same host as the test. The simulations stay entered until exit.
"""

from __future__ import annotations

import contextlib
import os

_host = os.environ.get("ANYACCEL_TEST_SIMULATE")
if _host:
    import torch

    from anyaccel.testing.simulated import (
        simulate_cpu_only_torch,
        simulate_cuda,
        simulate_mps,
        simulate_supa,
        simulate_xpu,
    )

    _entered = contextlib.ExitStack()
    if _host == "supa":
        torch.utils.rename_privateuse1_backend("supa")
        _entered.enter_context(simulate_cpu_only_torch())
        _entered.enter_context(simulate_supa(device_count=2, cuda_compat=False))
    elif _host == "mps":
        _entered.enter_context(simulate_cpu_only_torch())
        _entered.enter_context(simulate_mps())
    elif _host == "cuda-xpu":
        _entered.enter_context(simulate_cuda(device_count=2))
        _entered.enter_context(simulate_xpu(device_count=2))
    else:
        raise SystemExit(f"ANYACCEL_TEST_SIMULATE={_host!r}: expected supa, mps or cuda-xpu")
