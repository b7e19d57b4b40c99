"""install() on a host with devices accelerate and transformers know: simulated MPS, NPU and CUDA.

Run in a fresh process (both frameworks cache their availability checks). Prints one JSON
line: the warning when transformers' own chain would still pick another device, a two-process
job on a device accelerate picks by itself, and one on a device its chain passes over.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from anyaccel.detection import detect_accelerator
from anyaccel.integrations import accelerate as integration
from anyaccel.testing.simulated import simulate_cuda, simulate_mps, simulate_npu


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
    with simulate_mps(), simulate_npu(device_count=2), simulate_cuda(device_count=2):
        # one process on the CPU of a Mac: transformers' own chain picks mps first
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result["cpu_on_a_mac"] = _installed(_accelerator("cpu"))
        result["warnings"] = [
            str(w.message) for w in caught if w.category is integration.TransformersDeviceWarning
        ]

        os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="2")
        result["npu_two_processes"] = _installed(_accelerator("npu"))
        try:
            integration.install(_accelerator("cuda"))  # accelerate's chain reaches npu first
        except integration.NoDistributedTypeError as error:
            result["cuda_two_processes"] = {
                "error": str(error),
                "installed": integration.installed() is not None,
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
