"""avg@k / maj@k / pass@k (ttrl_lightning/eval/sampled.py): a hand-worked set, an independent brute-force
computation on random sets, the input checks, and the sampling loop (a scripted engine and the tiny model)."""
import random
from collections import Counter

import pytest

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.errors import UserError
from ttrl_lightning.eval.sampled import SampledMetrics, evaluate_sampled, sampled_metrics
from ttrl_lightning.rollout import HFGenerateEngine, Rollouts, SamplingParams
from ttrl_lightning.rollout.requests import as_requests
from ttrl_lightning.seeding import derive_seed

#: (gold, choices, 4 completions) -> worked out by hand: (correct samples, majority answer, majority correct)
HAND = [
    ("4", None, ["\\boxed{4}", "The answer is 4.", "\\boxed{5}", "no idea"], (2, "4", True)),
    # 1/2 and 0.5 are one class (represented by the first); 2 votes each for it and for 3: tie -> first sampled
    ("0.5", None, ["\\boxed{\\frac{1}{2}}", "\\boxed{3}", "\\boxed{3}", "\\boxed{0.5}"], (2, "\\frac{1}{2}", True)),
    # two unextractable answers vote together and win; a NO_ANSWER majority is wrong
    ("7", None, ["blah", "\\boxed{8}", "nothing", "\\boxed{7}"], (1, NO_ANSWER, False)),
    # multiple choice: the option text "dog" is option B; tie 2-2, B sampled first
    ("B", {"A": "cat", "B": "dog"}, ["\\boxed{dog}", "The answer is (A).", "\\boxed{A}", "\\boxed{B}"], (2, "B", True)),
    ("10", None, ["\\boxed{9}"] * 4, (0, "9", False)),
    # tie 2-2 where the wrong answer is sampled first
    ("3", None, ["\\boxed{2}", "\\boxed{3}", "\\boxed{3}", "\\boxed{2}"], (2, "2", False)),
]


def test_hand_worked_set():
    golds = [h[0] for h in HAND]
    m = sampled_metrics([h[2] for h in HAND], golds, choices=[h[1] for h in HAND], ids=list("abcdef"))
    # avg: (2 + 2 + 1 + 2 + 0 + 2) / 4 / 6 = 9/24; maj: a, b, d correct = 3/6; pass: all but e = 5/6
    assert (m.k, m.num_questions) == (4, 6)
    assert m.avg_at_k == pytest.approx(9 / 24) and m.maj_at_k == pytest.approx(0.5)
    assert m.pass_at_k == pytest.approx(5 / 6)
    assert [(p["correct"], p["majority"], p["majority_correct"]) for p in m.per_question] == [h[3] for h in HAND]
    assert [p["id"] for p in m.per_question] == list("abcdef")
    assert m.as_dict() == {"k": 4, "num_questions": 6, "avg@4": m.avg_at_k, "maj@4": m.maj_at_k,
                           "pass@4": m.pass_at_k}


def _brute_force(values, golds):
    """Independent of the package: answers are known integers (None: unextractable), equality is string
    equality; majority = most votes, ties to the earliest first occurrence, None never correct."""
    avg = maj = pas = 0.0
    for vals, gold in zip(values, golds):
        labels = ["none" if v is None else str(v) for v in vals]
        counts = Counter(labels)
        top = max(counts.values())
        winner = next(lab for lab in labels if counts[lab] == top)  # first in sample order among the top
        hits = [v is not None and str(v) == gold for v in vals]
        avg += sum(hits) / len(vals)
        maj += winner != "none" and winner == gold
        pas += any(hits)
    n = len(golds)
    return avg / n, maj / n, pas / n


def _render(v, rng):
    if v is None:
        return rng.choice(["I am not sure", "", "the result follows"])
    return rng.choice([f"so \\boxed{{{v}}}", f"The answer is {v}.", f"Final answer: {v}"])


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force_on_random_sets(seed):
    rng = random.Random(seed)
    q, k = 40, rng.choice([1, 3, 8])
    values = [[rng.choice([None, 0, 1, 2, 3]) for _ in range(k)] for _ in range(q)]
    golds = [str(rng.randint(0, 3)) for _ in range(q)]
    texts = [[_render(v, rng) for v in row] for row in values]
    m = sampled_metrics(texts, golds)
    assert (m.avg_at_k, m.maj_at_k, m.pass_at_k) == pytest.approx(_brute_force(values, golds), abs=1e-12)
    assert [p["correct"] for p in m.per_question] == [sum(v is not None and str(v) == g for v in row)
                                                      for row, g in zip(values, golds)]


@pytest.mark.parametrize("texts, golds, match", [
    ([["\\boxed{1}", "x"], ["y"]], ["1", "2"], r"question '1' has 1 completions but question '0' has 2"),
    ([["\\boxed{1}"], ["y"]], ["1", None], r"question '1' has no gold answer"),
    ([[], []], ["1", "2"], r"question '0' has no completions"),
    ([["a"]], ["1", "2"], r"golds has 2 entries for 1 questions"),
    (["abc"], ["1"], r"question '0': expected a list of completions"),
    ([], [], "no questions"),
])
def test_inputs_are_checked(texts, golds, match):
    with pytest.raises(ValueError, match=match):
        sampled_metrics(texts, golds)


class ScriptedEngine:
    """Answers prompt ``"<x>"`` with ``\\boxed{x}`` on the first sample and ``\\boxed{x+1}`` on the others;
    records the parameters of every call."""

    def __init__(self):
        self.calls = []

    def generate(self, model, prompts, params):
        prompts = [r.text for r in as_requests(prompts)]  # the texts the engine is asked to sample
        self.calls.append((list(prompts), params))
        texts = [f"\\boxed{{{int(p) + (j > 0)}}}" for p in prompts for j in range(params.n)]
        return Rollouts(prompt_ids=None, prompt_mask=None, completion_ids=None, completion_mask=None,
                        texts=texts, group=None, n=params.n)

    def sync_weights(self, model):
        return None

    owns_weights, max_model_len, record_signals = False, None, False


def _questions(n, gold=lambda i: str(i)):
    return [{"id": f"q{i}", "prompt": str(i), "gold": gold(i), "choices": None, "images": []} for i in range(n)]


def test_evaluate_sampled_groups_texts_and_derives_one_seed_per_batch():
    engine = ScriptedEngine()
    m, texts = evaluate_sampled(None, None, _questions(5), k=3, params=SamplingParams(n=1, seed=9),
                                batch_size=2, engine=engine)
    assert texts[3] == ["\\boxed{3}", "\\boxed{4}", "\\boxed{4}"]
    assert [c[0] for c in engine.calls] == [["0", "1"], ["2", "3"], ["4"]]
    assert [c[1].n for c in engine.calls] == [3, 3, 3]
    assert [c[1].seed for c in engine.calls] == [derive_seed(9, "rollout", b) for b in range(3)]
    # every question: 1 of 3 samples correct, majority (x+1) wrong, pass yes
    assert (m.avg_at_k, m.maj_at_k, m.pass_at_k) == pytest.approx((1 / 3, 0.0, 1.0))
    assert isinstance(m, SampledMetrics) and m.as_dict()["pass@3"] == 1.0


def test_evaluate_sampled_refuses_questions_without_gold_or_with_images():
    qs = _questions(8, gold=lambda i: None if i in (2, 5) else str(i))
    with pytest.raises(UserError, match=r"2 question\(s\) have no gold answer.*: 'q2', 'q5'"):
        evaluate_sampled(None, None, qs, k=2, params=SamplingParams(), engine=ScriptedEngine())
    qs = _questions(3)
    qs[1]["images"] = ["/x.png"]
    with pytest.raises(UserError, match=r"question 2 \(id='q1'\): has an image, but the model is a text-only model"):
        evaluate_sampled(None, None, qs, k=2, params=SamplingParams())


def test_tiny_model_texts_are_the_engines_samples():
    """With the real HF engine on the tiny model: the texts are the engine's rows of each prompt (prompt-major,
    batch b seeded with derive_seed(seed, "rollout", b)), and the metrics those of sampled_metrics."""
    from ttrl_lightning.models import build_char_tokenizer, load_model

    tok = build_char_tokenizer()
    model = load_model("tiny:qwen2", tok, seed=0)
    qs = _questions(3)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=4)
    m, texts = evaluate_sampled(model, tok, qs, k=2, params=params, batch_size=2)
    rows = []
    for b, prompts in enumerate([["0", "1"], ["2"]]):
        batch_params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=derive_seed(4, "rollout", b))
        rows += HFGenerateEngine(tok).generate(model, prompts, batch_params).texts
    assert texts == [rows[0:2], rows[2:4], rows[4:6]]
    assert m.as_dict() == sampled_metrics(texts, ["0", "1", "2"]).as_dict()


def test_step_zero_reward_accuracy_by_hand():
    """Majority TTRL's reward accuracy before training, on hand-worked votes: q1 majority "4" right (every sample's
    pseudo-reward equals its gold reward: 4 of 4); q2 majority "7" (3 votes) wrong, gold "5" (1 vote): 4 of 4
    disagree; q3 majority "9" (2 votes) wrong, gold "8" absent, two other answers: 2 of 4 agree; q4 unextractable
    answers win: it abstains. (4 + 0 + 2) / 12 = 0.5."""
    texts = [["4", "4", "4", "3"], ["7", "7", "7", "5"], ["9", "9", "1", "2"], ["x", "x", "x", "3"]]
    m = sampled_metrics(texts, ["4", "5", "8", "3"], extract=lambda t, c: t if t != "x" else NO_ANSWER)
    assert [p["majority_votes"] for p in m.per_question] == [3, 3, 2, 3]
    assert m.reward_accuracy == pytest.approx(6 / 12)
    # the formula against a direct count over the samples
    direct = [(a == p["majority"]) == (a == p["gold"]) for p in m.per_question[:3] for a in p["answers"]]
    assert m.reward_accuracy == pytest.approx(sum(direct) / len(direct))
    assert sampled_metrics([["x", "x"]], ["1"], extract=lambda t, c: NO_ANSWER).reward_accuracy is None
