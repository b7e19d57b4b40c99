"""Parameter shapes the GPU checks train: GPT-2 small's 148 tensors, and many small ones."""

from __future__ import annotations

import torch


def gpt2_small_shapes() -> list[tuple[int, ...]]:
    """GPT-2 small's (124M) parameter shapes, as Hugging Face's ``GPT2LMHeadModel`` lists them.

    Token and position embeddings, 12 blocks of (ln_1, attention qkv and projection, ln_2,
    MLP up and down, each weight and bias) and the final layer norm: 2 + 12 * 12 + 2 = 148.
    """
    width, vocabulary, positions = 768, 50257, 1024
    shapes: list[tuple[int, ...]] = [(vocabulary, width), (positions, width)]
    for _block in range(12):
        shapes += [(width,), (width,)]  # ln_1
        shapes += [(width, 3 * width), (3 * width,)]  # attn.c_attn
        shapes += [(width, width), (width,)]  # attn.c_proj
        shapes += [(width,), (width,)]  # ln_2
        shapes += [(width, 4 * width), (4 * width,)]  # mlp.c_fc
        shapes += [(4 * width, width), (width,)]  # mlp.c_proj
    shapes += [(width,), (width,)]  # ln_f
    return shapes


def small_shapes(count: int = 1000, seed: int = 0) -> list[tuple[int, ...]]:
    """``count`` 1-D shapes of 1 to 4096 elements, the same on every run."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 4097, (count,), generator=generator).tolist()
    return [(int(size),) for size in sizes]


#: The parameter sets every optimizer check runs over.
SHAPE_SETS: dict[str, list[tuple[int, ...]]] = {
    "one-tensor": [(1 << 20,)],
    "gpt2-small": gpt2_small_shapes(),
    "1000-small": small_shapes(),
}
