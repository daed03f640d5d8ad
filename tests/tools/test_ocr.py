"""OCR on rendered words (PIL's default font; acceptance: ANLS >= 0.9), boxes and the READ alias."""

import pytest

from ttrl_lightning.data.scenes import SCENE_TASKS, make_scene
from ttrl_lightning.fidelity import anls, box_iou
from ttrl_lightning.tools import ToolSession, run_tool
from ttrl_lightning.tools.serialise import box_to_norm

pytest.importorskip("rapidocr_onnxruntime")


def _read(n, seed):
    preds, refs = [], []
    for i in range(n):
        task = SCENE_TASKS["read"](seed, i)
        obs = run_tool("OCR", {}, image=task.image)
        preds.append(obs.artifact["text"])
        refs.append([task.answer])
    return anls(preds, refs)


def test_ocr_reads_rendered_words():
    assert _read(3, 0) >= 0.9


@pytest.mark.slow
def test_ocr_anls_on_many_words():
    assert _read(40, 1) >= 0.9


def test_ocr_box_reads_one_word_and_spans_locate_it():
    scene = make_scene(5, 0, n_objects=(1, 1), n_words=2)
    h, w = scene.image.shape[:2]
    target = scene.words[1]
    x0, y0, x1, y1 = target.box
    region = box_to_norm((max(x0 - 4, 0), max(y0 - 4, 0), min(x1 + 4, w), min(y1 + 4, h)), w, h)
    obs = run_tool("READ", {"box": region}, image=scene.image)
    assert obs.ok and obs.artifact["text"] == target.text
    (span,) = obs.artifact["spans"]
    assert box_iou(span["box"], box_to_norm(target.box, w, h)) >= 0.5
    assert 0.5 <= span["score"] <= 1.0


def test_zoom_then_ocr_reads_the_small_word():
    task = SCENE_TASKS["read_small"](0, 0)
    session = ToolSession(image=task.image)
    observations = [session.run(name, args) for name, args in task.chain]
    assert observations[-1].artifact["text"] == task.answer
