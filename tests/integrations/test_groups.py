"""Key groups: every special token of the tokenizer is SPECIAL, so its attention mass stays out of v."""
from __future__ import annotations

import torch

from tests.integrations._tiny_models import IMAGE_ID, qwen2_vl, vl_batch
from ttrl_lightning.integrations import GROUP_NAMES, score_rollouts
from ttrl_lightning.integrations.generation import GenerationSignalRecorder
from ttrl_lightning.integrations.groups import (GENERATED, IMAGE, PAD, PROMPT, SPECIAL, image_token_ids,
                                                key_groups_from_ids, special_token_ids)
from ttrl_lightning.integrations.scoring import visual_engagement_from_mass

IM_START = 95  # a chat marker the tokenizer knows as special but the model config does not name


class _Tokenizer:
    """The one attribute the groups read; Qwen2-VL's tokenizer also lists its image placeholder as special."""
    all_special_ids = [0, 2, IM_START, IMAGE_ID]


def test_special_ids_include_the_tokenizers():
    config = qwen2_vl().config
    assert IM_START not in special_token_ids(config)
    ids = special_token_ids(config, _Tokenizer())
    assert IM_START in ids and len(ids) == len(set(ids))


def test_tokenizer_special_token_is_special_and_leaves_v_by_hand():
    # keys: <|im_start|> img img text text gen; the query (the generated token) attends with these weights
    ids = torch.tensor([[IM_START, IMAGE_ID, IMAGE_ID, 7, 8, 9, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    completion = torch.tensor([[0, 0, 0, 0, 0, 1, 0]])
    weights = torch.tensor([0.5, 0.1, 0.1, 0.1, 0.1, 0.1, 0.0])

    def v(special):
        groups = key_groups_from_ids(ids, attention_mask, completion, image_token_ids(qwen2_vl().config), special)
        onehot = torch.nn.functional.one_hot(groups.clamp_min(0), len(GROUP_NAMES)).float() * (groups >= 0)[..., None]
        return groups, visual_engagement_from_mass(weights @ onehot[0])

    groups, v_config = v(special_token_ids(qwen2_vl().config))
    assert groups[0].tolist() == [PROMPT, IMAGE, IMAGE, PROMPT, PROMPT, GENERATED, PAD]
    assert abs(float(v_config) - 0.2 / (0.2 + 0.7 + 0.1)) < 1e-6  # the sink's 0.5 counted as prompt
    groups, v_all = v(special_token_ids(qwen2_vl().config, _Tokenizer()))
    assert groups[0].tolist() == [SPECIAL, IMAGE, IMAGE, PROMPT, PROMPT, GENERATED, PAD]  # image id stays IMAGE
    assert abs(float(v_all) - 0.2 / (0.2 + 0.2 + 0.1)) < 1e-6


def test_score_rollouts_and_generation_hook_take_the_tokenizer():
    model = qwen2_vl()
    batch = vl_batch()
    batch["input_ids"][:, 8] = IM_START  # a prompt text position (after the image, before the completion)
    plain = score_rollouts(model, batch)
    with_tok = score_rollouts(model, batch, tokenizer=_Tokenizer())
    mask = batch["completion_mask"].bool()
    moved = with_tok.group_mass[..., SPECIAL][mask] - plain.group_mass[..., SPECIAL][mask]
    assert (moved > 0).all()  # the marker's mass left PROMPT for SPECIAL, and nothing else moved
    torch.testing.assert_close(plain.group_mass[..., PROMPT][mask] - with_tok.group_mass[..., PROMPT][mask], moved)
    torch.testing.assert_close(with_tok.group_mass[..., IMAGE][mask], plain.group_mass[..., IMAGE][mask])
    assert (with_tok.visual_engagement[mask] > plain.visual_engagement[mask]).all()
    prompt = batch["input_ids"][:, :10]
    rec = GenerationSignalRecorder(model, prompt, batch["attention_mask"][:, :10], tokenizer=_Tokenizer())
    assert (rec.groups[:, 8] == SPECIAL).all()
    assert (GenerationSignalRecorder(model, prompt, batch["attention_mask"][:, :10]).groups[:, 8] == PROMPT).all()
