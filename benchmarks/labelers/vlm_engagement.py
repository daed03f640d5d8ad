"""Does visual engagement tell a vision-language model's right votes from its wrong ones? (VisConf sec. 4.2)

Samples ``--n`` rollouts per image question from ``--model`` with ``ttrl generate`` (the per-token
``visual_engagement`` and ``self_certainty`` recorded while sampling, as the ``visconf`` labeler reads them),
then prints, one run, side by side:

* the AUROC of right against wrong rollouts (an answer equal to gold) of each rollout score: ``V`` (mean visual
  engagement), ``C`` (mean calibrated self-certainty, calibrated within the question, so only its
  within-question figure compares like with like) and VisConf's ``Z = V * C``, over all rollouts pooled and
  within each question (the mean over questions with right and wrong rollouts: what a labeler ranking one
  question's votes sees);
* the label accuracy of ``majority`` and ``visconf`` on the same votes, and of ``visconf`` without ``V``
  (``Z = C``).

The ``ttrl demo --part vlm`` SFT checkpoint on its tinted questions::

    python -m benchmarks.labelers.vlm_engagement --model outputs/demo_vlm/starts/start0/<version>/checkpoints/<file>.ckpt \\
        --data outputs/demo_vlm/questions/train/questions.jsonl

The pool is written under ``--workdir`` (a rerun continues it); the JSON report to ``--out``.
"""
from __future__ import annotations

import argparse
import os

from benchmarks.common import write_json


def _auroc(scores: list[float], right: list[bool]) -> float | None:
    """torchmetrics' AUROC of right (positive) against wrong rollouts; None without both kinds."""
    import torch
    from torchmetrics.functional.classification import binary_auroc

    if all(right) or not any(right):
        return None
    return float(binary_auroc(torch.tensor(scores, dtype=torch.float64), torch.tensor([int(r) for r in right])))


def rollout_scores(rollouts: list[dict]) -> dict[str, list[float]]:
    """Per rollout of one question: ``V`` (mean visual engagement), ``C`` (mean calibrated self-certainty,
    ``signals.calibrate_confidence`` over the question's rollouts) and ``Z`` (``signals.visconf_score``)."""
    import torch

    from ttrl_lightning.signals import calibrate_confidence, visconf_score

    sc = [torch.tensor(r["self_certainty"], dtype=torch.float32) for r in rollouts]
    cal = calibrate_confidence(sc)
    v = [torch.tensor(r["visual_engagement"], dtype=torch.float32) for r in rollouts]
    return {"V": [float(x.mean()) for x in v], "C": [float(c.mean()) for c in cal],
            "Z": [float(visconf_score(x, c, None)) for x, c in zip(v, cal)]}


def analyse(records: list[dict]) -> dict:
    """The report of the module docstring for pool ``records`` (each with ``gold`` and its ``rollouts``)."""
    from ttrl_lightning.pseudo_labels import pseudo_label

    pooled: dict[str, list[float]] = {"V": [], "C": [], "Z": []}
    pooled_right: list[bool] = []
    within: dict[str, list[float]] = {"V": [], "C": [], "Z": []}
    labels = {"majority": 0, "visconf": 0, "visconf_without_V": 0}
    for rec in records:
        rollouts, gold = rec["rollouts"], str(rec["gold"])
        if any(r.get("visual_engagement") is None for r in rollouts):
            raise SystemExit(f"{rec['id']}: rollouts without visual_engagement (not an image question?)")
        right = [r["answer"] == gold for r in rollouts]
        scores = rollout_scores(rollouts)
        for name, values in scores.items():
            pooled[name] += values
            if 0 < sum(right) < len(right):
                within[name].append(_auroc(values, right))
        pooled_right += right
        without_v = [{k: v for k, v in r.items() if k != "visual_engagement"} for r in rollouts]
        for name, votes, method in (("majority", rollouts, "majority"), ("visconf", rollouts, "visconf"),
                                    ("visconf_without_V", without_v, "visconf")):
            labels[name] += int(pseudo_label(method, votes).label == gold)
    n = len(records)
    return {
        "questions": n, "rollouts": len(pooled_right), "right_share": sum(pooled_right) / len(pooled_right),
        "auroc_pooled": {k: _auroc(v, pooled_right) for k, v in pooled.items()},
        "auroc_within_question": {k: sum(v) / len(v) if v else None for k, v in within.items()},
        "mixed_questions": len(within["V"]),
        "label_accuracy": {k: v / n for k, v in labels.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a vision-language model: a ttrl fit .ckpt, a folder or tiny:")
    p.add_argument("--data", required=True, help="an image question file with gold answers")
    p.add_argument("--n", type=int, default=16, help="rollouts per question (default: 16, the demo's votes)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="outputs/bench/vlm_engagement")
    p.add_argument("--out", default="outputs/bench/vlm_engagement.json")
    args = p.parse_args(argv)

    from ttrl_lightning.cli import main as ttrl_main
    from ttrl_lightning.data.pool_files import read_records

    os.makedirs(args.workdir, exist_ok=True)
    pool = os.path.join(args.workdir, "pool.jsonl")
    rc = ttrl_main(["generate", "--model", args.model, "--data", args.data, "--out", pool, "--n", str(args.n),
                    "--temperature", str(args.temperature), "--top-p", str(args.top_p), "--top-k", "0",
                    "--max-new-tokens", str(args.max_new_tokens), "--seed", str(args.seed),
                    "--answer-extractor", "final_answer", "--no-progress"])
    if rc:
        return rc
    report = analyse(list(read_records(pool)))
    report["settings"] = {k: getattr(args, k) for k in ("model", "data", "n", "temperature", "top_p", "seed")}
    a, w = report["auroc_pooled"], report["auroc_within_question"]
    print(f"\n{report['questions']} questions x {args.n} rollouts, {100 * report['right_share']:.1f}% right")
    print(f"{'score':<8} {'AUROC, all rollouts':>20} {'AUROC within a question':>24}")
    for name, label in (("V", "V"), ("C", "C"), ("Z", "Z = V*C")):
        cells = ["n/a" if x is None else f"{x:.3f}" for x in (a[name], w[name])]
        print(f"{label:<8} {cells[0]:>20} {cells[1]:>24}")
    print(f"(within: the mean over the {report['mixed_questions']} questions with right and wrong rollouts)")
    print("label accuracy: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in report["label_accuracy"].items()))
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
