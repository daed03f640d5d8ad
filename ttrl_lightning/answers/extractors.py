"""Answer extractors by name: how a completion's final answer is read, chosen per task or dataset.

``ANSWER_EXTRACTORS[name](text, choices) -> str`` (:data:`~.label.NO_ANSWER` when nothing is found):

* ``final_answer`` (default): :func:`~.extract.extract_answer`, VisConf appendix A (last ``\\boxed{..}``,
  then "The answer is X" / "Answer: X" phrases) -- for models prompted to state their answer;
* ``last_number``: the last integer or decimal number of the text (``"19"``, ``"SOLUTION: -4"``,
  ``"... so 2.5"``), for the generated arithmetic tasks and answer formats such as GSM8K's ``#### 42``;
  commas between digit groups are removed first (``1,234`` -> ``1234``);
* ``agent_answer``: a tool-using agent's answer (``tools.agent_format.final_answer``: the last
  ``Answer:`` line after the last observation), lower-cased with its spaces collapsed as
  ``agent_format.answers_match`` compares them, so the votes group as the agent's accuracy counts them.

Training (``TTRLModule(voting={"answer_extractor": ...})``) and evaluation (``ttrl eval --answer-extractor``) read the
answers with the same extractor, so labels, rewards and accuracies agree.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

from ..registry import Registry
from .extract import extract_answer
from .label import NO_ANSWER

__all__ = ["ANSWER_EXTRACTORS", "NUMBER", "last_number", "agent_answer", "get_extractor"]

ANSWER_EXTRACTORS: Registry[Callable[..., str]] = Registry("answer extractor")
ANSWER_EXTRACTORS.register("final_answer", extract_answer)

#: an integer or decimal number (optional minus), the unit ``last_number`` reads
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_DIGIT_GROUP_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")


@ANSWER_EXTRACTORS.register("last_number")
def last_number(text: str | None, choices: Mapping[str, str] | Sequence[str] | None = None) -> str:
    """The last number in ``text`` (see the module docstring); ``choices`` is accepted and unused."""
    if text is None:
        return NO_ANSWER
    if not isinstance(text, str):
        raise TypeError(f"last_number expects text as str or None, got {type(text).__name__}")
    found = NUMBER.findall(_DIGIT_GROUP_COMMA.sub("", text))
    return found[-1] if found else NO_ANSWER


@ANSWER_EXTRACTORS.register("agent_answer")
def agent_answer(text: str | None, choices: Mapping[str, str] | Sequence[str] | None = None) -> str:
    """The agent's final answer, normalised (see the module docstring); ``choices`` is accepted and unused."""
    from ttrl_lightning.tools.agent_format import final_answer

    answer = final_answer(text) if text is not None else None
    return " ".join(answer.lower().split()) if answer else NO_ANSWER


def get_extractor(name: str) -> Callable[..., str]:
    """The extractor ``name`` (``KeyError`` listing the known ones)."""
    return ANSWER_EXTRACTORS[name]
