"""Generated scenes, clips and tasks: determinism, truth consistent with the pixels, one tool per task."""

import numpy as np
import pytest

from ttrl_lightning.data.scenes import SCENE_TASKS, make_clip, make_scene, make_tasks, tool_kinds
from ttrl_lightning.tools.palette import BACKGROUND, COLOURS, size_name


def test_same_seed_same_pixels_and_truth():
    a, b, c = make_scene(3, 1), make_scene(3, 1), make_scene(3, 2)
    assert a.image.tobytes() == b.image.tobytes() and a.words == b.words
    assert [o.label for o in a.objects] == [o.label for o in b.objects]
    assert a.image.tobytes() != c.image.tobytes()
    assert make_clip(1, 0).frames[5].tobytes() == make_clip(1, 0).frames[5].tobytes()


@pytest.mark.parametrize("index", range(5))
def test_scene_truth_matches_the_pixels(index):
    scene = make_scene(0, index, n_objects=(3, 6), n_words=2, tiny_word=True)
    h, w = scene.image.shape[:2]
    for i, obj in enumerate(scene.objects):
        assert (scene.image[obj.mask] == COLOURS[obj.colour]).all()  # no anti-aliasing on shapes
        ys, xs = np.nonzero(obj.mask)
        assert obj.box == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        assert obj.size == size_name(obj.mask.sum() / (h * w))
        for other in scene.objects[i + 1 :]:
            assert not (obj.mask & other.mask).any()
    for word in scene.words:
        x0, y0, x1, y1 = word.box
        ink = (scene.image[y0:y1, x0:x1] != BACKGROUND).any(axis=2)
        assert ink.any()
    assert len(scene.words) == 3 and len({wd.text for wd in scene.words}) == 3
    drawn = np.zeros((h, w), dtype=bool)
    for obj in scene.objects:
        drawn |= obj.mask
    assert (scene.image[~drawn] != np.array([COLOURS[c] for c in COLOURS])[:, None]).any(axis=-1).all()


def test_clip_truth_and_planted_segment():
    clip = make_clip(0, 3, n_frames=20)
    tid, start, end = clip.segment
    assert sorted(clip.tracks[tid]) == list(range(start, end + 1)) and end - start + 1 >= 5
    assert end - start + 1 < 20
    for k, boxes in clip.tracks.items():
        colour = COLOURS[clip.labels[k].split()[0]]
        for t, (x0, y0, x1, y1) in boxes.items():
            patch = clip.frames[t][y0:y1, x0:x1]
            assert (patch == colour).all(axis=2).any()
        if k != tid:
            assert sorted(boxes) == list(range(20))
    # objects move
    moving = [k for k, b in clip.tracks.items() if len({v[0] for v in b.values()}) > 1]
    assert moving == sorted(clip.tracks)


def test_every_tool_has_a_task_and_chains_are_calls():
    tasks = make_tasks(0, 2 * len(tool_kinds()))
    assert {t.tool for t in tasks} == {"SEG", "ZOOM", "TRK", "OCR", "TEMP", "PROP"}
    for task in tasks:
        assert task.chain[0][0] == task.tool and task.answer
        assert (task.image is None) != (task.frames is None)


@pytest.mark.parametrize("kind", ["count", "colour", "shape", "read", "read_small", "direction", "when"])
def test_the_reference_chain_answers_the_question(kind):
    pytest.importorskip("cv2")
    if kind.startswith("read"):
        pytest.importorskip("rapidocr_onnxruntime")
    from ttrl_lightning.tools import ToolSession

    task = SCENE_TASKS[kind](0, 2)
    session = ToolSession(image=task.image, frames=task.frames)
    art = [session.run(name, args) for name, args in task.chain][-1].artifact
    answer = {
        "count": lambda: str(art["count"]),
        "colour": lambda: art["colour"],
        "shape": lambda: art["shape"],
        "read": lambda: art["text"],
        "read_small": lambda: art["text"],
        "direction": lambda: (
            "right" if art["tracks"][0]["boxes"][-1][0] > art["tracks"][0]["boxes"][0][0] else "left"
        ),
        "when": lambda: f"{art['segments'][0]['start']}-{art['segments'][0]['end']}",
    }[kind]()
    assert answer == task.answer


# --- glance tasks ------------------------------------------------------------------------------------------


def _fill(scene):
    obj = scene.objects[0]
    colours = {tuple(int(v) for v in px) for px in scene.image[obj.mask]}
    assert len(colours) == 1  # one flat fill, no anti-aliasing
    return np.array(colours.pop(), dtype=float)


@pytest.mark.parametrize("index", range(12))
def test_a_glance_scene_is_one_large_object_of_its_named_colour(index):
    from ttrl_lightning.data.scenes import GLANCE_RADII, GLANCE_SIZE, make_glance

    scene = make_glance(2, index)
    assert scene.image.shape == (GLANCE_SIZE, GLANCE_SIZE, 3) and not scene.words and len(scene.objects) == 1
    obj = scene.objects[0]
    assert (_fill(scene) == COLOURS[obj.colour]).all()
    assert (scene.image[~obj.mask] == BACKGROUND).all()
    x0, y0, x1, y1 = obj.box
    assert max(x1 - x0, y1 - y0) >= 2 * GLANCE_RADII[0]  # at least 48 of the 112 pixels across


@pytest.mark.parametrize("index", range(24))
def test_a_tinted_object_is_mixed_toward_one_other_colour_and_stays_nearest_its_own(index):
    from ttrl_lightning.data.scenes import GLANCE_COLOUR_QUESTIONS, TINT, make_glance

    plain, tinted = make_glance(5, index), make_glance(5, index, TINT)
    obj = tinted.objects[0]
    assert obj.label == plain.objects[0].label and (obj.mask == plain.objects[0].mask).all()
    fill, own = _fill(tinted), np.array(COLOURS[obj.colour], dtype=float)
    distances = {c: float(np.linalg.norm(fill - np.array(rgb, dtype=float))) for c, rgb in COLOURS.items()}
    assert min(distances, key=distances.get) == obj.colour and distances[obj.colour] > 0
    # fill = (1 - f) * own + f * other for exactly one other palette colour, f in TINT (up to rounding)
    fits = []
    for name, rgb in COLOURS.items():
        d = np.array(rgb, dtype=float) - own
        if name == obj.colour:
            continue
        f = float((fill - own) @ d / (d @ d))
        if np.abs(own + f * d - fill).max() <= 1.0:  # rounding to integers moves each channel <= 0.5
            fits.append((name, f))
    assert len(fits) == 1 and TINT[0] - 0.01 <= fits[0][1] <= TINT[1] + 0.01, fits
    task = SCENE_TASKS["tinted_object_colour"](5, index)
    assert task.answer == obj.colour and task.question in GLANCE_COLOUR_QUESTIONS
    # the wordings differ in length, so the answer starts at another position (scenes.GLANCE_COLOUR_QUESTIONS)
    assert len({len(q) for q in GLANCE_COLOUR_QUESTIONS}) == len(GLANCE_COLOUR_QUESTIONS)
    assert task.image.tobytes() == tinted.image.tobytes()


def test_one_registry_holds_every_image_task_and_the_glance_kinds_stay_out_of_the_tool_defaults():
    from ttrl_lightning.data.scenes import question_file_kinds, scene_kinds, scene_source, tool_kinds

    assert scene_kinds("glance") == ("object_colour", "tinted_object_colour")
    assert set(scene_kinds()) == set(SCENE_TASKS.names())
    assert tool_kinds() == ("colour", "count", "direction", "read", "read_small", "shape", "when")
    assert scene_kinds(clip=True) == ("direction", "when")
    assert question_file_kinds() == ("count", "colour", "shape", "read", "read_small", "object_colour",
                                     "tinted_object_colour")  # a question file's cycling order
    assert {t.kind for t in make_tasks(0, 14)} == set(tool_kinds())  # the agent's defaults
    assert [t.kind for t in make_tasks(0, 2, ["object_colour", "colour"])] == ["object_colour", "colour"]
    kind = SCENE_TASKS["tinted_object_colour"]
    assert (kind.name, kind.family, kind.clip) == ("tinted_object_colour", "glance", False)
    with pytest.raises(KeyError, match="known: .*count.*object_colour"):
        scene_source(0, ["object_color"])
    with pytest.raises(ValueError, match="tint must satisfy"):
        from ttrl_lightning.data.scenes import make_glance

        make_glance(0, 0, (0.3, 0.6))  # past one half the mixing colour would be the nearer one
