"""Neighbourhood value, EMA baseline, advantages and VisFid (ttrl_lightning/retrieval/neighbourhood.py),
hand-worked."""
import numpy as np
import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.retrieval.neighbourhood import (NeighbourhoodBaseline, box_iou, mask_iou,
                                                    neighbour_visual_fidelity, neighbourhood_advantages,
                                                    neighbourhood_value, text_similarity)


def test_value_baseline_and_advantages_hand_worked():
    assert neighbourhood_value([0.2, 0.4, 0.9]) == pytest.approx(0.5)
    assert neighbourhood_value([]) is None
    with pytest.raises(UserError, match="neighbour value 1 is nan"):
        neighbourhood_value([0.1, float("nan")])
    b = NeighbourhoodBaseline(rho=0.9)
    assert b["q"] == 0.0
    assert b.update("q", 0.5) == pytest.approx(0.5)  # first visit starts the EMA
    assert b.update("q", 1.0) == pytest.approx(0.9 * 0.5 + 0.1 * 1.0)
    assert b.update("q", None) == pytest.approx(0.55)  # no neighbourhood: unchanged
    assert b.update("other", 0.2) == pytest.approx(0.2)
    # A_j = v_bar (r_j - b): 0.5 * ([1, 0] - 0.55)
    np.testing.assert_allclose(neighbourhood_advantages([1.0, 0.0], 0.5, 0.55), [0.225, -0.275])
    np.testing.assert_allclose(neighbourhood_advantages([1.0, 0.0], None, None), [1.0, 0.0])  # neutral


def test_metrics_hand_worked():
    assert box_iou([0, 0, 2, 2], [1, 1, 3, 3]) == pytest.approx(1 / 7)
    assert box_iou([0, 0, 1, 1], [2, 2, 3, 3]) == 0.0
    a = np.zeros((4, 4), bool)
    a[:2] = True
    b = np.zeros((4, 4), bool)
    b[1:3] = True
    assert mask_iou(a, b) == pytest.approx(4 / 12)
    assert text_similarity("Total 42", "total 42") == 1.0
    assert text_similarity("exit", "exlt") == pytest.approx(0.75)  # one substitution in four
    assert text_similarity("cat", "dog") == 0.0  # NL = 1 >= 0.5


def test_visfid_is_the_fraction_of_matching_neighbours():
    query = [{"tool": "SEG", "box": [0.1, 0.1, 0.5, 0.5]}, {"tool": "OCR", "text": "EXIT"}]
    neighbours = [
        [{"tool": "SEG", "box": [0.12, 0.1, 0.5, 0.52]}],          # IoU ~0.9 -> match
        [{"tool": "OCR", "text": "exlt"}],                          # ANLS term 0.75 -> match
        [{"tool": "SEG", "box": [0.6, 0.6, 0.9, 0.9]}],            # no overlap
        [{"tool": "TRK", "box": [0.1, 0.1, 0.5, 0.5]}],            # same box, other tool -> no match
    ]
    assert neighbour_visual_fidelity(query, neighbours) == pytest.approx(0.5)
    assert neighbour_visual_fidelity(query, neighbours, threshold=0.8) == pytest.approx(0.25)
    assert neighbour_visual_fidelity(query, []) is None
    assert neighbour_visual_fidelity([], neighbours) is None
    assert neighbour_visual_fidelity(query, neighbours, match=lambda a, b: 1.0) == 1.0
