"""``install()`` for a device whose runtime this process registered and its children lack.

Run in a fresh process with ``import_only`` (``torch_vpu`` imported from a folder that is not
on ``PYTHONPATH``: a vendor package without torch's backend autoload) or ``emulated`` (the
emulated device made by ``anyaccel.testing.emulated.install()``, a call, with no
``ANYACCEL_EMULATED`` for a child to read). The children ``install()`` starts to ask
accelerate and transformers must see the same device. Prints one JSON line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")


def main() -> None:
    mode = sys.argv[1]
    if mode == "import_only":
        sys.path.insert(0, str(Path(__file__).with_name("import_only_vendor")))
        import torch_vpu  # noqa: F401  (registers torch.vpu, as the vendor's package does)

        os.environ["DS_ACCELERATOR"] = "vpu"  # the generic backend: a device torch knows
        import anyaccel

        accelerator = anyaccel.get_accelerator()
    else:
        from anyaccel.testing import emulated

        accelerator = emulated.install("vpu", 1)
    from anyaccel.integrations import accelerate as integration

    installation = integration.install(accelerator)
    from accelerate import PartialState

    result = {
        "backend": type(accelerator).__name__,
        "installed_device": installation.device,
        "partial_state_device": str(PartialState().device),
        "after_install": str(integration.explain(accelerator).after_install),
    }
    if importlib.util.find_spec("transformers") is not None:
        from transformers import TrainingArguments

        arguments = TrainingArguments(output_dir="unused", report_to=[], save_strategy="no")
        result["training_arguments_device"] = str(arguments.device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
