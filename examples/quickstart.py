"""Train a small model for a few steps on whatever accelerator anyaccel detects.

The same file runs on a laptop CPU, a CUDA or ROCm GPU, an Intel XPU, an Ascend NPU, a
Gaudi HPU...: nothing in it names the hardware. Set DS_ACCELERATOR=<name> to force one.
"""

from __future__ import annotations

import contextlib
import warnings

with warnings.catch_warnings():
    # torch warns on import when NumPy is not installed; nothing here uses NumPy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    import torch
    from torch import nn

    from anyaccel import CpuFallbackWarning, detection_report, get_accelerator

MIB = 1024 * 1024


def training_dtype(supported: list[torch.dtype]) -> torch.dtype:
    """The lowest precision worth training in: bfloat16, then float16, else float32."""
    for dtype in (torch.bfloat16, torch.float16):
        if dtype in supported:
            return dtype
    return torch.float32


def main(steps: int = 20) -> float:
    """Fit a small MLP to a random linear target; returns the final loss."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CpuFallbackWarning)  # the report below says it all
        acc = get_accelerator()
    report = detection_report()
    device = acc.current_device_name()  # 'cuda:0', 'npu:0', 'cpu': a string, not an index
    device_type = acc.device_name()  # the torch device type: 'cuda' on Kunlunxin XPUs too
    dtype = training_dtype(acc.supported_dtypes())
    print(
        f"accelerator: {report.accelerator} ({report.how}), device {device}, "
        f"{acc.device_count()} visible"
    )
    print(
        f"dtype: {str(dtype).removeprefix('torch.')} (supported: "
        f"{', '.join(str(d).removeprefix('torch.') for d in acc.supported_dtypes())})"
    )

    acc.manual_seed_all(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler(device_type, enabled=dtype == torch.float16)
    inputs = torch.randn(1024, 256, device=device)
    targets = inputs @ torch.randn(256, 1, device=device) * 0.1

    acc.reset_peak_memory_stats()
    loss = torch.tensor(0.0)
    for step in range(1, steps + 1):
        autocast = (
            torch.autocast(device_type=device_type, dtype=dtype)
            if dtype != torch.float32
            else contextlib.nullcontext()
        )
        with autocast:
            loss = nn.functional.mse_loss(model(inputs).float(), targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if step == 1 or step % 5 == 0:
            print(f"step {step:3d}  loss {loss.item():.5f}")
    acc.synchronize()

    print(  # the CPU counts the whole process, a device runtime its tensors: say which
        f"memory ({acc.memory_measure()}): {acc.memory_allocated() / MIB:.1f} MiB now, "
        f"peak {acc.max_memory_allocated() / MIB:.1f} MiB, "
        f"{acc.available_memory() / MIB:.0f} of {acc.total_memory() / MIB:.0f} MiB available"
    )
    return float(loss.item())


if __name__ == "__main__":
    main()
