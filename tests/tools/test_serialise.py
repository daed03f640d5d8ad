"""Artifact serialisation: canonical JSON, 1e-2 coordinates, COCO uncompressed RLE (checked with
pycocotools)."""

import numpy as np
import pytest

from ttrl_lightning.tools.serialise import (
    box_to_norm,
    box_to_pixels,
    canonical_json,
    mask_to_rle,
    norm,
    rle_to_mask,
)


def test_norm_and_boxes():
    assert norm(0.123456) == 0.12 and norm(-0.001) == 0.0 and str(norm(-0.001)) == "0.0"
    assert box_to_norm((10, 20, 110, 220), 200, 400) == [0.05, 0.05, 0.55, 0.55]
    assert box_to_pixels([0.05, 0.05, 0.55, 0.55], 200, 400) == (10, 20, 110, 220)
    assert box_to_pixels([0.0, 0.0, 1.0, 1.0], 7, 9) == (0, 0, 7, 9)


def test_canonical_json_is_one_text():
    assert canonical_json({"b": [1.5, 2], "a": "é"}) == '{"a":"é","b":[1.5,2]}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


@pytest.mark.parametrize("seed", range(4))
def test_rle_round_trip_and_pycocotools(seed):
    mask_utils = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(seed)
    mask = rng.random((13, 9)) < 0.4
    if seed == 0:
        mask[0, 0] = True  # a mask starting with a one: counts begin with an empty run of zeros
    rle = mask_to_rle(mask)
    assert rle["size"] == [13, 9] and sum(rle["counts"]) == 13 * 9
    assert (rle_to_mask(rle) == mask).all()
    coco = mask_utils.frPyObjects(rle, 13, 9)  # COCO reads uncompressed RLE column-major
    assert (mask_utils.decode(coco).astype(bool) == mask).all()
    assert mask_utils.area(coco) == mask.sum()


def test_rle_hand_worked_and_refusals():
    mask = np.array([[0, 1], [0, 1]], dtype=bool)  # column-major: 0 0 1 1
    assert mask_to_rle(mask) == {"size": [2, 2], "counts": [2, 2]}
    assert mask_to_rle(np.ones((1, 2))) == {"size": [1, 2], "counts": [0, 2]}
    with pytest.raises(ValueError, match="sum to 3"):
        rle_to_mask({"size": [2, 2], "counts": [1, 2]})
