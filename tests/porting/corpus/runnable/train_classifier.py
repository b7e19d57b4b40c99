"""Train a small MLP classifier on synthetic data: the single-GPU script most tutorials show."""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True  # let cuDNN pick the fastest kernels

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Net(nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.fc1 = nn.Linear(20, width)
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main():
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(256, 20)
    labels = (inputs[:, :4].argmax(dim=1)).long()

    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    first = None
    for epoch in range(40):
        x, y = inputs.cuda(non_blocking=True), labels.to("cuda:0")
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    torch.cuda.synchronize()
    elapsed = time.time() - start
    assert next(model.parameters()).is_cuda
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(f"loss {loss.item():.3f} in {elapsed:.2f}s, peak {peak:.1f} MiB on {device}")
    assert loss.item() < first, (first, loss.item())
    torch.cuda.empty_cache()
    print("OK")


if __name__ == "__main__":
    main()
