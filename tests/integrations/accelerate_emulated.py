"""accelerate and the transformers Trainer trained on two ranks, on a simulated vendor or the CPU.

Run each rank under the simulated runtime over emulated devices, or plainly for the CPU run::

    python -m torch.distributed.run --standalone --nproc-per-node 2 \
        -m anyaccel.testing.simulated musa:2 accelerate_emulated.py OUT_DIR
    python -m torch.distributed.run --standalone --nproc-per-node 2 accelerate_emulated.py OUT_DIR

After ``install()``, each rank runs an accelerate loop in fp32 and in bf16, then the
transformers ``Trainer`` on a tiny GPT-2 built from a config, in fp32 and with ``bf16=True``;
then the negative cases on both ranks: an accelerate loop whose loader is not prepared (DDP
moves the inputs it is given, not the targets), and a Trainer whose model keeps a tensor
outside its parameters and buffers (``model.to()`` leaves it). Each rank writes
``OUT_DIR/rank<N>.json``: losses, weights, where parameters, optimizer state and batches were,
autocast's dtype, accelerate's distributed type and the group's backend.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, TensorDataset

warnings.simplefilter("ignore")

STEPS = 3


def _devices(tensors: Any) -> list[str]:
    return sorted({str(t.device) for t in tensors if isinstance(t, torch.Tensor)})


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def _on_cpu() -> bool:
    import anyaccel

    return anyaccel.get_accelerator().device_name() == "cpu"


def accelerate_loop(mixed_precision: str, prepare_loader: bool = True) -> dict[str, Any]:
    """An accelerate loop of STEPS steps on a tiny MLP; what it saw and its weights."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import set_seed

    AcceleratorState._reset_state()  # a new mixed precision (the process state stays)
    accelerator = Accelerator(mixed_precision=mixed_precision)
    set_seed(0)
    network = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    dtypes: set[str] = set()
    network[0].register_forward_hook(lambda module, args, out: dtypes.add(str(out.dtype)))
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(32, 8, generator=generator), torch.randn(32, 2, generator=generator)
    )
    loader = DataLoader(data, batch_size=4)
    model, optimizer = accelerator.prepare(network, optimizer)
    if prepare_loader:  # the negative case leaves its batches on the CPU
        loader = accelerator.prepare(loader)
    seen: dict[str, set[str]] = {"parameters": set(), "optimizer_state": set(), "batch": set()}
    losses = []
    for step, (x, y) in enumerate(loader):
        if step == STEPS:
            break
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
        seen["parameters"].update(_devices(network.parameters()))
        seen["optimizer_state"].update(_devices(_state_tensors(optimizer.optimizer)))
        seen["batch"].update(_devices((x, y)))
    return {
        "losses": losses,
        "weights": [p.detach().float().cpu().flatten().tolist() for p in network.parameters()],
        "devices": {k: sorted(v) for k, v in seen.items()},
        "output_dtypes": sorted(dtypes),
        "device": str(accelerator.device),
        "distributed_type": accelerator.distributed_type.name,
        "backend": dist.get_backend() if dist.is_initialized() else None,
    }


class _Tokens(Dataset[dict[str, torch.Tensor]]):
    def __init__(self) -> None:
        self.ids = torch.randint(0, 64, (32, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def trainer(stray_cpu_tensor: bool = False, bf16: bool = False) -> dict[str, Any]:
    """The transformers Trainer for STEPS steps on a tiny GPT-2; what it saw and its weights."""
    from accelerate.state import AcceleratorState
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    AcceleratorState._reset_state()  # the Trainer's own Accelerator and mixed precision
    torch.manual_seed(0)
    # no dropout (its masks come from each device's own generator); attention is transformers'
    # default, sdpa: the device takes the CPU's fused kernel for it, so results stay bit-equal
    config = GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        attn_implementation="sdpa")  # fmt: skip
    model = GPT2LMHeadModel(config)
    if stray_cpu_tensor:  # the bug: a tensor outside parameters and buffers stays on the CPU
        shift = torch.zeros(16)
        model.transformer.wte.register_forward_hook(lambda module, args, out: out + shift)
    seen: dict[str, set[str]] = {"parameters": set(), "optimizer_state": set(), "batch": set()}
    dtypes: set[str] = set()  # of the first projection (addmm: lowered by both autocast lists)
    model.transformer.h[0].attn.c_attn.register_forward_hook(
        lambda module, args, out: dtypes.add(str(out.dtype))
    )
    model.register_forward_pre_hook(
        lambda module, args, kwargs: seen["batch"].update(_devices(kwargs.values())),
        with_kwargs=True,
    )

    class Placement(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seen["parameters"].update(_devices(kwargs["model"].parameters()))
            seen["optimizer_state"].update(_devices(_state_tensors(kwargs["optimizer"])))

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=4,
            max_steps=STEPS,
            learning_rate=1e-2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=0,
            disable_tqdm=True,
            # transformers takes bf16 on a device it knows; on the CPU only with use_cpu
            **({"bf16": True, "use_cpu": _on_cpu()} if bf16 else {}),
        )
        run = Trainer(model=model, args=args, train_dataset=_Tokens(), callbacks=[Placement()])
        run.train()
    return {
        "losses": [entry["loss"] for entry in run.state.log_history if "loss" in entry],
        "weights": [p.detach().float().cpu().flatten().tolist() for p in model.parameters()],
        "devices": {k: sorted(v) for k, v in seen.items()},
        "output_dtypes": sorted(dtypes),
        "device": str(args.device),
        "distributed_type": run.accelerator.distributed_type.name,
        "backend": dist.get_backend() if dist.is_initialized() else None,
    }


def _error(run: Any) -> str:
    try:
        run()
    except RuntimeError as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


def main(out_dir: Path) -> None:
    import anyaccel
    from anyaccel.integrations import accelerate as integration

    rank = int(os.environ["RANK"])
    installation = integration.install()
    result: dict[str, Any] = {
        "selected": type(anyaccel.get_accelerator()).__name__,
        "installed_distributed_type": installation.distributed_type,
        "accelerate": {p: accelerate_loop(p) for p in ("no", "bf16")},
        "trainer": trainer(),
        "trainer_bf16": trainer(bf16=True),
    }
    # the negative cases, on both ranks alike (DDP's set-up and forward hold collectives); each
    # fails in its first forward step, before any gradient is reduced
    result["negative"] = {
        "accelerate": _error(lambda: accelerate_loop("no", prepare_loader=False)),
        "trainer": _error(lambda: trainer(stray_cpu_tensor=True)),
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter shutdown (see lightning_train.py)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
