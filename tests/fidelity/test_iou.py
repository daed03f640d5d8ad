"""Box and mask IoU: hand-worked cases, supervision's box_iou_batch and pycocotools' mask IoU as
references."""

import numpy as np
import pytest

from ttrl_lightning.fidelity import box_iou, box_iou_matrix, greedy_match, mask_iou
from ttrl_lightning.tools.serialise import mask_to_rle


def test_box_iou_hand_worked():
    assert box_iou([0, 0, 2, 2], [1, 1, 3, 3]) == pytest.approx(1 / 7)
    assert box_iou([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert box_iou([0, 0, 1, 1], [1, 0, 2, 1]) == 0.0  # touching edges
    assert box_iou([0, 0, 0, 1], [0, 0, 0, 1]) == 0.0  # empty union


def test_box_iou_matrix_against_supervision():
    sv = pytest.importorskip("supervision")
    rng = np.random.default_rng(0)
    a = np.sort(rng.random((6, 2, 2)), axis=1).transpose(0, 2, 1).reshape(6, 4)[:, [0, 2, 1, 3]]
    b = np.sort(rng.random((5, 2, 2)), axis=1).transpose(0, 2, 1).reshape(5, 4)[:, [0, 2, 1, 3]]
    ours = box_iou_matrix(a, b)
    np.testing.assert_allclose(ours, sv.box_iou_batch(a, b), atol=1e-9)
    assert ours[2, 3] == pytest.approx(box_iou(a[2], b[3]))


def test_mask_iou_against_pycocotools():
    mask_utils = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(1)
    a, b = rng.random((20, 15)) < 0.5, rng.random((20, 15)) < 0.3
    ref = mask_utils.iou(
        [mask_utils.encode(np.asfortranarray(a.astype(np.uint8)))],
        [mask_utils.encode(np.asfortranarray(b.astype(np.uint8)))],
        [0],
    )[0, 0]
    assert mask_iou(a, b) == pytest.approx(ref)
    assert mask_iou(mask_to_rle(a), mask_to_rle(b)) == pytest.approx(ref)  # artifacts' RLE read directly
    with pytest.raises(ValueError, match="different sizes"):
        mask_iou(a, b[:10])


def test_greedy_match_one_to_one():
    scores = np.array([[0.9, 0.8], [0.85, 0.1]])
    assert greedy_match(scores) == [(0, 0, 0.9), (1, 1, 0.1)]
    assert greedy_match(scores, threshold=0.5) == [(0, 0, 0.9)]
