"""How "distinct" the shipped benchmarks' splits are. Splits are disjoint by problem (``data.splits.question_key``:
a sum's or a product's terms in any order are one key); this counts, for every pair of splits, the questions of the
later split that are a problem of the earlier one in another form, so that the claim is checked, not assumed:

- **same expression, other words**: the arithmetic expression of the prompt, its terms in any order, is one of the
  other split's, the wording is not (reasoning-gym words one ``chain_sum`` expression several ways);
- **reordered twin**: the same problem (``data.splits.problem_key``: the same signed terms) written in another order
  (``7 + 5`` for ``5 + 7``; ``12+7=`` for ``7+12=``).

And, for a study that starts from SFT (the demo), how many questions of each TTRL split the SFT's traces show
answered, by problem (as its question, its reordered twin, or a fused trace's rewritten question): with the
study's exclusion (its split files, ``start.exclude_splits``), which must be 0, and with none, for scale.

Splits: the SmolLM2 curriculum study's (``configs/study/smollm2_curriculum.yaml``) and the text demo's
(``configs/study/demo.yaml``), as ``ttrl study`` writes them. Prints one line per pair with a count above 0 and the
SFT's counts (a study whose splits cannot be drawn is one line saying why), writes JSON.

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


def twins(splits: dict[str, list[dict]]) -> list[dict]:
    """Per ordered pair (earlier, later) of splits: the later split's questions that are an earlier question's
    expression (its terms in any order) in other words, or its reordered twin (its problem, not its prompt)."""
    from ttrl_lightning.data.splits import problem_key, problem_text, prompt_key

    info = {}
    for name, qs in splits.items():
        rows = []
        for q in qs:
            text = problem_text(q)
            expr = expression(text)
            rows.append((prompt_key(text), problem_key(text), problem_key(expr) if expr else None))
        info[name] = rows
    names = list(splits)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            prompts = {p for p, _, _ in info[a]}
            problems = {k for _, k, _ in info[a]}
            exprs = {e for _, _, e in info[a] if e}
            words = sum(1 for _, k, e in info[b] if e in exprs and k not in problems)
            reorder = sum(1 for p, k, _ in info[b] if k in problems and p not in prompts)
            out.append({"earlier": a, "later": b, "later_size": len(info[b]), "same_expression_other_words": words,
                        "reordered_twin": reorder})
    return out


def study_splits(config: str) -> dict[str, list[dict]]:
    """A study's splits (``configs/study/<config>``), as ``ttrl study`` writes them."""
    import tempfile

    from ttrl_lightning.data.questions import read_questions
    from ttrl_lightning.study.questions import build_questions
    from ttrl_lightning.study.spec import load_spec

    with tempfile.TemporaryDirectory() as folder:
        paths = build_questions(load_spec(config).questions, folder)
        return {name: read_questions(path) for name, path in paths.items()}


def sft_answered(config: str) -> list[dict]:
    """Per TTRL split of a study that starts from SFT (``configs/study/<config>``, ``start.kind: sft``): how many of
    its questions the SFT's traces (training and validation, the start config's seed) show answered, by problem
    (``data.tasks.trace_problems`` and ``data.splits.question_key``), with the study's exclusion and with none."""
    import inspect
    import tempfile

    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.fit import parse_config
    from ttrl_lightning.data.datamodules import SFTDataModule
    from ttrl_lightning.data.questions import read_questions
    from ttrl_lightning.data.splits import keys_of, question_key
    from ttrl_lightning.data.tasks import trace_problems
    from ttrl_lightning.study.questions import build_questions
    from ttrl_lightning.study.spec import load_spec

    spec = load_spec(config)
    sft = parse_config(["--config", config_path(spec.start.config)]).data.init_args
    args = {k: v for k, v in vars(sft).items() if k in inspect.signature(SFTDataModule).parameters}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        paths = build_questions(spec.questions, folder)
        keys = {name: keys_of(read_questions(path)) for name, path in paths.items()}
        study = list(paths.values()) if spec.start.exclude_splits else (sft.exclude or [])
        for exclusion, exclude in (("study", study), ("none", [])):
            dm = SFTDataModule(**{**args, "exclude": exclude})
            shown = {question_key({"prompt": q}) for n, seed in ((sft.n_train, sft.seed), (sft.n_val, sft.seed + 1))
                     for trace in dm.traces(n, seed) for q in trace_problems(trace)}
            rows += [{"exclusion": exclusion, "split": name, "size": len(k), "answered": len(k & shown)}
                     for name, k in keys.items()]
    return rows


def real_model_splits() -> dict[str, list[dict]]:
    return study_splits("study/smollm2_curriculum.yaml")


def demo_splits() -> dict[str, list[dict]]:
    splits = study_splits("study/demo.yaml")
    return {"demo/trained_on": splits["train"], "demo/validation": splits["validation"],
            "demo/calibration": splits["calibration"]}


def main(argv: list[str] | None = None) -> int:
    from ttrl_lightning.errors import UserError

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/bench/split_twins.json")
    args = p.parse_args(argv)
    report = {}
    for name, draw in (("smollm2_curriculum", real_model_splits), ("demo", demo_splits)):
        print(f"{name}:")
        try:
            splits = draw()
        except UserError as err:  # a config whose splits cannot be drawn: said, and the others still counted
            report[name] = {"error": str(err)}
            print(f"  cannot draw its splits: {err}")
            continue
        found = twins(splits)
        report[name] = found
        shown = [row for row in found if row["same_expression_other_words"] or row["reordered_twin"]]
        for row in shown:
            print(f"  {row['later']} ({row['later_size']}) vs {row['earlier']}: "
                  f"{row['same_expression_other_words']} same expression in other words, "
                  f"{row['reordered_twin']} reordered twins")
        if not shown:
            print(f"  every pair of its {len(splits)} splits: 0 same expression in other words, 0 reordered twins")
        if name == "demo":
            report["demo_sft"] = answered = sft_answered("study/demo.yaml")
            for exclusion in ("study", "none"):
                counts = ", ".join(f"{r['split']} {r['answered']}/{r['size']}" for r in answered
                                   if r["exclusion"] == exclusion)
                print(f"  SFT traces answering a TTRL question, by problem ({exclusion} exclusion): {counts}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
