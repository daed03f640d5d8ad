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


# --- JSON tool calls (the Qwen / DeepEyes convention of the pixel tools) ---------------------------------
#: a pixel-tool call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen2-VL chat template)
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

#: the deepest JSON nesting a call may have (a call is an object of flat lists; deeper text is not a call)
MAX_CALL_DEPTH = 8


def format_tool_call(name: str, arguments: dict) -> str:
    """``format_tool_call("ZOOM", {"box": [0.1, 0.2, 0.5, 0.6]})`` ->
    ``'<tool_call>{"arguments":{"box":[0.1,0.2,0.5,0.6]},"name":"ZOOM"}</tool_call>'`` (canonical JSON)."""
    import json

    body = json.dumps({"name": name, "arguments": arguments}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)
    return f"{TOOL_CALL_START}{body}{TOOL_CALL_END}"


def _depth(text: str) -> int:
    depth = best = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped = not escaped and ch == "\\"
            if ch == '"' and not escaped:
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def parse_tool_call(text: str) -> tuple[str, dict]:
    """``<tool_call>{json}</tool_call>`` (surrounding whitespace allowed) -> ``(name, arguments)``.

    The body is read with ``json.loads`` only (never evaluated); raises ``ValueError`` naming what is wrong:
    missing delimiters, invalid JSON, nesting deeper than :data:`MAX_CALL_DEPTH`, no string ``name``, or
    ``arguments`` that is not an object (absent ``arguments`` means ``{}``).
    """
    import json

    text = text.strip()
    if not (text.startswith(TOOL_CALL_START) and text.endswith(TOOL_CALL_END)):
        raise ValueError(f"not a tool call {TOOL_CALL_START}{{json}}{TOOL_CALL_END}: {text[:80]!r}")
    body = text[len(TOOL_CALL_START):len(text) - len(TOOL_CALL_END)]
    if _depth(body) > MAX_CALL_DEPTH:
        raise ValueError(f"tool call JSON nests deeper than {MAX_CALL_DEPTH}")
    try:
        call = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"tool call body is not valid JSON: {err}") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError("tool call JSON needs an object with a string \"name\"")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ValueError("tool call \"arguments\" must be a JSON object")
    extra = sorted(set(call) - {"name", "arguments"})
    if extra:
        raise ValueError(f"tool call JSON has unknown keys {', '.join(map(str, extra))}")
    return call["name"], arguments
