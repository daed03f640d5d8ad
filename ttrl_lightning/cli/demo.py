"""``ttrl demo``: the README's main job on the embedded default -- a tiny model improves itself on unlabeled
questions by test-time RL, on CPU, with no download.

1. ``ttrl fit --config configs/sft/tiny_ttrl.yaml``: SFT of a tiny randomly initialised Llama on generated
   two-number additions, few with two carries, in both the Solver format (``12+7=`` -> ``\\boxed{19}``) and
   Self-Harmony's fused Reframe-and-Solve format (``12+7= reframe:`` -> strategy, rewritten problem, solution);
   no trace shows a question of the TTRL runs' splits answered, as its question or as its rewritten problem
   (the splits are written to ``out/questions/`` first and passed to the SFT's ``exclude``);
2. accuracy of the SFT model on a separate, shifted, **unlabeled** split (``add2_carry``: two carries),
   sampled at the TTRL temperature: ``avg@k`` (one sample) and ``maj@k`` (the majority of k);
3. ``ttrl fit --config configs/ttrl/tiny_demo.yaml`` once per pseudo-labeler (``majority``, ``self_harmony``,
   ``pixel``), each from the same SFT checkpoint, training on those questions without their answers (the
   answers are read for the logged metrics only), with the EMA anchor as KL reference and the PID-controlled
   KL coefficient; then the same accuracy again.

It prints one table (accuracy before -> after as avg@k and maj@k, the run's label accuracy, token-KL P95 and
accepted updates per 1K questions), saves the plots ``ttrl_accuracy.png`` (validation avg@k over steps) and
``ttrl_kl.png`` (token-KL P95 over steps) and writes ``ttrl_report.json`` with ``report["labelers"][name]``
holding ``accuracy_before``, ``accuracy_after``, ``maj_accuracy_before``, ``maj_accuracy_after``,
``label_accuracy``, ``kl_p95``, ``accepted_per_1k`` and the label-vs-majority counts (Self-Harmony's claim:
labels right where the Solver's majority is wrong, ``recovered``, and the reverse, ``lost``).

The TTRL runs train on the first distinct questions of the shifted task's stream (``data.splits``); their
validation curve is held out (the next distinct questions, never trained on), and pixel's labelled dev-cal split
holds yet others. The demo runs under portable numerics by default (``cli.numerics``: PyTorch's AVX2 kernels,
``MKL_CBWR=AVX2``, 2 threads, in a child process), so its table is the same on every x86-64 CPU with AVX2;
``--numerics native`` keeps the machine's own kernels.

``ttrl demo --part vlm`` runs the vision-language demo instead (``cli.demo_vlm``): a tiny Qwen2-VL, SFT'd on
generated scene questions, trains on unlabeled scene questions with ``majority``, ``visconf``, ``pixel`` and the
``random_reward`` / ``gold_reward`` controls over 3 seeds. ``ttrl demo --part bon`` runs the earlier best-of-N
part: a synthetic rollout pool evaluated with VisConf's Table-1 protocol (its numbers describe the selection
rules, not a model).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from ..safe_files import atomic_write
from . import main as ttrl_main
from .arguments import positive_int, seed
from .configs import config_path
from .demo_runs import curve_mean, fit_in_process, last_checkpoint, logged_curves, run_sft, seed_args
from .demo_vlm import VLM_ARMS

SFT_CONFIG = "sft/tiny_ttrl.yaml"
TTRL_CONFIG = "ttrl/tiny_demo.yaml"
#: the pseudo-labelers the demo trains with, each with its own options (command-line overrides)
DEMO_LABELERS: dict[str, list[str]] = {
    "majority": [],
    # 8 + 8 votes (original + fused view), 4 + 4 trained: the same rows per question as majority's 16 / 8
    "self_harmony": ["--model.init_args.voting.num_votes", "8", "--model.init_args.voting.num_trained", "4"],
    "pixel": [],
}
#: the report's per-labeler fields (the table's columns)
REPORT_FIELDS = ("accuracy_before", "accuracy_after", "maj_accuracy_before", "maj_accuracy_after",
                 "label_accuracy", "kl_p95", "accepted_per_1k")


def _accuracy(policy, tokenizer, questions: list[dict], k: int, temperature: float, max_new_tokens: int,
              seed_value: int, extractor: str) -> dict[str, float]:
    from ..answers import ANSWER_EXTRACTORS
    from ..eval.sampled import evaluate_sampled
    from ..rollout import SamplingParams

    params = SamplingParams(n=k, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed_value)
    metrics, _ = evaluate_sampled(policy, tokenizer, questions, k, params, batch_size=32, progress=True,
                                  extract=ANSWER_EXTRACTORS[extractor])
    return {"avg": metrics.avg_at_k, "maj": metrics.maj_at_k, "pass": metrics.pass_at_k}


def _plot(report: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..safe_files import atomic_write_path

    for name, key, ylabel in (("ttrl_accuracy.png", "val/avg@", "validation avg@k (%)"),
                              ("ttrl_kl.png", "train/kl_p95", "token KL to the EMA anchor, P95")):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for labeler, entry in report["labelers"].items():
            curve = next((v for k, v in entry["curves"].items() if k.startswith(key)), [])
            if curve:
                xs, ys = zip(*curve)
                ax.plot(xs, [100 * y for y in ys] if key.startswith("val") else ys, marker=".", label=labeler)
        ax.set_xlabel("TTRL step")
        ax.set_ylabel(ylabel)
        if key == "train/kl_p95":
            ax.axhspan(0.10, 0.20, color="0.9", label="KL corridor")
        ax.legend(fontsize=8)
        fig.tight_layout()
        with atomic_write_path(os.path.join(out, name)) as tmp:
            fig.savefig(tmp, format="png", dpi=120)
        plt.close(fig)


def _table(report: dict) -> str:
    k = report["settings"]["k"]
    head = (f"{'labeler':<13} {'avg@' + str(k) + ' before -> after':>24} {'maj@' + str(k) + ' before -> after':>24} "
            f"{'label acc':>9} {'KL P95':>7} {'acc/1K':>7} {'recovered/lost':>15}")
    lines = [head, "-" * len(head)]
    for name, e in report["labelers"].items():
        pct = lambda v: "  n/a" if v is None else f"{100 * v:5.1f}"  # noqa: E731
        lines.append(
            f"{name:<13} {pct(e['accuracy_before']) + ' -> ' + pct(e['accuracy_after']):>24} "
            f"{pct(e['maj_accuracy_before']) + ' -> ' + pct(e['maj_accuracy_after']):>24} "
            f"{pct(e['label_accuracy']):>9} {'n/a' if e['kl_p95'] is None else format(e['kl_p95'], '.3f'):>7} "
            f"{round(e['accepted_per_1k']):>7} "
            f"{str(e['label_vs_majority']['recovered']) + '/' + str(e['label_vs_majority']['lost']):>15}")
    return "\n".join(lines)


def ttrl_splits(data, seed_value: int | None = None, n_questions: int | None = None) -> dict[str, list[dict]]:
    """The TTRL runs' ``train``, ``validation`` and ``calibration`` questions, cut by the ``QuestionDataModule`` the
    TTRL config's ``data.init_args`` build (``seed_value`` / ``n_questions``: instead of the config's seed and
    trained-on count)."""
    import inspect

    from ..data.questions import QuestionDataModule

    names = inspect.signature(QuestionDataModule).parameters
    args = {k: v for k, v in vars(data).items() if k in names}
    if seed_value is not None:
        args["seed"] = seed_value
    if n_questions is not None:
        args["n"] = n_questions
    dm = QuestionDataModule(**args)
    return {"train": dm.train_questions(), "validation": dm.val_questions(),
            "calibration": dm.calibration_questions()}


def write_ttrl_questions(out: str, data, seed_value: int, n_questions: int) -> dict[str, str]:
    """The TTRL runs' splits (:func:`ttrl_splits`) as question files ``out/questions/<split>.jsonl``; their paths
    (the splits that are empty are left out)."""
    from ..data.questions import write_questions

    paths = {}
    for name, qs in ttrl_splits(data, seed_value, n_questions).items():
        if qs:
            paths[name] = os.path.join(out, "questions", f"{name}.jsonl")
            write_questions(paths[name], qs)
    return paths


def run_ttrl_demo(out: str, labelers: list[str], seed_value: int, sft_steps: int | None, ttrl_steps: int | None,
                  k: int, questions: int | None, reuse_sft: bool, ttrl_seed: int | None = None,
                  extra_args: dict[str, list[str]] | None = None, sft_checkpoint: str | None = None
                  ) -> dict[str, Any]:
    """SFT (or reuse it), accuracy before, TTRL per labeler, accuracy after (the module docstring).

    ``seed_value`` seeds the SFT, the questions and the evaluation's sampling; ``ttrl_seed`` (default
    ``seed_value``) the TTRL runs (``benchmarks/training/ttrl_seeds.py`` varies it alone); ``extra_args``: more
    ``ttrl fit`` options per labeler; ``sft_checkpoint``: start from this checkpoint instead of an SFT run."""
    from ..data.questions import read_questions
    from ..models import load_model, load_tokenizer
    from .fit import parse_config

    t0 = time.perf_counter()
    steps = 2 + len(labelers)
    base = parse_config(["--config", config_path(TTRL_CONFIG)])
    h = base.model.init_args
    data = base.data.init_args
    n_questions = questions or data.n
    # the TTRL runs' splits, as their QuestionDataModule cuts them, written out: the SFT skips every question
    paths = write_ttrl_questions(out, data, seed_value, n_questions)
    unlabeled = read_questions(paths["train"])
    sft_root = os.path.join(out, "sft")
    ckpt = sft_checkpoint or (last_checkpoint(sft_root) if reuse_sft else None)
    print(f"== 1/{steps}  ttrl fit: SFT of a tiny Llama on generated additions (Solver + fused "
          "Reframe-and-Solve formats), none of them a TTRL question" + (f" -- reusing {ckpt}" if ckpt else ""),
          flush=True)
    if ckpt is None:
        ckpt = run_sft(SFT_CONFIG, sft_root, seed_value, sft_steps,
                       ["--data.init_args.exclude", json.dumps(list(paths.values()))])
    t_sft = time.perf_counter() - t0
    tokenizer = load_tokenizer(ckpt)
    eval_kw = dict(k=k, temperature=h.sampling.temperature, max_new_tokens=h.sampling.max_new_tokens,
                   seed_value=seed_value, extractor=h.voting.answer_extractor)
    print(f"\n== 2/{steps}  accuracy of the SFT model on {n_questions} unlabeled, shifted questions "
          f"({data.task}, {k} samples each at T={h.sampling.temperature})", flush=True)
    before = _accuracy(load_model(ckpt, tokenizer).eval(), tokenizer, unlabeled, **eval_kw)
    print(f"avg@{k} {100 * before['avg']:.1f}%  maj@{k} {100 * before['maj']:.1f}%", flush=True)

    report: dict[str, Any] = {
        "settings": {"seed": seed_value, "ttrl_seed": seed_value if ttrl_seed is None else ttrl_seed, "k": k,
                     "questions": n_questions, "task": data.task, "question_files": paths,
                     "temperature": h.sampling.temperature, "sft_checkpoint": ckpt, "ttrl_config": TTRL_CONFIG,
                     "num_votes": h.voting.num_votes, "num_generations": h.voting.num_trained,
                     "answer_extractor": h.voting.answer_extractor},
        "before": before, "labelers": {}, "seconds": {"sft": round(t_sft, 1)},
    }
    for i, name in enumerate(labelers, start=3):
        print(f"\n== {i}/{steps}  ttrl fit: test-time RL with `{name}` pseudo-labels from the SFT checkpoint",
              flush=True)
        t1 = time.perf_counter()
        run_seed = seed_value if ttrl_seed is None else ttrl_seed
        args = ["--config", config_path(TTRL_CONFIG), "--model.init_args.policy.model", ckpt,
                "--model.init_args.voting.labeler", name, *seed_args(run_seed, seed_value),
                "--data.init_args.n", str(n_questions),
                "--trainer.default_root_dir", os.path.join(out, "ttrl", name), *DEMO_LABELERS.get(name, []),
                *(extra_args or {}).get(name, [])]
        if ttrl_steps:
            args += ["--trainer.max_steps", str(ttrl_steps)]
        cli = fit_in_process(args)
        module = cli.model
        after = _accuracy(module.policy.eval(), module.tokenizer, unlabeled, **eval_kw)
        curves = logged_curves(cli.trainer)
        counters = module.counters
        seen = max(counters.questions_seen, 1)
        entry = {
            "accuracy_before": before["avg"], "accuracy_after": after["avg"],
            "maj_accuracy_before": before["maj"], "maj_accuracy_after": after["maj"],
            "pass_before": before["pass"], "pass_after": after["pass"],
            "label_accuracy": curve_mean(curves.get("train/label_accuracy", [])),
            "kl_p95": curve_mean(curves.get("train/kl_p95", [])),
            "kl_p95_max": max((v for _, v in curves.get("train/kl_p95", [])), default=None),
            "accepted_per_1k": 1000.0 * counters.questions_accepted / seen,
            "coverage": counters.questions_accepted / seen,
            "label_vs_majority": dict(counters.label_vs_majority),
            "steps": int(cli.trainer.global_step), "seconds": round(time.perf_counter() - t1, 1),
            "curves": curves,
        }
        report["labelers"][name] = entry
        print(f"{name}: avg@{k} {100 * before['avg']:.1f}% -> {100 * after['avg']:.1f}%, "
              f"maj@{k} {100 * before['maj']:.1f}% -> {100 * after['maj']:.1f}%", flush=True)
    report["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    return report


def demo_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ttrl demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="output folder (default: outputs/demo; --part vlm: outputs/demo_vlm)")
    p.add_argument("--part", choices=("ttrl", "vlm", "bon"), default="ttrl",
                   help="ttrl: the test-time RL demo (default); vlm: the vision-language one (a tiny Qwen2-VL on "
                        "scene questions); bon: best-of-N on a synthetic pool")
    p.add_argument("--labelers", nargs="+", choices=sorted(DEMO_LABELERS), default=list(DEMO_LABELERS),
                   help="pseudo-labelers to train with (default: all)")
    p.add_argument("--arms", nargs="+", choices=VLM_ARMS, default=list(VLM_ARMS),
                   help="--part vlm: the arms (labelers and controls) to train with (default: all)")
    p.add_argument("--seeds", nargs="+", type=seed, default=[0, 1, 2],
                   help="--part vlm: the TTRL runs' seeds, one run per arm and seed (default: 0 1 2)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the SFT, the questions and the sampling")
    p.add_argument("--sft-steps", type=positive_int, default=None, help="SFT steps (default: the config's)")
    p.add_argument("--ttrl-steps", type=positive_int, default=None, help="TTRL steps (default: the config's)")
    p.add_argument("--k", type=positive_int, default=8, help="samples per question for avg@k / maj@k")
    p.add_argument("--questions", type=positive_int, default=None,
                   help="unlabeled questions (default: the TTRL config's)")
    p.add_argument("--reuse-sft", action="store_true", help="start from an earlier SFT run in --out")
    p.add_argument("--sft-checkpoint", default=None, help="start from this SFT checkpoint (skips the SFT step)")
    p.add_argument("--pool-questions", type=positive_int, default=600,
                   help="questions in the synthetic pool (--part bon)")
    p.add_argument("--numerics", choices=("portable", "native"), default="portable",
                   help="portable (default): the same float results, so the same table, on every x86-64 CPU with "
                        "AVX2 (cli.numerics: PyTorch's AVX2 kernels, MKL_CBWR=AVX2, 2 threads); native: this "
                        "machine's own kernels")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = "outputs/demo_vlm" if args.part == "vlm" else "outputs/demo"
    from .numerics import is_portable, numerics_report, run_portable

    if args.numerics == "portable" and not is_portable():
        return run_portable(["demo", *argv])
    os.makedirs(args.out, exist_ok=True)
    if args.part == "bon":
        return _bon_part(args.out, args.pool_questions)
    if args.part == "vlm":
        return _vlm_part(args)
    numerics = numerics_report()
    if args.numerics == "portable" and numerics["cpu_capability"] != "AVX2":
        print(f"note: this CPU runs PyTorch's {numerics['cpu_capability']} kernels, not AVX2: the figures may differ "
              "from the README's", flush=True)
    report = run_ttrl_demo(args.out, args.labelers, args.seed, args.sft_steps, args.ttrl_steps, args.k,
                           args.questions, args.reuse_sft, sft_checkpoint=args.sft_checkpoint)
    report["settings"]["numerics"] = {"mode": args.numerics, **numerics}
    _plot(report, args.out)
    path = os.path.join(args.out, "ttrl_report.json")
    with atomic_write(path) as fh:
        json.dump(report, fh, indent=1, allow_nan=False)
        fh.write("\n")
    print("\n" + _table(report))
    print(f"\nreport: {path}; plots: {os.path.join(args.out, 'ttrl_accuracy.png')}, "
          f"{os.path.join(args.out, 'ttrl_kl.png')} ({report['seconds']['total']:.0f} s)")
    return 0


def _vlm_part(args: argparse.Namespace) -> int:
    from .demo_vlm import plot_vlm_curves, run_vlm_demo, vlm_table
    from .numerics import numerics_report

    report = run_vlm_demo(args.out, args.arms, args.seed, args.seeds, args.sft_steps, args.ttrl_steps,
                          args.sft_checkpoint or (last_checkpoint(os.path.join(args.out, "sft"))
                                                  if args.reuse_sft else None))
    report["settings"]["numerics"] = {"mode": args.numerics, **numerics_report()}
    plot = os.path.join(args.out, "vlm_accuracy.png")
    plot_vlm_curves(report, plot)
    path = os.path.join(args.out, "vlm_report.json")
    with atomic_write(path) as fh:
        json.dump(report, fh, indent=1, allow_nan=False)
        fh.write("\n")
    print("\n" + vlm_table(report))
    print(f"\nreport: {path}; plot: {plot} ({report['seconds']['total']:.0f} s)")
    return 0


def _bon_part(out: str, questions: int) -> int:
    pool = os.path.join(out, "pool.jsonl")
    print("== best-of-N on a synthetic pool (its numbers describe the selection rules, not a model)")
    rc = ttrl_main(["pool", "simulate", "--out", pool, "--questions", str(questions), "--seed", "0"])
    if rc:
        return rc
    return ttrl_main(["bon", "--pool", pool, "--out", os.path.join(out, "bon_report.json")])
