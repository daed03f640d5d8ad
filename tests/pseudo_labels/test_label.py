import pytest

from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS, PseudoLabel, pseudo_label


def test_registry_names_every_labeler():
    assert PSEUDO_LABELERS.names() == ["entropy", "format_reward", "gold_reward", "majority", "null_reward",
                                       "pixel", "random_reward", "self_certainty", "self_harmony", "soft_majority",
                                       "visconf"]


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(KeyError) as err:
        pseudo_label("majorty", [{"answer": "1"}])
    msg = str(err.value)
    assert "majorty" in msg
    for name in PSEUDO_LABELERS.names():
        assert name in msg


def test_pseudo_label_dispatches_with_options():
    out = pseudo_label("majority", [{"text": "Answer: (b)"}, {"answer": "A"}, {"answer": "B"}],
                       choices={"A": "one", "B": "two"})
    assert isinstance(out, PseudoLabel)
    assert out.label == "B" and out.rewards == [1.0, 0.0, 1.0]


def test_unknown_option_is_an_error():
    with pytest.raises(TypeError):
        pseudo_label("majority", [{"answer": "1"}], w_f=0.3)
