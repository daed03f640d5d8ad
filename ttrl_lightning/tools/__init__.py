"""Tools of the policy: the call / observation protocol (``protocol``)."""
from ttrl_lightning.tools.protocol import (
    CALL_END,
    CALL_START,
    HIDDEN_OBSERVATION_TOKEN,
    OBSERVATION_END,
    OBSERVATION_START,
    TOOL_TOKENS,
    ToolCall,
    format_call,
    format_observation,
    parse_call,
    split_observation,
)

__all__ = ["CALL_END", "CALL_START", "HIDDEN_OBSERVATION_TOKEN", "OBSERVATION_END", "OBSERVATION_START",
           "TOOL_TOKENS", "ToolCall", "format_call", "format_observation", "parse_call", "split_observation"]
