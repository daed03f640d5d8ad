"""benchmarks/labelers/vlm_engagement.py: its AUROCs equal the Mann-Whitney count on hand-made votes, its label accuracies
are the labelers' own, and the script runs end to end on a tiny VLM."""
import json

import pytest

from benchmarks.labelers.vlm_engagement import analyse, main


def _rollout(answer, v, sc):
    return {"answer": answer, "text": f"The answer is {answer}.", "visual_engagement": [v, v],
            "self_certainty": [sc, sc + 0.5]}


def _mann_whitney(pos, neg):
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))


def test_the_aurocs_are_the_pairwise_order_of_right_over_wrong_votes():
    records = [
        {"id": "a", "gold": "red", "rollouts": [_rollout("red", 0.3, 1.0), _rollout("red", 0.2, 2.0),
                                                _rollout("blue", 0.1, 3.0)]},
        {"id": "b", "gold": "green", "rollouts": [_rollout("green", 0.05, 1.0), _rollout("blue", 0.4, 1.5),
                                                  _rollout("blue", 0.35, 0.5)]},
    ]
    report = analyse(records)
    # V within a question: a ranks its right votes first (1.0), b its wrong ones (0.0)
    assert report["auroc_within_question"]["V"] == pytest.approx((1.0 + 0.0) / 2)
    pos, neg = [0.3, 0.2, 0.05], [0.1, 0.4, 0.35]
    assert report["auroc_pooled"]["V"] == pytest.approx(_mann_whitney(pos, neg))
    assert report["mixed_questions"] == 2 and report["right_share"] == pytest.approx(3 / 6)
    # majority: red (right) and blue (wrong)
    assert report["label_accuracy"]["majority"] == pytest.approx(0.5)


def test_the_script_samples_a_tiny_vlm_and_writes_its_report(tmp_path):
    from ttrl_lightning.generate.scene_questions import write_scene_questions

    data = write_scene_questions(str(tmp_path / "q"), 2, seed=3, kinds=["tinted_object_colour"])
    out = tmp_path / "r.json"
    assert main(["--model", "tiny:qwen2_vl", "--data", data, "--n", "3", "--max-new-tokens", "4",
                 "--workdir", str(tmp_path / "w"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["questions"] == 2 and report["rollouts"] == 6
    assert set(report["label_accuracy"]) == {"majority", "visconf", "visconf_without_V"}
