"""AttentionMassRecorder: following the keys of a forward (state) is separate from reading the groups."""
from __future__ import annotations

import pytest
import torch

from ttrl_lightning.integrations import GENERATED, IMAGE, PROMPT, AttentionMassRecorder


def test_groups_for_reads_without_side_effects_and_track_keys_follows_generation():
    rec = AttentionMassRecorder(torch.tensor([[PROMPT, IMAGE, PROMPT], [PROMPT, PROMPT, IMAGE]]))
    before = rec.key_groups.clone()
    assert rec.groups_for(2, "cpu").tolist() == [[PROMPT, IMAGE], [PROMPT, PROMPT]]
    assert torch.equal(rec.key_groups, before)  # a read changes nothing
    with pytest.raises(ValueError, match="track_keys first"):
        rec.groups_for(4, "cpu")
    rec.track_keys(3, batch=4)  # generate(num_return_sequences=2): each prompt twice, consecutively
    assert rec.key_groups[:, 1].tolist() == [IMAGE, IMAGE, PROMPT, PROMPT]
    rec.add(0, torch.ones(4, 2, 3, 4))
    rec.track_keys(4, batch=4)  # one decoding step later: the new key is a generated token
    assert rec.groups_for(4, "cpu")[:, 3].tolist() == [GENERATED] * 4
    with pytest.raises(ValueError, match="not a multiple"):
        rec.track_keys(4, batch=3)
    torch.testing.assert_close(rec.mass(), torch.ones(4, 3, 4))  # summed over 2 heads, divided by 2
