"""A parameter listed twice in one group: torch warns and steps it twice on one shared state.

torch's per-parameter loop steps each occurrence in turn (the second sees the first's result and
a step count one higher); ours step the group in rounds, one occurrence of each per round.
"""

from __future__ import annotations

import pytest
import torch

from .optim_reference import PAIRS

NAMES = list(PAIRS)


def twins(seed: int = 0) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """Two identical parameter lists, each listing its first parameter twice (a, b, a, c)."""
    lists = []
    for _ in range(2):
        torch.manual_seed(seed)
        a, b, c = (torch.nn.Parameter(torch.randn(n)) for n in (50, 70_001, 7))
        lists.append([a, b, a, c])
    return lists[0], lists[1]


@pytest.mark.parametrize("name", NAMES)
def test_a_parameter_listed_twice_is_stepped_as_torch_steps_it(name: str) -> None:
    ours_factory, torch_factory = PAIRS[name]
    ours, theirs = twins()
    with pytest.warns(UserWarning, match="duplicate parameters"):
        optimizer = ours_factory(ours)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        reference = torch_factory(theirs)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p, q in zip(ours[1:], theirs[1:], strict=True):  # a, b, c (a's twin shares .grad)
            grad = torch.randn(p.shape, generator=generator)
            p.grad, q.grad = grad, grad.clone()
        optimizer.step()
        reference.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
    assert len(optimizer.state) == 3  # one shared state for the twice-listed parameter
    if "step" in reference.state[theirs[0]]:
        assert float(optimizer.state[ours[0]]["step"]) == float(reference.state[theirs[0]]["step"])
        assert float(optimizer.state[ours[0]]["step"]) == 6.0


def test_a_bad_second_occurrence_copy_is_refused_before_the_first_round_moves() -> None:
    from anyaccel.ops.adam import CPUAdam

    ours, _ = twins()
    for param in ours:
        param.grad = torch.ones_like(param)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        optimizer = CPUAdam(ours)
    before = [p.detach().clone() for p in ours]
    copies = [None, None, torch.zeros(3, dtype=torch.bfloat16), None]  # wrong size, round 2
    with pytest.raises(ValueError, match=r"copy of shape \(3,\)"):
        optimizer.step(fp16_param_groups=copies)
    assert all(torch.equal(p.detach(), b) for p, b in zip(ours, before, strict=True))
    assert not optimizer.state


def test_sparse_adagrad_steps_a_twice_listed_embedding_twice_like_torch() -> None:
    from anyaccel.ops.adagrad import CPUAdagrad

    grad = torch.sparse_coo_tensor(
        torch.tensor([[0, 3]]), torch.ones(2, 4), (5, 4), check_invariants=True
    )
    results = []
    for factory in (CPUAdagrad, torch.optim.Adagrad):
        weight = torch.nn.Parameter(torch.ones(5, 4))
        weight.grad = grad.clone()
        with pytest.warns(UserWarning, match="duplicate parameters"):
            optimizer = factory([weight, weight], lr=0.1)
        optimizer.step()
        results.append(weight.detach().clone())
    torch.testing.assert_close(results[0], results[1])
