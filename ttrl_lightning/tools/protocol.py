"""The tool-call protocol of a policy's text: how a tool call and its observation are written and found.

A chain-of-thought-action trace (Pixelis 3.2.1) interleaves the model's own text with tool calls and the
tools' outputs, called *observations*::

    12+7=<call>add(12,7)</call><out>19</out>19<eos>
         └──── call (action) ───┘└ observation ┘

* ``CALL_START name(arg,...) CALL_END``: a tool call written by the model (action tokens, up-weighted in SFT);
* ``OBSERVATION_START result OBSERVATION_END``: what the tool returned, written by the environment (no loss
  on it; *feedback dropout* hides its content, keeping the delimiters visible);
* ``HIDDEN_OBSERVATION_TOKEN``: the token that replaces each hidden observation token (length kept).

Every part of the package that writes or reads these markers (the built-in tokenizer, the generated tasks,
the SFT DataModule and module) uses the names below; the agent loop extends this module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

CALL_START = "<call>"
CALL_END = "</call>"
OBSERVATION_START = "<out>"
OBSERVATION_END = "</out>"
HIDDEN_OBSERVATION_TOKEN = "<hid>"

#: the protocol's special tokens, in the order the built-in character tokenizer gives them ids
TOOL_TOKENS = (CALL_START, CALL_END, OBSERVATION_START, OBSERVATION_END, HIDDEN_OBSERVATION_TOKEN)

_CALL = re.compile(re.escape(CALL_START) + r"(\w+)\((.*)\)" + re.escape(CALL_END), re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call: ``name`` and its arguments as written (strings)."""

    name: str
    args: tuple[str, ...]


def format_call(name: str, *args: object) -> str:
    """``format_call("add", 12, 7)`` -> ``"<call>add(12,7)</call>"``."""
    return f"{CALL_START}{name}({','.join(str(a) for a in args)}){CALL_END}"


def parse_call(text: str) -> ToolCall:
    """The inverse of :func:`format_call` on one call; raises ``ValueError`` naming ``text`` otherwise."""
    m = _CALL.fullmatch(text)
    if m is None:
        raise ValueError(f"not a tool call {CALL_START}name(args){CALL_END}: {text!r}")
    body = m.group(2)
    return ToolCall(m.group(1), tuple(body.split(",")) if body else ())


def format_observation(result: object) -> str:
    """``format_observation(19)`` -> ``"<out>19</out>"``."""
    return f"{OBSERVATION_START}{result}{OBSERVATION_END}"


def split_observation(text: str) -> tuple[str, str, str]:
    """An observation segment -> ``(start delimiter, content, end delimiter)``.

    ``"<out>19</out>"`` -> ``("<out>", "19", "</out>")``; text without both delimiters is all content:
    ``"19"`` -> ``("", "19", "")``. Only the content is an observation span (hidden by feedback dropout);
    the delimiters stay visible, so the model still sees that a call returned.
    """
    start, end = OBSERVATION_START, OBSERVATION_END
    if text.startswith(start) and text.endswith(end) and len(text) >= len(start) + len(end):
        return start, text[len(start):len(text) - len(end)], end
    return "", text, ""
