"""HOTA / CLEAR-MOT through TrackEval on hand-worked sequences; mean track IoU."""

import math

import pytest

from ttrl_lightning.fidelity import hota, mean_track_iou, tracking_metrics

pytest.importorskip("trackeval")

BOX = [0, 0, 10, 10]
GT = {7: {t: BOX for t in range(4)}}


def test_perfect_tracking():
    m = tracking_metrics(GT, {"x": {t: BOX for t in range(4)}})
    assert m["HOTA"] == pytest.approx(1.0) and m["MOTA"] == 1.0 and m["IDF1"] == 1.0 and m["IDSW"] == 0


def test_one_id_switch_hand_worked():
    # one truth track over 4 frames, predicted as two tracks of 2 frames, IoU 1 everywhere:
    # DetA = 1; every TP has TPA = 2, FNA = 2, FPA = 0 -> AssA = 0.5 -> HOTA = sqrt(0.5) at every alpha.
    # CLEAR: 4 TP, 1 ID switch -> MOTA = 1 - 1/4; Identity: IDTP = 2 -> IDF1 = 2*2 / (4 + 4) = 0.5
    pred = {"a": {0: BOX, 1: BOX}, "b": {2: BOX, 3: BOX}}
    m = tracking_metrics(GT, pred)
    assert m["DetA"] == pytest.approx(1.0) and m["AssA"] == pytest.approx(0.5)
    assert m["HOTA"] == pytest.approx(math.sqrt(0.5)) and hota(GT, pred) == pytest.approx(math.sqrt(0.5))
    assert m["MOTA"] == pytest.approx(0.75) and m["IDSW"] == 1 and m["IDF1"] == pytest.approx(0.5)


def test_localisation_and_misses_hand_worked():
    # half the frames detected with IoU 0.5 (box shifted by a third of its width)
    shifted = [10 / 3, 0, 10 + 10 / 3, 10]
    m = tracking_metrics(GT, {1: {0: shifted, 1: shifted}})
    # CLEAR at threshold 0.5: 2 TP, 2 FN -> MOTA 0.5, MOTP 0.5
    assert (
        m["CLR_TP"] == 2
        and m["CLR_FN"] == 2
        and m["MOTA"] == pytest.approx(0.5)
        and m["MOTP"] == pytest.approx(0.5)
    )
    # HOTA: matches exist for alpha <= 0.5 (alphas 0.05..0.50: 10 of 19); there DetA = 2/4, AssA = 2/(2+2+0)
    per_alpha = math.sqrt(0.5 * 0.5)
    assert m["HOTA"] == pytest.approx(per_alpha * 10 / 19, abs=1e-9)


def test_mean_track_iou():
    assert mean_track_iou(GT, {1: {t: BOX for t in range(4)}}) == 1.0
    assert mean_track_iou(GT, {1: {0: BOX, 1: BOX}}) == pytest.approx(0.5)  # half the frames
    assert mean_track_iou(GT, {1: {t: BOX for t in range(4)}, 2: {0: BOX}}) == pytest.approx(
        0.5
    )  # extra track
    assert mean_track_iou({}, {}) == 1.0 and mean_track_iou(GT, {}) == 0.0
