"""Lightning's Trainer or Fabric trained on a simulated vendor device, and on Lightning's CPU.

Run each rank under the simulated runtime over emulated devices::

    python -m torch.distributed.run --standalone --nproc-per-node 2 \
        -m anyaccel.testing.simulated mlu:2 lightning_emulated.py trainer OUT_DIR

Each rank trains the same tiny model for a few steps, ``32-true`` and ``bf16-mixed``: first with
DDP on two ranks, on ``accelerator="anyaccel"`` (the vendor's device, its collective backend),
then, after the group is destroyed, on Lightning's ``"cpu"``. Then rank 0 trains in one process
(``devices=1``) on both, and rank 1 runs the negative case on both: a module that builds a CPU
tensor in its step (Trainer), or a batch left on the CPU (Fabric). Each rank writes its results
to ``OUT_DIR/rank<N>.json``: the losses, the weights, where every parameter, optimizer state
and batch was during training, the dtype autocast gave, and the process-group backend.
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

warnings.simplefilter("ignore")

import lightning as L  # noqa: E402

import anyaccel  # noqa: E402
import anyaccel.integrations.lightning  # noqa: E402  (registers "anyaccel")

STEPS = 3
SEED = 1234
PRECISIONS = ("32-true", "bf16-mixed")
QUIET = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(32, 8, generator=generator), torch.randn(32, 2, generator=generator)
    )


def _network() -> torch.nn.Module:
    """Linear, ReLU, Linear: ops whose autocast policy is the same on the CPU and on CUDA's list."""
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # mse_loss runs in fp32 under autocast on the CPU and on CUDA's list alike
    return torch.nn.functional.mse_loss(output, target)


def _optimizer(parameters: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=0.1, momentum=0.9)


class _Seen:
    """Where the tensors of a training step were: device types and autocast's output dtype."""

    def __init__(self) -> None:
        self.devices: dict[str, set[str]] = {"parameters": set(), "optimizer_state": set(),
                                             "batch": set()}  # fmt: skip
        self.output_dtypes: set[str] = set()
        self.losses: list[float] = []

    def watch(self, network: torch.nn.Module) -> torch.nn.Module:
        """Record the dtype of the first layer's output: bf16 where autocast runs on its device."""
        network[0].register_forward_hook(
            lambda _, args, out: self.output_dtypes.add(str(out.dtype))
        )
        return network

    def step(self, model: torch.nn.Module, batch: Any, loss: torch.Tensor) -> None:
        self.devices["parameters"] |= {str(p.device) for p in model.parameters()}
        self.devices["batch"] |= {str(t.device) for t in batch}
        self.losses.append(loss.item())

    def optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.devices["optimizer_state"] |= {
            str(v.device)
            for state in optimizer.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor)
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": {k: sorted(v) for k, v in self.devices.items()},
            "output_dtypes": sorted(self.output_dtypes),
            "losses": self.losses,
        }


class _Module(L.LightningModule):
    def __init__(self, seen: _Seen, stray_cpu_tensor: bool = False) -> None:
        super().__init__()
        self.network = seen.watch(_network())
        self.seen = seen
        self.stray_cpu_tensor = stray_cpu_tensor

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        output = self.network(x)
        if self.stray_cpu_tensor:  # the bug: a tensor built on the CPU, not on self.device
            output = output + torch.zeros(output.shape[-1])
        loss = _loss(output, y)
        self.seen.step(self.network, batch, loss)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.optimizer(self.trainer.optimizers[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return _optimizer(self.parameters())


def _weights(module: torch.nn.Module) -> list[list[float]]:
    return [p.detach().float().cpu().flatten().tolist() for p in module.parameters()]


def _backend() -> str | None:
    return dist.get_backend() if dist.is_initialized() else None


def train_trainer(
    accelerator: str, devices: int, precision: str, stray: bool = False
) -> dict[str, Any]:
    """``Trainer.fit`` for STEPS steps; what it saw, its weights and its strategy."""
    L.seed_everything(SEED, verbose=False)
    seen = _Seen()
    model = _Module(seen, stray_cpu_tensor=stray)
    trainer = L.Trainer(
        accelerator=accelerator, devices=devices, precision=precision, max_steps=STEPS, **QUIET
    )
    trainer.fit(model, DataLoader(_data(), batch_size=4))
    return {
        **seen.to_dict(),
        "weights": _weights(model.network),
        "strategy": type(trainer.strategy).__name__,
        "root_device": str(trainer.strategy.root_device),
        "backend": _backend(),
    }


def train_fabric(
    accelerator: str, devices: int, precision: str, stray: bool = False
) -> dict[str, Any]:
    """A Fabric loop for STEPS steps; what it saw, its weights and its strategy."""
    fabric = L.Fabric(accelerator=accelerator, devices=devices, precision=precision)
    fabric.launch()
    fabric.seed_everything(SEED, verbose=False)
    seen = _Seen()
    network = seen.watch(_network())
    model, optimizer = fabric.setup(network, _optimizer(network.parameters()))
    loader = DataLoader(_data(), batch_size=4)
    if not stray:  # the bug: a loader not set up, so its batches stay on the CPU
        loader = fabric.setup_dataloaders(loader)
    for step, batch in enumerate(loader):
        if step == STEPS:
            break
        x, y = batch
        optimizer.zero_grad()
        output = model(x)
        loss = _loss(output, y)
        seen.step(network, batch, loss)
        fabric.backward(loss)
        optimizer.step()
        seen.optimizer(optimizer.optimizer)
    return {
        **seen.to_dict(),
        "weights": _weights(network),
        "strategy": type(fabric.strategy).__name__,
        "root_device": str(fabric.device),
        "backend": _backend(),
    }


def _negative(train: Any) -> dict[str, str]:
    """The error each run raised (``"no error"`` when it trained)."""
    outcome: dict[str, str] = {}
    for accelerator in ("anyaccel", "cpu"):
        try:
            train(accelerator, 1, "32-true", stray=True)
            outcome[accelerator] = "no error"
        except RuntimeError as error:
            outcome[accelerator] = f"{type(error).__name__}: {error}"
    return outcome


def main(api: str, out_dir: Path) -> None:
    train = train_trainer if api == "trainer" else train_fabric
    rank = int(os.environ["RANK"])
    result: dict[str, Any] = {
        "selected": type(anyaccel.get_accelerator()).__name__,
        "lightning": [L.__version__, L.__file__],
    }
    result["ddp"] = {p: {"vendor": train("anyaccel", 2, p)} for p in PRECISIONS}
    gc.collect()
    dist.destroy_process_group()
    for precision in PRECISIONS:
        result["ddp"][precision]["cpu"] = train("cpu", 2, precision)
    gc.collect()
    dist.destroy_process_group()
    if rank == 0:
        result["one"] = {
            p: {"vendor": train("anyaccel", 1, p), "cpu": train("cpu", 1, p)} for p in PRECISIONS
        }
    else:
        result["negative"] = _negative(train)
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter shutdown (see lightning_train.py)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
