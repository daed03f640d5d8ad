"""Temporal IoU and segment F1, hand-worked."""

import pytest

from ttrl_lightning.fidelity import frame_segment_iou, segment_f1, temporal_iou


def test_temporal_iou():
    assert temporal_iou((0, 10), (5, 15)) == pytest.approx(5 / 15)
    assert temporal_iou((0, 1), (1, 2)) == 0.0 and temporal_iou((2, 2), (2, 2)) == 0.0
    assert frame_segment_iou((3, 7), (4, 8)) == pytest.approx(4 / 6)  # frames 4..7 of 3..8
    assert frame_segment_iou((5, 5), (5, 5)) == 1.0


def test_segment_f1():
    assert segment_f1([(0, 9)], [(0, 9)]) == 1.0
    assert segment_f1([(0, 9), (20, 29)], [(0, 9)]) == pytest.approx(2 / 3)  # P = 1/2, R = 1
    assert segment_f1([(0, 3)], [(0, 9)]) == 0.0  # tIoU 0.4 < 0.5
    assert segment_f1([(0, 4)], [(0, 9)]) == 1.0  # tIoU 0.5
    assert segment_f1([], []) == 1.0 and segment_f1([(0, 1)], []) == 0.0
    assert segment_f1([(0.0, 1.0)], [(0.0, 2.0)], frames=False) == 1.0
