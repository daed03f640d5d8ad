"""A reward for the DDP test whose advantages are never all zero, on any CPU: the rows of a group alternate
0, 1, 0, 1, ... so every update moves the policy and each rank observes a KL of its own data."""
from typing import Sequence


class AlternatingReward:
    __name__ = "alternating"

    def __call__(self, *, prompts: list[str], completions: list[str], **columns) -> Sequence[float]:
        return [float(i % 2) for i in range(len(completions))]
