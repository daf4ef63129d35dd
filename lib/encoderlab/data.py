"""Offline corpora and synthetic tasks, deterministic given a seed (Lessons 3, 5-10).

Nothing here downloads anything: every data set is built from a seed (or from
text that Python and the installed packages ship).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

__all__ = ["BigramLanguage"]


class BigramLanguage:
    """A random toy language whose best possible next-token loss is known exactly (Lesson 3, §3).

    Each of the ``vocab_size`` tokens may be followed by exactly ``branching``
    tokens (chosen at random once, from ``seed``), each with probability
    1 / branching. A sequence starts with a uniformly random token and then
    walks this table.

    Given the past, the next token is uniform over ``branching`` choices, so no
    predictor that sees only the past can have an expected next-token loss
    below ``entropy`` = ln(branching) nats. A model that beats it is reading the
    answer.
    """

    def __init__(self, vocab_size: int = 32, branching: int = 4, seed: int = 0):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}.")
        if (
            isinstance(branching, bool)
            or not isinstance(branching, int)
            or not 1 <= branching <= vocab_size
        ):
            raise ValueError(
                f"branching must be an int from 1 to vocab_size={vocab_size}, got {branching!r}."
            )
        self.vocab_size, self.branching, self.seed = vocab_size, branching, seed
        g = torch.Generator().manual_seed(seed)
        # successors[x] lists the tokens that may follow x: (V, branching), distinct in each row
        self.successors = torch.stack(
            [torch.randperm(vocab_size, generator=g)[:branching] for _ in range(vocab_size)]
        )

    @property
    def entropy(self) -> float:
        """ln(branching): the entropy of the next token given the past, in nats."""
        return math.log(self.branching)

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """A (batch_size, length) tensor of token ids drawn from the language."""
        if batch_size < 1 or length < 1:
            raise ValueError(
                f"batch_size and length must be positive, got {batch_size} and {length}."
            )
        x = torch.empty(batch_size, length, dtype=torch.long)  # (b, n)
        x[:, 0] = torch.randint(self.vocab_size, (batch_size,), generator=generator)
        for t in range(1, length):
            choice = torch.randint(self.branching, (batch_size,), generator=generator)  # (b,)
            x[:, t] = self.successors[x[:, t - 1], choice]  # one of x_{t-1}'s successors
        return x

    def batches(self, batch_size: int, length: int, seed: int = 0) -> Iterator[torch.Tensor]:
        """An endless, reproducible stream of (batch_size, length) batches."""
        g = torch.Generator().manual_seed(seed)
        while True:
            yield self.sample(batch_size, length, g)

    def is_valid(self, x: torch.Tensor) -> bool:
        """True if every step x_{t-1} -> x_t in ``x`` (b, n) is allowed by the table."""
        allowed = (self.successors[x[:, :-1]] == x[:, 1:, None]).any(dim=-1)  # (b, n-1)
        return bool(allowed.all())

    def __repr__(self) -> str:
        return (
            f"BigramLanguage(vocab_size={self.vocab_size}, branching={self.branching}, "
            f"seed={self.seed}; entropy ln {self.branching} = {self.entropy:.4f} nats)"
        )
