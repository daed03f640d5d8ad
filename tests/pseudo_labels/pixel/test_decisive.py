"""Decisive tool steps (``pseudo_labels.pixel.decisive``): the token masks of Pixelis sec. 3.2.3 on hand-made ids."""
import pytest

from ttrl_lightning.pseudo_labels import decisive_token_mask


# ------------------------------------------------------------------------------------- decisive tokens

CS, CE, OS, OE = 10, 11, 12, 13


@pytest.mark.parametrize("ids,expected", [
    ([1, 2, 3], [True, True, True]),                                       # no tool call: all decisive
    ([1, 2, CS, 3, 4, CE, OS, 5, OE, 6, 7],
     [False, False, True, True, True, True, False, False, False, True, True]),
    ([CS, 3, CE, OS, 5, OE, 1, CS, 4, CE, OS, 6, OE, 7, 8],
     [True, True, True, False, False, False, False, True, True, True, False, False, False, True, True]),
    ([CS, 3, CE, OS, 5, OE, 1, CS, 4, CE],                                 # a call after the last observation
     [True, True, True, False, False, False, True, True, True, True]),
    ([CS, 3, CE, 1, 2], [True] * 5),                                        # a call with no observation
    ([], []),
])
def test_decisive_token_mask_on_hand_made_ids(ids, expected):
    assert decisive_token_mask(ids, CS, CE, OE) == expected


def test_decisive_token_mask_with_the_char_tokenizer():
    from ttrl_lightning.models import build_char_tokenizer
    from ttrl_lightning.tools.protocol import CALL_END, CALL_START, OBSERVATION_END

    tok = build_char_tokenizer()
    text = "12+7=<call>add(12,7)</call><out>19</out>19<eos>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    mask = decisive_token_mask(ids, *tok.convert_tokens_to_ids([CALL_START, CALL_END, OBSERVATION_END]))
    tokens = tok.convert_ids_to_tokens(ids)
    assert "".join(t for t, m in zip(tokens, mask) if m) == "<call>add(12,7)</call>19<eos>"


def test_decisive_token_mask_refuses_bad_ids():
    with pytest.raises(TypeError, match=r"completion_ids\[1\]"):
        decisive_token_mask([1, 2.0], CS, CE, OE)
    with pytest.raises(ValueError, match="three different ids"):
        decisive_token_mask([1], CS, CS, OE)

def test_decisive_mask_of_a_completion_cut_after_an_observation_is_every_token():
    from ttrl_lightning.pseudo_labels.pixel.labeler import decisive_token_mask

    # 7 text, 3 observation end: the budget ended the completion right after the observation
    assert decisive_token_mask([7, 7, 3], 1, 2, 3) == [True, True, True]
    assert decisive_token_mask([7, 3, 9], 1, 2, 3) == [False, False, True]
