"""The shared mask rules: the EOS completion mask, the masked token mean, position ids from a mask."""
import pytest
import torch

from ttrl_lightning.masking import completion_mask_at_eos, masked_token_mean, position_ids_from_mask


def test_completion_mask_at_eos():
    ids = torch.tensor([[5, 1, 7, 1], [5, 6, 7, 8]])
    assert completion_mask_at_eos(ids, 1).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert completion_mask_at_eos(ids, None).tolist() == [[1] * 4] * 2


def test_masked_token_mean_and_position_ids():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    m = torch.tensor([[True, True, False], [True, False, False]])
    assert masked_token_mean(x, m).item() == pytest.approx(7 / 3)
    assert masked_token_mean(x, torch.zeros_like(m)).item() == 0.0  # no token: 0, not NaN
    attn = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])  # left padding, then right padding
    assert position_ids_from_mask(attn).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]
