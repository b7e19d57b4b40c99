"""accelerate and transformers on a device neither knows: a simulated Biren ``supa`` (PrivateUse1).

Run in a fresh process with ``tests/integrations/simulated_site`` on ``PYTHONPATH`` and
``ANYACCEL_TEST_SIMULATE=supa``: the simulated device (a CPU-only torch with two Biren GPUs)
is there from interpreter start, in this process and in the children ``install()`` and
``explain()`` start to ask accelerate and transformers. Prints one JSON line:
what ``TrainingArguments().device`` is before and after ``install()``, the refusals (state
already built on another device, a multi-process job), and what each refusal left behind.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

warnings.simplefilter("ignore")
os.environ["DS_ACCELERATOR"] = "supa"

from accelerate.state import AcceleratorState, PartialState  # noqa: E402
from transformers import TrainingArguments  # noqa: E402

from anyaccel.integrations import accelerate as integration  # noqa: E402

ORIGINAL_INIT = PartialState.__init__


def _arguments() -> TrainingArguments:
    return TrainingArguments(output_dir="unused", report_to=[], save_strategy="no")


def _untouched() -> dict[str, Any]:
    """What a refused install() must have left as it was."""
    return {
        "installed": integration.installed() is not None,
        "torch_device_env": os.environ.get("ACCELERATE_TORCH_DEVICE"),
        "use_cpu_env": os.environ.get("ACCELERATE_USE_CPU"),
        "partial_state_patched": PartialState.__init__ is not ORIGINAL_INIT,
    }


def _refusal(error: Exception) -> dict[str, Any]:
    return {"error": type(error).__name__, "message": str(error), **_untouched()}


def main() -> None:
    result: dict[str, Any] = {}
    # a CPU-only torch (whatever build runs this) with two Biren GPUs, from sitecustomize
    result["stock_training_arguments_device"] = str(_arguments().device)

    # accelerate's state built before install(), on the CPU
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState()
    try:
        integration.install()
    except integration.AccelerateStateConflictError as error:
        result["after_state"] = _refusal(error)
    AcceleratorState._reset_state(reset_partial_state=True)

    # a multi-process job: accelerate has no distributed type for supa
    os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    try:
        integration.install()
    except integration.NoDistributedTypeError as error:
        result["multi_process"] = _refusal(error)
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        del os.environ[name]

    explanation = integration.explain()
    installation = integration.install()
    result["installation"] = {
        "device": installation.device,
        "distributed_type": installation.distributed_type,
        "environment": installation.environment,
    }
    result["training_arguments_device"] = str(_arguments().device)
    result["partial_state_device"] = str(PartialState().device)
    result["explain"] = explanation.to_dict()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
