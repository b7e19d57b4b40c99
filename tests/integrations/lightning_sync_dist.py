"""Lightning's ``self.log(..., sync_dist=True)`` of int and float metrics on 2 CPU ranks.

Run under ``torchrun --nproc-per-node 2`` as ``lightning_sync_dist.py OUT_DIR`` with
``accelerator="anyaccel", strategy="anyaccel_ddp"`` and no backend named: each rank writes
``OUT_DIR/rank<r>.json`` with the process group's backend and every logged metric (value and
dtype) after a fit with validation (Lightning validates under ``inference_mode`` except on a
backend named ``"gloo"``). Run once as it comes (anyaccel_shm) and once with
``ANYACCEL_SHM_BACKEND=0`` (gloo), the two must log the same.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import anyaccel.integrations.lightning  # noqa: F401  # registers "anyaccel", "anyaccel_ddp"

STEPS = 3


def _module() -> Any:
    import lightning.pytorch as pl

    class Logged(pl.LightningModule):
        """Logs int and float values that differ across ranks, reduced by mean, sum and max."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            #: What the strategy's reduce (sync_dist's own call) gave each int64 count.
            self.reduced: list[tuple[int, str]] = []

        def _log_all(self, stage: str, index: int, loss: torch.Tensor) -> None:
            rank = self.global_rank
            count = torch.tensor(index + 3 * rank + 1)  # int64: (i + 1) and (i + 4) average to .5s
            for fx in ("mean", "sum", "max"):
                options = {"sync_dist": True, "reduce_fx": fx, "on_step": True, "on_epoch": True}
                self.log(f"{stage}_int_{fx}", count, **options)
                self.log(f"{stage}_float_{fx}", loss.detach() * (rank + 1), **options)
            # what sync_dist calls for an int64 tensor: ReduceOp.AVG on anyaccel_shm, gloo's
            # SUM and a division on gloo (Lightning rewrites AVG for a backend named "gloo")
            mean = self.trainer.strategy.reduce(count.clone(), reduce_op="mean")
            self.reduced.append((mean.item(), str(mean.dtype)))

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            loss = self.layer(batch[0]).pow(2).mean()
            self._log_all("train", index, loss)
            return loss

        def validation_step(self, batch: Any, index: int) -> None:
            self._log_all("val", index, self.layer(batch[0]).pow(2).mean())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Logged()


def main(out_dir: Path) -> None:
    import lightning.pytorch as pl

    pl.seed_everything(7, verbose=False)
    data = TensorDataset(torch.randn(32, 4))
    trainer = pl.Trainer(
        accelerator="anyaccel",
        strategy="anyaccel_ddp",
        devices=2,
        max_epochs=1,
        limit_train_batches=STEPS,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = _module()
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    metrics = {
        name: [value.tolist(), str(value.dtype)]
        for name, value in sorted(trainer.callback_metrics.items())
    }
    report = {"backend": dist.get_backend(), "metrics": metrics, "reduced": model.reduced}
    (out_dir / f"rank{os.environ['RANK']}.json").write_text(json.dumps(report))
    del trainer, model
    gc.collect()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    main(Path(sys.argv[1]))
