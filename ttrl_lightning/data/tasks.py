"""Generated tasks for CPU training runs: arithmetic prompts with checkable answers.

Two kinds of examples, both made from a seeded ``random.Random`` (same seed, same data):

* RL prompts (``TASKS[name].prompt(rng)`` -> ``{"prompt": "12+7=", "gold": "19"}``), for GRPO/TTRL;
* SFT traces (``TASKS[name].trace(rng)`` -> a list of ``Segment``), chain-of-thought-action style
  (Pixelis 3.2.1): the prompt, tool calls ``<call>add(12,7)</call>`` (action tokens, up-weighted), tool
  outputs ``<out>19</out>`` (observations: not trained on, hidden by feedback dropout) and the final answer.
  Calls and observations are written with ``tools.protocol`` (``format_call``, ``format_observation``).

``add2`` (``AdditionTask``) is the TTRL demo's task: two-number addition whose SFT traces teach the Solver
format and the fused Reframe-and-Solve format of Self-Harmony (``FUSED_PROMPT_TEMPLATE``), with carry
settings that draw a shifted, unlabeled test split (``add2_carry``).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ttrl_lightning.answers.fused_format import fused_template
from ttrl_lightning.errors import UserError
from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.protocol import format_call, format_observation

SegmentKind = Literal["prompt", "text", "action", "observation", "image"]


@dataclass(frozen=True)
class Segment:
    """A piece of an SFT trace. ``kind`` decides its loss weight: prompt 0, text 1, action w_act, observation 0,
    image 0. An ``image`` segment carries its pixels in ``image`` (its ``text`` is Qwen's placeholder): a
    vision-language model sees it as vision tokens, a text model not at all (``encode_trace``)."""

    text: str
    kind: SegmentKind
    image: Any = field(default=None, compare=False, repr=False)


TASKS: Registry = Registry("task")

#: the largest operand a generated task draws (13 digits): a question is a short prompt, and a config read from a
#: question file's ``generator`` record is drawn again (``data.splits``), so its cost is bounded where it is read
MAX_OPERAND = 10**12
#: the most terms of an ``arith`` problem, and the longest ``eos`` / ``ops`` string a task takes
MAX_TERMS = 64
MAX_TEXT = 64
#: the most rejection draws ``add2`` may take for one problem
MAX_DRAWS = 100_000


class TaskConfigError(UserError):
    """A generated task's setting outside the range the task can draw from (one line: the setting and its range)."""


def _setting(value, name: str, low: int, high: int | None) -> int:
    """``value`` as an integer setting in ``[low, high]`` (None: no upper bound), else :class:`TaskConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        rule = f"in [{low:,}, {high:,}]" if high is not None else f">= {low:,}"
        raise TaskConfigError(f"{name} must be an integer {rule}, got {value!r}"[:300])
    return value


def _text_setting(value, name: str, empty: bool = True) -> str:
    """``value`` as a string setting of at most :data:`MAX_TEXT` characters."""
    if not isinstance(value, str) or len(value) > MAX_TEXT or (not empty and not value):
        raise TaskConfigError(f"{name} must be a{'' if empty else ' non-empty'} string of at most {MAX_TEXT} "
                              f"characters, got {value!r}"[:300])
    return value

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

    def __post_init__(self) -> None:
        """Every setting within what a question can be (:data:`MAX_OPERAND`, :data:`MAX_TERMS`), else one
        :class:`TaskConfigError`, before anything is drawn."""
        _setting(self.max_operand, "max_operand", 0, MAX_OPERAND)
        _setting(self.terms, "terms", 2, MAX_TERMS)
        _text_setting(self.eos, "eos")
        if not isinstance(self.ops, str) or not self.ops or len(self.ops) > MAX_TEXT or set(self.ops) - set(_OPS):
            raise TaskConfigError(f"ops must be a non-empty string of {', '.join(sorted(_OPS))} (at most {MAX_TEXT} "
                                  f"characters), got {self.ops!r}"[:300])

    def _draw(self, rng: random.Random) -> tuple[list[int], list[str]]:
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
        return {"prompt": self._question(nums, ops), "gold": str(acc)}

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


# ----------------------------------------------------------------------------------------------------------
# Two-number addition with a Solver format and the fused Reframe-and-Solve format (Self-Harmony)
# ----------------------------------------------------------------------------------------------------------
#: prompt of the fused Reframe-and-Solve view; ``{prompt}`` is the Solver prompt (``"12+7="``). A TTRL
#: config uses the same string as its fused prompt template.
FUSED_PROMPT_TEMPLATE = "{prompt} reframe:"
#: how both formats write the final answer: ``answers.extract_answer`` reads it (rule 1, the last box)
ANSWER_TEMPLATE = "\\boxed{{{answer}}}"

#: meaning-preserving reframings of ``a+b=``: name (the fused output's STRATEGY, one short word) ->
#: ``(a, b) -> the rewritten question``
REFRAMINGS: Registry = Registry("reframing")
REFRAMINGS.register("swap", lambda a, b: f"{b}+{a}=")  # addition commutes: b+a = a+b


def count_carries(a: int, b: int) -> int:
    """Number of digit columns of ``a + b`` (a, b >= 0) that carry into the next column."""
    if a < 0 or b < 0:
        raise ValueError(f"operands must be >= 0, got {a}, {b}")
    carries = carry = 0
    while a or b:
        carry = int(a % 10 + b % 10 + carry >= 10)
        carries += carry
        a, b = a // 10, b // 10
    return carries


@dataclass
class AdditionTask:
    """``a+b=`` -> ``\\boxed{a+b}``, with operands in ``[min_operand, max_operand]`` and a number of
    carries (``count_carries``) in ``[min_carries, max_carries]`` (None: no upper bound), drawn by rejection;
    ``carry_weights[k]``: relative share of problems with ``k`` carries (None: the share among uniform pairs;
    for 0..99 that is 30% / 45% / 25% for 0 / 1 / 2 carries).

    The carry settings draw a shifted split from the same operand range: e.g. SFT on problems where two
    carries are rare, an unlabeled test split where every problem has two (the ``"add2_carry"`` task).

    Two formats, both ending in ``ANSWER_TEMPLATE``:

    * Solver: prompt ``"12+7="``, completion ``"\\boxed{19}<eos>"`` (``prompt`` gives the RL row
      ``{"prompt": "12+7=", "gold": "19"}``);
    * fused Reframe-and-Solve (Self-Harmony): prompt ``FUSED_PROMPT_TEMPLATE.format(prompt="12+7=")``,
      completion ``pseudo_labels.fused_template("swap", "7+12=", "\\boxed{19}") + "<eos>"``: the strategy
      ``reframing`` (a name of ``REFRAMINGS``) rewrites the question with the same answer, then solves it.

    ``trace`` writes the fused format with probability ``fused_share``, else the Solver format.
    """

    min_operand: int = 0
    max_operand: int = 99
    min_carries: int = 0
    max_carries: int | None = None
    carry_weights: tuple[float, ...] | None = None
    reframing: str = "swap"
    fused_share: float = 0.5
    eos: str = "<eos>"
    max_draws: int = 10_000

    def __post_init__(self) -> None:
        """Every setting within what the task can draw, else one :class:`TaskConfigError` before anything is
        drawn: operands up to :data:`MAX_OPERAND`, a number of carries that operands of that many digits can
        have (``min_carries: 50`` on two-digit operands can never be drawn), at most :data:`MAX_DRAWS` draws."""
        _setting(self.min_operand, "min_operand", 0, MAX_OPERAND)
        _setting(self.max_operand, "max_operand", 0, MAX_OPERAND)
        if not self.min_operand <= self.max_operand:
            raise TaskConfigError(f"need 0 <= min_operand <= max_operand, got {self.min_operand}, {self.max_operand}")
        columns = len(str(self.max_operand))  # a column carries at most once: a + b has at most this many carries
        _setting(self.min_carries, "min_carries", 0, columns)
        if self.max_carries is not None:
            _setting(self.max_carries, "max_carries", 0, None)
            if self.max_carries < self.min_carries:
                raise TaskConfigError(f"need 0 <= min_carries <= max_carries, got {self.min_carries}, "
                                      f"{self.max_carries}")
        _setting(self.max_draws, "max_draws", 1, MAX_DRAWS)
        _text_setting(self.eos, "eos")
        _text_setting(self.reframing, "reframing", empty=False)
        if self.carry_weights is not None:
            w = self.carry_weights
            if (isinstance(w, (str, bytes, dict)) or not hasattr(w, "__len__") or not len(w) or len(w) > MAX_TERMS
                    or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < float("inf")
                           for x in w)):
                raise TaskConfigError(f"carry_weights must be a list of 1 to {MAX_TERMS} finite numbers >= 0, "
                                      f"got {w!r}"[:300])
            self.carry_weights = tuple(float(x) for x in w)
            if not any(x > 0 and self._carries_allowed(k) for k, x in enumerate(self.carry_weights)):
                raise TaskConfigError(f"carry_weights {list(w)} give no weight to a number of carries in "
                                      f"[{self.min_carries}, {self.max_carries}]")
        if isinstance(self.fused_share, bool) or not isinstance(self.fused_share, (int, float)) \
                or not 0 <= self.fused_share <= 1:
            raise TaskConfigError(f"fused_share must be in [0, 1], got {self.fused_share!r}")
        REFRAMINGS[self.reframing]  # unknown name: KeyError listing the known ones

    def _carries_allowed(self, c: int) -> bool:
        return c >= self.min_carries and (self.max_carries is None or c <= self.max_carries)

    def draw(self, rng: random.Random) -> tuple[int, int]:
        """Operands ``(a, b)``: uniform over the pairs of the range whose carries are within bounds; with
        ``carry_weights``, first the number of carries ``k`` (weight ``carry_weights[k]``, bounds applied),
        then a pair uniform among those with ``k`` carries."""
        want = None
        if self.carry_weights is not None:
            w = [x if self._carries_allowed(k) else 0.0 for k, x in enumerate(self.carry_weights)]
            want = rng.choices(range(len(w)), weights=w)[0]
        for _ in range(self.max_draws):
            a = rng.randint(self.min_operand, self.max_operand)
            b = rng.randint(self.min_operand, self.max_operand)
            c = count_carries(a, b)
            if c == want if want is not None else self._carries_allowed(c):
                return a, b
        wanted = f"{want}" if want is not None else f"in [{self.min_carries}, {self.max_carries}]"
        raise TaskConfigError(f"no operands in [{self.min_operand}, {self.max_operand}] with carries {wanted} "
                         f"after {self.max_draws} draws")

    @staticmethod
    def question(a: int, b: int) -> str:
        return f"{a}+{b}="

    @staticmethod
    def answer_text(a: int, b: int) -> str:
        return ANSWER_TEMPLATE.format(answer=a + b)

    def reframe(self, a: int, b: int) -> tuple[str, str]:
        """``(strategy, rewritten question)`` of ``a+b=`` under ``reframing``."""
        return self.reframing, REFRAMINGS[self.reframing](a, b)

    def fused_completion(self, a: int, b: int) -> str:
        """The fused Reframe-and-Solve output for ``a+b=`` (without EOS)."""
        strategy, rewritten = self.reframe(a, b)
        return fused_template(strategy, rewritten, self.answer_text(a, b))

    def prompt(self, rng: random.Random) -> dict[str, str]:
        a, b = self.draw(rng)
        return {"prompt": self.question(a, b), "gold": str(a + b)}

    def trace(self, rng: random.Random) -> list[Segment]:
        a, b = self.draw(rng)
        if rng.random() < self.fused_share:
            prompt = FUSED_PROMPT_TEMPLATE.format(prompt=self.question(a, b))
            return [Segment(prompt, "prompt"), Segment(self.fused_completion(a, b) + self.eos, "text")]
        return [Segment(self.question(a, b), "prompt"), Segment(self.answer_text(a, b) + self.eos, "text")]


TASKS.register("add2", AdditionTask)
TASKS.register("add2_carry", lambda **kw: AdditionTask(**{"min_carries": 2, **kw}))


_REWRITTEN = re.compile(r"^REWRITTEN PROBLEM:[ \t]*(.+?)[ \t]*$", re.MULTILINE)


def trace_problems(trace: list[Segment]) -> list[str]:
    """The questions an SFT trace shows answered, as a question file would hold them: its prompt (the Solver
    prompt, or the one inside the fused prompt ``FUSED_PROMPT_TEMPLATE``), and in a fused trace also its
    REWRITTEN PROBLEM (``7+12=`` for ``12+7=``: the trace shows that question's answer too). A trace without a
    prompt segment shows none. The SFT exclusion compares them by problem (``data.splits.question_key``), so a
    Solver trace of ``7+12=`` shows ``12+7=`` answered too."""
    prompts = [seg.text for seg in trace if seg.kind == "prompt"]
    if not prompts:
        return []
    head, tail = FUSED_PROMPT_TEMPLATE.split("{prompt}")
    first = prompts[0]
    out = [first]
    if first.startswith(head) and first.endswith(tail) and len(first) > len(head) + len(tail):
        out = [first[len(head):len(first) - len(tail)]]
    out += [m.group(1) for seg in trace if seg.kind == "text" for m in _REWRITTEN.finditer(seg.text)]
    return list(dict.fromkeys(out))


def make_task(name: str, **kwargs):
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
