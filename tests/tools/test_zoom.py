"""ZOOM: Pixel Reasoner padding (0.1 of the image), 28 px minimum side, nearest-neighbour scale."""

import numpy as np
import pytest

from ttrl_lightning.tools import run_tool
from ttrl_lightning.tools.zoom import crop_box


def _image(h=100, w=200):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_padding_and_clipping_hand_worked():
    # [0.4, 0.4, 0.6, 0.6] padded by 0.1 -> [0.3, 0.3, 0.7, 0.7] -> pixels x 60..140, y 30..70
    assert crop_box([0.4, 0.4, 0.6, 0.6], 200, 100) == (60, 30, 140, 70)
    # at the border the padding is clipped
    assert crop_box([0.0, 0.0, 0.5, 0.5], 200, 100) == (0, 0, 120, 60)


def test_min_side_28_px():
    # a 2-px box padded by 0.1 of a 100 px side is 22 px -> widened about its centre to 28 px
    x0, y0, x1, y1 = crop_box([0.5, 0.5, 0.51, 0.52], 1000, 100)
    assert y1 - y0 == 28 and (y0 + y1) / 2 == pytest.approx(51, abs=1)
    assert x1 - x0 >= 28
    # near the border the widened crop is shifted inside the image
    assert crop_box([0.0, 0.0, 0.01, 0.01], 100, 100) == (0, 0, 28, 28)
    # an image smaller than 28 px gives its whole side
    assert crop_box([0.2, 0.2, 0.4, 0.4], 20, 20) == (0, 0, 20, 20)


def test_view_is_the_crop_scaled():
    img = _image()
    obs = run_tool("ZOOM", {"box": [0.4, 0.4, 0.6, 0.6], "scale": 3}, image=img)
    assert obs.ok and obs.artifact == {"box": [0.3, 0.3, 0.7, 0.7], "size": [240, 120]}
    crop = img[30:70, 60:140]
    assert obs.view.shape == (120, 240, 3)
    assert (obs.view[::3, ::3] == crop).all() and (obs.view[2::3, 2::3] == crop).all()
    assert "view" not in obs.text
