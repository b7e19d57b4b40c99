"""The Trainer in bf16 on anyaccel's CPU, with the line ``trainer_bf16()`` gives; prints JSON.

One process, no ``install()``: what the docs tell a CPU user to do.
"""

from __future__ import annotations

import json
import re
import tempfile
import warnings

warnings.simplefilter("ignore")


def main() -> None:
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from anyaccel.integrations.accelerate import trainer_bf16

    answer = trainer_bf16()
    line = re.search(r"(TrainingArguments\([^)]*\)) is accepted", answer)
    assert line is not None, answer
    keywords = dict(
        pair.split("=") for pair in line.group(1)[len("TrainingArguments(") : -1].split(", ")
    )

    class Tokens(Dataset[dict[str, torch.Tensor]]):
        def __init__(self) -> None:
            self.ids = torch.randint(0, 64, (16, 8), generator=torch.Generator().manual_seed(0))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.ids[index], "labels": self.ids[index]}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=8, n_embd=32, n_layer=1, n_head=2)
    )
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=4,
            max_steps=2,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            **{name: value == "True" for name, value in keywords.items()},
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens())
        output = trainer.train()
    print(
        json.dumps(
            {
                "answer": answer,
                "keywords": sorted(keywords),
                "device": str(args.device),
                "mixed_precision": trainer.accelerator.mixed_precision,
                "training_loss": output.training_loss,
            }
        )
    )


if __name__ == "__main__":
    main()
