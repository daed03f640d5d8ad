"""The verdict rule every benchmark that prints PASS / FAIL follows on timings.

The candidates run in turns (interleaved rounds), so each round gives a paired ratio: candidate over baseline,
measured under the same background load. A busy machine moves single timings by more than the margins the
benchmarks test (two runs of ``generate_signals.py`` under load 2.9 once printed +178% and -59% overhead), so a
verdict is printed only when every round's ratio lies on the same side of the margin; when the rounds' spread
straddles it, the line says so and gives the spread instead of a pass or a fail.
"""
from __future__ import annotations


def paired_ratios(candidate_s: list[float], baseline_s: list[float]) -> list[float]:
    """Round-by-round ratios ``candidate / baseline`` of two timing lists measured in the same rounds."""
    if len(candidate_s) != len(baseline_s) or not candidate_s:
        raise ValueError(f"paired timings need the same number of rounds (>= 1), got {len(candidate_s)} and "
                         f"{len(baseline_s)}")
    return [a / b for a, b in zip(candidate_s, baseline_s)]


def paired_verdict(ratios: list[float], margin: float, at_least: bool = True) -> str:
    """``at_least``: PASS when every ratio is >= ``margin`` (a speed-up), FAIL when every one is below it;
    otherwise (``at_least=False``, a cost bound): PASS when every ratio is <= ``margin``, FAIL when every one
    is above. Anything else is "no verdict" with the rounds' spread."""
    if not ratios:
        raise ValueError("no rounds to judge")
    ok = [(r >= margin) if at_least else (r <= margin) for r in ratios]
    side = ">=" if at_least else "<="
    spread = f"[{min(ratios):.3g}, {max(ratios):.3g}]"
    if all(ok):
        return f"PASS (every round {side} {margin:g}x; spread {spread})"
    if not any(ok):
        return f"FAIL (no round {side} {margin:g}x; spread {spread})"
    return f"no verdict: the rounds' spread {spread} straddles {margin:g}x"
