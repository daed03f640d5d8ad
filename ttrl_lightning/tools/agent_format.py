"""What the pixel agent reads and writes as text: its prompt, the observation it is shown, its final answer.

One place for the strings that the CoTA traces (``data.cota``) and the agent rollout engine
(``rollout.agent``) must agree on, and for :class:`AgentPrompt`, the record of a prompt and its pixels (here, under
``tools``, so that both ``data`` and ``rollout`` read it from below)::

    Q: What colour is the triangle?\\n                                    <- AGENT_PROMPT (prompt)
    I check the triangle with PROP.\\n                                    <- thought (text)
    <tool_call>{"arguments":{"query":"triangle"},"name":"PROP"}</tool_call>  <- call (action)
    <out>{"area":0.0131,"box":[...],"colour":"red",...}</out>              <- observation (no loss)
    Answer: red<eos>                                                     <- answer (text)

The observation is ``observation_view(obs)``: the tool's canonical JSON (Pixelis 3.2: coordinates at
1e-2) without the ``mask`` entries. A text model cannot read a run-length mask and it would be most of the
tokens (a SEG call on three shapes: ~260 characters with masks, ~90 without); the full artifact, masks
included, stays in the trajectory record (``ToolSession.steps``) that replay checks. A VLM would be shown
masks and crops as image tokens instead (docs/agent.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ttrl_lightning.tools.observation import Observation
from ttrl_lightning.tools.protocol import OBSERVATION_END, OBSERVATION_START, TOOL_CALL_END, TOOL_CALL_START

#: the agent's prompt; ``{question}`` is the task's question
AGENT_PROMPT = "Q: {question}\n"
#: how the agent writes its final answer (after its last observation)
ANSWER_PREFIX = "Answer: "
#: artifact keys left out of the text an agent is shown
HIDDEN_ARTIFACT_KEYS = frozenset({"mask"})

_ANSWER = re.compile(re.escape(ANSWER_PREFIX.strip()) + r"[ \t]*([^\n<]*)")


def agent_prompt(question: str) -> str:
    """``AGENT_PROMPT`` filled with ``question``."""
    return AGENT_PROMPT.format(question=question)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in HIDDEN_ARTIFACT_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def observation_view(obs: Observation) -> str:
    """The text an agent is shown for ``obs``: the canonical JSON of the artifact without ``mask`` entries
    (sorted keys, no spaces), or the error JSON ``{"error", "message"}`` of a failed call as is."""
    if not obs.ok:
        return obs.text
    return json.dumps(_strip(obs.artifact), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def format_agent_observation(obs: Observation) -> str:
    """``<out>`` + :func:`observation_view` + ``</out>`` (the observation segment of a trace)."""
    return f"{OBSERVATION_START}{observation_view(obs)}{OBSERVATION_END}"


def final_answer(completion: str) -> str | None:
    """The agent's answer: what follows the last ``Answer:`` after the last observation (up to the line's
    end), stripped; None when there is none. ``"...</out>Answer: red"`` -> ``"red"``."""
    tail = completion.rsplit(OBSERVATION_END, 1)[-1]
    hits = _ANSWER.findall(tail)
    if not hits:
        return None
    answer = hits[-1].strip()
    return answer or None


def answers_match(answer: str | None, gold: str) -> bool:
    """Case- and space-insensitive equality of an agent answer with the task's answer."""
    if answer is None:
        return False
    return " ".join(answer.lower().split()) == " ".join(str(gold).lower().split())


def last_call_text(text: str) -> str:
    """The call the model just wrote: from the last ``<tool_call>`` to the end of ``text`` (which ends with
    ``</tool_call>``), or the text's last 200 characters when it has no ``<tool_call>`` (then the call
    fails to parse and the agent sees a ``bad_call`` observation)."""
    start = text.rfind(TOOL_CALL_START)
    if start < 0:
        return text[-200:]
    end = text.find(TOOL_CALL_END, start)
    return text[start:end + len(TOOL_CALL_END)] if end >= 0 else text[start:]


class AgentPrompt:
    """The prompt of one agent task and the pixels its tools read: ``text`` (the question in
    :data:`AGENT_PROMPT`'s form), ``image`` (HxWx3 uint8 / PIL), ``frames`` (a list of them) and ``source``
    (JSON-able, e.g. ``{"kind": "count", "seed": 0, "index": 3}``: where the pixels come from, for replay and
    for sharing tool results across calls).

    A read-only record, not a ``str``: the pixels are named fields, so no string operation can drop them (a
    string operation on it fails). It compares by identity (its pixels are arrays). Not a dataclass either, so
    Lightning moves a batch of them to the device as they are (its collection walk rebuilds dataclasses)."""

    __slots__ = ("text", "image", "frames", "source")

    def __init__(self, text: str, *, image: Any = None, frames: Any = None, source: dict | None = None):
        if not isinstance(text, str):
            raise TypeError(f"AgentPrompt.text must be a str, got {type(text).__name__}")
        for name, value in (("text", text), ("image", image), ("frames", frames), ("source", source)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"AgentPrompt is read-only: cannot set {name!r}")

    def __reduce__(self):  # pickled (a DataLoader worker, a spawned process) with its pixels
        return (_agent_prompt, (self.text, self.image, self.frames, self.source))

    def __repr__(self) -> str:
        pixels = "image" if self.image is not None else f"{len(self.frames)} frames" if self.frames else "no pixels"
        return f"AgentPrompt({self.text!r}, {pixels}, source={self.source!r})"

    @classmethod
    def of(cls, prompt) -> "AgentPrompt":
        """``prompt`` as an :class:`AgentPrompt`: one as it is, a plain ``str`` as a prompt without pixels (a
        string carries none, so nothing is dropped)."""
        if isinstance(prompt, cls):
            return prompt
        if type(prompt) is str:
            return cls(prompt)
        raise TypeError(f"the agent engine samples AgentPrompts or str prompts, got {type(prompt).__name__}")


def _agent_prompt(text, image, frames, source) -> AgentPrompt:
    return AgentPrompt(text, image=image, frames=frames, source=source)
