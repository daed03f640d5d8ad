"""Generated tasks for CPU training runs: arithmetic prompts with checkable answers.

Two kinds of examples, both made from a seeded ``random.Random`` (same seed, same data):

* RL prompts (``TASKS[name].prompt(rng)`` -> ``{"prompt": "12+7=", "answer": "19"}``), for GRPO/TTRL;
* SFT traces (``TASKS[name].trace(rng)`` -> a list of ``Segment``), chain-of-thought-action style
  (Pixelis 3.2.1): the prompt, tool calls ``<call>add(12,7)</call>`` (action tokens, up-weighted), tool
  outputs ``<out>19</out>`` (observations: not trained on, hidden by feedback dropout) and the final answer.
  Calls and observations are written with ``tools.protocol`` (``format_call``, ``format_observation``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.protocol import format_call, format_observation

SegmentKind = Literal["prompt", "text", "action", "observation"]


@dataclass(frozen=True)
class Segment:
    """A piece of an SFT trace. ``kind`` decides its loss weight: prompt 0, text 1, action w_act, observation 0."""

    text: str
    kind: SegmentKind


TASKS: Registry = Registry("task")

_OPS = {"+": ("add", lambda a, b: a + b), "-": ("sub", lambda a, b: a - b), "*": ("mul", lambda a, b: a * b)}


@dataclass
class ArithmeticTask:
    """``a<op>b=`` -> ``str(result)``; with ``terms=3``, ``a<op>b<op>c=`` evaluated left to right.

    ``trace`` solves it with one tool call per operation, so a 3-term problem has an earlier tool output
    in context when the second call is made.
    """

    max_operand: int = 20
    ops: str = "+-"
    terms: int = 2
    eos: str = "<eos>"

    def _draw(self, rng: random.Random) -> tuple[list[int], list[str]]:
        if self.terms < 2:
            raise ValueError(f"terms must be >= 2, got {self.terms}")
        unknown = set(self.ops) - set(_OPS)
        if unknown or not self.ops:
            raise ValueError(f"ops must be a non-empty subset of {sorted(_OPS)}, got {self.ops!r}")
        nums = [rng.randint(0, self.max_operand) for _ in range(self.terms)]
        ops = [rng.choice(self.ops) for _ in range(self.terms - 1)]
        return nums, ops

    @staticmethod
    def _question(nums: list[int], ops: list[str]) -> str:
        q = str(nums[0])
        for op, n in zip(ops, nums[1:]):
            q += f"{op}{n}"
        return q + "="

    def prompt(self, rng: random.Random) -> dict[str, str]:
        nums, ops = self._draw(rng)
        acc = nums[0]
        for op, n in zip(ops, nums[1:]):
            acc = _OPS[op][1](acc, n)
        return {"prompt": self._question(nums, ops), "answer": str(acc)}

    def trace(self, rng: random.Random) -> list[Segment]:
        nums, ops = self._draw(rng)
        segs = [Segment(self._question(nums, ops), "prompt")]
        acc = nums[0]
        for op, n in zip(ops, nums[1:]):
            name, fn = _OPS[op]
            segs.append(Segment(format_call(name, acc, n), "action"))
            acc = fn(acc, n)
            segs.append(Segment(format_observation(acc), "observation"))
        segs.append(Segment(str(acc) + self.eos, "text"))
        return segs


TASKS.register("arith", ArithmeticTask)
TASKS.register("arith3", lambda **kw: ArithmeticTask(**{"terms": 3, **kw}))


def make_task(name: str, **kwargs) -> ArithmeticTask:
    return TASKS[name](**kwargs)


def generate_prompts(task: str, n: int, seed: int, **task_kwargs) -> list[dict[str, str]]:
    """``n`` RL prompts of ``task`` from ``random.Random(seed)``."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    rng = random.Random(seed)
    t = make_task(task, **task_kwargs)
    return [t.prompt(rng) for _ in range(n)]


def generate_traces(task: str, n: int, seed: int, **task_kwargs) -> list[list[Segment]]:
    """``n`` SFT traces of ``task`` from ``random.Random(seed)``."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    rng = random.Random(seed)
    t = make_task(task, **task_kwargs)
    return [t.trace(rng) for _ in range(n)]
