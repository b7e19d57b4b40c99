"""install() on a host with devices accelerate and transformers know; prints one JSON line.

Run in a fresh process with ``tests/integrations/simulated_site`` on ``PYTHONPATH`` and
``ANYACCEL_TEST_SIMULATE`` naming the host (``mps`` or ``cuda-xpu``), so that the children
install() starts to ask accelerate and transformers see the same simulated devices.
``mps``: the warning when transformers would still pick another device than anyaccel's CPU.
``cuda-xpu``: a two-process job on a device accelerate picks by itself (cuda), and one on a
device it passes over (xpu).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from anyaccel.detection import detect_accelerator
from anyaccel.integrations import accelerate as integration


def _accelerator(name: str) -> Any:
    os.environ["DS_ACCELERATOR"] = name
    accelerator, _ = detect_accelerator()
    return accelerator


def _installed(accelerator: Any) -> dict[str, Any]:
    installation = integration.install(accelerator)
    integration.uninstall()
    return {
        "device": installation.device,
        "distributed_type": installation.distributed_type,
        "backend": installation.backend,
        "environment": installation.environment,
    }


def main() -> None:
    result: dict[str, Any] = {}
    if os.environ["ANYACCEL_TEST_SIMULATE"] == "mps":
        # one process on the CPU of a Mac: transformers' own choice is mps
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result["cpu_on_a_mac"] = _installed(_accelerator("cpu"))
        result["warnings"] = [
            str(w.message) for w in caught if w.category is integration.TransformersDeviceWarning
        ]
    else:
        os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
        result["cuda_two_processes"] = _installed(_accelerator("cuda"))
        try:
            integration.install(_accelerator("xpu"))  # accelerate picks cuda first
        except integration.NoDistributedTypeError as error:
            result["xpu_two_processes"] = {
                "error": str(error),
                "installed": integration.installed() is not None,
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
