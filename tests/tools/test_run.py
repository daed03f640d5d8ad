"""run_tool / run_call / ToolSession / replay: the public entry, typed error observations, fuzzing, replay."""

import json
import random

import numpy as np
import pytest

from ttrl_lightning.data.scenes import make_clip, make_scene
from ttrl_lightning.tools import TOOLS, Observation, ToolSession, format_tool_call, replay, run_call, run_tool
from ttrl_lightning.tools import ocr as ocr_module

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def scene():
    return make_scene(3, 0, n_objects=(3, 3), n_words=1)


@pytest.fixture(scope="module")
def clip():
    return make_clip(3, 0, n_frames=10)


def test_registry_names_the_pixelis_tools():
    assert TOOLS.names() == ["OCR", "PROP", "SEG", "TEMP", "TRK", "ZOOM"]
    for name in TOOLS:
        tool = TOOLS[name]
        assert tool.name == name and tool.input in ("image", "clip") and tool.description


def _error(obs: Observation, code: str, *words: str):
    assert not obs.ok and obs.artifact is None and obs.error == code, obs
    body = json.loads(obs.text)
    assert body["error"] == code
    for w in words:
        assert w in body["message"], (w, body["message"])


def test_bad_calls_are_typed_error_observations(scene, clip):
    img, frames = scene.image, list(clip.frames)
    _error(run_tool("BLUR", {}, image=img), "unknown_tool", "BLUR", "SEG")
    _error(run_tool("SEG", {"query": ["red"]}, image=img), "bad_arguments", "query")
    _error(run_tool("ZOOM", {"box": [0.1, 0.1, 0.5, 0.5], "scale": "2"}, image=img), "bad_arguments", "scale")
    _error(run_tool("ZOOM", {"box": [0.1, 0.1, 1.5, 0.5]}, image=img), "box_outside_image", "box")
    _error(run_tool("ZOOM", {"box": [0.3, 0.1, 0.3, 0.5]}, image=img), "empty_crop", "box")
    _error(
        run_tool("TRK", {"query": "red", "frames": [0, 10]}, frames=frames),
        "frame_range",
        "[0, 10]",
        "10 frames",
    )
    _error(run_tool("TEMP", {"query": "red", "window": [4, 99]}, frames=frames), "frame_range", "99")
    _error(run_tool("SEG", {"query": "red", "frame": 10}, frames=frames), "frame_range", "frame 10")
    _error(run_tool("TRK", {"query": "red"}, image=img), "no_input", "clip")
    _error(run_tool("SEG", {"query": "red"}), "no_input", "image")
    _error(run_tool("OCR", {"view": 0}, image=img), "no_input", "view 0")
    _error(run_tool("PROP", {}, image=img), "bad_arguments", "exactly one")
    _error(run_tool("PROP", {"query": "pink elephant"}, image=img), "not_found", "pink elephant")
    _error(run_tool("TRK", {"box": [0.0, 0.0, 0.02, 0.02]}, frames=frames), "not_found", "IoU")
    _error(run_tool("READ", {}, image=img, disabled=["OCR"]), "disabled", "OCR")
    _error(run_call("SEG(red)", image=img), "bad_call", "not a tool call")
    _error(
        run_call('<tool_call>{"name": "SEG", "arguments": "red"}</tool_call>', image=img),
        "bad_call",
        "object",
    )
    _error(run_call("<tool_call>" + "[" * 500 + "</tool_call>", image=img), "bad_call", "deeper")
    _error(
        run_call('<tool_call>{"name": "SEG", "arguments": {"query": NaN}}</tool_call>', image=img),
        "bad_arguments",
        "query",
    )


def test_caller_errors_still_raise():
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        run_tool("SEG", {"query": "red"}, image=np.zeros((4, 4), dtype=np.uint8))


def test_aliases_and_pil_input(scene):
    from PIL import Image

    a = run_tool("CROP", {"box": [0.2, 0.2, 0.4, 0.4]}, image=Image.fromarray(scene.image))
    b = run_tool("zoom", {"box": [0.2, 0.2, 0.4, 0.4]}, image=scene.image)
    assert a.ok and a.text == b.text and (a.view == b.view).all()


def test_model_text_is_never_evaluated(scene, monkeypatch):
    calls = []
    monkeypatch.setattr("builtins.eval", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("builtins.exec", lambda *a, **k: calls.append(a))
    obs = run_call(
        format_tool_call("SEG", {"query": "__import__('os').system('true') red"}), image=scene.image
    )
    assert obs.ok and not calls


_FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "{",
    "}",
    "[",
    "]",
    '"name"',
    '"arguments"',
    ":",
    ",",
    '"SEG"',
    '"ZOOM"',
    '"TRK"',
    '"OCR"',
    '"TEMP"',
    '"PROP"',
    '"query"',
    '"box"',
    '"frames"',
    '"frame"',
    '"view"',
    '"red"',
    "0.5",
    "-1",
    "1e999",
    "NaN",
    "true",
    "null",
    '"\\u0000"',
    "2",
    "\\",
    '"',
    " ",
]
_VALUES = [
    None,
    True,
    -1,
    0,
    3,
    10**30,
    0.5,
    1.5,
    float("inf"),
    "",
    "red circle",
    "x" * 300,
    [0.1, 0.1, 0.5, 0.5],
    [0, 0, 0, 0],
    [0.9, 0.9, 0.1, 0.1],
    [0, 1],
    [5, 2],
    [0, 999],
    {"a": 1},
    [[0.1]],
]


def test_fuzz_random_call_text_never_crashes(scene, clip, monkeypatch):
    monkeypatch.setattr(ocr_module, "read_text", lambda image: [])  # PP-OCR itself is tested in test_ocr.py
    rng = random.Random(0)
    names = TOOLS.names() + ["CROP", "READ", "seg", "NOPE", ""]
    keys = ["query", "box", "frames", "frame", "view", "window", "top_k", "scale", "min_length", "other"]
    for i in range(300):
        if i % 2:
            text = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 20)))
        else:
            args = {rng.choice(keys): rng.choice(_VALUES) for _ in range(rng.randint(0, 3))}
            try:
                text = format_tool_call(rng.choice(names), args)
            except ValueError:  # NaN / infinity cannot be canonical JSON: write it raw instead
                text = (
                    "<tool_call>"
                    + json.dumps({"name": rng.choice(names), "arguments": args})
                    + "</tool_call>"
                )
        session = ToolSession(image=scene.image, frames=clip.frames)
        obs = session.call(text)
        assert isinstance(obs, Observation)
        assert obs.ok == (obs.error is None) and json.loads(obs.text) is not None
        if obs.ok:
            assert json.loads(obs.text) == obs.artifact


def test_replay_reproduces_every_artifact_byte_for_byte(scene, clip):
    chain = [
        ("SEG", {"query": "objects"}),
        ("PROP", {"box": [0.0, 0.0, 1.0, 1.0]}),
        ("ZOOM", {"box": [0.1, 0.1, 0.4, 0.4], "scale": 2}),
        ("SEG", {"query": "objects", "view": 0}),
        ("OCR", {}),
        ("TRK", {"query": "objects", "frames": [1, 8]}),
        ("TEMP", {"query": clip.labels[clip.segment[0]]}),
        ("SEG", {"query": 7}),
    ]
    session = ToolSession(image=scene.image, frames=clip.frames)
    views = [session.run(name, args).view for name, args in chain]
    recorded = json.loads(json.dumps(session.steps))  # what a trajectory file holds
    assert [r["name"] for r in recorded] == [n for n, _ in chain]
    assert replay(recorded, image=scene.image, frames=clip.frames) == []
    again = ToolSession(image=scene.image, frames=clip.frames)
    for (name, args), view, rec in zip(chain, views, recorded):
        obs = again.run(name, args)
        assert obs.text.encode() == rec["text"].encode()
        assert (view is None) == (obs.view is None) and (view is None or view.tobytes() == obs.view.tobytes())
    # a tampered record is found
    recorded[1]["text"] = recorded[1]["text"].replace('"shape":"', '"shape":"x')
    assert replay(recorded, image=scene.image, frames=clip.frames) == [1]


@pytest.mark.parametrize(
    "module, name, args", [("cv2", "SEG", {"query": "red"}), ("rapidocr_onnxruntime", "OCR", {})]
)
def test_missing_backend_names_the_extra(monkeypatch, scene, module, name, args):
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # import of a None entry raises ImportError
    if name == "OCR":
        ocr_module.engine.cache_clear()
    with pytest.raises(ImportError, match=r"ttrl_lightning\[tools\]"):
        run_tool(name, args, image=scene.image)
    ocr_module.engine.cache_clear()


@pytest.mark.subprocess
def test_importing_the_tools_loads_no_backend():
    import subprocess
    import sys

    code = (
        "import sys, ttrl_lightning.tools, ttrl_lightning.fidelity, ttrl_lightning.data.scenes; "
        "print([m for m in ('cv2', 'supervision', 'rapidocr_onnxruntime', 'trackeval') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
