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


def test_json_tool_call_round_trip_and_refusals():
    from ttrl_lightning.tools.protocol import format_tool_call, parse_tool_call

    text = format_tool_call("ZOOM", {"box": [0.1, 0.2, 0.5, 0.6], "scale": 2})
    assert text == '<tool_call>{"arguments":{"box":[0.1,0.2,0.5,0.6],"scale":2},"name":"ZOOM"}</tool_call>'
    assert parse_tool_call("  " + text + "\n") == ("ZOOM", {"box": [0.1, 0.2, 0.5, 0.6], "scale": 2})
    assert parse_tool_call('<tool_call>{"name": "OCR"}</tool_call>') == ("OCR", {})
    for bad, why in [('{"name": "OCR"}', "not a tool call"),
                     ("<tool_call>{name: OCR}</tool_call>", "not valid JSON"),
                     ('<tool_call>["OCR"]</tool_call>', "string \"name\""),
                     ('<tool_call>{"name": 3}</tool_call>', "string \"name\""),
                     ('<tool_call>{"name": "OCR", "arguments": [1]}</tool_call>', "must be a JSON object"),
                     ('<tool_call>{"name": "OCR", "code": "x"}</tool_call>', "unknown keys code"),
                     ("<tool_call>" + "[" * 50 + "]" * 50 + "</tool_call>", "deeper")]:
        with pytest.raises(ValueError, match=why):
            parse_tool_call(bad)
