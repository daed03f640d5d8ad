"""Tools of the policy: the call / observation protocol (``protocol``) and the pixel tools of Pixelis.

``from ttrl_lightning.tools import TOOLS, run_tool``; ``run_tool(name, args, *, image=None, frames=None)``
returns an :class:`Observation` ``(ok, artifact, error, text)``. The tools: SEG, ZOOM (alias CROP), TRK, OCR
(alias READ), TEMP, PROP (see docs/tools.md). Their backends (OpenCV, PP-OCR, ByteTrack) import lazily from
the ``tools`` extra. :mod:`.agent_format` is the agent's text format (prompt, observation, final answer) and
``AgentPrompt``, shared by the CoTA traces (``data.cota``) and the agent engine (``rollout.agent``).
"""

from ttrl_lightning.tools import ocr, prop, seg, temporal, track, zoom  # noqa: F401  (registers the tools)
from ttrl_lightning.tools.arguments import Arg, check_arguments
from ttrl_lightning.tools.base import ALIASES, TOOLS, Tool, ToolContext
from ttrl_lightning.tools.observation import ERROR_CODES, Observation, ToolError
from ttrl_lightning.tools.protocol import (
    CALL_END,
    CALL_START,
    HIDDEN_OBSERVATION_TOKEN,
    OBSERVATION_END,
    OBSERVATION_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TOOL_TOKENS,
    ToolCall,
    format_call,
    format_observation,
    format_tool_call,
    parse_call,
    parse_tool_call,
    split_observation,
)
from ttrl_lightning.tools.run import ToolSession, replay, run_call, run_tool

__all__ = [
    "ALIASES",
    "Arg",
    "CALL_END",
    "CALL_START",
    "ERROR_CODES",
    "HIDDEN_OBSERVATION_TOKEN",
    "OBSERVATION_END",
    "OBSERVATION_START",
    "Observation",
    "TOOLS",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "TOOL_TOKENS",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolSession",
    "check_arguments",
    "format_call",
    "format_observation",
    "format_tool_call",
    "parse_call",
    "parse_tool_call",
    "replay",
    "run_call",
    "run_tool",
    "split_observation",
]
