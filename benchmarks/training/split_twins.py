"""How "distinct" the shipped benchmarks' splits are: splits are disjoint by prompt (``data.splits``), not by
problem. This counts, for every pair of splits, the questions of the later split that are a problem of the earlier
one in another form:

- **same expression, other words**: the arithmetic expression of the prompt is character for character one of the
  other split's, the prompt is not (reasoning-gym words one ``chain_sum`` expression several ways);
- **reordered twin**: the same signed terms in another order (``7 + 5`` for ``5 + 7``; ``12+7=`` for ``7+12=``).

Splits: the real-model benchmark's (``benchmarks/training/real_model_ttrl.py`` with ``--train-on chain_sum:2x1`` and its
default sizes, the other task the first other candidate) and the text demo's TTRL splits
(``configs/ttrl/tiny_demo.yaml``). Prints one line per pair with a count above 0, writes JSON.

    python -m benchmarks.training.split_twins [--out outputs/bench/split_twins.json]
"""
from __future__ import annotations

import argparse
import os
import re

from benchmarks.common import write_json

_EXPR = re.compile(r"-?\d+(?:\s*[-+*/]\s*-?\d+)+")


def expression(prompt: str) -> str | None:
    """The last arithmetic expression of a prompt, white space removed (None when it holds none)."""
    found = _EXPR.findall(prompt)
    return re.sub(r"\s+", "", found[-1]) if found else None


def reordered(expr: str) -> tuple | None:
    """The multiset of signed terms of a sum (``5-3+2`` -> (+2, +5, -3) sorted); None for other operators."""
    if re.search(r"[*/]", expr):
        return None
    terms = re.findall(r"([-+]?)(\d+)", expr)
    return tuple(sorted((sign or "+") + num for sign, num in terms))


def twins(splits: dict[str, list[dict]]) -> list[dict]:
    """Per ordered pair (earlier, later) of splits: the later split's questions that are an earlier question's
    expression in other words, or its reordered twin."""
    from ttrl_lightning.data.splits import problem_text, prompt_key

    info = {}
    for name, qs in splits.items():
        rows = []
        for q in qs:
            text = problem_text(q)
            expr = expression(text)
            rows.append((prompt_key(text), expr, reordered(expr) if expr else None))
        info[name] = rows
    names = list(splits)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            exprs = {e: p for p, e, _ in info[a] if e}
            forms = {r for _, e, r in info[a] if r}
            words = sum(1 for p, e, _ in info[b] if e in exprs and exprs[e] != p)
            reorder = sum(1 for _, e, r in info[b] if r in forms and e not in exprs)
            out.append({"earlier": a, "later": b, "later_size": len(info[b]), "same_expression_other_words": words,
                        "reordered_twin": reorder})
    return out


def real_model_splits() -> dict[str, list[dict]]:
    from benchmarks.training import real_model_ttrl as rm

    args = rm.build_parser().parse_args(["--model", "unused", "--train-on", "chain_sum:2x1"])
    others = [c for c in args.candidates if c != "chain_sum:2x1"]
    return rm._draw(args, ["chain_sum:2x1"], others[0] if others else None)


def demo_splits() -> dict[str, list[dict]]:
    """The demo study's splits (configs/study/demo.yaml), as ``ttrl study`` writes them."""
    import tempfile

    from ttrl_lightning.data.questions import read_questions
    from ttrl_lightning.study.questions import build_questions
    from ttrl_lightning.study.spec import load_spec

    with tempfile.TemporaryDirectory() as folder:
        paths = build_questions(load_spec("study/demo.yaml").questions, folder)
        splits = {name: read_questions(path) for name, path in paths.items()}
    return {"demo/trained_on": splits["train"], "demo/validation": splits["validation"],
            "demo/calibration": splits["calibration"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/bench/split_twins.json")
    args = p.parse_args(argv)
    report = {}
    for name, draw in (("real_model_ttrl", real_model_splits), ("demo", demo_splits)):
        found = twins(draw())
        report[name] = found
        print(f"{name}:")
        for row in found:
            if row["same_expression_other_words"] or row["reordered_twin"]:
                print(f"  {row['later']} ({row['later_size']}) vs {row['earlier']}: "
                      f"{row['same_expression_other_words']} same expression in other words, "
                      f"{row['reordered_twin']} reordered twins")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
