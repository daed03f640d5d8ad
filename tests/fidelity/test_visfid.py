"""VisFid over decisive steps: per-tool scores against references, the mean, None when nothing is scored."""

import numpy as np
import pytest

from ttrl_lightning.fidelity import STEP_FIDELITY, attribute_f1, group_visfid, step_fidelity, visfid
from ttrl_lightning.tools.serialise import mask_to_rle


def _mask(x0, x1):
    m = np.zeros((4, 8), dtype=bool)
    m[:, x0:x1] = True
    return mask_to_rle(m)


def test_every_tool_has_a_step_score():
    assert STEP_FIDELITY.names() == ["OCR", "PROP", "SEG", "TEMP", "TRK", "ZOOM"]


def test_per_tool_scores_hand_worked():
    seg = lambda *masks: {"objects": [{"box": [0, 0, 1, 1], "mask": m} for m in masks]}  # noqa: E731
    assert STEP_FIDELITY["SEG"](seg(_mask(0, 4)), seg(_mask(2, 6))) == pytest.approx(1 / 3)
    # two predicted objects, one reference: the match scores 1, divided by max(2, 1)
    assert STEP_FIDELITY["SEG"](seg(_mask(0, 4), _mask(5, 8)), seg(_mask(0, 4))) == pytest.approx(0.5)
    assert STEP_FIDELITY["ZOOM"]({"box": [0, 0, 0.5, 0.5]}, {"box": [0, 0, 0.5, 1.0]}) == pytest.approx(0.5)
    assert STEP_FIDELITY["OCR"]({"text": "River!"}, {"text": "RIVER"}) == 1.0
    assert (
        STEP_FIDELITY["TEMP"]({"segments": [{"start": 0, "end": 4}]}, {"segments": [{"start": 0, "end": 9}]})
        == 1.0
    )
    assert STEP_FIDELITY["PROP"](
        {"colour": "red", "shape": "circle", "size": "small"},
        {"colour": "red", "shape": "square", "size": "small"},
    ) == pytest.approx(2 / 3)
    trk = {"tracks": [{"id": 1, "frames": [0, 1], "boxes": [[0, 0, 1, 1], [0, 0, 1, 1]]}]}
    half = {"tracks": [{"id": 3, "frames": [0], "boxes": [[0, 0, 1, 1]]}]}
    assert STEP_FIDELITY["TRK"](half, trk) == pytest.approx(0.5)


def test_attribute_f1_counts_only_stated_attributes():
    assert attribute_f1({"colour": "red"}, {"colour": "red", "shape": "circle"}) == pytest.approx(2 / 3)
    assert attribute_f1({}, {}) == 1.0


def test_visfid_mean_over_steps_and_references():
    steps = [("ZOOM", {"box": [0, 0, 0.5, 0.5]}), ("READ", {"text": "tiger"}), ("PROP", {"colour": "red"})]
    ref1 = [
        ("CROP", {"box": [0, 0, 0.5, 1.0]}),
        ("ZOOM", {"box": [0, 0, 0.5, 0.5]}),
        ("OCR", {"text": "tiger"}),
    ]
    ref2 = [("OCR", {"text": "tigre"})]
    # ZOOM: best step of ref1 = 1 (ref2 has none) -> 1; OCR: mean(1, 1 - 2/5) = 0.8;
    # PROP: no reference -> skipped
    assert step_fidelity(steps[0], [ref1, ref2]) == 1.0
    assert step_fidelity(steps[1], [ref1, ref2]) == pytest.approx(0.8)
    assert step_fidelity(steps[2], [ref1, ref2]) is None
    assert visfid(steps, [ref1, ref2]) == pytest.approx(0.9)
    assert visfid([], [ref1]) is None and visfid(steps, []) is None


def test_visfid_of_tool_outputs_against_truth():
    tools = pytest.importorskip("ttrl_lightning.tools")
    pytest.importorskip("cv2")
    from ttrl_lightning.data.scenes import SCENE_TASKS

    task = SCENE_TASKS["count"](0, 4)
    obs = tools.run_tool(*task.chain[0], image=task.image)
    truth = {"objects": [{"box": [0, 0, 1, 1], "mask": mask_to_rle(m)} for m in task.truth["masks"]]}
    assert visfid([("SEG", obs.artifact)], [[("SEG", truth)]]) >= 0.9
    wrong = tools.run_tool("SEG", {"query": "objects"}, image=task.image).artifact
    assert wrong["count"] > len(task.truth["masks"])  # every object, not only the asked colour
    assert visfid([("SEG", wrong)], [[("SEG", truth)]]) == pytest.approx(
        len(task.truth["masks"]) / wrong["count"], abs=0.05
    )


def test_group_visfid_scores_each_rollout_against_the_other_answered_ones():
    zoom = lambda x1: [("ZOOM", {"box": [0, 0, x1, 1.0]})]  # noqa: E731
    # rollouts 0, 1 zoom on the same box; 2 on half of it; 3 never answered (not a reference); 4 no step
    evidence = [zoom(0.5), zoom(0.5), zoom(0.25), zoom(0.25), []]
    out = group_visfid(evidence, [True, True, True, False, True])
    assert out[:4] == pytest.approx([(1 + 0.5) / 2, (1 + 0.5) / 2, 0.5, (0.5 + 0.5 + 1.0) / 3])
    assert out[4] is None
    assert group_visfid([zoom(0.5)], [True]) == [None]  # no other rollout: nothing to compare with
    with pytest.raises(ValueError, match="success flags"):
        group_visfid([[], []], [True])
