"""SEG and PROP on generated scenes with known truth (acceptance: SEG IoU >= 0.9)."""

import pytest

from ttrl_lightning.data.scenes import make_scene
from ttrl_lightning.fidelity import mask_iou
from ttrl_lightning.tools import run_tool
from ttrl_lightning.tools.palette import parse_query
from ttrl_lightning.tools.serialise import box_to_norm

pytest.importorskip("cv2")


def _check_scene(seed, index):
    scene = make_scene(seed, index, n_objects=(3, 6), n_words=2)
    h, w = scene.image.shape[:2]
    obs = run_tool("SEG", {"query": "objects"}, image=scene.image)
    assert obs.ok and obs.artifact["count"] == len(scene.objects)  # the words are not objects
    for truth in scene.objects:
        best = max(mask_iou(o["mask"], truth.mask) for o in obs.artifact["objects"])
        assert best >= 0.9, (truth, best)
        match = max(obs.artifact["objects"], key=lambda o: mask_iou(o["mask"], truth.mask))
        assert match["label"] == truth.label
        assert match["box"] == box_to_norm(truth.box, w, h)
    return scene


@pytest.mark.parametrize("index", range(4))
def test_seg_masks_match_the_drawn_shapes(index):
    _check_scene(0, index)


@pytest.mark.slow
def test_seg_masks_match_on_many_scenes():
    for index in range(4, 60):
        _check_scene(1, index)


def test_seg_query_filters_by_colour_shape_and_region():
    scene = make_scene(
        0, 0, objects=[("circle", "red", "medium"), ("square", "red", "medium"), ("circle", "blue", "large")]
    )

    def labels(q, **kw):
        objects = run_tool("SEG", {"query": q, **kw}, image=scene.image).artifact["objects"]
        return [o["label"] for o in objects]

    assert sorted(labels("red objects")) == ["red circle", "red square"]
    assert sorted(labels("circles")) == ["blue circle", "red circle"]
    assert labels("red circle") == ["red circle"]
    assert labels("green") == [] and labels("zebra") == []
    blue = next(o for o in scene.objects if o.colour == "blue")
    h, w = scene.image.shape[:2]
    assert labels("objects", box=box_to_norm(blue.box, w, h)) == ["blue circle"]


def test_parse_query():
    assert parse_query("Red circles?") == ("red", "circle", True)
    assert parse_query("all shapes") == (None, None, True)
    assert parse_query("a zebra") == (None, None, False)


@pytest.mark.parametrize("index", range(3))
def test_prop_reports_the_truth(index):
    scene = make_scene(2, index, n_objects=(3, 3), n_words=0)
    h, w = scene.image.shape[:2]
    for truth in scene.objects:
        obs = run_tool("PROP", {"box": box_to_norm(truth.box, w, h)}, image=scene.image)
        art = obs.artifact
        assert (art["colour"], art["shape"], art["size"]) == (truth.colour, truth.shape, truth.size)
        assert abs(art["area"] - truth.mask.sum() / (w * h)) < 1e-4


def test_prop_by_query_takes_the_largest():
    scene = make_scene(0, 1, objects=[("square", "green", "small"), ("triangle", "green", "large")])
    art = run_tool("PROP", {"query": "green"}, image=scene.image).artifact
    triangle = scene.objects[1]
    assert triangle.mask.sum() > scene.objects[0].mask.sum()
    assert (art["shape"], art["size"]) == ("triangle", triangle.size)
