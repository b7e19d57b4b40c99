"""Each emulated device's generator: seeded by torch.manual_seed, per device, reproducible."""

from __future__ import annotations

import torch

from .worker import on_emulated


@on_emulated()
def test_torch_manual_seed_seeds_every_device_as_it_seeds_the_cpu() -> None:
    torch.manual_seed(7)
    expected = torch.randn(5)
    torch.manual_seed(7)
    on_zero, on_one = torch.randn(5, device="emu:0"), torch.randn(5, device="emu:1")
    assert torch.equal(on_zero.cpu(), expected) and torch.equal(on_one.cpu(), expected)


@on_emulated()
def test_each_device_has_its_own_generator() -> None:
    torch.emu.manual_seed_all(1)
    torch.emu.set_device(1)
    try:
        torch.emu.manual_seed(2)  # the current device only
    finally:
        torch.emu.set_device(0)
    on_zero = torch.rand(4, device="emu:0").cpu()
    on_one = torch.rand(4, device="emu:1").cpu()
    torch.emu.manual_seed_all(1)
    assert torch.equal(torch.rand(4, device="emu:0").cpu(), on_zero)
    assert not torch.equal(torch.rand(4, device="emu:1").cpu(), on_one)
    assert torch.emu.default_generators[1].initial_seed() == 1


@on_emulated()
def test_rng_state_restores_the_sequence() -> None:
    torch.emu.manual_seed(3)
    state = torch.emu.get_rng_state("emu:1")
    first = torch.randn(3, device="emu:1").cpu()
    torch.emu.set_rng_state(state, "emu:1")
    assert torch.equal(torch.randn(3, device="emu:1").cpu(), first)
    states = torch.emu.get_rng_state_all()
    second = torch.rand(2, device="emu:0").cpu()
    torch.emu.set_rng_state_all(states)
    assert torch.equal(torch.rand(2, device="emu:0").cpu(), second)
    assert state.dtype == torch.uint8 and state.device == torch.device("cpu")


@on_emulated()
def test_a_device_generator_object_drives_ops_given_it() -> None:
    generator = torch.Generator(device="emu:1").manual_seed(11)
    assert generator.device == torch.device("emu:1")
    drawn = torch.randn(4, device="emu:1", generator=generator).cpu()
    assert torch.equal(drawn, torch.randn(4, generator=torch.Generator().manual_seed(11)))


@on_emulated()
def test_dropout_draws_from_the_device_generator() -> None:
    ones = torch.ones(64, device="emu:0")
    torch.manual_seed(100)  # seeds the devices too; the CPU's state must then not matter
    torch.emu.manual_seed(5)
    first = torch.nn.functional.dropout(ones, 0.5).cpu()
    torch.manual_seed(200)
    torch.emu.manual_seed(5)
    second = torch.nn.functional.dropout(ones, 0.5).cpu()
    assert torch.equal(first, second)
    assert 0 < int((first == 0).sum()) < 64


@on_emulated()
def test_seed_all_gives_every_device_one_random_seed() -> None:
    torch.emu.seed_all()
    seeds = {generator.initial_seed() for generator in torch.emu.default_generators}
    assert len(seeds) == 1


@on_emulated()
def test_a_cpu_generator_for_device_tensors_is_refused_as_on_cuda() -> None:
    import pytest

    with pytest.raises(
        RuntimeError, match="Expected a 'emu' device type for generator but found 'cpu'"
    ):
        torch.randn(4, device="emu:0", generator=torch.Generator().manual_seed(0))
