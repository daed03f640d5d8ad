"""Hand-written cases for answer equivalence (VisConf appendix A): ttrl_lightning.answers.equivalence."""
import logging
import threading

import pytest

from ttrl_lightning.answers import NO_ANSWER, answers_equal, equivalence_stats
from ttrl_lightning.answers.equivalence import COMPARISON_BUDGET_S


@pytest.mark.parametrize(
    "a, b",
    [
        ("0.5", r"\frac{1}{2}"),
        ("1/2", "0.5"),
        (r"\frac{1}{2}", "1/2"),
        (r"\dfrac{3}{4}", "0.75"),
        (r"50\%", "0.5"),  # percentage equals its value ...
        (r"50\%", "50"),  # ... and its bare number (math-verify's grading rule)
        ("x=3", "3"),
        ("10^{2}", "100"),
        ("2", "2.0"),
        ("4/2", "2"),
        (r"\sqrt{2}", "1.41421356"),
        ("a", "A"),
        (r"\text{B}", "B"),
        ("$3$", "3"),
        ("x = 3", "x=3"),
        ("Paris", "paris"),
        ("less than 30%", "Less than 30 %"),
        ("0.3333333", "1/3"),  # within math-verify's 6-decimal rounding
        (r"\frac{6}{8}", "0.75"),
        ("x=3", r"\sqrt{9}"),
        ("2^{100}", "1267650600228229401496703205376"),
        ("3xy^2", "3y^2x"),  # a two-letter run with math signs is math
        (r"\sin x", r"\sin(x)"),
    ],
)
def test_answers_equal_true(a, b):
    assert answers_equal(a, b)
    assert answers_equal(b, a)  # symmetric


@pytest.mark.parametrize(
    "a, b",
    [
        ("2", "3"),
        ("0.5", "0.25"),
        ("A", "B"),
        ("x=3", "x=4"),
        ("hello world", "world hello"),  # prose is never parsed as a product of symbols
        ("0.5", "50"),  # percentage equality is not transitive
        ("12345678901234567", "12345678901234568"),  # integers compare exactly
        ("1/0", "1/00"),
        ("", ""),
        ("0.333", "1/3"),
        ("x=3", r"\sqrt{10}"),
        (r"\frac{1}{3}", r"\frac{1}{4}"),
        ("no", "on"),  # words, not n*o
        ("xy", "yx"),  # a bare two-letter answer is treated as a word (documented limitation)
    ],
)
def test_answers_equal_false(a, b):
    assert not answers_equal(a, b)
    assert not answers_equal(b, a)


def test_clearly_different_numbers_skip_symbolic_comparison():
    # constants far apart are decided without math-verify's (slow) symbolic verify; near ones still use it
    _clear_caches()
    before = equivalence_stats()["verify_calls"]
    assert not answers_equal(r"\sqrt{71}", "13")
    assert not answers_equal("y=17", r"\sqrt{3}")
    assert not answers_equal("0.12345", r"\frac{7}{9}")
    assert equivalence_stats()["verify_calls"] == before
    assert answers_equal(r"\sqrt{81}", "x=9")
    assert equivalence_stats()["verify_calls"] == before + 1


def test_no_answer_never_equal():
    assert not answers_equal(NO_ANSWER, NO_ANSWER)
    assert not answers_equal(NO_ANSWER, "3")
    assert not answers_equal("3", NO_ANSWER)


def test_answers_equal_type_errors():
    with pytest.raises(TypeError):
        answers_equal(3, "3")
    with pytest.raises(TypeError):
        answers_equal("3", None)


def _clear_caches():
    from ttrl_lightning.answers.equivalence import clear_caches

    clear_caches()


def _timed(a, b):
    """(result, seconds, whether it was undecidable: screened or timed out) of one uncached comparison."""
    import time

    before = equivalence_stats()
    t = time.perf_counter()
    result = answers_equal(a, b)
    after = equivalence_stats()
    undecided = after["screened"] + after["timeouts"] > before["screened"] + before["timeouts"]
    return result, time.perf_counter() - t, undecided


#: a comparison returns within the budget, plus what delivering the stop costs on a loaded machine (generous: a
#: second core at work stretched the main thread's calls 2x; these comparisons cost minutes unbounded)
BOUND_S = COMPARISON_BUDGET_S + 8.0

NESTED_FRACS = "1"
for _ in range(25):
    NESTED_FRACS = r"\frac{1}{" + NESTED_FRACS + "}"

HOSTILE = [(r"10^{10^{10^{10}}}", "5"), (NESTED_FRACS, "1"), ("(x+1)^{100000}", "(1+x)^{100000}"), ("1000000!", "3"),
           ("(" * 80 + "1" + ")" * 80, "1"), (r"\sum_{k=1}^{9999} k^{9999}", "7"), ("2**3**4**5", "8")]


@pytest.mark.parametrize("a, b", HOSTILE, ids=["tower", "fracs", "expansion", "factorial", "parens", "sum", "pow"])
def test_hostile_answers_are_undecided_within_the_bound_in_the_main_thread_and_a_thread(a, b, caplog):
    """Short model-writable answers that made sympy hang (no limit in the main thread for evalf, none at all
    in other threads): each is refused by the screen or stopped by the time limit, counted, logged, and
    compares as different, in the main thread and in a ``threading.Thread`` alike."""
    out = {}
    for where in ("main", "thread"):
        _clear_caches()
        with caplog.at_level(logging.WARNING, logger="ttrl_lightning.answers"):
            if where == "main":
                out[where] = _timed(a, b)
            else:
                t = threading.Thread(target=lambda: out.setdefault(where, _timed(a, b)))
                t.start()
                t.join(timeout=30)
                assert not t.is_alive()
        result, seconds, undecided = out[where]
        assert result is False and undecided and seconds < BOUND_S, (where, out[where])
        assert any("counted as different" in r.getMessage() for r in caplog.records)
        caplog.clear()
    assert answers_equal(a, a)  # identical strings need no symbolic work


def test_the_time_limit_stops_python_work_in_any_thread():
    import time

    from ttrl_lightning.answers.budget import ComparisonTimeout, time_limit

    def spin(out):
        t = time.perf_counter()
        try:
            with time_limit(0.3):
                while True:
                    pass
        except ComparisonTimeout:
            out.append(time.perf_counter() - t)

    out = []
    spin(out)
    t = threading.Thread(target=spin, args=(out,))
    t.start()
    t.join(timeout=10)
    assert len(out) == 2 and all(0.3 <= s < 2.0 for s in out)
    with time_limit(0.05):
        pass
    time.sleep(0.2)  # a block left in time is never interrupted afterwards


def _random_expression(rng, depth=0):
    """A random nested LaTeX expression: numbers, x, fractions, powers (towers included), roots, sums,
    products, factorials."""
    if depth > 3 or rng.random() < 0.25:
        return rng.choice([str(rng.randint(0, 12)), str(rng.randint(0, 10 ** rng.randint(1, 6))), "x",
                           f"{rng.randint(0, 9)}.{rng.randint(0, 99)}", r"\pi"])
    def sub():
        return _random_expression(rng, depth + 1)

    forms = (lambda: rf"\frac{{{sub()}}}{{{sub()}}}",
             lambda: f"{{{sub()}}}^{{{rng.choice([sub(), str(rng.randint(0, 20000))])}}}",
             lambda: rf"\sqrt{{{sub()}}}",
             lambda: f"({sub()}+{sub()})",
             lambda: rf"{sub()} \cdot {sub()}",
             lambda: f"{rng.randint(0, 2000)}!",
             lambda: f"({sub()})^{{{rng.randint(2, 40)}}}")
    return forms[rng.randrange(len(forms))]()


def _fuzz_pairs(count=24, seed=0):
    import random

    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a = _random_expression(rng)
        b = rng.choice([a.replace(r"\cdot", "*"), _random_expression(rng), "1", r"\frac{1}{2}"])
        pairs.append((a, b))
    return pairs


def _compare_all(pairs):
    _clear_caches()
    return [_timed(a, b) for a, b in pairs]


class _FuzzDataset:
    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return 1

    def __getitem__(self, i):
        return _compare_all(self.pairs)


def test_fuzzed_comparisons_are_bounded_and_agree_in_main_thread_thread_and_dataloader_worker():
    """Generated nested expressions compared in the main thread, a ``threading.Thread`` and a DataLoader
    worker process: every call returns within ``BOUND_S``, and wherever two contexts both decided a
    comparison (neither screened nor timed out) they give the same result."""
    from torch.utils.data import DataLoader

    pairs = _fuzz_pairs()
    runs = {"main": _compare_all(pairs)}
    t = threading.Thread(target=lambda: runs.setdefault("thread", _compare_all(pairs)))
    t.start()
    t.join(timeout=len(pairs) * BOUND_S + 30)
    assert not t.is_alive()
    loader = DataLoader(_FuzzDataset(pairs), batch_size=None, num_workers=1)
    runs["worker"] = next(iter(loader))
    decided = 0
    for i, (a, b) in enumerate(pairs):
        main_result, _, main_undecided = runs["main"][i]
        for where, results in runs.items():
            result, seconds, undecided = results[i]
            assert seconds < BOUND_S, (where, a, b, seconds)
            if not (undecided or main_undecided):
                assert result == main_result, (where, a, b)
        decided += not main_undecided
    assert decided >= len(pairs) // 3  # the fuzz also exercises comparisons that finish


def test_numbers_past_pythons_int_digit_limit_compare_and_never_raise():
    """Python refuses str -> int past 4,300 digits; a model can write such a vote. Plain decimals of any length
    compare exactly by their canonical digits; a fraction or expression beside one is screened (different)."""
    from ttrl_lightning.pseudo_labels import pseudo_label

    a = "1" * 5000
    assert answers_equal(a, a) and answers_equal(a, "000" + a + ".000") and answers_equal("+" + a, a)
    assert not answers_equal(a, a + "0") and not answers_equal("-" + a, a) and not answers_equal(a, "2/3")
    assert not answers_equal("\\frac{" + a + "}{3}", "1") and not answers_equal(a + ".5", a)
    assert answers_equal("-0." + "0" * 5000, "0")
    label = pseudo_label("majority", [{"text": "x", "answer": a}, {"text": "x", "answer": a + ".0"},
                                      {"text": "x", "answer": "5"}])
    assert label.rewards == [1.0, 1.0, 0.0]


@pytest.mark.parametrize("answer, value", [(r"\Pi_{k=1}^{3} k", "1"), (r"x_{k=1}", "1"), (r"f_{n=5}", "5"),
                                           (r"a_{i=2} + 1", "2")])
def test_a_subscript_assignment_is_not_read_as_the_value(answer, value):
    """math-verify reads ``x_{k=1}`` as the assignment ``k = 1`` and the answer as 1; such an answer is compared
    as text (answers.symbolic.subscript_assignment), so it equals itself only."""
    from ttrl_lightning.answers.symbolic import subscript_assignment

    assert subscript_assignment(answer)
    assert not answers_equal(answer, value)
    assert answers_equal(answer, answer)


@pytest.mark.parametrize("answer, value", [(r"\prod_{k=1}^{3} k", "6"), (r"\sum_{k=1}^{3} k", "6"),
                                           (r"\sum_{ k = 1 }^{3} 2k", "12")])
def test_big_operators_keep_their_index(answer, value):
    from ttrl_lightning.answers.symbolic import subscript_assignment

    assert not subscript_assignment(answer)
    assert answers_equal(answer, value)
