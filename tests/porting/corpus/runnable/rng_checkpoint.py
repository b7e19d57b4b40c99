"""Save and restore every RNG state with a checkpoint, so a resumed run draws the same numbers."""

import io
import random

import torch


def rng_state():
    return {
        "python": random.getstate(),
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(),
        "cuda_generator": torch.cuda.default_generators[0].get_state(),
        "seed": torch.cuda.initial_seed(),
    }


def restore(state):
    random.setstate(state["python"])
    torch.set_rng_state(state["cpu"])
    torch.cuda.set_rng_state(state["cuda"])
    torch.cuda.default_generators[0].set_state(state["cuda_generator"])


def draw():
    return torch.rand(4, device="cuda").tolist() + [random.random()]


if __name__ == "__main__":
    torch.cuda.manual_seed_all(1234)
    buffer = io.BytesIO()
    torch.save(rng_state(), buffer)
    first = draw()
    buffer.seek(0)
    restore(torch.load(buffer, weights_only=False))
    second = draw()
    assert first == second, (first, second)
    print("OK")
