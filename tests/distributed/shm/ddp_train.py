"""A small training loop the rank scripts of the backend's tests paste in (DDP or FSDP)."""

from __future__ import annotations

import textwrap

#: ``steps`` training steps of a small MLP on ``group`` (rank-seeded data), wrapped by ``wrap``
#: (DDP by default; FSDP...): the losses and the parameters. Pasted into the rank scripts at
#: ``# @DDP_TRAIN@`` (indented as that line is).
DDP_TRAIN = """\
def ddp(model, group):
    return torch.nn.parallel.DistributedDataParallel(model, process_group=group)
def train(group, wrap=ddp, steps=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    wrapped = wrap(model, group)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen)
        loss = torch.nn.functional.mse_loss(wrapped(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    return losses, [p.detach() for p in model.parameters()]
"""


def with_ddp_train(script: str) -> str:
    """``script`` with :data:`DDP_TRAIN` in place of its ``# @DDP_TRAIN@`` line."""
    marker = "# @DDP_TRAIN@\n"
    start = script.index(marker)
    indent = script[script.rindex("\n", 0, start) + 1 : start]
    return script.replace(indent + marker, textwrap.indent(DDP_TRAIN, indent), 1)
