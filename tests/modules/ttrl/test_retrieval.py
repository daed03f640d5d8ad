"""Pixel TTRL's per-query baseline from retrieved neighbours (issue 21, D8): the first step (empty index) is
the global EMA rule, later steps take vbar(N(q)) [r - b(q)] by hand, accepted questions become exemplars, the
whitelist keeps evaluation ids out, and a checkpoint restores the same neighbourhoods from the index file."""
import numpy as np
import pytest
import torch

pytest.importorskip("faiss")

from tests.modules.ttrl.test_module import BATCH, SCRIPT, _module  # noqa: E402
from ttrl_lightning.errors import UserError  # noqa: E402


def _advantages(m):
    scored = m.scored(m.rollout(BATCH), BATCH)
    return m.group_advantages(scored)


def test_neighbourhood_advantages_by_hand(tmp_path):
    path = str(tmp_path / "exemplars.faiss")
    m = _module(SCRIPT, advantage={"rule": "ema_baseline", "baseline_momentum": 0.5, "retrieval": {"index": path, "k": 2}})
    plain = _module(SCRIPT, advantage={"rule": "ema_baseline", "baseline_momentum": 0.5})
    torch.testing.assert_close(_advantages(m), _advantages(plain))  # empty index: the global rule
    hood = m.neighbourhoods
    # accepted: a (rows 5 5 6 under label 5: rewards 1 1 0) and c (6 7 7 under label 7: 0 1 1); b abstained
    assert hood.index.ids == ["a", "c"] and hood.values == pytest.approx({"a": 2 / 3, "c": 2 / 3})
    adv = _advantages(m)
    # a's only neighbour is c and c's is a: vbar = 2/3, b(q) = 2/3 (the first value seen), A = vbar (r - b)
    r = torch.tensor([1, 1, 0, 0, 1, 1.0])
    raw = (2 / 3) * (r - 2 / 3)
    torch.testing.assert_close(adv[[0, 1, 2, 6, 7, 8]], raw / raw.std())
    assert adv[3:6].eq(0).all()
    assert hood.baseline["a"] == pytest.approx(2 / 3)


def test_a_checkpoint_restores_the_neighbourhoods_and_drops_later_exemplars(tmp_path):
    path = str(tmp_path / "exemplars.faiss")
    kw = dict(rule="ema_baseline", retrieval={"index": path, "k": 2, "whitelist": ["eval-1"]})
    m = _module(SCRIPT, advantage=kw)
    _advantages(m)
    ckpt = {}
    m.on_save_checkpoint(ckpt)
    # after the checkpoint the run appends an exemplar and rewrites the file, then stops
    m.neighbourhoods.append(["z", "eval-1"], np.eye(2, m.neighbourhoods.index.dim, dtype=np.float32), [0.0, 1.0])
    assert "eval-1" not in m.neighbourhoods.index and "eval-1" not in m.neighbourhoods.values  # whitelisted
    m.neighbourhoods.index.save(path)
    resumed = _module(SCRIPT, advantage=kw)
    resumed.on_load_checkpoint(ckpt)
    hood = resumed.query_neighbourhoods()
    assert hood.index.ids == ["a", "c"] and "z" not in hood.values
    expected = _module(SCRIPT, advantage=dict(kw, retrieval={"index": str(tmp_path / "other.faiss"), "k": 2}))
    _advantages(expected)
    torch.testing.assert_close(_advantages(resumed), _advantages(expected))


def test_retrieval_options_are_checked(tmp_path):
    with pytest.raises(UserError, match="retrieval is a mapping .* for rule ema_baseline"):
        _module(SCRIPT, advantage={"rule": "group", "retrieval": {"index": str(tmp_path / "x")}})
    with pytest.raises(UserError, match=r"unknown option\(s\) \['kk'\]"):  # when the module is built
        _module(SCRIPT, advantage={"rule": "ema_baseline", "retrieval": {"index": str(tmp_path / "x"), "kk": 3}})
    with pytest.raises(UserError, match=r"retrieval.k must be an integer >= 1, got 0"):
        _module(SCRIPT, advantage={"rule": "ema_baseline", "retrieval": {"index": str(tmp_path / "x"), "k": 0}})
    with pytest.raises(UserError, match=r"rho must be in \[0, 1\)"):
        _module(SCRIPT, advantage={"rule": "ema_baseline", "retrieval": {"index": str(tmp_path / "x"), "rho": 1.0}})
