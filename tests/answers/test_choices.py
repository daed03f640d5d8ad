"""Multiple-choice canonicalisation: ttrl_lightning.answers.choices."""
import pytest

from ttrl_lightning.answers.choices import canonical_choice, normalise_choices, option_key

CHOICES = {"A": "more than 50%", "B": "less than 30%"}


def test_normalise_choices():
    assert normalise_choices(None) is None
    assert normalise_choices(["x", "y"]) == {"A": "x", "B": "y"}
    assert normalise_choices({"b": "y"}) == {"B": "y"}
    with pytest.raises(ValueError, match="single letters"):
        normalise_choices({"AB": "x"})
    with pytest.raises(TypeError):
        normalise_choices("AB")


def test_option_key_ignores_case_space_punctuation_and_text_macros():
    assert option_key(r"\text{Less Than 30 \%}") == option_key("less than 30%") == "lessthan30"


@pytest.mark.parametrize("candidate", ["b", "(b)", "B.", "Option B", "(B) more than 50%", "Less than 30 %"])
def test_canonical_choice_with_choices(candidate):
    assert canonical_choice(candidate, CHOICES) == "B"


def test_canonical_choice_without_choices():
    assert canonical_choice("(b)", None) == "B"
    assert canonical_choice("B", None) == "B"
    assert canonical_choice("b", None) is None  # a bare lowercase letter may be a variable
    assert canonical_choice("42", None) is None
