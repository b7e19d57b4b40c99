"""One rank of an accelerate / transformers job after ``install()``; prints one result line.

Run under ``torchrun --nproc-per-node 2`` with a mode and a folder. ``ops`` and ``script`` run
accelerate's own shipped test scripts (``accelerate.test_utils.scripts``); ``trainer`` trains
a tiny GPT-2 built from a config (no download) with the transformers ``Trainer``. Each rank
writes what it prints to ``rank<N>.log`` in the folder. Every mode calls only ``install()``:
under torchrun on the CPU it joins the default group, anyaccel_shm on one node, which accelerate
adopts (``ANYACCEL_SHM_BACKEND=0`` keeps gloo). The last line, prefixed ``RESULT``, is its state
as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from typing import Any

warnings.simplefilter("ignore")


def _group_backend() -> str | None:
    import torch.distributed as dist

    return dist.get_backend() if dist.is_initialized() else None


def _state() -> dict[str, Any]:
    from accelerate.state import PartialState

    shared = PartialState._shared_state
    return {
        "distributed_type": shared["distributed_type"].name,
        "num_processes": shared["num_processes"],
        "process_index": shared["process_index"],
        "backend": shared["backend"],
        "group_backend": _group_backend(),
        "device": str(shared["device"]),
    }


def _run_script(name: str) -> dict[str, Any]:
    """accelerate's ``test_ops.main()`` or ``test_script.main()``, then the state it ran on.

    One script per job: both end by destroying the process group, and a second
    ``init_process_group`` in the same torchrun job can hang on torchrun's store.
    """
    from accelerate import Accelerator, PartialState
    from accelerate.test_utils.scripts import test_ops, test_script

    # the state the script shares, built as users' scripts build it first: test_ops starts
    # with a bare PartialState() (which reads no variable for the CPU: install() built the
    # MULTI_CPU state it returns), test_script with Accelerator()
    first = PartialState() if name == "ops" else Accelerator()
    print(f"=== first state: {first.distributed_type.name}, {first.num_processes}", flush=True)
    group = _group_backend()
    (test_ops if name == "ops" else test_script).main()
    print(f"=== {name} passed", flush=True)
    return {name: {**_state(), "group_backend": group}}


def _train() -> dict[str, Any]:
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(Dataset[dict[str, torch.Tensor]]):
        def __init__(self) -> None:
            generator = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 64, (32, 8), generator=generator)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.ids[index], "labels": self.ids[index]}

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=8, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=4,
            max_steps=4,
            learning_rate=1e-2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=0,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens())
        batches = len(trainer.get_train_dataloader())
        output = trainer.train()
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    return {
        **_state(),
        "world_size": args.world_size,
        "parallel_mode": str(args.parallel_mode),
        "batches_per_epoch": batches,
        "training_loss": output.training_loss,
        "weights_checksum": checksum,
    }


def main() -> None:
    mode, out_dir = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    # each rank's output to its own file: ranks sharing torchrun's pipe interleave their lines
    sys.stdout = open(os.path.join(out_dir, f"rank{rank}.log"), "w", buffering=1)  # noqa: SIM115
    from anyaccel.integrations import accelerate as integration

    installation = integration.install()  # joins the group: accelerate adopts it
    result = _train() if mode == "trainer" else _run_script(mode)
    result["rank"] = rank
    result["installed_distributed_type"] = installation.distributed_type
    result["installed_process_group"] = installation.process_group
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
