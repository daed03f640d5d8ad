"""TEMP finds planted segments (acceptance: tIoU >= 0.5); proposal scoring and NMS hand-worked."""

import numpy as np
import pytest

from ttrl_lightning.data.scenes import make_clip
from ttrl_lightning.fidelity import frame_segment_iou
from ttrl_lightning.tools import run_tool
from ttrl_lightning.tools.temporal import frame_iou, nms, propose

pytest.importorskip("cv2")


def _tiou(seed, index):
    clip = make_clip(seed, index)
    tid, start, end = clip.segment
    obs = run_tool("TEMP", {"query": clip.labels[tid]}, frames=clip.frames)
    (seg,) = obs.artifact["segments"]
    return frame_segment_iou((seg["start"], seg["end"]), (start, end))


@pytest.mark.parametrize("index", range(3))
def test_temp_finds_the_planted_segment(index):
    assert _tiou(0, index) >= 0.5


@pytest.mark.slow
def test_temp_on_many_clips():
    assert min(_tiou(1, i) for i in range(30)) >= 0.5


def test_proposal_scores_hand_worked():
    s = np.array([0, 1, 1, 0.0])
    props = propose(s)
    # [1, 2]: inside mean 1, outside mean 0 -> 1; [1, 1]: 1 - (1/3); [0, 2]: 2/3 - 0
    assert props[0] == (1.0, 1, 2)
    scores = {(a, b): sc for sc, a, b in props}
    assert scores[(1, 1)] == pytest.approx(2 / 3) and scores[(0, 2)] == pytest.approx(2 / 3)
    assert scores[(0, 3)] == pytest.approx(0.5)  # whole window: outside counts 0
    kept = nms(props, top_k=3)
    assert kept[0][1:] == (1, 2) and all(frame_iou(k[1:], (1, 2)) < 0.5 for k in kept[1:])


def test_frame_iou_agrees_with_the_fidelity_metric():
    for a in [(0, 0), (2, 5), (3, 9)]:
        for b in [(0, 3), (4, 4), (5, 12)]:
            assert frame_iou(a, b) == pytest.approx(frame_segment_iou(a, b))


def test_temp_window_and_top_k():
    clip = make_clip(0, 0)
    tid, start, end = clip.segment
    obs = run_tool(
        "TEMP",
        {"query": clip.labels[tid], "window": [start, len(clip.frames) - 1], "top_k": 2},
        frames=clip.frames,
    )
    assert obs.artifact["window"] == [start, len(clip.frames) - 1]
    assert obs.artifact["segments"][0]["start"] == start and obs.artifact["segments"][0]["end"] == end
    assert run_tool("TEMP", {"query": "pink zebra"}, frames=clip.frames).artifact["segments"] == []
