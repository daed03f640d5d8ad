import pytest

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS, PseudoLabelError, pseudo_label
from ttrl_lightning.pseudo_labels.rollouts import canonical_answers

LABELERS = ["majority", "self_harmony", "visconf", "pixel", "self_certainty", "entropy", "random_reward",
            "gold_reward", "soft_majority", "null_reward", "format_reward"]
#: the options a labeler needs besides the rollouts (the controls: a seed, the gold answer)
NEEDS = {"random_reward": {"seed": 0}, "gold_reward": {"gold": "1"}}


@pytest.mark.parametrize("method", LABELERS)
def test_empty_rollouts_is_a_clear_error(method):
    with pytest.raises(PseudoLabelError, match=f"{method}: rollouts is empty"):
        pseudo_label(method, [], **NEEDS.get(method, {}))


@pytest.mark.parametrize("method", LABELERS)
@pytest.mark.parametrize("bad,shown", [(float("nan"), "NaN"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_non_finite_signal_names_rollout_field_and_token(method, bad, shown):
    good = {"self_certainty": [1.0, 2.0], "entropy": [0.5, 0.5]}
    rollouts = [
        {"answer": "5", "view": "original", **good},
        {"answer": "5", "view": "reframed", "text": "SOLUTION: 5", **good},
        {"answer": "5", "view": "original", "self_certainty": [1.0, 2.0], "entropy": [0.1, bad]},
    ]
    with pytest.raises(PseudoLabelError) as err:
        pseudo_label(method, rollouts, **NEEDS.get(method, {}))
    msg = str(err.value)
    assert f"{method}: rollouts[2].entropy" in msg and shown in msg and "token 1" in msg


def test_not_a_list_and_not_a_dict():
    with pytest.raises(PseudoLabelError, match="must be a list"):
        pseudo_label("majority", "5")
    with pytest.raises(PseudoLabelError, match=r"rollouts\[1\] must be a dict"):
        pseudo_label("majority", [{"answer": "5"}, "5"])


def test_bad_view_and_bad_answer_type_are_named():
    with pytest.raises(PseudoLabelError, match=r"rollouts\[1\]\.view"):
        pseudo_label("self_harmony", [{"answer": "5"}, {"answer": "5", "view": "rephrased"}])
    for not_a_view in (0, 1, ""):  # the pool schema's rule: only absent or None means "original"
        with pytest.raises(PseudoLabelError, match=r"rollouts\[1\]\.view"):
            pseudo_label("self_harmony", [{"answer": "5"}, {"answer": "5", "view": not_a_view},
                                          {"answer": "5", "view": "reframed"}])
    with pytest.raises(PseudoLabelError, match=r"rollouts\[0\]\.answer"):
        pseudo_label("majority", [{"answer": 5}])


def test_canonical_answers_use_equivalence_classes_and_extraction():
    rollouts = [{"answer": "0.5"}, {"text": r"so \boxed{\frac{1}{2}}"}, {"text": "no idea"}, {"answer": "3"}]
    assert canonical_answers(rollouts) == ["0.5", "0.5", NO_ANSWER, "3"]


def test_every_registered_labeler_is_covered_here():
    assert set(PSEUDO_LABELERS.names()) == set(LABELERS)


def test_rollout_dicts_per_token_arrays_are_checked_as_pool_files_are():
    """One check of per-token arrays (data.pool_schema.token_array), at the file boundary and for a labeler's
    dicts: a value that is inf in float32, a share outside [0, 1] and a string are refused, named."""
    import numpy as np

    inf32 = r"majority: rollouts\[1\]\.entropy holds 1e\+39 at token 0, which is inf in float32"
    with pytest.raises(PseudoLabelError, match=inf32):
        pseudo_label("majority", [{"answer": "1"}, {"answer": "1", "entropy": [1e39]}])
    share = r"rollouts\[0\]\.visual_engagement\[1\] = 1\.5 is outside \[0, 1\]"
    with pytest.raises(PseudoLabelError, match=share):
        pseudo_label("majority", [{"answer": "1", "visual_engagement": [0.5, 1.5]}])
    with pytest.raises(PseudoLabelError, match=r"rollouts\[0\]\.logprob\[0\] must be a number"):
        pseudo_label("majority", [{"answer": "1", "logprob": ["-0.5"]}])
    out = pseudo_label("majority", [{"answer": "1", "entropy": np.array([0.25, 0.5])}])  # arrays are read too
    assert out.label == "1"
