"""Typed arguments: every bad argument is a ToolError with its code and the argument's name."""

import pytest

from ttrl_lightning.tools.arguments import Arg, check_arguments
from ttrl_lightning.tools.observation import ToolError

SPECS = (
    Arg("query", "text", required=True),
    Arg("box", "box"),
    Arg("frames", "frame_range"),
    Arg("k", "int", default=1, low=1, high=5),
)


def test_good_arguments_are_converted():
    out = check_arguments(SPECS, {"query": " red ", "box": [0, 0.1, 1, 0.5], "frames": [2, 4]})
    assert out == {"query": "red", "box": [0.0, 0.1, 1.0, 0.5], "frames": (2, 4), "k": 1}


@pytest.mark.parametrize(
    "args, code, names",
    [
        ({}, "bad_arguments", "query"),
        ({"query": "x", "colour": "red"}, "bad_arguments", "colour"),
        ({"query": 3}, "bad_arguments", "query"),
        ({"query": ""}, "bad_arguments", "query"),
        ({"query": "x", "k": True}, "bad_arguments", "k"),
        ({"query": "x", "k": 2.0}, "bad_arguments", "k"),
        ({"query": "x", "k": 9}, "bad_arguments", "k"),
        ({"query": "x", "box": [0, 0, 1]}, "bad_arguments", "box"),
        ({"query": "x", "box": "0,0,1,1"}, "bad_arguments", "box"),
        ({"query": "x", "box": [0, 0, 1, "1"]}, "bad_arguments", "box[3]"),
        ({"query": "x", "box": [-0.1, 0, 1, 1]}, "box_outside_image", "box"),
        ({"query": "x", "box": [0, 0, 1.2, 1]}, "box_outside_image", "box"),
        ({"query": "x", "box": [0.5, 0, 0.5, 1]}, "empty_crop", "box"),
        ({"query": "x", "box": [0, 0.6, 1, 0.2]}, "empty_crop", "box"),
        ({"query": "x", "frames": [3, 1]}, "frame_range", "frames"),
        ({"query": "x", "frames": [0, 1.5]}, "bad_arguments", "frames[1]"),
        ("query=x", "bad_arguments", "JSON object"),
        # a 309-digit integer: OverflowError escaped run_call and the agent loop
        ({"query": "x", "box": [0, 0, 10 ** 308, 1]}, "bad_arguments", "box[2] must be a finite number, got an "
                                                                       "integer of 309 digits"),
        ({"query": "x", "k": 10 ** 308}, "bad_arguments", "k must be an integer of at most"),
        ({"query": "x", "frames": [0, 10 ** 308]}, "bad_arguments", "frames[1]"),
    ],
)
def test_bad_arguments(args, code, names):
    with pytest.raises(ToolError) as err:
        check_arguments(SPECS, args)
    assert err.value.code == code and names in err.value.message


def test_unknown_kind_and_code_are_programming_errors():
    with pytest.raises(KeyError):
        Arg("x", "colour")
    with pytest.raises(ValueError):
        ToolError("oops", "x")
