"""TRK on generated clips: HOTA that TrackEval reports, initial-box selection, frame ranges."""

import pytest

from ttrl_lightning.data.scenes import make_clip
from ttrl_lightning.fidelity import tracking_metrics
from ttrl_lightning.tools import run_tool
from ttrl_lightning.tools.serialise import box_to_norm

pytest.importorskip("supervision")
pytest.importorskip("trackeval")


def _normalised_truth(clip):
    h, w = clip.frames[0].shape[:2]
    return {tid: {t: box_to_norm(b, w, h) for t, b in boxes.items()} for tid, boxes in clip.tracks.items()}


def _predicted(obs):
    return {tr["id"]: dict(zip(tr["frames"], tr["boxes"])) for tr in obs.artifact["tracks"]}


def _hota(seed, index):
    clip = make_clip(seed, index, n_frames=16)
    obs = run_tool("TRK", {"query": "objects"}, frames=clip.frames)
    assert obs.ok and len(obs.artifact["tracks"]) == len(clip.tracks)
    return tracking_metrics(_normalised_truth(clip), _predicted(obs))


@pytest.mark.parametrize("index", range(2))
def test_trk_hota_on_generated_clips(index):
    m = _hota(0, index)
    assert m["HOTA"] >= 0.8 and m["IDSW"] == 0 and m["MOTA"] >= 0.95, m


@pytest.mark.slow
def test_trk_hota_on_many_clips():
    scores = [_hota(1, i)["HOTA"] for i in range(20)]
    assert min(scores) >= 0.7 and sum(scores) / len(scores) >= 0.85, scores


def test_trk_from_initial_box_follows_that_object():
    clip = make_clip(4, 0, n_frames=12)
    h, w = clip.frames[0].shape[:2]
    tid = 2
    obs = run_tool(
        "TRK", {"box": box_to_norm(clip.tracks[tid][3], w, h), "frames": [3, 9]}, frames=clip.frames
    )
    (track,) = obs.artifact["tracks"]
    assert track["id"] == 1 and track["label"] == clip.labels[tid] and track["frames"] == list(range(3, 10))
    truth = {1: {t: box_to_norm(clip.tracks[tid][t], w, h) for t in range(3, 10)}}
    assert tracking_metrics(truth, _predicted(obs))["HOTA"] >= 0.8
