"""A Lightning release that changed its private code: no hook, a warning, the helper still trains.

Run under ``torchrun --nproc-per-node 2`` as ``lightning_fallback.py OUT_DIR``. Before the
integration is imported, each rank makes the installed Lightning look like a future release:
its version reads ``3.0.0`` (no pin may refuse it) and the Trainer connector's
``_check_and_init_precision`` takes a new parameter (a signature the hooks do not know).
Lightning itself still works. Each rank then writes ``OUT_DIR/rank<r>.json``: the warnings the
import gave, whether any Lightning class was touched, the registries, what the name
``accelerator="anyaccel"`` gets without hooks, and DDP runs (Trainer and Fabric, both packages)
built from ``trainer_kwargs``/``fabric_kwargs`` beside Lightning's own ``"cpu"``.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch.distributed as dist

REAL_VERSION = importlib.metadata.version
PACKAGE_NAMES = ("lightning", "pytorch_lightning", "lightning_fabric")
CONNECTORS = {
    "lightning": ("lightning.pytorch.trainer.connectors.accelerator_connector", "lightning.fabric"),
    "pytorch_lightning": (
        "pytorch_lightning.trainer.connectors.accelerator_connector",
        "lightning_fabric",
    ),
}
HOOKED = (
    "_check_config_and_set_final_flags",
    "_choose_strategy",
    "_init_strategy",
    "_check_and_init_precision",
    "_lazy_init_strategy",
)


def _connectors() -> list[type]:
    found = []
    for trainer_module, fabric_package in CONNECTORS.values():
        found.append(importlib.import_module(trainer_module)._AcceleratorConnector)
        found.append(importlib.import_module(f"{fabric_package}.connector")._Connector)
    return found


def change_lightning() -> dict[tuple[type, str], Any]:
    """Make Lightning look like a newer release; what each connector method is afterwards."""

    def version(name: str) -> str:
        return "3.0.0" if name in PACKAGE_NAMES else REAL_VERSION(name)

    importlib.metadata.version = version  # type: ignore[assignment]
    for connector in _connectors()[::2]:  # the Trainer connectors
        original = connector._check_and_init_precision

        def _check_and_init_precision(self: Any, device: Any = None, _o: Any = original) -> Any:
            return _o(self)

        connector._check_and_init_precision = _check_and_init_precision
    return {(c, name): vars(c).get(name) for c in _connectors() for name in HOOKED}


def main(out_dir: Path) -> None:
    before = change_lightning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import anyaccel.integrations.lightning as integration
        from anyaccel.integrations.lightning import hooks

        again = integration.register()  # a second try: the same answer, no second warning
    importlib.metadata.version = REAL_VERSION  # type: ignore[assignment]
    sys.path.insert(0, str(Path(__file__).parent))
    import lightning_train

    world_size = int(os.environ["WORLD_SIZE"])
    import lightning
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    named = lightning.Trainer(accelerator="anyaccel", devices=world_size, logger=False)
    result: dict[str, Any] = {
        "warnings": [
            [w.category.__name__, str(w.message)]
            for w in caught
            if issubclass(w.category, integration.LightningHookWarning)
        ],
        "again": again,
        "installed": hooks.installed(),
        "untouched": all(vars(c).get(name) is f for (c, name), f in before.items()),
        "versions": {name: flavour.version for name, flavour in integration.FLAVOURS.items()},
        "registered": ["anyaccel" in AcceleratorRegistry, "anyaccel_ddp" in StrategyRegistry],
        "named_strategy": type(named.strategy).__name__,
        "runs": {
            package: {
                api: {
                    name: train(name, world_size, package)
                    for name in (lightning_train.HELPER, "cpu")
                }
                for api, train in (
                    ("trainer", lightning_train.train_trainer),
                    ("fabric", lightning_train.train_fabric),
                )
            }
            for package in integration.PACKAGES
        },
    }
    (out_dir / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))
    gc.collect()  # end as lightning_train.py does (docs/distributed.md, "Ending a job")
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
