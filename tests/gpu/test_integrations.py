"""The integrations on a real GPU: DeepSpeed ZeRO-2 offload, Lightning bf16-mixed, accelerate.

Each is skipped, with the reason, where its framework (or anyaccel's integration module for
it) is not importable here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import GPU, child_env, explain, run_python

pytestmark = [*GPU, pytest.mark.extras]

DEEPSPEED_CHILD = Path(__file__).with_name("deepspeed_child.py")


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def need(*modules: str) -> None:
    missing = [name for name in modules if not importable(name)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not importable here")


def deepspeed_python() -> str | None:
    """This interpreter if it has DeepSpeed, else ``ANYACCEL_DEEPSPEED_PYTHON``."""
    if importable("deepspeed"):
        return sys.executable
    return os.environ.get("ANYACCEL_DEEPSPEED_PYTHON") or None


def test_deepspeed_zero2_offload_losses_equal_deepspeeds_own_cuda(tmp_path: Path) -> None:
    python = deepspeed_python()
    if python is None:
        pytest.skip("deepspeed not importable (nor ANYACCEL_DEEPSPEED_PYTHON set)")
    results = {}
    for accelerator in ("deepspeed", "anyaccel"):
        out = tmp_path / f"{accelerator}.json"
        command = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
        command += ["1", str(DEEPSPEED_CHILD), "--accelerator", accelerator, "--out", str(out)]
        done = subprocess.run(
            command,
            env=child_env(DS_ACCELERATOR="cuda"),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert done.returncode == 0, f"{accelerator}: {explain(done)}"
        results[accelerator] = json.loads(out.read_text(encoding="utf-8"))
    assert results["deepspeed"]["accelerator"].endswith("CUDA_Accelerator")
    assert results["anyaccel"]["accelerator"] == "anyaccel.backends.cuda.CudaAccelerator"
    for dtype in ("fp32", "bf16"):
        ours = results["anyaccel"]["losses"][dtype]
        theirs = results["deepspeed"]["losses"][dtype]
        assert ours == theirs, f"{dtype}: ours {ours} vs DeepSpeed's {theirs}"
        assert ours[-1] < 0.9 * ours[0], f"{dtype} did not train: {ours}"


def test_lightning_trainer_fits_bf16_mixed_on_cuda0() -> None:
    need("lightning", "anyaccel.integrations.lightning")
    done = run_python(
        """
        import json, torch, lightning
        import anyaccel.integrations.lightning  # registers accelerator="anyaccel"

        class Regression(lightning.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Sequential(
                    torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
                self.seen = []
            def training_step(self, batch, _index):
                x, y = batch
                out = self.net(x)
                loss = torch.nn.functional.mse_loss(out.float(), y)
                self.seen.append((str(x.device), str(out.dtype), float(loss)))
                return loss
            def configure_optimizers(self):
                return torch.optim.Adam(self.parameters(), lr=1e-2)

        generator = torch.Generator().manual_seed(0)
        x = torch.randn(256, 32, generator=generator)
        y = x.sum(dim=1, keepdim=True) / 8
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
        model = Regression()
        trainer = lightning.Trainer(
            accelerator="anyaccel", devices=1, precision="bf16-mixed", max_epochs=3,
            logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False)
        trainer.fit(model, data)
        print(json.dumps({"root": str(trainer.strategy.root_device), "seen": model.seen}))
        """,
        timeout=600,
    )
    assert done.returncode == 0, explain(done)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["root"] == "cuda:0"
    devices = {device for device, _dtype, _loss in result["seen"]}
    dtypes = {dtype for _device, dtype, _loss in result["seen"]}
    losses = [loss for _device, _dtype, loss in result["seen"]]
    assert devices == {"cuda:0"} and dtypes == {"torch.bfloat16"}
    assert losses[-1] < 0.5 * losses[0], losses


def test_accelerate_trains_on_cuda0_through_install() -> None:
    need("accelerate", "anyaccel.integrations.accelerate")
    done = run_python(
        """
        import json, torch, accelerate
        from anyaccel.integrations import accelerate as anyaccel_accelerate

        anyaccel_accelerate.install()
        accelerator = accelerate.Accelerator(mixed_precision="bf16")
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
        x = torch.randn(256, 32, device=accelerator.device)
        y = x.sum(dim=1, keepdim=True) / 8
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            accelerator.backward(loss)
            optimizer.step()
            losses.append(float(loss))
        weight = next(model.parameters())
        print(json.dumps({"device": str(accelerator.device), "weight": str(weight.device),
                          "losses": losses}))
        """,
        timeout=600,
    )
    assert done.returncode == 0, explain(done)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["device"] == "cuda:0" or result["device"] == "cuda"
    assert result["weight"] == "cuda:0"
    assert result["losses"][-1] < 0.5 * result["losses"][0], result["losses"]
