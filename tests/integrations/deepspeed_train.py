"""Train a small model with ``deepspeed.initialize`` in every configuration; write the losses.

Run under ``torchrun --nproc-per-node 2``. ``--accelerator deepspeed`` keeps DeepSpeed's own
CPU accelerator; ``--accelerator anyaccel`` hands DeepSpeed anyaccel's with
``anyaccel.integrations.deepspeed.install()``. All configurations run in one launch (one
process group, one DeepSpeed import) to keep the suite fast. Rank 0 writes JSON:
``{"accelerator": <class DeepSpeed used>, "losses": {config: [loss per step]}}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import warnings

import torch

CONFIGS = [
    (stage, dtype, offload)
    for stage in (0, 1, 2, 3)
    for dtype in ("fp32", "bf16")
    for offload in (False, True)
    if not (stage == 0 and offload)  # DeepSpeed offloads optimizer state from ZeRO-1 on
]


def config_name(stage: int, dtype: str, offload: bool) -> str:
    return f"zero{stage}-{dtype}-{'offload' if offload else 'nooffload'}"


def ds_config(stage: int, dtype: str, offload: bool) -> dict[str, object]:
    zero: dict[str, object] = {"stage": stage}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1000,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": not offload}},
        "bf16": {"enabled": dtype == "bf16"},
        "zero_optimization": zero,
        "wall_clock_breakdown": False,
    }


def train(stage: int, dtype: str, offload: bool, steps: int) -> list[float]:
    import deepspeed

    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config(stage, dtype, offload)
    )
    rank = torch.distributed.get_rank()
    data = torch.Generator().manual_seed(99 + rank)
    compute_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    # One fixed batch per rank: the loss must fall, so a step that does nothing shows.
    x = torch.randn(4, 16, generator=data).to(compute_dtype)
    y = torch.randn(4, 4, generator=data).to(compute_dtype)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(engine(x).float(), y.float())
        engine.backward(loss)
        engine.step()
        reduced = loss.detach().clone()
        torch.distributed.all_reduce(reduced)
        losses.append(float(reduced) / torch.distributed.get_world_size())
    engine.destroy()
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerator", choices=("deepspeed", "anyaccel"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", nargs="*", help="config names to run (default: all)")
    parser.add_argument(
        "--dist-backend", default="gloo", help="gloo, or 'asked': the accelerator's answer"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    if args.accelerator == "anyaccel":
        from anyaccel.integrations.deepspeed import install

        install()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if args.dist_backend == "asked":  # as users call it: get_accelerator() names the backend
        deepspeed.init_distributed()
    else:
        deepspeed.init_distributed(dist_backend=args.dist_backend)
    backend = torch.distributed.get_backend()
    losses = {}
    for stage, dtype, offload in CONFIGS:
        name = config_name(stage, dtype, offload)
        if args.only and name not in args.only:
            continue
        losses[name] = train(stage, dtype, offload, args.steps)
    used = type(get_accelerator())
    if int(os.environ.get("RANK", "0")) == 0:
        with open(args.out, "w") as out:
            used_name = f"{used.__module__}.{used.__qualname__}"
            json.dump({"accelerator": used_name, "backend": backend, "losses": losses}, out)
    end_the_job()


def end_the_job() -> None:
    """End the job as docs/distributed.md says: DeepSpeed's engines keep their gloo groups
    alive to exit, where a worker still releasing a collective's tensors aborts the process
    now and then (SIGABRT after all the work is done, for DeepSpeed's own accelerator too)."""
    torch.distributed.barrier()
    gc.collect()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
