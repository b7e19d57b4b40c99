"""Sparse gradients (nn.Embedding(sparse=True)) in CPU Adagrad: what torch.optim.Adagrad gives."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from anyaccel.ops.adagrad import CPUAdagrad, DeepSpeedCPUAdagrad

#: Batches of token ids, with repeats inside a batch and across batches.
BATCHES = [[1, 1, 3, 1], [0, 9, 9], [3, 4, 5, 3, 3], [7], [1, 2, 1, 2, 8, 8, 8]]


class Model(torch.nn.Module):
    """A sparse embedding and a dense layer over it."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.embedding = torch.nn.Embedding(10, 6, sparse=True)
        self.linear = torch.nn.Linear(6, 1)
        with torch.no_grad():
            for param in self.parameters():
                param.copy_(torch.randn(param.shape, generator=generator))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.linear(self.embedding(ids)).pow(2).sum()


def train(make: Any, model: Model | None = None, epochs: int = 2) -> Model:
    """Train a fresh model on the batches; return it."""
    model = model or Model()
    optimizer = make(model)
    for _ in range(epochs):
        for ids in BATCHES:
            optimizer.zero_grad()
            model(torch.tensor(ids)).backward()
            optimizer.step()
    return model


@pytest.mark.parametrize(
    "options",
    [{}, {"lr_decay": 0.1}, {"maximize": True}, {"initial_accumulator_value": 0.3}, {"eps": 1e-2}],
    ids=str,
)
def test_embedding_rows_match_torch_adagrad_exactly(options: dict[str, Any]) -> None:
    ours = train(lambda m: CPUAdagrad(m.embedding.parameters(), lr=0.1, **options))
    torch_ = train(lambda m: torch.optim.Adagrad(m.embedding.parameters(), lr=0.1, **options))
    assert torch.equal(ours.embedding.weight, torch_.embedding.weight)


def test_a_model_mixing_sparse_and_dense_gradients_matches_torch() -> None:
    ours = train(lambda m: CPUAdagrad(m.parameters(), lr=0.1))
    torch_ = train(lambda m: torch.optim.Adagrad(m.parameters(), lr=0.1))
    for got, want in zip(ours.parameters(), torch_.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_deepspeed_adagrad_takes_sparse_gradients_as_torch_does() -> None:
    ours = train(lambda m: DeepSpeedCPUAdagrad(m.embedding.parameters(), lr=0.1, eps=1e-8))
    torch_ = train(lambda m: torch.optim.Adagrad(m.embedding.parameters(), lr=0.1, eps=1e-8))
    assert torch.equal(ours.embedding.weight, torch_.embedding.weight)


def test_sparse_state_round_trips_through_a_torch_checkpoint() -> None:
    models = {"torch": Model(), "ours": Model()}
    torch_opt = torch.optim.Adagrad(models["torch"].embedding.parameters(), lr=0.1)
    train(lambda m: torch_opt, model=models["torch"], epochs=1)
    models["ours"].load_state_dict(models["torch"].state_dict())
    ours_opt = CPUAdagrad(models["ours"].embedding.parameters())
    ours_opt.load_state_dict(copy.deepcopy(torch_opt.state_dict()))  # as torch.save would
    train(lambda m: torch_opt, model=models["torch"], epochs=1)
    train(lambda m: ours_opt, model=models["ours"], epochs=1)
    assert torch.equal(models["ours"].embedding.weight, models["torch"].embedding.weight)


def test_weight_decay_with_a_sparse_gradient_is_refused_before_anything_moves() -> None:
    model = Model()
    optimizer = CPUAdagrad(model.parameters(), lr=0.1, weight_decay=0.1)
    model(torch.tensor([1, 2])).backward()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match=r"index 0: weight_decay=0\.1 is not compatible"):
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not optimizer.state
    assert model.embedding.weight.grad is not None and model.embedding.weight.grad.is_sparse


def test_a_low_precision_copy_of_a_sparse_parameter_is_refreshed() -> None:
    model = Model()
    weight = model.embedding.weight
    copy = torch.zeros_like(weight, dtype=torch.bfloat16)
    optimizer = CPUAdagrad([weight], lr=0.1)
    model(torch.tensor([4, 4, 2])).backward()
    optimizer.step(fp16_param_groups=[copy])
    assert torch.equal(copy, weight.detach().to(torch.bfloat16))


def test_a_sparse_gradient_on_a_low_precision_parameter_is_refused_naming_it() -> None:
    embedding = torch.nn.Embedding(5, 2, sparse=True).to(torch.bfloat16)
    embedding(torch.tensor([1, 1])).sum().backward()
    with pytest.raises(TypeError, match="index 0: sparse gradients are supported for fp32"):
        CPUAdagrad(embedding.parameters()).step()
