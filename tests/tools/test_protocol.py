"""The tool-call protocol: call / observation formatting, parsing and the observation split."""
import pytest

from ttrl_lightning.tools.protocol import (ToolCall, format_call, format_observation, parse_call,
                                           split_observation)


def test_call_round_trip():
    text = format_call("add", 12, 7)
    assert text == "<call>add(12,7)</call>"
    assert parse_call(text) == ToolCall("add", ("12", "7"))
    assert parse_call(format_call("now")) == ToolCall("now", ())
    for bad in ("add(1,2)", "<call>add 1 2</call>", "<call>add(1,2)</call> trailing"):
        with pytest.raises(ValueError, match="not a tool call"):
            parse_call(bad)


def test_observation_split():
    assert format_observation(19) == "<out>19</out>"
    assert split_observation("<out>19</out>") == ("<out>", "19", "</out>")
    assert split_observation("<out></out>") == ("<out>", "", "</out>")
    assert split_observation("19") == ("", "19", "")
    assert split_observation("<out>19") == ("", "<out>19", "")
