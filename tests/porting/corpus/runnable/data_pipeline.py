"""Pinned-memory data loading overlapped with compute on a side stream."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def loader():
    data = TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,)))
    return DataLoader(data, batch_size=16, pin_memory=torch.cuda.is_available())


def main():
    copy_stream = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    weights = torch.randn(16, 2).cuda()
    start.record()
    seen = 0
    for x, y in loader():
        x = x.pin_memory()
        with torch.cuda.stream(copy_stream):
            x_dev = x.to(torch.cuda.current_device(), non_blocking=True)
            y_dev = y.cuda(non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy_stream)
        logits = x_dev @ weights
        assert logits.is_cuda and y_dev.device.type == "cuda"
        seen += x_dev.shape[0]
    end.record()
    end.synchronize()
    print(f"{seen} samples in {start.elapsed_time(end):.1f} ms")
    assert seen == 64
    print("OK")


if __name__ == "__main__":
    main()
