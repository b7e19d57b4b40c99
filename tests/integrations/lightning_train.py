"""Train Lightning's BoringModel with the Trainer and Fabric, on anyaccel and on Lightning's CPU.

Each run uses one Lightning package: ``lightning`` (``lightning.pytorch``/``lightning.fabric``)
or the standalone ``pytorch_lightning``/``lightning_fabric``. Under ``torchrun
--nproc-per-node 2`` (DDP) as ``lightning_train.py OUT_DIR``: each rank writes
``OUT_DIR/rank<r>.json``, for each package the final weights of each run (``trainer``/``fabric``
x ``anyaccel``/``cpu``/``helper``, the last built by ``trainer_kwargs``/``fabric_kwargs``) and
what it ran on. As ``lightning_train.py --standalone-only``, with the ``lightning`` package
hidden, it prints the one-process runs of the standalone packages and the integration's
packages as one JSON line. The tests call :func:`train_all` in-process for the one-process runs.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

if __name__ == "__main__" and sys.argv[1:] == ["--standalone-only"]:
    sys.modules["lightning"] = None  # type: ignore[assignment]  # as if it were not installed

import anyaccel.integrations.lightning as integration  # registers "anyaccel"

STEPS = 4
#: Where each package keeps its Trainer (with ``seed_everything`` and the demos) and its Fabric.
PACKAGES = integration.PACKAGES
SEED = 1234
#: The run that builds its Trainer/Fabric from ``trainer_kwargs``/``fabric_kwargs`` (no name).
HELPER = "helper"
#: Every run of each API: by name (anyaccel's, Lightning's CPU) and by the public helper.
RUNS = ("anyaccel", "cpu", HELPER)


def _weights(module: torch.nn.Module) -> dict[str, list[float]]:
    return {name: p.detach().flatten().tolist() for name, p in module.state_dict().items()}


def _placement(strategy: Any, precision: Any) -> dict[str, Any]:
    return {
        "strategy": type(strategy).__name__,
        "classes": [type(x).__qualname__ for x in (strategy.accelerator, strategy, precision)],
        "root_device": str(strategy.root_device),
        "precision_device": getattr(precision, "device", None),
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
    }


def _placement_arguments(
    accelerator: str, devices: int, package: str, helper: Any
) -> dict[str, Any]:
    """``accelerator`` by name, or ``"helper"``: anyaccel's objects from its public helper."""
    if accelerator == HELPER:
        arguments: dict[str, Any] = helper(devices=devices, package=package)
        return arguments
    return {"accelerator": accelerator, "devices": devices}


def train_trainer(accelerator: str, devices: int, package: str = "lightning") -> dict[str, Any]:
    """``Trainer.fit`` of BoringModel for STEPS steps; the weights and where it ran."""
    pl = importlib.import_module(PACKAGES[package][0])
    demos = importlib.import_module(f"{PACKAGES[package][0]}.demos.boring_classes")
    pl.seed_everything(SEED, verbose=False)
    model = demos.BoringModel()
    trainer = pl.Trainer(
        **_placement_arguments(accelerator, devices, package, integration.trainer_kwargs),
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(model)
    return {
        "weights": _weights(model),
        **_placement(trainer.strategy, trainer.precision_plugin),
    }


def train_fabric(accelerator: str, devices: int, package: str = "lightning") -> dict[str, Any]:
    """A Fabric loop over the same model and data; the weights and where it ran."""
    lf = importlib.import_module(PACKAGES[package][1])
    demos = importlib.import_module(f"{PACKAGES[package][0]}.demos.boring_classes")
    fabric = lf.Fabric(
        **_placement_arguments(accelerator, devices, package, integration.fabric_kwargs)
    )
    fabric.launch()
    fabric.seed_everything(SEED, verbose=False)
    model = torch.nn.Linear(32, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(demos.RandomDataset(32, 64), batch_size=2))
    for step, batch in enumerate(loader):
        if step == STEPS:
            break
        optimizer.zero_grad()
        output = model(batch)
        loss = torch.nn.functional.mse_loss(output, torch.ones_like(output))
        fabric.backward(loss)
        optimizer.step()
    return {"weights": _weights(model.module), **_placement(fabric.strategy, fabric._precision)}


def train_all(devices: int, package: str = "lightning") -> dict[str, dict[str, dict[str, Any]]]:
    """Each API (``trainer``, ``fabric``) of ``package`` for each of :data:`RUNS`."""
    return {
        "trainer": {name: train_trainer(name, devices, package) for name in RUNS},
        "fabric": {name: train_fabric(name, devices, package) for name in RUNS},
    }


def standalone_only() -> dict[str, Any]:
    """With ``lightning`` hidden: the integration's packages and main names, and the runs."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    return {
        "flavours": sorted(integration.FLAVOURS),
        "main_is_standalone": integration.AnyAccelerator
        is integration.FLAVOURS["pytorch_lightning"].AnyAccelerator,
        "runs": train_all(1, "pytorch_lightning"),
    }


def main(out_dir: Path) -> None:
    world_size = int(os.environ["WORLD_SIZE"])
    results = {package: train_all(world_size, package) for package in PACKAGES}
    (out_dir / f"rank{os.environ['RANK']}.json").write_text(json.dumps(results))
    # End as docs/distributed.md ("Ending a job") says: the DDP models go first, then the
    # group; and skip interpreter shutdown, where a gloo worker still releasing a collective's
    # tensors aborts the process now and then (SIGABRT after all the work is done).
    gc.collect()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if sys.argv[1:] == ["--standalone-only"]:
        print(json.dumps(standalone_only()))
    else:
        main(Path(sys.argv[1]))
