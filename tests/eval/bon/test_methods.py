"""The best-of-N method registry: entries say what they need, expansion of swept methods."""
import pytest

from ttrl_lightning.consensus import CONSENSUS
from ttrl_lightning.data.simulate import simulate_pool
from ttrl_lightning.eval.bon.protocol import evaluate_pool
from ttrl_lightning.eval.bon.config import BoNConfig
from ttrl_lightning.eval.bon.methods import BON_METHODS, DEFAULT_METHODS, BoNMethod, expand_methods
from ttrl_lightning.eval.bon.rollout_scores import ROLLOUT_SCORES


def test_borda_expansion_names():
    plan = expand_methods(["self_certainty_borda", "self_certainty_borda_p1.5"],
                          BoNConfig(borda_p=(0.3, 1.2)))
    assert [p[0] for p in plan] == ["self_certainty_borda_p0.3", "self_certainty_borda_p1.2",
                                    "self_certainty_borda_p1.5"]
    assert [p.params for p in plan] == [{"p": 0.3}, {"p": 1.2}, {"p": 1.5}]
    assert {p.method.name for p in plan} == {"self_certainty_borda"}


def test_expansion_errors():
    with pytest.raises(ValueError, match="--borda-p"):
        expand_methods(["self_certainty_borda"], BoNConfig(borda_p=()))
    with pytest.raises(KeyError, match="known"):
        expand_methods(["self_certainty_borda_pX"], BoNConfig())
    with pytest.raises(KeyError, match="known"):
        expand_methods(["majority_p2"], BoNConfig())  # only swept methods take a parameter


def test_method_metadata():
    assert DEFAULT_METHODS == tuple(m for m in DEFAULT_METHODS if m in BON_METHODS)
    assert {m for m in BON_METHODS if BON_METHODS[m].needs_views} == {"hms", "dual_view_majority"}
    assert BON_METHODS["visconf_rwc"].signals == ("visual_engagement", "self_certainty")
    assert BON_METHODS["visconf_rwc"].calibrates_subsets
    assert BON_METHODS["lookback"].signals == ("logprob", "image_attention")
    assert BON_METHODS["self_certainty_borda"].signals == ("self_certainty",)
    assert BON_METHODS["min_length"].needs_token_counts and BON_METHODS["min_length"].signals == ()
    assert not any(BON_METHODS[m].calibrates_subsets
                   for m in ("majority", "lookback", "self_certainty", "hms"))
    for name in BON_METHODS:
        method = BON_METHODS[name]
        assert method.name == name
        assert method.score is None or method.score in ROLLOUT_SCORES
        if not method.needs_views and method.rule not in ("first", "oracle"):
            assert method.rule in CONSENSUS, name  # the reference decides with this public rule


def test_a_new_method_is_one_registry_entry(monkeypatch):
    """The loop reads the entry's fields: a new two-view method is checked for the reframed view, a new
    scored one for its signals, without any name check elsewhere."""
    two_view = BoNMethod("test_two_view", lambda ch: ch.member_correct().mean(-1), "dual_view_majority",
                         needs_views=True)
    scored = BoNMethod("test_scored", lambda ch: ch.score("L").argmax(-1).double(), "top1", "L")
    monkeypatch.setitem(BON_METHODS._items, two_view.name, two_view)
    monkeypatch.setitem(BON_METHODS._items, scored.name, scored)
    pool = simulate_pool(num_questions=3, rollouts=4, tokens=4, reframed=False)
    with pytest.raises(ValueError, match="reframed"):
        evaluate_pool(pool, [two_view.name], BoNConfig(ns=(2,)), progress=False)
    pool.signals.pop("image_attention")
    with pytest.raises(ValueError, match="test_scored.*image_attention"):
        evaluate_pool(pool, [scored.name], BoNConfig(ns=(2,)), progress=False)
